// SPDX-License-Identifier: MIT
// providers/soft/sock_wire.cc - the cross-process wire.
//
// One Unix stream socket per connection, named in the abstract namespace
// "@ulp-soft/IP:PORT" by the listener. The stream carries framed packets (PktHdr, then
// an inline payload when the header says so):
//
//   CM:        CmReq -> CmRep | CmRej; later Disconnect
//   requests:  Send, SendImm, SendInv, Write, WriteImm (payload), ReadReq (none)
//   replies:   Ack, Nak (code, RNR timer), ReadResp (payload)
//   memory:    Region (a memfd passed with SCM_RIGHTS; see core/dma_mem.h)
//
// Every request carries a sequence number (psn). The responder serves only the psn it
// expects and replies in order; after an RNR NAK it drops later requests until the NAKed
// one comes again, and the requester goes back to it after the RNR timer (go-back-N, as
// an RC requester does after a NAK, IB spec 9.7.5.2.8).
//
// Payloads of 8 KiB or more whose bytes sit in one memfd region the peer has mapped are
// not copied through the socket: the packet names (region, offset) and the responder
// copies directly, under its own rkey checks, like a NIC doing DMA. Everything a peer
// sends is untrusted: lengths, regions and offsets are bounds-checked and a malformed
// packet drops the connection (peer death), never the process.
#include "providers/soft/sock_wire.h"

#include "core/byteorder.h"
#include "core/log.h"
#include "core/thread_name.h"

#include "providers/soft/cm_id.h"
#include "providers/soft/sock_proto.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <map>

namespace ulp::soft
{

// ---------------------------------------------------------------------------------------------
// Connections

struct Mapped {
	uint64_t id;
	uint8_t *p;
	uint64_t len;
};

class SockConn
{
public:
	explicit SockConn(int fd) : fd(fd) {}
	~SockConn()
	{
		for (auto &m : mapped)
			munmap(m.p, m.len);
		for (int f : rx_fds)
			close(f);
		if (fd >= 0)
			close(fd);
	}

	int fd;
	SoftDevice *dev = nullptr;     // engine that watches us, once established
	SoftQp *qp = nullptr;          // QP carried (engine lock)
	std::atomic<bool> dead{false}; // EOF, error or protocol violation (any thread)
	bool lost = false;             // conn_lost has run (engine)

	std::mutex tx_lock;         // txbuf and writes
	std::vector<uint8_t> txbuf; // bytes not yet written
	size_t tx_off = 0;          // written prefix of txbuf
	bool want_out = false;      // EPOLLOUT armed

	std::vector<uint8_t> rxbuf = std::vector<uint8_t>(256 << 10);
	size_t rx_len = 0;               // valid bytes in rxbuf
	std::deque<int> rx_fds;          // SCM_RIGHTS fds, in arrival order
	std::vector<uint64_t> announced; // our regions the peer has mapped (tx_lock)
	bool ack_pending = false;        // responder: an ACK for ack_psn is owed (engine)
	uint32_t ack_psn = 0;
	std::vector<Mapped> mapped; // the peer's regions we have mapped (engine)

	size_t backlog()
	{
		std::lock_guard g(tx_lock);
		return txbuf.size() - tx_off;
	}
	const Mapped *region(uint64_t id) const
	{
		for (auto &m : mapped)
			if (m.id == id)
				return &m;
		return nullptr;
	}
};

int sock_fd(const SockConn &c)
{
	return c.fd;
}
SoftQp *sock_qp(const SockConn &c)
{
	return c.qp;
}

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

// Blocking helpers for the CM phase (before the engine owns the socket).
static bool write_all(int fd, const void *p, size_t n)
{
	auto *b = static_cast<const uint8_t *>(p);
	while (n) {
		ssize_t w = send(fd, b, n, MSG_NOSIGNAL);
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
		b += w;
		n -= static_cast<size_t>(w);
	}
	return true;
}

// Read exactly n bytes within timeout_ms in all: one deadline for the whole message, so a
// peer trickling bytes cannot hold the CM thread longer than that.
static bool read_all(int fd, void *p, size_t n, int timeout_ms)
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
		ssize_t got = recv(fd, b, n, MSG_DONTWAIT);
		if (got < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (got <= 0)
			return false;
		b += got;
		n -= static_cast<size_t>(got);
	}
	return true;
}

