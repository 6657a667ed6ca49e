// SPDX-License-Identifier: MIT
// tests/rdma_conn/client_test.cc - the active side (rdma_conn/client.h) over the soft
// provider, against a real passive portal (rdma_conn/portal.h) in the same process.
//
// What is checked: a connect to a port nobody listens on, and to a peer that sits on the
// request, fails within its deadline with an error that says so; a connect and a
// disconnect from either end (the portal frees its connection); a reject's private data
// reaches the caller; what the target sent before it disconnected is reaped from the CQ
// before the disconnect is reported; and a close while sends are outstanding (the target
// posted no receive: they sit in RNR retry) flushes every one of them. And the portal
// connection's send plug (rdma_conn/send_plug.h): held to the turn's end, posted by a close,
// at once after it.
#include "core/check.h"
#include "core/turn.h"
#include "rdma_conn/client.h"
#include "rdma_conn/portal.h"
#include "tests/soft/soft_test_util.h"

#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace ulp::rdma
{
namespace
{

using namespace std::chrono_literals;
using clock = std::chrono::steady_clock;

const std::vector<uint8_t> kWelcome = {'w', 'e', 'l', 'c', 'o', 'm', 'e'};
const std::vector<uint8_t> kNoThanks = {'n', 'o', ' ', 't', 'h', 'a', 'n', 'k', 's'};

// Completions of the WRs that share one Cqe, by status.
struct Counted {
	Cqe cqe;                     // the WRs' wr_cqe
	std::atomic<int> ok{0};      // Success
	std::atomic<int> flushed{0}; // WrFlushErr
	std::atomic<int> other{0};   // anything else
	std::atomic<uint32_t> imm{0};

	Counted() { cqe.done = done; }
	static void done(Cq *, Wc *wc)
	{
		Counted *c = container_of(wc->wr_cqe, &Counted::cqe);
		if (wc->status == WcStatus::Success) {
			if (wc->wc_flags & WC_WITH_IMM)
				c->imm = wc->imm_data;
			c->ok++;
		} else if (wc->status == WcStatus::WrFlushErr) {
			c->flushed++;
		} else {
			c->other++;
		}
	}
};

// The target's connection: counts its CM events and sends; closes on a disconnect.
class TestConn final : public PortalConn
{
public:
	TestConn(Portal &p, std::unique_ptr<CmId> id) : PortalConn(p, std::move(id)) {}

	int make_qp(Pd &pd, std::string *why)
	{
		QpInitAttr qa;
		qa.cap.max_send_wr = 8 + 1;
		qa.cap.max_recv_wr = 8 + 1;
		qa.cap.max_send_sge = 1;
		qa.cap.max_recv_sge = 1;
		return create_qp(pd, qa, nullptr, why);
	}
	// A zero-length SEND with immediate data imm.
	int send_imm(uint32_t imm)
	{
		SendWr wr;
		wr.wr_cqe = &sent.cqe;
		wr.opcode = WrOpcode::SendWithImm;
		wr.imm_data = imm;
		wr.send_flags = SEND_SIGNALED;
		const SendWr *bad = nullptr;
		return qp()->post_send(&wr, &bad);
	}

	// A zero-length SEND with immediate data imm through the send plug (send_plug.h), as
	// piece i (of kPieces). The test's thread is the only one that plugs: it is the holder.
	void plug_imm(size_t i, uint32_t imm)
	{
		Piece &p = pieces_[i];
		p.wr = SendWr{};
		p.wr.wr_cqe = &sent.cqe;
		p.wr.opcode = WrOpcode::SendWithImm;
		p.wr.imm_data = imm;
		p.wr.send_flags = SEND_SIGNALED;
		p.piece.unsent = [](PlugPiece *) { ADD_FAILURE() << "a piece was refused"; };
		post_plugged(&p.piece, &p.wr);
	}
	void close_plug_now() { close_plug(); }
	// No serialiser here: the turn's end runs the flush itself (the holder's thread).
	void post_plug_flush() override { plug_turn_ended(); }

	void on_cm_event(CmEvent &ev) override
	{
		if (ev.event == CmEventType::Established)
			established = true;
		if (ev.event == CmEventType::Disconnected) {
			disconnected = true;
			portal().schedule_close(this);
		}
	}
	void tick(clock::time_point) override {}
	void run_kicked() override {}
	bool finished() override { return true; }
	std::string describe() override { return "client_test"; }

	static constexpr size_t kPieces = 4;

	std::atomic<bool> established{false};  // ESTABLISHED came (CM thread)
	std::atomic<bool> disconnected{false}; // DISCONNECTED came (CM thread)
	Counted sent; // send_imm's and plug_imm's completions (the CQ pool's thread)

private:
	struct Piece {
		PlugPiece piece; // plug_imm's piece
		SendWr wr;       // its one WR
	};
	Piece pieces_[kPieces];
};

// Accepts with kWelcome, or rejects every request with reject_with when it is not empty.
class TestPortal final : public Portal
{
public:
	TestPortal(Provider &prov, const PortalConfig &cfg) : Portal(prov, cfg) {}
	~TestPortal() override { stop(); }

	std::vector<uint8_t> reject_with;      // set before a connect
	std::atomic<TestConn *> last{nullptr}; // the newest connection (until it is reaped)

protected:
	std::unique_ptr<PortalConn> on_connect_request(CmEvent &ev, DeviceRes &res,
	                                               ConnParam *accept,
	                                               std::vector<uint8_t> *reject) override
	{
		if (!reject_with.empty()) {
			*reject = reject_with;
			return nullptr;
		}
		auto c = std::make_unique<TestConn>(*this, std::move(ev.new_id));
		std::string why;
		if (c->make_qp(*res.pd, &why) != 0) {
			ADD_FAILURE() << "target QP: " << why;
			return nullptr;
		}
		accept->set_private_data(kWelcome);
		last = c.get();
		return c;
	}
	void accept_failed(PortalConn *c, int rc) override
	{
		ADD_FAILURE() << "accept: " << rc;
		schedule_close(c);
	}
};

// The initiator's half: a PD, a Direct CQ on a channel, the connection. Members in this
// order so that the QP (in conn) goes before the CQ and the PD.
struct Client {
	std::unique_ptr<Pd> pd;
	DirectCq cq;
	ClientConn conn;
	Counted recvs; // the receives posted at setup
	Counted sends; // post_sends'
	uint32_t nrecv = 0;

	// A zero-length receive posted per nrecv before the connect goes out.
	ClientParams params(const SockAddr &dst, clock::time_point deadline)
	{
		ClientParams p;
		p.provider = &soft::provider();
		p.dst = dst;
		p.deadline = deadline;
		p.setup = [this](CmId &id, ConnParam *cp, std::string *why) {
			pd = id.device()->alloc_pd();
			if (!pd) {
				*why = "alloc_pd";
				return -ENOMEM;
			}
			if (int rc = cq.create(*id.device(), 64, why); rc != 0)
				return rc;
			QpInitAttr qa;
			qa.send_cq = cq.cq();
			qa.recv_cq = cq.cq();
			qa.cap.max_send_wr = 16 + 1;
			qa.cap.max_recv_wr = 8 + 1;
			qa.cap.max_send_sge = 1;
			qa.cap.max_recv_sge = 1;
			if (int rc = id.create_qp(*pd, qa); rc != 0) {
				*why = "create_qp";
				return rc;
			}
			for (uint32_t i = 0; i < nrecv; i++) {
				RecvWr wr;
				wr.wr_cqe = &recvs.cqe;
				const RecvWr *bad = nullptr;
				if (int rc = id.qp()->post_recv(&wr, &bad); rc != 0) {
					*why = "post_recv";
					return rc;
				}
			}
			cp->rnr_retry_count = 7; // infinite: a send waits for the target's receive
			return 0;
		};
		return p;
	}
	int post_sends(int n)
	{
		for (int i = 0; i < n; i++) {
			SendWr wr;
			wr.wr_cqe = &sends.cqe;
			wr.opcode = WrOpcode::Send;
			wr.send_flags = SEND_SIGNALED;
			const SendWr *bad = nullptr;
			if (int rc = conn.qp()->post_send(&wr, &bad); rc != 0)
				return rc;
		}
		return 0;
	}
};

class RdmaClient : public ::testing::Test
{
protected:
	void SetUp() override
	{
		dev = soft_test::make_dev("127.0.0.61");
		ASSERT_TRUE(dev);
		PortalConfig pc;
		pc.name = "client_test";
		pc.heap_bytes = 1u << 20;
		pc.max_io = 1u << 16;
		portal = std::make_unique<TestPortal>(soft::provider(), pc);
		std::string why;
		ASSERT_EQ(portal->listen(soft_test::addr("127.0.0.61:0"), &why), 0) << why;
		ASSERT_EQ(portal->start(), 0);
		dst = soft_test::addr("127.0.0.61:" + std::to_string(portal->port()));
	}
	void TearDown() override
	{
		portal.reset();
		dev.reset();
	}

	// Bounded: the portal has freed every connection.
	bool portal_empty(std::chrono::milliseconds limit = 5s)
	{
		const auto end = clock::now() + limit;
		while (clock::now() < end) {
			if (portal->conns() == 0)
				return true;
			std::this_thread::sleep_for(5ms);
		}
		return false;
	}

	// The target's side of the connection c just made, once its ESTABLISHED has come
	// (bounded: 1 s); nullptr if it has not.
	TestConn *established()
	{
		TestConn *t = portal->last;
		for (int i = 0; t && i < 500 && !t->established; i++)
			std::this_thread::sleep_for(2ms);
		return t && t->established ? t : nullptr;
	}

	soft_test::DevPtr dev;
	std::unique_ptr<TestPortal> portal;
	SockAddr dst;
};

TEST_F(RdmaClient, NoListenerFailsWithinDeadline)
{
	// A port that was listened on and is no more. Not the fixture's ephemeral one: the
	// soft provider hands ephemeral ports out from 40000 in every process, so a test
	// running beside this one in another process can take the freed port and answer
	// (CI saw it once). Ports below 40000 are only ever given explicitly.
	std::string why;
	PortalConfig pc;
	pc.name = "client_test_gone";
	pc.heap_bytes = 1u << 20;
	pc.max_io = 1u << 16;
	auto was = std::make_unique<TestPortal>(soft::provider(), pc);
	const SockAddr gone = soft_test::addr("127.0.0.61:39061");
	ASSERT_EQ(was->listen(gone, &why), 0) << why;
	ASSERT_EQ(was->start(), 0);
	was->stop_accepting();
	Client c;
	const auto t0 = clock::now();
	CmRec reply;
	const int rc = c.conn.connect(c.params(gone, t0 + 2s), &reply, &why);
	const auto took = clock::now() - t0;
	EXPECT_LT(rc, 0);
	EXPECT_NE(rc, -ETIMEDOUT) << "an answer was due (IB: REJ), not the deadline";
	EXPECT_LT(took, 2s + 200ms);
	EXPECT_NE(why.find("connect " + gone.str()), std::string::npos) << why;
	EXPECT_EQ(c.conn.state(), ClientState::Stopped);
	EXPECT_EQ(c.conn.drain(1s), 0);
}

TEST_F(RdmaClient, SilentPeerTimesOutAtDeadline)
{
	// A listener that takes each request and never answers it.
	std::mutex lock;
	std::vector<std::unique_ptr<CmId>> held;
	auto listener = soft::provider().create_id(
	    [&](CmId *, CmEvent &ev) {
		    if (ev.event == CmEventType::ConnectRequest && ev.new_id) {
			    std::lock_guard g(lock);
			    held.push_back(std::move(ev.new_id));
		    }
	    },
	    nullptr);
	ASSERT_TRUE(listener);
	ASSERT_EQ(listener->bind_addr(soft_test::addr("127.0.0.61:0")), 0);
	ASSERT_EQ(listener->listen(4), 0);
	{
		Client c;
		std::string why;
		CmRec reply;
		const auto t0 = clock::now();
		const int rc =
		    c.conn.connect(c.params(listener->local_addr(), t0 + 300ms), &reply, &why);
		const auto took = clock::now() - t0;
		EXPECT_EQ(rc, -ETIMEDOUT) << why;
		EXPECT_GE(took, 290ms);
		EXPECT_LT(took, 300ms + 500ms);
		EXPECT_NE(why.find("in time"), std::string::npos) << why;
		EXPECT_EQ(c.conn.drain(1s), 0);
	}
	std::lock_guard g(lock);
	EXPECT_EQ(held.size(), 1u);
	held.clear();
}

TEST_F(RdmaClient, ConnectAndDisconnect)
{
	Client c;
	std::string why;
	CmRec reply;
	ASSERT_EQ(c.conn.connect(c.params(dst, clock::now() + 5s), &reply, &why), 0) << why;
	EXPECT_EQ(c.conn.state(), ClientState::Up);
	EXPECT_EQ(reply.type, CmEventType::Established);
	EXPECT_EQ(std::vector<uint8_t>(reply.param.pdata().begin(),
	                               reply.param.pdata().begin() + kWelcome.size()),
	          kWelcome);
	TestConn *t = portal->last;
	ASSERT_NE(t, nullptr);
	for (int i = 0; i < 500 && !t->established; i++)
		std::this_thread::sleep_for(2ms);
	EXPECT_TRUE(t->established);
	EXPECT_EQ(portal->conns(), 1u);
	EXPECT_EQ(c.conn.drain(1s), 0);
	EXPECT_EQ(c.conn.state(), ClientState::Drained);
	EXPECT_TRUE(portal_empty()) << "the target never saw the disconnect";
	c.conn.release();
	EXPECT_EQ(c.conn.qp(), nullptr);
}

TEST_F(RdmaClient, RejectCarriesPrivateData)
{
	portal->reject_with = kNoThanks;
	Client c;
	std::string why;
	CmRec reply;
	const int rc = c.conn.connect(c.params(dst, clock::now() + 5s), &reply, &why);
	EXPECT_EQ(rc, -ECONNREFUSED) << why;
	EXPECT_EQ(reply.type, CmEventType::Rejected);
	ASSERT_GE(reply.param.pdata().size(), kNoThanks.size());
	EXPECT_EQ(std::vector<uint8_t>(reply.param.pdata().begin(),
	                               reply.param.pdata().begin() + kNoThanks.size()),
	          kNoThanks);
	EXPECT_NE(why.find("rejected"), std::string::npos) << why;
	EXPECT_EQ(portal->rejected(), 1u);
	EXPECT_EQ(c.conn.drain(1s), 0);
}

// The before-DISCONNECTED rule: the target sends, then disconnects; the owner looks at
// its CM events only (not the CQ) and still sees the message before the disconnect.
TEST_F(RdmaClient, WhatCameBeforeDisconnectIsReapedFirst)
{
	Client c;
	c.nrecv = 4;
	std::string why;
	CmRec reply;
	ASSERT_EQ(c.conn.connect(c.params(dst, clock::now() + 5s), &reply, &why), 0) << why;
	TestConn *t = established();
	ASSERT_NE(t, nullptr) << "the target's side never saw ESTABLISHED";
	ASSERT_EQ(t->send_imm(0xfeed), 0);
	for (int i = 0; i < 500 && t->sent.ok == 0; i++)
		std::this_thread::sleep_for(2ms);
	ASSERT_EQ(t->sent.ok, 1) << "the target's SEND never completed";
	ASSERT_EQ(t->id().disconnect(), 0);

	ClientConn *const conns[] = {&c.conn};
	std::optional<std::string> gone;
	int reaps = 0;
	const auto end = clock::now() + 5s;
	while (!gone && clock::now() < end) {
		// Sleep on the CM mailbox only: the CQ is left alone until the disconnect.
		ASSERT_GE(wait_events(
		              nullptr, conns, 100, [] { return 0; }, &why),
		          0)
		    << why;
		gone = c.conn.take_events([&] {
			reaps++;
			return c.cq.process() > 0;
		});
	}
	ASSERT_TRUE(gone) << "no DISCONNECTED within 5 s";
	EXPECT_EQ(*gone, "the target disconnected");
	EXPECT_GE(reaps, 1);
	EXPECT_EQ(c.recvs.ok, 1) << "the message sent before the disconnect was not reaped";
	EXPECT_EQ(c.recvs.imm, 0xfeedu);
	// The other three receives come back flushed.
	EXPECT_EQ(c.conn.drain(1s), 0);
	EXPECT_EQ(c.recvs.flushed, 3);
	EXPECT_EQ(c.recvs.other, 0);
	EXPECT_TRUE(portal_empty());
}

// A connection's send plug (rdma_conn/send_plug.h) holds what a turn (core/turn.h) plugs
// until the turn ends; a close posts what it holds, and from then on a piece goes out at once,
// even while the turn's flush is still due: that flush may run only after the portal has
// drained the QP, and nothing would flush what it posted then.
TEST_F(RdmaClient, APlugOnceClosedPostsAtOnce)
{
	Client c;
	c.nrecv = 4;
	std::string why;
	CmRec reply;
	ASSERT_EQ(c.conn.connect(c.params(dst, clock::now() + 5s), &reply, &why), 0) << why;
	TestConn *t = established();
	ASSERT_NE(t, nullptr) << "the target's side never saw ESTABLISHED";
	auto posts = [&] { return soft::qp_counters(*t->qp()).post_sends; };
	const uint64_t p0 = posts();
	{
		TurnScope turn;
		t->plug_imm(0, 1);
		t->plug_imm(1, 2);
		EXPECT_EQ(posts(), p0) << "posted before the turn's end";
		t->close_plug_now();
		EXPECT_EQ(posts(), p0 + 1) << "the close posts what the plug holds, as one chain";
		t->plug_imm(2, 3);
		EXPECT_EQ(posts(), p0 + 2) << "held after the close, for a flush still due";
	}
	EXPECT_EQ(posts(), p0 + 2);
	for (int i = 0; i < 500 && t->sent.ok < 3; i++)
		std::this_thread::sleep_for(2ms);
	EXPECT_EQ(t->sent.ok, 3);
	EXPECT_EQ(t->sent.flushed + t->sent.other, 0);
	for (int i = 0; i < 500 && c.recvs.ok < 3; i++) {
		c.cq.process();
		std::this_thread::sleep_for(2ms);
	}
	EXPECT_EQ(c.recvs.ok, 3);
	EXPECT_EQ(c.conn.drain(1s), 0);
	EXPECT_TRUE(portal_empty());
}

// The target posts no receive: the client's SENDs wait in RNR retry until close moves the
// QP to ERR, and every one of them completes flushed before close returns.
TEST_F(RdmaClient, CloseFlushesOutstandingSends)
{
	Client c;
	std::string why;
	CmRec reply;
	ASSERT_EQ(c.conn.connect(c.params(dst, clock::now() + 5s), &reply, &why), 0) << why;
	constexpr int kSends = 12;
	ASSERT_EQ(c.post_sends(kSends), 0);
	std::this_thread::sleep_for(20ms);
	EXPECT_EQ(c.cq.process(), 0) << "a SEND completed with no receive posted";
	EXPECT_EQ(c.conn.drain(2s), 0);
	EXPECT_EQ(c.conn.state(), ClientState::Drained);
	EXPECT_EQ(c.sends.flushed, kSends);
	EXPECT_EQ(c.sends.ok + c.sends.other, 0);
	EXPECT_TRUE(portal_empty());
}

} // namespace
} // namespace ulp::rdma
