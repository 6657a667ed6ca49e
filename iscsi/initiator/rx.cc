// SPDX-License-Identifier: MIT
// iscsi/initiator/rx.cc - what the initiator session does with each PDU the target sends in
// the full feature phase (RFC 7143 section 11): SCSI Response, Data-In, R2T, NOP-In, Task
// Management Response, Text Response (initiator_text.cc), Logout Response, Async Message,
// Reject. Every field used is checked against what we sent; a target that breaks a rule
// fails the session (ERL 0).
#include "iscsi/initiator/session.h"

#include "core/log.h"
#include "iscsi/initiator/task.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

namespace ulp::iscsi::initiator
{

using clock = std::chrono::steady_clock;

// ---------------------------------------------------------------------------------------------
// Receiving

void Session::on_pdu(const Pdu &pdu, PduError err)
{
	last_rx_ = clock::now();
	if (state_ == SessionState::LoggingIn) {
		if (!login_) {
			fail("unexpected PDU during login");
			return;
		}
		if (err != PduError::None) {
			fail(std::string("bad PDU during login: ") + pdu_error_name(err));
			return;
		}
		login_->on_response(pdu);
		login_rsp_ = true;
		return;
	}
	if (state_ != SessionState::FullFeature && state_ != SessionState::LoggingOut)
		return;
	if (err == PduError::DataDigest) {
		// 7.8: a data digest error; at ERL 0 the data cannot be asked for again.
		fail(std::string("data digest error in a ") + "PDU with opcode 0x" +
		     std::to_string(pdu.bhs[0] & 0x3f));
		return;
	}
	if (err != PduError::None) {
		fail(std::string("bad PDU: ") + pdu_error_name(err));
		return;
	}
	if (tp_->rdma_data() && (pdu.opcode() == Opcode::DataIn || pdu.opcode() == Opcode::R2t)) {
		// RFC 7145 7.3: on iSER read data comes by RDMA WRITE and an R2T becomes the
		// target's RDMA READ; neither PDU exists on the connection.
		fail(std::string(pdu.opcode() == Opcode::DataIn ? "Data-In" : "R2T") +
		     " PDU on an iSER connection");
		return;
	}
	switch (pdu.opcode()) {
	case Opcode::ScsiRsp:
		on_scsi_rsp(pdu);
		break;
	case Opcode::DataIn:
		on_data_in(pdu);
		break;
	case Opcode::R2t:
		on_r2t(pdu);
		break;
	case Opcode::NopIn:
		on_nop_in(pdu);
		break;
	case Opcode::TmfRsp:
		on_tmf_rsp(pdu);
		break;
	case Opcode::TextRsp:
		on_text_rsp(pdu);
		break;
	case Opcode::LogoutRsp:
		on_logout_rsp(pdu);
		break;
	case Opcode::AsyncMsg:
		on_async_msg(pdu);
		break;
	case Opcode::Reject:
		on_reject(pdu);
		break;
	default: {
		char op[8];
		std::snprintf(op, sizeof(op), "0x%02x", pdu.bhs[0] & 0x3f);
		fail(std::string("unexpected opcode ") + op + " from the target");
		return;
	}
	}
	issue_pending();
	// A command's answer that leaves the window shut with nothing else in flight will be
	// followed by nothing (see window_probe): ask now rather than at the next timer tick.
	// Only answers to commands trigger this, so probes cannot feed each other.
	const Opcode op = pdu.opcode();
	if (op == Opcode::ScsiRsp || op == Opcode::DataIn || op == Opcode::TextRsp ||
	    op == Opcode::Reject)
		maybe_probe_window();
}

void Session::update_sn(uint32_t exp_cmdsn, uint32_t max_cmdsn)
{
	// 4.2.2.1: MaxCmdSN < ExpCmdSN - 1 makes both invalid; neither moves backwards.
	if (sn_lt(max_cmdsn, exp_cmdsn - 1))
		return;
	if (sn_lt(exp_cmdsn_, exp_cmdsn))
		exp_cmdsn_ = exp_cmdsn;
	if (sn_lt(max_cmdsn_, max_cmdsn))
		max_cmdsn_ = max_cmdsn;
}

void Session::take_statsn(uint32_t statsn)
{
	// 3.2.2.2: StatSN advances by one per status on a connection. At ERL 0 a gap is
	// not recoverable but not harmful either (the status itself arrived): count it, and
	// never move ExpStatSN back.
	if (statsn != exp_statsn_)
		stats_.statsn_gaps++;
	if (sn_le(exp_statsn_, statsn))
		exp_statsn_ = statsn + 1;
}

void Session::on_scsi_rsp(const Pdu &pdu)
{
	ScsiRsp h;
	decode(pdu.bhs, &h);
	take_statsn(h.statsn);
	update_sn(h.exp_cmdsn, h.max_cmdsn);
	Task *t = find_task(h.itt);
	if (!t || t->kind != Kind::Scsi || !t->sent) {
		fail("SCSI Response for no command of ours (ITT " + std::to_string(h.itt) + ")");
		return;
	}
	if (t->finished)
		return; // aborted here already; the late answer changes nothing
	ScsiResult &r = t->result;
	r.response = h.response;
	r.status = h.status;
	r.underflow = h.underflow;
	r.overflow = h.overflow;
	r.residual = h.residual;
	r.data_in = t->in_bytes;
	// 11.4.7: the data segment is SenseLength (2 bytes), sense data, response data.
	if (!pdu.data.empty()) {
		if (pdu.data.size() < 2) {
			fail("SCSI Response data segment shorter than its SenseLength field");
			return;
		}
		const uint16_t sl = get_be16(pdu.data.data());
		if (sl > pdu.data.size() - 2) {
			fail("SCSI Response SenseLength " + std::to_string(sl) +
			     " beyond its data segment");
			return;
		}
		r.sense_len = std::min<uint16_t>(sl, kMaxSense);
		std::memcpy(r.sense.data(), pdu.data.data() + 2, r.sense_len);
	}
	if (h.underflow && h.overflow) {
		fail("SCSI Response with both U and O set");
		return;
	}
	const auto edtl = static_cast<uint32_t>(t->data.size());
	if (tp_->rdma_data()) {
		// iSER (RFC 7145 7.3): the data moved by RDMA, before this response (RC
		// ordering); the residual is the only account of it.
		const uint32_t moved = h.underflow ? edtl - std::min(edtl, h.residual) : edtl;
		if (t->dir == DataDir::Read)
			t->in_bytes = r.data_in = moved;
		else if (t->dir == DataDir::Write)
			t->solicited = moved > t->unsol_len ? moved - t->unsol_len : 0;
	} else if (h.response == 0 && h.status == 0) {
		// A GOOD read must have moved every byte it claims (11.4.5: residuals), in
		// Data-In PDUs numbered 0..ExpDataSN-1 (11.4.8); a GOOD write every byte asked.
		const uint32_t moved = h.underflow ? edtl - std::min(edtl, h.residual) : edtl;
		if (t->dir == DataDir::Read) {
			if (h.exp_datasn != t->datasn_next) {
				fail("SCSI Response ExpDataSN " + std::to_string(h.exp_datasn) +
				     " but " + std::to_string(t->datasn_next) +
				     " Data-In received");
				return;
			}
			if (t->in_bytes != moved) {
				fail("read of " + std::to_string(edtl) +
				     " bytes answered GOOD with " + std::to_string(t->in_bytes) +
				     " bytes received, residual " + std::to_string(h.residual));
				return;
			}
		} else if (t->dir == DataDir::Write && !h.underflow &&
		           t->unsol_len + t->solicited < edtl) {
			fail("write answered GOOD after " +
			     std::to_string(t->unsol_len + t->solicited) + " of " +
			     std::to_string(edtl) + " bytes");
			return;
		}
	}
	complete_scsi(t, TaskOutcome::Completed);
}

void Session::on_data_in(const Pdu &pdu)
{
	DataIn h;
	decode(pdu.bhs, &h);
	update_sn(h.exp_cmdsn, h.max_cmdsn); // 11.7.4: valid in every Data-In
	stats_.data_in_pdus++;
	Task *t = find_task(h.itt);
	if (!t || t->kind != Kind::Scsi || !t->sent || t->dir != DataDir::Read) {
		fail("Data-In for no read command of ours (ITT " + std::to_string(h.itt) + ")");
		return;
	}
	if (h.has_status)
		take_statsn(h.statsn);
	if (t->finished)
		return;
	const auto edtl = static_cast<uint32_t>(t->data.size());
	const auto len = static_cast<uint32_t>(pdu.data.size());
	// 11.7.5: DataSN counts this command's Data-In from 0; 13.19 DataPDUInOrder=Yes: the
	// offsets follow each other.
	if (h.datasn != t->datasn_next) {
		fail("Data-In DataSN " + std::to_string(h.datasn) + ", expected " +
		     std::to_string(t->datasn_next));
		return;
	}
	if (h.buffer_offset != t->in_bytes) {
		fail("Data-In at offset " + std::to_string(h.buffer_offset) + ", expected " +
		     std::to_string(t->in_bytes));
		return;
	}
	if (len > edtl - t->in_bytes) {
		fail("Data-In beyond the read buffer (" + std::to_string(h.buffer_offset) + "+" +
		     std::to_string(len) + " > " + std::to_string(edtl) + ")");
		return;
	}
	std::memcpy(t->data.data() + h.buffer_offset, pdu.data.data(), len);
	t->in_bytes += len;
	t->datasn_next++;
	if (!h.has_status)
		return;
	// 11.7.4: status in the last Data-In (phase collapse); S needs F, and only a
	// status that is not an exception may come this way.
	if (!h.final) {
		fail("Data-In with S but without F");
		return;
	}
	if (h.underflow && h.overflow) {
		fail("Data-In with both U and O set");
		return;
	}
	ScsiResult &r = t->result;
	r.response = 0;
	r.status = h.status;
	r.underflow = h.underflow;
	r.overflow = h.overflow;
	r.residual = h.residual;
	r.data_in = t->in_bytes;
	const uint32_t moved = h.underflow ? edtl - std::min(edtl, h.residual) : edtl;
	if (h.status == 0 && t->in_bytes != moved) {
		fail("read of " + std::to_string(edtl) + " bytes ended GOOD with " +
		     std::to_string(t->in_bytes) + " bytes received, residual " +
		     std::to_string(h.residual));
		return;
	}
	stats_.collapsed++;
	complete_scsi(t, TaskOutcome::Completed);
}

void Session::on_r2t(const Pdu &pdu)
{
	R2t h;
	decode(pdu.bhs, &h);
	update_sn(h.exp_cmdsn, h.max_cmdsn);
	Task *t = find_task(h.itt);
	if (!t || t->kind != Kind::Scsi || !t->sent || t->dir != DataDir::Write) {
		fail("R2T for no write command of ours (ITT " + std::to_string(h.itt) + ")");
		return;
	}
	if (t->finished)
		return; // aborted: no more data for it
	const auto edtl = static_cast<uint32_t>(t->data.size());
	// 11.8: R2TSN in order from 0; a non-zero length inside the buffer, at most
	// MaxBurstLength (13.13), past the unsolicited data (ERL 0: nothing is re-asked), and
	// no more R2Ts outstanding than MaxOutstandingR2T (13.17).
	if (h.r2tsn != t->r2tsn_next) {
		fail("R2TSN " + std::to_string(h.r2tsn) + ", expected " +
		     std::to_string(t->r2tsn_next));
		return;
	}
	if (h.desired_len == 0 || h.desired_len > sparams_.max_burst_length ||
	    h.buffer_offset > edtl || h.desired_len > edtl - h.buffer_offset ||
	    h.buffer_offset < t->unsol_len) {
		fail("R2T for " + std::to_string(h.buffer_offset) + "+" +
		     std::to_string(h.desired_len) + " of a " + std::to_string(edtl) +
		     "-byte write (unsolicited " + std::to_string(t->unsol_len) +
		     ", MaxBurstLength " + std::to_string(sparams_.max_burst_length) + ")");
		return;
	}
	if (t->r2ts_open >= sparams_.max_outstanding_r2t) {
		fail("more R2Ts outstanding than MaxOutstandingR2T " +
		     std::to_string(sparams_.max_outstanding_r2t));
		return;
	}
	if (h.ttt == kReservedTag) {
		fail("R2T with the reserved Target Transfer Tag");
		return;
	}
	t->r2tsn_next++;
	t->r2ts_open++;
	stats_.r2ts++;
	send_data_out(t, h.ttt, h.buffer_offset, h.desired_len);
}

void Session::on_nop_in(const Pdu &pdu)
{
	NopIn h;
	decode(pdu.bhs, &h);
	update_sn(h.exp_cmdsn, h.max_cmdsn);
	if (h.itt == kReservedTag) {
		// 11.19: unsolicited; StatSN is not advanced. With a TTT it is a ping to answer;
		// without, only news of the window.
		if (h.ttt != kReservedTag)
			send_nop_reply(h);
		return;
	}
	take_statsn(h.statsn);
	Task *t = find_task(h.itt);
	if (!t || (t->kind != Kind::Ping && t->kind != Kind::Filler)) {
		fail("NOP-In for no ping of ours (ITT " + std::to_string(h.itt) + ")");
		return;
	}
	if (h.ttt != kReservedTag) {
		fail("NOP-In answering a ping carries a TTT");
		return;
	}
	if (t->kind == Kind::Filler) {
		complete(t, TaskOutcome::Completed);
		return;
	}
	// 11.19: the ping data comes back as it was sent.
	t->ping_result.data_ok =
	    std::equal(pdu.data.begin(), pdu.data.end(), t->ping_data.begin(), t->ping_data.end());
	t->ping_result.rtt = clock::now() - t->start;
	stats_.pings++;
	if (itt_of(t) == keepalive_itt_)
		keepalive_itt_ = kReservedTag;
	complete(t, TaskOutcome::Completed);
}

void Session::on_tmf_rsp(const Pdu &pdu)
{
	TmfRsp h;
	decode(pdu.bhs, &h);
	take_statsn(h.statsn);
	update_sn(h.exp_cmdsn, h.max_cmdsn);
	Task *t = find_task(h.itt);
	if (!t || t->kind != Kind::Tmf) {
		fail("Task Management Response for no request of ours");
		return;
	}
	stats_.tmfs++;
	t->tmf_result.response = static_cast<TmfResponse>(h.response);
	const bool done = h.response == static_cast<uint8_t>(TmfResponse::Complete);
	// 4.2.3.3 (task management): once the function is complete, the tasks it covered
	// that have not been answered will never be; they end here as Aborted. TCP keeps
	// order, so any answer the target sent before the TMF response has been seen.
	switch (t->fn) {
	case TmfFunction::AbortTask:
		if (done || h.response == static_cast<uint8_t>(TmfResponse::NoTask)) {
			Task *ref = find_task(t->ref_itt);
			if (ref && ref->kind == Kind::Scsi && !ref->finished && ref->seq < t->seq)
				complete_scsi(ref, TaskOutcome::Aborted);
		}
		break;
	case TmfFunction::AbortTaskSet:
	case TmfFunction::ClearTaskSet:
	case TmfFunction::LunReset:
		if (done)
			abort_tasks(t->lun, false, t->seq);
		break;
	case TmfFunction::TargetWarmReset:
	case TmfFunction::TargetColdReset:
	case TmfFunction::ITNexusReset:
		if (done)
			abort_tasks(0, true, t->seq);
		break;
	default:
		break;
	}
	complete(t, TaskOutcome::Completed);
}

void Session::abort_tasks(uint64_t lun, bool all_luns, uint64_t before_seq)
{
	for (auto &up : tasks_) {
		Task *x = up.get();
		if (x->kind == Kind::Scsi && x->sent && !x->finished && x->seq < before_seq &&
		    (all_luns || x->lun == lun))
			complete_scsi(x, TaskOutcome::Aborted);
	}
}

void Session::on_logout_rsp(const Pdu &pdu)
{
	LogoutRsp h;
	decode(pdu.bhs, &h);
	take_statsn(h.statsn);
	update_sn(h.exp_cmdsn, h.max_cmdsn);
	Task *t = find_task(h.itt);
	if (!t || t->kind != Kind::Logout || itt_of(t) != logout_itt_) {
		fail("Logout Response for no logout of ours");
		return;
	}
	logout_ok_ = h.response == 0;
	complete(t, TaskOutcome::Completed);
	// 11.15: the connection (and with reason 0 the session) is gone; close our end.
	change_state(&state_, SessionState::Closed, kSessionStates, this);
	error_ = logout_ok_ ? "logged out"
	                    : "logout refused (response " + std::to_string(h.response) + ")";
	tp_->close();
	for (auto &up : tasks_)
		if (up->kind != Kind::Free && !up->finished)
			complete(up.get(), TaskOutcome::ConnectionLost);
	pending_.clear();
}

void Session::on_async_msg(const Pdu &pdu)
{
	AsyncMsg h;
	decode(pdu.bhs, &h);
	take_statsn(h.statsn);
	update_sn(h.exp_cmdsn, h.max_cmdsn);
	stats_.async++;
	AsyncEvent ev;
	ev.event = h.event;
	ev.lun = h.lun;
	ev.param1 = h.param1;
	ev.param2 = h.param2;
	ev.param3 = h.param3;
	switch (h.event) {
	case 0:
		// 11.9.1 event 0: a SCSI asynchronous event, the sense data in the data segment
		// (SenseLength first, as in a SCSI Response).
		if (pdu.data.size() >= 2) {
			const uint16_t sl = get_be16(pdu.data.data());
			if (sl <= pdu.data.size() - 2)
				ev.sense.assign(pdu.data.begin() + 2, pdu.data.begin() + 2 + sl);
		}
		break;
	case 1:
		// Event 1: the target asks us to log out within Parameter3 seconds. Tasks in
		// flight may finish; queued ones are cancelled; poll() sends the Logout when the
		// last one is done.
		ULP_LOG(Info, Iscsi, "{}",
		        "target requests logout within " + std::to_string(h.param3) + " s");
		target_logout_ = true;
		while (!pending_.empty()) {
			Task *x = tasks_[pending_.front()].get();
			pending_.pop_front();
			complete(x, TaskOutcome::Cancelled);
		}
		break;
	case 2:
	case 3:
		// Events 2, 3: the target will drop the connection / session (Parameter2:
		// Time2Wait). At ERL 0 there is nothing to recover: the drop fails the session.
		ULP_LOG(Info, Iscsi, "{}",
		        std::string("target announces it drops the ") +
		            (h.event == 2 ? "connection" : "session"));
		break;
	case 4:
		// Event 4: renegotiation requested; we keep the parameters (the target may
		// drop us after Parameter3 seconds, which ends the session).
		ULP_LOG(Info, Iscsi, "{}", "target asks to renegotiate parameters; not supported");
		break;
	default:
		break;
	}
	if (async_fn_)
		async_fn_(ev);
}

void Session::on_reject(const Pdu &pdu)
{
	RejectPdu h;
	decode(pdu.bhs, &h);
	take_statsn(h.statsn);
	update_sn(h.exp_cmdsn, h.max_cmdsn);
	stats_.rejects++;
	// 11.17: the data segment is the header of the rejected PDU.
	if (pdu.data.size() < kBhsLen) {
		fail("Reject without the rejected PDU's header");
		return;
	}
	const uint8_t *q = pdu.data.data();
	const auto op = static_cast<Opcode>(q[0] & 0x3f);
	const bool immediate = q[0] & 0x40;
	const uint32_t itt = get_be32(q + 16);
	char why[96];
	std::snprintf(why, sizeof(why), "target rejected a PDU (opcode 0x%02x, reason 0x%02x)",
	              q[0] & 0x3f, static_cast<unsigned>(h.reason));
	ULP_LOG(Info, Iscsi, "{}", why);
	Task *t = find_task(itt);
	switch (op) {
	case Opcode::ScsiCmd:
		if (!t || t->kind != Kind::Scsi) {
			fail(std::string(why) + " for no command of ours");
			return;
		}
		if (!immediate) {
			// 7.2: the CmdSN of a rejected command counts as not received unless the
			// target's ExpCmdSN already moved past it.
			const uint32_t cmdsn = get_be32(q + 24);
			if (sn_le(h.exp_cmdsn, cmdsn))
				send_filler(cmdsn);
		}
		if (!t->finished) {
			t->result.reject_reason = h.reason;
			complete_scsi(t, TaskOutcome::Rejected);
		}
		return;
	case Opcode::NopOut:
		if (t && (t->kind == Kind::Ping || t->kind == Kind::Filler)) {
			if (itt_of(t) == keepalive_itt_)
				keepalive_itt_ = kReservedTag;
			complete(t, TaskOutcome::Rejected);
			return;
		}
		fail(why);
		return;
	case Opcode::TmfReq:
		if (t && t->kind == Kind::Tmf) {
			complete(t, TaskOutcome::Rejected);
			return;
		}
		fail(why);
		return;
	case Opcode::TextReq:
		if (t && t->kind == Kind::Text) {
			complete(t, TaskOutcome::Rejected);
			return;
		}
		fail(why);
		return;
	default:
		// A Data-Out (bad data digest, or fields the target did not accept), a Logout
		// or anything else: at ERL 0 the task it belongs to cannot be recovered.
		fail(why);
		return;
	}
}

} // namespace ulp::iscsi::initiator
