// SPDX-License-Identifier: MIT
// iscsi/target/target.h - an iSCSI target node set: the targets one portal group serves, their
// sessions, and the answers the login and discovery engines need (the kernel's
// iscsi_target_tpg.c and iscsi_target_login.c session half).
//
// A Target is transport neutral. Transports (TCP: iscsi/target/tcp.h; iSER: iser/target/target.h)
// accept connections and run a Conn (iscsi/target/conn.h) on each; a Conn's login asks the Target
// which targets exist, who may log in and how, and finally which session it joins. The
// session's SCSI side is a scsi::Nexus on the target's scsi::Tpg, whose fabric is the
// Target's (every SCSI callback is routed to the command's connection).
//
// Sessions here: one connection each (MaxConnections is offered as 1), ERL 0, session
// reinstatement (a leading login with an ISID and initiator name that already have a
// session closes the old one first, RFC 7143 6.3.5).
//
// Teardown: closing a session aborts its commands and waits for them (scsi::Tpg::
// close_session), which must not run on a connection's own thread (the aborted commands
// need it to finish). It runs on the target's reaper thread, bounded and logged; the
// connection is freed after.
#pragma once

#include "iscsi/chap.h"
#include "iscsi/discovery.h"
#include "iscsi/params.h"
#include "iscsi/target/addr_acl.h"
#include "iscsi/target/login.h"
#include "scsi/fabric_route.h"
#include "scsi/reaper.h"
#include "scsi/stats.h"
#include "scsi/tpg.h"

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace ulp::iscsi::target
{

class Conn;
class Session;

// A portal group of a target node (RFC 7143 4.4.1): the portals a login may come in on to
// reach the node through this group's SCSI target port (its own Tpg, so its own relative
// target port identifier: two groups are two paths, for ALUA, SPC-4 5.15).
struct NodePortalGroup {
	uint16_t tag = 1;                 // its Target Portal Group Tag
	scsi::Tpg *tpg = nullptr;         // its target port: LUNs, ACLs, nexuses (not owned)
	std::vector<std::string> portals; // "host:port" as bound; host 0.0.0.0, [::] or "":
	                                  // any local address with that port
};

// One target node.
struct TargetNode {
	std::string name;          // iSCSI name (iqn..., eui..., naa...)
	std::string alias;         // TargetAlias declared at login; empty: none
	scsi::Tpg *tpg = nullptr;  // its LUNs and ACLs (not owned)
	bool require_chap = false; // AuthMethod=None refused
	// TARGET WARM RESET and TARGET COLD RESET (RFC 7143 11.5.1) reset every LU of the
	// target for every initiator, and a cold reset drops every session of it: one
	// initiator can disrupt all the others. Refused ("Function authorization failed")
	// unless the target allows them, as the kernel's target refuses them unless its ACLs
	// allow them.
	bool allow_target_reset = false;
	// CHAP secrets by initiator name; "" applies to any initiator without its own entry.
	// Empty map: CHAP is not offered for this target.
	std::map<std::string, ChapCredentials> chap;
	// Its portal groups. Empty: one group, tag TargetConfig::tpgt, port tpg, every portal.
	// Else a login lands in the group of the portal it came in on (Conn::local) and is
	// refused (target not found) on a portal of none; tpg is then the first group's.
	std::vector<NodePortalGroup> groups;
	// The source addresses that may log in to it (addr_acl.h); empty: any.
	std::vector<AddrPrefix> allowed_addresses;
	// Where it has moved (RFC 7143 11.13.5): every login to it, on any portal, is answered
	// with status 0101h (or 0102h, redirect_permanent) and this as TargetAddress
	// ("host:port", no portal group tag: 13.8), before authentication. "": served here.
	std::string redirect;
	bool redirect_permanent = false;
};

struct TargetConfig {
	std::vector<TargetNode> targets;
	uint16_t tpgt = 1;                         // the portal group tag of every portal
	std::vector<std::string> portal_addresses; // "host:port" as SendTargets reports them
	OperationalPrefs prefs;                    // what the target accepts at login
	ChapPolicy chap_policy;
	bool allow_discovery = true;         // discovery sessions accepted
	bool discovery_require_chap = false; // discovery sessions must authenticate
	std::map<std::string, ChapCredentials> discovery_chap; // as TargetNode::chap
	uint32_t cmd_window = 128;                             // commands in flight per session
	                                                       // (MaxCmdSN - ExpCmdSN + 1)
	uint32_t max_io_bytes = 16u << 20;                 // largest EDTL accepted (buffer size)
	std::chrono::milliseconds nop_interval{0};         // target NOP-In pings; 0: none
	std::chrono::milliseconds nop_timeout{15000};      // no answer in this long: drop
	std::chrono::milliseconds login_timeout{15000};    // a login not done by then: drop
	std::chrono::milliseconds teardown_timeout{10000}; // close_session's bound
	// Logged (core/log.h, subsystem iscsi): a line per login and logout ("login: iqn.x from
	// 1.2.3.4:5 to iqn.t ..."), session close, reinstatement, drop.
	bool trace = false; // also one line per PDU received and sent (diagnostics)
};

// One session as an administrator sees it (ulpctl session list).
struct SessionInfo {
	uint16_t tsih = 0;
	SessionParams params;       // as negotiated (initiator and target names, ISID, ...)
	std::string initiator_port; // TransportID text "<name>,i,0x<ISID>"
	Transport transport = Transport::Tcp;
	std::string peer;              // the initiator's "ip:port"
	std::string local;             // our portal's "ip:port"
	int worker = -1;               // the TCP worker its connection lives on (-1: none)
	bool full_feature = false;     // the login has completed (conn is valid)
	ConnParams conn;               // the connection's negotiated values
	size_t cmds_in_flight = 0;     // SCSI commands not yet released by the core
	bool logout_requested = false; // the target asked it to log out (Async Message)
	scsi::IoCounts io;             // its nexus's I/O statistics (normal sessions)
	bool has_conn = false;         // its connection is there (the gauges below are valid)
	uint32_t exp_cmdsn = 0;        // ExpCmdSN as last sent to the initiator
	uint32_t max_cmdsn = 0;        // MaxCmdSN as last sent: the window is max - exp + 1
	uint32_t conn_cmds = 0;        // commands out of the connection's pool then
	uint64_t pdus_in = 0;          // PDUs received on the connection
	uint64_t pdus_out = 0;         // PDUs sent on it
};

// Counters (diagnostics, tests).
struct TargetStats {
	uint64_t logins = 0;            // completed logins
	uint64_t login_failures = 0;    // failed ones
	uint64_t sessions_open = 0;     // normal + discovery sessions now
	uint64_t conns_open = 0;        // connections now (logging in or in full feature)
	uint64_t reinstatements = 0;    // sessions closed by a new leading login
	uint64_t teardown_timeouts = 0; // close_session attempts that timed out (retried)
};

class Target final : public scsi::FabricRoute<Target>, public DiscoveryHandler
{
public:
	explicit Target(TargetConfig cfg);
	~Target() override;
	Target(const Target &) = delete;
	Target &operator=(const Target &) = delete;

	// The configuration it started with (cfg().targets: the first node table only; nodes()
	// is the live one).
	const TargetConfig &cfg() const { return cfg_; }

	// ---- Target nodes, changed at run time (ulp-targetd's admin interface) -------------
	// The node table is copied on write: a login looks its node up and the session keeps
	// it (shared) for its life, so a change applies to new logins and never to a session
	// in progress (LIO's ACL and CHAP changes behave so too).
	std::shared_ptr<const TargetNode> find_node(std::string_view name) const;
	std::vector<std::shared_ptr<const TargetNode>> nodes() const;
	int add_node(TargetNode n);     // 0, -EEXIST, -EINVAL (no Tpg)
	int replace_node(TargetNode n); // by name: CHAP, alias, resets; 0 or -ENOENT
	// Remove a node: new logins to it fail (target not found); its sessions are asked to
	// log out (Async Message, RFC 7143 11.9.1 event 1), dropped after grace, and closed
	// within timeout. 0 once no nexus of it is left on its Tpg (the Tpg may then be freed);
	// -ENOENT; -ETIMEDOUT (nexuses still closing: the Tpg must stay).
	int remove_node(const std::string &name, std::chrono::milliseconds grace,
	                std::chrono::milliseconds timeout);

	// ---- Sessions, for the administrator ----------------------------------------------
	std::vector<SessionInfo> session_info();
	// Ask session tsih to log out and wait up to grace for it to go; drop its connection
	// if it has not. 0 (logged out), 1 (dropped), -ENOENT.
	int logout_session(uint16_t tsih, std::chrono::milliseconds grace);
	// Drop session tsih's connection now (no logout: the initiator sees the connection
	// end and recovers as from a failure). 0 or -ENOENT.
	int drop_session(uint16_t tsih);
	// The connection's login completed with cp (Conn: what session_info reports).
	void login_done(Session *s, const ConnParams &cp);
	// The portals SendTargets reports ("host:port"), once the transports know their
	// ports (an ephemeral port is known only after listening).
	void set_portal_addresses(std::vector<std::string> a);

	// Connections register while they live (stop() walks them).
	void add_conn(Conn *c);
	void remove_conn(Conn *c);

	// The portal group of node n a connection to local ("ip:port") lands in: its tag and
	// target port. false when no group of n holds that portal.
	bool portal_group(const TargetNode &n, std::string_view local, uint16_t *tag,
	                  scsi::Tpg **tpg) const;

	// Sessions (conn.cc's login handler calls these).
	// A new normal or discovery session for c; reinstates (closes) an existing session
	// with the same initiator name, ISID and target first. nullptr with *status on failure.
	Session *create_session(Conn *c, const SessionParams &p, LoginStatus *status);
	// Tear s down on the reaper thread: abort its SCSI commands, wait (bounded), then call
	// done (on the reaper thread) and free it. Idempotent.
	void close_session(Session *s, std::function<void()> done);

	// Drop the connection of every session on node but except's, as its owner thread
	// gets to it (ConnEvent::Drop: never blocks the caller), logging why (a static string:
	// the events carry it). TARGET COLD RESET (RFC 7143 11.5.1): a power on ends every
	// session of the target.
	void drop_sessions(const TargetNode *node, const Conn *except, const char *why);

	// Ask every session to log out (Async Message, RFC 7143 11.9.1 event 1), wait up to
	// grace for them to go, then drop the rest; returns when every connection is gone or
	// timeout has passed (false then). Transports stop accepting before calling it.
	bool stop(std::chrono::milliseconds grace, std::chrono::milliseconds timeout);

	TargetStats stats();

	// scsi::Fabric
	const char *name() const override { return "iscsi"; }
	// scsi::FabricRoute: each callback becomes an event of the command's connection.
	static void route(scsi::Cmd *cmd, scsi::FabricEvent ev);
	static void route(scsi::Tmr *tmr);

	// DiscoveryHandler: the targets initiator_name may see, its address unknown (a target
	// with allowed addresses is left out: it admits no unknown address).
	void visible_targets(std::string_view initiator_name,
	                     std::vector<DiscoveryTarget> *out) override;
	// The targets initiator_name may see from address peer ("ip:port", Conn::peer): those
	// whose ACL admits the initiator and whose allowed addresses admit peer - a target that
	// would refuse the login is not shown (SendTargets of a connection, conn.cc).
	void visible_targets(std::string_view initiator_name, std::string_view peer,
	                     std::vector<DiscoveryTarget> *out);

private:
	uint16_t new_tsih(); // under lock_

	TargetConfig cfg_;
	mutable std::mutex nodes_lock_; // guards nodes_ (after lock_ when both)
	std::vector<std::shared_ptr<const TargetNode>> nodes_; // the live node table
	std::mutex lock_;                                      // guards everything below
	std::condition_variable cv_;                           // conns_ and sessions_open changes
	std::vector<Conn *> conns_;
	std::vector<Session *> sessions_; // open, not yet handed to the reaper
	uint16_t next_tsih_ = 1;
	TargetStats stats_; // teardown_timeouts: the reaper's count, filled in by stats()
	// Closes sessions off the connections' threads (scsi/reaper.h); reset first in the
	// destructor, so that the sessions it still holds are closed before the rest goes.
	std::unique_ptr<scsi::Reaper> reaper_;
};

} // namespace ulp::iscsi::target
