// SPDX-License-Identifier: MIT
// core/epoll_loop.h - the EventLoop of a thread that waits in epoll(7): the descriptors other
// layers watch on it (add_fd, del_fd), post()'s queue, and the loop's end, kept by the rules
// of core/event_loop.h. The thread that owns it adds its own descriptors with a tag, or as
// watches of its own with the events it waits for (add_fd with a mask, modify), runs one
// turn() at a time, and calls end() once before it exits.
//
// Users: cq_poll's poller threads (the RDMA connections' completions run there, and so do
// the file backstore's per-loop rings for their commands), the iSCSI TCP workers (their
// listening sockets and connections are watches of the worker's loop; a connection waits
// for EPOLLOUT while a send is short), and the tests' loops.
#pragma once

#include "core/event_loop.h"

#include <sys/epoll.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

namespace ulp
{

class EpollLoop final : public EventLoop
{
public:
	explicit EpollLoop(std::string name);
	~EpollLoop();
	EpollLoop(const EpollLoop &) = delete;
	EpollLoop &operator=(const EpollLoop &) = delete;

	// 0, or -errno: the epoll set or the eventfd could not be made.
	int init();

	// Owner: the thread that runs turn() from now on (add_fd and del_fd check it).
	void set_owner() { owner_ = std::this_thread::get_id(); }

	// Owner thread: watch fd for the owner itself; turn() reports tag while it is readable
	// (level triggered). 0 or -errno.
	int add_own(int fd, uint32_t tag);

	// Owner thread: watch fd for w, waiting for events (epoll(7)'s EPOLLIN, EPOLLOUT; EPOLLERR
	// and EPOLLHUP are always reported): w->loop_events(what fired) on every turn while one
	// holds (level triggered). add_fd(fd, w) is add_fd(fd, w, EPOLLIN). 0 or -errno
	// (-ESHUTDOWN once the loop is ending).
	int add_fd(int fd, LoopWatch *w, uint32_t events);
	// Owner thread: wait for events on watched fd from now on (EPOLL_CTL_MOD): a writer asks
	// for EPOLLOUT while its socket is full and drops it once the socket took everything.
	// 0, -ENOENT (fd is not watched), or -errno.
	int modify(int fd, uint32_t events);

	// Owner thread: one turn. Waits up to timeout_ms (0: only looks, -1: forever) for a
	// descriptor or a post(); calls the watches whose events fired (loop_events) and what
	// was posted (at most kBatch descriptors a turn), and stores the tags of readable own
	// descriptors in own (as many as fit). Returns how many tags it stored, or -errno.
	// The calls are one turn of the thread (core/turn.h): what they defer runs after them,
	// before turn() returns.
	int turn(int timeout_ms, std::span<uint32_t> own);

	// Owner thread, once, when the loop stops: posted functions run, then every watch still
	// added gets loop_ending() (core/event_loop.h). The caller uninstalls the loop from its
	// thread first (EventLoopScope::release). Returns how many watches broke the rule and did
	// not remove themselves (logged; removed here).
	size_t end();

	// Any thread: make the current or next turn() return.
	void wake();

	// Owner thread: descriptors other layers watch now.
	size_t watches() const { return watches_.size(); }
	// Owner thread: a turn has something to look at besides the owner's own descriptors
	// (a watch, or a post() not run yet): a busy owner runs turn(0) then.
	bool pending() const
	{
		return !watches_.empty() || posted_any_.load(std::memory_order_relaxed);
	}

	// EventLoop (core/event_loop.h).
	int add_fd(int fd, LoopWatch *w) override { return add_fd(fd, w, EPOLLIN); }
	void del_fd(int fd) override;
	bool post(std::function<void()> fn) override;
	const char *name() const override { return name_.c_str(); }

	// Events a turn takes from epoll_wait at most: a TCP worker with more ready connections
	// runs these, writes out what they produced, and takes the rest on the next turn.
	static constexpr int kBatch = 64;

private:
	// What an epoll event's data.ptr names; the eventfd is nullptr.
	struct Item {
		int fd = -1;            // the descriptor
		LoopWatch *w = nullptr; // a watch's callbacks; null for own ones and once removed
		uint32_t tag = 0;       // own descriptors: what turn() reports
		bool own = false;       // added by add_own, not add_fd
		uint32_t events = 0;    // what epoll waits for on it (EPOLLIN, EPOLLOUT)
	};

	using ItemList = std::vector<std::unique_ptr<Item>>;

	// EPOLL_CTL_ADD of item, kept in list: 0 or -errno.
	int add_item(std::unique_ptr<Item> item, ItemList &list);
	// The watch of fd in watches_, or watches_.end() (a linear search: a loop watches a
	// few descriptors, a TCP worker its connections).
	ItemList::iterator find_watch(int fd);
	void run_posted();

	const std::string name_;                    // for log lines ("cq poller 0 of rxe0")
	int epfd_ = -1;                             // the epoll set
	int evfd_ = -1;                             // post() and wake()
	std::thread::id owner_;                     // the thread that runs turn() (set_owner)
	std::mutex lock_;                           // guards posted_ and ended_
	std::vector<std::function<void()>> posted_; // post(): to run on the loop (lock_)
	bool ended_ = false;                        // end() ran: post() refuses (lock_)
	std::atomic<bool> posted_any_{false};       // posted_ may be non-empty (hint, relaxed)
	bool ending_ = false;                       // add_fd refuses (owner thread)
	ItemList own_;                              // add_own's (owner thread)
	ItemList watches_;                          // add_fd's, oldest first (owner thread)
	ItemList dead_;                             // del_fd's this turn, freed after it
};

} // namespace ulp
