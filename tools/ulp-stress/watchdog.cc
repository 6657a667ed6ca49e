// SPDX-License-Identifier: MIT
// tools/ulp-stress/watchdog.cc - bounds on every step, and the dump when one hangs (see
// watchdog.h).
#include "tools/ulp-stress/watchdog.h"

#include <unistd.h>

#include <cstdio>

namespace stress
{

using namespace std::chrono_literals;

Watchdog::Watchdog(std::function<void()> dump, std::function<void()> cleanup)
    : dump_(std::move(dump)), cleanup_(std::move(cleanup)), thread_([this] { run(); })
{
}

Watchdog::~Watchdog()
{
	{
		std::lock_guard g(lock_);
		stop_ = true;
	}
	cv_.notify_all();
	thread_.join();
}

Watchdog::Step::Step(Watchdog &w, std::string what, std::chrono::milliseconds bound) : w_(w)
{
	std::lock_guard g(w_.lock_);
	id_ = w_.next_++;
	const auto now = clock::now();
	w_.steps_[id_] = {std::move(what), {}, now, now + bound};
}

Watchdog::Step::~Step()
{
	std::lock_guard g(w_.lock_);
	w_.steps_.erase(id_);
}

void Watchdog::Step::note(const std::string &s)
{
	std::lock_guard g(w_.lock_);
	w_.steps_[id_].note = s;
}

void Watchdog::run()
{
	std::unique_lock g(lock_);
	while (!stop_) {
		cv_.wait_for(g, 100ms);
		const auto now = clock::now();
		const Entry *late = nullptr;
		for (auto &[id, e] : steps_)
			if (now > e.deadline)
				late = &e;
		if (!late)
			continue;
		auto ms = [&](clock::time_point a, clock::time_point b) {
			return long(
			    std::chrono::duration_cast<std::chrono::milliseconds>(b - a).count());
		};
		std::fprintf(stderr,
		             "ulp-stress: WATCHDOG: '%s' has run %ld ms, past its bound of %ld ms; "
		             "steps still running:\n",
		             late->what.c_str(), ms(late->start, now),
		             ms(late->start, late->deadline));
		for (auto &[id, e] : steps_)
			std::fprintf(stderr, "ulp-stress:   %s: %ld ms (bound %ld)%s%s\n",
			             e.what.c_str(), ms(e.start, now), ms(e.start, e.deadline),
			             e.note.empty() ? "" : ": ", e.note.c_str());
		g.unlock();
		if (dump_)
			dump_();
		if (cleanup_)
			cleanup_();
		std::fprintf(stderr, "ulp-stress: FAILED: a step hung (watchdog)\n");
		std::fflush(stderr);
		std::fflush(stdout);
		::_exit(1);
	}
}

} // namespace stress
