// SPDX-License-Identifier: MIT
// scsi/xcopy.cc - EXTENDED COPY (LID1, SPC-4 6.4) and RECEIVE COPY RESULTS (SPC-4 6.18):
// the copy manager of every logical unit.
//
// EXTENDED COPY names its copy targets by identification CSCD descriptors (the NAA
// designator of VPD 83h, found through xcopy_registry.cc among the LUs of this process the
// issuing nexus may see) and its work by block-to-block segment descriptors. The data never
// passes through the initiator: each segment is read from the source LU's backstore and
// written to the destination's in chunks of kXcopyChunkBytes, one request in flight at a
// time, as the other multi-step commands run (sbc_internal.h: the loop goes on inline when
// the backstore answers inside submit, else from its completion).
//
// Two file backstores (the same one included) copy inside the kernel instead:
// copy_file_range(2) between their files, in chunks of kXcopyKernelChunkBytes run on the copy
// threads (xcopy_fast.cc; the call blocks), with the same checks between chunks. Where the
// kernel cannot (another file system: EXDEV; overlapping ranges of one file: EINVAL; a file
// system without it) the rest of that segment goes through the read/write loop. Coherence
// with the O_DIRECT reads and writes of other commands, and durability: bs_copy_range
// (backstore.h). XcopyStats count both paths (kernel_bytes: the in-kernel part).
//
// Before any data moves, every segment is checked (its copy targets reachable, its ranges
// inside both LUs, the destination writable), so a list that is wrong anywhere writes
// nothing. Between chunks the copy looks for an abort (ABORT TASK, LOGICAL UNIT RESET,
// CLEAR TASK SET, a session's loss: it stops, and the core answers it as aborted; what was
// not yet written stays as it was) and for a copy target being destroyed (it stops with
// COPY ABORTED, COPY TARGET DEVICE NOT REACHABLE, letting the destruction go on).
//
// Held results (LIST ID USAGE 00b) are kept per I_T nexus, the newest kXcopyMaxResults of
// all nexuses, for COPY STATUS and FAILED SEGMENT DETAILS.
#include "scsi/xcopy.h"
#include "scsi/sbc_internal.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <vector>

