// SPDX-License-Identifier: MIT
// tools/ulp-targetd/heap_usage.h - what the daemon's heap holds, for stats_get.
//
// VmRSS says little about leaks here: glibc gives each event-loop thread an arena, and an
// arena keeps what was freed (tools/ulp-stress/memory.h). The allocator itself knows the
// bytes the program holds: mallinfo2 (glibc 2.33) summed over every arena, or, in a build
// under AddressSanitizer or ThreadSanitizer, the sanitizer's allocator, whose figure leaves
// out its quarantine. A leak or a cache that grows shows in heap_in_use whatever the
// arenas keep; heap_held minus heap_in_use is what the allocator keeps for reuse.
#pragma once

#include <cstdint>

namespace targetd
{

struct HeapUsage {
	const char *allocator = "glibc"; // "glibc", or "asan" / "tsan" (the sanitizer's)
	uint64_t in_use = 0;             // bytes handed out by malloc and not freed
	uint64_t held = 0;               // bytes the allocator has from the system
};

// Walks every arena under its lock (glibc): for stats_get, not for the I/O path.
HeapUsage heap_usage();

} // namespace targetd
