// SPDX-License-Identifier: MIT
// scsi/types.cc - names for logs, and SAM-5 LUN addressing.
#include "scsi/types.h"

namespace ulp::scsi
{

const char *tmf_str(TmfType t)
{
	switch (t) {
	case TmfType::AbortTask:
		return "ABORT TASK";
	case TmfType::AbortTaskSet:
		return "ABORT TASK SET";
	case TmfType::ClearAca:
		return "CLEAR ACA";
	case TmfType::ClearTaskSet:
		return "CLEAR TASK SET";
	case TmfType::LunReset:
		return "LOGICAL UNIT RESET";
	case TmfType::ITNexusReset:
		return "I_T NEXUS RESET";
	case TmfType::QueryTask:
		return "QUERY TASK";
	case TmfType::QueryTaskSet:
		return "QUERY TASK SET";
	case TmfType::QueryAsyncEvent:
		return "QUERY ASYNCHRONOUS EVENT";
	case TmfType::TargetWarmReset:
		return "TARGET WARM RESET";
	case TmfType::TargetColdReset:
		return "TARGET COLD RESET";
	}
	return "?";
}

const char *tmf_response_str(TmfResponse r)
{
	switch (r) {
	case TmfResponse::Complete:
		return "FUNCTION COMPLETE";
	case TmfResponse::Succeeded:
		return "FUNCTION SUCCEEDED";
	case TmfResponse::TaskNotFound:
		return "TASK DOES NOT EXIST";
	case TmfResponse::LunNotFound:
		return "INCORRECT LOGICAL UNIT NUMBER";
	case TmfResponse::NotSupported:
		return "FUNCTION NOT SUPPORTED";
	case TmfResponse::Rejected:
		return "FUNCTION REJECTED";
	case TmfResponse::Failed:
		return "SERVICE DELIVERY OR TARGET FAILURE";
	}
	return "?";
}

// SAM-5 4.7.5: byte 0 bits 7..6 are the addressing method. Peripheral (00b) with bus 0
// names LUNs 0..255 in byte 1; flat (01b) names 0..16383 in bits 13..0 of bytes 0..1.
// Single-level only: bytes 2..7 must be zero, else the LUN is one we cannot have (its
// value is made unmatchable so that the lookup fails with LOGICAL UNIT NOT SUPPORTED).
uint64_t lun_from_wire(const uint8_t l[8])
{
	for (int i = 2; i < 8; i++)
		if (l[i])
			return UINT64_MAX;
	switch (l[0] >> 6) {
	case 0:
		return (l[0] & 0x3f) ? UINT64_MAX : l[1]; // bus number must be 0
	case 1:
		return uint64_t(l[0] & 0x3f) << 8 | l[1];
	default:
		return UINT64_MAX; // logical unit / extended addressing: not ours
	}
}

void lun_to_wire(uint64_t lun, uint8_t out[8])
{
	std::memset(out, 0, 8);
	if (lun < 256) {
		out[1] = static_cast<uint8_t>(lun);
	} else {
		out[0] = static_cast<uint8_t>(0x40 | ((lun >> 8) & 0x3f));
		out[1] = static_cast<uint8_t>(lun);
	}
}

} // namespace ulp::scsi
