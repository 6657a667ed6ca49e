// SPDX-License-Identifier: MIT
// tests/soft/buf_pool_test.cc - core/buf_pool.h over a real soft PD: the pool's buffers are
// registered memory a peer can reach through the pool's keys.
#include "core/buf_pool.h"
#include "core/mem_map.h"
#include "soft_test_util.h"

#include <cerrno>

using namespace ulp;
using namespace soft_test;

TEST(SoftBufPool, PeerWritesAndReadsPoolBuffers)
{
	DevPtr db = make_dev("127.0.0.1");
	DevPtr da = make_dev("127.0.0.2");
	ASSERT_TRUE(da && db);
	Side a, b;
	a.init(*da);
	b.init(*db);
	MemMap map;
	{
		CmPair cm;
		cm.active = &a;
		cm.passive = &b;
		ASSERT_TRUE(cm.connect("127.0.0.1:0", "127.0.0.2"));

		auto pool = BufPool::create(
		    *b.pd, 8192, 4, ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ,
		    &map);
		ASSERT_TRUE(pool) << "errno " << errno;
		EXPECT_EQ(&pool->mr().pd(), b.pd.get());
		EXPECT_EQ(map.size(), 1u);
		const Buf *b1 = pool->get();
		const Buf *b2 = pool->get();
		ASSERT_TRUE(b1 && b2);
		EXPECT_EQ(b1->lkey, pool->lkey());
		EXPECT_EQ(b1->rkey, pool->rkey());

		// mem_map translates any address inside a pool buffer to the pool's keys.
		MemTranslation t;
		ASSERT_EQ(map.translate(b1->addr, 8192, &t), 0);
		EXPECT_EQ(t.lkey, pool->lkey());
		EXPECT_EQ(t.rkey, pool->rkey());
		EXPECT_EQ(t.mr, &pool->mr());
		ASSERT_EQ(map.translate(static_cast<uint8_t *>(b2->addr) + 100, 16, &t), 0);
		EXPECT_EQ(t.lkey, pool->lkey());

		// A WRITEs into b1 through the pool's rkey: the data lands.
		for (size_t i = 0; i < 8192; i++)
			a.buf[i] = static_cast<uint8_t>(i * 13 + 5);
		Cqe c[4];
		ASSERT_EQ(post_rdma(*a.qp, &c[0], a.sge(0, 8192), WrOpcode::RdmaWrite,
		                    reinterpret_cast<uint64_t>(b1->addr), b1->rkey),
		          0);
		auto w = poll_n(*a.scq, 1);
		ASSERT_EQ(w.size(), 1u);
		ASSERT_EQ(w[0].status, WcStatus::Success);
		EXPECT_EQ(0, std::memcmp(b1->addr, a.buf.data(), 8192));

		// B SENDs from b1 using the translated lkey; A receives it.
		ASSERT_EQ(map.translate(b1->addr, 4096, &t), 0);
		ASSERT_EQ(post_recv(*a.qp, &c[1], a.sge(16384, 4096)), 0);
		Sge s{reinterpret_cast<uint64_t>(b1->addr), 4096, t.lkey};
		ASSERT_EQ(post_send(*b.qp, &c[2], s), 0);
		ASSERT_EQ(poll_n(*b.scq, 1).size(), 1u);
		auto r = poll_n(*a.rcq, 1);
		ASSERT_EQ(r.size(), 1u);
		EXPECT_EQ(r[0].status, WcStatus::Success);
		EXPECT_EQ(r[0].byte_len, 4096u);
		EXPECT_EQ(0, std::memcmp(a.buf.data() + 16384, b1->addr, 4096));

		// A READs b2 through the pool's rkey.
		std::memset(b2->addr, 0x3c, 8192);
		ASSERT_EQ(post_rdma(*a.qp, &c[3], a.sge(32768, 8192), WrOpcode::RdmaRead,
		                    reinterpret_cast<uint64_t>(b2->addr), b2->rkey),
		          0);
		w = poll_n(*a.scq, 1);
		ASSERT_EQ(w.size(), 1u);
		ASSERT_EQ(w[0].status, WcStatus::Success);
		EXPECT_EQ(a.buf[32768], 0x3c);
		EXPECT_EQ(a.buf[32768 + 8191], 0x3c);

		pool->put(b1);
		pool->put(b2);
		EXPECT_EQ(pool->in_use(), 0u);
	}
	// The pool took its region out of the map when it went.
	EXPECT_EQ(map.size(), 0u);
}

// Keys from a pool are keys of its PD only: a pool on another device's PD is unreachable.
TEST(SoftBufPool, PoolKeysAreScopedToTheirPd)
{
	HandPair p;
	ASSERT_TRUE(p.init(soft::Exec::Inline));
	auto other_pd = p.db->alloc_pd();
	ASSERT_TRUE(other_pd);
	auto pool = BufPool::create(*other_pd, 4096, 2, ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE);
	ASSERT_TRUE(pool);
	const Buf *buf = pool->get();
	ASSERT_TRUE(buf);
	Cqe c;
	ASSERT_EQ(post_rdma(*p.a.qp, &c, p.a.sge(0, 64), WrOpcode::RdmaWrite,
	                    reinterpret_cast<uint64_t>(buf->addr), buf->rkey),
	          0);
	auto w = poll_n(*p.a.scq, 1);
	ASSERT_EQ(w.size(), 1u);
	EXPECT_EQ(w[0].status, WcStatus::RemAccessErr);
	pool->put(buf);
}
