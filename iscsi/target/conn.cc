// SPDX-License-Identifier: MIT
// iscsi/target/conn.cc - one iSCSI connection, target side (see conn.h).
#include "iscsi/target/conn.h"

#include "core/log.h"

#include "core/crc32c.h"
#include "scsi/core.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

namespace ulp::iscsi::target
{

using clock = std::chrono::steady_clock;

namespace
{
// A counter only the owner thread writes: no read-modify-write needed.
void bump(std::atomic<uint64_t> &c)
{
	c.store(c.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
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
		auto n = c_.target_.find_node(name);
		if (!n)
			return LoginStatus::NotFound;
		if (!n->redirect.empty()) {
			info->redirect_address = n->redirect;
			return n->redirect_permanent ? LoginStatus::TargetMovedPerm
			                             : LoginStatus::TargetMovedTemp;
		}
		// The portal group of the portal this connection came in on (RFC 7143 4.4.1);
		// a portal of none of the node's groups does not reach it.
		scsi::Tpg *tpg = nullptr;
		if (!c_.target_.portal_group(*n, c_.local(), &info->tpgt, &tpg))
			return LoginStatus::NotFound;
		info->alias = n->alias;
		return LoginStatus::Success;
	}
	bool authorize(const LoginIdentity &id) override
	{
		if (id.type == SessionType::Discovery)
			return true; // visibility is filtered in SendTargets
		auto n = c_.target_.find_node(id.target_name);
		if (n && !addr_allowed(n->allowed_addresses, c_.peer())) {
			// Said once in a while: a scanner must not fill the log.
			ULP_LOG_RATELIMITED(Warn, Iscsi,
			                    "{}: login of {} to {} refused: source address not in "
			                    "the target's allowed addresses",
			                    c_.peer(), id.initiator_name, id.target_name);
			return false;
		}
		uint16_t tag = 0;
		scsi::Tpg *tpg = nullptr;
		return n && c_.target_.portal_group(*n, c_.local(), &tag, &tpg) &&
		       tpg->allowed(std::string(id.initiator_name));
	}
	AuthPolicy auth_policy(const LoginIdentity &id) override
	{
		AuthPolicy p;
		if (id.type == SessionType::Discovery) {
			p.allow_chap = !c_.target_.cfg().discovery_chap.empty();
			p.allow_none = !c_.target_.cfg().discovery_require_chap;
			return p;
		}
		auto n = c_.target_.find_node(id.target_name);
		p.allow_chap = n && !n->chap.empty();
		// An initiator with a secret of its own must prove it, whatever the others may do
		// (RFC 7143 12.1.3: the target authenticates whom it chooses).
		p.allow_none =
		    !(n && (n->require_chap || n->chap.count(std::string(id.initiator_name))));
		return p;
	}
	bool chap_credentials(const LoginIdentity &id, ChapCredentials *out) override
	{
		const std::map<std::string, ChapCredentials> *m = nullptr;
		std::shared_ptr<const TargetNode> n; // keeps *m while it is read
		if (id.type == SessionType::Discovery) {
			m = &c_.target_.cfg().discovery_chap;
		} else if ((n = c_.target_.find_node(id.target_name))) {
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

Conn::Conn(Target &target, Transport transport, std::string peer, std::string local, Mode mode)
    : Serial(mode), target_(target), transport_(transport), peer_(std::move(peer)),
      local_(std::move(local)), born_(clock::now())
{
	target_.add_conn(this);
}

Conn::~Conn()
{
	ULP_CHECK(detached_, "a connection freed while still in its target's list");
}

void Conn::Discovery::visible_targets(std::string_view initiator_name,
                                      std::vector<DiscoveryTarget> *out)
{
	c.target_.visible_targets(initiator_name, c.peer(), out);
}

void Conn::detach()
{
	// The target's list first: stop() posts to the connections in it, under its lock.
	target_.remove_conn(this);
	quiesce(); // no post() is still inside the inbox: none will come either
	detached_ = true;
}

void Conn::on_pdu(const Pdu &pdu, PduError err)
{
	bump(gauges_.pdus_in);
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
		ULP_LOG(Info, Iscsi, "{}",
		        "login failed: " + peer_ + ": " + login_status_name(login_->status()) +
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
	change_state(&state_, ConnState::FullFeature, kConnStates, this);
	const SessionParams &sp = sess_->params; // sess_->conn is this (create_session)
	node_ = sess_->node.get();
	target_.login_done(sess_, cparams_);

	TextResponderConfig tc;
	tc.type = sp.type;
	tc.initiator_name = sp.initiator_name;
	tc.target_name = sp.target_name;
	tc.max_send_dsl = max_send_dsl_;
	text_ = std::make_unique<TextResponder>(tc, discovery_);

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
	ULP_LOG(Info, Iscsi, "{}",
	        "login: " + sp.initiator_name + " from " + peer_ +
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

void Conn::fill_sn(uint8_t *bhs, bool advance_statsn)
{
	put_be32(bhs + 24, advance_statsn ? statsn_++ : statsn_);
	const uint32_t max = max_cmdsn();
	put_be32(bhs + 28, exp_cmdsn_);
	put_be32(bhs + 32, max);
	gauges_.exp_cmdsn.store(exp_cmdsn_, std::memory_order_relaxed);
	gauges_.max_cmdsn.store(max, std::memory_order_relaxed);
	gauges_.cmds.store(live_, std::memory_order_relaxed);
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
		ULP_LOG(Info, Iscsi, "{}",
		        peer_ + " " + describe("<-", pdu.bhs, pdu.data.size()) +
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

// ---- SCSI core events --------------------------------------------------------------------

void Conn::run_event(ConnEvent ev, ConnArg arg)
{
	switch (ev) {
	case ConnEvent::WritePending:
		do_write_pending(arg.cmd);
		break;
	case ConnEvent::AbortWrite:
		do_abort_write(arg.cmd);
		break;
	case ConnEvent::DataIn:
		do_data_in(arg.cmd);
		break;
	case ConnEvent::Status:
		do_status(arg.cmd);
		break;
	case ConnEvent::AbortedTask:
		do_aborted(arg.cmd);
		break;
	case ConnEvent::TmRsp:
		do_tm_rsp(arg.tmr);
		break;
	case ConnEvent::Release:
		do_release(arg.cmd);
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
		start_closing(arg.why ? arg.why : "dropped by the target");
		break;
	case ConnEvent::Transport:
		transport_event();
		break;
	}
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
		ULP_LOG(Info, Iscsi, "{}", peer_ + " " + describe("->", bhs, p->data.size()));
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

void Conn::pdu_done(OutPdu *p, bool sent)
{
	pdus_out_--;
	if (sent)
		bump(gauges_.pdus_out);
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
	if (close && state_ == ConnState::Login)
		start_closing("login failed");
	else if (close && close_why_)
		start_closing(close_why_);
	else if (close)
		start_closing("logged out", Ending::LoggedOut);
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

void Conn::start_closing(const std::string &why, Ending how)
{
	if (state_ == ConnState::Closing || state_ == ConnState::Done)
		return;
	const bool was_ffp = state_ != ConnState::Login;
	// The Logout Response is out: the initiator may close before our send completes
	// (over iSER its disconnect can beat the SEND's completion). Not a lost connection.
	const bool answered_logout = state_ == ConnState::LoggingOut && !logout_pending_;
	change_state(&state_, ConnState::Closing, kConnStates, this);
	if (was_ffp && how == Ending::Lost && !answered_logout &&
	    !reaping_) // reaping: sess_ may be gone
		ULP_LOG(Warn, Iscsi, "{}",
		        "connection lost: " + sess_->params.initiator_name + " from " + peer_ +
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
		target_.close_session(sess_, [this] { post(ConnEvent::ReapDone, {}); });
	} else if (!sess_) {
		reaped_ = true;
	}
	maybe_done();
}

void Conn::maybe_done()
{
	if (state_ != ConnState::Closing || !reaped_ || live_ || tmrs_out_ || pdus_out_)
		return;
	change_state(&state_, ConnState::Done, kConnStates, this);
}

} // namespace ulp::iscsi::target
