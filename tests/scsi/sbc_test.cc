// SPDX-License-Identifier: MIT
// The SBC-3 block command set through the loopback fabric: READ/WRITE (6, 10, 12, 16), READ
// CAPACITY, SYNCHRONIZE CACHE, PRE-FETCH, capacity changes at run time, VERIFY, WRITE AND
// VERIFY and READ DEFECT DATA - every field check and error path, data integrity on the ram
// and the file backstore (io_uring: completions on another thread). WRITE SAME, UNMAP and
// GET LBA STATUS are in sbc_provisioning_test.cc; COMPARE AND WRITE, ORWRITE, WRITE ATOMIC,
// aborts in the middle of multi-step commands and load in sbc_multistep_test.cc.
//
// The expectations follow SBC-3 and libiscsi's conformance suite (iscsi-test-cu, SCSI
// family); the test names of the latter are quoted where a case mirrors one.
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
// READ and WRITE
// ===========================================================================================

INSTANTIATE_TEST_SUITE_P(Backstores, SbcData, ::testing::Values("ram", "file"),
                         [](const auto &i) { return i.param; });

TEST_P(SbcData, ReadWriteEveryCdbSize)
{
	Env e(make_bs(GetParam(), 1 << 20));
	const uint8_t writes[] = {0x0a, 0x2a, 0xaa, 0x8a};
	const uint8_t reads[] = {0x08, 0x28, 0xa8, 0x88};
	for (int w = 0; w < 4; w++) {
		for (int r = 0; r < 4; r++) {
			SCOPED_TRACE(testing::Message() << "write op " << std::hex << int(writes[w])
			                                << " read op " << int(reads[r]));
			const uint64_t lba = 100 + 20 * (4 * w + r);
			Bytes d = pattern(7 * kBs, 4 * w + r);
			ASSERT_TRUE(is_good(e.out(cdb_rw(writes[w], lba, 7), d)));
			auto rr = e.in(cdb_rw(reads[r], lba, 7), d.size());
			ASSERT_TRUE(is_good(rr));
			EXPECT_EQ(rr.data, d);
		}
	}
}

TEST(SbcReadWrite, Read6LengthZeroMeans256Blocks)
{
	Env e(ram_bs(1 << 20));
	Bytes d = pattern(256 * kBs, 9);
	e.write(0, d);
	auto r = e.in(cdb_rw(0x08, 0, 0), d.size());
	ASSERT_TRUE(is_good(r));
	EXPECT_EQ(r.data, d);
	// Its 21-bit LBA: beyond the LU is out of range.
	EXPECT_TRUE(is_sense(e.in(cdb_rw(0x08, e.nr() - 1, 2), 2 * kBs), 0x2100));
}

TEST(SbcReadWrite, DpoFuaAndHintsAccepted)
{
	// libiscsi Read*/Write*.DpoFua (with DPOFUA set in MODE SENSE): DPO, FUA, FUA_NV are
	// accepted; GROUP NUMBER of any value too.
	Env e(ram_bs(1 << 20), {}, false, true);
	for (uint8_t b1 : {0x10, 0x08, 0x18, 0x02, 0x04}) {
		for (uint8_t op : {0x28, 0x2a, 0xa8, 0xaa, 0x88, 0x8a}) {
			const bool wr = op == 0x2a || op == 0xaa || op == 0x8a;
			Bytes c = cdb_rw(op, 1, 1, b1);
			c[c.size() == 10 ? 6 : c.size() == 12 ? 10 : 14] = 0x1f; // GROUP NUMBER
			auto r = wr ? e.out(c, pattern(kBs, op)) : e.in(c, kBs);
			EXPECT_TRUE(is_good(r)) << std::hex << int(op) << " " << int(b1);
		}
	}
	// FUA reaches the backstore as fua on writes.
	e.faulty->clear();
	ASSERT_TRUE(is_good(e.out(cdb_rw(0x2a, 3, 1, 0x08), pattern(kBs, 1))));
	ASSERT_TRUE(is_good(e.out(cdb_rw(0x2a, 3, 1, 0x00), pattern(kBs, 1))));
	auto ops = e.faulty->ops();
	ASSERT_EQ(ops.size(), 2u);
	EXPECT_TRUE(ops[0].fua);
	EXPECT_FALSE(ops[1].fua);
}

TEST(SbcReadWrite, WriteCacheOffMakesEveryWriteFua)
{
	// The wrapper reports a volatile cache, so WCE starts on; the caching mode page (MODE
	// SELECT, spc.cc) turns it off, and then every write is durable before GOOD.
	Env e(ram_bs(1 << 20), {}, false, true);
	ASSERT_TRUE(e.lu->wce());
	e.lu->set_wce(false);
	e.faulty->clear();
	ASSERT_TRUE(is_good(e.out(cdb_rw(0x2a, 3, 1), pattern(kBs, 1))));
	auto ops = e.faulty->ops();
	ASSERT_EQ(ops.size(), 1u);
	EXPECT_TRUE(ops[0].fua);
}

TEST(SbcReadWrite, ProtectFieldsWithoutProtectionInformation)
{
	// libiscsi Read*.ReadProtect / Write*.WriteProtect: any non-zero RDPROTECT/WRPROTECT
	// is INVALID FIELD IN CDB when the LU has no protection information.
	Env e(ram_bs(1 << 20));
	for (uint8_t p = 1; p < 8; p++) {
		for (uint8_t op : {0x28, 0xa8, 0x88}) {
			EXPECT_TRUE(is_sense(e.in(cdb_rw(op, 0, 1, uint8_t(p << 5)), kBs), 0x2400));
		}
		for (uint8_t op : {0x2a, 0xaa, 0x8a}) {
			EXPECT_TRUE(is_sense(
			    e.out(cdb_rw(op, 0, 1, uint8_t(p << 5)), pattern(kBs, p)), 0x2400));
		}
	}
}

