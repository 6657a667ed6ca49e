// SPDX-License-Identifier: MIT
// scsi/sbc_verify.cc - VERIFY (10, 12, 16) and WRITE AND VERIFY (10, 12, 16) (SBC-3 5.31-5.33,
// 5.38-5.40).
//
// VERIFY reads its range back in bounded chunks (kSbcChunkBytes, one bounce buffer per
// command), with the BYTCHK field saying what is checked:
//   00b  the medium only: every block can be read (a read error is MEDIUM ERROR, through
//        errno_sense); no data-out
//   01b  each block against the Data-Out Buffer, which holds the whole range
//   11b  each block against the single block in the Data-Out Buffer
// WRITE AND VERIFY first writes its data-out - durably (FUA), since the verify must read
// the medium and not a cache - and then verifies it as VERIFY does with BYTCHK 00b or 01b.
//
// A miscompare ends the command with MISCOMPARE, MISCOMPARE DURING VERIFY OPERATION and
// the INFORMATION field set to the byte offset of the first difference. SBC-3 defines the
// offset for COMPARE AND WRITE (5.2: from the start of the Data-Out Buffer); for BYTCHK
// 01b it is the same thing; for 11b, whose Data-Out Buffer is one block, we report the
// offset into the verified range (block index times block size plus the byte), which says
// which block differed.
#include "scsi/sbc_internal.h"

#include <algorithm>
#include <cstring>

