// SPDX-License-Identifier: MIT
// cq_poll/cq_poll_internal.h - what the files of cq_poll/ share, and nobody else: the state
// of one CQ, the poller threads and the completion work pool, the registry of devices, and
// the dispatch loop.
//
//   cq_poll.cc       alloc_cq / free_cq, the registry, the dispatch loop (__ib_process_cq)
//   poll_threads.cc  the threaded contexts: poller threads (Softirq, and the event source
//                    of the workqueues) and the completion work pool (ib_comp_wq)
//   poll_group.cc    BusyPoll: PollGroup
//   cq_pool.cc       the shared CQ pool (ib_cq_pool_get / put)
//   dim.cc           adaptive moderation
//
// Locks, in the order they nest (never the other way round):
//   Global::lock   devices' resources, the pools' lists and cqe_used, thread refcounts
//   Poller::lock   one poller's CQ map, its ready list, its Softirq CQs' run state
//   WorkPool::lock the work queues and the Workqueue CQs' run state
//   PollGroup::lock_ a group's CQ list and the CQ it is processing
// No lock is held while a done() callback runs.
#pragma once

#include "core/bounded_thread.h"
#include "core/check.h"
#include "core/epoll_loop.h"
#include "core/lock_assert.h"
#include "cq_poll/cq_poll.h"
#include "cq_poll/dim.h"

#include <boost/intrusive/list.hpp>

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <future>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <unordered_map>
#include <vector>

namespace ulp
{

struct Poller;

// Where a threaded CQ is in its processing cycle (the kernel's irq_poll / work_struct
// pending and running bits). Guarded by the lock of whoever queues it: Poller::lock for
// Softirq, WorkPool::lock for the workqueues.
enum class RunState : uint8_t {
	Idle,    // armed (or about to be), waiting for an event -> Queued
	Queued,  // on a ready list or work queue -> Running | Idle (free_cq took it off)
	Running, // a thread is processing it -> Idle | Queued (more work, or an event came)
};
const char *run_state_str(RunState s);

// The cycle drawn above; change_state checks every step against it.
inline constexpr StateTable<RunState, 3> kRunStates = {
    "threaded CQ",
    run_state_str,
    {
        /* Idle */ to(RunState::Queued),
        /* Queued */ to(RunState::Running, RunState::Idle),
        /* Running */ to(RunState::Idle, RunState::Queued),
    }};

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

// The one way a threaded CQ's RunState changes, under lock, the one that guards it (its
// Poller's for a Softirq CQ, the WorkPool's for a workqueue CQ), which the caller holds. The
// trace point's object is the Cq, the address the ULP holds and ulp:cq_pass reports, so
// that a tracer joins one CQ's state changes and passes.
inline void set_run_state(PollCq &p, RunState next, std::mutex &lock)
{
	ULP_ASSERT_HELD(lock);
	change_state(&p.state, next, kRunStates, p.cq.get());
}

using ReadyList =
    boost::intrusive::list<PollCq,
                           boost::intrusive::member_hook<PollCq, ReadyHook, &PollCq::ready_hook>,
                           boost::intrusive::constant_time_size<false>>;

namespace cqp
{

// cq_poll's own helpers (the namespace keeps them from other libraries' names).

constexpr std::chrono::seconds kStopTimeout{5}; // bound on stopping a thread before we log
                                                // and keep waiting
constexpr int kIdleSliceMs = 10; // pollers wake this often: inline devices progress on it

unsigned cpus(); // hardware threads, at least 1

inline bool threaded(PollCtx c)
{
	return c == PollCtx::Softirq || c == PollCtx::Workqueue || c == PollCtx::UnboundWorkqueue;
}

// __ib_process_cq: poll batches into wcs, dispatch, until a short batch or the budget.
int process_cq(PollCq &p, int budget, std::span<Wc> wcs);
// One pass of a threaded CQ: up to budget, then (under budget) re-arm and poll once more,
// since userspace has no IB_CQ_REPORT_MISSED_EVENTS. True when it must run again.
bool threaded_pass(PollCq &p, int budget, bool dim_every_pass);

} // namespace cqp

// ---------------------------------------------------------------------------------------------
// The completion work pool (ib_comp_wq / ib_comp_unbound_wq): shared by every device
// (poll_threads.cc).

class WorkPool
{
public:
	explicit WorkPool(int nworkers);
	~WorkPool();
	int nworkers() const { return static_cast<int>(workers_.size()); }

