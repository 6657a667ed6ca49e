// SPDX-License-Identifier: MIT
// providers/soft/shm_wire.cc - the ring wire: RC requests in shared-memory rings.
//
// The layout and the protocol are shm_ring.h. The requester's engine writes each send WQE
// as a descriptor into its own request ring; the responder's engine reads it straight from
// there (the peer's link region, mapped read-only), copies the descriptor out, checks it,
// executes it with the same responder rules as every wire (exec.cc, resp_*), copies the
// payload between the mapped regions, and answers in its own answer ring. The socket
// stays for what needs one (sock_conn.h): Region announcements, DISCONNECT, and EOF when
// the peer dies.
//
// Nothing the peer writes is trusted, and nothing is read from the shared ring twice: a
// descriptor or an answer is copied out first and only the copy is checked and used (the
// inline payload bytes are data and are copied once, after the checks). Anything out of
// range is a protocol error: the connection is dropped (conn_lost), never the process.
#include "providers/soft/shm_wire.h"

#include "core/log.h"
#include "providers/soft/shm_link.h"
#include "providers/soft/sock_conn.h"

#include <cstddef>

namespace ulp::soft
{

namespace
{

constexpr uint64_t kPublishEarly = 4096; // answer a request this large at once

RingOp ring_op(WrOpcode op)
{
	switch (op) {
	case WrOpcode::Send:
		return RingOp::Send;
	case WrOpcode::SendWithImm:
		return RingOp::SendImm;
	case WrOpcode::SendWithInv:
		return RingOp::SendInv;
	case WrOpcode::RdmaWrite:
		return RingOp::Write;
	case WrOpcode::RdmaWriteWithImm:
		return RingOp::WriteImm;
	default:
		return RingOp::Read;
	}
}

bool protocol_error(SoftQp &qp, SockConn &c, const char *what)
{
	ULP_LOG_RATELIMITED(Error, Soft, "ring wire: protocol error from peer of QP {}: {}",
	                    qp.qp_num(), what);
	conn_lost(qp, c);
	return false;
}

// ---------------------------------------------------------------------------------------------
// Staging: payloads and READ sinks in memory the peer cannot map.

enum class StageRes : uint8_t { Ok, Wait, Fail };

StageRes stage_take(SockConn &c, ShmLink &l, uint64_t n, SendWqe &w, uint64_t *region,
                    uint64_t *off)
{
	const bool use_big = n > kStageBytes / 4;
	Stage &s = use_big ? l.big : l.stage;
	if (!use_big && !s.r) {
		s.r = dma_alloc(kStageBytes, false);
		if (!s.r)
			return StageRes::Fail;
	}
	if (use_big && (!s.r || s.r->length() < n)) {
		if (!s.idle())
			return StageRes::Wait; // the big message in flight ends first
		uint64_t sz = uint64_t{1} << (64 - __builtin_clzll(n - 1));
		s.r = dma_alloc(sz, false);
		s.announced = false;
		s.head = s.tail = 0;
		if (!s.r)
			return StageRes::Fail;
	}
	if (!s.announced) {
		if (!announce(c, *s.r))
			return StageRes::Wait; // EPOLLOUT reschedules us
		s.announced = true;
	}
	uint64_t end;
	if (!s.take(n, off, &end))
		return StageRes::Wait; // an answer gives space back
	*region = s.r->id();
	w.staged = use_big ? 2 : 1;
	w.stage_off = *off;
	w.stage_end = end;
	return StageRes::Ok;
}

Stage *stage_of(ShmLink &l, const SendWqe &w)
{
	return w.staged == 1 ? &l.stage : w.staged == 2 ? &l.big : nullptr;
}

void stage_give_back(ShmLink &l, SendWqe &w)
{
	if (Stage *s = stage_of(l, w))
		s->give_back(w.stage_end);
	w.staged = 0;
}

} // namespace

// ---------------------------------------------------------------------------------------------
// Requester

ExecResult shm_exec(SoftQp &qp, uint32_t slot)
{
	SendWqe &w = qp.sq[slot % qp.sq_depth];
	SockConn *c = qp.conn.get();
	// A completion decided here must not overtake WRs still in flight.
	auto complete_now = [&](WcStatus st) {
		if (qp.sq_acked != slot)
			return ExecResult::Stall;
		qp.complete_send(slot, st, 0);
		qp.to_error(nullptr);
		return ExecResult::Done;
	};
	if (!c || c->dead || !c->link)
		return complete_now(WcStatus::RetryExcErr);
	ShmLink &l = *c->link;
	// IB spec 10.8.3.3: a fenced WR waits for every earlier READ to finish.
	if ((w.flags & SEND_FENCE) && qp.rd_inflight)
		return ExecResult::Stall;
	// IB spec 9.4.5 / 11.2.4.2: at most max_rd_atomic READs in flight.
	if (w.opcode == WrOpcode::RdmaRead && qp.rd_inflight >= qp.max_rd_atomic.load())
		return ExecResult::Stall;
	if (qp.tx_psn - l.rsp_seen >= kRingSlots)
		return ExecResult::Stall; // ring full: the next answer frees a slot

	SoftDevice &dev = qp.sdev;
	const bool is_read = w.opcode == WrOpcode::RdmaRead;
	std::shared_lock g(dev.mr_lock);
	const Sge *sg = qp.sq_sges(slot);
	uint64_t total = w.inline_len;
	if (!w.inline_len) {
		uint32_t need = is_read ? ACCESS_LOCAL_WRITE |
		                              (dev.is_iwarp() ? uint32_t{ACCESS_REMOTE_WRITE} : 0u)
		                        : 0u;
		WcStatus st = check_local_sges(dev, qp.spd, sg, w.num_sge, need, &total);
		if (st != WcStatus::Success) {
			g.unlock();
			return complete_now(st);
		}
	}
	RingReq &d = l.my_req[qp.tx_psn % kRingSlots];
	uint8_t flags = (w.flags & SEND_SOLICITED) ? kRingSolicited : 0;
	uint64_t region = 0, off = 0;
	w.shm = false;
	w.staged = 0;
	if (total && total <= kRingInline && !is_read) {
		// Small payloads ride in the slot itself.
		Cursor dst = Cursor::flat(d.data, total);
		Cursor src = w.inline_len ? Cursor::flat(qp.sq_inl(slot), w.inline_len)
		                          : Cursor::sges(dev, sg, w.num_sge);
		cursor_copy(dst, src, total);
		flags |= kRingInlineData;
	} else if (total) {
		// In one region the peer can map: it copies from (or, READ, into) it directly.
		const DmaRegion *r =
		    w.inline_len ? nullptr : shm_of(dev, sg, w.num_sge, total, &off, 1);
		if (r && announce(*c, *r)) {
			region = r->id();
			w.shm = true;
		} else {
			switch (stage_take(*c, l, total, w, &region, &off)) {
			case StageRes::Ok:
				break;
			case StageRes::Wait:
				return ExecResult::Stall;
			case StageRes::Fail:
				g.unlock();
				return complete_now(WcStatus::LocLenErr);
			}
			if (!is_read) {
				Stage &s = *stage_of(l, w);
				Cursor dst =
				    Cursor::flat(static_cast<uint8_t *>(s.r->addr()) + off, total);
				Cursor src = w.inline_len
				                 ? Cursor::flat(qp.sq_inl(slot), w.inline_len)
				                 : Cursor::sges(dev, sg, w.num_sge);
				cursor_copy(dst, src, total);
			}
		}
		flags |= kRingRegion;
	}
	g.unlock();
	d.seq = qp.tx_psn;
	d.op = static_cast<uint8_t>(ring_op(w.opcode));
	d.flags = flags;
	d.len = static_cast<uint32_t>(total);
	d.rkey = w.rkey;
	d.va = w.remote_addr;
	d.imm = w.opcode == WrOpcode::SendWithInv ? w.inv_rkey : w.imm;
	d.region = region;
	d.off = off;
	w.psn = qp.tx_psn++;
	if (is_read) {
		qp.rd_inflight++;
		if (qp.rd_inflight > qp.ctr.max_rd_inflight.load(std::memory_order_relaxed))
			qp.ctr.max_rd_inflight.store(qp.rd_inflight, std::memory_order_relaxed);
	}
	return ExecResult::Pending;
}

// The answers to our requests, in order; then an RNR NAK, if one came.
static bool take_answers(SoftQp &qp, SockConn &c, ShmLink &l)
{
	// The NAK count first: the responder publishes done before it (shm_ring.h, step 3).
	const uint32_t naks = l.peek(l.peer->rnr_naks);
	const uint32_t done = l.peek(l.peer->done);
	if (done - l.rsp_seen > l.published - l.rsp_seen)
		return protocol_error(qp, c, "answers to requests never sent");
	while (l.rsp_seen != done) {
		RingRsp a;
		std::memcpy(&a, &l.peer_rsp[l.rsp_seen % kRingSlots], sizeof(a));
		if (a.seq != l.rsp_seen || a.status == 0 ||
		    a.status >= static_cast<uint8_t>(RingStatus::Max) ||
		    a.status == static_cast<uint8_t>(RingStatus::Rnr))
			return protocol_error(qp, c, "malformed answer");
		l.rsp_seen++;
		// In ERR every WR in flight is flushed (IB spec 10.3.1), whatever the responder
		// says about it later.
		if (qp.state() == QpState::Err)
			continue;
		if (qp.sq_acked == qp.sq_next)
			return protocol_error(qp, c, "answer with nothing in flight");
		const uint32_t slot = qp.sq_acked;
		SendWqe &w = qp.sq[slot % qp.sq_depth];
		if (w.psn != a.seq)
			return protocol_error(qp, c, "answer out of order");
		const bool is_read = w.opcode == WrOpcode::RdmaRead;
		Reply rep;
		switch (static_cast<RingStatus>(a.status)) {
		case RingStatus::Ack:
			rep = Reply::Ack;
			break;
		case RingStatus::InvReq:
			rep = Reply::NakInvReq;
			break;
		case RingStatus::Access:
			rep = Reply::NakAccess;
			break;
		case RingStatus::Op:
			rep = Reply::NakOp;
			break;
		default:
			rep = Reply::PeerGone;
			break;
		}
		if (rep == Reply::Ack && a.len != (is_read ? w.length : 0))
			return protocol_error(qp, c, "answer length");
		WcStatus local = WcStatus::Success;
		if (rep == Reply::Ack && is_read && w.staged && a.len) {
			// The READ landed in our staging ring: on to the WR's own SGEs, which
			// must still be there (an MR invalidated meanwhile: local protection).
			std::shared_lock g(qp.sdev.mr_lock);
			uint64_t tot = 0;
			local = check_local_sges(qp.sdev, qp.spd, qp.sq_sges(slot), w.num_sge,
			                         ACCESS_LOCAL_WRITE, &tot);
			if (local == WcStatus::Success) {
				Stage &s = *stage_of(l, w);
				Cursor dst = Cursor::sges(qp.sdev, qp.sq_sges(slot), w.num_sge);
				Cursor src = Cursor::flat(
				    static_cast<uint8_t *>(s.r->addr()) + w.stage_off, a.len);
				cursor_copy(dst, src, a.len);
			}
		}
		if (is_read)
			qp.rd_inflight--;
		stage_give_back(l, w);
		if (local != WcStatus::Success) {
			qp.complete_send(slot, local, 0);
			qp.to_error(nullptr);
		} else {
			qp.finish_req(slot, rep, is_read ? a.len : w.length);
		}
		qp.sq_acked++;
		// The REG_MRs and LOCAL_INVs executed behind it complete now, in order.
		qp.retire_local();
	}
	if (naks == l.rnr_seen)
		return true;
	if (naks != l.rnr_seen + 1 || l.rnr_pending || l.rsp_seen == l.published)
		return protocol_error(qp, c, "RNR NAK out of turn");
	RingRsp a;
	std::memcpy(&a, &l.peer_rsp[l.rsp_seen % kRingSlots], sizeof(a));
	if (a.seq != l.rsp_seen || a.status != static_cast<uint8_t>(RingStatus::Rnr))
		return protocol_error(qp, c, "malformed RNR NAK");
	l.rnr_seen++;
	if (qp.state() == QpState::Err)
		return true; // flushed: no retry
	const uint32_t slot = qp.sq_acked;
	if (qp.sq_acked == qp.sq_next || qp.sq[slot % qp.sq_depth].psn != a.seq)
		return protocol_error(qp, c, "RNR NAK for a request not in flight");
	// The NAKed request and those behind it wait in the ring; the retry is a signal.
	if (qp.rnr_wait(slot, rnr_timer_usec(a.rnr_timer)) == ExecResult::Done) {
		// Retries exhausted: the WR failed and the QP is in ERR (the rest flush).
		SendWqe &w = qp.sq[slot % qp.sq_depth];
		if (w.opcode == WrOpcode::RdmaRead)
			qp.rd_inflight--;
		qp.sq_acked++;
		qp.retire_local();
	} else {
		l.rnr_pending = true;
	}
	return true;
}

// ---------------------------------------------------------------------------------------------
// Responder

// Socket packets on a ring connection: only what conn_read handles itself belongs there.
static bool no_packets(SoftQp &, SockConn &, const PktHdr &, const uint8_t *)
{
	return false;
}

static RingStatus status_of(Reply r)
{
	switch (r) {
	case Reply::Ack:
		return RingStatus::Ack;
	case Reply::NakInvReq:
		return RingStatus::InvReq;
	case Reply::NakAccess:
		return RingStatus::Access;
	case Reply::NakOp:
		return RingStatus::Op;
	default:
		return RingStatus::Gone;
	}
}

// Answer request l.rx and move on.
static void answer(ShmLink &l, RingStatus st, uint32_t len)
{
	RingRsp &a = l.my_rsp[l.rx % kRingSlots];
	a.seq = l.rx;
	a.status = static_cast<uint8_t>(st);
	a.rnr_timer = 0;
	a.len = len;
	l.rx++;
}

// Execute one checked request. false: RNR (the caller holds).
static bool execute(SoftQp &qp, ShmLink &l, const RingReq &d, uint8_t *src, uint8_t *sink)
{
	const RingOp op = static_cast<RingOp>(d.op);
	const bool sol = d.flags & kRingSolicited;
	RespResult rr;
	{
		std::shared_lock g(qp.sdev.mr_lock);
		Cursor from = Cursor::flat(src, d.len);
		switch (op) {
		case RingOp::Send:
			rr = qp.resp_send(from, d.len, WrOpcode::Send, 0, 0, sol, qp.dest_qpn);
			break;
		case RingOp::SendImm:
			rr = qp.resp_send(from, d.len, WrOpcode::SendWithImm, d.imm, 0, sol,
			                  qp.dest_qpn);
			break;
		case RingOp::SendInv:
			rr = qp.resp_send(from, d.len, WrOpcode::SendWithInv, 0, d.imm, sol,
			                  qp.dest_qpn);
			break;
		case RingOp::Write:
		case RingOp::WriteImm:
			rr = qp.resp_write(from, d.len, d.va, d.rkey, op == RingOp::WriteImm, d.imm,
			                   qp.dest_qpn, sol);
			break;
		default: {
			Cursor to = Cursor::flat(sink, d.len);
			rr = qp.resp_read(to, d.len, d.va, d.rkey);
			break;
		}
		}
	}
	if (rr.reply == Reply::RnrNak) {
		RingRsp &a = l.my_rsp[l.rx % kRingSlots];
		a.seq = l.rx;
		a.status = static_cast<uint8_t>(RingStatus::Rnr);
		a.rnr_timer = qp.min_rnr_timer.load();
		a.len = 0;
		return false;
	}
	qp.finish_resp(rr);
	answer(l, status_of(rr.reply), op == RingOp::Read && rr.reply == Reply::Ack ? d.len : 0);
	return true;
}

static bool serve_requests(SoftQp &qp, SockConn &c, ShmLink &l, int budget)
{
	// The peer's QP is in ERR: none of its requests executes any more, and it hears so.
	if (!l.peer_err && l.peek(l.peer->err)) {
		l.peer_err = true;
		l.publish(l.me->err_ack, 1);
		l.dirty = true;
	}
	if (l.hold) {
		const uint32_t r = l.peek(l.peer->rnr_retries);
		if (r == l.naks)
			l.hold = false; // execute the NAKed request again
		else if (r != l.naks - 1)
			return protocol_error(qp, c, "RNR retry never NAKed");
		else if (!l.peer_err)
			return true;
		l.hold = false; // the peer gave up: what waits is answered "gone"
	}
	const uint32_t prod = l.peek(l.peer->req_prod);
	if (prod - l.rx > kRingSlots)
		return protocol_error(qp, c, "request index out of range");
	for (int n = 0; l.rx != prod; n++) {
		if (n == budget) {
			qp.more = true;
			break;
		}
		RingReq d;
		std::memcpy(&d, &l.peer_req[l.rx % kRingSlots], offsetof(RingReq, data));
		const bool inl = d.flags & kRingInlineData, reg = d.flags & kRingRegion;
		if (d.seq != l.rx || d.op == 0 || d.op >= static_cast<uint8_t>(RingOp::Max) ||
		    (d.flags & ~kRingFlagsMask) || (inl && reg) || d.len > 0x80000000u ||
		    (inl && (d.len > kRingInline || d.op == static_cast<uint8_t>(RingOp::Read))) ||
		    (!inl && !reg && d.len) || (d.len == 0 && (inl || reg)))
			return protocol_error(qp, c, "malformed request");
		uint8_t *mem = nullptr;
		if (reg) {
			const Mapped *m = c.region(d.region);
			if (!m) {
				// Its Region packet left before the request was published: read it.
				if (!conn_read(qp, c, no_packets))
					return false;
				m = c.region(d.region);
			}
			if (!m || d.off > m->len || d.len > m->len - d.off)
				return protocol_error(qp, c,
				                      "request names memory it never passed");
			mem = m->p + d.off;
		} else if (inl) {
			mem = const_cast<uint8_t *>(l.peer_req[l.rx % kRingSlots].data);
		}
		const QpState st = qp.state();
		if (l.peer_err ||
		    (st != QpState::Rtr && st != QpState::Rts && st != QpState::Sqe)) {
			// A responder that takes no requests answers "gone", so that the peer's
			// WRs end instead of waiting forever.
			answer(l, RingStatus::Gone, 0);
			continue;
		}
		if (!execute(qp, l, d, mem, mem)) {
			// RNR: hold here until the requester's retry (shm_ring.h, step 3).
			l.publish(l.me->done, l.rx);
			l.done_pub = l.rx;
			l.publish(l.me->rnr_naks, ++l.naks);
			l.hold = true;
			l.dirty = true;
			break;
		}
		if (d.len >= kPublishEarly) {
			l.publish(l.me->done, l.rx); // large copies: the requester moves on now
			l.done_pub = l.rx;
			l.kick();
		}
	}
	return true;
}

// ---------------------------------------------------------------------------------------------
// Service (engine, at the start of SoftQp::process)

void shm_service(SoftQp &qp)
{
	SockConn *c = qp.conn.get();
	if (!c || !c->link)
		return;
	if (c->dead) {
		conn_lost(qp, *c);
		return;
	}
	ShmLink &l = *c->link;
	// The socket only when the engine saw it readable (Region packets, DISCONNECT, EOF)
	// or has a backlog to write: no system call per turn.
	if (c->rx_ready.exchange(false, std::memory_order_relaxed)) {
		{
			std::lock_guard g(c->tx_lock);
			conn_flush_locked(*c);
		}
		update_pollout(*c);
		if (!conn_read(qp, *c, no_packets))
			return;
	}
	const uint32_t seen = l.rsp_seen, rx = l.rx;
	if (!take_answers(qp, *c, l))
		return;
	// The RNR timer has passed: ask for the NAKed request again.
	if (l.rnr_pending && Clock::now() >= qp.rnr_until) {
		l.rnr_pending = false;
		l.publish(l.me->rnr_retries, ++l.retries);
		l.dirty = true;
	}
	if (!serve_requests(qp, *c, l, 64))
		return;
	if (seen != l.rsp_seen || rx != l.rx || qp.sq_acked != qp.sq_next)
		qp.engine.wire_active();
}

bool shm_quiesced(SoftQp &qp)
{
	SockConn *c = qp.conn.get();
	if (!c || !c->link || c->dead)
		return true; // a dead peer writes nothing
	ShmLink &l = *c->link;
	if (!l.quiesce.sent) {
		l.publish(l.me->err, 1);
		l.kick();
		if (l.quiesce.start(qp, qp.tx_psn != l.rsp_seen))
			return true;
	}
	return l.quiesce.finished(qp, "ring", l.peek(l.peer->err_ack));
}

void shm_flushed(SoftQp &qp)
{
	SockConn *c = qp.conn.get();
	if (!c || !c->link)
		return;
	ShmLink &l = *c->link;
	l.stage.tail = l.stage.head;
	l.big.tail = l.big.head;
	l.rnr_pending = false;
}

void shm_flush(SoftQp &qp)
{
	SockConn *c = qp.conn.get();
	if (!c || !c->link)
		return;
	ShmLink &l = *c->link;
	if (l.published != qp.tx_psn) {
		l.publish(l.me->req_prod, qp.tx_psn);
		l.published = qp.tx_psn;
		l.dirty = true;
	}
	if (l.done_pub != l.rx) {
		l.publish(l.me->done, l.rx);
		l.done_pub = l.rx;
		l.dirty = true;
	}
	if (l.dirty) {
		l.dirty = false;
		l.kick();
	}
	bool backlog;
	{
		std::lock_guard g(c->tx_lock);
		backlog = c->txbuf.size() != c->tx_off;
		if (backlog)
			conn_flush_locked(*c);
	}
	if (backlog || c->want_out)
		update_pollout(*c); // EPOLLOUT while a Region or DISCONNECT waits
}

} // namespace ulp::soft
