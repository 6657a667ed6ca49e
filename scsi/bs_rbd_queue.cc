// SPDX-License-Identifier: MIT
// scsi/bs_rbd_queue.cc - the rbd backstore's request queues (see bs_rbd_queue.h).
#include "scsi/bs_rbd_queue.h"

#include "core/lock_assert.h"
#include "core/log.h"
#include "core/thread_name.h"
#include "core/turn.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <unordered_map>
#include <utility>

namespace ulp::scsi
{

namespace
{

std::atomic<uint64_t> g_next_rbd_dev_id{1};

// This thread's loop queues, by RbdDev::id. Entries are owned here; close() removes its own.
thread_local std::unordered_map<uint64_t, RbdQueue *> t_queues;

uint64_t rbd_now_ns()
{
	return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
	                                 std::chrono::steady_clock::now().time_since_epoch())
	                                 .count());
}

void rbd_cb(rbd_completion_t c, void *arg)
{
	auto *s = static_cast<RbdSlot *>(arg);
	s->ret = static_cast<int>(rbd_aio_get_return_value(c));
	rbd_aio_release(c);
	s->q->completed(s);
}

// librbd's errors as the contract's (backstore.h): -ERANGE, -EROFS, -ENOSPC, -EINVAL as
// they are, but -EROFS in gateway mode is -ENOLCK (the lock not held here); -ETIMEDOUT (an OSD
// operation past rados_osd_op_timeout) as it is, which the core answers BUSY; -ESHUTDOWN (this
// client blocklisted) as it is, which the core answers NOT READY, port unavailable; the rest is a
// medium error for the initiator. Failures are logged (rate limited) with what they were.
int map_error(RbdDev &d, const BsIo *io, int ret)
{
	if (ret == -EROFS && d.managed_lock) {
		// Not a read-only image (those fail at submit): the lock is elsewhere or on the
		// move (bs_rbd.cc, gateway mode), and the write did not take effect.
		ULP_LOG_RATELIMITED(Info, Scsi,
		                    "{}{} of {} bytes at {} without the image's lock (its group is "
		                    "moving): NOT READY, transitioning",
		                    d.who, bs_op_str(io->op), io->length, io->offset);
		return -ENOLCK;
	}
	if (ret == 0 || ret == -ERANGE || ret == -EROFS || ret == -ENOSPC || ret == -EINVAL ||
	    ret == -EOPNOTSUPP)
		return ret;
	if (ret == -ETIMEDOUT) {
		ULP_LOG_RATELIMITED(Warn, Scsi,
		                    "{}{} of {} bytes at {}: no answer from the OSDs in time; BUSY",
		                    d.who, bs_op_str(io->op), io->length, io->offset);
		return ret;
	}
	if (ret == -ESHUTDOWN) { // EBLOCKLISTED: this client is fenced off the cluster
		// Sticky: the OSDs refuse everything from this client instance from now on, and
		// another gateway may own the image. Said once, then every request fails at
		// submit() without reaching librbd.
		if (!d.fenced.exchange(true))
			ULP_LOG(
			    Error, Scsi,
			    "{}{} is blocklisted by the cluster (fenced): this LU fails every "
			    "command with NOT READY (port unavailable) from now on ({} at {} was "
			    "the first)",
			    d.who, d.client, bs_op_str(io->op), io->offset);
		return ret;
	}
	ULP_LOG_RATELIMITED(Error, Scsi, "{}{} of {} bytes at {}: {}", d.who, bs_op_str(io->op),
	                    io->length, io->offset, std::strerror(-ret));
	return -EIO;
}

// What a request is to the allocation map (bs_rbd_alloc.h): writes map their objects,
// Unmap and WriteZeroes (librbd deletes the objects they cover whole) may deallocate them.
enum class AllocEffect { None, Write, Unmap };

AllocEffect alloc_effect(BsOp op)
{
	switch (op) {
	case BsOp::Write:
	case BsOp::WriteSame:
	case BsOp::CompareAndWrite:
		return AllocEffect::Write;
	case BsOp::Unmap:
	case BsOp::WriteZeroes:
		return AllocEffect::Unmap;
	default:
		return AllocEffect::None;
	}
}

