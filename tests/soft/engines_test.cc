// SPDX-License-Identifier: MIT
// tests/soft/engines_test.cc - a device's engines, one per completion vector like the queues
// of a multi-queue NIC: how many a device gets, which one runs a QP (its send CQ's vector),
// that they are distinct threads, and traffic between QPs on different engines of one
// device on every wire: ordering, RNR, errors and flushes, a shared SRQ, teardown.
#include "soft_test_util.h"
#include "threads_util.h"

#include <pthread.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>

using namespace ulp;
using namespace soft_test;

namespace
{

DevPtr engines_dev(uint32_t engines, soft::Wire wire = soft::Wire::Auto,
                   soft::Exec exec = soft::Exec::Engine, uint32_t vectors = 0,
                   const std::string &ip = "127.0.0.1")
{
	soft::DeviceConfig c;
	c.ip = ip;
	c.engines = engines;
	c.wire = wire;
	c.exec = exec;
	c.limits.num_comp_vectors = vectors;
	return DevPtr(soft::create_device(c));
}

unsigned cpus()
{
	unsigned n = std::thread::hardware_concurrency();
	return n ? n : 1;
}

// Threads of this process by name.
std::map<std::string, int> thread_names()
{
	std::map<std::string, int> out;
	for_each_thread([&](pid_t, const std::string &name) { out[name]++; });
	return out;
}

std::string this_thread_name()
{
	char buf[16] = {};
	pthread_getname_np(pthread_self(), buf, sizeof(buf));
	return buf;
}

// The thread an async event of a QP was reported on.
struct Seen {
	std::mutex lock;
	std::condition_variable cv;
	std::map<uint32_t, std::pair<pid_t, std::string>> by_qpn; // QpFatal: tid, name

	EventHandler handler()
	{
		return [this](const AsyncEvent &e) {
			if (e.event != EventType::QpFatal || !e.qp)
				return;
			std::lock_guard g(lock);
			by_qpn[e.qp->qp_num()] = {this_tid(), this_thread_name()};
			cv.notify_all();
		};
	}
	bool wait(size_t n)
	{
		std::unique_lock g(lock);
		return cv.wait_for(g, kWait, [&] { return by_qpn.size() >= n; });
	}
};

// A QP that reports its async events to seen, its CQs on vector.
void create_seen_qp(Side &s, Seen &seen)
{
	QpInitAttr a = s.qp_attr();
	a.event_handler = seen.handler();
	s.own_qp = s.pd->create_qp(a);
	ASSERT_TRUE(s.own_qp) << "errno " << errno;
	s.qp = s.own_qp.get();
}

} // namespace

// ---------------------------------------------------------------------------------------------
// How many

TEST(SoftEngines, CountIsVectorsCappedByCpus)
{
	ScopedEnv env("ULP_SOFT_ENGINES", nullptr);
	auto d = engines_dev(0);
	ASSERT_TRUE(d);
	const unsigned vectors = d->attr().num_comp_vectors;
	ASSERT_GE(vectors, 1u);
	EXPECT_EQ(soft::engine_count(*d), std::min(vectors, cpus()));
	// As cq_poll sizes its pollers: one vector, one engine.
	auto one = engines_dev(0, soft::Wire::Auto, soft::Exec::Engine, 1, "127.0.0.2");
	ASSERT_TRUE(one);
	EXPECT_EQ(soft::engine_count(*one), 1u);
}

TEST(SoftEngines, ExplicitCountIsCappedByVectorsNotCpus)
{
	ScopedEnv env("ULP_SOFT_ENGINES", nullptr);
	// More engines than this machine has CPUs (CI: 2): what the multi-engine runs need.
	auto d = engines_dev(4);
	ASSERT_TRUE(d);
	EXPECT_EQ(soft::engine_count(*d), std::min(4u, d->attr().num_comp_vectors));
	auto e = engines_dev(9, soft::Wire::Auto, soft::Exec::Engine, 3, "127.0.0.2");
	ASSERT_TRUE(e);
	EXPECT_EQ(soft::engine_count(*e), 3u) << "an engine without a vector would never run a QP";
	auto f = engines_dev(1, soft::Wire::Auto, soft::Exec::Engine, 0, "127.0.0.3");
	ASSERT_TRUE(f);
	EXPECT_EQ(soft::engine_count(*f), 1u);
}

TEST(SoftEngines, EnvironmentOverridesTheDefaultOnly)
{
	{
		ScopedEnv env("ULP_SOFT_ENGINES", "3");
		auto d = engines_dev(0);
		ASSERT_TRUE(d);
		EXPECT_EQ(soft::engine_count(*d), 3u);
		// The device's own configuration wins.
		auto e = engines_dev(2, soft::Wire::Auto, soft::Exec::Engine, 0, "127.0.0.2");
		ASSERT_TRUE(e);
		EXPECT_EQ(soft::engine_count(*e), 2u);
	}
	for (const char *bad : {"0", "x", "4x", "-2", "99999"}) {
		ScopedEnv env("ULP_SOFT_ENGINES", bad);
		auto d = engines_dev(0);
		ASSERT_TRUE(d);
		EXPECT_EQ(soft::engine_count(*d), std::min(d->attr().num_comp_vectors, cpus()))
		    << "ULP_SOFT_ENGINES=" << bad << " must be ignored";
	}
}

