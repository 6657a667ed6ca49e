// SPDX-License-Identifier: MIT
// srp/target/target.h - the SRP target (T10 SRP r16a, SRP-2's immediate data; the kernel's
// ib_srpt): one SRP target port, a fabric of the SCSI core, served on RDMA/CM portals.
//
// The pieces, and where they are:
//   Target (here)     the target port: its identifiers (id_ext, ioc_guid: what Linux's
//                     add_target names), its Tpg (LUNs, ACLs), the I_T nexuses with their
//                     channels, the reaper that closes nexuses, statistics. It is the
//                     scsi::Fabric: every core callback is routed to the command's channel.
//   Portal (portal.h) an rdma::Portal: listens on HOST:PORT, takes a login (the connect
//                     request's srp_login_req_rdma), answers SRP_LOGIN_RSP in the accept or
//                     SRP_LOGIN_REJ in the reject; per device an optional SRQ.
//   Channel (channel.h) one RDMA channel: receive ring (or the SRQ), send ioctx ring,
//                     credits, SRP_CMD / SRP_TSK_MGMT / SRP_I_LOGOUT, the data by rw
//                     contexts, the zero-length-write close.
//
// An I_T nexus (SRP r16a 5.3: an initiator port id and a target port id) is one
// scsi::Nexus shared by all its channels, so that reservations, unit attentions and task
// management see one nexus however many channels carry it (ib_srpt gives every channel its
// own session, so an SPC-2 reservation taken on one channel conflicts with the next).
// Commands are routed back to the channel they came on. A login with MULTICHAN_SINGLE ends
// every channel of the nexus first (the nexus is lost: its commands are aborted) and starts
// a new one; MULTICHAN_MULTI adds a channel to a live nexus (SRP r16a 6.3, table 10).
//
// Locking: lock_ guards the nexus table, the channels list and the statistics that change
// with them (count()'s per-command counters are per thread, core/shard_counters.h). A channel's
// own lock (its Serial) is taken before lock_, never after; lock_ is never held while
// a channel's events run (posts made under it are post_deferred).
#pragma once

#include "core/shard_counters.h"
#include "core/verbs.h"
#include "scsi/fabric_route.h"
#include "scsi/reaper.h"
#include "scsi/stats.h"
#include "scsi/tpg.h"
#include "srp/proto.h"

