// SPDX-License-Identifier: MIT
// tests/iscsi/text_test.cc - key=value text (RFC 7143 6.1): parsing edge cases, value
// encodings, iSCSI names, and LTDSs split by the C bit at every byte boundary.
#include "iscsi/text.h"

#include <gtest/gtest.h>

#include <string>

using namespace ulp::iscsi;

namespace
{

std::span<const uint8_t> as_bytes(const std::string &s)
{
	return {reinterpret_cast<const uint8_t *>(s.data()), s.size()};
}

// Text from key=value pairs written with '\n' for NUL.
std::string ltds(std::string s)
{
	for (char &c : s)
		if (c == '\n')
			c = '\0';
	return s;
}

TextError parse(const std::string &s, std::vector<KeyValue> *out = nullptr)
{
	std::vector<KeyValue> tmp;
	return parse_text(as_bytes(s), out ? out : &tmp);
}

} // namespace

TEST(Text, ParsesPairs)
{
	std::string t = ltds("InitiatorName=iqn.2024-01.com.example:host\nAuthMethod=CHAP,None\nX-"
	                     "com.example.k=\nX#NodeArchitecture=a/1\n");
	std::vector<KeyValue> kv;
	ASSERT_EQ(parse(t, &kv), TextError::None);
	ASSERT_EQ(kv.size(), 4u);
	EXPECT_EQ(kv[0].key, "InitiatorName");
	EXPECT_EQ(kv[0].value, "iqn.2024-01.com.example:host");
	EXPECT_EQ(kv[1].value, "CHAP,None");
	EXPECT_EQ(kv[2].key, "X-com.example.k");
	EXPECT_EQ(kv[2].value, ""); // an empty value is a value
	EXPECT_EQ(kv[3].key, "X#NodeArchitecture");
	// The value runs to the NUL and may contain '=' (6.1: the key ends at the first '=').
	const std::string eq = ltds("TargetAlias=a=b\n");
	ASSERT_EQ(parse(eq, &kv), TextError::None);
	EXPECT_EQ(kv.back().value, "a=b");
	// Duplicates are text-legal; the negotiation refuses them (params_test).
	kv.clear();
	ASSERT_EQ(parse(ltds("A=1\nA=2\n"), &kv), TextError::None);
	EXPECT_EQ(kv.size(), 2u);
	EXPECT_EQ(parse(""), TextError::None);
}

TEST(Text, MalformedText)
{
	EXPECT_EQ(parse(ltds("Key=1")), TextError::NoTerminator);
	EXPECT_EQ(parse(ltds("Key\n")), TextError::NoEquals);
	EXPECT_EQ(parse(ltds("=1\n")), TextError::EmptyKey);
	EXPECT_EQ(parse(ltds("key=1\n")), TextError::BadKey);  // must start with a capital
	EXPECT_EQ(parse(ltds("Ke y=1\n")), TextError::BadKey); // no spaces in keys
	EXPECT_EQ(parse(ltds("1Key=1\n")), TextError::BadKey);
	EXPECT_EQ(parse(ltds("X-=1\n")), TextError::BadKey);
	EXPECT_EQ(parse(ltds("A#b=1\n")), TextError::BadKey); // '#' only in "X#"
	std::string k63(63, 'K'), k64(64, 'K');
	EXPECT_EQ(parse(ltds(k63 + "=1\n")), TextError::None);
	EXPECT_EQ(parse(ltds(k64 + "=1\n")), TextError::KeyTooLong);
	std::string vmax(kMaxRawValueLen, 'v'), vbig(kMaxRawValueLen + 1, 'v');
	EXPECT_EQ(parse(ltds("K=" + vmax + "\n")), TextError::None);
	EXPECT_EQ(parse(ltds("K=" + vbig + "\n")), TextError::ValueTooLong);
	// Empty entries between pairs are tolerated (open-iscsi does the same).
	std::vector<KeyValue> kv;
	EXPECT_EQ(parse(std::string("A=1\0\0B=2\0\0", 10), &kv), TextError::None);
	EXPECT_EQ(kv.size(), 2u);
}

