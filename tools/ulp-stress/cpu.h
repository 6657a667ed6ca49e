// SPDX-License-Identifier: MIT
// tools/ulp-stress/cpu.h - how much CPU a process's threads got, and how long they waited
// for one, between two moments: /proc/PID/task/TID/schedstat gives each thread's time on a
// CPU and its time runnable on a run queue (Documentation/scheduler/sched-stats.rst).
//
// Why: a command that times out with no fault active is either a machine that starved the
// two processes (their threads runnable, waiting for a CPU, for most of the command's life)
// or a stall (both sides idle: a lost wake-up, a missed doorbell). The faults scenario puts
// this beside such a failure so that a red run says which it was.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <string>

namespace stress
{

struct ThreadCpu {
	std::string name;     // comm
	uint64_t run_ns = 0;  // on a CPU
	uint64_t wait_ns = 0; // runnable, waiting on a run queue
};

struct CpuTimes {
	bool ok = false; // schedstat readable (CONFIG_SCHED_INFO)
	std::chrono::steady_clock::time_point at;
	std::map<int, ThreadCpu> threads; // by tid
};

// The threads of pid now. ok false when /proc has no schedstat for it.
CpuTimes cpu_times(pid_t pid);

// "ulp-targetd's threads ran 120 ms and waited 1830 ms for a CPU (most: ulp-soft-engine
// 1210 ms) in 2400 ms": what happened between a and b (threads that came or went count
// from zero; those gone by b are left out). Empty when either is not ok.
std::string cpu_delta(const std::string &who, const CpuTimes &a, const CpuTimes &b);

} // namespace stress
