// SPDX-License-Identifier: MIT
// cq_poll/cq_poll.cc - the completion framework (drivers/infiniband/core/cq.c).
//
// Locks, in the order they nest (never the other way round):
//   Global::lock   devices' resources, the pools' lists and cqe_used, thread refcounts
//   Poller::lock   one poller's CQ map, its ready list, its Softirq CQs' run state
//   WorkPool::lock the work queues and the Workqueue CQs' run state
//   PollGroup::lock_ a group's CQ list and the CQ it is processing
// No lock is held while a done() callback runs.
#include "cq_poll/cq_poll.h"
#include "core/log.h"
#include "core/thread_name.h"
#include "cq_poll/dim.h"

#include <boost/intrusive/list.hpp>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <future>
#include <unordered_map>

namespace ulp
{

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

struct Poller;

// Where a threaded CQ is in its processing cycle (the kernel's irq_poll / work_struct
// pending and running bits). Guarded by the lock of whoever queues it: Poller::lock for
// Softirq, WorkPool::lock for the workqueues.
enum class RunState : uint8_t {
	Idle,    // armed (or about to be), waiting for an event
	Queued,  // on a ready list or work queue
	Running, // a thread is processing it
};

using ReadyHook =
    boost::intrusive::list_member_hook<boost::intrusive::link_mode<boost::intrusive::safe_link>>;

struct PollCq {
	std::unique_ptr<Cq> cq; // the provider's CQ; destroyed by free_cq
	PollCtx ctx = PollCtx::None;
	Device *dev = nullptr;
	Poller *poller = nullptr;   // Softirq and workqueues: the vector's poller (event source)
	PollGroup *group = nullptr; // BusyPoll: its group
	int worker = -1;            // Workqueue: the bound worker; -1 for Unbound

	RunState state = RunState::Idle; // (poller or pool lock)
	bool again = false;              // an event came while Running: run again (same lock)
	bool dying = false;              // free_cq has begun: never queue it again (same lock)
	std::atomic<bool> abort{false};  // free_cq waits: end the running pass after its batch
	std::thread::id runner;          // the thread processing it while Running (same lock)
	ReadyHook ready_hook;            // on Poller::ready or a WorkPool queue (same lock)

	bool shared = false; // a pool CQ (set at creation, then read-only)
	int cqe_used = 0;    // pool CQs: entries handed out by cq_pool_get (Global::lock)

	bool dim_on = false; // adaptive moderation active (processing thread)
	Dim dim;             // its state (processing thread)

	std::atomic<uint64_t> passes{0};      // see CqStats (relaxed)
	std::atomic<uint64_t> completions{0}; // (relaxed)
	std::atomic<uint64_t> dropped{0};     // (relaxed)
	std::atomic<int> dim_level{-1};       // (relaxed)
	std::atomic<int> dim_max_level{-1};   // (relaxed)
};

using ReadyList =
    boost::intrusive::list<PollCq,
                           boost::intrusive::member_hook<PollCq, ReadyHook, &PollCq::ready_hook>,
                           boost::intrusive::constant_time_size<false>>;

namespace
{

constexpr auto kStopTimeout = 5s; // bound on stopping a thread before we log and keep waiting
constexpr int kIdleSliceMs = 10;  // pollers wake this often: inline devices progress on it

uint64_t now_us()
{
	return static_cast<uint64_t>(
	    std::chrono::duration_cast<std::chrono::microseconds>(Clock::now().time_since_epoch())
	        .count());
}

unsigned cpus()
{
	unsigned n = std::thread::hardware_concurrency();
	return n ? n : 1;
}

bool threaded(PollCtx c)
{
	return c == PollCtx::Softirq || c == PollCtx::Workqueue || c == PollCtx::UnboundWorkqueue;
}

// A thread whose exit can be waited for with a bound (std::thread has no timed join).
struct BoundedThread {
	std::thread thr;
	std::future<void> exited; // ready once the body has returned

