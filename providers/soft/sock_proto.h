// SPDX-License-Identifier: MIT
// providers/soft/sock_proto.h - the socket wire's packet format (sock_wire.cc speaks it;
// the hostile-peer tests and the fuzzer speak it by hand). Peers are on one host, so
// fields are in host byte order; the layout is fixed by the static_asserts.
#pragma once

#include "core/cm.h"

#include <cstddef>
#include <cstdint>

namespace ulp::soft
{

enum class PktOp : uint8_t {
	CmReq = 1,
	CmRep,
	CmRej,
	Disconnect,
	Region,
	Send,
	SendImm,
	SendInv,
	Write,
	WriteImm,
	ReadReq,
	ReadResp,
	Ack,
	Nak,
	// A requester whose QP entered ERR: execute none of my requests after this one.
	// The responder answers ErrAck once every request before it is done (it serves in
	// order), and the requester flushes its WRs only then: until that, the responder
	// may still copy out of (or READ data into) the requester's shared regions.
	Err,
	ErrAck,
	Max,
};

enum : uint8_t {
	kPktSolicited = 1 << 0, // requests: solicited event at the responder
	kPktShm = 1 << 1,       // payload is in a shared region (shm_id, shm_off), not inline
};

enum class NakCode : uint8_t { Rnr = 1, InvReq, Access, Op, Gone };

struct PktHdr {
	uint8_t op;        // PktOp
	uint8_t flags;     // kPkt*
	uint8_t nak;       // Nak: NakCode
	uint8_t rnr_timer; // Nak Rnr: the responder's min_rnr_timer (IB encoding)
	uint32_t psn;      // request sequence number (replies echo it)
	uint32_t len;      // message bytes (for CM packets: the CmMsg size)
	uint32_t rkey;     // Write*, ReadReq
	uint64_t va;       // Write*, ReadReq; Region: the region's length
	uint32_t imm;      // SendImm / WriteImm immediate, SendInv rkey
	uint32_t pad;
	uint64_t shm_id;  // kPktShm: requests: source region; ReadReq: sink region; Region: id
	uint64_t shm_off; // kPktShm: offset in that region
};
static_assert(sizeof(PktHdr) == 48);

// CM message body (CmReq / CmRep / CmRej).
struct CmMsg {
	uint32_t qpn;
	uint8_t gid[16];
	uint8_t responder_resources;
	uint8_t initiator_depth;
	uint8_t retry_count;
	uint8_t rnr_retry_count;
	uint8_t private_data_len;
	uint8_t src_port[2]; // CmReq: the requester's CM port, big-endian (its address is
	                     // in gid, IPv4-mapped): the listener's new id reports it as
	                     // the peer address, as rdma_cm does
	uint8_t wire;        // CmReq: 1 asks for the ring wire (shm_ring.h): the requester's link
	                     // region (memfd) and doorbell (eventfd) ride along with SCM_RIGHTS;
	                     // CmRep: 1 grants it, with the listener's two; 0: the packet wire
	uint8_t private_data[ConnParam::kMaxPrivateData];
};

constexpr uint32_t kMaxInlinePayload = 64u << 20; // larger messages need shared memory
constexpr uint64_t kShmMin = 8192;                // below this, inline is as cheap
constexpr size_t kTxHigh = 8u << 20;              // requester stalls above this backlog
constexpr int kCmTimeoutMs = 2000;                // CM message waits
constexpr size_t kMaxPendingFds = 4;              // passed fds not yet claimed by a Region
constexpr size_t kMaxRegions = 64;                // peer regions mapped per connection
constexpr size_t kTxHardMax = 256u << 20;         // backlog beyond this: the peer is not reading

inline bool is_request(PktOp op)
{
	return op >= PktOp::Send && op <= PktOp::ReadReq;
}

// Inline payload bytes that follow a header; ~0u for a malformed header.
inline uint32_t payload_len(const PktHdr &h)
{
	switch (static_cast<PktOp>(h.op)) {
	case PktOp::CmReq:
	case PktOp::CmRep:
	case PktOp::CmRej:
		return h.len <= sizeof(CmMsg) ? h.len : ~0u;
	case PktOp::Send:
	case PktOp::SendImm:
	case PktOp::SendInv:
	case PktOp::Write:
	case PktOp::WriteImm:
	case PktOp::ReadResp:
		if (h.flags & kPktShm)
			return 0;
		return h.len <= kMaxInlinePayload ? h.len : ~0u;
	case PktOp::Disconnect:
	case PktOp::Region:
	case PktOp::ReadReq:
	case PktOp::Ack:
	case PktOp::Nak:
	case PktOp::Err:
	case PktOp::ErrAck:
		return 0;
	default:
		return ~0u;
	}
}

} // namespace ulp::soft
