// SPDX-License-Identifier: MIT
// srp/initiator/initiator.cc - the SRP initiator: login over RDMA/CM, the channels' resources, CM
// events, polling, timers, logout and teardown (see initiator.h; commands are in
// initiator_io.cc).
#include "core/deadline.h"
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

const char *outcome_name(Outcome o)
{
	switch (o) {
	case Outcome::Completed:
		return "completed";
	case Outcome::Aborted:
		return "aborted";
	case Outcome::ConnectionLost:
		return "connection lost";
	case Outcome::Timeout:
		return "timeout";
	case Outcome::Cancelled:
		return "cancelled";
	}
	return "?";
}

namespace ini
{

const char *ini_state_str(IniState s)
{
	static const char *const n[] = {"Idle",       "LoggingIn", "Up",
	                                "LoggingOut", "Failed",    "Closed"};
	return size_t(s) < std::size(n) ? n[size_t(s)] : "?";
}

const char *chan_state_str(ChanState s)
{
	static const char *const n[] = {"Connecting", "Live", "Failed", "Closed"};
	return size_t(s) < std::size(n) ? n[size_t(s)] : "?";
}

const char *req_state_str(ReqState s)
{
	static const char *const n[] = {"Free", "Active", "Ending"};
	return size_t(s) < std::size(n) ? n[size_t(s)] : "?";
}

} // namespace ini

void Initiator::Impl::set_state(IniState s)
{
	change_state(&state, s, kIniStates, this);
}

uint32_t Initiator::Impl::live() const
{
	uint32_t n = 0;
	for (const auto &c : chans)
		n += c->state == ChanState::Live;
	return n;
}

uint32_t Initiator::Impl::in_flight() const
{
	size_t n = done.size();
	for (const auto &c : chans)
		n += c->reqs.size() - c->reqs.free_count();
	return uint32_t(n);
}

// ---- Login ---------------------------------------------------------------------------------

int Initiator::Impl::setup_device(std::string *w)
{
	const DeviceAttr &da = dev->attr();
	if (!(da.device_cap_flags & DEVICE_MEM_MGT_EXTENSIONS)) {
		*w = dev->name() + " has no fast registration (REG_MR): SRP registers every buffer";
		return -EOPNOTSUPP;
	}
	slots = std::max<uint32_t>(1, cfg.queue_size);
	max_io = std::max<uint32_t>(kPage, cfg.max_io);
	// One MR per descriptor: a page list covers any buffer of (pages - 1) pages whatever
	// its alignment. max_desc_bytes asks for smaller descriptors (more of them).
	const uint32_t max_pl = da.max_fast_reg_page_list_len ? da.max_fast_reg_page_list_len : 512;
	if (max_pl < 2) {
		*w = "the device's fast-registration page lists are too short";
		return -EOPNOTSUPP;
	}
	if (cfg.max_desc_bytes) {
		chunk = cfg.max_desc_bytes;
		mr_pages = (chunk + kPage - 1) / kPage + 1;
	} else {
		mr_pages = (max_io + kPage - 1) / kPage + 1;
	}
	if (mr_pages > max_pl) {
		mr_pages = max_pl;
		chunk = (mr_pages - 1) * kPage;
	} else if (!cfg.max_desc_bytes) {
		chunk = max_io;
	}
	max_descs = (max_io + chunk - 1) / chunk;
	nrecv = slots + 1 + kUnsolicited;

	// One CQ for every channel's queues: commands' WRs, control sends, receives and drain's
	// two markers each.
	const uint32_t per_chan = slots * 3 + 2 * (max_descs + 1) + kCtlDescs + 1 + nrecv + 1;
	uint64_t n = uint64_t{per_chan} * std::max<uint32_t>(1, cfg.channels);
	if (da.max_cqe && n > da.max_cqe)
		n = da.max_cqe;
	if (int rc = cq.create(*dev, int(n), w); rc != 0)
		return rc;
	// SRP r16a 5.2.1 / Linux's add_target: initiator_ext, then the port's 64-bit id (here
	// the node GUID: the soft provider has no port GUIDs of its own).
	i_port_id = srp::make_port_id(cfg.initiator_ext, da.node_guid);
	return 0;
}

