// SPDX-License-Identifier: MIT
// providers/soft/mr.cc - memory regions, key checks and the copy cursor.
//
// Keys are index << 8 | key byte, lkey == rkey, as rxe does. REG_MR may change only the
// key byte (rxe_reg_fast_mr: "user can only update key portion of l/rkey").
#include "providers/soft/soft_internal.h"

#include <cerrno>

namespace ulp::soft
{

SoftMr::SoftMr(SoftPd &pd, uint32_t idx, void *addr, size_t length, uint32_t acc)
    : Mr(pd, idx << 8, idx << 8, reinterpret_cast<uint64_t>(addr), length, 0), sdev(pd.sdev),
      spd(pd), index(idx), state(MrState::Valid), key(idx << 8), access(acc),
      va(reinterpret_cast<uint64_t>(addr)), len(length), dma(dma_lookup(addr, length)), user(true)
{
	pd.users++;
}

SoftMr::SoftMr(SoftPd &pd, uint32_t idx, uint32_t max_num_sg)
    : Mr(pd, idx << 8, idx << 8, 0, 0, max_num_sg), sdev(pd.sdev), spd(pd), index(idx),
      state(MrState::Invalid), key(idx << 8), access(0), va(0), len(0), pages(max_num_sg),
      user(false)
{
	pd.users++;
}

SoftMr::~SoftMr()
{
	{
		std::unique_lock g(sdev.mr_lock); // waits for copies in flight (DMA)
		sdev.mrs[index] = nullptr;
	}
	spd.users--;
}

static uint32_t alloc_mr_index(SoftDevice &dev, SoftMr *placeholder_null)
{
	// mr_lock held exclusively. Index 0 is never used so that key 0 is always invalid.
	for (uint32_t i = 1; i < dev.mrs.size(); i++)
		if (!dev.mrs[i])
			return i;
	if (dev.mrs.size() > dev.attr().max_mr)
		return 0;
	if (dev.mrs.empty())
		dev.mrs.push_back(placeholder_null);
	dev.mrs.push_back(nullptr);
	return static_cast<uint32_t>(dev.mrs.size() - 1);
}

std::unique_ptr<Mr> SoftPd::reg_mr(void *addr, size_t length, uint32_t access)
{
	// IB spec 10.6.3.1 / ibv_reg_mr: remote write or atomic needs local write.
	if ((access & (ACCESS_REMOTE_WRITE | ACCESS_REMOTE_ATOMIC)) &&
	    !(access & ACCESS_LOCAL_WRITE)) {
		errno = EINVAL;
		return nullptr;
	}
	if ((!addr && length) || length > sdev.attr().max_mr_size ||
	    reinterpret_cast<uint64_t>(addr) + length < reinterpret_cast<uint64_t>(addr)) {
		errno = EINVAL;
		return nullptr;
	}
	std::unique_lock g(sdev.mr_lock);
	uint32_t idx = alloc_mr_index(sdev, nullptr);
	if (!idx) {
		errno = ENOMEM;
		return nullptr;
	}
	auto *mr = new SoftMr(*this, idx, addr, length, access);
	sdev.mrs[idx] = mr;
	return std::unique_ptr<Mr>(mr);
}

std::unique_ptr<Mr> SoftPd::alloc_mr(uint32_t max_num_sg)
{
	if (!(sdev.attr().device_cap_flags & DEVICE_MEM_MGT_EXTENSIONS)) {
		errno = EOPNOTSUPP;
		return nullptr;
	}
	if (!max_num_sg || max_num_sg > sdev.attr().max_fast_reg_page_list_len) {
		errno = EINVAL;
		return nullptr;
	}
	std::unique_lock g(sdev.mr_lock);
	uint32_t idx = alloc_mr_index(sdev, nullptr);
	if (!idx) {
		errno = ENOMEM;
		return nullptr;
	}
	auto *mr = new SoftMr(*this, idx, max_num_sg);
	sdev.mrs[idx] = mr;
	return std::unique_ptr<Mr>(mr);
}

SoftMr *SoftDevice::mr_lookup(uint32_t k) const
{
	uint32_t idx = key_index(k);
	if (idx == 0 || idx >= mrs.size())
		return nullptr;
	SoftMr *mr = mrs[idx];
	if (!mr || mr->state != MrState::Valid || mr->key != k)
		return nullptr;
	return mr;
}

static bool in_range(const SoftMr &mr, uint64_t va, uint64_t len)
{
	return va >= mr.va && va + len >= va && va + len <= mr.va + mr.len;
}

WcStatus check_local_sges(SoftDevice &dev, SoftPd &pd, const Sge *sge, uint32_t n,
                          uint32_t need_access, uint64_t *total)
{
	uint64_t sum = 0;
	for (uint32_t i = 0; i < n; i++) {
		if (!sge[i].length)
			continue; // zero-length SGEs carry nothing and are not checked (rxe)
		SoftMr *mr = dev.mr_lookup(sge[i].lkey);
		if (!mr || &mr->spd != &pd || (mr->access & need_access) != need_access ||
		    !in_range(*mr, sge[i].addr, sge[i].length))
			return WcStatus::LocProtErr;
		sum += sge[i].length;
	}
	if (sum > 0x80000000ull) // IB messages are at most 2^31 bytes
		return WcStatus::LocLenErr;
	*total = sum;
	return WcStatus::Success;
}

SoftMr *check_remote(SoftDevice &dev, SoftPd &pd, uint32_t rkey, uint64_t va, uint64_t len,
                     uint32_t need_access)
{
	SoftMr *mr = dev.mr_lookup(rkey);
	if (!mr || &mr->spd != &pd || (mr->access & need_access) != need_access ||
	    !in_range(*mr, va, len))
		return nullptr;
	return mr;
}

MrReadLocks::MrReadLocks(SoftDevice &a, SoftDevice &b)
    : first(&a < &b ? &a : &b), second(&a == &b ? nullptr : (&a < &b ? &b : &a))
{
	first->mr_lock.lock_shared();
	if (second)
		second->mr_lock.lock_shared();
}

MrReadLocks::~MrReadLocks()
{
	if (second)
		second->mr_lock.unlock_shared();
	first->mr_lock.unlock_shared();
}

Cursor Cursor::sges(SoftDevice &dev, const Sge *sge, uint32_t n)
{
	Cursor c;
	c.kind_ = Kind::Sges;
	c.dev_ = &dev;
	c.sge_ = sge;
	c.nsge_ = n;
	return c;
}

Cursor Cursor::mr(const SoftMr &mr, uint64_t va, uint64_t len)
{
	Cursor c;
	c.kind_ = Kind::Mr;
	c.mr_ = &mr;
	c.va_ = va;
	c.left_ = len;
	return c;
}

Cursor Cursor::flat(const void *p, uint64_t len)
{
	Cursor c;
	c.kind_ = Kind::Flat;
	c.flat_ = static_cast<uint8_t *>(const_cast<void *>(p));
	c.left_ = len;
	return c;
}

bool Cursor::next(uint8_t **p, uint64_t *n, uint64_t max)
{
	switch (kind_) {
	case Kind::Flat:
		if (!left_ || !max)
			return false;
		*p = flat_;
		*n = std::min(left_, max);
		flat_ += *n;
		left_ -= *n;
		return true;
	case Kind::Sges:
		while (!left_) {
			if (started_)
				i_++;
			started_ = true;
			if (i_ >= nsge_)
				return false;
			if (!sge_[i_].length)
				continue;
			mr_ = dev_->mr_lookup(sge_[i_].lkey);
			va_ = sge_[i_].addr;
			left_ = sge_[i_].length;
		}
		[[fallthrough]];
	case Kind::Mr:
		if (!left_ || !max)
			return false;
		*p = mr_->host(va_, std::min(left_, max), n);
		va_ += *n;
		left_ -= *n;
		return true;
	}
	return false;
}

void cursor_copy(Cursor &dst, Cursor &src, uint64_t len)
{
	uint8_t *dp = nullptr, *sp = nullptr;
	uint64_t dn = 0, sn = 0;
	while (len) {
		if (!dn && !dst.next(&dp, &dn, len))
			return;
		if (!sn && !src.next(&sp, &sn, len))
			return;
		uint64_t c = std::min({dn, sn, len});
		std::memcpy(dp, sp, c);
		dp += c;
		sp += c;
		dn -= c;
		sn -= c;
		len -= c;
	}
}

} // namespace ulp::soft
