// SPDX-License-Identifier: MIT
// tests/soft_wire/wire_peer.h - a raw socket-wire peer and a soft-device target, shared by
// the hostile-peer tests (tests/soft_wire) and the fuzz target (fuzz/fuzz_sock_wire.cc).
//
// The packet layouts are providers/soft/sock_proto.h; the ring wire's peer is shm_peer.h.
//
// Nothing here uses gtest: failures come back as false / nullopt with a reason in *err,
// and every wait is bounded by the caller's timeout.
#pragma once

#include "core/cm.h"
#include "core/device.h"
#include "core/dma_mem.h"
#include "providers/soft/sock_proto.h"
#include "providers/soft/soft.h"
#include "tests/common/event_queue.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
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

namespace wire
{

// ---------------------------------------------------------------------------------------------
// Protocol: providers/soft/sock_proto.h

using ulp::soft::CmMsg;
using ulp::soft::is_request;
using ulp::soft::kCmTimeoutMs;
using ulp::soft::kMaxInlinePayload;
using ulp::soft::kPktShm;
using ulp::soft::kPktSolicited;
using ulp::soft::NakCode;
using ulp::soft::payload_len;
using ulp::soft::PktHdr;
using ulp::soft::PktOp;
constexpr size_t kMaxPrivateData = ulp::ConnParam::kMaxPrivateData;

// The bounds the tests of both wires wait with:
// a malformed packet -> ERR + DISCONNECTED + flush;
inline constexpr auto kDrop = std::chrono::milliseconds(3000);
// a reply the target owes us;
inline constexpr int kReplyMs = 3000;
// any CM-phase wait of the target.
inline constexpr auto kCmBound = std::chrono::milliseconds(kCmTimeoutMs + 1500);

inline PktHdr hdr(PktOp op, uint32_t psn = 0, uint32_t len = 0)
{
	PktHdr h{};
	h.op = static_cast<uint8_t>(op);
	h.psn = psn;
	h.len = len;
	return h;
}

// A well-formed connect request from a QP that does not exist anywhere (the target only
// records its number).
inline CmMsg cm_req(uint32_t qpn = 0x4242, uint8_t pdata_len = 0)
{
	CmMsg m{};
	m.qpn = qpn;
	m.gid[10] = 0xff;
	m.gid[11] = 0xff;
	m.gid[12] = 127;
	m.gid[15] = 99;
	m.responder_resources = 4;
	m.initiator_depth = 4;
	m.retry_count = 7;
	m.rnr_retry_count = 7;
	m.private_data_len = pdata_len;
	for (size_t i = 0; i < kMaxPrivateData; i++)
		m.private_data[i] = static_cast<uint8_t>(i);
	return m;
}

// ---------------------------------------------------------------------------------------------
// Bounded waits

using Clock = std::chrono::steady_clock;
using ms = std::chrono::milliseconds;

inline int left_ms(Clock::time_point until)
{
	auto d = std::chrono::duration_cast<ms>(until - Clock::now()).count();
	return d < 0 ? 0 : static_cast<int>(d);
}

// Poll pred every 200 us until it holds or timeout passes.
inline bool wait_until(const std::function<bool()> &pred, ms timeout)
{
	auto until = Clock::now() + timeout;
	for (;;) {
		if (pred())
			return true;
		if (Clock::now() >= until)
			return false;
		usleep(200);
	}
}

using ulp::test::EventQueue; // tests/common/event_queue.h

// ---------------------------------------------------------------------------------------------
// The raw peer: a Unix stream socket speaking the wire by hand.

struct Pkt {
	PktHdr h;
	std::vector<uint8_t> payload;
	int fds = 0; // SCM_RIGHTS fds that arrived with it (closed)
};

class RawPeer
{
public:
	RawPeer() = default;
	RawPeer(const RawPeer &) = delete;
	RawPeer &operator=(const RawPeer &) = delete;
	~RawPeer() { close(); }

	int fd = -1;

