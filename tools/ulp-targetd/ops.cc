// SPDX-License-Identifier: MIT
// tools/ulp-targetd/ops.cc - what an administrator can change while ulp-targetd serves, and
// what it can look at (daemon.h states the rules each of these keeps).
#include "tools/ulp-targetd/daemon.h"
#include "tools/ulp-targetd/heap_usage.h"

#include "iscsi/target/session.h"
#include "scsi/bs_internal.h"
#include "ulp/version.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace targetd
{

using namespace ulp;
using admin::MethodError;

namespace
{

void log_change(const std::string &who, const std::string &what)
{
	ULP_LOG(Info, Tool, "admin ({}): {}", who.empty() ? "?" : who, what);
}

const char *digest_str(iscsi::Digest d)
{
	return d == iscsi::Digest::Crc32c ? "CRC32C" : "None";
}

// Where a LUN's blocks are, for log lines: a path, "POOL/[NAMESPACE/]IMAGE", or "".
std::string lun_storage(const LunCfg &l)
{
	if (l.bs.kind != "rbd")
		return l.bs.path;
	const scsi::RbdConfig &r = l.bs.rbd;
	return r.pool + "/" + (r.nspace.empty() ? "" : r.nspace + "/") + r.image;
}

// The LUN under lun_create's parameter names, plus what the running LU says; the keys of
// its kind only (rbd's, or path, direct and write_cache), as the file has them.
json lun_json(const LunCfg &l, const scsi::LogicalUnit *lu)
{
	json j = {{"lun", l.lun},
	          {"backstore", l.bs.kind},
	          {"block_size", l.bs.block_size},
	          {"read_only", l.read_only},
	          {"removable", l.removable},
	          {"queue_depth", l.bs.queue_depth}};
	if (l.bs.kind == "rbd") {
		const scsi::RbdConfig &r = l.bs.rbd;
		j["create"] = r.create;
		j["timeout"] = r.timeout_s;
		j["atomic_unit"] = r.atomic_unit;
		for (const auto &[k, m] : kRbdStringKeys)
			if (!(r.*m).empty())
				j[k] = r.*m;
	} else {
		j["direct"] = l.bs.direct;
		j["write_cache"] = l.bs.write_cache;
	}
	if (!l.bs.path.empty())
		j["path"] = l.bs.path;
	if (l.physical_block_size)
		j["physical_block_size"] = l.physical_block_size;
	if (lu) {
		j["size"] = lu->bs().size();
		j["blocks"] = lu->nr_blocks();
		j["name"] = lu->name();
		// Its identity as initiators see it (INQUIRY, VPD 80h and 83h); *_derived: the
		// serial number or NAA comes from the name, not the configuration.
		const scsi::LuConfig &c = lu->cfg();
		j["vendor"] = c.vendor;
		j["product"] = c.product;
		j["revision"] = c.revision;
		j["serial"] = lu->serial();
		j["naa"] = naa_str(lu->naa());
		j["serial_derived"] = l.id.serial.empty();
		j["naa_derived"] = l.id.naa == 0;
	} else {
		j["size"] = l.bs.size;
	}
	return j;
}

// "iscsi:12" / "srp:0x...": which fabric, and the session's key in it.
void split_id(const std::string &id, std::string *fabric, std::string *key)
{
	const auto c = id.find(':');
	if (c == std::string::npos)
		fail(-EINVAL,
		     "session id " + id + ": expected iscsi:TSIH or srp:PORTID (session list)");
	*fabric = id.substr(0, c);
	*key = id.substr(c + 1);
	if (*fabric != "iscsi" && *fabric != "srp")
		fail(-EINVAL, "session id " + id + ": expected iscsi:TSIH or srp:PORTID");
}

// A target's I/O over every portal group's port.
scsi::IoCounts target_io(const TargetRt &t)
{
	scsi::IoCounts c;
	for (scsi::Tpg *tpg : t.iscsi_tpgs())
		c += tpg->io_counts();
	return c;
}

// scsi::IoCounts as JSON (stats.h's fields; the histogram's bucket i counts commands that
// took at most 2^i us, the last one those that took longer).
// The ACL entries' own LUN maps and CHAP users (never the secrets), by initiator:
// {"iqn...": {"luns": [{"lun": 0, "target_lun": 5, "read_only": true}], "chap_user": ...}}.
json acl_maps_json(const std::map<std::string, AclCfg> &maps)
{
	json out = json::object();
	for (auto &[name, a] : maps) {
		json luns = json::array();
		for (auto &[mapped, m] : a.luns)
			luns.push_back({{"lun", mapped},
			                {"target_lun", m.target_lun},
			                {"read_only", m.read_only}});
		json e = {{"luns", luns}};
		if (a.chap)
			e["chap_user"] = a.chap->user;
		if (a.mutual_chap)
			e["mutual_chap_user"] = a.mutual_chap->user;
		out[name] = e;
	}
	return out;
}

json io_json(const scsi::IoCounts &c)
{
	json cmds = json::object(), errs = json::object();
	for (size_t i = 0; i < scsi::kIoKinds; i++)
		cmds[scsi::io_kind_str(scsi::IoKind(i))] = c.cmds[i];
	for (size_t i = 0; i < scsi::kIoErrors; i++)
		errs[scsi::io_error_str(scsi::IoError(i))] = c.errors[i];
	return {
	    {"commands", cmds},
	    {"tmfs", c.tmfs},
	    {"bytes_read", c.bytes_read},
	    {"bytes_written", c.bytes_written},
	    {"errors", errs},
	    {"latency", {{"count", c.lat_count()}, {"sum_ns", c.lat_sum_ns}, {"buckets", c.lat}}}};
}

uint16_t tsih_of(const std::string &key)
{
	char *end = nullptr;
	const unsigned long v = std::strtoul(key.c_str(), &end, 10);
	if (key.empty() || *end || v == 0 || v > 65535)
		fail(-EINVAL, "iscsi session id: a TSIH is 1..65535, not " + key);
	return uint16_t(v);
}

} // namespace

// ---- Looking ---------------------------------------------------------------------------------

json Daemon::show()
{
	std::lock_guard g(lock_);
	json portals = json::array();
	for (const PortalRt &p : portals_) {
		Portal b = p.cfg;
		b.port = p.port;
		portals.push_back(
		    {{"transport", p.transport},
		     {"address", portal_str(p.cfg)},
		     {"listening", p.transport == "srp" ? p.rdma->addr() : portal_str(b)}});
	}
	std::map<std::string, size_t> nsess;
	for (const auto &s : iscsi_->session_info())
		if (s.params.type == iscsi::SessionType::Normal)
			nsess[s.params.target_name]++;
	json targets = json::array();
	for (auto &t : targets_) {
		json luns = json::array();
		for (const LunCfg &l : t->cfg.luns) {
			auto it = t->lus.find(l.lun);
			luns.push_back(
			    lun_json(l, it == t->lus.end() ? nullptr : it->second.get()));
		}
		json tj = {{"name", t->cfg.name},
		           {"alias", t->cfg.alias},
		           {"acls", t->cfg.acls},
		           {"open", t->cfg.acls.empty()},
		           {"allow_target_reset", t->cfg.allow_target_reset},
		           {"chap", t->cfg.mutual_chap ? "mutual"
		                    : t->cfg.chap      ? "chap"
		                                       : "none"},
		           {"sessions", nsess[t->cfg.name]},
		           {"luns", luns}};
		tj["acl_maps"] = acl_maps_json(t->cfg.acl_cfg);
		if (t->cfg.allow_no_chap)
			tj["allow_no_chap"] = true;
		if (!t->cfg.allowed_addresses.empty())
			tj["allowed_addresses"] = t->cfg.allowed_addresses;
		if (!t->cfg.redirect.empty()) {
			tj["redirect"] = t->cfg.redirect;
			tj["redirect_permanent"] = t->cfg.redirect_permanent;
		}
		if (t->cfg.chap)
			tj["chap_user"] = t->cfg.chap->user; // never the secret
		if (t->cfg.mutual_chap)
			tj["mutual_chap_user"] = t->cfg.mutual_chap->user;
		if (exported_by_srp(*t))
			tj["srp_exported"] = true;
		targets.push_back(tj);
	}
	json out = {{"config_file", cfg_.source}, {"log_level", log::level_name(log::level())},
	            {"workers", cfg_.workers},    {"worker_cpus", cfg_.worker_cpus},
	            {"portals", portals},         {"targets", targets}};
	if (srp_) {
		json lines = json::array();
		for (const PortalRt &p : portals_)
			if (p.transport == "srp" && srp_->has_ids())
				lines.push_back(srp_->add_target_line(p.rdma->addr()));
		out["srp"] = {{"exports", srp_tpg_->name().substr(4)},
		              {"acls", cfg_.srp.acls},
		              {"acl_maps", acl_maps_json(cfg_.srp.acl_cfg)},
		              {"srq", cfg_.srp.srq},
		              {"add_target", lines}};
	}
	return out;
}

json Daemon::session_list()
{
	std::lock_guard g(lock_);
	json out = json::array();
	for (const iscsi::target::SessionInfo &s : iscsi_->session_info()) {
		const bool disc = s.params.type == iscsi::SessionType::Discovery;
		json j = {{"id", "iscsi:" + std::to_string(s.tsih)},
		          {"fabric", "iscsi"},
		          {"transport", s.transport == iscsi::Transport::Iser ? "iser" : "tcp"},
		          {"type", disc ? "discovery" : "normal"},
		          {"tpgt", s.params.tpgt}, // the portal group it logged in through
		          {"initiator", s.params.initiator_name},
		          {"initiator_alias", s.params.initiator_alias},
		          {"initiator_port", s.initiator_port},
		          {"target", s.params.target_name},
		          {"portal", s.local},
		          {"peer", s.peer},
		          {"connections", 1},
		          {"logged_in", s.full_feature},
		          {"logout_requested", s.logout_requested},
		          {"cmds_in_flight", s.cmds_in_flight}};
		if (s.worker >= 0)
			j["worker"] = s.worker;
		if (s.full_feature) {
			j["params"] = {{"header_digest", digest_str(s.conn.header_digest)},
			               {"data_digest", digest_str(s.conn.data_digest)},
			               {"max_recv_data_segment_length", s.conn.target_recv_dsl},
			               {"max_send_data_segment_length", s.conn.initiator_recv_dsl},
			               {"max_burst_length", s.params.max_burst_length},
			               {"first_burst_length", s.params.first_burst_length},
			               {"immediate_data", s.params.immediate_data},
			               {"initial_r2t", s.params.initial_r2t},
			               {"max_outstanding_r2t", s.params.max_outstanding_r2t},
			               {"error_recovery_level", s.params.error_recovery_level},
			               {"auth", s.conn.auth == iscsi::AuthMethod::Chap
			                            ? (s.conn.mutual_auth ? "mutual CHAP" : "CHAP")
			                            : "None"}};
		}
		out.push_back(j);
	}
	if (srp_)
		for (const srpt::NexusInfo &n : srp_->nexus_info())
			out.push_back(
			    {{"id", "srp:" + n.initiator_port},
			     {"fabric", "srp"},
			     {"transport", "srp"},
			     {"type", "normal"},
			     {"initiator", n.initiator},
			     {"initiator_port", n.initiator_port},
			     {"target_port", n.target_port},
			     {"target", srp_tpg_->name().substr(4)},
			     {"peer", n.channels.empty() ? std::string() : n.channels.front()},
			     {"channels", n.channels},
			     {"connections", n.channels.size()},
			     {"logged_in", true},
			     {"cmds_in_flight", n.cmds_in_flight}});
	return out;
}

json Daemon::stats()
{
	std::lock_guard g(lock_);
	const iscsi::target::TargetStats is = iscsi_->stats();
	size_t cmds = 0, sessions = 0;
	for (const auto &s : iscsi_->session_info()) {
		cmds += s.cmds_in_flight;
		sessions++;
	}
	json out = {{"iscsi",
	             {{"logins", is.logins},
	              {"login_failures", is.login_failures},
	              {"sessions_open", is.sessions_open},
	              {"connections_open", is.conns_open},
	              {"reinstatements", is.reinstatements},
	              {"teardown_timeouts", is.teardown_timeouts}}}};
	if (srp_) {
		const srpt::TargetStats s = srp_->stats();
		out["srp"] = {{"logins", s.logins},
		              {"login_rejects", s.login_rejects},
		              {"takeovers", s.takeovers},
		              {"channels_open", s.channels_open},
		              {"nexuses_open", s.nexuses_open},
		              {"cmds", s.cmds},
		              {"tsk_mgmts", s.tsk_mgmts},
		              {"i_logouts", s.i_logouts},
		              {"immediate", s.immediate},
		              {"ext_tables", s.ext_tables},
		              {"rdma_reads", s.rdma_reads},
		              {"rdma_writes", s.rdma_writes},
		              {"cred_reqs", s.cred_reqs},
		              {"wait_list", s.wait_list},
		              {"sq_waits", s.sq_waits},
		              {"credit_overruns", s.credit_overruns},
		              {"bad_ius", s.bad_ius},
		              {"task_set_full", s.task_set_full},
		              {"data_timeouts", s.data_timeouts},
		              {"no_read_credit", s.no_read_credit},
		              {"teardown_timeouts", s.teardown_timeouts}};
		for (const auto &n : srp_->nexus_info()) {
			cmds += n.cmds_in_flight;
			sessions++;
		}
	}
	json portals = json::array();
	for (const PortalRt &p : portals_)
		if (p.rdma) {
			const rdma::PortalRes r = p.rdma->resources();
			portals.push_back({{"transport", p.transport},
			                   {"address", p.rdma->addr()},
			                   {"listening", p.rdma->listening()},
			                   {"accepted", p.rdma->accepted()},
			                   {"rejected", p.rdma->rejected()},
			                   {"connections", r.conns},
			                   {"qps", r.qps},
			                   {"cq_entries", r.cq_entries},
			                   {"mrs_used", r.mrs_used},
			                   {"mrs", r.mrs},
			                   {"heap_bytes_used", r.heap_used},
			                   {"heap_bytes", r.heap_bytes}});
		}
	out["rdma_portals"] = portals;
	out["build"] = {{"version", ULP_VERSION},
	                {"git_commit", ULP_GIT_COMMIT},
	                {"start_time_seconds", start_time_seconds()}};
	out["io"] = io_stats();
	out["alua"] = alua_show(""); // each ALUA target's groups per LUN (alua_ops.cc)
	if (gateway_)
		out["gateway"] = gateway_->show();
	json bounds = json::array();
	for (size_t i = 0; i < scsi::kLatBuckets; i++)
		bounds.push_back(uint64_t(1) << i);
	out["latency_bounds_us"] = bounds;
	size_t luns = 0;
	for (auto &t : targets_)
		luns += t->lus.size();
	out["targets"] = targets_.size();
	out["luns"] = luns;
	out["sessions"] = sessions;
	out["cmds_in_flight"] = cmds;
	const HeapUsage h = heap_usage();
	out["memory"] = {
	    {"allocator", h.allocator}, {"heap_in_use", h.in_use}, {"heap_held", h.held}};
	if (admin_) {
		const admin::ServerStats a = admin_->stats();
		out["admin"] = {{"accepted", a.accepted}, {"denied", a.denied},
		                {"busy", a.busy},         {"requests", a.requests},
		                {"timeouts", a.timeouts}, {"oversized", a.oversized}};
	}
	return out;
}

// Under lock_: the I/O statistics per target (its Tpg: every session it has had), per LUN
// (every fabric's commands to it), per session, and the sessions' connections.
json Daemon::io_stats()
{
	json out = json::array();
	const std::vector<iscsi::target::SessionInfo> infos = iscsi_->session_info();
	for (auto &t : targets_) {
		json luns = json::array();
		for (auto &[n, lu] : t->lus) {
			json l = {{"lun", n}, {"io", io_json(lu->stats_.read())}};
			// The EXTENDED COPY commands it managed (scsi::XcopyCounts): how they
			// ended, bytes written to their destinations and, of those, the ones the
			// kernel copied (copy_file_range between file LUNs).
			const scsi::XcopyCounts x = lu->xcopy_stats_.read();
			l["xcopy"] = {{"good", x.good},
			              {"failed", x.failed},
			              {"aborted", x.aborted},
			              {"bytes", x.bytes},
			              {"kernel_bytes", x.kernel_bytes}};
			// An rbd LUN's side of librbd: requests in it now, how many it gave back
			// and their mean time there, failures, and whether the cluster fenced it.
			if (scsi::RbdBsStats rs; scsi::rbd_bs_stats(lu->bs(), &rs))
				l["rbd"] = {
				    {"inflight", rs.inflight},
				    {"completed", rs.completed},
				    {"errors", rs.errors},
				    {"avg_us", rs.completed ? rs.busy_ns / rs.completed / 1000 : 0},
				    {"fenced", rs.fenced},
				    {"client_addr", rs.client_addr}};
			luns.push_back(std::move(l));
		}
		json sessions = json::array();
		for (const auto &s : infos) {
			if (s.params.type != iscsi::SessionType::Normal ||
			    s.params.target_name != t->cfg.name)
				continue;
			json conns = json::array();
			if (s.has_conn && s.full_feature)
				conns.push_back(
				    {{"peer", s.peer},
				     {"exp_cmdsn", s.exp_cmdsn},
				     {"max_cmdsn", s.max_cmdsn},
				     {"cmdsn_window", uint32_t(s.max_cmdsn - s.exp_cmdsn + 1)},
				     {"commands", s.conn_cmds},
				     {"pdus_in", s.pdus_in},
				     {"pdus_out", s.pdus_out}});
			sessions.push_back(
			    {{"id", "iscsi:" + std::to_string(s.tsih)},
			     {"initiator", s.params.initiator_name},
			     {"transport", s.transport == iscsi::Transport::Iser ? "iser" : "tcp"},
			     {"io", io_json(s.io)},
			     {"connections", conns}});
		}
		out.push_back({{"target", t->cfg.name},
		               {"fabric", "iscsi"},
		               {"io", io_json(target_io(*t))},
		               {"luns", luns},
		               {"sessions", sessions}});
	}
	if (srp_) {
		json sessions = json::array();
		for (const srpt::NexusInfo &n : srp_->nexus_info()) {
			json chans = json::array();
			for (const auto &c : n.chans)
				chans.push_back({{"peer", c.peer},
				                 {"credits", c.credits},
				                 {"req_lim", c.req_lim},
				                 {"ioctxs_busy", c.ioctxs_busy}});
			sessions.push_back({{"id", "srp:" + n.initiator_port},
			                    {"initiator", n.initiator},
			                    {"transport", "srp"},
			                    {"io", io_json(n.io)},
			                    {"connections", chans}});
		}
		// The LUNs are the exported target's (listed there: a LU counts every fabric).
		out.push_back({{"target", srp_tpg_->name().substr(4)},
		               {"fabric", "srp"},
		               {"io", io_json(srp_tpg_->io_counts())},
		               {"luns", json::array()},
		               {"sessions", sessions}});
	}
	return out;
}

// ---- Targets -----------------------------------------------------------------------------------

void Daemon::target_create(const TargetCfg &t, const std::string &who)
{
	std::lock_guard g(lock_);
	std::string why;
	if (!check_target(t, &why))
		fail(-EINVAL, why);
	if (find_target(t.name))
		fail(-EEXIST, "target " + t.name + " exists");
	if (gateway_) {
		Config one;
		one.targets = {t};
		if (!check_gateway(one, &why))
			fail(-EINVAL, why);
	}
	std::unique_ptr<TargetRt> rt = make_target(t); // backstores opened: may throw
	if (int rc = iscsi_->add_node(node_of(*rt)); rc != 0) {
		for (auto &[n, lu] : rt->lus)
			forget_lu(lu.get());
		fail(rc, "target " + t.name + ": " + std::strerror(-rc));
	}
	targets_.push_back(std::move(rt));
	cfg_.targets.push_back(t);
	if (gateway_)
		gateway_->set_ports(gateway_ports());
	log_change(who,
	           "target " + t.name + " created (" + std::to_string(t.luns.size()) + " LUNs, " +
	               (t.acls.empty() ? "open" : std::to_string(t.acls.size()) + " ACLs") + ")");
}

json Daemon::target_delete(const std::string &name, std::chrono::milliseconds grace,
                           std::chrono::milliseconds timeout, const std::string &who)
{
	std::lock_guard g(lock_);
	TargetRt &t = need_target(name);
	if (exported_by_srp(t))
		fail(-EBUSY, "target " + name +
		                 " is the one the SRP target port exports (srp.target); it stays");
	size_t sessions = 0;
	for (scsi::Tpg *tpg : t.iscsi_tpgs())
		sessions += tpg->sessions().size();
	log_change(who, "target " + name + " deleted (" + std::to_string(sessions) + " sessions)");
	const int rc = iscsi_->remove_node(name, grace, timeout);
	auto it = std::find_if(targets_.begin(), targets_.end(),
	                       [&](const auto &p) { return p.get() == &t; });
	std::unique_ptr<TargetRt> rt = std::move(*it);
	targets_.erase(it);
	std::erase_if(cfg_.targets, [&](const TargetCfg &c) { return c.name == name; });
	if (gateway_) {
		// Sessions closed: nothing reaches its LUs; else they stay allocated, and so do
		// their reservation stores.
		for (auto &[n, lu] : rt->lus)
			gateway_->remove_lu(lu.get(), rc != 0);
		gateway_->set_ports(gateway_ports());
	}
	json out = {{"sessions", sessions}, {"sessions_closed", rc == 0}};
	if (rc == 0) {
		// No nexus is left on its Tpg: nothing can reach its LUs.
		rt->tpg.reset();
		rt->group_tpgs.clear();
		rt->lus.clear();
	} else {
		for (auto &[n, lu] : rt->lus)
			zombie_lus_.push_back(std::move(lu));
		zombie_tpgs_.push_back(std::move(rt->tpg));
		for (auto &g : rt->group_tpgs)
			zombie_tpgs_.push_back(std::move(g));
	}
	return out;
}

// ---- LUNs --------------------------------------------------------------------------------------

void Daemon::lun_create(const std::string &target, const LunCfg &l, const std::string &who)
{
	std::lock_guard g(lock_);
	TargetRt &t = need_target(target);
	std::string why;
	if (!check_lun(target, l, &why))
		fail(-EINVAL, why);
	if (t.lus.count(l.lun))
		fail(-EEXIST, "target " + target + " has a LUN " + std::to_string(l.lun));
	// One identity per LU of the daemon, as build_config keeps it for the file.
	if (std::string w = lun_identity_clash(cfg_.targets, target, l); !w.empty())
		fail(-EEXIST, w);
	// Its ALUA states start as the target's LUs have them now (alua_states_now), not as
	// the file said at start.
	TargetCfg tc = t.cfg;
	alua_states_now(t, &tc.alua);
	std::unique_ptr<scsi::LogicalUnit> lu = make_lu(tc, l); // opens it: may throw
	// Published on every port group that exports the target; each raises REPORTED LUNS
	// DATA HAS CHANGED for the nexuses it has (scsi/tpg.h).
	for (scsi::Tpg *tpg : tpgs_of(t))
		if (int rc = tpg->add_lun(l.lun, *lu); rc != 0) {
			forget_lu(lu.get());
			fail(rc, "add LUN " + std::to_string(l.lun) + ": " + std::strerror(-rc));
		}
	log_change(who, "target " + target + " LUN " + std::to_string(l.lun) + " created (" +
	                    l.bs.kind + (lun_storage(l).empty() ? "" : " " + lun_storage(l)) +
	                    ", " + std::to_string(lu->bs().size()) + " bytes)");
	t.lus[l.lun] = std::move(lu);
	t.cfg.luns.push_back(l);
	std::sort(t.cfg.luns.begin(), t.cfg.luns.end(),
	          [](const LunCfg &a, const LunCfg &b) { return a.lun < b.lun; });
	for (TargetCfg &c : cfg_.targets)
		if (c.name == target)
			c.luns = t.cfg.luns;
}

json Daemon::lun_delete(const std::string &target, uint64_t lun, std::chrono::milliseconds grace,
                        std::chrono::milliseconds timeout, const std::string &who)
{
	std::lock_guard g(lock_);
	TargetRt &t = need_target(target);
	auto it = t.lus.find(lun);
	if (it == t.lus.end())
		fail(-ENOENT, "target " + target + " has no LUN " + std::to_string(lun));
	// An ACL entry mapping it would, once it is gone, either name a LUN that is not there
	// (a saved file would not load) or, with its last mapping dropped, see every LUN:
	// the administrator unmaps it first.
	auto mapped_by = [&](const std::map<std::string, AclCfg> &maps) -> std::string {
		for (auto &[name, a] : maps)
			for (auto &[mapped, m] : a.luns)
				if (m.target_lun == lun)
					return name + " (as its LUN " + std::to_string(mapped) +
					       ")";
		return "";
	};
	if (!reloading_) {
		std::string by = mapped_by(t.cfg.acl_cfg);
		if (by.empty() && exported_by_srp(t))
			by = mapped_by(cfg_.srp.acl_cfg);
		if (!by.empty())
			fail(-EBUSY, "target " + target + " LUN " + std::to_string(lun) +
			                 " is mapped by ACL " + by + ": unmap it first");
	}
	const std::vector<scsi::Tpg *> tpgs = tpgs_of(t);
	for (scsi::Tpg *tpg : tpgs)
		tpg->remove_lun(lun, nullptr);
	std::unique_ptr<scsi::LogicalUnit> lu = std::move(it->second);
	t.lus.erase(it);
	std::erase_if(t.cfg.luns, [&](const LunCfg &l) { return l.lun == lun; });
	for (TargetCfg &c : cfg_.targets)
		if (c.name == target)
			c.luns = t.cfg.luns;
	const size_t users = [&] {
		size_t n = 0;
		for (scsi::Tpg *tpg : tpgs)
			n += tpg->lu_users(lu.get());
		return n;
	}();
	log_change(who, "target " + target + " LUN " + std::to_string(lun) + " deleted (" +
	                    std::to_string(users) + " commands in flight)");
	json out = {{"cmds_in_flight", users}};
	drop_lu(std::move(lu), tpgs, grace, timeout, &out);
	return out;
}

json Daemon::lun_resize(const std::string &target, uint64_t lun, uint64_t bytes,
                        const std::string &who)
{
	std::lock_guard g(lock_);
	TargetRt &t = need_target(target);
	auto it = t.lus.find(lun);
	if (it == t.lus.end())
		fail(-ENOENT, "target " + target + " has no LUN " + std::to_string(lun));
	scsi::LogicalUnit &lu = *it->second;
	const uint64_t was = lu.nr_blocks();
	std::string why;
	if (int rc = lu.set_capacity(bytes, &why); rc < 0)
		fail(rc, "target " + target + " LUN " + std::to_string(lun) + ": " + why);
	for (LunCfg &l : t.cfg.luns)
		if (l.lun == lun)
			l.bs.size = bytes;
	for (TargetCfg &c : cfg_.targets)
		if (c.name == target)
			c.luns = t.cfg.luns;
	log_change(who, "target " + target + " LUN " + std::to_string(lun) +
	                    " resized: " + std::to_string(was) + " -> " +
	                    std::to_string(lu.nr_blocks()) + " blocks");
	return {{"old_blocks", was}, {"blocks", lu.nr_blocks()}, {"block_size", lu.block_size()}};
}

json Daemon::lun_rescan(const std::string &target, int64_t lun)
{
	std::lock_guard g(lock_);
	TargetRt &t = need_target(target);
	json out = json::array();
	for (auto &[n, lu] : t.lus) {
		if (lun >= 0 && uint64_t(lun) != n)
			continue;
		uint64_t was = 0, now = 0;
		std::string why;
		json j = {{"lun", n}};
		if (lu->rescan_capacity(&was, &now, &why) < 0)
			j["error"] = why;
		j["old_blocks"] = was;
		j["blocks"] = now;
		if (was != now)
			ULP_LOG(Info, Tool, "LUN {}: capacity {} -> {} blocks (rescan)", lu->name(),
			        was, now);
		out.push_back(j);
	}
	if (lun >= 0 && out.empty())
		fail(-ENOENT, "target " + target + " has no LUN " + std::to_string(lun));
	return out;
}

// ---- ACLs and CHAP -----------------------------------------------------------------------------

void Daemon::acl_add(const std::string &target, const std::string &initiator,
                     const std::string &who)
{
	std::lock_guard g(lock_);
	TargetRt &t = need_target(target);
	if (!iscsi::valid_iscsi_name(initiator))
		fail(-EINVAL, "ACL entry " + initiator + " is not a valid iSCSI name");
	scsi::NodeAcl acl;
	acl.initiator = initiator;
	if (int rc = t.tpg->add_acl(acl); rc != 0)
		fail(rc, rc == -EEXIST ? "target " + target + " already admits " + initiator
		                       : std::string(std::strerror(-rc)));
	for (auto &g : t.group_tpgs) // the other portal groups' ports admit the same
		g->add_acl(acl);
	t.cfg.acls.push_back(initiator);
	for (TargetCfg &c : cfg_.targets)
		if (c.name == target)
			c.acls = t.cfg.acls;
	log_change(who, "target " + target + " ACL " + initiator + " added (new logins only)");
}

void Daemon::acl_delete(const std::string &target, const std::string &initiator,
                        const std::string &who)
{
	std::lock_guard g(lock_);
	TargetRt &t = need_target(target);
	if (int rc = t.tpg->remove_acl(initiator); rc != 0)
		fail(rc, "target " + target + " has no ACL " + initiator);
	for (auto &g : t.group_tpgs)
		g->remove_acl(initiator);
	std::erase(t.cfg.acls, initiator);
	// Its LUN map and CHAP secret go with it (a secret left would still admit it).
	if (t.cfg.acl_cfg.erase(initiator))
		iscsi_->replace_node(node_of(t));
	for (TargetCfg &c : cfg_.targets)
		if (c.name == target) {
			c.acls = t.cfg.acls;
			c.acl_cfg = t.cfg.acl_cfg;
		}
	log_change(who, "target " + target + " ACL " + initiator + " deleted" +
	                    (t.cfg.acls.empty() ? " (no ACL left: open to every initiator)" : "") +
	                    "; its sessions stay");
}

void Daemon::acl_map(bool srp, const std::string &target, const std::string &initiator,
                     uint64_t lun, const std::optional<MappedLun> &m, const std::string &who)
{
	std::lock_guard g(lock_);
	std::vector<std::string> *acls;
	std::map<std::string, AclCfg> *maps;
	scsi::Tpg *tpg;
	const std::vector<LunCfg> *luns = nullptr;
	std::string what, name = initiator;
	TargetRt *t = nullptr;
	if (srp) {
		if (!normalize_srp_acl(initiator, &name))
			fail(-EINVAL,
			     initiator + ": an SRP ACL is \"0x\" + 32 hex digits or an IP");
		acls = &cfg_.srp.acls;
		maps = &cfg_.srp.acl_cfg;
		tpg = srp_tpg_.get();
		const std::string &of =
		    cfg_.srp.target.empty()
		        ? (targets_.empty() ? std::string() : targets_.front()->cfg.name)
		        : cfg_.srp.target;
		if (TargetRt *x = find_target(of))
			luns = &x->cfg.luns;
		what = "the SRP target";
	} else {
		t = &need_target(target);
		acls = &t->cfg.acls;
		maps = &t->cfg.acl_cfg;
		tpg = t->tpg.get();
		luns = &t->cfg.luns;
		what = "target " + target;
	}
	if (std::find(acls->begin(), acls->end(), name) == acls->end())
		fail(-ENOENT, what + " has no ACL " + name + " (add the ACL first)");
	if (lun > 16383)
		fail(-EINVAL, "LUN " + std::to_string(lun) + ": at most 16383");
	AclCfg a;
	if (auto it = maps->find(name); it != maps->end())
		a = it->second;
	if (m) {
		if (!luns || std::none_of(luns->begin(), luns->end(),
		                          [&](const LunCfg &l) { return l.lun == m->target_lun; }))
			fail(-ENOENT, what + " has no LUN " + std::to_string(m->target_lun));
		if (a.luns.count(lun))
			fail(-EEXIST, "ACL " + name + " maps LUN " + std::to_string(lun) +
			                  " already (unmap it first)");
		a.luns[lun] = *m;
	} else if (!a.luns.count(lun)) {
		fail(-ENOENT, "ACL " + name + " maps no LUN " + std::to_string(lun));
	} else if (a.luns.size() == 1) {
		// An empty map is no map (scsi::NodeAcl: the whole target): taking the last LUN
		// away would widen what the initiator sees, not narrow it.
		fail(-EBUSY, "ACL " + name + " maps only LUN " + std::to_string(lun) +
		                 ": without it the initiator would see every LUN of " + what +
		                 "; map another LUN first, or delete the ACL");
	} else {
		a.luns.erase(lun);
	}
	if (tpg)
		if (int rc = tpg->replace_acl(node_acl(name, &a)); rc != 0)
			fail(rc, std::strerror(-rc));
	if (t) // the target's other portal groups' ports: the same map
		for (auto &g : t->group_tpgs)
			g->replace_acl(node_acl(name, &a));
	if (a.empty())
		maps->erase(name);
	else
		(*maps)[name] = a;
	if (t)
		for (TargetCfg &c : cfg_.targets)
			if (c.name == target)
				c.acl_cfg = t->cfg.acl_cfg;
	log_change(who, what + " ACL " + name + ": LUN " + std::to_string(lun) +
	                    (m ? " mapped to LUN " + std::to_string(m->target_lun) +
	                             (m->read_only ? " read-only" : "")
	                       : " unmapped") +
	                    "; its sessions see the change now");
}

void Daemon::chap_set(const std::string &target, const std::optional<iscsi::ChapSecret> &chap,
                      const std::optional<iscsi::ChapSecret> &mutual, const std::string &who)
{
	std::lock_guard g(lock_);
	TargetRt &t = need_target(target);
	TargetCfg c = t.cfg;
	c.chap = chap;
	c.mutual_chap = mutual;
	std::string why;
	if (!check_target(c, &why))
		fail(-EINVAL, why);
	t.cfg = c;
	if (int rc = iscsi_->replace_node(node_of(t)); rc != 0)
		fail(rc, std::strerror(-rc));
	for (TargetCfg &x : cfg_.targets)
		if (x.name == target) {
			x.chap = chap;
			x.mutual_chap = mutual;
		}
	log_change(who, "target " + target + " CHAP " +
	                    (mutual ? "and mutual CHAP set"
	                     : chap ? "set"
	                            : "cleared") +
	                    " (new logins only)");
}

void Daemon::target_redirect(const std::string &target, const std::string &address, bool permanent,
                             const std::string &who)
{
	std::lock_guard g(lock_);
	TargetRt &t = need_target(target);
	TargetCfg c = t.cfg;
	c.redirect = address;
	c.redirect_permanent = !address.empty() && permanent;
	std::string why;
	if (!check_target(c, &why))
		fail(-EINVAL, why);
	t.cfg = c;
	if (int rc = iscsi_->replace_node(node_of(t)); rc != 0)
		fail(rc, std::strerror(-rc));
	for (TargetCfg &x : cfg_.targets)
		if (x.name == target) {
			x.redirect = c.redirect;
			x.redirect_permanent = c.redirect_permanent;
		}
	log_change(who, "target " + target + ": " +
	                    (address.empty() ? std::string("logins no longer redirected")
	                                     : "logins redirected to " + address +
	                                           (permanent ? " (permanently)" : "")) +
	                    " (new logins only)");
}

void Daemon::srp_acl_add(const std::string &initiator, const std::string &who)
{
	std::lock_guard g(lock_);
	std::string n;
	if (!normalize_srp_acl(initiator, &n))
		fail(-EINVAL, initiator +
		                  ": an SRP ACL is \"0x\" + 32 hex digits (an initiator port id) "
		                  "or an IP address");
	if (std::find(cfg_.srp.acls.begin(), cfg_.srp.acls.end(), n) != cfg_.srp.acls.end())
		fail(-EEXIST, "the SRP target already admits " + n);
	if (srp_tpg_) {
		scsi::NodeAcl acl;
		acl.initiator = n;
		srp_tpg_->add_acl(acl);
	}
	cfg_.srp.acls.push_back(n);
	log_change(who, "SRP ACL " + n + " added (new logins only)");
}

void Daemon::srp_acl_delete(const std::string &initiator, const std::string &who)
{
	std::lock_guard g(lock_);
	std::string n;
	if (!normalize_srp_acl(initiator, &n) ||
	    std::find(cfg_.srp.acls.begin(), cfg_.srp.acls.end(), n) == cfg_.srp.acls.end())
		fail(-ENOENT, "the SRP target has no ACL " + initiator);
	if (srp_tpg_)
		srp_tpg_->remove_acl(n);
	std::erase(cfg_.srp.acls, n);
	cfg_.srp.acl_cfg.erase(n);
	log_change(who, "SRP ACL " + n + " deleted; its sessions stay");
}

// ---- Portals -----------------------------------------------------------------------------------

json Daemon::portal_create(const std::string &transport, const std::string &address,
                           const std::string &who)
{
	std::lock_guard g(lock_);
	Portal p;
	std::string why;
	if (transport != "tcp" && transport != "iser" && transport != "srp")
		fail(-EINVAL, "transport must be tcp, iser or srp, not " + transport);
	if (!parse_portal(address, &p, &why, transport == "srp" ? -1 : 3260))
		fail(-EINVAL, why);
	for (const PortalRt &o : portals_)
		if (o.transport == transport && portal_str(o.cfg) == portal_str(p) && p.port != 0)
			fail(-EEXIST, transport + " portal " + portal_str(p) + " exists");
	PortalRt pr = open_portal(transport, p); // binds and listens: may throw
	Portal b = pr.cfg;
	b.port = pr.port;
	const std::string listening = transport == "srp" ? pr.rdma->addr() : portal_str(b);
	json out = {{"listening", listening}};
	if (transport == "srp" && srp_->has_ids())
		out["add_target"] = srp_->add_target_line(listening);
	(transport == "tcp"    ? cfg_.portals
	 : transport == "iser" ? cfg_.iser_portals
	                       : cfg_.srp_portals)
	    .push_back(pr.cfg);
	portals_.push_back(std::move(pr));
	refresh_portal_addresses();
	log_change(who, transport + " portal " + listening + " added");
	return out;
}

void Daemon::portal_delete(const std::string &transport, const std::string &address,
                           const std::string &who)
{
	std::lock_guard g(lock_);
	Portal p;
	std::string why;
	if (!parse_portal(address, &p, &why, transport == "srp" ? -1 : 3260))
		fail(-EINVAL, why);
	auto same = [&](const PortalRt &o) {
		if (o.transport != transport)
			return false;
		Portal b = o.cfg;
		b.port = o.port;
		Portal q = p;
		if (transport != "tcp" && (q.host.empty() || q.host == "0.0.0.0") &&
		    cfg_.rdma_device.empty())
			q.host = "127.0.0.1";
		return portal_str(o.cfg) == portal_str(q) || portal_str(b) == portal_str(q);
	};
	auto it = std::find_if(portals_.begin(), portals_.end(), same);
	if (it == portals_.end())
		fail(-ENOENT, "no " + transport + " portal " + address);
	// A portal group naming it would name nothing (and the saved file would not load).
	for (const TargetCfg &tc : cfg_.targets)
		for (const PortalGroupCfg &pg : tc.portal_groups)
			for (const Portal &gp : pg.portals)
				if (portal_str(gp) == portal_str(it->cfg))
					fail(-EBUSY, "portal " + address + " is in portal group " +
					                 std::to_string(pg.tag) + " of " + tc.name);
	// Stop accepting; the connections it accepted stay with their sessions.
	if (it->transport == "tcp") {
		tcp_->close_portal(it->tcp_index);
	} else {
		it->rdma->stop_accepting();
		retired_.push_back(std::move(it->rdma));
	}
	auto &list = transport == "tcp"    ? cfg_.portals
	             : transport == "iser" ? cfg_.iser_portals
	                                   : cfg_.srp_portals;
	const std::string cfgs = portal_str(it->cfg);
	auto ci = std::find_if(list.begin(), list.end(),
	                       [&](const Portal &x) { return portal_str(x) == cfgs; });
	if (ci != list.end())
		list.erase(ci);
	portals_.erase(it);
	refresh_portal_addresses();
	log_change(who, transport + " portal " + address + " deleted (its connections stay)");
}

// ---- Sessions ----------------------------------------------------------------------------------

json Daemon::session_logout(const std::string &id, std::chrono::milliseconds grace,
                            const std::string &who)
{
	std::string fabric, key;
	split_id(id, &fabric, &key);
	// Not under lock_ while it waits: a logout takes up to grace, and other administration
	// (and the session list) goes on meanwhile. The targets outlive every method.
	srpt::Target *srp;
	{
		std::lock_guard g(lock_);
		srp = srp_.get();
	}
	log_change(who, "session " + id + " logout requested");
	if (fabric == "iscsi") {
		const int rc = iscsi_->logout_session(tsih_of(key), grace);
		if (rc < 0)
			fail(rc, "no iSCSI session " + key);
		return {{"id", id}, {"outcome", rc == 0 ? "logged out" : "dropped"}};
	}
	if (!srp)
		fail(-ENOENT, "no SRP session " + key + " (no SRP portal)");
	const int rc = srp->logout_nexus(key, grace);
	if (rc == -ENOENT)
		fail(rc, "no SRP session " + key);
	if (rc == 0)
		return {{"id", id}, {"outcome", "logged out"}};
	srp->drop_nexus(key);
	return {{"id", id}, {"outcome", "dropped"}};
}

void Daemon::session_drop(const std::string &id, const std::string &who)
{
	std::string fabric, key;
	split_id(id, &fabric, &key);
	std::lock_guard g(lock_);
	log_change(who, "session " + id + " dropped");
	const int rc = fabric == "iscsi" ? iscsi_->drop_session(tsih_of(key))
	               : srp_            ? srp_->drop_nexus(key)
	                                 : -ENOENT;
	if (rc < 0)
		fail(rc, "no session " + id);
}

// ---- Saving ------------------------------------------------------------------------------------

json Daemon::save(const std::string &path, const std::string &who)
{
	std::lock_guard g(lock_);
	const std::string to = path.empty() ? cfg_.source : path;
	if (to.empty())
		fail(-EINVAL, "no configuration file to save to (the daemon was started without "
		              "--config): give a path");
	// A file LUN's size is where it starts: save what it is now (it may have been grown
	// and rescanned), so that a restart does not extend or cut it back. An rbd LUN's size,
	// when given, must be the image's at the next start: the image's now, unrounded (it
	// may have been grown outside and rescanned); 0 (the image's, whatever it is) stays.
	Config c = cfg_;
	// The ALUA states as the LUs have them: SET TARGET PORT GROUPS changes them without
	// an administrator (alua_ops.cc).
	for (TargetCfg &tc : c.targets)
		if (TargetRt *t = find_target(tc.name))
			alua_states_now(*t, &tc.alua);
	for (TargetCfg &tc : c.targets)
		if (TargetRt *t = find_target(tc.name))
			for (LunCfg &l : tc.luns) {
				auto it = t->lus.find(l.lun);
				if (it == t->lus.end())
					continue;
				scsi::Backstore &bs = it->second->bs();
				uint64_t now = 0;
				std::string w;
				if (l.bs.kind == "file") {
					l.bs.size = bs.size();
				} else if (l.bs.kind == "rbd" && l.bs.size) {
					if (bs.storage_size(&now, &w) == 0)
						l.bs.size = now;
					else
						ULP_LOG(Warn, Tool,
						        "save: target {} LUN {}: {}; saving its "
						        "configured size",
						        tc.name, l.lun, w);
				}
			}
	std::string why;
	if (int rc = save_config(c, to, &why); rc != 0)
		fail(rc, why);
	log_change(who, "configuration saved to " + to);
	return {{"path", to}};
}

json Daemon::reload(const std::string &who)
{
	std::lock_guard g(lock_);
	if (cfg_.source.empty())
		fail(-EINVAL,
		     "no configuration file to reload (the daemon was started without --config)");
	return reload_locked(who);
}

} // namespace targetd
