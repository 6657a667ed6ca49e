// SPDX-License-Identifier: MIT
// tests/iscsi/initiator_test.cc - the iSCSI initiator (iscsi/initiator/session.h) against
// ulp-targetd in a child process: login (None, CHAP, mutual CHAP, failures with their
// status), discovery with Text continuations, data integrity across block sizes and queue
// depths, the write paths (ImmediateData, InitialR2T, R2Ts smaller than the I/O), digests,
// a target killed mid-run, NOP both ways, task management, logout (ours and the target's).
// The same against tgtd, and the ulp-initiator tool, are in initiator_tools_test.cc.
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

// ---- Login ----------------------------------------------------------------------------------

TEST(InitiatorLogin, NoneAndLogout)
{
	TargetdProcess t;
	ASSERT_TRUE(start_targetd(t));
	Session s(config());
	ASSERT_TRUE(s.login(local(t.port()))) << s.error();
	EXPECT_EQ(s.state(), SessionState::FullFeature);
	EXPECT_NE(s.params().tsih, 0);
	EXPECT_EQ(s.conn_params().auth, AuthMethod::None);
	// ulp-targetd defaults: ImmediateData=Yes, InitialR2T=No, MRDSL 262144.
	EXPECT_TRUE(s.params().immediate_data);
	EXPECT_FALSE(s.params().initial_r2t);
	EXPECT_EQ(s.conn_params().target_recv_dsl, 262144u);
	std::array<uint8_t, 96> inq{};
	const auto cdb = cdb_inquiry(inq.size());
	ScsiResult r = s.run({0, cdb, DataDir::Read, inq});
	ASSERT_TRUE(r.good()) << describe_result(r);
	EXPECT_EQ(std::string(reinterpret_cast<char *>(&inq[8]), 3), "ULP");
	EXPECT_TRUE(s.logout(5s));
	EXPECT_EQ(s.state(), SessionState::Closed);
	EXPECT_EQ(s.poll(0ms), -1);
}

TEST(InitiatorLogin, Chap)
{
	TargetdProcess t;
	ASSERT_TRUE(start_targetd(t, {"--chap", std::string("alice:") + kSecret}));
	InitiatorConfig c = config();
	c.chap = ChapSecret{"alice", kSecret};
	Session s(c);
	ASSERT_TRUE(s.login(local(t.port()))) << s.error();
	EXPECT_EQ(s.conn_params().auth, AuthMethod::Chap);
	EXPECT_TRUE(s.logout());
}

TEST(InitiatorLogin, ChapWrongSecretReportsStatus)
{
	TargetdProcess t;
	ASSERT_TRUE(start_targetd(t, {"--chap", std::string("alice:") + kSecret}));
	InitiatorConfig c = config();
	c.chap = ChapSecret{"alice", "wrong-secret-123"};
	Session s(c);
	const auto t0 = clock::now();
	EXPECT_FALSE(s.login(local(t.port())));
	EXPECT_LT(clock::now() - t0, 5s);
	EXPECT_EQ(s.state(), SessionState::Failed);
	EXPECT_EQ(s.login_error(), InitiatorLoginError::TargetStatus);
	// RFC 7143 11.13.5: class 2 (initiator error), detail 1 (authentication failure).
	EXPECT_EQ(s.login_status(), LoginStatus::AuthFailure);
	EXPECT_NE(s.error().find("class 0x02 detail 0x01"), std::string::npos) << s.error();
	// No CHAP at all where the target requires it: also refused.
	Session n(config());
	EXPECT_FALSE(n.login(local(t.port())));
	EXPECT_EQ(status_class(n.login_status()), 2) << n.error();
}

TEST(InitiatorLogin, MutualChap)
{
	TargetdProcess t;
	ASSERT_TRUE(start_targetd(t, {"--chap", std::string("alice:") + kSecret, "--mutual-chap",
	                              std::string("tgt:") + kTargetSecret}));
	InitiatorConfig c = config();
	c.chap = ChapSecret{"alice", kSecret};
	c.mutual = ChapSecret{"tgt", kTargetSecret};
	Session s(c);
	ASSERT_TRUE(s.login(local(t.port()))) << s.error();
	EXPECT_TRUE(s.conn_params().mutual_auth);
	EXPECT_TRUE(s.logout());
	// The target proves a secret other than the one we expect: we refuse it.
	c.mutual = ChapSecret{"tgt", "not-the-target-secret"};
	Session bad(c);
	EXPECT_FALSE(bad.login(local(t.port())));
	EXPECT_EQ(bad.login_error(), InitiatorLoginError::Auth) << bad.error();
}

