// SPDX-License-Identifier: MIT
// providers/soft/sock_cm.cc - connection management across processes: the listener's
// abstract socket "@ulp-soft/IP:PORT", the handshake (CmReq -> CmRep | CmRej, with
// private data) over the connection's own socket, and handing the connection to the
// device's engine once established. The in-process half of the CM is cm.cc.
#include "providers/soft/sock_wire.h"

#include "core/byteorder.h"
#include "core/log.h"
#include "core/signals_blocked.h"
#include "core/thread_name.h"
#include "providers/soft/cm_id.h"
#include "providers/soft/shm_link.h"
#include "providers/soft/sock_conn.h"
#include "providers/soft/sock_proto.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <functional>
#include <map>

namespace ulp::soft
{

static std::string sock_name(const SockAddr &a)
{
	return "ulp-soft/" + a.str();
}

static socklen_t make_addr(const std::string &name, sockaddr_un *un)
{
	std::memset(un, 0, sizeof(*un));
	un->sun_family = AF_UNIX;
	size_t n = std::min(name.size(), sizeof(un->sun_path) - 2);
	std::memcpy(un->sun_path + 1, name.data(), n); // abstract: leading NUL
	return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + n);
}

static void tune(int fd)
{
	// Deep socket buffers keep large messages from going through the backlog copy.
	int sz = 4 << 20;
	if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &sz, sizeof(sz)))
		setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz));
	if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &sz, sizeof(sz)))
		setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &sz, sizeof(sz));
}

// Fds that came with a CM packet (the ring wire's link region and doorbell), closed
// unless taken.
struct PassedFds {
	static constexpr int kMax = 2;
	int fd[kMax] = {-1, -1};
	int n = 0;
	bool flood = false; // more came than a CM packet may carry
	PassedFds() = default;
	PassedFds(const PassedFds &) = delete;
	PassedFds &operator=(const PassedFds &) = delete;
	~PassedFds() { reset(); }
	void reset()
	{
		for (int i = 0; i < n; i++)
			if (fd[i] >= 0)
				close(fd[i]);
		n = 0;
	}
	int take(int i)
	{
		int f = fd[i];
		fd[i] = -1;
		return f;
	}
	void add(int f)
	{
		if (n < kMax) {
			fd[n++] = f;
		} else {
			close(f);
			flood = true;
		}
	}
};

// Blocking helpers for the CM phase (before the engine owns the socket). fds ride on the
// first byte.
static bool write_all(int fd, const void *p, size_t n, const int *fds = nullptr, int nfds = 0)
{
	auto *b = static_cast<const uint8_t *>(p);
	while (n) {
		iovec iov{const_cast<uint8_t *>(b), n};
		msghdr mh{};
		mh.msg_iov = &iov;
		mh.msg_iovlen = 1;
		alignas(cmsghdr) char cbuf[CMSG_SPACE(sizeof(int) * PassedFds::kMax)] = {};
		if (nfds) {
			mh.msg_control = cbuf;
			mh.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
			cmsghdr *cm = CMSG_FIRSTHDR(&mh);
			cm->cmsg_level = SOL_SOCKET;
			cm->cmsg_type = SCM_RIGHTS;
			cm->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
			std::memcpy(CMSG_DATA(cm), fds, sizeof(int) * nfds);
		}
		ssize_t w = sendmsg(fd, &mh, MSG_NOSIGNAL);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0 && errno == EAGAIN) {
			pollfd pf{fd, POLLOUT, 0};
			if (poll(&pf, 1, kCmTimeoutMs) <= 0)
				return false;
			continue;
		}
		if (w <= 0)
			return false;
		nfds = 0; // went with the first byte
		b += w;
		n -= static_cast<size_t>(w);
	}
	return true;
}

