// SPDX-License-Identifier: MIT
// scsi/bs_file_ring.cc - one io_uring of a file or block backstore (see bs_file_ring.h).
//
// A request occupies one of queue_depth preallocated slots from start to done(); requests
// beyond that wait in a FIFO linked through BsIo::bs_next and start, in order, as slots
// free. Each slot has at most one SQE in flight, so the ring never holds more than
// queue_depth requests. Nothing on this path allocates.
//
// io_uring ties a request to the thread that submitted it (its task_work, its io-wq
// workers), and depending on the kernel a thread that exits or execs with requests in
// flight gets them back -ECANCELED, -EINTR or -EFAULT. We never cancel anything ourselves
// and every operation here is idempotent, so such a request (or an -EAGAIN) is resubmitted
// from the reaping thread: the shared ring's completion thread, which lives as long as the
// backstore, or a loop ring's own loop thread, which drains the ring before it exits.
#include "scsi/bs_file_ring.h"
#include "core/check.h"
#include "core/lock_assert.h"
#include "core/log.h"
#include "core/thread_name.h"
#include "core/turn.h"

#include <fcntl.h>
#include <linux/falloc.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <span>
#include <unordered_map>

namespace ulp::scsi
{

namespace
{

constexpr uint64_t kStopTag = ~0ull; // user_data of the NOP that ends the completion thread
constexpr uint32_t kNoSlot = ~0u;    // end of the free-slot list
constexpr unsigned kBatch = 32;      // CQEs reaped per lock acquisition
constexpr unsigned kLoopBatches = 8; // batches a loop ring reaps per loop turn (then yields)
constexpr unsigned kMaxRetries = 8;  // resubmissions without progress before failing
constexpr int kDrainPollMs = 100;    // a draining loop ring looks at its eventfd this often

// WriteZeroes where neither ZERO_RANGE nor a hole punch works is written from this: 16
// iovecs of 64 KiB, a megabyte per SQE. 4 KiB aligned so the O_DIRECT path can take it.
constexpr size_t kZeroBuf = 64 << 10;
constexpr unsigned kZeroIovs = 16;
alignas(4096) uint8_t g_zeros[kZeroBuf]; // never written: the kernel only reads it

const iovec *zero_iovs()
{
	static const auto v = [] {
		std::array<iovec, kZeroIovs> a;
		for (iovec &e : a)
			e = {g_zeros, kZeroBuf};
		return a;
	}();
	return v.data();
}

// -EFAULT too: io_uring fails a request with it when its continuation (task work, e.g. a
// buffered read resubmitted after waiting for the page cache) comes due after the thread
// that submitted it has exited; the request itself was fine (seen here under load, in
// FileBackstore.SubmitterThreadsExitEarly). A bad buffer fails on each of the bounded
// retries and is reported.
bool retryable(int res)
{
	return res == -EAGAIN || res == -EINTR || res == -ECANCELED || res == -EFAULT;
}

std::atomic<uint64_t> g_next_dev_id{1}; // FileDev::id

// The calling thread's loop rings by FileDev::id; a null entry: none could be made here
// (that backstore uses its shared ring on this thread). Only this thread touches it.
thread_local std::unordered_map<uint64_t, std::unique_ptr<FileRing>> t_rings;

} // namespace

void Fd::reset()
{
	if (fd_ >= 0)
		::close(fd_);
	fd_ = -1;
}

void FileCounters::add_to(FileBsStats *s, bool loop) const
{
	auto get = [](const std::atomic<uint64_t> &c) { return c.load(std::memory_order_relaxed); };
	s->direct_rw += get(direct_rw);
	s->buffered_rw += get(buffered_rw);
	s->short_resubmit += get(short_resubmit);
	s->eof_fill += get(eof_fill);
	s->cached_reads += get(cached_reads);
	s->retried += get(retried);
	s->reaps += get(reaps);
	s->ring_enters += get(enters);
	(loop ? s->loop_requests : s->shared_requests) += get(requests);
}

void FileCounters::fold_into(FileCounters *sum) const
{
	auto add = [](std::atomic<uint64_t> &to, const std::atomic<uint64_t> &from) {
		to.fetch_add(from.load(std::memory_order_relaxed), std::memory_order_relaxed);
	};
	add(sum->direct_rw, direct_rw);
	add(sum->buffered_rw, buffered_rw);
	add(sum->short_resubmit, short_resubmit);
	add(sum->eof_fill, eof_fill);
	add(sum->cached_reads, cached_reads);
	add(sum->retried, retried);
	add(sum->requests, requests);
	add(sum->reaps, reaps);
	add(sum->enters, enters);
}

FileDev::FileDev() : id(g_next_dev_id.fetch_add(1, std::memory_order_relaxed)) {}

int FileDev::precheck(const BsIo *io) const
{
	int err = bs_check_io(bs->size(), io);
	if (err)
		return err;
	if (read_only && io->op != BsOp::Read && io->op != BsOp::Flush)
		return -EROFS;
	if (io->op == BsOp::Unmap && !can_unmap)
		return -EOPNOTSUPP;
	return 0;
}

bool FileDev::direct_ok(uint64_t off, const iovec *v, size_t n) const
{
	auto aligned = [this](const void *p) {
		return !(reinterpret_cast<uintptr_t>(p) & (mem_align - 1));
	};
	bool direct = dfd.get() >= 0 && !(off & (off_align - 1));
	for (size_t k = 0; direct && k < n; k++)
		direct = aligned(v[k].iov_base) && !(v[k].iov_len & (off_align - 1));
	return direct;
}

// ---- Life --------------------------------------------------------------------------------

FileRing::FileRing(std::shared_ptr<FileDev> dev, EventLoop *loop)
    : dev_(std::move(dev)), loop_(loop), free_(kNoSlot)
{
}

FileRing::~FileRing()
{
	cancel_deferred_flush();
	if (watched_)
		loop_->del_fd(efd_);
	if (reaper_.joinable())
		stop_thread();
	if (ring_ok_)
		io_uring_queue_exit(&ring_);
	if (efd_ >= 0)
		::close(efd_);
}

int FileRing::init(std::string *why)
{
	const uint32_t depth = dev_->queue_depth;
	// One spare SQ entry (the shared ring's stop NOP); the CQ (twice the SQ) holds every
	// slot's completion even while the reaping thread is busy. A loop ring has one issuer
	// by construction: SINGLE_ISSUER lets the kernel skip its submission lock.
	//
	// And it is reaped by that issuer, the loop's thread, which enters the kernel on every
	// turn (epoll_wait, the submit): COOP_TASKRUN lets a completion wait for that entry
	// instead of interrupting the thread with an IPI to post its CQE (io_uring_setup(2)).
	// A write the kernel hands to an io-wq worker (buffered, or on tmpfs) completes through
	// such task work, and the IPI and the interruption were a large part of a 4 KiB write's
	// cost to a busy poller (tools/iscsi-bench/README.md). The shared ring is reaped by a
	// thread that did not submit: there the interruption is what delivers the completion.
	const unsigned base = IORING_SETUP_SUBMIT_ALL;
	int r = -EINVAL;
	if (loop_) {
		r = io_uring_queue_init(depth + 1, &ring_,
		                        base | IORING_SETUP_SINGLE_ISSUER |
		                            IORING_SETUP_COOP_TASKRUN);
		if (r == -EINVAL) // before 6.0
			r = io_uring_queue_init(depth + 1, &ring_,
			                        base | IORING_SETUP_COOP_TASKRUN);
		coop_ = r == 0;
	}
	if (r == -EINVAL) // before 5.19
		r = io_uring_queue_init(depth + 1, &ring_, base);
	if (r == -EINVAL) // before 5.18: without SUBMIT_ALL, which we only lean on
		r = io_uring_queue_init(depth + 1, &ring_, 0);
	if (r < 0) {
		*why = dev_->who() + "io_uring_queue_init: " + std::strerror(-r);
		return r;
	}
	ring_ok_ = true;
	slots_ = std::make_unique<Slot[]>(depth);
	for (uint32_t i = 0; i < depth; i++)
		slots_[i].next_free = i + 1 < depth ? i + 1 : kNoSlot;
	free_ = 0;
	if (!loop_) {
		reaper_.start([this] { reaper(); });
		return 0;
	}
	efd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (efd_ < 0) {
		const int e = errno;
		*why = dev_->who() + "eventfd: " + std::strerror(e);
		return -e;
	}
	if ((r = io_uring_register_eventfd(&ring_, efd_)) < 0) {
		*why = dev_->who() + "io_uring_register_eventfd: " + std::strerror(-r);
		return r;
	}
	if ((r = loop_->add_fd(efd_, this)) < 0) {
		*why = dev_->who() + "watching its ring on " + loop_->name() + ": " +
		       std::strerror(-r);
		return r;
	}
	watched_ = true;
	return 0;
}

FileRing *FileRing::of_this_loop(const std::shared_ptr<FileDev> &dev)
{
	EventLoop *loop = this_event_loop();
	if (!loop)
		return nullptr;
	if (auto it = t_rings.find(dev->id); it != t_rings.end())
		return it->second.get();
	if (dev->stopping.load(std::memory_order_acquire))
		return nullptr;
	auto r = std::make_unique<FileRing>(dev, loop);
	std::string why;
	if (r->init(&why) < 0) {
		ULP_LOG(Warn, Scsi,
		        "{}no ring of its own on {} ({}); its requests there use the "
		        "shared ring",
		        dev->who(), loop->name(), why);
		t_rings.emplace(dev->id, nullptr);
		return nullptr;
	}
	{
		// Listed under rings_lock after a check of stopping under it: the destructor,
		// which sets stopping before it takes the lock, sees every ring ever made.
		std::lock_guard g(dev->rings_lock);
		if (dev->stopping.load(std::memory_order_relaxed))
			return nullptr; // r is freed here, on its loop thread
		dev->loop_rings.push_back(r.get());
	}
	ULP_LOG(Debug, Scsi, "{}ring of its own on {}", dev->who(), loop->name());
	FileRing *p = r.get();
	t_rings.emplace(dev->id, std::move(r));
	return p;
}

void FileRing::close(bool rings_locked)
{
	cancel_deferred_flush();
	if (watched_) {
		loop_->del_fd(efd_);
		watched_ = false;
	}
	{
		// Nobody else uses the ring by now (the destructor has drained it, or it is the
		// loop ending); the lock orders this after whatever a drain did under it.
		std::lock_guard g(lock_);
		if (ring_ok_)
			io_uring_queue_exit(&ring_);
		ring_ok_ = false;
	}
	if (efd_ >= 0)
		::close(efd_);
	efd_ = -1;
	const std::shared_ptr<FileDev> dev = dev_;
	std::unique_ptr<FileRing> self;
	if (auto it = t_rings.find(dev->id); it != t_rings.end() && it->second.get() == this) {
		self = std::move(it->second);
		t_rings.erase(it);
	}
	std::unique_lock g(dev->rings_lock, std::defer_lock);
	if (!rings_locked)
		g.lock();
	ULP_ASSERT_HELD(dev->rings_lock);
	ctr_.fold_into(&dev->retired);
	std::erase(dev->loop_rings, this);
	dev->rings_closed.notify_all();
	self.reset(); // nothing of the ring is left open: its destructor frees memory only
}

uint32_t FileRing::drain(std::chrono::steady_clock::time_point deadline, bool reap_here)
{
	const auto t0 = std::chrono::steady_clock::now();
	bool said = false;
	auto warn_once = [&](uint32_t n) {
		if (said || std::chrono::steady_clock::now() - t0 < std::chrono::seconds(1))
			return;
		said = true;
		ULP_LOG(Warn, Scsi, "{}waiting up to {} s for {} requests in flight{}", dev_->who(),
		        static_cast<long long>(kBsDrainWait.count()), n,
		        loop_ ? std::string(" on ") + loop_->name() : std::string());
	};
	std::unique_lock g(lock_);
	if (reap_here)
		flush_sq(); // what this turn prepared (submit() deferred it to the turn's end)
	while (busy_ || fifo_head_) {
		const auto now = std::chrono::steady_clock::now();
		if (now >= deadline)
			break;
		warn_once(busy_);
		if (!reap_here) {
			idle_.wait_for(g, std::min<std::chrono::steady_clock::duration>(
			                      std::chrono::milliseconds(200), deadline - now));
			continue;
		}
		// The ring's own loop thread: nobody else reaps it, so wait on its eventfd.
		g.unlock();
		pollfd p = {efd_, POLLIN, 0};
		(void)::poll(&p, 1, kDrainPollMs);
		loop_readable();
		g.lock();
	}
	// Requests that never started can still be failed; ones the kernel holds cannot (it
	// may yet write into their buffers): they are abandoned, loudly.
	BsIo *never = fifo_head_;
	fifo_head_ = fifo_tail_ = nullptr;
	const uint32_t left = busy_;
	if (left) {
		abandoned_ = true;
		ULP_LOG(Error, Scsi, "{}{} requests still in flight after {} s{}; abandoning them",
		        dev_->who(), left, static_cast<long long>(kBsDrainWait.count()),
		        loop_ ? std::string(" on ") + loop_->name() : std::string());
	}
	g.unlock();
	while (never) {
		BsIo *next = never->bs_next;
		never->done(never, -ECANCELED);
		never = next;
	}
	return left;
}

void FileRing::stop_thread()
{
	if (!reaper_.joinable())
		return;
	{
		std::lock_guard g(lock_);
		io_uring_sqe *sqe = get_sqe();
		io_uring_prep_nop(sqe);
		io_uring_sqe_set_data64(sqe, kStopTag);
		flush_sq();
	}
	reaper_.join(log::Sub::Scsi, "a file LU's shared ring reaper (its stop NOP not reaped?)");
}

// ---- Submission ----------------------------------------------------------------------------

void FileRing::submit(BsIo *io)
{
	std::lock_guard g(lock_);
	io->bs_next = nullptr;
	if (free_ == kNoSlot || fifo_head_) {
		// Beyond the queue depth (or behind requests that are): wait in order.
		if (fifo_tail_)
			fifo_tail_->bs_next = io;
		else
			fifo_head_ = io;
		fifo_tail_ = io;
		return;
	}
	start(take_slot(), io);
	// A loop ring's requests of one turn of its loop (a poll batch of commands, a
	// connection's PDUs) enter the kernel together at the turn's end, as the block layer's
	// plug sends a task's requests down when it schedules: one io_uring_enter for the
	// batch, not one per request (core/turn.h). Outside a turn, and on the shared ring
	// (any thread), now.
	if (flush_deferred_)
		return;
	if (loop_ && loop_ == this_event_loop() && defer_to_turn_end(&flush_at_turn_end, this)) {
		flush_deferred_ = true;
		return;
	}
	flush_sq();
}

void FileRing::flush_at_turn_end(void *ring)
{
	auto *r = static_cast<FileRing *>(ring);
	std::lock_guard g(r->lock_);
	r->flush_deferred_ = false;
	r->flush_sq();
}

// On the loop thread (close, or the destructor of a ring closed there): a flush deferred
// to the end of this turn must not run on a freed ring. What it would have submitted was
// submitted by the drain before (its reaps flush) or is never to be.
void FileRing::cancel_deferred_flush()
{
	if (!flush_deferred_)
		return;
	cancel_deferred(&flush_at_turn_end, this);
	flush_deferred_ = false;
}

uint32_t FileRing::take_slot()
{
	uint32_t i = free_;
	free_ = slots_[i].next_free;
	busy_++;
	return i;
}

// Puts io on slot i and prepares its first SQE. Under lock_.
void FileRing::start(uint32_t i, BsIo *io)
{
	const FileDev &d = *dev_;
	Slot &s = slots_[i];
	s.io = io;
	s.done = 0;
	s.vi = 0;
	s.voff = 0;
	s.err = d.precheck(io);
	s.retries = 0;
	s.dsync = false;
	s.sync_after = false;
	FileCounters::bump(ctr_.requests);
	if (s.err) {
		s.step = Step::Nop;
	} else if (io->op == BsOp::Flush) {
		s.step = Step::Sync;
	} else if (io->length == 0) {
		s.step = Step::Nop;
	} else if (io->op == BsOp::Read || io->op == BsOp::Write) {
		s.step = Step::Rw;
		s.dsync = io->op == BsOp::Write && (io->fua || !d.write_cache);
		advance(s, 0); // skip leading empty iovecs
	} else {
		// fallocate does not make its metadata durable; without a write cache the
		// initiator expects completion to mean durable, so sync after it.
		s.sync_after = !d.write_cache;
		s.dsync = !d.write_cache;
		if ((io->offset | io->length) & (d.lbs - 1))
			// A device's fallocate works in its blocks only. Zeros written are what
			// reads must return after either op; an Unmap that does not deallocate is
			// within SBC's rules.
			s.step = Step::ZeroWrite;
		else if (io->op == BsOp::Unmap)
			s.step = Step::Punch;
		else if (d.zero_range_ok.load(std::memory_order_relaxed))
			s.step = Step::ZeroRange;
		else
			s.step = d.can_unmap ? Step::Punch : Step::ZeroWrite;
	}
	prep(i);
}

// Moves slot s n bytes further through its iov, past any empty entries.
void FileRing::advance(Slot &s, uint64_t n)
{
	const std::span<const iovec> iov = s.io->iov;
	s.done += n;
	while (s.vi < iov.size()) {
		uint64_t rest = iov[s.vi].iov_len - s.voff;
		if (n < rest) {
			s.voff += n;
			break;
		}
		n -= rest;
		s.vi++;
		s.voff = 0;
	}
}

int FileRing::pick_fd(uint64_t off, const iovec *v, size_t n)
{
	const bool direct = dev_->direct_ok(off, v, n);
	FileCounters::bump(direct ? ctr_.direct_rw : ctr_.buffered_rw);
	return direct ? dev_->dfd.get() : dev_->fd.get();
}

io_uring_sqe *FileRing::get_sqe()
{
	io_uring_sqe *sqe = io_uring_get_sqe(&ring_);
	// Cannot fail: the SQ has a spare entry beyond one per slot, and every prepared entry
	// is submitted before the lock is dropped (or is retried by the reaping thread).
	// Continuing would lose a request.
	ULP_CHECK(sqe, "{}io_uring SQ full", dev_->who());
	prepared_ = true;
	return sqe;
}

// Prepares slot i's next SQE from its state. Under lock_.
void FileRing::prep(uint32_t i)
{
	const FileDev &d = *dev_;
	Slot &s = slots_[i];
	BsIo *io = s.io;
	io_uring_sqe *sqe = get_sqe();
	const uint64_t off = io->offset + s.done;
	const uint64_t rest = io->length - s.done;
	switch (s.step) {
	case Step::Rw: {
		const bool wr = io->op == BsOp::Write;
		const iovec *v = io->iov.data() + s.vi;
		size_t nv = io->iov.size() - s.vi;
		if (s.voff || nv == 1) {
			// Part of one buffer (the rest of an entry after a short transfer, or a
			// single-buffer request).
			iovec one = {static_cast<char *>(v->iov_base) + s.voff,
			             std::min<size_t>(v->iov_len - s.voff, kBsMaxRwBytes)};
			int fd = pick_fd(off, &one, 1);
			if (wr)
				io_uring_prep_write(sqe, fd, one.iov_base, one.iov_len, off);
			else
				io_uring_prep_read(sqe, fd, one.iov_base, one.iov_len, off);
		} else {
			nv = std::min(nv, kBsMaxIov);
			int fd = pick_fd(off, v, nv);
			if (wr)
				io_uring_prep_writev(sqe, fd, v, nv, off);
			else
				io_uring_prep_readv(sqe, fd, v, nv, off);
		}
		break;
	}
	case Step::ZeroWrite:
		if (rest >= kZeroBuf) {
			unsigned n =
			    static_cast<unsigned>(std::min<uint64_t>(rest / kZeroBuf, kZeroIovs));
			int fd = pick_fd(off, zero_iovs(), n);
			io_uring_prep_writev(sqe, fd, zero_iovs(), n, off);
		} else {
			iovec one = {g_zeros, static_cast<size_t>(rest)};
			io_uring_prep_write(sqe, pick_fd(off, &one, 1), g_zeros,
			                    static_cast<unsigned>(rest), off);
		}
		break;
	case Step::ZeroRange:
		io_uring_prep_fallocate(sqe, d.fd.get(), FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE,
		                        io->offset, io->length);
		break;
	case Step::Punch:
		// On a block device this is the kernel's zero-out without fallback: deallocate
		// and guarantee zeros, or fail. BLKDISCARD guarantees nothing about what reads
		// return afterwards.
		io_uring_prep_fallocate(sqe, d.fd.get(), FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
		                        io->offset, io->length);
		break;
	case Step::Sync:
		io_uring_prep_fsync(sqe, d.fd.get(), IORING_FSYNC_DATASYNC);
		break;
	case Step::Nop:
		io_uring_prep_nop(sqe);
		break;
	}
	if ((s.step == Step::Rw && io->op == BsOp::Write) || s.step == Step::ZeroWrite)
		sqe->rw_flags = s.dsync ? RWF_DSYNC : 0;
	io_uring_sqe_set_data64(sqe, i);
}

// Submits what prep() queued. Under lock_.
void FileRing::flush_sq()
{
	if (!prepared_)
		return;
	prepared_ = false;
	FileCounters::bump(ctr_.enters);
	int r = io_uring_submit(&ring_);
	// -EBUSY/-EAGAIN (CQ backlog, kernel memory) leave entries in the SQ; the reaping
	// thread retries them: the completion thread wakes periodically while any are left, a
	// loop ring comes back on its loop's next turn.
	if (r < 0 || io_uring_sq_ready(&ring_)) {
		if (loop_)
			wake_self();
		else
			sq_pending_.store(true, std::memory_order_relaxed);
	}
}

// ---- Completion ----------------------------------------------------------------------------

// Slot i's SQE completed with res: continue it, or finish it into out. Under lock_.
void FileRing::complete(uint32_t i, int res, Finished *out, unsigned *nout)
{
	Slot &s = slots_[i];
	BsIo *io = s.io;
	int err = 0;
	if (retryable(res) && s.step != Step::Nop && s.retries < kMaxRetries) {
		s.retries++;
		FileCounters::bump(ctr_.retried);
		prep(i);
		return;
	}
	switch (s.step) {
	case Step::Rw:
	case Step::ZeroWrite:
		if (res < 0) {
			err = res;
			break;
		}
		if (res == 0) {
			if (io->op == BsOp::Read) {
				// End of file inside size (a short file): zeros, as an unwritten
				// range reads.
				zero_rest(s);
				FileCounters::bump(ctr_.eof_fill);
			} else {
				err = -EIO; // a write that makes no progress
			}
			break;
		}
		if (s.step == Step::Rw)
			advance(s, static_cast<uint64_t>(res));
		else
			s.done += static_cast<uint64_t>(res);
		s.retries = 0;
		if (s.done < io->length) {
			if (s.step == Step::Rw)
				FileCounters::bump(ctr_.short_resubmit);
			prep(i);
			return;
		}
		break;
	case Step::ZeroRange:
		if (res == -EOPNOTSUPP && !dev_->block) {
			// tmpfs and others: never try again on this file.
			dev_->zero_range_ok.store(false, std::memory_order_relaxed);
			s.step = dev_->can_unmap ? Step::Punch : Step::ZeroWrite;
			prep(i);
			return;
		}
		[[fallthrough]];
	case Step::Punch:
		if (res == 0 && s.sync_after) {
			s.step = Step::Sync;
			prep(i);
			return;
		}
		err = res;
		break;
	case Step::Sync:
		err = res;
		break;
	case Step::Nop:
		err = s.err;
		break;
	}
	out[(*nout)++] = {io, err};
	release(i);
}

// Fills what a read has not transferred with zeros.
void FileRing::zero_rest(Slot &s)
{
	const std::span<const iovec> iov = s.io->iov;
	for (size_t k = s.vi; k < iov.size(); k++) {
		size_t from = k == s.vi ? s.voff : 0;
		std::memset(static_cast<char *>(iov[k].iov_base) + from, 0, iov[k].iov_len - from);
	}
	s.done = s.io->length;
}

// Frees slot i, or hands it straight to the oldest waiting request. Under lock_.
void FileRing::release(uint32_t i)
{
	slots_[i].io = nullptr;
	if (BsIo *next = fifo_head_) {
		fifo_head_ = next->bs_next;
		if (!fifo_head_)
			fifo_tail_ = nullptr;
		start(i, next);
		return;
	}
	slots_[i].next_free = free_;
	free_ = i;
	if (--busy_ == 0)
		idle_.notify_all();
}

unsigned FileRing::reap_batch(Finished *out, unsigned *nout, bool *stop)
{
	std::lock_guard g(lock_);
	io_uring_cqe *cqes[kBatch];
	const unsigned n = io_uring_peek_batch_cqe(&ring_, cqes, kBatch);
	for (unsigned k = 0; k < n; k++) {
		const uint64_t tag = io_uring_cqe_get_data64(cqes[k]);
		if (tag == kStopTag)
			*stop = true;
		else if (tag < dev_->queue_depth && slots_[tag].io)
			complete(static_cast<uint32_t>(tag), cqes[k]->res, out, nout);
	}
	io_uring_cq_advance(&ring_, n);
	if (abandoned_)
		*nout = 0; // the destructor gave up on them: their owners are gone
	// What an earlier submit left in the SQ, and what complete() prepared.
	sq_pending_.store(false, std::memory_order_relaxed);
	if (io_uring_sq_ready(&ring_))
		prepared_ = true;
	flush_sq();
	return n;
}

void FileRing::wake_self()
{
	const uint64_t one = 1;
	(void)!::write(efd_, &one, sizeof(one));
}

void FileRing::loop_readable()
{
	// Read first, then reap: a CQE posted after the read signals the eventfd again.
	uint64_t v;
	(void)!::read(efd_, &v, sizeof(v));
	bool any = false;
	for (unsigned b = 0; b < kLoopBatches; b++) {
		Finished fin[kBatch];
		unsigned nfin = 0;
		bool stop = false;
		const unsigned n = reap_batch(fin, &nfin, &stop);
		if (nfin && !any) {
			any = true;
			FileCounters::bump(ctr_.reaps); // this loop turn's (core/turn.h)
		}
		for (unsigned k = 0; k < nfin; k++)
			fin[k].io->done(fin[k].io, fin[k].err);
		if (n < kBatch)
			return;
	}
	wake_self(); // more may be waiting: the loop's other work first
}

void FileRing::loop_ending()
{
	drain(std::chrono::steady_clock::now() + kBsDrainWait, true);
	close();
}

void FileRing::reaper()
{
	set_thread_name("ulp-bs-reap");
	const bool can_time_out = ring_.features & IORING_FEAT_EXT_ARG;
	for (;;) {
		io_uring_cqe *cqe;
		int r;
		if (can_time_out && sq_pending_.load(std::memory_order_relaxed)) {
			__kernel_timespec ts = {0, 10 * 1000 * 1000};
			r = io_uring_wait_cqe_timeout(&ring_, &cqe, &ts);
		} else {
			r = io_uring_wait_cqe(&ring_, &cqe);
		}
		if (r < 0 && r != -EINTR && r != -ETIME && r != -EAGAIN) {
			ULP_LOG_RATELIMITED(Error, Scsi, "{}io_uring_wait_cqe: {}", dev_->who(),
			                    std::strerror(-r));
			std::this_thread::sleep_for(std::chrono::milliseconds(10));
		}
		Finished fin[kBatch];
		unsigned nfin = 0;
		bool stop = false;
		reap_batch(fin, &nfin, &stop);
		{
			// One reap is a turn of this thread (core/turn.h), as a loop ring's is of
			// its loop: the responses its done() calls produce leave together after it.
			TurnScope turn;
			if (nfin)
				FileCounters::bump(ctr_.reaps);
			for (unsigned k = 0; k < nfin; k++)
				fin[k].io->done(fin[k].io, fin[k].err);
		}
		if (stop)
			return;
	}
}

} // namespace ulp::scsi
