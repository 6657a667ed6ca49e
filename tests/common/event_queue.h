// SPDX-License-Identifier: MIT
// tests/common/event_queue.h - a thread-safe queue of events with bounded waits, for tests
// whose events come from provider threads (CM worker, engine) and are consumed by the
// test thread. Every wait has a bound and reports a timeout as nullopt.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>

namespace ulp::test
{

template <typename T> class EventQueue
{
public:
	static constexpr std::chrono::milliseconds kWait{5000}; // default bound of a wait

	void push(T v)
	{
		{
			std::lock_guard g(lock_);
			q_.push_back(std::move(v));
		}
		cv_.notify_all();
	}

	// The first queued event matching pred (removed from the queue), or nullopt after
	// timeout. Events that do not match stay queued, in order.
	std::optional<T> wait_for(const std::function<bool(const T &)> &pred,
	                          std::chrono::milliseconds timeout = kWait)
	{
		std::unique_lock g(lock_);
		std::optional<T> out;
		cv_.wait_for(g, timeout, [&] {
			for (auto it = q_.begin(); it != q_.end(); ++it) {
				if (pred(*it)) {
					out = std::move(*it);
					q_.erase(it);
					return true;
				}
			}
			return false;
		});
		return out;
	}

	std::optional<T> pop(std::chrono::milliseconds timeout = kWait)
	{
		return wait_for([](const T &) { return true; }, timeout);
	}

	size_t count(const std::function<bool(const T &)> &pred)
	{
		std::lock_guard g(lock_);
		size_t n = 0;
		for (auto &v : q_)
			n += pred(v);
		return n;
	}

	size_t size()
	{
		std::lock_guard g(lock_);
		return q_.size();
	}

	void clear()
	{
		std::lock_guard g(lock_);
		q_.clear();
	}

private:
	std::mutex lock_;
	std::condition_variable cv_;
	std::deque<T> q_;
};

} // namespace ulp::test
