// SPDX-License-Identifier: MIT
// core/dma_heap.cc - the buddy allocator over a registered region (see dma_heap.h).
#include "core/dma_heap.h"
#include "core/lock_assert.h"

#include "core/log.h"
#include "core/mem_map.h"

#include <bit>
#include <cerrno>

namespace ulp
{

namespace
{

constexpr size_t npos = SIZE_MAX;

} // namespace

std::unique_ptr<DmaHeap> DmaHeap::create(Pd &pd, size_t bytes, size_t max_alloc, uint32_t access,
                                         MemMap *map)
{
	if (max_alloc < kMinBlock || !std::has_single_bit(max_alloc) || bytes == 0 ||
	    bytes > (size_t(1) << 40)) {
		errno = EINVAL;
		return nullptr;
	}
	bytes = (bytes + max_alloc - 1) / max_alloc * max_alloc;
	std::unique_ptr<DmaHeap> h(new DmaHeap);
	h->region_ = dma_alloc(bytes);
	if (!h->region_)
		return nullptr;
	h->mr_ = pd.reg_mr(h->region_->addr(), h->region_->length(), access);
	if (!h->mr_)
		return nullptr;
	if (map) {
		if (int rc = map->register_mr(*h->mr_); rc != 0) {
			errno = -rc;
			return nullptr;
		}
		h->map_ = map;
	}
	h->base_ = static_cast<uint8_t *>(h->region_->addr());
	h->min_order_ = unsigned(std::countr_zero(kMinBlock));
	h->max_order_ = unsigned(std::countr_zero(max_alloc));
	const size_t nunits = bytes / kMinBlock;
	h->units_.resize(nunits);
	h->next_.assign(nunits, npos);
	h->prev_.assign(nunits, npos);
	h->head_.assign(h->max_order_ + 1, npos);
	h->handed_ = std::make_unique<std::atomic<uint8_t>[]>(nunits);
	for (size_t u = 0; u < nunits; u++)
		h->handed_[u].store(kNone, std::memory_order_relaxed);
	// The region starts as free blocks of the largest order.
	const size_t per_max = max_alloc / kMinBlock;
	for (size_t u = 0; u < nunits; u += per_max)
		h->push_free(u, h->max_order_);
	return h;
}

DmaHeap::~DmaHeap()
{
	if (const size_t live = used_ - cached_bytes())
		ULP_LOG(Error, Core, "dma_heap: destroyed with {} bytes still allocated", live);
	if (map_ && mr_)
		map_->unregister_region(region_->addr(), region_->length());
	mr_.reset();
}

void DmaHeap::push_free(size_t unit, unsigned order)
{
	units_[unit].order = uint8_t(order);
	units_[unit].free = true;
	prev_[unit] = npos;
	next_[unit] = head_[order];
	if (head_[order] != npos)
		prev_[head_[order]] = unit;
	head_[order] = unit;
}

void DmaHeap::unlink_free(size_t unit, unsigned order)
{
	if (prev_[unit] != npos)
		next_[prev_[unit]] = next_[unit];
	else
		head_[order] = next_[unit];
	if (next_[unit] != npos)
		prev_[next_[unit]] = prev_[unit];
	units_[unit].free = false;
}

void *DmaHeap::alloc(size_t len)
{
	if (len == 0 || len > max_alloc())
		return nullptr;
	const unsigned want =
	    std::max(min_order_, unsigned(std::bit_width(len - 1))); // 2^want >= len
	const unsigned k = want - min_order_;
	if (k < kCachedOrders) {
		Cache &c = caches_[this_shard()];
		std::lock_guard g(c.lock);
		if (c.n[k] > 0) {
			const uint32_t u = c.unit[k][--c.n[k]];
			handed_[u].store(uint8_t(want), std::memory_order_relaxed);
			return base_ + size_t(u) * kMinBlock;
		}
	}
	{
		std::lock_guard g(lock_);
		if (void *p = alloc_locked(want))
			return p;
	}
	// Blocks sitting in the caches may be what is missing (a buddy they keep from
	// merging): give them back and try once more.
	flush_caches();
	std::lock_guard g(lock_);
	return alloc_locked(want);
}

void *DmaHeap::alloc_locked(unsigned want)
{
	ULP_ASSERT_HELD(lock_);
	unsigned o = want;
	while (o <= max_order_ && head_[o] == npos)
		o++;
	if (o > max_order_)
		return nullptr;
	size_t u = head_[o];
	unlink_free(u, o);
	// Split down to the size asked for; the upper halves go on their free lists.
	while (o > want) {
		o--;
		const size_t buddy = u + (size_t(1) << (o - min_order_));
		push_free(buddy, o);
	}
	units_[u].order = uint8_t(want);
	units_[u].free = false;
	used_ += size_t(1) << want;
	handed_[u].store(uint8_t(want), std::memory_order_relaxed);
	return base_ + u * kMinBlock;
}

void DmaHeap::free(void *p)
{
	if (!p)
		return;
	auto *b = static_cast<uint8_t *>(p);
	const size_t off = size_t(b - base_);
	if (b < base_ || off >= capacity() || off % kMinBlock) {
		ULP_LOG_RATELIMITED(Error, Core, "dma_heap: free of {}, not a block of this heap",
		                    fmt::ptr(p));
		return;
	}
	const size_t u = off / kMinBlock;
	// Taken back in one step: of two frees of one block, only one finds its order.
	const uint8_t o = handed_[u].exchange(kNone, std::memory_order_relaxed);
	if (o == kNone) {
		ULP_LOG_RATELIMITED(Error, Core, "dma_heap: free of {}, not an allocated block",
		                    fmt::ptr(p));
		return;
	}
	const unsigned k = o - min_order_;
	if (k < kCachedOrders) {
		Cache &c = caches_[this_shard()];
		std::lock_guard g(c.lock);
		if (c.n[k] < kCacheDepth) {
			c.unit[k][c.n[k]++] = uint32_t(u);
			return;
		}
	}
	std::lock_guard g(lock_);
	release_locked(u, o);
}

void DmaHeap::release_locked(size_t u, unsigned o)
{
	ULP_ASSERT_HELD(lock_);
	used_ -= size_t(1) << o;
	// Merge with the buddy while it is free and whole.
	while (o < max_order_) {
		const size_t span = size_t(1) << (o - min_order_);
		const size_t buddy = u ^ span;
		if (buddy >= units_.size() || !units_[buddy].free || units_[buddy].order != o)
			break;
		unlink_free(buddy, o);
		units_[buddy].order = kNone;
		units_[u].order = kNone;
		u = std::min(u, buddy);
		o++;
	}
	push_free(u, o);
}

void DmaHeap::flush_caches()
{
	std::vector<std::pair<uint32_t, unsigned>> back; // (unit, order)
	for (Cache &c : caches_) {
		std::lock_guard g(c.lock);
		for (unsigned k = 0; k < kCachedOrders; k++) {
			for (unsigned i = 0; i < c.n[k]; i++)
				back.emplace_back(c.unit[k][i], min_order_ + k);
			c.n[k] = 0;
		}
	}
	std::lock_guard g(lock_);
	for (auto [u, o] : back)
		release_locked(u, o);
}

size_t DmaHeap::cached_bytes() const
{
	size_t n = 0;
	for (Cache &c : caches_) {
		std::lock_guard g(c.lock);
		for (unsigned k = 0; k < kCachedOrders; k++)
			n += size_t(c.n[k]) << (min_order_ + k);
	}
	return n;
}

size_t DmaHeap::in_use() const
{
	// The caches first, then lock_ (flush_caches' order). Exact when nobody allocates or
	// frees meanwhile; otherwise a snapshot that may be a block off either way.
	const size_t cached = cached_bytes();
	std::lock_guard g(lock_);
	return used_ > cached ? used_ - cached : 0;
}

} // namespace ulp
