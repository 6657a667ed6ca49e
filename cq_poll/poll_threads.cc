// SPDX-License-Identifier: MIT
// cq_poll/poll_threads.cc - the threaded poll contexts: the poller threads, which take a
// device's completion events and run its Softirq CQs (irq_poll), and the completion work
// pool that runs Workqueue and UnboundWorkqueue CQs (ib_comp_wq, ib_comp_unbound_wq).
#include "core/log.h"
#include "core/thread_name.h"
#include "cq_poll/cq_poll_internal.h"

#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>

namespace ulp
{

using namespace cqp;

const char *run_state_str(RunState s)
{
	switch (s) {
	case RunState::Idle:
		return "Idle";
	case RunState::Queued:
		return "Queued";
	case RunState::Running:
		return "Running";
	}
	return "?";
}

// ---------------------------------------------------------------------------------------------
// The completion work pool

WorkPool::WorkPool(int nworkers)
    : cvs_(static_cast<size_t>(nworkers)), bound_(static_cast<size_t>(nworkers))
{
	workers_.resize(static_cast<size_t>(nworkers));
	for (int i = 0; i < nworkers; i++)
		workers_[static_cast<size_t>(i)].start([this, i] { work(i); });
}

WorkPool::~WorkPool()
{
	{
		std::lock_guard g(lock);
		stop_ = true;
	}
	notify_all();
	for (auto &w : workers_)
		w.join(log::Sub::CqPoll, "completion worker (a done() callback blocked?)",
		       kStopTimeout);
}

void WorkPool::kick(PollCq &p)
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
		set_run_state(p, RunState::Queued, lock);
		queue_of(p).push_back(p);
	}
	// A bound CQ wakes its own worker only: waking them all cost a thread switch
	// per completion event for nothing (tools/iscsi-bench/vm-iser counts them).
	if (p.worker >= 0)
		cvs_[static_cast<size_t>(p.worker)].notify_one();
	else
		notify_all();
}

int WorkPool::kill(PollCq &p)
{
	std::unique_lock g(lock);
	if (p.state == RunState::Running && p.runner == std::this_thread::get_id())
		return -EDEADLK;
	p.dying = true;
	p.abort.store(true, std::memory_order_relaxed);
	if (p.state == RunState::Queued) {
		queue_of(p).erase(queue_of(p).iterator_to(p));
		set_run_state(p, RunState::Idle, lock);
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

ReadyList &WorkPool::queue_of(PollCq &p)
{
	return p.worker >= 0 ? bound_[static_cast<size_t>(p.worker)] : unbound_;
}

void WorkPool::work(int i)
{
	set_thread_name("ulp-cq-work");
	const auto self = std::this_thread::get_id();
	std::unique_lock g(lock);
	for (;;) {
		ReadyList &mine = bound_[static_cast<size_t>(i)];
		ReadyList *q = !mine.empty() ? &mine : !unbound_.empty() ? &unbound_ : nullptr;
		if (!q) {
			if (stop_)
				return;
			cvs_[static_cast<size_t>(i)].wait(g);
			continue;
		}
		PollCq &p = q->front();
		q->pop_front();
		set_run_state(p, RunState::Running, lock);
		p.runner = self;
		p.again = false;
		g.unlock();
		bool more = threaded_pass(p, kPollBudgetWorkqueue, false);
		g.lock();
		p.runner = {};
		if (p.dying) {
			set_run_state(p, RunState::Idle, lock);
			done_cv_.notify_all();
			continue;
		}
		if (more || p.again) {
			set_run_state(p, RunState::Queued, lock);
			queue_of(p).push_back(p); // requeue_work: behind the others
		} else {
			set_run_state(p, RunState::Idle, lock);
		}
		p.again = false;
	}
}

void WorkPool::notify_all()
{
	for (auto &cv : cvs_)
		cv.notify_one(); // one waiter each: its worker
}

// ---------------------------------------------------------------------------------------------
// Pollers

Poller::Poller(Device &d, std::unique_ptr<CompChannel> c, WorkPool *wp)
    : ch(std::move(c)), loop("cq poller of " + d.name()), pool(wp)
{
}

int Poller::init()
{
	if (int rc = loop.init(); rc != 0)
		return rc;
	return loop.add_own(ch->fd(), 0);
}

Poller::~Poller()
{
	{
		std::lock_guard g(lock);
		stop = true;
	}
	wake();
	thr.join(log::Sub::CqPoll, "poller thread (a done() callback blocked?)", kStopTimeout);
}

void Poller::wake()
{
	loop.wake();
}

void Poller::on_event_locked(Cq *c)
{
	ULP_ASSERT_HELD(lock);
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
		set_run_state(p, RunState::Queued, lock);
		ready.push_back(p);
	}
}

void Poller::take_events()
{
	Cq *c = nullptr;
	while (ch->get_cq_event(&c, 0) == 0) {
		std::lock_guard g(lock);
		on_event_locked(c);
	}
}

void Poller::wait_events(int timeout_ms)
{
	// The channel is the only own descriptor: readable means take_events has work, which
	// the caller runs next anyway.
	std::array<uint32_t, 1> own;
	if (int rc = loop.turn(timeout_ms, own); rc < 0)
		ULP_LOG_RATELIMITED(Error, CqPoll, "{}: epoll_wait: {}", loop.name(),
		                    std::strerror(-rc));
}

void Poller::run()
{
	const auto self = std::this_thread::get_id();
	loop.set_owner();
	EventLoopScope installed(&loop);
	std::unique_lock g(lock);
	while (!stop) {
		g.unlock();
		take_events();
		g.lock();
		if (ready.empty()) {
			g.unlock();
			wait_events(kIdleSliceMs);
			g.lock();
			continue;
		}
		// While CQs keep it busy, the loop's watches (a backstore's ring) and what other
		// threads posted get a look before each pass, without sleeping.
		if (loop.pending()) {
			g.unlock();
			wait_events(0);
			g.lock();
			if (ready.empty())
				continue;
		}
		PollCq &p = ready.front();
		ready.pop_front();
		set_run_state(p, RunState::Running, lock);
		p.runner = self;
		p.again = false;
		g.unlock();
		bool more = threaded_pass(p, kPollBudgetIrq, true);
		g.lock();
		p.runner = {};
		if (p.dying) {
			set_run_state(p, RunState::Idle, lock);
			done_cv.notify_all();
			continue;
		}
		if (more || p.again) {
			set_run_state(p, RunState::Queued, lock);
			ready.push_back(p); // budget used up: the other CQs go first
		} else {
			set_run_state(p, RunState::Idle, lock);
		}
		p.again = false;
	}
	g.unlock();
	// The loop ends with no loop on the thread (core/event_loop.h): what was posted runs,
	// the watches finish their work here. Every CQ of this poller is freed by now.
	installed.release();
	loop.end();
}

int Poller::kill(PollCq &p)
{
	std::unique_lock g(lock);
	if (p.ctx == PollCtx::Softirq) {
		if (p.state == RunState::Running && p.runner == std::this_thread::get_id())
			return -EDEADLK;
		p.dying = true;
		p.abort.store(true, std::memory_order_relaxed);
		if (p.state == RunState::Queued) {
			ready.erase(ready.iterator_to(p));
			set_run_state(p, RunState::Idle, lock);
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

} // namespace ulp
