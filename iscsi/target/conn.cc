// SPDX-License-Identifier: MIT
// iscsi/target/conn.cc - one iSCSI connection, target side (see conn.h).
#include "iscsi/target/conn.h"

#include "iscsi/crc32c.h"
#include "scsi/core.h"

#include <algorithm>
#include <cassert>
#include <cstdio>
#include <cstring>

namespace ulp::iscsi::target
{

using clock = std::chrono::steady_clock;

namespace
{

// RFC 7143 11.5.1 / RFC 7144 4.? function codes, and the responses of 11.6.1.
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

// Why the connections of a target end after a TARGET COLD RESET (the log says so).
constexpr const char *kColdReset = "target cold reset";

// RFC 7143 11.3.1.2 ATTR: 0 untagged (handled as SIMPLE), 1 simple, 2 ordered, 3 head of
// queue, 4 ACA.
scsi::TaskAttr task_attr(uint8_t attr)
{
	switch (attr) {
	case 2:
		return scsi::TaskAttr::Ordered;
	case 3:
		return scsi::TaskAttr::HeadOfQueue;
	case 4:
		return scsi::TaskAttr::Aca;
	default:
		return scsi::TaskAttr::Simple;
	}
}

} // namespace

const char *conn_state_str(ConnState s)
{
	switch (s) {
	case ConnState::Login:
		return "login";
	case ConnState::FullFeature:
		return "full-feature";
	case ConnState::LoggingOut:
		return "logging-out";
	case ConnState::Closing:
		return "closing";
	case ConnState::Done:
		return "done";
	}
	return "?";
}

// ---- Login ---------------------------------------------------------------------------------

// The session layer's answers for this connection's login.
class Conn::Handler final : public LoginHandler
{
public:
	explicit Handler(Conn &c) : c_(c) {}

