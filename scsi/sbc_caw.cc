// SPDX-License-Identifier: MIT
// scsi/sbc_caw.cc - COMPARE AND WRITE (SBC-3 5.2): read NUMBER OF LOGICAL BLOCKS blocks,
// compare them with the first half of the Data-Out Buffer, and only when they are equal
// write the second half over them - as one atomic operation against every other COMPARE
// AND WRITE to the logical unit.
//
// Atomicity: the LU runs one COMPARE AND WRITE at a time, from its read to its write
// (LogicalUnit::caw_busy_ under caw_lock_). One that finds another running waits in the
// LU's FIFO (caw_wait_, linked through the command's dormant hook, free while it
// executes); no thread blocks. The one that finishes hands the LU to the oldest waiter
// before it completes. Starting that waiter on the finishing thread could recurse without
// bound on a synchronous backstore (each one finishes inside its own start and starts the
// next), so a thread that is already starting COMPARE AND WRITEs queues further ones on a
// thread-local list and starts them in a loop instead (caw_launch).
//
// On a mismatch nothing is written and the command ends with MISCOMPARE, MISCOMPARE
// DURING VERIFY OPERATION, and the INFORMATION field set to the offset of the first byte
// that differed, from the start of the Data-Out Buffer (SBC-4 5.3; libiscsi
// CompareAndWrite.MiscompareSense).
//
// An aborted command waiting for its turn starts, sees the abort and ends without I/O; an
// abort after the compare stops it before the write.
#include "scsi/sbc_internal.h"

#include <mutex>

