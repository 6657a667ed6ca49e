// SPDX-License-Identifier: MIT
// tests/iscsi/targetd_access_test.cc - ulp-targetd's per-initiator access as an initiator
// logging in sees it: an ACL entry's own LUN map ([[target.acl]] luns: which LUNs, numbered
// how, read-only or not) and its own CHAP secrets (RFC 7143 12.1.3, refusals with 02/01,
// 11.13.5), allow_no_chap, and a map changed by SIGHUP reaching a live session as REPORTED
// LUNS DATA HAS CHANGED (SPC-4 5.14).
#include "tests/iscsi/initiator_env.h"

#include <gtest/gtest.h>

#include <signal.h>
#include <unistd.h>

#include <fstream>
#include <thread>

namespace ulp::iscsi::initiator
{
namespace
{

using namespace ini_test;

constexpr char kAccess[] = "iqn.2026-11.org.ulp:access";
constexpr char kStrict[] = "iqn.2026-11.org.ulp:strict";
constexpr char kFenced[] = "iqn.2026-11.org.ulp:fenced";
constexpr char kA[] = "iqn.2026-11.org.ulp:a";
constexpr char kB[] = "iqn.2026-11.org.ulp:b";
constexpr char kOpen[] = "iqn.2026-11.org.ulp:open";
constexpr char kBSecret[] = "b-secret-0123456";
constexpr char kDiscSecret[] = "discovery-secret";

// B's map as the file gives it: the target's LUN 5 as its LUN 0, read-only; more is
// appended to the array by the reload case.
std::string config_text(const std::string &b_luns)
{
	return std::string("[iscsi]\ndiscovery_chap = { user = \"d\", secret = \"") + kDiscSecret +
	       "\" }\n[[target]]\nname = \"" + kAccess + "\"\nacls = [\"" + kOpen +
	       "\"]\nallow_no_chap = true\n"
	       "  [[target.lun]]\n  lun = 0\n  backstore = \"ram\"\n  size = \"4M\"\n"
	       "  [[target.lun]]\n  lun = 1\n  backstore = \"ram\"\n  size = \"4M\"\n"
	       "  [[target.lun]]\n  lun = 5\n  backstore = \"ram\"\n  size = \"2M\"\n"
	       "  [[target.acl]]\n  initiator = \"" +
	       kA +
	       "\"\n  luns = [{ lun = 0 }, { lun = 1 }]\n  chap = { user = \"a\", secret = \"" +
	       kSecret + "\" }\n  [[target.acl]]\n  initiator = \"" + kB + "\"\n  luns = [" +
	       b_luns + "]\n  chap = { user = \"b\", secret = \"" + kBSecret +
	       "\" }\n  mutual_chap = { user = \"t\", secret = \"" + kTargetSecret +
	       "\" }\n"
	       "[[target]]\nname = \"" +
	       kFenced +
	       "\"\nallowed_addresses = [\"192.0.2.0/24\", \"2001:db8::/32\"]\n"
	       "  [[target.lun]]\n  lun = 0\n  backstore = \"ram\"\n  size = \"1M\"\n"
	       "[[target]]\nname = \"" +
	       kStrict + "\"\nacls = [\"" + kOpen +
	       "\"]\nallowed_addresses = [\"127.0.0.0/8\", \"::1\"]\n"
	       "  [[target.lun]]\n  lun = 0\n  backstore = \"ram\"\n  size = \"1M\"\n"
	       "  [[target.acl]]\n  initiator = \"" +
	       kA + "\"\n  chap = { user = \"a\", secret = \"" + kSecret + "\" }\n";
}

constexpr char kBMap[] = "{ lun = 0, target_lun = 5, read_only = true }";

class TargetdAccess : public ::testing::Test
{
protected:
	void SetUp() override
	{
		path_ = "/tmp/ulp-targetd-access-" + std::to_string(getpid()) + ".toml";
		write(config_text(kBMap));
		std::string why;
		ASSERT_TRUE(t_.start({"--config", path_, "-q"}, &why)) << why;
	}
	void TearDown() override
	{
		if (t_.running()) {
			EXPECT_EQ(t_.stop(), 0) << t_.log();
		}
		unlink(path_.c_str());
	}
	void write(const std::string &text) { std::ofstream(path_) << text; }
	InitiatorConfig cfg(const std::string &target, const std::string &initiator,
	                    std::optional<ChapSecret> chap = std::nullopt)
	{
		InitiatorConfig c = config(target, initiator);
		c.chap = chap;
		return c;
	}
	std::string path_;
	TargetdProcess t_;
};

// REPORT LUNS (SPC-4 6.33): the LUNs of the nexus, single level.
std::vector<uint64_t> report_luns(Session &s)
{
	std::array<uint8_t, 12> cdb{0xa0};
	cdb[9] = 0xff; // allocation length 255
	std::vector<uint8_t> d(255);
	ScsiResult r = s.run({0, cdb, DataDir::Read, d});
	if (!r.good())
		r = s.run({0, cdb, DataDir::Read, d});
	EXPECT_TRUE(r.good()) << describe_result(r);
	std::vector<uint64_t> v;
	const uint32_t n = (uint32_t(d[0]) << 24 | d[1] << 16 | d[2] << 8 | d[3]) / 8;
	for (uint32_t i = 0; i < n && 16 + 8 * i <= d.size(); i++)
		v.push_back((uint64_t(d[8 + 8 * i]) << 8 | d[9 + 8 * i]) & 0x3fff);
	return v;
}

uint64_t capacity_bytes(Session &s, uint64_t lun)
{
	clear_ua(s, lun);
	std::array<uint8_t, 32> cap{};
	const auto rc = cdb_read_capacity16();
	ScsiResult r = s.run({lun, rc, DataDir::Read, cap});
	EXPECT_TRUE(r.good()) << describe_result(r);
	Capacity c;
	EXPECT_TRUE(parse_read_capacity16(cap, &c));
	return uint64_t(c.blocks) * c.block_size;
}

// A sees the target's LUNs 0 and 1; B sees only LUN 5, as its LUN 0, and may not write it.
TEST_F(TargetdAccess, EachInitiatorSeesItsOwnLuns)
{
	Session a(cfg(kAccess, kA, ChapSecret{"a", kSecret}));
	ASSERT_TRUE(a.login(local(t_.port()))) << a.error();
	EXPECT_EQ(report_luns(a), (std::vector<uint64_t>{0, 1}));
	EXPECT_EQ(capacity_bytes(a, 0), 4u << 20);
	IoCheck io = write_read_verify(a, 1, 4096, 4, 8, 1);
	EXPECT_EQ(io.failures + io.mismatches, 0u) << io.first_failure;

	InitiatorConfig bc = cfg(kAccess, kB, ChapSecret{"b", kBSecret});
	bc.mutual = ChapSecret{"t", kTargetSecret};
	Session b(bc);
	ASSERT_TRUE(b.login(local(t_.port()))) << b.error();
	EXPECT_EQ(report_luns(b), std::vector<uint64_t>{0});
	EXPECT_EQ(capacity_bytes(b, 0), 2u << 20); // the target's LUN 5
	std::array<uint8_t, kBlock> blk{};
	const auto wr = cdb_write16(0, 1);
	ScsiResult r = b.run({0, wr, DataDir::Write, blk});
	EXPECT_EQ(parse_sense({r.sense.data(), r.sense_len}).key, 0x7) // DATA PROTECT
	    << describe_result(r);
	const auto tur = cdb_test_unit_ready();
	r = b.run({1, tur, DataDir::None, {}});
	EXPECT_EQ(parse_sense({r.sense.data(), r.sense_len}).asc, 0x25) // not its LUN
	    << describe_result(r);
	EXPECT_TRUE(a.logout(5s));
	EXPECT_TRUE(b.logout(5s));
}

// An initiator with a secret of its own must prove that one: not none, not another's.
// Mutual CHAP: the target proves its secret, and an initiator expecting another refuses.
TEST_F(TargetdAccess, OwnSecretRequiredAndMutualChecked)
{
	for (std::optional<ChapSecret> wrong :
	     {std::optional<ChapSecret>{}, std::optional<ChapSecret>{ChapSecret{"b", kBSecret}},
	      std::optional<ChapSecret>{ChapSecret{"a", "wrong-secret-123"}}}) {
		SCOPED_TRACE(wrong ? wrong->user + ":" + wrong->secret : "no CHAP");
		Session s(cfg(kAccess, kA, wrong));
		EXPECT_FALSE(s.login(local(t_.port())));
		EXPECT_EQ(s.login_status(), LoginStatus::AuthFailure) << s.error();
	}
	Session right(cfg(kAccess, kA, ChapSecret{"a", kSecret}));
	EXPECT_TRUE(right.login(local(t_.port()))) << right.error();

	InitiatorConfig bc = cfg(kAccess, kB, ChapSecret{"b", kBSecret});
	bc.mutual = ChapSecret{"t", "not-the-target-1"};
	Session b(bc);
	EXPECT_FALSE(b.login(local(t_.port()))) << "the target proved a secret it lacks";
	EXPECT_TRUE(right.logout(5s));
}

// An initiator without a secret of its own logs in without CHAP where the target allows
// it (allow_no_chap), and is refused where it does not.
TEST_F(TargetdAccess, NoChapOnlyWhereAllowed)
{
	Session ok(cfg(kAccess, kOpen));
	ASSERT_TRUE(ok.login(local(t_.port()))) << ok.error();
	EXPECT_EQ(report_luns(ok), (std::vector<uint64_t>{0, 1, 5}));
	Session refused(cfg(kStrict, kOpen));
	EXPECT_FALSE(refused.login(local(t_.port())));
	EXPECT_EQ(refused.login_status(), LoginStatus::AuthFailure) << refused.error();
	Session a(cfg(kStrict, kA, ChapSecret{"a", kSecret}));
	EXPECT_TRUE(a.login(local(t_.port()))) << a.error();
	EXPECT_TRUE(ok.logout(5s));
	EXPECT_TRUE(a.logout(5s));
}

// SendTargets discovery needs the discovery secret ([iscsi] discovery_chap), whatever the
// initiator's own secret for a target.
TEST_F(TargetdAccess, DiscoveryNeedsTheDiscoverySecret)
{
	for (std::optional<ChapSecret> wrong :
	     {std::optional<ChapSecret>{}, std::optional<ChapSecret>{ChapSecret{"a", kSecret}}}) {
		InitiatorConfig c = cfg("", kA, wrong);
		c.type = SessionType::Discovery;
		Session s(c);
		EXPECT_FALSE(s.login(local(t_.port())));
		EXPECT_EQ(s.login_status(), LoginStatus::AuthFailure) << s.error();
	}
	InitiatorConfig c = cfg("", kA, ChapSecret{"d", kDiscSecret});
	c.type = SessionType::Discovery;
	Session s(c);
	ASSERT_TRUE(s.login(local(t_.port()))) << s.error();
	std::vector<DiscoveryTarget> found;
	ASSERT_TRUE(s.send_targets("All", &found)) << s.last_error();
	std::vector<std::string> names;
	for (const DiscoveryTarget &t : found)
		names.push_back(t.name);
	EXPECT_NE(std::find(names.begin(), names.end(), kAccess), names.end());
	EXPECT_TRUE(s.logout(5s));
}

// A target with allowed_addresses admits logins from those sources only: 127.0.0.1 is
// outside 192.0.2.0/24 and 2001:db8::/32 (02/02, and the log says why), inside 127.0.0.0/8.
TEST_F(TargetdAccess, SourceAddressOutsideTheTargetsListRefused)
{
	Session s(cfg(kFenced, kOpen));
	EXPECT_FALSE(s.login(local(t_.port())));
	EXPECT_EQ(s.login_status(), LoginStatus::AuthzFailure) << s.error();
	std::string log;
	for (int i = 0; i < 100 && log.find("source address not in") == std::string::npos; i++) {
		std::this_thread::sleep_for(20ms);
		log = t_.log();
	}
	EXPECT_NE(log.find("login of iqn.2026-11.org.ulp:open to iqn.2026-11.org.ulp:fenced "
	                   "refused: source address not in the target's allowed addresses"),
	          std::string::npos)
	    << log;
	Session a(cfg(kStrict, kA, ChapSecret{"a", kSecret})); // 127.0.0.0/8: in
	EXPECT_TRUE(a.login(local(t_.port()))) << a.error();
	EXPECT_TRUE(a.logout(5s));
}

// SendTargets leaves out a target whose allowed addresses refuse the initiator's source
// address, as it does one whose ACLs refuse its name: discovery shows what a login would
// reach. From 127.0.0.1: the fenced target (192.0.2.0/24, 2001:db8::/32) is not listed,
// the strict one (127.0.0.0/8, ::1; its ACL names this initiator) is, with its portal.
TEST_F(TargetdAccess, DiscoveryHidesTargetsTheSourceAddressCannotReach)
{
	InitiatorConfig c = cfg("", kOpen, ChapSecret{"d", kDiscSecret});
	c.type = SessionType::Discovery;
	Session s(c);
	ASSERT_TRUE(s.login(local(t_.port()))) << s.error();
	std::vector<DiscoveryTarget> found;
	ASSERT_TRUE(s.send_targets("All", &found)) << s.last_error();
	std::vector<std::string> names;
	for (const DiscoveryTarget &t : found) {
		names.push_back(t.name);
		if (t.name == kStrict) {
			EXPECT_FALSE(t.addresses.empty());
		}
	}
	EXPECT_EQ(std::find(names.begin(), names.end(), kFenced), names.end());
	EXPECT_NE(std::find(names.begin(), names.end(), kStrict), names.end());
	// Asked for by name, the fenced target is not there either (RFC 7143 12.3: a
	// SendTargets=<name> reports nothing for a target the initiator may not see).
	found.clear();
	ASSERT_TRUE(s.send_targets(kFenced, &found)) << s.last_error();
	EXPECT_TRUE(found.empty());
	EXPECT_TRUE(s.logout(5s));
}

// A map changed in the file and applied by SIGHUP reaches B's live session: REPORTED LUNS
// DATA HAS CHANGED on the LUN it uses, then the new inventory.
TEST_F(TargetdAccess, ReloadedMapReachesTheLiveSession)
{
	InitiatorConfig bc = cfg(kAccess, kB, ChapSecret{"b", kBSecret});
	Session b(bc);
	ASSERT_TRUE(b.login(local(t_.port()))) << b.error();
	EXPECT_EQ(report_luns(b), std::vector<uint64_t>{0});
	clear_ua(b, 0);

	write(config_text(std::string(kBMap) + ", { lun = 1, target_lun = 1 }"));
	ASSERT_EQ(::kill(t_.pid(), SIGHUP), 0);
	const auto tur = cdb_test_unit_ready();
	ScsiResult r;
	for (int i = 0; i < 100; i++) { // the reload is asynchronous: up to 5 s
		r = b.run({0, tur, DataDir::None, {}});
		if (!r.good())
			break;
		std::this_thread::sleep_for(50ms);
	}
	const SenseKey k = parse_sense({r.sense.data(), r.sense_len});
	EXPECT_EQ(k.key, 0x6) << describe_result(r) << t_.log();
	EXPECT_EQ(k.asc, 0x3f);
	EXPECT_EQ(k.ascq, 0x0e);
	EXPECT_EQ(report_luns(b), (std::vector<uint64_t>{0, 1}));
	EXPECT_EQ(capacity_bytes(b, 1), 4u << 20);
	EXPECT_TRUE(b.logout(5s));
}

} // namespace
} // namespace ulp::iscsi::initiator