	LoginStatus find_target(std::string_view name, TargetInfo *info) override
	{
		const TargetNode *n = c_.target_.find_node(name);
		if (!n)
			return LoginStatus::NotFound;
		info->tpgt = c_.target_.cfg().tpgt;
		info->alias = n->alias;
		return LoginStatus::Success;
	}
	bool authorize(const LoginIdentity &id) override
	{
		if (id.type == SessionType::Discovery)
			return true; // visibility is filtered in SendTargets
		const TargetNode *n = c_.target_.find_node(id.target_name);
		return n && n->tpg->allowed(std::string(id.initiator_name));
	}
	AuthPolicy auth_policy(const LoginIdentity &id) override
	{
		AuthPolicy p;
		if (id.type == SessionType::Discovery) {
			p.allow_chap = !c_.target_.cfg().discovery_chap.empty();
			p.allow_none = !c_.target_.cfg().discovery_require_chap;
			return p;
		}
		const TargetNode *n = c_.target_.find_node(id.target_name);
		p.allow_chap = n && !n->chap.empty();
		p.allow_none = !(n && n->require_chap);
		return p;
	}
	bool chap_credentials(const LoginIdentity &id, ChapCredentials *out) override
	{
		const std::map<std::string, ChapCredentials> *m = nullptr;
		if (id.type == SessionType::Discovery) {
			m = &c_.target_.cfg().discovery_chap;
		} else if (const TargetNode *n = c_.target_.find_node(id.target_name)) {
			m = &n->chap;
		}
		if (!m)
			return false;
		auto it = m->find(std::string(id.initiator_name));
		if (it == m->end())
			it = m->find("");
		if (it == m->end())
			return false;
		*out = it->second;
		return true;
	}
	LoginStatus find_session(const LoginIdentity &id, SessionParams *) override
	{
		// One connection per session (MaxConnections=1): a second connection never joins.
		(void)id;
		return LoginStatus::TooManyConnections;
	}
	SessionResult complete_login(const LoginIdentity &id, const SessionParams &s,
	                             const ConnParams &) override
	{
		SessionResult r;
		if (id.tsih != 0) {
			r.status = LoginStatus::SessionDoesNotExist;
			return r;
		}
		Session *sess = c_.target_.create_session(&c_, s, &r.status);
		if (!sess)
			return r;
		c_.sess_ = sess;
		r.tsih = sess->params.tsih;
		// RFC 7143 3.2.2.1: the first command of a new session carries the CmdSN of the
		// leading login (login requests are immediate and do not advance it).
		c_.exp_cmdsn_ = id.cmdsn;
		r.exp_cmdsn = id.cmdsn;
		r.max_cmdsn = id.cmdsn + c_.target_.cfg().cmd_window - 1;
		return r;
	}

private:
	Conn &c_;
};

Conn::Conn(Target &target, Transport transport, std::string peer, std::string local)
    : target_(target), transport_(transport), peer_(std::move(peer)), local_(std::move(local)),
      born_(clock::now())
{
	target_.add_conn(this);
}

Conn::~Conn()
{
	assert(detached_);
}

void Conn::detach()
{
	// The target's list first: stop() posts to the connections in it, under its lock.
	target_.remove_conn(this);
	{
		std::lock_guard g(inbox_lock_);
	}
	detached_ = true;
}

void Conn::on_pdu(const Pdu &pdu, PduError err)
{
	switch (state_) {
	case ConnState::Login:
		if (login_failed_)
			return; // the reject is on its way; the connection closes after it
		if (err != PduError::None) {
			fail(std::string("malformed PDU during login: ") + pdu_error_name(err));
			return;
		}
		on_login_pdu(pdu);
		break;
	case ConnState::FullFeature:
		on_ffp_pdu(pdu, err);
		break;
	case ConnState::LoggingOut:
		// Once the session is with the reaper (its logout response is on the way) it
		// may be freed at any moment: nothing more is read.
		if (!reaping_)
			on_ffp_pdu(pdu, err);
		break;
	default:
		break; // closing: input is ignored
	}
}

void Conn::on_login_pdu(const Pdu &pdu)
{
	if (!login_) {
		TargetLoginConfig lc;
		lc.transport = transport_;
		lc.prefs = target_.cfg().prefs;
		login_prefs(lc.prefs);
		lc.chap = target_.cfg().chap_policy;
		lc.allow_discovery = target_.cfg().allow_discovery;
		login_handler_ = std::make_unique<Handler>(*this);
		login_ = std::make_unique<TargetLogin>(lc, *login_handler_);
		login_rsp_.resize(login_->rsp_buf_len());
	}
	size_t len = 0;
	LoginStep step = login_->on_request(pdu, login_rsp_, &len);
	OutPdu *p = new_pdu();
	p->own.assign(login_rsp_.begin(), login_rsp_.begin() + len);
	// The login engine wrote the whole PDU (no digests during login): send it as data.
	p->data = p->own;
	p->hdr_len = 0;
	p->trailer_len = 0;
	if (step == LoginStep::Failed) {
		target_.log("login failed: " + peer_ + ": " + login_status_name(login_->status()) +
		            " (" + login_->why() + ")");
		p->close_after = true;
		login_failed_ = true;
		queue_pdu(p);
		pdus_out_++;
		return;
	}
	queue_pdu(p);
	pdus_out_++;
	if (step == LoginStep::Complete)
		login_complete(*login_);
}

void Conn::login_complete(const TargetLogin &l)
{
	cparams_ = l.conn();
	max_recv_dsl_ = cparams_.target_recv_dsl;
	max_send_dsl_ = cparams_.initiator_recv_dsl;
	digests_.header = cparams_.header_digest == Digest::Crc32c;
	digests_.data = cparams_.data_digest == Digest::Crc32c;
	statsn_ = l.next_statsn();
	state_ = ConnState::FullFeature;
	const SessionParams &sp = sess_->params; // sess_->conn is this (create_session)
	node_ = sess_->node;

	TextResponderConfig tc;
	tc.type = sp.type;
	tc.initiator_name = sp.initiator_name;
	tc.target_name = sp.target_name;
	tc.max_send_dsl = max_send_dsl_;
	text_ = std::make_unique<TextResponder>(tc, target_);

	// The command pool, allocated once: the CmdSN window, the immediate slots, and a
	// window's worth of commands whose status is on its way out (they no longer hold a
	// window slot, see return_window_slot, but keep their buffers until it is sent).
	const uint32_t n = 2 * target_.cfg().cmd_window + kImmediateSlots;
	pool_.reserve(n);
	free_.reserve(n);
	for (uint32_t i = 0; i < n; i++) {
		pool_.push_back(std::make_unique<IscsiCmd>());
		pool_.back()->conn = this;
		free_.push_back(pool_.back().get());
	}
	buckets_.resize(2 * n);
	itt_table_ =
	    std::make_unique<IttTable>(IttTable::bucket_traits(buckets_.data(), buckets_.size()));
	slots_ = target_.cfg().cmd_window;

	if (target_.cfg().nop_interval.count() > 0)
		next_ping_ = clock::now() + target_.cfg().nop_interval;
	char isid[16];
	std::snprintf(isid, sizeof(isid), "%02x%02x%02x%02x%02x%02x", sp.isid[0], sp.isid[1],
	              sp.isid[2], sp.isid[3], sp.isid[4], sp.isid[5]);
	target_.log("login: " + sp.initiator_name + " from " + peer_ +
	            (sp.type == SessionType::Discovery ? " (discovery)" : " to " + sp.target_name) +
	            " isid " + isid + " tsih " + std::to_string(sp.tsih) +
	            (cparams_.auth == AuthMethod::Chap ? " chap" : "") +
	            (digests_.header ? " hdgst" : "") + (digests_.data ? " ddgst" : ""));
	login_.reset();
	login_handler_.reset();
	login_rsp_.clear();
	login_rsp_.shrink_to_fit();
}

// ---- Full feature phase: input --------------------------------------------------------------

void Conn::return_window_slot(IscsiCmd *c)
{
	// A command stops counting against the window when its status is queued: the
	// response that carries it then reports the slot free, so an initiator whose last
	// command this was is not left with a closed window and nothing coming to reopen it
	// (RFC 7143 11.19: a target must not leave the window shut with no PDU to follow).
	// Its object and buffer stay until the response is sent: the pool has room for that.
	if (c->window_slot) {
		c->window_slot = false;
		slots_++;
	}
}

uint32_t Conn::max_cmdsn() const
{
	// MaxCmdSN - ExpCmdSN + 1 is the number of commands the target can still take
	// (3.2.2.1). Immediate commands have slots of their own, so the window never shrinks
	// under the initiator (it may only be closed: MaxCmdSN = ExpCmdSN - 1). Commands that
	// came ahead of ExpCmdSN (waiting_) are inside the range already and hold their slots:
	// they count in it, or MaxCmdSN would drop as they arrive. An initiator ignores a lower
	// MaxCmdSN (3.2.2.1) and goes on using the CmdSNs it was granted, which the window
	// check would then ignore: those commands would be lost.
	return exp_cmdsn_ + slots_ + static_cast<uint32_t>(waiting_.size()) - 1;
}

void Conn::fill_sn(uint8_t *bhs, bool advance_statsn)
{
	put_be32(bhs + 24, advance_statsn ? statsn_++ : statsn_);
	put_be32(bhs + 28, exp_cmdsn_);
	put_be32(bhs + 32, max_cmdsn());
}

namespace
{

// One line describing a PDU header (trace): opcode, flags byte, ITT, and the fields at
// 20..47 that most PDUs use for TTT / CmdSN / StatSN / DataSN / offsets.
std::string describe(const char *dir, std::span<const uint8_t> b, size_t dlen)
{
	char s[200];
	std::snprintf(s, sizeof(s),
	              "%s op %02x fl %02x itt %08x w20 %08x w24 %08x w28 %08x w32 %08x w36 %08x "
	              "w40 %08x w44 %08x dlen %zu",
	              dir, b[0] & 0x3f, b[1], get_be32(b.data() + 16), get_be32(b.data() + 20),
	              get_be32(b.data() + 24), get_be32(b.data() + 28), get_be32(b.data() + 32),
	              get_be32(b.data() + 36), get_be32(b.data() + 40), get_be32(b.data() + 44),
	              dlen);
	return s;
}

} // namespace

void Conn::on_ffp_pdu(const Pdu &pdu, PduError err)
{
	const uint8_t op = pdu.bhs[0] & 0x3f;
	if (target_.cfg().trace)
		target_.log(peer_ + " " + describe("<-", pdu.bhs, pdu.data.size()) +
		            (err != PduError::None ? std::string(" ") + pdu_error_name(err) : ""));
	const bool discovery = sess_->params.type == SessionType::Discovery;
	if (err == PduError::DataDigest) {
		// 7.8 b): a payload digest error is answered with a Reject (Data-Digest-Error) and
		// the data is discarded. At ERL 0 it cannot be asked for again (a recovery R2T is
		// ERL 1), so the task it belonged to ends with CHECK CONDITION (7.8 b) 2). Of a
		// SCSI Command "the non-data part of the PDU is processed normally": the command
		// is received and uses its CmdSN, or every later command would wait for that
		// CmdSN forever. Other PDUs are just discarded.
		send_reject(RejectReason::DataDigestError, pdu.bhs);
		if (static_cast<Opcode>(op) == Opcode::ScsiCmd && !discovery)
			on_scsi_cmd(pdu, true);
		else if (static_cast<Opcode>(op) == Opcode::DataOut && !discovery)
			on_data_out(pdu, true);
		return;
	}
	if (err == PduError::BadAhs) {
		send_reject(RejectReason::ProtocolError, pdu.bhs);
		return;
	}
	switch (static_cast<Opcode>(op)) {
	case Opcode::ScsiCmd:
		if (discovery) {
			// 4.3: a discovery session carries Text, NOP and Logout only.
			send_reject(RejectReason::ProtocolError, pdu.bhs);
			return;
		}
		on_scsi_cmd(pdu, false);
		break;
	case Opcode::DataOut:
		if (discovery) {
			send_reject(RejectReason::ProtocolError, pdu.bhs);
			return;
		}
		on_data_out(pdu, false);
		break;
	case Opcode::NopOut:
		on_nop_out(pdu);
		break;
	case Opcode::TmfReq:
		if (discovery) {
			send_reject(RejectReason::ProtocolError, pdu.bhs);
			return;
		}
		on_tmf(pdu);
		break;
	case Opcode::TextReq:
		on_text(pdu);
		break;
	case Opcode::LogoutReq:
		on_logout(pdu);
		break;
	case Opcode::SnackReq:
		on_snack(pdu);
		break;
	case Opcode::LoginReq:
		// 11.12: a Login Request in full feature phase is a protocol error.
		send_reject(RejectReason::ProtocolError, pdu.bhs);
		break;
	default:
		// 11.17.1 reason 5: an opcode we do not support (vendor specific, target ones).
		send_reject(RejectReason::CmdNotSupported, pdu.bhs);
		break;
	}
}

// 3.2.2.1: a non-immediate PDU whose CmdSN is outside [ExpCmdSN, MaxCmdSN] is ignored
// (a duplicate, or an initiator that does not respect the window). true: process it now;
// it is ExpCmdSN's and ExpCmdSN has been advanced past it.
bool Conn::check_cmdsn(const Pdu &pdu, uint32_t cmdsn, bool immediate)
{
	(void)pdu;
	if (immediate)
		return true;
	if (cmdsn != exp_cmdsn_)
		return false;
	exp_cmdsn_++;
	return true;
}

IscsiCmd *Conn::alloc_cmd()
{
	if (free_.empty())
		return nullptr;
	IscsiCmd *c = free_.back();
	free_.pop_back();
	live_++;
	return c;
}

void Conn::free_cmd(IscsiCmd *c)
{
	if (c->itt_hook.is_linked())
		itt_table_->erase(itt_table_->iterator_to(*c));
	if (c->data)
		free_buffer(c);
	c->data = nullptr;
	if (c->wait_hook.is_linked())
		waiting_.erase(waiting_.iterator_to(*c));
	return_window_slot(c);
	if (c->immediate)
		imm_live_--;
	c->state = IscsiCmd::State::Free;
	c->r2ts.clear();
	free_.push_back(c);
	live_--;
	if (logout_pending_)
		maybe_finish_logout();
	maybe_done();
}

IscsiCmd *Conn::find_cmd(uint32_t itt)
{
	auto it = itt_table_->find(itt, IttHash(), IttEq());
	return it == itt_table_->end() ? nullptr : &*it;
}

void Conn::on_scsi_cmd(const Pdu &pdu, bool data_lost)
{
	ScsiCmd h;
	decode(pdu.bhs, &h);
	if (state_ == ConnState::LoggingOut) {
		send_reject(RejectReason::WaitingForLogout, pdu.bhs);
		return;
	}
	// 3.2.2.1: outside the window (or not yet due and not within it): ignore silently,
	// and likewise "non-immediate duplicates within the range": a second command with the
	// CmdSN of one that waits would stay in waiting_ for good (ExpCmdSN passes its CmdSN
	// once) and stop every command behind it.
	if (!h.immediate && !(sn_le(exp_cmdsn_, h.cmdsn) && sn_le(h.cmdsn, max_cmdsn())))
		return;
	if (!h.immediate && h.cmdsn != exp_cmdsn_ &&
	    std::any_of(waiting_.begin(), waiting_.end(),
	                [&](const IscsiCmd &w) { return w.cmdsn == h.cmdsn; }))
		return;
	// A command we Reject still used its CmdSN: the initiator (libiscsi, Linux) numbers
	// the next one after it, so ExpCmdSN moves past it as if it had been executed.
	auto reject = [&](RejectReason r) {
		if (!h.immediate && h.cmdsn == exp_cmdsn_) {
			exp_cmdsn_++;
			deliver_in_order();
		}
		send_reject(r, pdu.bhs);
	};
	AhsInfo ahs;
	if (parse_ahs(pdu.ahs, &ahs) != PduError::None) {
		reject(RejectReason::ProtocolError);
		return;
	}
	const SessionParams &sp = sess_->params;
	const uint32_t imm = static_cast<uint32_t>(pdu.data.size());
	// 11.3.1.1/11.3.1.2: a command without W or R moves no data; data with the command
	// needs W, ImmediateData=Yes and fits the first burst; F=0 (unsolicited Data-Out to
	// follow) needs W and InitialR2T=No. Bidirectional commands are not supported.
	bool bad = (!h.read && !h.write && h.edtl != 0) || (h.read && h.write) ||
	           (imm && (!h.write || !sp.immediate_data)) || imm > h.edtl ||
	           imm > sp.first_burst_length || (!h.final && (!h.write || sp.initial_r2t));
	if (h.itt == kReservedTag)
		bad = true;
	if (bad) {
		reject(h.read && h.write ? RejectReason::CmdNotSupported
		                         : RejectReason::InvalidPduField);
		return;
	}
	if (find_cmd(h.itt)) {
		reject(RejectReason::TaskInProgress);
		return;
	}
	if (h.edtl > target_.cfg().max_io_bytes) {
		reject(RejectReason::InvalidPduField);
		return;
	}
	IscsiCmd *c = nullptr;
	if (h.immediate) {
		// Immediate commands take the slots beyond the window.
		if (imm_live_ < kImmediateSlots)
			c = alloc_cmd();
		if (!c) {
			send_reject(RejectReason::ImmCmdReject, pdu.bhs);
			return;
		}
		imm_live_++;
	} else {
		if (!slots_ || !(c = alloc_cmd()))
			return; // the window was respected by nobody: ignore (3.2.2.1)
		slots_--;
		c->window_slot = true;
	}
	c->state = IscsiCmd::State::Waiting;
	c->itt = h.itt;
	c->lun_raw = h.lun;
	c->cmdsn = h.cmdsn;
	c->edtl = h.edtl;
	c->read = h.read;
	c->write = h.write;
	c->immediate = h.immediate;
	c->local = false;
	c->cmdsn_only = false;
	if (h.edtl && !alloc_buffer(c, h.edtl)) {
		// No buffer now: SAM-5 5.3 TASK SET FULL tells the initiator to retry later. The
		// command used its CmdSN, as a rejected one does: due now, ExpCmdSN passes it
		// before the response reports it; ahead, a cmdsn_only entry waits for it (once
		// the response has given this command's window slot back).
		const bool due = !h.immediate && h.cmdsn == exp_cmdsn_;
		if (due) {
			exp_cmdsn_++;
			deliver_in_order();
		}
		c->data = nullptr;
		c->local = true;
		c->state = IscsiCmd::State::Responding;
		c->cmd.status = scsi::Status::TaskSetFull;
		c->cmd.sense_len = 0;
		c->cmd.resid = scsi::Residual::None;
		c->cmd.resid_count = 0;
		queue_cmd_pdu(c, build_scsi_rsp(c), true);
		if (!h.immediate && !due)
			cmdsn_received(h.cmdsn);
		return;
	}
	if (imm)
		std::memcpy(c->data, pdu.data.data(), imm);
	c->unsol_received = imm;
	c->unsol_limit = h.write ? std::min(sp.first_burst_length, h.edtl) : 0;
	c->unsol_done = h.final;
	c->unsol_next_datasn = 0;
	c->wp = false;
	c->solicit_next = 0;
	c->r2t_received = 0;
	c->r2tsn = 0;
	c->r2ts.clear();
	c->write_aborted = false;
	// Its immediate data failed the digest (on_ffp_pdu): the transfer fails as a
	// Data-Out that broke the rules does (data_error).
	c->data_error = data_lost;
	c->datasn = 0;
	c->rsp_held = false;
	c->rsp_is_data_in = false;
	c->core_released = false;
	c->pdus_queued = 0;
	itt_table_->insert(*c);

	scsi::Cmd *sc = &c->cmd;
	scsi::cmd_init(sc);
	sc->sess = sess_->scsi;
	sc->lun = scsi::lun_from_wire(pdu.bhs.data() + 8);
	sc->tag = h.itt;
	sc->task_attr = task_attr(h.attr);
	sc->dir = h.write  ? scsi::DataDir::Write
	          : h.read ? scsi::DataDir::Read
	                   : scsi::DataDir::None;
	sc->data_length = h.edtl;
	c->iov = iovec{c->data, h.edtl};
	sc->sgl = h.edtl ? std::span<const iovec>(&c->iov, 1) : std::span<const iovec>{};
	uint8_t cdb[260];
	size_t cdb_len = scsi_cdb(pdu, ahs, cdb);
	if (cdb_len > scsi::kMaxCdb)
		cdb_len = 0; // longer than the core takes: it answers INVALID FIELD
	std::memcpy(sc->cdb, cdb, std::min(cdb_len, scsi::kMaxCdb));
	sc->cdb_len = static_cast<uint8_t>(cdb_len);
	sc->fabric_priv = c;
	cmd_received(c);

	if (h.immediate) {
		submit_cmd(c);
		return;
	}
	if (h.cmdsn == exp_cmdsn_) {
		exp_cmdsn_++;
		submit_cmd(c);
		deliver_in_order();
		return;
	}
	// Ahead of ExpCmdSN: wait for the commands before it.
	hold(c);
}

void Conn::hold(IscsiCmd *c)
{
	auto it = waiting_.begin();
	while (it != waiting_.end() && sn_lt(it->cmdsn, c->cmdsn))
		++it;
	waiting_.insert(it, *c);
}

void Conn::deliver_in_order()
{
	while (!waiting_.empty() && waiting_.front().cmdsn == exp_cmdsn_) {
		IscsiCmd &c = waiting_.front();
		waiting_.pop_front();
		exp_cmdsn_++;
		if (c.cmdsn_only) // a CmdSN and no task (aborted, or never received): passed
			free_cmd(&c);
		else
			submit_cmd(&c);
	}
}

// RFC 7143 11.5.1 ABORT TASK: a task we never received whose RefCmdSN is in the window
// (and before the TMF's own CmdSN) is taken as received: ExpCmdSN must pass its CmdSN
// (3.2.2.1), or every command after it waits forever. Due now: pass it; ahead, within
// MaxCmdSN: a cmdsn_only entry in waiting_ (it has a slot: every CmdSN of the window not
// yet received has one, see max_cmdsn); already there (another task's): nothing to do.
void Conn::cmdsn_received(uint32_t sn)
{
	if (sn == exp_cmdsn_) {
		exp_cmdsn_++;
		deliver_in_order();
		return;
	}
	if (!sn_le(sn, max_cmdsn()) ||
	    std::any_of(waiting_.begin(), waiting_.end(),
	                [&](const IscsiCmd &w) { return w.cmdsn == sn; }))
		return;
	IscsiCmd *c = slots_ ? alloc_cmd() : nullptr;
	if (!c)
		return;
	slots_--;
	c->window_slot = true; // given back when ExpCmdSN passes it (free_cmd)
	c->state = IscsiCmd::State::Waiting;
	c->cmdsn = sn;
	c->immediate = false;
	c->local = false;
	c->data = nullptr;
	c->cmdsn_only = true;
	c->r2ts.clear();
	hold(c);
}

void Conn::submit_cmd(IscsiCmd *c)
{
	c->state = IscsiCmd::State::Submitted;
	scsi::submit(&c->cmd);
}

void Conn::on_data_out(const Pdu &pdu, bool data_lost)
{
	DataOut h;
	decode(pdu.bhs, &h);
	IscsiCmd *c = find_cmd(h.itt);
	const uint32_t len = static_cast<uint32_t>(pdu.data.size());
	if (!c || !c->write) {
		// 11.7: Data-Out for no task of ours. The data is dropped; the initiator learns
		// through the Reject (the digest's Reject, when the data failed it).
		if (!data_lost)
			send_reject(RejectReason::InvalidPduField, pdu.bhs);
		return;
	}
	// Its data failed the digest (on_ffp_pdu, the Reject is out): at ERL 0 the command
	// fails; the PDU is then dropped below like any Data-Out of a failed command.
	if (data_lost && !c->write_aborted && !c->data_error &&
	    c->state != IscsiCmd::State::Released)
		data_error(c);
	if (c->write_aborted || c->data_error || c->state == IscsiCmd::State::Released) {
		// Data still in flight for a command already aborted, failed or answered: drop
		// it, but keep the unsolicited accounting (a held response waits for its end).
		if (h.ttt == kReservedTag && h.final) {
			c->unsol_done = true;
			if (c->rsp_held)
				send_response(c, c->rsp_is_data_in);
		}
		return;
	}
	// A Data-Out may carry no data, and a write with EDTL 0 has no buffer (buf is null):
	// memcpy with a null pointer is undefined even for 0 bytes.
	auto copy_in = [&] {
		if (len)
			std::memcpy(c->data + h.buffer_offset, pdu.data.data(), len);
	};
	if (h.ttt == kReservedTag) {
		// Unsolicited data (11.7.?): in order (DataPDUInOrder=Yes), DataSN from 0,
		// within the first burst, before the F bit.
		if (c->unsol_done || h.datasn != c->unsol_next_datasn ||
		    h.buffer_offset != c->unsol_received ||
		    len > c->unsol_limit - c->unsol_received) {
			send_reject(RejectReason::ProtocolError, pdu.bhs);
			if (!c->unsol_done && h.final)
				c->unsol_done = true;
			data_error(c);
			return;
		}
		copy_in();
		c->unsol_received += len;
		c->unsol_next_datasn++;
		if (h.final || c->unsol_received == c->unsol_limit)
			c->unsol_done = true;
		if (c->unsol_done) {
			if (c->rsp_held) {
				send_response(c, c->rsp_is_data_in);
				return;
			}
			if (c->wp)
				fetch_data_out(c);
		}
		maybe_write_done(c);
		return;
	}
	// Solicited: the data one of our R2Ts asked for, in order within it.
	auto r = std::find_if(c->r2ts.begin(), c->r2ts.end(),
	                      [&](const R2tState &x) { return x.ttt == h.ttt; });
	if (r == c->r2ts.end() || h.datasn != r->next_datasn ||
	    h.buffer_offset != r->offset + r->received || len > r->length - r->received) {
		send_reject(RejectReason::ProtocolError, pdu.bhs);
		data_error(c);
		return;
	}
	copy_in();
	r->received += len;
	r->next_datasn++;
	c->r2t_received += len;
	if (r->received == r->length)
		c->r2ts.erase(r);
	send_r2ts(c);
	maybe_write_done(c);
}

// A Data-Out that breaks the sequence rules (DataSN, offset, burst: 11.7): at ERL 0 the data
// cannot be recovered, but the connection can: the PDU was rejected, the rest of the
// command's data is dropped, and the command ends with a failed transfer (the core answers
// ABORTED COMMAND, DATA PHASE ERROR) once the initiator's unsolicited data has ended.
void Conn::data_error(IscsiCmd *c)
{
	c->data_error = true;
	stop_write(c);
}

void Conn::stop_write(IscsiCmd *c)
{
	// No more R2Ts; a core waiting for the data hears the transfer failed.
	c->r2ts.clear();
	if (c->wp) {
		c->wp = false;
		scsi::write_done(&c->cmd, false);
	}
}

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
	state_ = ConnState::LoggingOut;
	logout_pending_ = true;
	logout_itt_ = h.itt;
	target_.log("logout: " + sess_->params.initiator_name + " from " + peer_ +
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
			target_.close_session(sess_,
			                      [this] { post(ConnEvent::ReapDone, nullptr); });
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

// ---- SCSI core events --------------------------------------------------------------------

void Conn::post(ConnEvent ev, void *arg)
{
	// wake() runs under the inbox lock: the owner frees a done connection only after
	// taking this lock once more, so no poster is still inside post() then. A poster that
	// try_own() made the owner holds the connection until run_owned() gives it up, and a
	// connection is freed only after its owner is done with it.
	std::unique_lock g(inbox_lock_);
	inbox_.emplace_back(ev, arg);
	if (!try_own()) {
		wake(); // on the owner thread: run at the end of its current turn
		return;
	}
	g.unlock(); // run_events() takes it
	run_owned();
}

void Conn::post_deferred(ConnEvent ev, void *arg)
{
	std::lock_guard g(inbox_lock_);
	inbox_.emplace_back(ev, arg);
	kick();
}

void Conn::run_events()
{
	for (;;) {
		{
			std::lock_guard g(inbox_lock_);
			if (inbox_.empty())
				break;
			running_.swap(inbox_);
		}
		for (auto [ev, arg] : running_) {
			switch (ev) {
			case ConnEvent::WritePending:
				do_write_pending(static_cast<IscsiCmd *>(arg));
				break;
			case ConnEvent::AbortWrite:
				do_abort_write(static_cast<IscsiCmd *>(arg));
				break;
			case ConnEvent::DataIn:
				do_data_in(static_cast<IscsiCmd *>(arg));
				break;
			case ConnEvent::Status:
				do_status(static_cast<IscsiCmd *>(arg));
				break;
			case ConnEvent::AbortedTask:
				do_aborted(static_cast<IscsiCmd *>(arg));
				break;
			case ConnEvent::TmRsp:
				do_tm_rsp(static_cast<scsi::Tmr *>(arg));
				break;
			case ConnEvent::Release:
				do_release(static_cast<IscsiCmd *>(arg));
				break;
			case ConnEvent::ReapDone:
				reaped_ = true; // sess_ is freed (or about to be)
				if (logout_pending_)
					maybe_finish_logout();
				maybe_done();
				break;
			case ConnEvent::Logout:
				send_async_logout();
				break;
			case ConnEvent::Drop:
				start_closing(arg ? static_cast<const char *>(arg)
				                  : "dropped by the target");
				break;
			}
		}
		running_.clear();
	}
}

void Conn::do_write_pending(IscsiCmd *c)
{
	c->wp = true;
	if (state_ == ConnState::Closing || c->data_error) {
		// Nothing more will arrive: fail the transfer (the core answers, we drop it).
		c->wp = false;
		scsi::write_done(&c->cmd, false);
		return;
	}
	if (c->unsol_done)
		fetch_data_out(c);
	maybe_write_done(c);
}

void Conn::do_abort_write(IscsiCmd *c)
{
	// The core aborted the command while we moved its data: no more R2Ts; Data-Out still
	// in flight is dropped on arrival.
	c->write_aborted = true;
	stop_write(c);
}

void Conn::send_r2ts(IscsiCmd *c)
{
	if (!c->wp || c->write_aborted || state_ == ConnState::Closing)
		return;
	const SessionParams &sp = sess_->params;
	const uint32_t need = c->cmd.xfer_len;
	if (c->solicit_next < c->unsol_received)
		c->solicit_next = c->unsol_received;
	while (c->r2ts.size() < sp.max_outstanding_r2t && c->solicit_next < need) {
		R2tState r;
		r.ttt = next_ttt_++;
		if (next_ttt_ == kReservedTag)
			next_ttt_ = 1;
		r.r2tsn = c->r2tsn++;
		r.offset = c->solicit_next;
		r.length = std::min(sp.max_burst_length, need - c->solicit_next);
		c->solicit_next += r.length;
		c->r2ts.push_back(r);
		c->datasn++;

		OutPdu *p = new_pdu();
		Bhs b{};
		R2t h;
		h.lun = c->lun_raw;
		h.itt = c->itt;
		h.ttt = r.ttt;
		h.r2tsn = r.r2tsn;
		h.buffer_offset = r.offset;
		h.desired_len = r.length;
		encode(h, b);
		fill_sn(b.data(), false); // 11.8.3: StatSN is not advanced by an R2T
		finish_pdu(p, b);
		queue_pdu(p);
		pdus_out_++;
	}
}

void Conn::maybe_write_done(IscsiCmd *c)
{
	if (!c->wp || c->write_aborted)
		return;
	if (c->unsol_received + c->r2t_received < c->cmd.xfer_len)
		return;
	c->wp = false;
	scsi::write_done(&c->cmd, true);
}

void Conn::do_data_in(IscsiCmd *c)
{
	send_response(c, true);
}

void Conn::do_status(IscsiCmd *c)
{
	send_response(c, false);
}

void Conn::send_response(IscsiCmd *c, bool data_in)
{
	if (state_ == ConnState::Closing) {
		scsi::cmd_put(&c->cmd); // nowhere to send it
		return;
	}
	// 11.7.2 (and LIO): the response of a command waits until the unsolicited data
	// the initiator is still sending for it has arrived, so that its ITT is not reused
	// while Data-Out for it is in flight.
	if (!c->unsol_done) {
		c->rsp_held = true;
		c->rsp_is_data_in = data_in;
		return;
	}
	c->rsp_held = false;
	c->state = IscsiCmd::State::Responding;
	if (data_in)
		send_read_response(c);
	else
		queue_cmd_pdu(c, build_scsi_rsp(c), true);
}

void Conn::send_data_in(IscsiCmd *c)
{
	// 11.7: Data-In PDUs of at most the initiator's MaxRecvDataSegmentLength; F closes
	// every MaxBurstLength sequence; the last carries the status (S) and residuals.
	const scsi::Cmd &sc = c->cmd;
	const uint32_t total = sc.xfer_len;
	const uint32_t burst = sess_->params.max_burst_length;
	uint32_t off = 0, in_burst = 0;
	while (off < total) {
		const uint32_t n = std::min({max_send_dsl_, total - off, burst - in_burst});
		const bool last = off + n == total;
		OutPdu *p = new_pdu();
		Bhs b{};
		DataIn h;
		h.lun = c->lun_raw;
		h.itt = c->itt;
		h.datasn = c->datasn++;
		h.buffer_offset = off;
		in_burst += n;
		h.final = last || in_burst == burst;
		if (in_burst == burst)
			in_burst = 0;
		if (last) {
			h.has_status = true;
			h.status = static_cast<uint8_t>(sc.status);
			h.underflow = sc.resid == scsi::Residual::Underflow;
			h.overflow = sc.resid == scsi::Residual::Overflow;
			h.residual = sc.resid_count;
		}
		encode(h, b);
		if (last)
			return_window_slot(c);
		// 11.7.4: StatSN advances only with the PDU that carries the status; ExpCmdSN
		// and MaxCmdSN are valid in every Data-In.
		fill_sn(b.data(), last);
		if (!last)
			put_be32(b.data() + 24, 0);
		p->data = {c->data + off, n};
		finish_pdu(p, b);
		p->cmd = c;
		p->last_of_cmd = last;
		c->pdus_queued++;
		queue_pdu(p);
		pdus_out_++;
		off += n;
	}
}

OutPdu *Conn::build_scsi_rsp(IscsiCmd *c)
{
	const scsi::Cmd &sc = c->cmd;
	OutPdu *p = new_pdu();
	Bhs b{};
	ScsiRsp h;
	h.itt = c->itt;
	h.response = 0; // command completed at the target
	h.status = static_cast<uint8_t>(sc.status);
	h.underflow = sc.resid == scsi::Residual::Underflow;
	h.overflow = sc.resid == scsi::Residual::Overflow;
	h.residual = sc.resid_count;
	h.exp_datasn = c->datasn;
	encode(h, b);
	return_window_slot(c);
	fill_sn(b.data(), true);
	if (sc.sense_len) {
		// 11.4.7: SenseLength (2 bytes) then the sense data.
		p->own.resize(2 + sc.sense_len);
		put_be16(p->own.data(), sc.sense_len);
		std::memcpy(p->own.data() + 2, sc.sense, sc.sense_len);
		p->data = p->own;
	}
	finish_pdu(p, b);
	return p;
}

void Conn::track_cmd_pdu(IscsiCmd *c, OutPdu *p, bool last)
{
	p->cmd = c;
	p->last_of_cmd = last;
	c->pdus_queued++;
	pdus_out_++;
}

void Conn::queue_cmd_pdu(IscsiCmd *c, OutPdu *p, bool last)
{
	track_cmd_pdu(c, p, last);
	queue_pdu(p);
}

bool Conn::alloc_buffer(IscsiCmd *c, uint32_t len)
{
	// TCP: a heap buffer kept with the command slot and reused while large enough.
	if (c->heap_cap < len) {
		c->heap.reset(new uint8_t[len]);
		c->heap_cap = len;
	}
	c->data = c->heap.get();
	return true;
}

void Conn::data_transfer_failed(IscsiCmd *c)
{
	data_error(c);
}

void Conn::do_aborted(IscsiCmd *c)
{
	// No response of its own (the TMF response, or the session's end, covers it).
	c->state = IscsiCmd::State::Responding;
	scsi::cmd_put(&c->cmd);
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
			close_reason_ = kColdReset;
		}
		queue_pdu(p);
		pdus_out_++;
	}
	delete m;
	if (logout_pending_)
		maybe_finish_logout();
	maybe_done();
}

