// SPDX-License-Identifier: MIT
// scsi/core_internal.h - what the command families (spc.cc, sbc.cc, pr.cc) and the core
// (core.cc, tmr.cc, ua.cc) share. Not for fabrics: they use scsi/core.h.
//
// A family's parse function looks at the CDB of a command, checks every field it defines,
// and sets (cmd->lu is null only for INQUIRY, REPORT LUNS and REQUEST SENSE, which answer
// for a LUN that does not exist, SPC-4 6.6.1, 6.33, 6.39):
//   cmd->execute   what runs once data-out is in and the task set allows it
//   cmd->cdb_xfer  bytes the CDB transfers (allocation length, parameter list length,
//                  blocks * block size), and cmd->cdb_dir their direction
//   cmd->flags     CMD_* (CMD_WRITES_MEDIUM is refused on write-protected LUNs)
//   cmd->lba, nr_blocks for data CDBs
// and returns Sense::None, or the reason to fail the command with. Residuals against the
// transport's expected length are the core's (core.cc), after parsing.
//
// An execute function ends, now or from a backstore completion, with exactly one of the
// complete_* calls below.
#pragma once

#include "scsi/cmd.h"
#include "scsi/lu.h"
#include "scsi/tpg.h"

#include <cstddef>
#include <cstdint>
#include <span>

