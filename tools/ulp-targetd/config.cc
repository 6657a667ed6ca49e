// SPDX-License-Identifier: MIT
// tools/ulp-targetd/config.cc - flags and TOML to a Config, and a Config to a running
// target's parts (see config.h).
#include "tools/ulp-targetd/config.h"

#include "admin/rpc.h"
#include "admin/server.h"
#include "ha/records.h"

#include <toml++/toml.h>

#include <arpa/inet.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <set>

#include <sched.h>
#include <unistd.h>

namespace targetd
{

using namespace ulp;

// default_port < 0: the port must be given (SRP has no well-known port).
bool parse_portal(const std::string &s, Portal *p, std::string *why, int default_port)
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

bool check_chap(const iscsi::ChapSecret &s, std::string *why)
{
	if (s.user.empty() || s.secret.empty()) {
		*why = "CHAP credentials need a user and a secret";
		return false;
	}
	// RFC 7143 12.1.3: secrets of at least 12 bytes (96 bits) where CHAP may be used
	// outside IPsec; the login engine refuses shorter ones too.
	if (s.secret.size() < 12) {
		*why = "CHAP secret of " + s.user + " is shorter than 12 characters";
		return false;
	}
	return true;
}

namespace
{

// An INQUIRY or VPD ASCII field's value (SPC-4 4.3.1: codes 20h..7Eh, left-aligned and
// padded with spaces): 1..max of them, and no space at either end, which the padding
// (and Linux, trimming it) would hide: two values that differ only there are the same
// device to an initiator.
bool check_ascii(const char *key, const std::string &v, size_t max, std::string *why)
{
	auto bad = [&](const std::string &what) {
		*why = std::string(key) + ": " + what;
		return false;
	};
	if (v.size() > max)
		return bad("at most " + std::to_string(max) + " characters, not " +
		           std::to_string(v.size()));
	for (unsigned char ch : v)
		if (ch < 0x20 || ch > 0x7e)
			return bad("printable ASCII only (20h..7Eh, SPC-4 4.3.1)");
	if (!v.empty() && (v.front() == ' ' || v.back() == ' '))
		return bad("no space at the start or end (INQUIRY pads with spaces)");
	return true;
}

} // namespace

bool check_lu_identity(const LuIdentity &id, std::string *why)
{
	if (!check_ascii("vendor", id.vendor, 8, why) ||
	    !check_ascii("product", id.product, 16, why) ||
	    !check_ascii("revision", id.revision, 4, why) ||
	    !check_ascii("serial", id.serial, kMaxSerial, why))
		return false;
	if (id.naa) {
		std::string w;
		uint64_t n = 0;
		if (!parse_naa(naa_str(id.naa), &n, &w)) {
			*why = "naa: " + w;
			return false;
		}
	}
	return true;
}

bool parse_naa(const std::string &s, uint64_t *out, std::string *why)
{
	std::string d = s;
	if (d.size() > 2 && d[0] == '0' && (d[1] == 'x' || d[1] == 'X'))
		d = d.substr(2);
	if (d.size() == 32 && d[0] == '6') {
		// NAA 6h, IEEE Registered Extended (16 bytes, what LIO reports): VPD 83h here
		// carries an 8-byte NAA designator, and EXTENDED COPY names LUs by it.
		*why = s + " is a 16-byte NAA 6h designator; this target reports 8-byte ones "
		           "(16 hex digits, NAA 5h IEEE Registered, 3h Locally Assigned or 2h "
		           "IEEE Extended)";
		return false;
	}
	if (d.size() != 16 ||
	    !std::all_of(d.begin(), d.end(), [](char ch) { return std::isxdigit(uint8_t(ch)); })) {
		*why = s + " is not 16 hex digits (an 8-byte NAA designator, e.g. "
		           "0x5001405012345678)";
		return false;
	}
	// SPC-4 7.8.6.6: the first digit is the NAA field; 2h, 3h and 5h are the 8-byte
	// formats.
	if (d[0] != '2' && d[0] != '3' && d[0] != '5') {
		*why = s +
		       ": the first hex digit is the NAA format: 5 (IEEE Registered), 3 "
		       "(Locally Assigned) or 2 (IEEE Extended), not " +
		       d.substr(0, 1);
		return false;
	}
	*out = std::strtoull(d.c_str(), nullptr, 16);
	return true;
}

std::string lu_name(const std::string &target, uint64_t lun)
{
	return target + "/" + std::to_string(lun);
}

std::string lun_serial(const std::string &target, const LunCfg &l)
{
	return l.id.serial.empty() ? scsi::lu_derived_serial(lu_name(target, l.lun)) : l.id.serial;
}

uint64_t lun_naa(const std::string &target, const LunCfg &l)
{
	return l.id.naa ? l.id.naa : scsi::lu_derived_naa(lu_name(target, l.lun));
}

std::string LuIdentitySet::add(const std::string &target, const LunCfg &l)
{
	const std::string self = "target " + target + " LUN " + std::to_string(l.lun);
	const std::string serial = lun_serial(target, l);
	const uint64_t naa = lun_naa(target, l);
	const char *why = " (an initiator's multipath would take two LUs for one)";
	// An rbd LUN's derived identity is its image's (Backstore::identity(), known once the
	// image is open), not its name's: only what is configured is checked for it. Two LUNs
	// of one image are one device to multipath, which is what they are.
	const bool from_image = l.bs.kind == "rbd";
	const bool check_serial = !(from_image && l.id.serial.empty());
	const bool check_naa = !(from_image && !l.id.naa);
	if (auto it = serials_.find(serial); check_serial && it != serials_.end())
		return self + ": serial: " + serial + " is " + it->second + "'s too" + why;
	if (auto it = naas_.find(naa); check_naa && it != naas_.end())
		return self + ": naa: " + naa_str(naa) + " is " + it->second + "'s too" + why;
	if (check_serial)
		serials_.emplace(serial, self);
	if (check_naa)
		naas_.emplace(naa, self);
	return "";
}

std::string lun_identity_clash(const std::vector<TargetCfg> &targets, const std::string &target,
                               const LunCfg &l)
{
	LuIdentitySet set;
	for (const TargetCfg &t : targets)
		for (const LunCfg &o : t.luns)
			if (!(t.name == target && o.lun == l.lun))
				set.add(t.name, o); // a clash among them is not l's
	return set.add(target, l);
}

bool check_redirect(const std::string &addr, std::string *why)
{
	Portal p;
	std::string w;
	if (addr.find(',') != std::string::npos) {
		*why = "redirect " + addr +
		       ": \"host:port\" without a portal group tag (RFC 7143 13.8)";
		return false;
	}
	if (std::any_of(addr.begin(), addr.end(),
	                [](unsigned char ch) { return ch <= 0x20 || ch > 0x7e; }) ||
	    !parse_portal(addr, &p, &w) || p.host.empty() || p.port == 0) {
		*why = "redirect " + addr + ": expected \"host:port\" (IPv6: \"[addr]:port\")";
		return false;
	}
	return true;
}

bool parse_cpu_list(const std::string &s, std::vector<int> *out, std::string *why)
{
	// The kernel's cpulist format (Documentation/admin-guide/cgroup-v1/cpusets.rst, and
	// what /sys/devices/system/cpu/online prints): comma-separated CPUs and ranges.
	out->clear();
	if (s.empty())
		return true;
	const long ncpu = sysconf(_SC_NPROCESSORS_CONF);
	auto bad = [&](const std::string &what) {
		*why = "worker_cpus \"" + s + "\": " + what;
		out->clear();
		return false;
	};
	size_t i = 0;
	while (i <= s.size()) {
		const size_t comma = std::min(s.find(',', i), s.size());
		const std::string item = s.substr(i, comma - i);
		const size_t dash = item.find('-');
		int lo = 0, hi = 0;
		auto num = [](const std::string &t, int *v) {
			if (t.empty() || t.size() > 6 ||
			    !std::all_of(t.begin(), t.end(),
			                 [](char ch) { return ch >= '0' && ch <= '9'; }))
				return false;
			*v = std::stoi(t);
			return true;
		};
		if (dash == std::string::npos
		        ? !num(item, &lo)
		        : !num(item.substr(0, dash), &lo) || !num(item.substr(dash + 1), &hi))
			return bad("\"" + item + "\" is not a CPU number or a range N-M");
		if (dash == std::string::npos)
			hi = lo;
		if (hi < lo)
			return bad("the range " + item + " runs backwards");
		if (hi >= ncpu || hi >= CPU_SETSIZE)
			return bad("CPU " + std::to_string(hi) +
			           " does not exist (this machine has " + std::to_string(ncpu) +
			           ")");
		for (int c = lo; c <= hi; c++)
			out->push_back(c);
		i = comma + 1;
	}
	return true;
}

std::string lun_key_misplaced(const std::string &kind, const std::string &key)
{
	static constexpr const char *kNotRbd[] = {"path", "direct", "write_cache", "wc"};
	if (kind == "rbd") {
		for (const char *k : kNotRbd)
			if (key == k)
				return key +
				       " is a file and block key: an rbd LUN names its image with "
				       "pool and image, and has no O_DIRECT nor volatile cache";
		return "";
	}
	const bool rbd_only = key == "create" || key == "timeout" || key == "atomic_unit" ||
	                      std::any_of(std::begin(kRbdStringKeys), std::end(kRbdStringKeys),
	                                  [&](const auto &e) { return key == e.first; });
	if (rbd_only)
		return key +
		       " is an rbd key (pool, image, namespace, conf, client, keyring, "
		       "group, create, timeout, atomic_unit), not one of a " +
		       kind + " backstore";
	return "";
}

namespace
{

bool parse_chap(const std::string &s, iscsi::ChapSecret *out, std::string *why)
{
	auto colon = s.find(':');
	if (colon == std::string::npos || colon == 0 || colon + 1 == s.size()) {
		*why = "CHAP credentials must be USER:SECRET";
		return false;
	}
	out->user = s.substr(0, colon);
	out->secret = s.substr(colon + 1);
	return check_chap(*out, why);
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

// A whole decimal number in [lo, hi] (no size suffix: seconds are not bytes).
bool parse_uint(const std::string &s, uint64_t lo, uint64_t hi, uint64_t *out)
{
	if (s.empty() || s.size() > 19 ||
	    !std::all_of(s.begin(), s.end(), [](char ch) { return ch >= '0' && ch <= '9'; }))
		return false;
	const uint64_t v = std::stoull(s);
	if (v < lo || v > hi)
		return false;
	*out = v;
	return true;
}

// "N:KIND[:key=value,...]", e.g. "0:ram:size=1G", "1:file:path=/x.img,size=10G,bs=4096",
// "2:rbd:pool=rbd,image=disk2,create=1,size=64M".
// --acl-lun INITIATOR=LUN[:TARGET_LUN][:ro] (an iSCSI name has colons but no '='): one
// mapping of the initiator's own map; the initiator joins the ACLs.
bool parse_acl_lun_flag(const std::string &s, TargetCfg *t, std::string *why)
{
	const size_t eq = s.rfind('=');
	const std::string name = s.substr(0, eq == std::string::npos ? 0 : eq);
	std::vector<std::string> parts;
	for (size_t i = eq == std::string::npos ? s.size() : eq + 1; i <= s.size();) {
		const size_t c = std::min(s.find(':', i), s.size());
		parts.push_back(s.substr(i, c - i));
		i = c + 1;
	}
	uint64_t lun = 0;
	MappedLun m;
	const bool ro = parts.size() >= 2 && parts.back() == "ro";
	if (ro)
		parts.pop_back();
	if (name.empty() || parts.empty() || parts.size() > 2 ||
	    !parse_uint(parts[0], 0, 16383, &lun) ||
	    !parse_uint(parts.size() == 2 ? parts[1] : parts[0], 0, 16383, &m.target_lun)) {
		*why = "--acl-lun " + s + ": expected INITIATOR=LUN[:TARGET_LUN][:ro]";
		return false;
	}
	m.read_only = ro;
	if (!t->acl_cfg[name].luns.emplace(lun, m).second) {
		*why =
		    "--acl-lun " + s + ": " + name + " maps LUN " + std::to_string(lun) + " twice";
		return false;
	}
	if (std::find(t->acls.begin(), t->acls.end(), name) == t->acls.end())
		t->acls.push_back(name);
	return true;
}

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
		if (std::string m = lun_key_misplaced(out->bs.kind, k); !m.empty()) {
			*why = "--lun " + s + ": " + m;
			return false;
		}
		bool b;
		scsi::RbdConfig &rbd = out->bs.rbd;
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
		} else if (auto ik =
		               std::find_if(std::begin(kLuIdentityKeys), std::end(kLuIdentityKeys),
		                            [&](const auto &e) { return k == e.first; });
		           ik != std::end(kLuIdentityKeys)) {
			out->id.*(ik->second) = v;
			std::string w;
			if (v.empty() || !check_lu_identity(out->id, &w)) {
				*why = "--lun " + s + ": LUN " + std::to_string(out->lun) + ": " +
				       (v.empty() ? k + ": empty" : w);
				return false;
			}
		} else if (k == "naa") {
			std::string w;
			if (!parse_naa(v, &out->id.naa, &w)) {
				*why = "--lun " + s + ": LUN " + std::to_string(out->lun) +
				       ": naa: " + w;
				return false;
			}
		} else if (k == "qd" || k == "queue_depth") {
			uint64_t n;
			if (!parse_size(v, &n) || n == 0 || n > 4096) {
				*why = "--lun " + s + ": bad queue depth " + v;
				return false;
			}
			out->bs.queue_depth = uint32_t(n);
		} else if (auto sk =
		               std::find_if(std::begin(kRbdStringKeys), std::end(kRbdStringKeys),
		                            [&](const auto &e) { return k == e.first; });
		           sk != std::end(kRbdStringKeys)) {
			rbd.*(sk->second) = v;
		} else if (k == "create") {
			if (!parse_bool_word(v, &rbd.create)) {
				*why = "--lun " + s + ": create is yes or no";
				return false;
			}
		} else if (k == "timeout") {
			uint64_t n;
			if (!parse_uint(v, 1, 3600, &n)) {
				*why = "--lun " + s + ": timeout is 1..3600 seconds, not " + v;
				return false;
			}
			rbd.timeout_s = uint32_t(n);
		} else if (k == "atomic_unit") {
			uint64_t n;
			if (!parse_size(v, &n) || n > (1u << 30)) {
				*why = "--lun " + s + ": bad atomic_unit " + v;
				return false;
			}
			rbd.atomic_unit = uint32_t(n);
		} else {
			*why = "--lun " + s + ": unknown key " + k +
			       " (size, path, bs, pbs, ro, removable, direct, write_cache, qd, "
			       "vendor, "
			       "product, revision, serial, naa; rbd: "
			       "pool, image, namespace, conf, client, keyring, group, create, "
			       "timeout, atomic_unit)";
			return false;
		}
	}
	return true;
}

