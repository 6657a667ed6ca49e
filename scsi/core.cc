// SPDX-License-Identifier: MIT
// scsi/core.cc - a command's way through the target core (the kernel's
// target_core_transport.c): submit, data-out, task-set ordering, execution, completion
// and release.
//
// Locks: a command's part of its LU's task set (task_lock: the part's list and count, the
// command's state and aborted flag), or all parts at once (LogicalUnit::lock_.lock_all:
// the ordering state, ORDERED commands, waiting TMFs), and its session's lock (the
// session's command list). The I/O path of a SIMPLE command takes its own part only, so
// that workers share no lock; it takes all parts when ORDERED commands or TMFs
// are about. Never a task-set lock and the session's at once, never across a fabric
// callback, an execute function or a backstore submit.
#include "scsi/core.h"
#include "core/check.h"
#include "core/lock_assert.h"
#include "core/log.h"
#include "core/trace.h"
#include "scsi/core_internal.h"
#include "scsi/fabric.h"
#include "scsi/pr.h"
#include "scsi/stats.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

namespace ulp::scsi
{

// tmr.cc: a finished command no longer holds up the task management functions waiting
// for it; the ones it was the last for are appended to done. Under lu.lock_.lock_all.
void tmr_cmd_finished(LogicalUnit &lu, Cmd *cmd, std::vector<Tmr *> &done);

const char *cmd_state_str(CmdState s)
{
	switch (s) {
	case CmdState::New:
		return "new";
	case CmdState::Parsing:
		return "parsing";
	case CmdState::WritePending:
		return "write-pending";
	case CmdState::Dormant:
		return "dormant";
	case CmdState::Executing:
		return "executing";
	case CmdState::Complete:
		return "complete";
	case CmdState::Aborted:
		return "aborted";
	}
	return "?";
}

void cmd_init(Cmd *cmd)
{
	ULP_CHECK(!cmd->task_node.is_linked() && !cmd->dormant_node.is_linked() &&
	              !cmd->sess_node.is_linked(),
	          "cmd_init of a command still in a task set or session list");
	if (cmd->scratch && cmd->scratch_free)
		cmd->scratch_free(cmd->scratch);
	cmd->sess = nullptr;
	cmd->lun = 0;
	cmd->tag = 0;
	cmd->task_attr = TaskAttr::Simple;
	cmd->dir = DataDir::None;
	cmd->data_length = 0;
	cmd->sgl = {};
	cmd->cdb_len = 0;
	cmd->fabric_priv = nullptr;
	cmd->status = Status::Good;
	cmd->sense_len = 0;
	cmd->resid = Residual::None;
	cmd->resid_count = 0;
	cmd->xfer_len = 0;
	change_state(&cmd->state, CmdState::New, kCmdStates, cmd);
	cmd->lu = nullptr;
	cmd->lu_pin.store(nullptr, std::memory_order_relaxed);
	cmd->shard = 0;
	cmd->read_only = false;
	cmd->aborted = false;
	cmd->send_tas = false;
	cmd->counted = false;
	cmd->wp_returned = false;
	cmd->xport_failed = false;
	cmd->start_ns = 0;
	cmd->flags = 0;
	cmd->cdb_xfer = 0;
	cmd->sks = 0;
	cmd->cdb_dir = DataDir::None;
	cmd->lba = 0;
	cmd->nr_blocks = 0;
	cmd->execute = nullptr;
	cmd->refs.store(0, std::memory_order_relaxed);
	cmd->io = BsIo{};
	cmd->scratch = nullptr;
	cmd->scratch_free = nullptr;
}

namespace
{

void release(Cmd *cmd)
{
	Nexus *s = cmd->sess;
	Fabric &f = s->fabric(); // the fabric outlives its sessions; s may not outlive this
	if (cmd->scratch && cmd->scratch_free) {
		cmd->scratch_free(cmd->scratch);
		cmd->scratch = nullptr;
	}
	{
		std::lock_guard g(s->sess_lock_);
		s->cmds_.erase(s->cmds_.iterator_to(*cmd));
		if (s->cmds_.empty())
			s->idle_cv_.notify_all();
	}
	f.release_cmd(cmd);
}

void put(Cmd *cmd)
{
	if (cmd->refs.fetch_sub(1, std::memory_order_acq_rel) == 1)
		release(cmd);
}

// SAM-5 8.6 task attributes: may cmd start now? Counts it when it may. HEAD OF QUEUE starts
// at once; ORDERED waits for every older command; SIMPLE waits for older ORDERED ones (and
// for anything already waiting, so that order is kept).
enum class Start {
	Now,   // it may run (counted)
	Slow,  // ask again under lock_all (may_start)
	Abort, // a TMF or teardown aborted it: cmd_finish
};

// Under lu.lock_.lock_all: the whole rule. For HEAD OF QUEUE and SIMPLE, cmd's part of the
// task set is enough: they read only what changes under lock_all (ORDERED ones executing
// or waiting) and count themselves in their own part.
bool may_start(LogicalUnit &lu, Cmd *cmd)
{
	if (cmd->task_attr == TaskAttr::Ordered)
		ULP_ASSERT_HELD_ALL(lu.lock_);
	else
		ULP_ASSERT_HELD(task_lock(cmd));
	switch (cmd->task_attr) {
	case TaskAttr::HeadOfQueue:
		return true;
	case TaskAttr::Ordered:
		if (lu.simple_active() || lu.ordered_active_ || !lu.dormant_.empty())
			return false;
		lu.ordered_active_++;
		break;
	default:
		if (lu.ordered_active_ || !lu.dormant_.empty())
			return false;
		lu.task_shards_[cmd->shard].simple_active++;
		break;
	}
	cmd->counted = true;
	return true;
}

// Under lu.lock_.lock_all: move the dormant commands that may start now into run, in order.
void restart_dormant(LogicalUnit &lu, CmdDormantList &run)
{
	ULP_ASSERT_HELD_ALL(lu.lock_);
	while (!lu.dormant_.empty()) {
		Cmd &c = lu.dormant_.front();
		if (c.task_attr == TaskAttr::Ordered) {
			if (lu.simple_active() || lu.ordered_active_)
				break;
			lu.ordered_active_++;
		} else {
			if (lu.ordered_active_)
				break;
			lu.task_shards_[c.shard].simple_active++;
		}
		c.counted = true;
		change_state(&c.state, CmdState::Executing, kCmdStates, &c);
		lu.dormant_.pop_front();
		run.push_back(c);
		if (c.task_attr == TaskAttr::Ordered)
			break; // nothing after an ORDERED one starts before it ends
	}
}

// Under cmd's part of the task set (or lock_all; an ORDERED command's always): off the
// task set and its count, its state final. Whether it was aborted.
bool leave_task_set(LogicalUnit &lu, Cmd *cmd)
{
	if (cmd->task_attr == TaskAttr::Ordered)
		ULP_ASSERT_HELD_ALL(lu.lock_);
	else
		ULP_ASSERT_HELD(task_lock(cmd));
	const bool aborted = cmd->aborted;
	LogicalUnit::TaskShard &t = lu.task_shards_[cmd->shard];
	if (cmd->counted) {
		if (cmd->task_attr == TaskAttr::Ordered)
			lu.ordered_active_--;
		else if (cmd->task_attr != TaskAttr::HeadOfQueue)
			t.simple_active--;
		cmd->counted = false;
	}
	if (cmd->task_node.is_linked())
		t.tasks.erase(t.tasks.iterator_to(*cmd));
	ULP_CHECK(!cmd->dormant_node.is_linked());
	change_state(&cmd->state, aborted ? CmdState::Aborted : CmdState::Complete, kCmdStates,
	             cmd);
	return aborted;
}

void run_list(CmdDormantList &run)
{
	while (!run.empty()) {
		Cmd &c = run.front();
		run.pop_front();
		c.execute(&c);
	}
}

void set_residual(Cmd *cmd)
{
	if (cmd->xfer_len < cmd->data_length) {
		cmd->resid = Residual::Underflow;
		cmd->resid_count = cmd->data_length - cmd->xfer_len;
	} else if (cmd->cdb_xfer > cmd->data_length) {
		cmd->resid = Residual::Overflow;
		cmd->resid_count = cmd->cdb_xfer - cmd->data_length;
	} else {
		cmd->resid = Residual::None;
		cmd->resid_count = 0;
	}
}

} // namespace

// The command is answered (status set, or aborted): off the task set, let waiting ones
// start, tell the TMFs waiting for it, hand it to the fabric, drop the core's reference.
void cmd_finish(Cmd *cmd)
{
	LogicalUnit *lu = cmd->lu;
	CmdDormantList run;
	std::vector<Tmr *> tmrs; // allocates only when a TMF was waiting
	bool aborted;
	if (lu) {
		bool left = false;
		{
			// Nobody waiting behind ORDERED commands or for TMFs: this command's part
			// of the task set is all that changes. (Those lists change under every
			// part's lock, this one's included, so they stay empty while it is held.)
			std::lock_guard g(task_lock(cmd));
			if (cmd->task_attr != TaskAttr::Ordered && lu->dormant_.empty() &&
			    lu->tmr_waits_.empty()) {
				aborted = leave_task_set(*lu, cmd);
				left = true;
			}
		}
		if (!left) {
			ShardLockAll g(lu->lock_);
			aborted = leave_task_set(*lu, cmd);
			restart_dormant(*lu, run);
			if (!lu->tmr_waits_.empty())
				tmr_cmd_finished(*lu, cmd, tmrs);
		}
	} else {
		aborted = cmd->aborted;
		change_state(&cmd->state, aborted ? CmdState::Aborted : CmdState::Complete,
		             kCmdStates, cmd);
	}

	// Counted before the fabric sees it: an initiator that has its response finds it
	// in the statistics.
	const bool data_in = !aborted && cmd->status == Status::Good &&
	                     cmd->cdb_dir == DataDir::Read && cmd->dir == DataDir::Read &&
	                     cmd->xfer_len > 0;
	const uint64_t lat = stats_now_ns() - cmd->start_ns;
	cmd->sess->stats_.count_cmd(*cmd, aborted, data_in, lat);
	if (lu)
		lu->stats_.count_cmd(*cmd, aborted, data_in, lat);
	Fabric &f = cmd->sess->fabric();
	if (aborted && cmd->send_tas) {
		// SAM-5 5.6: TASK ABORTED to the other nexus whose task a TMF aborted.
		cmd->status = Status::TaskAborted;
		cmd->sense_len = 0;
		cmd->xfer_len = 0;
	}
	// Before the fabric sees it: its response probe (iscsi_rsp, srp_rsp) comes after.
	ULP_TRACE(scsi_cmd_done, cmd, unsigned(cmd->status), int(aborted), lat);
	if (aborted && !cmd->send_tas)
		f.aborted_task(cmd);
	else if (data_in) // never for an aborted command (data_in above)
		f.queue_data_in(cmd);
	else
		f.queue_status(cmd);
	for (Tmr *t : tmrs)
		tmr_respond(t);
	put(cmd);
	run_list(run);
}

namespace
{

// Data-out is in (or there is none): order against the task set, then run.
void start_exec(Cmd *cmd)
{
	LogicalUnit *lu = cmd->lu;
	if (!lu) {
		change_state(&cmd->state, CmdState::Executing, kCmdStates, cmd);
		cmd->execute(cmd);
		return;
	}
	Start st;
	{
		std::lock_guard g(task_lock(cmd));
		if (cmd->aborted)
			st = Start::Abort;
		else if (cmd->task_attr == TaskAttr::Ordered)
			st = Start::Slow;
		else
			st = may_start(*lu, cmd) ? Start::Now : Start::Slow;
		if (st == Start::Now)
			change_state(&cmd->state, CmdState::Executing, kCmdStates, cmd);
	}
	if (st == Start::Slow) {
		// A TMF may have aborted it between the two locks: it looks again.
		ShardLockAll g(lu->lock_);
		if (cmd->aborted) {
			st = Start::Abort;
		} else if (may_start(*lu, cmd)) {
			st = Start::Now;
			change_state(&cmd->state, CmdState::Executing, kCmdStates, cmd);
		} else {
			change_state(&cmd->state, CmdState::Dormant, kCmdStates, cmd);
			lu->dormant_.push_back(*cmd);
			return;
		}
	}
	if (st == Start::Abort) {
		cmd_finish(cmd);
		return;
	}
	cmd->execute(cmd);
}

// The transport's expected length against the CDB's (the kernel's target_cmd_size_check,
// and what libiscsi's iSCSIResiduals tests ask of targets). A block transfer moves the
// whole blocks both lengths allow and reports the difference as residual (SAM-5 5.4.2):
// a READ sends at most the expected length, a WRITE writes at most what the initiator
// sends, so nothing is written that the initiator did not mean. Anything else with data
// must match, and a length that ends inside a block is refused (the data would be torn).
Sense size_check(Cmd *cmd)
{
	if (cmd->cdb_xfer == 0) {
		cmd->xfer_len = 0;
		return Sense::None;
	}
	// A write CDB the transport announced as a read: its data cannot be fetched. (A read
	// CDB announced as a write runs, and sends no data-in: nobody waits for it. LIO does
	// the same; libiscsi's Read10Invalid expects GOOD.)
	if (cmd->cdb_dir == DataDir::Write && cmd->dir == DataDir::Read && cmd->data_length)
		return Sense::InvalidFieldInCommandIu;
	const uint32_t x = std::min(cmd->cdb_xfer, cmd->data_length);
	if (cmd->cdb_xfer != cmd->data_length) {
		if (cmd->flags & CMD_BLOCK_XFER) {
			if (cmd->cdb_dir == DataDir::Write && x % cmd->lu->block_size())
				return Sense::InvalidFieldInCommandIu;
		} else if (cmd->cdb_dir == DataDir::Write) {
			if (cmd->flags & CMD_DATA_CDB)
				return Sense::InvalidFieldInCommandIu;
			if (cmd->cdb_xfer > cmd->data_length)
				return Sense::InvalidCdbField; // a parameter list longer than what
				                               // comes
		}
	}
	cmd->xfer_len = x;
	if ((cmd->flags & CMD_BLOCK_XFER) && cmd->cdb_dir == DataDir::Write)
		cmd->nr_blocks = x / cmd->lu->block_size();
	return Sense::None;
}

Sense parse(Cmd *cmd)
{
	if (cmd->cdb_len < 6 || cmd->cdb_len > kMaxCdb)
		return Sense::InvalidFieldInCommandIu;
	if (cmd->task_attr == TaskAttr::Aca)
		return Sense::InvalidCdbField; // no ACA (NACA 0 in every control byte we accept)
	const uint8_t op = cmd->cdb[0];
	if (!cmd->lu && op != OP_INQUIRY && op != OP_REPORT_LUNS && op != OP_REQUEST_SENSE)
		return Sense::LunNotSupported;
	// SAM-5 5.2: NACA 1 in the CONTROL byte asks for an ACA condition on a CHECK CONDITION,
	// which this device server does not establish (standard INQUIRY says NormACA 0): the
	// command ends in INVALID FIELD IN CDB at that bit, whatever the fabric, before a unit
	// attention is reported or anything is done.
	constexpr uint8_t kControlNaca = 0x04;
	if (const int at = control_byte_offset(op);
	    at >= 0 && at < int(cmd->cdb_len) && (cmd->cdb[at] & kControlNaca))
		return invalid_cdb_field(cmd, uint16_t(at), 2);
	if (ua_check(cmd))
		return Sense::UnitAttention; // status and sense already set
	// SPC-4 5.15.2.4: the access state of the port it came through, for every fabric
	// (after the unit attention, which a standby port reports too; before the CDB's
	// fields are looked at, as a port that does not serve the command has no view on them).
	if (Sense r = alua_check(cmd); r != Sense::None)
		return r;
	if (Sense r = sbc_parse(cmd); r != Sense::None)
		return r;
	ULP_CHECK(cmd->execute, "opcode {:#04x} parsed without an execute step", cmd->cdb[0]);
	if (cmd->lu) {
		// An ejected removable medium (medium.cc): a well-formed command that needs it
		// is not ready.
		if (!cmd->lu->medium_present() && medium_needed(cmd))
			return Sense::MediumNotPresent;
		if (Sense r = pr_check(cmd); r != Sense::None)
			return r;
		// write_protected(): the configuration's read_only or the control mode
		// page's SWP, which MODE SELECT changes at run time (spc_mode.cc).
		if ((cmd->flags & CMD_WRITES_MEDIUM) &&
		    (cmd->lu->write_protected() || cmd->read_only))
			return Sense::WriteProtected;
	}
	return size_check(cmd);
}

} // namespace

namespace
{

// submit's work, under its own reference (see submit).
void submit_held(Cmd *cmd)
{
	Nexus *s = cmd->sess;
	bool stopping;
	{
		std::lock_guard g(s->sess_lock_);
		stopping = s->stopping_;
		s->cmds_.push_back(*cmd);
	}
	if (stopping) {
		// The session is being torn down: no new work, and no answer (the connection
		// that would carry it is going away). Started undecoded, so that a tracer
		// pairing starts with ends sees this one too.
		ULP_TRACE(scsi_cmd_start, cmd, unsigned(cmd->cdb[0]), cmd->lba, cmd->nr_blocks,
		          cmd->data_length);
		cmd->aborted = true;
		cmd_finish(cmd);
		return;
	}
	bool ro = false;
	cmd->lu = s->lookup_lun(cmd->lun, &ro, &cmd->lu_pin);
	cmd->read_only = ro;

	Sense r = parse(cmd);
	// Decoded (or refused: then lba and blocks are what parsing got to, mostly 0).
	ULP_TRACE(scsi_cmd_start, cmd, unsigned(cmd->cdb[0]), cmd->lba, cmd->nr_blocks,
	          cmd->data_length);
	if (r == Sense::UnitAttention) {
		set_residual(cmd);
		cmd_finish(cmd);
		return;
	}
	if (r != Sense::None) {
		// Refused before moving anything: the residual still compares the two lengths
		// (SAM-5 5.4.2; libiscsi's iSCSIResiduals check it on CHECK CONDITION too).
		cmd->xfer_len = 0;
		if (cmd->cdb_xfer > cmd->data_length) {
			cmd->resid = Residual::Overflow;
			cmd->resid_count = cmd->cdb_xfer - cmd->data_length;
		} else if (cmd->cdb_xfer < cmd->data_length) {
			cmd->resid = Residual::Underflow;
			cmd->resid_count = cmd->data_length - cmd->cdb_xfer;
		}
		complete_sense(cmd, r);
		return;
	}
	set_residual(cmd);

	const bool data_out = cmd->cdb_dir == DataDir::Write && cmd->xfer_len > 0;
	if (LogicalUnit *lu = cmd->lu) {
		std::lock_guard g(task_lock(cmd));
		lu->task_shards_[cmd->shard].tasks.push_back(*cmd);
		if (data_out)
			change_state(&cmd->state, CmdState::WritePending, kCmdStates, cmd);
	} else if (data_out) {
		change_state(&cmd->state, CmdState::WritePending, kCmdStates, cmd);
	}
	if (!data_out) {
		start_exec(cmd);
		return;
	}
	Fabric &f = s->fabric();
	f.write_pending(cmd);
	// A TMF that aborted cmd before write_pending returned left abort_write to us.
	bool stop = false;
	if (cmd->lu) {
		std::lock_guard g(task_lock(cmd));
		cmd->wp_returned = true;
		stop = cmd->aborted && cmd->state == CmdState::WritePending;
	}
	if (stop)
		f.abort_write(cmd);
}

} // namespace

void submit(Cmd *cmd)
{
	ULP_CHECK(cmd->state == CmdState::New && cmd->sess, "submit of a {} command{}",
	          cmd_state_str(cmd->state), cmd->sess ? "" : " without a nexus");
	// The fabric's reference, the core's, and one for submit itself: a fabric may answer
	// write_pending, queue_status and cmd_put before the call that caused them returns,
	// and submit still looks at cmd afterwards.
	cmd->refs.store(3, std::memory_order_relaxed);
	cmd->start_ns = stats_now_ns();
	cmd->shard = static_cast<uint8_t>(this_shard());
	change_state(&cmd->state, CmdState::Parsing, kCmdStates, cmd);
	submit_held(cmd);
	put(cmd);
}

void write_done(Cmd *cmd, bool ok)
{
	if (cmd->lu) {
		std::unique_lock g(task_lock(cmd));
		if (cmd->state != CmdState::WritePending) {
			ULP_LOG_RATELIMITED(
			    Error, Scsi, "write_done on a {} command (tag {:x}), ignored",
			    cmd_state_str(cmd->state), (unsigned long long)cmd->tag);
			return;
		}
		// between data-out and ordering
		change_state(&cmd->state, CmdState::Parsing, kCmdStates, cmd);
		if (cmd->aborted) {
			g.unlock();
			cmd_finish(cmd);
			return;
		}
	}
	if (!ok) {
		cmd->xport_failed = true;
		complete_sense(cmd, Sense::DataPhaseError);
		return;
	}
	start_exec(cmd);
}

void cmd_put(Cmd *cmd)
{
	put(cmd);
}

// ---- Completion helpers (core_internal.h) --------------------------------------------------

void complete_good(Cmd *cmd)
{
	cmd->status = Status::Good;
	cmd->sense_len = 0;
	set_residual(cmd);
	cmd_finish(cmd);
}

void complete_sense(Cmd *cmd, Sense s, bool info_valid, uint32_t info)
{
	cmd->status = sense_status(s);
	// The field pointer belongs to the reason the parse function gave with it.
	const uint32_t sks = s == Sense::InvalidCdbField ? cmd->sks : 0;
	cmd->sense_len = build_sense(s, cmd->sense, 0, info_valid, info, sks);
	cmd_finish(cmd);
}

void exec_good(Cmd *cmd)
{
	complete_good(cmd);
}

void flush_done(BsIo *io, int err)
{
	auto *cmd = static_cast<Cmd *>(io->priv);
	if (err < 0)
		complete_sense(cmd, errno_sense(err, true));
	else
		complete_good(cmd);
}

void complete_data_in(Cmd *cmd, std::span<const uint8_t> data)
{
	size_t n = std::min<size_t>(data.size(), cmd->xfer_len);
	cmd->xfer_len = static_cast<uint32_t>(sgl_copy_in(cmd, 0, data.data(), n));
	complete_good(cmd);
}

Sense errno_sense(int err, bool write)
{
	switch (err) {
	case -EIO:
	case -ENODATA:
		return write ? Sense::WriteError : Sense::ReadError;
	case -ENOSPC:
		return Sense::SpaceAllocationFailed;
	case -EROFS:
		return Sense::WriteProtected;
	case -ENOMEM:
		return Sense::InsufficientResources;
	case -ERANGE:
		// Checked against the capacity at parse time, but the LU shrank since
		// (LogicalUnit::set_capacity): as the same command arriving now would be told.
		return Sense::LbaOutOfRange;
	case -ESHUTDOWN:
		// Fenced off the storage (Backstore's contract): this port can no longer reach the
		// LU, SPC-4 5.15.2.6's unavailable state, which multipath retries elsewhere.
		return Sense::AluaUnavailable;
	case -ENOLCK:
		// The backstore's lock on the storage is elsewhere or on the move (an rbd image's
		// exclusive lock between gateways): SPC-4 5.15.2.6's transition, which the
		// initiator retries; the write did not land.
		return Sense::AluaTransitioning;
	case -ETIMEDOUT:
		// The storage did not answer in time (an OSD down or stuck): BUSY, without sense
		// (SAM-5 5.3.1), which initiators retry after a while; the medium is not known
		// bad, and the other LUs go on. A retried write writes the same data again; a
		// retried COMPARE AND WRITE whose write did land miscompares, as after any
		// transport failure.
		return Sense::Busy;
	default:
		return Sense::LogicalUnitFailure;
	}
}

size_t sgl_copy_out(const Cmd *cmd, size_t off, void *dst, size_t len)
{
	auto *d = static_cast<uint8_t *>(dst);
	size_t done = 0;
	for (const iovec &v : cmd->sgl) {
		if (done == len)
			break;
		if (off >= v.iov_len) {
			off -= v.iov_len;
			continue;
		}
		size_t n = std::min(v.iov_len - off, len - done);
		std::memcpy(d + done, static_cast<const uint8_t *>(v.iov_base) + off, n);
		done += n;
		off = 0;
	}
	return done;
}

size_t sgl_copy_in(Cmd *cmd, size_t off, const void *src, size_t len)
{
	auto *s = static_cast<const uint8_t *>(src);
	size_t done = 0;
	for (const iovec &v : cmd->sgl) {
		if (done == len)
			break;
		if (off >= v.iov_len) {
			off -= v.iov_len;
			continue;
		}
		size_t n = std::min(v.iov_len - off, len - done);
		std::memcpy(static_cast<uint8_t *>(v.iov_base) + off, s + done, n);
		done += n;
		off = 0;
	}
	return done;
}

std::span<const iovec> sgl_prefix(Cmd *cmd, size_t len)
{
	size_t k = 0, sum = 0;
	while (k < cmd->sgl.size() && sum < len)
		sum += cmd->sgl[k++].iov_len;
	if (sum < len)
		return {}; // the buffer is shorter than len: a caller bug, answered as such
	if (sum == len)
		return cmd->sgl.first(k); // ends on an entry boundary: use the list as it is
	if (k > std::size(cmd->io_iov))
		return {};
	std::copy_n(cmd->sgl.begin(), k, cmd->io_iov);
	cmd->io_iov[k - 1].iov_len -= sum - len;
	return {cmd->io_iov, k};
}

void bs_submit(Cmd *cmd, BsOp op, uint64_t offset, uint64_t len, std::span<const iovec> iov,
               bool fua, void (*done)(BsIo *, int), bool atomic)
{
	bs_submit_to(cmd, cmd->lu->bs(), op, offset, len, iov, fua, done, atomic);
}

void bs_submit_to(Cmd *cmd, Backstore &bs, BsOp op, uint64_t offset, uint64_t len,
                  std::span<const iovec> iov, bool fua, void (*done)(BsIo *, int), bool atomic)
{
	BsIo &io = cmd->io;
	io.op = op;
	io.fua = fua;
	io.atomic = atomic;
	io.offset = offset;
	io.length = len;
	io.iov = iov;
	io.miscompare = 0;
	io.done = done;
	io.priv = cmd;
	bs.submit(&io);
}

} // namespace ulp::scsi
