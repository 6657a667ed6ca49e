// SPDX-License-Identifier: MIT
// SockAddr parsing and printing.
#include "core/addr.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>

namespace ulp
{
namespace
{

TEST(SockAddr, ParsesIpv4WithPort)
{
	auto a = SockAddr::parse("127.0.0.1:4420");
	ASSERT_TRUE(a);
	EXPECT_EQ(a->family(), AF_INET);
	EXPECT_EQ(a->port(), 4420);
	EXPECT_EQ(a->host(), "127.0.0.1");
	EXPECT_EQ(a->str(), "127.0.0.1:4420");
	EXPECT_EQ(a->len(), sizeof(sockaddr_in));
	EXPECT_FALSE(a->is_any());
	EXPECT_FALSE(a->empty());
	EXPECT_EQ(*a, SockAddr::ipv4(0x7f000001, 4420));
	auto *sin = reinterpret_cast<const sockaddr_in *>(a->sa());
	EXPECT_EQ(ntohl(sin->sin_addr.s_addr), 0x7f000001u);
}

TEST(SockAddr, ParsesBracketedIpv6)
{
	auto a = SockAddr::parse("[::1]:3260");
	ASSERT_TRUE(a);
	EXPECT_EQ(a->family(), AF_INET6);
	EXPECT_EQ(a->port(), 3260);
	EXPECT_EQ(a->host(), "::1");
	EXPECT_EQ(a->str(), "[::1]:3260");
	EXPECT_EQ(a->len(), sizeof(sockaddr_in6));
	auto b = SockAddr::parse("[fe80::1:2]", 3260);
	ASSERT_TRUE(b);
	EXPECT_EQ(b->port(), 3260);
	EXPECT_EQ(b->str(), "[fe80::1:2]:3260");
}

TEST(SockAddr, DefaultPort)
{
	auto a = SockAddr::parse("10.0.0.1", 3260);
	ASSERT_TRUE(a);
	EXPECT_EQ(a->port(), 3260);
	auto b = SockAddr::parse("10.0.0.1:1", 3260); // explicit port wins
	ASSERT_TRUE(b);
	EXPECT_EQ(b->port(), 1);
	auto z = SockAddr::parse("10.0.0.1:0");
	ASSERT_TRUE(z); // port 0: let the CM pick one
	EXPECT_EQ(z->port(), 0);
	EXPECT_TRUE(SockAddr::parse("10.0.0.1:65535"));
	EXPECT_FALSE(SockAddr::parse("10.0.0.1", 65536));
}

TEST(SockAddr, RejectsBadInput)
{
	const char *bad[] = {
	    "",                // empty
	    "127.0.0.1",       // no port, no default
	    ":4420",           // empty host
	    "127.0.0.1:",      // empty port
	    "127.0.0.1:65536", // port too large
	    "127.0.0.1:99999",
	    "127.0.0.1:123456",
	    "127.0.0.1:12a", // junk in port
	    "127.0.0.1:-1",
	    "127.0.0.1:+1",
	    "127.0.0.1: 1",
	    "127.0.0.1:4420 ",
	    " 127.0.0.1:4420",
	    "localhost:4420", // names are not resolved
	    "1.2.3:4",
	    "1.2.3.4.5:4",
	    "256.0.0.1:4",
	    "::1:3260", // IPv6 without brackets
	    "::1",
	    "[::1",   // unterminated
	    "[::1]x", // junk after bracket
	    "[::1]:", // empty port
	    "[::1]3260",
	    "[]:1",        // empty host
	    "[1.2.3.4]:1", // IPv4 in brackets
	    "[::1]:70000",
	    "[::g]:1",
	};
	for (const char *s : bad)
		EXPECT_FALSE(SockAddr::parse(s)) << '"' << s << '"';
	EXPECT_FALSE(SockAddr::parse("", 1));
	EXPECT_FALSE(SockAddr::parse("[]", 1));
	EXPECT_FALSE(SockAddr::parse("127.0.0.1:", 1)); // empty explicit port is still junk
}

TEST(SockAddr, PortAndAny)
{
	auto a = *SockAddr::parse("0.0.0.0:1");
	EXPECT_TRUE(a.is_any());
	a.set_port(4420);
	EXPECT_EQ(a.port(), 4420);
	EXPECT_EQ(a.str(), "0.0.0.0:4420");
	auto b = *SockAddr::parse("[::]:1");
	EXPECT_TRUE(b.is_any());
	b.set_port(9);
	EXPECT_EQ(b.str(), "[::]:9");
	EXPECT_FALSE(SockAddr::parse("[::2]:1")->is_any());
}

TEST(SockAddr, EmptyAddress)
{
	SockAddr e;
	EXPECT_TRUE(e.empty());
	EXPECT_EQ(e.port(), 0);
	e.set_port(5); // no family: nothing to set
	EXPECT_EQ(e.port(), 0);
	EXPECT_FALSE(e.is_any());
	EXPECT_EQ(e.host(), "");
	EXPECT_EQ(e.str(), "");
	EXPECT_EQ(e.len(), 0u);
	EXPECT_TRUE(e.same_host(SockAddr{}));
	EXPECT_FALSE(e.same_host(*SockAddr::parse("1.2.3.4:1")));
}

TEST(SockAddr, SameHostIgnoresPort)
{
	auto a = *SockAddr::parse("192.168.1.2:1");
	auto b = *SockAddr::parse("192.168.1.2:2");
	auto c = *SockAddr::parse("192.168.1.3:1");
	EXPECT_TRUE(a.same_host(b));
	EXPECT_FALSE(a == b);
	EXPECT_FALSE(a.same_host(c));
	auto m = *SockAddr::parse("[::ffff:192.168.1.2]:1"); // v4-mapped: the same host
	EXPECT_TRUE(m.same_host(a));
	EXPECT_TRUE(a.same_host(m));
	EXPECT_TRUE(m == a);
	auto v6 = *SockAddr::parse("[::1]:1");
	EXPECT_FALSE(v6.same_host(*SockAddr::parse("127.0.0.1:1")));
	EXPECT_TRUE(v6.same_host(*SockAddr::parse("[0::1]:7")));
}

} // namespace
} // namespace ulp