	template <class F> void start(F &&body)
	{
		std::promise<void> p;
		exited = p.get_future();
		thr = std::thread([body = std::forward<F>(body), p = std::move(p)]() mutable {
			body();
			p.set_value();
		});
	}
	// Join; after kStopTimeout log what we wait for (a done() callback that blocks) and
	// keep waiting: returning early would leave the thread running on freed state.
	void join(const char *what)
	{
		if (!thr.joinable())
			return;
		if (exited.wait_for(kStopTimeout) != std::future_status::ready)
			ULP_LOG(Warn, CqPoll,
			        "{} did not stop within {} s (a done() callback blocked?); still "
			        "waiting",
			        what, static_cast<long long>(kStopTimeout.count()));
		thr.join();
	}
};

// The CQ whose done() callbacks this thread is running (innermost), so that free_cq
// called from one of them is told -EDEADLK before anything else.
thread_local const PollCq *t_in_done = nullptr;

// __ib_process_cq: poll batches into wcs, dispatch, until a short batch or the budget.
int process_cq(PollCq &p, int budget, std::span<Wc> wcs)
{
	const int batch = static_cast<int>(wcs.size());
	Cq &cq = *p.cq;
	int completed = 0;
	uint64_t dropped = 0;
	if (budget <= 0)
		return 0;
	struct InDone {
		const PollCq *saved;
		explicit InDone(const PollCq *p) : saved(t_in_done) { t_in_done = p; }
		~InDone() { t_in_done = saved; }
	} in_done(&p);
	int n;
	while ((n = cq.poll(wcs.first(static_cast<size_t>(std::min(batch, budget - completed))))) >
	       0) {
		for (int i = 0; i < n; i++) {
			Wc &wc = wcs[static_cast<size_t>(i)];
			if (wc.wr_cqe)
				wc.wr_cqe->done(&cq, &wc);
			else
				dropped++; // a flushed WR that had no cqe: silently consumed
		}
		completed += n;
		if (n != batch || completed >= budget)
			break;
		// free_cq is waiting: stop at a batch boundary rather than after the budget
		// (up to 65536 callbacks on a workqueue). What is left dies with the CQ.
		if (p.abort.load(std::memory_order_relaxed))
			break;
	}
	p.passes.fetch_add(1, std::memory_order_relaxed);
	if (completed)
		p.completions.fetch_add(static_cast<uint64_t>(completed),
		                        std::memory_order_relaxed);
	if (dropped)
		p.dropped.fetch_add(dropped, std::memory_order_relaxed);
	return completed;
}

// rdma_dim() at the end of a pass, and ib_cq_rdma_dim_work's modify_cq when it moves.
void dim_sample(PollCq &p, int completed)
{
	if (!p.dim_on || !p.dim.sample(static_cast<uint64_t>(completed), now_us()))
		return;
	DimProfile prof = p.dim.profile();
	int rc = p.cq->modify(prof.comps, prof.usec);
	p.dim.applied();
	if (rc) {
		ULP_LOG_RATELIMITED(Warn, CqPoll, "modify_cq({}, {} us) failed ({}): DIM off",
		                    prof.comps, prof.usec, rc);
		p.dim_on = false;
		p.dim_level.store(-1, std::memory_order_relaxed);
		return;
	}
	int lvl = p.dim.level();
	p.dim_level.store(lvl, std::memory_order_relaxed);
	if (lvl > p.dim_max_level.load(std::memory_order_relaxed))
		p.dim_max_level.store(lvl, std::memory_order_relaxed);
}

// One pass of a threaded CQ: up to budget, then (under budget) re-arm and poll once more,
// since userspace has no IB_CQ_REPORT_MISSED_EVENTS. True when it must run again.
bool threaded_pass(PollCq &p, int budget, bool dim_every_pass)
{
	std::array<Wc, kPollBatch> wcs;
	int completed = process_cq(p, budget, wcs);
	bool more = completed >= budget;
	if (!more) {
		p.cq->req_notify(CqNotify::NextComp);
		// A completion that arrived before the arm raised no event: catch it here.
		int late = process_cq(p, budget - completed, wcs);
		completed += late;
		more = late > 0;
	}
	// ib_poll_handler samples every pass; ib_cq_poll_work only when not requeued.
	if (dim_every_pass || !more)
		dim_sample(p, completed);
	return more;
}

} // namespace

// ---------------------------------------------------------------------------------------------
// The completion work pool (ib_comp_wq / ib_comp_unbound_wq): shared by every device.

class WorkPool
{
public:
	explicit WorkPool(int nworkers)
	    : cvs_(static_cast<size_t>(nworkers)), bound_(static_cast<size_t>(nworkers))
	{
		workers_.resize(static_cast<size_t>(nworkers));
		for (int i = 0; i < nworkers; i++)
			workers_[static_cast<size_t>(i)].start([this, i] { work(i); });
	}
	~WorkPool()
	{
		{
			std::lock_guard g(lock);
			stop_ = true;
		}
		notify_all();
		for (auto &w : workers_)
			w.join("completion worker");
	}
	int nworkers() const { return static_cast<int>(workers_.size()); }

	// queue_work: the CQ had an event. Poller::lock is held (keeps p alive).
	void kick(PollCq &p)
	{
		{
			std::lock_guard g(lock);
			if (p.dying)
				return;
			if (p.state == RunState::Running) {
				p.again = true;
				return;
			}
			if (p.state == RunState::Queued)
				return;
			p.state = RunState::Queued;
			queue_of(p).push_back(p);
		}
		// A bound CQ wakes its own worker only: waking them all cost a thread switch
		// per completion event for nothing (tools/iscsi-bench/vm-iser counts them).
		if (p.worker >= 0)
			cvs_[static_cast<size_t>(p.worker)].notify_one();
		else
			notify_all();
	}

