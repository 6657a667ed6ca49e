// SPDX-License-Identifier: MIT
#include "core/dma_mem.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <map>
#include <mutex>
#include <shared_mutex>

namespace ulp
{

namespace
{

constexpr size_t kHugePage = 2u << 20;

struct Table {
	std::shared_mutex lock;
	std::map<uintptr_t, const DmaRegion *> by_start; // start address -> region
};

Table &table()
{
	static Table t;
	return t;
}

std::atomic<uint32_t> g_seq{1};

} // namespace

DmaRegion::~DmaRegion()
{
	{
		std::unique_lock g(table().lock);
		table().by_start.erase(reinterpret_cast<uintptr_t>(addr_));
	}
	if (addr_)
		munmap(addr_, len_);
	if (fd_ >= 0)
		close(fd_);
}

std::unique_ptr<DmaRegion> dma_alloc(size_t length, bool try_huge)
{
	if (length == 0) {
		errno = EINVAL;
		return nullptr;
	}
	std::unique_ptr<DmaRegion> r(new DmaRegion());
	// Hugepages first: fewer TLB misses on the data path, as SPDK's env does. Falls back
	// silently to 4 KiB pages when none are reserved (the common case on a dev box).
	if (try_huge) {
		size_t hl = (length + kHugePage - 1) & ~(kHugePage - 1);
		int fd =
		    memfd_create("ulp-dma-huge", MFD_CLOEXEC | MFD_HUGETLB | MFD_ALLOW_SEALING);
		if (fd >= 0 && ftruncate(fd, static_cast<off_t>(hl)) == 0) {
			void *p = mmap(nullptr, hl, PROT_READ | PROT_WRITE,
			               MAP_SHARED | MAP_POPULATE, fd, 0);
			if (p != MAP_FAILED) {
				r->addr_ = p;
				r->len_ = hl;
				r->fd_ = fd;
				r->huge_ = true;
			}
		}
		if (!r->addr_ && fd >= 0)
			close(fd);
	}
	if (!r->addr_) {
		size_t pg = static_cast<size_t>(sysconf(_SC_PAGESIZE));
		size_t l = (length + pg - 1) & ~(pg - 1);
		int fd = memfd_create("ulp-dma", MFD_CLOEXEC | MFD_ALLOW_SEALING);
		if (fd < 0)
			return nullptr;
		if (ftruncate(fd, static_cast<off_t>(l)) != 0) {
			int e = errno;
			close(fd);
			errno = e;
			return nullptr;
		}
		void *p = mmap(nullptr, l, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		if (p == MAP_FAILED) {
			int e = errno;
			close(fd);
			errno = e;
			return nullptr;
		}
		r->addr_ = p;
		r->len_ = l;
		r->fd_ = fd;
	}
	// A peer process maps this memory; if the file could shrink, its copies would fault
	// (SIGBUS). Seal the size: the soft provider's socket wire refuses unsealed regions.
	fcntl(r->fd_, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
	r->id_ = (static_cast<uint64_t>(getpid()) << 32) | g_seq.fetch_add(1);
	std::unique_lock g(table().lock);
	table().by_start[reinterpret_cast<uintptr_t>(r->addr_)] = r.get();
	return r;
}

const DmaRegion *dma_lookup(const void *addr, size_t len)
{
	auto a = reinterpret_cast<uintptr_t>(addr);
	std::shared_lock g(table().lock);
	auto &m = table().by_start;
	auto it = m.upper_bound(a);
	if (it == m.begin())
		return nullptr;
	--it;
	const DmaRegion *r = it->second;
	uintptr_t s = it->first;
	if (a >= s && a + len <= s + r->length() && a + len >= a)
		return r;
	return nullptr;
}

} // namespace ulp
