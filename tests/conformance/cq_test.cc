// SPDX-License-Identifier: MIT
// CQ overflow and completion channels.
#include "tests/conformance/fixture.h"

#include <poll.h>

#include <cerrno>
#include <mutex>

namespace ulp::conf
{
namespace
{

// A QP in ERR on the local device: every receive posted to it completes at once with
// WR_FLUSH_ERR, which makes completions on demand without a peer.
struct Flusher {
	std::unique_ptr<Pd> pd;
	std::unique_ptr<Qp> qp;
	Cqe cqe;

	void make(Device &dev, Cq *cq, uint32_t recv_wr)
	{
		pd = dev.alloc_pd();
		ASSERT_TRUE(pd);
		QpInitAttr qa;
		qa.send_cq = cq;
		qa.recv_cq = cq;
		qa.cap.max_send_wr = 4;
		qa.cap.max_recv_wr = recv_wr;
		qa.cap.max_send_sge = 1;
		qa.cap.max_recv_sge = 1;
		qp = pd->create_qp(qa);
		ASSERT_TRUE(qp) << "create_qp: " << strerror(errno);
		QpAttr a;
		a.qp_state = QpState::Init;
		a.port_num = 1;
		ASSERT_EQ(qp->modify(a, QP_STATE | QP_PORT | QP_ACCESS_FLAGS), 0);
	}
	void to_err()
	{
		QpAttr a;
		a.qp_state = QpState::Err;
		ASSERT_EQ(qp->modify(a, QP_STATE), 0);
	}
	int post(int n)
	{
		for (int i = 0; i < n; i++) {
			RecvWr wr;
			wr.wr_cqe = &cqe;
			const RecvWr *bad = nullptr;
			if (int err = qp->post_recv(&wr, &bad))
				return err;
		}
		return 0;
	}
	~Flusher()
	{
		qp.reset();
		pd.reset();
	}
};

int drain(Cq &cq, int want, int ms = kTimeoutMs)
{
	auto d = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
	int got = 0;
	Wc wc[16];
	while (got < want && std::chrono::steady_clock::now() < d) {
		progress_all();
		int r = cq.poll(wc);
		got += r;
		if (!r)
			std::this_thread::sleep_for(std::chrono::microseconds(200));
	}
	return got;
}

// IB spec 11.4.2.1 (CQ overrun): more completions than the CQ holds is a CQ
// error; the consumer learns of it through the affiliated asynchronous event CQ_ERR
// (Linux IB_EVENT_CQ_ERR on the CQ's event handler).
TEST_P(ConformanceLocal, CqOverflowRaisesCqErr)
{
	OPEN_LOCAL();
	std::mutex m;
	std::vector<AsyncEvent> events;
	CqInitAttr ca;
	ca.cqe = 4;
	ca.event_handler = [&](const AsyncEvent &ev) {
		std::lock_guard g(m);
		events.push_back(ev);
	};
	auto cq = dev().create_cq(ca);
	ASSERT_TRUE(cq);
	ASSERT_GE(cq->cqe(), 4);
	const int cap = cq->cqe();
	if (uint32_t(cap + 4) > dev().attr().max_qp_wr)
		GTEST_SKIP() << "CQ of " << cap << " cannot be overrun by one QP";
	{
		Flusher f;
		ASSERT_NO_FATAL_FAILURE(f.make(dev(), cq.get(), uint32_t(cap + 4)));
		ASSERT_EQ(f.post(cap + 2), 0);
		ASSERT_NO_FATAL_FAILURE(f.to_err());
		bool seen = false;
		auto d = std::chrono::steady_clock::now() + std::chrono::milliseconds(kTimeoutMs);
		while (!seen && std::chrono::steady_clock::now() < d) {
			progress_all();
			std::lock_guard g(m);
			for (auto &ev : events)
				seen |= ev.event == EventType::CqErr && ev.cq == cq.get();
			if (!seen)
				std::this_thread::sleep_for(std::chrono::milliseconds(1));
		}
		EXPECT_TRUE(seen) << "no CQ_ERR after " << cap + 2 << " completions into " << cap
		                  << " entries";
	}
}

// IB spec 11.4.2.2 (Request Completion Notification) and libibverbs ibv_req_notify_cq():
// no event without an arming; an armed CQ raises exactly one event for the next
// completion, then stays quiet until armed again. get_cq_event times out with -EAGAIN; the
// channel fd is readable exactly while an event is pending.
TEST_P(ConformanceLocal, CompletionChannelArming)
{
	OPEN_LOCAL();
	auto ch = dev().create_comp_channel();
	ASSERT_TRUE(ch);
	CqInitAttr ca;
	ca.cqe = 64;
	ca.channel = ch.get();
	auto cq = dev().create_cq(ca);
	ASSERT_TRUE(cq);
	EXPECT_EQ(cq->channel(), ch.get());
	{
		Flusher f;
		ASSERT_NO_FATAL_FAILURE(f.make(dev(), cq.get(), 16));
		ASSERT_NO_FATAL_FAILURE(f.to_err());
		Cq *got = nullptr;

		// Not armed: completions, but no event.
		ASSERT_EQ(f.post(1), 0);
		ASSERT_EQ(drain(*cq, 1), 1);
		EXPECT_EQ(ch->get_cq_event(&got, 100), -EAGAIN) << "event without req_notify";
		EXPECT_EQ(ch->get_cq_event(&got, 0), -EAGAIN);

		// Armed: one event for two completions.
		ASSERT_EQ(cq->req_notify(CqNotify::NextComp), 0);
		ASSERT_EQ(f.post(2), 0);
		pollfd p{ch->fd(), POLLIN, 0};
		int r = 0;
		for (int i = 0; i < kTimeoutMs && r == 0; i += 10) {
			progress_all();
			r = ::poll(&p, 1, 10);
		}
		EXPECT_EQ(r, 1) << "channel fd not readable with an event pending";
		ASSERT_EQ(ch->get_cq_event(&got, kTimeoutMs), 0);
		EXPECT_EQ(got, cq.get());
		p.revents = 0;
		EXPECT_EQ(::poll(&p, 1, 0), 0) << "fd still readable after the event was taken";
		EXPECT_EQ(ch->get_cq_event(&got, 100), -EAGAIN) << "two events for one arming";
		EXPECT_EQ(drain(*cq, 2), 2);

		// Completions after the event, before re-arming: no event.
		ASSERT_EQ(f.post(1), 0);
		ASSERT_EQ(drain(*cq, 1), 1);
		EXPECT_EQ(ch->get_cq_event(&got, 100), -EAGAIN);

		// Re-armed: the next completion raises a new event.
		ASSERT_EQ(cq->req_notify(CqNotify::NextComp), 0);
		ASSERT_EQ(f.post(1), 0);
		ASSERT_EQ(ch->get_cq_event(&got, kTimeoutMs), 0);
		EXPECT_EQ(got, cq.get());
		EXPECT_EQ(drain(*cq, 1), 1);
	}
}

// IB spec 11.4.2.2: an arming for SOLICITED raises an event only for a completion of a
// message with the solicited event bit (or an error completion); an ordinary receive does
// not.
TEST_P(Conformance, SolicitedArming)
{
	EpConfig lc;
	lc.channel = true;
	CONNECT(lc, EpConfig{});
	auto lm = local().reg_mr(4096, ACCESS_LOCAL_WRITE);
	auto pm = peer().reg_mr(4096, ACCESS_LOCAL_WRITE);
	ASSERT_EQ(local().post_recv(lm.id, 0, 1024, 2, 80), 0);
	CompChannel *ch = local().channel();
	Cq *rcq = local().recv_cq();
	ASSERT_EQ(rcq->req_notify(CqNotify::Solicited), 0);

	ASSERT_EQ(peer().post_send(send_op(WrOpcode::Send, 1, pm.id, 0, 16)), 0);
	auto lw = local_wcs(1);
	ASSERT_EQ(lw.size(), 1u);
	EXPECT_EQ(lw[0].status, WcStatus::Success);
	Cq *got = nullptr;
	EXPECT_EQ(ch->get_cq_event(&got, 100), -EAGAIN) << "event for an unsolicited SEND";

	PostSend s = send_op(WrOpcode::Send, 2, pm.id, 0, 16);
	s.flags |= SEND_SOLICITED;
	ASSERT_EQ(peer().post_send(s), 0);
	int r = -1;
	for (int i = 0; i < kTimeoutMs / 10 && r != 0; i++) {
		progress_all();
		r = ch->get_cq_event(&got, 10);
	}
	ASSERT_EQ(r, 0) << "no event for a solicited SEND";
	EXPECT_EQ(got, rcq);
	lw = local_wcs(1);
	ASSERT_EQ(lw.size(), 1u);
	EXPECT_EQ(lw[0].wr_id, 81u);
	auto pw = peer_wcs(2);
	EXPECT_EQ(pw.size(), 2u);
}

} // namespace
} // namespace ulp::conf
