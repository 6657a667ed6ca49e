// SPDX-License-Identifier: MIT
// iser/initiator/initiator.cc - the initiator's iSER transport (see initiator_iser.h).
#include "iser/initiator/initiator.h"

#include "core/check.h"
#include "core/deadline.h"
#include "core/dma_heap.h"
#include "core/log.h"
#include "core/mem_map.h"
#include "iser/proto.h"
#include "mr_pool/mr_pool.h"
#include "rdma_conn/client.h"
#include "rdma_conn/ring.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>

namespace ulp::iser
{

using namespace iscsi;
using namespace iscsi::initiator;

namespace
{

using clock = std::chrono::steady_clock;

constexpr uint32_t kCtrlSends = 32;  // send WRs for control PDUs beside the commands'
constexpr uint32_t kUnexpected = 32; // receives beyond one response per command:
                                     // NOP-In, Async Message, Reject, TMF/Text/Logout
constexpr uint32_t kWrsPerCmd = 3;   // REG_MR + SEND + LOCAL_INV
constexpr uint32_t kPage = 4096;

constexpr uint8_t kOpScsiCmd = 0x01; // RFC 7143 11.3
constexpr uint8_t kOpScsiRsp = 0x21; // RFC 7143 11.4

// The connection's life; change_state checks every step against kConnStates.
enum class IserConnState : uint8_t {
	Idle,       // -> Connecting (connect) | Closed (closed before connecting)
	Connecting, // address, route, resources, CM connect -> Up | Closed
	Up,         // PDUs flow -> Closed (close, a fatal error, a disconnect)
	Closed,     // final: QP drained and destroyed, every registration released
};

const char *conn_state_name(IserConnState s)
{
	switch (s) {
	case IserConnState::Idle:
		return "Idle";
	case IserConnState::Connecting:
		return "Connecting";
	case IserConnState::Up:
		return "Up";
	case IserConnState::Closed:
		return "Closed";
	}
	return "?";
}

constexpr StateTable<IserConnState, 4> kConnStates = {
    "iSER initiator connection",
    conn_state_name,
    {
        /* Idle */ to(IserConnState::Connecting, IserConnState::Closed),
        /* Connecting */ to(IserConnState::Up, IserConnState::Closed),
        /* Up */ to(IserConnState::Closed),
        /* Closed */ 0,
    }};

class RdmaTransport final : public InitiatorTransport
{
public:
	explicit RdmaTransport(const InitiatorConfig &cfg) : cfg_(cfg) {}
	~RdmaTransport() override;

	iscsi::Transport kind() const override { return iscsi::Transport::Iser; }
	void attach(TransportSink *sink) override { sink_ = sink; }
	bool connect(const std::string &host, uint16_t port,
	             std::chrono::milliseconds timeout) override;
	void queue(TxPdu *p) override;
	bool poll(std::chrono::milliseconds timeout) override;
	void set_recv(uint32_t max_recv_dsl, Digests) override
	{
		max_recv_dsl_ = std::min<uint32_t>(max_recv_dsl, recv_room_);
	}
	void close() override;
	bool connected() const override { return state_ == State::Up; }
	const std::string &why() const override { return why_; }
	std::string local_address() const override { return local_; }
	std::string peer_address() const override { return peer_; }

	bool rdma_data() const override { return true; }
	void login_prefs(OperationalPrefs &p) override
	{
		p.iser_recv_dsl = cfg_.recv_dsl;
		p.iser_send_dsl = cfg_.send_dsl;
		p.max_outstanding_unexpected_pdus = kUnexpected;
		p.header_digests = {Digest::None}; // RFC 7145 6.1: no digests on iSER
		p.data_digests = {Digest::None};
	}
	uint32_t max_data_len() const override { return max_io_; }
	bool can_map() const override;
	int map_data(uint32_t itt, DataDir dir, std::span<uint8_t> data, uint32_t unsol) override;
	void unmap_data(uint32_t itt) override;

private:
	using State = IserConnState;

