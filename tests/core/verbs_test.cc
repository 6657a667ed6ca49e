// SPDX-License-Identifier: MIT
// verbs.h helpers: enum names and the RNR timer encoding.
#include "core/verbs.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

namespace ulp
{
namespace
{

// Every value has its own, real name (a missing case would print the fallback).
template <typename E, typename F> void expect_distinct_names(int n, F str, const char *fallback)
{
	std::set<std::string> names;
	for (int i = 0; i < n; i++) {
		const char *s = str(static_cast<E>(i));
		ASSERT_NE(s, nullptr);
		EXPECT_STRNE(s, fallback) << i;
		names.insert(s);
	}
	EXPECT_EQ(names.size(), static_cast<size_t>(n));
	EXPECT_STREQ(str(static_cast<E>(n + 10)), fallback);
}

TEST(Verbs, WcStatusNames)
{
	expect_distinct_names<WcStatus>(static_cast<int>(WcStatus::GeneralErr) + 1, wc_status_str,
	                                "unrecognized status");
	EXPECT_STREQ(wc_status_str(WcStatus::WrFlushErr), "WR flushed");
}

TEST(Verbs, WrOpcodeNames)
{
	expect_distinct_names<WrOpcode>(static_cast<int>(WrOpcode::RegMr) + 1, wr_opcode_str,
	                                "UNKNOWN");
	EXPECT_STREQ(wr_opcode_str(WrOpcode::LocalInv), "LOCAL_INV");
}

TEST(Verbs, QpStateNames)
{
	expect_distinct_names<QpState>(static_cast<int>(QpState::Err) + 1, qp_state_str, "UNKNOWN");
	EXPECT_STREQ(qp_state_str(QpState::Rts), "RTS");
}

TEST(Verbs, EventTypeNames)
{
	expect_distinct_names<EventType>(static_cast<int>(EventType::DeviceFatal) + 1,
	                                 event_type_str, "unrecognized event");
}

TEST(Verbs, RnrTimerTable45)
{
	EXPECT_EQ(rnr_timer_usec(0), 655360u); // code 0 is the longest
	EXPECT_EQ(rnr_timer_usec(1), 10u);
	EXPECT_EQ(rnr_timer_usec(5), 60u);
	EXPECT_EQ(rnr_timer_usec(12), 640u); // the QpAttr default
	EXPECT_EQ(rnr_timer_usec(14), 1280u);
	EXPECT_EQ(rnr_timer_usec(24), 40960u);
	EXPECT_EQ(rnr_timer_usec(31), 491520u);
	for (uint8_t i = 2; i < 32; i++)
		EXPECT_GT(rnr_timer_usec(i), rnr_timer_usec(i - 1)) << int(i);
	EXPECT_EQ(rnr_timer_usec(32 + 12), 640u); // 5-bit field
}

} // namespace
} // namespace ulp