TEST(InitiatorLogin, UnknownTargetAndDeadPortal)
{
	TargetdProcess t;
	ASSERT_TRUE(start_targetd(t));
	Session s(config("iqn.2026-11.org.ulp:nobody"));
	EXPECT_FALSE(s.login(local(t.port())));
	EXPECT_EQ(s.login_status(), LoginStatus::NotFound) << s.error();
	EXPECT_NE(s.error().find("class 0x02 detail 0x03"), std::string::npos) << s.error();
	// Nothing listens: connect fails at once, with the reason.
	const uint16_t dead = test::free_port();
	Session d(config());
	const auto t0 = clock::now();
	EXPECT_FALSE(d.login(local(dead)));
	EXPECT_LT(clock::now() - t0, 3s);
	EXPECT_NE(d.error().find("connect"), std::string::npos) << d.error();
}

// ---- Discovery ------------------------------------------------------------------------------

TEST(InitiatorDiscovery, SendTargets)
{
	TargetdProcess t;
	ASSERT_TRUE(start_targetd(t));
	InitiatorConfig c = config();
	c.type = SessionType::Discovery;
	Session s(c);
	ASSERT_TRUE(s.login(local(t.port()))) << s.error();
	std::vector<DiscoveryTarget> found;
	ASSERT_TRUE(s.send_targets("All", &found)) << s.last_error();
	ASSERT_EQ(found.size(), 1u);
	EXPECT_EQ(found[0].name, kIqn);
	ASSERT_EQ(found[0].addresses.size(), 1u);
	Portal p;
	std::string why;
	ASSERT_TRUE(parse_portal(found[0].addresses[0], &p, &why)) << why;
	EXPECT_EQ(p.port, t.port());
	EXPECT_EQ(p.tpgt, 1);
	// SCSI commands have no place in a discovery session.
	std::array<uint8_t, 6> tur{};
	EXPECT_EQ(s.submit({0, tur, DataDir::None, {}}, {}), kReservedTag);
	EXPECT_TRUE(s.logout());
}

TEST(InitiatorDiscovery, LongResponseUsesContinuations)
{
	// 40 targets with long names: far more text than the 512 bytes we accept per PDU, so
	// the target answers in pieces (C=1/F=0 and a TTT) that we ask for one by one.
	std::string toml;
	for (int i = 0; i < 40; i++) {
		toml += "[[target]]\nname = \"iqn.2026-11.org.ulp:a-rather-long-target-name-" +
		        std::to_string(i) + "\"\n[[target.lun]]\nlun = 0\nbackstore = \"null\"\n" +
		        "size = \"1M\"\n";
	}
	const std::string path = "/tmp/ulp-initiator-test-" + std::to_string(getpid()) + ".toml";
	std::ofstream(path) << toml;
	TargetdProcess t;
	std::string why;
	ASSERT_TRUE(t.start({"--config", path, "-q"}, &why)) << why;
	InitiatorConfig c = config();
	c.type = SessionType::Discovery;
	c.prefs.max_recv_dsl = 512;
	Session s(c);
	ASSERT_TRUE(s.login(local(t.port()))) << s.error();
	std::vector<DiscoveryTarget> found;
	ASSERT_TRUE(s.send_targets("All", &found)) << s.last_error();
	EXPECT_EQ(found.size(), 40u);
	for (const auto &f : found)
		EXPECT_EQ(f.addresses.size(), 1u) << f.name;
	EXPECT_TRUE(s.logout());
	::unlink(path.c_str());
}

// ---- Data integrity -------------------------------------------------------------------------

class InitiatorIo : public ::testing::TestWithParam<IoParam>
{
};

