// SPDX-License-Identifier: MIT
// core/dma_mem.h - memory that a device can reach from another process on this host.
//
// A real RNIC DMAs into any pinned page. The soft provider's cross-process wire can only do
// the same for memory the peer process can map, so registered buffer pools allocate from
// memfd-backed shared mappings (hugepages when the system has them) and record them here.
// The soft provider looks regions up when an MR is registered; memory not found here still
// works, with payloads carried inside the wire's packets instead.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace ulp
{

// One memfd-backed shared mapping from dma_alloc; unmapped and closed when it goes.
class DmaRegion
{
public:
	~DmaRegion();
	DmaRegion(const DmaRegion &) = delete;
	DmaRegion &operator=(const DmaRegion &) = delete;

	void *addr() const { return addr_; }   // first byte, page (or hugepage) aligned
	size_t length() const { return len_; } // bytes, a multiple of the page size
	int fd() const { return fd_; }         // memfd; the peer maps it MAP_SHARED
	uint64_t id() const { return id_; }    // unique on this host: pid << 32 | sequence
	bool huge() const { return huge_; }    // backed by 2 MiB hugepages

private:
	friend std::unique_ptr<DmaRegion> dma_alloc(size_t length, bool try_huge);
	DmaRegion() = default;
	void *addr_ = nullptr;
	size_t len_ = 0;
	int fd_ = -1;
	uint64_t id_ = 0;
	bool huge_ = false;
};

// Allocate length bytes (rounded up to the page or hugepage size), zeroed. nullptr and
// errno on failure.
std::unique_ptr<DmaRegion> dma_alloc(size_t length, bool try_huge = true);

// The live region holding all of [addr, addr + len), or nullptr. Thread-safe; the result
// is valid while the region is alive (the caller holds an MR on it).
const DmaRegion *dma_lookup(const void *addr, size_t len);

} // namespace ulp
