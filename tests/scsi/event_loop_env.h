// SPDX-License-Identifier: MIT
// tests/scsi/event_loop_env.h - an event loop on a thread of its own (epoll, an eventfd for
// post), keeping core/event_loop.h's rules as a TCP worker does: what the file backstore's
// per-loop rings need to run without the iSCSI layer above them.
#pragma once

#include "core/event_loop.h"

#include <gtest/gtest.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace ulp::scsi::bs_test
{

class TestLoop final : public EventLoop
{
public:
	// refuse_fds: add_fd fails with -EMFILE (a loop that cannot watch more descriptors).
	explicit TestLoop(std::string name, bool refuse_fds = false)
	    : name_(std::move(name)), refuse_(refuse_fds)
	{
		epfd_ = epoll_create1(EPOLL_CLOEXEC);
		evfd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
		epoll_event ev{};
		ev.events = EPOLLIN;
		ev.data.ptr = nullptr;
		epoll_ctl(epfd_, EPOLL_CTL_ADD, evfd_, &ev);
		thread_ = std::thread([this] { loop(); });
		tid_ = thread_.get_id();
	}
	~TestLoop()
	{
		stop();
		::close(epfd_);
		::close(evfd_);
	}

	std::thread::id tid() const { return tid_; }

	// Ends the loop and joins its thread (idempotent): see core/event_loop.h.
	void stop()
	{
		if (!thread_.joinable())
			return;
		stop_ = true;
		wake();
		thread_.join();
	}

	// Runs fn on the loop thread and waits for it (bounded). false: it did not run.
	bool run(std::function<void()> fn)
	{
		auto p = std::make_shared<std::promise<void>>();
		auto f = p->get_future();
		if (!post([fn = std::move(fn), p] {
			    fn();
			    p->set_value();
		    }))
			return false;
		return f.wait_for(std::chrono::seconds(30)) == std::future_status::ready;
	}

	int add_fd(int fd, LoopWatch *w) override
	{
		EXPECT_EQ(std::this_thread::get_id(), tid_) << "add_fd off the loop thread";
		if (ending_)
			return -ESHUTDOWN;
		if (refuse_)
			return -EMFILE;
		auto item = std::make_unique<Item>(Item{fd, w});
		epoll_event ev{};
		ev.events = EPOLLIN;
		ev.data.ptr = item.get();
		if (epoll_ctl(epfd_, EPOLL_CTL_ADD, fd, &ev) != 0)
			return -errno;
		items_.push_back(std::move(item));
		return 0;
	}

	void del_fd(int fd) override
	{
		EXPECT_EQ(std::this_thread::get_id(), tid_) << "del_fd off the loop thread";
		auto it = std::find_if(items_.begin(), items_.end(),
		                       [&](const auto &i) { return i->fd == fd; });
		if (it == items_.end())
			return;
		epoll_ctl(epfd_, EPOLL_CTL_DEL, fd, nullptr);
		(*it)->w = nullptr;
		dead_.push_back(std::move(*it));
		items_.erase(it);
	}

	bool post(std::function<void()> fn) override
	{
		{
			std::lock_guard g(lock_);
			if (ended_)
				return false;
			posted_.push_back(std::move(fn));
		}
		wake();
		return true;
	}

	const char *name() const override { return name_.c_str(); }

	// Descriptors watched now (loop thread, or after stop()).
	size_t watched() const { return items_.size(); }

private:
	struct Item {
		int fd;       // the descriptor
		LoopWatch *w; // its watch, or null once removed
	};

	void wake()
	{
		const uint64_t one = 1;
		(void)!::write(evfd_, &one, sizeof(one));
	}

	void run_posted()
	{
		std::vector<std::function<void()>> fns;
		{
			std::lock_guard g(lock_);
			fns.swap(posted_);
		}
		for (auto &fn : fns)
			fn();
	}

	void loop()
	{
		EventLoopScope installed(this);
		epoll_event evs[16];
		while (!stop_.load()) {
			const int n = epoll_wait(epfd_, evs, 16, 100);
			for (int i = 0; i < n; i++) {
				auto *item = static_cast<Item *>(evs[i].data.ptr);
				if (!item) {
					uint64_t v;
					(void)!::read(evfd_, &v, sizeof(v));
					run_posted();
				} else if (item->w) {
					item->w->loop_readable();
				}
			}
			dead_.clear();
		}
		installed.release();
		{
			std::lock_guard g(lock_);
			ended_ = true;
		}
		// Whatever was accepted before the end still runs.
		std::vector<std::function<void()>> fns;
		{
			std::lock_guard g(lock_);
			fns.swap(posted_);
		}
		for (auto &fn : fns)
			fn();
		ending_ = true;
		while (!items_.empty()) {
			Item *i = items_.back().get();
			i->w->loop_ending();
			EXPECT_TRUE(items_.empty() || items_.back().get() != i)
			    << "a watch did not remove itself when the loop ended";
			if (!items_.empty() && items_.back().get() == i)
				del_fd(i->fd);
		}
		dead_.clear();
	}

	const std::string name_; // for logs
	const bool refuse_;      // add_fd fails
	int epfd_ = -1;          // the epoll set
	int evfd_ = -1;          // post() and stop() wake-ups
	std::thread thread_;
	std::thread::id tid_;
	std::atomic<bool> stop_{false};
	std::mutex lock_;                           // guards posted_, ended_
	std::vector<std::function<void()>> posted_; // to run on the loop
	bool ended_ = false;                        // post() refuses
	bool ending_ = false;                       // add_fd refuses; loop thread only
	std::vector<std::unique_ptr<Item>> items_;  // watched; loop thread only
	std::vector<std::unique_ptr<Item>> dead_;   // removed this turn
};

} // namespace ulp::scsi::bs_test
