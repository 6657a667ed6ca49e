// SPDX-License-Identifier: MIT
// scsi/spc_log.cc - LOG SENSE (SPC-4 6.8; the log pages of SPC-4 7.3): the supported log
// pages (00h), the supported log pages and subpages (00h/FFh), and, for a thin LU whose
// backstore can tell its usage, SBC-3's logical block provisioning log page (0Ch), which
// Windows and VMware read for the space left behind a thin LU.
//
// Nothing is counted or saved: every parameter is read from the backstore when asked
// (Backstore::usage), none can be reset, and LOG SELECT is not offered. So SP 1 (save) is
// refused, as is PPC 1 (only the parameters changed since the last LOG SELECT or LOG SENSE:
// there is no such history), and the one parameter page reports its current values only
// (PAGE CONTROL 01b, cumulative values: threshold values would need LOG SELECT).
#include "scsi/spc.h"

#include <algorithm>
#include <vector>

namespace ulp::scsi
{

namespace
{

enum : uint8_t {
	LOG_SUPPORTED_PAGES = 0x00, // SPC-4 7.3: the supported log pages, and with subpages (FFh)
	LOG_LB_PROVISIONING = 0x0c, // SBC-3 6.4 logical block provisioning
	LOG_SUBPAGE_ALL = 0xff,
};

// PAGE CONTROL values (SPC-4 6.8 table).
enum : uint8_t {
	PC_THRESHOLD = 0,
	PC_CUMULATIVE = 1,
	PC_DEFAULT_THRESHOLD = 2,
	PC_DEFAULT_CUMULATIVE = 3,
};

// SBC-3 logical block provisioning log parameter codes (the resources of thresholds).
enum : uint16_t {
	LBP_AVAILABLE = 0x0001, // Available LBA Mapping Resource Count
	LBP_USED = 0x0002,      // Used LBA Mapping Resource Count
};

// SBC-3 SCOPE of a resource count.
enum : uint8_t {
	SCOPE_DEDICATED = 1, // used by this LU only
	SCOPE_SHARED = 2,    // shared with other LUs (or other users of a file system)
};

// The page is offered when it has a parameter to hold (SPC-4: a log page has at least
// one): a thin LU whose backstore knows its usage.
bool lbp_page_offered(const LogicalUnit &lu, BsUsage *u)
{
	return lu.thin() && lu.bs().usage(u) == 0;
}

void put_header(std::vector<uint8_t> &d, uint8_t b0, uint8_t sub)
{
	d.assign(4, 0);
	d[0] = b0;
	d[1] = sub;
}

// One resource count parameter (SBC-3): a binary format list parameter (SPC-4 7.3.2,
// parameter control byte: DU 0, TSD 0, ETC 0, TMC 00b, FORMAT AND LINKING 11b) of 8
// bytes: RESOURCE COUNT in threshold sets, SCOPE.
void put_resource(std::vector<uint8_t> &d, uint16_t code, uint64_t sets, uint8_t scope)
{
	const size_t at = d.size();
	d.resize(at + 12, 0);
	put_be16(&d[at], code);
	d[at + 2] = 0x03;
	d[at + 3] = 8;
	put_be32(&d[at + 4], static_cast<uint32_t>(std::min<uint64_t>(sets, UINT32_MAX)));
	d[at + 8] = scope;
}

void exec_log_sense(Cmd *cmd)
{
	LogicalUnit &lu = *cmd->lu;
	const uint8_t page = cmd->cdb[2] & 0x3f;
	const uint8_t sub = cmd->cdb[3];
	const uint16_t ptr = get_be16(cmd->cdb + 5);
	std::vector<uint8_t> d;
	BsUsage u;
	const bool lbp = lbp_page_offered(lu, &u);
	if (page == LOG_SUPPORTED_PAGES && sub == 0) {
		put_header(d, LOG_SUPPORTED_PAGES, 0);
		d.push_back(LOG_SUPPORTED_PAGES);
		if (lbp)
			d.push_back(LOG_LB_PROVISIONING);
	} else if (page == LOG_SUPPORTED_PAGES) {
		// SPF 1: pairs of page and subpage codes, ascending.
		put_header(d, 0x40 | LOG_SUPPORTED_PAGES, LOG_SUBPAGE_ALL);
		d.insert(d.end(), {LOG_SUPPORTED_PAGES, 0, LOG_SUPPORTED_PAGES, LOG_SUBPAGE_ALL});
		if (lbp)
			d.insert(d.end(), {LOG_LB_PROVISIONING, 0});
	} else {
		// DS 1: the parameters are not saved.
		put_header(d, 0x80 | LOG_LB_PROVISIONING, 0);
		// The usage may have crossed the soft threshold since the last write looked.
		lu.lbp_check();
		const uint64_t set = (uint64_t(1) << lu.lbp_threshold_exponent()) * lu.block_size();
		// Parameters from the PARAMETER POINTER on, ascending (SPC-4 6.8).
		if (u.has_available && ptr <= LBP_AVAILABLE) {
			put_resource(d, LBP_AVAILABLE, u.available / set,
			             u.available_shared ? SCOPE_SHARED : SCOPE_DEDICATED);
		}
		const uint64_t used = std::min(u.used, lu.bs().size());
		put_resource(d, LBP_USED, (used + set - 1) / set, SCOPE_DEDICATED);
	}
	put_be16(&d[2], static_cast<uint16_t>(d.size() - 4)); // PAGE LENGTH
	complete_data_in(cmd, d);
}

} // namespace

Sense log_sense_parse(Cmd *cmd)
{
	const uint8_t *c = cmd->cdb;
	// Byte 1: SP (bit 0) and PPC (bit 1), both refused (above); the rest reserved.
	if (c[1] & 0xfc)
		return invalid_cdb_field(cmd, 1);
	if (c[1] & 0x02)
		return invalid_cdb_field(cmd, 1, 1);
	if (c[1] & 0x01)
		return invalid_cdb_field(cmd, 1, 0);
	const uint8_t pc = c[2] >> 6, page = c[2] & 0x3f, sub = c[3];
	const uint16_t ptr = get_be16(c + 5);
	BsUsage u;
	if (page == LOG_SUPPORTED_PAGES) {
		// Lists, not parameters: any PAGE CONTROL gives the same list, and there is no
		// parameter for a PARAMETER POINTER to point at.
		if (sub != 0 && sub != LOG_SUBPAGE_ALL)
			return invalid_cdb_field(cmd, 3);
		if (ptr)
			return invalid_cdb_field(cmd, 5);
	} else if (page == LOG_LB_PROVISIONING && lbp_page_offered(*cmd->lu, &u)) {
		if (sub != 0)
			return invalid_cdb_field(cmd, 3);
		if (pc != PC_CUMULATIVE)
			return invalid_cdb_field(cmd, 2, 7);
		// SPC-4 6.8: a PARAMETER POINTER past the largest parameter code of the page.
		if (ptr > LBP_USED)
			return invalid_cdb_field(cmd, 5);
	} else {
		return invalid_cdb_field(cmd, 2, 5);
	}
	cmd->cdb_xfer = get_be16(c + 7);
	cmd->cdb_dir = DataDir::Read;
	cmd->execute = exec_log_sense;
	return Sense::None;
}

} // namespace ulp::scsi
