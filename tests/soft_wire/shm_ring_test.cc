// SPDX-License-Identifier: MIT
// tests/soft_wire/shm_ring_test.cc - the ring wire against a hostile peer.
//
// The test plays the remote process itself (shm_peer.h): it asks for the ring wire in its
// CM request, passes its own link region and doorbell, maps the target's link read-only
// and writes requests and answers into shared memory by hand, against a real soft device
// whose listening CM id accepts every request (wire_peer.h). Each case first proves the
// harness speaks the protocol (a correct SEND lands and is answered), then writes one
// malformed thing and checks the contract of providers/soft/shm_wire.cc: the process
// survives, the target's QP ends in ERR, its CM id sees DISCONNECTED, and the receives it
// had posted are flushed, all within kDrop; nothing outside a registered region is read or
// written (ASan builds check that).
#include "shm_peer.h"

#include <gtest/gtest.h>

#include <thread>

using namespace ulp;
using namespace wire;
using namespace std::chrono_literals;

namespace
{

class SoftRing : public ::testing::Test
{
protected:
	explicit SoftRing(TargetConfig c = {}) : t(std::move(c)) {}

	void SetUp() override
	{
		std::string err;
		ASSERT_TRUE(t.start(&err)) << err;
	}

	// A correct handshake granting the ring wire, and ESTABLISHED at the target.
	void handshake()
	{
		ASSERT_TRUE(p.request(t.sock_name));
		auto rep = p.granted(kReplyMs);
		ASSERT_TRUE(rep) << "no REP granting the ring wire";
		ASSERT_TRUE(t.wait_event(CmEventType::Established, kDrop));
		ASSERT_NE(t.qp(), nullptr);
		EXPECT_EQ(rep->qpn, t.qp()->qp_num());
		EXPECT_EQ(t.qp()->state(), QpState::Rts);
	}

	// An inline SEND that must land in receive `consumed` and be answered Ack.
	void valid_send()
	{
		uint8_t data[40];
		for (size_t i = 0; i < sizeof(data); i++)
			data[i] = static_cast<uint8_t>(p.tx * 31 + i);
		const uint32_t n = p.tx;
		p.write_req(RingOp::Send, data, sizeof(data));
		p.publish();
		ASSERT_TRUE(p.wait([&] { return p.t_done() == n + 1; }, kReplyMs))
		    << "request " << n << " not answered";
		RingRsp a = p.trsp(n);
		EXPECT_EQ(a.seq, n);
		EXPECT_EQ(a.status, uint8_t(RingStatus::Ack));
		auto wc = Target::poll_n(*t.rcq, 1, kDrop);
		ASSERT_EQ(wc.size(), 1u);
		EXPECT_EQ(wc[0].status, WcStatus::Success);
		EXPECT_EQ(wc[0].byte_len, sizeof(data));
		EXPECT_EQ(wc[0].wr_cqe, &t.recv_cqe[consumed]);
		EXPECT_EQ(0, std::memcmp(t.buf() + Target::recv_off(consumed), data, sizeof(data)));
		consumed++;
	}

	void expect_dropped()
	{
		ASSERT_NE(t.qp(), nullptr);
		auto ev = t.wait_event(CmEventType::Disconnected, kDrop);
		EXPECT_TRUE(ev) << "no DISCONNECTED within " << kDrop.count() << " ms";
		EXPECT_TRUE(wait_until([&] { return t.qp()->state() == QpState::Err; }, kDrop))
		    << "QP not in ERR";
		size_t left = t.cfg.recvs - consumed;
		auto wc = Target::poll_n(*t.rcq, left, kDrop);
		EXPECT_EQ(wc.size(), left) << "receives not flushed";
		for (auto &w : wc)
			EXPECT_EQ(w.status, WcStatus::WrFlushErr);
	}

	void expect_refused()
	{
		EXPECT_TRUE(p.sock.wait_eof(kCmBound.count())) << "target kept a bad CM connection";
		EXPECT_EQ(t.accepted(), 0u);
		EXPECT_EQ(t.events.count(
		              [](const CmEv &e) { return e.type == CmEventType::ConnectRequest; }),
		          0u);
	}

