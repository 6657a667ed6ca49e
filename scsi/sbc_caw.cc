// SPDX-License-Identifier: MIT
// scsi/sbc_caw.cc - COMPARE AND WRITE (SBC-3 5.2): read NUMBER OF LOGICAL BLOCKS blocks,
// compare them with the first half of the Data-Out Buffer, and only when they are equal
// write the second half over them - as one atomic operation against every other COMPARE
// AND WRITE and ORWRITE to the logical unit.
//
// Atomicity: the command holds the LU's read-modify-write turn from its read to its write
// (sbc_rmw.cc), so no other COMPARE AND WRITE or ORWRITE changes the blocks in between.
// That is atomic against this process only. A backstore whose storage other gateways
// share compares and writes itself (Backstore::compare_and_write_max(), rbd: the OSD does
// both in one operation on the object): the command then sends it one CompareAndWrite,
// still inside the turn (ORWRITE here goes on reading and writing), and falls back to the
// read-compare-write only where the backstore declines (-EOPNOTSUPP).
//
// On a mismatch nothing is written and the command ends with MISCOMPARE, MISCOMPARE
// DURING VERIFY OPERATION, and the INFORMATION field set to the offset of the first byte
// that differed, from the start of the Data-Out Buffer (SBC-4 5.3; libiscsi
// CompareAndWrite.MiscompareSense).
//
// An aborted command waiting for its turn starts, sees the abort and ends without I/O; an
// abort after the compare stops it before the write.
#include "scsi/sbc_internal.h"

#include <algorithm>

namespace ulp::scsi
{

namespace
{

enum class CawStep : uint8_t {
	Start,  // holds the LU's read-modify-write turn, nothing submitted yet
	Native, // the backstore compares and writes (BsOp::CompareAndWrite)
	Read,   // the range is being read
	Write,  // the compare matched; the write data is being written
};

struct CawState : SbcStep {
	CawStep step = CawStep::Start;
	bool native = false; // the backstore performs it (compare_and_write_max() covers it)
	SbcBuf buf;          // native: the Data-Out Buffer (compare, write), 2 * nr_blocks
	                     // blocks; else nr_blocks: the data read, then the data to write
	iovec iov{};
};

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
				sbc_rmw_finish(cmd, Sense::None); // answered as aborted
				return;
			}
			if (st->native) {
				// Both halves, contiguous: the backstore takes them as two buffers.
				if (sgl_copy_out(cmd, 0, st->buf.get(), 2 * len) != 2 * len) {
					sbc_rmw_finish(cmd, Sense::InternalTargetFailure);
					return;
				}
				st->step = CawStep::Native;
				st->iov = {st->buf.get(), 2 * len};
				const bool fua = (cmd->flags & CMD_FUA) || !cmd->lu->wce();
				if (!sbc_step_submit(cmd, BsOp::CompareAndWrite, off, len,
				                     {&st->iov, 1}, fua))
					return;
				break;
			}
			st->step = CawStep::Read;
			st->iov = {st->buf.get(), len};
			if (!sbc_step_submit(cmd, BsOp::Read, off, len, {&st->iov, 1}, false))
				return;
			break;
		case CawStep::Native:
			if (st->err == -EOPNOTSUPP) { // declined for this range: ours, then
				st->native = false;
				st->step = CawStep::Start;
				break;
			}
			if (st->err == -EILSEQ) {
				sbc_rmw_finish(cmd, Sense::Miscompare, true,
				               std::min<uint64_t>(cmd->io.miscompare, len - 1));
				return;
			}
			sbc_rmw_finish(cmd, st->err ? errno_sense(st->err, true) : Sense::None);
			return;
		case CawStep::Read: {
			if (st->err) {
				sbc_rmw_finish(cmd, errno_sense(st->err, false));
				return;
			}
			const size_t m = sgl_mismatch(cmd, 0, st->buf.get(), len);
			if (m < len) {
				sbc_rmw_finish(cmd, Sense::Miscompare, true, m);
				return;
			}
			if (sbc_aborted(cmd)) {
				sbc_rmw_finish(cmd, Sense::None); // aborted: nothing written
				return;
			}
			// The write half into the buffer: the data buffer may be split anywhere,
			// and the copy is at most kSbcMaxCompareAndWriteBlocks blocks.
			if (sgl_copy_out(cmd, len, st->buf.get(), len) != len) {
				sbc_rmw_finish(cmd, Sense::InternalTargetFailure);
				return;
			}
			st->step = CawStep::Write;
			const bool fua = (cmd->flags & CMD_FUA) || !cmd->lu->wce();
			if (!sbc_step_submit(cmd, BsOp::Write, off, len, {&st->iov, 1}, fua))
				return;
			break;
		}
		case CawStep::Write:
			sbc_rmw_finish(cmd, st->err ? errno_sense(st->err, true) : Sense::None);
			return;
		}
	}
}

void exec_caw(Cmd *cmd)
{
	if (cmd->nr_blocks == 0) {
		complete_good(cmd); // SBC-3 5.2: nothing read, compared or written; no error
		return;
	}
	LogicalUnit &lu = *cmd->lu;
	auto *st = sbc_step_new<CawState>(cmd, caw_run);
	const size_t len = size_t(cmd->nr_blocks) * lu.block_size();
	if (st) {
		// Native: both halves (twice len), which the fallback from a declined attempt
		// reuses; the read-compare-write alone needs len.
		st->native = lu.bs().compare_and_write_max() >= len;
		st->buf = sbc_buf_alloc(st->native ? 2 * len : len);
	}
	if (!st || !st->buf) {
		complete_sense(cmd, Sense::InsufficientResources);
		return;
	}
	sbc_rmw_start(cmd); // caw_run, now or once the LU's turn comes
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
