// SPDX-License-Identifier: MIT
// tools/ulp-stress/memory.h - the daemon's memory must be flat after a warm-up.
//
// What VmRSS measures in ulp-targetd is mostly glibc's high-water marks: each event-loop
// thread allocates from an arena of its own, and an arena keeps what was freed (it is
// returned to the kernel only from the top of the heap, or by malloc_trim). So VmRSS
// climbs with the largest load seen so far (sessions at once, commands in flight, the size
// of their buffers) and then stays, whatever the count of cycles. A warm-up pass of every
// scenario and transport (the short profile's counts) reaches those marks; the run's own
// pass then repeats the same loads many more times, and any growth beyond the tolerance
// is memory kept per cycle: a leak or a cache that grows. The check runs in the long
// profile (and with --memory-check); the short profile only reports the growth from the
// baseline, which is the warm-up itself.
//
// A daemon built with AddressSanitizer keeps freed memory in its quarantine (256 MB by
// default) before reuse, so its VmRSS climbs with every pass whatever the code does (the
// exhaustion check under ASan: +112 MB after the warm-up; +2.6 MB with the quarantine off).
//
// So what is judged is the allocator's own count of the bytes the daemon holds, which
// stats_get reports (memory.heap_in_use: glibc's mallinfo2 over every arena, or the
// sanitizer allocator's count, quarantine left out): a leak or a growing cache shows there
// whatever the arenas keep. VmRSS is reported beside it. A daemon that does not report its
// heap has its VmRSS judged instead, except under a sanitizer's allocator (LeakSanitizer
// checks leaks at the daemon's exit there: a leak makes the exit status non-zero).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace stress
{

// One measure of the daemon's memory at the three points of a run, kB (-1: unknown).
struct MemoryFigure {
	int64_t baseline_kb = -1; // at the baseline (before any scenario)
	int64_t ref_kb = -1;      // after the warm-up pass (enabled only)
	int64_t end_kb = -1;      // after the last scenario
};

struct MemoryCheck {
	bool enabled = false;        // judged (long profile, --memory-check)
	MemoryFigure heap;           // stats_get memory.heap_in_use: bytes malloc'd, not freed
	MemoryFigure rss;            // VmRSS of the daemon's process
	std::string allocator;       // whose count heap is ("glibc", "asan", "tsan")
	int64_t tolerance_kb = 8192; // growth after the warm-up allowed: this, or
	double tolerance_pct = 10.0; // this share of the reference, whichever is larger
	std::string rss_unjudged;    // non-empty: why VmRSS could not be judged (a sanitizer)

	bool heap_known() const { return heap.baseline_kb >= 0 && heap.end_kb >= 0; }
	// What is judged: heap when the daemon reports it, else VmRSS.
	const MemoryFigure &judged() const { return heap_known() ? heap : rss; }
	int64_t allowed_kb() const;
	// Judged: false when enabled and the judged figure was known and could be judged.
	bool checked() const;
	// enabled and the figures known: false + *why when it grew beyond the tolerance.
	bool judge(std::string *why) const;
	std::vector<std::string> lines() const; // the report's memory lines
};

// Why the VmRSS of process pid says nothing about leaks (its allocator is AddressSanitizer's,
// found in /proc/PID/maps), or "" when it does or pid is unknown.
std::string sanitizer_allocator(pid_t pid);

} // namespace stress
