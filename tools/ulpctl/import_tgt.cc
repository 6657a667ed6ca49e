// SPDX-License-Identifier: MIT
// tools/ulpctl/import_tgt.cc - tgt's targets.conf (tgt-admin's file, Config::General's
// syntax) into ulp-targetd's configuration.
//
// The file: "key value" lines ("key = value" too), "#" comments ("\#" a literal one), "\"
// at a line's end continuing it, <target NAME> blocks holding options and
// <backing-store PATH> / <direct-store PATH> blocks, and "include PATTERN" (globbed,
// relative to the including file's directory). A target named twice is one target, as
// tgt-admin merges duplicate blocks. Hand-written, bounded: kMaxLineBytes a line,
// kMaxIncludeDepth and kMaxIncludeFiles for includes, the input's bytes together.
//
// What is carried over, and why so:
//   each target -> a [[target]]; backing-store and direct-store -> LUNs numbered as
//     tgt-admin numbers them: "lun N" where given, else the lowest free number from 1
//     (tgt's LUN 0 is its controller), backing-stores before direct-stores, each kind in
//     the order of its paths; bs-type rdwr, aio or mmap (or none) -> file or block by the
//     path; bs-type rbd -> rbd ("POOL/IMAGE", or IMAGE in pool rbd) with bsopts conf= and
//     id= (-> client); block-size -> block_size, lbppbe -> physical_block_size,
//     write-cache -> write_cache, readonly -> read_only, removable, bsoflags direct;
//     options given at the target apply to its LUNs unless a store block says otherwise,
//     as in tgt-admin;
//   initiator-name -> acls; incominguser -> chap, outgoinguser -> mutual_chap;
//   the negotiation parameters (MaxRecvDataSegmentLength, MaxBurstLength,
//     FirstBurstLength, ImmediateData, InitialR2T, MaxOutstandingR2T, HeaderDigest with
//     DataDigest) -> [iscsi], when every target agrees (import.cc's GlobalParams);
//   portals: tgtd's are on its command line, not in this file; tgtd listens on every
//     address's port 3260 unless told otherwise, and so the file says "0.0.0.0:3260".
// Listed, not carried over: initiator-address other than ALL (ulp-targetd's iSCSI ACLs are
// by name), incominguser accounts past the first (one account per target), the inquiry
// identity (vendor_id, product_id, product_rev, scsi_id, scsi_sn, and direct-store's
// copy of the device's), mode_page, sense_format, params, device types other than disk,
// backing stores ulp-targetd has none of (sg, bsg, ssc, sheepdog, glfs, null), bsoflags
// sync, driver iser (its portals are tgtd's command line: add iser_portals), and every key
// this importer does not know.
#include "tools/ulpctl/import.h"

#include "iscsi/text.h"

#include <algorithm>
#include <map>
#include <set>

