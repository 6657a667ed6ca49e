// SPDX-License-Identifier: MIT
// iser/target.cc - the iSER transport, target side (see iser_target.h).
#include "iser/target.h"
#include "core/thread_name.h"

#include "scsi/core.h"

#include "core/drain.h"
#include "cq_poll/cq_poll.h"
#include "iser/proto.h"
#include "rw/rw.h"
#include "rw/sg_table.h"

#include <algorithm>
#include <cassert>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <deque>
#include <functional>

namespace ulp::iser
{

using namespace iscsi;
using namespace iscsi::target;

namespace
{

// RDMA READs one context may need at most: its scatter table is one contiguous block.
constexpr uint32_t kRwMaxSge = 32;

} // namespace

// ---- Conn --------------------------------------------------------------------------------

class Conn final : public iscsi::target::Conn
{
public:
	Conn(Target &t, Portal &portal, std::string peer, std::string local)
	    : iscsi::target::Conn(t, iscsi::Transport::Iser, std::move(peer), std::move(local)),
	      portal_(portal)
	{
	}
	~Conn() override;

	// Set the connection up on id (a new RDMA/CM connection request): QP, CQ, rings,
	// receives posted. 0, or a negative errno with *why.
	int setup(std::unique_ptr<CmId> id, Pd &pd, DmaHeap &heap, const IserCmHdr &ch,
	          std::string *why);
	CmId &id() { return *id_; }

	// Every entry point: run f and then the events posted meanwhile, one thread at a time.
	template <typename F> void enter(F &&f)
	{
		mu_.lock();
		holder_.store(std::this_thread::get_id(), std::memory_order_relaxed);
		f();
		leave();
	}

	void on_cm_event(CmEvent &ev);
	// The RDMA READs the accept lets this connection's QP issue at once (its initiator
	// depth); 0: the initiator granted none, so no write data can be fetched.
	void set_read_credit(uint8_t n) { read_credit_ = n; }
	// Event thread, every tick: the session's timers, then the bound on RDMA transfers
	// (PortalConfig::data_timeout).
	void tick(std::chrono::steady_clock::time_point now);
	// Event thread: drain the QP after close_transport (not under the lock: the flushes
	// come back through enter()).
	void drain();
	bool drained() const { return drained_.load(std::memory_order_acquire); }
	void release_resources(); // event thread, once done(): everything but the object

protected:
	void queue_pdu(OutPdu *p) override;
	// Events posted from other threads (a backstore's reaper, a TMF, another session's
	// reset) run on the poster's thread: it becomes the holder if nobody is (try_own), and
	// otherwise the holder runs them before it leaves. There is no hand-over to the event
	// thread: that hop was one of five thread switches per 4 KiB read in the VM, where
	// each costs tens of microseconds (tools/iscsi-bench/vm-iser).
	void wake() override
	{
		// try_own() failed: this thread or another holds mu_ and has not left, and
		// leave() checks the inbox under its lock before it lets go.
	}
	// Under the inbox lock, which leave() takes while holding mu_: hence try_lock. The
	// holder's own posts wait for the end of its turn (mu_ is not recursive).
	bool try_own() override
	{
		const auto self = std::this_thread::get_id();
		if (holder_.load(std::memory_order_relaxed) == self || !mu_.try_lock())
			return false;
		holder_.store(self, std::memory_order_relaxed);
		return true;
	}
	void run_owned() override { leave(); }
	// post_deferred: the poster holds a lock the events may take; the event thread runs
	// them (a thread switch, on slow paths only: drops, logouts, target stop).
	void kick() override { portal_.kick(this); }
	// The holder's way out: the events, then mu_ given up under the inbox lock, so that no
	// event posted meanwhile is left behind. From the unlock on, the reaper may free us
	// (it takes mu_ and then the inbox lock before it does).
	void leave()
	{
		run_events_then([this] {
			holder_.store(std::thread::id(), std::memory_order_relaxed);
			mu_.unlock();
		});
	}
	void close_transport() override;
	bool alloc_buffer(IscsiCmd *c, uint32_t len) override;
	void free_buffer(IscsiCmd *c) override;
	void cmd_received(IscsiCmd *c) override { ctx(c)->hdr = last_iser_; }
	void fetch_data_out(IscsiCmd *c) override;
	void send_read_response(IscsiCmd *c) override;
	void login_prefs(OperationalPrefs &p) override
	{
		p.iser_recv_dsl = portal_.cfg().recv_dsl;
		p.iser_send_dsl = portal_.cfg().send_dsl;
		// Every PDU needs a posted receive. Non-immediate commands are bounded by the
		// CmdSN window and immediate ones by kImmediateSlots; unsolicited Data-Out would
		// be bounded by nothing we size for (a window of writes, each with a first
		// burst), so InitialR2T=Yes (OR: ours wins) keeps unsolicited data to the
		// immediate data in the command's own SEND, as LIO's isert does. The rest of a
		// write comes by RDMA READ. RFC 7145 6.5: what else may arrive unexpected (NOP-
		// Out, TMF, Text, Logout, SNACK) is what the extra receives are for.
		p.initial_r2t = true;
		p.max_outstanding_unexpected_pdus = portal_.cfg().extra_recvs;
	}

private:
	struct RecvDesc {
		Cqe cqe; // the completion leads back here (container_of)
		Conn *conn;
		const Buf *buf;
	};
	struct SendDesc {
		Cqe cqe; // the SEND completion leads back here
		Conn *conn;
		const Buf *buf;
		OutPdu *pdu = nullptr; // the PDU in the buffer, until the SEND completes
		Sge sge;
		SendWr wr;
	};
	// A command's RDMA state, kept with its slot (IscsiCmd::xprt).
	struct CmdCtx {
		Cqe cqe; // the RDMA READ completion leads back here
		Conn *conn;
		IscsiCmd *cmd;
		RwCtx rw;
		SgTable sgt{1};
		uint32_t fetch_len = 0;  // bytes the RDMA READ moves
		bool active = false;     // rw holds WRs or MRs (destroy before reuse)
		RwDir dir = RwDir::Read; // what rw moves while active: write data in, read data out
		IserHdr hdr;             // the command's iSER header: its STags and VAs
		std::chrono::steady_clock::time_point posted; // when rw was posted (data_timeout)
	};