namespace ulp::scsi
{

// SCSI operation codes the core knows (SPC-4, SBC-3).
enum : uint8_t {
	OP_TEST_UNIT_READY = 0x00,
	OP_REQUEST_SENSE = 0x03,
	OP_READ_6 = 0x08,
	OP_WRITE_6 = 0x0a,
	OP_INQUIRY = 0x12,
	OP_MODE_SELECT_6 = 0x15,
	OP_RESERVE_6 = 0x16,
	OP_RELEASE_6 = 0x17,
	OP_MODE_SENSE_6 = 0x1a,
	OP_START_STOP_UNIT = 0x1b,
	OP_SEND_DIAGNOSTIC = 0x1d,
	OP_PREVENT_ALLOW = 0x1e,
	OP_READ_CAPACITY_10 = 0x25,
	OP_READ_10 = 0x28,
	OP_WRITE_10 = 0x2a,
	OP_WRITE_VERIFY_10 = 0x2e,
	OP_VERIFY_10 = 0x2f,
	OP_PRE_FETCH_10 = 0x34, // SBC-3 5.9: GOOD, nothing of ours to load (range checked)
	OP_SYNCHRONIZE_CACHE_10 = 0x35,
	OP_READ_DEFECT_DATA_10 = 0x37,
	OP_WRITE_BUFFER = 0x3b,
	OP_READ_BUFFER = 0x3c,
	OP_WRITE_SAME_10 = 0x41,
	OP_UNMAP = 0x42,
	OP_LOG_SENSE = 0x4d,
	OP_MODE_SELECT_10 = 0x55,
	OP_RESERVE_10 = 0x56,
	OP_RELEASE_10 = 0x57,
	OP_MODE_SENSE_10 = 0x5a,
	OP_PERSISTENT_RESERVE_IN = 0x5e,
	OP_PERSISTENT_RESERVE_OUT = 0x5f,
	OP_VARIABLE_LENGTH = 0x7f,
	OP_READ_16 = 0x88,
	OP_COMPARE_AND_WRITE = 0x89,
	OP_WRITE_16 = 0x8a,
	OP_ORWRITE_16 = 0x8b,
	OP_WRITE_VERIFY_16 = 0x8e,
	OP_VERIFY_16 = 0x8f,
	OP_PRE_FETCH_16 = 0x90,
	OP_SYNCHRONIZE_CACHE_16 = 0x91,
	OP_WRITE_SAME_16 = 0x93,
	OP_WRITE_ATOMIC_16 = 0x9c,
	OP_SERVICE_ACTION_IN_16 = 0x9e, // READ CAPACITY 16 (0x10), GET LBA STATUS (0x12)
	OP_REPORT_LUNS = 0xa0,
	OP_MAINTENANCE_IN = 0xa3,  // REPORT SUPPORTED OPERATION CODES (0x0c), ...
	OP_MAINTENANCE_OUT = 0xa4, // SET TARGET PORT GROUPS (0x0a)
	OP_READ_12 = 0xa8,
	OP_WRITE_12 = 0xaa,
	OP_WRITE_VERIFY_12 = 0xae,
	OP_VERIFY_12 = 0xaf,
	OP_READ_DEFECT_DATA_12 = 0xb7,
};

// Service actions.
enum : uint8_t {
	SAI_READ_CAPACITY_16 = 0x10,
	SAI_GET_LBA_STATUS = 0x12,
	MI_REPORT_SUPPORTED_OPCODES = 0x0c,
	MI_REPORT_SUPPORTED_TMFS = 0x0d,
	MI_REPORT_TARGET_PORT_GROUPS = 0x0a, // SPC-4 6.37 (spc_alua.cc)
	MO_SET_TARGET_PORT_GROUPS = 0x0a,    // SPC-4 6.46 (spc_alua.cc)
};

// The families. sbc_parse is the entry point: block commands, then spc_parse's primary
// commands (which hands PERSISTENT RESERVE IN/OUT and RESERVE/RELEASE to pr.cc), then
// INVALID COMMAND OPERATION CODE.
Sense sbc_parse(Cmd *cmd);
Sense spc_parse(Cmd *cmd);

// INVALID FIELD IN CDB with the field pointer at CDB byte `byte` (and bit 0..7, when the
// field does not start a byte): a parse function's return value, where telling the
// initiator which field is wrong matters (SPC-4 4.5.2.4.2; see sense_field_pointer).
inline Sense invalid_cdb_field(Cmd *cmd, uint16_t byte, int bit = -1)
{
	cmd->sks = sense_field_pointer(true, byte, bit);
	return Sense::InvalidCdbField;
}

// Where a CDB's CONTROL byte is, by its operation code's group (SPC-4 4.2.5.1): the last
// byte of a 6-, 10-, 12- or 16-byte CDB, byte 1 of a variable-length one (7Fh, SPC-4
// 4.2.4); -1 for the reserved (7Eh) and vendor-specific groups, whose layout is not known.
constexpr int control_byte_offset(uint8_t op)
{
	switch (op >> 5) {
	case 0:
		return 5;
	case 1:
	case 2:
		return 9;
	case 3:
		return op == 0x7f ? 1 : -1;
	case 4:
		return 15;
	case 5:
		return 11;
	default:
		return -1;
	}
}

// ---- Completion (core.cc) -------------------------------------------------------------

// The command is answered (its status set, or cmd->aborted): the common end of every
// complete_* and of an abort. Execute functions call the complete_* helpers instead.
void cmd_finish(Cmd *cmd);

// GOOD; residuals from xfer_len (which the execute function may lower: fewer bytes moved).
void complete_good(Cmd *cmd);
// CHECK CONDITION (or the reason's own status), with sense for reason s. info_valid/info
// fill the INFORMATION field (COMPARE AND WRITE: offset of the first miscompare).
void complete_sense(Cmd *cmd, Sense s, bool info_valid = false, uint32_t info = 0);
// An emulated command's data-in: copy data (at most xfer_len bytes) into the buffer and
// complete GOOD with the residual of what was actually moved.
void complete_data_in(Cmd *cmd, std::span<const uint8_t> data);
// An execute function that has nothing to do: GOOD.
void exec_good(Cmd *cmd);
// A Flush's done(): GOOD, or the sense of the backstore's error (SYNCHRONIZE CACHE, and
// the flushes of START STOP UNIT and MODE SELECT's WCE change).
void flush_done(BsIo *io, int err);
// A backstore errno as a sense reason (-EIO -> READ/WRITE ERROR, -ENOSPC -> SPACE
// ALLOCATION FAILED, -EROFS -> WRITE PROTECTED, -ERANGE -> LBA OUT OF RANGE, -ETIMEDOUT ->
// BUSY status without sense, -ESHUTDOWN -> port unavailable, -ENOLCK -> port transitioning,
// others -> LOGICAL UNIT FAILURE).
Sense errno_sense(int err, bool write);

// ---- The data buffer -------------------------------------------------------------------

// Copy between the buffer (from byte off) and flat memory; returns bytes copied (stops at
// the buffer's end or xfer_len... callers bound len themselves).
size_t sgl_copy_out(const Cmd *cmd, size_t off, void *dst, size_t len); // buffer -> dst
size_t sgl_copy_in(Cmd *cmd, size_t off, const void *src, size_t len);  // src -> buffer
// The first len bytes of the buffer as an iovec list for the backstore, without
// allocating when the buffer has at most 4 entries (cmd->io_iov); nullopt-like empty span
// when it cannot (more entries: the caller falls back to a bounce buffer).
std::span<const iovec> sgl_prefix(Cmd *cmd, size_t len);

// Submit cmd->io to the LU's backstore: op on [offset, offset+len) with iov, done called
// on completion (its BsIo is &cmd->io, priv is cmd).
// atomic: an indivisible Write (BsIo::atomic).
void bs_submit(Cmd *cmd, BsOp op, uint64_t offset, uint64_t len, std::span<const iovec> iov,
               bool fua, void (*done)(BsIo *, int), bool atomic = false);
// The same to another LU's backstore bs (EXTENDED COPY's source or destination).
void bs_submit_to(Cmd *cmd, Backstore &bs, BsOp op, uint64_t offset, uint64_t len,
                  std::span<const iovec> iov, bool fua, void (*done)(BsIo *, int),
                  bool atomic = false);

// ---- Task management internals (tmr.cc) -------------------------------------------------

// Answer tmr: its core_done when set, else the fabric's queue_tm_rsp.
void tmr_respond(Tmr *tmr);
// PREEMPT AND ABORT (SPC-4, preempting persistent reservations): abort every task on lu of the
// nexuses in which (TASK ABORTED for them where TAS is set, as for another nexus's CLEAR TASK SET),
// except `except`, and answer tmr (set tmr->sess to the issuing session and tmr->core_done) once
// they have all ended. tmr must stay allocated until then.
void abort_nexus_tasks(LogicalUnit &lu, Tmr *tmr, std::span<const NexusId> which,
                       const Cmd *except);
// A LUN removal whose commands outlived the grace (lu_quiesce): abort every task on lu
// (TASK ABORTED where TAS is set, as for another nexus's CLEAR TASK SET) and answer tmr
// (tmr->sess null, tmr->core_done set) once they have all ended.
void abort_lu_tasks(LogicalUnit &lu, Tmr *tmr);

// ---- The removable medium (medium.cc) -------------------------------------------------------

// Whether cmd (parsed) needs the medium: without it, it fails with NOT READY, MEDIUM NOT
// PRESENT (core.cc).
bool medium_needed(const Cmd *cmd);

// ---- Asymmetric logical unit access (alua.cc, spc_alua.cc) ---------------------------------

// SPC-4 5.15.2.4: whether the access state of the target port cmd came through lets it
// run; Sense::None, or the NOT READY reason of that state. After the unit attention check,
// before the command is parsed further (core.cc).
Sense alua_check(Cmd *cmd);
// The NOT READY reason the access state of cmd's target port gives the commands it refuses
// (what TEST UNIT READY through it would get), or Sense::None when the state serves I/O:
// what REQUEST SENSE reports when it has nothing else (spc.cc).
Sense alua_port_sense(const Cmd *cmd);
// MAINTENANCE IN REPORT TARGET PORT GROUPS and MAINTENANCE OUT SET TARGET PORT GROUPS.
Sense rtpg_parse(Cmd *cmd);
Sense stpg_parse(Cmd *cmd);

// ---- Unit attention check (ua.cc) -------------------------------------------------------

// SPC-4 5.14: a command other than the exempt ones on a nexus with a pending UA fails
// with it (and takes it off). true when cmd was completed with the UA.
bool ua_check(Cmd *cmd);
// cmd's nexus was told of condition asc_ascq (ua_check, REQUEST SENSE): what reporting it
// clears beyond its own queue (LUICLR).
void ua_reported(Cmd *cmd, uint16_t asc_ascq);

} // namespace ulp::scsi
