// SPDX-License-Identifier: MIT
// srp/target/channel.cc - an SRP channel's life: set-up, receives and the wait list, credits,
// ioctxs, the zero-length-write close (see channel.h). The commands themselves are in
// cmd.cc.
#include "srp/target/channel.h"

#include "core/lock_assert.h"
#include "core/log.h"
#include "srp/target/portal.h"

#include <algorithm>
#include <cstring>

namespace ulp::srpt
{

const char *ch_state_str(ChState s)
{
	switch (s) {
	case ChState::Connecting:
		return "connecting";
	case ChState::Live:
		return "live";
	case ChState::Disconnecting:
		return "disconnecting";
	case ChState::Draining:
		return "draining";
	case ChState::Disconnected:
		return "disconnected";
	}
	return "?";
}

const char *io_state_str(IoState s)
{
	switch (s) {
	case IoState::Free:
		return "free";
	case IoState::New:
		return "new";
	case IoState::FetchTable:
		return "fetch-table";
	case IoState::Submitted:
		return "submitted";
	case IoState::NeedData:
		return "need-data";
	case IoState::Responding:
		return "responding";
	case IoState::Done:
		return "done";
	}
	return "?";
}

namespace
{

// RDMA READ/WRITE SGEs one context may carry: its scatter table is one slice of a
// contiguous DmaHeap block, so this only matters on the MR path.
constexpr uint32_t kRwMaxSge = 32;
// The smallest send queue budget tried when the device refuses a larger one.
constexpr uint32_t kMinSqSize = 64;
// How often a closed channel that still waits for its commands says so.
constexpr auto kWaitLogPeriod = std::chrono::seconds(5);

} // namespace

Channel::Channel(Portal &portal, std::unique_ptr<CmId> id, std::string peer)
    : rdma::PortalConn(portal, std::move(id)), Serial<ChEvent, ChArg>(Mode::Inline),
      portal_(portal), target_(portal.target()), peer_(std::move(peer))
{
	zlw_cqe_.done = zlw_done;
	target_.add_channel(this);
}

Channel::~Channel()
{
	Channel::release_resources();
}

int Channel::setup(rdma::DeviceRes &res, const ChannelParams &p, std::shared_ptr<SrpNexus> nexus,
                   std::string *why)
{
	const TargetConfig &cfg = target_.cfg();
	const DeviceAttr &da = res.dev->attr();
	heap_ = res.heap.get();
	p_ = p;
	cfg_rq_ = std::max<uint32_t>(1, std::min(cfg.rq_size, da.max_qp_wr - kSpareRecvs - 1));
	const uint32_t nrecv = cfg_rq_ + kSpareRecvs;
	const uint32_t nio = cfg_rq_ + kSpareIoctxs;

	int rc = 0;
	if (cfg.use_srq) {
		srq_ = portal_.srq(res, &share_, why);
		if (!srq_)
			return -ENOMEM;
		// This channel's share, counting itself (channel.h: credits on an SRQ).
		share_->channels.fetch_add(1, std::memory_order_relaxed);
		in_share_ = true;
	} else {
		rc = recvs_.init(*res.pd, p.it_iu_len, nrecv, [this](RecvIoctx &r) {
			r.cqe.done = recv_done;
			r.ch = this;
		});
	}
	if (!rc)
		rc = ioctxs_.init(*res.pd, kMaxTiIuLen, nio, [this](Ioctx &x) {
			x.cqe.done = send_done;
			x.rw_cqe.done = rw_done;
			x.piece.unsent = piece_unsent;
			x.ch = this;
		});
	if (!rc)
		rc = ctl_.init(*res.pd, srp::kCredReqLen, 2, [this](CtlDesc &d) {
			d.cqe.done = ctl_done;
			d.ch = this;
		});
	if (rc) {
		*why = std::string("buffers: ") + std::strerror(-rc);
		return rc;
	}

	// The QP: sq_size / 2 response SENDs and sq_size / 2 rw contexts (rw_init_qp grows the
	// queue by what each context may need), + the zero-length WRITE and drain's marker.
	// A device that cannot take it gets half, and so on (ib_srpt retries the same way).
	RwQpOptions ro;
	ro.max_pages = uint32_t(std::min<size_t>(cfg.max_io, heap_->max_alloc()) / kRwPageSize);
	ro.max_entries = 1; // one remote descriptor's slice of one contiguous block
	uint32_t sq = std::max(cfg.sq_size, kMinSqSize);
	for (;;) {
		QpInitAttr qa;
		qa.cap.max_send_wr = sq / 2 + 2;
		qa.cap.max_recv_wr = srq_ ? 0 : nrecv + 1;
		qa.cap.max_send_sge = std::min(da.max_sge, kRwMaxSge);
		qa.cap.max_recv_sge = 1;
		qa.cap.max_rdma_ctxs = sq / 2;
		qa.srq = srq_;
		qa.sq_sig_type = SigType::ReqWr;
		qa.qp_context = static_cast<rdma::PortalConn *>(this);
		qa.event_handler = [this](const AsyncEvent &e) { on_qp_event(e); };
		rc = create_qp(*res.pd, qa, &ro, why);
		if (rc == 0)
			break;
		if (cq() || sq / 2 < kMinSqSize) // failed past rw_init_qp, or too small already
			return rc;
		ULP_LOG(Info, Srpt,
		        "{}: a send queue of {} WRs does not fit the device ({}); trying {}", peer_,
		        sq, *why, sq / 2);
		sq /= 2;
	}
	// Every WR is counted: the responses' and the contexts' (their true size, rw_init_qp's
	// reservation), less the two kept for the close.
	sq_budget_ = sq / 2 + rwqp()->max_rdma_ctxs() * rwqp()->ctx_bound().wrs;
	sq_avail_ = sq_budget_;
	grant_ = credit_limit();
	req_lim_ = int32_t(grant_);
	window_ = int32_t(grant_);
	publish();
	if (!srq_) {
		// SRP r16a 5.5: the credits granted at login are receives posted before the
		// initiator can send (the accept carries the grant).
		if (int err = recvs_.post_all(*qp()); err != 0) {
			*why = std::string("post_recv: ") + std::strerror(-err);
			return err;
		}
	}
	nexus_ = std::move(nexus);
	target_.attach(nexus_, this);
	in_nexus_ = true;
	return 0;
}

void Channel::leave_share()
{
	if (in_share_) {
		in_share_ = false;
		share_->channels.fetch_sub(1, std::memory_order_relaxed);
	}
}

uint32_t Channel::credit_limit() const
{
	return share_ ? share_->limit(cfg_rq_) : cfg_rq_;
}

void Channel::release_resources()
{
	leave_share();
	for (Ioctx &x : ioctxs_.descs())
		for (auto &r : x.rw)
			r->destroy();
	// The RDMA half first (rw contexts' MR pool, QP, CQ): nothing may complete into the
	// rings once their buffers go.
	rdma::PortalConn::release_resources();
	recvs_.release();
	ioctxs_.release();
	ctl_.release();
}

void Channel::detach()
{
	target_.remove_channel(this);
	quiesce();
}

std::string Channel::describe()
{
	return peer_ + " (" + ch_state_str(state_) + ")";
}

void Channel::kick()
{
	portal_.kick(this);
}

void Channel::set_state(ChState s)
{
	change_state(&state_, s, kChStates, this);
}

bool Channel::finished()
{
	bool fin = false;
	enter([&] {
		fin = state_ == ChState::Disconnected && busy_ == 0 && !reap_wait_ && !plug_due() &&
		      ctl_.free_count() == ctl_.size();
	});
	return fin;
}

// ---- Events --------------------------------------------------------------------------------

void Channel::run_event(ChEvent ev, ChArg arg)
{
	Ioctx *x = arg.x;
	switch (ev) {
	case ChEvent::WritePending:
		do_write_pending(x);
		break;
	case ChEvent::AbortWrite:
		do_abort_write(x);
		break;
	case ChEvent::DataIn:
		do_data_in(x);
		break;
	case ChEvent::FlushPlug:
		plug_turn_ended();
		break;
	case ChEvent::Status:
		do_status(x);
		break;
	case ChEvent::AbortedTask:
		do_aborted(x);
		break;
	case ChEvent::TmRsp:
		do_tm_rsp(x);
		break;
	case ChEvent::Release:
		do_release(x);
		break;
	case ChEvent::ReapDone:
		reap_wait_ = false;
		break;
	case ChEvent::Close:
		close(arg.why);
		break;
	case ChEvent::Logout:
		send_t_logout();
		break;
	}
}

void Channel::on_cm_event(CmEvent &ev)
{
	switch (ev.event) {
	case CmEventType::Established:
		enter([&] {
			if (state_ != ChState::Connecting)
				return;
			set_state(ChState::Live);
			process_wait_list();
		});
		break;
	case CmEventType::Disconnected:
	case CmEventType::DeviceRemoval:
	case CmEventType::ConnectError:
	case CmEventType::Unreachable:
	case CmEventType::Rejected:
		enter([&] { close(cm_event_str(ev.event)); });
		break;
	default:
		break; // TimewaitExit and the rest: nothing to do
	}
}

void Channel::tick(std::chrono::steady_clock::time_point now)
{
	enter([&] {
		switch (state_) {
		case ChState::Connecting:
		case ChState::Live:
			if (check_qp_event())
				break;
			if (state_ == ChState::Live)
				check_transfers(now);
			break;
		case ChState::Draining:
			// The zero-length WRITE's flush is the end of the send queue; a provider
			// that never returns it must not keep the channel forever.
			if (now - closed_at_ > target_.cfg().drain_timeout) {
				ULP_LOG(Error, Srpt,
				        "{}: the closing zero-length WRITE has not come back after "
				        "{} ms; "
				        "going on without it",
				        peer_, target_.cfg().drain_timeout.count());
				on_disconnected();
			}
			break;
		case ChState::Disconnected:
			reclaim_lost(now);
			if (now >= next_wait_log_ && (busy_ || reap_wait_)) {
				next_wait_log_ = now + kWaitLogPeriod;
				const auto s = std::chrono::duration_cast<std::chrono::seconds>(
				    now - closed_at_);
				ULP_LOG(Warn, Srpt,
				        "{}: closed {} s ago, still waiting for {} commands{}",
				        peer_, s.count(), busy_,
				        reap_wait_ ? " and the nexus's teardown" : "");
			}
			break;
		default:
			break;
		}
	});
}

// ---- Receives --------------------------------------------------------------------------------

void Channel::recv_done(Cq *, Wc *wc)
{
	RecvIoctx *r = rdma::RecvRing<RecvIoctx>::from(wc);
	// A ring's receive knows its channel; an SRQ's is the channel's whose QP consumed it.
	Channel *ch = r->ch;
	if (!ch)
		ch = static_cast<Channel *>(static_cast<rdma::PortalConn *>(wc->qp->qp_context));
	ch->enter([&] { ch->handle_recv(r, *wc); });
}

void Channel::repost(RecvIoctx *r)
{
	int rc;
	if (srq_)
		rc = rdma::post_recv(*srq_, *r, uint32_t(target_.cfg().max_it_iu_len));
	else if (state_ < ChState::Disconnecting)
		rc = recvs_.post(*qp(), *r);
	else
		return; // a closing channel's own receives are flushed, not reposted
	if (rc != 0 && state_ < ChState::Disconnecting)
		close("post_recv failed");
}

void Channel::handle_recv(RecvIoctx *r, const Wc &wc)
{
	if (wc.status != WcStatus::Success) {
		// A flush we did not cause is a QP that left RTS on its own (a fatal error): the
		// channel is as dead as after any other error. An SRQ's receive goes back to it.
		if (srq_)
			repost(r);
		if (state_ < ChState::Disconnecting) {
			// A flush is the normal logout on RoCE: the CM moves the QP to ERR when the
			// initiator's DREQ arrives and only then reports DISCONNECTED (rxe +
			// Linux's ib_srp: one channel in four saw its receives flushed first). Not
			// a warning.
			if (wc.status == WcStatus::WrFlushErr) {
				close("receives flushed (the initiator disconnected)");
				return;
			}
			ULP_LOG_RATELIMITED(Warn, Srpt, "{}: receive: {}", peer_,
			                    wc_status_str(wc.status));
			close("receive failed");
		}
		return;
	}
	r->byte_len = wc.byte_len;
	if (state_ >= ChState::Disconnecting) {
		repost(r);
		return;
	}
	// In order: once anything waits, everything after it waits too.
	if (state_ == ChState::Connecting || !wait_list_.empty() || !process_iu(r)) {
		wait_list_.push_back(*r);
		target_.count(&TargetStats::wait_list);
	}
}

void Channel::process_wait_list()
{
	// A command taken up here may free an ioctx at once (refused), which calls back here:
	// the outer loop carries on instead, in order.
	if (in_wait_list_)
		return;
	in_wait_list_ = true;
	while (state_ == ChState::Live && !wait_list_.empty()) {
		RecvIoctx &r = wait_list_.front();
		wait_list_.pop_front();
		if (!process_iu(&r)) {
			wait_list_.push_front(r);
			break;
		}
	}
	in_wait_list_ = false;
}

// SRP r16a 5.5: SRP_CMD, SRP_TSK_MGMT and SRP_I_LOGOUT each spend a credit.
static bool spends_credit(int op)
{
	return op == srp::CMD || op == srp::TSK_MGMT || op == srp::I_LOGOUT;
}

bool Channel::process_iu(RecvIoctx *r)
{
	ULP_ASSERT_HELD(*this); // the serialiser: a channel's work is its holder's
	const std::span<const uint8_t> iu(static_cast<const uint8_t *>(r->buf->addr), r->byte_len);
	const int op = srp::iu_opcode(iu);
	Ioctx *x = nullptr;
	if (op == srp::CMD || op == srp::TSK_MGMT) {
		x = get_ioctx();
		if (!x)
			return false; // waits for a release
	}
	if (spends_credit(op) && --req_lim_ < 0) {
		// More requests than credits: Linux never does this. What it sends beyond the
		// spare receives waits in its own queue (RNR), so this is bounded; say so once.
		target_.count(&TargetStats::credit_overruns);
		if (!told_overrun_) {
			told_overrun_ = true;
			ULP_LOG(Warn, Srpt,
			        "{}: the initiator sent a request without a credit (SRP r16a 5.5); "
			        "counting on",
			        peer_);
		}
	}
	publish();
	switch (op) {
	case srp::CMD:
		handle_cmd(x, iu);
		break;
	case srp::TSK_MGMT:
		handle_tsk_mgmt(x, iu);
		break;
	case srp::I_LOGOUT:
		// SRP r16a 6.6: the initiator ends the channel (ib_srpt ignores it).
		target_.count(&TargetStats::i_logouts);
		repost(r);
		close("the initiator logged out (SRP_I_LOGOUT)");
		return true;
	case srp::CRED_RSP:
	case srp::AER_RSP:
		// Answers to our requests; they spend no credit.
		if (op == srp::CRED_RSP)
			cred_req_out_ = false;
		break;
	default:
		target_.count(&TargetStats::bad_ius);
		ULP_LOG_RATELIMITED(Warn, Srpt, "{}: an IU with opcode {:#04x} ({} bytes): closing",
		                    peer_, op < 0 ? 0 : op, iu.size());
		repost(r);
		close("unknown information unit");
		return true;
	}
	// Taken apart (what the command needs is copied into its ioctx): the receive goes
	// back before the response that returns its credit.
	repost(r);
	maybe_cred_req();
	return true;
}

// ---- Ioctxs and credits ------------------------------------------------------------------

Ioctx *Channel::get_ioctx()
{
	Ioctx *x = ioctxs_.get();
	if (!x)
		return nullptr;
	busy_++;
	change_state(&x->state, IoState::New, kIoStates, x);
	x->opcode = 0;
	x->tag = 0;
	x->in_core = false;
	x->data = nullptr;
	x->data_len = 0;
	x->immediate = false;
	x->descs.clear();
	x->table_buf = nullptr;
	x->table_entries = 0;
	x->job = RwJob::None;
	x->n_rw = 0;
	x->next_rw = 0;
	x->wrs_posted = 0;
	x->rw_len = 0;
	x->abort_write = false;
	x->rsp_len = 0;
	return x;
}

void Channel::put_ioctx(Ioctx *x)
{
	destroy_rw(x);
	free_data(x);
	change_state(&x->state, IoState::Free, kIoStates, x);
	ioctxs_.put(x);
	busy_--;
	publish();
	process_wait_list();
	maybe_cred_req();
}

void Channel::publish()
{
	gauges_.req_lim.store(req_lim_, std::memory_order_relaxed);
	gauges_.ioctxs_busy.store(busy_, std::memory_order_relaxed);
}

uint32_t Channel::take_delta()
{
	ULP_ASSERT_HELD(*this); // the serialiser: a channel's work is its holder's
	// channel.h's credits: each response returns its own request's credit and whatever is owed:
	// 1 + owed, which keeps window_ where it is. On an SRQ, what brings window_ to the
	// channel's share instead (channel.h): less while others joined, more once they left.
	const int32_t kept = window_ - 1 - int32_t(owed_); // this request's credit settled
	const uint32_t d = uint32_t(std::max<int32_t>(0, int32_t(credit_limit()) - kept));
	owed_ = 0;
	window_ = kept + int32_t(d);
	req_lim_ += int32_t(d);
	publish();
	return d;
}

void Channel::maybe_cred_req()
{
	// SRP r16a 6.7: credits owed (requests that got no response) go back in an
	// SRP_CRED_REQ when no response is coming to carry them. One at a time: the initiator
	// has a receive for it (Linux keeps one beyond its queue for exactly this).
	// On an SRQ also the credits a grown share adds (channel.h).
	const int32_t give = int32_t(credit_limit()) - (window_ - int32_t(owed_));
	if (give <= 0 || cred_req_out_ || busy_ != 0 || state_ != ChState::Live || sq_avail_ == 0 ||
	    !sq_wait_.empty())
		return;
	CtlDesc *d = ctl_.get();
	if (!d)
		return;
	srp::CredReq c;
	c.tag = ++ctl_tag_;
	c.req_lim_delta = uint32_t(give);
	const size_t n = srp::build_cred_req(
	    c, std::span<uint8_t>(static_cast<uint8_t *>(d->buf->addr), ctl_.buf_size()));
	ULP_CHECK(n != 0);
	rdma::prepare_send(*d, uint32_t(n));
	const SendWr *bad = nullptr;
	if (int rc = qp()->post_send(&d->wr, &bad); rc != 0) {
		ctl_.put(d);
		close("post_send failed");
		return;
	}
	d->posted = true;
	req_lim_ += give;
	window_ += give - int32_t(owed_);
	owed_ = 0;
	sq_avail_--;
	cred_req_out_ = true;
	publish();
	target_.count(&TargetStats::cred_reqs);
}

void Channel::send_t_logout()
{
	// SRP r16a 6.6: the target asks the initiator to log out; the channel is closed once
	// the IU has been delivered (its send completed), since nothing obliges the initiator
	// to answer (Linux's ib_srp only logs it). No buffer or send queue room: close now.
	if (state_ != ChState::Live || t_logout_)
		return;
	// The responses this turn has plugged go first, in the order they were made: the
	// initiator may disconnect as soon as it reads the logout. (A refused post closes.)
	flush_plug();
	if (state_ != ChState::Live)
		return;
	CtlDesc *d = sq_avail_ > 0 ? ctl_.get() : nullptr;
	if (!d) {
		close("logged out by the target");
		return;
	}
	srp::TLogout t;
	t.tag = ++ctl_tag_;
	const size_t n = srp::build_t_logout(
	    t, std::span<uint8_t>(static_cast<uint8_t *>(d->buf->addr), ctl_.buf_size()));
	ULP_CHECK(n != 0);
	rdma::prepare_send(*d, uint32_t(n));
	const SendWr *bad = nullptr;
	if (qp()->post_send(&d->wr, &bad) != 0) {
		ctl_.put(d);
		close("logged out by the target");
		return;
	}
	sq_avail_--;
	t_logout_ = d;
	ULP_LOG(Info, Srpt, "{}: SRP_T_LOGOUT sent (the administrator's logout)", peer_);
}

void Channel::ctl_done(Cq *, Wc *wc)
{
	CtlDesc *d = rdma::SendRing<CtlDesc>::from(wc);
	Channel *ch = d->ch;
	ch->enter([&] {
		d->posted = false;
		ch->ctl_.put(d);
		ch->sq_avail_++;
		if (d == ch->t_logout_) {
			ch->t_logout_ = nullptr;
			ch->close("logged out by the target");
			return;
		}
		if (wc->status != WcStatus::Success) {
			if (ch->state_ < ChState::Disconnecting) {
				ULP_LOG_RATELIMITED(Warn, Srpt, "{}: SRP_CRED_REQ: {}", ch->peer_,
				                    wc_status_str(wc->status));
				ch->close("send failed");
			}
			return;
		}
		ch->run_sq_wait();
	});
}

// ---- Close -----------------------------------------------------------------------------------

void Channel::close(const char *why)
{
	if (state_ >= ChState::Disconnecting)
		return;
	close_why_ = why;
	ULP_LOG(Info, Srpt, "{}: channel closing: {}", peer_, why);
	leave_share(); // its credits go to the channels still on the SRQ
	set_state(ChState::Disconnecting);
	// What this turn plugged goes out ahead of the DREQ (or is flushed with the rest); a
	// refusal closes again, which finds the channel closing, and fails those pieces.
	close_plug();
	// The DREQ (rdma_disconnect also moves the QP to ERR on IB and RoCE).
	id().disconnect();
	set_state(ChState::Draining);
	closed_at_ = std::chrono::steady_clock::now();
	// Our own move to ERR, whatever the disconnect did (iWARP, a DREQ that failed), then
	// the marker: a signaled zero-length WRITE whose flush comes back after every WR posted
	// before it has completed (IB spec C9-88: a zero-length WRITE checks no key).
	QpAttr a;
	a.qp_state = QpState::Err;
	qp()->modify(a, QP_STATE);
	zlw_ = RdmaWr{};
	zlw_.opcode = WrOpcode::RdmaWrite;
	zlw_.wr_cqe = &zlw_cqe_;
	zlw_.send_flags = SEND_SIGNALED;
	const SendWr *bad = nullptr;
	const bool zlw_posted = qp()->post_send(&zlw_, &bad) == 0;
	// What waits goes: IUs not taken up (an SRQ's receives go back to it), transfers and
	// responses waiting for room in the send queue.
	while (!wait_list_.empty()) {
		RecvIoctx &r = wait_list_.front();
		wait_list_.pop_front();
		repost(&r);
	}
	while (!sq_wait_.empty()) {
		Ioctx &x = sq_wait_.front();
		sq_wait_.pop_front();
		fail_job(&x);
	}
	// The nexus goes on without this channel; the last one out closes it (on the reaper:
	// its commands are aborted and waited for).
	if (in_nexus_) {
		in_nexus_ = false;
		reap_wait_ = target_.detach(nexus_, this);
	}
	if (!zlw_posted)
		on_disconnected();
}

void Channel::zlw_done(Cq *, Wc *wc)
{
	Channel *ch = container_of(wc->wr_cqe, &Channel::zlw_cqe_);
	ch->enter([&] {
		if (ch->state_ == ChState::Draining)
			ch->on_disconnected();
	});
}

void Channel::reclaim_lost(std::chrono::steady_clock::time_point now)
{
	// Once the QP is drained, every WR posted before the close has completed or been
	// flushed (the drain marker's flush comes after them all, in order). A send still
	// counted as posted lost its completion (a device that dropped it; the soft provider's
	// DropCompletion): its command would wait with the core for ever, the nexus's teardown
	// for the command, and the channel for the teardown. A completion that is only late
	// comes within data_timeout; past it, the send is taken back and its command ended as
	// if the transfer had failed (its data, if any, never counted as received).
	if (!drained() || now - closed_at_ <= target_.cfg().data_timeout)
		return;
	for (Ioctx &x : ioctxs_.descs()) {
		if (x.wrs_posted == 0)
			continue;
		ULP_LOG(Error, Srpt,
		        "{}: tag {:#x}: the completion of {} never came ({} ms after the close, "
		        "the QP drained); ending the command without it",
		        peer_, x.tag,
		        x.job == RwJob::DataOut  ? "the RDMA READ of its write data"
		        : x.job == RwJob::Table  ? "the RDMA READ of its descriptor table"
		        : x.job == RwJob::DataIn ? "the RDMA WRITE of its read data"
		                                 : "its SRP_RSP",
		        std::chrono::duration_cast<std::chrono::milliseconds>(now - closed_at_)
		            .count());
		sq_avail_ += x.wrs_posted;
		x.wrs_posted = 0;
		fail_job(&x);
	}
	for (CtlDesc &d : ctl_.descs()) {
		if (!d.posted)
			continue;
		ULP_LOG(Error, Srpt,
		        "{}: the completion of an SRP_CRED_REQ never came; taking it back", peer_);
		d.posted = false;
		ctl_.put(&d);
		sq_avail_++;
	}
}

void Channel::on_qp_event(const AsyncEvent &e)
{
	// A provider thread: only note it (the first that ends the QP); tick acts on it.
	switch (e.event) {
	case EventType::QpFatal:
	case EventType::QpReqErr:
	case EventType::QpAccessErr:
	case EventType::QpLastWqeReached: {
		uint8_t none = 0;
		qp_event_.compare_exchange_strong(none, uint8_t(uint8_t(e.event) + 1));
		break;
	}
	default:
		break; // COMM_EST and the rest: the CM says what matters
	}
}

bool Channel::check_qp_event()
{
	// A QP that left RTS on its own says so through a completion only if something is
	// posted on it: on receive rings its receives are flushed, but a QP on the SRQ has none
	// of its own, and an idle one would sit in ERR, its channel live, until the initiator
	// next sent (IB spec 11.6.3.5: LAST_WQE_REACHED is what tells).
	const uint8_t v = qp_event_.load(std::memory_order_acquire);
	if (!v)
		return false;
	const EventType e = EventType(v - 1);
	if (e == EventType::QpLastWqeReached)
		ULP_LOG(Info, Srpt, "{}: its QP left RTS (LAST_WQE_REACHED): closing", peer_);
	else
		ULP_LOG(Warn, Srpt, "{}: its QP failed ({}): closing", peer_, event_type_str(e));
	close(e == EventType::QpLastWqeReached ? "the QP left RTS" : "the QP failed");
	return true;
}

void Channel::on_disconnected()
{
	set_state(ChState::Disconnected);
	closed_at_ = std::chrono::steady_clock::now();
	next_wait_log_ = closed_at_ + kWaitLogPeriod;
	// The portal drains the QP (its receives too), bounded, and frees the channel once
	// finished(): every ioctx back and the nexus closed.
	portal_.schedule_close(this);
}

} // namespace ulp::srpt
