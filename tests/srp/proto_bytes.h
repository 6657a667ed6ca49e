// SPDX-License-Identifier: MIT
// tests/srp/proto_bytes.h - what the SRP codec suites share (proto_test.cc,
// proto_cmd_test.cc): byte strings, and SRP_CMD IUs built the way Linux's ib_srp builds them.
#pragma once

#include "srp/proto.h"

#include <gtest/gtest.h>

#include <cstring>
#include <initializer_list>
#include <span>
#include <vector>

namespace ulp::srp::test
{

using Bytes = std::vector<uint8_t>;

inline Bytes cat(std::initializer_list<Bytes> parts)
{
	Bytes out;
	for (const Bytes &p : parts)
		out.insert(out.end(), p.begin(), p.end());
	return out;
}

// The tag as the initiator's host wrote it: opaque bytes, read with memcpy.
inline uint64_t tag_of(const Bytes &b)
{
	uint64_t t;
	std::memcpy(&t, b.data(), 8);
	return t;
}

// Little-endian hosts (x86, arm64) write tag 42 as these bytes: the codec must not swap.
inline const Bytes kTagBytes = {0x2a, 0, 0, 0, 0, 0, 0, 0};

// The first n bytes in a heap block of exactly n bytes: ASan reports any read past it.
inline Bytes first(const Bytes &b, size_t n)
{
	return Bytes(b.begin(), b.begin() + static_cast<ptrdiff_t>(n));
}

inline const Bytes kLun1 = {0x00, 0x01, 0, 0, 0, 0, 0, 0}; // SAM single-level LUN 1

// SRP_CMD's fixed part: opcode, sol_not, reserved, buf_fmt, the counts, tag, reserved, LUN,
// reserved, task_attr, reserved, add_cdb_len, the 16-byte CDB.
inline Bytes cmd_hdr(uint8_t buf_fmt, uint8_t out_cnt, uint8_t in_cnt, uint8_t add_cdb_len,
                     const Bytes &cdb16)
{
	return cat({{CMD, 0, 0, 0, 0, buf_fmt, out_cnt, in_cnt},
	            kTagBytes,
	            {0, 0, 0, 0},
	            kLun1,
	            {0, ATTR_SIMPLE, 0, add_cdb_len},
	            cdb16});
}

inline const Bytes kWrite10 = {0x2a, 0, 0, 0, 0x10, 0, 0, 0, 0x01, 0, 0, 0, 0, 0, 0, 0};
inline const Bytes kRead10 = {0x28, 0, 0, 0, 0x20, 0, 0, 0, 0x08, 0, 0, 0, 0, 0, 0, 0};

inline Bytes be32(uint32_t v)
{
	return {uint8_t(v >> 24), uint8_t(v >> 16), uint8_t(v >> 8), uint8_t(v)};
}

inline Bytes desc(uint64_t va, uint32_t key, uint32_t len)
{
	return cat({be32(uint32_t(va >> 32)), be32(uint32_t(va)), be32(key), be32(len)});
}

inline Bytes pattern(size_t n)
{
	Bytes b(n);
	for (size_t i = 0; i < n; i++)
		b[i] = uint8_t(i * 7 + 1);
	return b;
}

// ib_srp with immediate data: a 512-byte WRITE, buf_fmt IMM << 4, the length at 48, the
// data at SRP_IMM_DATA_OFFSET (68) after 16 bytes of room for additional CDB bytes.
inline Bytes cmd_imm()
{
	return cat({cmd_hdr(0x30, 0, 0, 0, kWrite10), be32(512), Bytes(16, 0), pattern(512)});
}

// A direct READ of 4 KiB: one descriptor after the CDB.
inline Bytes cmd_direct_read()
{
	return cat({cmd_hdr(0x01, 0, 1, 0, kRead10), desc(0x00007f1234560000u, 0x1234, 4096)});
}

// An indirect WRITE, the whole table inline: three entries.
inline Bytes cmd_indirect_write()
{
	return cat({cmd_hdr(0x20, 3, 0, 0, kWrite10),
	            desc(0x00000000dead0000u, 0x77, 48), // table descriptor: 3 entries
	            be32(4096 + 8192 + 512),             // total length
	            desc(0x1000, 0x11, 4096), desc(0x20000, 0x12, 8192),
	            desc(0x300000, 0x13, 512)});
}

// An indirect READ whose table (300 entries) is in initiator memory; 2 entries inline.
inline Bytes cmd_indirect_read_external()
{
	return cat({cmd_hdr(0x02, 0, 2, 0, kRead10), desc(0x00000000beef0000u, 0x99, 300 * 16),
	            be32(300 * 4096), desc(0x10000, 0x21, 4096), desc(0x20000, 0x21, 4096)});
}

// A 32-byte CDB (a variable-length CDB: 0x7f): 16 additional bytes, then a direct READ.
inline const Bytes kCdb32 = [] {
	Bytes c = pattern(32);
	c[0] = 0x7f;
	c[7] = 32 - 8; // additional CDB length of the variable-length CDB itself
	return c;
}();
inline Bytes cmd_long_cdb()
{
	return cat({cmd_hdr(0x01, 0, 1, 16, first(kCdb32, 16)),
	            Bytes(kCdb32.begin() + 16, kCdb32.end()), desc(0x4000, 0x5, 512)});
}

inline void expect_common(const Cmd &c)
{
	EXPECT_EQ(c.tag, tag_of(kTagBytes));
	EXPECT_EQ(Bytes(c.lun, c.lun + 8), kLun1);
	EXPECT_EQ(c.lun_raw, 0x0001000000000000u);
	EXPECT_EQ(c.task_attr, ATTR_SIMPLE);
	EXPECT_EQ(c.sol_not, 0);
}

inline bool inside(std::span<const uint8_t> s, const Bytes &b)
{
	return s.empty() || (s.data() >= b.data() && s.data() + s.size() <= b.data() + b.size());
}

} // namespace ulp::srp::test
