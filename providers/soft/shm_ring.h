// SPDX-License-Identifier: MIT
// providers/soft/shm_ring.h - the ring wire's shared-memory layout (shm_wire.cc speaks it;
// the hostile-peer tests and the fuzzer speak it by hand).
//
// Each end of a connection owns one "link" region: a sealed memfd it alone writes, which
// the peer maps read-only. It holds, after a header:
//
//   req[kRingSlots]  the requests this end sends (a single-producer single-consumer ring:
//                    this end produces, the peer's engine consumes);
//   rsp[kRingSlots]  this end's answers to the peer's requests, rsp[i % kRingSlots] for the
//                    peer's request i (the peer reads them).
//
// and in the header the indices and counters that publish them. Like a NIC's queues, the
// descriptors name memory; the payload travels inline in the slot when it is small, or
// stays in a memory region the requester has passed to the peer (a Region packet on the
// socket, as on the packet wire) and the responder's engine copies it from there, or
// places READ data there, under its own rkey checks.
//
// Doorbells: each end passes the peer an eventfd (at the handshake) that the peer writes
// after publishing, but only while the owner sleeps (RingHdr::sleep, as virtio's
// NO_NOTIFY): spinning engines never make a system call per message.
//
// Protocol (the requester is one end, the responder the other; each end is both):
//   1. The requester writes req[n % kRingSlots] with seq n and publishes req_prod = n + 1.
//      It reuses a slot only after it has read the answer to the request that held it.
//   2. The responder copies the descriptor out, checks it (seq, opcode, flags, lengths,
//      the region and range it names), executes it with the responder rules of
//      exec.cc, writes rsp[n % kRingSlots] and publishes done = n + 1. One done covers
//      every request below it (coalesced ACKs).
//   3. RNR: the responder writes rsp[n] with status Rnr and its RNR timer, publishes done
//      = n and then rnr_naks + 1, and holds: request n and everything after it wait in the
//      ring. The requester counts the NAK against its retry budget (IB spec 9.7.5.2.8)
//      and, when the RNR timer has passed, publishes rnr_retries + 1 (= the peer's
//      rnr_naks); the responder then executes request n again. No request is sent twice:
//      the ring holds them.
//   4. A requester whose QP enters ERR publishes err; the responder stops executing its
//      requests (the memory they name may be reused once flushed) and publishes err_ack
//      (IB: a QP in ERR accepts no more responses). While any request is unanswered the
//      requester flushes its WRs only after err_ack (or the peer's death, or 1 s): the
//      responder copies out of and into the requester's regions as it executes.
// Everything the peer writes is untrusted: an index out of range, a descriptor or an
// answer that does not fit, counters that jump, all end the connection (protocol error)
// and never reach memory outside a registered region.
//
// Peers are on one host and one build: host byte order, layout fixed by the
// static_asserts, kRingMagic/kRingVersion checked at the handshake.
#pragma once