int Initiator::Impl::setup_chan(Chan &c, CmId &id, std::string *w)
{
	const DeviceAttr &da = dev->attr();
	c.pd = dev->alloc_pd();
	if (!c.pd) {
		const int err = errno;
		*w = std::string("alloc_pd: ") + std::strerror(err);
		return -ENOMEM;
	}
	// MRs: every slot a direct command, and one command with the most descriptors and its
	// table on top; more descriptors than the pool holds free is -EBUSY at submit.
	if (int rc = c.mrs.init(*c.pd, int(slots * 2 + max_descs + 1), mr_pages); rc != 0) {
		*w = std::string("MR pool: ") + std::strerror(-rc);
		return rc;
	}
	for (std::span<uint8_t> r : cfg.regions) {
		auto mr = c.pd->reg_mr(r.data(), r.size(), ACCESS_LOCAL_WRITE);
		if (!mr) {
			const int err = errno;
			*w = std::string("register a buffer region: ") + std::strerror(err);
			return -ENOMEM;
		}
		if (int rc = c.map.register_mr(*mr); rc != 0) {
			*w = std::string("buffer regions overlap: ") + std::strerror(-rc);
			return rc;
		}
		c.user_mrs.push_back(std::move(mr));
	}
	size_t max_alloc = kPage;
	while (max_alloc < max_io)
		max_alloc <<= 1;
	const size_t bytes =
	    std::max(cfg.bounce_bytes / std::max<uint32_t>(1, cfg.channels), max_alloc);
	c.bounce = DmaHeap::create(*c.pd, bytes, max_alloc, ACCESS_LOCAL_WRITE);
	if (!c.bounce) {
		const int err = errno;
		*w = std::string("bounce heap: ") + std::strerror(err);
		return -ENOMEM;
	}
	c.tables =
	    BufPool::create(*c.pd, size_t{max_descs} * srp::kDescLen, slots, ACCESS_LOCAL_WRITE);
	if (!c.tables) {
		const int err = errno;
		*w = std::string("descriptor tables: ") + std::strerror(err);
		return -ENOMEM;
	}
	int rc = c.reqs.init(*c.pd, cfg.max_it_iu_len, slots, [&](Req &r) {
		r.cqe.done = send_done;
		r.inv_cqe.done = inv_done;
		r.ch = &c;
		r.mrs.resize(max_descs + 1);
		r.regs.resize(max_descs + 1);
		r.invs.resize(max_descs + 1);
		r.table = c.tables->get();
	});
	if (!rc)
		rc = c.ctl.init(*c.pd, kCtlBufLen, kCtlDescs, [&](Ctl &d) {
			d.cqe.done = ctl_done;
			d.ch = &c;
		});
	if (rc) {
		*w = std::string("buffers: ") + std::strerror(-rc);
		return rc;
	}
	for (uint32_t i = 0; i < c.reqs.size(); i++)
		c.reqs.descs()[i].slot = i;

	// Send queue by worst cases: a command takes its REG_MRs, its SEND and as many
	// LOCAL_INVs; the control IUs have their own share; + drain's marker.
	const uint32_t max_wr = da.max_qp_wr ? da.max_qp_wr : 16384;
	c.sq_size = slots * 3 + 2 * (max_descs + 1);
	if (c.sq_size + kCtlDescs + 2 > max_wr)
		c.sq_size = max_wr - kCtlDescs - 2;
	QpInitAttr qa;
	qa.send_cq = cq.cq();
	qa.recv_cq = cq.cq();
	qa.cap.max_send_wr = c.sq_size + kCtlDescs + 1;
	qa.cap.max_recv_wr = nrecv + 1;
	qa.cap.max_send_sge = 1;
	qa.cap.max_recv_sge = 1;
	qa.sq_sig_type = SigType::ReqWr;
	qa.qp_context = &c;
	if (rc = id.create_qp(*c.pd, qa); rc != 0) {
		*w = std::string("create_qp: ") + std::strerror(-rc);
		return rc;
	}
	return 0;
}

