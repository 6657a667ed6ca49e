// SPDX-License-Identifier: MIT
// scsi/spc.h - the primary command set (SPC-4) as its files share it: spc.cc dispatches
// and holds the small commands, spc_inquiry.cc INQUIRY and its VPD pages, spc_mode.cc
// MODE SENSE and MODE SELECT, opcodes.cc the table of supported commands and the two
// MAINTENANCE IN reports built from it. Internal to the command families, like
// core_internal.h; every parse function follows its contract.
#pragma once

#include "scsi/core_internal.h"

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

namespace ulp::scsi
{

Sense inquiry_parse(Cmd *cmd);     // INQUIRY (spc_inquiry.cc)
Sense mode_sense_parse(Cmd *cmd);  // MODE SENSE (6) and (10) (spc_mode.cc)
Sense mode_select_parse(Cmd *cmd); // MODE SELECT (6) and (10) (spc_mode.cc)
Sense rsoc_parse(Cmd *cmd);        // REPORT SUPPORTED OPERATION CODES (opcodes.cc)
Sense rstmf_parse(Cmd *cmd);       // REPORT SUPPORTED TASK MANAGEMENT FUNCTIONS (opcodes.cc)
Sense log_sense_parse(Cmd *cmd);   // LOG SENSE (spc_log.cc)

// The body of the Extended INQUIRY Data VPD page (86h) after d's 4-byte header
// (spc_vpd_ext.cc): d is resized to the whole page.
void put_ext_inquiry(const LogicalUnit &lu, std::vector<uint8_t> &d);

// The body of the Third-party Copy VPD page (8Fh) after d's 4-byte header
// (spc_vpd_3pc.cc): its descriptors appended.
void put_third_party_copy(std::vector<uint8_t> &d);

// A left-aligned, space-padded ASCII field of len bytes (SPC-4 4.3.1: only 20h..7Eh; any
// other byte of s is sent as a space, so that no configuration string can break it).
void put_ascii(uint8_t *p, size_t len, std::string_view s);

// Byte 0 of INQUIRY data and VPD pages (SPC-4 6.6.2): peripheral qualifier 000b, device
// type 00h (direct access block device); 7Fh (qualifier 011b, type 1Fh) for a LUN that
// does not exist.
inline uint8_t peripheral_byte(const Cmd *cmd)
{
	return cmd->lu ? 0x00 : 0x7f;
}

} // namespace ulp::scsi
