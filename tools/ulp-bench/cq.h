// SPDX-License-Identifier: MIT
// tools/ulp-bench/cq.h - `ulp-bench cq`: cost per completion dispatched by each cq_poll
// context, beside a raw poll loop on the same kind of CQ.
#pragma once

namespace ulp::bench
{

struct CqBenchOptions {
	bool json = false;  // rows as JSON on stdout instead of the table
	bool quick = false; // short run for CI / smoke (< 15 s)
	int rounds = 0;     // pre-filled CQs dispatched per figure; 0 = 2000 (200 with --quick)
};

int run_cq(const CqBenchOptions &o);

} // namespace ulp::bench
