// SPDX-License-Identifier: MIT
// providers/soft/shm_link.cc - a connection's ring-wire link: creating our side,
// checking and mapping the peer's, doorbells, staging space.
#include "providers/soft/shm_link.h"

#include "core/log.h"

#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace ulp::soft
{

bool Stage::take(uint64_t n, uint64_t *off, uint64_t *end)
{
	const uint64_t size = r ? r->length() : 0;
	n = (n + 63) & ~uint64_t{63}; // slots stay cache-line aligned
	if (!n || n > size)
		return false;
	if (head == tail)
		head = tail = 0; // idle: from the start, so that any n up to size fits
	const uint64_t pos = head % size;
	const uint64_t skip = pos + n > size ? size - pos : 0; // never wrap inside a payload
	if (head + skip + n - tail > size)
		return false;
	*off = skip ? 0 : pos;
	head += skip + n;
	*end = head;
	return true;
}

std::unique_ptr<ShmLink> ShmLink::create()
{
	std::unique_ptr<ShmLink> l(new ShmLink());
	// Plain pages: a hugepage would be mostly empty, and the peer maps this read-only.
	l->mine_ = dma_alloc(kRingBytes, false);
	if (!l->mine_)
		return nullptr;
	l->efd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (l->efd_ < 0)
		return nullptr;
	void *base = l->mine_->addr();
	l->me = ring_hdr(base);
	l->my_req = ring_req(base);
	l->my_rsp = ring_rsp(base);
	l->me->magic = kRingMagic;
	l->me->version = kRingVersion;
	l->me->slots = kRingSlots;
	l->me->inl = kRingInline;
	struct stat sb;
	if (fstat(l->mine_->fd(), &sb) == 0)
		l->sync_mine_ = ring_sync(sb.st_ino);
	return l;
}

ShmLink::~ShmLink()
{
	if (peer_map_)
		munmap(peer_map_, kRingBytes);
	if (peer_efd_ >= 0)
		close(peer_efd_);
	if (efd_ >= 0)
		close(efd_);
}

static bool is_eventfd(int fd)
{
	char path[64], target[64];
	std::snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	ssize_t n = readlink(path, target, sizeof(target) - 1);
	if (n <= 0)
		return false;
	target[n] = 0;
	return std::strcmp(target, "anon_inode:[eventfd]") == 0;
}

bool ShmLink::attach(int region_fd, int doorbell_fd, std::string *why)
{
	auto fail = [&](const char *w) {
		*why = w;
		close(region_fd);
		close(doorbell_fd);
		return false;
	};
	if (peer_map_)
		return fail("attached already");
	// Only a region that can never shrink is safe to read later (else SIGBUS).
	struct stat sb;
	const int seals = fcntl(region_fd, F_GET_SEALS);
	if (seals < 0 || !(seals & F_SEAL_SHRINK))
		return fail("link region is not a memfd sealed against shrinking");
	if (fstat(region_fd, &sb) != 0 || static_cast<uint64_t>(sb.st_size) < kRingBytes)
		return fail("link region too small");
	if (!is_eventfd(doorbell_fd))
		return fail("doorbell is not an eventfd");
	void *p = mmap(nullptr, kRingBytes, PROT_READ, MAP_SHARED, region_fd, 0);
	if (p == MAP_FAILED)
		return fail("cannot map the link region");
	sync_peer_ = ring_sync(sb.st_ino);
	close(region_fd);
	RingHdr h;
	std::memcpy(&h, p, sizeof(h));
	if (h.magic != kRingMagic || h.version != kRingVersion || h.slots != kRingSlots ||
	    h.inl != kRingInline) {
		munmap(p, kRingBytes);
		close(doorbell_fd);
		*why = "link region of a foreign layout";
		return false;
	}
	// Writes to the doorbell never block the engine (a counter at its maximum).
	fcntl(doorbell_fd, F_SETFL, fcntl(doorbell_fd, F_GETFL) | O_NONBLOCK);
	peer_map_ = p;
	peer_efd_ = doorbell_fd;
	peer = ring_hdr(p);
	peer_req = ring_req(p);
	peer_rsp = ring_rsp(p);
	return true;
}

void ShmLink::kick()
{
	if (!peer)
		return;
	// Publish-then-look against the peer's sleep-then-look (Engine::arm_rings), all
	// sequentially consistent: one of the two sees the other's store, so a doorbell is
	// never lost.
	const uint32_t s = ring_load(peer->sleep);
	if (!s || s == kicked_)
		return;
	kicked_ = s;
	uint64_t one = 1;
	(void)!write(peer_efd_, &one, sizeof(one));
}

bool ShmLink::has_work() const
{
	if (!peer)
		return false;
	if (!hold && peek(peer->req_prod) != rx)
		return true;
	if (peek(peer->done) != rsp_seen || peek(peer->rnr_naks) != rnr_seen)
		return true;
	if (hold && peek(peer->rnr_retries) != naks - 1)
		return true; // the retry (or garbage)
	if (!peer_err && peek(peer->err))
		return true;
	return quiesce.wait && peek(peer->err_ack);
}

} // namespace ulp::soft
