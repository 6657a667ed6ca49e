// SPDX-License-Identifier: MIT
// core/addr.cc - parsing and printing of CM socket addresses.
#include "core/addr.h"

#include <arpa/inet.h>

#include <cstring>

namespace ulp
{

namespace
{

// A decimal port: 1-5 digits, nothing else, at most 65535. Signs, spaces and hex are
// junk: strtoul would accept " +12" and we want "host:+12" rejected.
bool parse_port(std::string_view s, uint16_t *port)
{
	if (s.empty() || s.size() > 5)
		return false;
	uint32_t v = 0;
	for (char c : s) {
		if (c < '0' || c > '9')
			return false;
		v = v * 10 + static_cast<uint32_t>(c - '0');
	}
	if (v > 65535)
		return false;
	*port = static_cast<uint16_t>(v);
	return true;
}

bool is_v4_mapped(const in6_addr &a)
{
	static const uint8_t prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
	return std::memcmp(a.s6_addr, prefix, sizeof(prefix)) == 0;
}

// The IPv4 address of a v4 or v4-mapped v6 address, network order; false otherwise.
bool as_v4(const SockAddr &a, uint32_t *out)
{
	if (a.family() == AF_INET) {
		*out = reinterpret_cast<const sockaddr_in *>(&a.ss)->sin_addr.s_addr;
		return true;
	}
	if (a.family() == AF_INET6) {
		const in6_addr &v6 = reinterpret_cast<const sockaddr_in6 *>(&a.ss)->sin6_addr;
		if (is_v4_mapped(v6)) {
			std::memcpy(out, v6.s6_addr + 12, 4);
			return true;
		}
	}
	return false;
}

} // namespace

std::optional<SockAddr> SockAddr::parse(std::string_view s, int default_port)
{
	if (default_port > 65535)
		return std::nullopt;
	std::string_view host, port;
	bool have_port = false;
	bool v6 = false;
	if (!s.empty() && s.front() == '[') {
		size_t close = s.find(']');
		if (close == std::string_view::npos)
			return std::nullopt;
		host = s.substr(1, close - 1);
		std::string_view rest = s.substr(close + 1);
		if (!rest.empty()) {
			if (rest.front() != ':')
				return std::nullopt; // junk after the bracket
			port = rest.substr(1);
			have_port = true;
		}
		v6 = true;
	} else {
		size_t colon = s.find(':');
		if (colon != std::string_view::npos) {
			// A second colon means an unbracketed IPv6 address: ambiguous with a port.
			if (s.find(':', colon + 1) != std::string_view::npos)
				return std::nullopt;
			host = s.substr(0, colon);
			port = s.substr(colon + 1);
			have_port = true;
		} else {
			host = s;
		}
	}
	if (host.empty() || host.size() >= INET6_ADDRSTRLEN)
		return std::nullopt;

	uint16_t p = 0;
	if (have_port) {
		if (!parse_port(port, &p))
			return std::nullopt;
	} else if (default_port >= 0) {
		p = static_cast<uint16_t>(default_port);
	} else {
		return std::nullopt;
	}

	// inet_pton needs a terminated string; host is short (checked above).
	char buf[INET6_ADDRSTRLEN];
	std::memcpy(buf, host.data(), host.size());
	buf[host.size()] = '\0';

	SockAddr a;
	if (v6) {
		auto *sin6 = reinterpret_cast<sockaddr_in6 *>(&a.ss);
		if (inet_pton(AF_INET6, buf, &sin6->sin6_addr) != 1)
			return std::nullopt;
		sin6->sin6_family = AF_INET6;
		sin6->sin6_port = htons(p);
	} else {
		auto *sin = reinterpret_cast<sockaddr_in *>(&a.ss);
		if (inet_pton(AF_INET, buf, &sin->sin_addr) != 1)
			return std::nullopt;
		sin->sin_family = AF_INET;
		sin->sin_port = htons(p);
	}
	return a;
}

SockAddr SockAddr::ipv4(uint32_t host_order_addr, uint16_t port)
{
	SockAddr a;
	auto *sin = reinterpret_cast<sockaddr_in *>(&a.ss);
	sin->sin_family = AF_INET;
	sin->sin_addr.s_addr = htonl(host_order_addr);
	sin->sin_port = htons(port);
	return a;
}

uint16_t SockAddr::port() const
{
	switch (family()) {
	case AF_INET:
		return ntohs(reinterpret_cast<const sockaddr_in *>(&ss)->sin_port);
	case AF_INET6:
		return ntohs(reinterpret_cast<const sockaddr_in6 *>(&ss)->sin6_port);
	}
	return 0;
}

void SockAddr::set_port(uint16_t p)
{
	switch (family()) {
	case AF_INET:
		reinterpret_cast<sockaddr_in *>(&ss)->sin_port = htons(p);
		break;
	case AF_INET6:
		reinterpret_cast<sockaddr_in6 *>(&ss)->sin6_port = htons(p);
		break;
	}
}

bool SockAddr::is_any() const
{
	switch (family()) {
	case AF_INET:
		return reinterpret_cast<const sockaddr_in *>(&ss)->sin_addr.s_addr == INADDR_ANY;
	case AF_INET6: {
		const in6_addr &a = reinterpret_cast<const sockaddr_in6 *>(&ss)->sin6_addr;
		return std::memcmp(&a, &in6addr_any, sizeof(a)) == 0;
	}
	}
	return false;
}

std::string SockAddr::host() const
{
	char buf[INET6_ADDRSTRLEN] = {};
	switch (family()) {
	case AF_INET:
		inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in *>(&ss)->sin_addr, buf,
		          sizeof(buf));
		break;
	case AF_INET6:
		inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6 *>(&ss)->sin6_addr, buf,
		          sizeof(buf));
		break;
	}
	return buf;
}

std::string SockAddr::str() const
{
	switch (family()) {
	case AF_INET:
		return host() + ":" + std::to_string(port());
	case AF_INET6: {
		// Appended, not "[" + host(): GCC 12 at -O3 warns of an overlapping memcpy inside
		// operator+(const char *, std::string&&) that cannot happen (-Werror=restrict).
		std::string s = "[";
		s += host();
		s += "]:";
		s += std::to_string(port());
		return s;
	}
	}
	return "";
}

socklen_t SockAddr::len() const
{
	switch (family()) {
	case AF_INET:
		return sizeof(sockaddr_in);
	case AF_INET6:
		return sizeof(sockaddr_in6);
	}
	return 0;
}

// An IPv4 address and its v4-mapped IPv6 form name the same host: a dual-stack listener
// reports peers as ::ffff:a.b.c.d, and RoCE GIDs use the mapped form too.
bool SockAddr::same_host(const SockAddr &o) const
{
	uint32_t a4 = 0, b4 = 0;
	bool a_is4 = as_v4(*this, &a4), b_is4 = as_v4(o, &b4);
	if (a_is4 || b_is4)
		return a_is4 && b_is4 && a4 == b4;
	if (family() != o.family())
		return false;
	if (family() == AF_INET6) {
		const auto *a = reinterpret_cast<const sockaddr_in6 *>(&ss);
		const auto *b = reinterpret_cast<const sockaddr_in6 *>(&o.ss);
		return std::memcmp(&a->sin6_addr, &b->sin6_addr, sizeof(in6_addr)) == 0 &&
		       a->sin6_scope_id == b->sin6_scope_id;
	}
	return true; // both AF_UNSPEC (or an unknown family): nothing to tell them apart
}

} // namespace ulp
