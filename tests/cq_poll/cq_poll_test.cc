// SPDX-License-Identifier: MIT
// tests/cq_poll - the completion framework on soft devices, or on the one device that
// ULP_TEST_DEVICE names (tests/common/test_device.h; rxe0 in tools/vm).
//
// Completions come from zero-length signaled RDMA WRITEs on a connected pair (a real
// transport: the soft provider, or rxe). Every wait is bounded and fails the test on
// timeout.
#include "core/turn.h"
#include "cq_poll/cq_poll.h"
#include "cq_poll/dim.h"
#include "tests/soft/soft_test_util.h"

#include <poll.h>

#include <atomic>
#include <functional>
#include <set>
#include <thread>

namespace
{

using namespace soft_test;
using ulp::PollCtx;
using ulp::soft::Exec;

constexpr auto kLong = 20s; // bound of a whole stream (sanitizers are slow)

// What done() callbacks observed for one CQ.
struct Rec {
	std::mutex lock;
	std::vector<int> order;            // idx in dispatch order (lock)
	std::set<std::thread::id> threads; // threads that ran done() (lock)
	std::atomic<int> n{0};             // completions dispatched
	std::atomic<int> errors{0};        // non-success statuses
	std::atomic<bool> in_progress{false};
	std::atomic<int> overlaps{0};   // done() ran on two threads at once
	std::atomic<bool> freed{false}; // the CQ has been freed: no callback may follow
	std::atomic<int> after_free{0}; // callbacks seen after freed
	int spin_us = 0;                // work per completion
};

struct Ctx {
	ulp::Cqe cqe; // the WC's wr_cqe points here (container_of)
	Rec *rec = nullptr;
	int idx = 0;
};

void on_done(ulp::Cq *, ulp::Wc *wc)
{
	auto *c = container_of(wc->wr_cqe, &Ctx::cqe);
	Rec &r = *c->rec;
	if (r.freed.load())
		r.after_free++;
	if (r.in_progress.exchange(true))
		r.overlaps++;
	if (wc->status != ulp::WcStatus::Success)
		r.errors++;
	{
		std::lock_guard g(r.lock);
		r.order.push_back(c->idx);
		r.threads.insert(std::this_thread::get_id());
	}
	if (r.spin_us) {
		auto until = Clock::now() + std::chrono::microseconds(r.spin_us);
		while (Clock::now() < until) {
		}
	}
	r.in_progress.store(false);
	r.n++;
}

std::vector<Ctx> make_ctxs(Rec &r, int n)
{
	std::vector<Ctx> v(static_cast<size_t>(n));
	for (int i = 0; i < n; i++) {
		v[static_cast<size_t>(i)].cqe.done = on_done;
		v[static_cast<size_t>(i)].rec = &r;
		v[static_cast<size_t>(i)].idx = i;
	}
	return v;
}

// Two soft devices (or ULP_TEST_DEVICE for both) and QP pairs whose requester send CQ is
// the one under test.
struct Rig {
	DevPtr da, db;
	std::unique_ptr<ulp::Pd> pa, pb;
	std::unique_ptr<ulp::Cq> other_a, other_b; // plain CQs for the rest
	std::vector<std::unique_ptr<ulp::Qp>> qa, qb;

	// clear_caps: DEVICE_* bits device a withholds (soft::DeviceConfig::clear_cap_flags).
	// On ULP_TEST_DEVICE only bits the device does not have anyway may be named.
	bool init(Exec exec, uint64_t clear_caps = 0)
	{
		if (ulp::test::on_test_device()) {
			da = make_dev("127.0.0.1", exec);
			if (da && (da->attr().device_cap_flags & clear_caps)) {
				ADD_FAILURE() << "cannot withhold capabilities of " << da->name();
				return false;
			}
		} else {
			ulp::soft::DeviceConfig c;
			c.ip = "127.0.0.1";
			c.exec = exec;
			c.clear_cap_flags = clear_caps;
			da = DevPtr(ulp::soft::create_device(c));
		}
		db = make_dev("127.0.0.2", exec);
		if (!da || !db)
			return false;
		pa = da->alloc_pd();
		pb = db->alloc_pd();
		ulp::CqInitAttr ca;
		ca.cqe = 64;
		other_a = da->create_cq(ca);
		other_b = db->create_cq(ca);
		return pa && pb && other_a && other_b;
	}

	// A connected pair whose requester sends complete on scq. Returns its index.
	int add_qp(ulp::Cq *scq, uint32_t depth = 64)
	{
		ulp::QpInitAttr a;
		a.send_cq = scq;
		a.recv_cq = other_a.get();
		a.cap.max_send_wr = depth;
		a.cap.max_recv_wr = 4;
		a.cap.max_send_sge = 1;
		a.cap.max_recv_sge = 1;
		auto q1 = pa->create_qp(a);
		a.send_cq = other_b.get();
		a.recv_cq = other_b.get();
		auto q2 = pb->create_qp(a);
		if (!q1 || !q2)
			return -1;
		if (connect_qp(*q1, *db, q2->qp_num()) || connect_qp(*q2, *da, q1->qp_num()))
			return -1;
		qa.push_back(std::move(q1));
		qb.push_back(std::move(q2));
		return static_cast<int>(qa.size()) - 1;
	}

	int write0(int qi, ulp::Cqe *cqe, uint32_t flags = ulp::SEND_SIGNALED)
	{
		return post_rdma(*qa[static_cast<size_t>(qi)], cqe, ulp::Sge{0, 0, 0},
		                 ulp::WrOpcode::RdmaWrite, 0, 0, flags);
	}

	~Rig()
	{
		qa.clear();
		qb.clear();
	}
};

// Wait for pred, calling pump (the owner's processing for Direct/BusyPoll) meanwhile.
bool wait_for(const std::function<bool()> &pred, const std::function<void()> &pump,
              std::chrono::milliseconds timeout = kWait)
{
	auto until = Clock::now() + timeout;
	while (!pred()) {
		if (Clock::now() > until)
			return false;
		if (pump)
			pump();
		else
			std::this_thread::sleep_for(50us);
	}
	return true;
}

// Post n WRITEs on queue qi, at most depth outstanding, until every one is dispatched.
bool stream(Rig &rig, int qi, std::vector<Ctx> &ctxs, Rec &rec, int depth,
            const std::function<void()> &pump, std::chrono::milliseconds timeout = kLong)
{
	auto until = Clock::now() + timeout;
	int posted = 0;
	const int n = static_cast<int>(ctxs.size());
	while (rec.n.load() < n) {
		if (Clock::now() > until) {
			ADD_FAILURE() << "stream: " << rec.n.load() << " of " << n
			              << " dispatched after " << timeout.count() << " ms";
			return false;
		}
		if (posted < n && posted - rec.n.load() < depth) {
			int rc = rig.write0(qi, &ctxs[static_cast<size_t>(posted)].cqe);
			if (rc) {
				ADD_FAILURE() << "post " << posted << ": " << rc;
				return false;
			}
			posted++;
			continue;
		}
		if (pump)
			pump();
		else
			std::this_thread::yield();
	}
	return true;
}

void expect_in_order(Rec &rec, int n)
{
	std::lock_guard g(rec.lock);
	ASSERT_EQ(static_cast<int>(rec.order.size()), n);
	for (int i = 0; i < n; i++)
		if (rec.order[static_cast<size_t>(i)] != i) {
			ADD_FAILURE() << "dispatch " << i << " was completion "
			              << rec.order[static_cast<size_t>(i)];
			return;
		}
}

ulp::CqOptions dim_off()
{
	ulp::CqOptions o;
	o.dim = ulp::DimMode::Off;
	return o;
}

const char *ctx_name(PollCtx c)
{
	switch (c) {
	case PollCtx::Direct:
		return "Direct";
	case PollCtx::Softirq:
		return "Softirq";
	case PollCtx::Workqueue:
		return "Workqueue";
	case PollCtx::UnboundWorkqueue:
		return "Unbound";
	case PollCtx::BusyPoll:
		return "BusyPoll";
	default:
		return "None";
	}
}

} // namespace