void Conn::do_release(IscsiCmd *c)
{
	c->core_released = true;
	c->state = IscsiCmd::State::Released;
	if (c->pdus_queued == 0)
		free_cmd(c);
}

// ---- Output ----------------------------------------------------------------------------------

OutPdu *Conn::new_pdu()
{
	OutPdu *p;
	if (pdu_free_.empty()) {
		pdu_pool_.push_back(std::make_unique<OutPdu>());
		p = pdu_pool_.back().get();
	} else {
		p = pdu_free_.back();
		pdu_free_.pop_back();
	}
	p->data = {};
	p->own.clear();
	p->hdr_len = 0;
	p->trailer_len = 0;
	p->cmd = nullptr;
	p->last_of_cmd = false;
	p->close_after = false;
	p->sent = 0;
	return p;
}

void Conn::finish_pdu(OutPdu *p, std::span<const uint8_t, kBhsLen> bhs)
{
	if (target_.cfg().trace)
		target_.log(peer_ + " " + describe("->", bhs, p->data.size()));
	const auto dsl = static_cast<uint32_t>(p->data.size());
	p->hdr_len = static_cast<uint8_t>(build_header(p->hdr, bhs, {}, dsl, digests_.header));
	uint32_t crc = kCrc32cInit;
	if (digests_.data && dsl)
		crc = crc32c_update(crc, p->data);
	p->trailer_len = static_cast<uint8_t>(build_trailer(p->trailer, dsl, crc, digests_.data));
}