// The file's reader: every key checked against the names it may have, every value against
// its type, and every error located ("path:line:column: key: what").
class Reader
{
public:
	Reader(const std::string &path, std::string *why) : path_(path), why_(why) {}

	bool fail(const toml::node &n, const std::string &what)
	{
		return fail_at(n.source(), what);
	}
	bool fail_at(const toml::source_region &src, const std::string &what)
	{
		const auto &b = src.begin;
		*why_ = path_ + ":" + std::to_string(b.line) + ":" + std::to_string(b.column) +
		        ": " + what;
		return false;
	}
	// Every key of t is one of keys.
	bool known(const toml::table &t, const std::string &ctx,
	           std::initializer_list<const char *> keys)
	{
		for (auto &[k, v] : t) {
			bool ok = false;
			for (const char *n : keys)
				ok = ok || k.str() == n;
			if (!ok)
				return fail_at(k.source(),
				               ctx + std::string(k.str()) + ": unknown key");
		}
		return true;
	}
	bool str(const toml::table &t, const char *k, const std::string &ctx, std::string *out)
	{
		const toml::node *n = t.get(k);
		if (!n)
			return true;
		if (!n->is_string())
			return fail(*n, ctx + k + ": must be a string");
		*out = *n->value<std::string>();
		return true;
	}
	bool boolean(const toml::table &t, const char *k, const std::string &ctx, bool *out)
	{
		const toml::node *n = t.get(k);
		if (!n)
			return true;
		if (!n->is_boolean())
			return fail(*n, ctx + k + ": must be true or false");
		*out = *n->value<bool>();
		return true;
	}
	template <typename T>
	bool integer(const toml::table &t, const char *k, const std::string &ctx, T *out,
	             int64_t lo, int64_t hi)
	{
		const toml::node *n = t.get(k);
		if (!n)
			return true;
		if (!n->is_integer())
			return fail(*n, ctx + k + ": must be an integer");
		const int64_t v = *n->value<int64_t>();
		if (v < lo || v > hi)
			return fail(*n, ctx + k + ": must be " + std::to_string(lo) + ".." +
			                    std::to_string(hi));
		*out = T(v);
		return true;
	}
	// Bytes: an integer, or a string with K M G T.
	bool size(const toml::table &t, const char *k, const std::string &ctx, uint64_t *out)
	{
		const toml::node *n = t.get(k);
		if (!n)
			return true;
		if (n->is_integer() && *n->value<int64_t>() >= 0) {
			*out = uint64_t(*n->value<int64_t>());
			return true;
		}
		if (n->is_string() && parse_size(*n->value<std::string>(), out))
			return true;
		return fail(*n, ctx + k + ": must be a size (bytes, or a string such as \"10G\")");
	}
	bool strings(const toml::table &t, const char *k, const std::string &ctx,
	             std::vector<std::string> *out, const toml::node **where = nullptr)
	{
		const toml::node *n = t.get(k);
		if (!n)
			return true;
		const toml::array *a = n->as_array();
		if (!a)
			return fail(*n, ctx + k + ": must be an array of strings");
		for (const toml::node &e : *a) {
			if (!e.is_string())
				return fail(e, ctx + k + ": must be an array of strings");
			out->push_back(*e.value<std::string>());
		}
		if (where)
			*where = n;
		return true;
	}
	bool portals(const toml::table &t, const char *k, std::vector<Portal> *out, int def_port)
	{
		const toml::node *n = t.get(k);
		if (!n)
			return true;
		const toml::array *a = n->as_array();
		if (!a)
			return fail(*n, std::string(k) + ": must be an array of strings");
		for (const toml::node &e : *a) {
			Portal p;
			std::string w;
			if (!e.is_string())
				return fail(e, std::string(k) + ": must be an array of strings");
			if (!parse_portal(*e.value<std::string>(), &p, &w, def_port))
				return fail(e, std::string(k) + ": " + w);
			out->push_back(p);
		}
		return true;
	}
	bool chap(const toml::table &t, const char *k, const std::string &ctx,
	          std::optional<iscsi::ChapSecret> *out)
	{
		const toml::node *n = t.get(k);
		if (!n)
			return true;
		const toml::table *ct = n->as_table();
		if (!ct)
			return fail(
			    *n, ctx + k + ": must be a table { user = \"...\", secret = \"...\" }");
		const std::string c2 = ctx + k + ".";
		iscsi::ChapSecret s;
		if (!known(*ct, c2, {"user", "secret"}) || !str(*ct, "user", c2, &s.user) ||
		    !str(*ct, "secret", c2, &s.secret))
			return false;
		std::string w;
		if (!check_chap(s, &w))
			return fail(*n, ctx + k + ": " + w);
		*out = s;
		return true;
	}

private:
	const std::string &path_;
	std::string *why_;
};

