// SPDX-License-Identifier: MIT
// tests/admin/ulpctl_import_test.cc - `ulpctl import` (tools/ulpctl/import.h): LIO's
// saveconfig.json and tgt's targets.conf (the samples in data/import/) converted, each
// mapped value and each listed setting checked, the file read back by the daemon's reader;
// then the program end to end: exit statuses, messages naming file and line or JSON path,
// --force, bounds; and ulp-targetd started on imported files, serving the targets, LUNs,
// ACLs and CHAP that came through (a login with the imported account, a verified write).
#include "tools/ulpctl/import.h"

#include "tests/admin/targetd_env.h"
#include "tools/ulp-targetd/config.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <toml++/toml.h>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

namespace ulp::iscsi::initiator::test_env
{
namespace
{

namespace imp = ulpctl::import;

const std::string kData = std::string(ULP_SOURCE_DIR) + "/tests/admin/data/import";
constexpr char kLioA[] = "iqn.2003-01.org.linux-iscsi.storage1.x8664:sn.4f1a2b3c4d5e";
constexpr char kLioCeph[] = "iqn.2003-01.org.linux-iscsi.storage1.x8664:sn.ceph";
constexpr char kSrpName[] = "iqn.2026-11.org.ulp.import:srpt-fe800000000000000002c90300a1b2c3";

std::string slurp(const std::string &path)
{
	std::ifstream f(path);
	return std::string((std::istreambuf_iterator<char>(f)), {});
}

void spit(const std::string &path, const std::string &text)
{
	std::ofstream(path) << text;
}

std::string replace_all(std::string s, const std::string &from, const std::string &to)
{
	for (size_t p = s.find(from); p != std::string::npos; p = s.find(from, p + to.size()))
		s.replace(p, from.size(), to);
	return s;
}

const targetd::TargetCfg *target(const targetd::Config &c, const std::string &name)
{
	for (const auto &t : c.targets)
		if (t.name == name)
			return &t;
	return nullptr;
}

const targetd::LunCfg *lun(const targetd::TargetCfg &t, uint64_t n)
{
	for (const auto &l : t.luns)
		if (l.lun == n)
			return &l;
	return nullptr;
}

// Whether a listed setting's line names both (each a substring).
::testing::AssertionResult listed(const imp::Result &r, const std::string &where,
                                  const std::string &setting)
{
	for (const auto &s : r.skipped)
		if (s.where.find(where) != std::string::npos &&
		    s.setting.find(setting) != std::string::npos)
			return ::testing::AssertionSuccess();
	std::string all;
	for (const auto &s : r.skipped)
		all += "\n  " + s.line();
	return ::testing::AssertionFailure()
	       << "no listed setting " << where << " / " << setting << " among:" << all;
}

// The imported file read back by the daemon's own reader.
void reads_back(const std::string &text, targetd::Config *out)
{
	test::TempDir d;
	const std::string f = d / "imported.toml";
	spit(f, text);
	std::string why;
	ASSERT_TRUE(targetd::load_config_file(f, out, &why)) << why << "\n" << text;
}

TEST(UlpctlImport, TargetcliMapsWhatUlpHasAndListsTheRest)
{
	imp::Result r;
	std::string why;
	ASSERT_TRUE(
	    imp::import_targetcli(slurp(kData + "/saveconfig.json"), "saveconfig.json", &r, &why))
	    << why;
	const targetd::Config &c = r.config;
	ASSERT_EQ(c.targets.size(), 3u); // the loopback target is left out
	const targetd::TargetCfg *a = target(c, kLioA);
	ASSERT_NE(a, nullptr);
	ASSERT_EQ(a->luns.size(), 3u); // LUN 3 is a pscsi object
	const targetd::LunCfg *l0 = lun(*a, 0), *l1 = lun(*a, 1), *l2 = lun(*a, 2);
	ASSERT_TRUE(l0 && l1 && l2);
	EXPECT_EQ(l0->bs.kind, "file");
	EXPECT_EQ(l0->bs.path, "/srv/iscsi/disk1.img");
	EXPECT_EQ(l0->bs.size, 64u << 20);
	EXPECT_EQ(l0->bs.block_size, 4096u);
	EXPECT_TRUE(l0->bs.write_cache);
	EXPECT_EQ(l0->bs.queue_depth, 128u);
	EXPECT_EQ(l1->bs.kind, "block");
	EXPECT_EQ(l1->bs.path, "/dev/vg0/db");
	EXPECT_FALSE(l1->bs.write_cache);
	EXPECT_EQ(l2->bs.kind, "ram");
	EXPECT_EQ(l2->bs.size, 32u << 20);
	EXPECT_EQ(a->acls, (std::vector<std::string>{"iqn.1994-05.com.redhat:client1",
	                                             "iqn.1994-05.com.redhat:client2",
	                                             "iqn.2016-04.com.example:backupsrv"}));
	ASSERT_TRUE(a->chap && a->mutual_chap);
	EXPECT_EQ(a->chap->user, "client1");
	EXPECT_EQ(a->chap->secret, "client-secret-1");
	EXPECT_EQ(a->mutual_chap->user, "target1");
	EXPECT_EQ(a->mutual_chap->secret, "mutual-secret-1");
	EXPECT_EQ(a->alias, ""); // "LIO Target", LIO's default

	const targetd::TargetCfg *b = target(c, kLioCeph);
	ASSERT_NE(b, nullptr);
	ASSERT_EQ(b->luns.size(), 1u);
	EXPECT_EQ(b->luns[0].bs.kind, "rbd");
	EXPECT_EQ(b->luns[0].bs.rbd.pool, "rbd");
	EXPECT_EQ(b->luns[0].bs.rbd.image, "vm-disk-1");
	EXPECT_EQ(b->luns[0].bs.rbd.timeout_s, 60u);
	EXPECT_FALSE(b->luns[0].read_only); // demo_mode_write_protect 0
	EXPECT_EQ(b->alias, "ceph gateway");
	EXPECT_TRUE(b->acls.empty()); // demo mode: every initiator
	EXPECT_FALSE(b->chap);

	const targetd::TargetCfg *s = target(c, kSrpName);
	ASSERT_NE(s, nullptr);
	ASSERT_EQ(s->luns.size(), 1u);
	EXPECT_EQ(s->luns[0].bs.path, "/srv/iscsi/backup.img");
	EXPECT_EQ(c.srp.target, kSrpName);
	EXPECT_EQ(c.srp.acls, std::vector<std::string>{"0x00000000000000000002c90300a1b2c4"});

	ASSERT_EQ(c.portals.size(), 2u);
	EXPECT_EQ(c.portals[0].host, "");
	EXPECT_EQ(c.portals[1].host, "192.168.10.1");
	ASSERT_EQ(c.iser_portals.size(), 1u);
	EXPECT_EQ(c.iser_portals[0].host, "192.168.10.1");
	EXPECT_EQ(c.prefs.max_recv_dsl, 262144u); // both targets set it
	EXPECT_EQ(c.prefs.max_burst_length, 1048576u);
	EXPECT_EQ(c.cmd_window, 128u); // 64 is LIO's default: ulp-targetd's stays

	EXPECT_TRUE(listed(r, "target naa.50014059f8e7d6c5", "fabric loopback"));
	EXPECT_TRUE(listed(r, "storage object pscsi/tape0", "plugin pscsi"));
	EXPECT_TRUE(listed(r, "storage object fileio/disk1", "wwn 6e5b1f0a"));
	EXPECT_TRUE(listed(r, "storage object block/db", "attribute is_nonrot 1"));
	EXPECT_TRUE(listed(r, "sn.4f1a2b3c4d5e tpg 2", "TPG 2"));
	EXPECT_TRUE(listed(r, "fabric iscsi", "discovery_enable_auth"));
	EXPECT_TRUE(listed(r, "ACL iqn.2016-04.com.example:backupsrv", "chap_userid backupsrv"));
	EXPECT_TRUE(listed(r, "ACL iqn.2016-04.com.example:backupsrv", "mapped LUN 7 -> LUN 1"));
	EXPECT_TRUE(listed(r, "ACL iqn.2016-04.com.example:backupsrv", "no mapped LUN for LUN 2"));
	EXPECT_TRUE(listed(r, "ACL iqn.2016-04.com.example:backupsrv", "nopin_timeout 5"));
	EXPECT_TRUE(listed(r, "sn.4f1a2b3c4d5e LUN 2", "write_protect for some ACLs"));
	EXPECT_TRUE(listed(r, "srpt target fe80", "fabric srpt"));
	// Nothing listed that was carried: the shared account of client1 and client2.
	for (const auto &x : r.skipped)
		EXPECT_EQ(x.where.find("client1"), std::string::npos) << x.line();

	targetd::Config back;
	reads_back(imp::render(imp::Format::Targetcli, "saveconfig.json", r), &back);
	ASSERT_EQ(back.targets.size(), 3u);
	EXPECT_EQ(back.targets[0].chap->secret, "client-secret-1");
	EXPECT_EQ(back.srp.target, kSrpName);
	EXPECT_EQ(back.prefs.max_recv_dsl, 262144u);
}

TEST(UlpctlImport, TgtMapsWhatUlpHasAndListsTheRest)
{
	imp::Result r;
	std::string why;
	size_t budget = imp::kMaxInputBytes;
	ASSERT_TRUE(imp::import_tgt(slurp(kData + "/targets.conf"), kData + "/targets.conf",
	                            imp::file_system_reader(&budget), &r, &why))
	    << why;
	const targetd::Config &c = r.config;
	ASSERT_EQ(c.targets.size(), 3u);
	const targetd::TargetCfg *vm = target(c, "iqn.2024-01.lan.example:vmstore");
	ASSERT_NE(vm, nullptr);
	ASSERT_EQ(vm->luns.size(), 2u);
	ASSERT_TRUE(lun(*vm, 1) && lun(*vm, 2));
	EXPECT_EQ(lun(*vm, 1)->bs.path, "/srv/tgt/vm1.img"); // by path, as tgt-admin
	EXPECT_EQ(lun(*vm, 2)->bs.path, "/srv/tgt/vm2.img");
	EXPECT_EQ(lun(*vm, 1)->bs.kind, "file");
	EXPECT_FALSE(lun(*vm, 1)->bs.write_cache);
	EXPECT_EQ(vm->acls, std::vector<std::string>{"iqn.1993-08.org.debian:01:4a5b6c7d8e9f"});
	ASSERT_TRUE(vm->chap && vm->mutual_chap);
	EXPECT_EQ(vm->chap->user, "vmhost");
	EXPECT_EQ(vm->chap->secret, "secretpass12");
	EXPECT_EQ(vm->mutual_chap->user, "tgtuser");

	const targetd::TargetCfg *ar = target(c, "iqn.2024-01.lan.example:archive");
	ASSERT_NE(ar, nullptr);
	ASSERT_TRUE(lun(*ar, 5) && lun(*ar, 1));
	EXPECT_TRUE(lun(*ar, 5)->read_only);
	EXPECT_EQ(lun(*ar, 5)->bs.block_size, 4096u);
	EXPECT_TRUE(lun(*ar, 1)->removable);
	EXPECT_TRUE(lun(*ar, 1)->bs.write_cache);
	EXPECT_EQ(ar->chap->user, "archiver");

	const targetd::TargetCfg *ceph = target(c, "iqn.2024-01.lan.example:ceph");
	ASSERT_NE(ceph, nullptr); // from the included conf.d/ceph.conf
	ASSERT_EQ(ceph->luns.size(), 1u);
	EXPECT_EQ(ceph->luns[0].lun, 1u);
	EXPECT_EQ(ceph->luns[0].bs.kind, "rbd");
	EXPECT_EQ(ceph->luns[0].bs.rbd.pool, "rbd");
	EXPECT_EQ(ceph->luns[0].bs.rbd.image, "vm-disk-2");
	EXPECT_EQ(ceph->luns[0].bs.rbd.conf, "/etc/ceph/ceph.conf");
	EXPECT_EQ(ceph->luns[0].bs.rbd.client, "tgt");

	EXPECT_EQ(c.prefs.max_recv_dsl, 262144u);
	EXPECT_EQ(c.prefs.max_burst_length, 1048576u);
	ASSERT_EQ(c.portals.size(), 1u);
	EXPECT_EQ(c.portals[0].port, 3260);

	EXPECT_TRUE(listed(r, "archive", "initiator-address 192.168.100.0/24"));
	EXPECT_TRUE(listed(r, "archive", "incominguser second"));
	EXPECT_TRUE(listed(r, "archive.img", "vendor_id ARCHIVE"));
	EXPECT_TRUE(listed(r, "archive.img", "scsi_sn ARC0001"));
	EXPECT_EQ(r.skipped.size(), 4u) << imp::header(imp::Format::Tgt, "x", r);

	targetd::Config back;
	reads_back(imp::render(imp::Format::Tgt, "targets.conf", r), &back);
	ASSERT_EQ(back.targets.size(), 3u);
	EXPECT_EQ(back.targets[1].mutual_chap->secret, "mutualpass34");
}

TEST(UlpctlImport, TgtSettingsThatDifferBetweenTargetsAreListedNotGuessed)
{
	imp::Result r;
	std::string why;
	ASSERT_TRUE(imp::import_tgt("<target iqn.2024-01.x:a>\nbacking-store /srv/a\n"
	                            "MaxBurstLength 524288\n</target>\n"
	                            "<target iqn.2024-01.x:b>\nbacking-store /srv/b\n</target>\n",
	                            "t.conf", imp::file_system_reader(nullptr), &r, &why))
	    << why;
	EXPECT_EQ(r.config.prefs.max_burst_length, 1048576u); // ulp-targetd's default kept
	EXPECT_TRUE(listed(r, "target iqn.2024-01.x:a", "MaxBurstLength 524288"));
}

// ---- The program ------------------------------------------------------------------------

struct ImportRun {
	int rc = -1;
	std::string out, err;
};

ImportRun ulpctl_import(std::vector<std::string> args)
{
	ImportRun r;
	args.insert(args.begin(), "import");
	r.rc = test::run_program(ULPCTL_PATH, args, &r.out, &r.err, 30s);
	return r;
}

TEST(UlpctlImport, ExitStatusesAndMessages)
{
	test::TempDir d;
	// A bad command line: 2.
	EXPECT_EQ(ulpctl_import({kData + "/saveconfig.json"}).rc, 2);
	EXPECT_EQ(ulpctl_import({"--from", "lio", kData + "/saveconfig.json"}).rc, 2);
	EXPECT_EQ(ulpctl_import({"--from", "tgt"}).rc, 2);
	// Unreadable or invalid input: 1, naming the file and where.
	ImportRun x = ulpctl_import({"--from", "tgt", d / "missing.conf"});
	EXPECT_EQ(x.rc, 1);
	EXPECT_NE(x.err.find("missing.conf"), std::string::npos) << x.err;
	spit(d / "bad.json", "{\n  \"targets\": [\n    {\"wwn\": 3,}\n  ]\n}\n");
	x = ulpctl_import({"--from", "targetcli", d / "bad.json"});
	EXPECT_EQ(x.rc, 1);
	EXPECT_NE(x.err.find("bad.json:3:"), std::string::npos) << x.err;
	spit(d / "type.json", R"({"storage_objects": [], "targets": [{"wwn": "iqn.2024-01.x:y",
	  "fabric": "iscsi", "tpgs": [{"luns": [{"index": "zero"}]}]}]})");
	x = ulpctl_import({"--from", "targetcli", d / "type.json"});
	EXPECT_EQ(x.rc, 1);
	EXPECT_NE(x.err.find("targets[0].tpgs[0].luns[0].index: must be a number"),
	          std::string::npos)
	    << x.err;
	spit(d / "open.conf", "# a comment\n<target iqn.2024-01.x:y>\n  backing-store /srv/y\n");
	x = ulpctl_import({"--from", "tgt", d / "open.conf"});
	EXPECT_EQ(x.rc, 1);
	EXPECT_NE(x.err.find("open.conf:2: block not closed"), std::string::npos) << x.err;

	// Everything carried over: 0, the file on stdout, nothing on stderr.
	spit(d / "ok.conf", "<target iqn.2024-01.x:ok>\n  backing-store /srv/ok.img\n"
	                    "  initiator-name iqn.1993-08.org.debian:01:c1\n</target>\n");
	x = ulpctl_import({"--from", "tgt", d / "ok.conf"});
	EXPECT_EQ(x.rc, 0) << x.err;
	EXPECT_EQ(x.err, "");
	EXPECT_NE(x.out.find("name = 'iqn.2024-01.x:ok'"), std::string::npos) << x.out;
	EXPECT_NE(x.out.find("Every setting of the source was carried over"), std::string::npos);

	// Some not carried over: 4, each listed on stderr and in the file's header.
	const std::string out = d / "out.toml";
	x = ulpctl_import({"--from", "tgt", kData + "/targets.conf", "-o", out});
	EXPECT_EQ(x.rc, 4) << x.err;
	EXPECT_NE(x.err.find("target iqn.2024-01.lan.example:archive"), std::string::npos) << x.err;
	EXPECT_NE(x.err.find("initiator-address 192.168.100.0/24: not carried over: ulp-targetd "
	                     "admits iSCSI initiators by name"),
	          std::string::npos)
	    << x.err;
	EXPECT_EQ(std::count(x.err.begin(), x.err.end(), '\n'), 5) << x.err; // 4 and a summary
	EXPECT_NE(slurp(out).find("#   target iqn.2024-01.lan.example:archive"), std::string::npos);
	struct stat st {
	};
	ASSERT_EQ(::stat(out.c_str(), &st), 0);
	EXPECT_EQ(st.st_mode & 0777, 0600u) << "it holds CHAP secrets";

	// An existing file is kept without --force, replaced with it.
	spit(out, "precious\n");
	x = ulpctl_import({"--from", "tgt", d / "ok.conf", "-o", out});
	EXPECT_EQ(x.rc, 1);
	EXPECT_NE(x.err.find("--force"), std::string::npos) << x.err;
	EXPECT_EQ(slurp(out), "precious\n");
	x = ulpctl_import({"--from", "tgt", d / "ok.conf", "-o", out, "--force"});
	EXPECT_EQ(x.rc, 0) << x.err;
	EXPECT_NE(slurp(out).find("iqn.2024-01.x:ok"), std::string::npos);
}

