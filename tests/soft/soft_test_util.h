// SPDX-License-Identifier: MIT
// tests/soft/soft_test_util.h - helpers for the soft provider's own tests.
//
// Every wait here is bounded (kWait unless told) and reports a timeout to the caller, who
// fails the test: a broken provider must make the suite fail, never hang.
#pragma once

#include "core/cm.h"
#include "core/device.h"
#include "core/registry.h"
#include "providers/soft/soft.h"
#include "tests/common/event_queue.h"
#include "tests/common/test_device.h"

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace soft_test
{

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr auto kWait = 5s; // the bound of every wait that is expected to succeed

using ulp::test::EventQueue; // tests/common/event_queue.h

// An async event as recorded by a handler (the pointers are only compared, never used).
struct Ev {
	ulp::EventType type;
	ulp::Qp *qp = nullptr;
	ulp::Srq *srq = nullptr;
	ulp::Cq *cq = nullptr;
	ulp::Device *dev = nullptr;
};

inline ulp::EventHandler recorder(EventQueue<Ev> &q)
{
	return [&q](const ulp::AsyncEvent &e) { q.push(Ev{e.event, e.qp, e.srq, e.cq, e.device}); };
}

// A soft device destroyed at scope exit; or, on ULP_TEST_DEVICE, that device, borrowed
// (not destroyed).
struct DevDeleter {
	bool owned = true;
	void operator()(ulp::Device *d) const
	{
		if (owned)
			ulp::soft::destroy_device(d);
	}
};
using DevPtr = std::unique_ptr<ulp::Device, DevDeleter>;

// A soft device at ip; with ULP_TEST_DEVICE set, that device (the same one for every ip:
// sides a and b share it). Only the defaults of exec and profile exist there: a test that
// asks for others must have skipped (ULP_SKIP_UNLESS_SOFT) and fails here otherwise.
inline DevPtr make_dev(const std::string &ip, ulp::soft::Exec exec = ulp::soft::Exec::Engine,
                       ulp::soft::Profile profile = ulp::soft::Profile::Ib, uint64_t seed = 1)
{
	if (ulp::test::on_test_device()) {
		if (exec != ulp::soft::Exec::Engine || profile != ulp::soft::Profile::Ib) {
			ADD_FAILURE()
			    << "make_dev: Exec::Inline / a soft::Profile on ULP_TEST_DEVICE="
			    << ulp::test::test_device_name()
			    << ": the test must ULP_SKIP_UNLESS_SOFT";
			return DevPtr(nullptr, DevDeleter{false});
		}
		return DevPtr(ulp::test::test_device(), DevDeleter{false});
	}
	ulp::soft::DeviceConfig c;
	c.ip = ip;
	c.exec = exec;
	c.profile = profile;
	c.fault_seed = seed;
	return DevPtr(ulp::soft::create_device(c));
}

// The path MTU: 4096 on soft devices; on ULP_TEST_DEVICE the active MTU of its port 1
// (RoCE's follows the netdev's: rxe0 on a 1500-byte eth0 is at 1024).
inline uint32_t path_mtu(ulp::Device &dev)
{
	ulp::PortAttr pa;
	if (ulp::test::on_test_device() && dev.query_port(1, &pa) == 0 && pa.active_mtu >= 256 &&
	    pa.active_mtu < 4096)
		return pa.active_mtu;
	return 4096;
}

inline ulp::SockAddr addr(const std::string &s)
{
	auto a = ulp::SockAddr::parse(s);
	EXPECT_TRUE(a.has_value()) << s;
	return a.value_or(ulp::SockAddr{});
}

// Poll cq until n completions have been collected or the wait runs out. Returns what was
// collected (fewer than n on timeout).
inline std::vector<ulp::Wc> poll_n(ulp::Cq &cq, size_t n, std::chrono::milliseconds timeout = kWait)
{
	std::vector<ulp::Wc> out;
	auto until = Clock::now() + timeout;
	ulp::Wc wc[16];
	while (out.size() < n) {
		int got = cq.poll(std::span<ulp::Wc>(wc, std::min<size_t>(16, n - out.size())));
		for (int i = 0; i < got; i++)
			out.push_back(wc[i]);
		if (got > 0)
			continue;
		if (Clock::now() >= until)
			break;
		std::this_thread::sleep_for(100us);
	}
	return out;
}

// Everything in the CQ now (after an optional settle time for engine-mode devices).
inline std::vector<ulp::Wc> drain_cq(ulp::Cq &cq)
{
	std::vector<ulp::Wc> out;
	ulp::Wc wc[16];
	for (;;) {
		int got = cq.poll(wc);
		if (got <= 0)
			break;
		out.insert(out.end(), wc, wc + got);
	}
	return out;
}

// One side of a connection: PD, CQs, a QP and a registered buffer.
struct Side {
	ulp::Device *dev = nullptr;
	std::unique_ptr<ulp::Pd> pd;
	std::unique_ptr<ulp::Cq> scq, rcq;
	std::unique_ptr<ulp::Qp> own_qp; // when connected by hand (CM ids own theirs)
	ulp::Qp *qp = nullptr;
	std::vector<uint8_t> buf;
	std::unique_ptr<ulp::Mr> mr;
	EventQueue<Ev> events; // QP async events

	// vector: the CQs' completion vector (the send CQ's picks the QP's engine).
	void init(ulp::Device &d, size_t bufsize = 1 << 16, int cqe = 256,
	          ulp::CompChannel *ch = nullptr, int vector = 0)
	{
		dev = &d;
		pd = d.alloc_pd();
		ASSERT_TRUE(pd);
		ulp::CqInitAttr ca;
		ca.cqe = cqe;
		ca.channel = ch;
		ca.comp_vector = vector;
		scq = d.create_cq(ca);
		ca.channel = nullptr;
		rcq = d.create_cq(ca);
		ASSERT_TRUE(scq && rcq);
		buf.assign(bufsize, 0);
		mr = pd->reg_mr(buf.data(), buf.size(),
		                ulp::ACCESS_LOCAL_WRITE | ulp::ACCESS_REMOTE_WRITE |
		                    ulp::ACCESS_REMOTE_READ);
		ASSERT_TRUE(mr);
	}

	ulp::QpInitAttr qp_attr(ulp::Srq *srq = nullptr)
	{
		ulp::QpInitAttr a;
		a.send_cq = scq.get();
		a.recv_cq = rcq.get();
		a.srq = srq;
		a.cap.max_send_wr = 64;
		a.cap.max_recv_wr = 64;
		a.cap.max_send_sge = 4;
		a.cap.max_recv_sge = 4;
		a.cap.max_inline_data = 64;
		a.event_handler = recorder(events);
		return a;
	}

	void create_qp(ulp::Srq *srq = nullptr)
	{
		own_qp = pd->create_qp(qp_attr(srq));
		ASSERT_TRUE(own_qp) << "errno " << errno;
		qp = own_qp.get();
	}

	uint64_t at(size_t off) { return reinterpret_cast<uint64_t>(buf.data() + off); }
	ulp::Sge sge(size_t off, uint32_t len) { return ulp::Sge{at(off), len, mr->lkey()}; }
};

// Connect two QPs by hand (no CM): RESET->INIT->RTR->RTS, each pointed at the other by its
// device's GID and QP number.
inline int connect_qp(ulp::Qp &qp, ulp::Device &peer_dev, uint32_t peer_qpn, uint8_t rnr_retry = 7,
                      uint8_t min_rnr_timer = 1)
{
	ulp::QpAttr init;
	init.qp_state = ulp::QpState::Init;
	init.port_num = 1;
	init.qp_access_flags =
	    ulp::ACCESS_LOCAL_WRITE | ulp::ACCESS_REMOTE_WRITE | ulp::ACCESS_REMOTE_READ;
	int rc = qp.modify(init, ulp::QP_STATE | ulp::QP_PORT | ulp::QP_ACCESS_FLAGS);
	if (rc)
		return rc;
	ulp::QpAttrAv rtr;
	rtr.qp_state = ulp::QpState::Rtr;
	rtr.path_mtu = path_mtu(peer_dev);
	rtr.dest_qp_num = peer_qpn;
	rtr.rq_psn = 0;
	rtr.max_dest_rd_atomic = 4;
	rtr.min_rnr_timer = min_rnr_timer;
	rtr.ah_attr.dgid = peer_dev.gid();
	rc =
	    qp.modify(rtr, ulp::QP_STATE | ulp::QP_AV | ulp::QP_PATH_MTU | ulp::QP_DEST_QPN |
	                       ulp::QP_RQ_PSN | ulp::QP_MAX_DEST_RD_ATOMIC | ulp::QP_MIN_RNR_TIMER);
	if (rc)
		return rc;
	ulp::QpAttr rts;
	rts.qp_state = ulp::QpState::Rts;
	rts.sq_psn = 0;
	rts.timeout = 14;
	rts.retry_cnt = 7;
	rts.rnr_retry = rnr_retry;
	rts.max_rd_atomic = 4;
	return qp.modify(rts, ulp::QP_STATE | ulp::QP_SQ_PSN | ulp::QP_TIMEOUT | ulp::QP_RETRY_CNT |
	                          ulp::QP_RNR_RETRY | ulp::QP_MAX_QP_RD_ATOMIC);
}

inline int connect_pair(Side &a, Side &b, uint8_t rnr_retry = 7, uint8_t min_rnr_timer = 1)
{
	int rc = connect_qp(*a.qp, *b.dev, b.qp->qp_num(), rnr_retry, min_rnr_timer);
	if (!rc)
		rc = connect_qp(*b.qp, *a.dev, a.qp->qp_num(), rnr_retry, min_rnr_timer);
	return rc;
}

// Work-request builders. The cqes live in the caller's array so that WCs can be mapped
// back to the request that produced them.
inline int post_recv(ulp::Qp &qp, ulp::Cqe *cqe, const ulp::Sge &s)
{
	ulp::RecvWr wr;
	wr.wr_cqe = cqe;
	wr.sg_list = &s;
	wr.num_sge = 1;
	const ulp::RecvWr *bad = nullptr;
	return qp.post_recv(&wr, &bad);
}

inline int post_send(ulp::Qp &qp, ulp::Cqe *cqe, const ulp::Sge &s,
                     ulp::WrOpcode op = ulp::WrOpcode::Send, uint32_t flags = ulp::SEND_SIGNALED,
                     uint32_t imm = 0)
{
	ulp::SendWr wr;
	wr.wr_cqe = cqe;
	wr.sg_list = &s;
	wr.num_sge = s.length ? 1 : 0;
	wr.opcode = op;
	wr.send_flags = flags;
	wr.imm_data = imm;
	const ulp::SendWr *bad = nullptr;
	return qp.post_send(&wr, &bad);
}

inline int post_rdma(ulp::Qp &qp, ulp::Cqe *cqe, const ulp::Sge &s, ulp::WrOpcode op,
                     uint64_t raddr, uint32_t rkey, uint32_t flags = ulp::SEND_SIGNALED,
                     uint32_t imm = 0)
{
	ulp::RdmaWr wr;
	wr.wr_cqe = cqe;
	wr.sg_list = &s;
	wr.num_sge = s.length ? 1 : 0;
	wr.opcode = op;
	wr.send_flags = flags;
	wr.imm_data = imm;
	wr.remote_addr = raddr;
	wr.rkey = rkey;
	const ulp::SendWr *bad = nullptr;
	return qp.post_send(&wr, &bad);
}

// ---------------------------------------------------------------------------------------------
// CM: a listener on one device and an active id on another, with their events in a queue.

struct CmEv {
	ulp::CmId *id;
	ulp::CmEventType type;
	int status;
};

class CmPair
{
public:
	// Resources the passive side's QP is created with (set before connect()).
	Side *passive = nullptr;
	Side *active = nullptr;
	ulp::Srq *passive_srq = nullptr;
	EventQueue<CmEv> events;

	~CmPair()
	{
		// ids own their QPs; they go before the queue their handlers write to.
		active_id.reset();
		std::unique_ptr<ulp::CmId> p;
		{
			std::lock_guard g(lock_);
			p = std::move(passive_id);
		}
		p.reset();
		listen_id.reset();
	}

	// Listen on listen_addr, connect from src, wait for ESTABLISHED on both sides.
	// Port 0 listens on an ephemeral port (the one to use: listeners are abstract
	// sockets every process of the network namespace shares, so a fixed port collides
	// with parallel ctest runs). Sets active->qp and passive->qp. Returns false (with a
	// test failure) otherwise.
	bool connect(const std::string &listen_addr, const std::string &src)
	{
		auto handler = [this](ulp::CmId *id, ulp::CmEvent &ev) { on_event(id, ev); };
		ulp::Provider &prov = ulp::soft::provider();
		listen_id = prov.create_id(handler, this);
		active_id = prov.create_id(handler, this);
		if (!listen_id || !active_id) {
			ADD_FAILURE() << "create_id";
			return false;
		}
		ulp::SockAddr la = addr(listen_addr), sa = addr(src + ":0");
		int rc = listen_id->bind_addr(la);
		if (!rc)
			rc = listen_id->listen(8);
		if (rc) {
			ADD_FAILURE() << "bind/listen " << rc;
			return false;
		}
		la = listen_id->local_addr(); // the port listen() picked, when la's was 0
		rc = active_id->resolve_addr(&sa, la, 1000);
		if (rc || !expect(active_id.get(), ulp::CmEventType::AddrResolved))
			return false;
		rc = active_id->resolve_route(1000);
		if (rc || !expect(active_id.get(), ulp::CmEventType::RouteResolved))
			return false;
		rc = active_id->create_qp(*active->pd, active->qp_attr());
		if (rc) {
			ADD_FAILURE() << "create_qp " << rc;
			return false;
		}
		active->qp = active_id->qp();
		ulp::ConnParam cp;
		cp.responder_resources = 4;
		cp.initiator_depth = 4;
		rc = active_id->connect(cp);
		if (rc) {
			ADD_FAILURE() << "connect " << rc;
			return false;
		}
		if (!expect(active_id.get(), ulp::CmEventType::Established))
			return false;
		ulp::CmId *pid = passive_ptr();
		if (!pid || !expect(pid, ulp::CmEventType::Established))
			return false;
		passive->qp = pid->qp();
		return passive->qp != nullptr;
	}

	bool expect(ulp::CmId *id, ulp::CmEventType t, std::chrono::milliseconds timeout = kWait)
	{
		auto e = events.wait_for([&](const CmEv &v) { return v.id == id && v.type == t; },
		                         timeout);
		if (!e) {
			ADD_FAILURE() << "no CM event " << ulp::cm_event_str(t) << " within "
			              << timeout.count() << " ms";
			return false;
		}
		return true;
	}

	ulp::CmId *passive_ptr()
	{
		std::lock_guard g(lock_);
		return passive_id.get();
	}

	std::unique_ptr<ulp::CmId> listen_id, active_id;

private:
	void on_event(ulp::CmId *id, ulp::CmEvent &ev)
	{
		if (ev.event == ulp::CmEventType::ConnectRequest && ev.new_id) {
			int rc = ev.new_id->create_qp(*passive->pd, passive->qp_attr(passive_srq));
			ulp::ConnParam cp;
			cp.responder_resources = 4;
			cp.initiator_depth = 4;
			if (!rc)
				rc = ev.new_id->accept(cp);
			if (!rc) {
				std::lock_guard g(lock_);
				passive_id = std::move(ev.new_id);
			}
		}
		events.push(CmEv{id, ev.event, ev.status});
	}

	std::mutex lock_;
	std::unique_ptr<ulp::CmId> passive_id;
};

} // namespace soft_test

namespace soft_test
{

// Two devices (127.0.0.1 and 127.0.0.2), a side on each, QPs connected by hand.
struct HandPair {
	DevPtr da, db;
	Side a, b;

	bool init(ulp::soft::Exec exec = ulp::soft::Exec::Engine,
	          ulp::soft::Profile profile = ulp::soft::Profile::Ib, uint8_t rnr_retry = 7,
	          uint8_t min_rnr_timer = 1)
	{
		da = make_dev("127.0.0.1", exec, profile);
		db = make_dev("127.0.0.2", exec, profile);
		if (!da || !db) {
			ADD_FAILURE() << "create_device errno " << errno;
			return false;
		}
		a.init(*da);
		b.init(*db);
		a.create_qp();
		b.create_qp();
		if (!a.qp || !b.qp)
			return false;
		int rc = connect_pair(a, b, rnr_retry, min_rnr_timer);
		EXPECT_EQ(rc, 0);
		return rc == 0;
	}
};

} // namespace soft_test
