// SPDX-License-Identifier: MIT
// tests/soft_wire/shm_peer.h - a raw ring-wire peer, shared by the hostile-peer tests
// (tests/soft_wire) and the fuzz target (fuzz/fuzz_shm_ring.cc).
//
// It speaks providers/soft/shm_ring.h by hand: the CM handshake over a RawPeer socket
// with its own link region (a sealed memfd) and doorbell (an eventfd) passed along, the
// target's link region mapped read-only, requests written into its own ring, answers
// written for the target's requests. Knobs in LinkOpts make the broken links the
// handshake must refuse. Nothing here uses gtest; every wait is bounded.
#pragma once

#include "providers/soft/shm_ring.h"
#include "tests/soft_wire/wire_peer.h"

#include <sys/eventfd.h>
#include <sys/stat.h>

namespace wire
{

using ulp::soft::kRingBytes;
using ulp::soft::kRingFlagsMask;
using ulp::soft::kRingInline;
using ulp::soft::kRingInlineData;
using ulp::soft::kRingMagic;
using ulp::soft::kRingRegion;
using ulp::soft::kRingSlots;
using ulp::soft::kRingSolicited;
using ulp::soft::kRingVersion;
using ulp::soft::ring_hdr;
using ulp::soft::ring_load;
using ulp::soft::ring_req;
using ulp::soft::ring_rsp;
using ulp::soft::ring_store;
using ulp::soft::RingHdr;
using ulp::soft::RingOp;
using ulp::soft::RingReq;
using ulp::soft::RingRsp;
using ulp::soft::RingStatus;

// The link this peer passes with its REQ. Defaults: what the provider itself makes.
struct LinkOpts {
	uint64_t size = kRingBytes;  // memfd size
	bool seal = true;            // F_SEAL_SHRINK
	uint32_t magic = kRingMagic; // header magic
	bool eventfd = true;         // the doorbell is an eventfd (else a pipe)
	int nfds = 2;                // fds passed: link region, doorbell
	uint8_t wire = 1;            // CmMsg::wire
};

class ShmPeer
{
public:
	ShmPeer() { sock.keep_fds = true; }
	ShmPeer(const ShmPeer &) = delete;
	ShmPeer &operator=(const ShmPeer &) = delete;
	~ShmPeer() { close(); }

	RawPeer sock;
	uint8_t *mine = nullptr;         // our link region (read/write)
	const uint8_t *theirs = nullptr; // the target's (read-only)
	int their_efd = -1;
	uint32_t tx = 0; // our next request index
	struct Region {
		uint64_t id;
		uint8_t *p;
		uint64_t len;
	};
	std::vector<Region> regions; // the target's regions, from its Region packets

	void close()
	{
		sock.close();
		if (mine)
			munmap(mine, map_len_);
		if (theirs)
			munmap(const_cast<uint8_t *>(theirs), kRingBytes);
		for (auto &r : regions)
			munmap(r.p, r.len);
		regions.clear();
		for (auto &r : own_)
			munmap(r.p, r.len);
		own_.clear();
		for (int f : {memfd_, efd_, their_efd, pipe_w_})
			if (f >= 0)
				::close(f);
		memfd_ = efd_ = their_efd = pipe_w_ = -1;
		mine = nullptr;
		theirs = nullptr;
		tx = 0;
	}

