// SPDX-License-Identifier: MIT
// tools/ulp-targetd/daemon.h - ulp-targetd as it runs: the configuration made real (logical
// units, port groups, the iSCSI and SRP targets, their portals), and every change an
// administrator can make to it while it serves. The admin socket's methods (methods.cc)
// and SIGHUP's reload (reload.cc) both change it through the operations below, so there is
// one way to add a LUN, whoever asks.
//
// Rules every operation keeps:
//   - it checks everything before it changes anything: a refused request changes nothing
//     (a backstore is opened before the LUN table learns of it; a portal is bound before it
//     is listed);
//   - it runs under lock_ (one change at a time, also against SIGHUP); the data path never
//     takes lock_ (a session logout waits without it: listing sessions goes on meanwhile);
//   - it leaves the sessions it does not touch alone, and treats those it does by the SCSI
//     rules: a LUN added or removed raises REPORTED LUNS DATA HAS CHANGED (scsi/tpg.h), a
//     removed LUN's commands complete within a grace period or are aborted, a removed
//     target's sessions are asked to log out and dropped after a grace period - each bounded,
//     with a log line while it waits;
//   - it keeps cfg_ (the running configuration, what `save` writes) in step.
// A failure is thrown as admin::MethodError {negative errno, message}.
#pragma once

