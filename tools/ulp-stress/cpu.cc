// SPDX-License-Identifier: MIT
// tools/ulp-stress/cpu.cc - threads' CPU and run-queue wait from schedstat (see cpu.h).
#include "tools/ulp-stress/cpu.h"

#include <dirent.h>

#include <fstream>

namespace stress
{

CpuTimes cpu_times(pid_t pid)
{
	CpuTimes out;
	out.at = std::chrono::steady_clock::now();
	const std::string dir = "/proc/" + std::to_string(pid) + "/task";
	DIR *d = opendir(dir.c_str());
	if (!d)
		return out;
	while (dirent *e = readdir(d)) {
		if (e->d_name[0] < '0' || e->d_name[0] > '9')
			continue;
		const std::string base = dir + "/" + e->d_name;
		std::ifstream ss(base + "/schedstat"), cs(base + "/comm");
		ThreadCpu t;
		if (!(ss >> t.run_ns >> t.wait_ns))
			continue; // gone meanwhile, or no CONFIG_SCHED_INFO
		std::getline(cs, t.name);
		out.threads[std::atoi(e->d_name)] = t;
	}
	closedir(d);
	out.ok = !out.threads.empty();
	return out;
}

std::string cpu_delta(const std::string &who, const CpuTimes &a, const CpuTimes &b)
{
	if (!a.ok || !b.ok)
		return {};
	uint64_t run = 0, wait = 0, top = 0;
	std::string top_name;
	auto add = [&](const ThreadCpu &t, const ThreadCpu *before) {
		const uint64_t r = t.run_ns - (before ? before->run_ns : 0);
		const uint64_t w = t.wait_ns - (before ? before->wait_ns : 0);
		run += r;
		wait += w;
		if (w > top) {
			top = w;
			top_name = t.name;
		}
	};
	for (const auto &[tid, t] : b.threads) {
		auto it = a.threads.find(tid);
		add(t, it == a.threads.end() ? nullptr : &it->second);
	}
	auto ms = [](uint64_t ns) { return std::to_string(ns / 1000000); };
	std::string s =
	    who + "'s threads ran " + ms(run) + " ms and waited " + ms(wait) + " ms for a CPU";
	if (!top_name.empty())
		s += " (most: " + top_name + " " + ms(top) + " ms)";
	return s + " in " +
	       std::to_string(
	           std::chrono::duration_cast<std::chrono::milliseconds>(b.at - a.at).count()) +
	       " ms";
}

} // namespace stress
