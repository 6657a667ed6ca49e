// SPDX-License-Identifier: MIT
// tests/admin/targetd_admin_test.cc - ulp-targetd administered while it serves, end to end:
// the daemon in a child process with an admin socket, the project's iSCSI initiator logged in
// to it, and ulpctl (also a child process) changing it. A LUN added is seen by the logged-in
// initiator after REPORTED LUNS DATA HAS CHANGED and REPORT LUNS, and serves I/O; a LUN
// removed is gone; a session logged out or dropped from the target side; `save` writes a
// file that starts the same configuration; SIGHUP applies a file's difference; a bad file
// names its line and column and changes nothing; requests that are wrong change nothing.
#include "tests/admin/targetd_env.h"

#include <gtest/gtest.h>

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <set>
#include <thread>

namespace ulp::iscsi::initiator
{
namespace
{

using namespace std::chrono_literals;
using admin::json;
using test::TargetdProcess;
using clock = std::chrono::steady_clock;

constexpr char kIqn[] = "iqn.2026-11.org.ulp:admin";
constexpr char kIqn2[] = "iqn.2026-11.org.ulp:admin2";
constexpr char kInitiator[] = "iqn.2026-11.org.ulp:admin-test";

using Dir = test::TempDir;
using Daemon = test_env::AdminDaemon;
using test_env::local;
using test_env::ulpctl;
using test_env::ulpctl_json;
using test_env::write_read;

InitiatorConfig config(const std::string &target = kIqn)
{
	return test_env::initiator_config(kInitiator, target);
}

std::vector<uint64_t> report_luns(Session &s, uint64_t lun = 0)
{
	std::array<uint8_t, 12> cdb{};
	cdb[0] = 0xa0;
	cdb[9] = 0xff; // 255 bytes
	std::array<uint8_t, 255> d{};
	ScsiResult r = s.run({lun, cdb, DataDir::Read, d});
	EXPECT_TRUE(r.good()) << describe_result(r);
	std::vector<uint64_t> v;
	const uint32_t n = (uint32_t(d[0]) << 24 | d[1] << 16 | d[2] << 8 | d[3]) / 8;
	for (uint32_t i = 0; i < n && 8 + 8 * i + 8 <= d.size(); i++)
		v.push_back((uint64_t(d[8 + 8 * i]) << 8 | d[9 + 8 * i]) & 0x3fff);
	return v;
}

SenseKey tur_sense(Session &s, uint64_t lun)
{
	ScsiResult r = s.run({lun, cdb_test_unit_ready(), DataDir::None, {}});
	if (r.good())
		return SenseKey{};
	return parse_sense({r.sense.data(), r.sense_len});
}

using test_env::clear_ua;

bool log_has(const TargetdProcess &t, const std::string &text, std::chrono::milliseconds in = 10s)
{
	const auto deadline = clock::now() + in;
	while (clock::now() < deadline) {
		if (t.log().find(text) != std::string::npos)
			return true;
		std::this_thread::sleep_for(20ms);
	}
	return false;
}

TEST(TargetdAdmin, LunCreatedIsSeenByALoggedInInitiator)
{
	Daemon d;
	ASSERT_TRUE(d.start({"--target", kIqn, "--lun", "0:ram:size=16M"}));
	Session s(config());
	ASSERT_TRUE(s.login(local(d.t.port()))) << s.error();
	clear_ua(s, 0);
	EXPECT_EQ(report_luns(s), std::vector<uint64_t>{0});

	std::string out;
	ASSERT_EQ(ulpctl(d.sock,
	                 {"lun", "create", "--target", kIqn, "--lun", "1", "--backstore", "ram",
	                  "--size", "32M"},
	                 &out),
	          0)
	    << out;
	// SPC-4 5.14: the next command on the LUN it uses reports the inventory change once.
	SenseKey k = tur_sense(s, 0);
	EXPECT_EQ(k.key, 0x6);
	EXPECT_EQ(k.asc, 0x3f);
	EXPECT_EQ(k.ascq, 0x0e);
	EXPECT_EQ(tur_sense(s, 0).key, 0) << "reported once";
	EXPECT_EQ(report_luns(s), (std::vector<uint64_t>{0, 1}));
	clear_ua(s, 1); // POWER ON: new to this nexus
	std::array<uint8_t, 32> cap{};
	ScsiResult r = s.run({1, cdb_read_capacity16(32), DataDir::Read, cap});
	ASSERT_TRUE(r.good()) << describe_result(r);
	Capacity c;
	ASSERT_TRUE(parse_read_capacity16(cap, &c));
	EXPECT_EQ(c.blocks, (32u << 20) / 512);
	EXPECT_TRUE(write_read(s, 1, 100, 7));
	EXPECT_TRUE(write_read(s, 0, 100, 9)) << "LUN 0 undisturbed";

	// The session as the administrator sees it.
	json sl = ulpctl_json(d.sock, {"session", "list"});
	ASSERT_EQ(sl.size(), 1u) << sl.dump();
	EXPECT_EQ(sl[0]["initiator"], kInitiator);
	EXPECT_EQ(sl[0]["target"], kIqn);
	EXPECT_EQ(sl[0]["transport"], "tcp");
	EXPECT_EQ(sl[0]["cmds_in_flight"], 0);
	EXPECT_EQ(sl[0]["id"], "iscsi:" + std::to_string(s.params().tsih));
	EXPECT_EQ(sl[0]["params"]["max_burst_length"], s.params().max_burst_length);
	EXPECT_EQ(sl[0]["params"]["header_digest"], "None");
	json st = ulpctl_json(d.sock, {"stats"});
	EXPECT_EQ(st["iscsi"]["sessions_open"], 1);
	EXPECT_EQ(st["iscsi"]["logins"], 1);
	EXPECT_EQ(st["luns"], 2);

	// Removed: gone for the initiator, which hears it on the LUN it still has.
	ASSERT_EQ(ulpctl(d.sock, {"lun", "delete", "--target", kIqn, "--lun", "1"}, &out), 0)
	    << out;
	k = tur_sense(s, 0);
	EXPECT_EQ(k.asc, 0x3f);
	EXPECT_EQ(report_luns(s), std::vector<uint64_t>{0});
	k = tur_sense(s, 1);
	EXPECT_EQ(k.key, 0x5);
	EXPECT_EQ(k.asc, 0x25); // LOGICAL UNIT NOT SUPPORTED
	EXPECT_TRUE(s.logout(5s));
	EXPECT_EQ(d.t.stop(), 0) << d.t.log();
}

// A LUN deleted under I/O: commands before it complete, commands after it fail with
// LOGICAL UNIT NOT SUPPORTED (or hear the inventory change first), none is lost or hangs,
// and the daemon reports the LUN drained.
TEST(TargetdAdmin, LunDeletedUnderIo)
{
	Daemon d;
	ASSERT_TRUE(
	    d.start({"--target", kIqn, "--lun", "0:ram:size=16M", "--lun", "1:ram:size=16M"}));
	Session s(config());
	ASSERT_TRUE(s.login(local(d.t.port()))) << s.error();
	clear_ua(s, 0);
	clear_ua(s, 1);
	auto f = std::async(std::launch::async, [&] {
		std::this_thread::sleep_for(100ms); // I/O is running by then
		std::string out;
		const int rc =
		    ulpctl(d.sock, {"--json", "lun", "delete", "-t", kIqn, "-l", "1"}, &out);
		return std::make_pair(rc, out);
	});
	// Reads kept in flight (queue depth 8) until the LUN is gone.
	constexpr int kQd = 8;
	std::vector<std::vector<uint8_t>> bufs(kQd, std::vector<uint8_t>(4096));
	int inflight = 0, good = 0, gone = 0, other = 0;
	bool stop = false;
	const auto cdb = cdb_read16(0, 8);
	std::function<void(int)> issue = [&](int i) {
		inflight++;
		s.submit({1, cdb, DataDir::Read, bufs[i]}, [&, i](const ScsiResult &r) {
			inflight--;
			if (r.good())
				good++;
			else if (r.outcome == TaskOutcome::Completed &&
			         parse_sense({r.sense.data(), r.sense_len}).asc == 0x25)
				gone++, stop = true;
			else
				other++;
			if (!stop)
				issue(i);
		});
	};
	for (int i = 0; i < kQd; i++)
		issue(i);
	const auto deadline = clock::now() + 20s;
	while ((inflight > 0 || !stop) && clock::now() < deadline &&
	       s.state() == SessionState::FullFeature)
		s.poll(20ms);
	EXPECT_EQ(inflight, 0) << "commands lost";
	EXPECT_GT(good, 0);
	EXPECT_GT(gone, 0);
	auto [rc, out] = f.get();
	ASSERT_EQ(rc, 0) << out;
	EXPECT_NE(out.find("\"drained\": true"), std::string::npos) << out;
	EXPECT_EQ(s.state(), SessionState::FullFeature) << s.error();
	clear_ua(s, 0);
	EXPECT_EQ(report_luns(s), std::vector<uint64_t>{0});
	EXPECT_TRUE(write_read(s, 0, 0, 2));
	EXPECT_TRUE(s.logout(5s));
	EXPECT_EQ(d.t.stop(), 0) << d.t.log();
}

TEST(TargetdAdmin, SessionLoggedOutFromTheTargetSide)
{
	Daemon d;
	ASSERT_TRUE(d.start({"--target", kIqn, "--lun", "0:ram:size=16M"}));
	Session s(config());
	ASSERT_TRUE(s.login(local(d.t.port()))) << s.error();
	clear_ua(s, 0);
	const std::string id = "iscsi:" + std::to_string(s.params().tsih);
	// ulpctl waits for the logout; the initiator answers it as it polls.
	auto f = std::async(std::launch::async, [&] {
		std::string out;
		const int rc = ulpctl(d.sock, {"--json", "session", "logout", id}, &out);
		return std::make_pair(rc, out);
	});
	const auto deadline = clock::now() + 10s;
	while (s.state() == SessionState::FullFeature && clock::now() < deadline)
		s.poll(50ms);
	while (s.state() == SessionState::LoggingOut && clock::now() < deadline)
		s.poll(50ms);
	EXPECT_TRUE(s.target_requested_logout());
	EXPECT_EQ(s.state(), SessionState::Closed) << s.error();
	auto [rc, out] = f.get();
	ASSERT_EQ(rc, 0) << out;
	EXPECT_NE(out.find("logged out"), std::string::npos) << out;
	EXPECT_TRUE(log_has(d.t, "logout requested"));
	EXPECT_EQ(ulpctl_json(d.sock, {"session", "list"}).size(), 0u);
	// Unknown ids are refused, and say so.
	EXPECT_EQ(ulpctl(d.sock, {"session", "logout", "iscsi:999"}, &out), 1);
	EXPECT_NE(out.find("no iSCSI session"), std::string::npos) << out;
	EXPECT_EQ(ulpctl(d.sock, {"session", "logout", "bogus"}, &out), 1);
	EXPECT_EQ(d.t.stop(), 0) << d.t.log();
}

TEST(TargetdAdmin, SessionDroppedFromTheTargetSide)
{
	Daemon d;
	ASSERT_TRUE(d.start({"--target", kIqn, "--lun", "0:ram:size=16M"}));
	Session s(config());
	ASSERT_TRUE(s.login(local(d.t.port()))) << s.error();
	clear_ua(s, 0);
	Session other(config());
	InitiatorConfig oc = config();
	oc.initiator_name = "iqn.2026-11.org.ulp:bystander";
	Session by(oc);
	ASSERT_TRUE(by.login(local(d.t.port()))) << by.error();
	clear_ua(by, 0);
	std::string out;
	ASSERT_EQ(ulpctl(d.sock, {"connection", "drop", "iscsi:" + std::to_string(s.params().tsih)},
	                 &out),
	          0)
	    << out;
	// The dropped one fails its next command; the bystander is untouched.
	ScsiResult r = s.run({0, cdb_test_unit_ready(), DataDir::None, {}});
	EXPECT_EQ(r.outcome, TaskOutcome::ConnectionLost);
	EXPECT_EQ(s.state(), SessionState::Failed);
	EXPECT_TRUE(write_read(by, 0, 8, 3));
	EXPECT_TRUE(log_has(d.t, "dropped by the administrator"));
	EXPECT_TRUE(by.logout(5s));
	EXPECT_EQ(d.t.stop(), 0) << d.t.log();
}

const char *kConfig = R"(workers = 1
[[target]]
name = "iqn.2026-11.org.ulp:admin"
alias = "first"
acls = ["iqn.2026-11.org.ulp:admin-test"]
  [[target.lun]]
  lun = 0
  backstore = "ram"
  size = "16M"
  [[target.lun]]
  lun = 2
  backstore = "file"
  path = "@DIR@/lun2.img"
  size = "8M"
  block_size = 4096
[[target]]
name = "iqn.2026-11.org.ulp:admin2"
chap = { user = "u", secret = "0123456789abcdef" }
  [[target.lun]]
  lun = 0
  backstore = "null"
  size = "1G"
  read_only = true
)";

std::string with_dir(std::string s, const std::string &dir)
{
	for (size_t p; (p = s.find("@DIR@")) != std::string::npos;)
		s.replace(p, 5, dir);
	return s;
}

// What describes the configuration (not the ports it happened to get, nor who is logged in).
json comparable(json show)
{
	show.erase("config_file");
	// Portals by what they are (the test harness adds --portal 127.0.0.1:0 at every start,
	// so the saved file's ephemeral portals come back with one more of the same).
	std::set<std::string> portals;
	for (json &p : show["portals"])
		portals.insert(p["transport"].get<std::string>() + " " +
		               p["address"].get<std::string>());
	show["portals"] = portals;
	for (json &t : show["targets"]) {
		t.erase("sessions");
		for (json &l : t["luns"])
			l.erase("name");
	}
	return show;
}

TEST(TargetdAdmin, SaveWritesAFileThatStartsTheSameConfiguration)
{
	Daemon d;
	const std::string file = d.dir / "t.toml";
	std::ofstream(file) << with_dir(kConfig, d.dir.path);
	ASSERT_TRUE(d.start({"--config", file}));
	std::string out;
	// Changes of every kind, then save.
	ASSERT_EQ(ulpctl(d.sock,
	                 {"lun", "create", "-t", kIqn, "-l", "5", "-b", "ram", "--size", "4M",
	                  "--removable"},
	                 &out),
	          0)
	    << out;
	ASSERT_EQ(ulpctl(d.sock, {"acl", "add", "-t", kIqn, "iqn.2026-11.org.ulp:second"}, &out), 0)
	    << out;
	ASSERT_EQ(ulpctl(d.sock,
	                 {"acl", "map", "-t", kIqn, "iqn.2026-11.org.ulp:second", "3",
	                  "--target-lun", "5", "--read-only"},
	                 &out),
	          0)
	    << out;
	ASSERT_EQ(ulpctl(d.sock,
	                 {"chap", "set", "-t", kIqn, "--user", "x", "--secret", "abcdefghijklmnop",
	                  "--mutual-user", "t", "--mutual-secret", "ponmlkjihgfedcba"},
	                 &out),
	          0)
	    << out;
	ASSERT_EQ(ulpctl(d.sock, {"target", "create", "iqn.2026-11.org.ulp:third"}, &out), 0)
	    << out;
	ASSERT_EQ(ulpctl(d.sock, {"portal", "create", "127.0.0.1:0"}, &out), 0) << out;
	ASSERT_EQ(ulpctl(d.sock, {"lun", "resize", "-t", kIqn2, "-l", "0", "--size", "2G"}, &out),
	          0)
	    << out;
	ASSERT_EQ(ulpctl(d.sock, {"save"}, &out), 0) << out;
	struct stat st {
	};
	ASSERT_EQ(::stat(file.c_str(), &st), 0);
	EXPECT_EQ(st.st_mode & 0777, 0600u) << "it holds CHAP secrets";
	const json before = comparable(ulpctl_json(d.sock, {"show"}));
	EXPECT_EQ(d.t.stop(), 0) << d.t.log();

	// A second daemon from the saved file: the same configuration.
	Daemon e;
	ASSERT_TRUE(e.start({"--config", file}));
	const json after = comparable(ulpctl_json(e.sock, {"show"}));
	EXPECT_EQ(before, after) << before.dump(1) << "\n---\n" << after.dump(1);
	// And saving it again writes the same text.
	std::ifstream f1(file);
	const std::string t1((std::istreambuf_iterator<char>(f1)), {});
	const std::string file2 = e.dir / "again.toml";
	ASSERT_EQ(ulpctl(e.sock, {"save", file2}, &out), 0) << out;
	std::ifstream f2(file2);
	const std::string t2((std::istreambuf_iterator<char>(f2)), {});
	// The admin socket differs (each daemon has its own); nothing else may.
	// Nor the portals line: the harness adds --portal 127.0.0.1:0 at every start.
	auto strip = [](std::string s) {
		for (const char *k : {"admin_socket", "\nportals = "})
			if (auto p = s.find(k); p != std::string::npos)
				s.erase(p, s.find('\n', p + 1) - p);
		return s;
	};
	EXPECT_EQ(strip(t1), strip(t2));
	// The CHAP set at run time is what a login needs now.
	InitiatorConfig c = config();
	c.chap = ChapSecret{"x", "abcdefghijklmnop"};
	Session s(c);
	EXPECT_TRUE(s.login(local(e.t.port()))) << s.error();
	EXPECT_TRUE(s.logout(5s));
	EXPECT_EQ(e.t.stop(), 0) << e.t.log();
}

// An ACL entry's LUN map changed with ulpctl while its initiator is logged in: the session
// hears REPORTED LUNS DATA HAS CHANGED and sees the new view (renumbered, read-only);
// unmapping the last LUN gives it the whole target back; mistakes are refused and change
// nothing.
TEST(TargetdAdmin, AclMapChangedAtRunTimeReachesTheSession)
{
	Daemon d;
	ASSERT_TRUE(d.start({"--target", kIqn, "--lun", "0:ram:size=16M", "--lun", "5:ram:size=4M",
	                     "--acl", kInitiator}));
	Session s(config());
	ASSERT_TRUE(s.login(local(d.t.port()))) << s.error();
	clear_ua(s, 0);
	EXPECT_EQ(report_luns(s), (std::vector<uint64_t>{0, 5}));

	std::string out;
	ASSERT_EQ(ulpctl(d.sock, {"acl", "map", "-t", kIqn, kInitiator, "0"}, &out), 0) << out;
	ASSERT_EQ(
	    ulpctl(d.sock,
	           {"acl", "map", "-t", kIqn, kInitiator, "1", "--target-lun", "5", "--read-only"},
	           &out),
	    0)
	    << out;
	SenseKey k = tur_sense(s, 0);
	EXPECT_EQ(k.key, 0x6);
	EXPECT_EQ(k.asc, 0x3f);
	EXPECT_EQ(k.ascq, 0x0e);
	EXPECT_EQ(report_luns(s), (std::vector<uint64_t>{0, 1}));
	clear_ua(s, 1);
	std::array<uint8_t, 512> blk{};
	ScsiResult r = s.run({1, cdb_write16(0, 1), DataDir::Write, blk});
	EXPECT_EQ(parse_sense({r.sense.data(), r.sense_len}).key, 0x7) << describe_result(r);
	EXPECT_EQ(tur_sense(s, 5).asc, 0x25) << "LUN 5 is its LUN 1 now";

	json maps = ulpctl_json(d.sock, {"acl", "maps", "-t", kIqn});
	ASSERT_TRUE(maps.contains(kInitiator)) << maps.dump();
	EXPECT_EQ(maps[kInitiator]["luns"].size(), 2u) << maps.dump();
	EXPECT_EQ(maps[kInitiator]["luns"][1]["target_lun"], 5) << maps.dump();
	EXPECT_EQ(maps[kInitiator]["luns"][1]["read_only"], true) << maps.dump();

	// Refused, with what is wrong: a LUN the target lacks, a number mapped already, an
	// initiator without an ACL, a LUN not mapped.
	EXPECT_NE(
	    ulpctl(d.sock, {"acl", "map", "-t", kIqn, kInitiator, "2", "--target-lun", "7"}, &out),
	    0);
	EXPECT_NE(out.find("has no LUN 7"), std::string::npos) << out;
	EXPECT_NE(
	    ulpctl(d.sock, {"acl", "map", "-t", kIqn, kInitiator, "1", "--target-lun", "0"}, &out),
	    0);
	EXPECT_NE(out.find("maps LUN 1 already"), std::string::npos) << out;
	EXPECT_NE(
	    ulpctl(d.sock, {"acl", "map", "-t", kIqn, "iqn.2026-11.org.ulp:nobody", "0"}, &out), 0);
	EXPECT_NE(out.find("has no ACL"), std::string::npos) << out;
	EXPECT_NE(ulpctl(d.sock, {"acl", "unmap", "-t", kIqn, kInitiator, "9"}, &out), 0);
	EXPECT_NE(out.find("maps no LUN 9"), std::string::npos) << out;
	// A mapped LUN is not deleted under its map.
	EXPECT_NE(ulpctl(d.sock, {"lun", "delete", "-t", kIqn, "-l", "5"}, &out), 0);
	EXPECT_NE(out.find("is mapped by ACL " + std::string(kInitiator) +
	                   " (as its LUN 1): unmap it first"),
	          std::string::npos)
	    << out;
	EXPECT_EQ(ulpctl_json(d.sock, {"acl", "maps", "-t", kIqn}), maps) << "nothing changed";

	ASSERT_EQ(ulpctl(d.sock, {"acl", "unmap", "-t", kIqn, kInitiator, "1"}, &out), 0) << out;
	ASSERT_EQ(ulpctl(d.sock, {"acl", "unmap", "-t", kIqn, kInitiator, "0"}, &out), 0) << out;
	EXPECT_EQ(tur_sense(s, 0).asc, 0x3f);
	EXPECT_EQ(report_luns(s), (std::vector<uint64_t>{0, 5})) << "no map: every LUN";
	EXPECT_TRUE(ulpctl_json(d.sock, {"acl", "maps", "-t", kIqn}).empty());
	EXPECT_TRUE(s.logout(5s));
	EXPECT_EQ(d.t.stop(), 0) << d.t.log();
}

TEST(TargetdAdmin, SighupAppliesTheFilesDifference)
{
	Daemon d;
	const std::string file = d.dir / "t.toml";
	std::ofstream(file)
	    << "[[target]]\nname = \"" << kIqn
	    << "\"\n  [[target.lun]]\n  lun = 0\n  backstore = \"ram\"\n  size = \"16M\"\n";
	ASSERT_TRUE(d.start({"--config", file}));
	Session s(config());
	ASSERT_TRUE(s.login(local(d.t.port()))) << s.error();
	clear_ua(s, 0);
	std::ofstream(file)
	    << "[[target]]\nname = \"" << kIqn
	    << "\"\n  [[target.lun]]\n  lun = 0\n  backstore = \"ram\"\n  size = \"16M\"\n"
	       "  [[target.lun]]\n  lun = 3\n  backstore = \"ram\"\n  size = \"8M\"\n"
	       "[[target]]\nname = \""
	    << kIqn2
	    << "\"\nacls = [\"iqn.2026-11.org.ulp:x\"]\n  [[target.lun]]\n  lun = 0\n"
	       "  backstore = \"null\"\n  size = \"1M\"\n";
	ASSERT_EQ(::kill(d.t.pid(), SIGHUP), 0);
	ASSERT_TRUE(log_has(d.t, "reload: target " + std::string(kIqn) + ": LUN 3 added"))
	    << d.t.log();
	ASSERT_TRUE(log_has(d.t, "reload: target " + std::string(kIqn2) + " added")) << d.t.log();
	EXPECT_EQ(tur_sense(s, 0).asc, 0x3f);
	EXPECT_EQ(report_luns(s), (std::vector<uint64_t>{0, 3}));
	json show = ulpctl_json(d.sock, {"show"});
	ASSERT_EQ(show["targets"].size(), 2u);
	EXPECT_EQ(show["targets"][1]["acls"][0], "iqn.2026-11.org.ulp:x");

	// Back to one LUN, the second target gone.
	std::ofstream(file)
	    << "[[target]]\nname = \"" << kIqn
	    << "\"\n  [[target.lun]]\n  lun = 0\n  backstore = \"ram\"\n  size = \"16M\"\n";
	ASSERT_EQ(::kill(d.t.pid(), SIGHUP), 0);
	ASSERT_TRUE(log_has(d.t, "reload: target " + std::string(kIqn2) + " removed")) << d.t.log();
	ASSERT_TRUE(log_has(d.t, "LUN 3 removed")) << d.t.log();
	EXPECT_EQ(report_luns(s), std::vector<uint64_t>{0});
	EXPECT_TRUE(write_read(s, 0, 0, 5)) << "the session the reload did not concern goes on";
	EXPECT_EQ(ulpctl_json(d.sock, {"show"})["targets"].size(), 1u);
	EXPECT_TRUE(s.logout(5s));
	EXPECT_EQ(d.t.stop(), 0) << d.t.log();
}

TEST(TargetdAdmin, BadFileNamesLineAndColumnAndChangesNothing)
{
	Dir dir;
	const std::string file = dir / "bad.toml";
	// At start: exit 2 and the place.
	std::ofstream(file)
	    << "[[target]]\nname = \"" << kIqn
	    << "\"\n  [[target.lun]]\n  lun = 0\n  backstore = \"ram\"\n  sise = \"16M\"\n";
	std::string out, err;
	int rc = test::run_program(ULP_TARGETD_PATH, {"--config", file, "--portal", "127.0.0.1:0"},
	                           &out, &err, 20s);
	EXPECT_EQ(rc, 2) << err;
	EXPECT_NE(err.find(file + ":6:3: target.lun.sise: unknown key"), std::string::npos) << err;
	std::ofstream(file) << "workers = \"two\"\n";
	rc = test::run_program(ULP_TARGETD_PATH, {"--config", file}, &out, &err, 20s);
	EXPECT_EQ(rc, 2);
	EXPECT_NE(err.find(file + ":1:11: workers: must be an integer"), std::string::npos) << err;
	std::ofstream(file) << "[[target]]\nname = \"" << kIqn << "\"\n[[target.lun]\n";
	rc = test::run_program(ULP_TARGETD_PATH, {"--config", file}, &out, &err, 20s);
	EXPECT_EQ(rc, 2);
	EXPECT_NE(err.find(file + ":3:"), std::string::npos) << err;

	// At SIGHUP: an error logged with its place, and nothing changed.
	Daemon d;
	const std::string good = d.dir / "t.toml";
	std::ofstream(good)
	    << "[[target]]\nname = \"" << kIqn
	    << "\"\n  [[target.lun]]\n  lun = 0\n  backstore = \"ram\"\n  size = \"16M\"\n";
	ASSERT_TRUE(d.start({"--config", good}));
	const json before = ulpctl_json(d.sock, {"show"});
	// A new target whose second LUN's backstore cannot be opened: nothing of it may appear,
	// nor the valid LUN 1 added before it in the file.
	std::ofstream(good)
	    << "[[target]]\nname = \"" << kIqn
	    << "\"\n  [[target.lun]]\n  lun = 0\n  backstore = \"ram\"\n  size = \"16M\"\n"
	       "  [[target.lun]]\n  lun = 1\n  backstore = \"ram\"\n  size = \"1M\"\n"
	       "[[target]]\nname = \""
	    << kIqn2
	    << "\"\n  [[target.lun]]\n  lun = 0\n  backstore = \"file\"\n"
	       "  path = \"/nonexistent-dir/x.img\"\n  size = \"1M\"\n";
	ASSERT_EQ(::kill(d.t.pid(), SIGHUP), 0);
	ASSERT_TRUE(log_has(d.t, "nothing changed")) << d.t.log();
	EXPECT_EQ(ulpctl_json(d.sock, {"show"}), before);
	std::ofstream(good) << "[[target]]\nname = \"" << kIqn
	                    << "\"\n  [[target.lun]]\n  lun = x\n";
	ASSERT_EQ(::kill(d.t.pid(), SIGHUP), 0);
	ASSERT_TRUE(log_has(d.t, good + ":4:")) << d.t.log();
	EXPECT_EQ(ulpctl_json(d.sock, {"show"}), before);
	// ulpctl reload says the same.
	EXPECT_EQ(ulpctl(d.sock, {"reload"}, &out), 1);
	EXPECT_NE(out.find(good + ":4:"), std::string::npos) << out;
	EXPECT_EQ(d.t.stop(), 0) << d.t.log();
}

TEST(TargetdAdmin, WrongRequestsChangeNothing)
{
	Daemon d;
	ASSERT_TRUE(d.start({"--target", kIqn, "--lun", "0:ram:size=16M"}));
	const json before = ulpctl_json(d.sock, {"show"});
	admin::Client c;
	std::string why;
	ASSERT_EQ(c.connect(d.sock, &why), 0) << why;
	struct Case {
		const char *method;
		json params;
		int code;
	} cases[] = {
	    {"lun_create",
	     {{"target", kIqn}, {"lun", "1"}, {"backstore", "ram"}},
	     admin::kInvalidParams},
	    {"lun_create",
	     {{"target", kIqn}, {"lun", 1}, {"backstore", "ram"}},
	     -EINVAL}, // no size
	    {"lun_create",
	     {{"target", kIqn}, {"lun", 0}, {"backstore", "ram"}, {"size", "1M"}},
	     -EEXIST},
	    {"lun_create",
	     {{"target", kIqn}, {"lun", 20000}, {"backstore", "ram"}, {"size", "1M"}},
	     admin::kInvalidParams},
	    {"lun_create",
	     {{"target", kIqn}, {"lun", 1}, {"backstore", "file"}, {"path", "/nonexistent-dir/x"}},
	     -ENOENT},
	    {"lun_create",
	     {{"target", kIqn}, {"lun", 1}, {"backstore", "tape"}, {"size", "1M"}},
	     -EINVAL},
	    {"lun_create",
	     {{"target", "iqn.2026-11.org.ulp:nope"},
	      {"lun", 1},
	      {"backstore", "ram"},
	      {"size", "1M"}},
	     -ENOENT},
	    {"target_create", {{"name", "not-an-iqn"}}, -EINVAL},
	    {"target_create", {{"name", kIqn}}, -EEXIST},
	    {"target_create",
	     {{"name", kIqn2}, {"chap_user", "u"}, {"chap_secret", "short"}},
	     -EINVAL},
	    {"target_create", {{"name", kIqn2}, {"chap_user", "u"}}, admin::kInvalidParams},
	    {"acl_add", {{"target", kIqn}, {"initiator", "bad name"}}, -EINVAL},
	    {"portal_create", {{"transport", "tcp"}, {"address", "127.0.0.1:99999"}}, -EINVAL},
	    {"portal_create",
	     {{"transport", "carrier-pigeon"}, {"address", "127.0.0.1:1"}},
	     -EINVAL},
	    {"lun_delete", {{"target", kIqn}, {"lun", 9}}, -ENOENT},
	    {"lun_resize", {{"target", kIqn}, {"lun", 0}, {"size", 1000}}, -EINVAL},
	    {"log_set_level", {{"level", "loud"}}, admin::kInvalidParams},
	    {"config_save", {}, -EINVAL}, // started without --config
	    {"no_such_method", {}, admin::kMethodNotFound},
	};
	for (const Case &k : cases) {
		json r;
		ASSERT_TRUE(c.call(k.method, k.params, &r, &why)) << why;
		ASSERT_TRUE(r.contains("error"))
		    << k.method << " " << k.params.dump() << " -> " << r.dump();
		EXPECT_EQ(r["error"]["code"], k.code)
		    << k.method << " " << k.params.dump() << " -> " << r.dump();
	}
	// Garbage on the daemon's socket: errors, and the daemon goes on.
	ASSERT_EQ(c.send_raw("{\"jsonrpc\":\"2.0\",\"id\":1,\n", &why), 0);
	std::string line;
	ASSERT_TRUE(c.read_line(&line, &why, 5s)) << why;
	EXPECT_NE(line.find("-32700"), std::string::npos) << line;
	EXPECT_EQ(ulpctl_json(d.sock, {"show"}), before);
	EXPECT_EQ(d.t.stop(), 0) << d.t.log();
}

TEST(TargetdAdmin, TargetDeletedWhileInUseLogsItsSessionsOut)
{
	Daemon d;
	ASSERT_TRUE(d.start({"--target", kIqn, "--lun", "0:ram:size=16M"}));
	std::string out;
	ASSERT_EQ(ulpctl(d.sock, {"target", "create", kIqn2}, &out), 0) << out;
	ASSERT_EQ(ulpctl(d.sock,
	                 {"lun", "create", "-t", kIqn2, "-l", "0", "-b", "ram", "--size", "8M"},
	                 &out),
	          0)
	    << out;
	Session s1(config());
	ASSERT_TRUE(s1.login(local(d.t.port()))) << s1.error();
	clear_ua(s1, 0);
	Session s2(config(kIqn2));
	ASSERT_TRUE(s2.login(local(d.t.port()))) << s2.error();
	clear_ua(s2, 0);
	auto f = std::async(std::launch::async, [&] {
		std::string o;
		const int rc = ulpctl(d.sock, {"--json", "target", "delete", kIqn2}, &o);
		return std::make_pair(rc, o);
	});
	const auto deadline = clock::now() + 10s;
	while (
	    (s2.state() == SessionState::FullFeature || s2.state() == SessionState::LoggingOut) &&
	    clock::now() < deadline)
		s2.poll(50ms);
	EXPECT_TRUE(s2.target_requested_logout());
	auto [rc, o] = f.get();
	ASSERT_EQ(rc, 0) << o;
	EXPECT_NE(o.find("\"sessions_closed\": true"), std::string::npos) << o;
	// The other target's session never noticed.
	EXPECT_TRUE(write_read(s1, 0, 0, 1));
	Session s3(config(kIqn2));
	EXPECT_FALSE(s3.login(local(d.t.port()))) << "the target is gone";
	EXPECT_TRUE(s1.logout(5s));
	EXPECT_EQ(d.t.stop(), 0) << d.t.log();
}

} // namespace
} // namespace ulp::iscsi::initiator
