// SPDX-License-Identifier: MIT
// fuzz/fuzz_iscsi_login.cc - libFuzzer target: the target-side login state machine
// (iscsi/target/login.cc with iscsi/params.cc, iscsi/chap.cc) fed arbitrary Login Request
// PDUs, then, once a login completes, the full-feature text exchange (discovery.cc) fed
// Text Requests.
//
// Input layout: byte 0 configures the target, byte 1 how many requests a real initiator
// (InitiatorLogin) sends first, then records until the input ends or the login ends.
//	byte 0 bit 0     iSER (else TCP)
//	       bits 1-2  auth policy: 0 None, 1 CHAP required, 2 CHAP or None, 3 mutual CHAP
//	       bit 3     discovery refused
//	       bit 4     login responses cut at 64 bytes (else 8192)
//	       bit 5     the real initiator logs in to discovery (else a normal session)
//	       bit 6     the real initiator uses CHAP (mutual with bit 7)
//	byte 1           the real initiator's requests before the fuzzed ones (0..255)
// Records, one byte kind then:
//	kind % 4 == 0    raw PDU: 2 bytes length, then that many bytes (BHS, AHS, data)
//	kind % 4 == 1    templated Login Request: 1 byte flags (T, C, CSG, NSG as in the BHS
//	                 byte 1), 1 byte perturbation (bit 0 ISID, 1 ITT, 2 CID, 3 TSIH,
//	                 4 version), 2 bytes text length, the text
//	kind % 4 == 2    CHAP answer: the harness computes CHAP_N/CHAP_R for the last challenge
//	                 the target sent (kind bit 2: with the right secret; bit 3: add
//	                 CHAP_I/CHAP_C for mutual), 1 byte flags as above
//	kind % 4 == 3    Text Request (after a completed login): 1 byte flags (F, C), 4 bytes
//	                 TTT, 2 bytes text length, the text
// Invariants: every response parses as a Login Response within the response limit, with
// the request's ITT; Failed carries a non-success status and ends the login; Complete
// means the full feature state and a non-zero TSIH.
#include "iscsi/discovery.h"
#include "iscsi/initiator/login.h"
#include "iscsi/target/login.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

using namespace ulp::iscsi;

namespace
{

[[noreturn]] void die(const char *what)
{
	std::fprintf(stderr, "fuzz_iscsi_login: %s\n", what);
	std::abort();
}

const std::string kTarget = "iqn.2024-01.com.example:t";
const std::string kIni = "iqn.2024-01.com.example:i";
const ChapSecret kIniSecret{"user", "initiator-secret"};
const ChapSecret kTgtSecret{"target", "the-target-secret"};
constexpr Isid kIsid = {0x80, 1, 2, 3, 4, 5};
constexpr uint32_t kItt = 0x10;

class Handler : public LoginHandler, public DiscoveryHandler
{
public:
	AuthPolicy policy;
	bool mutual = false;
	std::map<uint16_t, SessionParams> sessions;

