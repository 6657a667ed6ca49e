// SPDX-License-Identifier: MIT
// tests/admin/initiator_multipath_test.cc - ulp-initiator's multipath mode (--path,
// tools/ulp-initiator/multipath.h) against ulp-targetd with one target in two portal groups
// under ALUA: verified writes go to the Active/Optimized path, follow the states when
// `ulpctl alua set` swaps them under I/O (several times, through Transitioning), each move a
// failover in the report with its I/O stall, and every block written reads back as written;
// a run on a standby-only path waits and then works once a group becomes active; a path
// whose session the target drops logs in again and takes the I/O back later. Plus the decoders it
// rests on (iscsi/initiator/scsi.h): REPORT TARGET PORT GROUPS, VPD 83h's port designators, the
// ALUA sense codes.
#include "tests/admin/targetd_env.h"

#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <thread>
#include <vector>

namespace ulp::iscsi::initiator
{
namespace
{

using namespace std::chrono_literals;

constexpr char kIqn[] = "iqn.2026-11.org.ulp:mpath";

TEST(AluaDecode, ReportTargetPortGroups)
{
	// Extended header (format 001b), two groups: 10 A/O preferred with ports 1 and 3, 20
	// standby with port 2.
	const std::vector<uint8_t> d = {0,    0,    0, 32, 0x10, 0, 0, 0, // header
	                                0x80, 0x8f, 0, 10, 0,    2, 0, 2, // group 10
	                                0,    0,    0, 1,  0,    0, 0, 3, //  ports 1, 3
	                                0x02, 0x8f, 0, 20, 0,    2, 0, 1, // group 20
	                                0,    0,    0, 2};
	std::vector<PortGroup> g;
	std::string why;
	ASSERT_TRUE(parse_rtpg(d, &g, &why)) << why;
	ASSERT_EQ(g.size(), 2u);
	EXPECT_EQ(g[0].id, 10);
	EXPECT_EQ(g[0].state, 0);
	EXPECT_TRUE(g[0].pref);
	EXPECT_EQ(g[0].rtpis, (std::vector<uint16_t>{1, 3}));
	EXPECT_EQ(g[1].id, 20);
	EXPECT_EQ(g[1].state, 2);
	EXPECT_EQ(g[1].rtpis, (std::vector<uint16_t>{2}));
	// The length-only header reads the same descriptors from byte 4.
	std::vector<uint8_t> l(d.begin() + 8, d.end());
	l.insert(l.begin(), {0, 0, 0, uint8_t(l.size())});
	ASSERT_TRUE(parse_rtpg(l, &g, &why)) << why;
	EXPECT_EQ(g.size(), 2u);
	// A port count past the end, a descriptor cut short: refused, nothing read past.
	std::vector<uint8_t> bad = d;
	bad[15] = 9;
	EXPECT_FALSE(parse_rtpg(bad, &g, &why));
	EXPECT_FALSE(parse_rtpg(std::span(d).first(12), &g, &why));
	EXPECT_FALSE(parse_rtpg(std::span(d).first(2), &g, &why));
	// RETURN DATA LENGTH shorter than what came: only that much is read.
	std::vector<uint8_t> shorter = d;
	shorter[3] = 20;
	ASSERT_TRUE(parse_rtpg(shorter, &g, &why)) << why;
	EXPECT_EQ(g.size(), 1u);
}

TEST(AluaDecode, Vpd83PortDesignators)
{
	// An NAA designator (LU), then relative target port 7 and target port group 20.
	const std::vector<uint8_t> d = {0, 0x83, 0, 28,                            // header
	                                1, 0x03, 0, 8,  0x30, 1, 2, 3, 4, 5, 6, 7, // NAA
	                                0, 0x14, 0, 4,  0,    0, 0, 7,             // rtpi 7
	                                0, 0x15, 0, 4,  0,    0, 0, 20};           // tpg 20
	PortIds p;
	ASSERT_TRUE(parse_vpd83_port(d, &p));
	EXPECT_TRUE(p.has_rtpi && p.has_tpg);
	EXPECT_EQ(p.rtpi, 7);
	EXPECT_EQ(p.tpg, 20);
	std::vector<uint8_t> bad = d;
	bad[19] = 40; // a designator longer than the page
	EXPECT_FALSE(parse_vpd83_port(bad, &p));
	bad = d;
	bad[1] = 0x80;
	EXPECT_FALSE(parse_vpd83_port(bad, &p)) << "another page";
}

TEST(AluaDecode, SenseCodes)
{
	auto with = [](uint8_t key, uint8_t asc, uint8_t ascq, bool descriptor) {
		ScsiResult r;
		r.status = 0x02;
		if (descriptor) {
			r.sense[0] = 0x72;
			r.sense[1] = key;
			r.sense[2] = asc;
			r.sense[3] = ascq;
			r.sense_len = 8;
		} else {
			r.sense[0] = 0x70;
			r.sense[2] = key;
			r.sense[7] = 10;
			r.sense[12] = asc;
			r.sense[13] = ascq;
			r.sense_len = 18;
		}
		return r;
	};
	for (bool desc : {false, true}) {
		EXPECT_EQ(alua_sense(with(2, 4, 0x0a, desc)), AluaSense::Transitioning);
		EXPECT_EQ(alua_sense(with(2, 4, 0x0b, desc)), AluaSense::Standby);
		EXPECT_EQ(alua_sense(with(2, 4, 0x0c, desc)), AluaSense::Unavailable);
		EXPECT_EQ(alua_sense(with(6, 0x2a, 0x06, desc)), AluaSense::StateChanged);
		EXPECT_EQ(alua_sense(with(2, 4, 0x01, desc)), AluaSense::None);
		EXPECT_EQ(alua_sense(with(3, 0x11, 0, desc)), AluaSense::None);
	}
	ScsiResult lost = with(2, 4, 0x0b, false);
	lost.outcome = TaskOutcome::ConnectionLost;
	EXPECT_EQ(alua_sense(lost), AluaSense::None);
}

// The daemon: one target, two portals in two portal groups, ALUA group 10 (portal group 1)
// active/optimized and 20 (portal group 2) standby, a 64 MiB RAM LUN.
struct MpathTarget {
	test_env::AdminDaemon d;
	std::string a1, a2;
	::testing::AssertionResult start(const char *state1, const char *state2)
	{
		const uint16_t p1 = test::free_port(), p2 = test::free_port();
		if (p1 == p2)
			return ::testing::AssertionFailure() << "one port twice";
		a1 = "127.0.0.1:" + std::to_string(p1);
		a2 = "127.0.0.1:" + std::to_string(p2);
		const std::string file = d.dir / "t.toml";
		std::ofstream(file)
		    << "portals = [\"" << a1 << "\", \"" << a2 << "\"]\n"
		    << "state_dir = \"" << (d.dir / "state") << "\"\n"
		    << "[[target]]\nname = \"" << kIqn << "\"\n"
		    << "  [[target.lun]]\n  lun = 0\n  backstore = \"ram\"\n"
		    << "  size = \"64M\"\n"
		    << "  [[target.portal_group]]\n  tag = 1\n  portals = [\"" << a1 << "\"]\n"
		    << "  [[target.portal_group]]\n  tag = 2\n"
		    << "  portals = [\"" << a2 << "\"]\n"
		    << "  [target.alua]\n  tpgs = \"implicit\"\n"
		    << "    [[target.alua.group]]\n    id = 10\n"
		    << "    state = \"" << state1 << "\"\n    portal_groups = [1]\n"
		    << "    [[target.alua.group]]\n    id = 20\n"
		    << "    state = \"" << state2 << "\"\n    portal_groups = [2]\n";
		return d.start({"--config", file});
	}
	int set(const char *group, const char *state)
	{
		std::string out;
		const int rc = test_env::ulpctl(d.sock, {"alua", "set", kIqn, group, state}, &out);
		EXPECT_EQ(rc, 0) << out;
		return rc;
	}
};

// ulp-initiator with the two paths, --json: exit status and output.
int run_initiator(const MpathTarget &t, std::vector<std::string> extra, std::string *out)
{
	std::vector<std::string> args = {"-p", t.a1, "--path", t.a2,
	                                 "-t", kIqn, "--json", "--quiet"};
	args.insert(args.end(), extra.begin(), extra.end());
	std::string err;
	const int rc = test::run_program(ULP_INITIATOR_PATH, args, out, &err, 120s);
	if (rc != 0)
		*out += err; // stdout (the JSON) first, then what went wrong
	return rc;
}

admin::json last_json(const std::string &out)
{
	const size_t at = out.find("{\n");
	return admin::json::parse(at == std::string::npos ? "" : out.substr(at), nullptr, false);
}

TEST(InitiatorMultipath, FollowsTheStatesUnderVerifiedWrites)
{
	MpathTarget t;
	ASSERT_TRUE(t.start("active-optimized", "standby"));
	std::string out;
	int rc = -1;
	std::thread run([&] {
		rc = run_initiator(t,
		                   {"-w", "randwrite", "-r", "6", "-q", "8", "--range", "8m",
		                    "--verify-only", "--seed", "7"},
		                   &out);
	});
	// Under the run: group 20 becomes the optimized one, through transitioning, and back.
	std::this_thread::sleep_for(1500ms);
	t.set("10", "transitioning");
	std::this_thread::sleep_for(300ms);
	t.set("10", "standby");
	t.set("20", "active-optimized");
	std::this_thread::sleep_for(1500ms);
	t.set("20", "unavailable");
	t.set("10", "active-optimized");
	run.join();
	ASSERT_EQ(rc, 0) << out;
	const admin::json j = last_json(out);
	ASSERT_FALSE(j.is_discarded()) << out;
	EXPECT_EQ(j["ok"], true) << out;
	EXPECT_EQ(j["errors"], 0) << out;
	EXPECT_EQ(j["verify_errors"], 0) << out;
	EXPECT_GT(j["verified_blocks"].get<uint64_t>(), 0u) << out;
	EXPECT_GE(j["multipath"]["switches"].get<uint64_t>(), 2u) << out;
	ASSERT_EQ(j["paths"].size(), 2u) << out;
	EXPECT_GT(j["paths"][0]["commands"].get<uint64_t>(), 0u) << out;
	EXPECT_GT(j["paths"][1]["commands"].get<uint64_t>(), 0u) << out;
	EXPECT_EQ(j["paths"][0]["group"], 10) << out;
	EXPECT_EQ(j["paths"][1]["group"], 20) << out;
	// Each move is a failover: from the path whose group left active/optimized to the
	// other, resumed, its stall the I/O gap: more than nothing (the commands waited for a
	// new RTPG at least), and no more than the command that waited longest. Within a
	// millisecond: the stall starts when the oldest command the path had as the refusal
	// came was sent, a little before the refused one may have been.
	const admin::json &fo = j["multipath"]["failovers"];
	ASSERT_TRUE(fo.is_array()) << out;
	ASSERT_GE(fo.size(), 2u) << out;
	const double max_ms = j["max_us"].get<double>() / 1000.0;
	for (const auto &f : fo) {
		EXPECT_EQ(f["resumed"], true) << f.dump();
		EXPECT_NE(f["from"], f["to"]) << f.dump();
		EXPECT_GT(f["stall_ms"].get<double>(), 0.0) << f.dump();
		EXPECT_LE(f["stall_ms"].get<double>(), max_ms + 1.0)
		    << f.dump() << " max " << max_ms;
		EXPECT_GT(f["at_s"].get<double>(), 0.5) << f.dump();
	}
	EXPECT_EQ(fo[0]["from"], t.a1) << out;
	EXPECT_EQ(fo[0]["to"], t.a2) << out;
	EXPECT_EQ(fo[1]["from"], t.a2) << out;
	EXPECT_EQ(fo[1]["to"], t.a1) << out;
	EXPECT_LT(fo[0]["at_s"].get<double>(), fo[1]["at_s"].get<double>()) << out;
}

// Both groups active/optimized. The target drops the session of the path in use: the I/O
// moves to the other path and the dropped one logs in again; then the other's is dropped
// and the I/O comes back to the first, which it could not without the new login.
TEST(InitiatorMultipath, ADroppedPathLogsInAgain)
{
	MpathTarget t;
	ASSERT_TRUE(t.start("active-optimized", "active-optimized"));
	std::string out;
	int rc = -1;
	std::thread run([&] {
		rc = run_initiator(t,
		                   {"-w", "randwrite", "-r", "7", "-q", "8", "--range", "8m",
		                    "--verify-only", "--seed", "9"},
		                   &out);
	});
	// The session of ours that came in through portal a (its "portal" is a's address).
	auto drop = [&](const std::string &a) {
		const admin::json l = test_env::ulpctl_json(t.d.sock, {"session", "list"});
		std::string id;
		for (const auto &s : l)
			if (s.value("portal", "") == a && s.value("type", "") == "normal")
				id = s.value("id", "");
		ASSERT_FALSE(id.empty()) << "no session through " << a << ": " << l.dump();
		std::string o;
		EXPECT_EQ(test_env::ulpctl(t.d.sock, {"session", "drop", id}, &o), 0) << o;
	};
	std::this_thread::sleep_for(1500ms);
	drop(t.a1);
	std::this_thread::sleep_for(2500ms);
	drop(t.a2);
	run.join();
	ASSERT_EQ(rc, 0) << out;
	const admin::json j = last_json(out);
	ASSERT_FALSE(j.is_discarded()) << out;
	EXPECT_EQ(j["ok"], true) << out;
	EXPECT_EQ(j["errors"], 0) << out;
	EXPECT_EQ(j["verify_errors"], 0) << out;
	ASSERT_EQ(j["paths"].size(), 2u) << out;
	EXPECT_GE(j["paths"][0]["reinstated"].get<uint64_t>(), 1u) << out;
	EXPECT_GE(j["paths"][1]["reinstated"].get<uint64_t>(), 1u) << out;
	EXPECT_EQ(j["paths"][0]["dead"], false) << out;
	EXPECT_EQ(j["paths"][1]["dead"], false) << out;
	const admin::json &fo = j["multipath"]["failovers"];
	ASSERT_EQ(fo.size(), 2u) << out;
	EXPECT_EQ(fo[0]["from"], t.a1) << out;
	EXPECT_EQ(fo[0]["to"], t.a2) << out;
	EXPECT_EQ(fo[1]["from"], t.a2) << out;
	EXPECT_EQ(fo[1]["to"], t.a1) << out;
	for (const auto &f : fo) {
		EXPECT_EQ(f["resumed"], true) << f.dump();
		EXPECT_NE(f["why"].get<std::string>().find("failed"), std::string::npos)
		    << f.dump();
		EXPECT_GT(f["stall_ms"].get<double>(), 0.0) << f.dump();
	}
}

// No group active at first: the commands wait (RTPG again every half second) and run once
// one is.
TEST(InitiatorMultipath, WaitsForAnActiveGroup)
{
	MpathTarget t;
	ASSERT_TRUE(t.start("standby", "transitioning"));
	std::string out;
	int rc = -1;
	std::thread run([&] {
		rc =
		    run_initiator(t, {"-w", "write", "-s", "1m", "-q", "4", "--verify-only"}, &out);
	});
	std::this_thread::sleep_for(2s);
	t.set("20", "active-optimized");
	run.join();
	ASSERT_EQ(rc, 0) << out;
	const admin::json j = last_json(out);
	ASSERT_FALSE(j.is_discarded()) << out;
	EXPECT_EQ(j["ok"], true) << out;
	EXPECT_EQ(j["paths"][0]["commands"], 0) << "a standby path was used: " << out;
	EXPECT_GT(j["paths"][1]["commands"].get<uint64_t>(), 0u) << out;
	EXPECT_GE(j["multipath"]["rtpg"].get<uint64_t>(), 2u) << out;
}

// A path whose portal does not answer is left out; the run goes on the other.
TEST(InitiatorMultipath, APathThatDoesNotLogInIsLeftOut)
{
	MpathTarget t;
	ASSERT_TRUE(t.start("active-optimized", "standby"));
	const std::string dead = "127.0.0.1:" + std::to_string(test::free_port());
	std::vector<std::string> args = {"-p", dead,     "--path",       t.a1, "-t",
	                                 kIqn, "--json", "--quiet",      "-w", "randwrite",
	                                 "-s", "512k",   "--verify-only"};
	std::string out, err;
	const int rc = test::run_program(ULP_INITIATOR_PATH, args, &out, &err, 120s);
	ASSERT_EQ(rc, 0) << out << err;
	EXPECT_NE(err.find("left out"), std::string::npos) << err;
	const admin::json j = last_json(out);
	ASSERT_EQ(j["paths"].size(), 1u) << out;
	EXPECT_EQ(j["ok"], true) << out;
	// --path with SRP is refused as a usage error.
	EXPECT_EQ(test::run_program(ULP_INITIATOR_PATH,
	                            {"--transport", "srp", "-p", t.a1, "--path", t.a2}, &out, &err,
	                            30s),
	          2);
}

} // namespace
} // namespace ulp::iscsi::initiator