TEST(SbcReadWrite, ZeroBlocksAndOutOfRange)
{
	// libiscsi Read*/Write*.ZeroBlocks and .BeyondEol.
	Env e(ram_bs(1 << 20));
	const uint64_t n = e.nr();
	for (uint8_t op : {0x28, 0xa8, 0x88}) {
		EXPECT_TRUE(is_good(e.run(cdb_rw(op, 0, 0))));
		EXPECT_TRUE(is_sense(e.run(cdb_rw(op, n + 1, 0)), 0x2100));
		EXPECT_TRUE(is_sense(e.run(cdb_rw(op, 0x80000000u, 0)), 0x2100));
		EXPECT_TRUE(is_sense(e.in(cdb_rw(op, n, 1), kBs), 0x2100));
		EXPECT_TRUE(is_sense(e.in(cdb_rw(op, n - 1, 2), 2 * kBs), 0x2100));
		EXPECT_TRUE(is_sense(e.in(cdb_rw(op, 0xffffffffu, 1), kBs), 0x2100));
		EXPECT_TRUE(is_good(e.in(cdb_rw(op, n - 1, 1), kBs)));
	}
	// 16-byte LBAs that wrap: 2^63, 2^64 - 1.
	EXPECT_TRUE(is_sense(e.in(cdb_rw(0x88, 1ull << 63, 1), kBs), 0x2100));
	EXPECT_TRUE(is_sense(e.in(cdb_rw(0x88, ~0ull, 2), 2 * kBs), 0x2100));
	EXPECT_TRUE(is_sense(e.out(cdb_rw(0x8a, ~0ull, 1), pattern(kBs, 1)), 0x2100));
}

TEST(SbcReadWrite, MaximumTransferLength)
{
	LuConfig cfg;
	cfg.max_xfer_blocks = 8;
	Env e(ram_bs(1 << 20), cfg);
	EXPECT_TRUE(is_good(e.in(cdb_rw(0x88, 0, 8), 8 * kBs)));
	EXPECT_TRUE(is_sense(e.in(cdb_rw(0x88, 0, 9), 9 * kBs), 0x2400));
	EXPECT_TRUE(is_sense(e.out(cdb_rw(0x8a, 0, 9), pattern(9 * kBs, 1)), 0x2400));
	EXPECT_TRUE(is_sense(e.in(cdb_rw(0x08, 0, 0), 256 * kBs), 0x2400)) << "READ (6) of 256";
}

TEST(SbcReadWrite, BackstoreErrorsMapToSense)
{
	Env e(ram_bs(1 << 20), {}, false, true);
	e.faulty->fail(BsOp::Read, 10 * kBs, 11 * kBs, -EIO);
	EXPECT_TRUE(is_sense(e.in(cdb_rw(0x88, 8, 4), 4 * kBs), 0x1100, 0x3));
	e.faulty->fail(BsOp::Write, 10 * kBs, 11 * kBs, -EIO);
	EXPECT_TRUE(is_sense(e.out(cdb_rw(0x8a, 10, 1), pattern(kBs, 1)), 0x0c00, 0x3));
	e.faulty->fail(BsOp::Write, 10 * kBs, 11 * kBs, -ENOSPC);
	EXPECT_TRUE(is_sense(e.out(cdb_rw(0x8a, 10, 1), pattern(kBs, 1)), 0x2707, 0x7));
	e.faulty->fail(BsOp::Write, 10 * kBs, 11 * kBs, -EINVAL);
	EXPECT_TRUE(is_sense(e.out(cdb_rw(0x8a, 10, 1), pattern(kBs, 1)), 0x3e01, 0x4));
}

// Storage that does not answer in time (-ETIMEDOUT: an rbd OSD past its timeout) is BUSY
// without sense data, for READ, WRITE, the multi-step commands and SYNCHRONIZE CACHE; the
// same LU serves on once it answers, and another LU of the target never noticed. A real
// I/O error stays a MEDIUM ERROR.
TEST(SbcReadWrite, StorageTimeoutIsBusyForThatLuOnly)
{
	Env e(ram_bs(1 << 20), {}, false, true);
	e.t.add(1);
	Nexus *s1 = e.t.login("iqn.init:b", 1);
	EXPECT_TRUE(is_sense(e.run(cdb_tur()), 0x3f0e)) << "REPORTED LUNS DATA HAS CHANGED";
	auto busy = [](const LoopResult &r) {
		return r.finished && r.status == Status::Busy && r.sense.empty();
	};
	e.faulty->fail(BsOp::Read, 10 * kBs, 11 * kBs, -ETIMEDOUT);
	EXPECT_TRUE(busy(e.in(cdb_rw(0x88, 8, 4), 4 * kBs)));
	e.faulty->fail(BsOp::Write, 10 * kBs, 11 * kBs, -ETIMEDOUT);
	EXPECT_TRUE(busy(e.out(cdb_rw(0x8a, 10, 1), pattern(kBs, 1))));
	EXPECT_TRUE(busy(e.out(cdb_ws(true, 0, 64), pattern(kBs, 2)))) << "WRITE SAME";
	EXPECT_TRUE(
	    is_good(e.t.lb.run(s1, 1, cdb_rw(0x8a, 10, 1), DataDir::Write, pattern(kBs, 3))))
	    << "LUN 1 is not concerned";
	e.faulty->fail(BsOp::Flush, 0, 0, -ETIMEDOUT);
	EXPECT_TRUE(busy(e.run(cdb_rw(0x35, 0, 0)))) << "SYNCHRONIZE CACHE";
	e.faulty->fail(BsOp::Write, 10 * kBs, 11 * kBs, -EIO);
	EXPECT_TRUE(is_sense(e.out(cdb_rw(0x8a, 10, 1), pattern(kBs, 1)), 0x0c00, 0x3));
	e.faulty->fail(BsOp::Read, 0, 0, 0);
	e.write(10, pattern(kBs, 4));
	EXPECT_EQ(e.read(10, 1), pattern(kBs, 4)) << "the LU serves on";
}

