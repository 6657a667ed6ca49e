// SPDX-License-Identifier: MIT
// tools/ulp-bench/rw.h - `ulp-bench rw`: rdma_rw contexts per second and bandwidth.
#pragma once

#include <string>

namespace ulp::bench
{

struct RwOptions {
	bool json = false;   // rows as JSON on stdout instead of the table
	bool quick = false;  // short run (< 15 s)
	double min_time = 0; // seconds per figure; 0 = 0.3 (0.03 with --quick)
	std::string device;  // "" = two soft devices; else a registered (verbs) device
};

int run_rw(const RwOptions &o);

} // namespace ulp::bench
