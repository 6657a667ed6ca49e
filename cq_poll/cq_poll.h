// SPDX-License-Identifier: MIT
// cq_poll/cq_poll.h - the completion framework (drivers/infiniband/core/cq.c): CQs whose
// completions reach wc.wr_cqe->done(cq, wc) through a poll context, the shared CQ pool,
// and adaptive moderation.
//
// The kernel: ib_alloc_cq(dev, private, nr_cqe, comp_vector, poll_ctx) creates a CQ and
// hooks it to irq_poll (IB_POLL_SOFTIRQ), ib_comp_wq / ib_comp_unbound_wq (IB_POLL_WORKQUEUE,
// IB_POLL_UNBOUND_WORKQUEUE) or nothing (IB_POLL_DIRECT: the owner calls
// ib_process_cq_direct). Each pass polls batches of IB_POLL_BATCH WCs and calls
// wr_cqe->done for each, up to a budget, then re-arms with IB_CQ_REPORT_MISSED_EVENTS.
//
// Here:
//   Direct           never armed; the owner calls process_cq_direct(cq, budget).
//   Softirq          one poller thread per group of completion vectors (vector v goes to
//                    poller v % n, n = min(num_comp_vectors, CPUs)); the poller owns a
//                    CompChannel, takes events and runs ready CQs round robin, budget 256
//                    per pass. A pass under budget re-arms and then polls once more
//                    (userspace has no REPORT_MISSED_EVENTS); a pass that used the whole
//                    budget goes to the back of the ready list, so other CQs run first.
//   Workqueue        the same poller takes the event (the "interrupt") and queues the CQ on
//   UnboundWorkqueue the completion work pool (kWorkers threads shared by all devices, the
//                    kernel's ib_comp_wq): Workqueue to the vector's worker, Unbound to any
//                    worker. Budget 65536 per pass, then requeue.
//   BusyPoll         attached to a PollGroup; processed only inside group.poll()/run() on
//                    the owner's thread, never armed (SPDK's poll groups).
// A CQ is never processed by two threads at once. Threads and per-device resources exist
// while CQs use them: created by the first alloc_cq that needs them, stopped and joined
// when the last such CQ is freed.
//
// Departures from the kernel, on purpose:
//   - No REPORT_MISSED_EVENTS: every pass that ends under budget re-arms and polls again;
//     if that poll found completions the CQ is run again (after the other ready CQs).
//   - free_cq refuses (-EBUSY, logged, nothing freed) a pool CQ with cqes still accounted;
//     the kernel WARNs and frees. free_cq from a done() callback of the CQ being freed is
//     refused with -EDEADLK (the kernel would deadlock in cancel_work_sync). A pass running
//     when free_cq is called ends at its next batch boundary (the kernel's
//     cancel_work_sync waits out the whole budget, up to 65536 callbacks); completions
//     still in the CQ die with it, as they do in the kernel.
//   - free_cq refuses (-EBUSY, logged) a CQ that QPs still use (Cq::usecnt, kept by the
//     Qp base class); the kernel WARNs and frees it anyway.
//   - cq_pool_get picks the least used CQ that fits (the kernel's comment says so; its
//     code takes the first that fits).
//   - DIM's new level is applied synchronously by the processing thread (the kernel
//     schedules dim->work); a provider whose modify() fails turns DIM off for that CQ.
//   - Direct polls in batches of 16 like every other context. The kernel's 8
//     (IB_POLL_BATCH_DIRECT) only keeps the WC array small on the caller's kernel stack;
//     a userspace stack has room, and half the batch costs a second poll() per 16 WCs.
//   - A WC without wr_cqe is dropped silently whatever its status (the kernel WARNs once
//     when such a WC has status SUCCESS, which a correct provider never produces).
#pragma once