// [[target.portal_group]] entries of target table tt into t->portal_groups, checked against
// the daemon's portals (tcp and iser).
bool load_portal_groups(Reader &r, const toml::table &tt, const std::vector<Portal> &portals,
                        TargetCfg *t)
{
	const toml::node *gn = tt.get("portal_group");
	if (!gn)
		return true;
	const toml::array *gs = gn->as_array();
	if (!gs)
		return r.fail(*gn, "target.portal_group: must be an array of tables "
		                   "([[target.portal_group]])");
	const std::string ctx = "target.portal_group.";
	for (const toml::node &ge : *gs) {
		const toml::table *gt = ge.as_table();
		if (!gt)
			return r.fail(ge, "[[target.portal_group]] entries must be tables");
		if (!r.known(*gt, ctx, {"tag", "rtpi", "portals"}))
			return false;
		if (!gt->get("tag"))
			return r.fail(ge, ctx + "tag: missing");
		PortalGroupCfg g;
		std::vector<std::string> ps;
		const toml::node *pn = nullptr;
		if (!r.integer(*gt, "tag", ctx, &g.tag, 1, 65535) ||
		    !r.integer(*gt, "rtpi", ctx, &g.rtpi, 1, 65535) ||
		    !r.strings(*gt, "portals", ctx, &ps, &pn))
			return false;
		for (const std::string &a : ps) {
			Portal p;
			std::string w;
			if (!parse_portal(a, &p, &w))
				return r.fail(*pn, ctx + "portals: " + w);
			g.portals.push_back(p);
		}
		t->portal_groups.push_back(std::move(g));
		std::string w;
		if (!check_portal_groups(*t, portals, &w))
			return r.fail(ge, w);
	}
	return true;
}

// [target.alua] of target table tt into t->alua (checked against t's portal groups).
bool load_alua(Reader &r, const toml::table &tt, TargetCfg *t)
{
	const toml::node *an = tt.get("alua");
	if (!an)
		return true;
	const toml::table *at = an->as_table();
	if (!at)
		return r.fail(*an, "target.alua: must be a table ([target.alua])");
	std::string ctx = "target.alua.";
	if (!r.known(*at, ctx, {"tpgs", "implicit_transition_secs", "group"}))
		return false;
	std::string tpgs = "none";
	if (!r.str(*at, "tpgs", ctx, &tpgs) ||
	    !r.integer(*at, "implicit_transition_secs", ctx, &t->alua.implicit_transition_secs, 0,
	               255))
		return false;
	const auto *w = std::find(std::begin(kTpgsWords), std::end(kTpgsWords), tpgs);
	if (w == std::end(kTpgsWords))
		return r.fail(*at->get("tpgs"),
		              ctx + "tpgs: must be none, implicit, explicit or both, not " + tpgs);
	t->alua.tpgs = uint8_t(w - std::begin(kTpgsWords));
	if (const toml::node *gn = at->get("group")) {
		const toml::array *gs = gn->as_array();
		if (!gs)
			return r.fail(*gn, ctx + "group: must be an array of tables "
			                         "([[target.alua.group]])");
		ctx += "group.";
		for (const toml::node &ge : *gs) {
			const toml::table *gt = ge.as_table();
			if (!gt)
				return r.fail(ge, "[[target.alua.group]] entries must be tables");
			if (!r.known(*gt, ctx,
			             {"id", "state", "preferred", "portal_groups", "srp"}))
				return false;
			if (!gt->get("id"))
				return r.fail(ge, ctx + "id: missing");
			AluaGroupCfg g;
			std::string st = alua_state_word(g.state);
			if (!r.integer(*gt, "id", ctx, &g.id, 0, 65535) ||
			    !r.str(*gt, "state", ctx, &st) ||
			    !r.boolean(*gt, "preferred", ctx, &g.preferred) ||
			    !r.boolean(*gt, "srp", ctx, &g.srp))
				return false;
			if (!parse_alua_state(st, &g.state))
				return r.fail(
				    *gt->get("state"),
				    ctx +
				        "state: must be active-optimized, "
				        "active-non-optimized, standby, unavailable, offline "
				        "or transitioning, not " +
				        st);
			if (const toml::node *pn = gt->get("portal_groups")) {
				const toml::array *pa = pn->as_array();
				if (!pa)
					return r.fail(
					    *pn, ctx + "portal_groups: must be an array of tags");
				for (const toml::node &e : *pa) {
					if (!e.is_integer() || *e.value<int64_t>() < 1 ||
					    *e.value<int64_t>() > 65535)
						return r.fail(
						    e, ctx + "portal_groups: must be an array of "
						             "tags (1..65535)");
					g.portal_groups.push_back(uint16_t(*e.value<int64_t>()));
				}
			}
			t->alua.groups.push_back(std::move(g));
			std::string why;
			if (!check_alua(*t, &why))
				return r.fail(ge, why);
		}
	}
	std::string why;
	if (!check_alua(*t, &why))
		return r.fail(*an, why);
	return true;
}

