// SPDX-License-Identifier: MIT
// tests/soft/counters_test.cc - device and QP counters against a known sequence.
#include "soft_test_util.h"

#include <thread>

using namespace ulp;
using namespace soft_test;

namespace
{

void expect_counters(const soft::Counters &c, uint64_t posted, uint64_t completed, uint64_t errors,
                     uint64_t flushes, uint64_t tx, uint64_t rx, uint64_t rnr)
{
	EXPECT_EQ(c.posted, posted);
	EXPECT_EQ(c.completed, completed);
	EXPECT_EQ(c.errors, errors);
	EXPECT_EQ(c.flushes, flushes);
	EXPECT_EQ(c.bytes_tx, tx);
	EXPECT_EQ(c.bytes_rx, rx);
	EXPECT_EQ(c.rnr_naks, rnr);
}

void expect_same(const soft::Counters &a, const soft::Counters &b)
{
	EXPECT_EQ(a.posted, b.posted);
	EXPECT_EQ(a.completed, b.completed);
	EXPECT_EQ(a.errors, b.errors);
	EXPECT_EQ(a.flushes, b.flushes);
	EXPECT_EQ(a.bytes_tx, b.bytes_tx);
	EXPECT_EQ(a.bytes_rx, b.bytes_rx);
	EXPECT_EQ(a.rnr_naks, b.rnr_naks);
}

// Run inline progress until pred or the bound.
template <typename P> bool progress_until(Device &d, P pred)
{
	auto until = Clock::now() + kWait;
	while (!pred()) {
		if (Clock::now() >= until)
			return false;
		std::this_thread::sleep_for(200us);
		soft::progress(d);
	}
	return true;
}

} // namespace

