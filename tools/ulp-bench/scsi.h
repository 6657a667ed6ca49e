// SPDX-License-Identifier: MIT
// tools/ulp-bench/scsi.h - `ulp-bench scsi`: 4 KiB commands per second through the SCSI
// target core and the loopback fabric, beside references measured in the same run.
#pragma once

#include <cstdint>
#include <string>

namespace ulp::bench
{

struct ScsiBenchOptions {
	bool json = false;     // rows as JSON on stdout instead of the table
	bool quick = false;    // short run (smaller file, shorter figures)
	double min_time = 0;   // seconds per figure; 0 = 2 (0.3 with --quick)
	std::string dir;       // where the file backstore's file goes (default /var/tmp)
	uint64_t file_mib = 0; // its size in MiB; 0 = 256 (64 with --quick)
	int qd = 32;           // commands in flight
	bool fio = true;       // run fio on the same file for the file rows
};

int run_scsi(const ScsiBenchOptions &o);

} // namespace ulp::bench
