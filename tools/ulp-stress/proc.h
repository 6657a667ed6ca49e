// SPDX-License-Identifier: MIT
// tools/ulp-stress/proc.h - other programs the gateways scenario runs (gateways.h): a
// command run to its end for its output (scripts/ceph-dev.sh, rbd, rados), bounded; and a
// long-running one (ulp-initiator) whose stdout goes to a file and whose stderr lines are
// read as they come, each stamped with the time it arrived, and copied to a file.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace stress
{

// Run argv (argv[0] from PATH) to its end, up to bound (then SIGKILL): its status (exit
// code, 128 + signal), or -1 when it could not start or ran past the bound. Its stdout and
// stderr together in *out.
int run_command(const std::vector<std::string> &argv, std::chrono::milliseconds bound,
                std::string *out);

// A free TCP port on 127.0.0.1 now (bound to port 0 and released): 0 when none.
uint16_t free_port();

class Program
{
public:
	using clock = std::chrono::steady_clock;
	struct Line {
		clock::time_point at; // when we read it
		std::string text;
	};

	Program() = default;
	~Program(); // SIGKILL and reap when it still runs
	Program(const Program &) = delete;
	Program &operator=(const Program &) = delete;

	// Start argv (argv[0] from PATH), stdout to out_file, stderr read line by line and
	// appended to err_file. false + *why.
	bool start(const std::vector<std::string> &argv, const std::string &out_file,
	           const std::string &err_file, std::string *why);
	void signal(int sig);
	// Wait up to bound: its status (exit code, 128 + signal), or -1 while it runs.
	int wait(std::chrono::milliseconds bound);
	bool running() const { return pid_ > 0; }
	// The stderr lines from *cursor on; *cursor moves past them.
	std::vector<Line> lines(size_t *cursor);

private:
	void read_loop();

	pid_t pid_ = 0;
	int fd_ = -1;         // stderr's read end (the reader's)
	FILE *err_ = nullptr; // the copy of stderr (the reader's)
	std::thread reader_;
	std::mutex mu_;
	std::vector<Line> lines_; // under mu_
};

} // namespace stress
