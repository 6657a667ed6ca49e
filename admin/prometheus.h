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
// written_bytes_total, errors_total{kind} and the histogram latency_seconds; then the
// connections' gauges (iSCSI's CmdSN window, SRP's credits), the RDMA portals' resources
// (QPs, CQ entries, MRs, registered heap bytes), and the daemon's login and session
// counters. Label values are escaped as the format requires (\\, \", \n).
//
// Input is a daemon's answer, checked as any input: a field missing or of another type
// is left out, never a crash.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

namespace ulp::admin
{

std::string prometheus_text(const nlohmann::json &stats);

} // namespace ulp::admin
