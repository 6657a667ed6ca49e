// SPDX-License-Identifier: MIT
// cq_poll/cq_poll.cc - the completion framework (drivers/infiniband/core/cq.c): alloc_cq and
// free_cq, the registry of devices and their threads, and the dispatch loop every poll
// context runs (the threads are in poll_threads.cc, busy polling in poll_group.cc, the CQ
// pool in cq_pool.cc; the locks and their order in cq_poll_internal.h).
#include "cq_poll/cq_poll.h"
#include "core/check.h"
#include "core/log.h"
#include "core/thread_name.h"
#include "core/trace.h"
#include "core/turn.h"
#include "cq_poll/cq_poll_internal.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace ulp
{

using namespace cqp;
using Clock = std::chrono::steady_clock;

namespace
{

uint64_t now_us()
{
	return static_cast<uint64_t>(
	    std::chrono::duration_cast<std::chrono::microseconds>(Clock::now().time_since_epoch())
	        .count());
}

// The CQ whose done() callbacks this thread is running (innermost), so that free_cq
// called from one of them is told -EDEADLK before anything else.
thread_local const PollCq *t_in_done = nullptr;

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

namespace cqp
{

unsigned cpus()
{
	unsigned n = std::thread::hardware_concurrency();
	return n ? n : 1;
}

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
		{
			// A batch is a turn (core/turn.h): what its callbacks defer (a connection's
			// send plug) runs once they all have, unless an outer turn is open (a
			// nested pass, a CQ processed from an event loop's watch), whose end it
			// waits for.
			TurnScope turn;
			for (int i = 0; i < n; i++) {
				Wc &wc = wcs[static_cast<size_t>(i)];
				if (wc.wr_cqe)
					wc.wr_cqe->done(&cq, &wc);
				else
					dropped++; // a flushed WR that had no cqe: silently
					           // consumed
			}
		}
		completed += n;
		if (n != batch || completed >= budget)
			break;
		// free_cq is waiting: stop at a batch boundary rather than after the budget
		// (up to 65536 callbacks on a workqueue). What is left dies with the CQ.
		if (p.abort.load(std::memory_order_relaxed))
			break;
	}
	// Every poll context's pass ends here (threads, busy polling, direct): one probe
	// shows how full the passes run, per CQ.
	ULP_TRACE(cq_pass, &cq, completed, budget);
	p.passes.fetch_add(1, std::memory_order_relaxed);
	if (completed)
		p.completions.fetch_add(static_cast<uint64_t>(completed),
		                        std::memory_order_relaxed);
	if (dropped)
		p.dropped.fetch_add(dropped, std::memory_order_relaxed);
	return completed;
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

std::unique_ptr<DevCtx> &dev_ctx(Global &g, Device &dev)
{
	auto &dc = g.devs[&dev];
	if (!dc) {
		dc = std::make_unique<DevCtx>();
		// One poller per completion vector, at most one per CPU.
		unsigned v = std::max(1u, dev.attr().num_comp_vectors);
		const size_t n = std::min(v, cpus());
		dc->pollers.resize(n);
		dc->poller_refs.assign(n, 0);
	}
	return dc;
}

// ---------------------------------------------------------------------------------------------
// alloc / free

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
		auto &dc = dev_ctx(g, dev);
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
				int e = ch ? 0 : (errno ? errno : ENOMEM);
				std::unique_ptr<Poller> np;
				if (ch) {
					np = std::make_unique<Poller>(dev, std::move(ch),
					                              g.pool.get());
					e = -np->init();
				}
				if (e) {
					np.reset(); // never started: nothing to join
					if (p->ctx != PollCtx::Softirq && --g.pool_refs == 0)
						dead_pool = std::move(g.pool);
					if (dc->nr_cqs == 0)
						g.devs.erase(&dev);
					errno = e;
					return nullptr; // dead_pool is joined after the lock goes
				}
				dc->pollers[pi] = std::move(np);
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

} // namespace cqp

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
	ULP_CHECK(rc == 0, "CqHandle destroyed while its CQ is in use ({})", rc);
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

} // namespace ulp