	// Connect and send a REQ asking for the ring wire with a link made per o.
	bool request(const std::string &name, const CmMsg &req = cm_req(), const LinkOpts &o = {})
	{
		close();
		if (!make_link(o) || !sock.connect(name))
			return false;
		CmMsg m = req;
		m.wire = o.wire;
		std::vector<uint8_t> b(sizeof(PktHdr) + sizeof(m));
		PktHdr h = wire::hdr(PktOp::CmReq, 0, sizeof(m));
		std::memcpy(b.data(), &h, sizeof(h));
		std::memcpy(b.data() + sizeof(h), &m, sizeof(m));
		// Both fds ride on the first byte, as the provider passes them.
		int fds[2] = {memfd_, efd_};
		iovec iov{b.data(), b.size()};
		alignas(cmsghdr) char cbuf[CMSG_SPACE(sizeof(fds))] = {};
		msghdr mh{};
		mh.msg_iov = &iov;
		mh.msg_iovlen = 1;
		if (o.nfds) {
			mh.msg_control = cbuf;
			mh.msg_controllen = CMSG_SPACE(sizeof(int) * o.nfds);
			cmsghdr *cm = CMSG_FIRSTHDR(&mh);
			cm->cmsg_level = SOL_SOCKET;
			cm->cmsg_type = SCM_RIGHTS;
			cm->cmsg_len = CMSG_LEN(sizeof(int) * o.nfds);
			std::memcpy(CMSG_DATA(cm), fds, sizeof(int) * o.nfds);
		}
		return sendmsg(sock.fd, &mh, MSG_NOSIGNAL) == static_cast<ssize_t>(b.size());
	}

	// The target's REP granting the ring wire; maps its link. nullopt on anything else.
	std::optional<CmMsg> granted(int timeout_ms)
	{
		auto p = sock.recv_pkt(timeout_ms);
		// The REP's two fds come first; a Region packet's may follow at once.
		if (!p || p->h.op != uint8_t(PktOp::CmRep) || p->payload.size() != sizeof(CmMsg) ||
		    sock.kept.size() < 2)
			return std::nullopt;
		CmMsg m;
		std::memcpy(&m, p->payload.data(), sizeof(m));
		int rfd = sock.kept[0], dfd = sock.kept[1];
		sock.kept.pop_front();
		sock.kept.pop_front();
		struct stat sb;
		if (fstat(rfd, &sb) == 0)
			sync_theirs_ = ulp::soft::ring_sync(sb.st_ino);
		void *t = mmap(nullptr, kRingBytes, PROT_READ, MAP_SHARED, rfd, 0);
		::close(rfd);
		their_efd = dfd;
		if (t == MAP_FAILED || !m.wire)
			return std::nullopt;
		theirs = static_cast<const uint8_t *>(t);
		return m;
	}

	// Ours.
	RingHdr &hdr() { return *ring_hdr(mine); }
	RingReq &req(uint32_t i) { return ring_req(mine)[i % kRingSlots]; }
	RingRsp &rsp(uint32_t i) { return ring_rsp(mine)[i % kRingSlots]; }
	// The target's.
	const RingHdr &thdr() const { return *ring_hdr(const_cast<uint8_t *>(theirs)); }
	const RingReq &treq(uint32_t i) const
	{
		return ring_req(const_cast<uint8_t *>(theirs))[i % kRingSlots];
	}
	const RingRsp &trsp(uint32_t i) const
	{
		return ring_rsp(const_cast<uint8_t *>(theirs))[i % kRingSlots];
	}
	// A field of the target's header (with ThreadSanitizer's edge: shm_ring.h).
	uint32_t peek(const uint32_t &f) const
	{
		const uint32_t v = ring_load(f);
		ulp::soft::ring_acquire(sync_theirs_);
		return v;
	}
	uint32_t t_done() const { return peek(thdr().done); }
	uint32_t t_prod() const { return peek(thdr().req_prod); }
	uint32_t t_naks() const { return peek(thdr().rnr_naks); }

	void kick()
	{
		uint64_t one = 1;
		if (their_efd >= 0)
			(void)!write(their_efd, &one, sizeof(one));
	}
	// Publish requests below n (default: all written) and ring.
	void publish(uint32_t n) { set(&RingHdr::req_prod, n); }
	void publish() { publish(tx); }
	void set(uint32_t RingHdr::*field, uint32_t v)
	{
		ulp::soft::ring_release(sync_mine_);
		ring_store(hdr().*field, v);
		kick();
	}

