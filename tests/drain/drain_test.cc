// SPDX-License-Identifier: MIT
// tests/drain/drain_test.cc - drain_sq / drain_rq / drain_qp on the soft provider, or on
// the one device ULP_TEST_DEVICE names (tests/common/test_device.h; rxe0 in tools/vm).
//
// The contract under test: drain returns exactly when every WR posted before it has been
// completed and dispatched through its cqe->done, whoever dispatches (a polling thread, the
// drain itself on a Direct CQ), while completions are still arriving; and it never hangs.
// Completions are dispatched here by a plain polling thread (PollCtx::None: "the owner
// polls") or by a Direct-style process_direct installed on the CQ; cq_poll/'s own contexts
// are exercised against drain in drain_ctx_test.cc.
#include "core/drain.h"
#include "tests/soft/soft_test_util.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

namespace
{

using namespace soft_test;
using namespace std::chrono_literals;
namespace soft = ulp::soft;

// A WR's context: counts its completion and remembers whether drain had returned by then.
struct Req {
	ulp::Cqe cqe;                               // done() recovers the Req (container_of)
	std::atomic<int> *done = nullptr;           // incremented by done()
	const std::atomic<bool> *drained = nullptr; // drain has returned
	std::atomic<int> *late = nullptr;           // done() calls that came after drain returned
	ulp::WcStatus status = ulp::WcStatus::GeneralErr;
};

void req_done(ulp::Cq *, ulp::Wc *wc)
{
	auto *r = container_of(wc->wr_cqe, &Req::cqe);
	r->status = wc->status;
	if (r->drained->load())
		r->late->fetch_add(1);
	r->done->fetch_add(1);
}

// Poll one batch and dispatch it as cq_poll/ does: null cqes (unsignaled flushes) dropped.
int poll_dispatch(ulp::Cq &cq, int budget)
{
	ulp::Wc wc[16];
	int total = 0;
	while (total < budget) {
		int n = cq.poll(std::span<ulp::Wc>(wc, std::min(16, budget - total)));
		if (n <= 0)
			break;
		for (int i = 0; i < n; i++)
			if (wc[i].wr_cqe)
				wc[i].wr_cqe->done(&cq, &wc[i]);
		total += n;
	}
	return total;
}

// The owner's polling loop for PollCtx::None CQs.
class Poller
{
public:
	explicit Poller(std::vector<ulp::Cq *> cqs) : cqs_(std::move(cqs))
	{
		thr_ = std::thread([this] {
			while (!stop_.load()) {
				int n = 0;
				for (auto *cq : cqs_)
					n += poll_dispatch(*cq, 64);
				if (!n)
					std::this_thread::sleep_for(50us);
			}
		});
	}
	~Poller() { stop(); }
	void stop()
	{
		stop_ = true;
		if (thr_.joinable())
			thr_.join();
	}

private:
	std::vector<ulp::Cq *> cqs_;
	std::atomic<bool> stop_{false};
	std::thread thr_;
};

// Make cq a Direct CQ whose process_direct polls and dispatches on the caller's thread.
void make_direct(ulp::Cq &cq)
{
	cq.poll_ctx = ulp::PollCtx::Direct;
	cq.process_direct = [](ulp::Cq &c, int budget) { return poll_dispatch(c, budget); };
}

// Two connected QPs on two engine-mode devices; `a` is the one drained.
struct DrainPair : ::testing::Test {
	DevPtr da, db;
	Side a, b;
	std::vector<Req> reqs;
	std::atomic<int> done{0}, late{0};
	std::atomic<bool> drained{false};

	void SetUp() override { setup(soft::Profile::Ib); }

	void setup(soft::Profile prof, uint8_t rnr_retry = 7)
	{
		da = make_dev("127.0.0.1", soft::Exec::Engine, prof);
		db = make_dev("127.0.0.2", soft::Exec::Engine, prof);
		ASSERT_TRUE(da && db);
		a.init(*da, 4 << 20, 512);
		b.init(*db, 4 << 20, 512);
		a.create_qp();
		b.create_qp();
		ASSERT_EQ(connect_pair(a, b, rnr_retry), 0);
		reqs = std::vector<Req>(256);
		for (auto &r : reqs) {
			r.cqe.done = req_done;
			r.done = &done;
			r.drained = &drained;
			r.late = &late;
		}
	}

