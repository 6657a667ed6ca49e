// SPDX-License-Identifier: MIT
// rw/sg_table.h - a scatter table of registered userspace memory (the kernel's sg_table).
//
// In the kernel an rdma_rw_ctx is built from a DMA-mapped scatterlist and every SGE uses
// the PD's local_dma_lkey. Userspace has no local_dma_lkey: each entry carries the lkey of
// the registered region it lies in, resolved once when the entry is added (through a
// MemMap, or given by a caller who already knows it, e.g. from a BufPool Buf). The
// addresses and lengths are kept as core SgEntry values so that the MR path can hand them
// to Mr::map_sg (ib_map_mr_sg) as a std::span without copying.
//
// Capacity is reserved up front; add() never allocates within it, so a table reused from
// I/O to I/O (clear(), then add()) does not touch the heap in steady state.
#pragma once

#include "core/device.h"

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace ulp
{

class MemMap;

// The local side of an rw context: entries of registered memory, each with its lkey.
class SgTable
{
public:
	SgTable() = default;
	explicit SgTable(size_t capacity) { reserve(capacity); } // reserve(capacity)

	// Preallocate room for n entries (the only call here that may allocate besides an
	// add() beyond the reserved capacity).
	void reserve(size_t n);

	// Append [addr, addr + length) whose memory is registered under lkey. 0, or -EINVAL
	// for a zero length or a range that wraps the address space.
	int add(uint64_t addr, uint32_t length, uint32_t lkey);
	// Append [addr, addr + length), resolving its lkey through map (one MemMap per PD).
	// 0, -EINVAL (zero length, longer than 4 GiB - 1, or wrapping), or -EFAULT when the
	// range does not lie entirely inside one registered region (the table is unchanged).
	int add(const MemMap &map, const void *addr, size_t length);

	void clear(); // drop every entry, keep the capacity

	size_t size() const { return ents_.size(); } // entries
	bool empty() const { return ents_.empty(); } // no entries
	uint64_t length() const { return bytes_; }   // sum of the entries' lengths

	// Address/length pairs in order (what Mr::map_sg consumes) and their lkeys (same
	// index).
	std::span<const SgEntry> entries() const { return ents_; }
	std::span<const uint32_t> lkeys() const { return lkeys_; } // entries()'s lkeys

private:
	std::vector<SgEntry> ents_;   // address and length of each entry
	std::vector<uint32_t> lkeys_; // lkey of each entry (parallel to ents_)
	uint64_t bytes_ = 0;          // sum of ents_[i].length
};

} // namespace ulp
