// SPDX-License-Identifier: MIT
// tools/ulp-stress/snapshot.cc - the daemon's resource counts and the baseline wait (see
// snapshot.h).
#include "tools/ulp-stress/snapshot.h"

#include <dirent.h>
#include <unistd.h>

#include <fstream>
#include <set>
#include <sstream>
#include <thread>

namespace stress
{

using clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

namespace
{

// Summed over stats_get's rdma_portals[]: every one the daemon reports is a count that must
// return to its baseline. "connections" is on main; the others are the resource gauges a
// daemon with per-portal resource statistics adds (QPs, CQ entries reserved, MRs in use,
// registered heap bytes in use).
constexpr const char *kPortalCounts[] = {"connections", "qps", "cq_entries", "mrs_used",
                                         "heap_bytes_used"};

// Summed the same way but only reported: pool capacities, which may grow and stay.
constexpr const char *kPortalInfo[] = {"mrs", "heap_bytes"};

// stats_get fields (section, key) that must return to their baseline.
constexpr std::pair<const char *, const char *> kStatsCounts[] = {
    {"iscsi", "sessions_open"}, {"iscsi", "connections_open"},
    {"srp", "nexuses_open"},    {"srp", "channels_open"},
    {"", "sessions"},           {"", "cmds_in_flight"}};

// The inodes of the Unix sockets bound to path: the admin socket's listener and the
// connections it accepted (an accepted socket shows its listener's path in
// /proc/net/unix). Our own admin calls come and go on those; they are not the daemon's.
std::set<std::string> admin_inodes(pid_t pid, const std::string &path)
{
	std::set<std::string> s;
	std::ifstream f("/proc/" + std::to_string(pid) + "/net/unix");
	std::string line;
	std::getline(f, line); // the header
	while (std::getline(f, line)) {
		// Num RefCount Protocol Flags Type St Inode [Path]
		std::istringstream in(line);
		std::string num, ref, proto, flags, type, st, inode, p;
		if (in >> num >> ref >> proto >> flags >> type >> st >> inode >> p && p == path)
			s.insert(inode);
	}
	return s;
}

void proc_counts(pid_t pid, const std::string &admin_path, ResourceSnapshot *out)
{
	const std::string base = "/proc/" + std::to_string(pid);
	const std::set<std::string> admin = admin_inodes(pid, admin_path);
	if (DIR *d = ::opendir((base + "/fd").c_str())) {
		int64_t n = 0, a = 0;
		while (dirent *e = ::readdir(d)) {
			if (e->d_name[0] == '.')
				continue;
			char link[64] = {};
			const std::string fd = base + "/fd/" + e->d_name;
			const ssize_t l = ::readlink(fd.c_str(), link, sizeof(link) - 1);
			const std::string t(link, l > 0 ? size_t(l) : 0);
			if (t.rfind("socket:[", 0) == 0 && admin.count(t.substr(8, t.size() - 9)))
				a++;
			else
				n++;
		}
		::closedir(d);
		out->counts["fds"] = n;
		out->info["admin_fds"] = a;
	}
	std::ifstream f(base + "/status");
	for (std::string line; std::getline(f, line);) {
		if (line.rfind("Threads:", 0) == 0)
			out->counts["threads"] = std::stoll(line.substr(8));
		else if (line.rfind("VmRSS:", 0) == 0)
			out->info["vm_rss_kb"] = std::stoll(line.substr(6));
	}
}

} // namespace

bool take_snapshot(const Target &t, ResourceSnapshot *out, std::string *why)
{
	*out = {};
	json stats, sessions;
	if (!t.call("stats_get", json::object(), &stats, why) ||
	    !t.call("session_list", json::object(), &sessions, why))
		return false;
	for (const auto &[sec, key] : kStatsCounts) {
		const json &j = *sec ? stats.value(sec, json::object()) : stats;
		if (j.is_object() && j.contains(key) && j[key].is_number())
			out->counts[std::string(*sec ? sec : "stats") + "." + key] =
			    j[key].get<int64_t>();
	}
	for (const char *k : kPortalCounts) {
		bool seen = false;
		int64_t sum = 0;
		for (const json &p : stats.value("rdma_portals", json::array()))
			if (p.contains(k) && p[k].is_number()) {
				seen = true;
				sum += p[k].get<int64_t>();
			}
		if (seen)
			out->counts[std::string("rdma.") + k] = sum;
	}
	// The allocator's count of what the daemon holds (memory.h), kB.
	if (const json m = stats.value("memory", json::object());
	    m.is_object() && m.contains("heap_in_use") && m["heap_in_use"].is_number()) {
		out->info["heap_in_use_kb"] = m["heap_in_use"].get<int64_t>() / 1024;
		out->allocator = m.value("allocator", std::string("?"));
	}
	for (const char *k : kPortalInfo)
		for (const json &p : stats.value("rdma_portals", json::array()))
			if (p.contains(k) && p[k].is_number())
				out->info[std::string("rdma.") + k] += p[k].get<int64_t>();
	int64_t conns = 0, cmds = 0;
	for (const json &s : sessions) {
		conns += s.value("connections", int64_t(0));
		cmds += s.value("cmds_in_flight", int64_t(0));
	}
	out->counts["sessions"] = int64_t(sessions.size());
	out->counts["connections"] = conns;
	out->counts["cmds_in_flight"] = cmds;
	// The daemon's fds without the admin socket's (ours come and go).
	if (t.pid() > 0)
		proc_counts(t.pid(), t.admin_socket(), out);
	return true;
}

// Nothing logged in, nothing in flight: every count but the process's own fds and threads
// is zero.
static bool is_idle(const ResourceSnapshot &s)
{
	for (const auto &[k, v] : s.counts)
		if (k != "fds" && k != "threads" && v != 0)
			return false;
	return true;
}

bool stable_snapshot(const Target &t, ResourceSnapshot *out, std::string *why, bool idle,
                     std::chrono::milliseconds bound,
                     const std::function<void(const std::string &)> &say)
{
	const auto start = clock::now();
	const auto deadline = start + bound;
	auto next_line = start + 1s;
	ResourceSnapshot prev;
	if (!take_snapshot(t, &prev, why))
		return false;
	auto same_since = clock::now();
	for (;;) {
		std::this_thread::sleep_for(50ms);
		if (!take_snapshot(t, out, why))
			return false;
		if (!snapshot_diff(prev, *out).empty())
			same_since = clock::now();
		else if (is_idle(*out) || (!idle && clock::now() - same_since >= kSettle))
			return true;
		if (clock::now() >= deadline) {
			*why = std::string("the daemon's resources do not settle") +
			       (idle ? " at idle" : "") + ": " + snapshot_str(*out);
			return false;
		}
		if (say && clock::now() >= next_line) {
			say("baseline: waiting for the daemon's resources to settle" +
			    std::string(idle ? " at idle" : "") + ": " + snapshot_str(*out));
			next_line = clock::now() + 1s;
		}
		prev = *out;
	}
}

std::vector<std::string> snapshot_diff(const ResourceSnapshot &base, const ResourceSnapshot &now)
{
	std::vector<std::string> d;
	for (const auto &[k, v] : base.counts) {
		auto it = now.counts.find(k);
		if (it == now.counts.end())
			d.push_back(k + " " + std::to_string(v) + " -> (gone)");
		else if (it->second != v)
			d.push_back(k + " " + std::to_string(v) + " -> " +
			            std::to_string(it->second));
	}
	return d;
}

std::string snapshot_str(const ResourceSnapshot &s)
{
	std::string o;
	for (const auto &[k, v] : s.counts)
		o += (o.empty() ? "" : " ") + k + "=" + std::to_string(v);
	for (const auto &[k, v] : s.info)
		o += " " + k + "=" + std::to_string(v);
	return o;
}

bool wait_for_baseline(const Target &t, const ResourceSnapshot &base,
                       std::chrono::milliseconds bound,
                       const std::function<void(const std::string &)> &say, ResourceSnapshot *last,
                       std::string *why)
{
	const auto start = clock::now();
	auto next_line = start + 1s;
	std::vector<std::string> d;
	for (;;) {
		std::string err;
		if (!take_snapshot(t, last, &err)) {
			*why = "cannot read the daemon's resources: " + err;
			return false;
		}
		d = snapshot_diff(base, *last);
		if (d.empty())
			return true;
		const auto now = clock::now();
		std::string what;
		for (auto &x : d)
			what += (what.empty() ? "" : ", ") + x;
		if (now - start >= bound) {
			*why = "resources not back at the baseline after " +
			       std::to_string(
			           std::chrono::duration_cast<std::chrono::milliseconds>(bound)
			               .count()) +
			       " ms: " + what;
			return false;
		}
		if (now >= next_line) {
			say("waiting for the daemon's resources to return to the baseline (" +
			    std::to_string(
			        std::chrono::duration_cast<std::chrono::milliseconds>(now - start)
			            .count()) +
			    " ms): " + what);
			next_line = now + 1s;
		}
		std::this_thread::sleep_for(20ms);
	}
}

} // namespace stress
