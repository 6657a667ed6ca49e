// SPDX-License-Identifier: MIT
// tests/iscsi/chap_test.cc - CHAP (RFC 7143 12.1.3): responses against independently
// computed vectors, the target and initiator exchanges, and the 9.2.1 rules.
#include "iscsi/chap.h"
#include "tests/iscsi/chap_print.h"

#include <gtest/gtest.h>

#include <deque>
#include <set>

using namespace ulp::iscsi;

namespace
{

std::string str(const TextWriter &w)
{
	return {reinterpret_cast<const char *>(w.bytes().data()), w.size()};
}

// The value of key in a writer's text.
std::string value_of(const TextWriter &w, const std::string &key)
{
	std::vector<KeyValue> kv;
	EXPECT_EQ(parse_text(w.bytes(), &kv), TextError::None);
	for (const KeyValue &p : kv)
		if (p.key == key)
			return std::string(p.value);
	return {};
}

// Views into store, which keeps its strings in place (a deque never moves them).
ChapKeys keys_of(const TextWriter &w, std::deque<std::string> &store)
{
	std::vector<KeyValue> kv;
	EXPECT_EQ(parse_text(w.bytes(), &kv), TextError::None);
	ChapKeys k;
	for (const KeyValue &p : kv) {
		store.emplace_back(p.value);
		std::string_view v = store.back();
		if (p.key == "CHAP_A")
			k.a = v;
		else if (p.key == "CHAP_I")
			k.i = v;
		else if (p.key == "CHAP_C")
			k.c = v;
		else if (p.key == "CHAP_N")
			k.n = v;
		else if (p.key == "CHAP_R")
			k.r = v;
	}
	return k;
}

const ChapSecret kIniSecret{"alice", "initiator-secret-1"};
const ChapSecret kTgtSecret{"target-bob", "target-secret-22"};

ChapCredentials creds(bool mutual)
{
	ChapCredentials c;
	c.incoming = kIniSecret;
	if (mutual)
		c.outgoing = kTgtSecret;
	return c;
}

struct Outcome {
	ChapStatus target = ChapStatus::Continue;
	ChapStatus initiator = ChapStatus::Continue;
	std::string target_why, initiator_why;
};

// A whole exchange between the two classes.
Outcome exchange(ChapPolicy tp, ChapCredentials tc, ChapPolicy ip, ChapSecret own,
                 std::optional<ChapSecret> mutual)
{
	Outcome o;
	ChapTarget t(tp, std::move(tc));
	ChapInitiator i(ip, std::move(own), std::move(mutual));
	std::deque<std::string> s1, s2, s3;
	TextWriter w1, w2, w3, w4;
	i.start(w1);
	o.target = t.step(keys_of(w1, s1), w2);
	if (o.target != ChapStatus::Continue)
		return o;
	o.initiator = i.step(keys_of(w2, s2), w3);
	if (o.initiator == ChapStatus::Failed || o.initiator == ChapStatus::Protocol)
		return o;
	o.target = t.step(keys_of(w3, s3), w4);
	o.target_why = t.why();
	if (o.target != ChapStatus::Done || o.initiator == ChapStatus::Done)
		return o;
	std::deque<std::string> s4;
	o.initiator = i.step(keys_of(w4, s4), w1);
	o.initiator_why = i.why();
	return o;
}

} // namespace

// H(id || secret || challenge) for each algorithm, against Python's hashlib:
// id 0x2a, secret "secret-0123456", challenge 00 01 .. 0f.
TEST(Chap, ResponseVectors)
{
	std::vector<uint8_t> ch(16);
	for (int i = 0; i < 16; i++)
		ch[i] = static_cast<uint8_t>(i);
	struct V {
		ChapAlg alg;
		const char *hex;
	} vs[] = {
	    {ChapAlg::Md5, "0xbdbfdb1122f782d3417aafa255b7c657"},
	    {ChapAlg::Sha1, "0x89d07b8fed53836fda08cdb014fea4593a2e4ae5"},
	    {ChapAlg::Sha256, "0xae2d686b7017be93ff93fe2137a4d6852d7adc73be90e14c4c3af0f33827c235"},
	    {ChapAlg::Sha3_256,
	     "0x023d4dedb23084dfa1ef1d23df177965ef86210e77562ce8c6f5456225933c79"},
	};
	for (const V &v : vs) {
		if (!chap_alg_available(v.alg)) {
			ADD_FAILURE() << "OpenSSL lacks CHAP_A=" << int(v.alg);
			continue;
		}
		uint8_t out[kMaxChapDigest];
		const size_t len = chap_digest_len(v.alg);
		ASSERT_TRUE(chap_response(v.alg, 0x2a, "secret-0123456", ch, {out, len}));
		EXPECT_EQ(encode_hex({out, len}), v.hex) << int(v.alg);
		EXPECT_FALSE(chap_response(v.alg, 0x2a, "s", ch, {out, len - 1}));
	}
}

