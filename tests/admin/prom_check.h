// SPDX-License-Identifier: MIT
// tests/admin/prom_check.h - a Prometheus text exposition (format 0.0.4) checked line by
// line, and its samples by full series name ("name{labels}" -> value), for the tests that
// read ulp-targetd's statistics (ulpctl stats --prometheus, GET /metrics).
//
// Strict: every line is a # HELP, a # TYPE (each family typed once, before its samples), or
// a sample `name{label="value",...} value` whose name is its family's (histograms: _bucket,
// _sum, _count), no series twice. Written by hand: GCC 12's std::regex does not build
// warning-free under -O2 with ASan (-Wmaybe-uninitialized inside <regex>).
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <string_view>

namespace ulp::test
{

namespace prom_detail
{

inline bool name_char(char c, bool first)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':' ||
	       (!first && c >= '0' && c <= '9');
}

// A metric name at the start of s: its length (0: none).
inline size_t metric_name(std::string_view s)
{
	size_t i = 0;
	while (i < s.size() && name_char(s[i], i == 0))
		i++;
	return i;
}

// `{label="value",...}` at the start of s (label names without ':'): its length, 0 when
// malformed.
inline size_t label_set(std::string_view s)
{
	size_t i = 1; // past '{'
	while (i < s.size() && s[i] != '}') {
		const size_t start = i;
		while (i < s.size() && s[i] != ':' && name_char(s[i], i == start))
			i++;
		if (i == start || i + 1 >= s.size() || s[i] != '=' || s[i + 1] != '"')
			return 0;
		for (i += 2; i < s.size() && s[i] != '"'; i++)
			if (s[i] == '\\' && ++i >= s.size())
				return 0;
		if (i >= s.size())
			return 0;
		i++; // past the closing quote
		if (i < s.size() && s[i] == ',')
			i++;
	}
	return i < s.size() ? i + 1 : 0;
}

inline bool sample_value(const std::string &v, double *out)
{
	if (v == "+Inf" || v == "-Inf" || v == "NaN") {
		*out = v == "NaN" ? 0.0 : v[0] == '+' ? 1e308 : -1e308;
		return true;
	}
	if (v.empty())
		return false;
	char *end = nullptr;
	*out = std::strtod(v.c_str(), &end);
	return end == v.c_str() + v.size();
}

} // namespace prom_detail

inline ::testing::AssertionResult parse_prometheus(const std::string &text,
                                                   std::map<std::string, double> *samples)
{
	using namespace prom_detail;
	static const std::set<std::string> kinds = {"counter", "gauge", "histogram", "summary",
	                                            "untyped"};
	std::set<std::string> typed;
	std::string family;
	std::istringstream in(text);
	std::string line;
	int n = 0;
	while (std::getline(in, line)) {
		n++;
		auto bad = [&](const std::string &why) {
			return ::testing::AssertionFailure()
			       << "line " << n << ": " << why << ": " << line;
		};
		if (line.rfind("# HELP ", 0) == 0)
			continue;
		if (line.rfind("# TYPE ", 0) == 0) {
			const std::string_view rest = std::string_view(line).substr(7);
			const size_t len = metric_name(rest);
			if (len == 0 || len >= rest.size() || rest[len] != ' ' ||
			    !kinds.count(std::string(rest.substr(len + 1))))
				return bad("malformed TYPE");
			family = std::string(rest.substr(0, len));
			if (!typed.insert(family).second)
				return bad("typed twice");
			continue;
		}
		const std::string_view s = line;
		size_t i = metric_name(s);
		if (i == 0)
			return bad("no metric name");
		const std::string name(s.substr(0, i));
		if (i < s.size() && s[i] == '{') {
			const size_t len = label_set(s.substr(i));
			if (len == 0)
				return bad("malformed labels");
			i += len;
		}
		double v = 0;
		if (i >= s.size() || s[i] != ' ' || !sample_value(line.substr(i + 1), &v))
			return bad("malformed value");
		// Samples of a family follow its TYPE line (histograms: _bucket, _sum, _count).
		if (name != family && name != family + "_bucket" && name != family + "_sum" &&
		    name != family + "_count")
			return bad("outside its family " + family);
		const std::string key = line.substr(0, i);
		if (samples->count(key))
			return bad("a duplicate series");
		(*samples)[key] = v;
	}
	if (n == 0)
		return ::testing::AssertionFailure() << "empty";
	return ::testing::AssertionSuccess();
}

} // namespace ulp::test
