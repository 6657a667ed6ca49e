// SPDX-License-Identifier: MIT
// tools/ulp-initiator/verify.h - data verification: what a written block carries and what
// a read of it is checked against.
//
// Every logical block the tool writes starts with a header:
//
//	offset  size  field
//	0       4     magic "ULPV"
//	4       4     run id (random per run: tells this run's blocks from older ones)
//	8       8     LBA the block was written to
//	16      8     generation: the write that wrote it (counts up over the run)
//	24      4     CRC32C of the whole block, this field taken as zero
//	28      4     reserved (0)
//	32..          pseudo-random bytes derived from (run id, LBA, generation)
//
// The tracker keeps, per block of the range: the generation of the last write that
// completed GOOD (0: not written this run), how many writes to it are in flight, and a
// count of writes ever started on it. The workload never starts a write on a block that
// already has one in flight (two overlapping writes in flight have no defined order, so the
// block's content would be uncertain even after both completed).
//
// A read is checked per block:
//  - written this run, no write in flight when the read was issued and none started while
//    it was out: the header must be intact (magic, run id, LBA, CRC) and carry exactly the
//    generation last written;
//  - a write in flight when the read was issued, or started before it completed: the
//    content is uncertain (old, new, or a mix), so it is not checked at all;
//  - not written this run: a block that has a header (the magic) must be intact (LBA, CRC:
//    an earlier run's data); anything else (never written, other data) is not judged.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace initiator
{

constexpr uint32_t kVerifyMagic = 0x554c5056; // "ULPV"
constexpr size_t kHeaderLen = 32;

// Fill one block (block.size() bytes, >= kHeaderLen) for (run, lba, gen).
void fill_block(std::span<uint8_t> block, uint32_t run, uint64_t lba, uint64_t gen);

// What a read found in one block.
enum class BlockCheck : uint8_t {
	Match,    // the header and contents are the expected ones
	NoHeader, // no magic: never written by this tool
	Mismatch, // wrong: see the message
};

struct ReadSnapshot {
	uint64_t first_block = 0;             // block index (within the range) of the read's start
	std::vector<uint64_t> expected_gen;   // per block: the generation expected (0: none)
	std::vector<uint64_t> writes_started; // per block: writes started when the read was issued
	std::vector<bool> uncertain;          // per block: a write was in flight at issue
};

class Tracker
{
public:
	// blocks: the range's size in logical blocks; first_lba: its first LBA.
	Tracker(uint64_t first_lba, uint64_t blocks, uint32_t block_size, uint32_t run_id);

	uint32_t run_id() const { return run_; }
	uint32_t block_size() const { return bs_; }
	uint64_t blocks() const { return state_.size(); }
	uint64_t first_lba() const { return first_lba_; }

	// Writes: may [blk, blk+n) take a write now (no write in flight on any of them)?
	bool can_write(uint64_t blk, uint32_t n) const;
	// A write of n blocks starts: returns its generation; fills buf (n blocks).
	uint64_t start_write(uint64_t blk, uint32_t n, std::span<uint8_t> buf);
	// It ended: good means the target acknowledged it; otherwise the blocks' contents
	// are uncertain from now on (they are not checked again this run).
	void end_write(uint64_t blk, uint32_t n, uint64_t gen, bool good);
	// A write started and then never sent (the transport had no credit): as if never
	// started. Only before anything else ran (no read snapshot can have seen it).
	void cancel_write(uint64_t blk, uint32_t n);

	// Reads: what to expect, taken at issue.
	void start_read(uint64_t blk, uint32_t n, ReadSnapshot *snap) const;
	// Check the data of a completed read. Mismatch messages go to *errors (at most
	// max_msgs of them are kept in total). Returns the number of mismatching blocks;
	// *checked counts the blocks really compared.
	uint64_t check_read(const ReadSnapshot &snap, std::span<const uint8_t> data,
	                    uint64_t *checked, std::vector<std::string> *errors,
	                    size_t max_msgs = 20);

	// Blocks written this run (for the verify pass).
	bool written(uint64_t blk) const { return state_[blk].gen != 0; }

private:
	struct Block {
		uint64_t gen = 0;      // last generation written GOOD (0: none this run)
		uint32_t started = 0;  // writes ever started on it (changes mark uncertainty)
		uint8_t inflight = 0;  // writes in flight (0 or 1: overlaps are avoided)
		bool poisoned = false; // a write to it failed: contents unknown
	};

	uint64_t first_lba_;
	uint32_t bs_;
	uint32_t run_;
	uint64_t next_gen_ = 1;
	std::vector<Block> state_;
};

} // namespace initiator
