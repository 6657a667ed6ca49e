// SPDX-License-Identifier: MIT
// tools/ulpctl/main.cc - ulpctl: ulp-targetd's administration from the command line, in the
// manner of targetcli and tgtadm, over the daemon's JSON-RPC admin socket (admin/).
//
//   ulpctl [--socket PATH] [--json] NOUN VERB [options]
//   ulpctl show                      portals, targets, LUNs, ACLs, the SRP target port
//   ulpctl session list              who is logged in, how, and what is in flight
//   ulpctl lun create --target IQN --lun 1 --backstore ram --size 32M
//   ulpctl lun create -t IQN -l 2 -b rbd --pool rbd --image disk2 --create --size 64G
//   ulpctl session logout iscsi:3
//   ulpctl save
//   ulpctl import --from targetcli /etc/target/saveconfig.json -o ulp-targetd.toml
//
// import alone asks no daemon: it converts LIO's or tgt's saved configuration into
// ulp-targetd's TOML file (import.h), offline.
//
// Each NOUN VERB is one method (`ulpctl methods` lists them; `ulpctl call METHOD JSON`
// calls any). --json prints the method's result as JSON for scripts; otherwise tables.
// Exit status: 0 done, 1 the daemon refused (its message on stderr), 2 usage, 3 no daemon;
// import's own: 0, 1 bad input or not written, 2 usage, 4 written with settings not
// carried over (import.h).
#include "admin/client.h"
#include "admin/prometheus.h"
#include "tools/ulpctl/import.h"
#include "ulp/version.h"

#include <CLI/CLI.hpp>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

using ulp::admin::json;