TEST(UlpctlImport, BoundsRefuseHostileInput)
{
	test::TempDir d;
	spit(d / "deep.json", std::string(100000, '[') + std::string(100000, ']'));
	ImportRun x = ulpctl_import({"--from", "targetcli", d / "deep.json"});
	EXPECT_EQ(x.rc, 1);
	EXPECT_NE(x.err.find("nested more than"), std::string::npos) << x.err;
	spit(d / "self.conf", "include self.conf\n");
	x = ulpctl_import({"--from", "tgt", d / "self.conf"});
	EXPECT_EQ(x.rc, 1);
	EXPECT_NE(x.err.find("nested more than"), std::string::npos) << x.err;
	spit(d / "long.conf", "default-driver " + std::string(200000, 'x') + "\n");
	x = ulpctl_import({"--from", "tgt", d / "long.conf"});
	EXPECT_EQ(x.rc, 1);
	EXPECT_NE(x.err.find("long.conf:1: a line longer"), std::string::npos) << x.err;
	{
		std::ofstream big(d / "big.json");
		big << "[\"" << std::string(imp::kMaxInputBytes, 'x') << "\"]";
	}
	x = ulpctl_import({"--from", "targetcli", d / "big.json"});
	EXPECT_EQ(x.rc, 1);
	EXPECT_NE(x.err.find("larger than"), std::string::npos) << x.err;
}

