// SPDX-License-Identifier: MIT
// tools/ulp-targetd/reload_groups.cc - a reload's changes to a running target's portal
// groups ([[target.portal_group]]: its target ports) and asymmetric access ([target.alua]),
// applied without a restart (reload.cc calls these).
//
// Portal groups. A group is a target port: a scsi::Tpg with the group's relative target
// port identifier. A group the file keeps (same tag, same rtpi) keeps its Tpg and its
// sessions, whatever portals it now has; a portal moved to another group sends new logins
// there (the node's portal map, replace_node), its sessions stay where they logged in. A
// new group (or a tag whose rtpi changed) gets a new Tpg with the target's LUNs and ACLs;
// a group that goes has its sessions asked to log out (RFC 7143 11.9.1 event 1), dropped
// after the grace period, and its Tpg unmaps the LUs. A port added or removed changes every
// LU's SCSI ports page (VPD 88h, SPC-4 7.8.16): INQUIRY DATA HAS CHANGED to every I_T
// nexus of them (SPC-4 6.6.1).
//
// ALUA. Every LU of the target is configured again (scsi::Alua::configure, which raises
// INQUIRY DATA HAS CHANGED when TPGS or a port's group changes, and ASYMMETRIC ACCESS STATE
// CHANGED when a port's state does) and its states stored (the state directory). A group's
// state in the file is an administrator's command: it is applied when the file's value
// changed since it was last read (or the group is new), and otherwise the LU keeps the
// state it has - set by SET TARGET PORT GROUPS, `ulpctl alua set` or a cluster manager - so
// that a reload of an untouched file moves no path.
//
// What cannot be applied is refused before anything changes (groups_check): a group whose
// LU configuration would not load, and a change that would move the SRP port's rtpi (it
// follows the highest portal group's unless [srp] rtpi is set, and the SRP port is made at
// start). A portal that the file removes while a group still names it is refused earlier,
// by the configuration's own check (check_portal_groups).
#include "tools/ulp-targetd/daemon.h"

#include "core/log.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

