// SPDX-License-Identifier: MIT
// scsi/spc_vpd_ext.cc - the Extended INQUIRY Data VPD page (86h, SPC-4 7.8.7), which
// VMware and Windows read to learn which task attributes, caches and unit attention rules
// the device server has. Every bit says what the core does, and where it does it.
#include "scsi/spc.h"

namespace ulp::scsi
{

void put_ext_inquiry(const LogicalUnit &lu, std::vector<uint8_t> &d)
{
	d.resize(64, 0); // PAGE LENGTH 003Ch
	// Byte 4: ACTIVATE MICROCODE 00b (no microcode), SPT 000b and GRD_CHK, APP_CHK,
	// REF_CHK 0: no protection information (standard INQUIRY PROTECT 0).
	// Byte 5: UASK_SUP 0 (no sense key specific data in unit attentions), GROUP_SUP 0 (no
	// grouping function), PRIOR_SUP 0 (command priority is ignored); HEADSUP, ORDSUP and
	// SIMPSUP 1: core.cc orders HEAD OF QUEUE, ORDERED and SIMPLE commands as SAM-5 8.6
	// asks (ACA is refused: NORMACA 0).
	d[5] = 0x04 | 0x02 | 0x01;
	// Byte 6: WU_SUP and CRD_SUP 0 (no WRITE LONG), NV_SUP 0 (no non-volatile cache),
	// V_SUP 1 when the backstore has a volatile cache: SYNCHRONIZE CACHE and FUA flush it
	// (the caching mode page's WCE, sbc.cc).
	if (lu.bs().write_cache())
		d[6] = 0x01;
	// Byte 7: P_I_I_SUP 0; LUICLR 1 (SPC-4 requires it): REPORTED LUNS DATA HAS CHANGED,
	// once reported on one LU, is cleared on every LU of that I_T nexus (ua.cc, and REPORT
	// LUNS in spc.cc).
	d[7] = 0x01;
	// Byte 8: R_SUP 0 (no referrals), CBCS 0. Byte 9: no microcode download. Bytes
	// 10..11: no extended self-test (SEND DIAGNOSTIC runs only the default one). Byte 12:
	// POA_SUP, HRA_SUP, VSA_SUP 0 (no power on activation, no hard reset activation).
	// Byte 13: MAXIMUM SUPPORTED SENSE DATA LENGTH: the fixed format sense build_sense
	// returns with the status, 18 bytes.
	d[13] = 18;
}

} // namespace ulp::scsi
