// SPDX-License-Identifier: MIT
// fuzz/fuzz_http_request.cc - libFuzzer target: the metrics endpoint's request head parser
// (admin/http.cc) against any bytes, as the server feeds it: the head found by
// http_head_end in what a client sent, then parse_http_request.
//
// Invariants: no crash, no read past the input; a well-formed result has a method of
// 1..kMaxHttpMethod token characters, a path starting with '/' and holding no space or
// control character, HTTP/1.x; an error is one of 400 and 431; an input longer than
// kMaxHttpHead is never well formed; the response written for it has a status line and
// ends its head with an empty line.
//
// Seeds: ULP_FUZZ_SEEDS=<dir> writes well-formed and malformed heads there and exits.
#include "admin/http.h"

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	using namespace ulp::admin;
	const std::string_view in(reinterpret_cast<const char *>(data), size);
	const size_t end = http_head_end(in);
	if (end != std::string_view::npos && (end > in.size() || end < 2))
		__builtin_trap();
	const std::string_view head = end == std::string_view::npos ? in : in.substr(0, end);
	const HttpRequest r = parse_http_request(head);
	if (r.status == 0) {
		if (head.size() > kMaxHttpHead || r.method.empty() ||
		    r.method.size() > kMaxHttpMethod || r.path.empty() || r.path[0] != '/' ||
		    r.minor < 0 || r.minor > 9)
			__builtin_trap();
		for (char c : r.path)
			if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f || c == '?')
				__builtin_trap();
	} else if (r.status != 400 && r.status != 431) {
		__builtin_trap();
	}
	const std::string resp = http_response(r.status ? r.status : 200, "text/plain", head);
	if (resp.rfind("HTTP/1.0 ", 0) != 0 || resp.find("\r\n\r\n") == std::string::npos)
		__builtin_trap();
	return 0;
}

extern "C" int LLVMFuzzerInitialize(int *, char ***)
{
	if (const char *dir = std::getenv("ULP_FUZZ_SEEDS")) {
		const char *seeds[] = {
		    "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1:9261\r\nUser-Agent: "
		    "Prometheus/2.45\r\n"
		    "Accept: text/plain;version=0.0.4;q=1\r\n\r\n",
		    "GET /metrics?x=1 HTTP/1.0\n\n",
		    "HEAD /metrics HTTP/1.1\r\n\r\n",
		    "POST /metrics HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc",
		    "GET / HTTP/1.1\r\n folded: no\r\n\r\n",
		    "GET /metrics HTTP/2.0\r\n\r\n",
		};
		int i = 0;
		for (const char *s : seeds)
			std::ofstream(std::string(dir) + "/head" + std::to_string(i++)) << s;
		std::exit(0);
	}
	return 0;
}
