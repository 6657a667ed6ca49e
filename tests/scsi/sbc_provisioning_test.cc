// SPDX-License-Identifier: MIT
// SBC-3 thin provisioning through the loopback fabric: WRITE SAME (with UNMAP, ANCHOR and
// NDOB), UNMAP and its parameter list, GET LBA STATUS on the ram and the file backstore
// (holes), every field check and error path. The shared fixtures are in sbc_env.h.
#include "tests/scsi/sbc_env.h"

namespace ulp::scsi
{
namespace
{

using namespace sbc_test;
using std::chrono::milliseconds;

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

// A backstore that replicates the block itself (Backstore::write_same_max()) gets WriteSame
// requests of the one block, at most write_same_max() bytes each, in order; the data is
// the block everywhere in the range and nowhere else. Zeros stay WriteZeroes; a backstore
// without it gets the buffer of copies (WriteSameData above).
TEST(SbcWriteSame, ByTheBackstoreSplitAtItsMaximum)
{
	Env e(ram_bs(1 << 20), {}, false, true);
	e.faulty->write_same_max_ = 8 * kBs;
	e.lu->set_wce(false);
	const Bytes blk = pattern(kBs, 5), before = pattern(kBs, 6), after = pattern(kBs, 7);
	e.write(99, before);
	e.write(120, after);
	e.faulty->clear();
	ASSERT_TRUE(is_good(e.out(cdb_ws(false, 100, 20), blk)));
	auto ops = e.faulty->ops();
	ASSERT_EQ(ops.size(), 3u);
	const uint64_t lens[] = {8, 8, 4};
	for (size_t i = 0; i < 3; i++) {
		EXPECT_EQ(ops[i].op, BsOp::WriteSame) << i;
		EXPECT_EQ(ops[i].offset, (100 + 8 * i) * kBs) << i;
		EXPECT_EQ(ops[i].length, lens[i] * kBs) << i;
		EXPECT_TRUE(ops[i].fua) << "WCE 0: durable before GOOD";
	}
	EXPECT_EQ(e.read(99, 1), before);
	EXPECT_EQ(e.read(100, 20), repeat(blk, 20));
	EXPECT_EQ(e.read(120, 1), after);

	e.faulty->clear();
	ASSERT_TRUE(is_good(e.out(cdb_ws(true, 100, 20), Bytes(kBs, 0))));
	ops = e.faulty->ops();
	ASSERT_EQ(ops.size(), 2u);
	EXPECT_EQ(ops[0].op, BsOp::WriteZeroes);
	EXPECT_EQ(ops[1].op, BsOp::Flush) << "WCE 0 on a cached backstore";

	// A failed request fails the command with its sense, and nothing after it is sent.
	e.faulty->fail(BsOp::WriteSame, 108 * kBs, 109 * kBs, -EIO);
	e.faulty->clear();
	EXPECT_TRUE(is_sense(e.out(cdb_ws(true, 100, 20), blk), 0x0c00, 3));
	EXPECT_EQ(e.faulty->ops().size(), 2u);
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

} // namespace
} // namespace ulp::scsi