	// Write request tx (not yet published). Payload inline when data is given.
	RingReq &write_req(RingOp op, const void *data = nullptr, uint32_t len = 0)
	{
		RingReq &d = req(tx);
		std::memset(&d, 0, sizeof(d));
		d.seq = tx++;
		d.op = static_cast<uint8_t>(op);
		d.len = len;
		if (len && data) {
			d.flags = kRingInlineData;
			std::memcpy(d.data, data, std::min<uint32_t>(len, kRingInline));
		}
		return d;
	}

	// Read socket packets: map the target's Region announcements (their fds were kept).
	// false on anything but a Region (or EOF).
	bool pump_regions(int timeout_ms)
	{
		for (;;) {
			auto p = sock.recv_pkt(timeout_ms);
			if (!p)
				return !sock.eof();
			timeout_ms = 0;
			if (p->h.op != uint8_t(PktOp::Region) || sock.kept.empty())
				return false;
			int f = sock.kept.front();
			sock.kept.pop_front();
			void *m = mmap(nullptr, p->h.va, PROT_READ | PROT_WRITE, MAP_SHARED, f, 0);
			::close(f);
			if (m == MAP_FAILED)
				return false;
			regions.push_back(Region{p->h.shm_id, static_cast<uint8_t *>(m), p->h.va});
		}
	}
	uint8_t *region(uint64_t id, uint64_t off, uint64_t len)
	{
		for (auto &r : regions)
			if (r.id == id && off <= r.len && len <= r.len - off)
				return r.p + off;
		return nullptr;
	}

	// Pass a region of ours (memfd of size bytes) with id; the mapping is returned.
	uint8_t *pass_region(uint64_t id, uint64_t size)
	{
		int f = make_memfd(size);
		if (f < 0)
			return nullptr;
		void *m = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, f, 0);
		PktHdr h = wire::hdr(PktOp::Region);
		h.va = size;
		h.shm_id = id;
		bool ok = sock.send_pkt(h, nullptr, 0, f);
		::close(f);
		if (m == MAP_FAILED || !ok)
			return nullptr;
		own_.push_back(Region{id, static_cast<uint8_t *>(m), size});
		return static_cast<uint8_t *>(m);
	}

	// Wait until pred holds, pumping the socket (Region packets) meanwhile.
	bool wait(const std::function<bool()> &pred, int timeout_ms)
	{
		auto until = Clock::now() + ms(timeout_ms);
		for (;;) {
			if (pred())
				return true;
			if (Clock::now() >= until)
				return false;
			pump_regions(1);
		}
	}

private:
	bool make_link(const LinkOpts &o)
	{
		memfd_ = memfd_create("ulp-shm-peer", MFD_CLOEXEC | MFD_ALLOW_SEALING);
		if (memfd_ < 0 || ftruncate(memfd_, static_cast<off_t>(o.size)))
			return false;
		if (o.seal && fcntl(memfd_, F_ADD_SEALS, F_SEAL_SHRINK))
			return false;
		map_len_ = std::max<uint64_t>(o.size, 4096);
		void *m = mmap(nullptr, map_len_, PROT_READ | PROT_WRITE, MAP_SHARED, memfd_, 0);
		if (m == MAP_FAILED)
			return false;
		mine = static_cast<uint8_t *>(m);
		struct stat sb;
		if (fstat(memfd_, &sb) == 0)
			sync_mine_ = ulp::soft::ring_sync(sb.st_ino);
		if (o.size >= sizeof(RingHdr)) {
			RingHdr &h = *ring_hdr(mine);
			h.magic = o.magic;
			h.version = kRingVersion;
			h.slots = kRingSlots;
			h.inl = kRingInline;
		}
		if (o.eventfd) {
			efd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
		} else {
			int pp[2];
			if (pipe(pp))
				return false;
			efd_ = pp[0];
			pipe_w_ = pp[1];
		}
		return efd_ >= 0;
	}

	int memfd_ = -1, efd_ = -1, pipe_w_ = -1;
	void *sync_mine_ = nullptr, *sync_theirs_ = nullptr; // TSan (shm_ring.h, ring_sync)
	uint64_t map_len_ = 0;
	std::vector<Region> own_;
};

} // namespace wire
