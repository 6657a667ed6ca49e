// SPDX-License-Identifier: MIT
// scsi/alua.h - asymmetric logical unit access (SPC-4 5.15): a logical unit's target port
// groups, the primary target port asymmetric access state of each, and what that state
// lets through the ports of the group.
//
// Every LogicalUnit has one Alua (LogicalUnit::alua_). It starts with TPGS 00b and no
// groups: no asymmetric access, every port as good as any other, INQUIRY's TPGS 00b and no
// REPORT/SET TARGET PORT GROUPS - what the target did before ALUA existed. A group names
// target ports by their relative target port identifier (Tpg::rtpi), whatever fabric they
// belong to; a port in no group of a LU with ALUA on is not asymmetric (every command
// passes, VPD 83h has no target port group designator for it).
//
// The API the daemon (and a cluster manager) calls, from any thread, while commands run:
//   lu.alua_.configure(cfg, &why)        set TPGS, the groups and their ports and states
//   lu.alua_.set_state(id, state)        an implicit transition (SPC-4 5.15.2.3): status
//                                        code 02h, ASYMMETRIC ACCESS STATE CHANGED to every
//                                        I_T nexus of the LU
//   lu.alua_.groups()                    the groups now, for statistics and REPORT TARGET
//                                        PORT GROUPS
// SET TARGET PORT GROUPS (spc_alua.cc) makes explicit transitions through set_states with
// the nexus it came on (status code 01h, no unit attention for that nexus).
//
// Durable states: the daemon gives the LU a persist hook (set_persist: its state
// directory's file). Every change - an initiator's SET TARGET PORT GROUPS, an
// administrator's set_state, configure - goes through set_states or persist(), which hand
// the groups as they are after the change to the hook, in the order of the changes, and
// report through done once they are stored: SET TARGET PORT GROUPS completes GOOD only
// then (as PERSISTENT RESERVE OUT with APTPL 1 does, scsi/pr_out.cc), so what an
// initiator was told is what a restart finds. A write that fails undoes the change and the
// command ends in INTERNAL TARGET FAILURE.
// An implicit transition that takes time (a cluster manager moving ownership) is two calls:
// set_state(id, Transitioning), which refuses I/O with 04h/0Ah meanwhile, then
// set_state(id, the new state); the unit attention queued by the first is reported once
// (a queue holds a condition once) unless the initiator read it in between.
//
// Locking: lock_ (a ShardLock) guards groups_; the command path reads it under its own
// shard (port_state), changes take every shard. tpgs_ is also an atomic so that a LU
// without ALUA costs its commands one relaxed load and no lock. Unit attentions are queued
// after lock_ is dropped (the LU's ua_lock_ is never taken under it).
#pragma once

