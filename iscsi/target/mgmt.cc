// SPDX-License-Identifier: MIT
// iscsi/target/mgmt.cc - a connection's management PDUs (see conn.h): NOP-Out/In (RFC 7143
// 11.18, 11.19), task management (11.5, 11.6; RFC 7144), Text (11.10, 11.11), Logout (11.14,
// 11.15), SNACK (11.16), and the target-initiated Async logout (11.9).
#include "iscsi/target/conn.h"

#include "core/log.h"

#include "scsi/core.h"

#include <algorithm>
#include <cstring>

namespace ulp::iscsi::target
{

namespace
{

// RFC 7143 11.5.1 function codes (and RFC 7144's new task management functions, QUERY TASK
// and on), and the responses of 11.6.1.
enum : uint8_t {
	TMF_ABORT_TASK = 1,
	TMF_ABORT_TASK_SET = 2,
	TMF_CLEAR_ACA = 3,
	TMF_CLEAR_TASK_SET = 4,
	TMF_LUN_RESET = 5,
	TMF_TARGET_WARM_RESET = 6,
	TMF_TARGET_COLD_RESET = 7,
	TMF_TASK_REASSIGN = 8,
	TMF_QUERY_TASK = 9,
	TMF_QUERY_TASK_SET = 10,
	TMF_I_T_NEXUS_RESET = 11,
	TMF_QUERY_ASYNC_EVENT = 12,

