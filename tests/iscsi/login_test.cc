// SPDX-License-Identifier: MIT
// tests/iscsi/login_test.cc - full logins in memory: InitiatorLogin against TargetLogin
// (PDUs built, framed, read back through PduReader and parse_pdu), plus hand-made requests
// for the failures a well-behaved initiator never produces.
#include "iscsi/discovery.h"
#include "iscsi/initiator/login.h"
#include "iscsi/target/login.h"
#include "tests/iscsi/chap_print.h"

#include <gtest/gtest.h>

#include <map>
#include <set>

using namespace ulp::iscsi;
using namespace ulp::iscsi::target;
using namespace ulp::iscsi::initiator;

namespace
{

const std::string kTarget = "iqn.2024-01.com.example:disk1";
const std::string kOther = "iqn.2024-01.com.example:disk2";
const std::string kIni = "iqn.2024-01.com.example:host1";
const Isid kIsid = {0x80, 0x01, 0x02, 0x03, 0x04, 0x05};

// The session layer, in miniature.
class FakeHandler : public LoginHandler
{
public:
	std::map<std::string, TargetInfo, std::less<>> targets;
	std::set<std::string, std::less<>> denied; // initiators refused by the ACL
	AuthPolicy policy{true, false};
	std::optional<ChapCredentials> chap;
	LoginStatus target_status = LoginStatus::Success; // find_target() override
	uint16_t max_conns = 1;
	struct Session {
		SessionParams params;
		int conns = 0;
	};
	std::map<uint16_t, Session> sessions;
	uint16_t next_tsih = 0x100;
	std::vector<std::string> calls; // what was called, in order
	uint32_t last_exp_statsn = 0;   // ExpStatSN complete_login() saw

	FakeHandler()
	{
		targets[kTarget] = TargetInfo{7, "disk one", {}};
		targets[kOther] = TargetInfo{8, {}, {}};
	}