// The map learns of a request as it goes to librbd...
void alloc_started(RbdDev &d, RbdSlot *s, const BsIo *io)
{
	const AllocEffect e = alloc_effect(io->op);
	if (e == AllocEffect::Write)
		d.alloc.write_started(io->offset, io->length);
	else if (e == AllocEffect::Unmap)
		s->unmap = d.alloc.unmap_started();
}

// ... and as librbd answers it (ret: its result as the contract's errno).
void alloc_ended(RbdDev &d, const RbdSlot *s, const BsIo *io, int ret)
{
	const AllocEffect e = alloc_effect(io->op);
	if (e == AllocEffect::Write)
		d.alloc.write_ended(io->offset, io->length);
	else if (e == AllocEffect::Unmap)
		d.alloc.unmap_ended(io->offset, io->length, s->unmap, ret);
}

} // namespace

RbdDev::RbdDev() : id(g_next_rbd_dev_id.fetch_add(1)) {}

RbdQueue::RbdQueue(std::shared_ptr<RbdDev> dev, EventLoop *loop)
    : dev_(std::move(dev)), loop_(loop), slots_(dev_->queue_depth)
{
	for (RbdSlot &s : slots_) {
		s.q = this;
		s.next = free_;
		free_ = &s;
	}
}

RbdQueue::~RbdQueue()
{
	if (efd_ >= 0)
		::close(efd_);
}

int RbdQueue::init(std::string *why)
{
	if (!loop_) {
		thread_.start([this] { run(); });
		return 0;
	}
	efd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (efd_ < 0) {
		int e = errno;
		*why = std::string("eventfd: ") + std::strerror(e);
		return -e;
	}
	if (int r = loop_->add_fd(efd_, this); r < 0) {
		*why = std::string("watching its eventfd: ") + std::strerror(-r);
		return r;
	}
	watched_ = true;
	return 0;
}

RbdQueue *RbdQueue::of_this_loop(const std::shared_ptr<RbdDev> &dev)
{
	EventLoop *loop = this_event_loop();
	if (!loop)
		return nullptr;
	if (auto it = t_queues.find(dev->id); it != t_queues.end())
		return it->second;
	if (dev->stopping.load(std::memory_order_acquire))
		return nullptr;
	auto q = std::make_unique<RbdQueue>(dev, loop);
	std::string why;
	if (q->init(&why) < 0) {
		ULP_LOG(Warn, Scsi,
		        "{}no queue of its own on {} ({}); its requests there use the shared one",
		        dev->who, loop->name(), why);
		t_queues.emplace(dev->id, nullptr);
		return nullptr;
	}
	{
		// Listed under qs_lock after a check of stopping under it: the destructor, which
		// sets stopping before it takes the lock, sees every queue ever made.
		std::lock_guard g(dev->qs_lock);
		if (dev->stopping.load(std::memory_order_relaxed)) {
			q->loop_->del_fd(q->efd_);
			return nullptr; // q is freed here, on its loop thread, never used
		}
		dev->loop_qs.push_back(q.get());
	}
	ULP_LOG(Debug, Scsi, "{}a queue of its own on {}", dev->who, loop->name());
	RbdQueue *p = q.release();
	t_queues.emplace(dev->id, p);
	return p;
}

void RbdQueue::submit(BsIo *io)
{
	RbdSlot *s;
	{
		std::lock_guard g(lock_);
		if (!free_) {
			// Wait, in order, for a slot (FIFO through bs_next).
			io->bs_next = nullptr;
			if (fifo_tail_)
				fifo_tail_->bs_next = io;
			else
				fifo_ = io;
			fifo_tail_ = io;
			return;
		}
		s = free_;
		free_ = s->next;
		inflight_++;
	}
	dev_->inflight.fetch_add(1, std::memory_order_relaxed);
	start(s, io);
}

