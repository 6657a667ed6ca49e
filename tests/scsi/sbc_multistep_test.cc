// SPDX-License-Identifier: MIT
// SBC-3 commands done in several steps, through the loopback fabric: COMPARE AND WRITE and
// ORWRITE (read, compare or combine, write: one at a time per LU, races with one winner),
// WRITE ATOMIC (readers never see half of one), aborts in the middle of multi-step
// commands, many commands in flight, and random CDBs always answered. The shared fixtures
// are in sbc_env.h.
#include "tests/scsi/sbc_env.h"

#include <atomic>
#include <random>
#include <thread>

namespace ulp::scsi
{
namespace
{

using namespace sbc_test;
using std::chrono::milliseconds;

// ===========================================================================================
// COMPARE AND WRITE
// ===========================================================================================

TEST_P(SbcData, CompareAndWrite)
{
	// libiscsi CompareAndWrite.Simple, .Miscompare, .MiscompareSense, .Unwritten.
	Env e(make_bs(GetParam(), 1 << 20));
	const uint64_t n = e.nr();
	for (uint64_t lba : {uint64_t(0), n - 1}) {
		const Bytes a(kBs, 'A'), b(kBs, 'B');
		e.write(lba, a);
		Bytes data = a;
		data.insert(data.end(), b.begin(), b.end());
		ASSERT_TRUE(is_good(e.out(cdb_caw(lba, 1), data)));
		EXPECT_EQ(e.read(lba, 1), b);
		// Now the block holds 'B': comparing with 'A' miscompares, nothing is written.
		for (size_t at : {size_t(0), size_t(1), size_t(kBs - 27), size_t(kBs - 1)}) {
			Bytes cmp(kBs, 'B');
			cmp[at] = 'Z';
			cmp.insert(cmp.end(), kBs, 'C');
			auto r = e.out(cdb_caw(lba, 1), cmp);
			ASSERT_TRUE(is_sense(r, 0x1d00, 0xe)) << at;
			EXPECT_TRUE(info_valid(r));
			EXPECT_EQ(info(r), at);
			EXPECT_EQ(e.read(lba, 1), b);
		}
	}
	// An unwritten block reads as zeros and miscompares with anything else.
	Bytes pct(kBs, '%');
	pct.insert(pct.end(), kBs, 'B');
	EXPECT_TRUE(is_sense(e.out(cdb_caw(500, 1), pct), 0x1d00, 0xe));
	EXPECT_EQ(e.read(500, 1), Bytes(kBs, 0));
}

TEST(SbcCompareAndWrite, Fields)
{
	// libiscsi CompareAndWrite.Simple (beyond MAXIMUM COMPARE AND WRITE LENGTH), .DpoFua,
	// .InvalidDataOutSize, and the range.
	Env e(ram_bs(1 << 20), {}, false, true);
	const uint64_t n = e.nr();
	Bytes two(2 * kBs, 0);
	ASSERT_EQ(kSbcMaxCompareAndWriteBlocks, 1);
	EXPECT_TRUE(is_sense(e.out(cdb_caw(0, 2), Bytes(4 * kBs)), 0x2400));
	EXPECT_TRUE(is_sense(e.out(cdb_caw(0, 255), Bytes(510 * kBs)), 0x2400));
	EXPECT_TRUE(is_good(e.run(cdb_caw(0, 0)))) << "0 blocks: nothing to do";
	EXPECT_TRUE(is_sense(e.out(cdb_caw(n, 1), two), 0x2100));
	EXPECT_TRUE(is_sense(e.out(cdb_caw(~0ull, 1), two), 0x2100));
	EXPECT_TRUE(is_sense(e.run(cdb_caw(n + 1, 0)), 0x2100));
	for (uint8_t p = 1; p < 8; p++)
		EXPECT_TRUE(is_sense(e.out(cdb_caw(0, 1, uint8_t(p << 5)), two), 0x2400));
	EXPECT_TRUE(is_sense(e.out(cdb_caw(0, 1), Bytes(4 * kBs)), 0x0e03));
	EXPECT_TRUE(is_sense(e.out(cdb_caw(0, 1), Bytes(kBs)), 0x0e03));
	for (uint8_t b1 : {0x10, 0x08, 0x18, 0x02}) {
		e.faulty->clear();
		EXPECT_TRUE(is_good(e.out(cdb_caw(0, 1, b1), two))) << int(b1);
		auto ops = e.faulty->ops();
		ASSERT_EQ(ops.size(), 2u);
		EXPECT_EQ(ops[0].op, BsOp::Read);
		EXPECT_EQ(ops[1].op, BsOp::Write);
		EXPECT_EQ(ops[1].fua, (b1 & 0x08) != 0);
	}
	e.faulty->fail(BsOp::Read, 0, kBs, -EIO);
	EXPECT_TRUE(is_sense(e.out(cdb_caw(0, 1), two), 0x1100, 0x3));
	e.faulty->fail(BsOp::Write, 0, kBs, -EIO);
	EXPECT_TRUE(is_sense(e.out(cdb_caw(0, 1), two), 0x0c00, 0x3));

	LuConfig ro;
	ro.read_only = true;
	Env p(ram_bs(1 << 20), ro);
	EXPECT_TRUE(is_sense(p.out(cdb_caw(0, 1), two), 0x2700, 0x7));
}

// A COMPARE AND WRITE of block lba from the value `from` to `to` (each a block filled
// with that value's 8-byte big-endian form).
Bytes value_block(uint64_t v)
{
	Bytes b(kBs);
	for (size_t i = 0; i < kBs; i += 8)
		put_be64(&b[i], v);
	return b;
}
Bytes caw_data(uint64_t from, uint64_t to)
{
	Bytes d = value_block(from);
	Bytes t = value_block(to);
	d.insert(d.end(), t.begin(), t.end());
	return d;
}

TEST_P(SbcData, CompareAndWriteRacesHaveOneWinner)
{
	// Many COMPARE AND WRITEs in flight at once, all expecting the same old value: exactly
	// one finds it and writes; every other one sees the winner's data and miscompares.
	Env e(make_bs(GetParam(), 1 << 20));
	e.write(7, value_block(0));
	constexpr int kRounds = 20, kContenders = 16;
	for (int round = 0; round < kRounds; round++) {
		std::vector<Loopback::Pending *> p;
		for (int c = 0; c < kContenders; c++)
			p.push_back(e.t.lb.start_async(e.s, 0, cdb_caw(7, 1), DataDir::Write,
			                               caw_data(round, 1000 + c), TaskAttr::Simple,
			                               c));
		int winner = -1, losers = 0;
		for (int c = 0; c < kContenders; c++) {
			auto r = e.t.lb.wait(p[c]);
			if (r.status == Status::Good) {
				EXPECT_EQ(winner, -1) << "two winners in round " << round;
				winner = c;
			} else if (is_sense(r, 0x1d00)) {
				losers++;
			}
		}
		ASSERT_NE(winner, -1);
		EXPECT_EQ(losers, kContenders - 1);
		EXPECT_EQ(e.read(7, 1), value_block(1000 + winner));
		e.write(7, value_block(round + 1));
	}
}

TEST_P(SbcData, CompareAndWriteCounterFromManyThreads)
{
	// Threads race to move a counter from v to v + 1, each trying every v in turn: for
	// each v exactly one succeeds (a thread that misses v finds the counter past it).
	Env e(make_bs(GetParam(), 1 << 20));
	e.write(3, value_block(0));
	constexpr int kThreads = 4, kSteps = 60;
	std::vector<std::vector<int>> won(kThreads);
	std::atomic<int> bad{0};
	std::vector<std::thread> th;
	for (int t = 0; t < kThreads; t++)
		th.emplace_back([&, t] {
			for (int v = 0; v < kSteps; v++) {
				auto r = e.t.lb.run(e.s, 0, cdb_caw(3, 1), DataDir::Write,
				                    caw_data(v, v + 1), TaskAttr::Simple,
				                    uint64_t(t) << 32 | uint32_t(v));
				if (r.status == Status::Good)
					won[t].push_back(v);
				else if (!is_sense(r, 0x1d00))
					bad++;
			}
		});
	for (auto &x : th)
		x.join();
	EXPECT_EQ(bad.load(), 0);
	std::vector<int> per_v(kSteps, 0);
	for (auto &w : won)
		for (int v : w)
			per_v[v]++;
	for (int v = 0; v < kSteps; v++)
		EXPECT_EQ(per_v[v], 1) << "step " << v;
	EXPECT_EQ(e.read(3, 1), value_block(kSteps));
}

TEST(SbcCompareAndWrite, QueuedBehindAnotherAndAborted)
{
	// Serialisation is a queue, not a blocked thread: with the first COMPARE AND WRITE's
	// read held, the second issues no I/O. Aborting the second waits for the first.
	Env e(ram_bs(1 << 20), {}, true);
	e.write(0, value_block(0));
	e.gate->close();
	auto *first = e.t.lb.start_async(e.s, 0, cdb_caw(0, 1), DataDir::Write, caw_data(0, 1),
	                                 TaskAttr::Simple, 1);
	ASSERT_TRUE(e.gate->wait_held(1));
	auto *second = e.t.lb.start_async(e.s, 0, cdb_caw(0, 1), DataDir::Write, caw_data(1, 2),
	                                  TaskAttr::Simple, 2);
	auto *third = e.t.lb.start_async(e.s, 0, cdb_caw(0, 1), DataDir::Write, caw_data(2, 3),
	                                 TaskAttr::Simple, 3);
	std::this_thread::sleep_for(milliseconds(20));
	EXPECT_EQ(e.gate->held(), 1u) << "the others wait without I/O";
	EXPECT_EQ(e.t.lb.state(second), CmdState::Executing);
	auto *tm = e.t.lb.tmf_start(e.s, TmfType::AbortTask, 0, 2);
	std::this_thread::sleep_for(milliseconds(20));
	EXPECT_FALSE(e.t.lb.tmf_answered(tm));
	e.gate->open();
	EXPECT_TRUE(is_good(e.t.lb.wait(first)));
	EXPECT_EQ(e.t.lb.tmf_wait(tm), TmfResponse::Complete);
	EXPECT_TRUE(e.t.lb.wait(second).aborted);
	// The third found 1, not 2: the aborted one wrote nothing.
	EXPECT_TRUE(is_sense(e.t.lb.wait(third), 0x1d00));
	EXPECT_EQ(e.read(0, 1), value_block(1));
}

// ===========================================================================================
// ORWRITE
// ===========================================================================================

Bytes cdb_orwrite(uint64_t lba, uint32_t blocks, uint8_t b1 = 0)
{
	Bytes c = cdb_rw(0x8b, lba, blocks);
	c[1] = b1;
	return c;
}

Bytes or_bytes(const Bytes &a, const Bytes &b)
{
	Bytes r(a.size());
	for (size_t i = 0; i < a.size(); i++)
		r[i] = a[i] | b[i];
	return r;
}

TEST_P(SbcData, OrWriteOrsTheDataIn)
{
	// libiscsi OrWrite.Verify: zeros | a5 = a5, then | 5a = ff; here with patterns, over
	// more than one 256 KiB chunk (1024 blocks), at the start and at the end of the LU.
	Env e(make_bs(GetParam(), 4 << 20));
	const uint64_t n = e.nr();
	for (uint64_t lba : {uint64_t(0), n - 1024}) {
		for (uint32_t blocks : {1u, 7u, 1024u}) {
			SCOPED_TRACE(testing::Message() << lba << " " << blocks);
			const Bytes old = pattern(blocks * kBs, 11);
			const Bytes in = pattern(blocks * kBs, 12);
			e.write(lba, old);
			ASSERT_TRUE(is_good(e.out(cdb_orwrite(lba, blocks), in)));
			EXPECT_EQ(e.read(lba, blocks), or_bytes(old, in));
		}
	}
	// Zeros | x = x; x | x = x.
	e.write(0, Bytes(8 * kBs, 0));
	ASSERT_TRUE(is_good(e.out(cdb_orwrite(0, 8), Bytes(8 * kBs, 0xa5))));
	ASSERT_TRUE(is_good(e.out(cdb_orwrite(0, 8), Bytes(8 * kBs, 0x5a))));
	EXPECT_EQ(e.read(0, 8), Bytes(8 * kBs, 0xff));
}

TEST(SbcOrWrite, Fields)
{
	// libiscsi OrWrite.Protect (ORPROTECT), .DpoFua (DPOFUA is set: both taken),
	// .ZeroBlocks, .BeyondEol; MAXIMUM TRANSFER LENGTH; the reserved bits.
	LuConfig cfg;
	cfg.max_xfer_blocks = 64;
	Env e(ram_bs(1 << 20), cfg, false, true);
	const uint64_t n = e.nr();
	for (uint8_t p = 1; p < 8; p++)
		EXPECT_TRUE(is_sense(e.out(cdb_orwrite(0, 1, uint8_t(p << 5)), Bytes(kBs)), 0x2400))
		    << "ORPROTECT " << int(p);
	Bytes c = cdb_orwrite(0, 1);
	c[1] |= 0x04;
	EXPECT_TRUE(is_sense(e.out(c, Bytes(kBs)), 0x2400));
	c = cdb_orwrite(0, 1);
	c[14] = 0x20;
	EXPECT_TRUE(is_sense(e.out(c, Bytes(kBs)), 0x2400));
	c[14] = 0x1f; // GROUP NUMBER: any
	EXPECT_TRUE(is_good(e.out(c, Bytes(kBs))));
	e.faulty->clear();
	for (uint8_t b1 : {0x10, 0x08, 0x18, 0x02})
		EXPECT_TRUE(is_good(e.out(cdb_orwrite(1, 1, b1), Bytes(kBs, 1)))) << int(b1);
	auto ops = e.faulty->ops();
	ASSERT_EQ(ops.size(), 8u) << "a read and a write each";
	EXPECT_EQ(ops[0].op, BsOp::Read);
	EXPECT_EQ(ops[1].op, BsOp::Write);
	EXPECT_FALSE(ops[1].fua);
	EXPECT_TRUE(ops[3].fua) << "FUA";
	EXPECT_TRUE(is_good(e.run(cdb_orwrite(0, 0))));
	EXPECT_TRUE(is_good(e.run(cdb_orwrite(n, 0))));
	EXPECT_TRUE(is_sense(e.run(cdb_orwrite(n + 1, 0)), 0x2100));
	EXPECT_TRUE(is_sense(e.out(cdb_orwrite(n - 1, 2), Bytes(2 * kBs)), 0x2100));
	EXPECT_TRUE(is_sense(e.out(cdb_orwrite(~0ull, 1), Bytes(kBs)), 0x2100));
	EXPECT_TRUE(is_sense(e.out(cdb_orwrite(0, 65), Bytes(65 * kBs)), 0x2400));
	EXPECT_TRUE(is_good(e.out(cdb_orwrite(0, 64), Bytes(64 * kBs))));
}

TEST(SbcOrWrite, WriteProtected)
{
	// libiscsi OrWrite.WriteProtect (ReadOnly): DATA PROTECT, WRITE PROTECTED.
	LuConfig cfg;
	cfg.read_only = true;
	Env e(ram_bs(1 << 20), cfg);
	EXPECT_TRUE(is_sense(e.out(cdb_orwrite(0, 1), Bytes(kBs)), 0x2700, 0x7));
}

TEST(SbcOrWrite, SharesTheReadModifyWriteTurnWithCompareAndWrite)
{
	// An ORWRITE between a COMPARE AND WRITE's read and its write would be lost (or undo
	// it): with the first one's read held, neither of the others issues I/O, and they run
	// in order once it is done.
	Env e(ram_bs(1 << 20), {}, true);
	e.write(0, value_block(0));
	e.gate->close();
	auto *caw = e.t.lb.start_async(e.s, 0, cdb_caw(0, 1), DataDir::Write, caw_data(0, 1),
	                               TaskAttr::Simple, 1);
	ASSERT_TRUE(e.gate->wait_held(1));
	Bytes mask(kBs, 0);
	mask[kBs - 1] = 0x80;
	auto *orw = e.t.lb.start_async(e.s, 0, cdb_orwrite(0, 1), DataDir::Write, mask,
	                               TaskAttr::Simple, 2);
	std::this_thread::sleep_for(milliseconds(20));
	EXPECT_EQ(e.gate->held(), 1u) << "the ORWRITE waits for its turn without I/O";
	e.gate->open();
	EXPECT_TRUE(is_good(e.t.lb.wait(caw)));
	EXPECT_TRUE(is_good(e.t.lb.wait(orw)));
	EXPECT_EQ(e.read(0, 1), or_bytes(value_block(1), mask));
}

// ===========================================================================================
// WRITE ATOMIC
// ===========================================================================================

TEST(SbcWriteAtomic, OneIndivisibleWrite)
{
	// libiscsi WriteAtomic16.Simple and .DpoFua: 1..256 blocks at both ends of the LU;
	// each is one Write request marked atomic, FUA as asked.
	Env e(ram_bs(1 << 20), {}, false, true);
	const uint64_t n = e.nr();
	EXPECT_EQ(e.lu->atomic_max_blocks(), LuConfig{}.max_xfer_blocks);
	for (uint64_t lba : {uint64_t(0), n - 256}) {
		for (uint16_t blocks : {1, 7, 256}) {
			const Bytes d = pattern(blocks * kBs, blocks);
			e.faulty->clear();
			ASSERT_TRUE(is_good(e.out(cdb_write_atomic(lba, blocks), d)));
			auto ops = e.faulty->ops();
			ASSERT_EQ(ops.size(), 1u);
			EXPECT_EQ(ops[0].op, BsOp::Write);
			EXPECT_TRUE(ops[0].atomic);
			EXPECT_FALSE(ops[0].fua);
			EXPECT_EQ(ops[0].length, blocks * kBs);
			EXPECT_EQ(e.read(lba, blocks), d);
		}
	}
	e.faulty->clear();
	for (uint8_t b1 : {0x10, 0x08, 0x18})
		EXPECT_TRUE(is_good(e.out(cdb_write_atomic(0, 1, b1), Bytes(kBs))));
	auto ops = e.faulty->ops();
	ASSERT_EQ(ops.size(), 3u);
	EXPECT_TRUE(ops[1].fua && ops[2].fua);
}

TEST(SbcWriteAtomic, Fields)
{
	// libiscsi WriteAtomic16.ZeroBlocks, .BeyondEol, .VPD; SBC-4 5.48: WRPROTECT, the
	// reserved bits, a non-zero ATOMIC BOUNDARY without atomic boundaries, MAXIMUM
	// ATOMIC TRANSFER LENGTH, and a data-out of exactly the range (no partial write).
	LuConfig cfg;
	cfg.max_xfer_blocks = 64;
	Env e(ram_bs(1 << 20), cfg);
	const uint64_t n = e.nr();
	EXPECT_EQ(e.lu->atomic_max_blocks(), 64u);
	for (uint8_t p = 1; p < 8; p++)
		EXPECT_TRUE(
		    is_sense(e.out(cdb_write_atomic(0, 1, uint8_t(p << 5)), Bytes(kBs)), 0x2400));
	EXPECT_TRUE(is_sense(e.out(cdb_write_atomic(0, 1, 0x02), Bytes(kBs)), 0x2400));
	EXPECT_TRUE(is_sense(e.out(cdb_write_atomic(0, 1, 0, 1), Bytes(kBs)), 0x2400))
	    << "ATOMIC BOUNDARY";
	Bytes c = cdb_write_atomic(0, 1);
	c[14] = 0x40;
	EXPECT_TRUE(is_sense(e.out(c, Bytes(kBs)), 0x2400));
	c[14] = 0x1f;
	EXPECT_TRUE(is_good(e.out(c, Bytes(kBs)))) << "GROUP NUMBER";
	EXPECT_TRUE(is_good(e.run(cdb_write_atomic(0, 0))));
	EXPECT_TRUE(is_good(e.run(cdb_write_atomic(n, 0))));
	EXPECT_TRUE(is_sense(e.run(cdb_write_atomic(n + 1, 0)), 0x2100));
	EXPECT_TRUE(is_sense(e.out(cdb_write_atomic(n - 1, 2), Bytes(2 * kBs)), 0x2100));
	EXPECT_TRUE(is_sense(e.out(cdb_write_atomic(~0ull, 1), Bytes(kBs)), 0x2100));
	EXPECT_TRUE(is_sense(e.out(cdb_write_atomic(0, 65), Bytes(65 * kBs)), 0x2400));
	EXPECT_TRUE(is_good(e.out(cdb_write_atomic(0, 64), Bytes(64 * kBs))));
	// The data-out must be the whole range: a shorter or longer expected length is
	// refused before anything is written.
	e.write(0, Bytes(4 * kBs, 0x11));
	EXPECT_TRUE(is_sense(e.out(cdb_write_atomic(0, 4), Bytes(3 * kBs, 0x22)), 0x0e03));
	EXPECT_TRUE(is_sense(e.out(cdb_write_atomic(0, 4), Bytes(5 * kBs, 0x22)), 0x0e03));
	EXPECT_EQ(e.read(0, 4), Bytes(4 * kBs, 0x11));
	// Write protect (libiscsi WriteAtomic16.WriteProtect).
	LuConfig ro;
	ro.read_only = true;
	Env r(ram_bs(1 << 20), ro);
	EXPECT_TRUE(is_sense(r.out(cdb_write_atomic(0, 1), Bytes(kBs)), 0x2700, 0x7));
}

TEST(SbcWriteAtomic, AlignedWhereTheBackstoreSaysSo)
{
	// rbd: a write is indivisible only within one RADOS object, so the backstore names an
	// atomic unit. The Block Limits page reports it as both ATOMIC ALIGNMENT and MAXIMUM
	// ATOMIC TRANSFER LENGTH (less than the backstore's own maximum): every atomic write
	// it allows stays within one unit. A misaligned LBA is INVALID FIELD IN CDB and
	// writes nothing; an aligned one is one atomic Write.
	Env e(ram_bs(1 << 20), {}, false, true);
	e.faulty->atomic_align_ = 16 * kBs;
	EXPECT_EQ(e.lu->atomic_align_blocks(), 16u);
	EXPECT_EQ(e.lu->atomic_max_blocks(), 16u);
	auto v = e.in(Bytes{0x12, 0x01, 0xb0, 0, 64, 0}, 64);
	ASSERT_TRUE(is_good(v));
	ASSERT_EQ(v.data.size(), 64u);
	EXPECT_EQ(get_be32(&v.data[44]), 16u) << "MAXIMUM ATOMIC TRANSFER LENGTH";
	EXPECT_EQ(get_be32(&v.data[48]), 16u) << "ATOMIC ALIGNMENT";
	EXPECT_EQ(get_be32(&v.data[52]), 0u) << "ATOMIC TRANSFER LENGTH GRANULARITY";

	e.write(0, Bytes(64 * kBs, 0x11));
	e.faulty->clear();
	for (uint64_t lba : {1, 8, 15, 17, 31})
		EXPECT_TRUE(is_sense(e.out(cdb_write_atomic(lba, 1), Bytes(kBs, 0x22)), 0x2400))
		    << "LBA " << lba;
	EXPECT_TRUE(is_sense(e.out(cdb_write_atomic(16, 17), Bytes(17 * kBs, 0x22)), 0x2400))
	    << "longer than the unit";
	EXPECT_TRUE(e.faulty->ops().empty()) << "nothing reached the backstore";
	EXPECT_EQ(e.read(0, 64), Bytes(64 * kBs, 0x11));
	for (auto [lba, blocks] :
	     {std::pair<uint64_t, uint16_t>{0, 16}, {16, 1}, {32, 7}, {48, 16}}) {
		e.faulty->clear();
		const Bytes d = pattern(blocks * kBs, uint8_t(lba + blocks));
		ASSERT_TRUE(is_good(e.out(cdb_write_atomic(lba, blocks), d))) << "LBA " << lba;
		auto ops = e.faulty->ops();
		ASSERT_EQ(ops.size(), 1u);
		EXPECT_TRUE(ops[0].atomic);
		EXPECT_EQ(ops[0].offset, lba * kBs);
		EXPECT_EQ(e.read(lba, blocks), d);
	}
	// The end of the LU, aligned (the 2048 blocks of 1 MiB are a multiple of 16).
	EXPECT_TRUE(is_good(e.out(cdb_write_atomic(e.nr() - 16, 16), Bytes(16 * kBs))));
}

TEST(SbcWriteAtomic, NotOfferedWhereTheBackstoreCannot)
{
	// A file backstore cannot promise that a power loss leaves no torn write: no WRITE
	// ATOMIC (INVALID COMMAND OPERATION CODE), MAXIMUM ATOMIC TRANSFER LENGTH 0.
	Env e(file_bs(1 << 20));
	EXPECT_EQ(e.lu->atomic_max_blocks(), 0u);
	EXPECT_TRUE(is_sense(e.out(cdb_write_atomic(0, 1), Bytes(kBs)), 0x2000));
}

TEST(SbcWriteAtomic, ReadersNeverSeeHalfOfOne)
{
	// Two patterns written in turn with WRITE ATOMIC over 256 blocks (two of the RAM
	// backstore's chunks) while another thread reads the range: every read returns one
	// pattern whole, never a mix.
	Env e(ram_bs(1 << 20));
	const Bytes a(256 * kBs, 0xaa), b(256 * kBs, 0xbb);
	e.write(0, a);
	std::atomic<bool> stop{false};
	std::atomic<int> torn{0}, reads{0};
	std::thread reader([&] {
		while (!stop.load()) {
			auto r = e.in(cdb_rw(0x88, 0, 256), 256 * kBs);
			if (r.status != Status::Good)
				continue;
			reads++;
			if (r.data != a && r.data != b)
				torn++;
		}
	});
	// Until the reader has looked 5000 times (bounded: 100000 writes, or 60 s: a TSan build
	// on a loaded 2-core machine manages a few hundred reads a second).
	const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
	for (int i = 0;
	     reads.load() < 5000 && i < 100000 && std::chrono::steady_clock::now() < deadline;
	     i++) {
		auto r = e.out(cdb_write_atomic(0, 256), i % 2 ? a : b);
		if (!is_good(r)) {
			ADD_FAILURE() << "write " << i;
			break;
		}
	}
	stop = true;
	reader.join();
	// Enough reads raced the writes for "never torn" to mean something.
	EXPECT_GE(reads.load(), 1000);
	EXPECT_EQ(torn.load(), 0);
}

// ===========================================================================================
// Aborts of multi-step commands, and many commands in flight
// ===========================================================================================

// Start cdb with tag 0x77 on a gated LU, wait for its first request to be held, abort it,
// and check that the abort waits for that request, that no further request is issued
// after it, and that the command gets no status of its own.
void abort_midway(Env &e, const Bytes &cdb, Bytes data)
{
	e.gate->close();
	auto *p = e.t.lb.start_async(e.s, 0, cdb, data.empty() ? DataDir::None : DataDir::Write,
	                             std::move(data), TaskAttr::Simple, 0x77);
	ASSERT_TRUE(e.gate->wait_held(1));
	auto *tm = e.t.lb.tmf_start(e.s, TmfType::AbortTask, 0, 0x77);
	std::this_thread::sleep_for(milliseconds(20));
	EXPECT_FALSE(e.t.lb.tmf_answered(tm)) << "the request in flight must end first";
	e.gate->open(/*stay_closed=*/true);
	EXPECT_EQ(e.t.lb.tmf_wait(tm), TmfResponse::Complete);
	auto r = e.t.lb.wait(p);
	EXPECT_TRUE(r.finished);
	EXPECT_TRUE(r.aborted);
	EXPECT_EQ(e.gate->held(), 0u) << "no I/O after the abort";
	e.gate->open();
	EXPECT_EQ(e.lu->task_count(), 0u);
}

TEST(SbcAbort, WriteSameMidway)
{
	Env e(ram_bs(8 << 20), {}, true);
	abort_midway(e, cdb_ws(true, 0, 10000), pattern(kBs, 1));
	// The first 1 MiB request was written, the rest not.
	EXPECT_EQ(e.read(2047, 1), pattern(kBs, 1));
	EXPECT_EQ(e.read(2048, 1), Bytes(kBs, 0));
}

TEST(SbcAbort, VerifyMidway)
{
	Env e(ram_bs(8 << 20), {}, true);
	abort_midway(e, cdb_rw(0x8f, 0, 10000), {});
}

TEST(SbcAbort, WriteAndVerifyMidway)
{
	Env e(ram_bs(8 << 20), {}, true);
	abort_midway(e, cdb_rw(0x8e, 0, 100), pattern(100 * kBs, 2));
}

TEST(SbcAbort, UnmapMidway)
{
	Env e(ram_bs(8 << 20), {}, true);
	auto list = unmap_list({{0, 8}, {100, 8}, {200, 8}});
	abort_midway(e, cdb_unmap(uint16_t(list.size())), list);
}

TEST(SbcAbort, CompareAndWriteBeforeItsWrite)
{
	Env e(ram_bs(1 << 20), {}, true);
	e.write(0, value_block(0));
	abort_midway(e, cdb_caw(0, 1), caw_data(0, 1));
	EXPECT_EQ(e.read(0, 1), value_block(0)) << "aborted after the compare: not written";
	// The LU's COMPARE AND WRITE turn was handed back.
	EXPECT_TRUE(is_good(e.out(cdb_caw(0, 1), caw_data(0, 5))));
}

TEST(SbcAbort, OrWriteMidway)
{
	// 1024 blocks: four chunks; the abort stops it between requests.
	Env e(ram_bs(8 << 20), {}, true);
	abort_midway(e, cdb_orwrite(0, 1024), pattern(1024 * kBs, 3));
	// The turn was handed back.
	EXPECT_TRUE(is_good(e.out(cdb_orwrite(0, 1), Bytes(kBs, 1))));
}

TEST(SbcAbort, LunResetDuringWriteSameOnFile)
{
	// Completions from the io_uring thread racing a LOGICAL UNIT RESET.
	Env e(file_bs(16 << 20));
	std::vector<Loopback::Pending *> p;
	for (int i = 0; i < 8; i++)
		p.push_back(e.t.lb.start_async(e.s, 0, cdb_ws(true, uint64_t(i) * 4000, 4000),
		                               DataDir::Write, pattern(kBs, i), TaskAttr::Simple,
		                               i));
	EXPECT_EQ(e.t.lb.tmf(e.s, TmfType::LunReset, 0), TmfResponse::Complete);
	for (auto *x : p) {
		auto r = e.t.lb.wait(x);
		EXPECT_TRUE(r.finished);
		EXPECT_TRUE(r.aborted || r.status == Status::Good);
	}
	EXPECT_EQ(e.lu->task_count(), 0u);
}

TEST_P(SbcData, ManyCommandsInFlight)
{
	// A mix of every multi-step command, in flight together, on disjoint ranges.
	Env e(make_bs(GetParam(), 16 << 20));
	constexpr int kN = 200;
	std::vector<Loopback::Pending *> p;
	for (int i = 0; i < kN; i++) {
		const uint64_t lba = uint64_t(i) * 128;
		switch (i % 4) {
		case 0:
			p.push_back(e.t.lb.start_async(e.s, 0, cdb_ws(true, lba, 128),
			                               DataDir::Write, pattern(kBs, i),
			                               TaskAttr::Simple, i));
			break;
		case 1:
			p.push_back(e.t.lb.start_async(e.s, 0, cdb_rw(0x8e, lba, 128, 0x02),
			                               DataDir::Write, pattern(128 * kBs, i),
			                               TaskAttr::Simple, i));
			break;
		case 2:
			p.push_back(e.t.lb.start_async(e.s, 0, cdb_caw(lba, 1), DataDir::Write,
			                               caw_data(0, i), TaskAttr::Simple, i));
			break;
		default:
			p.push_back(e.t.lb.start_async(e.s, 0, cdb_rw(0x8f, lba, 128),
			                               DataDir::None, {}, TaskAttr::Simple, i));
			break;
		}
	}
	for (int i = 0; i < kN; i++)
		ASSERT_TRUE(is_good(e.t.lb.wait(p[i]))) << i;
	for (int i = 0; i < kN; i++) {
		const uint64_t lba = uint64_t(i) * 128;
		if (i % 4 == 0) {
			EXPECT_EQ(e.read(lba, 128), repeat(pattern(kBs, i), 128)) << i;
		} else if (i % 4 == 1) {
			EXPECT_EQ(e.read(lba, 128), pattern(128 * kBs, i)) << i;
		} else if (i % 4 == 2) {
			EXPECT_EQ(e.read(lba, 1), value_block(i)) << i;
		}
	}
}

TEST(SbcRobustness, RandomCdbsAreAlwaysAnswered)
{
	// Every block opcode with random bytes in every field, random transport lengths and
	// directions: each command is answered exactly once (GOOD or CHECK CONDITION), nothing
	// crashes, nothing is left in the task set. Small limits make the limit paths common.
	LuConfig cfg;
	cfg.max_xfer_blocks = 16;
	cfg.max_write_same_blocks = 64;
	cfg.max_unmap_blocks = 64;
	cfg.max_unmap_descs = 4;
	Env e(ram_bs(64 * kBs), cfg);
	const uint8_t ops[] = {0x08, 0x0a, 0x28, 0x2a, 0xa8, 0xaa, 0x88, 0x8a,
	                       0x2f, 0xaf, 0x8f, 0x2e, 0xae, 0x8e, 0x41, 0x93,
	                       0x42, 0x89, 0x35, 0x91, 0x34, 0x90, 0x25, 0x9e};
	std::mt19937 rng(12345);
	int good = 0;
	for (int i = 0; i < 20000; i++) {
		const uint8_t op = ops[rng() % sizeof(ops)];
		Bytes c = cdb_rw(op, 0, 0);
		for (auto &b : c)
			b = uint8_t(rng());
		c[0] = op;
		// Mostly small LBAs and lengths, so that commands also get past the range checks.
		if (rng() % 2) {
			for (size_t k = 2; k < c.size() - 1; k++)
				c[k] = rng() % 4 ? 0 : uint8_t(rng() % 4);
			c[1] &= uint8_t(rng());
		}
		if (op == 0x9e)
			c[1] = rng() % 2 ? 0x10 : 0x12;
		const size_t len = rng() % 3 ? (rng() % 5) * kBs : rng() % 4000;
		const DataDir dir = len == 0    ? DataDir::None
		                    : rng() % 2 ? DataDir::Write
		                                : DataDir::Read;
		auto r = e.run(c, dir, Bytes(len, uint8_t(rng())));
		ASSERT_TRUE(r.finished) << i;
		ASSERT_TRUE(r.status == Status::Good || r.status == Status::CheckCondition)
		    << i << " status " << int(r.status);
		good += r.status == Status::Good;
	}
	EXPECT_GT(good, 100);
	EXPECT_EQ(e.lu->task_count(), 0u);
	RecordProperty("good", good);
}

} // namespace
} // namespace ulp::scsi