static bool send_cm(int fd, PktOp op, const CmMsg &m)
{
	PktHdr h{};
	h.op = static_cast<uint8_t>(op);
	h.len = sizeof(CmMsg);
	return write_all(fd, &h, sizeof(h)) && write_all(fd, &m, sizeof(m));
}

// Read one CM packet. Returns its op, or PktOp::Max on timeout / error / garbage.
static PktOp recv_cm(int fd, CmMsg *m)
{
	PktHdr h;
	if (!read_all(fd, &h, sizeof(h), kCmTimeoutMs))
		return PktOp::Max;
	uint32_t pl = payload_len(h);
	PktOp op = static_cast<PktOp>(h.op);
	if ((op != PktOp::CmReq && op != PktOp::CmRep && op != PktOp::CmRej) || pl != sizeof(CmMsg))
		return PktOp::Max;
	if (!read_all(fd, m, sizeof(*m), kCmTimeoutMs))
		return PktOp::Max;
	if (m->private_data_len > ConnParam::kMaxPrivateData)
		return PktOp::Max;
	return op;
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
// Transmit (engine thread, or a CM caller for Disconnect)

static void conn_flush_locked(SockConn &c)
{
	while (c.tx_off < c.txbuf.size()) {
		ssize_t w = send(c.fd, c.txbuf.data() + c.tx_off, c.txbuf.size() - c.tx_off,
		                 MSG_NOSIGNAL | MSG_DONTWAIT);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0 && errno == EAGAIN)
			break;
		if (w <= 0) {
			c.dead = true; // the reader side will notice EOF/ECONNRESET too
			c.txbuf.clear();
			c.tx_off = 0;
			return;
		}
		c.tx_off += static_cast<size_t>(w);
	}
	if (c.tx_off == c.txbuf.size()) {
		c.txbuf.clear();
		c.tx_off = 0;
	}
}

static void update_pollout(SockConn &c)
{
	bool want = c.backlog() > 0;
	if (want != c.want_out && c.dev) {
		c.want_out = want;
		c.dev->engine.want_write(&c, want);
	}
}

// Queue a header and len payload bytes from src. Small packets are batched in the
// backlog and leave with the next flush (one write per engine turn, as a NIC coalesces
// doorbells); large payloads go straight from the caller's memory when the backlog is
// empty, and only the part the socket did not take is copied. flush=true writes now.
constexpr uint64_t kDirectMin = 16384;