	// n signaled RDMA WRITEs of len bytes each from a to b.
	void post_writes(int n, uint32_t len)
	{
		for (int i = 0; i < n; i++)
			ASSERT_EQ(post_rdma(*a.qp, &reqs[i].cqe, a.sge(0, len),
			                    ulp::WrOpcode::RdmaWrite, b.at(0), b.mr->rkey()),
			          0)
			    << i;
	}

	// After drain returned: nothing may complete any more.
	void expect_quiet(int expected)
	{
		drained = true;
		std::this_thread::sleep_for(20ms);
		EXPECT_EQ(done.load(), expected);
		EXPECT_EQ(late.load(), 0);
	}
};

// Run with growing WRs so that the drain lands before, among and after the completions of
// the earlier WRs.
struct SqDrainLen : DrainPair, ::testing::WithParamInterface<uint32_t> {
};

TEST_P(SqDrainLen, WaitsForEveryEarlierWr)
{
	Poller p({a.scq.get(), a.rcq.get()});
	post_writes(48, GetParam());
	ASSERT_EQ(ulp::drain_sq(*a.qp), 0);
	EXPECT_EQ(done.load(), 48) << "drain_sq returned before every earlier WR was done";
	EXPECT_EQ(a.qp->state(), ulp::QpState::Err);
	p.stop();
	expect_quiet(48);
}

INSTANTIATE_TEST_SUITE_P(Len, SqDrainLen, ::testing::Values(0u, 4096u, 65536u),
                         ::testing::PrintToStringParamName());

TEST_F(DrainPair, SqDrainOnRnrStalledQueue)
{
	// SENDs with no receive at the peer sit in the SQ in RNR retry (rnr_retry 7 retries
	// forever): only the drain's ERR transition can complete them, with flush errors.
	Poller p({a.scq.get(), a.rcq.get()});
	for (int i = 0; i < 8; i++)
		ASSERT_EQ(post_send(*a.qp, &reqs[i].cqe, a.sge(0, 64)), 0);
	std::this_thread::sleep_for(5ms);
	EXPECT_EQ(done.load(), 0);
	ASSERT_EQ(ulp::drain_sq(*a.qp), 0);
	EXPECT_EQ(done.load(), 8);
	for (int i = 0; i < 8; i++)
		EXPECT_EQ(reqs[i].status, ulp::WcStatus::WrFlushErr) << i;
	p.stop();
	expect_quiet(8);
}

TEST_F(DrainPair, SqDrainWithFullSendQueue)
{
	// The caller did not reserve the marker's slot: the SQ is full of RNR-stalled SENDs.
	// drain keeps reaping and retrying until the flushes free a slot (the kernel would
	// fail the post).
	Poller p({a.scq.get(), a.rcq.get()});
	int n = 0;
	for (; n < static_cast<int>(reqs.size()); n++)
		if (post_send(*a.qp, &reqs[n].cqe, a.sge(0, 64)) != 0)
			break;
	ASSERT_EQ(n, static_cast<int>(a.qp->cap().max_send_wr));
	ASSERT_EQ(ulp::drain_sq(*a.qp), 0);
	EXPECT_EQ(done.load(), n);
	p.stop();
	expect_quiet(n);
}

TEST_F(DrainPair, RqDrainWhileSendsArrive)
{
	// 32 receives on a; b sends 16 while a's receive queue is drained concurrently. When
	// drain_rq returns all 32 receive WRs are done, each as a success or a flush.
	Poller p({a.scq.get(), a.rcq.get(), b.scq.get()});
	for (int i = 0; i < 32; i++)
		ASSERT_EQ(post_recv(*a.qp, &reqs[i].cqe, a.sge(i * 4096, 4096)), 0);
	std::vector<ulp::Cqe> bc(16);
	for (auto &c : bc)
		c.done = [](ulp::Cq *, ulp::Wc *) {};
	std::thread sender([&] {
		for (int i = 0; i < 16; i++) {
			post_send(*b.qp, &bc[i], b.sge(0, 512));
			std::this_thread::sleep_for(20us);
		}
	});
	std::this_thread::sleep_for(100us);
	int rc = ulp::drain_rq(*a.qp);
	sender.join();
	ASSERT_EQ(rc, 0);
	EXPECT_EQ(done.load(), 32);
	int ok = 0, flushed = 0;
	for (int i = 0; i < 32; i++) {
		ok += reqs[i].status == ulp::WcStatus::Success;
		flushed += reqs[i].status == ulp::WcStatus::WrFlushErr;
	}
	EXPECT_EQ(ok + flushed, 32);
	EXPECT_LE(ok, 16);
	p.stop();
	expect_quiet(32);
}

TEST_F(DrainPair, QpDrainBothQueues)
{
	Poller p({a.scq.get(), a.rcq.get()});
	for (int i = 0; i < 16; i++)
		ASSERT_EQ(post_recv(*a.qp, &reqs[i].cqe, a.sge(0, 64)), 0);
	for (int i = 16; i < 32; i++)
		ASSERT_EQ(post_send(*a.qp, &reqs[i].cqe, a.sge(0, 64)), 0);
	ASSERT_EQ(ulp::drain_qp(*a.qp), 0);
	EXPECT_EQ(done.load(), 32);
	p.stop();
	expect_quiet(32);
}

TEST_F(DrainPair, DirectCqIsPolledByDrain)
{
	// Nobody polls a Direct CQ: without drain polling it while it waits, this would time
	// out.
	make_direct(*a.scq);
	make_direct(*a.rcq);
	post_writes(32, 8192);
	for (int i = 32; i < 40; i++)
		ASSERT_EQ(post_recv(*a.qp, &reqs[i].cqe, a.sge(0, 64)), 0);
	auto t0 = Clock::now();
	ASSERT_EQ(ulp::drain_qp(*a.qp, 5s), 0);
	EXPECT_LT(Clock::now() - t0, 2s);
	EXPECT_EQ(done.load(), 40);
	expect_quiet(40);
}

TEST_F(DrainPair, NoPollerTimesOutAndLateFlushIsSafe)
{
	// A CQ nobody dispatches: drain gives up at its bound instead of hanging. The marker's
	// flush that is dispatched afterwards must free the abandoned marker, not touch drain's
	// stack (ASan checks both in the sanitizer build).
	post_writes(4, 64);
	auto t0 = Clock::now();
	EXPECT_EQ(ulp::drain_sq(*a.qp, 200ms), -ETIMEDOUT);
	auto took = Clock::now() - t0;
	EXPECT_GE(took, 200ms);
	EXPECT_LT(took, 3s);
	// Dispatch everything now, the marker last.
	auto until = Clock::now() + kWait;
	while (done.load() < 4 && Clock::now() < until)
		poll_dispatch(*a.scq, 64);
	EXPECT_EQ(done.load(), 4);
	std::this_thread::sleep_for(5ms);
	poll_dispatch(*a.scq, 64);
	EXPECT_EQ(poll_dispatch(*a.scq, 64), 0) << "the marker's flush was not consumed";
}

TEST_F(DrainPair, ResetQpAndBadUse)
{
	// A QP in RESET has nothing to drain.
	auto fresh = a.pd->create_qp(a.qp_attr());
	ASSERT_TRUE(fresh);
	EXPECT_EQ(ulp::drain_qp(*fresh, 100ms), 0);
	EXPECT_EQ(fresh->state(), ulp::QpState::Reset);
	// Draining twice is harmless: the second drain finds the queues empty.
	Poller p({a.scq.get(), a.rcq.get()});
	ASSERT_EQ(ulp::drain_qp(*a.qp), 0);
	EXPECT_EQ(ulp::drain_qp(*a.qp), 0);
}

// A QP on an SRQ, sharing one CQ for send and receive (the usual ULP layout), beside a
// second QP on the same SRQ that must keep working.
struct SrqDrain : ::testing::Test {
	DevPtr da, db;
	Side a, b, b2;
	std::unique_ptr<ulp::Srq> srq;
	std::unique_ptr<ulp::Qp> qp_on_srq, qp2_on_srq;
	std::vector<Req> reqs = std::vector<Req>(64);
	std::atomic<int> done{0}, late{0};
	std::atomic<bool> drained{false};

