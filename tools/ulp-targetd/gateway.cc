// SPDX-License-Identifier: MIT
// tools/ulp-targetd/gateway.cc - one of several gateways on one Ceph cluster (gateway.h).
#include "tools/ulp-targetd/gateway.h"

#include "core/log.h"
#include "core/thread_name.h"
#include "ha/records.h"
#include "scsi/bs_internal.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>

namespace targetd
{

namespace scsi = ulp::scsi;
namespace ha = ulp::ha;
using namespace std::chrono_literals;

namespace
{

// The map's object in the gateway pool.
std::string map_oid(const GatewayCfg &c)
{
	return "ulp.cluster." + c.cluster;
}

scsi::AluaState alua_of(ha::PortAccess a)
{
	switch (a) {
	case ha::PortAccess::ActiveOptimized:
		return scsi::AluaState::ActiveOptimized;
	case ha::PortAccess::Standby:
		return scsi::AluaState::Standby;
	case ha::PortAccess::Transitioning:
		return scsi::AluaState::Transitioning;
	case ha::PortAccess::Unavailable:
		break;
	}
	return scsi::AluaState::Unavailable;
}

int64_t ns_of(Gateway::Clock::time_point t)
{
	return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

// Whether a LU's groups are already cfg's (ids, states, ports, in order) and its TPGS.
bool same_alua(scsi::LogicalUnit &lu, const scsi::AluaConfig &cfg)
{
	if (lu.alua_.tpgs() != cfg.tpgs ||
	    lu.alua_.implicit_transition_secs() != cfg.implicit_transition_secs)
		return false;
	const std::vector<scsi::AluaGroup> now = lu.alua_.groups();
	if (now.size() != cfg.groups.size())
		return false;
	for (size_t i = 0; i < now.size(); i++)
		if (now[i].id != cfg.groups[i].id || now[i].state != cfg.groups[i].state ||
		    now[i].rtpis != cfg.groups[i].rtpis)
			return false;
	return true;
}

} // namespace

std::unique_ptr<Gateway> Gateway::open(const GatewayCfg &cfg, const Ports &ports, std::string *why)
{
	scsi::RadosConfig rc;
	rc.conf = cfg.conf;
	rc.client = cfg.client;
	rc.keyring = cfg.keyring;
	rc.group = "ulp.gateway"; // the map's own connection, not a group's
	rc.timeout_s = std::max<uint32_t>(cfg.lease_s, 5);
	int err = 0;
	std::string w;
	auto client = scsi::rados_client_get(rc, &err, &w);
	if (!client) {
		*why = "gateway " + cfg.name + ": " + w;
		return nullptr;
	}
	auto map = ha::ClusterMap::open(client, cfg.pool, cfg.nspace, map_oid(cfg), &err, &w);
	if (!map) {
		*why = "gateway " + cfg.name + ": cluster map: " + w;
		return nullptr;
	}
	std::unique_ptr<Gateway> g(new Gateway(cfg, std::move(client), std::move(map)));
	if (g->join(ports, why) < 0)
		return nullptr;
	return g;
}

Gateway::Gateway(GatewayCfg cfg, std::shared_ptr<scsi::RadosClient> client,
                 std::unique_ptr<ha::ClusterMap> map)
    : cfg_(std::move(cfg)), client_(std::move(client)), map_(std::move(map))
{
}

Gateway::~Gateway()
{
	stop(false);
	// Before the LUs go (the daemon's order). A fenced gateway's client can change nothing
	// more in the cluster: its records in the reservation objects are left to the others.
	std::lock_guard om(owner_mu_);
	std::lock_guard g(mu_);
	if (!fenced_)
		return; // each PrCluster removes its record as it goes
	for (auto &grp : groups_)
		for (auto &[lu, prc] : grp->pr)
			prc->abandon();
}

// Our gateway record (the group id: ours from an earlier run, else the lowest free) and
// our port records, in one compare-and-set; refused when another gateway has one of our
// rtpis in the same target (SPC-4 4.3.4: relative port ids are unique in a target device,
// and the gateways' same-named targets are one).
int Gateway::join(const Ports &ports, std::string *why)
{
	std::string clash;
	uint16_t id = 0;
	uint64_t version = 0;
	const int r = map_->modify(
	    [&](const ha::ClusterMapView &v, ha::ClusterMapChange *c) {
		    clash.clear();
		    std::set<uint16_t> taken;
		    id = 0;
		    for (const auto &[k, val] : v.records) {
			    ha::GatewayRecord gr;
			    if (k.rfind("gw/", 0) != 0 || !ha::gateway_record_decode(val, &gr))
				    continue;
			    if (k == ha::gateway_key(cfg_.name))
				    id = gr.id;
			    else
				    taken.insert(gr.id);
		    }
		    for (const auto &[k, val] : v.records) {
			    std::string target, gw;
			    ha::PortRecord pr;
			    if (!ha::port_key_split(k, &target, &gw) || gw == cfg_.name ||
			        !ha::port_record_decode(val, &pr))
				    continue;
			    auto mine = ports.find(target);
			    if (mine == ports.end())
				    continue;
			    for (uint16_t x : mine->second)
				    if (std::find(pr.rtpis.begin(), pr.rtpis.end(), x) !=
				        pr.rtpis.end())
					    clash = "rtpi " + std::to_string(x) + " of target " +
					            target + " is gateway " + gw + "'s";
		    }
		    if (!clash.empty())
			    return false;
		    if (id == 0 || taken.count(id)) {
			    id = 1;
			    while (taken.count(id))
				    id++;
		    }
		    c->set[ha::gateway_key(cfg_.name)] = ha::gateway_record_encode({id});
		    for (const auto &[target, rtpis] : ports)
			    c->set[ha::port_key(target, cfg_.name)] =
			        ha::port_record_encode({rtpis});
		    // Targets we no longer have.
		    for (const auto &[k, val] : v.records) {
			    std::string target, gw;
			    if (ha::port_key_split(k, &target, &gw) && gw == cfg_.name &&
			        !ports.count(target))
				    c->erase.push_back(k);
		    }
		    return true;
	    },
	    &version);
	if (!clash.empty()) {
		*why = "gateway " + cfg_.name + ": " + clash +
		       " (give this gateway's portal groups, or srp.rtpi, other rtpis)";
		return -EEXIST;
	}
	if (r < 0) {
		*why = "gateway " + cfg_.name + ": joining the cluster map " + map_->oid() + ": " +
		       scsi::rados_strerror(r);
		return r;
	}
	id_ = id;
	{
		std::lock_guard g(mu_);
		ports_ = ports;
	}
	refresh();
	ULP_LOG(Info, Ha, "gateway {}: joined cluster map {} (version {}) as target port group {}",
	        cfg_.name, map_->oid(), version, id_);
	return 0;
}

Gateway::Group *Gateway::find_group(const std::string &name)
{
	for (auto &g : groups_)
		if (g->name == name)
			return g.get();
	return nullptr;
}

int Gateway::add_lu(const std::string &target, scsi::LogicalUnit *lu, const scsi::RadosConfig &rcfg,
                    std::string *why)
{
	const std::string gname = rcfg.group.empty() ? "default" : rcfg.group;
	std::unique_lock om(owner_mu_);
	std::unique_lock g(mu_);
	Group *grp = find_group(gname);
	if (!grp) {
		g.unlock(); // opening the lease is a RADOS call
		int err = 0;
		std::string w;
		auto client = scsi::rados_client_get(rcfg, &err, &w);
		if (!client) {
			*why = "group " + gname + ": " + w;
			return err;
		}
		auto map =
		    ha::ClusterMap::open(client, cfg_.pool, cfg_.nspace, map_oid(cfg_), &err, &w);
		std::unique_ptr<ha::Lease> lease;
		if (map)
			lease = ha::Lease::open(client, cfg_.pool, cfg_.nspace,
			                        "ulp.lease." + gname, cfg_.name,
			                        std::chrono::seconds(cfg_.lease_s), &err, &w);
		if (!lease) {
			*why = "group " + gname + ": " + w;
			return err ? err : -EINVAL;
		}
		auto fencer =
		    ha::Lease::open(client, cfg_.pool, cfg_.nspace, "ulp.lease." + gname, cfg_.name,
		                    std::chrono::seconds(cfg_.lease_s), &err, &w);
		if (!fencer) {
			*why = "group " + gname + ": " + w;
			return err ? err : -EINVAL;
		}
		auto ng = std::make_unique<Group>();
		ng->name = gname;
		ng->client = client;
		ng->fencer = std::move(fencer);
		ha::GroupOwnerConfig oc;
		oc.gateway = cfg_.name;
		oc.group = gname;
		oc.lease_oid = "ulp.lease." + gname;
		oc.lease = std::chrono::seconds(cfg_.lease_s);
		oc.margin = std::chrono::milliseconds(cfg_.lease_s * 1000 / 4);
		Group *raw = ng.get();
		// The images' exclusive locks: taken once the previous owner is fenced, before the
		// ports report active/optimized (GroupOwner: Fencing, then Active).
		oc.on_active = [this, raw] {
			std::vector<scsi::LogicalUnit *> lus;
			{
				std::lock_guard l(mu_);
				lus = raw->lus;
			}
			for (scsi::LogicalUnit *u : lus)
				if (int r = scsi::rbd_bs_lock(u->bs(), true); r < 0) {
					ULP_LOG(Error, Ha,
					        "group {}: LU {}: taking the image's lock: {}",
					        raw->name, u->name(), scsi::rados_strerror(r));
					for (scsi::LogicalUnit *v : lus)
						(void)scsi::rbd_bs_lock(v->bs(), false);
					return r;
				}
			return 0;
		};
		oc.on_release = [this, raw] {
			std::vector<scsi::LogicalUnit *> lus;
			{
				std::lock_guard l(mu_);
				lus = raw->lus;
			}
			for (scsi::LogicalUnit *u : lus)
				if (int r = scsi::rbd_bs_lock(u->bs(), false); r < 0)
					ULP_LOG(Warn, Ha,
					        "group {}: LU {}: releasing the image's lock: {}",
					        raw->name, u->name(), scsi::rados_strerror(r));
		};
		ng->own = std::make_unique<ha::GroupOwner>(std::move(oc), std::move(map),
		                                           std::move(lease));
		g.lock();
		groups_.push_back(std::move(ng));
		grp = raw;
		kick_ = true;
		cv_.notify_all();
	}
	std::string w;
	const bool owned = grp->state.load() == ha::OwnerState::Active;
	if (owned) {
		// A LU added to a group we own: its image's lock taken now (on_active took the
		// others'), before its ports say active/optimized. The owner does not tick
		// meanwhile (owner_mu_).
		g.unlock();
		if (int r = scsi::rbd_bs_lock(lu->bs(), true); r < 0) {
			*why = "group " + gname +
			       ": taking the image's lock: " + scsi::rados_strerror(r);
			return r;
		}
		g.lock();
	}
	grp->lus.push_back(lu);
	grp->target[lu] = target;
	const scsi::AluaConfig ac = want(target, *grp);
	int r = lu->alua_.configure(ac, &w) != 0 ? -EINVAL : 0;
	if (r < 0)
		w = "alua: " + w;
	g.unlock();
	// Its reservations, shared by every gateway that serves the image (SPC-4 5.13 across
	// gateways, docs/ha.md): read now, before the LU is exported.
	if (r == 0) {
		ha::PrClusterConfig pc;
		pc.pool = cfg_.pool;
		pc.nspace = cfg_.nspace;
		pc.gateway = cfg_.name;
		Group *raw = grp;
		// A gateway that does not answer a change in time is fenced before the change
		// counts: it can then write nothing the reservation forbids.
		pc.on_peer_timeout = [raw](const ha::PrPeer &p) {
			ha::LeaseHolder h;
			h.client = "client." + std::to_string(p.gid);
			h.cookie = p.gateway;
			h.addr = p.addr;
			return raw->fencer->fence(h, 3600);
		};
		int err = 0;
		auto prc = ha::PrCluster::attach(*lu, grp->client, std::move(pc), &err, &w);
		if (prc)
			grp->pr[lu] = std::move(prc);
		else
			r = err ? err : -EIO, w = "reservations: " + w;
	}
	if (r < 0) {
		g.lock();
		std::erase(grp->lus, lu);
		grp->target.erase(lu);
		g.unlock();
		if (owned)
			(void)scsi::rbd_bs_lock(lu->bs(), false);
		*why = w;
		return r;
	}
	return 0;
}

void Gateway::remove_lu(const scsi::LogicalUnit *lu, bool exported)
{
	std::lock_guard om(owner_mu_);
	std::unique_ptr<ha::PrCluster> pr;
	{
		std::lock_guard g(mu_);
		for (auto &grp : groups_) {
			std::erase(grp->lus, lu);
			grp->target.erase(lu);
			if (auto it = grp->pr.find(lu); it != grp->pr.end()) {
				pr = std::move(it->second);
				grp->pr.erase(it);
			}
		}
	}
	if (exported && pr)
		(void)pr.release(); // commands may still use it, as the LU left allocated
	// else: its threads end and its record goes here (not under mu_: RADOS calls)
}

void Gateway::set_ports(const Ports &ports)
{
	std::lock_guard g(mu_);
	if (ports == ports_)
		return;
	ports_ = ports;
	ports_dirty_ = true;
	kick_ = true;
	cv_.notify_all();
}

scsi::AluaState Gateway::local_state(const Group &g) const
{
	if (g.guarded.load())
		return scsi::AluaState::Transitioning;
	return alua_of(ha::port_access(g.state.load()));
}

// One group per gateway that has ports in target, in group id order: ours in our owner's
// state, the owner's (as its record says) active/optimized, the rest standby.
scsi::AluaConfig Gateway::want(const std::string &target, const Group &g)
{
	scsi::AluaConfig ac;
	ac.tpgs = scsi::TPGS_IMPLICIT;
	// How long a move takes at most: the lease running out, a tick, the fencing.
	ac.implicit_transition_secs = uint8_t(std::min<uint32_t>(cfg_.lease_s * 2 + 5, 255));
	ha::OwnerRecord owner;
	if (auto it = view_.records.find(ha::owner_key(g.name)); it != view_.records.end())
		(void)ha::owner_record_decode(it->second, &owner);
	std::map<uint16_t, scsi::AluaGroup> by_id;
	for (const auto &[k, val] : view_.records) {
		std::string t, gw;
		ha::PortRecord pr;
		if (!ha::port_key_split(k, &t, &gw) || t != target || gw == cfg_.name ||
		    !ha::port_record_decode(val, &pr))
			continue;
		ha::GatewayRecord gr;
		auto gi = view_.records.find(ha::gateway_key(gw));
		if (gi == view_.records.end() || !ha::gateway_record_decode(gi->second, &gr) ||
		    gr.id == id_)
			continue; // a damaged record, or a stale one with our id: left out
		scsi::AluaGroup a;
		a.id = gr.id;
		a.state = owner.gw == gw && !owner.released ? scsi::AluaState::ActiveOptimized
		                                            : scsi::AluaState::Standby;
		a.rtpis = pr.rtpis;
		by_id[a.id] = std::move(a);
	}
	if (auto mine = ports_.find(target); mine != ports_.end() && !mine->second.empty()) {
		scsi::AluaGroup a;
		a.id = id_;
		a.state = local_state(g);
		a.rtpis = mine->second;
		by_id[a.id] = std::move(a);
	}
	// A port listed by two gateways (a stale record): the first group keeps it.
	std::set<uint16_t> seen;
	for (auto &[id, a] : by_id) {
		std::vector<uint16_t> keep;
		for (uint16_t r : a.rtpis)
			if (seen.insert(r).second)
				keep.push_back(r);
		a.rtpis = std::move(keep);
		if (ac.groups.size() < scsi::Alua::kMaxGroups)
			ac.groups.push_back(std::move(a));
	}
	return ac;
}

void Gateway::refresh()
{
	ha::ClusterMapView v;
	if (int r = map_->read(&v); r < 0) {
		ULP_LOG_RATELIMITED(Warn, Ha, "gateway {}: reading the cluster map: {}", cfg_.name,
		                    scsi::rados_strerror(r));
		return;
	}
	std::lock_guard g(mu_);
	if (v.version >= view_.version)
		view_ = std::move(v);
}

void Gateway::apply()
{
	std::lock_guard g(mu_);
	for (auto &grp : groups_)
		for (scsi::LogicalUnit *lu : grp->lus) {
			const scsi::AluaConfig ac = want(grp->target[lu], *grp);
			if (same_alua(*lu, ac))
				continue;
			std::string w;
			if (lu->alua_.configure(ac, &w) != 0)
				ULP_LOG_RATELIMITED(Error, Ha, "gateway {}: LU {}: alua: {}",
				                    cfg_.name, lu->name(), w);
		}
}

void Gateway::set_local(Group &grp, scsi::AluaState s)
{
	for (scsi::LogicalUnit *lu : grp.lus)
		(void)lu->alua_.set_state(id_, s);
}

void Gateway::start(std::function<void()> fenced)
{
	on_fenced_ = std::move(fenced);
	(void)map_->watch([this](uint64_t) {
		std::lock_guard g(mu_);
		kick_ = true;
		cv_.notify_all();
	});
	thread_ = std::thread([this] {
		ulp::set_thread_name("ulp-gateway");
		run();
	});
	guard_ = std::thread([this] {
		ulp::set_thread_name("ulp-gw-guard");
		guard();
	});
}

void Gateway::run()
{
	const auto tick = std::chrono::milliseconds(cfg_.lease_s * 1000 / 3);
	for (;;) {
		{
			std::unique_lock g(mu_);
			cv_.wait_for(g, tick, [&] { return kick_ || stopping_; });
			if (stopping_)
				return;
			kick_ = false;
		}
		(void)map_->check_watch();
		Ports ports;
		bool write_ports = false;
		{
			std::lock_guard g(mu_);
			std::swap(write_ports, ports_dirty_);
			ports = ports_;
		}
		if (write_ports) {
			std::string w;
			if (join(ports, &w) < 0)
				ULP_LOG(Error, Ha, "{}", w);
		}
		bool fenced = false;
		{
			std::lock_guard om(owner_mu_);
			std::vector<Group *> gs;
			{
				std::lock_guard g(mu_);
				for (auto &grp : groups_)
					gs.push_back(grp.get());
			}
			for (Group *grp : gs) {
				// The reservation objects' watches (again if one broke) and this
				// gateway's records in them.
				if (grp->state.load() != ha::OwnerState::Fenced)
					for (auto &[lu, prc] : grp->pr)
						(void)prc->check_watch();
				grp->own->tick();
				grp->valid_until_ns.store(ns_of(grp->own->valid_until()));
				grp->state.store(grp->own->state());
				if (grp->own->state() != ha::OwnerState::Expiring)
					grp->guarded.store(false);
				fenced = fenced || grp->own->state() == ha::OwnerState::Fenced;
			}
		}
		refresh();
		apply();
		if (fenced) {
			bool first = false;
			{
				std::lock_guard g(mu_);
				first = !fenced_;
				fenced_ = true;
			}
			if (first) {
				ULP_LOG(
				    Error, Ha,
				    "gateway {}: a group was fenced (its lease lost; this Ceph "
				    "client "
				    "may be blocklisted): its ports report unavailable; ending so "
				    "that a new client joins again (exit {})",
				    cfg_.name, kFencedExit);
				if (on_fenced_)
					on_fenced_();
			}
		}
	}
}

// Independent of RADOS: an owner whose lease is within its margin of the end while a tick
// is still busy goes transitioning (GroupOwner does the same once its tick returns).
void Gateway::guard()
{
	const auto margin = std::chrono::milliseconds(cfg_.lease_s * 1000 / 4);
	std::unique_lock g(mu_);
	while (!stopping_) {
		cv_.wait_for(g, 200ms, [&] { return stopping_; });
		const int64_t now = ns_of(Clock::now() + margin);
		for (auto &grp : groups_) {
			if (grp->state.load() != ha::OwnerState::Active || grp->guarded.load() ||
			    grp->valid_until_ns.load() > now)
				continue;
			grp->guarded.store(true);
			ULP_LOG(Warn, Ha,
			        "gateway {}: group {}: the lease ends in under {} ms and is not "
			        "renewed "
			        "yet: its ports report transitioning",
			        cfg_.name, grp->name, margin.count());
			set_local(*grp, scsi::AluaState::Transitioning);
		}
	}
}

std::vector<std::string> Gateway::drain(std::chrono::seconds hold_off)
{
	if (hold_off.count() == 0)
		hold_off = std::chrono::seconds(cfg_.hold_off_s);
	std::vector<std::string> out;
	std::lock_guard om(owner_mu_);
	std::vector<Group *> gs;
	{
		std::lock_guard g(mu_);
		for (auto &grp : groups_)
			gs.push_back(grp.get());
	}
	for (Group *grp : gs) {
		if (grp->own->state() != ha::OwnerState::Active) {
			// Not ours now: only keep from taking it for a while.
			continue;
		}
		{
			// No new command on the group here while its locks go.
			std::lock_guard g(mu_);
			set_local(*grp, scsi::AluaState::Transitioning);
		}
		ULP_LOG(Info, Ha, "gateway {}: draining group {} (no acquiring for {} s)",
		        cfg_.name, grp->name, hold_off.count());
		if (grp->own->drain(hold_off) == 0)
			out.push_back(grp->name);
		grp->state.store(grp->own->state());
	}
	refresh();
	apply();
	return out;
}

void Gateway::stop(bool drain_groups)
{
	bool fenced = false;
	{
		std::lock_guard g(mu_);
		if (stopping_ && !thread_.joinable())
			return;
		stopping_ = true;
		fenced = fenced_;
		cv_.notify_all();
	}
	if (thread_.joinable())
		thread_.join();
	if (guard_.joinable())
		guard_.join();
	if (drain_groups && !fenced)
		(void)drain(std::chrono::seconds(cfg_.hold_off_s));
	map_->unwatch();
}

ulp::admin::json Gateway::show()
{
	using ulp::admin::json;
	std::lock_guard g(mu_);
	json out = {{"name", cfg_.name},
	            {"id", id_},
	            {"map", map_->oid()},
	            {"version", view_.version},
	            {"lease_s", cfg_.lease_s}};
	json groups = json::array();
	const int64_t now = ns_of(Clock::now());
	for (auto &grp : groups_) {
		ha::OwnerRecord owner;
		if (auto it = view_.records.find(ha::owner_key(grp->name));
		    it != view_.records.end())
			(void)ha::owner_record_decode(it->second, &owner);
		const ha::OwnerState st = grp->state.load();
		const int64_t left = grp->valid_until_ns.load() - now;
		groups.push_back({{"group", grp->name},
		                  {"state", ha::owner_state_str(st)},
		                  {"ports", scsi::alua_state_str(local_state(*grp))},
		                  {"owner", owner.gw},
		                  {"owner_released", owner.released},
		                  {"epoch", owner.epoch},
		                  {"lease_left_ms", left > 0 ? left / 1000000 : 0},
		                  {"luns", grp->lus.size()}});
	}
	out["groups"] = std::move(groups);
	json gws = json::array();
	for (const auto &[k, val] : view_.records) {
		ha::GatewayRecord gr;
		if (k.rfind("gw/", 0) == 0 && ha::gateway_record_decode(val, &gr))
			gws.push_back({{"name", k.substr(3)}, {"id", gr.id}});
	}
	out["gateways"] = std::move(gws);
	return out;
}

} // namespace targetd