TEST(Chap, ConstantTimeCompareAndRandom)
{
	uint8_t a[4] = {1, 2, 3, 4}, b[4] = {1, 2, 3, 5};
	EXPECT_TRUE(chap_equal(a, a));
	EXPECT_FALSE(chap_equal(a, b));
	EXPECT_FALSE(chap_equal(std::span<const uint8_t>(a, 3), a));
	std::set<std::vector<uint8_t>> seen;
	for (int i = 0; i < 32; i++) {
		std::vector<uint8_t> r(16);
		ASSERT_TRUE(chap_random(r));
		EXPECT_TRUE(seen.insert(r).second);
	}
}

class ChapAlgs : public ::testing::TestWithParam<ChapAlg>
{
};

TEST_P(ChapAlgs, OneWayAndMutual)
{
	ChapPolicy p;
	p.algorithms = {GetParam()};
	Outcome o = exchange(p, creds(false), p, kIniSecret, std::nullopt);
	EXPECT_EQ(o.target, ChapStatus::Done) << o.target_why;
	EXPECT_EQ(o.initiator, ChapStatus::Done);
	o = exchange(p, creds(true), p, kIniSecret, kTgtSecret);
	EXPECT_EQ(o.target, ChapStatus::Done) << o.target_why;
	EXPECT_EQ(o.initiator, ChapStatus::Done) << o.initiator_why;
}

INSTANTIATE_TEST_SUITE_P(Chap, ChapAlgs,
                         ::testing::Values(ChapAlg::Md5, ChapAlg::Sha1, ChapAlg::Sha256,
                                           ChapAlg::Sha3_256),
                         ::testing::PrintToStringParamName());

TEST(Chap, ChallengeShapeAndAlgorithmChoice)
{
	ChapPolicy tp; // accepts all four
	ChapTarget t(tp, creds(false));
	std::deque<std::string> s;
	TextWriter in, out;
	in.add("CHAP_A", "99,7,5"); // the initiator's preference order wins; 99 is unknown
	ASSERT_EQ(t.step(keys_of(in, s), out), ChapStatus::Continue);
	EXPECT_EQ(value_of(out, "CHAP_A"), "7");
	std::vector<uint8_t> c;
	ASSERT_TRUE(parse_binary(value_of(out, "CHAP_C"), kMaxBinaryLen, &c));
	EXPECT_EQ(c.size(), 32u); // the digest's length, at least 16
	uint64_t id;
	EXPECT_TRUE(parse_number(value_of(out, "CHAP_I"), &id) && id < 256);

	// Two targets, two different challenges.
	ChapTarget t2(tp, creds(false));
	TextWriter out2;
	ASSERT_EQ(t2.step(keys_of(in, s), out2), ChapStatus::Continue);
	EXPECT_NE(value_of(out, "CHAP_C"), value_of(out2, "CHAP_C"));

	// MD5 challenges are 16 bytes.
	ChapTarget t3(tp, creds(false));
	TextWriter in3, out3;
	in3.add("CHAP_A", "5");
	ASSERT_EQ(t3.step(keys_of(in3, s), out3), ChapStatus::Continue);
	ASSERT_TRUE(parse_binary(value_of(out3, "CHAP_C"), kMaxBinaryLen, &c));
	EXPECT_EQ(c.size(), 16u);

	// Nothing acceptable.
	ChapPolicy md5_only;
	md5_only.algorithms = {ChapAlg::Md5};
	ChapTarget t4(md5_only, creds(false));
	TextWriter in4, out4;
	in4.add("CHAP_A", "7,8");
	EXPECT_EQ(t4.step(keys_of(in4, s), out4), ChapStatus::Failed);
}

