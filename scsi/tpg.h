// SPDX-License-Identifier: MIT
// scsi/tpg.h - what an initiator logs in to: a target port group with its LUNs and
// access control lists, and the sessions (I_T nexuses) on it (the kernel's
// se_portal_group, se_lun, se_node_acl and se_session).
//
// A fabric owns one Tpg per target it serves (an iSCSI target name and its portal group
// tag, an SRP target port). Logging in asks the Tpg for a Nexus; the ACLs decide
// whether the initiator may in and which LUNs it sees. Without any ACL the Tpg is open:
// every initiator sees every LUN (LIO's generate_node_acls, tgt's ALL).
//
// Locking: lock_ (a ShardLock: the thread's own shard for lookups on the data path,
// lock_all for changes) guards the LUN table, the ACLs and the session list. life_lock_
// keeps a removed LU from being freed under the slow paths that use LUs found in the table
// outside lock_ (task management, session loss): they hold it shared (LuLifeGuard),
// remove_lun exclusive. Order: life_lock_, lock_, then a session's sess_lock_ or an LU's
// locks.
//
// Run-time changes (ulp-targetd's admin interface, SPC-4 5.14 / 6.33): adding or removing a
// LUN queues REPORTED LUNS DATA HAS CHANGED for every nexus whose view changed, on each LU
// it still sees and has used (one it has not used reports POWER ON first anyway). A removed
// LU may still have commands in flight that found it before: lu_quiesce() waits for them
// (and aborts them after a grace period), bounded, before the owner may free it.
#pragma once

#include "scsi/cmd.h"
#include "scsi/lu.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <shared_mutex>
#include <string>
#include <vector>

namespace ulp::scsi
{

class Fabric;
class Tpg;

// A LUN of a target port group: which logical unit it is, and how it is offered.
struct LunEntry {
	LogicalUnit *lu = nullptr;
	bool read_only = false; // writes refused with DATA PROTECT for every initiator
};

// Access for one initiator (by name: an iSCSI name, an SRP initiator port GUID in hex).
struct NodeAcl {
	std::string initiator;
	// mapped LUN -> the Tpg's LUN and read-only flag; empty: every LUN of the Tpg as is
	std::map<uint64_t, std::pair<uint64_t, bool>> luns;
};

// An I_T nexus. Created by Tpg::open_session, destroyed by Tpg::close_session after its
// commands are gone.
class Nexus
{
public:
	Tpg &tpg() const { return tpg_; }
	Fabric &fabric() const { return fabric_; }
	const std::string &initiator() const { return initiator_; } // initiator name
	const NexusId &id() const { return id_; }                   // initiator port + rtpi
	void *fabric_priv = nullptr;                                // the fabric's own

	// Resolve a LUN for this initiator (ACL mapping applied); nullptr when it does not
	// exist for it. *read_only tells whether it is mapped read-only. pin (a command's
	// lu_pin): set to the result under the Tpg's lock, for lu_users.
	LogicalUnit *lookup_lun(uint64_t lun, bool *read_only,
	                        std::atomic<LogicalUnit *> *pin = nullptr) const;
	// The LUNs this initiator sees, ascending (REPORT LUNS).
	std::vector<uint64_t> luns() const;

	// Commands submitted on this session and not yet released by the core.
	size_t cmd_count();
	// Clear condition asc_ascq for this nexus on every LU it sees (REPORT LUNS clears
	// REPORTED LUNS DATA HAS CHANGED for the whole inventory it reports).
	void ua_clear_everywhere(uint16_t asc_ascq);

	// The core's: the commands in flight (sess_lock_), for I_T NEXUS RESET and teardown.
	std::mutex sess_lock_;
	CmdSessList cmds_;
	std::condition_variable idle_cv_; // signalled when cmds_ empties
	bool stopping_ = false;           // no new commands (set by session_stop)
	bool lost_ = false;               // Tpg::session_lost has run (sess_lock_)
	IoStats stats_; // its commands and TMFs (core.cc, tmr.cc; sharded, any thread)

private:
	friend class Tpg;
	Nexus(Tpg &tpg, Fabric &fabric, std::string initiator, std::string initiator_port,
	      std::shared_ptr<const NodeAcl> acl);

	Tpg &tpg_;
	Fabric &fabric_;
	std::string initiator_;
	NexusId id_;
	// The ACL it logged in under (kept while it lives, also once removed from the Tpg);
	// null: an open Tpg. Replaced by Tpg::replace_acl under the Tpg's lock_ (all shards):
	// read under one shard.
	std::shared_ptr<const NodeAcl> acl_;
};

class Tpg
{
public:
	// name: the target's name (iSCSI target name, SRP target port id); rtpi: the relative
	// target port identifier reported in VPD 0x83 and used in reservations.
	Tpg(std::string name, uint16_t rtpi);
	~Tpg();
	Tpg(const Tpg &) = delete;
	Tpg &operator=(const Tpg &) = delete;

	const std::string &name() const { return name_; }
	uint16_t rtpi() const { return rtpi_; }

