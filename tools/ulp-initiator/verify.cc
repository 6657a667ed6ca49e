// SPDX-License-Identifier: MIT
// tools/ulp-initiator/verify.cc - block headers and the per-block write tracker (see
// verify.h).
#include "tools/ulp-initiator/verify.h"

#include "core/crc32c.h"
#include "iscsi/pdu.h"

#include <cinttypes>
#include <cstdio>
#include <cstring>

namespace initiator
{

using ulp::get_be32;
using ulp::get_be64;
using ulp::put_be32;
using ulp::put_be64;

namespace
{

uint32_t block_crc(std::span<const uint8_t> b)
{
	// CRC32C over the block with the CRC field (bytes 24..27) taken as zero.
	static const uint8_t zero[4] = {};
	uint32_t r = ulp::crc32c_update(ulp::kCrc32cInit, b.first(24));
	r = ulp::crc32c_update(r, zero);
	r = ulp::crc32c_update(r, b.subspan(28));
	return ulp::crc32c_final(r);
}

} // namespace

void fill_block(std::span<uint8_t> b, uint32_t run, uint64_t lba, uint64_t gen)
{
	// Contents: xorshift64 seeded from (run, lba, gen), so that a block from another
	// write differs everywhere, not only in its header.
	uint64_t x = (lba + 1) * 0x9e3779b97f4a7c15ull ^ gen * 0xbf58476d1ce4e5b9ull ^ run;
	for (size_t i = kHeaderLen; i < b.size(); i += 8) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		std::memcpy(b.data() + i, &x, std::min<size_t>(8, b.size() - i));
	}
	put_be32(b.data(), kVerifyMagic);
	put_be32(b.data() + 4, run);
	put_be64(b.data() + 8, lba);
	put_be64(b.data() + 16, gen);
	put_be32(b.data() + 24, 0);
	put_be32(b.data() + 28, 0);
	put_be32(b.data() + 24, block_crc(b));
}

Tracker::Tracker(uint64_t first_lba, uint64_t blocks, uint32_t block_size, uint32_t run_id)
    : first_lba_(first_lba), bs_(block_size), run_(run_id), state_(blocks)
{
}

bool Tracker::can_write(uint64_t blk, uint32_t n) const
{
	for (uint32_t i = 0; i < n; i++)
		if (state_[blk + i].inflight)
			return false;
	return true;
}

uint64_t Tracker::start_write(uint64_t blk, uint32_t n, std::span<uint8_t> buf)
{
	const uint64_t gen = next_gen_++;
	for (uint32_t i = 0; i < n; i++) {
		Block &b = state_[blk + i];
		b.inflight++;
		b.started++;
		fill_block(buf.subspan(size_t(i) * bs_, bs_), run_, first_lba_ + blk + i, gen);
	}
	return gen;
}

void Tracker::end_write(uint64_t blk, uint32_t n, uint64_t gen, bool good)
{
	for (uint32_t i = 0; i < n; i++) {
		Block &b = state_[blk + i];
		b.inflight--;
		if (good && !b.poisoned)
			b.gen = gen;
		else
			b.poisoned = true;
	}
}

void Tracker::cancel_write(uint64_t blk, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		Block &b = state_[blk + i];
		b.inflight--;
		b.started--;
	}
}

void Tracker::start_read(uint64_t blk, uint32_t n, ReadSnapshot *s) const
{
	s->first_block = blk;
	s->expected_gen.resize(n);
	s->writes_started.resize(n);
	s->uncertain.resize(n);
	for (uint32_t i = 0; i < n; i++) {
		const Block &b = state_[blk + i];
		s->expected_gen[i] = b.gen;
		s->writes_started[i] = b.started;
		s->uncertain[i] = b.inflight != 0 || b.poisoned;
	}
}

uint64_t Tracker::check_read(const ReadSnapshot &s, std::span<const uint8_t> data,
                             uint64_t *checked, std::vector<std::string> *errors, size_t max_msgs)
{
	uint64_t bad = 0;
	char msg[256];
	for (size_t i = 0; i < s.expected_gen.size(); i++) {
		const Block &b = state_[s.first_block + i];
		// A write started while the read was out: uncertain too.
		if (s.uncertain[i] || b.started != s.writes_started[i])
			continue;
		const uint64_t lba = first_lba_ + s.first_block + i;
		std::span<const uint8_t> blk = data.subspan(i * bs_, bs_);
		const uint64_t want = s.expected_gen[i];
		const bool magic = get_be32(blk.data()) == kVerifyMagic;
		if (!magic && want == 0)
			continue; // never written by the tool: nothing to judge
		(*checked)++;
		const uint32_t run = get_be32(blk.data() + 4);
		const uint64_t hlba = get_be64(blk.data() + 8);
		const uint64_t gen = get_be64(blk.data() + 16);
		const uint32_t crc = get_be32(blk.data() + 24);
		const char *what = nullptr;
		if (!magic)
			what = "no header";
		else if (hlba != lba)
			what = "header names another LBA";
		else if (crc != block_crc(blk))
			what = "checksum mismatch";
		else if (want != 0 && run != run_)
			what = "block from another run";
		else if (want != 0 && gen != want)
			what = "stale or wrong generation";
		if (!what)
			continue;
		bad++;
		if (errors->size() < max_msgs) {
			std::snprintf(msg, sizeof(msg),
			              "verify: LBA %" PRIu64 ": %s (expected run %08x gen %" PRIu64
			              ", found magic %s run %08x LBA %" PRIu64 " gen %" PRIu64 ")",
			              lba, what, run_, want, magic ? "ok" : "bad", run, hlba, gen);
			errors->push_back(msg);
		}
	}
	return bad;
}

} // namespace initiator
