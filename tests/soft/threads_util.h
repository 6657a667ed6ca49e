// SPDX-License-Identifier: MIT
// tests/soft/threads_util.h - the soft provider's threads as tests see them: this process's
// threads by name (/proc/self/task), the engine threads among them, a thread's context
// switches, and an environment variable set for one scope (engines read theirs at start).
#pragma once

#include "soft_test_util.h"

#include <dirent.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <set>
#include <string>
#include <thread>

namespace soft_test
{

// An environment variable set (or unset: nullptr) for one scope, restored after: CI runs
// the suite with ULP_SOFT_ENGINES set, and the tests of the default must not see it.
class ScopedEnv
{
public:
	ScopedEnv(const char *name, const char *v) : name_(name)
	{
		if (const char *o = getenv(name)) {
			had_ = true;
			old_ = o;
		}
		if (v)
			setenv(name, v, 1);
		else
			unsetenv(name);
	}
	~ScopedEnv()
	{
		if (had_)
			setenv(name_, old_.c_str(), 1);
		else
			unsetenv(name_);
	}
	ScopedEnv(const ScopedEnv &) = delete;
	ScopedEnv &operator=(const ScopedEnv &) = delete;

private:
	const char *name_;
	bool had_ = false;
	std::string old_;
};

inline pid_t this_tid()
{
	return static_cast<pid_t>(syscall(SYS_gettid));
}

// Each thread of this process, with its name (/proc/self/task/*/comm).
template <typename Fn> void for_each_thread(Fn fn)
{
	DIR *d = opendir("/proc/self/task");
	if (!d)
		return;
	while (dirent *e = readdir(d)) {
		if (e->d_name[0] == '.')
			continue;
		std::ifstream f(std::string("/proc/self/task/") + e->d_name + "/comm");
		std::string name;
		if (std::getline(f, name))
			fn(static_cast<pid_t>(std::atoi(e->d_name)), name);
	}
	closedir(d);
}

// Engine threads of this process (named ulp-soft-eng*).
inline std::set<pid_t> engine_tids()
{
	std::set<pid_t> out;
	for_each_thread([&](pid_t tid, const std::string &name) {
		if (name.rfind("ulp-soft-eng", 0) == 0)
			out.insert(tid);
	});
	return out;
}

// The engine thread that is not among before (a fresh one-engine device's), once it has
// named itself; 0 if there is not exactly one.
inline pid_t new_engine_tid(const std::set<pid_t> &before)
{
	std::set<pid_t> mine;
	for (auto until = Clock::now() + kWait; mine.empty() && Clock::now() < until;) {
		for (pid_t t : engine_tids())
			if (!before.count(t))
				mine.insert(t);
		std::this_thread::sleep_for(std::chrono::milliseconds(1));
	}
	return mine.size() == 1 ? *mine.begin() : 0;
}

// A thread's voluntary context switches so far (/proc/self/task/TID/status): each is a
// sleep it was woken from. -1 if it cannot be read.
inline long voluntary_switches(pid_t tid)
{
	std::ifstream f("/proc/self/task/" + std::to_string(tid) + "/status");
	for (std::string line; std::getline(f, line);)
		if (line.rfind("voluntary_ctxt_switches:", 0) == 0)
			return std::atol(line.c_str() + sizeof("voluntary_ctxt_switches:") - 1);
	return -1;
}

} // namespace soft_test
