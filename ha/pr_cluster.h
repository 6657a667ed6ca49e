// SPDX-License-Identifier: MIT
// ha/pr_cluster.h - the persistent reservations of a LU that several gateways serve, kept
// in RADOS: the store of scsi/pr_shared.h (which says what is kept and how a PERSISTENT
// RESERVE OUT changes it), one object per LU.
//
// The object, "ulp.pr.<16 hex digits of the LU identity's hash>" in the pool and namespace
// the daemon names, is a cluster map (cluster_map.h): its records are pr_shared.h's (the
// state image, PRgeneration, APTPL, the recent changes' events) and one per gateway that
// serves the LU ("gw.<gid>", records.h PrGatewayRecord: its name, its client's address, its
// relative target port ids of the LU), and every change is a compare-and-set on the map's
// version. The gateways' records are written without a notify (nothing to install): on
// attach, when the LU's ports change (check_watch, or with the next change of the state),
// and removed on detach; those of an earlier process of the same gateway are removed once
// it can no longer be watching (twice the watch timeout after attach).
//
// Every gateway watches the object, answering notifies itself (ClusterMap::watch_acked):
// a notify of version v is read and installed on this gateway's watch thread, and answered
// once the tasks it aborted here have ended (pr_shared_changed). A PERSISTENT RESERVE OUT
// runs on this gateway's store thread (another one: a gateway waiting for the answers to its
// own announcement still answers the others'); its announcement is a notify bounded by
// notify_timeout. A gateway that does not answer in time is handed to on_peer_timeout,
// which the daemon makes fence it (blocklist its client: the client its LU I/O goes
// through, scsi/rados_client.h, so that it writes nothing more); the announcement counts
// as done once that returned 0, and fails otherwise. This gateway's own watch is not
// waited for: it installed the change itself before announcing it.
//
// A watch that broke (the OSD restarted, the session was lost for longer than the watch
// timeout) is told to re-read: the state is read and installed again, and check_watch() -
// the daemon's timer - registers the watch again.
//
// Threads: "ulp-pr-out" (PERSISTENT RESERVE OUT and IN, in order) and "ulp-pr-watch"
// (notifies), per LU. Every RADOS call is bounded by the client's timeouts
// (RadosConfig::timeout_s) and the notify's by notify_timeout.
#pragma once

#include "ha/cluster_map.h"
#include "scsi/pr_shared.h"
#include "scsi/rados_client.h"

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace ulp::scsi
{
class LogicalUnit;
}

namespace ulp::ha
{

// A watcher of a LU's reservation object that did not answer an announcement in time.
struct PrPeer {
	uint64_t gid = 0;    // its RADOS client's instance id (client.<gid>)
	uint64_t cookie = 0; // its watch
	std::string gateway; // the gateway's name, from its record ("": none, not a gateway's)
	std::string addr;    // its client's address and nonce, from its record ("": unknown)
};

struct PrClusterConfig {
	std::string pool;     // the pool of the reservation objects
	std::string nspace;   // its namespace ("": the default)
	std::string gateway;  // this gateway's name (ha_name_valid), as its record gives it
	std::string identity; // the LU's identity, alike at every gateway; "": the backstore's
	                      // (Backstore::identity, e.g. "rbd:<fsid>/<pool id>/<image id>")
	// How long an announcement waits for every gateway to have installed a change: 1 s or
	// more, in whole seconds (the OSD counts a notify's timeout so; the rest is dropped).
	std::chrono::milliseconds notify_timeout{5000};
	// A gateway did not answer in time: fence it, and return 0 once it can write no more
	// (its client blocklisted, the OSD map that says so awaited), else a negative errno.
	// Called on the LU's store thread; the daemon bounds it. Empty: nobody is fenced and
	// such an announcement fails (the PERSISTENT RESERVE OUT with it).
	std::function<int(const PrPeer &)> on_peer_timeout;
};

// The object's name for a LU identity.
std::string pr_cluster_oid(const std::string &identity);

class PrCluster final : public scsi::PrShared
{
public:
	// Share lu's reservations through client (the LU's group's: its I/O's) as cfg says,
	// before lu is exported: the state is read and becomes lu's (scsi/pr_shared.h
	// pr_attach_shared), this gateway's record is written and the watch set up. nullptr with
	// *err and *why when that cannot be done.
	static std::unique_ptr<PrCluster> attach(scsi::LogicalUnit &lu,
	                                         std::shared_ptr<scsi::RadosClient> client,
	                                         PrClusterConfig cfg, int *err, std::string *why);
	// After lu is no longer exported (no command runs on it), before lu goes: stops the
	// watch and the threads, removes this gateway's record; lu keeps its state, unshared.
	~PrCluster() override;
	// This gateway's client is fenced or cut off from the cluster: the same as the
	// destructor, but this gateway's record is left (removing it would be refused, or hold
	// the caller for the client's timeouts) until the other gateways fence this client or
	// prune it. Before lu goes.
	void abandon();
	PrCluster(const PrCluster &) = delete;
	PrCluster &operator=(const PrCluster &) = delete;

	// The daemon's timer: the watch registered again if it broke (and the state re-read),
	// this gateway's record brought up to date. 0, or a negative errno (tried again next
	// time).
	int check_watch();

	const std::string &oid() const { return map_->oid(); }
	uint64_t gid() const { return gid_; }

	// scsi::PrShared
	void post(std::function<void()> job) override;
	int read(scsi::PrSharedView *out) override;
	int write(uint64_t expect, const scsi::PrSharedChange &c, uint64_t *now) override;
	int announce(uint64_t version) override;

	class Worker;  // a thread running jobs in order (pr_cluster.cc)
	struct AckBox; // where answers go, and nowhere once this is gone

private:
	PrCluster(scsi::LogicalUnit &lu, std::shared_ptr<scsi::RadosClient> client,
	          PrClusterConfig cfg, std::unique_ptr<ClusterMap> map);
	void on_watch(const ClusterMapNotify *n);
	void reread(); // read and install the state again, on the watch thread
	// This gateway's record as it should be now; *ports what it says.
	std::string own_record(std::vector<uint16_t> *ports) const;
	// Write (or with erase, remove) this gateway's record, and with prune the records of
	// earlier processes of the same gateway, by compare-and-set without a notify.
	int write_record(bool erase, bool prune);
	// The watch, the threads and lu's sharing ended, once: true the first time.
	bool stop_sharing();

	scsi::LogicalUnit &lu_;                     // the LU (outlives this)
	std::shared_ptr<scsi::RadosClient> client_; // the LU's group's client
	const PrClusterConfig cfg_;                 // as given, identity filled in
	std::unique_ptr<ClusterMap> map_;           // the LU's reservation object
	const uint64_t gid_;                        // the client's instance id
	const std::string addr_;                    // the client's address and nonce
	std::unique_ptr<Worker> out_;               // "ulp-pr-out": post()'s jobs
	std::unique_ptr<Worker> watch_;             // "ulp-pr-watch": notifies
	std::shared_ptr<AckBox> acks_;              // answers to notifies
	// A re-read after a broken watch failed: check_watch() tries again (set from any thread).
	std::shared_ptr<std::atomic<bool>> reread_ = std::make_shared<std::atomic<bool>>(false);
	std::mutex reg_lock_;             // guards the two below
	std::vector<uint16_t> reg_ports_; // the ports this gateway's record names
	bool pruned_ = false;             // earlier processes' records removed
	bool unshared_ = false;           // stop_sharing() ran (abandon(), or the destructor)
	const std::chrono::steady_clock::time_point attached_; // when attach() ran
};

} // namespace ulp::ha