TEST_P(InitiatorIo, WriteReadVerify)
{
	TargetdProcess t;
	ASSERT_TRUE(start_targetd(t));
	Session s(config());
	ASSERT_TRUE(s.login(local(t.port()))) << s.error();
	const IoParam p = GetParam();
	const uint32_t count = std::max<uint32_t>(16, std::min<uint32_t>(256, (8u << 20) / p.bs));
	IoCheck r = write_read_verify(s, 0, p.bs, p.qd, count, p.bs ^ p.qd);
	EXPECT_EQ(r.failures, 0u) << r.first_failure;
	EXPECT_EQ(r.mismatches, 0u);
	EXPECT_EQ(s.in_flight(), 0u);
	EXPECT_TRUE(s.logout());
}

INSTANTIATE_TEST_SUITE_P(BlockSizesAndDepths, InitiatorIo,
                         ::testing::Values(IoParam{512, 1}, IoParam{4096, 1}, IoParam{4096, 32},
                                           IoParam{65536, 8}, IoParam{131072, 16},
                                           IoParam{1u << 20, 4}),
                         ::testing::PrintToStringParamName());

// The four write paths (RFC 7143 13.10, 13.11): data with the command, unsolicited
// Data-Out, and R2T-solicited data, in every combination the keys allow.
struct WritePath {
	const char *initial_r2t;
	const char *immediate;
};

// gtest prints a parameter (and names its test) with this: "InitialR2T_yes_ImmediateData_no".
void PrintTo(const WritePath &p, std::ostream *os)
{
	*os << "InitialR2T_" << p.initial_r2t << "_ImmediateData_" << p.immediate;
}

class InitiatorWritePath : public ::testing::TestWithParam<WritePath>
{
};

TEST_P(InitiatorWritePath, WritesLandWhole)
{
	const WritePath w = GetParam();
	TargetdProcess t;
	ASSERT_TRUE(
	    start_targetd(t, {"--initial-r2t", w.initial_r2t, "--immediate-data", w.immediate,
	                      "--first-burst", "65536", "--max-recv-dsl", "16384"}));
	InitiatorConfig c = config();
	// InitialR2T is OR-ed (13.10): propose the same value so the target's decides.
	c.prefs.initial_r2t = std::string(w.initial_r2t) == "yes";
	Session s(c);
	ASSERT_TRUE(s.login(local(t.port()))) << s.error();
	const bool ir2t = std::string(w.initial_r2t) == "yes";
	const bool imm = std::string(w.immediate) == "yes";
	EXPECT_EQ(s.params().initial_r2t, ir2t);
	EXPECT_EQ(s.params().immediate_data, imm);
	// 200 KiB writes: first burst 64 KiB (immediate 16 KiB + unsolicited), rest by R2T.
	IoCheck r = write_read_verify(s, 0, 200 * 1024, 4, 24, 7);
	EXPECT_EQ(r.failures, 0u) << r.first_failure;
	EXPECT_EQ(r.mismatches, 0u);
	const SessionStats &st = s.stats();
	EXPECT_EQ(st.immediate_bytes > 0, imm);
	EXPECT_EQ(st.unsol_pdus > 0, !ir2t);
	EXPECT_GT(st.r2ts, 0u);
	EXPECT_TRUE(s.logout());
}

INSTANTIATE_TEST_SUITE_P(Keys, InitiatorWritePath,
                         ::testing::Values(WritePath{"yes", "no"}, WritePath{"yes", "yes"},
                                           WritePath{"no", "no"}, WritePath{"no", "yes"}),
                         ::testing::PrintToStringParamName());

TEST(InitiatorIoPaths, MaxBurstSmallerThanIo)
{
	// MaxBurstLength 16 KiB: a 512 KiB write needs many R2Ts, a read many bursts.
	TargetdProcess t;
	ASSERT_TRUE(start_targetd(
	    t, {"--max-burst", "16384", "--first-burst", "8192", "--initial-r2t", "yes"}));
	Session s(config());
	ASSERT_TRUE(s.login(local(t.port()))) << s.error();
	EXPECT_EQ(s.params().max_burst_length, 16384u);
	IoCheck r = write_read_verify(s, 0, 512 * 1024, 2, 8, 11);
	EXPECT_EQ(r.failures, 0u) << r.first_failure;
	EXPECT_EQ(r.mismatches, 0u);
	// (512 KiB - 8 KiB immediate) / 16 KiB = 31.5: 32 R2Ts per write.
	EXPECT_GE(s.stats().r2ts, 8u * 32);
	EXPECT_TRUE(s.logout());
}

