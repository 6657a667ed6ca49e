// SPDX-License-Identifier: MIT
// tools/ulp-stress/ledger.h - what every block of the stressed range must hold, across
// sessions, transports, dropped connections and killed initiators.
//
// Blocks carry ulp-initiator's verify header (tools/ulp-initiator/verify.h: magic, run id,
// LBA, generation, CRC32C, contents derived from them), written with one run id for the
// whole ulp-stress run. Per block the ledger keeps the last generation the target
// acknowledged (GOOD status) and the generations written since that were never
// acknowledged: a write in flight when its initiator was killed or its connection dropped
// may or may not have reached the medium, so a later read may find the old generation or
// any of those. The first read after such a loss settles it: what it found is the block's
// content from then on (the tool reuses a block only once the target has closed the nexus
// that wrote it, so nothing older can land later).
//
// Generations only grow: each writer takes them from one counter (the parent hands each
// killed child a range of its own), so a newer acknowledged write retires every older
// unacknowledged one on that block.
//
// Thread safe (one mutex): workers, the kill scenario's journal readers and the verified
// session use it at once, each on its own blocks.
#pragma once

#include <cstdint>
#include <mutex>
#include <span>
#include <string>
#include <vector>

namespace stress
{

// What a check found.
struct CheckResult {
	uint64_t checked = 0;          // blocks compared against an expected content
	uint64_t bad = 0;              // blocks that matched no acceptable generation
	std::vector<std::string> msgs; // the first mismatches (LBA, expected, found)
};

class Ledger
{
public:
	// The range [first_lba, first_lba + blocks) of one LUN, in blocks of block_size.
	Ledger(uint32_t run, uint32_t block_size, uint64_t first_lba, uint64_t blocks);

	uint32_t run() const { return run_; }
	uint32_t block_size() const { return bs_; }
	uint64_t blocks() const { return blocks_.size(); }
	uint64_t first_lba() const { return first_lba_; }

	// A write of generation gen to blocks [blk, blk + n) (relative to first_lba) is going
	// out: fill buf (n blocks) and remember gen as possible content until acknowledged.
	void start_write(uint64_t blk, uint32_t n, uint64_t gen, std::span<uint8_t> buf);
	// The same, from a journal (the data is the child's): only the bookkeeping.
	void note_write(uint64_t blk, uint32_t n, uint64_t gen);
	// The target acknowledged it: the blocks hold gen (older unacknowledged ones retire).
	void ack_write(uint64_t blk, uint32_t n, uint64_t gen);
	// Check the data of a read of [blk, blk + n) that no write overlapped: every block the
	// tool wrote must be intact and carry its acknowledged generation or one still
	// uncertain (which then becomes the block's known content). Blocks never written this
	// run are not judged.
	void check_read(uint64_t blk, std::span<const uint8_t> data, CheckResult *out,
	                size_t max_msgs = 20);
	// Blocks [blk, blk + n) of which any was ever written (worth reading back).
	bool any_written(uint64_t blk, uint32_t n) const;
	// Blocks with a write still uncertain (reported after kills; 0 once all were read).
	uint64_t uncertain_blocks() const;

	// Test hook (--test-wrong-generation): expect a generation nobody wrote in the first
	// acknowledged block, so the next verified read of it must report a mismatch. Returns
	// the block's LBA, or UINT64_MAX when nothing was written yet.
	uint64_t corrupt_expectation();

private:
	struct Block {
		uint64_t acked = 0;          // last acknowledged generation (0: none this run)
		std::vector<uint64_t> maybe; // later generations sent, never acknowledged
	};
	void note_locked(uint64_t blk, uint32_t n, uint64_t gen);

	const uint32_t run_;
	const uint32_t bs_;
	const uint64_t first_lba_;
	mutable std::mutex lock_;
	std::vector<Block> blocks_; // under lock_
};

} // namespace stress
