// SPDX-License-Identifier: MIT
// tools/ulp-targetd/methods.cc - ulp-targetd's JSON-RPC methods (admin/rpc.h), SPDK-style
// noun_verb names, each with its parameter table (checked before it runs) and the Daemon
// operation it calls. `ulpctl NOUN VERB` maps onto them one to one; rpc_get_methods lists
// them with their parameters.
#include "tools/ulp-targetd/daemon.h"

#include "core/log.h"
#include "ulp/version.h"

#include <unistd.h>

namespace targetd
{

using namespace ulp;
using admin::Caller;
using admin::MethodError;
using admin::ParamSpec;
using admin::ParamType;

namespace
{

constexpr uint64_t kMaxMs = 600000; // ten minutes: any bound longer is a mistake

ParamSpec target_param()
{
	return {"target", ParamType::String, true, 0, UINT64_MAX, "the target's iSCSI name"};
}

std::chrono::milliseconds ms(const json &p, const char *k, uint64_t def)
{
	return std::chrono::milliseconds(admin::param_uint(p, k, def));
}

std::optional<iscsi::ChapSecret> chap_of(const json &p, const char *user, const char *secret)
{
	const bool u = p.contains(user), s = p.contains(secret);
	if (!u && !s)
		return std::nullopt;
	if (u != s)
		throw MethodError{admin::kInvalidParams,
		                  std::string("give both \"") + user + "\" and \"" + secret + "\""};
	return iscsi::ChapSecret{admin::param_str(p, user), admin::param_str(p, secret)};
}

} // namespace

void add_methods(Daemon &d, admin::Methods &m)
{
	m.add({"rpc_get_methods",
	       "every method with its parameters",
	       {},
	       [&m](const json &, const Caller &) { return m.describe(); }});

	m.add({"version_get",
	       "the daemon's version and the commit it was built from (ulpctl --version)",
	       {},
	       [&d](const json &, const Caller &) {
		       return json{{"program", "ulp-targetd"},
		                   {"version", ULP_VERSION},
		                   {"git_commit", ULP_GIT_COMMIT},
		                   {"pid", int64_t(getpid())},
		                   {"start_time_seconds", d.start_time_seconds()}};
	       }});

	// ---- The whole picture ------------------------------------------------------------
	m.add({"config_show",
	       "portals, targets with their LUNs (backstores), ACLs and CHAP users, the SRP "
	       "target port",
	       {},
	       [&d](const json &, const Caller &) { return d.show(); }});
	m.add({"config_save",
	       "write the running configuration to the TOML file atomically (targetcli's "
	       "saveconfig)",
	       {{"path", ParamType::String, false, 0, UINT64_MAX,
	         "where (default: the file the daemon was started with)"}},
	       [&d](const json &p, const Caller &c) {
		       return d.save(admin::param_str(p, "path"), c.who);
	       }});
	m.add({"config_reload",
	       "re-read the configuration file and apply the difference (as SIGHUP)",
	       {},
	       [&d](const json &, const Caller &c) { return d.reload(c.who); }});
	m.add({"stats_get",
	       "counters the daemon keeps: logins, sessions, commands in flight, SRP and RDMA "
	       "portal counters, the admin socket's",
	       {},
	       [&d](const json &, const Caller &) { return d.stats(); }});

	// ---- Targets ----------------------------------------------------------------------
	m.add({"target_list",
	       "the targets (as config_show lists them)",
	       {},
	       [&d](const json &, const Caller &) { return d.show()["targets"]; }});
	m.add({"target_create",
	       "a new iSCSI target (no LUNs: add them with lun_create)",
	       {{"name", ParamType::String, true, 0, UINT64_MAX, "iqn./eui./naa. name"},
	        {"alias", ParamType::String},
	        {"acls", ParamType::Strings, false, 0, UINT64_MAX,
	         "initiator names allowed in (none: open)"},
	        {"allow_target_reset", ParamType::Bool},
	        {"chap_user", ParamType::String},
	        {"chap_secret", ParamType::String, false, 0, UINT64_MAX, "12 characters or more"},
	        {"mutual_user", ParamType::String},
	        {"mutual_secret", ParamType::String}},
	       [&d](const json &p, const Caller &c) -> json {
		       TargetCfg t;
		       t.name = admin::param_str(p, "name");
		       t.alias = admin::param_str(p, "alias");
		       t.acls = admin::param_strings(p, "acls");
		       t.allow_target_reset = admin::param_bool(p, "allow_target_reset", false);
		       t.chap = chap_of(p, "chap_user", "chap_secret");
		       t.mutual_chap = chap_of(p, "mutual_user", "mutual_secret");
		       d.target_create(t, c.who);
		       return {{"name", t.name}};
	       }});
	m.add({"target_delete",
	       "remove a target: its sessions are asked to log out, dropped after grace_ms, "
	       "closed within timeout_ms; then its LUNs go",
	       {{"name", ParamType::String, true},
	        {"grace_ms", ParamType::Uint, false, 0, kMaxMs, "default 5000"},
	        {"timeout_ms", ParamType::Uint, false, 0, kMaxMs, "default 15000"}},
	       [&d](const json &p, const Caller &c) {
		       return d.target_delete(admin::param_str(p, "name"), ms(p, "grace_ms", 5000),
		                              ms(p, "timeout_ms", 15000), c.who);
	       }});

	// ---- LUNs -------------------------------------------------------------------------
	m.add({"lun_list",
	       "the LUNs of a target (or of every target)",
	       {{"target", ParamType::String}},
	       [&d](const json &p, const Caller &) {
		       json out = json::array();
		       const std::string want = admin::param_str(p, "target");
		       bool found = want.empty();
		       const json shown = d.show();
		       for (const json &t : shown["targets"]) {
			       if (!want.empty() && t["name"] != want)
				       continue;
			       found = true;
			       for (json l : t["luns"]) {
				       l["target"] = t["name"];
				       out.push_back(l);
			       }
		       }
		       if (!found)
			       throw MethodError{-ENOENT, "no target " + want};
		       return out;
	       }});
	m.add({"lun_create",
	       "a new LUN on a target, with its backstore (ram, file, block, rbd, null); "
	       "sessions that see the target hear REPORTED LUNS DATA HAS CHANGED",
	       {target_param(),
	        {"lun", ParamType::Uint, true, 0, 16383},
	        {"backstore", ParamType::String, true, 0, UINT64_MAX,
	         "ram | file | block | rbd | null"},
	        {"size", ParamType::Size, false, 0, UINT64_MAX,
	         "bytes, or \"32M\" (ram, null: required; file: created or extended to it; "
	         "rbd: the image's (default), or its size to create)"},
	        {"path", ParamType::String, false, 0, UINT64_MAX, "file or block device"},
	        {"block_size", ParamType::Uint, false, 512, 65536},
	        {"physical_block_size", ParamType::Uint, false, 0, 1u << 31},
	        {"read_only", ParamType::Bool},
	        {"removable", ParamType::Bool},
	        {"direct", ParamType::Bool, false, 0, UINT64_MAX, "file, block"},
	        {"write_cache", ParamType::Bool, false, 0, UINT64_MAX, "file, block"},
	        {"queue_depth", ParamType::Uint, false, 1, 4096},
	        {"pool", ParamType::String, false, 0, UINT64_MAX, "rbd: the image's pool"},
	        {"image", ParamType::String, false, 0, UINT64_MAX, "rbd: the image"},
	        {"namespace", ParamType::String, false, 0, UINT64_MAX,
	         "rbd: a RADOS namespace (default: none)"},
	        {"conf", ParamType::String, false, 0, UINT64_MAX,
	         "rbd: ceph.conf (default: librados' search)"},
	        {"client", ParamType::String, false, 0, UINT64_MAX,
	         "rbd: the Ceph client id, without client. (default admin)"},
	        {"keyring", ParamType::String, false, 0, UINT64_MAX,
	         "rbd: the keyring (default: ceph.conf's)"},
	        {"group", ParamType::String, false, 0, UINT64_MAX,
	         "rbd: LUNs of a group share one Ceph client (default \"default\")"},
	        {"create", ParamType::Bool, false, 0, UINT64_MAX,
	         "rbd: create the image, of size bytes, when missing"},
	        {"timeout", ParamType::Uint, false, 1, 3600,
	         "rbd: seconds to connect, and for each OSD operation (default 30)"},
	        {"atomic_unit", ParamType::Size, false, 0, 1u << 30,
	         "rbd: bytes, WRITE ATOMIC's alignment and longest length (default 128K; 0 none)"},
	        {"vendor", ParamType::String, false, 0, UINT64_MAX,
	         "INQUIRY vendor, 1..8 printable ASCII (default ULP)"},
	        {"product", ParamType::String, false, 0, UINT64_MAX,
	         "INQUIRY product, 1..16 (default \"ulp \" + backstore)"},
	        {"revision", ParamType::String, false, 0, UINT64_MAX,
	         "INQUIRY revision, 1..4 (default 0001)"},
	        {"serial", ParamType::String, false, 0, UINT64_MAX,
	         "unit serial number (VPD 80h), 1..247 (default: derived from TARGET/LUN)"},
	        {"naa", ParamType::String, false, 0, UINT64_MAX,
	         "NAA designator (VPD 83h), 16 hex digits, NAA 5, 3 or 2 (default: derived "
	         "from TARGET/LUN)"}},
	       [&d](const json &p, const Caller &c) -> json {
		       LunCfg l;
		       l.lun = admin::param_uint(p, "lun", 0);
		       l.bs.kind = admin::param_str(p, "backstore");
		       // A parameter of another kind is refused even at its default value, as
		       // the --lun flag and the file refuse the key.
		       for (const auto &[k, v] : p.items())
			       if (std::string m = lun_key_misplaced(l.bs.kind, k); !m.empty())
				       throw MethodError{
				           -EINVAL, "target " + admin::param_str(p, "target") +
				                        " LUN " + std::to_string(l.lun) + ": " + m};
		       l.bs.size = admin::param_size(p, "size", 0);
		       l.bs.path = admin::param_str(p, "path");
		       l.bs.block_size = uint32_t(admin::param_uint(p, "block_size", 512));
		       l.physical_block_size =
		           uint32_t(admin::param_uint(p, "physical_block_size", 0));
		       l.read_only = admin::param_bool(p, "read_only", false);
		       l.bs.read_only = l.read_only;
		       l.removable = admin::param_bool(p, "removable", false);
		       l.bs.direct = admin::param_bool(p, "direct", true);
		       l.bs.write_cache = admin::param_bool(p, "write_cache", true);
		       l.bs.queue_depth = uint32_t(admin::param_uint(p, "queue_depth", 64));
		       scsi::RbdConfig &r = l.bs.rbd;
		       r.pool = admin::param_str(p, "pool");
		       r.image = admin::param_str(p, "image");
		       r.nspace = admin::param_str(p, "namespace");
		       r.conf = admin::param_str(p, "conf");
		       r.client = admin::param_str(p, "client");
		       r.keyring = admin::param_str(p, "keyring");
		       r.group = admin::param_str(p, "group");
		       r.create = admin::param_bool(p, "create", false);
		       r.timeout_s = uint32_t(admin::param_uint(p, "timeout", r.timeout_s));
		       r.atomic_unit = uint32_t(admin::param_size(p, "atomic_unit", r.atomic_unit));
		       const std::string t = admin::param_str(p, "target");
		       const std::string who =
		           "target " + t + " LUN " + std::to_string(l.lun) + ": ";
		       for (const auto &[k, m] : kLuIdentityKeys) {
			       if (!p.contains(k))
				       continue;
			       l.id.*m = admin::param_str(p, k);
			       if ((l.id.*m).empty())
				       throw MethodError{-EINVAL, who + k + ": empty"};
		       }
		       if (p.contains("naa")) {
			       std::string w;
			       if (!parse_naa(admin::param_str(p, "naa"), &l.id.naa, &w))
				       throw MethodError{-EINVAL, who + "naa: " + w};
		       }
		       d.lun_create(t, l, c.who);
		       return {{"target", t}, {"lun", l.lun}};
	       }});
	m.add({"lun_delete",
	       "remove a LUN: new commands to it fail at once, those in flight complete within "
	       "grace_ms or are aborted (TASK ABORTED), bounded by timeout_ms",
	       {target_param(),
	        {"lun", ParamType::Uint, true, 0, 16383},
	        {"grace_ms", ParamType::Uint, false, 0, kMaxMs, "default 5000"},
	        {"timeout_ms", ParamType::Uint, false, 0, kMaxMs, "default 10000"}},
	       [&d](const json &p, const Caller &c) {
		       return d.lun_delete(admin::param_str(p, "target"),
		                           admin::param_uint(p, "lun", 0), ms(p, "grace_ms", 5000),
		                           ms(p, "timeout_ms", 10000), c.who);
	       }});
	m.add({"lun_resize",
	       "set a LUN's capacity (ram, null: its size; file: the file is grown or cut; rbd: "
	       "the image is resized); initiators hear CAPACITY DATA HAS CHANGED",
	       {target_param(),
	        {"lun", ParamType::Uint, true, 0, 16383},
	        {"size", ParamType::Size, true}},
	       [&d](const json &p, const Caller &c) {
		       return d.lun_resize(admin::param_str(p, "target"),
		                           admin::param_uint(p, "lun", 0),
		                           admin::param_size(p, "size", 0), c.who);
	       }});
	m.add({"lun_rescan",
	       "re-read a LUN's storage size (a file's length, a block device's or an rbd "
	       "image's size) and apply it",
	       {target_param(), {"lun", ParamType::Uint, false, 0, 16383, "default: every LUN"}},
	       [&d](const json &p, const Caller &) {
		       return d.lun_rescan(
		           admin::param_str(p, "target"),
		           p.contains("lun") ? int64_t(admin::param_uint(p, "lun", 0)) : -1);
	       }});

	// ---- ACLs and CHAP ------------------------------------------------------------------
	// One key of the target p names, as `show` gives it.
	auto shown_of_target = [&d](const json &p, const char *key) -> json {
		const std::string t = admin::param_str(p, "target");
		const json shown = d.show();
		for (const json &x : shown["targets"])
			if (x["name"] == t)
				return x[key];
		throw MethodError{-ENOENT, "no target " + t};
	};
	m.add({"acl_list",
	       "the initiators a target admits (empty: open)",
	       {target_param()},
	       [shown_of_target](const json &p, const Caller &) {
		       return shown_of_target(p, "acls");
	       }});
	m.add({"acl_map_list",
	       "a target's per-initiator LUN maps (and CHAP users) by initiator",
	       {target_param()},
	       [shown_of_target](const json &p, const Caller &) {
		       return shown_of_target(p, "acl_maps");
	       }});
	m.add({"acl_add",
	       "admit an initiator (the first ACL closes an open target to the others; new "
	       "logins only)",
	       {target_param(), {"initiator", ParamType::String, true}},
	       [&d](const json &p, const Caller &c) -> json {
		       d.acl_add(admin::param_str(p, "target"), admin::param_str(p, "initiator"),
		                 c.who);
		       return true;
	       }});
	m.add({"acl_delete",
	       "stop admitting an initiator (its sessions stay; the last ACL gone: open)",
	       {target_param(), {"initiator", ParamType::String, true}},
	       [&d](const json &p, const Caller &c) -> json {
		       d.acl_delete(admin::param_str(p, "target"), admin::param_str(p, "initiator"),
		                    c.who);
		       return true;
	       }});
	// An ACL entry's own LUN map (scsi::NodeAcl): what the initiator sees, numbered as the
	// administrator says, each optionally read-only.
	const ParamSpec map_params[] = {
	    {"initiator", ParamType::String, true},
	    {"lun", ParamType::Uint, true, 0, 16383, "the LUN the initiator sees"},
	    {"target_lun", ParamType::Uint, false, 0, 16383, "the target's LUN (default: lun)"},
	    {"read_only", ParamType::Bool, false, 0, UINT64_MAX, "writes refused for it"}};
	auto mapped_of = [](const json &p) {
		MappedLun m;
		m.target_lun = admin::param_uint(p, "target_lun", admin::param_uint(p, "lun", 0));
		m.read_only = admin::param_bool(p, "read_only", false);
		return m;
	};
	m.add({"acl_map",
	       "map a target's LUN for one initiator, as the LUN it sees (its sessions are told "
	       "at once); an initiator with a map sees only what it maps",
	       {target_param(), map_params[0], map_params[1], map_params[2], map_params[3]},
	       [&d, mapped_of](const json &p, const Caller &c) -> json {
		       d.acl_map(false, admin::param_str(p, "target"),
		                 admin::param_str(p, "initiator"), admin::param_uint(p, "lun", 0),
		                 mapped_of(p), c.who);
		       return true;
	       }});
	m.add({"acl_unmap",
	       "remove a LUN from one initiator's map (not its last one: an empty map would be "
	       "every LUN)",
	       {target_param(), map_params[0], map_params[1]},
	       [&d](const json &p, const Caller &c) -> json {
		       d.acl_map(false, admin::param_str(p, "target"),
		                 admin::param_str(p, "initiator"), admin::param_uint(p, "lun", 0),
		                 std::nullopt, c.who);
		       return true;
	       }});
	m.add({"srp_acl_map",
	       "map a LUN of the target SRP exports for one SRP initiator, as acl_map",
	       {map_params[0], map_params[1], map_params[2], map_params[3]},
	       [&d, mapped_of](const json &p, const Caller &c) -> json {
		       d.acl_map(true, "", admin::param_str(p, "initiator"),
		                 admin::param_uint(p, "lun", 0), mapped_of(p), c.who);
		       return true;
	       }});
	m.add({"srp_acl_unmap",
	       "remove a LUN from one SRP initiator's map, as acl_unmap",
	       {map_params[0], map_params[1]},
	       [&d](const json &p, const Caller &c) -> json {
		       d.acl_map(true, "", admin::param_str(p, "initiator"),
		                 admin::param_uint(p, "lun", 0), std::nullopt, c.who);
		       return true;
	       }});
	m.add({"chap_set",
	       "require CHAP (and mutual CHAP) for new logins to a target",
	       {target_param(),
	        {"user", ParamType::String, true},
	        {"secret", ParamType::String, true, 0, UINT64_MAX, "12 characters or more"},
	        {"mutual_user", ParamType::String},
	        {"mutual_secret", ParamType::String}},
	       [&d](const json &p, const Caller &c) -> json {
		       d.chap_set(admin::param_str(p, "target"), chap_of(p, "user", "secret"),
		                  chap_of(p, "mutual_user", "mutual_secret"), c.who);
		       return true;
	       }});
	m.add({"chap_clear",
	       "no CHAP for new logins to a target",
	       {target_param()},
	       [&d](const json &p, const Caller &c) -> json {
		       d.chap_set(admin::param_str(p, "target"), std::nullopt, std::nullopt, c.who);
		       return true;
	       }});
	m.add({"target_redirect",
	       "answer new logins to a target with where it moved (RFC 7143 11.13.5: status "
	       "0101h, or 0102h when permanent, and TargetAddress); no address: serve them "
	       "here again",
	       {target_param(),
	        {"address", ParamType::String, false, 0, UINT64_MAX,
	         "\"host:port\" (IPv6 \"[addr]:port\"); absent or \"\": no redirect"},
	        {"permanent", ParamType::Bool, false, 0, UINT64_MAX,
	         "0102h (moved permanently) instead of 0101h"}},
	       [&d](const json &p, const Caller &c) -> json {
		       d.target_redirect(admin::param_str(p, "target"),
		                         admin::param_str(p, "address"),
		                         admin::param_bool(p, "permanent", false), c.who);
		       return true;
	       }});
	m.add({"srp_acl_add",
	       "admit an SRP initiator: \"0x\" + 32 hex digits of its port id, or its IP",
	       {{"initiator", ParamType::String, true}},
	       [&d](const json &p, const Caller &c) -> json {
		       d.srp_acl_add(admin::param_str(p, "initiator"), c.who);
		       return true;
	       }});
	m.add({"srp_acl_delete",
	       "stop admitting an SRP initiator (its sessions stay)",
	       {{"initiator", ParamType::String, true}},
	       [&d](const json &p, const Caller &c) -> json {
		       d.srp_acl_delete(admin::param_str(p, "initiator"), c.who);
		       return true;
	       }});

	// ---- Portals ------------------------------------------------------------------------
	m.add({"portal_list", "the portals listened on", {}, [&d](const json &, const Caller &) {
		       return d.show()["portals"];
	       }});
	m.add({"portal_create",
	       "listen on a new portal",
	       {{"transport", ParamType::String, true, 0, UINT64_MAX, "tcp | iser | srp"},
	        {"address", ParamType::String, true, 0, UINT64_MAX,
	         "HOST:PORT (IPv6 as [::1]:3260; SRP needs a port)"}},
	       [&d](const json &p, const Caller &c) {
		       return d.portal_create(admin::param_str(p, "transport"),
		                              admin::param_str(p, "address"), c.who);
	       }});
	m.add({"portal_delete",
	       "stop listening on a portal (the connections it accepted stay)",
	       {{"transport", ParamType::String, true}, {"address", ParamType::String, true}},
	       [&d](const json &p, const Caller &c) -> json {
		       d.portal_delete(admin::param_str(p, "transport"),
		                       admin::param_str(p, "address"), c.who);
		       return true;
	       }});

	// ---- ALUA ----------------------------------------------------------------------------
	m.add({"alua_show",
	       "each ALUA target's target port groups per LUN: state, PREF, status code, ports",
	       {{"target", ParamType::String, false, 0, UINT64_MAX, "default: every target"}},
	       [&d](const json &p, const Caller &) {
		       return d.alua_show(p.contains("target") ? admin::param_str(p, "target")
		                                               : std::string());
	       }});
	m.add({"alua_set",
	       "set a target port group's access state on every LUN of a target (implicit "
	       "transition: ASYMMETRIC ACCESS STATE CHANGED to every I_T nexus)",
	       {target_param(),
	        {"group", ParamType::Uint, true, 0, 65535, "TARGET PORT GROUP id"},
	        {"state", ParamType::String, true, 0, UINT64_MAX,
	         "active-optimized | active-non-optimized | standby | unavailable | offline | "
	         "transitioning"}},
	       [&d](const json &p, const Caller &c) -> json {
		       d.alua_set(admin::param_str(p, "target"),
		                  uint16_t(admin::param_uint(p, "group", 0)),
		                  admin::param_str(p, "state"), c.who);
		       return true;
	       }});

	// ---- Gateway ------------------------------------------------------------------------
	m.add({"gateway_show",
	       "this gateway of the Ceph cluster: its target port group, its groups of LUs "
	       "(owner state, ports' ALUA state, owner, lease left) and the other gateways",
	       {},
	       [&d](const json &, const Caller &) { return d.gateway_show(); }});
	m.add({"gateway_drain",
	       "a planned move: every group this gateway owns goes to another gateway (its "
	       "ports transitioning, image locks released, lease let go; nobody fenced)",
	       {{"hold_off", ParamType::Uint, false, 0, 3600,
	         "seconds before this gateway acquires again; default: gateway.hold_off"}},
	       [&d](const json &p, const Caller &c) {
		       return d.gateway_drain(
		           std::chrono::seconds(admin::param_uint(p, "hold_off", 0)), c.who);
	       }});

	// ---- Sessions -----------------------------------------------------------------------
	m.add({"session_list",
	       "sessions with their initiator, transport, portal, channels, negotiated "
	       "parameters and commands in flight",
	       {},
	       [&d](const json &, const Caller &) { return d.session_list(); }});
	m.add({"session_logout",
	       "ask a session to log out (iSCSI: Async Message; SRP: SRP_T_LOGOUT), drop it if it "
	       "has not within grace_ms",
	       {{"id", ParamType::String, true, 0, UINT64_MAX, "iscsi:TSIH or srp:PORTID"},
	        {"grace_ms", ParamType::Uint, false, 0, kMaxMs, "default 5000"}},
	       [&d](const json &p, const Caller &c) {
		       return d.session_logout(admin::param_str(p, "id"), ms(p, "grace_ms", 5000),
		                               c.who);
	       }});
	m.add({"session_drop",
	       "close a session's connections now, without a logout",
	       {{"id", ParamType::String, true, 0, UINT64_MAX, "iscsi:TSIH or srp:PORTID"}},
	       [&d](const json &p, const Caller &c) -> json {
		       d.session_drop(admin::param_str(p, "id"), c.who);
		       return true;
	       }});

	// ---- Logging ------------------------------------------------------------------------
	m.add({"log_get_level", "the log level", {}, [](const json &, const Caller &) -> json {
		       return log::level_name(log::level());
	       }});
	m.add({"log_set_level",
	       "change the log level now",
	       {{"level", ParamType::String, true, 0, UINT64_MAX,
	         "trace | debug | info | warning | error | critical | off"}},
	       [](const json &p, const Caller &c) -> json {
		       log::Level l;
		       const std::string s = admin::param_str(p, "level");
		       if (!log::parse_level(s, &l))
			       throw MethodError{admin::kInvalidParams, "no log level " + s};
		       const log::Level was = log::level();
		       log::set_level(l);
		       ULP_LOG(Warn, Tool, "admin ({}): log level {} -> {}", c.who,
		               log::level_name(was), log::level_name(l));
		       return log::level_name(l);
	       }});
}

} // namespace targetd
