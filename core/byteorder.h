// SPDX-License-Identifier: MIT
// core/byteorder.h - big-endian fields in wire formats (SCSI CDBs and parameter data,
// iSCSI and iSER headers, SRP IUs, CM private data): the kernel's get_unaligned_be32 and
// put_unaligned_be32 family, byte by byte so that alignment never matters.
#pragma once

#include <cstdint>

namespace ulp
{

inline uint16_t get_be16(const uint8_t *p)
{
	return static_cast<uint16_t>(p[0] << 8 | p[1]);
}
inline uint32_t get_be24(const uint8_t *p)
{
	return uint32_t{p[0]} << 16 | uint32_t{p[1]} << 8 | p[2];
}
inline uint32_t get_be32(const uint8_t *p)
{
	return uint32_t{p[0]} << 24 | uint32_t{p[1]} << 16 | uint32_t{p[2]} << 8 | p[3];
}
inline uint64_t get_be64(const uint8_t *p)
{
	return uint64_t{get_be32(p)} << 32 | get_be32(p + 4);
}
inline void put_be16(uint8_t *p, uint16_t v)
{
	p[0] = static_cast<uint8_t>(v >> 8);
	p[1] = static_cast<uint8_t>(v);
}
inline void put_be24(uint8_t *p, uint32_t v)
{
	p[0] = static_cast<uint8_t>(v >> 16);
	p[1] = static_cast<uint8_t>(v >> 8);
	p[2] = static_cast<uint8_t>(v);
}
inline void put_be32(uint8_t *p, uint32_t v)
{
	put_be16(p, static_cast<uint16_t>(v >> 16));
	put_be16(p + 2, static_cast<uint16_t>(v));
}
inline void put_be64(uint8_t *p, uint64_t v)
{
	put_be32(p, static_cast<uint32_t>(v >> 32));
	put_be32(p + 4, static_cast<uint32_t>(v));
}

} // namespace ulp