	// free_cq: after this, p is never queued again and no worker processes it.
	// -EDEADLK when called by the worker processing p.
	int kill(PollCq &p)
	{
		std::unique_lock g(lock);
		if (p.state == RunState::Running && p.runner == std::this_thread::get_id())
			return -EDEADLK;
		p.dying = true;
		p.abort.store(true, std::memory_order_relaxed);
		if (p.state == RunState::Queued) {
			queue_of(p).erase(queue_of(p).iterator_to(p));
			p.state = RunState::Idle;
		}
		while (p.state == RunState::Running)
			if (!done_cv_.wait_for(g, kStopTimeout,
			                       [&] { return p.state != RunState::Running; }))
				ULP_LOG(Warn, CqPoll,
				        "free_cq waits for a {} done() callback that does not "
				        "return",
				        poll_ctx_str(p.ctx));
		return 0;
	}

	std::mutex lock; // guards the queues, stop_ and the run state of workqueue CQs

private:
	ReadyList &queue_of(PollCq &p)
	{
		return p.worker >= 0 ? bound_[static_cast<size_t>(p.worker)] : unbound_;
	}

	// ib_cq_poll_work, run by worker i: its bound queue first, then the unbound one.
	void work(int i)
	{
		set_thread_name("ulp-cq-work");
		const auto self = std::this_thread::get_id();
		std::unique_lock g(lock);
		for (;;) {
			ReadyList &mine = bound_[static_cast<size_t>(i)];
			ReadyList *q = !mine.empty()       ? &mine
			               : !unbound_.empty() ? &unbound_
			                                   : nullptr;
			if (!q) {
				if (stop_)
					return;
				cvs_[static_cast<size_t>(i)].wait(g);
				continue;
			}
			PollCq &p = q->front();
			q->pop_front();
			p.state = RunState::Running;
			p.runner = self;
			p.again = false;
			g.unlock();
			bool more = threaded_pass(p, kPollBudgetWorkqueue, false);
			g.lock();
			p.runner = {};
			if (p.dying) {
				p.state = RunState::Idle;
				done_cv_.notify_all();
				continue;
			}
			if (more || p.again) {
				p.state = RunState::Queued;
				queue_of(p).push_back(p); // requeue_work: behind the others
			} else {
				p.state = RunState::Idle;
			}
			p.again = false;
		}
	}

	void notify_all()
	{
		for (auto &cv : cvs_)
			cv.notify_one(); // one waiter each: its worker
	}

	std::vector<std::condition_variable> cvs_; // per worker: work for it, or stop_
	std::condition_variable done_cv_;          // a dying CQ stopped running
	std::vector<ReadyList> bound_;             // per worker: Workqueue CQs bound to it (lock)
	ReadyList unbound_;                        // UnboundWorkqueue CQs, any worker (lock)
	bool stop_ = false; // workers exit when their queues are empty (lock)
	std::vector<BoundedThread> workers_;
};

// ---------------------------------------------------------------------------------------------
// A poller thread: the "interrupt" and the softirq of a group of completion vectors.

struct Poller {
	Poller(Device &d, std::unique_ptr<CompChannel> c, int wfd, WorkPool *wp)
	    : ch(std::move(c)), wake_fd(wfd), pool(wp)
	{
		(void)d;
	}
	~Poller()
	{
		{
			std::lock_guard g(lock);
			stop = true;
		}
		wake();
		thr.join("poller thread");
		close(wake_fd);
	}

	void wake()
	{
		uint64_t one = 1;
		(void)!write(wake_fd, &one, sizeof(one));
	}

	// An event for c (looked up, never dereferenced: it may have been freed).
	void on_event_locked(Cq *c)
	{
		auto it = cqs.find(c);
		if (it == cqs.end())
			return; // freed since the event was raised
		PollCq &p = *it->second;
		if (p.ctx != PollCtx::Softirq) {
			pool->kick(p);
			return;
		}
		if (p.dying)
			return;
		if (p.state == RunState::Running)
			p.again = true; // the pass may already have polled past it
		else if (p.state == RunState::Idle) {
			p.state = RunState::Queued;
			ready.push_back(p);
		}
	}

	// Take every pending event without blocking.
	void take_events()
	{
		Cq *c = nullptr;
		while (ch->get_cq_event(&c, 0) == 0) {
			std::lock_guard g(lock);
			on_event_locked(c);
		}
	}

	void wait_events()
	{
		pollfd fds[2] = {{ch->fd(), POLLIN, 0}, {wake_fd, POLLIN, 0}};
		if (::poll(fds, 2, kIdleSliceMs) > 0 && (fds[1].revents & POLLIN)) {
			uint64_t v;
			(void)!read(wake_fd, &v, sizeof(v));
		}
	}

