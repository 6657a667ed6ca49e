// SPDX-License-Identifier: MIT
// tests/admin/targetd_stats_test.cc - ulp-targetd's statistics end to end: the daemon in a
// child process, the project's iSCSI initiator doing known I/O over TCP, and `ulpctl stats`
// (JSON, table, Prometheus) reading what the daemon counted. N writes of B bytes are N writes
// and N*B bytes, on the session, the LUN and the target; a read past the end is a read and a
// CHECK CONDITION; the latency histogram counts every command; the CmdSN window is the one
// the initiator was given; a logged-out session's numbers stay in its target's total; the
// Prometheus text is well formed (every line a comment or `name{labels} value`, every family
// typed once, histograms cumulative) and says the same numbers.
#include "admin/prometheus.h"
#include "core/byteorder.h"
#include "tests/admin/prom_check.h"
#include "tests/admin/targetd_env.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
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
