// SPDX-License-Identifier: MIT
// tools/ulpctl/import_lio_storage.cc - saveconfig.json's storage objects as ulp-targetd
// LUNs (what is mapped and why: import_targetcli.cc's header).
#include "tools/ulpctl/import_targetcli.h"

#include <cctype>
#include <set>

namespace ulpctl::import::lio
{
namespace
{

// LIO's defaults (target_core_base.h DA_*, iscsi_target_core.h TA_*, and the kernel's
// iSCSI parameter defaults): a value equal to one of them was not set by anyone.
const std::map<std::string, std::string> kDeviceDefaults = {
    {"emulate_3pc", "1"},       {"emulate_caw", "1"},
    {"emulate_dpo", "1"},       {"emulate_fua_read", "1"},
    {"emulate_fua_write", "1"}, {"emulate_model_alias", "1"},
    {"emulate_pr", "1"},        {"emulate_rest_reord", "0"},
    {"emulate_tas", "1"},       {"emulate_ua_intlck_ctrl", "0"},
    {"enforce_pr_isids", "1"},  {"force_pr_aptpl", "0"},
    {"is_nonrot", "0"},         {"pi_prot_format", "0"},
    {"pi_prot_type", "0"},      {"pi_prot_verify", "0"},
    {"emulate_rsoc", "1"},      {"complete_type", "0"},
};
// Computed by LIO from the device (not settings; ulp-targetd computes its own).
const std::set<std::string> kDeviceDerived = {"hw_block_size",
                                              "hw_max_sectors",
                                              "hw_pi_prot_type",
                                              "hw_queue_depth",
                                              "optimal_sectors",
                                              "max_unmap_lba_count",
                                              "max_unmap_block_desc_count",
                                              "unmap_granularity",
                                              "unmap_granularity_alignment",
                                              "max_write_same_len",
                                              "emulate_tpu",
                                              "emulate_tpws",
                                              "unmap_zeroes_data",
                                              "alua_support",
                                              "pgr_support",
                                              "submit_type"};

} // namespace

// An object's LUN settings, or usable false with why listed.
bool load_storage_object(Reader &rd, const json &so, const std::string &path, StorageObject *out)
{
	std::string plugin, name, dev, wwn, config, control;
	uint64_t size = 0, hw_max_sectors = 0;
	bool write_back = false, readonly = false, nullio = false, exclusive = true, aio = false;
	if (!rd.obj(so, path) || !rd.str(so, "plugin", path, &plugin) ||
	    !rd.str(so, "name", path, &name) || !rd.str(so, "dev", path, &dev) ||
	    !rd.str(so, "wwn", path, &wwn) || !rd.str(so, "config", path, &config) ||
	    !rd.u64(so, "size", path, &size) || !rd.boolean(so, "write_back", path, &write_back) ||
	    !rd.boolean(so, "readonly", path, &readonly) ||
	    !rd.boolean(so, "nullio", path, &nullio) ||
	    !rd.boolean(so, "exclusive", path, &exclusive) || !rd.boolean(so, "aio", path, &aio) ||
	    !rd.u64(so, "hw_max_sectors", path, &hw_max_sectors))
		return false;
	if (plugin.empty() || name.empty())
		return rd.bad(path, "a storage object needs a plugin and a name");
	if (auto c = so.find("control"); c != so.end() && !c->is_null())
		control = scalar(*c);
	plugin = canonical_plugin(plugin);
	out->where = "storage object " + plugin + "/" + name;
	const std::string &w = out->where;
	rd.unknown(so, w,
	           {"plugin", "name", "dev", "wwn", "config", "size", "write_back", "readonly",
	            "nullio", "exclusive", "aio", "hw_max_sectors", "control", "attributes",
	            "alua_tpgs"});
	targetd::LunCfg &l = out->lun;
	if (plugin == "fileio") {
		if (dev.empty())
			return rd.bad(path + ".dev", "a fileio object needs its file");
		l.bs.kind = file_or_block(dev);
		l.bs.path = dev;
		if (l.bs.kind == "file")
			l.bs.size = size;
		l.bs.write_cache = write_back;
	} else if (plugin == "block") {
		if (dev.empty())
			return rd.bad(path + ".dev", "a block object needs its device");
		l.bs.kind = "block";
		l.bs.path = dev;
		l.read_only = l.bs.read_only = readonly;
		l.bs.write_cache = write_back;
		if (!exclusive)
			rd.r->skip(w, "exclusive false",
			           "ulp-targetd claims a writable block device for itself");
	} else if (plugin == "ramdisk") {
		l.bs.kind = nullio ? "null" : "ram";
		l.bs.size = size;
		if (size == 0) {
			rd.r->skip(w, "size 0", "a RAM LUN needs a size; its LUNs are left out");
			return true;
		}
	} else if (plugin == "user") {
		// tcmu-runner's handler_rbd: "rbd/POOL/IMAGE" and ";"-separated options.
		const size_t semi = config.find(';');
		const std::string head = config.substr(0, semi);
		const size_t s1 = head.find('/'), s2 = head.find('/', s1 + 1);
		if (head.rfind("rbd/", 0) != 0 || s2 == std::string::npos ||
		    s2 + 1 >= head.size() || head.find('/', s2 + 1) != std::string::npos) {
			rd.r->skip(w, "config " + config,
			           "ulp-targetd's tcmu equivalent is rbd (\"rbd/POOL/IMAGE\") "
			           "only; its LUNs are left out");
			return true;
		}
		l.bs.kind = "rbd";
		l.bs.rbd.pool = head.substr(s1 + 1, s2 - s1 - 1);
		l.bs.rbd.image = head.substr(s2 + 1);
		size_t at = semi;
		while (at != std::string::npos) {
			const size_t next = config.find(';', at + 1);
			const std::string opt = config.substr(
			    at + 1, next == std::string::npos ? std::string::npos : next - at - 1);
			at = next;
			const size_t eq = opt.find('=');
			const std::string k = opt.substr(0, eq), v = eq == std::string::npos
			                                                 ? std::string()
			                                                 : opt.substr(eq + 1);
			uint64_t n = 0;
			if (k == "conf" && !v.empty())
				l.bs.rbd.conf = v;
			else if (k == "id" && !v.empty())
				l.bs.rbd.client = v;
			else if (k == "osd_op_timeout" && !v.empty() && v.size() < 6 &&
			         std::all_of(v.begin(), v.end(), ::isdigit) &&
			         (n = std::stoull(v)) >= 1 && n <= 3600)
				l.bs.rbd.timeout_s = uint32_t(n);
			else if (!opt.empty())
				rd.r->skip(w, "config option " + opt,
				           "not an rbd option ulp-targetd has (conf, id, "
				           "osd_op_timeout of 1 to 3600 s)");
		}
		l.bs.write_cache = true; // not written for rbd; checked below
		if (hw_max_sectors && hw_max_sectors != 128)
			rd.r->skip(w, "hw_max_sectors " + std::to_string(hw_max_sectors),
			           "ulp-targetd has no transfer length key");
		if (!control.empty() && control != "\"\"")
			rd.r->skip(w, "control " + control,
			           "a tcmu ring setting; ulp-targetd has none");
	} else {
		rd.r->skip(w, "plugin " + plugin,
		           plugin == "pscsi"
		               ? "ulp-targetd does not pass SCSI devices through; "
		                 "its LUNs are left out"
		               : "not a backstore ulp-targetd has; its LUNs are left out");
		return true;
	}
	if (!wwn.empty())
		rd.r->skip(w, "wwn " + wwn,
		           "not carried over: LIO derives a 16-byte NAA 6h designator from it, "
		           "and ulp-targetd reports 8-byte ones (a LUN's serial and naa keys set "
		           "its identity)");

	static const json no_attrs = json::object();
	const json *attrs = &no_attrs;
	if (auto a = so.find("attributes"); a != so.end() && !a->is_null()) {
		if (!a->is_object())
			return rd.bad(path + ".attributes", "must be an object");
		attrs = &*a;
	}
	bool wc_attr = false; // emulate_write_cache given: it, not write_back, is WCE
	for (const auto &[k, v] : attrs->items()) {
		const std::string val = scalar(v);
		const uint64_t n = v.is_number_unsigned() ? v.get<uint64_t>() : UINT64_MAX;
		if (k == "block_size") {
			if (block_size_ok(n))
				l.bs.block_size = uint32_t(n);
			else
				rd.r->skip(w, "block_size " + val,
				           "ulp-targetd takes a power of two from 512 to 65536");
		} else if (k == "emulate_write_cache") {
			wc_attr = true;
			l.bs.write_cache = n == 1;
		} else if (k == "queue_depth") {
			if (n >= 1 && n <= 4096)
				l.bs.queue_depth = uint32_t(n);
			else
				rd.r->skip(w, "queue_depth " + val, "ulp-targetd takes 1 to 4096");
		} else if (kDeviceDerived.count(k) || is_default(kDeviceDefaults, k, val)) {
		} else {
			rd.r->skip(w, "attribute " + k + " " + val,
			           kDeviceDefaults.count(k)
			               ? "ulp-targetd has no such setting (LIO's "
			                 "default is " +
			                     kDeviceDefaults.at(k) + ")"
			               : "not an attribute this importer knows");
		}
	}
	if (l.bs.kind == "rbd") {
		if (l.bs.write_cache && wc_attr)
			rd.r->skip(w, "emulate_write_cache 1",
			           "an rbd LUN has no volatile cache (librbd's is off)");
		l.bs.write_cache = true; // the key's default: rbd refuses any other
	}
	// LIO's fileio LUN has the file's whole blocks, and so has ulp-targetd's.
	if (l.bs.kind == "file")
		l.bs.size -= l.bs.size % l.bs.block_size;
	if ((l.bs.kind == "ram" || l.bs.kind == "null") && l.bs.size % l.bs.block_size) {
		rd.r->skip(w, "size " + std::to_string(size),
		           "not a multiple of the block size; its LUNs are left out");
		return true;
	}
	const json *alua = nullptr;
	if (!rd.arr(so, "alua_tpgs", path, &alua, 1024))
		return false;
	for (const json &g : *alua) {
		std::string gname;
		if (!rd.obj(g, path + ".alua_tpgs[]") ||
		    !rd.str(g, "name", path + ".alua_tpgs[]", &gname))
			return false;
		if (gname != "default_tg_pt_gp")
			rd.r->skip(w, "ALUA group " + gname, "ulp-targetd has no ALUA groups");
	}
	out->usable = true;
	return true;
}

} // namespace ulpctl::import::lio