	// ib_poll_handler for every ready CQ, round robin.
	void run()
	{
		const auto self = std::this_thread::get_id();
		std::unique_lock g(lock);
		while (!stop) {
			g.unlock();
			take_events();
			g.lock();
			if (ready.empty()) {
				g.unlock();
				wait_events();
				g.lock();
				continue;
			}
			PollCq &p = ready.front();
			ready.pop_front();
			p.state = RunState::Running;
			p.runner = self;
			p.again = false;
			g.unlock();
			bool more = threaded_pass(p, kPollBudgetIrq, true);
			g.lock();
			p.runner = {};
			if (p.dying) {
				p.state = RunState::Idle;
				done_cv.notify_all();
				continue;
			}
			if (more || p.again) {
				p.state = RunState::Queued;
				ready.push_back(p); // budget used up: the other CQs go first
			} else {
				p.state = RunState::Idle;
			}
			p.again = false;
		}
	}

	// free_cq of a CQ attached here: unmap it, and for Softirq make sure this thread is not
	// and will not be processing it. -EDEADLK from its own done().
	int kill(PollCq &p)
	{
		std::unique_lock g(lock);
		if (p.ctx == PollCtx::Softirq) {
			if (p.state == RunState::Running && p.runner == std::this_thread::get_id())
				return -EDEADLK;
			p.dying = true;
			p.abort.store(true, std::memory_order_relaxed);
			if (p.state == RunState::Queued) {
				ready.erase(ready.iterator_to(p));
				p.state = RunState::Idle;
			}
			while (p.state == RunState::Running)
				if (!done_cv.wait_for(g, kStopTimeout,
				                      [&] { return p.state != RunState::Running; }))
					ULP_LOG(Warn, CqPoll,
					        "free_cq waits for a softirq done() callback "
					        "that does not return");
		}
		cqs.erase(p.cq.get());
		return 0;
	}

