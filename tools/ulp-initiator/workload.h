// SPDX-License-Identifier: MIT
// tools/ulp-initiator/workload.h - the I/O generator: keeps qd commands in flight on one
// session, sequential or random, reads, writes or a mix, for a time or a byte count,
// verifying what it reads (verify.h), measuring latency (histogram.h), printing progress
// once a second. The session is any Disk (disk.h): iSCSI over TCP or iSER, or SRP.
//
// Run phases (RunState): Running (issuing) -> Draining (time or size reached, or an
// error: no new I/O, in-flight I/O completes, bounded by the session's command timeout)
// -> Verifying (optional read-back pass over the whole range) -> Done.
#pragma once

#include "tools/ulp-initiator/disk.h"
#include "tools/ulp-initiator/histogram.h"
#include "tools/ulp-initiator/verify.h"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace initiator
{

enum class Pattern : uint8_t { Read, Write, RandRead, RandWrite, Mixed };
const char *pattern_name(Pattern p);
bool pattern_from_name(const std::string &s, Pattern *out);

struct WorkloadConfig {
	Pattern pattern = Pattern::RandRead;
	uint64_t lun = 0;
	uint32_t bs = 4096;                       // bytes per I/O (a multiple of the block size)
	uint32_t qd = 32;                         // I/Os in flight
	std::chrono::milliseconds runtime{10000}; // 0: until size is reached
	uint64_t size = 0;                        // bytes to transfer; 0: until runtime
	uint64_t offset = 0;      // first byte of the range (a multiple of the block size)
	uint64_t range = 0;       // bytes of the range; 0: to the end of the LUN
	uint32_t rwmix = 50;      // mixed: percent reads
	uint64_t seed = 1;        // random offsets and read/write choice
	bool verify = true;       // check reads (verify.h)
	bool verify_pass = false; // afterwards, read back the whole range and check it
	bool progress = true;     // a line a second on stderr
	// Where the qd I/O buffers of bs bytes live (at least qd * bs bytes): memory the
	// transport registered (iSER: zero copy). Empty: the runner allocates its own.
	std::span<uint8_t> arena;
	// Set (by a signal handler): the workload ends as its runtime would (drained, then the
	// verify pass). nullptr: only runtime and size end it.
	const std::atomic<bool> *stop = nullptr;
};

// The figures of one phase (the workload, or the verify pass).
struct PhaseStats {
	uint64_t ios = 0;    // completed GOOD
	uint64_t reads = 0;  // of which reads
	uint64_t writes = 0; // of which writes
	uint64_t bytes = 0;  // moved
	uint64_t errors = 0; // completed not GOOD (or lost)
	double seconds = 0;  // wall time of the phase
	Histogram lat;       // every completed I/O (ns)
};

struct RunResult {
	PhaseStats main;                      // the workload
	PhaseStats verify_pass;               // the read-back pass (when asked)
	uint64_t verified_blocks = 0;         // blocks compared against an expected content
	uint64_t verify_errors = 0;           // mismatching blocks
	std::vector<std::string> verify_msgs; // the first mismatches (LBA, expected, found)
	std::vector<std::string> error_msgs;  // the first failed I/Os
	std::string fatal;       // why the run ended early (session lost, ...), or empty
	uint64_t lun_blocks = 0; // capacity, from READ CAPACITY(16)
	uint32_t block_size = 0;
};

// Run the workload on a logged-in session. Returns false when it could not start (bad
// geometry: *why); a run that started always fills *out (fatal says if it ended early).
bool run_workload(Disk &s, const WorkloadConfig &cfg, RunResult *out, std::string *why);

} // namespace initiator
