// SPDX-License-Identifier: MIT
// tests/soft/faults_test.cc - the soft provider's fault injection API.
#include "soft_test_util.h"

#include <cerrno>
#include <thread>

using namespace ulp;
using namespace soft_test;

namespace
{

size_t count_status(const std::vector<Wc> &v, WcStatus s)
{
	return static_cast<size_t>(
	    std::count_if(v.begin(), v.end(), [s](const Wc &w) { return w.status == s; }));
}

bool has_event(EventQueue<Ev> &q, EventType t, std::chrono::milliseconds timeout = kWait)
{
	return q.wait_for([t](const Ev &e) { return e.type == t; }, timeout).has_value();
}

} // namespace

TEST(SoftFault, PostSendFailsAtNthWr)
{
	HandPair p;
	ASSERT_TRUE(p.init(soft::Exec::Inline));
	soft::FaultRule r;
	r.point = soft::FaultPoint::PostSend;
	r.qp_num = p.a.qp->qp_num();
	r.nth = 3;
	EXPECT_GE(soft::inject_fault(*p.da, r), 0);

	constexpr int kN = 5;
	Cqe cqe[kN];
	Sge sge[kN];
	RdmaWr wr[kN];
	for (int i = 0; i < kN; i++) {
		p.a.buf[i * 8] = static_cast<uint8_t>(0x10 + i);
		sge[i] = p.a.sge(i * 8, 8);
		wr[i].wr_cqe = &cqe[i];
		wr[i].sg_list = &sge[i];
		wr[i].num_sge = 1;
		wr[i].opcode = WrOpcode::RdmaWrite;
		wr[i].send_flags = SEND_SIGNALED;
		wr[i].remote_addr = p.b.at(i * 8);
		wr[i].rkey = p.b.mr->rkey();
		wr[i].next = i + 1 < kN ? &wr[i + 1] : nullptr;
	}
	const SendWr *bad = nullptr;
	EXPECT_EQ(p.a.qp->post_send(&wr[0], &bad), -EIO);
	EXPECT_EQ(bad, &wr[2]);
	EXPECT_EQ(soft::faults_fired(*p.da), 1u);
	EXPECT_EQ(soft::qp_counters(*p.a.qp).posted, 2u);
	auto wcs = poll_n(*p.a.scq, 2);
	ASSERT_EQ(wcs.size(), 2u);
	EXPECT_EQ(wcs[0].wr_cqe, &cqe[0]);
	EXPECT_EQ(wcs[1].wr_cqe, &cqe[1]);
	EXPECT_EQ(count_status(wcs, WcStatus::Success), 2u);
	EXPECT_TRUE(drain_cq(*p.a.scq).empty()); // WRs 2..4 never went anywhere
	EXPECT_EQ(p.b.buf[16], 0);
	EXPECT_EQ(p.a.qp->state(), QpState::Rts); // a failed post is not a QP error

	// The rule fired its one time; the rest of the chain posts fine now.
	bad = nullptr;
	EXPECT_EQ(p.a.qp->post_send(&wr[2], &bad), 0);
	wcs = poll_n(*p.a.scq, 3);
	ASSERT_EQ(wcs.size(), 3u);
	EXPECT_EQ(wcs[0].wr_cqe, &cqe[2]);
	EXPECT_EQ(soft::faults_fired(*p.da), 1u);
	for (int i = 0; i < kN; i++)
		EXPECT_EQ(p.b.buf[i * 8], 0x10 + i);
}

