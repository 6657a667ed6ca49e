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
// against the send queue when it plugs it, its completion comes through its own cqe. What
// the plug adds is only the linking of the pieces' chains for the one post_send.
//
// Used through rdma::PortalConn (portal.h), holding the connection's serialiser: the plug has
// no lock of its own.
#pragma once

#include "core/verbs.h"

#include <boost/intrusive/list.hpp>

#include <cstdint>

namespace ulp::rdma
{

// One request's WRs as the plug holds them. Embedded in the protocol's request context (an
// SRP ioctx, an iSER send buffer or command).
struct PlugPiece {
	SendWr *first = nullptr; // the piece's first WR (set when plugged)
	SendWr *last = nullptr;  // its last: linked to the next piece's first while posting
	// The piece will never be posted (post_send refused it, or what came before it in the
	// chain): end its request as a send that failed, holding the connection. Set by the
	// protocol once, when it makes the context.
	void (*unsent)(PlugPiece *p) = nullptr;
	boost::intrusive::list_member_hook<> node; // in the plug, while plugged
};

using PlugList = boost::intrusive::list<
    PlugPiece, boost::intrusive::member_hook<PlugPiece, boost::intrusive::list_member_hook<>,
                                             &PlugPiece::node>>;

// Counters of one plug, for the protocol's statistics (the holder's; read racily).
struct PlugStats {
	uint64_t posts = 0;  // post_send calls made (chains posted)
	uint64_t pieces = 0; // pieces posted in them (requests)
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

	const PlugStats &stats() const { return stats_; }

private:
	PlugList held_;   // plugged pieces, oldest first
	PlugStats stats_; // see PlugStats
};

} // namespace ulp::rdma
