// SPDX-License-Identifier: MIT
// scsi/spc.cc - primary commands (SPC-4; the kernel's target_core_spc.c): the dispatcher,
// and the small commands: TEST UNIT READY, REQUEST SENSE, REPORT LUNS, START STOP UNIT,
// PREVENT ALLOW MEDIUM REMOVAL and SEND DIAGNOSTIC. INQUIRY is in spc_inquiry.cc, MODE
// SENSE / SELECT in spc_mode.cc, the MAINTENANCE IN reports in opcodes.cc; the
// reservation commands are handed to pr.cc.
//
// The LU is a disk with no motor to stop and no power conditions to enter, so the commands
// about those accept what a fixed disk can honour and refuse the rest with INVALID FIELD IN
// CDB. Its medium is removable when configured so (medium.cc): START STOP UNIT's LOEJ and
// PREVENT ALLOW MEDIUM REMOVAL act on it then.
#include "scsi/spc.h"

#include "scsi/pr.h"
#include "scsi/xcopy.h"

#include <cstring>
#include <vector>

namespace ulp::scsi
{

namespace
{

// ---- REQUEST SENSE (SPC-4 6.39) --------------------------------------------------------

void exec_request_sense(Cmd *cmd)
{
	// A pending unit attention is returned as the sense data, and cleared (UA_INTLCK_CTRL
	// 00b); a LUN that is not there answers LOGICAL UNIT NOT SUPPORTED as data, with
	// GOOD status. Otherwise the LU's pollable sense data (SPC-4 6.39: what REQUEST SENSE
	// returns when nothing else is pending): here the condition that keeps the LU from
	// serving through this port. SPC-4 5.15.2.4.4 to 5.15.2.4.6 let REQUEST SENSE through
	// in every asymmetric access state while TEST UNIT READY is refused in standby,
	// unavailable, offline and transitioning, so a multipath layer polling with REQUEST
	// SENSE learns the port's state: NOT READY, LOGICAL UNIT NOT ACCESSIBLE, TARGET PORT
	// IN STANDBY STATE and its neighbours, as TEST UNIT READY would tell it. (The kernel's
	// target lets REQUEST SENSE through too but reports only unit attentions.) Otherwise
	// NO SENSE, 00h/00h.
	uint8_t d[18];
	const uint16_t ua = cmd->lu ? cmd->lu->ua_take(cmd->sess->id()) : 0;
	if (ua) {
		build_sense(Sense::UnitAttention, d, ua);
		ua_reported(cmd, ua);
	} else if (!cmd->lu) {
		build_sense(Sense::LunNotSupported, d);
	} else if (const Sense a = alua_port_sense(cmd); a != Sense::None) {
		build_sense(a, d);
	} else {
		std::memset(d, 0, sizeof(d));
		d[0] = 0x70; // current error, fixed format
		d[7] = sizeof(d) - 8;
	}
	complete_data_in(cmd, d);
}

Sense parse_request_sense(Cmd *cmd)
{
	// DESC (byte 1 bit 0) asks for descriptor format sense data, which is not offered
	// (the control page's D_SENSE is 0 and not changeable): SPC-4 6.39 makes that
	// INVALID FIELD IN CDB. The rest of byte 1 is reserved.
	if (cmd->cdb[1] & 0x01)
		return Sense::InvalidCdbField;
	cmd->cdb_xfer = cmd->cdb[4];
	cmd->cdb_dir = DataDir::Read;
	cmd->execute = exec_request_sense;
	return Sense::None;
}

// ---- REPORT LUNS (SPC-4 6.33) ----------------------------------------------------------

// SELECT REPORT values (SPC-4 6.33 table).
enum : uint8_t {
	SELECT_ALL_BUT_WELL_KNOWN = 0x00, // every LU but the well-known ones
	SELECT_WELL_KNOWN = 0x01,         // only well-known LUs
	SELECT_ALL = 0x02,                // every LU
};

void exec_report_luns(Cmd *cmd)
{
	// An 8-byte header (LUN LIST LENGTH) and 8 bytes per LUN, the full length even when
	// the allocation length cuts the list. There are no well-known LUs: SELECT REPORT 01h
	// gets an empty list, 00h and 02h the same one. Reporting clears REPORTED LUNS DATA
	// HAS CHANGED for this nexus (SPC-4 6.33).
	std::vector<uint64_t> luns;
	if (cmd->cdb[2] != SELECT_WELL_KNOWN)
		luns = cmd->sess->luns();
	std::vector<uint8_t> d(8 + 8 * luns.size());
	put_be32(d.data(), static_cast<uint32_t>(8 * luns.size()));
	for (size_t i = 0; i < luns.size(); i++)
		lun_to_wire(luns[i], d.data() + 8 + 8 * i);
	// SPC-4 6.33: the condition goes for the nexus with the inventory it was about, on
	// every LU that queued it (a LUN added or removed queues it on all of them).
	if (cmd->lu)
		cmd->lu->ua_clear(cmd->sess->id(), UA_REPORTED_LUNS_CHANGED);
	cmd->sess->ua_clear_everywhere(UA_REPORTED_LUNS_CHANGED);
	complete_data_in(cmd, d);
}

Sense parse_report_luns(Cmd *cmd)
{
	const uint8_t *c = cmd->cdb;
	if (c[2] > SELECT_ALL)
		return Sense::InvalidCdbField;
	// SPC-4 6.33: an ALLOCATION LENGTH below 16 (room for the header and one LUN) is
	// INVALID FIELD IN CDB.
	cmd->cdb_xfer = get_be32(c + 6);
	if (cmd->cdb_xfer < 16)
		return Sense::InvalidCdbField;
	cmd->cdb_dir = DataDir::Read;
	cmd->execute = exec_report_luns;
	return Sense::None;
}

// ---- START STOP UNIT (SBC-3 5.25) --------------------------------------------------------

// POWER CONDITION values (SBC-3 5.25 table).
enum : uint8_t {
	PC_START_VALID = 0x0, // process START and LOEJ
	PC_ACTIVE = 0x1,
	PC_LU_CONTROL = 0x7,
};

enum : uint8_t {
	SSU_IMMED = 0x01,    // byte 1
	SSU_START = 0x01,    // byte 4
	SSU_LOEJ = 0x02,     //
	SSU_NO_FLUSH = 0x04, //
};

// START 0: stop. There is no motor, so the LU stays ready, but a stop is where an
// initiator expects the cache on the medium (NO_FLUSH 0): it is flushed.
void exec_stop(Cmd *cmd)
{
	if (!cmd->lu->wce()) {
		complete_good(cmd);
		return;
	}
	bs_submit(cmd, BsOp::Flush, 0, 0, {}, false, flush_done);
}

// LOEJ 1, START 0 on a removable medium: eject it (unless its removal is prevented), the
// cache flushed first as for a stop (NO_FLUSH 0).
void exec_eject(Cmd *cmd)
{
	if (Sense r = cmd->lu->medium_load_eject(false); r != Sense::None) {
		complete_sense(cmd, r);
		return;
	}
	if ((cmd->cdb[4] & SSU_NO_FLUSH) || !cmd->lu->wce()) {
		complete_good(cmd);
		return;
	}
	bs_submit(cmd, BsOp::Flush, 0, 0, {}, false, flush_done);
}

// LOEJ 1, START 1: load the removable medium (unless its removal is prevented).
void exec_load(Cmd *cmd)
{
	Sense r = cmd->lu->medium_load_eject(true);
	if (r != Sense::None)
		complete_sense(cmd, r);
	else
		complete_good(cmd);
}

Sense parse_start_stop(Cmd *cmd)
{
	const uint8_t *c = cmd->cdb;
	// Reserved: byte 1 but IMMED, byte 3's upper half, byte 4 bit 3. IMMED is honoured
	// trivially: status comes once the work (a flush at most) is done.
	if ((c[1] & ~SSU_IMMED) || (c[3] & 0xf0) || (c[4] & 0x08))
		return Sense::InvalidCdbField;
	const uint8_t pc = c[4] >> 4;
	// ACTIVE and LU_CONTROL are where the LU always is; IDLE, STANDBY and their FORCE_*
	// forms name power conditions it does not have (no power condition mode page), the
	// rest are reserved. None of the three takes a POWER CONDITION MODIFIER.
	if (pc != PC_START_VALID && pc != PC_ACTIVE && pc != PC_LU_CONTROL)
		return Sense::InvalidCdbField;
	if (c[3] & 0x0f)
		return Sense::InvalidCdbField;
	cmd->execute = exec_good;
	if (pc != PC_START_VALID)
		return Sense::None; // START and LOEJ are ignored (SBC-3 5.25)
	// LOEJ loads (START 1) or ejects (START 0) a removable medium (medium.cc). A medium
	// that is not removable (RMB 0) refuses it, as libiscsi's StartStopUnit.Simple
	// expects of a fixed disk.
	if (c[4] & SSU_LOEJ) {
		if (!cmd->lu->removable())
			return invalid_cdb_field(cmd, 4, 1);
		cmd->execute = (c[4] & SSU_START) ? exec_load : exec_eject;
		return Sense::None;
	}
	if (!(c[4] & SSU_START) && !(c[4] & SSU_NO_FLUSH))
		cmd->execute = exec_stop;
	return Sense::None;
}

// ---- PREVENT ALLOW MEDIUM REMOVAL (SBC-3 5.13) -------------------------------------------

void exec_prevent_allow(Cmd *cmd)
{
	cmd->lu->medium_prevent(cmd->sess->id(), cmd->cdb[4] & 0x01);
	complete_good(cmd);
}

Sense parse_prevent_allow(Cmd *cmd)
{
	// PREVENT 00b (allow) and 01b (prevent) for this I_T nexus (medium.cc). A medium
	// that is not removable (RMB 0) cannot be removed anyway: there is nothing to lock,
	// and the command is GOOD. 10b and 11b are obsolete. Bytes 1..3 and the rest of
	// byte 4 are reserved.
	const uint8_t *c = cmd->cdb;
	if (c[1] || c[2] || c[3] || (c[4] & 0xfe))
		return Sense::InvalidCdbField;
	cmd->execute = cmd->lu->removable() ? exec_prevent_allow : exec_good;
	return Sense::None;
}

// ---- SEND DIAGNOSTIC (SPC-4 6.42) ------------------------------------------------------

enum : uint8_t {
	SD_SELFTEST = 0x04, // byte 1
};

Sense parse_send_diagnostic(Cmd *cmd)
{
	const uint8_t *c = cmd->cdb;
	// Byte 1: SELF-TEST CODE (7..5), PF (4), reserved (3), SELFTEST (2), DEVOFFL (1),
	// UNITOFFL (0); bytes 3..4 PARAMETER LIST LENGTH.
	if (c[1] & 0x08)
		return Sense::InvalidCdbField;
	const uint8_t code = c[1] >> 5;
	const uint16_t len = get_be16(c + 3);
	// The default self-test (SELFTEST 1, code 000b, no parameter list) checks what there
	// is to check: that the LU answers. The short and extended self-tests (codes other
	// than 000b) are not implemented, nor are diagnostic pages (a parameter list).
	// SELFTEST 0 with an empty list asks for nothing and is not an error.
	if (code != 0 || len != 0)
		return Sense::InvalidCdbField;
	cmd->execute = exec_good;
	return Sense::None;
}

// ---- MAINTENANCE IN ----------------------------------------------------------------------

Sense parse_maintenance_in(Cmd *cmd)
{
	switch (cmd->cdb[1] & 0x1f) {
	case MI_REPORT_SUPPORTED_OPCODES:
		return rsoc_parse(cmd);
	case MI_REPORT_SUPPORTED_TMFS:
		return rstmf_parse(cmd);
	case MI_REPORT_TARGET_PORT_GROUPS:
		return rtpg_parse(cmd); // spc_alua.cc
	default:
		// An opcode we have with a service action we do not: INVALID FIELD IN CDB,
		// not INVALID COMMAND OPERATION CODE (the opcode itself is known), pointing at
		// the SERVICE ACTION field (byte 1, bits 4..0).
		return invalid_cdb_field(cmd, 1, 4);
	}
}

} // namespace

Sense spc_parse(Cmd *cmd)
{
	switch (cmd->cdb[0]) {
	case OP_TEST_UNIT_READY:
		// SPC-4 6.47: ready whenever the LU exists (bytes 1..4 are reserved).
		cmd->execute = exec_good;
		return Sense::None;
	case OP_INQUIRY:
		return inquiry_parse(cmd);
	case OP_REPORT_LUNS:
		return parse_report_luns(cmd);
	case OP_REQUEST_SENSE:
		return parse_request_sense(cmd);
	case OP_MODE_SENSE_6:
	case OP_MODE_SENSE_10:
		return mode_sense_parse(cmd);
	case OP_MODE_SELECT_6:
	case OP_MODE_SELECT_10:
		return mode_select_parse(cmd);
	case OP_START_STOP_UNIT:
		return parse_start_stop(cmd);
	case OP_PREVENT_ALLOW:
		return parse_prevent_allow(cmd);
	case OP_SEND_DIAGNOSTIC:
		return parse_send_diagnostic(cmd);
	case OP_MAINTENANCE_IN:
		return parse_maintenance_in(cmd);
	case OP_MAINTENANCE_OUT:
		return stpg_parse(cmd); // spc_alua.cc: SET TARGET PORT GROUPS, its only one
	case OP_XCOPY_LID1:
		return xcopy_parse(cmd);
	case OP_RECV_COPY_RESULTS:
		return rcr_parse(cmd);
	case OP_LOG_SENSE:
		return log_sense_parse(cmd);
	case OP_PERSISTENT_RESERVE_IN:
		return pr_in_parse(cmd);
	case OP_PERSISTENT_RESERVE_OUT:
		return pr_out_parse(cmd);
	case OP_RESERVE_6:
	case OP_RESERVE_10:
		return reserve_parse(cmd);
	case OP_RELEASE_6:
	case OP_RELEASE_10:
		return release_parse(cmd);
	default:
		return Sense::UnsupportedOpcode;
	}
}

} // namespace ulp::scsi
