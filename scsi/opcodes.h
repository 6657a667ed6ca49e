// SPDX-License-Identifier: MIT
// scsi/opcodes.h - every command the device server supports, in one table: what REPORT
// SUPPORTED OPERATION CODES (SPC-4 6.35) reports, and what tests check the parsers
// against. A command added to a family (spc*.cc, sbc.cc, pr.cc) gets its row here, with
// the CDB usage data of what its parser evaluates.
#pragma once

#include "scsi/lu.h"
#include "scsi/types.h"

#include <cstdint>
#include <span>

namespace ulp::scsi
{

struct OpcodeInfo {
	uint8_t opcode;
	uint16_t sa;     // the service action (has_sa), else 0
	bool has_sa;     // the opcode has service actions (SERVICE ACTION in byte 1)
	uint8_t cdb_len; // bytes
	// SPC-4 6.35.3 CDB USAGE DATA: byte 0 is the opcode, the SERVICE ACTION field holds
	// the service action, every other bit is 1 where the parser evaluates the CDB bit
	// (acts on it, or checks its value) and 0 where it ignores it or treats it as
	// reserved. cdb_len bytes are meaningful.
	uint8_t usage[16];
	// Whether the LU offers the command; null: always. UNMAP needs thin provisioning
	// (SBC-3 6.5.4 LBPU, the logical block provisioning VPD page).
	bool (*supported)(const LogicalUnit &lu);
};

// The table, sorted by opcode then service action.
std::span<const OpcodeInfo> opcode_table();

// The row for opcode (and sa, when the opcode has service actions; ignored otherwise), or
// null when the device server does not know the command.
const OpcodeInfo *opcode_find(uint8_t opcode, uint16_t sa);

// Whether the device server implements service actions for opcode.
bool opcode_has_sa(uint8_t opcode);

// Whether lu offers the command of row e.
inline bool opcode_supported(const OpcodeInfo &e, const LogicalUnit &lu)
{
	return !e.supported || e.supported(lu);
}

// Task management functions scsi/tmr.cc carries out (the others it answers FUNCTION NOT
// SUPPORTED): what REPORT SUPPORTED TASK MANAGEMENT FUNCTIONS (SPC-4 6.36) reports.
bool tmf_supported(TmfType t);

} // namespace ulp::scsi
