// SPDX-License-Identifier: MIT
// tests/soft/queues_test.cc - CQ moderation and resize, the SRQ limit event, and
// LAST_WQE_REACHED, as the soft profiles define them.
#include "soft_test_util.h"

#include <cerrno>
#include <thread>

using namespace ulp;
using namespace soft_test;

namespace
{

// Two engine-mode devices; A's send CQ reports to a channel.
struct ChanPair {
	DevPtr da, db;
	std::unique_ptr<CompChannel> ch;
	Side a, b;

	bool init(soft::Profile prof = soft::Profile::Ib)
	{
		da = make_dev("127.0.0.1", soft::Exec::Engine, prof);
		db = make_dev("127.0.0.2", soft::Exec::Engine, prof);
		if (!da || !db)
			return false;
		ch = da->create_comp_channel();
		if (!ch)
			return false;
		a.init(*da, 1 << 16, 256, ch.get());
		b.init(*db);
		a.create_qp();
		b.create_qp();
		return connect_pair(a, b) == 0;
	}

	// One signaled WRITE from A, reaped from A's send CQ.
	bool write_one()
	{
		Cqe c;
		if (post_rdma(*a.qp, &c, a.sge(0, 8), WrOpcode::RdmaWrite, b.at(0), b.mr->rkey()))
			return false;
		auto w = poll_n(*a.scq, 1);
		return w.size() == 1 && w[0].status == WcStatus::Success;
	}

	int event(int timeout_ms)
	{
		Cq *cq = nullptr;
		int rc = ch->get_cq_event(&cq, timeout_ms);
		if (!rc) {
			EXPECT_EQ(cq, a.scq.get());
		}
		return rc;
	}
};

} // namespace

TEST(SoftCq, UnmoderatedEventOnFirstCompletion)
{
	ChanPair p;
	ASSERT_TRUE(p.init());
	ASSERT_EQ(p.a.scq->req_notify(CqNotify::NextComp), 0);
	EXPECT_EQ(p.event(0), -EAGAIN);
	ASSERT_TRUE(p.write_one());
	EXPECT_EQ(p.event(5000), 0);
	// Arm-once: no event for the next completion until re-armed.
	ASSERT_TRUE(p.write_one());
	EXPECT_EQ(p.event(50), -EAGAIN);
}

TEST(SoftCq, ModerationCount)
{
	ChanPair p;
	ASSERT_TRUE(p.init());
	ASSERT_EQ(p.a.scq->modify(3, 0), 0);
	ASSERT_EQ(p.a.scq->req_notify(CqNotify::NextComp), 0);
	ASSERT_TRUE(p.write_one());
	EXPECT_EQ(p.event(20), -EAGAIN) << "event after 1 of 3 completions";
	ASSERT_TRUE(p.write_one());
	EXPECT_EQ(p.event(20), -EAGAIN) << "event after 2 of 3 completions";
	ASSERT_TRUE(p.write_one());
	EXPECT_EQ(p.event(5000), 0) << "no event after 3 of 3 completions";
	EXPECT_EQ(p.event(0), -EAGAIN) << "one event, not several";
	// Re-armed, the count starts over.
	ASSERT_EQ(p.a.scq->req_notify(CqNotify::NextComp), 0);
	ASSERT_TRUE(p.write_one());
	ASSERT_TRUE(p.write_one());
	EXPECT_EQ(p.event(20), -EAGAIN);
	ASSERT_TRUE(p.write_one());
	EXPECT_EQ(p.event(5000), 0);
}

TEST(SoftCq, ModerationPeriod)
{
	ChanPair p;
	ASSERT_TRUE(p.init());
	constexpr uint16_t kPeriodUs = 60000;
	ASSERT_EQ(p.a.scq->modify(100, kPeriodUs), 0);
	ASSERT_EQ(p.a.scq->req_notify(CqNotify::NextComp), 0);
	auto t0 = Clock::now();
	ASSERT_TRUE(p.write_one());
	if (Clock::now() - t0 < 40ms) {
		EXPECT_EQ(p.event(0), -EAGAIN) << "event before the period with 1 of 100";
	}
	EXPECT_EQ(p.event(5000), 0) << "no event after the period";
	EXPECT_GE(Clock::now() - t0, std::chrono::microseconds(kPeriodUs));
	EXPECT_EQ(p.event(100), -EAGAIN) << "the timer raised more than one event";
}

