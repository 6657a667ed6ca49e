// SPDX-License-Identifier: MIT
// tests/rdma_conn/send_plug_test.cc - rdma::SendPlug (rdma_conn/send_plug.h) on a soft QP pair
// executed inline: a chain of pieces goes out in one post_send with one signaled WR (and
// each RDMA READ's own), and every piece still gets exactly one completion, in order -
// success when a later signaled one completes; its own error when it fails, success before
// it and flushed after it; flushed for what a refused post_send did not take (handed back
// unsent, signaled again) and for what a lost completion left waiting once the QP is
// drained.
#include "rdma_conn/send_plug.h"
#include "tests/soft/soft_test_util.h"

#include <gtest/gtest.h>

#include <vector>

namespace ulp::rdma
{
namespace
{

using namespace soft_test;

// One request: a SEND (or an RDMA WRITE) as one piece, and what its completions were.
struct Req {
	PlugPiece piece;
	Cqe cqe;
	RdmaWr wr;
	Sge sge;
	std::vector<WcStatus> got; // its completions' statuses
	WcOpcode op{};             // its last completion's opcode
	int order = -1;            // when its first completion came (index over all)
};

struct Log {
	int next = 0; // completions delivered so far
};

Log *g_log = nullptr; // the running test's (a done() has no context but its cqe)

void req_done(Cq *, Wc *wc)
{
	Req *r = container_of(wc->wr_cqe, &Req::cqe);
	if (r->got.empty())
		r->order = g_log->next;
	g_log->next++;
	r->got.push_back(wc->status);
	r->op = wc->opcode;
}

struct PlugRig {
	HandPair p;
	Log log;
	std::vector<Req> reqs;

	explicit PlugRig(size_t n) : reqs(n) { g_log = &log; }
	~PlugRig() { g_log = nullptr; }

	bool init() { return p.init(soft::Exec::Inline); }

	// Request i as a SEND of 8 bytes into one of b's receives (posted here).
	void send(size_t i)
	{
		Req &r = reqs[i];
		r.cqe.done = req_done;
		r.sge = p.a.sge(i * 8, 8);
		r.wr = RdmaWr{};
		r.wr.wr_cqe = &r.cqe;
		r.wr.sg_list = &r.sge;
		r.wr.num_sge = 1;
		r.wr.opcode = WrOpcode::Send;
		r.wr.send_flags = SEND_SIGNALED;
		ASSERT_EQ(post_recv(*p.b.qp, &rcqe_[i % 16], p.b.sge(1024 + i * 64, 64)), 0);
	}

	// Request i as an RDMA WRITE of 8 bytes under rkey.
	void write(size_t i, uint32_t rkey)
	{
		send(i);
		Req &r = reqs[i];
		r.wr.opcode = WrOpcode::RdmaWrite;
		r.wr.remote_addr = p.b.at(i * 8);
		r.wr.rkey = rkey;
	}