	// Connect to "@<name>" (the listener's abstract socket).
	bool connect(const std::string &name)
	{
		close();
		fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd < 0)
			return false;
		sockaddr_un un{};
		un.sun_family = AF_UNIX;
		size_t n = std::min(name.size(), sizeof(un.sun_path) - 2);
		std::memcpy(un.sun_path + 1, name.data(), n);
		auto len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + n);
		if (::connect(fd, reinterpret_cast<sockaddr *>(&un), len)) {
			close();
			return false;
		}
		return true;
	}

	void close()
	{
		if (fd >= 0)
			::close(fd);
		fd = -1;
		rx_.clear();
		eof_ = false;
		for (int f : kept)
			::close(f);
		kept.clear();
	}

	void shutdown_write()
	{
		if (fd >= 0)
			::shutdown(fd, SHUT_WR);
	}

	// Write n bytes (with pass_fd riding on the first byte when >= 0). false when the
	// target stops taking bytes for timeout_ms or the connection is gone.
	bool send_raw(const void *p, size_t n, int pass_fd = -1, int timeout_ms = 2000)
	{
		auto *b = static_cast<const uint8_t *>(p);
		auto until = Clock::now() + ms(timeout_ms);
		while (n) {
			iovec iov{const_cast<uint8_t *>(b), n};
			msghdr mh{};
			mh.msg_iov = &iov;
			mh.msg_iovlen = 1;
			alignas(cmsghdr) char cbuf[CMSG_SPACE(sizeof(int))] = {};
			if (pass_fd >= 0) {
				mh.msg_control = cbuf;
				mh.msg_controllen = sizeof(cbuf);
				cmsghdr *cm = CMSG_FIRSTHDR(&mh);
				cm->cmsg_level = SOL_SOCKET;
				cm->cmsg_type = SCM_RIGHTS;
				cm->cmsg_len = CMSG_LEN(sizeof(int));
				std::memcpy(CMSG_DATA(cm), &pass_fd, sizeof(int));
			}
			ssize_t w = sendmsg(fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
			if (w < 0 && errno == EINTR)
				continue;
			if (w < 0 && errno == EAGAIN) {
				// Drain what the target sends meanwhile: it must not block on us.
				pump(0);
				pollfd pf{fd, POLLOUT, 0};
				if (Clock::now() >= until ||
				    poll(&pf, 1, std::min(left_ms(until), 10)) < 0)
					return false;
				continue;
			}
			if (w <= 0)
				return false;
			pass_fd = -1; // went with the first byte
			b += w;
			n -= static_cast<size_t>(w);
		}
		return true;
	}

	bool send_pkt(const PktHdr &h, const void *payload = nullptr, size_t n = 0,
	              int pass_fd = -1)
	{
		std::vector<uint8_t> b(sizeof(h) + n);
		std::memcpy(b.data(), &h, sizeof(h));
		if (n)
			std::memcpy(b.data() + sizeof(h), payload, n);
		return send_raw(b.data(), b.size(), pass_fd);
	}

	bool send_cm_req(const CmMsg &m)
	{
		return send_pkt(hdr(PktOp::CmReq, 0, sizeof(m)), &m, sizeof(m));
	}

	// The next whole packet from the target, or nullopt (timeout, EOF, or a header the
	// target should never send).
	std::optional<Pkt> recv_pkt(int timeout_ms)
	{
		auto until = Clock::now() + ms(timeout_ms);
		for (;;) {
			if (rx_.size() >= sizeof(PktHdr)) {
				Pkt p;
				std::memcpy(&p.h, rx_.data(), sizeof(PktHdr));
				uint32_t pl = payload_len(p.h);
				if (pl == ~0u)
					return std::nullopt;
				if (rx_.size() >= sizeof(PktHdr) + pl) {
					p.payload.assign(rx_.begin() + sizeof(PktHdr),
					                 rx_.begin() + sizeof(PktHdr) + pl);
					rx_.erase(rx_.begin(), rx_.begin() + sizeof(PktHdr) + pl);
					p.fds = fds_;
					fds_ = 0;
					return p;
				}
			}
			if (eof_ || Clock::now() >= until)
				return std::nullopt;
			pump(std::min(left_ms(until), 50));
		}
	}

	// Skip packets until one with op arrives (the target announces regions, acks, ...).
	std::optional<Pkt> recv_op(PktOp op, int timeout_ms)
	{
		auto until = Clock::now() + ms(timeout_ms);
		for (;;) {
			auto p = recv_pkt(left_ms(until));
			if (!p || p->h.op == static_cast<uint8_t>(op))
				return p;
		}
	}

	// true once the target has closed its end (everything it sent is read and dropped).
	bool wait_eof(int timeout_ms)
	{
		auto until = Clock::now() + ms(timeout_ms);
		while (!eof_ && Clock::now() < until)
			pump(std::min(left_ms(until), 50));
		rx_.clear();
		return eof_;
	}

	// Nothing arrives within timeout_ms (bytes already buffered count as something).
	bool quiet(int timeout_ms)
	{
		size_t before = rx_.size();
		auto until = Clock::now() + ms(timeout_ms);
		while (!eof_ && Clock::now() < until)
			pump(std::min(left_ms(until), 50));
		return rx_.size() == before && !eof_;
	}

	bool eof() const { return eof_; }

	// Keep received fds in `kept` (in arrival order) instead of closing them; the owner
	// closes them.
	bool keep_fds = false;
	std::deque<int> kept;

	// Read what is there (waiting up to timeout_ms for the first byte). Received fds
	// (the target's region announcements) are closed: the peer never maps them.
	void pump(int timeout_ms)
	{
		if (fd < 0 || eof_)
			return;
		pollfd pf{fd, POLLIN, 0};
		if (poll(&pf, 1, timeout_ms) <= 0)
			return;
		for (;;) {
			uint8_t buf[65536];
			iovec iov{buf, sizeof(buf)};
			alignas(cmsghdr) char cbuf[CMSG_SPACE(sizeof(int) * 16)];
			msghdr mh{};
			mh.msg_iov = &iov;
			mh.msg_iovlen = 1;
			mh.msg_control = cbuf;
			mh.msg_controllen = sizeof(cbuf);
			ssize_t n = recvmsg(fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
			if (n < 0 && errno == EINTR)
				continue;
			if (n < 0 && errno == EAGAIN)
				return;
			if (n <= 0) {
				eof_ = true;
				return;
			}
			for (cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
				if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
					continue;
				size_t k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
				for (size_t i = 0; i < k; i++) {
					int f;
					std::memcpy(&f, CMSG_DATA(cm) + i * sizeof(int),
					            sizeof(int));
					if (keep_fds)
						kept.push_back(f);
					else
						::close(f);
					fds_++;
				}
			}
			rx_.insert(rx_.end(), buf, buf + n);
		}
	}

private:
	std::vector<uint8_t> rx_;
	int fds_ = 0;
	bool eof_ = false;
};

// A memfd of size bytes (the peer's side of a "Region"), sealed against shrinking as
// dma_alloc seals its own and as the wire demands, or -1.
inline int make_memfd(uint64_t size)
{
	int f = memfd_create("ulp-soft-wire-test", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (f < 0)
		return -1;
	if (ftruncate(f, static_cast<off_t>(size)) || fcntl(f, F_ADD_SEALS, F_SEAL_SHRINK)) {
		::close(f);
		return -1;
	}
	return f;
}

// ---------------------------------------------------------------------------------------------
// The target: a soft device with a listening CM id whose handler accepts every request,
// creates a QP with receives posted, and records every CM event.

struct CmEv {
	ulp::CmId *id;
	ulp::CmEventType type;
	int status;
	uint8_t pdata_len;
};

struct TargetConfig {
	std::string ip = "127.0.0.1";
	uint32_t recvs = 8;     // receives posted before accept, kRecvSlot bytes each
	uint32_t qp_depth = 32; // send and receive queue depth
	bool post_on_established =
	    false; // the target QP posts kTargetSends requests when established
	// The handler moves the QP to ERR between posting its receives and accepting, as a
	// ULP does whose connection was closed meanwhile (the accept then fails).
	bool err_before_accept = false;
};

class Target
{
public:
	static constexpr size_t kBufSize = 1 << 20; // the MR (one DMA region)
	static constexpr uint32_t kRecvSlot = 4096; // receive i lands at recv_off(i)
	static constexpr size_t kSendOff = kBufSize / 2;
	// What the target requests when post_on_established: a 16-byte SEND (psn 0) and a
	// 64-byte READ (psn 1), so that replies have something in flight to match.
	static constexpr uint32_t kTargetSends = 2;
	static constexpr uint32_t kTargetSendLen = 16;
	static constexpr uint32_t kTargetReadLen = 64;

	explicit Target(TargetConfig c = {}) : cfg(std::move(c)) {}
	Target(const Target &) = delete;
	Target &operator=(const Target &) = delete;
	~Target() { stop(); }

	TargetConfig cfg;
	ulp::Device *dev = nullptr;
	std::unique_ptr<ulp::Pd> pd;
	std::unique_ptr<ulp::Cq> scq, rcq;
	std::unique_ptr<ulp::DmaRegion> region;
	std::unique_ptr<ulp::Mr> mr;
	std::unique_ptr<ulp::CmId> listen_id;
	std::string sock_name; // the abstract socket, without the leading NUL
	EventQueue<CmEv> events;
	ulp::Cqe recv_cqe[64];
	ulp::Cqe send_cqe[kTargetSends];

	uint8_t *buf() const { return static_cast<uint8_t *>(region->addr()); }
	uint64_t va(size_t off) const { return reinterpret_cast<uint64_t>(buf() + off); }
	static size_t recv_off(uint32_t i) { return i * kRecvSlot; }

	bool start(std::string *err)
	{
		ulp::soft::DeviceConfig dc;
		dc.ip = cfg.ip;
		dev = ulp::soft::create_device(dc);
		if (!dev)
			return fail(err, "create_device");
		pd = dev->alloc_pd();
		ulp::CqInitAttr ca;
		ca.cqe = 256;
		scq = dev->create_cq(ca);
		rcq = dev->create_cq(ca);
		region = ulp::dma_alloc(kBufSize, false);
		if (!pd || !scq || !rcq || !region)
			return fail(err, "pd/cq/dma_alloc");
		mr = pd->reg_mr(buf(), kBufSize,
		                ulp::ACCESS_LOCAL_WRITE | ulp::ACCESS_REMOTE_WRITE |
		                    ulp::ACCESS_REMOTE_READ);
		if (!mr)
			return fail(err, "reg_mr");
		// A port no other process (parallel ctest, other engineers) holds: the abstract
		// namespace is per network namespace, so collisions are retried.
		uint16_t base = static_cast<uint16_t>(20000 + (getpid() * 7) % 30000);
		for (int i = 0; i < 200; i++) {
			auto id = ulp::soft::provider().create_id(
			    [this](ulp::CmId *id, ulp::CmEvent &ev) { on_event(id, ev); }, this);
			auto a = ulp::SockAddr::parse(cfg.ip + ":" + std::to_string(base + i));
			if (!id || !a || id->bind_addr(*a))
				return fail(err, "create_id/bind_addr");
			int rc = id->listen(8);
			if (rc == -EADDRINUSE)
				continue;
			if (rc)
				return fail(err, "listen " + std::to_string(rc));
			listen_id = std::move(id);
			sock_name = "ulp-soft/" + listen_id->local_addr().str();
			return true;
		}
		return fail(err, "no free port");
	}

	void stop()
	{
		// The listener first: its destruction waits for a ConnectRequest handler still
		// running, which may store a connection id after sending the REP the test saw.
		listen_id.reset();
		drop_conn();
		mr.reset();
		scq.reset();
		rcq.reset();
		pd.reset();
		region.reset();
		if (dev)
			ulp::soft::destroy_device(dev);
		dev = nullptr;
	}

	// The accepted connection's id and QP (null before ConnectRequest was handled).
	ulp::CmId *conn()
	{
		std::lock_guard g(lock_);
		return conn_id_.get();
	}
	ulp::Qp *qp()
	{
		std::lock_guard g(lock_);
		return conn_id_ ? conn_id_->qp() : nullptr;
	}
	uint32_t accepted()
	{
		std::lock_guard g(lock_);
		return accepted_;
	}

	// Destroy the accepted id (and its QP), then empty both CQs and the event queue.
	void drop_conn()
	{
		std::unique_ptr<ulp::CmId> c;
		{
			std::lock_guard g(lock_);
			c = std::move(conn_id_);
		}
		c.reset();
		drain(scq.get());
		drain(rcq.get());
		events.clear();
	}

	static std::vector<ulp::Wc> drain(ulp::Cq *cq)
	{
		std::vector<ulp::Wc> out;
		if (!cq)
			return out;
		ulp::Wc wc[16];
		for (;;) {
			int n = cq->poll(wc);
			if (n <= 0)
				return out;
			out.insert(out.end(), wc, wc + n);
		}
	}

	// Poll cq until n completions arrived or timeout passed.
	static std::vector<ulp::Wc> poll_n(ulp::Cq &cq, size_t n, ms timeout)
	{
		std::vector<ulp::Wc> out;
		auto until = Clock::now() + timeout;
		ulp::Wc wc[16];
		while (out.size() < n) {
			int got =
			    cq.poll(std::span<ulp::Wc>(wc, std::min<size_t>(16, n - out.size())));
			if (got > 0) {
				out.insert(out.end(), wc, wc + got);
				continue;
			}
			if (Clock::now() >= until)
				break;
			usleep(100);
		}
		return out;
	}

	std::optional<CmEv> wait_event(ulp::CmEventType t, ms timeout)
	{
		return events.wait_for([t](const CmEv &e) { return e.type == t; }, timeout);
	}

private:
	static bool fail(std::string *err, const std::string &what)
	{
		if (err)
			*err = what + " (errno " + std::to_string(errno) + ")";
		return false;
	}

	void on_event(ulp::CmId *id, ulp::CmEvent &ev)
	{
		uint8_t pdl = ev.param.private_data_len;
		if (ev.event == ulp::CmEventType::ConnectRequest && ev.new_id)
			accept(ev);
		if (ev.event == ulp::CmEventType::Established && cfg.post_on_established)
			post_requests(id);
		events.push(CmEv{id, ev.event, ev.status, pdl});
	}

	void accept(ulp::CmEvent &ev)
	{
		ulp::QpInitAttr a;
		a.send_cq = scq.get();
		a.recv_cq = rcq.get();
		a.cap.max_send_wr = cfg.qp_depth;
		a.cap.max_recv_wr = cfg.qp_depth;
		a.cap.max_send_sge = 1;
		a.cap.max_recv_sge = 1;
		if (ev.new_id->create_qp(*pd, a))
			return; // left in the event: the CM rejects it
		ulp::Qp *q = ev.new_id->qp();
		for (uint32_t i = 0; i < cfg.recvs && i < 64; i++) {
			ulp::Sge s{va(recv_off(i)), kRecvSlot, mr->lkey()};
			ulp::RecvWr wr;
			wr.wr_cqe = &recv_cqe[i];
			wr.sg_list = &s;
			wr.num_sge = 1;
			const ulp::RecvWr *bad = nullptr;
			if (q->post_recv(&wr, &bad))
				return;
		}
		if (cfg.err_before_accept) {
			ulp::QpAttr e;
			e.qp_state = ulp::QpState::Err;
			if (q->modify(e, ulp::QP_STATE))
				return;
		}
		ulp::ConnParam cp;
		cp.responder_resources = 4;
		cp.initiator_depth = 4;
		if (ev.new_id->accept(cp))
			return;
		std::lock_guard g(lock_);
		conn_id_ = std::move(ev.new_id); // a previous connection's id must be gone
		accepted_++;
	}

	void post_requests(ulp::CmId *id)
	{
		ulp::Qp *q = id->qp();
		if (!q)
			return;
		ulp::Sge s0{va(kSendOff), kTargetSendLen, mr->lkey()};
		ulp::SendWr w0;
		w0.wr_cqe = &send_cqe[0];
		w0.sg_list = &s0;
		w0.num_sge = 1;
		w0.opcode = ulp::WrOpcode::Send;
		w0.send_flags = ulp::SEND_SIGNALED;
		ulp::Sge s1{va(kSendOff + 4096), kTargetReadLen, mr->lkey()};
		ulp::RdmaWr w1;
		w1.wr_cqe = &send_cqe[1];
		w1.sg_list = &s1;
		w1.num_sge = 1;
		w1.opcode = ulp::WrOpcode::RdmaRead;
		w1.send_flags = ulp::SEND_SIGNALED;
		w1.remote_addr = 0x1000;
		w1.rkey = 0x77;
		w0.next = &w1;
		const ulp::SendWr *bad = nullptr;
		(void)q->post_send(&w0, &bad);
	}

	std::mutex lock_;
	std::unique_ptr<ulp::CmId> conn_id_;
	uint32_t accepted_ = 0;
};

} // namespace wire