bool load_lun(Reader &r, const toml::table &lt, const std::string &ctx, LunCfg *l)
{
	// clang-format off
	if (!r.known(lt, ctx, {"lun",         "backstore",   "path",
	                       "size",        "block_size",  "physical_block_size",
	                       "read_only",   "removable",   "direct",
	                       "write_cache", "queue_depth", "pool",
	                       "image",       "namespace",   "conf",
	                       "client",      "keyring",     "group",
	                       "create",      "timeout",     "atomic_unit",
	                       "tp_soft_threshold", "vendor", "product",
	                       "revision",    "serial",      "naa"}))
		return false;
	// clang-format on
	if (!lt.get("backstore"))
		return r.fail(lt, ctx + "backstore: missing (ram, file, block, rbd or null)");
	scsi::RbdConfig &rbd = l->bs.rbd;
	if (!r.integer(lt, "lun", ctx, &l->lun, 0, 16383) ||
	    !r.str(lt, "backstore", ctx, &l->bs.kind) || !r.str(lt, "path", ctx, &l->bs.path) ||
	    !r.size(lt, "size", ctx, &l->bs.size) ||
	    !r.integer(lt, "block_size", ctx, &l->bs.block_size, 1, 65536) ||
	    !r.integer(lt, "physical_block_size", ctx, &l->physical_block_size, 0, 1ll << 31) ||
	    !r.boolean(lt, "read_only", ctx, &l->read_only) ||
	    !r.boolean(lt, "removable", ctx, &l->removable) ||
	    !r.integer(lt, "tp_soft_threshold", ctx, &l->tp_soft_threshold, 0, 100) ||
	    !r.boolean(lt, "direct", ctx, &l->bs.direct) ||
	    !r.boolean(lt, "write_cache", ctx, &l->bs.write_cache) ||
	    !r.integer(lt, "queue_depth", ctx, &l->bs.queue_depth, 1, 4096) ||
	    !r.boolean(lt, "create", ctx, &rbd.create) ||
	    !r.integer(lt, "timeout", ctx, &rbd.timeout_s, 1, 3600))
		return false;
	if (uint64_t au = rbd.atomic_unit; lt.get("atomic_unit")) {
		if (!r.size(lt, "atomic_unit", ctx, &au))
			return false;
		if (au > (1u << 30))
			return r.fail(lt, ctx + "atomic_unit: at most 1G");
		rbd.atomic_unit = uint32_t(au);
	}
	for (const auto &[k, m] : kRbdStringKeys)
		if (!r.str(lt, k, ctx, &(rbd.*m)))
			return false;
	// The identity: each value checked where it stands ("target.lun.serial: ...").
	for (const auto &[k, m] : kLuIdentityKeys) {
		const toml::node *n = lt.get(k);
		if (!n)
			continue;
		if (!r.str(lt, k, ctx, &(l->id.*m)))
			return false;
		LuIdentity one;
		one.*m = l->id.*m;
		std::string w;
		if (one.*m == "")
			return r.fail(*n, ctx + k + ": empty (leave the key out for the default)");
		if (!check_lu_identity(one, &w))
			return r.fail(*n, ctx + w + " (LUN " + std::to_string(l->lun) + ")");
	}
	if (const toml::node *n = lt.get("naa")) {
		std::string w;
		if (!n->is_string())
			return r.fail(*n, ctx + "naa: must be a string of 16 hex digits");
		if (!parse_naa(*n->value<std::string>(), &l->id.naa, &w))
			return r.fail(*n,
			              ctx + "naa: " + w + " (LUN " + std::to_string(l->lun) + ")");
	}
	// A key of another kind is named where it stands, not only as check_lun's value error.
	for (auto &[k, v] : lt)
		if (std::string m = lun_key_misplaced(l->bs.kind, std::string(k.str())); !m.empty())
			return r.fail_at(k.source(), ctx + std::string(k.str()) + ": " + m);
	l->bs.read_only = l->read_only;
	std::string w;
	if (!check_lun("", *l, &w))
		return r.fail(lt, ctx.substr(0, ctx.size() - 1) + ": " + w);
	return true;
}

// [[target.acl]] and [[srp.acl]] (key "acl" of t): an initiator's own LUN map and, for
// iSCSI, its own CHAP secrets. An entry's initiator joins acls when it is not there yet.
// target_luns: the LUNs of the target the map may name.
bool load_acl_entries(Reader &r, const toml::table &t, const std::string &ctx, bool iscsi,
                      const std::vector<LunCfg> &target_luns, std::vector<std::string> *acls,
                      std::map<std::string, AclCfg> *out)
{
	const toml::node *n = t.get("acl");
	if (!n)
		return true;
	const toml::array *es = n->as_array();
	if (!es)
		return r.fail(*n, ctx + ": must be an array of tables ([[" + ctx + "]])");
	std::set<std::string> seen;
	for (const toml::node &e : *es) {
		const toml::table *et = e.as_table();
		if (!et)
			return r.fail(e, "[[" + ctx + "]] entries must be tables");
		const std::string c2 = ctx + ".";
		std::string initiator;
		AclCfg a;
		if (!(iscsi ? r.known(*et, c2, {"initiator", "luns", "chap", "mutual_chap"})
		            : r.known(*et, c2, {"initiator", "luns"})) ||
		    !r.str(*et, "initiator", c2, &initiator) || !r.chap(*et, "chap", c2, &a.chap) ||
		    !r.chap(*et, "mutual_chap", c2, &a.mutual_chap))
			return false;
		if (!et->get("initiator"))
			return r.fail(e, c2 + "initiator: missing");
		std::string w;
		if (iscsi && !iscsi::valid_iscsi_name(initiator))
			return r.fail(*et->get("initiator"), c2 + "initiator: " + initiator +
			                                         " is not a valid iSCSI name");
		if (!iscsi) {
			std::string x;
			if (!normalize_srp_acl(initiator, &x))
				return r.fail(*et->get("initiator"),
				              c2 +
				                  "initiator: \"0x\" + 32 hex digits (an initiator "
				                  "port id) or an IP address, not " +
				                  initiator);
			initiator = x;
		}
		if (!seen.insert(initiator).second)
			return r.fail(e, c2 + "initiator: " + initiator + " has two entries");
		if (a.mutual_chap && !a.chap)
			return r.fail(e, c2 + "mutual_chap: needs chap");
		if (const toml::node *ln = et->get("luns")) {
			const toml::array *ls = ln->as_array();
			if (!ls)
				return r.fail(
				    *ln, c2 + "luns: must be an array of tables "
				              "{ lun = N, target_lun = N, read_only = false }");
			const std::string c3 = c2 + "luns.";
			for (const toml::node &le : *ls) {
				const toml::table *lt = le.as_table();
				if (!lt)
					return r.fail(le, c2 + "luns: entries must be tables "
					                       "{ lun = N, target_lun = N }");
				uint64_t mapped = 0;
				MappedLun m;
				if (!r.known(*lt, c3, {"lun", "target_lun", "read_only"}))
					return false;
				if (!lt->get("lun"))
					return r.fail(le, c3 + "lun: missing");
				if (!r.integer(*lt, "lun", c3, &mapped, 0, 16383))
					return false;
				m.target_lun = mapped;
				if (!r.integer(*lt, "target_lun", c3, &m.target_lun, 0, 16383) ||
				    !r.boolean(*lt, "read_only", c3, &m.read_only))
					return false;
				if (std::none_of(
				        target_luns.begin(), target_luns.end(),
				        [&](const LunCfg &l) { return l.lun == m.target_lun; }))
					return r.fail(le, c3 +
					                      "target_lun: the target has no LUN " +
					                      std::to_string(m.target_lun));
				if (!a.luns.emplace(mapped, m).second)
					return r.fail(le, c3 + "lun: " + std::to_string(mapped) +
					                      " mapped twice for " + initiator);
			}
		}
		if (std::find(acls->begin(), acls->end(), initiator) == acls->end())
			acls->push_back(initiator);
		if (!a.empty())
			(*out)[initiator] = std::move(a);
	}
	return true;
}

