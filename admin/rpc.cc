// SPDX-License-Identifier: MIT
// admin/rpc.cc - JSON-RPC 2.0 requests and responses, parameter checks, the method table
// (see rpc.h).
#include "admin/rpc.h"

#include "core/log.h"

#include <cerrno>
#include <cstdlib>
#include <exception>

namespace ulp::admin
{

int json_depth(std::string_view text, int limit, size_t *at)
{
	int depth = 0, max = 0;
	bool in_str = false, esc = false;
	for (size_t i = 0; i < text.size(); i++) {
		const char c = text[i];
		if (in_str) {
			if (esc)
				esc = false;
			else if (c == '\\')
				esc = true;
			else if (c == '"')
				in_str = false;
			continue;
		}
		switch (c) {
		case '"':
			in_str = true;
			break;
		case '[':
		case '{':
			if (++depth > max) {
				max = depth;
				if (max > limit) {
					if (at)
						*at = i;
					return max;
				}
			}
			break;
		case ']':
		case '}':
			depth--;
			break;
		default:
			break;
		}
	}
	return max;
}

bool parse_request(std::string_view line, Request *out, Error *err, json *id_out)
{
	*id_out = nullptr;
	if (line.size() > kMaxRequestBytes) {
		*err = {kParseError,
		        "request longer than " + std::to_string(kMaxRequestBytes) + " bytes",
		        {}};
		return false;
	}
	if (json_depth(line, kMaxDepth) > kMaxDepth) {
		*err = {kParseError, "request nested deeper than " + std::to_string(kMaxDepth), {}};
		return false;
	}
	json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
	if (j.is_discarded()) {
		*err = {kParseError, "not a JSON text", {}};
		return false;
	}
	if (j.is_array()) {
		*err = {kInvalidRequest, "batch requests are not supported", {}};
		return false;
	}
	if (!j.is_object()) {
		*err = {kInvalidRequest, "a request is a JSON object", {}};
		return false;
	}
	// The id first, so that the error response can carry it (JSON-RPC 2.0 section 5).
	auto id = j.find("id");
	out->notification = id == j.end();
	if (!out->notification) {
		if (!id->is_string() && !id->is_number_integer() && !id->is_null()) {
			*err = {kInvalidRequest, "\"id\" must be a string, an integer or null", {}};
			return false;
		}
		out->id = *id;
		*id_out = *id;
	}
	auto v = j.find("jsonrpc");
	if (v == j.end() || !v->is_string() || v->get_ref<const std::string &>() != "2.0") {
		*err = {kInvalidRequest, "\"jsonrpc\" must be \"2.0\"", {}};
		return false;
	}
	auto m = j.find("method");
	if (m == j.end() || !m->is_string() || m->get_ref<const std::string &>().empty()) {
		*err = {kInvalidRequest, "\"method\" must be a non-empty string", {}};
		return false;
	}
	out->method = m->get<std::string>();
	auto p = j.find("params");
	if (p == j.end() || p->is_null()) {
		out->params = json::object();
	} else if (p->is_object()) {
		out->params = std::move(*p);
	} else {
		*err = {kInvalidParams, "\"params\" must be an object (parameters by name)", {}};
		return false;
	}
	for (auto &[k, val] : j.items())
		if (k != "jsonrpc" && k != "method" && k != "params" && k != "id") {
			*err = {kInvalidRequest, "unknown member \"" + k + "\"", {}};
			return false;
		}
	return true;
}

std::string result_line(const json &id, const json &result)
{
	json r = {{"jsonrpc", "2.0"}, {"id", id}, {"result", result}};
	return r.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
}

std::string error_line(const json &id, const Error &e)
{
	json err = {{"code", e.code}, {"message", e.message}};
	if (!e.data.is_null())
		err["data"] = e.data;
	json r = {{"jsonrpc", "2.0"}, {"id", id}, {"error", err}};
	return r.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
}

// ---- Parameters -----------------------------------------------------------------------------

bool parse_size(std::string_view s, uint64_t *out)
{
	size_t i = 0;
	uint64_t v = 0;
	while (i < s.size() && s[i] >= '0' && s[i] <= '9') {
		const uint64_t d = uint64_t(s[i] - '0');
		if (v > (UINT64_MAX - d) / 10)
			return false;
		v = v * 10 + d;
		i++;
	}
	if (i == 0)
		return false;
	const std::string_view suf = s.substr(i);
	int shift = 0;
	if (suf.empty())
		shift = 0;
	else if (suf == "K" || suf == "k" || suf == "KiB")
		shift = 10;
	else if (suf == "M" || suf == "m" || suf == "MiB")
		shift = 20;
	else if (suf == "G" || suf == "g" || suf == "GiB")
		shift = 30;
	else if (suf == "T" || suf == "t" || suf == "TiB")
		shift = 40;
	else
		return false;
	if (shift && v > (UINT64_MAX >> shift))
		return false;
	*out = v << shift;
	return true;
}

namespace
{

const char *type_name(ParamType t)
{
	switch (t) {
	case ParamType::String:
		return "a string";
	case ParamType::Bool:
		return "true or false";
	case ParamType::Uint:
		return "a non-negative integer";
	case ParamType::Size:
		return "a size (bytes, or a string such as \"32M\")";
	case ParamType::Strings:
		return "an array of strings";
	case ParamType::Object:
		return "an object";
	}
	return "?";
}

bool type_ok(const json &v, const ParamSpec &s, std::string *why)
{
	switch (s.type) {
	case ParamType::String:
		return v.is_string();
	case ParamType::Bool:
		return v.is_boolean();
	case ParamType::Uint: {
		if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<int64_t>() >= 0))
			return false;
		const uint64_t n = v.get<uint64_t>();
		if (n < s.min || n > s.max) {
			*why = "\"" + std::string(s.name) + "\" must be " + std::to_string(s.min) +
			       ".." + std::to_string(s.max);
			return false;
		}
		return true;
	}
	case ParamType::Size: {
		uint64_t n;
		if (v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0))
			return true;
		return v.is_string() && parse_size(v.get_ref<const std::string &>(), &n);
	}
	case ParamType::Strings:
		if (!v.is_array())
			return false;
		for (const json &e : v)
			if (!e.is_string())
				return false;
		return true;
	case ParamType::Object:
		return v.is_object();
	}
	return false;
}

} // namespace

