// SPDX-License-Identifier: MIT
// iscsi/target/login.h - the target side of the iSCSI login phase (RFC 7143 6.3, 11.12, 11.13).
//
// One TargetLogin per new connection, from the first Login Request to the Login Response
// that moves the connection to the full feature phase (or fails it). The connection layer
// parses PDUs (pdu.h) and hands each one to on_request(), which writes the Login Response
// into the caller's buffer and says what to do next:
//
//	Continue  send the response, wait for the next request
//	Complete  send the response; the connection is in full feature phase: session() and
//	          conn() hold the negotiated parameters, next_statsn() the next StatSN, and
//	          digests / MaxRecvDataSegmentLength apply from the next PDU on
//	Failed    send the response (a Login reject: status() says which), then close
//
// Login PDUs carry no digests, and 8192 bytes of data at most in either direction while
// the login lasts (13.12 default); longer texts are split with the C bit both ways.
//
// Sequence numbers: the first response carries TargetLoginConfig::initial_statsn and each
// response one more (next_statsn() continues after the login). Non-final responses carry
// ExpCmdSN = MaxCmdSN = the requests' CmdSN (Login Requests are immediate); the final one
// the window complete_login() returns. The initiator's ExpStatSN is not checked after the
// first request: RFC 7143 gives it no failure rule, and it is passed to the session layer
// for connection reinstatement.
//
// The session layer answers the questions only it can, through LoginHandler: which targets
// exist, who may use them, how an initiator must authenticate and with which secrets, and,
// when the login completes, which session the connection joins.
//
// State machine (TargetLoginState), one transition per request:
//
//	Initial --first request, CSG=0--> Security   --T=1 granted, NSG=1--> Operational
//	        --first request, CSG=1--> Operational                         --T=1, NSG=3-->
// FullFeature 	Security --T=1 granted, NSG=3--> FullFeature   (allowed: RFC 7143 6.3, open-iscsi
// does it 	                                                 for discovery sessions)
// Security/Operational --C=1--> RecvText --C=0 (LTDS complete)--> back, as above
// Security/Operational --response longer than 8192--> SendText --empty request--> SendText (more
// pieces) | Security/Operational/FullFeature (last piece, with T and NSG) 	any --error-->
// Failed (the reject goes out); FullFeature and Failed are final
//
// Failures and their status (11.13, Status-Class and Status-Detail):
//	0x0200 initiator error: malformed PDU or text, CSG/NSG/T/C rule broken, ISID/TSIH/CID/
//	       ITT/version changed during login, key rules broken (params.h), CHAP protocol
//	0x0201 authentication failure: AuthMethod or CHAP failed, or the initiator skipped the
//	       security stage (started in CSG=1) though the target requires authentication
//	0x0202 authorization failure: LoginHandler::authorize() said no
//	0x0203 not found: no such target;  0x0205 unsupported version (Version-min > 0)
//	0x0206 too many connections, 0x0208 can't include in session, 0x020a session does not
//	       exist: LoginHandler::find_session() / complete_login()
//	0x0207 missing parameter: no InitiatorName; no TargetName in a normal session; no
//	       RDMAExtensions=Yes on an iSER connection
//	0x0209 session type not supported: discovery disabled, or an unknown SessionType
//	0x020b invalid request during login: a PDU other than a Login Request
//	0x0300/0x0301/0x0302: whatever the handler reports; 0x0302 for text beyond 64 KiB
#pragma once

#include "core/check.h"
#include "iscsi/chap.h"
#include "iscsi/params.h"
#include "iscsi/pdu.h"
#include "iscsi/text.h"

#include <memory>
#include <string>
#include <string_view>

