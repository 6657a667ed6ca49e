// SPDX-License-Identifier: MIT
// tests/mr_pool/mr_pool_test.cc - the MR pool (mr_pool/) on the soft provider, plus a
// counting PD for allocation failures part-way through init.
#include "mr_pool/mr_pool.h"

#include "core/log.h"
#include "providers/soft/soft.h"
#include "tests/soft/soft_test_util.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <thread>
#include <vector>

using namespace ulp;
using soft_test::DevPtr;

namespace
{

DevPtr make_dev(soft::Profile profile = soft::Profile::Ib, uint32_t max_frpl = 0,
                soft::Exec exec = soft::Exec::Inline)
{
	soft::DeviceConfig c;
	c.profile = profile;
	c.exec = exec;
	c.limits.max_fast_reg_page_list_len = max_frpl;
	return DevPtr(soft::create_device(c));
}

// A PD whose alloc_mr makes fake fast-reg MRs and can fail at the n-th call with a chosen
// errno; counts live MRs so that tests can see that nothing is left behind.
class CountingPd;

class FakeMr : public Mr
{
public:
	FakeMr(Pd &pd, uint32_t key, uint32_t max_num_sg, std::atomic<int> &live)
	    : Mr(pd, key, key, 0, 0, max_num_sg), live_(live)
	{
		live_++;
	}
	~FakeMr() override { live_--; }

private:
	std::atomic<int> &live_;
};

class CountingPd : public Pd
{
public:
	explicit CountingPd(Device &dev) : Pd(dev) {}

	std::unique_ptr<Mr> reg_mr(void *, size_t, uint32_t) override
	{
		errno = EOPNOTSUPP;
		return nullptr;
	}
	std::unique_ptr<Mr> alloc_mr(uint32_t max_num_sg) override
	{
		calls++;
		if (fail_at && calls == fail_at) {
			errno = fail_errno;
			return nullptr;
		}
		return std::make_unique<FakeMr>(*this, ++next_key, max_num_sg, live);
	}
	std::unique_ptr<Qp> create_qp(const QpInitAttr &) override
	{
		errno = EOPNOTSUPP;
		return nullptr;
	}
	std::unique_ptr<Srq> create_srq(const SrqInitAttr &) override
	{
		errno = EOPNOTSUPP;
		return nullptr;
	}

	int calls = 0;
	int fail_at = 0; // 1-based alloc_mr call that fails; 0 = never
	int fail_errno = ENOMEM;
	uint32_t next_key = 0;
	std::atomic<int> live{0};
};

class MrPools : public ::testing::Test
{
protected:
	void SetUp() override
	{
		dev_ = make_dev();
		ASSERT_TRUE(dev_);
		pd_ = dev_->alloc_pd();
		ASSERT_TRUE(pd_);
	}
	void TearDown() override
	{
		pool_.reset();
		pd_.reset();
	}

