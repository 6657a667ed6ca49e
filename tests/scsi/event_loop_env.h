// SPDX-License-Identifier: MIT
// tests/scsi/event_loop_env.h - an event loop on a thread of its own (core/epoll_loop.h, as
// cq_poll's pollers run one), keeping core/event_loop.h's rules as a TCP worker does: what the
// file backstore's per-loop rings need to run without the iSCSI layer above them.
#pragma once

#include "core/epoll_loop.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <thread>

namespace ulp::scsi::bs_test
{

class TestLoop final : public EventLoop
{
public:
	// refuse_fds: add_fd fails with -EMFILE (a loop that cannot watch more descriptors).
	explicit TestLoop(std::string name, bool refuse_fds = false)
	    : loop_(std::move(name)), refuse_(refuse_fds)
	{
		EXPECT_EQ(loop_.init(), 0);
		std::promise<void> owned;
		auto f = owned.get_future();
		thread_ = std::thread([this, &owned] {
			loop_.set_owner();
			owned.set_value();
			loop();
		});
		f.wait();
		tid_ = thread_.get_id();
	}
	~TestLoop() { stop(); }

	std::thread::id tid() const { return tid_; }

	// Ends the loop and joins its thread (idempotent): see core/event_loop.h.
	void stop()
	{
		if (!thread_.joinable())
			return;
		stop_ = true;
		loop_.wake();
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
		if (refuse_)
			return -EMFILE;
		return loop_.add_fd(fd, w);
	}
	void del_fd(int fd) override
	{
		EXPECT_EQ(std::this_thread::get_id(), tid_) << "del_fd off the loop thread";
		loop_.del_fd(fd);
	}
	bool post(std::function<void()> fn) override { return loop_.post(std::move(fn)); }
	const char *name() const override { return loop_.name(); }

	// Descriptors watched now (loop thread, or after stop()).
	size_t watched() const { return loop_.watches(); }

private:
	void loop()
	{
		EventLoopScope installed(this);
		while (!stop_.load())
			EXPECT_GE(loop_.turn(100, {}), 0);
		installed.release();
		EXPECT_EQ(loop_.end(), 0u) << "a watch did not remove itself when the loop ended";
	}

	EpollLoop loop_;    // the epoll set, the watches, post()'s queue, the end
	const bool refuse_; // add_fd fails
	std::thread thread_;
	std::thread::id tid_;
	std::atomic<bool> stop_{false};
};

} // namespace ulp::scsi::bs_test