	static void recv_done(Cq *cq, Wc *wc);
	static void send_done(Cq *cq, Wc *wc);
	static void read_done(Cq *cq, Wc *wc);

	void handle_recv(RecvDesc *d, const Wc &wc);
	void post_recv(RecvDesc *d);
	SendDesc *take_send();
	void fill_send(SendDesc *d, OutPdu *p);
	void send_pending();
	CmdCtx *ctx(IscsiCmd *c);
	void post_read_response(IscsiCmd *c, SendDesc *d);
	void check_transfers(std::chrono::steady_clock::time_point now);

	Portal &portal_;
	std::unique_ptr<CmId> id_;   // owns the QP
	std::unique_ptr<RwQp> rwqp_; // rw contexts and their MR pool, over id_'s QP
	Cq *cq_ = nullptr;           // from the device's CQ pool, send and receive
	unsigned cq_entries_ = 0;    // taken from the pool
	DmaHeap *heap_ = nullptr;    // the device's data buffers
	std::unique_ptr<BufPool> recv_pool_, send_pool_;
	std::vector<RecvDesc> recvs_;
	std::vector<SendDesc> sends_;
	std::vector<SendDesc *> send_free_;    // under mu_
	std::deque<OutPdu *> pending_;         // PDUs waiting for a send buffer (mu_)
	std::deque<IscsiCmd *> pending_reads_; // read responses waiting for one (mu_)
	std::vector<std::unique_ptr<CmdCtx>> ctxs_;
	size_t recv_size_ = 0, send_size_ = 0; // buffer bytes
	bool send_inv_ = false;                // responses may be SEND_WITH_INV (peer and device)
	uint8_t read_credit_ = 0;              // RDMA READs the QP may issue at once (accept)
	bool told_no_read_credit_ = false;     // logged that writes cannot be fetched (mu_)
	IserHdr last_iser_;                    // the header of the PDU being processed (mu_)
	bool closed_ = false;                  // close_transport ran (mu_)
	std::atomic<bool> drained_{false};

