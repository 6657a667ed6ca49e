// SPDX-License-Identifier: MIT
// tests/core/deadline_test.cc - poll_timeout_ms rounds up and stops at 0.
#include "core/deadline.h"

#include <gtest/gtest.h>

namespace
{

using namespace std::chrono;

TEST(PollTimeout, RoundsUpAndStopsAtZero)
{
	const steady_clock::time_point t0{seconds(1000)};
	EXPECT_EQ(ulp::poll_timeout_ms(t0 + microseconds(700), t0), 1)
	    << "under a millisecond left";
	EXPECT_EQ(ulp::poll_timeout_ms(t0 + microseconds(99200), t0), 100);
	EXPECT_EQ(ulp::poll_timeout_ms(t0 + milliseconds(100), t0), 100);
	EXPECT_EQ(ulp::poll_timeout_ms(t0, t0), 0) << "the deadline is now";
	EXPECT_EQ(ulp::poll_timeout_ms(t0, t0 + milliseconds(5)), 0) << "the deadline has passed";
}

} // namespace