// A backstore fenced off its storage (-ESHUTDOWN: an rbd client blocklisted when another
// gateway took the image over) answers NOT READY, LOGICAL UNIT NOT ACCESSIBLE, TARGET PORT
// IN UNAVAILABLE STATE (04h/0Ch), which multipath initiators retry through another port,
// for reads, writes and SYNCHRONIZE CACHE; never a MEDIUM ERROR that reaches the
// application for a write that did not land.
TEST(SbcReadWrite, FencedStorageIsPortUnavailable)
{
	Env e(ram_bs(1 << 20), {}, false, true);
	e.faulty->fail(BsOp::Read, 10 * kBs, 11 * kBs, -ESHUTDOWN);
	EXPECT_TRUE(is_sense(e.in(cdb_rw(0x88, 8, 4), 4 * kBs), 0x040c, 0x2));
	e.faulty->fail(BsOp::Write, 10 * kBs, 11 * kBs, -ESHUTDOWN);
	EXPECT_TRUE(is_sense(e.out(cdb_rw(0x8a, 10, 1), pattern(kBs, 1)), 0x040c, 0x2));
	e.faulty->fail(BsOp::Flush, 0, 0, -ESHUTDOWN);
	EXPECT_TRUE(is_sense(e.run(cdb_rw(0x35, 0, 0)), 0x040c, 0x2)) << "SYNCHRONIZE CACHE";
}

// A write refused because the backstore's lock is elsewhere (-ENOLCK: an rbd image's
// exclusive lock let go by a drain under a command already past the port's ALUA check)
// answers NOT READY, ASYMMETRIC ACCESS STATE TRANSITION (04h/0Ah), which initiators retry,
// never DATA PROTECT: the medium is not write protected, the write only went to the
// gateway that stopped owning it.
TEST(SbcReadWrite, LockElsewhereIsPortTransitioning)
{
	Env e(ram_bs(1 << 20), {}, false, true);
	e.faulty->fail(BsOp::Write, 10 * kBs, 11 * kBs, -ENOLCK);
	EXPECT_TRUE(is_sense(e.out(cdb_rw(0x8a, 10, 1), pattern(kBs, 1)), 0x040a, 0x2));
	e.faulty->fail(BsOp::Write, 0, 0, 0);
	e.write(10, pattern(kBs, 5));
	EXPECT_EQ(e.read(10, 1), pattern(kBs, 5)) << "the LU serves on";
}

// ===========================================================================================
// READ CAPACITY, SYNCHRONIZE CACHE, PRE-FETCH
// ===========================================================================================

TEST(SbcCapacity, ReadCapacity10)
{
	Env e(ram_bs(1 << 20));
	Bytes c(10, 0);
	c[0] = 0x25;
	auto r = e.in(c, 8);
	ASSERT_TRUE(is_good(r));
	ASSERT_EQ(r.data.size(), 8u);
	EXPECT_EQ(get_be32(&r.data[0]), e.nr() - 1);
	EXPECT_EQ(get_be32(&r.data[4]), kBs);
	c[8] = 1; // PMI
	EXPECT_TRUE(is_sense(e.in(c, 8), 0x2400));
	c[8] = 0;
	c[5] = 1; // LBA
	EXPECT_TRUE(is_sense(e.in(c, 8), 0x2400));
}

TEST(SbcCapacity, ReadCapacity16Fields)
{
	for (bool thin : {true, false}) {
		SCOPED_TRACE(thin ? "thin" : "fully provisioned");
		LuConfig cfg;
		cfg.thin = thin;
		cfg.block_size = 4096;
		Env e(ram_bs(8 << 20, 4096), cfg);
		auto r = e.in(cdb_rc16(32), 32);
		ASSERT_TRUE(is_good(r));
		ASSERT_EQ(r.data.size(), 32u);
		EXPECT_EQ(get_be64(&r.data[0]), 2047u);
		EXPECT_EQ(get_be32(&r.data[8]), 4096u);
		EXPECT_EQ(r.data[12], 0) << "no protection information";
		EXPECT_EQ(r.data[13], 0) << "physical block = logical block";
		EXPECT_EQ(r.data[14] & 0x80, thin ? 0x80 : 0) << "LBPME";
		EXPECT_EQ(r.data[14] & 0x40, thin ? 0x40 : 0) << "LBPRZ";
		EXPECT_EQ(get_be16(&r.data[14]) & 0x3fff, 0) << "lowest aligned LBA";
	}
}

TEST(SbcCapacity, PhysicalBlockSize)
{
	// SBC-3 5.16: 512-byte logical blocks on 4096-byte physical ones ("512e") report
	// LOGICAL BLOCKS PER PHYSICAL BLOCK EXPONENT 3, the lowest aligned LBA 0; LBPME and
	// LBPRZ are unaffected.
	LuConfig cfg;
	cfg.physical_block_size = 4096;
	Env e(ram_bs(1 << 20), cfg);
	EXPECT_EQ(e.lu->lbppb_exponent(), 3);
	EXPECT_EQ(e.lu->lbppb(), 8u);
	auto r = e.in(cdb_rc16(32), 32);
	ASSERT_TRUE(is_good(r));
	EXPECT_EQ(get_be32(&r.data[8]), 512u) << "the logical block";
	EXPECT_EQ(r.data[13], 3);
	EXPECT_EQ(get_be16(&r.data[14]) & 0x3fff, 0);
	EXPECT_EQ(r.data[14] & 0xc0, 0xc0);
	// Nothing is refused for being unaligned to it: libiscsi WriteSame*.UnmapUnaligned
	// (i blocks from LBA 8 - i) and plain writes inside one physical block.
	for (uint32_t i = 1; i < 8; i++) {
		EXPECT_TRUE(is_good(e.out(cdb_ws(false, i, 8 - i, true), Bytes(kBs, 0xa6))));
		EXPECT_TRUE(is_good(e.out(cdb_ws(true, i, 8 - i, true), Bytes(kBs, 0xa6))));
	}
	e.write(3, pattern(2 * kBs, 3));
	EXPECT_EQ(e.read(3, 2), pattern(2 * kBs, 3));
	// The configurations that cannot be reported.
	for (uint32_t bad : {1024u + 512u, 256u, 3u * 4096u, 512u << 16}) {
		LuConfig c;
		c.physical_block_size = bad;
		EXPECT_NE(lu_config_check(c), nullptr) << bad;
	}
	for (uint32_t good : {0u, 512u, 1024u, 4096u, 512u << 15}) {
		LuConfig c;
		c.physical_block_size = good;
		EXPECT_EQ(lu_config_check(c), nullptr) << good;
	}
}

