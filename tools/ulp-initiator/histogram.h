// SPDX-License-Identifier: MIT
// tools/ulp-initiator/histogram.h - a latency histogram with bounded relative error:
// log-linear buckets (64 linear sub-buckets per power of two of nanoseconds, as HdrHistogram
// and fio lay them out), so percentiles are within 1/64 (1.6 %) of the true value, from
// 1 ns to 2^47 ns (about 39 hours), in a fixed 2688-bucket table.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace initiator
{

class Histogram
{
public:
	void add(uint64_t ns);
	uint64_t count() const { return count_; }
	uint64_t max() const { return max_; }
	uint64_t min() const { return count_ ? min_ : 0; }
	double mean() const { return count_ ? double(sum_) / double(count_) : 0.0; }
	// The value below which fraction q (0..1) of the samples lie (a bucket's upper edge,
	// never above max()).
	uint64_t percentile(double q) const;

private:
	static constexpr int kSubBits = 6; // 64 sub-buckets per power of two
	static constexpr int kSub = 1 << kSubBits;
	static constexpr int kGroups = 42; // powers of two covered
	static size_t index(uint64_t ns);
	static uint64_t upper(size_t idx);

	std::array<uint64_t, kSub * kGroups> buckets_{}; // sample counts
	uint64_t count_ = 0;
	uint64_t sum_ = 0; // ns
	uint64_t min_ = UINT64_MAX;
	uint64_t max_ = 0;
};

} // namespace initiator