	void expect_listener_alive()
	{
		t.drop_conn();
		consumed = 0;
		p.close();
		handshake();
		valid_send();
	}

	Target t;
	ShmPeer p;
	uint32_t consumed = 0;
};

// ---------------------------------------------------------------------------------------------
// Valid traffic: the harness speaks the protocol.

TEST_F(SoftRing, ValidTrafficLands)
{
	ASSERT_NO_FATAL_FAILURE(handshake());
	valid_send();

	// SEND with immediate, solicited.
	uint8_t d[64];
	std::memset(d, 0x5a, sizeof(d));
	RingReq &r1 = p.write_req(RingOp::SendImm, d, sizeof(d));
	r1.imm = 0xabcd1234;
	r1.flags |= kRingSolicited;
	p.publish();
	ASSERT_TRUE(p.wait([&] { return p.t_done() == 2; }, kReplyMs));
	auto wc = Target::poll_n(*t.rcq, 1, kDrop);
	ASSERT_EQ(wc.size(), 1u);
	EXPECT_TRUE(wc[0].wc_flags & WC_WITH_IMM);
	EXPECT_EQ(wc[0].imm_data, 0xabcd1234u);
	consumed++;

	// RDMA WRITE inline into the MR.
	const size_t off = 300000;
	RingReq &w = p.write_req(RingOp::Write, d, sizeof(d));
	w.rkey = t.mr->rkey();
	w.va = t.va(off);
	p.publish();
	ASSERT_TRUE(p.wait([&] { return p.t_done() == 3; }, kReplyMs));
	EXPECT_EQ(p.trsp(2).status, uint8_t(RingStatus::Ack));
	EXPECT_EQ(0, std::memcmp(t.buf() + off, d, sizeof(d)));

	// A region of ours: a WRITE from it, then a READ into it.
	uint8_t *m = p.pass_region(7, 65536);
	ASSERT_NE(m, nullptr);
	std::memset(m + 1000, 0x77, 20000);
	RingReq &wr = p.write_req(RingOp::Write);
	wr.flags = kRingRegion;
	wr.len = 20000;
	wr.region = 7;
	wr.off = 1000;
	wr.rkey = t.mr->rkey();
	wr.va = t.va(off);
	RingReq &rd = p.write_req(RingOp::Read);
	rd.flags = kRingRegion;
	rd.len = 20000;
	rd.region = 7;
	rd.off = 40000;
	rd.rkey = t.mr->rkey();
	rd.va = t.va(off);
	p.publish();
	ASSERT_TRUE(p.wait([&] { return p.t_done() == 5; }, kReplyMs));
	EXPECT_EQ(p.trsp(3).status, uint8_t(RingStatus::Ack));
	EXPECT_EQ(p.trsp(4).status, uint8_t(RingStatus::Ack));
	EXPECT_EQ(p.trsp(4).len, 20000u);
	EXPECT_EQ(t.buf()[off + 19999], 0x77);
	EXPECT_EQ(m[40000 + 19999], 0x77);

	// An access violation is NAKed, and the QP goes to ERR (IB: REM_ACCESS_ERR).
	RingReq &bad = p.write_req(RingOp::Write, d, 8);
	bad.rkey = t.mr->rkey() ^ 0x100;
	bad.va = t.va(0);
	p.publish();
	ASSERT_TRUE(p.wait([&] { return p.t_done() == 6; }, kReplyMs));
	EXPECT_EQ(p.trsp(5).status, uint8_t(RingStatus::Access));
	EXPECT_TRUE(wait_until([&] { return t.qp()->state() == QpState::Err; }, kDrop));
	// Requests after that are answered "gone", not executed.
	p.write_req(RingOp::Send, d, 8);
	p.publish();
	ASSERT_TRUE(p.wait([&] { return p.t_done() == 7; }, kReplyMs));
	EXPECT_EQ(p.trsp(6).status, uint8_t(RingStatus::Gone));
}

// RNR: the target holds the request without a receive until we ask again.
TEST_F(SoftRing, RnrHoldsUntilRetry)
{
	ASSERT_NO_FATAL_FAILURE(handshake());
	for (uint32_t i = 0; i < t.cfg.recvs; i++)
		valid_send();
	uint8_t d[16] = {1, 2, 3};
	const uint32_t n = p.tx;
	p.write_req(RingOp::Send, d, sizeof(d));
	p.write_req(RingOp::Send, d, sizeof(d)); // waits behind it
	p.publish();
	ASSERT_TRUE(p.wait([&] { return p.t_naks() == 1; }, kReplyMs)) << "no RNR NAK";
	EXPECT_EQ(p.t_done(), n);
	EXPECT_EQ(p.trsp(n).status, uint8_t(RingStatus::Rnr));
	EXPECT_EQ(p.trsp(n).rnr_timer, 12);
	// Nothing moves without a retry, even with receives posted.
	ulp::Sge s{t.va(0), 4096, t.mr->lkey()};
	ulp::RecvWr rw[2];
	for (auto &r : rw) {
		r.wr_cqe = &t.recv_cqe[0];
		r.sg_list = &s;
		r.num_sge = 1;
	}
	rw[0].next = &rw[1];
	const ulp::RecvWr *badr = nullptr;
	ASSERT_EQ(t.qp()->post_recv(rw, &badr), 0);
	std::this_thread::sleep_for(50ms);
	EXPECT_EQ(p.t_done(), n);
	p.set(&RingHdr::rnr_retries, 1);
	ASSERT_TRUE(p.wait([&] { return p.t_done() == n + 2; }, kReplyMs));
	EXPECT_EQ(p.trsp(n).status, uint8_t(RingStatus::Ack));
	EXPECT_EQ(p.trsp(n + 1).status, uint8_t(RingStatus::Ack));
	EXPECT_EQ(Target::poll_n(*t.rcq, 2, kDrop).size(), 2u);
	EXPECT_EQ(t.qp()->state(), QpState::Rts);
	p.close();
	consumed = t.cfg.recvs; // all taken; the two extra are taken too
	expect_dropped();
}

class SoftRingRequester : public SoftRing
{
protected:
	SoftRingRequester() : SoftRing(config()) {}
	static TargetConfig config()
	{
		TargetConfig c;
		c.post_on_established = true;
		return c;
	}
	// The target's SEND (0, inline) and READ (1, into its registered region).
	void read_target_requests()
	{
		ASSERT_TRUE(p.wait([&] { return p.t_prod() == Target::kTargetSends; }, kReplyMs));
		RingReq s = p.treq(0), r = p.treq(1);
		EXPECT_EQ(s.seq, 0u);
		EXPECT_EQ(s.op, uint8_t(RingOp::Send));
		EXPECT_EQ(s.len, Target::kTargetSendLen);
		EXPECT_EQ(s.flags & kRingInlineData, kRingInlineData);
		EXPECT_EQ(r.seq, 1u);
		EXPECT_EQ(r.op, uint8_t(RingOp::Read));
		EXPECT_EQ(r.len, Target::kTargetReadLen);
		EXPECT_EQ(r.flags & kRingRegion, kRingRegion);
		ASSERT_TRUE(
		    p.wait([&] { return p.region(r.region, r.off, r.len) != nullptr; }, kReplyMs))
		    << "the READ names a region never passed";
	}
	void answer(uint32_t i, RingStatus st, uint32_t len = 0)
	{
		RingRsp &a = p.rsp(i);
		a.seq = i;
		a.status = uint8_t(st);
		a.len = len;
	}
};

TEST_F(SoftRingRequester, TargetRequestsComplete)
{
	ASSERT_NO_FATAL_FAILURE(handshake());
	ASSERT_NO_FATAL_FAILURE(read_target_requests());
	RingReq r = p.treq(1);
	std::memset(p.region(r.region, r.off, r.len), 0xc3, r.len);
	answer(0, RingStatus::Ack);
	answer(1, RingStatus::Ack, Target::kTargetReadLen);
	p.set(&RingHdr::done, 2);
	auto wc = Target::poll_n(*t.scq, 2, kDrop);
	ASSERT_EQ(wc.size(), 2u);
	EXPECT_EQ(wc[0].status, WcStatus::Success);
	EXPECT_EQ(wc[0].wr_cqe, &t.send_cqe[0]);
	EXPECT_EQ(wc[1].status, WcStatus::Success);
	EXPECT_EQ(wc[1].wr_cqe, &t.send_cqe[1]);
	EXPECT_EQ(wc[1].byte_len, Target::kTargetReadLen);
	EXPECT_EQ(t.buf()[Target::kSendOff + 4096 + 63], 0xc3);
	valid_send();
	p.close(); // EOF: peer death
	expect_dropped();
}

// The target retries an RNR-NAKed SEND of its own after its RNR timer.
TEST_F(SoftRingRequester, TargetRetriesAfterRnr)
{
	ASSERT_NO_FATAL_FAILURE(handshake());
	ASSERT_NO_FATAL_FAILURE(read_target_requests());
	RingRsp &a = p.rsp(0);
	a.seq = 0;
	a.status = uint8_t(RingStatus::Rnr);
	a.rnr_timer = 1; // 0.01 ms
	p.set(&RingHdr::rnr_naks, 1);
	ASSERT_TRUE(p.wait([&] { return p.peek(p.thdr().rnr_retries) == 1; }, kReplyMs))
	    << "no retry";
	answer(0, RingStatus::Ack);
	answer(1, RingStatus::Ack, Target::kTargetReadLen);
	p.set(&RingHdr::done, 2);
	auto wc = Target::poll_n(*t.scq, 2, kDrop);
	ASSERT_EQ(wc.size(), 2u);
	EXPECT_EQ(wc[0].status, WcStatus::Success);
	EXPECT_EQ(wc[1].status, WcStatus::Success);
	EXPECT_EQ(soft::qp_counters(*t.qp()).rnr_naks, 1u);
}

// ---------------------------------------------------------------------------------------------
// Malformed shared memory after establishment: each drops the connection.

struct BadRing {
	const char *name;
	bool target_requests; // the target has a SEND (0) and a READ (1) in its ring
	std::function<void(ShmPeer &, Target &)> write;
};

// A request with defaults, for a case to spoil.
RingReq &req(ShmPeer &p, RingOp op, uint32_t len = 8)
{
	static const uint8_t d[kRingInline] = {};
	return p.write_req(op, d, len);
}

void answer(ShmPeer &p, uint32_t i, RingStatus st, uint32_t len = 0)
{
	RingRsp &a = p.rsp(i);
	a.seq = i;
	a.status = uint8_t(st);
	a.len = len;
}

const BadRing kBadRing[] = {
    {"ReqProdBeyondRing", false, [](ShmPeer &p, Target &) { p.publish(p.tx + kRingSlots + 1); }},
    {"ReqProdBackwards", false, [](ShmPeer &p, Target &) { p.publish(p.tx - 2); }},
    {"SeqMismatch", false,
     [](ShmPeer &p, Target &) {
	     req(p, RingOp::Send).seq += 5;
	     p.publish();
     }},
    {"OpZero", false,
     [](ShmPeer &p, Target &) {
	     req(p, RingOp::Send).op = 0;
	     p.publish();
     }},
    {"OpMax", false,
     [](ShmPeer &p, Target &) {
	     req(p, RingOp::Send).op = uint8_t(RingOp::Max);
	     p.publish();
     }},
    {"UnknownFlags", false,
     [](ShmPeer &p, Target &) {
	     req(p, RingOp::Send).flags |= 0x80;
	     p.publish();
     }},
    {"InlineAndRegion", false,
     [](ShmPeer &p, Target &) {
	     req(p, RingOp::Send).flags |= kRingRegion;
	     p.publish();
     }},
    {"InlineTooLong", false,
     [](ShmPeer &p, Target &) {
	     req(p, RingOp::Send).len = kRingInline + 1;
	     p.publish();
     }},
    {"InlineRead", false,
     [](ShmPeer &p, Target &t) {
	     RingReq &r = req(p, RingOp::Read);
	     r.rkey = t.mr->rkey();
	     r.va = t.va(0);
	     p.publish();
     }},
    {"LengthWithoutPayload", false,
     [](ShmPeer &p, Target &) {
	     RingReq &r = req(p, RingOp::Send);
	     r.flags = 0;
	     p.publish();
     }},
    {"PayloadFlagsWithoutLength", false,
     [](ShmPeer &p, Target &) {
	     req(p, RingOp::Send).len = 0;
	     p.publish();
     }},
    {"LengthBeyondIbLimit", false,
     [](ShmPeer &p, Target &) {
	     p.pass_region(1, 4096);
	     RingReq &r = req(p, RingOp::Write);
	     r.flags = kRingRegion;
	     r.region = 1;
	     r.len = 0x80000001u;
	     p.publish();
     }},
    {"UnknownRegion", false,
     [](ShmPeer &p, Target &) {
	     RingReq &r = req(p, RingOp::Send);
	     r.flags = kRingRegion;
	     r.region = 99;
	     p.publish();
     }},
    {"RegionOffsetBeyond", false,
     [](ShmPeer &p, Target &) {
	     p.pass_region(1, 65536);
	     RingReq &r = req(p, RingOp::Send);
	     r.flags = kRingRegion;
	     r.region = 1;
	     r.off = 65537;
	     r.len = 1;
	     p.publish();
     }},
    {"RegionLengthBeyond", false,
     [](ShmPeer &p, Target &) {
	     p.pass_region(1, 65536);
	     RingReq &r = req(p, RingOp::Send);
	     r.flags = kRingRegion;
	     r.region = 1;
	     r.off = 65000;
	     r.len = 1000;
	     p.publish();
     }},
    {"RegionOffsetWraps", false,
     [](ShmPeer &p, Target &t) {
	     p.pass_region(1, 65536);
	     RingReq &r = req(p, RingOp::Write);
	     r.flags = kRingRegion;
	     r.region = 1;
	     r.off = ~0ull - 8;
	     r.len = 16;
	     r.rkey = t.mr->rkey();
	     r.va = t.va(0);
	     p.publish();
     }},
    {"ReadSinkBeyondRegion", false,
     [](ShmPeer &p, Target &t) {
	     p.pass_region(1, 4096);
	     RingReq &r = req(p, RingOp::Read);
	     r.flags = kRingRegion;
	     r.region = 1;
	     r.len = 8192;
	     r.rkey = t.mr->rkey();
	     r.va = t.va(0);
	     p.publish();
     }},
    {"RetryWithoutNak", false,
     [](ShmPeer &p, Target &) {
	     // Hold the target (no receives left), then ask for two retries.
	     for (uint32_t i = 0; i < 8; i++)
		     req(p, RingOp::Send);
	     p.publish();
	     ASSERT_TRUE(p.wait([&] { return p.t_naks() == 1; }, kReplyMs));
	     p.set(&RingHdr::rnr_retries, 2);
     }},
    {"RequestOnSocket", false,
     [](ShmPeer &p, Target &) {
	     ASSERT_TRUE(p.sock.send_pkt(wire::hdr(PktOp::Send, 1, 4), "abcd", 4));
     }},
    {"AnswerNothingInFlight", false, [](ShmPeer &p, Target &) { p.set(&RingHdr::done, 1); }},
    {"NakNothingInFlight", false, [](ShmPeer &p, Target &) { p.set(&RingHdr::rnr_naks, 1); }},
    {"AnswerBeyondRequests", true, [](ShmPeer &p, Target &) { p.set(&RingHdr::done, 3); }},
    {"AnswerSeqMismatch", true,
     [](ShmPeer &p, Target &) {
	     answer(p, 0, RingStatus::Ack);
	     p.rsp(0).seq = 7;
	     p.set(&RingHdr::done, 1);
     }},
    {"AnswerStatusZero", true,
     [](ShmPeer &p, Target &) {
	     answer(p, 0, RingStatus(0));
	     p.set(&RingHdr::done, 1);
     }},
    {"AnswerStatusMax", true,
     [](ShmPeer &p, Target &) {
	     answer(p, 0, RingStatus::Max);
	     p.set(&RingHdr::done, 1);
     }},
    {"AnswerRnrBelowDone", true,
     [](ShmPeer &p, Target &) {
	     answer(p, 0, RingStatus::Rnr);
	     p.set(&RingHdr::done, 1);
     }},
    {"AnswerSendWithLength", true,
     [](ShmPeer &p, Target &) {
	     answer(p, 0, RingStatus::Ack, 16);
	     p.set(&RingHdr::done, 1);
     }},
    {"AnswerReadShort", true,
     [](ShmPeer &p, Target &) {
	     answer(p, 0, RingStatus::Ack);
	     answer(p, 1, RingStatus::Ack, Target::kTargetReadLen - 1);
	     p.set(&RingHdr::done, 2);
     }},
    {"AnswerReadLong", true,
     [](ShmPeer &p, Target &) {
	     answer(p, 0, RingStatus::Ack);
	     answer(p, 1, RingStatus::Ack, 1u << 30);
	     p.set(&RingHdr::done, 2);
     }},
    {"NakJumps", true, [](ShmPeer &p, Target &) { p.set(&RingHdr::rnr_naks, 2); }},
    {"NakNotRnr", true,
     [](ShmPeer &p, Target &) {
	     answer(p, 0, RingStatus::Ack);
	     p.set(&RingHdr::rnr_naks, 1);
     }},
    {"NakTwiceWithoutRetry", true,
     [](ShmPeer &p, Target &) {
	     RingRsp &a = p.rsp(0);
	     a.seq = 0;
	     a.status = uint8_t(RingStatus::Rnr);
	     a.rnr_timer = 31; // 491 ms: the second NAK comes before the retry
	     p.set(&RingHdr::rnr_naks, 1);
	     std::this_thread::sleep_for(20ms);
	     p.set(&RingHdr::rnr_naks, 2);
     }},
};

class SoftRingBad : public SoftRing, public ::testing::WithParamInterface<BadRing>
{
protected:
	SoftRingBad() : SoftRing(config()) {}
	static TargetConfig config()
	{
		TargetConfig c;
		c.post_on_established = GetParam().target_requests;
		return c;
	}
};

TEST_P(SoftRingBad, DropsConnection)
{
	const BadRing &bc = GetParam();
	ASSERT_NO_FATAL_FAILURE(handshake());
	if (bc.target_requests) {
		ASSERT_TRUE(p.wait([&] { return p.t_prod() == Target::kTargetSends; }, kReplyMs));
	}
	valid_send();
	ASSERT_NO_FATAL_FAILURE(bc.write(p, t));
	if (std::string(bc.name) == "RetryWithoutNak")
		consumed = t.cfg.recvs; // the held SENDs took every receive
	expect_dropped();
	if (bc.target_requests) {
		// The target's own requests: none lost; the oldest unanswered one failed
		// (retry exceeded), the rest flushed.
		auto wc = Target::poll_n(*t.scq, Target::kTargetSends, kDrop);
		ASSERT_EQ(wc.size(), Target::kTargetSends);
		bool failed = false;
		for (auto &w : wc) {
			if (w.status == WcStatus::Success)
				continue;
			EXPECT_EQ(w.status, failed ? WcStatus::WrFlushErr : WcStatus::RetryExcErr);
			failed = true;
		}
	}
	// Later writes to the rings change nothing, and the listener still works.
	req(p, RingOp::Send);
	p.publish();
	std::this_thread::sleep_for(20ms);
	EXPECT_EQ(t.qp()->state(), QpState::Err);
	expect_listener_alive();
}

INSTANTIATE_TEST_SUITE_P(Hostile, SoftRingBad, ::testing::ValuesIn(kBadRing),
                         [](const ::testing::TestParamInfo<BadRing> &i) {
	                         return std::string(i.param.name);
                         });

// ---------------------------------------------------------------------------------------------
// The handshake: broken links are refused, and the listener keeps working.

struct BadLink {
	const char *name;
	LinkOpts o;
};

LinkOpts link_with(void (*f)(LinkOpts &))
{
	LinkOpts o;
	f(o);
	return o;
}

const BadLink kBadLink[] = {
    {"NoFds", link_with([](LinkOpts &o) { o.nfds = 0; })},
    {"OneFd", link_with([](LinkOpts &o) { o.nfds = 1; })},
    {"WireTwo", link_with([](LinkOpts &o) { o.wire = 2; })},
    {"NotSealed", link_with([](LinkOpts &o) { o.seal = false; })},
    {"TooSmall", link_with([](LinkOpts &o) { o.size = kRingBytes - 4096; })},
    {"ForeignMagic", link_with([](LinkOpts &o) { o.magic = 0x12345678; })},
    {"DoorbellNotEventfd", link_with([](LinkOpts &o) { o.eventfd = false; })},
};

class SoftRingLink : public SoftRing, public ::testing::WithParamInterface<BadLink>
{
};

TEST_P(SoftRingLink, Refused)
{
	ASSERT_TRUE(p.request(t.sock_name, cm_req(), GetParam().o));
	expect_refused();
	expect_listener_alive();
}

INSTANTIATE_TEST_SUITE_P(Hostile, SoftRingLink, ::testing::ValuesIn(kBadLink),
                         [](const ::testing::TestParamInfo<BadLink> &i) {
	                         return std::string(i.param.name);
                         });

// The packet wire is still granted to a peer that asks for it (wire 0), on the same
// listener.
TEST_F(SoftRing, PacketWireStillServed)
{
	RawPeer raw;
	ASSERT_TRUE(raw.connect(t.sock_name));
	ASSERT_TRUE(raw.send_cm_req(cm_req()));
	auto rep = raw.recv_pkt(kReplyMs);
	ASSERT_TRUE(rep);
	ASSERT_EQ(rep->h.op, uint8_t(PktOp::CmRep));
	CmMsg m;
	std::memcpy(&m, rep->payload.data(), sizeof(m));
	EXPECT_EQ(m.wire, 0);
	EXPECT_EQ(rep->fds, 0);
}

// ---------------------------------------------------------------------------------------------
// The peer goes away mid-operation.

TEST_F(SoftRing, PeerDiesWithRequestsPublished)
{
	ASSERT_NO_FATAL_FAILURE(handshake());
	valid_send();
	for (int i = 0; i < 4; i++)
		req(p, RingOp::Send);
	p.publish();
	p.close();
	consumed = 5; // the four may or may not have landed before the EOF
	ASSERT_TRUE(t.wait_event(CmEventType::Disconnected, kDrop));
	EXPECT_TRUE(wait_until([&] { return t.qp()->state() == QpState::Err; }, kDrop));
}

TEST_F(SoftRingRequester, PeerDiesWithTargetReadsInFlight)
{
	ASSERT_NO_FATAL_FAILURE(handshake());
	ASSERT_NO_FATAL_FAILURE(read_target_requests());
	p.close();
	auto wc = Target::poll_n(*t.scq, Target::kTargetSends, kDrop);
	ASSERT_EQ(wc.size(), Target::kTargetSends);
	EXPECT_EQ(wc[0].status, WcStatus::RetryExcErr);
	EXPECT_EQ(wc[1].status, WcStatus::WrFlushErr);
	ASSERT_TRUE(t.wait_event(CmEventType::Disconnected, kDrop));
}

// The target's QP enters ERR with a READ in flight: it tells the peer to stop and waits
// for the acknowledgement before flushing (the memory may be reused at once after).
TEST_F(SoftRingRequester, ErrWaitsForPeerToStopReads)
{
	ASSERT_NO_FATAL_FAILURE(handshake());
	ASSERT_NO_FATAL_FAILURE(read_target_requests());
	ASSERT_EQ(t.qp()->modify(
	              [] {
		              QpAttr a;
		              a.qp_state = QpState::Err;
		              return a;
	              }(),
	              QP_STATE),
	          0);
	ASSERT_TRUE(p.wait([&] { return p.peek(p.thdr().err) == 1; }, kReplyMs));
	std::this_thread::sleep_for(50ms);
	EXPECT_TRUE(Target::drain(t.scq.get()).empty()) << "flushed before the peer stopped";
	p.set(&RingHdr::err_ack, 1);
	auto wc = Target::poll_n(*t.scq, Target::kTargetSends, kDrop);
	ASSERT_EQ(wc.size(), Target::kTargetSends);
	for (auto &w : wc)
		EXPECT_EQ(w.status, WcStatus::WrFlushErr);
}

} // namespace
