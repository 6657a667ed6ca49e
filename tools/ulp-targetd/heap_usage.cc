// SPDX-License-Identifier: MIT
// tools/ulp-targetd/heap_usage.cc - the allocator's own figures (see heap_usage.h).
#include "tools/ulp-targetd/heap_usage.h"

#include "core/sanitizer.h"

#include <cstddef>

#if ULP_ASAN || ULP_TSAN
// The sanitizer runtimes' allocator interface (compiler-rt's
// sanitizer/allocator_interface.h, which GCC 12 does not ship; libasan and libtsan export
// both).
extern "C" size_t __sanitizer_get_current_allocated_bytes(void);
extern "C" size_t __sanitizer_get_heap_size(void);
#else
#include <malloc.h>
#endif

namespace targetd
{

HeapUsage heap_usage()
{
	HeapUsage u;
#if ULP_ASAN || ULP_TSAN
#if ULP_ASAN
	u.allocator = "asan";
#else
	u.allocator = "tsan";
#endif
	u.in_use = __sanitizer_get_current_allocated_bytes();
	u.held = __sanitizer_get_heap_size();
#else
	// uordblks: in use in the arenas; hblkhd: blocks mmap'd on their own (large ones).
	const struct mallinfo2 m = mallinfo2();
	u.in_use = m.uordblks + m.hblkhd;
	u.held = m.arena + m.hblkhd;
#endif
	return u;
}

} // namespace targetd