// A moderation timer left over from an earlier arming must not cut a later period short.
TEST(SoftCq, ModerationPeriodRestartsWhenRearmed)
{
	ChanPair p;
	ASSERT_TRUE(p.init());
	constexpr uint16_t kPeriodUs = 60000;
	ASSERT_EQ(p.a.scq->modify(2, kPeriodUs), 0);
	ASSERT_EQ(p.a.scq->req_notify(CqNotify::NextComp), 0);
	// Two completions reach the count: event now, the period timer is still pending.
	ASSERT_TRUE(p.write_one());
	ASSERT_TRUE(p.write_one());
	ASSERT_EQ(p.event(5000), 0);
	std::this_thread::sleep_for(40ms);
	// Re-arm, one completion: its period starts now, so no event for ~60 ms.
	ASSERT_EQ(p.a.scq->req_notify(CqNotify::NextComp), 0);
	auto t1 = Clock::now();
	ASSERT_TRUE(p.write_one());
	ASSERT_EQ(p.event(5000), 0);
	auto dt = Clock::now() - t1;
	EXPECT_GE(dt, 50ms) << "event "
	                    << std::chrono::duration_cast<std::chrono::milliseconds>(dt).count()
	                    << " ms after the completion, period 60 ms";
}

TEST(SoftCq, ModifyMatchesCapability)
{
	for (auto prof : {soft::Profile::Ib, soft::Profile::Iwarp}) {
		DevPtr d = make_dev("127.0.0.1", soft::Exec::Inline, prof);
		ASSERT_TRUE(d);
		CqInitAttr ca;
		ca.cqe = 16;
		auto cq = d->create_cq(ca);
		ASSERT_TRUE(cq);
		bool mod = d->attr().device_cap_flags & DEVICE_CQ_MODERATION;
		EXPECT_EQ(cq->modify(4, 100), mod ? 0 : -EOPNOTSUPP);
		bool rsz = d->attr().device_cap_flags & DEVICE_CQ_RESIZE;
		EXPECT_EQ(cq->resize(32), rsz ? 0 : -EOPNOTSUPP);
		EXPECT_EQ(cq->cqe(), rsz ? 32 : 16);
	}
}

TEST(SoftCq, ResizeKeepsCompletions)
{
	DevPtr d = make_dev("127.0.0.1", soft::Exec::Inline);
	ASSERT_TRUE(d);
	Side s;
	s.init(*d, 4096, 8);
	s.create_qp();
	ASSERT_EQ(connect_qp(*s.qp, *d, s.qp->qp_num()), 0);
	Cqe c[32];
	auto write = [&](int i) {
		return post_rdma(*s.qp, &c[i], s.sge(0, 8), WrOpcode::RdmaWrite, s.at(64),
		                 s.mr->rkey());
	};
	for (int i = 0; i < 3; i++)
		ASSERT_EQ(write(i), 0);
	// Refused: below the 3 pending completions, non-positive, above max_cqe.
	EXPECT_EQ(s.scq->resize(2), -EINVAL);
	EXPECT_EQ(s.scq->resize(0), -EINVAL);
	EXPECT_EQ(s.scq->resize(static_cast<int>(d->attr().max_cqe) + 1), -EINVAL);
	EXPECT_EQ(s.scq->cqe(), 8);
	// Shrink to 4 with 3 pending: they survive, in order, and the ring wraps correctly.
	ASSERT_EQ(s.scq->resize(4), 0);
	EXPECT_GE(s.scq->cqe(), 4);
	Wc wc[8];
	ASSERT_EQ(s.scq->poll(std::span<Wc>(wc, 1)), 1);
	EXPECT_EQ(wc[0].wr_cqe, &c[0]);
	ASSERT_EQ(write(3), 0);
	ASSERT_EQ(write(4), 0);
	auto w = drain_cq(*s.scq);
	ASSERT_EQ(w.size(), 4u);
	for (int i = 0; i < 4; i++) {
		EXPECT_EQ(w[i].wr_cqe, &c[i + 1]) << i;
		EXPECT_EQ(w[i].status, WcStatus::Success);
	}
	// Grow with completions pending.
	for (int i = 5; i < 8; i++)
		ASSERT_EQ(write(i), 0);
	ASSERT_EQ(s.scq->resize(20), 0);
	EXPECT_EQ(s.scq->cqe(), 20);
	for (int i = 8; i < 20; i++)
		ASSERT_EQ(write(i), 0);
	w = drain_cq(*s.scq);
	ASSERT_EQ(w.size(), 15u);
	for (int i = 0; i < 15; i++)
		EXPECT_EQ(w[i].wr_cqe, &c[i + 5]) << i;
}

