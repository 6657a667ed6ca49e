// SPDX-License-Identifier: MIT
// iscsi/initiator/login.h - the initiator side of the iSCSI login phase (RFC 7143 6.3,
// 11.12, 11.13).
//
// Drives one connection's login for a configuration (names, ISID/TSIH/CID, CHAP secrets,
// the operational values to propose, TCP or iSER) and ends with the negotiated parameters
// or a clear error, including the status class and detail a target sent. The project's
// initiator client uses it over sockets and iSER; the tests use it to drive TargetLogin in
// memory. The loop:
//
//	while (login.state() == InitiatorLoginState::SendRequest) {
//		len = login.next_request(buf);    // send buf[0..len)
//		... receive and parse a PDU ...
//		step = login.on_response(pdu);    // Continue / Complete / Failed
//	}
//
// What it sends, like open-iscsi (usr/login.c): the first request has InitiatorName,
// InitiatorAlias (if set), SessionType, TargetName (normal sessions) and AuthMethod; with
// CHAP it continues with CHAP_A, then CHAP_N/CHAP_R (plus CHAP_I/CHAP_C for mutual CHAP)
// with T=1; the operational stage proposes the digests (TCP), DefaultTime2Wait/Retain,
// ErrorRecoveryLevel, the session keys of a normal session, and MaxRecvDataSegmentLength
// (TCP, discovery) or the RFC 7145 keys with RDMAExtensions=Yes (iSER).
//
// It checks the target: responses echo our ISID and ITT, Version-active is 0, CSG is ours,
// T=1 only when we asked and never past our NSG, TSIH non-zero in the final response (or
// ours when joining a session), answers obey the key rules (params.h), CHAP_A is one we
// offered, and mutual CHAP really authenticated the target before the login completes.
#pragma once

