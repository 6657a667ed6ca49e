// SPDX-License-Identifier: MIT
// providers/soft/sock_conn.h - one cross-process connection: its Unix stream socket, the
// peer's memory regions it has mapped, and (on the ring wire) its shared-memory rings.
//
// Both cross-process wires share this. The packet wire (sock_wire.cc) carries every
// request and reply over the socket; the ring wire (shm_wire.cc) carries them in shared
// memory (shm_ring.h) and keeps the socket for what needs one: the CM handshake, passing
// memfds, the DISCONNECT, and noticing a dead peer at once (EOF).
#pragma once

#include "core/dma_mem.h"
#include "providers/soft/sock_proto.h"
#include "providers/soft/soft_internal.h"

#include <atomic>
#include <deque>
#include <memory>
#include <mutex>
#include <vector>

namespace ulp::soft
{

class ShmLink;

// A memory region of the peer, mapped here.
struct Mapped {
	uint64_t id; // the peer's DmaRegion id
	uint8_t *p;  // our mapping (read/write: READ responses land in it)
	uint64_t len;
};

class SockConn
{
public:
	explicit SockConn(int fd);
	~SockConn();

	int fd;
	Engine *engine = nullptr;      // the engine that watches us (its QP's), once established
	SoftQp *qp = nullptr;          // QP carried (engine lock)
	std::atomic<bool> dead{false}; // EOF, error or protocol violation (any thread)
	// Ring wire: the socket has something to read (the engine's epoll saw it readable);
	// the ring wire reads the socket only then, not on every turn.
	std::atomic<bool> rx_ready{true};
	bool lost = false; // conn_lost has run (engine)

	std::mutex tx_lock;         // txbuf and writes
	std::vector<uint8_t> txbuf; // bytes not yet written
	size_t tx_off = 0;          // written prefix of txbuf
	bool want_out = false;      // EPOLLOUT armed

	std::vector<uint8_t> rxbuf = std::vector<uint8_t>(256 << 10);
	size_t rx_len = 0;               // valid bytes in rxbuf
	std::deque<int> rx_fds;          // SCM_RIGHTS fds, in arrival order
	std::vector<uint64_t> announced; // our regions the peer has mapped (tx_lock)
	bool ack_pending = false;        // packet wire, responder: an ACK for ack_psn is owed
	uint32_t ack_psn = 0;
	std::vector<Mapped> mapped; // the peer's regions we have mapped (engine)
	// Packet wire, ERR (sock_quiesced; engine).
	bool peer_err = false;  // the peer's Err came: its later requests are dropped unserved
	ErrQuiesce quiesce;     // our Err went, and whether the flush waits for ErrAck
	bool err_acked = false; // ErrAck came: the peer executes none of our requests

	// Ring wire: the shared rings and doorbells (null on the packet wire). Set by the CM
	// before the engine sees the connection, never changed after.
	std::unique_ptr<ShmLink> link;
	// Ring wire: the channel its doorbell also rings (its QP's receive CQ's), and that CQ;
	// the engine's epoll watches the doorbell only while eng_watch (engine lock).
	SoftChannel *hand = nullptr;
	SoftCq *hand_cq = nullptr;
	bool eng_watch = true;

	size_t backlog()
	{
		std::lock_guard g(tx_lock);
		return txbuf.size() - tx_off;
	}
	const Mapped *region(uint64_t id) const
	{
		for (auto &m : mapped)
			if (m.id == id)
				return &m;
		return nullptr;
	}
};

// Transmit -----------------------------------------------------------------------------------

void conn_flush_locked(SockConn &c); // write what the socket takes now (tx_lock held)
void update_pollout(SockConn &c);    // EPOLLOUT armed while a backlog remains
// Queue a header and len payload bytes from src (see sock_conn.cc); flush writes now.
void conn_send(SockConn &c, const PktHdr &h, Cursor *src, uint64_t len, bool flush = false);
// Make our region known to the peer (a Region packet with its memfd) before anything
// names it. false: not possible now (a backlog is queued); the caller copies instead.
bool announce(SockConn &c, const DmaRegion &r);
// The single shared region holding an SGE list's len bytes (at *off in it), if the list
// is one contiguous chunk there and len >= min_len. mr_lock held.
const DmaRegion *shm_of(SoftDevice &dev, const Sge *sge, uint32_t n, uint64_t len, uint64_t *off,
                        uint64_t min_len = kShmMin);

// Receive ------------------------------------------------------------------------------------

// A wire's handler for one whole packet that conn_read does not handle itself (Region,
// Disconnect and CM packets are handled there). false: protocol error.
using PktFn = bool (*)(SoftQp &qp, SockConn &c, const PktHdr &h, const uint8_t *payload);
// Read what the socket has (with any passed fds) and dispatch whole packets. false when
// the connection is gone: EOF, error, a protocol error, fds nobody claims (conn_lost has
// run then). *seen counts the packets handled.
bool conn_read(SoftQp &qp, SockConn &c, PktFn on_pkt, int *seen = nullptr);
// The connection is gone (EOF, reset, garbage): the oldest WR in flight gets the
// transport's verdict, the rest are flushed, and the CM reports DISCONNECTED.
void conn_lost(SoftQp &qp, SockConn &c);

} // namespace ulp::soft
