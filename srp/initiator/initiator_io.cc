// SPDX-License-Identifier: MIT
// srp/initiator/initiator_io.cc - the SRP initiator's commands: the data buffer registered and
// described (ib_srp's srp_map_data), SRP_CMD posted behind its REG_MRs, SRP_RSP and the
// target's other IUs taken apart, keys invalidated before a command is handed back, credits,
// task management and logout (see initiator.h, initiator_impl.h).
#include "core/log.h"
#include "srp/initiator/initiator_impl.h"

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>

namespace ulp::srpt
{

using namespace ini;

namespace
{

// SAM-5 4.7: a single level LUN, peripheral device addressing below 256, flat space
// addressing below 16384 (as scsi/'s lun_from_wire reads them), the 8 bytes as given above.
void lun_to_wire(uint64_t lun, uint8_t out[8])
{
	std::memset(out, 0, 8);
	if (lun < 256) {
		out[1] = uint8_t(lun);
	} else if (lun < 16384) {
		out[0] = uint8_t(0x40 | (lun >> 8));
		out[1] = uint8_t(lun);
	} else {
		for (int i = 0; i < 8; i++)
			out[i] = uint8_t(lun >> (56 - 8 * i));
	}
}

// A CDB SRP_CMD can carry: 16 bytes at most in the fixed part, beyond that whole words of
// additional CDB (SRP r16a 6.8, ADDITIONAL CDB LENGTH).
bool cdb_ok(size_t n)
{
	if (n >= 6 && n <= 16)
		return true;
	return n > 16 && n <= srp::kMaxCdbLen && (n - 16) % 4 == 0;
}

constexpr uint64_t kGenMask = (1ull << 39) - 1; // tag bits 24..62

} // namespace

// ---- Data: registration and descriptors (srp_map_data) ---------------------------------------

int Initiator::Impl::map_data(Chan &c, Req &r, const Request &req, srp::CmdOut *o,
                              std::vector<srp::DirectDesc> *descs)
{
	r.kind = DescMode::Auto;
	r.nmr = 0;
	if (req.dir == DataDir::None)
		return 0;
	const uint32_t len = uint32_t(req.data.size());
	const bool write = req.dir == DataDir::Write;
	const size_t add_cdb = req.cdb.size() > 16 ? req.cdb.size() - 16 : 0;
	const size_t desc_off = srp::kCmdLen + add_cdb;
	const DescMode mode = cfg.desc_mode;

	// SRP-2 immediate data: the write's bytes in the SEND itself, at the offset the login
	// granted, when it fits the IU (ib_srp: at most max_imm_data).
	const bool imm_ok = write && c.max_imm && len <= c.max_imm &&
	                    kImmOffset >= desc_off + srp::kImmHdrLen &&
	                    size_t{kImmOffset} + len <= c.it_iu_len;
	if (write && mode == DescMode::Immediate && !imm_ok)
		return -E2BIG;
	if (imm_ok && (mode == DescMode::Immediate || mode == DescMode::Auto)) {
		o->out_fmt = srp::DescFmt::Immediate;
		o->imm = req.data;
		o->imm_data_offset = kImmOffset;
		o->total_len = len;
		r.kind = DescMode::Immediate;
		return 0;
	}

	// How many descriptors, and in which format.
	const uint32_t n = (len + chunk - 1) / chunk;
	const size_t room = c.it_iu_len > desc_off + srp::kIndirectHdrLen
	                        ? (c.it_iu_len - desc_off - srp::kIndirectHdrLen) / srp::kDescLen
	                        : 0;
	const uint32_t sg =
	    std::min<uint32_t>(cfg.cmd_sg_entries, uint32_t(std::min<size_t>(room, 255)));
	DescMode kind;
	uint32_t inline_n = n;
	switch (mode) {
	case DescMode::Direct:
		if (n != 1)
			return -E2BIG;
		kind = DescMode::Direct;
		break;
	case DescMode::Indirect:
		if (n > sg)
			return -E2BIG;
		kind = DescMode::Indirect;
		break;
	case DescMode::External:
		if (!cfg.allow_ext_sg)
			return -E2BIG;
		kind = DescMode::External;
		inline_n = std::min(n - 1, sg ? sg - 1 : 0);
		break;
	default: // Auto, and Immediate for a read
		if (n == 1) {
			kind = DescMode::Direct;
		} else if (n <= sg) {
			kind = DescMode::Indirect;
		} else if (cfg.allow_ext_sg) {
			// ib_srp: min(ndesc, cmd_sg_cnt) inside the IU, the whole table outside.
			kind = DescMode::External;
			inline_n = sg;
		} else {
			return -E2BIG; // ib_srp: "Could not fit S/G list"
		}
		break;
	}
	const uint32_t need = n + (kind == DescMode::External ? 1 : 0);
	if (uint32_t(c.mrs.available()) < need)
		return -EBUSY;

	// The bytes the MRs map: the caller's own (in a registered region) or a bounce block.
	uint8_t *dma = req.data.data();
	MemTranslation t;
	if (c.map.translate(req.data.data(), len, &t) != 0) {
		dma = static_cast<uint8_t *>(c.bounce->alloc(len));
		if (!dma)
			return -EBUSY;
		r.bounced = true;
		if (write)
			std::memcpy(dma, req.data.data(), len);
	}
	r.dma = dma;
	r.user = req.data;
	r.dir = req.dir;
	// The target RDMA WRITEs read data into us and RDMA READs write data from us.
	const uint32_t access =
	    write ? ACCESS_REMOTE_READ : ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE;
	auto reg = [&](uint8_t *p, uint32_t l, uint32_t acc, srp::DirectDesc *d) -> int {
		Mr *mr = c.mrs.get();
		ULP_CHECK(mr != nullptr); // counted above
		SgEntry e{reinterpret_cast<uint64_t>(p), l};
		unsigned off = 0;
		const int k = mr->map_sg({&e, 1}, &off, kPage);
		r.mrs[r.nmr++] = mr;
		if (k != 1 || mr->length() != l)
			return k < 0 ? k : -EINVAL;
		// A fresh key per registration: a stale key of an earlier command fails.
		mr->inc_rkey();
		RegWr &w = r.regs[r.nmr - 1];
		w = RegWr{};
		w.opcode = WrOpcode::RegMr;
		w.mr = mr;
		w.key = mr->rkey();
		w.access = acc;
		*d = srp::DirectDesc{e.addr, mr->rkey(), l};
		return 0;
	};
	descs->clear();
	int rc = 0;
	for (uint32_t i = 0; i < n && rc == 0; i++) {
		const uint32_t off = i * chunk;
		srp::DirectDesc d;
		rc = reg(dma + off, std::min(chunk, len - off), access, &d);
		descs->push_back(d);
	}
	srp::DirectDesc table{};
	if (rc == 0 && kind == DescMode::External) {
		// The whole list in the slot's table buffer, registered for the target to RDMA
		// READ (SRP r16a 6.8: the indirect table descriptor), in the same chain.
		auto *tb = static_cast<uint8_t *>(r.table->addr);
		for (uint32_t i = 0; i < n; i++)
			srp::put_desc((*descs)[i], tb + size_t{i} * srp::kDescLen);
		rc = reg(tb, n * uint32_t(srp::kDescLen), ACCESS_REMOTE_READ, &table);
	}
	if (rc != 0) {
		unmap(r, false);
		return rc;
	}
	const srp::DescFmt fmt =
	    kind == DescMode::Direct ? srp::DescFmt::Direct : srp::DescFmt::Indirect;
	(write ? o->out_fmt : o->in_fmt) = fmt;
	o->descs = std::span<const srp::DirectDesc>(descs->data(), inline_n);
	o->total_len = len;
	if (kind != DescMode::Direct) {
		o->table = table;
		o->table_entries = n;
		if (kind == DescMode::Indirect)
			o->table.len = 0; // all inside the IU: build_cmd sets the length
	}
	r.kind = kind;
	return 0;
}

void Initiator::Impl::unmap(Req &r, bool copy_out)
{
	Chan &c = *r.ch;
	// Never the keys of a command in flight: they are valid until its LOCAL_INVs complete
	// (or its QP is in ERR), and a REG_MR of a valid MR fails (its QP to ERR).
	ULP_CHECK(r.state != ReqState::Active);
	for (uint32_t i = 0; i < r.nmr; i++) {
		// Invalidated (or unreachable: the QP is in ERR): the next user registers anew.
		r.mrs[i]->need_inval = false;
		c.mrs.put(r.mrs[i]);
	}
	r.nmr = 0;
	if (r.bounced) {
		// A read's bytes are final once its keys are dead (all of them when the SRP_RSP
		// came: it follows the RDMA WRITEs, RC ordering).
		if (copy_out && r.dir == DataDir::Read)
			std::memcpy(r.user.data(), r.dma, r.user.size());
		c.bounce->free(r.dma);
		r.bounced = false;
	}
	r.dma = nullptr;
}

// ---- Submit -------------------------------------------------------------------------------

int Initiator::Impl::submit(const Request &req, Callback cb, uint64_t *tag)
{
	if (state != IniState::Up)
		return -ENOTCONN;
	if (!cdb_ok(req.cdb.size()) || (req.dir != DataDir::None && req.data.empty()))
		return -EINVAL;
	if (req.data.size() > max_io)
		return -E2BIG;
	// The channel with the most credits left, of those with a free slot.
	Chan *best = nullptr;
	for (auto &cp : chans) {
		Chan &c = *cp;
		if (c.state != ChanState::Live || c.reqs.empty())
			continue;
		if (!best || c.req_lim > best->req_lim)
			best = &c;
	}
	if (!best)
		return live() ? -EBUSY : -ENOTCONN;
	Chan &c = *best;
	// SRP r16a 5.5, ib_srp's __srp_get_tx_iu: a command needs req_lim > 1, the last credit
	// stays for task management.
	if (cfg.check_credits && c.req_lim <= 1) {
		stats.zero_req_lim++;
		return -EBUSY;
	}
	Req &r = *c.reqs.get();
	ULP_CHECK(r.state == ReqState::Free);
	r.tag = (next_gen++ & kGenMask) << 24 | uint64_t{c.idx} << 16 | r.slot;
	r.lun = req.lun;
	r.dir = req.dir;
	r.user = {};
	r.bounced = false;
	r.dma = nullptr;
	r.res = Result{};

	srp::CmdOut o;
	if (int rc = map_data(c, r, req, &o, &scratch); rc != 0) {
		c.reqs.put(&r);
		return rc;
	}
	const uint32_t need = 2 * r.nmr + 1; // REG_MRs, SEND, LOCAL_INVs
	if (c.sq_used + need > c.sq_size) {
		unmap(r, false);
		c.reqs.put(&r);
		return need > c.sq_size ? -E2BIG : -EBUSY;
	}
	uint8_t lun[8];
	lun_to_wire(req.lun, lun);
	o.tag = r.tag;
	o.lun = lun;
	o.task_attr = req.task_attr;
	o.cdb = req.cdb;
	const size_t len =
	    srp::build_cmd(o, std::span<uint8_t>(static_cast<uint8_t *>(r.buf->addr),
	                                         std::min<size_t>(c.reqs.buf_size(), c.it_iu_len)));
	if (len == 0) {
		unmap(r, false);
		c.reqs.put(&r);
		return -E2BIG;
	}
	rdma::prepare_send(r, uint32_t(len));
	// REG_MRs chained before the SEND (unsignaled: the SEND's completion retires them), so
	// the keys are valid by the time the target sees them.
	SendWr *first = &r.wr;
	for (uint32_t i = r.nmr; i-- > 0;) {
		r.regs[i].next = first;
		first = &r.regs[i];
	}
	const SendWr *bad = nullptr;
	if (int rc = c.conn.qp()->post_send(first, &bad); rc != 0) {
		unmap(r, false);
		c.reqs.put(&r);
		chan_fail(c, std::string("post_send: ") + std::strerror(-rc));
		return -ENOTCONN;
	}
	for (uint32_t i = 0; i < r.nmr; i++)
		r.mrs[i]->need_inval = true;
	c.sq_used += need;
	r.sq_held = need;
	r.send_pending = true;
	r.inv_pending = false;
	r.abort_pending = false;
	r.cb = std::move(cb);
	r.deadline = clock::now() + cfg.cmd_timeout;
	change_state(&r.state, ReqState::Active, kReqStates, &r);
	c.req_lim--;
	c.unanswered++;
	stats.commands++;
	switch (r.kind) {
	case DescMode::Immediate:
		stats.immediate++;
		break;
	case DescMode::Direct:
		stats.direct++;
		break;
	case DescMode::Indirect:
		stats.indirect++;
		break;
	case DescMode::External:
		stats.external++;
		break;
	case DescMode::Auto:
		break;
	}
	stats.bounced += r.bounced;
	if (tag)
		*tag = r.tag;
	return 0;
}

// ---- A command's end ------------------------------------------------------------------------

void Initiator::Impl::end_req(Req &r, Outcome o)
{
	Chan &c = *r.ch;
	change_state(&r.state, ReqState::Ending, kReqStates, &r);
	r.res.outcome = o;
	c.unanswered--;
	// SRP has no remote invalidation: every key dies by our LOCAL_INV before the buffer
	// goes back, so a late RDMA of the target's can never reach it.
	if (c.state == ChanState::Live && r.nmr > 0)
		post_inv(r);
	else
		unmap(r, o == Outcome::Completed);
	maybe_finish(r);
}

void Initiator::Impl::post_inv(Req &r)
{
	Chan &c = *r.ch;
	SendWr *first = nullptr;
	for (uint32_t i = r.nmr; i-- > 0;) {
		SendWr &w = r.invs[i];
		w = SendWr{};
		w.opcode = WrOpcode::LocalInv;
		w.invalidate_rkey = r.mrs[i]->rkey();
		w.next = first;
		if (i + 1 == r.nmr) {
			w.send_flags = SEND_SIGNALED;
			w.wr_cqe = &r.inv_cqe;
		}
		first = &w;
	}
	r.inv_pending = true;
	const SendWr *bad = nullptr;
	// Room was reserved at submit (sq_held).
	if (int rc = c.conn.qp()->post_send(first, &bad); rc != 0) {
		chan_fail(c, std::string("post LOCAL_INV: ") + std::strerror(-rc));
		return;
	}
	stats.local_inv += r.nmr;
}

void Initiator::Impl::maybe_finish(Req &r)
{
	if (r.state != ReqState::Ending || r.send_pending || r.inv_pending)
		return;
	Chan &c = *r.ch;
	if (r.nmr || r.bounced)
		unmap(r, r.res.outcome == Outcome::Completed);
	c.sq_used -= r.sq_held;
	r.sq_held = 0;
	done.emplace_back(std::move(r.cb), r.res);
	r.cb = nullptr;
	change_state(&r.state, ReqState::Free, kReqStates, &r);
	c.reqs.put(&r);
}

void Initiator::Impl::send_done(Cq *, Wc *wc)
{
	Req &r = *rdma::SendRing<Req>::from(wc);
	Chan &c = *r.ch;
	if (c.state != ChanState::Live)
		return; // a flush: chan_fail has handed the command back
	if (wc->status != WcStatus::Success) {
		Impl::of(c).chan_fail(c, std::string("SRP_CMD send: ") + wc_status_str(wc->status));
		return;
	}
	// One completion per SEND: a second (a provider's mistake) would finish the slot's
	// next command early.
	ULP_CHECK(r.send_pending);
	r.send_pending = false;
	Impl::of(c).maybe_finish(r);
}

void Initiator::Impl::inv_done(Cq *, Wc *wc)
{
	Req &r = *container_of(wc->wr_cqe, &Req::inv_cqe);
	Chan &c = *r.ch;
	if (c.state != ChanState::Live)
		return;
	if (wc->status != WcStatus::Success) {
		Impl::of(c).chan_fail(c, std::string("LOCAL_INV: ") + wc_status_str(wc->status));
		return;
	}
	// Only for the LOCAL_INVs end_req posted: a stray completion must not hand back the
	// MRs of the slot's next command, still valid and in flight.
	ULP_CHECK(r.state == ReqState::Ending && r.inv_pending);
	r.inv_pending = false;
	Impl::of(c).unmap(r, r.res.outcome == Outcome::Completed);
	Impl::of(c).maybe_finish(r);
}

// ---- Control IUs ------------------------------------------------------------------------------

int Initiator::Impl::post_ctl(Chan &c, uint8_t op, const uint8_t *iu, size_t len)
{
	Ctl *d = c.ctl.get();
	if (!d)
		return -EBUSY;
	std::memcpy(d->buf->addr, iu, len);
	d->op = op;
	rdma::prepare_send(*d, uint32_t(len));
	const SendWr *bad = nullptr;
	if (int rc = c.conn.qp()->post_send(&d->wr, &bad); rc != 0) {
		c.ctl.put(d);
		chan_fail(c, std::string("post_send: ") + std::strerror(-rc));
		return -ENOTCONN;
	}
	c.ctl_used++;
	return 0;
}

void Initiator::Impl::answer(Chan &c, uint8_t opcode, uint64_t tag)
{
	// SRP_CRED_RSP and SRP_AER_RSP spend no credit (SRP r16a 6.7, 6.10).
	uint8_t iu[srp::kCredRspLen];
	const size_t n = srp::build_tag_iu(opcode, tag, iu);
	if (!c.ctl_backlog.empty() || post_ctl(c, opcode, iu, n) == -EBUSY)
		c.ctl_backlog.emplace_back(opcode, tag);
}

void Initiator::Impl::run_ctl_backlog(Chan &c)
{
	while (c.state == ChanState::Live && !c.ctl_backlog.empty() && !c.ctl.empty()) {
		const auto [op, tag] = c.ctl_backlog.front();
		c.ctl_backlog.pop_front();
		uint8_t iu[srp::kCredRspLen];
		const size_t n = srp::build_tag_iu(op, tag, iu);
		post_ctl(c, op, iu, n);
	}
}

void Initiator::Impl::ctl_done(Cq *, Wc *wc)
{
	Ctl *d = rdma::SendRing<Ctl>::from(wc);
	Chan &c = *d->ch;
	if (c.state != ChanState::Live)
		return;
	c.ctl.put(d);
	c.ctl_used--;
	if (wc->status != WcStatus::Success) {
		char b[64];
		std::snprintf(b, sizeof(b), "send of the IU with opcode %#04x: ", d->op);
		Impl::of(c).chan_fail(c, b + std::string(wc_status_str(wc->status)));
		return;
	}
	Impl::of(c).run_ctl_backlog(c);
}

void Initiator::Impl::send_logout(Chan &c)
{
	uint8_t iu[srp::kLogoutLen];
	const size_t n = srp::build_tag_iu(srp::I_LOGOUT, kTmfTagBit | next_tmf++, iu);
	// No buffer free: the disconnect alone says it.
	if (post_ctl(c, srp::I_LOGOUT, iu, n) == 0)
		c.req_lim--; // SRP r16a 5.5: SRP_I_LOGOUT is a request
}

// ---- Receives ---------------------------------------------------------------------------------

void Initiator::Impl::recv_done(Cq *, Wc *wc)
{
	Rx *rx = rdma::RecvRing<Rx>::from(wc);
	Impl::of(*rx->ch).on_recv(rx, *wc);
}

void Initiator::Impl::on_recv(Rx *rx, const Wc &wc)
{
	Chan &c = *rx->ch;
	if (c.state != ChanState::Live)
		return; // a flush after the channel failed
	if (wc.status != WcStatus::Success) {
		chan_fail(c, std::string("receive: ") + wc_status_str(wc.status));
		return;
	}
	const std::span<const uint8_t> iu(static_cast<const uint8_t *>(rx->buf->addr), wc.byte_len);
	const int op = srp::iu_opcode(iu);
	uint8_t reply = 0;
	uint64_t reply_tag = 0;
	switch (op) {
	case srp::RSP: {
		srp::Rsp rsp;
		if (!srp::parse_rsp(iu, &rsp)) {
			chan_fail(c,
			          "a malformed SRP_RSP (" + std::to_string(iu.size()) + " bytes)");
			return;
		}
		// SRP r16a 5.5: every SRP_RSP carries credits, whatever it answers.
		c.req_lim += rsp.req_lim_delta;
		if (rsp.tag & kTmfTagBit)
			on_tmf_rsp(c, rsp);
		else
			on_rsp(c, rsp);
		break;
	}
	case srp::CRED_REQ: {
		srp::CredReq cr;
		if (!srp::parse_cred_req(iu, &cr)) {
			chan_fail(c, "a malformed SRP_CRED_REQ");
			return;
		}
		c.req_lim += cr.req_lim_delta;
		stats.cred_reqs++;
		reply = srp::CRED_RSP;
		reply_tag = cr.tag;
		break;
	}
	case srp::AER_REQ: {
		srp::AerReq ar;
		if (!srp::parse_aer_req(iu, &ar)) {
			chan_fail(c, "a malformed SRP_AER_REQ");
			return;
		}
		c.req_lim += ar.req_lim_delta;
		stats.aer_reqs++;
		// ib_srp: "ignoring AER"; it is answered, its sense is not acted on.
		ULP_LOG_RATELIMITED(Info, Srpt, "channel {}: SRP_AER_REQ ({} bytes of sense)",
		                    c.idx, ar.sense.size());
		reply = srp::AER_RSP;
		reply_tag = ar.tag;
		break;
	}
	case srp::T_LOGOUT: {
		srp::TLogout tl;
		stats.t_logouts++;
		if (srp::parse_t_logout(iu, &tl))
			ULP_LOG(Info, Srpt,
			        "channel {}: the target logs out (SRP_T_LOGOUT, reason {:#x})",
			        c.idx, tl.reason);
		break;
	}
	default:
		chan_fail(c, "an IU with opcode " + std::to_string(op < 0 ? 0 : op) +
		                 " from the target");
		return;
	}
	if (c.state != ChanState::Live)
		return;
	settle_aborts(c, false); // the credits may account for them now
	if (c.state != ChanState::Live)
		return;
	// Taken apart: the buffer goes back before the answer that may bring the next IU.
	if (int rc = c.recvs.post(*c.conn.qp(), *rx); rc != 0) {
		chan_fail(c, std::string("post_recv: ") + std::strerror(-rc));
		return;
	}
	if (reply)
		answer(c, reply, reply_tag);
}

void Initiator::Impl::on_rsp(Chan &c, const srp::Rsp &rsp)
{
	const uint32_t slot = uint32_t(rsp.tag & 0xffff);
	const uint32_t ch = uint32_t(rsp.tag >> 16 & 0xff);
	Req *r = ch == c.idx && slot < c.reqs.size() ? &c.reqs.descs()[slot] : nullptr;
	if (r && r->abort_pending && r->state == ReqState::Active && r->tag == rsp.tag) {
		// It reached the target after the TMF and ran: a normal answer.
		r->abort_pending = false;
		c.abort_pending--;
	}
	if (!r || r->state != ReqState::Active || r->tag != rsp.tag) {
		// A command a TMF of ours already ended (a LUN RESET answered on another channel
		// before this one's response came: ib_srp's srp_reset_device finishes every
		// channel's commands the same way), or a target's mistake: its credits are
		// counted, nothing else.
		ULP_LOG_RATELIMITED(Info, Srpt, "channel {}: SRP_RSP for tag {:#x}, not in flight",
		                    c.idx, rsp.tag);
		return;
	}
	Result &res = r->res;
	res.status = rsp.status;
	// SRP r16a 6.9: the residual of the direction the flags name.
	if (rsp.flags & (srp::RSP_DIUNDER | srp::RSP_DIOVER)) {
		res.underflow = rsp.flags & srp::RSP_DIUNDER;
		res.overflow = rsp.flags & srp::RSP_DIOVER;
		res.residual = rsp.data_in_res_cnt;
	} else if (rsp.flags & (srp::RSP_DOUNDER | srp::RSP_DOOVER)) {
		res.underflow = rsp.flags & srp::RSP_DOUNDER;
		res.overflow = rsp.flags & srp::RSP_DOOVER;
		res.residual = rsp.data_out_res_cnt;
	}
	res.sense_len = uint16_t(std::min(rsp.sense.size(), res.sense.size()));
	std::memcpy(res.sense.data(), rsp.sense.data(), res.sense_len);
	end_req(*r, Outcome::Completed);
}

// ---- Task management -------------------------------------------------------------------------

void Initiator::Impl::on_tmf_rsp(Chan &c, const srp::Rsp &rsp)
{
	Tmf &t = c.tmf;
	if (!t.busy || rsp.tag != t.tag) {
		ULP_LOG_RATELIMITED(Warn, Srpt,
		                    "channel {}: SRP_RSP for TMF tag {:#x}, not in flight", c.idx,
		                    rsp.tag);
		return;
	}
	t.busy = false;
	t.done = true;
	c.unanswered--;
	// ib_srp's srp_process_rsp: the response code is data[3] of at least 4 bytes of
	// response data; without them the function failed.
	t.result.outcome = Outcome::Completed;
	t.result.rsp_code = rsp.resp_data.size() >= 4 ? rsp.resp_data[3] : uint8_t(srp::TM_FAILED);
	if (t.result.rsp_code != srp::TM_COMPLETE && t.result.rsp_code != srp::TM_SUCCEEDED)
		return;
	// The target sends no SRP_RSP for what the function aborted (SAM-5's task management
	// functions; it owes their credits back instead): those commands end here, Aborted. ABORT
	// TASK covers one task on this channel (its SRP_RSP, had it come, would have come first:
	// one RC queue); the others cover the LUN across the nexus, every channel of ours.
	for (auto &cp : chans) {
		Chan &x = *cp;
		if (x.state != ChanState::Live || (t.func == srp::TSK_ABORT_TASK && &x != &c))
			continue;
		for (Req &r : x.reqs.descs()) {
			if (r.state != ReqState::Active)
				continue;
			bool hit = false;
			switch (t.func) {
			case srp::TSK_ABORT_TASK:
				hit = r.tag == t.task_tag;
				break;
			case srp::TSK_ABORT_TASK_SET:
			case srp::TSK_CLEAR_TASK_SET:
			case srp::TSK_LUN_RESET:
				hit = r.lun == t.lun;
				break;
			default:
				break;
			}
			if (!hit)
				continue;
			// On the TMF's own channel every command sent before it reached the target
			// first (one RC queue): not answered by now, it was aborted. On another
			// channel it may still be on its way and run after the function: it ends
			// when that channel's credits account for it (settle_aborts). ib_srp ends
			// them all at once and invalidates their keys, and a late one's RDMA READ
			// then fails the channel with a remote access error.
			if (&x == &c || t.func == srp::TSK_ABORT_TASK) {
				end_req(r, Outcome::Aborted);
			} else if (!r.abort_pending) {
				r.abort_pending = true;
				x.abort_pending++;
				x.abort_deadline = clock::now() + cfg.tmf_timeout;
			}
		}
		settle_aborts(x, false);
	}
}

void Initiator::Impl::settle_aborts(Chan &c, bool force)
{
	if (c.abort_pending == 0)
		return;
	// SRP r16a 5.5: every command takes a credit and the target gives each back, with its
	// SRP_RSP or, for one a task management function aborted, owed (with a later response
	// or an SRP_CRED_REQ). All back: nothing of this channel is still on its way.
	if (!force && c.req_lim < int64_t(c.granted))
		return;
	if (force)
		ULP_LOG_RATELIMITED(Warn, Srpt,
		                    "channel {}: {} commands a LUN-wide task management function "
		                    "covered were not accounted for within {} ms (no credits came "
		                    "back for them); they end Aborted",
		                    c.idx, c.abort_pending,
		                    static_cast<long long>(cfg.tmf_timeout.count()));
	for (Req &r : c.reqs.descs())
		if (r.abort_pending && r.state == ReqState::Active) {
			r.abort_pending = false;
			end_req(r, Outcome::Aborted);
		}
	c.abort_pending = 0;
}

TmfResult Initiator::Impl::task_mgmt(uint8_t func, uint64_t lun, uint64_t task_tag, uint32_t ch)
{
	TmfResult out;
	out.outcome = Outcome::ConnectionLost;
	if (state != IniState::Up)
		return out;
	// ABORT TASK goes on the task's own channel (ib_srp's srp_abort), whatever ch says.
	if (func == srp::TSK_ABORT_TASK && !(task_tag & kTmfTagBit)) {
		const uint32_t tc = uint32_t(task_tag >> 16 & 0xff);
		if (tc < chans.size() && chans[tc]->state == ChanState::Live)
			ch = tc;
	}
	if (ch >= chans.size())
		return out;
	Chan &c = *chans[ch];
	const auto deadline = clock::now() + cfg.tmf_timeout;
	// One at a time, with a credit (the one commands leave) and a control buffer.
	const bool room = wait_for(deadline, [&] {
		return c.state != ChanState::Live ||
		       !(c.tmf.busy || (cfg.check_credits && c.req_lim < 1) || c.ctl.empty());
	});
	if (c.state != ChanState::Live)
		return out;
	if (!room) {
		out.outcome = Outcome::Timeout;
		return out;
	}
	srp::TskMgmt tm;
	tm.tag = kTmfTagBit | next_tmf++;
	lun_to_wire(lun, tm.lun);
	tm.func = func;
	tm.task_tag = task_tag;
	uint8_t iu[srp::kTskMgmtLen];
	const size_t n = srp::build_tsk_mgmt(tm, iu);
	if (post_ctl(c, srp::TSK_MGMT, iu, n) != 0)
		return out;
	c.tmf = Tmf{};
	c.tmf.busy = true;
	c.tmf.tag = tm.tag;
	c.tmf.func = func;
	c.tmf.lun = lun;
	c.tmf.task_tag = task_tag;
	c.req_lim--;
	c.unanswered++;
	stats.tmfs++;
	// ib_srp's srp_send_tsk_mgmt waits SRP_ABORT_TIMEOUT_MS (5 s) the same way.
	if (!wait_for(deadline, [&] { return c.tmf.done; })) {
		out.outcome = Outcome::Timeout; // it stays busy until answered or lost
		return out;
	}
	c.tmf.done = false;
	return c.tmf.result;
}

} // namespace ulp::srpt
