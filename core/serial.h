// SPDX-License-Identifier: MIT
// core/serial.h - a connection's single-holder serialiser: its work runs one piece at
// a time, on whichever thread brings it, with an inbox for what other threads post.
//
// A ULP connection is entered from many threads: its CQ's completion workers, the CM
// thread, the SCSI core's backstore completions and task management, a portal's event
// thread. The kernel's ULPs serialise with a spinlock per queue and bounce work to a
// workqueue; userspace pays tens of microseconds for every such thread switch under TCG
// (tools/iscsi-bench/vm-iser). So:
//
//   - enter(f) takes the connection (its mutex), runs f, then runs every event posted
//     meanwhile, and gives the connection up under the inbox lock once the inbox is empty:
//     an event posted while someone holds the connection is never left behind, and nobody
//     needs waking for it.
//   - post(ev, arg) from any thread queues the event (arg: what it is about, typed by the
//     connection: a command, or a close reason); in Inline mode a poster that finds the
//     connection free takes it (a try-lock, under the inbox lock) and runs the events
//     itself, so a backstore's completion sends its response from its own thread; when the
//     connection is held (by another thread, or by this one further up its stack) the
//     holder runs it before it lets go. In Owner mode (one thread owns the connection, as a
//     TCP worker does) nobody else ever runs events: a post that finds the connection free
//     kick()s the owner.
//   - post_deferred(ev, arg) never runs events on the caller's thread: for a caller that
//     holds a lock an event may take (IscsiTarget's lock_: closing a session takes it; run
//     inline, a Drop posted under it would deadlock its own thread). It queues and kicks.
//
// Lock order: the connection's mutex, then the inbox lock. post() takes the inbox lock and
// then only try-locks the mutex. kick() runs under the inbox lock and must not block.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace ulp
{

template <typename Event, typename Arg> class Serial
{
public:
	enum class Mode : uint8_t {
		Inline, // a poster that finds the connection free runs the events itself
		Owner,  // only enter() runs events; a poster kicks the owner
	};

	explicit Serial(Mode mode) : mode_(mode) {}
	virtual ~Serial() = default;
	Serial(const Serial &) = delete;
	Serial &operator=(const Serial &) = delete;

	// Run f holding the connection, then the events posted meanwhile.
	template <typename F> void enter(F &&f)
	{
		mu_.lock();
		{
			std::lock_guard g(inbox_lock_);
			held_ = true;
		}
		holder_.store(std::this_thread::get_id(), std::memory_order_relaxed);
		f();
		leave();
	}

	// Any thread: run (ev, arg) holding the connection, soon (see above).
	void post(Event ev, Arg arg)
	{
		std::unique_lock g(inbox_lock_);
		inbox_.emplace_back(ev, arg);
		if (mode_ == Mode::Inline && try_own()) {
			g.unlock(); // leave() takes it
			leave();
			return;
		}
		if (!held_)
			kick(); // Owner mode with nobody holding: the owner must come
	}

	// Any thread, holding a lock an event may take: never run here.
	void post_deferred(Event ev, Arg arg)
	{
		std::lock_guard g(inbox_lock_);
		inbox_.emplace_back(ev, arg);
		if (!held_)
			kick();
	}

	// The holder: is this thread it? (For asserts: a connection's own work.)
	bool held_here() const
	{
		return holder_.load(std::memory_order_relaxed) == std::this_thread::get_id();
	}

protected:
	// One posted event, run by the holder.
	virtual void run_event(Event ev, Arg arg) = 0;
	// Make some thread enter() soon (post in Owner mode, post_deferred in both). Called under
	// the inbox lock: must not block, and must not call back into this object.
	virtual void kick() = 0;

	// After the last leave() (the connection is done and nobody will post again): take the
	// inbox lock once, so that no poster is still inside post() when the object is freed.
	void quiesce() { std::lock_guard g(inbox_lock_); }

private:
	// Under the inbox lock, which leave() takes while holding mu_: hence a try-lock. The
	// holder's own posts wait for the end of its turn (mu_ is not recursive).
	bool try_own()
	{
		const auto self = std::this_thread::get_id();
		if (holder_.load(std::memory_order_relaxed) == self || !mu_.try_lock())
			return false;
		held_ = true;
		holder_.store(self, std::memory_order_relaxed);
		return true;
	}

	// The events, then mu_ given up under the inbox lock, so that no event posted meanwhile
	// is left behind. From the unlock on, the connection may be freed by whoever decides
	// that (it takes mu_ and then quiesce()s first).
	void leave()
	{
		for (;;) {
			{
				std::lock_guard g(inbox_lock_);
				if (inbox_.empty()) {
					held_ = false;
					holder_.store(std::thread::id(), std::memory_order_relaxed);
					mu_.unlock();
					return;
				}
				running_.swap(inbox_);
			}
			for (auto [ev, arg] : running_)
				run_event(ev, arg);
			running_.clear();
		}
	}

	const Mode mode_;
	std::mutex mu_;                              // held by the connection's one holder
	std::atomic<std::thread::id> holder_;        // who holds mu_ (none: default id)
	std::mutex inbox_lock_;                      // guards inbox_ and held_
	bool held_ = false;                          // someone holds mu_ and has not left
	std::vector<std::pair<Event, Arg>> inbox_;   // posted, not yet run
	std::vector<std::pair<Event, Arg>> running_; // the holder's batch being run
};

} // namespace ulp