TEST(SoftFault, PostSendRuleForOtherQpDoesNotFire)
{
	HandPair p;
	ASSERT_TRUE(p.init(soft::Exec::Inline));
	soft::FaultRule r;
	r.point = soft::FaultPoint::PostSend;
	r.qp_num = p.a.qp->qp_num() + 100;
	EXPECT_GE(soft::inject_fault(*p.da, r), 0);
	Cqe c;
	EXPECT_EQ(
	    post_rdma(*p.a.qp, &c, p.a.sge(0, 8), WrOpcode::RdmaWrite, p.b.at(0), p.b.mr->rkey()),
	    0);
	EXPECT_EQ(soft::faults_fired(*p.da), 0u);
	soft::clear_faults(*p.da);
	// clear_faults removes rules: a rule for any QP, then cleared, never fires.
	r.qp_num = 0;
	r.nth = 1;
	EXPECT_GE(soft::inject_fault(*p.da, r), 0);
	soft::clear_faults(*p.da);
	EXPECT_EQ(
	    post_rdma(*p.a.qp, &c, p.a.sge(0, 8), WrOpcode::RdmaWrite, p.b.at(0), p.b.mr->rkey()),
	    0);
	EXPECT_EQ(soft::faults_fired(*p.da), 0u);
	// A probability rule needs a probability in (0, 1].
	soft::FaultRule bad;
	bad.nth = 0;
	bad.probability = 0;
	EXPECT_LT(soft::inject_fault(*p.da, bad), 0);
	bad.probability = 1.5;
	EXPECT_LT(soft::inject_fault(*p.da, bad), 0);
}

TEST(SoftFault, PostRecvFailsAtNthPost)
{
	HandPair p;
	ASSERT_TRUE(p.init(soft::Exec::Inline));
	soft::FaultRule r;
	r.point = soft::FaultPoint::PostRecv;
	r.qp_num = p.b.qp->qp_num();
	r.nth = 2;
	EXPECT_GE(soft::inject_fault(*p.db, r), 0);
	Cqe rc[3], sc[2];
	EXPECT_EQ(post_recv(*p.b.qp, &rc[0], p.b.sge(0, 64)), 0);
	RecvWr wr;
	Sge s = p.b.sge(64, 64);
	wr.wr_cqe = &rc[1];
	wr.sg_list = &s;
	wr.num_sge = 1;
	const RecvWr *bad = nullptr;
	EXPECT_EQ(p.b.qp->post_recv(&wr, &bad), -EIO);
	EXPECT_EQ(bad, &wr);
	EXPECT_EQ(soft::faults_fired(*p.db), 1u);
	EXPECT_EQ(post_recv(*p.b.qp, &rc[2], p.b.sge(128, 64)), 0);
	EXPECT_EQ(soft::qp_counters(*p.b.qp).posted, 2u);
	// Two SENDs land in the two receives that were posted; the failed one does not exist.
	EXPECT_EQ(post_send(*p.a.qp, &sc[0], p.a.sge(0, 10)), 0);
	EXPECT_EQ(post_send(*p.a.qp, &sc[1], p.a.sge(0, 10)), 0);
	auto wcs = poll_n(*p.b.rcq, 2);
	ASSERT_EQ(wcs.size(), 2u);
	EXPECT_EQ(wcs[0].wr_cqe, &rc[0]);
	EXPECT_EQ(wcs[1].wr_cqe, &rc[2]);
	EXPECT_EQ(count_status(wcs, WcStatus::Success), 2u);
}

// Like PostSend, the rule counts WRs: a chain fails at its nth WR, and bad_wr says which
// (the WRs before it are posted), so that the caller knows exactly what is queued.
TEST(SoftFault, PostRecvFailsAtNthWrInChain)
{
	HandPair p;
	ASSERT_TRUE(p.init(soft::Exec::Inline));
	soft::FaultRule r;
	r.point = soft::FaultPoint::PostRecv;
	r.qp_num = p.b.qp->qp_num();
	r.nth = 2;
	EXPECT_GE(soft::inject_fault(*p.db, r), 0);
	Cqe rc[3];
	Sge s[3];
	RecvWr wr[3];
	for (int i = 0; i < 3; i++) {
		s[i] = p.b.sge(i * 64, 64);
		wr[i].wr_cqe = &rc[i];
		wr[i].sg_list = &s[i];
		wr[i].num_sge = 1;
		wr[i].next = i < 2 ? &wr[i + 1] : nullptr;
	}
	const RecvWr *bad = nullptr;
	int rc_ = p.b.qp->post_recv(&wr[0], &bad);
	EXPECT_EQ(rc_, -EIO);
	EXPECT_EQ(bad, &wr[1]);
	EXPECT_EQ(soft::qp_counters(*p.b.qp).posted, 1u);
}

