// SPDX-License-Identifier: MIT
// admin/http.h - the metrics endpoint's HTTP: a request head read and checked (RFC 9112
// §2-§5, the subset a scraper sends), and a response written, HTTP/1.0 style (one request a
// connection, then close: RFC 9112 §9.3's "close" option). Nothing else of HTTP: no body is
// read, no keep-alive, no chunking, no TLS. The admin server (server.h) runs it on its own
// thread, beside the JSON-RPC socket, with its bounds (clients at once, read timeout).
//
// Why not cpp-httplib (Debian's libcpp-httplib-dev 0.11.4): it bounds a header line but not
// the number of lines (a client may grow a request without end, a line every read timeout),
// it queues accepted connections without bound behind its thread pool, and it answers an
// unregistered method 404 or 400, not 405. This file is ~200 lines with the bounds in it.
//
// Input is a peer's: every field is bounded (kMaxHttpHead bytes in all, kMaxHttpHeaders
// lines) and checked for the characters the grammar allows; anything else is 400.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace ulp::admin
{

inline constexpr size_t kMaxHttpHead = 8192;  // request line and headers, bytes
inline constexpr size_t kMaxHttpHeaders = 64; // header lines
inline constexpr size_t kMaxHttpMethod = 16;  // a method name, bytes

struct HttpRequest {
	int status = 400;   // 0: well formed (route it); else the error status to answer
	std::string method; // "GET", as sent (case matters: RFC 9110 §9.1)
	std::string path;   // the origin-form target without its query ("/metrics")
	int minor = 0;      // HTTP/1.<minor>
	std::string query;  // what follows the target's '?' ("sessions=1"), as sent; "" when none
};

// Where the head ends in the bytes received so far: the offset just past the empty line
// ("\r\n\r\n", or "\n\n" as RFC 9112 §2.2 lets a recipient accept), or npos.
size_t http_head_end(std::string_view buf);

// The head (request line and header lines, up to and including the empty line) checked.
HttpRequest parse_http_request(std::string_view head);

// "HTTP/1.0 <status> <reason>" with Content-Type (when body or a type is given),
// Content-Length, Connection: close, and the extra header lines (each ending "\r\n");
// the body unless head_only (a HEAD request: the same headers, no body).
std::string http_response(int status, std::string_view content_type, std::string_view body,
                          std::string_view extra_headers = {}, bool head_only = false);

const char *http_reason(int status); // "Not Found"

} // namespace ulp::admin