TEST(SoftCounters, KnownSequence)
{
	HandPair p;
	// min_rnr_timer 31 = 491 ms: the one RNR NAK below cannot be retried before the
	// receive is posted, so the count is exact.
	ASSERT_TRUE(p.init(soft::Exec::Inline, soft::Profile::Ib, 7, 31));
	Side &a = p.a, &b = p.b;
	expect_counters(soft::qp_counters(*a.qp), 0, 0, 0, 0, 0, 0, 0);
	expect_counters(soft::device_counters(*p.da), 0, 0, 0, 0, 0, 0, 0);

	std::vector<Wc> a_wcs, b_wcs;
	auto reap = [&] {
		for (auto &w : drain_cq(*a.scq))
			a_wcs.push_back(w);
		for (auto &w : drain_cq(*a.rcq))
			a_wcs.push_back(w);
		for (auto &w : drain_cq(*b.scq))
			b_wcs.push_back(w);
		for (auto &w : drain_cq(*b.rcq))
			b_wcs.push_back(w);
	};

	Cqe c[16];
	for (int i = 0; i < 3; i++)
		ASSERT_EQ(post_recv(*b.qp, &c[i], b.sge(i * 1024, 1024)), 0);
	// SEND 100, WRITE 200, READ 300, WRITE_WITH_IMM 50, unsignaled WRITE 10.
	ASSERT_EQ(post_send(*a.qp, &c[3], a.sge(0, 100)), 0);
	ASSERT_EQ(
	    post_rdma(*a.qp, &c[4], a.sge(0, 200), WrOpcode::RdmaWrite, b.at(8192), b.mr->rkey()),
	    0);
	ASSERT_EQ(
	    post_rdma(*a.qp, &c[5], a.sge(1024, 300), WrOpcode::RdmaRead, b.at(8192), b.mr->rkey()),
	    0);
	ASSERT_EQ(post_rdma(*a.qp, &c[6], a.sge(0, 50), WrOpcode::RdmaWriteWithImm, b.at(12288),
	                    b.mr->rkey(), SEND_SIGNALED, 9),
	          0);
	ASSERT_EQ(post_rdma(*a.qp, nullptr, a.sge(0, 10), WrOpcode::RdmaWrite, b.at(16384),
	                    b.mr->rkey(), 0),
	          0);
	reap();
	ASSERT_EQ(a_wcs.size(), 4u);
	ASSERT_EQ(b_wcs.size(), 2u);
	expect_counters(soft::qp_counters(*a.qp), 5, 4, 0, 0, 360, 300, 0);
	expect_counters(soft::qp_counters(*b.qp), 3, 2, 0, 0, 300, 360, 0);

	// SEND 20 takes the last receive; SEND 30 meets an RNR NAK until a receive arrives.
	ASSERT_EQ(post_send(*a.qp, &c[7], a.sge(0, 20)), 0);
	ASSERT_EQ(post_send(*a.qp, &c[8], a.sge(0, 30)), 0);
	reap();
	EXPECT_EQ(soft::qp_counters(*a.qp).rnr_naks, 1u);
	ASSERT_EQ(post_recv(*b.qp, &c[9], b.sge(3072, 1024)), 0);
	ASSERT_TRUE(progress_until(*p.da, [&] {
		reap();
		return a_wcs.size() == 6;
	}));
	EXPECT_EQ(a.qp->state(), QpState::Rts);
	expect_counters(soft::qp_counters(*a.qp), 7, 6, 0, 0, 410, 300, 1);
	expect_counters(soft::qp_counters(*b.qp), 4, 4, 0, 0, 300, 410, 0);

	// A WRITE with a bad rkey: REM_ACCESS_ERR at A (an error), B to ERR (its receive
	// flushed, no completion of its own for the WRITE).
	ASSERT_EQ(post_recv(*b.qp, &c[10], b.sge(4096, 1024)), 0);
	ASSERT_EQ(post_rdma(*a.qp, &c[11], a.sge(0, 64), WrOpcode::RdmaWrite, b.at(0),
	                    b.mr->rkey() + (77u << 8)),
	          0);
	// Posted in ERR: one signaled, one unsignaled; both flush.
	ASSERT_EQ(post_send(*a.qp, &c[12], a.sge(0, 8)), 0);
	ASSERT_EQ(post_send(*a.qp, nullptr, a.sge(0, 8), WrOpcode::Send, 0), 0);
	reap();
	soft::progress(*p.da);
	soft::progress(*p.db);
	reap();
	ASSERT_EQ(a.qp->state(), QpState::Err);
	ASSERT_EQ(b.qp->state(), QpState::Err);
	size_t a_flush = 0, b_flush = 0, a_err = 0;
	for (auto &w : a_wcs) {
		a_flush += w.status == WcStatus::WrFlushErr;
		a_err += w.status != WcStatus::Success && w.status != WcStatus::WrFlushErr;
	}
	for (auto &w : b_wcs)
		b_flush += w.status == WcStatus::WrFlushErr;
	EXPECT_EQ(a_err, 1u);
	EXPECT_EQ(b_flush, 1u);
	soft::Counters ca = soft::qp_counters(*a.qp), cb = soft::qp_counters(*b.qp);
	EXPECT_EQ(ca.posted, 10u);
	EXPECT_EQ(ca.errors, 1u);
	EXPECT_EQ(ca.flushes, 2u); // the unsignaled one too
	EXPECT_EQ(ca.completed, a_wcs.size()) << "completed counts what reached the CQs";
	EXPECT_EQ(ca.completed, 6u + 1u + a_flush);
	EXPECT_EQ(ca.bytes_tx, 410u);
	EXPECT_EQ(ca.bytes_rx, 300u);
	EXPECT_EQ(ca.rnr_naks, 1u);
	expect_counters(cb, 5, 5, 0, 1, 300, 410, 0);
	EXPECT_EQ(cb.completed, b_wcs.size());

	// One QP per device: the device's counters are the QP's.
	expect_same(soft::device_counters(*p.da), ca);
	expect_same(soft::device_counters(*p.db), cb);
}