TEST(InitiatorIoPaths, SeveralR2tsOutstanding)
{
	// MaxOutstandingR2T 4 (13.17): the target solicits up to four bursts of one write at
	// once; each is answered with its own Data-Out sequence (DataSN from 0, its TTT).
	const std::string path =
	    "/tmp/ulp-initiator-test-r2t-" + std::to_string(getpid()) + ".toml";
	std::ofstream(path) << "[iscsi]\nmax_burst_length = 16384\nfirst_burst_length = 8192\n"
	                       "max_outstanding_r2t = 4\n"
	                       "initial_r2t = true\nimmediate_data = false\n"
	                       "[[target]]\nname = \""
	                    << kIqn
	                    << "\"\n[[target.lun]]\nlun = 0\nbackstore = \"ram\"\n"
	                       "size = \"64M\"\n";
	TargetdProcess t;
	std::string why;
	ASSERT_TRUE(t.start({"--config", path, "-q"}, &why)) << why;
	InitiatorConfig c = config();
	c.prefs.max_outstanding_r2t = 4;
	c.prefs.initial_r2t = true;
	Session s(c);
	ASSERT_TRUE(s.login(local(t.port()))) << s.error();
	EXPECT_EQ(s.params().max_outstanding_r2t, 4);
	EXPECT_EQ(s.params().max_burst_length, 16384u);
	IoCheck r = write_read_verify(s, 0, 256 * 1024, 4, 16, 17);
	EXPECT_EQ(r.failures, 0u) << r.first_failure;
	EXPECT_EQ(r.mismatches, 0u);
	EXPECT_EQ(s.stats().r2ts, 16u * 16); // 256 KiB in 16 KiB bursts, all solicited
	EXPECT_EQ(s.stats().immediate_bytes, 0u);
	EXPECT_TRUE(s.logout());
	::unlink(path.c_str());
}

TEST(InitiatorIoPaths, Digests)
{
	TargetdProcess t;
	ASSERT_TRUE(start_targetd(t, {"--digests", "crc32c"}));
	InitiatorConfig c = config();
	c.prefs.header_digests = {Digest::Crc32c};
	c.prefs.data_digests = {Digest::Crc32c};
	Session s(c);
	ASSERT_TRUE(s.login(local(t.port()))) << s.error();
	EXPECT_EQ(s.conn_params().header_digest, Digest::Crc32c);
	EXPECT_EQ(s.conn_params().data_digest, Digest::Crc32c);
	IoCheck r = write_read_verify(s, 0, 65536, 8, 64, 3);
	EXPECT_EQ(r.failures, 0u) << r.first_failure;
	EXPECT_EQ(r.mismatches, 0u);
	EXPECT_TRUE(s.ping_sync(std::vector<uint8_t>(1000, 0x5a)).data_ok);
	EXPECT_TRUE(s.logout());
}

TEST(InitiatorIoPaths, WindowHoldsCommandsBack)
{
	// A CmdSN window of 4: 32 commands submitted at once, never more than 4 out.
	TargetdProcess t;
	ASSERT_TRUE(start_targetd(t, {"--cmd-window", "4"}));
	Session s(config());
	ASSERT_TRUE(s.login(local(t.port()))) << s.error();
	EXPECT_EQ(s.max_cmdsn() - s.exp_cmdsn() + 1, 4u);
	IoCheck r = write_read_verify(s, 0, 4096, 32, 128, 5);
	EXPECT_EQ(r.failures, 0u) << r.first_failure;
	EXPECT_EQ(r.mismatches, 0u);
	EXPECT_GT(s.stats().window_waits, 0u);
	EXPECT_TRUE(s.logout());
}

