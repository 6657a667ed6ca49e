// SPDX-License-Identifier: MIT
// iser/initiator.cc - the iSCSI initiator session (see initiator.h): login over a
// transport, the full feature phase (commands, data, status, TMF, NOP, Async, Reject) and
// logout.
#include "iser/initiator.h"

#include "iser/crc32c.h"
#include "iser/initiator_task.h"

#include <algorithm>
#include <cassert>
#include <cstring>

namespace ulp::iscsi
{

using clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

namespace
{

constexpr uint32_t kSlotBits = 16;                    // ITT = generation << 16 | slot
constexpr uint32_t kMaxSlots = (1u << kSlotBits) - 1; // slot 0xffff never exists: no ITT
                                                      // can be the reserved 0xffffffff
constexpr milliseconds kTimerPeriod{50};              // how often timers are looked at
constexpr uint32_t kLoginItt = 0;                     // ITT of every Login Request
constexpr uint32_t kFirstCmdsn = 1;                   // CmdSN of the leading login

// Logout reasons and responses (11.14.1, 11.15.1).
constexpr uint8_t kLogoutCloseSession = 0;

// SAM-5 4.7: LUNs below 256 in peripheral device addressing, below 16384 flat.
uint64_t lun_field(uint64_t lun)
{
	if (lun < 256)
		return lun << 48;
	return (uint64_t{0x40} | ((lun >> 8) & 0x3f)) << 56 | (lun & 0xff) << 48;
}

bool sn_lt(uint32_t a, uint32_t b)
{
	return a != b && uint32_t(b - a) < 0x80000000u;
}
bool sn_le(uint32_t a, uint32_t b)
{
	return a == b || sn_lt(a, b);
}

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
		pending_.pop_front();
		if (t->kind == Kind::Scsi)
			send_cmd(t);
		else if (t->kind == Kind::Text)
			send_text(t, t->text_ttt);
	}
}

void Session::send_cmd(Task *t)
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
	h.cmdsn = cmdsn_++;
	h.exp_statsn = exp_statsn_;
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
	h.final = unsol == imm; // F: no unsolicited Data-Out follows
	t->cmdsn = h.cmdsn;
	t->seq = ++seq_;
	t->sent = true;
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
	if (pending_.empty() && window_open()) {
		send_cmd(t);
	} else {
		pending_.push_back(t->slot);
		stats_.window_waits++;
	}
	return itt_of(t);
}

// ---------------------------------------------------------------------------------------------
// Login

bool Session::login(const Portal &portal)
{
	if (state_ != SessionState::Idle) {
		why_ = error_ = "login on a session that is not idle";
		return false;
	}
	Portal at = portal;
	for (int hops = 0;; hops++) {
		Portal next;
		if (login_once(at, &next))
			return true;
		if (next.host.empty() || hops >= cfg_.max_redirects)
			return false;
		// 11.13 class 1: the target moved; log in again where it says.
		if (cfg_.log)
			cfg_.log("login redirected to " + portal_str(next));
		at = next;
		state_ = SessionState::Idle;
		error_.clear();
		login_status_ = LoginStatus::Success;
		login_error_ = InitiatorLoginError::None;
	}
}