	LoginStatus find_target(std::string_view name, TargetInfo *info) override
	{
		calls.push_back("find_target");
		if (target_status != LoginStatus::Success) {
			info->redirect_address = "192.0.2.9:3260,2";
			return target_status;
		}
		auto it = targets.find(name);
		if (it == targets.end())
			return LoginStatus::NotFound;
		*info = it->second;
		return LoginStatus::Success;
	}
	bool authorize(const LoginIdentity &id) override
	{
		calls.push_back("authorize");
		return !denied.count(id.initiator_name);
	}
	AuthPolicy auth_policy(const LoginIdentity &) override { return policy; }
	bool chap_credentials(const LoginIdentity &, ChapCredentials *out) override
	{
		calls.push_back("chap_credentials");
		if (!chap)
			return false;
		*out = *chap;
		return true;
	}
	LoginStatus find_session(const LoginIdentity &id, SessionParams *out) override
	{
		calls.push_back("find_session");
		auto it = sessions.find(id.tsih);
		if (it == sessions.end() || it->second.params.isid != id.isid)
			return LoginStatus::SessionDoesNotExist;
		if (it->second.conns >= max_conns)
			return LoginStatus::TooManyConnections;
		*out = it->second.params;
		return LoginStatus::Success;
	}
	SessionResult complete_login(const LoginIdentity &id, const SessionParams &s,
	                             const ConnParams &) override
	{
		calls.push_back("complete_login");
		last_exp_statsn = id.exp_statsn;
		SessionResult r;
		if (id.tsih == 0) {
			r.tsih = next_tsih++;
			sessions[r.tsih] = Session{s, 1};
			sessions[r.tsih].params.tsih = r.tsih;
		} else {
			r.tsih = id.tsih;
			sessions[id.tsih].conns++;
		}
		r.exp_cmdsn = id.cmdsn;
		r.max_cmdsn = id.cmdsn + 31;
		return r;
	}
};

TargetLoginConfig target_cfg()
{
	TargetLoginConfig c;
	c.prefs.max_recv_dsl = 65536;
	c.prefs.max_burst_length = 1 << 20;
	c.prefs.first_burst_length = 65536;
	c.prefs.header_digests = {Digest::None};
	c.prefs.data_digests = {Digest::None};
	c.initial_statsn = 1000;
	return c;
}

InitiatorLoginConfig ini_cfg()
{
	InitiatorLoginConfig c;
	c.initiator_name = kIni;
	c.initiator_alias = "host one";
	c.target_name = kTarget;
	c.isid = kIsid;
	c.itt = 0x77;
	c.cmdsn = 10;
	c.prefs.max_recv_dsl = 262144;
	c.prefs.max_burst_length = 262144;
	c.prefs.first_burst_length = 65536;
	return c;
}

std::string text_of(std::span<const uint8_t> d)
{
	std::string s(reinterpret_cast<const char *>(d.data()), d.size());
	for (char &c : s)
		if (c == '\0')
			c = '\n';
	return s;
}

struct Trace {
	LoginStep target = LoginStep::Continue;
	int round_trips = 0;
	std::string responses; // all response text
	std::vector<LoginRsp> rsps;
};

// Drive ini against tgt: the target reads requests as a byte stream, the initiator parses
// responses from spans.
Trace run_login(InitiatorLogin &ini, TargetLogin &tgt)
{
	Trace r;
	std::vector<uint8_t> req(ini.req_buf_len()), rsp(tgt.rsp_buf_len());
	PduReader reader(kMaxDsl);
	std::string in_progress;
	while (ini.state() == InitiatorLoginState::SendRequest && r.round_trips < 100000) {
		size_t n = ini.next_request(req);
		EXPECT_GT(n, 0u);
		if (!n)
			break;
		size_t used;
		Pdu p;
		ReadResult rr = reader.feed({req.data(), n}, &used, &p);
		EXPECT_EQ(rr.status, ReadStatus::Pdu);
		EXPECT_EQ(used, n);
		size_t rn;
		r.target = tgt.on_request(p, rsp, &rn);
		Pdu q;
		EXPECT_EQ(parse_pdu({rsp.data(), rn}, ParseOpts{}, &q), PduError::None);
		LoginRsp h;
		EXPECT_TRUE(decode(q.bhs, &h));
		r.rsps.push_back(h);
		r.responses += text_of(q.data);
		ini.on_response(q);
		r.round_trips++;
		if (r.target != LoginStep::Continue)
			break;
	}
	return r;
}

// A hand-made Login Request.
std::vector<uint8_t> raw(LoginReq h, std::string text)
{
	for (char &c : text)
		if (c == '\n')
			c = '\0';
	Bhs b;
	encode(h, b);
	std::vector<uint8_t> w(pdu_wire_len(0, text.size(), {}));
	build_pdu(w, b, {}, {reinterpret_cast<const uint8_t *>(text.data()), text.size()}, {});
	return w;
}

LoginReq req_hdr(Stage csg, bool transit = false, Stage nsg = Stage::Security)
{
	LoginReq h;
	h.csg = csg;
	h.transit = transit;
	h.nsg = nsg;
	h.isid = kIsid;
	h.itt = 0x77;
	h.cmdsn = 10;
	return h;
}

struct RawResult {
	LoginStep step;
	LoginRsp rsp;
	std::string text;
};

RawResult send(TargetLogin &t, const std::vector<uint8_t> &w)
{
	Pdu p;
	EXPECT_EQ(parse_pdu(w, ParseOpts{}, &p), PduError::None);
	std::vector<uint8_t> out(t.rsp_buf_len());
	size_t n;
	RawResult r;
	r.step = t.on_request(p, out, &n);
	Pdu q;
	EXPECT_EQ(parse_pdu({out.data(), n}, ParseOpts{}, &q), PduError::None);
	EXPECT_TRUE(decode(q.bhs, &r.rsp));
	r.text = text_of(q.data);
	return r;
}

const std::string kNames =
    "InitiatorName=" + kIni + "\nSessionType=Normal\nTargetName=" + kTarget + "\n";

class Login : public ::testing::Test
{
protected:
	FakeHandler handler;
	TargetLoginConfig tcfg = target_cfg();
	InitiatorLoginConfig icfg = ini_cfg();