bool load_file(const std::string &path, Config *c, std::string *why)
{
	toml::table t;
	try {
		t = toml::parse_file(path);
	} catch (const toml::parse_error &e) {
		*why = path + ":" + std::to_string(e.source().begin.line) + ":" +
		       std::to_string(e.source().begin.column) + ": " +
		       std::string(e.description());
		return false;
	}
	c->source = path;
	Reader r(path, why);
	if (!r.known(t, "",
	             {"workers", "worker_cpus", "state_dir", "portals", "iser_portals",
	              "srp_portals", "rdma_device", "iser", "srp", "iscsi", "target",
	              "admin_socket", "admin_group", "admin_tcp", "metrics_http", "gateway"}))
		return false;
	if (const toml::node *n = t.get("gateway")) {
		const toml::table *gt = n->as_table();
		if (!gt)
			return r.fail(*n, "gateway: must be a table");
		const std::string ctx = "gateway.";
		GatewayCfg &g = c->gateway;
		if (!r.known(*gt, ctx,
		             {"name", "pool", "namespace", "cluster", "conf", "client", "keyring",
		              "lease", "hold_off"}) ||
		    !r.str(*gt, "name", ctx, &g.name) || !r.str(*gt, "pool", ctx, &g.pool) ||
		    !r.str(*gt, "namespace", ctx, &g.nspace) ||
		    !r.str(*gt, "cluster", ctx, &g.cluster) || !r.str(*gt, "conf", ctx, &g.conf) ||
		    !r.str(*gt, "client", ctx, &g.client) ||
		    !r.str(*gt, "keyring", ctx, &g.keyring) ||
		    !r.integer(*gt, "lease", ctx, &g.lease_s, 3, 600) ||
		    !r.integer(*gt, "hold_off", ctx, &g.hold_off_s, 0, 3600))
			return false;
		// A name and a cluster a record and an object name can carry; the pool named.
		if (!ulp::ha::ha_name_valid(g.name))
			return r.fail(
			    *n, "gateway.name: 1 to 64 of A-Z a-z 0-9 . _ - required, not \"" +
			            g.name + "\"");
		if (!ulp::ha::ha_name_valid(g.cluster))
			return r.fail(*n, "gateway.cluster: 1 to 64 of A-Z a-z 0-9 . _ -, not \"" +
			                      g.cluster + "\"");
		if (g.pool.empty())
			return r.fail(*n, "gateway.pool: required (where the cluster map lives)");
	}
	if (!r.integer(t, "workers", "", &c->workers, 1, 64) ||
	    !r.str(t, "worker_cpus", "", &c->worker_cpus) ||
	    !r.portals(t, "portals", &c->portals, 3260) ||
	    !r.portals(t, "iser_portals", &c->iser_portals, 3260) ||
	    !r.portals(t, "srp_portals", &c->srp_portals, -1) ||
	    !r.str(t, "rdma_device", "", &c->rdma_device) ||
	    !r.str(t, "state_dir", "", &c->state_dir) ||
	    !r.str(t, "admin_socket", "", &c->admin_socket) ||
	    !r.str(t, "admin_group", "", &c->admin_group) ||
	    !r.str(t, "admin_tcp", "", &c->admin_tcp) ||
	    !r.str(t, "metrics_http", "", &c->metrics_http))
		return false;
	if (sockaddr_in a;
	    !c->metrics_http.empty() && !ulp::admin::parse_listen_address(c->metrics_http, &a))
		return r.fail(*t.get("metrics_http"),
		              "metrics_http: expected \"PORT\" or \"IPv4:PORT\", not \"" +
		                  c->metrics_http + "\"");
	if (const toml::node *n = t.get("srp")) {
		const toml::table *st = n->as_table();
		if (!st)
			return r.fail(*n, "srp: must be a table");
		const std::string ctx = "srp.";
		if (!r.known(*st, ctx,
		             {"id_ext", "ioc_guid", "srq", "acls", "acl", "target", "rq_size",
		              "srq_size", "sq_size", "max_it_iu_len", "immediate_data",
		              "max_channels", "buffer_pool", "rtpi"}))
			return false;
		for (const char *k : {"id_ext", "ioc_guid"}) {
			const toml::node *v = st->get(k);
			if (!v)
				continue;
			uint64_t x = 0;
			if (!v->is_string() || !parse_hex64(*v->value<std::string>(), &x))
				return r.fail(*v,
				              ctx + k + " must be a string of 1 to 16 hex digits");
			(std::strcmp(k, "id_ext") == 0 ? c->srp.id_ext : c->srp.ioc_guid) = x;
		}
		std::vector<std::string> acls;
		const toml::node *an = nullptr;
		// Sizes: SRP_CMD with no data descriptor is 48 bytes (SRP r16a 6.9), a receive ring
		// of one leaves no credit to answer with; the upper bounds are what a device takes.
		if (!r.boolean(*st, "srq", ctx, &c->srp.srq) ||
		    !r.strings(*st, "acls", ctx, &acls, &an) ||
		    !r.str(*st, "target", ctx, &c->srp.target) ||
		    !r.integer(*st, "rq_size", ctx, &c->srp.rq_size, 2, 16384) ||
		    !r.integer(*st, "srq_size", ctx, &c->srp.srq_size, 16, 65536) ||
		    !r.integer(*st, "sq_size", ctx, &c->srp.sq_size, 16, 65536) ||
		    !r.integer(*st, "max_it_iu_len", ctx, &c->srp.max_it_iu_len, 64, 1 << 20) ||
		    !r.boolean(*st, "immediate_data", ctx, &c->srp.immediate_data) ||
		    !r.integer(*st, "max_channels", ctx, &c->srp.max_channels, 1, 1024) ||
		    !r.size(*st, "buffer_pool", ctx, &c->srp.heap_bytes) ||
		    !r.integer(*st, "rtpi", ctx, &c->srp.rtpi, 1, 65535))
			return false;
		for (const std::string &a : acls) {
			std::string x;
			if (!normalize_srp_acl(a, &x))
				return r.fail(*an,
				              "srp.acls entries are \"0x\" + 32 hex digits (an "
				              "initiator port id) or an IP address, not " +
				                  a);
			c->srp.acls.push_back(x);
		}
	}
	if (const toml::node *n = t.get("iser")) {
		const toml::table *it = n->as_table();
		if (!it)
			return r.fail(*n, "iser: must be a table");
		uint64_t heap = c->iser.heap_bytes;
		// send_ring: every PDU the target sends needs a buffer of it (a login response
		// at least); 0 is the default (cmd_window + 32).
		if (!r.known(*it, "iser.",
		             {"recv_data_segment_length", "buffer_pool", "send_ring"}) ||
		    !r.integer(*it, "recv_data_segment_length", "iser.", &c->iser.recv_dsl, 512,
		               1 << 20) ||
		    !r.size(*it, "buffer_pool", "iser.", &heap) ||
		    !r.integer(*it, "send_ring", "iser.", &c->iser.send_ring, 0, 65536))
			return false;
		c->iser.heap_bytes = heap;
	}
	if (const toml::node *n = t.get("iscsi")) {
		const toml::table *it = n->as_table();
		if (!it)
			return r.fail(*n, "iscsi: must be a table");
		auto &pr = c->prefs;
		const std::string ctx = "iscsi.";
		std::string digests;
		if (!r.known(*it, ctx,
		             {"max_recv_data_segment_length", "max_burst_length",
		              "first_burst_length", "immediate_data", "initial_r2t",
		              "max_outstanding_r2t", "digests", "cmd_window", "nop_interval",
		              "nop_timeout", "discovery", "discovery_chap",
		              "discovery_mutual_chap"}) ||
		    !r.integer(*it, "max_recv_data_segment_length", ctx, &pr.max_recv_dsl, 512,
		               1 << 24) ||
		    !r.integer(*it, "max_burst_length", ctx, &pr.max_burst_length, 512, 1 << 24) ||
		    !r.integer(*it, "first_burst_length", ctx, &pr.first_burst_length, 512,
		               1 << 24) ||
		    !r.boolean(*it, "immediate_data", ctx, &pr.immediate_data) ||
		    !r.boolean(*it, "initial_r2t", ctx, &pr.initial_r2t) ||
		    !r.integer(*it, "max_outstanding_r2t", ctx, &pr.max_outstanding_r2t, 1,
		               65535) ||
		    !r.str(*it, "digests", ctx, &digests) ||
		    !r.integer(*it, "cmd_window", ctx, &c->cmd_window, 1, 4096) ||
		    !r.integer(*it, "nop_interval", ctx, &c->nop_interval, 0, 3600) ||
		    !r.integer(*it, "nop_timeout", ctx, &c->nop_timeout, 1, 3600) ||
		    !r.boolean(*it, "discovery", ctx, &c->discovery) ||
		    !r.chap(*it, "discovery_chap", ctx, &c->discovery_chap) ||
		    !r.chap(*it, "discovery_mutual_chap", ctx, &c->discovery_mutual_chap))
			return false;
		if (c->discovery_mutual_chap && !c->discovery_chap)
			return r.fail(*it->get("discovery_mutual_chap"),
			              "iscsi.discovery_mutual_chap: needs discovery_chap");
		std::string w;
		if (!digests.empty() && !set_digests(digests, &pr, &w))
			return r.fail(*it->get("digests"), "iscsi.digests: " + w);
	}
	if (const toml::node *n = t.get("target")) {
		LuIdentitySet ids; // every LUN of every target so far
		const toml::array *ts = n->as_array();
		if (!ts)
			return r.fail(*n, "target: must be an array of tables ([[target]])");
		for (const toml::node &te : *ts) {
			const toml::table *tt = te.as_table();
			if (!tt)
				return r.fail(te, "[[target]] entries must be tables");
			TargetCfg tc;
			const std::string ctx = "target.";
			if (!r.known(*tt, ctx,
			             {"name", "alias", "chap", "mutual_chap", "acls",
			              "allow_target_reset", "lun", "acl", "allow_no_chap",
			              "allowed_addresses", "portal_group", "alua", "redirect",
			              "redirect_permanent"}))
				return false;
			if (!tt->get("name"))
				return r.fail(te, "target.name: missing");
			const toml::node *an = nullptr;
			if (!r.str(*tt, "name", ctx, &tc.name) ||
			    !r.str(*tt, "alias", ctx, &tc.alias) ||
			    !r.chap(*tt, "chap", ctx, &tc.chap) ||
			    !r.chap(*tt, "mutual_chap", ctx, &tc.mutual_chap) ||
			    !r.strings(*tt, "acls", ctx, &tc.acls, &an) ||
			    !r.boolean(*tt, "allow_target_reset", ctx, &tc.allow_target_reset) ||
			    !r.boolean(*tt, "allow_no_chap", ctx, &tc.allow_no_chap) ||
			    !r.strings(*tt, "allowed_addresses", ctx, &tc.allowed_addresses) ||
			    !r.str(*tt, "redirect", ctx, &tc.redirect) ||
			    !r.boolean(*tt, "redirect_permanent", ctx, &tc.redirect_permanent))
				return false;
			if (std::string w; const toml::node *rn = tt->get("redirect")) {
				if (!check_redirect(tc.redirect, &w))
					return r.fail(*rn, "target.redirect: " + w);
			}
			if (const toml::array *aa = (*tt)["allowed_addresses"].as_array())
				for (const toml::node &e : *aa)
					if (iscsi::target::AddrPrefix p;
					    !iscsi::target::parse_addr_prefix(
					        *e.value<std::string>(), &p))
						return r.fail(
						    e, "target.allowed_addresses: " +
						           *e.value<std::string>() +
						           " is not an address or ADDRESS/BITS "
						           "prefix (no host bits past it)");
			if (const toml::node *ln = tt->get("lun")) {
				const toml::array *ls = ln->as_array();
				if (!ls)
					return r.fail(*ln, "target.lun: must be an array of tables "
					                   "([[target.lun]])");
				for (const toml::node &le : *ls) {
					const toml::table *lt = le.as_table();
					if (!lt)
						return r.fail(
						    le, "[[target.lun]] entries must be tables");
					LunCfg l;
					l.lun = tc.luns.size();
					if (!load_lun(r, *lt, "target.lun.", &l))
						return false;
					for (const LunCfg &o : tc.luns)
						if (o.lun == l.lun)
							return r.fail(
							    *lt, "target " + tc.name + ": LUN " +
							             std::to_string(l.lun) +
							             " twice");
					if (std::string w = ids.add(tc.name, l); !w.empty())
						return r.fail(*lt, w);
					tc.luns.push_back(l);
				}
			}
			std::vector<Portal> all = c->portals;
			all.insert(all.end(), c->iser_portals.begin(), c->iser_portals.end());
			if (!load_portal_groups(r, *tt, all, &tc) || !load_alua(r, *tt, &tc) ||
			    !load_acl_entries(r, *tt, "target.acl", true, tc.luns, &tc.acls,
			                      &tc.acl_cfg))
				return false;
			std::string w;
			if (!check_target(tc, &w))
				return r.fail(te, w);
			for (const TargetCfg &o : c->targets)
				if (o.name == tc.name)
					return r.fail(te,
					              "target " + tc.name + " is defined twice");
			c->targets.push_back(std::move(tc));
		}
	}
	// [[srp.acl]] maps the LUNs of the target SRP exports: read once the targets are.
	if (const toml::table *st = t["srp"].as_table()) {
		std::vector<LunCfg> none;
		const std::vector<LunCfg> *luns = &none;
		for (const TargetCfg &tc : c->targets)
			if (tc.name ==
			    (c->srp.target.empty() ? c->targets.front().name : c->srp.target))
				luns = &tc.luns;
		if (!load_acl_entries(r, *st, "srp.acl", false, *luns, &c->srp.acls,
		                      &c->srp.acl_cfg))
			return false;
	}
	// The SRP port is a port of the target it exports: its rtpi must be none of the
	// target's portal groups' (SPC-4 4.3.4: unique in the target device).
	const TargetCfg *ex = nullptr;
	for (const TargetCfg &o : c->targets)
		if (c->srp.target.empty() ? ex == nullptr : o.name == c->srp.target)
			ex = &o;
	if (ex) {
		const uint16_t id = srp_rtpi(c->srp, *ex);
		bool clash = id == 0;
		for (const PortalGroupCfg &g : ex->portal_groups)
			clash = clash || g.port_id() == id;
		if (clash)
			return r.fail(t.get("srp") ? *t.get("srp") : *t.get("target"),
			              "srp.rtpi " + std::to_string(id) +
			                  ": the rtpi of a portal "
			                  "group of " +
			                  ex->name + " (give srp.rtpi another value)");
	}
	return true;
}

} // namespace