// ---------------------------------------------------------------------------------------------
// Which one, on which thread

TEST(SoftEngines, QpRunsOnItsSendCqVector)
{
	auto d = engines_dev(2); // 4 vectors, 2 engines: vector v on engine v % 2
	ASSERT_TRUE(d);
	ASSERT_EQ(soft::engine_count(*d), 2u);
	for (int v = 0; v < 4; v++) {
		Side s;
		s.init(*d, 4096, 16, nullptr, v);
		s.create_qp();
		ASSERT_TRUE(s.qp);
		EXPECT_EQ(soft::qp_engine(*s.qp), static_cast<unsigned>(v % 2)) << "vector " << v;
	}
	// The send CQ decides, not the receive CQ.
	auto pd = d->alloc_pd();
	CqInitAttr ca;
	ca.cqe = 16;
	ca.comp_vector = 1;
	auto scq = d->create_cq(ca);
	ca.comp_vector = 0;
	auto rcq = d->create_cq(ca);
	QpInitAttr qa;
	qa.send_cq = scq.get();
	qa.recv_cq = rcq.get();
	qa.cap.max_send_wr = qa.cap.max_recv_wr = 4;
	qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
	auto qp = pd->create_qp(qa);
	ASSERT_TRUE(qp);
	EXPECT_EQ(soft::qp_engine(*qp), 1u);
}

TEST(SoftEngines, OneThreadPerEngine)
{
	const auto before = thread_names();
	auto get = [](const std::map<std::string, int> &m, const std::string &k) {
		auto it = m.find(k);
		return it == m.end() ? 0 : it->second;
	};
	{
		auto d = engines_dev(4);
		ASSERT_TRUE(d);
		ASSERT_EQ(soft::engine_count(*d), 4u);
		// Each thread names itself as it starts: wait (bounded) until all four have.
		std::map<std::string, int> during;
		auto until = Clock::now() + kWait;
		for (;;) {
			during = thread_names();
			bool all = true;
			for (int i = 0; i < 4; i++) {
				const std::string n = "ulp-soft-eng" + std::to_string(i);
				all = all && get(during, n) > get(before, n);
			}
			if (all || Clock::now() >= until)
				break;
			std::this_thread::sleep_for(1ms);
		}
		for (int i = 0; i < 4; i++) {
			const std::string n = "ulp-soft-eng" + std::to_string(i);
			EXPECT_EQ(get(during, n), get(before, n) + 1) << n;
		}
	}
	// Destroying the device joins them all.
	const auto after = thread_names();
	for (int i = 0; i < 4; i++) {
		const std::string n = "ulp-soft-eng" + std::to_string(i);
		EXPECT_EQ(get(after, n), get(before, n)) << n;
	}
}

// An application that takes SIGTERM synchronously (ulp-targetd: blocked in main, then
// sigwaitinfo) must not have it delivered to a provider thread, whose default action would
// end the process: the provider's threads start with every signal blocked, whatever the mask
// of the thread that created the device (core/signals_blocked.h).
TEST(SoftEngines, ThreadsStartWithSignalsBlocked)
{
	sigset_t term, old;
	sigemptyset(&term);
	sigaddset(&term, SIGTERM);
	ASSERT_EQ(pthread_sigmask(SIG_UNBLOCK, &term, &old), 0);
	auto d = engines_dev(2, soft::Wire::Auto, soft::Exec::Engine, 0, "127.0.0.4");
	pthread_sigmask(SIG_SETMASK, &old, nullptr);
	ASSERT_TRUE(d);
	ASSERT_EQ(soft::engine_count(*d), 2u);
	// SigBlk of each engine thread, once both have named themselves (bounded).
	std::map<pid_t, std::string> engines;
	for (auto until = Clock::now() + kWait; engines.size() < 2 && Clock::now() < until;) {
		engines.clear();
		for_each_thread([&](pid_t tid, const std::string &name) {
			if (name.rfind("ulp-soft-eng", 0) == 0)
				engines[tid] = name;
		});
		std::this_thread::sleep_for(1ms);
	}
	ASSERT_GE(engines.size(), 2u);
	const uint64_t sigterm_bit = 1ull << (SIGTERM - 1);
	for (const auto &[tid, name] : engines) {
		std::ifstream f("/proc/self/task/" + std::to_string(tid) + "/status");
		std::string line;
		uint64_t blocked = 0;
		bool found = false;
		while (std::getline(f, line))
			if (line.rfind("SigBlk:", 0) == 0) {
				blocked = std::stoull(line.substr(7), nullptr, 16);
				found = true;
			}
		if (!found)
			continue; // the thread of another device ended meanwhile
		EXPECT_NE(blocked & sigterm_bit, 0u)
		    << name << " (tid " << tid << ") takes SIGTERM";
	}
}

