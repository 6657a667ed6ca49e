// SPDX-License-Identifier: MIT
// srp/target/portal.cc - SRP logins over RDMA/CM and the per-device SRQs (see portal.h).
#include "srp/target/portal.h"

#include "core/log.h"
#include "core/registry.h"

#include <algorithm>
#include <cstring>

namespace ulp::srpt
{

namespace
{

rdma::PortalConfig rdma_cfg(const TargetConfig &c)
{
	rdma::PortalConfig r;
	r.name = "srpt";
	r.heap_bytes = c.heap_bytes;
	r.max_io = c.max_io;
	r.vector_hint = c.vector_hint;
	r.poll_ctx = c.poll_ctx;
	r.drain_timeout = c.drain_timeout;
	return r;
}

} // namespace

Portal::Portal(Target &target, Provider &provider)
    : rdma::Portal(provider, rdma_cfg(target.cfg())), target_(target)
{
}

Portal::~Portal()
{
	stop();
}

int Portal::listen(const SockAddr &addr, std::string *why)
{
	if (int rc = rdma::Portal::listen(addr, why); rc != 0)
		return rc;
	// ib_srpt's srpt_service_guid: the node GUID of the (first) device.
	Device *dev = listen_device();
	if (!dev) {
		auto all = devices();
		dev = all.empty() ? nullptr : all.front();
	}
	if (dev)
		target_.set_default_guid(dev->attr().node_guid);
	if (!target_.has_ids()) {
		*why = "no device to take the target port id from: set id_ext and ioc_guid";
		return -ENODEV;
	}
	ULP_LOG(Info, Srpt,
	        "SRP portal {}: a Linux initiator logs in with: echo {} > "
	        "/sys/class/infiniband_srp/srp-<its RDMA device>-1/add_target",
	        this->addr(), target_.add_target_line(this->addr()));
	return 0;
}

uint32_t SrqShare::limit(uint32_t rq) const
{
	const uint32_t n = std::max<uint32_t>(1, channels.load(std::memory_order_relaxed));
	const uint32_t share = receives > n ? (receives - n) / n : 0;
	return std::min(rq, std::max(kMinSrqCredits, share));
}

Srq *Portal::srq(rdma::DeviceRes &res, SrqShare **share, std::string *why)
{
	std::lock_guard g(lock_);
	auto it = srqs_.find(res.dev);
	if (it != srqs_.end()) {
		*share = &it->second->share;
		return it->second->srq.get();
	}
	const TargetConfig &cfg = target_.cfg();
	auto r = std::make_unique<SrqRes>();
	SrqInitAttr sa;
	sa.max_wr = std::min(cfg.srq_size, res.dev->attr().max_srq_wr);
	sa.max_sge = 1;
	r->srq = res.pd->create_srq(sa);
	if (!r->srq) {
		const int err = errno;
		*why = std::string("create_srq: ") + std::strerror(err ? err : ENOMEM);
		return nullptr;
	}
	int rc = r->ring.init(*res.pd, cfg.max_it_iu_len, sa.max_wr, [](RecvIoctx &d) {
		d.cqe.done = Channel::recv_done;
		d.ch = nullptr; // the completion's QP names the channel
	});
	if (!rc)
		rc = r->ring.post_all(*r->srq);
	if (rc) {
		*why = std::string("SRQ receives: ") + std::strerror(-rc);
		r->srq.reset();
		r->ring.release();
		return nullptr;
	}
	ULP_LOG(Info, Srpt, "{}: a shared receive queue of {} receives of {} bytes",
	        res.dev->name(), sa.max_wr, cfg.max_it_iu_len);
	Srq *s = r->srq.get();
	r->share.receives = sa.max_wr;
	*share = &r->share;
	srqs_.emplace(res.dev, std::move(r));
	return s;
}

void Portal::release_device(rdma::DeviceRes &res)
{
	// Every channel is gone: no QP consumes the SRQ's receives any more. The SRQ first
	// (its receives are discarded with it), then their buffers.
	std::lock_guard g(lock_);
	auto it = srqs_.find(res.dev);
	if (it == srqs_.end())
		return;
	it->second->srq.reset();
	it->second->ring.release();
	srqs_.erase(it);
}

std::unique_ptr<rdma::PortalConn> Portal::on_connect_request(CmEvent &ev, rdma::DeviceRes &res,
                                                             ConnParam *accept,
                                                             std::vector<uint8_t> *reject)
{
	const TargetConfig &cfg = target_.cfg();
	const std::string peer = ev.new_id->peer_addr().str();
	const std::string peer_ip = ev.new_id->peer_addr().host();
	srp::LoginReq req;
	auto refuse = [&](uint32_t reason, const std::string &why) {
		ULP_LOG_RATELIMITED(Warn, Srpt, "login from {} rejected ({}): {}", peer,
		                    srp::rej_reason_name(reason), why);
		srp::LoginRej j;
		j.reason = reason;
		j.tag = req.tag;
		j.buf_fmt = srp::BUF_FMT_DIRECT | srp::BUF_FMT_INDIRECT;
		reject->resize(srp::kLoginRejLen);
		srp::build_login_rej(
		    j, std::span<uint8_t, srp::kLoginRejLen>(reject->data(), srp::kLoginRejLen));
	};

	if (srp::LoginError e = srp::parse_login_req(ev.param.pdata(), &req);
	    e != srp::LoginError::None) {
		target_.count(&TargetStats::login_rejects);
		refuse(srp::REJ_UNABLE_ESTABLISH_CHANNEL,
		       std::string("not an SRP login: ") + srp::login_error_name(e) + " (" +
		           std::to_string(ev.param.pdata().size()) + " bytes of private data)");
		return nullptr;
	}
	const std::string iport = port_id_str(req.initiator_port_id);
	// Linux's ib_srp asks the larger of 84 + 16 * cmd_sg_entries and 68 + max_imm_data
	// (8260 by default) and gives up when refused: max_it_iu_len must cover it.
	if (req.req_it_iu_len < srp::kMinIuLen || req.req_it_iu_len > cfg.max_it_iu_len) {
		target_.count(&TargetStats::login_rejects);
		refuse(srp::REJ_IT_IU_LEN_TOO_LARGE,
		       "req_it_iu_len " + std::to_string(req.req_it_iu_len) + " outside [64, " +
		           std::to_string(cfg.max_it_iu_len) + "] (max_it_iu_len)");
		return nullptr;
	}
	if (!(req.req_buf_fmt & (srp::BUF_FMT_DIRECT | srp::BUF_FMT_INDIRECT))) {
		target_.count(&TargetStats::login_rejects);
		refuse(srp::REJ_UNSUPPORTED_DESC_FMT, "neither direct nor indirect descriptors");
		return nullptr;
	}
	LoginDecision d = target_.login(req, peer_ip);
	if (d.reject) {
		target_.count(&TargetStats::login_rejects);
		refuse(d.reject, d.why);
		return nullptr;
	}

	ChannelParams p;
	p.it_iu_len = req.req_it_iu_len;
	p.i_port_id = req.initiator_port_id;
	// SRP-2: immediate data where the initiator put it, if that is past SRP_CMD's fixed
	// part; SRQ channels too (their receives are max_it_iu_len bytes).
	const bool imm = cfg.immediate && req.immediate() && req.imm_data_offset >= srp::kCmdLen &&
	                 req.imm_data_offset < req.req_it_iu_len;
	if (imm)
		p.imm_data_offset = req.imm_data_offset;
	// READ credits as rdma_cm hands them to the passive side (see iser/target/target.cc): our
	// RDMA READs of write data need the initiator to answer them.
	const DeviceAttr &da = res.dev->attr();
	accept->initiator_depth =
	    uint8_t(std::min<uint32_t>({da.max_qp_init_rd_atom, ev.param.initiator_depth, 255}));
	accept->responder_resources =
	    uint8_t(std::min<uint32_t>({da.max_qp_rd_atom, ev.param.responder_resources, 255}));
	accept->rnr_retry_count = 7;
	p.read_credit = accept->initiator_depth;

	auto c = std::make_unique<Channel>(*this, std::move(ev.new_id), peer);
	std::string why;
	if (int rc = c->setup(res, p, d.nexus, &why); rc != 0) {
		target_.abandon(d.nexus);
		refuse(srp::REJ_INSUFFICIENT_RESOURCES, why);
		c->id().reject(*reject);
		reject->clear(); // answered
		c->release_resources();
		c->detach(); // never accepted: nothing was posted that could complete
		return nullptr;
	}

	srp::LoginRsp r;
	r.req_lim_delta = c->credits();
	r.tag = req.tag;
	r.max_it_iu_len = req.req_it_iu_len;
	r.max_ti_iu_len = Channel::kMaxTiIuLen;
	r.buf_fmt = srp::BUF_FMT_DIRECT | srp::BUF_FMT_INDIRECT;
	r.rsp_flags = d.rsp_flags | (imm ? srp::LOGIN_RSP_IMMED_SUPP : 0);
	uint8_t pd[srp::kLoginRspLen];
	srp::build_login_rsp(r, std::span<uint8_t, srp::kLoginRspLen>(pd, srp::kLoginRspLen));
	accept->set_private_data(pd);
	ULP_LOG(Info, Srpt, "login: {} from {} ({}): {} credits, it_iu_len {}, immediate data {}{}",
	        iport, peer,
	        d.rsp_flags == srp::LOGIN_RSP_MAINTAINED ? "another channel" : "new nexus",
	        r.req_lim_delta, r.max_it_iu_len, imm ? "at " : "no",
	        imm ? std::to_string(p.imm_data_offset) : "");
	return c;
}

void Portal::accept_failed(rdma::PortalConn *pc, int)
{
	// Receives are posted: the channel closes the usual way (ERR, zero-length WRITE,
	// drain, reap), so that none of their completions outlives it.
	auto *c = static_cast<Channel *>(pc);
	c->close_async("accept failed");
}

} // namespace ulp::srpt
