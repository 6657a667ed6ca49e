// SPDX-License-Identifier: MIT
// tests/admin/prom_check_test.cc - the exposition checker the statistics tests rely on
// (prom_check.h) refuses what the format does not allow, so their "well formed" can fail.
#include "tests/admin/prom_check.h"

#include <gtest/gtest.h>

namespace ulp::test
{
namespace
{

TEST(PromCheck, TakesAWellFormedExposition)
{
	std::map<std::string, double> m;
	ASSERT_TRUE(parse_prometheus("# HELP a_total what\n# TYPE a_total counter\n"
	                             "a_total{x=\"1\",y=\"q\\\"z\"} 3\n"
	                             "# TYPE h histogram\nh_bucket{le=\"+Inf\"} 2\nh_sum 0.5\n"
	                             "h_count 2\n",
	                             &m));
	EXPECT_EQ(m.at("a_total{x=\"1\",y=\"q\\\"z\"}"), 3);
	EXPECT_EQ(m.at("h_count"), 2);
	EXPECT_EQ(m.size(), 4u);
}

TEST(PromCheck, RefusesWhatTheFormatDoesNotAllow)
{
	const char *bad[] = {
	    "",                                     // empty
	    "# TYPE a counter\n# TYPE a counter\n", // typed twice
	    "# TYPE a countr\n",                    // unknown type
	    "# TYPE a counter\nb 1\n",              // outside its family
	    "# TYPE a counter\na 1\na 2\n",         // a duplicate series
	    "# TYPE a counter\na{x=\"1} 1\n",       // unterminated label value
	    "# TYPE a counter\na{x=1} 1\n",         // unquoted label value
	    "# TYPE a counter\na 1x\n",             // not a number
	    "# TYPE a counter\na\n",                // no value
	    "# TYPE a counter\n1a 1\n",             // a name starting with a digit
	    "# TYPE a counter\na{x=\"1\" 1\n",      // labels never closed
	};
	for (const char *t : bad) {
		std::map<std::string, double> m;
		EXPECT_FALSE(parse_prometheus(t, &m)) << t;
	}
}

} // namespace
} // namespace ulp::test