// A QP's work runs on its engine's thread: an injected QP error, raised by the engine as it
// takes the QP's first WR, reports QP_FATAL on the thread that executes the QP. Four QPs on
// four vectors: four engine threads, none of them the poster's; a fifth QP on vector 0
// shares engine 0's.
TEST(SoftEngines, DifferentVectorsRunOnDifferentThreads)
{
	auto d = engines_dev(4);
	ASSERT_TRUE(d);
	ASSERT_EQ(soft::engine_count(*d), 4u);
	constexpr int kQps = 5;
	Side req[kQps], rsp[kQps];
	Seen seen;
	for (int i = 0; i < kQps; i++) {
		req[i].init(*d, 4096, 16, nullptr, i % 4);
		rsp[i].init(*d, 4096, 16, nullptr, 0);
		create_seen_qp(req[i], seen);
		rsp[i].create_qp();
		ASSERT_TRUE(req[i].qp && rsp[i].qp);
		ASSERT_EQ(connect_pair(req[i], rsp[i]), 0);
		EXPECT_EQ(soft::qp_engine(*req[i].qp), static_cast<unsigned>(i % 4));
		soft::FaultRule r;
		r.point = soft::FaultPoint::QpError;
		r.qp_num = req[i].qp->qp_num();
		ASSERT_GE(soft::inject_fault(*d, r), 0);
	}
	Cqe cqe[kQps];
	for (int i = 0; i < kQps; i++)
		ASSERT_EQ(post_send(*req[i].qp, &cqe[i], req[i].sge(0, 8)), 0);
	ASSERT_TRUE(seen.wait(kQps))
	    << "QP_FATAL reported for " << seen.by_qpn.size() << " of " << kQps << " QPs";
	for (int i = 0; i < kQps; i++) {
		auto w = poll_n(*req[i].scq, 1);
		ASSERT_EQ(w.size(), 1u);
		EXPECT_EQ(w[0].status, WcStatus::WrFlushErr);
	}
	std::lock_guard g(seen.lock);
	std::set<pid_t> tids;
	for (int i = 0; i < 4; i++) {
		auto [tid, name] = seen.by_qpn.at(req[i].qp->qp_num());
		EXPECT_NE(tid, this_tid()) << "QP " << i << " ran on the poster's thread";
		EXPECT_EQ(name, "ulp-soft-eng" + std::to_string(i)) << "QP on vector " << i;
		tids.insert(tid);
	}
	EXPECT_EQ(tids.size(), 4u) << "four vectors, four engine threads";
	EXPECT_EQ(seen.by_qpn.at(req[4].qp->qp_num()).first,
	          seen.by_qpn.at(req[0].qp->qp_num()).first)
	    << "vector 0 again: engine 0 again";
}

// Inline mode keeps the count and the steering; every engine runs on the caller's thread.
TEST(SoftEngines, InlineEnginesRunOnTheCaller)
{
	auto d = engines_dev(4, soft::Wire::Auto, soft::Exec::Inline);
	ASSERT_TRUE(d);
	ASSERT_EQ(soft::engine_count(*d), 4u);
	Side req[4], rsp[4];
	Seen seen;
	for (int i = 0; i < 4; i++) {
		req[i].init(*d, 4096, 16, nullptr, i);
		rsp[i].init(*d, 4096, 16, nullptr, 3 - i);
		create_seen_qp(req[i], seen);
		rsp[i].create_qp();
		ASSERT_EQ(connect_pair(req[i], rsp[i]), 0);
		EXPECT_EQ(soft::qp_engine(*req[i].qp), static_cast<unsigned>(i));
		EXPECT_EQ(soft::qp_engine(*rsp[i].qp), static_cast<unsigned>(3 - i));
	}
	// Traffic first: a WRITE and a SEND from each, done by the time poll returns them.
	for (int i = 0; i < 4; i++) {
		Cqe rc, wc, sc;
		ASSERT_EQ(post_recv(*rsp[i].qp, &rc, rsp[i].sge(256, 8)), 0);
		req[i].buf[0] = static_cast<uint8_t>(0x40 + i);
		req[i].buf[8] = static_cast<uint8_t>(0x50 + i);
		ASSERT_EQ(post_rdma(*req[i].qp, &wc, req[i].sge(0, 1), WrOpcode::RdmaWrite,
		                    rsp[i].at(0), rsp[i].mr->rkey(), 0),
		          0);
		ASSERT_EQ(post_send(*req[i].qp, &sc, req[i].sge(8, 1)), 0);
		auto w = poll_n(*req[i].scq, 1);
		ASSERT_EQ(w.size(), 1u);
		EXPECT_EQ(w[0].status, WcStatus::Success);
		auto r = poll_n(*rsp[i].rcq, 1);
		ASSERT_EQ(r.size(), 1u);
		EXPECT_EQ(rsp[i].buf[0], 0x40 + i);
		EXPECT_EQ(rsp[i].buf[256], 0x50 + i);
	}
	for (int i = 0; i < 4; i++) {
		soft::FaultRule r;
		r.point = soft::FaultPoint::QpError;
		r.qp_num = req[i].qp->qp_num();
		ASSERT_GE(soft::inject_fault(*d, r), 0);
		Cqe c;
		ASSERT_EQ(post_send(*req[i].qp, &c, req[i].sge(0, 8)), 0);
		auto w = poll_n(*req[i].scq, 1);
		ASSERT_EQ(w.size(), 1u);
		EXPECT_EQ(w[0].status, WcStatus::WrFlushErr);
	}
	std::lock_guard g(seen.lock);
	ASSERT_EQ(seen.by_qpn.size(), 4u);
	for (auto &[qpn, who] : seen.by_qpn)
		EXPECT_EQ(who.first, this_tid()) << "QP " << qpn;
}

