// SPDX-License-Identifier: MIT
// scsi/reaper.cc - closing nexuses off the fabric's threads (see reaper.h).
#include "scsi/reaper.h"

#include "core/log.h"
#include "core/thread_name.h"
#include "scsi/tpg.h"

namespace ulp::scsi
{

Reaper::Reaper(std::string name, std::chrono::milliseconds timeout)
    : name_(std::move(name)), timeout_(timeout)
{
	thread_.start([this] { loop(); });
}

Reaper::~Reaper()
{
	{
		std::lock_guard g(lock_);
		stop_ = true;
		cv_.notify_all();
	}
	thread_.join(log::Sub::Scsi, (name_ + " (nexuses still closing)").c_str());
}

void Reaper::close(Nexus *s, std::function<void()> done)
{
	std::lock_guard g(lock_);
	queue_.emplace_back(s, std::move(done));
	cv_.notify_all();
}

size_t Reaper::pending()
{
	std::lock_guard g(lock_);
	return queue_.size() + busy_;
}

bool Reaper::wait_idle(std::chrono::steady_clock::time_point deadline)
{
	std::unique_lock g(lock_);
	return cv_.wait_until(g, deadline, [&] { return queue_.empty() && busy_ == 0; });
}

uint64_t Reaper::timeouts()
{
	std::lock_guard g(lock_);
	return timeouts_;
}

void Reaper::loop()
{
	set_thread_name(name_.c_str());
	std::unique_lock g(lock_);
	for (;;) {
		cv_.wait(g, [&] { return !queue_.empty() || stop_; });
		if (queue_.empty())
			return; // stop_, and nothing left to close
		auto [s, done] = std::move(queue_.front());
		queue_.pop_front();
		busy_++;
		g.unlock();
		// Abort, wait (bounded, logged by close_session), free; retried while commands
		// are still in flight.
		while (s && s->tpg().close_session(s, timeout_) != 0) {
			std::lock_guard g2(lock_);
			timeouts_++;
		}
		if (done)
			done();
		g.lock();
		busy_--;
		cv_.notify_all();
	}
}

} // namespace ulp::scsi