int Initiator::Impl::login_one(uint32_t idx, const SockAddr &dst,
                               const std::optional<SockAddr> &src, uint8_t multichan,
                               clock::time_point deadline, std::string *w)
{
	chans.push_back(std::make_unique<Chan>());
	Chan &c = *chans.back();
	c.owner = this;
	c.idx = idx;
	int rc = 0;
	auto failed_with = [&](int e, std::string s) {
		*w = "channel " + std::to_string(idx) + ": " + s;
		rc = e;
		return e;
	};
	rdma::ClientParams p;
	p.provider = cfg.provider;
	p.dst = dst;
	p.src = src;
	p.deadline = deadline;
	p.setup = [&](CmId &id, ConnParam *cp, std::string *sw) {
		if (!dev) {
			dev = id.device();
			if (int e = setup_device(sw); e != 0)
				return e;
		} else if (id.device() != dev) {
			// One CQ serves every channel: they must share a device.
			*sw = "resolved to another RDMA device than channel 0";
			return -EXDEV;
		}
		if (int e = setup_chan(c, id, sw); e != 0)
			return e;
		// SRP r16a 6.2: srp_login_req_rdma as ib_srp's srp_send_req builds it (tag 0,
		// direct and indirect descriptors, immediate data at 68 when asked for).
		srp::LoginReq lr;
		lr.req_it_iu_len = cfg.max_it_iu_len;
		lr.req_buf_fmt = srp::BUF_FMT_DIRECT | srp::BUF_FMT_INDIRECT;
		lr.req_flags = multichan | (cfg.immediate ? srp::IMMED_REQUESTED : 0);
		lr.imm_data_offset = cfg.immediate ? kImmOffset : 0;
		lr.initiator_port_id = i_port_id;
		lr.target_port_id = srp::make_port_id(cfg.id_ext, cfg.ioc_guid);
		uint8_t pd[srp::kLoginReqRdmaLen];
		srp::build_login_req_rdma(
		    lr, std::span<uint8_t, srp::kLoginReqRdmaLen>(pd, sizeof(pd)));
		cp->set_private_data(pd);
		// The target RDMA READs write data (and external tables) from us; we READ nothing
		// (ib_srp: responder_resources 4, initiator_depth 0).
		cp->responder_resources =
		    uint8_t(std::min<uint32_t>(dev->attr().max_qp_rd_atom, cfg.read_credit));
		cp->initiator_depth = 0;
		cp->retry_count = 7;
		cp->rnr_retry_count = 7;
		return 0;
	};
	// Established (the accept's SRP_LOGIN_RSP) or Rejected (SRP_LOGIN_REJ).
	rdma::CmRec ev;
	std::string cw;
	if (int e = c.conn.connect(p, &ev, &cw); e == -ECONNREFUSED) {
		srp::LoginRej rej;
		if (!srp::parse_login_rej(ev.param.pdata(), &rej))
			return failed_with(e, "rejected without an SRP_LOGIN_REJ (" + cw + ")");
		char b[32];
		std::snprintf(b, sizeof(b), " (%#" PRIx32 ")", rej.reason);
		return failed_with(e, std::string("SRP_LOGIN_REJ: ") +
		                          srp::rej_reason_name(rej.reason) + b);
	} else if (e != 0) {
		return failed_with(e, cw);
	}
	srp::LoginRsp rsp;
	if (!srp::parse_login_rsp(ev.param.pdata(), &rsp))
		return failed_with(-EPROTO, "the accept carries no SRP_LOGIN_RSP");
	// srp_cm_rep_handler: req_lim from the grant; the receive buffers hold max_ti_iu_len.
	c.req_lim = rsp.req_lim_delta;
	c.granted = rsp.req_lim_delta;
	c.tgt_it_iu_len = rsp.max_it_iu_len;
	c.it_iu_len = std::min(cfg.max_it_iu_len, rsp.max_it_iu_len);
	c.max_ti_iu_len = rsp.max_ti_iu_len;
	c.rsp_flags = rsp.rsp_flags;
	if (cfg.immediate && (rsp.rsp_flags & srp::LOGIN_RSP_IMMED_SUPP) &&
	    c.it_iu_len > kImmOffset)
		c.max_imm = std::min(cfg.max_imm, c.it_iu_len - kImmOffset);
	if (rsp.max_ti_iu_len < srp::kRspLen || rsp.max_ti_iu_len > (1u << 20))
		return failed_with(-EPROTO, "max_ti_iu_len " + std::to_string(rsp.max_ti_iu_len) +
		                                " out of range");
	if (rc = c.recvs.init(*c.pd, rsp.max_ti_iu_len, nrecv,
	                      [&](Rx &r) {
		                      r.cqe.done = recv_done;
		                      r.ch = &c;
	                      });
	    rc != 0)
		return failed_with(rc, std::string("receive buffers: ") + std::strerror(-rc));
	// A response that came before these are posted waits in the target's queue (RNR
	// retries, rnr_retry_count 7: forever).
	if (rc = c.recvs.post_all(*c.conn.qp()); rc != 0)
		return failed_with(rc, std::string("post_recv: ") + std::strerror(-rc));
	change_state(&c.state, ChanState::Live, kChanStates, &c);
	ULP_LOG(Info, Srpt, "channel {} to {}: {} credits, max_ti_iu_len {}, immediate data {}",
	        idx, dst.str(), rsp.req_lim_delta, rsp.max_ti_iu_len,
	        c.max_imm ? "up to " + std::to_string(c.max_imm) + " bytes" : std::string("no"));
	return 0;
}

