// SPDX-License-Identifier: MIT
// rdma_conn/send_plug.h - a connection's send plug: the work requests one turn of a thread
// builds for a connection (responses, a read's RDMA WRITEs with its response chained behind,
// the RDMA READs of write data), held and posted together at the end of the turn
// (core/turn.h) as one chain: one post_send, one doorbell. The block layer's blk_plug for a
// task's bios, NAPI's flush at the end of a poll, SPDK's NVMe-oF RDMA poller posting its
// queued sends once per poll.
//
// Whatever completes a command passes through a turn: a CQ's poll batch (an SRP_CMD or SCSI
// Command PDU answered from a RAM LU inside its receive's done()), an event loop's turn (a
// file or block LU's io_uring reaped on the CQ's poller, which is an event loop too), a
// backstore completion thread's reap. On rxe, whose post_send from a process runs the peer's
// receive path inline and hands the peer's CQ tasklet to ksoftirqd, a post per response was
// a wake-up and a preemption per response (tools/iscsi-bench/vm-srp).
//
// A piece is one request's WRs (a SEND; READs or WRITEs ending in a signaled WR), posted
// whole or not at all, exactly as if it had been posted alone: the protocol counts its WRs
// against the send queue when it plugs it, its completion comes through its own cqe.
//
// One signaled completion per chain: a send queue completes in order (what ib_drain_sq
// relies on; the kernel's RDS signals one send in many for the same reason), so the
// completion of a chain's last piece says that every piece before it completed too, and only
// the last piece stays signaled - with the pieces that end in an RDMA READ, whose completion
// is a command's progress (its write data is here) and must not wait for the transfers
// posted after it; a response's only gives buffers back. The plug sends every
// piece's completion through its own cqe (PlugPiece::cqe) first: a signaled one hands each
// unsignaled piece posted before it its own completion (success, or flushed when this one
// was flushed: a provider that does not report flushed unsignaled WRs cannot make a flushed
// transfer look done), then its own. An unsignaled piece that fails reports itself (a flush
// reports unsignaled WRs too), and is taken out. What a drained queue leaves behind (a
// signaled completion the device lost) ends flushed (drained()). The protocol sees one
// completion per piece, as before, in the order posted; the provider writes, and the
// poller reads, one CQE per chain.
//
// The send queue: with selective signaling an unsignaled WR's slot stays the device's until
// a later signaled WR's completion is polled (hardware retires slots as it reads a CQE's
// WQE counter; the soft provider frees them the same way). A protocol gets an unsignaled
// piece's WRs back only through that piece's completion, which the plug gives it only from
// the later signaled one's: its count of free slots is never ahead of the device's. Every
// chain ends in a signaled WR, so no slot waits for a completion that never comes; a chain
// post_send cut short closes the connection, and the drain ends what it left.
//
// Used through rdma::PortalConn (portal.h): add and post holding the connection's
// serialiser; the completions come on the CQ's thread without it, so the unsignaled pieces
// in flight have a lock of their own.
#pragma once

#include "core/verbs.h"

#include <boost/intrusive/list.hpp>

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

namespace ulp::rdma
{

// Pieces a plug holds at most: a chain goes out when it has this many, without waiting for
// the end of the turn (a poll batch's worth, kPollBatch: one chain per batch of receives).
inline constexpr size_t kPlugMax = 16;

// One request's WRs as the plug holds them. Embedded in the protocol's request context (an
// SRP ioctx, an iSER send buffer or command).
struct PlugPiece {
	SendWr *first = nullptr; // the piece's first WR (set when plugged)
	SendWr *last = nullptr;  // its last: linked to the next piece's first while posting
	// The piece will never be posted (post_send refused it, or what came before it in the
	// chain): end its request as a send that failed, holding the connection. Set by the
	// protocol once, when it makes the context.
	void (*unsent)(PlugPiece *p) = nullptr;
	boost::intrusive::list_member_hook<> node; // in the plug while plugged, then while
	                                           // posted unsignaled (SendPlug's lock)
	// While posted through the plug's cqe (set by SendPlug::post).
	Cqe cqe;                        // the last WR's completion comes here first
	Cqe *orig = nullptr;            // the protocol's cqe of the last WR; null once delivered
	class SendPlug *plug = nullptr; // the plug that posted it
	uint64_t seq = 0;               // its place in the connection's send queue (posting order)
};

using PlugList = boost::intrusive::list<
    PlugPiece, boost::intrusive::member_hook<PlugPiece, boost::intrusive::list_member_hook<>,
                                             &PlugPiece::node>>;

// Counters of one plug (the holder's: read by it, or once the connection is quiescent).
struct PlugStats {
	uint64_t posts = 0;      // post_send calls made (chains posted)
	uint64_t pieces = 0;     // pieces posted in them (requests)
	uint64_t unsignaled = 0; // of them, posted unsignaled: completed by a later one's CQE
};

class SendPlug
{
public:
	SendPlug() = default;
	SendPlug(const SendPlug &) = delete;
	SendPlug &operator=(const SendPlug &) = delete;

	// Hold p: WRs from first, linked by next, the last one's next null.
	void add(PlugPiece *p, SendWr *first);
	bool empty() const { return held_.empty(); }
	size_t size() const { return held_.size(); }

	// Post what is held, in order, as one chain on qp: 0, or post_send's error. On an error
	// the pieces that did not go out (the one post_send's bad WR falls in and those after
	// it; all of them when bad names none) are moved to *unsent, in order, for the caller
	// to end; the ones before went out. The plug is empty afterwards either way (a call
	// made meanwhile, from *unsent's callbacks, finds it so).
	int post(Qp &qp, PlugList *unsent);

	// The QP is drained (every WR posted has completed, or was flushed, and its completion
	// dispatched): pieces still waiting for a later completion lost theirs (a device that
	// dropped a CQE). Each ends now, flushed, through its cqe on cq. Any thread, without the
	// connection: as the CQ's thread would.
	void drained(Cq *cq, Qp *qp);

	const PlugStats &stats() const { return stats_; }

private:
	// Every completion of a piece's last WR (PlugPiece::cqe.done).
	static void piece_done(Cq *cq, Wc *wc);

	PlugList held_;                    // plugged pieces, oldest first (the holder's)
	PlugStats stats_;                  // see PlugStats (the holder's)
	uint64_t next_seq_ = 0;            // the last PlugPiece::seq given (the holder's)
	std::vector<PlugPiece *> posting_; // the chain post() is posting (the holder's; kept
	                                   // with its capacity: no allocation per post)
	// Guards unsignaled_ and the pieces' orig once posted: the holder posts, the CQ's
	// thread completes, drained() runs on the portal's.
	std::mutex lock_;
	PlugList unsignaled_; // posted unsignaled, completion not yet seen, in posting order
};

} // namespace ulp::rdma
