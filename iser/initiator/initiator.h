// SPDX-License-Identifier: MIT
// iser/initiator/initiator.h - the initiator's iSER transport (RFC 7145; Linux's ib_iser):
// iSCSI PDUs in SEND messages behind the iSER header, SCSI data moved by the target with
// RDMA READ and WRITE into buffers this side registers per command.
//
// One transport is one RDMA/CM connection with its own PD, CQ and QP. Per command with
// data for the target to move (map_data, before its SCSI Command PDU goes out; a write
// whose data all goes as immediate data and unsolicited Data-Out has none, and the session
// does not call it: no STag, WSV 0):
//   - the data buffer gets a fast-registration MR from the connection's pool: REG_MR with
//     a fresh key, chained before the SEND of the command, so the STag is valid when the
//     target sees it (on rdma-core devices the core carries REG_MR by a type-2 memory
//     window bound inside the buffer's region);
//   - the iSER header names it: read STag + VA for a READ (the target RDMA WRITEs there),
//     write STag + VA for a WRITE, the VA advanced past the immediate and unsolicited data
//     already sent (what Linux's isert expects and does itself);
//   - a buffer outside the regions the caller registered (InitiatorConfig::regions) is
//     bounced through a registered heap: copied in for a WRITE, out for a READ. Correct,
//     slower; counted in InitiatorStats::bounced so a benchmark can show none.
// When the command ends (unmap_data), its STag must be dead before the buffer goes back
// to the caller: either the target invalidated it with the SEND_WITH_INV that carried the
// response (checked: the invalidated key must be that command's, or the connection fails
// as Linux's iser_check_remote_inv does), or this side posts LOCAL_INV and releases the
// command only when it has completed. The kernel initiator defers that LOCAL_INV to the
// MR's next use, leaving the buffer open to a late write after completion; here it is not.
//
// Queue depth by send-queue math: a command takes at most three send WRs (REG_MR, SEND,
// LOCAL_INV) and one receive (its response). The send queue holds queue_depth * 3 plus
// room for control PDUs (NOP-Out, TMF, Text, Logout) and the drain marker; the receive
// queue queue_depth plus the unexpected PDUs a target may send (NOP-In, Async, Reject).
// The MR pool has queue_depth MRs, so can_map() is the session's bound on commands with
// data in flight; sends beyond the queue's room wait in order in a backlog.
//
// Threading: none of its own beyond the provider's CM thread, whose events are handed to
// the session's thread through an eventfd. poll() sleeps on the CQ's completion channel
// and that eventfd together.
#pragma once

#include "iscsi/initiator/transport.h"

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace ulp
{
class Provider;
}

namespace ulp::iser
{

// Counters, for tests and benchmarks (written by the session's thread).
struct InitiatorStats {
	uint64_t mapped = 0;     // commands with data registered (REG_MR)
	uint64_t bounced = 0;    // of them, through the bounce heap (unregistered buffer)
	uint64_t remote_inv = 0; // STags the target invalidated (SEND_WITH_INV)
	uint64_t local_inv = 0;  // STags invalidated here (LOCAL_INV)
	uint64_t backlogged = 0; // sends that waited for send-queue room
	uint64_t sends = 0;      // PDUs sent
	uint64_t recvs = 0;      // PDUs received
};

struct InitiatorConfig {
	Provider *provider = nullptr;   // the fabric: the soft provider or the verbs one
	std::string src_ip;             // bind the connection to this address ("" = any)
	uint32_t queue_depth = 128;     // commands with data in flight at most
	uint32_t recv_dsl = 8192;       // our InitiatorRecvDataSegmentLength (receive room)
	uint32_t send_dsl = 8192;       // what we offer as TargetRecvDataSegmentLength: the
	                                // send buffers' room for immediate data
	uint32_t max_io = 1u << 20;     // largest command buffer, bytes (one MR's pages)
	size_t bounce_bytes = 8u << 20; // registered heap for unregistered buffers, bytes
	std::vector<std::span<uint8_t>> regions; // the caller's buffers: registered once at
	                                         // connect, their commands go zero-copy
	bool allow_remote_inv = true;            // tell the target it may SEND_WITH_INV our STags
	// RDMA READs of our buffers the target may have in flight at once (rdma_cm
	// responder_resources; capped by the device). 0 grants none: the target can then fetch
	// no write data beyond the immediate data (libiscsi offers 4, Linux the device's max).
	uint8_t read_credit = 16;
	std::chrono::milliseconds drain_timeout{5000}; // teardown's bound per queue
	InitiatorStats *stats = nullptr;               // optional counters
};

// A transport factory for Session (each call makes a new, unconnected transport).
std::unique_ptr<iscsi::initiator::InitiatorTransport> make_transport(const InitiatorConfig &cfg);

} // namespace ulp::iser
