// SPDX-License-Identifier: MIT
// scsi/sbc_rmw.cc - the logical unit's read-modify-write turn: COMPARE AND WRITE (SBC-3 5.2)
// and ORWRITE (SBC-3 5.13) read blocks, decide what to write from what they read, and write
// it, and no other such command may change the blocks in between. (WRITE ATOMIC (16) is
// not one of them: it reads nothing, and its backstore request is indivisible instead,
// sbc_atomic.cc.)
//
// The LU runs one of them at a time, from its first read to its last write
// (LogicalUnit::rmw_busy_ under rmw_lock_). One that finds another running waits in the
// LU's FIFO (rmw_wait_, linked through the command's dormant hook, free while it executes);
// no thread blocks. The one that finishes hands the turn to the oldest waiter before it
// completes. Starting that waiter on the finishing thread could recurse without bound on a
// synchronous backstore (each one finishes inside its own start and starts the next), so a
// thread that is already starting commands queues further ones on a thread-local list and
// starts them in a loop instead (launch).
//
// A waiter starts through its state's resume function (SbcStep::resume), which is its
// command's loop: the command's state is allocated before it asks for the turn.
#include "scsi/sbc_internal.h"

#include <mutex>

namespace ulp::scsi
{

namespace
{

// Commands this thread is about to start, or null when it is not inside launch().
thread_local CmdDormantList *t_launching = nullptr;

// Start cmd, which holds the LU's turn.
void launch(Cmd *cmd)
{
	if (t_launching) {
		t_launching->push_back(*cmd); // the loop below, further up this stack, runs it
		return;
	}
	CmdDormantList pending;
	t_launching = &pending;
	sbc_step(cmd)->resume(cmd);
	while (!pending.empty()) {
		Cmd &c = pending.front();
		pending.pop_front();
		sbc_step(&c)->resume(&c);
	}
	t_launching = nullptr;
}

// The LU's turn ends: pass it to the oldest waiter (returned, to be launched once the
// finishing command is completed), or free it.
Cmd *release(LogicalUnit &lu)
{
	std::lock_guard g(lu.rmw_lock_);
	if (lu.rmw_wait_.empty()) {
		lu.rmw_busy_ = false;
		return nullptr;
	}
	Cmd &next = lu.rmw_wait_.front();
	lu.rmw_wait_.pop_front();
	return &next; // rmw_busy_ stays set: the turn is next's
}

} // namespace

void sbc_rmw_start(Cmd *cmd)
{
	LogicalUnit &lu = *cmd->lu;
	{
		std::lock_guard g(lu.rmw_lock_);
		if (lu.rmw_busy_) {
			lu.rmw_wait_.push_back(*cmd); // started by the one before it
			return;
		}
		lu.rmw_busy_ = true;
	}
	launch(cmd);
}

void sbc_rmw_finish(Cmd *cmd, Sense s, bool miscompare, uint64_t off)
{
	// The turn is released before the completion: after it, cmd (and with the last
	// command of a session, the LU) may be gone.
	Cmd *next = release(*cmd->lu);
	if (miscompare)
		sbc_complete_miscompare(cmd, off);
	else if (s != Sense::None)
		complete_sense(cmd, s);
	else
		complete_good(cmd);
	if (next)
		launch(next);
}

} // namespace ulp::scsi