// ---------------------------------------------------------------------------------------------
// Traffic between engines of one device, on each wire

namespace
{

struct WireCase {
	const char *name;
	soft::Wire wire;
	const char *qp_wire; // what soft::qp_wire reports
};

const WireCase kWires[] = {
    {"inproc", soft::Wire::Auto, "inproc"},
    {"socket", soft::Wire::Socket, "socket"},
    {"shm", soft::Wire::Shm, "shm"},
};

class CrossEngine : public ::testing::TestWithParam<WireCase>
{
protected:
	// A on vector 1, B on vector 2 of one device with 4 engines, connected through the CM
	// on the wire of the parameter.
	void SetUp() override
	{
		ULP_SKIP_UNLESS_SOFT("engines are the soft provider's");
		dev = engines_dev(4, GetParam().wire);
		ASSERT_TRUE(dev);
		ASSERT_EQ(soft::engine_count(*dev), 4u);
		a.init(*dev, 1 << 16, 512, nullptr, 1);
		b.init(*dev, 1 << 16, 512, nullptr, 2);
		cm = std::make_unique<CmPair>();
		cm->active = &a;
		cm->passive = &b;
		ASSERT_TRUE(cm->connect("127.0.0.1:0", "127.0.0.1"));
		ASSERT_EQ(std::string(soft::qp_wire(*a.qp)), GetParam().qp_wire);
		ASSERT_EQ(std::string(soft::qp_wire(*b.qp)), GetParam().qp_wire);
		ASSERT_EQ(soft::qp_engine(*a.qp), 1u);
		ASSERT_EQ(soft::qp_engine(*b.qp), 2u);
	}
	void TearDown() override
	{
		cm.reset(); // the QPs, before their CQs and PDs
	}

	QpState state_becomes(Qp &qp, QpState s)
	{
		auto until = Clock::now() + kWait;
		while (qp.state() != s && Clock::now() < until)
			std::this_thread::sleep_for(1ms);
		return qp.state();
	}

	DevPtr dev;
	Side a, b;
	std::unique_ptr<CmPair> cm;
};

// Each side's messages of one round: a WRITE of the sequence number into the peer's
// buffer, unsignaled, then a SEND of it; the peer checks them in order.
constexpr int kRound = 32;
constexpr size_t kRecvOff = 0;      // receive slots: 8 bytes each
constexpr size_t kWriteOff = 16384; // WRITE targets: 8 bytes each
constexpr size_t kSrcOff = 32768;   // sources: WRITE at slot*16, SEND at slot*16+8

struct Flow {
	Side *from, *to;
	Cqe send_cqe[kRound];
	Cqe recv_cqe[kRound];

	void post_round(uint64_t base)
	{
		for (int k = 0; k < kRound; k++)
			ASSERT_EQ(post_recv(*to->qp, &recv_cqe[k], to->sge(kRecvOff + k * 8, 8)),
			          0);
		for (int k = 0; k < kRound; k++) {
			const uint64_t seq = base + static_cast<uint64_t>(k);
			const size_t src = kSrcOff + static_cast<size_t>(k) * 16;
			std::memcpy(&from->buf[src], &seq, 8);
			std::memcpy(&from->buf[src + 8], &seq, 8);
			ASSERT_EQ(post_rdma(*from->qp, nullptr, from->sge(src, 8),
			                    WrOpcode::RdmaWrite, to->at(kWriteOff + k * 8),
			                    to->mr->rkey(), 0),
			          0);
			ASSERT_EQ(post_send(*from->qp, &send_cqe[k], from->sge(src + 8, 8)), 0);
		}
	}

	void check_round(uint64_t base)
	{
		auto s = poll_n(*from->scq, kRound);
		ASSERT_EQ(s.size(), size_t{kRound});
		for (int k = 0; k < kRound; k++) {
			EXPECT_EQ(s[k].status, WcStatus::Success);
			EXPECT_EQ(s[k].wr_cqe, &send_cqe[k]) << "send completions out of order";
		}
		auto r = poll_n(*to->rcq, kRound);
		ASSERT_EQ(r.size(), size_t{kRound});
		for (int k = 0; k < kRound; k++) {
			ASSERT_EQ(r[k].status, WcStatus::Success);
			EXPECT_EQ(r[k].wr_cqe, &recv_cqe[k]) << "receives consumed out of order";
			EXPECT_EQ(r[k].byte_len, 8u);
			uint64_t got, wrote;
			std::memcpy(&got, &to->buf[kRecvOff + k * 8], 8);
			std::memcpy(&wrote, &to->buf[kWriteOff + k * 8], 8);
			EXPECT_EQ(got, base + k) << "SEND " << k << " of the round from " << base;
			EXPECT_EQ(wrote, base + k) << "the WRITE before SEND " << k;
		}
	}
};

} // namespace

