// SPDX-License-Identifier: MIT
// tests/core/lock_assert_test.cc - "under lock" claims asserted (core/lock_assert.h): what
// counts as held for each kind of lock the data path uses, and a failed claim aborting with
// the lock's name. In a release tree the assertions compile to nothing and the death test is
// skipped; CI runs it in the sanitizer trees, where they are on.
#include "core/lock_assert.h"

#include "core/adaptive_mutex.h"
#include "core/serial.h"
#include "core/shard_lock.h"

#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <mutex>
#include <thread>

namespace ulp
{
namespace
{

TEST(LockAssert, MutexHeldByThisThreadOnly)
{
	std::mutex m;
	EXPECT_FALSE(mutex_held(m));
	{
		std::lock_guard g(m);
		EXPECT_TRUE(mutex_held(m));
		// Held, but by another thread than the one asking.
		bool other = true;
		std::thread([&] { other = mutex_held(m); }).join();
		EXPECT_FALSE(other);
	}
	EXPECT_FALSE(mutex_held(m));
	AdaptiveMutex a;
	EXPECT_FALSE(mutex_held(a));
	a.lock();
	EXPECT_TRUE(mutex_held(a));
	a.unlock();
	EXPECT_FALSE(mutex_held(a));
}

TEST(LockAssert, ShardLockOneShardOrAll)
{
	ShardLock l;
	{
		std::lock_guard g(l.mine());
		EXPECT_TRUE(mutex_held(l.mine()));
		EXPECT_FALSE(shard_lock_all_held(l));
	}
	{
		ShardLockAll g(l);
		EXPECT_TRUE(shard_lock_all_held(l));
		EXPECT_TRUE(mutex_held(l.shard(kShards - 1)));
	}
	EXPECT_FALSE(shard_lock_all_held(l));
}

// A Serial counts as held on the thread that holds it (enter(), or running its events).
struct Chan final : Serial<int, int> {
	Chan() : Serial(Mode::Inline) {}
	bool held_in_event = false;
	void run_event(int, int) override { held_in_event = mutex_held(*this); }
	void kick() override {}
};

TEST(LockAssert, SerialHeldByItsHolder)
{
	Chan c;
	EXPECT_FALSE(mutex_held(c));
	bool in_enter = false, other = true;
	c.enter([&] {
		in_enter = mutex_held(c);
		std::thread([&] { other = mutex_held(c); }).join();
	});
	EXPECT_TRUE(in_enter);
	EXPECT_FALSE(other);
	c.post(1, 2); // free: runs inline, here
	EXPECT_TRUE(c.held_in_event);
	EXPECT_FALSE(mutex_held(c));
}

// fork's child is one thread with the parent's cached id: it asks again, so a lock it takes
// is its own.
TEST(LockAssert, ForkChildKnowsItsOwnId)
{
	std::mutex m;
	{
		std::lock_guard g(m);
		ASSERT_TRUE(mutex_held(m));
	}
	const pid_t pid = fork();
	if (pid == 0) {
		std::lock_guard g(m);
		_exit(mutex_held(m) ? 0 : 1);
	}
	int st = 0;
	ASSERT_EQ(waitpid(pid, &st, 0), pid);
	EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << st;
}

#if ULP_LOCK_ASSERTS_ON

TEST(LockAssertDeathTest, AClaimThatDoesNotHoldAbortsNamingTheLock)
{
	std::mutex lock_;
	ShardLock tasks;
	EXPECT_DEATH(ULP_ASSERT_HELD(lock_), "check failed at .*: lock_ not held");
	EXPECT_DEATH(
	    {
		    std::lock_guard g(tasks.mine());
		    ULP_ASSERT_HELD_ALL(tasks);
	    },
	    "tasks not all held");
	EXPECT_DEATH(
	    {
		    std::lock_guard g(lock_);
		    ULP_ASSERT_NOT_HELD(lock_);
	    },
	    "lock_ held");
}

#else

TEST(LockAssertDeathTest, AClaimThatDoesNotHoldAbortsNamingTheLock)
{
	GTEST_SKIP() << "NDEBUG without ULP_LOCK_ASSERTS: the lock assertions compile to nothing";
}

#endif

} // namespace
} // namespace ulp