	// Dispatch a's send completions as cq_poll would (no wr_cqe: dropped); how many.
	size_t dispatch()
	{
		soft::progress(*p.da);
		soft::progress(*p.db);
		size_t n = 0;
		for (Wc &wc : drain_cq(*p.a.scq)) {
			n++;
			if (wc.wr_cqe)
				wc.wr_cqe->done(p.a.scq.get(), &wc);
		}
		return n;
	}

private:
	Cqe rcqe_[16];
};

TEST(SendPlug, OneChainOneSignaledCompletionEveryPieceItsOwn)
{
	PlugRig r(4);
	ASSERT_TRUE(r.init());
	SendPlug plug;
	for (size_t i = 0; i < 4; i++) {
		r.send(i);
		plug.add(&r.reqs[i].piece, &r.reqs[i].wr);
	}
	PlugList unsent;
	ASSERT_EQ(plug.post(*r.p.a.qp, &unsent), 0);
	EXPECT_TRUE(unsent.empty());
	EXPECT_EQ(plug.stats().posts, 1u);
	EXPECT_EQ(plug.stats().pieces, 4u);
	EXPECT_EQ(plug.stats().unsignaled, 3u);
	EXPECT_EQ(soft::qp_counters(*r.p.a.qp).post_sends, 1u);
	EXPECT_EQ(r.dispatch(), 1u) << "one CQE for the chain";
	for (size_t i = 0; i < 4; i++) {
		EXPECT_EQ(r.reqs[i].got, std::vector<WcStatus>{WcStatus::Success}) << "piece " << i;
		EXPECT_EQ(r.reqs[i].order, int(i)) << "in posting order";
		// The WRs are the protocol's again: unlinked from each other.
		EXPECT_EQ(r.reqs[i].wr.next, nullptr);
	}
	// Nothing is left waiting: a drain ends nothing more.
	plug.drained(r.p.a.scq.get(), r.p.a.qp);
	for (size_t i = 0; i < 4; i++)
		EXPECT_EQ(r.reqs[i].got.size(), 1u);

	// A chain of one is posted as the protocol made it.
	r.send(0);
	r.reqs[0].got.clear();
	plug.add(&r.reqs[0].piece, &r.reqs[0].wr);
	ASSERT_EQ(plug.post(*r.p.a.qp, &unsent), 0);
	EXPECT_EQ(r.reqs[0].wr.wr_cqe, &r.reqs[0].cqe);
	EXPECT_EQ(r.dispatch(), 1u);
	EXPECT_EQ(r.reqs[0].got, std::vector<WcStatus>{WcStatus::Success});
	EXPECT_EQ(plug.stats().unsignaled, 3u);
}

// A piece that ends in an RDMA READ keeps its own completion (a command's write data is
// there; it must not wait for what was posted after it), and it completes the responses
// posted before it.
TEST(SendPlug, AReadKeepsItsOwnCompletion)
{
	PlugRig r(4);
	ASSERT_TRUE(r.init());
	SendPlug plug;
	r.send(0);
	r.send(1);
	r.write(2, r.p.b.mr->rkey());
	r.reqs[2].wr.opcode = WrOpcode::RdmaRead;
	r.send(3);
	for (size_t i = 0; i < 4; i++)
		plug.add(&r.reqs[i].piece, &r.reqs[i].wr);
	PlugList unsent;
	ASSERT_EQ(plug.post(*r.p.a.qp, &unsent), 0);
	EXPECT_EQ(plug.stats().unsignaled, 2u);
	EXPECT_EQ(r.dispatch(), 2u) << "the READ's CQE and the chain's last";
	for (size_t i = 0; i < 4; i++) {
		EXPECT_EQ(r.reqs[i].got, std::vector<WcStatus>{WcStatus::Success}) << "piece " << i;
		EXPECT_EQ(r.reqs[i].order, int(i)) << "in posting order";
		// Each its own kind of completion: the responses the READ's CQE completed are
		// SENDs, not READs.
		EXPECT_EQ(r.reqs[i].op, i == 2 ? WcOpcode::RdmaRead : WcOpcode::Send)
		    << "piece " << i;
	}
	// A chain with no response before its last has nothing to save: as made.
	for (size_t i = 0; i < 2; i++) {
		r.write(i, r.p.b.mr->rkey());
		r.reqs[i].wr.opcode = WrOpcode::RdmaRead;
		r.reqs[i].got.clear();
		plug.add(&r.reqs[i].piece, &r.reqs[i].wr);
	}
	ASSERT_EQ(plug.post(*r.p.a.qp, &unsent), 0);
	EXPECT_EQ(r.reqs[0].wr.wr_cqe, &r.reqs[0].cqe);
	EXPECT_EQ(r.dispatch(), 2u);
	EXPECT_EQ(r.reqs[0].got, std::vector<WcStatus>{WcStatus::Success});
	EXPECT_EQ(r.reqs[1].got, std::vector<WcStatus>{WcStatus::Success});
	EXPECT_EQ(plug.stats().unsignaled, 2u);
}

TEST(SendPlug, AFailedPieceReportsItselfSuccessBeforeFlushedAfter)
{
	PlugRig r(4);
	ASSERT_TRUE(r.init());
	SendPlug plug;
	r.send(0);
	r.write(1, r.p.b.mr->rkey() + (77u << 8)); // the responder refuses the key
	r.send(2);
	r.send(3);
	for (size_t i = 0; i < 4; i++)
		plug.add(&r.reqs[i].piece, &r.reqs[i].wr);
	PlugList unsent;
	ASSERT_EQ(plug.post(*r.p.a.qp, &unsent), 0);
	r.dispatch();
	r.dispatch();
	EXPECT_EQ(r.reqs[0].got, std::vector<WcStatus>{WcStatus::Success});
	ASSERT_EQ(r.reqs[1].got.size(), 1u);
	EXPECT_NE(r.reqs[1].got[0], WcStatus::Success);
	EXPECT_NE(r.reqs[1].got[0], WcStatus::WrFlushErr);
	EXPECT_EQ(r.reqs[2].got, std::vector<WcStatus>{WcStatus::WrFlushErr});
	EXPECT_EQ(r.reqs[3].got, std::vector<WcStatus>{WcStatus::WrFlushErr});
	for (size_t i = 0; i < 4; i++)
		EXPECT_EQ(r.reqs[i].order, int(i)) << "piece " << i;
	plug.drained(r.p.a.scq.get(), r.p.a.qp);
	for (size_t i = 0; i < 4; i++)
		EXPECT_EQ(r.reqs[i].got.size(), 1u) << "piece " << i << " completed twice";
}

TEST(SendPlug, ARefusedPostHandsBackWhatDidNotGoOut)
{
	PlugRig r(4);
	ASSERT_TRUE(r.init());
	soft::FaultRule f;
	f.point = soft::FaultPoint::PostSend;
	f.qp_num = r.p.a.qp->qp_num();
	f.nth = 3; // the third WR of the chain: pieces 0 and 1 go out, 2 and 3 do not
	ASSERT_GE(soft::inject_fault(*r.p.da, f), 0);
	SendPlug plug;
	for (size_t i = 0; i < 4; i++) {
		r.send(i);
		plug.add(&r.reqs[i].piece, &r.reqs[i].wr);
	}
	PlugList unsent;
	EXPECT_EQ(plug.post(*r.p.a.qp, &unsent), -EIO);
	EXPECT_TRUE(plug.empty());
	ASSERT_EQ(unsent.size(), 2u);
	EXPECT_EQ(&unsent.front(), &r.reqs[2].piece);
	EXPECT_EQ(&unsent.back(), &r.reqs[3].piece);
	for (size_t i : {2, 3}) {
		// As the protocol made them: signaled, through their own cqe.
		EXPECT_EQ(r.reqs[i].wr.wr_cqe, &r.reqs[i].cqe);
		EXPECT_TRUE(r.reqs[i].wr.send_flags & SEND_SIGNALED);
	}
	unsent.clear();
	EXPECT_EQ(plug.stats().pieces, 2u);
	// Pieces 0 and 1 went out unsignaled and nothing signaled followed them: no CQE.
	EXPECT_EQ(r.dispatch(), 0u);
	EXPECT_TRUE(r.reqs[0].got.empty());
	// The connection closes and drains: they end flushed, once.
	plug.drained(r.p.a.scq.get(), r.p.a.qp);
	plug.drained(r.p.a.scq.get(), r.p.a.qp);
	EXPECT_EQ(r.reqs[0].got, std::vector<WcStatus>{WcStatus::WrFlushErr});
	EXPECT_EQ(r.reqs[1].got, std::vector<WcStatus>{WcStatus::WrFlushErr});
	EXPECT_TRUE(r.reqs[2].got.empty());
	EXPECT_TRUE(r.reqs[3].got.empty());
}

TEST(SendPlug, ALostCompletionEndsFlushedOnceDrained)
{
	PlugRig r(3);
	ASSERT_TRUE(r.init());
	soft::FaultRule f;
	f.point = soft::FaultPoint::DropCompletion;
	f.qp_num = r.p.a.qp->qp_num();
	f.nth = 1; // the chain's one completion
	ASSERT_GE(soft::inject_fault(*r.p.da, f), 0);
	SendPlug plug;
	for (size_t i = 0; i < 3; i++) {
		r.send(i);
		plug.add(&r.reqs[i].piece, &r.reqs[i].wr);
	}
	PlugList unsent;
	ASSERT_EQ(plug.post(*r.p.a.qp, &unsent), 0);
	EXPECT_EQ(r.dispatch(), 0u);
	EXPECT_EQ(soft::faults_fired(*r.p.da), 1u);
	// The last piece's own completion is the protocol's to miss (its data timeout); the
	// ones waiting for it end with the drain.
	plug.drained(r.p.a.scq.get(), r.p.a.qp);
	EXPECT_EQ(r.reqs[0].got, std::vector<WcStatus>{WcStatus::WrFlushErr});
	EXPECT_EQ(r.reqs[1].got, std::vector<WcStatus>{WcStatus::WrFlushErr});
	EXPECT_TRUE(r.reqs[2].got.empty());
}

} // namespace
} // namespace ulp::rdma
