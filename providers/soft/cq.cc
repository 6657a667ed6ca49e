// SPDX-License-Identifier: MIT
// providers/soft/cq.cc - completion queues and completion channels.
//
// A CQ is a ring of Wc. Overflow is a CQ error (IB spec 11.4.2.1: CQ overrun raises the
// CQ Error async event); completions that do not fit are lost, as on hardware. Arming is
// one-shot: req_notify arms, the next (solicited) completion disarms and raises one event
// on the channel, whose eventfd stays readable until get_cq_event takes it.
#include "core/log.h"
#include "providers/soft/soft_internal.h"

#include "providers/soft/shm_link.h"
#include "providers/soft/sock_conn.h"

#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace ulp::soft
{

SoftChannel::SoftChannel()
    : efd_(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)), epfd_(epoll_create1(EPOLL_CLOEXEC))
{
	epoll_event ev{};
	ev.events = EPOLLIN;
	ev.data.ptr = nullptr; // the events
	if (efd_ < 0 || epfd_ < 0 || epoll_ctl(epfd_, EPOLL_CTL_ADD, efd_, &ev) != 0) {
		if (epfd_ >= 0)
			close(epfd_);
		epfd_ = -1; // create_comp_channel fails
	}
}

SoftChannel::~SoftChannel()
{
	// Connections handed here outlive their channel only when their CQ was destroyed
	// before their QP (SoftCq's destructor says so): their engines watch them alone again.
	drop_hands(nullptr);
	if (epfd_ >= 0)
		close(epfd_);
	if (efd_ >= 0)
		close(efd_);
}

// ---- Doorbells handed to the channel ----------------------------------------------------
//
// A ring-wire QP's peer rings our doorbell when it publishes work while our engine sleeps
// (shm_link.h). The engine thread would wake, run the QP, and wake the consumer for the
// completions it pushed: two thread switches for each batch of the peer's work, the larger
// part of the soft provider's cost per I/O on a host whose cores are all busy. So the
// doorbell also rings in the channel of the QP's receive CQ, and while that CQ is armed
// (its consumer sleeps on the channel, or is about to) the engine leaves the doorbell to
// it: the consumer wakes once, runs the QP here, and finds the completions it pushed. Like
// rxe running its responder in the context that has the packets, or NAPI polling on the
// thread that waits.
//
// The engine stays the QP's executor of last resort: it still runs every QP on its own
// turns, and while it leaves doorbells to channels it sleeps no longer than its watchdog
// period (Engine::loop), so a consumer that armed its CQ and then blocked elsewhere delays
// the peer's READs and SENDs (a responder's work, which no completion of ours waits for)
// by at most that period, never for good. A channel fd may so be readable for a doorbell
// with no event pending: get_cq_event then runs the QP, and returns -EAGAIN if that
// completed nothing the CQ was armed for.

namespace
{
// The channel whose serve() runs on this thread: the events it raises on that channel are
// taken by serve()'s caller at once (see take_event).
thread_local const SoftChannel *tl_serving_ch = nullptr;
} // namespace

void SoftChannel::hand(SockConn *c)
{
	epoll_event ev{};
	ev.events = EPOLLIN;
	ev.data.ptr = c;
	std::lock_guard g(hand_lock_);
	if (epoll_ctl(epfd_, EPOLL_CTL_ADD, c->link->my_efd(), &ev) != 0) {
		ULP_LOG_RATELIMITED(Warn, Soft, "channel: watching a ring doorbell: {}",
		                    std::strerror(errno));
		return;
	}
	hands_.push_back(c);
	hand_count_.store(hands_.size(), std::memory_order_relaxed);
	c->hand = this;
}

void SoftChannel::unhand(SockConn *c)
{
	std::lock_guard g(hand_lock_);
	if (!std::erase(hands_, c))
		return;
	epoll_ctl(epfd_, EPOLL_CTL_DEL, c->link->my_efd(), nullptr);
	hand_count_.store(hands_.size(), std::memory_order_relaxed);
	c->hand = nullptr;
}

// The handed connections of cq (all of them for nullptr), each with its engine: a copy,
// for calls into the engines without hand_lock_ (their lock comes first). Read under
// hand_lock_: once it is dropped, c may leave its engine and be freed (Engine::
// remove_conn), so the engines look c up among their own before they touch it.
SoftChannel::Hands SoftChannel::hands_of(SoftCq *cq)
{
	Hands mine;
	std::lock_guard g(hand_lock_);
	for (SockConn *c : hands_)
		if (!cq || c->hand_cq == cq)
			mine.push_back({c, c->engine});
	return mine;
}

