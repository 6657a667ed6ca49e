// SPDX-License-Identifier: MIT
// scsi/sbc_step.cc - how a block command that needs several backstore requests runs them
// one after another (see sbc_internal.h), and the buffer helpers those commands share.
#include "scsi/sbc_internal.h"

#include <algorithm>
#include <cstring>
#include <mutex>

namespace ulp::scsi
{

namespace
{

// SbcStep::phase. The submitter sets Submitting before it submits and swaps in Idle after
// submit returns; the completion swaps in Answered. Whoever swaps second goes on: the
// submitter when the answer came inside submit (it sees Answered), the completion when the
// submitter had already left (it sees Idle). The swaps are acq_rel, so the one that goes on
// sees the other's writes (the result, and the data the backstore moved).
enum : uint8_t {
	kIdle,
	kSubmitting,
	kAnswered,
};

void step_done(BsIo *io, int err)
{
	sbc_step_answer(static_cast<Cmd *>(io->priv), err);
}

} // namespace

void sbc_step_begin(Cmd *cmd)
{
	sbc_step(cmd)->phase.store(kSubmitting, std::memory_order_release);
}

bool sbc_step_handed(Cmd *cmd)
{
	return sbc_step(cmd)->phase.exchange(kIdle, std::memory_order_acq_rel) == kAnswered;
}

void sbc_step_answer(Cmd *cmd, int err)
{
	SbcStep *st = sbc_step(cmd);
	st->err = err;
	if (st->phase.exchange(kAnswered, std::memory_order_acq_rel) == kSubmitting)
		return; // the submitter is still inside sbc_step_submit: it goes on
	st->resume(cmd);
}

bool sbc_step_submit(Cmd *cmd, BsOp op, uint64_t offset, uint64_t len, std::span<const iovec> iov,
                     bool fua)
{
	return sbc_step_submit_to(cmd, cmd->lu->bs(), op, offset, len, iov, fua);
}

bool sbc_step_submit_to(Cmd *cmd, Backstore &bs, BsOp op, uint64_t offset, uint64_t len,
                        std::span<const iovec> iov, bool fua)
{
	sbc_step_begin(cmd);
	bs_submit_to(cmd, bs, op, offset, len, iov, fua, step_done);
	return sbc_step_handed(cmd);
}

bool sbc_aborted(Cmd *cmd)
{
	std::lock_guard g(task_lock(cmd));
	return cmd->aborted;
}

SbcBuf sbc_buf_alloc(size_t bytes)
{
	constexpr size_t kAlign = 4096;
	const size_t n = (std::max<size_t>(bytes, 1) + kAlign - 1) & ~(kAlign - 1);
	return SbcBuf(static_cast<uint8_t *>(std::aligned_alloc(kAlign, n)));
}

bool sgl_or_into(const Cmd *cmd, size_t off, uint8_t *p, size_t len)
{
	size_t done = 0;
	for (const iovec &v : cmd->sgl) {
		if (done == len)
			break;
		if (off >= v.iov_len) {
			off -= v.iov_len;
			continue;
		}
		const size_t n = std::min(v.iov_len - off, len - done);
		const auto *q = static_cast<const uint8_t *>(v.iov_base) + off;
		for (size_t i = 0; i < n; i++)
			p[done + i] |= q[i];
		done += n;
		off = 0;
	}
	return done == len;
}

size_t sgl_mismatch(const Cmd *cmd, size_t off, const uint8_t *p, size_t len)
{
	size_t done = 0;
	for (const iovec &v : cmd->sgl) {
		if (done == len)
			break;
		if (off >= v.iov_len) {
			off -= v.iov_len;
			continue;
		}
		const size_t n = std::min(v.iov_len - off, len - done);
		const auto *q = static_cast<const uint8_t *>(v.iov_base) + off;
		if (std::memcmp(q, p + done, n) != 0)
			return done +
			       static_cast<size_t>(std::mismatch(q, q + n, p + done).first - q);
		done += n;
		off = 0;
	}
	return done;
}

void sbc_complete_miscompare(Cmd *cmd, uint64_t off)
{
	const bool fits = off <= UINT32_MAX;
	complete_sense(cmd, Sense::Miscompare, fits, fits ? static_cast<uint32_t>(off) : 0);
}

} // namespace ulp::scsi
