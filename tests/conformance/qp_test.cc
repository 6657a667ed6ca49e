// SPDX-License-Identifier: MIT
// QP state machine, flush on ERR, send queue accounting.
#include "tests/conformance/fixture.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace ulp::conf
{
namespace
{

// A PD, a CQ and two QPs on the local device, not connected by the CM: the state machine is
// driven by hand, the second QP serving as the destination of the first.
struct Bare {
	std::unique_ptr<Pd> pd;
	std::unique_ptr<Cq> cq;
	std::unique_ptr<Qp> qp, qp2;
};

void make_bare(Device &dev, Bare *b, uint32_t wr = 16)
{
	b->pd = dev.alloc_pd();
	ASSERT_TRUE(b->pd);
	CqInitAttr ca;
	ca.cqe = 64;
	b->cq = dev.create_cq(ca);
	ASSERT_TRUE(b->cq);
	QpInitAttr qa;
	qa.send_cq = b->cq.get();
	qa.recv_cq = b->cq.get();
	qa.cap.max_send_wr = wr;
	qa.cap.max_recv_wr = wr;
	qa.cap.max_send_sge = 1;
	qa.cap.max_recv_sge = 1;
	b->qp = b->pd->create_qp(qa);
	ASSERT_TRUE(b->qp);
	b->qp2 = b->pd->create_qp(qa);
	ASSERT_TRUE(b->qp2);
	EXPECT_EQ(b->qp->state(), QpState::Reset) << "a new QP is in RESET (IB 10.3.1)";
}

// The attributes each transition requires (IB spec 11.2.4.2 / Linux ib_modify_qp_is_ok()).
constexpr uint32_t kToInit = QP_STATE | QP_PORT | QP_ACCESS_FLAGS;
constexpr uint32_t kToRtr = QP_STATE | QP_AV | QP_PATH_MTU | QP_DEST_QPN | QP_RQ_PSN |
                            QP_MAX_DEST_RD_ATOMIC | QP_MIN_RNR_TIMER;
constexpr uint32_t kToRts =
    QP_STATE | QP_SQ_PSN | QP_TIMEOUT | QP_RETRY_CNT | QP_RNR_RETRY | QP_MAX_QP_RD_ATOMIC;

QpAttrAv attr_for(Device &dev, Qp &dest, QpState s)
{
	QpAttrAv a;
	a.qp_state = s;
	a.qp_access_flags = ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ;
	a.port_num = 1;
	a.path_mtu = 1024;
	a.dest_qp_num = dest.qp_num();
	a.rq_psn = 0x100;
	a.sq_psn = 0x200;
	a.ah_attr.dgid = dev.gid();
	a.ah_attr.port_num = 1;
	return a;
}

QpState queried(Qp &qp)
{
	QpAttr a;
	EXPECT_EQ(qp.query(&a), 0);
	return a.qp_state;
}

// IB spec 10.3.1, figure 124: RESET->INIT->RTR->RTS, INIT->INIT, RTS->RTS, any->ERR,
// any->RESET; query_qp reports the state reached.
TEST_P(ConformanceLocal, QpStateMachineLegalPath)
{
	OPEN_LOCAL();
	Bare b;
	ASSERT_NO_FATAL_FAILURE(make_bare(dev(), &b));
	Qp &qp = *b.qp;

	ASSERT_EQ(qp.modify(attr_for(dev(), *b.qp2, QpState::Init), kToInit), 0);
	EXPECT_EQ(qp.state(), QpState::Init);
	EXPECT_EQ(queried(qp), QpState::Init);
	ASSERT_EQ(qp.modify(attr_for(dev(), *b.qp2, QpState::Init), QP_STATE | QP_ACCESS_FLAGS), 0)
	    << "INIT->INIT is legal (access flags are optional there)";
	ASSERT_EQ(qp.modify(attr_for(dev(), *b.qp2, QpState::Rtr), kToRtr), 0);
	EXPECT_EQ(queried(qp), QpState::Rtr);
	ASSERT_EQ(qp.modify(attr_for(dev(), *b.qp2, QpState::Rts), kToRts), 0);
	EXPECT_EQ(queried(qp), QpState::Rts);
	ASSERT_EQ(qp.modify(attr_for(dev(), *b.qp2, QpState::Rts), QP_STATE), 0)
	    << "RTS->RTS with no other attribute is legal";
	ASSERT_EQ(qp.modify(attr_for(dev(), *b.qp2, QpState::Rts), QP_STATE | QP_MIN_RNR_TIMER), 0)
	    << "min_rnr_timer is modifiable in RTS->RTS";
	ASSERT_EQ(qp.modify(attr_for(dev(), *b.qp2, QpState::Err), QP_STATE), 0);
	EXPECT_EQ(queried(qp), QpState::Err);
	ASSERT_EQ(qp.modify(attr_for(dev(), *b.qp2, QpState::Reset), QP_STATE), 0);
	EXPECT_EQ(queried(qp), QpState::Reset);
	// A QP back in RESET can be brought up again.
	ASSERT_EQ(qp.modify(attr_for(dev(), *b.qp2, QpState::Init), kToInit), 0);
	EXPECT_EQ(queried(qp), QpState::Init);
	ASSERT_EQ(qp.modify(attr_for(dev(), *b.qp2, QpState::Err), QP_STATE), 0) << "INIT->ERR";
	EXPECT_EQ(queried(qp), QpState::Err);
}

// IB spec 10.3.1: transitions not in figure 124 fail and leave the QP where it was
// (ib_modify_qp_is_ok() returns false, the driver -EINVAL).
TEST_P(ConformanceLocal, QpStateMachineIllegalTransitions)
{
	OPEN_LOCAL();
	Bare b;
	ASSERT_NO_FATAL_FAILURE(make_bare(dev(), &b));
	Qp &qp = *b.qp;
	auto a = [&](QpState s) { return attr_for(dev(), *b.qp2, s); };
	const uint32_t all = kToInit | kToRtr | kToRts;

	EXPECT_EQ(qp.modify(a(QpState::Rtr), kToRtr | QP_PORT | QP_ACCESS_FLAGS), -EINVAL)
	    << "RESET->RTR";
	EXPECT_EQ(qp.modify(a(QpState::Rts), all), -EINVAL) << "RESET->RTS";
	EXPECT_EQ(queried(qp), QpState::Reset);

	ASSERT_EQ(qp.modify(a(QpState::Init), kToInit), 0);
	EXPECT_EQ(qp.modify(a(QpState::Rts), kToRts), -EINVAL) << "INIT->RTS";
	EXPECT_EQ(queried(qp), QpState::Init);

	ASSERT_EQ(qp.modify(a(QpState::Rtr), kToRtr), 0);
	EXPECT_EQ(qp.modify(a(QpState::Init), QP_STATE), -EINVAL) << "RTR->INIT";
	EXPECT_EQ(queried(qp), QpState::Rtr);

	ASSERT_EQ(qp.modify(a(QpState::Rts), kToRts), 0);
	EXPECT_EQ(qp.modify(a(QpState::Rtr), kToRtr), -EINVAL) << "RTS->RTR";
	EXPECT_EQ(qp.modify(a(QpState::Init), QP_STATE), -EINVAL) << "RTS->INIT";
	EXPECT_EQ(queried(qp), QpState::Rts);

	ASSERT_EQ(qp.modify(a(QpState::Err), QP_STATE), 0);
	EXPECT_EQ(qp.modify(a(QpState::Rts), QP_STATE), -EINVAL) << "ERR->RTS";
	EXPECT_EQ(qp.modify(a(QpState::Init), kToInit), -EINVAL) << "ERR->INIT";
	EXPECT_EQ(qp.modify(a(QpState::Rtr), kToRtr), -EINVAL) << "ERR->RTR";
	EXPECT_EQ(queried(qp), QpState::Err);
}

// IB spec 11.2.4.2 (Modify QP, table of required attributes per transition): a transition
// without one of its required attributes, or with one that is not allowed in it, fails
// with -EINVAL (ib_modify_qp_is_ok) and the QP stays put.
TEST_P(ConformanceLocal, QpStateMachineRequiredAttributes)
{
	OPEN_LOCAL();
	Bare b;
	ASSERT_NO_FATAL_FAILURE(make_bare(dev(), &b));
	Qp &qp = *b.qp;
	auto a = [&](QpState s) { return attr_for(dev(), *b.qp2, s); };

	EXPECT_EQ(qp.modify(a(QpState::Init), kToInit & ~QP_ACCESS_FLAGS), -EINVAL)
	    << "RESET->INIT without access flags";
	EXPECT_EQ(qp.modify(a(QpState::Init), kToInit & ~QP_PORT), -EINVAL)
	    << "RESET->INIT without port";
	EXPECT_EQ(qp.modify(a(QpState::Init), kToInit | QP_SQ_PSN), -EINVAL)
	    << "RESET->INIT with sq_psn (not allowed there)";
	EXPECT_EQ(queried(qp), QpState::Reset);

	ASSERT_EQ(qp.modify(a(QpState::Init), kToInit), 0);
	for (uint32_t bit : {QP_AV, QP_PATH_MTU, QP_DEST_QPN, QP_RQ_PSN, QP_MAX_DEST_RD_ATOMIC,
	                     QP_MIN_RNR_TIMER}) {
		EXPECT_EQ(qp.modify(a(QpState::Rtr), kToRtr & ~bit), -EINVAL)
		    << "INIT->RTR without mask bit " << std::hex << bit;
	}
	EXPECT_EQ(queried(qp), QpState::Init);

	ASSERT_EQ(qp.modify(a(QpState::Rtr), kToRtr), 0);
	for (uint32_t bit :
	     {QP_SQ_PSN, QP_TIMEOUT, QP_RETRY_CNT, QP_RNR_RETRY, QP_MAX_QP_RD_ATOMIC}) {
		EXPECT_EQ(qp.modify(a(QpState::Rts), kToRts & ~bit), -EINVAL)
		    << "RTR->RTS without mask bit " << std::hex << bit;
	}
	EXPECT_EQ(queried(qp), QpState::Rtr);
	ASSERT_EQ(qp.modify(a(QpState::Rts), kToRts), 0);
	EXPECT_EQ(qp.modify(a(QpState::Rts), QP_STATE | QP_DEST_QPN), -EINVAL)
	    << "RTS->RTS may not change the destination QP";
	EXPECT_EQ(queried(qp), QpState::Rts);
}

// IB spec 10.3.1 / 11.4.1.1: Post Receive in RESET is an error; posting to INIT queues the
// WR (it completes when the QP reaches RTR and a message arrives, or is flushed).
TEST_P(ConformanceLocal, PostRecvInResetFailsInInitQueues)
{
	OPEN_LOCAL();
	Bare b;
	ASSERT_NO_FATAL_FAILURE(make_bare(dev(), &b));
	Qp &qp = *b.qp;
	Cqe cqe;
	RecvWr wr;
	wr.wr_cqe = &cqe;
	const RecvWr *bad = nullptr;
	EXPECT_NE(qp.post_recv(&wr, &bad), 0) << "post_recv in RESET";
	EXPECT_EQ(bad, &wr);
	ASSERT_EQ(qp.modify(attr_for(dev(), *b.qp2, QpState::Init), kToInit), 0);
	bad = nullptr;
	EXPECT_EQ(qp.post_recv(&wr, &bad), 0) << "post_recv in INIT";
	Wc wc[2];
	EXPECT_EQ(b.cq->poll(wc), 0) << "nothing completes in INIT";
	ASSERT_EQ(qp.modify(attr_for(dev(), *b.qp2, QpState::Err), QP_STATE), 0);
	int n = 0;
	for (int i = 0; i < 1000 && n == 0; i++) {
		progress_all();
		n = b.cq->poll(wc);
		if (!n)
			std::this_thread::sleep_for(std::chrono::milliseconds(1));
	}
	ASSERT_EQ(n, 1);
	EXPECT_EQ(wc[0].status, WcStatus::WrFlushErr);
	EXPECT_EQ(wc[0].wr_cqe, &cqe);
	EXPECT_EQ(wc[0].qp, &qp);
}

// IB spec 10.3.1 (Error state) and 11.4.2.1: on entering ERR every outstanding WR
// completes with WR_FLUSH_ERR, in order per queue; WRs posted to an ERR QP are flushed
// too (the behaviour drain relies on). An unsignaled WR posted without a cqe completes
// only as a cqe-less flush, which the completion layer above drops (DESIGN 3).
TEST_P(Conformance, FlushOnErr)
{
	EpConfig lc;
	lc.rnr_retry = 7;
	EpConfig pc;
	pc.rnr_retry = 7;
	CONNECT(lc, pc);
	auto lm = local().reg_mr(4096, ACCESS_LOCAL_WRITE);
	auto pm = peer().reg_mr(4096, ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE);
	ASSERT_GE(lm.id, 0);
	ASSERT_GE(pm.id, 0);
	ASSERT_EQ(local().post_recv(lm.id, 0, 64, 4, 100), 0);
	// The peer has no receive posted: the SEND waits in RNR retry (7 = forever), and
	// everything behind it waits in the send queue.
	ASSERT_EQ(local().post_send(send_op(WrOpcode::Send, 1, lm.id, 0, 32)), 0);
	ASSERT_EQ(
	    local().post_send(rdma_op(WrOpcode::RdmaWrite, 2, lm.id, 0, 32, pm.addr, pm.rkey)), 0);
	ASSERT_EQ(local().post_send(send_op(WrOpcode::Send, 3, lm.id, 0, 32)), 0);
	auto early = local_wcs(1, 100);
	EXPECT_TRUE(early.empty()) << describe(early);

	QpAttr a;
	a.qp_state = QpState::Err;
	ASSERT_EQ(qp().modify(a, QP_STATE), 0);
	auto wcs = local_wcs(7);
	ASSERT_EQ(wcs.size(), 7u) << describe(wcs);
	std::vector<uint32_t> sends, recvs;
	for (auto &w : wcs) {
		EXPECT_EQ(w.status, WcStatus::WrFlushErr) << describe({w});
		(w.recv ? recvs : sends).push_back(w.wr_id);
	}
	EXPECT_EQ(sends, (std::vector<uint32_t>{1, 2, 3})) << "send flushes in order";
	EXPECT_EQ(recvs, (std::vector<uint32_t>{100, 101, 102, 103})) << "recv flushes in order";

	// Posting to an ERR QP succeeds and flushes.
	PostSend silent = rdma_op(WrOpcode::RdmaWrite, 4, lm.id, 0, 8, pm.addr, pm.rkey);
	silent.flags = 0;
	silent.no_cqe = 1;
	ASSERT_EQ(local().post_send(silent), 0);
	ASSERT_EQ(local().post_send(send_op(WrOpcode::Send, 5, lm.id, 0, 8)), 0);
	ASSERT_EQ(local().post_recv(lm.id, 0, 64, 1, 200), 0);
	// A WR that completes in error always generates a completion, signaled or not
	// (IB spec 10.8.3.1; rxe's do_complete posts when status != SUCCESS), so the flush
	// of the unsignaled WR is reported, with its (null) context, ahead of WR 5. The
	// kernel's completion layer is what drops completions without a cqe
	// (__ib_process_cq); the provider does not.
	wcs = local_wcs(3, 200);
	std::vector<uint32_t> order;
	for (auto &w : wcs) {
		EXPECT_EQ(w.status, WcStatus::WrFlushErr) << describe({w});
		if (!w.recv)
			order.push_back(w.wr_id);
	}
	EXPECT_EQ(order, (std::vector<uint32_t>{~0u, 5})) << describe(wcs);
	EXPECT_EQ(std::count_if(wcs.begin(), wcs.end(),
	                        [](const WcInfo &w) { return w.recv && w.wr_id == 200; }),
	          1)
	    << describe(wcs);
	auto pw = peer_wcs(1, 20);
	EXPECT_TRUE(pw.empty()) << describe(pw);
}

// IB spec 10.8.6 / 11.4.1.1: the send queue holds max_send_wr WRs; an unsignaled WR keeps
// its slot until a later signaled WR completes; posting to a full queue fails (-ENOMEM in
// Linux) and reports the first WR not posted in bad_wr.
TEST_P(Conformance, SqOverflowWithUnsignaled)
{
	EpConfig lc;
	lc.max_send_wr = 8;
	CONNECT(lc, EpConfig{});
	auto lm = local().reg_mr(4096, ACCESS_LOCAL_WRITE);
	auto pm = peer().reg_mr(4096, ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE);
	const uint32_t cap = qp().cap().max_send_wr;
	ASSERT_GE(cap, 8u);
	ASSERT_LE(cap, 4096u);

	// Stall the queue: an unsignaled SEND in RNR retry (the peer has no receive).
	PostSend first = send_op(WrOpcode::Send, 1, lm.id, 0, 16);
	first.flags = 0;
	ASSERT_EQ(local().post_send(first), 0);
	for (uint32_t i = 1; i < cap - 1; i++) {
		PostSend w = rdma_op(WrOpcode::RdmaWrite, 1 + i, lm.id, 0, 16, pm.addr, pm.rkey);
		w.flags = 0;
		ASSERT_EQ(local().post_send(w), 0) << "WR " << i << " of " << cap;
	}
	ASSERT_EQ(
	    local().post_send(rdma_op(WrOpcode::RdmaWrite, 999, lm.id, 0, 16, pm.addr, pm.rkey)),
	    0);

	// The queue is full: a chain of two fails at its first WR.
	Sge sge{lm.addr, 16, lm.lkey};
	RdmaWr chain[2];
	for (auto &w : chain) {
		w.opcode = WrOpcode::RdmaWrite;
		w.sg_list = &sge;
		w.num_sge = 1;
		w.remote_addr = pm.addr;
		w.rkey = pm.rkey;
		w.send_flags = SEND_SIGNALED;
		w.wr_cqe = local().cqe(5000);
	}
	chain[0].next = &chain[1];
	const SendWr *bad = nullptr;
	EXPECT_EQ(qp().post_send(&chain[0], &bad), -ENOMEM);
	EXPECT_EQ(bad, &chain[0]);

	// Release: the peer posts a receive, the SEND completes, and with it the queue.
	ASSERT_EQ(peer().post_recv(pm.id, 0, 64, 1, 10), 0);
	auto wcs = local_wcs(1);
	ASSERT_EQ(wcs.size(), 1u) << describe(wcs);
	EXPECT_EQ(wcs[0].wr_id, 999u) << "only the signaled WR completes";
	EXPECT_EQ(wcs[0].status, WcStatus::Success);
	auto more = local_wcs(1, 50);
	EXPECT_TRUE(more.empty()) << "unsignaled WRs generated completions: " << describe(more);
	auto pw = peer_wcs(1);
	ASSERT_EQ(pw.size(), 1u);
	EXPECT_EQ(pw[0].status, WcStatus::Success);

	// Every slot is free again once the signaled completion has been reaped.
	std::vector<RdmaWr> all(cap);
	for (uint32_t i = 0; i < cap; i++) {
		all[i] = chain[0];
		all[i].next = i + 1 < cap ? &all[i + 1] : nullptr;
		all[i].wr_cqe = local().cqe(2000 + i);
	}
	bad = nullptr;
	ASSERT_EQ(qp().post_send(&all[0], &bad), 0);
	wcs = local_wcs(int(cap));
	ASSERT_EQ(wcs.size(), cap);
	for (uint32_t i = 0; i < cap; i++) {
		EXPECT_EQ(wcs[i].wr_id, 2000 + i) << "completions in SQ order";
		EXPECT_EQ(wcs[i].status, WcStatus::Success);
	}
}

// IB spec 11.4.1.1: a WR with more SGEs than the QP was created with is rejected at post
// time and reported in bad_wr; nothing of the chain after it is posted.
TEST_P(Conformance, PostTooManySgesFails)
{
	EpConfig lc;
	lc.max_sge = 1;
	CONNECT(lc, EpConfig{});
	auto lm = local().reg_mr(4096, ACCESS_LOCAL_WRITE);
	uint32_t n = qp().cap().max_send_sge + 1;
	std::vector<Sge> sges(n, Sge{lm.addr, 8, lm.lkey});
	SendWr ok, over;
	ok.opcode = WrOpcode::Send;
	ok.sg_list = sges.data();
	ok.num_sge = 1;
	ok.send_flags = SEND_SIGNALED;
	ok.wr_cqe = local().cqe(1);
	over = ok;
	over.num_sge = int(n);
	over.wr_cqe = local().cqe(2);
	ok.next = &over;
	const SendWr *bad = nullptr;
	EXPECT_EQ(qp().post_send(&ok, &bad), -EINVAL);
	EXPECT_EQ(bad, &over);
}

} // namespace

INSTANTIATE_TEST_SUITE_P(Fabric, ConformanceLocal, ::testing::ValuesIn(local_fabric_names()),
                         fabric_param_name);
// ULP_CONF_FABRICS naming only cross-process soft fabrics leaves no device-local fabric:
// the peer tests still run.
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(ConformanceLocal);
INSTANTIATE_TEST_SUITE_P(Fabric, Conformance, ::testing::ValuesIn(fabric_names()),
                         fabric_param_name);

} // namespace ulp::conf
