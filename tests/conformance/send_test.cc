// SPDX-License-Identifier: MIT
// SEND/RECV, SRQ, RNR, receive buffer too small, private data.
#include "tests/conformance/fixture.h"

#include <cerrno>
#include <cstring>

namespace ulp::conf
{
namespace
{

// rdma_cm (RDMA/CM over IB CM): the active side's private data reaches the passive side in
// CONNECT_REQUEST, the passive side's in ESTABLISHED at the active side (REQ 56 bytes,
// REP 196 bytes, IB spec 12.6).
TEST_P(Conformance, ConnectPrivateData)
{
	EpConfig lc, pc;
	const char req[] = "conformance-req";
	const char rep[] = "conformance-rep-with-more-bytes";
	lc.pdata.assign(req, req + sizeof(req));
	pc.pdata.assign(rep, rep + sizeof(rep));
	CONNECT(lc, pc);
	auto got = local().peer_pdata();
	ASSERT_GE(got.size(), pc.pdata.size());
	EXPECT_EQ(0, memcmp(got.data(), pc.pdata.data(), pc.pdata.size()));
	std::vector<uint8_t> at_peer;
	ASSERT_EQ(peer().peer_pdata(&at_peer), 0);
	ASSERT_GE(at_peer.size(), lc.pdata.size());
	EXPECT_EQ(0, memcmp(at_peer.data(), lc.pdata.data(), lc.pdata.size()));
}

// IB spec 9.4.3 / 9.7.5: a SEND consumes the responder's next receive WR in order; the
// receive WC carries the byte count and, for SEND_WITH_IMM, IB_WC_WITH_IMM and the
// immediate data.
TEST_P(Conformance, SendRecv)
{
	CONNECT();
	auto lm = local().reg_mr(8192, ACCESS_LOCAL_WRITE);
	auto pm = peer().reg_mr(8192, ACCESS_LOCAL_WRITE);
	auto data = pattern(3000, 1);
	ASSERT_EQ(local().fill(lm.id, 0, data), 0);
	ASSERT_EQ(peer().post_recv(pm.id, 0, 4096, 1, 10), 0);
	ASSERT_EQ(peer().post_recv(pm.id, 4096, 4096, 1, 11), 0);
	ASSERT_EQ(local().post_send(send_op(WrOpcode::Send, 1, lm.id, 0, 3000)), 0);
	PostSend imm = send_op(WrOpcode::SendWithImm, 2, lm.id, 0, 100);
	imm.imm = 0xcafef00d;
	ASSERT_EQ(local().post_send(imm), 0);

	auto lw = local_wcs(2);
	ASSERT_EQ(lw.size(), 2u) << describe(lw);
	EXPECT_EQ(lw[0].wr_id, 1u);
	EXPECT_EQ(lw[0].status, WcStatus::Success);
	EXPECT_EQ(lw[0].opcode, WcOpcode::Send);
	EXPECT_EQ(lw[1].wr_id, 2u);
	EXPECT_EQ(lw[1].status, WcStatus::Success);

	auto pw = peer_wcs(2);
	ASSERT_EQ(pw.size(), 2u) << describe(pw);
	EXPECT_EQ(pw[0].wr_id, 10u);
	EXPECT_EQ(pw[0].status, WcStatus::Success);
	EXPECT_EQ(pw[0].opcode, WcOpcode::Recv);
	EXPECT_EQ(pw[0].byte_len, 3000u);
	EXPECT_EQ(pw[0].wc_flags & WC_WITH_IMM, 0u);
	EXPECT_EQ(pw[1].wr_id, 11u);
	EXPECT_EQ(pw[1].opcode, WcOpcode::Recv);
	EXPECT_EQ(pw[1].byte_len, 100u);
	EXPECT_NE(pw[1].wc_flags & WC_WITH_IMM, 0u);
	EXPECT_EQ(pw[1].imm_data, 0xcafef00du);
	std::vector<uint8_t> got;
	ASSERT_EQ(peer().read(pm.id, 0, 3000, &got), 0);
	EXPECT_EQ(got, data);
	ASSERT_EQ(peer().read(pm.id, 4096, 100, &got), 0);
	EXPECT_EQ(got, std::vector<uint8_t>(data.begin(), data.begin() + 100));
}

// IB spec 10.2.9 (shared receive queues): receives for a QP on an SRQ come from the SRQ in
// the order posted, and the WC names the QP (qp_num).
TEST_P(Conformance, SendRecvSrq)
{
	EpConfig pc;
	pc.srq = true;
	CONNECT(EpConfig{}, pc);
	auto lm = local().reg_mr(4096, ACCESS_LOCAL_WRITE);
	auto pm = peer().reg_mr(3 * 1024, ACCESS_LOCAL_WRITE);
	ASSERT_EQ(peer().post_recv(pm.id, 0, 1024, 1, 20), 0);
	ASSERT_EQ(peer().post_recv(pm.id, 1024, 1024, 1, 21), 0);
	ASSERT_EQ(peer().post_recv(pm.id, 2048, 1024, 1, 22), 0);
	for (uint8_t i = 0; i < 3; i++) {
		auto d = pattern(500 + i, i);
		ASSERT_EQ(local().fill(lm.id, i * 1024, d), 0);
		ASSERT_EQ(local().post_send(send_op(WrOpcode::Send, i, lm.id, i * 1024, 500 + i)),
		          0);
	}
	auto lw = local_wcs(3);
	ASSERT_EQ(lw.size(), 3u) << describe(lw);
	auto pw = peer_wcs(3);
	ASSERT_EQ(pw.size(), 3u) << describe(pw);
	for (uint32_t i = 0; i < 3; i++) {
		EXPECT_EQ(lw[i].status, WcStatus::Success);
		EXPECT_EQ(pw[i].status, WcStatus::Success);
		EXPECT_EQ(pw[i].wr_id, 20 + i) << "SRQ receives are consumed in order";
		EXPECT_EQ(pw[i].byte_len, 500 + i);
		EXPECT_NE(pw[i].qp_num, 0u) << "an SRQ completion names its QP";
		std::vector<uint8_t> got;
		ASSERT_EQ(peer().read(pm.id, i * 1024, 500 + i, &got), 0);
		EXPECT_EQ(got, pattern(500 + i, uint8_t(i)));
	}
}

// IB spec 11.4.1.1 (Post Send, IB_SEND_INLINE): the payload is copied at post time, so the
// buffer may be reused as soon as post_send returns.
TEST_P(Conformance, SendInlineCopiesAtPost)
{
	OPEN_LOCAL();
	if (dev().attr().max_inline_data < 64)
		GTEST_SKIP() << "max_inline_data " << dev().attr().max_inline_data;
	EpConfig lc;
	lc.max_inline = 64;
	CONNECT(lc, EpConfig{});
	ASSERT_GE(qp().cap().max_inline_data, 64u);
	auto lm = local().reg_mr(4096, ACCESS_LOCAL_WRITE);
	auto pm = peer().reg_mr(4096, ACCESS_LOCAL_WRITE);
	auto data = pattern(64, 9);
	ASSERT_EQ(local().fill(lm.id, 0, data), 0);
	// No receive yet: the SEND cannot have been executed when the buffer changes.
	PostSend ps = send_op(WrOpcode::Send, 1, lm.id, 0, 64);
	ps.flags |= SEND_INLINE;
	ASSERT_EQ(local().post_send(ps), 0);
	std::vector<uint8_t> junk(64, 0xee);
	ASSERT_EQ(local().fill(lm.id, 0, junk), 0);
	ASSERT_EQ(peer().post_recv(pm.id, 0, 128, 1, 5), 0);
	auto pw = peer_wcs(1);
	ASSERT_EQ(pw.size(), 1u);
	EXPECT_EQ(pw[0].status, WcStatus::Success);
	EXPECT_EQ(pw[0].byte_len, 64u);
	std::vector<uint8_t> got;
	ASSERT_EQ(peer().read(pm.id, 0, 64, &got), 0);
	EXPECT_EQ(got, data);
	auto lw = local_wcs(1);
	ASSERT_EQ(lw.size(), 1u);
	EXPECT_EQ(lw[0].status, WcStatus::Success);
}

// IB spec 9.7.5.2.8 (RNR NAK): a responder without a receive WR answers RNR NAK; the
// requester retries after the RNR timer, forever with rnr_retry 7, and succeeds once a
// receive is posted.
TEST_P(Conformance, RnrRetryLateRecvSucceeds)
{
	EpConfig c;
	c.rnr_retry = 7;
	CONNECT(c, c);
	auto lm = local().reg_mr(4096, ACCESS_LOCAL_WRITE);
	auto pm = peer().reg_mr(4096, ACCESS_LOCAL_WRITE);
	ASSERT_EQ(local().fill(lm.id, 0, pattern(200, 3)), 0);
	ASSERT_EQ(local().post_send(send_op(WrOpcode::Send, 1, lm.id, 0, 200)), 0);
	auto early = local_wcs(1, 150);
	EXPECT_TRUE(early.empty()) << "completed without a receive: " << describe(early);
	ASSERT_EQ(peer().post_recv(pm.id, 0, 4096, 1, 7), 0);
	auto lw = local_wcs(1);
	ASSERT_EQ(lw.size(), 1u);
	EXPECT_EQ(lw[0].status, WcStatus::Success);
	auto pw = peer_wcs(1);
	ASSERT_EQ(pw.size(), 1u);
	EXPECT_EQ(pw[0].status, WcStatus::Success);
	EXPECT_EQ(pw[0].byte_len, 200u);
	uint64_t naks = 0;
	if (rnr_naks(fab(), qp(), &naks)) {
		EXPECT_GT(naks, 0u) << "the requester saw no RNR NAK";
	}
	EXPECT_EQ(qp().state(), QpState::Rts);
}

// IB spec 9.7.5.2.8: with rnr_retry < 7 the requester gives up after that many
// retries: the WR completes with RNR_RETRY_EXC_ERR, the QP enters ERR and the WRs behind it
// are flushed.
TEST_P(Conformance, RnrRetryExhausted)
{
	EpConfig c;
	c.rnr_retry = 1;
	CONNECT(c, c);
	auto lm = local().reg_mr(4096, ACCESS_LOCAL_WRITE);
	ASSERT_EQ(local().post_send(send_op(WrOpcode::Send, 1, lm.id, 0, 64)), 0);
	ASSERT_EQ(local().post_send(send_op(WrOpcode::Send, 2, lm.id, 0, 64)), 0);
	auto lw = local_wcs(2);
	ASSERT_EQ(lw.size(), 2u) << describe(lw);
	EXPECT_EQ(lw[0].wr_id, 1u);
	EXPECT_EQ(lw[0].status, WcStatus::RnrRetryExcErr) << describe(lw);
	EXPECT_EQ(lw[1].wr_id, 2u);
	EXPECT_EQ(lw[1].status, WcStatus::WrFlushErr);
	EXPECT_EQ(local_state_becomes(QpState::Err), QpState::Err);
}

// IB spec 9.9.3 (responder errors): a SEND longer than the receive WR's buffers is an
// Invalid Request: the responder completes the receive with LOC_LEN_ERR and NAKs, the
// requester completes with REM_INV_REQ_ERR (10.7.3.1); both QPs enter ERR.
TEST_P(Conformance, RecvBufferTooSmall)
{
	CONNECT();
	auto lm = local().reg_mr(4096, ACCESS_LOCAL_WRITE);
	auto pm = peer().reg_mr(4096, ACCESS_LOCAL_WRITE);
	ASSERT_EQ(peer().post_recv(pm.id, 0, 16, 1, 30), 0);
	ASSERT_EQ(local().post_send(send_op(WrOpcode::Send, 1, lm.id, 0, 64)), 0);
	// The spec's answer: the responder NAKs Invalid Request and completes its receive with
	// a local length error. rxe (Linux 6.1) NAKs Remote Operational Error instead and
	// completes the receive with LOC_QP_OP_ERR: its copy_data() refuses a payload longer
	// than the receive WQE with -EINVAL before it could return the -ENOSPC that
	// send_data_in() maps to RESPST_ERR_LENGTH, so the MALFORMED_WQE branch runs. The error
	// is still detected and both QPs still fail; only the status differs.
	const WcStatus want_local = rxe() ? WcStatus::RemOpErr : WcStatus::RemInvReqErr;
	const WcStatus want_peer = rxe() ? WcStatus::LocQpOpErr : WcStatus::LocLenErr;
	auto lw = local_wcs(1);
	ASSERT_EQ(lw.size(), 1u);
	EXPECT_EQ(lw[0].status, want_local) << describe(lw);
	auto pw = peer_wcs(1);
	ASSERT_EQ(pw.size(), 1u);
	EXPECT_EQ(pw[0].wr_id, 30u);
	EXPECT_EQ(pw[0].status, want_peer) << describe(pw);
	EXPECT_EQ(local_state_becomes(QpState::Err), QpState::Err);
	EXPECT_EQ(peer_state_becomes(QpState::Err), QpState::Err);
}

// IB spec 9.4.3 / 11.4.1.1: a send WR gathers its SGEs in order into one message; the
// receive WC counts the whole message.
TEST_P(Conformance, SendRecvMultiSge)
{
	EpConfig c;
	c.max_sge = 2;
	CONNECT(c, c);
	auto lm = local().reg_mr(8192, ACCESS_LOCAL_WRITE);
	auto pm = peer().reg_mr(4096, ACCESS_LOCAL_WRITE);
	auto a = pattern(100, 4), b = pattern(300, 5);
	ASSERT_EQ(local().fill(lm.id, 0, a), 0);
	ASSERT_EQ(local().fill(lm.id, 5000, b), 0);
	ASSERT_EQ(peer().post_recv(pm.id, 0, 4096, 1, 1), 0);
	Sge sg[2] = {{lm.addr, 100, lm.lkey}, {lm.addr + 5000, 300, lm.lkey}};
	SendWr wr;
	wr.opcode = WrOpcode::Send;
	wr.sg_list = sg;
	wr.num_sge = 2;
	wr.send_flags = SEND_SIGNALED;
	wr.wr_cqe = local().cqe(1);
	const SendWr *bad = nullptr;
	ASSERT_EQ(qp().post_send(&wr, &bad), 0);
	auto lw = local_wcs(1);
	ASSERT_EQ(lw.size(), 1u);
	EXPECT_EQ(lw[0].status, WcStatus::Success);
	auto pw = peer_wcs(1);
	ASSERT_EQ(pw.size(), 1u);
	EXPECT_EQ(pw[0].byte_len, 400u) << "gather of both SGEs";
	std::vector<uint8_t> got, want = a;
	want.insert(want.end(), b.begin(), b.end());
	ASSERT_EQ(peer().read(pm.id, 0, 400, &got), 0);
	EXPECT_EQ(got, want);
}

} // namespace
} // namespace ulp::conf