#include "core/device.h"

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace ulp
{

inline constexpr int kPollBatch = 16;              // IB_POLL_BATCH: WCs per Cq::poll
inline constexpr int kPollBudgetIrq = 256;         // IB_POLL_BUDGET_IRQ: Softirq, per pass
inline constexpr int kPollBudgetWorkqueue = 65536; // IB_POLL_BUDGET_WORKQUEUE, per pass
inline constexpr int kMaxSharedCqSz = 4096;        // IB_MAX_SHARED_CQ_SZ: pool CQ size

// Adaptive moderation for alloc_cq.
enum class DimMode : uint8_t {
	Auto, // the kernel's rule: on for threaded contexts when the device has
	      // DEVICE_CQ_MODERATION (ib_alloc_cq with dev->use_cq_dim), off otherwise
	Off,  // never
};

// alloc_cq's options beyond the kernel's arguments.
struct CqOptions {
	DimMode dim = DimMode::Auto; // adaptive moderation (threaded contexts only)
	void *cq_context = nullptr;  // stored in Cq::cq_context (ib_alloc_cq's private)
	EventHandler event_handler;  // CQ async events (CqErr)
	// Direct only: create the CQ on this channel, so that a single-threaded owner can
	// sleep instead of spinning: req_notify, process_cq_direct once more (a completion
	// may have landed before the arm), wait on channel->fd(), get_cq_event, repeat. The
	// kernel's IB_POLL_DIRECT has no such mode (its Direct users are drain paths and
	// busy pollers); a userspace initiator waiting on a socket-like loop needs one.
	CompChannel *channel = nullptr;
};

class PollGroup;
struct PollCq; // cq_poll's per-CQ state (cq_poll.cc)

// What a CqHandle does when it goes: free_cq, and abort if that is refused (a ULP bug:
// the CQ is still in use). Call free_cq first where a refusal must be handled.
struct CqDeleter {
	void operator()(Cq *cq) const; // free_cq(cq), abort() on an error
};
// Owns a CQ made by alloc_cq.
using CqHandle = std::unique_ptr<Cq, CqDeleter>;

// __ib_alloc_cq: a CQ of at least nr_cqe entries on comp_vector (taken modulo the
// device's num_comp_vectors, as ib_alloc_cq_any spreads) processed in ctx. group is
// required for BusyPoll and must be null otherwise; ctx None is refused. nullptr with
// errno set on failure (EINVAL, or the provider's create_cq errno).
CqHandle alloc_cq(Device &dev, int nr_cqe, int comp_vector, PollCtx ctx, PollGroup *group = nullptr,
                  const CqOptions &opts = {});

// ib_free_cq. 0 once the CQ is destroyed and no done() callback of it runs or will run;
// -EBUSY (logged) while a QP still uses it or a pool CQ still has cqes accounted; -EDEADLK (logged)
// from a done() callback of this very CQ; -EINVAL for a CQ not made by cq_poll. On error nothing is
// freed. The handle form releases the handle on success.
int free_cq(Cq *cq);
int free_cq(CqHandle &cq); // free_cq(cq.get()); on success the handle is empty

// ib_process_cq_direct: process up to budget completions on the calling thread, batch 16;
// returns how many. Direct CQs; BusyPoll CQs only from their group's owner thread (0
// otherwise). Also reachable as cq.process_direct.
int process_cq_direct(Cq &cq, int budget);

// ib_cq_pool_get: a shared CQ with room for nr_cqe more entries, on the completion vector
// vector_hint maps to (vector_hint % min(num_comp_vectors, CPUs); a negative hint takes
// the vectors round robin). The least used CQ that fits, or a new set of CQs (one per
// vector, max(nr_cqe, 4096) entries, at most max_cqe) if none does. BusyPoll is refused
// (a pool has no group). nullptr with errno set on failure.
Cq *cq_pool_get(Device &dev, unsigned nr_cqe, int vector_hint, PollCtx ctx);
// ib_cq_pool_put: give back nr_cqe entries taken by cq_pool_get. Aborts on a CQ not from
// a pool or on more entries than are accounted (the kernel's WARN_ON_ONCE).
void cq_pool_put(Cq *cq, unsigned nr_cqe);
// ib_cq_pool_cleanup: free the device's pool CQs. 0, or -EBUSY (logged, nothing freed)
// while any of them has cqes accounted.
int cq_pool_destroy(Device &dev);

// Every batch of WCs (up to kPollBatch polled at once) is a turn of the processing thread
// (core/turn.h): a done() callback may defer work with defer_to_turn_end, and it runs once the
// callbacks of the batch have run, on this thread, outside any of them; deferrals of nested
// passes (a callback polling another CQ) wait for the outermost turn. A ULP queues the WRs its
// callbacks build and posts them in one post_send, one doorbell for the batch
// (rdma_conn/send_plug.h), as NAPI drivers flush at the end of a poll.

// Observability for tests and tools. Counters are written by the processing thread and
// read racily (relaxed atomics): exact only once the CQ is quiescent.
struct CqStats {
	uint64_t passes = 0;      // processing passes (events, requeues, direct calls)
	uint64_t completions = 0; // WCs reaped (dispatched or dropped)
	uint64_t dropped = 0;     // WCs without wr_cqe, dropped
	int dim_level = -1;       // current moderation level, -1 when DIM is off
	int dim_max_level = -1;   // highest level reached, -1 when DIM is off
	int cqe_used = 0;         // pool CQs: entries accounted by cq_pool_get
	bool shared = false;      // a pool CQ
};
bool cq_stats(const Cq &cq, CqStats *out); // false for a CQ not made by cq_poll

// A busy-poll group (SPDK's spdk_poll_group): BusyPoll CQs attached to it by alloc_cq
// are processed only when the owner calls poll() or run(), on the calling thread. poll()
// is not reentrant and not concurrent: a second thread calling it while another polls
// gets -EBUSY. The owner thread is the one polling now, or else the last one that did
// (initially the constructing thread); process_cq_direct on the group's CQs works only
// there. Destroying a group with CQs attached is a ULP bug (logged, abort).
class PollGroup
{
public:
	PollGroup();
	~PollGroup();
	PollGroup(const PollGroup &) = delete;
	PollGroup &operator=(const PollGroup &) = delete;

	// One pass over every attached CQ, up to budget completions each (batches of 16).
	// Returns the completions processed, or -EBUSY if another thread is polling.
	int poll(int budget = kPollBudgetIrq);
	// poll() until stop(), then 0. While another thread polls (the former owner
	// processing directly), it waits its turn instead of returning.
	int run();
	// Make run() return after its current pass; from any thread (or a done() callback).
	// Before run() started, the next run() returns at once (each stop() ends one run()).
	void stop();

	int nr_cqs() const; // attached CQs
	// The thread that may process the group's CQs (see the class comment).
	std::thread::id owner() const { return owner_.load(std::memory_order_acquire); }

private:
	friend struct PollCqOps;
	mutable std::mutex lock_;              // guards cqs_ and cur_
	std::condition_variable idle_cv_;      // cur_ went back to null (free_cq waits on it)
	std::vector<PollCq *> cqs_;            // attached CQs, in attach order (lock_)
	PollCq *cur_ = nullptr;                // the CQ being processed now (lock_)
	std::atomic<std::thread::id> polling_; // the thread inside poll() now; none when idle
	std::atomic<bool> stop_{false};        // run() should return
	std::atomic<std::thread::id> owner_;   // the thread allowed to process (see above)
};

} // namespace ulp
