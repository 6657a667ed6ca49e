// SPDX-License-Identifier: MIT
// core/dma_heap.h - contiguous I/O buffers of any size from one registered region.
//
// A target moving a command's data by RDMA needs a buffer of the command's length inside
// registered memory, and registering per I/O (pinning pages, updating the device's
// translation tables) is too slow for the I/O path. BufPool (buf_pool.h) hands
// out buffers of one size; a storage target sees 512 bytes to megabytes. DmaHeap is a buddy
// allocator over one DmaRegion registered once: blocks of 2^k bytes, 4 KiB to max_alloc,
// split on demand and merged with their buddy on free, so a 4 KiB read and a 1 MiB write
// both get one contiguous, page-aligned range covered by the region's keys (one SGE or one
// REG_MR each).
//
// Threading: blocks of up to 128 KiB (a 4 KiB command's buffer, and the usual sizes up to a
// common max_sectors) are freed into and taken from a small cache of the calling thread's
// shard (core/shard_lock.h), under that shard's lock only: the pollers that run different
// connections' completions then share no lock per command (SPDK's iobuf keeps
// per-thread caches the same way). Everything else, and a cache that is empty or full, goes
// to the buddy allocator under the heap's lock. When the buddy allocator cannot satisfy a
// request, the caches are given back (merged) and it tries once more, so cached blocks never
// make an allocation fail that would succeed without them. The memory itself is the
// caller's between alloc and free.
#pragma once

#include "core/device.h"
#include "core/dma_mem.h"
#include "core/shard_lock.h"

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

namespace ulp
{

class MemMap;

// A buddy allocator over one registered region (see the top of this file). Thread-safe.
class DmaHeap
{
public:
	static constexpr size_t kMinBlock = 4096; // smallest block (and alignment), bytes

	// bytes rounded up to a multiple of max_alloc (a power of two >= 4 KiB), registered on
	// pd with access; entered into map when given (removed again at destruction). nullptr
	// and errno: EINVAL (bad sizes), ENOMEM, or reg_mr's errno.
	static std::unique_ptr<DmaHeap> create(Pd &pd, size_t bytes, size_t max_alloc,
	                                       uint32_t access, MemMap *map = nullptr);
	// Every block must have been freed (a peer may still DMA into one otherwise): reported
	// on stderr when not.
	~DmaHeap();
	DmaHeap(const DmaHeap &) = delete;
	DmaHeap &operator=(const DmaHeap &) = delete;

	// A block of at least len bytes (1 <= len <= max_alloc), page aligned; nullptr when
	// none is free (the caller waits or answers TASK SET FULL). No system call.
	void *alloc(size_t len);
	// Give back a block from alloc (nullptr is ignored). A pointer that is not a live block
	// start is reported on stderr and ignored (a double free would hand memory out twice).
	void free(void *p);

	uint32_t lkey() const { return mr_->lkey(); }         // for SGEs over any block
	uint32_t rkey() const { return mr_->rkey(); }         // to advertise any block to a peer
	Mr &mr() const { return *mr_; }                       // the MR over the whole region
	size_t capacity() const { return region_->length(); } // bytes
	size_t max_alloc() const { return size_t(1) << max_order_; } // largest block, bytes
	size_t in_use() const; // bytes handed out (block sizes, not requested lengths; not cached)

private:
	DmaHeap() = default;

	static constexpr unsigned kCachedOrders = 6; // 4 KiB .. 128 KiB blocks are cached
	static constexpr unsigned kCacheDepth = 8;   // blocks per order per shard, at most

	// One shard's cache: blocks freed by threads of that shard, still allocated as far as
	// the buddy allocator knows (their units_ entries say so).
	struct alignas(64) Cache {
		std::mutex lock; // guards the rest
		std::array<std::array<uint32_t, kCacheDepth>, kCachedOrders> unit{}; // block starts
		std::array<uint8_t, kCachedOrders> n{}; // blocks cached per order
	};

	// The buddy allocator's halves, under lock_.
	void *alloc_locked(unsigned want);
	void release_locked(size_t unit, unsigned order);
	// Every cache's blocks back to the buddy allocator (takes each cache's lock, then lock_).
	void flush_caches();
	size_t cached_bytes() const; // blocks in the caches now (takes each cache's lock)

	// One kMinBlock unit's state: the order of the block starting here, and whether it is
	// free; kNone for a unit inside a larger block.
	static constexpr uint8_t kNone = 0xff;
	struct Unit {
		uint8_t order = kNone; // log2(block bytes) of the block starting at this unit
		bool free = false;     // that block is on its free list
	};

	void push_free(size_t unit, unsigned order);
	void unlink_free(size_t unit, unsigned order);

	std::unique_ptr<DmaRegion> region_; // the memory, freed last
	std::unique_ptr<Mr> mr_;            // over all of region_
	MemMap *map_ = nullptr;             // where region_ is entered, or null
	uint8_t *base_ = nullptr;           // region_->addr()
	unsigned min_order_ = 12;           // log2(kMinBlock)
	unsigned max_order_ = 12;           // log2(max_alloc)
	mutable std::mutex lock_;           // guards everything below
	std::vector<Unit> units_;           // one per kMinBlock unit of the region
	// Free blocks per order, as doubly linked lists of unit indices (prev/next per unit):
	// O(1) unlink when a buddy is merged.
	std::vector<size_t> head_;        // per order: first free unit, or npos
	std::vector<size_t> next_, prev_; // per unit, valid while that unit heads a free block
	size_t used_ = 0;                 // bytes in allocated blocks, cached ones included
	// Per unit: the order of the block handed out starting there, kNone otherwise (a free,
	// cached or inner unit). Written when a block is handed out and swapped back to kNone
	// when it is freed, without lock_: a double free finds kNone.
	std::unique_ptr<std::atomic<uint8_t>[]> handed_;
	mutable std::array<Cache, kShards> caches_; // by this_shard()
};

} // namespace ulp
