// SPDX-License-Identifier: MIT
// iscsi/target/addr_acl.h - which source addresses may log in to a target node: IPv4 and
// IPv6 addresses and CIDR prefixes ("192.0.2.7", "10.0.0.0/8", "fd00::/8"). An IPv4
// initiator reaching a dual-stack listener shows as ::ffff:a.b.c.d and is matched as the
// IPv4 address it is (RFC 4291 2.5.5.2).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ulp::iscsi::target
{

struct AddrPrefix {
	bool v6 = false;                // IPv6 (16 bytes) or IPv4 (the first 4)
	std::array<uint8_t, 16> addr{}; // network byte order, bits past prefix zero
	unsigned prefix = 0;            // leading bits that must match (32 or 128: one host)
};

// "ADDR" or "ADDR/BITS"; false when malformed, BITS too large, or host bits set past the
// prefix ("10.0.0.1/8" is refused: the administrator meant something else).
bool parse_addr_prefix(std::string_view s, AddrPrefix *out);
// The prefix as parse_addr_prefix reads it ("10.0.0.0/8", "::1/128").
std::string addr_prefix_str(const AddrPrefix &p);
// The address of a peer as the transports write it ("ip:port", "[ipv6]:port") within one
// of the prefixes. An empty list admits everyone; an unreadable peer no one.
bool addr_allowed(const std::vector<AddrPrefix> &allowed, std::string_view peer);

} // namespace ulp::iscsi::target
