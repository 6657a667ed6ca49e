// SPDX-License-Identifier: MIT
// providers/soft/engine.cc - an execution engine of a device (one queue of its "NIC").
//
// A device has one engine per completion vector (soft_internal.h, SoftDevice::engines); a
// QP runs on one for its life, so QPs on different vectors execute on different threads,
// as a multi-queue NIC spreads its QPs over its queues and their interrupt vectors.
// QPs with work sit on a run queue. The engine thread takes one, lets it execute up to a
// budget of WRs, and requeues it if it has more, so one busy QP cannot starve the others
// (round robin, like a NIC's send scheduler). When idle the thread spins briefly before it
// sleeps: a doorbell then costs a store instead of a futex wake, which is what makes
// small-message rates possible.
#include "core/log.h"
#include "core/signals_blocked.h"
#include "core/thread_name.h"
#include "providers/soft/soft_internal.h"

#include "providers/soft/shm_link.h"
#include "providers/soft/sock_conn.h"

#include <linux/capability.h>
#include <sched.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <utility>

namespace ulp::soft
{

namespace
{
constexpr int kBudget = 64;                           // WRs per QP per turn
constexpr auto kSpin = std::chrono::microseconds(50); // busy-wait before sleeping
// ...and while the socket wire has WRs in flight or just carried traffic: the answer is
// one round trip away, and a sleeping engine costs a wakeup on each side of it.
constexpr auto kSpinWire = std::chrono::microseconds(1000);
// Inline runs on this thread, of any engine: a run that schedules a QP (of its own engine
// or another's) must not start a nested progress_inline_all, whose loop reaches it anyway.
thread_local int tl_inline_depth = 0;
// This thread runs a QP for its poster (Engine::post) or for a channel's waiter whose
// doorbell rang (Engine::serve): a post from inside it only schedules.
thread_local bool tl_direct = false;

// ULP_SOFT_SPIN_US in the environment: the longest idle spin, in µs, for both cases above
// (0: none, the engine sleeps as soon as it is idle). On a host whose cores are all busy
// (a CPU-bound neighbour) a spinning engine only sees its doorbell when the scheduler
// gives it a turn, while a sleeping one is woken at once; there no spin is faster. Read
// at each engine's start. Set, it also makes an engine spin while consumers' channels may
// take its doorbells, which by default it does not (Engine::loop).
struct SpinTimes {
	std::chrono::microseconds idle, wire; // the longest spin in each case
	bool set;                             // given by ULP_SOFT_SPIN_US
};
SpinTimes spin_times()
{
	if (const char *env = std::getenv("ULP_SOFT_SPIN_US"); env && *env) {
		const auto us = std::chrono::microseconds(std::clamp(std::atol(env), 0L, 100000L));
		return {us, us, true};
	}
	return {kSpin, kSpinWire, false};
}

// ULP_SOFT_HANDOFF=0 in the environment: ring doorbells wake only the engine, as before
// consumers' channels took them (cq.cc). Read at each engine's start; for comparisons.
bool handoff_wanted()
{
	const char *env = std::getenv("ULP_SOFT_HANDOFF");
	return !(env && std::strcmp(env, "0") == 0);
}

// The engine's watchdog period while it leaves doorbells to channels: from the shortest
// (after it found a QP's work undone) doubling to the longest (nothing undone).
constexpr auto kWatchMin = std::chrono::milliseconds(1);
constexpr auto kWatchMax = std::chrono::milliseconds(128);

// An idle engine spins at a nice value this much above its own (ULP_SOFT_SPIN_NICE in the
// environment sets another, 0 turns it off): a spin only takes CPU that runnable work at
// the engine's own priority does not want, much as a guest's halt-polling stops when
// something else needs the CPU. On a host with fewer cores than busy threads (two engines,
// the ULP's poller, the backstore's workers) an engine spinning at full weight takes a
// fair share of a core from the work it waits for. The engine returns to its own nice
// value before it executes anything (may_return_to_nice); without that right engines spin
// as before.
int spin_nice_want()
{
	static const int want = [] {
		if (const char *env = std::getenv("ULP_SOFT_SPIN_NICE"); env && *env)
			return std::clamp(std::atoi(env), 0, 19);
		return 5;
	}();
	return want;
}

// Whether this thread may lower its nice value to base again after raising it: the
// kernel's can_nice() (kernel/sched/core.c) allows it when RLIMIT_NICE covers 20 - base,
// or with CAP_SYS_NICE. Asked, not tried: a try that failed would leave the thread at the
// higher value.
bool may_return_to_nice(int base)
{
	rlimit r{};
	if (getrlimit(RLIMIT_NICE, &r) == 0 &&
	    (r.rlim_cur == RLIM_INFINITY || static_cast<rlim_t>(20 - base) <= r.rlim_cur))
		return true;
	__user_cap_header_struct h{_LINUX_CAPABILITY_VERSION_3, 0};
	__user_cap_data_struct d[_LINUX_CAPABILITY_U32S_3]{};
	return syscall(SYS_capget, &h, d) == 0 && (d[0].effective & (1u << CAP_SYS_NICE)) != 0;
}
} // namespace

bool ulp_thread_runs()
{
	return tl_direct;
}

Engine::Engine(bool threaded, unsigned index) : threaded_(threaded), index_(index)
{
	const SpinTimes spin = spin_times();
	spin_idle_ = spin.idle;
	spin_wire_ = spin.wire;
	spin_set_ = spin.set;
	handoff_ = threaded_ && handoff_wanted();
	epfd_ = epoll_create1(EPOLL_CLOEXEC);
	evfd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	epoll_event ev{};
	ev.events = EPOLLIN;
	ev.data.ptr = nullptr; // the doorbell
	epoll_ctl(epfd_, EPOLL_CTL_ADD, evfd_, &ev);
	if (threaded_) {
		SignalsBlocked blocked; // the application's signals are not ours
		thread_ = std::thread([this] { loop(); });
	}
}

Engine::~Engine()
{
	stop();
	close(evfd_);
	close(epfd_);
}

// epoll data of a connection's ring doorbell: the connection's address with bit 0 set.
static void *doorbell_tag(SockConn *c)
{
	return reinterpret_cast<void *>(reinterpret_cast<uintptr_t>(c) | 1);
}

void Engine::add_conn(std::shared_ptr<SockConn> c)
{
	{
		std::lock_guard g(lock_);
		epoll_event ev{};
		ev.events = EPOLLIN | EPOLLRDHUP;
		ev.data.ptr = c.get();
		epoll_ctl(epfd_, EPOLL_CTL_ADD, c->fd, &ev);
		if (c->link) {
			epoll_event dv{};
			dv.events = EPOLLIN;
			dv.data.ptr = doorbell_tag(c.get());
			epoll_ctl(epfd_, EPOLL_CTL_ADD, c->link->my_efd(), &dv);
			// Sleeping now: the peer rings until we look (disarm_rings).
			if (rings_armed_)
				c->link->set_sleep(sleep_gen_);
			// The consumer of its receive CQ may take the doorbell (cq.cc).
			auto *rcq = c->qp ? static_cast<SoftCq *>(c->qp->recv_cq()) : nullptr;
			if (handoff_ && rcq && rcq->channel()) {
				c->hand_cq = rcq;
				static_cast<SoftChannel *>(rcq->channel())->hand(c.get());
			}
		}
		conns_.push_back(std::move(c));
	}
	if (threaded_)
		kick();
}

void Engine::unwatch_locked(SockConn &c)
{
	epoll_ctl(epfd_, EPOLL_CTL_DEL, c.fd, nullptr);
	if (c.link)
		epoll_ctl(epfd_, EPOLL_CTL_DEL, c.link->my_efd(), nullptr);
	if (c.hand)
		c.hand->unhand(&c);
	c.hand_cq = nullptr;
}

// Watch or ignore a handed connection's doorbell in our epoll (lock_).
static void watch_doorbell(int epfd, SockConn &c, bool on)
{
	if (c.eng_watch == on)
		return;
	epoll_event dv{};
	dv.events = on ? uint32_t{EPOLLIN} : 0u;
	dv.data.ptr = doorbell_tag(&c);
	epoll_ctl(epfd, EPOLL_CTL_MOD, c.link->my_efd(), &dv);
	c.eng_watch = on;
}

void Engine::consumer_sleeps(SockConn *c, SoftCq *cq)
{
	// Awake, the engine decides again before it sleeps.
	if (!sleeping_.load(std::memory_order_relaxed))
		return;
	std::lock_guard g(lock_);
	for (auto &p : conns_)
		if (p.get() == c && c->hand && c->hand_cq == cq && rings_armed_)
			watch_doorbell(epfd_, *c, false);
}

void Engine::drop_hand(SockConn *c)
{
	std::lock_guard g(lock_);
	for (auto &p : conns_) {
		if (p.get() == c && c->hand) {
			c->hand->unhand(c);
			c->hand_cq = nullptr;
			watch_doorbell(epfd_, *c, true);
		}
	}
}

// On a channel waiter's thread: c's doorbell rang in its channel. Run c's QP here, as post()
// runs it for its poster, until its peer has published nothing more; while the engine
// sleeps, each pass leaves c's ring armed with a new sleep (the peer rings once per sleep),
// and looks again after arming (sleep-then-look, as arm_rings).
void Engine::serve(SockConn *c, bool unseen)
{
	std::unique_lock g(lock_);
	if (std::none_of(conns_.begin(), conns_.end(), [c](auto &p) { return p.get() == c; }))
		return; // gone (its doorbell left the channel with it)
	uint64_t v;
	// Not rung, or its ring was read already: look at the rings themselves, but not while
	// the QP's runner is at them (it moves the link's own indexes without the lock); the
	// pass loop sends a busy QP round once more (rerun).
	if (read(c->link->my_efd(), &v, sizeof(v)) < 0 && unseen && !(c->qp && c->qp->busy) &&
	    !c->link->has_work())
		return;
	SoftQp *qp = c->qp;
	for (int pass = 0; qp && pass < 4; pass++) {
		if (qp->busy) {
			qp->rerun = true; // its runner takes it again
			return;
		}
		if (qp->parked || stop_)
			return;
		if (qp->queued) {
			runq_.erase(runq_.iterator_to(*qp));
			qp->queued = false;
		}
		const bool outer = tl_direct;
		tl_direct = true;
		run_qp(g, *qp);
		tl_direct = outer;
		if (rings_armed_) {
			if (++sleep_gen_ == 0)
				sleep_gen_ = 1;
			c->link->set_sleep(sleep_gen_);
		}
		if (!qp->queued && !c->link->has_work())
			return;
	}
	const bool again = qp && qp->queued;
	g.unlock();
	if (again)
		kick(); // more than a few passes: the engine takes the rest
}

void Engine::remove_conn(SockConn *c)
{
	std::shared_ptr<SockConn> keep; // released after the lock
	std::lock_guard g(lock_);
	for (auto it = conns_.begin(); it != conns_.end(); ++it) {
		if (it->get() == c) {
			unwatch_locked(*c);
			keep = std::move(*it);
			conns_.erase(it);
			break;
		}
	}
}

void Engine::want_write(SockConn *c, bool on)
{
	std::lock_guard g(lock_);
	for (auto &p : conns_) {
		if (p.get() == c) {
			epoll_event ev{};
			ev.events = EPOLLIN | EPOLLRDHUP | (on ? uint32_t{EPOLLOUT} : 0u);
			ev.data.ptr = c;
			epoll_ctl(epfd_, EPOLL_CTL_MOD, c->fd, &ev);
			return;
		}
	}
}

// Readiness becomes work: a ready connection schedules the QP it carries.
int Engine::poll_conns(int timeout_ms)
{
	epoll_event evs[32];
	int n = epoll_wait(epfd_, evs, 32, timeout_ms);
	int seen = 0;
	for (int i = 0; i < n; i++) {
		if (!evs[i].data.ptr) {
			uint64_t v;
			(void)!read(evfd_, &v, sizeof(v));
			continue;
		}
		// Look up and enqueue under one lock: unschedule() (QP teardown) takes it to
		// unhook the connection, so a dying QP is never queued again.
		std::lock_guard g(lock_);
		const auto tag = reinterpret_cast<uintptr_t>(evs[i].data.ptr);
		auto *c = reinterpret_cast<SockConn *>(tag & ~uintptr_t{1});
		for (auto &p : conns_) {
			if (p.get() != c)
				continue;
			if (tag & 1) { // a ring doorbell: reset it
				uint64_t v;
				(void)!read(c->link->my_efd(), &v, sizeof(v));
			} else {
				c->rx_ready.store(true, std::memory_order_relaxed);
			}
			if (SoftQp *qp = c->qp; qp && !qp->queued && !qp->parked && !stop_) {
				qp->queued = true;
				runq_.push_back(*qp);
			}
			seen++;
		}
	}
	return seen;
}

int Engine::poll_rings()
{
	int n = 0;
	for (auto &c : conns_) {
		if (!c->link)
			continue;
		// A QP its poster runs (post) is not looked at: the run owns the link's
		// progress fields, and the engine takes the QP again after it.
		if (SoftQp *qp = c->qp; qp && qp->busy) {
			qp->rerun = true;
			continue;
		}
		if (!c->link->has_work())
			continue;
		n++;
		if (SoftQp *qp = c->qp; qp && !qp->queued && !qp->parked && !stop_) {
			qp->queued = true;
			runq_.push_back(*qp);
		}
	}
	return n;
}

// Sleep-then-look against the peer's publish-then-look (ShmLink::kick): either we see its
// work here, or it sees our sleep and rings.
bool Engine::arm_rings()
{
	bool any = false;
	if (++sleep_gen_ == 0)
		sleep_gen_ = 1;
	for (auto &c : conns_) {
		if (c->link) {
			c->link->set_sleep(sleep_gen_);
			any = true;
		}
	}
	if (!any)
		return true;
	rings_armed_ = true;
	if (!poll_rings()) // loads ordered after the sleep stores (ring_load, ring_store)
		return true;
	disarm_rings();
	return false;
}

void Engine::disarm_rings()
{
	if (!rings_armed_)
		return;
	rings_armed_ = false;
	for (auto &c : conns_)
		if (c->link)
			c->link->set_sleep(0);
}

void Engine::stop()
{
	{
		std::lock_guard g(lock_);
		if (stop_)
			return;
		stop_ = true;
	}
	uint64_t one = 1;
	(void)!write(evfd_, &one, sizeof(one));
	if (thread_.joinable())
		thread_.join();
}

void Engine::kick()
{
	work_.store(true);
	if (sleeping_.load()) {
		uint64_t one = 1;
		(void)!write(evfd_, &one, sizeof(one));
	}
}

void Engine::schedule(SoftQp *qp)
{
	{
		std::lock_guard g(lock_);
		if (!qp->queued && !qp->parked && !stop_) {
			qp->queued = true;
			runq_.push_back(*qp);
		}
	}
	if (threaded_)
		kick();
	else if (tl_inline_depth == 0)
		progress_inline_all();
}

// The send queue's doorbell. On the ring wire the poster's thread executes the QP itself
// when the engine is not running it: it writes the descriptors into the ring and rings the
// peer, as rxe runs its requester task in the caller's context. The engine thread is then
// no hop on the way out: on a host with fewer cores than busy threads, each hop is a
// wake-up or a spinning thread taking a core from the work.
void Engine::post(SoftQp *qp)
{
	if (!threaded_ || tl_direct) {
		schedule(qp);
		return;
	}
	std::unique_lock g(lock_);
	if (qp->busy || qp->parked || stop_ || qp->wire != WireKind::Shm) {
		g.unlock();
		schedule(qp);
		return;
	}
	if (qp->queued) {
		runq_.erase(runq_.iterator_to(*qp));
		qp->queued = false;
	}
	tl_direct = true;
	run_qp(g, *qp);
	tl_direct = false;
	const bool again = qp->queued;
	g.unlock();
	if (again)
		kick();
}

// Run one QP that is off the run queue and not busy: lock_ held on entry and on return,
// dropped around the work. Requeues it if it stopped on budget or the engine found it
// busy meanwhile (rerun); wakes unschedule, which may wait for this run.
int Engine::run_qp(std::unique_lock<AdaptiveMutex> &g, SoftQp &qp)
{
	qp.busy = true;
	qp.more = false;
	g.unlock();
	const int n = qp.process(kBudget);
	g.lock();
	qp.busy = false;
	if ((qp.more || qp.rerun) && !qp.queued && !qp.parked && !stop_) {
		qp.queued = true;
		runq_.push_back(qp);
	}
	qp.rerun = false;
	idle_cv_.notify_all();
	return n;
}

void Engine::unschedule(SoftQp *qp)
{
	std::unique_lock g(lock_);
	for (auto it = conns_.begin(); it != conns_.end();) {
		if ((*it)->qp == qp) {
			unwatch_locked(**it);
			it = conns_.erase(it); // the QP still holds its own reference
		} else {
			++it;
		}
	}
	// Parked first: while it finishes a turn it may try to requeue itself.
	qp->parked = true;
	if (std::this_thread::get_id() != thread_.get_id())
		idle_cv_.wait(g, [qp] { return !qp->busy; });
	if (std::this_thread::get_id() != thread_.get_id())
		idle_cv_.wait(g, [this, qp] { return timer_owner_ != qp; });
	if (qp->queued) {
		runq_.erase(runq_.iterator_to(*qp));
		qp->queued = false;
	}
	std::erase_if(timers_, [qp](const Timer &t) { return t.owner == qp; });
}

void Engine::between_turns(SoftQp *qp, const std::function<void()> &fn)
{
	std::unique_lock g(lock_);
	// A turn sets busy under lock_ before it reads the wire, so the next one sees fn's
	// writes; one running now (the engine's, a poster's or a waiter's) is waited out.
	if (std::this_thread::get_id() != thread_.get_id())
		idle_cv_.wait(g, [qp] { return !qp->busy; });
	fn();
}

void Engine::unpark(SoftQp *qp)
{
	std::lock_guard g(lock_);
	qp->parked = false;
}

void Engine::add_timer(void *owner, Clock::time_point when, std::function<void()> fn)
{
	{
		std::lock_guard g(lock_);
		timers_.push_back(Timer{owner, when, std::move(fn)});
	}
	if (threaded_)
		kick();
}

void Engine::cancel_timers(void *owner)
{
	std::unique_lock g(lock_);
	if (std::this_thread::get_id() != thread_.get_id())
		idle_cv_.wait(g, [this, owner] { return timer_owner_ != owner; });
	std::erase_if(timers_, [owner](const Timer &t) { return t.owner == owner; });
}

// Run due timers and the run queue once. Called with lock_ held; drops it around work.
int Engine::run_locked(std::unique_lock<AdaptiveMutex> &g)
{
	int n = 0;
	auto now = Clock::now();
	for (size_t i = 0; i < timers_.size();) {
		if (timers_[i].when <= now) {
			Timer t = std::move(timers_[i]);
			timers_[i] = std::move(timers_.back());
			timers_.pop_back();
			timer_owner_ = t.owner; // its owner's teardown waits for it
			g.unlock();
			t.fn();
			g.lock();
			timer_owner_ = nullptr;
			idle_cv_.notify_all();
			n++;
			i = 0; // the vector may have changed
			continue;
		}
		i++;
	}
	// One pass over what is queued now; QPs requeued meanwhile go to the next pass.
	size_t todo = runq_.size();
	while (todo-- && !runq_.empty()) {
		SoftQp &qp = runq_.front();
		runq_.pop_front();
		qp.queued = false;
		if (qp.busy) {
			// Its poster runs it (post): it comes back when that run ends.
			qp.rerun = true;
			continue;
		}
		n += run_qp(g, qp) + 1;
	}
	return n;
}

int Engine::run_once()
{
	std::unique_lock g(lock_);
	if (in_run_)
		return 0;
	in_run_ = true;
	tl_inline_depth++;
	if (!conns_.empty()) {
		g.unlock();
		poll_conns(0);
		g.lock();
		poll_rings();
	}
	int n = run_locked(g);
	tl_inline_depth--;
	in_run_ = false;
	return n;
}

void Engine::loop()
{
	set_thread_name("ulp-soft-eng" + std::to_string(index_));
	tid_ = static_cast<id_t>(gettid());
	errno = 0;
	base_nice_ = getpriority(PRIO_PROCESS, tid_);
	if (errno == 0 && base_nice_ < 19 && spin_nice_want()) {
		spin_nice_ = may_return_to_nice(base_nice_) ? spin_nice_want() : 0;
		ULP_LOG(Debug, Soft, "engine {}: idle spin at nice +{}: {}", index_,
		        spin_nice_want(),
		        spin_nice_ ? "yes"
		                   : "no (no CAP_SYS_NICE, and RLIMIT_NICE does not allow "
		                     "its nice value back)");
	}
	std::unique_lock g(lock_);
	unsigned turn = 0;
	while (!stop_) {
		work_.store(false, std::memory_order_relaxed);
		// Rings are looked at every turn (a few loads), sockets every few turns while
		// busy, always when idle.
		if (!conns_.empty()) {
			poll_rings();
			if ((++turn & 7) == 0) {
				g.unlock();
				poll_conns(0);
				g.lock();
			}
		}
		if (run_locked(g))
			continue;
		if (!runq_.empty())
			continue;
		// Idle: spin for a doorbell, then sleep until one or the next timer. Not while
		// consumers' channels may take doorbells (cq.cc), unless ULP_SOFT_SPIN_US asks:
		// a spinning engine takes the peer's work from the consumer that would be woken
		// for it anyway, and a core from that consumer (tools/iscsi-bench/README.md).
		bool have_conns = !conns_.empty();
		const bool handed =
		    std::any_of(conns_.begin(), conns_.end(), [](auto &c) { return c->hand; });
		g.unlock();
		auto spin = spin_idle_;
		if (wire_hot_.load(std::memory_order_relaxed)) {
			wire_hot_.store(false, std::memory_order_relaxed);
			spin = spin_wire_;
		}
		if (handed && !spin_set_)
			spin = std::chrono::microseconds(0);
		const bool spins = spin.count() > 0;
		const auto until = Clock::now() + spin;
		bool got = false;
		if (spin_nice_ && spins)
			setpriority(PRIO_PROCESS, tid_, std::min(base_nice_ + spin_nice_, 19));
		for (unsigned n = 0; Clock::now() < until; n++) {
			if (work_.load(std::memory_order_acquire) ||
			    (have_conns && (n & 63) == 0 && poll_conns(0))) {
				got = true;
				break;
			}
			if (have_conns) {
				std::lock_guard rg(lock_);
				if (poll_rings()) {
					got = true;
					break;
				}
			}
			// Yield rather than pause: on a machine with fewer cores than busy
			// threads (the peer's engine, the ULP's poller) the party we wait for
			// may need this core.
			sched_yield();
		}
		if (spin_nice_ && spins && setpriority(PRIO_PROCESS, tid_, base_nice_) != 0) {
			// Refused after all (a security module): say so, and step no more.
			ULP_LOG(Warn, Soft,
			        "engine {}: going back to nice {} refused ({}); it runs at nice {} "
			        "from now on",
			        index_, base_nice_, std::strerror(errno),
			        std::min(base_nice_ + spin_nice_, 19));
			spin_nice_ = 0;
		}
		g.lock();
		if (got || !runq_.empty() || stop_)
			continue;
		auto next = Clock::time_point::max();
		for (auto &t : timers_)
			next = std::min(next, t.when);
		// Sleep in epoll: a doorbell (kick), a ready connection or a peer's ring doorbell
		// wakes us.
		sleeping_.store(true);
		if (work_.load() || !runq_.empty() || !arm_rings()) {
			sleeping_.store(false);
			continue;
		}
		int ms = -1;
		if (next != Clock::time_point::max()) {
			auto d = std::chrono::duration_cast<std::chrono::microseconds>(
			    next - Clock::now());
			ms = d.count() <= 0 ? 0 : static_cast<int>((d.count() + 999) / 1000);
		}
		// Doorbells of connections whose consumer sleeps on its channel (an armed
		// receive CQ) are its to take (cq.cc); the others wake us. While we leave any,
		// the watchdog bounds the sleep.
		bool watchdog = false;
		for (auto &c : conns_) {
			if (!c->hand)
				continue;
			watch_doorbell(epfd_, *c, !c->hand_cq->armed());
			watchdog = true; // its consumer may take the doorbell while we sleep
		}
		if (watchdog && (ms < 0 || ms > watchdog_.count()))
			ms = static_cast<int>(watchdog_.count());
		g.unlock();
		const int seen = poll_conns(ms);
		g.lock();
		disarm_rings();
		sleeping_.store(false);
		if (watchdog && seen == 0 && !work_.load()) {
			// Woken by the watchdog: work a consumer left undone runs now (the loop's
			// next pass), and the period starts short again; none, and it doubles.
			watchdog_ = poll_rings() ? kWatchMin : std::min(watchdog_ * 2, kWatchMax);
		}
	}
}

} // namespace ulp::soft