#include "core/shard_lock.h"
#include "scsi/sense.h"

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace ulp::scsi
{

class LogicalUnit;
struct NexusId;

// SPC-4 6.37 ASYMMETRIC ACCESS STATE values (the primary target port states). LBA
// dependent (4h) is not offered (LBD_SUP 0).
enum class AluaState : uint8_t {
	ActiveOptimized = 0x0,
	ActiveNonOptimized = 0x1,
	Standby = 0x2,
	Unavailable = 0x3,
	Offline = 0xe,
	Transitioning = 0xf,
};

const char *alua_state_str(AluaState s);
// Whether v is one of the AluaState values above.
bool alua_state_valid(uint8_t v);

// The TPGS field of standard INQUIRY (SPC-4 6.6.2): how the access states may change.
enum : uint8_t {
	TPGS_NONE = 0,     // no asymmetric access (the default)
	TPGS_IMPLICIT = 1, // the device server changes states itself (set_state)
	TPGS_EXPLICIT = 2, // SET TARGET PORT GROUPS changes them
	TPGS_BOTH = 3,     // both
};

// REPORT TARGET PORT GROUPS STATUS CODE (SPC-4 6.37): why the state is what it is.
enum : uint8_t {
	ALUA_STATUS_NONE = 0,     // no status available
	ALUA_STATUS_EXPLICIT = 1, // altered by SET TARGET PORT GROUPS
	ALUA_STATUS_IMPLICIT = 2, // altered by implicit asymmetric logical unit access
};

// One target port group, as configured and as reported.
struct AluaGroup {
	uint16_t id = 0;                              // TARGET PORT GROUP, unique in the LU
	AluaState state = AluaState::ActiveOptimized; // its primary access state
	bool pref = false;                            // PREF: a preferred group to access the LU
	uint8_t status = ALUA_STATUS_NONE;            // STATUS CODE (ALUA_STATUS_*); configure
	                                              // ignores it (starts at NONE)
	std::vector<uint16_t> rtpis;                  // its target ports (relative target port
	                                              // identifiers), each in one group only
};

struct AluaConfig {
	uint8_t tpgs = TPGS_NONE;             // TPGS_*: TPGS_NONE turns ALUA off
	uint8_t implicit_transition_secs = 0; // IMPLICIT TRANSITION TIME (RTPG extended
	                                      // header), seconds; 0: not specified
	std::vector<AluaGroup> groups;        // at most kMaxGroups; none when tpgs is NONE
};

// Store groups (the states after a change) durably, then done(0 or -errno) - later, on
// another thread, never inside the call (PrStore::put). Calls come in the order of the
// changes.
using AluaPersist =
    std::function<void(std::vector<AluaGroup> groups, std::function<void(int err)> done)>;

class Alua
{
public:
	// Groups per LU: what one REPORT TARGET PORT GROUPS reports easily (and a bound on
	// the daemon's configuration).
	static constexpr size_t kMaxGroups = 256;
	static constexpr size_t kMaxPortsPerGroup = 255; // TARGET PORT COUNT is one byte

	explicit Alua(LogicalUnit &lu) : lu_(lu) {}
	Alua(const Alua &) = delete;
	Alua &operator=(const Alua &) = delete;

	// Whether cfg can be configured: 0, or -EINVAL with the reason in *why (may be null):
	// tpgs above 3, groups with tpgs NONE, too many groups or ports, a group id twice, a
	// port in two groups, a state that is not an AluaState.
	static int check(const AluaConfig &cfg, std::string *why);
	// Replace the whole configuration (check()'s errors). Against the old one, to every
	// I_T nexus of the LU: INQUIRY DATA HAS CHANGED when TPGS changes or a port changes
	// group (joins one, leaves one, moves: VPD 83h's target port group designator, SPC-4
	// 6.6.1); ASYMMETRIC ACCESS STATE CHANGED when a group that stays changes state (as
	// set_state) or a port's state changes with its group (SPC-4 5.15.2.3). A group's
	// state that is what it was keeps its status code.
	int configure(const AluaConfig &cfg, std::string *why);
	// Change group id's state: 0, -ENOENT (no such group), -EINVAL (not an AluaState, or
	// ALUA is off). A change to the state it has already is 0 and changes nothing. by: the
	// I_T nexus whose SET TARGET PORT GROUPS asked (status code 01h; SPC-4 5.15.2.2: every
	// I_T nexus but that one gets the unit attention); null: an implicit transition (02h;
	// SPC-4 5.15.2.3: every I_T nexus gets it).
	int set_state(uint16_t id, AluaState state, const NexusId *by = nullptr);
	// Several explicit changes at once (SET TARGET PORT GROUPS): each (id, state) applied
	// in order under one lock, the unit attention raised once. The ids must exist
	// (-ENOENT, nothing changed).
	// done (may be null): called once the states after the change are stored by the
	// persist hook - done(0), or done(-errno) after the change is undone - or at once with
	// 0 when there is no hook or nothing changed. Not called when set_states fails.
	int set_states(const std::vector<std::pair<uint16_t, AluaState>> &changes,
	               const NexusId *by, std::function<void(int err)> done = {});
	// The durable home of the states (see above); before the LU is exported. Null: none.
	void set_persist(AluaPersist p);
	// Hand the states as they are now to the persist hook (after configure); done as for
	// set_states.
	void persist(std::function<void(int err)> done);

	uint8_t tpgs() const { return tpgs_.load(std::memory_order_relaxed); }
	bool enabled() const { return tpgs() != TPGS_NONE; }
	uint8_t implicit_transition_secs() const { return itt_.load(std::memory_order_relaxed); }
	// The group of target port rtpi and its state: false when ALUA is off or the port is
	// in no group. The command path's lookup (its own shard of lock_).
	bool port_state(uint16_t rtpi, uint16_t *group, AluaState *state);
	// The groups now (a copy, in configuration order).
	std::vector<AluaGroup> groups();
	// State changes made so far (set_state, set_states, configure), for statistics.
	uint64_t transitions() const { return transitions_.load(std::memory_order_relaxed); }

private:
	// Under lock_ (all shards): *g's state becomes s (the checked transition), with
	// status code status. Whether it changed.
	bool change_locked(AluaGroup &g, AluaState s, uint8_t status);

	// Under persist_lock_: the groups now to the hook; done(err) after.
	void persist_locked(std::function<void(int err)> done);

	LogicalUnit &lu_;
	// Orders a change and its write: held from the change to the hook's call, so that the
	// hook sees the states in the order they were made. Before lock_.
	std::mutex persist_lock_;
	AluaPersist persist_; // persist_lock_
	ShardLock lock_;
	std::vector<AluaGroup> groups_;        // lock_ (written under every shard)
	std::atomic<uint8_t> tpgs_{TPGS_NONE}; // TPGS_*; written under every shard of lock_
	std::atomic<uint8_t> itt_{0};          // implicit transition time, seconds (lock_)
	std::atomic<uint64_t> transitions_{0}; // state changes made (any thread)
};

// SPC-4 6.46 SET TARGET PORT GROUPS parameter list (p: all of it; nothing read outside):
// the (group, state) changes it asks, in order, or why it is refused (PARAMETER LIST LENGTH
// ERROR, INVALID FIELD IN PARAMETER LIST). spc_alua.cc; fuzzed by fuzz/fuzz_stpg.cc.
Sense stpg_decode(std::span<const uint8_t> p, std::vector<std::pair<uint16_t, AluaState>> *out);

} // namespace ulp::scsi
