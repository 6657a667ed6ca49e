// SPDX-License-Identifier: MIT
// providers/soft/sock_wire.cc - the packet wire: RC packets over the connection's socket.
//
// One Unix stream socket per connection (sock_conn.h), named in the abstract namespace
// "@ulp-soft/IP:PORT" by the listener (sock_cm.cc). After the CM handshake the stream
// carries framed packets (PktHdr, then an inline payload when the header says so):
//
//   requests:  Send, SendImm, SendInv, Write, WriteImm (payload), ReadReq (none)
//   replies:   Ack, Nak (code, RNR timer), ReadResp (payload)
//   memory:    Region (a memfd passed with SCM_RIGHTS; see core/dma_mem.h)
//   Disconnect
//
// Every request carries a sequence number (psn). The responder serves only the psn it
// expects and replies in order; after an RNR NAK it drops later requests until the NAKed
// one comes again, and the requester goes back to it after the RNR timer (go-back-N, as
// an RC requester does after a NAK, IB spec 9.7.5.2.8).
//
// Payloads of 8 KiB or more whose bytes sit in one memfd region the peer has mapped are
// not copied through the socket: the packet names (region, offset) and the responder
// copies directly, under its own rkey checks, like a NIC doing DMA. Everything a peer
// sends is untrusted: lengths, regions and offsets are bounds-checked and a malformed
// packet drops the connection (peer death), never the process.
//
// The ring wire (shm_wire.cc) carries the same requests in shared memory instead; this
// wire stays selectable (Wire::Socket) beside it.
#include "providers/soft/sock_wire.h"

#include "core/log.h"
#include "providers/soft/sock_conn.h"
#include "providers/soft/sock_proto.h"

#include <sys/socket.h>

#include <cerrno>