bool parse_size(const std::string &s, uint64_t *out)
{
	return ulp::admin::parse_size(s, out); // one parser of sizes, the admin socket's too
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
	app.add_option(
	    "--lun", f.luns,
	    "N:KIND[:key=value,...], KIND ram|file|block|rbd|null, keys size, path, "
	    "bs, pbs, ro, removable, direct, write_cache, qd; rbd (a Ceph RBD image): "
	    "pool, image (both required), namespace, conf (ceph.conf), client (id "
	    "without client.), keyring, group (LUNs of a group share one Ceph "
	    "client), create=1 (make the image, of size=, when missing), timeout "
	    "(seconds, default 30), atomic_unit (WRITE ATOMIC's alignment and "
	    "longest length, default 128K, 0 none), and size (default: the image's; else it must "
	    "match), bs, pbs, ro, removable, qd; e.g. 0:ram:size=1G, "
	    "1:file:path=/srv/d.img,size=10G or "
	    "2:rbd:pool=rbd,image=disk2,create=1,size=64G (repeatable)");
	app.add_option("--acl", f.acls, "an initiator name allowed in (repeatable; none: open)");
	app.add_option("--acl-lun", f.acl_luns,
	               "INITIATOR=LUN[:TARGET_LUN][:ro]: the initiator sees the target's LUN as "
	               "LUN (repeatable; it then sees only what it maps; it joins --acl)");
	app.add_option("--chap", f.chap, "USER:SECRET the initiators must prove (CHAP)");
	app.add_option("--mutual-chap", f.mutual_chap,
	               "USER:SECRET the target proves to the initiators (mutual CHAP)");
	app.add_option("--workers", f.workers, "event-loop threads (default 1)");
	app.add_option("--worker-cpus", f.worker_cpus,
	               "LIST: the CPUs the workers run on, one each in turn, as a cpulist "
	               "(e.g. 0-3,8; default: where the kernel puts them)");
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
	app.add_option("--admin-socket", f.admin_socket,
	               std::string("the JSON-RPC admin socket ulpctl talks to (e.g. ") +
	                   kDefaultAdminSocket + "; default: none)");
	app.add_option("--admin-group", f.admin_group,
	               "a group whose members may use the admin socket too (mode 0660)");
	app.add_flag("--check", f.check,
	             "check the configuration (the file and these flags) and exit: 0 when it "
	             "loads, 2 with the error (file:line:column) when not; opens nothing");
	app.add_option("--admin-tcp", f.admin_tcp,
	               "[HOST:]PORT: an admin listener on TCP as well (PORT alone: 127.0.0.1); "
	               "TCP peers carry no credentials");
	app.add_option("--metrics-http", f.metrics_http,
	               "[HOST:]PORT: serve GET /metrics, the statistics in Prometheus' text "
	               "format (as `ulpctl stats --prometheus`), over HTTP (PORT alone: "
	               "127.0.0.1; another address is served with a warning; default: none)");
}