TEST(SoftCq, ResizeRefusedOnIwarp)
{
	DevPtr d = make_dev("127.0.0.1", soft::Exec::Inline, soft::Profile::Iwarp);
	ASSERT_TRUE(d);
	CqInitAttr ca;
	ca.cqe = 8;
	auto cq = d->create_cq(ca);
	ASSERT_TRUE(cq);
	EXPECT_EQ(cq->resize(16), -EOPNOTSUPP);
	EXPECT_EQ(cq->resize(4), -EOPNOTSUPP);
	EXPECT_EQ(cq->cqe(), 8);
}

// ---------------------------------------------------------------------------------------------
// SRQ

namespace
{

// A (on 127.0.0.1) sends to B, whose QP takes its receives from an SRQ.
struct SrqPair {
	DevPtr da, db;
	Side a, b;
	std::unique_ptr<Srq> srq;
	EventQueue<Ev> srq_events;
	Cqe rc[32], sc[32];
	int nsend = 0, nrecv = 0;

	~SrqPair()
	{
		// The QP goes before the SRQ it takes receives from, the SRQ before the PD.
		b.own_qp.reset();
		b.qp = nullptr;
		srq.reset();
	}

	bool init(soft::Exec exec, soft::Profile prof = soft::Profile::Ib, uint32_t max_wr = 8,
	          uint32_t limit = 0)
	{
		da = make_dev("127.0.0.1", exec, prof);
		db = make_dev("127.0.0.2", exec, prof);
		if (!da || !db)
			return false;
		a.init(*da);
		b.init(*db);
		SrqInitAttr sa;
		sa.max_wr = max_wr;
		sa.max_sge = 1;
		sa.srq_limit = limit;
		sa.event_handler = recorder(srq_events);
		srq = b.pd->create_srq(sa);
		if (!srq)
			return false;
		a.create_qp();
		b.create_qp(srq.get());
		return connect_pair(a, b) == 0;
	}

	int post_srq(int n)
	{
		for (int i = 0; i < n; i++) {
			Sge s = b.sge(nrecv * 64, 64);
			RecvWr wr;
			wr.wr_cqe = &rc[nrecv++];
			wr.sg_list = &s;
			wr.num_sge = 1;
			const RecvWr *bad = nullptr;
			int r = srq->post_recv(&wr, &bad);
			if (r)
				return r;
		}
		return 0;
	}

	// One SEND, waited for at both ends.
	bool send_one()
	{
		if (post_send(*a.qp, &sc[nsend++], a.sge(0, 8)))
			return false;
		return poll_n(*a.scq, 1).size() == 1 && poll_n(*b.rcq, 1).size() == 1;
	}

	size_t limit_events()
	{
		return srq_events.count(
		    [](const Ev &e) { return e.type == EventType::SrqLimitReached; });
	}
};

} // namespace

TEST(SoftSrq, LimitEventFiresOnceBelowLimit)
{
	SrqPair p;
	ASSERT_TRUE(p.init(soft::Exec::Inline));
	ASSERT_EQ(p.post_srq(5), 0);
	EXPECT_EQ(p.srq->arm_limit(p.srq->max_wr() + 1), -EINVAL);
	ASSERT_EQ(p.srq->arm_limit(3), 0);
	ASSERT_TRUE(p.send_one()); // 4 left
	ASSERT_TRUE(p.send_one()); // 3 left: not below 3
	EXPECT_EQ(p.limit_events(), 0u);
	ASSERT_TRUE(p.send_one()); // 2 left: below
	auto e = p.srq_events.pop(100ms);
	ASSERT_TRUE(e);
	EXPECT_EQ(e->type, EventType::SrqLimitReached);
	EXPECT_EQ(e->srq, p.srq.get());
	ASSERT_TRUE(p.send_one()); // 1 left: the limit is one-shot
	EXPECT_EQ(p.limit_events(), 0u);

	// Re-armed, it fires again (once) on the next drop below.
	ASSERT_EQ(p.post_srq(3), 0); // 4 left
	ASSERT_EQ(p.srq->arm_limit(2), 0);
	ASSERT_TRUE(p.send_one()); // 3
	ASSERT_TRUE(p.send_one()); // 2
	EXPECT_EQ(p.limit_events(), 0u);
	ASSERT_TRUE(p.send_one()); // 1
	EXPECT_EQ(p.limit_events(), 1u);
	ASSERT_TRUE(p.send_one()); // 0
	EXPECT_EQ(p.limit_events(), 1u);
}

