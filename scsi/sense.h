// SPDX-License-Identifier: MIT
// scsi/sense.h - why a command failed, and the sense data that says so (SPC-4 4.5).
//
// Command code returns a Sense reason (the kernel's sense_reason_t, TCM_* codes); the
// core turns it into a status and, for CHECK CONDITION, fixed-format sense data with the
// key and additional sense code the table in sense.cc gives. Keeping the reasons in one
// table keeps every malformed CDB answered the same way everywhere.
#pragma once

#include "scsi/types.h"

#include <cstdint>

namespace ulp::scsi
{

// SPC-4 4.5.6 sense keys.
enum class SenseKey : uint8_t {
	NoSense = 0x0,
	RecoveredError = 0x1,
	NotReady = 0x2,
	MediumError = 0x3,
	HardwareError = 0x4,
	IllegalRequest = 0x5,
	UnitAttention = 0x6,
	DataProtect = 0x7,
	BlankCheck = 0x8,
	AbortedCommand = 0xb,
	Miscompare = 0xe,
};

enum class Sense : uint8_t {
	None,                    // success: GOOD
	UnsupportedOpcode,       // ILLEGAL REQUEST, 20/00 INVALID COMMAND OPERATION CODE
	InvalidCdbField,         // ILLEGAL REQUEST, 24/00 INVALID FIELD IN CDB
	InvalidParamListField,   // ILLEGAL REQUEST, 26/00 INVALID FIELD IN PARAMETER LIST
	ParamListLengthError,    // ILLEGAL REQUEST, 1A/00 PARAMETER LIST LENGTH ERROR
	LbaOutOfRange,           // ILLEGAL REQUEST, 21/00 LBA OUT OF RANGE
	LunNotSupported,         // ILLEGAL REQUEST, 25/00 LOGICAL UNIT NOT SUPPORTED
	InvalidFieldInCommandIu, // ILLEGAL REQUEST, 0E/03 INVALID FIELD IN COMMAND INFORMATION UNIT
	SavingParamsUnsupported, // ILLEGAL REQUEST, 39/00 SAVING PARAMETERS NOT SUPPORTED
	ParamValueInvalid,       // ILLEGAL REQUEST, 26/02 PARAMETER VALUE INVALID
	InsufficientRegResources, // ILLEGAL REQUEST, 55/04 INSUFFICIENT REGISTRATION RESOURCES
	InvalidReleaseOfPr,       // ILLEGAL REQUEST, 26/04 (PR OUT RELEASE of another type)
	WriteProtected,           // DATA PROTECT, 27/00 WRITE PROTECTED
	ReadError,                // MEDIUM ERROR, 11/00 UNRECOVERED READ ERROR
	WriteError,               // MEDIUM ERROR, 0C/00 WRITE ERROR
	SpaceAllocationFailed,    // DATA PROTECT, 27/07 SPACE ALLOCATION FAILED WRITE PROTECT
	Miscompare,               // MISCOMPARE, 1D/00 MISCOMPARE DURING VERIFY OPERATION
	LogicalUnitFailure,       // HARDWARE ERROR, 3E/01 LOGICAL UNIT FAILURE
	InternalTargetFailure,    // HARDWARE ERROR, 44/00 INTERNAL TARGET FAILURE
	InsufficientResources,    // ABORTED COMMAND, 55/03 INSUFFICIENT RESOURCES
	DataPhaseError,           // ABORTED COMMAND, 4B/00 DATA PHASE ERROR (data-out failed)
	MediumNotPresent,         // NOT READY, 3A/00 MEDIUM NOT PRESENT
	MediumRemovalPrevented,   // ILLEGAL REQUEST, 53/02 MEDIUM REMOVAL PREVENTED
	// SPC-4 5.15.2.4: the target port's asymmetric access state refuses the command.
	AluaTransitioning,   // NOT READY, 04/0A ... ASYMMETRIC ACCESS STATE TRANSITION
	AluaStandby,         // NOT READY, 04/0B ... TARGET PORT IN STANDBY STATE
	AluaUnavailable,     // NOT READY, 04/0C ... TARGET PORT IN UNAVAILABLE STATE
	AluaOffline,         // NOT READY, 04/12 LOGICAL UNIT NOT READY, OFFLINE
	UnitAttention,       // UNIT ATTENTION; ASC/ASCQ from the pending condition
	ReservationConflict, // RESERVATION CONFLICT status, no sense data
	Busy,                // BUSY status, no sense data
	TaskSetFull,         // TASK SET FULL status, no sense data
};

const char *sense_str(Sense s);

// The status a reason completes with: GOOD for None, RESERVATION CONFLICT, BUSY and
// TASK SET FULL as themselves, CHECK CONDITION for the rest.
Status sense_status(Sense s);

// Fixed-format sense data (SPC-4 4.5.3, response code 0x70) for reason s into out (at
// least 18 bytes); asc_ascq overrides the table for UnitAttention (high byte ASC, low
// ASCQ). info, when info_valid, fills the INFORMATION field (the first miscompared byte,
// SBC-3 5.3). sks, when it has SKSV (bit 23) set, fills the SENSE KEY SPECIFIC bytes 15..17
// (SPC-4 4.5.2.4; sense_field_pointer builds it). Returns the sense length (18), or 0 for
// reasons without sense data.
uint8_t build_sense(Sense s, uint8_t *out, uint16_t asc_ascq = 0, bool info_valid = false,
                    uint32_t info = 0, uint32_t sks = 0);

// SPC-4 4.5.2.4.2 field pointer sense key specific data, as the 24 bits of bytes 15..17:
// SKSV, C/D (1: the CDB, 0: the parameter list), BPV with BIT POINTER when bit is 0..7, and
// the FIELD POINTER (the byte that is in error). Initiators tell a service action the
// device server does not implement (the field pointer at its byte) from a bad field of one
// it does by it; libiscsi's conformance suite does.
constexpr uint32_t sense_field_pointer(bool cdb, uint16_t byte, int bit = -1)
{
	uint32_t v = 0x800000u | (cdb ? 0x400000u : 0) | byte;
	if (bit >= 0 && bit <= 7)
		v |= 0x080000u | uint32_t(bit) << 16;
	return v;
}

// Just the key and ASC/ASCQ of a reason (REQUEST SENSE, tests).
SenseKey sense_key(Sense s);
uint16_t sense_asc(Sense s);

// Unit attention conditions the core raises (SPC-4 table, ASC << 8 | ASCQ).
enum : uint16_t {
	UA_POWER_ON = 0x2900,            // POWER ON, RESET, OR BUS DEVICE RESET OCCURRED
	UA_BUS_DEVICE_RESET = 0x2903,    // BUS DEVICE RESET FUNCTION OCCURRED (LUN RESET)
	UA_I_T_NEXUS_LOSS = 0x2907,      // I_T NEXUS LOSS OCCURRED
	UA_MODE_PARAMS_CHANGED = 0x2a01, // MODE PARAMETERS CHANGED
	UA_RESERVATIONS_PREEMPTED = 0x2a03,
	UA_RESERVATIONS_RELEASED = 0x2a04,
	UA_REGISTRATIONS_PREEMPTED = 0x2a05,
	UA_ASYMMETRIC_ACCESS_CHANGED = 0x2a06, // ASYMMETRIC ACCESS STATE CHANGED (SPC-4 5.15.2)
	UA_CAPACITY_CHANGED = 0x2a09,
	UA_COMMANDS_CLEARED = 0x2f00,     // COMMANDS CLEARED BY ANOTHER INITIATOR
	UA_TP_SOFT_THRESHOLD = 0x3807,    // THIN PROVISIONING SOFT THRESHOLD REACHED (SBC-3)
	UA_INQUIRY_DATA_CHANGED = 0x3f03, // INQUIRY DATA HAS CHANGED (SPC-4 6.6.1)
	UA_REPORTED_LUNS_CHANGED = 0x3f0e,
};

} // namespace ulp::scsi