TEST(Text, Utf8)
{
	EXPECT_TRUE(valid_utf8("plain"));
	EXPECT_TRUE(valid_utf8("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x92\xbe"));
	EXPECT_FALSE(valid_utf8("\xc3"));             // truncated
	EXPECT_FALSE(valid_utf8("\xc3\x28"));         // bad continuation
	EXPECT_FALSE(valid_utf8("\xc0\xaf"));         // overlong '/'
	EXPECT_FALSE(valid_utf8("\xe0\x80\xaf"));     // overlong
	EXPECT_FALSE(valid_utf8("\xed\xa0\x80"));     // surrogate
	EXPECT_FALSE(valid_utf8("\xf4\x90\x80\x80")); // above U+10FFFF
	EXPECT_FALSE(valid_utf8("\xff"));
	EXPECT_EQ(parse(ltds("TargetAlias=caf\xc3\xa9\n")), TextError::None);
	EXPECT_EQ(parse(ltds("TargetAlias=caf\xe9\n")), TextError::BadUtf8); // Latin-1, not UTF-8
}

TEST(Text, Numbers)
{
	uint64_t n;
	EXPECT_TRUE(parse_number("0", &n) && n == 0);
	EXPECT_TRUE(parse_number("8192", &n) && n == 8192);
	EXPECT_TRUE(parse_number("0x2000", &n) && n == 8192);
	EXPECT_TRUE(parse_number("0XfF", &n) && n == 255);
	EXPECT_TRUE(parse_number("18446744073709551615", &n) && n == UINT64_MAX);
	EXPECT_FALSE(parse_number("18446744073709551616", &n)); // 2**64
	EXPECT_FALSE(parse_number("0x10000000000000000", &n));
	EXPECT_FALSE(parse_number("", &n));
	EXPECT_FALSE(parse_number("0x", &n));
	EXPECT_FALSE(parse_number("-1", &n));
	EXPECT_FALSE(parse_number("+1", &n));
	EXPECT_FALSE(parse_number("12a", &n));
	EXPECT_FALSE(parse_number(" 1", &n));
	EXPECT_FALSE(parse_number("0b1", &n)); // base64 is for binaries, not numbers

	bool b;
	EXPECT_TRUE(parse_bool("Yes", &b) && b);
	EXPECT_TRUE(parse_bool("No", &b) && !b);
	EXPECT_FALSE(parse_bool("yes", &b));
	EXPECT_FALSE(parse_bool("", &b));

	uint64_t lo, hi;
	EXPECT_TRUE(parse_range("1~65535", &lo, &hi) && lo == 1 && hi == 65535);
	EXPECT_FALSE(parse_range("5~4", &lo, &hi));
	EXPECT_FALSE(parse_range("5", &lo, &hi));
}

TEST(Text, Binaries)
{
	std::vector<uint8_t> b;
	ASSERT_TRUE(parse_binary("0x0102ff", 16, &b));
	EXPECT_EQ(b, (std::vector<uint8_t>{1, 2, 0xff}));
	ASSERT_TRUE(parse_binary("0x102", 16, &b)); // odd digit count: implicit leading zero
	EXPECT_EQ(b, (std::vector<uint8_t>{1, 2}));
	ASSERT_TRUE(parse_binary("0bAQL/", 16, &b));
	EXPECT_EQ(b, (std::vector<uint8_t>{1, 2, 0xff}));
	ASSERT_TRUE(parse_binary("0BAQI=", 16, &b));
	EXPECT_EQ(b, (std::vector<uint8_t>{1, 2}));
	ASSERT_TRUE(parse_binary("0bAQ==", 16, &b));
	EXPECT_EQ(b, (std::vector<uint8_t>{1}));
	EXPECT_FALSE(parse_binary("0bAQ=", 16, &b));  // not a multiple of 4
	EXPECT_FALSE(parse_binary("0bA=Q=", 16, &b)); // padding inside
	EXPECT_FALSE(parse_binary("0b====", 16, &b));
	EXPECT_FALSE(parse_binary("0x0g", 16, &b));
	EXPECT_FALSE(parse_binary("0x", 16, &b));
	EXPECT_FALSE(parse_binary("1234", 16, &b));    // decimal binaries are not accepted
	EXPECT_FALSE(parse_binary("0x010203", 2, &b)); // longer than allowed
	std::string max = "0x" + std::string(2 * kMaxBinaryLen, 'a');
	EXPECT_TRUE(parse_binary(max, kMaxBinaryLen, &b));
	EXPECT_FALSE(parse_binary(max + "aa", kMaxBinaryLen, &b));
	uint8_t raw[] = {0, 0xab, 0x10};
	EXPECT_EQ(encode_hex(raw), "0x00ab10");
}