namespace ulp::soft
{

// One ACK covers every request up to its psn (IB spec 9.7.5.1.2, coalesced ACKs); it is
// sent before any other reply, so replies stay in request order.
static void send_owed_ack(SockConn &c)
{
	if (!c.ack_pending)
		return;
	c.ack_pending = false;
	PktHdr h{};
	h.op = static_cast<uint8_t>(PktOp::Ack);
	h.psn = c.ack_psn;
	conn_send(c, h, nullptr, 0);
}

static void send_reply(SockConn &c, PktOp op, uint32_t psn, NakCode code = NakCode::Rnr,
                       uint8_t rnr_timer = 0)
{
	send_owed_ack(c);
	PktHdr h{};
	h.op = static_cast<uint8_t>(op);
	h.psn = psn;
	h.nak = static_cast<uint8_t>(code);
	h.rnr_timer = rnr_timer;
	conn_send(c, h, nullptr, 0);
}

// ---------------------------------------------------------------------------------------------
// Requester

static PktOp req_op(WrOpcode op)
{
	switch (op) {
	case WrOpcode::Send:
		return PktOp::Send;
	case WrOpcode::SendWithImm:
		return PktOp::SendImm;
	case WrOpcode::SendWithInv:
		return PktOp::SendInv;
	case WrOpcode::RdmaWrite:
		return PktOp::Write;
	case WrOpcode::RdmaWriteWithImm:
		return PktOp::WriteImm;
	default:
		return PktOp::ReadReq;
	}
}

ExecResult sock_exec(SoftQp &qp, uint32_t slot)
{
	SendWqe &w = qp.sq[slot % qp.sq_depth];
	auto c = qp.conn;
	// A completion decided here must not overtake WRs still in flight.
	auto complete_now = [&](WcStatus st) {
		if (qp.sq_acked != slot)
			return ExecResult::Stall;
		qp.complete_send(slot, st, 0);
		qp.to_error(nullptr);
		return ExecResult::Done;
	};
	if (!c || c->dead)
		return complete_now(WcStatus::RetryExcErr);
	// IB spec 10.8.3.3: a fenced WR waits for every earlier READ to finish.
	if ((w.flags & SEND_FENCE) && qp.rd_inflight)
		return ExecResult::Stall;
	// IB spec 9.4.5 / 11.2.4.2: at most max_rd_atomic READs in flight; with none, the
	// READ waits until the QP leaves RTS and it is flushed (exec_one).
	if (w.opcode == WrOpcode::RdmaRead && qp.rd_inflight >= qp.max_rd_atomic.load())
		return ExecResult::Stall;
	if (c->backlog() > kTxHigh)
		return ExecResult::Stall; // EPOLLOUT reschedules us

	SoftDevice &dev = qp.sdev;
	PktHdr h{};
	h.op = static_cast<uint8_t>(req_op(w.opcode));
	h.flags = (w.flags & SEND_SOLICITED) ? kPktSolicited : 0;
	h.rkey = w.rkey;
	h.va = w.remote_addr;
	h.imm = w.opcode == WrOpcode::SendWithInv ? w.inv_rkey : w.imm;

	std::shared_lock g(dev.mr_lock);
	const Sge *sg = qp.sq_sges(slot);
	uint64_t total = w.inline_len;
	if (!w.inline_len) {
		uint32_t need =
		    w.opcode == WrOpcode::RdmaRead
		        ? ACCESS_LOCAL_WRITE | (dev.is_iwarp() ? uint32_t{ACCESS_REMOTE_WRITE} : 0u)
		        : 0u;
		WcStatus st = check_local_sges(dev, qp.spd, sg, w.num_sge, need, &total);
		if (st != WcStatus::Success) {
			g.unlock();
			return complete_now(st);
		}
	}
	h.len = static_cast<uint32_t>(total);
	w.psn = qp.tx_psn++;
	h.psn = w.psn;
	w.shm = false;
	uint64_t off = 0;
	const DmaRegion *r = w.inline_len ? nullptr : shm_of(dev, sg, w.num_sge, total, &off);
	if (r && announce(*c, *r)) {
		h.flags |= kPktShm;
		w.shm = true;
		h.shm_id = r->id();
		h.shm_off = off;
	}
	if (w.opcode == WrOpcode::RdmaRead) {
		qp.rd_inflight++;
		if (qp.rd_inflight > qp.ctr.max_rd_inflight.load(std::memory_order_relaxed))
			qp.ctr.max_rd_inflight.store(qp.rd_inflight, std::memory_order_relaxed);
		conn_send(*c, h, nullptr, 0);
	} else if (h.flags & kPktShm) {
		conn_send(*c, h, nullptr, 0);
	} else if (total > kMaxInlinePayload) {
		g.unlock();
		qp.tx_psn--;
		return complete_now(WcStatus::LocLenErr); // needs shared memory on this wire
	} else {
		Cursor src = w.inline_len ? Cursor::flat(qp.sq_inl(slot), w.inline_len)
		                          : Cursor::sges(dev, sg, w.num_sge);
		conn_send(*c, h, &src, total);
	}
	g.unlock();
	update_pollout(*c);
	return ExecResult::Pending;
}

// A reply for the oldest WR in flight.
static bool on_reply(SoftQp &qp, SockConn &c, const PktHdr &h, const uint8_t *payload)
{
	// In ERR every WR still in flight is flushed (IB spec 10.3.1), whatever the
	// responder says about it later.
	if (qp.state() == QpState::Err)
		return true;
	if (qp.sq_acked == qp.sq_next)
		return false; // nothing in flight: protocol error
	uint32_t slot = qp.sq_acked;
	SendWqe w = qp.sq[slot % qp.sq_depth];
	PktOp op = static_cast<PktOp>(h.op);
	if (op == PktOp::Ack ? static_cast<int32_t>(h.psn - w.psn) < 0 : w.psn != h.psn)
		return false;
	bool is_read = w.opcode == WrOpcode::RdmaRead;
	if (op == PktOp::ReadResp) {
		// The response must be where the request said: in our shared sink, or
		// inline when we named none (else data never written would "succeed").
		if (!is_read || h.len != w.length || !(h.flags & kPktShm) != !w.shm)
			return false;
		if (!(h.flags & kPktShm) && h.len) {
			std::shared_lock g(qp.sdev.mr_lock);
			Cursor dst = Cursor::sges(qp.sdev, qp.sq_sges(slot), w.num_sge);
			Cursor src = Cursor::flat(payload, h.len);
			cursor_copy(dst, src, h.len);
		}
		qp.rd_inflight--;
		qp.finish_req(slot, Reply::Ack, h.len);
		qp.sq_acked++;
		qp.retire_local();
		return true;
	}
	if (op == PktOp::Ack) {
		// Completes every WR up to its psn; a READ among them would have had its
		// response first.
		for (;;) {
			if (is_read)
				return false;
			qp.finish_req(slot, Reply::Ack, w.inline_len ? w.inline_len : w.length);
			qp.sq_acked++;
			// The REG_MRs and LOCAL_INVs executed behind it complete now, in order
			// (a local WR has no psn of its own: never compared).
			qp.retire_local();
			if (w.psn == h.psn || qp.state() == QpState::Err)
				return true;
			if (qp.sq_acked == qp.sq_next)
				return false; // acks a psn never sent
			slot = qp.sq_acked;
			SendWqe &nw = qp.sq[slot % qp.sq_depth];
			if (static_cast<int32_t>(h.psn - nw.psn) < 0)
				return false;
			is_read = nw.opcode == WrOpcode::RdmaRead;
			w = nw;
		}
	}
	// Nak
	NakCode code = static_cast<NakCode>(h.nak);
	if (code == NakCode::Rnr) {
		// Go back to the NAKed WR; the responder has dropped everything after it.
		qp.sq_next = slot;
		qp.tx_psn = w.psn;
		qp.rd_inflight = 0;
		ExecResult r = qp.rnr_wait(slot, rnr_timer_usec(h.rnr_timer));
		if (r == ExecResult::Done) {
			qp.sq_acked++, qp.sq_next = qp.sq_acked;
			qp.retire_local();
		}
		return true;
	}
	Reply rep = code == NakCode::InvReq   ? Reply::NakInvReq
	            : code == NakCode::Access ? Reply::NakAccess
	            : code == NakCode::Op     ? Reply::NakOp
	                                      : Reply::PeerGone;
	if (is_read)
		qp.rd_inflight--;
	qp.finish_req(slot, rep, 0);
	qp.sq_acked++;
	qp.retire_local();
	return true;
}

// ---------------------------------------------------------------------------------------------
// Responder

static NakCode nak_of(Reply r)
{
	switch (r) {
	case Reply::NakInvReq:
		return NakCode::InvReq;
	case Reply::NakAccess:
		return NakCode::Access;
	case Reply::NakOp:
		return NakCode::Op;
	default:
		return NakCode::Gone;
	}
}

static bool on_request(SoftQp &qp, SockConn &c, const PktHdr &h, const uint8_t *payload)
{
	if (c.peer_err)
		return true; // after the peer's Err: its WRs are flushed, nobody waits for these
	if (h.psn != qp.rx_psn)
		return true; // after an RNR NAK: dropped until the NAKed request returns
	QpState st = qp.state();
	if (st != QpState::Rtr && st != QpState::Rts && st != QpState::Sqe) {
		send_reply(c, PktOp::Nak, h.psn, NakCode::Gone);
		return true;
	}
	PktOp op = static_cast<PktOp>(h.op);
	// Where the request's bytes are (or, for a READ, where the response goes).
	uint8_t *shm = nullptr;
	if (h.flags & kPktShm) {
		const Mapped *m = c.region(h.shm_id);
		if (!m || h.shm_off > m->len || h.len > m->len - h.shm_off)
			return false; // names memory it never gave us
		shm = m->p + h.shm_off;
	}
	if (op == PktOp::ReadReq && !shm && h.len > kMaxInlinePayload)
		return false;

	RespResult rr;
	PktHdr resp{};
	resp.op = static_cast<uint8_t>(PktOp::ReadResp);
	resp.psn = h.psn;
	resp.len = h.len;
	std::vector<uint8_t> *rdbuf = nullptr;
	static thread_local std::vector<uint8_t> tl_rdbuf; // grows to the largest READ once
	{
		std::shared_lock g(qp.sdev.mr_lock);
		Cursor src = Cursor::flat(shm ? shm : payload, h.len);
		bool sol = h.flags & kPktSolicited;
		switch (op) {
		case PktOp::Send:
			rr = qp.resp_send(src, h.len, WrOpcode::Send, 0, 0, sol, qp.dest_qpn);
			break;
		case PktOp::SendImm:
			rr = qp.resp_send(src, h.len, WrOpcode::SendWithImm, h.imm, 0, sol,
			                  qp.dest_qpn);
			break;
		case PktOp::SendInv:
			rr = qp.resp_send(src, h.len, WrOpcode::SendWithInv, 0, h.imm, sol,
			                  qp.dest_qpn);
			break;
		case PktOp::Write:
		case PktOp::WriteImm:
			rr = qp.resp_write(src, h.len, h.va, h.rkey, op == PktOp::WriteImm, h.imm,
			                   qp.dest_qpn, sol);
			break;
		case PktOp::ReadReq: {
			if (shm) {
				resp.flags = kPktShm;
				Cursor dst = Cursor::flat(shm, h.len);
				rr = qp.resp_read(dst, h.len, h.va, h.rkey);
			} else {
				if (tl_rdbuf.size() < h.len &&
				    check_remote(qp.sdev, qp.spd, h.rkey, h.va, h.len,
				                 ACCESS_REMOTE_READ))
					tl_rdbuf.resize(
					    h.len); // only for a READ that will be served
				rdbuf = &tl_rdbuf;
				Cursor dst = Cursor::flat(tl_rdbuf.data(), h.len);
				rr = qp.resp_read(dst, h.len, h.va, h.rkey);
			}
			break;
		}
		default:
			return false;
		}
	}
	if (rr.reply == Reply::RnrNak) {
		send_reply(c, PktOp::Nak, h.psn, NakCode::Rnr, qp.min_rnr_timer.load());
		return true;
	}
	qp.rx_psn++;
	qp.finish_resp(rr);
	if (rr.reply != Reply::Ack) {
		send_reply(c, PktOp::Nak, h.psn, nak_of(rr.reply));
	} else if (op == PktOp::ReadReq) {
		send_owed_ack(c);
		Cursor src = Cursor::flat(rdbuf ? rdbuf->data() : nullptr, h.len);
		conn_send(c, resp, rdbuf ? &src : nullptr, rdbuf ? h.len : 0);
	} else {
		c.ack_pending = true;
		c.ack_psn = h.psn;
	}
	return true;
}

// A packet the packet wire carries: a request to serve or a reply to a request of ours.
static bool on_packet(SoftQp &qp, SockConn &c, const PktHdr &h, const uint8_t *payload)
{
	PktOp op = static_cast<PktOp>(h.op);
	if (is_request(op))
		return c.backlog() <= kTxHardMax && // answers pile up: the peer stopped reading
		       on_request(qp, c, h, payload);
	if (op == PktOp::Ack || op == PktOp::Nak || op == PktOp::ReadResp)
		return on_reply(qp, c, h, payload);
	if (op == PktOp::Err) {
		// Every request it sent before this one has been served (in order, above):
		// from here on none is.
		c.peer_err = true;
		send_reply(c, PktOp::ErrAck, 0);
		return true;
	}
	if (op == PktOp::ErrAck) {
		if (!c.quiesce.sent || c.err_acked)
			return false; // an answer to nothing we asked
		c.err_acked = true;
		return true;
	}
	return false;
}

void sock_service(SoftQp &qp)
{
	auto c = qp.conn;
	if (!c)
		return;
	if (c->dead) {
		conn_lost(qp, *c);
		return;
	}
	{
		std::lock_guard g(c->tx_lock);
		conn_flush_locked(*c);
	}
	update_pollout(*c);
	int seen = 0;
	if (!conn_read(qp, *c, on_packet, &seen))
		return;
	if (seen)
		qp.engine.wire_active();
	send_owed_ack(*c);
	if (c->rx_len || c->backlog())
		qp.engine.wire_active();
}

bool sock_quiesced(SoftQp &qp)
{
	auto &c = qp.conn;
	if (!c || c->dead)
		return true; // a dead peer touches nothing
	if (!c->quiesce.sent) {
		PktHdr h{};
		h.op = static_cast<uint8_t>(PktOp::Err);
		conn_send(*c, h, nullptr, 0);
		if (c->quiesce.start(qp, qp.sq_acked != qp.sq_next))
			return true;
	}
	return c->quiesce.finished(qp, "packet", c->err_acked);
}

void sock_flush(SoftQp &qp)
{
	auto &c = qp.conn;
	if (!c)
		return;
	{
		std::lock_guard g(c->tx_lock);
		conn_flush_locked(*c);
	}
	update_pollout(*c);
}

} // namespace ulp::soft
