// SPDX-License-Identifier: MIT
// The rbd backstore's allocation map (scsi/bs_rbd_alloc.h) without a cluster: what a walk
// installs, and the races it must never lose - a write during a walk, a write in flight when
// the walk reads the object map, a write beside an unmap, a resize during a walk - each of
// which must leave the object reported mapped, never deallocated.
#include "scsi/bs_rbd_alloc.h"

#include <gtest/gtest.h>

namespace ulp::scsi
{
namespace
{

constexpr uint64_t kObj = 4 << 20;
constexpr uint64_t kSize = 8 * kObj;

// Whether the object at index i is reported deallocated, alone or with its neighbours.
bool dealloc(RbdAllocMap &m, uint64_t i)
{
	BsExtent e;
	m.extent(i * kObj, kSize, &e);
	return !e.mapped;
}

// A walk that found data in the objects listed.
void walk(RbdAllocMap &m, std::vector<uint64_t> with_data, uint64_t size = kSize)
{
	std::vector<bool> a((size + kObj - 1) / kObj);
	for (uint64_t i : with_data)
		a[i] = true;
	EXPECT_TRUE(m.walk_ended(m.walk_started(), size, a, true));
}

TEST(RbdAllocMap, MappedUntilAWalkThenWhatItFound)
{
	RbdAllocMap m;
	m.init(kObj, kSize);
	BsExtent e;
	m.extent(0, kSize, &e);
	EXPECT_TRUE(e.mapped);
	EXPECT_EQ(e.length, kSize);
	EXPECT_FALSE(m.known());
	walk(m, {3});
	EXPECT_TRUE(m.known());
	m.extent(512, kSize, &e);
	EXPECT_FALSE(e.mapped);
	EXPECT_EQ(e.length, 3 * kObj - 512) << "to the end of the run";
	m.extent(3 * kObj + 100, kSize, &e);
	EXPECT_TRUE(e.mapped);
	EXPECT_EQ(e.length, kObj - 100);
	m.extent(4 * kObj, kSize, &e);
	EXPECT_FALSE(e.mapped);
	EXPECT_EQ(e.length, 4 * kObj);
	// A failed walk changes nothing.
	std::vector<bool> none(8);
	EXPECT_FALSE(m.walk_ended(m.walk_started(), kSize, none, false));
	EXPECT_FALSE(dealloc(m, 3));
}

TEST(RbdAllocMap, WritesMapAndQuietUnmapsOfWholeObjectsDeallocate)
{
	RbdAllocMap m;
	m.init(kObj, kSize);
	walk(m, {});
	m.write_started(2 * kObj - 512, 1024); // objects 1 and 2
	EXPECT_FALSE(dealloc(m, 1));
	EXPECT_FALSE(dealloc(m, 2));
	m.write_ended(2 * kObj - 512, 1024);
	// Object 1 whole and half of object 2: only 1 becomes deallocated.
	auto u = m.unmap_started();
	m.unmap_ended(kObj, kObj + kObj / 2, u, 0);
	EXPECT_TRUE(dealloc(m, 1));
	EXPECT_FALSE(dealloc(m, 2));
	// A failed unmap deallocates nothing.
	u = m.unmap_started();
	m.unmap_ended(2 * kObj, kObj, u, -5);
	EXPECT_FALSE(dealloc(m, 2));
}

TEST(RbdAllocMap, AnUnmapBesideAWriteDeallocatesNothing)
{
	RbdAllocMap m;
	m.init(kObj, kSize);
	walk(m, {0, 1, 2});
	// A write in flight as the unmap starts (it may land after the discard).
	m.write_started(0, 512);
	auto u = m.unmap_started();
	m.write_ended(0, 512);
	m.unmap_ended(0, kObj, u, 0);
	EXPECT_FALSE(dealloc(m, 0));
	// A write started while the unmap runs, on another object even.
	u = m.unmap_started();
	m.write_started(2 * kObj, 512);
	m.write_ended(2 * kObj, 512);
	m.unmap_ended(kObj, kObj, u, 0);
	EXPECT_FALSE(dealloc(m, 1));
}

TEST(RbdAllocMap, AWalkNeverUndoesAWriteItMayHaveMissed)
{
	RbdAllocMap m;
	m.init(kObj, kSize);
	walk(m, {});
	// Written while the walk runs: the walk did not see it.
	uint64_t t = m.walk_started();
	m.write_started(5 * kObj, 512);
	m.write_ended(5 * kObj, 512);
	m.walk_ended(t, kSize, std::vector<bool>(8), true);
	EXPECT_FALSE(dealloc(m, 5));
	// In flight before the walk started and after it ended: mapped again as it ends.
	walk(m, {});
	m.write_started(6 * kObj, 512);
	walk(m, {});
	m.write_ended(6 * kObj, 512);
	EXPECT_FALSE(dealloc(m, 6));
	// Unmapped while the walk runs (which saw the data): the unmap stands.
	walk(m, {4});
	t = m.walk_started();
	auto u = m.unmap_started();
	m.unmap_ended(4 * kObj, kObj, u, 0);
	std::vector<bool> saw(8);
	saw[4] = true;
	m.walk_ended(t, kSize, saw, true);
	EXPECT_TRUE(dealloc(m, 4));
}

TEST(RbdAllocMap, AResizeDiscardsTheWalkAndKnowsNothingPastTheMap)
{
	RbdAllocMap m;
	m.init(kObj, kSize);
	walk(m, {});
	const uint64_t t = m.walk_started();
	m.resize(kSize + kObj);
	EXPECT_FALSE(m.walk_ended(t, kSize, std::vector<bool>(8, true), true));
	EXPECT_TRUE(dealloc(m, 0)) << "the walk of the old size was discarded";
	EXPECT_FALSE(dealloc(m, 8)) << "a new object is not known deallocated";
	// A size larger than the map (not told yet): a deallocated run stops at its end.
	BsExtent e;
	m.extent(0, kSize + 3 * kObj, &e);
	EXPECT_FALSE(e.mapped);
	EXPECT_EQ(e.length, 8 * kObj);
	walk(m, {}, kSize + kObj);
	m.extent(8 * kObj, kSize + 3 * kObj, &e);
	EXPECT_FALSE(e.mapped);
	EXPECT_EQ(e.length, kObj);
	m.extent(9 * kObj, kSize + 3 * kObj, &e);
	EXPECT_TRUE(e.mapped);
	EXPECT_EQ(e.length, 2 * kObj);
}

} // namespace
} // namespace ulp::scsi
