// SPDX-License-Identifier: MIT
// scsi/types.h - the SCSI vocabulary the target core and its fabrics share: status codes,
// data directions, task attributes, task management functions, and big-endian field
// access for CDBs and parameter data.
//
// Names follow SAM-5 / SPC-4 and the kernel's target core (include/target/target_core_base.h)
// so that a reader of drivers/target finds their way. No RDMA knowledge here or anywhere
// in scsi/: the same core serves iSCSI over TCP.
#pragma once

#include "core/byteorder.h"

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

namespace ulp::scsi
{

// SAM-5 5.3 status codes.
enum class Status : uint8_t {
	Good = 0x00,
	CheckCondition = 0x02,
	ConditionMet = 0x04,
	Busy = 0x08,
	ReservationConflict = 0x18,
	TaskSetFull = 0x28,
	AcaActive = 0x30,
	TaskAborted = 0x40,
};

// Direction of a command's data as the transport announced it (iSCSI W/R bits, SRP
// descriptor formats). The core checks it against what the CDB implies.
enum class DataDir : uint8_t {
	None,
	Write, // data-out: initiator -> target (DMA_TO_DEVICE)
	Read,  // data-in: target -> initiator (DMA_FROM_DEVICE)
};

// SAM-5 8.6 task attributes (iSCSI ATTR field values 1, 2, 3, 4 map onto these; 0 is
// "untagged", handled as SIMPLE as RFC 7143 11.3.1.2 allows).
enum class TaskAttr : uint8_t {
	Simple,
	Ordered,
	HeadOfQueue,
	Aca,
};

// SAM-5 7 task management functions.
enum class TmfType : uint8_t {
	AbortTask,
	AbortTaskSet,
	ClearAca,
	ClearTaskSet,
	LunReset,
	ITNexusReset,
	QueryTask,
	QueryTaskSet,
	QueryAsyncEvent,
	TargetWarmReset, // every LU the nexus sees reset as by LOGICAL UNIT RESET (tmr.cc)
	TargetColdReset, // the same as a power on; the fabric then drops the target's
	                 // sessions (RFC 7143 11.5.1)
};

const char *tmf_str(TmfType t);

// SAM-5 7.12 service responses of a task management function, as the fabrics map them
// (iSCSI TMF response codes, SRP RSP_CODE).
enum class TmfResponse : uint8_t {
	Complete,     // FUNCTION COMPLETE
	Succeeded,    // FUNCTION SUCCEEDED (QUERY TASK: the task exists)
	TaskNotFound, // iSCSI "Task does not exist" (ABORT TASK of an unknown tag)
	LunNotFound,  // INCORRECT LOGICAL UNIT NUMBER
	NotSupported, // SERVICE DELIVERY OR TARGET FAILURE / function not supported
	Rejected,     // FUNCTION REJECTED
	Failed,       // SERVICE DELIVERY OR TARGET FAILURE
};

const char *tmf_response_str(TmfResponse r);

// Residual of a command's data transfer, SAM-5 5.4.2 (iSCSI O/U bits, SRP DIOVER/DIUNDER).
enum class Residual : uint8_t {
	None,
	Underflow, // the command moved fewer bytes than the transport's expected length
	Overflow,  // the command wanted more than the expected length; the extra was not moved
};

// Largest CDB the core accepts (a 32-byte variable-length CDB).
inline constexpr size_t kMaxCdb = 32;
// Sense buffer size (the kernel's TRANSPORT_SENSE_BUFFER).
inline constexpr size_t kSenseSize = 96;

// SAM-5 4.7 single-level LUN addressing <-> the 8-byte LUN field (the kernel's
// int_to_scsilun / scsilun_to_int): LUNs below 256 use peripheral addressing, up to 16383
// flat addressing.
uint64_t lun_from_wire(const uint8_t lun[8]);
void lun_to_wire(uint64_t lun, uint8_t out[8]);

} // namespace ulp::scsi
