// SPDX-License-Identifier: MIT
// tests/core/shard_counters_test.cc - ShardCounters (core/shard_counters.h): each field is
// its own counter, threads adding at once lose nothing, and a read sums every shard.
#include "core/shard_counters.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

namespace ulp
{
namespace
{

struct Three {
	uint64_t a = 0; // first
	uint64_t b = 0; // middle
	uint64_t c = 0; // last
};

TEST(ShardCounters, EachFieldCountsOnItsOwn)
{
	ShardCounters<Three> k;
	k.add(&Three::a);
	k.add(&Three::b, 5);
	k.add(&Three::c, 7);
	k.add(&Three::c);
	const Three t = k.read();
	EXPECT_EQ(t.a, 1u);
	EXPECT_EQ(t.b, 5u);
	EXPECT_EQ(t.c, 8u);
	// add_to adds onto what the caller has (a struct's lock-held counters, say).
	Three base;
	base.a = 100;
	base.c = 1;
	k.add_to(&base);
	EXPECT_EQ(base.a, 101u);
	EXPECT_EQ(base.b, 5u);
	EXPECT_EQ(base.c, 9u);
}

TEST(ShardCounters, ThreadsAddingAtOnceLoseNothing)
{
	// More threads than shards: some share one, which must still count exactly.
	constexpr int kThreads = int(kShards) + 8, kEach = 20000;
	ShardCounters<Three> k;
	std::vector<std::thread> th;
	std::atomic<bool> go{false};
	for (int i = 0; i < kThreads; i++)
		th.emplace_back([&, i] {
			while (!go.load())
				std::this_thread::yield();
			for (int n = 0; n < kEach; n++) {
				k.add(&Three::a);
				if (i % 2)
					k.add(&Three::b, 2);
			}
		});
	go = true;
	Three mid = k.read(); // while they count: no more than the end, never torn
	for (auto &t : th)
		t.join();
	const Three t = k.read();
	EXPECT_LE(mid.a, t.a);
	EXPECT_EQ(t.a, uint64_t(kThreads) * kEach);
	EXPECT_EQ(t.b, uint64_t(kThreads / 2) * kEach * 2);
	EXPECT_EQ(t.c, 0u);
}

} // namespace
} // namespace ulp
