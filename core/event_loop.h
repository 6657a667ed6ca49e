// SPDX-License-Identifier: MIT
// core/event_loop.h - how an event-loop thread offers itself to the layers below the one that
// runs it: "this thread is a loop; here is how to watch a descriptor on it" (SPDK's
// spdk_thread with its pollers and messages; the kernel's per-CPU workqueues).
//
// A thread that runs an event loop (iscsi/target/tcp.cc's TcpWorker and cq_poll's pollers,
// both on core/epoll_loop.h) installs an EventLoop for its lifetime (EventLoopScope). Code
// running on that thread - a backstore's submit() called by the SCSI core from a connection's
// PDU or from an RDMA completion - finds it with this_event_loop() and may keep per-thread
// resources there: the file backstore's io_uring per worker, whose eventfd the loop watches
// and whose completions it reaps on the thread that submitted them, so that nothing of one
// I/O is shared with another worker. A thread without a loop (this_event_loop() == nullptr)
// gets the resource's thread-neutral form instead.
//
// Rules, which every EventLoop keeps:
//   - add_fd, del_fd: on the loop's own thread only. A watch's callbacks run on that thread.
//   - After del_fd returns, the watch is never called again, not even for an event the loop
//     fetched in the same turn (the watch may be freed right after).
//   - post: from any thread; fn runs on the loop thread, once, unless post returns false
//     (the loop has ended: fn will never run). Every fn accepted before the loop ends runs
//     before the loop's watches are told it ends.
//   - When the loop ends (its thread stops), it uninstalls itself from the thread, runs what
//     was posted, then calls loop_ending() of every watch still added, on its thread, before
//     the thread exits: the watch ends its work there (bounded) and calls del_fd.
#pragma once

#include <cstdint>
#include <functional>

namespace ulp
{

// Something an EventLoop watches for another layer.
class LoopWatch
{
public:
	virtual ~LoopWatch() = default;
	// The watched descriptor is readable. Level triggered: called again on a later turn
	// while it stays readable.
	virtual void loop_readable() = 0;
	// What fired, for a watch the loop was asked to wait for more than readability on
	// (EpollLoop::add_fd with a mask): epoll(7)'s bits, EPOLLERR and EPOLLHUP included. A
	// watch that only reads keeps this default.
	virtual void loop_events(uint32_t events)
	{
		(void)events;
		loop_readable();
	}
	// The loop is ending: finish or abandon the work kept on it (bounded), then del_fd. The
	// loop is no longer installed on the thread (this_event_loop() is null).
	virtual void loop_ending() = 0;
};

class EventLoop
{
public:
	// Loop thread only: call w->loop_readable() on this thread while fd is readable. 0, or
	// a negative errno (-ESHUTDOWN once the loop is ending).
	virtual int add_fd(int fd, LoopWatch *w) = 0;
	// Loop thread only: stop watching fd; its watch is not called again (see the rules).
	virtual void del_fd(int fd) = 0;
	// Any thread: run fn on the loop thread soon. false: the loop has ended, fn will not run.
	virtual bool post(std::function<void()> fn) = 0;
	// For log lines: which loop this is ("tcp worker 1").
	virtual const char *name() const = 0;

protected:
	~EventLoop() = default; // not owned through this interface
};

namespace detail
{
// The calling thread's installed loop. (An inline function's statics are one object in the
// whole program, as this_shard()'s.)
inline EventLoop *&this_event_loop_slot()
{
	thread_local EventLoop *loop = nullptr;
	return loop;
}
} // namespace detail

// The event loop the calling thread runs, or nullptr.
inline EventLoop *this_event_loop()
{
	return detail::this_event_loop_slot();
}

// Installs loop on the calling thread for a scope (the loop thread's run function).
class EventLoopScope
{
public:
	explicit EventLoopScope(EventLoop *loop) : prev_(detail::this_event_loop_slot())
	{
		detail::this_event_loop_slot() = loop;
	}
	~EventLoopScope() { detail::this_event_loop_slot() = prev_; }
	EventLoopScope(const EventLoopScope &) = delete;
	EventLoopScope &operator=(const EventLoopScope &) = delete;
	// Uninstalls before the scope ends (a loop that is ending: see the rules).
	void release() { detail::this_event_loop_slot() = prev_; }

private:
	EventLoop *prev_; // what the thread had installed before (normally nothing)
};

} // namespace ulp
