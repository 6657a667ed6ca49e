// SPDX-License-Identifier: MIT
// scsi/opcodes.cc - what the device server says it supports: the table of every command of
// the project (SPC-4 here and in spc*.cc, SBC-3 in sbc.cc, reservations in pr.cc), and the
// two MAINTENANCE IN reports built from it and from the task management functions of
// tmr.cc: REPORT SUPPORTED OPERATION CODES (SPC-4 6.35) and REPORT SUPPORTED TASK
// MANAGEMENT FUNCTIONS (SPC-4 6.36).
//
// CDB usage data (SPC-4 6.35.3): a 1 for every bit of a field the command defines and the
// parser accepts: it acts on it, checks it (RDPROTECT must be 0: no protection
// information), or honours it as the hint it is (DPO, IMMED: completing after the work is
// what IMMED 0 asks and what IMMED 1 allows). A 0 for reserved and obsolete bits (checked
// or not), for fields ignored (GROUP NUMBER: no grouping function), and for the CONTROL
// byte: NACA is not supported (the core refuses NACA 1 in every CDB, core.cc parse, as
// INVALID FIELD IN CDB: only 0 is accepted, as in a reserved bit).
#include "scsi/opcodes.h"

#include "scsi/spc.h"
#include "scsi/xcopy.h"

#include <algorithm>
#include <vector>

