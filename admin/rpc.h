// SPDX-License-Identifier: MIT
// admin/rpc.h - JSON-RPC 2.0 (https://www.jsonrpc.org/specification) as ulp-targetd's
// admin socket speaks it: one request in, one response out, each a JSON object on one line.
//
// Framing: newline-delimited. A request is one JSON object followed by '\n' (a JSON text
// never needs a raw newline: strings escape theirs); the response is one line too. So
// `echo '{"jsonrpc":"2.0","id":1,"method":"rpc_get_methods"}' | socat - UNIX:/run/...`
// and a three-line Python client both speak it, as do SPDK-style scripts that end a request
// with a newline.
//
// Parsing is bounded before nlohmann's parser sees anything: the line's length
// (kMaxRequestBytes) and its nesting depth (kMaxDepth) are checked first, then the object
// must be a JSON-RPC 2.0 request: "jsonrpc": "2.0", a string "method", "params" an object
// (by-name parameters only; absent is {}), "id" a string, an integer or null, or absent (a
// notification: run, never answered). Batches (arrays) are refused. Each failure is one
// of the spec's error objects:
//   -32700 parse error       not JSON, too deep, too long
//   -32600 invalid request   not a request object, a batch, wrong member types
//   -32601 method not found
//   -32602 invalid params    a parameter missing, unknown, or of the wrong type or range
//   -32603 internal error
// and a method's own failures carry a negative errno as the code (SPDK's convention):
// -2 ENOENT, -17 EEXIST, -16 EBUSY, -22 EINVAL, -110 ETIMEDOUT, ...
//
// Parameters are checked against a table (ParamSpec) before a method runs: a method never
// sees a request it would have to half-refuse.
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ulp::admin
{

using json = nlohmann::json;

constexpr size_t kMaxRequestBytes = 1u << 20; // a request line, without its newline
constexpr int kMaxDepth = 32;                 // nesting of arrays and objects

enum ErrorCode : int {
	kParseError = -32700,
	kInvalidRequest = -32600,
	kMethodNotFound = -32601,
	kInvalidParams = -32602,
	kInternalError = -32603,
	kPermissionDenied = -32000, // SO_PEERCRED: this peer may not administer the daemon
	kServerBusy = -32001,       // too many clients at once
};

// An error response's contents.
struct Error {
	int code = kInternalError;
	std::string message;
	json data; // optional; null: absent
};

struct Request {
	std::string method;
	json params = json::object(); // always an object
	json id;                      // string, integer or null; meaningless when notification
	bool notification = false;    // no "id" member: never answered
};

// Parse one request line (no trailing newline). False with *err filled (and *id_out set to
// the request's id when it could be read, else null, as the spec wants for the response).
bool parse_request(std::string_view line, Request *out, Error *err, json *id_out);

// The nesting depth of a JSON text, counted outside strings; stops counting past limit
// (checked before nlohmann's parser, which recurses). at, when given, is set to the byte
// offset of the bracket that went past limit (for a file:line:column message).
int json_depth(std::string_view text, int limit, size_t *at = nullptr);

// Response lines (with the trailing newline).
std::string result_line(const json &id, const json &result);
std::string error_line(const json &id, const Error &e);

// ---- Parameters -----------------------------------------------------------------------------

enum class ParamType : uint8_t {
	String,  // a JSON string
	Bool,    // true or false
	Uint,    // a non-negative integer (within [min, max])
	Size,    // bytes: a non-negative integer, or a string with K/M/G/T (powers of 1024)
	Strings, // an array of strings
	Object,  // a JSON object (checked by the method)
};

struct ParamSpec {
	const char *name;
	ParamType type;
	bool required = false;
	uint64_t min = 0;          // Uint
	uint64_t max = UINT64_MAX; // Uint
	const char *help = "";     // what it is (rpc_get_methods lists it)
};

// Every member of params named in specs, of its type and range; every required one there;
// nothing else. False with *err (kInvalidParams, naming the parameter).
bool check_params(const json &params, const std::vector<ParamSpec> &specs, Error *err);

// "1G" -> 1073741824; a bare number is bytes; K M G T are powers of 1024 (also KiB ...).
bool parse_size(std::string_view s, uint64_t *out);

// A parameter as its type (check_params has run): the value, or def when absent.
std::string param_str(const json &params, const char *name, const std::string &def = {});
bool param_bool(const json &params, const char *name, bool def);
uint64_t param_uint(const json &params, const char *name, uint64_t def);
uint64_t param_size(const json &params, const char *name, uint64_t def);
std::vector<std::string> param_strings(const json &params, const char *name);

// ---- Methods --------------------------------------------------------------------------------

// A method's failure: a negative errno (or an ErrorCode) and a message.
struct MethodError {
	int code;
	std::string message;
};

// Who called: for the log line every change writes ("uid 0 pid 4242", "tcp 127.0.0.1:40000").
struct Caller {
	std::string who;
};

// A method: the result, or throws MethodError (caught by the dispatcher; any other
// exception is an internal error, logged).
using Handler = std::function<json(const json &params, const Caller &caller)>;

struct Method {
	std::string name;
	std::string help;
	std::vector<ParamSpec> params;
	Handler handler;
};

// The method table: one per daemon. Dispatch checks the parameters, runs the handler and
// builds the response line ("" for a notification).
class Methods
{
public:
	void add(Method m);
	const Method *find(const std::string &name) const;
	std::vector<std::string> names() const;
	// rpc_get_methods's answer: every method with its help and parameters.
	json describe() const;

	// One request line to one response line (with its newline; empty for notifications).
	std::string handle_line(std::string_view line, const Caller &caller = {}) const;

private:
	std::map<std::string, Method> methods_;
};

} // namespace ulp::admin