void Conn::send_reject(RejectReason r, std::span<const uint8_t> bhs)
{
	OutPdu *p = new_pdu();
	Bhs b{};
	RejectPdu h;
	h.reason = r;
	encode(h, b);
	put_be32(b.data() + 16, kReservedTag); // 11.17: ITT reserved
	fill_sn(b.data(), true);
	// 11.17: the data segment is the rejected PDU's header.
	p->own.assign(bhs.begin(), bhs.begin() + std::min<size_t>(bhs.size(), kBhsLen));
	p->data = p->own;
	finish_pdu(p, b);
	queue_pdu(p);
	pdus_out_++;
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

void Conn::pdu_done(OutPdu *p, bool sent)
{
	pdus_out_--;
	IscsiCmd *c = p->cmd;
	const bool last = p->last_of_cmd;
	const bool close = p->close_after; // sent or not: close
	pdu_free_.push_back(p);
	if (c) {
		c->pdus_queued--;
		if (last && c->local)
			free_cmd(c); // answered here, never submitted: nothing to put
		else if (last)
			scsi::cmd_put(&c->cmd); // the response went out (or never will)
		else if (c->core_released && c->pdus_queued == 0)
			free_cmd(c);
	}
	if (close)
		start_closing(state_ == ConnState::Login ? "login failed"
		              : close_reason_.empty()    ? "logged out"
		                                         : close_reason_);
	maybe_done();
}

// ---- Timers ----------------------------------------------------------------------------------

void Conn::on_tick(clock::time_point now)
{
	const TargetConfig &cfg = target_.cfg();
	if (state_ == ConnState::Login && now - born_ > cfg.login_timeout) {
		fail("login not finished in time");
		return;
	}
	if (state_ != ConnState::FullFeature || cfg.nop_interval.count() == 0)
		return;
	if (ping_ttt_ != kReservedTag) {
		if (now > ping_deadline_)
			fail("no answer to NOP-In ping");
		return;
	}
	if (now >= next_ping_) {
		// 11.19: a ping with a TTT the initiator must echo; StatSN not advanced.
		ping_ttt_ = next_ttt_++;
		if (next_ttt_ == kReservedTag)
			next_ttt_ = 1;
		send_nop_in(kReservedTag, ping_ttt_, {}, false);
		ping_deadline_ = now + cfg.nop_timeout;
		next_ping_ = now + cfg.nop_interval;
	}
}

// ---- Teardown --------------------------------------------------------------------------------

void Conn::fail(const std::string &why)
{
	start_closing(why);
}

void Conn::on_transport_error(const std::string &why)
{
	start_closing(why);
}

void Conn::start_closing(const std::string &why)
{
	if (state_ == ConnState::Closing || state_ == ConnState::Done)
		return;
	const bool was_ffp = state_ != ConnState::Login;
	// The Logout Response is out: the initiator may close before our send completes
	// (over iSER its disconnect can beat the SEND's completion). Not a lost connection.
	const bool answered_logout = state_ == ConnState::LoggingOut && !logout_pending_;
	state_ = ConnState::Closing;
	if (was_ffp && why != "logged out" && !answered_logout &&
	    !reaping_) // reaping: sess_ may be gone
		target_.log("connection lost: " + sess_->params.initiator_name + " from " + peer_ +
		            ": " + why);
	// Queued PDUs come back through pdu_done(p, false): their commands are put.
	if (!transport_closed_) {
		transport_closed_ = true;
		close_transport();
	}
	if (itt_table_) {
		// Commands never submitted are ours alone; those waiting for data-out get a
		// failed transfer (the core answers, the answer is dropped); held responses are
		// dropped.
		while (!waiting_.empty()) {
			IscsiCmd &c = waiting_.front();
			waiting_.pop_front();
			free_cmd(&c);
		}
		std::vector<IscsiCmd *> live;
		for (IscsiCmd &c : *itt_table_)
			live.push_back(&c);
		for (IscsiCmd *c : live) {
			if (c->wp) {
				c->wp = false;
				scsi::write_done(&c->cmd, false);
			} else if (c->rsp_held) {
				c->rsp_held = false;
				scsi::cmd_put(&c->cmd);
			}
		}
	}
	if (sess_ && !reaping_) {
		reaping_ = true;
		// The nexus is lost now, not when the reaper gets to it: an initiator that
		// reconnects at once must find its reservation and medium lock gone
		// (libiscsi PreventAllow.ITNexusLoss). Nothing here waits.
		if (sess_->scsi)
			sess_->scsi->tpg().session_lost(sess_->scsi);
		target_.close_session(sess_, [this] { post(ConnEvent::ReapDone, nullptr); });
	} else if (!sess_) {
		reaped_ = true;
	}
	maybe_done();
}

void Conn::maybe_done()
{
	if (state_ != ConnState::Closing || !reaped_ || live_ || tmrs_out_ || pdus_out_)
		return;
	state_ = ConnState::Done;
}

} // namespace ulp::iscsi::target
