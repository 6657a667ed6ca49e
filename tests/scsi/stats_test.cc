// SPDX-License-Identifier: MIT
// The core's I/O statistics (scsi/stats.h) through the loopback fabric: every command counted
// once by kind, bytes as moved, errors by kind (CHECK CONDITION, a failed data-out, aborted,
// RESERVATION CONFLICT), TMFs, the latency histogram's count equal to the commands; per LU,
// per nexus, and per Tpg, where a closed session's numbers stay; threads counting at once.
#include "scsi/core.h"
#include "scsi/stats.h"
#include "scsi_test_util.h"

#include <thread>

namespace ulp::scsi
{
namespace
{

using namespace test;

uint64_t errs(const IoCounts &c, IoError e)
{
	return c.errors[size_t(e)];
}
uint64_t cmds(const IoCounts &c, IoKind k)
{
	return c.cmds[size_t(k)];
}

TEST(ScsiStats, LatencyBuckets)
{
	EXPECT_EQ(lat_bucket(0), 0u);
	EXPECT_EQ(lat_bucket(1000), 0u); // 1 us: le 1 us
	EXPECT_EQ(lat_bucket(1001), 1u); // le 2 us
	EXPECT_EQ(lat_bucket(2000), 1u);
	EXPECT_EQ(lat_bucket(2001), 2u);
	EXPECT_EQ(lat_bucket(4000), 2u);
	EXPECT_EQ(lat_bucket(1000ull << 23), 23u);
	EXPECT_EQ(lat_bucket((1000ull << 23) + 1), kLatBuckets); // beyond: +Inf
	EXPECT_EQ(lat_bucket(UINT64_MAX / 2), kLatBuckets);
}

TEST(ScsiStats, CommandsBytesAndErrorsAreCountedOnce)
{
	Target t;
	LogicalUnit &lu = t.add(0, 1 << 20); // 2048 blocks of 512
	Nexus *s = t.login("iqn.init:a");    // one TUR: POWER ON (CHECK CONDITION)
	constexpr int kWrites = 5, kReads = 3;
	constexpr uint32_t kBlocks = 8, kBytes = kBlocks * 512;
	for (int i = 0; i < kWrites; i++)
		ASSERT_EQ(t.lb.run(s, 0, cdb_rw16(true, uint64_t(i) * kBlocks, kBlocks),
		                   DataDir::Write, std::vector<uint8_t>(kBytes, uint8_t(i)))
		              .status,
		          Status::Good);
	for (int i = 0; i < kReads; i++)
		ASSERT_EQ(t.lb.run(s, 0, cdb_rw10(false, uint32_t(i) * kBlocks, kBlocks),
		                   DataDir::Read, std::vector<uint8_t>(kBytes))
		              .status,
		          Status::Good);
	// A read past the end: LBA OUT OF RANGE, a read all the same, no bytes.
	auto past =
	    t.lb.run(s, 0, cdb_rw16(false, 2047, 2), DataDir::Read, std::vector<uint8_t>(1024));
	ASSERT_EQ(past.status, Status::CheckCondition);
	// INQUIRY: another command, data-in of 36 bytes.
	ASSERT_EQ(t.lb.run(s, 0, cdb_inquiry(36), DataDir::Read, std::vector<uint8_t>(36)).status,
	          Status::Good);
	// A write whose data-out the fabric could not fetch: a transport error, nothing written.
	auto *p = t.lb.start_async(s, 0, cdb_rw16(true, 0, 1), DataDir::Write,
	                           std::vector<uint8_t>(512), TaskAttr::Simple, 77, true);
	ASSERT_TRUE(t.lb.release_write(p, false));
	EXPECT_EQ(t.lb.wait(p).status, Status::CheckCondition);
	// A write aborted while waiting for its data (ABORT TASK SET): aborted, and one TMF.
	p = t.lb.start_async(s, 0, cdb_rw16(true, 0, 1), DataDir::Write, std::vector<uint8_t>(512),
	                     TaskAttr::Simple, 78, true);
	EXPECT_EQ(t.lb.tmf(s, TmfType::AbortTaskSet, 0), TmfResponse::Complete);
	EXPECT_TRUE(t.lb.wait(p).aborted);

	const IoCounts l = lu.stats_.read();
	EXPECT_EQ(cmds(l, IoKind::Write), uint64_t(kWrites) + 2);
	EXPECT_EQ(cmds(l, IoKind::Read), uint64_t(kReads) + 1);
	EXPECT_EQ(cmds(l, IoKind::Other), 2u); // the TUR, the INQUIRY
	EXPECT_EQ(l.bytes_written, uint64_t(kWrites) * kBytes);
	EXPECT_EQ(l.bytes_read, uint64_t(kReads) * kBytes + 36);
	EXPECT_EQ(errs(l, IoError::CheckCondition), 2u); // POWER ON, LBA OUT OF RANGE
	EXPECT_EQ(errs(l, IoError::Transport), 1u);
	EXPECT_EQ(errs(l, IoError::Aborted), 1u);
	EXPECT_EQ(errs(l, IoError::Busy), 0u);
	EXPECT_EQ(l.lat_count(), l.commands());
	EXPECT_GT(l.lat_sum_ns, 0u);
	EXPECT_EQ(l.tmfs, 0u) << "TMFs are the nexus's";

	// The nexus saw the same commands, and the TMF; the Tpg sums its nexuses.
	const IoCounts n = s->stats_.read();
	EXPECT_EQ(n.cmds, l.cmds);
	EXPECT_EQ(n.bytes_read, l.bytes_read);
	EXPECT_EQ(n.bytes_written, l.bytes_written);
	EXPECT_EQ(n.errors, l.errors);
	EXPECT_EQ(n.lat, l.lat);
	EXPECT_EQ(n.tmfs, 1u);
	const IoCounts g = t.tpg.io_counts();
	EXPECT_EQ(g.cmds, n.cmds);
	EXPECT_EQ(g.tmfs, 1u);

	// A missing LUN: the nexus counts it, no LU does.
	EXPECT_EQ(t.lb.run(s, 9, cdb_tur(), DataDir::None).status, Status::CheckCondition);
	EXPECT_EQ(s->stats_.read().commands(), n.commands() + 1);
	EXPECT_EQ(lu.stats_.read().commands(), l.commands());
}

TEST(ScsiStats, ReservationConflictIsItsOwnError)
{
	Target t;
	LogicalUnit &lu = t.add(0);
	Nexus *a = t.login("iqn.init:a");
	Nexus *b = t.login("iqn.init:b");
	std::vector<uint8_t> reserve6(6, 0);
	reserve6[0] = 0x16; // RESERVE (6): a's
	ASSERT_EQ(t.lb.run(a, 0, reserve6, DataDir::None).status, Status::Good);
	EXPECT_EQ(
	    t.lb.run(b, 0, cdb_rw16(false, 0, 1), DataDir::Read, std::vector<uint8_t>(512)).status,
	    Status::ReservationConflict);
	EXPECT_EQ(errs(b->stats_.read(), IoError::ReservationConflict), 1u);
	EXPECT_EQ(errs(a->stats_.read(), IoError::ReservationConflict), 0u);
	EXPECT_EQ(errs(lu.stats_.read(), IoError::ReservationConflict), 1u);
}

// A closed session's numbers stay in its Tpg's total: the total never goes backwards.
TEST(ScsiStats, ClosedSessionsStayInTheTotal)
{
	Target t;
	t.add(0);
	Nexus *a = t.login("iqn.init:a");
	Nexus *b = t.login("iqn.init:b");
	for (int i = 0; i < 4; i++)
		ASSERT_EQ(
		    t.lb.run(a, 0, cdb_rw16(true, 0, 2), DataDir::Write, std::vector<uint8_t>(1024))
		        .status,
		    Status::Good);
	ASSERT_EQ(
	    t.lb.run(b, 0, cdb_rw16(false, 0, 1), DataDir::Read, std::vector<uint8_t>(512)).status,
	    Status::Good);
	const IoCounts before = t.tpg.io_counts();
	EXPECT_EQ(before.bytes_written, 4096u);
	EXPECT_EQ(before.bytes_read, 512u);
	EXPECT_EQ(before.commands(), 2u + 4 + 1); // two POWER ON TURs
	ASSERT_EQ(t.lb.logout(a), 0);
	const IoCounts after = t.tpg.io_counts();
	EXPECT_EQ(after.cmds, before.cmds);
	EXPECT_EQ(after.bytes_written, before.bytes_written);
	EXPECT_EQ(after.lat, before.lat);
	// And goes on counting the sessions still open.
	ASSERT_EQ(
	    t.lb.run(b, 0, cdb_rw16(false, 0, 1), DataDir::Read, std::vector<uint8_t>(512)).status,
	    Status::Good);
	EXPECT_EQ(t.tpg.io_counts().bytes_read, 1024u);
}

// Threads submitting at once on their own nexuses to one LU: nothing lost from the sharded
// counters (TSan: no race between the writers or with a reader summing meanwhile).
TEST(ScsiStats, ConcurrentThreadsLoseNothing)
{
	Target t;
	LogicalUnit &lu = t.add(0, 4 << 20);
	constexpr int kThreads = 4, kPerThread = 300;
	std::vector<Nexus *> ns;
	for (int i = 0; i < kThreads; i++)
		ns.push_back(t.login("iqn.init:" + std::to_string(i)));
	const uint64_t base = lu.stats_.read().commands(); // the POWER ON TURs
	std::atomic<bool> stop{false};
	std::thread reader([&] {
		uint64_t last = 0;
		while (!stop.load()) {
			const uint64_t n = lu.stats_.read().commands();
			EXPECT_GE(n, last); // monotonic for a reader
			last = n;
		}
	});
	std::vector<std::thread> th;
	for (int i = 0; i < kThreads; i++)
		th.emplace_back([&, i] {
			for (int k = 0; k < kPerThread; k++) {
				const bool w = k % 2;
				auto r = t.lb.run(ns[i], 0, cdb_rw16(w, uint64_t(i) * 64, 1),
				                  w ? DataDir::Write : DataDir::Read,
				                  std::vector<uint8_t>(512));
				EXPECT_EQ(r.status, Status::Good);
			}
		});
	for (auto &x : th)
		x.join();
	stop = true;
	reader.join();
	const IoCounts l = lu.stats_.read();
	EXPECT_EQ(l.commands(), base + kThreads * kPerThread);
	EXPECT_EQ(cmds(l, IoKind::Write), uint64_t(kThreads) * kPerThread / 2);
	EXPECT_EQ(l.bytes_written, uint64_t(kThreads) * kPerThread / 2 * 512);
	EXPECT_EQ(l.bytes_read, uint64_t(kThreads) * kPerThread / 2 * 512);
	EXPECT_EQ(l.lat_count(), l.commands());
	for (Nexus *n : ns)
		EXPECT_EQ(n->stats_.read().commands(), 1u + kPerThread);
}

} // namespace
} // namespace ulp::scsi
