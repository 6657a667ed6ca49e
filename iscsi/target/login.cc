// SPDX-License-Identifier: MIT
// iscsi/target/login.cc - target-side login state machine (RFC 7143 6.3, 11.12, 11.13).
#include "iscsi/target/login.h"
#include "core/check.h"

namespace ulp::iscsi::target
{

const char *target_login_state_name(TargetLoginState s)
{
	switch (s) {
	case TargetLoginState::Initial:
		return "initial";
	case TargetLoginState::Security:
		return "security";
	case TargetLoginState::Operational:
		return "operational";
	case TargetLoginState::RecvText:
		return "receiving text";
	case TargetLoginState::SendText:
		return "sending text";
	case TargetLoginState::FullFeature:
		return "full feature";
	case TargetLoginState::Failed:
		return "failed";
	}
	return "?";
}

namespace
{

TargetLoginState state_of(Stage s)
{
	return s == Stage::Security ? TargetLoginState::Security : TargetLoginState::Operational;
}

} // namespace

TargetLogin::TargetLogin(const TargetLoginConfig &cfg, LoginHandler &handler)
    : cfg_(cfg), handler_(handler), neg_(Role::Target, cfg.transport, cfg.prefs), in_(cfg.max_text),
      statsn_(cfg.initial_statsn)
{
}

TargetLogin::~TargetLogin() = default;

void TargetLogin::set_state(TargetLoginState s)
{
	change_state(&state_, s, kTargetLoginStates, this);
}

bool TargetLogin::fail(LoginStatus s, std::string why)
{
	if (status_ == LoginStatus::Success) {
		status_ = s;
		why_ = std::move(why);
	}
	return false;
}

LoginIdentity TargetLogin::identity() const
{
	LoginIdentity id;
	id.type = type_;
	id.initiator_name = initiator_name_;
	id.target_name = target_name_;
	id.isid = first_.isid;
	id.tsih = first_.tsih;
	id.cid = first_.cid;
	id.cmdsn = first_.cmdsn;
	id.exp_statsn = first_.exp_statsn;
	id.transport = cfg_.transport;
	return id;
}

LoginStep TargetLogin::reject(LoginStatus s, std::string why, std::span<uint8_t> rsp,
                              size_t *rsp_len, std::span<const uint8_t> data)
{
	fail(s, std::move(why));
	set_state(TargetLoginState::Failed);
	// 11.13: a Login reject carries the Status and echoes the request's identifiers; T=0.
	LoginRsp r;
	r.csg = stage_;
	r.isid = first_.isid;
	r.tsih = first_.tsih;
	r.itt = first_.itt;
	r.statsn = statsn_++;
	r.exp_cmdsn = exp_cmdsn_;
	r.max_cmdsn = max_cmdsn_;
	r.status = status_;
	Bhs bhs;
	encode(r, bhs);
	// The data (a redirect's TargetAddress) is dropped rather than sent past the
	// initiator's limit.
	if (data.size() > cfg_.login_max_dsl)
		data = {};
	*rsp_len = build_pdu(rsp, bhs, {}, data, {});
	return LoginStep::Failed;
}

LoginStep TargetLogin::emit(std::span<uint8_t> rsp, size_t *rsp_len)
{
	// 13.12: the initiator receives at most its MaxRecvDataSegmentLength, 8192 until it
	// declared one; never more than our own limit for login responses.
	uint32_t max = cfg_.login_max_dsl;
	if (neg_.received(KeyId::MaxRecvDataSegmentLength))
		max = std::min<uint32_t>(
		    max, static_cast<uint32_t>(neg_.value(KeyId::MaxRecvDataSegmentLength)));
	std::span<const uint8_t> piece = out_.next(max);
	const bool more = out_.more();
	const bool transit = !more && pending_transit_;

	LoginRsp r;
	r.transit = transit;
	r.cont = more; // 11.13 (C bit): C=1 only with T=0
	r.csg = stage_;
	r.nsg = transit ? pending_nsg_ : Stage::Security;
	r.isid = first_.isid;
	// 11.13 (TSIH): the TSIH of the request, except in the final response of a new session.
	r.tsih = transit && pending_nsg_ == Stage::FullFeature ? tsih_ : first_.tsih;
	r.itt = first_.itt;
	r.statsn = statsn_++;
	r.exp_cmdsn = exp_cmdsn_;
	r.max_cmdsn = max_cmdsn_;
	Bhs bhs;
	encode(r, bhs);
	*rsp_len = build_pdu(rsp, bhs, {}, piece, {});
	if (!*rsp_len) {
		statsn_--;
		return reject(LoginStatus::TargetError, "response buffer too small", rsp, rsp_len);
	}
	if (more) {
		set_state(TargetLoginState::SendText);
		return LoginStep::Continue;
	}
	if (transit) {
		stage_ = pending_nsg_;
		if (stage_ == Stage::FullFeature) {
			set_state(TargetLoginState::FullFeature);
			return LoginStep::Complete;
		}
	}
	set_state(state_of(stage_));
	return LoginStep::Continue;
}

LoginStep TargetLogin::on_request(const Pdu &req, std::span<uint8_t> rsp, size_t *rsp_len)
{
	*rsp_len = 0;
	if (state_ == TargetLoginState::FullFeature || state_ == TargetLoginState::Failed) {
		ULP_CHECK(false, "TargetLogin::on_request after the login ended");
		return LoginStep::Failed;
	}
	if (req.bhs.size() < kBhsLen)
		return reject(LoginStatus::InitiatorError, "short PDU", rsp, rsp_len);
	const bool first = state_ == TargetLoginState::Initial;
	LoginReq h;
	if (!decode(req.bhs, &h)) {
		if (first)
			first_.itt = req.itt();
		// 11.13 (Status-Detail 0x0b): "Invalid request type during login".
		return reject(LoginStatus::InvalidDuringLogin, "non-login PDU during login", rsp,
		              rsp_len);
	}
	if (first) {
		first_ = h;
		exp_cmdsn_ = max_cmdsn_ = h.cmdsn;
		if (h.csg == Stage::Security || h.csg == Stage::Operational)
			stage_ = h.csg; // else the CSG check below rejects it
		// 11.12 (Version-max/min): Version-max >= Version-min; we speak version 0 only.
		if (h.version_min > h.version_max)
			return reject(LoginStatus::InitiatorError, "Version-min above Version-max",
			              rsp, rsp_len);
		if (h.version_min > kIscsiVersion)
			return reject(LoginStatus::UnsupportedVersion, "no common version", rsp,
			              rsp_len);
		neg_.set_leading(h.tsih == 0);
	} else if (h.isid != first_.isid || h.tsih != first_.tsih || h.cid != first_.cid ||
	           h.itt != first_.itt || h.version_max != first_.version_max ||
	           h.version_min != first_.version_min) {
		// 11.12: ISID, TSIH, CID, ITT and the versions stay the same for the whole login
		// (LIO checks the same fields).
		return reject(LoginStatus::InitiatorError, "login identifiers changed", rsp,
		              rsp_len);
	}
	// 11.12 (C bit): C=1 requires T=0.
	if (h.transit && h.cont)
		return reject(LoginStatus::InitiatorError, "T and C both set", rsp, rsp_len);
	// 11.12 (CSG, NSG): CSG is 0 or 1 during login; with T=1, NSG is past CSG and not the
	// reserved 2.
	if (h.csg != Stage::Security && h.csg != Stage::Operational)
		return reject(LoginStatus::InitiatorError, "invalid CSG", rsp, rsp_len);
	if (h.transit && (h.nsg == static_cast<Stage>(2) ||
	                  static_cast<uint8_t>(h.nsg) <= static_cast<uint8_t>(h.csg)))
		return reject(LoginStatus::InitiatorError, "impossible stage transition", rsp,
		              rsp_len);
	if (h.csg != stage_)
		return reject(LoginStatus::InitiatorError, "CSG changed without a transition", rsp,
		              rsp_len);

	if (state_ == TargetLoginState::SendText) {
		// The initiator acknowledges a C=1 response piece with an empty request.
		if (!req.data.empty() || h.cont)
			return reject(LoginStatus::InitiatorError,
			              "text while the response continues", rsp, rsp_len);
		return emit(rsp, rsp_len);
	}
	if (!in_.append(req.data))
		return reject(LoginStatus::OutOfResources, "login text longer than accepted", rsp,
		              rsp_len);
	if (h.cont) {
		// 6.1: the LTDS continues; acknowledge with an empty response.
		out_.reset({});
		pending_transit_ = false;
		LoginStep step = emit(rsp, rsp_len);
		if (step == LoginStep::Continue)
			set_state(TargetLoginState::RecvText);
		return step;
	}

	// The LTDS is complete.
	std::vector<uint8_t> ltds(in_.text().begin(), in_.text().end());
	in_.clear();
	TextWriter reply;
	if (!process(h, ltds, reply)) {
		std::span<const uint8_t> data;
		TextWriter addr;
		if (!redirect_.empty()) {
			addr.add("TargetAddress", redirect_);
			data = addr.bytes();
		}
		return reject(status_, why_, rsp, rsp_len, data);
	}
	out_.reset(reply.bytes());
	return emit(rsp, rsp_len);
}

bool TargetLogin::process(const LoginReq &h, std::span<const uint8_t> ltds, TextWriter &reply)
{
	std::vector<KeyValue> pairs;
	if (TextError te = parse_text(ltds, &pairs); te != TextError::None)
		return fail(LoginStatus::InitiatorError, text_error_name(te));
	const bool had_type = neg_.received(KeyId::SessionType);
	const bool had_tn = neg_.received(KeyId::TargetName);
	const bool had_in = neg_.received(KeyId::InitiatorName);
	SecurityKeys sec;
	if (!neg_.receive(pairs, stage_, reply, &sec))
		return fail(neg_.error().status, neg_.error().why);

	if (first_ltds_) {
		first_ltds_ = false;
		if (!identify(h, reply))
			return false;
	} else if (neg_.received(KeyId::SessionType) != had_type ||
	           neg_.received(KeyId::TargetName) != had_tn ||
	           neg_.received(KeyId::InitiatorName) != had_in) {
		// 13.4, 13.5: the names MUST be in the first request; 13.21: SessionType SHOULD be,
		// and the target already chose the session's handling from it.
		return fail(LoginStatus::InitiatorError,
		            "names or SessionType after the first request");
	}

	if (stage_ == Stage::Security && !security(sec, reply))
		return false;
	// 13.12: declare our MaxRecvDataSegmentLength (TCP; on iSER the RFC 7145 lengths
	// replace it, except in discovery sessions, which negotiate no RDMAExtensions).
	if (stage_ == Stage::Operational &&
	    (cfg_.transport == Transport::Tcp || type_ == SessionType::Discovery))
		neg_.declare_mrdsl(reply);

	// T: the initiator asks to move on; we agree unless authentication is unfinished.
	bool transit = false;
	if (h.transit) {
		if (stage_ == Stage::Security && auth_ == Auth::Start) {
			// No AuthMethod was negotiated: its default, None, applies (12.1).
			if (!policy_.allow_none)
				return fail(LoginStatus::AuthFailure, "authentication required");
			auth_ = Auth::Done;
			conn_.auth = AuthMethod::None;
		}
		transit = stage_ != Stage::Security || auth_ == Auth::Done;
	}
	pending_transit_ = transit;
	pending_nsg_ = h.nsg;
	if (transit && h.nsg == Stage::FullFeature)
		return finalize();
	return true;
}

bool TargetLogin::identify(const LoginReq &h, TextWriter &reply)
{
	// 13.5: InitiatorName MUST be in the first Login Request.
	if (!neg_.received(KeyId::InitiatorName))
		return fail(LoginStatus::MissingParameter, "InitiatorName missing");
	initiator_name_ = neg_.peer_string(KeyId::InitiatorName);
	type_ = neg_.session_type();
	if (type_ == SessionType::Discovery) {
		if (!cfg_.allow_discovery)
			return fail(LoginStatus::SessionTypeNotSupported, "discovery not allowed");
	} else {
		// 13.4: TargetName MUST be in the first request of a normal session.
		if (!neg_.received(KeyId::TargetName))
			return fail(LoginStatus::MissingParameter, "TargetName missing");
		target_name_ = neg_.peer_string(KeyId::TargetName);
		LoginStatus s = handler_.find_target(target_name_, &target_);
		if (s == LoginStatus::TargetMovedTemp || s == LoginStatus::TargetMovedPerm)
			redirect_ = target_.redirect_address;
		if (s != LoginStatus::Success)
			return fail(s, "target " + target_name_ + ": " + login_status_name(s));
	}
	const LoginIdentity id = identity();
	if (!handler_.authorize(id))
		return fail(LoginStatus::AuthzFailure,
		            initiator_name_ + " may not use " +
		                (target_name_.empty() ? "discovery" : target_name_));
	policy_ = handler_.auth_policy(id);
	if (h.tsih != 0) {
		LoginStatus s = handler_.find_session(id, &existing_);
		if (s != LoginStatus::Success)
			return fail(s,
			            "TSIH " + std::to_string(h.tsih) + ": " + login_status_name(s));
		if (existing_.type != type_)
			return fail(LoginStatus::CantIncludeInSession, "session type differs");
		neg_.inherit(existing_);
	}
	if (stage_ == Stage::Operational) {
		// 6.3: the initiator skipped the security stage, which is only allowed when no
		// authentication is wanted.
		if (!policy_.allow_none)
			return fail(LoginStatus::AuthFailure,
			            "security stage skipped, authentication required");
		auth_ = Auth::Done;
		conn_.auth = AuthMethod::None;
	}
	if (type_ == SessionType::Normal) {
		// 13.9: TargetPortalGroupTag in the response to the first request naming a target;
		// 13.6: TargetAlias when configured.
		reply.add_num("TargetPortalGroupTag", target_.tpgt);
		if (!target_.alias.empty())
			reply.add("TargetAlias", target_.alias);
	}
	return true;
}

bool TargetLogin::security(const SecurityKeys &sec, TextWriter &reply)
{
	ChapKeys ck{sec.chap_a, sec.chap_i, sec.chap_c, sec.chap_n, sec.chap_r};
	const bool chap_keys = ck.a || ck.i || ck.c || ck.n || ck.r;
	switch (auth_) {
	case Auth::Start: {
		if (!sec.auth_method) {
			if (chap_keys)
				return fail(LoginStatus::InitiatorError,
				            "CHAP keys before AuthMethod=CHAP");
			return true;
		}
		std::vector<std::string_view> items;
		if (!split_list(*sec.auth_method, &items))
			return fail(LoginStatus::InitiatorError, "malformed AuthMethod");
		ChapCredentials cred;
		bool have_cred = false, cred_asked = false;
		// 6.2.1: the first method in the initiator's order that we accept.
		for (std::string_view m : items) {
			if (m == "None" && policy_.allow_none) {
				reply.add("AuthMethod", "None");
				auth_ = Auth::Done;
				conn_.auth = AuthMethod::None;
				if (chap_keys)
					return fail(LoginStatus::InitiatorError,
					            "CHAP keys with AuthMethod=None");
				return true;
			}
			if (m == "CHAP" && policy_.allow_chap) {
				if (!cred_asked) {
					have_cred = handler_.chap_credentials(identity(), &cred);
					cred_asked = true;
				}
				if (!have_cred)
					continue;
				reply.add("AuthMethod", "CHAP");
				auth_ = Auth::Chap;
				conn_.auth = AuthMethod::Chap;
				chap_ = std::make_unique<ChapTarget>(cfg_.chap, std::move(cred));
				if (!ck.a) {
					if (chap_keys)
						return fail(LoginStatus::InitiatorError,
						            "CHAP keys out of order");
					return true;
				}
				break; // CHAP_A came along: answer it now
			}
		}
		if (auth_ == Auth::Start) {
			reply.add("AuthMethod", "Reject");
			return fail(LoginStatus::AuthFailure,
			            "no acceptable AuthMethod in " + std::string(*sec.auth_method));
		}
		break;
	}
	case Auth::Chap:
		break;
	case Auth::Done:
		if (sec.any())
			return fail(LoginStatus::InitiatorError,
			            "security keys after authentication");
		return true;
	}
	// Auth::Chap: one CHAP step.
	if (!chap_keys)
		return true; // an empty request (waiting, or T=1 too early): no progress
	switch (chap_->step(ck, reply)) {
	case ChapStatus::Continue:
		return true;
	case ChapStatus::Done:
		auth_ = Auth::Done;
		conn_.mutual_auth = chap_->mutual();
		return true;
	case ChapStatus::Failed:
		return fail(LoginStatus::AuthFailure, "CHAP: " + chap_->why());
	case ChapStatus::Protocol:
		break;
	}
	return fail(LoginStatus::InitiatorError, "CHAP: " + chap_->why());
}

bool TargetLogin::finalize()
{
	SessionParams sp;
	ConnParams cp = conn_;
	if (!neg_.finish(&sp, &cp))
		return fail(neg_.error().status, neg_.error().why);
	// RFC 7145 6.3 (RDMAExtensions): an iSER connection is useless without RDMAExtensions=Yes
	// (there is no TCP stream to fall back to on InfiniBand or RoCE).
	if (cfg_.transport == Transport::Iser && type_ == SessionType::Normal &&
	    !sp.rdma_extensions)
		return fail(neg_.received(KeyId::RdmaExtensions) ? LoginStatus::InitiatorError
		                                                 : LoginStatus::MissingParameter,
		            "RDMAExtensions=Yes required on an iSER connection");
	sp.type = type_;
	sp.initiator_name = initiator_name_;
	sp.target_name = target_name_;
	sp.isid = first_.isid;
	sp.tsih = first_.tsih;
	if (type_ == SessionType::Normal) {
		sp.tpgt = target_.tpgt;
		sp.target_alias = target_.alias;
	}
	if (first_.tsih != 0) {
		// A connection joining a session: the session-wide values are the session's.
		std::string alias = sp.initiator_alias;
		sp = existing_;
		sp.initiator_alias = alias.empty() ? existing_.initiator_alias : alias;
	}
	cp.cid = first_.cid;
	cp.auth = conn_.auth;
	cp.mutual_auth = conn_.mutual_auth;

	SessionResult res = handler_.complete_login(identity(), sp, cp);
	if (res.status != LoginStatus::Success)
		return fail(res.status, std::string("session: ") + login_status_name(res.status));
	if (res.tsih == 0 || (first_.tsih != 0 && res.tsih != first_.tsih))
		return fail(LoginStatus::TargetError, "session layer returned a bad TSIH");
	tsih_ = res.tsih;
	sp.tsih = res.tsih;
	exp_cmdsn_ = res.exp_cmdsn;
	max_cmdsn_ = res.max_cmdsn;
	session_ = std::move(sp);
	conn_ = cp;
	return true;
}

} // namespace ulp::iscsi::target
