// SPDX-License-Identifier: MIT
// ha/records.cc - the cluster map's records (records.h).
#include "ha/records.h"

#include "ha/cluster_map.h"

#include <algorithm>
#include <initializer_list>
#include <optional>
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

// A field of a record: its key, and where its value goes.
struct Field {
	std::string_view key;
	std::optional<std::string_view> *value;
};

// Split record s into the fields named: false for a record over the bound, a field that is
// not key=value with a valid value, an unknown or repeated key, or a trailing ';'. Fields
// absent stay nullopt.
bool split_fields(std::string_view s, std::initializer_list<Field> fields)
{
	if (s.size() > kMaxRecordBytes)
		return false;
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
		std::optional<std::string_view> *slot = nullptr;
		for (const Field &f : fields)
			if (f.key == k)
				slot = f.value;
		if (!slot || slot->has_value())
			return false; // unknown or repeated
		*slot = v;
	}
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

std::string owner_key(std::string_view group)
{
	return "owner/" + std::string(group);
}

std::string owner_record_encode(const OwnerRecord &r)
{
	return "gw=" + r.gw + ";addr=" + r.addr + ";state=" + (r.released ? "released" : "active") +
	       ";epoch=" + version_encode(r.epoch);
}

bool owner_record_decode(std::string_view s, OwnerRecord *out)
{
	std::optional<std::string_view> gw, addr, state, epoch;
	if (!split_fields(s, {{"gw", &gw}, {"addr", &addr}, {"state", &state}, {"epoch", &epoch}}))
		return false;
	if (!gw || !addr || !state || !epoch || !ha_name_valid(*gw))
		return false;
	if (*state != "active" && *state != "released")
		return false;
	uint64_t e = 0;
	if (!version_decode(epoch->data(), epoch->size(), &e))
		return false;
	out->gw = std::string(*gw);
	out->addr = std::string(*addr);
	out->released = *state == "released";
	out->epoch = e;
	return true;
}

std::string pr_gateway_key(uint64_t gid)
{
	return "gw." + version_encode(gid);
}

bool pr_gateway_key_decode(std::string_view key, uint64_t *gid)
{
	return key.starts_with("gw.") && version_decode(key.data() + 3, key.size() - 3, gid);
}

std::string pr_gateway_record_encode(const PrGatewayRecord &r)
{
	std::string s = "gw=" + r.gw + ";addr=" + r.addr;
	for (size_t i = 0; i < r.ports.size(); i++)
		s += (i ? "," : ";ports=") + std::to_string(r.ports[i]);
	return s;
}

bool pr_gateway_record_decode(std::string_view s, PrGatewayRecord *out)
{
	std::optional<std::string_view> gw, addr, ports;
	if (!split_fields(s, {{"gw", &gw}, {"addr", &addr}, {"ports", &ports}}))
		return false;
	if (!gw || !addr || !ha_name_valid(*gw))
		return false;
	// Relative target port ids: 1..65535 (SPC-4 7.8.6.5: 0 is reserved), ascending.
	std::vector<uint16_t> v;
	for (std::string_view p = ports.value_or(""); !p.empty();) {
		const size_t comma = p.find(',');
		const std::string_view one = p.substr(0, comma);
		p = comma == std::string_view::npos ? std::string_view() : p.substr(comma + 1);
		if (comma != std::string_view::npos && p.empty())
			return false; // a trailing ','
		uint64_t n = 0;
		if (!version_decode(one.data(), one.size(), &n) || n == 0 || n > 0xffff ||
		    (!v.empty() && n <= v.back()))
			return false;
		v.push_back(static_cast<uint16_t>(n));
	}
	out->gw = std::string(*gw);
	out->addr = std::string(*addr);
	out->ports = std::move(v);
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
	std::optional<std::string_view> id;
	uint16_t n = 0;
	if (!split_fields(s, {{"id", &id}}) || !id || !u16_decode(*id, &n))
		return false;
	out->id = n;
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
	std::optional<std::string_view> list;
	if (!split_fields(s, {{"rtpis", &list}}) || !list)
		return false;
	std::vector<uint16_t> rtpis;
	std::string_view l = *list;
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
