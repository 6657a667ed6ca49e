// SPDX-License-Identifier: MIT
// tools/ulp-bench/cq.cc - `ulp-bench cq`: what a cq_poll poll context costs per completion,
// beside the raw loop a ULP would write by hand (Cq::poll 16, call done for each) on the
// same kind of CQ, measured in the same run.
//
// Measurement: each round pre-fills a CQ with kFill completions (signaled zero-length RDMA
// WRITEs on a loopback pair of Exec::Inline soft devices: they complete inside post_send,
// on this thread), then times only their dispatch, as Google Benchmark manual time:
//   raw       poll(16) + done() until kFill are done
//   direct    process_cq_direct(cq, remaining) until kFill are done
//   busypoll  PollGroup::poll() until kFill are done
//   softirq, workqueue, unbound-workqueue: the context's thread is held inside the done()
//             of a gate completion posted first, while the fill happens; the clock starts
//             when the gate opens and stops in the done() of the last completion. It covers
//             the passes, budgets, re-arms and requeues of the context, not the wake-up
//             from an idle sleep (that is the event path's latency, not dispatch cost).
// Every done() is the same function: one add to a counter.
#include "tools/ulp-bench/cq.h"
#include "tools/ulp-bench/report.h"

#include "cq_poll/cq_poll.h"
#include "providers/soft/soft.h"