void RbdQueue::start(RbdSlot *s, BsIo *io)
{
	s->io = io;
	s->ret = 0;
	s->t0_ns = rbd_now_ns();
	alloc_started(*dev_, s, io); // before librbd: a write is mapped from now on
	rbd_completion_t c;
	int ret = rbd_aio_create_completion(s, rbd_cb, &c);
	if (ret < 0) {
		s->ret = ret;
		completed(s);
		return;
	}
	rbd_image_t img = dev_->image;
	const int iovcnt = static_cast<int>(io->iov.size());
	switch (io->op) {
	case BsOp::Read:
		ret = rbd_aio_readv(img, io->iov.data(), iovcnt, io->offset, c);
		break;
	case BsOp::Write:
		ret = rbd_aio_writev(img, io->iov.data(), iovcnt, io->offset, c);
		break;
	case BsOp::Flush:
		ret = rbd_aio_flush(img, c);
		break;
	case BsOp::CompareAndWrite: {
		// One buffer of 2 * length (compare, then write) or two of length each: what the
		// core sends. Anything else is refused rather than copied.
		const auto &v = io->iov;
		const char *cmp = nullptr, *wr = nullptr;
		if (v.size() == 1 && v[0].iov_len == 2 * io->length) {
			cmp = static_cast<const char *>(v[0].iov_base);
			wr = cmp + io->length;
		} else if (v.size() == 2 && v[0].iov_len == io->length &&
		           v[1].iov_len == io->length) {
			cmp = static_cast<const char *>(v[0].iov_base);
			wr = static_cast<const char *>(v[1].iov_base);
		}
		s->mismatch = 0;
		ret = cmp ? static_cast<int>(rbd_aio_compare_and_write(img, io->offset, io->length,
		                                                       cmp, wr, c, &s->mismatch, 0))
		          : -EINVAL;
		break;
	}
	case BsOp::WriteSame: // one block (bs_check_write_same), in one buffer as the core sends it
		ret = io->iov.size() == 1
		          ? rbd_aio_writesame(img, io->offset, io->length,
		                              static_cast<const char *>(io->iov[0].iov_base),
		                              io->iov[0].iov_len, c, 0)
		          : -EINVAL;
		break;
	case BsOp::Unmap: // a discard that zeroes what it cannot free (bs_rbd.cc)
	case BsOp::WriteZeroes:
		ret = rbd_aio_write_zeroes(img, io->offset, io->length, c, 0, 0);
		break;
	default:
		ret = -EINVAL;
	}
	if (ret < 0) { // refused at once: the callback will not run
		rbd_aio_release(c);
		s->ret = ret;
		completed(s);
	}
}

void RbdQueue::completed(RbdSlot *s)
{
	bool was_empty;
	{
		std::lock_guard g(lock_);
		s->next = nullptr;
		was_empty = !done_;
		if (done_tail_)
			done_tail_->next = s;
		else
			done_ = s;
		done_tail_ = s;
		if (!loop_ && was_empty)
			cv_.notify_one(); // the completion thread checks done_ under lock_
	}
	if (loop_ && was_empty) { // one wake-up per batch: the loop empties the list
		const uint64_t one = 1;
		(void)!::write(efd_, &one, sizeof(one));
	}
}

uint32_t RbdQueue::inflight()
{
	std::lock_guard g(lock_);
	return inflight_;
}

size_t RbdQueue::reap()
{
	RbdSlot *list;
	{
		std::lock_guard g(lock_);
		list = done_;
		done_ = done_tail_ = nullptr;
	}
	size_t n = 0;
	while (list) {
		RbdSlot *s = list;
		list = s->next;
		finish(s);
		n++;
	}
	return n;
}