#include "admin/rpc.h"
#include "admin/server.h"
#include "iscsi/target/tcp.h"
#include "iser/target/target.h"
#include "scsi/lu.h"
#include "scsi/pr.h"
#include "scsi/pr_store.h"
#include "scsi/tpg.h"
#include "srp/target/portal.h"
#include "srp/target/target.h"
#include "tools/ulp-targetd/config.h"
#include "tools/ulp-targetd/gateway.h"

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace targetd
{

namespace admin = ulp::admin;
using ulp::admin::json;

// One iSCSI target as it runs.
struct TargetRt {
	TargetCfg cfg;                       // as configured (its LUNs too); what save writes
	std::unique_ptr<ulp::scsi::Tpg> tpg; // its LUN table, ACLs and nexuses
	std::map<uint64_t, std::unique_ptr<ulp::scsi::LogicalUnit>> lus; // by LUN
	// The target ports of its portal groups after the first (cfg.portal_groups[1..], in
	// that order; tpg is the first group's). Same LUNs and ACLs as tpg.
	std::vector<std::unique_ptr<ulp::scsi::Tpg>> group_tpgs;
	std::vector<ulp::scsi::Tpg *> iscsi_tpgs() const; // tpg, then group_tpgs
	// [target.alua] as the file (or the request that made the target) last said it: a
	// reload applies a group's state only where the file changed it (reload_groups.cc).
	AluaCfg alua_file;
};

// A listening portal of any transport.
struct PortalRt {
	std::string transport;                   // "tcp", "iser", "srp"
	Portal cfg;                              // as configured (port 0: ephemeral)
	uint16_t port = 0;                       // as bound
	size_t tcp_index = 0;                    // tcp: TcpServer's portal number
	std::unique_ptr<ulp::rdma::Portal> rdma; // iser, srp
};

class Daemon
{
public:
	Daemon(const Flags &flags, Config cfg);
	~Daemon();
	Daemon(const Daemon &) = delete;
	Daemon &operator=(const Daemon &) = delete;

	// Make the configuration real, listen on every portal, start the admin socket; READY=1
	// to systemd once all of it listens. 0, or the exit status with *why: 2 when a LUN's
	// storage is missing or does not match its configuration, else 1.
	int start(std::string *why);
	// Until SIGINT or SIGTERM; SIGHUP: reload() and rescan_all(); SIGUSR1: log::reopen().
	// Then shutdown(). The exit status: 0, or kFencedExit when the gateway was fenced.
	int run();
	double start_time_seconds() const // since the Unix epoch; any thread
	{
		return std::chrono::duration<double>(start_time_.time_since_epoch()).count();
	}

	// ---- Operations (each under lock_; throws admin::MethodError) ----------------------
	json show();
	json stats();
	json session_list();
	void target_create(const TargetCfg &t, const std::string &who);
	json target_delete(const std::string &name, std::chrono::milliseconds grace,
	                   std::chrono::milliseconds timeout, const std::string &who);
	void lun_create(const std::string &target, const LunCfg &l, const std::string &who);
	json lun_delete(const std::string &target, uint64_t lun, std::chrono::milliseconds grace,
	                std::chrono::milliseconds timeout, const std::string &who);
	json lun_resize(const std::string &target, uint64_t lun, uint64_t bytes,
	                const std::string &who);
	json lun_rescan(const std::string &target, int64_t lun); // lun < 0: every LUN of it
	void acl_add(const std::string &target, const std::string &initiator,
	             const std::string &who);
	void acl_delete(const std::string &target, const std::string &initiator,
	                const std::string &who);
	void chap_set(const std::string &target, const std::optional<ulp::iscsi::ChapSecret> &chap,
	              const std::optional<ulp::iscsi::ChapSecret> &mutual, const std::string &who);
	// Redirect new logins to target there (RFC 7143 11.13.5; TargetCfg::redirect), or
	// serve them here again (address ""). Sessions already logged in stay.
	void target_redirect(const std::string &target, const std::string &address, bool permanent,
	                     const std::string &who);
	json portal_create(const std::string &transport, const std::string &address,
	                   const std::string &who);
	void portal_delete(const std::string &transport, const std::string &address,
	                   const std::string &who);
	// An ACL entry's own LUN map (srp: the SRP target's entry; target unused): lun mapped
	// to m, or unmapped (m empty). Its sessions see the new view at once, with REPORTED
	// LUNS DATA HAS CHANGED.
	void acl_map(bool srp, const std::string &target, const std::string &initiator,
	             uint64_t lun, const std::optional<MappedLun> &m, const std::string &who);
	void srp_acl_add(const std::string &initiator, const std::string &who);
	void srp_acl_delete(const std::string &initiator, const std::string &who);
	// ALUA (alua_ops.cc): each ALUA target's groups per LU (target "": every target), and
	// group's state set on every LU of target (an implicit transition).
	json alua_show(const std::string &target);
	void alua_set(const std::string &target, uint16_t group, const std::string &state,
	              const std::string &who);
	// [gateway] (gateway.h): this gateway, its groups and the others; a planned move of
	// the groups it owns to another gateway (hold_off 0: the configured one).
	json gateway_show();
	json gateway_drain(std::chrono::seconds hold_off, const std::string &who);
	json session_logout(const std::string &id, std::chrono::milliseconds grace,
	                    const std::string &who);
	void session_drop(const std::string &id, const std::string &who);
	json save(const std::string &path, const std::string &who);
	// Re-read the configuration file and apply the difference (SIGHUP, config_reload). A
	// file that does not load changes nothing. The changes made, as text lines.
	json reload(const std::string &who);
	const admin::Methods &methods() const { return methods_; }
	admin::Server *admin_server() { return admin_.get(); }

private:
	friend void add_methods(Daemon &d, admin::Methods &m); // methods.cc

	// Under lock_.
	TargetRt *find_target(const std::string &name);
	TargetRt &need_target(const std::string &name);
	std::unique_ptr<ulp::scsi::LogicalUnit> make_lu(const TargetCfg &t, const LunCfg &l);
	std::unique_ptr<TargetRt> make_target(const TargetCfg &t); // with its LUNs
	ulp::iscsi::target::TargetNode node_of(const TargetRt &t);
	bool exported_by_srp(const TargetRt &t) const;
	void ensure_srp();
	std::vector<ulp::scsi::Tpg *> tpgs_of(const TargetRt &t);
	void drop_lu(std::unique_ptr<ulp::scsi::LogicalUnit> lu,
	             const std::vector<ulp::scsi::Tpg *> &tpgs, std::chrono::milliseconds grace,
	             std::chrono::milliseconds timeout, json *out);
	PortalRt open_portal(const std::string &transport, Portal p); // throws
	void refresh_portal_addresses();
	void rescan_all();
	json reload_locked(const std::string &who);
	// A reload's portal groups and ALUA (reload_groups.cc): what next cannot change in the
	// running targets, thrown before anything changes; then, per target that stays, its
	// groups and [target.alua] made want's (sessions of a removed group asked to log out
	// within grace, its port freed within timeout), each change told to note.
	void groups_check(const Config &next);
	void groups_apply(TargetRt &t, const TargetCfg &want, std::chrono::milliseconds grace,
	                  std::chrono::milliseconds timeout,
	                  const std::function<void(const std::string &)> &note);
	json io_stats(); // stats()'s "io": per target, LUN, session, connection
	// Gateway mode: each target's rtpis (its portal groups', and the SRP port's when SRP
	// exports it), what the gateway records in the cluster map.
	Gateway::Ports gateway_ports() const;
	// A LU made by make_lu that will not be published after all (or no longer is, no
	// command running on it): forgotten by the gateway before it is freed.
	void forget_lu(const ulp::scsi::LogicalUnit *lu);
	std::string srp_exports_line();
	// ALUA states in the state directory (alua_ops.cc): read into a LU's configuration
	// before it is applied; written by the LU itself on every change (SET TARGET PORT
	// GROUPS, alua_set, a reload) through the hook alua_persist_hook gives it (null
	// without a state directory).
	void alua_load_states(const ulp::scsi::LogicalUnit &lu, ulp::scsi::AluaConfig *cfg);
	ulp::scsi::AluaPersist alua_persist_hook(const ulp::scsi::LogicalUnit &lu);
	// Run start(done) - a set_states or persist of lu - and wait (bounded, 10 s) for done:
	// start's own error, or done's (-ETIMEDOUT when late), logged.
	int alua_wait(const ulp::scsi::LogicalUnit &lu,
	              const std::function<int(std::function<void(int)>)> &start);
	// a's group states made what target t's LUs have now (its lowest LUN's).
	void alua_states_now(const TargetRt &t, AluaCfg *a) const;

	Flags flags_;
	Config cfg_; // the running configuration
	// A reload is applying a file (lock_): a LUN it deletes may still be mapped by an ACL
	// entry, whose map the reload sets to the file's once the LUNs are.
	bool reloading_ = false;
	// One change at a time. Recursive: a reload applies its difference through the same
	// operations the admin methods call, each of which takes it.
	std::recursive_mutex lock_;
	// The state directory's store (null when it cannot be used: APTPL 1 is refused). Before
	// targets_ and zombie_lus_: it outlives their logical units.
	std::unique_ptr<ulp::scsi::PrStore> pr_store_;
	std::vector<std::unique_ptr<TargetRt>> targets_;
	std::unique_ptr<ulp::iscsi::target::Target> iscsi_;
	std::unique_ptr<ulp::iscsi::target::TcpServer> tcp_;
	std::vector<PortalRt> portals_;
	std::vector<std::unique_ptr<ulp::rdma::Portal>> retired_; // removed RDMA portals
	// The RDMA provider (the named device's, or soft devices made per address).
	ulp::Provider *provider_ = nullptr;
	std::vector<ulp::Device *> soft_devices_;
	std::vector<std::string> soft_ips_;
	std::string rdma_host_; // the named device's address (portals with no host)
	std::unique_ptr<ulp::scsi::Tpg> srp_tpg_;
	std::unique_ptr<ulp::srpt::Target> srp_;
	// Removed but still busy after their bound: left allocated (freeing them could let a
	// late completion touch freed memory), logged.
	std::vector<std::unique_ptr<ulp::scsi::LogicalUnit>> zombie_lus_;
	std::vector<std::unique_ptr<ulp::scsi::Tpg>> zombie_tpgs_;
	// [gateway]: the cluster map, the groups' owners (null: not a gateway). After
	// targets_, so destroyed first: its threads end before the LUs they touch go.
	std::unique_ptr<Gateway> gateway_;
	std::atomic<bool> fenced_{false}; // the gateway was fenced: run() returns kFencedExit
	admin::Methods methods_;
	std::unique_ptr<admin::Server> admin_;
	bool started_ = false;
	// When the daemon started (version_get, Prometheus' ulp_start_time_seconds). Constant.
	const std::chrono::system_clock::time_point start_time_ = std::chrono::system_clock::now();
};

// Block SIGINT, SIGTERM, SIGHUP and SIGUSR1 in the calling thread and every thread it starts later;
// Daemon::run takes them with sigwaitinfo. Call first in main, before any thread exists.
void block_signals();

// An operation's failure: throws admin::MethodError {err (a negative errno), msg}.
[[noreturn]] void fail(int err, const std::string &msg);

// Whether two targets' portal groups are the same: tags, rtpis and portals, in order
// (reload_groups.cc).
bool same_portal_groups(const TargetCfg &a, const TargetCfg &b);

// The RPC method table over a daemon (methods.cc).
void add_methods(Daemon &d, admin::Methods &m);

} // namespace targetd
