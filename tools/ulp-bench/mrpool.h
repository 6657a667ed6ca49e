// SPDX-License-Identifier: MIT
// tools/ulp-bench/mrpool.h - `ulp-bench mrpool`: MrPool get/put cost beside a baseline.
#pragma once

namespace ulp::bench
{

struct MrPoolOptions {
	bool json = false;   // rows as JSON on stdout instead of the table
	bool quick = false;  // short run (< 15 s)
	double min_time = 0; // seconds per figure; 0 = 0.3 (0.03 with --quick)
};

int run_mrpool(const MrPoolOptions &o);

} // namespace ulp::bench
