// SPDX-License-Identifier: MIT
// core/lock_assert.cc - the thread id the lock assertions compare owners with (see
// lock_assert.h).
#include "core/lock_assert.h"

// Defined in every build, whatever NDEBUG says here: a program built with the assertions
// on links against a library built without them.
#include "core/shard_lock.h"

#include <unistd.h>

namespace ulp
{
namespace
{
thread_local pid_t self_tid = 0;

// fork's child is one thread, the one that called fork, with the parent's cached id: it
// must ask again. Registered once, before the first id is cached.
struct AtFork {
	AtFork()
	{
		pthread_atfork(nullptr, nullptr, [] { self_tid = 0; });
	}
};
} // namespace

pid_t lock_owner_self()
{
	static AtFork at_fork;
	if (__builtin_expect(self_tid == 0, 0))
		self_tid = gettid();
	return self_tid;
}

bool shard_lock_all_held(ShardLock &l)
{
	for (size_t i = 0; i < kShards; i++)
		if (!mutex_held(l.shard(i)))
			return false;
	return true;
}

} // namespace ulp