void SoftChannel::armed(SoftCq *cq)
{
	for (auto [c, eng] : hands_of(cq))
		eng->consumer_sleeps(c, cq);
}

void SoftChannel::drop_hands(SoftCq *cq)
{
	for (auto [c, eng] : hands_of(cq))
		eng->drop_hand(c);
}

void SoftChannel::serve()
{
	if (hand_count_.load(std::memory_order_relaxed) == 1) {
		// One doorbell can have rung (an initiator's channel, its one QP): its read tells,
		// and an epoll_wait that would name it first is a system call per wake-up saved.
		Hand h{};
		{
			std::lock_guard g(hand_lock_);
			if (hands_.size() == 1)
				h = {hands_.front(), hands_.front()->engine};
		}
		if (h.c) { // not under hand_lock_: the engine checks that c is still its own
			tl_serving_ch = this;
			h.eng->serve(h.c, true);
			tl_serving_ch = nullptr;
			return;
		}
	}
	epoll_event evs[16];
	const int n = epoll_wait(epfd_, evs, 16, 0);
	for (int i = 0; i < n; i++) {
		auto *c = static_cast<SockConn *>(evs[i].data.ptr);
		if (!c)
			continue; // the events' eventfd
		Engine *eng = nullptr;
		{
			std::lock_guard g(hand_lock_);
			if (std::find(hands_.begin(), hands_.end(), c) != hands_.end())
				eng = c->engine; // set before c was handed, never changed
		}
		// Not under hand_lock_: the engine checks that c is still its own.
		if (eng) {
			tl_serving_ch = this; // our events it raises are taken by our caller
			eng->serve(c);
			tl_serving_ch = nullptr;
		}
	}
}

// The eventfd is readable while events_ is not empty (a real channel's fd is: the
// conformance suite checks it). fd_set_ (lock_) says that it was written and not read since:
// it is written, with lock_ held, when an event comes and it is not set, and read, without
// lock_, by whoever takes the last event and clears fd_set_; that side then looks again and
// writes back if events came meanwhile (its read may have taken their write). So no event is
// ever pending with the fd clear, and the fd is readable only while fd_set_ is (but for the
// moment between a clear and its read).
//
// That is what lets a waiter that runs its QPs itself (serve(), on a rung doorbell) take the
// events it raised there with no system call on the eventfd: they are raised without a write
// (tl_serving_ch), taken right after, and the last is taken without a read; only events left
// behind for a later call are signalled, by take_event.
//
// The write is under lock_ and the read is not. A write outside could land after the
// clearing side's read and leave the fd readable with nothing pending and fd_set_ clear,
// which nobody would read (a waiter would spin on it). A read under lock_ made an engine
// raising an event wait while the poller read: most of the target's futex calls over iSER
// and SRP, before the hand-off.
void SoftChannel::signal_locked()
{
	fd_set_ = true;
	fd_writes.fetch_add(1, std::memory_order_relaxed);
	const uint64_t one = 1;
	(void)!write(efd_, &one, sizeof(one));
}

void SoftChannel::clear_fd()
{
	fd_reads.fetch_add(1, std::memory_order_relaxed);
	uint64_t v;
	(void)!read(efd_, &v, sizeof(v));
	std::lock_guard g(lock_);
	if (!events_.empty())
		signal_locked(); // came meanwhile: our read may have taken their write
}

void SoftChannel::raise(SoftCq *cq)
{
	std::lock_guard g(lock_);
	events_.push_back(cq);
	if (!fd_set_ && tl_serving_ch != this)
		signal_locked();
}

void SoftChannel::clear_if_idle()
{
	bool clear = false;
	{
		std::lock_guard g(lock_);
		if (events_.empty() && fd_set_) {
			fd_set_ = false;
			clear = true;
		}
	}
	if (clear)
		clear_fd();
}

void SoftChannel::forget(SoftCq *cq)
{
	{
		std::lock_guard g(lock_);
		std::erase(events_, cq);
	}
	clear_if_idle();
}