TEST(Text, ListsAndNames)
{
	std::vector<std::string_view> l;
	ASSERT_TRUE(split_list("CRC32C,None", &l));
	EXPECT_EQ(l.size(), 2u);
	ASSERT_TRUE(split_list("None", &l));
	EXPECT_EQ(l.size(), 1u);
	EXPECT_FALSE(split_list("", &l));
	EXPECT_FALSE(split_list("a,,b", &l));
	EXPECT_FALSE(split_list("a,", &l));

	EXPECT_TRUE(valid_text_value("host.example.com:3260"));
	EXPECT_TRUE(valid_text_value("[fe80::1]:3260"));
	EXPECT_FALSE(valid_text_value("a b"));
	EXPECT_FALSE(valid_text_value("a,b"));

	EXPECT_TRUE(valid_iscsi_name("iqn.2003-01.org.linux-iscsi.host:sn.1234"));
	EXPECT_TRUE(valid_iscsi_name("iqn.1991-05.com.microsoft"));
	EXPECT_TRUE(valid_iscsi_name("eui.02004567A425678D"));
	EXPECT_TRUE(valid_iscsi_name("naa.52004567BA64678D"));
	EXPECT_TRUE(valid_iscsi_name("naa.62004567BA64678D0123456789ABCDEF"));
	EXPECT_FALSE(valid_iscsi_name("target1"));
	EXPECT_FALSE(valid_iscsi_name("iqn.20a3-01.org.x"));
	EXPECT_FALSE(valid_iscsi_name("iqn.2003-01"));
	EXPECT_FALSE(valid_iscsi_name("iqn.2003-01.:x"));
	EXPECT_FALSE(valid_iscsi_name("eui.02004567A425678"));
	EXPECT_FALSE(valid_iscsi_name("iqn.2003-01.org.x:has space"));
	EXPECT_FALSE(valid_iscsi_name("iqn.2003-01.org.x:" + std::string(210, 'a'))); // > 223
}

// An LTDS cut into PDU data segments at every possible boundary reassembles to the same
// pairs (6.1: a key=value pair may span PDUs).
TEST(Text, CBitSplitsAtEveryBoundary)
{
	const std::string t = ltds("InitiatorName=iqn.2024-01.com.example:h\nSessionType=Normal\n"
	                           "TargetName=iqn.2024-01.com.example:t\nAuthMethod=None\n");
	std::vector<KeyValue> whole;
	ASSERT_EQ(parse(t, &whole), TextError::None);
	for (size_t piece = 1; piece <= t.size(); piece++) {
		TextChunker ch;
		ch.reset(as_bytes(t));
		TextAssembler as;
		int pdus = 0;
		do {
			std::span<const uint8_t> p = ch.next(piece);
			ASSERT_LE(p.size(), piece);
			ASSERT_TRUE(as.append(p));
			pdus++;
		} while (ch.more());
		EXPECT_EQ(pdus, static_cast<int>((t.size() + piece - 1) / piece));
		std::vector<KeyValue> kv;
		ASSERT_EQ(parse_text(as.text(), &kv), TextError::None);
		ASSERT_EQ(kv.size(), whole.size());
		for (size_t i = 0; i < kv.size(); i++) {
			EXPECT_EQ(kv[i].key, whole[i].key);
			EXPECT_EQ(kv[i].value, whole[i].value);
		}
	}
}

TEST(Text, AssemblerCapAndWriter)
{
	TextAssembler as(10);
	uint8_t buf[8] = {};
	EXPECT_TRUE(as.append(buf));
	EXPECT_FALSE(as.append(buf)); // 16 > 10: refused whole
	EXPECT_EQ(as.size(), 8u);
	as.clear();
	EXPECT_EQ(as.size(), 0u);

	TextWriter w;
	w.add("A", "b");
	w.add_num("N", 65536);
	w.add_bool("B", false);
	std::string s(reinterpret_cast<const char *>(w.bytes().data()), w.size());
	EXPECT_EQ(s, std::string("A=b\0N=65536\0B=No\0", 17));

	TextChunker ch;
	ch.reset({});
	EXPECT_TRUE(ch.next(10).empty());
	EXPECT_FALSE(ch.more());
}