#include <array>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace ulp::srpt
{

class Channel;

struct TargetConfig {
	scsi::Tpg *tpg = nullptr; // LUNs and ACLs (not owned). ACL names: "0x" + the 32 hex
	                          // digits of the initiator port id, or the source address
	// The target port id's halves (SRP r16a 5.2.1; Linux's add_target id_ext and ioc_guid).
	// Unset: the node GUID of the device the first portal listens on, for both, as ib_srpt
	// uses srpt_service_guid.
	std::optional<uint64_t> id_ext;
	std::optional<uint64_t> ioc_guid;
	// The largest SRP_CMD (or other IU) an initiator may send: the receive buffer size.
	// Linux's ib_srp asks 8260 bytes by default (68 + 8 KiB of immediate data) and has no
	// fallback when refused, so the default leaves room above that.
	uint32_t max_it_iu_len = 65536;
	uint32_t rq_size = 128;     // receives per channel, and the credits granted at login
	uint32_t sq_size = 4096;    // send queue budget per channel, in WRs: half for responses,
	                            // half for rw contexts (ib_srpt's srp_sq_size); halved until
	                            // the device takes it
	bool use_srq = false;       // one shared receive queue per device instead of rings
	uint32_t srq_size = 4096;   // its receives
	bool immediate = true;      // grant immediate data (SRP-2) when a login asks for it
	uint32_t max_channels = 64; // per I_T nexus (more: LOGIN_REJ channel limit)
	uint32_t max_table_entries = 4096;   // largest indirect descriptor table accepted
	size_t heap_bytes = 256u << 20;      // data buffers per device, bytes
	size_t max_io = 16u << 20;           // largest command buffer, bytes (a power of two)
	int vector_hint = -1;                // CQ pool completion vector; -1: round robin
	PollCtx poll_ctx = PollCtx::Softirq; // who runs the completions (rdma::PortalConfig)
	std::chrono::milliseconds drain_timeout{10000};    // drain_qp's bound per queue
	std::chrono::milliseconds teardown_timeout{10000}; // one close_session attempt's bound
	// Bound on one command's RDMA transfer (as iser::PortalConfig::data_timeout): past it
	// the channel is closed with a log line, which flushes the WRs and ends the command.
	std::chrono::milliseconds data_timeout{10000};
};

// Counters (diagnostics, tests, benchmarks).
struct TargetStats {
	uint64_t logins = 0;            // channels accepted
	uint64_t login_rejects = 0;     // logins answered SRP_LOGIN_REJ
	uint64_t takeovers = 0;         // SINGLE logins that ended a live nexus's channels
	uint64_t channels_open = 0;     // channels not yet freed
	uint64_t nexuses_open = 0;      // I_T nexuses with a scsi::Nexus not yet closed
	uint64_t cmds = 0;              // SRP_CMDs received
	uint64_t tsk_mgmts = 0;         // SRP_TSK_MGMTs received
	uint64_t i_logouts = 0;         // SRP_I_LOGOUTs received
	uint64_t immediate = 0;         // commands whose data came as immediate data
	uint64_t ext_tables = 0;        // descriptor tables fetched by RDMA READ
	uint64_t rdma_reads = 0;        // rw contexts posted reading write data
	uint64_t rdma_writes = 0;       // rw contexts posted writing read data
	uint64_t cred_reqs = 0;         // SRP_CRED_REQs sent
	uint64_t wait_list = 0;         // IUs that had to wait (channel not live, no ioctx)
	uint64_t sq_waits = 0;          // transfers that waited for send queue room
	uint64_t credit_overruns = 0;   // requests beyond the credits the initiator held
	uint64_t bad_ius = 0;           // IUs refused (malformed, unknown): error or close
	uint64_t task_set_full = 0;     // commands answered TASK SET FULL for lack of a buffer
	uint64_t data_timeouts = 0;     // channels closed for a transfer past data_timeout
	uint64_t no_read_credit = 0;    // writes failed: the initiator granted no RDMA READ
	uint64_t teardown_timeouts = 0; // close_session attempts that timed out
};

// An I_T nexus: its identity and the channels that carry it.
struct SrpNexus {
	std::array<uint8_t, 16> i_port_id{}; // initiator port id (login)
	std::array<uint8_t, 16> t_port_id{}; // target port id (login)
	std::string initiator;               // the name its ACL matched (or the port id text)
	scsi::Nexus *scsi = nullptr;         // the core's nexus (Target::lock_ to change)
	std::vector<Channel *> channels;     // live channels (Target::lock_)
	bool lost = false;                   // session_lost ran: closing, takes no channel
};

// One I_T nexus as an administrator sees it (ulpctl session list).
struct NexusInfo {
	std::string initiator_port;        // "0x" + 32 hex digits (port_id_str)
	std::string target_port;           // likewise, the target port id it logged in to
	std::string initiator;             // the name its ACL matched (or the port id)
	std::vector<std::string> channels; // each channel's initiator address "ip:port"
	size_t cmds_in_flight = 0;         // SCSI commands not yet released by the core
	scsi::IoCounts io;                 // its scsi::Nexus's I/O statistics
	// Each channel's credits, in the order of channels.
	struct Chan {
		std::string peer;         // the initiator's address "ip:port"
		uint32_t credits = 0;     // receives granted at login: req_lim's ceiling
		int32_t req_lim = 0;      // credits the initiator holds now, as we count them
		uint32_t ioctxs_busy = 0; // request buffers in use
	};
	std::vector<Chan> chans;
};

// What a login asks of the target, and what it gets (Target::login).
struct LoginDecision {
	uint32_t reject = 0;             // a RejReason, or 0: accepted
	std::shared_ptr<SrpNexus> nexus; // accepted: the nexus the channel joins
	uint8_t rsp_flags = 0;           // LOGIN_RSP_NO_CHAN / TERMINATED / MAINTAINED
	std::string why;                 // rejected: for the log line
};

class Target final : public scsi::FabricRoute<Target>
{
public:
	explicit Target(TargetConfig cfg);
	// Calls stop() with the teardown timeout first.
	~Target() override;
	Target(const Target &) = delete;
	Target &operator=(const Target &) = delete;

	const char *name() const override { return "srpt"; }
	const TargetConfig &cfg() const { return cfg_; }

	// The identifiers logins must name (SRP r16a 5.2.1 target port identifier: id_ext in
	// bytes 0..7, ioc_guid in 8..15). Valid once set: configured, or set_default_guid.
	uint64_t id_ext();
	uint64_t ioc_guid();
	bool has_ids();
	// The first portal's device node GUID, for identifiers the configuration left unset.
	void set_default_guid(uint64_t guid);
	// What a Linux initiator writes to /sys/class/infiniband_srp/srp-<dev>-<port>/add_target
	// to reach this target through the portal at addr ("HOST:PORT").
	std::string add_target_line(const std::string &addr);

	// Close every channel (disconnect, drain) and wait until they are freed and every
	// nexus is closed, at most timeout. True when everything is gone.
	bool stop(std::chrono::milliseconds timeout);

	TargetStats stats();

	// ---- For the administrator -------------------------------------------------------
	std::vector<NexusInfo> nexus_info();
	// Log out the nexus of initiator port i_port ("0x" + 32 hex digits): SRP_T_LOGOUT and a
	// disconnect on each of its channels; wait up to timeout for it to be gone. 0, -ENOENT,
	// -ETIMEDOUT (channels still closing).
	int logout_nexus(const std::string &i_port, std::chrono::milliseconds timeout);
	// Close its channels at once (no SRP_T_LOGOUT). 0 or -ENOENT.
	int drop_nexus(const std::string &i_port);

	// ---- For Portal and Channel --------------------------------------------------------
	// CM thread: decide a login (ACL, target port id, multichannel action). On acceptance
	// the caller makes the channel and then attaches it (attach) or gives up (abandon).
	LoginDecision login(const srp::LoginReq &req, const std::string &peer_ip);
	void attach(const std::shared_ptr<SrpNexus> &n, Channel *ch);
	void abandon(const std::shared_ptr<SrpNexus> &n); // a decided login whose setup failed
	// The channel is closing: it leaves its nexus; the last one out closes the nexus on the
	// reaper and then posts ChEvent::ReapDone to itself. True: the caller must wait for
	// ReapDone; false: nothing to wait for.
	bool detach(const std::shared_ptr<SrpNexus> &n, Channel *ch);
	void add_channel(Channel *ch);
	void remove_channel(Channel *ch);
	void count(uint64_t TargetStats::*field, uint64_t n = 1); // any thread, no lock

	// scsi::FabricRoute: post the callback to the command's (or TMF's) channel.
	static void route(scsi::Cmd *cmd, scsi::FabricEvent ev);
	static void route(scsi::Tmr *tmr);

private:
	// Under lock_: the nexus's scsi side is lost now (SAM-5 6.3.4), before a new one opens.
	void lose(SrpNexus &n);

	TargetConfig cfg_;
	std::mutex lock_;
	std::condition_variable cv_; // channels_ emptied, a nexus left nexuses_
	std::optional<uint64_t> default_guid_;
	// Live nexuses by (initiator port id, target port id).
	std::map<std::pair<std::array<uint8_t, 16>, std::array<uint8_t, 16>>,
	         std::shared_ptr<SrpNexus>>
	    nexuses_;
	std::vector<Channel *> channels_; // every channel not yet freed
	TargetStats stats_;               // what changes with the nexus table (lock_)
	// count()'s counters, per thread: the pollers bump them per command, and under lock_
	// (which guards the nexus table) every channel's poller met on one line.
	ShardCounters<TargetStats> io_stats_;
	scsi::Reaper reaper_;
};

// "0x" + 32 lowercase hex digits: an initiator port id as ACLs and TransportIDs name it.
std::string port_id_str(const std::array<uint8_t, 16> &id);

} // namespace ulp::srpt
