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

struct SockAddr {
	sockaddr_storage ss{};

	// Parse "host:port" (IPv4 dotted quad or [IPv6]). Port is required unless
	// default_port is given. Host names are not resolved: the CM needs addresses.
	static std::optional<SockAddr> parse(std::string_view s, int default_port = -1);
	static SockAddr ipv4(uint32_t host_order_addr, uint16_t port);

	int family() const { return ss.ss_family; }
	bool empty() const { return ss.ss_family == AF_UNSPEC; }
	uint16_t port() const;
	void set_port(uint16_t port);
	bool is_any() const; // 0.0.0.0 or ::
	std::string host() const;
	std::string str() const; // "host:port" or "[host]:port"
	const sockaddr *sa() const { return reinterpret_cast<const sockaddr *>(&ss); }
	socklen_t len() const;
	bool same_host(const SockAddr &o) const; // address equal, port ignored
	bool operator==(const SockAddr &o) const { return same_host(o) && port() == o.port(); }
};

} // namespace ulp
