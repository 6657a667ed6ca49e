// SPDX-License-Identifier: MIT
// iser/target/target.cc - the iSER transport, target side (see target.h): the portal, which
// accepts RDMA/CM connection requests as Conns (conn.h).
#include "iser/target/target.h"

#include "core/log.h"
#include "iser/proto.h"
#include "iser/target/conn.h"

#include <algorithm>

namespace ulp::iser
{

using namespace iscsi::target;

// ---- Portal ------------------------------------------------------------------------------

namespace
{

rdma::PortalConfig rdma_cfg(const PortalConfig &c)
{
	rdma::PortalConfig r;
	r.name = "iser";
	r.heap_bytes = c.heap_bytes;
	r.max_io = c.max_io;
	r.vector_hint = c.vector_hint;
	r.poll_ctx = c.poll_ctx;
	r.drain_timeout = c.drain_timeout;
	return r;
}

} // namespace

Portal::Portal(Target &target, Provider &provider, const PortalConfig &cfg)
    : rdma::Portal(provider, rdma_cfg(cfg)), target_(target), cfg_(cfg)
{
}

Portal::~Portal()
{
	stop();
}

PortalStats Portal::stats()
{
	PortalStats s = stats_.read();
	s.accepted = accepted();
	s.rejected = rejected();
	return s;
}

void Portal::count(uint64_t PortalStats::*field)
{
	stats_.add(field);
}

std::unique_ptr<rdma::PortalConn> Portal::on_connect_request(CmEvent &ev, rdma::DeviceRes &res,
                                                             ConnParam *accept,
                                                             std::vector<uint8_t> *)
{
	// Linux sends iser_cm_hdr; an initiator that sends none is taken to allow nothing.
	IserCmHdr ch{ISER_ZBVA_NOT_SUP | ISER_SEND_W_INV_NOT_SUP};
	parse_iser_cm_hdr(ev.param.pdata(), &ch);
	const std::string peer = ev.new_id->peer_addr().str();
	const std::string local = ev.new_id->local_addr().str();
	auto c = std::make_unique<Conn>(*this, std::move(ev.new_id), peer, local);
	std::string why;
	if (int rc = c->setup(*res.pd, *res.heap, ch, &why); rc != 0) {
		ULP_LOG(Warn, Iser, "connection from {}: {}", peer, why);
		c->id().reject({});
		c->release_resources();
		c->detach(); // never logged in: nothing was posted to it
		return nullptr;
	}
	// READ credits, as rdma_cm hands them to the passive side (IB CM crosses them:
	// cm_format_req_event): ev.param.initiator_depth is how many RDMA READs the initiator
	// will answer at once (its responder_resources), ev.param.responder_resources how many
	// it will issue (its initiator_depth). The target READs write data and answers no
	// READs (the initiator uses SEND/RECV and our WRITEs only), as LIO's isert does.
	const DeviceAttr &da = res.dev->attr();
	accept->initiator_depth =
	    uint8_t(std::min<uint32_t>({da.max_qp_init_rd_atom, ev.param.initiator_depth, 255}));
	accept->responder_resources =
	    uint8_t(std::min<uint32_t>({da.max_qp_rd_atom, ev.param.responder_resources, 255}));
	c->set_read_credit(accept->initiator_depth);
	// Accept: we use no zero-based VAs; SEND_WITH_INV only when allowed and possible.
	IserCmHdr ours{ISER_ZBVA_NOT_SUP};
	if (!(!(ch.flags & ISER_SEND_W_INV_NOT_SUP) &&
	      (da.device_cap_flags & DEVICE_MEM_MGT_EXTENSIONS)))
		ours.flags |= ISER_SEND_W_INV_NOT_SUP;
	uint8_t pd[kIserCmHdrLen];
	build_iser_cm_hdr(ours, std::span<uint8_t, kIserCmHdrLen>(pd, kIserCmHdrLen));
	accept->set_private_data(pd);
	return c;
}

void Portal::accept_failed(rdma::PortalConn *pc, int)
{
	// Receives are posted: the connection goes down the usual way (close, drain, reap) so
	// that none of their completions outlives it.
	auto *c = static_cast<Conn *>(pc);
	c->enter([&] { c->on_transport_error("accept failed"); });
}

} // namespace ulp::iser