	struct RecvDesc : rdma::RecvDesc {
		RdmaTransport *tp = nullptr;
	};
	struct SendDesc : rdma::SendDesc {
		RdmaTransport *tp = nullptr;
		TxPdu *pdu = nullptr; // in the buffer until the SEND completes
		uint32_t nwr = 0;     // send-queue slots this post used (REG_MR + SEND)
		RegWr reg;            // the command's REG_MR, chained before wr
	};
	// One command's data registration, by task slot (ITT & 0xffff).
	struct Reg {
		Cqe inv_cqe; // the LOCAL_INV completion leads back here
		RdmaTransport *tp = nullptr;
		bool live = false; // mapped, not yet released
		uint32_t itt = 0;  // the command
		DataDir dir = DataDir::None;
		std::span<uint8_t> user; // the caller's buffer
		uint8_t *dma = nullptr;  // what the MR maps: user's bytes or a bounce block
		bool bounced = false;    // dma is a bounce-heap block
		Mr *mr = nullptr;        // from mrs_
		uint32_t access = 0;     // what REG_MR grants
		uint32_t unsol = 0;      // bytes sent as immediate / unsolicited data
		bool posted = false;     // REG_MR posted: the key is live on the device
		bool remote_inv = false; // the target invalidated it (SEND_WITH_INV)
		bool unmapping = false;  // unmap_data ran; LOCAL_INV posted or waiting for room
		SendWr inv_wr;           // the LOCAL_INV
	};

	// What post_pdu did with a PDU.
	enum class Post : uint8_t { Posted, NoRoom, Dropped };

	bool fail(std::string why);
	void teardown(); // drain, destroy, free: never from inside a completion callback
	int setup(CmId &id, ConnParam *cp, std::string *why);
	void post_recv(RecvDesc *d);
	Post post_pdu(TxPdu *p);
	void run_backlog();
	bool post_inv(Reg &r);
	void release(Reg &r);
	void release_all();
	Reg *reg_of(uint32_t itt);
	int process();

	static void recv_done(Cq *cq, Wc *wc);
	static void send_done(Cq *cq, Wc *wc);
	static void inv_done(Cq *cq, Wc *wc);
	void on_recv(RecvDesc *d, const Wc &wc);

	InitiatorConfig cfg_;
	TransportSink *sink_ = nullptr;
	State state_ = State::Idle;
	bool failed_ = false;
	std::string why_;
	std::string local_, peer_;

	rdma::ClientConn conn_; // the RDMA/CM id (owns the QP), its CM events' mailbox