int Initiator::login(const SockAddr &dst, std::string *why)
{
	Impl &m = *impl_;
	std::string w;
	auto refuse = [&](int rc, std::string s) {
		if (why)
			*why = std::move(s);
		return rc;
	};
	if (m.state != IniState::Idle)
		return refuse(-EISCONN, "login: the initiator has logged in before");
	if (!m.cfg.provider)
		return refuse(-EINVAL, "login: no RDMA provider given");
	if (m.cfg.channels == 0 || m.cfg.channels > 256 || m.cfg.queue_size == 0 ||
	    m.cfg.queue_size > 65535 || m.cfg.max_it_iu_len < srp::kMinIuLen)
		return refuse(-EINVAL, "login: channels, queue_size or max_it_iu_len out of range");
	std::optional<SockAddr> src;
	if (!m.cfg.src_ip.empty() && !(src = SockAddr::parse(m.cfg.src_ip, 0)))
		return refuse(-EINVAL, "login: bad source address " + m.cfg.src_ip);
	m.set_state(IniState::LoggingIn);
	int rc = 0;
	// ib_srp's add_target: channel 0 SINGLE (ends whatever nexus this initiator port had),
	// the others MULTI, in turn.
	for (uint32_t i = 0; i < m.cfg.channels && rc == 0; i++) {
		rc = m.login_one(i, dst, src, i == 0 ? srp::MULTICHAN_SINGLE : srp::MULTICHAN_MULTI,
		                 clock::now() + m.cfg.login_timeout, &w);
		if (rc != 0) {
			// Never logged in: torn down and forgotten at once.
			Chan &c = *m.chans.back();
			m.chan_fail(c, w);
			m.teardown(c);
			m.chans.pop_back();
		}
	}
	if (m.live() == 0) {
		ULP_LOG(Warn, Srpt, "login to {} failed: {}", dst.str(), w);
		m.close_all(w, true);
		return refuse(rc ? rc : -ENOTCONN, w);
	}
	m.set_state(IniState::Up);
	if (rc != 0) {
		ULP_LOG(Warn, Srpt, "login to {}: {} of {} channels ({})", dst.str(), m.live(),
		        m.cfg.channels, w);
		return refuse(rc, w);
	}
	return 0;
}