	// One whole login with the current configurations; the target's status for failures.
	struct Both {
		Trace run;
		std::unique_ptr<TargetLogin> tgt;
		std::unique_ptr<InitiatorLogin> ini;
	};
	Both login()
	{
		Both b;
		b.tgt = std::make_unique<TargetLogin>(tcfg, handler);
		b.ini = std::make_unique<InitiatorLogin>(icfg);
		b.run = run_login(*b.ini, *b.tgt);
		return b;
	}
	// Expect the target to fail the login with s and the initiator to report it.
	void expect_reject(LoginStatus s)
	{
		Both b = login();
		EXPECT_EQ(b.run.target, LoginStep::Failed);
		EXPECT_EQ(b.tgt->status(), s) << b.tgt->why();
		EXPECT_EQ(b.tgt->state(), TargetLoginState::Failed);
		EXPECT_EQ(b.ini->state(), InitiatorLoginState::Failed);
		EXPECT_EQ(b.ini->error(), InitiatorLoginError::TargetStatus);
		EXPECT_EQ(b.ini->status(), s);
		ASSERT_FALSE(b.run.rsps.empty());
		EXPECT_EQ(b.run.rsps.back().status, s);
		EXPECT_FALSE(b.run.rsps.back().transit);
	}
	void expect_complete(Both &b)
	{
		EXPECT_EQ(b.run.target, LoginStep::Complete) << b.tgt->why();
		EXPECT_EQ(b.tgt->state(), TargetLoginState::FullFeature);
		EXPECT_EQ(b.ini->state(), InitiatorLoginState::Complete) << b.ini->why();
	}
};

} // namespace

TEST_F(Login, NoAuthNormalSession)
{
	Both b = login();
	expect_complete(b);
	const SessionParams &ts = b.tgt->session(), &is = b.ini->session();
	EXPECT_EQ(ts.tsih, 0x100);
	EXPECT_EQ(is.tsih, 0x100);
	EXPECT_EQ(ts.type, SessionType::Normal);
	EXPECT_EQ(ts.initiator_name, kIni);
	EXPECT_EQ(ts.target_name, kTarget);
	EXPECT_EQ(ts.initiator_alias, "host one");
	EXPECT_EQ(ts.tpgt, 7);
	EXPECT_EQ(is.tpgt, 7); // declared in the first response (13.9)
	EXPECT_EQ(is.target_alias, "disk one");
	EXPECT_EQ(ts.isid, kIsid);
	// Both sides computed the same session parameters.
	EXPECT_EQ(ts.max_burst_length, 262144u);
	EXPECT_EQ(is.max_burst_length, 262144u);
	EXPECT_EQ(ts.first_burst_length, is.first_burst_length);
	EXPECT_EQ(ts.immediate_data, is.immediate_data);
	EXPECT_EQ(ts.initial_r2t, is.initial_r2t);
	EXPECT_EQ(ts.default_time2wait, is.default_time2wait);
	EXPECT_EQ(ts.error_recovery_level, 0);
	// MaxRecvDataSegmentLength per direction (13.12).
	EXPECT_EQ(b.tgt->conn().initiator_recv_dsl, 262144u);
	EXPECT_EQ(b.ini->conn().initiator_recv_dsl, 262144u);
	EXPECT_EQ(b.tgt->conn().target_recv_dsl, 65536u);
	EXPECT_EQ(b.ini->conn().target_recv_dsl, 65536u);
	EXPECT_EQ(b.tgt->conn().auth, AuthMethod::None);
	// Sequence numbers: StatSN from 1000 up, one per response; the window the session
	// layer gave.
	for (size_t i = 0; i < b.run.rsps.size(); i++)
		EXPECT_EQ(b.run.rsps[i].statsn, 1000 + i);
	EXPECT_EQ(b.ini->exp_statsn(), b.tgt->next_statsn());
	EXPECT_EQ(b.ini->exp_cmdsn(), 10u);
	EXPECT_EQ(b.ini->max_cmdsn(), 41u);
	// The TSIH appears in the final response only (11.13.4).
	for (size_t i = 0; i + 1 < b.run.rsps.size(); i++)
		EXPECT_EQ(b.run.rsps[i].tsih, 0);
	// TPGT and alias once; the target's MaxRecvDataSegmentLength declared.
	EXPECT_NE(b.run.responses.find("TargetPortalGroupTag=7\n"), std::string::npos);
	EXPECT_NE(b.run.responses.find("TargetAlias=disk one\n"), std::string::npos);
	EXPECT_NE(b.run.responses.find("MaxRecvDataSegmentLength=65536\n"), std::string::npos);
	EXPECT_EQ(handler.calls.front(), "find_target");
	EXPECT_EQ(handler.calls.back(), "complete_login");
}

class LoginChap : public Login, public ::testing::WithParamInterface<ChapAlg>
{
};

