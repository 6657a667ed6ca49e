// SPDX-License-Identifier: MIT
// scsi/spc.cc - primary commands (SPC-4; the kernel's target_core_spc.c): TEST UNIT READY,
// INQUIRY (standard data, VPD 0x00, 0x80, 0x83), REPORT LUNS, REQUEST SENSE; the
// reservation commands are handed to pr.cc.
#include "scsi/core_internal.h"
#include "scsi/pr.h"

#include <algorithm>
#include <cstring>
#include <vector>

namespace ulp::scsi
{

namespace
{

// SPC-4 6.? the peripheral device type and qualifier of byte 0: 00h direct access block
// device; for a LUN that does not exist, qualifier 011b with type 1Fh (7Fh).
uint8_t peripheral(const Cmd *cmd)
{
	return cmd->lu ? 0x00 : 0x7f;
}

// A space-padded ASCII field of len bytes.
void put_ascii(uint8_t *p, size_t len, const std::string &s)
{
	std::memset(p, ' ', len);
	std::memcpy(p, s.data(), std::min(len, s.size()));
}

void exec_tur(Cmd *cmd)
{
	complete_good(cmd);
}

void exec_std_inquiry(Cmd *cmd)
{
	// SPC-4 6.6.2 standard INQUIRY data, 36 bytes: SPC-4 (VERSION 06h), response data
	// format 2, HISUP; 3PC/TPGS not offered; CMDQUE (full task management model).
	uint8_t d[36] = {};
	d[0] = peripheral(cmd);
	d[2] = 0x06;
	d[3] = 0x12; // HISUP, RESPONSE DATA FORMAT 2
	d[4] = sizeof(d) - 5;
	d[7] = 0x02; // CMDQUE
	if (cmd->lu) {
		put_ascii(d + 8, 8, cmd->lu->cfg().vendor);
		put_ascii(d + 16, 16, cmd->lu->cfg().product);
		put_ascii(d + 32, 4, cmd->lu->cfg().revision);
	} else {
		put_ascii(d + 8, 8, "ULP");
		put_ascii(d + 16, 16, "no LUN");
		put_ascii(d + 32, 4, "0001");
	}
	complete_data_in(cmd, d);
}

constexpr uint8_t kVpdPages[] = {0x00, 0x80, 0x83};

void exec_vpd(Cmd *cmd)
{
	const uint8_t page = cmd->cdb[2];
	uint8_t d[256] = {};
	size_t n = 4;
	d[0] = peripheral(cmd);
	d[1] = page;
	switch (page) {
	case 0x00: // SPC-4 7.8.? supported VPD pages
		std::memcpy(d + n, kVpdPages, sizeof(kVpdPages));
		n += sizeof(kVpdPages);
		break;
	case 0x80: { // unit serial number
		const std::string &sn = cmd->lu->serial();
		const size_t l = std::min<size_t>(sn.size(), sizeof(d) - n);
		std::memcpy(d + n, sn.data(), l);
		n += l;
		break;
	}
	case 0x83: // device identification: NAA (LU), relative target port
		// NAA designator: code set binary (1), association LU (0), type NAA (3), 8 bytes.
		d[n] = 0x01;
		d[n + 1] = 0x03;
		d[n + 3] = 8;
		put_be64(d + n + 4, cmd->lu->naa());
		n += 12;
		// Relative target port: PIV 1, association target port (1), type 4, 4 bytes.
		d[n] = 0x61;
		d[n + 1] = 0x94;
		d[n + 3] = 4;
		put_be16(d + n + 6, cmd->sess->nexus().rtpi);
		n += 8;
		break;
	default:
		complete_sense(cmd, Sense::InvalidCdbField);
		return;
	}
	put_be16(d + 2, static_cast<uint16_t>(n - 4));
	complete_data_in(cmd, {d, n});
}

Sense parse_inquiry(Cmd *cmd)
{
	const uint8_t *c = cmd->cdb;
	// SPC-4 6.6.1: CMDDT (bit 1, obsolete) must be 0; a PAGE CODE without EVPD is an
	// error.
	if (c[1] & 0xfe)
		return Sense::InvalidCdbField;
	const bool evpd = c[1] & 1;
	if (!evpd && c[2])
		return Sense::InvalidCdbField;
	cmd->cdb_xfer = get_be16(c + 3);
	cmd->cdb_dir = DataDir::Read;
	if (!evpd) {
		cmd->execute = exec_std_inquiry;
		return Sense::None;
	}
	if (!cmd->lu)
		return Sense::LunNotSupported; // SPC-4: VPD of a LUN that is not there
	if (std::find(std::begin(kVpdPages), std::end(kVpdPages), c[2]) == std::end(kVpdPages))
		return Sense::InvalidCdbField;
	cmd->execute = exec_vpd;
	return Sense::None;
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
		return parse_inquiry(cmd);
	case OP_REPORT_LUNS:
		return parse_report_luns(cmd);
	case OP_REQUEST_SENSE:
		return parse_request_sense(cmd);
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