TEST(SbcCapacity, ReadCapacity16AllocationLength)
{
	// libiscsi ReadCapacity16.Alloclen: 0..15 are no error; the data is cut.
	Env e(ram_bs(1 << 20));
	for (uint32_t a = 0; a < 40; a++) {
		auto r = e.in(cdb_rc16(a), a);
		ASSERT_TRUE(is_good(r)) << a;
		EXPECT_EQ(r.data.size(), std::min<uint32_t>(a, 32)) << a;
	}
	auto big = e.in(cdb_rc16(64), 64);
	EXPECT_EQ(big.resid, Residual::Underflow);
	EXPECT_EQ(big.resid_count, 32u);
}

TEST(SbcCapacity, SynchronizeCache)
{
	Env e(file_bs(1 << 20), {}, false, true);
	ASSERT_TRUE(e.lu->wce());
	for (uint8_t op : {0x35, 0x91}) {
		e.faulty->clear();
		EXPECT_TRUE(is_good(e.run(cdb_rw(op, 0, 0))));
		EXPECT_TRUE(is_good(e.run(cdb_rw(op, 10, 20, 0x02)))) << "IMMED";
		EXPECT_TRUE(is_good(e.run(cdb_rw(op, e.nr() - 1, 1))));
		EXPECT_TRUE(is_sense(e.run(cdb_rw(op, e.nr(), 1)), 0x2100));
		EXPECT_TRUE(is_sense(e.run(cdb_rw(op, e.nr() + 1, 0)), 0x2100));
		auto ops = e.faulty->ops();
		ASSERT_EQ(ops.size(), 3u);
		for (auto &o : ops)
			EXPECT_EQ(o.op, BsOp::Flush);
	}
	EXPECT_TRUE(is_sense(e.run(cdb_rw(0x91, ~0ull, 2)), 0x2100));
	// Without a write cache there is nothing to flush.
	e.lu->set_wce(false);
	e.faulty->clear();
	EXPECT_TRUE(is_good(e.run(cdb_rw(0x35, 0, 0))));
	EXPECT_TRUE(e.faulty->ops().empty());
	// A failing flush is a write error.
	e.lu->set_wce(true);
	e.faulty->fail(BsOp::Flush, 0, 1, -EIO);
	EXPECT_TRUE(is_sense(e.run(cdb_rw(0x35, 0, 0)), 0x0c00));
}

TEST(SbcCapacity, PreFetch)
{
	// libiscsi Prefetch10/16: Simple, Flags (IMMED, GROUP), ZeroBlocks, BeyondEol.
	Env e(ram_bs(1 << 20));
	const uint64_t n = e.nr();
	for (uint8_t op : {OP_PRE_FETCH_10, OP_PRE_FETCH_16}) {
		for (uint32_t i : {1u, 17u, 256u}) {
			EXPECT_TRUE(is_good(e.run(cdb_rw(op, 0, i))));
			EXPECT_TRUE(is_good(e.run(cdb_rw(op, n - i, i))));
		}
		Bytes f = cdb_rw(op, 0, 1, 0x02);
		f[op == OP_PRE_FETCH_10 ? 6 : 14] = 3;
		EXPECT_TRUE(is_good(e.run(f)));
		EXPECT_TRUE(is_good(e.run(cdb_rw(op, 0, 0))));
		EXPECT_TRUE(is_sense(e.run(cdb_rw(op, n + 1, 0)), 0x2100));
		EXPECT_TRUE(is_sense(e.run(cdb_rw(op, 0x80000000u, 1)), 0x2100));
		EXPECT_TRUE(is_sense(e.run(cdb_rw(op, n - 1, 2)), 0x2100));
	}
}

// ===========================================================================================
// Capacity at run time (LogicalUnit::set_capacity, rescan_capacity): CAPACITY DATA HAS
// CHANGED on every nexus, then the new size
// ===========================================================================================

Bytes cdb_rc10()
{
	Bytes c(10, 0);
	c[0] = 0x25;
	return c;
}

// READ CAPACITY (16)'s number of blocks, or 0 when it did not complete GOOD.
uint64_t rc16_blocks(Env &e, Nexus *on)
{
	auto r = e.run(cdb_rc16(32), DataDir::Read, Bytes(32), on);
	if (!is_good(r) || r.data.size() < 12)
		return 0;
	return get_be64(&r.data[0]) + 1;
}

constexpr uint16_t kCapacityChanged = 0x2a09;
constexpr int kUnitAttention = 0x6;

std::unique_ptr<Backstore> null_bs(uint64_t size)
{
	BackstoreConfig c;
	c.kind = "null";
	c.size = size;
	int err = 0;
	std::string why;
	auto bs = make_backstore(c, &err, &why);
	EXPECT_TRUE(bs) << why;
	return bs;
}

class SbcResize : public ::testing::TestWithParam<std::string>
{
protected:
	std::unique_ptr<Backstore> bs(uint64_t size)
	{
		return GetParam() == "null" ? null_bs(size) : make_bs(GetParam(), size);
	}
};

INSTANTIATE_TEST_SUITE_P(Backstores, SbcResize, ::testing::Values("null", "ram", "file"),
                         [](const auto &i) { return i.param; });