	Device *dev_ = nullptr;
	std::unique_ptr<Pd> pd_;
	rdma::DirectCq cq_; // both queues', polled by the session's thread
	MemMap map_;        // the caller's regions
	std::vector<std::unique_ptr<Mr>> user_mrs_;
	std::unique_ptr<DmaHeap> bounce_;
	MrPool mrs_;
	rdma::RecvRing<RecvDesc> recvs_;
	rdma::SendRing<SendDesc> sends_;
	std::deque<TxPdu *> backlog_;   // PDUs waiting for send room, in order
	std::deque<uint32_t> inv_wait_; // slots whose LOCAL_INV waits for room
	std::deque<Reg> regs_;          // by slot; a deque: posted LOCAL_INVs point into
	                                // entries, which growing must not move
	uint32_t sq_size_ = 0;          // send WRs we may have outstanding (drain's is extra)
	uint32_t sq_used_ = 0;          // outstanding now
	uint32_t recv_room_ = 0;        // data bytes a receive buffer holds
	uint32_t send_room_ = 0;        // data bytes a send buffer holds
	uint32_t max_recv_dsl_ = kDefaultMrdsl; // what a received PDU may carry
	uint32_t max_io_ = 0;
	uint32_t depth_ = 0;     // commands with data at once (MRs)
	bool peer_inv_ = false;  // the target may SEND_WITH_INV (both said so)
	bool torn_down_ = false; // teardown() ran
	InitiatorStats local_stats_;
	InitiatorStats &stats_ = cfg_.stats ? *cfg_.stats : local_stats_;
};

RdmaTransport::~RdmaTransport()
{
	close();
	teardown();
}

bool RdmaTransport::fail(std::string why)
{
	if (!failed_) {
		failed_ = true;
		why_ = std::move(why);
	}
	close();
	return false;
}

// ---- Connect ----------------------------------------------------------------------------

bool RdmaTransport::connect(const std::string &host, uint16_t port,
                            std::chrono::milliseconds timeout)
{
	const auto deadline = clock::now() + timeout;
	if (state_ != State::Idle)
		return fail("connect on a used transport");
	change_state(&state_, State::Connecting, kConnStates, this);
	if (!cfg_.provider)
		return fail("iSER: no RDMA provider given");
	const std::string where = (host.find(':') != std::string::npos ? "[" + host + "]" : host) +
	                          ":" + std::to_string(port);
	rdma::ClientParams cp;
	cp.provider = cfg_.provider;
	cp.deadline = deadline;
	if (std::optional<SockAddr> dst = SockAddr::parse(where))
		cp.dst = *dst;
	else
		return fail("iSER: " + host + " is not an IP address (RDMA/CM resolves none)");
	if (!cfg_.src_ip.empty() && !(cp.src = SockAddr::parse(cfg_.src_ip, 0)))
		return fail("iSER: bad source address " + cfg_.src_ip);
	cp.setup = [&](CmId &id, ConnParam *p, std::string *why) {
		const int rc = setup(id, p, why);
		if (rc != 0)
			*why = "iSER " + where + ": " + *why;
		return rc;
	};
	rdma::CmRec ev;
	if (std::string why; conn_.connect(cp, &ev, &why) != 0)
		return fail(std::move(why));
	IserCmHdr th{0};
	if (parse_iser_cm_hdr(ev.param.pdata(), &th))
		peer_inv_ = cfg_.allow_remote_inv && !(th.flags & ISER_SEND_W_INV_NOT_SUP);
	else
		peer_inv_ = cfg_.allow_remote_inv; // a target that says nothing may use it
	local_ = conn_.id()->local_addr().str();
	peer_ = conn_.id()->peer_addr().str();
	change_state(&state_, State::Up, kConnStates, this);
	return true;
}

int RdmaTransport::setup(CmId &id, ConnParam *cp, std::string *why)
{
	dev_ = id.device();
	const DeviceAttr &da = dev_->attr();
	if (!(da.device_cap_flags & DEVICE_MEM_MGT_EXTENSIONS)) {
		*why = dev_->name() + " has no fast registration (REG_MR): iSER needs one STag "
		                      "per command";
		return -EOPNOTSUPP;
	}
	pd_ = dev_->alloc_pd();
	if (!pd_) {
		const int err = errno;
		*why = std::string("alloc_pd: ") + std::strerror(err);
		return -err;
	}

	// Queue depth by send-queue math (initiator_iser.h); fewer commands when the device's
	// queues are shorter than asked for.
	depth_ = std::max<uint32_t>(1, cfg_.queue_depth);
	const uint32_t max_wr = da.max_qp_wr ? da.max_qp_wr : 16384;
	if (depth_ * kWrsPerCmd + kCtrlSends + 1 > max_wr)
		depth_ = std::max<uint32_t>(1, (max_wr - kCtrlSends - 1) / kWrsPerCmd);
	sq_size_ = depth_ * kWrsPerCmd + kCtrlSends;
	const uint32_t nrecv = depth_ + kUnexpected;
	const uint32_t nsend = depth_ + kCtrlSends;

	// One MR maps one command: max_io bounded by the device's page list.
	uint32_t pages = cfg_.max_io / kPage + 1; // +1: a buffer need not start on a page
	if (da.max_fast_reg_page_list_len && pages > da.max_fast_reg_page_list_len)
		pages = da.max_fast_reg_page_list_len;
	max_io_ = std::min<uint32_t>(cfg_.max_io, (pages - 1) * kPage);
	if (max_io_ == 0) {
		*why = "the device's fast-registration page lists are too short";
		return -EOPNOTSUPP;
	}
	if (int rc = mrs_.init(*pd_, int(depth_), pages); rc != 0) {
		*why = std::string("MR pool: ") + std::strerror(-rc);
		return rc;
	}

	// Buffers: iSER header + BHS + AHS + data. A receive holds the larger of what we
	// declare and a login response (8192); a send the larger of the immediate data we
	// offer to carry and a login request.
	recv_room_ = std::max(cfg_.recv_dsl, kDefaultMrdsl);
	send_room_ = std::max(cfg_.send_dsl, kDefaultMrdsl);
	max_recv_dsl_ = kDefaultMrdsl;
	int rc = recvs_.init(*pd_, kIserHdrLen + kBhsLen + kMaxAhsLen + recv_room_, nrecv,
	                     [this](RecvDesc &d) {
		                     d.cqe.done = recv_done;
		                     d.tp = this;
	                     });
	if (!rc)
		rc = sends_.init(*pd_, kIserHdrLen + kBhsLen + kMaxAhsLen + send_room_ + 4, nsend,
		                 [this](SendDesc &d) {
			                 d.cqe.done = send_done;
			                 d.tp = this;
		                 });
	if (rc) {
		*why = std::string("buffers: ") + std::strerror(-rc);
		return rc;
	}
	// The caller's regions (zero copy) and the bounce heap for everything else.
	for (std::span<uint8_t> r : cfg_.regions) {
		auto mr = pd_->reg_mr(r.data(), r.size(), ACCESS_LOCAL_WRITE);
		if (!mr) {
			const int err = errno;
			*why = std::string("register a buffer region: ") + std::strerror(err);
			return -err;
		}
		if (int rc = map_.register_mr(*mr); rc != 0) {
			*why = std::string("buffer regions overlap: ") + std::strerror(-rc);
			return rc;
		}
		user_mrs_.push_back(std::move(mr));
	}
	size_t max_alloc = kPage;
	while (max_alloc < max_io_)
		max_alloc <<= 1;
	bounce_ = DmaHeap::create(*pd_, std::max(cfg_.bounce_bytes, max_alloc), max_alloc,
	                          ACCESS_LOCAL_WRITE);
	if (!bounce_) {
		const int err = errno;
		*why = std::string("bounce heap: ") + std::strerror(err);
		return -err;
	}

	// One CQ for both queues, polled by this thread and slept on through its channel.
	if (int rc = cq_.create(*dev_, int(sq_size_ + 1 + nrecv + 1 + 2), why); rc != 0)
		return rc;
	QpInitAttr qa;
	qa.send_cq = cq_.cq();
	qa.recv_cq = cq_.cq();
	qa.cap.max_send_wr = sq_size_ + 1; // + drain's marker
	qa.cap.max_recv_wr = nrecv + 1;
	qa.cap.max_send_sge = 1;
	qa.cap.max_recv_sge = 1;
	qa.sq_sig_type = SigType::ReqWr;
	qa.qp_context = this;
	if (int rc = id.create_qp(*pd_, qa); rc != 0) {
		*why = std::string("create_qp: ") + std::strerror(-rc);
		return rc;
	}

	// RFC 7145 5.1.1: receives are posted before the login request can be answered.
	if (int err = recvs_.post_all(*id.qp()); err != 0) {
		*why = std::string("post_recv: ") + std::strerror(-err);
		return err;
	}

	// RFC 7145 / Linux iser_cm_hdr: we use real VAs (no zero-based ones), and the target
	// may invalidate our STags with SEND_WITH_INV unless told otherwise.
	IserCmHdr ch{ISER_ZBVA_NOT_SUP};
	if (!cfg_.allow_remote_inv)
		ch.flags |= ISER_SEND_W_INV_NOT_SUP;
	uint8_t pd[kIserCmHdrLen];
	build_iser_cm_hdr(ch, std::span<uint8_t, kIserCmHdrLen>(pd, kIserCmHdrLen));
	cp->set_private_data(pd);
	// The target READs write data from us and issues no atomics; we READ nothing.
	cp->responder_resources = uint8_t(std::min<uint32_t>(da.max_qp_rd_atom, cfg_.read_credit));
	cp->initiator_depth = 0;
	return 0;
}

// ---- Teardown ---------------------------------------------------------------------------

void RdmaTransport::close()
{
	if (!failed_) {
		failed_ = true;
		if (why_.empty())
			why_ = "closed";
	}
	if (state_ == State::Closed)
		return;
	const State was = state_;
	change_state(&state_, State::Closed, kConnStates, this);
	if (was == State::Idle)
		return;
	// The QP to ERR first: it then starts no new RDMA of the target's into our memory.
	// One already executing may still be writing (the soft provider's engine thread, a
	// NIC's DMA), so the registrations go back only once the QP is drained (teardown).
	conn_.stop();
	// PDUs: those posted were copied into our send buffers at post time, so they can be
	// handed back now; the flushes that follow find nothing to return.
	for (SendDesc &d : sends_.descs())
		if (TxPdu *p = std::exchange(d.pdu, nullptr); p && sink_)
			sink_->on_sent(p, false);
	while (!backlog_.empty()) {
		TxPdu *p = backlog_.front();
		backlog_.pop_front();
		if (sink_)
			sink_->on_sent(p, false);
	}
	// Draining needs this CQ processed, which cannot happen from inside its own
	// processing: then poll() or the destructor finishes the job.
	if (!cq_.in_process())
		teardown();
}

void RdmaTransport::teardown()
{
	if (torn_down_ || state_ != State::Closed)
		return;
	torn_down_ = true;
	// Every posted WR comes back (flushed) through its done(); bounded per queue. The
	// flushes come after whatever the QP was still executing, so from here on nothing
	// touches the registered buffers: they go back to the session (a bounced READ's bytes
	// copied out now are final).
	conn_.drain(cfg_.drain_timeout);
	release_all();
	// The MRs before the QP, as the kernel's ib_destroy_qp does (rdma_rw_cleanup_mrs): on
	// rxe a fast-reg MR is a type-2 memory window, which holds its QP while bound; a QP
	// destroyed under bound windows makes rxe wait, warn, and later underflow the QP's
	// reference count (6.1), after which its connections fail.
	if (mrs_.size() && mrs_.destroy() != 0)
		ULP_LOG(Error, Iser, "initiator: MRs still out at teardown");
	conn_.destroy_qp();
	recvs_.release();
	sends_.release();
	conn_.release(); // waits out a running CM handler
	cq_.destroy();
	bounce_.reset();
	for (auto &mr : user_mrs_)
		map_.unregister_region(reinterpret_cast<void *>(mr->iova()), mr->length());
	user_mrs_.clear();
	pd_.reset();
}

void RdmaTransport::release_all()
{
	for (Reg &r : regs_)
		if (r.live)
			release(r);
	inv_wait_.clear();
}

// ---- Data registration ---------------------------------------------------------------------

RdmaTransport::Reg *RdmaTransport::reg_of(uint32_t itt)
{
	const uint32_t slot = itt & 0xffff;
	if (slot >= regs_.size() || !regs_[slot].live || regs_[slot].itt != itt)
		return nullptr;
	return &regs_[slot];
}

bool RdmaTransport::can_map() const
{
	return state_ == State::Up && mrs_.available() > 0;
}

int RdmaTransport::map_data(uint32_t itt, DataDir dir, std::span<uint8_t> data, uint32_t unsol)
{
	if (state_ != State::Up)
		return -ENOTCONN;
	if (data.empty() || dir == DataDir::None)
		return -EINVAL;
	if (data.size() > max_io_)
		return -E2BIG;
	const uint32_t slot = itt & 0xffff;
	if (slot >= regs_.size())
		regs_.resize(slot + 1);
	Reg &r = regs_[slot];
	if (r.live)
		return -EBUSY; // the session reuses a slot only after on_data_released
	Mr *mr = mrs_.get();
	if (!mr)
		return -EAGAIN;
	uint8_t *dma = data.data();
	bool bounced = false;
	MemTranslation t;
	if (map_.translate(data.data(), data.size(), &t) != 0) {
		dma = static_cast<uint8_t *>(bounce_->alloc(data.size()));
		if (!dma) {
			mrs_.put(mr);
			return -EAGAIN;
		}
		bounced = true;
		if (dir == DataDir::Write)
			std::memcpy(dma, data.data(), data.size());
	}
	SgEntry sg{reinterpret_cast<uint64_t>(dma), uint32_t(data.size())};
	unsigned off = 0;
	int n = mr->map_sg({&sg, 1}, &off, kPage);
	if (n != 1 || mr->length() != data.size()) {
		if (bounced)
			bounce_->free(dma);
		mrs_.put(mr);
		return n < 0 ? n : -EINVAL;
	}
	r = Reg{};
	r.inv_cqe.done = inv_done;
	r.tp = this;
	r.live = true;
	r.itt = itt;
	r.dir = dir;
	r.user = data;
	r.dma = dma;
	r.bounced = bounced;
	r.mr = mr;
	r.unsol = std::min<uint32_t>(unsol, uint32_t(data.size()));
	// The target WRITEs read data into us, READs write data from us (RFC 7145 7.3).
	r.access =
	    dir == DataDir::Read ? ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE : ACCESS_REMOTE_READ;
	// A fresh key per registration: a stale STag of an earlier command fails.
	mr->inc_rkey();
	stats_.mapped++;
	stats_.bounced += bounced;
	return 0;
}

void RdmaTransport::unmap_data(uint32_t itt)
{
	Reg *r = reg_of(itt);
	if (!r || r->unmapping)
		return;
	r->unmapping = true;
	if (state_ == State::Closed)
		return; // teardown releases it once the QP is drained
	if (!r->posted || r->remote_inv) {
		// Never registered on the device, or the target invalidated the key itself:
		// nothing can reach the buffer any more.
		if (r->remote_inv)
			stats_.remote_inv++;
		release(*r);
		return;
	}
	if (!post_inv(*r))
		inv_wait_.push_back(itt & 0xffff);
}

bool RdmaTransport::post_inv(Reg &r)
{
	if (sq_used_ + 1 > sq_size_)
		return false;
	r.inv_wr = SendWr{};
	r.inv_wr.wr_cqe = &r.inv_cqe;
	r.inv_wr.opcode = WrOpcode::LocalInv;
	r.inv_wr.send_flags = SEND_SIGNALED;
	r.inv_wr.invalidate_rkey = r.mr->rkey();
	const SendWr *bad = nullptr;
	if (int rc = conn_.qp()->post_send(&r.inv_wr, &bad); rc != 0) {
		fail(std::string("post LOCAL_INV: ") + std::strerror(-rc));
		return true; // close() released it
	}
	sq_used_++;
	stats_.local_inv++;
	return true;
}

void RdmaTransport::release(Reg &r)
{
	// A READ through the bounce heap: the key is dead, so the bytes are final (all of
	// them when the response came: it follows the RDMA WRITEs, RC ordering); hand them
	// over. What they are worth the session decides from the outcome.
	if (r.bounced) {
		if (r.dir == DataDir::Read)
			std::memcpy(r.user.data(), r.dma, r.user.size());
		bounce_->free(r.dma);
	}
	r.mr->need_inval = false;
	mrs_.put(r.mr);
	r.live = false;
	const uint32_t itt = r.itt;
	if (sink_)
		sink_->on_data_released(itt);
}

void RdmaTransport::inv_done(Cq *, Wc *wc)
{
	auto *r = container_of(wc->wr_cqe, &Reg::inv_cqe);
	RdmaTransport *tp = r->tp;
	tp->sq_used_--;
	if (wc->status != WcStatus::Success && tp->state_ == State::Up)
		tp->fail(std::string("LOCAL_INV: ") + wc_status_str(wc->status));
	if (r->live && tp->state_ == State::Up)
		tp->release(*r);
	// Closed: teardown releases it after the drain.
	tp->run_backlog();
}

// ---- Sending ------------------------------------------------------------------------------

void RdmaTransport::queue(TxPdu *p)
{
	if (state_ != State::Up) {
		sink_->on_sent(p, false);
		return;
	}
	Post r = backlog_.empty() ? post_pdu(p) : Post::NoRoom;
	if (r == Post::NoRoom) {
		backlog_.push_back(p);
		stats_.backlogged++;
	} else if (r == Post::Dropped) {
		sink_->on_sent(p, false);
	}
}

RdmaTransport::Post RdmaTransport::post_pdu(TxPdu *p)
{
	const uint8_t *bhs = p->hdr_len ? p->hdr.data() : p->data.data();
	const size_t len = size_t(p->hdr_len) + p->data.size();
	if (len < kBhsLen || len > sends_.buf_size() - kIserHdrLen) {
		fail("a " + std::to_string(len) + "-byte PDU does not fit an iSER send buffer");
		return Post::Dropped;
	}
	// The command's registration rides with its PDU (RFC 7145 7.3.1: the STags are in
	// the iSER header of the SCSI Command).
	IserHdr ih;
	Reg *r = nullptr;
	if ((bhs[0] & 0x3f) == kOpScsiCmd)
		r = reg_of(get_be32(bhs + 16));
	const uint32_t nwr = r && !r->posted ? 2 : 1;
	if (sends_.empty() || sq_used_ + nwr > sq_size_)
		return Post::NoRoom;
	SendDesc *d = sends_.get();
	if (r) {
		const uint64_t va = reinterpret_cast<uint64_t>(r->dma);
		if (r->dir == DataDir::Read) {
			ih.rsv = true;
			ih.read_stag = r->mr->rkey();
			ih.read_va = va;
		} else {
			ih.wsv = true;
			ih.write_stag = r->mr->rkey();
			ih.write_va = va + r->unsol; // past what the command carries itself
		}
	}
	auto *b = static_cast<uint8_t *>(d->buf->addr);
	build_iser_hdr(ih, std::span<uint8_t, kIserHdrLen>(b, kIserHdrLen));
	size_t n = kIserHdrLen;
	std::memcpy(b + n, p->hdr.data(), p->hdr_len);
	n += p->hdr_len;
	if (!p->data.empty())
		std::memcpy(b + n, p->data.data(), p->data.size());
	n += p->data.size();
	// No padding, no digests: RFC 7145 7.2 lets a SEND end after the data segment.
	d->pdu = p;
	d->nwr = nwr;
	rdma::prepare_send(*d, uint32_t(n));
	SendWr *first = &d->wr;
	if (nwr == 2) {
		d->reg = RegWr{};
		d->reg.opcode = WrOpcode::RegMr;
		d->reg.mr = r->mr;
		d->reg.key = r->mr->rkey();
		d->reg.access = r->access;
		d->reg.next = &d->wr;
		first = &d->reg;
	}
	const SendWr *bad = nullptr;
	if (int rc = conn_.qp()->post_send(first, &bad); rc != 0) {
		d->pdu = nullptr;
		sends_.put(d);
		fail(std::string("post_send: ") + std::strerror(-rc));
		return Post::Dropped;
	}
	if (nwr == 2) {
		r->posted = true;
		r->mr->need_inval = true;
	}
	sq_used_ += nwr;
	stats_.sends++;
	return Post::Posted;
}

void RdmaTransport::run_backlog()
{
	while (state_ == State::Up && !inv_wait_.empty()) {
		const uint32_t slot = inv_wait_.front();
		if (!post_inv(regs_[slot]))
			return;
		inv_wait_.pop_front();
	}
	while (state_ == State::Up && !backlog_.empty()) {
		TxPdu *p = backlog_.front();
		Post r = post_pdu(p);
		if (r == Post::NoRoom)
			return;
		backlog_.pop_front();
		if (r == Post::Dropped && sink_)
			sink_->on_sent(p, false);
	}
}

void RdmaTransport::send_done(Cq *, Wc *wc)
{
	SendDesc *d = rdma::SendRing<SendDesc>::from(wc);
	RdmaTransport *tp = d->tp;
	tp->sq_used_ -= d->nwr;
	TxPdu *p = std::exchange(d->pdu, nullptr);
	tp->sends_.put(d);
	const bool ok = wc->status == WcStatus::Success;
	if (!ok && tp->state_ == State::Up) // a flush while up: the QP left RTS on its own
		tp->fail(std::string("send: ") + wc_status_str(wc->status));
	if (p && tp->sink_)
		tp->sink_->on_sent(p, ok);
	tp->run_backlog();
}

// ---- Receiving ----------------------------------------------------------------------------

void RdmaTransport::post_recv(RecvDesc *d)
{
	if (int rc = recvs_.post(*conn_.qp(), *d); rc != 0)
		fail(std::string("post_recv: ") + std::strerror(-rc));
}

void RdmaTransport::recv_done(Cq *, Wc *wc)
{
	RecvDesc *d = rdma::RecvRing<RecvDesc>::from(wc);
	d->tp->on_recv(d, *wc);
}

void RdmaTransport::on_recv(RecvDesc *d, const Wc &wc)
{
	if (state_ != State::Up && state_ != State::Connecting)
		return; // a flush while closing
	if (wc.status != WcStatus::Success) {
		if (wc.status != WcStatus::WrFlushErr)
			fail(std::string("receive: ") + wc_status_str(wc.status));
		else
			fail("connection flushed");
		return;
	}
	std::span<const uint8_t> in(static_cast<const uint8_t *>(d->buf->addr), wc.byte_len);
	IserHdr ih;
	Pdu pdu;
	PduError pe;
	if (std::string why; !parse_iser_message(in, max_recv_dsl_, &ih, &pdu, &pe, &why)) {
		fail("from the target: " + why);
		return;
	}
	// Remote invalidation (RFC 7145's STag invalidation, Linux iser_check_remote_inv): only
	// with the SCSI Response of the command the key belongs to, and only if we allowed it.
	if (wc.wc_flags & WC_WITH_INVALIDATE) {
		const uint8_t op = pdu.bhs[0] & 0x3f;
		Reg *r = op == kOpScsiRsp ? reg_of(get_be32(pdu.bhs.data() + 16)) : nullptr;
		char buf[96];
		if (!cfg_.allow_remote_inv || !r || !r->posted ||
		    r->mr->rkey() != wc.invalidate_rkey) {
			std::snprintf(buf, sizeof(buf),
			              "the target invalidated STag %08x, not the key of this %s",
			              wc.invalidate_rkey,
			              op == kOpScsiRsp ? "command" : "PDU (no command)");
			fail(buf);
			return;
		}
		r->remote_inv = true;
	}
	stats_.recvs++;
	sink_->on_pdu(pdu, pe);
	if (state_ == State::Up)
		post_recv(d); // the PDU is taken apart: its buffer goes back
}

// ---- Polling -------------------------------------------------------------------------------

int RdmaTransport::process()
{
	const int n = cq_.process();
	if (state_ == State::Closed)
		teardown(); // a callback closed us: finish outside the CQ's processing
	return n;
}

bool RdmaTransport::poll(std::chrono::milliseconds timeout)
{
	if (state_ != State::Up)
		return false;
	const auto deadline = clock::now() + timeout;
	// The CM's events first; a disconnect after what the target sent before it.
	auto take_cm = [this] {
		if (auto w =
		        conn_.take_events([this] { return state_ == State::Up && process() > 0; }))
			fail(std::move(*w));
		return state_ == State::Up;
	};
	rdma::ClientConn *const conns[] = {&conn_};
	for (;;) {
		if (!take_cm())
			return false;
		if (process() > 0)
			return state_ == State::Up;
		std::string why;
		const int rc = rdma::wait_events(
		    &cq_, conns, poll_timeout_ms(deadline), [this] { return process(); }, &why);
		if (rc < 0)
			return fail(std::move(why));
		if (rc > 0)
			return state_ == State::Up;
		if (poll_timeout_ms(deadline) == 0)
			return take_cm();
	}
}

} // namespace

std::unique_ptr<InitiatorTransport> make_transport(const InitiatorConfig &cfg)
{
	return std::make_unique<RdmaTransport>(cfg);
}

} // namespace ulp::iser