	// queue_work: the CQ had an event. Poller::lock is held (keeps p alive).
	void kick(PollCq &p);

	// free_cq: after this, p is never queued again and no worker processes it.
	// -EDEADLK when called by the worker processing p.
	int kill(PollCq &p);

	std::mutex lock; // guards the queues, stop_ and the run state of workqueue CQs

private:
	ReadyList &queue_of(PollCq &p);

	// ib_cq_poll_work, run by worker i: its bound queue first, then the unbound one.
	void work(int i);

	void notify_all();

	std::vector<std::condition_variable> cvs_; // per worker: work for it, or stop_
	std::condition_variable done_cv_;          // a dying CQ stopped running
	std::vector<ReadyList> bound_;             // per worker: Workqueue CQs bound to it (lock)
	ReadyList unbound_;                        // UnboundWorkqueue CQs, any worker (lock)
	bool stop_ = false; // workers exit when their queues are empty (lock)
	std::vector<BoundedThread> workers_;
};

// ---------------------------------------------------------------------------------------------
// A poller thread: the "interrupt" and the softirq of a group of completion vectors
// (poll_threads.cc). It is an event loop (core/event_loop.h) too: what a done() callback of
// its Softirq CQs starts on a layer below - a file LUN's read on the backstore's ring - is
// watched and reaped here, so a connection's I/O stays on the thread that runs its CQ.

struct Poller {
	Poller(Device &d, std::unique_ptr<CompChannel> c, WorkPool *wp);
	~Poller(); // stops and joins the thread

	// 0, or -errno: the loop's epoll set could not be made (alloc_cq fails with it).
	int init();

	void wake();

	// An event for c (looked up, never dereferenced: it may have been freed).
	void on_event_locked(Cq *c);

	// Take every pending event without blocking.
	void take_events();

	// One turn of the loop: wait up to timeout_ms for an event, a watch or a wake().
	void wait_events(int timeout_ms);

	// ib_poll_handler for every ready CQ, round robin.
	void run();

	// free_cq of a CQ attached here: unmap it, and for Softirq make sure this thread is not
	// and will not be processing it. -EDEADLK from its own done().
	int kill(PollCq &p);

	std::unique_ptr<CompChannel> ch; // every CQ of this poller raises its events here
	EpollLoop loop;                  // the channel, the watches of other layers, wake()
	WorkPool *pool; // for workqueue CQs, while any exists (written under Global::lock and lock)
	std::mutex lock;                 // guards cqs, ready, stop, Softirq CQs' run state
	std::condition_variable done_cv; // a dying CQ stopped running
	std::unordered_map<const Cq *, PollCq *> cqs; // CQs attached here (lock)
	ReadyList ready;                              // Softirq CQs with work (lock)
	bool stop = false;                            // the thread should exit (lock)
	BoundedThread thr;
};

// ---------------------------------------------------------------------------------------------
// Per-device resources and the registry (cq_poll.cc).

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

// Access to PollGroup's private state for alloc/free (poll_group.cc).
struct PollCqOps {
	static void attach(PollGroup &g, PollCq *p);
	static int detach(PollGroup &g, PollCq *p);
	static int process_direct(PollGroup &g, PollCq &p, int budget);
};

namespace cqp
{

// Never destroyed: CQs may outlive static destruction order in a ULP's exit path.
Global &G();
// cq_poll's state of cq; null on a CQ cq_poll did not make.
PollCq *lookup(const Cq &cq);
// The device's resources, made on first use (its pollers' slots: one per completion vector,
// at most one per CPU). Under Global::lock.
std::unique_ptr<DevCtx> &dev_ctx(Global &g, Device &dev);
// alloc_cq, and for the pool (shared) its CQs. Null with errno.
Cq *do_alloc(Device &dev, int nr_cqe, int comp_vector, PollCtx ctx, PollGroup *group,
             const CqOptions &opts, bool shared);

} // namespace cqp

} // namespace ulp
