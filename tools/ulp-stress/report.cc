// SPDX-License-Identifier: MIT
// tools/ulp-stress/report.cc - the final table and its JSON form (see report.h).
#include "tools/ulp-stress/report.h"

#include <cinttypes>
#include <cstdio>

namespace stress
{

namespace
{

double ms(uint64_t ns)
{
	return double(ns) / 1e6;
}

} // namespace

bool Report::ok() const
{
	for (const auto &r : rows)
		if (r->failures)
			return false;
	return stop_status == 0;
}

void print_table(const Report &r)
{
	std::printf("ulp-stress: profile %s, %.1f s\n", r.profile.c_str(), r.seconds);
	if (!r.command.empty())
		std::printf("command: %s\n", r.command.c_str());
	std::string figure;
	for (const auto &row : r.rows) {
		// A header wherever the figure changes: teardown (ms), or failovers (owners failed
		// on purpose) and their I/O stalls.
		if (row->figure != figure) {
			figure = row->figure;
			const bool stall = figure == "stall";
			std::printf("%-18s %-9s %8s %10s %9s %12s %12s %12s  %s\n", "scenario",
			            "transport", stall ? "failovers" : "cycles", "I/Os", "failures",
			            stall ? "stall p50" : "teardown p50", "p99 (ms)", "max (ms)",
			            "result");
		}
		const auto &h = row->teardown;
		std::printf("%-18s %-9s %8" PRIu64 " %10" PRIu64 " %9" PRIu64
		            " %12.2f %12.2f %12.2f  %s\n",
		            row->scenario.c_str(), row->transport.c_str(), row->cycles.load(),
		            row->ios.load(), row->failures.load(), ms(h.percentile(0.5)),
		            ms(h.percentile(0.99)), ms(h.max()), row->failures ? "FAILED" : "ok");
	}
	for (const auto &row : r.rows) {
		for (const auto &[name, h] : row->more)
			std::printf(
			    "  %s/%s: %s p50 %.2f ms, p99 %.2f ms, max %.2f ms (%" PRIu64 ")\n",
			    row->scenario.c_str(), row->transport.c_str(), name.c_str(),
			    ms(h.percentile(0.5)), ms(h.percentile(0.99)), ms(h.max()), h.count());
		for (const auto &n : row->notes)
			std::printf("  %s/%s: %s\n", row->scenario.c_str(), row->transport.c_str(),
			            n.c_str());
		for (const auto &m : row->msgs)
			std::printf("  %s/%s: FAILED: %s\n", row->scenario.c_str(),
			            row->transport.c_str(), m.c_str());
	}
	if (r.have_snapshots) {
		std::printf("resources at the baseline: %s\n", snapshot_str(r.baseline).c_str());
		std::printf("resources at the end:      %s\n", snapshot_str(r.final).c_str());
		for (const std::string &l : r.memory.lines())
			std::printf("%s\n", l.c_str());
		if (r.memory.enabled && !r.memory.checked() && !r.memory.rss_unjudged.empty())
			std::printf("memory: not judged: %s\n", r.memory.rss_unjudged.c_str());
	}
	if (r.stop_status != 0)
		std::printf("ulp-targetd did not stop cleanly on SIGTERM: status %d\n",
		            r.stop_status);
	std::printf("result: %s\n", r.ok() ? "ok" : "FAILED");
}

void print_json(const Report &r)
{
	json out;
	out["command"] = r.command;
	out["profile"] = r.profile;
	out["seconds"] = r.seconds;
	json rows = json::array();
	for (const auto &row : r.rows) {
		const auto &h = row->teardown;
		json more = json::object();
		for (const auto &[name, m] : row->more)
			more[name] = {{"count", m.count()},
			              {"p50", ms(m.percentile(0.5))},
			              {"p99", ms(m.percentile(0.99))},
			              {"max", ms(m.max())}};
		rows.push_back({{"scenario", row->scenario},
		                {"transport", row->transport},
		                {"cycles", row->cycles.load()},
		                {"ios", row->ios.load()},
		                {"failures", row->failures.load()},
		                {row->figure + "_ms",
		                 {{"count", h.count()},
		                  {"p50", ms(h.percentile(0.5))},
		                  {"p99", ms(h.percentile(0.99))},
		                  {"max", ms(h.max())}}},
		                {"more_ms", more},
		                {"notes", row->notes},
		                {"messages", row->msgs},
		                {"ok", row->failures == 0}});
	}
	out["rows"] = rows;
	if (r.have_snapshots) {
		out["baseline"] = {{"counts", r.baseline.counts}, {"info", r.baseline.info}};
		out["final"] = {{"counts", r.final.counts}, {"info", r.final.info}};
		const MemoryCheck &m = r.memory;
		auto fig = [](const MemoryFigure &f) {
			return json{{"baseline_kb", f.baseline_kb},
			            {"ref_kb", f.ref_kb},
			            {"end_kb", f.end_kb}};
		};
		out["memory"] = {{"checked", m.checked()},
		                 {"judged", m.heap_known() ? "heap_in_use" : "vm_rss"},
		                 {"allocator", m.allocator},
		                 {"heap_in_use", fig(m.heap)},
		                 {"vm_rss", fig(m.rss)},
		                 {"allowed_kb", m.allowed_kb()}};
	}
	out["targetd_stop_status"] = r.stop_status;
	out["ok"] = r.ok();
	std::printf("%s\n", out.dump(2).c_str());
}

} // namespace stress
