// SPDX-License-Identifier: MIT
// core/turn.h - a thread's turn: one pass of the loop that thread runs (a poll batch of a CQ,
// an event loop's turn, a backstore completion thread's reap), after which what the pass
// deferred runs, once, outside all of the pass's callbacks. NAPI drivers flush at the end of
// a poll (xdp_do_flush), the block layer flushes a task's plug when it schedules
// (blk_flush_plug), SPDK's NVMe-oF RDMA poller posts its queued sends once per poll; this is
// the one place every completion source of this process passes through for that.
//
// Who opens a turn: cq_poll's dispatch loop around each batch of WCs (cq_poll.cc), an
// EpollLoop's turn around the watches and posted functions it runs (a file LU's per-loop
// ring is reaped there), and the backstores' own completion threads around each reap batch.
// Turns nest: a pass inside another (a done() callback polling another CQ, a CQ processed
// from an event loop's watch) defers to the outermost turn's end.
//
// What uses it: the RDMA fabrics' send plug (rdma_conn/send_plug.h), which posts the work
// requests one turn built for a connection as one chain, with one post_send: on rxe one
// system call and one wake-up of the peer's CQ tasklet for the turn instead of one per
// response. And a file or block LU's ring on an event loop (scsi/bs_file_ring.cc), which
// submits the requests one turn started with one io_uring_enter.
//
// Rules: defer only from the thread that runs the turn; fn runs on it, after the callbacks
// of the turn, and must not block (the thread is a poller or an event loop) or free a CQ.
// fn may defer again: it runs at the same end. A thread with no turn open gets false: do it
// now.
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

namespace ulp
{

namespace detail
{
// The calling thread's turn. (An inline function's statics are one object in the whole
// program, as this_event_loop_slot()'s.)
struct TurnState {
	int depth = 0; // TurnScopes open on this thread
	// What the turn's callbacks deferred, in order: run when the outermost scope closes.
	// Kept with its capacity: no allocation per turn.
	std::vector<std::pair<void (*)(void *), void *>> deferred;
};

inline TurnState &this_turn()
{
	thread_local TurnState t;
	return t;
}
} // namespace detail

// A turn on the calling thread for a scope. The outermost scope runs what was deferred when
// it closes (in the order it was deferred; what those functions defer runs too).
class TurnScope
{
public:
	TurnScope() { detail::this_turn().depth++; }
	~TurnScope()
	{
		detail::TurnState &t = detail::this_turn();
		if (t.depth == 1) {
			// By index, each entry copied before its call: a call may append (and
			// reallocate). The turn stays open meanwhile, so that those appends land
			// here.
			for (size_t i = 0; i < t.deferred.size(); i++) {
				const auto [fn, arg] = t.deferred[i];
				fn(arg);
			}
			t.deferred.clear();
		}
		t.depth--;
	}
	TurnScope(const TurnScope &) = delete;
	TurnScope &operator=(const TurnScope &) = delete;
};

// A turn is open on the calling thread.
inline bool in_turn()
{
	return detail::this_turn().depth > 0;
}

// Run fn(arg) at the end of the calling thread's (outermost) turn. false when no turn is
// open: the caller does it now.
inline bool defer_to_turn_end(void (*fn)(void *), void *arg)
{
	detail::TurnState &t = detail::this_turn();
	if (t.depth == 0)
		return false;
	t.deferred.emplace_back(fn, arg);
	return true;
}

// Calling thread: what defer_to_turn_end(fn, arg) queued and has not run yet will not run
// (arg is going away before the turn ends).
inline void cancel_deferred(void (*fn)(void *), void *arg)
{
	for (auto &e : detail::this_turn().deferred)
		if (e.first == fn && e.second == arg)
			e.first = [](void *) {};
}

} // namespace ulp