TEST(Chap, WrongSecretOrUser)
{
	ChapPolicy p;
	Outcome o =
	    exchange(p, creds(false), p, ChapSecret{"alice", "a-wrong-secret-x"}, std::nullopt);
	EXPECT_EQ(o.target, ChapStatus::Failed);
	o = exchange(p, creds(false), p, ChapSecret{"mallory", kIniSecret.secret}, std::nullopt);
	EXPECT_EQ(o.target, ChapStatus::Failed);
	// Mutual: the target proves a secret the initiator does not expect.
	o = exchange(p, creds(true), p, kIniSecret,
	             ChapSecret{kTgtSecret.user, "not-the-target-one"});
	EXPECT_EQ(o.target, ChapStatus::Done);
	EXPECT_EQ(o.initiator, ChapStatus::Failed);
	// Mutual asked but the target has no outgoing secret.
	o = exchange(p, creds(false), p, kIniSecret, kTgtSecret);
	EXPECT_EQ(o.target, ChapStatus::Failed);
	// The target requires mutual CHAP; the initiator does not ask.
	ChapCredentials req = creds(true);
	req.require_mutual = true;
	o = exchange(p, req, p, kIniSecret, std::nullopt);
	EXPECT_EQ(o.target, ChapStatus::Failed);
}

// 9.2.1: a challenge reflected back, and the same secret in both directions, fail.
TEST(Chap, ReflectionAndSameSecret)
{
	ChapPolicy p;
	p.algorithms = {ChapAlg::Md5};
	ChapTarget t(p, creds(true));
	std::deque<std::string> s;
	TextWriter a, ch;
	a.add("CHAP_A", "5");
	ASSERT_EQ(t.step(keys_of(a, s), ch), ChapStatus::Continue);
	uint64_t id;
	ASSERT_TRUE(parse_number(value_of(ch, "CHAP_I"), &id));
	std::vector<uint8_t> c;
	ASSERT_TRUE(parse_binary(value_of(ch, "CHAP_C"), kMaxBinaryLen, &c));
	uint8_t r[16];
	ASSERT_TRUE(chap_response(ChapAlg::Md5, static_cast<uint8_t>(id), kIniSecret.secret, c, r));
	TextWriter rsp, out;
	rsp.add("CHAP_N", kIniSecret.user);
	rsp.add("CHAP_R", encode_hex(r));
	rsp.add("CHAP_I", "1");
	rsp.add("CHAP_C", value_of(ch, "CHAP_C")); // the target's own challenge
	std::deque<std::string> s2;
	EXPECT_EQ(t.step(keys_of(rsp, s2), out), ChapStatus::Failed);
	EXPECT_NE(t.why().find("reflected"), std::string::npos);

	// Target configured with the initiator's secret for the other direction.
	ChapCredentials same = creds(false);
	same.outgoing = ChapSecret{"target-bob", kIniSecret.secret};
	Outcome o = exchange(p, same, p, kIniSecret, ChapSecret{"target-bob", kIniSecret.secret});
	EXPECT_EQ(o.target, ChapStatus::Failed);
	EXPECT_NE(o.target_why.find("same"), std::string::npos);
}

TEST(Chap, ShortSecretsAndMalformedKeys)
{
	ChapPolicy p;
	// 9.2.1: no response with a secret shorter than 96 bits.
	Outcome o = exchange(p, ChapCredentials{ChapSecret{"alice", "short"}, {}, false}, p,
	                     ChapSecret{"alice", "short"}, std::nullopt);
	EXPECT_EQ(o.initiator, ChapStatus::Failed);
	ChapPolicy lax;
	lax.min_secret_len = 1;
	o = exchange(lax, ChapCredentials{ChapSecret{"alice", "short"}, {}, false}, lax,
	             ChapSecret{"alice", "short"}, std::nullopt);
	EXPECT_EQ(o.target, ChapStatus::Done);

	ChapTarget t(p, creds(false));
	std::deque<std::string> s;
	TextWriter out;
	TextWriter bad;
	bad.add("CHAP_N", "alice");
	EXPECT_EQ(t.step(keys_of(bad, s), out), ChapStatus::Protocol); // CHAP_A first
	TextWriter a;
	a.add("CHAP_A", "5");
	ASSERT_EQ(t.step(keys_of(a, s), out), ChapStatus::Continue);
	TextWriter r;
	r.add("CHAP_N", "alice");
	r.add("CHAP_R", "12345"); // decimal: not a binary encoding we accept
	EXPECT_EQ(t.step(keys_of(r, s), out), ChapStatus::Failed);

	// The initiator refuses an algorithm it did not offer.
	ChapPolicy md5;
	md5.algorithms = {ChapAlg::Md5};
	ChapInitiator i(md5, kIniSecret, std::nullopt);
	TextWriter st, ans;
	i.start(st);
	EXPECT_EQ(str(st), std::string("CHAP_A=5\0", 9));
	TextWriter ch;
	ch.add("CHAP_A", "7");
	ch.add("CHAP_I", "1");
	ch.add("CHAP_C", "0x00112233445566778899aabbccddeeff");
	EXPECT_EQ(i.step(keys_of(ch, s), ans), ChapStatus::Failed);
}