namespace ulp::scsi
{

namespace
{

bool needs_thin(const LogicalUnit &lu)
{
	return lu.thin();
}

// WRITE ATOMIC (16) needs a backstore that writes indivisibly (sbc_atomic.cc).
bool needs_atomic(const LogicalUnit &lu)
{
	return lu.atomic_max_blocks() > 0;
}

// REPORT TARGET PORT GROUPS needs ALUA on the LU, SET TARGET PORT GROUPS its explicit
// mode (scsi/alua.h), both changeable at run time.
bool has_alua(const LogicalUnit &lu)
{
	return lu.alua_.enabled();
}

bool has_explicit_alua(const LogicalUnit &lu)
{
	return lu.alua_.tpgs() & TPGS_EXPLICIT;
}

// clang-format off
constexpr OpcodeInfo kOpcodes[] = {
    // ---- SPC-4 (spc.cc, spc_inquiry.cc, spc_mode.cc, opcodes.cc) and SBC-3 (sbc.cc) ----
    {OP_TEST_UNIT_READY, 0, false, 6, {0x00, 0x00, 0x00, 0x00, 0x00, 0x00}, nullptr},
    // DESC (checked: descriptor format is not offered), ALLOCATION LENGTH.
    {OP_REQUEST_SENSE, 0, false, 6, {0x03, 0x01, 0x00, 0x00, 0xff, 0x00}, nullptr},
    // 21-bit LBA, TRANSFER LENGTH.
    {OP_READ_6, 0, false, 6, {0x08, 0x1f, 0xff, 0xff, 0xff, 0x00}, nullptr},
    {OP_WRITE_6, 0, false, 6, {0x0a, 0x1f, 0xff, 0xff, 0xff, 0x00}, nullptr},
    // EVPD, PAGE CODE, ALLOCATION LENGTH (CMDDT is obsolete: refused).
    {OP_INQUIRY, 0, false, 6, {0x12, 0x01, 0xff, 0xff, 0xff, 0x00}, nullptr},
    // PF, SP (refused: nothing is saveable), PARAMETER LIST LENGTH.
    {OP_MODE_SELECT_6, 0, false, 6, {0x15, 0x11, 0x00, 0x00, 0xff, 0x00}, nullptr},
    // SPC-2 RESERVE / RELEASE: the third-party and extent fields are obsolete.
    {OP_RESERVE_6, 0, false, 6, {0x16, 0x00, 0x00, 0x00, 0x00, 0x00}, nullptr},
    {OP_RELEASE_6, 0, false, 6, {0x17, 0x00, 0x00, 0x00, 0x00, 0x00}, nullptr},
    // DBD, PC and PAGE CODE, SUBPAGE CODE, ALLOCATION LENGTH.
    {OP_MODE_SENSE_6, 0, false, 6, {0x1a, 0x08, 0xff, 0xff, 0xff, 0x00}, nullptr},
    // IMMED, POWER CONDITION MODIFIER, POWER CONDITION, NO_FLUSH, LOEJ, START.
    {OP_START_STOP_UNIT, 0, false, 6, {0x1b, 0x01, 0x00, 0x0f, 0xf7, 0x00}, nullptr},
    // SELF-TEST CODE, PF, SELFTEST, DEVOFFL, UNITOFFL, PARAMETER LIST LENGTH.
    {OP_SEND_DIAGNOSTIC, 0, false, 6, {0x1d, 0xf7, 0x00, 0xff, 0xff, 0x00}, nullptr},
    // PREVENT.
    {OP_PREVENT_ALLOW, 0, false, 6, {0x1e, 0x00, 0x00, 0x00, 0x03, 0x00}, nullptr},
    // LOGICAL BLOCK ADDRESS and PMI are obsolete (refused unless zero).
    {OP_READ_CAPACITY_10, 0, false, 10,
     {0x25, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00}, nullptr},
    // RDPROTECT/WRPROTECT, DPO, FUA; LBA; TRANSFER LENGTH.
    {OP_READ_10, 0, false, 10,
     {0x28, 0xf8, 0xff, 0xff, 0xff, 0xff, 0x00, 0xff, 0xff, 0x00}, nullptr},
    {OP_WRITE_10, 0, false, 10,
     {0x2a, 0xf8, 0xff, 0xff, 0xff, 0xff, 0x00, 0xff, 0xff, 0x00}, nullptr},
    // WRPROTECT/VRPROTECT, DPO, BYTCHK; LBA; length.
    {OP_WRITE_VERIFY_10, 0, false, 10,
     {0x2e, 0xf6, 0xff, 0xff, 0xff, 0xff, 0x00, 0xff, 0xff, 0x00}, nullptr},
    {OP_VERIFY_10, 0, false, 10,
     {0x2f, 0xf6, 0xff, 0xff, 0xff, 0xff, 0x00, 0xff, 0xff, 0x00}, nullptr},
    // IMMED; LBA; NUMBER OF LOGICAL BLOCKS.
    // IMMED (completing after the range check is what both values allow); LBA;
    // PREFETCH LENGTH.
    {OP_PRE_FETCH_10, 0, false, 10,
     {0x34, 0x02, 0xff, 0xff, 0xff, 0xff, 0x00, 0xff, 0xff, 0x00}, nullptr},
    {OP_SYNCHRONIZE_CACHE_10, 0, false, 10,
     {0x35, 0x02, 0xff, 0xff, 0xff, 0xff, 0x00, 0xff, 0xff, 0x00}, nullptr},
    // REQ_PLIST, REQ_GLIST, DEFECT LIST FORMAT; ALLOCATION LENGTH.
    {OP_READ_DEFECT_DATA_10, 0, false, 10,
     {0x37, 0x00, 0x1f, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff, 0x00}, nullptr},
    // WRPROTECT, ANCHOR, UNMAP; LBA; NUMBER OF LOGICAL BLOCKS.
    {OP_WRITE_SAME_10, 0, false, 10,
     {0x41, 0xf8, 0xff, 0xff, 0xff, 0xff, 0x00, 0xff, 0xff, 0x00}, nullptr},
    // ANCHOR; PARAMETER LIST LENGTH.
    {OP_UNMAP, 0, false, 10,
     {0x42, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff, 0x00}, needs_thin},
    // SP and PPC (checked: both refused), PC and PAGE CODE, SUBPAGE CODE, PARAMETER
    // POINTER, ALLOCATION LENGTH (spc_log.cc).
    {OP_LOG_SENSE, 0, false, 10,
     {0x4d, 0x03, 0xff, 0xff, 0x00, 0xff, 0xff, 0xff, 0xff, 0x00}, nullptr},
    {OP_MODE_SELECT_10, 0, false, 10,
     {0x55, 0x11, 0x00, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff, 0x00}, nullptr},
    {OP_RESERVE_10, 0, false, 10,
     {0x56, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00}, nullptr},
    {OP_RELEASE_10, 0, false, 10,
     {0x57, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00}, nullptr},
    // LLBAA, DBD, PC and PAGE CODE, SUBPAGE CODE, ALLOCATION LENGTH.
    {OP_MODE_SENSE_10, 0, false, 10,
     {0x5a, 0x18, 0xff, 0xff, 0x00, 0x00, 0x00, 0xff, 0xff, 0x00}, nullptr},
    // ---- SPC-4 persistent reservations (pr.cc) --------------------------------------------
    // PERSISTENT RESERVE IN: READ KEYS, READ RESERVATION, REPORT CAPABILITIES, READ FULL
    // STATUS; ALLOCATION LENGTH.
    {OP_PERSISTENT_RESERVE_IN, 0x00, true, 10,
     {0x5e, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff, 0x00}, nullptr},
    {OP_PERSISTENT_RESERVE_IN, 0x01, true, 10,
     {0x5e, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff, 0x00}, nullptr},
    {OP_PERSISTENT_RESERVE_IN, 0x02, true, 10,
     {0x5e, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff, 0x00}, nullptr},
    {OP_PERSISTENT_RESERVE_IN, 0x03, true, 10,
     {0x5e, 0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff, 0x00}, nullptr},
    // PERSISTENT RESERVE OUT: SCOPE and TYPE where the service action uses them (SPC-4
    // 6.16.2: REGISTER, CLEAR and REGISTER AND IGNORE EXISTING KEY ignore them);
    // PARAMETER LIST LENGTH.
    {OP_PERSISTENT_RESERVE_OUT, 0x00, true, 10, // REGISTER
     {0x5f, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff, 0xff, 0xff, 0x00}, nullptr},
    {OP_PERSISTENT_RESERVE_OUT, 0x01, true, 10, // RESERVE
     {0x5f, 0x01, 0xff, 0x00, 0x00, 0xff, 0xff, 0xff, 0xff, 0x00}, nullptr},
    {OP_PERSISTENT_RESERVE_OUT, 0x02, true, 10, // RELEASE
     {0x5f, 0x02, 0xff, 0x00, 0x00, 0xff, 0xff, 0xff, 0xff, 0x00}, nullptr},
    {OP_PERSISTENT_RESERVE_OUT, 0x03, true, 10, // CLEAR
     {0x5f, 0x03, 0x00, 0x00, 0x00, 0xff, 0xff, 0xff, 0xff, 0x00}, nullptr},
    {OP_PERSISTENT_RESERVE_OUT, 0x04, true, 10, // PREEMPT
     {0x5f, 0x04, 0xff, 0x00, 0x00, 0xff, 0xff, 0xff, 0xff, 0x00}, nullptr},
    {OP_PERSISTENT_RESERVE_OUT, 0x05, true, 10, // PREEMPT AND ABORT
     {0x5f, 0x05, 0xff, 0x00, 0x00, 0xff, 0xff, 0xff, 0xff, 0x00}, nullptr},
    {OP_PERSISTENT_RESERVE_OUT, 0x06, true, 10, // REGISTER AND IGNORE EXISTING KEY
     {0x5f, 0x06, 0x00, 0x00, 0x00, 0xff, 0xff, 0xff, 0xff, 0x00}, nullptr},
    {OP_PERSISTENT_RESERVE_OUT, 0x07, true, 10, // REGISTER AND MOVE
     {0x5f, 0x07, 0xff, 0x00, 0x00, 0xff, 0xff, 0xff, 0xff, 0x00}, nullptr},
    // ---- SPC-4 copy manager (xcopy.cc) -----------------------------------------------------
    // EXTENDED COPY (LID1): PARAMETER LIST LENGTH.
    {OP_XCOPY_LID1, 0x00, true, 16,
     {0x83, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff, 0xff, 0xff,
      0x00, 0x00}, nullptr},
    // RECEIVE COPY RESULTS: COPY STATUS and FAILED SEGMENT DETAILS (LIST IDENTIFIER,
    // ALLOCATION LENGTH), OPERATING PARAMETERS (ALLOCATION LENGTH).
    {OP_RECV_COPY_RESULTS, 0x00, true, 16,
     {0x84, 0x00, 0xff, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff, 0xff, 0xff,
      0x00, 0x00}, nullptr},
    {OP_RECV_COPY_RESULTS, 0x03, true, 16,
     {0x84, 0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff, 0xff, 0xff,
      0x00, 0x00}, nullptr},
    {OP_RECV_COPY_RESULTS, 0x04, true, 16,
     {0x84, 0x04, 0xff, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff, 0xff, 0xff,
      0x00, 0x00}, nullptr},
    // ---- SBC-3 16-byte commands (sbc.cc) ---------------------------------------------------
    {OP_READ_16, 0, false, 16,
     {0x88, 0xf8, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
      0x00, 0x00}, nullptr},
    // WRPROTECT, DPO, FUA; LBA; NUMBER OF LOGICAL BLOCKS.
    {OP_COMPARE_AND_WRITE, 0, false, 16,
     {0x89, 0xf8, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00, 0x00, 0x00, 0xff,
      0x00, 0x00}, nullptr},
    {OP_WRITE_16, 0, false, 16,
     {0x8a, 0xf8, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
      0x00, 0x00}, nullptr},
    // ORPROTECT, DPO, FUA; LBA; TRANSFER LENGTH (sbc_orwrite.cc).
    {OP_ORWRITE_16, 0, false, 16,
     {0x8b, 0xf8, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
      0x00, 0x00}, nullptr},
    {OP_WRITE_VERIFY_16, 0, false, 16,
     {0x8e, 0xf6, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
      0x00, 0x00}, nullptr},
    {OP_VERIFY_16, 0, false, 16,
     {0x8f, 0xf6, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
      0x00, 0x00}, nullptr},
    {OP_PRE_FETCH_16, 0, false, 16,
     {0x90, 0x02, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
      0x00, 0x00}, nullptr},
    {OP_SYNCHRONIZE_CACHE_16, 0, false, 16,
     {0x91, 0x02, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
      0x00, 0x00}, nullptr},
    {OP_WRITE_SAME_16, 0, false, 16,
     {0x93, 0xf8, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
      0x00, 0x00}, nullptr},
    // WRPROTECT, DPO, FUA; LBA; ATOMIC BOUNDARY (checked: must be 0); TRANSFER LENGTH.
    {OP_WRITE_ATOMIC_16, 0, false, 16,
     {0x9c, 0xf8, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
      0x00, 0x00}, needs_atomic},
    // SERVICE ACTION IN (16): READ CAPACITY (16) (LBA and PMI obsolete), GET LBA STATUS.
    {OP_SERVICE_ACTION_IN_16, SAI_READ_CAPACITY_16, true, 16,
     {0x9e, 0x10, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff, 0xff, 0xff,
      0x00, 0x00}, nullptr},
    {OP_SERVICE_ACTION_IN_16, SAI_GET_LBA_STATUS, true, 16,
     {0x9e, 0x12, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
      0x00, 0x00}, nullptr},
    // ---- SPC-4 12-byte commands, SBC-3 12-byte commands -------------------------------------
    // SELECT REPORT, ALLOCATION LENGTH.
    {OP_REPORT_LUNS, 0, false, 12,
     {0xa0, 0x00, 0xff, 0x00, 0x00, 0x00, 0xff, 0xff, 0xff, 0xff, 0x00, 0x00}, nullptr},
    // PARAMETER DATA FORMAT, ALLOCATION LENGTH (with ALUA only: spc_alua.cc).
    {OP_MAINTENANCE_IN, MI_REPORT_TARGET_PORT_GROUPS, true, 12,
     {0xa3, 0xea, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff, 0xff, 0xff, 0x00, 0x00}, has_alua},
    // RCTD, REPORTING OPTIONS, REQUESTED OPERATION CODE, REQUESTED SERVICE ACTION,
    // ALLOCATION LENGTH.
    {OP_MAINTENANCE_IN, MI_REPORT_SUPPORTED_OPCODES, true, 12,
     {0xa3, 0x0c, 0x87, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00, 0x00}, nullptr},
    // REPD, ALLOCATION LENGTH.
    {OP_MAINTENANCE_IN, MI_REPORT_SUPPORTED_TMFS, true, 12,
     {0xa3, 0x0d, 0x80, 0x00, 0x00, 0x00, 0xff, 0xff, 0xff, 0xff, 0x00, 0x00}, nullptr},
    // PARAMETER LIST LENGTH (with explicit ALUA only).
    {OP_MAINTENANCE_OUT, MO_SET_TARGET_PORT_GROUPS, true, 12,
     {0xa4, 0x0a, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff, 0xff, 0xff, 0x00, 0x00},
     has_explicit_alua},
    {OP_READ_12, 0, false, 12,
     {0xa8, 0xf8, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00, 0x00}, nullptr},
    {OP_WRITE_12, 0, false, 12,
     {0xaa, 0xf8, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00, 0x00}, nullptr},
    {OP_WRITE_VERIFY_12, 0, false, 12,
     {0xae, 0xf6, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00, 0x00}, nullptr},
    {OP_VERIFY_12, 0, false, 12,
     {0xaf, 0xf6, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00, 0x00}, nullptr},
    // REQ_PLIST, REQ_GLIST, DEFECT LIST FORMAT; ADDRESS DESCRIPTOR INDEX; ALLOCATION
    // LENGTH.
    {OP_READ_DEFECT_DATA_12, 0, false, 12,
     {0xb7, 0x1f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00, 0x00}, nullptr},
};
// clang-format on

constexpr bool table_sorted()
{
	for (size_t i = 1; i < std::size(kOpcodes); i++) {
		const OpcodeInfo &a = kOpcodes[i - 1], &b = kOpcodes[i];
		if (a.opcode > b.opcode || (a.opcode == b.opcode && a.sa >= b.sa))
			return false;
		if (a.opcode == b.opcode && (!a.has_sa || !b.has_sa))
			return false; // one row per opcode unless it has service actions
	}
	for (const OpcodeInfo &e : kOpcodes)
		if (e.usage[0] != e.opcode || (e.has_sa && (e.usage[1] & 0x1f) != e.sa))
			return false;
	return true;
}
static_assert(table_sorted(), "opcode table: sorted, one row per command, usage[0] the opcode");

// ---- REPORT SUPPORTED OPERATION CODES (SPC-4 6.35) -------------------------------------

enum : uint8_t {
	RSOC_ALL = 0,       // 000b: every command
	RSOC_OPCODE = 1,    // 001b: one opcode without service actions
	RSOC_OPCODE_SA = 2, // 010b: one opcode and service action
	RSOC_EITHER = 3,    // 011b: one opcode, with its service action if it has them
};

// SPC-4 6.35.3 SUPPORT field.
enum : uint8_t {
	SUPPORT_NOT = 0x1,      // 001b: the device server does not support the command
	SUPPORT_STANDARD = 0x3, // 011b: supported as a SCSI standard says
};

// SPC-4 6.35.4 command timeouts descriptor: no timeout indicated (zeros): the time a
// command takes is the backstore's, which the device server cannot promise.
void put_timeouts(std::vector<uint8_t> &d)
{
	const size_t at = d.size();
	d.resize(at + 12, 0);
	put_be16(&d[at], 0x0a); // DESCRIPTOR LENGTH
}

void exec_rsoc(Cmd *cmd)
{
	const uint8_t *c = cmd->cdb;
	const bool rctd = c[2] & 0x80;
	const uint8_t options = c[2] & 0x07;
	const LogicalUnit &lu = *cmd->lu;
	std::vector<uint8_t> d;
	if (options == RSOC_ALL) {
		// SPC-4 6.35.2: COMMAND DATA LENGTH, then an 8-byte command descriptor (and a
		// 12-byte timeouts descriptor with RCTD) per supported command.
		d.resize(4, 0);
		for (const OpcodeInfo &e : kOpcodes) {
			if (!opcode_supported(e, lu))
				continue;
			const size_t at = d.size();
			d.resize(at + 8, 0);
			d[at] = e.opcode;
			put_be16(&d[at + 2], e.sa);
			d[at + 5] = (rctd ? 0x02 : 0) | (e.has_sa ? 0x01 : 0); // CTDP, SERVACTV
			put_be16(&d[at + 6], e.cdb_len);
			if (rctd)
				put_timeouts(d);
		}
		put_be32(d.data(), static_cast<uint32_t>(d.size() - 4));
	} else {
		// SPC-4 6.35.3 one_command parameter data: SUPPORT, CDB SIZE, CDB USAGE DATA.
		const uint16_t sa = get_be16(c + 4);
		const OpcodeInfo *e = opcode_find(c[3], sa);
		d.resize(4, 0);
		if (!e || !opcode_supported(*e, lu)) {
			d[1] = SUPPORT_NOT;
		} else {
			d[1] = (rctd ? 0x80 : 0) | SUPPORT_STANDARD; // CTDP, SUPPORT
			put_be16(&d[2], e->cdb_len);
			d.insert(d.end(), e->usage, e->usage + e->cdb_len);
			if (rctd)
				put_timeouts(d);
		}
	}
	complete_data_in(cmd, d);
}

// ---- REPORT SUPPORTED TASK MANAGEMENT FUNCTIONS (SPC-4 6.36) ---------------------------

void exec_rstmf(Cmd *cmd)
{
	const bool repd = cmd->cdb[2] & 0x80;
	// Byte 0: ATS ATSS CACAS CTSS LURS QTS TRS WAKES; byte 1: QUAS QTSS ITNRS (bits 2..0).
	uint8_t d[16] = {};
	const struct {
		TmfType fn;
		int byte;
		uint8_t bit;
	} kBits[] = {
	    {TmfType::AbortTask, 0, 0x80},       {TmfType::AbortTaskSet, 0, 0x40},
	    {TmfType::ClearAca, 0, 0x20},        {TmfType::ClearTaskSet, 0, 0x10},
	    {TmfType::LunReset, 0, 0x08},        {TmfType::QueryTask, 0, 0x04},
	    {TmfType::TargetWarmReset, 0, 0x02}, // TRS (target reset, obsolete)
	    {TmfType::QueryAsyncEvent, 1, 0x04}, // QUAS
	    {TmfType::QueryTaskSet, 1, 0x02},    // QTSS
	    {TmfType::ITNexusReset, 1, 0x01},    // ITNRS
	};
	for (const auto &b : kBits)
		if (tmf_supported(b.fn))
			d[b.byte] |= b.bit;
	// With REPD, the extended format: ADDITIONAL DATA LENGTH 0Ch and the timeouts, which
	// are not given (TMFTMOV 0): a function waits for the backstore's I/O it aborts.
	size_t n = 4;
	if (repd) {
		d[3] = 0x0c;
		n = sizeof(d);
	}
	complete_data_in(cmd, {d, n});
}

} // namespace

std::span<const OpcodeInfo> opcode_table()
{
	return kOpcodes;
}

const OpcodeInfo *opcode_find(uint8_t opcode, uint16_t sa)
{
	const bool has_sa = opcode_has_sa(opcode);
	for (const OpcodeInfo &e : kOpcodes)
		if (e.opcode == opcode && (!has_sa || e.sa == sa))
			return &e;
	return nullptr;
}

bool opcode_has_sa(uint8_t opcode)
{
	for (const OpcodeInfo &e : kOpcodes)
		if (e.opcode == opcode)
			return e.has_sa;
	return false;
}

bool tmf_supported(TmfType t)
{
	// As tmr_submit answers them: no ACA (NACA is never accepted).
	switch (t) {
	case TmfType::AbortTask:
	case TmfType::AbortTaskSet:
	case TmfType::ClearTaskSet:
	case TmfType::LunReset:
	case TmfType::ITNexusReset:
	case TmfType::QueryTask:
	case TmfType::QueryTaskSet:
	case TmfType::QueryAsyncEvent:
	case TmfType::TargetWarmReset:
	case TmfType::TargetColdReset:
		return true;
	case TmfType::ClearAca:
		return false;
	}
	return false;
}

Sense rsoc_parse(Cmd *cmd)
{
	const uint8_t *c = cmd->cdb;
	// SPC-4 6.35.1: byte 2 is RCTD (bit 7) and REPORTING OPTIONS (bits 2..0); 100b..111b
	// are reserved.
	// The field pointer says which field is wrong (byte 2 or the REQUESTED OPERATION CODE
	// in byte 3), so that the initiator does not take the error for an unsupported
	// service action (which would point at byte 1).
	if (c[2] & 0x78)
		return invalid_cdb_field(cmd, 2, 6);
	const uint8_t options = c[2] & 0x07;
	if (options > RSOC_EITHER)
		return invalid_cdb_field(cmd, 2, 2);
	// 001b asks for an opcode that has no service actions, 010b for one that has them
	// (SPC-4 table "REPORTING OPTIONS field"): the other way round is an error.
	if (options == RSOC_OPCODE && opcode_has_sa(c[3]))
		return invalid_cdb_field(cmd, 3);
	if (options == RSOC_OPCODE_SA && !opcode_has_sa(c[3]))
		return invalid_cdb_field(cmd, 3);
	cmd->cdb_xfer = get_be32(c + 6);
	cmd->cdb_dir = DataDir::Read;
	cmd->execute = exec_rsoc;
	return Sense::None;
}

Sense rstmf_parse(Cmd *cmd)
{
	const uint8_t *c = cmd->cdb;
	// SPC-4 6.36: REPD is bit 7 of byte 2; the rest of byte 2 is reserved.
	if (c[2] & 0x7f)
		return invalid_cdb_field(cmd, 2, 6);
	cmd->cdb_xfer = get_be32(c + 6);
	cmd->cdb_dir = DataDir::Read;
	cmd->execute = exec_rstmf;
	return Sense::None;
}

} // namespace ulp::scsi
