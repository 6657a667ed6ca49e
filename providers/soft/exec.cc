// SPDX-License-Identifier: MIT
// providers/soft/exec.cc - executing work requests: requester, responder, completion, flush.
//
// The requester runs on its QP's engine. On the in-process wire it executes the
// responder's half itself, under the responder's locks, like a NIC DMAing into the peer's
// memory, whether the responder's QP runs on another engine of this device, on another
// device's, or on the same engine; on the socket wire it transmits packets and completes on
// the reply. Either way
// the responder's rules live in one place, the resp_* functions below.
#include "core/log.h"
#include "providers/soft/shm_wire.h"
#include "providers/soft/sock_wire.h"
#include "providers/soft/soft_internal.h"

#include <cerrno>

namespace ulp::soft
{

static WcOpcode wc_opcode(WrOpcode op)
{
	switch (op) {
	case WrOpcode::RdmaWrite:
	case WrOpcode::RdmaWriteWithImm:
		return WcOpcode::RdmaWrite;
	case WrOpcode::RdmaRead:
		return WcOpcode::RdmaRead;
	case WrOpcode::LocalInv:
		return WcOpcode::LocalInv;
	case WrOpcode::RegMr:
		return WcOpcode::RegMr;
	default:
		return WcOpcode::Send;
	}
}

static bool is_error(WcStatus s)
{
	return s != WcStatus::Success && s != WcStatus::WrFlushErr;
}

void SoftQp::complete_send(uint32_t slot, WcStatus st, uint32_t byte_len)
{
	const SendWqe &w = sq[slot % sq_depth];
	const bool signaled =
	    sig_type == SigType::AllWr || (w.flags & SEND_SIGNALED) || st != WcStatus::Success;
	if (st == WcStatus::WrFlushErr) {
		ctr.add(ctr.flushes, 1);
	} else if (is_error(st)) {
		ctr.add(ctr.errors, 1);
	}
	if (signaled) {
		Wc wc;
		wc.wr_cqe = w.wr_cqe;
		wc.status = st;
		wc.opcode = wc_opcode(w.opcode);
		wc.byte_len = byte_len;
		wc.qp = this;
		wc.qp_num = qp_num();
		// The slot (and every unsignaled one before it) is free before anyone can see
		// the completion: a poster that counts free slots by the completions it polled,
		// as on hardware, must never meet a full queue. Only after the WQE has been read:
		// from here on post_send may reuse the slot.
		sq_tail.store(slot + 1, std::memory_order_release);
		uint32_t delay = 0;
		bool drop = false;
		if (sdev.faults.armed.load(std::memory_order_relaxed)) {
			drop = sdev.fault(FaultPoint::DropCompletion, qp_num(), nullptr, &w.opcode);
			if (!drop &&
			    sdev.fault(FaultPoint::DelayCompletion, qp_num(), &delay, &w.opcode) &&
			    delay) {
				auto *cq = static_cast<SoftCq *>(send_cq());
				engine.add_timer(this,
				                 Clock::now() + std::chrono::microseconds(delay),
				                 [this, cq, wc] {
					                 cq->push(wc, false);
					                 ctr.add(ctr.completed, 1);
				                 });
				drop = true;
			}
		}
		if (!drop) {
			static_cast<SoftCq *>(send_cq())->push(wc, false);
			ctr.add(ctr.completed, 1);
		}
	}
}

void SoftQp::to_error(const EventType *ev)
{
	{
		std::lock_guard g(state_lock);
		QpState cur = state();
		if (cur == QpState::Reset)
			return;
		attr.qp_state = QpState::Err;
		state_.store(QpState::Err, std::memory_order_release);
		if (cur == QpState::Err) {
			ev = nullptr; // one event per transition
		}
	}
	if (ev) {
		AsyncEvent e;
		e.event = *ev;
		e.device = &sdev;
		e.qp = this;
		report_event(e);
	}
	flush_pending.store(true, std::memory_order_release);
	engine.schedule(this);
}

void SoftQp::flush_all()
{
	flush_pending.store(false, std::memory_order_relaxed);
	// Send queue: everything not yet completed, in order (in flight first).
	uint32_t head = sq_head.load(std::memory_order_acquire);
	for (uint32_t s = sq_acked; s != head; s++) {
		SendWqe &w = sq[s % sq_depth];
		// An executed local WR that failed reports its own error.
		const bool own = w.local_pending && w.local_st != WcStatus::Success;
		w.local_pending = false;
		complete_send(s, own ? w.local_st : WcStatus::WrFlushErr, 0);
	}
	sq_next = sq_acked = head;
	rd_inflight = 0;
	// Receive queue.
	if (!srq()) {
		std::unique_lock g(rq_lock);
		while (rq.tail != rq.head) {
			Wc wc;
			wc.wr_cqe = rq.wqe[rq.tail % rq.depth].wr_cqe;
			wc.status = WcStatus::WrFlushErr;
			wc.opcode = WcOpcode::Recv;
			wc.qp = this;
			wc.qp_num = qp_num();
			rq.tail++;
			g.unlock();
			static_cast<SoftCq *>(recv_cq())->push(wc, false);
			ctr.add(ctr.flushes, 1);
			ctr.add(ctr.completed, 1);
			g.lock();
		}
	} else if (!last_wqe_sent && (sdev.attr().device_cap_flags & DEVICE_LAST_WQE_EVENT)) {
		// IB spec 11.6.3.5 (C11-34.2.1): a QP on an SRQ that enters ERR reports Last WQE
		// Reached once no more receive completions can be generated for it. The
		// iWARP-like profile, like rxe and siw, never does: drain must bound its wait.
		last_wqe_sent = true;
		AsyncEvent e;
		e.event = EventType::QpLastWqeReached;
		e.device = &sdev;
		e.qp = this;
		report_event(e);
	}
}

// The wire's end of a turn: write (socket) or publish (rings) what the turn produced.
static void wire_flush(SoftQp &qp)
{
	if (qp.wire == WireKind::Socket)
		sock_flush(qp);
	else if (qp.wire == WireKind::Shm)
		shm_flush(qp);
}

bool ErrQuiesce::start(SoftQp &qp, bool unanswered)
{
	sent = true;
	if (!unanswered)
		return true; // nothing of ours the peer could still touch
	wait = true;
	deadline = Clock::now() + kErrAckWait;
	qp.engine.add_timer(&qp, deadline, [&qp] { qp.engine.schedule(&qp); });
	return false;
}

bool ErrQuiesce::finished(SoftQp &qp, const char *wire, bool acked)
{
	if (!wait)
		return true;
	if (!acked && Clock::now() < deadline)
		return false;
	if (!acked)
		ULP_LOG(Warn, Soft,
		        "{} wire: peer of QP {} did not stop executing our requests within {} ms; "
		        "flushing",
		        wire, qp.qp_num(),
		        std::chrono::duration_cast<std::chrono::milliseconds>(kErrAckWait).count());
	wait = false;
	return true;
}

// QP in ERR: whether its WRs may be flushed now (the wire's peer can no longer touch
// their memory). The in-process wire executes on this engine: nothing is left behind.
static bool wire_quiesced(SoftQp &qp)
{
	if (qp.wire == WireKind::Socket)
		return sock_quiesced(qp);
	if (qp.wire == WireKind::Shm)
		return shm_quiesced(qp);
	return true;
}

int SoftQp::process(int budget)
{
	// The peer is served in every state but RESET/INIT: a responder in RTR takes
	// requests, and one in ERR still answers them ("gone"), so that its peer's WRs
	// end instead of waiting forever.
	const bool sock = wire == WireKind::Socket, shm = wire == WireKind::Shm;
	QpState st = state();
	if (st != QpState::Reset && st != QpState::Init) {
		if (sock)
			sock_service(*this);
		else if (shm)
			shm_service(*this);
	}
	if (flush_pending.load(std::memory_order_acquire) || state() == QpState::Err) {
		if (state() == QpState::Err) {
			// The cross-process wires flush once the peer can no longer touch our
			// memory (a WR's buffer is the consumer's again at its completion).
			if (!wire_quiesced(*this)) {
				wire_flush(*this);
				return 1;
			}
			flush_all();
			if (shm)
				shm_flushed(*this);
			wire_flush(*this);
			return 1;
		}
		flush_pending.store(false);
	}
	if (state() != QpState::Rts) {
		wire_flush(*this);
		return 0;
	}
	int done = 0;
	while (done < budget) {
		uint32_t head = sq_head.load(std::memory_order_acquire);
		if (sq_next == head)
			break;
		if (rnr_until != Clock::time_point{}) {
			if (Clock::now() < rnr_until)
				break; // the RNR timer reschedules us
			rnr_until = {};
		}
		ExecResult r = exec_one(sq_next);
		if (r == ExecResult::Stall)
			break;
		if (r == ExecResult::Done && sq_acked == sq_next)
			sq_acked++;
		sq_next++;
		done++;
		if (state() == QpState::Err)
			break;
	}
	if (state() == QpState::Err) {
		if (wire_quiesced(*this)) {
			flush_all();
			if (shm)
				shm_flushed(*this);
		}
	} else if (done == budget) {
		more = true;
	}
	if (sock || shm) {
		wire_flush(*this);
		if (sq_acked != sq_next || done)
			engine.wire_active();
	}
	return done;
}

// Access the requester needs on its local SGEs for an opcode.
static uint32_t local_access(const SoftDevice &dev, WrOpcode op)
{
	if (op != WrOpcode::RdmaRead)
		return 0;
	// The READ sink is written locally; on iWARP it is the target of a tagged RDMA
	// write from the peer, so its STag needs remote write too (RFC 5040 4.4, and the
	// reason rdma_rw registers iWARP READ sinks with IB_ACCESS_REMOTE_WRITE).
	return ACCESS_LOCAL_WRITE | (dev.is_iwarp() ? uint32_t{ACCESS_REMOTE_WRITE} : 0u);
}

WcStatus SoftQp::exec_local(const SendWqe &w)
{
	std::unique_lock g(sdev.mr_lock);
	if (w.opcode == WrOpcode::LocalInv) {
		uint32_t idx = key_index(w.inv_rkey);
		SoftMr *mr = idx < sdev.mrs.size() ? sdev.mrs[idx] : nullptr;
		// rxe_invalidate_mr: the key must be the MR's current one.
		if (!mr || mr->user || &mr->spd != &spd || mr->key != w.inv_rkey)
			return WcStatus::LocQpOpErr;
		mr->state = MrState::Invalid;
		return WcStatus::Success;
	}
	SoftMr *mr = w.reg_mr;
	// rxe_reg_fast_mr: only a free (invalid) MR, only the key byte may change.
	bool bad_access = (w.reg_access & (ACCESS_REMOTE_WRITE | ACCESS_REMOTE_ATOMIC)) &&
	                  !(w.reg_access & ACCESS_LOCAL_WRITE);
	if (mr->state != MrState::Invalid || key_index(w.reg_key) != mr->index ||
	    &mr->spd != &spd || bad_access || w.reg_page_size < 4096 ||
	    (w.reg_page_size & (w.reg_page_size - 1)))
		return WcStatus::LocQpOpErr;
	auto pl = mr->page_list();
	std::copy(pl.begin(), pl.end(), mr->pages.begin());
	mr->npages = static_cast<uint32_t>(pl.size());
	mr->va = w.reg_iova;
	mr->len = w.reg_len;
	mr->page_shift = static_cast<uint32_t>(__builtin_ctz(w.reg_page_size));
	mr->key = w.reg_key;
	mr->access = w.reg_access;
	mr->state = MrState::Valid;
	return WcStatus::Success;
}

void SoftQp::retire_local()
{
	while (sq_acked != sq_next) {
		SendWqe &w = sq[sq_acked % sq_depth];
		if (!w.local_pending)
			break;
		w.local_pending = false;
		complete_send(sq_acked, w.local_st, 0);
		sq_acked++;
	}
}

ExecResult SoftQp::exec_one(uint32_t slot)
{
	SendWqe &w = sq[slot % sq_depth];
	if (sdev.faults.armed.load(std::memory_order_relaxed)) {
		if (sdev.fault(FaultPoint::QpError, qp_num(), nullptr, &w.opcode)) {
			EventType e = EventType::QpFatal;
			to_error(&e);
			return ExecResult::Stall;
		}
		if (sdev.fault(FaultPoint::CutConnection, qp_num(), nullptr, &w.opcode)) {
			cut_connection(*this);
			return ExecResult::Stall;
		}
	}

	switch (w.opcode) {
	case WrOpcode::LocalInv:
	case WrOpcode::RegMr: {
		// Executed once, in order; an RNR NAK's rewind finds it done.
		const WcStatus st = w.local_pending ? w.local_st : exec_local(w);
		if (sq_acked != slot) {
			// Earlier WRs are in flight: this completion waits for theirs
			// (retire_local), as on hardware; completing it now would also free their
			// send-queue slots (complete_send's sq_tail) while they are unacked.
			w.local_pending = true;
			w.local_st = st;
			if (st != WcStatus::Success)
				to_error(nullptr);
			return ExecResult::Done;
		}
		w.local_pending = false;
		complete_send(slot, st, 0);
		if (st != WcStatus::Success)
			to_error(nullptr);
		return ExecResult::Done;
	}
	default:
		break;
	}

	// A requester with no READ credit (max_rd_atomic 0: rdma_cm's accept gave the QP no
	// initiator depth) never issues a READ. rxe's requester waits for a credit that never
	// comes (rxe_req.c: rd_atomic) until the QP leaves RTS and the WR is flushed; so does
	// this one. The ULP that posted it must bound the wait.
	if (w.opcode == WrOpcode::RdmaRead && max_rd_atomic.load() == 0)
		return ExecResult::Stall;

	if (wire == WireKind::Socket)
		return sock_exec(*this, slot);
	if (wire == WireKind::Shm)
		return shm_exec(*this, slot);

	// In-process wire.
	std::shared_ptr<QpHandle> ph = peer;
	if (!ph) {
		// Nobody answers: transport retries run out (IB spec 9.7.5.1.7).
		complete_send(slot, WcStatus::RetryExcErr, 0);
		to_error(nullptr);
		return ExecResult::Done;
	}
	std::shared_lock hl(ph->lock);
	SoftQp *r = ph->qp;
	QpState rs = r ? r->state() : QpState::Err;
	if (!r || (rs != QpState::Rtr && rs != QpState::Rts && rs != QpState::Sqe)) {
		// A responder in RESET/INIT/ERR drops packets silently.
		hl.unlock();
		complete_send(slot, WcStatus::RetryExcErr, 0);
		to_error(nullptr);
		return ExecResult::Done;
	}

	RespResult rr;
	WcStatus local = WcStatus::Success;
	uint64_t total = w.inline_len;
	{
		MrReadLocks locks(sdev, r->sdev);
		const Sge *sg = sq_sges(slot);
		if (!w.inline_len)
			local = check_local_sges(sdev, spd, sg, w.num_sge,
			                         local_access(sdev, w.opcode), &total);
		if (local == WcStatus::Success) {
			Cursor src = w.inline_len ? Cursor::flat(sq_inl(slot), w.inline_len)
			                          : Cursor::sges(sdev, sg, w.num_sge);
			switch (w.opcode) {
			case WrOpcode::Send:
			case WrOpcode::SendWithImm:
			case WrOpcode::SendWithInv:
				rr = r->resp_send(src, total, w.opcode, w.imm, w.inv_rkey,
				                  w.flags & SEND_SOLICITED, qp_num());
				break;
			case WrOpcode::RdmaWrite:
			case WrOpcode::RdmaWriteWithImm:
				rr = r->resp_write(src, total, w.remote_addr, w.rkey,
				                   w.opcode == WrOpcode::RdmaWriteWithImm, w.imm,
				                   qp_num(), w.flags & SEND_SOLICITED);
				break;
			case WrOpcode::RdmaRead: {
				// One READ is outstanding while it executes on this wire.
				if (!ctr.max_rd_inflight.load(std::memory_order_relaxed))
					ctr.max_rd_inflight.store(1, std::memory_order_relaxed);
				Cursor dst = Cursor::sges(sdev, sg, w.num_sge);
				rr = r->resp_read(dst, total, w.remote_addr, w.rkey);
				break;
			}
			default:
				break;
			}
		}
	}
	if (local != WcStatus::Success) {
		hl.unlock();
		complete_send(slot, local, 0);
		to_error(nullptr);
		return ExecResult::Done;
	}
	if (rr.reply == Reply::RnrNak) {
		hl.unlock();
		return rnr_wait(slot, rnr_timer_usec(r ? r->min_rnr_timer.load() : 12));
	}
	r->finish_resp(rr);
	hl.unlock();
	return finish_req(slot, rr.reply, total);
}

ExecResult SoftQp::rnr_wait(uint32_t slot, uint32_t usec)
{
	SendWqe &w = sq[slot % sq_depth];
	ctr.add(ctr.rnr_naks, 1);
	// IB spec 9.7.5.2.8: rnr_retry 7 retries forever; otherwise each RNR NAK uses one.
	if (w.rnr_left == 0) {
		complete_send(slot, WcStatus::RnrRetryExcErr, 0);
		to_error(nullptr);
		return ExecResult::Done;
	}
	if (w.rnr_left != 7)
		w.rnr_left--;
	rnr_until = Clock::now() + std::chrono::microseconds(usec);
	engine.add_timer(this, rnr_until, [this] { engine.schedule(this); });
	return ExecResult::Stall;
}

ExecResult SoftQp::finish_req(uint32_t slot, Reply reply, uint64_t total)
{
	const SendWqe &w = sq[slot % sq_depth];
	WcStatus st;
	switch (reply) {
	case Reply::Ack:
		st = WcStatus::Success;
		if (w.opcode == WrOpcode::RdmaRead) {
			ctr.add(ctr.bytes_rx, total);
		} else {
			ctr.add(ctr.bytes_tx, total);
		}
		break;
	case Reply::NakInvReq:
		st = WcStatus::RemInvReqErr;
		break;
	case Reply::NakAccess:
		st = WcStatus::RemAccessErr;
		break;
	case Reply::NakOp:
		st = WcStatus::RemOpErr;
		break;
	case Reply::PeerGone:
	default:
		st = WcStatus::RetryExcErr;
		break;
	}
	complete_send(slot, st, w.opcode == WrOpcode::RdmaRead ? static_cast<uint32_t>(total) : 0);
	if (st != WcStatus::Success)
		to_error(nullptr);
	return ExecResult::Done;
}

// ---------------------------------------------------------------------------------------------
// Responder

// Take the next receive WQE (QP or SRQ). false when none: the caller sends an RNR NAK.
bool SoftQp::take_recv(RecvWqe *wqe, Sge *sges)
{
	SoftSrq *s = static_cast<SoftSrq *>(srq());
	bool limit_hit = false;
	{
		std::unique_lock g(s ? s->lock : rq_lock);
		RecvRing &ring = s ? s->ring : rq;
		if (ring.tail == ring.head)
			return false;
		*wqe = ring.wqe[ring.tail % ring.depth];
		std::copy_n(ring.sges(ring.tail), wqe->num_sge, sges);
		ring.tail++;
		if (s && s->limit && ring.used() < s->limit) {
			s->limit = 0; // one-shot (IB spec 10.2.9.3)
			limit_hit = true;
		}
	}
	if (limit_hit && s->event_handler) {
		AsyncEvent e;
		e.event = EventType::SrqLimitReached;
		e.device = &sdev;
		e.srq = s;
		s->event_handler(e);
	}
	return true;
}

static Wc recv_wc(SoftQp &qp, const RecvWqe &wqe, uint32_t src_qpn)
{
	Wc wc;
	wc.wr_cqe = wqe.wr_cqe;
	wc.opcode = WcOpcode::Recv;
	wc.qp = &qp;
	wc.qp_num = qp.qp_num();
	wc.src_qp = src_qpn;
	return wc;
}

RespResult SoftQp::resp_send(Cursor &src, uint64_t len, WrOpcode op, uint32_t imm,
                             uint32_t inv_rkey, bool solicited, uint32_t src_qpn)
{
	RespResult rr;
	RecvWqe wqe;
	Sge sges[kMaxSge];
	if (!take_recv(&wqe, sges)) {
		rr.reply = Reply::RnrNak;
		return rr;
	}
	rr.has_wc = true;
	rr.solicited = solicited;
	rr.wc = recv_wc(*this, wqe, src_qpn);
	uint64_t room = 0;
	WcStatus st = check_local_sges(sdev, spd, sges, wqe.num_sge, ACCESS_LOCAL_WRITE, &room);
	if (st != WcStatus::Success) {
		rr.wc.status = WcStatus::LocProtErr;
		rr.reply = Reply::NakOp;
		rr.to_error = true;
		return rr;
	}
	if (len > room) {
		// IB spec 9.9.3.1.2: the responder completes the receive WQE in error
		// (Local Length Error) and NAKs Invalid Request.
		rr.wc.status = WcStatus::LocLenErr;
		rr.reply = Reply::NakInvReq;
		rr.to_error = true;
		rr.event = EventType::QpReqErr;
		return rr;
	}
	if (op == WrOpcode::SendWithInv) {
		uint32_t idx = key_index(inv_rkey);
		SoftMr *mr = idx < sdev.mrs.size() ? sdev.mrs[idx] : nullptr;
		if (!mr || mr->user || &mr->spd != &spd || mr->key != inv_rkey) {
			rr.wc.status = WcStatus::RemInvReqErr;
			rr.reply = Reply::NakOp;
			rr.to_error = true;
			return rr;
		}
		rr.inv_rkey = inv_rkey;
		rr.wc.wc_flags |= WC_WITH_INVALIDATE;
		rr.wc.invalidate_rkey = inv_rkey;
	}
	Cursor dst = Cursor::sges(sdev, sges, wqe.num_sge);
	cursor_copy(dst, src, len);
	rr.wc.byte_len = static_cast<uint32_t>(len);
	if (op == WrOpcode::SendWithImm) {
		rr.wc.wc_flags |= WC_WITH_IMM;
		rr.wc.imm_data = imm;
	}
	return rr;
}

// The QP's own permission for remote access (IB spec 10.2.4.2, qp_access_flags).
bool SoftQp::remote_ok(uint32_t need) const
{
	return (access_flags.load(std::memory_order_relaxed) & need) == need;
}

RespResult SoftQp::resp_write(Cursor &src, uint64_t len, uint64_t va, uint32_t rkey, bool with_imm,
                              uint32_t imm, uint32_t src_qpn, bool solicited)
{
	RespResult rr;
	SoftMr *mr = nullptr;
	// IB spec C9-88: a zero-length RDMA WRITE does not validate the R_Key.
	if (len) {
		mr = check_remote(sdev, spd, rkey, va, len, ACCESS_REMOTE_WRITE);
		if (sdev.faults.armed.load(std::memory_order_relaxed) &&
		    sdev.fault(FaultPoint::RkeyCheck, qp_num()))
			mr = nullptr;
		if (!mr || !remote_ok(ACCESS_REMOTE_WRITE)) {
			rr.reply = Reply::NakAccess;
			rr.to_error = true;
			rr.event = EventType::QpAccessErr;
			return rr;
		}
	}
	RecvWqe wqe;
	Sge sges[kMaxSge];
	if (with_imm && !take_recv(&wqe, sges)) {
		rr.reply = Reply::RnrNak;
		return rr;
	}
	if (len) {
		Cursor dst = Cursor::mr(*mr, va, len);
		cursor_copy(dst, src, len);
		ctr.add(ctr.bytes_rx, len);
	}
	if (with_imm) {
		rr.has_wc = true;
		rr.solicited = solicited;
		rr.wc = recv_wc(*this, wqe, src_qpn);
		rr.wc.opcode = WcOpcode::RecvRdmaWithImm;
		rr.wc.byte_len = static_cast<uint32_t>(len);
		rr.wc.wc_flags = WC_WITH_IMM;
		rr.wc.imm_data = imm;
	}
	return rr;
}

RespResult SoftQp::resp_read(Cursor &dst, uint64_t len, uint64_t va, uint32_t rkey)
{
	RespResult rr;
	if (!len)
		return rr; // C9-88
	SoftMr *mr = check_remote(sdev, spd, rkey, va, len, ACCESS_REMOTE_READ);
	if (sdev.faults.armed.load(std::memory_order_relaxed) &&
	    sdev.fault(FaultPoint::RkeyCheck, qp_num()))
		mr = nullptr;
	if (!mr || !remote_ok(ACCESS_REMOTE_READ)) {
		rr.reply = Reply::NakAccess;
		rr.to_error = true;
		rr.event = EventType::QpAccessErr;
		return rr;
	}
	Cursor src = Cursor::mr(*mr, va, len);
	cursor_copy(dst, src, len);
	ctr.add(ctr.bytes_tx, len);
	return rr;
}

void SoftQp::finish_resp(RespResult &rr)
{
	if (rr.inv_rkey) {
		std::unique_lock g(sdev.mr_lock);
		SoftMr *mr = sdev.mrs[key_index(rr.inv_rkey)];
		if (mr && mr->key == rr.inv_rkey)
			mr->state = MrState::Invalid;
	}
	if (rr.has_wc) {
		if (rr.wc.status == WcStatus::Success) {
			ctr.add(ctr.bytes_rx, rr.wc.opcode == WcOpcode::Recv ? rr.wc.byte_len : 0);
		} else {
			ctr.add(ctr.errors, 1);
		}
		ctr.add(ctr.completed, 1);
		static_cast<SoftCq *>(recv_cq())->push(rr.wc, rr.solicited);
	}
	if (rr.to_error)
		to_error(&rr.event);
}

} // namespace ulp::soft