	void setup(soft::Profile prof)
	{
		da = make_dev("127.0.0.1", soft::Exec::Engine, prof);
		db = make_dev("127.0.0.2", soft::Exec::Engine, prof);
		ASSERT_TRUE(da && db);
		a.init(*da, 1 << 20);
		b.init(*db, 1 << 20);
		ulp::SrqInitAttr sa;
		sa.max_wr = 64;
		sa.max_sge = 1;
		srq = a.pd->create_srq(sa);
		ASSERT_TRUE(srq);
		for (auto *q : {&qp_on_srq, &qp2_on_srq}) {
			auto attr = a.qp_attr(srq.get());
			attr.recv_cq = attr.send_cq; // one CQ
			*q = a.pd->create_qp(attr);
			ASSERT_TRUE(*q);
		}
		a.qp = qp_on_srq.get();
		b.create_qp();
		ASSERT_EQ(connect_pair(a, b), 0);
		// The second connection: its own peer QP on b's device.
		b2.init(*db, 4096);
		b2.create_qp();
		ASSERT_EQ(connect_qp(*qp2_on_srq, *db, b2.qp->qp_num()), 0);
		ASSERT_EQ(connect_qp(*b2.qp, *da, qp2_on_srq->qp_num()), 0);
		for (auto &r : reqs) {
			r.cqe.done = req_done;
			r.done = &done;
			r.drained = &drained;
			r.late = &late;
		}
	}

