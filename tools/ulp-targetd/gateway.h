// SPDX-License-Identifier: MIT
// tools/ulp-targetd/gateway.h - ulp-targetd as one of several gateways on one Ceph cluster
// ([gateway], docs/ha.md): what it tells the others through the cluster map (ha/), which
// groups of LUs it owns (ha/group_owner.h), and the ALUA states (SPC-4 5.15) every LU's
// ports report from that.
//
// The map holds, besides each group's owner record:
//   gw/<gateway>          id=<n>       its target port group id, allocated at its first
//                                      join (the lowest free one) and kept by name
//   port/<target>/<gw>    rtpis=<r,..> its ports of that target
// so that every gateway answers REPORT TARGET PORT GROUPS alike: one group per gateway, its
// ports, active/optimized for the gateway that owns the LU's group and standby for the
// others (never active/non-optimized: I/O there would move the image's exclusive lock).
// Its own group's state follows its GroupOwner: transitioning while it fences and takes
// the images' locks, or when its lease nears its end without a renewal; unavailable once
// fenced.
//
// Threads: the gateway's thread ("ulp-gateway") ticks the group owners every lease/3
// (RADOS calls, each bounded by the client's timeouts), re-reads the map (every tick, and
// at once on a notify), and applies the states to the LUs. A guard thread
// ("ulp-gw-guard") needs no RADOS: every 200 ms it makes an owner's LUs transitioning once
// its lease is within the margin of its end, so that a tick stuck in a RADOS call does not
// leave the ports active/optimized past the lease.
// A group that ends Fenced (the lease lost; this client perhaps blocklisted) is final for
// this process's client: the daemon exits with kFencedExit, which the unit restarts
// (Restart=on-failure) with a new client that joins again as standby.
//
// Locking, in this order: the daemon's lock_, then owner_mu_ (held across a group owner's
// tick or drain, which call RADOS and the images' locks: remove_lu waits for it, so that no
// LU is freed under on_active), then mu_ (the records, groups and LU lists; never held
// across a RADOS call). The LUs registered here are the daemon's: add_lu before the LU is
// exported, remove_lu before it is freed.
#pragma once