namespace ulp::iscsi::target
{

// What the session layer tells about a target (normal sessions).
struct TargetInfo {
	uint16_t tpgt = 1;            // portal group tag of the portal this login came in on
	std::string alias;            // TargetAlias to declare; empty: none
	std::string redirect_address; // with find_target() = TargetMovedTemp/Perm: where to go
	                              // ("host:port,tpgt", sent as TargetAddress)
};

// How an initiator must authenticate to a target.
struct AuthPolicy {
	bool allow_none = true;  // AuthMethod=None accepted (and skipping the security stage)
	bool allow_chap = false; // AuthMethod=CHAP accepted (needs chap_credentials())
};

// Who is logging in, as far as known when a callback runs.
struct LoginIdentity {
	SessionType type = SessionType::Normal;
	std::string_view initiator_name;
	std::string_view target_name; // empty for discovery sessions
	Isid isid{};
	uint16_t tsih = 0; // 0: a new session (or reinstatement of one with this ISID)
	uint16_t cid = 0;
	uint32_t cmdsn = 0; // CmdSN of the login requests (a new session's first CmdSN)
	// ExpStatSN of the first request: the old connection's when this login restarts one
	// (CID reuse, RFC 7143 6.3.4).
	uint32_t exp_statsn = 0;
	Transport transport = Transport::Tcp;
};

// The session layer's answer when a login is about to complete.
struct SessionResult {
	LoginStatus status = LoginStatus::Success; // anything else fails the login
	uint16_t tsih = 0;      // the session's TSIH (new: non-zero; existing: its own)
	uint32_t exp_cmdsn = 0; // ExpCmdSN and MaxCmdSN for the final Login Response
	uint32_t max_cmdsn = 0;
};

// Implemented by the session layer. Called from on_request(), synchronously.
class LoginHandler
{
public:
	virtual ~LoginHandler() = default;

	// Normal session, first request: is target_name served on this portal? Success (fill
	// *info), NotFound, TargetRemoved, ServiceUnavailable, or TargetMovedTemp/Perm with
	// info->redirect_address.
	virtual LoginStatus find_target(std::string_view target_name, TargetInfo *info) = 0;
	// May this initiator use this target (the ACL)? For discovery sessions target_name is
	// empty: may it discover at all? False fails the login with 0x0202.
	virtual bool authorize(const LoginIdentity &id) = 0;
	// How this initiator must authenticate.
	virtual AuthPolicy auth_policy(const LoginIdentity &id) = 0;
	// CHAP secrets for (target, initiator). False: none configured (CHAP impossible).
	virtual bool chap_credentials(const LoginIdentity &id, ChapCredentials *out) = 0;
	// Non-zero TSIH, first request: the session this connection wants to join. Success
	// (fill *out with its negotiated parameters), SessionDoesNotExist, TooManyConnections,
	// CantIncludeInSession.
	virtual LoginStatus find_session(const LoginIdentity &id, SessionParams *out) = 0;
	// Everything is negotiated and the final response is next. TSIH 0: create the session
	// (if a session with the same initiator name, ISID and target exists, reinstate it:
	// RFC 7143 6.3.5, ERL 0 - close the old one first). TSIH non-zero: add the connection
	// (CID reuse is connection reinstatement). Report a failure status to fail the login.
	virtual SessionResult complete_login(const LoginIdentity &id, const SessionParams &s,
	                                     const ConnParams &c) = 0;
};

struct TargetLoginConfig {
	Transport transport = Transport::Tcp;
	OperationalPrefs prefs;                 // the values the target accepts
	ChapPolicy chap;                        // CHAP algorithms accepted, secret rules
	bool allow_discovery = true;            // SessionType=Discovery accepted on this portal
	uint32_t initial_statsn = 0;            // StatSN of the first Login Response
	uint32_t login_max_dsl = kDefaultMrdsl; // largest data segment per Login Response
	size_t max_text = kMaxLtdsLen;          // largest request LTDS (bytes)
};

enum class TargetLoginState : uint8_t {
	Initial,     // no request yet
	Security,    // CSG=0: AuthMethod / CHAP
	Operational, // CSG=1: operational keys
	RecvText,    // a request with C=1 came; its text continues
	SendText,    // a response piece with C=1 went out; waiting for an empty request
	FullFeature, // final: login complete
	Failed,      // final: a reject went out
};
const char *target_login_state_name(TargetLoginState s);

// The transitions the header comment draws (change_state checks every one).
inline constexpr StateTable<TargetLoginState, 7> kTargetLoginStates = {
    "iSCSI target login",
    target_login_state_name,
    {
        /* Initial */ to(TargetLoginState::Security, TargetLoginState::Operational,
                         TargetLoginState::RecvText, TargetLoginState::SendText,
                         TargetLoginState::FullFeature, TargetLoginState::Failed),
        /* Security */
        to(TargetLoginState::Security, TargetLoginState::Operational, TargetLoginState::RecvText,
           TargetLoginState::SendText, TargetLoginState::FullFeature, TargetLoginState::Failed),
        /* Operational */
        to(TargetLoginState::Security, TargetLoginState::Operational, TargetLoginState::RecvText,
           TargetLoginState::SendText, TargetLoginState::FullFeature, TargetLoginState::Failed),
        /* RecvText */
        to(TargetLoginState::Security, TargetLoginState::Operational, TargetLoginState::RecvText,
           TargetLoginState::SendText, TargetLoginState::FullFeature, TargetLoginState::Failed),
        /* SendText */
        to(TargetLoginState::Security, TargetLoginState::Operational, TargetLoginState::RecvText,
           TargetLoginState::SendText, TargetLoginState::FullFeature, TargetLoginState::Failed),
        /* FullFeature */ 0,
        /* Failed */ 0,
    }};

class TargetLogin
{
public:
	TargetLogin(const TargetLoginConfig &cfg, LoginHandler &handler);
	~TargetLogin();
	TargetLogin(const TargetLogin &) = delete;
	TargetLogin &operator=(const TargetLogin &) = delete;

