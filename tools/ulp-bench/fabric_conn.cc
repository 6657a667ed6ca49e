// SPDX-License-Identifier: MIT
#include "tools/ulp-bench/fabric_conn.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <optional>

namespace ulp::bench
{

namespace
{

std::atomic<pid_t> g_peer_pids[4]{}; // peer processes fatal() kills

constexpr uint32_t kRqDepthWant = 512; // receives the responder keeps posted

} // namespace

void set_peer_pid(pid_t pid, bool alive)
{
	for (auto &p : g_peer_pids) {
		pid_t want = alive ? 0 : pid;
		if (p.compare_exchange_strong(want, alive ? pid : 0))
			break;
	}
	at_fatal([] {
		for (auto &pp : g_peer_pids)
			if (pid_t p = pp.load(); p > 0)
				kill(p, SIGKILL);
	});
}

// ---------------------------------------------------------------------------------------------
// CmEvents

void CmEvents::push(CmId *id, const CmEvent &ev)
{
	Ev e;
	e.id = id;
	e.type = ev.event;
	e.status = ev.status;
	e.param = ev.param;
	{
		std::lock_guard g(mu_);
		q_.push_back(e);
	}
	cv_.notify_all();
}

CmEvents::Ev CmEvents::wait(const char *what, int timeout_ms)
{
	std::unique_lock g(mu_);
	if (!cv_.wait_for(g, std::chrono::milliseconds(timeout_ms), [&] { return !q_.empty(); }))
		fatal("timed out after %d ms waiting for %s", timeout_ms, what);
	Ev e = q_.front();
	q_.pop_front();
	return e;
}

bool CmEvents::wait_for(CmEventType want, int timeout_ms, Ev *out)
{
	auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
	std::unique_lock g(mu_);
	for (;;) {
		while (!q_.empty()) {
			Ev e = q_.front();
			q_.pop_front();
			if (e.type == want) {
				if (out)
					*out = e;
				return true;
			}
		}
		if (cv_.wait_until(g, deadline) == std::cv_status::timeout && q_.empty())
			return false;
	}
}

// ---------------------------------------------------------------------------------------------
// Side

void Side::init(Device *d, size_t bytes, int send_cqe, int recv_cqe, bool send_ch, bool recv_ch)
{
	dev = d;
	pd = dev->alloc_pd();
	if (!pd)
		fatal("alloc_pd on %s: %s", dev->name().c_str(), std::strerror(errno));
	if (send_ch || recv_ch) {
		channel = dev->create_comp_channel();
		if (!channel)
			fatal("create_comp_channel: %s", std::strerror(errno));
	}
	CqInitAttr ca;
	ca.cqe = send_cqe;
	ca.channel = send_ch ? channel.get() : nullptr;
	send_cq = dev->create_cq(ca);
	ca.cqe = recv_cqe;
	ca.channel = recv_ch ? channel.get() : nullptr;
	recv_cq = dev->create_cq(ca);
	if (!send_cq || !recv_cq)
		fatal("create_cq: %s", std::strerror(errno));
	// Registered memory from dma_alloc: memfd-backed, so the socket wire's peer can map
	// it and copy directly instead of carrying payloads in packets.
	mem = dma_alloc(bytes);
	if (!mem)
		fatal("dma_alloc(%zu): %s", bytes, std::strerror(errno));
	mr = pd->reg_mr(mem->addr(), bytes,
	                ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ);
	if (!mr)
		fatal("reg_mr(%zu): %s", bytes, std::strerror(errno));
}

void Side::fini()
{
	mr.reset();
	mem.reset();
	send_cq.reset();
	recv_cq.reset();
	channel.reset();
	pd.reset();
}

// ---------------------------------------------------------------------------------------------
// Responder

void Responder::start(Device *dev, Provider *prov, const std::string &ip, bool with_channel)
{
	const DeviceAttr &da = dev->attr();
	rq_depth_ = std::min(kRqDepthWant, da.max_qp_wr);
	side_.init(dev, kMaxMsg, 16, static_cast<int>(rq_depth_ + 16), false, with_channel);
	recvs_.resize(rq_depth_);
	for (uint32_t i = 0; i < rq_depth_; i++) {
		recvs_[i].self = this;
		recvs_[i].slot = i;
		recvs_[i].cqe.done = [](Cq *, Wc *wc) {
			auto *rc = container_of(wc->wr_cqe, &RecvCtx::cqe);
			if (wc->status != WcStatus::Success) {
				// A flush: the QP entered ERR, which on this side means the
				// requester disconnected (the CM event may still be on its way)
				// or failed (and reports its own error). Stop re-posting.
				if (wc->status == WcStatus::WrFlushErr) {
					rc->self->flushed_ = true;
					return;
				}
				fatal("responder: receive completion failed: %s (vendor_err %u)",
				      wc_status_str(wc->status), wc->vendor_err);
			}
			rc->self->post_recv(rc->slot);
		};
	}

	auto ip_addr = SockAddr::parse(ip, 0);
	if (!ip_addr)
		fatal("bad address %s", ip.c_str());
	// A pid-derived base keeps concurrent runs (CI beside a developer) apart; a port
	// taken by anyone else's listener just moves us on.
	uint16_t base = static_cast<uint16_t>(20000 + (getpid() * 37) % 30000);
	for (int i = 0; i < 200 && !port_; i++) {
		uint16_t p = static_cast<uint16_t>(base + i);
		auto id =
		    prov->create_id([this](CmId *cid, CmEvent &ev) { on_event(cid, ev); }, this);
		if (!id)
			fatal("create_id: %s", std::strerror(errno));
		SockAddr a = *ip_addr;
		a.set_port(p);
		int rc = id->bind_addr(a);
		if (rc == 0)
			rc = id->listen(4);
		if (rc == 0) {
			listen_id_ = std::move(id);
			port_ = p;
		} else if (rc != -EADDRINUSE) {
			fatal("listen on %s: %s", a.str().c_str(), std::strerror(-rc));
		}
	}
	if (!port_)
		fatal("no free port for the listener on %s", ip.c_str());
}

void Responder::post_recv(uint32_t slot)
{
	Sge sge{reinterpret_cast<uint64_t>(side_.mem->addr()), kMaxMsg, side_.mr->lkey()};
	RecvWr wr;
	wr.wr_cqe = &recvs_[slot].cqe;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	const RecvWr *bad = nullptr;
	std::lock_guard g(conn_mu_);
	if (!conn_id_ || !conn_id_->qp() || flushed_)
		return;
	int rc = conn_id_->qp()->post_recv(&wr, &bad);
	if (rc && !disconnected_ && !flushed_)
		fatal("responder: post_recv: %s", std::strerror(-rc));
}

void Responder::on_event(CmId *id, CmEvent &ev)
{
	switch (ev.event) {
	case CmEventType::ConnectRequest: {
		std::lock_guard g(conn_mu_);
		if (conn_id_)
			return; // one connection per responder; the CM rejects the rest
		std::unique_ptr<CmId> nid = std::move(ev.new_id);
		QpInitAttr qa;
		qa.send_cq = side_.send_cq.get();
		qa.recv_cq = side_.recv_cq.get();
		qa.cap.max_send_wr = 4;
		qa.cap.max_recv_wr = rq_depth_;
		qa.cap.max_send_sge = 1;
		qa.cap.max_recv_sge = 1;
		if (int rc = nid->create_qp(*side_.pd, qa))
			fatal("responder: create_qp: %s", std::strerror(-rc));
		for (uint32_t i = 0; i < rq_depth_; i++) {
			Sge sge{reinterpret_cast<uint64_t>(side_.mem->addr()), kMaxMsg,
			        side_.mr->lkey()};
			RecvWr wr;
			wr.wr_cqe = &recvs_[i].cqe;
			wr.sg_list = &sge;
			wr.num_sge = 1;
			const RecvWr *bad = nullptr;
			if (int rc = nid->qp()->post_recv(&wr, &bad))
				fatal("responder: post_recv: %s", std::strerror(-rc));
		}
		RemoteBuf rb;
		rb.addr = reinterpret_cast<uint64_t>(side_.mem->addr());
		rb.rkey = side_.mr->rkey();
		rb.length = kMaxMsg;
		ConnParam cp;
		cp.set_private_data({reinterpret_cast<const uint8_t *>(&rb), sizeof(rb)});
		const DeviceAttr &da = side_.dev->attr();
		cp.responder_resources =
		    static_cast<uint8_t>(std::min<uint32_t>(da.max_qp_rd_atom, 255));
		cp.initiator_depth = ev.param.initiator_depth;
		if (int rc = nid->accept(cp))
			fatal("responder: accept: %s", std::strerror(-rc));
		conn_id_ = std::move(nid);
		break;
	}
	case CmEventType::Established:
		established_ = true;
		break;
	case CmEventType::Disconnected:
	case CmEventType::DeviceRemoval:
		disconnected_ = true;
		break;
	default:
		break;
	}
	events_.push(id, ev);
}

int Responder::reap()
{
	std::array<Wc, 16> wc;
	int total = 0;
	for (;;) {
		int n = side_.recv_cq->poll(wc);
		if (n < 0)
			fatal("responder: poll: %s", std::strerror(-n));
		for (int i = 0; i < n; i++)
			wc[i].wr_cqe->done(side_.recv_cq.get(), &wc[i]);
		total += n;
		if (n < static_cast<int>(wc.size()))
			return total;
	}
}

int Responder::serve(int deadline_s)
{
	auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(deadline_s);
	if (int rc = side_.recv_cq->req_notify(CqNotify::NextComp))
		fatal("responder: req_notify: %s", std::strerror(-rc));
	while (!disconnected_) {
		if (std::chrono::steady_clock::now() > deadline) {
			std::fprintf(stderr, "ulp-bench fabric-peer: no disconnect within %d s\n",
			             deadline_s);
			return 1;
		}
		if (getppid() == 1)
			return 1; // the benchmark process is gone
		Cq *cq = nullptr;
		int rc = side_.channel->get_cq_event(&cq, 200);
		if (rc == -EAGAIN)
			continue;
		if (rc)
			fatal("responder: get_cq_event: %s", std::strerror(-rc));
		// Userspace has no REPORT_MISSED_EVENTS: re-arm, then poll once more.
		reap();
		if ((rc = side_.recv_cq->req_notify(CqNotify::NextComp)))
			fatal("responder: req_notify: %s", std::strerror(-rc));
		reap();
	}
	return 0;
}

void Responder::stop()
{
	std::unique_ptr<CmId> conn;
	{
		std::lock_guard g(conn_mu_);
		conn = std::move(conn_id_);
	}
	if (conn && !disconnected_) {
		disconnected_ = true; // flushes of our receives are expected from here on
		conn->disconnect();
		events_.wait_for(CmEventType::Disconnected, kCmTimeoutMs);
	}
	disconnected_ = true;
	if (conn) {
		reap(); // consume the flushed receives before the QP goes
		conn.reset();
	}
	listen_id_.reset();
	side_.fini();
}

// ---------------------------------------------------------------------------------------------
// Requester

void Requester::on_event(CmId *id, CmEvent &ev)
{
	events_.push(id, ev);
}

void Requester::connect(Device *dev, Provider *prov, const std::string &ip, uint16_t port,
                        uint32_t sq_depth, const std::string &src_ip)
{
	const DeviceAttr &da = dev->attr();
	sq_depth_ = std::min(sq_depth, da.max_qp_wr - 1);
	side_.init(dev, 2 * size_t{kMaxMsg}, static_cast<int>(sq_depth_ + 16), 16, true, false);
	id_ = prov->create_id([this](CmId *cid, CmEvent &ev) { on_event(cid, ev); }, this);
	if (!id_)
		fatal("create_id: %s", std::strerror(errno));
	auto dst = SockAddr::parse(ip, port);
	if (!dst)
		fatal("bad address %s", ip.c_str());
	dst->set_port(port);
	std::string where = dst->str();

	std::optional<SockAddr> src;
	if (!src_ip.empty() && !(src = SockAddr::parse(src_ip, 0)))
		fatal("bad address %s", src_ip.c_str());
	if (int rc = id_->resolve_addr(src ? &*src : nullptr, *dst, kCmTimeoutMs))
		fatal("resolve_addr %s: %s", where.c_str(), std::strerror(-rc));
	auto e = events_.wait("ADDR_RESOLVED");
	if (e.type != CmEventType::AddrResolved)
		fatal("resolve_addr %s: %s (%d)", where.c_str(), cm_event_str(e.type), e.status);
	if (int rc = id_->resolve_route(kCmTimeoutMs))
		fatal("resolve_route %s: %s", where.c_str(), std::strerror(-rc));
	e = events_.wait("ROUTE_RESOLVED");
	if (e.type != CmEventType::RouteResolved)
		fatal("resolve_route %s: %s (%d)", where.c_str(), cm_event_str(e.type), e.status);

	QpInitAttr qa;
	qa.send_cq = side_.send_cq.get();
	qa.recv_cq = side_.recv_cq.get();
	qa.cap.max_send_wr = sq_depth_;
	qa.cap.max_recv_wr = 1;
	qa.cap.max_send_sge = 1;
	qa.cap.max_recv_sge = 1;
	qa.cap.max_inline_data = std::min<uint32_t>(64, da.max_inline_data);
	if (int rc = id_->create_qp(*side_.pd, qa))
		fatal("requester: create_qp: %s", std::strerror(-rc));
	max_inline_ = id_->qp()->cap().max_inline_data;

	ConnParam cp;
	cp.initiator_depth = static_cast<uint8_t>(std::min<uint32_t>(da.max_qp_init_rd_atom, 255));
	cp.responder_resources = 0;
	if (int rc = id_->connect(cp))
		fatal("connect %s: %s", where.c_str(), std::strerror(-rc));
	e = events_.wait("ESTABLISHED");
	if (e.type != CmEventType::Established)
		fatal("connect %s: %s (status %d)", where.c_str(), cm_event_str(e.type), e.status);
	auto pd = e.param.pdata();
	if (pd.size() < sizeof(RemoteBuf))
		fatal("connect %s: accept carried %zu bytes of private data, want %zu",
		      where.c_str(), pd.size(), sizeof(RemoteBuf));
	std::memcpy(&remote_, pd.data(), sizeof(remote_));
	if (remote_.length < kMaxMsg)
		fatal("connect %s: remote buffer of %u bytes is too small", where.c_str(),
		      remote_.length);
}

void Requester::disconnect()
{
	if (!id_)
		return;
	if (int rc = id_->disconnect())
		std::fprintf(stderr, "ulp-bench: disconnect: %s\n", std::strerror(-rc));
	else if (!events_.wait_for(CmEventType::Disconnected, kCmTimeoutMs))
		std::fprintf(stderr, "ulp-bench: no DISCONNECTED within %d ms\n", kCmTimeoutMs);
	id_.reset();
	side_.fini();
}

} // namespace ulp::bench