	std::unique_ptr<CompChannel> ch; // every CQ of this poller raises its events here
	int wake_fd;                     // eventfd: stop, or new work
	WorkPool *pool; // for workqueue CQs, while any exists (written under Global::lock and lock)
	std::mutex lock;                 // guards cqs, ready, stop, Softirq CQs' run state
	std::condition_variable done_cv; // a dying CQ stopped running
	std::unordered_map<const Cq *, PollCq *> cqs; // CQs attached here (lock)
	ReadyList ready;                              // Softirq CQs with work (lock)
	bool stop = false;                            // the thread should exit (lock)
	BoundedThread thr;
};

// ---------------------------------------------------------------------------------------------
// Per-device resources and the registry.

struct DevCtx {
	std::vector<std::unique_ptr<Poller>> pollers; // by index; null until needed
	std::vector<int> poller_refs;                 // CQs using each poller
	std::array<std::vector<PollCq *>, 6> pools;   // shared CQs, by PollCtx
	int pools_last = -1;                          // the kernel's dev->cq_pools_last
	int nr_cqs = 0;                               // cq_poll CQs alive on the device
};

struct Global {
	std::mutex lock; // guards devs, pool, pool_refs, DevCtx contents, cqe_used
	std::unordered_map<const Device *, std::unique_ptr<DevCtx>> devs;
	std::unique_ptr<WorkPool> pool; // the completion work pool, while pool_refs > 0
	int pool_refs = 0;              // workqueue CQs alive
};

namespace
{

// Never destroyed: CQs may outlive static destruction order in a ULP's exit path.
Global &G()
{
	static Global *g = new Global;
	return *g;
}

PollCq *lookup(const Cq &cq)
{
	// Set by alloc_cq, cleared by free_cq; null on a CQ cq_poll did not make. No lock:
	// looking up a CQ while another thread frees it is a use after free anyway.
	return static_cast<PollCq *>(cq.poll_state);
}

int nr_pollers(const Device &dev)
{
	unsigned v = std::max(1u, dev.attr().num_comp_vectors);
	return static_cast<int>(std::min(v, cpus()));
}

int nr_workers()
{
	return static_cast<int>(std::clamp(cpus(), 1u, 4u));
}

// The thread processing p, or the group's owner: the only ones who may process a BusyPoll
// CQ directly.
int direct_entry(Cq &cq, int budget)
{
	return process_cq_direct(cq, budget);
}

} // namespace

// Access to PollGroup's private state for alloc/free.
struct PollCqOps {
	static void attach(PollGroup &g, PollCq *p)
	{
		std::lock_guard l(g.lock_);
		g.cqs_.push_back(p);
	}
	static int detach(PollGroup &g, PollCq *p)
	{
		std::unique_lock l(g.lock_);
		if (g.cur_ == p && g.owner() == std::this_thread::get_id())
			return -EDEADLK;
		while (g.cur_ == p)
			if (!g.idle_cv_.wait_for(l, kStopTimeout, [&] { return g.cur_ != p; }))
				ULP_LOG(
				    Warn, CqPoll,
				    "free_cq waits for a busy-poll done() callback that does not "
				    "return");
		g.cqs_.erase(std::find(g.cqs_.begin(), g.cqs_.end(), p));
		return 0;
	}
	static int process_direct(PollGroup &g, PollCq &p, int budget)
	{
		const auto self = std::this_thread::get_id();
		std::array<Wc, kPollBatch> wcs;
		std::thread::id none;
		// A foreign thread must not even take polling_ for a moment: the group's own
		// poll() would see it busy.
		if (g.owner() != self && g.polling_.load(std::memory_order_acquire) != self)
			return 0;
		if (g.polling_.compare_exchange_strong(none, self, std::memory_order_acq_rel)) {
			// Nobody polls: the owner may process, exclusively (polling_ is ours).
			int n = 0;
			if (g.owner() == self) {
				{
					std::lock_guard l(g.lock_);
					g.cur_ = &p;
				}
				n = process_cq(p, budget, wcs);
				std::lock_guard l(g.lock_);
				g.cur_ = nullptr;
				g.idle_cv_.notify_all();
			}
			g.polling_.store(std::thread::id{}, std::memory_order_release);
			return n;
		}
		// Someone polls. Only that thread itself, from a done() of another CQ, may go
		// on (cur_ is written only by the polling thread: it reads it without the lock).
		if (g.polling_.load(std::memory_order_acquire) != self || g.cur_ == &p)
			return 0;
		PollCq *outer = g.cur_;
		{
			std::lock_guard l(g.lock_);
			g.cur_ = &p;
		}
		int n = process_cq(p, budget, wcs);
		std::lock_guard l(g.lock_);
		g.cur_ = outer;
		g.idle_cv_.notify_all();
		return n;
	}
};

// ---------------------------------------------------------------------------------------------
// alloc / free

namespace
{

Cq *do_alloc(Device &dev, int nr_cqe, int comp_vector, PollCtx ctx, PollGroup *group,
             const CqOptions &opts, bool shared)
{
	if (ctx == PollCtx::None || nr_cqe <= 0 || comp_vector < 0 ||
	    (ctx == PollCtx::BusyPoll) != (group != nullptr) ||
	    (opts.channel && ctx != PollCtx::Direct)) {
		errno = EINVAL;
		return nullptr;
	}
	Global &g = G();
	const int nvec = static_cast<int>(std::max(1u, dev.attr().num_comp_vectors));
	const int vector = comp_vector % nvec;
	auto p = std::make_unique<PollCq>();
	p->ctx = ctx;
	p->dev = &dev;
	p->group = group;
	p->shared = shared;

	// Threads first (on demand), so that the CQ can be created on the poller's channel.
	std::unique_ptr<Poller> dead_poller;
	std::unique_ptr<WorkPool> dead_pool;
	{
		std::lock_guard l(g.lock);
		auto &dc = g.devs[&dev];
		if (!dc) {
			dc = std::make_unique<DevCtx>();
			int n = nr_pollers(dev);
			dc->pollers.resize(static_cast<size_t>(n));
			dc->poller_refs.assign(static_cast<size_t>(n), 0);
		}
		if (ctx == PollCtx::Workqueue || ctx == PollCtx::UnboundWorkqueue) {
			if (!g.pool)
				g.pool = std::make_unique<WorkPool>(nr_workers());
			g.pool_refs++;
			if (ctx == PollCtx::Workqueue)
				p->worker = vector % g.pool->nworkers();
		}
		if (threaded(ctx)) {
			size_t pi = static_cast<size_t>(vector) % dc->pollers.size();
			if (!dc->pollers[pi]) {
				auto ch = dev.create_comp_channel();
				int wfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
				if (!ch || wfd < 0) {
					int e = ch ? errno : (errno ? errno : ENOMEM);
					if (wfd >= 0)
						close(wfd);
					if (p->ctx != PollCtx::Softirq && --g.pool_refs == 0)
						dead_pool = std::move(g.pool);
					if (dc->nr_cqs == 0)
						g.devs.erase(&dev);
					errno = e;
					return nullptr; // dead_pool is joined after the lock goes
				}
				dc->pollers[pi] =
				    std::make_unique<Poller>(dev, std::move(ch), wfd, g.pool.get());
				Poller *pl = dc->pollers[pi].get();
				pl->thr.start([pl] {
					set_thread_name("ulp-cq-poll");
					pl->run();
				});
			}
			if (g.pool) {
				std::lock_guard pl(dc->pollers[pi]->lock);
				dc->pollers[pi]->pool = g.pool.get();
			}
			dc->poller_refs[pi]++;
			p->poller = dc->pollers[pi].get();
		}
		dc->nr_cqs++;
	}

	CqInitAttr a;
	a.cqe = nr_cqe;
	a.comp_vector = vector;
	a.channel = p->poller ? p->poller->ch.get() : opts.channel;
	a.event_handler = opts.event_handler;
	a.cq_context = opts.cq_context;
	errno = 0;
	p->cq = dev.create_cq(a);
	if (!p->cq) {
		int e = errno ? errno : ENOMEM;
		{
			std::lock_guard l(g.lock);
			auto &dc = g.devs[&dev];
			if (p->poller) {
				size_t pi = static_cast<size_t>(vector) % dc->pollers.size();
				if (--dc->poller_refs[pi] == 0)
					dead_poller = std::move(dc->pollers[pi]);
			}
			if ((ctx == PollCtx::Workqueue || ctx == PollCtx::UnboundWorkqueue) &&
			    --g.pool_refs == 0)
				dead_pool = std::move(g.pool);
			if (--dc->nr_cqs == 0)
				g.devs.erase(&dev);
		}
		dead_poller.reset();
		dead_pool.reset();
		errno = e;
		return nullptr;
	}
	Cq *cq = p->cq.get();
	cq->poll_ctx = ctx;
	if (ctx == PollCtx::Direct || ctx == PollCtx::BusyPoll)
		cq->process_direct = direct_entry;
	// ib_alloc_cq: rdma_dim_init when dev->use_cq_dim and the context is not DIRECT.
	if (threaded(ctx) && opts.dim == DimMode::Auto &&
	    (dev.attr().device_cap_flags & DEVICE_CQ_MODERATION)) {
		p->dim_on = true;
		p->dim_level.store(0, std::memory_order_relaxed);
		p->dim_max_level.store(0, std::memory_order_relaxed);
	}

	cq->poll_state = p.get();
	PollCq *raw = p.release();
	if (raw->poller) {
		std::lock_guard l(raw->poller->lock);
		raw->poller->cqs[cq] = raw;
	}
	if (group)
		PollCqOps::attach(*group, raw);
	// ib_alloc_cq arms threaded CQs once; from then on every pass re-arms.
	if (threaded(ctx))
		cq->req_notify(CqNotify::NextComp);
	return cq;
}

} // namespace

CqHandle alloc_cq(Device &dev, int nr_cqe, int comp_vector, PollCtx ctx, PollGroup *group,
                  const CqOptions &opts)
{
	return CqHandle(do_alloc(dev, nr_cqe, comp_vector, ctx, group, opts, false));
}

int free_cq(Cq *cq)
{
	if (!cq)
		return -EINVAL;
	Global &g = G();
	PollCq *p = nullptr;
	{
		std::lock_guard l(g.lock);
		p = lookup(*cq);
		if (!p) {
			ULP_LOG(Error, CqPoll, "free_cq of CQ {} not made by cq_poll",
			        fmt::ptr(cq));
			return -EINVAL;
		}
		if (t_in_done == p) {
			ULP_LOG(Error, CqPoll,
			        "free_cq refused: called from a done() callback of CQ {} itself",
			        fmt::ptr(cq));
			return -EDEADLK;
		}
		if (int users = cq->usecnt.load(std::memory_order_relaxed); users > 0) {
			// ib_free_cq WARNs on cq->usecnt and frees anyway; the QP would then
			// complete into freed memory.
			ULP_LOG(Error, CqPoll,
			        "free_cq refused: CQ {} ({}, vector {}) is still used by QPs ({} "
			        "uses)",
			        fmt::ptr(cq), poll_ctx_str(p->ctx), cq->comp_vector(), users);
			return -EBUSY;
		}
		if (p->shared && p->cqe_used > 0) {
			ULP_LOG(
			    Error, CqPoll,
			    "free_cq refused: pool CQ {} ({}, vector {}) still has {} of {} cqes "
			    "in use",
			    fmt::ptr(cq), poll_ctx_str(p->ctx), cq->comp_vector(), p->cqe_used,
			    cq->cqe());
			return -EBUSY;
		}
	}
	// Make sure no thread processes p and none will (ib_free_cq's irq_poll_disable /
	// cancel_work_sync). Without Global::lock: a done() callback we wait for may call
	// alloc_cq or free_cq.
	int rc = 0;
	if (p->ctx == PollCtx::Workqueue || p->ctx == PollCtx::UnboundWorkqueue) {
		WorkPool *wp = nullptr;
		{
			std::lock_guard l(g.lock);
			wp = g.pool.get(); // alive: p holds a reference
		}
		rc = wp->kill(*p);
		if (!rc)
			rc = p->poller->kill(*p); // only unmaps
	} else if (p->ctx == PollCtx::Softirq) {
		rc = p->poller->kill(*p);
	} else if (p->ctx == PollCtx::BusyPoll) {
		rc = PollCqOps::detach(*p->group, p);
	}
	if (rc) {
		ULP_LOG(Error, CqPoll, "free_cq of CQ {} from its own done(): {}", fmt::ptr(cq),
		        rc);
		return rc;
	}

	std::unique_ptr<Poller> dead_poller;
	std::unique_ptr<WorkPool> dead_pool;
	{
		std::lock_guard l(g.lock);
		if (p->shared) {
			auto &v = g.devs[p->dev]->pools[static_cast<size_t>(p->ctx)];
			auto it = std::find(v.begin(), v.end(), p);
			if (it != v.end())
				v.erase(it);
		}
		cq->poll_state = nullptr;
		p->cq.reset(); // the provider forgets its pending channel events
		auto &dc = g.devs[p->dev];
		if (p->poller) {
			auto it = std::find_if(dc->pollers.begin(), dc->pollers.end(),
			                       [&](auto &x) { return x.get() == p->poller; });
			size_t pi = static_cast<size_t>(it - dc->pollers.begin());
			if (--dc->poller_refs[pi] == 0)
				dead_poller = std::move(dc->pollers[pi]);
		}
		if ((p->ctx == PollCtx::Workqueue || p->ctx == PollCtx::UnboundWorkqueue) &&
		    --g.pool_refs == 0) {
			dead_pool = std::move(g.pool);
			for (auto &[d, c] : g.devs)
				for (auto &pl : c->pollers)
					if (pl) {
						std::lock_guard pll(pl->lock);
						pl->pool = nullptr;
					}
		}
		if (--dc->nr_cqs == 0)
			g.devs.erase(p->dev);
	}
	dead_poller.reset(); // stop and join, outside the lock
	dead_pool.reset();
	delete p;
	return 0;
}

int free_cq(CqHandle &cq)
{
	int rc = free_cq(cq.get());
	if (!rc)
		(void)cq.release();
	return rc;
}

void CqDeleter::operator()(Cq *cq) const
{
	int rc = free_cq(cq);
	if (rc) {
		ULP_LOG(Error, CqPoll, "CqHandle destroyed while its CQ is in use ({})", rc);
		std::abort();
	}
}

int process_cq_direct(Cq &cq, int budget)
{
	PollCq *p = lookup(cq);
	if (!p)
		return 0;
	if (p->ctx == PollCtx::Direct) {
		std::array<Wc, kPollBatch> wcs;
		return process_cq(*p, budget, wcs);
	}
	if (p->ctx == PollCtx::BusyPoll)
		return PollCqOps::process_direct(*p->group, *p, budget);
	return 0; // threaded: its own thread dispatches (the kernel WARNs)
}

bool cq_stats(const Cq &cq, CqStats *out)
{
	PollCq *p = lookup(cq);
	if (!p)
		return false;
	out->passes = p->passes.load(std::memory_order_relaxed);
	out->completions = p->completions.load(std::memory_order_relaxed);
	out->dropped = p->dropped.load(std::memory_order_relaxed);
	out->dim_level = p->dim_level.load(std::memory_order_relaxed);
	out->dim_max_level = p->dim_max_level.load(std::memory_order_relaxed);
	out->shared = p->shared;
	std::lock_guard l(G().lock);
	out->cqe_used = p->cqe_used;
	return true;
}

// ---------------------------------------------------------------------------------------------
// The CQ pool (ib_cq_pool_get / ib_cq_pool_put / ib_cq_pool_cleanup).

Cq *cq_pool_get(Device &dev, unsigned nr_cqe, int vector_hint, PollCtx ctx)
{
	if (ctx == PollCtx::None || ctx == PollCtx::BusyPoll || nr_cqe == 0 ||
	    nr_cqe > dev.attr().max_cqe) {
		errno = EINVAL;
		return nullptr;
	}
	Global &g = G();
	const int nvec = static_cast<int>(
	    std::min(std::max(1u, dev.attr().num_comp_vectors), cpus())); // as the kernel
	for (int round = 0; round < 2; round++) {
		int vector;
		{
			std::lock_guard l(g.lock);
			auto &dc = g.devs[&dev];
			if (!dc) {
				dc = std::make_unique<DevCtx>();
				int n = nr_pollers(dev);
				dc->pollers.resize(static_cast<size_t>(n));
				dc->poller_refs.assign(static_cast<size_t>(n), 0);
			}
			if (vector_hint < 0) {
				vector_hint = (dc->pools_last + 1) % nvec;
				dc->pools_last = vector_hint;
			}
			vector = vector_hint % nvec;
			// Departure: the least used CQ that fits, as the kernel's comment says
			// (its loop takes the first that fits).
			PollCq *best = nullptr;
			for (PollCq *p : dc->pools[static_cast<size_t>(ctx)]) {
				if (p->cq->comp_vector() != vector ||
				    p->cqe_used + static_cast<int>(nr_cqe) > p->cq->cqe())
					continue;
				if (!best || p->cqe_used < best->cqe_used)
					best = p;
			}
			if (best) {
				best->cqe_used += static_cast<int>(nr_cqe);
				return best->cq.get();
			}
			if (dc->nr_cqs == 0 && dc->pools[static_cast<size_t>(ctx)].empty())
				g.devs.erase(&dev); // do_alloc recreates it
		}
		if (round == 1)
			break;
		// ib_alloc_cqs: one CQ per vector, without the lock, then add them.
		int n = static_cast<int>(std::min<unsigned>(
		    dev.attr().max_cqe, std::max<unsigned>(nr_cqe, unsigned{kMaxSharedCqSz})));
		std::vector<Cq *> made;
		for (int i = 0; i < nvec; i++) {
			Cq *cq = do_alloc(dev, n, i, ctx, nullptr, {}, true);
			if (!cq) {
				int e = errno;
				for (Cq *c : made)
					free_cq(c);
				errno = e;
				return nullptr;
			}
			made.push_back(cq);
		}
		std::lock_guard l(g.lock);
		auto &v = g.devs[&dev]->pools[static_cast<size_t>(ctx)];
		for (Cq *c : made)
			v.push_back(lookup(*c));
	}
	errno = ENOMEM;
	return nullptr;
}

void cq_pool_put(Cq *cq, unsigned nr_cqe)
{
	PollCq *p = cq ? lookup(*cq) : nullptr;
	std::lock_guard l(G().lock);
	if (!p || !p->shared || static_cast<int>(nr_cqe) > p->cqe_used) {
		ULP_LOG(Error, CqPoll,
		        "cq_pool_put({}, {}): not a pool CQ or more cqes than accounted ({})",
		        fmt::ptr(cq), nr_cqe, p ? p->cqe_used : -1);
		std::abort();
	}
	p->cqe_used -= static_cast<int>(nr_cqe);
}

int cq_pool_destroy(Device &dev)
{
	Global &g = G();
	std::vector<Cq *> victims;
	{
		std::lock_guard l(g.lock);
		auto it = g.devs.find(&dev);
		if (it == g.devs.end())
			return 0;
		for (auto &v : it->second->pools)
			for (PollCq *p : v)
				if (p->cqe_used > 0) {
					ULP_LOG(
					    Error, CqPoll,
					    "cq_pool_destroy({}) refused: a {} pool CQ on vector "
					    "{} has {} cqes in use",
					    dev.name(), poll_ctx_str(p->ctx), p->cq->comp_vector(),
					    p->cqe_used);
					return -EBUSY;
				}
		for (auto &v : it->second->pools) {
			for (PollCq *p : v)
				victims.push_back(p->cq.get());
			v.clear(); // no cq_pool_get can pick them from now on
		}
	}
	for (Cq *c : victims)
		free_cq(c);
	return 0;
}

// ---------------------------------------------------------------------------------------------
// PollGroup

PollGroup::PollGroup() : owner_(std::this_thread::get_id()) {}

PollGroup::~PollGroup()
{
	std::lock_guard l(lock_);
	if (!cqs_.empty()) {
		ULP_LOG(Error, CqPoll, "PollGroup destroyed with {} CQs attached", cqs_.size());
		std::abort();
	}
}

int PollGroup::nr_cqs() const
{
	std::lock_guard l(lock_);
	return static_cast<int>(cqs_.size());
}

int PollGroup::poll(int budget)
{
	std::thread::id none;
	if (!polling_.compare_exchange_strong(none, std::this_thread::get_id(),
	                                      std::memory_order_acq_rel))
		return -EBUSY;
	owner_.store(std::this_thread::get_id(), std::memory_order_release);
	std::array<Wc, kPollBatch> wcs;
	int total = 0;
	std::unique_lock l(lock_);
	for (size_t i = 0; i < cqs_.size(); i++) {
		PollCq *p = cqs_[i];
		cur_ = p;
		l.unlock();
		total += process_cq(*p, budget, wcs);
		l.lock();
		cur_ = nullptr;
		idle_cv_.notify_all();
	}
	l.unlock();
	polling_.store(std::thread::id{}, std::memory_order_release);
	return total;
}

int PollGroup::run()
{
	stop_.store(false, std::memory_order_relaxed);
	while (!stop_.load(std::memory_order_acquire)) {
		// -EBUSY: the owner is processing directly (drain, say) right now; wait it out.
		if (poll() == -EBUSY)
			std::this_thread::yield();
	}
	return 0;
}

void PollGroup::stop()
{
	stop_.store(true, std::memory_order_release);
}

} // namespace ulp