namespace ulp::conf
{
namespace
{

bool wait_async(Endpoint &ep, EventType t, int ms)
{
	auto d = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
	for (;;) {
		for (auto &ev : ep.async_events())
			if (ev.event == t)
				return true;
		if (std::chrono::steady_clock::now() >= d)
			return false;
		progress_all();
		std::this_thread::sleep_for(std::chrono::milliseconds(1));
	}
}

// IB spec 10.2.9.5 / 11.6.3 (SRQ limit): an armed SRQ raises SRQ_LIMIT_REACHED once the
// number of WRs on it drops below the limit, and disarms itself.
TEST_P(Conformance, SrqLimitEvent)
{
	EpConfig lc;
	lc.srq = true;
	CONNECT(lc, EpConfig{});
	auto lm = local().reg_mr(8 * 256, ACCESS_LOCAL_WRITE);
	auto pm = peer().reg_mr(4096, ACCESS_LOCAL_WRITE);
	ASSERT_EQ(local().post_recv(lm.id, 0, 256, 8, 300), 0);
	ASSERT_EQ(local().srq()->arm_limit(4), 0);
	for (uint32_t i = 0; i < 3; i++)
		ASSERT_EQ(peer().post_send(send_op(WrOpcode::Send, i, pm.id, 0, 8)), 0);
	ASSERT_EQ(local_wcs(3).size(), 3u);
	EXPECT_FALSE(wait_async(local(), EventType::SrqLimitReached, 50))
	    << "limit event with 5 WRs left of a limit of 4";
	for (uint32_t i = 3; i < 5; i++)
		ASSERT_EQ(peer().post_send(send_op(WrOpcode::Send, i, pm.id, 0, 8)), 0);
	ASSERT_EQ(local_wcs(2).size(), 2u);
	EXPECT_TRUE(wait_async(local(), EventType::SrqLimitReached, kTimeoutMs))
	    << "no SRQ_LIMIT_REACHED with 3 WRs left of a limit of 4";
	EXPECT_EQ(peer_wcs(5).size(), 5u);
}

// IB spec 10.3.1 / 11.6.3 (Last WQE Reached): a QP on an SRQ that enters ERR raises
// LAST_WQE_REACHED where the device reports DEVICE_LAST_WQE_EVENT; rxe and iWARP devices do
// not, and then there must be no such event either.
TEST_P(Conformance, LastWqeReachedMatchesCapability)
{
	EpConfig lc;
	lc.srq = true;
	CONNECT(lc, EpConfig{});
	QpAttr a;
	a.qp_state = QpState::Err;
	ASSERT_EQ(qp().modify(a, QP_STATE), 0);
	bool has = dev().attr().device_cap_flags & DEVICE_LAST_WQE_EVENT;
	bool seen = wait_async(local(), EventType::QpLastWqeReached, has ? kTimeoutMs : 50);
	EXPECT_EQ(seen, has);
	if (seen) {
		for (auto &ev : local().async_events())
			if (ev.event == EventType::QpLastWqeReached) {
				EXPECT_EQ(ev.qp, &qp());
			}
	}
}

} // namespace
} // namespace ulp::conf
