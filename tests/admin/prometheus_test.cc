// SPDX-License-Identifier: MIT
// tests/admin/prometheus_test.cc - admin/prometheus.cc against Prometheus' naming rules
// (https://prometheus.io/docs/practices/naming/ as the header of prometheus.h sums them up)
// and a golden file: a stats_get answer with every field the daemon sends
// (tests/admin/data/stats_get.json) and the text it must become
// (tests/admin/data/prometheus.golden, and prometheus_sessions.golden with ?sessions=1).
//
// A change of the text is a change of what scrapers and dashboards see: the golden files
// make it one to review. ULP_UPDATE_GOLDEN=1 writes them anew from the current code (then
// read the diff).
#include "admin/prometheus.h"
#include "tests/admin/prom_check.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>

namespace ulp::admin
{
namespace
{

using nlohmann::json;

const std::string kData = std::string(ULP_SOURCE_DIR) + "/tests/admin/data/";

std::string slurp(const std::string &path)
{
	std::ifstream f(path);
	std::stringstream s;
	s << f.rdbuf();
	return s.str();
}

json fixture()
{
	return json::parse(slurp(kData + "stats_get.json"));
}

// The file's text, or (ULP_UPDATE_GOLDEN=1) got written to it.
std::string golden(const std::string &name, const std::string &got)
{
	const std::string path = kData + name;
	if (const char *u = std::getenv("ULP_UPDATE_GOLDEN"); u && std::string(u) == "1") {
		std::ofstream(path) << got;
		ADD_FAILURE() << "wrote " << path << ": review the diff, then run without "
		              << "ULP_UPDATE_GOLDEN";
	}
	return slurp(path);
}

bool ends_with(const std::string &s, const std::string &end)
{
	return s.size() >= end.size() && s.compare(s.size() - end.size(), end.size(), end) == 0;
}

struct Family {
	std::string type, help;
};

// The families of a text: # TYPE and # HELP by name.
std::map<std::string, Family> families(const std::string &text)
{
	std::map<std::string, Family> f;
	std::istringstream in(text);
	for (std::string line; std::getline(in, line);) {
		std::istringstream w(line);
		std::string hash, kw, name;
		w >> hash >> kw >> name;
		if (hash != "#")
			continue;
		std::string rest;
		std::getline(w, rest);
		if (!rest.empty() && rest[0] == ' ')
			rest.erase(0, 1);
		(kw == "TYPE" ? f[name].type : f[name].help) = rest;
	}
	return f;
}

// Every family against the rules; the failures, one a line (empty: none).
std::string rule_breaks(const std::string &text)
{
	std::string out;
	for (const auto &[family_name, fam] : families(text)) {
		const std::string &name = family_name; // a lambda may not capture a binding (C++17)
		const auto bad = [&](const std::string &why) { out += name + ": " + why + "\n"; };
		bool ok_chars = name.rfind("ulp_", 0) == 0;
		for (char c : name)
			ok_chars = ok_chars &&
			           ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_');
		if (!ok_chars)
			bad("not ulp_ and lower-case snake case");
		if (fam.type != "counter" && fam.type != "gauge" && fam.type != "histogram")
			bad("type '" + fam.type + "'");
		if ((fam.type == "counter") != ends_with(name, "_total"))
			bad(fam.type + (fam.type == "counter" ? " without" : " with") + " _total");
		for (const std::string suffix : {"_count", "_sum", "_bucket"})
			if (ends_with(name, suffix))
				bad("a family named like a histogram's series");
		// A unit is the last word (before _total for a counter).
		const std::string base =
		    ends_with(name, "_total") ? name.substr(0, name.size() - 6) : name;
		for (const std::string unit : {"bytes", "seconds"})
			if (base.find("_" + unit + "_") != std::string::npos)
				bad(unit + " is not the last word");
		std::istringstream words(name);
		for (std::string w; std::getline(words, w, '_');)
			if (w == "ms" || w == "us" || w == "ns" || w == "kb" || w == "mb" ||
			    w == "kib")
				bad("a unit other than the base unit (seconds, bytes)");
		static const std::set<std::string> lazy = {"now", "open now", "since the start",
		                                           ""};
		if (lazy.count(fam.help) || fam.help.size() < 12)
			bad("HELP '" + fam.help + "' says nothing");
	}
	return out;
}

TEST(Prometheus, GoldenText)
{
	const json st = fixture();
	const std::string text = prometheus_text(st);
	std::map<std::string, double> s1, s2;
	ASSERT_TRUE(test::parse_prometheus(text, &s1));
	EXPECT_EQ(text, golden("prometheus.golden", text));
	const std::string with = prometheus_text(st, {.sessions = true});
	ASSERT_TRUE(test::parse_prometheus(with, &s2));
	EXPECT_EQ(with, golden("prometheus_sessions.golden", with));
}

TEST(Prometheus, NamesFollowTheRules)
{
	const std::string text = prometheus_text(fixture(), {.sessions = true});
	EXPECT_EQ(rule_breaks(text), "");
	// The check itself catches what it is for.
	EXPECT_NE(rule_breaks("# HELP ulp_x_open now\n# TYPE ulp_x_open gauge\nulp_x_open 1\n"),
	          "");
	EXPECT_NE(rule_breaks("# HELP ulp_logins counted logins\n# TYPE ulp_logins counter\n"), "");
	EXPECT_NE(rule_breaks("# HELP ulp_heap_bytes_used heap in use now\n"
	                      "# TYPE ulp_heap_bytes_used gauge\n"),
	          "");
	EXPECT_NE(rule_breaks("# HELP ulp_wait_ms time spent waiting\n# TYPE ulp_wait_ms gauge\n"),
	          "");
}

TEST(Prometheus, EveryFabricCounterIsNamed)
{
	json st = fixture();
	EXPECT_TRUE(prometheus_unnamed(st).empty());
	// Each field of the fixture's fabric objects becomes a family of its own.
	const auto fams = families(prometheus_text(st));
	for (const char *fabric : {"iscsi", "srp"}) {
		size_t n = 0;
		for (const auto &[name, f] : fams)
			n += name.rfind(std::string("ulp_") + fabric + "_", 0) == 0;
		EXPECT_EQ(n, st[fabric].size()) << fabric;
	}
	// A counter added to stats_get without a name is found, and not exported.
	st["srp"]["new_thing"] = 1;
	EXPECT_EQ(prometheus_unnamed(st), std::vector<std::string>{"srp.new_thing"});
	EXPECT_EQ(prometheus_text(st).find("new_thing"), std::string::npos);
}

TEST(Prometheus, SessionSeriesOnlyWhenAsked)
{
	const json st = fixture();
	const std::string without = prometheus_text(st),
	                  with = prometheus_text(st, {.sessions = true});
	for (const char *f : {"ulp_session_", "ulp_iscsi_connection_", "ulp_srp_channel_"}) {
		EXPECT_EQ(without.find(f), std::string::npos) << f;
		EXPECT_NE(with.find(f), std::string::npos) << f;
	}
	// The rest is the same text.
	std::map<std::string, double> a, b;
	ASSERT_TRUE(test::parse_prometheus(without, &a));
	ASSERT_TRUE(test::parse_prometheus(with, &b));
	for (const auto &[series, v] : a)
		EXPECT_EQ(b[series], v) << series;
}

TEST(Prometheus, QueryParsed)
{
	PromOptions o;
	std::string why;
	EXPECT_TRUE(parse_prometheus_query("", &o, &why));
	EXPECT_FALSE(o.sessions);
	EXPECT_TRUE(parse_prometheus_query("sessions=1", &o, &why));
	EXPECT_TRUE(o.sessions);
	EXPECT_TRUE(parse_prometheus_query("sessions=true&", &o, &why));
	EXPECT_TRUE(o.sessions);
	EXPECT_TRUE(parse_prometheus_query("sessions=1&sessions=0", &o, &why));
	EXPECT_FALSE(o.sessions);
	EXPECT_FALSE(parse_prometheus_query("session=1", &o, &why));
	EXPECT_NE(why.find("unknown parameter 'session'"), std::string::npos) << why;
	EXPECT_FALSE(parse_prometheus_query("sessions=yes", &o, &why));
	EXPECT_NE(why.find("0 or 1"), std::string::npos) << why;
	EXPECT_FALSE(parse_prometheus_query("sessions", &o, &why));
	EXPECT_FALSE(parse_prometheus_query(std::string(100000, 'x'), &o, &why));
	EXPECT_LT(why.size(), 200u) << "the message is bounded";
}

} // namespace
} // namespace ulp::admin
