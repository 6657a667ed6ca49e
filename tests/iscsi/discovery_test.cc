// SPDX-License-Identifier: MIT
// tests/iscsi/discovery_test.cc - SendTargets answers and the text exchange rules (RFC 7143
// 11.10, 11.11 and the SendTargets appendix): F/C/TTT, continuation, stale TTTs.
#include "iscsi/discovery.h"

#include <gtest/gtest.h>

using namespace ulp::iscsi;

namespace
{

const std::string kT1 = "iqn.2024-01.com.example:t1";
const std::string kT2 = "iqn.2024-01.com.example:t2";

std::string text(const TextWriter &w)
{
	std::string s(reinterpret_cast<const char *>(w.bytes().data()), w.size());
	for (char &c : s)
		if (c == '\0')
			c = '\n';
	return s;
}

std::vector<DiscoveryTarget> two()
{
	return {{kT1, {"192.0.2.1:3260,1", "192.0.2.2:3260,1"}}, {kT2, {"192.0.2.1:3261,2"}}};
}

class Fixed : public DiscoveryHandler
{
public:
	std::vector<DiscoveryTarget> list = two();
	std::string asked_for;
	void visible_targets(std::string_view ini, std::vector<DiscoveryTarget> *out) override
	{
		asked_for = ini;
		*out = list;
	}
};

struct Answer {
	TextStep step;
	TextRsp rsp;
	std::string data;
};

Answer request(TextResponder &tr, TextReq h, std::string body)
{
	for (char &c : body)
		if (c == '\n')
			c = '\0';
	Bhs b;
	encode(h, b);
	std::vector<uint8_t> w(pdu_wire_len(0, body.size(), {}));
	build_pdu(w, b, {}, {reinterpret_cast<const uint8_t *>(body.data()), body.size()}, {});
	Pdu p;
	EXPECT_EQ(parse_pdu(w, {}, &p), PduError::None);
	Answer a;
	Bhs rb;
	std::span<const uint8_t> data;
	a.step = tr.on_request(p, TextSeq{5, 6, 7}, &rb, &data);
	if (a.step == TextStep::Respond) {
		EXPECT_TRUE(decode(rb, &a.rsp));
		a.data.assign(reinterpret_cast<const char *>(data.data()), data.size());
		for (char &c : a.data)
			if (c == '\0')
				c = '\n';
	}
	return a;
}

TextReq req(uint32_t itt = 3, uint32_t ttt = kReservedTag)
{
	TextReq h;
	h.itt = itt;
	h.ttt = ttt;
	h.final = true;
	return h;
}

} // namespace

TEST(SendTargets, Addresses)
{
	EXPECT_EQ(format_target_address("192.0.2.1", 3260, 1), "192.0.2.1:3260,1");
	EXPECT_EQ(format_target_address("fe80::1", 3260, 12), "[fe80::1]:3260,12");
	EXPECT_EQ(format_target_address("[fe80::1]", 860, 0), "[fe80::1]:860,0");
	EXPECT_EQ(format_target_address("host.example.com", 3260, 3), "host.example.com:3260,3");
}

TEST(SendTargets, ValuesPerSessionType)
{
	auto v = two();
	TextWriter w;
	ASSERT_TRUE(build_sendtargets("All", SessionType::Discovery, "", v, w));
	EXPECT_EQ(text(w), "TargetName=" + kT1 +
	                       "\nTargetAddress=192.0.2.1:3260,1\n"
	                       "TargetAddress=192.0.2.2:3260,1\nTargetName=" +
	                       kT2 + "\nTargetAddress=192.0.2.1:3261,2\n");
	w.clear();
	ASSERT_TRUE(build_sendtargets(kT2, SessionType::Discovery, "", v, w));
	EXPECT_EQ(text(w), "TargetName=" + kT2 + "\nTargetAddress=192.0.2.1:3261,2\n");
	w.clear();
	ASSERT_TRUE(
	    build_sendtargets("iqn.2024-01.com.example:none", SessionType::Discovery, "", v, w));
	EXPECT_TRUE(w.empty()); // no targets, no names
	w.clear();
	ASSERT_TRUE(build_sendtargets("", SessionType::Discovery, "", v, w));
	EXPECT_TRUE(w.empty());
	// Normal sessions: All is refused, empty means the session's own target.
	w.clear();
	EXPECT_FALSE(build_sendtargets("All", SessionType::Normal, kT1, v, w));
	ASSERT_TRUE(build_sendtargets("", SessionType::Normal, kT1, v, w));
	EXPECT_EQ(text(w), "TargetName=" + kT1 +
	                       "\nTargetAddress=192.0.2.1:3260,1\n"
	                       "TargetAddress=192.0.2.2:3260,1\n");
	w.clear();
	ASSERT_TRUE(build_sendtargets(kT2, SessionType::Normal, kT1, v, w));
	EXPECT_TRUE(w.empty());
}

TEST(TextExchange, SingleResponse)
{
	Fixed h;
	TextResponderConfig c;
	c.initiator_name = "iqn.2024-01.com.example:i";
	TextResponder tr(c, h);
	Answer a = request(tr, req(), "SendTargets=All\n");
	ASSERT_EQ(a.step, TextStep::Respond);
	EXPECT_TRUE(a.rsp.final);
	EXPECT_FALSE(a.rsp.cont);
	EXPECT_EQ(a.rsp.ttt, kReservedTag);
	EXPECT_EQ(a.rsp.itt, 3u);
	EXPECT_EQ(a.rsp.statsn, 5u);
	EXPECT_EQ(a.rsp.exp_cmdsn, 6u);
	EXPECT_EQ(a.rsp.max_cmdsn, 7u);
	EXPECT_EQ(h.asked_for, "iqn.2024-01.com.example:i");
	EXPECT_NE(a.data.find("TargetName=" + kT2), std::string::npos);
	EXPECT_FALSE(tr.in_exchange());
}