namespace ulp::scsi
{

namespace
{

// The BYTCHK field (SBC-3 table "BYTCHK field"); 10b is reserved.
enum class ByteCheck : uint8_t {
	Medium = 0,   // 00b: no compare
	DataOut = 1,  // 01b: compare with the whole Data-Out Buffer
	OneBlock = 3, // 11b: compare every block with the one Data-Out block
};

enum class VerifyStep : uint8_t {
	Start, // nothing submitted yet
	Write, // WRITE AND VERIFY's write is in flight
	Read,  // a chunk of the range is being read back
};

struct VerifyState : SbcStep {
	VerifyStep step = VerifyStep::Start;
	ByteCheck bytchk = ByteCheck::Medium;
	bool write_first = false; // WRITE AND VERIFY
	uint32_t chunk_blocks = 0;
	uint64_t pos = 0;      // blocks of the range verified so far
	uint32_t inflight = 0; // blocks of the read in flight
	SbcBuf buf;            // chunk_blocks blocks: the read-back data
	SbcBuf ref;            // BYTCHK 11b: the Data-Out block
	iovec iov{};           // buf, as the read's iov (valid until it completes)
};

// The chunk just read (blocks [pos, pos + inflight) of the range) against what BYTCHK
// asks for. true when it matched (or nothing is compared); false when the command was
// completed with a miscompare.
bool compare_chunk(Cmd *cmd, VerifyState *st)
{
	const uint32_t bs = cmd->lu->block_size();
	const size_t len = size_t(st->inflight) * bs;
	const uint64_t at = st->pos * bs; // byte offset of the chunk in the range
	switch (st->bytchk) {
	case ByteCheck::Medium:
		return true;
	case ByteCheck::DataOut: {
		const size_t m = sgl_mismatch(cmd, at, st->buf.get(), len);
		if (m == len)
			return true;
		sbc_complete_miscompare(cmd, at + m);
		return false;
	}
	case ByteCheck::OneBlock:
		for (size_t off = 0; off < len; off += bs) {
			const uint8_t *p = st->buf.get() + off;
			if (std::memcmp(p, st->ref.get(), bs) == 0)
				continue;
			const size_t m = std::mismatch(p, p + bs, st->ref.get()).first - p;
			sbc_complete_miscompare(cmd, at + off + m);
			return false;
		}
		return true;
	}
	return true;
}

void verify_run(Cmd *cmd)
{
	auto *st = static_cast<VerifyState *>(sbc_step(cmd));
	LogicalUnit &lu = *cmd->lu;
	const uint32_t bs = lu.block_size();
	for (;;) {
		switch (st->step) {
		case VerifyStep::Start:
			break;
		case VerifyStep::Write:
			if (st->err) {
				complete_sense(cmd, errno_sense(st->err, true));
				return;
			}
			break;
		case VerifyStep::Read:
			if (st->err) {
				// SBC-3 5.31: a block that cannot be read fails the verify
				// (MEDIUM ERROR, UNRECOVERED READ ERROR for -EIO).
				complete_sense(cmd, errno_sense(st->err, false));
				return;
			}
			if (!compare_chunk(cmd, st))
				return;
			st->pos += st->inflight;
			break;
		}
		if (st->pos == cmd->nr_blocks) {
			complete_good(cmd);
			return;
		}
		if (sbc_aborted(cmd)) {
			complete_good(cmd); // answered as aborted by cmd_finish
			return;
		}
		if (st->step == VerifyStep::Start && st->write_first) {
			auto iov = sgl_prefix(cmd, cmd->xfer_len);
			if (iov.empty()) {
				complete_sense(cmd, Sense::InternalTargetFailure);
				return;
			}
			st->step = VerifyStep::Write;
			if (!sbc_step_submit(cmd, BsOp::Write, cmd->lba * bs, cmd->xfer_len, iov,
			                     true))
				return;
			continue;
		}
		st->step = VerifyStep::Read;
		st->inflight = static_cast<uint32_t>(
		    std::min<uint64_t>(st->chunk_blocks, cmd->nr_blocks - st->pos));
		st->iov = {st->buf.get(), size_t(st->inflight) * bs};
		if (!sbc_step_submit(cmd, BsOp::Read, (cmd->lba + st->pos) * bs, st->iov.iov_len,
		                     {&st->iov, 1}, false))
			return;
	}
}

// Both commands' execute: set up the state and run.
void exec_verify(Cmd *cmd)
{
	if (cmd->nr_blocks == 0) {
		complete_good(cmd); // SBC-3: a length of 0 verifies nothing, and is no error
		return;
	}
	const uint32_t bs = cmd->lu->block_size();
	auto *st = sbc_step_new<VerifyState>(cmd, verify_run);
	if (!st) {
		complete_sense(cmd, Sense::InsufficientResources);
		return;
	}
	const uint8_t *c = cmd->cdb;
	st->write_first =
	    c[0] == OP_WRITE_VERIFY_10 || c[0] == OP_WRITE_VERIFY_12 || c[0] == OP_WRITE_VERIFY_16;
	st->bytchk = static_cast<ByteCheck>((c[1] >> 1) & 3);
	st->chunk_blocks =
	    static_cast<uint32_t>(std::min<uint64_t>(kSbcChunkBytes / bs, cmd->nr_blocks));
	st->buf = sbc_buf_alloc(size_t(st->chunk_blocks) * bs);
	if (st->bytchk == ByteCheck::OneBlock) {
		st->ref = sbc_buf_alloc(bs);
		if (st->ref && sgl_copy_out(cmd, 0, st->ref.get(), bs) != bs) {
			complete_sense(cmd, Sense::InternalTargetFailure);
			return;
		}
	}
	if (!st->buf || (st->bytchk == ByteCheck::OneBlock && !st->ref)) {
		complete_sense(cmd, Sense::InsufficientResources);
		return;
	}
	verify_run(cmd);
}

// LBA and length of the 10-, 12- and 16-byte forms (VERIFY and WRITE AND VERIFY share the
// layout: GROUP NUMBER in byte 6, 10 or 14 is accepted as any value).
void lba_len(const uint8_t *c, uint64_t *lba, uint32_t *len)
{
	switch (c[0]) {
	case OP_VERIFY_10:
	case OP_WRITE_VERIFY_10:
		*lba = get_be32(c + 2);
		*len = get_be16(c + 7);
		break;
	case OP_VERIFY_12:
	case OP_WRITE_VERIFY_12:
		*lba = get_be32(c + 2);
		*len = get_be32(c + 6);
		break;
	default:
		*lba = get_be64(c + 2);
		*len = get_be32(c + 10);
		break;
	}
}

// A data-out of blocks blocks within MAXIMUM TRANSFER LENGTH (SBC-3 6.6.4); per_block: the
// data-out is one block per block of the range (not BYTCHK 11b's single block), so a
// shorter expected length can verify fewer blocks (CMD_BLOCK_XFER).
Sense set_data_out(Cmd *cmd, uint64_t blocks, bool per_block)
{
	LogicalUnit &lu = *cmd->lu;
	const uint64_t bytes = blocks * lu.block_size();
	if (blocks > lu.cfg().max_xfer_blocks || bytes > UINT32_MAX)
		return Sense::InvalidCdbField;
	cmd->cdb_xfer = static_cast<uint32_t>(bytes);
	cmd->cdb_dir = DataDir::Write;
	if (bytes)
		cmd->flags |= CMD_DATA_CDB | (per_block ? uint32_t{CMD_BLOCK_XFER} : 0u);
	return Sense::None;
}

} // namespace

Sense sbc_parse_verify(Cmd *cmd)
{
	const uint8_t *c = cmd->cdb;
	// SBC-3 5.31 byte 1: VRPROTECT (7..5) must be 0 without protection information
	// (libiscsi Verify*.VerifyProtect); DPO (4) is a hint; BYTCHK (2..1), 10b reserved;
	// bit 0 obsolete.
	if (c[1] & 0xe0)
		return Sense::InvalidCdbField;
	const auto bytchk = static_cast<ByteCheck>((c[1] >> 1) & 3);
	if (static_cast<uint8_t>(bytchk) == 2)
		return Sense::InvalidCdbField;
	uint64_t lba;
	uint32_t len;
	lba_len(c, &lba, &len);
	if (Sense r = sbc_check_range(*cmd->lu, lba, len); r != Sense::None)
		return r;
	cmd->lba = lba;
	cmd->nr_blocks = len;
	cmd->execute = exec_verify;
	if (len == 0)
		return Sense::None; // nothing verified, nothing transferred
	switch (bytchk) {
	case ByteCheck::Medium:
		return Sense::None;
	case ByteCheck::DataOut:
		return set_data_out(cmd, len, true);
	default: // OneBlock
		return set_data_out(cmd, 1, false);
	}
}

Sense sbc_parse_write_verify(Cmd *cmd)
{
	const uint8_t *c = cmd->cdb;
	// SBC-3 5.38 byte 1: WRPROTECT (7..5) must be 0; DPO (4) a hint; BYTCHK is bit 1 (bit 2
	// is reserved here, and so are the 10b/11b values SBC-4 gives the two bits); bit 0
	// obsolete.
	if (c[1] & 0xe4)
		return Sense::InvalidCdbField;
	uint64_t lba;
	uint32_t len;
	lba_len(c, &lba, &len);
	if (Sense r = sbc_check_range(*cmd->lu, lba, len); r != Sense::None)
		return r;
	if (Sense r = set_data_out(cmd, len, true); r != Sense::None)
		return r;
	cmd->flags |= CMD_WRITES_MEDIUM;
	cmd->lba = lba;
	cmd->nr_blocks = len;
	cmd->execute = exec_verify;
	return Sense::None;
}

} // namespace ulp::scsi
