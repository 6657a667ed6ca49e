// SPDX-License-Identifier: MIT
// tests/drain/drain_ctx_test.cc - drain against cq_poll/'s real poll contexts (soft
// devices, or ULP_TEST_DEVICE: tests/common/test_device.h).
//
// One CQ (from alloc_cq) serves both queues of the drained QP, as in most ULPs. WRITEs,
// receives and incoming SENDs are in flight when drain_qp starts; when it returns every
// one of them must have been dispatched through its done(), for every poll context, and
// nothing may be dispatched afterwards.
#include "core/drain.h"
#include "cq_poll/cq_poll.h"
#include "tests/soft/soft_test_util.h"

#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>

namespace
{

using namespace soft_test;
using namespace std::chrono_literals;
namespace soft = ulp::soft;

struct Counted {
	ulp::Cqe cqe;                // done() recovers the Counted (container_of)
	std::atomic<int> *done;      // dispatched completions of the test's WRs
	std::atomic<bool> *returned; // drain has returned
	std::atomic<int> *late;      // dispatched after drain returned
};

void counted_done(ulp::Cq *, ulp::Wc *wc)
{
	auto *c = container_of(wc->wr_cqe, &Counted::cqe);
	if (c->returned->load())
		c->late->fetch_add(1);
	c->done->fetch_add(1);
}

struct Case {
	ulp::PollCtx ctx;
	uint32_t len; // bytes per WRITE
};

// gtest prints a parameter (and names its test) with this: "Softirq_65536".
void PrintTo(const Case &c, std::ostream *os)
{
	const char *n = "";
	switch (c.ctx) {
	case ulp::PollCtx::Direct:
		n = "Direct";
		break;
	case ulp::PollCtx::Softirq:
		n = "Softirq";
		break;
	case ulp::PollCtx::Workqueue:
		n = "Workqueue";
		break;
	case ulp::PollCtx::UnboundWorkqueue:
		n = "UnboundWorkqueue";
		break;
	case ulp::PollCtx::BusyPoll:
		n = "BusyPoll";
		break;
	default:
		n = "Other";
	}
	*os << n << "_" << c.len;
}

struct DrainCtx : ::testing::TestWithParam<Case> {
	DevPtr da, db;
	std::unique_ptr<ulp::PollGroup> group; // BusyPoll only
	ulp::CqHandle cq;                      // a's one CQ (freed after a's QP)
	Side a, b;
	std::vector<Counted> reqs = std::vector<Counted>(128);
	std::atomic<int> done{0}, late{0};
	std::atomic<bool> returned{false};

	void SetUp() override
	{
		da = make_dev("127.0.0.1");
		db = make_dev("127.0.0.2");
		ASSERT_TRUE(da && db);
		const auto ctx = GetParam().ctx;
		if (ctx == ulp::PollCtx::BusyPoll)
			group = std::make_unique<ulp::PollGroup>();
		cq = ulp::alloc_cq(*da, 512, 0, ctx, group.get());
		ASSERT_TRUE(cq) << "errno " << errno;
		a.init(*da, 4 << 20);
		b.init(*db, 4 << 20);
		auto attr = a.qp_attr();
		attr.send_cq = attr.recv_cq = cq.get();
		a.own_qp = a.pd->create_qp(attr);
		ASSERT_TRUE(a.own_qp);
		a.qp = a.own_qp.get();
		b.create_qp();
		ASSERT_EQ(connect_pair(a, b), 0);
		for (auto &r : reqs)
			r = Counted{{counted_done}, &done, &returned, &late};
	}

	// 32 WRITEs, 16 receives of which b fills 8 with SENDs racing the drain.
	int load_and_drain()
	{
		int n = 0;
		for (int i = 0; i < 16; i++, n++)
			EXPECT_EQ(post_recv(*a.qp, &reqs[n].cqe, a.sge(1 << 20, 4096)), 0);
		for (int i = 0; i < 32; i++, n++)
			EXPECT_EQ(post_rdma(*a.qp, &reqs[n].cqe, a.sge(0, GetParam().len),
			                    ulp::WrOpcode::RdmaWrite, b.at(0), b.mr->rkey()),
			          0);
		std::vector<ulp::Cqe> bc(8, ulp::Cqe{[](ulp::Cq *, ulp::Wc *) {}});
		// From 2 MiB up: a's WRITEs land in b's first 64 KiB at the same time.
		for (int i = 0; i < 8; i++)
			post_send(*b.qp, &bc[i], b.sge(2 << 20, 256));
		int rc = ulp::drain_qp(*a.qp, 5s);
		EXPECT_EQ(rc, 0);
		EXPECT_EQ(done.load(), n) << "drain_qp returned before every earlier WR was done";
		returned = true;
		return n;
	}

