// SPDX-License-Identifier: MIT
// tools/ulp-stress/io.h - verified I/O on one nexus: random reads and writes of a worker's
// own blocks, every write recorded in the ledger (ledger.h) before it goes out and
// acknowledged there when the target answers GOOD, every read checked against it; and the
// read-back pass a verified session makes over the whole range.
//
// Writes and reads never overlap in flight (one command per chunk of blocks at a time), so
// a read has exactly the ledger's expectation. A journal hook lets a killed child tell its
// parent of each write before it goes out and of each acknowledgement before it counts
// (kill.cc); in-process workers use the ledger directly.
#pragma once

#include "tools/ulp-initiator/disk.h"
#include "tools/ulp-stress/ledger.h"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

namespace stress
{

// Blocks of the ledger's range a worker owns: [first, first + count).
struct Region {
	uint64_t first = 0;
	uint64_t count = 0;
};

// Hands out generations; unique and growing across the whole run (and its children).
struct GenSource {
	std::atomic<uint64_t> next{1};
	uint64_t take() { return next.fetch_add(1); }
};

// Told of each write before it is sent, and of each acknowledgement before it counts.
struct Journal {
	std::function<void(uint64_t blk, uint32_t n, uint64_t gen)> start;
	std::function<void(uint64_t blk, uint32_t n, uint64_t gen)> ack;
};

struct IoStats {
	uint64_t ios = 0;           // completed GOOD
	uint64_t writes = 0;        // of them writes
	uint64_t lost = 0;          // ended by a lost nexus (connection lost, timeout, cancelled)
	uint64_t errors = 0;        // completed with another status (a SCSI error)
	uint64_t busy = 0;          // answered BUSY or TASK SET FULL (retried; not an error)
	uint64_t held = 0;          // submits refused for want of a credit or slot (-EBUSY)
	uint64_t verify_errors = 0; // blocks read back wrong
	uint64_t checked = 0;       // blocks compared
	uint64_t timeouts = 0;      // ended unanswered by the initiator's cmd_timeout (of lost)
	uint64_t answered = 0;      // commands the target answered (GOOD, error, BUSY)
	std::chrono::microseconds worst{0}; // the slowest answered one: submit to its callback
	std::vector<std::string> msgs;      // the first failures and mismatches
	std::string fatal;                  // why the nexus stopped (connection lost, ...)
};

struct IoOptions {
	uint32_t qd = 4;                         // commands in flight
	uint32_t io_blocks = 8;                  // blocks per command
	std::chrono::milliseconds duration{200}; // issue for this long
	const std::atomic<bool> *stop = nullptr; // or until this is set
	uint32_t seed = 1;
	// Blocks other nexuses read at the same time, never written during the run (filled
	// before: fill_region): reads of it join the region's own commands. count 0: none.
	Region shared;
	std::atomic<uint64_t> *progress = nullptr;        // counts every command completed GOOD
	std::atomic<uint64_t> *progress_writes = nullptr; // counts the writes among them
};

// The first commands of a new nexus: TEST UNIT READY until no UNIT ATTENTION (at most 3
// times). false + *why when the LUN is not ready.
bool lun_ready(initiator::Disk &d, uint64_t lun, std::string *why);

// Random verified I/O on region for opt.duration. Returns false when the nexus failed
// (st->fatal says why); failed commands and mismatches are counted in *st either way.
bool run_io(initiator::Disk &d, uint64_t lun, Ledger &ledger, Region region, GenSource &gens,
            const IoOptions &opt, const Journal *journal, IoStats *st);

// Write every chunk of io_blocks of region once, in order (qd commands in flight), and
// acknowledge each in the ledger: what IoOptions::shared reads. false when the nexus failed.
bool fill_region(initiator::Disk &d, uint64_t lun, Ledger &ledger, Region region, GenSource &gens,
                 uint32_t io_blocks, uint32_t qd, IoStats *st);

// Read back every written block of region and check it (the verified session).
bool verify_region(initiator::Disk &d, uint64_t lun, Ledger &ledger, Region region,
                   uint32_t io_blocks, IoStats *st);

} // namespace stress
