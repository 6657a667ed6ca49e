// SPDX-License-Identifier: MIT
// tests/iscsi/initiator_env.h - what the initiator suites against real targets share
// (initiator_test.cc, initiator_tools_test.cc): names and secrets, a session's config,
// ulp-targetd with a RAM LUN, data patterns, and write-read-verify runs.
#pragma once

#include "iscsi/initiator/scsi.h"
#include "iscsi/initiator/session.h"
#include "tests/iscsi/target_process.h"

#include <gtest/gtest.h>

#include <chrono>
#include <random>
#include <span>
#include <string>
#include <vector>

namespace ulp::iscsi::initiator::ini_test
{

using namespace std::chrono_literals;
using test::TargetdProcess;
using test::TgtdProcess;
using clock = std::chrono::steady_clock;

inline constexpr char kIqn[] = "iqn.2026-11.org.ulp:disk";
inline constexpr char kInitiator[] = "iqn.2026-11.org.ulp:test-initiator";
inline constexpr char kSecret[] = "0123456789abcdef";       // 16 bytes: RFC 7143 9.2.1 wants >= 12
inline constexpr char kTargetSecret[] = "fedcba9876543210"; // the target's, for mutual CHAP
inline constexpr uint32_t kBlock = 512;                     // ulp-targetd's default block size

inline InitiatorConfig config(const std::string &target = kIqn,
                              const std::string &initiator = kInitiator)
{
	InitiatorConfig c;
	c.initiator_name = initiator;
	c.target_name = target;
	c.cmd_timeout = 10s;
	c.login_timeout = 5s;
	c.connect_timeout = 2s;
	return c;
}

inline Portal local(uint16_t port)
{
	return Portal{"127.0.0.1", port, 0};
}

// ulp-targetd with one 64 MiB RAM LUN (0) and extra flags.
inline ::testing::AssertionResult start_targetd(TargetdProcess &t,
                                                std::vector<std::string> extra = {})
{
	std::vector<std::string> a{"--target", kIqn, "--lun", "0:ram:size=64M", "-q"};
	a.insert(a.end(), extra.begin(), extra.end());
	std::string why;
	if (!t.start(a, &why))
		return ::testing::AssertionFailure() << why;
	return ::testing::AssertionSuccess();
}

// The first command of a new I_T nexus may get UNIT ATTENTION (POWER ON OCCURRED, SAM-5
// 5.14): take it with TEST UNIT READY.
inline void clear_ua(Session &s, uint64_t lun)
{
	const auto tur = cdb_test_unit_ready();
	for (int i = 0; i < 3 && !s.run({lun, tur, DataDir::None, {}}).good(); i++) {
	}
}

// Deterministic contents for a block: lba and a seed stirred.
inline void pattern(std::span<uint8_t> buf, uint64_t lba, uint32_t seed)
{
	uint64_t x = lba * 0x9e3779b97f4a7c15ull ^ seed;
	for (size_t i = 0; i < buf.size(); i += 8) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		std::memcpy(buf.data() + i, &x, std::min<size_t>(8, buf.size() - i));
	}
}

// Writes count I/Os of bs bytes (distinct LBAs, shuffled) with qd in flight, reads them
// back with qd in flight and compares. Returns the mismatches (0 is success).
struct IoCheck {
	uint64_t mismatches = 0;
	uint64_t failures = 0;
	std::string first_failure;
};

inline IoCheck write_read_verify(Session &s, uint64_t lun, uint32_t bs, uint32_t qd, uint32_t count,
                                 uint32_t seed, uint32_t block = kBlock, uint64_t first_lba = 0)
{
	IoCheck res;
	clear_ua(s, lun);
	const uint32_t blocks = bs / block;
	std::vector<uint64_t> lbas(count);
	for (uint32_t i = 0; i < count; i++)
		lbas[i] = first_lba + uint64_t(i) * blocks;
	std::mt19937 rng(seed);
	std::shuffle(lbas.begin(), lbas.end(), rng);
	std::vector<std::vector<uint8_t>> bufs(qd, std::vector<uint8_t>(bs));
	std::vector<std::array<uint8_t, 16>> cdbs(qd);
	std::vector<uint64_t> at(qd);
	std::vector<uint32_t> free_bufs;
	for (uint32_t i = 0; i < qd; i++)
		free_bufs.push_back(i);
	for (int phase = 0; phase < 2; phase++) {
		const bool write = phase == 0;
		uint32_t next = 0, done = 0;
		const auto deadline = clock::now() + 60s;
		while (done < count && clock::now() < deadline) {
			while (next < count && !free_bufs.empty()) {
				const uint32_t b = free_bufs.back();
				free_bufs.pop_back();
				at[b] = lbas[next++];
				if (write) {
					pattern(bufs[b], at[b], seed);
					cdbs[b] = cdb_write16(at[b], blocks);
				} else {
					std::fill(bufs[b].begin(), bufs[b].end(), 0xee);
					cdbs[b] = cdb_read16(at[b], blocks);
				}
				ScsiRequest r;
				r.lun = lun;
				r.cdb = cdbs[b];
				r.dir = write ? DataDir::Write : DataDir::Read;
				r.data = bufs[b];
				const uint32_t itt =
				    s.submit(r, [&, b, write](const ScsiResult &x) {
					    done++;
					    free_bufs.push_back(b);
					    if (!x.good()) {
						    if (!res.failures++)
							    res.first_failure = describe_result(x);
						    return;
					    }
					    if (write)
						    return;
					    std::vector<uint8_t> want(bufs[b].size());
					    pattern(want, at[b], seed);
					    if (want != bufs[b])
						    res.mismatches++;
				    });
				if (itt == kReservedTag) {
					res.failures++;
					res.first_failure = "submit: " + s.last_error();
					return res;
				}
			}
			if (s.poll(100ms) < 0)
				break;
		}
		if (s.stats().statsn_gaps) {
			res.failures++;
			res.first_failure = "StatSN gaps: " + std::to_string(s.stats().statsn_gaps);
		}
		if (done != count) {
			res.failures += count - done;
			if (res.first_failure.empty())
				res.first_failure = "not done: " + s.error();
			return res;
		}
	}
	return res;
}

// A data-integrity run's shape: block size, commands in flight.
struct IoParam {
	uint32_t bs;
	uint32_t qd;
};

// gtest prints a parameter (and names its test) with this: "bs4096_qd32".
inline void PrintTo(const IoParam &p, std::ostream *os)
{
	*os << "bs" << p.bs << "_qd" << p.qd;
}

} // namespace ulp::iscsi::initiator::ini_test
