// SPDX-License-Identifier: MIT
// iser/target/conn.h - one iSER connection, target side (the kernel's struct isert_conn and
// its descriptors): the iSCSI session layer (iscsi::target::Conn) over an RDMA connection
// (rdma::PortalConn: its QP, CQ and rw contexts), RFC 7145.
//
// Its state is the iSCSI connection's (iscsi::target::ConnState: login, full feature
// phase, logging out, closing, done); the transport adds one fact, closed_: close_transport
// ran (the RDMA/CM disconnect is sent, nothing more is posted, the portal drains and reaps
// the connection).
//
// Serialised by Serial in Inline mode: completions arrive on the CQ pool's workers, CM
// events on the provider's CM thread, SCSI completions on backstore threads, and whichever
// thread brings the work runs it, holding the connection (enter). Every field below that
// names no other lock is the holder's. Setup (setup, set_read_credit) runs on the CM thread
// before the connection is accepted, when nothing else can reach it; release_resources on
// the portal's event thread once it is drained.
//
// Buffers: a receive ring and a send ring of registered buffers (rdma::RecvRing,
// rdma::SendRing), each an iSER header (RFC 7145 7.1) and one PDU; a command's data is one
// block of the portal's per-device DmaHeap, moved by the rw context kept with its slot.
#pragma once

#include "iscsi/target/conn.h"
#include "iser/proto.h"
#include "iser/target/target.h"
#include "rdma_conn/portal.h"
#include "rdma_conn/ring.h"
#include "rw/rw.h"
#include "rw/sg_table.h"

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

namespace ulp::iser
{

class Conn final : public iscsi::target::Conn, public rdma::PortalConn
{
	using IscsiCmd = iscsi::target::IscsiCmd;
	using OutPdu = iscsi::target::OutPdu;

public:
	Conn(Portal &portal, std::unique_ptr<CmId> id, std::string peer, std::string local)
	    : iscsi::target::Conn(portal.target(), iscsi::Transport::Iser, std::move(peer),
	                          std::move(local), Mode::Inline),
	      rdma::PortalConn(portal, std::move(id)), portal_(portal)
	{
	}
	~Conn() override;

	// Set the connection up on its id (a new RDMA/CM connection request): QP, CQ, rings,
	// receives posted. 0, or a negative errno with *why.
	int setup(Pd &pd, DmaHeap &heap, const IserCmHdr &ch, std::string *why);
	// The RDMA READs the accept lets this connection's QP issue at once (its initiator
	// depth); 0: the initiator granted none, so no write data can be fetched.
	void set_read_credit(uint8_t n) { read_credit_ = n; }

