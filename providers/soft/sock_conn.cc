// SPDX-License-Identifier: MIT
// providers/soft/sock_conn.cc - a cross-process connection's socket: batched transmit,
// region announcements (memfds passed with SCM_RIGHTS), the receive loop that frames
// packets, and losing the connection. Both wires use it (sock_conn.h).
#include "providers/soft/sock_conn.h"

#include "core/log.h"
#include "providers/soft/shm_link.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>

namespace ulp::soft
{

void cm_peer_lost(SoftQp &qp); // cm.cc

SockConn::SockConn(int f) : fd(f) {}

SockConn::~SockConn()
{
	link.reset(); // the peer's link region is unmapped first
	for (auto &m : mapped)
		munmap(m.p, m.len);
	for (int f : rx_fds)
		close(f);
	if (fd >= 0)
		close(fd);
}

void conn_flush_locked(SockConn &c)
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

void update_pollout(SockConn &c)
{
	bool want = c.backlog() > 0;
	if (want != c.want_out && c.engine) {
		c.want_out = want;
		c.engine->want_write(&c, want);
	}
}

// Queue a header and len payload bytes from src. Small packets are batched in the
// backlog and leave with the next flush (one write per engine turn, as a NIC coalesces
// doorbells); large payloads go straight from the caller's memory when the backlog is
// empty, and only the part the socket did not take is copied. flush=true writes now.
constexpr uint64_t kDirectMin = 16384;

void conn_send(SockConn &c, const PktHdr &h, Cursor *src, uint64_t len, bool flush)
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

// Make our region known to the peer before a packet names it. Only when nothing is
// queued: the fd must travel with the bytes it belongs to. false: send inline instead.
bool announce(SockConn &c, const DmaRegion &r)
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
const DmaRegion *shm_of(SoftDevice &dev, const Sge *sge, uint32_t n, uint64_t len, uint64_t *off,
                        uint64_t min_len)
{
	if (len < min_len || !len)
		return nullptr;
	// The common case, one SGE in a user MR on shared memory: the MR knows its region.
	for (uint32_t i = 0; i < n; i++) {
		if (!sge[i].length)
			continue;
		const SoftMr *mr = sge[i].length == len ? dev.mr_lookup(sge[i].lkey) : nullptr;
		if (mr && mr->user && mr->dma) {
			*off = sge[i].addr - reinterpret_cast<uint64_t>(mr->dma->addr());
			return mr->dma;
		}
		break;
	}
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

void conn_lost(SoftQp &qp, SockConn &c)
{
	c.dead = true;
	if (c.lost)
		return; // handled: the QP is in ERR and the CM knows
	c.lost = true;
	qp.engine.remove_conn(&c);
	if (qp.sq_acked != qp.sq_next && qp.state() != QpState::Err) {
		qp.complete_send(qp.sq_acked, WcStatus::RetryExcErr, 0);
		qp.sq_acked++;
	}
	cm_peer_lost(qp);
	qp.to_error(nullptr);
}

bool conn_read(SoftQp &qp, SockConn &c, PktFn on_pkt, int *seen)
{
	for (int round = 0; round < 64; round++) {
		// Read what is there (with any fds riding along).
		if (c.rx_len == c.rxbuf.size())
			c.rxbuf.resize(c.rxbuf.size() * 2);
		iovec iov{c.rxbuf.data() + c.rx_len, c.rxbuf.size() - c.rx_len};
		alignas(cmsghdr) char cbuf[CMSG_SPACE(sizeof(int) * 8)];
		msghdr mh{};
		mh.msg_iov = &iov;
		mh.msg_iovlen = 1;
		mh.msg_control = cbuf;
		mh.msg_controllen = sizeof(cbuf);
		ssize_t n = recvmsg(c.fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
		bool flood = false;
		if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
			conn_lost(qp, c);
			return false;
		}
		if (n > 0) {
			for (cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
				if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS) {
					size_t nfd = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
					for (size_t i = 0; i < nfd; i++) {
						int fd;
						std::memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int),
						            sizeof(int));
						c.rx_fds.push_back(fd);
						if (c.rx_fds.size() > kMaxPendingFds)
							flood = true;
					}
				}
			}
			c.rx_len += static_cast<size_t>(n);
		}
		if (flood || (mh.msg_flags & MSG_CTRUNC)) {
			ULP_LOG_RATELIMITED(Error, Soft, "peer of QP {} passes fds it does not use",
			                    qp.qp_num());
			conn_lost(qp, c);
			return false;
		}
		// Parse whole packets.
		size_t pos = 0;
		while (c.rx_len - pos >= sizeof(PktHdr)) {
			PktHdr h;
			std::memcpy(&h, c.rxbuf.data() + pos, sizeof(h));
			uint32_t pl = payload_len(h);
			if (pl == ~0u) {
				conn_lost(qp, c);
				return false;
			}
			if (c.rx_len - pos < sizeof(h) + pl) {
				if (sizeof(h) + pl > c.rxbuf.size())
					c.rxbuf.resize(sizeof(h) + pl);
				break;
			}
			const uint8_t *payload = c.rxbuf.data() + pos + sizeof(h);
			PktOp op = static_cast<PktOp>(h.op);
			bool ok;
			if (op == PktOp::Region) {
				ok = on_region(c, h);
			} else if (op == PktOp::Disconnect) {
				cm_peer_lost(qp);
				ok = true;
			} else if (op == PktOp::CmReq || op == PktOp::CmRep || op == PktOp::CmRej) {
				ok = false; // CM packets after establishment are a violation
			} else {
				ok = on_pkt(qp, c, h, payload);
			}
			if (!ok) {
				ULP_LOG_RATELIMITED(Error, Soft,
				                    "protocol error from peer of QP {} (op {})",
				                    qp.qp_num(), h.op);
				conn_lost(qp, c);
				return false;
			}
			pos += sizeof(h) + pl;
			if (seen)
				(*seen)++;
		}
		if (pos) {
			std::memmove(c.rxbuf.data(), c.rxbuf.data() + pos, c.rx_len - pos);
			c.rx_len -= pos;
		}
		if (n < 0)
			break; // EAGAIN: all read
	}
	return true;
}

} // namespace ulp::soft
