// SPDX-License-Identifier: MIT
// tests/admin/targetd_stats_test.cc - ulp-targetd's statistics end to end: the daemon in a
// child process, the project's iSCSI initiator doing known I/O over TCP, and `ulpctl stats`
// (JSON, table, Prometheus) reading what the daemon counted. N writes of B bytes are N writes
// and N*B bytes, on the session, the LUN and the target; a read past the end is a read and a
// CHECK CONDITION; the latency histogram counts every command; the CmdSN window is the one
// the initiator was given; a logged-out session's numbers stay in its target's total; the
// Prometheus text is well formed (every line a comment or `name{labels} value`, every family
// typed once, histograms cumulative) and says the same numbers; EXTENDED COPY between two file
// LUNs is counted on the LUN it was sent to, and its Third-party Copy VPD page decodes (sg_vpd).
#include "admin/prometheus.h"
#include "core/byteorder.h"
#include "tests/admin/prom_check.h"
#include "tests/admin/targetd_env.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>

namespace ulp::iscsi::initiator
{
namespace
{

using namespace std::chrono_literals;
using admin::json;
using test::TargetdProcess;

constexpr char kIqn[] = "iqn.2026-11.org.ulp:stats";
constexpr char kInitiator[] = "iqn.2026-11.org.ulp:stats-test";

using test_env::ulpctl;

json stats(const std::string &sock)
{
	return test_env::ulpctl_json(sock, {"stats"});
}

// The io objects of the target, of its LUN 0 and of the session with this id (null when
// there is none).
struct Ios {
	json target, lun0, session, conn;
};
Ios ios_of(const json &st, const std::string &session_id)
{
	Ios r;
	for (const json &t : st["io"]) {
		if (t["target"] != kIqn || t["fabric"] != "iscsi")
			continue;
		r.target = t["io"];
		for (const json &l : t["luns"])
			if (l["lun"] == 0)
				r.lun0 = l["io"];
		for (const json &s : t["sessions"])
			if (s["id"] == session_id) {
				r.session = s["io"];
				if (!s["connections"].empty())
					r.conn = s["connections"][0];
			}
	}
	return r;
}

uint64_t u(const json &io, const char *a, const char *b = nullptr)
{
	const json &x = b ? io[a][b] : io[a];
	return x.get<uint64_t>();
}

uint64_t commands(const json &io)
{
	return u(io, "commands", "read") + u(io, "commands", "write") + u(io, "commands", "other");
}

using test::parse_prometheus;

TEST(TargetdStats, IoIsCountedPerSessionLunAndTargetAndSurvivesLogout)
{
	test_env::AdminDaemon d;
	ASSERT_TRUE(d.start({"--target", kIqn, "--lun", "0:ram:size=16M"}));
	const std::string &sock = d.sock;
	TargetdProcess &t = d.t;
	Session s(test_env::initiator_config(kInitiator, kIqn));
	ASSERT_TRUE(s.login(test_env::local(t.port()))) << s.error();
	test_env::clear_ua(s, 0);
	const std::string id = "iscsi:" + std::to_string(s.params().tsih);
	const Ios before = ios_of(stats(sock), id);
	ASSERT_FALSE(before.session.is_null()) << "no session " << id;
	ASSERT_FALSE(before.lun0.is_null());

	constexpr int kWrites = 10, kReads = 6;
	constexpr uint32_t kBlocks = 8, kBytes = kBlocks * 512;
	std::vector<uint8_t> buf(kBytes, 0x5a);
	for (int i = 0; i < kWrites; i++)
		ASSERT_TRUE(
		    s.run({0, cdb_write16(uint64_t(i) * kBlocks, kBlocks), DataDir::Write, buf})
		        .good());
	for (int i = 0; i < kReads; i++)
		ASSERT_TRUE(
		    s.run({0, cdb_read16(uint64_t(i) * kBlocks, kBlocks), DataDir::Read, buf})
		        .good());
	// Past the end (16 MiB = 32768 blocks): LBA OUT OF RANGE.
	std::vector<uint8_t> two(1024);
	EXPECT_FALSE(s.run({0, cdb_read16(32767, 2), DataDir::Read, two}).good());

	const json st = stats(sock);
	// Every fabric counter the daemon reports has a Prometheus name (admin/prometheus.cc's
	// tables), none is dropped unnamed.
	EXPECT_EQ(admin::prometheus_unnamed(st), std::vector<std::string>{}) << st.dump();
	const Ios after = ios_of(st, id);
	for (const json *p : {&after.session, &after.lun0, &after.target}) {
		const json &io = *p;
		const json *b = p == &after.session ? &before.session
		                : p == &after.lun0  ? &before.lun0
		                                    : &before.target;
		SCOPED_TRACE(io.dump());
		EXPECT_EQ(u(io, "commands", "write") - u(*b, "commands", "write"),
		          uint64_t(kWrites));
		EXPECT_EQ(u(io, "commands", "read") - u(*b, "commands", "read"),
		          uint64_t(kReads) + 1);
		EXPECT_EQ(u(io, "commands", "other"), u(*b, "commands", "other"));
		EXPECT_EQ(u(io, "bytes_written") - u(*b, "bytes_written"),
		          uint64_t(kWrites) * kBytes);
		EXPECT_EQ(u(io, "bytes_read") - u(*b, "bytes_read"), uint64_t(kReads) * kBytes);
		EXPECT_EQ(u(io, "errors", "check_condition") - u(*b, "errors", "check_condition"),
		          1u);
		EXPECT_EQ(u(io, "errors", "transport"), 0u);
		EXPECT_EQ(u(io, "errors", "aborted"), 0u);
		EXPECT_EQ(u(io, "latency", "count"), commands(io));
		uint64_t in_buckets = 0;
		for (const json &n : io["latency"]["buckets"])
			in_buckets += n.get<uint64_t>();
		EXPECT_EQ(in_buckets, commands(io));
		EXPECT_GT(u(io, "latency", "sum_ns"), u(*b, "latency", "sum_ns"));
	}
	// Nothing is in flight between commands: the window the initiator was given last.
	ASSERT_TRUE(after.conn.is_object());
	EXPECT_EQ(after.conn["exp_cmdsn"].get<uint32_t>(), s.exp_cmdsn());
	EXPECT_EQ(after.conn["max_cmdsn"].get<uint32_t>(), s.max_cmdsn());
	EXPECT_GT(after.conn["cmdsn_window"].get<uint32_t>(), 0u);
	EXPECT_GE(after.conn["pdus_in"].get<uint64_t>(), uint64_t(kWrites + kReads + 1));

	// The Prometheus text says the same.
	std::string prom;
	ASSERT_EQ(ulpctl(sock, {"stats", "--prometheus"}, &prom), 0) << prom;
	std::map<std::string, double> m;
	ASSERT_TRUE(parse_prometheus(prom, &m)) << prom;
	const std::string tl = std::string("{target=\"") + kIqn + "\",fabric=\"iscsi\"";
	EXPECT_EQ(m[std::string("ulp_target_written_bytes_total") + tl + "}"],
	          double(u(after.target, "bytes_written")));
	EXPECT_EQ(m[std::string("ulp_target_commands_total") + tl + ",kind=\"write\"}"],
	          double(u(after.target, "commands", "write")));
	EXPECT_EQ(m[std::string("ulp_target_latency_seconds_count") + tl + "}"],
	          double(commands(after.target)));
	EXPECT_EQ(m[std::string("ulp_target_latency_seconds_bucket") + tl + ",le=\"+Inf\"}"],
	          double(commands(after.target)));
	EXPECT_EQ(m[std::string("ulp_lun_errors_total{target=\"") + kIqn +
	            "\",lun=\"0\",kind=\"check_condition\"}"],
	          double(u(after.lun0, "errors", "check_condition")));
	// Buckets are cumulative: never decreasing with le.
	double last = 0;
	int buckets = 0;
	for (uint64_t us = 1; us <= (1u << 23); us *= 2) {
		char le[32];
		std::snprintf(le, sizeof(le), "%.9g", double(us) / 1e6);
		const std::string k =
		    std::string("ulp_target_latency_seconds_bucket") + tl + ",le=\"" + le + "\"}";
		ASSERT_TRUE(m.count(k)) << k;
		EXPECT_GE(m[k], last);
		last = m[k];
		buckets++;
	}
	EXPECT_EQ(buckets, 24);
	EXPECT_LE(last, double(commands(after.target)));
	EXPECT_EQ(m["ulp_iscsi_sessions_open"], 1);

	// The table names the target and the session.
	std::string table;
	ASSERT_EQ(ulpctl(sock, {"stats"}, &table), 0) << table;
	EXPECT_NE(table.find(kIqn), std::string::npos) << table;
	EXPECT_NE(table.find(id), std::string::npos) << table;
	EXPECT_NE(table.find("window"), std::string::npos) << table;

	// Logged out: the session is gone, its numbers stay in the target's total.
	ASSERT_TRUE(s.logout(5s));
	json gone;
	for (int i = 0; i < 100; i++) {
		gone = stats(sock);
		if (gone["sessions"] == 0)
			break;
		std::this_thread::sleep_for(50ms);
	}
	const Ios left = ios_of(gone, id);
	EXPECT_TRUE(left.session.is_null());
	EXPECT_EQ(left.target["commands"], after.target["commands"]);
	EXPECT_EQ(left.target["bytes_written"], after.target["bytes_written"]);
	EXPECT_EQ(left.target["latency"], after.target["latency"]);
	EXPECT_EQ(left.lun0["commands"], after.lun0["commands"]);
	EXPECT_EQ(t.stop(), 0) << t.log();
}

// The NAA designator VPD 83h gives for the LU at lun (0: none found).
uint64_t lu_naa(Session &s, uint64_t lun)
{
	std::vector<uint8_t> d(255);
	const uint8_t cdb[6] = {0x12, 0x01, 0x83, 0x00, 0xff, 0x00};
	if (!s.run({lun, cdb, DataDir::Read, d}).good())
		return 0;
	const size_t end = std::min<size_t>(d.size(), 4 + get_be16(&d[2]));
	for (size_t at = 4; at + 4 <= end; at += 4 + d[at + 3])
		if ((d[at + 1] & 0x3f) == 0x03 && d[at + 3] == 8 && at + 12 <= end)
			return get_be64(&d[at + 4]); // ASSOCIATION logical unit, NAA, 8 bytes
	return 0;
}

// EXTENDED COPY between two file LUNs of the daemon: counted on the LUN that received it,
// with the bytes the kernel copied (copy_file_range), in the JSON, the Prometheus text and
// the table.
TEST(TargetdStats, ExtendedCopyIsCountedOnItsLun)
{
	test_env::AdminDaemon d;
	const std::string a = d.dir / "a.img", b = d.dir / "b.img";
	ASSERT_TRUE(d.start({"--target", kIqn, "--lun", "0:file:path=" + a + ",size=16M", "--lun",
	                     "1:file:path=" + b + ",size=16M"}));
	Session s(test_env::initiator_config(kInitiator, kIqn));
	ASSERT_TRUE(s.login(test_env::local(d.t.port()))) << s.error();
	test_env::clear_ua(s, 0);
	test_env::clear_ua(s, 1);
	const uint64_t naa0 = lu_naa(s, 0), naa1 = lu_naa(s, 1);
	ASSERT_NE(naa0, 0u);
	ASSERT_NE(naa1, 0u);

	// The Third-party Copy VPD page as an initiator gets it over iSCSI, decoded by
	// sg3_utils' sg_vpd (where installed): the copy manager's commands and limits.
	std::vector<uint8_t> vpd(1024);
	const uint8_t inq[6] = {0x12, 0x01, 0x8f, 0x04, 0x00, 0x00};
	ASSERT_TRUE(s.run({0, inq, DataDir::Read, vpd}).good());
	ASSERT_EQ(vpd[1], 0x8f);
	if (access("/usr/bin/sg_vpd", X_OK) == 0) {
		const std::string hex = d.dir / "vpd8f.hex";
		{
			std::ofstream f(hex);
			for (size_t i = 0; i < 4u + get_be16(&vpd[2]); i++) {
				char b[4];
				std::snprintf(b, sizeof(b), "%02x ", vpd[i]);
				f << b;
			}
		}
		std::string out;
		FILE *p = popen(("/usr/bin/sg_vpd --inhex=" + hex + " -p 0x8f 2>&1").c_str(), "r");
		ASSERT_TRUE(p);
		char line[256];
		while (std::fgets(line, sizeof(line), p))
			out += line;
		EXPECT_EQ(pclose(p), 0) << out;
		for (const char *want :
		     {"Extended copy(LID1)", "Receive copy operating parameters",
		      "Maximum CSCD descriptor count: 8", "Maximum segment descriptor count: 16",
		      "block -> block [0x2]", "Identification Descriptor [0xe4]",
		      "Total concurrent copies: 64", "Data segment granularity: 512"})
			EXPECT_NE(out.find(want), std::string::npos) << want << " in\n" << out;
		EXPECT_EQ(out.find("Unexpected"), std::string::npos) << out;
	}
	std::vector<uint8_t> buf(64 * 512, 0x3c);
	ASSERT_TRUE(s.run({0, cdb_write16(0, 64), DataDir::Write, buf}).good());
	// SPC-4 6.4.3: a header, two identification CSCDs (E4h), one block-to-block segment
	// (02h) of 64 blocks from LUN 0's LBA 0 to LUN 1's LBA 8.
	std::vector<uint8_t> p(16 + 64 + 28, 0);
	p[1] = 3 << 3; // LIST ID USAGE 11b
	p[3] = 64;     // CSCD DESCRIPTOR LIST LENGTH
	p[11] = 28;    // SEGMENT DESCRIPTOR LIST LENGTH
	for (int i = 0; i < 2; i++) {
		uint8_t *c = &p[16 + 32 * i];
		c[0] = 0xe4;
		c[4] = 0x01; // binary
		c[5] = 0x03; // LU, NAA
		c[7] = 8;
		const uint64_t naa = i ? naa1 : naa0;
		for (int k = 0; k < 8; k++)
			c[8 + k] = uint8_t(naa >> (56 - 8 * k));
		c[30] = 0x02; // DISK BLOCK LENGTH 512
	}
	uint8_t *g = &p[80];
	g[0] = 0x02;
	g[3] = 0x18;
	g[7] = 1;   // destination CSCD 1
	g[11] = 64; // blocks
	g[27] = 8;  // destination LBA
	uint8_t cdb[16] = {0x83};
	cdb[13] = uint8_t(p.size());
	ASSERT_TRUE(s.run({0, cdb, DataDir::Write, p}).good());
	std::vector<uint8_t> back(64 * 512);
	ASSERT_TRUE(s.run({1, cdb_read16(8, 64), DataDir::Read, back}).good());
	EXPECT_EQ(back, buf);

	const json st = stats(d.sock);
	json x0, x1;
	for (const json &t : st["io"])
		for (const json &l : t["luns"])
			(l["lun"] == 0 ? x0 : x1) = l["xcopy"];
	ASSERT_TRUE(x0.is_object()) << st.dump();
	EXPECT_EQ(x0["good"], 1);
	EXPECT_EQ(x0["failed"], 0);
	EXPECT_EQ(x0["aborted"], 0);
	EXPECT_EQ(x0["bytes"], 64 * 512);
	EXPECT_EQ(x0["kernel_bytes"], 64 * 512) << "two file LUNs: the kernel copied";
	EXPECT_EQ(x1["good"], 0) << "counted where it was sent";

	std::string prom;
	ASSERT_EQ(ulpctl(d.sock, {"stats", "--prometheus"}, &prom), 0) << prom;
	std::map<std::string, double> m;
	ASSERT_TRUE(parse_prometheus(prom, &m)) << prom;
	const std::string ll = std::string("{target=\"") + kIqn + "\",lun=\"0\"";
	EXPECT_EQ(m["ulp_lun_copies_total" + ll + ",result=\"good\"}"], 1);
	EXPECT_EQ(m["ulp_lun_copied_bytes_total" + ll + "}"], 64 * 512);
	EXPECT_EQ(m["ulp_lun_kernel_copied_bytes_total" + ll + "}"], 64 * 512);

	std::string table;
	ASSERT_EQ(ulpctl(d.sock, {"stats"}, &table), 0) << table;
	EXPECT_NE(table.find("XCOPY_LUN"), std::string::npos) << table;
	ASSERT_TRUE(s.logout(5s));
	EXPECT_EQ(d.t.stop(), 0) << d.t.log();
}

// stats_get's memory figures are the allocator's own, and follow what the daemon holds: a
// RAM LUN's 64 KiB chunks come from malloc as writes first touch them and go back with
// UNMAP, so 16 MiB written in 256 chunks and then unmapped moves heap_in_use up and down by
// about that much (in every build: under the sanitizers their allocator answers).
TEST(TargetdStats, HeapInUseFollowsWhatTheDaemonHolds)
{
	test_env::AdminDaemon d;
	ASSERT_TRUE(d.start({"--target", kIqn, "--lun", "0:ram:size=64M"}));
	const std::string &sock = d.sock;
	TargetdProcess &t = d.t;
	Session s(test_env::initiator_config(kInitiator, kIqn));
	ASSERT_TRUE(s.login(test_env::local(t.port()))) << s.error();
	test_env::clear_ua(s, 0);
	auto in_use = [&] {
		const json m = stats(sock)["memory"];
		EXPECT_TRUE(m["allocator"].is_string()) << m.dump();
		EXPECT_LE(m["heap_in_use"].get<uint64_t>(), m["heap_held"].get<uint64_t>())
		    << m.dump();
		return int64_t(m["heap_in_use"].get<uint64_t>());
	};
	constexpr uint32_t kChunks = 256, kChunkBlocks = 128; // 64 KiB of 512-byte blocks
	constexpr int64_t kHeld = int64_t(kChunks) * 65536;
	const int64_t before = in_use();
	std::vector<uint8_t> blk(4096, 0x3c);
	for (uint32_t i = 0; i < kChunks; i++)
		ASSERT_TRUE(
		    s.run({0, cdb_write16(uint64_t(i) * kChunkBlocks, 8), DataDir::Write, blk})
		        .good());
	const int64_t written = in_use();
	EXPECT_GE(written - before, kHeld - kHeld / 16) << before << " -> " << written;
	EXPECT_LE(written - before, kHeld + kHeld / 4) << before << " -> " << written;

	// The Prometheus gauge says it too.
	std::string prom;
	ASSERT_EQ(ulpctl(sock, {"stats", "--prometheus"}, &prom), 0) << prom;
	std::map<std::string, double> m;
	ASSERT_TRUE(parse_prometheus(prom, &m)) << prom;
	EXPECT_GE(m["ulp_memory_heap_in_use_bytes"], double(before + kHeld - kHeld / 16));

	// UNMAP (SBC-4 5.31) of the whole range, 1 MiB a command: the chunks are freed.
	for (uint32_t lba = 0; lba < kChunks * kChunkBlocks; lba += 2048) {
		std::vector<uint8_t> cdb(10, 0), list(24, 0);
		cdb[0] = 0x42;
		put_be16(&cdb[7], uint16_t(list.size()));
		put_be16(&list[0], uint16_t(list.size() - 2));
		put_be16(&list[2], 16);
		put_be64(&list[8], lba);
		put_be32(&list[16], 2048);
		ASSERT_TRUE(s.run({0, cdb, DataDir::Write, list}).good()) << "UNMAP at " << lba;
	}
	const int64_t unmapped = in_use();
	EXPECT_LE(unmapped, written - (kHeld - kHeld / 16)) << written << " -> " << unmapped;
	EXPECT_EQ(t.stop(), 0) << t.log();
}

} // namespace
} // namespace ulp::iscsi::initiator
