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
// exhaustion check under ASan: +112 MB after the warm-up; +2.6 MB with the quarantine
// off). There the growth is reported, not judged: LeakSanitizer checks leaks at the
// daemon's exit instead (a leak makes the exit status non-zero, which fails the run).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

namespace stress
{

struct MemoryCheck {
	bool enabled = false;        // judged (long profile, --memory-check)
	int64_t baseline_kb = -1;    // VmRSS at the baseline (before any scenario)
	int64_t ref_kb = -1;         // VmRSS after the warm-up pass (enabled only)
	int64_t end_kb = -1;         // VmRSS after the last scenario
	int64_t tolerance_kb = 8192; // growth after the warm-up allowed: this, or
	double tolerance_pct = 10.0; // this share of ref_kb, whichever is larger
	std::string unjudged;        // non-empty: why the growth is reported, not judged

	int64_t allowed_kb() const;
	// enabled and both figures known: false + *why when it grew beyond the tolerance.
	bool judge(std::string *why) const;
	std::string line() const; // the report's memory line
};

// Why the VmRSS of process pid says nothing about leaks (its allocator is AddressSanitizer's,
// found in /proc/PID/maps), or "" when it does or pid is unknown.
std::string sanitizer_allocator(pid_t pid);

} // namespace stress
