// SPDX-License-Identifier: MIT
// ha/records.cc - the cluster map's records (records.h).
#include "ha/records.h"

#include "ha/cluster_map.h"

#include <optional>

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

bool ha_name_valid(std::string_view s)
{
	if (s.empty() || s.size() > 64)
		return false;
	for (char c : s)
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '.' || c == '_' || c == '-'))
			return false;
	return true;
}

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
	if (s.size() > kMaxRecordBytes)
		return false;
	std::optional<std::string_view> gw, addr, state, epoch;
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
		std::optional<std::string_view> *slot = k == "gw"      ? &gw
		                                        : k == "addr"  ? &addr
		                                        : k == "state" ? &state
		                                        : k == "epoch" ? &epoch
		                                                       : nullptr;
		if (!slot || slot->has_value())
			return false; // unknown or repeated
		*slot = v;
	}
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

} // namespace ulp::ha
