// SPDX-License-Identifier: MIT
// tools/ulp-stress/nexus.cc - a logged-in nexus over TCP, iSER or SRP (see nexus.h).
#include "tools/ulp-stress/nexus.h"

#include "tools/common/named_device.h"

#include <nlohmann/json.hpp>

#include <cinttypes>
#include <cstdio>

namespace stress
{

using namespace ulp;

const char *transport_name(Transport t)
{
	switch (t) {
	case Transport::Tcp:
		return "tcp";
	case Transport::Iser:
		return "iser";
	case Transport::Srp:
		return "srp";
	}
	return "?";
}

bool transport_from_name(const std::string &s, Transport *out)
{
	for (Transport t : {Transport::Tcp, Transport::Iser, Transport::Srp})
		if (s == transport_name(t)) {
			*out = t;
			return true;
		}
	return false;
}

std::string srp_port_prefix(uint64_t initiator_ext)
{
	char b[24];
	std::snprintf(b, sizeof(b), "0x%016" PRIx64, initiator_ext);
	return b;
}

Nexus::~Nexus()
{
	idisk_.reset();
	s_.reset(); // closes without a logout when still open: the transport before its device
	srp_.reset();
}

std::unique_ptr<Nexus> Nexus::login(Transport t, const Endpoint &ep, const Identity &id,
                                    std::string *why)
{
	std::unique_ptr<Nexus> n(new Nexus());
	n->t_ = t;
	if (t == Transport::Srp) {
		initiator::SrpArgs a;
		a.add_target = ep.srp_target;
		char ext[24];
		std::snprintf(ext, sizeof(ext), "%" PRIx64, id.srp_initiator_ext);
		a.initiator_ext = ext;
		a.channels = id.srp_channels;
		n->srp_ = std::make_unique<initiator::SrpSession>();
		std::span<uint8_t> arena;
		const std::string portal = ep.host + ":" + std::to_string(ep.srp_port);
		if (!n->srp_->configure(a, portal, ep.rdma_device, ep.src_ip, id.qd, id.max_io,
		                        double(id.cmd_timeout.count()) / 1000.0, &arena, why))
			return nullptr;
		if (!n->srp_->login(why))
			return nullptr;
		n->disk_ = &n->srp_->disk();
		return n;
	}
	iscsi::initiator::InitiatorConfig ic;
	ic.initiator_name = id.initiator_name;
	ic.target_name = ep.target;
	ic.cmd_timeout = id.cmd_timeout;
	iscsi::initiator::TransportFactory make_tp;
	iscsi::initiator::Portal portal;
	portal.host = ep.host;
	portal.port = t == Transport::Tcp ? ep.tcp_port : ep.iser_port;
	if (t == Transport::Iser) {
		tools::NamedDevice nd;
		if (!tools::open_named_device(ep.rdma_device, &nd, why))
			return nullptr;
		n->xc_.provider = nd.provider;
		n->xc_.src_ip = ep.src_ip;
		n->xc_.queue_depth = id.qd + 4;
		n->xc_.max_io = id.max_io;
		n->xc_.bounce_bytes = size_t(id.qd + 4) * id.max_io;
		Nexus *self = n.get();
		make_tp = [self] { return iser::make_transport(self->xc_); };
	}
	n->s_ = std::make_unique<iscsi::initiator::Session>(ic, make_tp);
	if (!n->s_->login(portal)) {
		*why = n->s_->error();
		return nullptr;
	}
	n->idisk_ = std::make_unique<initiator::IscsiDisk>(*n->s_);
	n->disk_ = n->idisk_.get();
	return n;
}

bool Nexus::logout()
{
	if (srp_)
		return srp_->logout();
	return s_ && s_->logout();
}

bool Nexus::failed() const
{
	if (srp_)
		return !srp_->disk().error().empty();
	return s_ && s_->state() == iscsi::initiator::SessionState::Failed;
}

uint64_t Nexus::held_back() const
{
	if (s_)
		return s_->stats().window_waits;
	if (!srp_)
		return 0;
	// stats_json() is one member, "  \"srp\": {...},\n": an object once wrapped.
	std::string j = srp_->stats_json();
	while (!j.empty() && (j.back() == '\n' || j.back() == ','))
		j.pop_back();
	const auto o = nlohmann::json::parse("{" + j + "}", nullptr, false);
	if (o.is_discarded())
		return 0;
	return o.value("srp", nlohmann::json::object()).value("zero_req_lim", uint64_t(0));
}

std::string Nexus::error() const
{
	return disk_ ? disk_->error() : std::string();
}

} // namespace stress