bool check_lun(const std::string &target, const LunCfg &l, std::string *why)
{
	const std::string who = (target.empty() ? std::string() : "target " + target + " ") +
	                        "LUN " + std::to_string(l.lun) + ": ";
	if (l.lun > 16383) {
		*why = "LUN numbers go up to 16383";
		return false;
	}
	const std::string &k = l.bs.kind;
	if (k != "ram" && k != "file" && k != "block" && k != "rbd" && k != "null") {
		*why = who + "backstore must be ram, file, block, rbd or null, not \"" + k + "\"";
		return false;
	}
	// What a request (the admin socket's) set that this kind has no use for: refused, not
	// ignored, so that nobody believes a setting took effect.
	const scsi::RbdConfig &rbd = l.bs.rbd;
	const scsi::RbdConfig defaults{};
	const std::pair<bool, const char *> given[] = {
	    {!l.bs.path.empty(), "path"},
	    {!l.bs.direct, "direct"},
	    {!l.bs.write_cache, "write_cache"},
	    {!rbd.pool.empty(), "pool"},
	    {!rbd.image.empty(), "image"},
	    {!rbd.nspace.empty(), "namespace"},
	    {!rbd.conf.empty(), "conf"},
	    {!rbd.client.empty(), "client"},
	    {!rbd.keyring.empty(), "keyring"},
	    {!rbd.group.empty(), "group"},
	    {rbd.create, "create"},
	    {rbd.timeout_s != defaults.timeout_s, "timeout"},
	    {rbd.atomic_unit != defaults.atomic_unit, "atomic_unit"},
	};
	for (const auto &[set, key] : given)
		if (std::string m = lun_key_misplaced(k, key); set && !m.empty()) {
			*why = who + m;
			return false;
		}
	if (k == "rbd") {
		if (rbd.pool.empty()) {
			*why = who + "an rbd backstore needs a pool (pool=NAME)";
			return false;
		}
		if (rbd.image.empty()) {
			*why = who + "an rbd backstore needs an image (image=NAME)";
			return false;
		}
		if (rbd.create && l.bs.size == 0) {
			*why = who + "create needs a size: the image's, e.g. size=64G";
			return false;
		}
		if (rbd.timeout_s < 1 || rbd.timeout_s > 3600) {
			*why = who + "timeout must be 1..3600 seconds";
			return false;
		}
		if (!scsi::rbd_atomic_unit_ok(rbd.atomic_unit, l.bs.block_size)) {
			*why = who +
			       "atomic_unit must be a power of two of at least the block size "
			       "(or 0: no WRITE ATOMIC)";
			return false;
		}
	}
	if ((k == "file" || k == "block") && l.bs.path.empty()) {
		*why = who + "a " + k + " backstore needs a path";
		return false;
	}
	if ((k == "ram" || k == "null") && l.bs.size == 0) {
		*why = who + "a " + k + " backstore needs a size";
		return false;
	}
	if (l.bs.queue_depth == 0 || l.bs.queue_depth > 4096) {
		*why = who + "queue_depth must be 1..4096";
		return false;
	}
	if (std::string w; !check_lu_identity(l.id, &w)) {
		*why = who + w;
		return false;
	}
	scsi::LuConfig lc;
	lc.block_size = l.bs.block_size;
	lc.physical_block_size = l.physical_block_size;
	if (const char *bad = scsi::lu_config_check(lc)) {
		*why = who + bad;
		return false;
	}
	return true;
}

bool check_target(const TargetCfg &t, std::string *why)
{
	if (!iscsi::valid_iscsi_name(t.name)) {
		*why = "target name " + t.name + " is not a valid iSCSI name (iqn./eui./naa.)";
		return false;
	}
	std::set<uint64_t> ids;
	for (const LunCfg &l : t.luns) {
		if (!ids.insert(l.lun).second) {
			*why = "target " + t.name + ": LUN " + std::to_string(l.lun) + " twice";
			return false;
		}
		if (!check_lun(t.name, l, why))
			return false;
	}
	if (!t.redirect.empty() && !check_redirect(t.redirect, why)) {
		*why = "target " + t.name + ": " + *why;
		return false;
	}
	if (t.redirect.empty() && t.redirect_permanent) {
		*why = "target " + t.name + ": redirect_permanent without a redirect";
		return false;
	}
	if (t.mutual_chap && !t.chap) {
		*why = "target " + t.name + ": mutual CHAP needs CHAP";
		return false;
	}
	for (const auto *c : {&t.chap, &t.mutual_chap})
		if (*c && !check_chap(**c, why))
			return false;
	for (const std::string &a : t.acls)
		if (!iscsi::valid_iscsi_name(a)) {
			*why = "ACL entry " + a + " is not a valid iSCSI name";
			return false;
		}
	for (const std::string &a : t.allowed_addresses)
		if (iscsi::target::AddrPrefix p; !iscsi::target::parse_addr_prefix(a, &p)) {
			*why = "target " + t.name + ": allowed address " + a +
			       " is not an address or ADDRESS/BITS prefix";
			return false;
		}
	for (auto &[name, a] : t.acl_cfg) {
		if (std::find(t.acls.begin(), t.acls.end(), name) == t.acls.end()) {
			*why =
			    "target " + t.name + ": " + name + " has a LUN map or CHAP but no ACL";
			return false;
		}
		for (auto &[mapped, m] : a.luns)
			if (mapped > 16383 || !ids.count(m.target_lun)) {
				*why = "target " + t.name + ": ACL " + name + " maps LUN " +
				       std::to_string(mapped) + " to LUN " +
				       std::to_string(m.target_lun) +
				       ", which the target does not have";
				return false;
			}
		if (a.mutual_chap && !a.chap) {
			*why = "target " + t.name + ": ACL " + name + ": mutual CHAP needs CHAP";
			return false;
		}
		for (const auto *c : {&a.chap, &a.mutual_chap})
			if (*c && !check_chap(**c, why))
				return false;
	}
	return true;
}