	LoginStatus find_target(std::string_view name, TargetInfo *info) override
	{
		if (name == kTarget) {
			info->tpgt = 3;
			info->alias = "fuzz";
			return LoginStatus::Success;
		}
		if (name == "iqn.2024-01.com.example:moved") {
			info->redirect_address = "192.0.2.1:3260,1";
			return LoginStatus::TargetMovedPerm;
		}
		return LoginStatus::NotFound;
	}
	bool authorize(const LoginIdentity &id) override
	{
		return id.initiator_name != "iqn.2024-01.com.example:denied";
	}
	AuthPolicy auth_policy(const LoginIdentity &) override { return policy; }
	bool chap_credentials(const LoginIdentity &, ChapCredentials *out) override
	{
		out->incoming = kIniSecret;
		if (mutual)
			out->outgoing = kTgtSecret;
		return true;
	}
	LoginStatus find_session(const LoginIdentity &id, SessionParams *out) override
	{
		auto it = sessions.find(id.tsih);
		if (it == sessions.end())
			return LoginStatus::SessionDoesNotExist;
		*out = it->second;
		return LoginStatus::Success;
	}
	SessionResult complete_login(const LoginIdentity &id, const SessionParams &s,
	                             const ConnParams &) override
	{
		return {LoginStatus::Success, id.tsih ? id.tsih : uint16_t{0x42}, id.cmdsn,
		        id.cmdsn + 7};
	}
	void visible_targets(std::string_view, std::vector<DiscoveryTarget> *out) override
	{
		for (int i = 0; i < 30; i++)
			out->push_back({kTarget + std::to_string(i),
			                {"192.0.2.1:3260,3", "[2001:db8::1]:3260,3"}});
	}
};

struct Reader {
	const uint8_t *p;
	size_t n;
	bool take(size_t k, const uint8_t **out)
	{
		if (n < k)
			return false;
		*out = p;
		p += k;
		n -= k;
		return true;
	}
	bool byte(uint8_t *b)
	{
		const uint8_t *q;
		if (!take(1, &q))
			return false;
		*b = *q;
		return true;
	}
	bool be16(uint16_t *v)
	{
		const uint8_t *q;
		if (!take(2, &q))
			return false;
		*v = get_be16(q);
		return true;
	}
};

std::vector<uint8_t> login_pdu(uint8_t flags, uint8_t perturb, std::span<const uint8_t> text)
{
	LoginReq h;
	h.transit = flags & 0x80;
	h.cont = flags & 0x40;
	h.csg = static_cast<Stage>((flags >> 2) & 3);
	h.nsg = static_cast<Stage>(flags & 3);
	h.isid = kIsid;
	if (perturb & 1)
		h.isid[5] ^= 0xff;
	h.itt = kItt + (perturb & 2 ? 1 : 0);
	h.cid = perturb & 4 ? 9 : 0;
	h.tsih = perturb & 8 ? 0x42 : 0;
	h.version_min = perturb & 16 ? 1 : 0;
	h.version_max = perturb & 16 ? 2 : 0;
	Bhs b;
	encode(h, b);
	std::vector<uint8_t> w(pdu_wire_len(0, text.size(), {}));
	if (build_pdu(w, b, {}, text, {}) != w.size())
		w.clear();
	return w;
}

// CHAP_A/I/C of the target's last challenge, as seen in its responses.
struct Challenge {
	ChapAlg alg = ChapAlg::Md5;
	uint8_t id = 0;
	std::vector<uint8_t> c;
	bool valid = false;
};

void note_challenge(std::span<const uint8_t> data, Challenge *ch)
{
	std::vector<KeyValue> kv;
	if (parse_text(data, &kv) != TextError::None)
		return;
	uint64_t n;
	for (const KeyValue &p : kv) {
		if (p.key == "CHAP_A" && parse_number(p.value, &n) && chap_alg_from_number(n))
			ch->alg = *chap_alg_from_number(n);
		else if (p.key == "CHAP_I" && parse_number(p.value, &n))
			ch->id = static_cast<uint8_t>(n);
		else if (p.key == "CHAP_C" && parse_binary(p.value, kMaxBinaryLen, &ch->c))
			ch->valid = true;
	}
}

std::vector<uint8_t> chap_pdu(uint8_t kind, uint8_t flags, const Challenge &ch)
{
	TextWriter w;
	const ChapSecret wrong{"user", "a-wrong-secret!!"};
	const ChapSecret &s = kind & 4 ? kIniSecret : wrong;
	uint8_t r[kMaxChapDigest];
	const size_t len = chap_digest_len(ch.alg);
	if (ch.valid && chap_response(ch.alg, ch.id, s.secret, ch.c, {r, len})) {
		w.add("CHAP_N", s.user);
		w.add("CHAP_R", encode_hex({r, len}));
	}
	if (kind & 8) {
		w.add("CHAP_I", "9");
		w.add("CHAP_C", "0x00112233445566778899aabbccddeeff");
	}
	return login_pdu(flags, 0, w.bytes());
}

// A response the target wrote must be a sane Login Response.
void check_response(std::span<const uint8_t> rsp, size_t max_data, LoginStep step,
                    const TargetLogin &t, Challenge *ch)
{
	Pdu p;
	if (rsp.empty() || parse_pdu(rsp, ParseOpts{kMaxDsl, {}, true}, &p) != PduError::None)
		die("response does not parse");
	LoginRsp r;
	if (!decode(p.bhs, &r))
		die("response is not a Login Response");
	if (p.data.size() > max_data)
		die("response data above the limit");
	if (r.transit && r.cont)
		die("response with T and C");
	if (step == LoginStep::Failed) {
		if (r.status == LoginStatus::Success || t.status() != r.status ||
		    t.state() != TargetLoginState::Failed)
			die("failure without a failure status");
	} else if (r.status != LoginStatus::Success) {
		die("a status without a failure");
	}
	if (step == LoginStep::Complete &&
	    (t.state() != TargetLoginState::FullFeature || r.tsih == 0 || !r.transit ||
	     r.nsg != Stage::FullFeature))
		die("completion without the final response");
	note_challenge(p.data, ch);
}

// After a completed login: Text Requests from the rest of the input.
void text_phase(Reader &in, Handler &h, const TargetLogin &t)
{
	TextResponderConfig rc;
	rc.type = t.session().type;
	rc.initiator_name = t.session().initiator_name;
	rc.target_name = t.session().target_name;
	rc.max_send_dsl = t.conn().initiator_recv_dsl;
	TextResponder tr(rc, h);
	uint8_t kind, flags;
	uint16_t len;
	const uint8_t *ttt, *text;
	while (in.byte(&kind) && in.byte(&flags) && in.take(4, &ttt) && in.be16(&len) &&
	       in.take(len, &text)) {
		TextReq q;
		q.final = flags & 0x80;
		q.cont = flags & 0x40;
		q.itt = 5;
		q.ttt = get_be32(ttt);
		Bhs b;
		encode(q, b);
		std::vector<uint8_t> w(pdu_wire_len(0, len, {}));
		build_pdu(w, b, {}, {text, len}, {});
		Pdu p;
		if (parse_pdu(w, ParseOpts{kMaxDsl, {}, true}, &p) != PduError::None)
			die("own text request does not parse");
		Bhs rb;
		std::span<const uint8_t> d;
		if (tr.on_request(p, {}, &rb, &d) == TextStep::Respond) {
			TextRsp r;
			if (!decode(rb, &r) || d.size() > tr.max_send_dsl())
				die("bad text response");
			if (r.final != (r.ttt == kReservedTag))
				die("F and TTT disagree");
		}
	}
}

void run(const uint8_t *data, size_t size)
{
	Reader in{data, size};
	uint8_t cfg_byte, warm;
	if (!in.byte(&cfg_byte) || !in.byte(&warm))
		return;
	Handler h;
	const int auth = (cfg_byte >> 1) & 3;
	h.policy = {auth != 1 && auth != 3, auth != 0};
	h.mutual = auth == 3;
	TargetLoginConfig cfg;
	cfg.transport = cfg_byte & 1 ? Transport::Iser : Transport::Tcp;
	cfg.allow_discovery = !(cfg_byte & 8);
	cfg.login_max_dsl = cfg_byte & 16 ? 64 : kDefaultMrdsl;
	cfg.prefs.header_digests = {Digest::Crc32c, Digest::None};
	cfg.prefs.max_recv_dsl = 65536;
	TargetLogin t(cfg, h);
	std::vector<uint8_t> rsp(t.rsp_buf_len());
	Challenge ch;
	LoginStep step = LoginStep::Continue;

	// A real initiator first, to reach the later states.
	InitiatorLoginConfig ic;
	ic.initiator_name = kIni;
	ic.target_name = kTarget;
	ic.type = cfg_byte & 32 ? SessionType::Discovery : SessionType::Normal;
	ic.transport = cfg.transport;
	ic.isid = kIsid;
	ic.itt = kItt;
	if (cfg_byte & 64) {
		ic.chap = kIniSecret;
		if (cfg_byte & 128)
			ic.mutual = kTgtSecret;
		ic.chap_policy.min_secret_len = 1;
	}
	InitiatorLogin ini(ic);
	std::vector<uint8_t> req(ini.req_buf_len());
	for (unsigned i = 0; i < warm && step == LoginStep::Continue &&
	                     ini.state() == InitiatorLoginState::SendRequest;
	     i++) {
		size_t n = ini.next_request(req);
		Pdu p;
		if (!n ||
		    parse_pdu({req.data(), n}, ParseOpts{kMaxDsl, {}, true}, &p) != PduError::None)
			die("initiator request does not parse");
		size_t rn;
		step = t.on_request(p, rsp, &rn);
		check_response({rsp.data(), rn}, cfg.login_max_dsl, step, t, &ch);
		Pdu q;
		parse_pdu({rsp.data(), rn}, ParseOpts{kMaxDsl, {}, true}, &q);
		ini.on_response(q);
	}

	uint8_t kind;
	while (step == LoginStep::Continue && in.byte(&kind)) {
		std::vector<uint8_t> w;
		uint8_t flags, perturb;
		uint16_t len;
		const uint8_t *bytes;
		switch (kind % 4) {
		case 0:
			if (!in.be16(&len) || !in.take(len, &bytes))
				return;
			w.assign(bytes, bytes + len);
			break;
		case 1:
			if (!in.byte(&flags) || !in.byte(&perturb) || !in.be16(&len) ||
			    !in.take(len, &bytes))
				return;
			w = login_pdu(flags, perturb, {bytes, len});
			break;
		case 2:
			if (!in.byte(&flags))
				return;
			w = chap_pdu(kind, flags, ch);
			break;
		default:
			continue; // text records only after the login
		}
		Pdu p;
		if (parse_pdu(w, ParseOpts{kMaxDsl, {}, true}, &p) != PduError::None)
			continue; // the connection layer would not hand it over
		size_t rn;
		step = t.on_request(p, rsp, &rn);
		check_response({rsp.data(), rn}, cfg.login_max_dsl, step, t, &ch);
	}
	if (step == LoginStep::Complete) {
		if (t.session().tsih == 0 || t.conn().target_recv_dsl < 512)
			die("completed login with bad results");
		text_phase(in, h, t);
	}
}

void write_seed(const std::string &dir, const std::string &name, const std::vector<uint8_t> &b)
{
	std::string path = dir + "/" + name;
	if (FILE *f = std::fopen(path.c_str(), "wb")) {
		std::fwrite(b.data(), 1, b.size(), f);
		std::fclose(f);
	}
}

} // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***)
{
	const char *dir = std::getenv("ULP_FUZZ_SEEDS");
	if (!dir)
		return 0;
	using namespace std::literals;
	// Whole logins by the real initiator, for each configuration that completes.
	for (uint8_t cfg : {0x00, 0x02, 0x04, 0x06, 0x20, 0x21, 0x10, 0x44, 0x46, 0xc6, 0x60})
		write_seed(dir, "warm-" + std::to_string(cfg), {cfg, 255});
	// A discovery login, then SendTargets with continuation.
	std::vector<uint8_t> d{0x20, 255, 3, 0x80, 0xff, 0xff, 0xff, 0xff};
	std::string_view st = "SendTargets=All\0"sv;
	d.push_back(0);
	d.push_back(static_cast<uint8_t>(st.size()));
	d.insert(d.end(), st.begin(), st.end());
	write_seed(dir, "sendtargets", d);
	// Templated requests through CHAP to a computed response.
	std::vector<uint8_t> fixed{0x02, 0}; // CHAP required, no warm-up
	for (
	    auto [flags, text] :
	    {std::pair{
	         uint8_t{0x81},
	         "InitiatorName=iqn.2024-01.com.example:i\0TargetName=iqn.2024-01.com.example:t\0AuthMethod=CHAP\0"sv},
	     std::pair{uint8_t{0x00}, "CHAP_A=5\0"sv}}) {
		fixed.push_back(1);
		fixed.push_back(flags);
		fixed.push_back(0);
		fixed.push_back(static_cast<uint8_t>(text.size() >> 8));
		fixed.push_back(static_cast<uint8_t>(text.size()));
		fixed.insert(fixed.end(), text.begin(), text.end());
	}
	fixed.push_back(2 | 4);
	fixed.push_back(0x81);
	write_seed(dir, "chap-templated", fixed);
	std::exit(0);
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	run(data, size);
	return 0;
}