// ---- Failure and teardown -----------------------------------------------------------------

void Initiator::Impl::chan_fail(Chan &c, const std::string &w)
{
	if (c.state == ChanState::Failed || c.state == ChanState::Closed)
		return;
	const bool was_live = c.state == ChanState::Live;
	change_state(&c.state, ChanState::Failed, kChanStates, &c);
	c.why = w;
	if (was_live)
		ULP_LOG(Info, Srpt, "channel {}: {}", c.idx, w);
	// The QP to ERR first: from then on it answers no RDMA of the target's, and it is the
	// only QP of this PD, so every key of the channel is unreachable and its commands can
	// be handed back now, without waiting for LOCAL_INVs that would only be flushed.
	c.conn.stop();
	for (Req &r : c.reqs.descs()) {
		if (r.state == ReqState::Free)
			continue;
		if (r.state == ReqState::Active) {
			change_state(&r.state, ReqState::Ending, kReqStates, &r);
			r.res.outcome = Outcome::ConnectionLost;
		}
		r.send_pending = false;
		r.inv_pending = false;
		unmap(r, r.res.outcome == Outcome::Completed);
		maybe_finish(r);
	}
	c.unanswered = 0;
	if (c.tmf.busy) {
		c.tmf.busy = false;
		c.tmf.done = true;
		c.tmf.result = TmfResult{Outcome::ConnectionLost, 0};
	}
	c.ctl_backlog.clear();
	if (state == IniState::Up && live() == 0)
		fail("every channel is gone (" + w + ")");
}

void Initiator::Impl::fail(const std::string &w, Outcome first, Req *first_req)
{
	if (!failed) {
		failed = true;
		why = w;
		ULP_LOG(Warn, Srpt, "initiator failed: {}", w);
	}
	if (state != IniState::Failed && state != IniState::Closed)
		set_state(IniState::Failed);
	if (first_req && first_req->state == ReqState::Active) {
		change_state(&first_req->state, ReqState::Ending, kReqStates, first_req);
		first_req->res.outcome = first;
		first_req->ch->unanswered--;
	}
	for (auto &c : chans)
		chan_fail(*c, w);
}

void Initiator::Impl::teardown(Chan &c)
{
	if (c.state != ChanState::Failed || cq.in_process())
		return;
	// Every posted WR comes back (flushed) through its done(), which finds the channel
	// failed and lets it be; bounded per queue.
	c.conn.drain(cfg.drain_timeout);
	c.recvs.release();
	for (Req &r : c.reqs.descs())
		if (r.table) {
			c.tables->put(r.table);
			r.table = nullptr;
		}
	c.reqs.release();
	c.ctl.release();
	// The MRs before the QP, as the kernel's ib_destroy_qp does (rdma_rw_cleanup_mrs): on
	// rxe a fast-reg MR is a type-2 memory window, which holds its QP while bound; a QP
	// destroyed under bound windows makes rxe wait, warn, and later underflow the QP's
	// reference count (6.1), after which its connections fail.
	if (c.mrs.size() && c.mrs.destroy() != 0)
		ULP_LOG(Error, Srpt, "channel {}: MRs still out at teardown", c.idx);
	c.conn.release(); // the QP, then the id (waits out a running CM handler)
	c.bounce.reset();
	c.tables.reset();
	for (auto &mr : c.user_mrs)
		c.map.unregister_region(reinterpret_cast<void *>(mr->iova()), mr->length());
	c.user_mrs.clear();
	c.pd.reset();
	change_state(&c.state, ChanState::Closed, kChanStates, &c);
}

void Initiator::Impl::teardown_failed()
{
	for (auto &c : chans)
		if (c->state == ChanState::Failed)
			teardown(*c);
}