bool check_portal_groups(const TargetCfg &t, const std::vector<Portal> &portals, std::string *why)
{
	std::set<uint16_t> tags, rtpis;
	std::set<std::string> in;
	for (const PortalGroupCfg &g : t.portal_groups) {
		const std::string gs =
		    "target " + t.name + " portal group " + std::to_string(g.tag);
		if (g.tag == 0 || !tags.insert(g.tag).second) {
			*why = gs + ": tag 0 or twice";
			return false;
		}
		if (!rtpis.insert(g.port_id()).second) {
			*why = gs + ": rtpi " + std::to_string(g.port_id()) +
			       " is another group's (a group's rtpi is its tag unless given)";
			return false;
		}
		for (const Portal &p : g.portals) {
			const std::string a = portal_str(p);
			if (std::none_of(portals.begin(), portals.end(),
			                 [&](const Portal &o) { return portal_str(o) == a; })) {
				*why = gs + ": " + a + " is not one of the portals or iser_portals";
				return false;
			}
			if (!in.insert(a).second) {
				*why = gs + ": " + a + " is in two portal groups";
				return false;
			}
		}
	}
	return true;
}

uint16_t srp_rtpi(const SrpCfg &s, const TargetCfg &exported)
{
	if (s.rtpi)
		return s.rtpi;
	uint16_t hi = 1; // a target without groups: one port, rtpi 1
	for (const PortalGroupCfg &g : exported.portal_groups)
		hi = std::max(hi, g.port_id());
	return hi == 65535 ? 0 : uint16_t(hi + 1); // 0: none left (load_file refuses it)
}

bool check_alua(const TargetCfg &t, std::string *why)
{
	const std::string ts = "target " + t.name + " alua: ";
	if (t.alua.tpgs > ulp::scsi::TPGS_BOTH) {
		*why = ts + "tpgs above 3";
		return false;
	}
	if (t.alua.tpgs == ulp::scsi::TPGS_NONE && !t.alua.groups.empty()) {
		*why = ts + "groups need tpgs (implicit, explicit or both)";
		return false;
	}
	if (t.alua.groups.size() > ulp::scsi::Alua::kMaxGroups) {
		*why = ts + "more than " + std::to_string(ulp::scsi::Alua::kMaxGroups) + " groups";
		return false;
	}
	std::set<uint16_t> tags, ids, taken;
	for (const PortalGroupCfg &g : t.portal_groups)
		tags.insert(g.tag);
	if (tags.empty())
		tags.insert(1); // the one group of a target without portal groups
	bool srp = false;
	for (const AluaGroupCfg &g : t.alua.groups) {
		const std::string gs = ts + "group " + std::to_string(g.id) + ": ";
		if (!ids.insert(g.id).second) {
			*why = gs + "id twice";
			return false;
		}
		for (uint16_t tag : g.portal_groups) {
			if (!tags.count(tag)) {
				*why = gs + "portal group " + std::to_string(tag) +
				       " is not one of " + t.name + "'s";
				return false;
			}
			if (!taken.insert(tag).second) {
				*why = gs + "portal group " + std::to_string(tag) +
				       " is in two groups";
				return false;
			}
		}
		if (g.srp && srp) {
			*why = gs + "the SRP port is in two groups";
			return false;
		}
		srp = srp || g.srp;
	}
	return true;
}

ulp::scsi::AluaConfig alua_config(const TargetCfg &t, const SrpCfg &srp)
{
	ulp::scsi::AluaConfig a;
	a.tpgs = t.alua.tpgs;
	a.implicit_transition_secs = t.alua.implicit_transition_secs;
	for (const AluaGroupCfg &g : t.alua.groups) {
		ulp::scsi::AluaGroup ag;
		ag.id = g.id;
		ag.state = g.state;
		ag.pref = g.preferred;
		for (uint16_t tag : g.portal_groups) {
			uint16_t rtpi = tag; // no portal groups: tag 1, rtpi 1
			for (const PortalGroupCfg &pg : t.portal_groups)
				if (pg.tag == tag)
					rtpi = pg.port_id();
			ag.rtpis.push_back(rtpi);
		}
		if (g.srp)
			ag.rtpis.push_back(srp_rtpi(srp, t));
		a.groups.push_back(std::move(ag));
	}
	return a;
}

scsi::NodeAcl node_acl(const std::string &initiator, const AclCfg *a)
{
	scsi::NodeAcl n;
	n.initiator = initiator;
	if (a)
		for (auto &[mapped, m] : a->luns)
			n.luns[mapped] = {m.target_lun, m.read_only};
	return n;
}

bool check_gateway(const Config &c, std::string *why)
{
	for (const TargetCfg &t : c.targets) {
		if (t.alua.tpgs != ulp::scsi::TPGS_NONE) {
			*why =
			    "target " + t.name +
			    ": [target.alua] with [gateway]: the cluster decides the states (each "
			    "gateway's ports are a group of their own)";
			return false;
		}
		for (const LunCfg &l : t.luns) {
			const std::string where =
			    "target " + t.name + " LUN " + std::to_string(l.lun);
			if (l.bs.kind != "rbd") {
				*why =
				    where + ": backstore " + l.bs.kind +
				    " with [gateway]: every LUN of a gateway is an rbd image the "
				    "gateways share";
				return false;
			}
			const std::string &g = l.bs.rbd.group.empty() ? "default" : l.bs.rbd.group;
			if (!ulp::ha::ha_name_valid(g)) {
				*why = where + ": group \"" + g +
				       "\": a gateway's group name is 1 to 64 of A-Z a-z 0-9 . _ -";
				return false;
			}
		}
	}
	return true;
}

bool load_config_file(const std::string &path, Config *c, std::string *why)
{
	// The defaults build_config starts from, then the file alone.
	storage_prefs(&c->prefs);
	return load_file(path, c, why);
}

bool build_config(const Flags &f, Config *c, std::string *why)
{
	storage_prefs(&c->prefs);
	if (!f.config.empty() && !load_file(f.config, c, why))
		return false;
	if (!f.admin_socket.empty())
		c->admin_socket = f.admin_socket;
	if (!f.admin_group.empty())
		c->admin_group = f.admin_group;
	if (!f.admin_tcp.empty())
		c->admin_tcp = f.admin_tcp;
	if (!f.metrics_http.empty()) {
		if (sockaddr_in a; !ulp::admin::parse_listen_address(f.metrics_http, &a)) {
			*why = "--metrics-http " + f.metrics_http + ": expected PORT or IPv4:PORT";
			return false;
		}
		c->metrics_http = f.metrics_http;
	}
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
	if (!f.worker_cpus.empty())
		c->worker_cpus = f.worker_cpus;
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

	// The flag-defined target (joins the file's, if any). Without a file, a daemon with no
	// target would serve nothing: the first one is made from the flags. A file may hold
	// none (the packaged configuration): the daemon then starts empty and ulpctl adds
	// targets while it runs.
	if (!f.luns.empty() || !f.target.empty() || (c->targets.empty() && f.config.empty())) {
		TargetCfg t;
		t.name = f.target.empty() ? "iqn.2026-11.org.ulp:target" : f.target;
		for (const std::string &l : f.luns) {
			LunCfg lc;
			if (!parse_lun_flag(l, &lc, why))
				return false;
			t.luns.push_back(lc);
		}
		if (t.luns.empty()) {
			*why = "target " + t.name +
			       " has no LUN (add --lun 0:ram:size=1G, for example)";
			return false;
		}
		t.acls = f.acls;
		for (const std::string &m : f.acl_luns)
			if (!parse_acl_lun_flag(m, &t, why))
				return false;
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
	if (!parse_cpu_list(c->worker_cpus, &c->cpus, why))
		return false;
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
	if (c->srp.heap_bytes < (1u << 20) || c->srp.heap_bytes > (64ull << 30)) {
		*why = "srp.buffer_pool must be 1M..64G";
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
		if (!check_target(t, why))
			return false;
		if (!names.insert(t.name).second) {
			*why = "target " + t.name + " is defined twice";
			return false;
		}
	}
	if (c->gateway.enabled() && !check_gateway(*c, why))
		return false;
	// The file's LUNs and the flags' together: one identity per LU of the daemon.
	LuIdentitySet ids;
	for (const TargetCfg &t : c->targets)
		for (const LunCfg &l : t.luns)
			if (std::string w = ids.add(t.name, l); !w.empty()) {
				*why = w;
				return false;
			}
	return true;
}

} // namespace targetd
