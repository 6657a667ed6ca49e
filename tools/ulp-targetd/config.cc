// SPDX-License-Identifier: MIT
// tools/ulp-targetd/config.cc - flags and TOML to a Config, and a Config to a running
// target's parts (see config.h).
#include "tools/ulp-targetd/config.h"

#include "scsi/pr.h"

#include <toml++/toml.h>

#include <arpa/inet.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <set>

namespace targetd
{

using namespace ulp;

namespace
{

// default_port < 0: the port must be given (SRP has no well-known port).
bool parse_portal(const std::string &s, Portal *p, std::string *why, int default_port = 3260)
{
	std::string host, port;
	if (!s.empty() && s.front() == '[') {
		auto close = s.find(']');
		if (close == std::string::npos) {
			*why = "portal " + s + ": missing ']'";
			return false;
		}
		host = s.substr(1, close - 1);
		if (close + 1 < s.size()) {
			if (s[close + 1] != ':') {
				*why = "portal " + s + ": expected ':' after ']'";
				return false;
			}
			port = s.substr(close + 2);
		}
	} else {
		auto colon = s.rfind(':');
		host = colon == std::string::npos ? s : s.substr(0, colon);
		if (colon != std::string::npos)
			port = s.substr(colon + 1);
	}
	if (host == "0.0.0.0" || host == "*")
		host.clear();
	p->host = host;
	p->port = uint16_t(std::max(default_port, 0));
	if (port.empty() && default_port < 0) {
		*why = "portal " + s + ": give a port (HOST:PORT)";
		return false;
	}
	if (!port.empty()) {
		char *end = nullptr;
		unsigned long v = std::strtoul(port.c_str(), &end, 10);
		if (*end || v > 65535) { // 0: an ephemeral port (tests)
			*why = "portal " + s + ": bad port";
			return false;
		}
		p->port = static_cast<uint16_t>(v);
	}
	return true;
}

bool parse_chap(const std::string &s, iscsi::ChapSecret *out, std::string *why)
{
	auto colon = s.find(':');
	if (colon == std::string::npos || colon == 0 || colon + 1 == s.size()) {
		*why = "CHAP credentials must be USER:SECRET";
		return false;
	}
	out->user = s.substr(0, colon);
	out->secret = s.substr(colon + 1);
	// RFC 7143 12.1.3: secrets of at least 12 bytes (96 bits) where CHAP may be used
	// outside IPsec; the login engine refuses shorter ones too.
	if (out->secret.size() < 12) {
		*why = "CHAP secret of " + out->user + " is shorter than 12 characters";
		return false;
	}
	return true;
}

bool parse_bool_word(const std::string &s, bool *out)
{
	std::string v;
	for (char c : s)
		v += char(std::tolower(static_cast<unsigned char>(c)));
	if (v == "yes" || v == "true" || v == "1" || v == "on")
		*out = true;
	else if (v == "no" || v == "false" || v == "0" || v == "off")
		*out = false;
	else
		return false;
	return true;
}

bool set_digests(const std::string &d, iscsi::OperationalPrefs *p, std::string *why)
{
	using iscsi::Digest;
	std::vector<Digest> v;
	if (d == "none")
		v = {Digest::None};
	else if (d == "crc32c")
		v = {Digest::Crc32c};
	else if (d == "both")
		v = {Digest::Crc32c, Digest::None};
	else {
		*why = "digests must be none, crc32c or both, not " + d;
		return false;
	}
	p->header_digests = v;
	p->data_digests = v;
	return true;
}

// "N:KIND[:key=value,...]", e.g. "0:ram:size=1G", "1:file:path=/x.img,size=10G,bs=4096".
bool parse_lun_flag(const std::string &s, LunCfg *out, std::string *why)
{
	auto c1 = s.find(':');
	if (c1 == std::string::npos) {
		*why = "--lun " + s + ": expected N:KIND[:key=value,...]";
		return false;
	}
	char *end = nullptr;
	out->lun = std::strtoull(s.c_str(), &end, 10);
	if (end != s.c_str() + c1) {
		*why = "--lun " + s + ": bad LUN number";
		return false;
	}
	auto c2 = s.find(':', c1 + 1);
	out->bs.kind = s.substr(c1 + 1, c2 == std::string::npos ? std::string::npos : c2 - c1 - 1);
	if (c2 == std::string::npos)
		return true;
	std::string rest = s.substr(c2 + 1);
	size_t p = 0;
	while (p < rest.size()) {
		size_t q = rest.find(',', p);
		if (q == std::string::npos)
			q = rest.size();
		std::string kv = rest.substr(p, q - p);
		p = q + 1;
		auto eq = kv.find('=');
		if (eq == std::string::npos) {
			*why = "--lun " + s + ": '" + kv + "' is not key=value";
			return false;
		}
		std::string k = kv.substr(0, eq), v = kv.substr(eq + 1);
		bool b;
		if (k == "size") {
			if (!parse_size(v, &out->bs.size)) {
				*why = "--lun " + s + ": bad size " + v;
				return false;
			}
		} else if (k == "path") {
			out->bs.path = v;
		} else if (k == "bs" || k == "block_size") {
			uint64_t n;
			if (!parse_size(v, &n) || n > 65536) {
				*why = "--lun " + s + ": bad block size " + v;
				return false;
			}
			out->bs.block_size = uint32_t(n);
		} else if (k == "pbs" || k == "physical_block_size") {
			uint64_t n;
			if (!parse_size(v, &n) || n > (1u << 31)) {
				*why = "--lun " + s + ": bad physical block size " + v;
				return false;
			}
			out->physical_block_size = uint32_t(n);
		} else if (k == "ro" || k == "read_only") {
			if (!parse_bool_word(v, &b)) {
				*why = "--lun " + s + ": " + k + " is yes or no";
				return false;
			}
			out->read_only = b;
			out->bs.read_only = b;
		} else if (k == "removable") {
			if (!parse_bool_word(v, &out->removable)) {
				*why = "--lun " + s + ": removable is yes or no";
				return false;
			}
		} else if (k == "direct") {
			if (!parse_bool_word(v, &out->bs.direct)) {
				*why = "--lun " + s + ": direct is yes or no";
				return false;
			}
		} else if (k == "write_cache" || k == "wc") {
			if (!parse_bool_word(v, &out->bs.write_cache)) {
				*why = "--lun " + s + ": write_cache is yes or no";
				return false;
			}
		} else if (k == "qd" || k == "queue_depth") {
			uint64_t n;
			if (!parse_size(v, &n) || n == 0 || n > 4096) {
				*why = "--lun " + s + ": bad queue depth " + v;
				return false;
			}
			out->bs.queue_depth = uint32_t(n);
		} else {
			*why = "--lun " + s + ": unknown key " + k +
			       " (size, path, bs, pbs, ro, removable, direct, write_cache, qd)";
			return false;
		}
	}
	return true;
}

bool load_file(const std::string &path, Config *c, std::string *why)
{
	toml::table t;
	try {
		t = toml::parse_file(path);
	} catch (const toml::parse_error &e) {
		*why = path + ":" + std::to_string(e.source().begin.line) + ": " +
		       std::string(e.description());
		return false;
	}
	if (auto w = t["workers"].value<int64_t>())
		c->workers = int(*w);
	if (auto d = t["state_dir"].value<std::string>())
		c->state_dir = *d;
	if (auto *ps = t["portals"].as_array()) {
		for (auto &e : *ps) {
			auto s = e.value<std::string>();
			Portal p;
			if (!s || !parse_portal(*s, &p, why)) {
				if (!s)
					*why = path + ": portals must be strings";
				return false;
			}
			c->portals.push_back(p);
		}
	}
	if (auto *ps = t["iser_portals"].as_array()) {
		for (auto &e : *ps) {
			auto s = e.value<std::string>();
			Portal p;
			if (!s || !parse_portal(*s, &p, why)) {
				if (!s)
					*why = path + ": iser_portals must be strings";
				return false;
			}
			c->iser_portals.push_back(p);
		}
	}
	if (auto *ps = t["srp_portals"].as_array()) {
		for (auto &e : *ps) {
			auto s = e.value<std::string>();
			Portal p;
			if (!s || !parse_portal(*s, &p, why, -1)) {
				if (!s)
					*why = path + ": srp_portals must be strings";
				return false;
			}
			c->srp_portals.push_back(p);
		}
	}
	if (auto v = t["rdma_device"].value<std::string>())
		c->rdma_device = *v;
	if (auto *st = t["srp"].as_table()) {
		auto &x = *st;
		for (const char *k : {"id_ext", "ioc_guid"}) {
			if (!x.contains(k))
				continue;
			auto v = x[k].value<std::string>();
			uint64_t n = 0;
			if (!v || !parse_hex64(*v, &n)) {
				*why =
				    path + ": srp." + k + " must be a string of 1 to 16 hex digits";
				return false;
			}
			(std::strcmp(k, "id_ext") == 0 ? c->srp.id_ext : c->srp.ioc_guid) = n;
		}
		if (x.contains("srq")) {
			auto v = x["srq"].value<bool>();
			if (!v) {
				*why = path + ": srp.srq must be true or false";
				return false;
			}
			c->srp.srq = *v;
		}
		if (auto *as = x["acls"].as_array()) {
			for (auto &a : *as) {
				auto v = a.value<std::string>();
				std::string n;
				if (!v || !normalize_srp_acl(*v, &n)) {
					*why = path +
					       ": srp.acls entries are \"0x\" + 32 hex digits (an "
					       "initiator port id) or an IP address";
					return false;
				}
				c->srp.acls.push_back(n);
			}
		}
		c->srp.target = x["target"].value_or(std::string());
	}
	if (auto *is = t["iser"].as_table()) {
		auto &x = *is;
		if (auto v = x["recv_data_segment_length"].value<int64_t>())
			c->iser.recv_dsl = uint32_t(*v);
		if (auto v = x["buffer_pool"].value<std::string>()) {
			uint64_t n = 0;
			if (!parse_size(*v, &n)) {
				*why = path + ": bad iser.buffer_pool " + *v;
				return false;
			}
			c->iser.heap_bytes = n;
		}
	}
	if (auto *is = t["iscsi"].as_table()) {
		auto &x = *is;
		auto &pr = c->prefs;
		if (auto v = x["max_recv_data_segment_length"].value<int64_t>())
			pr.max_recv_dsl = uint32_t(*v);
		if (auto v = x["max_burst_length"].value<int64_t>())
			pr.max_burst_length = uint32_t(*v);
		if (auto v = x["first_burst_length"].value<int64_t>())
			pr.first_burst_length = uint32_t(*v);
		if (auto v = x["immediate_data"].value<bool>())
			pr.immediate_data = *v;
		if (auto v = x["initial_r2t"].value<bool>())
			pr.initial_r2t = *v;
		if (auto v = x["max_outstanding_r2t"].value<int64_t>())
			pr.max_outstanding_r2t = uint16_t(*v);
		if (auto v = x["digests"].value<std::string>())
			if (!set_digests(*v, &pr, why))
				return false;
		if (auto v = x["cmd_window"].value<int64_t>())
			c->cmd_window = uint32_t(*v);
		if (auto v = x["nop_interval"].value<int64_t>())
			c->nop_interval = int(*v);
		if (auto v = x["nop_timeout"].value<int64_t>())
			c->nop_timeout = int(*v);
		if (auto v = x["discovery"].value<bool>())
			c->discovery = *v;
	}
	if (auto *ts = t["target"].as_array()) {
		for (auto &te : *ts) {
			auto *tt = te.as_table();
			if (!tt) {
				*why = path + ": [[target]] entries must be tables";
				return false;
			}
			TargetCfg tc;
			tc.name = (*tt)["name"].value_or(std::string());
			tc.alias = (*tt)["alias"].value_or(std::string());
			for (const char *k : {"chap", "mutual_chap"}) {
				if (auto *ch = (*tt)[k].as_table()) {
					iscsi::ChapSecret s;
					s.user = (*ch)["user"].value_or(std::string());
					s.secret = (*ch)["secret"].value_or(std::string());
					if (!parse_chap(s.user + ":" + s.secret, &s, why))
						return false;
					(std::strcmp(k, "chap") == 0 ? tc.chap : tc.mutual_chap) =
					    s;
				}
			}
			tc.allow_target_reset = (*tt)["allow_target_reset"].value_or(false);
			if (auto *as = (*tt)["acls"].as_array())
				for (auto &a : *as)
					if (auto s = a.value<std::string>())
						tc.acls.push_back(*s);
			if (auto *ls = (*tt)["lun"].as_array()) {
				for (auto &le : *ls) {
					auto *lt = le.as_table();
					if (!lt) {
						*why = path +
						       ": [[target.lun]] entries must be tables";
						return false;
					}
					LunCfg l;
					l.lun = uint64_t(
					    (*lt)["lun"].value_or(int64_t(tc.luns.size())));
					l.bs.kind = (*lt)["backstore"].value_or(std::string());
					l.bs.path = (*lt)["path"].value_or(std::string());
					if (auto sz = (*lt)["size"].value<std::string>()) {
						if (!parse_size(*sz, &l.bs.size)) {
							*why = path + ": bad size " + *sz;
							return false;
						}
					} else if (auto n = (*lt)["size"].value<int64_t>()) {
						l.bs.size = uint64_t(*n);
					}
					l.bs.block_size =
					    uint32_t((*lt)["block_size"].value_or(int64_t(512)));
					l.physical_block_size = uint32_t(
					    (*lt)["physical_block_size"].value_or(int64_t(0)));
					l.read_only = (*lt)["read_only"].value_or(false);
					l.bs.read_only = l.read_only;
					l.removable = (*lt)["removable"].value_or(false);
					l.bs.direct = (*lt)["direct"].value_or(true);
					l.bs.write_cache = (*lt)["write_cache"].value_or(true);
					tc.luns.push_back(l);
				}
			}
			c->targets.push_back(std::move(tc));
		}
	}
	return true;
}

} // namespace

bool parse_size(const std::string &s, uint64_t *out)
{
	if (s.empty())
		return false;
	char *end = nullptr;
	errno = 0;
	unsigned long long v = std::strtoull(s.c_str(), &end, 10);
	if (errno || end == s.c_str())
		return false;
	uint64_t mul = 1;
	std::string suf(end);
	if (suf == "K" || suf == "k" || suf == "KiB")
		mul = 1ull << 10;
	else if (suf == "M" || suf == "m" || suf == "MiB")
		mul = 1ull << 20;
	else if (suf == "G" || suf == "g" || suf == "GiB")
		mul = 1ull << 30;
	else if (suf == "T" || suf == "t" || suf == "TiB")
		mul = 1ull << 40;
	else if (!suf.empty())
		return false;
	if (v > UINT64_MAX / mul)
		return false;
	*out = v * mul;
	return true;
}

bool parse_hex64(const std::string &s, uint64_t *out)
{
	std::string d = s;
	if (d.size() > 2 && d[0] == '0' && (d[1] == 'x' || d[1] == 'X'))
		d = d.substr(2);
	if (d.empty() || d.size() > 16 ||
	    !std::all_of(d.begin(), d.end(), [](char ch) { return std::isxdigit(uint8_t(ch)); }))
		return false;
	*out = std::strtoull(d.c_str(), nullptr, 16);
	return true;
}

bool normalize_srp_acl(const std::string &s, std::string *out)
{
	// srpt::port_id_str's form: "0x" and 32 lowercase hex digits (ib_srpt's RDMA/CM
	// ACL names too).
	if (s.size() == 34 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X') &&
	    std::all_of(s.begin() + 2, s.end(),
	                [](char ch) { return std::isxdigit(uint8_t(ch)); })) {
		std::string v = "0x";
		for (size_t i = 2; i < s.size(); i++)
			v += char(std::tolower(uint8_t(s[i])));
		*out = v;
		return true;
	}
	// A source address, in SockAddr::host()'s form (inet_ntop) so that it matches.
	unsigned char a[sizeof(in6_addr)];
	char buf[INET6_ADDRSTRLEN] = {};
	for (int af : {AF_INET, AF_INET6}) {
		if (inet_pton(af, s.c_str(), a) == 1 && inet_ntop(af, a, buf, sizeof(buf))) {
			*out = buf;
			return true;
		}
	}
	return false;
}

void add_flags(CLI::App &app, Flags &f)
{
	app.add_option("--config", f.config,
	               "a TOML file with portals, targets and LUNs "
	               "(tools/ulp-targetd/config.h shows the format)");
	app.add_option("--portal", f.portals,
	               "HOST:PORT to listen on, repeatable (default 0.0.0.0:3260)");
	app.add_option("--iser-portal", f.iser_portals,
	               "HOST:PORT to listen on for iSER (RDMA/CM), repeatable; on the soft "
	               "provider unless --rdma-device");
	app.add_option("--srp-portal", f.srp_portals,
	               "HOST:PORT to listen on for SRP logins (RDMA/CM; Linux's tests use port "
	               "5555), repeatable; on the soft provider unless --rdma-device. The "
	               "add_target line a Linux initiator needs is logged for each");
	app.add_option("--srp-id-ext", f.srp_id_ext,
	               "HEX: the SRP target port id's first half, add_target's id_ext (default: "
	               "the node GUID of the first SRP portal's device)");
	app.add_option("--srp-ioc-guid", f.srp_ioc_guid,
	               "HEX: the SRP target port id's second half, add_target's ioc_guid "
	               "(default: the node GUID of the first SRP portal's device)");
	app.add_flag("--srp-srq", f.srp_srq,
	             "SRP channels receive on one shared receive queue per device");
	app.add_option("--srp-acl", f.srp_acls,
	               "an SRP initiator allowed in: \"0x\" + the 32 hex digits of its port id, "
	               "or its source IP (repeatable; none: open)");
	app.add_option("--rdma-device", f.rdma_device,
	               "the verbs device for the iSER and SRP portals (e.g. rxe0); default: a "
	               "soft device per portal address");
	app.add_option("--target", f.target,
	               "the target's iSCSI name (default iqn.2026-11.org.ulp:target)");
	app.add_option("--lun", f.luns,
	               "N:KIND[:key=value,...], KIND ram|file|block|null, keys size, path, bs, "
	               "pbs, ro, removable, direct, write_cache, qd; e.g. 0:ram:size=1G or "
	               "1:file:path=/srv/d.img,size=10G (repeatable)");
	app.add_option("--acl", f.acls, "an initiator name allowed in (repeatable; none: open)");
	app.add_option("--chap", f.chap, "USER:SECRET the initiators must prove (CHAP)");
	app.add_option("--mutual-chap", f.mutual_chap,
	               "USER:SECRET the target proves to the initiators (mutual CHAP)");
	app.add_option("--workers", f.workers, "event-loop threads (default 1)");
	app.add_option("--state-dir", f.state_dir,
	               "DIR for the persistent reservations initiators ask to keep across "
	               "restarts (APTPL 1), a file per LUN; created (mode 0700) if missing; "
	               "when it cannot be used, APTPL 1 is refused (default "
	               "/var/lib/ulp-targetd)");
	app.add_option("--max-recv-dsl", f.max_recv_dsl,
	               "MaxRecvDataSegmentLength we declare (default 262144)");
	app.add_option("--max-burst", f.max_burst, "MaxBurstLength we accept (default 1048576)");
	app.add_option("--first-burst", f.first_burst,
	               "FirstBurstLength we accept (default 65536)");
	app.add_option("--immediate-data", f.immediate_data, "ImmediateData yes|no (default yes)");
	app.add_option("--initial-r2t", f.initial_r2t, "InitialR2T yes|no (default no)");
	app.add_option("--digests", f.digests, "none|crc32c|both (default none)");
	app.add_option("--cmd-window", f.cmd_window,
	               "commands in flight per session (default 128)");
	app.add_option("--nop-interval", f.nop_interval,
	               "seconds between target NOP-In pings (default 0: none)");
	app.add_option("--ready-fd", f.ready_fd,
	               "write the first portal's port and a newline to this fd once listening");
	app.add_flag("--allow-target-reset", f.allow_target_reset,
	             "honour TARGET WARM RESET and TARGET COLD RESET from any initiator (they "
	             "reset every LU for everyone; a cold reset drops every session)");
	app.add_flag("--quiet,-q", f.quiet, "only warnings and errors in the log");
	app.add_option("--log-level", f.log_level,
	               "trace|debug|info|warning|error|critical|off (default info)")
	    ->transform([](std::string s) {
		    ulp::log::Level l;
		    if (!ulp::log::parse_level(s, &l))
			    throw CLI::ValidationError("--log-level", "no such level: " + s);
		    return std::to_string(int(l));
	    });
	app.add_option("--log-file", f.log_file,
	               "append the log to this file instead of stderr (systemd's journal takes "
	               "stderr)");
	app.add_flag("--trace", f.trace, "log every PDU received and sent (diagnostics; slow)");
}

bool build_config(const Flags &f, Config *c, std::string *why)
{
	// Defaults a storage target wants (RFC 7143 defaults are for interoperability, not
	// speed): large segments and bursts, immediate and unsolicited data.
	c->prefs.max_recv_dsl = 262144;
	c->prefs.max_burst_length = 1048576;
	c->prefs.first_burst_length = 65536;
	c->prefs.immediate_data = true;
	c->prefs.initial_r2t = false;
	if (!f.config.empty() && !load_file(f.config, c, why))
		return false;
	for (const std::string &p : f.portals) {
		Portal po;
		if (!parse_portal(p, &po, why))
			return false;
		c->portals.push_back(po);
	}
	for (const std::string &p : f.iser_portals) {
		Portal po;
		if (!parse_portal(p, &po, why))
			return false;
		c->iser_portals.push_back(po);
	}
	for (const std::string &p : f.srp_portals) {
		Portal po;
		if (!parse_portal(p, &po, why, -1)) {
			*why = "--srp-portal: " + *why;
			return false;
		}
		c->srp_portals.push_back(po);
	}
	if (!f.rdma_device.empty())
		c->rdma_device = f.rdma_device;
	if (!f.srp_id_ext.empty()) {
		uint64_t n = 0;
		if (!parse_hex64(f.srp_id_ext, &n)) {
			*why = "--srp-id-ext " + f.srp_id_ext + ": 1 to 16 hex digits expected";
			return false;
		}
		c->srp.id_ext = n;
	}
	if (!f.srp_ioc_guid.empty()) {
		uint64_t n = 0;
		if (!parse_hex64(f.srp_ioc_guid, &n)) {
			*why = "--srp-ioc-guid " + f.srp_ioc_guid + ": 1 to 16 hex digits expected";
			return false;
		}
		c->srp.ioc_guid = n;
	}
	if (f.srp_srq)
		c->srp.srq = true;
	for (const std::string &a : f.srp_acls) {
		std::string n;
		if (!normalize_srp_acl(a, &n)) {
			*why = "--srp-acl " + a +
			       ": \"0x\" + 32 hex digits (an initiator port id) or an IP address "
			       "expected";
			return false;
		}
		c->srp.acls.push_back(n);
	}
	// No portal at all: iSCSI/TCP on the well-known port.
	if (c->portals.empty() && c->iser_portals.empty() && c->srp_portals.empty())
		c->portals.push_back(Portal{"", 3260});
	if (f.workers > 0)
		c->workers = f.workers;
	if (!f.state_dir.empty())
		c->state_dir = f.state_dir;
	if (f.max_recv_dsl)
		c->prefs.max_recv_dsl = f.max_recv_dsl;
	if (f.max_burst)
		c->prefs.max_burst_length = f.max_burst;
	if (f.first_burst)
		c->prefs.first_burst_length = f.first_burst;
	if (!f.immediate_data.empty() &&
	    !parse_bool_word(f.immediate_data, &c->prefs.immediate_data)) {
		*why = "--immediate-data is yes or no";
		return false;
	}
	if (!f.initial_r2t.empty() && !parse_bool_word(f.initial_r2t, &c->prefs.initial_r2t)) {
		*why = "--initial-r2t is yes or no";
		return false;
	}
	if (!f.digests.empty() && !set_digests(f.digests, &c->prefs, why))
		return false;
	if (f.cmd_window)
		c->cmd_window = f.cmd_window;
	if (f.nop_interval >= 0)
		c->nop_interval = f.nop_interval;

	// The flag-defined target (joins the file's, if any).
	if (!f.luns.empty() || !f.target.empty() || c->targets.empty()) {
		TargetCfg t;
		t.name = f.target.empty() ? "iqn.2026-11.org.ulp:target" : f.target;
		for (const std::string &l : f.luns) {
			LunCfg lc;
			if (!parse_lun_flag(l, &lc, why))
				return false;
			t.luns.push_back(lc);
		}
		t.acls = f.acls;
		t.allow_target_reset = f.allow_target_reset;
		if (!f.chap.empty()) {
			t.chap.emplace();
			if (!parse_chap(f.chap, &*t.chap, why))
				return false;
		}
		if (!f.mutual_chap.empty()) {
			t.mutual_chap.emplace();
			if (!parse_chap(f.mutual_chap, &*t.mutual_chap, why))
				return false;
		}
		c->targets.push_back(std::move(t));
	}

	// Checks that would otherwise surface as a confusing login failure.
	if (c->workers < 1 || c->workers > 64) {
		*why = "workers must be 1..64";
		return false;
	}
	if (c->prefs.max_recv_dsl < 512 || c->prefs.max_recv_dsl > (1u << 20)) {
		*why = "max_recv_data_segment_length must be 512..1048576";
		return false;
	}
	if (c->prefs.first_burst_length > c->prefs.max_burst_length) {
		*why = "first_burst_length must not exceed max_burst_length (RFC 7143 13.14)";
		return false;
	}
	if (c->iser.recv_dsl < 512 || c->iser.recv_dsl > (1u << 20)) {
		*why = "iser.recv_data_segment_length must be 512..1048576";
		return false;
	}
	if (c->iser.heap_bytes < (1u << 20) || c->iser.heap_bytes > (64ull << 30)) {
		*why = "iser.buffer_pool must be 1M..64G";
		return false;
	}
	if (c->cmd_window < 1 || c->cmd_window > 4096) {
		*why = "cmd_window must be 1..4096";
		return false;
	}
	if (!c->srp.target.empty() &&
	    std::none_of(c->targets.begin(), c->targets.end(),
	                 [&](const TargetCfg &t) { return t.name == c->srp.target; })) {
		*why = "srp.target " + c->srp.target + " is not a [[target]]";
		return false;
	}
	std::set<std::string> names;
	for (TargetCfg &t : c->targets) {
		if (!iscsi::valid_iscsi_name(t.name)) {
			*why =
			    "target name " + t.name + " is not a valid iSCSI name (iqn./eui./naa.)";
			return false;
		}
		if (!names.insert(t.name).second) {
			*why = "target " + t.name + " is defined twice";
			return false;
		}
		if (t.luns.empty()) {
			*why = "target " + t.name +
			       " has no LUN (add --lun 0:ram:size=1G, for example)";
			return false;
		}
		std::set<uint64_t> ids;
		for (const LunCfg &l : t.luns) {
			if (!ids.insert(l.lun).second) {
				*why = "target " + t.name + ": LUN " + std::to_string(l.lun) +
				       " twice";
				return false;
			}
			if (l.lun > 16383) {
				*why = "LUN numbers go up to 16383";
				return false;
			}
			scsi::LuConfig lc;
			lc.block_size = l.bs.block_size;
			lc.physical_block_size = l.physical_block_size;
			if (const char *bad = scsi::lu_config_check(lc)) {
				*why = "target " + t.name + " LUN " + std::to_string(l.lun) + ": " +
				       bad;
				return false;
			}
		}
		if (t.mutual_chap && !t.chap) {
			*why = "target " + t.name + ": mutual CHAP needs CHAP";
			return false;
		}
		for (const std::string &a : t.acls)
			if (!iscsi::valid_iscsi_name(a)) {
				*why = "ACL entry " + a + " is not a valid iSCSI name";
				return false;
			}
	}
	return true;
}

bool instantiate(const Config &c, Runtime *rt, std::string *why)
{
	iscsi::target::TargetConfig &tc = rt->target_cfg;
	tc.prefs = c.prefs;
	tc.cmd_window = c.cmd_window;
	tc.allow_discovery = c.discovery;
	tc.nop_interval = std::chrono::seconds(c.nop_interval);
	tc.nop_timeout = std::chrono::seconds(c.nop_timeout);
	tc.max_io_bytes = std::max<uint32_t>(16u << 20, c.prefs.max_burst_length);
	// portal_addresses: set by main once the portals are bound (ports may be ephemeral).
	// The state directory: without it the LUs run, but refuse APTPL 1 (PTPL_C 0).
	std::string sw;
	rt->pr_store = scsi::PrStore::open(c.state_dir, &sw);
	if (!rt->pr_store)
		ULP_LOG(Warn, Tool,
		        "state directory {} cannot be used ({}): persistent reservations will not "
		        "survive a restart, APTPL 1 is refused",
		        c.state_dir, sw);
	uint16_t rtpi = 1;
	// The SRP target port exports the LUNs of srp.target (or of the first target).
	const std::string &srp_of = c.srp.target.empty() ? c.targets.front().name : c.srp.target;
	if (!c.srp_portals.empty())
		rt->srp_tpg =
		    std::make_unique<scsi::Tpg>("srp:" + srp_of, uint16_t(c.targets.size() + 1));
	for (const TargetCfg &t : c.targets) {
		auto tpg = std::make_unique<scsi::Tpg>(t.name, rtpi++);
		for (const LunCfg &l : t.luns) {
			int err = 0;
			std::string w;
			auto bs = scsi::make_backstore(l.bs, &err, &w);
			if (!bs) {
				*why =
				    "target " + t.name + " LUN " + std::to_string(l.lun) + ": " + w;
				return false;
			}
			scsi::LuConfig lc;
			lc.block_size = l.bs.block_size;
			lc.physical_block_size = l.physical_block_size;
			lc.removable = l.removable;
			lc.read_only = l.read_only;
			lc.product = "ulp " + l.bs.kind;
			auto lu = std::make_unique<scsi::LogicalUnit>(
			    t.name + "/" + std::to_string(l.lun), std::move(bs), lc);
			// Its reservations as the last run left them (APTPL 1), before anyone
			// can log in; a damaged state file stops the start (the message says
			// which file, and that moving it aside starts the LUN without them).
			if (rt->pr_store) {
				const scsi::PrLoad pl =
				    scsi::pr_attach_store(*lu, *rt->pr_store, &w);
				if (pl != scsi::PrLoad::Ok && pl != scsi::PrLoad::NoState) {
					*why = "target " + t.name + " LUN " +
					       std::to_string(l.lun) + ": " + w;
					return false;
				}
			}
			if (int rc = tpg->add_lun(l.lun, *lu); rc != 0) {
				*why =
				    "add LUN " + std::to_string(l.lun) + ": " + std::strerror(-rc);
				return false;
			}
			if (rt->srp_tpg && t.name == srp_of) {
				if (int rc = rt->srp_tpg->add_lun(l.lun, *lu); rc != 0) {
					*why = "SRP: add LUN " + std::to_string(l.lun) + ": " +
					       std::strerror(-rc);
					return false;
				}
			}
			rt->lus.push_back(std::move(lu));
		}
		for (const std::string &a : t.acls) {
			scsi::NodeAcl acl;
			acl.initiator = a;
			tpg->add_acl(acl);
		}
		iscsi::target::TargetNode node;
		node.name = t.name;
		node.alias = t.alias;
		node.tpg = tpg.get();
		node.allow_target_reset = t.allow_target_reset;
		if (t.chap) {
			iscsi::ChapCredentials cr;
			cr.incoming = *t.chap;
			if (t.mutual_chap)
				cr.outgoing = *t.mutual_chap;
			node.chap[""] = cr;
			node.require_chap = true;
		}
		tc.targets.push_back(node);
		rt->tpgs.push_back(std::move(tpg));
	}
	if (rt->srp_tpg) {
		for (const std::string &a : c.srp.acls) {
			scsi::NodeAcl acl;
			acl.initiator = a;
			rt->srp_tpg->add_acl(acl);
		}
	}
	return true;
}

} // namespace targetd