namespace
{

constexpr const char *kDefaultSocket = "/run/ulp-targetd/admin.sock";

std::string human_size(uint64_t b)
{
	const char *u[] = {"B", "K", "M", "G", "T"};
	int i = 0;
	double v = double(b);
	while (v >= 1024 && i < 4 && (uint64_t(v) % 1024 == 0 || v >= 10240)) {
		v /= 1024;
		i++;
	}
	char buf[32];
	if (v == double(uint64_t(v)))
		std::snprintf(buf, sizeof(buf), "%llu%s", (unsigned long long)v, u[i]);
	else
		std::snprintf(buf, sizeof(buf), "%.1f%s", v, u[i]);
	return buf;
}

std::string str(const json &j)
{
	if (j.is_string())
		return j.get<std::string>();
	if (j.is_null())
		return "-";
	return j.dump();
}

// A table: columns as wide as their widest cell.
void table(const std::vector<std::string> &head, const std::vector<std::vector<std::string>> &rows)
{
	std::vector<size_t> w(head.size());
	for (size_t i = 0; i < head.size(); i++)
		w[i] = head[i].size();
	for (auto &r : rows)
		for (size_t i = 0; i < r.size() && i < w.size(); i++)
			w[i] = std::max(w[i], r[i].size());
	auto line = [&](const std::vector<std::string> &r) {
		std::string l;
		for (size_t i = 0; i < r.size(); i++) {
			l += r[i];
			if (i + 1 < r.size())
				l += std::string(w[i] - r[i].size() + 2, ' ');
		}
		std::cout << l << "\n";
	};
	line(head);
	for (auto &r : rows)
		line(r);
}

// Where a LUN's blocks are: its path, or an rbd image as POOL/[NAMESPACE/]IMAGE.
std::string where(const json &l)
{
	if (l.contains("image"))
		return str(l["pool"]) + "/" +
		       (l.contains("namespace") ? str(l["namespace"]) + "/" : "") + str(l["image"]);
	return l.contains("path") ? str(l["path"]) : "";
}

// An ACL entry's own view as `show` prints it: " [luns 0->5 ro, 1->1; CHAP user u]".
std::string map_text(const json &owner, const json &initiator)
{
	if (!owner.contains("acl_maps") || !owner["acl_maps"].contains(str(initiator)))
		return "";
	const json &e = owner["acl_maps"][str(initiator)];
	std::string out;
	for (const json &l : e["luns"]) {
		out += out.empty() ? "luns " : ", ";
		out += std::to_string(l["lun"].get<uint64_t>()) + "->" +
		       std::to_string(l["target_lun"].get<uint64_t>());
		if (l["read_only"].get<bool>())
			out += " ro";
	}
	if (e.contains("chap_user"))
		out += (out.empty() ? "" : "; ") + std::string("CHAP user ") + str(e["chap_user"]);
	if (e.contains("mutual_chap_user"))
		out += ", mutual";
	return out.empty() ? "" : " [" + out + "]";
}

void print_show(const json &r)
{
	std::cout << "ulp-targetd"
	          << (str(r["config_file"]).empty() || r["config_file"] == ""
	                  ? std::string()
	                  : " (" + str(r["config_file"]) + ")")
	          << ", log level " << str(r["log_level"]) << "\n";
	std::cout << "o- portals\n";
	for (const json &p : r["portals"])
		std::cout << "|  o- " << str(p["transport"]) << " " << str(p["listening"]) << "\n";
	std::cout << "o- targets\n";
	for (const json &t : r["targets"]) {
		std::string attrs =
		    t["open"].get<bool>() ? "open" : std::to_string(t["acls"].size()) + " ACLs";
		attrs += ", CHAP " + str(t["chap"]);
		attrs += ", " + std::to_string(t["sessions"].get<uint64_t>()) + " sessions";
		if (t.contains("srp_exported"))
			attrs += ", exported over SRP";
		if (t.contains("redirect"))
			attrs += std::string(", logins redirected") +
			         (t["redirect_permanent"].get<bool>() ? " permanently" : "") +
			         " to " + str(t["redirect"]);
		std::cout << "   o- " << str(t["name"]) << " [" << attrs << "]\n";
		std::cout << "   |  o- luns\n";
		for (const json &l : t["luns"]) {
			std::string d = str(l["backstore"]);
			if (!where(l).empty())
				d += " " + where(l);
			d += " " + human_size(l["size"].get<uint64_t>());
			if (l.contains("blocks"))
				d += " (" + std::to_string(l["blocks"].get<uint64_t>()) +
				     " blocks of " +
				     std::to_string(l["block_size"].get<uint64_t>()) + ")";
			if (l["read_only"].get<bool>())
				d += " read-only";
			if (l["removable"].get<bool>())
				d += " removable";
			std::cout << "   |  |  o- lun " << l["lun"].get<uint64_t>() << ": " << d
			          << "\n";
			// Its identity as initiators see it; "derived": from TARGET/LUN.
			if (l.contains("serial"))
				std::cout << "   |  |     " << str(l["vendor"]) << " "
				          << str(l["product"]) << " " << str(l["revision"])
				          << ", serial " << str(l["serial"])
				          << (l["serial_derived"].get<bool>() ? " (derived)" : "")
				          << ", naa " << str(l["naa"])
				          << (l["naa_derived"].get<bool>() ? " (derived)" : "")
				          << "\n";
		}
		std::cout << "   |  o- acls\n";
		for (const json &a : t["acls"])
			std::cout << "   |     o- " << str(a) << map_text(t, a) << "\n";
	}
	if (r.contains("srp")) {
		const json &s = r["srp"];
		std::cout << "o- srp target port: exports " << str(s["exports"])
		          << (s["acls"].empty() ? " (open)" : "") << "\n";
		for (const json &a : s["acls"])
			std::cout << "   o- acl " << str(a) << map_text(s, a) << "\n";
		for (const json &l : s["add_target"])
			std::cout << "   o- add_target: " << str(l) << "\n";
	}
}

void print_sessions(const json &r)
{
	std::vector<std::vector<std::string>> rows;
	for (const json &s : r) {
		std::string params;
		if (s.contains("params")) {
			const json &p = s["params"];
			params = "digests " + str(p["header_digest"]) + "/" +
			         str(p["data_digest"]) + " mrdsl " +
			         std::to_string(p["max_recv_data_segment_length"].get<uint64_t>()) +
			         " burst " + std::to_string(p["max_burst_length"].get<uint64_t>()) +
			         (p["immediate_data"].get<bool>() ? " immdata" : "") + " auth " +
			         str(p["auth"]);
		}
		rows.push_back({str(s["id"]), str(s["transport"]), str(s["type"]),
		                str(s["initiator"]), str(s["target"]), str(s["peer"]),
		                s.contains("portal") ? str(s["portal"]) : "-",
		                std::to_string(s["connections"].get<uint64_t>()),
		                s.contains("worker") ? std::to_string(s["worker"].get<int>()) : "-",
		                std::to_string(s["cmds_in_flight"].get<uint64_t>()), params});
	}
	table({"ID", "TRANSPORT", "TYPE", "INITIATOR", "TARGET", "PEER", "PORTAL", "CONNS",
	       "WORKER", "CMDS", "NEGOTIATED"},
	      rows);
}

void print_flat(const json &j, const std::string &prefix = "")
{
	if (j.is_object()) {
		for (auto &[k, v] : j.items())
			print_flat(v, prefix.empty() ? k : prefix + "." + k);
	} else if (j.is_array() && !j.empty() && j[0].is_object()) {
		for (size_t i = 0; i < j.size(); i++)
			print_flat(j[i], prefix + "[" + std::to_string(i) + "]");
	} else {
		std::cout << (prefix.empty() ? "" : prefix + " ") << str(j) << "\n";
	}
}

// An io object's row: commands by kind, bytes, errors, mean latency.
std::vector<std::string> io_row(const json &io)
{
	auto n = [](const json &j, const char *k) {
		return j.is_object() && j.contains(k) && j[k].is_number_unsigned()
		           ? j[k].get<uint64_t>()
		           : uint64_t(0);
	};
	const json &c = io.is_object() && io.contains("commands") ? io["commands"] : json();
	uint64_t errs = 0;
	if (io.is_object() && io.contains("errors") && io["errors"].is_object())
		for (auto &[k, v] : io["errors"].items())
			errs += v.is_number_unsigned() ? v.get<uint64_t>() : 0;
	const json &lat = io.is_object() && io.contains("latency") ? io["latency"] : json();
	const uint64_t cnt = n(lat, "count");
	char avg[32] = "-";
	if (cnt)
		std::snprintf(avg, sizeof(avg), "%.1f",
		              double(n(lat, "sum_ns")) / 1000.0 / double(cnt));
	return {std::to_string(n(c, "read")),
	        std::to_string(n(c, "write")),
	        std::to_string(n(c, "other")),
	        std::to_string(n(io, "tmfs")),
	        human_size(n(io, "bytes_read")),
	        human_size(n(io, "bytes_written")),
	        std::to_string(errs),
	        avg};
}

// stats_get: one row per target, its LUNs and its sessions; connections; RDMA resources;
// then the daemon's counters.
void print_stats(const json &r)
{
	std::vector<std::vector<std::string>> rows;
	auto row = [&](std::vector<std::string> head, const json &io) {
		auto x = io_row(io);
		head.insert(head.end(), x.begin(), x.end());
		rows.push_back(head);
	};
	std::vector<std::vector<std::string>> conns, rbd, xcopy;
	if (r.contains("io") && r["io"].is_array())
		for (const json &t : r["io"]) {
			row({str(t["target"]), str(t["fabric"]), "total"}, t["io"]);
			for (const json &l : t["luns"]) {
				row({"", "", "lun " + str(l["lun"])}, l["io"]);
				// The LUN's EXTENDED COPY commands, when it has had any.
				if (auto x = l.find("xcopy"); x != l.end() && x->is_object()) {
					auto n = [&](const char *k) {
						return x->value(k, uint64_t(0));
					};
					if (n("good") + n("failed") + n("aborted"))
						xcopy.push_back({str(t["target"]), str(l["lun"]),
						                 std::to_string(n("good")),
						                 std::to_string(n("failed")),
						                 std::to_string(n("aborted")),
						                 human_size(n("bytes")),
						                 human_size(n("kernel_bytes"))});
				}
				if (auto b = l.find("rbd"); b != l.end() && b->is_object())
					rbd.push_back({str(t["target"]), str(l["lun"]),
					               str((*b)["inflight"]),
					               str((*b)["completed"]), str((*b)["errors"]),
					               str((*b)["avg_us"]),
					               b->value("fenced", false) ? "FENCED" : "no",
					               str((*b)["client_addr"])});
			}
			for (const json &s : t["sessions"]) {
				row({"", "", str(s["id"]) + " " + str(s["initiator"])}, s["io"]);
				for (const json &c : s["connections"])
					conns.push_back(
					    {str(s["id"]), str(c["peer"]),
					     c.contains("cmdsn_window")
					         ? "CmdSN " + str(c["exp_cmdsn"]) + ".." +
					               str(c["max_cmdsn"]) + " (window " +
					               str(c["cmdsn_window"]) + ")"
					         : "req_lim " + str(c["req_lim"]) + " of " +
					               str(c["credits"]),
					     c.contains("commands") ? str(c["commands"])
					                            : str(c["ioctxs_busy"])});
			}
		}
	table({"TARGET", "FABRIC", "OF", "READS", "WRITES", "OTHER", "TMFS", "READ", "WRITTEN",
	       "ERRORS", "AVG_US"},
	      rows);
	if (!conns.empty()) {
		std::cout << "\n";
		table({"SESSION", "PEER", "WINDOW", "CMDS"}, conns);
	}
	if (!xcopy.empty()) { // EXTENDED COPY per copy manager LUN (IN_KERNEL: copy_file_range)
		std::cout << "\n";
		table({"TARGET", "XCOPY_LUN", "GOOD", "FAILED", "ABORTED", "COPIED", "IN_KERNEL"},
		      xcopy);
	}
	if (!rbd.empty()) { // librbd's side of the rbd LUNs (AVG_US: submission to callback)
		std::cout << "\n";
		table({"TARGET", "RBD_LUN", "INFLIGHT", "DONE", "ERRORS", "AVG_US", "FENCED",
		       "CLIENT"},
		      rbd);
	}
	if (r.contains("rdma_portals") && !r["rdma_portals"].empty()) {
		std::vector<std::vector<std::string>> p;
		for (const json &x : r["rdma_portals"])
			p.push_back({str(x["transport"]), str(x["address"]), str(x["connections"]),
			             str(x["qps"]), str(x["cq_entries"]),
			             str(x["mrs_used"]) + "/" + str(x["mrs"]),
			             human_size(x.value("heap_bytes_used", uint64_t(0))) + "/" +
			                 human_size(x.value("heap_bytes", uint64_t(0)))});
		std::cout << "\n";
		table({"PORTAL", "ADDRESS", "CONNS", "QPS", "CQES", "MRS", "HEAP"}, p);
	}
	json rest = r;
	for (const char *k : {"io", "rdma_portals", "latency_bounds_us"})
		rest.erase(k);
	std::cout << "\n";
	print_flat(rest);
}

// ulpctl --version: its own line, then the daemon's. A daemon that does not answer is said
// on stderr (exit 3, as any call that cannot reach it), after ulpctl's own line.
int print_versions(const std::string &socket, int timeout_s)
{
	std::cout << ulp::version_line("ulpctl") << std::endl;
	ulp::admin::Client c;
	std::string why;
	json resp;
	if (c.connect(socket, &why) != 0 ||
	    !c.call("version_get", json::object(), &resp, &why, std::chrono::seconds(timeout_s))) {
		std::fprintf(stderr, "ulpctl: the daemon's version: %s\n", why.c_str());
		return 3;
	}
	if (resp.contains("error")) {
		// A daemon older than version_get.
		std::fprintf(stderr, "ulpctl: the daemon's version: %s\n",
		             str(resp["error"]["message"]).c_str());
		return 1;
	}
	const json &r = resp["result"];
	std::cout << str(r["program"]) << " " << str(r["version"]);
	if (!str(r["git_commit"]).empty())
		std::cout << " (git " << str(r["git_commit"]) << ")";
	std::cout << ", pid " << (r["pid"].is_number_integer() ? r["pid"].get<int64_t>() : 0)
	          << std::endl;
	return 0;
}

} // namespace

