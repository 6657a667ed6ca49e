// SPDX-License-Identifier: MIT
// admin/http.cc - the metrics endpoint's request parser and response writer (see http.h).
#include "admin/http.h"

namespace ulp::admin
{

namespace
{

// tchar (RFC 9110 §5.6.2): the characters of a method and a field name.
bool tchar(char c)
{
	if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))
		return true;
	switch (c) {
	case '!':
	case '#':
	case '$':
	case '%':
	case '&':
	case '\'':
	case '*':
	case '+':
	case '-':
	case '.':
	case '^':
	case '_':
	case '`':
	case '|':
	case '~':
		return true;
	default:
		return false;
	}
}

// A request target's characters (RFC 3986's, loosely): visible ASCII, no space.
bool target_char(char c)
{
	return c > 0x20 && c < 0x7f;
}

// A field value's: visible ASCII, obs-text (>= 0x80), space and tab (RFC 9110 §5.5).
bool value_char(char c)
{
	const auto u = static_cast<unsigned char>(c);
	return u == '\t' || (u >= 0x20 && u != 0x7f);
}

// The next line of head from *pos, without its CRLF (or LF); false at the end.
bool next_line(std::string_view head, size_t *pos, std::string_view *line)
{
	if (*pos >= head.size())
		return false;
	size_t nl = head.find('\n', *pos);
	if (nl == std::string_view::npos)
		nl = head.size();
	std::string_view l = head.substr(*pos, nl - *pos);
	if (!l.empty() && l.back() == '\r')
		l.remove_suffix(1);
	*pos = nl + 1;
	*line = l;
	return true;
}

} // namespace

size_t http_head_end(std::string_view buf)
{
	for (size_t i = buf.find('\n'); i != std::string_view::npos; i = buf.find('\n', i + 1)) {
		if (i + 1 < buf.size() && buf[i + 1] == '\n')
			return i + 2;
		if (i + 2 < buf.size() && buf[i + 1] == '\r' && buf[i + 2] == '\n')
			return i + 3;
	}
	return std::string_view::npos;
}

HttpRequest parse_http_request(std::string_view head)
{
	HttpRequest r;
	if (head.size() > kMaxHttpHead) {
		r.status = 431;
		return r;
	}
	size_t pos = 0;
	std::string_view line;
	// The request line first (RFC 9112 §2.2 lets a server skip empty lines before it; this
	// one does not: a scraper sends none).
	if (!next_line(head, &pos, &line))
		return r;
	// request-line = method SP request-target SP HTTP-version (§3): single spaces.
	const size_t sp1 = line.find(' ');
	if (sp1 == std::string_view::npos || sp1 == 0 || sp1 > kMaxHttpMethod)
		return r;
	const size_t sp2 = line.find(' ', sp1 + 1);
	if (sp2 == std::string_view::npos || sp2 == sp1 + 1)
		return r;
	const std::string_view method = line.substr(0, sp1);
	const std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
	const std::string_view version = line.substr(sp2 + 1);
	for (char c : method)
		if (!tchar(c))
			return r;
	for (char c : target)
		if (!target_char(c))
			return r;
	// origin-form (§3.2.1) only: "/path[?query]". absolute-form is for proxies.
	if (target[0] != '/')
		return r;
	// HTTP-version = "HTTP/" DIGIT "." DIGIT (§2.3); 1.x alone is spoken here.
	if (version.size() != 8 || version.substr(0, 7) != "HTTP/1." || version[7] < '0' ||
	    version[7] > '9')
		return r;
	// Header fields (§5): name ":" OWS value OWS; no obs-fold (§5.2: 400), no space before
	// the colon (§5.1: 400).
	size_t headers = 0;
	bool ended = false;
	while (next_line(head, &pos, &line)) {
		if (line.empty()) {
			ended = true;
			break;
		}
		if (++headers > kMaxHttpHeaders) {
			r.status = 431;
			return r;
		}
		const size_t colon = line.find(':');
		if (colon == std::string_view::npos || colon == 0)
			return r;
		for (char c : line.substr(0, colon))
			if (!tchar(c))
				return r;
		for (char c : line.substr(colon + 1))
			if (!value_char(c))
				return r;
	}
	if (!ended || pos != head.size())
		return r; // no empty line, or bytes after it: not one head
	r.status = 0;
	r.method = std::string(method);
	const size_t q = target.find('?');
	r.path = std::string(target.substr(0, q));
	if (q != std::string_view::npos)
		r.query = std::string(target.substr(q + 1));
	r.minor = version[7] - '0';
	return r;
}

const char *http_reason(int status)
{
	switch (status) {
	case 200:
		return "OK";
	case 400:
		return "Bad Request";
	case 404:
		return "Not Found";
	case 405:
		return "Method Not Allowed";
	case 408:
		return "Request Timeout";
	case 431:
		return "Request Header Fields Too Large";
	case 500:
		return "Internal Server Error";
	case 503:
		return "Service Unavailable";
	default:
		return "Unknown";
	}
}

std::string http_response(int status, std::string_view content_type, std::string_view body,
                          std::string_view extra_headers, bool head_only)
{
	std::string r = "HTTP/1.0 " + std::to_string(status) + " " + http_reason(status) + "\r\n";
	if (!content_type.empty()) {
		r += "Content-Type: ";
		r += content_type;
		r += "\r\n";
	}
	r += "Content-Length: " + std::to_string(body.size()) + "\r\n";
	r += "Connection: close\r\n";
	r += extra_headers;
	r += "\r\n";
	if (!head_only)
		r += body;
	return r;
}

} // namespace ulp::admin