TEST(InitiatorIoPaths, WindowOfOne)
{
	// One command at a time: every response closes the window again (see the disabled
	// test below); the session asks for the window with a NOP-Out and goes on.
	TargetdProcess t;
	ASSERT_TRUE(start_targetd(t, {"--cmd-window", "1"}));
	Session s(config());
	ASSERT_TRUE(s.login(local(t.port()))) << s.error();
	IoCheck r = write_read_verify(s, 0, 4096, 8, 32, 13);
	EXPECT_EQ(r.failures, 0u) << r.first_failure;
	EXPECT_EQ(r.mismatches, 0u);
	EXPECT_TRUE(s.logout());
}

// A SCSI Response must report the window with its own command's slot free (Conn's
// return_window_slot): with --cmd-window 1 a response that said MaxCmdSN = ExpCmdSN - 1
// left an initiator that does not probe (Linux's libiscsi does not) with a closed window
// and no PDU ever coming to reopen it (RFC 7143 11.19), until its command timeout.
TEST(InitiatorWindow, ReopensWithoutProbe)
{
	TargetdProcess t;
	ASSERT_TRUE(start_targetd(t, {"--cmd-window", "1"}));
	InitiatorConfig c = config();
	c.window_probe = false;
	c.nop_interval = 0ms;
	c.cmd_timeout = 3s;
	Session s(c);
	ASSERT_TRUE(s.login(local(t.port()))) << s.error();
	const auto tur = cdb_test_unit_ready();
	for (int i = 0; i < 3; i++) {
		ScsiResult r = s.run({0, tur, DataDir::None, {}});
		ASSERT_EQ(r.outcome, TaskOutcome::Completed)
		    << "command " << i << ": " << s.error();
	}
}

TEST(InitiatorReject, RejectedCommandLeavesNoGap)
{
	// ulp-targetd takes at most 16 MiB per command (TargetConfig::max_io_bytes) and
	// rejects a larger Expected Data Transfer Length with reason 0x09 (Invalid PDU field).
	// RFC 7143 7.2: the rejected command's CmdSN counts as not received; the session plugs
	// the gap with a NOP-Out carrying it, so the commands after it still run.
	TargetdProcess t;
	ASSERT_TRUE(start_targetd(t));
	Session s(config());
	ASSERT_TRUE(s.login(local(t.port()))) << s.error();
	clear_ua(s, 0);
	std::vector<uint8_t> huge((16u << 20) + 4096);
	const auto rd = cdb_read16(0, static_cast<uint32_t>(huge.size() / kBlock));
	ScsiResult r = s.run({0, rd, DataDir::Read, huge});
	EXPECT_EQ(r.outcome, TaskOutcome::Rejected) << describe_result(r);
	EXPECT_EQ(r.reject_reason, RejectReason::InvalidPduField);
	EXPECT_EQ(s.stats().rejects, 1u);
	IoCheck x = write_read_verify(s, 0, 4096, 8, 32, 21);
	EXPECT_EQ(x.failures, 0u) << x.first_failure;
	EXPECT_EQ(x.mismatches, 0u);
	EXPECT_TRUE(s.logout());
}