// Read exactly n bytes within timeout_ms in all: one deadline for the whole message, so a
// peer trickling bytes cannot hold the CM thread longer than that. Passed fds go to *fds.
static bool read_all(int fd, void *p, size_t n, int timeout_ms, PassedFds *fds)
{
	auto *b = static_cast<uint8_t *>(p);
	auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
	while (n) {
		auto left =
		    std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
		if (left.count() <= 0)
			return false;
		pollfd pf{fd, POLLIN, 0};
		int r = poll(&pf, 1, static_cast<int>(left.count()));
		if (r <= 0)
			return false;
		iovec iov{b, n};
		alignas(cmsghdr) char cbuf[CMSG_SPACE(sizeof(int) * 4)];
		msghdr mh{};
		mh.msg_iov = &iov;
		mh.msg_iovlen = 1;
		mh.msg_control = cbuf;
		mh.msg_controllen = sizeof(cbuf);
		ssize_t got = recvmsg(fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
		if (got < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (got <= 0)
			return false;
		for (cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
			if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
				continue;
			size_t k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
			for (size_t i = 0; i < k; i++) {
				int f;
				std::memcpy(&f, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
				fds->add(f);
			}
		}
		if (fds->flood || (mh.msg_flags & MSG_CTRUNC))
			return false;
		b += got;
		n -= static_cast<size_t>(got);
	}
	return true;
}

// Send a CM packet; on the ring wire, our link region and doorbell ride along.
static bool send_cm(int fd, PktOp op, const CmMsg &m, const ShmLink *link = nullptr)
{
	struct {
		PktHdr h;
		CmMsg m;
	} pkt{};
	static_assert(sizeof(pkt) == sizeof(PktHdr) + sizeof(CmMsg));
	pkt.h.op = static_cast<uint8_t>(op);
	pkt.h.len = sizeof(CmMsg);
	pkt.m = m;
	if (!link)
		return write_all(fd, &pkt, sizeof(pkt));
	const int fds[2] = {link->region_fd(), link->doorbell_fd()};
	return write_all(fd, &pkt, sizeof(pkt), fds, 2);
}

// Read one CM packet. Returns its op, or PktOp::Max on timeout / error / garbage. Passed
// fds go to *fds: exactly two (link region, doorbell) when m->wire asks for rings.
static PktOp recv_cm(int fd, CmMsg *m, PassedFds *fds)
{
	PktHdr h;
	if (!read_all(fd, &h, sizeof(h), kCmTimeoutMs, fds))
		return PktOp::Max;
	uint32_t pl = payload_len(h);
	PktOp op = static_cast<PktOp>(h.op);
	if ((op != PktOp::CmReq && op != PktOp::CmRep && op != PktOp::CmRej) || pl != sizeof(CmMsg))
		return PktOp::Max;
	if (!read_all(fd, m, sizeof(*m), kCmTimeoutMs, fds))
		return PktOp::Max;
	if (m->private_data_len > ConnParam::kMaxPrivateData || m->wire > 1 ||
	    fds->n != (m->wire && op != PktOp::CmRej ? 2 : 0))
		return PktOp::Max;
	return op;
}

// A ring-wire link for a connection: ours, and the peer's from fds. nullptr on failure.
static std::unique_ptr<ShmLink> make_link(PassedFds *fds)
{
	auto l = ShmLink::create();
	if (!l) {
		ULP_LOG_RATELIMITED(Error, Soft, "ring wire: cannot create a link: errno {}",
		                    errno);
		return nullptr;
	}
	if (fds) {
		std::string why;
		if (!l->attach(fds->take(0), fds->take(1), &why)) {
			ULP_LOG_RATELIMITED(Error, Soft, "ring wire: peer's link refused: {}", why);
			return nullptr;
		}
	}
	return l;
}

static CmMsg to_msg(uint32_t qpn, const Gid &gid, const ConnParam &p)
{
	CmMsg m{};
	m.qpn = qpn;
	std::memcpy(m.gid, gid.data(), 16);
	m.responder_resources = p.responder_resources;
	m.initiator_depth = p.initiator_depth;
	m.retry_count = p.retry_count;
	m.rnr_retry_count = p.rnr_retry_count;
	m.private_data_len = p.private_data_len;
	std::memcpy(m.private_data, p.private_data.data(), p.private_data_len);
	return m;
}

static ConnParam from_msg(const CmMsg &m)
{
	ConnParam p;
	p.responder_resources = m.responder_resources;
	p.initiator_depth = m.initiator_depth;
	p.retry_count = m.retry_count;
	p.rnr_retry_count = m.rnr_retry_count;
	p.set_private_data({m.private_data, m.private_data_len});
	return p;
}

// ---------------------------------------------------------------------------------------------
// CM over sockets. A process-wide thread accepts connections and waits for replies.

namespace
{

class SockCm
{
public:
	static SockCm &get()
	{
		static SockCm *s = new SockCm; // leaked: its thread is detached
		return *s;
	}

	void watch_listen(int fd, const std::string &key)
	{
		std::lock_guard g(lock_);
		listens_[fd] = key;
		add(fd);
	}
	void watch_active(int fd, std::weak_ptr<IdRef> ref)
	{
		std::lock_guard g(lock_);
		actives_[fd] = std::move(ref);
		add(fd);
	}
	// Stop watching (the caller closes, or hands the fd over).
	void unwatch(int fd)
	{
		std::lock_guard g(lock_);
		epoll_ctl(ep_, EPOLL_CTL_DEL, fd, nullptr);
		listens_.erase(fd);
		actives_.erase(fd);
	}

private:
	SockCm()
	{
		ep_ = epoll_create1(EPOLL_CLOEXEC);
		SignalsBlocked blocked; // the application's signals are not ours
		std::thread([this] { loop(); }).detach();
	}
	void add(int fd)
	{
		epoll_event ev{};
		ev.events = EPOLLIN;
		ev.data.fd = fd;
		epoll_ctl(ep_, EPOLL_CTL_ADD, fd, &ev);
	}

	void loop()
	{
		set_thread_name("ulp-soft-cm");
		for (;;) {
			epoll_event evs[16];
			int n = epoll_wait(ep_, evs, 16, 1000);
			for (int i = 0; i < n; i++)
				handle(evs[i].data.fd);
		}
	}

	void handle(int fd)
	{
		std::string key;
		std::weak_ptr<IdRef> ref;
		bool listen = false;
		{
			std::lock_guard g(lock_);
			if (auto it = listens_.find(fd); it != listens_.end()) {
				key = it->second;
				listen = true;
			} else if (auto it2 = actives_.find(fd); it2 != actives_.end()) {
				ref = it2->second;
				epoll_ctl(ep_, EPOLL_CTL_DEL, fd, nullptr); // one reply only
				actives_.erase(it2);
			} else {
				return;
			}
		}
		if (listen)
			on_incoming(fd, key);
		else
			on_reply_msg(fd, ref);
	}

	// A connect request on a listening socket.
	void on_incoming(int lfd, const std::string &key)
	{
		int fd = accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
		if (fd < 0)
			return;
		CmMsg m;
		PassedFds fds;
		// RDMA/CM over IB carries at most 56 bytes of REQ private data.
		if (recv_cm(fd, &m, &fds) != PktOp::CmReq ||
		    m.private_data_len > kCmReqPrivateDataMax) {
			close(fd);
			return;
		}
		// The ring wire, as the requester asks: its link mapped, ours made (passed at
		// accept).
		std::unique_ptr<ShmLink> link;
		if (m.wire && !(link = make_link(&fds))) {
			close(fd);
			return;
		}
		auto &G = cm_global();
		std::lock_guard g(G.lock);
		auto it = G.listeners.find(key);
		if (it == G.listeners.end()) {
			close(fd);
			return;
		}
		SoftCmId *l = it->second;
		auto nid = std::make_unique<SoftCmId>(l->handler, l->context);
		nid->set_device(l->device());
		nid->set_local(l->local_addr());
		nid->st = CmState::ReqRcvd;
		nid->listener = l;
		nid->req = from_msg(m);
		nid->remote_qpn = m.qpn;
		std::memcpy(nid->remote_gid.data(), m.gid, 16);
		// The requester's address: its GID is IPv4-mapped (::ffff:a.b.c.d).
		static constexpr uint8_t kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
		if (std::memcmp(m.gid, kMapped, 12) == 0) {
			nid->set_peer_addr(
			    SockAddr::ipv4(get_be32(&m.gid[12]), get_be16(m.src_port)));
		}
		nid->sock = std::make_shared<SockConn>(fd);
		nid->sock->link = std::move(link);
		CmEvent ev;
		ev.event = CmEventType::ConnectRequest;
		ev.param = cm_peer_view(nid->req);
		ev.listen_id = l;
		ev.new_id = std::move(nid);
		l->post(std::move(ev));
	}

	// The listener's answer to our connect request.
	void on_reply_msg(int fd, const std::weak_ptr<IdRef> &wref)
	{
		CmMsg m;
		PassedFds fds;
		PktOp op = recv_cm(fd, &m, &fds);
		auto ref = wref.lock();
		if (!ref)
			return; // id destroyed; it closed the fd
		auto &G = cm_global();
		std::lock_guard g(G.lock);
		SoftCmId *id = ref->id;
		if (!id || id->st != CmState::Connecting || !id->sock || id->sock->fd != fd)
			return;
		CmEvent ev;
		// The listener grants the ring wire (its link rides along) or answers with packets.
		bool ring_ok = op == PktOp::CmRep;
		if (op == PktOp::CmRep && id->sock->link) {
			std::string why;
			if (!m.wire)
				id->sock->link.reset();
			else if (!id->sock->link->attach(fds.take(0), fds.take(1), &why))
				ring_ok = false;
			if (!ring_ok)
				ULP_LOG_RATELIMITED(Error, Soft,
				                    "ring wire: listener's link refused: {}", why);
		} else if (op == PktOp::CmRep && m.wire) {
			ring_ok = false; // granted what we never asked for
		}
		if (ring_ok && id->sqp()) {
			SoftQp &qp = *id->sqp();
			Gid gid;
			std::memcpy(gid.data(), m.gid, 16);
			ConnParam rep = from_msg(m);
			if (establish(qp, CmRole::Active, id->sock, id->req, rep, m.qpn, gid) ==
			    0) {
				id->st = CmState::Connected;
				ev.event = CmEventType::Established;
				ev.param = cm_peer_view(rep);
				id->post(std::move(ev));
				return;
			}
		}
		id->st = CmState::Idle;
		ev.event = op == PktOp::CmRej ? CmEventType::Rejected : CmEventType::Unreachable;
		ev.status = op == PktOp::CmRej ? -ECONNREFUSED : -ETIMEDOUT;
		if (op == PktOp::CmRej)
			ev.param = from_msg(m);
		id->post(std::move(ev));
		id->sock.reset();
	}

	std::mutex lock_;
	int ep_;
	std::map<int, std::string> listens_;
	std::map<int, std::weak_ptr<IdRef>> actives_;

public:
	// Connect the QP, then point it at the connection and hand the socket to the QP's
	// engine. The passive side answers (its REP, by `answer`) only once its QP is
	// connected, as rdma_accept moves the QP to RTR before it sends the REP: a QP that
	// cannot be connected (its ULP moved it to ERR meanwhile) is refused by a REJ, never
	// established on the active side and then dropped.
	static int establish(SoftQp &qp, CmRole role, std::shared_ptr<SockConn> c,
	                     const ConnParam &req, const ConnParam &rep, uint32_t dest_qpn,
	                     const Gid &dgid, const std::function<bool()> &answer = {})
	{
		// The QP may be in a turn meanwhile: a flush, if its ULP moved it to ERR before
		// the handshake ended (the modify below then fails), or RTS's first. The kind
		// first, so that the modify looks for no in-process peer; the connection only
		// once the QP is connected, between its turns. A turn that finds the kind but no
		// connection does nothing on the wire, so the turn waited for never needs the
		// CM's lock, which our caller holds.
		qp.wire = c->link ? WireKind::Shm : WireKind::Socket;
		int rc = cm_connect_qp(qp, role, req, rep, dest_qpn, dgid);
		if (!rc && answer && !answer())
			rc = -ECONNRESET;
		if (rc) {
			qp.wire = WireKind::None;
			return rc;
		}
		int fl = fcntl(c->fd, F_GETFL);
		fcntl(c->fd, F_SETFL, fl | O_NONBLOCK);
		tune(c->fd);
		qp.attach_wire(c);
		c->engine = &qp.engine;
		c->qp = &qp;
		qp.engine.add_conn(c);
		return 0;
	}
};

} // namespace

int sock_listen(SoftCmId &id)
{
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	sockaddr_un un;
	socklen_t len = make_addr(sock_name(id.local_addr()), &un);
	if (bind(fd, reinterpret_cast<sockaddr *>(&un), len) || ::listen(fd, 128)) {
		int e = errno;
		close(fd);
		return e == EADDRINUSE ? -EADDRINUSE : -e;
	}
	id.sock_listen_fd = fd;
	SockCm::get().watch_listen(fd, id.local_addr().str());
	return 0;
}

void sock_unlisten(SoftCmId &id)
{
	if (id.sock_listen_fd < 0)
		return;
	SockCm::get().unwatch(id.sock_listen_fd);
	close(id.sock_listen_fd);
	id.sock_listen_fd = -1;
}

int sock_connect(SoftCmId &id, const ConnParam &p)
{
	auto reject = [&](CmEventType t, int status) {
		CmEvent ev;
		ev.event = t;
		ev.status = status;
		id.post(std::move(ev));
		return 1; // reported by event, as rdma_connect does
	};
	int fd = -1;
	// The exact address first, then a wildcard listener on the port.
	SockAddr tries[2] = {id.peer_addr(), SockAddr::ipv4(0, id.peer_addr().port())};
	for (auto &a : tries) {
		fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd < 0)
			return -errno;
		sockaddr_un un;
		socklen_t len = make_addr(sock_name(a), &un);
		if (::connect(fd, reinterpret_cast<sockaddr *>(&un), len) == 0)
			break;
		close(fd);
		fd = -1;
	}
	if (fd < 0)
		return reject(CmEventType::Rejected, -ECONNREFUSED); // no listener (IB: REJ)
	auto *qp = id.sqp();
	CmMsg req = to_msg(qp->qp_num(), qp->sdev.gid(), p);
	const uint16_t sport = id.local_addr().port();
	req.src_port[0] = uint8_t(sport >> 8);
	req.src_port[1] = uint8_t(sport);
	// The ring wire unless the device keeps to packets; packets if no link can be made.
	auto sock = std::make_shared<SockConn>(fd);
	if (qp->sdev.xproc_rings)
		sock->link = make_link(nullptr);
	req.wire = sock->link ? 1 : 0;
	if (!send_cm(fd, PktOp::CmReq, req, sock->link.get()))
		return reject(CmEventType::Unreachable, -ETIMEDOUT); // sock closes fd
	id.sock = std::move(sock);
	SockCm::get().watch_active(fd, id.ref);
	return 0;
}

int sock_accept(SoftCmId &id, const ConnParam &p)
{
	auto *qp = id.sqp();
	CmMsg rep = to_msg(qp->qp_num(), qp->sdev.gid(), p);
	ShmLink *link = id.sock->link.get();
	rep.wire = link ? 1 : 0;
	int rc = SockCm::establish(*qp, CmRole::Passive, id.sock, id.req, p, id.remote_qpn,
	                           id.remote_gid,
	                           [&] { return send_cm(id.sock->fd, PktOp::CmRep, rep, link); });
	if (rc)
		return rc;
	id.st = CmState::Connected;
	CmEvent ev;
	ev.event = CmEventType::Established;
	ev.param = cm_peer_view(id.req);
	id.post(std::move(ev));
	return 0;
}

int sock_reject(SoftCmId &id, std::span<const uint8_t> pdata)
{
	ConnParam p;
	p.set_private_data(pdata);
	send_cm(id.sock->fd, PktOp::CmRej, to_msg(0, Gid{}, p));
	id.sock.reset();
	return 0;
}

void sock_disconnect(SoftCmId &id)
{
	if (!id.sock)
		return;
	PktHdr h{};
	h.op = static_cast<uint8_t>(PktOp::Disconnect);
	conn_send(*id.sock, h, nullptr, 0, true);
	if (id.sock->engine)
		id.sock->engine->kick();
}

void sock_cut(SoftCmId &id)
{
	if (id.sock)
		shutdown(id.sock->fd, SHUT_RDWR); // the peer sees EOF: peer death
}

void sock_close(SoftCmId &id)
{
	if (!id.sock)
		return;
	SockCm::get().unwatch(id.sock->fd);
	id.sock.reset(); // the QP (destroyed next) lets go of the engine's reference
}

} // namespace ulp::soft
