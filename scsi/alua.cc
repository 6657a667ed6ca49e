// SPDX-License-Identifier: MIT
// scsi/alua.cc - the target port groups of a logical unit and their access states (SPC-4
// 5.15), and what each state lets through (SPC-4 5.15.2.4).
#include "scsi/alua.h"
#include "core/check.h"
#include "core/log.h"
#include "scsi/core_internal.h"

#include <algorithm>
#include <cerrno>
#include <map>
#include <set>

namespace ulp::scsi
{

const char *alua_state_str(AluaState s)
{
	switch (s) {
	case AluaState::ActiveOptimized:
		return "active/optimized";
	case AluaState::ActiveNonOptimized:
		return "active/non-optimized";
	case AluaState::Standby:
		return "standby";
	case AluaState::Unavailable:
		return "unavailable";
	case AluaState::Offline:
		return "offline";
	case AluaState::Transitioning:
		return "transitioning";
	}
	return "?";
}

bool alua_state_valid(uint8_t v)
{
	switch (AluaState(v)) {
	case AluaState::ActiveOptimized:
	case AluaState::ActiveNonOptimized:
	case AluaState::Standby:
	case AluaState::Unavailable:
	case AluaState::Offline:
	case AluaState::Transitioning:
		return true;
	}
	return false;
}

namespace
{

// SPC-4 5.15.2: any primary state may follow any other (an implicit transition may go
// anywhere; TRANSITIONING is entered and left from and to any state). The table still
// refuses what is not a state at all (a value cast from the wire unchecked).
constexpr uint32_t kAny =
    to(AluaState::ActiveOptimized, AluaState::ActiveNonOptimized, AluaState::Standby,
       AluaState::Unavailable, AluaState::Offline, AluaState::Transitioning);
constexpr StateTable<AluaState, 16> kAluaStates = {
    "ALUA target port group",
    alua_state_str,
    {kAny, kAny, kAny, kAny, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, kAny, kAny}};

} // namespace

bool Alua::change_locked(AluaGroup &g, AluaState s, uint8_t status)
{
	if (g.state == s)
		return false;
	ULP_LOG(Info, Scsi, "{}: target port group {} {} -> {} ({})", lu_.name(), g.id,
	        alua_state_str(g.state), alua_state_str(s),
	        status == ALUA_STATUS_EXPLICIT ? "SET TARGET PORT GROUPS" : "implicit");
	change_state(&g.state, s, kAluaStates, &g);
	g.status = status;
	transitions_.fetch_add(1, std::memory_order_relaxed);
	return true;
}

int Alua::check(const AluaConfig &cfg, std::string *why)
{
	auto bad = [why](const std::string &m) {
		if (why)
			*why = m;
		return -EINVAL;
	};
	if (cfg.tpgs > TPGS_BOTH)
		return bad("tpgs must be 0..3");
	if (cfg.tpgs == TPGS_NONE && !cfg.groups.empty())
		return bad("target port groups without ALUA (tpgs 0)");
	if (cfg.groups.size() > kMaxGroups)
		return bad("too many target port groups");
	std::set<uint16_t> ids, ports;
	for (const AluaGroup &g : cfg.groups) {
		if (!ids.insert(g.id).second)
			return bad(fmt::format("target port group {} twice", g.id));
		if (!alua_state_valid(uint8_t(g.state)))
			return bad(fmt::format("target port group {}: not an access state", g.id));
		if (g.rtpis.size() > kMaxPortsPerGroup)
			return bad(fmt::format("target port group {}: too many ports", g.id));
		for (uint16_t p : g.rtpis)
			if (!ports.insert(p).second)
				return bad(fmt::format("target port {} in two groups", p));
	}
	return 0;
}

namespace
{

// Each target port's group and state under groups (and tpgs: none without ALUA).
std::map<uint16_t, std::pair<uint16_t, AluaState>> port_map(uint8_t tpgs,
                                                            const std::vector<AluaGroup> &groups)
{
	std::map<uint16_t, std::pair<uint16_t, AluaState>> m;
	if (tpgs == TPGS_NONE)
		return m;
	for (const AluaGroup &g : groups)
		for (uint16_t p : g.rtpis)
			m[p] = {g.id, g.state};
	return m;
}

} // namespace

int Alua::configure(const AluaConfig &cfg, std::string *why)
{
	if (int rc = check(cfg, why); rc != 0)
		return rc;
	bool changed = false, inquiry = false;
	{
		ShardLockAll l(lock_);
		const auto before = port_map(tpgs_.load(std::memory_order_relaxed), groups_);
		std::vector<AluaGroup> next = cfg.groups;
		for (AluaGroup &g : next) {
			g.status = ALUA_STATUS_NONE;
			auto old = std::find_if(groups_.begin(), groups_.end(),
			                        [&](const AluaGroup &o) { return o.id == g.id; });
			if (old == groups_.end())
				continue;
			// A group that stays: its state moves by the checked path, and keeps the
			// status code it had when that does not change it.
			const AluaState s = g.state;
			g.state = old->state;
			g.status = old->status;
			changed |= change_locked(g, s, ALUA_STATUS_IMPLICIT);
		}
		const auto after = port_map(cfg.tpgs, next);
		// A port that changes group, joins one or leaves one: its VPD 83h target port
		// group designator changes (SPC-4 7.8.6), and so may the state it serves in.
		for (const auto *m : {&before, &after})
			for (const auto &[port, gs] : *m) {
				const auto *o = m == &before ? &after : &before;
				auto it = o->find(port);
				if (it == o->end() || it->second.first != gs.first)
					inquiry = true;
				if (it == o->end() || it->second.second != gs.second)
					changed = true;
			}
		if (tpgs_.load(std::memory_order_relaxed) != cfg.tpgs)
			inquiry = true; // standard INQUIRY's TPGS field (SPC-4 6.6.2)
		groups_ = std::move(next);
		itt_.store(cfg.implicit_transition_secs, std::memory_order_relaxed);
		tpgs_.store(cfg.tpgs, std::memory_order_relaxed);
	}
	// SPC-4 6.6.1: changed INQUIRY data (the TPGS field, VPD 83h's target port group
	// designator) is INQUIRY DATA HAS CHANGED to every I_T nexus; a port whose access state
	// changed is ASYMMETRIC ACCESS STATE CHANGED (SPC-4 5.15.2.3, an implicit transition).
	if (inquiry)
		lu_.ua_add_all(UA_INQUIRY_DATA_CHANGED);
	if (changed)
		lu_.ua_add_all(UA_ASYMMETRIC_ACCESS_CHANGED);
	return 0;
}

int Alua::set_state(uint16_t id, AluaState state, const NexusId *by)
{
	return set_states({{id, state}}, by);
}

int Alua::set_states(const std::vector<std::pair<uint16_t, AluaState>> &changes, const NexusId *by,
                     std::function<void(int err)> done)
{
	for (const auto &c : changes)
		if (!alua_state_valid(uint8_t(c.second)))
			return -EINVAL;
	// What each group was, to undo the change should it not be stored.
	struct Undo {
		uint16_t id;
		AluaState was, now;
		uint8_t status;
	};
	std::vector<Undo> undo;
	std::unique_lock p(persist_lock_);
	{
		ShardLockAll l(lock_);
		if (tpgs_.load(std::memory_order_relaxed) == TPGS_NONE)
			return -EINVAL;
		std::vector<AluaGroup *> gs;
		for (const auto &c : changes) {
			auto it = std::find_if(groups_.begin(), groups_.end(),
			                       [&](const AluaGroup &g) { return g.id == c.first; });
			if (it == groups_.end())
				return -ENOENT;
			gs.push_back(&*it);
		}
		for (size_t i = 0; i < changes.size(); i++) {
			const Undo u{gs[i]->id, gs[i]->state, changes[i].second, gs[i]->status};
			if (change_locked(*gs[i], changes[i].second,
			                  by ? ALUA_STATUS_EXPLICIT : ALUA_STATUS_IMPLICIT))
				undo.push_back(u);
		}
	}
	// After lock_: the UA table has its own lock, and a command looking up its port's
	// state (lock_, one shard) may be about to take it.
	if (!undo.empty())
		lu_.ua_add_all(UA_ASYMMETRIC_ACCESS_CHANGED, by);
	if (undo.empty() || !persist_) {
		p.unlock();
		if (done)
			done(0);
		return 0;
	}
	persist_locked([this, undo = std::move(undo), done = std::move(done)](int err) {
		if (err) {
			// Not stored: the states go back to what the file still says (a group
			// changed again since keeps its newer state), and the initiators hear of
			// it.
			bool changed = false;
			{
				ShardLockAll l(lock_);
				for (const Undo &u : undo)
					for (AluaGroup &g : groups_)
						if (g.id == u.id && g.state == u.now)
							changed |=
							    change_locked(g, u.was, u.status);
			}
			if (changed)
				lu_.ua_add_all(UA_ASYMMETRIC_ACCESS_CHANGED);
			ULP_LOG(Error, Scsi, "{}: target port group states not stored ({}): undone",
			        lu_.name(), -err);
		}
		if (done)
			done(err);
	});
	return 0;
}

void Alua::set_persist(AluaPersist p)
{
	std::lock_guard g(persist_lock_);
	persist_ = std::move(p);
}

void Alua::persist(std::function<void(int err)> done)
{
	std::unique_lock p(persist_lock_);
	if (!persist_) {
		p.unlock();
		if (done)
			done(0);
		return;
	}
	persist_locked(std::move(done));
}

void Alua::persist_locked(std::function<void(int err)> done)
{
	std::vector<AluaGroup> now;
	{
		std::lock_guard g(lock_.mine());
		now = groups_;
	}
	persist_(std::move(now), std::move(done));
}

bool Alua::port_state(uint16_t rtpi, uint16_t *group, AluaState *state)
{
	if (tpgs() == TPGS_NONE)
		return false;
	std::lock_guard g(lock_.mine());
	for (const AluaGroup &gr : groups_)
		if (std::find(gr.rtpis.begin(), gr.rtpis.end(), rtpi) != gr.rtpis.end()) {
			if (group)
				*group = gr.id;
			if (state)
				*state = gr.state;
			return true;
		}
	return false;
}

std::vector<AluaGroup> Alua::groups()
{
	std::lock_guard g(lock_.mine());
	return groups_;
}

// ---- What each state lets through (SPC-4 5.15.2.4) ---------------------------------------

namespace
{

enum : uint8_t {
	ALUA_OP_RECEIVE_DIAGNOSTIC = 0x1c,
	ALUA_OP_LOG_SELECT = 0x4c,
	ALUA_OP_LOG_SENSE = 0x4d,
	RWB_MODE_ECHO = 0x0a,     // READ/WRITE BUFFER echo buffer mode (SPC-4 6.17.8, 6.49.9)
	RB_MODE_ECHO_DESC = 0x0b, // READ BUFFER echo buffer descriptor mode (SPC-4 6.17.9)
};

// The commands every state lets through (SPC-4 5.15.2.4.4 to .6): INQUIRY, REPORT LUNS,
// REPORT TARGET PORT GROUPS, REQUEST SENSE, and the echo buffer modes of READ BUFFER and
// WRITE BUFFER. stpg: SET TARGET PORT GROUPS too (every state but TRANSITIONING).
bool always_allowed(const uint8_t *c, bool stpg)
{
	switch (c[0]) {
	case OP_INQUIRY:
	case OP_REPORT_LUNS:
	case OP_REQUEST_SENSE:
		return true;
	case OP_MAINTENANCE_IN:
		return (c[1] & 0x1f) == MI_REPORT_TARGET_PORT_GROUPS;
	case OP_MAINTENANCE_OUT:
		return stpg && (c[1] & 0x1f) == MO_SET_TARGET_PORT_GROUPS;
	case OP_READ_BUFFER:
		return (c[1] & 0x1f) == RWB_MODE_ECHO || (c[1] & 0x1f) == RB_MODE_ECHO_DESC;
	case OP_WRITE_BUFFER:
		return (c[1] & 0x1f) == RWB_MODE_ECHO;
	default:
		return false;
	}
}

// SPC-4 5.15.2.4.4: standby also lets through what an initiator needs to manage the LU
// and its reservations through a port that will not carry I/O. READ CAPACITY is not in
// that list, and is let through as well: Linux's sd sizes the disk on every path it finds,
// a standby path's disk answered NOT READY is sized 0, and multipath then refuses that path
// (its size differs from the map's) until it is rescanned. Reading the capacity touches no
// data and moves no lock (an rbd LU's standby gateway has the image open).
bool standby_allowed(const uint8_t *c)
{
	switch (c[0]) {
	case OP_READ_CAPACITY_10:
		return true;
	case OP_SERVICE_ACTION_IN_16:
		return (c[1] & 0x1f) == SAI_READ_CAPACITY_16;
	case ALUA_OP_LOG_SELECT:
	case ALUA_OP_LOG_SENSE:
	case OP_MODE_SELECT_6:
	case OP_MODE_SELECT_10:
	case OP_MODE_SENSE_6:
	case OP_MODE_SENSE_10:
	case ALUA_OP_RECEIVE_DIAGNOSTIC:
	case OP_SEND_DIAGNOSTIC:
	case OP_PERSISTENT_RESERVE_IN:
	case OP_PERSISTENT_RESERVE_OUT:
		return true;
	default:
		return always_allowed(c, true);
	}
}

} // namespace

Sense alua_port_sense(const Cmd *cmd)
{
	AluaState s;
	if (!cmd->lu || !cmd->lu->alua_.port_state(cmd->sess->id().rtpi, nullptr, &s))
		return Sense::None;
	switch (s) {
	case AluaState::ActiveOptimized:
	case AluaState::ActiveNonOptimized:
		return Sense::None;
	case AluaState::Standby:
		return Sense::AluaStandby;
	case AluaState::Unavailable:
		return Sense::AluaUnavailable;
	case AluaState::Offline:
		return Sense::AluaOffline;
	case AluaState::Transitioning:
		return Sense::AluaTransitioning;
	}
	return Sense::None;
}

Sense alua_check(Cmd *cmd)
{
	LogicalUnit *lu = cmd->lu;
	AluaState s;
	if (!lu || !lu->alua_.port_state(cmd->sess->id().rtpi, nullptr, &s))
		return Sense::None;
	const uint8_t *c = cmd->cdb;
	switch (s) {
	case AluaState::ActiveOptimized:
	case AluaState::ActiveNonOptimized:
		return Sense::None;
	case AluaState::Standby:
		return standby_allowed(c) ? Sense::None : Sense::AluaStandby;
	case AluaState::Unavailable:
		return always_allowed(c, true) ? Sense::None : Sense::AluaUnavailable;
	case AluaState::Offline:
		return always_allowed(c, true) ? Sense::None : Sense::AluaOffline;
	case AluaState::Transitioning:
		return always_allowed(c, false) ? Sense::None : Sense::AluaTransitioning;
	}
	return Sense::None;
}

} // namespace ulp::scsi
