// SPDX-License-Identifier: MIT
// tools/ulp-targetd/config.h - ulp-targetd's configuration: command-line flags for one
// target, or a TOML file (--config) for several, checked into one Config and then made
// real (backstores opened, logical units and target port groups created).
//
// The file (every key optional but target.name and lun.backstore):
//
//   workers = 2                         # event-loop threads
//   state_dir = "/var/lib/ulp-targetd"  # persistent reservations with APTPL 1, a file per
//                                       # LUN (created 0700; unusable: APTPL 1 refused)
//   portals = ["0.0.0.0:3260"]          # iSCSI/TCP: "host:port", IPv6 as "[::1]:3260"
//   iser_portals = ["127.0.0.1:3260"]   # iSER (RDMA/CM): on rdma_device, or soft devices
//   srp_portals = ["10.99.0.1:5555"]    # SRP (RDMA/CM; no well-known port: give one)
//   rdma_device = "rxe0"                # a verbs device; "" (default): the soft provider,
//                                       # one soft device per iSER or SRP portal address
//   [iser]
//   recv_data_segment_length = 8192     # iSER receive buffers' data room
//   buffer_pool = "256M"                # registered data buffers per device
//   [srp]                               # the SRP target port (with srp_portals)
//   id_ext = "0x0002c90300a1b2c3"       # target port id, bytes 0..7 (hex); default: the
//   ioc_guid = "0x0002c90300a1b2c3"     # node GUID of the first SRP portal's device (both)
//   srq = false                         # one shared receive queue per device
//   acls = ["0x" + 32 hex digits of an initiator port id, or a source IP]  # empty: open
//   target = "iqn.2026-11.org.ulp:disk1" # whose LUNs SRP exports; default: the first
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
//   [[target]]
//   name = "iqn.2026-11.org.ulp:disk1"
//   alias = "disk1"
//   chap = { user = "u", secret = "0123456789ab" }       # optional
//   mutual_chap = { user = "t", secret = "ba9876543210" } # optional, with chap
//   acls = ["iqn.1994-05.com.redhat:client"]             # empty: open to everyone
//   allow_target_reset = false          # TARGET WARM/COLD RESET from any initiator
//     [[target.lun]]
//     lun = 0
//     backstore = "file"                # ram | file | block | null
//     path = "/srv/disk1.img"
//     size = "10G"                      # bytes, or with K M G T (powers of 1024); file:
//                                       # created or extended to it at start; on SIGHUP
//                                       # the LUN follows the file's length (and a block
//                                       # LUN the device's size), in whole blocks
//     block_size = 512
//     physical_block_size = 4096        # optional; reported for initiators to align to
//     removable = false                 # a removable medium (START STOP UNIT ejects it)
//     read_only = false
//     direct = true                     # O_DIRECT where aligned (file, block)
//     write_cache = true
#pragma once

#include "core/log.h"
#include "iscsi/target/target.h"
#include "iser/target.h"
#include "scsi/backstore.h"
#include "scsi/lu.h"
#include "scsi/pr_store.h"
#include "scsi/tpg.h"

#include <CLI/CLI.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace targetd
{

// The command line as given.
struct Flags {
	std::string config;                    // --config FILE
	std::string state_dir;                 // --state-dir DIR ("": the file's, or the default)
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
	std::string chap;                      // --chap USER:SECRET
	std::string mutual_chap;               // --mutual-chap USER:SECRET
	bool allow_target_reset = false;       // --allow-target-reset
	int workers = 0;                       // --workers (0: from the file, else 1)
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
};

void add_flags(CLI::App &app, Flags &f);

struct Portal {
	std::string host; // "" = any
	uint16_t port = 3260;
};

struct LunCfg {
	uint64_t lun = 0;
	ulp::scsi::BackstoreConfig bs;
	bool read_only = false;
	uint32_t physical_block_size = 0; // 0: the logical block size
	bool removable = false;           // a removable medium
};

struct TargetCfg {
	std::string name;
	std::string alias;
	std::vector<LunCfg> luns;
	std::vector<std::string> acls;
	std::optional<ulp::iscsi::ChapSecret> chap;        // the initiator proves it
	std::optional<ulp::iscsi::ChapSecret> mutual_chap; // the target proves it
	bool allow_target_reset = false; // TARGET WARM RESET and TARGET COLD RESET honoured
};

// The SRP target port (srpt::Target): its identifiers, access, and whose LUNs it serves.
struct SrpCfg {
	std::optional<uint64_t> id_ext;   // unset: the first SRP portal's device node GUID
	std::optional<uint64_t> ioc_guid; // likewise (ib_srpt's srpt_service_guid)
	bool srq = false;                 // one SRQ per device instead of per-channel rings
	std::vector<std::string> acls;    // "0x" + 32 lowercase hex digits, or an IP; empty: open
	std::string target;               // the [[target]] whose LUNs it exports; "": the first
};

struct Config {
	std::vector<Portal> portals;      // iSCSI/TCP
	std::vector<Portal> iser_portals; // iSER
	std::vector<Portal> srp_portals;  // SRP
	std::string rdma_device; // the iSER and SRP portals' verbs device; "": soft devices
	ulp::iser::PortalConfig iser;
	SrpCfg srp;
	std::vector<TargetCfg> targets;
	int workers = 1;
	std::string state_dir = "/var/lib/ulp-targetd"; // reservation state files (APTPL 1)
	ulp::iscsi::OperationalPrefs prefs;
	uint32_t cmd_window = 128;
	int nop_interval = 0; // seconds
	int nop_timeout = 15;
	bool discovery = true;
	int shutdown_grace_ms = 5000;    // how long sessions get to log out
	int shutdown_timeout_ms = 15000; // after that, dropped; this is the whole bound
};

// The flags (and the file they name) as one checked Config; false with *why.
bool build_config(const Flags &f, Config *out, std::string *why);

// What instantiate() made; owns the backstores' logical units and the port groups.
struct Runtime {
	// The state directory's store (null when it cannot be used: APTPL 1 is refused). Before
	// lus: it outlives them.
	std::unique_ptr<ulp::scsi::PrStore> pr_store;
	std::vector<std::unique_ptr<ulp::scsi::LogicalUnit>> lus;
	std::vector<std::unique_ptr<ulp::scsi::Tpg>> tpgs;
	ulp::iscsi::target::TargetConfig target_cfg;
	// With SRP portals: the SRP target port's own group (its own ACLs and relative port
	// id) over the same logical units as the iSCSI target it exports.
	std::unique_ptr<ulp::scsi::Tpg> srp_tpg;
};

bool instantiate(const Config &cfg, Runtime *rt, std::string *why);

// "1G" -> 1073741824 (K, M, G, T: powers of 1024; a bare number is bytes).
bool parse_size(const std::string &s, uint64_t *out);

// A 64-bit identifier in hex, "0x" optional, 1..16 digits ("0002c90300a1b2c3").
bool parse_hex64(const std::string &s, uint64_t *out);

// An SRP ACL entry as srpt::Target matches it: "0x" + 32 hex digits (lowercased), or an
// IPv4/IPv6 address as given. false when it is neither.
bool normalize_srp_acl(const std::string &s, std::string *out);

} // namespace targetd
