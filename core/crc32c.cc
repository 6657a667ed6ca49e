// SPDX-License-Identifier: MIT
// core/crc32c.cc - CRC32C: SSE4.2 crc32 instruction when present, slicing-by-8 otherwise.
#include "core/crc32c.h"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace ulp
{

namespace
{

// The reflected form of 0x1edc6f41 (RFC 7143 13.1 gives it with the x**32 term: 0x11edc6f41).
constexpr uint32_t kPolyReflected = 0x82f63b78u;

using Tables = std::array<std::array<uint32_t, 256>, 8>;

// t[0] is the classic byte table; t[k][b] is the register contribution of byte b seen k bytes
// earlier, so eight bytes fold in with eight lookups (Intel's slicing-by-8).
constexpr Tables make_tables()
{
	Tables t{};
	for (uint32_t b = 0; b < 256; b++) {
		uint32_t c = b;
		for (int i = 0; i < 8; i++)
			c = (c >> 1) ^ ((c & 1) ? kPolyReflected : 0);
		t[0][b] = c;
	}
	for (uint32_t b = 0; b < 256; b++)
		for (size_t k = 1; k < 8; k++)
			t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xff];
	return t;
}

constexpr Tables kTables = make_tables();

uint64_t load_le64(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) uint32_t update_sse42(uint32_t reg, const uint8_t *p, size_t n)
{
	uint64_t r = reg;
	while (n && (reinterpret_cast<uintptr_t>(p) & 7)) {
		r = _mm_crc32_u8(static_cast<uint32_t>(r), *p++);
		n--;
	}
	for (; n >= 8; n -= 8, p += 8) {
		uint64_t v;
		std::memcpy(&v, p, 8);
		r = _mm_crc32_u64(r, v);
	}
	uint32_t r32 = static_cast<uint32_t>(r);
	while (n--)
		r32 = _mm_crc32_u8(r32, *p++);
	return r32;
}
#endif

using UpdateFn = uint32_t (*)(uint32_t, std::span<const uint8_t>);

UpdateFn pick_impl()
{
	return crc32c_have_hw() ? crc32c_update_hw : crc32c_update_sw;
}

} // namespace

uint32_t crc32c_update_sw(uint32_t reg, std::span<const uint8_t> data)
{
	const uint8_t *p = data.data();
	size_t n = data.size();
	for (; n >= 8; n -= 8, p += 8) {
		uint64_t v = load_le64(p) ^ reg;
		reg = kTables[7][v & 0xff] ^ kTables[6][(v >> 8) & 0xff] ^
		      kTables[5][(v >> 16) & 0xff] ^ kTables[4][(v >> 24) & 0xff] ^
		      kTables[3][(v >> 32) & 0xff] ^ kTables[2][(v >> 40) & 0xff] ^
		      kTables[1][(v >> 48) & 0xff] ^ kTables[0][v >> 56];
	}
	while (n--)
		reg = (reg >> 8) ^ kTables[0][(reg ^ *p++) & 0xff];
	return reg;
}

bool crc32c_have_hw()
{
#if defined(__x86_64__)
	static const bool have = __builtin_cpu_supports("sse4.2");
	return have;
#else
	return false;
#endif
}

uint32_t crc32c_update_hw(uint32_t reg, std::span<const uint8_t> data)
{
#if defined(__x86_64__)
	if (crc32c_have_hw())
		return update_sse42(reg, data.data(), data.size());
#endif
	return crc32c_update_sw(reg, data);
}

uint32_t crc32c_update(uint32_t reg, std::span<const uint8_t> data)
{
	static const UpdateFn fn = pick_impl();
	return fn(reg, data);
}

} // namespace ulp