// An SRQ's post_recv is a post_recv too: a PostRecv rule for any QP (qp_num 0) fails it.
TEST(SoftFault, PostRecvFaultAppliesToSrq)
{
	DevPtr d = make_dev("127.0.0.1", soft::Exec::Inline);
	ASSERT_TRUE(d);
	auto pd = d->alloc_pd();
	SrqInitAttr sa;
	sa.max_wr = 8;
	sa.max_sge = 1;
	auto srq = pd->create_srq(sa);
	ASSERT_TRUE(srq);
	std::vector<uint8_t> buf(64);
	auto mr = pd->reg_mr(buf.data(), buf.size(), ACCESS_LOCAL_WRITE);
	soft::FaultRule r;
	r.point = soft::FaultPoint::PostRecv;
	r.qp_num = 0;
	r.nth = 1;
	EXPECT_GE(soft::inject_fault(*d, r), 0);
	Cqe c;
	Sge s{reinterpret_cast<uint64_t>(buf.data()), 64, mr->lkey()};
	RecvWr wr;
	wr.wr_cqe = &c;
	wr.sg_list = &s;
	wr.num_sge = 1;
	const RecvWr *bad = nullptr;
	EXPECT_EQ(srq->post_recv(&wr, &bad), -EIO);
	EXPECT_EQ(bad, &wr);
	EXPECT_EQ(soft::faults_fired(*d), 1u);
}

// The WR executes (its data lands) but its completion never reaches the CQ.
TEST(SoftFault, DropCompletion)
{
	HandPair p;
	ASSERT_TRUE(p.init(soft::Exec::Engine));
	soft::FaultRule r;
	r.point = soft::FaultPoint::DropCompletion;
	r.qp_num = p.a.qp->qp_num();
	r.nth = 1;
	EXPECT_GE(soft::inject_fault(*p.da, r), 0);
	std::memcpy(p.a.buf.data(), "dropped but written", 20);
	Cqe w, rcv;
	ASSERT_EQ(post_recv(*p.b.qp, &rcv, p.b.sge(4096, 64)), 0);
	// WRITE_WITH_IMM: the responder's receive completion shows that it executed.
	ASSERT_EQ(post_rdma(*p.a.qp, &w, p.a.sge(0, 20), WrOpcode::RdmaWriteWithImm, p.b.at(0),
	                    p.b.mr->rkey(), SEND_SIGNALED, 5),
	          0);
	auto rw = poll_n(*p.b.rcq, 1);
	ASSERT_EQ(rw.size(), 1u);
	EXPECT_EQ(rw[0].status, WcStatus::Success);
	EXPECT_EQ(rw[0].imm_data, 5u);
	EXPECT_STREQ(reinterpret_cast<char *>(p.b.buf.data()), "dropped but written");
	std::this_thread::sleep_for(50ms);
	EXPECT_TRUE(drain_cq(*p.a.scq).empty());
	EXPECT_EQ(soft::faults_fired(*p.da), 1u);
	EXPECT_EQ(p.a.qp->state(), QpState::Rts);
	// The dropped completion still released its SQ slot: the queue takes a full depth.
	const uint32_t depth = p.a.qp->cap().max_send_wr;
	std::vector<Cqe> more(depth);
	for (uint32_t i = 0; i < depth; i++)
		ASSERT_EQ(post_rdma(*p.a.qp, &more[i], p.a.sge(0, 4), WrOpcode::RdmaWrite,
		                    p.b.at(0), p.b.mr->rkey(),
		                    i + 1 == depth ? uint32_t{SEND_SIGNALED} : 0u),
		          0)
		    << i;
	auto wcs = poll_n(*p.a.scq, 1);
	ASSERT_EQ(wcs.size(), 1u);
	EXPECT_EQ(wcs[0].wr_cqe, &more[depth - 1]);
	EXPECT_EQ(wcs[0].status, WcStatus::Success);
}