namespace ulp::scsi
{

namespace
{

enum class CawStep : uint8_t {
	Start, // holds the LU's COMPARE AND WRITE turn, nothing submitted yet
	Read,  // the range is being read
	Write, // the compare matched; the write data is being written
};

struct CawState : SbcStep {
	CawStep step = CawStep::Start;
	SbcBuf buf; // nr_blocks blocks: the data read, then the data to write
	iovec iov{};
};

// The LU's turn ends with cmd: pass it to the oldest waiter (returned, to be launched
// once cmd is completed), or free it.
Cmd *caw_release(LogicalUnit &lu)
{
	std::lock_guard g(lu.caw_lock_);
	if (lu.caw_wait_.empty()) {
		lu.caw_busy_ = false;
		return nullptr;
	}
	Cmd &next = lu.caw_wait_.front();
	lu.caw_wait_.pop_front();
	return &next; // caw_busy_ stays set: the turn is next's
}

void caw_launch(Cmd *cmd);

// End cmd (with s, or GOOD for Sense::None) and hand the LU's turn on. The turn is
// released before the completion: after it, cmd (and with the last command of a session,
// the LU) may be gone.
void caw_finish(Cmd *cmd, Sense s, bool miscompare = false, uint64_t off = 0)
{
	Cmd *next = caw_release(*cmd->lu);
	if (miscompare)
		sbc_complete_miscompare(cmd, off);
	else if (s != Sense::None)
		complete_sense(cmd, s);
	else
		complete_good(cmd);
	if (next)
		caw_launch(next);
}

void caw_run(Cmd *cmd)
{
	auto *st = static_cast<CawState *>(sbc_step(cmd));
	const uint32_t bs = cmd->lu->block_size();
	const size_t len = size_t(cmd->nr_blocks) * bs;
	const uint64_t off = cmd->lba * bs;
	for (;;) {
		switch (st->step) {
		case CawStep::Start:
			if (sbc_aborted(cmd)) {
				caw_finish(cmd, Sense::None); // answered as aborted
				return;
			}
			st->step = CawStep::Read;
			st->iov = {st->buf.get(), len};
			if (!sbc_step_submit(cmd, BsOp::Read, off, len, {&st->iov, 1}, false))
				return;
			break;
		case CawStep::Read: {
			if (st->err) {
				caw_finish(cmd, errno_sense(st->err, false));
				return;
			}
			const size_t m = sgl_mismatch(cmd, 0, st->buf.get(), len);
			if (m < len) {
				caw_finish(cmd, Sense::Miscompare, true, m);
				return;
			}
			if (sbc_aborted(cmd)) {
				caw_finish(cmd, Sense::None); // aborted: nothing written
				return;
			}
			// The write half into the buffer: the data buffer may be split anywhere,
			// and the copy is at most kSbcMaxCompareAndWriteBlocks blocks.
			if (sgl_copy_out(cmd, len, st->buf.get(), len) != len) {
				caw_finish(cmd, Sense::InternalTargetFailure);
				return;
			}
			st->step = CawStep::Write;
			const bool fua = (cmd->flags & CMD_FUA) || !cmd->lu->wce();
			if (!sbc_step_submit(cmd, BsOp::Write, off, len, {&st->iov, 1}, fua))
				return;
			break;
		}
		case CawStep::Write:
			caw_finish(cmd, st->err ? errno_sense(st->err, true) : Sense::None);
			return;
		}
	}
}

// COMPARE AND WRITEs this thread is about to start (see the top of the file), or null
// when it is not inside caw_launch.
thread_local CmdDormantList *t_launching = nullptr;

// Start cmd, which holds the LU's turn.
void caw_launch(Cmd *cmd)
{
	if (t_launching) {
		t_launching->push_back(*cmd); // the loop below, further up this stack, runs it
		return;
	}
	CmdDormantList pending;
	t_launching = &pending;
	caw_run(cmd);
	while (!pending.empty()) {
		Cmd &c = pending.front();
		pending.pop_front();
		caw_run(&c);
	}
	t_launching = nullptr;
}

void exec_caw(Cmd *cmd)
{
	if (cmd->nr_blocks == 0) {
		complete_good(cmd); // SBC-3 5.2: nothing read, compared or written; no error
		return;
	}
	LogicalUnit &lu = *cmd->lu;
	auto *st = sbc_step_new<CawState>(cmd, caw_run);
	if (st)
		st->buf = sbc_buf_alloc(size_t(cmd->nr_blocks) * lu.block_size());
	if (!st || !st->buf) {
		complete_sense(cmd, Sense::InsufficientResources);
		return;
	}
	{
		std::lock_guard g(lu.caw_lock_);
		if (lu.caw_busy_) {
			lu.caw_wait_.push_back(*cmd); // started by the one before it
			return;
		}
		lu.caw_busy_ = true;
	}
	caw_launch(cmd);
}

} // namespace

Sense sbc_parse_caw(Cmd *cmd)
{
	const uint8_t *c = cmd->cdb;
	LogicalUnit &lu = *cmd->lu;
	// SBC-3 5.2 byte 1: WRPROTECT (7..5) must be 0; DPO (4) a hint; FUA (3) makes the
	// write durable; FUA_NV (1) a hint; bits 2 and 0 reserved.
	if (c[1] & 0xe0)
		return Sense::InvalidCdbField;
	if (c[1] & 0x08)
		cmd->flags |= CMD_FUA;
	const uint64_t lba = get_be64(c + 2);
	const uint8_t blocks = c[13];
	// Beyond MAXIMUM COMPARE AND WRITE LENGTH: INVALID FIELD IN CDB (SBC-3 5.2, libiscsi
	// CompareAndWrite.Simple).
	if (blocks > kSbcMaxCompareAndWriteBlocks)
		return Sense::InvalidCdbField;
	// Zero blocks moves nothing (SBC-3 5.2), so data-out the initiator announced cannot
	// belong to it: the one-byte field has wrapped (256 blocks) or is wrong. libiscsi's
	// CompareAndWrite.Simple sends exactly that and expects INVALID FIELD IN CDB.
	if (blocks == 0 && cmd->data_length != 0)
		return Sense::InvalidCdbField;
	if (Sense r = sbc_check_range(lu, lba, blocks); r != Sense::None)
		return r;
	cmd->flags |= CMD_WRITES_MEDIUM;
	cmd->lba = lba;
	cmd->nr_blocks = blocks;
	cmd->execute = exec_caw;
	if (blocks) {
		// Compare data then write data, exactly (libiscsi
		// CompareAndWrite.InvalidDataOutSize).
		cmd->flags |= CMD_DATA_CDB;
		cmd->cdb_xfer = 2u * blocks * lu.block_size();
		cmd->cdb_dir = DataDir::Write;
	}
	return Sense::None;
}

} // namespace ulp::scsi
