// SPDX-License-Identifier: MIT
#include "tools/common/named_device.h"

#include "providers/soft/soft.h"

#ifdef ULP_HAVE_VERBS
#include "providers/verbs/verbs.h"
#endif

#include <arpa/inet.h>
#include <dirent.h>

#include <cstdio>
#include <fstream>

namespace ulp::tools
{

namespace
{

// "::ffff:a.b.c.d" (a RoCE v2 IPv4-mapped GID) -> "a.b.c.d"; "" otherwise.
std::string gid_ipv4(const Gid &g)
{
	for (int i = 0; i < 10; i++)
		if (g[i])
			return "";
	if (g[10] != 0xff || g[11] != 0xff)
		return "";
	char buf[INET_ADDRSTRLEN];
	if (!inet_ntop(AF_INET, &g[12], buf, sizeof(buf)))
		return "";
	return buf;
}

// The first IPv4-mapped GID of port 1 in sysfs (rxe keeps the link-local GID at index 0
// and the address's at a later index).
std::string sysfs_ipv4(const std::string &name)
{
	const std::string dir = "/sys/class/infiniband/" + name + "/ports/1/gids/";
	for (int idx = 0; idx < 16; idx++) {
		std::ifstream f(dir + std::to_string(idx));
		std::string text;
		if (!f || !std::getline(f, text))
			continue;
		in6_addr a{};
		if (inet_pton(AF_INET6, text.c_str(), &a) != 1)
			continue;
		Gid g;
		std::copy(a.s6_addr, a.s6_addr + 16, g.begin());
		if (std::string ip = gid_ipv4(g); !ip.empty())
			return ip;
	}
	return "";
}

} // namespace

std::string device_names()
{
	std::string s;
	for (Device *d : devices())
		s += (s.empty() ? "" : " ") + d->name();
	return s;
}

bool open_named_device(const std::string &name, NamedDevice *out, std::string *why)
{
	Device *dev = find_device(name);
	if (!dev) {
		const std::string have = device_names();
		*why = "no device '" + name + "' (";
		*why += have.empty() ? std::string("no devices registered") : "devices: " + have;
#ifndef ULP_HAVE_VERBS
		*why += "; this build has without the verbs provider";
#endif
		*why += ")";
		return false;
	}
#ifdef ULP_HAVE_VERBS
	if (verbs::is_verbs(*dev)) {
		out->dev = dev;
		out->provider = &verbs::provider();
		out->provider_name = "verbs";
		out->ip = gid_ipv4(dev->gid());
		if (out->ip.empty())
			out->ip = sysfs_ipv4(name);
		return true;
	}
#endif
	if (soft::is_soft(*dev)) {
		// A soft device this process made (ulp-stress shares one between its sessions).
		out->dev = dev;
		out->provider = &soft::provider();
		out->provider_name = "soft";
		out->ip = gid_ipv4(dev->gid());
		return true;
	}
	*why = "device '" + name +
	       "' is not a verbs device (for the soft provider, leave out "
	       "--device)";
	return false;
}

} // namespace ulp::tools