// A rule with match_opcode fires only for WRs of that opcode: the READ's completion is
// lost, the WRITEs before and after it complete, and the READ's data did land.
TEST(SoftFault, DropCompletionOfOneOpcode)
{
	HandPair p;
	ASSERT_TRUE(p.init(soft::Exec::Engine));
	soft::FaultRule r;
	r.point = soft::FaultPoint::DropCompletion;
	r.qp_num = p.a.qp->qp_num();
	r.nth = 1;
	r.match_opcode = true;
	r.opcode = WrOpcode::RdmaRead;
	EXPECT_GE(soft::inject_fault(*p.da, r), 0);
	std::memcpy(p.b.buf.data() + 1024, "read, not told", 15);
	Cqe w1, rd, w2;
	ASSERT_EQ(post_rdma(*p.a.qp, &w1, p.a.sge(0, 8), WrOpcode::RdmaWrite, p.b.at(0),
	                    p.b.mr->rkey(), SEND_SIGNALED),
	          0);
	ASSERT_EQ(post_rdma(*p.a.qp, &rd, p.a.sge(2048, 15), WrOpcode::RdmaRead, p.b.at(1024),
	                    p.b.mr->rkey(), SEND_SIGNALED),
	          0);
	ASSERT_EQ(post_rdma(*p.a.qp, &w2, p.a.sge(0, 8), WrOpcode::RdmaWrite, p.b.at(8),
	                    p.b.mr->rkey(), SEND_SIGNALED),
	          0);
	auto wcs = poll_n(*p.a.scq, 2);
	ASSERT_EQ(wcs.size(), 2u);
	EXPECT_EQ(wcs[0].wr_cqe, &w1);
	EXPECT_EQ(wcs[1].wr_cqe, &w2);
	std::this_thread::sleep_for(50ms);
	EXPECT_TRUE(drain_cq(*p.a.scq).empty());
	EXPECT_EQ(soft::faults_fired(*p.da), 1u);
	EXPECT_STREQ(reinterpret_cast<char *>(p.a.buf.data() + 2048), "read, not told");
}

TEST(SoftFault, DelayCompletion)
{
	HandPair p;
	ASSERT_TRUE(p.init(soft::Exec::Engine));
	soft::FaultRule r;
	r.point = soft::FaultPoint::DelayCompletion;
	r.qp_num = p.a.qp->qp_num();
	r.nth = 1;
	r.delay_us = 150000;
	EXPECT_GE(soft::inject_fault(*p.da, r), 0);
	Cqe w;
	auto t0 = Clock::now();
	ASSERT_EQ(
	    post_rdma(*p.a.qp, &w, p.a.sge(0, 16), WrOpcode::RdmaWrite, p.b.at(0), p.b.mr->rkey()),
	    0);
	auto wcs = poll_n(*p.a.scq, 1);
	auto dt = Clock::now() - t0;
	ASSERT_EQ(wcs.size(), 1u);
	EXPECT_EQ(wcs[0].wr_cqe, &w);
	EXPECT_EQ(wcs[0].status, WcStatus::Success);
	EXPECT_GE(dt, 150ms);
	EXPECT_EQ(soft::faults_fired(*p.da), 1u);
	// The next one is not delayed.
	t0 = Clock::now();
	ASSERT_EQ(
	    post_rdma(*p.a.qp, &w, p.a.sge(0, 16), WrOpcode::RdmaWrite, p.b.at(0), p.b.mr->rkey()),
	    0);
	ASSERT_EQ(poll_n(*p.a.scq, 1).size(), 1u);
	EXPECT_LT(Clock::now() - t0, 150ms);
}

