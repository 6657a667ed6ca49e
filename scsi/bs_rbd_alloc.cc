// SPDX-License-Identifier: MIT
// scsi/bs_rbd_alloc.cc - the rbd backstore's allocation map (see bs_rbd_alloc.h).
#include "scsi/bs_rbd_alloc.h"

#include <algorithm>

namespace ulp::scsi
{

void RbdAllocMap::init(uint64_t obj_size, uint64_t size)
{
	std::lock_guard g(lock_);
	obj_size_ = obj_size ? obj_size : 1;
	const uint64_t n = (size + obj_size_ - 1) / obj_size_;
	dealloc_.assign(n, 0);
	touched_.assign(n, 0);
}

void RbdAllocMap::resize(uint64_t size)
{
	std::lock_guard g(lock_);
	const uint64_t n = (size + obj_size_ - 1) / obj_size_;
	dealloc_.resize(n, 0);
	touched_.resize(n, 0);
	walk_ = 0; // a walk running now is of the old size: discarded
}

void RbdAllocMap::whole_objects(uint64_t off, uint64_t len, uint64_t *first, uint64_t *end) const
{
	*first = (off + obj_size_ - 1) / obj_size_;
	*end = (off + len) / obj_size_;
	if (*end < *first)
		*end = *first;
}

void RbdAllocMap::map_range(uint64_t off, uint64_t len)
{
	if (len == 0)
		return;
	const uint64_t end = std::min<uint64_t>(object_of(off + len - 1) + 1, dealloc_.size());
	for (uint64_t i = object_of(off); i < end; i++) {
		dealloc_[i] = 0;
		touched_[i] = 1;
	}
}

void RbdAllocMap::write_started(uint64_t off, uint64_t len)
{
	std::lock_guard g(lock_);
	writes_started_++;
	map_range(off, len);
}

void RbdAllocMap::write_ended(uint64_t off, uint64_t len)
{
	std::lock_guard g(lock_);
	writes_ended_++;
	map_range(off, len);
}

RbdAllocMap::UnmapMark RbdAllocMap::unmap_started()
{
	std::lock_guard g(lock_);
	return {writes_started_, writes_ended_ == writes_started_};
}

void RbdAllocMap::unmap_ended(uint64_t off, uint64_t len, const UnmapMark &m, int err)
{
	std::lock_guard g(lock_);
	if (err < 0 || !m.quiet || writes_started_ != m.writes)
		return; // a write may have run beside it: the next walk tells
	uint64_t first, end;
	whole_objects(off, len, &first, &end);
	end = std::min<uint64_t>(end, dealloc_.size());
	for (uint64_t i = first; i < end; i++) {
		dealloc_[i] = 1;
		touched_[i] = 1;
	}
}

uint64_t RbdAllocMap::walk_started()
{
	std::lock_guard g(lock_);
	std::fill(touched_.begin(), touched_.end(), 0);
	walk_ = next_walk_++;
	return walk_;
}

bool RbdAllocMap::walk_ended(uint64_t token, uint64_t size, const std::vector<bool> &allocated,
                             bool ok)
{
	std::lock_guard g(lock_);
	const bool current = walk_ == token;
	walk_ = 0;
	if (!ok || !current || (size + obj_size_ - 1) / obj_size_ != dealloc_.size() ||
	    allocated.size() != dealloc_.size())
		return false; // failed, or the image changed size meanwhile: the next walk tells
	for (size_t i = 0; i < dealloc_.size(); i++)
		if (!touched_[i])
			dealloc_[i] = allocated[i] ? 0 : 1;
	known_ = true;
	return true;
}

void RbdAllocMap::extent(uint64_t offset, uint64_t size, BsExtent *out)
{
	std::lock_guard g(lock_);
	const uint64_t first = object_of(offset);
	if (!known_ || first >= dealloc_.size()) {
		out->mapped = true;
		out->length = size - offset;
		return;
	}
	const uint8_t state = dealloc_[first];
	uint64_t end = first + 1;
	while (end < dealloc_.size() && dealloc_[end] == state)
		end++;
	// Past the map's last object (a size it has not been told of yet) nothing is known:
	// a mapped run may extend there, a deallocated one may not.
	const uint64_t stop =
	    state == 0 && end == dealloc_.size() ? size : std::min(size, end * obj_size_);
	out->mapped = state == 0;
	out->length = stop - offset;
}

bool RbdAllocMap::known()
{
	std::lock_guard g(lock_);
	return known_;
}

} // namespace ulp::scsi