TEST(InitiatorIoPaths, ResidualsWhenBufferAndCdbDisagree)
{
	// RFC 7143 11.4.5: a buffer larger than the CDB's transfer is an underflow (U, residual
	// = the bytes not moved), a smaller one an overflow (O, residual = the bytes that did
	// not fit); either way the status is GOOD and the bytes that moved are the CDB's.
	TargetdProcess t;
	ASSERT_TRUE(start_targetd(t));
	Session s(config());
	ASSERT_TRUE(s.login(local(t.port()))) << s.error();
	clear_ua(s, 0);
	std::vector<uint8_t> big(8192, 0xee), small(2048, 0xee);
	const auto rd8 = cdb_read16(0, 8); // 4096 bytes
	ScsiResult r = s.run({0, rd8, DataDir::Read, big});
	ASSERT_TRUE(r.good()) << describe_result(r);
	EXPECT_TRUE(r.underflow);
	EXPECT_EQ(r.residual, 4096u);
	EXPECT_EQ(r.data_in, 4096u);
	r = s.run({0, rd8, DataDir::Read, small});
	ASSERT_TRUE(r.good()) << describe_result(r);
	EXPECT_TRUE(r.overflow);
	EXPECT_EQ(r.residual, 2048u);
	EXPECT_EQ(r.data_in, 2048u);
	// A write whose buffer exceeds the CDB: ulp-targetd refuses it as LIO does
	// (target_cmd_size_check: INVALID FIELD IN COMMAND INFORMATION UNIT, 05/0E/03); a
	// target may also take the CDB's bytes and report the underflow. Either way the
	// session goes on.
	const auto wr8 = cdb_write16(0, 8);
	r = s.run({0, wr8, DataDir::Write, big});
	ASSERT_EQ(r.outcome, TaskOutcome::Completed);
	if (r.good()) {
		EXPECT_TRUE(r.underflow);
		EXPECT_EQ(r.residual, 4096u);
	} else {
		const SenseKey k = parse_sense({r.sense.data(), r.sense_len});
		EXPECT_EQ(k.key, 0x05);
		EXPECT_EQ(k.asc, 0x0e);
		EXPECT_EQ(k.ascq, 0x03);
	}
	EXPECT_EQ(s.state(), SessionState::FullFeature) << s.error();
	// SendTargets in a normal session: only the session's own target (empty value).
	std::vector<DiscoveryTarget> found;
	ASSERT_TRUE(s.send_targets("", &found)) << s.last_error();
	ASSERT_EQ(found.size(), 1u);
	EXPECT_EQ(found[0].name, kIqn);
	EXPECT_FALSE(s.send_targets("All", &found)); // 'MUST NOT be supported' here
	EXPECT_EQ(s.state(), SessionState::FullFeature) << s.error();
	EXPECT_TRUE(s.logout());
}

// ---- Failures -------------------------------------------------------------------------------

TEST(InitiatorFailure, TargetKilledMidRun)
{
	TargetdProcess t;
	ASSERT_TRUE(start_targetd(t));
	Session s(config());
	ASSERT_TRUE(s.login(local(t.port()))) << s.error();
	clear_ua(s, 0);
	std::vector<std::vector<uint8_t>> bufs(16, std::vector<uint8_t>(65536));
	std::array<uint8_t, 16> cdb = cdb_read16(0, 128);
	uint64_t ok = 0, lost = 0, refused = 0;
	std::function<void(size_t)> issue = [&](size_t i) {
		// A response read before the connection's end is delivered after the session has
		// failed: the command issued from its callback is refused at once, with no
		// callback (submit returns kReservedTag and says why).
		const uint32_t itt =
		    s.submit({0, cdb, DataDir::Read, bufs[i]}, [&, i](const ScsiResult &r) {
			    if (r.good()) {
				    ok++;
				    issue(i);
			    } else {
				    EXPECT_EQ(r.outcome, TaskOutcome::ConnectionLost);
				    lost++;
			    }
		    });
		if (itt == kReservedTag) {
			EXPECT_NE(s.state(), SessionState::FullFeature);
			refused++;
		}
	};
	for (size_t i = 0; i < bufs.size(); i++)
		issue(i);
	const auto t0 = clock::now();
	bool killed = false;
	while (clock::now() - t0 < 10s) {
		if (!killed && ok > 200) {
			t.kill();
			killed = true;
		}
		if (s.poll(100ms) < 0)
			break;
	}
	ASSERT_TRUE(killed);
	EXPECT_EQ(s.state(), SessionState::Failed);
	EXPECT_LT(clock::now() - t0, 8s);
	EXPECT_EQ(s.in_flight(), 0u);
	// Every command ended with the reason, or was refused once the session had failed.
	EXPECT_EQ(lost + refused, bufs.size());
	EXPECT_FALSE(s.error().empty());
	EXPECT_FALSE(s.logout(1s));
}

TEST(InitiatorFailure, SilentTargetTimesOut)
{
	// A "target" that accepts the connection and never says a word: login must give up
	// within login_timeout.
	int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	sockaddr_in a{};
	a.sin_family = AF_INET;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr *>(&a), sizeof(a)), 0);
	socklen_t l = sizeof(a);
	getsockname(fd, reinterpret_cast<sockaddr *>(&a), &l);
	ASSERT_EQ(::listen(fd, 4), 0);
	InitiatorConfig c = config();
	c.login_timeout = 500ms;
	Session s(c);
	const auto t0 = clock::now();
	EXPECT_FALSE(s.login(local(ntohs(a.sin_port))));
	EXPECT_LT(clock::now() - t0, 2s);
	EXPECT_NE(s.error().find("timed out"), std::string::npos) << s.error();
	::close(fd);
}

