// SPDX-License-Identifier: MIT
// core/thread_name.h - name the calling thread, so that top, perf and /proc/PID/task/*/comm
// tell the completion poller from a backstore's reaper (the kernel's kthread names).
#pragma once

#include <pthread.h>

#include <algorithm>
#include <cstring>
#include <string_view>

namespace ulp
{

// The kernel keeps 15 characters and a NUL (TASK_COMM_LEN); longer names are cut, not refused.
// t: any thread of this process (a starter names its thread before it reports ready).
inline void set_thread_name(pthread_t t, std::string_view name)
{
	char buf[16];
	size_t n = std::min(name.size(), sizeof(buf) - 1);
	std::memcpy(buf, name.data(), n);
	buf[n] = '\0';
	pthread_setname_np(t, buf);
}

inline void set_thread_name(std::string_view name)
{
	set_thread_name(pthread_self(), name);
}

} // namespace ulp
