// SPDX-License-Identifier: MIT
// tools/ulp-targetd/alua_ops.cc - the administrator's view of asymmetric access (SPC-4
// 5.15): each ALUA target's groups as its LUs have them, and a group's state changed on
// every LU of a target (an implicit transition: status code 02h, ASYMMETRIC ACCESS STATE
// CHANGED to every I_T nexus; scsi/alua.h). What `ulpctl alua show` and `ulpctl alua set`
// call (alua_show, alua_set in methods.cc).
#include "tools/ulp-targetd/daemon.h"

#include "core/log.h"
#include "scsi/pr.h"

#include <cerrno>
#include <chrono>
#include <cstring>
#include <functional>
#include <future>
#include <map>
#include <sstream>

namespace targetd
{

using namespace ulp;

namespace
{

// The state directory's file of a LU's ALUA states: its reservation file's name (the one
// escaping of LU names, scsi/pr.h) with .alua for .pr.
std::string alua_state_file(const scsi::LogicalUnit &lu)
{
	std::string f = scsi::pr_state_file(lu);
	return f.substr(0, f.size() - 3) + ".alua";
}

constexpr size_t kMaxAluaFile = 64 * 1024; // 256 groups of one short line each, and room

// The file's text: a line "GROUP STATE" per group ("10 standby"), states as the
// configuration says them.
std::vector<uint8_t> alua_state_text(const std::vector<scsi::AluaGroup> &groups)
{
	std::string s;
	for (const scsi::AluaGroup &g : groups)
		s += std::to_string(g.id) + " " + alua_state_word(g.state) + "\n";
	return {s.begin(), s.end()};
}

// Its lines back, by group id; false (and *why) on a line that is not "GROUP STATE".
bool parse_alua_state_text(const std::vector<uint8_t> &b, std::map<uint16_t, scsi::AluaState> *out,
                           std::string *why)
{
	std::istringstream in(std::string(b.begin(), b.end()));
	std::string line;
	for (int n = 1; std::getline(in, line); n++) {
		std::istringstream ls(line);
		long id = -1;
		std::string word, extra;
		scsi::AluaState s;
		if (!(ls >> id >> word) || (ls >> extra) || id < 0 || id > 65535 ||
		    !parse_alua_state(word, &s)) {
			*why = "line " + std::to_string(n) + " is not \"GROUP STATE\"";
			return false;
		}
		(*out)[uint16_t(id)] = s;
	}
	return true;
}

} // namespace

void Daemon::alua_load_states(const scsi::LogicalUnit &lu, scsi::AluaConfig *cfg)
{
	if (!pr_store_)
		return;
	const std::string file = alua_state_file(lu);
	if (pr_store_->remove_stale(file))
		ULP_LOG(Info, Tool, "LU {}: removed {}.tmp, a state write a crash interrupted",
		        lu.name(), pr_store_->path(file));
	std::vector<uint8_t> bytes;
	std::map<uint16_t, scsi::AluaState> states;
	std::string why;
	if (int rc = pr_store_->read(file, &bytes, kMaxAluaFile); rc != 0) {
		if (rc != -ENOENT)
			ULP_LOG(Warn, Tool,
			        "LU {}: ALUA state file {}: {}; the configured states apply",
			        lu.name(), pr_store_->path(file), std::strerror(-rc));
		return;
	}
	// A damaged file costs the states an administrator set, not the LU: the configured
	// ones apply, logged.
	if (!parse_alua_state_text(bytes, &states, &why)) {
		ULP_LOG(Warn, Tool, "LU {}: ALUA state file {}: {}; the configured states apply",
		        lu.name(), pr_store_->path(file), why);
		return;
	}
	// Groups the configuration no longer has are forgotten; new ones start as configured.
	for (scsi::AluaGroup &g : cfg->groups)
		if (auto it = states.find(g.id); it != states.end())
			g.state = it->second;
}

scsi::AluaPersist Daemon::alua_persist_hook(const scsi::LogicalUnit &lu)
{
	if (!pr_store_)
		return {};
	// The store's thread writes the file and calls done (scsi/pr_store.h): never inside
	// the call, as scsi::AluaPersist asks. The store outlives the LUs (daemon.h).
	return [store = pr_store_.get(), file = alua_state_file(lu)](
	           std::vector<scsi::AluaGroup> groups, std::function<void(int)> done) {
		store->put(file, alua_state_text(groups), std::move(done));
	};
}

int Daemon::alua_wait(const scsi::LogicalUnit &lu,
                      const std::function<int(std::function<void(int)>)> &start)
{
	// Durable before the answer (an administrator's change, not the data path): bounded.
	auto done = std::make_shared<std::promise<int>>();
	std::future<int> f = done->get_future();
	if (int rc = start([done](int err) { done->set_value(err); }); rc != 0)
		return rc;
	const bool in_time = f.wait_for(std::chrono::seconds(10)) == std::future_status::ready;
	const int rc = in_time ? f.get() : -ETIMEDOUT;
	if (rc != 0)
		ULP_LOG(Error, Tool, "LU {}: ALUA states not stored in {}: {}", lu.name(),
		        pr_store_ ? pr_store_->dir() : std::string("?"), std::strerror(-rc));
	return rc;
}

void Daemon::alua_states_now(const TargetRt &t, AluaCfg *a) const
{
	// Every LU has the target's groups; SET TARGET PORT GROUPS changes one LU's, so the
	// lowest LUN's states stand for the target's (what a LUN added later starts with,
	// and what `save` writes; each LU's own states are in its state file).
	if (t.lus.empty())
		return;
	for (const scsi::AluaGroup &g : t.lus.begin()->second->alua_.groups())
		for (AluaGroupCfg &c : a->groups)
			if (c.id == g.id)
				c.state = g.state;
}

json Daemon::alua_show(const std::string &target)
{
	std::lock_guard g(lock_);
	if (!target.empty())
		(void)need_target(target);
	json out = json::array();
	for (const auto &t : targets_) {
		// A gateway's targets have ALUA from the cluster, not from [target.alua].
		const uint8_t tpgs = gateway_ ? uint8_t(scsi::TPGS_IMPLICIT) : t->cfg.alua.tpgs;
		if ((!target.empty() && t->cfg.name != target) || tpgs == scsi::TPGS_NONE)
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
		out.push_back(
		    {{"target", t->cfg.name}, {"tpgs", kTpgsWords[tpgs & 3]}, {"luns", luns}});
	}
	return out;
}

void Daemon::alua_set(const std::string &target, uint16_t group, const std::string &state,
                      const std::string &who)
{
	std::lock_guard g(lock_);
	TargetRt &t = need_target(target);
	if (gateway_)
		fail(-EPERM, "this daemon is gateway " + gateway_->config().name +
		                 ": its ALUA states follow the cluster's owners (ulpctl gateway "
		                 "drain moves a gateway's groups)");
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
	// Every LU has every configured group (make_lu): set_states fails only on a LU made
	// before a configuration it does not have, which cannot happen; checked all the same.
	// Each change is in the LU's state file before the next one starts (Alua::set_states,
	// the one path SET TARGET PORT GROUPS takes too): kept across restarts.
	for (const auto &[n, lu] : t.lus) {
		const int rc = alua_wait(*lu, [&, lu = lu.get()](std::function<void(int)> done) {
			return lu->alua_.set_states({{group, s}}, nullptr, std::move(done));
		});
		if (rc == -ENOENT || rc == -EINVAL)
			fail(rc, "target " + target + " LUN " + std::to_string(n) + ": group " +
			             std::to_string(group) + ": " + std::strerror(-rc));
		if (rc != 0)
			fail(rc, "target " + target + " LUN " + std::to_string(n) + ": group " +
			             std::to_string(group) + ": state not stored (" +
			             std::strerror(-rc) + "): left as it was");
	}
	if (!pr_store_)
		ULP_LOG(Warn, Tool,
		        "target {}: no usable state directory: its ALUA states are not kept "
		        "across a restart",
		        target);
	// The running configuration follows (save writes it; LUNs added later start so).
	gc->state = s;
	for (TargetCfg &c : cfg_.targets)
		if (c.name == target)
			c.alua = t.cfg.alua;
	ULP_LOG(Info, Tool, "admin ({}): target {} ALUA group {} now {}", who.empty() ? "?" : who,
	        target, group, state);
}

// ---- Gateway (gateway.h) ------------------------------------------------------------------

json Daemon::gateway_show()
{
	if (!gateway_)
		fail(-ENOENT, "this daemon is not a gateway (no [gateway] in its configuration)");
	return gateway_->show();
}

json Daemon::gateway_drain(std::chrono::seconds hold_off, const std::string &who)
{
	if (!gateway_)
		fail(-ENOENT, "this daemon is not a gateway (no [gateway] in its configuration)");
	// Not under lock_: a drain waits for RADOS and the images' locks (bounded by the
	// client's timeouts); the gateway orders it against its own ticks.
	ULP_LOG(Info, Tool, "admin ({}): gateway {}: drain", who.empty() ? "?" : who,
	        gateway_->config().name);
	const std::vector<std::string> groups = gateway_->drain(hold_off);
	json out = json::array();
	for (const std::string &g : groups)
		out.push_back(g);
	return {{"drained", out}, {"gateway", gateway_->show()}};
}

} // namespace targetd