// Both directions at once, each engine a requester and a responder: every message arrives
// once, in order, its WRITE before its SEND.
TEST_P(CrossEngine, BothWaysInOrder)
{
	Flow ab{&a, &b, {}, {}}, ba{&b, &a, {}, {}};
	constexpr int kRounds = 20;
	for (int round = 0; round < kRounds; round++) {
		const uint64_t base = 1000 + static_cast<uint64_t>(round) * kRound;
		ab.post_round(base);
		ba.post_round(base + 1000000);
		ab.check_round(base);
		ba.check_round(base + 1000000);
		if (HasFatalFailure() || HasFailure())
			return;
	}
	// Every WR completed but the unsignaled WRITEs, which succeeded silently.
	const auto ca = soft::qp_counters(*a.qp);
	EXPECT_EQ(ca.completed, ca.posted - uint64_t{kRounds} * kRound);
	EXPECT_EQ(ca.errors + ca.flushes, 0u);
}

// A SEND finds no receive on the other engine's QP: RNR NAKs until one is posted, then
// it lands (rnr_retry 7, rdma_cm's default through the CmPair).
TEST_P(CrossEngine, RnrThenDelivered)
{
	uint64_t seq = 0x5eed;
	std::memcpy(&a.buf[kSrcOff], &seq, 8);
	Cqe sc, rc;
	ASSERT_EQ(post_send(*a.qp, &sc, a.sge(kSrcOff, 8)), 0);
	auto until = Clock::now() + kWait;
	while (soft::qp_counters(*a.qp).rnr_naks < 2 && Clock::now() < until)
		std::this_thread::sleep_for(1ms);
	EXPECT_GE(soft::qp_counters(*a.qp).rnr_naks, 2u);
	EXPECT_TRUE(drain_cq(*a.scq).empty()) << "completed without a receive";
	ASSERT_EQ(post_recv(*b.qp, &rc, b.sge(kRecvOff, 8)), 0);
	auto s = poll_n(*a.scq, 1);
	ASSERT_EQ(s.size(), 1u);
	EXPECT_EQ(s[0].status, WcStatus::Success);
	auto r = poll_n(*b.rcq, 1);
	ASSERT_EQ(r.size(), 1u);
	EXPECT_EQ(r[0].status, WcStatus::Success);
	EXPECT_EQ(r[0].wr_cqe, &rc);
	uint64_t got;
	std::memcpy(&got, &b.buf[kRecvOff], 8);
	EXPECT_EQ(got, seq);
	EXPECT_EQ(a.qp->state(), QpState::Rts);
	EXPECT_EQ(b.qp->state(), QpState::Rts);
}

// A WRITE with a bad rkey: REM_ACCESS_ERR at A, everything after it flushed in order; B
// (the other engine) enters ERR too and flushes its receives.
TEST_P(CrossEngine, AccessErrorFlushesBoth)
{
	constexpr int kRecvs = 8, kSends = 4;
	Cqe rc[kRecvs], wc, sc[kSends];
	for (int i = 0; i < kRecvs; i++)
		ASSERT_EQ(post_recv(*b.qp, &rc[i], b.sge(kRecvOff + i * 8, 8)), 0);
	ASSERT_EQ(post_rdma(*a.qp, &wc, a.sge(kSrcOff, 8), WrOpcode::RdmaWrite, b.at(kWriteOff),
	                    b.mr->rkey() ^ 0x5a5a00, SEND_SIGNALED),
	          0);
	for (int i = 0; i < kSends; i++)
		ASSERT_EQ(post_send(*a.qp, &sc[i], a.sge(kSrcOff, 8)), 0);
	auto s = poll_n(*a.scq, 1 + kSends);
	ASSERT_EQ(s.size(), size_t{1 + kSends});
	EXPECT_EQ(s[0].wr_cqe, &wc);
	EXPECT_EQ(s[0].status, WcStatus::RemAccessErr);
	for (int i = 0; i < kSends; i++) {
		EXPECT_EQ(s[1 + i].wr_cqe, &sc[i]);
		EXPECT_EQ(s[1 + i].status, WcStatus::WrFlushErr);
	}
	EXPECT_EQ(state_becomes(*a.qp, QpState::Err), QpState::Err);
	EXPECT_EQ(state_becomes(*b.qp, QpState::Err), QpState::Err);
	auto r = poll_n(*b.rcq, kRecvs);
	ASSERT_EQ(r.size(), size_t{kRecvs});
	for (int i = 0; i < kRecvs; i++) {
		EXPECT_EQ(r[i].wr_cqe, &rc[i]);
		EXPECT_EQ(r[i].status, WcStatus::WrFlushErr);
	}
	// Posting to either QP now flushes at once.
	Cqe late;
	ASSERT_EQ(post_send(*b.qp, &late, b.sge(kSrcOff, 8)), 0);
	auto l = poll_n(*b.scq, 1);
	ASSERT_EQ(l.size(), 1u);
	EXPECT_EQ(l[0].status, WcStatus::WrFlushErr);
}

