// SPDX-License-Identifier: MIT
// tools/ulp-targetd/config.h - ulp-targetd's configuration: command-line flags for one
// target, or a TOML file (--config) for several, checked into one Config and then made
// real (backstores opened, logical units and target port groups created).
//
// The file (every key optional but target.name and lun.backstore):
//
//   workers = 2                         # event-loop threads
//   worker_cpus = "0-1"                 # CPUs the workers run on, one each in turn
//                                       # (a cpulist: "0-3,8"); "": where the kernel puts them
//   state_dir = "/var/lib/ulp-targetd"  # persistent reservations with APTPL 1, a file per
//                                       # LUN (created 0700; unusable: APTPL 1 refused)
//   admin_socket = "/run/ulp-targetd/admin.sock"  # JSON-RPC admin socket (ulpctl); "":
//                                       # none (the default without this key)
//   admin_group = "ulp"                 # also admit this group's members (mode 0660)
//   admin_tcp = "127.0.0.1:5261"        # a TCP admin listener too (PORT alone: loopback);
//                                       # no credentials on TCP: whoever reaches it may
//                                       # administer the daemon
//   metrics_http = "127.0.0.1:9261"     # GET /metrics: the statistics in Prometheus text
//                                       # (PORT alone: loopback); "": none (the default)
//   portals = ["0.0.0.0:3260"]          # iSCSI/TCP: "host:port", IPv6 as "[::1]:3260"
//   iser_portals = ["127.0.0.1:3260"]   # iSER (RDMA/CM): on rdma_device, or soft devices
//   srp_portals = ["10.99.0.1:5555"]    # SRP (RDMA/CM; no well-known port: give one)
//   rdma_device = "rxe0"                # a verbs device; "" (default): the soft provider,
//                                       # one soft device per iSER or SRP portal address
//   [iser]
//   recv_data_segment_length = 8192     # iSER receive buffers' data room
//   buffer_pool = "256M"                # registered data buffers per device (rounded up
//                                       # to a multiple of the largest command, 16M);
//                                       # a command finding none is answered TASK SET FULL
//   send_ring = 0                       # send buffers per connection (responses wait
//                                       # for one); 0: cmd_window + 32
//   [srp]                               # the SRP target port (with srp_portals)
//   id_ext = "0x0002c90300a1b2c3"       # target port id, bytes 0..7 (hex); default: the
//   ioc_guid = "0x0002c90300a1b2c3"     # node GUID of the first SRP portal's device (both)
//   srq = false                         # one shared receive queue per device
//   acls = ["0x" + 32 hex digits of an initiator port id, or a source IP]  # empty: open
//   [[srp.acl]]                         # an SRP initiator's own LUN map, as target.acl's
//   initiator = "10.99.0.2"             # (no CHAP)
//   luns = [{ lun = 0, target_lun = 1 }]
//   target = "iqn.2026-11.org.ulp:disk1" # whose LUNs SRP exports; default: the first
//   rq_size = 128                       # receives per channel = credits granted at login
//   srq_size = 4096                     # the shared receive queue's receives (srq = true)
//   sq_size = 4096                      # send queue per channel, WRs (half responses,
//                                       # half RDMA READ/WRITE); halved until it fits
//   max_it_iu_len = 65536               # largest IU an initiator may send, bytes (Linux's
//                                       # ib_srp asks 8260 and cannot go lower: keep >= it)
//   immediate_data = true               # grant SRP-2 immediate data when asked
//   max_channels = 64                   # channels per I_T nexus
//   buffer_pool = "256M"                # registered data buffers per device, as iser's
//   [gateway]                           # one of several gateways on one Ceph cluster
//   name = "gw1"                        # unique in the cluster; required (docs/ha.md)
//   pool = "rbd"                        # where the cluster map and leases live; required
//   namespace = ""                      # a RADOS namespace of that pool
//   cluster = "default"                 # the map is object ulp.cluster.<cluster>
//   conf = "", client = "", keyring = "" # the gateway's Ceph client for the map, as rbd
//                                       # LUNs' keys; each group's lease goes through the
//                                       # group's own client
//   lease = 10                          # seconds (3..600) an owner may act unrenewed
//   hold_off = 30                       # seconds a drained gateway leaves its groups
//   Every LUN is then an rbd LUN (shared by the gateways), its group's owner reports
//   active/optimized and the other gateways standby; no [target.alua] (the cluster
//   decides); portal group rtpis must differ from every other gateway's.
//   [iscsi]
//   max_recv_data_segment_length = 262144
//   max_burst_length = 1048576
//   first_burst_length = 65536
//   immediate_data = true
//   initial_r2t = false
//   max_outstanding_r2t = 1
//   digests = "none"                    # none | crc32c | both (crc32c preferred)
//   cmd_window = 128
//   nop_interval = 0                    # seconds; 0: the target never pings
//   nop_timeout = 15
//   discovery = true
//   discovery_chap = { user = "d", secret = "..." }  # discovery sessions must CHAP
//   discovery_mutual_chap = { user = "t", secret = "..." }  # with discovery_chap
//   [[target]]
//   name = "iqn.2026-11.org.ulp:disk1"
//   alias = "disk1"
//   chap = { user = "u", secret = "0123456789ab" }       # optional
//   mutual_chap = { user = "t", secret = "ba9876543210" } # optional, with chap
//   acls = ["iqn.1994-05.com.redhat:client"]             # empty: open to everyone
//   allow_target_reset = false          # TARGET WARM/COLD RESET from any initiator
//   allow_no_chap = false               # initiators without their own secret may skip CHAP
//   allowed_addresses = ["10.0.0.0/8", "fd00::/8"]  # iSCSI source addresses; empty: any
//   redirect = "10.0.0.2:3260"          # logins answered "moved" (RFC 7143 11.13.5) with
//                                       # this TargetAddress; "": served here (default)
//   redirect_permanent = false          # 0102h instead of 0101h
//     [[target.acl]]                    # one initiator's own view and secrets (joins acls)
//     initiator = "iqn.1994-05.com.redhat:client2"
//     luns = [{ lun = 0, target_lun = 1, read_only = true }]  # it sees only these;
//                                       # target_lun default: lun
//     chap = { user = "c2", secret = "..." }         # it must prove this one
//     mutual_chap = { user = "t", secret = "..." }   # with chap
//     [[target.lun]]
//     lun = 0
//     backstore = "file"                # ram | file | block | rbd | null
//     path = "/srv/disk1.img"
//     size = "10G"                      # bytes, or with K M G T (powers of 1024); file:
//                                       # created or extended to it at start; on SIGHUP
//                                       # the LUN follows the file's length (and a block
//                                       # LUN the device's size), in whole blocks
//     block_size = 512
//     physical_block_size = 4096        # optional; reported for initiators to align to
//     removable = false                 # a removable medium (START STOP UNIT ejects it)
//     tp_soft_threshold = 80            # optional; percent allocated that raises the thin
//                                       # provisioning soft threshold unit attention
//     read_only = false
//     direct = true                     # O_DIRECT where aligned (file, block)
//     write_cache = true                # report a volatile cache (file, block)
//     queue_depth = 64                  # backstore requests at once
//     vendor = "ULP"                    # the LU's identity (LuIdentity): INQUIRY vendor,
//     product = "ulp file"              # product, revision; VPD 80h serial; VPD 83h naa
//     revision = "0001"                 # (16 hex digits, NAA 5, 3 or 2); unset: defaults,
//     serial = "disk1-0"                # serial and naa derived from "TARGET/LUN"; one
//     naa = "0x5001405012345678"        # serial and naa per LU of the daemon
//     [[target.lun]]                    # a Ceph RBD image through librbd (scsi/bs_rbd.cc)
//     lun = 1
//     backstore = "rbd"
//     pool = "rbd"                      # required
//     image = "disk1"                   # required
//     namespace = "gw1"                 # a RADOS namespace of the pool; "": the default
//     conf = "/etc/ceph/ceph.conf"      # "": librados' search ($CEPH_CONF, /etc/ceph)
//     client = "ulp-gw"                 # the Ceph client id without "client."; "": admin
//     keyring = "/etc/ceph/ceph.client.ulp-gw.keyring"  # "": what ceph.conf names
//     group = "default"                 # LUNs of a group share one Ceph client, the
//                                       # identity Ceph fences; they must name the same
//                                       # conf, client and keyring ("": "default")
//     create = false                    # make the image, of size bytes, when missing
//     timeout = 30                      # seconds (1..3600): connecting at start, then
//                                       # each OSD operation before it fails
//     atomic_unit = "128K"              # WRITE ATOMIC's alignment and longest length, a
//                                       # power of two up to the stripe unit; 0: none
//     size = "64G"                      # optional: absent or 0, the image's size; else
//                                       # it must be the image's (or the one to create)
//     [[target.portal_group]]           # optional: each its own SCSI target port
//     tag = 2                           # TargetPortalGroupTag, 1..65535
//     rtpi = 2                          # relative target port id; default: the tag
//     portals = ["10.0.0.2:3260"]       # some of portals/iser_portals, one group each
//                                       # (none at all: one group, tag 1, rtpi 1, every
//                                       # portal); SRP's rtpi: [srp] rtpi, default one
//                                       # more than its target's highest
//     [target.alua]                     # optional: asymmetric access (SPC-4 5.15)
//     tpgs = "both"                     # none (default) | implicit | explicit | both
//     implicit_transition_secs = 0
//       [[target.alua.group]]
//       id = 1                          # TARGET PORT GROUP
//       state = "active-optimized"      # | active-non-optimized | standby | unavailable
//                                       # | offline | transitioning
//       preferred = false
//       portal_groups = [1]             # tags of its portal groups in it
//       srp = false                     # the SRP port in it
//   rbd LUNs take block_size, physical_block_size, read_only, removable and queue_depth
//   too, but not path, direct or write_cache (no O_DIRECT, no volatile cache: librbd's
//   cache is off); the rbd keys belong to rbd LUNs only. Either mistake is an error.
//
// Every key is checked: a key this list does not name, or a value of the wrong type, is an
// error naming the file, line and column ("/etc/ulp-targetd.toml:12:1: target.lun.sise:
// unknown key"), and the daemon does not start (at SIGHUP: nothing changes).
#pragma once

