// SPDX-License-Identifier: MIT
// tools/ulpctl/import_targetcli.cc - LIO's saved configuration (targetcli's saveconfig.json,
// rtslib-fb's dump: "storage_objects", "targets", "fabric_modules") into ulp-targetd's.
//
// What is carried over, and why so:
//   storage objects: fileio -> file (dev, size; a dev that is a block device -> block),
//     block/iblock -> block (readonly), ramdisk/rd_mcp -> ram (size; nullio -> null),
//     user (tcmu) with config "rbd/POOL/IMAGE[;conf=F][;id=C][;osd_op_timeout=S]" -> rbd
//     (conf, client, timeout; size left to the image's). Attributes: block_size,
//     emulate_write_cache (else write_back) -> write_cache, queue_depth.
//   An object is one LUN's: ulp-targetd's LUNs do not share a backstore (a block device is
//     claimed by one), so a second LUN of the same object is listed, not made.
//   iscsi targets: the first enabled TPG of each (ulp-targetd has one port group per target)
//     gives the LUNs (index -> lun), the ACLs (node_wwn), CHAP (when the TPG's
//     authentication attribute is 1: the TPG's own credentials in demo mode, else the ACLs',
//     which must be one account: ulp-targetd has one per target), TargetAlias -> alias,
//     demo_mode_write_protect (demo mode) and prod_mode_write_protect -> read_only LUNs;
//     portals -> portals (every target's, together: ulp-targetd serves every target on
//     every portal), "iser": true -> iser_portals too (LIO then listens on both).
//   Negotiation parameters and default_cmdsn_depth -> [iscsi], when every target agrees
//     (import.cc's GlobalParams). rtslib writes every parameter and attribute, set or not:
//     a value equal to LIO's default is taken as not set, so ulp-targetd's own default
//     applies (LIO's defaults are RFC 7143's, ulp-targetd's a storage target's).
//   srpt targets: the first one's LUNs -> a [[target]] named from its WWN, exported by
//     [srp] (target), its node ACLs -> [srp] acls (initiator port ids, "0x" + 32 hex
//     digits), srp_sq_size -> sq_size.
// Listed, not carried over: every other fabric; TPGs past the first; pscsi and other tcmu
// handlers; storage objects' WWNs (ulp-targetd makes its own unit serial); ALUA groups
// other than the default; per-initiator mapped LUNs that differ from the TPG's (another
// number, write protection for some initiators, a LUN hidden from one); per-ACL
// credentials past the first account; IP-less facts ulp-targetd cannot keep (disabled
// TPGs, ACL mode without ACLs, discovery authentication); and any attribute or parameter
// set to other than LIO's default that ulp-targetd has no key for, or any key this importer
// does not know. Not listed: what LIO computes from the device itself (hw_*,
// optimal_sectors, the UNMAP and WRITE SAME limits, emulate_tpu/tpws), which ulp-targetd
// computes from the backstore; a LUN's alias (rtslib's name of the configfs link); aio (a
// file LUN always runs asynchronously); the default ALUA group.
#include "tools/ulpctl/import_targetcli.h"
#include "admin/rpc.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <set>