bool SoftChannel::take_event(Cq **cq)
{
	bool clear = false;
	{
		std::lock_guard g(lock_);
		if (events_.empty())
			return false;
		*cq = events_.front();
		events_.pop_front();
		if (events_.empty()) {
			clear = fd_set_;
			fd_set_ = false;
		} else if (!fd_set_) {
			signal_locked(); // raised by serve() on this thread, left for the next call
		}
	}
	if (clear)
		clear_fd();
	return true;
}

int SoftChannel::get_cq_event(Cq **cq, int timeout_ms)
{
	const auto deadline = Clock::now() + std::chrono::milliseconds(std::max(timeout_ms, 0));
	for (;;) {
		// Inline devices make progress only when someone asks; a waiter does.
		progress_inline_all();
		// A pending event first; a rung doorbell stays readable for the next call (the
		// one that finds no event), so a waiter draining its events serves it once.
		if (take_event(cq))
			return 0;
		if (handed()) {
			serve();
			if (take_event(cq))
				return 0;
		}
		// Set with nothing pending: take_event and forget leave it so never; a waiter
		// about to sleep on the fd makes sure, for the price of a lock.
		clear_if_idle();
		int slice = 10; // ms: inline devices need the next progress call
		if (timeout_ms >= 0) {
			auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
			    deadline - Clock::now());
			if (left.count() <= 0)
				return -EAGAIN;
			slice = static_cast<int>(std::min<int64_t>(left.count(), slice));
		}
		pollfd p{epfd_, POLLIN, 0};
		if (poll(&p, 1, slice) < 0 && errno != EINTR)
			return -errno;
	}
}

ChannelCounters channel_counters(CompChannel &ch)
{
	auto &c = static_cast<SoftChannel &>(ch);
	return {c.fd_writes.load(std::memory_order_relaxed),
	        c.fd_reads.load(std::memory_order_relaxed)};
}

SoftCq::SoftCq(SoftDevice &dev, const CqInitAttr &a, int cqe)
    : Cq(dev, cqe, a.comp_vector, a.channel), sdev(dev), engine(dev.engine_of(a.comp_vector)),
      event_handler(a.event_handler), ring_(static_cast<size_t>(cqe))
{
	cq_context = a.cq_context;
	dev.users++;
}

SoftCq::~SoftCq()
{
	// A real device refuses this (ibv_destroy_cq: EBUSY) and the CQ lives on; here the
	// owner's unique_ptr is already gone, so say so: the QPs now complete into nothing.
	if (int n = usecnt.load(std::memory_order_relaxed); n > 0)
		ULP_LOG(Error, Soft, "CQ destroyed while QPs still use it ({} uses)", n);
	engine.cancel_timers(this);
	if (auto *ch = static_cast<SoftChannel *>(channel())) {
		ch->drop_hands(this); // their engines must not look at this CQ any more
		ch->forget(this);
	}
	sdev.users--;
}

int SoftCq::poll(std::span<Wc> wc)
{
	if (sdev.cfg.exec == soft::Exec::Inline)
		progress_inline_all();
	// An empty CQ is seen without the lock: a poller spinning on it (a ULP's CQ thread,
	// a requester waiting for its completions) would otherwise take the lock the engine
	// needs for push() on every pass. A push that comes after the load is seen by the
	// next poll; one before a req_notify is seen by the poll after it (both under lock_).
	if (count_.load(std::memory_order_acquire) == 0)
		return 0;
	std::lock_guard g(lock_);
	const uint32_t count = count_.load(std::memory_order_relaxed);
	uint32_t n = std::min<uint32_t>(count, static_cast<uint32_t>(wc.size()));
	for (uint32_t i = 0; i < n; i++) {
		wc[i] = ring_[tail_];
		tail_ = (tail_ + 1 == ring_.size()) ? 0 : tail_ + 1;
	}
	count_.store(count - n, std::memory_order_relaxed);
	return static_cast<int>(n);
}

int SoftCq::req_notify(CqNotify flags)
{
	{
		std::lock_guard g(lock_);
		// A Solicited request does not weaken an armed NextComp (IB spec 11.4.2.2).
		if (!armed_ || flags == CqNotify::NextComp)
			arm_flags_ = flags;
		armed_ = true;
		mod_pending_ = 0;
		arm_gen_++;
		mod_timer_ = false; // a timer of an earlier arming no longer counts
	}
	if (auto *ch = static_cast<SoftChannel *>(channel()); ch && ch->handed())
		ch->armed(this);
	return 0;
}

