// SPDX-License-Identifier: MIT
// ha/records.cc - the cluster map's records (records.h).
#include "ha/records.h"

#include "ha/cluster_map.h"

#include <algorithm>
#include <initializer_list>
#include <vector>

namespace ulp::ha
{

namespace
{

bool value_ok(std::string_view v)
{
	if (v.empty())
		return false;
	for (char c : v)
		if (c < 0x21 || c > 0x7e || c == ';' || c == '=')
			return false;
	return true;
}

} // namespace

std::string owner_key(std::string_view group)
{
	return "owner/" + std::string(group);
}

std::string owner_record_encode(const OwnerRecord &r)
{
	return "gw=" + r.gw + ";addr=" + r.addr + ";state=" + (r.released ? "released" : "active") +
	       ";epoch=" + version_encode(r.epoch);
}

namespace
{

// The fields of record s, each of keys exactly once, into vals (same order); false for a
// damaged record (records.h).
bool fields(std::string_view s, std::initializer_list<std::string_view> keys,
            std::string_view *vals)
{
	if (s.size() > kMaxRecordBytes)
		return false;
	std::vector<bool> seen(keys.size(), false);
	while (!s.empty()) {
		const size_t semi = s.find(';');
		const std::string_view field = s.substr(0, semi);
		s = semi == std::string_view::npos ? std::string_view() : s.substr(semi + 1);
		if (semi != std::string_view::npos && s.empty())
			return false; // a trailing ';'
		const size_t eq = field.find('=');
		if (eq == std::string_view::npos)
			return false;
		const std::string_view k = field.substr(0, eq), v = field.substr(eq + 1);
		if (!value_ok(v))
			return false;
		size_t i = 0;
		for (std::string_view want : keys) {
			if (want == k)
				break;
			i++;
		}
		if (i == keys.size() || seen[i])
			return false; // unknown or repeated
		seen[i] = true;
		vals[i] = v;
	}
	for (bool b : seen)
		if (!b)
			return false; // missing
	return true;
}

// A decimal 1..65535 without a sign or a leading zero.
bool u16_decode(std::string_view v, uint16_t *out)
{
	uint64_t n = 0;
	if (v.size() > 5 || !version_decode(v.data(), v.size(), &n) || n == 0 || n > 65535)
		return false;
	*out = uint16_t(n);
	return true;
}

} // namespace

bool owner_record_decode(std::string_view s, OwnerRecord *out)
{
	std::string_view v[4];
	if (!fields(s, {"gw", "addr", "state", "epoch"}, v) || !ha_name_valid(v[0]))
		return false;
	if (v[2] != "active" && v[2] != "released")
		return false;
	uint64_t e = 0;
	if (!version_decode(v[3].data(), v[3].size(), &e))
		return false;
	out->gw = std::string(v[0]);
	out->addr = std::string(v[1]);
	out->released = v[2] == "released";
	out->epoch = e;
	return true;
}

std::string gateway_key(std::string_view gw)
{
	return "gw/" + std::string(gw);
}

std::string gateway_record_encode(const GatewayRecord &r)
{
	return "id=" + std::to_string(r.id);
}

bool gateway_record_decode(std::string_view s, GatewayRecord *out)
{
	std::string_view v[1];
	uint16_t id = 0;
	if (!fields(s, {"id"}, v) || !u16_decode(v[0], &id))
		return false;
	out->id = id;
	return true;
}

std::string port_key(std::string_view target, std::string_view gw)
{
	return "port/" + std::string(target) + "/" + std::string(gw);
}

bool port_key_split(std::string_view key, std::string *target, std::string *gw)
{
	constexpr std::string_view kPrefix = "port/";
	if (key.substr(0, kPrefix.size()) != kPrefix)
		return false;
	key.remove_prefix(kPrefix.size());
	const size_t slash = key.rfind('/');
	if (slash == std::string_view::npos || slash == 0 || !ha_name_valid(key.substr(slash + 1)))
		return false;
	*target = std::string(key.substr(0, slash));
	*gw = std::string(key.substr(slash + 1));
	return true;
}

std::string port_record_encode(const PortRecord &r)
{
	std::string s = "rtpis=";
	for (size_t i = 0; i < r.rtpis.size(); i++)
		s += (i ? "," : "") + std::to_string(r.rtpis[i]);
	return s;
}

bool port_record_decode(std::string_view s, PortRecord *out)
{
	std::string_view v[1];
	if (!fields(s, {"rtpis"}, v))
		return false;
	std::vector<uint16_t> rtpis;
	std::string_view l = v[0];
	while (true) {
		const size_t comma = l.find(',');
		uint16_t r = 0;
		if (!u16_decode(l.substr(0, comma), &r) ||
		    std::find(rtpis.begin(), rtpis.end(), r) != rtpis.end())
			return false; // not a port number, or one twice
		rtpis.push_back(r);
		if (comma == std::string_view::npos)
			break;
		l.remove_prefix(comma + 1);
	}
	if (rtpis.size() > kMaxRecordPorts)
		return false;
	out->rtpis = std::move(rtpis);
	return true;
}

} // namespace ulp::ha
