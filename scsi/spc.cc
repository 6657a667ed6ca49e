// SPDX-License-Identifier: MIT
// scsi/spc.cc - primary commands (SPC-4; the kernel's target_core_spc.c): the dispatcher,
// TEST UNIT READY, REPORT LUNS, REQUEST SENSE. INQUIRY is in spc_inquiry.cc, MODE SENSE /
// SELECT in spc_mode.cc; the reservation commands are handed to pr.cc.
#include "scsi/spc.h"

#include "scsi/pr.h"

#include <algorithm>
#include <cstring>
#include <vector>

namespace ulp::scsi
{

namespace
{

void exec_tur(Cmd *cmd)
{
	complete_good(cmd);
}

void exec_report_luns(Cmd *cmd)
{
	// SPC-4 6.33: an 8-byte header (list length) and 8 bytes per LUN. Reporting clears
	// REPORTED LUNS DATA HAS CHANGED for this nexus (SPC-4 6.33, 5.14).
	std::vector<uint64_t> luns = cmd->sess->luns();
	std::vector<uint8_t> d(8 + 8 * luns.size());
	put_be32(d.data(), static_cast<uint32_t>(8 * luns.size()));
	for (size_t i = 0; i < luns.size(); i++)
		lun_to_wire(luns[i], d.data() + 8 + 8 * i);
	if (cmd->lu)
		cmd->lu->ua_clear(cmd->sess->nexus(), UA_REPORTED_LUNS_CHANGED);
	complete_data_in(cmd, d);
}

Sense parse_report_luns(Cmd *cmd)
{
	const uint8_t *c = cmd->cdb;
	// SPC-4 6.33: SELECT REPORT 00h, 01h, 02h (all the same here: no well-known LUNs);
	// the allocation length must be at least 16.
	if (c[2] > 0x02)
		return Sense::InvalidCdbField;
	cmd->cdb_xfer = get_be32(c + 6);
	if (cmd->cdb_xfer < 16)
		return Sense::InvalidCdbField;
	cmd->cdb_dir = DataDir::Read;
	cmd->execute = exec_report_luns;
	return Sense::None;
}

void exec_request_sense(Cmd *cmd)
{
	// SPC-4 6.39: a pending unit attention is returned (and cleared) as the sense data;
	// otherwise NO SENSE, or LOGICAL UNIT NOT SUPPORTED for a LUN that is not there.
	uint8_t d[18];
	uint16_t ua = cmd->lu ? cmd->lu->ua_take(cmd->sess->nexus()) : 0;
	if (ua)
		build_sense(Sense::UnitAttention, d, ua);
	else if (!cmd->lu)
		build_sense(Sense::LunNotSupported, d);
	else {
		std::memset(d, 0, sizeof(d));
		d[0] = 0x70;
		d[7] = 10;
	}
	complete_data_in(cmd, d);
}

Sense parse_request_sense(Cmd *cmd)
{
	// DESC (bit 0): descriptor format is not offered (D_SENSE 0); a request for it gets
	// fixed format, as SPC-4 6.39 allows only when D_SENSE... we refuse it instead.
	if (cmd->cdb[1] & 0x01)
		return Sense::InvalidCdbField;
	cmd->cdb_xfer = cmd->cdb[4];
	cmd->cdb_dir = DataDir::Read;
	cmd->execute = exec_request_sense;
	return Sense::None;
}

} // namespace

Sense spc_parse(Cmd *cmd)
{
	switch (cmd->cdb[0]) {
	case OP_TEST_UNIT_READY:
		cmd->execute = exec_tur;
		return Sense::None;
	case OP_INQUIRY:
		return inquiry_parse(cmd);
	case OP_REPORT_LUNS:
		return parse_report_luns(cmd);
	case OP_REQUEST_SENSE:
		return parse_request_sense(cmd);
	case OP_MODE_SENSE_6:
	case OP_MODE_SENSE_10:
		return mode_sense_parse(cmd);
	case OP_MODE_SELECT_6:
	case OP_MODE_SELECT_10:
		return mode_select_parse(cmd);
	case OP_PERSISTENT_RESERVE_IN:
		return pr_in_parse(cmd);
	case OP_PERSISTENT_RESERVE_OUT:
		return pr_out_parse(cmd);
	case OP_RESERVE_6:
	case OP_RESERVE_10:
		return reserve_parse(cmd);
	case OP_RELEASE_6:
	case OP_RELEASE_10:
		return release_parse(cmd);
	default:
		return Sense::UnsupportedOpcode;
	}
}

} // namespace ulp::scsi
