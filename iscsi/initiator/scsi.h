// SPDX-License-Identifier: MIT
// iscsi/initiator/scsi.h - the few SCSI commands an initiator client builds and decodes
// itself (SBC-3 READ/WRITE(16), READ CAPACITY(16), TEST UNIT READY, INQUIRY, SYNCHRONIZE
// CACHE(10)), and sense data (SPC-4 4.5: fixed and descriptor formats) read back into
// key/ASC/ASCQ for messages.
#pragma once

#include "iscsi/initiator/session.h"

#include <array>
#include <cstdint>
#include <span>
#include <string>

namespace ulp::iscsi::initiator
{

std::array<uint8_t, 16> cdb_read16(uint64_t lba, uint32_t blocks);
std::array<uint8_t, 16> cdb_write16(uint64_t lba, uint32_t blocks, bool fua = false);
std::array<uint8_t, 16> cdb_read_capacity16(uint32_t alloc_len = 32);
std::array<uint8_t, 6> cdb_test_unit_ready();
std::array<uint8_t, 6> cdb_inquiry(uint16_t alloc_len);
std::array<uint8_t, 10> cdb_sync_cache10();

// READ CAPACITY(16) parameter data (SBC-3 5.16.2).
struct Capacity {
	uint64_t blocks = 0;     // RETURNED LOGICAL BLOCK ADDRESS + 1
	uint32_t block_size = 0; // LOGICAL BLOCK LENGTH IN BYTES
};
// False when fewer than 12 bytes came or the block size is 0.
bool parse_read_capacity16(std::span<const uint8_t> data, Capacity *out);

struct SenseKey {
	bool valid = false; // response code 70h-73h recognised
	uint8_t key = 0;    // SENSE KEY
	uint8_t asc = 0;    // ADDITIONAL SENSE CODE
	uint8_t ascq = 0;   // ADDITIONAL SENSE CODE QUALIFIER
};
SenseKey parse_sense(std::span<const uint8_t> sense);

// One line for a result that is not GOOD: "CHECK CONDITION, sense 05/24/00",
// "rejected (reason 0x09)", "connection lost", ...
std::string describe_result(const ScsiResult &r);

} // namespace ulp::iscsi::initiator
