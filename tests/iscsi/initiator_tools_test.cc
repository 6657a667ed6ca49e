// SPDX-License-Identifier: MIT
// tests/iscsi/initiator_tools_test.cc - the iSCSI initiator against tgtd (the Linux
// userspace reference target), so that it is proven on a second, independent
// implementation; the ulp-initiator tool's verified workload and its failures; and
// ulp-targetd's SIGHUP re-reading the LUNs' sizes, as the initiator sees it.
#include "tests/iscsi/initiator_env.h"

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <map>
#include <optional>
#include <random>
#include <thread>

namespace ulp::iscsi::initiator
{
namespace
{

using namespace ini_test;

// The value of the first "key": <number> in a JSON text, or -1. (std::regex trips gcc 12's
// -Wmaybe-uninitialized under ASan; the tool's JSON is flat enough for a plain search.)
double json_number(const std::string &j, const std::string &key)
{
	const std::string k = "\"" + key + "\":";
	size_t p = j.find(k);
	if (p == std::string::npos)
		return -1;
	p += k.size();
	while (p < j.size() && j[p] == ' ')
		p++;
	char *end = nullptr;
	const double v = std::strtod(j.c_str() + p, &end);
	return end == j.c_str() + p ? -1 : v;
}

// ---- tgtd, the reference target ---------------------------------------------------------------

class Tgtd : public ::testing::Test
{
protected:
	void start(const test::TgtdConfig &c = {})
	{
		std::string why;
		if (!tgt_.start(c, &why))
			GTEST_SKIP() << "tgtd unavailable: " << why;
	}
	InitiatorConfig cfg() { return config("iqn.2026-11.org.ulp:tgt"); }
	TgtdProcess tgt_;
};

TEST_F(Tgtd, LoginIoAndLogout)
{
	start();
	if (IsSkipped())
		return;
	Session s(cfg());
	ASSERT_TRUE(s.login(local(tgt_.port()))) << s.error();
	std::array<uint8_t, 32> cap{};
	const auto rc = cdb_read_capacity16();
	ScsiResult r = s.run({1, rc, DataDir::Read, cap});
	if (!r.good()) // POWER ON OCCURRED on the first command of the nexus
		r = s.run({1, rc, DataDir::Read, cap});
	ASSERT_TRUE(r.good()) << describe_result(r);
	Capacity c;
	ASSERT_TRUE(parse_read_capacity16(cap, &c));
	EXPECT_EQ(uint64_t(c.blocks) * c.block_size, 64u << 20);
	for (IoParam p : {IoParam{4096, 16}, IoParam{65536, 8}, IoParam{512 * 1024, 4}}) {
		IoCheck x = write_read_verify(s, 1, p.bs, p.qd, 64, p.bs, c.block_size);
		EXPECT_EQ(x.failures, 0u) << p.bs << ": " << x.first_failure;
		EXPECT_EQ(x.mismatches, 0u) << p.bs;
	}
	EXPECT_GT(s.stats().r2ts, 0u); // tgtd's FirstBurstLength is below 512 KiB
	EXPECT_TRUE(s.ping_sync(std::vector<uint8_t>(64, 1)).data_ok);
	TmfResult tr = s.task_mgmt_sync(TmfFunction::LunReset, 1);
	EXPECT_EQ(tr.outcome, TaskOutcome::Completed);
	EXPECT_EQ(tr.response, TmfResponse::Complete);
	EXPECT_TRUE(s.logout());
}

TEST_F(Tgtd, Discovery)
{
	start();
	if (IsSkipped())
		return;
	InitiatorConfig c = cfg();
	c.type = SessionType::Discovery;
	Session s(c);
	ASSERT_TRUE(s.login(local(tgt_.port()))) << s.error();
	std::vector<DiscoveryTarget> found;
	ASSERT_TRUE(s.send_targets("All", &found)) << s.last_error();
	ASSERT_EQ(found.size(), 1u);
	EXPECT_EQ(found[0].name, "iqn.2026-11.org.ulp:tgt");
	EXPECT_TRUE(s.logout());
}

TEST_F(Tgtd, ChapAndWrongSecret)
{
	test::TgtdConfig tc;
	tc.chap_user = "alice";
	tc.chap_secret = kSecret;
	tc.mutual_user = "tgt";
	tc.mutual_secret = kTargetSecret;
	start(tc);
	if (IsSkipped())
		return;
	InitiatorConfig c = cfg();
	c.chap = ChapSecret{"alice", kSecret};
	c.mutual = ChapSecret{"tgt", kTargetSecret};
	// tgt 1.0.85 offers SHA-256 (CHAP_A=7) but decodes CHAP_R into a 20-byte buffer
	// ("chap_decode_string: buf[20] !sufficient"), so only MD5 works with it.
	c.chap_policy.algorithms = {ChapAlg::Md5};
	Session s(c);
	ASSERT_TRUE(s.login(local(tgt_.port()))) << s.error();
	EXPECT_TRUE(s.conn_params().mutual_auth);
	EXPECT_TRUE(s.logout());
	c.chap = ChapSecret{"alice", "wrong-secret-123"};
	c.mutual.reset();
	Session bad(c);
	EXPECT_FALSE(bad.login(local(tgt_.port())));
	EXPECT_EQ(bad.login_status(), LoginStatus::AuthFailure) << bad.error();
}

TEST_F(Tgtd, Digests)
{
	test::TgtdConfig tc;
	tc.digests = true;
	start(tc);
	if (IsSkipped())
		return;
	InitiatorConfig c = cfg();
	c.prefs.header_digests = {Digest::Crc32c};
	c.prefs.data_digests = {Digest::Crc32c};
	Session s(c);
	ASSERT_TRUE(s.login(local(tgt_.port()))) << s.error();
	EXPECT_EQ(s.conn_params().header_digest, Digest::Crc32c);
	EXPECT_EQ(s.conn_params().data_digest, Digest::Crc32c);
	std::array<uint8_t, 6> tur = cdb_test_unit_ready();
	(void)s.run({1, tur, DataDir::None, {}});
	IoCheck x = write_read_verify(s, 1, 65536, 8, 64, 9);
	EXPECT_EQ(x.failures, 0u) << x.first_failure;
	EXPECT_EQ(x.mismatches, 0u);
	EXPECT_TRUE(s.logout());
}

TEST_F(Tgtd, ToolVerifiedWorkloadWithChap)
{
	test::TgtdConfig tc;
	tc.chap_user = "alice";
	tc.chap_secret = kSecret;
	start(tc);
	if (IsSkipped())
		return;
	std::string out, err;
	const int st = test::run_program(ULP_INITIATOR_PATH,
	                                 {"--portal",
	                                  "127.0.0.1:" + std::to_string(tgt_.port()),
	                                  "--lun",
	                                  "1",
	                                  "--chap",
	                                  std::string("alice:") + kSecret,
	                                  "--chap-algs",
	                                  "md5",
	                                  "-w",
	                                  "randwrite",
	                                  "--bs",
	                                  "16k",
	                                  "--qd",
	                                  "16",
	                                  "--runtime",
	                                  "1",
	                                  "--range",
	                                  "8m",
	                                  "--verify-only",
	                                  "--json",
	                                  "--quiet"},
	                                 &out, &err, 30s);
	ASSERT_EQ(st, 0) << out << err;
	EXPECT_NE(out.find("\"target\": \"iqn.2026-11.org.ulp:tgt\""), std::string::npos)
	    << out; // found by discovery: no --target given
	EXPECT_EQ(json_number(out, "verify_errors"), 0) << out;
	EXPECT_GT(json_number(out, "verified_blocks"), 0) << out;
}

// ---- The ulp-initiator tool -------------------------------------------------------------------

TEST(InitiatorTool, VerifiedWorkloadJson)
{
	TargetdProcess t;
	ASSERT_TRUE(start_targetd(t));
	const std::string portal = "127.0.0.1:" + std::to_string(t.port());
	std::string out, err;
	int st = test::run_program(
	    ULP_INITIATOR_PATH,
	    {"--portal",      portal,   "--target", kIqn, "--workload", "mixed", "--rwmix", "50",
	     "--bs",          "8k",     "--qd",     "16", "--runtime",  "1",     "--range", "4M",
	     "--verify-only", "--json", "--seed",   "42"},
	    &out, &err, 30s);
	ASSERT_EQ(st, 0) << out << err;
	EXPECT_GT(json_number(out, "iops"), 0) << out;
	EXPECT_GT(json_number(out, "ios"), 0) << out;
	EXPECT_EQ(json_number(out, "verify_errors"), 0) << out;
	EXPECT_GT(json_number(out, "verified_blocks"), 0) << out;
	EXPECT_GE(json_number(out, "p99_us"), json_number(out, "p50_us")) << out;
	EXPECT_GE(json_number(out, "max_us"), json_number(out, "p99_us")) << out;
	EXPECT_EQ(json_number(out, "errors"), 0) << out;
}

TEST(InitiatorTool, BadInputAndLostTarget)
{
	std::string out, err;
	// Bad flags: a clear message and status 2, no connection attempted.
	int st = test::run_program(ULP_INITIATOR_PATH, {"--bs", "1000", "--portal", "127.0.0.1:1"},
	                           &out, &err, 10s);
	EXPECT_EQ(st, 2) << err;
	EXPECT_NE(err.find("--bs"), std::string::npos) << err;
	// Login refused: the status class and detail are in the message.
	TargetdProcess t;
	ASSERT_TRUE(start_targetd(t));
	const std::string portal = "127.0.0.1:" + std::to_string(t.port());
	st = test::run_program(ULP_INITIATOR_PATH,
	                       {"--portal", portal, "--target", "iqn.2026-11.org.ulp:none"}, &out,
	                       &err, 10s);
	EXPECT_EQ(st, 1);
	EXPECT_NE(err.find("detail 0x03"), std::string::npos) << err;
	// The target dies mid-run: the run ends with an error, in bounded time.
	const auto t0 = clock::now();
	std::thread killer([&] {
		std::this_thread::sleep_for(700ms);
		t.kill();
	});
	st = test::run_program(ULP_INITIATOR_PATH,
	                       {"--portal", portal, "--target", kIqn, "--workload", "randwrite",
	                        "--runtime", "20", "--range", "8M"},
	                       &out, &err, 30s);
	killer.join();
	EXPECT_EQ(st, 1) << err;
	EXPECT_LT(clock::now() - t0, 10s);
	EXPECT_NE(err.find("connection"), std::string::npos) << err;
}

// ---- ulp-targetd: SIGHUP re-reads the LUNs' sizes ----------------------------------------------

// Waits (bounded) until the daemon's log holds text.
bool log_has(const TargetdProcess &t, const std::string &text, std::chrono::milliseconds in = 5s)
{
	const auto deadline = clock::now() + in;
	while (clock::now() < deadline) {
		if (t.log().find(text) != std::string::npos)
			return true;
		std::this_thread::sleep_for(20ms);
	}
	return false;
}

uint64_t read_capacity_blocks(Session &s, uint64_t lun)
{
	std::array<uint8_t, 32> d{};
	const auto cdb = cdb_read_capacity16(d.size());
	ScsiResult r = s.run({lun, cdb, DataDir::Read, d});
	Capacity c;
	if (!r.good() || !parse_read_capacity16(d, &c))
		return 0;
	return c.blocks;
}

// An administrator grows a file LUN's file and sends SIGHUP: the daemon logs the change,
// the initiator's next command gets UNIT ATTENTION, CAPACITY DATA HAS CHANGED, once, and
// READ CAPACITY then reports the new size, whose new blocks work. A RAM LUN beside it logs
// no capacity change; a file that shrinks shrinks the LUN.
TEST(TargetdSighup, GrowsAFileLunAndTellsTheInitiator)
{
	const std::string img = "/var/tmp/ulp-targetd-sighup-" + std::to_string(getpid()) + ".img";
	TargetdProcess t;
	std::string why;
	ASSERT_TRUE(t.start({"--target", kIqn, "--lun", "0:file:path=" + img + ",size=8M", "--lun",
	                     "1:ram:size=4M"},
	                    &why))
	    << why;
	Session s(config());
	ASSERT_TRUE(s.login(local(t.port()))) << s.error();
	clear_ua(s, 0);
	clear_ua(s, 1);
	ASSERT_EQ(read_capacity_blocks(s, 0), 16384u);

	ASSERT_EQ(truncate(img.c_str(), 16 << 20), 0); // truncate -s 16M
	ASSERT_EQ(::kill(t.pid(), SIGHUP), 0);
	ASSERT_TRUE(log_has(t, "capacity 16384 -> 32768 blocks")) << t.log();
	EXPECT_TRUE(log_has(t, "no capacity change (8192 blocks)")) << t.log();

	const auto tur = cdb_test_unit_ready();
	ScsiResult r = s.run({0, tur, DataDir::None, {}});
	EXPECT_EQ(r.status, 2) << describe_result(r);
	const SenseKey k = parse_sense({r.sense.data(), r.sense_len});
	EXPECT_EQ(k.key, 0x6);
	EXPECT_EQ(k.asc, 0x2a);
	EXPECT_EQ(k.ascq, 0x09);
	r = s.run({0, tur, DataDir::None, {}});
	EXPECT_TRUE(r.good()) << "reported once: " << describe_result(r);
	EXPECT_EQ(read_capacity_blocks(s, 0), 32768u);
	EXPECT_TRUE(s.run({1, tur, DataDir::None, {}}).good()) << "LUN 1 did not change";
	IoCheck io = write_read_verify(s, 0, 4096, 4, 16, 3, kBlock, 30000); // past the old end
	EXPECT_EQ(io.failures, 0u) << io.first_failure;
	EXPECT_EQ(io.mismatches, 0u);

	ASSERT_EQ(truncate(img.c_str(), 4 << 20), 0); // below the configured size=8M
	ASSERT_EQ(::kill(t.pid(), SIGHUP), 0);
	ASSERT_TRUE(log_has(t, "capacity 32768 -> 8192 blocks")) << t.log();
	r = s.run({0, tur, DataDir::None, {}});
	EXPECT_EQ(parse_sense({r.sense.data(), r.sense_len}).ascq, 0x09) << describe_result(r);
	EXPECT_EQ(read_capacity_blocks(s, 0), 8192u);
	std::array<uint8_t, kBlock> b{};
	const auto rd = cdb_read16(9000, 1);
	r = s.run({0, rd, DataDir::Read, b});
	EXPECT_EQ(parse_sense({r.sense.data(), r.sense_len}).asc, 0x21) << describe_result(r);

	EXPECT_TRUE(s.logout(5s));
	EXPECT_EQ(t.stop(), 0) << t.log();
	unlink(img.c_str());
}

} // namespace
} // namespace ulp::iscsi::initiator