int SoftCq::modify(uint16_t count, uint16_t period_us)
{
	if (!(sdev.attr().device_cap_flags & DEVICE_CQ_MODERATION))
		return -EOPNOTSUPP;
	std::lock_guard g(lock_);
	mod_count_ = count;
	mod_period_us_ = period_us;
	return 0;
}

int SoftCq::resize(int cqe)
{
	if (!(sdev.attr().device_cap_flags & DEVICE_CQ_RESIZE))
		return -EOPNOTSUPP;
	if (cqe <= 0 || static_cast<uint32_t>(cqe) > sdev.attr().max_cqe)
		return -EINVAL;
	std::lock_guard g(lock_);
	const uint32_t count = count_.load(std::memory_order_relaxed);
	if (static_cast<uint32_t>(cqe) < count)
		return -EINVAL; // would lose completions
	std::vector<Wc> r(static_cast<size_t>(cqe));
	for (uint32_t i = 0; i < count; i++)
		r[i] = ring_[(tail_ + i) % ring_.size()];
	ring_.swap(r);
	tail_ = 0;
	head_ = count % ring_.size();
	cqe_ = cqe;
	return 0;
}

void SoftCq::maybe_raise_locked(bool solicited, bool error)
{
	if (!armed_ || !channel())
		return;
	if (arm_flags_ == CqNotify::Solicited && !solicited && !error)
		return;
	// Moderation: hold the event until mod_count completions or the period elapses, as a
	// NIC holds its interrupt. Not when a ULP's thread pushes this completion, running its
	// QP itself (ulp_thread_runs: a poster in post_send, a waiter serving a rung doorbell):
	// that thread is awake, and no interrupt is saved. A held event would send a waiter to
	// sleep on completions it has in hand, and the period's timer wakes the engine: a
	// target's poller, posting its turn's responses after it re-armed its CQ, armed that
	// timer a few thousand times a second, each a wake-up of the engine thread and a
	// thread switch on a busy host.
	if (mod_count_ > 1 && !ulp_thread_runs() && ++mod_pending_ < mod_count_) {
		if (mod_period_us_ && !mod_timer_) {
			mod_timer_ = true;
			uint32_t gen = arm_gen_;
			engine.add_timer(this,
			                 Clock::now() + std::chrono::microseconds(mod_period_us_),
			                 [this, gen] { fire_moderation_timer(gen); });
		}
		return;
	}
	armed_ = false;
	mod_pending_ = 0;
	static_cast<SoftChannel *>(channel())->raise(this);
}

void SoftCq::fire_moderation_timer(uint32_t gen)
{
	std::lock_guard g(lock_);
	if (gen != arm_gen_)
		return; // from an earlier arming
	mod_timer_ = false;
	if (armed_ && mod_pending_ && channel()) {
		armed_ = false;
		mod_pending_ = 0;
		static_cast<SoftChannel *>(channel())->raise(this);
	}
}

void SoftCq::push(const Wc &wc, bool solicited)
{
	bool overflow = false;
	{
		std::lock_guard g(lock_);
		const uint32_t count = count_.load(std::memory_order_relaxed);
		if (count == ring_.size()) {
			overflow = !overflowed_;
			overflowed_ = true;
		} else {
			ring_[head_] = wc;
			head_ = (head_ + 1 == ring_.size()) ? 0 : head_ + 1;
			count_.store(count + 1, std::memory_order_release);
			maybe_raise_locked(solicited, wc.status != WcStatus::Success);
		}
	}
	if (overflow) {
		AsyncEvent ev;
		ev.event = EventType::CqErr;
		ev.device = &sdev;
		ev.cq = this;
		if (event_handler)
			event_handler(ev);
	}
}

std::unique_ptr<CompChannel> SoftDevice::create_comp_channel()
{
	auto ch = std::make_unique<SoftChannel>();
	if (ch->fd() < 0)
		return nullptr;
	return ch;
}

std::unique_ptr<Cq> SoftDevice::create_cq(const CqInitAttr &a)
{
	if (a.cqe <= 0 || static_cast<uint32_t>(a.cqe) > attr().max_cqe || a.comp_vector < 0 ||
	    static_cast<uint32_t>(a.comp_vector) >= attr().num_comp_vectors) {
		errno = EINVAL;
		return nullptr;
	}
	return std::make_unique<SoftCq>(*this, a, a.cqe);
}

} // namespace ulp::soft