#include "core/log.h"
#include "iscsi/target/target.h"
#include "iser/target/target.h"
#include "scsi/backstore.h"
#include "scsi/lu.h"
#include "scsi/tpg.h"

#include <CLI/CLI.hpp>

#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace targetd
{

// The command line as given.
struct Flags {
	std::string config;                    // --config FILE
	std::vector<std::string> portals;      // --portal HOST:PORT
	std::vector<std::string> iser_portals; // --iser-portal HOST:PORT
	std::vector<std::string> srp_portals;  // --srp-portal HOST:PORT
	std::string srp_id_ext;                // --srp-id-ext HEX
	std::string srp_ioc_guid;              // --srp-ioc-guid HEX
	bool srp_srq = false;                  // --srp-srq
	std::vector<std::string> srp_acls;     // --srp-acl PORTID_OR_IP
	std::string rdma_device;               // --rdma-device NAME ("" = soft provider)
	std::string target;                    // --target NAME
	std::vector<std::string> luns;         // --lun N:KIND[:key=value,...]
	std::vector<std::string> acls;         // --acl INITIATOR
	std::vector<std::string> acl_luns;     // --acl-lun INITIATOR=LUN[:TARGET_LUN][:ro]
	std::string chap;                      // --chap USER:SECRET
	std::string mutual_chap;               // --mutual-chap USER:SECRET
	bool allow_target_reset = false;       // --allow-target-reset
	int workers = 0;                       // --workers (0: from the file, else 1)
	std::string worker_cpus;               // --worker-cpus LIST ("": the file's, or none)
	std::string state_dir;                 // --state-dir DIR ("": the file's, or the default)
	uint32_t max_recv_dsl = 0;             // 0: the default (262144)
	uint32_t max_burst = 0;
	uint32_t first_burst = 0;
	std::string immediate_data; // yes/no ("" = default yes)
	std::string initial_r2t;    // yes/no ("" = default no)
	std::string digests;        // none/crc32c/both
	uint32_t cmd_window = 0;
	int nop_interval = -1; // seconds
	int ready_fd = -1;     // write the first portal's port there when up
	bool quiet = false;    // --quiet: warnings and errors only
	ulp::log::Level log_level = ulp::log::Level::Info; // --log-level
	std::string log_file;                              // --log-file; empty: stderr
	bool trace = false;                                // --trace: log every PDU
	std::string admin_socket;                          // --admin-socket PATH
	std::string admin_group;                           // --admin-group GROUP
	std::string admin_tcp;                             // --admin-tcp [HOST:]PORT
	std::string metrics_http;                          // --metrics-http [HOST:]PORT
	bool check = false;                                // --check: check the configuration, exit
};

// Where ulpctl and the unit file look for the admin socket.
inline constexpr const char *kDefaultAdminSocket = "/run/ulp-targetd/admin.sock";

void add_flags(CLI::App &app, Flags &f);

struct Portal {
	std::string host; // "" = any
	uint16_t port = 3260;
};

// A logical unit's identity as initiators see it: INQUIRY's T10 VENDOR IDENTIFICATION,
// PRODUCT IDENTIFICATION and PRODUCT REVISION LEVEL (SPC-4 6.6.2), the unit serial number
// (VPD 80h) and the NAA designator (VPD 83h) that Linux names /dev/disk/by-id/wwn-* after
// and multipath merges paths by. Set, it keeps a LU the same device for its initiators
// when it moves to another target, LUN number or daemon; unset (empty, 0), each is the
// default: vendor "ULP", product "ulp " + the backstore kind, revision "0001", serial and
// NAA derived from the LU's name, "TARGET/LUN" (scsi::lu_derived_serial, lu_derived_naa).
struct LuIdentity {
	std::string vendor;   // 1..8 characters of ASCII 20h..7Eh (SPC-4 4.3.1); "": default
	std::string product;  // 1..16 of them; "": default
	std::string revision; // 1..4 of them; "": default
	std::string serial;   // 1..kMaxSerial of them; "": derived
	uint64_t naa = 0;     // an 8-byte NAA designator (NAA 2h, 3h or 5h); 0: derived
	bool operator==(const LuIdentity &) const = default;
};
// Its string keys with their members: one list for the --lun and TOML readers, lun_create,
// save and the listings (each written only when set).
inline constexpr std::pair<const char *, std::string LuIdentity::*> kLuIdentityKeys[] = {
    {"vendor", &LuIdentity::vendor},
    {"product", &LuIdentity::product},
    {"revision", &LuIdentity::revision},
    {"serial", &LuIdentity::serial}};
// The longest serial number: what fits whole in VPD 83h's T10 vendor ID designator too
// (the vendor's 8 bytes, then the serial, in a one-byte DESIGNATOR LENGTH).
inline constexpr size_t kMaxSerial = 247;

struct LunCfg {
	uint64_t lun = 0;
	LuIdentity id; // what INQUIRY, VPD 80h and 83h report (vendor, ..., naa)
	ulp::scsi::BackstoreConfig bs;
	bool read_only = false;
	uint32_t physical_block_size = 0; // 0: the logical block size
	bool removable = false;           // a removable medium
	uint32_t tp_soft_threshold = 0;   // percent allocated that raises THIN PROVISIONING
	                                  // SOFT THRESHOLD REACHED (LuConfig); 0: off
};

// An iSCSI portal group of a target (RFC 7143 section 4.4.1, "Target Portal Group Tag"):
// some of the daemon's TCP and iSER portals, one SCSI target port (its own scsi::Tpg and
// relative target port identifier, SPC-4 4.3.4) - so that two portals of one target can be
// two paths in two ALUA target port groups.
struct PortalGroupCfg {
	uint16_t tag = 1;            // TPGT, 1..65535, unique in the target
	uint16_t rtpi = 0;           // its relative target port identifier; 0: the tag
	std::vector<Portal> portals; // the daemon's portals ("portals"/"iser_portals") in it
	uint16_t port_id() const { return rtpi ? rtpi : tag; } // the rtpi it gets
};

// A target port group of the target's asymmetric logical unit access (SPC-4 5.15,
// scsi/alua.h): the same groups for every LU of the target.
struct AluaGroupCfg {
	uint16_t id = 0;                                                    // TARGET PORT GROUP
	ulp::scsi::AluaState state = ulp::scsi::AluaState::ActiveOptimized; // at start
	bool preferred = false;                                             // PREF
	std::vector<uint16_t> portal_groups; // tags of the target's portal groups in it (a
	                                     // target without [[target.portal_group]]: 1)
	bool srp = false;                    // the SRP port too (when it exports the target)
};

struct AluaCfg {
	uint8_t tpgs = ulp::scsi::TPGS_NONE;  // TPGS_*: NONE (the default) is no ALUA
	uint8_t implicit_transition_secs = 0; // REPORT TARGET PORT GROUPS' IMPLICIT TRANSITION
	                                      // TIME, seconds; 0: not given
	std::vector<AluaGroupCfg> groups;     // none when tpgs is NONE
};

// One LUN of an initiator's own view (scsi::NodeAcl::luns): which LUN of the target it is.
struct MappedLun {
	uint64_t target_lun = 0; // the target's LUN ([[target.lun]] lun)
	bool read_only = false;  // writes refused for this initiator (DATA PROTECT)
	bool operator==(const MappedLun &) const = default;
};

// What an ACL entry ([[target.acl]], [[srp.acl]]) gives its initiator besides admission.
struct AclCfg {
	// mapped LUN (what the initiator sees) -> the target's; empty: every LUN as it is
	std::map<uint64_t, MappedLun> luns;
	std::optional<ulp::iscsi::ChapSecret> chap;        // its own: it must prove this one
	std::optional<ulp::iscsi::ChapSecret> mutual_chap; // the target proves this one to it
	bool empty() const { return luns.empty() && !chap && !mutual_chap; }
};

// The ACL entry's LUN map as the core takes it.
ulp::scsi::NodeAcl node_acl(const std::string &initiator, const AclCfg *a);

struct TargetCfg {
	std::string name;
	std::string alias;
	std::vector<LunCfg> luns;
	std::vector<std::string> acls;
	std::map<std::string, AclCfg> acl_cfg; // by initiator (one of acls); none: plain entry
	// Initiators without a CHAP secret of their own may log in without CHAP (RFC 7143
	// 12.1.3: the target decides whom it authenticates); off: every initiator must CHAP
	// once any secret is configured.
	bool allow_no_chap = false;
	// iSCSI logins only from these source addresses / CIDR prefixes, IPv4 or IPv6, as
	// written ("10.0.0.0/8", "::1"); empty: from anywhere.
	std::vector<std::string> allowed_addresses;
	std::optional<ulp::iscsi::ChapSecret> chap;        // the initiator proves it
	std::optional<ulp::iscsi::ChapSecret> mutual_chap; // the target proves it
	bool allow_target_reset = false; // TARGET WARM RESET and TARGET COLD RESET honoured
	// Its portal groups, by tag; empty: one group, tag 1, rtpi 1, every portal (what a
	// target without [[target.portal_group]] gets). A portal in none of them does not
	// reach it.
	std::vector<PortalGroupCfg> portal_groups;
	AluaCfg alua; // [target.alua]; default: TPGS 00b, no groups
	// Logins to it are redirected there (RFC 7143 11.13.5: Login Response status 0101h,
	// or 0102h with redirect_permanent, and the address as TargetAddress): "host:port",
	// IPv6 as "[::1]:3260"; "": served here. Its LUNs, ACLs and CHAP stay configured.
	std::string redirect;
	bool redirect_permanent = false; // 0102h: the initiator should use the new address
	                                 // from now on; else 0101h, for this login only
};

// [gateway]: this daemon as one of several gateways on one Ceph cluster (docs/ha.md).
struct GatewayCfg {
	std::string name;                // unique in the cluster (ha_name_valid); "": no gateway
	std::string pool;                // the pool of the cluster map and the groups' leases
	std::string nspace;              // its RADOS namespace ("": the default one)
	std::string cluster = "default"; // the map's object is ulp.cluster.<cluster>
	std::string conf;                // the map's client: ceph.conf ("": librados' search)
	std::string client;              // its client id without "client." ("": admin)
	std::string keyring;             // its keyring ("": what ceph.conf names)
	uint32_t lease_s = 10;           // a group's lease, seconds (3..600)
	uint32_t hold_off_s = 30;        // after a drain, seconds before acquiring again
	bool enabled() const { return !name.empty(); }
	bool operator==(const GatewayCfg &) const = default;
};

// The SRP target port (srpt::Target): its identifiers, access, and whose LUNs it serves.
struct SrpCfg {
	std::optional<uint64_t> id_ext;   // unset: the first SRP portal's device node GUID
	std::optional<uint64_t> ioc_guid; // likewise (ib_srpt's srpt_service_guid)
	bool srq = false;                 // one SRQ per device instead of per-channel rings
	std::vector<std::string> acls;    // "0x" + 32 lowercase hex digits, or an IP; empty: open
	std::map<std::string, AclCfg> acl_cfg; // LUN maps by entry (one of acls; no CHAP)
	std::string target; // the [[target]] whose LUNs it exports; "": the first
	// Sizes (srpt::TargetConfig's, same defaults): a restart applies a change.
	uint32_t rq_size = 128;           // receives per channel, the credits granted at login
	uint32_t srq_size = 4096;         // the SRQ's receives (srq)
	uint32_t sq_size = 4096;          // send queue per channel, WRs
	uint32_t max_it_iu_len = 65536;   // largest initiator-to-target IU, bytes
	bool immediate_data = true;       // grant immediate data (SRP-2)
	uint32_t max_channels = 64;       // per I_T nexus
	uint64_t heap_bytes = 256u << 20; // data buffers per device, bytes (buffer_pool)
	uint16_t rtpi = 0; // its relative target port identifier; 0: one more than the
	                   // highest of its target's portal groups (srp_rtpi)
};

struct Config {
	std::string source;               // the TOML file it was read from ("": flags only)
	std::vector<Portal> portals;      // iSCSI/TCP
	std::vector<Portal> iser_portals; // iSER
	std::vector<Portal> srp_portals;  // SRP
	std::string rdma_device; // the iSER and SRP portals' verbs device; "": soft devices
	ulp::iser::PortalConfig iser;
	SrpCfg srp;
	std::vector<TargetCfg> targets;
	int workers = 1;
	std::string worker_cpus; // a cpulist ("0-3,8"), as given; "": no binding
	std::vector<int> cpus;   // worker_cpus expanded, in order (worker i: cpus[i % size])
	std::string state_dir = "/var/lib/ulp-targetd"; // reservation state files (APTPL 1)
	ulp::iscsi::OperationalPrefs prefs;
	uint32_t cmd_window = 128;
	int nop_interval = 0; // seconds
	int nop_timeout = 15;
	bool discovery = true;
	// SendTargets discovery sessions must prove this (RFC 7143 12.1.3); unset: no CHAP.
	std::optional<ulp::iscsi::ChapSecret> discovery_chap;
	std::optional<ulp::iscsi::ChapSecret> discovery_mutual_chap; // the target proves it
	int shutdown_grace_ms = 5000;    // how long sessions get to log out
	int shutdown_timeout_ms = 15000; // after that, dropped; this is the whole bound
	std::string admin_socket;        // the admin socket's path ("": none)
	std::string admin_group;         // a group admitted besides the daemon's uid and root
	std::string admin_tcp;           // "[HOST:]PORT" of a TCP admin listener ("": none)
	std::string metrics_http;        // "[HOST:]PORT" of the metrics endpoint ("": none)
	GatewayCfg gateway;              // [gateway]; name "": a gateway of its own
};

// What gateway mode asks of the rest of the configuration: every LUN an rbd LUN in a group
// whose name a record can carry, no [target.alua]. false with *why.
bool check_gateway(const Config &c, std::string *why);

// One target's settings and LUNs as a run-time change would set them: the checks
// build_config makes of every target (name, LUN numbers and geometry, CHAP, ACLs). The
// admin methods run the same ones. false with *why.
bool check_target(const TargetCfg &t, std::string *why);
bool check_lun(const std::string &target, const LunCfg &l, std::string *why);
// An rbd LUN's keys whose values are strings, each with its member: one list for the --lun
// and TOML readers, save and the listings (pool and image are required, the rest written
// only when set).
inline constexpr std::pair<const char *, std::string ulp::scsi::RbdConfig::*> kRbdStringKeys[] = {
    {"pool", &ulp::scsi::RbdConfig::pool},        {"image", &ulp::scsi::RbdConfig::image},
    {"namespace", &ulp::scsi::RbdConfig::nspace}, {"conf", &ulp::scsi::RbdConfig::conf},
    {"client", &ulp::scsi::RbdConfig::client},    {"keyring", &ulp::scsi::RbdConfig::keyring},
    {"group", &ulp::scsi::RbdConfig::group}};
bool check_chap(const ulp::iscsi::ChapSecret &s, std::string *why);
// A LUN's identity values (each named by its key: "serial: ..."); false with *why.
bool check_lu_identity(const LuIdentity &id, std::string *why);
// naa = "0x5001405..." (the "0x" optional): exactly 16 hex digits, an 8-byte NAA designator
// of NAA 2h, 3h or 5h (what VPD 83h carries: scsi/spc_inquiry.cc). false with *why.
bool parse_naa(const std::string &s, uint64_t *out, std::string *why);
inline std::string naa_str(uint64_t naa) // "0x" + 16 lowercase hex digits, as files have it
{
	char b[24];
	std::snprintf(b, sizeof(b), "0x%016llx", (unsigned long long)naa);
	return b;
}
// The LU a LUN of target makes is named "TARGET/LUN": the name its derived serial number
// and NAA come from, and that its reservation state file is kept under.
std::string lu_name(const std::string &target, uint64_t lun);
// What the LU of target's LUN l reports: the configured serial number and NAA, else the
// derived ones.
std::string lun_serial(const std::string &target, const LunCfg &l);
uint64_t lun_naa(const std::string &target, const LunCfg &l);
// The serial numbers and NAAs the LUs of a daemon report, each with the LUN that has it:
// one identity per LU. Two LUs of a daemon are never one device: an initiator's multipath
// would merge them into one disk whose paths lead to different data, and EXTENDED COPY
// finds its copy targets by NAA (scsi/xcopy.h). (One LU is reached through several ports
// by portal groups, never by a second LUN.)
class LuIdentitySet
{
public:
	// "" and target's LUN l taken in, or why not: the LUN that has its serial number or
	// NAA already, named with the key.
	std::string add(const std::string &target, const LunCfg &l);

private:
	std::map<std::string, std::string> serials_; // serial -> "target T LUN N"
	std::map<uint64_t, std::string> naas_;       // NAA -> "target T LUN N"
};
// Another LUN of targets (target's LUN l itself excepted) that reports l's serial number or
// NAA: "" when none, else why (LuIdentitySet::add's).
std::string lun_identity_clash(const std::vector<TargetCfg> &targets, const std::string &target,
                               const LunCfg &l);
// A redirect address: "host:port" with a host (IPv6 in brackets), no portal group tag
// (RFC 7143 13.8: a redirect's TargetAddress has none). false with *why.
bool check_redirect(const std::string &addr, std::string *why);
// A target's portal groups against the daemon's portals (tcp and iser together): tags and
// rtpis unique, every portal one of them and in one group only. false with *why.
bool check_portal_groups(const TargetCfg &t, const std::vector<Portal> &portals, std::string *why);
// The relative target port identifiers, stable across restarts and reloads (derived from
// the configuration, never from the order things were made in): a portal group's is its
// rtpi key, else its tag (a target without groups: 1); the SRP port's is srp.rtpi, else one
// more than the highest of the target it exports.
uint16_t srp_rtpi(const SrpCfg &s, const TargetCfg &exported);

// The words the file and ulpctl use for ALUA states and TPGS ("active-optimized", ...;
// "none", "implicit", "explicit", "both"), one table for reading and writing.
inline constexpr std::pair<const char *, ulp::scsi::AluaState> kAluaStateWords[] = {
    {"active-optimized", ulp::scsi::AluaState::ActiveOptimized},
    {"active-non-optimized", ulp::scsi::AluaState::ActiveNonOptimized},
    {"standby", ulp::scsi::AluaState::Standby},
    {"unavailable", ulp::scsi::AluaState::Unavailable},
    {"offline", ulp::scsi::AluaState::Offline},
    {"transitioning", ulp::scsi::AluaState::Transitioning}};
inline constexpr const char *kTpgsWords[] = {"none", "implicit", "explicit", "both"};
inline const char *alua_state_word(ulp::scsi::AluaState s)
{
	for (const auto &[w, v] : kAluaStateWords)
		if (v == s)
			return w;
	return "?";
}
inline bool parse_alua_state(const std::string &w, ulp::scsi::AluaState *out)
{
	for (const auto &[k, v] : kAluaStateWords)
		if (w == k) {
			*out = v;
			return true;
		}
	return false;
}
// A target's [target.alua] against its portal groups: TPGS none with groups, too many
// groups, an id twice, a tag that is not one of its portal groups', a port in two groups.
// false with *why.
bool check_alua(const TargetCfg &t, std::string *why);
// The scsi::Alua configuration every LU of target t gets: portal group tags as their rtpis,
// the SRP port as srp_rtpi.
ulp::scsi::AluaConfig alua_config(const TargetCfg &t, const SrpCfg &srp);
// "" when a LUN of backstore kind may be given key (a --lun key, a [[target.lun]] key, a
// lun_create parameter), else why not: rbd's keys (pool, image, ...) are rbd LUNs' only,
// and path, direct and write_cache (file and block keys) are not rbd's.
std::string lun_key_misplaced(const std::string &kind, const std::string &key);
// A cpulist ("0-3,8"; "" is none) into CPUs in order; false and why when malformed or
// naming a CPU this machine does not have.
bool parse_cpu_list(const std::string &s, std::vector<int> *out, std::string *why);
bool parse_portal(const std::string &s, Portal *p, std::string *why, int default_port = 3260);
std::string portal_str(const Portal &p); // "0.0.0.0:3260", "[::1]:3260"

// The iSCSI settings the daemon starts from, before the file and the flags: what a storage
// target wants (RFC 7143's defaults are for interoperability, not speed): large segments
// and bursts, immediate and unsolicited data. The file's [iscsi] defaults; `ulpctl
// import` starts from them too.
inline void storage_prefs(ulp::iscsi::OperationalPrefs *p)
{
	p->max_recv_dsl = 262144;
	p->max_burst_length = 1048576;
	p->first_burst_length = 65536;
	p->immediate_data = true;
	p->initial_r2t = false;
}

// digests = "none" | "crc32c" | "both" (HeaderDigest and DataDigest together, in the
// order offered: "both" prefers CRC32C and accepts None); false with *why otherwise. The
// file, --digests, lun-less requests and `ulpctl import` all say it this way.
inline bool set_digests(const std::string &d, ulp::iscsi::OperationalPrefs *p, std::string *why)
{
	using ulp::iscsi::Digest;
	std::vector<Digest> v;
	if (d == "none")
		v = {Digest::None};
	else if (d == "crc32c")
		v = {Digest::Crc32c};
	else if (d == "both")
		v = {Digest::Crc32c, Digest::None};
	else {
		*why = "digests must be none, crc32c or both, not " + d;
		return false;
	}
	p->header_digests = v;
	p->data_digests = v;
	return true;
}

// config_save.cc, a library of its own (ulp_targetd_toml) that needs none of the daemon's
// parts: `ulpctl import` writes its file with it too.
//
// The configuration as the TOML file it would be read from: every target, LUN, portal
// and setting, CHAP secrets included. load(save(c)) == c. header: the comment lines the
// file starts with ("# ..." each); to_toml(c) has save's.
std::string to_toml(const Config &c, const std::string &header);
std::string to_toml(const Config &c);
// Write it to path atomically (a temporary file in the same directory, fsync, rename,
// fsync of the directory), mode 0600 (it holds secrets), the file it replaces kept in
// backup/ beside it (the last kConfigBackups). 0 or a negative errno with *why.
inline constexpr size_t kConfigBackups = 10;
int save_config(const Config &c, const std::string &path, std::string *why);
// What a file already at path gets from write_config_text: kept in backup/ (save), replaced
// without a copy, or left alone and the write refused (-EEXIST; decided by link(2), so
// that a file made meanwhile is not replaced either).
enum class Existing { Backup, Replace, Refuse };
// text written to path as save_config writes its file: mode 0600, atomically.
int write_config_text(const std::string &text, const std::string &path, Existing existing,
                      std::string *why);
// Read a TOML file alone (no flags): what SIGHUP re-reads. false with *why naming
// file:line:column.
bool load_config_file(const std::string &path, Config *out, std::string *why);

// The flags (and the file they name) as one checked Config; false with *why.
bool build_config(const Flags &f, Config *out, std::string *why);

// "1G" -> 1073741824 (K, M, G, T: powers of 1024; a bare number is bytes).
bool parse_size(const std::string &s, uint64_t *out);

// A 64-bit identifier in hex, "0x" optional, 1..16 digits ("0002c90300a1b2c3").
bool parse_hex64(const std::string &s, uint64_t *out);

// An SRP ACL entry as srpt::Target matches it: "0x" + 32 hex digits (lowercased), or an
// IPv4/IPv6 address as given. false when it is neither.
bool normalize_srp_acl(const std::string &s, std::string *out);

} // namespace targetd