// ---- ulp-targetd on the imported files ----------------------------------------------------

// The imported file made startable here: portals the harness gives (its own
// --portal 127.0.0.1:0), no iSER portal (a soft device per address), state in the scratch
// directory.
std::string startable(const std::string &toml_text, const std::string &state_dir)
{
	toml::table t = toml::parse(toml_text);
	t.insert_or_assign("portals", toml::array{});
	t.insert_or_assign("iser_portals", toml::array{});
	t.insert_or_assign("state_dir", state_dir);
	std::ostringstream os;
	os << t;
	return os.str();
}

const json *shown_target(const json &show, const std::string &name)
{
	for (const json &t : show["targets"])
		if (t["name"] == name)
			return &t;
	return nullptr;
}

const json *shown_lun(const json &target, uint64_t n)
{
	for (const json &l : target["luns"])
		if (l["lun"] == n)
			return &l;
	return nullptr;
}

TEST(UlpctlImport, TargetdServesTheImportedTargetcliConfiguration)
{
	AdminDaemon d;
	// The sample with its files in the scratch directory, without its Ceph target (no
	// cluster here) and its block LUN (no block device).
	json j =
	    json::parse(replace_all(slurp(kData + "/saveconfig.json"), "/srv/iscsi", d.dir.path));
	auto &ts = j["targets"];
	ts.erase(std::remove_if(ts.begin(), ts.end(),
	                        [](const json &t) { return t["wwn"] == kLioCeph; }),
	         ts.end());
	auto &luns = ts[0]["tpgs"][0]["luns"];
	luns.erase(std::remove_if(
	               luns.begin(), luns.end(),
	               [](const json &l) { return l["storage_object"] == "/backstores/block/db"; }),
	           luns.end());
	spit(d.dir / "saveconfig.json", j.dump(2));
	const std::string out = d.dir / "imported.toml";
	ImportRun x = ulpctl_import({"--from", "targetcli", d.dir / "saveconfig.json", "-o", out});
	ASSERT_EQ(x.rc, 4) << x.err;
	spit(out, startable(slurp(out), d.dir / "state"));
	ASSERT_TRUE(d.start({"--config", out}));

	const json show = ulpctl_json(d.sock, {"show"});
	ASSERT_EQ(show["targets"].size(), 2u) << show.dump(1);
	const json *a = shown_target(show, kLioA);
	ASSERT_NE(a, nullptr) << show.dump(1);
	EXPECT_EQ((*a)["chap"], "mutual");
	EXPECT_EQ((*a)["acls"].size(), 3u);
	const json *l0 = shown_lun(*a, 0), *l2 = shown_lun(*a, 2);
	ASSERT_TRUE(l0 && l2) << a->dump(1);
	EXPECT_EQ((*a)["luns"].size(), 2u);
	EXPECT_EQ((*l0)["path"], d.dir / "disk1.img");
	EXPECT_EQ((*l0)["block_size"], 4096);
	EXPECT_EQ((*l0)["size"], 64 << 20);
	EXPECT_EQ((*l2)["backstore"], "ram");
	EXPECT_EQ((*l2)["size"], 32 << 20);
	ASSERT_NE(shown_target(show, kSrpName), nullptr);

	// The imported account, from an imported ACL's name: a login and verified I/O.
	InitiatorConfig c = initiator_config("iqn.1994-05.com.redhat:client1", kLioA);
	c.chap = ChapSecret{"client1", "client-secret-1"};
	c.mutual = ChapSecret{"target1", "mutual-secret-1"};
	Session s(c);
	ASSERT_TRUE(s.login(local(d.t.port()))) << s.error();
	clear_ua(s, 2);
	EXPECT_TRUE(write_read(s, 2, 0, 7));
	EXPECT_TRUE(s.logout(5s));
	// A name the ACLs do not hold is refused, with the right account too.
	InitiatorConfig other = c;
	other.initiator_name = "iqn.1994-05.com.redhat:stranger";
	Session s2(other);
	EXPECT_FALSE(s2.login(local(d.t.port())));
	EXPECT_EQ(d.t.stop(), 0) << d.t.log();
}