// gtest prints a PollCtx parameter (and names its test) with this; in PollCtx's namespace,
// where gtest looks for it.
namespace ulp
{
void PrintTo(PollCtx c, std::ostream *os)
{
	*os << ctx_name(c);
}
} // namespace ulp

namespace
{

// ---------------------------------------------------------------------------------------------
// Every context, both execution modes: each completion dispatched once, in CQ order.

struct Param {
	PollCtx ctx;
	Exec exec;
};

// gtest prints a parameter (and names its test) with this: "Softirq_Engine".
void PrintTo(const Param &p, std::ostream *os)
{
	*os << ctx_name(p.ctx) << (p.exec == Exec::Engine ? "_Engine" : "_Inline");
}

class Dispatch : public ::testing::TestWithParam<Param>
{
};

TEST_P(Dispatch, EveryCompletionOnceInOrder)
{
	const Param prm = GetParam();
	if (prm.exec == Exec::Inline)
		ULP_SKIP_UNLESS_SOFT("Exec::Inline (completions inside post_send)");
	Rig rig;
	ASSERT_TRUE(rig.init(prm.exec));
	ulp::PollGroup group;
	auto cq = ulp::alloc_cq(*rig.da, 256, 0, prm.ctx,
	                        prm.ctx == PollCtx::BusyPoll ? &group : nullptr);
	ASSERT_TRUE(cq) << "errno " << errno;
	EXPECT_EQ(cq->poll_ctx, prm.ctx);
	const bool owner_polls = prm.ctx == PollCtx::Direct || prm.ctx == PollCtx::BusyPoll;
	EXPECT_EQ(cq->process_direct != nullptr, owner_polls);
	int qi = rig.add_qp(cq.get());
	ASSERT_GE(qi, 0);

	constexpr int n = 3000;
	Rec rec;
	auto ctxs = make_ctxs(rec, n);
	std::function<void()> pump;
	if (prm.ctx == PollCtx::Direct)
		pump = [&] { ulp::process_cq_direct(*cq, 64); };
	else if (prm.ctx == PollCtx::BusyPoll)
		pump = [&] { group.poll(); };
	ASSERT_TRUE(stream(rig, qi, ctxs, rec, 48, pump));
	expect_in_order(rec, n);
	EXPECT_EQ(rec.errors.load(), 0);
	EXPECT_EQ(rec.overlaps.load(), 0);
	ulp::CqStats st;
	ASSERT_TRUE(ulp::cq_stats(*cq, &st));
	EXPECT_EQ(st.completions, uint64_t{n});
	if (owner_polls) {
		std::lock_guard g(rec.lock);
		EXPECT_EQ(rec.threads, std::set<std::thread::id>{std::this_thread::get_id()});
	}
	rig.qa.clear();
	EXPECT_EQ(ulp::free_cq(cq), 0);
	EXPECT_FALSE(cq);
}

INSTANTIATE_TEST_SUITE_P(Contexts, Dispatch,
                         ::testing::Values(Param{PollCtx::Direct, Exec::Engine},
                                           Param{PollCtx::Direct, Exec::Inline},
                                           Param{PollCtx::Softirq, Exec::Engine},
                                           Param{PollCtx::Softirq, Exec::Inline},
                                           Param{PollCtx::Workqueue, Exec::Engine},
                                           Param{PollCtx::Workqueue, Exec::Inline},
                                           Param{PollCtx::UnboundWorkqueue, Exec::Engine},
                                           Param{PollCtx::UnboundWorkqueue, Exec::Inline},
                                           Param{PollCtx::BusyPoll, Exec::Engine},
                                           Param{PollCtx::BusyPoll, Exec::Inline}),
                         ::testing::PrintToStringParamName());

// ---------------------------------------------------------------------------------------------
// A flushed WR without a cqe is dropped; a flushed WR with one is dispatched (with its error).

class NullCqe : public ::testing::TestWithParam<PollCtx>
{
};

ulp::QpAttr err_attr()
{
	ulp::QpAttr a;
	a.qp_state = ulp::QpState::Err;
	return a;
}

TEST_P(NullCqe, FlushWithoutCqeDropped)
{
	const PollCtx ctx = GetParam();
	Rig rig;
	ASSERT_TRUE(rig.init(Exec::Engine));
	auto cq = ulp::alloc_cq(*rig.da, 256, 0, ctx);
	ASSERT_TRUE(cq);
	int qi = rig.add_qp(cq.get());
	ASSERT_GE(qi, 0);
	if (ulp::test::on_test_device()) // what force_qp_error does, through the verbs
		ASSERT_EQ(rig.qa[0]->modify(err_attr(), ulp::QP_STATE), 0);
	else
		ulp::soft::force_qp_error(*rig.qa[0]);
	Rec rec;
	auto ctxs = make_ctxs(rec, 1);
	constexpr int kNull = 5;
	for (int i = 0; i < kNull; i++)
		ASSERT_EQ(rig.write0(qi, nullptr, 0), 0); // unsignaled, no cqe: flushed
	ASSERT_EQ(rig.write0(qi, &ctxs[0].cqe), 0);
	std::function<void()> pump;
	if (ctx == PollCtx::Direct)
		pump = [&] { ulp::process_cq_direct(*cq, 64); };
	ulp::CqStats st;
	EXPECT_TRUE(wait_for(
	    [&] {
		    ulp::cq_stats(*cq, &st);
		    return rec.n.load() == 1 && st.dropped == uint64_t{kNull};
	    },
	    pump))
	    << "dispatched " << rec.n.load() << " dropped " << st.dropped;
	EXPECT_EQ(rec.errors.load(), 1); // the one with a cqe: WR_FLUSH_ERR
	rig.qa.clear();
}

INSTANTIATE_TEST_SUITE_P(Contexts, NullCqe,
                         ::testing::Values(PollCtx::Direct, PollCtx::Softirq,
                                           PollCtx::UnboundWorkqueue),
                         ::testing::PrintToStringParamName());

// ---------------------------------------------------------------------------------------------
// Re-arm race: one completion at a time, each arriving while the poller is (or has just
// been) re-arming. A lost event leaves a completion undispatched: the bounded wait fails.

class Rearm : public ::testing::TestWithParam<PollCtx>
{
};

TEST_P(Rearm, CompletionsDuringArmNeverLost)
{
	Rig rig;
	ASSERT_TRUE(rig.init(Exec::Engine));
	auto cq = ulp::alloc_cq(*rig.da, 256, 0, GetParam(), nullptr, dim_off());
	ASSERT_TRUE(cq);
	int qi = rig.add_qp(cq.get());
	ASSERT_GE(qi, 0);
	constexpr int n = 1500;
	Rec rec;
	auto ctxs = make_ctxs(rec, n);
	for (int i = 0; i < n; i++) {
		// Vary the gap so that some completions land exactly around the re-arm.
		for (int s = 0; s < (i * 7) % 13; s++)
			std::this_thread::yield();
		ASSERT_EQ(rig.write0(qi, &ctxs[static_cast<size_t>(i)].cqe), 0);
		if (i % 3 == 2 || i == n - 1) {
			ASSERT_TRUE(wait_for([&] { return rec.n.load() == i + 1; }, nullptr))
			    << "completion " << i << " never dispatched (lost event?)";
		}
	}
	expect_in_order(rec, n);
	rig.qa.clear();
}

INSTANTIATE_TEST_SUITE_P(Contexts, Rearm,
                         ::testing::Values(PollCtx::Softirq, PollCtx::Workqueue,
                                           PollCtx::UnboundWorkqueue),
                         ::testing::PrintToStringParamName());

// ---------------------------------------------------------------------------------------------
// Budget fairness: a flooded CQ does not starve another CQ on the same poller.

TEST(CqPoll, SoftirqBudgetFairness)
{
	// Soft: Inline, so the flood is in the CQ before the quiet post. A real device
	// (ULP_TEST_DEVICE) completes the flood while it is posted; ten times slower
	// dispatch there keeps the backlog (the ASSERT_LT below says if it did not).
	const bool real = ulp::test::on_test_device();
	Rig rig;
	ASSERT_TRUE(rig.init(real ? Exec::Engine : Exec::Inline));
	constexpr int kFlood = 3000;
	auto flood = ulp::alloc_cq(*rig.da, kFlood + 64, 0, PollCtx::Softirq, nullptr, dim_off());
	auto quiet = ulp::alloc_cq(*rig.da, 64, 0, PollCtx::Softirq, nullptr, dim_off());
	ASSERT_TRUE(flood && quiet);
	int qf = rig.add_qp(flood.get(), kFlood + 16);
	int qq = rig.add_qp(quiet.get());
	ASSERT_GE(qf, 0);
	ASSERT_GE(qq, 0);
	Rec rf, rq;
	rf.spin_us = real ? 500 : 50; // the flood takes kFlood * 50 us = 150 ms to dispatch
	auto cf = make_ctxs(rf, kFlood);
	auto cqq = make_ctxs(rq, 1);
	std::atomic<int> flood_seen{-1};
	// The quiet CQ's done records how far the flood had got.
	struct QuietCtx {
		ulp::Cqe cqe;
		Rec *flood;
		std::atomic<int> *seen;
	} qc{{[](ulp::Cq *, ulp::Wc *wc) {
		     auto *c = container_of(wc->wr_cqe, &QuietCtx::cqe);
		     c->seen->store(c->flood->n.load());
	     }},
	     &rf,
	     &flood_seen};
	// Inline device: each WRITE completes inside post_send, so the flood is in the CQ
	// (and the poller busy with it) before the quiet WRITE is posted.
	for (int i = 0; i < kFlood; i++)
		ASSERT_EQ(rig.write0(qf, &cf[static_cast<size_t>(i)].cqe), 0);
	const int at_post = rf.n.load();
	ASSERT_EQ(rig.write0(qq, &qc.cqe), 0);
	ASSERT_TRUE(wait_for([&] { return flood_seen.load() >= 0; }, nullptr, kLong));
	ASSERT_TRUE(wait_for([&] { return rf.n.load() == kFlood; }, nullptr, kLong));
	ASSERT_LT(at_post, kFlood - 4 * ulp::kPollBudgetIrq)
	    << "the flood was nearly dispatched before the quiet WRITE: the test proves nothing";
	// Round robin with a budget of 256: once its event is taken, the quiet CQ runs after
	// the flood's current pass at most, long before the flood's backlog is gone.
	EXPECT_LE(flood_seen.load() - at_post, 2 * ulp::kPollBudgetIrq)
	    << "the quiet CQ waited for the flood (" << flood_seen.load() << " of " << kFlood
	    << " flood completions dispatched before it, " << at_post << " at its post)";
	expect_in_order(rf, kFlood);
	rig.qa.clear();
}

// ---------------------------------------------------------------------------------------------
// One CQ is never processed by two threads at once, with every worker busy.

TEST(CqPoll, OneCqOneThread)
{
	Rig rig;
	ASSERT_TRUE(rig.init(Exec::Engine));
	constexpr int kCqs = 4, n = 1500;
	std::vector<ulp::CqHandle> cqs;
	std::vector<std::unique_ptr<Rec>> recs;
	std::vector<std::vector<Ctx>> ctxs;
	std::vector<int> qis;
	for (int i = 0; i < kCqs; i++) {
		PollCtx c = i % 2 ? PollCtx::UnboundWorkqueue : PollCtx::Workqueue;
		cqs.push_back(ulp::alloc_cq(*rig.da, 256, i, c));
		ASSERT_TRUE(cqs.back());
		recs.push_back(std::make_unique<Rec>());
		recs.back()->spin_us = 2;
		ctxs.push_back(make_ctxs(*recs.back(), n));
		qis.push_back(rig.add_qp(cqs.back().get()));
		ASSERT_GE(qis.back(), 0);
	}
	std::vector<std::thread> posters;
	std::atomic<int> ok{0};
	for (int i = 0; i < kCqs; i++)
		posters.emplace_back([&, i] {
			if (stream(rig, qis[static_cast<size_t>(i)], ctxs[static_cast<size_t>(i)],
			           *recs[static_cast<size_t>(i)], 32, nullptr))
				ok++;
		});
	for (auto &t : posters)
		t.join();
	EXPECT_EQ(ok.load(), kCqs);
	for (int i = 0; i < kCqs; i++) {
		EXPECT_EQ(recs[static_cast<size_t>(i)]->overlaps.load(), 0) << "CQ " << i;
		expect_in_order(*recs[static_cast<size_t>(i)], n);
	}
	rig.qa.clear();
}

// ---------------------------------------------------------------------------------------------
// Freeing a threaded CQ with a backlog: free_cq returns only when no callback runs, and
// none runs afterwards.

class FreeThreaded : public ::testing::TestWithParam<PollCtx>
{
};

TEST_P(FreeThreaded, NoCallbackAfterFree)
{
	// Soft: an Inline device has every completion in the CQ before the first dispatch. A
	// real device (ULP_TEST_DEVICE) completes as fast as it can while done() takes 50 us
	// each: the backlog builds all the same (the check after free_cq says if it did not).
	Rig rig;
	ASSERT_TRUE(rig.init(ulp::test::on_test_device() ? Exec::Engine : Exec::Inline));
	constexpr int n = 2000;
	auto cq = ulp::alloc_cq(*rig.da, n + 64, 0, GetParam());
	ASSERT_TRUE(cq);
	int qi = rig.add_qp(cq.get(), n + 16);
	ASSERT_GE(qi, 0);
	Rec rec;
	// 100 ms of backlog; on a real device the posts themselves take time (a system call
	// each on rxe, slow under TCG) while dispatch goes on: 1 s there.
	rec.spin_us = ulp::test::on_test_device() ? 500 : 50;
	auto ctxs = make_ctxs(rec, n);
	for (int i = 0; i < n; i++)
		ASSERT_EQ(rig.write0(qi, &ctxs[static_cast<size_t>(i)].cqe), 0);
	ASSERT_TRUE(wait_for([&] { return rec.n.load() > 0; }, nullptr));
	rig.qa.clear(); // the QP goes first (as a ULP must); its completions stay in the CQ
	ASSERT_EQ(ulp::free_cq(cq), 0);
	rec.freed = true;
	int at_free = rec.n.load();
	std::this_thread::sleep_for(100ms);
	EXPECT_EQ(rec.after_free.load(), 0);
	EXPECT_EQ(rec.n.load(), at_free);
	EXPECT_LT(at_free, n) << "the backlog was gone before free: the test proved nothing";
	EXPECT_FALSE(rec.in_progress.load());
}

INSTANTIATE_TEST_SUITE_P(Contexts, FreeThreaded,
                         ::testing::Values(PollCtx::Softirq, PollCtx::Workqueue,
                                           PollCtx::UnboundWorkqueue),
                         ::testing::PrintToStringParamName());

TEST(CqPoll, FreeFromOwnDoneRefused)
{
	Rig rig;
	ASSERT_TRUE(rig.init(Exec::Engine));
	auto cq = ulp::alloc_cq(*rig.da, 64, 0, PollCtx::Softirq);
	ASSERT_TRUE(cq);
	int qi = rig.add_qp(cq.get());
	ASSERT_GE(qi, 0);
	struct SelfCtx {
		ulp::Cqe cqe;
		std::atomic<int> rc{1};
	} sc;
	sc.cqe.done = [](ulp::Cq *c, ulp::Wc *wc) {
		container_of(wc->wr_cqe, &SelfCtx::cqe)->rc = ulp::free_cq(c);
	};
	ASSERT_EQ(rig.write0(qi, &sc.cqe), 0);
	ASSERT_TRUE(wait_for([&] { return sc.rc.load() != 1; }, nullptr));
	EXPECT_EQ(sc.rc.load(), -EDEADLK);
	rig.qa.clear();
}

// ---------------------------------------------------------------------------------------------
// A batch is a turn (core/turn.h): what done() callbacks defer with defer_to_turn_end runs once,
// after the last callback of their batch (kPollBatch WCs) and outside every callback; nested
// passes wait for the outer batch; outside a callback nothing is deferred.

namespace batch_end
{
struct State {
	int dispatched = 0;                // callbacks of the outer CQ run so far
	bool in_cb = false;                // a callback is running
	std::vector<int> flushed_at;       // `dispatched` at each deferred run
	int ran_inside = 0;                // deferred runs seen inside a callback
	int deferred = 0;                  // registrations accepted
	ulp::Cq *inner = nullptr;          // polled from the outer callback idx 3, if set
	std::vector<int> inner_flushed_at; // `dispatched` when the inner registrations ran
};
struct BCtx {
	ulp::Cqe cqe;
	State *st = nullptr;
	int idx = 0;
	bool inner = false; // a completion of the inner CQ
};
void flush(void *arg)
{
	auto *st = static_cast<State *>(arg);
	if (st->in_cb)
		st->ran_inside++;
	st->flushed_at.push_back(st->dispatched);
}
void flush_inner(void *arg)
{
	auto *st = static_cast<State *>(arg);
	st->inner_flushed_at.push_back(st->dispatched);
}
void done(ulp::Cq *, ulp::Wc *wc)
{
	auto *c = container_of(wc->wr_cqe, &BCtx::cqe);
	State &st = *c->st;
	if (c->inner) {
		st.deferred += ulp::defer_to_turn_end(flush_inner, &st) ? 1 : 0;
		return;
	}
	st.in_cb = true;
	st.dispatched++;
	// Every callback of a batch defers the same flush: each registration runs.
	if (c->idx % 2 == 0)
		st.deferred += ulp::defer_to_turn_end(flush, &st) ? 1 : 0;
	if (c->idx == 3 && st.inner)
		ulp::process_cq_direct(*st.inner, 64);
	st.in_cb = false;
}
} // namespace batch_end

TEST(CqPoll, DeferToTurnEndRunsAfterTheBatch)
{
	using namespace batch_end;
	// Soft: Inline, each WRITE completes inside its post_send, so the batches are exactly
	// 16, 16, 5. A real device (ULP_TEST_DEVICE) completes them as it goes: the batches are
	// whatever the polls find, and the checks below hold for any.
	const bool real = ulp::test::on_test_device();
	Rig rig;
	ASSERT_TRUE(rig.init(real ? Exec::Engine : Exec::Inline));
	constexpr int kN = 2 * ulp::kPollBatch + 5;
	auto cq = ulp::alloc_cq(*rig.da, 128, 0, PollCtx::Direct);
	auto inner = ulp::alloc_cq(*rig.da, 64, 0, PollCtx::Direct);
	ASSERT_TRUE(cq && inner);
	int qi = rig.add_qp(cq.get(), 128);
	int qj = rig.add_qp(inner.get());
	ASSERT_GE(qi, 0);
	ASSERT_GE(qj, 0);
	State st;
	st.inner = inner.get();
	std::vector<BCtx> ctxs(kN);
	BCtx in[2];
	for (auto &c : in) {
		c.cqe.done = done;
		c.st = &st;
		c.inner = true;
		ASSERT_EQ(rig.write0(qj, &c.cqe), 0);
	}
	for (int i = 0; i < kN; i++) {
		ctxs[size_t(i)].cqe.done = done;
		ctxs[size_t(i)].st = &st;
		ctxs[size_t(i)].idx = i;
		ASSERT_EQ(rig.write0(qi, &ctxs[size_t(i)].cqe), 0);
	}
	// Outside a callback: refused, nothing runs later.
	EXPECT_FALSE(ulp::defer_to_turn_end(flush, &st));

	int got = 0;
	ASSERT_TRUE(wait_for(
	    [&] {
		    got += ulp::process_cq_direct(*cq, 256);
		    return got == kN;
	    },
	    nullptr, kLong));
	const int inner_seen = int(st.inner_flushed_at.size());
	EXPECT_EQ(st.deferred, (kN + 1) / 2 + inner_seen);
	EXPECT_EQ(st.ran_inside, 0) << "a deferred function ran inside a done() callback";
	// One run per registration (the even callbacks), after its own callback and before a
	// batch's worth more: at the end of its batch.
	ASSERT_EQ(st.flushed_at.size(), size_t((kN + 1) / 2));
	for (size_t k = 0; k < st.flushed_at.size(); k++) {
		const int i = int(2 * k);
		EXPECT_GT(st.flushed_at[k], i) << "registration of callback " << i;
		EXPECT_LE(st.flushed_at[k], i + ulp::kPollBatch)
		    << "registration of callback " << i;
	}
	// The inner pass (from callback 3) deferred to the end of the outer batch: where the
	// registration of callback 2, in the same batch or an earlier one, ran or later.
	for (int f : st.inner_flushed_at) {
		EXPECT_GE(f, st.flushed_at[1]);
		EXPECT_LE(f, 3 + ulp::kPollBatch);
	}
	if (!real) {
		// Exactly: batches of kPollBatch, then the rest; both inner completions.
		std::vector<int> want;
		for (int i = 0; i < kN; i += 2)
			want.push_back(std::min(kN, (i / ulp::kPollBatch + 1) * ulp::kPollBatch));
		EXPECT_EQ(st.flushed_at, want);
		EXPECT_EQ(st.inner_flushed_at,
		          (std::vector<int>{ulp::kPollBatch, ulp::kPollBatch}));
	}
	rig.qa.clear();
}

TEST(CqPoll, FreeRefusedWhileQpUsesIt)
{
	// ib_free_cq would WARN and free; the QP would then complete into freed memory.
	Rig rig;
	ASSERT_TRUE(rig.init(Exec::Engine));
	for (PollCtx ctx : {PollCtx::Direct, PollCtx::Softirq, PollCtx::Workqueue}) {
		auto cq = ulp::alloc_cq(*rig.da, 64, 0, ctx);
		ASSERT_TRUE(cq);
		int qi = rig.add_qp(cq.get());
		ASSERT_GE(qi, 0);
		EXPECT_EQ(cq->usecnt.load(), 1);
		EXPECT_EQ(ulp::free_cq(cq), -EBUSY);
		ASSERT_TRUE(cq) << "a refused free_cq must leave the handle alone";
		// Still fully working after the refusal.
		Rec rec;
		auto c = make_ctxs(rec, 1);
		ASSERT_EQ(rig.write0(qi, &c[0].cqe), 0);
		ASSERT_TRUE(wait_for([&] { return rec.n.load() == 1; },
		                     [&] { ulp::process_cq_direct(*cq, 16); }));
		rig.qa.erase(rig.qa.begin() + qi);
		rig.qb.erase(rig.qb.begin() + qi);
		EXPECT_EQ(cq->usecnt.load(), 0);
		EXPECT_EQ(ulp::free_cq(cq), 0);
		EXPECT_FALSE(cq);
	}
}

TEST(CqPoll, DirectOnAChannelSleepsUntilACompletion)
{
	// The single-threaded owner's loop: arm, poll once more, sleep on the channel's fd,
	// take the event, process. Each WRITE is posted after the CQ was armed and found
	// empty, so its completion must come through the channel: posted first, it can
	// complete before the poll (rxe in loopback does) and the loop would never sleep.
	Rig rig;
	ASSERT_TRUE(rig.init(Exec::Engine));
	auto ch = rig.da->create_comp_channel();
	ASSERT_TRUE(ch);
	ulp::CqOptions o;
	o.channel = ch.get();
	auto cq = ulp::alloc_cq(*rig.da, 64, 0, PollCtx::Direct, nullptr, o);
	ASSERT_TRUE(cq) << "errno " << errno;
	int qi = rig.add_qp(cq.get());
	ASSERT_GE(qi, 0);
	Rec rec;
	constexpr int n = 50;
	auto c = make_ctxs(rec, n);
	int sleeps = 0;
	for (int i = 0; i < n; i++) {
		ASSERT_EQ(cq->req_notify(ulp::CqNotify::NextComp), 0);
		ASSERT_EQ(ulp::process_cq_direct(*cq, 16), 0) << "a completion nobody posted";
		ASSERT_EQ(rig.write0(qi, &c[static_cast<size_t>(i)].cqe), 0);
		for (int spins = 0; rec.n.load() <= i; spins++) {
			ASSERT_LT(spins, 100) << "completion " << i << " never arrived";
			pollfd pfd{ch->fd(), POLLIN, 0};
			ASSERT_EQ(::poll(&pfd, 1, 5000), 1) << "no channel event in 5 s";
			ulp::Cq *ev = nullptr;
			ASSERT_EQ(ch->get_cq_event(&ev, 0), 0);
			EXPECT_EQ(ev, cq.get());
			sleeps++;
			if (ulp::process_cq_direct(*cq, 16) == 0) {
				ASSERT_EQ(cq->req_notify(ulp::CqNotify::NextComp),
				          0); // spurious: re-arm
			}
		}
	}
	expect_in_order(rec, n);
	EXPECT_GE(sleeps, n) << "a completion came without a channel event";
	rig.qa.clear();
	rig.qb.clear();
	EXPECT_EQ(ulp::free_cq(cq), 0);
}

TEST(CqPoll, ChannelOnlyForDirect)
{
	DevPtr d = make_dev("127.0.0.1");
	ASSERT_TRUE(d);
	auto ch = d->create_comp_channel();
	ASSERT_TRUE(ch);
	ulp::CqOptions o;
	o.channel = ch.get();
	errno = 0;
	EXPECT_FALSE(ulp::alloc_cq(*d, 16, 0, PollCtx::Softirq, nullptr, o));
	EXPECT_EQ(errno, EINVAL);
}

// ---------------------------------------------------------------------------------------------
// Argument checks.

TEST(CqPoll, AllocRejectsBadArguments)
{
	DevPtr d = make_dev("127.0.0.1");
	ASSERT_TRUE(d);
	ulp::PollGroup g;
	errno = 0;
	EXPECT_FALSE(ulp::alloc_cq(*d, 16, 0, PollCtx::None));
	EXPECT_EQ(errno, EINVAL);
	EXPECT_FALSE(ulp::alloc_cq(*d, 16, 0, PollCtx::BusyPoll)); // no group
	EXPECT_FALSE(ulp::alloc_cq(*d, 16, 0, PollCtx::Softirq, &g));
	EXPECT_FALSE(ulp::alloc_cq(*d, 0, 0, PollCtx::Direct));
	EXPECT_FALSE(ulp::alloc_cq(*d, 1 << 30, 0, PollCtx::Softirq)); // above max_cqe
	EXPECT_EQ(errno, EINVAL);
	// A CQ not made by cq_poll is refused by free_cq, untouched.
	ulp::CqInitAttr ca;
	ca.cqe = 4;
	auto plain = d->create_cq(ca);
	ASSERT_TRUE(plain);
	EXPECT_EQ(ulp::free_cq(plain.get()), -EINVAL);
	EXPECT_EQ(ulp::process_cq_direct(*plain, 16), 0);
	// comp_vector wraps modulo num_comp_vectors.
	auto cq = ulp::alloc_cq(*d, 16, 4 * 1000 + 3, PollCtx::Direct);
	ASSERT_TRUE(cq);
	EXPECT_EQ(cq->comp_vector(), (4 * 1000 + 3) % static_cast<int>(d->attr().num_comp_vectors));
}

// ---------------------------------------------------------------------------------------------
// The CQ pool.

int nvec(const ulp::Device &d)
{
	return static_cast<int>(std::min(std::max(1u, d.attr().num_comp_vectors),
	                                 std::max(1u, std::thread::hardware_concurrency())));
}

// A CQ asked for `asked` entries: exactly that many on the soft provider; at least that
// many elsewhere (CqInitAttr::cqe is a minimum: rxe rounds its ring up to 2^n - 1).
void expect_cqe(ulp::Cq *cq, int asked)
{
	if (ulp::test::on_test_device())
		EXPECT_GE(cq->cqe(), asked);
	else
		EXPECT_EQ(cq->cqe(), asked);
}

int used(ulp::Cq *cq)
{
	ulp::CqStats st;
	EXPECT_TRUE(ulp::cq_stats(*cq, &st));
	return st.cqe_used;
}

TEST(CqPool, AccountingAndRefusedTeardown)
{
	DevPtr d = make_dev("127.0.0.1");
	ASSERT_TRUE(d);
	ulp::Cq *cq = ulp::cq_pool_get(*d, 100, 0, PollCtx::Softirq);
	ASSERT_TRUE(cq);
	expect_cqe(cq, ulp::kMaxSharedCqSz);
	EXPECT_EQ(cq->poll_ctx, PollCtx::Softirq);
	EXPECT_EQ(used(cq), 100);
	EXPECT_EQ(ulp::cq_pool_get(*d, 50, 0, PollCtx::Softirq), cq); // same vector, fits
	EXPECT_EQ(used(cq), 150);
	// In use: neither the CQ nor the pool may go.
	EXPECT_EQ(ulp::free_cq(cq), -EBUSY);
	EXPECT_EQ(ulp::cq_pool_destroy(*d), -EBUSY);
	EXPECT_EQ(used(cq), 150); // nothing changed
	ulp::cq_pool_put(cq, 100);
	EXPECT_EQ(used(cq), 50);
	EXPECT_EQ(ulp::cq_pool_destroy(*d), -EBUSY);
	ulp::cq_pool_put(cq, 50);
	EXPECT_EQ(ulp::cq_pool_destroy(*d), 0);
	// The pool is gone: the next get builds a new one, with only its own entries used.
	cq = ulp::cq_pool_get(*d, 10, 0, PollCtx::Softirq);
	ASSERT_TRUE(cq);
	EXPECT_EQ(used(cq), 10);
	ulp::cq_pool_put(cq, 10);
	// A request above max_cqe is refused; a large one gets a CQ of its size.
	errno = 0;
	EXPECT_EQ(ulp::cq_pool_get(*d, d->attr().max_cqe + 1, 0, PollCtx::Direct), nullptr);
	EXPECT_EQ(errno, EINVAL);
	EXPECT_EQ(ulp::cq_pool_get(*d, 16, 0, PollCtx::BusyPoll), nullptr);
	ulp::Cq *big = ulp::cq_pool_get(*d, 10000, 0, PollCtx::Direct);
	ASSERT_TRUE(big);
	expect_cqe(big, 10000);
	ulp::cq_pool_put(big, 10000);
	EXPECT_EQ(ulp::cq_pool_destroy(*d), 0);
}

TEST(CqPool, VectorSpread)
{
	DevPtr d = make_dev("127.0.0.1");
	ASSERT_TRUE(d);
	const int nv = nvec(*d);
	std::set<int> seen;
	std::vector<ulp::Cq *> got;
	for (int h = 0; h < nv; h++) {
		ulp::Cq *cq = ulp::cq_pool_get(*d, 10, h, PollCtx::Workqueue);
		ASSERT_TRUE(cq);
		EXPECT_EQ(cq->comp_vector(), h);
		seen.insert(cq->comp_vector());
		got.push_back(cq);
	}
	EXPECT_EQ(static_cast<int>(seen.size()), nv);
	// A hint beyond the vectors wraps; a negative one goes round robin.
	ulp::Cq *w = ulp::cq_pool_get(*d, 10, nv + 1, PollCtx::Workqueue);
	ASSERT_TRUE(w);
	EXPECT_EQ(w->comp_vector(), (nv + 1) % nv);
	got.push_back(w);
	std::set<int> rr;
	for (int i = 0; i < nv; i++) {
		ulp::Cq *cq = ulp::cq_pool_get(*d, 10, -1, PollCtx::Workqueue);
		ASSERT_TRUE(cq);
		rr.insert(cq->comp_vector());
		got.push_back(cq);
	}
	EXPECT_EQ(static_cast<int>(rr.size()), nv);
	for (ulp::Cq *cq : got)
		ulp::cq_pool_put(cq, 10);
	EXPECT_EQ(ulp::cq_pool_destroy(*d), 0);
}

TEST(CqPool, GrowthAndLeastUsed)
{
	DevPtr d = make_dev("127.0.0.1");
	ASSERT_TRUE(d);
	// The figures in the comments are the soft provider's, whose pool CQs hold exactly
	// kMaxSharedCqSz (4096) entries; a device that rounds the size up (rxe: 8191) gets
	// the same sequence relative to its real capacity c.
	ulp::Cq *probe = ulp::cq_pool_get(*d, 1, 0, PollCtx::Direct);
	ASSERT_TRUE(probe);
	const int c = probe->cqe();
	ulp::cq_pool_put(probe, 1);
	ASSERT_EQ(ulp::cq_pool_destroy(*d), 0);
	ASSERT_GE(c, ulp::kMaxSharedCqSz);
	ulp::Cq *a = ulp::cq_pool_get(*d, unsigned(c - 96), 0, PollCtx::Direct); // 4000
	ASSERT_TRUE(a);
	// Does not fit in a: a new set of CQs is made.
	ulp::Cq *b = ulp::cq_pool_get(*d, 500, 0, PollCtx::Direct);
	ASSERT_TRUE(b);
	EXPECT_NE(a, b);
	EXPECT_EQ(b->comp_vector(), 0);
	EXPECT_EQ(b->cqe(), c);
	EXPECT_EQ(used(a), c - 96);
	EXPECT_EQ(used(b), 500);
	// a: 3000 used, b: 500. Both fit 100; a comes first in the pool (the kernel's
	// first-fit would take it), the least used is b.
	ulp::cq_pool_put(a, 1000);
	EXPECT_EQ(ulp::cq_pool_get(*d, 100, 0, PollCtx::Direct), b);
	EXPECT_EQ(used(b), 600);
	// Only a has room for 3400 more? No: a has 1096 left, b 3496: b again.
	EXPECT_EQ(ulp::cq_pool_get(*d, unsigned(c - 696), 0, PollCtx::Direct), b);
	EXPECT_EQ(used(b), c - 96);
	// Now a (3000 used) is the least used.
	EXPECT_EQ(ulp::cq_pool_get(*d, 10, 0, PollCtx::Direct), a);
	ulp::cq_pool_put(a, unsigned(c - 1086));
	ulp::cq_pool_put(b, unsigned(c - 96));
	EXPECT_EQ(ulp::free_cq(a), 0); // unused pool CQs may be freed one by one
	EXPECT_EQ(ulp::cq_pool_destroy(*d), 0);
}

// A pool CQ carries traffic like any other.
TEST(CqPool, SharedCqDispatches)
{
	Rig rig;
	ASSERT_TRUE(rig.init(Exec::Engine));
	ulp::Cq *cq = ulp::cq_pool_get(*rig.da, 128, 1, PollCtx::Softirq);
	ASSERT_TRUE(cq);
	int q1 = rig.add_qp(cq), q2 = rig.add_qp(cq);
	ASSERT_GE(q1, 0);
	ASSERT_GE(q2, 0);
	Rec r1, r2;
	auto c1 = make_ctxs(r1, 500), c2 = make_ctxs(r2, 500);
	std::thread t([&] { stream(rig, q2, c2, r2, 32, nullptr); });
	EXPECT_TRUE(stream(rig, q1, c1, r1, 32, nullptr));
	t.join();
	expect_in_order(r1, 500);
	expect_in_order(r2, 500);
	rig.qa.clear();
	ulp::cq_pool_put(cq, 128);
	EXPECT_EQ(ulp::cq_pool_destroy(*rig.da), 0);
}

// ---------------------------------------------------------------------------------------------
// Poll groups.

// A stop() that comes before the thread running the group has started (a late thread on a
// busy host) still ends that run(); it ends one run() only.
TEST(PollGroup, StopBeforeRunEndsTheRun)
{
	ulp::PollGroup group;
	group.stop();
	std::atomic<bool> returned{false};
	std::thread t([&] {
		EXPECT_EQ(group.run(), 0);
		returned = true;
	});
	EXPECT_TRUE(wait_for([&] { return returned.load(); }, nullptr));
	if (!returned) {
		group.stop(); // do not hang the suite
	}
	t.join();
	// The request was consumed: the next run() polls until its own stop().
	returned = false;
	std::thread t2([&] {
		EXPECT_EQ(group.run(), 0);
		returned = true;
	});
	std::this_thread::sleep_for(20ms);
	EXPECT_FALSE(returned.load());
	group.stop();
	t2.join();
	EXPECT_TRUE(returned.load());
}

TEST(PollGroup, RunsOnCallerThreadOnly)
{
	Rig rig;
	ASSERT_TRUE(rig.init(Exec::Engine));
	ulp::PollGroup group;
	auto cq = ulp::alloc_cq(*rig.da, 256, 0, PollCtx::BusyPoll, &group);
	ASSERT_TRUE(cq);
	EXPECT_EQ(group.nr_cqs(), 1);
	int qi = rig.add_qp(cq.get());
	ASSERT_GE(qi, 0);
	constexpr int n = 40;
	Rec rec;
	auto ctxs = make_ctxs(rec, n);
	for (int i = 0; i < n; i++)
		ASSERT_EQ(rig.write0(qi, &ctxs[static_cast<size_t>(i)].cqe), 0);
	// Nobody polls: nothing is dispatched, however long we wait.
	std::this_thread::sleep_for(50ms);
	EXPECT_EQ(rec.n.load(), 0);
	// A foreign thread may not process the group's CQ directly.
	int foreign = -1;
	std::thread([&] { foreign = cq->process_direct(*cq, 64); }).join();
	EXPECT_EQ(foreign, 0);
	EXPECT_EQ(rec.n.load(), 0);
	// The owner (this thread, which made the group) may.
	EXPECT_TRUE(
	    wait_for([&] { return rec.n.load() >= 1; }, [&] { cq->process_direct(*cq, 1); }));
	// The group run by another thread: every callback there.
	std::thread::id runner;
	std::atomic<bool> started{false};
	std::thread t([&] {
		runner = std::this_thread::get_id();
		started = true;
		EXPECT_EQ(group.run(), 0);
	});
	EXPECT_TRUE(wait_for([&] { return rec.n.load() == n; }, nullptr));
	// While the runner is inside poll() (held in a gate completion's done()), this thread
	// may neither poll nor process directly.
	struct GateCtx {
		ulp::Cqe cqe;
		std::atomic<bool> entered{false}, open{false};
	} gate;
	gate.cqe.done = [](ulp::Cq *, ulp::Wc *wc) {
		auto *g = container_of(wc->wr_cqe, &GateCtx::cqe);
		g->entered = true;
		auto until = Clock::now() + kWait;
		while (!g->open.load() && Clock::now() < until)
			std::this_thread::yield();
	};
	ASSERT_EQ(rig.write0(qi, &gate.cqe), 0);
	ASSERT_TRUE(wait_for([&] { return gate.entered.load(); }, nullptr));
	EXPECT_EQ(group.poll(), -EBUSY);
	EXPECT_EQ(cq->process_direct(*cq, 64), 0);
	gate.open = true;
	group.stop();
	t.join();
	{
		std::lock_guard g(rec.lock);
		EXPECT_EQ(rec.threads.size(), 2u); // this thread (the direct one), then the runner
		EXPECT_TRUE(rec.threads.count(runner));
	}
	EXPECT_EQ(group.owner(), runner);
	expect_in_order(rec, n);
	rig.qa.clear();
	EXPECT_EQ(ulp::free_cq(cq), 0);
	EXPECT_EQ(group.nr_cqs(), 0);
}

// ---------------------------------------------------------------------------------------------
// Adaptive moderation.

// The tuning rule on synthetic samples, one event per 100 us.
TEST(Dim, StepsRightWhileBetterTurnsWhenWorseResetsWhenIdle)
{
	ulp::Dim dim;
	uint64_t t = 1000;
	int applied = 0;
	int min_left = 99; // lowest level reached while going left
	auto feed = [&](double comps_per_event, int events) {
		for (int e = 0; e < events; e++) {
			t += 100;
			if (dim.sample(static_cast<uint64_t>(comps_per_event), t)) {
				applied++;
				dim.applied(); // as after Cq::modify
				if (dim.tune() == ulp::Dim::Tune::GoingLeft)
					min_left = std::min(min_left, dim.level());
			}
		}
	};
	feed(1, 64); // the baseline window
	EXPECT_EQ(dim.level(), 0);
	EXPECT_EQ(applied, 0);
	// A rate that keeps growing (+30% per window): every decision is "better", one
	// step right each (six windows: short of the last level, where the walk turns).
	double c = 2;
	int prev = 0;
	for (int w = 0; w < 6; w++) {
		feed(c, 66);
		c *= 1.3;
		EXPECT_GE(dim.level(), prev) << "window " << w;
		prev = dim.level();
	}
	EXPECT_GE(dim.level(), 5);
	EXPECT_GE(applied, 5);
	EXPECT_EQ(dim.tune(), ulp::Dim::Tune::GoingRight);
	// The rate collapses: "worse" turns the walk and steps left (the window after may
	// compare worse again against the half-collapsed one and turn back: net_dim does).
	int top = dim.level();
	feed(c / 8, 140);
	EXPECT_EQ(min_left, top - 1);
	// A steady trickle of one completion per event: "same" with a low completions-per-
	// event ratio for the level resets to level 0 (moderation only adds latency there).
	feed(1, 64 * 8);
	EXPECT_EQ(dim.level(), 0);
	EXPECT_EQ(ulp::kDimProfiles[0].comps, 1);
}

TEST(Dim, SustainedStreamRaisesModeration)
{
	Rig rig;
	ASSERT_TRUE(rig.init(Exec::Engine));
	if (ulp::test::on_test_device() &&
	    !(rig.da->attr().device_cap_flags & ulp::DEVICE_CQ_MODERATION))
		GTEST_SKIP() << rig.da->name() << " cannot moderate CQs (no DEVICE_CQ_MODERATION): "
		             << "Dim.OffWhereTheDeviceCannotModerate runs on it instead";
	ASSERT_TRUE(rig.da->attr().device_cap_flags & ulp::DEVICE_CQ_MODERATION);
	auto cq = ulp::alloc_cq(*rig.da, 1024, 0, PollCtx::Softirq);
	auto off = ulp::alloc_cq(*rig.da, 1024, 0, PollCtx::Softirq, nullptr, dim_off());
	ASSERT_TRUE(cq && off);
	int qi = rig.add_qp(cq.get(), 512), qo = rig.add_qp(off.get(), 512);
	ASSERT_GE(qi, 0);
	ASSERT_GE(qo, 0);
	ulp::CqStats st;
	ASSERT_TRUE(ulp::cq_stats(*cq, &st));
	EXPECT_EQ(st.dim_level, 0);
	ASSERT_TRUE(ulp::cq_stats(*off, &st));
	EXPECT_EQ(st.dim_level, -1);
	// rdma_dim steps only when the completion rate moves by more than 10% from one window
	// of events to the next (its first window compares "same"), so a stream that is
	// steady from its first completion may rightly stay at level 0: CI once saw that, at
	// 0.017 passes per completion. The stream therefore starts slow, one WRITE at a time,
	// and then runs 256 deep: the rate rises, and DIM must go right.
	Rec warm;
	auto cwarm = make_ctxs(warm, 2000);
	ASSERT_TRUE(stream(rig, qi, cwarm, warm, 1, nullptr, 60s));
	ulp::CqStats w;
	ASSERT_TRUE(ulp::cq_stats(*cq, &w));
	constexpr int n = 30000;
	Rec rec, roff;
	auto ctxs = make_ctxs(rec, n), coff = make_ctxs(roff, n);
	ASSERT_TRUE(stream(rig, qi, ctxs, rec, 256, nullptr, 60s));
	ASSERT_TRUE(stream(rig, qo, coff, roff, 256, nullptr, 60s));
	expect_in_order(rec, n);
	ulp::CqStats on, no;
	ASSERT_TRUE(ulp::cq_stats(*cq, &on));
	ASSERT_TRUE(ulp::cq_stats(*off, &no));
	EXPECT_GT(on.dim_max_level, 0) << "DIM never raised moderation on a sustained stream";
	EXPECT_EQ(no.dim_max_level, -1);
	// Fewer events (passes) per completion than without moderation... at the least, fewer
	// than one per completion.
	// (The sustained part only: the warm-up is a pass per completion by design.)
	EXPECT_LT(on.passes - w.passes, on.completions - w.completions);
	std::printf("dim: max level %d, %.3f passes/completion (off: %.3f)\n", on.dim_max_level,
	            double(on.passes - w.passes) / double(on.completions - w.completions),
	            double(no.passes) / double(no.completions));
	rig.qa.clear();
}

TEST(Dim, OffWhereTheDeviceCannotModerate)
{
	// DimMode::Auto on a device without DEVICE_CQ_MODERATION: no DIM, and a stream still
	// gets through, in order. On ULP_TEST_DEVICE: a device that has it cannot withhold it.
	if (ulp::test::on_test_device()) {
		DevPtr d = make_dev("127.0.0.1");
		ASSERT_TRUE(d);
		if (d->attr().device_cap_flags & ulp::DEVICE_CQ_MODERATION)
			GTEST_SKIP() << d->name() << " moderates CQs: withholding the capability "
			             << "needs soft::DeviceConfig::clear_cap_flags";
	}
	Rig rig;
	ASSERT_TRUE(rig.init(Exec::Engine, ulp::DEVICE_CQ_MODERATION));
	ASSERT_FALSE(rig.da->attr().device_cap_flags & ulp::DEVICE_CQ_MODERATION);
	EXPECT_EQ(rig.other_a->modify(8, 16), -EOPNOTSUPP);
	for (PollCtx ctx : {PollCtx::Softirq, PollCtx::Workqueue}) {
		auto cq = ulp::alloc_cq(*rig.da, 1024, 0, ctx);
		ASSERT_TRUE(cq);
		ulp::CqStats st;
		ASSERT_TRUE(ulp::cq_stats(*cq, &st));
		EXPECT_EQ(st.dim_level, -1);
		int qi = rig.add_qp(cq.get(), 512);
		ASSERT_GE(qi, 0);
		constexpr int n = 5000;
		Rec rec;
		auto ctxs = make_ctxs(rec, n);
		ASSERT_TRUE(stream(rig, qi, ctxs, rec, 256, nullptr));
		expect_in_order(rec, n);
		ASSERT_TRUE(ulp::cq_stats(*cq, &st));
		EXPECT_EQ(st.dim_max_level, -1);
		rig.qa.clear();
		rig.qb.clear();
	}
}

} // namespace
