// SPDX-License-Identifier: MIT
// scsi/sense.cc - sense reasons to status, sense key and ASC/ASCQ (SPC-4 4.5, annex D).
#include "scsi/sense.h"

#include <cstring>

namespace ulp::scsi
{

namespace
{

struct SenseInfo {
	const char *name;
	SenseKey key;
	uint16_t asc; // ASC << 8 | ASCQ
};

// Indexed by Sense. The kernel's sense_detail_table (target_core_transport.c) has the same
// choices where both exist.
constexpr SenseInfo kSense[] = {
    {"NO SENSE", SenseKey::NoSense, 0x0000},
    {"INVALID COMMAND OPERATION CODE", SenseKey::IllegalRequest, 0x2000},
    {"INVALID FIELD IN CDB", SenseKey::IllegalRequest, 0x2400},
    {"INVALID FIELD IN PARAMETER LIST", SenseKey::IllegalRequest, 0x2600},
    {"PARAMETER LIST LENGTH ERROR", SenseKey::IllegalRequest, 0x1a00},
    {"LOGICAL BLOCK ADDRESS OUT OF RANGE", SenseKey::IllegalRequest, 0x2100},
    {"LOGICAL UNIT NOT SUPPORTED", SenseKey::IllegalRequest, 0x2500},
    {"INVALID FIELD IN COMMAND INFORMATION UNIT", SenseKey::IllegalRequest, 0x0e03},
    {"SAVING PARAMETERS NOT SUPPORTED", SenseKey::IllegalRequest, 0x3900},
    {"PARAMETER VALUE INVALID", SenseKey::IllegalRequest, 0x2602},
    {"INSUFFICIENT REGISTRATION RESOURCES", SenseKey::IllegalRequest, 0x5504},
    {"INVALID RELEASE OF PERSISTENT RESERVATION", SenseKey::IllegalRequest, 0x2604},
    {"WRITE PROTECTED", SenseKey::DataProtect, 0x2700},
    {"UNRECOVERED READ ERROR", SenseKey::MediumError, 0x1100},
    {"WRITE ERROR", SenseKey::MediumError, 0x0c00},
    {"SPACE ALLOCATION FAILED WRITE PROTECT", SenseKey::DataProtect, 0x2707},
    {"MISCOMPARE DURING VERIFY OPERATION", SenseKey::Miscompare, 0x1d00},
    {"LOGICAL UNIT FAILURE", SenseKey::HardwareError, 0x3e01},
    {"INTERNAL TARGET FAILURE", SenseKey::HardwareError, 0x4400},
    {"INSUFFICIENT RESOURCES", SenseKey::AbortedCommand, 0x5503},
    {"DATA PHASE ERROR", SenseKey::AbortedCommand, 0x4b00},
    {"MEDIUM NOT PRESENT", SenseKey::NotReady, 0x3a00},
    {"MEDIUM REMOVAL PREVENTED", SenseKey::IllegalRequest, 0x5302},
    {"LOGICAL UNIT NOT ACCESSIBLE, ASYMMETRIC ACCESS STATE TRANSITION", SenseKey::NotReady, 0x040a},
    {"LOGICAL UNIT NOT ACCESSIBLE, TARGET PORT IN STANDBY STATE", SenseKey::NotReady, 0x040b},
    {"LOGICAL UNIT NOT ACCESSIBLE, TARGET PORT IN UNAVAILABLE STATE", SenseKey::NotReady, 0x040c},
    {"LOGICAL UNIT NOT READY, OFFLINE", SenseKey::NotReady, 0x0412},
    {"UNIT ATTENTION", SenseKey::UnitAttention, 0x0000},
    {"RESERVATION CONFLICT", SenseKey::NoSense, 0x0000},
    {"BUSY", SenseKey::NoSense, 0x0000},
    {"TASK SET FULL", SenseKey::NoSense, 0x0000},
};
static_assert(sizeof(kSense) / sizeof(kSense[0]) == size_t(Sense::TaskSetFull) + 1);

const SenseInfo &info(Sense s)
{
	return kSense[static_cast<size_t>(s)];
}

} // namespace

const char *sense_str(Sense s)
{
	return info(s).name;
}

Status sense_status(Sense s)
{
	switch (s) {
	case Sense::None:
		return Status::Good;
	case Sense::ReservationConflict:
		return Status::ReservationConflict;
	case Sense::Busy:
		return Status::Busy;
	case Sense::TaskSetFull:
		return Status::TaskSetFull;
	default:
		return Status::CheckCondition;
	}
}

SenseKey sense_key(Sense s)
{
	return info(s).key;
}

uint16_t sense_asc(Sense s)
{
	return info(s).asc;
}

uint8_t build_sense(Sense s, uint8_t *out, uint16_t asc_ascq, bool info_valid, uint32_t inf,
                    uint32_t sks)
{
	if (sense_status(s) != Status::CheckCondition)
		return 0;
	const uint16_t asc = s == Sense::UnitAttention ? asc_ascq : info(s).asc;
	// SPC-4 4.5.3 fixed format: response code 70h (current), VALID with INFORMATION,
	// ADDITIONAL SENSE LENGTH 10 (bytes 8..17).
	std::memset(out, 0, 18);
	out[0] = 0x70 | (info_valid ? 0x80 : 0);
	out[2] = static_cast<uint8_t>(info(s).key);
	if (info_valid) {
		out[3] = static_cast<uint8_t>(inf >> 24);
		out[4] = static_cast<uint8_t>(inf >> 16);
		out[5] = static_cast<uint8_t>(inf >> 8);
		out[6] = static_cast<uint8_t>(inf);
	}
	out[7] = 10;
	out[12] = static_cast<uint8_t>(asc >> 8);
	out[13] = static_cast<uint8_t>(asc);
	if (sks & 0x800000u) {
		out[15] = static_cast<uint8_t>(sks >> 16);
		out[16] = static_cast<uint8_t>(sks >> 8);
		out[17] = static_cast<uint8_t>(sks);
	}
	return 18;
}

} // namespace ulp::scsi
