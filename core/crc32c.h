// SPDX-License-Identifier: MIT
// core/crc32c.h - CRC32C (Castagnoli): the iSCSI header and data digest, and the checksum
// of what the SCSI core keeps on disk (scsi/pr_persist.cc). Shared by both, so it lives
// below them.
//
// RFC 7143 13.1: the only digest besides None is CRC32C, generator 0x11edc6f41, computed
// over the BHS and AHS (header digest) or the data segment and its padding (data digest).
// The register starts at all ones and is inverted at the end; the result goes on the wire
// least significant byte first (RFC 3720 appendix B.4 shows "aa 36 91 8a" for 32 zero
// bytes, i.e. 0x8a9136aa; Linux stores it with put_unaligned_le32).
//
// Where the CPU has SSE4.2 its crc32 instruction computes exactly this polynomial; the
// choice is made once at run time. Elsewhere a slicing-by-8 table does the work.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace ulp
{

constexpr uint32_t kCrc32cInit = 0xffffffffu; // register value before the first byte

// Feed data into a running CRC register (start from kCrc32cInit). Chain calls to digest a
// PDU held in several buffers.
uint32_t crc32c_update(uint32_t reg, std::span<const uint8_t> data);

// The digest value of a finished register.
constexpr uint32_t crc32c_final(uint32_t reg)
{
	return ~reg;
}

// CRC32C of one buffer.
inline uint32_t crc32c(std::span<const uint8_t> data)
{
	return crc32c_final(crc32c_update(kCrc32cInit, data));
}

// A digest as its 4 wire bytes (little-endian, see above) and back.
inline void put_digest(uint8_t *p, uint32_t digest)
{
	p[0] = static_cast<uint8_t>(digest);
	p[1] = static_cast<uint8_t>(digest >> 8);
	p[2] = static_cast<uint8_t>(digest >> 16);
	p[3] = static_cast<uint8_t>(digest >> 24);
}

inline uint32_t get_digest(const uint8_t *p)
{
	return uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24;
}

// The two implementations, for tests and benchmarks: the table version always exists; the
// SSE4.2 one only when crc32c_have_hw() says the CPU has the instruction.
uint32_t crc32c_update_sw(uint32_t reg, std::span<const uint8_t> data);
uint32_t crc32c_update_hw(uint32_t reg, std::span<const uint8_t> data);
bool crc32c_have_hw();

} // namespace ulp
