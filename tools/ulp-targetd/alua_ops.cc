// SPDX-License-Identifier: MIT
// tools/ulp-targetd/alua_ops.cc - the administrator's view of asymmetric access (SPC-4
// 5.15): each ALUA target's groups as its LUs have them, and a group's state changed on
// every LU of a target (an implicit transition: status code 02h, ASYMMETRIC ACCESS STATE
// CHANGED to every I_T nexus; scsi/alua.h). What `ulpctl alua show` and `ulpctl alua set`
// call (alua_show, alua_set in methods.cc).
#include "tools/ulp-targetd/daemon.h"

#include "core/log.h"

#include <cerrno>
#include <cstring>

namespace targetd
{

using namespace ulp;

json Daemon::alua_show(const std::string &target)
{
	std::lock_guard g(lock_);
	if (!target.empty())
		(void)need_target(target);
	json out = json::array();
	for (const auto &t : targets_) {
		if ((!target.empty() && t->cfg.name != target) ||
		    t->cfg.alua.tpgs == scsi::TPGS_NONE)
			continue;
		json luns = json::array();
		for (const auto &[n, lu] : t->lus) {
			json groups = json::array();
			for (const scsi::AluaGroup &ag : lu->alua_.groups())
				groups.push_back({{"id", ag.id},
				                  {"state", alua_state_word(ag.state)},
				                  {"state_code", uint8_t(ag.state)}, // SPC-4 6.37
				                  {"preferred", ag.pref},
				                  {"status", ag.status},
				                  {"rtpis", ag.rtpis}});
			luns.push_back({{"lun", n},
			                {"transitions", lu->alua_.transitions()},
			                {"groups", groups}});
		}
		out.push_back({{"target", t->cfg.name},
		               {"tpgs", kTpgsWords[t->cfg.alua.tpgs & 3]},
		               {"luns", luns}});
	}
	return out;
}

void Daemon::alua_set(const std::string &target, uint16_t group, const std::string &state,
                      const std::string &who)
{
	std::lock_guard g(lock_);
	TargetRt &t = need_target(target);
	scsi::AluaState s;
	if (!parse_alua_state(state, &s))
		fail(-EINVAL, "state must be active-optimized, active-non-optimized, standby, "
		              "unavailable, offline or transitioning, not " +
		                  state);
	if (t.cfg.alua.tpgs == scsi::TPGS_NONE)
		fail(-EINVAL, "target " + target + " has no ALUA ([target.alua] tpgs)");
	AluaGroupCfg *gc = nullptr;
	for (AluaGroupCfg &c : t.cfg.alua.groups)
		if (c.id == group)
			gc = &c;
	if (!gc)
		fail(-ENOENT, "target " + target + " has no ALUA group " + std::to_string(group));
	// Every LU has every configured group (make_lu): set_state fails only on a LU made
	// before a configuration it does not have, which cannot happen; checked all the same.
	for (const auto &[n, lu] : t.lus)
		if (int rc = lu->alua_.set_state(group, s); rc != 0)
			fail(rc, "target " + target + " LUN " + std::to_string(n) + ": group " +
			             std::to_string(group) + ": " + std::strerror(-rc));
	// The running configuration follows (save writes it; LUNs added later start so).
	gc->state = s;
	for (TargetCfg &c : cfg_.targets)
		if (c.name == target)
			c.alua = t.cfg.alua;
	ULP_LOG(Info, Tool, "admin ({}): target {} ALUA group {} now {}", who.empty() ? "?" : who,
	        target, group, state);
}

} // namespace targetd
