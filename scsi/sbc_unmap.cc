// SPDX-License-Identifier: MIT
// scsi/sbc_unmap.cc - UNMAP (SBC-3 5.28): deallocate the ranges of a parameter list, on a
// thin logical unit.
//
// The parameter list (SBC-3 table "UNMAP parameter list") is an 8-byte header - UNMAP DATA
// LENGTH, UNMAP BLOCK DESCRIPTOR DATA LENGTH - followed by 16-byte block descriptors, each
// an LBA and a NUMBER OF LOGICAL BLOCKS. The whole list is checked before anything is
// deallocated, so that a bad descriptor leaves the medium untouched:
//   - a list shorter than its header (PARAMETER LIST LENGTH 1..7): PARAMETER LIST LENGTH
//     ERROR; a length of 0 is no error and does nothing;
//   - more descriptors than MAXIMUM UNMAP BLOCK DESCRIPTOR COUNT, or more blocks in total
//     than MAXIMUM UNMAP LBA COUNT (LuConfig): INVALID FIELD IN PARAMETER LIST;
//   - a range beyond the capacity: LBA OUT OF RANGE.
// A descriptor data length beyond what was transferred, or not a multiple of 16, counts
// only the whole descriptors that arrived (SBC-3: an incomplete descriptor is ignored;
// the kernel's target is as lenient). Descriptors of 0 blocks are allowed and skipped.
//
// The ranges are then unmapped one backstore request after another; an abort stops the
// command between them, and with WCE 0 on a cached backstore a Flush closes it.
#include "scsi/sbc_internal.h"

#include <algorithm>
#include <utility>
#include <vector>

namespace ulp::scsi
{

namespace
{

constexpr size_t kUnmapHeader = 8;
constexpr size_t kUnmapDescriptor = 16;

struct Range {
	uint64_t lba;
	uint32_t blocks;
};

enum class UnmapStep : uint8_t {
	Start, // nothing submitted yet
	Io,    // ranges[next] is being unmapped
	Flush, // the closing flush is in flight
};

struct UnmapState : SbcStep {
	std::vector<Range> ranges; // the non-empty descriptors, in list order
	size_t next = 0;           // the range in flight, or the next one
	UnmapStep step = UnmapStep::Start;
};

void unmap_run(Cmd *cmd)
{
	auto *st = static_cast<UnmapState *>(sbc_step(cmd));
	LogicalUnit &lu = *cmd->lu;
	const uint32_t bs = lu.block_size();
	for (;;) {
		switch (st->step) {
		case UnmapStep::Start:
			break;
		case UnmapStep::Io:
			if (st->err) {
				complete_sense(cmd, errno_sense(st->err, true));
				return;
			}
			st->next++;
			break;
		case UnmapStep::Flush:
			if (st->err) {
				complete_sense(cmd, errno_sense(st->err, true));
				return;
			}
			lu.lbp_poll(); // usage dropped: the soft threshold may re-arm (lbp.cc)
			complete_good(cmd);
			return;
		}
		if (sbc_aborted(cmd)) {
			complete_good(cmd); // answered as aborted by cmd_finish
			return;
		}
		bool answered;
		if (st->next < st->ranges.size()) {
			const Range &r = st->ranges[st->next];
			st->step = UnmapStep::Io;
			answered = sbc_step_submit(cmd, BsOp::Unmap, r.lba * bs,
			                           uint64_t(r.blocks) * bs, {}, false);
		} else if (!lu.wce() && lu.bs().write_cache()) {
			st->step = UnmapStep::Flush;
			answered = sbc_step_submit(cmd, BsOp::Flush, 0, 0, {}, false);
		} else {
			lu.lbp_poll();
			complete_good(cmd);
			return;
		}
		if (!answered)
			return;
	}
}

// The parameter list's ranges into *out, checked; Sense::None or the reason to fail with.
Sense parse_list(Cmd *cmd, std::vector<Range> *out)
{
	LogicalUnit &lu = *cmd->lu;
	std::vector<uint8_t> list(cmd->xfer_len);
	if (sgl_copy_out(cmd, 0, list.data(), list.size()) != list.size())
		return Sense::InternalTargetFailure;
	size_t bd_len = get_be16(&list[2]);
	bd_len = std::min(bd_len, list.size() - kUnmapHeader);
	const size_t n = bd_len / kUnmapDescriptor;
	if (n > lu.cfg().max_unmap_descs)
		return Sense::InvalidParamListField;
	uint64_t total = 0;
	out->reserve(n);
	for (size_t i = 0; i < n; i++) {
		const uint8_t *d = &list[kUnmapHeader + i * kUnmapDescriptor];
		const uint64_t lba = get_be64(d);
		const uint32_t blocks = get_be32(d + 8);
		if (Sense r = sbc_check_range(lu, lba, blocks); r != Sense::None)
			return r;
		total += blocks;
		if (total > lu.cfg().max_unmap_blocks)
			return Sense::InvalidParamListField;
		if (blocks)
			out->push_back({lba, blocks});
	}
	return Sense::None;
}

void exec_unmap(Cmd *cmd)
{
	if (cmd->xfer_len == 0) {
		complete_good(cmd); // PARAMETER LIST LENGTH 0: nothing to do (SBC-3 5.28)
		return;
	}
	std::vector<Range> ranges;
	if (Sense r = parse_list(cmd, &ranges); r != Sense::None) {
		complete_sense(cmd, r);
		return;
	}
	if (ranges.empty()) {
		complete_good(cmd);
		return;
	}
	auto *st = sbc_step_new<UnmapState>(cmd, unmap_run);
	if (!st) {
		complete_sense(cmd, Sense::InsufficientResources);
		return;
	}
	st->ranges = std::move(ranges);
	unmap_run(cmd);
}

} // namespace

Sense sbc_parse_unmap(Cmd *cmd)
{
	const uint8_t *c = cmd->cdb;
	// Only a thin LU offers UNMAP (LBPU in VPD B2h); elsewhere it is an opcode we do not
	// support, as in the kernel's target, and as libiscsi Unmap.VPD accepts.
	if (!cmd->lu->thin())
		return Sense::UnsupportedOpcode;
	// Byte 1 bit 0: ANCHOR, which needs ANC_SUP (SBC-3 5.28).
	if ((c[1] & 0x01) && !kSbcAncSup)
		return Sense::InvalidCdbField;
	const uint16_t len = get_be16(c + 7);
	if (len > 0 && len < kUnmapHeader)
		return Sense::ParamListLengthError;
	cmd->cdb_xfer = len;
	cmd->cdb_dir = DataDir::Write;
	cmd->flags |= CMD_WRITES_MEDIUM;
	cmd->execute = exec_unmap;
	return Sense::None;
}

} // namespace ulp::scsi
