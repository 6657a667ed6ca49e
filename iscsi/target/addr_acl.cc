// SPDX-License-Identifier: MIT
// iscsi/target/addr_acl.cc - source address prefixes (see addr_acl.h).
#include "iscsi/target/addr_acl.h"

#include <arpa/inet.h>

#include <charconv>

namespace ulp::iscsi::target
{

namespace
{

bool parse_addr(std::string_view s, bool *v6, std::array<uint8_t, 16> *a)
{
	const std::string z(s);
	a->fill(0);
	if (inet_pton(AF_INET, z.c_str(), a->data()) == 1) {
		*v6 = false;
		return true;
	}
	if (inet_pton(AF_INET6, z.c_str(), a->data()) == 1) {
		*v6 = true;
		// ::ffff:a.b.c.d is the IPv4 host a.b.c.d.
		static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
		if (std::equal(mapped, mapped + 12, a->begin())) {
			std::copy(a->begin() + 12, a->end(), a->begin());
			std::fill(a->begin() + 4, a->end(), 0);
			*v6 = false;
		}
		return true;
	}
	return false;
}

bool prefix_match(const std::array<uint8_t, 16> &a, const std::array<uint8_t, 16> &b, unsigned bits)
{
	for (unsigned i = 0; i < bits / 8; i++)
		if (a[i] != b[i])
			return false;
	if (bits % 8) {
		const uint8_t m = uint8_t(0xff << (8 - bits % 8));
		if ((a[bits / 8] & m) != (b[bits / 8] & m))
			return false;
	}
	return true;
}

} // namespace

bool parse_addr_prefix(std::string_view s, AddrPrefix *out)
{
	AddrPrefix p;
	std::string_view addr = s;
	const size_t slash = s.find('/');
	if (slash != std::string_view::npos)
		addr = s.substr(0, slash);
	if (!parse_addr(addr, &p.v6, &p.addr))
		return false;
	const unsigned max = p.v6 ? 128 : 32;
	p.prefix = max;
	if (slash != std::string_view::npos) {
		const std::string_view b = s.substr(slash + 1);
		auto [end, ec] = std::from_chars(b.data(), b.data() + b.size(), p.prefix);
		if (b.empty() || ec != std::errc() || end != b.data() + b.size() || p.prefix > max)
			return false;
	}
	std::array<uint8_t, 16> net = p.addr;
	for (unsigned i = p.prefix; i < 128; i++)
		net[i / 8] &= uint8_t(~(0x80 >> (i % 8)));
	if (net != p.addr)
		return false;
	*out = p;
	return true;
}

std::string addr_prefix_str(const AddrPrefix &p)
{
	char host[INET6_ADDRSTRLEN] = "?";
	inet_ntop(p.v6 ? AF_INET6 : AF_INET, p.addr.data(), host, sizeof host);
	return std::string(host) + "/" + std::to_string(p.prefix);
}

bool addr_allowed(const std::vector<AddrPrefix> &allowed, std::string_view peer)
{
	if (allowed.empty())
		return true;
	std::string_view host = peer;
	if (!host.empty() && host.front() == '[') {
		const size_t close = host.find(']');
		if (close == std::string_view::npos)
			return false;
		host = host.substr(1, close - 1);
	} else if (const size_t colon = host.rfind(':'); colon != std::string_view::npos) {
		host = host.substr(0, colon);
	}
	bool v6 = false;
	std::array<uint8_t, 16> a{};
	if (!parse_addr(host, &v6, &a))
		return false;
	for (const AddrPrefix &p : allowed)
		if (p.v6 == v6 && prefix_match(a, p.addr, p.prefix))
			return true;
	return false;
}

} // namespace ulp::iscsi::target
