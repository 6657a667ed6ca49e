// SPDX-License-Identifier: MIT
// tools/ulp-targetd/config_save.cc - the running configuration written back as the TOML file
// the daemon reads (config.h's format), atomically: what `ulpctl save` does, as targetcli's
// saveconfig does for LIO.
//
// Every value is written, defaults included, so that the file says what the daemon ran with
// (a default that changes in a later version does not silently change a saved target).
//
// A library of its own (ulp_targetd_toml): it uses the Config's types and nothing of the
// daemon's running parts, so that `ulpctl import` (tools/ulpctl/import.cc) writes its
// file with this one writer instead of a second copy of the format.
#include "tools/ulp-targetd/config.h"

#include <toml++/toml.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

namespace targetd
{

using namespace ulp;

std::string portal_str(const Portal &p)
{
	return (p.host.empty()                          ? std::string("0.0.0.0")
	        : p.host.find(':') != std::string::npos ? "[" + p.host + "]"
	                                                : p.host) +
	       ":" + std::to_string(p.port);
}

namespace
{

toml::array portal_array(const std::vector<Portal> &ps)
{
	toml::array a;
	for (const Portal &p : ps)
		a.push_back(portal_str(p));
	return a;
}

toml::array string_array(const std::vector<std::string> &v)
{
	toml::array a;
	for (const std::string &s : v)
		a.push_back(s);
	return a;
}

std::string hex64(uint64_t v)
{
	char b[24];
	std::snprintf(b, sizeof(b), "0x%016llx", (unsigned long long)v);
	return b;
}

toml::table chap_table(const iscsi::ChapSecret &c)
{
	return toml::table{{"user", c.user}, {"secret", c.secret}};
}

// [[target.acl]] / [[srp.acl]]: the entries that carry more than admission, in acls' order.
toml::array acl_entries(const std::vector<std::string> &acls,
                        const std::map<std::string, AclCfg> &cfg)
{
	toml::array out;
	for (const std::string &name : acls) {
		auto it = cfg.find(name);
		if (it == cfg.end() || it->second.empty())
			continue;
		const AclCfg &a = it->second;
		toml::table e;
		e.insert("initiator", name);
		if (!a.luns.empty()) {
			toml::array luns;
			for (auto &[mapped, m] : a.luns)
				luns.push_back(toml::table{{"lun", int64_t(mapped)},
				                           {"target_lun", int64_t(m.target_lun)},
				                           {"read_only", m.read_only}});
			e.insert("luns", std::move(luns));
		}
		if (a.chap)
			e.insert("chap", chap_table(*a.chap));
		if (a.mutual_chap)
			e.insert("mutual_chap", chap_table(*a.mutual_chap));
		out.push_back(std::move(e));
	}
	return out;
}

std::string digests_word(const iscsi::OperationalPrefs &p)
{
	using iscsi::Digest;
	if (p.header_digests == std::vector<Digest>{Digest::Crc32c})
		return "crc32c";
	if (p.header_digests == std::vector<Digest>{Digest::Crc32c, Digest::None})
		return "both";
	return "none";
}

} // namespace

std::string to_toml(const Config &c)
{
	return to_toml(c, "# ulp-targetd configuration, written by `ulpctl save` (the running "
	                  "configuration).\n"
	                  "# Format: tools/ulp-targetd/config.h. Read at start (--config) and on "
	                  "SIGHUP.\n"
	                  "# Comments are not kept: each save writes the file anew. The versions "
	                  "it replaced\n"
	                  "# are in backup/ beside it (the last " +
	                      std::to_string(kConfigBackups) + ").\n");
}

std::string to_toml(const Config &c, const std::string &header)
{
	toml::table t;
	t.insert("workers", c.workers);
	if (!c.worker_cpus.empty())
		t.insert("worker_cpus", c.worker_cpus);
	t.insert("state_dir", c.state_dir);
	t.insert("portals", portal_array(c.portals));
	t.insert("iser_portals", portal_array(c.iser_portals));
	t.insert("srp_portals", portal_array(c.srp_portals));
	t.insert("rdma_device", c.rdma_device);
	if (!c.admin_socket.empty())
		t.insert("admin_socket", c.admin_socket);
	if (!c.admin_group.empty())
		t.insert("admin_group", c.admin_group);
	if (!c.admin_tcp.empty())
		t.insert("admin_tcp", c.admin_tcp);
	if (!c.metrics_http.empty())
		t.insert("metrics_http", c.metrics_http);
	if (const GatewayCfg &g = c.gateway; g.enabled()) {
		toml::table gw;
		gw.insert("name", g.name);
		gw.insert("pool", g.pool);
		for (auto [k, v] : {std::pair{"namespace", &g.nspace},
		                    {"conf", &g.conf},
		                    {"client", &g.client},
		                    {"keyring", &g.keyring}})
			if (!v->empty())
				gw.insert(k, *v);
		gw.insert("cluster", g.cluster);
		gw.insert("lease", int64_t(g.lease_s));
		gw.insert("hold_off", int64_t(g.hold_off_s));
		t.insert("gateway", std::move(gw));
	}

	toml::table iser;
	iser.insert("recv_data_segment_length", int64_t(c.iser.recv_dsl));
	iser.insert("buffer_pool", int64_t(c.iser.heap_bytes));
	if (c.iser.send_ring)
		iser.insert("send_ring", int64_t(c.iser.send_ring));
	t.insert("iser", std::move(iser));

	toml::table srp;
	if (c.srp.id_ext)
		srp.insert("id_ext", hex64(*c.srp.id_ext));
	if (c.srp.ioc_guid)
		srp.insert("ioc_guid", hex64(*c.srp.ioc_guid));
	srp.insert("srq", c.srp.srq);
	srp.insert("acls", string_array(c.srp.acls));
	if (toml::array a = acl_entries(c.srp.acls, c.srp.acl_cfg); !a.empty())
		srp.insert("acl", std::move(a));
	srp.insert("rq_size", c.srp.rq_size);
	srp.insert("srq_size", c.srp.srq_size);
	srp.insert("sq_size", c.srp.sq_size);
	srp.insert("max_it_iu_len", c.srp.max_it_iu_len);
	srp.insert("immediate_data", c.srp.immediate_data);
	srp.insert("max_channels", c.srp.max_channels);
	srp.insert("buffer_pool", int64_t(c.srp.heap_bytes));
	if (!c.srp.target.empty())
		srp.insert("target", c.srp.target);
	if (c.srp.rtpi)
		srp.insert("rtpi", int64_t(c.srp.rtpi));
	t.insert("srp", std::move(srp));

	toml::table is;
	const auto &p = c.prefs;
	is.insert("max_recv_data_segment_length", int64_t(p.max_recv_dsl));
	is.insert("max_burst_length", int64_t(p.max_burst_length));
	is.insert("first_burst_length", int64_t(p.first_burst_length));
	is.insert("immediate_data", p.immediate_data);
	is.insert("initial_r2t", p.initial_r2t);
	is.insert("max_outstanding_r2t", int64_t(p.max_outstanding_r2t));
	is.insert("digests", digests_word(p));
	is.insert("cmd_window", int64_t(c.cmd_window));
	is.insert("nop_interval", int64_t(c.nop_interval));
	is.insert("nop_timeout", int64_t(c.nop_timeout));
	is.insert("discovery", c.discovery);
	if (c.discovery_chap)
		is.insert("discovery_chap", chap_table(*c.discovery_chap));
	if (c.discovery_mutual_chap)
		is.insert("discovery_mutual_chap", chap_table(*c.discovery_mutual_chap));
	t.insert("iscsi", std::move(is));

	toml::array targets;
	for (const TargetCfg &tc : c.targets) {
		toml::table tt;
		tt.insert("name", tc.name);
		if (!tc.alias.empty())
			tt.insert("alias", tc.alias);
		tt.insert("acls", string_array(tc.acls));
		tt.insert("allow_target_reset", tc.allow_target_reset);
		if (tc.allow_no_chap)
			tt.insert("allow_no_chap", true);
		if (!tc.allowed_addresses.empty())
			tt.insert("allowed_addresses", string_array(tc.allowed_addresses));
		if (!tc.redirect.empty()) {
			tt.insert("redirect", tc.redirect);
			tt.insert("redirect_permanent", tc.redirect_permanent);
		}
		if (toml::array a = acl_entries(tc.acls, tc.acl_cfg); !a.empty())
			tt.insert("acl", std::move(a));
		if (tc.chap)
			tt.insert("chap", toml::table{{"user", tc.chap->user},
			                              {"secret", tc.chap->secret}});
		if (tc.mutual_chap)
			tt.insert("mutual_chap", toml::table{{"user", tc.mutual_chap->user},
			                                     {"secret", tc.mutual_chap->secret}});
		toml::array luns;
		for (const LunCfg &l : tc.luns) {
			toml::table lt;
			lt.insert("lun", int64_t(l.lun));
			lt.insert("backstore", l.bs.kind);
			if (!l.bs.path.empty())
				lt.insert("path", l.bs.path);
			const bool rbd = l.bs.kind == "rbd";
			if (rbd) {
				// An empty string is librados' own default: left out, as the
				// file would have it.
				const scsi::RbdConfig &r = l.bs.rbd;
				for (const auto &[k, m] : kRbdStringKeys)
					if (!(r.*m).empty())
						lt.insert(k, r.*m);
				lt.insert("create", r.create);
				lt.insert("timeout", int64_t(r.timeout_s));
				lt.insert("atomic_unit", int64_t(r.atomic_unit));
			}
			lt.insert("size", int64_t(l.bs.size));
			lt.insert("block_size", int64_t(l.bs.block_size));
			if (l.physical_block_size)
				lt.insert("physical_block_size", int64_t(l.physical_block_size));
			lt.insert("read_only", l.read_only);
			lt.insert("removable", l.removable);
			if (l.tp_soft_threshold)
				lt.insert("tp_soft_threshold", int64_t(l.tp_soft_threshold));
			if (!rbd) { // keys rbd refuses (check_lun)
				lt.insert("direct", l.bs.direct);
				lt.insert("write_cache", l.bs.write_cache);
			}
			lt.insert("queue_depth", int64_t(l.bs.queue_depth));
			// The identity as configured: what is unset stays the default (derived
			// from TARGET/LUN for serial and naa), as the file had it.
			for (const auto &[k, m] : kLuIdentityKeys)
				if (!(l.id.*m).empty())
					lt.insert(k, l.id.*m);
			if (l.id.naa)
				lt.insert("naa", naa_str(l.id.naa));
			luns.push_back(std::move(lt));
		}
		tt.insert("lun", std::move(luns));
		if (!tc.portal_groups.empty()) {
			toml::array gs;
			for (const PortalGroupCfg &g : tc.portal_groups) {
				toml::table gt;
				gt.insert("tag", int64_t(g.tag));
				if (g.rtpi)
					gt.insert("rtpi", int64_t(g.rtpi));
				toml::array ps;
				for (const Portal &po : g.portals)
					ps.push_back(portal_str(po));
				gt.insert("portals", std::move(ps));
				gs.push_back(std::move(gt));
			}
			tt.insert("portal_group", std::move(gs));
		}
		if (tc.alua.tpgs != scsi::TPGS_NONE || !tc.alua.groups.empty()) {
			toml::table at;
			at.insert("tpgs", kTpgsWords[tc.alua.tpgs & 3]);
			if (tc.alua.implicit_transition_secs)
				at.insert("implicit_transition_secs",
				          int64_t(tc.alua.implicit_transition_secs));
			toml::array gs;
			for (const AluaGroupCfg &g : tc.alua.groups) {
				toml::table gt;
				gt.insert("id", int64_t(g.id));
				gt.insert("state", alua_state_word(g.state));
				gt.insert("preferred", g.preferred);
				toml::array tags;
				for (uint16_t tag : g.portal_groups)
					tags.push_back(int64_t(tag));
				gt.insert("portal_groups", std::move(tags));
				if (g.srp)
					gt.insert("srp", true);
				gs.push_back(std::move(gt));
			}
			at.insert("group", std::move(gs));
			tt.insert("alua", std::move(at));
		}
		targets.push_back(std::move(tt));
	}
	t.insert("target", std::move(targets));

	std::ostringstream os;
	os << header << "\n" << t << "\n";
	return os.str();
}

namespace
{

// The file about to be replaced, kept as backup/NAME.YYYYmmdd-HHMMSS.uuuuuu beside it (a
// hard link: the old inode stays when the rename replaces the name), then the oldest
// dropped past kConfigBackups (targetcli keeps /etc/target/backup the same way). Nothing
// to keep: 0. A failure is the save's: it does not go on without its backup.
int keep_backup(const std::string &path, const std::string &dir, std::string *why)
{
	namespace fs = std::filesystem;
	std::error_code ec;
	if (!fs::exists(path, ec))
		return 0;
	const fs::path bdir = fs::path(dir) / "backup";
	if (::mkdir(bdir.c_str(), 0700) != 0 && errno != EEXIST) {
		const int e = errno;
		*why = "save to " + path + ": backup directory " + bdir.string() + ": " +
		       std::strerror(e);
		return -e;
	}
	const std::string base = fs::path(path).filename().string() + ".";
	timespec ts{};
	clock_gettime(CLOCK_REALTIME, &ts);
	tm utc{};
	gmtime_r(&ts.tv_sec, &utc);
	char stamp[64];
	const size_t n = strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &utc);
	snprintf(stamp + n, sizeof stamp - n, ".%06ld", long(ts.tv_nsec / 1000));
	const fs::path to = bdir / (base + stamp);
	if (::link(path.c_str(), to.c_str()) != 0) {
		const int e = errno;
		*why = "save to " + path + ": backup " + to.string() + ": " + std::strerror(e);
		return -e;
	}
	std::vector<std::string> kept;
	for (const auto &d : fs::directory_iterator(bdir, ec))
		if (d.path().filename().string().rfind(base, 0) == 0)
			kept.push_back(d.path().string());
	std::sort(kept.begin(), kept.end()); // the stamps sort by time
	for (size_t i = 0; i + kConfigBackups < kept.size(); i++)
		::unlink(kept[i].c_str());
	return 0;
}

} // namespace

