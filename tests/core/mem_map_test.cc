// SPDX-License-Identifier: MIT
// MemMap: address -> key translation.
#include "core/mem_map.h"
#include "test_objects.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

namespace ulp
{
namespace
{

const void *at(uintptr_t a)
{
	return reinterpret_cast<const void *>(a);
}

TEST(MemMap, HitsAndMisses)
{
	MemMap m;
	ASSERT_EQ(m.register_region(at(0x10000), 0x1000, {0x101, 0x201, nullptr}), 0);
	ASSERT_EQ(m.register_region(at(0x30000), 0x2000, {0x102, 0x202, nullptr}), 0);
	EXPECT_EQ(m.size(), 2u);

	MemTranslation t;
	ASSERT_EQ(m.translate(at(0x10000), 0x1000, &t), 0); // all of it
	EXPECT_EQ(t.lkey, 0x101u);
	EXPECT_EQ(t.rkey, 0x201u);
	ASSERT_EQ(m.translate(at(0x31234), 16, &t), 0);
	EXPECT_EQ(t.lkey, 0x102u);
	ASSERT_EQ(m.translate(at(0x31fff), 1, &t), 0); // last byte
	EXPECT_EQ(t.lkey, 0x102u);
	ASSERT_EQ(m.translate(at(0x31fff), 0, &t), 0); // len 0: the byte at addr

	EXPECT_EQ(m.translate(at(0xffff), 1, &t), -ENOENT);   // just before
	EXPECT_EQ(m.translate(at(0x11000), 1, &t), -ENOENT);  // one past the end
	EXPECT_EQ(m.translate(at(0x20000), 16, &t), -ENOENT); // between regions
	EXPECT_EQ(m.translate(at(0x40000), 16, &t), -ENOENT); // after all
	EXPECT_EQ(m.translate(at(0x0), 16, &t), -ENOENT);
	EXPECT_EQ(m.translate(at(UINTPTR_MAX - 4), 16, &t), -ENOENT); // wraps
}

TEST(MemMap, StraddlingRangesMiss)
{
	MemMap m;
	// Two adjacent regions: a range across the seam is in neither.
	ASSERT_EQ(m.register_region(at(0x10000), 0x1000, {1, 1, nullptr}), 0);
	ASSERT_EQ(m.register_region(at(0x11000), 0x1000, {2, 2, nullptr}), 0);
	MemTranslation t;
	EXPECT_EQ(m.translate(at(0x10ff0), 0x20, &t), -ENOENT);
	EXPECT_EQ(m.translate(at(0x10ff0), 0x10, &t), 0);
	EXPECT_EQ(t.lkey, 1u);
	EXPECT_EQ(m.translate(at(0x11000), 0x10, &t), 0);
	EXPECT_EQ(t.lkey, 2u);
	EXPECT_EQ(m.translate(at(0x11ff0), 0x11, &t), -ENOENT); // past the end of the last
}

TEST(MemMap, OverlapsRejected)
{
	MemMap m;
	ASSERT_EQ(m.register_region(at(0x10000), 0x2000, {1, 1, nullptr}), 0);
	EXPECT_EQ(m.register_region(at(0x10000), 0x2000, {2, 2, nullptr}), -EEXIST);
	EXPECT_EQ(m.register_region(at(0x11000), 0x2000, {2, 2, nullptr}), -EEXIST);
	EXPECT_EQ(m.register_region(at(0xf000), 0x1001, {2, 2, nullptr}), -EEXIST);
	EXPECT_EQ(m.register_region(at(0x8000), 0x20000, {2, 2, nullptr}), -EEXIST); // covers it
	EXPECT_EQ(m.register_region(at(0x10800), 0x100, {2, 2, nullptr}), -EEXIST);  // inside it
	EXPECT_EQ(m.register_region(at(0xf000), 0x1000, {2, 2, nullptr}), 0);        // touching
	EXPECT_EQ(m.register_region(at(0x12000), 0x1000, {3, 3, nullptr}), 0);
	EXPECT_EQ(m.register_region(at(0x20000), 0, {4, 4, nullptr}), -EINVAL);
	EXPECT_EQ(m.register_region(at(UINTPTR_MAX - 10), 100, {4, 4, nullptr}), -EINVAL);
	EXPECT_EQ(m.size(), 3u);
}

TEST(MemMap, Unregister)
{
	MemMap m;
	ASSERT_EQ(m.register_region(at(0x10000), 0x1000, {1, 1, nullptr}), 0);
	EXPECT_EQ(m.unregister_region(at(0x10000), 0x800), -ENOENT); // length must match
	EXPECT_EQ(m.unregister_region(at(0x10800), 0x800), -ENOENT);
	EXPECT_EQ(m.unregister_region(at(0x10000), 0x1000), 0);
	EXPECT_EQ(m.unregister_region(at(0x10000), 0x1000), -ENOENT);
	MemTranslation t;
	EXPECT_EQ(m.translate(at(0x10000), 1, &t), -ENOENT);
	EXPECT_EQ(m.size(), 0u);
	// The range is free again.
	EXPECT_EQ(m.register_region(at(0x10000), 0x1000, {5, 5, nullptr}), 0);
}

TEST(MemMap, RegisterMr)
{
	test::TestDevice d("memmap0");
	test::TestPd pd(d);
	std::vector<uint8_t> buf(8192);
	auto mr = pd.reg_mr(buf.data(), buf.size(), ACCESS_LOCAL_WRITE);
	MemMap m;
	ASSERT_EQ(m.register_mr(*mr), 0);
	MemTranslation t;
	ASSERT_EQ(m.translate(buf.data() + 100, 200, &t), 0);
	EXPECT_EQ(t.lkey, mr->lkey());
	EXPECT_EQ(t.rkey, mr->rkey());
	EXPECT_EQ(t.mr, mr.get());
	EXPECT_EQ(m.translate(buf.data() + 8000, 200, &t), -ENOENT);
}

TEST(MemMap, ConcurrentTranslateWhileRegistering)
{
	MemMap m;
	// A fixed region in the middle of the churn: it must translate every single time.
	ASSERT_EQ(m.register_region(at(0x1000000), 0x10000, {0xabc, 0xdef, nullptr}), 0);
	std::atomic<bool> stop{false};
	std::atomic<uint64_t> hits{0}, wrong{0};
	auto reader = [&] {
		MemTranslation t;
		uint64_t i = 0;
		while (!stop.load(std::memory_order_relaxed)) {
			int r = m.translate(at(0x1000000 + (i++ % 0xff00)), 0x100, &t);
			if (r != 0 || t.lkey != 0xabc)
				wrong++;
			else
				hits++;
			// A region being churned: either absent or consistent.
			if (m.translate(at(0x100000 + 0x1000 * (i % 64)), 16, &t) == 0 &&
			    t.lkey != 1000 + (i % 64))
				wrong++;
		}
	};
	std::thread r1(reader);
	// At least 200 rounds, and long enough that the reader really ran alongside.
	for (int round = 0; round < 200 || hits.load() < 10000; round++) {
		for (uintptr_t k = 0; k < 64; k++)
			ASSERT_EQ(m.register_region(at(0x100000 + 0x1000 * k), 0x1000,
			                            {uint32_t(1000 + k), 0, nullptr}),
			          0);
		for (uintptr_t k = 0; k < 64; k++)
			ASSERT_EQ(m.unregister_region(at(0x100000 + 0x1000 * k), 0x1000), 0);
	}
	stop = true;
	r1.join();
	EXPECT_EQ(wrong.load(), 0u);
	EXPECT_GT(hits.load(), 0u);
	EXPECT_EQ(m.size(), 1u);
}

} // namespace
} // namespace ulp
