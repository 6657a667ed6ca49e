// SPDX-License-Identifier: MIT
// scsi/sbc_defect.cc - READ DEFECT DATA (10) and (12) (SBC-3 5.17, 5.18): the medium's
// defect lists.
//
// A logical unit here is a backstore, not a platter: it has no primary list of defects
// found at manufacture and no grown list of blocks reassigned since (a backstore's own
// errors come up as MEDIUM ERROR on the command that meets them, and nothing is ever
// reassigned). Both lists exist and are empty, so the device server returns whichever
// the initiator asks for (PLISTV and GLISTV as REQ_PLIST and REQ_GLIST), with no
// descriptors, in the format it asks for: an empty list is the same in every format, so
// there is never a reason to answer RECOVERED ERROR, DEFECT LIST NOT FOUND (the format
// mismatch case of SBC-3 5.17). Format 111b is reserved: INVALID FIELD IN CDB.
//
// Parameter data (SBC-3 tables "READ DEFECT DATA (10) parameter data" and "(12)"):
//   (10)  byte 1 PLISTV (4), GLISTV (3), DEFECT LIST FORMAT (2..0); bytes 2..3 DEFECT
//         LIST LENGTH (0)
//   (12)  byte 1 as above; bytes 2..3 GENERATION CODE (0: not reported); bytes 4..7
//         DEFECT LIST LENGTH (0)
// cut to the ALLOCATION LENGTH as usual (any length, 0 included, is valid).
#include "scsi/sbc_internal.h"

namespace ulp::scsi
{

namespace
{

enum : uint8_t {
	REQ_PLIST = 0x10,        // CDB byte 2 (10) or byte 1 (12)
	REQ_GLIST = 0x08,        //
	FORMAT_MASK = 0x07,      //
	FORMAT_RESERVED = 0x07,  // 111b
	PLISTV = REQ_PLIST,      // parameter data byte 1: the same bit positions
	GLISTV = REQ_GLIST,      //
	RDD10_BYTE2_RSVD = 0xe0, // byte 2 bits 7..5
	RDD12_BYTE1_RSVD = 0xe0, // byte 1 bits 7..5
};

void exec_read_defect_data(Cmd *cmd)
{
	const bool ten = cmd->cdb[0] == OP_READ_DEFECT_DATA_10;
	const uint8_t req = cmd->cdb[ten ? 2 : 1];
	uint8_t d[8] = {};
	d[1] = static_cast<uint8_t>(req & (PLISTV | GLISTV | FORMAT_MASK));
	// DEFECT LIST LENGTH: 0, bytes 2..3 or 4..7, already zero.
	complete_data_in(cmd, {d, ten ? size_t(4) : size_t(8)});
}

} // namespace

Sense sbc_parse_read_defect_data(Cmd *cmd)
{
	const uint8_t *c = cmd->cdb;
	const bool ten = c[0] == OP_READ_DEFECT_DATA_10;
	if (ten) {
		// SBC-3 5.17: byte 1 and bytes 3..6 are reserved.
		if (c[1])
			return invalid_cdb_field(cmd, 1);
		if (c[2] & RDD10_BYTE2_RSVD)
			return invalid_cdb_field(cmd, 2, 7);
		if ((c[2] & FORMAT_MASK) == FORMAT_RESERVED)
			return invalid_cdb_field(cmd, 2, 2);
		for (uint16_t i = 3; i <= 6; i++)
			if (c[i])
				return invalid_cdb_field(cmd, i);
		cmd->cdb_xfer = get_be16(c + 7);
	} else {
		// SBC-3 5.18: byte 1 holds the request; bytes 2..5 the ADDRESS DESCRIPTOR INDEX
		// (any index of an empty list returns no descriptors); byte 10 reserved.
		if (c[1] & RDD12_BYTE1_RSVD)
			return invalid_cdb_field(cmd, 1, 7);
		if ((c[1] & FORMAT_MASK) == FORMAT_RESERVED)
			return invalid_cdb_field(cmd, 1, 2);
		if (c[10])
			return invalid_cdb_field(cmd, 10);
		cmd->cdb_xfer = get_be32(c + 6);
	}
	cmd->cdb_dir = DataDir::Read;
	cmd->execute = exec_read_defect_data;
	return Sense::None;
}

} // namespace ulp::scsi