// rnr_retry n: 1 + n RNR NAKs, then RNR_RETRY_EXC_ERR.
TEST(SoftCounters, RnrRetryExceeded)
{
	HandPair p;
	ASSERT_TRUE(p.init(soft::Exec::Inline, soft::Profile::Ib, 2));
	Cqe c;
	ASSERT_EQ(post_send(*p.a.qp, &c, p.a.sge(0, 16)), 0);
	std::vector<Wc> w;
	ASSERT_TRUE(progress_until(*p.da, [&] {
		for (auto &x : drain_cq(*p.a.scq))
			w.push_back(x);
		return !w.empty();
	}));
	ASSERT_EQ(w.size(), 1u);
	EXPECT_EQ(w[0].status, WcStatus::RnrRetryExcErr);
	soft::Counters ca = soft::qp_counters(*p.a.qp);
	EXPECT_EQ(ca.rnr_naks, 3u);
	EXPECT_EQ(ca.errors, 1u);
	EXPECT_EQ(ca.completed, 1u);
	EXPECT_EQ(ca.bytes_tx, 0u);
	EXPECT_EQ(p.a.qp->state(), QpState::Err);
	EXPECT_EQ(soft::device_counters(*p.da).rnr_naks, 3u);
}

// Device counters sum over QPs and count SRQ receives as posted.
TEST(SoftCounters, DeviceSumsQps)
{
	DevPtr d = make_dev("127.0.0.1", soft::Exec::Inline);
	ASSERT_TRUE(d);
	Side s1, s2;
	s1.init(*d);
	s2.init(*d);
	s1.create_qp();
	s2.create_qp();
	ASSERT_EQ(connect_qp(*s1.qp, *d, s2.qp->qp_num()), 0);
	ASSERT_EQ(connect_qp(*s2.qp, *d, s1.qp->qp_num()), 0);
	Cqe c[4];
	ASSERT_EQ(post_recv(*s2.qp, &c[0], s2.sge(0, 64)), 0);
	ASSERT_EQ(post_send(*s1.qp, &c[1], s1.sge(0, 40)), 0);
	ASSERT_EQ(
	    post_rdma(*s2.qp, &c[2], s2.sge(0, 24), WrOpcode::RdmaWrite, s1.at(100), s1.mr->rkey()),
	    0);
	SrqInitAttr sa;
	sa.max_wr = 4;
	auto srq = s1.pd->create_srq(sa);
	ASSERT_TRUE(srq);
	Sge sg = s1.sge(1000, 8);
	RecvWr rw;
	rw.wr_cqe = &c[3];
	rw.sg_list = &sg;
	rw.num_sge = 1;
	const RecvWr *bad = nullptr;
	ASSERT_EQ(srq->post_recv(&rw, &bad), 0);
	soft::Counters q1 = soft::qp_counters(*s1.qp), q2 = soft::qp_counters(*s2.qp);
	soft::Counters dv = soft::device_counters(*d);
	expect_counters(q1, 1, 1, 0, 0, 40, 24, 0);
	expect_counters(q2, 2, 2, 0, 0, 24, 40, 0);
	EXPECT_EQ(dv.posted, 4u); // 3 QP WRs + 1 SRQ receive
	EXPECT_EQ(dv.completed, 3u);
	EXPECT_EQ(dv.bytes_tx, 64u);
	EXPECT_EQ(dv.bytes_rx, 64u);
}

