// SPDX-License-Identifier: MIT
// core/addr.h - socket addresses for the CM ("127.0.0.1:4420", "[::1]:3260").
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace ulp
{

// A socket address as the CM takes it: IPv4 or IPv6, with a port.
struct SockAddr {
	sockaddr_storage ss{}; // AF_UNSPEC (empty), AF_INET or AF_INET6

	// Parse "host:port" (IPv4 dotted quad or [IPv6]). Port is required unless
	// default_port is given. Host names are not resolved: the CM needs addresses.
	static std::optional<SockAddr> parse(std::string_view s, int default_port = -1);
	// An IPv4 address from a host-order address (INADDR_LOOPBACK) and port.
	static SockAddr ipv4(uint32_t host_order_addr, uint16_t port);

	int family() const { return ss.ss_family; }              // AF_INET, AF_INET6, AF_UNSPEC
	bool empty() const { return ss.ss_family == AF_UNSPEC; } // no address set
	uint16_t port() const;                                   // host order
	void set_port(uint16_t port);                            // host order
	bool is_any() const;                                     // 0.0.0.0 or ::
	std::string host() const; // the address alone, "127.0.0.1" or "::1"
	std::string str() const;  // "host:port" or "[host]:port"
	// For the socket calls (bind(2), connect(2)), with len().
	const sockaddr *sa() const { return reinterpret_cast<const sockaddr *>(&ss); }
	socklen_t len() const;                   // the length of the family's sockaddr
	bool same_host(const SockAddr &o) const; // address equal, port ignored
	// Same address and port.
	bool operator==(const SockAddr &o) const { return same_host(o) && port() == o.port(); }
};

} // namespace ulp
