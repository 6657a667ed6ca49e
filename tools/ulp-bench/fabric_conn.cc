// SPDX-License-Identifier: MIT
#include "tools/ulp-bench/fabric_conn.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <optional>
#include <sstream>
#include <thread>

namespace ulp::bench
{

namespace
{

std::atomic<pid_t> g_peer_pids[4]{}; // peer processes fatal() kills

constexpr uint32_t kRqDepthWant = 512; // receives the responder keeps posted
// Waiting for completions: empty polls spent spinning, then yielding, before sleeping.
constexpr unsigned kSpinPolls = 2000;
constexpr unsigned kYieldPolls = 200;

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

void Side::init(Device *d, size_t bytes, int send_cqe, int recv_cqe, bool send_ch, bool recv_ch,
                int vector)
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
	ca.comp_vector = vector % static_cast<int>(std::max(1u, dev->attr().num_comp_vectors));
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

void Responder::start(Device *dev, Provider *prov, const std::string &ip, bool with_channel,
                      int vector)
{
	const DeviceAttr &da = dev->attr();
	rq_depth_ = std::min(kRqDepthWant, da.max_qp_wr);
	side_.init(dev, kMaxMsg, 16, static_cast<int>(rq_depth_ + 16), false, with_channel, vector);
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
			rc->self->repost_.push_back(rc->slot);
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

// One chained post for every receive reaped since the last: one QP lock and one look at
// the ring per batch, not per message (perftest's servers post lists the same way).
void Responder::post_recvs()
{
	if (repost_.empty())
		return;
	Sge sge{reinterpret_cast<uint64_t>(side_.mem->addr()), kMaxMsg, side_.mr->lkey()};
	wrs_.resize(repost_.size());
	for (size_t i = 0; i < repost_.size(); i++) {
		RecvWr &wr = wrs_[i];
		wr = RecvWr{};
		wr.wr_cqe = &recvs_[repost_[i]].cqe;
		wr.sg_list = &sge;
		wr.num_sge = 1;
		wr.next = i + 1 < repost_.size() ? &wrs_[i + 1] : nullptr;
	}
	repost_.clear();
	const RecvWr *bad = nullptr;
	std::lock_guard g(conn_mu_);
	if (!conn_id_ || !conn_id_->qp() || flushed_)
		return;
	int rc = conn_id_->qp()->post_recv(wrs_.data(), &bad);
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
			break;
	}
	post_recvs();
	return total;
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
                        uint32_t sq_depth, const std::string &src_ip, int vector)
{
	const DeviceAttr &da = dev->attr();
	sq_depth_ = std::min(sq_depth, da.max_qp_wr - 1);
	side_.init(dev, 2 * size_t{kMaxMsg}, static_cast<int>(sq_depth_ + 16), 16, true, false,
	           vector);
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

// ---------------------------------------------------------------------------------------------
// The peer process

Peer spawn_peer(const std::string &ip, const std::string &device,
                const std::vector<std::string> &extra)
{
	int pfd[2];
	if (pipe2(pfd, O_CLOEXEC) != 0)
		fatal("pipe2: %s", std::strerror(errno));
	char exe[4096];
	ssize_t el = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (el <= 0)
		fatal("readlink /proc/self/exe: %s", std::strerror(errno));
	exe[el] = 0;
	std::string fd_arg = std::to_string(pfd[1]);
	std::vector<char *> argv = {
	    exe,           const_cast<char *>("fabric-peer"), const_cast<char *>("--ready-fd"),
	    fd_arg.data(), const_cast<char *>("--ip"),        const_cast<char *>(ip.c_str())};
	if (!device.empty()) {
		argv.push_back(const_cast<char *>("--device"));
		argv.push_back(const_cast<char *>(device.c_str()));
	}
	for (const std::string &a : extra)
		argv.push_back(const_cast<char *>(a.c_str()));
	argv.push_back(nullptr);
	pid_t parent = getpid();
	std::fflush(stdout);
	std::fflush(stderr);
	pid_t pid = fork();
	if (pid < 0)
		fatal("fork: %s", std::strerror(errno));
	if (pid == 0) {
		// Async-signal-safe calls only until exec.
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(1);
		close(pfd[0]);
		fcntl(pfd[1], F_SETFD, 0); // keep the ready fd across exec
		int devnull = open("/dev/null", O_RDWR);
		if (devnull >= 0) {
			dup2(devnull, STDIN_FILENO);
			dup2(devnull, STDOUT_FILENO); // stdout is the parent's (JSON) output
		}
		execv(exe, argv.data());
		_exit(127);
	}
	close(pfd[1]);
	set_peer_pid(pid, true);

	std::string line;
	double deadline = now_s() + kCmTimeoutMs / 1000.0;
	for (;;) {
		double left = deadline - now_s();
		if (left <= 0)
			fatal("peer process %d did not report its port within %d ms", pid,
			      kCmTimeoutMs);
		pollfd p{pfd[0], POLLIN, 0};
		int rc = poll(&p, 1, static_cast<int>(left * 1000) + 1);
		if (rc < 0 && errno == EINTR)
			continue;
		if (rc < 0)
			fatal("poll: %s", std::strerror(errno));
		if (rc == 0)
			continue;
		char buf[32];
		ssize_t n = read(pfd[0], buf, sizeof(buf));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			int status = 0;
			waitpid(pid, &status, 0);
			set_peer_pid(pid, false);
			fatal("peer process exited before reporting its port (status 0x%x)",
			      status);
		}
		line.append(buf, static_cast<size_t>(n));
		if (line.find('\n') != std::string::npos)
			break;
	}
	close(pfd[0]);
	Peer peer;
	peer.pid = pid;
	// Its listeners' ports, one line: "PORT [PORT...]".
	std::istringstream ports(line);
	for (int p; ports >> p;) {
		if (p <= 0 || p > 65535)
			fatal("peer process reported port %d", p);
		peer.ports.push_back(static_cast<uint16_t>(p));
	}
	if (peer.ports.empty())
		fatal("peer process reported no port");
	return peer;
}

int reap_peer(Peer &peer)
{
	if (peer.pid <= 0)
		return 0;
	int status = 0;
	for (int i = 0; i < 100; i++) {
		pid_t r = waitpid(peer.pid, &status, WNOHANG);
		if (r == peer.pid) {
			set_peer_pid(peer.pid, false);
			peer.pid = 0;
			if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
				return 0;
			std::fprintf(stderr, "ulp-bench: peer process ended with status 0x%x\n",
			             status);
			return 1;
		}
		std::this_thread::sleep_for(std::chrono::milliseconds(100));
	}
	std::fprintf(stderr, "ulp-bench: peer process %d still running after 10 s; killing it\n",
	             peer.pid);
	kill(peer.pid, SIGKILL);
	waitpid(peer.pid, &status, 0);
	set_peer_pid(peer.pid, false);
	peer.pid = 0;
	return 1;
}

// ---------------------------------------------------------------------------------------------
// Stream

double now_s()
{
	using namespace std::chrono;
	return duration<double>(steady_clock::now().time_since_epoch()).count();
}

void Stream::init(const char *w, Requester *r, Responder *l)
{
	wire = w;
	req = r;
	local = l;
	slots.resize(r->sq_depth());
	for (auto &sl : slots) {
		sl.s = this;
		sl.cqe.done = [](Cq *, Wc *wc) {
			auto *sl = container_of(wc->wr_cqe, &Slot::cqe);
			sl->s->done = sl->idx;
		};
	}
}

int Stream::reap(Cq *cq)
{
	std::array<Wc, 16> wc;
	int n = cq->poll(wc);
	if (n < 0)
		fatal("%s: poll: %s", wire, std::strerror(-n));
	for (int i = 0; i < n; i++) {
		if (wc[i].status != WcStatus::Success) {
			auto *sl = container_of(wc[i].wr_cqe, &Slot::cqe);
			fatal("%s: completion of WR %" PRIu64 " failed: %s (vendor_err %u, qp %u)",
			      wire, sl ? sl->idx : 0, wc_status_str(wc[i].status), wc[i].vendor_err,
			      wc[i].qp_num);
		}
		if (wc[i].wr_cqe)
			wc[i].wr_cqe->done(cq, &wc[i]);
	}
	if (local)
		local->reap();
	return n;
}

// Every WR carries a cqe (signaled or not), so an error completion of any of them names it.
void Stream::poll_until(uint64_t target)
{
	Cq *cq = req->send_cq();
	double idle_since = 0;
	unsigned empty = 0;
	while (done < target) {
		if (reap(cq) > 0) {
			empty = 0;
			continue;
		}
		++empty;
		if (empty < kSpinPolls)
			continue;
		if (empty == kSpinPolls)
			idle_since = now_s();
		if (empty < kSpinPolls + kYieldPolls) {
			std::this_thread::yield();
			continue;
		}
		// Arm, poll once more (no REPORT_MISSED_EVENTS), then sleep.
		if (int rc = cq->req_notify(CqNotify::NextComp))
			fatal("%s: req_notify: %s", wire, std::strerror(-rc));
		if (reap(cq) > 0) {
			empty = 0;
			continue;
		}
		Cq *ev_cq = nullptr;
		int rc = req->channel()->get_cq_event(&ev_cq, local ? 1 : 100);
		if (rc && rc != -EAGAIN)
			fatal("%s: get_cq_event: %s", wire, std::strerror(-rc));
		if (now_s() - idle_since > kCompletionTimeoutMs / 1000.0)
			fatal("%s: no completion for %d ms (waiting for WR %" PRIu64
			      ", newest done %" PRIu64 ")",
			      wire, kCompletionTimeoutMs, target, done);
	}
}

void Stream::post(RdmaWr &wr, uint64_t idx, bool signaled, uint32_t extra_flags)
{
	Slot &sl = slots[idx % slots.size()];
	sl.idx = idx;
	wr.wr_cqe = &sl.cqe;
	wr.send_flags = (signaled ? uint32_t{SEND_SIGNALED} : 0u) | extra_flags;
	const SendWr *bad = nullptr;
	int rc = req->qp()->post_send(&wr, &bad);
	if (rc)
		fatal("%s: post_send %s WR %" PRIu64 ": %s (%" PRIu64
		      " WRs outstanding after completions polled, send queue of %u)",
		      wire, wr_opcode_str(wr.opcode), idx, std::strerror(-rc), idx - 1 - done,
		      req->qp()->cap().max_send_wr);
}

RdmaWr Stream::make_wr(WrOpcode op, uint32_t size, Sge *sge) const
{
	uint8_t *local_buf = op == WrOpcode::RdmaRead ? req->sink() : req->src();
	*sge = Sge{reinterpret_cast<uint64_t>(local_buf), size, req->mr().lkey()};
	RdmaWr wr;
	wr.opcode = op;
	wr.sg_list = sge;
	wr.num_sge = 1;
	if (op != WrOpcode::Send) {
		wr.remote_addr = req->remote().addr;
		wr.rkey = req->remote().rkey;
	}
	return wr;
}

void Stream::verify()
{
	constexpr uint32_t n = 64 * 1024;
	for (uint32_t i = 0; i < n; i++)
		req->src()[i] = static_cast<uint8_t>(i * 7 + 3);
	std::memset(req->sink(), 0, n);
	Sge sge;
	RdmaWr w = make_wr(WrOpcode::RdmaWrite, n, &sge);
	done = 0;
	post(w, 1, true, 0);
	poll_until(1);
	RdmaWr r = make_wr(WrOpcode::RdmaRead, n, &sge);
	done = 0;
	post(r, 1, true, 0);
	poll_until(1);
	if (std::memcmp(req->src(), req->sink(), n) != 0)
		fatal("%s: data read back after RDMA WRITE differs", wire);
	RdmaWr s = make_wr(WrOpcode::Send, n, &sge);
	done = 0;
	post(s, 1, true, 0);
	poll_until(1);
}

} // namespace ulp::bench