TEST(TextExchange, OtherKeys)
{
	Fixed h;
	TextResponderConfig c;
	c.type = SessionType::Normal;
	c.target_name = kT1;
	TextResponder tr(c, h);
	Answer a = request(tr, req(),
	                   "SendTargets=All\nMaxRecvDataSegmentLength=16384\n"
	                   "InitiatorAlias=x\nX-com.example.k=1\nMaxBurstLength=512\n"
	                   "MaxRecvDataSegmentLength=1\n");
	ASSERT_EQ(a.step, TextStep::Respond);
	EXPECT_EQ(a.data, "SendTargets=Reject\nX-com.example.k=NotUnderstood\n"
	                  "MaxBurstLength=Reject\nMaxRecvDataSegmentLength=Reject\n");
	EXPECT_EQ(tr.max_send_dsl(), 16384u); // redeclared in full feature phase (13.12: ALL)
	a = request(tr, req(4), "SendTargets=\n");
	EXPECT_EQ(a.data, "TargetName=" + kT1 +
	                      "\nTargetAddress=192.0.2.1:3260,1\n"
	                      "TargetAddress=192.0.2.2:3260,1\n");
}

TEST(TextExchange, LongResponseAndContinuation)
{
	Fixed h;
	for (int i = 0; i < 20; i++)
		h.list.push_back(
		    {"iqn.2024-01.com.example:x" + std::to_string(i), {"192.0.2.9:3260,1"}});
	TextResponderConfig c;
	c.max_send_dsl = 512;
	TextResponder tr(c, h);
	Answer a = request(tr, req(), "SendTargets=All\n");
	ASSERT_EQ(a.step, TextStep::Respond);
	// 11.11: C=1 and F=0 with a real TTT while text remains.
	EXPECT_TRUE(a.rsp.cont);
	EXPECT_FALSE(a.rsp.final);
	ASSERT_NE(a.rsp.ttt, kReservedTag);
	EXPECT_EQ(a.data.size(), 512u);
	const uint32_t ttt = a.rsp.ttt;
	std::string all = a.data;

	// A TTT that names nothing is stale: Reject.
	EXPECT_EQ(request(tr, req(3, ttt + 1), "").step, TextStep::Reject);
	EXPECT_EQ(tr.reject_reason(), RejectReason::InvalidPduField);
	// The Reject ended the exchange; start again and follow it to the end.
	a = request(tr, req(), "SendTargets=All\n");
	all = a.data;
	int n = 1;
	while (!a.rsp.final) {
		// Text in a continuation request is a protocol error.
		ASSERT_NE(a.rsp.ttt, kReservedTag);
		a = request(tr, req(3, a.rsp.ttt), "");
		ASSERT_EQ(a.step, TextStep::Respond);
		all += a.data;
		n++;
	}
	EXPECT_EQ(a.rsp.ttt, kReservedTag);
	EXPECT_GT(n, 2);
	EXPECT_NE(
	    all.find("TargetName=iqn.2024-01.com.example:x19\nTargetAddress=192.0.2.9:3260,1\n"),
	    std::string::npos);
	EXPECT_FALSE(tr.in_exchange());
}

TEST(TextExchange, RequestPiecesAndRules)
{
	Fixed h;
	TextResponderConfig c;
	TextResponder tr(c, h);
	// A request split with C=1 is acknowledged empty, F=0, with a TTT to continue with.
	TextReq first = req();
	first.final = false;
	first.cont = true;
	Answer a = request(tr, first, "SendTar");
	ASSERT_EQ(a.step, TextStep::Respond);
	EXPECT_TRUE(a.data.empty());
	EXPECT_FALSE(a.rsp.final);
	ASSERT_NE(a.rsp.ttt, kReservedTag);
	a = request(tr, req(3, a.rsp.ttt), "gets=" + kT1 + "\n");
	ASSERT_EQ(a.step, TextStep::Respond);
	EXPECT_TRUE(a.rsp.final);
	EXPECT_EQ(a.data.rfind("TargetName=" + kT1, 0), 0u);

	// C=1 with F=1 is a protocol error (11.10.2).
	TextReq bad = req();
	bad.cont = true;
	EXPECT_EQ(request(tr, bad, "A=1").step, TextStep::Reject);
	EXPECT_EQ(tr.reject_reason(), RejectReason::ProtocolError);
	// Not a Text Request at all.
	NopOut n;
	Bhs b;
	encode(n, b);
	std::vector<uint8_t> w(48);
	build_pdu(w, b, {}, {}, {});
	Pdu p;
	ASSERT_EQ(parse_pdu(w, {}, &p), PduError::None);
	Bhs rb;
	std::span<const uint8_t> d;
	EXPECT_EQ(tr.on_request(p, {}, &rb, &d), TextStep::Reject);
	// Malformed text.
	EXPECT_EQ(request(tr, req(), "Broken\n").step, TextStep::Reject);
	// A new exchange (TTT 0xffffffff) replaces an unfinished one (11.10.4).
	TextReq part = req(10);
	part.final = false;
	part.cont = true;
	ASSERT_EQ(request(tr, part, "Send").step, TextStep::Respond);
	a = request(tr, req(11), "SendTargets=" + kT2 + "\n");
	ASSERT_EQ(a.step, TextStep::Respond);
	EXPECT_EQ(a.rsp.itt, 11u);
	EXPECT_EQ(a.data, "TargetName=" + kT2 + "\nTargetAddress=192.0.2.1:3261,2\n");
}
