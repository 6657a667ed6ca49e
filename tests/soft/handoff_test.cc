// SPDX-License-Identifier: MIT
// tests/soft/handoff_test.cc - ring doorbells taken by the consumer's channel (cq.cc): a
// ring-wire QP whose receive CQ is armed is run by the thread that waits on that CQ's
// channel, and its engine stays asleep; a consumer that armed its CQ and then never looks
// at its channel still has its peer's READs and SENDs done (the engine's watchdog); and a
// connection torn down while its consumer serves it leaves nothing behind.
//
// Between two devices of this process on the ring wire (Wire::Shm: the same rings and
// doorbells as across processes), one engine each, engines that sleep as soon as they are
// idle (ULP_SOFT_SPIN_US=0: a spinning engine sees the peer's work before any doorbell).
#include "soft_test_util.h"
#include "threads_util.h"

#include <poll.h>

#include <atomic>
#include <mutex>
#include <thread>

using namespace ulp;
using namespace soft_test;

namespace
{

DevPtr shm_dev(const std::string &ip)
{
	soft::DeviceConfig c;
	c.ip = ip;
	c.wire = soft::Wire::Shm;
	return DevPtr(soft::create_device(c));
}

// a (active) and b (passive) connected on the ring wire; b's receive CQ has a channel.
// Destroyed in reverse: the connection, the sides and their CQs, the channel, the devices.
struct Rig {
	DevPtr da, db;
	std::unique_ptr<CompChannel> ch; // b's receive CQ's
	Side a, b;
	std::unique_ptr<CmPair> cm = std::make_unique<CmPair>(); // owns both QPs
	pid_t b_engine = 0;                                      // b's device's one engine thread

	// handoff: ULP_SOFT_HANDOFF for both devices' engines; spin_us: ULP_SOFT_SPIN_US.
	void init(const char *handoff, const char *spin_us = "0")
	{
		ScopedEnv spin("ULP_SOFT_SPIN_US", spin_us);
		ScopedEnv ho("ULP_SOFT_HANDOFF", handoff);
		ScopedEnv engines("ULP_SOFT_ENGINES", "1");
		// a's engine named first, so that b's is the one new thread after it.
		const auto before_a = engine_tids();
		da = shm_dev("127.0.0.81");
		ASSERT_TRUE(da);
		ASSERT_NE(new_engine_tid(before_a), 0);
		const auto before = engine_tids();
		db = shm_dev("127.0.0.82");
		ASSERT_TRUE(db);
		b_engine = new_engine_tid(before);
		ASSERT_NE(b_engine, 0);
		ASSERT_NO_FATAL_FAILURE(a.init(*da));
		ASSERT_NO_FATAL_FAILURE(b.init(*db));
		ch = db->create_comp_channel();
		ASSERT_TRUE(ch);
		CqInitAttr ca;
		ca.cqe = 256;
		ca.channel = ch.get();
		b.rcq = db->create_cq(ca);
		ASSERT_TRUE(b.rcq);
		cm->active = &a;
		cm->passive = &b;
		ASSERT_TRUE(cm->connect("127.0.0.82:0", "127.0.0.81"));
		ASSERT_STREQ(soft::qp_wire(*a.qp), "shm");
		ASSERT_STREQ(soft::qp_wire(*b.qp), "shm");
	}

	// b sleeps on its channel until an event of its receive CQ comes: true, or false after
	// kWait.
	bool wait_event()
	{
		Cq *got = nullptr;
		for (auto until = Clock::now() + kWait; Clock::now() < until;) {
			pollfd p{ch->fd(), POLLIN, 0};
			if (::poll(&p, 1, 100) < 0)
				return false;
			if (ch->get_cq_event(&got, 0) == 0)
				return got == b.rcq.get();
		}
		return false;
	}
};

constexpr int kRecvs = 32; // receives b keeps posted

// Stops and joins a test's helper thread when the test leaves, on any way out.
struct Joiner {
	std::atomic<bool> &stop; // the thread's loop condition
	std::thread &t;
	~Joiner()
	{
		stop = true;
		t.join();
	}
};

} // namespace

class SoftHandoff : public ::testing::TestWithParam<bool> // true: ULP_SOFT_HANDOFF on
{
};

