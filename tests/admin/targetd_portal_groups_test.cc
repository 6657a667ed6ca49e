// SPDX-License-Identifier: MIT
// tests/admin/targetd_portal_groups_test.cc - ulp-targetd with a target whose two portals are
// two portal groups ([[target.portal_group]]): a login lands in the group of the portal it
// came in on (its TargetPortalGroupTag, RFC 7143 13.9), each group is its own SCSI target
// port (VPD 83h's relative target port designator, SPC-4 7.8.6.7, with the configured
// rtpi), SendTargets reports each portal with its group's tag, and a portal of no group
// does not reach the target.
#include "tests/admin/targetd_env.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace ulp::iscsi::initiator
{
namespace
{

constexpr char kIqn[] = "iqn.2026-11.org.ulp:groups";
constexpr char kInitiator[] = "iqn.2026-11.org.ulp:groups-test";

using test_env::local;

// The relative target port identifier VPD page 83h reports for the port s is logged in
// through (designator type 4h, association 01b: the target port); 0 when none.
uint16_t vpd83_rtpi(Session &s)
{
	const std::array<uint8_t, 6> cdb{0x12, 0x01, 0x83, 0x01, 0x00, 0x00}; // EVPD, 256 bytes
	std::array<uint8_t, 256> d{};
	test_env::clear_ua(s, 0);
	ScsiResult r = s.run({0, cdb, DataDir::Read, d});
	EXPECT_TRUE(r.good()) << describe_result(r);
	const size_t end = std::min<size_t>(d.size(), 4 + (size_t(d[2]) << 8 | d[3]));
	for (size_t i = 4; i + 4 <= end; i += 4 + d[i + 3]) {
		const uint8_t assoc = (d[i + 1] >> 4) & 3, type = d[i + 1] & 0xf;
		if (assoc == 1 && type == 4 && d[i + 3] == 4 && i + 8 <= end)
			return uint16_t(d[i + 6] << 8 | d[i + 7]);
	}
	return 0;
}

TEST(TargetdPortalGroups, LoginsLandInTheirPortsGroup)
{
	test_env::AdminDaemon d;
	const uint16_t p1 = test::free_port(), p2 = test::free_port(), p3 = test::free_port();
	ASSERT_TRUE(p1 != p2 && p2 != p3 && p1 != p3);
	const std::string a1 = "127.0.0.1:" + std::to_string(p1);
	const std::string a2 = "127.0.0.1:" + std::to_string(p2);
	const std::string a3 = "127.0.0.1:" + std::to_string(p3); // in no group
	const std::string file = d.dir / "t.toml";
	std::ofstream(file) << "portals = [\"" << a1 << "\", \"" << a2 << "\", \"" << a3 << "\"]\n"
	                    << "[[target]]\nname = \"" << kIqn << "\"\n"
	                    << "  [[target.lun]]\n  lun = 0\n  backstore = \"ram\"\n"
	                    << "  size = \"16M\"\n"
	                    << "  [[target.portal_group]]\n  tag = 1\n  portals = [\"" << a1
	                    << "\"]\n"
	                    << "  [[target.portal_group]]\n  tag = 2\n  rtpi = 7\n"
	                    << "  portals = [\"" << a2 << "\"]\n";
	ASSERT_TRUE(d.start({"--config", file}));

	Session s1(test_env::initiator_config(kInitiator, kIqn));
	ASSERT_TRUE(s1.login(local(p1))) << s1.error();
	EXPECT_EQ(s1.params().tpgt, 1);
	EXPECT_EQ(vpd83_rtpi(s1), 1) << "no rtpi key: the tag";

	Session s2(test_env::initiator_config(kInitiator, kIqn));
	ASSERT_TRUE(s2.login(local(p2))) << s2.error();
	EXPECT_EQ(s2.params().tpgt, 2);
	EXPECT_EQ(vpd83_rtpi(s2), 7);
	// Both ports reach the same logical unit.
	EXPECT_TRUE(test_env::write_read(s2, 0, 8, 3));

	// SendTargets: each portal with its group's tag, the portal of no group not at all.
	InitiatorConfig dc = test_env::initiator_config(kInitiator, "");
	dc.type = SessionType::Discovery;
	Session ds(dc);
	ASSERT_TRUE(ds.login(local(p1))) << ds.error();
	std::vector<DiscoveryTarget> found;
	ASSERT_TRUE(ds.send_targets("All", &found)) << ds.last_error();
	ASSERT_EQ(found.size(), 1u);
	EXPECT_EQ(found[0].addresses, (std::vector<std::string>{a1 + ",1", a2 + ",2"}));

	// A portal of no group of the target does not reach it.
	Session s3(test_env::initiator_config(kInitiator, kIqn));
	EXPECT_FALSE(s3.login(local(p3)));

	// The sessions as the daemon lists them: one per port, each with its group's tag.
	std::vector<int> tags;
	for (const admin::json &j : test_env::ulpctl_json(d.sock, {"session", "list"}))
		if (j["type"] == "normal")
			tags.push_back(j["tpgt"].get<int>());
	std::sort(tags.begin(), tags.end());
	EXPECT_EQ(tags, (std::vector<int>{1, 2}));
}

// REPORT TARGET PORT GROUPS (SPC-4 6.37, length-only header) through s: each group's id
// with its state and ports.
struct RtpgGroup {
	uint16_t id;
	uint8_t state;
	bool pref;
	std::vector<uint16_t> rtpis;
	bool operator==(const RtpgGroup &) const = default;
};
std::vector<RtpgGroup> rtpg(Session &s)
{
	std::array<uint8_t, 12> cdb{0xa3, 0x0a};
	cdb[9] = 0xff; // ALLOCATION LENGTH 255
	std::array<uint8_t, 255> d{};
	ScsiResult r = s.run({0, cdb, DataDir::Read, d});
	EXPECT_TRUE(r.good()) << describe_result(r);
	std::vector<RtpgGroup> v;
	const size_t end =
	    std::min<size_t>(d.size(), 4 + (size_t(d[0]) << 24 | d[1] << 16 | d[2] << 8 | d[3]));
	for (size_t i = 4; i + 8 <= end;) {
		RtpgGroup g{uint16_t(d[i + 2] << 8 | d[i + 3]),
		            uint8_t(d[i] & 0xf),
		            (d[i] & 0x80) != 0,
		            {}};
		const size_t n = d[i + 7];
		i += 8;
		for (size_t k = 0; k < n && i + 4 <= end; k++, i += 4)
			g.rtpis.push_back(uint16_t(d[i + 2] << 8 | d[i + 3]));
		v.push_back(g);
	}
	return v;
}

TEST(TargetdPortalGroups, AluaGroupsFromTheFile)
{
	test_env::AdminDaemon d;
	const uint16_t p1 = test::free_port(), p2 = test::free_port();
	ASSERT_NE(p1, p2);
	const std::string a1 = "127.0.0.1:" + std::to_string(p1);
	const std::string a2 = "127.0.0.1:" + std::to_string(p2);
	const std::string file = d.dir / "t.toml";
	std::ofstream(file) << "portals = [\"" << a1 << "\", \"" << a2 << "\"]\n"
	                    << "state_dir = \"" << (d.dir / "state") << "\"\n"
	                    << "[[target]]\nname = \"" << kIqn << "\"\n"
	                    << "  [[target.lun]]\n  lun = 0\n  backstore = \"ram\"\n"
	                    << "  size = \"16M\"\n"
	                    << "  [[target.portal_group]]\n  tag = 1\n  portals = [\"" << a1
	                    << "\"]\n"
	                    << "  [[target.portal_group]]\n  tag = 2\n"
	                    << "  portals = [\"" << a2 << "\"]\n"
	                    << "  [target.alua]\n  tpgs = \"both\"\n"
	                    << "    [[target.alua.group]]\n    id = 10\n"
	                    << "    state = \"active-optimized\"\n    preferred = true\n"
	                    << "    portal_groups = [1]\n"
	                    << "    [[target.alua.group]]\n    id = 20\n"
	                    << "    state = \"standby\"\n    portal_groups = [2]\n";
	ASSERT_TRUE(d.start({"--config", file}));

	Session s1(test_env::initiator_config(kInitiator, kIqn));
	ASSERT_TRUE(s1.login(local(p1))) << s1.error();
	Session s2(test_env::initiator_config(kInitiator, kIqn));
	ASSERT_TRUE(s2.login(local(p2))) << s2.error();
	test_env::clear_ua(s1, 0);
	test_env::clear_ua(s2, 0);
	// Both paths report the same groups (state 0h active/optimized with PREF, 2h standby).
	const std::vector<RtpgGroup> want{{10, 0x0, true, {1}}, {20, 0x2, false, {2}}};
	EXPECT_EQ(rtpg(s1), want);
	EXPECT_EQ(rtpg(s2), want);

	// I/O: served on the active/optimized path, NOT READY, LOGICAL UNIT NOT ACCESSIBLE,
	// TARGET PORT IN STANDBY STATE (04h/0Bh, SPC-4 5.15.2.4.4) on the standby one.
	EXPECT_TRUE(test_env::write_read(s1, 0, 0, 1));
	std::array<uint8_t, 512> buf{};
	ScsiResult r = s2.run({0, cdb_read16(0, 1), DataDir::Read, buf});
	ASSERT_FALSE(r.good());
	const SenseKey k = parse_sense({r.sense.data(), r.sense_len});
	EXPECT_EQ(k.key, 0x2) << describe_result(r);
	EXPECT_EQ(k.asc, 0x04);
	EXPECT_EQ(k.ascq, 0x0b);

	// The administrator swaps them (implicit transitions): each path reads the new states
	// after its ASYMMETRIC ACCESS STATE CHANGED unit attention; the old active path is the
	// standby one now.
	std::string out;
	ASSERT_EQ(test_env::ulpctl(d.sock, {"alua", "set", kIqn, "10", "standby"}, &out), 0) << out;
	ASSERT_EQ(test_env::ulpctl(d.sock, {"alua", "set", kIqn, "20", "active-optimized"}, &out),
	          0)
	    << out;
	test_env::clear_ua(s1, 0);
	test_env::clear_ua(s2, 0);
	const std::vector<RtpgGroup> now{{10, 0x2, true, {1}}, {20, 0x0, false, {2}}};
	EXPECT_EQ(rtpg(s1), now);
	EXPECT_EQ(rtpg(s2), now);
	EXPECT_TRUE(test_env::write_read(s2, 0, 0, 2));
	r = s1.run({0, cdb_read16(0, 1), DataDir::Read, buf});
	ASSERT_FALSE(r.good());
	const SenseKey k1 = parse_sense({r.sense.data(), r.sense_len});
	EXPECT_EQ(k1.key, 0x2) << describe_result(r);
	EXPECT_EQ(k1.asc, 0x04);
	EXPECT_EQ(k1.ascq, 0x0b);

	// alua show: the states as the LUs have them, status code 02h (implicit).
	const admin::json j = test_env::ulpctl_json(d.sock, {"alua", "show"});
	ASSERT_EQ(j.size(), 1u) << j.dump();
	EXPECT_EQ(j[0]["target"], kIqn);
	EXPECT_EQ(j[0]["tpgs"], "both");
	const admin::json &gs = j[0]["luns"][0]["groups"];
	ASSERT_EQ(gs.size(), 2u) << j.dump();
	EXPECT_EQ(gs[0]["state"], "standby");
	EXPECT_EQ(gs[0]["status"], 2);
	EXPECT_EQ(gs[1]["state"], "active-optimized");
	// stats: the same groups, and in Prometheus each group's state as its SPC-4 code.
	const admin::json st = test_env::ulpctl_json(d.sock, {"stats"});
	EXPECT_EQ(st["alua"], j);
	ASSERT_EQ(test_env::ulpctl(d.sock, {"stats", "--prometheus"}, &out), 0) << out;
	const std::string labels = std::string("{target=\"") + kIqn + "\",lun=\"0\",group=\"";
	EXPECT_NE(out.find("ulp_alua_group_state" + labels + "10\"} 2\n"), std::string::npos)
	    << out;
	EXPECT_NE(out.find("ulp_alua_group_state" + labels + "20\"} 0\n"), std::string::npos)
	    << out;

	// Refused: no such group, no such state; nothing changes.
	EXPECT_NE(test_env::ulpctl(d.sock, {"alua", "set", kIqn, "30", "standby"}, &out), 0);
	EXPECT_NE(out.find("no ALUA group 30"), std::string::npos) << out;
	EXPECT_NE(test_env::ulpctl(d.sock, {"alua", "set", kIqn, "20", "asleep"}, &out), 0);
	EXPECT_EQ(rtpg(s2), now);

	// Kept across a restart: the state directory holds what alua set made, which replaces
	// the file's initial states.
	s1.logout();
	s2.logout();
	ASSERT_EQ(d.t.stop(), 0) << d.t.log();
	test::TargetdProcess again;
	std::string why;
	ASSERT_TRUE(again.start({"--config", file}, &why)) << why;
	Session s3(test_env::initiator_config(kInitiator, kIqn));
	ASSERT_TRUE(s3.login(local(p1))) << s3.error();
	test_env::clear_ua(s3, 0);
	EXPECT_EQ(rtpg(s3)[0].state, 0x2) << "group 10 stays standby";
	EXPECT_EQ(rtpg(s3)[1].state, 0x0) << "group 20 stays active/optimized";
}

// SET TARGET PORT GROUPS (SPC-4 6.46) through s: group id to state each. Its result.
ScsiResult stpg(Session &s, std::vector<std::pair<uint16_t, uint8_t>> changes)
{
	std::vector<uint8_t> p(4, 0);
	for (auto [id, st] : changes)
		p.insert(p.end(), {st, 0, uint8_t(id >> 8), uint8_t(id)});
	std::array<uint8_t, 12> cdb{0xa4, 0x0a};
	cdb[8] = uint8_t(p.size() >> 8);
	cdb[9] = uint8_t(p.size());
	return s.run({0, cdb, DataDir::Write, p});
}

// The unit attentions s has pending on LUN 0, in order (TEST UNIT READY until GOOD).
std::vector<uint16_t> pending_uas(Session &s)
{
	std::vector<uint16_t> v;
	for (int i = 0; i < 8; i++) {
		ScsiResult r = s.run({0, cdb_test_unit_ready(), DataDir::None, {}});
		const SenseKey k = parse_sense({r.sense.data(), r.sense_len});
		if (r.good() || k.key != 0x6)
			break;
		v.push_back(uint16_t(k.asc << 8 | k.ascq));
	}
	return v;
}

// The relative port identifiers VPD 88h (SCSI ports, SPC-4 7.8.16) lists through s.
std::vector<uint16_t> vpd88_ports(Session &s)
{
	const std::array<uint8_t, 6> cdb{0x12, 0x01, 0x88, 0x01, 0x00, 0x00};
	std::array<uint8_t, 256> d{};
	ScsiResult r = s.run({0, cdb, DataDir::Read, d});
	EXPECT_TRUE(r.good()) << describe_result(r);
	std::vector<uint16_t> v;
	const size_t end = std::min<size_t>(d.size(), 4 + (size_t(d[2]) << 8 | d[3]));
	for (size_t i = 4; i + 12 <= end; i += 12 + (size_t(d[i + 10]) << 8 | d[i + 11]))
		v.push_back(uint16_t(d[i + 2] << 8 | d[i + 3]));
	return v;
}

std::string read_file(const std::string &path)
{
	std::ifstream f(path);
	return std::string(std::istreambuf_iterator<char>(f), {});
}

// A target with two portal groups in two ALUA groups (10: group 1, 20: group 2), state_dir
// in dir; extra: appended to the target (more groups, or other ALUA groups).
std::string alua_file(const test::TempDir &dir, const std::vector<std::string> &portals,
                      const std::string &groups, const std::string &alua)
{
	std::string s = "portals = [";
	for (size_t i = 0; i < portals.size(); i++)
		s += (i ? ", \"" : "\"") + portals[i] + "\"";
	s += "]\nstate_dir = \"" + (dir / "state") + "\"\n[[target]]\nname = \"" + kIqn +
	     "\"\n  [[target.lun]]\n  lun = 0\n  backstore = \"ram\"\n  size = \"16M\"\n" + groups +
	     "  [target.alua]\n  tpgs = \"both\"\n" + alua;
	return s;
}

std::string group(int tag, const std::string &portal)
{
	return "  [[target.portal_group]]\n  tag = " + std::to_string(tag) + "\n  portals = [\"" +
	       portal + "\"]\n";
}

std::string alua_group(int id, const std::string &state, const std::string &tags)
{
	return "    [[target.alua.group]]\n    id = " + std::to_string(id) + "\n    state = \"" +
	       state + "\"\n    portal_groups = [" + tags + "]\n";
}

// An initiator's SET TARGET PORT GROUPS is stored as `ulpctl alua set` is: GOOD once the
// state directory has it, `save` writes it, and a restart finds it.
TEST(TargetdPortalGroups, ExplicitStatesPersistAndSave)
{
	test_env::AdminDaemon d;
	const uint16_t p1 = test::free_port(), p2 = test::free_port();
	ASSERT_NE(p1, p2);
	const std::string a1 = "127.0.0.1:" + std::to_string(p1);
	const std::string a2 = "127.0.0.1:" + std::to_string(p2);
	const std::string file = d.dir / "t.toml";
	std::ofstream(file) << alua_file(d.dir, {a1, a2}, group(1, a1) + group(2, a2),
	                                 alua_group(10, "active-optimized", "1") +
	                                     alua_group(20, "standby", "2"));
	ASSERT_TRUE(d.start({"--config", file}));
	Session s1(test_env::initiator_config(kInitiator, kIqn));
	ASSERT_TRUE(s1.login(local(p1))) << s1.error();
	test_env::clear_ua(s1, 0);
	// The initiator moves the LU's optimized path to port 2.
	ScsiResult r = stpg(s1, {{10, 0x1}, {20, 0x0}});
	ASSERT_TRUE(r.good()) << describe_result(r);
	const std::vector<RtpgGroup> want{{10, 0x1, false, {1}}, {20, 0x0, false, {2}}};
	EXPECT_EQ(rtpg(s1), want);
	// Stored before GOOD: the LU's state file has it already.
	std::string state;
	for (const auto &e : std::filesystem::directory_iterator(d.dir / "state"))
		if (e.path().extension() == ".alua")
			state = read_file(e.path());
	EXPECT_EQ(state, "10 active-non-optimized\n20 active-optimized\n");
	// alua show and save: the states the LU has, status 01h (SET TARGET PORT GROUPS).
	const admin::json j = test_env::ulpctl_json(d.sock, {"alua", "show"});
	EXPECT_EQ(j[0]["luns"][0]["groups"][0]["status"], 1) << j.dump();
	const std::string saved = d.dir / "saved.toml";
	std::string out;
	ASSERT_EQ(test_env::ulpctl(d.sock, {"save", saved}, &out), 0) << out;
	const std::string text = read_file(saved);
	const size_t g10 = text.find("id = 10"), g20 = text.find("id = 20");
	ASSERT_NE(g10, std::string::npos) << text;
	ASSERT_NE(g20, std::string::npos) << text;
	EXPECT_NE(text.substr(g10, g20 - g10).find("active-non-optimized"), std::string::npos)
	    << text;
	EXPECT_NE(text.substr(g20).find("active-optimized"), std::string::npos) << text;

	// A restart with the original file: the states the initiator set.
	s1.logout();
	ASSERT_EQ(d.t.stop(), 0) << d.t.log();
	test::TargetdProcess again;
	std::string why;
	ASSERT_TRUE(again.start({"--config", file}, &why)) << why;
	Session s2(test_env::initiator_config(kInitiator, kIqn));
	ASSERT_TRUE(s2.login(local(p2))) << s2.error();
	test_env::clear_ua(s2, 0);
	const std::vector<RtpgGroup> got = rtpg(s2);
	ASSERT_EQ(got.size(), 2u);
	EXPECT_EQ(got[0].state, 0x1);
	EXPECT_EQ(got[1].state, 0x0);
	EXPECT_TRUE(test_env::write_read(s2, 0, 0, 5)) << "port 2 serves I/O";
}

// `ulpctl reload` (SIGHUP's work) applies portal groups and [target.alua]: a group added,
// a state the file changed, a group removed; a state the file did not change stays as set;
// a file that removes a portal a group names is refused, changing nothing.
TEST(TargetdPortalGroups, ReloadAppliesGroupsAndAlua)
{
	test_env::AdminDaemon d;
	const uint16_t p1 = test::free_port(), p2 = test::free_port(), p3 = test::free_port();
	ASSERT_TRUE(p1 != p2 && p2 != p3 && p1 != p3);
	const std::string a1 = "127.0.0.1:" + std::to_string(p1);
	const std::string a2 = "127.0.0.1:" + std::to_string(p2);
	const std::string a3 = "127.0.0.1:" + std::to_string(p3);
	const std::string file = d.dir / "t.toml";
	const std::string two = group(1, a1) + group(2, a2);
	std::ofstream(file) << alua_file(d.dir, {a1, a2, a3}, two,
	                                 alua_group(10, "active-optimized", "1") +
	                                     alua_group(20, "standby", "2"));
	ASSERT_TRUE(d.start({"--config", file}));
	Session s2(test_env::initiator_config(kInitiator, kIqn));
	ASSERT_TRUE(s2.login(local(p2))) << s2.error();
	test_env::clear_ua(s2, 0);
	EXPECT_EQ(vpd88_ports(s2), (std::vector<uint16_t>{1, 2}));
	Session none(test_env::initiator_config(kInitiator, kIqn));
	EXPECT_FALSE(none.login(local(p3))) << "a3 is in no group yet";

	// Group 3 (a3) added to ALUA group 20, whose state the file changes.
	std::ofstream(file) << alua_file(d.dir, {a1, a2, a3}, two + group(3, a3),
	                                 alua_group(10, "active-optimized", "1") +
	                                     alua_group(20, "active-non-optimized", "2, 3"));
	std::string out;
	ASSERT_EQ(test_env::ulpctl(d.sock, {"reload"}, &out), 0) << out;
	// SPC-4 6.6.1: a new port is new INQUIRY data (VPD 88h); 5.15.2.3: group 20's state.
	std::vector<uint16_t> uas = pending_uas(s2);
	EXPECT_NE(std::find(uas.begin(), uas.end(), 0x3f03), uas.end()) << "INQUIRY DATA CHANGED";
	EXPECT_NE(std::find(uas.begin(), uas.end(), 0x2a06), uas.end()) << "ASYMMETRIC ACCESS";
	EXPECT_EQ(rtpg(s2),
	          (std::vector<RtpgGroup>{{10, 0x0, false, {1}}, {20, 0x1, false, {2, 3}}}));
	EXPECT_EQ(vpd88_ports(s2), (std::vector<uint16_t>{1, 2, 3}));
	EXPECT_TRUE(test_env::write_read(s2, 0, 0, 7)) << "group 20 is active now";
	Session s3(test_env::initiator_config(kInitiator, kIqn));
	ASSERT_TRUE(s3.login(local(p3))) << s3.error();
	EXPECT_EQ(s3.params().tpgt, 3);
	EXPECT_EQ(vpd83_rtpi(s3), 3);

	// A state set at run time survives a reload of a file that did not change it.
	ASSERT_EQ(test_env::ulpctl(d.sock, {"alua", "set", kIqn, "10", "standby"}, &out), 0) << out;
	ASSERT_EQ(test_env::ulpctl(d.sock, {"reload"}, &out), 0) << out;
	test_env::clear_ua(s2, 0);
	EXPECT_EQ(rtpg(s2)[0].state, 0x2) << "group 10 stays standby";

	// Refused: a portal a group names leaves the portals; the message names it and
	// nothing changes.
	std::ofstream(file) << alua_file(d.dir, {a1, a3}, two + group(3, a3),
	                                 alua_group(10, "active-optimized", "1") +
	                                     alua_group(20, "active-non-optimized", "2, 3"));
	EXPECT_NE(test_env::ulpctl(d.sock, {"reload"}, &out), 0);
	EXPECT_NE(out.find(a2), std::string::npos) << out;
	EXPECT_NE(out.find("nothing changed"), std::string::npos) << out;
	test_env::clear_ua(s2, 0);
	EXPECT_EQ(rtpg(s2)[0].state, 0x2);
	EXPECT_TRUE(test_env::write_read(s2, 0, 8, 9)) << "port 2 unchanged";

	// Group 3 removed: its session is asked to go, logins to a3 no longer reach the target,
	// and the other paths hear that the ports changed.
	std::ofstream(file) << alua_file(d.dir, {a1, a2, a3}, two,
	                                 alua_group(10, "active-optimized", "1") +
	                                     alua_group(20, "active-non-optimized", "2"));
	ASSERT_EQ(test_env::ulpctl(d.sock, {"reload"}, &out), 0) << out;
	uas = pending_uas(s2);
	EXPECT_NE(std::find(uas.begin(), uas.end(), 0x3f03), uas.end());
	EXPECT_EQ(vpd88_ports(s2), (std::vector<uint16_t>{1, 2}));
	EXPECT_EQ(rtpg(s2), (std::vector<RtpgGroup>{{10, 0x2, false, {1}}, {20, 0x1, false, {2}}}))
	    << "10 as set at run time, 20 as the file has said since";
	const admin::json sessions = test_env::ulpctl_json(d.sock, {"session", "list"});
	for (const admin::json &j : sessions)
		if (j["type"] == "normal") {
			EXPECT_NE(j["tpgt"].get<int>(), 3) << sessions.dump();
		}
	Session s3b(test_env::initiator_config(kInitiator, kIqn));
	EXPECT_FALSE(s3b.login(local(p3)));
}

// A reload that moves a portal to another group and changes TPGS: new logins to the moved
// portal land in its new group (its tag, its port), a session already there stays where it
// logged in, and TPGS 01b (implicit only) refuses SET TARGET PORT GROUPS from then on;
// INQUIRY reports the new TPGS after INQUIRY DATA HAS CHANGED.
TEST(TargetdPortalGroups, ReloadMovesAPortalAndChangesTpgs)
{
	test_env::AdminDaemon d;
	const uint16_t p1 = test::free_port(), p2 = test::free_port(), p3 = test::free_port();
	ASSERT_TRUE(p1 != p2 && p2 != p3 && p1 != p3);
	const std::string a1 = "127.0.0.1:" + std::to_string(p1);
	const std::string a2 = "127.0.0.1:" + std::to_string(p2);
	const std::string a3 = "127.0.0.1:" + std::to_string(p3);
	const std::string file = d.dir / "t.toml";
	const std::string alua =
	    alua_group(10, "active-optimized", "1") + alua_group(20, "standby", "2");
	auto groups = [&](const std::string &g1, const std::string &g2) {
		return "  [[target.portal_group]]\n  tag = 1\n  portals = [" + g1 +
		       "]\n  [[target.portal_group]]\n  tag = 2\n  portals = [" + g2 + "]\n";
	};
	std::ofstream(file) << alua_file(
	    d.dir, {a1, a2, a3}, groups("\"" + a1 + "\"", "\"" + a2 + "\", \"" + a3 + "\""), alua);
	ASSERT_TRUE(d.start({"--config", file}));
	Session old3(test_env::initiator_config(kInitiator, kIqn));
	ASSERT_TRUE(old3.login(local(p3))) << old3.error();
	EXPECT_EQ(old3.params().tpgt, 2);
	test_env::clear_ua(old3, 0);

	// a3 moves to group 1; tpgs becomes implicit.
	std::string text = alua_file(
	    d.dir, {a1, a2, a3}, groups("\"" + a1 + "\", \"" + a3 + "\"", "\"" + a2 + "\""), alua);
	const std::string both = "tpgs = \"both\"";
	text.replace(text.find(both), both.size(), "tpgs = \"implicit\"");
	std::ofstream(file) << text;
	std::string out;
	ASSERT_EQ(test_env::ulpctl(d.sock, {"reload"}, &out), 0) << out;

	Session new3(test_env::initiator_config(kInitiator, kIqn));
	ASSERT_TRUE(new3.login(local(p3))) << new3.error();
	EXPECT_EQ(new3.params().tpgt, 1);
	EXPECT_EQ(vpd83_rtpi(new3), 1);
	EXPECT_TRUE(test_env::write_read(new3, 0, 0, 11)) << "group 10: active/optimized";
	// The session that was there stays on port 2 (standby), and hears that the INQUIRY
	// data (TPGS) changed.
	const std::vector<uint16_t> uas = pending_uas(old3);
	EXPECT_NE(std::find(uas.begin(), uas.end(), 0x3f03), uas.end());
	EXPECT_EQ(vpd83_rtpi(old3), 2);
	const std::array<uint8_t, 6> inq{0x12, 0, 0, 0, 96, 0};
	std::array<uint8_t, 96> id{};
	ASSERT_TRUE(old3.run({0, inq, DataDir::Read, id}).good());
	EXPECT_EQ(id[5] & 0x30, 0x10) << "TPGS 01b";
	ScsiResult r = stpg(new3, {{20, 0x0}});
	const SenseKey k = parse_sense({r.sense.data(), r.sense_len});
	EXPECT_EQ(k.key, 0x5) << describe_result(r);
	EXPECT_EQ(k.asc, 0x20) << "INVALID COMMAND OPERATION CODE";
}

} // namespace
} // namespace ulp::iscsi::initiator
