// SPDX-License-Identifier: MIT
// tests/core/backoff_test.cc - ContentionBackoff's pauses: random, bounded, doubling to the cap.
#include "core/backoff.h"

#include <gtest/gtest.h>

#include <set>

namespace
{

using namespace std::chrono;
using ulp::ContentionBackoff;

TEST(ContentionBackoff, PausesStayUnderASpanThatDoublesToTheCap)
{
	ContentionBackoff b(microseconds(100), microseconds(800));
	const microseconds want[] = {microseconds(100), microseconds(200), microseconds(400),
	                             microseconds(800), microseconds(800), microseconds(800)};
	for (microseconds span : want) {
		ASSERT_EQ(b.span(), span);
		const auto t0 = steady_clock::now();
		const microseconds d = b.pause();
		const auto slept = steady_clock::now() - t0;
		EXPECT_LE(d, span);
		EXPECT_GE(slept, d) << "pause() returns the time it slept, not more";
	}
}

TEST(ContentionBackoff, PausesAreRandom)
{
	// Two writers that paused alike would stay in step: the pauses must differ. 64 draws
	// from [0, 1000] µs all alike has a chance of about 1000^-63.
	std::set<int64_t> seen;
	for (int i = 0; i < 64; i++) {
		ContentionBackoff b(microseconds(1000), microseconds(1000));
		seen.insert(b.pause().count());
	}
	EXPECT_GT(seen.size(), 8u);
}

} // namespace