// Counters are monotonic: a destroyed QP's work stays in its device's counters.
TEST(SoftCounters, DeviceCountersSurviveQpDestruction)
{
	HandPair p;
	ASSERT_TRUE(p.init(soft::Exec::Inline));
	Cqe c[3];
	ASSERT_EQ(post_recv(*p.b.qp, &c[0], p.b.sge(0, 64)), 0);
	ASSERT_EQ(post_send(*p.a.qp, &c[1], p.a.sge(0, 48)), 0);
	ASSERT_EQ(post_rdma(*p.a.qp, &c[2], p.a.sge(0, 16), WrOpcode::RdmaWrite, p.b.at(128),
	                    p.b.mr->rkey()),
	          0);
	ASSERT_EQ(poll_n(*p.a.scq, 2).size(), 2u);
	ASSERT_EQ(poll_n(*p.b.rcq, 1).size(), 1u);
	soft::Counters da = soft::device_counters(*p.da), db = soft::device_counters(*p.db);
	expect_counters(da, 2, 2, 0, 0, 64, 0, 0);
	expect_counters(db, 1, 1, 0, 0, 0, 64, 0);
	p.a.own_qp.reset();
	p.a.qp = nullptr;
	p.b.own_qp.reset();
	p.b.qp = nullptr;
	expect_same(soft::device_counters(*p.da), da);
	expect_same(soft::device_counters(*p.db), db);
	// A new QP starts from zero and adds to the device's totals.
	p.a.create_qp();
	expect_counters(soft::qp_counters(*p.a.qp), 0, 0, 0, 0, 0, 0, 0);
	QpAttr init;
	init.qp_state = QpState::Init;
	ASSERT_EQ(p.a.qp->modify(init, QP_STATE | QP_PORT | QP_ACCESS_FLAGS), 0);
	Cqe r;
	ASSERT_EQ(post_recv(*p.a.qp, &r, p.a.sge(0, 8)), 0);
	EXPECT_EQ(soft::device_counters(*p.da).posted, 3u);
}

// post_sends counts the calls (doorbells), not the WRs: a chain of three in one call is one;
// a call that took nothing is none; receives are not send doorbells.
TEST(SoftCounters, PostSendsCountsCallsThatTookWrs)
{
	HandPair p;
	ASSERT_TRUE(p.init(soft::Exec::Inline));
	Cqe c[8];
	for (int i = 0; i < 4; i++)
		ASSERT_EQ(post_recv(*p.b.qp, &c[i], p.b.sge(size_t(i) * 64, 64)), 0);
	Sge s[3] = {p.a.sge(0, 8), p.a.sge(64, 8), p.a.sge(128, 8)};
	SendWr wr[3];
	for (int i = 0; i < 3; i++) {
		wr[i].wr_cqe = &c[4 + i];
		wr[i].sg_list = &s[i];
		wr[i].num_sge = 1;
		wr[i].opcode = WrOpcode::Send;
		wr[i].send_flags = i == 2 ? uint32_t{SEND_SIGNALED} : 0u;
		wr[i].next = i < 2 ? &wr[i + 1] : nullptr;
	}
	const SendWr *bad = nullptr;
	ASSERT_EQ(p.a.qp->post_send(&wr[0], &bad), 0);
	ASSERT_EQ(post_send(*p.a.qp, &c[7], p.a.sge(192, 8)), 0);
	// Refused at its first WR (too many SGEs): it rang nothing.
	SendWr refused = wr[2];
	refused.next = nullptr;
	refused.num_sge = 1000;
	EXPECT_NE(p.a.qp->post_send(&refused, &bad), 0);
	EXPECT_EQ(bad, &refused);
	ASSERT_EQ(poll_n(*p.a.scq, 2).size(), 2u);
	const soft::Counters qa = soft::qp_counters(*p.a.qp);
	EXPECT_EQ(qa.post_sends, 2u);
	EXPECT_EQ(qa.posted, 4u);
	EXPECT_EQ(soft::qp_counters(*p.b.qp).post_sends, 0u);
	EXPECT_EQ(soft::device_counters(*p.da).post_sends, 2u);
	// A destroyed QP's calls stay in its device's count.
	p.a.own_qp.reset();
	p.a.qp = nullptr;
	EXPECT_EQ(soft::device_counters(*p.da).post_sends, 2u);
}
