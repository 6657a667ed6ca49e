// SPDX-License-Identifier: MIT
// core/dma_heap.cc - the buddy allocator over a registered region (see dma_heap.h).
#include "core/dma_heap.h"

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
	// The region starts as free blocks of the largest order.
	const size_t per_max = max_alloc / kMinBlock;
	for (size_t u = 0; u < nunits; u += per_max)
		h->push_free(u, h->max_order_);
	return h;
}

DmaHeap::~DmaHeap()
{
	if (used_)
		ULP_LOG(Error, Core, "dma_heap: destroyed with {} bytes still allocated", used_);
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
	std::lock_guard g(lock_);
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
	return base_ + u * kMinBlock;
}

void DmaHeap::free(void *p)
{
	if (!p)
		return;
	auto *b = static_cast<uint8_t *>(p);
	std::lock_guard g(lock_);
	const size_t off = size_t(b - base_);
	if (b < base_ || off >= units_.size() * kMinBlock || off % kMinBlock) {
		ULP_LOG_RATELIMITED(Error, Core, "dma_heap: free of {}, not a block of this heap",
		                    fmt::ptr(p));
		return;
	}
	size_t u = off / kMinBlock;
	if (units_[u].order == kNone || units_[u].free) {
		ULP_LOG_RATELIMITED(Error, Core, "dma_heap: free of {}, not an allocated block",
		                    fmt::ptr(p));
		return;
	}
	unsigned o = units_[u].order;
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

size_t DmaHeap::in_use() const
{
	std::lock_guard g(lock_);
	return used_;
}

} // namespace ulp
