// SPDX-License-Identifier: MIT
// tools/ulp-stress/memory.cc - flat memory after the warm-up (see memory.h).
#include "tools/ulp-stress/memory.h"

#include <algorithm>
#include <fstream>

namespace stress
{

int64_t MemoryCheck::allowed_kb() const
{
	return std::max<int64_t>(tolerance_kb, int64_t(double(ref_kb) * tolerance_pct / 100.0));
}

bool MemoryCheck::judge(std::string *why) const
{
	if (!enabled || !unjudged.empty() || ref_kb < 0 || end_kb < 0)
		return true;
	if (end_kb - ref_kb <= allowed_kb())
		return true;
	*why = "memory not flat after the warm-up: VmRSS " + std::to_string(ref_kb) + " kB -> " +
	       std::to_string(end_kb) + " kB (+" + std::to_string(end_kb - ref_kb) +
	       " kB, allowed " + std::to_string(allowed_kb()) + " kB)";
	return false;
}

std::string MemoryCheck::line() const
{
	if (baseline_kb < 0 || end_kb < 0)
		return "memory: VmRSS unknown (no /proc for the daemon)";
	std::string s = "memory: VmRSS " + std::to_string(baseline_kb) + " kB at the baseline";
	if (enabled && ref_kb >= 0)
		return s + ", " + std::to_string(ref_kb) + " kB after the warm-up pass, " +
		       std::to_string(end_kb) + " kB at the end (+" +
		       std::to_string(end_kb - ref_kb) + " kB after the warm-up, allowed " +
		       std::to_string(allowed_kb()) + " kB)";
	return s + ", " + std::to_string(end_kb) + " kB at the end (+" +
	       std::to_string(end_kb - baseline_kb) +
	       " kB, the warm-up itself; judged only in the long profile or with "
	       "--memory-check)";
}

std::string sanitizer_allocator(pid_t pid)
{
	if (pid <= 0)
		return {};
	std::ifstream f("/proc/" + std::to_string(pid) + "/maps");
	for (std::string line; std::getline(f, line);)
		if (line.find("/libasan.so") != std::string::npos)
			return "ulp-targetd runs under AddressSanitizer, whose quarantine keeps "
			       "freed "
			       "memory (LeakSanitizer checks leaks at its exit)";
	return {};
}

} // namespace stress
