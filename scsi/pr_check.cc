// SPDX-License-Identifier: MIT
// scsi/pr_check.cc - which commands a reservation held by another I_T nexus lets through
// (the kernel's target_check_reservation): SPC-4 5.13.1 table 66 and SBC-3 4.17 table 13 for
// persistent reservations, SPC-2 annex B (column [A]) for RESERVE(6)/(10).
//
// The tables list a command per row and, per column (reservation type; registered or not),
// "allowed" or "conflict". Their rows fall into a few patterns (PrAccess below); a command
// is put into one by its operation code and, where the tables split a command, by its
// service action or a CDB field. The command families (spc.cc, sbc.cc) are not consulted:
// the tables speak of commands, whatever executes them.
#include "scsi/pr_internal.h"

namespace ulp::scsi
{

// Operation codes of the tables that the core does not (yet) name in core_internal.h.
namespace
{

enum : uint8_t {
	OP_RECEIVE_DIAGNOSTIC = 0x1c,
	OP_RECEIVE_COPY_RESULTS = 0x84,
	OP_ACCESS_CONTROL_IN = 0x86,
	OP_ACCESS_CONTROL_OUT = 0x87,
	OP_READ_ATTRIBUTE = 0x8c,
	OP_READ_BUFFER_16 = 0x9b,
	OP_SECURITY_PROTOCOL_IN = 0xa2,
	OP_SERVICE_ACTION_IN_12 = 0xab,
};

// Service actions the tables single out.
enum : uint8_t {
	MI_REPORT_IDENTIFYING_INFO = 0x05, // SPC-2's REPORT DEVICE IDENTIFIER
	MI_REPORT_TARGET_PGS = 0x0a,
	MI_REPORT_ALIASES = 0x0b,
	MI_REPORT_PRIORITY = 0x0e,
	MI_REPORT_TIMESTAMP = 0x0f,
	MI_MANAGEMENT_PROTOCOL_IN = 0x10,
	SAI12_READ_MEDIA_SERIAL = 0x01,
	VL_READ_32 = 0x09, // variable-length CDB (7Fh) service actions, bytes 8..9
	VL_VERIFY_32 = 0x0a,
};

// The patterns of table 66 / table 13 rows, for an I_T nexus that does not hold the
// reservation ("A" allowed, "C" conflict; columns WE, EA, WE-RO/AR, EA-RO/AR, each for a
// registered and a not registered I_T nexus):
enum class PrAccess : uint8_t {
	Allowed, // A A  A A  A A  A A: INQUIRY, REPORT LUNS, TEST UNIT READY, READ CAPACITY, ...
	Read,    // A A  C C  A A  A C: reads of the medium or of state (READ, MODE SENSE, ...)
	Write,   // C C  C C  A C  A C: everything that changes something, and the rest
	PrOut,   // table 67, by service action: decided where the command runs (pr_out.cc)
};

PrAccess classify(const Cmd *cmd)
{
	const uint8_t *c = cmd->cdb;
	switch (c[0]) {
	case OP_TEST_UNIT_READY: // table 66 footnote: SPC-2 devices may conflict; we do not
	case OP_REQUEST_SENSE:
	case OP_INQUIRY:
	case OP_LOG_SENSE:
	case OP_REPORT_LUNS:
	case OP_PERSISTENT_RESERVE_IN:
	case OP_ACCESS_CONTROL_IN:
	case OP_ACCESS_CONTROL_OUT:
	case OP_READ_CAPACITY_10:
		return PrAccess::Allowed;
	case OP_RESERVE_6:
	case OP_RESERVE_10:
	case OP_RELEASE_6:
	case OP_RELEASE_10:
		// SPC-4 5.13.3 (CRH 1): what RESERVE and RELEASE do in the presence of a
		// persistent reservation is the commands' own business (pr_spc2.cc).
		return PrAccess::Allowed;
	case OP_PERSISTENT_RESERVE_OUT:
		return PrAccess::PrOut;
	case OP_SERVICE_ACTION_IN_16:
		switch (c[1] & 0x1f) {
		case SAI_READ_CAPACITY_16:
			return PrAccess::Allowed;
		case SAI_GET_LBA_STATUS:
			return PrAccess::Read;
		default:
			return PrAccess::Write;
		}
	case OP_SERVICE_ACTION_IN_12:
		return (c[1] & 0x1f) == SAI12_READ_MEDIA_SERIAL ? PrAccess::Allowed
		                                                : PrAccess::Write;
	case OP_MAINTENANCE_IN:
		switch (c[1] & 0x1f) {
		case MI_REPORT_IDENTIFYING_INFO:
		case MI_REPORT_TARGET_PGS:
		case MI_REPORT_ALIASES:
		case MI_REPORT_PRIORITY:
		case MI_REPORT_TIMESTAMP:
			return PrAccess::Allowed;
		case MI_REPORT_SUPPORTED_OPCODES:
		case MI_REPORT_SUPPORTED_TMFS:
		case MI_MANAGEMENT_PROTOCOL_IN:
			return PrAccess::Read;
		default:
			return PrAccess::Write;
		}
	case OP_MODE_SENSE_6:
	case OP_MODE_SENSE_10:
	case OP_READ_BUFFER:
	case OP_READ_BUFFER_16:
	case OP_RECEIVE_DIAGNOSTIC:
	case OP_READ_ATTRIBUTE:
	case OP_RECEIVE_COPY_RESULTS:
	case OP_SECURITY_PROTOCOL_IN:
	// SBC-3 table 13
	case OP_READ_6:
	case OP_READ_10:
	case OP_READ_12:
	case OP_READ_16:
	case OP_VERIFY_10:
	case OP_VERIFY_12:
	case OP_VERIFY_16:
	case OP_PRE_FETCH_10:
	case OP_PRE_FETCH_16:
	case OP_READ_DEFECT_DATA_10:
	case OP_READ_DEFECT_DATA_12:
		return PrAccess::Read;
	case OP_VARIABLE_LENGTH: {
		const uint16_t sa = get_be16(c + 8);
		return sa == VL_READ_32 || sa == VL_VERIFY_32 ? PrAccess::Read : PrAccess::Write;
	}
	case OP_PREVENT_ALLOW:
		// SBC-3 table 13: PREVENT 00b is allowed everywhere; preventing removal is not.
		return (c[4] & 0x03) == 0 ? PrAccess::Allowed : PrAccess::Write;
	case OP_START_STOP_UNIT:
		// SBC-3 table 13: START 1 with POWER CONDITION 0h (spinning up) is allowed
		// everywhere; stopping or changing the power condition is not.
		return (c[4] & 0x01) && (c[4] >> 4) == 0 ? PrAccess::Allowed : PrAccess::Write;
	default:
		// WRITE*, WRITE SAME, UNMAP, COMPARE AND WRITE, SYNCHRONIZE CACHE, MODE SELECT,
		// LOG SELECT, WRITE BUFFER, SEND DIAGNOSTIC, FORMAT UNIT, SANITIZE, EXTENDED COPY,
		// READ LONG, ... and whatever the tables do not list: conflict unless registered
		// under an RO/AR type.
		return PrAccess::Write;
	}
}

// Table 66 for a non-holder under reservation type t.
bool pr_conflicts(PrAccess a, PrType t, bool registered)
{
	if (a == PrAccess::Allowed || a == PrAccess::PrOut)
		return false;
	if (registered && pr_registrants_share(t))
		return false;
	return !(a == PrAccess::Read && pr_write_exclusive(t));
}

// SPC-2 annex B, column [A] ("logical unit is reserved by another initiator"): these run,
// everything else conflicts. RELEASE is a no-op for a non-holder (SPC-2 7.17); the SBC rows
// are READ CAPACITY and spinning the medium up. REPORT TARGET PORT GROUPS too, as SPC-3
// added it (multipath path checkers must work on a reserved LU).
bool spc2_allowed(const Cmd *cmd)
{
	const uint8_t *c = cmd->cdb;
	switch (c[0]) {
	case OP_INQUIRY:
	case OP_REQUEST_SENSE:
	case OP_LOG_SENSE:
	case OP_REPORT_LUNS:
	case OP_RELEASE_6:
	case OP_RELEASE_10:
	case OP_READ_CAPACITY_10:
		return true;
	case OP_SERVICE_ACTION_IN_16:
		return (c[1] & 0x1f) == SAI_READ_CAPACITY_16;
	case OP_MAINTENANCE_IN:
		return (c[1] & 0x1f) == MI_REPORT_IDENTIFYING_INFO ||
		       (c[1] & 0x1f) == MI_REPORT_TARGET_PGS;
	case OP_PREVENT_ALLOW:
		return (c[4] & 0x03) == 0;
	case OP_START_STOP_UNIT:
		return (c[4] & 0x01) && (c[4] >> 4) == 0;
	default:
		return false;
	}
}

} // namespace

Sense pr_check(Cmd *cmd)
{
	PrState &pr = pr_of(*cmd->lu);
	if (!pr.reserved.load(std::memory_order_acquire))
		return Sense::None;
	const NexusId &n = cmd->sess->id();
	const uint8_t op = cmd->cdb[0];
	std::lock_guard g(pr.lock);
	if (pr.spc2) {
		// SPC-2 5.5.1: while an SPC-2 reservation exists, PERSISTENT RESERVE IN and OUT
		// conflict for every initiator, the holder included.
		if (op == OP_PERSISTENT_RESERVE_IN || op == OP_PERSISTENT_RESERVE_OUT)
			return Sense::ReservationConflict;
		if (*pr.spc2 != n && !spc2_allowed(cmd))
			return Sense::ReservationConflict;
		return Sense::None;
	}
	if (pr.type == PrType::None)
		return Sense::None;
	const Registration *r = pr.find(n);
	if (pr.holds(r))
		return Sense::None;
	return pr_conflicts(classify(cmd), pr.type, r != nullptr) ? Sense::ReservationConflict
	                                                          : Sense::None;
}

} // namespace ulp::scsi