	TMF_RSP_COMPLETE = 0,
	TMF_RSP_NO_TASK = 1,
	TMF_RSP_NO_LUN = 2,
	TMF_RSP_REASSIGN_UNSUPPORTED = 4,
	TMF_RSP_NOT_SUPPORTED = 5,
	TMF_RSP_AUTH_FAILED = 6, // Function authorization failed
	TMF_RSP_SUCCEEDED = 7,   // RFC 7144: FUNCTION SUCCEEDED (QUERY functions)
	TMF_RSP_REJECTED = 255,
};

// Why the connections of a target end after a TARGET COLD RESET (the log says so).
constexpr const char *kColdReset = "target cold reset";

} // namespace

namespace
{

uint8_t tmf_rsp_code(scsi::TmfResponse r)
{
	switch (r) {
	case scsi::TmfResponse::Complete:
		return TMF_RSP_COMPLETE;
	case scsi::TmfResponse::Succeeded:
		return TMF_RSP_SUCCEEDED;
	case scsi::TmfResponse::TaskNotFound:
		return TMF_RSP_NO_TASK;
	case scsi::TmfResponse::LunNotFound:
		return TMF_RSP_NO_LUN;
	case scsi::TmfResponse::NotSupported:
		return TMF_RSP_NOT_SUPPORTED;
	default:
		return TMF_RSP_REJECTED;
	}
}

} // namespace

void Conn::on_nop_out(const Pdu &pdu)
{
	NopOut h;
	decode(pdu.bhs, &h);
	if (h.ttt != kReservedTag) {
		// The answer to our ping (11.18.3): the connection is alive.
		if (h.ttt == ping_ttt_)
			ping_ttt_ = kReservedTag;
		return;
	}
	if (!h.immediate && !check_cmdsn(pdu, h.cmdsn, false))
		return;
	deliver_in_order();
	if (h.itt == kReservedTag)
		return; // 11.18.1: no response wanted
	// 11.19: echo the ping data (the initiator's MaxRecvDataSegmentLength bounds it).
	const size_t n = std::min<size_t>(pdu.data.size(), max_send_dsl_);
	send_nop_in(h.itt, kReservedTag, pdu.data.first(n), true);
}

void Conn::on_tmf(const Pdu &pdu)
{
	TmfReq h;
	decode(pdu.bhs, &h);
	if (!h.immediate && !check_cmdsn(pdu, h.cmdsn, false))
		return;
	const uint8_t fn = h.function & 0x7f;
	auto respond = [&](uint8_t code) {
		OutPdu *p = new_pdu();
		Bhs b{};
		TmfRsp r;
		r.response = code;
		r.itt = h.itt;
		encode(r, b);
		fill_sn(b.data(), true);
		finish_pdu(p, b);
		queue_pdu(p);
		pdus_out_++;
	};
	scsi::TmfType t;
	switch (fn) {
	case TMF_ABORT_TASK:
		t = scsi::TmfType::AbortTask;
		break;
	case TMF_ABORT_TASK_SET:
		t = scsi::TmfType::AbortTaskSet;
		break;
	case TMF_CLEAR_ACA:
		t = scsi::TmfType::ClearAca;
		break;
	case TMF_CLEAR_TASK_SET:
		t = scsi::TmfType::ClearTaskSet;
		break;
	case TMF_LUN_RESET:
		t = scsi::TmfType::LunReset;
		break;
	case TMF_TARGET_WARM_RESET:
	case TMF_TARGET_COLD_RESET:
		// 11.5.1: they reach every initiator of the target; the target decides who may.
		if (!node_->allow_target_reset) {
			deliver_in_order();
			respond(TMF_RSP_AUTH_FAILED);
			return;
		}
		t = fn == TMF_TARGET_WARM_RESET ? scsi::TmfType::TargetWarmReset
		                                : scsi::TmfType::TargetColdReset;
		break;
	case TMF_QUERY_TASK:
		t = scsi::TmfType::QueryTask;
		break;
	case TMF_QUERY_TASK_SET:
		t = scsi::TmfType::QueryTaskSet;
		break;
	case TMF_I_T_NEXUS_RESET:
		t = scsi::TmfType::ITNexusReset;
		break;
	case TMF_QUERY_ASYNC_EVENT:
		t = scsi::TmfType::QueryAsyncEvent;
		break;
	case TMF_TASK_REASSIGN:
		// 11.5.1: TASK REASSIGN needs ERL 2; we answer as the RFC asks at ERL 0.
		deliver_in_order();
		respond(TMF_RSP_REASSIGN_UNSUPPORTED);
		return;
	default:
		deliver_in_order();
		respond(TMF_RSP_REJECTED);
		return;
	}
	if (t == scsi::TmfType::AbortTask || t == scsi::TmfType::QueryTask) {
		// 11.5.1: a task still waiting for its CmdSN has not reached the SCSI layer:
		// abort it here. A task we never saw whose RefCmdSN is within the window and
		// before the TMF's own CmdSN is taken as received and aborted: Function complete.
		if (IscsiCmd *c = find_cmd(h.rtt); c && c->state == IscsiCmd::State::Waiting) {
			if (t == scsi::TmfType::AbortTask) {
				// Its CmdSN was received all the same (3.2.2.1): it stays in
				// waiting_ as cmdsn_only, for ExpCmdSN to pass; its ITT is free
				// for the initiator to use again once this is answered.
				itt_table_->erase(itt_table_->iterator_to(*c));
				c->cmdsn_only = true;
				respond(TMF_RSP_COMPLETE);
			} else {
				respond(TMF_RSP_SUCCEEDED);
			}
			deliver_in_order(); // a non-immediate TMF has moved ExpCmdSN
			return;
		}
		if (t == scsi::TmfType::AbortTask && !find_cmd(h.rtt) &&
		    sn_le(exp_cmdsn_, h.ref_cmdsn) && sn_lt(h.ref_cmdsn, h.cmdsn)) {
			cmdsn_received(h.ref_cmdsn);
			respond(TMF_RSP_COMPLETE);
			deliver_in_order();
			return;
		}
	}
	deliver_in_order();
	auto *m = new IscsiTmr;
	m->conn = this;
	m->itt = h.itt;
	m->tmr.sess = sess_->scsi;
	m->tmr.function = t;
	m->tmr.lun = scsi::lun_from_wire(pdu.bhs.data() + 8);
	m->tmr.ref_tag = h.rtt;
	m->tmr.tag = h.itt;
	m->tmr.fabric_priv = m;
	tmrs_out_++;
	scsi::tmr_submit(&m->tmr);
}

void Conn::on_text(const Pdu &pdu)
{
	TextReq h;
	decode(pdu.bhs, &h);
	if (!h.immediate && !check_cmdsn(pdu, h.cmdsn, false))
		return;
	deliver_in_order();
	TextSeq seq{statsn_, exp_cmdsn_, max_cmdsn()};
	Bhs b{};
	std::span<const uint8_t> data;
	if (text_->on_request(pdu, seq, &b, &data) == TextStep::Reject) {
		send_reject(text_->reject_reason(), pdu.bhs);
		return;
	}
	max_send_dsl_ = text_->max_send_dsl(); // a redeclared MaxRecvDataSegmentLength
	OutPdu *p = new_pdu();
	p->own.assign(data.begin(), data.end());
	p->data = p->own;
	fill_sn(b.data(), true);
	finish_pdu(p, b);
	queue_pdu(p);
	pdus_out_++;
}

void Conn::on_logout(const Pdu &pdu)
{
	LogoutReq h;
	decode(pdu.bhs, &h);
	if (!h.immediate && !check_cmdsn(pdu, h.cmdsn, false))
		return;
	deliver_in_order();
	const uint8_t reason = h.reason & 0x7f;
	uint8_t code = LOGOUT_RSP_OK;
	if (reason == LOGOUT_REMOVE_FOR_RECOVERY)
		code = LOGOUT_RSP_RECOVERY_UNSUPPORTED; // ERL 2 only (11.14.1)
	else if (reason == LOGOUT_CLOSE_CONNECTION && h.cid != cparams_.cid)
		code = LOGOUT_RSP_CID_NOT_FOUND; // the session's only connection is this one
	else if (reason > LOGOUT_REMOVE_FOR_RECOVERY) {
		send_reject(RejectReason::InvalidPduField, pdu.bhs);
		return;
	}
	if (code != LOGOUT_RSP_OK) {
		OutPdu *p = new_pdu();
		Bhs b{};
		LogoutRsp r;
		r.response = code;
		r.itt = h.itt;
		encode(r, b);
		fill_sn(b.data(), true);
		finish_pdu(p, b);
		queue_pdu(p);
		pdus_out_++;
		return;
	}
	// 11.14: the response goes out once the connection's commands have ended; the
	// initiator sends no new ones meanwhile.
	change_state(&state_, ConnState::LoggingOut, kConnStates, this);
	logout_pending_ = true;
	logout_itt_ = h.itt;
	ULP_LOG(Info, Iscsi, "{}",
	        "logout: " + sess_->params.initiator_name + " from " + peer_ +
	            (reason == LOGOUT_CLOSE_SESSION ? " (close session)" : " (close connection)"));
	maybe_finish_logout();
}

void Conn::maybe_finish_logout()
{
	// The connection's commands: cmdsn_only entries hold a CmdSN, not a task.
	const auto holders = std::count_if(waiting_.begin(), waiting_.end(),
	                                   [](const IscsiCmd &w) { return w.cmdsn_only; });
	if (!logout_pending_ || live_ != static_cast<uint32_t>(holders) || tmrs_out_)
		return;
	// The session ends here (its only connection logs out): its I_T nexus loss - an SPC-2
	// reservation it held released, I_T NEXUS LOSS OCCURRED for its LUs - is done before
	// the response tells the initiator that the session is gone (SAM-5 6.3.4), so that a
	// session that logs in right after finds it done. The reaper does it (close_session
	// must not run here); the response goes out on ReapDone. With no command left the
	// reaper has nothing to wait for.
	if (!reaped_) {
		if (!reaping_) {
			reaping_ = true;
			target_.close_session(sess_, [this] { post(ConnEvent::ReapDone, {}); });
		}
		return;
	}
	logout_pending_ = false;
	if (state_ == ConnState::Closing)
		return; // the transport went while the reaper worked: nowhere to answer
	OutPdu *p = new_pdu();
	Bhs b{};
	LogoutRsp r;
	r.response = LOGOUT_RSP_OK;
	r.itt = logout_itt_;
	encode(r, b);
	fill_sn(b.data(), true);
	finish_pdu(p, b);
	p->close_after = true;
	queue_pdu(p);
	pdus_out_++;
}

void Conn::on_snack(const Pdu &pdu)
{
	// SNACK needs ERL > 0 (11.16); at ERL 0 it is rejected.
	send_reject(RejectReason::SnackReject, pdu.bhs);
}

void Conn::do_tm_rsp(scsi::Tmr *t)
{
	auto *m = static_cast<IscsiTmr *>(t->fabric_priv);
	tmrs_out_--;
	// 11.5.1: TARGET COLD RESET is also a power on: every connection of the target ends,
	// this one once its response is out (which the initiator may or may not see).
	const bool cold = t->function == scsi::TmfType::TargetColdReset &&
	                  t->response == scsi::TmfResponse::Complete;
	if (cold)
		target_.drop_sessions(node_, this, kColdReset);
	if (state_ != ConnState::Closing) {
		OutPdu *p = new_pdu();
		Bhs b{};
		TmfRsp r;
		r.response = tmf_rsp_code(t->response);
		r.itt = m->itt;
		encode(r, b);
		fill_sn(b.data(), true);
		finish_pdu(p, b);
		if (cold) {
			p->close_after = true;
			close_why_ = kColdReset;
		}
		queue_pdu(p);
		pdus_out_++;
	}
	delete m;
	if (logout_pending_)
		maybe_finish_logout();
	maybe_done();
}

void Conn::send_nop_in(uint32_t itt, uint32_t ttt, std::span<const uint8_t> data, bool advance)
{
	OutPdu *p = new_pdu();
	Bhs b{};
	NopIn h;
	h.itt = itt;
	h.ttt = ttt;
	encode(h, b);
	fill_sn(b.data(), advance);
	p->own.assign(data.begin(), data.end());
	p->data = p->own;
	finish_pdu(p, b);
	queue_pdu(p);
	pdus_out_++;
}

void Conn::send_async_logout()
{
	if (state_ != ConnState::FullFeature || logout_asked_)
		return;
	logout_asked_ = true;
	// 11.9.1 event 1: the target requests a logout within Parameter3 seconds.
	OutPdu *p = new_pdu();
	Bhs b{};
	AsyncMsg h;
	h.event = 1;
	h.param3 = static_cast<uint16_t>(std::max<int64_t>(
	    1, std::chrono::duration_cast<std::chrono::seconds>(target_.cfg().teardown_timeout)
	           .count()));
	encode(h, b);
	put_be32(b.data() + 16, kReservedTag);
	fill_sn(b.data(), true);
	finish_pdu(p, b);
	queue_pdu(p);
	pdus_out_++;
}

} // namespace ulp::iscsi::target
