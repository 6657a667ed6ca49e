// SPDX-License-Identifier: MIT
// tools/ulp-targetd/reload.cc - SIGHUP (and `ulpctl reload`): re-read the configuration file
// and apply the difference through the operations the admin methods use.
//
// In three steps, so that a file that cannot be applied changes nothing:
//   1. read and check it whole (build_config: the file and the command line again); an
//      error names file:line:column and ends the reload;
//   2. make what is new without publishing it: open every new LUN's backstore, bind every
//      new portal; a failure closes what was made and ends the reload;
//   3. apply: portals removed, targets removed, targets added, then per target its
//      settings, ACLs and LUNs (removed, re-created, resized, added), its portal groups
//      and ALUA (reload_groups.cc), then the SRP ACLs.
// Settings that only a restart can change (workers, iSCSI negotiation, iSER and SRP
// identities and the SRP port's rtpi, the admin socket) are left as they run, with a log line
// saying so.
#include "tools/ulp-targetd/daemon.h"

#include <algorithm>
#include <cerrno>

namespace targetd
{

using namespace ulp;
using admin::MethodError;

namespace
{

bool same_rbd(const scsi::RbdConfig &a, const scsi::RbdConfig &b)
{
	return a.pool == b.pool && a.nspace == b.nspace && a.image == b.image && a.conf == b.conf &&
	       a.client == b.client && a.keyring == b.keyring && a.group == b.group &&
	       a.create == b.create && a.timeout_s == b.timeout_s && a.atomic_unit == b.atomic_unit;
}

// A LUN whose storage, the way it is opened or its identity changed is made again (an
// initiator meets a new device: its sessions hear REPORTED LUNS DATA HAS CHANGED twice);
// a size alone is resized.
bool same_lun_but_size(const LunCfg &a, const LunCfg &b)
{
	return a.id == b.id && a.bs.kind == b.bs.kind && a.bs.path == b.bs.path &&
	       same_rbd(a.bs.rbd, b.bs.rbd) && a.bs.block_size == b.bs.block_size &&
	       a.physical_block_size == b.physical_block_size && a.read_only == b.read_only &&
	       a.removable == b.removable && a.tp_soft_threshold == b.tp_soft_threshold &&
	       a.bs.direct == b.bs.direct && a.bs.write_cache == b.bs.write_cache &&
	       a.bs.queue_depth == b.bs.queue_depth;
}

const LunCfg *find_lun(const TargetCfg &t, uint64_t lun)
{
	for (const LunCfg &l : t.luns)
		if (l.lun == lun)
			return &l;
	return nullptr;
}

const TargetCfg *find_cfg(const Config &c, const std::string &name)
{
	for (const TargetCfg &t : c.targets)
		if (t.name == name)
			return &t;
	return nullptr;
}

bool same_chap(const std::optional<iscsi::ChapSecret> &a, const std::optional<iscsi::ChapSecret> &b)
{
	return a.has_value() == b.has_value() &&
	       (!a || (a->user == b->user && a->secret == b->secret));
}

bool same_acl(const AclCfg *a, const AclCfg *b)
{
	static const AclCfg none;
	a = a ? a : &none;
	b = b ? b : &none;
	return a->luns == b->luns && same_chap(a->chap, b->chap) &&
	       same_chap(a->mutual_chap, b->mutual_chap);
}

const AclCfg *find_acl(const std::map<std::string, AclCfg> &m, const std::string &name)
{
	auto it = m.find(name);
	return it == m.end() ? nullptr : &it->second;
}

// The ACL entries' LUN maps of tpg made what want says (after the ACLs and LUNs are):
// sessions of an initiator whose map changed see the new one, told so (Tpg::replace_acl).
// The initiators whose entry changed, for the log.
std::vector<std::string> apply_acl_maps(scsi::Tpg *tpg, const std::vector<std::string> &acls,
                                        const std::map<std::string, AclCfg> &have,
                                        const std::map<std::string, AclCfg> &want)
{
	std::vector<std::string> changed;
	for (const std::string &name : acls) {
		const AclCfg *a = find_acl(have, name), *b = find_acl(want, name);
		if (same_acl(a, b))
			continue;
		changed.push_back(name);
		if (tpg && (a ? a->luns : AclCfg{}.luns) != (b ? b->luns : AclCfg{}.luns))
			tpg->replace_acl(node_acl(name, b));
	}
	return changed;
}

} // namespace

json Daemon::reload_locked(const std::string &who)
{
	reloading_ = true;
	struct Done {
		bool &f;
		~Done() { f = false; }
	} done{reloading_};
	const std::string file = cfg_.source;
	ULP_LOG(Info, Tool, "reload: reading {} ({})", file, who);
	Config next;
	std::string why;
	if (!build_config(flags_, &next, &why)) {
		ULP_LOG(Error, Tool, "reload: {}; nothing changed", why);
		throw MethodError{-EINVAL, why + "; nothing changed"};
	}
	json changes = json::array();
	auto note = [&](const std::string &s) {
		ULP_LOG(Info, Tool, "reload: {}", s);
		changes.push_back(s);
	};

	// Settings a running daemon keeps.
	auto keep = [&](bool differs, const char *what) {
		if (differs)
			note(std::string(what) + " changed in " + file +
			     ": takes effect at the next start");
	};
	const auto &a = cfg_.prefs, &b = next.prefs;
	keep(next.workers != cfg_.workers, "workers");
	keep(next.worker_cpus != cfg_.worker_cpus, "worker_cpus");
	keep(next.state_dir != cfg_.state_dir, "state_dir");
	keep(a.max_recv_dsl != b.max_recv_dsl || a.max_burst_length != b.max_burst_length ||
	         a.first_burst_length != b.first_burst_length ||
	         a.immediate_data != b.immediate_data || a.initial_r2t != b.initial_r2t ||
	         a.max_outstanding_r2t != b.max_outstanding_r2t ||
	         a.header_digests != b.header_digests || next.cmd_window != cfg_.cmd_window ||
	         next.nop_interval != cfg_.nop_interval || next.nop_timeout != cfg_.nop_timeout ||
	         next.discovery != cfg_.discovery ||
	         !same_chap(next.discovery_chap, cfg_.discovery_chap) ||
	         !same_chap(next.discovery_mutual_chap, cfg_.discovery_mutual_chap),
	     "[iscsi]");
	keep(next.iser.recv_dsl != cfg_.iser.recv_dsl ||
	         next.iser.heap_bytes != cfg_.iser.heap_bytes ||
	         next.iser.send_ring != cfg_.iser.send_ring,
	     "[iser]");
	keep(next.rdma_device != cfg_.rdma_device, "rdma_device");
	keep(next.gateway != cfg_.gateway, "[gateway]");
	// The SRP port is made at start with its rtpi; portal groups and [target.alua] are
	// applied below (reload_groups.cc).
	keep(next.srp.rtpi != cfg_.srp.rtpi, "srp.rtpi");
	keep(next.srp.id_ext != cfg_.srp.id_ext || next.srp.ioc_guid != cfg_.srp.ioc_guid ||
	         next.srp.srq != cfg_.srp.srq || next.srp.target != cfg_.srp.target,
	     "[srp] id_ext, ioc_guid, srq or target");
	keep(next.srp.rq_size != cfg_.srp.rq_size || next.srp.srq_size != cfg_.srp.srq_size ||
	         next.srp.sq_size != cfg_.srp.sq_size ||
	         next.srp.max_it_iu_len != cfg_.srp.max_it_iu_len ||
	         next.srp.immediate_data != cfg_.srp.immediate_data ||
	         next.srp.max_channels != cfg_.srp.max_channels ||
	         next.srp.heap_bytes != cfg_.srp.heap_bytes,
	     "[srp] sizes");
	keep(next.admin_socket != cfg_.admin_socket || next.admin_group != cfg_.admin_group ||
	         next.admin_tcp != cfg_.admin_tcp || next.metrics_http != cfg_.metrics_http,
	     "admin_socket, admin_group, admin_tcp or metrics_http");

	// What the running targets' portal groups and ALUA cannot become.
	try {
		groups_check(next);
	} catch (const MethodError &e) {
		ULP_LOG(Error, Tool, "reload: {}: {}; nothing changed", file, e.message);
		throw MethodError{e.code, file + ": " + e.message + "; nothing changed"};
	}

	// ---- 2. Make what is new, unpublished ----------------------------------------------
	std::map<std::string, std::unique_ptr<TargetRt>> new_targets;
	std::map<std::pair<std::string, uint64_t>, std::unique_ptr<scsi::LogicalUnit>> new_lus;
	try {
		for (const TargetCfg &t : next.targets) {
			TargetRt *rt = find_target(t.name);
			if (!rt) {
				new_targets[t.name] = make_target(t); // nothing published yet
				continue;
			}
			for (const LunCfg &l : t.luns) {
				const LunCfg *old = find_lun(rt->cfg, l.lun);
				if (!old || !same_lun_but_size(*old, l))
					new_lus[{t.name, l.lun}] = make_lu(t, l);
			}
		}
	} catch (const MethodError &e) {
		// What was opened closes as the maps go.
		ULP_LOG(Error, Tool, "reload: {}: {}; nothing changed", file, e.message);
		throw MethodError{e.code, file + ": " + e.message + "; nothing changed"};
	}
	struct NewPortal {
		std::string transport;
		Portal p;
	};
	std::vector<NewPortal> add_portals, del_portals;
	auto diff_portals = [&](const char *tr, const std::vector<Portal> &now,
	                        const std::vector<Portal> &want) {
		auto has = [](const std::vector<Portal> &v, const Portal &p) {
			return std::any_of(v.begin(), v.end(), [&](const Portal &x) {
				return portal_str(x) == portal_str(p);
			});
		};
		for (const Portal &p : want) {
			Portal q = p;
			if (std::string(tr) != "tcp" && cfg_.rdma_device.empty() &&
			    (q.host.empty() || q.host == "0.0.0.0"))
				q.host =
				    "127.0.0.1"; // as open_portal settles a soft device's address
			if (!has(now, q))
				add_portals.push_back({tr, p});
		}
		for (const Portal &p : now) {
			bool wanted = false;
			for (const Portal &w : want) {
				Portal q = w;
				if (std::string(tr) != "tcp" && cfg_.rdma_device.empty() &&
				    (q.host.empty() || q.host == "0.0.0.0"))
					q.host = "127.0.0.1";
				wanted = wanted || portal_str(q) == portal_str(p);
			}
			if (!wanted)
				del_portals.push_back({tr, p});
		}
	};
	diff_portals("tcp", cfg_.portals, next.portals);
	diff_portals("iser", cfg_.iser_portals, next.iser_portals);
	diff_portals("srp", cfg_.srp_portals, next.srp_portals);
	// Portals last among the preparations: binding one is visible, so it is undone if a
	// later one fails.
	std::vector<PortalRt> opened;
	for (const NewPortal &np : add_portals) {
		try {
			opened.push_back(open_portal(np.transport, np.p));
		} catch (const MethodError &e) {
			for (PortalRt &o : opened) {
				if (o.transport == "tcp") {
					tcp_->close_portal(o.tcp_index);
				} else {
					o.rdma->stop_accepting();
					retired_.push_back(std::move(o.rdma));
				}
			}
			ULP_LOG(Error, Tool, "reload: {}; nothing changed", e.message);
			throw MethodError{e.code, e.message + "; nothing changed"};
		}
	}

	// ---- 3. Apply ----------------------------------------------------------------------
	for (PortalRt &o : opened) {
		Portal b = o.cfg;
		b.port = o.port;
		note(o.transport + " portal " + portal_str(b) + " added");
		(o.transport == "tcp"    ? cfg_.portals
		 : o.transport == "iser" ? cfg_.iser_portals
		                         : cfg_.srp_portals)
		    .push_back(o.cfg);
		portals_.push_back(std::move(o));
	}
	for (const NewPortal &np : del_portals) {
		portal_delete(np.transport, portal_str(np.p), who);
		note(np.transport + " portal " + portal_str(np.p) + " removed");
	}
	refresh_portal_addresses();
	const auto grace = std::chrono::milliseconds(cfg_.shutdown_grace_ms);
	const auto limit = std::chrono::milliseconds(cfg_.shutdown_timeout_ms);
	std::vector<std::string> gone;
	for (auto &t : targets_)
		if (!find_cfg(next, t->cfg.name))
			gone.push_back(t->cfg.name);
	for (const std::string &name : gone) {
		try {
			target_delete(name, grace, limit, who);
			note("target " + name + " removed");
		} catch (const MethodError &e) {
			note("target " + name + " stays: " + e.message);
		}
	}
	for (auto &[name, rt] : new_targets) {
		if (int rc = iscsi_->add_node(node_of(*rt)); rc != 0) {
			note("target " + name + ": " + std::strerror(-rc));
			continue;
		}
		cfg_.targets.push_back(rt->cfg);
		note("target " + name + " added (" + std::to_string(rt->lus.size()) + " LUNs)");
		targets_.push_back(std::move(rt));
	}
	for (const TargetCfg &want : next.targets) {
		TargetRt *t = find_target(want.name);
		if (!t || new_targets.count(want.name))
			continue;
		const std::string &n = want.name;
		if (want.alias != t->cfg.alias ||
		    want.allow_target_reset != t->cfg.allow_target_reset ||
		    !same_chap(want.chap, t->cfg.chap) ||
		    !same_chap(want.mutual_chap, t->cfg.mutual_chap)) {
			chap_set(n, want.chap, want.mutual_chap, who);
			t->cfg.alias = want.alias;
			t->cfg.allow_target_reset = want.allow_target_reset;
			iscsi_->replace_node(node_of(*t));
			for (TargetCfg &c : cfg_.targets)
				if (c.name == n) {
					c.alias = want.alias;
					c.allow_target_reset = want.allow_target_reset;
				}
			note("target " + n + ": alias, resets or CHAP changed (new logins)");
		}
		// A redirect turns new logins away (or back); sessions already in stay.
		if (want.redirect != t->cfg.redirect ||
		    want.redirect_permanent != t->cfg.redirect_permanent) {
			target_redirect(n, want.redirect, want.redirect_permanent, who);
			note("target " + n + ": " +
			     (want.redirect.empty()
			          ? std::string("logins no longer redirected")
			          : "logins redirected to " + want.redirect +
			                (want.redirect_permanent ? " (permanently)" : "")) +
			     " (new logins)");
		}
		for (const std::string &acl : std::vector<std::string>(t->cfg.acls))
			if (std::find(want.acls.begin(), want.acls.end(), acl) == want.acls.end()) {
				acl_delete(n, acl, who);
				note("target " + n + ": ACL " + acl + " removed");
			}
		for (const std::string &acl : want.acls)
			if (std::find(t->cfg.acls.begin(), t->cfg.acls.end(), acl) ==
			    t->cfg.acls.end()) {
				acl_add(n, acl, who);
				note("target " + n + ": ACL " + acl + " added");
			}
		for (const LunCfg &old : std::vector<LunCfg>(t->cfg.luns)) {
			const LunCfg *l = find_lun(want, old.lun);
			if (l && same_lun_but_size(old, *l))
				continue;
			lun_delete(n, old.lun, grace, limit, who);
			note("target " + n + ": LUN " + std::to_string(old.lun) +
			     (l ? " re-created" : " removed"));
		}
		for (const LunCfg &l : want.luns) {
			const LunCfg *old = find_lun(t->cfg, l.lun);
			if (old) {
				if (old->bs.size != l.bs.size && l.bs.size) {
					try {
						lun_resize(n, l.lun, l.bs.size, who);
						note("target " + n + ": LUN " +
						     std::to_string(l.lun) + " resized to " +
						     std::to_string(l.bs.size) + " bytes");
					} catch (const MethodError &e) {
						note("target " + n + ": LUN " +
						     std::to_string(l.lun) +
						     " not resized: " + e.message);
					}
				}
				continue;
			}
			// Published as lun_create does, from the backstore opened in step 2.
			auto it = new_lus.find({n, l.lun});
			if (it == new_lus.end())
				continue;
			for (scsi::Tpg *tpg : tpgs_of(*t))
				tpg->add_lun(l.lun, *it->second);
			t->lus[l.lun] = std::move(it->second);
			t->cfg.luns.push_back(l);
			std::sort(t->cfg.luns.begin(), t->cfg.luns.end(),
			          [](const LunCfg &x, const LunCfg &y) { return x.lun < y.lun; });
			for (TargetCfg &c : cfg_.targets)
				if (c.name == n)
					c.luns = t->cfg.luns;
			note("target " + n + ": LUN " + std::to_string(l.lun) + " added (" +
			     l.bs.kind + ")");
		}
		// Its portal groups (target ports) and ALUA, once its LUNs and ACLs are the
		// file's (a new port gets them).
		groups_apply(*t, want, grace, limit, note);
		// Once the ACLs and LUNs are the file's: the entries' own LUN maps and CHAP.
		const auto changed =
		    apply_acl_maps(t->tpg.get(), t->cfg.acls, t->cfg.acl_cfg, want.acl_cfg);
		for (auto &g : t->group_tpgs) // its other portal groups' ports: the same maps
			apply_acl_maps(g.get(), t->cfg.acls, t->cfg.acl_cfg, want.acl_cfg);
		if (!changed.empty() || want.allow_no_chap != t->cfg.allow_no_chap ||
		    want.allowed_addresses != t->cfg.allowed_addresses) {
			t->cfg.acl_cfg = want.acl_cfg;
			t->cfg.allow_no_chap = want.allow_no_chap;
			t->cfg.allowed_addresses = want.allowed_addresses;
			iscsi_->replace_node(node_of(*t));
			for (TargetCfg &c : cfg_.targets)
				if (c.name == n) {
					c.acl_cfg = want.acl_cfg;
					c.allow_no_chap = want.allow_no_chap;
					c.allowed_addresses = want.allowed_addresses;
				}
			for (const std::string &a : changed)
				note("target " + n + ": ACL " + a + ": LUN map or CHAP changed");
			if (changed.empty())
				note("target " + n +
				     ": allow_no_chap or allowed_addresses changed (new logins)");
		}
	}
	for (const std::string &acl : std::vector<std::string>(cfg_.srp.acls))
		if (std::find(next.srp.acls.begin(), next.srp.acls.end(), acl) ==
		    next.srp.acls.end()) {
			srp_acl_delete(acl, who);
			note("SRP ACL " + acl + " removed");
		}
	for (const std::string &acl : next.srp.acls)
		if (std::find(cfg_.srp.acls.begin(), cfg_.srp.acls.end(), acl) ==
		    cfg_.srp.acls.end()) {
			srp_acl_add(acl, who);
			note("SRP ACL " + acl + " added");
		}
	for (const std::string &a :
	     apply_acl_maps(srp_tpg_.get(), cfg_.srp.acls, cfg_.srp.acl_cfg, next.srp.acl_cfg))
		note("SRP ACL " + a + ": LUN map changed");
	cfg_.srp.acl_cfg = next.srp.acl_cfg;
	// A gateway records its ports as they are now; its LUs' states follow the cluster
	// again at its next tick (whatever groups_apply configured).
	if (gateway_)
		gateway_->set_ports(gateway_ports());
	if (changes.empty())
		note("no change");
	return changes;
}

} // namespace targetd
