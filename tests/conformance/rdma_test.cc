// SPDX-License-Identifier: MIT
// RDMA WRITE, WRITE_WITH_IMM, READ; rkey/PD/access/range checks; zero-length operations;
// local protection; max_rd_atomic and FENCE.
#include "tests/conformance/fixture.h"

#include <cerrno>
#include <cstring>

namespace ulp::conf
{
namespace
{

// IB spec 9.4.4: an RDMA WRITE places data at the responder's virtual address under its
// R_Key and consumes no receive WR: the responder sees no completion.
TEST_P(Conformance, RdmaWrite)
{
	CONNECT();
	auto lm = local().reg_mr(8192, ACCESS_LOCAL_WRITE);
	auto pm = peer().reg_mr(8192, kRemoteAll);
	auto data = pattern(5000, 11);
	ASSERT_EQ(local().fill(lm.id, 0, data), 0);
	ASSERT_EQ(local().post_send(
	              rdma_op(WrOpcode::RdmaWrite, 1, lm.id, 0, 5000, pm.addr + 100, pm.rkey)),
	          0);
	auto lw = local_wcs(1);
	ASSERT_EQ(lw.size(), 1u);
	EXPECT_EQ(lw[0].status, WcStatus::Success);
	EXPECT_EQ(lw[0].opcode, WcOpcode::RdmaWrite);
	std::vector<uint8_t> got;
	ASSERT_EQ(peer().read(pm.id, 100, 5000, &got), 0);
	EXPECT_EQ(got, data);
	ASSERT_EQ(peer().read(pm.id, 0, 100, &got), 0);
	EXPECT_EQ(got, std::vector<uint8_t>(100, 0)) << "bytes before the target untouched";
	auto pw = peer_wcs(1, 50);
	EXPECT_TRUE(pw.empty()) << "an RDMA WRITE consumed a receive: " << describe(pw);
}

// IB spec 9.4.4 / 10.7.2: RDMA WRITE with immediate consumes a receive WR at the responder,
// which completes as RECV_RDMA_WITH_IMM with the immediate data and the written length.
TEST_P(Conformance, RdmaWriteWithImm)
{
	CONNECT();
	auto lm = local().reg_mr(4096, ACCESS_LOCAL_WRITE);
	auto pm = peer().reg_mr(4096, kRemoteAll);
	auto data = pattern(2000, 12);
	ASSERT_EQ(local().fill(lm.id, 0, data), 0);
	ASSERT_EQ(peer().post_recv(-1, 0, 0, 1, 40), 0); // zero-length receive WR
	PostSend ps = rdma_op(WrOpcode::RdmaWriteWithImm, 1, lm.id, 0, 2000, pm.addr, pm.rkey);
	ps.imm = 0x01020304;
	ASSERT_EQ(local().post_send(ps), 0);
	auto lw = local_wcs(1);
	ASSERT_EQ(lw.size(), 1u);
	EXPECT_EQ(lw[0].status, WcStatus::Success);
	EXPECT_EQ(lw[0].opcode, WcOpcode::RdmaWrite);
	auto pw = peer_wcs(1);
	ASSERT_EQ(pw.size(), 1u);
	EXPECT_EQ(pw[0].wr_id, 40u);
	EXPECT_EQ(pw[0].status, WcStatus::Success);
	EXPECT_EQ(pw[0].opcode, WcOpcode::RecvRdmaWithImm);
	EXPECT_NE(pw[0].wc_flags & WC_WITH_IMM, 0u);
	EXPECT_EQ(pw[0].imm_data, 0x01020304u);
	EXPECT_EQ(pw[0].byte_len, 2000u);
	std::vector<uint8_t> got;
	ASSERT_EQ(peer().read(pm.id, 0, 2000, &got), 0);
	EXPECT_EQ(got, data);
}

// IB spec 9.4.5: an RDMA READ returns the responder's memory into the requester's local
// SGEs; the requester's WC counts the bytes read.
TEST_P(Conformance, RdmaRead)
{
	CONNECT();
	auto lm = local().reg_mr(8192, ACCESS_LOCAL_WRITE);
	auto pm = peer().reg_mr(8192, kRemoteAll);
	auto data = pattern(6000, 13);
	ASSERT_EQ(peer().fill(pm.id, 1000, data), 0);
	ASSERT_EQ(local().post_send(
	              rdma_op(WrOpcode::RdmaRead, 1, lm.id, 0, 6000, pm.addr + 1000, pm.rkey)),
	          0);
	auto lw = local_wcs(1);
	ASSERT_EQ(lw.size(), 1u);
	EXPECT_EQ(lw[0].status, WcStatus::Success);
	EXPECT_EQ(lw[0].opcode, WcOpcode::RdmaRead);
	EXPECT_EQ(lw[0].byte_len, 6000u);
	std::vector<uint8_t> got;
	ASSERT_EQ(local().read(lm.id, 0, 6000, &got), 0);
	EXPECT_EQ(got, data);
	auto pw = peer_wcs(1, 50);
	EXPECT_TRUE(pw.empty()) << describe(pw);
}

// IB spec 10.6.7 (memory access validation) and 9.9.3 (responder errors): the responder
// validates the R_Key, its PD, the access rights and the range of every RDMA request. A
// violation is NAKed Remote Access Error: the requester completes with REM_ACCESS_ERR and
// enters ERR, and the responder's QP enters ERR too (IB_EVENT_QP_ACCESS_ERR; rxe:
// RESPST_ERR_RKEY_VIOLATION -> do_class_d1e_error / qp error).
enum class Violation { BadRkey, WriteNoAccess, ReadNoAccess, Range, OtherPd };

class ConformanceAccess : public Conformance
{
protected:
	void violate(Violation v)
	{
		CONNECT();
		uint32_t access = kRemoteAll;
		if (v == Violation::WriteNoAccess)
			access &= ~ACCESS_REMOTE_WRITE;
		if (v == Violation::ReadNoAccess)
			access &= ~ACCESS_REMOTE_READ;
		auto lm = local().reg_mr(8192, ACCESS_LOCAL_WRITE);
		auto pm = peer().reg_mr(4096, access, v == Violation::OtherPd);
		ASSERT_GE(pm.id, 0);
		auto prm = peer().reg_mr(4096, ACCESS_LOCAL_WRITE);
		// A receive outstanding at the peer: it must be flushed when the peer's QP
		// enters ERR.
		ASSERT_EQ(peer().post_recv(prm.id, 0, 64, 1, 50), 0);
		WrOpcode op =
		    v == Violation::ReadNoAccess ? WrOpcode::RdmaRead : WrOpcode::RdmaWrite;
		uint64_t addr = pm.addr;
		uint32_t rkey = pm.rkey;
		uint32_t len = 512;
		if (v == Violation::BadRkey)
			rkey ^= 0x5a5a00;
		if (v == Violation::Range) {
			addr = pm.addr + 4096 - 256; // 256 bytes past the end
			len = 512;
		}
		ASSERT_EQ(local().post_send(rdma_op(op, 1, lm.id, 0, len, addr, rkey)), 0);
		ASSERT_EQ(local().post_send(send_op(WrOpcode::Send, 2, lm.id, 0, 8)), 0);
		auto lw = local_wcs(2);
		ASSERT_EQ(lw.size(), 2u) << describe(lw);
		EXPECT_EQ(lw[0].wr_id, 1u);
		EXPECT_EQ(lw[0].status, WcStatus::RemAccessErr) << describe(lw);
		EXPECT_EQ(lw[1].status, WcStatus::WrFlushErr) << "the WR behind is flushed";
		EXPECT_EQ(local_state_becomes(QpState::Err), QpState::Err);
		EXPECT_EQ(peer_state_becomes(QpState::Err), QpState::Err)
		    << "the responder's QP enters ERR on an access violation";
		auto pw = peer_wcs(1);
		ASSERT_EQ(pw.size(), 1u);
		EXPECT_EQ(pw[0].wr_id, 50u);
		EXPECT_EQ(pw[0].status, WcStatus::WrFlushErr) << describe(pw);
		if (v == Violation::WriteNoAccess || v == Violation::Range) {
			std::vector<uint8_t> got;
			ASSERT_EQ(peer().read(pm.id, 0, 4096, &got), 0);
			EXPECT_EQ(got, std::vector<uint8_t>(4096, 0)) << "nothing was written";
		}
	}
};

TEST_P(ConformanceAccess, WriteBadRkey)
{
	violate(Violation::BadRkey);
}
TEST_P(ConformanceAccess, WriteWithoutRemoteWrite)
{
	violate(Violation::WriteNoAccess);
}
TEST_P(ConformanceAccess, ReadWithoutRemoteRead)
{
	violate(Violation::ReadNoAccess);
}
TEST_P(ConformanceAccess, WriteBeyondMrEnd)
{
	violate(Violation::Range);
}
TEST_P(ConformanceAccess, WriteMrOfAnotherPd)
{
	violate(Violation::OtherPd);
}

INSTANTIATE_TEST_SUITE_P(Fabric, ConformanceAccess, ::testing::ValuesIn(fabric_names()),
                         fabric_param_name);

// IB spec C9-88: "For an HCA responder using Reliable Connection service, for a zero-length
// RDMA READ or WRITE request, the R_Key shall not be validated." Such requests succeed with
// any rkey and address, and both QPs stay in RTS.
TEST_P(Conformance, ZeroLengthRdmaSkipsRkeyCheck)
{
	CONNECT();
	auto lm = local().reg_mr(4096, ACCESS_LOCAL_WRITE);
	ASSERT_EQ(
	    local().post_send(rdma_op(WrOpcode::RdmaWrite, 1, -1, 0, 0, 0xdead0000ull, 0xbadbad42)),
	    0);
	ASSERT_EQ(
	    local().post_send(rdma_op(WrOpcode::RdmaRead, 2, -1, 0, 0, 0xbeef0000ull, 0x12345678)),
	    0);
	// And a zero-length SGE (length 0 with a valid lkey) is zero length too.
	ASSERT_EQ(
	    local().post_send(rdma_op(WrOpcode::RdmaWrite, 3, lm.id, 0, 0, 0x1000ull, 0xfeedfeed)),
	    0);
	auto lw = local_wcs(3);
	ASSERT_EQ(lw.size(), 3u) << describe(lw);
	for (auto &w : lw)
		EXPECT_EQ(w.status, WcStatus::Success) << describe({w});
	EXPECT_EQ(qp().state(), QpState::Rts);
	QpState ps;
	ASSERT_EQ(peer().qp_state(&ps), 0);
	EXPECT_EQ(ps, QpState::Rts);
}

// IB spec 10.7.3.1 / 11.6.2 (LOC_PROT_ERR): a local SGE whose lkey is not valid, or that
// reaches past its MR, fails the WR with LOC_PROT_ERR at the requester; the QP enters ERR.
TEST_P(Conformance, LocalBadLkey)
{
	CONNECT();
	auto lm = local().reg_mr(4096, ACCESS_LOCAL_WRITE);
	auto pm = peer().reg_mr(4096, kRemoteAll);
	ASSERT_EQ(peer().post_recv(pm.id, 0, 4096, 1, 1), 0);
	PostSend ps = send_op(WrOpcode::Send, 1, lm.id, 0, 64);
	ps.lkey_xor = 0x77700;
	ASSERT_EQ(local().post_send(ps), 0);
	// An invalid L_Key is a local protection error. rxe (Linux 6.1) reports LOC_QP_OP_ERR:
	// rxe_requester() maps only -EFAULT from finish_packet() (an SGE beyond its MR) to
	// LOC_PROT_ERR, and a failed lkey lookup returns -EINVAL (see LocalSgeBeyondMr, which
	// rxe gets right).
	const WcStatus want = rxe() ? WcStatus::LocQpOpErr : WcStatus::LocProtErr;
	auto lw = local_wcs(1);
	ASSERT_EQ(lw.size(), 1u);
	EXPECT_EQ(lw[0].status, want) << describe(lw);
	EXPECT_EQ(local_state_becomes(QpState::Err), QpState::Err);
	auto pw = peer_wcs(1, 50);
	EXPECT_TRUE(pw.empty() || pw[0].status != WcStatus::Success)
	    << "the peer received a message built from a bad lkey: " << describe(pw);
}

TEST_P(Conformance, LocalSgeBeyondMr)
{
	CONNECT();
	auto lm = local().reg_mr(4096, ACCESS_LOCAL_WRITE);
	auto pm = peer().reg_mr(8192, kRemoteAll);
	ASSERT_EQ(
	    local().post_send(rdma_op(WrOpcode::RdmaWrite, 1, lm.id, 2048, 4096, pm.addr, pm.rkey)),
	    0);
	auto lw = local_wcs(1);
	ASSERT_EQ(lw.size(), 1u);
	EXPECT_EQ(lw[0].status, WcStatus::LocProtErr) << describe(lw);
	EXPECT_EQ(local_state_becomes(QpState::Err), QpState::Err);
}

// IB spec 10.6.3.1 / 11.6.2: the sink of an RDMA READ is written by the local HCA and needs
// LOCAL_WRITE; without it the READ fails with LOC_PROT_ERR (rxe: copy_data() under
// IB_ACCESS_LOCAL_WRITE, status IB_WC_LOC_PROT_ERR).
TEST_P(Conformance, ReadSinkWithoutLocalWrite)
{
	CONNECT();
	auto lm = local().reg_mr(4096, ACCESS_REMOTE_READ);
	auto pm = peer().reg_mr(4096, kRemoteAll);
	ASSERT_GE(lm.id, 0);
	ASSERT_EQ(
	    local().post_send(rdma_op(WrOpcode::RdmaRead, 1, lm.id, 0, 256, pm.addr, pm.rkey)), 0);
	auto lw = local_wcs(1);
	ASSERT_EQ(lw.size(), 1u);
	EXPECT_EQ(lw[0].status, WcStatus::LocProtErr) << describe(lw);
	EXPECT_EQ(local_state_becomes(QpState::Err), QpState::Err);
}

// IB spec 10.8.3.3 / 11.4.1.1 (Fence indicator): a fenced WR is not started until every
// earlier RDMA READ of the QP has completed. A SEND of the buffer that a READ fills must
// carry the READ's data.
TEST_P(Conformance, FencedSendAfterReadSendsReadData)
{
	CONNECT();
	auto lm = local().reg_mr(4096, ACCESS_LOCAL_WRITE);
	auto pm = peer().reg_mr(8192, kRemoteAll);
	auto remote = pattern(3000, 21);
	ASSERT_EQ(peer().fill(pm.id, 0, remote), 0);
	ASSERT_EQ(local().fill(lm.id, 0, std::vector<uint8_t>(3000, 0xaa)), 0);
	ASSERT_EQ(peer().post_recv(pm.id, 4096, 4096, 1, 60), 0);
	ASSERT_EQ(
	    local().post_send(rdma_op(WrOpcode::RdmaRead, 1, lm.id, 0, 3000, pm.addr, pm.rkey)), 0);
	PostSend s = send_op(WrOpcode::Send, 2, lm.id, 0, 3000);
	s.flags |= SEND_FENCE;
	ASSERT_EQ(local().post_send(s), 0);
	auto lw = local_wcs(2);
	ASSERT_EQ(lw.size(), 2u) << describe(lw);
	EXPECT_EQ(lw[0].wr_id, 1u);
	EXPECT_EQ(lw[1].wr_id, 2u);
	EXPECT_EQ(lw[0].status, WcStatus::Success);
	EXPECT_EQ(lw[1].status, WcStatus::Success);
	auto pw = peer_wcs(1);
	ASSERT_EQ(pw.size(), 1u);
	std::vector<uint8_t> got;
	ASSERT_EQ(peer().read(pm.id, 4096, 3000, &got), 0);
	EXPECT_EQ(got, remote) << "the fenced SEND went out before the READ's data arrived";
}

// IB spec 9.4.5 and 11.2.4.2 (max_rd_atomic): a QP initiates at most max_rd_atomic RDMA READs at a
// time (rdma_cm initiator_depth); further READs wait in order. With depth 1, 32 READs all complete
// in order with the right data; on the soft provider the high-water mark of READs in flight is
// checked directly.
class ConformanceReadDepth : public Conformance
{
protected:
	void run(uint8_t depth)
	{
		EpConfig c;
		c.initiator_depth = depth;
		c.responder_resources = depth;
		c.max_send_wr = 64;
		CONNECT(c, c);
		const uint32_t n = 32, chunk = 512;
		auto lm = local().reg_mr(n * chunk, ACCESS_LOCAL_WRITE);
		auto pm = peer().reg_mr(n * chunk, kRemoteAll);
		auto data = pattern(n * chunk, 22);
		ASSERT_EQ(peer().fill(pm.id, 0, data), 0);
		for (uint32_t i = 0; i < n; i++) {
			// Reverse placement, so that a READ landing in the wrong place shows.
			uint32_t dst = (n - 1 - i) * chunk;
			ASSERT_EQ(local().post_send(rdma_op(WrOpcode::RdmaRead, i, lm.id, dst,
			                                    chunk, pm.addr + i * chunk, pm.rkey)),
			          0);
		}
		auto lw = local_wcs(int(n));
		ASSERT_EQ(lw.size(), n) << describe(lw);
		for (uint32_t i = 0; i < n; i++) {
			EXPECT_EQ(lw[i].wr_id, i) << "READs complete in order";
			EXPECT_EQ(lw[i].status, WcStatus::Success);
		}
		std::vector<uint8_t> got;
		ASSERT_EQ(local().read(lm.id, 0, n * chunk, &got), 0);
		for (uint32_t i = 0; i < n; i++)
			EXPECT_EQ(0, memcmp(got.data() + (n - 1 - i) * chunk,
			                    data.data() + i * chunk, chunk))
			    << "chunk " << i;
		uint64_t hw = 0;
		if (max_rd_inflight(fab(), qp(), &hw)) {
			EXPECT_GE(hw, 1u);
			EXPECT_LE(hw, depth) << "more READs in flight than max_rd_atomic";
		}
	}
};

TEST_P(ConformanceReadDepth, ManyReadsDepth1)
{
	run(1);
}
TEST_P(ConformanceReadDepth, ManyReadsDepth4)
{
	run(4);
}

INSTANTIATE_TEST_SUITE_P(Fabric, ConformanceReadDepth, ::testing::ValuesIn(fabric_names()),
                         fabric_param_name);

// rdma_cm's READ credits are IB CM's (cm_format_req_event, cm_format_rep_event,
// cm_rep_handler): each end's event reports the other end's values crossed, in its own
// terms. The passive side's CONNECT_REQUEST says responder_resources = the connector's
// initiator_depth and initiator_depth = the connector's responder_resources, so that it can
// answer min(its limit, the event's value) field by field; the connector's ESTABLISHED does
// the same with the accept's. The passive QP takes the accept's values; the active QP takes
// them crossed (max_rd_atomic = the accept's responder_resources). Powers of two: rxe rounds
// the QP's values up to one.
TEST_P(Conformance, ReadCreditsCrossOver)
{
	EpConfig lc, pc;
	lc.responder_resources = 8; // the connector answers 8 READs at once
	lc.initiator_depth = 2;     // and issues 2
	pc.responder_resources = 1; // the acceptor answers 1
	pc.initiator_depth = 4;     // and issues 4
	CONNECT(lc, pc);
	ReadCredits pe, le, pq, lq;
	ASSERT_EQ(peer().event_credits(&pe), 0);
	EXPECT_EQ(pe.responder_resources, 2u) << "CONNECT_REQUEST: the connector's initiator_depth";
	EXPECT_EQ(pe.initiator_depth, 8u) << "CONNECT_REQUEST: the connector's responder_resources";
	ASSERT_EQ(local().event_credits(&le), 0);
	EXPECT_EQ(le.responder_resources, 4u) << "ESTABLISHED: the acceptor's initiator_depth";
	EXPECT_EQ(le.initiator_depth, 1u) << "ESTABLISHED: the acceptor's responder_resources";
	ASSERT_EQ(peer().qp_credits(&pq), 0);
	EXPECT_EQ(pq.responder_resources, 1u) << "acceptor's max_dest_rd_atomic";
	EXPECT_EQ(pq.initiator_depth, 4u) << "acceptor's max_rd_atomic";
	ASSERT_EQ(local().qp_credits(&lq), 0);
	EXPECT_EQ(lq.responder_resources, 4u) << "connector's max_dest_rd_atomic";
	EXPECT_EQ(lq.initiator_depth, 1u) << "connector's max_rd_atomic";
}

// A QP whose accept gave it no READ credit (the acceptor answers no READs: the connector's
// max_rd_atomic is 0) never issues a READ: rxe's requester waits for a credit that never
// comes, and the WR completes only when the QP leaves RTS, flushed. A later WRITE waits
// behind it (the send queue is ordered). This is the silent stall a ULP must bound.
TEST_P(Conformance, ReadWithoutReadCreditWaitsUntilFlushed)
{
	EpConfig lc, pc;
	pc.responder_resources = 0;
	CONNECT(lc, pc);
	ReadCredits lq;
	ASSERT_EQ(local().qp_credits(&lq), 0);
	ASSERT_EQ(lq.initiator_depth, 0u);
	auto lm = local().reg_mr(4096, ACCESS_LOCAL_WRITE);
	auto pm = peer().reg_mr(4096, kRemoteAll);
	ASSERT_EQ(local().post_send(rdma_op(WrOpcode::RdmaRead, 1, lm.id, 0, 64, pm.addr, pm.rkey)),
	          0);
	ASSERT_EQ(
	    local().post_send(rdma_op(WrOpcode::RdmaWrite, 2, lm.id, 0, 64, pm.addr, pm.rkey)), 0);
	auto early = local_wcs(1, 500);
	EXPECT_TRUE(early.empty()) << "a READ without credit completed: " << describe(early);
	ASSERT_EQ(local().disconnect(), 0);
	auto wcs = local_wcs(2);
	ASSERT_EQ(wcs.size(), 2u) << describe(wcs);
	EXPECT_EQ(wcs[0].wr_id, 1u);
	EXPECT_EQ(wcs[0].status, WcStatus::WrFlushErr) << describe(wcs);
	EXPECT_EQ(wcs[1].wr_id, 2u);
	EXPECT_EQ(wcs[1].status, WcStatus::WrFlushErr) << describe(wcs);
}

// IB spec 11.4.1.1 (Post Send): an RDMA READ with more SGEs than max_sge_rd is rejected at
// post time (iWARP devices: one).
TEST_P(Conformance, ReadWithTooManySges)
{
	EpConfig c;
	c.max_sge = 4;
	CONNECT(c, c);
	uint32_t max_rd = dev().attr().max_sge_rd;
	if (max_rd >= qp().cap().max_send_sge)
		GTEST_SKIP() << "max_sge_rd " << max_rd << " >= send SGEs";
	auto lm = local().reg_mr(4096, ACCESS_LOCAL_WRITE);
	auto pm = peer().reg_mr(4096, kRemoteAll);
	std::vector<Sge> sg(max_rd + 1, Sge{lm.addr, 16, lm.lkey});
	RdmaWr wr;
	wr.opcode = WrOpcode::RdmaRead;
	wr.sg_list = sg.data();
	wr.num_sge = int(sg.size());
	wr.remote_addr = pm.addr;
	wr.rkey = pm.rkey;
	wr.send_flags = SEND_SIGNALED;
	wr.wr_cqe = local().cqe(1);
	const SendWr *bad = nullptr;
	EXPECT_EQ(qp().post_send(&wr, &bad), -EINVAL);
	EXPECT_EQ(bad, &wr);
}

} // namespace
} // namespace ulp::conf