bool Session::login_once(const Portal &portal, Portal *redirect)
{
	state_ = SessionState::LoggingIn;
	tp_ = make_tp_();
	tp_->attach(this);
	if (!tp_->connect(portal.host, portal.port, cfg_.connect_timeout)) {
		fail(tp_->why());
		return false;
	}
	InitiatorLoginConfig lc;
	lc.initiator_name = cfg_.initiator_name;
	lc.initiator_alias = cfg_.initiator_alias;
	lc.target_name = cfg_.target_name;
	lc.type = cfg_.type;
	lc.transport = tp_->kind();
	lc.isid = cfg_.isid;
	lc.itt = kLoginItt;
	lc.cmdsn = kFirstCmdsn;
	lc.prefs = cfg_.prefs;
	lc.chap = cfg_.chap;
	lc.mutual = cfg_.mutual;
	lc.chap_policy = cfg_.chap_policy;
	InitiatorLogin login(lc);
	login_ = &login;
	std::vector<uint8_t> buf(login.req_buf_len());
	const auto deadline = clock::now() + cfg_.login_timeout;
	while (login.state() == InitiatorLoginState::SendRequest) {
		const size_t n = login.next_request(buf);
		if (!n) {
			login_ = nullptr;
			fail("could not build a Login Request");
			return false;
		}
		// Login PDUs have no digests: the whole PDU goes as the data part.
		TxPdu *p = new_pdu(nullptr);
		p->own.assign(buf.begin(), buf.begin() + static_cast<ptrdiff_t>(n));
		p->data = p->own;
		pdus_out_++;
		tp_->queue(p);
		login_rsp_ = false;
		while (!login_rsp_ && state_ == SessionState::LoggingIn) {
			const auto now = clock::now();
			if (now >= deadline) {
				login_ = nullptr;
				fail("login timed out after " +
				     std::to_string(cfg_.login_timeout.count()) + " ms");
				return false;
			}
			if (!tp_->poll(std::chrono::duration_cast<milliseconds>(deadline - now)) &&
			    !login_rsp_) {
				login_ = nullptr;
				fail("connection lost during login: " + tp_->why());
				return false;
			}
		}
		// A target that refuses a login closes the connection after its response
		// (11.13): the response decides, the closed socket is no news.
		if (login.state() == InitiatorLoginState::SendRequest && !tp_->connected()) {
			login_ = nullptr;
			fail("connection lost during login: " + tp_->why());
			return false;
		}
		if (state_ != SessionState::LoggingIn) {
			login_ = nullptr;
			return false;
		}
	}
	login_ = nullptr;
	if (login.state() != InitiatorLoginState::Complete) {
		login_error_ = login.error();
		login_status_ = login.status();
		char cd[32];
		std::snprintf(cd, sizeof(cd), " (class 0x%02x detail 0x%02x)",
		              status_class(login.status()), status_detail(login.status()));
		std::string why = std::string("login failed: ") +
		                  initiator_login_error_name(login.error()) + ": " + login.why();
		if (login.error() == InitiatorLoginError::TargetStatus)
			why += cd;
		if ((login.status() == LoginStatus::TargetMovedTemp ||
		     login.status() == LoginStatus::TargetMovedPerm) &&
		    !login.redirect().empty()) {
			Portal r;
			std::string perr;
			if (parse_portal(login.redirect().front(), &r, &perr))
				*redirect = r;
		}
		fail(why);
		return false;
	}
	enter_ffp(login);
	return true;
}

