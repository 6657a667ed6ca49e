// SPDX-License-Identifier: MIT
// core/bounded_thread.h - a thread whose exit is waited for with a bound and a log line
// (std::thread has no timed join).
//
// Every teardown path is bounded: a thread told to stop that has not returned within the
// bound is named in a warning, again every bound while it is waited for. The join itself
// does not give up: returning early would leave the thread running on state its owner is
// about to free. What it waits for is in the line (a done() callback that blocks, a
// connection whose teardown hangs), which is what a stuck stop needs to be diagnosed.
#pragma once

#include "core/log.h"

#include <chrono>
#include <future>
#include <thread>
#include <utility>

namespace ulp
{

class BoundedThread
{
public:
	BoundedThread() = default;
	BoundedThread(BoundedThread &&) = default;
	BoundedThread &operator=(BoundedThread &&) = default;
	~BoundedThread() = default; // joined by the owner first (std::thread aborts otherwise)

	template <class F> void start(F &&body)
	{
		std::promise<void> p;
		exited_ = p.get_future();
		thr_ = std::thread([body = std::forward<F>(body), p = std::move(p)]() mutable {
			body();
			p.set_value();
		});
	}
	bool joinable() const { return thr_.joinable(); }
	std::thread::native_handle_type native_handle() { return thr_.native_handle(); }

	// Join; every `bound` without the thread's exit, a warning of sub naming what (and
	// how long so far), and keep waiting.
	void join(log::Sub sub, const char *what,
	          std::chrono::seconds bound = std::chrono::seconds(5))
	{
		if (!thr_.joinable())
			return;
		for (std::chrono::seconds waited{0};
		     exited_.wait_for(bound) != std::future_status::ready;) {
			waited += bound;
			if (log::enabled(log::Level::Warn))
				log::logf(log::Level::Warn, sub,
				          "{} has not stopped after {} s; still waiting", what,
				          static_cast<long long>(waited.count()));
		}
		thr_.join();
	}

private:
	std::thread thr_;
	std::future<void> exited_; // ready once the body has returned
};

} // namespace ulp