namespace ulpctl::import
{
namespace
{

using namespace lio;

std::string line_col(const std::string &text, size_t byte)
{
	size_t line = 1, col = 1;
	for (size_t i = 0; i < byte && i < text.size(); i++) {
		if (text[i] == '\n') {
			line++;
			col = 1;
		} else {
			col++;
		}
	}
	return std::to_string(line) + ":" + std::to_string(col);
}

const std::map<std::string, std::string> kTpgAttrDefaults = {
    {"cache_dynamic_acls", "*"}, // only what demo mode remembers: no setting
    {"default_erl", "0"},
    {"demo_mode_discovery", "1"},
    {"fabric_prot_type", "0"},
    {"login_keys_workaround", "1"},
    {"login_timeout", "15"},
    {"netif_timeout", "2"},
    {"t10_pi", "0"},
    {"tpg_enabled_sendtargets", "1"},
    {"srp_max_rdma_size", "65536"},
    {"srp_max_rsp_size", "256"}};
const std::map<std::string, std::string> kParamDefaults = {
    {"AuthMethod", "CHAP,None"},
    {"DataPDUInOrder", "Yes"},
    {"DataSequenceInOrder", "Yes"},
    {"DefaultTime2Retain", "20"},
    {"DefaultTime2Wait", "2"},
    {"ErrorRecoveryLevel", "0"},
    {"IFMarkInt", "*"},
    {"OFMarkInt", "*"}, // unused without markers
    {"IFMarker", "No"},
    {"OFMarker", "No"},
    {"MaxConnections", "1"},
    {"MaxXmitDataSegmentLength", "262144"},
    {"TargetAlias", "LIO Target"},
    {"FirstBurstLength", "65536"},
    {"MaxBurstLength", "262144"},
    {"MaxRecvDataSegmentLength", "8192"},
    {"ImmediateData", "Yes"},
    {"InitialR2T", "Yes"},
    {"MaxOutstandingR2T", "1"},
    {"HeaderDigest", "CRC32C,None"},
    {"DataDigest", "CRC32C,None"}};
const std::map<std::string, std::string> kAclAttrDefaults = {{"dataout_timeout", "3"},
                                                             {"dataout_timeout_retries", "5"},
                                                             {"default_erl", "0"},
                                                             {"nopin_response_timeout", "30"},
                                                             {"nopin_timeout", "15"},
                                                             {"random_datain_pdu_offsets", "0"},
                                                             {"random_datain_seq_offsets", "0"},
                                                             {"random_r2t_offsets", "0"}};

// The initiator port id ib_srpt names an SRP ACL by ("0x" and 32 hex digits, "0x"
// optional, or as a GID: 8 groups of 4 hex digits), as [srp] acls has it: "" when neither.
std::string srp_port_id(const std::string &s)
{
	std::string h;
	const bool gid = std::count(s.begin(), s.end(), ':') == 7;
	for (size_t i = s.rfind("0x", 0) == 0 ? 2 : 0; i < s.size(); i++) {
		if (gid && s[i] == ':')
			continue;
		if (!std::isxdigit(static_cast<unsigned char>(s[i])))
			return "";
		h += char(std::tolower(static_cast<unsigned char>(s[i])));
	}
	return h.size() == 32 ? "0x" + h : "";
}

struct Importer {
	Reader &rd;
	Result *r;
	std::map<std::string, StorageObject> &sos;
	GlobalParams gp;
	std::vector<std::pair<std::string, std::set<std::string>>> target_portals;
	bool srp_taken = false;

