// SPDX-License-Identifier: MIT
// scsi/sbc_write_same.cc - WRITE SAME (10) and (16) (SBC-3 5.42, 5.43; SBC-4 adds NDOB).
//
// One block of data-out is written to every block of the range, in one of three ways:
//   Unmap  the UNMAP bit on a thin LU: the range is deallocated (BsOp::Unmap), which the
//          backstores guarantee reads back as zeros (LBPRZ). SBC-3's table "ANCHOR bit,
//          UNMAP bit, and ANC_SUP bit relationships" says the data-out is not written
//          then; libiscsi's WriteSame10.UnmapUntilEnd relies on it (it sends 0xFF data and
//          reads zeros back).
//   Zero   NDOB (no data-out: zeros), or a data-out block of zeros: BsOp::WriteZeroes, so
//          that zeroing a range (Linux's BLKZEROOUT is WRITE SAME of a zero block) costs
//          no memory and lets the backstore use its fast path.
//   Same   anything else, on a backstore that replicates the block itself
//          (Backstore::write_same_max(); rbd: the OSDs do): BsOp::WriteSame of the one
//          block, in requests of at most write_same_max() bytes, one after another.
//   Data   anything else: the block is replicated into a pattern buffer of at most
//          kPatternBytes and written in requests of up to kPatternIovs copies of it
//          (one iovec per copy), one after another. The range is never allocated.
// The range is bounded by MAXIMUM WRITE SAME LENGTH (LuConfig). A NUMBER OF LOGICAL BLOCKS of
// 0 means "from the LBA to the last LBA" (WSNZ=0, sbc.h), and that range is bounded the same
// way: SBC-3 5.42 refuses any count above MAXIMUM WRITE SAME LENGTH.
//
// Writes honour the write cache as READ/WRITE do: with WCE 0 the data requests carry FUA,
// and an Unmap or WriteZeroes (which carry no FUA) is followed by a Flush when the
// backstore has a volatile cache. An abort stops the command between requests.
#include "scsi/sbc_internal.h"

#include <algorithm>
#include <cstring>