	// rdma::PortalConn
	void on_cm_event(CmEvent &ev) override;
	// The session's timers, then the bound on RDMA transfers (PortalConfig::data_timeout).
	void tick(std::chrono::steady_clock::time_point now) override;
	void run_kicked() override
	{
		enter([] {});
	}
	bool finished() override
	{
		bool fin = false;
		enter([&] { fin = done() && !plug_due(); });
		return fin;
	}
	void detach() override { iscsi::target::Conn::detach(); }
	void release_resources() override;
	std::string describe() override { return peer() + " (" + conn_state_str(state()) + ")"; }

protected:
	void queue_pdu(OutPdu *p) override;
	// post_deferred: the poster holds a lock the events may take; the portal's event thread
	// runs them (a thread switch, on slow paths only: drops, logouts, target stop).
	void kick() override { portal_.kick(this); }
	void close_transport() override;
	// rdma::PortalConn's send plug: its flush runs as ConnEvent::Transport; a refused post
	// drops the connection.
	void post_plug_flush() override { post(iscsi::target::ConnEvent::Transport, {}); }
	void transport_event() override { plug_turn_ended(); }
	void plug_failed(int rc) override;
	bool alloc_buffer(IscsiCmd *c, uint32_t len) override;
	void free_buffer(IscsiCmd *c) override;
	void cmd_received(IscsiCmd *c) override { ctx(c)->hdr = last_iser_; }
	void fetch_data_out(IscsiCmd *c) override;
	void send_read_response(IscsiCmd *c) override;
	void login_prefs(iscsi::OperationalPrefs &p) override
	{
		p.iser_recv_dsl = portal_.iser_cfg().recv_dsl;
		p.iser_send_dsl = portal_.iser_cfg().send_dsl;
		// Every PDU needs a posted receive. Non-immediate commands are bounded by the
		// CmdSN window and immediate ones by kImmediateSlots; unsolicited Data-Out would
		// be bounded by nothing we size for (a window of writes, each with a first
		// burst), so InitialR2T=Yes (OR: ours wins) keeps unsolicited data to the
		// immediate data in the command's own SEND, as LIO's isert does. The rest of a
		// write comes by RDMA READ. RFC 7145 6.7: what else may arrive unexpected (NOP-
		// Out, TMF, Text, Logout, SNACK) is what the extra receives are for.
		p.initial_r2t = true;
		p.max_outstanding_unexpected_pdus = portal_.iser_cfg().extra_recvs;
	}

private:
	// A receive buffer (the kernel's iser_rx_desc).
	struct RxDesc : rdma::RecvDesc {
		Conn *conn = nullptr; // its connection, for recv_done (set once, at setup)
	};
	// A send buffer (the kernel's iser_tx_desc).
	struct TxDesc : rdma::SendDesc {
		Conn *conn = nullptr;  // its connection, for send_done (set once, at setup)
		OutPdu *pdu = nullptr; // the PDU in the buffer, until the SEND completes
		rdma::PlugPiece piece; // the SEND (a read's WRITEs before it), while plugged
	};
	// A command's RDMA state, kept with its slot (IscsiCmd::xprt) for the connection's life
	// (the kernel's isert_cmd).
	struct CmdCtx {
		Cqe cqe;                 // the RDMA READ completion leads back here
		Conn *conn;              // the connection it belongs to
		IscsiCmd *cmd;           // the command slot it serves (reused with the slot)
		RwCtx rw;                // the RDMA READ or WRITEs of the command's data
		SgTable sgt{1};          // the data buffer as rw's scatter table (one block)
		uint32_t fetch_len = 0;  // bytes the RDMA READ moves
		bool active = false;     // rw holds WRs or MRs (destroy before reuse)
		RwDir dir = RwDir::Read; // what rw moves while active: write data in, read data out
		IserHdr hdr;             // the command's iSER header: its STags and VAs
		std::chrono::steady_clock::time_point posted; // when rw was posted (data_timeout)
		rdma::PlugPiece piece; // the RDMA READ of write data, while plugged
	};

	// Completions (CQ pool workers): each enters the connection.
	static void recv_done(Cq *cq, Wc *wc);
	static void send_done(Cq *cq, Wc *wc);
	static void read_done(Cq *cq, Wc *wc);
	// The send plug could not post a piece: end it as a failed send, or a failed fetch.
	static void send_unsent(rdma::PlugPiece *p);
	static void read_unsent(rdma::PlugPiece *p);

	void handle_recv(RxDesc *d, const Wc &wc);
	void post_recv(RxDesc *d);
	// Build p behind an iSER header in d's buffer (SEND_WITH_INV when it ends a command
	// that had STags and the peer allows it).
	void fill_send(TxDesc *d, OutPdu *p);
	// Send what waited for a send buffer, read responses first.
	void send_pending();
	// c's CmdCtx, made on first use.
	CmdCtx *ctx(IscsiCmd *c);
	void destroy_rw(CmdCtx *x);
	// The read data by RDMA WRITE with the response SEND chained behind it, in d.
	void post_read_response(IscsiCmd *c, TxDesc *d);
	// Drop the connection when an RDMA transfer is older than PortalConfig::data_timeout.
	void check_transfers(std::chrono::steady_clock::time_point now);

	Portal &portal_;                       // the portal that accepted it (outlives it)
	DmaHeap *heap_ = nullptr;              // the device's data buffers (setup)
	rdma::RecvRing<RxDesc> recvs_;         // receive buffers, all posted but the one in hand
	rdma::SendRing<TxDesc> sends_;         // send buffers; the free list
	std::deque<OutPdu *> pending_;         // PDUs waiting for a send buffer
	std::deque<IscsiCmd *> pending_reads_; // read responses waiting for one
	std::vector<std::unique_ptr<CmdCtx>> ctxs_; // every CmdCtx made (ctx), freed with it
	size_t send_size_ = 0;                      // send buffer bytes
	bool send_inv_ = false;            // responses may be SEND_WITH_INV (peer and device)
	uint8_t read_credit_ = 0;          // RDMA READs the QP may issue at once (accept)
	bool told_no_read_credit_ = false; // logged that writes cannot be fetched
	IserHdr last_iser_;                // the header of the PDU being processed
	bool closed_ = false;              // close_transport ran
};

} // namespace ulp::iser
