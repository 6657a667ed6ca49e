// SPDX-License-Identifier: MIT
// core/mem_map.cc - the address -> key map.
#include "core/mem_map.h"

#include "core/device.h"

#include <algorithm>
#include <cerrno>
#include <mutex>

namespace ulp
{

int MemMap::register_region(const void *addr, size_t len, const MemTranslation &t)
{
	auto start = reinterpret_cast<uintptr_t>(addr);
	if (len == 0 || start + len < start)
		return -EINVAL;
	uintptr_t end = start + len;
	std::unique_lock g(lock_);
	// First region starting at or after end: the only candidates for overlap are it (no:
	// it starts at or after our end) and the one before it.
	auto it = std::lower_bound(regions_.begin(), regions_.end(), end,
	                           [](const Region &r, uintptr_t v) { return r.start < v; });
	if (it != regions_.begin() && std::prev(it)->end > start)
		return -EEXIST;
	auto pos = it - regions_.begin(); // reserve() below invalidates it
	if (regions_.size() == regions_.capacity()) {
		// Grow here, not in insert, so that allocation failure is an errno, not a throw.
		try {
			regions_.reserve(regions_.size() * 2 + 4);
		} catch (const std::bad_alloc &) {
			return -ENOMEM;
		}
	}
	regions_.insert(regions_.begin() + pos, Region{start, end, t});
	return 0;
}

int MemMap::register_mr(Mr &mr)
{
	return register_region(reinterpret_cast<const void *>(static_cast<uintptr_t>(mr.iova())),
	                       static_cast<size_t>(mr.length()), {mr.lkey(), mr.rkey(), &mr});
}

int MemMap::unregister_region(const void *addr, size_t len)
{
	auto start = reinterpret_cast<uintptr_t>(addr);
	std::unique_lock g(lock_);
	auto it = std::lower_bound(regions_.begin(), regions_.end(), start,
	                           [](const Region &r, uintptr_t v) { return r.start < v; });
	if (it == regions_.end() || it->start != start || it->end - it->start != len)
		return -ENOENT;
	regions_.erase(it);
	return 0;
}

int MemMap::translate(const void *addr, size_t len, MemTranslation *out) const
{
	auto a = reinterpret_cast<uintptr_t>(addr);
	if (len == 0)
		len = 1;
	if (a + len < a)
		return -ENOENT;
	std::shared_lock g(lock_);
	// Last region starting at or before a.
	auto it = std::upper_bound(regions_.begin(), regions_.end(), a,
	                           [](uintptr_t v, const Region &r) { return v < r.start; });
	if (it == regions_.begin())
		return -ENOENT;
	--it;
	if (a + len > it->end)
		return -ENOENT;
	*out = it->t;
	return 0;
}

size_t MemMap::size() const
{
	std::shared_lock g(lock_);
	return regions_.size();
}

} // namespace ulp