TEST(SoftSrq, LimitArmedAtCreation)
{
	SrqPair p;
	ASSERT_TRUE(p.init(soft::Exec::Engine, soft::Profile::Ib, 8, 2));
	ASSERT_EQ(p.post_srq(3), 0);
	ASSERT_TRUE(p.send_one()); // 2 left
	std::this_thread::sleep_for(20ms);
	EXPECT_EQ(p.limit_events(), 0u);
	ASSERT_TRUE(p.send_one()); // 1 left
	auto e = p.srq_events.pop();
	ASSERT_TRUE(e);
	EXPECT_EQ(e->type, EventType::SrqLimitReached);
}

// ---------------------------------------------------------------------------------------------
// LAST_WQE_REACHED

namespace
{

size_t last_wqe(EventQueue<Ev> &q)
{
	return q.count([](const Ev &e) { return e.type == EventType::QpLastWqeReached; });
}

// B's QP (on an SRQ) enters ERR; a WR posted afterwards flushes, which shows that the
// engine has processed the error.
void to_err_and_flush(SrqPair &p)
{
	QpAttr e;
	e.qp_state = QpState::Err;
	ASSERT_EQ(p.b.qp->modify(e, QP_STATE), 0);
	Cqe c;
	ASSERT_EQ(post_send(*p.b.qp, &c, p.b.sge(0, 8)), 0);
	auto w = poll_n(*p.b.scq, 1);
	ASSERT_EQ(w.size(), 1u);
	EXPECT_EQ(w[0].status, WcStatus::WrFlushErr);
}

} // namespace

TEST(SoftSrq, LastWqeReachedOnIb)
{
	SrqPair p;
	ASSERT_TRUE(p.init(soft::Exec::Engine, soft::Profile::Ib));
	ASSERT_EQ(p.post_srq(4), 0);
	ASSERT_TRUE(p.send_one());
	to_err_and_flush(p);
	auto e =
	    p.b.events.wait_for([](const Ev &v) { return v.type == EventType::QpLastWqeReached; });
	ASSERT_TRUE(e) << "no LAST_WQE_REACHED on the Ib profile";
	EXPECT_EQ(e->qp, p.b.qp);
	// The SRQ's receives are not the QP's: nothing of them is flushed to its CQ.
	EXPECT_TRUE(drain_cq(*p.b.rcq).empty());
	// Once per transition: more flushing raises no second event.
	Cqe c;
	ASSERT_EQ(post_send(*p.b.qp, &c, p.b.sge(0, 8)), 0);
	ASSERT_EQ(poll_n(*p.b.scq, 1).size(), 1u);
	std::this_thread::sleep_for(20ms);
	EXPECT_EQ(last_wqe(p.b.events), 0u);
	// A QP not on an SRQ never gets one.
	QpAttr err;
	err.qp_state = QpState::Err;
	ASSERT_EQ(p.a.qp->modify(err, QP_STATE), 0);
	ASSERT_EQ(post_send(*p.a.qp, &c, p.a.sge(0, 8)), 0);
	ASSERT_EQ(poll_n(*p.a.scq, 1).size(), 1u);
	std::this_thread::sleep_for(20ms);
	EXPECT_EQ(last_wqe(p.a.events), 0u);
}

TEST(SoftSrq, LastWqeReachedAfterErrorOnIb)
{
	// Entering ERR through an error (an access violation at the responder), not modify.
	SrqPair p;
	ASSERT_TRUE(p.init(soft::Exec::Engine, soft::Profile::Ib));
	ASSERT_EQ(p.post_srq(2), 0);
	Cqe c;
	ASSERT_EQ(post_rdma(*p.a.qp, &c, p.a.sge(0, 8), WrOpcode::RdmaWrite, p.b.at(0),
	                    p.b.mr->rkey() + (99u << 8)),
	          0);
	auto w = poll_n(*p.a.scq, 1);
	ASSERT_EQ(w.size(), 1u);
	EXPECT_EQ(w[0].status, WcStatus::RemAccessErr);
	EXPECT_TRUE(
	    p.b.events.wait_for([](const Ev &v) { return v.type == EventType::QpLastWqeReached; }));
}

TEST(SoftSrq, NoLastWqeOnIwarp)
{
	SrqPair p;
	ASSERT_TRUE(p.init(soft::Exec::Engine, soft::Profile::Iwarp));
	ASSERT_EQ(p.post_srq(4), 0);
	ASSERT_TRUE(p.send_one());
	to_err_and_flush(p);
	std::this_thread::sleep_for(200ms);
	EXPECT_EQ(last_wqe(p.b.events), 0u);
}
