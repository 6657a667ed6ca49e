// SPDX-License-Identifier: MIT
// core/shard_lock.h - a lock split by thread for state that the I/O path reads or updates
// in its own part and that a slow path sometimes needs whole: the kernel's
// percpu_rw_semaphore and lglock/brlock, SPDK's per-thread channels.
//
// A std::mutex or a std::shared_mutex that every worker takes per command puts one cache
// line in every worker's path: each lock (shared or not) writes it, so it moves between
// cores on every command, and a mutex held across a few lines makes the other workers wait
// in futex(2). A ShardLock has one mutex per shard, each on its own
// cache line; a thread takes its own shard's (lock_shard: uncontended while no two busy
// threads share a shard), and the slow path - a configuration change, an ORDERED command,
// a task management function - takes every shard's, in index order (lock_all), which
// excludes everyone. State guarded by it is either per shard (under that shard's mutex) or
// whole (written under lock_all, so that any one shard's mutex is enough to read it).
//
// Shards are given to threads round robin on first use (this_shard): the workers of an
// event loop or a poller, started together, get shards of their own; a program with more
// threads than kShards doing I/O shares some, which costs waiting, never correctness.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <mutex>

namespace ulp
{

// Shards per ShardLock. A thread holds at most two ShardLocks' every shard at once (a
// Tpg's, then an LU's unit-attention table, when the LUN inventory changes), and
// ThreadSanitizer's deadlock detector tracks at most 64 mutexes held by one thread: 2 x 24
// leaves room for the few plain mutexes around them.
inline constexpr size_t kShards = 24;

// The calling thread's shard, in [0, kShards): given on its first call, then fixed. (An
// inline function's statics are one object in the whole program.)
inline size_t this_shard()
{
	static std::atomic<size_t> next{0};
	thread_local const size_t mine = next.fetch_add(1, std::memory_order_relaxed) % kShards;
	return mine;
}

class ShardLock
{
public:
	ShardLock() = default;
	ShardLock(const ShardLock &) = delete;
	ShardLock &operator=(const ShardLock &) = delete;

	std::mutex &shard(size_t i) { return s_[i % kShards].m; }
	std::mutex &mine() { return shard(this_shard()); }
	void lock_all()
	{
		for (auto &s : s_)
			s.m.lock();
	}
	void unlock_all()
	{
		for (auto it = s_.rbegin(); it != s_.rend(); ++it)
			it->m.unlock();
	}

private:
	struct alignas(64) Slot {
		std::mutex m; // this shard's part of the guarded state
	};
	std::array<Slot, kShards> s_;
};

// lock_all() for a scope, as std::lock_guard for one mutex.
class ShardLockAll
{
public:
	explicit ShardLockAll(ShardLock &l) : l_(l) { l_.lock_all(); }
	~ShardLockAll() { l_.unlock_all(); }
	ShardLockAll(const ShardLockAll &) = delete;
	ShardLockAll &operator=(const ShardLockAll &) = delete;

private:
	ShardLock &l_;
};

} // namespace ulp
