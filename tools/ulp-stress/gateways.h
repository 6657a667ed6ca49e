// SPDX-License-Identifier: MIT
// tools/ulp-stress/gateways.h - the gateways scenario: several ulp-targetd gateways on one
// Ceph cluster serve one RBD image (docs/ha.md), ulp-initiator's multipath mode
// (tools/ulp-initiator/multipath.h) writes and verifies through all of them for the whole
// scenario, and at random moments the owner of the image's group is killed (SIGKILL) or
// frozen (SIGSTOP; SIGCONT once another gateway reports itself the owner and, with
// thaw_after_timeout, the initiator's command timeout has passed too). A killed
// gateway, and a frozen one once it ended, is started again as its unit would
// (Restart=on-failure, after systemd's default 100 ms).
//
// Checks, each a failure of the run:
//   - the initiator ends ok: 0 failed commands, 0 blocks read back wrong (its verify pass
//     reads every block of the range at the end);
//   - every frozen gateway ends with status 3 (kFencedExit: it found itself fenced) after
//     its SIGCONT, within the bound, and never goes on serving with its old client;
//   - each failure of an owner is followed by a failover of the initiator that resumed
//     (within resume_bound), and every gateway started again comes up;
//   - no gateway ends unasked, and each stops with status 0 on SIGTERM at the end.
// The figures, p50/p99/max per kind (kill, freeze) and over all: each failover's stall (the
// initiator's I/O gap, multipath.h); the time to resume, from our failure of the owner to
// the initiator's I/O resumed (a frozen owner may answer late GOOD what it had, which the
// stall then leaves out); and the time until another gateway owned the group.
//
// The cluster: a running scripts/ceph-dev.sh cluster (ceph_dir), or one of our own started
// in a temporary directory on a free monitor port and stopped at the end. The image, the
// gateways' map and leases (a RADOS namespace of this run) are removed at the end.
#pragma once

#include "tools/ulp-stress/report.h"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace stress
{

struct GatewaysOptions {
	std::string ceph_dir;  // a running scripts/ceph-dev.sh cluster; "": start our own
	std::string ceph_dev;  // scripts/ceph-dev.sh
	std::string targetd;   // the ulp-targetd to run as the gateways
	std::string initiator; // the ulp-initiator to run across them
	std::string pool = "rbd";
	uint32_t gateways = 2;    // 2..8
	uint32_t failovers = 2;   // owners failed on purpose per transport, half killed and half
	                          // frozen (the order shuffled)
	uint32_t lease_s = 3;     // the gateways' [gateway] lease
	double cmd_timeout_s = 5; // the initiator's --cmd-timeout: a frozen owner's commands
	                          // fail after it
	std::chrono::milliseconds gap_min{1500}, gap_max{4000}; // verified I/O after a resume
	                                                        // before the next failure
	std::chrono::milliseconds resume_bound{90000}; // an owner's failure to the I/O resumed
	bool thaw_after_timeout = false; // a frozen owner's SIGCONT also waits for the
	                                 // initiator's command timeout (its session gone: no
	                                 // command of ours left for it to answer)
	uint64_t seed = 0;               // kinds, gaps, the initiator's workload
	bool verbose = false;
	const std::atomic<bool> *stop = nullptr; // set (a signal): end early, cleaning up // the
	                                         // gateways' and the initiator's lines as they come
};

// The profile's counts: short (CI: 2 failovers, lease 3 s, --cmd-timeout 5) or long (the
// figures: 50 failovers, lease 6 s, --cmd-timeout 10). false for another name.
bool gateways_profile(const std::string &name, GatewaysOptions *o);

// The scenario on each of ts (tcp, iser), one after the other on one cluster: its rows
// (gateways, gateways/kill, gateways/freeze per transport) appended to rep. A set-up that
// fails (no cluster, an image not made) is a failed row.
void gateways_run(const GatewaysOptions &o, const std::vector<Transport> &ts, Report &rep);

} // namespace stress
