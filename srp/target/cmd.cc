// SPDX-License-Identifier: MIT
// srp/target/cmd.cc - an SRP channel's commands: SRP_CMD and SRP_TSK_MGMT taken apart and given
// to the SCSI core, their data moved by rw contexts (one per remote descriptor, chained,
// within the send queue's budget), and their SRP_RSPs (see channel.h).
#include "core/lock_assert.h"
#include "core/log.h"
#include "core/trace.h"
#include "scsi/core.h"
#include "scsi/sense.h"
#include "srp/target/channel.h"
#include "srp/target/portal.h"

#include <algorithm>
#include <cstring>

namespace ulp::srpt
{

namespace
{

scsi::TaskAttr task_attr(uint8_t a)
{
	switch (a) {
	case srp::ATTR_HEAD:
		return scsi::TaskAttr::HeadOfQueue;
	case srp::ATTR_ORDERED:
		return scsi::TaskAttr::Ordered;
	case srp::ATTR_ACA:
		return scsi::TaskAttr::Aca;
	default:
		return scsi::TaskAttr::Simple; // SIMPLE, and the reserved values as SIMPLE
	}
}

// SRP r16a 6.9 table 24 (RSP_CODE) for the core's answer to a task management function.
uint8_t tm_rsp_code(scsi::TmfResponse r)
{
	switch (r) {
	case scsi::TmfResponse::Complete:
	// SAM-5 7.2: ABORT TASK of a task the target does not have is FUNCTION COMPLETE (the
	// task is gone either way); Linux's ib_srp takes anything else as a failed abort and
	// escalates to a LUN reset.
	case scsi::TmfResponse::TaskNotFound:
		return srp::TM_COMPLETE;
	case scsi::TmfResponse::Succeeded:
		return srp::TM_SUCCEEDED;
	case scsi::TmfResponse::LunNotFound:
		return srp::TM_INCORRECT_LUN;
	case scsi::TmfResponse::NotSupported:
	case scsi::TmfResponse::Rejected:
		return srp::TM_NOT_SUPPORTED;
	case scsi::TmfResponse::Failed:
		return srp::TM_FAILED;
	}
	return srp::TM_FAILED;
}

} // namespace

// ---- SRP_CMD -------------------------------------------------------------------------------

void Channel::handle_cmd(Ioctx *x, std::span<const uint8_t> iu)
{
	target_.count(&TargetStats::cmds);
	x->opcode = srp::CMD;
	const TargetConfig &cfg = target_.cfg();
	srp::CmdParseOpts o;
	o.imm_data_offset = p_.imm_data_offset;
	o.max_table_entries = cfg.max_table_entries;
	srp::Cmd c;
	const srp::CmdError e = srp::parse_cmd(iu, o, &c);
	x->tag = c.tag;
	// Every SRP_CMD with a tag, refused ones too: each gets an srp_rsp.
	ULP_TRACE(srp_cmd, x, &x->cmd, c.tag, c.data_len);
	if (e != srp::CmdError::None) {
		target_.count(&TargetStats::bad_ius);
		ULP_LOG_RATELIMITED(Warn, Srpt, "{}: SRP_CMD refused: {} ({} bytes)", peer_,
		                    srp::cmd_error_name(e), iu.size());
		if (e == srp::CmdError::Short && iu.size() < srp::kCmdLen) {
			// Not even the fixed part: no tag to answer to.
			put_ioctx(x);
			close("SRP_CMD shorter than its fixed part");
			return;
		}
		refuse_cmd(x, scsi::Sense::InvalidFieldInCommandIu);
		return;
	}
	fill_cmd(x, c);
	if (c.data_len == 0) {
		submit(x);
		return;
	}
	if (!alloc_data(x, c.data_len))
		return; // answered (TASK SET FULL, or too large)
	x->iov = iovec{x->data, c.data_len};
	x->cmd.sgl = std::span<const iovec>(&x->iov, 1);
	const srp::DescFmt fmt = c.write() ? c.out_fmt : c.in_fmt;
	switch (fmt) {
	case srp::DescFmt::Immediate:
		// SRP-2: the data came with the command; copied out, so that the receive goes back
		// at once.
		std::memcpy(x->data, c.imm.data(), c.imm.size());
		x->immediate = true;
		target_.count(&TargetStats::immediate);
		submit(x);
		return;
	case srp::DescFmt::Direct:
		x->descs.push_back(srp::desc_at(c.descs, 0));
		submit(x);
		return;
	case srp::DescFmt::Indirect:
		break;
	case srp::DescFmt::None:
		break;
	}
	if (!c.table_external()) {
		for (uint32_t i = 0; i < c.ndescs; i++)
			x->descs.push_back(srp::desc_at(c.descs, i));
		submit(x);
		return;
	}
	// The partial list in the IU is not the whole table (Linux's allow_ext_sg, when a
	// command has more descriptors than cmd_sg_entries): read the table from the
	// initiator first. Neither ib_srpt nor SCST does; they answer BUSY forever.
	if (p_.read_credit == 0) {
		refuse_cmd(x, scsi::Sense::InsufficientResources);
		return;
	}
	x->table_desc = c.table;
	x->table_entries = c.table_entries;
	x->table_buf = static_cast<uint8_t *>(heap_->alloc(c.table.len));
	if (!x->table_buf) {
		target_.count(&TargetStats::task_set_full);
		refuse_cmd(x, scsi::Sense::TaskSetFull);
		return;
	}
	target_.count(&TargetStats::ext_tables);
	change_state(&x->state, IoState::FetchTable, kIoStates, x);
	start_rw(x, RwJob::Table, c.table.len);
}

void Channel::fill_cmd(Ioctx *x, const srp::Cmd &c)
{
	scsi::Cmd *sc = &x->cmd;
	scsi::cmd_init(sc);
	sc->sess = nexus_->scsi;
	sc->lun = scsi::lun_from_wire(c.lun);
	sc->tag = c.tag;
	sc->task_attr = task_attr(c.task_attr);
	sc->dir = c.write()  ? scsi::DataDir::Write
	          : c.read() ? scsi::DataDir::Read
	                     : scsi::DataDir::None;
	sc->data_length = c.data_len;
	// A CDB longer than the core takes (SRP allows 16 + 252 bytes) goes in with length
	// 0: the core answers INVALID FIELD IN CDB.
	if (c.cdb.size() <= scsi::kMaxCdb) {
		std::memcpy(sc->cdb, c.cdb.data(), c.cdb.size());
		sc->cdb_len = uint8_t(c.cdb.size());
	}
	sc->fabric_priv = x;
}

void Channel::table_fetched(Ioctx *x, bool ok)
{
	const std::span<const uint8_t> list(x->table_buf, size_t{x->table_entries} * srp::kDescLen);
	uint64_t sum = 0;
	if (ok && srp::check_desc_list(list, x->table_entries, &sum) && sum == x->data_len) {
		for (uint32_t i = 0; i < x->table_entries; i++)
			x->descs.push_back(srp::desc_at(list, i));
		heap_->free(x->table_buf);
		x->table_buf = nullptr;
		submit(x);
		return;
	}
	heap_->free(x->table_buf);
	x->table_buf = nullptr;
	target_.count(&TargetStats::bad_ius);
	ULP_LOG_RATELIMITED(Warn, Srpt,
	                    "{}: the descriptor table of tag {:#x} ({} entries) does not describe "
	                    "its {} bytes",
	                    peer_, x->tag, x->table_entries, x->data_len);
	refuse_cmd(x, scsi::Sense::InvalidFieldInCommandIu);
}

bool Channel::alloc_data(Ioctx *x, uint32_t len)
{
	if (len > heap_->max_alloc()) {
		ULP_LOG_RATELIMITED(Warn, Srpt, "{}: a {}-byte command is larger than max_io ({})",
		                    peer_, len, heap_->max_alloc());
		refuse_cmd(x, scsi::Sense::InvalidFieldInCommandIu);
		return false;
	}
	x->data = static_cast<uint8_t *>(heap_->alloc(len));
	if (!x->data) {
		// The device's data buffers are all in use: the initiator retries.
		target_.count(&TargetStats::task_set_full);
		refuse_cmd(x, scsi::Sense::TaskSetFull);
		return false;
	}
	x->data_len = len;
	return true;
}

void Channel::free_data(Ioctx *x)
{
	if (x->data) {
		heap_->free(x->data);
		x->data = nullptr;
	}
	if (x->table_buf) {
		heap_->free(x->table_buf);
		x->table_buf = nullptr;
	}
}

void Channel::submit(Ioctx *x)
{
	change_state(&x->state, IoState::Submitted, kIoStates, x);
	x->in_core = true;
	scsi::submit(&x->cmd);
}

void Channel::refuse_cmd(Ioctx *x, scsi::Sense why)
{
	// Answered here: the core never sees it. Its response frees the ioctx.
	scsi::Cmd *sc = &x->cmd;
	scsi::cmd_init(sc);
	sc->status = scsi::sense_status(why);
	sc->sense_len = scsi::build_sense(why, sc->sense);
	change_state(&x->state, IoState::Responding, kIoStates, x);
	build_rsp(x);
	send_rsp(x);
}

// ---- SRP_TSK_MGMT --------------------------------------------------------------------------

void Channel::handle_tsk_mgmt(Ioctx *x, std::span<const uint8_t> iu)
{
	target_.count(&TargetStats::tsk_mgmts);
	x->opcode = srp::TSK_MGMT;
	srp::TskMgmt t;
	if (!srp::parse_tsk_mgmt(iu, &t)) {
		target_.count(&TargetStats::bad_ius);
		put_ioctx(x);
		close("SRP_TSK_MGMT shorter than 48 bytes");
		return;
	}
	x->tag = t.tag;
	scsi::TmfType f;
	switch (t.func) {
	case srp::TSK_ABORT_TASK:
		f = scsi::TmfType::AbortTask;
		break;
	case srp::TSK_ABORT_TASK_SET:
		f = scsi::TmfType::AbortTaskSet;
		break;
	case srp::TSK_CLEAR_TASK_SET:
		f = scsi::TmfType::ClearTaskSet;
		break;
	case srp::TSK_LUN_RESET:
		f = scsi::TmfType::LunReset;
		break;
	case srp::TSK_CLEAR_ACA:
		f = scsi::TmfType::ClearAca;
		break;
	default:
		refuse_tmf(x, srp::TM_NOT_SUPPORTED);
		return;
	}
	scsi::Tmr &m = x->tmr;
	m.sess = nexus_->scsi;
	m.function = f;
	m.lun = scsi::lun_from_wire(t.lun);
	m.ref_tag = t.task_tag;
	m.tag = t.tag;
	m.fabric_priv = x;
	m.response = scsi::TmfResponse::Complete;
	m.pending.store(0);
	m.core_done = nullptr;
	change_state(&x->state, IoState::Submitted, kIoStates, x);
	x->in_core = true;
	scsi::tmr_submit(&m);
}

void Channel::refuse_tmf(Ioctx *x, uint8_t rsp_code)
{
	change_state(&x->state, IoState::Responding, kIoStates, x);
	const uint8_t data[4] = {0, 0, 0, rsp_code};
	srp::Rsp r;
	r.tag = x->tag;
	r.req_lim_delta = take_delta();
	r.flags = srp::RSP_RSPVALID;
	r.resp_data = data;
	x->rsp_len = uint32_t(srp::build_rsp(
	    r, std::span<uint8_t>(static_cast<uint8_t *>(x->buf->addr), ioctxs_.buf_size())));
	ULP_CHECK(x->rsp_len != 0);
	send_rsp(x);
}

void Channel::do_tm_rsp(Ioctx *x)
{
	// The core is done with the request (queue_tm_rsp comes once).
	x->in_core = false;
	if (state_ >= ChState::Disconnecting) {
		change_state(&x->state, IoState::Done, kIoStates, x);
		put_ioctx(x);
		return;
	}
	refuse_tmf(x, tm_rsp_code(x->tmr.response));
}

// ---- Responses -----------------------------------------------------------------------------

void Channel::build_rsp(Ioctx *x)
{
	const scsi::Cmd &sc = x->cmd;
	srp::Rsp r;
	r.tag = x->tag;
	r.req_lim_delta = take_delta();
	r.status = uint8_t(sc.status);
	ULP_TRACE(srp_rsp, x, &x->cmd, x->tag, unsigned(r.status));
	if (sc.sense_len) {
		r.flags |= srp::RSP_SNSVALID;
		r.sense = std::span<const uint8_t>(sc.sense, sc.sense_len);
	}
	// SRP r16a 6.9: the residual of the direction the command moved data in.
	const bool in = sc.dir == scsi::DataDir::Read ||
	                (sc.dir == scsi::DataDir::None && sc.cdb_dir == scsi::DataDir::Read);
	if (sc.resid == scsi::Residual::Underflow) {
		r.flags |= in ? srp::RSP_DIUNDER : srp::RSP_DOUNDER;
		(in ? r.data_in_res_cnt : r.data_out_res_cnt) = sc.resid_count;
	} else if (sc.resid == scsi::Residual::Overflow) {
		r.flags |= in ? srp::RSP_DIOVER : srp::RSP_DOOVER;
		(in ? r.data_in_res_cnt : r.data_out_res_cnt) = sc.resid_count;
	}
	x->rsp_len = uint32_t(srp::build_rsp(
	    r, std::span<uint8_t>(static_cast<uint8_t *>(x->buf->addr), ioctxs_.buf_size())));
	ULP_CHECK(x->rsp_len != 0); // the buffer is sized for the largest sense
	rdma::prepare_send(*x, x->rsp_len);
}

void Channel::send_rsp(Ioctx *x)
{
	ULP_ASSERT_HELD(*this); // the serialiser: a channel's work is its holder's
	rdma::prepare_send(*x, x->rsp_len);
	x->job = RwJob::None;
	x->n_rw = 0;
	if (!sq_wait_.empty() || sq_avail_ == 0) {
		sq_wait_.push_back(*x);
		target_.count(&TargetStats::sq_waits);
		return;
	}
	post_rw(x);
}

void Channel::do_status(Ioctx *x)
{
	if (state_ >= ChState::Disconnecting) {
		change_state(&x->state, IoState::Done, kIoStates, x);
		scsi::cmd_put(&x->cmd); // nowhere to send it
		return;
	}
	change_state(&x->state, IoState::Responding, kIoStates, x);
	build_rsp(x);
	send_rsp(x);
}

void Channel::do_data_in(Ioctx *x)
{
	if (state_ >= ChState::Disconnecting) {
		change_state(&x->state, IoState::Done, kIoStates, x);
		scsi::cmd_put(&x->cmd);
		return;
	}
	change_state(&x->state, IoState::Responding, kIoStates, x);
	build_rsp(x);
	if (x->cmd.xfer_len == 0) {
		send_rsp(x);
		return;
	}
	// SRP r16a 6.9 / ib_srpt: the data by RDMA WRITE into the initiator's buffers, then
	// the SRP_RSP chained behind: one post, and the SEND completes only once the WRITEs
	// are placed (RC ordering).
	start_rw(x, RwJob::DataIn, x->cmd.xfer_len);
}

void Channel::do_aborted(Ioctx *x)
{
	// No response of its own: its credit is owed, returned with the next response or an
	// SRP_CRED_REQ (put_ioctx).
	owed_++;
	change_state(&x->state, IoState::Done, kIoStates, x);
	scsi::cmd_put(&x->cmd);
}

void Channel::do_release(Ioctx *x)
{
	x->in_core = false;
	put_ioctx(x);
}

void Channel::send_done(Cq *, Wc *wc)
{
	Ioctx *x = rdma::SendRing<Ioctx>::from(wc);
	Channel *ch = x->ch;
	ch->enter([&] {
		ch->sq_avail_ += x->wrs_posted;
		x->wrs_posted = 0;
		ch->destroy_rw(x); // the read data's WRITEs went before the SEND
		if (wc->status != WcStatus::Success && ch->state_ < ChState::Disconnecting) {
			ULP_LOG_RATELIMITED(Warn, Srpt, "{}: SRP_RSP of tag {:#x}: {}", ch->peer_,
			                    x->tag, wc_status_str(wc->status));
			ch->close("send failed");
		}
		if (x->opcode == srp::CMD && x->in_core) {
			change_state(&x->state, IoState::Done, kIoStates, x);
			scsi::cmd_put(&x->cmd); // release_cmd follows
		} else {
			ch->put_ioctx(x); // refused before the core, or a TMF's response
		}
		ch->run_sq_wait();
		ch->maybe_cred_req();
	});
}

// ---- Data: write_pending -------------------------------------------------------------------

void Channel::do_write_pending(Ioctx *x)
{
	if (state_ >= ChState::Disconnecting) {
		scsi::write_done(&x->cmd, false);
		return;
	}
	if (x->immediate || x->cmd.xfer_len == 0) {
		scsi::write_done(&x->cmd, true);
		return;
	}
	if (p_.read_credit == 0) {
		// The login's connect request offered no responder resources: an RDMA READ posted
		// now would wait forever for a credit. Fail the write, and say why once.
		target_.count(&TargetStats::no_read_credit);
		if (!told_no_read_credit_) {
			told_no_read_credit_ = true;
			ULP_LOG(Warn, Srpt,
			        "{}: the initiator's connect request granted no RDMA READ "
			        "(responder_resources 0): writes without immediate data fail",
			        peer_);
		}
		scsi::write_done(&x->cmd, false);
		return;
	}
	change_state(&x->state, IoState::NeedData, kIoStates, x);
	start_rw(x, RwJob::DataOut, x->cmd.xfer_len);
}

void Channel::do_abort_write(Ioctx *x)
{
	// fabric.h: called once, after write_pending returned; if write_done was already
	// called (the data came), there is nothing to do.
	if (x->state != IoState::NeedData)
		return;
	if (x->wrs_posted == 0) {
		// Nothing on the wire: queued for room (or for MRs). It ends here.
		if (x->sq_node.is_linked())
			sq_wait_.erase(sq_wait_.iterator_to(*x));
		destroy_rw(x);
		change_state(&x->state, IoState::Submitted, kIoStates, x);
		scsi::write_done(&x->cmd, false);
		return;
	}
	// A READ is in flight: it lands in the buffer; write_done(false) when it completes.
	x->abort_write = true;
}

// ---- rw contexts ---------------------------------------------------------------------------

int Channel::init_rw(Ioctx *x, RwJob job, uint32_t len)
{
	const RwDir dir = job == RwJob::DataIn ? RwDir::Write : RwDir::Read;
	uint32_t n = 0, off = 0;
	int wrs = 0;
	auto add = [&](uint8_t *local, uint32_t seg, const srp::DirectDesc &d) -> int {
		if (x->rw.size() <= n)
			x->rw.push_back(std::make_unique<RwCtx>());
		x->sgt.clear();
		x->sgt.add(reinterpret_cast<uint64_t>(local), seg, heap_->lkey());
		const int r = x->rw[n]->init(*rwqp(), x->sgt, 0, d.va, d.key, dir);
		if (r < 0)
			return r;
		wrs += r;
		n++;
		return 0;
	};
	int rc = 0;
	if (job == RwJob::Table) {
		rc = add(x->table_buf, len, x->table_desc);
	} else {
		// The descriptors in order, until len bytes: a command may move less than its
		// buffers hold (a short read), never more (data_length is their total).
		for (const srp::DirectDesc &d : x->descs) {
			if (off >= len)
				break;
			const uint32_t seg = std::min(d.len, len - off);
			if (seg == 0)
				continue;
			if ((rc = add(x->data + off, seg, d)) != 0)
				break;
			off += seg;
		}
		if (rc == 0 && off < len)
			rc = -EINVAL; // not reachable: the descriptors' total is data_length
	}
	if (rc != 0) {
		for (uint32_t i = 0; i < n; i++)
			x->rw[i]->destroy();
		return rc;
	}
	x->n_rw = n;
	x->next_rw = 0;
	return wrs;
}

void Channel::destroy_rw(Ioctx *x)
{
	for (uint32_t i = 0; i < x->n_rw; i++)
		x->rw[i]->destroy();
	x->n_rw = 0;
	x->next_rw = 0;
	x->job = RwJob::None;
}

void Channel::start_rw(Ioctx *x, RwJob job, uint32_t len)
{
	ULP_ASSERT_HELD(*this); // the serialiser: a channel's work is its holder's
	x->job = job;
	x->rw_len = len;
	x->n_rw = 0;
	const int rc = init_rw(x, job, len);
	if (rc == -EAGAIN) {
		// The MR pool is empty (MR path devices): retried as contexts come back.
		sq_wait_.push_back(*x);
		target_.count(&TargetStats::sq_waits);
		return;
	}
	if (rc < 0) {
		ULP_LOG_RATELIMITED(Error, Srpt, "{}: rw contexts for tag {:#x} ({} bytes): {}",
		                    peer_, x->tag, len, std::strerror(-rc));
		fail_job(x);
		return;
	}
	if (!sq_wait_.empty() || !post_rw(x)) {
		sq_wait_.push_back(*x);
		target_.count(&TargetStats::sq_waits);
	}
}

bool Channel::post_rw(Ioctx *x)
{
	ULP_ASSERT_HELD(*this); // the serialiser: a channel's work is its holder's
	// A response alone: one SEND.
	if (x->job == RwJob::None) {
		if (sq_avail_ == 0)
			return false;
		x->wrs_posted = 1;
		sq_avail_--;
		x->posted = std::chrono::steady_clock::now();
		post_piece(x, &x->wr);
		return true;
	}
	// As many contexts as fit, from the first not yet posted; the piece ends in a
	// signaled WR: the last READ (rw_cqe), or for read data the SRP_RSP itself.
	const bool rsp = x->job == RwJob::DataIn;
	uint32_t wrs = 0, last = x->next_rw;
	while (last < x->n_rw) {
		const uint32_t w =
		    uint32_t(x->rw[last]->nr_wrs()) + (rsp && last + 1 == x->n_rw ? 1 : 0);
		if (wrs + w > sq_avail_)
			break;
		wrs += w;
		last++;
	}
	if (last == x->next_rw) {
		const uint32_t w =
		    uint32_t(x->rw[last]->nr_wrs()) + (rsp && last + 1 == x->n_rw ? 1 : 0);
		// rw_init_qp reserved every context's true size, so one always fits an idle
		// queue; this would be a sizing bug.
		ULP_CHECK(w <= sq_budget_);
		return false;
	}
	const bool ends_with_rsp = rsp && last == x->n_rw;
	SendWr *chain = ends_with_rsp ? &x->wr : nullptr;
	for (uint32_t i = last; i-- > x->next_rw;)
		chain =
		    x->rw[i]->wrs(i + 1 == last && !ends_with_rsp ? &x->rw_cqe : nullptr, chain);
	target_.count(x->job == RwJob::DataIn ? &TargetStats::rdma_writes
	                                      : &TargetStats::rdma_reads,
	              last - x->next_rw);
	x->next_rw = last;
	x->wrs_posted = wrs;
	x->posted = std::chrono::steady_clock::now();
	sq_avail_ -= wrs;
	post_piece(x, chain);
	return true;
}

void Channel::post_piece(Ioctx *x, SendWr *first)
{
	// Every completion source passes through a turn (a poll batch, the poller's event-loop
	// turn that reaps a file LU's ring, a backstore thread's reap): the pieces a turn
	// produces go out together at its end, one post_send (rdma_conn/send_plug.h).
	post_plugged(&x->piece, first);
}

void Channel::piece_unsent(rdma::PlugPiece *p)
{
	Ioctx *x = container_of(p, &Ioctx::piece);
	Channel *ch = x->ch;
	ch->sq_avail_ += x->wrs_posted;
	x->wrs_posted = 0;
	ch->fail_job(x);
}

void Channel::plug_failed(int rc)
{
	(void)rc; // logged by the plug
	close("post_send failed");
}

void Channel::run_sq_wait()
{
	// In order; each taken off the list before it is posted, so that a failure (which
	// closes the channel and fails whatever waits) finds it gone.
	while (!sq_wait_.empty() && state_ < ChState::Disconnecting) {
		Ioctx &x = sq_wait_.front();
		sq_wait_.pop_front();
		if (x.job != RwJob::None && x.n_rw == 0) {
			// Waiting for MRs: try the contexts again.
			const int rc = init_rw(&x, x.job, x.rw_len);
			if (rc == -EAGAIN) {
				sq_wait_.push_front(x);
				return;
			}
			if (rc < 0) {
				fail_job(&x);
				continue;
			}
		}
		if (!post_rw(&x)) {
			sq_wait_.push_front(x);
			return;
		}
	}
}

void Channel::rw_done(Cq *, Wc *wc)
{
	Ioctx *x = container_of(wc->wr_cqe, &Ioctx::rw_cqe);
	x->ch->enter([&] { x->ch->rw_piece_done(x, *wc); });
}

void Channel::rw_piece_done(Ioctx *x, const Wc &wc)
{
	sq_avail_ += x->wrs_posted;
	x->wrs_posted = 0;
	if (wc.status != WcStatus::Success) {
		if (state_ < ChState::Disconnecting) {
			ULP_LOG_RATELIMITED(Warn, Srpt, "{}: RDMA {} of tag {:#x}: {}", peer_,
			                    x->job == RwJob::DataIn ? "WRITE" : "READ", x->tag,
			                    wc_status_str(wc.status));
			close("RDMA transfer failed");
		}
		fail_job(x);
		run_sq_wait();
		return;
	}
	if (x->next_rw < x->n_rw && !x->abort_write && state_ < ChState::Disconnecting) {
		// The next piece; it goes ahead of newer work (it holds its data buffer).
		if (!post_rw(x)) {
			sq_wait_.push_front(*x);
			target_.count(&TargetStats::sq_waits);
		}
		run_sq_wait();
		return;
	}
	const RwJob job = x->job;
	const bool complete = x->next_rw == x->n_rw && state_ < ChState::Disconnecting;
	if (job == RwJob::DataIn) {
		// Only a piece of the read data (the last one carries the SRP_RSP and completes in
		// send_done): a close stopped it.
		fail_job(x);
	} else if (job == RwJob::Table) {
		destroy_rw(x);
		if (state_ >= ChState::Disconnecting) {
			free_data(x);
			put_ioctx(x); // never given to the core
		} else {
			table_fetched(x, complete);
		}
	} else {
		destroy_rw(x);
		change_state(&x->state, IoState::Submitted, kIoStates, x);
		scsi::write_done(&x->cmd, complete && !x->abort_write);
	}
	run_sq_wait();
}

void Channel::fail_job(Ioctx *x)
{
	// A transfer (or a response) that will not complete: the command ends as its state
	// says. The channel is closing, or the transfer could not be built.
	destroy_rw(x);
	switch (x->state) {
	case IoState::FetchTable:
		put_ioctx(x); // never given to the core
		return;
	case IoState::NeedData:
		change_state(&x->state, IoState::Submitted, kIoStates, x);
		scsi::write_done(&x->cmd, false);
		return;
	case IoState::Responding:
		if (x->opcode == srp::CMD && x->in_core) {
			change_state(&x->state, IoState::Done, kIoStates, x);
			scsi::cmd_put(&x->cmd);
		} else {
			put_ioctx(x); // refused before the core, or a TMF's response
		}
		return;
	default:
		ULP_CHECK(!"fail_job in an unexpected ioctx state");
	}
}

void Channel::check_transfers(std::chrono::steady_clock::time_point now)
{
	const auto bound = target_.cfg().data_timeout;
	for (Ioctx &x : ioctxs_.descs()) {
		if (x.wrs_posted == 0 || now - x.posted <= bound)
			continue;
		// An RDMA READ/WRITE or a response SEND that has neither completed nor failed: the
		// QP cannot take it back, only flush it. Closing flushes every WR and ends the
		// command; the initiator learns at once instead of after its own timeout.
		const auto ms =
		    std::chrono::duration_cast<std::chrono::milliseconds>(now - x.posted).count();
		ULP_LOG(Error, Srpt,
		        "{}: tag {:#x}: {} not complete after {} ms: closing the channel", peer_,
		        x.tag,
		        x.job == RwJob::DataOut  ? "the RDMA READ of its write data"
		        : x.job == RwJob::Table  ? "the RDMA READ of its descriptor table"
		        : x.job == RwJob::DataIn ? "the RDMA WRITE of its read data"
		                                 : "its SRP_RSP",
		        ms);
		target_.count(&TargetStats::data_timeouts);
		close("RDMA transfer timed out");
		return;
	}
}

} // namespace ulp::srpt
