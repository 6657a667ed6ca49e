// SPDX-License-Identifier: MIT
// cq_poll/cq_pool.cc - the shared CQ pool (ib_cq_pool_get / ib_cq_pool_put /
// ib_cq_pool_cleanup): per device and poll context, CQs of max(nr_cqe, kMaxSharedCqSz)
// entries, one per completion vector, handed out by the entries they have left.
#include "core/check.h"
#include "core/log.h"
#include "cq_poll/cq_poll_internal.h"

#include <algorithm>
#include <cerrno>

namespace ulp
{

using namespace cqp;

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
			auto &dc = dev_ctx(g, dev);
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
	ULP_CHECK(p && p->shared && static_cast<int>(nr_cqe) <= p->cqe_used,
	          "cq_pool_put({}, {}): not a pool CQ or more cqes than accounted ({})",
	          fmt::ptr(cq), nr_cqe, p ? p->cqe_used : -1);
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

} // namespace ulp