namespace targetd
{

using namespace ulp;

namespace
{

// A target's ports as (tag, rtpi), in its portal group order; a target without groups has
// one, tag 1 rtpi 1 (config.h).
std::vector<std::pair<uint16_t, uint16_t>> port_keys(const TargetCfg &t)
{
	std::vector<std::pair<uint16_t, uint16_t>> v;
	for (const PortalGroupCfg &g : t.portal_groups)
		v.emplace_back(g.tag, g.port_id());
	if (v.empty())
		v.emplace_back(1, 1);
	return v;
}

// [target.alua] but its states, as text, to compare two.
std::string alua_shape(const AluaCfg &a)
{
	std::string s = std::to_string(a.tpgs) + "/" + std::to_string(a.implicit_transition_secs);
	for (const AluaGroupCfg &g : a.groups) {
		s += ";" + std::to_string(g.id) + "," + (g.preferred ? "p" : "") +
		     (g.srp ? "s" : "");
		for (uint16_t tag : g.portal_groups)
			s += "," + std::to_string(tag);
	}
	return s;
}

const AluaGroupCfg *find_group(const AluaCfg &a, uint16_t id)
{
	for (const AluaGroupCfg &g : a.groups)
		if (g.id == id)
			return &g;
	return nullptr;
}

} // namespace

bool same_portal_groups(const TargetCfg &a, const TargetCfg &b)
{
	auto text = [](const TargetCfg &t) {
		std::string s;
		for (const PortalGroupCfg &g : t.portal_groups) {
			s += std::to_string(g.tag) + "/" + std::to_string(g.port_id()) + ":";
			for (const Portal &p : g.portals)
				s += portal_str(p) + ",";
			s += ";";
		}
		return s;
	};
	return text(a) == text(b);
}

void Daemon::groups_check(const Config &next)
{
	for (const TargetCfg &want : next.targets) {
		TargetRt *t = find_target(want.name);
		if (!t)
			continue; // a new target is made whole (make_target)
		if (exported_by_srp(*t) && srp_rtpi(cfg_.srp, t->cfg) != srp_rtpi(cfg_.srp, want))
			fail(-EINVAL,
			     "target " + want.name + ": the SRP port's rtpi would change from " +
			         std::to_string(srp_rtpi(cfg_.srp, t->cfg)) + " to " +
			         std::to_string(srp_rtpi(cfg_.srp, want)) +
			         " (it follows the highest portal group rtpi): set [srp] rtpi to "
			         "keep it, or restart");
		std::string why;
		if (scsi::Alua::check(alua_config(want, cfg_.srp), &why) != 0)
			fail(-EINVAL, "target " + want.name + " alua: " + why);
	}
}

void Daemon::groups_apply(TargetRt &t, const TargetCfg &want, std::chrono::milliseconds grace,
                          std::chrono::milliseconds timeout,
                          const std::function<void(const std::string &)> &note)
{
	const std::string &n = want.name;
	const bool ports_same = same_portal_groups(t.cfg, want);
	bool ports_changed = false;
	if (!ports_same) {
		const auto was = port_keys(t.cfg), now = port_keys(want);
		std::vector<std::unique_ptr<scsi::Tpg>> old;
		old.push_back(std::move(t.tpg));
		for (auto &g : t.group_tpgs)
			old.push_back(std::move(g));
		t.group_tpgs.clear();
		std::vector<std::unique_ptr<scsi::Tpg>> keep(now.size());
		for (size_t i = 0; i < now.size(); i++) {
			for (size_t j = 0; j < was.size(); j++)
				if (was[j] == now[i] && old[j])
					keep[i] = std::move(old[j]);
			if (keep[i])
				continue;
			// A new target port: the target's LUNs and ACLs, as make_target gives them.
			auto tpg = std::make_unique<scsi::Tpg>(n, now[i].second);
			for (auto &[l, lu] : t.lus)
				tpg->add_lun(l, *lu);
			for (const std::string &a : t.cfg.acls) {
				auto it = t.cfg.acl_cfg.find(a);
				tpg->add_acl(
				    node_acl(a, it == t.cfg.acl_cfg.end() ? nullptr : &it->second));
			}
			keep[i] = std::move(tpg);
			ports_changed = true;
			note("target " + n + ": portal group " + std::to_string(now[i].first) +
			     " (rtpi " + std::to_string(now[i].second) + ") added");
		}
		t.tpg = std::move(keep[0]);
		for (size_t i = 1; i < keep.size(); i++)
			t.group_tpgs.push_back(std::move(keep[i]));
		t.cfg.portal_groups = want.portal_groups;
		for (TargetCfg &c : cfg_.targets)
			if (c.name == n)
				c.portal_groups = want.portal_groups;
		// New logins land in the new groups from here on.
		iscsi_->replace_node(node_of(t));
		// The groups that went: their sessions are asked to go (a session of a new group
		// with the same tag could be caught too, in the moment since replace_node: it
		// logs in again), then the port unmaps the LUs.
		for (size_t j = 0; j < was.size(); j++) {
			if (!old[j])
				continue;
			ports_changed = true;
			size_t sessions = 0;
			for (const iscsi::target::SessionInfo &si : iscsi_->session_info())
				if (si.params.type == iscsi::SessionType::Normal &&
				    si.params.target_name == n && si.params.tpgt == was[j].first) {
					(void)iscsi_->logout_session(si.tsih, grace);
					sessions++;
				}
			for (const auto &[l, e] : old[j]->lun_entries())
				old[j]->remove_lun(l, nullptr);
			const auto end = std::chrono::steady_clock::now() + timeout;
			while (!old[j]->sessions().empty() &&
			       std::chrono::steady_clock::now() < end)
				std::this_thread::sleep_for(std::chrono::milliseconds(10));
			if (!old[j]->sessions().empty()) {
				ULP_LOG(Warn, Tool,
				        "target {}: portal group {}: sessions still closing; its "
				        "port is left allocated",
				        n, was[j].first);
				zombie_tpgs_.push_back(std::move(old[j]));
			}
			note("target " + n + ": portal group " + std::to_string(was[j].first) +
			     " (rtpi " + std::to_string(was[j].second) + ") removed (" +
			     std::to_string(sessions) + " sessions asked to log out)");
		}
		if (!ports_changed)
			note("target " + n + ": portal group portals changed (new logins)");
		// SPC-4 7.8.16: every LU's SCSI ports page lists the target's ports.
		if (ports_changed)
			for (auto &[l, lu] : t.lus)
				lu->ua_add_all(scsi::UA_INQUIRY_DATA_CHANGED);
	}

	// ALUA: the shape (TPGS, groups, their ports) or a state the file changed.
	bool states_changed = false;
	for (const AluaGroupCfg &g : want.alua.groups) {
		const AluaGroupCfg *f = find_group(t.alua_file, g.id);
		states_changed = states_changed || !f || f->state != g.state;
	}
	if (ports_same && !states_changed && alua_shape(t.cfg.alua) == alua_shape(want.alua) &&
	    alua_shape(t.alua_file) == alua_shape(want.alua))
		return;
	const scsi::AluaConfig ac = alua_config(want, cfg_.srp); // checked by groups_check
	for (auto &[l, lu] : t.lus) {
		scsi::AluaConfig c = ac;
		const std::vector<scsi::AluaGroup> live = lu->alua_.groups();
		for (scsi::AluaGroup &g : c.groups) {
			const AluaGroupCfg *f = find_group(t.alua_file, g.id);
			if (f && f->state == g.state) // the file left it: the LU's own state stays
				for (const scsi::AluaGroup &o : live)
					if (o.id == g.id)
						g.state = o.state;
		}
		std::string why;
		if (lu->alua_.configure(c, &why) != 0) { // cannot happen: groups_check
			note("target " + n + " LUN " + std::to_string(l) + ": alua: " + why);
			continue;
		}
		// Kept across restarts as a SET TARGET PORT GROUPS' change is.
		(void)alua_wait(*lu, [lu = lu.get()](std::function<void(int)> done) {
			lu->alua_.persist(std::move(done));
			return 0;
		});
	}
	t.cfg.alua = want.alua;
	alua_states_now(t, &t.cfg.alua);
	t.alua_file = want.alua;
	for (TargetCfg &c : cfg_.targets)
		if (c.name == n)
			c.alua = t.cfg.alua;
	std::string states;
	for (const AluaGroupCfg &g : t.cfg.alua.groups)
		states += " " + std::to_string(g.id) + "=" + alua_state_word(g.state);
	note("target " + n + ": alua applied (tpgs " + kTpgsWords[t.cfg.alua.tpgs & 3] + ")" +
	     states);
}

} // namespace targetd