// A delayed completion is still a completion delivered to the CQ: the counters say so.
TEST(SoftFault, DelayedCompletionIsCounted)
{
	HandPair p;
	ASSERT_TRUE(p.init(soft::Exec::Engine));
	soft::FaultRule r;
	r.point = soft::FaultPoint::DelayCompletion;
	r.qp_num = p.a.qp->qp_num();
	r.nth = 1;
	r.delay_us = 20000;
	EXPECT_GE(soft::inject_fault(*p.da, r), 0);
	Cqe w;
	ASSERT_EQ(
	    post_rdma(*p.a.qp, &w, p.a.sge(0, 16), WrOpcode::RdmaWrite, p.b.at(0), p.b.mr->rkey()),
	    0);
	ASSERT_EQ(poll_n(*p.a.scq, 1).size(), 1u);
	EXPECT_EQ(soft::qp_counters(*p.a.qp).completed, 1u);
	EXPECT_EQ(soft::device_counters(*p.da).completed, 1u);
}

// The responder's rkey check fails for a valid rkey: REM_ACCESS_ERR at the requester,
// both QPs in ERR, an access-error event at the responder, no data moved.
TEST(SoftFault, RkeyCheckFails)
{
	for (WrOpcode op : {WrOpcode::RdmaWrite, WrOpcode::RdmaRead}) {
		SCOPED_TRACE(wr_opcode_str(op));
		HandPair p;
		ASSERT_TRUE(p.init(soft::Exec::Engine));
		soft::FaultRule r;
		r.point = soft::FaultPoint::RkeyCheck;
		r.nth = 1;
		EXPECT_GE(soft::inject_fault(*p.db, r), 0);
		std::memset(p.a.buf.data(), 0xaa, 64);
		std::memset(p.b.buf.data(), 0x55, 64);
		Cqe c, rcv;
		ASSERT_EQ(post_recv(*p.b.qp, &rcv, p.b.sge(4096, 64)), 0);
		ASSERT_EQ(post_rdma(*p.a.qp, &c, p.a.sge(0, 64), op, p.b.at(0), p.b.mr->rkey()), 0);
		auto wcs = poll_n(*p.a.scq, 1);
		ASSERT_EQ(wcs.size(), 1u);
		EXPECT_EQ(wcs[0].status, WcStatus::RemAccessErr);
		EXPECT_EQ(soft::faults_fired(*p.db), 1u);
		EXPECT_TRUE(has_event(p.b.events, EventType::QpAccessErr));
		EXPECT_EQ(p.a.qp->state(), QpState::Err);
		EXPECT_EQ(p.b.qp->state(), QpState::Err);
		// The responder's receive is flushed.
		auto rw = poll_n(*p.b.rcq, 1);
		ASSERT_EQ(rw.size(), 1u);
		EXPECT_EQ(rw[0].status, WcStatus::WrFlushErr);
		EXPECT_EQ(p.a.buf[0], 0xaa);
		EXPECT_EQ(p.b.buf[0], 0x55);
	}
}