// B forced into ERR (from this thread) while A's engine has a round of WRITEs and SENDs
// for it queued: every WR of A ends, in order, each once; every receive of B ends once; what
// A saw delivered, B received.
TEST_P(CrossEngine, ForcedErrorUnderTraffic)
{
	Flow ab{&a, &b, {}, {}};
	ab.post_round(1);
	soft::force_qp_error(*b.qp);
	// The SENDs' completions, in order; the unsignaled WRITEs show up (with no cqe) only
	// if they failed or were flushed.
	std::vector<Wc> sends;
	size_t nulls = 0;
	auto until = Clock::now() + kWait;
	while (sends.size() < size_t{kRound} && Clock::now() < until) {
		for (auto &w : drain_cq(*a.scq)) {
			if (w.wr_cqe)
				sends.push_back(w);
			else
				nulls++;
		}
		std::this_thread::sleep_for(100us);
	}
	ASSERT_EQ(sends.size(), size_t{kRound}) << "every SEND of A completes";
	size_t ok = 0;
	bool failed = false;
	for (int k = 0; k < kRound; k++) {
		EXPECT_EQ(sends[k].wr_cqe, &ab.send_cqe[k]) << "in order";
		if (sends[k].status == WcStatus::Success) {
			ok++;
			EXPECT_FALSE(failed) << "a success after an error";
		} else {
			failed = true;
			EXPECT_TRUE(sends[k].status == WcStatus::WrFlushErr ||
			            sends[k].status == WcStatus::RetryExcErr)
			    << wc_status_str(sends[k].status);
		}
	}
	EXPECT_LE(nulls, size_t{kRound}) << "more WRITE completions than WRITEs";
	auto r = poll_n(*b.rcq, kRound);
	ASSERT_EQ(r.size(), size_t{kRound}) << "every receive of B completes";
	size_t recv_ok = 0;
	for (int k = 0; k < kRound; k++) {
		EXPECT_EQ(r[k].wr_cqe, &ab.recv_cqe[k]);
		if (r[k].status == WcStatus::Success)
			recv_ok++;
		else
			EXPECT_EQ(r[k].status, WcStatus::WrFlushErr);
	}
	// B may have taken a SEND whose answer A then lost to the error: never the reverse.
	EXPECT_LE(ok, recv_ok);
	std::this_thread::sleep_for(20ms);
	for (auto &w : drain_cq(*a.scq))
		EXPECT_EQ(w.wr_cqe, nullptr) << "a SEND completed twice";
	EXPECT_TRUE(drain_cq(*b.rcq).empty()) << "a receive completed twice";
}

INSTANTIATE_TEST_SUITE_P(Wires, CrossEngine, ::testing::ValuesIn(kWires),
                         [](const auto &info) { return std::string(info.param.name); });

// ---------------------------------------------------------------------------------------------
// One SRQ, two responder QPs on two engines, two requesters on two more

