// SPDX-License-Identifier: MIT
// ha/group_owner.h - which gateway serves a group of LUs: one owns it at a time, by its
// lease (lease.h); the others stand by. This gateway's side of it, as a state machine that
// the daemon's timer ticks, and the ALUA state (SPC-4 5.15.2) its ports report for the
// group's LUs in each state.
//
//   Standby ---acquire ok---> Fencing ---previous owner fenced, record written,
//     ^  ^                      |          on_active ok---> Active <---renew ok---+
//     |  |                      | (fails: lease released)      |                  |
//     |  +----------------------+                  renew fails, |            Expiring
//     |                                            margin left  +--------------->|
//     +--- drain(): on_release, record "released", lease released <-- Active     |
//                                                                                 v
//   Fenced <--- lease lost (expired, taken, blocklisted) from Active or Expiring --+
//
// Standby: another gateway owns the group (or nobody yet). Its ports report Standby, so
//   I/O through them never moves the RBD exclusive lock (no owner ping-pong). Each tick it
//   tries the lease; a lease is free only when its holder released it or stopped renewing.
// Fencing: the lease is ours; unless the previous owner's record says it released the
//   group, its client is blocklisted and the latest OSD map awaited, so that nothing it
//   still has queued can land; then our record is written (compare-and-set) and on_active
//   runs (the daemon takes the RBD exclusive locks). Ports: Transitioning.
// Active: the owner. Ports: Active/Optimized. Renews each tick.
// Expiring: renewals failing with less than the margin left of the lease: Transitioning,
//   so that no new command completes GOOD on a lease that may run out under it; a renewal
//   that succeeds makes it Active again.
// Fenced: the lease ran out or another gateway took it (then this client is blocklisted):
//   Unavailable, and terminal for this client; the daemon reconnects with a new client
//   (another nonce) and makes a new GroupOwner.
#pragma once

#include "core/check.h"
#include "ha/cluster_map.h"
#include "ha/lease.h"
#include "ha/records.h"

#include <chrono>
#include <functional>
#include <memory>
#include <string>

namespace ulp::ha
{

enum class OwnerState : uint8_t { Standby, Fencing, Active, Expiring, Fenced };
const char *owner_state_str(OwnerState s);

// What this gateway's ports report for the group's LUs (SPC-4 5.15.2.2 to 5.15.2.6).
enum class PortAccess : uint8_t { ActiveOptimized, Standby, Transitioning, Unavailable };
PortAccess port_access(OwnerState s);
const char *port_access_str(PortAccess a);

struct GroupOwnerConfig {
	std::string gateway;   // this gateway's name, unique in the cluster (ha_name_valid)
	std::string group;     // the group of LUs (ha_name_valid)
	std::string lease_oid; // the group's lease object ("ulp.lease.<group>")
	std::chrono::seconds lease{10};         // the lease's duration; ticks come every lease/3
	std::chrono::milliseconds margin{2000}; // Expiring when renewals fail with less left
	uint32_t blocklist_s = 3600;            // how long a fenced client stays blocklisted
	// Called in Fencing, after the previous owner is fenced: take what ownership needs (the
	// RBD exclusive locks). 0, or a negative errno: the lease is released, back to Standby.
	std::function<int()> on_active;
	// Called by drain() before the lease is released: stop I/O, let the locks go.
	std::function<void()> on_release;
};

class GroupOwner
{
public:
	using Clock = Lease::Clock;

	// map: the cluster map the owner records go to; lease: the group's, on the group's
	// client (the client its LUs write through). Both outlive nothing: owned here.
	GroupOwner(GroupOwnerConfig cfg, std::unique_ptr<ClusterMap> map,
	           std::unique_ptr<Lease> lease);

	// One step: what the state asks (try the lease, renew it, fence and take over, notice
	// its loss). Call every lease/3 at least. Blocks for up to the client's timeouts.
	void tick(Clock::time_point now = Clock::now());

	// A planned move away from this gateway: on_release, our record marked released (so
	// that the successor fences nobody), the lease released, back to Standby; and no
	// acquiring for hold_off, so that another gateway takes the group. 0, or -EINVAL when
	// not Active.
	int drain(std::chrono::seconds hold_off);

	OwnerState state() const { return state_; }
	// Until when this gateway may act as the owner (Lease::valid_until); the epoch when it
	// holds no lease.
	Clock::time_point valid_until() const { return lease_->valid_until(); }
	PortAccess access() const { return port_access(state_); }
	// The owner the map names for the group, as last read ("" none); epoch with it.
	const OwnerRecord &owner() const { return owner_; }
	const GroupOwnerConfig &config() const { return cfg_; }

private:
	void set_state(OwnerState s);
	void try_acquire();
	void renew(Clock::time_point now);
	int fence_previous(const OwnerRecord &prev);
	int write_record(bool released);
	void read_owner();

	GroupOwnerConfig cfg_;                   // as given
	std::unique_ptr<ClusterMap> map_;        // the cluster map (owner records)
	std::unique_ptr<Lease> lease_;           // the group's lease, on the group's client
	OwnerState state_ = OwnerState::Standby; // changed by set_state() only
	OwnerRecord owner_;                      // the map's owner record, as last read or written
	Clock::time_point hold_off_{};           // no acquiring before (after a drain)
};

} // namespace ulp::ha