	bool tpg(const json &tpg, const std::string &path, const std::string &wwn,
	         const std::string &fabric, targetd::TargetCfg *t);
	bool luns(const json &tpg, const std::string &path, const std::string &where,
	          targetd::TargetCfg *t);
};

bool Importer::luns(const json &tpg, const std::string &path, const std::string &where,
                    targetd::TargetCfg *t)
{
	const json *ls = nullptr;
	if (!rd.arr(tpg, "luns", path, &ls, kMaxLunsPerTarget))
		return false;
	for (size_t i = 0; i < ls->size(); i++) {
		const json &l = (*ls)[i];
		const std::string lp = path + ".luns[" + std::to_string(i) + "]";
		uint64_t index = 0;
		std::string so, alua;
		if (!rd.obj(l, lp) || !rd.u64(l, "index", lp, &index) ||
		    !rd.str(l, "storage_object", lp, &so) ||
		    !rd.str(l, "alua_tg_pt_gp_name", lp, &alua))
			return false;
		const std::string lw = where + " LUN " + std::to_string(index);
		rd.unknown(l, lw, {"index", "storage_object", "alias", "alua_tg_pt_gp_name"});
		// "/backstores/PLUGIN/NAME"
		const size_t a = so.find('/', 1), b = so.find('/', a == so.npos ? a : a + 1);
		const std::string key =
		    so.rfind("/backstores/", 0) == 0 && b != so.npos
		        ? canonical_plugin(so.substr(a + 1, b - a - 1)) + "/" + so.substr(b + 1)
		        : "";
		auto it = sos.find(key);
		if (it == sos.end()) {
			r->skip(lw, "storage_object " + so, "no such storage object in the file");
			continue;
		}
		if (!it->second.usable)
			continue; // listed with the object
		if (index > 16383) {
			r->skip(lw, "index " + std::to_string(index),
			        "ulp-targetd's LUNs go to 16383");
			continue;
		}
		if (!it->second.used_by.empty()) {
			r->skip(lw, "storage_object " + so,
			        "already " + it->second.used_by +
			            "'s: ulp-targetd's LUNs do not share a backstore");
			continue;
		}
		if (!alua.empty() && alua != "default_tg_pt_gp")
			r->skip(lw, "alua_tg_pt_gp_name " + alua, "ulp-targetd has no ALUA groups");
		targetd::LunCfg lc = it->second.lun;
		lc.lun = index;
		if (std::any_of(t->luns.begin(), t->luns.end(),
		                [&](const targetd::LunCfg &o) { return o.lun == index; }))
			return rd.bad(lp + ".index", "the same LUN twice in a TPG");
		it->second.used_by = lw;
		t->luns.push_back(lc);
	}
	return true;
}

struct Acl {
	std::string name, user, secret, muser, msecret, where;
	std::vector<std::pair<uint64_t, std::pair<uint64_t, bool>>> mapped; // index, tpg_lun, wp
};

bool Importer::tpg(const json &tpg, const std::string &path, const std::string &wwn,
                   const std::string &fabric, targetd::TargetCfg *t)
{
	const bool srp = fabric == "srpt";
	const std::string where = (srp ? "srpt target " : "target ") + wwn;
	rd.unknown(tpg, where,
	           {"tag", "enable", "luns", "portals", "node_acls", "attributes", "parameters",
	            "chap_userid", "chap_password", "chap_mutual_userid", "chap_mutual_password"});
	std::map<std::string, std::string> attrs, params;
	for (const char *k : {"attributes", "parameters"}) {
		auto it = tpg.find(k);
		if (it == tpg.end() || it->is_null())
			continue;
		if (!it->is_object())
			return rd.bad(path + "." + k, "must be an object");
		for (auto &[n, v] : it->items())
			(k[0] == 'a' ? attrs : params)[n] = scalar(v);
	}
	auto attr = [&](const char *k, const char *def) {
		auto it = attrs.find(k);
		return it == attrs.end() ? std::string(def) : it->second;
	};
	if (!luns(tpg, path, where, t))
		return false;

	// Portals: every target's on every portal in ulp-targetd.
	const json *ps = nullptr;
	if (!rd.arr(tpg, "portals", path, &ps, 1024))
		return false;
	std::set<std::string> mine;
	for (size_t i = 0; i < ps->size(); i++) {
		const json &p = (*ps)[i];
		const std::string pp = path + ".portals[" + std::to_string(i) + "]";
		std::string ip;
		uint64_t port = 3260;
		bool iser = false, offload = false;
		if (!rd.obj(p, pp) || !rd.str(p, "ip_address", pp, &ip) ||
		    !rd.u64(p, "port", pp, &port) || !rd.boolean(p, "iser", pp, &iser) ||
		    !rd.boolean(p, "offload", pp, &offload))
			return false;
		// rtslib writes an IPv6 address bare or in brackets.
		if (ip.size() > 2 && ip.front() == '[' && ip.back() == ']')
			ip = ip.substr(1, ip.size() - 2);
		unsigned char bin[16];
		const bool v6 = ip.find(':') != ip.npos;
		const std::string addr = (v6 ? "[" + ip + "]" : ip) + ":" + std::to_string(port);
		targetd::Portal po{ip == "0.0.0.0" ? "" : ip, uint16_t(port)};
		if (port > 65535 || inet_pton(v6 ? AF_INET6 : AF_INET, ip.c_str(), bin) != 1) {
			r->skip(where, "portal " + addr,
			        "not an address ulp-targetd can listen on");
			continue;
		}
		mine.insert(addr);
		auto add = [&](std::vector<targetd::Portal> *v) {
			if (std::none_of(v->begin(), v->end(), [&](const targetd::Portal &o) {
				    return o.host == po.host && o.port == po.port;
			    }))
				v->push_back(po);
		};
		add(&r->config.portals);
		if (iser)
			add(&r->config.iser_portals);
		if (offload)
			r->skip(where, "portal " + addr + " offload true",
			        "ulp-targetd has no iSCSI offload");
	}
	if (!srp)
		target_portals.push_back({wwn, mine});

	// Attributes ulp-targetd takes, or that change what is carried.
	const bool demo = attr("generate_node_acls", "0") == "1";
	const bool auth = attr("authentication", "0") == "1" || params["AuthMethod"] == "CHAP";
	if ((demo && attr("demo_mode_write_protect", "1") == "1") ||
	    (!demo && attr("prod_mode_write_protect", "0") == "1"))
		for (targetd::LunCfg &l : t->luns)
			l.read_only = l.bs.read_only = true;
	if (srp) {
		if (std::string v = attr("srp_sq_size", "4096"); v != "4096") {
			uint64_t n = 0;
			if (v.size() < 7 && std::all_of(v.begin(), v.end(), ::isdigit) &&
			    (n = std::stoull(v)) >= 16 && n <= 65536)
				r->config.srp.sq_size = uint32_t(n);
			else
				r->skip(where, "srp_sq_size " + v,
				        "ulp-targetd's sq_size is 16 to 65536");
		}
	} else {
		gp.record(wwn, "cmd_window",
		          attr("default_cmdsn_depth", "64") == "64"
		              ? ""
		              : attr("default_cmdsn_depth", ""));
	}
	for (const auto &[k, v] : attrs) {
		if (k == "generate_node_acls" || k == "authentication" ||
		    k == "demo_mode_write_protect" || k == "prod_mode_write_protect" ||
		    k == "default_cmdsn_depth" || k == "srp_sq_size" ||
		    is_default(kTpgAttrDefaults, k, v))
			continue;
		r->skip(where, "attribute " + k + " " + v,
		        kTpgAttrDefaults.count(k) ? "ulp-targetd has no such setting"
		                                  : "not an attribute this importer knows");
	}
	// Parameters: the negotiation ones are [iscsi]'s, for every target.
	const std::string hd =
	    params.count("HeaderDigest") ? params["HeaderDigest"] : "CRC32C,None";
	const std::string dd = params.count("DataDigest") ? params["DataDigest"] : "CRC32C,None";
	for (const auto &[k, v] : params) {
		if (k == "TargetAlias") {
			if (v != "LIO Target")
				t->alias = v;
		} else if (k == "MaxRecvDataSegmentLength" || k == "MaxBurstLength" ||
		           k == "FirstBurstLength" || k == "ImmediateData" || k == "InitialR2T" ||
		           k == "MaxOutstandingR2T") {
			gp.record(wwn, k, is_default(kParamDefaults, k, v) ? "" : v);
		} else if (k == "HeaderDigest" || k == "DataDigest" || k == "AuthMethod") {
		} else if (!is_default(kParamDefaults, k, v)) {
			r->skip(where, "parameter " + k + " " + v,
			        kParamDefaults.count(k) ? "ulp-targetd has no such setting"
			                                : "not a parameter this importer knows");
		}
	}
	if (hd != dd)
		r->skip(where, "HeaderDigest " + hd + ", DataDigest " + dd,
		        "ulp-targetd's digests setting is both's");
	else if (!srp)
		gp.record(wwn, "digests",
		          hd == "CRC32C,None" ? ""
		          : hd == "CRC32C"    ? "crc32c"
		          : hd == "None"      ? "none"
		                              : hd);
	if (const std::string &m = params["AuthMethod"];
	    !m.empty() && m != "CHAP,None" && m != "CHAP" && m != "None" && m != "None,CHAP")
		r->skip(where, "AuthMethod " + m, "ulp-targetd has CHAP or none");

	// Node ACLs.
	const json *as = nullptr;
	if (!rd.arr(tpg, "node_acls", path, &as, kMaxAclsPerTarget))
		return false;
	std::vector<Acl> acls;
	for (size_t i = 0; i < as->size(); i++) {
		const json &a = (*as)[i];
		const std::string ap = path + ".node_acls[" + std::to_string(i) + "]";
		Acl acl;
		if (!rd.obj(a, ap) || !rd.str(a, "node_wwn", ap, &acl.name) ||
		    !rd.str(a, "chap_userid", ap, &acl.user) ||
		    !rd.str(a, "chap_password", ap, &acl.secret) ||
		    !rd.str(a, "chap_mutual_userid", ap, &acl.muser) ||
		    !rd.str(a, "chap_mutual_password", ap, &acl.msecret))
			return false;
		acl.where = where + " ACL " + acl.name;
		rd.unknown(a, acl.where,
		           {"node_wwn", "mapped_luns", "attributes", "tag", "chap_userid",
		            "chap_password", "chap_mutual_userid", "chap_mutual_password"});
		if (auto t2 = a.find("tag"); t2 != a.end() && !t2->is_null())
			r->skip(acl.where, "tag " + scalar(*t2), "ulp-targetd has no ACL groups");
		if (auto at = a.find("attributes"); at != a.end() && at->is_object())
			for (auto &[k, v] : at->items())
				if (!is_default(kAclAttrDefaults, k, scalar(v)))
					r->skip(acl.where, "attribute " + k + " " + scalar(v),
					        "ulp-targetd has no per-initiator settings");
		const json *ms = nullptr;
		if (!rd.arr(a, "mapped_luns", ap, &ms, kMaxLunsPerTarget))
			return false;
		for (size_t j = 0; j < ms->size(); j++) {
			const json &m = (*ms)[j];
			const std::string mp = ap + ".mapped_luns[" + std::to_string(j) + "]";
			uint64_t index = 0, tpg_lun = 0;
			bool wp = false;
			if (!rd.obj(m, mp) || !rd.u64(m, "index", mp, &index) ||
			    !rd.u64(m, "tpg_lun", mp, &tpg_lun) ||
			    !rd.boolean(m, "write_protect", mp, &wp))
				return false;
			acl.mapped.push_back({index, {tpg_lun, wp}});
		}
		if (srp) {
			std::string id = srp_port_id(acl.name);
			if (id.empty())
				r->skip(acl.where, "node_wwn " + acl.name,
				        "not an SRP initiator port id (0x and 32 hex digits)");
			else
				r->config.srp.acls.push_back(id);
		} else if (!iscsi_name_ok(acl.name)) {
			r->skip(acl.where, "node_wwn " + acl.name, "not a valid iSCSI name");
			continue;
		} else {
			t->acls.push_back(acl.name);
		}
		acls.push_back(std::move(acl));
	}
	if (!demo && acls.empty())
		r->skip(where, "generate_node_acls 0 with no ACL",
		        "LIO admits no initiator; ulp-targetd's empty acls admit every one: add "
		        "acls before starting it");
	if (demo && !acls.empty())
		r->skip(where, "generate_node_acls 1",
		        "LIO admits every initiator; with the ACLs carried over ulp-targetd "
		        "admits only those");

	// Mapped LUNs: ulp-targetd shows an admitted initiator every LUN at its number.
	for (Acl &a : acls) {
		for (const targetd::LunCfg &l : t->luns) {
			auto m = std::find_if(a.mapped.begin(), a.mapped.end(), [&](const auto &x) {
				return x.second.first == l.lun;
			});
			if (m == a.mapped.end())
				r->skip(a.where, "no mapped LUN for LUN " + std::to_string(l.lun),
				        "ulp-targetd shows every admitted initiator every LUN");
			else if (m->first != l.lun)
				r->skip(a.where,
				        "mapped LUN " + std::to_string(m->first) + " -> LUN " +
				            std::to_string(l.lun),
				        "ulp-targetd has no per-initiator LUN numbers: it is LUN " +
				            std::to_string(l.lun));
		}
	}
	for (targetd::LunCfg &l : t->luns) {
		size_t wp = 0, seen = 0;
		for (const Acl &a : acls)
			for (const auto &m : a.mapped)
				if (m.second.first == l.lun) {
					seen++;
					wp += m.second.second;
				}
		if (wp && wp == seen && seen == acls.size())
			l.read_only = l.bs.read_only = true; // write protected for everyone
		else if (wp)
			r->skip(where + " LUN " + std::to_string(l.lun),
			        "write_protect for some ACLs",
			        "ulp-targetd has no per-initiator write protection");
	}
	if (srp)
		return true;

	// CHAP: one account per target in ulp-targetd.
	std::string tu, ts, tmu, tms;
	for (auto [k, out] : {std::pair{"chap_userid", &tu},
	                      {"chap_password", &ts},
	                      {"chap_mutual_userid", &tmu},
	                      {"chap_mutual_password", &tms}})
		if (!rd.str(tpg, k, path, out))
			return false;
	struct Account {
		std::string user, secret, muser, msecret, where;
	};
	std::vector<Account> accounts;
	if (demo && !tu.empty())
		accounts.push_back({tu, ts, tmu, tms, where});
	if (!demo)
		for (const Acl &a : acls)
			accounts.push_back({a.user, a.secret, a.muser, a.msecret, a.where});
	const bool any = std::any_of(accounts.begin(), accounts.end(),
	                             [](const Account &a) { return !a.user.empty(); });
	if (!auth) {
		for (const Account &a : accounts)
			if (!a.user.empty())
				r->skip(a.where, "chap_userid " + a.user,
				        "LIO does not require CHAP here (authentication 0), and "
				        "ulp-targetd's chap would");
		return true;
	}
	if (!any) {
		r->skip(where, "authentication 1", "no CHAP account to require");
		return true;
	}
	const Account &first = *std::find_if(accounts.begin(), accounts.end(),
	                                     [](const Account &a) { return !a.user.empty(); });
	std::string w;
	if (!chap_ok(first.user, first.secret, &w)) {
		r->skip(first.where, "chap_userid " + first.user, w + "; the target has no CHAP");
		return true;
	}
	t->chap = ulp::iscsi::ChapSecret{first.user, first.secret};
	if (!first.muser.empty()) {
		if (chap_ok(first.muser, first.msecret, &w))
			t->mutual_chap = ulp::iscsi::ChapSecret{first.muser, first.msecret};
		else
			r->skip(first.where, "chap_mutual_userid " + first.muser, w);
	}
	for (const Account &a : accounts)
		if (&a != &first && (a.user != first.user || a.secret != first.secret ||
		                     a.muser != first.muser || a.msecret != first.msecret))
			r->skip(a.where, "chap_userid " + (a.user.empty() ? "(none)" : a.user),
			        "ulp-targetd has one CHAP account per target: this initiator must "
			        "use " +
			            first.user + "'s");
	return true;
}

bool import_root(Reader &rd, const json &root, Result *r)
{
	rd.unknown(root, "saveconfig.json", {"storage_objects", "targets", "fabric_modules"});
	std::map<std::string, StorageObject> sos;
	const json *list = nullptr;
	if (!rd.arr(root, "storage_objects", "(top)", &list, kMaxTargets * 16))
		return false;
	for (size_t i = 0; i < list->size(); i++) {
		StorageObject so;
		const std::string path = "storage_objects[" + std::to_string(i) + "]";
		if (!load_storage_object(rd, (*list)[i], path, &so))
			return false;
		const std::string key = so.where.substr(strlen("storage object "));
		if (!sos.emplace(key, std::move(so)).second)
			return rd.bad(path, ("storage object " + key + " twice").c_str());
	}
	if (!rd.arr(root, "fabric_modules", "(top)", &list, 64))
		return false;
	for (const json &f : *list) {
		if (!rd.obj(f, "fabric_modules[]"))
			return false;
		std::string name;
		bool enabled = false;
		if (!rd.str(f, "name", "fabric_modules[]", &name) ||
		    !rd.boolean(f, "discovery_enable_auth", "fabric_modules[]", &enabled))
			return false;
		if (enabled)
			r->skip("fabric " + name, "discovery_enable_auth true",
			        "ulp-targetd has no discovery authentication");
	}
	Importer im{rd, r, sos, {}, {}, false};
	if (!rd.arr(root, "targets", "(top)", &list, kMaxTargets))
		return false;
	for (size_t i = 0; i < list->size(); i++) {
		const json &tj = (*list)[i];
		const std::string path = "targets[" + std::to_string(i) + "]";
		std::string wwn, fabric;
		const json *tpgs = nullptr;
		if (!rd.obj(tj, path) || !rd.str(tj, "wwn", path, &wwn) ||
		    !rd.str(tj, "fabric", path, &fabric) || !rd.arr(tj, "tpgs", path, &tpgs, 1024))
			return false;
		const bool srp = fabric == "srpt";
		const std::string where = (srp ? "srpt target " : "target ") + wwn;
		rd.unknown(tj, where, {"wwn", "fabric", "tpgs"});
		if (fabric != "iscsi" && !srp) {
			r->skip(
			    where, "fabric " + fabric,
			    "ulp-targetd serves iSCSI (TCP, iSER) and SRP; the target is left out");
			continue;
		}
		if (srp && im.srp_taken) {
			r->skip(where, "srpt target",
			        "ulp-targetd has one SRP target port; the target is left out");
			continue;
		}
		targetd::TargetCfg t;
		// An srpt target's LUNs go to a [[target]] of their own, named after the port
		// (its GUID or GID's hex digits, else its place in the file).
		const std::string port = srp ? srp_port_id(wwn) : "";
		t.name = !srp           ? wwn
		         : port.empty() ? "iqn.2026-11.org.ulp.import:srpt-" + std::to_string(i)
		                        : "iqn.2026-11.org.ulp.import:srpt-" + port.substr(2);
		if (!iscsi_name_ok(t.name)) {
			r->skip(where, "wwn " + wwn, "not an iSCSI name ulp-targetd takes");
			continue;
		}
		bool done = false;
		for (size_t g = 0; g < tpgs->size(); g++) {
			const json &tpg = (*tpgs)[g];
			const std::string tp = path + ".tpgs[" + std::to_string(g) + "]";
			uint64_t tag = g + 1;
			bool enable = true;
			if (!rd.obj(tpg, tp) || !rd.u64(tpg, "tag", tp, &tag) ||
			    !rd.boolean(tpg, "enable", tp, &enable))
				return false;
			const std::string tw = where + " tpg " + std::to_string(tag);
			if (!enable) {
				r->skip(tw, "enable false",
				        "ulp-targetd has no disabled targets; the TPG is left out");
			} else if (done) {
				r->skip(tw, "TPG " + std::to_string(tag),
				        "ulp-targetd has one port group per target; the TPG is "
				        "left out");
			} else {
				if (!im.tpg(tpg, tp, wwn, fabric, &t))
					return false;
				done = true;
			}
		}
		if (!done)
			continue;
		if (srp) {
			im.srp_taken = true;
			r->config.srp.target = t.name;
			r->skip(
			    where, "fabric srpt",
			    "its LUNs are [[target]] " + t.name +
			        "'s, which ulp-targetd serves over iSCSI too; and SRP listens on "
			        "srp_portals (RDMA/CM addresses), which saveconfig.json does not "
			        "hold: add them");
		}
		if (std::any_of(r->config.targets.begin(), r->config.targets.end(),
		                [&](const targetd::TargetCfg &o) { return o.name == t.name; }))
			return rd.bad(path + ".wwn", "the same target twice");
		r->config.targets.push_back(std::move(t));
	}
	std::set<std::string> all;
	for (const auto &[t, ps] : im.target_portals)
		all.insert(ps.begin(), ps.end());
	for (const auto &[t, ps] : im.target_portals)
		if (ps != all)
			r->skip("target " + t, "its portals",
			        "ulp-targetd serves every target on every portal (" +
			            std::to_string(all.size()) + " here)");
	im.gp.apply(r);
	return true;
}

} // namespace

bool import_targetcli(const std::string &text, const std::string &source, Result *out,
                      std::string *why)
{
	size_t at = 0;
	if (text.size() > kMaxInputBytes) {
		*why = source + ": larger than the importer's bound";
		return false;
	}
	if (ulp::admin::json_depth(text, kMaxJsonDepth, &at) > kMaxJsonDepth) {
		*why = source + ":" + line_col(text, at) + ": nested more than " +
		       std::to_string(kMaxJsonDepth) + " deep: not a saveconfig.json";
		return false;
	}
	json root;
	try {
		root = json::parse(text);
	} catch (const json::parse_error &e) {
		*why = source + ":" + line_col(text, e.byte ? e.byte - 1 : 0) +
		       ": not JSON: " + std::string(e.what());
		return false;
	}
	Reader rd{source, why, out};
	if (!root.is_object())
		return rd.bad("(top)", "must be an object with storage_objects and targets");
	return import_root(rd, root, out);
}

} // namespace ulpctl::import
