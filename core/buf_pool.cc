// SPDX-License-Identifier: MIT
// core/buf_pool.cc - registered buffer pools.
#include "core/buf_pool.h"

#include "core/check.h"
#include "core/log.h"
#include "core/mem_map.h"

#include <cerrno>
#include <cstdlib>
#include <limits>
#include <new>

namespace ulp
{

std::unique_ptr<BufPool> BufPool::create(Pd &pd, size_t buf_size, size_t count, uint32_t access,
                                         MemMap *map)
{
	// Indices live in uint32_t; four billion buffers is not a pool anyone means.
	if (buf_size == 0 || count == 0 || count > std::numeric_limits<uint32_t>::max()) {
		errno = EINVAL;
		return nullptr;
	}
	const size_t align = buf_size >= 4096 ? 4096 : 64;
	if (buf_size > std::numeric_limits<size_t>::max() - align) {
		errno = EINVAL;
		return nullptr;
	}
	const size_t stride = (buf_size + align - 1) & ~(align - 1);
	if (stride > std::numeric_limits<size_t>::max() / count) {
		errno = EINVAL;
		return nullptr;
	}

	std::unique_ptr<BufPool> p(new (std::nothrow) BufPool());
	if (!p) {
		errno = ENOMEM;
		return nullptr;
	}
	p->buf_size_ = buf_size;
	p->stride_ = stride;
	try {
		p->bufs_.resize(count);
		p->free_.resize(count);
		p->out_.assign(count, 0);
	} catch (const std::bad_alloc &) {
		errno = ENOMEM;
		return nullptr;
	}
	// Index 0 on top: a fresh pool hands buffers out in address order. Filled before
	// anything can fail, so that a pool destroyed on an error path has nothing "in use".
	for (size_t i = 0; i < count; i++)
		p->free_[i] = static_cast<uint32_t>(count - 1 - i);
	p->nfree_ = count;

	// dma_alloc aligns to at least a page, so every buffer is aligned as promised.
	p->region_ = dma_alloc(stride * count);
	if (!p->region_)
		return nullptr; // errno from dma_alloc
	errno = 0;
	p->mr_ = pd.reg_mr(p->region_->addr(), p->region_->length(), access);
	if (!p->mr_) {
		if (errno == 0)
			errno = ENOMEM;
		return nullptr;
	}
	if (map) {
		int ret = map->register_mr(*p->mr_);
		if (ret) {
			errno = -ret;
			return nullptr;
		}
		p->map_ = map;
	}

	auto *base = static_cast<uint8_t *>(p->region_->addr());
	for (size_t i = 0; i < count; i++)
		p->bufs_[i] = Buf{base + i * stride, p->mr_->lkey(), p->mr_->rkey()};
	return p;
}

BufPool::~BufPool()
{
	size_t out = in_use();
	if (out) {
		ULP_LOG(Error, Core, "BufPool {} destroyed with {} of {} buffers in use",
		        fmt::ptr(this), out, bufs_.size());
#ifndef NDEBUG
		std::abort();
#endif
	}
	if (map_ && mr_)
		map_->unregister_region(region_->addr(), region_->length());
	mr_.reset(); // deregister before the memory goes
	region_.reset();
}

const Buf *BufPool::get()
{
	std::lock_guard g(lock_);
	if (nfree_ == 0)
		return nullptr;
	uint32_t i = free_[--nfree_];
	out_[i] = 1;
	return &bufs_[i];
}

void BufPool::put(const Buf *b)
{
	// Integer arithmetic: comparing pointers into different arrays is unspecified.
	auto off = reinterpret_cast<uintptr_t>(b) - reinterpret_cast<uintptr_t>(bufs_.data());
	ULP_CHECK(off < bufs_.size() * sizeof(Buf) && off % sizeof(Buf) == 0,
	          "BufPool: put of a buffer from another pool ({})", fmt::ptr(b));
	auto i = static_cast<uint32_t>(off / sizeof(Buf));
	std::lock_guard g(lock_);
	ULP_CHECK(out_[i], "BufPool: put of a buffer that is not in use ({})", fmt::ptr(b->addr));
	out_[i] = 0;
	free_[nfree_++] = i;
}

const Buf *BufPool::buf_of(const void *addr) const
{
	auto a = reinterpret_cast<uintptr_t>(addr);
	auto base = reinterpret_cast<uintptr_t>(region_->addr());
	if (a < base)
		return nullptr;
	size_t i = (a - base) / stride_;
	if (i >= bufs_.size() || (a - base) % stride_ >= buf_size_)
		return nullptr; // past the last buffer, or in a buffer's alignment padding
	return &bufs_[i];
}

size_t BufPool::in_use() const
{
	std::lock_guard g(lock_);
	return bufs_.size() - nfree_;
}

uint32_t BufPool::lkey() const
{
	return mr_->lkey();
}
uint32_t BufPool::rkey() const
{
	return mr_->rkey();
}

} // namespace ulp