#include "core/sanitizer.h"

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace ulp::soft
{

constexpr uint32_t kRingMagic = 0x52504c55; // "ULPR"
constexpr uint32_t kRingVersion = 1;
constexpr uint32_t kRingSlots = 1024; // requests in flight per direction (a power of two)
constexpr uint32_t kRingInline = 80;  // payload bytes a request slot carries itself

enum class RingOp : uint8_t {
	Send = 1,
	SendImm,
	SendInv,
	Write,
	WriteImm,
	Read,
	Max,
};

enum : uint8_t {
	kRingSolicited = 1 << 0,  // solicited event at the responder
	kRingInlineData = 1 << 1, // the payload is in the slot's data[] (len <= kRingInline)
	kRingRegion = 1 << 2,     // the payload (READ: the sink) is at (region, off)
	kRingFlagsMask = 0x7,
};

// One request, 128 bytes.
struct RingReq {
	uint32_t seq;  // request index: the responder expects exactly its next one
	uint8_t op;    // RingOp
	uint8_t flags; // kRing*: at most one of kRingInlineData / kRingRegion; neither
	               // when len is 0
	uint16_t pad0;
	uint32_t len;  // message bytes (READ: bytes to read)
	uint32_t rkey; // Write*, Read
	uint64_t va;   // Write*, Read
	uint32_t imm;  // SendImm / WriteImm immediate, SendInv: the rkey to invalidate
	uint32_t pad1;
	uint64_t region; // kRingRegion: a region the requester has passed (its DmaRegion id)
	uint64_t off;    // kRingRegion: offset in that region
	uint8_t data[kRingInline]; // kRingInlineData: the payload
};
static_assert(sizeof(RingReq) == 128);

enum class RingStatus : uint8_t {
	Ack = 1, // done; READ data is in the sink
	Rnr,     // receiver not ready: see the protocol, step 3
	InvReq,  // NAK invalid request (REM_INV_REQ_ERR at the requester)
	Access,  // NAK remote access error (REM_ACCESS_ERR)
	Op,      // NAK remote operation error (REM_OP_ERR)
	Gone,    // the responder's QP takes no requests (transport retries exhausted)
	Max,
};

// One answer, 16 bytes.
struct RingRsp {
	uint32_t seq;      // the request it answers
	uint8_t status;    // RingStatus
	uint8_t rnr_timer; // Rnr: the responder's min_rnr_timer (IB encoding)
	uint16_t pad;
	uint32_t len; // Read, Ack: bytes placed in the sink (= the request's len)
	uint32_t pad1;
};
static_assert(sizeof(RingRsp) == 16);

// The header's dynamic fields share one cache line: one end writes them all, the peer's
// engine polls them, and one miss brings every change.
struct RingHdr {
	uint32_t magic;   // kRingMagic
	uint32_t version; // kRingVersion
	uint32_t slots;   // kRingSlots
	uint32_t inl;     // kRingInline
	uint8_t pad0[48];
	alignas(64) uint32_t req_prod; // requests published: req[i] valid for i < req_prod
	uint32_t done;                 // the peer's requests answered: rsp[i] valid for i < done
	uint32_t rnr_naks;             // RNR NAKs sent (the latest is rsp[done])
	uint32_t rnr_retries;          // RNR-NAKed requests of ours to execute again
	uint32_t sleep;   // 0 while this end's engine runs; else the number of its sleep
	                  // (odd and even alike): write its eventfd after publishing
	uint32_t err;     // this end's QP is in ERR: execute no more of its requests
	uint32_t err_ack; // the peer's err seen: none of its requests executes any more
	uint8_t pad1[36];
};
static_assert(sizeof(RingHdr) == 128);
static_assert(offsetof(RingHdr, req_prod) == 64);

// The link region: header, request ring, answer ring.
constexpr size_t kRingReqOff = sizeof(RingHdr);
constexpr size_t kRingRspOff = kRingReqOff + sizeof(RingReq) * kRingSlots;
constexpr size_t kRingBytes = kRingRspOff + sizeof(RingRsp) * kRingSlots;

inline RingHdr *ring_hdr(void *base)
{
	return static_cast<RingHdr *>(base);
}
inline RingReq *ring_req(void *base)
{
	return reinterpret_cast<RingReq *>(static_cast<uint8_t *>(base) + kRingReqOff);
}
inline RingRsp *ring_rsp(void *base)
{
	return reinterpret_cast<RingRsp *>(static_cast<uint8_t *>(base) + kRingRspOff);
}

// The header's counters are read and written as atomics (the other end is another
// process; std::atomic_ref on the mapped memory). Sequentially consistent: a publish
// followed by a look at the peer's sleep, against a sleep followed by a look at the
// peer's counters, is Dekker's pattern, and one of the two must see the other's store.
// On x86 that costs an xchg per store (once per batch) and nothing per load.
inline uint32_t ring_load(const uint32_t &f)
{
	return std::atomic_ref<uint32_t>(const_cast<uint32_t &>(f)).load(std::memory_order_seq_cst);
}
inline void ring_store(uint32_t &f, uint32_t v)
{
	std::atomic_ref<uint32_t>(f).store(v, std::memory_order_seq_cst);
}

// ThreadSanitizer cannot see that two mappings of one memfd are the same memory: a store
// through ours and a load through the peer's are no release and acquire to it, and the
// copies they order look like races. In TSan builds every link region gets a
// synchronisation object that both ends find by the memfd's inode (ring_sync), released
// before each store and acquired after each load. Elsewhere these cost nothing.
#if ULP_TSAN
extern "C" void __tsan_acquire(void *addr);
extern "C" void __tsan_release(void *addr);
#endif

inline char ring_sync_objs[256];
inline void *ring_sync(uint64_t inode)
{
	return &ring_sync_objs[inode % sizeof(ring_sync_objs)];
}
inline void ring_release([[maybe_unused]] void *sync)
{
#if ULP_TSAN
	if (sync)
		__tsan_release(sync);
#endif
}
inline void ring_acquire([[maybe_unused]] void *sync)
{
#if ULP_TSAN
	if (sync)
		__tsan_acquire(sync);
#endif
}

} // namespace ulp::soft