TEST(UlpctlImport, TargetdServesTheImportedTgtConfiguration)
{
	AdminDaemon d;
	// The sample with its files in the scratch directory, without its include (Ceph).
	std::string conf = replace_all(slurp(kData + "/targets.conf"), "/srv/tgt", d.dir.path);
	conf = replace_all(conf, "include conf.d/*.conf", "");
	spit(d.dir / "targets.conf", conf);
	for (const char *f : {"vm1.img", "vm2.img", "archive.img", "spool.img"}) {
		spit(d.dir / f, "");
		std::filesystem::resize_file(d.dir / f, 8 << 20);
	}
	const std::string out = d.dir / "imported.toml";
	ImportRun x = ulpctl_import({"--from", "tgt", d.dir / "targets.conf", "-o", out});
	ASSERT_EQ(x.rc, 4) << x.err;
	spit(out, startable(slurp(out), d.dir / "state"));
	ASSERT_TRUE(d.start({"--config", out}));

	const json show = ulpctl_json(d.sock, {"show"});
	ASSERT_EQ(show["targets"].size(), 2u) << show.dump(1);
	const json *ar = shown_target(show, "iqn.2024-01.lan.example:archive");
	ASSERT_NE(ar, nullptr);
	EXPECT_EQ((*ar)["chap"], "chap");
	ASSERT_EQ((*ar)["luns"].size(), 2u);
	const json *l5 = shown_lun(*ar, 5), *l1 = shown_lun(*ar, 1);
	ASSERT_TRUE(l5 && l1) << ar->dump(1);
	EXPECT_EQ((*l5)["read_only"], true);
	EXPECT_EQ((*l5)["block_size"], 4096);
	EXPECT_EQ((*l1)["removable"], true);
	EXPECT_EQ((*ar)["acls"], json::array({"iqn.1993-08.org.debian:01:backup"}));

	InitiatorConfig c = initiator_config("iqn.1993-08.org.debian:01:4a5b6c7d8e9f",
	                                     "iqn.2024-01.lan.example:vmstore");
	c.chap = ChapSecret{"vmhost", "secretpass12"};
	c.mutual = ChapSecret{"tgtuser", "mutualpass34"};
	Session s(c);
	ASSERT_TRUE(s.login(local(d.t.port()))) << s.error();
	clear_ua(s, 1);
	EXPECT_TRUE(write_read(s, 1, 8, 3));
	EXPECT_TRUE(s.logout(5s));
	EXPECT_EQ(d.t.stop(), 0) << d.t.log();
}

} // namespace
} // namespace ulp::iscsi::initiator::test_env