namespace ulp::scsi
{

namespace
{

// Pattern buffer: 64 KiB holds a whole number of blocks of every size (512..65536); 16
// iovecs of it make a 1 MiB request, as big as a backstore request usefully gets.
constexpr size_t kPatternBytes = 64 << 10;
constexpr size_t kPatternIovs = 16;

enum class WsMode : uint8_t {
	Unmap, // deallocate the range
	Zero,  // write zeros to it
	Same,  // the backstore writes the data-out block to every block of it
	Data,  // write the data-out block to every block of it
};

enum class WsStep : uint8_t {
	Start, // nothing submitted yet
	Io,    // a write, zero or unmap request is in flight
	Flush, // the closing flush (WCE 0 on a cached backstore) is in flight
};

struct WsState : SbcStep {
	WsMode mode = WsMode::Data;
	WsStep step = WsStep::Start;
	uint64_t pos = 0;         // blocks of the range done
	uint64_t inflight = 0;    // blocks of the request in flight
	SbcBuf pattern;           // Data: the block, repeated
	size_t pattern_bytes = 0; // a whole number of blocks
	iovec iov[kPatternIovs] = {};
};

// Whether an Unmap or WriteZeroes must be followed by a flush to be durable: the mode page
// turned the write cache off (WCE 0) while the backstore keeps one.
bool needs_flush(const LogicalUnit &lu)
{
	return !lu.wce() && lu.bs().write_cache();
}

// Submit the next request of the range, from st->pos; *answered as sbc_step_submit says.
void submit_next(Cmd *cmd, WsState *st, bool *answered)
{
	LogicalUnit &lu = *cmd->lu;
	const uint32_t bs = lu.block_size();
	const uint64_t left = cmd->nr_blocks - st->pos;
	const uint64_t off = (cmd->lba + st->pos) * bs;
	st->step = WsStep::Io;
	if (st->mode == WsMode::Unmap || st->mode == WsMode::Zero) {
		// One request: the backstores deallocate or zero any range without memory.
		st->inflight = left;
		const BsOp op = st->mode == WsMode::Unmap ? BsOp::Unmap : BsOp::WriteZeroes;
		*answered = sbc_step_submit(cmd, op, off, left * bs, {}, false);
		return;
	}
	if (st->mode == WsMode::Same) {
		st->inflight = std::min<uint64_t>(left, lu.bs().write_same_max() / bs);
		st->iov[0] = {st->pattern.get(), bs};
		*answered = sbc_step_submit(cmd, BsOp::WriteSame, off, st->inflight * bs,
		                            {st->iov, 1}, !lu.wce());
		return;
	}
	const uint64_t per_iov = st->pattern_bytes / bs;
	st->inflight = std::min<uint64_t>(left, per_iov * kPatternIovs);
	uint64_t bytes = st->inflight * bs;
	size_t n = 0;
	while (bytes) {
		const size_t len =
		    static_cast<size_t>(std::min<uint64_t>(bytes, st->pattern_bytes));
		st->iov[n++] = {st->pattern.get(), len};
		bytes -= len;
	}
	*answered =
	    sbc_step_submit(cmd, BsOp::Write, off, st->inflight * bs, {st->iov, n}, !lu.wce());
}

void ws_run(Cmd *cmd)
{
	auto *st = static_cast<WsState *>(sbc_step(cmd));
	LogicalUnit &lu = *cmd->lu;
	for (;;) {
		switch (st->step) {
		case WsStep::Start:
			break;
		case WsStep::Io:
			if (st->err) {
				complete_sense(cmd, errno_sense(st->err, true));
				return;
			}
			st->pos += st->inflight;
			break;
		case WsStep::Flush:
			if (st->err)
				complete_sense(cmd, errno_sense(st->err, true));
			else
				complete_good(cmd);
			return;
		}
		if (sbc_aborted(cmd)) {
			complete_good(cmd); // answered as aborted by cmd_finish
			return;
		}
		bool answered;
		if (st->pos < cmd->nr_blocks) {
			submit_next(cmd, st, &answered);
		} else if ((st->mode == WsMode::Unmap || st->mode == WsMode::Zero) &&
		           needs_flush(lu)) {
			st->step = WsStep::Flush;
			answered = sbc_step_submit(cmd, BsOp::Flush, 0, 0, {}, false);
		} else {
			complete_good(cmd);
			return;
		}
		if (!answered)
			return;
	}
}

bool all_zero(const uint8_t *p, size_t n)
{
	return n == 0 || (p[0] == 0 && std::memcmp(p, p + 1, n - 1) == 0);
}

void exec_write_same(Cmd *cmd)
{
	LogicalUnit &lu = *cmd->lu;
	const uint32_t bs = lu.block_size();
	auto *st = sbc_step_new<WsState>(cmd, ws_run);
	if (!st) {
		complete_sense(cmd, Sense::InsufficientResources);
		return;
	}
	const bool unmap = cmd->cdb[1] & 0x08;
	const bool ndob = cmd->cdb[0] == OP_WRITE_SAME_16 && (cmd->cdb[1] & 0x01);
	if (unmap) {
		st->mode = WsMode::Unmap;
	} else if (ndob) {
		st->mode = WsMode::Zero;
	} else {
		// The backstore replicates the block when it can take at least one block at a
		// time; else a buffer of copies.
		const bool same = lu.bs().write_same_max() >= bs;
		st->pattern_bytes = same ? bs
		                         : static_cast<size_t>(std::min<uint64_t>(
		                               kPatternBytes, uint64_t(cmd->nr_blocks) * bs));
		st->pattern = sbc_buf_alloc(st->pattern_bytes);
		if (!st->pattern) {
			complete_sense(cmd, Sense::InsufficientResources);
			return;
		}
		uint8_t *p = st->pattern.get();
		if (sgl_copy_out(cmd, 0, p, bs) != bs) {
			complete_sense(cmd, Sense::InternalTargetFailure);
			return;
		}
		if (all_zero(p, bs)) {
			st->mode = WsMode::Zero;
			st->pattern.reset();
		} else if (same) {
			st->mode = WsMode::Same;
		} else {
			for (size_t have = bs; have < st->pattern_bytes; have *= 2)
				std::memcpy(p + have, p, std::min(have, st->pattern_bytes - have));
		}
	}
	ws_run(cmd);
}

} // namespace

Sense sbc_parse_write_same(Cmd *cmd)
{
	const uint8_t *c = cmd->cdb;
	LogicalUnit &lu = *cmd->lu;
	const bool ws16 = c[0] == OP_WRITE_SAME_16;
	// Byte 1: WRPROTECT (7..5) must be 0 without protection information; ANCHOR (4);
	// UNMAP (3); PBDATA (2) and LBDATA (1), which ask for block addresses to be written
	// into the data, are not offered (SBC-3 5.42, obsolete in SBC-4); bit 0 is NDOB in
	// WRITE SAME (16) (SBC-4) and obsolete in WRITE SAME (10).
	const uint8_t b1 = c[1];
	if (b1 & 0xe6)
		return Sense::InvalidCdbField;
	const bool anchor = b1 & 0x10;
	const bool unmap = b1 & 0x08;
	const bool ndob = ws16 && (b1 & 0x01);
	// ANCHOR without UNMAP is an error, and with it needs ANC_SUP (SBC-3 table "ANCHOR
	// bit, UNMAP bit, and ANC_SUP bit relationships").
	if (anchor && (!unmap || !kSbcAncSup))
		return Sense::InvalidCdbField;
	// A write-protected LU refuses the command as DATA PROTECT before anything else
	// is held against it (libiscsi ReadOnly sends WRITE SAME with UNMAP there, expecting
	// WRITE PROTECTED whether or not the LU is thin). The core checks this again.
	if (lu.cfg().read_only || cmd->read_only)
		return Sense::WriteProtected;
	// UNMAP asks for deallocation, which only a thin LU (LBPWS, LBPWS10) offers.
	if (unmap && !lu.thin())
		return Sense::InvalidCdbField;
	const uint64_t lba = ws16 ? get_be64(c + 2) : get_be32(c + 2);
	uint64_t blocks = ws16 ? get_be32(c + 10) : get_be16(c + 7);
	// The range before the length limits: libiscsi WriteSame*.ZeroBlocks expects LBA OUT
	// OF RANGE for 0 blocks beyond the end (whatever WSNZ says).
	if (Sense r = sbc_check_range(lu, lba, blocks); r != Sense::None)
		return r;
	if (blocks == 0) {
		if (kSbcWsnz)
			return invalid_cdb_field(cmd, ws16 ? 10 : 7);
		// SBC-3 5.42: from the LBA through the last one. An LBA at the capacity names no
		// block at all to start from.
		const uint64_t nr = lu.nr_blocks(); // once: the capacity may change beside us
		if (lba >= nr)
			return Sense::LbaOutOfRange;
		blocks = nr - lba;
	}
	// MAXIMUM WRITE SAME LENGTH (SBC-3 6.6.4), for a count given or implied.
	if (blocks > lu.cfg().max_write_same_blocks || blocks > UINT32_MAX)
		return invalid_cdb_field(cmd, ws16 ? 10 : 7);
	cmd->flags |= CMD_WRITES_MEDIUM;
	cmd->lba = lba;
	cmd->nr_blocks = static_cast<uint32_t>(blocks);
	cmd->execute = exec_write_same;
	if (!ndob) {
		// One block of data-out, which the transport must deliver exactly (libiscsi
		// WriteSame*.InvalidDataOutSize).
		cmd->flags |= CMD_DATA_CDB;
		cmd->cdb_xfer = lu.block_size();
		cmd->cdb_dir = DataDir::Write;
	}
	return Sense::None;
}

} // namespace ulp::scsi