	// Bytes a response buffer must hold: BHS + login_max_dsl padded.
	size_t rsp_buf_len() const { return kBhsLen + pad4(cfg_.login_max_dsl); }

	// One request PDU (any opcode: non-login PDUs fail with 0x020b). Writes the response
	// PDU (no digests) into rsp (at least rsp_buf_len() bytes) and its length into
	// *rsp_len. Must not be called again after Complete or Failed.
	LoginStep on_request(const Pdu &req, std::span<uint8_t> rsp, size_t *rsp_len);

	TargetLoginState state() const { return state_; }
	Stage stage() const { return stage_; }
	// The failure (Failed) and a human-readable reason; Success otherwise.
	LoginStatus status() const { return status_; }
	const std::string &why() const { return why_; }
	// Complete: the negotiated parameters.
	const SessionParams &session() const { return session_; }
	const ConnParams &conn() const { return conn_; }
	// StatSN for the connection's next response after the login.
	uint32_t next_statsn() const { return statsn_; }

private:
	enum class Auth : uint8_t { Start, Chap, Done };

	LoginStep reject(LoginStatus s, std::string why, std::span<uint8_t> rsp, size_t *rsp_len,
	                 std::span<const uint8_t> data = {});
	LoginStep emit(std::span<uint8_t> rsp, size_t *rsp_len);
	bool process(const LoginReq &h, std::span<const uint8_t> ltds, TextWriter &reply);
	bool identify(const LoginReq &h, TextWriter &reply);
	bool security(const SecurityKeys &sec, TextWriter &reply);
	bool finalize();
	bool fail(LoginStatus s, std::string why);
	void set_state(TargetLoginState s);
	LoginIdentity identity() const;

	TargetLoginConfig cfg_;
	LoginHandler &handler_;
	Negotiator neg_;
	TargetLoginState state_ = TargetLoginState::Initial;
	Stage stage_ = Stage::Security;       // current login stage (CSG)
	LoginReq first_;                      // the first request's header (ISID, ITT, ...)
	bool first_ltds_ = true;              // the next complete LTDS is the first
	TextAssembler in_;                    // request text being assembled (C bit)
	TextChunker out_;                     // response text being sent (C bit)
	bool pending_transit_ = false;        // the response's last piece carries T=1
	Stage pending_nsg_ = Stage::Security; // ... and this NSG
	Auth auth_ = Auth::Start;
	AuthPolicy policy_;
	std::unique_ptr<ChapTarget> chap_;
	TargetInfo target_;
	std::string initiator_name_;
	std::string target_name_;
	SessionType type_ = SessionType::Normal;
	SessionParams existing_; // the session a non-leading connection joins
	SessionParams session_;
	ConnParams conn_;
	uint32_t statsn_;        // StatSN of the next response
	uint32_t exp_cmdsn_ = 0; // ExpCmdSN / MaxCmdSN in responses
	uint32_t max_cmdsn_ = 0;
	uint16_t tsih_ = 0; // TSIH for the final response
	LoginStatus status_ = LoginStatus::Success;
	std::string why_;
	std::string redirect_; // TargetAddress for a redirect reject
};

} // namespace ulp::iscsi::target
