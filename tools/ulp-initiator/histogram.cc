// SPDX-License-Identifier: MIT
// tools/ulp-initiator/histogram.cc - log-linear latency histogram (see histogram.h).
#include "tools/ulp-initiator/histogram.h"

#include <algorithm>
#include <bit>
#include <cmath>

namespace initiator
{

size_t Histogram::index(uint64_t ns)
{
	// Values below kSub map linearly into group 0; above, group g holds
	// [2^(g+5), 2^(g+6)) in 64 steps of 2^(g-1) (the leading bit dropped).
	if (ns < uint64_t(kSub))
		return ns;
	const int msb = 63 - std::countl_zero(ns); // >= kSubBits
	const int group = msb - kSubBits + 1;
	const uint64_t sub = (ns >> (msb - kSubBits)) & (kSub - 1);
	const size_t idx = size_t(group) * kSub + sub;
	return std::min(idx, size_t(kSub) * kGroups - 1);
}

uint64_t Histogram::upper(size_t idx)
{
	const size_t group = idx / kSub, sub = idx % kSub;
	if (group == 0)
		return sub;
	const int shift = int(group) - 1;
	return ((uint64_t(kSub) + sub + 1) << shift) - 1;
}

void Histogram::add(uint64_t ns)
{
	buckets_[index(ns)]++;
	count_++;
	sum_ += ns;
	min_ = std::min(min_, ns);
	max_ = std::max(max_, ns);
}

uint64_t Histogram::percentile(double q) const
{
	if (!count_)
		return 0;
	const auto want = static_cast<uint64_t>(std::ceil(q * double(count_)));
	uint64_t seen = 0;
	for (size_t i = 0; i < buckets_.size(); i++) {
		seen += buckets_[i];
		if (seen >= std::max<uint64_t>(want, 1))
			return std::min(upper(i), max_);
	}
	return max_;
}

} // namespace initiator