// ---- NOP, TMF, logout -------------------------------------------------------------------------

TEST(InitiatorNop, PingAndTargetPings)
{
	TargetdProcess t;
	ASSERT_TRUE(start_targetd(t, {"--nop-interval", "1"}));
	InitiatorConfig c = config();
	c.nop_interval = 0ms; // no keepalive of ours: only the target pings
	Session s(c);
	ASSERT_TRUE(s.login(local(t.port()))) << s.error();
	std::vector<uint8_t> data(300);
	for (size_t i = 0; i < data.size(); i++)
		data[i] = static_cast<uint8_t>(i * 7);
	PingResult p = s.ping_sync(data);
	EXPECT_EQ(p.outcome, TaskOutcome::Completed);
	EXPECT_TRUE(p.data_ok);
	EXPECT_EQ(s.stats().pings, 1u);
	// The target pings every second; we answer, so it keeps the session.
	const auto t0 = clock::now();
	while (clock::now() - t0 < 3000ms)
		ASSERT_GE(s.poll(100ms), 0) << s.error();
	EXPECT_GE(s.stats().nop_in_pings, 2u);
	EXPECT_EQ(s.state(), SessionState::FullFeature);
	EXPECT_TRUE(s.logout());
}

TEST(InitiatorTmf, AbortTask)
{
	TargetdProcess t;
	ASSERT_TRUE(start_targetd(t));
	Session s(config());
	ASSERT_TRUE(s.login(local(t.port()))) << s.error();
	clear_ua(s, 0);
	// 32 reads of 1 MiB in flight; abort the last one. Either it completed before the
	// TMF (Task does not exist) or the TMF ended it (Function complete -> Aborted): it
	// ends exactly once, and every other read completes GOOD.
	std::vector<std::vector<uint8_t>> bufs(32, std::vector<uint8_t>(1u << 20));
	std::array<uint8_t, 16> cdb = cdb_read16(0, 2048);
	std::map<uint32_t, ScsiResult> ended;
	std::vector<uint32_t> itts;
	for (auto &b : bufs) {
		const uint32_t itt = s.submit({0, cdb, DataDir::Read, b}, [&](const ScsiResult &r) {
			ended[static_cast<uint32_t>(ended.size())] = r;
		});
		ASSERT_NE(itt, kReservedTag);
		itts.push_back(itt);
	}
	TmfResult tr = s.task_mgmt_sync(TmfFunction::AbortTask, 0, itts.back());
	ASSERT_EQ(tr.outcome, TaskOutcome::Completed);
	EXPECT_TRUE(tr.response == TmfResponse::Complete || tr.response == TmfResponse::NoTask)
	    << int(tr.response);
	while (s.in_flight())
		ASSERT_GE(s.poll(100ms), 0) << s.error();
	ASSERT_EQ(ended.size(), bufs.size());
	size_t aborted = 0;
	for (auto &[i, r] : ended) {
		if (r.outcome == TaskOutcome::Aborted)
			aborted++;
		else
			EXPECT_TRUE(r.good()) << describe_result(r);
	}
	EXPECT_LE(aborted, 1u);
	// ABORT TASK for a tag nobody uses: "Task does not exist" (or complete, 11.6.1).
	tr = s.task_mgmt_sync(TmfFunction::AbortTask, 0, 0x12345);
	EXPECT_EQ(tr.outcome, TaskOutcome::Completed);
	EXPECT_TRUE(tr.response == TmfResponse::NoTask || tr.response == TmfResponse::Complete);
	EXPECT_EQ(s.state(), SessionState::FullFeature);
	EXPECT_TRUE(s.logout());
}

