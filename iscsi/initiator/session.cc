// SPDX-License-Identifier: MIT
// iscsi/initiator/session.cc - the iSCSI initiator session (see initiator.h): login over a
// transport, the full feature phase (commands, data, status, TMF, NOP, Async, Reject) and
// logout.
#include "iscsi/initiator/session.h"

#include "core/log.h"

#include "core/crc32c.h"
#include "iscsi/initiator/task.h"

#include <algorithm>
#include <cassert>
#include <cerrno>
#include <cstring>

namespace ulp::iscsi::initiator
{

using clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

namespace
{

constexpr milliseconds kTimerPeriod{50}; // how often timers are looked at

// Logout reasons and responses (11.14.1, 11.15.1).
constexpr uint8_t kLogoutCloseSession = 0;

} // namespace

// ---------------------------------------------------------------------------------------------
// Names and defaults

const char *session_state_name(SessionState s)
{
	switch (s) {
	case SessionState::Idle:
		return "idle";
	case SessionState::LoggingIn:
		return "logging in";
	case SessionState::FullFeature:
		return "full feature";
	case SessionState::LoggingOut:
		return "logging out";
	case SessionState::Closed:
		return "closed";
	case SessionState::Failed:
		return "failed";
	}
	return "?";
}

const char *task_outcome_name(TaskOutcome o)
{
	switch (o) {
	case TaskOutcome::Completed:
		return "completed";
	case TaskOutcome::Aborted:
		return "aborted";
	case TaskOutcome::Rejected:
		return "rejected";
	case TaskOutcome::ConnectionLost:
		return "connection lost";
	case TaskOutcome::Timeout:
		return "timed out";
	case TaskOutcome::Cancelled:
		return "cancelled";
	}
	return "?";
}

OperationalPrefs InitiatorConfig::default_prefs()
{
	OperationalPrefs p;
	p.max_recv_dsl = 262144;
	p.max_burst_length = 1u << 20;
	p.first_burst_length = 65536;
	p.immediate_data = true;
	p.initial_r2t = false;
	p.max_outstanding_r2t = 1;
	return p;
}

// ---------------------------------------------------------------------------------------------
// Task slots

Session::Session(InitiatorConfig cfg, TransportFactory make)
    : cfg_(std::move(cfg)), make_tp_(std::move(make))
{
	cfg_.max_tasks = std::clamp<uint32_t>(cfg_.max_tasks, 4, kMaxSlots);
	if (!make_tp_) {
		const uint32_t cap = std::max(cfg_.prefs.max_recv_dsl, kDefaultMrdsl);
		make_tp_ = [cap] { return make_tcp_transport(cap); };
	}
}

Session::~Session()
{
	if (tp_)
		tp_->close();
}

uint32_t Session::itt_of(const Task *t) const
{
	return uint32_t{t->gen} << kSlotBits | t->slot;
}

Session::Task *Session::alloc_task(Kind k)
{
	Task *t;
	if (!free_slots_.empty()) {
		t = tasks_[free_slots_.back()].get();
		free_slots_.pop_back();
	} else if (tasks_.size() < cfg_.max_tasks) {
		tasks_.push_back(std::make_unique<Task>());
		t = tasks_.back().get();
		t->slot = static_cast<uint32_t>(tasks_.size() - 1);
	} else {
		why_ = "no free task slot (max_tasks " + std::to_string(cfg_.max_tasks) + ")";
		return nullptr;
	}
	const uint32_t slot = t->slot;
	const uint16_t gen = static_cast<uint16_t>(t->gen + 1);
	*t = Task{};
	t->slot = slot;
	t->gen = gen;
	t->kind = k;
	t->start = clock::now();
	return t;
}

Session::Task *Session::find_task(uint32_t itt)
{
	const uint32_t slot = itt & kMaxSlots;
	if (itt == kReservedTag || slot >= tasks_.size())
		return nullptr;
	Task *t = tasks_[slot].get();
	if (t->kind == Kind::Free || t->gen != itt >> kSlotBits)
		return nullptr;
	return t;
}

void Session::free_task(Task *t)
{
	t->kind = Kind::Free;
	t->done = nullptr;
	t->tmf_done = nullptr;
	t->ping_done = nullptr;
	t->data = {};
	free_slots_.push_back(t->slot);
}

// ---------------------------------------------------------------------------------------------
// Sending

TxPdu *Session::new_pdu(Task *t)
{
	TxPdu *p;
	if (pdu_free_.empty()) {
		pdu_pool_.push_back(std::make_unique<TxPdu>());
		p = pdu_pool_.back().get();
	} else {
		p = pdu_free_.back();
		pdu_free_.pop_back();
	}
	p->hdr_len = 0;
	p->data = {};
	p->own.clear();
	p->trailer_len = 0;
	p->slot = t ? t->slot : kReservedTag;
	p->ends_r2t = false;
	p->sent = 0;
	if (t)
		t->tx_refs++;
	return p;
}

void Session::send_pdu(TxPdu *p, std::span<const uint8_t, kBhsLen> bhs,
                       std::span<const uint8_t> ahs)
{
	const auto dsl = static_cast<uint32_t>(p->data.size());
	p->hdr_len = static_cast<uint16_t>(build_header(p->hdr, bhs, ahs, dsl, digests_.header));
	uint32_t crc = kCrc32cInit;
	if (digests_.data && dsl)
		crc = crc32c_update(crc, p->data);
	p->trailer_len = static_cast<uint8_t>(build_trailer(p->trailer, dsl, crc, digests_.data));
	pdus_out_++;
	tp_->queue(p);
}

void Session::on_data_released(uint32_t itt)
{
	Task *t = find_task(itt);
	if (!t || !t->mapped)
		return;
	t->mapped = false;
	t->tx_refs--;
	finish_if_done(t);
	issue_pending(); // its MR is free for a waiting command
}

void Session::on_sent(TxPdu *p, bool sent)
{
	pdus_out_--;
	Task *t = p->slot < tasks_.size() ? tasks_[p->slot].get() : nullptr;
	const bool ends_r2t = p->ends_r2t;
	p->data = {};
	p->own.clear();
	pdu_free_.push_back(p);
	if (!t || t->kind == Kind::Free || t->tx_refs == 0)
		return;
	t->tx_refs--;
	// 11.8 (MaxOutstandingR2T): an R2T is outstanding until its last Data-Out is sent.
	if (ends_r2t && t->r2ts_open)
		t->r2ts_open--;
	finish_if_done(t);
}

bool Session::window_open() const
{
	// 3.2.2.1: non-immediate commands with CmdSN up to MaxCmdSN may go out.
	return sn_le(cmdsn_, max_cmdsn_);
}

void Session::issue_pending()
{
	while (!pending_.empty() && state_ == SessionState::FullFeature && window_open()) {
		Task *t = tasks_[pending_.front()].get();
		if (t->kind == Kind::Scsi && !send_cmd(t))
			return; // the transport has no room for its data yet (on_data_released)
		pending_.pop_front();
		if (t->kind == Kind::Text)
			send_text(t, t->text_ttt);
	}
}

bool Session::send_cmd(Task *t)
{
	const uint32_t edtl = static_cast<uint32_t>(t->data.size());
	const bool write = t->dir == DataDir::Write;
	ScsiCmd h;
	h.read = t->dir == DataDir::Read;
	h.write = write;
	h.attr = static_cast<uint8_t>(t->attr);
	h.lun = lun_field(t->lun);
	h.itt = itt_of(t);
	h.edtl = edtl;
	std::memcpy(h.cdb.data(), t->cdb.data(), std::min<size_t>(16, t->cdb_len));
	// 11.3.1 / 13.11 / 13.13 / 13.14: immediate data when ImmediateData=Yes, unsolicited
	// Data-Out when InitialR2T=No; both together at most FirstBurstLength, each PDU at most
	// the target's MaxRecvDataSegmentLength.
	uint32_t imm = 0, unsol = 0;
	if (write) {
		const uint32_t first = std::min(sparams_.first_burst_length, edtl);
		if (sparams_.immediate_data)
			imm = std::min(first, send_dsl_);
		unsol = sparams_.initial_r2t ? imm : first;
	}
	// iSER (RFC 7145 7.3.1): the buffer is registered before the command goes out, and
	// its STag travels in the command's iSER header. No room now: the command waits. A
	// write whose data all goes with the command (immediate data and unsolicited Data-Out,
	// which the transport copies into its send buffers) leaves nothing for the target to
	// RDMA READ: no registration, no Write STag (WSV 0), and no invalidation after the
	// response - the registration, its REG_MR and the remote invalidation were most of an
	// iSER initiator's work per small write.
	const bool rdma_moves = t->dir == DataDir::Read || unsol < t->data.size();
	if (tp_->rdma_data() && t->dir != DataDir::None && rdma_moves) {
		if (!tp_->can_map())
			return false;
		const int rc = tp_->map_data(itt_of(t), t->dir, t->data, unsol);
		if (rc == -EAGAIN)
			return false;
		if (rc < 0) {
			fail(std::string("cannot register a command's data buffer: ") +
			     std::strerror(-rc));
			return true;
		}
		t->mapped = true;
		t->tx_refs++; // released by on_data_released
	}
	// The CmdSN is taken only now that the command surely goes out: a number taken by a
	// command that then waits would leave a gap the target waits on forever.
	h.cmdsn = cmdsn_++;
	h.exp_statsn = exp_statsn_;
	h.final = unsol == imm; // F: no unsolicited Data-Out follows
	t->cmdsn = h.cmdsn;
	t->seq = ++seq_;
	t->sent = true;
	sent_live_++;
	t->unsol_len = unsol;
	t->start = clock::now();
	Bhs b;
	encode(h, b);
	uint8_t ahs[kMaxAhsLen];
	size_t ahs_len = 0;
	if (t->cdb_len > 16)
		ahs_len = build_ext_cdb_ahs(ahs, {t->cdb.data(), t->cdb_len});
	TxPdu *p = new_pdu(t);
	p->data = t->data.first(imm);
	send_pdu(p, b, {ahs, ahs_len});
	stats_.cmds++;
	stats_.immediate_bytes += imm;
	if (unsol > imm)
		send_unsolicited(t, imm);
	return true;
}

void Session::send_unsolicited(Task *t, uint32_t from)
{
	// 11.7: unsolicited Data-Out carry TTT 0xffffffff, DataSN from 0, F on the last.
	uint32_t datasn = 0;
	for (uint32_t off = from; off < t->unsol_len;) {
		const uint32_t n = std::min(send_dsl_, t->unsol_len - off);
		DataOut h;
		h.final = off + n == t->unsol_len;
		h.lun = lun_field(t->lun);
		h.itt = itt_of(t);
		h.ttt = kReservedTag;
		h.exp_statsn = exp_statsn_;
		h.datasn = datasn++;
		h.buffer_offset = off;
		Bhs b;
		encode(h, b);
		TxPdu *p = new_pdu(t);
		p->data = t->data.subspan(off, n);
		send_pdu(p, b);
		stats_.unsol_pdus++;
		off += n;
	}
}

void Session::send_data_out(Task *t, uint32_t ttt, uint32_t offset, uint32_t len)
{
	// 11.7: the Data-Out answering one R2T: its TTT, DataSN from 0, F on the last.
	uint32_t datasn = 0;
	const uint32_t end = offset + len;
	for (uint32_t off = offset; off < end;) {
		const uint32_t n = std::min(send_dsl_, end - off);
		DataOut h;
		h.final = off + n == end;
		h.lun = lun_field(t->lun);
		h.itt = itt_of(t);
		h.ttt = ttt;
		h.exp_statsn = exp_statsn_;
		h.datasn = datasn++;
		h.buffer_offset = off;
		Bhs b;
		encode(h, b);
		TxPdu *p = new_pdu(t);
		p->data = t->data.subspan(off, n);
		p->ends_r2t = h.final;
		send_pdu(p, b);
		stats_.data_out_pdus++;
		off += n;
	}
	t->solicited += len;
}

void Session::send_nop_reply(const NopIn &in)
{
	// 11.18: the answer to a target's ping: ITT reserved, its TTT and LUN copied,
	// immediate, CmdSN not advanced.
	NopOut h;
	h.immediate = true;
	h.lun = in.lun;
	h.itt = kReservedTag;
	h.ttt = in.ttt;
	h.cmdsn = cmdsn_;
	h.exp_statsn = exp_statsn_;
	Bhs b;
	encode(h, b);
	send_pdu(new_pdu(nullptr), b);
	stats_.nop_in_pings++;
}

void Session::send_filler(uint32_t cmdsn)
{
	// 7.2: the CmdSN of a rejected non-immediate command was not received; a
	// non-immediate NOP-Out with that CmdSN fills the gap so later commands can run.
	Task *t = alloc_task(Kind::Filler);
	if (!t) {
		fail("no task slot to fill the CmdSN gap of a rejected command");
		return;
	}
	NopOut h;
	h.immediate = false;
	h.itt = itt_of(t);
	h.ttt = kReservedTag;
	h.cmdsn = cmdsn;
	h.exp_statsn = exp_statsn_;
	Bhs b;
	encode(h, b);
	t->sent = true;
	send_pdu(new_pdu(t), b);
}

uint32_t Session::task_mgmt(TmfFunction fn, uint64_t lun, uint32_t ref_itt, TmfDone done)
{
	if (state_ != SessionState::FullFeature || sparams_.type != SessionType::Normal) {
		why_ = "task management needs a normal session in full feature phase";
		return kReservedTag;
	}
	Task *t = alloc_task(Kind::Tmf);
	if (!t)
		return kReservedTag;
	t->user = true;
	in_flight_++;
	t->fn = fn;
	t->lun = lun;
	t->ref_itt = ref_itt;
	t->tmf_done = std::move(done);
	const bool by_task = fn == TmfFunction::AbortTask || fn == TmfFunction::QueryTask;
	Task *ref = by_task ? find_task(ref_itt) : nullptr;
	if (ref && (ref->kind != Kind::Scsi || ref->finished))
		ref = nullptr;
	if (fn == TmfFunction::AbortTask && ref && !ref->sent) {
		// Still waiting for the window: the target never saw it; abort it here.
		pending_.erase(std::find(pending_.begin(), pending_.end(), ref->slot));
		complete_scsi(ref, TaskOutcome::Aborted);
		t->tmf_result.response = TmfResponse::Complete;
		complete(t, TaskOutcome::Completed);
		return itt_of(t);
	}
	// 11.5: TMF requests go immediate; RefCmdSN is the referenced task's CmdSN (ABORT
	// TASK), else our current CmdSN.
	TmfReq h;
	h.immediate = true;
	h.function = static_cast<uint8_t>(fn);
	h.lun = lun_field(lun);
	h.itt = itt_of(t);
	h.rtt = by_task ? ref_itt : kReservedTag;
	h.cmdsn = cmdsn_;
	h.exp_statsn = exp_statsn_;
	h.ref_cmdsn = ref ? ref->cmdsn : cmdsn_;
	Bhs b;
	encode(h, b);
	t->sent = true;
	t->cmdsn = cmdsn_;
	t->seq = ++seq_;
	send_pdu(new_pdu(t), b);
	return itt_of(t);
}

uint32_t Session::ping(std::span<const uint8_t> data, PingDone done)
{
	if (state_ != SessionState::FullFeature) {
		why_ = "not in full feature phase";
		return kReservedTag;
	}
	if (data.size() > send_dsl_) {
		why_ = "ping data longer than the target's MaxRecvDataSegmentLength";
		return kReservedTag;
	}
	Task *t = alloc_task(Kind::Ping);
	if (!t)
		return kReservedTag;
	t->user = static_cast<bool>(done);
	if (t->user)
		in_flight_++;
	t->ping_data.assign(data.begin(), data.end());
	t->ping_done = std::move(done);
	// 11.18: a ping asks for an answer (valid ITT, TTT reserved); immediate so that it
	// is not held behind a closed window.
	NopOut h;
	h.immediate = true;
	h.itt = itt_of(t);
	h.ttt = kReservedTag;
	h.cmdsn = cmdsn_;
	h.exp_statsn = exp_statsn_;
	Bhs b;
	encode(h, b);
	TxPdu *p = new_pdu(t);
	p->own = t->ping_data;
	p->data = p->own;
	t->sent = true;
	send_pdu(p, b);
	return itt_of(t);
}

uint32_t Session::submit(const ScsiRequest &req, ScsiDone done)
{
	if (state_ != SessionState::FullFeature || target_logout_) {
		why_ = target_logout_ ? "the target asked for a logout"
		                      : std::string("session is ") + session_state_name(state_);
		return kReservedTag;
	}
	if (sparams_.type != SessionType::Normal) {
		why_ = "SCSI commands need a normal session";
		return kReservedTag;
	}
	if (req.cdb.empty() || req.cdb.size() > 260) {
		why_ = "CDB must be 1..260 bytes";
		return kReservedTag;
	}
	if ((req.dir == DataDir::None) != req.data.empty() || req.data.size() > UINT32_MAX) {
		why_ = "data buffer does not match the direction";
		return kReservedTag;
	}
	if (const uint32_t cap = tp_->max_data_len(); cap && req.data.size() > cap) {
		why_ = "data buffer of " + std::to_string(req.data.size()) +
		       " bytes is larger than the transport maps for one command (" +
		       std::to_string(cap) + ")";
		return kReservedTag;
	}
	Task *t = alloc_task(Kind::Scsi);
	if (!t)
		return kReservedTag;
	t->user = true;
	in_flight_++;
	t->lun = req.lun;
	std::memcpy(t->cdb.data(), req.cdb.data(), req.cdb.size());
	t->cdb_len = static_cast<uint16_t>(req.cdb.size());
	t->dir = req.dir;
	t->data = req.data;
	t->attr = req.attr;
	t->done = std::move(done);
	if (pending_.empty() && window_open() && send_cmd(t)) {
		// sent
	} else {
		pending_.push_back(t->slot);
		stats_.window_waits++;
	}
	return itt_of(t);
}

// ---------------------------------------------------------------------------------------------
// Completion

void Session::complete_scsi(Task *t, TaskOutcome o)
{
	if (o != TaskOutcome::Completed)
		t->result.data_in = t->in_bytes;
	complete(t, o);
}

void Session::complete(Task *t, TaskOutcome o)
{
	if (t->finished)
		return;
	t->finished = true;
	t->finished_at = clock::now();
	t->outcome = o;
	if (t->sent && (t->kind == Kind::Scsi || t->kind == Kind::Text))
		sent_live_--;
	// iSER: the target's access to the buffer is revoked before the callback may hand
	// the buffer back (on_data_released drops the reference map_data took).
	if (t->mapped && tp_)
		tp_->unmap_data(itt_of(t));
	finish_if_done(t);
}

void Session::maybe_probe_window()
{
	if (cfg_.window_probe && state_ == SessionState::FullFeature && !pending_.empty() &&
	    !window_open() && sent_live_ == 0 && keepalive_itt_ == kReservedTag)
		keepalive_itt_ = ping({}, {});
}

void Session::finish_if_done(Task *t)
{
	// A command's callback waits until the transport has given back every PDU that
	// points into its buffer (the caller frees or reuses it in the callback).
	if (!t->finished || t->tx_refs || t->queued_done)
		return;
	t->queued_done = true;
	done_.push_back(t->slot);
}

void Session::deliver(Task *t)
{
	const bool user = t->user;
	// The callback and the result are taken out before the slot is freed: the callback
	// may submit again and reuse it.
	auto hand_back = [&](auto cb, auto r) {
		r.outcome = t->outcome;
		free_task(t);
		if (user)
			in_flight_--;
		if (cb)
			cb(r);
	};
	switch (t->kind) {
	case Kind::Scsi:
		hand_back(std::move(t->done), t->result);
		return;
	case Kind::Tmf:
		hand_back(std::move(t->tmf_done), t->tmf_result);
		return;
	case Kind::Ping:
		hand_back(std::move(t->ping_done), t->ping_result);
		return;
	case Kind::Text:
		// send_targets() reads the outcome and frees the slot itself.
		t->text_ok = t->outcome == TaskOutcome::Completed && t->text_ok;
		return;
	default:
		free_task(t);
		return;
	}
}

// ---------------------------------------------------------------------------------------------
// Polling, timers, teardown

int Session::poll(milliseconds timeout)
{
	if (polling_) {
		why_ = "poll() called from a callback";
		return -1;
	}
	polling_ = true;
	const auto deadline = clock::now() + timeout;
	int delivered = 0;
	bool internal = false; // an internal exchange (text, logout) finished
	for (;;) {
		// Callbacks due (they may submit more, which goes out with the next I/O).
		while (!done_.empty()) {
			std::vector<uint32_t> due;
			due.swap(done_);
			for (uint32_t slot : due) {
				Task *t = tasks_[slot].get();
				t->queued_done = false;
				const bool counted = t->user; // the owner's callbacks
				deliver(t);
				delivered += counted;
				internal |= !counted;
			}
		}
		if (delivered || internal)
			break;
		const bool alive =
		    state_ == SessionState::FullFeature || state_ == SessionState::LoggingOut;
		if (!alive)
			break;
		// A logout the target asked for goes out once nothing is in flight.
		if (target_logout_ && state_ == SessionState::FullFeature && in_flight_ == 0) {
			start_logout();
			continue;
		}
		const auto now = clock::now();
		if (now >= next_timer_check_) {
			check_timers();
			next_timer_check_ = now + kTimerPeriod;
			if (!done_.empty())
				continue;
		}
		if (now >= deadline && delivered == 0 && timeout.count() > 0)
			break;
		auto wait = std::min(std::chrono::ceil<milliseconds>(deadline - now),
		                     std::chrono::ceil<milliseconds>(next_timer_check_ - now));
		wait = std::max(wait, milliseconds(0));
		if (!tp_->poll(wait))
			fail(tp_->why());
		if (timeout.count() == 0 && done_.empty())
			break;
	}
	polling_ = false;
	if (delivered == 0 && done_.empty() &&
	    (state_ == SessionState::Closed || state_ == SessionState::Failed))
		return -1;
	return delivered;
}

void Session::check_timers()
{
	if (state_ != SessionState::FullFeature && state_ != SessionState::LoggingOut)
		return;
	const auto now = clock::now();
	// Every task, queued or sent, has cmd_timeout to be answered (a window that never
	// opens is a target that stopped working too). Fillers wait as long as they must.
	for (auto &up : tasks_) {
		Task *t = up.get();
		if (t->kind == Kind::Free)
			continue;
		if (t->finished) {
			// Answered, but a PDU of it (or its data registration) is still with the
			// transport: a send completion that never came (iSER). Only a closed
			// connection surely gives it back (transport.h), so one that holds it
			// longer than a command may take is failed, never waited on for ever; the
			// caller recovers with a new login (ERL 0).
			if (t->tx_refs && !t->queued_done &&
			    now - t->finished_at > cfg_.cmd_timeout) {
				const std::string why =
				    "ITT " + std::to_string(itt_of(t)) + " answered, but " +
				    std::to_string(t->tx_refs) +
				    " of its PDUs or registrations still with the transport "
				    "after " +
				    std::to_string(cfg_.cmd_timeout.count()) + " ms";
				ULP_LOG(Warn, Iscsi, "{}: failing the connection", why);
				fail(why);
				return;
			}
			continue;
		}
		if (t->kind == Kind::Filler)
			continue;
		if (now - t->start > cfg_.cmd_timeout) {
			if (t->kind == Kind::Ping && itt_of(t) == keepalive_itt_)
				continue; // nop_timeout below
			complete(t, TaskOutcome::Timeout);
			fail("no answer from the target within " +
			     std::to_string(cfg_.cmd_timeout.count()) + " ms (ITT " +
			     std::to_string(itt_of(t)) + ")");
			return;
		}
	}
	if (state_ != SessionState::FullFeature)
		return;
	if (keepalive_itt_ != kReservedTag) {
		Task *k = find_task(keepalive_itt_);
		if (!k || k->finished) {
			keepalive_itt_ = kReservedTag;
		} else if (now - k->start > cfg_.nop_timeout) {
			fail("no answer to NOP-Out ping within " +
			     std::to_string(cfg_.nop_timeout.count()) + " ms");
		}
		return;
	}
	// Nothing heard for a while: make sure the target is still there (open-iscsi's
	// noop_out_interval). Commands held by a closed window with nothing in flight to
	// reopen it: ask for the window (the NOP-In carries MaxCmdSN).
	const bool idle = cfg_.nop_interval.count() > 0 && now - last_rx_ > cfg_.nop_interval;
	const bool stuck = cfg_.window_probe && !pending_.empty() && !window_open() &&
	                   now - last_rx_ >= kTimerPeriod;
	if (idle || stuck)
		keepalive_itt_ = ping({}, {});
}

void Session::start_logout()
{
	Task *t = alloc_task(Kind::Logout);
	if (!t) {
		fail("no task slot for the logout");
		return;
	}
	change_state(&state_, SessionState::LoggingOut, kSessionStates, this);
	// 11.14: Logout Request, immediate (as open-iscsi sends it), reason "close the
	// session"; CmdSN is the next one, not advanced.
	LogoutReq h;
	h.immediate = true;
	h.reason = kLogoutCloseSession;
	h.itt = itt_of(t);
	h.cid = cparams_.cid;
	h.cmdsn = cmdsn_;
	h.exp_statsn = exp_statsn_;
	Bhs b;
	encode(h, b);
	logout_itt_ = itt_of(t);
	t->sent = true;
	send_pdu(new_pdu(t), b);
}

bool Session::logout(milliseconds timeout)
{
	const auto deadline = clock::now() + timeout;
	if (state_ == SessionState::FullFeature) {
		// 11.14: no new commands; the ones in flight finish first (bounded).
		while (in_flight_ && state_ == SessionState::FullFeature && clock::now() < deadline)
			poll(std::chrono::ceil<milliseconds>(deadline - clock::now()));
		if (state_ == SessionState::FullFeature) {
			while (!pending_.empty()) {
				Task *x = tasks_[pending_.front()].get();
				pending_.pop_front();
				complete(x, TaskOutcome::Cancelled);
			}
			start_logout();
		}
	}
	while (state_ == SessionState::LoggingOut && clock::now() < deadline) {
		polling_ = true;
		if (!tp_->poll(std::chrono::ceil<milliseconds>(deadline - clock::now())))
			fail(tp_->why());
		polling_ = false;
	}
	if (state_ == SessionState::LoggingOut)
		fail("no Logout Response within " + std::to_string(timeout.count()) + " ms");
	// Deliver what the logout or failure completed.
	while (poll(milliseconds(0)) > 0) {
	}
	return state_ == SessionState::Closed && logout_ok_;
}

void Session::close(const std::string &why)
{
	fail(why);
}

void Session::fail(const std::string &why)
{
	if (state_ == SessionState::Failed || state_ == SessionState::Closed)
		return;
	change_state(&state_, SessionState::Failed, kSessionStates, this);
	error_ = why;
	ULP_LOG(Debug, Iscsi, "{}", "session failed: " + why); // the caller reports it
	if (tp_)
		tp_->close(); // gives back every queued PDU
	pending_.clear();
	for (auto &up : tasks_)
		if (up->kind != Kind::Free && !up->finished)
			complete(up.get(), TaskOutcome::ConnectionLost);
	keepalive_itt_ = kReservedTag;
}

// ---------------------------------------------------------------------------------------------
// Synchronous helpers

// Issue one task with a callback that fills its result, then poll until it is delivered,
// bounded by cmd_timeout (check_timers enforces it) plus a second for the delivery.
// kReservedTag from issue: Cancelled. Not delivered in time: ConnectionLost; with
// fail_late the session is failed first, which ends the task with that reason.
template <class Result, class Issue> Result Session::wait_for(Issue &&issue, bool fail_late)
{
	Result out;
	bool got = false;
	if (issue([&](const Result &r) {
		    out = r;
		    got = true;
	    }) == kReservedTag) {
		out.outcome = TaskOutcome::Cancelled;
		return out;
	}
	const auto deadline = clock::now() + cfg_.cmd_timeout + milliseconds(1000);
	while (!got && clock::now() < deadline)
		if (poll(milliseconds(100)) < 0)
			break;
	if (!got && fail_late) {
		fail("command did not complete in time");
		while (!got && poll(milliseconds(0)) > 0) {
		}
	}
	if (!got)
		out.outcome = TaskOutcome::ConnectionLost;
	return out;
}

ScsiResult Session::run(const ScsiRequest &req)
{
	return wait_for<ScsiResult>([&](ScsiDone done) { return submit(req, std::move(done)); },
	                            true);
}

TmfResult Session::task_mgmt_sync(TmfFunction fn, uint64_t lun, uint32_t ref_itt)
{
	return wait_for<TmfResult>(
	    [&](TmfDone done) { return task_mgmt(fn, lun, ref_itt, std::move(done)); }, false);
}

PingResult Session::ping_sync(std::span<const uint8_t> data)
{
	return wait_for<PingResult>([&](PingDone done) { return ping(data, std::move(done)); },
	                            false);
}

} // namespace ulp::iscsi::initiator
