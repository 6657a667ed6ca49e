// SPDX-License-Identifier: MIT
// core/buf_pool.h - a pool of registered I/O buffers.
//
// The DESIGN's memory rule: target memory is registered once per PD, never per I/O. A
// BufPool is one DmaRegion (hugepages when the system has them, memfd-backed so the soft
// provider's cross-process wire can reach it), one MR over all of it, optionally one entry
// in a MemMap, carved into equal buffers. get()/put() hand buffers out and back without
// allocating: the free list is a preallocated stack of indices, reused LIFO so that the
// buffer touched most recently (warmest in cache) goes out next.
#pragma once

#include "core/device.h"
#include "core/dma_mem.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

namespace ulp
{

class MemMap;

// One buffer of a pool. The pool owns it; the fields never change.
struct Buf {
	void *addr = nullptr; // first byte; aligned to the pool's alignment
	uint32_t lkey = 0;    // the pool MR's lkey (for SGEs)
	uint32_t rkey = 0;    // the pool MR's rkey (to advertise to a peer)
};

// Equal registered buffers from one region (see the top of this file). Thread-safe.
class BufPool
{
public:
	// count buffers of buf_size bytes each, every buffer aligned to 64 bytes, or to 4096
	// when buf_size >= 4096 (so that page-sized buffers map to whole pages in REG_MR).
	// Registered on pd with access (ACCESS_* bits); when map is given the whole region is
	// entered into it, and removed again when the pool is destroyed (map must outlive the
	// pool). nullptr and errno on failure: EINVAL (zero size or count, or overflow),
	// ENOMEM, or the errno of reg_mr.
	static std::unique_ptr<BufPool> create(Pd &pd, size_t buf_size, size_t count,
	                                       uint32_t access, MemMap *map = nullptr);

	// Every buffer must have been put back: destroying a pool with buffers out is a
	// programming error (the peer may still DMA into them). It is reported on stderr, and
	// aborts in debug builds (NDEBUG unset).
	~BufPool();
	BufPool(const BufPool &) = delete;
	BufPool &operator=(const BufPool &) = delete;

	// A free buffer, or nullptr when all are in use. No allocation; takes the pool lock.
	const Buf *get();
	// Give b (from this pool's get()) back. Putting back a foreign or free buffer is
	// reported on stderr and aborts (a double put would hand one buffer out twice).
	void put(const Buf *b);

	// The buffer whose bytes include addr (for example a receive completion's SGE
	// address), or nullptr if addr is not inside a buffer of this pool. Lock-free.
	const Buf *buf_of(const void *addr) const;

	size_t buf_size() const { return buf_size_; } // usable bytes per buffer
	size_t stride() const { return stride_; }     // distance between buffers (>= buf_size)
	size_t count() const { return bufs_.size(); } // total buffers
	size_t in_use() const;                        // buffers handed out and not put back
	uint32_t lkey() const;                        // the pool MR's lkey (same for all buffers)
	uint32_t rkey() const;                        // and its rkey
	Mr &mr() const { return *mr_; }               // the MR over the whole region
	const DmaRegion &region() const { return *region_; } // the memory of every buffer

private:
	BufPool() = default;

	std::unique_ptr<DmaRegion> region_; // the memory; freed last
	std::unique_ptr<Mr> mr_;            // over all of region_; deregistered before it
	MemMap *map_ = nullptr;             // where region_ is entered, or null
	size_t buf_size_ = 0;               // bytes per buffer as requested
	size_t stride_ = 0;                 // bytes between buffer starts (aligned)
	std::vector<Buf> bufs_;             // one per buffer, immutable after create
	mutable std::mutex lock_;           // protects free_, nfree_ and out_
	std::vector<uint32_t> free_;        // stack of free indices; top is free_[nfree_-1]
	size_t nfree_ = 0;                  // entries of free_ in use
	std::vector<uint8_t> out_;          // out_[i] != 0 while buffer i is handed out
};

} // namespace ulp
