// SPDX-License-Identifier: MIT
// tools/ulp-stress/snapshot.h - the daemon's resources at one moment, and the wait for them
// to come back to a baseline after a scenario.
//
// One snapshot is a set of named counts, all of which must return to their baseline (a
// teardown that leaks a session, a channel, a QP, an fd or a thread shows here), plus named
// figures that are only reported (memory). Where they come from:
//   - the admin socket's session_list: "sessions" (normal and discovery), "connections"
//     (iSCSI connections and SRP channels), "cmds_in_flight";
//   - its stats_get: "iscsi.sessions_open", "iscsi.connections_open", "srp.nexuses_open",
//     "srp.channels_open", and per RDMA portal summed over the portals, every field of
//     kPortalCounts that the daemon reports ("rdma.connections" on main; the QPs, CQ
//     entries, MRs in use and heap bytes in use once stats_get has them);
//   - /proc/PID (a daemon on this machine whose pid is known): "fds" (open descriptors but
//     the admin socket's, which our own calls open and close), "threads", and the reported
//     "vm_rss_kb" and "admin_fds".
// A field the daemon does not report is left out of both snapshots, so a newer daemon's
// counts join the check without a change here beyond naming them.
#pragma once

#include "tools/ulp-stress/target.h"

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace stress
{

struct ResourceSnapshot {
	std::map<std::string, int64_t> counts; // must come back to the baseline
	std::map<std::string, int64_t> info;   // reported only (memory)
	std::string allocator; // whose count info's heap_in_use_kb is (stats_get memory)
};

// Take one. false + *why when the admin socket does not answer.
bool take_snapshot(const Target &t, ResourceSnapshot *out, std::string *why);
// Take snapshots until two in a row agree (the admin connection of the one before may still
// be closing on the daemon's side), up to bound: the baseline to compare against. idle: also
// until nothing is logged in (every count but fds and threads zero): a nexus the warm-up
// logged out may still be draining on the daemon's side, and a baseline taken then would
// hold its channel, QP and CQ entries (our own daemon has no other user; a given target may).
// Without idle, a snapshot that is not idle must hold still for kSettle: two agreeing
// snapshots 50 ms apart can both fall inside one channel's close on a slow fabric (rxe under
// TCG, where CI saw a closing SRP channel in the baseline and gone 10 s later), and a
// baseline taken then holds a channel that then goes. Idle is taken at once.
inline constexpr std::chrono::milliseconds kSettle{5000};
// say (when given) gets a line each second of waiting past the first.
bool stable_snapshot(const Target &t, ResourceSnapshot *out, std::string *why, bool idle,
                     std::chrono::milliseconds bound = std::chrono::seconds(10),
                     const std::function<void(const std::string &)> &say = {});
// The counts of now that differ from base ("sessions 0 -> 2"), empty when back.
std::vector<std::string> snapshot_diff(const ResourceSnapshot &base, const ResourceSnapshot &now);
// One line: every count (and info) of s.
std::string snapshot_str(const ResourceSnapshot &s);

// Poll until the counts equal base, up to bound; log a line (through say) each second of
// waiting with what still differs. true when back; false with *why (what differs).
bool wait_for_baseline(const Target &t, const ResourceSnapshot &base,
                       std::chrono::milliseconds bound,
                       const std::function<void(const std::string &)> &say, ResourceSnapshot *last,
                       std::string *why);

} // namespace stress
