// SPDX-License-Identifier: MIT
// rw/sg_table.cc - scatter tables of registered userspace memory.
#include "rw/sg_table.h"

#include "core/mem_map.h"

#include <cerrno>
#include <cstdint>

namespace ulp
{

void SgTable::reserve(size_t n)
{
	ents_.reserve(n);
	lkeys_.reserve(n);
}

int SgTable::add(uint64_t addr, uint32_t length, uint32_t lkey)
{
	// A scatterlist never holds an empty entry (dma_map_sg would not produce one), and
	// rw.c's sg_offset walk would loop over it; refuse both at the door.
	if (length == 0 || addr + length < addr)
		return -EINVAL;
	ents_.push_back(SgEntry{addr, length});
	lkeys_.push_back(lkey);
	bytes_ += length;
	return 0;
}

int SgTable::add(const MemMap &map, const void *addr, size_t length)
{
	const auto a = reinterpret_cast<uintptr_t>(addr);
	if (length == 0 || length > UINT32_MAX || a + length < a)
		return -EINVAL;
	MemTranslation t;
	if (map.translate(addr, length, &t) != 0)
		return -EFAULT; // not registered memory: the kernel's dma_map_sg failing
	return add(static_cast<uint64_t>(a), static_cast<uint32_t>(length), t.lkey);
}

void SgTable::clear()
{
	ents_.clear();
	lkeys_.clear();
	bytes_ = 0;
}

} // namespace ulp
