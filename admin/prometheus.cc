// SPDX-License-Identifier: MIT
// admin/prometheus.cc - stats_get's result in Prometheus' text format (admin/prometheus.h).
#include "admin/prometheus.h"

#include <cstdio>
#include <map>
#include <span>
#include <tuple>
#include <utility>
#include <vector>

namespace ulp::admin
{

using nlohmann::json;

namespace
{

using Labels = std::vector<std::pair<std::string, std::string>>;

// The families in the order first seen, each with its samples.
class Exposition
{
public:
	void add(const std::string &name, const char *type, const char *help, const Labels &l,
	         const std::string &value, const std::string &suffix = {})
	{
		auto [it, fresh] = index_.try_emplace(name, fams_.size());
		if (fresh)
			fams_.push_back({name, type, help, {}});
		fams_[it->second].samples.push_back(name + suffix + labels(l) + " " + value);
	}
	std::string text() const
	{
		std::string out;
		for (const Family &f : fams_) {
			out += "# HELP " + f.name + " " + f.help + "\n";
			out += "# TYPE " + f.name + " " + f.type + "\n";
			for (const std::string &s : f.samples)
				out += s + "\n";
		}
		return out;
	}

private:
	static std::string escape(const std::string &v)
	{
		std::string o;
		for (char c : v) {
			if (c == '\\')
				o += "\\\\";
			else if (c == '"')
				o += "\\\"";
			else if (c == '\n')
				o += "\\n";
			else
				o += c;
		}
		return o;
	}
	static std::string labels(const Labels &l)
	{
		if (l.empty())
			return {};
		std::string o = "{";
		for (size_t i = 0; i < l.size(); i++)
			o += (i ? "," : "") + l[i].first + "=\"" + escape(l[i].second) + "\"";
		return o + "}";
	}
	struct Family {
		std::string name;
		const char *type;
		const char *help;
		std::vector<std::string> samples;
	};
	std::vector<Family> fams_;
	std::map<std::string, size_t> index_;
};

// A field as an unsigned number, or false when it is missing or not one.
bool num(const json &j, const char *k, uint64_t *v)
{
	if (!j.is_object())
		return false;
	auto it = j.find(k);
	if (it == j.end() || !it->is_number_unsigned())
		return false;
	*v = it->get<uint64_t>();
	return true;
}

bool sint(const json &j, const char *k, int64_t *v)
{
	if (!j.is_object())
		return false;
	auto it = j.find(k);
	if (it == j.end() || !it->is_number_integer())
		return false;
	*v = it->get<int64_t>();
	return true;
}

std::string text(const json &j, const char *k)
{
	if (!j.is_object())
		return {};
	auto it = j.find(k);
	if (it == j.end())
		return {};
	if (it->is_string())
		return it->get<std::string>();
	if (it->is_number())
		return it->dump();
	return {};
}

std::string seconds(double s)
{
	char b[40];
	std::snprintf(b, sizeof(b), "%.9g", s);
	return b;
}

Labels with(Labels l, const char *k, const std::string &v)
{
	l.emplace_back(k, v);
	return l;
}

// One io object (stats_get's "io") as the families prefix_*.
void io_families(Exposition &e, const std::string &prefix, const char *what, const Labels &l,
                 const json &io, const std::vector<double> &bounds_s)
{
	if (!io.is_object())
		return;
	const std::string p = prefix + "_";
	if (auto c = io.find("commands"); c != io.end() && c->is_object())
		for (auto &[kind, v] : c->items())
			if (v.is_number_unsigned())
				e.add(p + "commands_total", "counter", what, with(l, "kind", kind),
				      std::to_string(v.get<uint64_t>()));
	uint64_t v;
	if (num(io, "tmfs", &v))
		e.add(p + "task_management_total", "counter", "task management functions received",
		      l, std::to_string(v));
	if (num(io, "bytes_read", &v))
		e.add(p + "read_bytes_total", "counter",
		      "data-in bytes sent (commands ending GOOD)", l, std::to_string(v));
	if (num(io, "bytes_written", &v))
		e.add(p + "written_bytes_total", "counter",
		      "data-out bytes received (commands ending GOOD)", l, std::to_string(v));
	if (auto c = io.find("errors"); c != io.end() && c->is_object())
		for (auto &[kind, x] : c->items())
			if (x.is_number_unsigned())
				e.add(p + "errors_total", "counter",
				      "commands not ending GOOD, by how they ended",
				      with(l, "kind", kind), std::to_string(x.get<uint64_t>()));
	auto lat = io.find("latency");
	if (lat == io.end() || !lat->is_object())
		return;
	auto b = lat->find("buckets");
	uint64_t sum_ns = 0, count = 0;
	if (b == lat->end() || !b->is_array() || !num(*lat, "sum_ns", &sum_ns) ||
	    !num(*lat, "count", &count))
		return;
	const std::string h = p + "latency_seconds";
	const char *help = "command latency, submit to status, seconds";
	uint64_t cum = 0;
	for (size_t i = 0; i < b->size(); i++) {
		if (!(*b)[i].is_number_unsigned())
			return;
		cum += (*b)[i].get<uint64_t>();
		// Buckets beyond the bounds given (the last one) are +Inf's.
		if (i < bounds_s.size())
			e.add(h, "histogram", help, with(l, "le", seconds(bounds_s[i])),
			      std::to_string(cum), "_bucket");
	}
	e.add(h, "histogram", help, with(l, "le", "+Inf"), std::to_string(count), "_bucket");
	e.add(h, "histogram", help, l, seconds(double(sum_ns) / 1e9), "_sum");
	e.add(h, "histogram", help, l, std::to_string(count), "_count");
}

// A LUN's copy manager (stats_get's "xcopy" of a LUN: scsi::XcopyCounts).
void xcopy_families(Exposition &e, const Labels &l, const json &x)
{
	if (!x.is_object())
		return;
	uint64_t v;
	for (const char *end : {"good", "failed", "aborted"})
		if (num(x, end, &v))
			e.add("ulp_lun_copies_total", "counter",
			      "EXTENDED COPY commands sent to the LUN, by how they ended",
			      with(l, "result", end), std::to_string(v));
	if (num(x, "bytes", &v))
		e.add("ulp_lun_copied_bytes_total", "counter",
		      "bytes EXTENDED COPY commands sent to the LUN wrote to their destinations", l,
		      std::to_string(v));
	if (num(x, "kernel_bytes", &v))
		e.add("ulp_lun_kernel_copied_bytes_total", "counter",
		      "of ulp_lun_copied_bytes_total, the bytes the kernel copied between files "
		      "(copy_file_range)",
		      l, std::to_string(v));
}

// The daemon's fabric counters (stats_get's "iscsi" and "srp"), each with its name, type and
// meaning (the fields' comments in iscsi/target/target.h and srp/target/target.h).
struct Figure {
	const char *key;  // in the JSON object
	const char *name; // the family
	const char *type; // "counter" or "gauge"
	const char *help;
};

constexpr Figure kIscsiFigures[] = {
    {"logins", "ulp_iscsi_logins_total", "counter", "iSCSI logins completed, every connection"},
    {"login_failures", "ulp_iscsi_login_failures_total", "counter",
     "iSCSI logins that failed (refused or broken off)"},
    {"sessions_open", "ulp_iscsi_sessions_open", "gauge",
     "iSCSI sessions open now, normal and discovery"},
    {"connections_open", "ulp_iscsi_connections_open", "gauge",
     "iSCSI connections open now, logging in or in full feature phase"},
    {"reinstatements", "ulp_iscsi_session_reinstatements_total", "counter",
     "iSCSI sessions closed by a new leading login of the same initiator"},
    {"teardown_timeouts", "ulp_iscsi_teardown_timeouts_total", "counter",
     "iSCSI session closes that ran past their bound and were tried again"},
};

constexpr Figure kSrpFigures[] = {
    {"logins", "ulp_srp_logins_total", "counter", "SRP channels accepted (SRP_LOGIN_RSP sent)"},
    {"login_rejects", "ulp_srp_login_rejects_total", "counter",
     "SRP logins answered SRP_LOGIN_REJ"},
    {"takeovers", "ulp_srp_takeovers_total", "counter",
     "SRP logins with MULTI CHANNEL ACTION 0 that ended a live nexus's channels"},
    {"channels_open", "ulp_srp_channels_open", "gauge", "SRP channels not yet freed"},
    {"nexuses_open", "ulp_srp_nexuses_open", "gauge", "SRP I_T nexuses not yet closed"},
    {"cmds", "ulp_srp_commands_total", "counter", "SRP_CMD IUs received"},
    {"tsk_mgmts", "ulp_srp_task_management_total", "counter", "SRP_TSK_MGMT IUs received"},
    {"i_logouts", "ulp_srp_initiator_logouts_total", "counter", "SRP_I_LOGOUT IUs received"},
    {"immediate", "ulp_srp_immediate_data_total", "counter",
     "SRP commands whose write data came in the IU (immediate data)"},
    {"ext_tables", "ulp_srp_external_tables_total", "counter",
     "SRP descriptor tables fetched from the initiator by RDMA READ"},
    {"rdma_reads", "ulp_srp_rdma_reads_total", "counter",
     "rw contexts posted to read write data from the initiator"},
    {"rdma_writes", "ulp_srp_rdma_writes_total", "counter",
     "rw contexts posted to write read data to the initiator"},
    {"cred_reqs", "ulp_srp_credit_requests_total", "counter",
     "SRP_CRED_REQ IUs sent to return credits no response carried"},
    {"wait_list", "ulp_srp_waited_ius_total", "counter",
     "SRP IUs that waited: channel not yet live, or no free ioctx"},
    {"sq_waits", "ulp_srp_send_queue_waits_total", "counter",
     "SRP transfers that waited for room in the send queue"},
    {"credit_overruns", "ulp_srp_credit_overruns_total", "counter",
     "SRP requests beyond the credits the initiator held"},
    {"bad_ius", "ulp_srp_bad_ius_total", "counter", "SRP IUs refused as malformed or unknown"},
    {"task_set_full", "ulp_srp_task_set_full_total", "counter",
     "SRP commands answered TASK SET FULL for lack of a buffer"},
    {"data_timeouts", "ulp_srp_data_timeouts_total", "counter",
     "SRP channels closed for a transfer that did not complete in time"},
    {"no_read_credit", "ulp_srp_no_read_credit_total", "counter",
     "SRP writes failed because the initiator granted no RDMA READ"},
    {"teardown_timeouts", "ulp_srp_teardown_timeouts_total", "counter",
     "SRP nexus closes that ran past their bound"},
};

struct FabricFigures {
	const char *fabric;
	std::span<const Figure> figures;
};

constexpr FabricFigures kFabricFigures[] = {{"iscsi", kIscsiFigures}, {"srp", kSrpFigures}};

const Figure *find_figure(std::span<const Figure> figs, const std::string &key)
{
	for (const Figure &f : figs)
		if (key == f.key)
			return &f;
	return nullptr;
}

} // namespace

bool parse_prometheus_query(std::string_view q, PromOptions *o, std::string *why)
{
	*o = PromOptions{};
	while (!q.empty()) {
		const size_t amp = q.find('&');
		const std::string_view kv = q.substr(0, amp);
		q = amp == std::string_view::npos ? std::string_view() : q.substr(amp + 1);
		if (kv.empty())
			continue;
		const size_t eq = kv.find('=');
		const std::string_view k = kv.substr(0, eq);
		const std::string_view v = eq == std::string_view::npos ? "" : kv.substr(eq + 1);
		if (k != "sessions") {
			*why = "unknown parameter '" + std::string(k.substr(0, 64)) +
			       "' (sessions=0|1)";
			return false;
		}
		if (v == "1" || v == "true")
			o->sessions = true;
		else if (v == "0" || v == "false")
			o->sessions = false;
		else {
			*why = "sessions is 0 or 1, not '" + std::string(v.substr(0, 64)) + "'";
			return false;
		}
	}
	return true;
}

std::vector<std::string> prometheus_unnamed(const json &st)
{
	std::vector<std::string> out;
	if (!st.is_object())
		return out;
	for (const FabricFigures &ff : kFabricFigures) {
		auto f = st.find(ff.fabric);
		if (f == st.end() || !f->is_object())
			continue;
		for (auto &[k, v] : f->items())
			if (v.is_number() && !find_figure(ff.figures, k))
				out.push_back(std::string(ff.fabric) + "." + k);
	}
	return out;
}

std::string prometheus_text(const json &st, const PromOptions &o)
{
	Exposition e;
	if (!st.is_object())
		return {};
	std::vector<double> bounds;
	if (auto b = st.find("latency_bounds_us"); b != st.end() && b->is_array())
		for (const json &x : *b)
			if (x.is_number())
				bounds.push_back(x.get<double>() / 1e6);

	if (auto io = st.find("io"); io != st.end() && io->is_array()) {
		for (const json &t : *io) {
			const Labels tl = {{"target", text(t, "target")},
			                   {"fabric", text(t, "fabric")}};
			if (!t.is_object())
				continue;
			io_families(e, "ulp_target", "SCSI commands ended, by kind (every session)",
			            tl, t.value("io", json()), bounds);
			if (auto ls = t.find("luns"); ls != t.end() && ls->is_array())
				for (const json &l : *ls) {
					const Labels ll = {{"target", text(t, "target")},
					                   {"lun", text(l, "lun")}};
					io_families(e, "ulp_lun",
					            "SCSI commands ended on the LUN, by kind "
					            "(every fabric)",
					            ll,
					            l.is_object() ? l.value("io", json()) : json(),
					            bounds);
					xcopy_families(e, ll,
					               l.is_object() ? l.value("xcopy", json())
					                             : json());
					// An rbd LUN's side of librbd (ulpctl stats' RBD_LUN
					// table).
					auto r = l.is_object() ? l.find("rbd") : l.end();
					if (r == l.end() || !r->is_object())
						continue;
					uint64_t v = 0;
					if (num(*r, "inflight", &v))
						e.add("ulp_rbd_inflight", "gauge",
						      "requests in librbd now", ll,
						      std::to_string(v));
					if (num(*r, "completed", &v))
						e.add("ulp_rbd_requests_total", "counter",
						      "requests librbd completed", ll,
						      std::to_string(v));
					if (num(*r, "errors", &v))
						e.add("ulp_rbd_errors_total", "counter",
						      "requests librbd failed", ll,
						      std::to_string(v));
					if (num(*r, "avg_us", &v))
						e.add(
						    "ulp_rbd_latency_avg_seconds", "gauge",
						    "mean time in librbd since the start, seconds",
						    ll, seconds(double(v) / 1e6));
					if (auto f = r->find("fenced");
					    f != r->end() && f->is_boolean())
						e.add("ulp_rbd_fenced", "gauge",
						      "1: the cluster blocklisted the LUN's client",
						      ll, f->get<bool>() ? "1" : "0");
				}
			auto ss = t.find("sessions");
			if (!o.sessions || ss == t.end() || !ss->is_array())
				continue;
			for (const json &s : *ss) {
				const Labels sl = {{"target", text(t, "target")},
				                   {"session", text(s, "id")},
				                   {"initiator", text(s, "initiator")},
				                   {"transport", text(s, "transport")}};
				if (!s.is_object())
					continue;
				io_families(e, "ulp_session",
				            "SCSI commands ended, by kind (this session)", sl,
				            s.value("io", json()), bounds);
				auto cs = s.find("connections");
				if (cs == s.end() || !cs->is_array())
					continue;
				for (const json &c : *cs) {
					const Labels cl = with(sl, "peer", text(c, "peer"));
					uint64_t v;
					int64_t iv;
					if (num(c, "cmdsn_window", &v))
						e.add("ulp_iscsi_connection_cmdsn_window", "gauge",
						      "MaxCmdSN - ExpCmdSN + 1 as last sent", cl,
						      std::to_string(v));
					if (num(c, "commands", &v))
						e.add("ulp_iscsi_connection_commands", "gauge",
						      "commands held by the connection", cl,
						      std::to_string(v));
					if (num(c, "pdus_in", &v))
						e.add("ulp_iscsi_connection_pdus_received_total",
						      "counter",
						      "iSCSI PDUs received on the connection", cl,
						      std::to_string(v));
					if (num(c, "pdus_out", &v))
						e.add("ulp_iscsi_connection_pdus_sent_total",
						      "counter",
						      "iSCSI PDUs sent on the connection", cl,
						      std::to_string(v));
					if (sint(c, "req_lim", &iv))
						e.add("ulp_srp_channel_req_lim", "gauge",
						      "credits the initiator holds, as the target "
						      "counts them",
						      cl, std::to_string(iv));
					if (num(c, "credits", &v))
						e.add("ulp_srp_channel_credits", "gauge",
						      "credits granted at login", cl,
						      std::to_string(v));
					if (num(c, "ioctxs_busy", &v))
						e.add("ulp_srp_channel_ioctxs_busy", "gauge",
						      "request buffers in use", cl,
						      std::to_string(v));
				}
			}
		}
	}

	if (auto ps = st.find("rdma_portals"); ps != st.end() && ps->is_array())
		for (const json &p : *ps) {
			const Labels pl = {{"transport", text(p, "transport")},
			                   {"address", text(p, "address")}};
			static const std::tuple<const char *, const char *, const char *> gauges[] =
			    {{"connections", "ulp_rdma_portal_connections",
			      "connections accepted and not yet freed"},
			     {"qps", "ulp_rdma_portal_qps", "QPs of those connections"},
			     {"cq_entries", "ulp_rdma_portal_cq_entries",
			      "CQ entries reserved in the CQ pools"},
			     {"mrs_used", "ulp_rdma_portal_mrs_used",
			      "MRs of the rw contexts' pools in use"},
			     {"mrs", "ulp_rdma_portal_mrs", "MRs in the rw contexts' pools"},
			     {"heap_bytes_used", "ulp_rdma_portal_heap_used_bytes",
			      "registered data heap in use, bytes"},
			     {"heap_bytes", "ulp_rdma_portal_heap_bytes",
			      "registered data heap, bytes"}};
			for (auto [k, name, help] : gauges) {
				uint64_t v;
				if (num(p, k, &v))
					e.add(name, "gauge", help, pl, std::to_string(v));
			}
			uint64_t v;
			if (num(p, "accepted", &v))
				e.add("ulp_rdma_portal_accepted_total", "counter",
				      "connections accepted", pl, std::to_string(v));
			if (num(p, "rejected", &v))
				e.add("ulp_rdma_portal_rejected_total", "counter",
				      "connections rejected", pl, std::to_string(v));
		}

	if (auto m = st.find("memory"); m != st.end() && m->is_object()) {
		uint64_t v;
		if (num(*m, "heap_in_use", &v))
			e.add("ulp_memory_heap_in_use_bytes", "gauge",
			      "heap bytes the daemon holds (malloc'd, not freed)", {},
			      std::to_string(v));
		if (num(*m, "heap_held", &v))
			e.add("ulp_memory_heap_held_bytes", "gauge",
			      "heap bytes the allocator has from the system", {},
			      std::to_string(v));
	}

	// The fabrics' own counters, by the tables above.
	for (const FabricFigures &ff : kFabricFigures) {
		auto f = st.find(ff.fabric);
		if (f == st.end() || !f->is_object())
			continue;
		for (const Figure &fig : ff.figures) {
			uint64_t v;
			if (num(*f, fig.key, &v))
				e.add(fig.name, fig.type, fig.help, {}, std::to_string(v));
		}
	}
	// What runs: the build as labels of a constant 1 (the node exporter's *_build_info), and
	// since when.
	if (auto b = st.find("build"); b != st.end() && b->is_object()) {
		e.add("ulp_build_info", "gauge", "the daemon's version and commit (always 1)",
		      {{"version", text(*b, "version")}, {"git_commit", text(*b, "git_commit")}},
		      "1");
		if (auto t = b->find("start_time_seconds"); t != b->end() && t->is_number()) {
			char v[32];
			std::snprintf(v, sizeof v, "%.3f", t->get<double>());
			e.add("ulp_start_time_seconds", "gauge",
			      "when the daemon started, seconds since the Unix epoch", {}, v);
		}
	}
	// Asymmetric access: each ALUA group's state per LUN, as the SPC-4 6.37 code (what
	// REPORT TARGET PORT GROUPS reports), and the state changes made.
	if (auto al = st.find("alua"); al != st.end() && al->is_array())
		for (const json &t : *al) {
			auto ls = t.is_object() ? t.find("luns") : t.end();
			if (ls == t.end() || !ls->is_array())
				continue;
			for (const json &l : *ls) {
				if (!l.is_object())
					continue;
				const Labels ll = {{"target", text(t, "target")},
				                   {"lun", text(l, "lun")}};
				uint64_t v = 0;
				if (num(l, "transitions", &v))
					e.add("ulp_alua_transitions_total", "counter",
					      "ALUA access state changes made on the LUN", ll,
					      std::to_string(v));
				auto gs = l.find("groups");
				if (gs == l.end() || !gs->is_array())
					continue;
				for (const json &g : *gs) {
					Labels gl = ll;
					gl.push_back({"group", text(g, "id")});
					if (g.is_object() && num(g, "state_code", &v))
						e.add("ulp_alua_group_state", "gauge",
						      "a target port group's access state (SPC-4 "
						      "6.37: 0 "
						      "active/optimized, 1 active/non-optimized, 2 "
						      "standby, 3 unavailable, 14 offline, 15 "
						      "transitioning)",
						      gl, std::to_string(v));
				}
			}
		}
	// A gateway of a Ceph cluster (ulp-targetd's [gateway]): per group of LUNs, whether
	// this gateway owns and serves it, its lease left, and the owners so far (an increase
	// is a move: a failover or a drain).
	if (auto gw = st.find("gateway"); gw != st.end() && gw->is_object()) {
		uint64_t v = 0;
		if (num(*gw, "version", &v))
			e.add("ulp_gateway_map_version", "gauge",
			      "the cluster map's version as this gateway last read it", {},
			      std::to_string(v));
		auto gs = gw->find("groups");
		if (gs != gw->end() && gs->is_array())
			for (const json &g : *gs) {
				if (!g.is_object())
					continue;
				const Labels gl = {{"gateway", text(*gw, "name")},
				                   {"group", text(g, "group")}};
				e.add("ulp_gateway_group_active", "gauge",
				      "1 when this gateway owns the group and serves it (active)",
				      gl, g.value("state", "") == "active" ? "1" : "0");
				if (num(g, "lease_left_ms", &v)) {
					char b[32];
					std::snprintf(b, sizeof b, "%.3f", double(v) / 1000);
					e.add("ulp_gateway_group_lease_left_seconds", "gauge",
					      "how long this gateway may still act as the group's "
					      "owner "
					      "without renewing (0: it holds no lease)",
					      gl, b);
				}
				if (num(g, "epoch", &v))
					e.add("ulp_gateway_group_epoch", "gauge",
					      "the group's owners so far, as the cluster map "
					      "records them "
					      "(one more at each move)",
					      gl, std::to_string(v));
			}
	}
	static const std::tuple<const char *, const char *, const char *> now[] = {
	    {"targets", "ulp_targets", "targets configured"},
	    {"luns", "ulp_luns", "LUNs configured, every target"},
	    {"sessions", "ulp_sessions", "sessions (I_T nexuses) open now, every fabric"},
	    {"cmds_in_flight", "ulp_commands_in_flight",
	     "commands received and not yet answered, every session"}};
	for (auto [k, name, help] : now) {
		uint64_t v;
		if (num(st, k, &v))
			e.add(name, "gauge", help, {}, std::to_string(v));
	}
	return e.text();
}

} // namespace ulp::admin
