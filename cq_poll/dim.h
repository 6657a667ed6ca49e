// SPDX-License-Identifier: MIT
// cq_poll/dim.h - adaptive CQ moderation (the kernel's rdma_dim, lib/dim/rdma_dim.c, with
// the helpers it uses from lib/dim/dim.c: dim_calc_stats, dim_turn).
//
// One Dim per CQ, fed by the thread that processes the CQ: sample(completions, now) once
// per event (one poll pass that ended armed), exactly where ib_poll_handler and
// ib_cq_poll_work call rdma_dim(). Every kDimNevents events it compares the completion
// rate (cpms) and completions per event (cpe_ratio) with the previous window and steps one
// level through kDimProfiles: right (more moderation) while things get better, turning
// when they get worse (net_dim's tuning rule). The caller applies a new level with
// Cq::modify (the kernel's ib_cq_rdma_dim_work). Not thread-safe: one CQ is processed by
// one thread at a time, and so is its Dim.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace ulp
{

// A moderation level: raise the event after comps completions or usec microseconds.
struct DimProfile {
	uint16_t usec;  // period, microseconds
	uint16_t comps; // completions per event
};

// rdma_dim_prof (drivers/infiniband/core/cq.c), RDMA_DIM_PARAMS_NUM_PROFILES entries.
inline constexpr std::array<DimProfile, 9> kDimProfiles = {{
    {1, 1},
    {1, 4},
    {2, 4},
    {2, 8},
    {4, 8},
    {16, 8},
    {16, 16},
    {32, 16},
    {32, 32},
}};

inline constexpr uint32_t kDimNevents = 64; // DIM_NEVENTS: events per measurement window

class Dim
{
public:
	// The kernel's dim->state.
	enum class State : uint8_t { StartMeasure, MeasureInProgress, ApplyNewProfile };
	// The kernel's dim->tune_state (rdma_dim_init starts GoingRight).
	enum class Tune : uint8_t { ParkingOnTop, ParkingTired, GoingRight, GoingLeft };

	// rdma_dim(): one event that yielded `completions`, at now_us (a monotonic clock,
	// microseconds). Returns true when a new level was chosen: the caller applies
	// profile() with Cq::modify, then calls applied().
	bool sample(uint64_t completions, uint64_t now_us);
	// ib_cq_rdma_dim_work's `dim->state = DIM_START_MEASURE` after modify_cq.
	void applied() { state_ = State::StartMeasure; }

	int level() const { return profile_ix_; }
	DimProfile profile() const { return kDimProfiles[static_cast<size_t>(profile_ix_)]; }
	Tune tune() const { return tune_; }

private:
	struct Sample {
		uint64_t time_us = 0;   // when the sample was taken
		uint32_t event_ctr = 0; // events so far (wraps, as the kernel's u16/u32 counters)
		uint32_t comp_ctr = 0;  // completions so far (wraps)
	};
	struct Stats {
		uint32_t cpms = 0;      // completions per millisecond in the window
		uint32_t epms = 0;      // events per millisecond
		uint32_t cpe_ratio = 0; // 100 * completions per event
	};
	enum class Cmp : uint8_t { Worse, Same, Better };

	static bool calc_stats(const Sample &start, const Sample &end, Stats *s);
	static Cmp compare(const Stats &curr, const Stats &prev);
	bool decision(const Stats &curr);
	bool step();
	void turn();

	State state_ = State::StartMeasure; // measurement phase
	Tune tune_ = Tune::GoingRight;      // direction of the walk over kDimProfiles
	int profile_ix_ = 0;                // current level, index into kDimProfiles
	uint32_t steps_left_ = 0;           // steps taken since turning left (dim->steps_left)
	uint32_t steps_right_ = 0;          // steps taken since turning right
	Sample start_;                      // window start (dim->start_sample)
	Sample measuring_;                  // running counters (dim->measuring_sample)
	Stats prev_;                        // the previous window's stats (dim->prev_stats)
};

} // namespace ulp