// Every nexus' next command gets UNIT ATTENTION, CAPACITY DATA HAS CHANGED, once; READ
// CAPACITY (10, 16) then report the new size, and the LBAs past the old end work.
TEST_P(SbcResize, GrowTellsEveryNexusOnceThenReportsTheNewSize)
{
	Env e(bs(1 << 20));
	Nexus *b = e.t.login("iqn.init:b");
	Nexus *c = e.t.login("iqn.init:c");
	ASSERT_EQ(e.nr(), 2048u);
	std::string why;
	ASSERT_EQ(e.lu->set_capacity(4 << 20, &why), 0) << why;
	EXPECT_EQ(e.nr(), 8192u);
	for (Nexus *on : {e.s, b, c}) {
		// The first command of any kind (here READ (16) past the old end, and READ
		// CAPACITY) reports the condition instead of executing.
		const Bytes first = on == b ? cdb_rc16(32) : cdb_rw(0x88, 6000, 1);
		const DataDir dir = DataDir::Read;
		EXPECT_TRUE(is_sense(e.run(first, dir, Bytes(on == b ? 32 : kBs), on),
		                     kCapacityChanged, kUnitAttention));
		auto r = e.run(cdb_rc10(), DataDir::Read, Bytes(8), on);
		ASSERT_TRUE(is_good(r)) << "reported once";
		EXPECT_EQ(get_be32(&r.data[0]), 8191u);
		EXPECT_EQ(rc16_blocks(e, on), 8192u);
	}
	if (GetParam() != "null") {
		Bytes d = pattern(4 * kBs, 77);
		e.write(8188, d); // the last four blocks, all past the old end
		EXPECT_EQ(e.read(8188, 4), d);
		EXPECT_EQ(e.read(2048, 1), Bytes(kBs, 0)) << "a grown range reads zeros";
	} else {
		EXPECT_EQ(e.read(8191, 1).size(), kBs);
	}
	EXPECT_TRUE(is_sense(e.in(cdb_rw(0x88, 8192, 1), kBs), 0x2100));
}

// After a shrink, READ past the new end is LBA OUT OF RANGE; what lies below is untouched.
TEST_P(SbcResize, ShrinkRefusesPastTheNewEnd)
{
	Env e(bs(1 << 20));
	Bytes d = pattern(2 * kBs, 5);
	if (GetParam() != "null")
		e.write(1022, d); // straddles the new end
	ASSERT_EQ(e.lu->set_capacity(512 << 10, nullptr), 0);
	EXPECT_TRUE(is_sense(e.run(cdb_tur()), kCapacityChanged, kUnitAttention));
	EXPECT_EQ(rc16_blocks(e, e.s), 1024u);
	EXPECT_TRUE(is_sense(e.in(cdb_rw(0x88, 1024, 1), kBs), 0x2100));
	EXPECT_TRUE(is_sense(e.in(cdb_rw(0x88, 1023, 2), 2 * kBs), 0x2100));
	EXPECT_TRUE(is_sense(e.out(cdb_rw(0x8a, 1500, 1), pattern(kBs, 1)), 0x2100));
	if (GetParam() != "null") {
		EXPECT_EQ(e.read(1022, 1), Bytes(d.begin(), d.begin() + kBs));
	}
}

// Sizes that are not whole blocks, or none, are refused and raise nothing; the current
// size changes nothing and raises nothing.
TEST_P(SbcResize, RefusesOddSizesAndIgnoresTheSameSize)
{
	Env e(bs(1 << 20));
	std::string why;
	EXPECT_EQ(e.lu->set_capacity(0, &why), -EINVAL);
	EXPECT_NE(why.find("multiple"), std::string::npos) << why;
	EXPECT_EQ(e.lu->set_capacity((1 << 20) + 100, &why), -EINVAL);
	EXPECT_EQ(e.lu->set_capacity(1 << 20, &why), 0);
	EXPECT_EQ(e.nr(), 2048u);
	EXPECT_TRUE(is_good(e.run(cdb_tur()))) << "no unit attention";
}

// A command checked against the old size and held on its way to the backstore meets the
// shrink there: LBA OUT OF RANGE, not a crash or a read of freed memory.
TEST(SbcResizeInFlight, ShrinkUnderAHeldReadFailsItOutOfRange)
{
	Env e(ram_bs(1 << 20), {}, true);
	e.write(1500, pattern(kBs, 3));
	e.write(10, pattern(kBs, 4));
	e.gate->close();
	auto *past = e.t.lb.start_async(e.s, 0, cdb_rw(0x88, 1500, 1), DataDir::Read, Bytes(kBs),
	                                TaskAttr::Simple, 1);
	auto *below = e.t.lb.start_async(e.s, 0, cdb_rw(0x88, 10, 1), DataDir::Read, Bytes(kBs),
	                                 TaskAttr::Simple, 2);
	ASSERT_TRUE(e.gate->wait_held(2));
	ASSERT_EQ(e.lu->set_capacity(512 << 10, nullptr), 0);
	e.gate->open();
	EXPECT_TRUE(is_sense(e.t.lb.wait(past), 0x2100));
	auto r = e.t.lb.wait(below);
	ASSERT_TRUE(is_good(r));
	EXPECT_EQ(r.data, pattern(kBs, 4));
	EXPECT_TRUE(is_sense(e.run(cdb_tur()), kCapacityChanged, kUnitAttention));
}