void Session::enter_ffp(const InitiatorLogin &l)
{
	sparams_ = l.session();
	cparams_ = l.conn();
	digests_.header = cparams_.header_digest == Digest::Crc32c;
	digests_.data = cparams_.data_digest == Digest::Crc32c;
	send_dsl_ = cparams_.target_recv_dsl;
	// Our declaration bounds what the target may send; digests from the next PDU on.
	tp_->set_recv(cparams_.initiator_recv_dsl, digests_);
	exp_statsn_ = l.exp_statsn();
	exp_cmdsn_ = l.exp_cmdsn();
	max_cmdsn_ = l.max_cmdsn();
	// 3.2.2.1: the first command carries the CmdSN the final Login Response expects.
	cmdsn_ = exp_cmdsn_;
	last_rx_ = clock::now();
	next_timer_check_ = last_rx_ + kTimerPeriod;
	state_ = SessionState::FullFeature;
	if (cfg_.log)
		cfg_.log("logged in to " +
		         (sparams_.type == SessionType::Discovery ? std::string("discovery")
		                                                  : sparams_.target_name) +
		         " at " + tp_->peer_address() + " tsih " + std::to_string(sparams_.tsih));
}

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
	// 3.2.2.2: StatSN advances by one per status; an old one does not move ExpStatSN back.
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
	if (h.response == 0 && h.status == 0) {
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
	state_ = SessionState::Closed;
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
		if (cfg_.log)
			cfg_.log("target requests logout within " + std::to_string(h.param3) +
			         " s");
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
		if (cfg_.log)
			cfg_.log(std::string("target announces it drops the ") +
			         (h.event == 2 ? "connection" : "session"));
		break;
	case 4:
		// Event 4: renegotiation requested; we keep the parameters (the target may
		// drop us after Parameter3 seconds, which ends the session).
		if (cfg_.log)
			cfg_.log("target asks to renegotiate parameters; not supported");
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
	if (cfg_.log)
		cfg_.log(why);
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
	t->outcome = o;
	finish_if_done(t);
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
	switch (t->kind) {
	case Kind::Scsi: {
		ScsiDone cb = std::move(t->done);
		ScsiResult r = t->result;
		r.outcome = t->outcome;
		free_task(t);
		if (user)
			in_flight_--;
		if (cb)
			cb(r);
		return;
	}
	case Kind::Tmf: {
		TmfDone cb = std::move(t->tmf_done);
		TmfResult r = t->tmf_result;
		r.outcome = t->outcome;
		free_task(t);
		if (user)
			in_flight_--;
		if (cb)
			cb(r);
		return;
	}
	case Kind::Ping: {
		PingDone cb = std::move(t->ping_done);
		PingResult r = t->ping_result;
		r.outcome = t->outcome;
		free_task(t);
		if (user)
			in_flight_--;
		if (cb)
			cb(r);
		return;
	}
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
		auto wait =
		    std::min(std::chrono::duration_cast<milliseconds>(deadline - now),
		             std::chrono::duration_cast<milliseconds>(next_timer_check_ - now));
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
		if (t->kind == Kind::Free || t->kind == Kind::Filler || t->finished)
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
	state_ = SessionState::LoggingOut;
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
			poll(std::chrono::duration_cast<milliseconds>(deadline - clock::now()));
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
		if (!tp_->poll(std::chrono::duration_cast<milliseconds>(deadline - clock::now())))
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
	state_ = SessionState::Failed;
	error_ = why;
	if (cfg_.log)
		cfg_.log("session failed: " + why);
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

ScsiResult Session::run(const ScsiRequest &req)
{
	ScsiResult out;
	bool got = false;
	const uint32_t itt = submit(req, [&](const ScsiResult &r) {
		out = r;
		got = true;
	});
	if (itt == kReservedTag) {
		out.outcome = TaskOutcome::Cancelled;
		return out;
	}
	// Bounded by cmd_timeout through check_timers; the extra second covers the delivery.
	const auto deadline = clock::now() + cfg_.cmd_timeout + milliseconds(1000);
	while (!got && clock::now() < deadline)
		if (poll(milliseconds(100)) < 0)
			break;
	if (!got) {
		fail("command did not complete in time");
		while (!got && poll(milliseconds(0)) > 0) {
		}
		if (!got)
			out.outcome = TaskOutcome::ConnectionLost;
	}
	return out;
}

TmfResult Session::task_mgmt_sync(TmfFunction fn, uint64_t lun, uint32_t ref_itt)
{
	TmfResult out;
	bool got = false;
	if (task_mgmt(fn, lun, ref_itt, [&](const TmfResult &r) {
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
	if (!got)
		out.outcome = TaskOutcome::ConnectionLost;
	return out;
}

PingResult Session::ping_sync(std::span<const uint8_t> data)
{
	PingResult out;
	bool got = false;
	if (ping(data, [&](const PingResult &r) {
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
	if (!got)
		out.outcome = TaskOutcome::ConnectionLost;
	return out;
}

} // namespace ulp::iscsi