#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace ulp::bench
{

namespace
{

using namespace std::chrono_literals;

constexpr int kFill = 4096;         // completions per round
constexpr auto kRoundTimeout = 10s; // a round that does not finish is fatal
constexpr double kAimRatio = 1.3;   // direct and busy-poll: at most this times raw

using Clock = std::chrono::steady_clock;

// The done() target: a counter, and for the threaded contexts the end of the round.
struct Sink {
	Cqe cqe;                           // wr_cqe points here (container_of)
	uint64_t n = 0;                    // completions dispatched (the dispatching thread)
	uint64_t target = 0;               // n at which the round ends
	std::atomic<bool> finished{false}; // n reached target (threaded contexts)
	Clock::time_point t_end;           // when it did (written before finished)
};

void sink_done(Cq *, Wc *wc)
{
	auto *s = container_of(wc->wr_cqe, &Sink::cqe);
	if (++s->n == s->target) {
		s->t_end = Clock::now();
		s->finished.store(true, std::memory_order_release);
		s->finished.notify_one();
	}
}

// Holds a threaded context's thread while the CQ is filled.
struct Gate {
	Cqe cqe;
	std::atomic<bool> entered{false};
	std::atomic<bool> open{false};
};

void gate_done(Cq *, Wc *wc)
{
	auto *g = container_of(wc->wr_cqe, &Gate::cqe);
	g->entered.store(true, std::memory_order_release);
	while (!g->open.load(std::memory_order_acquire))
		std::this_thread::yield();
}

int connect_qp(Qp &qp, const Device &peer, uint32_t peer_qpn)
{
	QpAttr init;
	init.qp_state = QpState::Init;
	init.qp_access_flags = ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ;
	int rc = qp.modify(init, QP_STATE | QP_PORT | QP_ACCESS_FLAGS);
	if (rc)
		return rc;
	QpAttrAv rtr;
	rtr.qp_state = QpState::Rtr;
	rtr.dest_qp_num = peer_qpn;
	rtr.max_dest_rd_atomic = 4;
	rtr.ah_attr.dgid = peer.gid();
	rc = qp.modify(rtr, QP_STATE | QP_AV | QP_PATH_MTU | QP_DEST_QPN | QP_RQ_PSN |
	                        QP_MAX_DEST_RD_ATOMIC | QP_MIN_RNR_TIMER);
	if (rc)
		return rc;
	QpAttr rts;
	rts.qp_state = QpState::Rts;
	rts.max_rd_atomic = 4;
	return qp.modify(rts, QP_STATE | QP_SQ_PSN | QP_TIMEOUT | QP_RETRY_CNT | QP_RNR_RETRY |
	                          QP_MAX_QP_RD_ATOMIC);
}

// One context under test: its CQ, a connected QP whose sends complete there.
struct Lane {
	std::string name;
	PollCtx ctx = PollCtx::None; // None: the raw loop on a plain CQ
	std::unique_ptr<Cq> plain;   // raw
	CqHandle cq;                 // cq_poll contexts
	PollGroup *group = nullptr;
	std::unique_ptr<Qp> qp, peer_qp;
	Sink sink;
	Gate gate;
	Cq *the_cq() const { return plain ? plain.get() : cq.get(); }
	bool threaded() const
	{
		return ctx == PollCtx::Softirq || ctx == PollCtx::Workqueue ||
		       ctx == PollCtx::UnboundWorkqueue;
	}
};

struct Fabric {
	Device *da = nullptr, *db = nullptr;
	std::unique_ptr<Pd> pa, pb;
	std::unique_ptr<Cq> recv_cq; // the requesters' receive CQ (on da; never used)
	std::unique_ptr<Cq> peer_cq; // the responders' CQs (on db)
	PollGroup group;
	std::vector<std::unique_ptr<Lane>> lanes;

	void init()
	{
		soft::DeviceConfig c;
		c.exec = soft::Exec::Inline;
		c.ip = "127.0.0.1";
		da = soft::create_device(c);
		c.ip = "127.0.0.2";
		db = soft::create_device(c);
		if (!da || !db)
			fatal("create_device: %s", std::strerror(errno));
		pa = da->alloc_pd();
		pb = db->alloc_pd();
		CqInitAttr ca;
		ca.cqe = 64;
		peer_cq = db->create_cq(ca);
		recv_cq = da->create_cq(ca);
		if (!pa || !pb || !peer_cq || !recv_cq)
			fatal("alloc_pd/create_cq: %s", std::strerror(errno));
	}

	Lane &add(const char *name, PollCtx ctx)
	{
		auto l = std::make_unique<Lane>();
		l->name = name;
		l->ctx = ctx;
		l->sink.cqe.done = sink_done;
		l->gate.cqe.done = gate_done;
		if (ctx == PollCtx::None) {
			CqInitAttr ca;
			ca.cqe = kFill + 1;
			l->plain = da->create_cq(ca);
		} else {
			l->group = ctx == PollCtx::BusyPoll ? &group : nullptr;
			ulp::CqOptions opts;
			opts.dim = DimMode::Off; // a fixed, pre-filled CQ: nothing to tune
			l->cq = alloc_cq(*da, kFill + 1, 0, ctx, l->group, opts);
		}
		if (!l->the_cq())
			fatal("%s: CQ: %s", name, std::strerror(errno));
		QpInitAttr a;
		a.send_cq = l->the_cq();
		a.recv_cq = recv_cq.get();
		a.cap.max_send_wr = kFill + 1;
		a.cap.max_recv_wr = 1;
		a.cap.max_send_sge = 1;
		a.cap.max_recv_sge = 1;
		l->qp = pa->create_qp(a);
		a.send_cq = peer_cq.get();
		a.recv_cq = peer_cq.get();
		a.cap.max_send_wr = 1;
		l->peer_qp = pb->create_qp(a);
		if (!l->qp || !l->peer_qp)
			fatal("%s: create_qp: %s", name, std::strerror(errno));
		if (connect_qp(*l->qp, *db, l->peer_qp->qp_num()) ||
		    connect_qp(*l->peer_qp, *da, l->qp->qp_num()))
			fatal("%s: connect", name);
		lanes.push_back(std::move(l));
		return *lanes.back();
	}

	~Fabric()
	{
		for (auto &l : lanes) {
			l->qp.reset();
			l->peer_qp.reset();
			l->plain.reset();
			l->cq.reset();
		}
		peer_cq.reset();
		recv_cq.reset();
		pa.reset();
		pb.reset();
		if (da)
			soft::destroy_device(da);
		if (db)
			soft::destroy_device(db);
	}
};

void post_write(Lane &l, Cqe *cqe)
{
	RdmaWr wr;
	wr.opcode = WrOpcode::RdmaWrite;
	wr.wr_cqe = cqe;
	wr.send_flags = SEND_SIGNALED;
	const SendWr *bad = nullptr;
	int rc = l.qp->post_send(&wr, &bad);
	if (rc)
		fatal("%s: post_send: %s", l.name.c_str(), std::strerror(-rc));
}

void fill(Lane &l)
{
	for (int i = 0; i < kFill; i++)
		post_write(l, &l.sink.cqe);
}

// One round: fill the CQ, dispatch it; returns the seconds the dispatch took.
double round_once(Lane &l)
{
	Sink &s = l.sink;
	s.target = s.n + kFill;
	s.finished.store(false, std::memory_order_relaxed);
	const auto deadline = Clock::now() + kRoundTimeout;
	if (l.threaded()) {
		l.gate.entered.store(false);
		l.gate.open.store(false);
		post_write(l, &l.gate.cqe);
		while (!l.gate.entered.load(std::memory_order_acquire))
			if (Clock::now() > deadline)
				fatal("%s: the context never ran the gate completion",
				      l.name.c_str());
		fill(l);
		auto t0 = Clock::now();
		l.gate.open.store(true, std::memory_order_release);
		// Bounded wait for the last done(): atomic wait has no timeout, so poll it.
		while (!s.finished.load(std::memory_order_acquire)) {
			if (Clock::now() > deadline)
				fatal("%s: %llu of %d completions dispatched in %lld s",
				      l.name.c_str(),
				      static_cast<unsigned long long>(s.n - (s.target - kFill)),
				      kFill, static_cast<long long>(kRoundTimeout.count()));
			std::this_thread::sleep_for(20us);
		}
		return std::chrono::duration<double>(s.t_end - t0).count();
	}
	fill(l);
	Cq *cq = l.the_cq();
	std::array<Wc, 16> wc;
	auto t0 = Clock::now();
	switch (l.ctx) {
	case PollCtx::None: // the raw loop
		while (s.n < s.target) {
			int n = cq->poll(wc);
			for (int i = 0; i < n; i++)
				if (wc[static_cast<size_t>(i)].wr_cqe)
					wc[static_cast<size_t>(i)].wr_cqe->done(
					    cq, &wc[static_cast<size_t>(i)]);
		}
		break;
	case PollCtx::Direct:
		while (s.n < s.target)
			process_cq_direct(*cq, static_cast<int>(s.target - s.n));
		break;
	case PollCtx::BusyPoll:
		while (s.n < s.target)
			l.group->poll();
		break;
	default:
		break;
	}
	auto t1 = Clock::now();
	return std::chrono::duration<double>(t1 - t0).count();
}

void bm_lane(benchmark::State &st, Lane *l)
{
	// Untimed warm-up rounds: the CQ ring, the SQ and the context's thread get warm.
	for (int i = 0; i < 3; i++)
		(void)round_once(*l);
	for (auto _ : st)
		st.SetIterationTime(round_once(*l));
	st.SetItemsProcessed(st.iterations() * kFill);
}

// Direct and busy-poll dispatch in the caller's loop: they should cost little over it.
Aim aim_of(PollCtx ctx)
{
	if (ctx != PollCtx::Direct && ctx != PollCtx::BusyPoll)
		return {};
	return Aim{"max_ratio", false, kAimRatio, 1};
}

} // namespace

int run_cq(const CqBenchOptions &o)
{
	set_bench("cq");
	const double load = loadavg_1m();
	const int rounds = o.rounds > 0 ? o.rounds : (o.quick ? 200 : 2000);
	Fabric fab;
	fab.init();
	struct Desc {
		const char *name;
		PollCtx ctx;
	};
	// The bench's own labels, not poll_ctx_str(): they are the JSON's "context" keys, "raw"
	// is the plain loop rather than a context, and "busypoll" is what past results used.
	const Desc descs[] = {{"raw", PollCtx::None},
	                      {"direct", PollCtx::Direct},
	                      {"busypoll", PollCtx::BusyPoll},
	                      {"softirq", PollCtx::Softirq},
	                      {"workqueue", PollCtx::Workqueue},
	                      {"unbound-workqueue", PollCtx::UnboundWorkqueue}};
	for (const Desc &d : descs) {
		Lane &l = fab.add(d.name, d.ctx);
		benchmark::RegisterBenchmark(d.name,
		                             [&l](benchmark::State &st) { bm_lane(st, &l); })
		    ->Iterations(rounds)
		    ->UseManualTime();
	}
	benchmark_init();
	// Manual time: the dispatch of kFill completions per iteration.
	auto ns_per_completion = [](const Measured &m) {
		return m.seconds * 1e9 / (m.iterations * kFill);
	};
	const Runs runs = run_benchmarks([&](const std::string &name, const Measured &m) {
		std::fprintf(stderr, "ulp-bench: %-18s %8.2f ns/completion\n", name.c_str(),
		             ns_per_completion(m));
	});
	benchmark::Shutdown();

	Report rep("cq");
	rep.title(fmt::format("soft provider (Exec::Inline), {} run: {} rounds of {} pre-filled "
	                      "completions per context",
	                      o.quick ? "quick" : "full", rounds, kFill));
	rep.note("done() adds to a counter; ratio = ns/completion / raw loop's (poll 16 + done)");
	rep.machine(load);
	rep.meta("provider", json_str("soft"));
	rep.meta("exec", json_str("inline"));
	rep.meta("quick", json_bool(o.quick));
	rep.meta("fill", json_int(kFill));
	rep.meta("rounds", json_int(rounds));
	rep.columns({{"context", "context", Align::Left},
	             {"ns/completion", "ns_per_completion"},
	             {"ratio", "ratio_to_raw"},
	             {"aim", "aim", Align::Left}});
	const double raw = ns_per_completion(runs["raw"]);
	for (const Desc &d : descs) {
		const double ns = ns_per_completion(runs[d.name]);
		rep.row()
		    .text(d.name)
		    .num(ns, 2, 3)
		    .ratio(ns, raw, 3, 4)
		    .aim(aim_of(d.ctx), ns / raw);
	}
	rep.print(o.json);
	return 0;
}

} // namespace ulp::bench
