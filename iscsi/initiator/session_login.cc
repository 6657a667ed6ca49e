// SPDX-License-Identifier: MIT
// iscsi/initiator/session_login.cc - the initiator session's login phase (RFC 7143 6.3, 11.12,
// 11.13): connect, drive InitiatorLogin over the transport (bounded by login_timeout),
// follow redirects, and enter the full feature phase with the negotiated parameters.
#include "iscsi/initiator/session.h"

#include "core/log.h"
#include "iscsi/initiator/task.h"

#include <cstdio>

namespace ulp::iscsi::initiator
{

using clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

namespace
{

constexpr uint32_t kLoginItt = 0;   // ITT of every Login Request
constexpr uint32_t kFirstCmdsn = 1; // CmdSN of the leading login

} // namespace

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
		ULP_LOG(Info, Iscsi, "{}", "login redirected to " + portal_str(next));
		at = next;
		change_state(&state_, SessionState::Idle, kSessionStates, this);
		error_.clear();
		login_status_ = LoginStatus::Success;
		login_error_ = InitiatorLoginError::None;
	}
}

bool Session::login_once(const Portal &portal, Portal *redirect)
{
	change_state(&state_, SessionState::LoggingIn, kSessionStates, this);
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
	tp_->login_prefs(lc.prefs);
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
			if (!tp_->poll(std::chrono::ceil<milliseconds>(deadline - now)) &&
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
	// RFC 7143 11.12.8: the Login Request is immediate, so the first non-immediate command
	// carries the login's own CmdSN ("if the leading login carries the CmdSN 123 ... the
	// first non-immediate command in Full Feature Phase also carries the CmdSN 123"), as
	// Linux's initiator does. Not the final response's ExpCmdSN: tgt 1.0.85's iSER login
	// answers ExpCmdSN one above the login's CmdSN yet expects the login's CmdSN next, so
	// taking ExpCmdSN left a CmdSN gap and tgtd never ran a command (tests/vm/iser_lio.sh).
	// For a target that answers ExpCmdSN = the login's CmdSN, as RFC 7143 has it, the two
	// are the same.
	cmdsn_ = l.cmdsn();
	last_rx_ = clock::now();
	next_timer_check_ = last_rx_; // timers looked at from the first poll()
	change_state(&state_, SessionState::FullFeature, kSessionStates, this);
	ULP_LOG(Info, Iscsi, "{}",
	        "logged in to " +
	            (sparams_.type == SessionType::Discovery ? std::string("discovery")
	                                                     : sparams_.target_name) +
	            " at " + tp_->peer_address() + " tsih " + std::to_string(sparams_.tsih));
}

} // namespace ulp::iscsi::initiator
