// SPDX-License-Identifier: MIT
// scsi/tmr.cc - task management functions (SAM-5 7; the kernel's target_core_tmr.c) and
// session teardown.
//
// A function marks the commands it covers aborted, under their LU's lock, and answers
// only when every one of them has finished: a command whose backstore I/O is in flight
// cannot be recalled, so the function waits for it (SAM-5 7.1: the function completes
// after the tasks it aborts have ended). The wait is event driven, not a blocked thread:
// each LU keeps the functions waiting on it (TmrWait), and the completion path
// (core.cc cmd_finish) strikes commands off as they end; the last one sends the response.
//
// Target resets (RFC 7143 11.5.1: TARGET WARM RESET, TARGET COLD RESET) act on every logical
// unit the issuing I_T nexus sees (its ACL's LUNs: "all LUs known by the issuing initiator"), never
// on LUs hidden from it:
//   TARGET WARM RESET  each LU as by LOGICAL UNIT RESET: tasks aborted, the SPC-2
//                      reservation released, BUS DEVICE RESET FUNCTION OCCURRED for every
//                      nexus (SPI-5's target reset event);
//   TARGET COLD RESET  each LU as after a power on: tasks aborted, the SPC-2 reservation
//                      gone, and the persistent reservation and registrations too unless
//                      APTPL is active (pr_power_on, SPC-4 5.13.5), the mode
//                      parameters back to their defaults, and the unit attention queues
//                      emptied so that every nexus hears POWER ON, RESET, OR BUS DEVICE RESET
//                      OCCURRED first, as after a power on (ua.cc). Dropping the target's
//                      sessions, which the power on also means, is the fabric's part once
//                      the response has gone out (iscsi/target/conn.cc).
//
// What an aborted command gets: nothing of its own when it belongs to the nexus that asked
// (the function's response covers it); TASK ABORTED status when it belongs to another
// nexus and the LU has TAS set (SAM-5 5.6); otherwise nothing, plus a COMMANDS CLEARED BY
// ANOTHER INITIATOR unit attention for its nexus (SAM-5 CLEAR TASK SET, TAS 0).
#include "core/lock_assert.h"
#include "scsi/core.h"
#include "scsi/core_internal.h"
#include "scsi/fabric.h"
#include "scsi/pr.h"

#include <algorithm>
#include <cassert>
#include <set>
#include <span>
#include <vector>