namespace ulpctl::import
{
namespace
{

struct Line {
	std::string text, where; // where: "FILE:LINE"
};

std::string trim(const std::string &s)
{
	const size_t a = s.find_first_not_of(" \t\r");
	if (a == std::string::npos)
		return "";
	return s.substr(a, s.find_last_not_of(" \t\r") - a + 1);
}

std::string unquote(const std::string &s)
{
	if (s.size() >= 2 && (s.front() == '"' || s.front() == '\'') && s.back() == s.front())
		return s.substr(1, s.size() - 2);
	return s;
}

std::string dir_of(const std::string &path)
{
	const size_t s = path.rfind('/');
	return s == std::string::npos ? "." : s == 0 ? "/" : path.substr(0, s);
}

// The file's logical lines, comments gone and includes read in where they stand.
bool flatten(const std::string &text, const std::string &source, const ReadFile &read, int depth,
             size_t *files, std::vector<Line> *out, std::string *why)
{
	size_t lineno = 0, pos = 0;
	std::string pending; // a line continued with "\"
	size_t start_line = 0;
	while (pos < text.size()) {
		size_t nl = text.find('\n', pos);
		if (nl == std::string::npos)
			nl = text.size();
		std::string raw = text.substr(pos, nl - pos);
		pos = nl + 1;
		lineno++;
		if (raw.size() > kMaxLineBytes) {
			*why = source + ":" + std::to_string(lineno) + ": a line longer than " +
			       std::to_string(kMaxLineBytes) + " bytes";
			return false;
		}
		// What the file carries over goes into TOML strings, which are UTF-8.
		if (raw.find('\0') != std::string::npos || !ulp::iscsi::valid_utf8(raw)) {
			*why = source + ":" + std::to_string(lineno) +
			       ": not UTF-8 text (a NUL byte or a malformed sequence)";
			return false;
		}
		std::string l;
		for (size_t i = 0; i < raw.size(); i++) {
			if (raw[i] == '\\' && i + 1 < raw.size() && raw[i + 1] == '#') {
				l += '#';
				i++;
			} else if (raw[i] == '#') {
				break;
			} else {
				l += raw[i];
			}
		}
		if (pending.empty())
			start_line = lineno;
		l = trim(l);
		if (!l.empty() && l.back() == '\\') {
			pending += l.substr(0, l.size() - 1) + " ";
			if (pending.size() > kMaxLineBytes) {
				*why = source + ":" + std::to_string(lineno) + ": a line too long";
				return false;
			}
			continue;
		}
		l = trim(pending + l);
		pending.clear();
		if (l.empty())
			continue;
		const std::string where = source + ":" + std::to_string(start_line);
		if (l.compare(0, 8, "include ") == 0 || l.compare(0, 8, "include\t") == 0) {
			if (depth >= kMaxIncludeDepth) {
				*why = where + ": includes nested more than " +
				       std::to_string(kMaxIncludeDepth) + " deep";
				return false;
			}
			std::vector<std::pair<std::string, std::string>> inc;
			if (!read(unquote(trim(l.substr(8))), dir_of(source), &inc, why)) {
				*why = where + ": include: " + *why;
				return false;
			}
			for (const auto &[path, body] : inc) {
				if (++*files > kMaxIncludeFiles) {
					*why = where + ": more than " +
					       std::to_string(kMaxIncludeFiles) + " included files";
					return false;
				}
				if (!flatten(body, path, read, depth + 1, files, out, why))
					return false;
			}
			continue;
		}
		out->push_back({l, where});
	}
	return true;
}

struct Opt {
	std::string key, value, where;
};
struct Store {
	std::string path, where;
	bool direct = false;
	std::vector<Opt> opts;
};
struct Target {
	std::string name, where;
	std::vector<Opt> opts;
	std::vector<Store> stores;
};

Opt split(const Line &l)
{
	const size_t k = l.text.find_first_of(" \t=");
	Opt o{l.text.substr(0, k), "", l.where};
	if (k != std::string::npos) {
		std::string v = trim(l.text.substr(k));
		if (!v.empty() && v[0] == '=')
			v = trim(v.substr(1));
		o.value = unquote(v);
	}
	return o;
}

// The lines into targets and top-level options.
bool parse(const std::vector<Line> &lines, std::vector<Target> *targets, std::vector<Opt> *top,
           std::string *why)
{
	Target *t = nullptr;
	Store *s = nullptr;
	for (const Line &l : lines) {
		const std::string &x = l.text;
		if (x.size() >= 2 && x[0] == '<' && x.back() == '>') {
			const bool close = x[1] == '/';
			const std::string in =
			    trim(x.substr(close ? 2 : 1, x.size() - (close ? 3 : 2)));
			const size_t sp = in.find_first_of(" \t");
			const std::string kind = in.substr(0, sp);
			const std::string arg =
			    sp == std::string::npos ? "" : unquote(trim(in.substr(sp)));
			if (close) {
				if (kind == "target" && t && !s) {
					t = nullptr;
				} else if ((kind == "backing-store" || kind == "direct-store") &&
				           s && s->direct == (kind == "direct-store")) {
					s = nullptr;
				} else {
					*why = l.where + ": </" + kind + "> closes no open block";
					return false;
				}
				continue;
			}
			if (kind == "target" && !t) {
				if (arg.empty()) {
					*why = l.where + ": <target> without a name";
					return false;
				}
				auto it =
				    std::find_if(targets->begin(), targets->end(),
				                 [&](const Target &o) { return o.name == arg; });
				if (it == targets->end()) {
					if (targets->size() >= kMaxTargets) {
						*why = l.where + ": more than " +
						       std::to_string(kMaxTargets) + " targets";
						return false;
					}
					targets->push_back({arg, l.where, {}, {}});
					it = targets->end() - 1;
				}
				t = &*it;
			} else if ((kind == "backing-store" || kind == "direct-store") && t && !s) {
				if (arg.empty() || t->stores.size() >= kMaxLunsPerTarget) {
					*why = l.where + ": <" + kind +
					       "> without a path, or too many";
					return false;
				}
				t->stores.push_back({arg, l.where, kind == "direct-store", {}});
				s = &t->stores.back();
			} else {
				*why =
				    l.where + ": <" + kind + "> is not a block tgt-admin has here";
				return false;
			}
			continue;
		}
		Opt o = split(l);
		if (s) {
			if (s->opts.size() >= 4096) {
				*why = l.where + ": too many options";
				return false;
			}
			s->opts.push_back(o);
		} else if (t && (o.key == "backing-store" || o.key == "direct-store")) {
			if (o.value.empty() || t->stores.size() >= kMaxLunsPerTarget) {
				*why = l.where + ": " + o.key + " without a path, or too many";
				return false;
			}
			t->stores.push_back({o.value, l.where, o.key == "direct-store", {}});
		} else if (t) {
			if (t->opts.size() >= 4 * kMaxAclsPerTarget) {
				*why = l.where + ": too many options";
				return false;
			}
			t->opts.push_back(o);
		} else {
			if (top->size() >= 4096) {
				*why = l.where + ": too many options";
				return false;
			}
			top->push_back(o);
		}
	}
	if (t || s) {
		*why = (s ? s->where : t->where) + ": block not closed at the end of the file";
		return false;
	}
	return true;
}

const std::set<std::string> kIdentity = {
    "vendor_id", "product_id", "product_rev", "scsi_id", "scsi_sn",           "sense_format",
    "mode_page", "path",       "params",      "la_lba",  "optimal_xfer_gran", "optimal_xfer_len"};
const std::set<std::string> kLunKeys = {"lun",        "bs-type", "bsopts",      "bsoflags",
                                        "block-size", "lbppbe",  "write-cache", "readonly",
                                        "removable",  "online",  "device-type", "allow-in-use"};
const std::set<std::string> kParams = {
    "MaxRecvDataSegmentLength", "MaxBurstLength", "FirstBurstLength", "ImmediateData", "InitialR2T",
    "MaxOutstandingR2T"};

bool truthy(const std::string &v)
{
	return v == "1" || v == "yes" || v == "on" || v == "Yes" || v == "true";
}

bool number(const std::string &v, uint64_t *n)
{
	if (v.empty() || v.size() > 12 || !std::all_of(v.begin(), v.end(), ::isdigit))
		return false;
	*n = std::stoull(v);
	return true;
}

// One store into a LUN (false: left out, listed). opt(k): the store's value, else the
// target's, else "".
bool make_lun(const Store &st, const std::map<std::string, Opt> &eff, const std::string &where,
              Result *r, targetd::LunCfg *l)
{
	auto val = [&](const char *k) {
		auto it = eff.find(k);
		return it == eff.end() ? std::string() : it->second.value;
	};
	const std::string bs = val("bs-type");
	if (std::string dt = val("device-type"); !dt.empty() && dt != "disk") {
		r->skip(where, "device-type " + dt, "ulp-targetd's LUNs are disks; left out");
		return false;
	}
	if (bs.empty() || bs == "rdwr" || bs == "aio" || bs == "mmap") {
		l->bs.kind = file_or_block(st.path);
		l->bs.path = st.path;
	} else if (bs == "rbd") {
		l->bs.kind = "rbd";
		const size_t sl = st.path.find('/');
		l->bs.rbd.pool = sl == std::string::npos ? "rbd" : st.path.substr(0, sl);
		l->bs.rbd.image = sl == std::string::npos ? st.path : st.path.substr(sl + 1);
		if (l->bs.rbd.pool.empty() || l->bs.rbd.image.empty() ||
		    l->bs.rbd.image.find('/') != std::string::npos) {
			r->skip(where, "backing-store " + st.path, "not POOL/IMAGE; left out");
			return false;
		}
		const std::string opts = val("bsopts");
		size_t p = 0;
		while (p < opts.size()) {
			size_t q = opts.find(';', p);
			if (q == std::string::npos)
				q = opts.size();
			const std::string kv = trim(opts.substr(p, q - p));
			p = q + 1;
			const size_t eq = kv.find('=');
			const std::string k = kv.substr(0, eq);
			const std::string v = eq == std::string::npos ? "" : kv.substr(eq + 1);
			if (k == "conf" && !v.empty())
				l->bs.rbd.conf = v;
			else if (k == "id" && !v.empty())
				l->bs.rbd.client = v;
			else if (!kv.empty())
				r->skip(where, "bsopts " + kv, "not an rbd option ulp-targetd has");
		}
	} else {
		r->skip(where, "bs-type " + bs,
		        "not a backstore ulp-targetd has (it has rdwr/aio as file or block, and "
		        "rbd); left out");
		return false;
	}
	if (st.direct)
		r->skip(where, "direct-store " + st.path,
		        "the device's own vendor, product, revision and serial are not copied");
	uint64_t n = 0;
	if (std::string v = val("block-size"); !v.empty()) {
		if (number(v, &n) && block_size_ok(n))
			l->bs.block_size = uint32_t(n);
		else
			r->skip(where, "block-size " + v,
			        "ulp-targetd takes a power of two, 512 to 65536");
	}
	if (std::string v = val("lbppbe"); !v.empty()) {
		if (number(v, &n) && n <= 15)
			l->physical_block_size = l->bs.block_size << n;
		else
			r->skip(where, "lbppbe " + v, "not 0 to 15");
	}
	if (std::string v = val("write-cache"); !v.empty()) {
		if (l->bs.kind == "rbd") {
			if (v != "off")
				r->skip(where, "write-cache " + v,
				        "an rbd LUN has no volatile cache");
		} else if (v == "on" || v == "off") {
			l->bs.write_cache = v == "on";
		} else {
			r->skip(where, "write-cache " + v, "not on or off");
		}
	}
	l->read_only = l->bs.read_only = truthy(val("readonly"));
	l->removable = truthy(val("removable"));
	if (std::string v = val("online"); !v.empty() && !truthy(v))
		r->skip(where, "online " + v, "ulp-targetd's LUNs are online");
	if (std::string v = val("allow-in-use"); truthy(v))
		r->skip(where, "allow-in-use " + v,
		        "ulp-targetd claims a writable block device for itself");
	if (std::string v = val("bsoflags"); !v.empty()) {
		size_t p = 0;
		while (p <= v.size()) {
			size_t q = std::min(v.find(':', p), v.size());
			const std::string f = v.substr(p, q - p);
			p = q + 1;
			if (f == "direct" && l->bs.kind != "rbd")
				l->bs.direct = true;
			else if (!f.empty())
				r->skip(where, "bsoflags " + f, "ulp-targetd has direct only");
		}
	}
	for (const auto &[k, o] : eff)
		if (kIdentity.count(k))
			r->skip(where, k + " " + o.value,
			        k == "vendor_id" || k == "product_id" || k == "product_rev" ||
			                k == "scsi_sn"
			            ? "not carried over: the LUN's vendor, product, revision and "
			              "serial keys set the inquiry identity"
			            : "ulp-targetd reports its own inquiry data and mode pages");
	return true;
}

bool import_target(const Target &tg, const std::string &driver, GlobalParams *gp, Result *r)
{
	const std::string where = "target " + tg.name;
	targetd::TargetCfg t;
	t.name = tg.name;
	if (!iscsi_name_ok(t.name)) {
		r->skip(where, "<target " + tg.name + ">", "not a valid iSCSI name; left out");
		return true;
	}
	std::map<std::string, Opt> defaults; // the target's LUN options (the last one given)
	std::string hd, dd, drv = driver;
	std::vector<Opt> incoming, outgoing;
	for (const Opt &o : tg.opts) {
		const std::string w = where + " (" + o.where + ")";
		if (kLunKeys.count(o.key) || kIdentity.count(o.key)) {
			defaults[o.key] = o;
		} else if (o.key == "initiator-name") {
			if (!iscsi_name_ok(o.value))
				r->skip(w, "initiator-name " + o.value, "not a valid iSCSI name");
			else if (t.acls.size() < kMaxAclsPerTarget &&
			         std::find(t.acls.begin(), t.acls.end(), o.value) == t.acls.end())
				t.acls.push_back(o.value);
		} else if (o.key == "initiator-address") {
			if (o.value != "ALL")
				r->skip(
				    w, "initiator-address " + o.value,
				    "ulp-targetd admits iSCSI initiators by name, not by address");
		} else if (o.key == "incominguser") {
			incoming.push_back(o);
		} else if (o.key == "outgoinguser") {
			outgoing.push_back(o);
		} else if (o.key == "driver") {
			drv = o.value;
		} else if (o.key == "HeaderDigest") {
			hd = o.value;
		} else if (o.key == "DataDigest") {
			dd = o.value;
		} else if (kParams.count(o.key)) {
			gp->record(t.name, o.key, o.value);
		} else {
			r->skip(w, o.key + " " + o.value, "not a setting ulp-targetd has");
		}
	}
	if (drv == "iser")
		r->skip(where, "driver iser",
		        "tgtd's iSER portals are on its command line: add iser_portals (and "
		        "rdma_device); served over TCP meanwhile");
	else if (drv != "iscsi") {
		r->skip(where, "driver " + drv, "ulp-targetd serves iSCSI; left out");
		return true;
	}
	auto digest = [](const std::string &v) {
		return v.empty()            ? std::string()
		       : v == "None"        ? "none"
		       : v == "CRC32C"      ? "crc32c"
		       : v == "CRC32C,None" ? "both"
		                            : v;
	};
	if (digest(hd) != digest(dd))
		r->skip(where, "HeaderDigest " + hd + ", DataDigest " + dd,
		        "ulp-targetd's digests setting is both's");
	else
		gp->record(t.name, "digests", digest(hd));

	auto account = [&](const Opt &o, std::optional<ulp::iscsi::ChapSecret> *out) {
		const size_t sp = o.value.find_first_of(" \t");
		const std::string user = o.value.substr(0, sp);
		const std::string secret = sp == std::string::npos ? "" : trim(o.value.substr(sp));
		std::string w;
		if (secret.find_first_of(" \t") != std::string::npos)
			w = "not USER PASSWORD";
		else if (chap_ok(user, secret, &w))
			*out = ulp::iscsi::ChapSecret{user, secret};
		if (!*out)
			r->skip(where + " (" + o.where + ")", o.key + " " + user, w);
	};
	for (size_t i = 0; i < incoming.size(); i++) {
		if (t.chap)
			r->skip(where + " (" + incoming[i].where + ")",
			        "incominguser " +
			            incoming[i].value.substr(0, incoming[i].value.find(' ')),
			        "ulp-targetd has one CHAP account per target: " + t.chap->user +
			            "'s");
		else
			account(incoming[i], &t.chap);
	}
	for (size_t i = 0; i < outgoing.size(); i++) {
		if (i > 0 || !t.chap)
			r->skip(where + " (" + outgoing[i].where + ")", "outgoinguser",
			        t.chap ? "tgt takes only the first" : "mutual CHAP needs CHAP");
		else
			account(outgoing[i], &t.mutual_chap);
	}

	// LUN numbers as tgt-admin gives them.
	std::vector<const Store *> order;
	std::set<std::string> seen;
	for (bool direct : {false, true}) {
		std::vector<const Store *> v;
		for (const Store &s : tg.stores)
			if (s.direct == direct &&
			    seen.insert((direct ? "d:" : "b:") + s.path).second)
				v.push_back(&s);
		std::sort(v.begin(), v.end(),
		          [](const Store *a, const Store *b) { return a->path < b->path; });
		order.insert(order.end(), v.begin(), v.end());
	}
	std::vector<std::map<std::string, Opt>> eff(order.size());
	std::set<uint64_t> taken;
	for (size_t i = 0; i < order.size(); i++) {
		eff[i] = defaults;
		for (const Opt &o : order[i]->opts) {
			if (kLunKeys.count(o.key) || kIdentity.count(o.key))
				eff[i][o.key] = o;
			else
				r->skip(where + " store " + order[i]->path, o.key + " " + o.value,
				        "not a store option this importer knows");
		}
		if (order.size() > 1 && eff[i].count("lun") &&
		    std::none_of(order[i]->opts.begin(), order[i]->opts.end(),
		                 [](const Opt &o) { return o.key == "lun"; }))
			eff[i].erase("lun"); // a target's "lun" numbers a single store only
		uint64_t n = 0;
		if (eff[i].count("lun") && number(eff[i]["lun"].value, &n))
			taken.insert(n);
	}
	for (size_t i = 0; i < order.size(); i++) {
		uint64_t n = 0;
		const std::string lw = where + " " + (order[i]->direct ? "direct" : "backing") +
		                       "-store " + order[i]->path;
		if (eff[i].count("lun")) {
			if (!number(eff[i]["lun"].value, &n) || n > 16383) {
				r->skip(lw, "lun " + eff[i]["lun"].value,
				        "not 0 to 16383; left out");
				continue;
			}
		} else {
			for (n = 1; taken.count(n); n++) {
			}
			taken.insert(n);
		}
		targetd::LunCfg l;
		l.lun = n;
		if (std::any_of(t.luns.begin(), t.luns.end(),
		                [&](const targetd::LunCfg &o) { return o.lun == n; })) {
			r->skip(lw, "lun " + std::to_string(n),
			        "the number is another LUN's; left out");
			continue;
		}
		if (make_lun(*order[i], eff[i], lw, r, &l))
			t.luns.push_back(l);
	}
	if (t.luns.empty())
		r->skip(where, "its LUNs", "none could be carried over; the target has none");
	r->config.targets.push_back(std::move(t));
	return true;
}

} // namespace

bool import_tgt(const std::string &text, const std::string &source, const ReadFile &read,
                Result *out, std::string *why)
{
	std::vector<Line> lines;
	size_t files = 0;
	if (!flatten(text, source, read, 0, &files, &lines, why))
		return false;
	std::vector<Target> targets;
	std::vector<Opt> top;
	if (!parse(lines, &targets, &top, why))
		return false;
	std::string driver = "iscsi";
	for (const Opt &o : top) {
		if (o.key == "default-driver")
			driver = o.value;
		else
			out->skip(o.where, o.key + " " + o.value,
			          "not a setting ulp-targetd has (a tgt-admin or iSNS option)");
	}
	out->config.portals.push_back(targetd::Portal{"", 3260});
	GlobalParams gp;
	for (const Target &t : targets)
		if (!import_target(t, driver, &gp, out))
			return false;
	gp.apply(out);
	return true;
}

} // namespace ulpctl::import
