// SPDX-License-Identifier: MIT
// tools/ulp-stress/report.h - the final table (scenario x transport: cycles, I/Os,
// failures, teardown latency p50/p99/max; for the gateways scenario failovers and their
// I/O stalls) on stdout, or the same as JSON, with the command line.
#pragma once

#include "tools/ulp-stress/memory.h"
#include "tools/ulp-stress/snapshot.h"
#include "tools/ulp-stress/stress.h"

#include <memory>
#include <string>
#include <vector>

namespace stress
{

struct Report {
	std::string command; // our command line
	std::string profile;
	double seconds = 0;
	std::vector<std::unique_ptr<Row>> rows;
	ResourceSnapshot baseline, final;
	bool have_snapshots = false;
	MemoryCheck memory;  // VmRSS over the run
	int stop_status = 0; // our daemon's exit status after SIGTERM (0 when not ours)
	bool ok() const;
};

void print_table(const Report &r);
void print_json(const Report &r);

} // namespace stress