namespace ulp::scsi
{

struct LogicalUnit::TmrWait {
	Tmr *tmr = nullptr;      // the function waiting
	std::vector<Cmd *> cmds; // commands of this LU it still waits for
};

namespace
{

// What the caller does once the LU lock is dropped.
struct AbortWork {
	std::vector<Cmd *> finish_now; // were dormant: finish them as aborted (the core's ref)
	std::vector<Cmd *> stop_write; // in write_pending: abort_write (a reference held)
	std::set<NexusId> cleared;     // other nexuses whose tasks went without TAS
};

// Take a reference on cmd unless it is already being released.
bool try_get(Cmd *cmd)
{
	int r = cmd->refs.load(std::memory_order_relaxed);
	while (r > 0)
		if (cmd->refs.compare_exchange_weak(r, r + 1, std::memory_order_acq_rel))
			return true;
	return false;
}

// Under lu.lock_.lock_all: mark cmd aborted (once) and note what to do about it. Does nothing for
// a command already answered.
void abort_locked(LogicalUnit &lu, Cmd *cmd, bool tas, LogicalUnit::TmrWait *w, AbortWork &work)
{
	ULP_ASSERT_HELD_ALL(lu.lock_);
	if (cmd->state == CmdState::Complete || cmd->state == CmdState::Aborted)
		return;
	if (w)
		w->cmds.push_back(cmd);
	if (cmd->aborted)
		return; // another function (or teardown) got there first; wait all the same
	cmd->aborted = true;
	cmd->send_tas = tas;
	switch (cmd->state) {
	case CmdState::Dormant:
		lu.dormant_.erase(lu.dormant_.iterator_to(*cmd));
		work.finish_now.push_back(cmd);
		break;
	case CmdState::WritePending:
		// Before write_pending returned, submit() calls abort_write itself.
		if (cmd->wp_returned && try_get(cmd))
			work.stop_write.push_back(cmd);
		break;
	default:
		break; // Parsing or Executing: cmd_finish sees the flag when it ends
	}
}

void do_work(AbortWork &work)
{
	for (Cmd *c : work.finish_now)
		cmd_finish(c);
	for (Cmd *c : work.stop_write) {
		c->sess->fabric().abort_write(c);
		cmd_put(c);
	}
}

// Register w on lu if it waits for anything (under lu.lock_.lock_all); counts it in tmr->pending.
void add_wait(LogicalUnit &lu, LogicalUnit::TmrWait *&w)
{
	ULP_ASSERT_HELD_ALL(lu.lock_);
	if (w->cmds.empty()) {
		delete w;
		w = nullptr;
		return;
	}
	w->tmr->pending.fetch_add(1, std::memory_order_relaxed);
	lu.tmr_waits_.push_back(w);
	w = nullptr;
}

// Drop the submitter's guard on tmr->pending; the last one responds.
void tmr_put(Tmr *tmr)
{
	if (tmr->pending.fetch_sub(1, std::memory_order_acq_rel) == 1)
		tmr_respond(tmr);
}

enum class Scope : uint8_t {
	Task,     // ABORT TASK: the command with ref_tag of this nexus
	NexusSet, // ABORT TASK SET: every command of this nexus on the LU
	AllSets,  // CLEAR TASK SET, LOGICAL UNIT RESET: every command on the LU
	Nexuses,  // PREEMPT AND ABORT: every command of the nexuses listed
};

// Abort what scope covers on lu; returns how many commands were found still unanswered.
// except: a command never aborted (the PERSISTENT RESERVE OUT doing it).
size_t abort_on_lu(LogicalUnit &lu, Tmr *tmr, Scope scope, std::span<const NexusId> which = {},
                   const Cmd *except = nullptr)
{
	AbortWork work;
	size_t found = 0;
	{
		ShardLockAll g(lu.lock_);
		auto *w = new LogicalUnit::TmrWait{tmr, {}};
		lu.for_each_task([&](Cmd &c) {
			const bool mine = c.sess == tmr->sess;
			if (&c == except)
				return true;
			if (scope == Scope::Nexuses) {
				if (std::find(which.begin(), which.end(), c.sess->id()) ==
				    which.end())
					return true;
			} else if (scope != Scope::AllSets && !mine) {
				return true;
			}
			if (scope == Scope::Task && c.tag != tmr->ref_tag)
				return true;
			if (c.state == CmdState::Complete || c.state == CmdState::Aborted)
				return true;
			found++;
			const bool tas = !mine && lu.cfg().tas;
			if (!mine && !tas)
				work.cleared.insert(c.sess->id());
			abort_locked(lu, &c, tas, w, work);
			return scope != Scope::Task; // ABORT TASK: the one task
		});
		add_wait(lu, w);
	}
	for (const NexusId &n : work.cleared)
		lu.ua_add(n, UA_COMMANDS_CLEARED);
	do_work(work);
	return found;
}

// Query functions answer from the task set without changing it.
bool task_exists(LogicalUnit &lu, Tmr *tmr, bool any)
{
	ShardLockAll g(lu.lock_);
	bool found = false;
	lu.for_each_task([&](Cmd &c) {
		found = c.sess == tmr->sess && !c.aborted && c.state != CmdState::Complete &&
		        c.state != CmdState::Aborted && (any || c.tag == tmr->ref_tag);
		return !found;
	});
	return found;
}

// Abort every command of session s (I_T NEXUS RESET, teardown). w_tmr: the function that
// waits for them, or null (teardown waits on the session's command list instead).
void abort_session(Nexus *s, Tmr *w_tmr)
{
	std::vector<Cmd *> cmds;
	{
		std::lock_guard g(s->sess_lock_);
		for (Cmd &c : s->cmds_)
			if (try_get(&c))
				cmds.push_back(&c);
	}
	// One wait per LU, built as the commands are visited.
	std::vector<std::pair<LogicalUnit *, LogicalUnit::TmrWait *>> waits;
	AbortWork work;
	for (Cmd *c : cmds) {
		// Not c->lu: a command joins cmds_ before submit() looks its LUN up (so that a LUN
		// removal counts it), and the submitter writes lu unlocked. lu_pin is the same
		// result, stored atomically under the Tpg's lock. Null: the LUN does not exist, or
		// the lookup has not happened yet and the command runs as if it came after this.
		// Relaxed: what is read of the command after this is read under lu->lock_.
		LogicalUnit *lu = c->lu_pin.load(std::memory_order_relaxed);
		if (!lu)
			continue; // no-LU commands run to completion inside submit()
		LogicalUnit::TmrWait *w = nullptr;
		if (w_tmr) {
			auto it = std::find_if(waits.begin(), waits.end(),
			                       [&](auto &p) { return p.first == lu; });
			if (it == waits.end()) {
				waits.emplace_back(lu, new LogicalUnit::TmrWait{w_tmr, {}});
				it = waits.end() - 1;
			}
			w = it->second;
		}
		ShardLockAll g(lu->lock_);
		abort_locked(*lu, c, false, w, work);
	}
	for (auto &[lu, w] : waits) {
		ShardLockAll g(lu->lock_);
		// Commands that ended between abort_locked and now are no longer in the task
		// set: cmd_finish could not strike them off a wait that was not registered yet.
		std::erase_if(w->cmds, [&](Cmd *c) {
			return c->state == CmdState::Complete || c->state == CmdState::Aborted;
		});
		add_wait(*lu, w);
	}
	do_work(work);
	for (Cmd *c : cmds)
		cmd_put(c);
}

// TARGET WARM RESET and TARGET COLD RESET on every LU s sees (see the top of the file).
void target_reset(Nexus *s, Tmr *tmr, bool cold)
{
	std::set<LogicalUnit *> lus;
	for (uint64_t l : s->luns())
		if (LogicalUnit *lu = s->lookup_lun(l, nullptr))
			lus.insert(lu);
	for (LogicalUnit *lu : lus) {
		abort_on_lu(*lu, tmr, Scope::AllSets);
		lu->medium_reset();
		if (!cold) {
			pr_lun_reset(*lu);
			lu->ua_add_all(UA_BUS_DEVICE_RESET);
			continue;
		}
		pr_power_on(*lu);
		lu->set_swp(false);
		lu->set_wce(true); // the default: on when the backstore has a cache (lu.h)
		lu->ua_reset();
	}
}

} // namespace

void tmr_respond(Tmr *tmr)
{
	if (tmr->core_done)
		tmr->core_done(tmr);
	else
		tmr->sess->fabric().queue_tm_rsp(tmr);
}

void abort_lu_tasks(LogicalUnit &lu, Tmr *tmr)
{
	tmr->pending.store(1, std::memory_order_relaxed);
	abort_on_lu(lu, tmr, Scope::AllSets);
	tmr_put(tmr);
}

void abort_nexus_tasks(LogicalUnit &lu, Tmr *tmr, std::span<const NexusId> which, const Cmd *except)
{
	tmr->pending.store(1, std::memory_order_relaxed);
	abort_on_lu(lu, tmr, Scope::Nexuses, which, except);
	tmr_put(tmr);
}

// core.cc calls this under lu.lock_.lock_all when cmd ends.
void tmr_cmd_finished(LogicalUnit &lu, Cmd *cmd, std::vector<Tmr *> &done)
{
	ULP_ASSERT_HELD_ALL(lu.lock_);
	for (auto it = lu.tmr_waits_.begin(); it != lu.tmr_waits_.end();) {
		LogicalUnit::TmrWait *w = *it;
		std::erase(w->cmds, cmd);
		if (!w->cmds.empty()) {
			++it;
			continue;
		}
		it = lu.tmr_waits_.erase(it);
		if (w->tmr->pending.fetch_sub(1, std::memory_order_acq_rel) == 1)
			done.push_back(w->tmr);
		delete w;
	}
}

void session_abort_all(Nexus *s)
{
	{
		std::lock_guard g(s->sess_lock_);
		s->stopping_ = true;
	}
	abort_session(s, nullptr);
}

void tmr_submit(Tmr *tmr)
{
	Nexus *s = tmr->sess;
	// The LUs found below stay allocated until this returns, even if a LUN is removed
	// meanwhile (scsi/tpg.h); what waits for commands after it, they keep alive themselves.
	auto life = s->tpg().life_guard();
	// The submitter's guard: the response cannot go out while functions are still
	// being marked, even if every command ends meanwhile.
	tmr->pending.store(1, std::memory_order_relaxed);
	tmr->response = TmfResponse::Complete;
	s->stats_.count_tmf();

	switch (tmr->function) {
	case TmfType::ClearAca:
		// No ACA (NACA is never accepted).
		tmr->response = TmfResponse::NotSupported;
		tmr_put(tmr);
		return;
	case TmfType::TargetWarmReset:
	case TmfType::TargetColdReset:
		target_reset(s, tmr, tmr->function == TmfType::TargetColdReset);
		tmr_put(tmr);
		return;
	case TmfType::ITNexusReset: {
		// SAM-5 I_T NEXUS RESET: every task of the nexus on every LU is aborted, and
		// each LU it had used reports I_T NEXUS LOSS OCCURRED to it next.
		abort_session(s, tmr);
		std::set<LogicalUnit *> lus;
		for (uint64_t l : s->luns())
			if (LogicalUnit *lu = s->lookup_lun(l, nullptr))
				lus.insert(lu);
		for (LogicalUnit *lu : lus) {
			pr_nexus_loss(*lu, s->id());
			lu->medium_nexus_loss(s->id());
			lu->ua_add(s->id(), UA_I_T_NEXUS_LOSS);
		}
		tmr_put(tmr);
		return;
	}
	default:
		break;
	}

	LogicalUnit *lu = s->lookup_lun(tmr->lun, nullptr);
	if (!lu) {
		tmr->response = TmfResponse::LunNotFound;
		tmr_put(tmr);
		return;
	}
	switch (tmr->function) {
	case TmfType::AbortTask:
		if (abort_on_lu(*lu, tmr, Scope::Task) == 0)
			tmr->response = TmfResponse::TaskNotFound;
		break;
	case TmfType::AbortTaskSet:
		abort_on_lu(*lu, tmr, Scope::NexusSet);
		break;
	case TmfType::ClearTaskSet:
		abort_on_lu(*lu, tmr, Scope::AllSets);
		break;
	case TmfType::LunReset:
		// SAM-5 LOGICAL UNIT RESET: abort every task, release an SPC-2
		// reservation (persistent ones stay), end medium removal prevention
		// (SPC-4 6.13), and tell every nexus.
		abort_on_lu(*lu, tmr, Scope::AllSets);
		pr_lun_reset(*lu);
		lu->medium_reset();
		lu->ua_add_all(UA_BUS_DEVICE_RESET);
		break;
	case TmfType::QueryTask:
		tmr->response =
		    task_exists(*lu, tmr, false) ? TmfResponse::Succeeded : TmfResponse::Complete;
		break;
	case TmfType::QueryTaskSet:
		tmr->response =
		    task_exists(*lu, tmr, true) ? TmfResponse::Succeeded : TmfResponse::Complete;
		break;
	case TmfType::QueryAsyncEvent:
		tmr->response =
		    lu->ua_pending(s->id()) ? TmfResponse::Succeeded : TmfResponse::Complete;
		break;
	default:
		tmr->response = TmfResponse::NotSupported;
		break;
	}
	tmr_put(tmr);
}

} // namespace ulp::scsi
