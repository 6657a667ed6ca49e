// SPDX-License-Identifier: MIT
// admin/prometheus.cc - stats_get's result in Prometheus' text format (admin/prometheus.h).
#include "admin/prometheus.h"

#include <cstdio>
#include <map>
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

} // namespace

std::string prometheus_text(const json &st)
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
			if (ss == t.end() || !ss->is_array())
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
						      "counter", "PDUs received", cl,
						      std::to_string(v));
					if (num(c, "pdus_out", &v))
						e.add("ulp_iscsi_connection_pdus_sent_total",
						      "counter", "PDUs sent", cl,
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
			static const std::pair<const char *, const char *> gauges[] = {
			    {"connections", "connections accepted and not yet freed"},
			    {"qps", "QPs of those connections"},
			    {"cq_entries", "CQ entries reserved in the CQ pools"},
			    {"mrs_used", "MRs of the rw contexts' pools in use"},
			    {"mrs", "MRs in the rw contexts' pools"},
			    {"heap_bytes_used", "registered data heap bytes in use"},
			    {"heap_bytes", "registered data heap bytes"}};
			for (auto [k, help] : gauges) {
				uint64_t v;
				if (num(p, k, &v))
					e.add(std::string("ulp_rdma_portal_") + k, "gauge", help,
					      pl, std::to_string(v));
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

	// The daemon's own counters: "*_open" are gauges, the rest counters.
	for (const char *fabric : {"iscsi", "srp"}) {
		auto f = st.find(fabric);
		if (f == st.end() || !f->is_object())
			continue;
		for (auto &[k, v] : f->items()) {
			if (!v.is_number_unsigned())
				continue;
			const bool gauge = k.size() > 5 && k.compare(k.size() - 5, 5, "_open") == 0;
			e.add(std::string("ulp_") + fabric + "_" + k + (gauge ? "" : "_total"),
			      gauge ? "gauge" : "counter", gauge ? "open now" : "since the start",
			      {}, std::to_string(v.get<uint64_t>()));
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
	for (const char *k : {"targets", "luns", "sessions", "cmds_in_flight"}) {
		uint64_t v;
		if (num(st, k, &v))
			e.add(std::string("ulp_") + k, "gauge", "now", {}, std::to_string(v));
	}
	return e.text();
}

} // namespace ulp::admin
