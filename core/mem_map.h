// SPDX-License-Identifier: MIT
// core/mem_map.h - virtual address -> memory key translation (SPDK's spdk_mem_map).
//
// A target registers its buffer pools once per PD and then needs, for any address inside
// a pool, the lkey to put in an SGE (and the rkey to advertise). MemMap answers that on
// the data path: translate() takes a shared lock, binary-searches a sorted array and
// never allocates. Registration is the slow path (exclusive lock, may allocate).
//
// One MemMap per PD: keys are only meaningful in the PD that issued them. Regions may not
// overlap; a range is translated only if it lies entirely inside one region (as SPDK
// requires, an I/O buffer never straddles two registrations).
#pragma once

#include <cstddef>
#include <cstdint>
#include <shared_mutex>
#include <vector>

namespace ulp
{

class Mr;

// What a registered region translates to.
struct MemTranslation {
	uint32_t lkey = 0; // for local SGEs
	uint32_t rkey = 0; // for remote peers (RDMA READ/WRITE targets)
	Mr *mr = nullptr;  // the MR behind the keys; may be null (keys from elsewhere)
};

// Address ranges of one PD's registered memory and their keys (see the top of this file).
// Thread-safe.
class MemMap
{
public:
	MemMap() = default;
	MemMap(const MemMap &) = delete;
	MemMap &operator=(const MemMap &) = delete;

	// Map [addr, addr + len) to t. 0, -EINVAL (len 0 or the range wraps), -EEXIST (it
	// overlaps a registered region), -ENOMEM.
	int register_region(const void *addr, size_t len, const MemTranslation &t);
	// register_region(mr.iova(), mr.length(), {mr.lkey(), mr.rkey(), &mr}) for a user MR.
	int register_mr(Mr &mr);
	// Remove the region registered with exactly this start and length. 0 or -ENOENT.
	// Translations already returned stay as valid as the MR they name.
	int unregister_region(const void *addr, size_t len);

	// The region that contains all of [addr, addr + len) (len 0 means the byte at addr).
	// 0 and *out set, or -ENOENT (unmapped, or the range straddles a region's end).
	// Data path: no allocation, shared lock only.
	int translate(const void *addr, size_t len, MemTranslation *out) const;

	size_t size() const; // number of registered regions

private:
	struct Region {
		uintptr_t start;  // first byte
		uintptr_t end;    // one past the last byte (start < end)
		MemTranslation t; // what the region translates to
	};
	mutable std::shared_mutex lock_; // shared: translate/size; exclusive: (un)register
	std::vector<Region> regions_;    // sorted by start, non-overlapping; under lock_
};

} // namespace ulp
