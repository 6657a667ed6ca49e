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
#include <vector>

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

// Asymmetric access (SPC-4 5.15), what a multipath initiator reads (scsi_alua.cc).
// REPORT TARGET PORT GROUPS (MAINTENANCE IN, service action 0Ah, SPC-4 6.37) asking for
// the extended header (PARAMETER DATA FORMAT 001b), and INQUIRY of a VPD page.
std::array<uint8_t, 12> cdb_report_target_port_groups(uint32_t alloc_len);
std::array<uint8_t, 6> cdb_inquiry_vpd(uint8_t page, uint16_t alloc_len);

// One target port group of REPORT TARGET PORT GROUPS.
struct PortGroup {
	uint16_t id = 0;             // TARGET PORT GROUP
	uint8_t state = 0;           // ASYMMETRIC ACCESS STATE (0 A/O, 1 A/NO, 2 standby,
	                             // 3 unavailable, 0xe offline, 0xf transitioning)
	bool pref = false;           // PREF: a preferred group
	std::vector<uint16_t> rtpis; // its target ports' relative identifiers
};
// The groups of RTPG parameter data (either header format); false with *why for data that
// is short or whose descriptors overrun what came. Nothing is read past data.
bool parse_rtpg(std::span<const uint8_t> data, std::vector<PortGroup> *out, std::string *why);

// What the device identification VPD page (83h, SPC-4 7.8.6) says of the port a command
// came through: the relative target port (designator type 4h) and the target port group
// (type 5h), each when present.
struct PortIds {
	bool has_rtpi = false;
	uint16_t rtpi = 0;
	bool has_tpg = false;
	uint16_t tpg = 0;
};
// False for data that is not a VPD 83h page or whose designators overrun it.
bool parse_vpd83_port(std::span<const uint8_t> data, PortIds *out);

// Why a command failed, where asymmetric access explains it (SPC-4 5.15.2.x and Annex D):
// the port's group is transitioning (NOT READY 04h/0Ah), standby (04h/0Bh), unavailable
// (04h/0Ch), or the states changed (UNIT ATTENTION 2Ah/06h). The command was not executed
// in any of these: another path may take it.
enum class AluaSense : uint8_t { None, Transitioning, Standby, Unavailable, StateChanged };
AluaSense alua_sense(const ScsiResult &r);
const char *alua_sense_str(AluaSense a);

// One line for a result that is not GOOD: "CHECK CONDITION, sense 05/24/00",
// "rejected (reason 0x09)", "connection lost", ...
std::string describe_result(const ScsiResult &r);

} // namespace ulp::iscsi::initiator