#include "iscsi/chap.h"
#include "iscsi/params.h"
#include "iscsi/pdu.h"
#include "iscsi/text.h"

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace ulp::iscsi::initiator
{

struct InitiatorLoginConfig {
	std::string initiator_name;  // InitiatorName (required)
	std::string initiator_alias; // InitiatorAlias; empty: not sent
	std::string target_name;     // TargetName; ignored for discovery sessions
	SessionType type = SessionType::Normal;
	Transport transport = Transport::Tcp;
	Isid isid{};             // session ID, initiator part
	uint16_t tsih = 0;       // 0: new session; else the session to join
	uint16_t cid = 0;        // connection ID
	uint32_t itt = 0;        // ITT of every Login Request
	uint32_t cmdsn = 0;      // CmdSN of the login (a new session's first)
	uint32_t exp_statsn = 0; // ExpStatSN of the first request (reinstatement)
	OperationalPrefs prefs;  // what to propose
	// Authentication: with chap set, AuthMethod=CHAP (CHAP,None with offer_none); without,
	// AuthMethod=None.
	std::optional<ChapSecret> chap;   // our CHAP_N and secret
	std::optional<ChapSecret> mutual; // the target's CHAP_N and secret: mutual CHAP
	bool offer_none = false;          // also offer None after CHAP
	ChapPolicy chap_policy;           // CHAP_A offered, in order
	bool skip_security = false;       // start in the operational stage (6.3: allowed when
	                                  // no security negotiation is wanted)
	bool skip_operational = false;    // go from security straight to full feature
	uint32_t max_request_dsl = kDefaultMrdsl; // split longer request text (C bit)
	uint8_t version_max = kIscsiVersion;      // Version-max / Version-min (tests)
	uint8_t version_min = kIscsiVersion;
	// Extra raw pairs for the first request / the first operational request (tests and
	// vendor keys).
	std::vector<std::pair<std::string, std::string>> extra_first;
	std::vector<std::pair<std::string, std::string>> extra_operational;
};

enum class InitiatorLoginState : uint8_t {
	SendRequest,  // next_request() builds the next Login Request
	WaitResponse, // on_response() takes the target's answer
	Complete,     // final: full feature phase
	Failed,       // final: error() / status() say why
};

enum class InitiatorLoginError : uint8_t {
	None,
	TargetStatus, // the target rejected the login: status() has class and detail
	Protocol,     // the target broke a login rule (why() says which)
	Negotiation,  // no acceptable value for a key we require (e.g. a digest)
	Auth,         // CHAP could not proceed, or the target failed mutual CHAP
};
const char *initiator_login_error_name(InitiatorLoginError e);

class InitiatorLogin
{
public:
	explicit InitiatorLogin(InitiatorLoginConfig cfg);
	~InitiatorLogin();
	InitiatorLogin(const InitiatorLogin &) = delete;
	InitiatorLogin &operator=(const InitiatorLogin &) = delete;

	// Bytes a request buffer must hold: BHS + max_request_dsl padded.
	size_t req_buf_len() const { return kBhsLen + pad4(cfg_.max_request_dsl); }
	// Build the next Login Request into buf (state SendRequest). Returns its length; 0 if
	// no request is due or buf is too small.
	size_t next_request(std::span<uint8_t> buf);
	// The target's response (any opcode; anything but a Login Response fails).
	LoginStep on_response(const Pdu &rsp);

	InitiatorLoginState state() const { return state_; }
	Stage stage() const { return stage_; }
	InitiatorLoginError error() const { return error_; }
	LoginStatus status() const { return status_; } // the target's status (TargetStatus)
	const std::string &why() const { return why_; }
	// Complete: the negotiated parameters (tsih, tpgt, target alias in session()).
	const SessionParams &session() const { return session_; }
	const ConnParams &conn() const { return conn_; }
	// TargetAddress values the target sent (a redirect: status TargetMovedTemp/Perm).
	const std::vector<std::string> &redirect() const { return redirect_; }
	uint32_t exp_statsn() const { return exp_statsn_; } // next expected StatSN
	uint32_t cmdsn() const { return cfg_.cmdsn; }       // of our requests
	uint32_t exp_cmdsn() const { return exp_cmdsn_; }   // from the last response
	uint32_t max_cmdsn() const { return max_cmdsn_; }

private:
	LoginStep failed(InitiatorLoginError e, std::string why);
	LoginStep process(const LoginRsp &r, std::span<const uint8_t> ltds);
	LoginStep security(const SecurityKeys &sec);
	LoginStep finish(uint16_t tsih);
	void queue(bool transit, Stage nsg);
	bool ready_to_leave_security() const;
	Stage after_security() const;

	InitiatorLoginConfig cfg_;
	Negotiator neg_;
	InitiatorLoginState state_ = InitiatorLoginState::SendRequest;
	Stage stage_ = Stage::Security;
	TextWriter next_;                 // text for the next request
	TextChunker out_;                 // request text being sent (C bit)
	TextAssembler in_;                // response text being assembled (C bit)
	bool req_transit_ = false;        // T of the request being sent
	Stage req_nsg_ = Stage::Security; // its NSG
	bool continuing_ = false;         // the target's response continues (C=1): send empty
	bool first_ = true;               // the first request is not out yet
	bool proposed_ = false;           // operational keys proposed
	bool auth_done_ = false;          // the security stage's work is done
	std::unique_ptr<ChapInitiator> chap_;
	InitiatorLoginError error_ = InitiatorLoginError::None;
	LoginStatus status_ = LoginStatus::Success;
	std::string why_;
	SessionParams session_;
	ConnParams conn_;
	std::vector<std::string> redirect_;
	uint32_t exp_statsn_;
	uint32_t exp_cmdsn_ = 0;
	uint32_t max_cmdsn_ = 0;
	unsigned exchanges_ = 0; // complete responses processed (bounds a looping target)
	unsigned pdus_ = 0;      // response PDUs received
};

} // namespace ulp::iscsi::initiator