// I/O from two nexuses on other threads while the capacity changes back and forth: every
// command ends GOOD, with the unit attention, or (past the small end) LBA OUT OF RANGE;
// data below the small end is never lost. On the file backstore completions arrive on
// its io_uring thread (TSan: the size is read there and written here).
TEST_P(SbcData, ResizeWhileIoRuns)
{
	constexpr uint64_t kSmall = 512 << 10, kBig = 2 << 20;
	Env e(make_bs(GetParam(), kBig));
	Nexus *b = e.t.login("iqn.init:b");
	std::atomic<bool> stop{false};
	std::atomic<uint64_t> bad{0}, ua{0}, oor{0}, good{0};
	auto worker = [&](Nexus *on, unsigned id) {
		std::mt19937_64 rng(id);
		for (int i = 0; i < 200; i++) {
			// Groups of 8 blocks, even ones to worker 0 and odd ones to worker 1: no
			// two commands touch the same bytes at once (SBC leaves that undefined, and
			// TSan would rightly call it a race), in range or past the small end.
			const uint64_t lba = ((rng() % (kBig / kBs / 16)) * 2 + id) * 8;
			const bool low = (lba + 8) * kBs <= kSmall;
			const Bytes d = pattern(8 * kBs, static_cast<uint32_t>(rng()));
			auto w = e.run(cdb_rw(0x8a, lba, 8), DataDir::Write, d, on);
			auto r = e.run(cdb_rw(0x88, lba, 8), DataDir::Read, Bytes(8 * kBs), on);
			for (const LoopResult *x : {&w, &r}) {
				if (is_good(*x))
					good++;
				else if (is_sense(*x, kCapacityChanged, kUnitAttention))
					ua++;
				else if (!low && is_sense(*x, 0x2100))
					oor++;
				else
					bad++;
			}
			// Below the small end nothing is ever dropped.
			if (low && is_good(w) && is_good(r) && r.data != d)
				bad++;
		}
	};
	std::thread resizer([&] {
		bool grow = false;
		while (!stop.load()) {
			if (e.lu->set_capacity(grow ? kBig : kSmall, nullptr) != 0)
				bad++;
			grow = !grow;
			std::this_thread::sleep_for(std::chrono::microseconds(200));
		}
	});
	std::thread t1(worker, e.s, 0), t2(worker, b, 1);
	t1.join();
	t2.join();
	stop = true;
	resizer.join();
	EXPECT_EQ(bad.load(), 0u);
	EXPECT_GT(good.load(), 0u);
	std::printf("%s: %llu good, %llu unit attentions, %llu out of range\n", GetParam().c_str(),
	            static_cast<unsigned long long>(good.load()),
	            static_cast<unsigned long long>(ua.load()),
	            static_cast<unsigned long long>(oor.load()));
}

// rescan_capacity follows the file: an administrator's `truncate -s` grows (or shrinks)
// the LU, in whole blocks; no change raises nothing.
TEST(SbcResizeRescan, FollowsTheFile)
{
	const std::string path = "/var/tmp/ulp-sbc-rescan-" + std::to_string(getpid());
	BackstoreConfig c;
	c.kind = "file";
	c.path = path;
	c.size = 1 << 20;
	int err = 0;
	std::string why;
	auto bsp = make_backstore(c, &err, &why);
	ASSERT_TRUE(bsp) << why;
	Env e(std::move(bsp));
	uint64_t was = 0, now = 0;
	ASSERT_EQ(e.lu->rescan_capacity(&was, &now, &why), 0) << why;
	EXPECT_EQ(was, 2048u);
	EXPECT_EQ(now, 2048u);
	EXPECT_TRUE(is_good(e.run(cdb_tur()))) << "no change, no unit attention";

	ASSERT_EQ(truncate(path.c_str(), (3 << 20) + 100), 0); // not a whole block more
	ASSERT_EQ(e.lu->rescan_capacity(&was, &now, &why), 0) << why;
	EXPECT_EQ(was, 2048u);
	EXPECT_EQ(now, 6144u);
	EXPECT_TRUE(is_sense(e.run(cdb_tur()), kCapacityChanged, kUnitAttention));
	EXPECT_EQ(rc16_blocks(e, e.s), 6144u);

	ASSERT_EQ(truncate(path.c_str(), 256 << 10), 0);
	ASSERT_EQ(e.lu->rescan_capacity(&was, &now, &why), 0) << why;
	EXPECT_EQ(now, 512u);
	EXPECT_TRUE(is_sense(e.run(cdb_tur()), kCapacityChanged, kUnitAttention));
	EXPECT_TRUE(is_sense(e.in(cdb_rw(0x88, 600, 1), kBs), 0x2100));

	ASSERT_EQ(truncate(path.c_str(), 100), 0); // less than a block: refused, left alone
	EXPECT_EQ(e.lu->rescan_capacity(&was, &now, &why), -EINVAL);
	EXPECT_NE(why.find("less than one block"), std::string::npos) << why;
	EXPECT_EQ(e.nr(), 512u);
	unlink(path.c_str());
}

// ===========================================================================================
// VERIFY and WRITE AND VERIFY
// ===========================================================================================

TEST_P(SbcData, VerifyCompares)
{
	// libiscsi Verify*.Simple, .Mismatch, .MismatchNoCmp, .Flags, .Dpo.
	Env e(make_bs(GetParam(), 1 << 20));
	Bytes d = pattern(700 * kBs, 3); // more than one 256 KiB chunk
	e.write(10, d);
	for (uint8_t op : {0x2f, 0xaf, 0x8f}) {
		SCOPED_TRACE(testing::Message() << "op " << std::hex << int(op));
		EXPECT_TRUE(is_good(e.run(cdb_rw(op, 10, 700)))) << "BYTCHK 00b";
		EXPECT_TRUE(is_good(e.run(cdb_rw(op, 10, 700, 0x10)))) << "DPO";
		EXPECT_TRUE(is_good(e.out(cdb_rw(op, 10, 700, 0x02), d))) << "BYTCHK 01b";
		EXPECT_TRUE(is_good(e.out(cdb_rw(op, 10, 700, 0x12), d))) << "DPO + BYTCHK";
		for (size_t at :
		     {size_t(0), size_t(511), size_t(512), size_t(300000), d.size() - 1}) {
			Bytes bad = d;
			bad[at] ^= 'X';
			auto r = e.out(cdb_rw(op, 10, 700, 0x02), bad);
			ASSERT_TRUE(is_sense(r, 0x1d00, 0xe)) << at;
			EXPECT_TRUE(info_valid(r));
			EXPECT_EQ(info(r), at) << "INFORMATION: offset of the first miscompare";
			EXPECT_TRUE(is_good(e.run(cdb_rw(op, 10, 700)))) << "no compare: GOOD";
		}
	}
}

