// SPDX-License-Identifier: MIT
// DmaHeap: the buddy allocator's blocks (size, alignment, no overlap), splitting and
// merging back to whole blocks, exhaustion, bad frees, the memory map entry, a random
// workload checked against a model, and threads that allocate and free at once, each
// through its shard's cache, freeing each other's blocks.
#include "core/dma_heap.h"
#include "core/mem_map.h"
#include "test_objects.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <map>
#include <random>
#include <thread>
#include <vector>

namespace ulp
{
namespace
{

constexpr size_t KiB = 1024, MiB = 1024 * KiB;

class DmaHeaps : public ::testing::Test
{
protected:
	test::TestDevice dev{"dmaheap0"};
	test::TestPd pd{dev};
};

TEST_F(DmaHeaps, BlocksAreAlignedSizedAndInsideTheRegion)
{
	auto h = DmaHeap::create(pd, 4 * MiB, 1 * MiB, ACCESS_LOCAL_WRITE);
	ASSERT_TRUE(h);
	EXPECT_EQ(h->capacity(), 4 * MiB);
	EXPECT_EQ(h->max_alloc(), 1 * MiB);
	const uintptr_t lo = h->mr().iova(), hi = lo + h->mr().length();
	struct Want {
		size_t len, block;
	} wants[] = {{1, 4 * KiB},         {4096, 4 * KiB},    {4097, 8 * KiB},
	             {64 * KiB, 64 * KiB}, {1 * MiB, 1 * MiB}, {700 * KiB, 1 * MiB}};
	size_t used = 0;
	std::vector<void *> got;
	for (auto w : wants) {
		void *p = h->alloc(w.len);
		ASSERT_NE(p, nullptr) << w.len;
		auto a = reinterpret_cast<uintptr_t>(p);
		EXPECT_EQ((a - lo) % w.block, 0u) << w.len << ": aligned to its size in the region";
		EXPECT_GE(a, lo);
		EXPECT_LE(a + w.len, hi);
		std::memset(p, 0x5a, w.len);
		got.push_back(p);
		used += w.block;
		EXPECT_EQ(h->in_use(), used);
	}
	EXPECT_EQ(h->alloc(0), nullptr);
	EXPECT_EQ(h->alloc(1 * MiB + 1), nullptr) << "beyond max_alloc";
	for (void *p : got)
		h->free(p);
	EXPECT_EQ(h->in_use(), 0u);
}

TEST_F(DmaHeaps, SplitsAndMergesBackToWholeBlocks)
{
	auto h = DmaHeap::create(pd, 2 * MiB, 1 * MiB, ACCESS_LOCAL_WRITE);
	ASSERT_TRUE(h);
	// 512 blocks of 4 KiB take the whole region; then nothing fits.
	std::vector<void *> small;
	for (int i = 0; i < 512; i++) {
		void *p = h->alloc(4096);
		ASSERT_NE(p, nullptr) << i;
		small.push_back(p);
	}
	EXPECT_EQ(h->alloc(4096), nullptr);
	EXPECT_EQ(h->in_use(), 2 * MiB);
	// Freed in a scattered order, they merge back: both 1 MiB blocks are whole again.
	std::mt19937 rng(7);
	std::shuffle(small.begin(), small.end(), rng);
	for (void *p : small)
		h->free(p);
	EXPECT_EQ(h->in_use(), 0u);
	void *a = h->alloc(1 * MiB), *b = h->alloc(1 * MiB);
	EXPECT_NE(a, nullptr);
	EXPECT_NE(b, nullptr);
	EXPECT_EQ(h->alloc(4096), nullptr);
	h->free(a);
	h->free(b);
}

TEST_F(DmaHeaps, BadFreesAreReportedAndIgnored)
{
	auto h = DmaHeap::create(pd, 1 * MiB, 1 * MiB, ACCESS_LOCAL_WRITE);
	ASSERT_TRUE(h);
	auto *p = static_cast<uint8_t *>(h->alloc(8192));
	ASSERT_NE(p, nullptr);
	h->free(p + 4096); // inside the block, not its start
	h->free(p + 1);    // not even unit aligned
	int outside = 0;
	h->free(&outside);
	EXPECT_EQ(h->in_use(), 8192u);
	h->free(p);
	h->free(p); // double free
	EXPECT_EQ(h->in_use(), 0u);
	void *whole = h->alloc(1 * MiB);
	EXPECT_NE(whole, nullptr) << "the double free must not have corrupted it";
	h->free(whole);
}

TEST_F(DmaHeaps, EntersTheMemoryMap)
{
	MemMap map;
	{
		auto h = DmaHeap::create(pd, 1 * MiB, 256 * KiB, ACCESS_LOCAL_WRITE, &map);
		ASSERT_TRUE(h);
		void *p = h->alloc(10000);
		MemTranslation t;
		ASSERT_EQ(map.translate(p, 10000, &t), 0);
		EXPECT_EQ(t.lkey, h->lkey());
		h->free(p);
	}
	EXPECT_EQ(map.size(), 0u);
}

TEST_F(DmaHeaps, RejectsBadSizes)
{
	EXPECT_FALSE(DmaHeap::create(pd, 1 * MiB, 3 * KiB, ACCESS_LOCAL_WRITE));
	EXPECT_FALSE(DmaHeap::create(pd, 1 * MiB, 12 * KiB, ACCESS_LOCAL_WRITE));
	EXPECT_FALSE(DmaHeap::create(pd, 0, 64 * KiB, ACCESS_LOCAL_WRITE));
}

// Random allocations and frees against a model: live blocks never overlap, their contents
// survive the neighbours' traffic, and everything merges back at the end.
TEST_F(DmaHeaps, RandomWorkloadAgainstAModel)
{
	auto h = DmaHeap::create(pd, 8 * MiB, 1 * MiB, ACCESS_LOCAL_WRITE);
	ASSERT_TRUE(h);
	std::mt19937 rng(11);
	std::map<uintptr_t, std::pair<size_t, uint8_t>> live; // start -> (len, fill)
	for (int step = 0; step < 20000; step++) {
		if (live.empty() || rng() % 3) {
			size_t len = 1 + rng() % (1 << (rng() % 20 + 1));
			len = std::min(len, 1 * MiB);
			void *p = h->alloc(len);
			if (!p)
				continue;
			auto a = reinterpret_cast<uintptr_t>(p);
			auto next = live.lower_bound(a);
			if (next != live.end()) {
				ASSERT_LE(a + len, next->first) << "overlaps the next block";
			}
			if (next != live.begin()) {
				auto prev = std::prev(next);
				ASSERT_LE(prev->first + prev->second.first, a)
				    << "overlaps the previous";
			}
			uint8_t fill = uint8_t(rng());
			std::memset(p, fill, len);
			live[a] = {len, fill};
		} else {
			auto it = live.begin();
			std::advance(it, rng() % live.size());
			auto *p = reinterpret_cast<uint8_t *>(it->first);
			for (size_t i = 0; i < it->second.first; i += 997)
				ASSERT_EQ(p[i], it->second.second)
				    << "a neighbour wrote into this block";
			h->free(p);
			live.erase(it);
		}
	}
	for (auto &[a, v] : live)
		h->free(reinterpret_cast<void *>(a));
	EXPECT_EQ(h->in_use(), 0u);
	std::vector<void *> whole;
	for (int i = 0; i < 8; i++)
		whole.push_back(h->alloc(1 * MiB));
	for (void *p : whole)
		EXPECT_NE(p, nullptr) << "fragments left behind";
	for (void *p : whole)
		h->free(p);
}

TEST_F(DmaHeaps, ThreadsFreeEachOthersBlocksThroughTheirCaches)
{
	// Four threads, each its own shard's cache: rounds of blocks from 4 KiB to 256 KiB
	// (cached and not), filled with the owner's mark; then each thread checks and frees
	// the blocks of the next one. No block may be handed out twice (a mark overwritten),
	// and at the end nothing is in use and the region comes back whole.
	constexpr int kThreads = 4, kRounds = 200, kPer = 16;
	auto h = DmaHeap::create(pd, 32 * MiB, 1 * MiB, ACCESS_LOCAL_WRITE);
	ASSERT_TRUE(h);
	std::vector<std::vector<std::pair<uint8_t *, size_t>>> got(kThreads);
	std::atomic<int> arrived{0}, bad{0}, none{0};
	auto barrier = [&](int gen) {
		arrived.fetch_add(1);
		while (arrived.load() < gen * kThreads)
			std::this_thread::yield();
	};
	std::vector<std::thread> th;
	for (int t = 0; t < kThreads; t++)
		th.emplace_back([&, t] {
			std::mt19937 rng(uint32_t(t + 1));
			for (int r = 0; r < kRounds; r++) {
				auto &mine = got[size_t(t)];
				for (int i = 0; i < kPer; i++) {
					const size_t len = size_t(4 * KiB) << (rng() % 7);
					auto *p = static_cast<uint8_t *>(h->alloc(len));
					if (!p) {
						none++;
						continue;
					}
					std::memset(p, t + 1, len);
					mine.emplace_back(p, len);
				}
				barrier(2 * r + 1);
				auto &theirs = got[size_t((t + 1) % kThreads)];
				for (auto [p, len] : theirs) {
					if (p[0] != uint8_t((t + 1) % kThreads + 1) ||
					    p[len - 1] != uint8_t((t + 1) % kThreads + 1))
						bad++;
					h->free(p);
				}
				theirs.clear();
				barrier(2 * r + 2);
			}
		});
	for (auto &x : th)
		x.join();
	EXPECT_EQ(bad.load(), 0) << "a block was handed out twice";
	EXPECT_EQ(none.load(), 0)
	    << "the region ran out (32 MiB; at most 64 blocks of 256 KiB live)";
	EXPECT_EQ(h->in_use(), 0u);
	std::vector<void *> whole;
	for (int i = 0; i < 32; i++)
		whole.push_back(h->alloc(1 * MiB));
	for (void *p : whole)
		EXPECT_NE(p, nullptr) << "cached blocks kept the region from merging back";
	for (void *p : whole)
		h->free(p);
}

} // namespace
} // namespace ulp
