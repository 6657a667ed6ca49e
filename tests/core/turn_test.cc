// SPDX-License-Identifier: MIT
// tests/core/turn_test.cc - a thread's turn (core/turn.h): outside one nothing is deferred;
// what a turn's callbacks defer runs once each, in order, when the outermost turn ends, not
// before; what a deferred function defers runs at that same end; turns are per thread.
#include "core/turn.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace ulp
{
namespace
{

struct Log {
	std::vector<int> ran;  // the tags of deferred runs, in order
	Log *again = nullptr;  // run(): defer tag 99 on this log from inside the run
	int depth_at_run = -1; // in_turn() as seen by the last run
};

struct Item {
	Log *log;
	int tag;
};

void run(void *arg)
{
	auto *it = static_cast<Item *>(arg);
	it->log->ran.push_back(it->tag);
	it->log->depth_at_run = in_turn() ? 1 : 0;
	if (it->log->again) {
		static Item more{nullptr, 99};
		more.log = it->log->again;
		it->log->again = nullptr;
		EXPECT_TRUE(defer_to_turn_end(run, &more));
	}
}

TEST(Turn, OutsideATurnNothingIsDeferred)
{
	Log log;
	Item a{&log, 1};
	EXPECT_FALSE(in_turn());
	EXPECT_FALSE(defer_to_turn_end(run, &a));
	EXPECT_TRUE(log.ran.empty());
	{
		TurnScope t;
	}
	EXPECT_TRUE(log.ran.empty()) << "a turn that ends runs only what it deferred";
}

TEST(Turn, DeferredRunsInOrderAtTheOutermostEnd)
{
	Log log;
	Item a{&log, 1}, b{&log, 2}, c{&log, 3};
	{
		TurnScope outer;
		EXPECT_TRUE(in_turn());
		EXPECT_TRUE(defer_to_turn_end(run, &a));
		{
			TurnScope inner; // a nested pass: defers to the outer end
			EXPECT_TRUE(defer_to_turn_end(run, &b));
		}
		EXPECT_TRUE(log.ran.empty()) << "ran at the end of a nested turn";
		EXPECT_TRUE(defer_to_turn_end(run, &a)); // twice: runs twice
		EXPECT_TRUE(defer_to_turn_end(run, &c));
	}
	EXPECT_EQ(log.ran, (std::vector<int>{1, 2, 1, 3}));
	EXPECT_EQ(log.depth_at_run, 1) << "the turn is still open while its deferrals run";
	EXPECT_FALSE(in_turn());
	// The next turn starts empty.
	{
		TurnScope t;
	}
	EXPECT_EQ(log.ran.size(), 4u);
}

TEST(Turn, WhatADeferredFunctionDefersRunsAtTheSameEnd)
{
	Log log;
	log.again = &log;
	Item a{&log, 1};
	{
		TurnScope t;
		ASSERT_TRUE(defer_to_turn_end(run, &a));
	}
	EXPECT_EQ(log.ran, (std::vector<int>{1, 99}));
	EXPECT_FALSE(in_turn());
}

TEST(Turn, ATurnIsItsThreadsOwn)
{
	Log log;
	Item a{&log, 1};
	TurnScope t;
	bool other_in_turn = true, other_deferred = true;
	std::thread th([&] {
		other_in_turn = in_turn();
		other_deferred = defer_to_turn_end(run, &a);
	});
	th.join();
	EXPECT_FALSE(other_in_turn);
	EXPECT_FALSE(other_deferred);
}

} // namespace
} // namespace ulp