// b arms its receive CQ and sleeps on its channel; a sends; b wakes, takes the event and
// the receive; all is idle for a moment. With the hand-off the doorbell of each send wakes
// b's waiter, which runs the QP: b's engine sleeps through it (its watchdog's few wakes at
// most: 1 ms, doubling while it finds nothing), and the waiter takes the event it raised
// without a system call on the channel's eventfd. Without it (the control, which shows that
// the measures see them), b's engine wakes for every send and signals the channel.
TEST_P(SoftHandoff, ConsumerOnItsChannelRunsThePeersSends)
{
	Rig r;
	ASSERT_NO_FATAL_FAILURE(r.init(GetParam() ? "1" : "0"));
	std::vector<Cqe> rcqe(kRecvs);
	for (int i = 0; i < kRecvs; i++)
		ASSERT_EQ(post_recv(*r.b.qp, &rcqe[i], r.b.sge(64u * i, 64)), 0);
	constexpr int kMsgs = 200;
	Cqe scqe;
	const soft::ChannelCounters ch0 = soft::channel_counters(*r.ch);
	const long before = voluntary_switches(r.b_engine);
	ASSERT_GE(before, 0);
	for (int i = 0; i < kMsgs; i++) {
		SCOPED_TRACE(i);
		// Idle a while first: b's engine sleeps before each send (a slow build, ASan's,
		// otherwise keeps it busy from one send to the next, and no doorbell rings).
		std::this_thread::sleep_for(std::chrono::microseconds(500));
		ASSERT_EQ(r.b.rcq->req_notify(CqNotify::NextComp), 0);
		ASSERT_EQ(post_send(*r.a.qp, &scqe, r.a.sge(0, 64)), 0);
		ASSERT_TRUE(r.wait_event()) << "no receive event on b's channel";
		auto wc = poll_n(*r.b.rcq, 1);
		ASSERT_EQ(wc.size(), 1u);
		ASSERT_EQ(wc[0].status, WcStatus::Success);
		ASSERT_EQ(post_recv(*r.b.qp, wc[0].wr_cqe, r.b.sge(0, 64)), 0);
		ASSERT_EQ(poll_n(*r.a.scq, 1).size(), 1u);
	}
	const long wakes = voluntary_switches(r.b_engine) - before;
	// The channel's eventfd: b's waiter takes the events it raised itself with no write
	// or read of it; an engine's event is written and read (the watchdog's few, or each).
	const soft::ChannelCounters ch1 = soft::channel_counters(*r.ch);
	const uint64_t fd_calls = (ch1.fd_writes - ch0.fd_writes) + (ch1.fd_reads - ch0.fd_reads);
	if (GetParam()) {
		EXPECT_LT(wakes, kMsgs / 4) << "b's engine woke for its peer's sends";
		EXPECT_LT(fd_calls, uint64_t{kMsgs / 4}) << "b's waiter signalled itself";
	} else {
		EXPECT_GE(wakes, kMsgs / 2) << "without the hand-off b's engine should wake for "
		                               "each send";
		EXPECT_GE(fd_calls, uint64_t{kMsgs})
		    << "the engine's events should go through the fd";
	}
}

INSTANTIATE_TEST_SUITE_P(Soft, SoftHandoff, ::testing::Bool(),
                         [](const auto &info) { return info.param ? "On" : "Off"; });

// b arms its receive CQ and never looks at its channel (blocked elsewhere). a's READs of
// b's memory and WRITEs into it, which complete nothing at b, still complete, and so does
// a's send into b's receive, whose event is waiting when b looks at last.
TEST(SoftHandoffWatchdog, ArmedConsumerThatNeverWaitsStillHasItsPeerServed)
{
	Rig r;
	ASSERT_NO_FATAL_FAILURE(r.init("1"));
	Cqe rcqe;
	ASSERT_EQ(post_recv(*r.b.qp, &rcqe, r.b.sge(0, 64)), 0);
	ASSERT_EQ(r.b.rcq->req_notify(CqNotify::NextComp), 0);
	std::memset(r.b.buf.data() + 4096, 0x5a, 4096);
	Cqe c;
	for (int i = 0; i < 20; i++) {
		SCOPED_TRACE(i);
		ASSERT_EQ(post_rdma(*r.a.qp, &c, r.a.sge(8192, 4096), WrOpcode::RdmaRead,
		                    r.b.at(4096), r.b.mr->rkey()),
		          0);
		auto wc = poll_n(*r.a.scq, 1);
		ASSERT_EQ(wc.size(), 1u) << "a's READ of b never completed";
		ASSERT_EQ(wc[0].status, WcStatus::Success);
		ASSERT_EQ(r.a.buf[8192 + i], 0x5a);
		r.a.buf[8192 + i] = static_cast<uint8_t>(i);
		ASSERT_EQ(post_rdma(*r.a.qp, &c, r.a.sge(8192, 4096), WrOpcode::RdmaWrite,
		                    r.b.at(16384), r.b.mr->rkey()),
		          0);
		wc = poll_n(*r.a.scq, 1);
		ASSERT_EQ(wc.size(), 1u) << "a's WRITE into b never completed";
		ASSERT_EQ(wc[0].status, WcStatus::Success);
		EXPECT_EQ(r.b.buf[16384 + i], static_cast<uint8_t>(i));
	}
	ASSERT_EQ(post_send(*r.a.qp, &c, r.a.sge(0, 64)), 0);
	ASSERT_EQ(poll_n(*r.a.scq, 1).size(), 1u) << "a's send into b never completed";
	ASSERT_TRUE(r.wait_event());
	EXPECT_EQ(poll_n(*r.b.rcq, 1).size(), 1u);
}

