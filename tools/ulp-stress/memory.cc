// SPDX-License-Identifier: MIT
// tools/ulp-stress/memory.cc - flat memory after the warm-up (see memory.h).
#include "tools/ulp-stress/memory.h"

#include <algorithm>
#include <fstream>

namespace stress
{

int64_t MemoryCheck::allowed_kb() const
{
	return std::max<int64_t>(tolerance_kb,
	                         int64_t(double(judged().ref_kb) * tolerance_pct / 100.0));
}

bool MemoryCheck::checked() const
{
	const MemoryFigure &f = judged();
	return enabled && f.ref_kb >= 0 && f.end_kb >= 0 && (heap_known() || rss_unjudged.empty());
}

bool MemoryCheck::judge(std::string *why) const
{
	if (!checked())
		return true;
	const MemoryFigure &f = judged();
	if (f.end_kb - f.ref_kb <= allowed_kb())
		return true;
	*why = std::string("memory not flat after the warm-up: ") +
	       (heap_known() ? "heap in use " : "VmRSS ") + std::to_string(f.ref_kb) + " kB -> " +
	       std::to_string(f.end_kb) + " kB (+" + std::to_string(f.end_kb - f.ref_kb) +
	       " kB, allowed " + std::to_string(allowed_kb()) + " kB)";
	return false;
}

std::vector<std::string> MemoryCheck::lines() const
{
	auto line = [&](const char *what, const MemoryFigure &f, bool is_judged) {
		std::string s = std::string("memory: ") + what + " " +
		                std::to_string(f.baseline_kb) + " kB at the baseline";
		if (enabled && f.ref_kb >= 0) {
			s += ", " + std::to_string(f.ref_kb) + " kB after the warm-up pass, " +
			     std::to_string(f.end_kb) + " kB at the end (+" +
			     std::to_string(f.end_kb - f.ref_kb) + " kB after the warm-up";
			return s + (is_judged ? ", allowed " + std::to_string(allowed_kb()) + " kB)"
			                      : ", reported: the arenas keep what was freed)");
		}
		return s + ", " + std::to_string(f.end_kb) + " kB at the end (+" +
		       std::to_string(f.end_kb - f.baseline_kb) +
		       " kB, the warm-up itself; judged only in the long profile or with "
		       "--memory-check)";
	};
	std::vector<std::string> out;
	if (heap_known())
		out.push_back(line(("heap in use (" + allocator + ")").c_str(), heap, true));
	if (rss.baseline_kb >= 0 && rss.end_kb >= 0)
		out.push_back(line("VmRSS", rss, !heap_known()));
	if (out.empty())
		out.push_back("memory: unknown (no heap figure from the daemon, no /proc for it)");
	return out;
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
