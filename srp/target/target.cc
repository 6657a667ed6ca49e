// SPDX-License-Identifier: MIT
// srp/target/target.cc - the SRP target port: identifiers, logins' nexus decisions, teardown and
// the SCSI core's callbacks routed to channels (see target.h).
#include "srp/target/target.h"

#include "core/log.h"
#include "srp/target/channel.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>

namespace ulp::srpt
{

std::string port_id_str(const std::array<uint8_t, 16> &id)
{
	std::string s = "0x";
	char b[3];
	for (uint8_t v : id) {
		std::snprintf(b, sizeof(b), "%02x", v);
		s += b;
	}
	return s;
}

Target::Target(TargetConfig cfg)
    : cfg_(std::move(cfg)), reaper_("ulp-srpt-reap", cfg_.teardown_timeout)
{
	ULP_CHECK(cfg_.tpg != nullptr);
}

Target::~Target()
{
	stop(cfg_.teardown_timeout);
}

uint64_t Target::id_ext()
{
	std::lock_guard g(lock_);
	return cfg_.id_ext ? *cfg_.id_ext : default_guid_.value_or(0);
}

uint64_t Target::ioc_guid()
{
	std::lock_guard g(lock_);
	return cfg_.ioc_guid ? *cfg_.ioc_guid : default_guid_.value_or(0);
}

bool Target::has_ids()
{
	std::lock_guard g(lock_);
	return (cfg_.id_ext || default_guid_) && (cfg_.ioc_guid || default_guid_);
}

void Target::set_default_guid(uint64_t guid)
{
	std::lock_guard g(lock_);
	if (!default_guid_)
		default_guid_ = guid;
}

std::string Target::add_target_line(const std::string &addr)
{
	char b[96];
	std::snprintf(b, sizeof(b), "id_ext=%016" PRIx64 ",ioc_guid=%016" PRIx64 ",dest=", id_ext(),
	              ioc_guid());
	return b + addr;
}

TargetStats Target::stats()
{
	TargetStats s;
	{
		std::lock_guard g(lock_);
		s = stats_;
		s.channels_open = channels_.size();
	}
	io_stats_.add_to(&s);
	s.teardown_timeouts = reaper_.timeouts();
	return s;
}

void Target::count(uint64_t TargetStats::*field, uint64_t n)
{
	io_stats_.add(field, n);
}

void Target::add_channel(Channel *ch)
{
	std::lock_guard g(lock_);
	channels_.push_back(ch);
}

void Target::remove_channel(Channel *ch)
{
	std::lock_guard g(lock_);
	std::erase(channels_, ch);
	cv_.notify_all();
}

LoginDecision Target::login(const srp::LoginReq &req, const std::string &peer_ip)
{
	LoginDecision d;
	// SRP r16a 6.2: the initiator names the target port it wants; ours is id_ext ‖ ioc_guid
	// (ib_srpt checks both halves against its service GUID the same way).
	if (srp::port_id_hi(req.target_port_id) != id_ext() ||
	    srp::port_id_lo(req.target_port_id) != ioc_guid()) {
		d.reject = srp::REJ_UNABLE_ASSOCIATE_CHANNEL;
		char b[80];
		std::snprintf(
		    b, sizeof(b), "target port id %016" PRIx64 ":%016" PRIx64 " is not ours",
		    srp::port_id_hi(req.target_port_id), srp::port_id_lo(req.target_port_id));
		d.why = b;
		return d;
	}
	// ACLs name an initiator by its port id, or (RDMA/CM) by its source address, as
	// ib_srpt's do. Open access: every initiator, known by its port id.
	const std::string port = port_id_str(req.initiator_port_id);
	std::string name;
	if (cfg_.tpg->allowed(port))
		name = port;
	else if (!cfg_.tpg->open_access() && !peer_ip.empty() && cfg_.tpg->allowed(peer_ip))
		name = peer_ip;
	else {
		d.reject = srp::REJ_UNABLE_ESTABLISH_CHANNEL;
		d.why = "initiator " + port + " (" + peer_ip + ") not allowed by the ACLs";
		return d;
	}

	std::lock_guard g(lock_);
	auto key = std::make_pair(req.initiator_port_id, req.target_port_id);
	auto it = nexuses_.find(key);
	if (it != nexuses_.end() && req.multichan() == srp::MULTICHAN_MULTI) {
		// SRP r16a 6.3 table 10: MULTI adds a channel to the I_T nexus.
		SrpNexus &n = *it->second;
		if (n.channels.size() >= cfg_.max_channels) {
			d.reject = srp::REJ_CHANNEL_LIMIT_REACHED;
			d.why = "nexus of " + port + " has " + std::to_string(n.channels.size()) +
			        " channels already";
			return d;
		}
		d.nexus = it->second;
		d.rsp_flags = srp::LOGIN_RSP_MAINTAINED;
		return d;
	}
	if (it != nexuses_.end()) {
		// SINGLE (or an unknown action, taken as SINGLE): the nexus's channels end first.
		// Its commands are aborted now (lose), before the new nexus opens, as Linux's
		// reconnect expects: it logs channel 0 in SINGLE after a connection loss.
		std::shared_ptr<SrpNexus> old = it->second;
		nexuses_.erase(it);
		lose(*old);
		for (Channel *ch : old->channels)
			ch->close_async("a SINGLE login took the nexus over");
		stats_.takeovers++;
		d.rsp_flags = srp::LOGIN_RSP_TERMINATED;
		ULP_LOG(Info, Srpt, "login of {} from {}: SINGLE ends the {} channels of its nexus",
		        port, peer_ip, old->channels.size());
	} else {
		d.rsp_flags = srp::LOGIN_RSP_NO_CHAN;
	}
	auto n = std::make_shared<SrpNexus>();
	n->i_port_id = req.initiator_port_id;
	n->t_port_id = req.target_port_id;
	n->initiator = name;
	n->scsi = cfg_.tpg->open_session(*this, name, port);
	if (!n->scsi) {
		d.reject = srp::REJ_UNABLE_ESTABLISH_CHANNEL;
		d.why = "initiator " + port + " refused by the target port group";
		return d;
	}
	n->scsi->fabric_priv = n.get();
	stats_.nexuses_open++;
	nexuses_[key] = n;
	d.nexus = std::move(n);
	return d;
}

void Target::attach(const std::shared_ptr<SrpNexus> &n, Channel *ch)
{
	std::lock_guard g(lock_);
	n->channels.push_back(ch);
	stats_.logins++;
}

void Target::abandon(const std::shared_ptr<SrpNexus> &n)
{
	// A login decided but never accepted: a nexus it opened and nobody joined closes.
	std::unique_lock g(lock_);
	stats_.login_rejects++;
	if (!n || !n->channels.empty() || n->lost)
		return;
	auto it = nexuses_.find(std::make_pair(n->i_port_id, n->t_port_id));
	if (it != nexuses_.end() && it->second == n)
		nexuses_.erase(it);
	lose(*n);
	g.unlock();
	reaper_.close(n->scsi, [this, n] {
		std::lock_guard g2(lock_);
		stats_.nexuses_open--;
	});
}

void Target::lose(SrpNexus &n)
{
	if (n.lost)
		return;
	n.lost = true;
	if (n.scsi)
		cfg_.tpg->session_lost(n.scsi);
}

bool Target::detach(const std::shared_ptr<SrpNexus> &n, Channel *ch)
{
	std::unique_lock g(lock_);
	std::erase(n->channels, ch);
	if (!n->channels.empty())
		return false; // the other channels carry the nexus on
	auto it = nexuses_.find(std::make_pair(n->i_port_id, n->t_port_id));
	if (it != nexuses_.end() && it->second == n)
		nexuses_.erase(it);
	lose(*n);
	cv_.notify_all(); // logout_nexus waits for the nexus to leave the table
	g.unlock();
	// The nexus's commands are aborted; the reaper waits for them (bounded, logged) and
	// frees the scsi::Nexus, then tells the channel, which is freed only after.
	reaper_.close(n->scsi, [this, n, ch] {
		{
			std::lock_guard g2(lock_);
			stats_.nexuses_open--;
		}
		ch->post(ChEvent::ReapDone, {});
	});
	return true;
}

bool Target::stop(std::chrono::milliseconds timeout)
{
	const auto deadline = std::chrono::steady_clock::now() + timeout;
	std::unique_lock g(lock_);
	for (Channel *ch : channels_)
		ch->close_async("the target is stopping");
	if (!channels_.empty())
		ULP_LOG(Info, Srpt, "stop: closing {} channels", channels_.size());
	const bool gone = cv_.wait_until(g, deadline, [&] { return channels_.empty(); });
	if (!gone)
		ULP_LOG(Warn, Srpt, "stop: {} channels still open after {} ms", channels_.size(),
		        timeout.count());
	g.unlock();
	return reaper_.wait_idle(deadline) && gone;
}

std::vector<NexusInfo> Target::nexus_info()
{
	std::lock_guard g(lock_);
	std::vector<NexusInfo> v;
	for (auto &[key, n] : nexuses_) {
		NexusInfo i;
		i.initiator_port = port_id_str(n->i_port_id);
		i.target_port = port_id_str(n->t_port_id);
		i.initiator = n->initiator;
		for (Channel *ch : n->channels) {
			i.channels.push_back(ch->peer());
			const Channel::Gauges &g = ch->gauges();
			i.chans.push_back({ch->peer(), ch->credits(),
			                   g.req_lim.load(std::memory_order_relaxed),
			                   g.ioctxs_busy.load(std::memory_order_relaxed)});
		}
		i.cmds_in_flight = n->scsi && !n->lost ? n->scsi->cmd_count() : 0;
		if (n->scsi && !n->lost)
			i.io = n->scsi->stats_.read();
		v.push_back(std::move(i));
	}
	return v;
}

int Target::logout_nexus(const std::string &i_port, std::chrono::milliseconds timeout)
{
	std::unique_lock g(lock_);
	auto find = [&]() -> std::shared_ptr<SrpNexus> {
		for (auto &[key, n] : nexuses_)
			if (port_id_str(n->i_port_id) == i_port)
				return n;
		return nullptr;
	};
	std::shared_ptr<SrpNexus> n = find();
	if (!n)
		return -ENOENT;
	ULP_LOG(Info, Srpt, "nexus {}: logout requested ({} channels)", i_port, n->channels.size());
	for (Channel *ch : n->channels)
		ch->logout_async();
	// Gone from the table once its last channel left.
	if (cv_.wait_for(g, timeout, [&] { return find() != n; }))
		return 0;
	return -ETIMEDOUT;
}

int Target::drop_nexus(const std::string &i_port)
{
	std::lock_guard g(lock_);
	for (auto &[key, n] : nexuses_)
		if (port_id_str(n->i_port_id) == i_port) {
			ULP_LOG(Info, Srpt, "nexus {}: dropped by the administrator", i_port);
			for (Channel *ch : n->channels)
				ch->close_async("dropped by the administrator");
			return 0;
		}
	return -ENOENT;
}

// ---- scsi::Fabric: to the command's channel ---------------------------------------------

void Target::route(scsi::Cmd *cmd, scsi::FabricEvent ev)
{
	Ioctx *x = container_of(cmd, &Ioctx::cmd);
	x->ch->post(ChEvent(ev), {.x = x});
}

void Target::route(scsi::Tmr *tmr)
{
	Ioctx *x = container_of(tmr, &Ioctx::tmr);
	x->ch->post(ChEvent::TmRsp, {.x = x});
}

} // namespace ulp::srpt