void Initiator::Impl::close_all(const std::string &w, bool failing)
{
	if (state == IniState::Closed)
		return;
	if (failing || state == IniState::Idle) {
		fail(w);
	} else {
		for (auto &c : chans)
			chan_fail(*c, w);
	}
	for (auto &c : chans)
		teardown(*c);
	set_state(IniState::Closed);
	cq.destroy();
	run_callbacks();
}

// ---- CM events, completions, timers ----------------------------------------------------------

void Initiator::Impl::handle_cm_events()
{
	for (auto &cp : chans) {
		Chan &c = *cp;
		// A disconnect after what the target sent before it (SRP_T_LOGOUT, a response).
		auto w =
		    c.conn.take_events([&] { return c.state == ChanState::Live && process() > 0; });
		if (w && c.state == ChanState::Live)
			chan_fail(c, *w);
	}
}

int Initiator::Impl::process()
{
	return cq.process();
}

int Initiator::Impl::run_callbacks()
{
	int n = 0;
	while (!done.empty()) {
		std::vector<std::pair<Callback, Result>> batch;
		batch.swap(done);
		for (auto &[cb, res] : batch) {
			if (cb)
				cb(res);
			n++;
		}
	}
	return n;
}

void Initiator::Impl::check_timers(clock::time_point now)
{
	if (now < next_timer_check)
		return;
	next_timer_check = now + std::chrono::milliseconds(10);
	for (auto &c : chans) {
		if (c->state != ChanState::Live)
			continue;
		if (c->abort_pending && now >= c->abort_deadline)
			settle_aborts(*c, true);
		for (Req &r : c->reqs.descs()) {
			// Ending ones too: a SEND or LOCAL_INV completion that never comes must not
			// hold a command forever.
			if (r.state == ReqState::Free || now < r.deadline)
				continue;
			// ib_srp leaves this to the SCSI midlayer's timeout (abort, then reset,
			// then reconnect); here a session drop: the command ends Timeout, the rest
			// ConnectionLost.
			char b[96];
			std::snprintf(b, sizeof(b), "tag %#" PRIx64 " not ended within %lld ms",
			              r.tag, static_cast<long long>(cfg.cmd_timeout.count()));
			fail(b, Outcome::Timeout, &r);
			return;
		}
	}
}

bool Initiator::Impl::wait(clock::time_point deadline)
{
	int ms = poll_timeout_ms(deadline);
	if (ms == 0)
		return false;
	// Wake for the command timers too.
	if (in_flight() > 0)
		ms = std::min(ms, 50);
	std::vector<rdma::ClientConn *> conns;
	conns.reserve(chans.size());
	for (auto &c : chans)
		conns.push_back(&c->conn);
	std::string w;
	if (rdma::wait_events(
	        &cq, conns, ms, [this] { return process(); }, &w) < 0)
		fail(w);
	return true;
}

void Initiator::Impl::pump()
{
	handle_cm_events();
	while (process() > 0) {
	}
	check_timers(clock::now());
	teardown_failed();
}

int Initiator::Impl::poll(std::chrono::milliseconds timeout)
{
	const auto deadline = clock::now() + timeout;
	for (;;) {
		pump();
		const int ran = run_callbacks();
		if (ran > 0)
			return ran;
		const bool up = state == IniState::Up || state == IniState::LoggingOut ||
		                state == IniState::LoggingIn;
		if (!up && in_flight() == 0)
			return -ENOTCONN;
		if (!wait(deadline))
			return 0;
	}
}

// ---- The public face -----------------------------------------------------------------------

Initiator::Initiator(const InitiatorConfig &cfg) : impl_(std::make_unique<Impl>(cfg)) {}

Initiator::~Initiator()
{
	close("the initiator is destroyed");
}

int Initiator::submit(const Request &req, Callback cb, uint64_t *tag)
{
	return impl_->submit(req, std::move(cb), tag);
}

int Initiator::poll(std::chrono::milliseconds timeout)
{
	return impl_->poll(timeout);
}

