// SPDX-License-Identifier: MIT
// admin/prometheus.h - ulp-targetd's statistics (the stats_get method's result) in
// Prometheus' text exposition format 0.0.4: `ulpctl stats --prometheus`, for a node
// exporter's textfile collector or a scrape through a tiny proxy.
//
// One family per figure and level, so that summing a family never counts a command twice:
//   ulp_target_*   per target and fabric (every session it has had: never goes backwards)
//   ulp_lun_*      per LUN of a target (the commands of every fabric to it)
//   ulp_session_*  per session (I_T nexus) open now
// each with commands_total{kind}, task_management_total, read_bytes_total,
// written_bytes_total, errors_total{kind} and the histogram latency_seconds (ulp_lun_* also
// with EXTENDED COPY's copies_total{result}, copied_bytes_total and
// kernel_copied_bytes_total); then the
// connections' gauges (iSCSI's CmdSN window, SRP's credits), the RDMA portals' resources
// (QPs, CQ entries, MRs, registered heap bytes), and the daemon's login and session
// counters. Label values are escaped as the format requires (\\, \", \n).
//
// Names follow Prometheus' rules: the unit last (_bytes, _seconds), counters end in
// _total, gauges never do, and every family's HELP says what it counts. None is made from a
// JSON key: the fabric counters are a table here, and a key it does not know is left out
// (prometheus_unnamed() lists them; tests/admin/targetd_stats_test asserts none against a
// running daemon, tests/admin/prometheus_test checks the rules on a golden file).
//
// ulp_session_* and the connections' series are opt-in (PromOptions::sessions): each
// login would otherwise start new series (a session id, an initiator port), which a
// Prometheus server keeps for as long as its retention, whether the session lasted a
// second or a month. GET /metrics?sessions=1, `ulpctl stats --prometheus --sessions`.
//
// Input is a daemon's answer, checked as any input: a field missing or of another type
// is left out, never a crash.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>
#include <vector>

namespace ulp::admin
{

struct PromOptions {
	bool sessions = false; // ulp_session_* and per-connection series too
};

std::string prometheus_text(const nlohmann::json &stats, const PromOptions &o = {});

// The metrics query of GET /metrics ("", "sessions=0", "sessions=1"; '&'-separated):
// false, with *why, for any other key or value, so that a typo is a 400 and not ignored.
bool parse_prometheus_query(std::string_view query, PromOptions *o, std::string *why);

// Numeric fields of stats' "iscsi" and "srp" objects that no metric is named for.
std::vector<std::string> prometheus_unnamed(const nlohmann::json &stats);

} // namespace ulp::admin