TEST_P(SbcData, VerifyOneBlockAgainstTheRange)
{
	// BYTCHK 11b: the single data-out block against every block of the range.
	Env e(make_bs(GetParam(), 1 << 20));
	Bytes blk = pattern(kBs, 5);
	e.write(40, repeat(blk, 600));
	EXPECT_TRUE(is_good(e.out(cdb_rw(0x8f, 40, 600, 0x06), blk)));
	Bytes other = blk;
	other[7] ^= 1;
	auto r = e.out(cdb_rw(0x8f, 40, 600, 0x06), other);
	ASSERT_TRUE(is_sense(r, 0x1d00, 0xe));
	EXPECT_EQ(info(r), 7u);
	// A block deep in the range that differs: its offset in the range.
	e.write(40 + 555, pattern(kBs, 6));
	r = e.out(cdb_rw(0x2f, 40, 600, 0x06), blk);
	ASSERT_TRUE(is_sense(r, 0x1d00, 0xe));
	const Bytes b555 = pattern(kBs, 6);
	size_t first = 0;
	while (b555[first] == blk[first])
		first++;
	EXPECT_EQ(info(r), 555u * kBs + first);
}

TEST(SbcVerify, FieldsAndRange)
{
	// libiscsi Verify*.VerifyProtect, .ZeroBlocks, .BeyondEol.
	LuConfig cfg;
	cfg.max_xfer_blocks = 64;
	Env e(ram_bs(1 << 20), cfg);
	const uint64_t n = e.nr();
	for (uint8_t op : {0x2f, 0xaf, 0x8f}) {
		for (uint8_t p = 1; p < 8; p++)
			EXPECT_TRUE(is_sense(
			    e.out(cdb_rw(op, 0, 1, uint8_t(p << 5 | 0x02)), Bytes(kBs)), 0x2400));
		EXPECT_TRUE(is_sense(e.run(cdb_rw(op, 0, 1, 0x04)), 0x2400)) << "BYTCHK 10b";
		EXPECT_TRUE(is_good(e.run(cdb_rw(op, 0, 0, 0x02)))) << "0 blocks, no data";
		EXPECT_TRUE(is_sense(e.run(cdb_rw(op, n + 1, 0, 0x02)), 0x2100));
		EXPECT_TRUE(is_sense(e.run(cdb_rw(op, 0x80000000u, 0, 0x02)), 0x2100));
		EXPECT_TRUE(is_sense(e.out(cdb_rw(op, n - 1, 2, 0x02), Bytes(2 * kBs)), 0x2100));
		EXPECT_TRUE(is_sense(e.run(cdb_rw(op, n, 1)), 0x2100));
		// MAXIMUM TRANSFER LENGTH bounds the data-out, not the medium verify.
		EXPECT_TRUE(is_sense(e.out(cdb_rw(op, 0, 65, 0x02), Bytes(65 * kBs)), 0x2400));
		EXPECT_TRUE(is_good(e.run(cdb_rw(op, 0, 1000))));
		EXPECT_TRUE(is_good(e.out(cdb_rw(op, 0, 1000, 0x06), Bytes(kBs))));
		// BYTCHK 01b compares one block per block: a shorter data-out compares fewer
		// whole blocks (overflow residual); 11b's single block must be exact.
		auto shorter = e.out(cdb_rw(op, 0, 2, 0x02), Bytes(kBs));
		EXPECT_TRUE(is_good(shorter));
		EXPECT_EQ(shorter.resid, Residual::Overflow);
		EXPECT_EQ(shorter.resid_count, kBs);
		EXPECT_TRUE(is_sense(e.out(cdb_rw(op, 0, 2, 0x02), Bytes(kBs / 2)), 0x0e03))
		    << "a length that ends inside a block";
		EXPECT_TRUE(is_sense(e.out(cdb_rw(op, 0, 2, 0x06), Bytes(2 * kBs)), 0x0e03));
	}
	EXPECT_TRUE(is_sense(e.run(cdb_rw(0x8f, ~0ull, 1)), 0x2100));
}

TEST(SbcVerify, MediumError)
{
	Env e(ram_bs(1 << 20), {}, false, true);
	e.faulty->fail(BsOp::Read, 900 * kBs, 901 * kBs, -EIO);
	EXPECT_TRUE(is_good(e.run(cdb_rw(0x8f, 0, 900))));
	EXPECT_TRUE(is_sense(e.run(cdb_rw(0x8f, 0, 901)), 0x1100, 0x3));
	EXPECT_TRUE(is_sense(e.out(cdb_rw(0x2f, 800, 200, 0x02), Bytes(200 * kBs)), 0x1100, 0x3));
}

TEST_P(SbcData, WriteAndVerify)
{
	// libiscsi WriteVerify*.Simple, .Flags, .Dpo.
	Env e(make_bs(GetParam(), 1 << 20), {}, false, true);
	uint32_t seed = 0;
	for (uint8_t op : {0x2e, 0xae, 0x8e}) {
		for (uint8_t b1 : {0x00, 0x02, 0x10, 0x12}) {
			SCOPED_TRACE(testing::Message() << std::hex << int(op) << " " << int(b1));
			Bytes d = pattern(600 * kBs, ++seed);
			e.faulty->clear();
			ASSERT_TRUE(is_good(e.out(cdb_rw(op, 5, 600, b1), d)));
			EXPECT_EQ(e.read(5, 600), d);
			auto ops = e.faulty->ops();
			ASSERT_GE(ops.size(), 2u);
			EXPECT_EQ(ops[0].op, BsOp::Write);
			EXPECT_TRUE(ops[0].fua) << "written durably before it is verified";
			EXPECT_EQ(ops[1].op, BsOp::Read);
		}
	}
}