Result Initiator::run(const Request &req)
{
	Impl &m = *impl_;
	Result out;
	bool got = false;
	const auto deadline = clock::now() + m.cfg.cmd_timeout + std::chrono::seconds(1);
	for (;;) {
		const int rc = submit(req, [&](const Result &r) {
			out = r;
			got = true;
		});
		if (rc == 0)
			break;
		if (rc != -EBUSY || clock::now() >= deadline) {
			out.outcome = rc == -ENOTCONN || rc == -EBUSY ? Outcome::ConnectionLost
			                                              : Outcome::Cancelled;
			return out;
		}
		if (poll(std::chrono::milliseconds(10)) < 0) {
			out.outcome = Outcome::ConnectionLost;
			return out;
		}
	}
	while (!got && clock::now() < deadline)
		if (poll(std::chrono::milliseconds(poll_timeout_ms(deadline))) < 0)
			break;
	if (!got) {
		// The timer fails the initiator at cmd_timeout; this is the backstop that keeps the
		// callback (which points at this frame) from outliving it.
		m.fail("run: no answer in time");
		m.run_callbacks();
	}
	ULP_CHECK(got);
	return out;
}

TmfResult Initiator::task_mgmt(uint8_t func, uint64_t lun, uint64_t task_tag, uint32_t ch)
{
	return impl_->task_mgmt(func, lun, task_tag, ch);
}

void Initiator::logout(std::chrono::milliseconds timeout)
{
	Impl &m = *impl_;
	if (m.state != IniState::Up) {
		m.close_all("logged out", true);
		return;
	}
	m.set_state(IniState::LoggingOut);
	const auto deadline = clock::now() + timeout;
	while (m.in_flight() > 0 && clock::now() < deadline)
		if (m.poll(std::chrono::milliseconds(poll_timeout_ms(deadline))) < 0)
			break;
	// SRP r16a 6.6: SRP_I_LOGOUT on every channel (ib_srp only disconnects). A target
	// that honours it ends the channel itself; were we to disconnect as soon as the SEND
	// completes, the DREQ could reach it before it has taken the IU off its CQ, and the
	// logout would go unseen. So: wait (briefly: ib_srpt ignores I_LOGOUT) for the
	// target's disconnect, then disconnect what is left.
	for (auto &c : m.chans)
		if (c->state == ChanState::Live)
			m.send_logout(*c);
	m.wait_for(std::min(std::max(deadline, clock::now() + std::chrono::milliseconds(100)),
	                    clock::now() + std::chrono::seconds(1)),
	           [&] { return m.live() == 0; });
	m.close_all("logged out", m.state == IniState::Failed);
}

void Initiator::close(const std::string &why)
{
	Impl &m = *impl_;
	if (m.state == IniState::Closed)
		return;
	if (!m.failed) {
		// Asked for: no warning.
		m.failed = true;
		m.why = why;
		if (m.state != IniState::Idle)
			ULP_LOG(Info, Srpt, "closing: {}", why);
	}
	m.close_all(why, true);
}

bool Initiator::failed() const
{
	return impl_->failed;
}

const std::string &Initiator::error() const
{
	return impl_->why;
}

uint32_t Initiator::channels() const
{
	return impl_->live();
}

ChannelInfo Initiator::channel_info(uint32_t ch) const
{
	ChannelInfo i;
	if (ch >= impl_->chans.size())
		return i;
	const Chan &c = *impl_->chans[ch];
	i.credits = uint32_t(std::max<int64_t>(0, c.req_lim));
	i.granted = c.granted;
	i.max_it_iu_len = c.tgt_it_iu_len;
	i.max_ti_iu_len = c.max_ti_iu_len;
	i.rsp_flags = c.rsp_flags;
	i.in_flight = c.unanswered;
	return i;
}

uint32_t Initiator::in_flight() const
{
	return impl_->in_flight();
}

const InitiatorStats &Initiator::stats() const
{
	return impl_->stats;
}

std::array<uint8_t, 16> Initiator::initiator_port_id() const
{
	return impl_->i_port_id;
}

} // namespace ulp::srpt