	void post_srq(int first, int n)
	{
		for (int i = first; i < first + n; i++) {
			ulp::Sge s = a.sge(i * 1024, 1024);
			ulp::RecvWr wr;
			wr.wr_cqe = &reqs[i].cqe;
			wr.sg_list = &s;
			wr.num_sge = 1;
			const ulp::RecvWr *bad = nullptr;
			ASSERT_EQ(srq->post_recv(&wr, &bad), 0);
		}
	}

	void run(soft::Profile prof)
	{
		setup(prof);
		Poller p({a.scq.get(), b.scq.get(), b2.scq.get()});
		post_srq(0, 16);
		std::vector<ulp::Cqe> bc(8);
		for (auto &c : bc)
			c.done = [](ulp::Cq *, ulp::Wc *) {};
		for (int i = 0; i < 8; i++)
			ASSERT_EQ(post_send(*b.qp, &bc[i], b.sge(0, 256)), 0);
		// Wait until all 8 landed, then drain: those 8 receive completions belong to this
		// QP and must all be dispatched when drain_qp returns.
		auto until = Clock::now() + kWait;
		while (done.load() < 8 && Clock::now() < until)
			std::this_thread::sleep_for(100us);
		auto t0 = Clock::now();
		ASSERT_EQ(ulp::drain_qp(*a.qp, 5s), 0);
		EXPECT_LT(Clock::now() - t0, 2s)
		    << "drain waited for an event the device never sends";
		EXPECT_EQ(done.load(), 8);
		// The SRQ's other 8 receives are not this QP's: they stay, and the other QP on the
		// SRQ still receives into them.
		ulp::Cqe c2;
		c2.done = [](ulp::Cq *, ulp::Wc *) {};
		ASSERT_EQ(post_send(*b2.qp, &c2, b2.sge(0, 128)), 0);
		until = Clock::now() + kWait;
		while (done.load() < 9 && Clock::now() < until)
			std::this_thread::sleep_for(100us);
		EXPECT_EQ(done.load(), 9);
		p.stop();
	}
};

// On ULP_TEST_DEVICE the device decides which of the two runs: one that raises
// LAST_WQE_REACHED (IB/RoCE hardware) the first, one that never does (rxe) the second.
bool raises_last_wqe()
{
	DevPtr d = make_dev("127.0.0.1");
	return d && (d->attr().device_cap_flags & ulp::DEVICE_LAST_WQE_EVENT);
}

TEST_F(SrqDrain, IbWaitsForLastWqeReached)
{
	if (ulp::test::on_test_device() && !raises_last_wqe())
		GTEST_SKIP()
		    << ulp::test::test_device_name() << " never raises LAST_WQE_REACHED "
		    << "(no DEVICE_LAST_WQE_EVENT): IwarpDoesNotWaitForAnEventItNeverSends "
		    << "runs on it instead";
	run(soft::Profile::Ib);
	bool seen = false;
	while (auto ev = a.events.pop(0ms))
		seen |= ev->type == ulp::EventType::QpLastWqeReached && ev->qp == qp_on_srq.get();
	EXPECT_TRUE(seen) << "the ULP's handler must still see LAST_WQE_REACHED";
}

TEST_F(SrqDrain, IwarpDoesNotWaitForAnEventItNeverSends)
{
	if (ulp::test::on_test_device()) {
		if (raises_last_wqe())
			GTEST_SKIP()
			    << ulp::test::test_device_name() << " raises LAST_WQE_REACHED: "
			    << "a device that never does needs soft::Profile::Iwarp";
		run(soft::Profile::Ib); // the device as it is: it never sends the event
		return;
	}
	run(soft::Profile::Iwarp);
}

TEST_F(SrqDrain, DrainRqRefusedOnSrqQp)
{
	setup(soft::Profile::Ib);
	EXPECT_EQ(ulp::drain_rq(*a.qp, 100ms), -EINVAL);
	EXPECT_EQ(a.qp->state(), ulp::QpState::Rts) << "a refused drain must not touch the QP";
}

} // namespace