// b's waiter serves its channel on a thread of its own while a streams sends at it; the
// connection goes away under that (b's QP destroyed, then a's), and the waiter goes on
// waiting on the channel, which no longer holds the doorbell. Then the waiter stops and
// everything is freed (ASan/TSan runs of this suite check the teardown).
TEST(SoftHandoffTeardown, ConnectionDestroyedWhileItsWaiterServesIt)
{
	Rig r;
	ASSERT_NO_FATAL_FAILURE(r.init("1"));
	std::vector<Cqe> rcqe(kRecvs);
	for (int i = 0; i < kRecvs; i++)
		ASSERT_EQ(post_recv(*r.b.qp, &rcqe[i], r.b.sge(64u * i, 64)), 0);
	std::atomic<bool> stop{false};
	std::atomic<int> received{0};
	std::mutex qp_lock; // b's QP while the waiter reposts to it
	Qp *bqp = r.b.qp;   // null once it is being destroyed (qp_lock)
	std::thread waiter([&] {
		Wc wc[16];
		while (!stop.load()) {
			(void)r.b.rcq->req_notify(CqNotify::NextComp);
			Cq *got = nullptr;
			(void)r.ch->get_cq_event(&got, 5);
			int n;
			while ((n = r.b.rcq->poll(wc)) > 0) {
				std::lock_guard g(qp_lock);
				for (int i = 0; i < n; i++) {
					if (wc[i].status != WcStatus::Success)
						continue;
					received++;
					if (bqp)
						(void)post_recv(*bqp, wc[i].wr_cqe, r.b.sge(0, 64));
				}
			}
		}
	});
	Joiner joiner{stop, waiter}; // on every way out of the test, before the rig goes
	Cqe c;
	int sent = 0;
	for (; sent < 300; sent++) {
		ASSERT_EQ(post_send(*r.a.qp, &c, r.a.sge(0, 64), WrOpcode::Send, 0), 0);
		if (sent % 16 == 15) { // signaled now and then: the send queue's slots back
			ASSERT_EQ(post_send(*r.a.qp, &c, r.a.sge(0, 64)), 0);
			ASSERT_EQ(poll_n(*r.a.scq, 1).size(), 1u);
			sent++;
		}
	}
	for (auto until = Clock::now() + kWait; received.load() < sent && Clock::now() < until;)
		std::this_thread::sleep_for(std::chrono::milliseconds(1));
	EXPECT_EQ(received.load(), sent) << "b's waiter did not receive every send";
	// Both QPs go (their CM ids own them) while the waiter still serves the channel.
	{
		std::lock_guard g(qp_lock);
		bqp = nullptr;
	}
	r.cm.reset();
	std::this_thread::sleep_for(std::chrono::milliseconds(20));
}

// b's consumer arms its receive CQ over and over on a thread of its own while connections
// come and go on it: each arming looks up the CQ's handed connections and tells their
// engines, which must never touch a connection that left meanwhile. b's engine spins
// between turns (ULP_SOFT_SPIN_US), so an arming finds it awake and takes no engine lock
// that would order it before the teardown: under TSan, a connection read after the
// channel's lock and freed by the teardown is reported (it was, in ulp-targetd, whose
// poller arms the CQ that all its connections share).
TEST(SoftHandoffTeardown, ArmingRacesTheConnectionsGoing)
{
	Rig r;
	ASSERT_NO_FATAL_FAILURE(r.init("1", "200000"));
	r.cm.reset(); // connected below, again and again
	std::atomic<bool> stop{false};
	std::atomic<long> arms{0};
	std::thread armer([&] {
		while (!stop.load()) {
			(void)r.b.rcq->req_notify(CqNotify::NextComp);
			arms++;
			std::this_thread::sleep_for(std::chrono::microseconds(50));
		}
	});
	Joiner joiner{stop, armer};
	Cqe rc, sc;
	for (int i = 0; i < 60; i++) {
		SCOPED_TRACE(i);
		auto cm = std::make_unique<CmPair>();
		cm->active = &r.a;
		cm->passive = &r.b;
		ASSERT_TRUE(cm->connect("127.0.0.82:0", "127.0.0.81"));
		ASSERT_STREQ(soft::qp_wire(*r.b.qp), "shm");
		ASSERT_EQ(post_recv(*r.b.qp, &rc, r.b.sge(0, 64)), 0);
		ASSERT_EQ(post_send(*r.a.qp, &sc, r.a.sge(0, 64)), 0);
		ASSERT_EQ(poll_n(*r.a.scq, 1).size(), 1u);
		ASSERT_EQ(poll_n(*r.b.rcq, 1).size(), 1u);
		const long seen = arms.load();
		for (auto until = Clock::now() + kWait;
		     arms.load() < seen + 3 && Clock::now() < until;)
			std::this_thread::sleep_for(std::chrono::microseconds(100));
		cm.reset(); // both QPs and their connections go, the armer still arming
	}
	EXPECT_GT(arms.load(), 60) << "the armer never ran";
}