// The QP enters ERR before executing its nth WR: QP_FATAL event, that WR and everything
// after it flushed, its receives flushed.
TEST(SoftFault, QpErrorAtNthWr)
{
	HandPair p;
	ASSERT_TRUE(p.init(soft::Exec::Engine));
	soft::FaultRule r;
	r.point = soft::FaultPoint::QpError;
	r.qp_num = p.a.qp->qp_num();
	r.nth = 2;
	EXPECT_GE(soft::inject_fault(*p.da, r), 0);
	Cqe arc[2], brc[3], sc[3];
	for (int i = 0; i < 2; i++)
		ASSERT_EQ(post_recv(*p.a.qp, &arc[i], p.a.sge(4096 + i * 64, 64)), 0);
	for (int i = 0; i < 3; i++)
		ASSERT_EQ(post_recv(*p.b.qp, &brc[i], p.b.sge(i * 64, 64)), 0);
	for (int i = 0; i < 3; i++)
		ASSERT_EQ(post_send(*p.a.qp, &sc[i], p.a.sge(0, 8)), 0);
	auto wcs = poll_n(*p.a.scq, 3);
	ASSERT_EQ(wcs.size(), 3u);
	EXPECT_EQ(wcs[0].wr_cqe, &sc[0]);
	EXPECT_EQ(wcs[0].status, WcStatus::Success);
	EXPECT_EQ(wcs[1].wr_cqe, &sc[1]);
	EXPECT_EQ(wcs[1].status, WcStatus::WrFlushErr);
	EXPECT_EQ(wcs[2].wr_cqe, &sc[2]);
	EXPECT_EQ(wcs[2].status, WcStatus::WrFlushErr);
	auto rw = poll_n(*p.a.rcq, 2);
	ASSERT_EQ(rw.size(), 2u);
	EXPECT_EQ(count_status(rw, WcStatus::WrFlushErr), 2u);
	EXPECT_EQ(p.a.qp->state(), QpState::Err);
	EXPECT_TRUE(has_event(p.a.events, EventType::QpFatal));
	std::this_thread::sleep_for(20ms);
	EXPECT_EQ(p.a.events.count([](const Ev &e) { return e.type == EventType::QpFatal; }), 0u)
	    << "one QP_FATAL per transition";
	// Exactly one SEND reached the peer.
	auto bw = poll_n(*p.b.rcq, 1);
	ASSERT_EQ(bw.size(), 1u);
	EXPECT_EQ(bw[0].wr_cqe, &brc[0]);
	EXPECT_TRUE(drain_cq(*p.b.rcq).empty());
	EXPECT_EQ(soft::faults_fired(*p.da), 1u);
}

TEST(SoftFault, ForceQpError)
{
	HandPair p;
	ASSERT_TRUE(p.init(soft::Exec::Engine));
	Cqe rc[2];
	for (int i = 0; i < 2; i++)
		ASSERT_EQ(post_recv(*p.a.qp, &rc[i], p.a.sge(i * 64, 64)), 0);
	soft::force_qp_error(*p.a.qp);
	EXPECT_EQ(p.a.qp->state(), QpState::Err);
	EXPECT_TRUE(has_event(p.a.events, EventType::QpFatal));
	auto rw = poll_n(*p.a.rcq, 2);
	ASSERT_EQ(rw.size(), 2u);
	EXPECT_EQ(count_status(rw, WcStatus::WrFlushErr), 2u);
}

namespace
{

// A CM-connected pair with receives posted on both sides.
struct CmFixture {
	DevPtr da, db;
	Side a, b;
	CmPair cm;

	bool init(int nrecv)
	{
		db = make_dev("127.0.0.1");
		da = make_dev("127.0.0.2");
		if (!da || !db)
			return false;
		a.init(*da);
		b.init(*db);
		cm.active = &a;
		cm.passive = &b;
		if (!cm.connect("127.0.0.1:0", "127.0.0.2")) // an ephemeral port
			return false;
		for (int i = 0; i < nrecv; i++) {
			EXPECT_EQ(post_recv(*a.qp, &arc[i], a.sge(i * 64, 64)), 0);
			EXPECT_EQ(post_recv(*b.qp, &brc[i], b.sge(i * 64, 64)), 0);
		}
		return true;
	}

	// Both sides: QP in ERR, all receives flushed, DISCONNECTED on both ids.
	void expect_cut(int nrecv)
	{
		EXPECT_TRUE(cm.expect(cm.active_id.get(), CmEventType::Disconnected));
		EXPECT_TRUE(cm.expect(cm.passive_ptr(), CmEventType::Disconnected));
		auto ra = poll_n(*a.rcq, nrecv);
		auto rb = poll_n(*b.rcq, nrecv);
		ASSERT_EQ(ra.size(), size_t(nrecv));
		ASSERT_EQ(rb.size(), size_t(nrecv));
		EXPECT_EQ(count_status(ra, WcStatus::WrFlushErr), size_t(nrecv));
		EXPECT_EQ(count_status(rb, WcStatus::WrFlushErr), size_t(nrecv));
		EXPECT_EQ(a.qp->state(), QpState::Err);
		EXPECT_EQ(b.qp->state(), QpState::Err);
	}