int save_config(const Config &c, const std::string &path, std::string *why)
{
	return write_config_text(to_toml(c), path, Existing::Backup, why);
}

int write_config_text(const std::string &text, const std::string &path, Existing existing,
                      std::string *why)
{
	const auto slash = path.rfind('/');
	const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash + 1);
	std::string tmp = path + ".tmp.XXXXXX";
	int fd = ::mkstemp(tmp.data());
	if (fd < 0) {
		const int e = errno;
		*why = "save to " + path + ": " + std::strerror(e);
		return -e;
	}
	auto fail = [&](const char *what) {
		const int e = errno;
		*why = "save to " + path + ": " + what + ": " + std::strerror(e);
		::close(fd);
		::unlink(tmp.c_str());
		return -e;
	};
	if (::fchmod(fd, 0600) != 0)
		return fail("chmod");
	size_t off = 0;
	while (off < text.size()) {
		const ssize_t n = ::write(fd, text.data() + off, text.size() - off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return fail("write");
		off += size_t(n);
	}
	if (::fsync(fd) != 0)
		return fail("fsync");
	if (::close(fd) != 0) {
		fd = -1;
		const int e = errno;
		*why = "save to " + path + ": close: " + std::strerror(e);
		::unlink(tmp.c_str());
		return -e;
	}
	if (existing == Existing::Refuse) {
		// link(2) fails when the name exists, where a check before rename(2) could
		// miss a file made in between.
		if (::link(tmp.c_str(), path.c_str()) != 0) {
			const int e = errno;
			*why =
			    path + ": " + (e == EEXIST ? std::string("exists") : std::strerror(e));
			::unlink(tmp.c_str());
			return -e;
		}
		::unlink(tmp.c_str());
	} else if (int rc = existing == Existing::Backup ? keep_backup(path, dir, why) : 0;
	           rc != 0) {
		::unlink(tmp.c_str());
		return rc;
	} else if (::rename(tmp.c_str(), path.c_str()) != 0) {
		const int e = errno;
		*why = "save to " + path + ": rename: " + std::strerror(e);
		::unlink(tmp.c_str());
		return -e;
	}
	// The rename itself durable: the directory's entry.
	if (int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); dfd >= 0) {
		::fsync(dfd);
		::close(dfd);
	}
	return 0;
}

} // namespace targetd
