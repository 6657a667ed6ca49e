// SPDX-License-Identifier: MIT
// iscsi/target/cmd.cc - a connection's SCSI commands (see conn.h): the CmdSN window and
// ordered delivery (RFC 7143 3.2.2.1), immediate and unsolicited data, Data-Out and R2T
// (11.7, 11.8), Data-In and the SCSI Response (11.4, 11.7.4), and the SCSI core's events
// for them (the kernel's iscsi_target.c command paths, iscsi_target_datain_values.c).
#include "iscsi/target/conn.h"

#include "core/trace.h"
#include "scsi/core.h"

#include <algorithm>
#include <cstring>

namespace ulp::iscsi::target
{

const char *cmd_state_str(IscsiCmd::State s)
{
	switch (s) {
	case IscsiCmd::State::Free:
		return "free";
	case IscsiCmd::State::Waiting:
		return "waiting";
	case IscsiCmd::State::Submitted:
		return "submitted";
	case IscsiCmd::State::Responding:
		return "responding";
	case IscsiCmd::State::Released:
		return "released";
	}
	return "?";
}

namespace
{

// RFC 7143 11.3.1.2 ATTR: 0 untagged (handled as SIMPLE), 1 simple, 2 ordered, 3 head of
// queue, 4 ACA.
scsi::TaskAttr task_attr(uint8_t attr)
{
	switch (attr) {
	case 2:
		return scsi::TaskAttr::Ordered;
	case 3:
		return scsi::TaskAttr::HeadOfQueue;
	case 4:
		return scsi::TaskAttr::Aca;
	default:
		return scsi::TaskAttr::Simple;
	}
}

} // namespace

void Conn::return_window_slot(IscsiCmd *c)
{
	// A command stops counting against the window when its status is queued: the
	// response that carries it then reports the slot free, so an initiator whose last
	// command this was is not left with a closed window and nothing coming to reopen it
	// (RFC 7143 11.19: a target must not leave the window shut with no PDU to follow).
	// Its object and buffer stay until the response is sent: the pool has room for that.
	if (c->window_slot) {
		c->window_slot = false;
		slots_++;
	}
}

uint32_t Conn::max_cmdsn() const
{
	// MaxCmdSN - ExpCmdSN + 1 is the number of commands the target can still take
	// (3.2.2.1). Immediate commands have slots of their own, so the window never shrinks
	// under the initiator (it may only be closed: MaxCmdSN = ExpCmdSN - 1). Commands that
	// came ahead of ExpCmdSN (waiting_) are inside the range already and hold their slots:
	// they count in it, or MaxCmdSN would drop as they arrive. An initiator ignores a lower
	// MaxCmdSN (3.2.2.1) and goes on using the CmdSNs it was granted, which the window
	// check would then ignore: those commands would be lost.
	return exp_cmdsn_ + slots_ + static_cast<uint32_t>(waiting_.size()) - 1;
}

// 3.2.2.1: a non-immediate PDU whose CmdSN is outside [ExpCmdSN, MaxCmdSN] is ignored
// (a duplicate, or an initiator that does not respect the window). true: process it now;
// it is ExpCmdSN's and ExpCmdSN has been advanced past it.
bool Conn::check_cmdsn(const Pdu &pdu, uint32_t cmdsn, bool immediate)
{
	(void)pdu;
	if (immediate)
		return true;
	if (cmdsn != exp_cmdsn_)
		return false;
	exp_cmdsn_++;
	return true;
}

IscsiCmd *Conn::alloc_cmd()
{
	if (free_.empty())
		return nullptr;
	IscsiCmd *c = free_.back();
	free_.pop_back();
	live_++;
	return c;
}

void Conn::free_cmd(IscsiCmd *c)
{
	if (c->itt_hook.is_linked())
		itt_table_->erase(itt_table_->iterator_to(*c));
	if (c->data)
		free_buffer(c);
	c->data = nullptr;
	if (c->wait_hook.is_linked())
		waiting_.erase(waiting_.iterator_to(*c));
	return_window_slot(c);
	if (c->immediate)
		imm_live_--;
	change_state(&c->state, IscsiCmd::State::Free, kCmdStates, c);
	c->r2ts.clear();
	free_.push_back(c);
	live_--;
	if (logout_pending_)
		maybe_finish_logout();
	maybe_done();
}

IscsiCmd *Conn::find_cmd(uint32_t itt)
{
	auto it = itt_table_->find(itt, IttHash(), IttEq());
	return it == itt_table_->end() ? nullptr : &*it;
}

void Conn::on_scsi_cmd(const Pdu &pdu, bool data_lost)
{
	ScsiCmd h;
	decode(pdu.bhs, &h);
	if (state_ == ConnState::LoggingOut) {
		send_reject(RejectReason::WaitingForLogout, pdu.bhs);
		return;
	}
	// 3.2.2.1: outside the window (or not yet due and not within it): ignore silently,
	// and likewise "non-immediate duplicates within the range": a second command with the
	// CmdSN of one that waits would stay in waiting_ for good (ExpCmdSN passes its CmdSN
	// once) and stop every command behind it.
	if (!h.immediate && !(sn_le(exp_cmdsn_, h.cmdsn) && sn_le(h.cmdsn, max_cmdsn())))
		return;
	if (!h.immediate && h.cmdsn != exp_cmdsn_ &&
	    std::any_of(waiting_.begin(), waiting_.end(),
	                [&](const IscsiCmd &w) { return w.cmdsn == h.cmdsn; }))
		return;
	// A command we Reject still used its CmdSN: the initiator (libiscsi, Linux) numbers
	// the next one after it, so ExpCmdSN moves past it as if it had been executed.
	auto reject = [&](RejectReason r) {
		if (!h.immediate && h.cmdsn == exp_cmdsn_) {
			exp_cmdsn_++;
			deliver_in_order();
		}
		send_reject(r, pdu.bhs);
	};
	AhsInfo ahs;
	if (parse_ahs(pdu.ahs, &ahs) != PduError::None) {
		reject(RejectReason::ProtocolError);
		return;
	}
	const SessionParams &sp = sess_->params;
	const uint32_t imm = static_cast<uint32_t>(pdu.data.size());
	// 11.3.1.1/11.3.1.2: a command without W or R moves no data; data with the command
	// needs W, ImmediateData=Yes and fits the first burst; F=0 (unsolicited Data-Out to
	// follow) needs W and InitialR2T=No. Bidirectional commands are not supported.
	bool bad = (!h.read && !h.write && h.edtl != 0) || (h.read && h.write) ||
	           (imm && (!h.write || !sp.immediate_data)) || imm > h.edtl ||
	           imm > sp.first_burst_length || (!h.final && (!h.write || sp.initial_r2t));
	if (h.itt == kReservedTag)
		bad = true;
	if (bad) {
		reject(h.read && h.write ? RejectReason::CmdNotSupported
		                         : RejectReason::InvalidPduField);
		return;
	}
	if (find_cmd(h.itt)) {
		reject(RejectReason::TaskInProgress);
		return;
	}
	if (h.edtl > target_.cfg().max_io_bytes) {
		reject(RejectReason::InvalidPduField);
		return;
	}
	IscsiCmd *c = nullptr;
	if (h.immediate) {
		// Immediate commands take the slots beyond the window.
		if (imm_live_ < kImmediateSlots)
			c = alloc_cmd();
		if (!c) {
			send_reject(RejectReason::ImmCmdReject, pdu.bhs);
			return;
		}
		imm_live_++;
	} else {
		if (!slots_ || !(c = alloc_cmd()))
			return; // the window was respected by nobody: ignore (3.2.2.1)
		slots_--;
		c->window_slot = true;
	}
	// Accepted: from here on every answer goes through the slot. Fired first, so that a
	// tracer has the ITT before the slot's states.
	ULP_TRACE(iscsi_cmd, c, &c->cmd, h.itt, h.cmdsn, h.edtl,
	          int(transport_ == Transport::Iser));
	change_state(&c->state, IscsiCmd::State::Waiting, kCmdStates, c);
	c->itt = h.itt;
	c->lun_raw = h.lun;
	c->cmdsn = h.cmdsn;
	c->edtl = h.edtl;
	c->read = h.read;
	c->write = h.write;
	c->immediate = h.immediate;
	c->local = false;
	c->cmdsn_only = false;
	if (h.edtl && !alloc_buffer(c, h.edtl)) {
		// No buffer now: SAM-5 5.3 TASK SET FULL tells the initiator to retry later. The
		// command used its CmdSN, as a rejected one does: due now, ExpCmdSN passes it
		// before the response reports it; ahead, a cmdsn_only entry waits for it (once
		// the response has given this command's window slot back).
		const bool due = !h.immediate && h.cmdsn == exp_cmdsn_;
		if (due) {
			exp_cmdsn_++;
			deliver_in_order();
		}
		c->data = nullptr;
		c->local = true;
		change_state(&c->state, IscsiCmd::State::Responding, kCmdStates, c);
		c->cmd.status = scsi::Status::TaskSetFull;
		c->cmd.sense_len = 0;
		c->cmd.resid = scsi::Residual::None;
		c->cmd.resid_count = 0;
		ULP_TRACE(iscsi_rsp, c, &c->cmd, c->itt, unsigned(c->cmd.status), 0);
		queue_cmd_pdu(c, build_scsi_rsp(c), true);
		if (!h.immediate && !due)
			cmdsn_received(h.cmdsn);
		return;
	}
	if (imm)
		std::memcpy(c->data, pdu.data.data(), imm);
	c->unsol_received = imm;
	c->unsol_limit = h.write ? std::min(sp.first_burst_length, h.edtl) : 0;
	c->unsol_done = h.final;
	c->unsol_next_datasn = 0;
	c->wp = false;
	c->solicit_next = 0;
	c->r2t_received = 0;
	c->r2tsn = 0;
	c->r2ts.clear();
	c->write_aborted = false;
	// Its immediate data failed the digest (on_ffp_pdu): the transfer fails as a
	// Data-Out that broke the rules does (data_error).
	c->data_error = data_lost;
	c->datasn = 0;
	c->rsp_held = false;
	c->rsp_is_data_in = false;
	c->core_released = false;
	c->pdus_queued = 0;
	itt_table_->insert(*c);

	scsi::Cmd *sc = &c->cmd;
	scsi::cmd_init(sc);
	sc->sess = sess_->scsi;
	sc->lun = scsi::lun_from_wire(pdu.bhs.data() + 8);
	sc->tag = h.itt;
	sc->task_attr = task_attr(h.attr);
	sc->dir = h.write  ? scsi::DataDir::Write
	          : h.read ? scsi::DataDir::Read
	                   : scsi::DataDir::None;
	sc->data_length = h.edtl;
	c->iov = iovec{c->data, h.edtl};
	sc->sgl = h.edtl ? std::span<const iovec>(&c->iov, 1) : std::span<const iovec>{};
	uint8_t cdb[260];
	size_t cdb_len = scsi_cdb(pdu, ahs, cdb);
	if (cdb_len > scsi::kMaxCdb)
		cdb_len = 0; // longer than the core takes: it answers INVALID FIELD
	std::memcpy(sc->cdb, cdb, std::min(cdb_len, scsi::kMaxCdb));
	sc->cdb_len = static_cast<uint8_t>(cdb_len);
	sc->fabric_priv = c;
	cmd_received(c);

	if (h.immediate) {
		submit_cmd(c);
		return;
	}
	if (h.cmdsn == exp_cmdsn_) {
		exp_cmdsn_++;
		submit_cmd(c);
		deliver_in_order();
		return;
	}
	// Ahead of ExpCmdSN: wait for the commands before it.
	hold(c);
}

void Conn::hold(IscsiCmd *c)
{
	auto it = waiting_.begin();
	while (it != waiting_.end() && sn_lt(it->cmdsn, c->cmdsn))
		++it;
	waiting_.insert(it, *c);
}

void Conn::deliver_in_order()
{
	while (!waiting_.empty() && waiting_.front().cmdsn == exp_cmdsn_) {
		IscsiCmd &c = waiting_.front();
		waiting_.pop_front();
		exp_cmdsn_++;
		if (c.cmdsn_only) // a CmdSN and no task (aborted, or never received): passed
			free_cmd(&c);
		else
			submit_cmd(&c);
	}
}

// RFC 7143 11.5.1 ABORT TASK: a task we never received whose RefCmdSN is in the window
// (and before the TMF's own CmdSN) is taken as received: ExpCmdSN must pass its CmdSN
// (3.2.2.1), or every command after it waits forever. Due now: pass it; ahead, within
// MaxCmdSN: a cmdsn_only entry in waiting_ (it has a slot: every CmdSN of the window not
// yet received has one, see max_cmdsn); already there (another task's): nothing to do.
void Conn::cmdsn_received(uint32_t sn)
{
	if (sn == exp_cmdsn_) {
		exp_cmdsn_++;
		deliver_in_order();
		return;
	}
	if (!sn_le(sn, max_cmdsn()) ||
	    std::any_of(waiting_.begin(), waiting_.end(),
	                [&](const IscsiCmd &w) { return w.cmdsn == sn; }))
		return;
	IscsiCmd *c = slots_ ? alloc_cmd() : nullptr;
	if (!c)
		return;
	slots_--;
	c->window_slot = true; // given back when ExpCmdSN passes it (free_cmd)
	change_state(&c->state, IscsiCmd::State::Waiting, kCmdStates, c);
	c->cmdsn = sn;
	c->immediate = false;
	c->local = false;
	c->data = nullptr;
	c->cmdsn_only = true;
	c->r2ts.clear();
	hold(c);
}

void Conn::submit_cmd(IscsiCmd *c)
{
	change_state(&c->state, IscsiCmd::State::Submitted, kCmdStates, c);
	scsi::submit(&c->cmd);
}

void Conn::on_data_out(const Pdu &pdu, bool data_lost)
{
	DataOut h;
	decode(pdu.bhs, &h);
	IscsiCmd *c = find_cmd(h.itt);
	const uint32_t len = static_cast<uint32_t>(pdu.data.size());
	if (!c || !c->write) {
		// 11.7: Data-Out for no task of ours. The data is dropped; the initiator learns
		// through the Reject (the digest's Reject, when the data failed it).
		if (!data_lost)
			send_reject(RejectReason::InvalidPduField, pdu.bhs);
		return;
	}
	// Its data failed the digest (on_ffp_pdu, the Reject is out): at ERL 0 the command
	// fails; the PDU is then dropped below like any Data-Out of a failed command.
	if (data_lost && !c->write_aborted && !c->data_error &&
	    c->state != IscsiCmd::State::Released)
		data_error(c);
	if (c->write_aborted || c->data_error || c->state == IscsiCmd::State::Released) {
		// Data still in flight for a command already aborted, failed or answered: drop
		// it, but keep the unsolicited accounting (a held response waits for its end).
		if (h.ttt == kReservedTag && h.final) {
			c->unsol_done = true;
			if (c->rsp_held)
				send_response(c, c->rsp_is_data_in);
		}
		return;
	}
	// A Data-Out may carry no data, and a write with EDTL 0 has no buffer (buf is null):
	// memcpy with a null pointer is undefined even for 0 bytes.
	auto copy_in = [&] {
		if (len)
			std::memcpy(c->data + h.buffer_offset, pdu.data.data(), len);
	};
	if (h.ttt == kReservedTag) {
		// Unsolicited data (11.7.4, 11.7.5): in order (DataPDUInOrder=Yes), DataSN from 0,
		// within the first burst, before the F bit.
		if (c->unsol_done || h.datasn != c->unsol_next_datasn ||
		    h.buffer_offset != c->unsol_received ||
		    len > c->unsol_limit - c->unsol_received) {
			send_reject(RejectReason::ProtocolError, pdu.bhs);
			if (!c->unsol_done && h.final)
				c->unsol_done = true;
			data_error(c);
			return;
		}
		copy_in();
		c->unsol_received += len;
		c->unsol_next_datasn++;
		if (h.final || c->unsol_received == c->unsol_limit)
			c->unsol_done = true;
		if (c->unsol_done) {
			if (c->rsp_held) {
				send_response(c, c->rsp_is_data_in);
				return;
			}
			if (c->wp)
				fetch_data_out(c);
		}
		maybe_write_done(c);
		return;
	}
	// Solicited: the data one of our R2Ts asked for, in order within it.
	auto r = std::find_if(c->r2ts.begin(), c->r2ts.end(),
	                      [&](const R2tState &x) { return x.ttt == h.ttt; });
	if (r == c->r2ts.end() || h.datasn != r->next_datasn ||
	    h.buffer_offset != r->offset + r->received || len > r->length - r->received) {
		send_reject(RejectReason::ProtocolError, pdu.bhs);
		data_error(c);
		return;
	}
	copy_in();
	r->received += len;
	r->next_datasn++;
	c->r2t_received += len;
	if (r->received == r->length)
		c->r2ts.erase(r);
	send_r2ts(c);
	maybe_write_done(c);
}

// A Data-Out that breaks the sequence rules (DataSN, offset, burst: 11.7): at ERL 0 the data
// cannot be recovered, but the connection can: the PDU was rejected, the rest of the
// command's data is dropped, and the command ends with a failed transfer (the core answers
// ABORTED COMMAND, DATA PHASE ERROR) once the initiator's unsolicited data has ended.
void Conn::data_error(IscsiCmd *c)
{
	c->data_error = true;
	stop_write(c);
}

void Conn::stop_write(IscsiCmd *c)
{
	// No more R2Ts; a core waiting for the data hears the transfer failed.
	c->r2ts.clear();
	if (c->wp) {
		c->wp = false;
		scsi::write_done(&c->cmd, false);
	}
}

void Conn::do_write_pending(IscsiCmd *c)
{
	c->wp = true;
	if (state_ == ConnState::Closing || c->data_error) {
		// Nothing more will arrive: fail the transfer (the core answers, we drop it).
		c->wp = false;
		scsi::write_done(&c->cmd, false);
		return;
	}
	if (c->unsol_done)
		fetch_data_out(c);
	maybe_write_done(c);
}

void Conn::do_abort_write(IscsiCmd *c)
{
	// The core aborted the command while we moved its data: no more R2Ts; Data-Out still
	// in flight is dropped on arrival.
	c->write_aborted = true;
	stop_write(c);
}

void Conn::send_r2ts(IscsiCmd *c)
{
	if (!c->wp || c->write_aborted || state_ == ConnState::Closing)
		return;
	const SessionParams &sp = sess_->params;
	const uint32_t need = c->cmd.xfer_len;
	if (c->solicit_next < c->unsol_received)
		c->solicit_next = c->unsol_received;
	while (c->r2ts.size() < sp.max_outstanding_r2t && c->solicit_next < need) {
		R2tState r;
		r.ttt = next_ttt_++;
		if (next_ttt_ == kReservedTag)
			next_ttt_ = 1;
		r.r2tsn = c->r2tsn++;
		r.offset = c->solicit_next;
		r.length = std::min(sp.max_burst_length, need - c->solicit_next);
		c->solicit_next += r.length;
		c->r2ts.push_back(r);
		c->datasn++;

		OutPdu *p = new_pdu();
		Bhs b{};
		R2t h;
		h.lun = c->lun_raw;
		h.itt = c->itt;
		h.ttt = r.ttt;
		h.r2tsn = r.r2tsn;
		h.buffer_offset = r.offset;
		h.desired_len = r.length;
		encode(h, b);
		fill_sn(b.data(), false); // 11.8.3: StatSN is not advanced by an R2T
		finish_pdu(p, b);
		queue_pdu(p);
		pdus_out_++;
	}
}

void Conn::maybe_write_done(IscsiCmd *c)
{
	if (!c->wp || c->write_aborted)
		return;
	if (c->unsol_received + c->r2t_received < c->cmd.xfer_len)
		return;
	c->wp = false;
	scsi::write_done(&c->cmd, true);
}

void Conn::do_data_in(IscsiCmd *c)
{
	send_response(c, true);
}

void Conn::do_status(IscsiCmd *c)
{
	send_response(c, false);
}

void Conn::send_response(IscsiCmd *c, bool data_in)
{
	if (state_ == ConnState::Closing) {
		scsi::cmd_put(&c->cmd); // nowhere to send it
		return;
	}
	// 11.7.2 (and LIO): the response of a command waits until the unsolicited data
	// the initiator is still sending for it has arrived, so that its ITT is not reused
	// while Data-Out for it is in flight.
	if (!c->unsol_done) {
		c->rsp_held = true;
		c->rsp_is_data_in = data_in;
		return;
	}
	c->rsp_held = false;
	change_state(&c->state, IscsiCmd::State::Responding, kCmdStates, c);
	ULP_TRACE(iscsi_rsp, c, &c->cmd, c->itt, unsigned(c->cmd.status), int(data_in));
	if (data_in)
		send_read_response(c);
	else
		queue_cmd_pdu(c, build_scsi_rsp(c), true);
}

void Conn::send_data_in(IscsiCmd *c)
{
	// 11.7: Data-In PDUs of at most the initiator's MaxRecvDataSegmentLength; F closes
	// every MaxBurstLength sequence; the last carries the status (S) and residuals.
	const scsi::Cmd &sc = c->cmd;
	const uint32_t total = sc.xfer_len;
	const uint32_t burst = sess_->params.max_burst_length;
	uint32_t off = 0, in_burst = 0;
	while (off < total) {
		const uint32_t n = std::min({max_send_dsl_, total - off, burst - in_burst});
		const bool last = off + n == total;
		OutPdu *p = new_pdu();
		Bhs b{};
		DataIn h;
		h.lun = c->lun_raw;
		h.itt = c->itt;
		h.datasn = c->datasn++;
		h.buffer_offset = off;
		in_burst += n;
		h.final = last || in_burst == burst;
		if (in_burst == burst)
			in_burst = 0;
		if (last) {
			h.has_status = true;
			h.status = static_cast<uint8_t>(sc.status);
			h.underflow = sc.resid == scsi::Residual::Underflow;
			h.overflow = sc.resid == scsi::Residual::Overflow;
			h.residual = sc.resid_count;
		}
		encode(h, b);
		if (last)
			return_window_slot(c);
		// 11.7.4: StatSN advances only with the PDU that carries the status; ExpCmdSN
		// and MaxCmdSN are valid in every Data-In.
		fill_sn(b.data(), last);
		if (!last)
			put_be32(b.data() + 24, 0);
		p->data = {c->data + off, n};
		finish_pdu(p, b);
		p->cmd = c;
		p->last_of_cmd = last;
		c->pdus_queued++;
		queue_pdu(p);
		pdus_out_++;
		off += n;
	}
}

OutPdu *Conn::build_scsi_rsp(IscsiCmd *c)
{
	const scsi::Cmd &sc = c->cmd;
	OutPdu *p = new_pdu();
	Bhs b{};
	ScsiRsp h;
	h.itt = c->itt;
	h.response = 0; // command completed at the target
	h.status = static_cast<uint8_t>(sc.status);
	h.underflow = sc.resid == scsi::Residual::Underflow;
	h.overflow = sc.resid == scsi::Residual::Overflow;
	h.residual = sc.resid_count;
	h.exp_datasn = c->datasn;
	encode(h, b);
	return_window_slot(c);
	fill_sn(b.data(), true);
	if (sc.sense_len) {
		// 11.4.7: SenseLength (2 bytes) then the sense data.
		p->own.resize(2 + sc.sense_len);
		put_be16(p->own.data(), sc.sense_len);
		std::memcpy(p->own.data() + 2, sc.sense, sc.sense_len);
		p->data = p->own;
	}
	finish_pdu(p, b);
	return p;
}

void Conn::track_cmd_pdu(IscsiCmd *c, OutPdu *p, bool last)
{
	p->cmd = c;
	p->last_of_cmd = last;
	c->pdus_queued++;
	pdus_out_++;
}

void Conn::queue_cmd_pdu(IscsiCmd *c, OutPdu *p, bool last)
{
	track_cmd_pdu(c, p, last);
	queue_pdu(p);
}

bool Conn::alloc_buffer(IscsiCmd *c, uint32_t len)
{
	// TCP: a heap buffer kept with the command slot and reused while large enough.
	if (c->heap_cap < len) {
		c->heap.reset(new uint8_t[len]);
		c->heap_cap = len;
	}
	c->data = c->heap.get();
	return true;
}

void Conn::data_transfer_failed(IscsiCmd *c)
{
	data_error(c);
}

void Conn::do_aborted(IscsiCmd *c)
{
	// No response of its own (the TMF response, or the session's end, covers it).
	change_state(&c->state, IscsiCmd::State::Responding, kCmdStates, c);
	scsi::cmd_put(&c->cmd);
}

void Conn::do_release(IscsiCmd *c)
{
	c->core_released = true;
	change_state(&c->state, IscsiCmd::State::Released, kCmdStates, c);
	if (c->pdus_queued == 0)
		free_cmd(c);
}

} // namespace ulp::iscsi::target
