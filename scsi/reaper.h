// SPDX-License-Identifier: MIT
// scsi/reaper.h - the thread that closes I_T nexuses for a fabric: every fabric's session
// teardown ends in Tpg::close_session, which waits for the nexus's commands and so must not
// run on a thread those commands need (a connection's own, a CQ worker). iSCSI and SRP hand
// their nexuses to a Reaper instead (the kernel's ib_srpt does this on its release_work,
// LIO's iSCSI target on its connection's teardown thread).
//
// close(s, done): on the reaper's thread, Tpg::close_session(s) bounded by the timeout and
// retried (each attempt logs how many commands remain) until every command is gone, since
// freeing the nexus earlier would let a late completion touch freed memory; then done(),
// on the reaper's thread. The fabric calls Tpg::session_lost itself first, from the thread
// that noticed the loss, so that a new nexus of the same initiator finds the old one's
// reservations and commands already let go.
//
// Locking: lock_ guards the queue and the counters; done() runs without it.
#pragma once

#include "core/bounded_thread.h"

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

namespace ulp::scsi
{

class Nexus;

class Reaper
{
public:
	// name: the thread's name ("ulp-srpt-reap"); timeout: one close_session attempt's bound.
	Reaper(std::string name, std::chrono::milliseconds timeout);
	// Closes everything queued, then joins.
	~Reaper();
	Reaper(const Reaper &) = delete;
	Reaper &operator=(const Reaper &) = delete;

	// Queue s (null: none, only done runs) for closing; done runs after, on the reaper.
	void close(Nexus *s, std::function<void()> done);

	// Nexuses queued or being closed.
	size_t pending();
	// Wait until nothing is queued or being closed, at most until deadline. True: idle.
	bool wait_idle(std::chrono::steady_clock::time_point deadline);
	// close_session attempts that timed out (commands still in flight at the bound).
	uint64_t timeouts();

private:
	void loop();

	std::string name_;
	std::chrono::milliseconds timeout_;
	std::mutex lock_;
	std::condition_variable cv_; // work queued, or the queue drained (wait_idle)
	std::deque<std::pair<Nexus *, std::function<void()>>> queue_;
	size_t busy_ = 0;       // entries taken off queue_ and not yet done
	uint64_t timeouts_ = 0; // close_session attempts that timed out
	bool stop_ = false;     // the thread exits once queue_ is empty
	BoundedThread thread_;
};

} // namespace ulp::scsi
