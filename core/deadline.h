// SPDX-License-Identifier: MIT
// core/deadline.h - a poll(2)/epoll_wait(2) timeout from a deadline.
#pragma once

#include <algorithm>
#include <chrono>

namespace ulp
{

// Milliseconds from now to deadline for a poll-style timeout: rounded up, and 0 once it has
// passed. Rounded down, the last millisecond before every deadline was a loop of poll(0):
// 400 wake-ups a second on an idle TCP worker in the VM, where each clock read is a system
// call.
inline int poll_timeout_ms(std::chrono::steady_clock::time_point deadline,
                           std::chrono::steady_clock::time_point now)
{
	const auto left = std::max(deadline - now, std::chrono::steady_clock::duration(0));
	return static_cast<int>(std::chrono::ceil<std::chrono::milliseconds>(left).count());
}

// The same from the clock now: what a bounded wait passes to poll(2) each time round.
inline int poll_timeout_ms(std::chrono::steady_clock::time_point deadline)
{
	return poll_timeout_ms(deadline, std::chrono::steady_clock::now());
}

} // namespace ulp
