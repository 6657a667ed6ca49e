// SPDX-License-Identifier: MIT
// iser/target/conn.cc - one iSER connection, target side (see conn.h): setup, receives,
// sends, RDMA READ of write data, RDMA WRITE of read data, teardown.
#include "iser/target/conn.h"

#include "core/lock_assert.h"
#include "core/log.h"
#include "scsi/core.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace ulp::iser
{

using namespace iscsi;
using namespace iscsi::target;

namespace
{

// RDMA READs one context may need at most: its scatter table is one contiguous block.
constexpr uint32_t kRwMaxSge = 32;

} // namespace

Conn::~Conn()
{
	Conn::release_resources();
}

int Conn::setup(Pd &pd, DmaHeap &heap, const IserCmHdr &ch, std::string *why)
{
	heap_ = &heap;
	Device &dev = pd.device();
	const DeviceAttr &da = dev.attr();
	const PortalConfig &cfg = portal_.iser_cfg();
	const uint32_t window = portal_.target().cfg().cmd_window;
	const uint32_t nrecv = window + kImmediateSlots + cfg.extra_recvs;
	const uint32_t nsend = cfg.send_ring ? cfg.send_ring : window + 32;

	// Buffers: iSER header + BHS + the largest AHS + data (receive: what we declared as
	// TargetRecvDataSegmentLength, at least a login PDU's 8192).
	const size_t recv_size =
	    kIserHdrLen + kBhsLen + kMaxAhsLen + std::max(cfg.recv_dsl, kDefaultMrdsl);
	send_size_ = kIserHdrLen + kBhsLen + std::max(cfg.send_dsl, kDefaultMrdsl) + 8;
	int rc = recvs_.init(pd, recv_size, nrecv, [this](RxDesc &d) {
		d.cqe.done = recv_done;
		d.conn = this;
	});
	if (!rc)
		rc = sends_.init(pd, send_size_, nsend, [this](TxDesc &d) {
			d.cqe.done = send_done;
			d.piece.unsent = send_unsent;
			d.conn = this;
		});
	if (rc) {
		*why = std::string("buffers: ") + std::strerror(-rc);
		return rc;
	}

	// The QP: rw contexts for every command of the window (one READ or WRITE each), a
	// send queue for the send ring, +1 send and +1 receive WR for drain.
	QpInitAttr qa;
	qa.cap.max_send_wr = nsend + 1;
	qa.cap.max_recv_wr = nrecv + 1;
	qa.cap.max_send_sge = std::min(da.max_sge, kRwMaxSge);
	qa.cap.max_recv_sge = 1;
	// Contexts live while a command fetches data or sends it, response included: up to
	// the window, the immediate slots and a window of commands whose status is going
	// out (Conn's pool).
	qa.cap.max_rdma_ctxs = 2 * window + kImmediateSlots;
	qa.sq_sig_type = SigType::ReqWr;
	qa.qp_context = static_cast<rdma::PortalConn *>(this);
	RwQpOptions ro;
	ro.max_pages = uint32_t(std::min<size_t>(cfg.max_io, heap.max_alloc()) / 4096);
	ro.max_entries = 1; // a command's buffer is one DmaHeap block
	if (int err = create_qp(pd, qa, &ro, why); err != 0)
		return err;
	// SEND_WITH_INV for responses: the initiator must allow it (it registers every
	// buffer) and the device must have it (RFC 7145 8.3.2).
	send_inv_ = !(ch.flags & ISER_SEND_W_INV_NOT_SUP) &&
	            (da.device_cap_flags & DEVICE_MEM_MGT_EXTENSIONS);
	// RFC 7145 5.1.2: receives are posted before the connection is accepted, so before
	// the initiator can send its first login request.
	if (int err = recvs_.post_all(*qp()); err != 0) {
		*why = std::string("post_recv: ") + std::strerror(-err);
		return err;
	}
	return 0;
}

void Conn::release_resources()
{
	for (auto &x : ctxs_)
		destroy_rw(x.get());
	// The RDMA half (rw contexts' MR pool, QP, CQ) first: nothing may complete into the
	// rings once their buffers go.
	rdma::PortalConn::release_resources();
	recvs_.release();
	sends_.release();
}

void Conn::post_recv(RxDesc *d)
{
	if (int rc = recvs_.post(*qp(), *d); rc != 0 && !closed_)
		on_transport_error(std::string("post_recv: ") + std::strerror(-rc));
}

void Conn::recv_done(Cq *, Wc *wc)
{
	RxDesc *d = rdma::RecvRing<RxDesc>::from(wc);
	d->conn->enter([&] { d->conn->handle_recv(d, *wc); });
}

void Conn::handle_recv(RxDesc *d, const Wc &wc)
{
	ULP_ASSERT_HELD(*this); // the serialiser: a connection's work is its holder's
	if (wc.status != WcStatus::Success) {
		// A flush we did not cause (no close_transport yet) is a QP that left RTS on its
		// own (a fatal error): the connection is as dead as after any other error. Once
		// closing, on_transport_error changes nothing.
		on_transport_error(std::string("receive: ") + wc_status_str(wc.status));
		return;
	}
	if (closed_)
		return;
	std::span<const uint8_t> in(static_cast<const uint8_t *>(d->buf->addr), wc.byte_len);
	IserHdr ih;
	Pdu pdu;
	PduError pe;
	if (std::string why; !parse_iser_message(in, max_recv_dsl(), &ih, &pdu, &pe, &why)) {
		on_transport_error(why);
		return;
	}
	last_iser_ = ih;
	on_pdu(pdu, pe);
	// The PDU has been taken apart (data copied where it belongs): the buffer goes back
	// to the receive queue now, before any response returns this credit (RFC 7145 8.1).
	if (!closed_)
		post_recv(d);
}

void Conn::fill_send(TxDesc *d, OutPdu *p)
{
	// iSER header (a control-type PDU; the target sends no STags) + the PDU. No padding:
	// RFC 7145 7.2 lets the SEND end after the data segment.
	auto *b = static_cast<uint8_t *>(d->buf->addr);
	IserHdr ih;
	build_iser_hdr(ih, std::span<uint8_t, kIserHdrLen>(b, kIserHdrLen));
	size_t n = kIserHdrLen;
	std::memcpy(b + n, p->hdr, p->hdr_len);
	n += p->hdr_len;
	if (!p->data.empty())
		std::memcpy(b + n, p->data.data(), p->data.size());
	n += p->data.size();
	d->pdu = p;
	rdma::prepare_send(*d, uint32_t(n));
	// The status of a command that had STags invalidates one of them on the way
	// (SEND_WITH_INV: the read STag if any, else the write STag).
	IscsiCmd *c = p->cmd;
	const IserHdr *h = c && c->xprt ? &static_cast<CmdCtx *>(c->xprt)->hdr : nullptr;
	if (send_inv_ && h && p->last_of_cmd && !c->local && (h->rsv || h->wsv)) {
		d->wr.opcode = WrOpcode::SendWithInv;
		d->wr.invalidate_rkey = h->rsv ? h->read_stag : h->write_stag;
		portal_.count(&PortalStats::send_inv);
	}
}

void Conn::queue_pdu(OutPdu *p)
{
	ULP_ASSERT_HELD(*this); // the serialiser: a connection's work is its holder's
	if (closed_) {
		pdu_done(p, false);
		return;
	}
	if (p->hdr_len + p->data.size() + kIserHdrLen > send_size_) {
		// Conn never builds a PDU larger than the negotiated lengths; this is a bug.
		ULP_LOG(Error, Iser, "a {}-byte PDU does not fit a send buffer",
		        p->hdr_len + p->data.size());
		pdu_done(p, false);
		on_transport_error("PDU larger than a send buffer");
		return;
	}
	TxDesc *d = sends_.get();
	if (!d) {
		pending_.push_back(p);
		return;
	}
	fill_send(d, p);
	// With whatever else this turn sends on the connection: one post_send at its end
	// (rdma_conn/send_plug.h).
	post_plugged(&d->piece, &d->wr);
}

void Conn::plug_failed(int rc)
{
	on_transport_error(std::string("post_send: ") + std::strerror(-rc));
}

void Conn::send_unsent(rdma::PlugPiece *piece)
{
	// As send_done of a SEND that failed: the connection is closing already (plug_failed).
	TxDesc *d = container_of(piece, &TxDesc::piece);
	Conn *c = d->conn;
	OutPdu *p = d->pdu;
	d->pdu = nullptr;
	c->sends_.put(d);
	if (p) {
		if (p->cmd && p->last_of_cmd && p->cmd->xprt)
			c->destroy_rw(static_cast<CmdCtx *>(p->cmd->xprt));
		c->pdu_done(p, false);
	}
}

void Conn::read_unsent(rdma::PlugPiece *piece)
{
	CmdCtx *x = container_of(piece, &CmdCtx::piece);
	x->conn->destroy_rw(x);
	x->conn->data_transfer_failed(x->cmd);
}

void Conn::send_done(Cq *, Wc *wc)
{
	TxDesc *d = rdma::SendRing<TxDesc>::from(wc);
	Conn *c = d->conn;
	c->enter([&] {
		OutPdu *p = d->pdu;
		d->pdu = nullptr;
		c->sends_.put(d);
		const bool ok = wc->status == WcStatus::Success;
		if (!ok)
			c->on_transport_error(std::string("send: ") + wc_status_str(wc->status));
		if (p) {
			// A read response's RDMA WRITEs went before it: the context is done.
			if (p->cmd && p->last_of_cmd && p->cmd->xprt)
				c->destroy_rw(static_cast<CmdCtx *>(p->cmd->xprt));
			c->pdu_done(p, ok);
		}
		c->send_pending();
	});
}

void Conn::send_pending()
{
	while (!closed_ && !sends_.empty() && (!pending_reads_.empty() || !pending_.empty())) {
		if (!pending_reads_.empty()) {
			IscsiCmd *c = pending_reads_.front();
			pending_reads_.pop_front();
			send_read_response(c);
			continue;
		}
		OutPdu *p = pending_.front();
		pending_.pop_front();
		queue_pdu(p);
	}
}

Conn::CmdCtx *Conn::ctx(IscsiCmd *c)
{
	if (!c->xprt) {
		auto x = std::make_unique<CmdCtx>();
		x->cqe.done = read_done;
		x->piece.unsent = read_unsent;
		x->conn = this;
		x->cmd = c;
		c->xprt = x.get();
		ctxs_.push_back(std::move(x));
	}
	return static_cast<CmdCtx *>(c->xprt);
}

void Conn::destroy_rw(CmdCtx *x)
{
	if (x->active) {
		x->rw.destroy();
		x->active = false;
	}
}

bool Conn::alloc_buffer(IscsiCmd *c, uint32_t len)
{
	void *p = heap_->alloc(len);
	if (!p) {
		portal_.count(&PortalStats::task_set_full);
		return false;
	}
	c->data = static_cast<uint8_t *>(p);
	return true;
}

void Conn::free_buffer(IscsiCmd *c)
{
	if (c->xprt)
		destroy_rw(static_cast<CmdCtx *>(c->xprt));
	heap_->free(c->data);
}

void Conn::fetch_data_out(IscsiCmd *c)
{
	ULP_ASSERT_HELD(*this); // the serialiser: a connection's work is its holder's
	// RFC 7145 9.5.1: data-out beyond the immediate and unsolicited data is read from the
	// initiator's buffer; Linux advances the write base VA past what it already sent.
	const uint32_t need = c->cmd.xfer_len;
	if (closed_)
		return; // the command is failed and released by the teardown
	if (c->unsol_received >= need || c->r2t_received || c->write_aborted || c->data_error)
		return;
	CmdCtx *x = ctx(c);
	if (x->active)
		return; // already fetching
	if (!x->hdr.wsv) {
		// The initiator announced data but no buffer to read it from.
		data_transfer_failed(c);
		return;
	}
	if (read_credit_ == 0) {
		// Its connect request offered no responder resources: an RDMA READ posted now
		// would wait forever for a credit (rxe's requester does; so does the soft
		// provider's). Fail the write instead, and say why once.
		portal_.count(&PortalStats::no_read_credit);
		if (!told_no_read_credit_) {
			told_no_read_credit_ = true;
			ULP_LOG(Warn, Iser,
			        "{}: the initiator's connect request granted no RDMA READ "
			        "(responder_resources 0): writes beyond their immediate data fail",
			        peer());
		}
		data_transfer_failed(c);
		return;
	}
	x->fetch_len = need - c->unsol_received;
	x->sgt.clear();
	x->sgt.add(reinterpret_cast<uint64_t>(c->data + c->unsol_received), x->fetch_len,
	           heap_->lkey());
	int n = x->rw.init(*rwqp(), x->sgt, 0, x->hdr.write_va, x->hdr.write_stag, RwDir::Read);
	if (n < 0) {
		ULP_LOG_RATELIMITED(Error, Iser, "{}: RDMA READ context for ITT {:08x}: {}", peer(),
		                    c->itt, std::strerror(-n));
		data_transfer_failed(c);
		return;
	}
	x->active = true;
	x->dir = RwDir::Read;
	x->posted = std::chrono::steady_clock::now();
	portal_.count(&PortalStats::rdma_reads);
	post_plugged(&x->piece, x->rw.wrs(&x->cqe, nullptr));
}

void Conn::read_done(Cq *, Wc *wc)
{
	auto *x = container_of(wc->wr_cqe, &CmdCtx::cqe);
	Conn *conn = x->conn;
	conn->enter([&] {
		IscsiCmd *c = x->cmd;
		conn->destroy_rw(x);
		if (wc->status != WcStatus::Success) {
			conn->on_transport_error(std::string("RDMA READ: ") +
			                         wc_status_str(wc->status));
			conn->data_transfer_failed(c);
			return;
		}
		c->r2t_received = x->fetch_len;
		conn->maybe_write_done(c);
	});
}

void Conn::send_read_response(IscsiCmd *c)
{
	ULP_ASSERT_HELD(*this); // the serialiser: a connection's work is its holder's
	if (closed_) {
		scsi::cmd_put(&c->cmd);
		return;
	}
	TxDesc *d = sends_.get();
	if (!d) {
		pending_reads_.push_back(c);
		return;
	}
	post_read_response(c, d);
}

void Conn::post_read_response(IscsiCmd *c, TxDesc *d)
{
	OutPdu *p = build_scsi_rsp(c);
	track_cmd_pdu(c, p, true);
	const uint32_t len = c->cmd.xfer_len;
	CmdCtx *x = ctx(c);
	if (!x->hdr.rsv) {
		// Data-in without a buffer to write it to: a broken initiator.
		sends_.put(d);
		pdu_done(p, false);
		on_transport_error("SCSI read without a read STag");
		return;
	}
	x->sgt.clear();
	x->sgt.add(reinterpret_cast<uint64_t>(c->data), len, heap_->lkey());
	int n = x->rw.init(*rwqp(), x->sgt, 0, x->hdr.read_va, x->hdr.read_stag, RwDir::Write);
	if (n < 0) {
		ULP_LOG_RATELIMITED(Error, Iser, "{}: RDMA WRITE context for ITT {:08x}: {}",
		                    peer(), c->itt, std::strerror(-n));
		sends_.put(d);
		pdu_done(p, false);
		on_transport_error("cannot build the RDMA WRITE of read data");
		return;
	}
	x->active = true;
	x->dir = RwDir::Write;
	x->posted = std::chrono::steady_clock::now();
	portal_.count(&PortalStats::rdma_writes);
	fill_send(d, p);
	// RFC 7145 9.5.2: the data by RDMA WRITE, then the status by SEND, in one chain: the
	// SEND completes only after the WRITEs are placed (RC ordering). The chain is one piece
	// of this turn's post_send.
	post_plugged(&d->piece, x->rw.wrs(nullptr, &d->wr));
}

void Conn::close_transport()
{
	if (closed_)
		return;
	closed_ = true;
	// What this turn plugged goes out ahead of the disconnect (a Logout Response among it),
	// or is flushed with the rest.
	close_plug();
	id().disconnect();
	while (!pending_.empty()) {
		OutPdu *p = pending_.front();
		pending_.pop_front();
		pdu_done(p, false);
	}
	while (!pending_reads_.empty()) {
		IscsiCmd *c = pending_reads_.front();
		pending_reads_.pop_front();
		scsi::cmd_put(&c->cmd);
	}
	portal_.schedule_close(this);
}

void Conn::tick(std::chrono::steady_clock::time_point now)
{
	enter([&] {
		on_tick(now);
		check_transfers(now);
	});
}

void Conn::check_transfers(std::chrono::steady_clock::time_point now)
{
	if (closed_)
		return; // the flush is on its way (drain)
	const auto bound = portal_.iser_cfg().data_timeout;
	for (auto &x : ctxs_) {
		if (!x->active || now - x->posted <= bound)
			continue;
		// An RDMA READ or WRITE that has neither completed nor failed: the QP cannot take
		// it back, only flush it. Dropping the connection flushes every WR, fails the
		// command, and tells the initiator as soon as it polls.
		const auto ms =
		    std::chrono::duration_cast<std::chrono::milliseconds>(now - x->posted).count();
		if (x->dir == RwDir::Read)
			ULP_LOG(Error, Iser,
			        "{}: ITT {:08x}: RDMA READ of {} bytes of write data not complete "
			        "after "
			        "{} ms: dropping the connection",
			        peer(), x->cmd->itt, x->fetch_len, ms);
		else
			ULP_LOG(Error, Iser,
			        "{}: ITT {:08x}: RDMA WRITE of {} bytes of read data and its "
			        "response not "
			        "complete after {} ms: dropping the connection",
			        peer(), x->cmd->itt, x->cmd->cmd.xfer_len, ms);
		portal_.count(&PortalStats::data_timeouts);
		on_transport_error("RDMA transfer timed out");
		return;
	}
}

void Conn::on_cm_event(CmEvent &ev)
{
	switch (ev.event) {
	case CmEventType::Disconnected:
	case CmEventType::DeviceRemoval:
	case CmEventType::ConnectError:
	case CmEventType::Unreachable:
		enter(
		    [&] { on_transport_error(std::string("RDMA/CM: ") + cm_event_str(ev.event)); });
		break;
	default:
		break; // Established: the login runs over the receives already posted
	}
}

} // namespace ulp::iser
