// SPDX-License-Identifier: MIT
// The SBC-3 block command set through the loopback fabric: READ/WRITE (6, 10, 12, 16), READ
// CAPACITY, SYNCHRONIZE CACHE, PRE-FETCH, VERIFY, WRITE AND VERIFY, WRITE SAME, UNMAP,
// COMPARE AND WRITE and GET LBA STATUS - every field check and error path, data integrity
// on the ram and the file backstore (io_uring: completions on another thread), COMPARE AND
// WRITE serialisation, and aborts of multi-step commands in the middle of their I/O.
//
// The expectations follow SBC-3 and libiscsi's conformance suite (iscsi-test-cu, SCSI
// family); the test names of the latter are quoted where a case mirrors one.
#include "scsi/core.h"
#include "scsi/core_internal.h"
#include "scsi/sbc.h"
#include "scsi_test_util.h"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace ulp::scsi
{
namespace
{

using namespace test;
using std::chrono::milliseconds;
using Bytes = std::vector<uint8_t>;

constexpr uint32_t kBs = 512;

// ---- CDBs ---------------------------------------------------------------------------------

Bytes cdb_rw(uint8_t op, uint64_t lba, uint32_t blocks, uint8_t b1 = 0)
{
	Bytes c;
	switch (op) {
	case 0x08: // READ (6)
	case 0x0a: // WRITE (6)
		c.assign(6, 0);
		put_be24(&c[1], static_cast<uint32_t>(lba) & 0x1fffff);
		c[4] = static_cast<uint8_t>(blocks);
		break;
	case 0x28:
	case 0x2a:
	case 0x2f: // VERIFY (10)
	case 0x2e: // WRITE AND VERIFY (10)
	case 0x34: // PRE-FETCH (10)
	case 0x35: // SYNCHRONIZE CACHE (10)
		c.assign(10, 0);
		put_be32(&c[2], static_cast<uint32_t>(lba));
		put_be16(&c[7], static_cast<uint16_t>(blocks));
		break;
	case 0xa8:
	case 0xaa:
	case 0xaf: // VERIFY (12)
	case 0xae: // WRITE AND VERIFY (12)
		c.assign(12, 0);
		put_be32(&c[2], static_cast<uint32_t>(lba));
		put_be32(&c[6], blocks);
		break;
	default: // 16-byte forms
		c.assign(16, 0);
		put_be64(&c[2], lba);
		put_be32(&c[10], blocks);
		break;
	}
	c[0] = op;
	if (c.size() > 6)
		c[1] = b1;
	return c;
}

// WRITE SAME (10) 0x41 / (16) 0x93.
Bytes cdb_ws(bool ws16, uint64_t lba, uint32_t blocks, bool unmap = false, bool anchor = false,
             bool ndob = false)
{
	Bytes c = ws16 ? cdb_rw(0x93, lba, blocks) : cdb_rw(0x2a, lba, blocks);
	c[0] = ws16 ? 0x93 : 0x41;
	c[1] = (unmap ? 0x08 : 0) | (anchor ? 0x10 : 0) | (ndob ? 0x01 : 0);
	return c;
}

Bytes cdb_unmap(uint16_t plen, bool anchor = false)
{
	Bytes c(10, 0);
	c[0] = 0x42;
	c[1] = anchor ? 1 : 0;
	put_be16(&c[7], plen);
	return c;
}

struct Desc {
	uint64_t lba;
	uint32_t blocks;
};

Bytes unmap_list(const std::vector<Desc> &d)
{
	Bytes p(8 + 16 * d.size(), 0);
	put_be16(&p[0], static_cast<uint16_t>(p.size() - 2));
	put_be16(&p[2], static_cast<uint16_t>(16 * d.size()));
	for (size_t i = 0; i < d.size(); i++) {
		put_be64(&p[8 + 16 * i], d[i].lba);
		put_be32(&p[8 + 16 * i + 8], d[i].blocks);
	}
	return p;
}

Bytes cdb_caw(uint64_t lba, uint8_t blocks, uint8_t b1 = 0)
{
	Bytes c(16, 0);
	c[0] = 0x89;
	c[1] = b1;
	put_be64(&c[2], lba);
	c[13] = blocks;
	return c;
}

Bytes cdb_lba_status(uint64_t lba, uint32_t alloc)
{
	Bytes c(16, 0);
	c[0] = 0x9e;
	c[1] = 0x12;
	put_be64(&c[2], lba);
	put_be32(&c[10], alloc);
	return c;
}

Bytes cdb_rc16(uint32_t alloc)
{
	Bytes c(16, 0);
	c[0] = 0x9e;
	c[1] = 0x10;
	put_be32(&c[10], alloc);
	return c;
}

// ---- Data and results ---------------------------------------------------------------------

Bytes pattern(size_t n, uint32_t seed)
{
	Bytes v(n);
	uint32_t x = seed * 2654435761u + 7;
	for (auto &b : v) {
		x = x * 1103515245u + 12345u;
		b = uint8_t(x >> 16);
	}
	return v;
}

Bytes repeat(const Bytes &block, size_t times)
{
	Bytes v;
	v.reserve(block.size() * times);
	for (size_t i = 0; i < times; i++)
		v.insert(v.end(), block.begin(), block.end());
	return v;
}

// CHECK CONDITION with the ASC/ASCQ asc (and, when given, the sense key).
::testing::AssertionResult is_sense(const LoopResult &r, uint16_t asc, int key = -1)
{
	if (!r.finished)
		return ::testing::AssertionFailure() << "not finished";
	if (r.status != Status::CheckCondition)
		return ::testing::AssertionFailure() << "status " << int(r.status);
	if (r.asc() != asc || (key >= 0 && int(r.key()) != key))
		return ::testing::AssertionFailure()
		       << "key " << int(r.key()) << " asc " << std::hex << r.asc();
	return ::testing::AssertionSuccess();
}

::testing::AssertionResult is_good(const LoopResult &r)
{
	if (!r.finished)
		return ::testing::AssertionFailure() << "not finished";
	if (r.status != Status::Good)
		return ::testing::AssertionFailure()
		       << "status " << int(r.status) << " key " << int(r.key()) << " asc "
		       << std::hex << r.asc();
	return ::testing::AssertionSuccess();
}

bool info_valid(const LoopResult &r)
{
	return r.sense.size() >= 18 && (r.sense[0] & 0x80);
}
uint32_t info(const LoopResult &r)
{
	return r.sense.size() >= 18 ? get_be32(&r.sense[3]) : 0;
}

// ---- Backstores under test ----------------------------------------------------------------

// A file backstore on a file in /var/tmp (a disk file system: O_DIRECT and hole punching
// work there, and completions arrive on the io_uring thread). The file is unlinked at once:
// the backstore's descriptors keep it until the LU goes.
std::unique_ptr<Backstore> file_bs(uint64_t size, uint32_t block_size = kBs)
{
	static std::atomic<int> seq{0};
	std::string path = "/var/tmp/ulp-sbc-test-" + std::to_string(getpid()) + "-" +
	                   std::to_string(seq.fetch_add(1));
	BackstoreConfig c;
	c.kind = "file";
	c.path = path;
	c.size = size;
	c.block_size = block_size;
	int err = 0;
	std::string why;
	auto bs = make_backstore(c, &err, &why);
	EXPECT_TRUE(bs) << why;
	unlink(path.c_str());
	return bs;
}

std::unique_ptr<Backstore> ram_bs(uint64_t size, uint32_t block_size = kBs)
{
	BackstoreConfig c;
	c.kind = "ram";
	c.size = size;
	c.block_size = block_size;
	int err = 0;
	std::string why;
	auto bs = make_backstore(c, &err, &why);
	EXPECT_TRUE(bs) << why;
	return bs;
}

std::unique_ptr<Backstore> make_bs(const std::string &kind, uint64_t size, uint32_t bsz = kBs)
{
	return kind == "file" ? file_bs(size, bsz) : ram_bs(size, bsz);
}

// In front of a backstore: fails the requests of chosen kinds that touch a byte range with
// a chosen errno, records every request's op and FUA flag, and can report no unmap support.
class FaultyBackstore final : public Backstore
{
public:
	explicit FaultyBackstore(std::unique_ptr<Backstore> inner)
	    : Backstore("faulty-" + inner->kind(), inner->size(), inner->queue_depth()),
	      inner_(std::move(inner))
	{
	}
	bool can_unmap() const override { return inner_->can_unmap(); }
	bool write_cache() const override { return write_cache_; }
	uint32_t atomic_write_max() const override { return inner_->atomic_write_max(); }
	int extent(uint64_t off, BsExtent *out) override
	{
		if (extent_err_)
			return extent_err_;
		return inner_->extent(off, out);
	}
	void submit(BsIo *io) override
	{
		int err = 0;
		{
			std::lock_guard g(lock_);
			ops_.push_back({io->op, io->fua, io->offset, io->length, io->atomic});
			if (io->op == fail_op_ &&
			    (io->op == BsOp::Flush ||
			     (io->offset < fail_end_ && io->offset + io->length > fail_begin_)))
				err = fail_err_;
		}
		if (err) {
			io->done(io, err);
			return;
		}
		inner_->submit(io);
	}
	void fail(BsOp op, uint64_t begin, uint64_t end, int err)
	{
		std::lock_guard g(lock_);
		fail_op_ = op;
		fail_begin_ = begin;
		fail_end_ = end;
		fail_err_ = err;
	}
	struct Op {
		BsOp op;
		bool fua;
		uint64_t offset, length;
		bool atomic;
	};
	std::vector<Op> ops()
	{
		std::lock_guard g(lock_);
		return ops_;
	}
	void clear()
	{
		std::lock_guard g(lock_);
		ops_.clear();
	}
	bool write_cache_ = true;
	int extent_err_ = 0;

private:
	std::unique_ptr<Backstore> inner_;
	std::mutex lock_;
	std::vector<Op> ops_;
	BsOp fail_op_ = BsOp::Flush;
	uint64_t fail_begin_ = 0, fail_end_ = 0;
	int fail_err_ = 0;
};

// A target with one LU (LUN 0) on a given backstore and a session whose POWER ON unit
// attention is consumed.
struct Env {
	Target t;
	LogicalUnit *lu = nullptr;
	Nexus *s = nullptr;
	GatedBackstore *gate = nullptr;
	FaultyBackstore *faulty = nullptr;

	Env(std::unique_ptr<Backstore> bs, LuConfig cfg = {}, bool gated = false,
	    bool faulty_wrap = false, bool read_only_map = false)
	{
		if (faulty_wrap) {
			auto f = std::make_unique<FaultyBackstore>(std::move(bs));
			faulty = f.get();
			bs = std::move(f);
		}
		if (gated) {
			auto g = std::make_unique<GatedBackstore>(std::move(bs));
			gate = g.get();
			bs = std::move(g);
		}
		t.lus.push_back(std::make_unique<LogicalUnit>("lu0", std::move(bs), cfg));
		t.gates.push_back(gate);
		lu = t.lus.back().get();
		EXPECT_EQ(t.tpg.add_lun(0, *lu, read_only_map), 0);
		s = t.login("iqn.init:a");
	}

	LoopResult run(const Bytes &cdb, DataDir dir = DataDir::None, Bytes data = {},
	               Nexus *on = nullptr)
	{
		return t.lb.run(on ? on : s, 0, cdb, dir, std::move(data));
	}
	LoopResult out(const Bytes &cdb, Bytes data) { return run(cdb, DataDir::Write, data); }
	LoopResult in(const Bytes &cdb, size_t len) { return run(cdb, DataDir::Read, Bytes(len)); }

	void write(uint64_t lba, const Bytes &data)
	{
		auto r = out(cdb_rw(0x8a, lba, uint32_t(data.size() / lu->block_size())), data);
		EXPECT_TRUE(is_good(r)) << "write at " << lba;
	}
	Bytes read(uint64_t lba, uint32_t blocks)
	{
		auto r = in(cdb_rw(0x88, lba, blocks), size_t(blocks) * lu->block_size());
		EXPECT_TRUE(is_good(r)) << "read at " << lba;
		return r.data;
	}
	uint64_t nr() const { return lu->nr_blocks(); }
};

// ===========================================================================================
// READ and WRITE
// ===========================================================================================

class SbcData : public ::testing::TestWithParam<std::string>
{
};

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
// WRITE SAME
// ===========================================================================================

TEST_P(SbcData, WriteSameData)
{
	// libiscsi WriteSame*.Simple and .Check: 1..N blocks at the start and the end.
	Env e(make_bs(GetParam(), 4 << 20));
	const uint64_t n = e.nr();
	for (bool ws16 : {false, true}) {
		for (uint32_t i : {1u, 2u, 127u, 128u, 129u, 256u}) {
			Bytes blk = pattern(kBs, i + (ws16 ? 1000 : 0));
			ASSERT_TRUE(is_good(e.out(cdb_ws(ws16, 0, i), blk)));
			EXPECT_EQ(e.read(0, i), repeat(blk, i));
			ASSERT_TRUE(is_good(e.out(cdb_ws(ws16, n - i, i), blk)));
			EXPECT_EQ(e.read(n - i, i), repeat(blk, i));
		}
	}
	// A range of several backstore requests (1 MiB each): 5000 blocks, neighbours intact.
	Bytes before = pattern(kBs, 77), after = pattern(kBs, 78), blk = pattern(kBs, 79);
	e.write(999, before);
	e.write(6000, after);
	ASSERT_TRUE(is_good(e.out(cdb_ws(true, 1000, 5000), blk)));
	EXPECT_EQ(e.read(999, 1), before);
	EXPECT_EQ(e.read(6000, 1), after);
	for (uint64_t at = 1000; at < 6000; at += 250)
		EXPECT_EQ(e.read(at, 250), repeat(blk, 250)) << at;
}

TEST_P(SbcData, WriteSameLargeBlocks)
{
	// 4 KiB blocks: the pattern buffer holds 16 of them.
	LuConfig cfg;
	cfg.block_size = 4096;
	Env e(make_bs(GetParam(), 8 << 20, 4096), cfg);
	Bytes blk = pattern(4096, 4);
	ASSERT_TRUE(is_good(e.out(cdb_ws(true, 3, 700), blk)));
	auto r = e.in(cdb_rw(0x88, 0, 710), 710 * 4096);
	ASSERT_TRUE(is_good(r));
	EXPECT_EQ(Bytes(r.data.begin(), r.data.begin() + 3 * 4096), Bytes(3 * 4096, 0));
	EXPECT_EQ(Bytes(r.data.begin() + 3 * 4096, r.data.begin() + 703 * 4096), repeat(blk, 700));
	EXPECT_EQ(Bytes(r.data.begin() + 703 * 4096, r.data.end()), Bytes(7 * 4096, 0));
}

TEST_P(SbcData, WriteSameZeroesUnmapAndNdob)
{
	// libiscsi WriteSame*.Unmap, .UnmapUntilEnd (0xFF data with UNMAP reads back as
	// zeros: LBPRZ), and NDOB (SBC-4: no data-out, zeros).
	Env e(make_bs(GetParam(), 4 << 20), {}, false, true);
	ASSERT_TRUE(e.lu->thin());
	const uint64_t n = e.nr();
	const Bytes ones(256 * kBs, 0xff);
	struct Case {
		const char *what;
		Bytes cdb;
		Bytes data;
		BsOp op;
	};
	for (bool ws16 : {false, true}) {
		std::vector<Case> cases = {
		    {"zero block", cdb_ws(ws16, 0, 256), Bytes(kBs, 0), BsOp::WriteZeroes},
		    {"unmap, zero block", cdb_ws(ws16, 0, 256, true), Bytes(kBs, 0), BsOp::Unmap},
		    {"unmap, 0xff block", cdb_ws(ws16, 0, 256, true), Bytes(kBs, 0xff),
		     BsOp::Unmap},
		};
		if (ws16) {
			cases.push_back({"ndob",
			                 cdb_ws(true, 0, 256, false, false, true),
			                 {},
			                 BsOp::WriteZeroes});
			cases.push_back({"ndob + unmap",
			                 cdb_ws(true, 0, 256, true, false, true),
			                 {},
			                 BsOp::Unmap});
		}
		for (auto &c : cases) {
			SCOPED_TRACE(testing::Message() << (ws16 ? "16 " : "10 ") << c.what);
			e.write(0, ones);
			e.write(n - 256, ones);
			e.faulty->clear();
			auto r = c.data.empty() ? e.run(c.cdb) : e.out(c.cdb, c.data);
			ASSERT_TRUE(is_good(r));
			EXPECT_EQ(e.read(0, 256), Bytes(256 * kBs, 0));
			auto ops = e.faulty->ops();
			ASSERT_EQ(ops.size(), 2u) << "one request, plus the read back";
			EXPECT_EQ(ops[0].op, c.op);
			EXPECT_EQ(ops[0].length, 256u * kBs);
			// The same at the end of the LU (libiscsi .UnmapUntilEnd).
			c.cdb = c.cdb.size() == 16 ? c.cdb : c.cdb;
			if (ws16)
				put_be64(&c.cdb[2], n - 256);
			else
				put_be32(&c.cdb[2], uint32_t(n - 256));
			r = c.data.empty() ? e.run(c.cdb) : e.out(c.cdb, c.data);
			ASSERT_TRUE(is_good(r));
			EXPECT_EQ(e.read(n - 256, 256), Bytes(256 * kBs, 0));
		}
	}
}

TEST(SbcWriteSame, WriteCacheOffFlushesUnmapAndZeroes)
{
	Env e(ram_bs(1 << 20), {}, false, true);
	e.lu->set_wce(false);
	e.faulty->clear();
	ASSERT_TRUE(is_good(e.out(cdb_ws(true, 0, 8, true), Bytes(kBs))));
	ASSERT_TRUE(is_good(e.run(cdb_ws(true, 0, 8, false, false, true))));
	ASSERT_TRUE(is_good(e.out(cdb_ws(true, 0, 8), pattern(kBs, 1))));
	auto ops = e.faulty->ops();
	ASSERT_EQ(ops.size(), 5u);
	EXPECT_EQ(ops[0].op, BsOp::Unmap);
	EXPECT_EQ(ops[1].op, BsOp::Flush);
	EXPECT_EQ(ops[2].op, BsOp::WriteZeroes);
	EXPECT_EQ(ops[3].op, BsOp::Flush);
	EXPECT_EQ(ops[4].op, BsOp::Write);
	EXPECT_TRUE(ops[4].fua);
}

TEST(SbcWriteSame, Fields)
{
	// libiscsi WriteSame*.Unmap (ANCHOR), .ZeroBlocks (WSNZ=0), .BeyondEol,
	// .WriteProtect (WRPROTECT), .InvalidDataOutSize; MAXIMUM WRITE SAME LENGTH.
	LuConfig cfg;
	cfg.max_write_same_blocks = 300;
	Env e(ram_bs(1 << 20), cfg);
	const uint64_t n = e.nr();
	const Bytes blk = pattern(kBs, 1);
	for (bool ws16 : {false, true}) {
		SCOPED_TRACE(ws16 ? "WRITE SAME (16)" : "WRITE SAME (10)");
		EXPECT_TRUE(is_sense(e.out(cdb_ws(ws16, 0, 1, false, true), blk), 0x2400))
		    << "ANCHOR without UNMAP";
		EXPECT_TRUE(is_sense(e.out(cdb_ws(ws16, 0, 1, true, true), blk), 0x2400))
		    << "ANCHOR without ANC_SUP";
		for (uint8_t p = 1; p < 8; p++) {
			Bytes c = cdb_ws(ws16, 0, 1);
			c[1] |= uint8_t(p << 5);
			EXPECT_TRUE(is_sense(e.out(c, blk), 0x2400)) << "WRPROTECT " << int(p);
		}
		for (uint8_t bit : {0x02, 0x04}) {
			Bytes c = cdb_ws(ws16, 0, 1);
			c[1] |= bit;
			EXPECT_TRUE(is_sense(e.out(c, blk), 0x2400)) << "LBDATA/PBDATA";
		}
		// WSNZ=0: 0 blocks is the rest of the LU, bounded by MAXIMUM WRITE SAME LENGTH
		// (libiscsi WriteSame*.ZeroBlocks: at LBA 0 of a bigger LU, then 301, 300 and
		// 299 blocks before the end).
		ASSERT_FALSE(kSbcWsnz);
		ASSERT_GT(n, 300u);
		EXPECT_TRUE(is_sense(e.out(cdb_ws(ws16, 0, 0), blk), 0x2400)) << "WSNZ 0, too long";
		EXPECT_TRUE(is_sense(e.out(cdb_ws(ws16, n - 301, 0), blk), 0x2400));
		e.write(n - 301, Bytes(301 * kBs, 0x5c));
		EXPECT_TRUE(is_good(e.out(cdb_ws(ws16, n - 300, 0), blk)));
		Bytes expect(kBs, 0x5c);
		for (int i = 0; i < 300; i++)
			expect.insert(expect.end(), blk.begin(), blk.end());
		EXPECT_EQ(e.read(n - 301, 301), expect);
		EXPECT_TRUE(is_good(e.out(cdb_ws(ws16, n - 299, 0), blk)));
		EXPECT_TRUE(is_good(e.out(cdb_ws(ws16, n - 1, 0), blk)));
		EXPECT_TRUE(is_sense(e.out(cdb_ws(ws16, n, 0), blk), 0x2100)) << "LBA = capacity";
		EXPECT_TRUE(is_sense(e.out(cdb_ws(ws16, n + 1, 0), blk), 0x2100));
		EXPECT_TRUE(is_sense(e.out(cdb_ws(ws16, 0x80000000u, 0), blk), 0x2100));
		EXPECT_TRUE(is_sense(e.out(cdb_ws(ws16, 0xffffffffu, 1), blk), 0x2100));
		EXPECT_TRUE(is_sense(e.out(cdb_ws(ws16, n - 1, 2), blk), 0x2100));
		EXPECT_TRUE(is_good(e.out(cdb_ws(ws16, n - 300, 300), blk)));
		EXPECT_TRUE(is_sense(e.out(cdb_ws(ws16, 0, 301), blk), 0x2400))
		    << "MAXIMUM WRITE SAME LENGTH";
		EXPECT_TRUE(is_sense(e.out(cdb_ws(ws16, 0, 1, true), Bytes(kBs / 2)), 0x0e03));
		EXPECT_TRUE(is_sense(e.out(cdb_ws(ws16, 0, 1, true), Bytes(2 * kBs)), 0x0e03));
		EXPECT_TRUE(is_sense(e.run(cdb_ws(ws16, 0, 1)), 0x0e03)) << "no data-out";
	}
	EXPECT_TRUE(is_sense(e.out(cdb_ws(true, 1ull << 63, 1), blk), 0x2100));
	EXPECT_TRUE(is_sense(e.out(cdb_ws(true, ~0ull, 1), blk), 0x2100));
	// NDOB: no data-out. One sent anyway is not fetched (an underflow of all of it).
	EXPECT_TRUE(is_good(e.run(cdb_ws(true, 0, 4, false, false, true))));
	auto r = e.out(cdb_ws(true, 0, 4, false, false, true), blk);
	EXPECT_TRUE(is_good(r));
	EXPECT_EQ(r.resid, Residual::Underflow);
	EXPECT_EQ(r.resid_count, kBs);
}

TEST(SbcWriteSame, UnmapNeedsThinProvisioning)
{
	LuConfig cfg;
	cfg.thin = false;
	Env e(ram_bs(1 << 20), cfg);
	EXPECT_TRUE(is_sense(e.out(cdb_ws(false, 0, 1, true), Bytes(kBs)), 0x2400));
	EXPECT_TRUE(is_sense(e.out(cdb_ws(true, 0, 1, true), Bytes(kBs)), 0x2400));
	EXPECT_TRUE(is_good(e.out(cdb_ws(true, 0, 1), Bytes(kBs))));
}

TEST(SbcWriteSame, WriteProtected)
{
	// libiscsi ReadOnly.ReadOnlySBC: WRITE SAME, with UNMAP too and without data-out,
	// fails with WRITE PROTECTED - thin or not.
	for (bool thin : {true, false}) {
		LuConfig cfg;
		cfg.read_only = true;
		cfg.thin = thin;
		Env e(ram_bs(1 << 20), cfg);
		for (bool ws16 : {false, true}) {
			EXPECT_TRUE(is_sense(e.out(cdb_ws(ws16, 0, 1), Bytes(kBs)), 0x2700, 0x7));
			EXPECT_TRUE(is_sense(e.run(cdb_ws(ws16, 0, 1, true)), 0x2700, 0x7));
		}
	}
	Env m(ram_bs(1 << 20), {}, false, false, /*read_only_map=*/true);
	EXPECT_TRUE(is_sense(m.run(cdb_ws(true, 0, 1, true)), 0x2700, 0x7));
}

TEST(SbcWriteSame, BackstoreErrors)
{
	Env e(ram_bs(1 << 20), {}, false, true);
	e.faulty->fail(BsOp::Write, 100 * kBs, 101 * kBs, -EIO);
	EXPECT_TRUE(is_sense(e.out(cdb_ws(true, 0, 1000), pattern(kBs, 1)), 0x0c00, 0x3));
	e.faulty->fail(BsOp::Unmap, 0, 1, -EIO);
	EXPECT_TRUE(is_sense(e.out(cdb_ws(true, 0, 10, true), Bytes(kBs)), 0x0c00, 0x3));
	e.faulty->fail(BsOp::WriteZeroes, 0, 1, -ENOSPC);
	EXPECT_TRUE(is_sense(e.out(cdb_ws(true, 0, 10), Bytes(kBs)), 0x2707, 0x7));
}

// ===========================================================================================
// UNMAP
// ===========================================================================================

TEST_P(SbcData, UnmapReadsZeros)
{
	// libiscsi Unmap.Simple: one descriptor, and one descriptor per block.
	Env e(make_bs(GetParam(), 4 << 20), {}, false, true);
	ASSERT_TRUE(e.lu->thin());
	const Bytes a(256 * kBs, 'a');
	e.write(0, a);
	for (uint32_t i : {1u, 7u, 128u, 256u}) {
		auto list = unmap_list({{0, i}});
		ASSERT_TRUE(is_good(e.out(cdb_unmap(uint16_t(list.size())), list)));
		auto d = e.read(0, 256);
		EXPECT_EQ(Bytes(d.begin(), d.begin() + i * kBs), Bytes(i * kBs, 0)) << i;
		EXPECT_EQ(Bytes(d.begin() + i * kBs, d.end()), Bytes((256 - i) * kBs, 'a')) << i;
		e.write(0, a);
	}
	std::vector<Desc> per_block;
	for (uint64_t b = 0; b < 256; b += 2)
		per_block.push_back({b, 1});
	auto list = unmap_list(per_block);
	e.faulty->clear();
	ASSERT_TRUE(is_good(e.out(cdb_unmap(uint16_t(list.size())), list)));
	EXPECT_EQ(e.faulty->ops().size(), 128u) << "one request per descriptor";
	auto d = e.read(0, 256);
	for (uint64_t b = 0; b < 256; b++) {
		EXPECT_EQ(Bytes(d.begin() + b * kBs, d.begin() + (b + 1) * kBs),
		          Bytes(kBs, b % 2 ? 'a' : 0))
		    << b;
	}
}

TEST(SbcUnmap, ZeroBlocksAndEmptyLists)
{
	// libiscsi Unmap.ZeroBlocks and Unmap.VPD (a 0-block descriptor at LBA 0).
	Env e(ram_bs(1 << 20), {}, false, true);
	const uint64_t n = e.nr();
	e.faulty->clear();
	for (auto list : {unmap_list({{0, 0}}), unmap_list({{n, 0}}), unmap_list({}),
	                  unmap_list({{1, 0}, {0, 0}, {1, 0}})}) {
		EXPECT_TRUE(is_good(e.out(cdb_unmap(uint16_t(list.size())), list)));
	}
	EXPECT_TRUE(is_good(e.run(cdb_unmap(0)))) << "PARAMETER LIST LENGTH 0";
	EXPECT_TRUE(e.faulty->ops().empty());
}

TEST(SbcUnmap, ParameterListChecks)
{
	LuConfig cfg;
	cfg.max_unmap_descs = 4;
	cfg.max_unmap_blocks = 100;
	Env e(ram_bs(1 << 20), cfg, false, true);
	const uint64_t n = e.nr();
	e.write(0, Bytes(kBs, 'a'));
	auto send = [&](const Bytes &list) {
		return e.out(cdb_unmap(uint16_t(list.size())), list);
	};
	for (uint16_t len = 1; len < 8; len++)
		EXPECT_TRUE(is_sense(e.out(cdb_unmap(len), Bytes(len)), 0x1a00)) << len;
	EXPECT_TRUE(is_sense(send(unmap_list({{0, 1}, {1, 1}, {2, 1}, {3, 1}, {4, 1}})), 0x2600))
	    << "MAXIMUM UNMAP BLOCK DESCRIPTOR COUNT";
	EXPECT_TRUE(is_good(send(unmap_list({{0, 1}, {1, 1}, {2, 1}, {3, 1}}))));
	EXPECT_TRUE(is_sense(send(unmap_list({{0, 60}, {100, 41}})), 0x2600))
	    << "MAXIMUM UNMAP LBA COUNT, in total";
	EXPECT_TRUE(is_sense(send(unmap_list({{n - 1, 2}})), 0x2100));
	EXPECT_TRUE(is_sense(send(unmap_list({{~0ull, 2}})), 0x2100));
	// Nothing is unmapped when a later descriptor is bad.
	e.write(0, Bytes(kBs, 'a'));
	e.faulty->clear();
	EXPECT_TRUE(is_sense(send(unmap_list({{0, 1}, {n, 1}})), 0x2100));
	EXPECT_TRUE(e.faulty->ops().empty());
	EXPECT_EQ(e.read(0, 1), Bytes(kBs, 'a'));
	// A descriptor length beyond what arrived: the whole descriptors that did count.
	auto list = unmap_list({{0, 1}, {5, 1}});
	put_be16(&list[2], 64);
	e.faulty->clear();
	EXPECT_TRUE(is_good(send(list)));
	EXPECT_EQ(e.faulty->ops().size(), 2u);
	// A trailing partial descriptor is ignored.
	list = unmap_list({{0, 1}});
	list.resize(list.size() + 10, 0xff);
	put_be16(&list[2], 26);
	e.faulty->clear();
	EXPECT_TRUE(is_good(send(list)));
	EXPECT_EQ(e.faulty->ops().size(), 1u);
	// ANCHOR without ANC_SUP; a list longer than the data-out.
	list = unmap_list({{0, 1}});
	EXPECT_TRUE(is_sense(e.out(cdb_unmap(uint16_t(list.size()), true), list), 0x2400));
	EXPECT_TRUE(is_sense(e.out(cdb_unmap(uint16_t(list.size() + 16)), list), 0x2400));
	// Backstore errors.
	e.faulty->fail(BsOp::Unmap, 0, kBs, -EIO);
	EXPECT_TRUE(is_sense(send(unmap_list({{0, 1}})), 0x0c00, 0x3));
}

TEST(SbcUnmap, NotOfferedWithoutThinProvisioning)
{
	// libiscsi Unmap.VPD: a target without LBPU fails UNMAP, here as the kernel's target
	// does (INVALID COMMAND OPERATION CODE).
	LuConfig cfg;
	cfg.thin = false;
	Env e(ram_bs(1 << 20), cfg);
	auto list = unmap_list({{0, 1}});
	EXPECT_TRUE(is_sense(e.out(cdb_unmap(uint16_t(list.size())), list), 0x2000));
}

TEST(SbcUnmap, WriteProtected)
{
	LuConfig cfg;
	cfg.read_only = true;
	Env e(ram_bs(1 << 20), cfg);
	auto list = unmap_list({{0, 1}});
	EXPECT_TRUE(is_sense(e.out(cdb_unmap(uint16_t(list.size())), list), 0x2700, 0x7));
}

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

Bytes cdb_write_atomic(uint64_t lba, uint16_t blocks, uint8_t b1 = 0, uint16_t boundary = 0)
{
	Bytes c(16, 0);
	c[0] = 0x9c;
	c[1] = b1;
	put_be64(&c[2], lba);
	put_be16(&c[10], boundary);
	put_be16(&c[12], blocks);
	return c;
}

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
// GET LBA STATUS
// ===========================================================================================

struct LbaStatus {
	uint64_t lba;
	uint32_t blocks;
	uint8_t status;
};

std::vector<LbaStatus> lba_status(const LoopResult &r)
{
	std::vector<LbaStatus> v;
	if (r.data.size() < 8)
		return v;
	const size_t len = std::min<size_t>(get_be32(&r.data[0]) + 4, r.data.size());
	for (size_t off = 8; off + 16 <= len; off += 16)
		v.push_back({get_be64(&r.data[off]), get_be32(&r.data[off + 8]),
		             uint8_t(r.data[off + 12] & 0xf)});
	return v;
}

TEST(SbcLbaStatus, RamExtents)
{
	// The ram backstore maps 64 KiB chunks (128 blocks) on first write.
	Env e(ram_bs(1 << 20));
	const uint64_t n = e.nr();
	auto d = lba_status(e.in(cdb_lba_status(0, 1024), 1024));
	ASSERT_EQ(d.size(), 1u);
	EXPECT_EQ(d[0].lba, 0u);
	EXPECT_EQ(d[0].blocks, n);
	EXPECT_EQ(d[0].status, 1) << "deallocated";

	e.write(130, Bytes(kBs, 1)); // maps chunk 1: blocks 128..255
	e.write(600, Bytes(kBs, 1)); // maps chunk 4: blocks 512..639
	d = lba_status(e.in(cdb_lba_status(0, 1024), 1024));
	ASSERT_EQ(d.size(), 5u);
	const LbaStatus want[] = {
	    {0, 128, 1}, {128, 128, 0}, {256, 256, 1}, {512, 128, 0}, {640, uint32_t(n - 640), 1}};
	for (size_t i = 0; i < 5; i++) {
		EXPECT_EQ(d[i].lba, want[i].lba) << i;
		EXPECT_EQ(d[i].blocks, want[i].blocks) << i;
		EXPECT_EQ(d[i].status, want[i].status) << i;
	}
	// From inside an extent; a small allocation length gets the first descriptor(s).
	d = lba_status(e.in(cdb_lba_status(200, 24), 24));
	ASSERT_EQ(d.size(), 1u);
	EXPECT_EQ(d[0].lba, 200u);
	EXPECT_EQ(d[0].blocks, 56u);
	EXPECT_EQ(d[0].status, 0);
	auto r = e.in(cdb_lba_status(0, 39), 39);
	ASSERT_TRUE(is_good(r));
	EXPECT_EQ(r.data.size(), 24u);
	EXPECT_EQ(get_be32(&r.data[0]), 4u + 16) << "one whole descriptor fits";
	// UNMAP frees whole chunks.
	auto list = unmap_list({{128, 128}});
	ASSERT_TRUE(is_good(e.out(cdb_unmap(uint16_t(list.size())), list)));
	d = lba_status(e.in(cdb_lba_status(0, 1024), 1024));
	ASSERT_GE(d.size(), 2u);
	EXPECT_EQ(d[0].blocks, 512u);
	EXPECT_EQ(d[0].status, 1);
	EXPECT_EQ(d[1].lba, 512u);
	EXPECT_EQ(d[1].status, 0);
}

TEST(SbcLbaStatus, UnmapSingleBlocks)
{
	// libiscsi GetLBAStatus.UnmapSingle: after unmapping blocks [0, i) the block after
	// them is still reported mapped, in a descriptor that starts where it was asked.
	Env e(ram_bs(1 << 20));
	for (uint64_t i = 1; i <= 255; i += 17) {
		e.write(0, Bytes(257 * kBs, 'A'));
		auto list = unmap_list({{0, uint32_t(i)}});
		ASSERT_TRUE(is_good(e.out(cdb_unmap(uint16_t(list.size())), list)));
		ASSERT_TRUE(is_good(e.in(cdb_lba_status(0, 24), 24)));
		auto d = lba_status(e.in(cdb_lba_status(i + 1, 24), 24));
		ASSERT_EQ(d.size(), 1u);
		EXPECT_EQ(d[0].lba, i + 1);
		EXPECT_EQ(d[0].status, 0) << i;
	}
}

TEST(SbcLbaStatus, RangeAndAllocationLength)
{
	// libiscsi GetLBAStatus.Simple and .BeyondEol.
	Env e(ram_bs(1 << 20));
	const uint64_t n = e.nr();
	for (uint64_t i : {uint64_t(1), uint64_t(256)}) {
		EXPECT_TRUE(is_good(e.in(cdb_lba_status(i, 24), 24)));
		EXPECT_TRUE(is_good(e.in(cdb_lba_status(n - i, 24), 24)));
	}
	for (uint64_t lba : {n, n + 1, uint64_t(1) << 63, ~uint64_t(0)})
		EXPECT_TRUE(is_sense(e.in(cdb_lba_status(lba, 24), 24), 0x2100)) << lba;
	auto r = e.run(cdb_lba_status(0, 0));
	EXPECT_TRUE(is_good(r)) << "allocation length 0";
	r = e.in(cdb_lba_status(0, 4), 4);
	ASSERT_TRUE(is_good(r));
	EXPECT_EQ(r.data.size(), 4u);
	EXPECT_EQ(get_be32(&r.data[0]), 20u);
}

TEST(SbcLbaStatus, FullyProvisionedAndErrors)
{
	LuConfig cfg;
	cfg.thin = false;
	Env e(ram_bs(1 << 20), cfg);
	auto d = lba_status(e.in(cdb_lba_status(5, 64), 64));
	ASSERT_EQ(d.size(), 1u);
	EXPECT_EQ(d[0].lba, 5u);
	EXPECT_EQ(d[0].blocks, e.nr() - 5);
	EXPECT_EQ(d[0].status, 0);

	Env f(ram_bs(1 << 20), {}, false, true);
	f.faulty->extent_err_ = -EIO;
	EXPECT_TRUE(is_sense(f.in(cdb_lba_status(0, 24), 24), 0x1100, 0x3));
}

TEST(SbcLbaStatus, FileHoles)
{
	Env e(file_bs(4 << 20));
	if (!e.lu->thin())
		GTEST_SKIP() << "the file system under /var/tmp cannot punch holes";
	e.write(2048, Bytes(64 * kBs, 7)); // 32 KiB at 1 MiB
	auto d = lba_status(e.in(cdb_lba_status(0, 1024), 1024));
	ASSERT_GE(d.size(), 3u);
	EXPECT_EQ(d[0].status, 1);
	EXPECT_LE(d[0].lba + d[0].blocks, 2048u);
	EXPECT_EQ(d[1].status, 0);
	EXPECT_LE(d[1].lba, 2048u);
	EXPECT_GE(d[1].lba + d[1].blocks, 2048u + 64);
	auto list = unmap_list({{2048, 64}});
	ASSERT_TRUE(is_good(e.out(cdb_unmap(uint16_t(list.size())), list)));
	d = lba_status(e.in(cdb_lba_status(2048, 24), 24));
	ASSERT_EQ(d.size(), 1u);
	EXPECT_EQ(d[0].status, 1);
	EXPECT_EQ(e.read(2048, 64), Bytes(64 * kBs, 0));
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