bool check_params(const json &params, const std::vector<ParamSpec> &specs, Error *err)
{
	for (auto &[k, v] : params.items()) {
		const ParamSpec *s = nullptr;
		for (const ParamSpec &p : specs)
			if (k == p.name)
				s = &p;
		if (!s) {
			std::string known;
			for (const ParamSpec &p : specs)
				known += std::string(known.empty() ? "" : ", ") + p.name;
			*err = {kInvalidParams,
			        "unknown parameter \"" + k + "\"" +
			            (known.empty() ? " (this method takes none)"
			                           : " (known: " + known + ")"),
			        {}};
			return false;
		}
		std::string why;
		if (!type_ok(v, *s, &why)) {
			*err = {kInvalidParams,
			        why.empty() ? "\"" + k + "\" must be " + type_name(s->type) : why,
			        {}};
			return false;
		}
	}
	for (const ParamSpec &p : specs)
		if (p.required && !params.contains(p.name)) {
			*err = {kInvalidParams,
			        "missing parameter \"" + std::string(p.name) + "\"",
			        {}};
			return false;
		}
	return true;
}

std::string param_str(const json &params, const char *name, const std::string &def)
{
	auto it = params.find(name);
	return it == params.end() ? def : it->get<std::string>();
}

bool param_bool(const json &params, const char *name, bool def)
{
	auto it = params.find(name);
	return it == params.end() ? def : it->get<bool>();
}

uint64_t param_uint(const json &params, const char *name, uint64_t def)
{
	auto it = params.find(name);
	return it == params.end() ? def : it->get<uint64_t>();
}

uint64_t param_size(const json &params, const char *name, uint64_t def)
{
	auto it = params.find(name);
	if (it == params.end())
		return def;
	if (it->is_string()) {
		uint64_t n = def;
		parse_size(it->get_ref<const std::string &>(), &n);
		return n;
	}
	return it->get<uint64_t>();
}

std::vector<std::string> param_strings(const json &params, const char *name)
{
	std::vector<std::string> v;
	auto it = params.find(name);
	if (it != params.end())
		for (const json &e : *it)
			v.push_back(e.get<std::string>());
	return v;
}

// ---- Methods --------------------------------------------------------------------------------

void Methods::add(Method m)
{
	std::string n = m.name;
	methods_[n] = std::move(m);
}

const Method *Methods::find(const std::string &name) const
{
	auto it = methods_.find(name);
	return it == methods_.end() ? nullptr : &it->second;
}

std::vector<std::string> Methods::names() const
{
	std::vector<std::string> v;
	for (auto &[n, m] : methods_)
		v.push_back(n);
	return v;
}

json Methods::describe() const
{
	json out = json::array();
	for (auto &[n, m] : methods_) {
		json ps = json::array();
		for (const ParamSpec &p : m.params)
			ps.push_back({{"name", p.name},
			              {"type", type_name(p.type)},
			              {"required", p.required},
			              {"help", p.help}});
		out.push_back({{"name", n}, {"help", m.help}, {"params", ps}});
	}
	return out;
}

std::string Methods::handle_line(std::string_view line, const Caller &caller) const
{
	Request req;
	Error err;
	json id;
	if (!parse_request(line, &req, &err, &id))
		return error_line(id, err);
	auto reply = [&](std::string s) { return req.notification ? std::string() : s; };
	const Method *m = find(req.method);
	if (!m)
		return reply(error_line(
		    req.id, {kMethodNotFound,
		             "no method \"" + req.method + "\" (rpc_get_methods lists them)",
		             {}}));
	if (!check_params(req.params, m->params, &err))
		return reply(error_line(req.id, err));
	try {
		json result = m->handler(req.params, caller);
		return reply(result_line(req.id, result));
	} catch (const MethodError &e) {
		return reply(error_line(req.id, {e.code, e.message, {}}));
	} catch (const std::exception &e) {
		ULP_LOG(Error, Tool, "admin: {} failed: {}", req.method, e.what());
		return reply(error_line(req.id, {kInternalError, e.what(), {}}));
	}
}

} // namespace ulp::admin
