// SPDX-License-Identifier: MIT
// fuzz/fuzz_admin_rpc.cc - libFuzzer target: the admin socket's request parser and
// dispatcher (admin/rpc.cc) against arbitrary request lines: the length and depth bounds,
// JSON-RPC 2.0 validation, the parameter checks of every parameter type, and the
// responses built from whatever got through.
//
// Input: one request line (the server cuts lines at '\n'; a line may hold anything else).
// Invariants: every response is empty (a notification) or exactly one line holding one
// JSON-RPC 2.0 response object with the request's id or null, and either "result" or an
// "error" with an integer code and a string message; a method runs only with parameters
// that passed their table (it checks them again and traps if not).
//
// Seeds: ULP_FUZZ_SEEDS=<dir> makes the binary write well-formed and malformed requests
// there and exit (scripts/fuzz.sh does this).
#include "admin/rpc.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

using namespace ulp::admin;

namespace
{

[[noreturn]] void fail(const char *what)
{
	std::fprintf(stderr, "fuzz_admin_rpc: %s\n", what);
	__builtin_trap();
}

void check(bool ok, const char *what)
{
	if (!ok)
		fail(what);
}

const std::vector<ParamSpec> kSpecs = {
    {"name", ParamType::String, true}, {"n", ParamType::Uint, false, 1, 16383},
    {"flag", ParamType::Bool},         {"size", ParamType::Size},
    {"list", ParamType::Strings},      {"obj", ParamType::Object},
};

Methods &table()
{
	static Methods m = [] {
		Methods t;
		t.add({"lun_create", "", kSpecs, [](const json &p, const Caller &) -> json {
			       // What check_params promised, checked again.
			       check(p.is_object() && p.contains("name") && p["name"].is_string(),
			             "required string missing");
			       const uint64_t n = param_uint(p, "n", 1);
			       check(n >= 1 && n <= 16383, "range not enforced");
			       (void)param_bool(p, "flag", false);
			       (void)param_size(p, "size", 0);
			       for (const std::string &s : param_strings(p, "list"))
				       (void)s;
			       if (p.contains("obj"))
				       check(p["obj"].is_object(), "object type not enforced");
			       if (n == 13)
				       throw MethodError{-EINVAL, "thirteen"};
			       return p;
		       }});
		t.add({"rpc_get_methods", "", {}, [](const json &, const Caller &) {
			       return table().describe();
		       }});
		return t;
	}();
	return m;
}

void write_seeds(const char *dir)
{
	const char *seeds[] = {
	    R"({"jsonrpc":"2.0","id":1,"method":"lun_create","params":{"name":"iqn.x","n":3,"size":"32M","flag":true,"list":["a","b"],"obj":{}}})",
	    R"({"jsonrpc":"2.0","id":"s","method":"rpc_get_methods"})",
	    R"({"jsonrpc":"2.0","method":"lun_create","params":{"name":"x"}})",
	    R"({"jsonrpc":"2.0","id":null,"method":"lun_create","params":{"name":"x","n":13}})",
	    R"([{"jsonrpc":"2.0","id":1,"method":"x"}])",
	    R"({"jsonrpc":"2.0","id":1,"method":"lun_create","params":{"name":"x","size":"99999999999T"}})",
	    R"({"jsonrpc":"2.0","id":1,"method":"lun_create","params":{"name":"\u00e9\ud800"}})",
	};
	int i = 0;
	for (const char *s : seeds) {
		std::ofstream f(std::string(dir) + "/seed" + std::to_string(i++));
		f << s;
	}
}

} // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***)
{
	if (const char *dir = std::getenv("ULP_FUZZ_SEEDS")) {
		write_seeds(dir);
		std::exit(0);
	}
	return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const std::string_view line(reinterpret_cast<const char *>(data), size);
	const std::string out = table().handle_line(line, Caller{"fuzz"});
	if (out.empty())
		return 0; // a notification that ran
	check(out.back() == '\n' && out.find('\n') == out.size() - 1, "response not one line");
	const json r = json::parse(out, nullptr, false);
	check(r.is_object(), "response not a JSON object");
	check(r.contains("jsonrpc") && r["jsonrpc"] == "2.0", "no jsonrpc 2.0");
	check(r.contains("id"), "no id");
	const json &id = r["id"];
	check(id.is_null() || id.is_string() || id.is_number_integer(), "bad id type");
	const bool res = r.contains("result"), err = r.contains("error");
	check(res != err, "neither or both of result and error");
	if (err) {
		check(r["error"].is_object() && r["error"]["code"].is_number_integer() &&
		          r["error"]["message"].is_string(),
		      "malformed error object");
	}
	// The depth bound: nothing deeper than kMaxDepth got parsed.
	if (json_depth(line, kMaxDepth) > kMaxDepth)
		check(err && r["error"]["code"] == kParseError, "too deep, yet not a parse error");
	uint64_t n;
	(void)parse_size(line, &n);
	return 0;
}