TEST_P(LoginChap, EachAlgorithm)
{
	handler.policy = {false, true};
	handler.chap = ChapCredentials{ChapSecret{"alice", "initiator-secret-1"}, {}, false};
	icfg.chap = ChapSecret{"alice", "initiator-secret-1"};
	icfg.chap_policy.algorithms = {GetParam()};
	Both b = login();
	expect_complete(b);
	EXPECT_EQ(b.tgt->conn().auth, AuthMethod::Chap);
	EXPECT_EQ(b.ini->conn().auth, AuthMethod::Chap);
	EXPECT_FALSE(b.tgt->conn().mutual_auth);
	EXPECT_NE(b.run.responses.find("CHAP_A=" + std::to_string(int(GetParam())) + "\n"),
	          std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(Login, LoginChap,
                         ::testing::Values(ChapAlg::Md5, ChapAlg::Sha1, ChapAlg::Sha256,
                                           ChapAlg::Sha3_256),
                         ::testing::PrintToStringParamName());

TEST_F(Login, MutualChap)
{
	handler.policy = {false, true};
	handler.chap = ChapCredentials{ChapSecret{"alice", "initiator-secret-1"},
	                               ChapSecret{"disk1", "target-secret-22"}, true};
	icfg.chap = ChapSecret{"alice", "initiator-secret-1"};
	icfg.mutual = ChapSecret{"disk1", "target-secret-22"};
	icfg.offer_none = true;
	Both b = login();
	expect_complete(b);
	EXPECT_TRUE(b.tgt->conn().mutual_auth);
	EXPECT_TRUE(b.ini->conn().mutual_auth);
}

TEST_F(Login, ChapWrongSecretOrUser)
{
	handler.policy = {false, true};
	handler.chap = ChapCredentials{ChapSecret{"alice", "initiator-secret-1"}, {}, false};
	icfg.chap = ChapSecret{"alice", "initiator-secret-X"};
	expect_reject(LoginStatus::AuthFailure);
	icfg.chap = ChapSecret{"bob", "initiator-secret-1"};
	expect_reject(LoginStatus::AuthFailure);
}

TEST_F(Login, MutualChapTargetFails)
{
	handler.policy = {false, true};
	handler.chap = ChapCredentials{ChapSecret{"alice", "initiator-secret-1"},
	                               ChapSecret{"disk1", "target-secret-22"}, false};
	icfg.chap = ChapSecret{"alice", "initiator-secret-1"};
	icfg.mutual = ChapSecret{"disk1", "some-other-secret"};
	Both b = login();
	// The target thinks all is well; the initiator must drop the connection (12.1.3).
	EXPECT_EQ(b.ini->state(), InitiatorLoginState::Failed);
	EXPECT_EQ(b.ini->error(), InitiatorLoginError::Auth);
	EXPECT_NE(b.tgt->state(), TargetLoginState::FullFeature);
}

TEST_F(Login, ChapRequiredButNotOffered)
{
	handler.policy = {false, true};
	handler.chap = ChapCredentials{ChapSecret{"alice", "initiator-secret-1"}, {}, false};
	expect_reject(LoginStatus::AuthFailure); // AuthMethod=None only
	// CHAP allowed but no credentials configured for this pair.
	handler.chap.reset();
	icfg.chap = ChapSecret{"alice", "initiator-secret-1"};
	expect_reject(LoginStatus::AuthFailure);
}

// 6.3: skipping the security stage is only allowed when no authentication is required.
TEST_F(Login, SecurityStageSkipped)
{
	icfg.skip_security = true;
	Both b = login();
	expect_complete(b);
	EXPECT_EQ(b.run.rsps.size(), 1u); // names and operational keys in one exchange
	handler.policy = {false, true};
	expect_reject(LoginStatus::AuthFailure);
}

TEST_F(Login, NameAndAccessFailures)
{
	icfg.target_name = "iqn.2024-01.com.example:nosuch";
	expect_reject(LoginStatus::NotFound);
	icfg = ini_cfg();
	handler.denied.insert(kIni);
	expect_reject(LoginStatus::AuthzFailure);
	handler.denied.clear();
	handler.target_status = LoginStatus::TargetRemoved;
	expect_reject(LoginStatus::TargetRemoved);
}

TEST_F(Login, Redirect)
{
	handler.target_status = LoginStatus::TargetMovedTemp;
	Both b = login();
	EXPECT_EQ(b.ini->status(), LoginStatus::TargetMovedTemp);
	ASSERT_EQ(b.ini->redirect().size(), 1u);
	EXPECT_EQ(b.ini->redirect()[0], "192.0.2.9:3260,2");
	// An address longer than a login response may carry is left out; the status stays.
	tcfg.login_max_dsl = 16;
	Both c = login();
	EXPECT_EQ(c.ini->status(), LoginStatus::TargetMovedTemp);
	EXPECT_TRUE(c.ini->redirect().empty());
}

TEST_F(Login, MissingNames)
{
	TargetLogin t(tcfg, handler);
	RawResult r =
	    send(t, raw(req_hdr(Stage::Security),
	                "SessionType=Normal\nTargetName=" + kTarget + "\nAuthMethod=None\n"));
	EXPECT_EQ(r.step, LoginStep::Failed);
	EXPECT_EQ(r.rsp.status, LoginStatus::MissingParameter);
	TargetLogin t2(tcfg, handler);
	r = send(t2,
	         raw(req_hdr(Stage::Security), "InitiatorName=" + kIni + "\nAuthMethod=None\n"));
	EXPECT_EQ(r.rsp.status, LoginStatus::MissingParameter);
	// Names must come first (13.4, 13.5): a later InitiatorName is refused.
	TargetLogin t3(tcfg, handler);
	r = send(t3, raw(req_hdr(Stage::Security), "InitiatorName=" + kIni + "\nTargetName=" +
	                                               kTarget + "\nAuthMethod=None\n"));
	ASSERT_EQ(r.step, LoginStep::Continue);
	r = send(t3, raw(req_hdr(Stage::Security), "SessionType=Discovery\n"));
	EXPECT_EQ(r.rsp.status, LoginStatus::InitiatorError);
}

TEST_F(Login, SessionTypes)
{
	tcfg.allow_discovery = false;
	icfg.type = SessionType::Discovery;
	expect_reject(LoginStatus::SessionTypeNotSupported);
	TargetLogin t(target_cfg(), handler);
	RawResult r = send(
	    t, raw(req_hdr(Stage::Security), "InitiatorName=" + kIni + "\nSessionType=Bogus\n"));
	EXPECT_EQ(r.rsp.status, LoginStatus::SessionTypeNotSupported);
}

TEST_F(Login, VersionMismatch)
{
	icfg.version_min = 1;
	icfg.version_max = 2;
	expect_reject(LoginStatus::UnsupportedVersion);
	icfg.version_min = 2;
	icfg.version_max = 1;
	expect_reject(LoginStatus::InitiatorError);
}

TEST_F(Login, ImpossibleTransitions)
{
	struct Case {
		LoginReq h;
		const char *what;
	} cases[] = {
	    {req_hdr(Stage::Operational, true, Stage::Security), "T=1 back to security"},
	    {req_hdr(Stage::Security, true, static_cast<Stage>(2)), "NSG reserved"},
	    {req_hdr(Stage::Operational, true, Stage::Operational), "T=1, NSG=CSG"},
	    {req_hdr(static_cast<Stage>(2)), "CSG reserved"},
	    {req_hdr(Stage::FullFeature), "CSG full feature"},
	};
	for (const Case &c : cases) {
		TargetLogin t(tcfg, handler);
		RawResult r = send(t, raw(c.h, kNames + "AuthMethod=None\n"));
		EXPECT_EQ(r.step, LoginStep::Failed) << c.what;
		EXPECT_EQ(r.rsp.status, LoginStatus::InitiatorError) << c.what;
	}
	// T and C together (11.12.2).
	LoginReq tc = req_hdr(Stage::Security, true, Stage::Operational);
	tc.cont = true;
	TargetLogin t(tcfg, handler);
	EXPECT_EQ(send(t, raw(tc, kNames)).rsp.status, LoginStatus::InitiatorError);
	// The stage may only change through a granted transition: CSG=1 after a T=0 response.
	TargetLogin t2(tcfg, handler);
	ASSERT_EQ(send(t2, raw(req_hdr(Stage::Security), kNames + "AuthMethod=None\n")).step,
	          LoginStep::Continue);
	EXPECT_EQ(
	    send(t2, raw(req_hdr(Stage::Operational, true, Stage::FullFeature), "")).rsp.status,
	    LoginStatus::InitiatorError);
}

TEST_F(Login, IdentifiersMustNotChange)
{
	for (int field = 0; field < 4; field++) {
		TargetLogin t(tcfg, handler);
		ASSERT_EQ(send(t, raw(req_hdr(Stage::Security), kNames)).step, LoginStep::Continue);
		LoginReq h = req_hdr(Stage::Security, true, Stage::Operational);
		if (field == 0)
			h.isid[5] ^= 1;
		else if (field == 1)
			h.itt++;
		else if (field == 2)
			h.cid++;
		else
			h.version_max = 1;
		EXPECT_EQ(send(t, raw(h, "AuthMethod=None\n")).rsp.status,
		          LoginStatus::InitiatorError)
		    << field;
	}
}

TEST_F(Login, NonLoginPduDuringLogin)
{
	TargetLogin t(tcfg, handler);
	NopOut n;
	n.itt = 5;
	Bhs b;
	encode(n, b);
	std::vector<uint8_t> w(48);
	build_pdu(w, b, {}, {}, {});
	RawResult r = send(t, w);
	EXPECT_EQ(r.step, LoginStep::Failed);
	EXPECT_EQ(r.rsp.status, LoginStatus::InvalidDuringLogin);
	EXPECT_EQ(r.rsp.itt, 5u);
}

TEST_F(Login, KeyRuleViolations)
{
	icfg.extra_first = {{"InitiatorAlias", "again"}}; // declared twice
	expect_reject(LoginStatus::InitiatorError);
	icfg = ini_cfg();
	icfg.extra_first = {{"MaxBurstLength", "512"}}; // operational key in the security stage
	expect_reject(LoginStatus::InitiatorError);
	icfg = ini_cfg();
	icfg.extra_operational = {{"TargetPortalGroupTag", "1"}}; // the target's key
	expect_reject(LoginStatus::InitiatorError);
	// CHAP keys before AuthMethod=CHAP.
	TargetLogin t(tcfg, handler);
	EXPECT_EQ(send(t, raw(req_hdr(Stage::Security), kNames + "CHAP_A=5\n")).rsp.status,
	          LoginStatus::InitiatorError);
	// Malformed text.
	TargetLogin t2(tcfg, handler);
	EXPECT_EQ(send(t2, raw(req_hdr(Stage::Security), kNames + "NoEquals\n")).rsp.status,
	          LoginStatus::InitiatorError);
}

TEST_F(Login, UnknownKeysNotUnderstood)
{
	icfg.extra_operational = {{"X-com.example.Feature", "1"}, {"X#Other", "2"}};
	icfg.prefs.protocol_level = 2; // iSCSIProtocolLevel (13.24): minimum with the target's 1
	Both b = login();
	expect_complete(b);
	EXPECT_NE(b.run.responses.find("X-com.example.Feature=NotUnderstood\n"), std::string::npos);
	EXPECT_NE(b.run.responses.find("X#Other=NotUnderstood\n"), std::string::npos);
	EXPECT_NE(b.run.responses.find("iSCSIProtocolLevel=1\n"), std::string::npos);
	EXPECT_EQ(b.ini->session().protocol_level, 1);
}

TEST_F(Login, TcpWithDigests)
{
	tcfg.prefs.header_digests = {Digest::Crc32c, Digest::None};
	tcfg.prefs.data_digests = {Digest::Crc32c, Digest::None};
	icfg.prefs.header_digests = {Digest::Crc32c};
	icfg.prefs.data_digests = {Digest::Crc32c, Digest::None};
	Both b = login();
	expect_complete(b);
	EXPECT_EQ(b.tgt->conn().header_digest, Digest::Crc32c);
	EXPECT_EQ(b.ini->conn().header_digest, Digest::Crc32c);
	EXPECT_EQ(b.tgt->conn().data_digest, Digest::Crc32c);

	// The first full-feature PDU goes out with digests and the target's reader, switched
	// over after the final Login Response, takes it.
	Digests d{b.ini->conn().header_digest == Digest::Crc32c,
	          b.ini->conn().data_digest == Digest::Crc32c};
	NopOut n;
	n.itt = 1;
	n.cmdsn = b.ini->exp_cmdsn();
	Bhs bhs;
	encode(n, bhs);
	std::vector<uint8_t> ping(100, 0x5a);
	std::vector<uint8_t> w(pdu_wire_len(0, ping.size(), d));
	ASSERT_EQ(build_pdu(w, bhs, {}, ping, d), w.size());
	PduReader reader;
	reader.set_digests({true, true});
	reader.set_max_recv_dsl(b.tgt->conn().target_recv_dsl);
	size_t used;
	Pdu p;
	ReadResult rr = reader.feed(w, &used, &p);
	EXPECT_EQ(rr.status, ReadStatus::Pdu);
	EXPECT_EQ(rr.error, PduError::None);

	// An initiator that insists on a digest the target will not do fails cleanly.
	tcfg.prefs.header_digests = {Digest::None};
	Both c = login();
	EXPECT_EQ(c.ini->state(), InitiatorLoginState::Failed);
	EXPECT_EQ(c.ini->error(), InitiatorLoginError::Negotiation);
}

TEST_F(Login, IserFlavour)
{
	tcfg.transport = Transport::Iser;
	tcfg.prefs.iser_recv_dsl = 8192 + 4096;
	tcfg.prefs.iser_send_dsl = 65536;
	tcfg.prefs.header_digests = {Digest::Crc32c, Digest::None}; // ignored on iSER
	icfg.transport = Transport::Iser;
	icfg.prefs.iser_recv_dsl = 262144;
	icfg.prefs.iser_send_dsl = 262144;
	Both b = login();
	expect_complete(b);
	EXPECT_TRUE(b.tgt->session().rdma_extensions);
	EXPECT_TRUE(b.ini->session().rdma_extensions);
	EXPECT_EQ(b.tgt->conn().transport, Transport::Iser);
	EXPECT_EQ(b.tgt->conn().header_digest, Digest::None);
	EXPECT_EQ(b.tgt->conn().initiator_recv_dsl, 65536u);
	EXPECT_EQ(b.ini->conn().initiator_recv_dsl, 65536u);
	EXPECT_EQ(b.tgt->conn().target_recv_dsl, 12288u);
	EXPECT_EQ(b.ini->conn().target_recv_dsl, 12288u);
	// RFC 7145: MaxRecvDataSegmentLength is not declared on an iSER normal session.
	EXPECT_EQ(b.run.responses.find("MaxRecvDataSegmentLength"), std::string::npos);
	EXPECT_NE(b.run.responses.find("RDMAExtensions=Yes\n"), std::string::npos);

	// An initiator that does not negotiate RDMAExtensions on an iSER connection.
	icfg.transport = Transport::Tcp;
	expect_reject(LoginStatus::MissingParameter);
	// A TCP target answers RDMAExtensions=No, which an iSER initiator cannot use.
	tcfg.transport = Transport::Tcp;
	icfg.transport = Transport::Iser;
	Both c = login();
	EXPECT_EQ(c.ini->error(), InitiatorLoginError::Negotiation);
}

TEST_F(Login, TsihAndConnections)
{
	icfg.tsih = 0x999;
	expect_reject(LoginStatus::SessionDoesNotExist);

	icfg = ini_cfg();
	Both first = login();
	expect_complete(first);
	const uint16_t tsih = first.ini->session().tsih;
	icfg.tsih = tsih;
	icfg.cid = 1;
	expect_reject(LoginStatus::TooManyConnections);

	handler.max_conns = 2;
	icfg.exp_statsn = 1234; // as a connection restart would carry
	Both second = login();
	expect_complete(second);
	EXPECT_EQ(handler.last_exp_statsn, 1234u);
	EXPECT_EQ(second.ini->session().tsih, tsih);
	EXPECT_EQ(second.tgt->session().tsih, tsih);
	// Leading-only keys are Irrelevant on a non-leading connection; the session's values
	// stand.
	EXPECT_EQ(second.tgt->session().max_burst_length, first.tgt->session().max_burst_length);
	EXPECT_EQ(second.tgt->conn().cid, 1);
	// A joining connection keeps the TSIH in every response.
	for (const LoginRsp &r : second.run.rsps)
		EXPECT_EQ(r.tsih, tsih);
}

// 6.1: request text split into PDUs with C=1 at every size, acknowledged by empty responses.
TEST_F(Login, RequestTextSplitEverywhere)
{
	for (uint32_t piece = 1; piece <= 160; piece++) {
		icfg.max_request_dsl = piece;
		Both b = login();
		ASSERT_EQ(b.run.target, LoginStep::Complete)
		    << piece << " " << b.tgt->why() << " / " << b.ini->why() << " "
		    << b.run.round_trips;
		ASSERT_EQ(b.ini->state(), InitiatorLoginState::Complete)
		    << piece << " " << b.ini->why();
	}
}

// Responses longer than the initiator's receive limit go out in C=1 pieces.
TEST_F(Login, ResponseTextSplit)
{
	tcfg.login_max_dsl = 16;
	handler.policy = {false, true};
	handler.chap = ChapCredentials{ChapSecret{"alice", "initiator-secret-1"},
	                               ChapSecret{"disk1", "target-secret-22"}, false};
	icfg.chap = ChapSecret{"alice", "initiator-secret-1"};
	icfg.mutual = ChapSecret{"disk1", "target-secret-22"};
	Both b = login();
	expect_complete(b);
	EXPECT_GT(b.run.rsps.size(), 10u);
	for (const LoginRsp &r : b.run.rsps)
		EXPECT_FALSE(r.cont && r.transit);
	EXPECT_TRUE(b.tgt->conn().mutual_auth);
}

TEST_F(Login, RequestTooLong)
{
	tcfg.max_text = 64;
	expect_reject(LoginStatus::OutOfResources);
}

// open-iscsi's discovery login: security stage straight to full feature (6.3).
TEST_F(Login, DiscoveryStraightToFullFeature)
{
	icfg.type = SessionType::Discovery;
	icfg.skip_operational = true;
	Both b = login();
	expect_complete(b);
	EXPECT_EQ(b.tgt->session().type, SessionType::Discovery);
	EXPECT_EQ(b.run.rsps.size(), 1u);
	EXPECT_EQ(b.run.responses.find("TargetPortalGroupTag"), std::string::npos);
	EXPECT_EQ(b.tgt->conn().initiator_recv_dsl, kDefaultMrdsl); // nothing declared
}

namespace
{

class Targets : public DiscoveryHandler
{
public:
	std::vector<DiscoveryTarget> list;
	void visible_targets(std::string_view, std::vector<DiscoveryTarget> *out) override
	{
		*out = list;
	}
};

} // namespace

// A discovery session from login to a SendTargets=All answer long enough to need several
// Text Responses.
TEST_F(Login, DiscoverySessionSendTargets)
{
	icfg.type = SessionType::Discovery;
	icfg.prefs.max_recv_dsl = 512;
	Both b = login();
	expect_complete(b);
	ASSERT_EQ(b.tgt->conn().initiator_recv_dsl, 512u);

	Targets targets;
	for (int i = 0; i < 40; i++)
		targets.list.push_back({"iqn.2024-01.com.example:t" + std::to_string(i),
		                        {format_target_address("192.0.2.1", 3260, 1),
		                         format_target_address("2001:db8::1", 3260, 1)}});
	TextResponderConfig rc;
	rc.type = SessionType::Discovery;
	rc.initiator_name = kIni;
	rc.max_send_dsl = b.tgt->conn().initiator_recv_dsl;
	TextResponder tr(rc, targets);

	uint32_t statsn = b.tgt->next_statsn();
	TextReq q;
	q.itt = 9;
	q.cmdsn = b.ini->exp_cmdsn();
	std::string body("SendTargets=All\0", 16);
	std::string all;
	int pieces = 0;
	while (true) {
		Bhs bhs;
		encode(q, bhs);
		std::vector<uint8_t> w(pdu_wire_len(0, body.size(), {}));
		build_pdu(w, bhs, {}, {reinterpret_cast<const uint8_t *>(body.data()), body.size()},
		          {});
		Pdu p;
		ASSERT_EQ(parse_pdu(w, {}, &p), PduError::None);
		Bhs rb;
		std::span<const uint8_t> data;
		ASSERT_EQ(tr.on_request(p, TextSeq{statsn++, q.cmdsn, q.cmdsn + 31}, &rb, &data),
		          TextStep::Respond);
		TextRsp r;
		ASSERT_TRUE(decode(rb, &r));
		ASSERT_LE(data.size(), 512u);
		all.append(reinterpret_cast<const char *>(data.data()), data.size());
		pieces++;
		if (r.final) {
			EXPECT_EQ(r.ttt, kReservedTag);
			EXPECT_FALSE(r.cont);
			break;
		}
		EXPECT_TRUE(r.cont);
		EXPECT_NE(r.ttt, kReservedTag);
		// The next piece: an empty request with the same ITT and the TTT (11.10.4).
		q.ttt = r.ttt;
		body.clear();
	}
	EXPECT_GT(pieces, 5);
	std::vector<KeyValue> kv;
	ASSERT_EQ(parse_text({reinterpret_cast<const uint8_t *>(all.data()), all.size()}, &kv),
	          TextError::None);
	ASSERT_EQ(kv.size(), 120u);
	EXPECT_EQ(kv[0].key, "TargetName");
	EXPECT_EQ(kv[0].value, "iqn.2024-01.com.example:t0");
	EXPECT_EQ(kv[1].value, "192.0.2.1:3260,1");
	EXPECT_EQ(kv[2].value, "[2001:db8::1]:3260,1");
	EXPECT_EQ(kv[119].key, "TargetAddress");
}
