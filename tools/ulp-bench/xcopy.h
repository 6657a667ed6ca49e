// SPDX-License-Identifier: MIT
// tools/ulp-bench/xcopy.h - `ulp-bench xcopy`: EXTENDED COPY's throughput through the SCSI
// target core and the loopback fabric, per path (the kernel's copy_file_range between file
// LUs, the read/write loop), beside the same copy done directly in the same run.
#pragma once

#include <cstdint>
#include <string>

namespace ulp::bench
{

struct XcopyBenchOptions {
	bool json = false;  // rows as JSON on stdout instead of the table
	bool quick = false; // short run (64 MiB, fewer rounds)
	std::string dir;    // where the file LUs' files go (default /var/tmp)
	uint64_t mib = 0;   // bytes copied per EXTENDED COPY, MiB; 0 = 256 (64 with --quick)
	int rounds = 0;     // copies per figure; 0 = 5 (2 with --quick)
};

int run_xcopy(const XcopyBenchOptions &o);

} // namespace ulp::bench
