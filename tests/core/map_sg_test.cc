// SPDX-License-Identifier: MIT
// Mr::map_sg against the kernel's ib_sg_to_pages rules.
#include "core/device.h"
#include "test_objects.h"

#include <gtest/gtest.h>

#include <vector>

namespace ulp
{
namespace
{

using test::TestDevice;
using test::TestPd;

constexpr uint32_t kPage = 4096;

class MapSg : public ::testing::Test
{
protected:
	TestDevice dev{"mapsg0"};
	TestPd pd{dev};

	std::unique_ptr<Mr> mr(uint32_t max_num_sg) { return pd.alloc_mr(max_num_sg); }
	static std::vector<uint64_t> pages(const Mr &m)
	{
		return {m.page_list().begin(), m.page_list().end()};
	}
};

TEST_F(MapSg, AlignedEntries)
{
	auto m = mr(16);
	SgEntry sg[] = {{0x10000, 2 * kPage}, {0x20000, kPage}};
	unsigned off = 0;
	EXPECT_EQ(m->map_sg(sg, &off, kPage), 2);
	EXPECT_EQ(pages(*m), (std::vector<uint64_t>{0x10000, 0x11000, 0x20000}));
	EXPECT_EQ(m->iova(), 0x10000u);
	EXPECT_EQ(m->length(), 3u * kPage);
	EXPECT_EQ(m->page_size(), kPage);
	EXPECT_EQ(off, 0u);
}

TEST_F(MapSg, NullOffsetPointer)
{
	auto m = mr(16);
	SgEntry sg[] = {{0x10000, kPage}};
	EXPECT_EQ(m->map_sg(sg, nullptr, kPage), 1);
	EXPECT_EQ(pages(*m), (std::vector<uint64_t>{0x10000}));
}

TEST_F(MapSg, UnalignedFirstEntry)
{
	auto m = mr(16);
	// Starts 0x100 into a page, ends on the boundary at 0x12000.
	SgEntry sg[] = {{0x10100, 0x1f00}, {0x30000, 0x10}};
	unsigned off = 0;
	EXPECT_EQ(m->map_sg(sg, &off, kPage), 2);
	EXPECT_EQ(pages(*m), (std::vector<uint64_t>{0x10000, 0x11000, 0x30000}));
	EXPECT_EQ(m->iova(), 0x10100u);
	EXPECT_EQ(m->length(), 0x1f10u);
}

TEST_F(MapSg, SgOffsetIntoFirstEntry)
{
	auto m = mr(16);
	SgEntry sg[] = {{0x10000, 0x3000}};
	unsigned off = 0x1800;
	EXPECT_EQ(m->map_sg(sg, &off, kPage), 1);
	EXPECT_EQ(m->iova(), 0x11800u);
	EXPECT_EQ(pages(*m), (std::vector<uint64_t>{0x11000, 0x12000}));
	EXPECT_EQ(m->length(), 0x1800u);
	EXPECT_EQ(off, 0u);
}

TEST_F(MapSg, LastEntryMayEndUnaligned)
{
	auto m = mr(16);
	SgEntry sg[] = {{0x10000, kPage}, {0x20000, 0x10}};
	EXPECT_EQ(m->map_sg(sg, nullptr, kPage), 2);
	EXPECT_EQ(pages(*m), (std::vector<uint64_t>{0x10000, 0x20000}));
	EXPECT_EQ(m->length(), kPage + 0x10u);
}

TEST_F(MapSg, GapAfterUnalignedEndStops)
{
	auto m = mr(16);
	// Entry 0 ends mid-page and entry 1 does not continue it: only entry 0 maps.
	SgEntry sg[] = {{0x10000, 0x800}, {0x20000, kPage}};
	unsigned off = 0;
	EXPECT_EQ(m->map_sg(sg, &off, kPage), 1);
	EXPECT_EQ(pages(*m), (std::vector<uint64_t>{0x10000}));
	EXPECT_EQ(m->length(), 0x800u);
	EXPECT_EQ(off, 0u); // entry 1 is unmapped from its start
}

TEST_F(MapSg, UnalignedStartOfLaterEntryStops)
{
	auto m = mr(16);
	SgEntry sg[] = {{0x10000, kPage}, {0x20000, kPage}, {0x30010, 0x100}};
	EXPECT_EQ(m->map_sg(sg, nullptr, kPage), 2);
	EXPECT_EQ(pages(*m), (std::vector<uint64_t>{0x10000, 0x20000}));
	EXPECT_EQ(m->length(), 2u * kPage);
}

TEST_F(MapSg, ContiguousEntriesCoalesce)
{
	auto m = mr(16);
	// Virtually contiguous across an unaligned boundary: legal, merged like the kernel.
	SgEntry sg[] = {{0x10000, 0x800}, {0x10800, 0x1000}, {0x11800, 0x800}};
	EXPECT_EQ(m->map_sg(sg, nullptr, kPage), 3);
	EXPECT_EQ(pages(*m), (std::vector<uint64_t>{0x10000, 0x11000}));
	EXPECT_EQ(m->length(), 0x2000u);
}

TEST_F(MapSg, SmallContiguousEntriesShareOnePage)
{
	auto m = mr(16);
	SgEntry sg[] = {{0x10000, 0x100}, {0x10100, 0x100}, {0x10200, 0x100}};
	EXPECT_EQ(m->map_sg(sg, nullptr, kPage), 3);
	EXPECT_EQ(pages(*m), (std::vector<uint64_t>{0x10000}));
	EXPECT_EQ(m->length(), 0x300u);
}

TEST_F(MapSg, PageListFullInsideEntryResumes)
{
	auto m = mr(4);
	SgEntry sg[] = {{0x10000, 0x6000}};
	unsigned off = 0;
	// Six pages into four slots: no whole entry mapped, but progress is reported via off.
	EXPECT_EQ(m->map_sg(sg, &off, kPage), 0);
	EXPECT_EQ(pages(*m), (std::vector<uint64_t>{0x10000, 0x11000, 0x12000, 0x13000}));
	EXPECT_EQ(m->length(), 0x4000u);
	EXPECT_EQ(off, 0x4000u);

	// The caller continues with a second MR (or the same one after REG_MR) from there.
	EXPECT_EQ(m->map_sg(sg, &off, kPage), 1);
	EXPECT_EQ(m->iova(), 0x14000u);
	EXPECT_EQ(pages(*m), (std::vector<uint64_t>{0x14000, 0x15000}));
	EXPECT_EQ(m->length(), 0x2000u);
	EXPECT_EQ(off, 0u);
}

TEST_F(MapSg, PageListFullInLaterEntry)
{
	auto m = mr(3);
	SgEntry sg[] = {{0x10000, 0x2000}, {0x20000, 0x2000}};
	unsigned off = 0;
	EXPECT_EQ(m->map_sg(sg, &off, kPage), 1);
	EXPECT_EQ(pages(*m), (std::vector<uint64_t>{0x10000, 0x11000, 0x20000}));
	EXPECT_EQ(m->length(), 0x3000u);
	EXPECT_EQ(off, 0x1000u); // entry 1 resumes one page in
}

TEST_F(MapSg, PageListFullAtEntryBoundary)
{
	auto m = mr(2);
	SgEntry sg[] = {{0x10000, 0x2000}, {0x20000, 0x1000}};
	unsigned off = 0;
	EXPECT_EQ(m->map_sg(sg, &off, kPage), 1);
	EXPECT_EQ(pages(*m), (std::vector<uint64_t>{0x10000, 0x11000}));
	EXPECT_EQ(m->length(), 0x2000u);
	EXPECT_EQ(off, 0u);
}

TEST_F(MapSg, PageListFullWithUnalignedFirstEntry)
{
	// The kernel returns an underflowed offset here; we stop at the first uncovered byte.
	auto m = mr(1);
	SgEntry sg[] = {{0x10100, 0x2000}};
	unsigned off = 0;
	EXPECT_EQ(m->map_sg(sg, &off, kPage), 0);
	EXPECT_EQ(pages(*m), (std::vector<uint64_t>{0x10000}));
	EXPECT_EQ(m->iova(), 0x10100u);
	EXPECT_EQ(m->length(), 0xf00u);
	EXPECT_EQ(off, 0xf00u);
}

TEST_F(MapSg, LargePageSize)
{
	auto m = mr(4);
	SgEntry sg[] = {{0x10000, 0x20000}};
	EXPECT_EQ(m->map_sg(sg, nullptr, 0x10000), 1);
	EXPECT_EQ(pages(*m), (std::vector<uint64_t>{0x10000, 0x20000}));
	EXPECT_EQ(m->page_size(), 0x10000u);
}

TEST_F(MapSg, RejectsBadArguments)
{
	auto m = mr(4);
	SgEntry sg[] = {{0x10000, 0x1000}};
	unsigned off = 0;
	EXPECT_EQ(m->map_sg(sg, &off, 2048), -EINVAL);  // below 4096
	EXPECT_EQ(m->map_sg(sg, &off, 6000), -EINVAL);  // not a power of two
	EXPECT_EQ(m->map_sg({}, &off, kPage), -EINVAL); // no entries
	off = 0x1001;
	EXPECT_EQ(m->map_sg(sg, &off, kPage), -EINVAL); // offset past the entry
	auto user = pd.reg_mr(reinterpret_cast<void *>(0x10000), 0x1000, 0);
	off = 0;
	EXPECT_EQ(user->map_sg(sg, &off, kPage), -EINVAL); // not a fast-reg MR
}

TEST_F(MapSg, RespectsPageSizeCap)
{
	DeviceAttr a;
	a.page_size_cap = kPage; // 4 KiB pages only
	TestDevice d("mapsg-cap", a);
	TestPd p(d);
	auto m = p.alloc_mr(4);
	SgEntry sg[] = {{0x10000, 0x10000}};
	EXPECT_EQ(m->map_sg(sg, nullptr, 0x10000), -EINVAL);
	EXPECT_EQ(m->map_sg(sg, nullptr, kPage), 0); // 16 pages into 4: no entry whole
	unsigned off = 0;
	EXPECT_EQ(m->map_sg(sg, &off, kPage), 0);
	EXPECT_EQ(off, 0x4000u);
}

TEST_F(MapSg, SgGapsDeviceRecordsRuns)
{
	DeviceAttr a;
	a.device_cap_flags = DEVICE_MEM_MGT_EXTENSIONS | DEVICE_SG_GAPS_REG;
	TestDevice d("mapsg-gaps", a);
	TestPd p(d);
	auto m = p.alloc_mr(8);
	SgEntry sg[] = {{0x10100, 0x100}, {0x20300, 0x50}, {0x30000, 0x2000}};
	unsigned off = 0x10;
	EXPECT_EQ(m->map_sg(sg, &off, kPage), 3);
	EXPECT_EQ(std::vector<uint64_t>(m->page_list().begin(), m->page_list().end()),
	          (std::vector<uint64_t>{0x10110, 0xf0, 0x20300, 0x50, 0x30000, 0x2000}));
	EXPECT_EQ(m->iova(), 0x10110u);
	EXPECT_EQ(m->length(), 0xf0u + 0x50u + 0x2000u);
	EXPECT_EQ(off, 0u);

	// Two slots per run: a 4-slot MR takes two entries.
	auto small = p.alloc_mr(4);
	EXPECT_EQ(small->map_sg(sg, nullptr, kPage), 2);
	EXPECT_EQ(small->page_list().size(), 4u);
}

// DEVICE_REG_MR_CONTIG (fast-reg MRs are memory windows): aligned entries that the
// kernel's rule would map into one page list with a hole stop the mapping instead; an
// entry continuing the previous one exactly is still merged.
TEST_F(MapSg, ContigDeviceStopsAtEveryDiscontinuity)
{
	DeviceAttr a;
	a.device_cap_flags = DEVICE_MEM_MGT_EXTENSIONS | DEVICE_REG_MR_CONTIG;
	TestDevice d("mapsg-contig", a);
	TestPd p(d);
	auto m = p.alloc_mr(16);
	SgEntry sg[] = {
	    {0x10000, kPage}, {0x11000, 0x80}, {0x11080, kPage - 0x80}, {0x20000, kPage}};
	unsigned off = 0;
	EXPECT_EQ(m->map_sg(sg, &off, kPage), 3); // the aligned jump to 0x20000 ends it
	EXPECT_EQ(pages(*m), (std::vector<uint64_t>{0x10000, 0x11000}));
	EXPECT_EQ(m->iova(), 0x10000u);
	EXPECT_EQ(m->length(), 2u * kPage);
	EXPECT_EQ(off, 0u);

	// The same list on an ordinary device: one MR with a hole, as ib_sg_to_pages does.
	auto k = mr(16);
	EXPECT_EQ(k->map_sg(sg, nullptr, kPage), 4);
	EXPECT_EQ(pages(*k), (std::vector<uint64_t>{0x10000, 0x11000, 0x20000}));
}

// A provider's mapped() hook: it sees the finished mapping, may give it a local key of
// its own (which key rotation then leaves alone), and fails map_sg with its errno.
class HookMr : public Mr
{
public:
	HookMr(Pd &pd, uint32_t key) : Mr(pd, key, key, 0, 0, 8) {}
	int result = 0;     // what mapped() returns
	uint32_t local = 0; // the local key it sets, when result is 0
	uint64_t seen_iova = 0;

protected:
	int mapped() override
	{
		seen_iova = iova();
		if (result == 0)
			set_local_key(local);
		return result;
	}
};

TEST_F(MapSg, MappedHookSetsLocalKeyOrFails)
{
	HookMr m(pd, 0x4200);
	m.local = 0x777711;
	SgEntry sg[] = {{0x10040, 0x100}};
	EXPECT_EQ(m.map_sg(sg, nullptr, kPage), 1);
	EXPECT_EQ(m.seen_iova, 0x10040u);
	EXPECT_EQ(m.lkey(), 0x777711u);
	EXPECT_EQ(m.rkey(), 0x4200u);
	m.inc_rkey();
	EXPECT_EQ(m.rkey(), 0x4201u);
	EXPECT_EQ(m.lkey(), 0x777711u) << "a provider's local key is not the MR's to rotate";

	m.result = -EINVAL;
	EXPECT_EQ(m.map_sg(sg, nullptr, kPage), -EINVAL);
	EXPECT_TRUE(m.page_list().empty());
	EXPECT_EQ(m.length(), 0u);
}

TEST_F(MapSg, IncRkeyRotatesKeyByteOfBothKeys)
{
	auto m = pd.reg_mr(reinterpret_cast<void *>(0x10000), 0x1000, 0);
	uint32_t l = m->lkey(), r = m->rkey();
	ASSERT_NE(l, r);
	m->inc_rkey();
	EXPECT_EQ(m->rkey(), inc_rkey(r));
	EXPECT_EQ(key_index(m->lkey()), key_index(l)); // index part untouched
	EXPECT_EQ(key_byte(m->lkey()), key_byte(m->rkey()));
	m->update_key(0xff);
	EXPECT_EQ(key_byte(m->rkey()), 0xff);
	m->inc_rkey(); // wraps within the byte, never carries into the index
	EXPECT_EQ(key_byte(m->rkey()), 0);
	EXPECT_EQ(key_index(m->rkey()), key_index(r));
	EXPECT_EQ(key_byte(m->lkey()), 0);
}

} // namespace
} // namespace ulp