int main(int argc, char **argv)
{
	CLI::App app{"ulpctl: administer a running ulp-targetd over its admin socket "
	             "(JSON-RPC 2.0, one request per line)"};
	// At most one; none only with --version.
	app.require_subcommand(0, 1);
	std::string socket =
	    std::getenv("ULPCTL_SOCKET") ? std::getenv("ULPCTL_SOCKET") : kDefaultSocket;
	bool as_json = false;
	int timeout_s = 120;
	app.add_option("--socket,-s", socket,
	               "the daemon's admin socket, or tcp:HOST:PORT (default $ULPCTL_SOCKET or " +
	                   std::string(kDefaultSocket) + ")");
	app.add_flag("--json,-j", as_json, "print the result as JSON (for scripts)");
	app.add_option("--timeout", timeout_s, "seconds to wait for an answer (default 120)");
	bool version = false;
	app.add_flag("--version", version,
	             "ulpctl's version, then the daemon's (version_get) when it answers");
	app.footer(
	    "Nouns and verbs: show, stats, save [PATH], reload, methods, call METHOD [JSON],\n"
	    "  target list|create|delete|redirect, lun list|create|delete|resize|rescan,\n"
	    "  acl list|add|delete, chap set|clear, srp-acl add|delete,\n"
	    "  portal list|create|delete, session list|logout|drop, connection drop,\n"
	    "  log get|set, import (offline: no daemon).  `ulpctl NOUN VERB --help` for each.\n"
	    "A Ceph RBD image as a LUN: ulpctl lun create -t IQN -l 2 -b rbd --pool rbd "
	    "--image disk2\n"
	    "  [--conf /etc/ceph/ceph.conf --client ID --keyring FILE] [--create --size 64G].");

	std::string method;
	json params = json::object();
	auto set = [&](const char *k, auto v) { params[k] = v; };

	// ---- show, stats, save, reload, methods, call ------------------------------------------
	auto *show =
	    app.add_subcommand("show", "portals, targets, LUNs, ACLs, the SRP target port");
	show->callback([&] { method = "config_show"; });
	bool prometheus = false;
	auto *stats = app.add_subcommand(
	    "stats",
	    "I/O per target, LUN, session and connection; resources; the daemon's counters");
	stats->add_flag("--prometheus", prometheus, "in Prometheus' text exposition format");
	bool prom_sessions = false;
	stats->add_flag("--sessions", prom_sessions,
	                "with --prometheus: the per-session and per-connection series too (each "
	                "login starts new series)");
	stats->callback([&] { method = "stats_get"; });
	std::string save_path;
	auto *save = app.add_subcommand("save", "write the running configuration to its TOML file");
	save->add_option("path", save_path, "another file (default: the daemon's --config)");
	save->callback([&] {
		method = "config_save";
		if (!save_path.empty())
			set("path", save_path);
	});
	auto *reload = app.add_subcommand("reload", "re-read the configuration file (as SIGHUP)");
	reload->callback([&] { method = "config_reload"; });
	auto *methods = app.add_subcommand("methods", "every RPC method with its parameters");
	methods->callback([&] { method = "rpc_get_methods"; });
	std::string call_method, call_params;
	auto *call = app.add_subcommand("call", "call any method with JSON parameters");
	call->add_option("method", call_method)->required();
	call->add_option("params", call_params, "a JSON object");
	call->callback([&] {
		method = call_method;
		if (!call_params.empty()) {
			params = json::parse(call_params, nullptr, false);
			if (!params.is_object())
				throw CLI::ValidationError("params",
				                           "not a JSON object: " + call_params);
		}
	});

	// ---- target
	// ------------------------------------------------------------------------------
	auto *target = app.add_subcommand("target", "iSCSI targets")->require_subcommand(1);
	target->add_subcommand("list", "the targets")->callback([&] { method = "target_list"; });
	std::string t_name, t_alias, chap_user, chap_secret, mutual_user, mutual_secret;
	std::vector<std::string> t_acls;
	bool t_reset = false;
	uint64_t grace_ms = 5000, timeout_ms = 15000;
	auto *tc = target->add_subcommand("create", "a new target (add LUNs with lun create)");
	tc->add_option("name", t_name, "its iSCSI name")->required();
	tc->add_option("--alias", t_alias);
	tc->add_option("--acl", t_acls, "an initiator allowed in (repeatable; none: open)");
	tc->add_option("--chap-user", chap_user);
	tc->add_option("--chap-secret", chap_secret);
	tc->add_option("--mutual-user", mutual_user);
	tc->add_option("--mutual-secret", mutual_secret);
	tc->add_flag("--allow-target-reset", t_reset);
	tc->callback([&] {
		method = "target_create";
		set("name", t_name);
		if (!t_alias.empty())
			set("alias", t_alias);
		if (!t_acls.empty())
			set("acls", t_acls);
		if (t_reset)
			set("allow_target_reset", true);
		if (!chap_user.empty() || !chap_secret.empty()) {
			set("chap_user", chap_user);
			set("chap_secret", chap_secret);
		}
		if (!mutual_user.empty() || !mutual_secret.empty()) {
			set("mutual_user", mutual_user);
			set("mutual_secret", mutual_secret);
		}
	});
	auto *td =
	    target->add_subcommand("delete", "remove a target (its sessions are logged out)");
	td->add_option("name", t_name)->required();
	td->add_option("--grace-ms", grace_ms, "how long sessions get to log out (default 5000)");
	td->add_option("--timeout-ms", timeout_ms, "the whole bound (default 15000)");
	td->callback([&] {
		method = "target_delete";
		set("name", t_name);
		set("grace_ms", grace_ms);
		set("timeout_ms", timeout_ms);
	});
	std::string redirect_to;
	bool redirect_perm = false;
	auto *tr = target->add_subcommand(
	    "redirect", "answer new logins with where the target moved (none: serve them here)");
	tr->add_option("--target,-t", t_name)->required();
	tr->add_option("address", redirect_to,
	               "HOST:PORT the initiators log in to instead; absent: no redirect");
	tr->add_flag("--permanent", redirect_perm, "moved permanently (0102h), not for now");
	tr->callback([&] {
		method = "target_redirect";
		set("target", t_name);
		if (!redirect_to.empty())
			set("address", redirect_to);
		if (redirect_perm)
			set("permanent", true);
	});

	// ---- lun
	// ---------------------------------------------------------------------------------
	auto *lun = app.add_subcommand("lun", "LUNs and their backstores")->require_subcommand(1);
	std::string l_target, l_bs, l_size, l_path;
	uint64_t l_lun = 0, l_bsize = 512, l_pbs = 0, l_qd = 64;
	bool l_ro = false, l_rm = false, l_nodirect = false, l_nowc = false;
	// rbd: the image and the Ceph client that opens it (lun_create's parameters)
	std::string r_pool, r_image, r_ns, r_conf, r_client, r_keyring, r_group;
	bool r_create = false;
	uint64_t r_timeout = 0; // seconds; 0: the daemon's default
	std::string r_atomic;   // rbd atomic_unit (bytes, or 64K); empty: the daemon's default
	// the LU's identity (lun_create's vendor ... naa); empty: the daemon's default
	std::string i_vendor, i_product, i_revision, i_serial, i_naa;
	auto *ll = lun->add_subcommand("list", "LUNs of a target (or all)");
	ll->add_option("--target,-t", l_target);
	ll->callback([&] {
		method = "lun_list";
		if (!l_target.empty())
			set("target", l_target);
	});
	auto *lc = lun->add_subcommand("create", "a new LUN with its backstore");
	lc->add_option("--target,-t", l_target)->required();
	lc->add_option("--lun,-l", l_lun)->required();
	lc->add_option("--backstore,-b", l_bs, "ram | file | block | rbd | null")->required();
	lc->add_option("--size", l_size,
	               "bytes, or 32M, 10G (rbd: default the image's; else it must match, or is "
	               "the size --create makes)");
	lc->add_option("--path", l_path, "file or block device");
	lc->add_option("--block-size", l_bsize, "logical block (default 512)");
	lc->add_option("--physical-block-size", l_pbs);
	lc->add_flag("--read-only", l_ro);
	lc->add_flag("--removable", l_rm);
	lc->add_flag("--no-direct", l_nodirect, "no O_DIRECT (file, block)");
	lc->add_flag("--no-write-cache", l_nowc, "report no volatile cache");
	lc->add_option("--queue-depth", l_qd);
	lc->add_option("--pool", r_pool, "rbd: the image's pool (required)");
	lc->add_option("--image", r_image, "rbd: the image's name (required)");
	lc->add_option("--namespace", r_ns, "rbd: a RADOS namespace in the pool");
	lc->add_option("--conf", r_conf, "rbd: ceph.conf (default: $CEPH_CONF, /etc/ceph)");
	lc->add_option("--client", r_client,
	               "rbd: the Ceph client id, without client. (default admin)");
	lc->add_option("--keyring", r_keyring, "rbd: the client's keyring (default: ceph.conf's)");
	lc->add_option("--group", r_group,
	               "rbd: LUNs of a group share one Ceph client, the identity Ceph fences "
	               "(default \"default\")");
	lc->add_flag("--create", r_create, "rbd: create the image, of --size, when it is missing");
	lc->add_option("--rbd-timeout", r_timeout,
	               "rbd: seconds to connect, and for each OSD operation (default 30)");
	lc->add_option("--atomic-unit", r_atomic,
	               "rbd: WRITE ATOMIC's alignment and longest length, bytes or 16K; a power "
	               "of two up to the stripe unit (default 128K; 0: no WRITE ATOMIC)");
	lc->add_option("--vendor", i_vendor, "INQUIRY vendor, 1..8 printable ASCII (default ULP)");
	lc->add_option("--product", i_product,
	               "INQUIRY product, 1..16 printable ASCII (default \"ulp BACKSTORE\")");
	lc->add_option("--revision", i_revision, "INQUIRY revision, 1..4 (default 0001)");
	lc->add_option("--serial", i_serial,
	               "unit serial number (VPD 80h), 1..247 printable ASCII (default: derived "
	               "from TARGET/LUN)");
	lc->add_option("--naa", i_naa,
	               "NAA designator (VPD 83h), 16 hex digits starting 5, 3 or 2 (default: "
	               "derived from TARGET/LUN)");
	lc->callback([&] {
		method = "lun_create";
		set("target", l_target);
		set("lun", l_lun);
		set("backstore", l_bs);
		if (!l_size.empty())
			set("size", l_size);
		if (!l_path.empty())
			set("path", l_path);
		set("block_size", l_bsize);
		if (l_pbs)
			set("physical_block_size", l_pbs);
		set("read_only", l_ro);
		set("removable", l_rm);
		// Only when asked: rbd takes neither (the daemon refuses them).
		if (l_nodirect)
			set("direct", false);
		if (l_nowc)
			set("write_cache", false);
		set("queue_depth", l_qd);
		const std::pair<const char *, const std::string *> rbd[] = {
		    {"pool", &r_pool},  {"image", &r_image},   {"namespace", &r_ns},
		    {"conf", &r_conf},  {"client", &r_client}, {"keyring", &r_keyring},
		    {"group", &r_group}};
		for (const auto &[k, v] : rbd)
			if (!v->empty())
				set(k, *v);
		if (r_create)
			set("create", true);
		if (r_timeout)
			set("timeout", r_timeout);
		if (!r_atomic.empty())
			set("atomic_unit", r_atomic);
		const std::pair<const char *, const std::string *> ident[] = {
		    {"vendor", &i_vendor},
		    {"product", &i_product},
		    {"revision", &i_revision},
		    {"serial", &i_serial},
		    {"naa", &i_naa}};
		for (const auto &[k, v] : ident)
			if (!v->empty())
				set(k, *v);
	});
	uint64_t lun_grace = 5000, lun_timeout = 10000;
	auto *ld = lun->add_subcommand("delete",
	                               "remove a LUN (commands in flight: completed or aborted)");
	ld->add_option("--target,-t", l_target)->required();
	ld->add_option("--lun,-l", l_lun)->required();
	ld->add_option("--grace-ms", lun_grace, "default 5000");
	ld->add_option("--timeout-ms", lun_timeout, "default 10000");
	ld->callback([&] {
		method = "lun_delete";
		set("target", l_target);
		set("lun", l_lun);
		set("grace_ms", lun_grace);
		set("timeout_ms", lun_timeout);
	});
	auto *lr = lun->add_subcommand("resize", "set a LUN's capacity");
	lr->add_option("--target,-t", l_target)->required();
	lr->add_option("--lun,-l", l_lun)->required();
	lr->add_option("--size", l_size)->required();
	lr->callback([&] {
		method = "lun_resize";
		set("target", l_target);
		set("lun", l_lun);
		set("size", l_size);
	});
	int64_t rescan_lun = -1;
	auto *ls = lun->add_subcommand("rescan", "re-read a LUN's storage size");
	ls->add_option("--target,-t", l_target)->required();
	ls->add_option("--lun,-l", rescan_lun);
	ls->callback([&] {
		method = "lun_rescan";
		set("target", l_target);
		if (rescan_lun >= 0)
			set("lun", rescan_lun);
	});

	// ---- acl, chap, srp-acl
	// ------------------------------------------------------------------
	auto *acl = app.add_subcommand("acl", "initiators a target admits")->require_subcommand(1);
	std::string a_init;
	auto *al = acl->add_subcommand("list", "a target's ACLs");
	al->add_option("--target,-t", l_target)->required();
	al->callback([&] {
		method = "acl_list";
		set("target", l_target);
	});
	for (const char *verb : {"add", "delete"}) {
		auto *s = acl->add_subcommand(verb, std::string(verb) + " an initiator");
		s->add_option("--target,-t", l_target)->required();
		s->add_option("initiator", a_init)->required();
		s->callback([&, verb] {
			method = std::string("acl_") + verb;
			set("target", l_target);
			set("initiator", a_init);
		});
	}
	// An ACL entry's own LUN map: lun is what the initiator sees, --target-lun the
	// target's LUN behind it (default: the same number).
	int64_t m_lun = 0, m_tlun = -1;
	bool m_ro = false;
	auto map_cmd = [&](CLI::App *parent, const char *fabric, bool with_target) {
		auto *mp = parent->add_subcommand("map", "show an initiator a LUN (it then sees "
		                                         "only the LUNs it maps)");
		auto *um = parent->add_subcommand(
		    "unmap", "take a LUN out of an initiator's map (not its last)");
		for (CLI::App *s : {mp, um}) {
			if (with_target)
				s->add_option("--target,-t", l_target)->required();
			s->add_option("initiator", a_init)->required();
			s->add_option("lun", m_lun, "the LUN the initiator sees")->required();
		}
		mp->add_option("--target-lun", m_tlun, "the target's LUN (default: lun)");
		mp->add_flag("--read-only", m_ro, "writes refused for this initiator");
		mp->callback([&, fabric, with_target] {
			method = std::string(fabric) + "acl_map";
			if (with_target)
				set("target", l_target);
			set("initiator", a_init);
			set("lun", m_lun);
			if (m_tlun >= 0)
				set("target_lun", m_tlun);
			if (m_ro)
				set("read_only", true);
		});
		um->callback([&, fabric, with_target] {
			method = std::string(fabric) + "acl_unmap";
			if (with_target)
				set("target", l_target);
			set("initiator", a_init);
			set("lun", m_lun);
		});
	};
	map_cmd(acl, "", true);
	auto *am = acl->add_subcommand("maps", "a target's per-initiator LUN maps");
	am->add_option("--target,-t", l_target)->required();
	am->callback([&] {
		method = "acl_map_list";
		set("target", l_target);
	});
	auto *chap = app.add_subcommand("chap", "CHAP for new logins")->require_subcommand(1);
	auto *cs = chap->add_subcommand("set", "require CHAP (and mutual CHAP)");
	cs->add_option("--target,-t", l_target)->required();
	cs->add_option("--user", chap_user)->required();
	cs->add_option("--secret", chap_secret)->required();
	cs->add_option("--mutual-user", mutual_user);
	cs->add_option("--mutual-secret", mutual_secret);
	cs->callback([&] {
		method = "chap_set";
		set("target", l_target);
		set("user", chap_user);
		set("secret", chap_secret);
		if (!mutual_user.empty() || !mutual_secret.empty()) {
			set("mutual_user", mutual_user);
			set("mutual_secret", mutual_secret);
		}
	});
	auto *cc = chap->add_subcommand("clear", "no CHAP");
	cc->add_option("--target,-t", l_target)->required();
	cc->callback([&] {
		method = "chap_clear";
		set("target", l_target);
	});
	auto *sacl =
	    app.add_subcommand("srp-acl", "SRP initiators admitted")->require_subcommand(1);
	for (const char *verb : {"add", "delete"}) {
		auto *s = sacl->add_subcommand(verb, std::string(verb) + " an SRP initiator");
		s->add_option("initiator", a_init, "0x + 32 hex digits, or an IP")->required();
		s->callback([&, verb] {
			method = std::string("srp_acl_") + verb;
			set("initiator", a_init);
		});
	}
	map_cmd(sacl, "srp_", false);

	// ---- alua
	// --------------------------------------------------------------------------------
	auto *alua = app.add_subcommand("alua", "asymmetric access: target port groups and "
	                                        "their states")
	                 ->require_subcommand(1);
	std::string al_target, al_state;
	uint64_t al_group = 0;
	auto *alsh = alua->add_subcommand("show", "each ALUA target's groups per LUN");
	alsh->add_option("--target,-t", al_target, "default: every target");
	alsh->callback([&] {
		method = "alua_show";
		if (!al_target.empty())
			set("target", al_target);
	});
	auto *alst = alua->add_subcommand("set", "set a group's state on every LUN of a target");
	alst->add_option("target", al_target)->required();
	alst->add_option("group", al_group, "TARGET PORT GROUP id")->required();
	alst->add_option("state", al_state,
	                 "active-optimized | active-non-optimized | standby | unavailable | "
	                 "offline | transitioning")
	    ->required();
	alst->callback([&] {
		method = "alua_set";
		set("target", al_target);
		set("group", al_group);
		set("state", al_state);
	});

	// ---- gateway
	// -----------------------------------------------------------------------------
	auto *gw = app.add_subcommand("gateway", "this daemon as one of several gateways on one "
	                                         "Ceph cluster")
	               ->require_subcommand(1);
	gw->add_subcommand("show", "its target port group, its groups of LUs (owner state, "
	                           "ports' state, owner, lease left) and the other gateways")
	    ->callback([&] { method = "gateway_show"; });
	uint64_t gw_hold = 0;
	auto *gwd = gw->add_subcommand("drain", "move every group it owns to another gateway "
	                                        "(planned: nobody is fenced)");
	gwd->add_option("--hold-off", gw_hold,
	                "seconds before it acquires again (default: gateway.hold_off)")
	    ->check(CLI::Range(0, 3600));
	gwd->callback([&] {
		method = "gateway_drain";
		if (gw_hold)
			set("hold_off", gw_hold);
	});

	// ---- portal
	// ------------------------------------------------------------------------------
	auto *portal = app.add_subcommand("portal", "listening portals")->require_subcommand(1);
	portal->add_subcommand("list", "the portals")->callback([&] { method = "portal_list"; });
	std::string p_tr = "tcp", p_addr;
	for (const char *verb : {"create", "delete"}) {
		auto *s = portal->add_subcommand(verb, std::string(verb) + " a portal");
		s->add_option("--transport", p_tr, "tcp (default) | iser | srp");
		s->add_option("address", p_addr, "HOST:PORT")->required();
		s->callback([&, verb] {
			method = std::string("portal_") + verb;
			set("transport", p_tr);
			set("address", p_addr);
		});
	}

	// ---- session, connection
	// -----------------------------------------------------------------
	auto *session = app.add_subcommand("session", "logged-in sessions")->require_subcommand(1);
	session->add_subcommand("list", "who is logged in")->callback([&] {
		method = "session_list";
	});
	std::string s_id;
	uint64_t s_grace = 5000;
	auto *so =
	    session->add_subcommand("logout", "ask a session to log out (dropped after a grace)");
	so->add_option("id", s_id, "iscsi:TSIH or srp:PORTID (session list)")->required();
	so->add_option("--grace-ms", s_grace, "default 5000");
	so->callback([&] {
		method = "session_logout";
		set("id", s_id);
		set("grace_ms", s_grace);
	});
	auto drop = [&] {
		method = "session_drop";
		set("id", s_id);
	};
	auto *sd = session->add_subcommand("drop", "close a session's connections now");
	sd->add_option("id", s_id)->required();
	sd->callback(drop);
	auto *conn = app.add_subcommand("connection", "connections")->require_subcommand(1);
	auto *cd = conn->add_subcommand("drop", "close a session's connections now");
	cd->add_option("id", s_id, "iscsi:TSIH or srp:PORTID")->required();
	cd->callback(drop);

	// ---- log
	// ---------------------------------------------------------------------------------
	auto *logc = app.add_subcommand("log", "the daemon's log level")->require_subcommand(1);
	logc->add_subcommand("get", "the level")->callback([&] { method = "log_get_level"; });
	std::string level;
	auto *lset = logc->add_subcommand("set", "change it now");
	lset->add_option("level", level, "trace|debug|info|warning|error|critical|off")->required();
	lset->callback([&] {
		method = "log_set_level";
		set("level", level);
	});

	// ---- import (offline)
	// ---------------------------------------------------------------------
	std::string imp_from, imp_input, imp_output;
	bool imp_force = false;
	auto *imp = app.add_subcommand(
	    "import", "convert LIO's saveconfig.json or tgt's targets.conf into ulp-targetd's TOML "
	              "file (offline: asks no daemon); settings not carried over are listed on "
	              "stderr, exit status 4");
	imp->add_option("--from", imp_from,
	                "targetcli (LIO: targetcli's saveconfig.json) or tgt (tgt-admin's "
	                "targets.conf)")
	    ->required()
	    ->check(CLI::IsMember({"targetcli", "tgt"}));
	imp->add_option("input", imp_input, "the file to read")->required();
	imp->add_option("--output,-o", imp_output, "the TOML file to write (default: stdout)");
	imp->add_flag("--force", imp_force, "replace OUTPUT when it exists");

	try {
		app.parse(argc, argv);
	} catch (const CLI::ParseError &e) {
		return app.exit(e) == 0 ? 0 : 2;
	}
	if (imp->parsed())
		return ulpctl::import::run_import(imp_from == "tgt"
		                                      ? ulpctl::import::Format::Tgt
		                                      : ulpctl::import::Format::Targetcli,
		                                  imp_input, imp_output, imp_force);

	if (version)
		return print_versions(socket, timeout_s);
	if (method.empty()) {
		std::fprintf(stderr, "ulpctl: a NOUN VERB is required (ulpctl --help)\n");
		return 2;
	}

	ulp::admin::Client c;
	std::string why;
	if (c.connect(socket, &why) != 0) {
		std::fprintf(stderr, "ulpctl: %s\n", why.c_str());
		return 3;
	}
	json resp;
	if (!c.call(method, params, &resp, &why, std::chrono::seconds(timeout_s))) {
		std::fprintf(stderr, "ulpctl: %s: %s\n", method.c_str(), why.c_str());
		return 3;
	}
	if (resp.contains("error")) {
		const json &e = resp["error"];
		if (as_json)
			std::cout << e.dump(2) << "\n";
		std::fprintf(stderr, "ulpctl: %s: %s (%d)\n", method.c_str(),
		             str(e["message"]).c_str(),
		             e["code"].is_number_integer() ? e["code"].get<int>() : 0);
		return 1;
	}
	const json &r = resp["result"];
	if (method == "stats_get" && prometheus) {
		std::cout << ulp::admin::prometheus_text(r, {.sessions = prom_sessions});
		return 0;
	}
	if (as_json) {
		std::cout << r.dump(2) << "\n";
		return 0;
	}
	if (method == "config_show")
		print_show(r);
	else if (method == "stats_get")
		print_stats(r);
	else if (method == "session_list")
		print_sessions(r);
	else if (method == "lun_list") {
		std::vector<std::vector<std::string>> rows;
		for (const json &l : r)
			rows.push_back({str(l["target"]), std::to_string(l["lun"].get<uint64_t>()),
			                str(l["backstore"]), where(l).empty() ? "-" : where(l),
			                human_size(l["size"].get<uint64_t>()),
			                std::to_string(l["block_size"].get<uint64_t>()),
			                l.contains("serial") ? str(l["serial"]) : "-",
			                l.contains("naa") ? str(l["naa"]) : "-"});
		table(
		    {"TARGET", "LUN", "BACKSTORE", "PATH/IMAGE", "SIZE", "BLOCK", "SERIAL", "NAA"},
		    rows);
	} else if (method == "portal_list") {
		std::vector<std::vector<std::string>> rows;
		for (const json &p : r)
			rows.push_back(
			    {str(p["transport"]), str(p["address"]), str(p["listening"])});
		table({"TRANSPORT", "ADDRESS", "LISTENING"}, rows);
	} else if (method == "rpc_get_methods") {
		for (const json &m : r) {
			std::cout << str(m["name"]) << ": " << str(m["help"]) << "\n";
			for (const json &p : m["params"])
				std::cout << "    " << str(p["name"])
				          << (p["required"].get<bool>() ? "" : "?") << "  "
				          << str(p["type"])
				          << (str(p["help"]).empty() ? "" : "; " + str(p["help"]))
				          << "\n";
		}
	} else if (r.is_boolean() && r.get<bool>()) {
		std::cout << "ok\n";
	} else if (r.is_array() && !r.empty() && r[0].is_string()) {
		for (const json &x : r)
			std::cout << str(x) << "\n";
	} else {
		print_flat(r);
	}
	return 0;
}
