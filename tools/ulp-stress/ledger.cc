// SPDX-License-Identifier: MIT
// tools/ulp-stress/ledger.cc - the generations each block may hold (see ledger.h).
#include "tools/ulp-stress/ledger.h"

#include "iscsi/pdu.h"
#include "tools/ulp-initiator/verify.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>

namespace stress
{

Ledger::Ledger(uint32_t run, uint32_t block_size, uint64_t first_lba, uint64_t blocks)
    : run_(run), bs_(block_size), first_lba_(first_lba), blocks_(blocks)
{
}

void Ledger::note_locked(uint64_t blk, uint32_t n, uint64_t gen)
{
	for (uint32_t i = 0; i < n && blk + i < blocks_.size(); i++)
		blocks_[blk + i].maybe.push_back(gen);
}

void Ledger::start_write(uint64_t blk, uint32_t n, uint64_t gen, std::span<uint8_t> buf)
{
	for (uint32_t i = 0; i < n; i++)
		initiator::fill_block(buf.subspan(size_t(i) * bs_, bs_), run_, first_lba_ + blk + i,
		                      gen);
	std::lock_guard g(lock_);
	note_locked(blk, n, gen);
}

void Ledger::note_write(uint64_t blk, uint32_t n, uint64_t gen)
{
	std::lock_guard g(lock_);
	note_locked(blk, n, gen);
}

void Ledger::ack_write(uint64_t blk, uint32_t n, uint64_t gen)
{
	std::lock_guard g(lock_);
	for (uint32_t i = 0; i < n && blk + i < blocks_.size(); i++) {
		Block &b = blocks_[blk + i];
		b.acked = std::max(b.acked, gen);
		std::erase_if(b.maybe, [&](uint64_t m) { return m <= b.acked; });
	}
}

void Ledger::check_read(uint64_t blk, std::span<const uint8_t> data, CheckResult *out,
                        size_t max_msgs)
{
	std::vector<uint8_t> want(bs_);
	std::lock_guard g(lock_);
	for (size_t i = 0; i < data.size() / bs_ && blk + i < blocks_.size(); i++) {
		Block &b = blocks_[blk + i];
		if (b.acked == 0 && b.maybe.empty())
			continue; // never written this run: nothing to judge
		out->checked++;
		const uint64_t lba = first_lba_ + blk + i;
		std::span<const uint8_t> got = data.subspan(i * bs_, bs_);
		const bool magic = ulp::get_be32(got.data()) == initiator::kVerifyMagic;
		const uint64_t found = magic ? ulp::get_be64(got.data() + 16) : 0;
		// The acceptable generations: the acknowledged one (none: the block may still be
		// unwritten) and those still uncertain.
		const bool acceptable =
		    found == b.acked ||
		    std::find(b.maybe.begin(), b.maybe.end(), found) != b.maybe.end();
		bool ok = false;
		const char *what = "stale or wrong generation";
		if (found == 0 && b.acked == 0) {
			ok = true; // an unacknowledged first write that never landed
		} else if (!magic) {
			what = "no header";
		} else if (acceptable) {
			initiator::fill_block(want, run_, lba, found);
			ok = std::memcmp(want.data(), got.data(), bs_) == 0;
			what = "contents differ from the generation's (LBA, run, CRC or data)";
		}
		if (ok) {
			// Settled: nothing else of ours can land on it any more.
			if (found)
				b.acked = found;
			b.maybe.clear();
			continue;
		}
		out->bad++;
		if (out->msgs.size() < max_msgs) {
			std::string maybe;
			for (uint64_t m : b.maybe)
				maybe += " " + std::to_string(m);
			// The header's own LBA too: a block that names another LBA was written
			// with another block's data.
			char msg[360];
			std::snprintf(
			    msg, sizeof(msg),
			    "LBA %" PRIu64 ": %s: acknowledged generation %" PRIu64
			    ", uncertain [%s ], found %s generation %" PRIu64 " of LBA %" PRIu64,
			    lba, what, b.acked, maybe.c_str(), magic ? "header with" : "no header,",
			    found, magic ? ulp::get_be64(got.data() + 8) : uint64_t(0));
			out->msgs.push_back(msg);
		}
	}
}

bool Ledger::any_written(uint64_t blk, uint32_t n) const
{
	std::lock_guard g(lock_);
	for (uint32_t i = 0; i < n && blk + i < blocks_.size(); i++)
		if (blocks_[blk + i].acked || !blocks_[blk + i].maybe.empty())
			return true;
	return false;
}

uint64_t Ledger::uncertain_blocks() const
{
	std::lock_guard g(lock_);
	uint64_t n = 0;
	for (const Block &b : blocks_)
		n += !b.maybe.empty();
	return n;
}

uint64_t Ledger::corrupt_expectation()
{
	std::lock_guard g(lock_);
	for (size_t i = 0; i < blocks_.size(); i++) {
		Block &b = blocks_[i];
		if (b.acked && b.maybe.empty()) {
			b.acked += 1000000007; // a generation no writer was given
			return first_lba_ + i;
		}
	}
	return UINT64_MAX;
}

} // namespace stress
