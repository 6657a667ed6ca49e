// SPDX-License-Identifier: MIT
// fuzz/fuzz_iscsi_text.cc - libFuzzer target: iSCSI key=value text against arbitrary
// peer bytes (iscsi/text.cc parsing and value decoders, iscsi/params.cc negotiation,
// iscsi/chap.cc's parsing of CHAP values, iscsi/discovery.cc's text exchange).
//
// Input layout: byte 0 selects the mode, the rest is one logical text data segment.
//	bits 0-1   who answers: 0 target in the operational stage, 1 target in the security
//	           stage, 2 initiator after proposing its operational keys, 3 target on iSER
//	bit 2      discovery session
//	bit 3      non-leading connection
//	bits 4-7   the LTDS is first cut into pieces of 1 + k * 13 bytes and reassembled
//	           (the C-bit path), which must give the same pairs as the whole
// Checks: parsing is deterministic across the split; every answer the negotiator writes
// is itself valid text whose keys are among those received (or declarations); results
// respect the key domains (FirstBurstLength <= MaxBurstLength, lengths 512..2**24-1).
#include "iscsi/chap.h"
#include "iscsi/discovery.h"
#include "iscsi/params.h"
#include "iscsi/text.h"

#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

using namespace ulp::iscsi;

namespace
{

[[noreturn]] void die(const char *what)
{
	std::fprintf(stderr, "fuzz_iscsi_text: %s\n", what);
	std::abort();
}

class Targets : public DiscoveryHandler
{
public:
	void visible_targets(std::string_view, std::vector<DiscoveryTarget> *out) override
	{
		out->push_back({"iqn.2024-01.com.example:a", {"192.0.2.1:3260,1"}});
		out->push_back({"iqn.2024-01.com.example:b", {"[2001:db8::2]:3260,2"}});
	}
};

void decode_values(const KeyValue &kv)
{
	uint64_t n, lo, hi;
	bool b;
	std::vector<uint8_t> bin;
	std::vector<std::string_view> items;
	(void)parse_number(kv.value, &n);
	(void)parse_bool(kv.value, &b);
	(void)parse_range(kv.value, &lo, &hi);
	if (parse_binary(kv.value, kMaxBinaryLen, &bin) && bin.size() > kMaxBinaryLen)
		die("binary longer than allowed");
	if (split_list(kv.value, &items))
		for (std::string_view it : items)
			if (it.empty())
				die("empty list item");
	(void)valid_iscsi_name(kv.value);
	(void)valid_text_value(kv.value);
}

void negotiate(std::span<const KeyValue> kv, uint8_t mode)
{
	OperationalPrefs p;
	p.header_digests = {Digest::Crc32c, Digest::None};
	p.max_burst_length = 131072;
	p.first_burst_length = 262144;
	p.iser_recv_dsl = 16384;
	const int who = mode & 3;
	const Role role = who == 2 ? Role::Initiator : Role::Target;
	Negotiator n(role, who == 3 ? Transport::Iser : Transport::Tcp, p);
	if (mode & 4)
		n.set_session_type(SessionType::Discovery);
	if (mode & 8)
		n.set_leading(false);
	TextWriter reply;
	if (role == Role::Initiator)
		n.propose_operational(reply);
	reply.clear();
	SecurityKeys sec;
	const Stage stage = who == 1 ? Stage::Security : Stage::Operational;
	if (!n.receive(kv, stage, reply, &sec)) {
		if (n.error().status == LoginStatus::Success)
			die("failure without a status");
		return;
	}
	// The answers are well-formed text, one per key received.
	std::vector<KeyValue> out;
	if (parse_text(reply.bytes(), &out) != TextError::None)
		die("negotiator wrote malformed text");
	if (out.size() > kv.size())
		die("more answers than keys");
	SessionParams s;
	ConnParams c;
	if (n.finish(&s, &c)) {
		if (s.first_burst_length > s.max_burst_length)
			die("FirstBurstLength above MaxBurstLength");
		if (c.initiator_recv_dsl < 512 || c.initiator_recv_dsl > kMaxDsl ||
		    c.target_recv_dsl < 512 || c.target_recv_dsl > kMaxDsl)
			die("receive length out of domain");
		if (s.error_recovery_level > 2 || s.max_connections == 0)
			die("result out of domain");
	}
	if (sec.chap_a || sec.chap_n) {
		// The CHAP value parsers, through a target that has sent its challenge.
		ChapPolicy cp;
		cp.min_secret_len = 1;
		ChapTarget t(cp,
		             ChapCredentials{ChapSecret{"u", "s"}, ChapSecret{"t", "x"}, false});
		TextWriter w, a;
		a.add("CHAP_A", "5");
		std::vector<KeyValue> akv;
		(void)parse_text(a.bytes(), &akv);
		ChapKeys first;
		first.a = akv[0].value;
		if (t.step(first, w) != ChapStatus::Continue)
			die("CHAP_A=5 refused");
		ChapKeys k{std::nullopt, sec.chap_i, sec.chap_c, sec.chap_n, sec.chap_r};
		(void)t.step(k, w);
	}
}

} // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***)
{
	const char *dir = std::getenv("ULP_FUZZ_SEEDS");
	if (!dir)
		return 0;
	using namespace std::literals;
	const std::string_view seeds[] = {
	    "\x00HeaderDigest=CRC32C,None\0DataDigest=None\0MaxBurstLength=262144\0"
	    "FirstBurstLength=65536\0InitialR2T=No\0ImmediateData=Yes\0MaxRecvDataSegmentLength=65536\0"sv,
	    "\x01InitiatorName=iqn.2024-01.com.example:i\0SessionType=Normal\0"
	    "TargetName=iqn.2024-01.com.example:t\0AuthMethod=CHAP,None\0CHAP_A=7,5\0"sv,
	    "\x01"
	    "CHAP_N=u\0CHAP_R=0x0123456789abcdef0123456789abcdef\0CHAP_I=7\0CHAP_C=0bAAECAw==\0"sv,
	    "\x03InitiatorRecvDataSegmentLength=262144\0TargetRecvDataSegmentLength=262144\0"
	    "MaxOutstandingUnexpectedPDUs=0\0RDMAExtensions=Yes\0"sv,
	    "\x06MaxBurstLength=512\0DefaultTime2Wait=2\0IFMarker=No\0OFMarkInt=1~65535\0X-a.b=1\0"sv,
	    "\x40SendTargets=All\0"sv,
	};
	for (size_t i = 0; i < sizeof(seeds) / sizeof(seeds[0]); i++) {
		std::string path = std::string(dir) + "/seed-" + std::to_string(i);
		if (FILE *f = std::fopen(path.c_str(), "wb")) {
			std::fwrite(seeds[i].data(), 1, seeds[i].size(), f);
			std::fclose(f);
		}
	}
	std::exit(0);
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1 || size > 2 * kMaxLtdsLen)
		return 0;
	const uint8_t mode = data[0];
	std::span<const uint8_t> text(data + 1, size - 1);

	std::vector<KeyValue> whole;
	const TextError e = parse_text(text, &whole);
	// The same LTDS reassembled from C-bit pieces parses the same way.
	const size_t piece = 1 + static_cast<size_t>(mode >> 4) * 13;
	TextChunker ch;
	ch.reset(text);
	TextAssembler as(2 * kMaxLtdsLen);
	while (ch.more())
		if (!as.append(ch.next(piece)))
			die("assembler refused text under its cap");
	std::vector<KeyValue> again;
	if (parse_text(as.text(), &again) != e || again.size() != whole.size())
		die("split text parses differently");
	for (size_t i = 0; i < whole.size(); i++)
		if (whole[i].key != again[i].key || whole[i].value != again[i].value)
			die("split text gives other pairs");
	if (e != TextError::None)
		return 0;

	for (const KeyValue &kv : whole) {
		if (!valid_key_name(kv.key) || kv.value.size() > kMaxRawValueLen ||
		    !valid_utf8(kv.value))
			die("parse_text let a bad pair through");
		decode_values(kv);
	}
	negotiate(whole, mode);

	// The same text as a full-feature Text Request.
	Targets targets;
	TextResponderConfig rc;
	rc.type = mode & 4 ? SessionType::Discovery : SessionType::Normal;
	rc.target_name = "iqn.2024-01.com.example:a";
	rc.max_send_dsl = 512;
	TextResponder tr(rc, targets);
	TextReq h;
	h.itt = 1;
	Bhs b;
	encode(h, b);
	std::vector<uint8_t> w(pdu_wire_len(0, text.size(), {}));
	if (text.size() <= kMaxDsl && build_pdu(w, b, {}, text, {}) == w.size()) {
		Pdu p;
		ParseOpts o;
		o.max_recv_dsl = kMaxDsl;
		if (parse_pdu(w, o, &p) != PduError::None)
			die("own PDU does not parse");
		Bhs rb;
		std::span<const uint8_t> d;
		for (int i = 0; i < 64 && tr.on_request(p, {}, &rb, &d) == TextStep::Respond; i++) {
			// A MaxRecvDataSegmentLength in the request applies from its answer on.
			if (d.size() > tr.max_send_dsl())
				die("text response above the initiator's limit");
			TextRsp r;
			if (!decode(rb, &r))
				die("text response does not decode");
			if (r.final)
				break;
			if (r.ttt == kReservedTag)
				die("F=0 with the reserved TTT");
			h.ttt = r.ttt;
			encode(h, b);
			std::vector<uint8_t> next(kBhsLen);
			build_pdu(next, b, {}, {}, {});
			w = next;
			if (parse_pdu(w, o, &p) != PduError::None)
				die("continuation does not parse");
		}
	}
	return 0;
}