	DevPtr dev_;
	std::unique_ptr<Pd> pd_;
	std::unique_ptr<MrPool> pool_ = std::make_unique<MrPool>();
};

TEST_F(MrPools, InitGetPutDestroy)
{
	ASSERT_EQ(pool_->init(*pd_, 4, 16), 0);
	EXPECT_EQ(pool_->size(), 4);
	EXPECT_EQ(pool_->used(), 0);
	EXPECT_EQ(pool_->available(), 4);

	Mr *mr = pool_->get();
	ASSERT_TRUE(mr);
	EXPECT_EQ(pool_->used(), 1);
	EXPECT_EQ(pool_->available(), 3);
	pool_->put(mr);
	EXPECT_EQ(pool_->used(), 0);
	EXPECT_EQ(pool_->available(), 4);

	EXPECT_EQ(pool_->destroy(), 0);
	EXPECT_EQ(pool_->size(), 0);
	EXPECT_EQ(pool_->get(), nullptr);
	EXPECT_EQ(pool_->used(), 0);
	// A destroyed pool can be initialised again.
	ASSERT_EQ(pool_->init(*pd_, 2, 8), 0);
	EXPECT_EQ(pool_->size(), 2);
}

TEST_F(MrPools, InitArguments)
{
	EXPECT_EQ(pool_->init(*pd_, -1, 16), -EINVAL);
	EXPECT_EQ(pool_->init(*pd_, 0, 16), 0); // the kernel's nr == 0: an empty pool
	EXPECT_EQ(pool_->size(), 0);
	EXPECT_EQ(pool_->get(), nullptr);
	ASSERT_EQ(pool_->init(*pd_, 2, 16), 0);
	EXPECT_EQ(pool_->init(*pd_, 2, 16), -EBUSY);
	EXPECT_EQ(pool_->size(), 2);
}

TEST_F(MrPools, LifoReuse)
{
	ASSERT_EQ(pool_->init(*pd_, 4, 16), 0);
	// init list_add_tail()s: the first get returns MRs in allocation order.
	Mr *a = pool_->get();
	Mr *b = pool_->get();
	Mr *c = pool_->get();
	ASSERT_TRUE(a && b && c);
	// list_add: the MR put last is the one get returns.
	pool_->put(a);
	pool_->put(c);
	EXPECT_EQ(pool_->get(), c);
	EXPECT_EQ(pool_->get(), a);
	pool_->put(b);
	EXPECT_EQ(pool_->get(), b);
	pool_->put(a);
	pool_->put(b);
	pool_->put(c);
	EXPECT_EQ(pool_->get(), c);
	EXPECT_EQ(pool_->get(), b);
	EXPECT_EQ(pool_->get(), a);
	EXPECT_EQ(pool_->used(), 3);
	pool_->put(a);
	pool_->put(b);
	pool_->put(c);
}

TEST_F(MrPools, ExhaustionAndRecovery)
{
	constexpr int kNr = 3;
	ASSERT_EQ(pool_->init(*pd_, kNr, 16), 0);
	std::vector<Mr *> out;
	for (int i = 0; i < kNr; i++) {
		Mr *mr = pool_->get();
		ASSERT_TRUE(mr);
		out.push_back(mr);
		EXPECT_EQ(pool_->used(), i + 1);
	}
	// Empty: nullptr (rw/ returns -EAGAIN), used unchanged.
	EXPECT_EQ(pool_->get(), nullptr);
	EXPECT_EQ(pool_->get(), nullptr);
	EXPECT_EQ(pool_->used(), kNr);
	EXPECT_EQ(pool_->available(), 0);

	pool_->put(out.back());
	EXPECT_EQ(pool_->used(), kNr - 1);
	Mr *again = pool_->get();
	EXPECT_EQ(again, out.back());
	EXPECT_EQ(pool_->get(), nullptr);
	for (Mr *mr : out)
		pool_->put(mr);
	EXPECT_EQ(pool_->used(), 0);
	EXPECT_EQ(pool_->destroy(), 0);
}

TEST_F(MrPools, DestroyWithMrsOutRefuses)
{
	ASSERT_EQ(pool_->init(*pd_, 3, 16), 0);
	Mr *mr = pool_->get();
	ASSERT_TRUE(mr);
	{
		ulp::log::Capture cap;
		EXPECT_EQ(pool_->destroy(), -EBUSY);
		// Logged as an error of the mr_pool subsystem (not fatal: the pool stays).
		auto recs = cap.records();
		EXPECT_EQ(recs.size(), 1u) << cap.text();
		for (const auto &r : recs) {
			EXPECT_EQ(r.level, ulp::log::Level::Error);
			EXPECT_EQ(r.sub, ulp::log::Sub::MrPool);
			EXPECT_EQ(r.msg, "destroy refused: 1 of 3 MRs still in use");
		}
	}
	// Nothing was freed: the MR held is still valid, the pool intact.
	EXPECT_EQ(pool_->size(), 3);
	EXPECT_EQ(pool_->used(), 1);
	EXPECT_TRUE(mr->is_fast_reg());
	pool_->put(mr);
	EXPECT_EQ(pool_->destroy(), 0);
	EXPECT_EQ(pool_->size(), 0);
}

// The pool's MRs are fast-registration MRs of the asked size with distinct keys.
TEST_F(MrPools, MrsAreFastRegWithDistinctKeys)
{
	constexpr int kNr = 8;
	ASSERT_EQ(pool_->init(*pd_, kNr, 32), 0);
	std::vector<Mr *> out;
	std::set<uint32_t> lkeys, rkeys;
	for (int i = 0; i < kNr; i++) {
		Mr *mr = pool_->get();
		ASSERT_TRUE(mr);
		EXPECT_TRUE(mr->is_fast_reg());
		EXPECT_EQ(mr->max_num_sg(), 32u);
		EXPECT_EQ(&mr->pd(), pd_.get());
		lkeys.insert(mr->lkey());
		rkeys.insert(mr->rkey());
		out.push_back(mr);
	}
	EXPECT_EQ(lkeys.size(), size_t(kNr));
	EXPECT_EQ(rkeys.size(), size_t(kNr));
	for (Mr *mr : out)
		pool_->put(mr);
}

// Soft device limits: max_num_sg above max_fast_reg_page_list_len fails at the first
// alloc_mr with -EINVAL (ib_alloc_mr's check), leaving an empty, reusable pool.
TEST(MrPoolInit, MaxNumSgAboveDeviceLimit)
{
	for (auto profile : {soft::Profile::Ib, soft::Profile::Iwarp}) {
		auto dev = make_dev(profile, 8);
		ASSERT_TRUE(dev);
		ASSERT_EQ(dev->attr().max_fast_reg_page_list_len, 8u);
		auto pd = dev->alloc_pd();
		ASSERT_TRUE(pd);
		MrPool pool;
		EXPECT_EQ(pool.init(*pd, 4, 9), -EINVAL);
		EXPECT_EQ(pool.size(), 0);
		EXPECT_EQ(pool.used(), 0);
		EXPECT_EQ(pool.get(), nullptr);
		EXPECT_EQ(pool.init(*pd, 4, 0), -EINVAL);
		ASSERT_EQ(pool.init(*pd, 4, 8), 0);
		EXPECT_EQ(pool.size(), 4);
		EXPECT_EQ(pool.destroy(), 0);
	}
}

// alloc_mr failing part-way through: every MR made so far is freed, the errno returned.
TEST(MrPoolInit, FailureHalfwayFreesEverything)
{
	auto dev = make_dev();
	ASSERT_TRUE(dev);
	CountingPd pd(*dev);
	MrPool pool;
	pd.fail_at = 5;
	pd.fail_errno = ENOMEM;
	EXPECT_EQ(pool.init(pd, 8, 16), -ENOMEM);
	EXPECT_EQ(pd.calls, 5);
	EXPECT_EQ(pd.live.load(), 0);
	EXPECT_EQ(pool.size(), 0);
	EXPECT_EQ(pool.get(), nullptr);

	// No DEVICE_MEM_MGT_EXTENSIONS: -EOPNOTSUPP at the first MR.
	pd.calls = 0;
	pd.fail_at = 1;
	pd.fail_errno = EOPNOTSUPP;
	EXPECT_EQ(pool.init(pd, 8, 16), -EOPNOTSUPP);
	EXPECT_EQ(pd.live.load(), 0);

	// And the pool works afterwards.
	pd.fail_at = 0;
	ASSERT_EQ(pool.init(pd, 8, 16), 0);
	EXPECT_EQ(pd.live.load(), 8);
	EXPECT_EQ(pool.destroy(), 0);
	EXPECT_EQ(pd.live.load(), 0);
}

TEST(MrPoolInit, DestructorFreesMrs)
{
	auto dev = make_dev();
	ASSERT_TRUE(dev);
	CountingPd pd(*dev);
	{
		MrPool pool;
		ASSERT_EQ(pool.init(pd, 6, 4), 0);
		Mr *mr = pool.get();
		pool.put(mr);
		EXPECT_EQ(pd.live.load(), 6);
	}
	EXPECT_EQ(pd.live.load(), 0);
}

TEST(MrPoolDeathTest, PutOfForeignMrAborts)
{
	GTEST_FLAG_SET(death_test_style, "threadsafe");
	auto dev = make_dev();
	ASSERT_TRUE(dev);
	CountingPd pd(*dev);
	MrPool a, b;
	ASSERT_EQ(a.init(pd, 2, 4), 0);
	ASSERT_EQ(b.init(pd, 2, 4), 0);
	Mr *mr = a.get();
	ASSERT_TRUE(mr);
	EXPECT_DEATH(b.put(mr), "not from this pool");
	auto stray = pd.alloc_mr(4);
	EXPECT_DEATH(a.put(stray.get()), "not from this pool");
	a.put(mr);
	EXPECT_DEATH(a.put(mr), "put twice");
}

TEST(MrPoolDeathTest, DestructorWithMrsOutAborts)
{
	GTEST_FLAG_SET(death_test_style, "threadsafe");
	auto dev = make_dev();
	ASSERT_TRUE(dev);
	CountingPd pd(*dev);
	EXPECT_DEATH(
	    {
		    MrPool pool;
		    ASSERT_EQ(pool.init(pd, 2, 4), 0);
		    (void)pool.get();
	    },
	    "in use");
}

// Two threads get and put for a bounded number of iterations: used() stays within
// [0, size], ends at 0, and no MR is ever held by two holders at once.
TEST_F(MrPools, ConcurrentGetPut)
{
	constexpr int kNr = 4;
	constexpr int kIters = 20000;
	ASSERT_EQ(pool_->init(*pd_, kNr, 16), 0);

	std::map<Mr *, std::atomic<bool>> held;
	{
		std::vector<Mr *> all;
		while (Mr *mr = pool_->get())
			all.push_back(mr);
		ASSERT_EQ(all.size(), size_t(kNr));
		for (Mr *mr : all) {
			held[mr] = false;
			pool_->put(mr);
		}
	}

	std::atomic<int> errors{0}, empties{0};
	auto worker = [&](int seed) {
		std::vector<Mr *> mine;
		for (int i = 0; i < kIters; i++) {
			// Hold up to 3 at a time: 2 threads x 3 > kNr, so the pool runs dry.
			bool take = mine.empty() || (mine.size() < 3 && ((i * 7 + seed) % 3 != 0));
			if (take) {
				Mr *mr = pool_->get();
				if (!mr) {
					empties++;
					continue;
				}
				auto it = held.find(mr);
				if (it == held.end() || it->second.exchange(true))
					errors++; // unknown MR, or handed to two holders
				mine.push_back(mr);
			} else {
				Mr *mr = mine.back();
				mine.pop_back();
				if (!held.at(mr).exchange(false))
					errors++;
				pool_->put(mr);
			}
			int u = pool_->used();
			if (u < 0 || u > kNr)
				errors++;
		}
		for (Mr *mr : mine) {
			held.at(mr).store(false);
			pool_->put(mr);
		}
	};
	std::thread t1(worker, 1), t2(worker, 2);
	t1.join();
	t2.join();
	EXPECT_EQ(errors.load(), 0);
	EXPECT_EQ(pool_->used(), 0);
	EXPECT_EQ(pool_->available(), kNr);
	EXPECT_EQ(pool_->destroy(), 0);
}

// A pool MR works: map a registered buffer's pages into it, REG_MR it on a QP, and let the
// peer RDMA WRITE through its rkey.
TEST(MrPoolSoft, RegMrAndRdmaWriteThroughPoolMr)
{
	auto da = make_dev();
	soft::DeviceConfig cb;
	cb.ip = "127.0.0.2";
	cb.exec = soft::Exec::Inline;
	DevPtr db(soft::create_device(cb));
	ASSERT_TRUE(da && db);
	soft_test::Side a, b;
	ASSERT_NO_FATAL_FAILURE(a.init(*da));
	ASSERT_NO_FATAL_FAILURE(b.init(*db));
	ASSERT_NO_FATAL_FAILURE(a.create_qp());
	ASSERT_NO_FATAL_FAILURE(b.create_qp());
	ASSERT_EQ(soft_test::connect_pair(a, b), 0);

	MrPool pool;
	ASSERT_EQ(pool.init(*b.pd, 2, 4), 0);
	Mr *mr = pool.get();
	ASSERT_TRUE(mr);

	constexpr uint32_t kPage = 4096;
	uint64_t base = (b.at(0) + kPage - 1) & ~uint64_t(kPage - 1);
	SgEntry sg[] = {{base, 2 * kPage}};
	unsigned off = 0;
	ASSERT_EQ(mr->map_sg(sg, &off, kPage), 1);
	mr->inc_rkey();

	Cqe reg_cqe, write_cqe;
	RegWr wr;
	wr.opcode = WrOpcode::RegMr;
	wr.mr = mr;
	wr.key = mr->rkey();
	wr.access = ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE;
	wr.send_flags = SEND_SIGNALED;
	wr.wr_cqe = &reg_cqe;
	const SendWr *bad = nullptr;
	ASSERT_EQ(b.qp->post_send(&wr, &bad), 0);
	auto wcs = soft_test::poll_n(*b.scq, 1);
	ASSERT_EQ(wcs.size(), 1u);
	EXPECT_EQ(wcs[0].wr_cqe, &reg_cqe);
	ASSERT_EQ(wcs[0].status, WcStatus::Success);

	const char msg[] = "through a pool MR";
	std::memcpy(a.buf.data(), msg, sizeof(msg));
	ASSERT_EQ(soft_test::post_rdma(*a.qp, &write_cqe, a.sge(0, sizeof(msg)),
	                               WrOpcode::RdmaWrite, mr->iova() + 100, mr->rkey()),
	          0);
	wcs = soft_test::poll_n(*a.scq, 1);
	ASSERT_EQ(wcs.size(), 1u);
	ASSERT_EQ(wcs[0].status, WcStatus::Success);
	EXPECT_EQ(std::memcmp(reinterpret_cast<void *>(base + 100), msg, sizeof(msg)), 0);

	pool.put(mr);
	EXPECT_EQ(pool.destroy(), 0);
	a.own_qp.reset();
	b.own_qp.reset();
}

} // namespace