static void conn_send(SockConn &c, const PktHdr &h, Cursor *src, uint64_t len, bool flush = false)
{
	std::lock_guard g(c.tx_lock);
	if (c.dead)
		return;
	if (len >= kDirectMin)
		conn_flush_locked(c);
	if (len >= kDirectMin && c.txbuf.size() == c.tx_off) {
		iovec iov[64];
		int n = 0;
		iov[n++] = {const_cast<PktHdr *>(&h), sizeof(h)};
		uint64_t left = len;
		Cursor probe = *src;
		while (left && n < 64) {
			uint8_t *p;
			uint64_t l;
			if (!probe.next(&p, &l, left))
				break;
			iov[n++] = {p, l};
			left -= l;
		}
		if (!left) {
			msghdr mh{};
			mh.msg_iov = iov;
			mh.msg_iovlen = static_cast<size_t>(n);
			ssize_t w = sendmsg(c.fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
			if (w < 0 && errno != EAGAIN && errno != EINTR) {
				c.dead = true;
				return;
			}
			size_t done = w < 0 ? 0 : static_cast<size_t>(w);
			if (done == sizeof(h) + len)
				return;
			// Keep the unsent tail.
			size_t skip = done;
			for (int i = 0; i < n; i++) {
				auto *b = static_cast<uint8_t *>(iov[i].iov_base);
				if (skip >= iov[i].iov_len) {
					skip -= iov[i].iov_len;
					continue;
				}
				c.txbuf.insert(c.txbuf.end(), b + skip, b + iov[i].iov_len);
				skip = 0;
			}
			return;
		}
	}
	size_t at = c.txbuf.size();
	c.txbuf.resize(at + sizeof(h) + len);
	std::memcpy(c.txbuf.data() + at, &h, sizeof(h));
	if (len) {
		Cursor dst = Cursor::flat(c.txbuf.data() + at + sizeof(h), len);
		cursor_copy(dst, *src, len);
	}
	if (flush || c.txbuf.size() - c.tx_off >= kTxHigh / 4)
		conn_flush_locked(c);
}

// One ACK covers every request up to its psn (IB spec 9.7.5.1.2, coalesced ACKs); it is
// sent before any other reply, so replies stay in request order.
static void send_owed_ack(SockConn &c)
{
	if (!c.ack_pending)
		return;
	c.ack_pending = false;
	PktHdr h{};
	h.op = static_cast<uint8_t>(PktOp::Ack);
	h.psn = c.ack_psn;
	conn_send(c, h, nullptr, 0);
}

static void send_reply(SockConn &c, PktOp op, uint32_t psn, NakCode code = NakCode::Rnr,
                       uint8_t rnr_timer = 0)
{
	send_owed_ack(c);
	PktHdr h{};
	h.op = static_cast<uint8_t>(op);
	h.psn = psn;
	h.nak = static_cast<uint8_t>(code);
	h.rnr_timer = rnr_timer;
	conn_send(c, h, nullptr, 0);
}

// Make our region known to the peer before a packet names it. Only when nothing is
// queued: the fd must travel with the bytes it belongs to. false: send inline instead.
static bool announce(SockConn &c, const DmaRegion &r)
{
	std::lock_guard g(c.tx_lock);
	for (uint64_t id : c.announced)
		if (id == r.id())
			return true;
	if (c.txbuf.size() != c.tx_off || c.dead)
		return false;
	PktHdr h{};
	h.op = static_cast<uint8_t>(PktOp::Region);
	h.va = r.length();
	h.shm_id = r.id();
	iovec iov{&h, sizeof(h)};
	alignas(cmsghdr) char cbuf[CMSG_SPACE(sizeof(int))] = {};
	msghdr mh{};
	mh.msg_iov = &iov;
	mh.msg_iovlen = 1;
	mh.msg_control = cbuf;
	mh.msg_controllen = sizeof(cbuf);
	cmsghdr *cm = CMSG_FIRSTHDR(&mh);
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(int));
	int fd = r.fd();
	std::memcpy(CMSG_DATA(cm), &fd, sizeof(int));
	ssize_t w = sendmsg(c.fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
	if (w != static_cast<ssize_t>(sizeof(h))) {
		if (w > 0) // partial: the fd went with the first byte; queue the rest
			c.txbuf.insert(c.txbuf.end(), reinterpret_cast<uint8_t *>(&h) + w,
			               reinterpret_cast<uint8_t *>(&h) + sizeof(h));
		else
			return false;
	}
	c.announced.push_back(r.id());
	return true;
}

// The single shared region holding an SGE list's bytes, if the list is one chunk there.
static const DmaRegion *shm_of(SoftDevice &dev, const Sge *sge, uint32_t n, uint64_t len,
                               uint64_t *off)
{
	if (len < kShmMin)
		return nullptr;
	Cursor cur = Cursor::sges(dev, sge, n);
	uint8_t *p;
	uint64_t l;
	if (!cur.next(&p, &l, len) || l != len)
		return nullptr;
	const DmaRegion *r = dma_lookup(p, len);
	if (r)
		*off = static_cast<uint64_t>(p - static_cast<uint8_t *>(r->addr()));
	return r;
}

// ---------------------------------------------------------------------------------------------
// Requester

static PktOp req_op(WrOpcode op)
{
	switch (op) {
	case WrOpcode::Send:
		return PktOp::Send;
	case WrOpcode::SendWithImm:
		return PktOp::SendImm;
	case WrOpcode::SendWithInv:
		return PktOp::SendInv;
	case WrOpcode::RdmaWrite:
		return PktOp::Write;
	case WrOpcode::RdmaWriteWithImm:
		return PktOp::WriteImm;
	default:
		return PktOp::ReadReq;
	}
}

ExecResult sock_exec(SoftQp &qp, uint32_t slot)
{
	SendWqe &w = qp.sq[slot % qp.sq_depth];
	auto c = qp.conn;
	// A completion decided here must not overtake WRs still in flight.
	auto complete_now = [&](WcStatus st) {
		if (qp.sq_acked != slot)
			return ExecResult::Stall;
		qp.complete_send(slot, st, 0);
		qp.to_error(nullptr);
		return ExecResult::Done;
	};
	if (!c || c->dead)
		return complete_now(WcStatus::RetryExcErr);
	// IB spec 10.8.3.3: a fenced WR waits for every earlier READ to finish.
	if ((w.flags & SEND_FENCE) && qp.rd_inflight)
		return ExecResult::Stall;
	// IB spec 9.4.5 / 11.2.4.2: at most max_rd_atomic READs in flight; with none, the
	// READ waits until the QP leaves RTS and it is flushed (exec_one).
	if (w.opcode == WrOpcode::RdmaRead && qp.rd_inflight >= qp.max_rd_atomic.load())
		return ExecResult::Stall;
	if (c->backlog() > kTxHigh)
		return ExecResult::Stall; // EPOLLOUT reschedules us

	SoftDevice &dev = qp.sdev;
	PktHdr h{};
	h.op = static_cast<uint8_t>(req_op(w.opcode));
	h.flags = (w.flags & SEND_SOLICITED) ? kPktSolicited : 0;
	h.rkey = w.rkey;
	h.va = w.remote_addr;
	h.imm = w.opcode == WrOpcode::SendWithInv ? w.inv_rkey : w.imm;

	std::shared_lock g(dev.mr_lock);
	const Sge *sg = qp.sq_sges(slot);
	uint64_t total = w.inline_len;
	if (!w.inline_len) {
		uint32_t need =
		    w.opcode == WrOpcode::RdmaRead
		        ? ACCESS_LOCAL_WRITE | (dev.is_iwarp() ? uint32_t{ACCESS_REMOTE_WRITE} : 0u)
		        : 0u;
		WcStatus st = check_local_sges(dev, qp.spd, sg, w.num_sge, need, &total);
		if (st != WcStatus::Success) {
			g.unlock();
			return complete_now(st);
		}
	}
	h.len = static_cast<uint32_t>(total);
	w.psn = qp.tx_psn++;
	h.psn = w.psn;
	w.shm = false;
	uint64_t off = 0;
	const DmaRegion *r = w.inline_len ? nullptr : shm_of(dev, sg, w.num_sge, total, &off);
	if (r && announce(*c, *r)) {
		h.flags |= kPktShm;
		w.shm = true;
		h.shm_id = r->id();
		h.shm_off = off;
	}
	if (w.opcode == WrOpcode::RdmaRead) {
		qp.rd_inflight++;
		if (qp.rd_inflight > qp.ctr.max_rd_inflight.load(std::memory_order_relaxed))
			qp.ctr.max_rd_inflight.store(qp.rd_inflight, std::memory_order_relaxed);
		conn_send(*c, h, nullptr, 0);
	} else if (h.flags & kPktShm) {
		conn_send(*c, h, nullptr, 0);
	} else if (total > kMaxInlinePayload) {
		g.unlock();
		qp.tx_psn--;
		return complete_now(WcStatus::LocLenErr); // needs shared memory on this wire
	} else {
		Cursor src = w.inline_len ? Cursor::flat(qp.sq_inl(slot), w.inline_len)
		                          : Cursor::sges(dev, sg, w.num_sge);
		conn_send(*c, h, &src, total);
	}
	g.unlock();
	update_pollout(*c);
	return ExecResult::Pending;
}

// A reply for the oldest WR in flight.
static bool on_reply(SoftQp &qp, SockConn &c, const PktHdr &h, const uint8_t *payload)
{
	// In ERR every WR still in flight is flushed (IB spec 10.3.1), whatever the
	// responder says about it later.
	if (qp.state() == QpState::Err)
		return true;
	if (qp.sq_acked == qp.sq_next)
		return false; // nothing in flight: protocol error
	uint32_t slot = qp.sq_acked;
	SendWqe w = qp.sq[slot % qp.sq_depth];
	PktOp op = static_cast<PktOp>(h.op);
	if (op == PktOp::Ack ? static_cast<int32_t>(h.psn - w.psn) < 0 : w.psn != h.psn)
		return false;
	bool is_read = w.opcode == WrOpcode::RdmaRead;
	if (op == PktOp::ReadResp) {
		// The response must be where the request said: in our shared sink, or
		// inline when we named none (else data never written would "succeed").
		if (!is_read || h.len != w.length || !(h.flags & kPktShm) != !w.shm)
			return false;
		if (!(h.flags & kPktShm) && h.len) {
			std::shared_lock g(qp.sdev.mr_lock);
			Cursor dst = Cursor::sges(qp.sdev, qp.sq_sges(slot), w.num_sge);
			Cursor src = Cursor::flat(payload, h.len);
			cursor_copy(dst, src, h.len);
		}
		qp.rd_inflight--;
		qp.finish_req(slot, Reply::Ack, h.len);
		qp.sq_acked++;
		qp.retire_local();
		return true;
	}
	if (op == PktOp::Ack) {
		// Completes every WR up to its psn; a READ among them would have had its
		// response first.
		for (;;) {
			if (is_read)
				return false;
			qp.finish_req(slot, Reply::Ack, w.inline_len ? w.inline_len : w.length);
			qp.sq_acked++;
			// The REG_MRs and LOCAL_INVs executed behind it complete now, in order
			// (a local WR has no psn of its own: never compared).
			qp.retire_local();
			if (w.psn == h.psn || qp.state() == QpState::Err)
				return true;
			if (qp.sq_acked == qp.sq_next)
				return false; // acks a psn never sent
			slot = qp.sq_acked;
			SendWqe &nw = qp.sq[slot % qp.sq_depth];
			if (static_cast<int32_t>(h.psn - nw.psn) < 0)
				return false;
			is_read = nw.opcode == WrOpcode::RdmaRead;
			w = nw;
		}
	}
	// Nak
	NakCode code = static_cast<NakCode>(h.nak);
	if (code == NakCode::Rnr) {
		// Go back to the NAKed WR; the responder has dropped everything after it.
		qp.sq_next = slot;
		qp.tx_psn = w.psn;
		qp.rd_inflight = 0;
		ExecResult r = qp.rnr_wait(slot, rnr_timer_usec(h.rnr_timer));
		if (r == ExecResult::Done) {
			qp.sq_acked++, qp.sq_next = qp.sq_acked;
			qp.retire_local();
		}
		return true;
	}
	Reply rep = code == NakCode::InvReq   ? Reply::NakInvReq
	            : code == NakCode::Access ? Reply::NakAccess
	            : code == NakCode::Op     ? Reply::NakOp
	                                      : Reply::PeerGone;
	if (is_read)
		qp.rd_inflight--;
	qp.finish_req(slot, rep, 0);
	qp.sq_acked++;
	qp.retire_local();
	return true;
}

// ---------------------------------------------------------------------------------------------
// Responder

static NakCode nak_of(Reply r)
{
	switch (r) {
	case Reply::NakInvReq:
		return NakCode::InvReq;
	case Reply::NakAccess:
		return NakCode::Access;
	case Reply::NakOp:
		return NakCode::Op;
	default:
		return NakCode::Gone;
	}
}

static bool on_request(SoftQp &qp, SockConn &c, const PktHdr &h, const uint8_t *payload)
{
	if (h.psn != qp.rx_psn)
		return true; // after an RNR NAK: dropped until the NAKed request returns
	QpState st = qp.state();
	if (st != QpState::Rtr && st != QpState::Rts && st != QpState::Sqe) {
		send_reply(c, PktOp::Nak, h.psn, NakCode::Gone);
		return true;
	}
	PktOp op = static_cast<PktOp>(h.op);
	// Where the request's bytes are (or, for a READ, where the response goes).
	uint8_t *shm = nullptr;
	if (h.flags & kPktShm) {
		const Mapped *m = c.region(h.shm_id);
		if (!m || h.shm_off > m->len || h.len > m->len - h.shm_off)
			return false; // names memory it never gave us
		shm = m->p + h.shm_off;
	}
	if (op == PktOp::ReadReq && !shm && h.len > kMaxInlinePayload)
		return false;

	RespResult rr;
	PktHdr resp{};
	resp.op = static_cast<uint8_t>(PktOp::ReadResp);
	resp.psn = h.psn;
	resp.len = h.len;
	std::vector<uint8_t> *rdbuf = nullptr;
	static thread_local std::vector<uint8_t> tl_rdbuf; // grows to the largest READ once
	{
		std::shared_lock g(qp.sdev.mr_lock);
		Cursor src = Cursor::flat(shm ? shm : payload, h.len);
		bool sol = h.flags & kPktSolicited;
		switch (op) {
		case PktOp::Send:
			rr = qp.resp_send(src, h.len, WrOpcode::Send, 0, 0, sol, qp.dest_qpn);
			break;
		case PktOp::SendImm:
			rr = qp.resp_send(src, h.len, WrOpcode::SendWithImm, h.imm, 0, sol,
			                  qp.dest_qpn);
			break;
		case PktOp::SendInv:
			rr = qp.resp_send(src, h.len, WrOpcode::SendWithInv, 0, h.imm, sol,
			                  qp.dest_qpn);
			break;
		case PktOp::Write:
		case PktOp::WriteImm:
			rr = qp.resp_write(src, h.len, h.va, h.rkey, op == PktOp::WriteImm, h.imm,
			                   qp.dest_qpn, sol);
			break;
		case PktOp::ReadReq: {
			if (shm) {
				resp.flags = kPktShm;
				Cursor dst = Cursor::flat(shm, h.len);
				rr = qp.resp_read(dst, h.len, h.va, h.rkey);
			} else {
				if (tl_rdbuf.size() < h.len &&
				    check_remote(qp.sdev, qp.spd, h.rkey, h.va, h.len,
				                 ACCESS_REMOTE_READ))
					tl_rdbuf.resize(
					    h.len); // only for a READ that will be served
				rdbuf = &tl_rdbuf;
				Cursor dst = Cursor::flat(tl_rdbuf.data(), h.len);
				rr = qp.resp_read(dst, h.len, h.va, h.rkey);
			}
			break;
		}
		default:
			return false;
		}
	}
	if (rr.reply == Reply::RnrNak) {
		send_reply(c, PktOp::Nak, h.psn, NakCode::Rnr, qp.min_rnr_timer.load());
		return true;
	}
	qp.rx_psn++;
	qp.finish_resp(rr);
	if (rr.reply != Reply::Ack) {
		send_reply(c, PktOp::Nak, h.psn, nak_of(rr.reply));
	} else if (op == PktOp::ReadReq) {
		send_owed_ack(c);
		Cursor src = Cursor::flat(rdbuf ? rdbuf->data() : nullptr, h.len);
		conn_send(c, resp, rdbuf ? &src : nullptr, rdbuf ? h.len : 0);
	} else {
		c.ack_pending = true;
		c.ack_psn = h.psn;
	}
	return true;
}

// Map a region the peer passed us.
static bool on_region(SockConn &c, const PktHdr &h)
{
	if (c.rx_fds.empty())
		return false;
	int fd = c.rx_fds.front();
	c.rx_fds.pop_front();
	// Only a region that can never shrink is safe to copy from later (else SIGBUS).
	struct stat sb;
	int seals = fcntl(fd, F_GET_SEALS);
	bool ok = h.va && h.va <= (1ull << 40) && c.mapped.size() < kMaxRegions && seals >= 0 &&
	          (seals & F_SEAL_SHRINK) && fstat(fd, &sb) == 0 &&
	          static_cast<uint64_t>(sb.st_size) >= h.va && !c.region(h.shm_id);
	void *p = ok ? mmap(nullptr, h.va, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
	close(fd);
	if (p == MAP_FAILED)
		return false;
	c.mapped.push_back(Mapped{h.shm_id, static_cast<uint8_t *>(p), h.va});
	return true;
}

void cm_peer_lost(SoftQp &qp); // cm.cc

// The connection is gone (EOF, reset, garbage): the oldest WR in flight gets the
// transport's verdict, the rest are flushed, and the CM reports DISCONNECTED.
static void conn_lost(SoftQp &qp, SockConn &c)
{
	c.dead = true;
	if (c.lost)
		return; // handled: the QP is in ERR and the CM knows
	c.lost = true;
	qp.sdev.engine.remove_conn(&c);
	if (qp.sq_acked != qp.sq_next && qp.state() != QpState::Err) {
		qp.complete_send(qp.sq_acked, WcStatus::RetryExcErr, 0);
		qp.sq_acked++;
	}
	cm_peer_lost(qp);
	qp.to_error(nullptr);
}

void sock_service(SoftQp &qp)
{
	auto c = qp.conn;
	if (!c)
		return;
	if (c->dead) {
		conn_lost(qp, *c);
		return;
	}
	{
		std::lock_guard g(c->tx_lock);
		conn_flush_locked(*c);
	}
	update_pollout(*c);
	for (int round = 0; round < 64; round++) {
		// Read what is there (with any fds riding along).
		if (c->rx_len == c->rxbuf.size())
			c->rxbuf.resize(c->rxbuf.size() * 2);
		iovec iov{c->rxbuf.data() + c->rx_len, c->rxbuf.size() - c->rx_len};
		alignas(cmsghdr) char cbuf[CMSG_SPACE(sizeof(int) * 8)];
		msghdr mh{};
		mh.msg_iov = &iov;
		mh.msg_iovlen = 1;
		mh.msg_control = cbuf;
		mh.msg_controllen = sizeof(cbuf);
		ssize_t n = recvmsg(c->fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
		bool flood = false;
		if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
			conn_lost(qp, *c);
			return;
		}
		if (n > 0) {
			for (cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
				if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS) {
					size_t nfd = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
					for (size_t i = 0; i < nfd; i++) {
						int fd;
						std::memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int),
						            sizeof(int));
						c->rx_fds.push_back(fd);
						if (c->rx_fds.size() > kMaxPendingFds)
							flood = true;
					}
				}
			}
			c->rx_len += static_cast<size_t>(n);
		}
		if (flood || (mh.msg_flags & MSG_CTRUNC)) {
			ULP_LOG_RATELIMITED(Error, Soft, "peer of QP {} passes fds it does not use",
			                    qp.qp_num());
			conn_lost(qp, *c);
			return;
		}
		// Parse whole packets.
		size_t pos = 0;
		while (c->rx_len - pos >= sizeof(PktHdr)) {
			PktHdr h;
			std::memcpy(&h, c->rxbuf.data() + pos, sizeof(h));
			uint32_t pl = payload_len(h);
			if (pl == ~0u) {
				conn_lost(qp, *c);
				return;
			}
			if (c->rx_len - pos < sizeof(h) + pl) {
				if (sizeof(h) + pl > c->rxbuf.size())
					c->rxbuf.resize(sizeof(h) + pl);
				break;
			}
			const uint8_t *payload = c->rxbuf.data() + pos + sizeof(h);
			PktOp op = static_cast<PktOp>(h.op);
			bool ok = true;
			if (is_request(op) && c->backlog() > kTxHardMax)
				ok = false; // answers pile up: the peer stopped reading
			else if (is_request(op))
				ok = on_request(qp, *c, h, payload);
			else if (op == PktOp::Ack || op == PktOp::Nak || op == PktOp::ReadResp)
				ok = on_reply(qp, *c, h, payload);
			else if (op == PktOp::Region)
				ok = on_region(*c, h);
			else if (op == PktOp::Disconnect) {
				cm_peer_lost(qp);
				ok = true;
			} else
				ok = false; // CM packets after establishment are a violation
			if (!ok) {
				ULP_LOG_RATELIMITED(Error, Soft,
				                    "protocol error from peer of QP {} (op {})",
				                    qp.qp_num(), h.op);
				conn_lost(qp, *c);
				return;
			}
			pos += sizeof(h) + pl;
		}
		if (pos) {
			qp.sdev.engine.wire_active();
			std::memmove(c->rxbuf.data(), c->rxbuf.data() + pos, c->rx_len - pos);
			c->rx_len -= pos;
		}
		if (n < 0)
			break; // EAGAIN: all read
	}
	send_owed_ack(*c);
	if (c->rx_len || c->backlog())
		qp.sdev.engine.wire_active();
}