	Cqe arc[8], brc[8];
};

} // namespace

TEST(SoftFault, CutConnectionApi)
{
	CmFixture f;
	ASSERT_TRUE(f.init(3));
	soft::cut_connection(*f.a.qp);
	f.expect_cut(3);
	// A WR posted afterwards is flushed, not sent.
	Cqe c;
	ASSERT_EQ(post_send(*f.a.qp, &c, f.a.sge(0, 8)), 0);
	auto w = poll_n(*f.a.scq, 1);
	ASSERT_EQ(w.size(), 1u);
	EXPECT_EQ(w[0].status, WcStatus::WrFlushErr);
	// Disconnecting a cut connection is harmless.
	EXPECT_EQ(f.cm.active_id->disconnect(), 0);
}

TEST(SoftFault, CutConnectionFromPassiveSide)
{
	CmFixture f;
	ASSERT_TRUE(f.init(2));
	soft::cut_connection(*f.b.qp);
	f.expect_cut(2);
}

TEST(SoftFault, CutConnectionRule)
{
	CmFixture f;
	ASSERT_TRUE(f.init(2));
	soft::FaultRule r;
	r.point = soft::FaultPoint::CutConnection;
	r.qp_num = f.a.qp->qp_num();
	r.nth = 1;
	EXPECT_GE(soft::inject_fault(*f.da, r), 0);
	Cqe c;
	std::memset(f.a.buf.data() + 1024, 0x77, 8);
	ASSERT_EQ(post_send(*f.a.qp, &c, f.a.sge(1024, 8)), 0);
	auto w = poll_n(*f.a.scq, 1);
	ASSERT_EQ(w.size(), 1u);
	EXPECT_NE(w[0].status, WcStatus::Success);
	EXPECT_TRUE(w[0].status == WcStatus::WrFlushErr || w[0].status == WcStatus::RetryExcErr)
	    << wc_status_str(w[0].status);
	EXPECT_EQ(soft::faults_fired(*f.da), 1u);
	// The SEND never arrived: all of B's receives are flushed, none completed.
	f.expect_cut(2);
	EXPECT_NE(f.b.buf[0], 0x77);
}

// A QP connected by hand has no CM: cut_connection moves both ends to ERR.
TEST(SoftFault, CutConnectionByHand)
{
	HandPair p;
	ASSERT_TRUE(p.init(soft::Exec::Engine));
	Cqe arc, brc;
	ASSERT_EQ(post_recv(*p.a.qp, &arc, p.a.sge(0, 64)), 0);
	ASSERT_EQ(post_recv(*p.b.qp, &brc, p.b.sge(0, 64)), 0);
	soft::cut_connection(*p.a.qp);
	auto ra = poll_n(*p.a.rcq, 1);
	auto rb = poll_n(*p.b.rcq, 1);
	ASSERT_EQ(ra.size(), 1u);
	ASSERT_EQ(rb.size(), 1u);
	EXPECT_EQ(ra[0].status, WcStatus::WrFlushErr);
	EXPECT_EQ(rb[0].status, WcStatus::WrFlushErr);
	EXPECT_EQ(p.a.qp->state(), QpState::Err);
	EXPECT_EQ(p.b.qp->state(), QpState::Err);
}

