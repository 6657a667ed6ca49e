// SPDX-License-Identifier: MIT
// tests/core/check_test.cc - checks that stay on in release builds (core/check.h).
#include "core/check.h"

#include <gtest/gtest.h>

namespace ulp
{
namespace
{

enum class Door : uint8_t { Closed, Open, Locked };

const char *door_name(Door d)
{
	switch (d) {
	case Door::Closed:
		return "closed";
	case Door::Open:
		return "open";
	case Door::Locked:
		return "locked";
	}
	return "?";
}

constexpr StateTable<Door, 3> kDoor = {"door",
                                       door_name,
                                       {
                                           /* Closed */ to(Door::Open, Door::Locked),
                                           /* Open */ to(Door::Closed),
                                           /* Locked */ to(Door::Closed),
                                       }};

static_assert(kDoor.legal(Door::Closed, Door::Open));
static_assert(!kDoor.legal(Door::Open, Door::Locked));
static_assert(!kDoor.legal(Door::Locked, Door::Locked));

TEST(Check, LegalTransitionsChangeTheState)
{
	Door d = Door::Closed;
	change_state(&d, Door::Locked, kDoor);
	EXPECT_EQ(d, Door::Locked);
	change_state(&d, Door::Closed, kDoor);
	change_state(&d, Door::Open, kDoor);
	EXPECT_EQ(d, Door::Open);
}

// A tracer attached to ulp:state_change (its semaphore up, as perf or bpftrace leave it):
// the probe's arguments are computed - the names looked up - and the change is the same.
TEST(Check, StateChangeWithATracerAttached)
{
#ifdef ULP_TRACE_ON
	ulp_state_change_semaphore = 1;
	EXPECT_TRUE(ULP_TRACE_ENABLED(state_change));
#endif
	Door d = Door::Closed;
	change_state(&d, Door::Open, kDoor, &d);
	change_state(&d, Door::Closed, kDoor);
	EXPECT_EQ(d, Door::Closed);
#ifdef ULP_TRACE_ON
	ulp_state_change_semaphore = 0;
	EXPECT_FALSE(ULP_TRACE_ENABLED(state_change));
#endif
}

// This build defines NDEBUG (every build type but Debug does): assert() would be gone,
// ULP_CHECK is not.
TEST(CheckDeathTest, IllegalTransitionAbortsNamingBothStates)
{
	Door d = Door::Open;
	EXPECT_DEATH(change_state(&d, Door::Locked, kDoor),
	             "door: illegal state change open -> locked");
}

TEST(CheckDeathTest, FailedCheckAbortsWithItsConditionAndMessage)
{
	const int queued = 3;
	EXPECT_DEATH(ULP_CHECK(queued == 0, "{} PDUs still queued", queued),
	             "check failed at .*check_test.cc:[0-9]+: queued == 0: 3 PDUs still queued");
	EXPECT_DEATH(ULP_CHECK(queued < 0), "check failed at .*: queued < 0");
}

TEST(Check, WarnOnYieldsItsConditionAndLogsOncePerFiveSeconds)
{
	log::Capture cap;
	int warned = 0;
	for (int i = 0; i < 5; i++)
		if (ULP_WARN_ON(i >= 2))
			warned++;
	EXPECT_EQ(warned, 3);
	EXPECT_EQ(cap.count("warning at"), 1u) << cap.text();
	EXPECT_TRUE(cap.contains("i >= 2")) << cap.text();
}

} // namespace
} // namespace ulp
