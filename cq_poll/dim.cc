// SPDX-License-Identifier: MIT
// cq_poll/dim.cc - adaptive CQ moderation (lib/dim/rdma_dim.c, lib/dim/dim.c).
#include "cq_poll/dim.h"

namespace ulp
{

namespace
{

// IS_SIGNIFICANT_DIFF (lib/dim/dim.h): more than 10% apart.
constexpr bool significant_diff(uint32_t val, uint32_t ref)
{
	if (!ref)
		return false;
	uint64_t d = val > ref ? val - ref : ref - val;
	return 100 * d / ref > 10;
}

constexpr uint32_t div_round_up(uint64_t a, uint64_t b)
{
	return static_cast<uint32_t>((a + b - 1) / b);
}

} // namespace

// dim_calc_stats (lib/dim/dim.c), reduced to the completion fields rdma_dim reads.
bool Dim::calc_stats(const Sample &start, const Sample &end, Stats *s)
{
	uint64_t delta_us = end.time_us - start.time_us;
	uint32_t ncomps = end.comp_ctr - start.comp_ctr; // BIT_GAP on u32: wraps
	if (!delta_us)
		return false;
	s->epms = div_round_up(uint64_t{kDimNevents} * 1000, delta_us);
	s->cpms = div_round_up(uint64_t{ncomps} * 1000, delta_us);
	s->cpe_ratio = s->epms ? static_cast<uint32_t>(uint64_t{s->cpms} * 100 / s->epms) : 0;
	return true;
}

// rdma_dim_stats_compare: the rate first, then completions per event.
Dim::Cmp Dim::compare(const Stats &curr, const Stats &prev)
{
	if (!prev.cpms)
		return Cmp::Same; // first window
	if (significant_diff(curr.cpms, prev.cpms))
		return curr.cpms > prev.cpms ? Cmp::Better : Cmp::Worse;
	if (significant_diff(curr.cpe_ratio, prev.cpe_ratio))
		return curr.cpe_ratio > prev.cpe_ratio ? Cmp::Better : Cmp::Worse;
	return Cmp::Same;
}

// dim_turn (lib/dim/dim.c).
void Dim::turn()
{
	switch (tune_) {
	case Tune::ParkingOnTop:
	case Tune::ParkingTired:
		break;
	case Tune::GoingRight:
		tune_ = Tune::GoingLeft;
		steps_left_ = 0;
		break;
	case Tune::GoingLeft:
		tune_ = Tune::GoingRight;
		steps_right_ = 0;
		break;
	}
}

// rdma_dim_step: true when stepped, false on an edge of the table (DIM_ON_EDGE).
bool Dim::step()
{
	constexpr int last = static_cast<int>(kDimProfiles.size()) - 1;
	if (tune_ == Tune::GoingRight) {
		if (profile_ix_ == last)
			return false;
		profile_ix_++;
		steps_right_++;
	}
	if (tune_ == Tune::GoingLeft) {
		if (profile_ix_ == 0)
			return false;
		profile_ix_--;
		steps_left_++;
	}
	return true;
}

// rdma_dim_decision.
bool Dim::decision(const Stats &curr)
{
	int prev_ix = profile_ix_;
	if (tune_ != Tune::ParkingOnTop && tune_ != Tune::ParkingTired) {
		switch (compare(curr, prev_)) {
		case Cmp::Same:
			// Few completions per event for this level: moderation buys nothing.
			if (curr.cpe_ratio <= 50u * static_cast<uint32_t>(prev_ix))
				profile_ix_ = 0;
			break;
		case Cmp::Worse:
			turn();
			[[fallthrough]];
		case Cmp::Better:
			if (!step())
				turn();
			break;
		}
	}
	prev_ = curr;
	return profile_ix_ != prev_ix;
}

// rdma_dim.
bool Dim::sample(uint64_t completions, uint64_t now_us)
{
	measuring_.event_ctr++;
	measuring_.comp_ctr += static_cast<uint32_t>(completions);
	measuring_.time_us = now_us;

	switch (state_) {
	case State::MeasureInProgress: {
		uint32_t nevents = measuring_.event_ctr - start_.event_ctr;
		if (nevents < kDimNevents)
			return false;
		Stats curr;
		if (!calc_stats(start_, measuring_, &curr))
			return false;
		if (decision(curr)) {
			state_ = State::ApplyNewProfile;
			return true;
		}
		[[fallthrough]];
	}
	case State::StartMeasure:
		state_ = State::MeasureInProgress;
		start_ = measuring_;
		return false;
	case State::ApplyNewProfile:
		return false;
	}
	return false;
}

} // namespace ulp
