// SPDX-License-Identifier: MIT
// cq_poll/poll_group.cc - BusyPoll: CQs attached to a PollGroup and processed only on its
// owner's thread, inside poll() or run() (SPDK's poll groups).
#include "core/check.h"
#include "core/log.h"
#include "cq_poll/cq_poll_internal.h"

#include <algorithm>
#include <cerrno>

namespace ulp
{

using namespace cqp;

void PollCqOps::attach(PollGroup &g, PollCq *p)
{
	std::lock_guard l(g.lock_);
	g.cqs_.push_back(p);
}

int PollCqOps::detach(PollGroup &g, PollCq *p)
{
	std::unique_lock l(g.lock_);
	if (g.cur_ == p && g.owner() == std::this_thread::get_id())
		return -EDEADLK;
	while (g.cur_ == p)
		if (!g.idle_cv_.wait_for(l, kStopTimeout, [&] { return g.cur_ != p; }))
			ULP_LOG(Warn, CqPoll,
			        "free_cq waits for a busy-poll done() callback that does not "
			        "return");
	g.cqs_.erase(std::find(g.cqs_.begin(), g.cqs_.end(), p));
	return 0;
}

int PollCqOps::process_direct(PollGroup &g, PollCq &p, int budget)
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

// ---------------------------------------------------------------------------------------------
// PollGroup

PollGroup::PollGroup() : owner_(std::this_thread::get_id()) {}

PollGroup::~PollGroup()
{
	std::lock_guard l(lock_);
	ULP_CHECK(cqs_.empty(), "PollGroup destroyed with {} CQs attached", cqs_.size());
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
	// A stop() that came before this run() started counts (its thread may start late): the
	// request is consumed when run() returns, not cleared when it begins.
	while (!stop_.load(std::memory_order_acquire)) {
		// -EBUSY: the owner is processing directly (drain, say) right now; wait it out.
		if (poll() == -EBUSY)
			std::this_thread::yield();
	}
	stop_.store(false, std::memory_order_relaxed);
	return 0;
}

void PollGroup::stop()
{
	stop_.store(true, std::memory_order_release);
}

} // namespace ulp
