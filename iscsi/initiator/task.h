// SPDX-License-Identifier: MIT
// iscsi/initiator/task.h - one task slot of an initiator session (private to the session's
// .cc files): a SCSI command with its data-transfer state, a TMF, a ping, a text exchange,
// the logout, or a CmdSN gap filler. A slot's ITT is its generation << 16 | its index.
//
// Life of a slot: Free -> (alloc_task) in use, not sent -> sent -> finished (outcome
// decided) -> delivered once no PDU of it is with the transport (the callback runs from
// poll()) -> Free. A finished task waits for its PDUs at most cmd_timeout: a transport
// that keeps one longer (a send completion lost) has its connection failed, and a closed
// transport gives back every PDU lent to it.
#pragma once

#include "iscsi/initiator/session.h"

namespace ulp::iscsi::initiator
{

constexpr uint32_t kSlotBits = 16;                    // ITT = generation << 16 | slot
constexpr uint32_t kMaxSlots = (1u << kSlotBits) - 1; // slot 0xffff never exists: no ITT
                                                      // can be the reserved 0xffffffff

// SAM-5 4.7: LUNs below 256 in peripheral device addressing, below 16384 flat.
constexpr uint64_t lun_field(uint64_t lun)
{
	if (lun < 256)
		return lun << 48;
	return (uint64_t{0x40} | ((lun >> 8) & 0x3f)) << 56 | (lun & 0xff) << 48;
}

struct Session::Task {
	Kind kind = Kind::Free;   // what the slot holds (Free: on the free list)
	uint32_t slot = 0;        // index in tasks_
	uint16_t gen = 0;         // bumped at every allocation (ITT high half)
	bool user = false;        // counted in in_flight_ (the owner gets a callback)
	bool sent = false;        // its request PDU is queued with the transport
	bool finished = false;    // outcome decided; delivered once tx_refs is 0
	bool queued_done = false; // in done_
	uint32_t tx_refs = 0;     // its PDUs lent to the transport, + 1 while mapped
	bool mapped = false;      // its data is registered with the transport (iSER)
	std::chrono::steady_clock::time_point start;       // submitted (timeouts, ping RTT)
	std::chrono::steady_clock::time_point finished_at; // outcome decided (the bound on
	                                                   // the wait for tx_refs)
	uint32_t cmdsn = 0;                                // CmdSN it went out with
	uint64_t seq = 0;                                  // send order (TMF scope)
	uint64_t lun = 0;                                  // LUN number

	// SCSI command
	std::array<uint8_t, 260> cdb{};   // the CDB (cdb_len bytes)
	uint16_t cdb_len = 0;             // 1..260
	DataDir dir = DataDir::None;      // what data moves
	std::span<uint8_t> data;          // the caller's buffer
	TaskAttr attr = TaskAttr::Simple; // ATTR of the SCSI Command
	uint32_t unsol_len = 0;   // immediate + unsolicited bytes sent (<= FirstBurstLength)
	uint32_t solicited = 0;   // bytes sent for R2Ts
	uint32_t r2tsn_next = 0;  // R2TSN the next R2T must carry
	uint32_t r2ts_open = 0;   // R2Ts whose data is not all written yet
	uint32_t datasn_next = 0; // DataSN the next Data-In must carry
	uint32_t in_bytes = 0;    // Data-In bytes received (in order)
	ScsiDone done;            // the owner's callback
	ScsiResult result;        // filled as the answer arrives

	// TMF
	TmfFunction fn = TmfFunction::AbortTask; // the function
	uint32_t ref_itt = kReservedTag;         // Referenced Task Tag (ABORT/QUERY TASK)
	TmfDone tmf_done;                        // the owner's callback
	TmfResult tmf_result;                    // the target's response

	// Ping
	std::vector<uint8_t> ping_data; // sent, to compare with the echo
	PingDone ping_done;             // the owner's callback (empty: keepalive)
	PingResult ping_result;         // round trip, echo check

	// Text
	std::string text_value;             // SendTargets=value
	uint32_t text_ttt = kReservedTag;   // continuation TTT of the next request
	TextAssembler text_in{kMaxLtdsLen}; // the response text so far
	bool text_ok = false;               // the last piece (F=1) arrived

	TaskOutcome outcome = TaskOutcome::Completed; // set when finished
};

} // namespace ulp::iscsi::initiator
