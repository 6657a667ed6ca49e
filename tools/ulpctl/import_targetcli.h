// SPDX-License-Identifier: MIT
// tools/ulpctl/import_targetcli.h - what the two halves of the saveconfig.json importer
// share (import_targetcli.cc: the file, targets and TPGs; import_lio_storage.cc: the
// storage objects): the JSON reader that names a bad value by its path, and a storage
// object as a LUN. Private to them.
#pragma once

#include "tools/ulpctl/import.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <map>
#include <string>

namespace ulpctl::import::lio
{

using json = nlohmann::json;

inline std::string scalar(const json &v)
{
	return v.is_string() ? v.get<std::string>() : v.dump();
}

// The reader: values by key with their JSON path, a wrong kind an error naming it.
struct Reader {
	const std::string &source;
	std::string *why;
	Result *r;

	bool bad(const std::string &path, const char *what)
	{
		*why = source + ": " + path + ": " + what;
		return false;
	}
	bool str(const json &o, const char *k, const std::string &path, std::string *out)
	{
		auto it = o.find(k);
		if (it == o.end() || it->is_null())
			return true;
		if (!it->is_string())
			return bad(path + "." + k, "must be a string");
		*out = it->get<std::string>();
		return true;
	}
	bool u64(const json &o, const char *k, const std::string &path, uint64_t *out)
	{
		auto it = o.find(k);
		if (it == o.end() || it->is_null())
			return true;
		if (!it->is_number_unsigned())
			return bad(path + "." + k, "must be a number, 0 or more");
		*out = it->get<uint64_t>();
		return true;
	}
	bool boolean(const json &o, const char *k, const std::string &path, bool *out)
	{
		auto it = o.find(k);
		if (it == o.end() || it->is_null())
			return true;
		if (it->is_boolean())
			*out = it->get<bool>();
		else if (it->is_number_unsigned() && it->get<uint64_t>() <= 1)
			*out = it->get<uint64_t>() == 1;
		else
			return bad(path + "." + k, "must be true or false");
		return true;
	}
	// An array member (absent: empty), at most max entries.
	bool arr(const json &o, const char *k, const std::string &path, const json **out,
	         size_t max)
	{
		static const json empty = json::array();
		*out = &empty;
		auto it = o.find(k);
		if (it == o.end() || it->is_null())
			return true;
		if (!it->is_array())
			return bad(path + "." + k, "must be an array");
		if (it->size() > max)
			return bad(path + "." + k, "has too many entries for this importer");
		*out = &*it;
		return true;
	}
	bool obj(const json &v, const std::string &path)
	{
		return v.is_object() || bad(path, "must be an object");
	}
	// Keys of o that are not in known: listed.
	void unknown(const json &o, const std::string &where,
	             std::initializer_list<const char *> known)
	{
		for (const auto &it : o.items()) {
			// Not a structured binding: clang 14 captures none in a lambda.
			const std::string &k = it.key();
			if (std::none_of(known.begin(), known.end(),
			                 [&](const char *n) { return k == n; }))
				r->skip(where, k + " " + scalar(it.value()),
				        "not a setting this importer knows");
		}
	}
};

// Whether v is LIO's default for k in m ("*": any value is, the key being no setting).
inline bool is_default(const std::map<std::string, std::string> &m, const std::string &k,
                       const std::string &v)
{
	auto it = m.find(k);
	return it != m.end() && (it->second == "*" || it->second == v);
}

inline std::string canonical_plugin(const std::string &p)
{
	if (p == "iblock")
		return "block";
	if (p == "rd_mcp")
		return "ramdisk";
	if (p.rfind("user:", 0) == 0)
		return "user";
	return p;
}

struct StorageObject {
	std::string where; // "storage object fileio/disk1"
	targetd::LunCfg lun;
	bool usable = false;
	std::string used_by; // the LUN that has it
};

// An object's LUN settings from storage_objects[i] (path), its key ("PLUGIN/NAME") in
// out->where; usable false when it cannot be a LUN (listed). false: the input is invalid.
bool load_storage_object(Reader &rd, const json &so, const std::string &path, StorageObject *out);

} // namespace ulpctl::import::lio