	// Configuration (before or while serving). -EEXIST, -ENOENT, -EINVAL.
	int add_lun(uint64_t lun, LogicalUnit &lu, bool read_only = false);
	int add_acl(const NodeAcl &acl);
	bool open_access() const; // no ACL configured: everyone in, every LUN
	// Unmap lun: commands submitted from now on do not find it; *lu (may be null) is what
	// it was. The LU may still be mapped elsewhere and have commands in flight (lu_quiesce).
	// -ENOENT.
	int remove_lun(uint64_t lun, LogicalUnit **lu);
	// An ACL removed: new logins of that initiator are refused (or, when it was the last
	// ACL, everyone is admitted: the Tpg is open again). Its sessions stay, with the LUN
	// view they logged in with. -ENOENT.
	int remove_acl(const std::string &initiator);
	// Replace an existing ACL's LUN map (same initiator). Its sessions take the new view
	// at once, and hear REPORTED LUNS DATA HAS CHANGED on the LUs it holds (SPC-4 5.14).
	// -ENOENT (no such ACL, or a mapped LUN the Tpg lacks), -EINVAL.
	int replace_acl(const NodeAcl &acl);
	std::map<uint64_t, LunEntry> lun_entries() const; // the LUN table (a copy)
	std::vector<std::string> acl_names() const;
	// Commands of this Tpg's sessions whose LUN lookup found lu and that the core has not
	// released yet.
	size_t lu_users(const LogicalUnit *lu) const;

	// Held (shared) by the slow paths that use LUs found through the table outside lock_.
	std::shared_lock<std::shared_mutex> life_guard() const
	{
		return std::shared_lock<std::shared_mutex>(life_lock_);
	}

	// Whether initiator may log in (ACL, or open access).
	bool allowed(const std::string &initiator) const;

	// A new I_T nexus for an initiator port (TransportID text) of initiator, or nullptr
	// when the ACLs refuse it (errno EACCES).
	Nexus *open_session(Fabric &fabric, const std::string &initiator,
	                    const std::string &initiator_port);
	// The I_T nexus is lost (SAM-5 6.3.4: its connection died, or it logged out): no new
	// commands, every command in flight aborted (no responses to this session), and what
	// the nexus held on each LU let go at once - its SPC-2 reservation, its prevention of
	// medium removal - with I_T NEXUS LOSS OCCURRED queued for it. Does not wait for the
	// aborted commands, so a fabric calls it from the thread that notices the loss,
	// before a new session of the same initiator can log in. Idempotent; close_session
	// does it too.
	void session_lost(Nexus *s);
	// Tear a session down (the fabric's connection is gone or logged out): session_lost,
	// a wait for the commands in flight bounded by timeout with a log line every few
	// seconds, then the session is freed. Returns 0, or -ETIMEDOUT when commands were still in
	// flight (the session is then left allocated and intact: freeing it would let a late
	// completion touch freed memory). Must not be called from a thread those commands need in
	// order to finish.
	int close_session(Nexus *s, std::chrono::milliseconds timeout);

	// Sessions, for I_T NEXUS RESET-like walks and diagnostics.
	std::vector<Nexus *> sessions() const;
	// The I/O of every session it has had: those closed (folded in by close_session) and
	// those open now. Never goes backwards while the Tpg lives.
	IoCounts io_counts() const;

	// Internal: a session's LUN lookup, its ACL read under lock_.
	LogicalUnit *lookup_for(const Nexus &s, uint64_t lun, bool *read_only,
	                        std::atomic<LogicalUnit *> *pin) const;
	std::vector<uint64_t> lun_list_for(const Nexus &s) const;
	void ua_clear_all_for(const Nexus &s, uint16_t asc_ascq) const;
	// Internal: the LUN lookup for an ACL.
	LogicalUnit *lookup(uint64_t lun, const NodeAcl *acl, bool *read_only,
	                    std::atomic<LogicalUnit *> *pin = nullptr) const;
	std::vector<uint64_t> lun_list(const NodeAcl *acl) const;
	void ua_clear_all(const NodeAcl *acl, const NexusId &n, uint16_t asc_ascq) const;

private:
	// REPORTED LUNS DATA HAS CHANGED for the nexuses (not mapped by an ACL of their own)
	// on every LU but skip they have used. Under lock_.
	void luns_changed_locked(const LogicalUnit *skip);
	// Under lock_ (one shard at least).
	LogicalUnit *lookup_locked(uint64_t lun, const NodeAcl *acl, bool *read_only,
	                           std::atomic<LogicalUnit *> *pin) const;
	std::vector<uint64_t> lun_list_locked(const NodeAcl *acl) const;
	std::set<LogicalUnit *> lus_of_locked(const NodeAcl *acl) const; // the LUs it sees

	std::string name_;
	uint16_t rtpi_;
	mutable std::shared_mutex life_lock_;
	mutable ShardLock lock_; // split by thread: lookups take their own shard
	std::map<uint64_t, LunEntry> luns_;
	std::map<std::string, std::shared_ptr<const NodeAcl>> acls_;
	std::vector<std::unique_ptr<Nexus>> sessions_;
	IoCounts retired_; // the statistics of the sessions closed (lock_)
};

// Wait until no command of any session of tpgs holds lu (it has been removed from all of
// them), at most grace; then abort what is left on it (TASK ABORTED to the nexuses, as a
// CLEAR TASK SET by another initiator would) and wait up to timeout more, with a log line
// every few seconds. 0: the LU may be freed; -ETIMEDOUT: it must be left allocated (a
// late completion would touch freed memory), logged.
int lu_quiesce(LogicalUnit &lu, const std::vector<Tpg *> &tpgs, std::chrono::milliseconds grace,
               std::chrono::milliseconds timeout);

} // namespace ulp::scsi
