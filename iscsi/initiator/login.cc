// SPDX-License-Identifier: MIT
// iscsi/initiator/login.cc - initiator-side login (RFC 7143 6.3, 11.12, 11.13).
#include "iscsi/initiator/login.h"

#include <algorithm>

namespace ulp::iscsi::initiator
{

namespace
{

// A target that keeps answering without ever moving on is not negotiating: at most this
// many complete exchanges (LTDS answered), and this many PDUs (C=1 pieces included).
constexpr unsigned kMaxExchanges = 64;
constexpr unsigned kMaxPdus = 1u << 20;

} // namespace

const char *initiator_login_error_name(InitiatorLoginError e)
{
	switch (e) {
	case InitiatorLoginError::None:
		return "none";
	case InitiatorLoginError::TargetStatus:
		return "target rejected the login";
	case InitiatorLoginError::Protocol:
		return "protocol error";
	case InitiatorLoginError::Negotiation:
		return "negotiation failed";
	case InitiatorLoginError::Auth:
		return "authentication failed";
	}
	return "?";
}

InitiatorLogin::InitiatorLogin(InitiatorLoginConfig cfg)
    : cfg_(std::move(cfg)), neg_(Role::Initiator, cfg_.transport, cfg_.prefs),
      exp_statsn_(cfg_.exp_statsn)
{
	neg_.set_session_type(cfg_.type);
	neg_.set_leading(cfg_.tsih == 0);

	// 13.5, 13.4, 13.21: the names and the session type go in the first request.
	next_.add("InitiatorName", cfg_.initiator_name);
	if (!cfg_.initiator_alias.empty())
		next_.add("InitiatorAlias", cfg_.initiator_alias);
	if (cfg_.type == SessionType::Discovery) {
		next_.add("SessionType", "Discovery");
	} else {
		next_.add("SessionType", "Normal");
		next_.add("TargetName", cfg_.target_name);
	}
	for (const auto &[k, v] : cfg_.extra_first)
		next_.add(k, v);

	if (cfg_.skip_security) {
		stage_ = Stage::Operational;
		neg_.propose_operational(next_);
		for (const auto &[k, v] : cfg_.extra_operational)
			next_.add(k, v);
		proposed_ = true;
		queue(true, Stage::FullFeature);
		return;
	}
	stage_ = Stage::Security;
	if (cfg_.chap) {
		next_.add("AuthMethod", cfg_.offer_none ? "CHAP,None" : "CHAP");
	} else {
		next_.add("AuthMethod", "None");
		auth_done_ = true;
	}
	queue(auth_done_, after_security());
}

InitiatorLogin::~InitiatorLogin() = default;

Stage InitiatorLogin::after_security() const
{
	return cfg_.skip_operational ? Stage::FullFeature : Stage::Operational;
}

bool InitiatorLogin::ready_to_leave_security() const
{
	// With CHAP, T=1 goes with our CHAP_N/CHAP_R (as open-iscsi does); with mutual CHAP the
	// target answers with its own and moves on in the same response.
	return auth_done_ || (chap_ && chap_->state() == ChapInitiator::State::WaitTarget);
}

void InitiatorLogin::queue(bool transit, Stage nsg)
{
	out_.reset(next_.bytes());
	next_.clear();
	req_transit_ = transit;
	req_nsg_ = nsg;
	state_ = InitiatorLoginState::SendRequest;
}

LoginStep InitiatorLogin::failed(InitiatorLoginError e, std::string why)
{
	error_ = e;
	why_ = std::move(why);
	state_ = InitiatorLoginState::Failed;
	return LoginStep::Failed;
}

size_t InitiatorLogin::next_request(std::span<uint8_t> buf)
{
	if (state_ != InitiatorLoginState::SendRequest)
		return 0;
	LoginReq h;
	std::span<const uint8_t> piece;
	if (continuing_) {
		// Acknowledge a response piece that had C=1: an empty request, same T and NSG.
		h.transit = req_transit_;
	} else {
		piece = out_.next(cfg_.max_request_dsl);
		h.cont = out_.more();
		h.transit = !h.cont && req_transit_;
	}
	h.csg = stage_;
	h.nsg = h.transit ? req_nsg_ : Stage::Security;
	h.version_max = cfg_.version_max;
	h.version_min = cfg_.version_min;
	h.isid = cfg_.isid;
	h.tsih = cfg_.tsih;
	h.itt = cfg_.itt;
	h.cid = cfg_.cid;
	h.cmdsn = cfg_.cmdsn;
	// 11.12 (ExpStatSN): the first request carries the old connection's ExpStatSN
	// (reinstatement), later ones acknowledge the responses.
	h.exp_statsn = first_ ? cfg_.exp_statsn : exp_statsn_;
	Bhs bhs;
	encode(h, bhs);
	size_t n = build_pdu(buf, bhs, {}, piece, {});
	if (!n)
		return 0;
	first_ = false;
	state_ = InitiatorLoginState::WaitResponse;
	return n;
}

LoginStep InitiatorLogin::on_response(const Pdu &rsp)
{
	if (state_ != InitiatorLoginState::WaitResponse)
		return failed(InitiatorLoginError::Protocol, "response while none was due");
	if (++pdus_ > kMaxPdus)
		return failed(InitiatorLoginError::Protocol, "login does not converge");
	LoginRsp r;
	if (!decode(rsp.bhs, &r))
		return failed(InitiatorLoginError::Protocol, "not a Login Response");
	// A Login reject is believed even when it does not echo our ISID and ITT: tgt
	// (1.0.85) zeroes the whole header of its rejects, and the status is what the user
	// needs to see (11.13.5); the login fails either way.
	if (r.status == LoginStatus::Success && (r.itt != cfg_.itt || r.isid != cfg_.isid))
		return failed(InitiatorLoginError::Protocol, "response ITT or ISID differs");
	if (r.status != LoginStatus::Success) {
		status_ = r.status;
		// A redirect carries TargetAddress; anything else may carry nothing useful.
		std::vector<KeyValue> pairs;
		if (parse_text(rsp.data, &pairs) == TextError::None)
			for (const KeyValue &kv : pairs)
				if (kv.key == "TargetAddress")
					redirect_.emplace_back(kv.value);
		return failed(InitiatorLoginError::TargetStatus, login_status_name(r.status));
	}
	// 11.13 (Version-active): Version-active is one of ours; we only have 0.
	if (r.version_active != kIscsiVersion)
		return failed(InitiatorLoginError::Protocol, "Version-active is not 0");
	if (r.csg != stage_)
		return failed(InitiatorLoginError::Protocol, "response CSG is not ours");
	if (r.transit && r.cont)
		return failed(InitiatorLoginError::Protocol, "response has T and C");
	if (r.transit) {
		// 6.3: the target may only move on when we asked, and not past our NSG.
		const auto n = static_cast<uint8_t>(r.nsg);
		if (!req_transit_ || out_.more())
			return failed(InitiatorLoginError::Protocol, "target set T without our T");
		if (r.nsg == static_cast<Stage>(2) || n <= static_cast<uint8_t>(r.csg) ||
		    n > static_cast<uint8_t>(req_nsg_))
			return failed(InitiatorLoginError::Protocol, "impossible NSG in response");
	}
	exp_statsn_ = r.statsn + 1;
	exp_cmdsn_ = r.exp_cmdsn;
	max_cmdsn_ = r.max_cmdsn;

	if (out_.more()) {
		// Our request text continues: the target acknowledges a piece with an empty
		// response.
		if (!rsp.data.empty() || r.cont || r.transit)
			return failed(InitiatorLoginError::Protocol,
			              "non-empty answer to a C=1 request");
		state_ = InitiatorLoginState::SendRequest;
		return LoginStep::Continue;
	}
	if (!in_.append(rsp.data))
		return failed(InitiatorLoginError::Protocol, "response text too long");
	if (r.cont) {
		continuing_ = true;
		state_ = InitiatorLoginState::SendRequest;
		return LoginStep::Continue;
	}
	continuing_ = false;
	std::vector<uint8_t> ltds(in_.text().begin(), in_.text().end());
	in_.clear();
	return process(r, ltds);
}

LoginStep InitiatorLogin::process(const LoginRsp &r, std::span<const uint8_t> ltds)
{
	if (++exchanges_ > kMaxExchanges)
		return failed(InitiatorLoginError::Protocol, "login does not converge");
	std::vector<KeyValue> pairs;
	if (TextError te = parse_text(ltds, &pairs); te != TextError::None)
		return failed(InitiatorLoginError::Protocol, text_error_name(te));
	SecurityKeys sec;
	if (!neg_.receive(pairs, stage_, next_, &sec))
		return failed(InitiatorLoginError::Protocol, neg_.error().why);
	if (stage_ == Stage::Security) {
		if (security(sec) == LoginStep::Failed)
			return LoginStep::Failed;
		if (r.transit && !auth_done_)
			return failed(InitiatorLoginError::Auth,
			              "target left the security stage before "
			              "authentication completed");
	}
	if (r.transit) {
		if (r.nsg == Stage::FullFeature)
			return finish(r.tsih);
		stage_ = r.nsg;
	}
	if (stage_ == Stage::Operational) {
		if (!proposed_) {
			neg_.propose_operational(next_);
			for (const auto &[k, v] : cfg_.extra_operational)
				next_.add(k, v);
			proposed_ = true;
		}
		queue(true, Stage::FullFeature);
	} else {
		queue(ready_to_leave_security(), after_security());
	}
	return LoginStep::Continue;
}

LoginStep InitiatorLogin::security(const SecurityKeys &sec)
{
	if (sec.auth_method) {
		std::string_view m = *sec.auth_method;
		const bool offered_none = !cfg_.chap || cfg_.offer_none;
		if (m == "None" && offered_none) {
			auth_done_ = true;
			conn_.auth = AuthMethod::None;
		} else if (m == "CHAP" && cfg_.chap && !chap_) {
			chap_ = std::make_unique<ChapInitiator>(cfg_.chap_policy, *cfg_.chap,
			                                        cfg_.mutual);
			chap_->start(next_);
			conn_.auth = AuthMethod::Chap;
		} else if (m == "Reject") {
			return failed(InitiatorLoginError::Auth, "target rejected AuthMethod");
		} else {
			return failed(InitiatorLoginError::Protocol,
			              "AuthMethod=" + std::string(m) + " was not offered");
		}
	}
	ChapKeys ck{sec.chap_a, sec.chap_i, sec.chap_c, sec.chap_n, sec.chap_r};
	if (!(ck.a || ck.i || ck.c || ck.n || ck.r))
		return LoginStep::Continue;
	if (!chap_ || chap_->state() == ChapInitiator::State::Start)
		return failed(InitiatorLoginError::Protocol, "CHAP keys without AuthMethod=CHAP");
	switch (chap_->step(ck, next_)) {
	case ChapStatus::Continue:
		return LoginStep::Continue;
	case ChapStatus::Done:
		auth_done_ = true;
		conn_.mutual_auth = cfg_.mutual.has_value();
		return LoginStep::Continue;
	case ChapStatus::Failed:
		return failed(InitiatorLoginError::Auth, "CHAP: " + chap_->why());
	case ChapStatus::Protocol:
		break;
	}
	return failed(InitiatorLoginError::Protocol, "CHAP: " + chap_->why());
}

LoginStep InitiatorLogin::finish(uint16_t tsih)
{
	const AuthMethod auth = conn_.auth;
	const bool mutual = conn_.mutual_auth;
	if (!neg_.finish(&session_, &conn_))
		return failed(InitiatorLoginError::Protocol, neg_.error().why);
	conn_.auth = auth;
	conn_.mutual_auth = mutual;
	conn_.cid = cfg_.cid;
	// A digest we do not accept can be the outcome of a Reject (the default None stays).
	auto ok = [](Digest d, const std::vector<Digest> &l) {
		return std::find(l.begin(), l.end(), d) != l.end();
	};
	if (cfg_.transport == Transport::Tcp &&
	    (!ok(conn_.header_digest, cfg_.prefs.header_digests) ||
	     !ok(conn_.data_digest, cfg_.prefs.data_digests)))
		return failed(InitiatorLoginError::Negotiation, "no acceptable digest");
	if (cfg_.transport == Transport::Iser && cfg_.type == SessionType::Normal &&
	    !session_.rdma_extensions)
		return failed(InitiatorLoginError::Negotiation,
		              "target refused RDMAExtensions=Yes");
	// 11.13 (TSIH): the final response of a new session carries its non-zero TSIH; a joining
	// connection gets the session's.
	if (tsih == 0 || (cfg_.tsih != 0 && tsih != cfg_.tsih))
		return failed(InitiatorLoginError::Protocol, "bad TSIH in the final response");
	session_.type = cfg_.type;
	session_.initiator_name = cfg_.initiator_name;
	session_.initiator_alias = cfg_.initiator_alias;
	session_.target_name = cfg_.type == SessionType::Normal ? cfg_.target_name : std::string();
	session_.isid = cfg_.isid;
	session_.tsih = tsih;
	state_ = InitiatorLoginState::Complete;
	return LoginStep::Complete;
}

} // namespace ulp::iscsi::initiator
