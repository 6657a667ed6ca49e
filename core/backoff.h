// SPDX-License-Identifier: MIT
// core/backoff.h - a randomized pause between the rounds of a compare-and-set loop.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <random>
#include <thread>

namespace ulp
{

// A writer whose compare-and-set lost to another writer reads again and retries. Two
// writers looping back to back stay in step: the one that won the last round is first to
// read again and wins the next, and the other can lose every round of a bounded loop (two
// cluster map writers, 16 rounds each, gave up once in 30 runs). A pause of random length
// after each loss breaks the step, as Ethernet's binary exponential backoff does: the k-th
// pause is uniform in [0, min(first * 2^k, cap)], so a loss costs little while the race is
// rare and the chance of losing n rounds in a row falls with each (docs/ha.md has figures).
//
// One per loop, on that loop's thread; not shared.
class ContentionBackoff
{
public:
	using usec = std::chrono::microseconds;

	// The defaults suit a round of a few RADOS operations (about a millisecond each on one
	// host): the first pause up to 1 ms, doubling to 32 ms; a loop of 16 rounds that loses
	// them all has paused 351 ms at most.
	static constexpr usec kFirst{1000};
	static constexpr usec kCap{32000};

	ContentionBackoff(usec first = kFirst, usec cap = kCap) : span_(first), cap_(cap) {}

	// After a lost round: sleep, then widen the next pause. Returns the pause slept.
	usec pause()
	{
		const auto top = static_cast<uint64_t>(std::max<int64_t>(span_.count(), 0));
		const usec d(std::uniform_int_distribution<uint64_t>(0, top)(rng()));
		span_ = std::min(span_ * 2, cap_);
		if (d.count() > 0)
			std::this_thread::sleep_for(d);
		return d;
	}

	// The longest pause the next pause() can sleep.
	usec span() const { return span_; }

private:
	static std::minstd_rand &rng()
	{
		thread_local std::minstd_rand r(std::random_device{}());
		return r;
	}

	usec span_; // the next pause is uniform in [0, span_]
	usec cap_;  // span_ doubles up to this
};

} // namespace ulp