TEST(InitiatorTmf, AbortQueuedTaskLocally)
{
	// Window of 1 and a slow big write ahead: the second command waits for the window;
	// aborting it never bothers the target.
	TargetdProcess t;
	ASSERT_TRUE(start_targetd(t, {"--cmd-window", "1"}));
	Session s(config());
	ASSERT_TRUE(s.login(local(t.port()))) << s.error();
	clear_ua(s, 0);
	std::vector<uint8_t> big(4u << 20), small(4096);
	auto c1 = cdb_write16(0, static_cast<uint32_t>(big.size() / kBlock));
	auto c2 = cdb_read16(0, 8);
	std::optional<ScsiResult> r1, r2;
	ASSERT_NE(s.submit({0, c1, DataDir::Write, big}, [&](const ScsiResult &r) { r1 = r; }),
	          kReservedTag);
	const uint32_t itt2 =
	    s.submit({0, c2, DataDir::Read, small}, [&](const ScsiResult &r) { r2 = r; });
	ASSERT_NE(itt2, kReservedTag);
	ASSERT_GE(s.queued(), 1u); // the read at least (the write too while the window is shut)
	TmfResult tr = s.task_mgmt_sync(TmfFunction::AbortTask, 0, itt2);
	EXPECT_EQ(tr.response, TmfResponse::Complete);
	while (s.in_flight())
		ASSERT_GE(s.poll(100ms), 0) << s.error();
	ASSERT_TRUE(r1 && r2);
	EXPECT_TRUE(r1->good()) << describe_result(*r1);
	EXPECT_EQ(r2->outcome, TaskOutcome::Aborted);
	EXPECT_TRUE(s.logout());
}

TEST(InitiatorTmf, LunResetRaisesUnitAttention)
{
	TargetdProcess t;
	ASSERT_TRUE(start_targetd(t));
	Session s(config());
	ASSERT_TRUE(s.login(local(t.port()))) << s.error();
	std::array<uint8_t, 6> tur = cdb_test_unit_ready();
	ScsiResult r = s.run({0, tur, DataDir::None, {}});
	// The first command of a new nexus may see POWER ON/RESET; clear it.
	if (!r.good())
		r = s.run({0, tur, DataDir::None, {}});
	ASSERT_TRUE(r.good()) << describe_result(r);
	TmfResult tr = s.task_mgmt_sync(TmfFunction::LunReset, 0);
	ASSERT_EQ(tr.outcome, TaskOutcome::Completed);
	EXPECT_EQ(tr.response, TmfResponse::Complete);
	// SAM-5 5.11.2 / SPC-4: after a LUN reset, UNIT ATTENTION (06h) 29h/xx.
	r = s.run({0, tur, DataDir::None, {}});
	EXPECT_EQ(r.status, 0x02);
	SenseKey k = parse_sense({r.sense.data(), r.sense_len});
	EXPECT_TRUE(k.valid);
	EXPECT_EQ(k.key, 0x06);
	EXPECT_EQ(k.asc, 0x29);
	r = s.run({0, tur, DataDir::None, {}});
	EXPECT_TRUE(r.good()) << describe_result(r);
	// A LUN that does not exist.
	tr = s.task_mgmt_sync(TmfFunction::LunReset, 7);
	EXPECT_EQ(tr.outcome, TaskOutcome::Completed);
	EXPECT_NE(tr.response, TmfResponse::Complete);
	EXPECT_TRUE(s.logout());
}

TEST(InitiatorLogout, TargetRequestsLogout)
{
	// SIGTERM: ulp-targetd sends Async Message event 1; we finish and log out cleanly.
	TargetdProcess t;
	ASSERT_TRUE(start_targetd(t));
	Session s(config());
	ASSERT_TRUE(s.login(local(t.port()))) << s.error();
	std::vector<AsyncEvent> events;
	s.on_async([&](const AsyncEvent &e) { events.push_back(e); });
	::kill(t.pid(), SIGTERM);
	const auto t0 = clock::now();
	while (clock::now() - t0 < 10s && s.poll(100ms) >= 0) {
	}
	EXPECT_EQ(s.state(), SessionState::Closed) << s.error();
	EXPECT_TRUE(s.target_requested_logout());
	ASSERT_FALSE(events.empty());
	EXPECT_EQ(events[0].event, 1);
	EXPECT_EQ(t.stop(10s), 0);
}

} // namespace
} // namespace ulp::iscsi::initiator