TEST(SoftEngines, SharedSrqAcrossEngines)
{
	ULP_SKIP_UNLESS_SOFT("engines are the soft provider's");
	auto d = engines_dev(4);
	ASSERT_TRUE(d);
	auto pd = d->alloc_pd();
	std::vector<uint8_t> buf(1 << 16);
	auto mr = pd->reg_mr(buf.data(), buf.size(),
	                     ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ);
	ASSERT_TRUE(mr);
	std::unique_ptr<Cq> cq[4];
	for (int v = 0; v < 4; v++) {
		CqInitAttr ca;
		ca.cqe = 1024;
		ca.comp_vector = v;
		cq[v] = d->create_cq(ca);
		ASSERT_TRUE(cq[v]);
	}
	constexpr int kPer = 256, kRecv = 2 * kPer;
	SrqInitAttr sa;
	sa.max_wr = kRecv;
	sa.max_sge = 1;
	auto srq = pd->create_srq(sa);
	ASSERT_TRUE(srq);
	auto make_qp = [&](int v, Srq *s) {
		QpInitAttr a;
		a.send_cq = cq[v].get();
		a.recv_cq = cq[v].get();
		a.srq = s;
		a.cap.max_send_wr = 64;
		a.cap.max_recv_wr = s ? 0 : 4;
		a.cap.max_send_sge = a.cap.max_recv_sge = 1;
		return pd->create_qp(a);
	};
	// Requesters on engines 1 and 2, responders on 0 and 3.
	auto r0 = make_qp(1, nullptr), r1 = make_qp(2, nullptr);
	auto s0 = make_qp(0, srq.get()), s1 = make_qp(3, srq.get());
	ASSERT_TRUE(r0 && r1 && s0 && s1);
	ASSERT_EQ(connect_qp(*r0, *d, s0->qp_num()), 0);
	ASSERT_EQ(connect_qp(*s0, *d, r0->qp_num()), 0);
	ASSERT_EQ(connect_qp(*r1, *d, s1->qp_num()), 0);
	ASSERT_EQ(connect_qp(*s1, *d, r1->qp_num()), 0);
	ASSERT_EQ(soft::qp_engine(*r0), 1u);
	ASSERT_EQ(soft::qp_engine(*r1), 2u);
	ASSERT_EQ(soft::qp_engine(*s0), 0u);
	ASSERT_EQ(soft::qp_engine(*s1), 3u);

	std::vector<Cqe> rcqe(kRecv);
	for (int i = 0; i < kRecv; i++) {
		RecvWr wr;
		Sge sg{reinterpret_cast<uint64_t>(&buf[static_cast<size_t>(i) * 8]), 8, mr->lkey()};
		wr.wr_cqe = &rcqe[i];
		wr.sg_list = &sg;
		wr.num_sge = 1;
		const RecvWr *bad = nullptr;
		ASSERT_EQ(srq->post_recv(&wr, &bad), 0);
	}
	// Sources: 8 bytes per message, (requester << 16) | i.
	constexpr size_t kSrc = 32768;
	for (int q = 0; q < 2; q++)
		for (int i = 0; i < kPer; i++) {
			uint64_t v = (uint64_t(q) << 16) | uint64_t(i);
			std::memcpy(&buf[kSrc + (size_t(q) * kPer + i) * 8], &v, 8);
		}
	// Both requesters post in batches that fit their send queues, at the same time.
	auto drive = [&](Qp &qp, Cq &scq, int q) {
		std::vector<Cqe> c(kPer);
		for (int at = 0; at < kPer; at += 32) {
			for (int i = at; i < at + 32; i++) {
				Sge sg{reinterpret_cast<uint64_t>(
				           &buf[kSrc + (size_t(q) * kPer + i) * 8]),
				       8, mr->lkey()};
				SendWr wr;
				wr.wr_cqe = &c[i];
				wr.sg_list = &sg;
				wr.num_sge = 1;
				wr.opcode = WrOpcode::Send;
				wr.send_flags = SEND_SIGNALED;
				const SendWr *bad = nullptr;
				EXPECT_EQ(qp.post_send(&wr, &bad), 0);
			}
			auto w = poll_n(scq, 32);
			EXPECT_EQ(w.size(), 32u);
			for (auto &x : w)
				EXPECT_EQ(x.status, WcStatus::Success);
		}
	};
	std::thread t0([&] { drive(*r0, *cq[1], 0); });
	drive(*r1, *cq[2], 1);
	t0.join();
	// Receives: on s0's CQ (vector 0) r0's messages, on s1's (vector 3) r1's, each in its
	// sender's order; every SRQ entry taken exactly once.
	std::set<const Cqe *> used;
	for (int q = 0; q < 2; q++) {
		auto w = poll_n(q == 0 ? *cq[0] : *cq[3], kPer);
		ASSERT_EQ(w.size(), size_t{kPer});
		for (int i = 0; i < kPer; i++) {
			ASSERT_EQ(w[i].status, WcStatus::Success);
			EXPECT_EQ(w[i].qp, q == 0 ? s0.get() : s1.get());
			EXPECT_TRUE(used.insert(w[i].wr_cqe).second) << "receive taken twice";
			auto idx = static_cast<size_t>(w[i].wr_cqe - rcqe.data());
			uint64_t v;
			std::memcpy(&v, &buf[idx * 8], 8);
			EXPECT_EQ(v, (uint64_t(q) << 16) | uint64_t(i)) << "requester " << q;
		}
	}
	EXPECT_EQ(used.size(), size_t{kRecv});
	r0.reset();
	r1.reset();
	s0.reset();
	s1.reset();
}

// Teardown across engines: responders on some engines destroyed while requesters on others
// still have WRITEs queued; every requester WR ends (done or in error) within the bound,
// then everything goes, the device last.
TEST(SoftEngines, DestroyPeersUnderTraffic)
{
	ULP_SKIP_UNLESS_SOFT("engines are the soft provider's");
	auto d = engines_dev(4);
	ASSERT_TRUE(d);
	constexpr int kPairs = 4, kWrs = 64;
	Side req[kPairs], rsp[kPairs];
	for (int i = 0; i < kPairs; i++) {
		req[i].init(*d, 1 << 16, 256, nullptr, i);
		rsp[i].init(*d, 1 << 16, 256, nullptr, (i + 1) % 4);
		req[i].create_qp();
		rsp[i].create_qp();
		ASSERT_EQ(connect_pair(req[i], rsp[i]), 0);
	}
	Cqe c[kPairs][kWrs];
	for (int i = 0; i < kPairs; i++)
		for (int k = 0; k < kWrs; k++)
			ASSERT_EQ(post_rdma(*req[i].qp, &c[i][k], req[i].sge(0, 4096),
			                    WrOpcode::RdmaWrite, rsp[i].at(4096),
			                    rsp[i].mr->rkey()),
			          0);
	for (int i = 0; i < kPairs; i++) {
		rsp[i].own_qp.reset();
		rsp[i].qp = nullptr;
	}
	for (int i = 0; i < kPairs; i++) {
		auto w = poll_n(*req[i].scq, kWrs);
		ASSERT_EQ(w.size(), size_t{kWrs}) << "pair " << i;
		bool failed = false;
		for (int k = 0; k < kWrs; k++) {
			EXPECT_EQ(w[k].wr_cqe, &c[i][k]) << "in order";
			if (w[k].status != WcStatus::Success)
				failed = true;
			else
				EXPECT_FALSE(failed) << "a success after an error";
		}
	}
}

// ---------------------------------------------------------------------------------------------
// Spinning