TEST(SbcWriteVerify, FieldsErrorsAndProtection)
{
	// libiscsi WriteVerify*.ZeroBlocks, .BeyondEol, .WriteProtect.
	Env e(ram_bs(1 << 20), {}, false, true);
	const uint64_t n = e.nr();
	for (uint8_t op : {0x2e, 0xae, 0x8e}) {
		EXPECT_TRUE(is_good(e.run(cdb_rw(op, 0, 0))));
		EXPECT_TRUE(is_sense(e.run(cdb_rw(op, n + 1, 0)), 0x2100));
		EXPECT_TRUE(is_sense(e.out(cdb_rw(op, n - 1, 2), Bytes(2 * kBs)), 0x2100));
		for (uint8_t p = 1; p < 8; p++)
			EXPECT_TRUE(
			    is_sense(e.out(cdb_rw(op, 0, 1, uint8_t(p << 5)), Bytes(kBs)), 0x2400));
		EXPECT_TRUE(is_sense(e.out(cdb_rw(op, 0, 1, 0x04), Bytes(kBs)), 0x2400))
		    << "BYTCHK 10b/11b";
		// libiscsi WriteVerify*Residuals: a shorter data-out writes and verifies the
		// whole blocks it carries.
		auto shorter = e.out(cdb_rw(op, 0, 2), Bytes(kBs));
		EXPECT_TRUE(is_good(shorter));
		EXPECT_EQ(shorter.resid, Residual::Overflow);
		EXPECT_TRUE(is_sense(e.out(cdb_rw(op, 0, 2), Bytes(100)), 0x0e03));
	}
	e.faulty->fail(BsOp::Write, 0, kBs, -EIO);
	EXPECT_TRUE(is_sense(e.out(cdb_rw(0x2e, 0, 1), Bytes(kBs)), 0x0c00, 0x3));
	e.faulty->fail(BsOp::Read, 0, kBs, -EIO);
	EXPECT_TRUE(is_sense(e.out(cdb_rw(0x2e, 0, 1), Bytes(kBs)), 0x1100, 0x3))
	    << "written, but it cannot be read back";

	LuConfig ro;
	ro.read_only = true;
	Env p(ram_bs(1 << 20), ro);
	EXPECT_TRUE(is_sense(p.out(cdb_rw(0x8e, 0, 1), Bytes(kBs)), 0x2700, 0x7));
}

// ===========================================================================================
// READ DEFECT DATA
// ===========================================================================================

Bytes cdb_rdd10(uint8_t req, uint16_t alloc)
{
	Bytes c(10, 0);
	c[0] = 0x37;
	c[2] = req;
	put_be16(&c[7], alloc);
	return c;
}

Bytes cdb_rdd12(uint8_t req, uint32_t index, uint32_t alloc)
{
	Bytes c(12, 0);
	c[0] = 0xb7;
	c[1] = req;
	put_be32(&c[2], index);
	put_be32(&c[6], alloc);
	return c;
}

TEST(SbcReadDefectData, EmptyListsInTheRequestedFormat)
{
	// libiscsi ReadDefectData10/12.Simple: GOOD. SBC-3 5.17/5.18: the lists asked for
	// (PLISTV, GLISTV) in the format asked for, both empty.
	Env e(ram_bs(1 << 20));
	for (uint8_t req : {0x00, 0x10, 0x08, 0x18, 0x1d, 0x0b, 0x14, 0x05}) {
		SCOPED_TRACE(testing::Message() << std::hex << int(req));
		auto r = e.in(cdb_rdd10(req, 32), 32);
		ASSERT_TRUE(is_good(r));
		EXPECT_EQ(r.data, (Bytes{0, req, 0, 0}));
		EXPECT_EQ(r.resid, Residual::Underflow);
		r = e.in(cdb_rdd12(req, 7, 32), 32);
		ASSERT_TRUE(is_good(r));
		EXPECT_EQ(r.data, (Bytes{0, req, 0, 0, 0, 0, 0, 0}));
	}
	// Cut to the allocation length, 0 included.
	auto r = e.in(cdb_rdd12(0x18, 0, 2), 2);
	ASSERT_TRUE(is_good(r));
	EXPECT_EQ(r.data, (Bytes{0, 0x18}));
	EXPECT_TRUE(is_good(e.run(cdb_rdd10(0x18, 0))));
}

TEST(SbcReadDefectData, ReservedFields)
{
	Env e(ram_bs(1 << 20));
	auto field = [](const LoopResult &r) {
		return r.sense.size() < 18
		           ? 0u
		           : uint32_t(r.sense[15]) << 16 | r.sense[16] << 8 | r.sense[17];
	};
	// Format 111b is reserved.
	auto r = e.in(cdb_rdd10(0x07, 32), 32);
	ASSERT_TRUE(is_sense(r, 0x2400));
	EXPECT_EQ(field(r), 0xca0002u);
	ASSERT_TRUE(is_sense(e.in(cdb_rdd12(0x1f, 0, 32), 32), 0x2400));
	// Reserved bits and bytes.
	Bytes c = cdb_rdd10(0, 32);
	c[2] |= 0x20;
	EXPECT_TRUE(is_sense(e.in(c, 32), 0x2400));
	c = cdb_rdd10(0, 32);
	c[1] = 0x01;
	EXPECT_TRUE(is_sense(e.in(c, 32), 0x2400));
	c = cdb_rdd10(0, 32);
	c[5] = 0x01;
	EXPECT_TRUE(is_sense(e.in(c, 32), 0x2400));
	c = cdb_rdd12(0, 0, 32);
	c[1] |= 0x80;
	EXPECT_TRUE(is_sense(e.in(c, 32), 0x2400));
	c = cdb_rdd12(0, 0, 32);
	c[10] = 1;
	EXPECT_TRUE(is_sense(e.in(c, 32), 0x2400));
}

} // namespace
} // namespace ulp::scsi