TEST(SoftFault, ForceDeviceFatal)
{
	HandPair p;
	ASSERT_TRUE(p.init(soft::Exec::Engine));
	// A second QP on device A, not connected (INIT).
	Side extra;
	extra.init(*p.da);
	extra.create_qp();
	QpAttr init;
	init.qp_state = QpState::Init;
	ASSERT_EQ(extra.qp->modify(init, QP_STATE | QP_PORT | QP_ACCESS_FLAGS), 0);
	EventQueue<Ev> dev_events, other_dev;
	int h = p.da->register_event_handler(recorder(dev_events));
	int h2 = p.db->register_event_handler(recorder(other_dev));
	ASSERT_GE(h, 0);
	Cqe arc, xrc, brc;
	ASSERT_EQ(post_recv(*p.a.qp, &arc, p.a.sge(0, 64)), 0);
	ASSERT_EQ(post_recv(*extra.qp, &xrc, extra.sge(0, 64)), 0);
	ASSERT_EQ(post_recv(*p.b.qp, &brc, p.b.sge(0, 64)), 0);

	soft::force_device_fatal(*p.da);
	auto e = dev_events.pop();
	ASSERT_TRUE(e);
	EXPECT_EQ(e->type, EventType::DeviceFatal);
	EXPECT_EQ(e->dev, p.da.get());
	EXPECT_EQ(p.a.qp->state(), QpState::Err);
	EXPECT_EQ(extra.qp->state(), QpState::Err);
	auto ra = poll_n(*p.a.rcq, 1);
	auto rx = poll_n(*extra.rcq, 1);
	ASSERT_EQ(ra.size(), 1u);
	ASSERT_EQ(rx.size(), 1u);
	EXPECT_EQ(ra[0].status, WcStatus::WrFlushErr);
	EXPECT_EQ(rx[0].status, WcStatus::WrFlushErr);
	PortAttr pa;
	ASSERT_EQ(p.da->query_port(1, &pa), 0);
	EXPECT_EQ(pa.state, PortState::Down);
	// The other device is not affected (its QP learns only when it talks to A).
	std::this_thread::sleep_for(20ms);
	EXPECT_EQ(other_dev.size(), 0u);
	EXPECT_EQ(p.b.qp->state(), QpState::Rts);
	EXPECT_TRUE(drain_cq(*p.b.rcq).empty());
	p.da->unregister_event_handler(h);
	p.db->unregister_event_handler(h2);
}

namespace
{

// Which of n single-WR posts fail under a probability rule, on a fresh device.
std::vector<bool> random_failures(uint64_t seed, int n, uint64_t *fired)
{
	std::vector<bool> out;
	soft::DeviceConfig c;
	c.ip = "127.0.0.1";
	c.exec = soft::Exec::Inline;
	c.fault_seed = seed;
	DevPtr d(soft::create_device(c));
	EXPECT_TRUE(d);
	if (!d)
		return out;
	Side s;
	s.init(*d);
	s.create_qp();
	EXPECT_EQ(connect_qp(*s.qp, *d, s.qp->qp_num()), 0); // loopback
	soft::FaultRule r;
	r.point = soft::FaultPoint::PostSend;
	r.nth = 0;
	r.probability = 0.3;
	r.count = 0; // unlimited
	EXPECT_GE(soft::inject_fault(*d, r), 0);
	Cqe cqe;
	for (int i = 0; i < n; i++) {
		int rc = post_rdma(*s.qp, &cqe, s.sge(0, 8), WrOpcode::RdmaWrite, s.at(64),
		                   s.mr->rkey());
		EXPECT_TRUE(rc == 0 || rc == -EIO) << rc;
		out.push_back(rc == -EIO);
		drain_cq(*s.scq);
	}
	*fired = soft::faults_fired(*d);
	return out;
}

} // namespace

TEST(SoftFault, RandomFaultsReproducibleBySeed)
{
	uint64_t f1 = 0, f2 = 0, f3 = 0;
	auto a = random_failures(42, 200, &f1);
	auto b = random_failures(42, 200, &f2);
	auto c = random_failures(43, 200, &f3);
	ASSERT_EQ(a.size(), 200u);
	EXPECT_EQ(a, b);
	EXPECT_NE(a, c);
	EXPECT_EQ(f1, static_cast<uint64_t>(std::count(a.begin(), a.end(), true)));
	EXPECT_EQ(f1, f2);
	EXPECT_EQ(f3, static_cast<uint64_t>(std::count(c.begin(), c.end(), true)));
	// p = 0.3 over 200 draws: far from 0 and from 200.
	EXPECT_GT(f1, 20u);
	EXPECT_LT(f1, 120u);
}