namespace
{

// A thread's nice value (/proc/self/task/TID/stat, field 19), or 100 if it cannot be read.
int nice_of(pid_t tid)
{
	std::ifstream f("/proc/self/task/" + std::to_string(tid) + "/stat");
	std::string s;
	std::getline(f, s);
	const auto rp = s.rfind(')');
	if (rp == std::string::npos)
		return 100;
	std::istringstream in(s.substr(rp + 2)); // field 3 (state) on
	std::string field;
	for (int i = 3; i < 19 && (in >> field); i++) {
	}
	int nice = 100;
	in >> nice;
	return nice;
}

// The nice value an idle engine spins at in this process: base + ULP_SOFT_SPIN_NICE (5),
// or base when the process may not lower a thread's nice value again (the engine's probe).
int spinning_nice(int base)
{
	bool can = false;
	std::thread([&] {
		const auto t = static_cast<id_t>(this_tid());
		can = base < 19 && setpriority(PRIO_PROCESS, t, 19) == 0 &&
		      setpriority(PRIO_PROCESS, t, base) == 0;
	}).join();
	const char *env = getenv("ULP_SOFT_SPIN_NICE");
	const int step = env && *env ? std::clamp(std::atoi(env), 0, 19) : 5;
	return can && step ? std::min(base + step, 19) : base;
}

// The engine eng's nice values (value -> samples), sampled on a thread of its own while
// it works and idles in turns: each round's completions end its work, then it idles.
std::map<int, int> nice_during_traffic(Device &d, pid_t eng)
{
	std::map<int, int> seen;
	Side a, b;
	a.init(d);
	b.init(d);
	a.create_qp();
	b.create_qp();
	if (::testing::Test::HasFailure()) // the caller asserts none
		return seen;
	EXPECT_EQ(connect_pair(a, b), 0);
	if (::testing::Test::HasFailure())
		return seen;
	std::atomic<bool> stop{false};
	std::thread sampler([&] {
		while (!stop.load())
			seen[nice_of(eng)]++;
	});
	std::vector<Cqe> cqe(16);
	for (int round = 0; round < 200 && !::testing::Test::HasFailure(); round++) {
		for (auto &c : cqe)
			EXPECT_EQ(post_rdma(*a.qp, &c, a.sge(0, 4096), WrOpcode::RdmaWrite, b.at(0),
			                    b.mr->rkey()),
			          0);
		EXPECT_EQ(poll_n(*a.scq, cqe.size()).size(), cqe.size());
		std::this_thread::sleep_for(200us);
	}
	stop = true;
	sampler.join();
	return seen;
}

} // namespace

// An idle engine spins at a higher nice value, so that its busy-wait takes no core from
// runnable work, and is back at its own before it executes anything (engine.cc,
// ULP_SOFT_SPIN_NICE). Sampled from /proc while traffic starts and stops: every sample is
// the base or the spinning value, and once the engine sleeps it is at the base again. A
// process that may not lower a nice value again (no CAP_SYS_NICE) never raises it.
TEST(SoftEngines, IdleSpinRunsAtAHigherNiceAndWorkAtItsOwn)
{
	const auto before = engine_tids();
	DevPtr d;
	{
		ScopedEnv env("ULP_SOFT_SPIN_US", nullptr); // the default spin
		d = engines_dev(1);
	}
	ASSERT_TRUE(d);
	const pid_t eng = new_engine_tid(before);
	ASSERT_NE(eng, 0);
	const int base = getpriority(PRIO_PROCESS, static_cast<id_t>(this_tid()));
	const int spinning = spinning_nice(base);
	auto seen = nice_during_traffic(*d, eng);
	ASSERT_FALSE(HasFailure());
	for (auto &[nice, n] : seen) {
		EXPECT_TRUE(nice == base || nice == spinning)
		    << "nice " << nice << " seen " << n << " times (base " << base << ", spinning "
		    << spinning << ")";
	}
	if (spinning != base) {
		EXPECT_GT(seen[spinning], 0) << "the idle engine never spun at nice " << spinning;
	}
	// Asleep (its spin is at most 1 ms): at its own value again.
	std::this_thread::sleep_for(20ms);
	EXPECT_EQ(nice_of(eng), base);
}

// ULP_SOFT_SPIN_US=0: an idle engine sleeps at once and never spins, so it is never seen
// at its spinning nice value under the same traffic (read when the engine starts).
TEST(SoftEngines, SpinTimeZeroSleepsAtOnce)
{
	const int base = getpriority(PRIO_PROCESS, static_cast<id_t>(this_tid()));
	const int spinning = spinning_nice(base);
	if (spinning == base)
		GTEST_SKIP() << "this process may not lower a nice value again: spins are not "
		                "visible in the nice value";
	const auto before = engine_tids();
	DevPtr d;
	{
		ScopedEnv env("ULP_SOFT_SPIN_US", "0");
		d = engines_dev(1);
	}
	ASSERT_TRUE(d);
	const pid_t eng = new_engine_tid(before);
	ASSERT_NE(eng, 0);
	auto seen = nice_during_traffic(*d, eng);
	ASSERT_FALSE(HasFailure());
	EXPECT_GT(seen[base], 0);
	EXPECT_EQ(seen.count(spinning), 0u)
	    << "the engine spun (seen at nice " << spinning << " " << seen[spinning] << " times)";
}
