// SPDX-License-Identifier: MIT
// core/shard_counters.h - a struct of uint64_t event counters kept per shard: the counting
// thread adds to its own shard (this_shard(), core/shard_lock.h) with a relaxed atomic add on
// a cache line no other busy thread writes, and readers sum the shards (the kernel's percpu
// counters). For the fabrics' per-I/O counters (RDMA READs posted, commands received): a
// counter under one lock, bumped by every poller thread for every command, put that lock's
// line and its futex waits on the I/O path of every connection.
//
// S must be a struct of uint64_t fields only (checked as far as the language lets: standard
// layout, its size a multiple of 8). A sum is a snapshot in which each counter is exact but
// the counters may be from instants microseconds apart, as scsi/stats.h's.
#pragma once

#include "core/shard_lock.h"

#include <array>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace ulp
{

template <class S> class ShardCounters
{
	static_assert(std::is_standard_layout_v<S> && std::is_trivially_copyable_v<S> &&
	                  sizeof(S) % sizeof(uint64_t) == 0,
	              "ShardCounters<S>: S must be a struct of uint64_t fields");
	static constexpr size_t kFields = sizeof(S) / sizeof(uint64_t);

public:
	ShardCounters() = default;
	ShardCounters(const ShardCounters &) = delete;
	ShardCounters &operator=(const ShardCounters &) = delete;

	// Any thread: field += n, in the calling thread's shard.
	void add(uint64_t S::*field, uint64_t n = 1)
	{
		shards_[this_shard()].v[index(field)].fetch_add(n, std::memory_order_relaxed);
	}

	// Any thread: adds every counter's sum over the shards to the same field of *s.
	void add_to(S *s) const
	{
		std::array<uint64_t, kFields> sum;
		std::memcpy(sum.data(), s, sizeof(S));
		for (const Shard &sh : shards_)
			for (size_t i = 0; i < kFields; i++)
				sum[i] += sh.v[i].load(std::memory_order_relaxed);
		std::memcpy(static_cast<void *>(s), sum.data(),
		            sizeof(S)); // S is trivially copyable
	}

	S read() const
	{
		S s{};
		add_to(&s);
		return s;
	}

private:
	// The field's place in S, in uint64_t units.
	static size_t index(uint64_t S::*field)
	{
		static const S probe{};
		const auto *base = reinterpret_cast<const unsigned char *>(&probe);
		const auto *at = reinterpret_cast<const unsigned char *>(&(probe.*field));
		return static_cast<size_t>(at - base) / sizeof(uint64_t);
	}

	struct alignas(64) Shard {
		std::array<std::atomic<uint64_t>, kFields> v{}; // this shard's part of each field
	};
	std::array<Shard, kShards> shards_;
};

} // namespace ulp