	std::mutex mu_; // serialises the Conn (see iser_target.h)
	std::atomic<std::thread::id> holder_;
};

Conn::~Conn()
{
	release_resources();
}

int Conn::setup(std::unique_ptr<CmId> id, Pd &pd, DmaHeap &heap, const IserCmHdr &ch,
                std::string *why)
{
	id_ = std::move(id);
	id_->context = this;
	heap_ = &heap;
	Device &dev = pd.device();
	const DeviceAttr &da = dev.attr();
	const PortalConfig &cfg = portal_.cfg();
	const uint32_t window = target_.cfg().cmd_window;
	const uint32_t nrecv = window + kImmediateSlots + cfg.extra_recvs;
	const uint32_t nsend = cfg.send_ring ? cfg.send_ring : window + 32;

	// Buffers: iSER header + BHS + the largest AHS + data (receive: what we declared as
	// TargetRecvDataSegmentLength, at least a login PDU's 8192).
	recv_size_ = kIserHdrLen + kBhsLen + kMaxAhsLen + std::max(cfg.recv_dsl, kDefaultMrdsl);
	send_size_ = kIserHdrLen + kBhsLen + std::max(cfg.send_dsl, kDefaultMrdsl) + 8;
	recv_pool_ = BufPool::create(pd, recv_size_, nrecv, ACCESS_LOCAL_WRITE);
	send_pool_ = BufPool::create(pd, send_size_, nsend, ACCESS_LOCAL_WRITE);
	if (!recv_pool_ || !send_pool_) {
		*why = std::string("buffers: ") + std::strerror(errno);
		return -ENOMEM;
	}

	// The QP: rw contexts for every command of the window (one READ or WRITE each), a
	// send queue for the send ring, +1 send and +1 receive WR and +2 CQEs for drain.
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
	RwQpOptions ro;
	ro.max_pages = uint32_t(std::min<size_t>(cfg.max_io, heap.max_alloc()) / 4096);
	ro.max_entries = 1; // a command's buffer is one DmaHeap block
	if (int rc = rw_init_qp(dev, &qa, ro); rc != 0) {
		*why = "rw_init_qp: the send queue would exceed the device's max_qp_wr";
		return rc;
	}
	cq_entries_ = qa.cap.max_send_wr + qa.cap.max_recv_wr + 2;
	cq_ = cq_pool_get(dev, cq_entries_, cfg.vector_hint, PollCtx::Workqueue);
	if (!cq_) {
		*why = std::string("cq_pool_get: ") + std::strerror(errno);
		return -errno;
	}
	qa.send_cq = cq_;
	qa.recv_cq = cq_;
	qa.qp_context = this;
	if (int rc = id_->create_qp(pd, qa); rc != 0) {
		*why = std::string("create_qp: ") + std::strerror(-rc);
		return rc;
	}
	int err = 0;
	rwqp_ = RwQp::attach(*id_->qp(), qa, ro, &err);
	if (!rwqp_) {
		*why = std::string("rw contexts: ") + std::strerror(-err);
		return err;
	}
	// SEND_WITH_INV for responses: the initiator must allow it (it registers every
	// buffer) and the device must have it (RFC 7145 7.3.?; PROTOCOLS.md).
	send_inv_ = !(ch.flags & ISER_SEND_W_INV_NOT_SUP) &&
	            (da.device_cap_flags & DEVICE_MEM_MGT_EXTENSIONS);

	recvs_.resize(nrecv);
	for (uint32_t i = 0; i < nrecv; i++) {
		RecvDesc &d = recvs_[i];
		d.cqe.done = recv_done;
		d.conn = this;
		d.buf = recv_pool_->get();
		post_recv(&d);
	}
	sends_.resize(nsend);
	for (uint32_t i = 0; i < nsend; i++) {
		SendDesc &d = sends_[i];
		d.cqe.done = send_done;
		d.conn = this;
		d.buf = send_pool_->get();
		send_free_.push_back(&d);
	}
	return 0;
}

void Conn::release_resources()
{
	for (auto &x : ctxs_)
		if (x->active) {
			x->rw.destroy();
			x->active = false;
		}
	rwqp_.reset(); // the MR pool: every context destroyed above
	if (id_)
		id_.reset(); // destroys the QP (the CM waits out our handler)
	if (cq_) {
		cq_pool_put(cq_, cq_entries_);
		cq_ = nullptr;
	}
	for (RecvDesc &d : recvs_)
		if (d.buf) {
			recv_pool_->put(d.buf);
			d.buf = nullptr;
		}
	for (SendDesc &d : sends_)
		if (d.buf) {
			send_pool_->put(d.buf);
			d.buf = nullptr;
		}
	recv_pool_.reset();
	send_pool_.reset();
}

void Conn::post_recv(RecvDesc *d)
{
	Sge sge{reinterpret_cast<uint64_t>(d->buf->addr), uint32_t(recv_size_), d->buf->lkey};
	RecvWr wr;
	wr.wr_cqe = &d->cqe;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	const RecvWr *bad = nullptr;
	if (int rc = id_->qp()->post_recv(&wr, &bad); rc != 0 && !closed_)
		on_transport_error(std::string("post_recv: ") + std::strerror(-rc));
}

void Conn::recv_done(Cq *, Wc *wc)
{
	auto *d = container_of(wc->wr_cqe, &RecvDesc::cqe);
	d->conn->enter([&] { d->conn->handle_recv(d, *wc); });
}

void Conn::handle_recv(RecvDesc *d, const Wc &wc)
{
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
	// to the receive queue now, before any response returns this credit.
	if (!closed_)
		post_recv(d);
}

Conn::SendDesc *Conn::take_send()
{
	if (send_free_.empty())
		return nullptr;
	SendDesc *d = send_free_.back();
	send_free_.pop_back();
	return d;
}

void Conn::fill_send(SendDesc *d, OutPdu *p)
{
	// iSER header (a control-type PDU; the target sends no STags) + the PDU. No padding:
	// RFC 7145 7.3 lets the SEND end after the data segment.
	auto *b = static_cast<uint8_t *>(d->buf->addr);
	IserHdr ih;
	build_iser_hdr(ih, std::span<uint8_t, kIserHdrLen>(b, kIserHdrLen));
	size_t n = kIserHdrLen;
	std::memcpy(b + n, p->hdr, p->hdr_len);
	n += p->hdr_len;
	if (!p->data.empty())
		std::memcpy(b + n, p->data.data(), p->data.size());
	n += p->data.size();
	assert(n <= send_size_);
	d->pdu = p;
	d->sge = Sge{reinterpret_cast<uint64_t>(b), uint32_t(n), d->buf->lkey};
	d->wr = SendWr{};
	d->wr.wr_cqe = &d->cqe;
	d->wr.sg_list = &d->sge;
	d->wr.num_sge = 1;
	d->wr.opcode = WrOpcode::Send;
	d->wr.send_flags = SEND_SIGNALED; // every data-carrying SEND is signaled
	// The status of a command that had STags invalidates one of them on the way
	// (SEND_WITH_INV: the read STag if any, else the write STag; PROTOCOLS.md).
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
	if (closed_) {
		pdu_done(p, false);
		return;
	}
	if (p->hdr_len + p->data.size() + kIserHdrLen > send_size_) {
		// Conn never builds a PDU larger than the negotiated lengths; this is a bug.
		std::fprintf(stderr, "ulp iser: a %zu-byte PDU does not fit a send buffer\n",
		             p->hdr_len + p->data.size());
		pdu_done(p, false);
		on_transport_error("PDU larger than a send buffer");
		return;
	}
	SendDesc *d = take_send();
	if (!d) {
		pending_.push_back(p);
		return;
	}
	fill_send(d, p);
	const SendWr *bad = nullptr;
	if (int rc = id_->qp()->post_send(&d->wr, &bad); rc != 0) {
		d->pdu = nullptr;
		send_free_.push_back(d);
		pdu_done(p, false);
		on_transport_error(std::string("post_send: ") + std::strerror(-rc));
	}
}

void Conn::send_done(Cq *, Wc *wc)
{
	auto *d = container_of(wc->wr_cqe, &SendDesc::cqe);
	Conn *c = d->conn;
	c->enter([&] {
		OutPdu *p = d->pdu;
		d->pdu = nullptr;
		c->send_free_.push_back(d);
		const bool ok = wc->status == WcStatus::Success;
		if (!ok)
			c->on_transport_error(std::string("send: ") + wc_status_str(wc->status));
		if (p) {
			// A read response's RDMA WRITEs went before it: the context is done.
			if (p->cmd && p->last_of_cmd && p->cmd->xprt) {
				auto *x = static_cast<CmdCtx *>(p->cmd->xprt);
				if (x->active) {
					x->rw.destroy();
					x->active = false;
				}
			}
			c->pdu_done(p, ok);
		}
		c->send_pending();
	});
}

void Conn::send_pending()
{
	while (!closed_ && !send_free_.empty() && (!pending_reads_.empty() || !pending_.empty())) {
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
		x->conn = this;
		x->cmd = c;
		c->xprt = x.get();
		ctxs_.push_back(std::move(x));
	}
	return static_cast<CmdCtx *>(c->xprt);
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
	if (c->xprt) {
		auto *x = static_cast<CmdCtx *>(c->xprt);
		if (x->active) {
			x->rw.destroy();
			x->active = false;
		}
	}
	heap_->free(c->data);
}

void Conn::fetch_data_out(IscsiCmd *c)
{
	// RFC 7145 7.3.?: data-out beyond the immediate and unsolicited data is read from the
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
			target_.log(
			    "iser: " + peer() +
			    ": the initiator's connect request granted no RDMA READ "
			    "(responder_resources 0): writes beyond their immediate data fail");
		}
		data_transfer_failed(c);
		return;
	}
	x->fetch_len = need - c->unsol_received;
	x->sgt.clear();
	x->sgt.add(reinterpret_cast<uint64_t>(c->data + c->unsol_received), x->fetch_len,
	           heap_->lkey());
	int n = x->rw.init(*rwqp_, x->sgt, 0, x->hdr.write_va, x->hdr.write_stag, RwDir::Read);
	if (n < 0) {
		std::fprintf(stderr, "ulp iser: RDMA READ context for ITT %08x: %s\n", c->itt,
		             std::strerror(-n));
		data_transfer_failed(c);
		return;
	}
	x->active = true;
	x->dir = RwDir::Read;
	x->posted = std::chrono::steady_clock::now();
	portal_.count(&PortalStats::rdma_reads);
	if (int rc = x->rw.post(&x->cqe, nullptr); rc != 0) {
		x->rw.destroy();
		x->active = false;
		data_transfer_failed(c);
		on_transport_error(std::string("post RDMA READ: ") + std::strerror(-rc));
	}
}