	void expect_quiet(int n)
	{
		std::this_thread::sleep_for(20ms);
		EXPECT_EQ(done.load(), n);
		EXPECT_EQ(late.load(), 0);
	}
};

TEST_P(DrainCtx, ReturnsWhenEverythingIsDispatched)
{
	if (GetParam().ctx == ulp::PollCtx::BusyPoll) {
		// The group runs on its own thread; drain, from another, waits for it.
		std::thread runner([this] { group->run(); });
		int n = load_and_drain();
		expect_quiet(n);
		group->stop();
		runner.join();
		return;
	}
	int n = load_and_drain();
	expect_quiet(n);
}

TEST_P(DrainCtx, DrainFromTheOwningThread)
{
	// Direct: the caller owns the CQ. BusyPoll: the test thread is the group's owner and
	// nobody runs the group - drain must poll it itself. Threaded contexts: a drain from a
	// thread that is not a poller simply waits.
	int n = load_and_drain();
	expect_quiet(n);
}

INSTANTIATE_TEST_SUITE_P(
    Ctx, DrainCtx,
    ::testing::Values(Case{ulp::PollCtx::Direct, 0}, Case{ulp::PollCtx::Direct, 65536},
                      Case{ulp::PollCtx::Softirq, 0}, Case{ulp::PollCtx::Softirq, 65536},
                      Case{ulp::PollCtx::Workqueue, 4096},
                      Case{ulp::PollCtx::UnboundWorkqueue, 4096}, Case{ulp::PollCtx::BusyPoll, 0},
                      Case{ulp::PollCtx::BusyPoll, 65536}),
    ::testing::PrintToStringParamName());

TEST(DrainCtxTeardown, DrainFreeRepeat)
{
	// The teardown sequence of a ULP, many times over: connect, load, drain, destroy QP,
	// free CQ. A CQ that a poller still touches after drain+destroy would show up under
	// ASan/TSan; free_cq refusing would fail the test.
	for (int round = 0; round < 20; round++) {
		SCOPED_TRACE(round);
		DevPtr da = make_dev("127.0.0.1"), db = make_dev("127.0.0.2");
		ASSERT_TRUE(da && db);
		auto ctx = round % 2 ? ulp::PollCtx::Softirq : ulp::PollCtx::Workqueue;
		ulp::CqHandle cq = ulp::alloc_cq(*da, 256, round, ctx);
		ASSERT_TRUE(cq);
		Side a, b;
		a.init(*da, 1 << 16);
		b.init(*db, 1 << 16);
		auto attr = a.qp_attr();
		attr.send_cq = attr.recv_cq = cq.get();
		a.own_qp = a.pd->create_qp(attr);
		ASSERT_TRUE(a.own_qp);
		a.qp = a.own_qp.get();
		b.create_qp();
		ASSERT_EQ(connect_pair(a, b), 0);
		std::atomic<int> done{0}, late{0};
		std::atomic<bool> returned{false};
		std::vector<Counted> reqs(24, Counted{{counted_done}, &done, &returned, &late});
		for (int i = 0; i < 8; i++)
			ASSERT_EQ(post_recv(*a.qp, &reqs[i].cqe, a.sge(0, 1024)), 0);
		for (int i = 8; i < 24; i++)
			ASSERT_EQ(post_rdma(*a.qp, &reqs[i].cqe, a.sge(0, 8192),
			                    ulp::WrOpcode::RdmaWrite, b.at(0), b.mr->rkey()),
			          0);
		ASSERT_EQ(ulp::drain_qp(*a.qp, 5s), 0);
		EXPECT_EQ(done.load(), 24);
		returned = true;
		a.own_qp.reset();
		EXPECT_EQ(ulp::free_cq(cq), 0);
		EXPECT_EQ(late.load(), 0);
	}
}

} // namespace
