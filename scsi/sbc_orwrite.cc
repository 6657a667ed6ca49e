// SPDX-License-Identifier: MIT
// scsi/sbc_orwrite.cc - ORWRITE (16) (SBC-3 5.13): read the TRANSFER LENGTH blocks from the
// LBA, OR the Data-Out Buffer into them bit by bit, and write the result back - as one
// operation that no other read-modify-write command (COMPARE AND WRITE, ORWRITE) can come
// between: the command holds the LU's read-modify-write turn from its first read to its
// last write (sbc_rmw.cc).
//
// The range is processed in chunks of at most kSbcChunkBytes (read, OR, write; then the
// next), so that one command holds a bounded buffer whatever its length (up to MAXIMUM
// TRANSFER LENGTH, as for WRITE). Writes honour FUA and the write cache as WRITE does.
// An abort is noticed between requests: the chunks written until then stay written, as with
// any write a task management function interrupts.
//
// CDB (SBC-3 table "ORWRITE (16) command"): byte 1 ORPROTECT (7..5: 0, there is no
// protection information), DPO (4, a hint), FUA (3), reserved (2), FUA_NV (1, a hint),
// obsolete (0); bytes 2..9 LBA; 10..13 TRANSFER LENGTH; byte 14 reserved (7..5) and GROUP
// NUMBER (no grouping function: ignored). A TRANSFER LENGTH of 0 transfers and changes
// nothing and is no error.
#include "scsi/sbc_internal.h"

#include <algorithm>

namespace ulp::scsi
{

namespace
{

enum class OrStep : uint8_t {
	Start, // holds the turn; the next chunk is to be read
	Read,  // blocks [pos, pos + inflight) of the range are being read
	Write, // ... and being written back, ORed
};

struct OrState : SbcStep {
	OrStep step = OrStep::Start;
	uint32_t chunk_blocks = 0;
	uint32_t pos = 0;      // blocks of the range done
	uint32_t inflight = 0; // blocks of the chunk in flight
	SbcBuf buf;            // chunk_blocks blocks
	iovec iov{};
};

void or_run(Cmd *cmd)
{
	auto *st = static_cast<OrState *>(sbc_step(cmd));
	LogicalUnit &lu = *cmd->lu;
	const uint32_t bs = lu.block_size();
	for (;;) {
		switch (st->step) {
		case OrStep::Start:
			break;
		case OrStep::Read: {
			if (st->err) {
				sbc_rmw_finish(cmd, errno_sense(st->err, false));
				return;
			}
			const size_t len = size_t(st->inflight) * bs;
			if (!sgl_or_into(cmd, size_t(st->pos) * bs, st->buf.get(), len)) {
				sbc_rmw_finish(cmd, Sense::InternalTargetFailure);
				return;
			}
			if (sbc_aborted(cmd)) {
				sbc_rmw_finish(cmd, Sense::None); // answered as aborted
				return;
			}
			st->step = OrStep::Write;
			// Durable before GOOD with FUA, or without a write cache (WCE 0).
			const bool fua = (cmd->flags & CMD_FUA) || !lu.wce();
			if (!sbc_step_submit(cmd, BsOp::Write, (cmd->lba + st->pos) * bs, len,
			                     {&st->iov, 1}, fua))
				return;
			continue;
		}
		case OrStep::Write:
			if (st->err) {
				sbc_rmw_finish(cmd, errno_sense(st->err, true));
				return;
			}
			st->pos += st->inflight;
			break;
		}
		// Start of a chunk.
		if (st->pos == cmd->nr_blocks) {
			sbc_rmw_finish(cmd, Sense::None);
			return;
		}
		if (sbc_aborted(cmd)) {
			sbc_rmw_finish(cmd, Sense::None);
			return;
		}
		st->inflight = std::min(st->chunk_blocks, cmd->nr_blocks - st->pos);
		st->iov = {st->buf.get(), size_t(st->inflight) * bs};
		st->step = OrStep::Read;
		if (!sbc_step_submit(cmd, BsOp::Read, (cmd->lba + st->pos) * bs, st->iov.iov_len,
		                     {&st->iov, 1}, false))
			return;
	}
}

void exec_orwrite(Cmd *cmd)
{
	if (cmd->nr_blocks == 0) {
		complete_good(cmd); // SBC-3 5.13: nothing to read, OR or write
		return;
	}
	const uint32_t bs = cmd->lu->block_size();
	auto *st = sbc_step_new<OrState>(cmd, or_run);
	if (st) {
		st->chunk_blocks = std::min(cmd->nr_blocks, kSbcChunkBytes / bs);
		st->buf = sbc_buf_alloc(size_t(st->chunk_blocks) * bs);
	}
	if (!st || !st->buf) {
		complete_sense(cmd, Sense::InsufficientResources);
		return;
	}
	sbc_rmw_start(cmd); // or_run, now or once the LU's turn comes
}

} // namespace

Sense sbc_parse_orwrite(Cmd *cmd)
{
	const uint8_t *c = cmd->cdb;
	LogicalUnit &lu = *cmd->lu;
	if (c[1] & 0xe0)
		return invalid_cdb_field(cmd, 1, 7); // ORPROTECT: no protection information
	if (c[1] & 0x04)
		return invalid_cdb_field(cmd, 1, 2);
	if (c[14] & 0xe0)
		return invalid_cdb_field(cmd, 14, 7);
	const uint64_t lba = get_be64(c + 2);
	const uint32_t blocks = get_be32(c + 10);
	if (Sense r = sbc_check_range(lu, lba, blocks); r != Sense::None)
		return r;
	// MAXIMUM TRANSFER LENGTH bounds it as it bounds WRITE (SBC-3 6.6.4).
	const uint64_t bytes = uint64_t(blocks) * lu.block_size();
	if (blocks > lu.cfg().max_xfer_blocks || bytes > UINT32_MAX)
		return invalid_cdb_field(cmd, 10);
	if (c[1] & 0x08)
		cmd->flags |= CMD_FUA;
	// Like WRITE: whole blocks of data-out, and a shorter expected length ORs only the
	// blocks that arrive (core.cc size_check).
	cmd->flags |= CMD_DATA_CDB | CMD_BLOCK_XFER | CMD_WRITES_MEDIUM;
	cmd->lba = lba;
	cmd->nr_blocks = blocks;
	cmd->cdb_xfer = static_cast<uint32_t>(bytes);
	cmd->cdb_dir = DataDir::Write;
	cmd->execute = exec_orwrite;
	return Sense::None;
}

} // namespace ulp::scsi