namespace ulp::scsi
{

namespace
{

enum class XcStep : uint8_t {
	Next,   // between chunks: pick the next one (or end)
	Read,   // a chunk is being read from the source
	Write,  // it is being written to the destination
	Kernel, // the kernel copies a chunk (copy_file_range(2), on a copy thread)
};

std::atomic<bool> g_kernel_copy{true}; // xcopy_set_kernel_copy

struct XcopyState : SbcStep {
	XcopyList list;
	std::array<XcopyLuRef, kXcopyMaxCscd> lu; // the LUs of the CSCDs the segments use
	bool held = false;                        // its results are kept (LIST ID USAGE 00b)
	XcStep step = XcStep::Next;
	uint8_t seg = 0;          // the segment being copied
	uint64_t seg_done = 0;    // bytes of it written
	bool path_chosen = false; // kernel is decided for this segment
	bool kernel = false;      // this segment (what is left of it) is copied by the kernel
	uint32_t chunk = 0;       // bytes of the chunk in flight
	uint64_t total = 0;       // bytes written, all segments
	SbcBuf buf;               // kXcopyChunkBytes
	iovec iov{};
};

// The bytes a segment copies (SPC-4 6.4.5.x: DC says whose blocks NUMBER OF BLOCKS counts).
uint64_t seg_bytes(const XcopySeg &s, const LogicalUnit &src, const LogicalUnit &dst)
{
	return uint64_t(s.blocks) * (s.dc ? dst.block_size() : src.block_size());
}

// A copy error as the command's sense (fixed format, as build_sense lays it out).
void complete_xerr(Cmd *cmd, const XcopyError &e)
{
	cmd->lu->xcopy_stats_.count_end(XcopyStats::End::Failed);
	cmd->status = Status::CheckCondition;
	cmd->sense_len = build_sense(Sense::InvalidParamListField, cmd->sense, 0, false, 0, e.sks);
	cmd->sense[2] = e.key;
	cmd->sense[12] = static_cast<uint8_t>(e.asc >> 8);
	cmd->sense[13] = static_cast<uint8_t>(e.asc);
	cmd_finish(cmd);
}

// COPY ABORTED with the ASC of a backstore error (errno_sense's choice for it).
XcopyError io_error(int err, bool write)
{
	return {XKEY_COPY_ABORTED, sense_asc(errno_sense(err, write)), 0};
}

void xcopy_end(Cmd *cmd, XcopyState *st, XcopyError e, bool aborted = false)
{
	for (XcopyLuRef &r : st->lu)
		r.reset(); // before completing: a destructor may be waiting for them
	if (st->held) {
		XcopyResult r;
		r.status = e || aborted ? XCOPY_DONE_ERROR : XCOPY_DONE_GOOD;
		r.segments = st->seg;
		r.bytes = st->total;
		if (e) {
			r.cmd_status = static_cast<uint8_t>(Status::CheckCondition);
			r.sense_len =
			    build_sense(Sense::InvalidParamListField, r.sense, 0, false, 0, e.sks);
			r.sense[2] = e.key;
			r.sense[12] = static_cast<uint8_t>(e.asc >> 8);
			r.sense[13] = static_cast<uint8_t>(e.asc);
		}
		xcopy_result_update(cmd->lu, cmd->sess->id(), st->list.list_id, r);
	}
	if (e) {
		complete_xerr(cmd, e);
		return;
	}
	cmd->lu->xcopy_stats_.count_end(aborted ? XcopyStats::End::Aborted : XcopyStats::End::Good);
	complete_good(cmd); // aborted: cmd_finish answers it as such
}

// Both ends are file backstores: the kernel may copy between them (bs_copy_range).
bool kernel_copy_ok(const LogicalUnit &src, const LogicalUnit &dst)
{
	return g_kernel_copy.load(std::memory_order_relaxed) && src.bs().kind() == "file" &&
	       dst.bs().kind() == "file";
}

// One chunk copied by the kernel, on a copy thread (xcopy_kernel_submit): st->chunk bytes
// asked, the bytes it copied left there.
int kernel_chunk(Cmd *cmd)
{
	auto *st = static_cast<XcopyState *>(sbc_step(cmd));
	const XcopySeg &s = st->list.seg[st->seg];
	LogicalUnit *src = st->lu[s.src].get(), *dst = st->lu[s.dst].get();
	const int64_t n =
	    bs_copy_range(src->bs(), s.src_lba * src->block_size() + st->seg_done, dst->bs(),
	                  s.dst_lba * dst->block_size() + st->seg_done, st->chunk, !dst->wce());
	if (n < 0)
		return static_cast<int>(n);
	st->chunk = static_cast<uint32_t>(n);
	return 0;
}

// st->chunk more bytes of the segment are at the destination.
void chunk_done(Cmd *cmd, XcopyState *st, bool kernel)
{
	st->seg_done += st->chunk;
	st->total += st->chunk;
	cmd->lu->xcopy_stats_.count_bytes(st->chunk, kernel);
	st->step = XcStep::Next;
	if (st->held) {
		XcopyResult r;
		r.segments = st->seg;
		r.bytes = st->total;
		xcopy_result_update(cmd->lu, cmd->sess->id(), st->list.list_id, r);
	}
}

void xcopy_run(Cmd *cmd)
{
	auto *st = static_cast<XcopyState *>(sbc_step(cmd));
	for (;;) {
		const XcopySeg *s = st->seg < st->list.nseg ? &st->list.seg[st->seg] : nullptr;
		LogicalUnit *src = s ? st->lu[s->src].get() : nullptr;
		LogicalUnit *dst = s ? st->lu[s->dst].get() : nullptr;
		switch (st->step) {
		case XcStep::Next: {
			if (!s) {
				xcopy_end(cmd, st, {});
				return;
			}
			const uint64_t len = seg_bytes(*s, *src, *dst);
			if (st->seg_done == len) {
				st->seg++;
				st->seg_done = 0;
				st->path_chosen = false;
				continue;
			}
			if (sbc_aborted(cmd)) {
				xcopy_end(cmd, st, {}, true);
				return;
			}
			if (st->lu[s->src].gone() || st->lu[s->dst].gone()) {
				xcopy_end(cmd, st,
				          {XKEY_COPY_ABORTED, XASC_TARGET_NOT_REACHABLE, 0});
				return;
			}
			if (!st->path_chosen) {
				st->kernel = kernel_copy_ok(*src, *dst);
				st->path_chosen = true;
			}
			if (st->kernel) {
				st->chunk = static_cast<uint32_t>(
				    std::min<uint64_t>(len - st->seg_done, kXcopyKernelChunkBytes));
				st->step = XcStep::Kernel;
				if (!xcopy_kernel_submit(cmd, kernel_chunk))
					return;
				break;
			}
			st->chunk = static_cast<uint32_t>(
			    std::min<uint64_t>(len - st->seg_done, kXcopyChunkBytes));
			st->iov = {st->buf.get(), st->chunk};
			st->step = XcStep::Read;
			const uint64_t off = s->src_lba * src->block_size() + st->seg_done;
			if (!sbc_step_submit_to(cmd, src->bs(), BsOp::Read, off, st->chunk,
			                        {&st->iov, 1}, false))
				return;
			break;
		}
		case XcStep::Read: {
			if (st->err) {
				xcopy_end(cmd, st, io_error(st->err, false));
				return;
			}
			st->step = XcStep::Write;
			const uint64_t off = s->dst_lba * dst->block_size() + st->seg_done;
			if (!sbc_step_submit_to(cmd, dst->bs(), BsOp::Write, off, st->chunk,
			                        {&st->iov, 1}, !dst->wce()))
				return;
			break;
		}
		case XcStep::Write:
			if (st->err) {
				xcopy_end(cmd, st, io_error(st->err, true));
				return;
			}
			chunk_done(cmd, st, false);
			break;
		case XcStep::Kernel:
			if (st->err == -EOPNOTSUPP) {
				// The kernel cannot copy these (st->err's meaning, bs_copy_range):
				// the rest of the segment is read and written here.
				st->kernel = false;
				st->step = XcStep::Next;
				break;
			}
			if (st->err) {
				xcopy_end(cmd, st, io_error(st->err, true));
				return;
			}
			chunk_done(cmd, st, true);
			break;
		}
	}
}

// The LU a CSCD names, pinned, if the issuing nexus may reach it; *ro: it reaches it
// read-only. Empty: COPY TARGET DEVICE NOT REACHABLE.
XcopyLuRef resolve(Cmd *cmd, const XcopyCscd &c, bool *ro)
{
	if (c.nul || !c.by_naa)
		return {};
	XcopyLuRef ref = xcopy_lu_get(c.naa);
	if (!ref.get())
		return ref;
	if (ref.get() == cmd->lu) {
		*ro = cmd->read_only;
		return ref;
	}
	// Another LU: only one this nexus has a LUN for (its ACL's view).
	for (uint64_t lun : cmd->sess->luns()) {
		bool r = false;
		if (cmd->sess->lookup_lun(lun, &r) == ref.get()) {
			*ro = r;
			return ref;
		}
	}
	return {};
}

// Everything about the list that needs the LUs, before any data moves.
XcopyError xcopy_check(Cmd *cmd, XcopyState *st)
{
	std::array<bool, kXcopyMaxCscd> ro{};
	for (uint8_t i = 0; i < st->list.nseg; i++) {
		const XcopySeg &s = st->list.seg[i];
		for (uint16_t idx : {s.src, s.dst}) {
			if (st->lu[idx].get())
				continue;
			st->lu[idx] = resolve(cmd, st->list.cscd[idx], &ro[idx]);
			if (!st->lu[idx].get())
				return {XKEY_COPY_ABORTED, XASC_TARGET_NOT_REACHABLE, 0};
		}
		const LogicalUnit &src = *st->lu[s.src].get();
		const LogicalUnit &dst = *st->lu[s.dst].get();
		const uint64_t bytes = seg_bytes(s, src, dst);
		if (bytes > kXcopyMaxSegmentBytes)
			return {XKEY_ILLEGAL_REQUEST, XASC_INVALID_PARAM_FIELD, 0};
		// Whole blocks of both (different block lengths with DC pointing the wrong way
		// would leave a partial block: CAT 0 forbids the residue).
		if (bytes % src.block_size() || bytes % dst.block_size())
			return {XKEY_COPY_ABORTED, XASC_NONE, 0};
		const uint64_t sb = bytes / src.block_size(), db = bytes / dst.block_size();
		if (s.src_lba > src.nr_blocks() || sb > src.nr_blocks() - s.src_lba ||
		    s.dst_lba > dst.nr_blocks() || db > dst.nr_blocks() - s.dst_lba)
			return {XKEY_COPY_ABORTED, XASC_NONE, 0};
		if (bytes && (ro[s.dst] || dst.write_protected()))
			return {XKEY_DATA_PROTECT, XASC_WRITE_PROTECTED, 0};
	}
	return {};
}

void exec_xcopy(Cmd *cmd)
{
	// SPC-4 6.4.1: a PARAMETER LIST LENGTH of 0 copies nothing and is no error.
	const size_t len = std::min<size_t>(cmd->xfer_len, get_be32(cmd->cdb + 10));
	if (len == 0) {
		cmd->lu->xcopy_stats_.count_end(XcopyStats::End::Good);
		complete_good(cmd);
		return;
	}
	uint8_t p[kXcopyMaxParamLen];
	const size_t n = sgl_copy_out(cmd, 0, p, len);
	auto *st = sbc_step_new<XcopyState>(cmd, xcopy_run);
	if (!st) {
		cmd->lu->xcopy_stats_.count_end(XcopyStats::End::Failed);
		complete_sense(cmd, Sense::InsufficientResources);
		return;
	}
	if (XcopyError e = xcopy_parse_list(p, n, &st->list)) {
		complete_xerr(cmd, e);
		return;
	}
	if (st->list.usage == XCOPY_LIST_HOLD) {
		if (!xcopy_result_begin(cmd->lu, cmd->sess->id(), st->list.list_id)) {
			complete_xerr(cmd, {XKEY_ILLEGAL_REQUEST, XASC_OPERATION_IN_PROGRESS, 0});
			return;
		}
		st->held = true;
	}
	if (XcopyError e = xcopy_check(cmd, st)) {
		xcopy_end(cmd, st, e);
		return;
	}
	// The loop's buffer, also when the kernel is to copy: it may refuse midway.
	st->buf = sbc_buf_alloc(kXcopyChunkBytes);
	if (!st->buf) {
		xcopy_end(cmd, st, {XKEY_ABORTED_COMMAND, XASC_INSUFFICIENT_RESOURCES, 0});
		return;
	}
	xcopy_run(cmd);
}

// ---- RECEIVE COPY RESULTS ---------------------------------------------------------------------

// SPC-4 6.18.4 OPERATING PARAMETERS: the limits xcopy_parse_list enforces (and the Third-party
// Copy VPD page reports, spc_vpd_3pc.cc).
std::vector<uint8_t> op_params()
{
	std::vector<uint8_t> d(46, 0);
	put_be32(&d[0], uint32_t(d.size() - 4)); // AVAILABLE DATA
	d[4] = 0x01;                             // SNLID: LIST ID USAGE 11b is supported
	put_be16(&d[8], kXcopyMaxCscd);
	put_be16(&d[10], kXcopyMaxSegments);
	put_be32(&d[12], kXcopyMaxDescListLen);
	put_be32(&d[16], kXcopyMaxSegmentBytes);
	put_be32(&d[20], kXcopyMaxInlineData);
	// HELD DATA LIMIT 0 and MAXIMUM STREAM DEVICE TRANSFER SIZE 0: no held data, no streams.
	put_be16(&d[34], kXcopyMaxConcurrent);             // TOTAL CONCURRENT COPIES
	d[36] = static_cast<uint8_t>(kXcopyMaxConcurrent); // MAXIMUM CONCURRENT COPIES
	d[37] = kXcopyDataSegmentGranularityLog2;
	// INLINE and HELD DATA GRANULARITY 0 (neither is supported); the implemented descriptor
	// type codes.
	d[43] = 2;
	d[44] = XCOPY_SEG_B2B;
	d[45] = XCOPY_CSCD_ID;
	return d;
}

void exec_rcr(Cmd *cmd)
{
	const uint8_t sa = cmd->cdb[1] & 0x1f;
	if (sa == RCR_OPERATING_PARAMETERS) {
		const std::vector<uint8_t> d = op_params();
		complete_data_in(cmd, d);
		return;
	}
	XcopyResult r;
	if (!xcopy_result_get(cmd->lu, cmd->sess->id(), cmd->cdb[2], &r,
	                      sa == RCR_FAILED_SEGMENT_DETAILS)) {
		// No copy of that list identifier held for this nexus (SPC-4 6.18.1).
		cmd->sks = sense_field_pointer(true, 2);
		complete_sense(cmd, Sense::InvalidCdbField);
		return;
	}
	std::vector<uint8_t> d;
	if (sa == RCR_COPY_STATUS) {
		// SPC-4 6.18.2: COPY MANAGER STATUS (HDD 0), SEGMENTS PROCESSED, TRANSFER COUNT
		// in the smallest unit (00h bytes, 01h KiB, ...) it fits 32 bits in.
		d.assign(12, 0);
		put_be32(&d[0], 8);
		d[4] = r.status;
		put_be16(&d[5], r.segments);
		uint8_t unit = 0;
		uint64_t count = r.bytes;
		while (count > UINT32_MAX) {
			count >>= 10;
			unit++;
		}
		d[7] = unit;
		put_be32(&d[8], static_cast<uint32_t>(count));
	} else {
		// SPC-4 6.18.5: the EXTENDED COPY's status and sense, for a copy that failed;
		// AVAILABLE DATA 0 for one in progress or completed without error.
		d.assign(4, 0);
		if (r.status == XCOPY_DONE_ERROR && r.sense_len) {
			d.assign(60 + r.sense_len, 0);
			put_be32(&d[0], uint32_t(d.size() - 4));
			d[56] = r.cmd_status;
			put_be16(&d[58], r.sense_len);
			std::memcpy(&d[60], r.sense, r.sense_len);
		}
	}
	complete_data_in(cmd, d);
}

} // namespace

void xcopy_set_kernel_copy(bool on)
{
	g_kernel_copy.store(on, std::memory_order_relaxed);
}

Sense xcopy_parse(Cmd *cmd)
{
	const uint8_t *c = cmd->cdb;
	// SPC-4 6.4.1: SERVICE ACTION 00h is EXTENDED COPY (LID1); LID4 (01h) is not offered.
	if (c[1] & 0x1f)
		return invalid_cdb_field(cmd, 1, 4);
	const uint32_t len = get_be32(c + 10);
	if (len > kXcopyMaxParamLen)
		return Sense::ParamListLengthError;
	cmd->cdb_xfer = len;
	cmd->cdb_dir = DataDir::Write;
	cmd->execute = exec_xcopy;
	return Sense::None;
}

Sense rcr_parse(Cmd *cmd)
{
	const uint8_t *c = cmd->cdb;
	switch (c[1] & 0x1f) {
	case RCR_COPY_STATUS:
	case RCR_OPERATING_PARAMETERS:
	case RCR_FAILED_SEGMENT_DETAILS:
		break;
	default: // RECEIVE DATA (01h): no held data; 05h.. are LID4's
		return invalid_cdb_field(cmd, 1, 4);
	}
	cmd->cdb_xfer = get_be32(c + 10);
	cmd->cdb_dir = DataDir::Read;
	cmd->execute = exec_rcr;
	return Sense::None;
}

} // namespace ulp::scsi
