// SPDX-License-Identifier: MIT
// tests/core/crc32c_test.cc - CRC32C against RFC 3720 appendix B.4 and between the table
// and SSE4.2 implementations.
#include "core/crc32c.h"

#include <gtest/gtest.h>

#include <array>
#include <random>
#include <vector>

using namespace ulp;

namespace
{

// RFC 3720 B.4 lists the CRC bytes as they go on the wire.
std::array<uint8_t, 4> wire(uint32_t digest)
{
	std::array<uint8_t, 4> b;
	put_digest(b.data(), digest);
	return b;
}

std::vector<uint8_t> bytes(std::initializer_list<uint8_t> l)
{
	return l;
}

} // namespace

TEST(Crc32c, Rfc3720Vectors)
{
	std::vector<uint8_t> zeros(32, 0), ones(32, 0xff), inc(32), dec(32);
	for (int i = 0; i < 32; i++) {
		inc[i] = static_cast<uint8_t>(i);
		dec[i] = static_cast<uint8_t>(31 - i);
	}
	EXPECT_EQ(wire(crc32c(zeros)), (std::array<uint8_t, 4>{0xaa, 0x36, 0x91, 0x8a}));
	EXPECT_EQ(wire(crc32c(ones)), (std::array<uint8_t, 4>{0x43, 0xab, 0xa8, 0x62}));
	EXPECT_EQ(wire(crc32c(inc)), (std::array<uint8_t, 4>{0x4e, 0x79, 0xdd, 0x46}));
	EXPECT_EQ(wire(crc32c(dec)), (std::array<uint8_t, 4>{0x5c, 0xdb, 0x3f, 0x11}));
	// The iSCSI READ (10) command PDU of B.4.
	std::vector<uint8_t> read10 = bytes({
	    0x01, 0xc0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
	    0x00, 0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00, 0x00, 0x00, 0x04, 0x00,
	    0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00, 0x18, 0x28, 0x00, 0x00, 0x00,
	    0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
	});
	EXPECT_EQ(wire(crc32c(read10)), (std::array<uint8_t, 4>{0x56, 0x3a, 0x96, 0xd9}));
	// The usual check value.
	const char *nine = "123456789";
	EXPECT_EQ(crc32c({reinterpret_cast<const uint8_t *>(nine), 9}), 0xe3069283u);
	EXPECT_EQ(crc32c({}), 0u);
}

TEST(Crc32c, DigestByteOrder)
{
	uint8_t b[4];
	put_digest(b, 0x8a9136aau);
	EXPECT_EQ(b[0], 0xaa);
	EXPECT_EQ(b[3], 0x8a);
	EXPECT_EQ(get_digest(b), 0x8a9136aau);
}

namespace
{

std::vector<uint8_t> random_bytes(size_t n)
{
	std::mt19937 rng(7);
	std::vector<uint8_t> buf(n);
	for (auto &b : buf)
		b = static_cast<uint8_t>(rng());
	return buf;
}

constexpr size_t kLens[] = {0, 1, 3, 7, 8, 9, 15, 16, 63, 64, 65, 511, 4096};

} // namespace

// The slicing-by-8 table agrees with a bit-at-a-time reference at every length and
// alignment, and chained updates equal one pass.
TEST(Crc32c, TableMatchesBitwiseAndChains)
{
	auto bitwise = [](std::span<const uint8_t> s) {
		uint32_t c = 0xffffffffu;
		for (uint8_t b : s) {
			c ^= b;
			for (int i = 0; i < 8; i++)
				c = (c >> 1) ^ ((c & 1) ? 0x82f63b78u : 0);
		}
		return ~c;
	};
	std::vector<uint8_t> buf = random_bytes(4096 + 16);
	for (size_t off = 0; off < 9; off++) {
		for (size_t len : kLens) {
			std::span<const uint8_t> s(buf.data() + off, len);
			const uint32_t ref = bitwise(s);
			EXPECT_EQ(crc32c_final(crc32c_update_sw(kCrc32cInit, s)), ref)
			    << off << " " << len;
			EXPECT_EQ(crc32c(s), ref);
			for (size_t cut = 0; cut <= len; cut += 5) {
				uint32_t r = crc32c_update(kCrc32cInit, s.first(cut));
				r = crc32c_update(r, s.subspan(cut));
				ASSERT_EQ(crc32c_final(r), ref);
			}
		}
	}
}

TEST(Crc32c, HardwareMatchesTable)
{
	if (!crc32c_have_hw())
		GTEST_SKIP() << "no SSE4.2 on this CPU";
	std::vector<uint8_t> buf = random_bytes(4096 + 16);
	for (size_t off = 0; off < 9; off++)
		for (size_t len : kLens) {
			std::span<const uint8_t> s(buf.data() + off, len);
			EXPECT_EQ(crc32c_update_hw(0x12345678u, s),
			          crc32c_update_sw(0x12345678u, s))
			    << off << " " << len;
		}
}