// On the reaper: s's request is done; its slot goes to the FIFO's next request, if any.
void RbdQueue::finish(RbdSlot *s)
{
	RbdDev &d = *dev_;
	BsIo *io = s->io;
	int ret = s->ret;
	d.busy_ns.fetch_add(rbd_now_ns() - s->t0_ns, std::memory_order_relaxed);
	d.completed.fetch_add(1, std::memory_order_relaxed);
	if (io->op == BsOp::Read && ret >= 0 && static_cast<uint64_t>(ret) != io->length) {
		// librbd reads zeros where nothing was written and is never short; a short count
		// is a bug somewhere: never hand back a buffer partly filled.
		ULP_LOG_RATELIMITED(Error, Scsi, "{}read of {} bytes at {} returned {}", d.who,
		                    io->length, io->offset, ret);
		ret = -EIO;
	}
	if (io->op == BsOp::CompareAndWrite && ret == -EILSEQ) {
		// The contract's offset is from io->offset. librbd 16 reports the object's image
		// offset plus the offset within the compared bytes (it maps the OSD's offset,
		// relative to the compare, as if relative to the object); a fixed librbd would
		// report io->offset plus it. Within one sector (compare_and_write_max) the two
		// agree only where the compare starts the object, so either reading is exact.
		const uint64_t obj_start = io->offset - io->offset % d.obj_size;
		io->miscompare = s->mismatch >= io->offset  ? s->mismatch - io->offset
		                 : s->mismatch >= obj_start ? s->mismatch - obj_start
		                                            : 0;
	} else {
		ret = map_error(d, io, ret > 0 ? 0 : ret);
	}
	if (ret && ret != -EILSEQ) // a miscompare is an answer, not a failure
		d.errors.fetch_add(1, std::memory_order_relaxed);
	alloc_ended(d, s, io, ret);
	BsIo *next = nullptr;
	{
		std::lock_guard g(lock_);
		if (fifo_) { // accepted before any stop: they run
			next = fifo_;
			fifo_ = next->bs_next;
			if (!fifo_)
				fifo_tail_ = nullptr;
		} else {
			s->io = nullptr;
			s->next = free_;
			free_ = s;
			inflight_--;
		}
	}
	// Counted out before done(): whoever sees the request done sees it out of librbd too
	// (the statistics). A destructor woken here still waits for this done() to return:
	// it joins the completion thread, and a loop queue's close runs on this loop, after.
	if (!next && d.inflight.fetch_sub(1, std::memory_order_acq_rel) == 1 &&
	    d.stopping.load(std::memory_order_acquire)) {
		std::lock_guard g(d.qs_lock);
		d.qs_changed.notify_all();
	}
	io->done(io, ret);
	if (next)
		start(s, next);
}

void RbdQueue::run()
{
	set_thread_name("ulp-bs-rbd");
	std::unique_lock g(lock_);
	for (;;) {
		cv_.wait(g, [this] { return done_ || changed_ || quit_; });
		if (!done_ && quit_)
			return;
		const bool changed = std::exchange(changed_, false);
		g.unlock();
		{
			// One reap is a turn of this thread (core/turn.h), as a loop queue's is of
			// its loop: the responses its done() calls produce leave together after it.
			TurnScope turn;
			reap();
		}
		if (changed) {
			std::lock_guard n(dev_->notify_lock);
			if (dev_->storage_changed)
				dev_->storage_changed();
		}
		g.lock();
	}
}

void RbdQueue::notify_storage_changed()
{
	std::lock_guard g(lock_);
	changed_ = true;
	cv_.notify_one();
}

void RbdQueue::stop_thread()
{
	{
		std::lock_guard g(lock_);
		quit_ = true;
		cv_.notify_all();
	}
	thread_.join(log::Sub::Scsi, "an rbd LU's completion thread (a librbd callback stuck?)");
}

void RbdQueue::loop_readable()
{
	uint64_t v;
	(void)!::read(efd_, &v, sizeof(v));
	reap();
}

void RbdQueue::loop_ending()
{
	close(false);
}

void RbdQueue::close(bool qs_locked)
{
	const std::shared_ptr<RbdDev> dev = dev_;
	const auto deadline = std::chrono::steady_clock::now() + dev->drain_wait;
	auto logged = std::chrono::steady_clock::now();
	while (inflight()) {
		if (reap())
			continue;
		const auto now = std::chrono::steady_clock::now();
		if (now >= deadline) {
			// librbd will call back into this queue: it stays allocated, unwatched.
			ULP_LOG(Error, Scsi,
			        "{}{} requests of {} still in librbd after {} s; its queue is left "
			        "behind (leaked) and those requests never complete",
			        dev->who, inflight(), loop_->name(), dev->drain_wait.count());
			break;
		}
		if (now - logged >= std::chrono::seconds(1)) {
			ULP_LOG(Info, Scsi, "{}waiting for {} requests of {} in librbd", dev->who,
			        inflight(), loop_->name());
			logged = now;
		}
		std::this_thread::sleep_for(std::chrono::milliseconds(1));
	}
	const bool leak = inflight() != 0;
	if (watched_) {
		loop_->del_fd(efd_);
		watched_ = false;
	}
	if (auto it = t_queues.find(dev->id); it != t_queues.end() && it->second == this)
		t_queues.erase(it);
	{
		std::unique_lock g(dev->qs_lock, std::defer_lock);
		if (!qs_locked)
			g.lock();
		ULP_ASSERT_HELD(dev->qs_lock);
		std::erase(dev->loop_qs, this);
		dev->qs_changed.notify_all();
	}
	if (!leak)
		delete this;
}

} // namespace ulp::scsi