#include "admin/rpc.h"
#include "ha/cluster_map.h"
#include "ha/group_owner.h"
#include "ha/pr_cluster.h"
#include "scsi/alua.h"
#include "scsi/lu.h"
#include "scsi/rados_client.h"
#include "tools/ulp-targetd/config.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace targetd
{

// The exit status of a daemon whose gateway was fenced: not 2 (the unit restarts it).
inline constexpr int kFencedExit = 3;

class Gateway
{
public:
	using Clock = ulp::ha::GroupOwner::Clock;
	// This gateway's ports per target (the rtpis of its portal groups and SRP port).
	using Ports = std::map<std::string, std::vector<uint16_t>>;

	// Connect the map's client, join the cluster map (the gateway record, allocating the
	// group id on the first join; the port records) and read it. nullptr with *why when
	// the cluster cannot be reached or another gateway already has one of ports' rtpis in
	// the same target. Blocks for up to the client's timeouts.
	static std::unique_ptr<Gateway> open(const GatewayCfg &cfg, const Ports &ports,
	                                     std::string *why);
	~Gateway(); // stop()s
	Gateway(const Gateway &) = delete;
	Gateway &operator=(const Gateway &) = delete;

	// Register lu (an rbd LU of target, in group, opened through rcfg's client) before it
	// is exported: its ALUA configured from the map as it stands (its group's state here
	// standby until this gateway owns it), and the group's owner made on the group's first
	// LU. 0, or a negative errno with *why (the lease cannot be opened).
	int add_lu(const std::string &target, ulp::scsi::LogicalUnit *lu,
	           const ulp::scsi::RadosConfig &rcfg, std::string *why);
	// Forget lu (before it is freed), once no command runs on it: its reservations
	// unshared. exported: commands may still run on it (a LU left allocated after its
	// bound): its reservation store is left allocated too. Its group's owner stays.
	void remove_lu(const ulp::scsi::LogicalUnit *lu, bool exported = false);
	// The ports changed (a reload, a target made or removed): rewrite the port records.
	void set_ports(const Ports &ports);

	// Start ticking. fenced() runs (on the gateway's thread) when a group ends Fenced.
	void start(std::function<void()> fenced);
	// A planned stop: each group owned here is drained (its LUs transitioning, the image
	// locks released, the owner record marked released, the lease let go) unless the
	// gateway was fenced; then the threads end. Bounded by the client's timeouts.
	void stop(bool drain);
	// A planned move of every group owned here to another gateway (ulpctl gateway drain):
	// no acquiring for hold_off (0: the configured hold_off). The groups drained.
	std::vector<std::string> drain(std::chrono::seconds hold_off);
	// For gateway_show: this gateway, its groups (state, owner, lease left), the gateways
	// and the map's version.
	ulp::admin::json show();

	const GatewayCfg &config() const { return cfg_; }
	uint16_t id() const { return id_; }

private:
	struct Group {
		std::string name;                               // the group (RbdConfig::group)
		std::unique_ptr<ulp::ha::GroupOwner> own;       // its owner side here
		std::shared_ptr<ulp::scsi::RadosClient> client; // the group's (its LUs' I/O's)
		// Fences a gateway that did not answer a reservation change (its client
		// blocklisted): the lease's fence() on the group's client.
		std::unique_ptr<ulp::ha::Lease> fencer;
		// Each LU's reservations, shared with the other gateways (ha/pr_cluster.h);
		// owner_mu_.
		std::map<const ulp::scsi::LogicalUnit *, std::unique_ptr<ulp::ha::PrCluster>> pr;
		std::vector<ulp::scsi::LogicalUnit *> lus;                    // its LUs here (mu_)
		std::map<const ulp::scsi::LogicalUnit *, std::string> target; // each LU's target
		// The owner's state and lease end, as the last tick left them: the guard reads them
		// without calling into the owner (which a tick may be blocked in).
		std::atomic<ulp::ha::OwnerState> state{ulp::ha::OwnerState::Standby};
		std::atomic<int64_t> valid_until_ns{0}; // Clock's epoch-relative, ns
		std::atomic<bool> guarded{false};       // the guard made its LUs transitioning
	};

	Gateway(GatewayCfg cfg, std::shared_ptr<ulp::scsi::RadosClient> client,
	        std::unique_ptr<ulp::ha::ClusterMap> map);
	int join(const Ports &ports, std::string *why);
	void run();
	void guard();
	void refresh(); // re-read the map (not under mu_)
	void apply();   // every LU's ALUA from the map
	ulp::scsi::AluaConfig want(const std::string &target, const Group &g); // under mu_
	ulp::scsi::AluaState local_state(const Group &g) const;
	void set_local(Group &g, ulp::scsi::AluaState s); // its LUs' own group to s
	Group *find_group(const std::string &name);       // under mu_

	const GatewayCfg cfg_;                           // as configured
	std::shared_ptr<ulp::scsi::RadosClient> client_; // the map's client
	std::unique_ptr<ulp::ha::ClusterMap> map_;       // the cluster map, watched
	uint16_t id_ = 0;                                // our target port group id
	std::mutex owner_mu_;                            // a tick or drain of the owners
	std::mutex mu_;                                  // guards what follows
	Ports ports_;                                    // ours, as last recorded
	bool ports_dirty_ = false;                       // set_ports since the last write
	ulp::ha::ClusterMapView view_;                   // the map as last read
	std::vector<std::unique_ptr<Group>> groups_;     // by first use; never removed
	std::condition_variable cv_;                     // wakes the gateway's thread
	bool kick_ = false;                              // a notify, or work: tick now
	bool stopping_ = false;                          // stop() was called
	bool fenced_ = false;                            // a group ended Fenced
	std::function<void()> on_fenced_;                // start()'s
	std::thread thread_, guard_;                     // ulp-gateway, ulp-gw-guard
};

} // namespace targetd
