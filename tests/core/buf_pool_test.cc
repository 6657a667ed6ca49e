// SPDX-License-Identifier: MIT
// BufPool: registered buffers, LIFO reuse, exhaustion, the memory map entry.
#include "core/buf_pool.h"
#include "core/mem_map.h"
#include "test_objects.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <set>
#include <thread>
#include <vector>

namespace ulp
{
namespace
{

class BufPools : public ::testing::Test
{
protected:
	test::TestDevice dev{"bufpool0"};
	test::TestPd pd{dev};
};

TEST_F(BufPools, GetUntilEmptyThenPutBack)
{
	auto p = BufPool::create(pd, 100, 8, ACCESS_LOCAL_WRITE);
	ASSERT_TRUE(p);
	EXPECT_EQ(p->count(), 8u);
	EXPECT_EQ(p->buf_size(), 100u);
	EXPECT_EQ(p->stride(), 128u); // 64-byte aligned
	EXPECT_EQ(p->in_use(), 0u);

	std::vector<const Buf *> out;
	std::set<void *> addrs;
	for (int i = 0; i < 8; i++) {
		const Buf *b = p->get();
		ASSERT_NE(b, nullptr);
		EXPECT_EQ(reinterpret_cast<uintptr_t>(b->addr) % 64, 0u);
		EXPECT_EQ(b->lkey, p->mr().lkey());
		EXPECT_EQ(b->rkey, p->mr().rkey());
		// Inside the registered region.
		auto a = reinterpret_cast<uintptr_t>(b->addr);
		EXPECT_GE(a, p->mr().iova());
		EXPECT_LE(a + 100, p->mr().iova() + p->mr().length());
		std::memset(b->addr, 0xa5, 100); // usable memory
		addrs.insert(b->addr);
		out.push_back(b);
	}
	EXPECT_EQ(addrs.size(), 8u); // distinct
	EXPECT_EQ(p->in_use(), 8u);
	EXPECT_EQ(p->get(), nullptr); // exhausted
	EXPECT_EQ(p->in_use(), 8u);

	for (const Buf *b : out)
		p->put(b);
	EXPECT_EQ(p->in_use(), 0u);
}

TEST_F(BufPools, FreshPoolInAddressOrderThenLifo)
{
	auto p = BufPool::create(pd, 64, 4, 0);
	ASSERT_TRUE(p);
	const Buf *a = p->get(), *b = p->get(), *c = p->get();
	EXPECT_LT(a->addr, b->addr);
	EXPECT_LT(b->addr, c->addr);
	p->put(a);
	p->put(c);
	EXPECT_EQ(p->get(), c); // last put, first out
	EXPECT_EQ(p->get(), a);
	const Buf *d = p->get(); // the one never used
	EXPECT_NE(d, nullptr);
	EXPECT_NE(d, a);
	EXPECT_NE(d, b);
	EXPECT_NE(d, c);
	EXPECT_EQ(p->get(), nullptr);
	for (const Buf *x : {a, b, c, d})
		p->put(x);
}

TEST_F(BufPools, PageAlignmentForLargeBuffers)
{
	auto p = BufPool::create(pd, 4096, 3, 0);
	ASSERT_TRUE(p);
	EXPECT_EQ(p->stride(), 4096u);
	auto q = BufPool::create(pd, 5000, 3, 0);
	ASSERT_TRUE(q);
	EXPECT_EQ(q->stride(), 8192u);
	const Buf *b = q->get();
	EXPECT_EQ(reinterpret_cast<uintptr_t>(b->addr) % 4096, 0u);
	q->put(b);
}

TEST_F(BufPools, RegionIsDmaMemoryWithOneMr)
{
	auto p = BufPool::create(pd, 512, 16, ACCESS_LOCAL_WRITE | ACCESS_REMOTE_READ);
	ASSERT_TRUE(p);
	EXPECT_EQ(dma_lookup(p->region().addr(), p->region().length()), &p->region());
	EXPECT_EQ(p->mr().iova(), reinterpret_cast<uintptr_t>(p->region().addr()));
	EXPECT_EQ(p->mr().length(), p->region().length());
	EXPECT_NE(p->lkey(), p->rkey()); // the test PD issues distinct keys
}

TEST_F(BufPools, EntersAndLeavesMemMap)
{
	MemMap map;
	{
		auto p = BufPool::create(pd, 256, 4, ACCESS_LOCAL_WRITE, &map);
		ASSERT_TRUE(p);
		EXPECT_EQ(map.size(), 1u);
		const Buf *b = p->get();
		MemTranslation t;
		ASSERT_EQ(map.translate(static_cast<uint8_t *>(b->addr) + 10, 100, &t), 0);
		EXPECT_EQ(t.lkey, b->lkey);
		EXPECT_EQ(t.rkey, b->rkey);
		EXPECT_EQ(t.mr, &p->mr());
		p->put(b);
	}
	EXPECT_EQ(map.size(), 0u);
}

TEST_F(BufPools, BufOf)
{
	auto p = BufPool::create(pd, 100, 4, 0);
	ASSERT_TRUE(p);
	const Buf *a = p->get(), *b = p->get();
	EXPECT_EQ(p->buf_of(a->addr), a);
	EXPECT_EQ(p->buf_of(static_cast<uint8_t *>(b->addr) + 99), b);
	EXPECT_EQ(p->buf_of(static_cast<uint8_t *>(b->addr) + 100), nullptr); // padding
	EXPECT_EQ(p->buf_of(static_cast<uint8_t *>(a->addr) - 1), nullptr);
	EXPECT_EQ(p->buf_of(static_cast<uint8_t *>(a->addr) + 4 * p->stride()), nullptr);
	p->put(a);
	p->put(b);
}

TEST_F(BufPools, CreateErrors)
{
	errno = 0;
	EXPECT_EQ(BufPool::create(pd, 0, 4, 0), nullptr);
	EXPECT_EQ(errno, EINVAL);
	errno = 0;
	EXPECT_EQ(BufPool::create(pd, 64, 0, 0), nullptr);
	EXPECT_EQ(errno, EINVAL);
	errno = 0;
	EXPECT_EQ(BufPool::create(pd, SIZE_MAX / 2, 4, 0), nullptr);
	EXPECT_EQ(errno, EINVAL);

	pd.fail_reg = true;
	errno = 0;
	EXPECT_EQ(BufPool::create(pd, 64, 4, 0), nullptr);
	EXPECT_EQ(errno, EFAULT); // reg_mr's errno
	pd.fail_reg = false;

	// The map already covers all of user space: entering the pool fails, as it must
	// (regions never overlap), and the half-built pool is torn down.
	MemMap map;
	ASSERT_EQ(map.register_region(reinterpret_cast<void *>(0x1000), UINTPTR_MAX / 2, {}), 0);
	errno = 0;
	EXPECT_EQ(BufPool::create(pd, 64, 4, 0, &map), nullptr);
	EXPECT_EQ(errno, EEXIST);
	EXPECT_EQ(map.size(), 1u);
}

TEST_F(BufPools, ConcurrentGetPut)
{
	auto p = BufPool::create(pd, 64, 32, 0);
	ASSERT_TRUE(p);
	std::atomic<int> failures{0};
	auto worker = [&] {
		for (int i = 0; i < 20000; i++) {
			const Buf *b = p->get();
			if (!b)
				continue;
			// Nobody else holds this buffer: stamp it and check the stamp survives.
			auto *w = static_cast<std::atomic<int> *>(b->addr);
			int mine = i + 1;
			w->store(mine);
			if (w->load() != mine)
				failures++;
			p->put(b);
		}
	};
	std::thread t1(worker), t2(worker);
	worker();
	t1.join();
	t2.join();
	EXPECT_EQ(failures.load(), 0);
	EXPECT_EQ(p->in_use(), 0u);
}

TEST_F(BufPools, DoublePutAborts)
{
	GTEST_FLAG_SET(death_test_style, "threadsafe");
	auto p = BufPool::create(pd, 64, 2, 0);
	ASSERT_TRUE(p);
	const Buf *b = p->get();
	p->put(b);
	EXPECT_DEATH(p->put(b), "not in use");
	Buf foreign;
	EXPECT_DEATH(p->put(&foreign), "another pool");
}

TEST_F(BufPools, DestroyWithBuffersOutIsReported)
{
	GTEST_FLAG_SET(death_test_style, "threadsafe");
	// Reported always; fatal only in debug builds.
	EXPECT_DEBUG_DEATH(
	    {
		    auto p = BufPool::create(pd, 64, 2, 0);
		    p->get();
		    p.reset();
	    },
	    "destroyed with 1 of 2 buffers in use");
}

} // namespace
} // namespace ulp