void sock_flush(SoftQp &qp)
{
	auto &c = qp.conn;
	if (!c)
		return;
	{
		std::lock_guard g(c->tx_lock);
		conn_flush_locked(*c);
	}
	update_pollout(*c);
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
		// RDMA/CM over IB carries at most 56 bytes of REQ private data.
		if (recv_cm(fd, &m) != PktOp::CmReq || m.private_data_len > kCmReqPrivateDataMax) {
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
		PktOp op = recv_cm(fd, &m);
		auto ref = wref.lock();
		if (!ref)
			return; // id destroyed; it closed the fd
		auto &G = cm_global();
		std::lock_guard g(G.lock);
		SoftCmId *id = ref->id;
		if (!id || id->st != CmState::Connecting || !id->sock || id->sock->fd != fd)
			return;
		CmEvent ev;
		if (op == PktOp::CmRep && id->sqp()) {
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
	// Point the QP at the connection and hand the socket to the device's engine.
	static int establish(SoftQp &qp, CmRole role, std::shared_ptr<SockConn> c,
	                     const ConnParam &req, const ConnParam &rep, uint32_t dest_qpn,
	                     const Gid &dgid)
	{
		int fl = fcntl(c->fd, F_GETFL);
		fcntl(c->fd, F_SETFL, fl | O_NONBLOCK);
		tune(c->fd);
		qp.conn = c;
		qp.wire = WireKind::Socket;
		qp.tx_psn = qp.rx_psn = 0;
		int rc = cm_connect_qp(qp, role, req, rep, dest_qpn, dgid);
		if (rc) {
			qp.detach_wire();
			return rc;
		}
		c->dev = &qp.sdev;
		c->qp = &qp;
		qp.sdev.engine.add_conn(c);
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
	if (!send_cm(fd, PktOp::CmReq, req)) {
		close(fd);
		return reject(CmEventType::Unreachable, -ETIMEDOUT);
	}
	id.sock = std::make_shared<SockConn>(fd);
	SockCm::get().watch_active(fd, id.ref);
	return 0;
}

int sock_accept(SoftCmId &id, const ConnParam &p)
{
	auto *qp = id.sqp();
	if (!send_cm(id.sock->fd, PktOp::CmRep, to_msg(qp->qp_num(), qp->sdev.gid(), p)))
		return -ECONNRESET;
	int rc = SockCm::establish(*qp, CmRole::Passive, id.sock, id.req, p, id.remote_qpn,
	                           id.remote_gid);
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
	if (id.sock->dev)
		id.sock->dev->engine.kick();
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
