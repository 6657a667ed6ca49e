// SPDX-License-Identifier: MIT
// scsi/spc_vpd_3pc.cc - the Third-party Copy VPD page (8Fh, SPC-4 7.8.17), which ESXi and
// Windows read before they offload a copy: what the copy manager (scsi/xcopy.cc) offers,
// told in third-party copy descriptors. Only those of what it does: EXTENDED COPY (LID1)
// between block devices, no token-based copy (POPULATE TOKEN, WRITE USING TOKEN: no Block
// Device ROD Token Limits, ROD Token Features or ROD types), no stream devices, no held data.
// Every limit is RECEIVE COPY RESULTS' OPERATING PARAMETERS (xcopy.h), so the two agree.
//
// Each descriptor: bytes 0..1 THIRD-PARTY COPY DESCRIPTOR TYPE, 2..3 its length after them,
// a multiple of four (SPC-4 7.8.17.1: padded with zeros).
#include "scsi/spc.h"
#include "scsi/xcopy.h"

#include <algorithm>
#include <initializer_list>

namespace ulp::scsi
{

namespace
{

// SPC-4 7.8.17.1, third-party copy descriptor types.
enum : uint16_t {
	TPC_SUPPORTED_COMMANDS = 0x0001,      // 7.8.17.3
	TPC_PARAMETER_DATA = 0x0004,          // 7.8.17.4
	TPC_SUPPORTED_DESCRIPTORS = 0x0008,   // 7.8.17.5
	TPC_SUPPORTED_CSCD_IDS = 0x000c,      // 7.8.17.6
	TPC_GENERAL_COPY_OPERATIONS = 0x8001, // 7.8.17.8
};

// Append a descriptor of type whose body (after the 4-byte header) is body, padded to a
// multiple of four.
void put_desc(std::vector<uint8_t> &d, uint16_t type, std::vector<uint8_t> body)
{
	body.resize((body.size() + 3) & ~size_t(3), 0);
	const size_t at = d.size();
	d.resize(at + 4 + body.size(), 0);
	put_be16(&d[at], type);
	put_be16(&d[at + 2], static_cast<uint16_t>(body.size()));
	std::copy(body.begin(), body.end(), d.begin() + long(at + 4));
}

} // namespace

void put_third_party_copy(std::vector<uint8_t> &d)
{
	// Supported Commands: COMMANDS SUPPORTED LIST LENGTH, then per command its OPERATION
	// CODE, SERVICE ACTIONS LIST LENGTH and service actions: EXTENDED COPY's LID1 (00h),
	// RECEIVE COPY RESULTS' COPY STATUS, OPERATING PARAMETERS and FAILED SEGMENT DETAILS
	// (what rcr_parse takes).
	std::vector<uint8_t> cmds = {0};
	auto command = [&](uint8_t op, std::initializer_list<uint8_t> sas) {
		cmds.push_back(op);
		cmds.push_back(static_cast<uint8_t>(sas.size()));
		cmds.insert(cmds.end(), sas);
	};
	command(OP_XCOPY_LID1, {0x00});
	command(OP_RECV_COPY_RESULTS,
	        {RCR_COPY_STATUS, RCR_OPERATING_PARAMETERS, RCR_FAILED_SEGMENT_DETAILS});
	cmds[0] = static_cast<uint8_t>(cmds.size() - 1);
	put_desc(d, TPC_SUPPORTED_COMMANDS, std::move(cmds));

	// Parameter Data (body: 28 bytes): 4 reserved, MAXIMUM CSCD DESCRIPTOR COUNT, MAXIMUM
	// SEGMENT DESCRIPTOR COUNT, MAXIMUM DESCRIPTOR LIST LENGTH, MAXIMUM INLINE DATA LENGTH,
	// 12 reserved.
	std::vector<uint8_t> pd(28, 0);
	put_be16(&pd[4], kXcopyMaxCscd);
	put_be16(&pd[6], kXcopyMaxSegments);
	put_be32(&pd[8], kXcopyMaxDescListLen);
	put_be32(&pd[12], kXcopyMaxInlineData);
	put_desc(d, TPC_PARAMETER_DATA, std::move(pd));

	// Supported Descriptors: SUPPORTED DESCRIPTOR LIST LENGTH, then the type codes of the
	// segment and CSCD descriptors the parser takes (xcopy_parse.cc).
	put_desc(d, TPC_SUPPORTED_DESCRIPTORS, {2, XCOPY_SEG_B2B, XCOPY_CSCD_ID});

	// Supported CSCD Descriptor IDs: the IDs above 7FFh a segment may name (a null LU,
	// the copy manager itself, a ROD token): none; segments name CSCDs of their list.
	put_desc(d, TPC_SUPPORTED_CSCD_IDS, {0, 0});

	// General Copy Operations (body: 32 bytes): TOTAL CONCURRENT COPIES, MAXIMUM IDENTIFIED
	// CONCURRENT COPIES, MAXIMUM SEGMENT LENGTH (4 bytes each), DATA SEGMENT GRANULARITY and
	// INLINE DATA GRANULARITY (log2; 0: no inline data), 14 reserved.
	std::vector<uint8_t> gc(32, 0);
	put_be32(&gc[0], kXcopyMaxConcurrent);
	put_be32(&gc[4], kXcopyMaxConcurrent);
	put_be32(&gc[8], kXcopyMaxSegmentBytes);
	gc[12] = kXcopyDataSegmentGranularityLog2;
	put_desc(d, TPC_GENERAL_COPY_OPERATIONS, std::move(gc));
}

} // namespace ulp::scsi
