// SPDX-License-Identifier: MIT
// tools/ulp-stress/watchdog.h - every step of a scenario (a login, an I/O burst, a logout,
// a wait for a killed child's nexus to close, a baseline wait) runs under a bound. A
// thread checks the steps ten times a second; when one has run past its bound it prints
// every step still running (what, for how long, its last note) and the caller's dump (the
// daemon's sessions, its log), then fails the run: the hung step cannot be trusted to end,
// so the process exits with status 1 after killing what it started.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>

namespace stress
{

class Watchdog
{
public:
	using clock = std::chrono::steady_clock;
	// dump: more to print when a step hangs; cleanup: kill what the run started.
	Watchdog(std::function<void()> dump, std::function<void()> cleanup);
	~Watchdog();
	Watchdog(const Watchdog &) = delete;
	Watchdog &operator=(const Watchdog &) = delete;

	// A step under way, ended by its destructor.
	class Step
	{
	public:
		Step(Watchdog &w, std::string what, std::chrono::milliseconds bound);
		~Step();
		Step(const Step &) = delete;
		Step &operator=(const Step &) = delete;
		void note(const std::string &s); // what it is doing now (for the dump)

	private:
		Watchdog &w_;
		uint64_t id_;
	};

private:
	struct Entry {
		std::string what;
		std::string note;
		clock::time_point start;
		clock::time_point deadline;
	};
	void run();

	std::function<void()> dump_, cleanup_;
	std::mutex lock_;
	std::condition_variable cv_;
	std::map<uint64_t, Entry> steps_; // under lock_
	uint64_t next_ = 1;               // under lock_
	bool stop_ = false;               // under lock_
	std::thread thread_;
};

} // namespace stress
