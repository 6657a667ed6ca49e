// SPDX-License-Identifier: MIT
// providers/soft/shm_link.h - one connection's ring-wire state: our link region and the
// peer's (shm_ring.h), the doorbells both ways, the progress of each ring, and the
// staging area for payloads that are not in memory the peer can map.
//
// Everything here belongs to the engine thread that runs the connection's QP, except
// the fds, which the CM passes at the handshake before the engine sees the connection.
#pragma once

#include "core/dma_mem.h"
#include "providers/soft/shm_ring.h"
#include "providers/soft/soft_internal.h"

#include <memory>
#include <string>

namespace ulp::soft
{

// A byte ring in a shared region, for payloads whose memory the peer cannot map (plain
// heap buffers): the requester copies them here and names (region, offset). Space is
// taken in request order and given back in completion order, which is the same order.
struct Stage {
	std::unique_ptr<DmaRegion> r; // created at the first use
	bool announced = false;       // passed to the peer
	uint64_t head = 0;            // bytes ever taken (monotonic)
	uint64_t tail = 0;            // bytes ever given back

	// Take n bytes (contiguous; skipping the ring's end if needed). false when the ring
	// lacks the room now. *off: offset in r, *end: the head to give back to.
	bool take(uint64_t n, uint64_t *off, uint64_t *end);
	void give_back(uint64_t end) { tail = end; }
	bool idle() const { return head == tail; }
};

class ShmLink
{
public:
	// Our side: a link region and the eventfd the peer rings. nullptr and errno on failure.
	static std::unique_ptr<ShmLink> create();
	~ShmLink();
	ShmLink(const ShmLink &) = delete;
	ShmLink &operator=(const ShmLink &) = delete;

	// The peer's side as the handshake passed it; takes both fds (closed on failure). false
	// with *why: not a memfd sealed against shrinking, too small, a foreign layout, or
	// not an eventfd.
	bool attach(int region_fd, int doorbell_fd, std::string *why);

	int region_fd() const { return mine_->fd(); } // to pass to the peer
	int doorbell_fd() const { return efd_; }      // to pass to the peer (it rings us)
	int my_efd() const { return efd_; }           // in our engine's epoll

	// Wake the peer if it sleeps (after publishing). One write per sleep of the peer.
	void kick();
	// Our engine is about to sleep (gen != 0) or is awake (0).
	void set_sleep(uint32_t gen) { ring_store(me->sleep, gen); }
	// Store a field of our header / load one of the peer's (ring_store, ring_load, and
	// the happens-before edge ThreadSanitizer needs: shm_ring.h, ring_sync).
	void publish(uint32_t &field, uint32_t v)
	{
		ring_release(sync_mine_);
		ring_store(field, v);
	}
	uint32_t peek(const uint32_t &field) const
	{
		const uint32_t v = ring_load(field);
		ring_acquire(sync_peer_);
		return v;
	}
	// Does the peer's side hold anything for us to do? Cheap; engine thread.
	bool has_work() const;

	// Ours (read/write) and the peer's (mapped read-only).
	RingHdr *me = nullptr;
	RingReq *my_req = nullptr;
	RingRsp *my_rsp = nullptr;
	const RingHdr *peer = nullptr;
	const RingReq *peer_req = nullptr;
	const RingRsp *peer_rsp = nullptr;

	// Requester progress (our requests). tx_psn of the QP is the next index to produce.
	uint32_t published = 0;   // req_prod as last stored
	uint32_t rsp_seen = 0;    // answers consumed: our requests below it are complete
	uint32_t rnr_seen = 0;    // the peer's RNR NAKs handled
	uint32_t retries = 0;     // rnr_retries as last stored
	bool rnr_pending = false; // a retry is owed once the QP's RNR timer passes

	// Responder progress (the peer's requests).
	uint32_t rx = 0;       // the next request to execute
	uint32_t done_pub = 0; // done as last stored
	uint32_t naks = 0;     // rnr_naks as last stored
	bool hold = false;     // request rx was RNR NAKed; waits for the peer's retry
	bool peer_err = false; // the peer's QP is in ERR: its requests are not executed

	// Our QP in ERR: err published, and whether the flush waits for err_ack.
	ErrQuiesce quiesce;

	bool dirty = false; // a header field changed since the last kick

	Stage stage; // heap payloads and READ sinks, up to kStageBytes
	Stage big;   // one larger message at a time, sized to it

private:
	ShmLink() = default;
	std::unique_ptr<DmaRegion> mine_; // our link region
	int efd_ = -1;                    // our doorbell
	void *peer_map_ = nullptr;        // the peer's link region (read-only mapping)
	int peer_efd_ = -1;               // the peer's doorbell
	uint32_t kicked_ = 0;             // the peer's sleep we last rang for
	void *sync_mine_ = nullptr;       // TSan: our region's synchronisation object
	void *sync_peer_ = nullptr;       // TSan: the peer's region's
};

constexpr uint64_t kStageBytes = 4u << 20; // the staging ring; larger messages use `big`

} // namespace ulp::soft