void Conn::read_done(Cq *, Wc *wc)
{
	auto *x = container_of(wc->wr_cqe, &CmdCtx::cqe);
	Conn *conn = x->conn;
	conn->enter([&] {
		IscsiCmd *c = x->cmd;
		x->rw.destroy();
		x->active = false;
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
	if (closed_) {
		scsi::cmd_put(&c->cmd);
		return;
	}
	SendDesc *d = take_send();
	if (!d) {
		pending_reads_.push_back(c);
		return;
	}
	post_read_response(c, d);
}

void Conn::post_read_response(IscsiCmd *c, SendDesc *d)
{
	OutPdu *p = build_scsi_rsp(c);
	track_cmd_pdu(c, p, true);
	const uint32_t len = c->cmd.xfer_len;
	CmdCtx *x = ctx(c);
	if (!x->hdr.rsv) {
		// Data-in without a buffer to write it to: a broken initiator.
		send_free_.push_back(d);
		pdu_done(p, false);
		on_transport_error("SCSI read without a read STag");
		return;
	}
	x->sgt.clear();
	x->sgt.add(reinterpret_cast<uint64_t>(c->data), len, heap_->lkey());
	int n = x->rw.init(*rwqp_, x->sgt, 0, x->hdr.read_va, x->hdr.read_stag, RwDir::Write);
	if (n < 0) {
		std::fprintf(stderr, "ulp iser: RDMA WRITE context for ITT %08x: %s\n", c->itt,
		             std::strerror(-n));
		send_free_.push_back(d);
		pdu_done(p, false);
		on_transport_error("cannot build the RDMA WRITE of read data");
		return;
	}
	x->active = true;
	x->dir = RwDir::Write;
	x->posted = std::chrono::steady_clock::now();
	portal_.count(&PortalStats::rdma_writes);
	fill_send(d, p);
	// RFC 7145 7.3.?: the data by RDMA WRITE, then the status by SEND, in one chain: the
	// SEND completes only after the WRITEs are placed (RC ordering).
	if (int rc = x->rw.post(nullptr, &d->wr); rc != 0) {
		x->rw.destroy();
		x->active = false;
		d->pdu = nullptr;
		send_free_.push_back(d);
		pdu_done(p, false);
		on_transport_error(std::string("post RDMA WRITE: ") + std::strerror(-rc));
	}
}

void Conn::close_transport()
{
	if (closed_)
		return;
	closed_ = true;
	if (id_)
		id_->disconnect();
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

void Conn::drain()
{
	// Every WR posted so far completes (flushed) and is dispatched through enter(); the
	// QP's CQ is a Workqueue one, so drain waits for those threads.
	if (id_ && id_->qp())
		drain_qp(*id_->qp(), portal_.cfg().drain_timeout);
	drained_.store(true, std::memory_order_release);
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
	const auto bound = portal_.cfg().data_timeout;
	for (auto &x : ctxs_) {
		if (!x->active || now - x->posted <= bound)
			continue;
		// An RDMA READ or WRITE that has neither completed nor failed: the QP cannot take
		// it back, only flush it. Dropping the connection flushes every WR, fails the
		// command, and tells the initiator as soon as it polls.
		const auto ms =
		    std::chrono::duration_cast<std::chrono::milliseconds>(now - x->posted).count();
		const std::string what =
		    x->dir == RwDir::Read
		        ? "RDMA READ of " + std::to_string(x->fetch_len) + " bytes of write data"
		        : "RDMA WRITE of " + std::to_string(x->cmd->cmd.xfer_len) +
		              " bytes of read data and its response";
		char itt[16];
		std::snprintf(itt, sizeof(itt), "%08x", x->cmd->itt);
		target_.log("iser: " + peer() + ": ITT " + itt + ": " + what +
		            " not complete after " + std::to_string(ms) +
		            " ms: dropping the connection");
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

// ---- Portal ------------------------------------------------------------------------------

Portal::Portal(Target &target, Provider &provider, const PortalConfig &cfg)
    : target_(target), provider_(provider), cfg_(cfg)
{
}

Portal::~Portal()
{
	stop();
}

int Portal::listen(const SockAddr &addr, std::string *why)
{
	listen_id_ =
	    provider_.create_id([this](CmId *id, CmEvent &ev) { on_cm_event(id, ev); }, nullptr);
	if (!listen_id_) {
		*why = std::string("create_id: ") + std::strerror(errno);
		return -errno;
	}
	if (int rc = listen_id_->bind_addr(addr); rc != 0) {
		*why = "bind " + addr.str() + ": " + std::strerror(-rc);
		listen_id_.reset();
		return rc;
	}
	if (int rc = listen_id_->listen(128); rc != 0) {
		*why = "listen on " + addr.str() + ": " + std::strerror(-rc);
		listen_id_.reset();
		return rc;
	}
	port_ = listen_id_->local_addr().port();
	return 0;
}

int Portal::start()
{
	thread_ = std::thread([this] { event_loop(); });
	return 0;
}

void Portal::stop_accepting()
{
	listen_id_.reset(); // waits out a running handler
}

void Portal::stop()
{
	stop_accepting();
	{
		std::lock_guard g(lock_);
		stop_ = true;
		cv_.notify_all();
	}
	if (thread_.joinable())
		thread_.join();
	// Not under lock_: detach takes the connection's inbox lock, and wake() takes lock_
	// under it.
	std::vector<std::unique_ptr<Conn>> conns;
	{
		std::lock_guard g(lock_);
		conns.swap(conns_);
	}
	for (auto &c : conns) {
		bool done = false;
		c->enter([&] { done = c->done(); });
		if (!done || !c->drained()) {
			std::fprintf(stderr,
			             "ulp iser: connection %s still %s at shutdown; left "
			             "allocated\n",
			             c->peer().c_str(), conn_state_str(c->state()));
			(void)c.release();
			continue;
		}
		c->detach();
	}
	conns.clear();
	std::lock_guard g(lock_);
	for (auto &[dev, r] : devices_) {
		r.heap.reset();
		if (int rc = cq_pool_destroy(*dev); rc != 0)
			std::fprintf(stderr, "ulp iser: CQ pool of %s still in use\n",
			             dev->name().c_str());
		r.pd.reset();
	}
	devices_.clear();
}

size_t Portal::conns()
{
	std::lock_guard g(lock_);
	return conns_.size();
}

PortalStats Portal::stats()
{
	std::lock_guard g(lock_);
	return stats_;
}

void Portal::count(uint64_t PortalStats::*field)
{
	std::lock_guard g(lock_);
	stats_.*field += 1;
}

void Portal::kick(Conn *c)
{
	std::lock_guard g(lock_);
	kicked_.push_back(c);
	cv_.notify_all();
}

void Portal::schedule_close(Conn *c)
{
	std::lock_guard g(lock_);
	closing_.push_back(c);
	cv_.notify_all();
}

Portal::DeviceRes *Portal::device_res(Device &dev)
{
	auto it = devices_.find(&dev);
	if (it != devices_.end())
		return &it->second;
	DeviceRes r;
	r.pd = dev.alloc_pd();
	if (!r.pd)
		return nullptr;
	// Data buffers are the target of the peer's RDMA READ? No: we READ into them and
	// WRITE from them, so local write access is all they need... but iWARP's READ sink
	// must also allow remote write (rdma_rw on iWARP: the kernel's rule).
	uint32_t access = ACCESS_LOCAL_WRITE;
	if (dev.is_iwarp())
		access |= ACCESS_REMOTE_WRITE;
	r.heap = DmaHeap::create(*r.pd, cfg_.heap_bytes, cfg_.max_io, access);
	if (!r.heap)
		return nullptr;
	return &devices_.emplace(&dev, std::move(r)).first->second;
}

void Portal::on_cm_event(CmId *id, CmEvent &ev)
{
	if (ev.event == CmEventType::ConnectRequest) {
		on_connect_request(ev);
		return;
	}
	if (auto *c = static_cast<Conn *>(id->context))
		c->on_cm_event(ev);
}

void Portal::on_connect_request(CmEvent &ev)
{
	std::unique_ptr<CmId> id = std::move(ev.new_id);
	Device *dev = id->device();
	// Linux sends iser_cm_hdr; an initiator that sends none is taken to allow nothing.
	IserCmHdr ch{ISER_ZBVA_NOT_SUP | ISER_SEND_W_INV_NOT_SUP};
	parse_iser_cm_hdr(ev.param.pdata(), &ch);
	std::string why;
	auto refuse = [&](const std::string &w) {
		target_.log("iser: connection request from " + id->peer_addr().str() +
		            " refused: " + w);
		id->reject({});
		count(&PortalStats::rejected);
	};
	if (!dev) {
		refuse("no device");
		return;
	}
	DeviceRes *r;
	{
		std::lock_guard g(lock_);
		r = device_res(*dev);
	}
	if (!r) {
		refuse(std::string("device resources: ") + std::strerror(errno));
		return;
	}
	std::string peer = id->peer_addr().str(), local = id->local_addr().str();
	auto c = std::make_unique<Conn>(target_, *this, peer, local);
	CmId *raw = id.get();
	if (int rc = c->setup(std::move(id), *r->pd, *r->heap, ch, &why); rc != 0) {
		target_.log("iser: connection from " + peer + ": " + why);
		raw->reject({});
		c->release_resources();
		c->detach(); // never logged in: nothing is posted to it
		count(&PortalStats::rejected);
		return;
	}
	// READ credits, as rdma_cm hands them to the passive side (IB CM crosses them:
	// cm_format_req_event): ev.param.initiator_depth is how many RDMA READs the initiator
	// will answer at once (its responder_resources), ev.param.responder_resources how many
	// it will issue (its initiator_depth). The target READs write data and answers no
	// READs (the initiator uses SEND/RECV and our WRITEs only), as LIO's isert does.
	const DeviceAttr &da = dev->attr();
	ConnParam cp;
	cp.initiator_depth =
	    uint8_t(std::min<uint32_t>({da.max_qp_init_rd_atom, ev.param.initiator_depth, 255}));
	cp.responder_resources =
	    uint8_t(std::min<uint32_t>({da.max_qp_rd_atom, ev.param.responder_resources, 255}));
	c->set_read_credit(cp.initiator_depth);
	IserCmHdr ours{ISER_ZBVA_NOT_SUP};
	// Accept: we use no zero-based VAs; SEND_WITH_INV only when allowed and possible.
	if (!(!(ch.flags & ISER_SEND_W_INV_NOT_SUP) &&
	      (da.device_cap_flags & DEVICE_MEM_MGT_EXTENSIONS)))
		ours.flags |= ISER_SEND_W_INV_NOT_SUP;
	uint8_t pd[kIserCmHdrLen];
	build_iser_cm_hdr(ours, std::span<uint8_t, kIserCmHdrLen>(pd, kIserCmHdrLen));
	cp.set_private_data(pd);
	const int rc = c->id().accept(cp);
	Conn *conn = c.get();
	{
		std::lock_guard g(lock_);
		conns_.push_back(std::move(c));
		if (rc == 0)
			stats_.accepted++;
		else
			stats_.rejected++;
	}
	if (rc != 0) {
		// Receives are posted: the connection goes down the usual way (close, drain,
		// reap) so that none of their completions outlives it.
		target_.log("iser: accept " + peer + ": " + std::strerror(-rc));
		conn->enter([&] { conn->on_transport_error("accept failed"); });
	}
}

void Portal::event_loop()
{
	set_thread_name("ulp-iser-cm");
	using clock = std::chrono::steady_clock;
	auto next_tick = clock::now();
	std::unique_lock g(lock_);
	while (!stop_) {
		cv_.wait_until(g, next_tick,
		               [&] { return stop_ || !closing_.empty() || !kicked_.empty(); });
		std::vector<Conn *> closing, kicked;
		closing.swap(closing_);
		kicked.swap(kicked_);
		g.unlock();
		for (Conn *c : kicked)
			c->enter([] {}); // leave() runs the events
		for (Conn *c : closing)
			c->drain();
		g.lock();
		if (clock::now() >= next_tick) {
			next_tick = clock::now() + std::chrono::milliseconds(100);
			std::vector<Conn *> all;
			for (auto &c : conns_)
				all.push_back(c.get());
			g.unlock();
			const auto now = clock::now();
			for (Conn *c : all)
				c->tick(now);
			reap(all);
			g.lock();
		}
	}
}

void Portal::reap(const std::vector<Conn *> &all)
{
	// Event thread, lock_ not held (a connection's lock is taken before lock_, never
	// after). Connections that are drained (no completion will come) and done (every
	// command released, the session reaped, nothing in flight; read under their own
	// lock) are freed. Only this thread frees, so the pointers stay valid meanwhile.
	for (Conn *c : all) {
		if (!c->drained())
			continue;
		bool done = false;
		c->enter([&] { done = c->done(); });
		if (!done)
			continue;
		{
			std::lock_guard g(lock_);
			std::erase(closing_, c);
			std::erase(kicked_, c);
		}
		c->detach();
		c->release_resources(); // waits out a CM handler still running on it
		std::unique_ptr<Conn> dead;
		{
			std::lock_guard g(lock_);
			auto it = std::find_if(
			    conns_.begin(), conns_.end(),
			    [&](const std::unique_ptr<Conn> &p) { return p.get() == c; });
			dead = std::move(*it);
			conns_.erase(it);
		}
	}
}

} // namespace ulp::iser
