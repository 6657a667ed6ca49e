// SPDX-License-Identifier: MIT
// tests/admin/targetd_config_test.cc - ulp-targetd's configuration in process
// (tools/ulp-targetd/config.h), nothing started or opened: rbd LUNs from --lun flags, from
// the TOML file and from a request's values (check_lun), the forms accepted and the
// mistakes refused with what names them; and a file with rbd, file and ram LUNs written by
// to_toml (what `ulpctl save` writes) and read back to the same configuration.
#include "tools/ulp-targetd/config.h"

#include <gtest/gtest.h>
#include <toml++/toml.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace targetd
{
namespace
{

constexpr char kIqn[] = "iqn.2026-11.org.ulp:config";

// Every field of an rbd LUN's config as expected, each named where it differs.
void expect_rbd(const ulp::scsi::RbdConfig &got, const ulp::scsi::RbdConfig &want)
{
	EXPECT_EQ(got.pool, want.pool);
	EXPECT_EQ(got.image, want.image);
	EXPECT_EQ(got.nspace, want.nspace);
	EXPECT_EQ(got.conf, want.conf);
	EXPECT_EQ(got.client, want.client);
	EXPECT_EQ(got.keyring, want.keyring);
	EXPECT_EQ(got.group, want.group);
	EXPECT_EQ(got.create, want.create);
	EXPECT_EQ(got.timeout_s, want.timeout_s);
	EXPECT_EQ(got.atomic_unit, want.atomic_unit);
}

// A scratch directory for the files, removed with them.
struct Scratch {
	std::string path;
	Scratch()
	{
		char t[] = "/tmp/ulp-config-test-XXXXXX";
		if (::mkdtemp(t))
			path = t;
	}
	~Scratch()
	{
		if (!path.empty())
			std::filesystem::remove_all(path);
	}
	Scratch(const Scratch &) = delete;
	Scratch &operator=(const Scratch &) = delete;
	std::string write(const std::string &name, const std::string &text) const
	{
		const std::string f = path + "/" + name;
		std::ofstream(f) << text;
		return f;
	}
};

// The flags' one target from --lun values; false with *why as the daemon would print it.
bool from_flags(const std::vector<std::string> &luns, Config *c, std::string *why)
{
	Flags f;
	f.target = kIqn;
	f.luns = luns;
	return build_config(f, c, why);
}

// A [[target]] holding lun_body as its one [[target.lun]].
std::string one_lun_file(const std::string &lun_body)
{
	return std::string("[[target]]\nname = \"") + kIqn + "\"\n  [[target.lun]]\n" + lun_body;
}

TEST(TargetdConfig, RbdLunFlagsAccepted)
{
	Config c;
	std::string why;
	ASSERT_TRUE(from_flags(
	    {"0:rbd:pool=rbd,image=disk0",
	     "1:rbd:pool=p1,image=img1,namespace=ns1,conf=/etc/ceph/x.conf,client=ulp-gw,"
	     "keyring=/etc/ceph/gw.keyring,group=g1,create=1,size=64M,timeout=7,ro=1,qd=8,"
	     "bs=4096,pbs=8192,removable=yes,atomic_unit=16K"},
	    &c, &why))
	    << why;
	ASSERT_EQ(c.targets.size(), 1u);
	ASSERT_EQ(c.targets[0].luns.size(), 2u);
	const LunCfg &a = c.targets[0].luns[0];
	EXPECT_EQ(a.bs.kind, "rbd");
	ulp::scsi::RbdConfig want; // defaults but for the two required keys
	want.pool = "rbd";
	want.image = "disk0";
	expect_rbd(a.bs.rbd, want);
	EXPECT_EQ(a.bs.size, 0u) << "no size: the image's";
	const LunCfg &b = c.targets[0].luns[1];
	EXPECT_EQ(b.lun, 1u);
	expect_rbd(b.bs.rbd, {.pool = "p1",
	                      .nspace = "ns1",
	                      .image = "img1",
	                      .conf = "/etc/ceph/x.conf",
	                      .client = "ulp-gw",
	                      .keyring = "/etc/ceph/gw.keyring",
	                      .group = "g1",
	                      .create = true,
	                      .timeout_s = 7,
	                      .atomic_unit = 16384});
	EXPECT_EQ(b.bs.size, 64u << 20);
	EXPECT_TRUE(b.read_only);
	EXPECT_TRUE(b.bs.read_only) << "the backstore opens the image read-only";
	EXPECT_EQ(b.bs.queue_depth, 8u);
	EXPECT_EQ(b.bs.block_size, 4096u);
	EXPECT_EQ(b.physical_block_size, 8192u);
	EXPECT_TRUE(b.removable);
	EXPECT_TRUE(b.bs.path.empty());
}

TEST(TargetdConfig, RbdLunFlagsRefusedWithWhy)
{
	struct Case {
		const char *lun;  // the --lun value
		const char *want; // in the message
	} cases[] = {
	    {"0:rbd:image=disk0", "LUN 0: an rbd backstore needs a pool (pool=NAME)"},
	    {"0:rbd:pool=rbd", "LUN 0: an rbd backstore needs an image (image=NAME)"},
	    {"0:rbd", "needs a pool"},
	    {"0:rbd:pool=rbd,image=i,path=/srv/x.img", "path is a file and block key"},
	    {"0:rbd:pool=rbd,image=i,direct=1", "direct is a file and block key"},
	    {"0:rbd:pool=rbd,image=i,write_cache=0", "write_cache is a file and block key"},
	    {"0:rbd:pool=rbd,image=i,wc=1", "wc is a file and block key"},
	    {"0:ram:size=1M,pool=rbd", "pool is an rbd key"},
	    {"0:file:path=/srv/x.img,image=disk0", "image is an rbd key"},
	    {"0:block:path=/dev/sdx,timeout=5", "timeout is an rbd key"},
	    {"0:null:size=1M,create=1", "create is an rbd key"},
	    {"0:rbd:pool=rbd,image=i,create=1", "create needs a size"},
	    {"0:rbd:pool=rbd,image=i,create=maybe", "create is yes or no"},
	    {"0:rbd:pool=rbd,image=i,timeout=0", "timeout is 1..3600 seconds, not 0"},
	    {"0:rbd:pool=rbd,image=i,timeout=3601", "timeout is 1..3600 seconds"},
	    {"0:rbd:pool=rbd,image=i,timeout=5s", "timeout is 1..3600 seconds, not 5s"},
	    {"0:rbd:pool=rbd,image=i,size=lots", "bad size lots"},
	    {"0:rbd:pool=rbd,image=i,atomic_unit=big", "bad atomic_unit big"},
	    {"0:rbd:pool=rbd,image=i,atomic_unit=12K", "atomic_unit must be a power of two"},
	    {"0:ram:size=1M,atomic_unit=64K", "atomic_unit is an rbd key"},
	    {"0:rbd:pool=rbd,imgae=i", "unknown key imgae"},
	    {"0:rbd:pool=rbd,image", "'image' is not key=value"},
	};
	for (const Case &k : cases) {
		Config c;
		std::string why;
		EXPECT_FALSE(from_flags({k.lun}, &c, &why)) << k.lun;
		EXPECT_NE(why.find(k.want), std::string::npos)
		    << "--lun " << k.lun << ": '" << why << "' does not say '" << k.want << "'";
	}
}

TEST(TargetdConfig, RbdLunFromTheFile)
{
	Scratch d;
	ASSERT_FALSE(d.path.empty());
	const std::string f =
	    d.write("rbd.toml", one_lun_file("  lun = 3\n  backstore = \"rbd\"\n  pool = \"rbd\"\n"
	                                     "  image = \"disk3\"\n  namespace = \"gw\"\n"
	                                     "  conf = \"/c/ceph.conf\"\n  client = \"ulp-gw\"\n"
	                                     "  keyring = \"/c/gw.keyring\"\n  group = \"g\"\n"
	                                     "  create = true\n  timeout = 12\n  size = \"1G\"\n"
	                                     "  atomic_unit = \"4M\"\n"
	                                     "  block_size = 4096\n  read_only = false\n"
	                                     "  queue_depth = 32\n"));
	Config c;
	std::string why;
	ASSERT_TRUE(load_config_file(f, &c, &why)) << why;
	ASSERT_EQ(c.targets.size(), 1u);
	ASSERT_EQ(c.targets[0].luns.size(), 1u);
	const LunCfg &l = c.targets[0].luns[0];
	EXPECT_EQ(l.lun, 3u);
	EXPECT_EQ(l.bs.kind, "rbd");
	expect_rbd(l.bs.rbd, {.pool = "rbd",
	                      .nspace = "gw",
	                      .image = "disk3",
	                      .conf = "/c/ceph.conf",
	                      .client = "ulp-gw",
	                      .keyring = "/c/gw.keyring",
	                      .group = "g",
	                      .create = true,
	                      .timeout_s = 12,
	                      .atomic_unit = 4u << 20});
	EXPECT_EQ(l.bs.size, 1u << 30);
	EXPECT_EQ(l.bs.block_size, 4096u);
	EXPECT_EQ(l.bs.queue_depth, 32u);
}

TEST(TargetdConfig, RbdLunMistakesInTheFileNameTheirPlace)
{
	Scratch d;
	ASSERT_FALSE(d.path.empty());
	struct Case {
		const char *body; // the [[target.lun]] table's lines (the table is line 3)
		const char *want; // after "FILE:"
	} cases[] = {
	    {"  lun = 0\n  backstore = \"rbd\"\n  pool = \"rbd\"\n  image = \"i\"\n"
	     "  path = \"/srv/x.img\"\n",
	     ":8:3: target.lun.path: path is a file and block key"},
	    {"  lun = 0\n  backstore = \"rbd\"\n  pool = \"rbd\"\n  image = \"i\"\n"
	     "  direct = true\n",
	     ":8:3: target.lun.direct: direct is a file and block key"},
	    {"  lun = 0\n  backstore = \"ram\"\n  size = \"1M\"\n  pool = \"rbd\"\n",
	     ":7:3: target.lun.pool: pool is an rbd key"},
	    {"  lun = 0\n  backstore = \"file\"\n  path = \"/x\"\n  group = \"g\"\n",
	     ":7:3: target.lun.group: group is an rbd key"},
	    {"  lun = 0\n  backstore = \"rbd\"\n  pool = \"rbd\"\n",
	     ":3:3: target.lun: LUN 0: an rbd backstore needs an image (image=NAME)"},
	    {"  lun = 0\n  backstore = \"rbd\"\n  image = \"i\"\n",
	     ":3:3: target.lun: LUN 0: an rbd backstore needs a pool (pool=NAME)"},
	    {"  lun = 0\n  backstore = \"rbd\"\n  pool = \"rbd\"\n  image = \"i\"\n"
	     "  create = true\n",
	     ":3:3: target.lun: LUN 0: create needs a size"},
	    {"  lun = 0\n  backstore = \"rbd\"\n  pool = \"rbd\"\n  image = \"i\"\n"
	     "  timeout = 0\n",
	     ":8:13: target.lun.timeout: must be 1..3600"},
	    {"  lun = 0\n  backstore = \"rbd\"\n  pool = \"rbd\"\n  image = \"i\"\n"
	     "  create = \"yes\"\n",
	     ":8:12: target.lun.create: must be true or false"},
	    {"  lun = 0\n  backstore = \"rbd\"\n  pool = 7\n  image = \"i\"\n",
	     ":6:10: target.lun.pool: must be a string"},
	    {"  lun = 0\n  backstore = \"rbd\"\n  pool = \"rbd\"\n  image = \"i\"\n"
	     "  nspace = \"x\"\n",
	     ":8:3: target.lun.nspace: unknown key"},
	};
	for (const Case &k : cases) {
		const std::string f = d.write("bad.toml", one_lun_file(k.body));
		Config c;
		std::string why;
		EXPECT_FALSE(load_config_file(f, &c, &why)) << k.body;
		EXPECT_NE(why.find(f + k.want), std::string::npos)
		    << "'" << why << "' does not say '" << f << k.want << "'";
	}
}

// The admin socket's lun_create hands check_lun values, not keys: what another kind set is
// refused all the same.
TEST(TargetdConfig, CheckLunRefusesAnotherKindsValues)
{
	auto check = [](const LunCfg &l) {
		std::string why;
		return check_lun(kIqn, l, &why) ? std::string("ok") : why;
	};
	LunCfg rbd;
	rbd.lun = 4;
	rbd.bs.kind = "rbd";
	rbd.bs.rbd.pool = "rbd";
	rbd.bs.rbd.image = "disk4";
	EXPECT_EQ(check(rbd), "ok");
	LunCfg l = rbd;
	l.bs.path = "/srv/x.img";
	EXPECT_EQ(check(l),
	          std::string("target ") + kIqn + " LUN 4: " + lun_key_misplaced("rbd", "path"));
	l = rbd;
	l.bs.write_cache = false;
	EXPECT_NE(check(l).find("write_cache is a file and block key"), std::string::npos);
	l = rbd;
	l.bs.rbd.timeout_s = 0;
	EXPECT_NE(check(l).find("timeout must be 1..3600 seconds"), std::string::npos);
	l = rbd;
	l.bs.rbd.atomic_unit = 3 * 4096;
	EXPECT_NE(check(l).find("atomic_unit must be a power of two"), std::string::npos);
	l.bs.rbd.atomic_unit = 256; // below the 512-byte block
	EXPECT_NE(check(l).find("atomic_unit must be a power of two"), std::string::npos);
	l.bs.rbd.atomic_unit = 0; // no WRITE ATOMIC
	EXPECT_EQ(check(l), "ok");
	l = rbd;
	l.bs.rbd.image.clear();
	EXPECT_NE(check(l).find("needs an image"), std::string::npos);
	LunCfg ram;
	ram.bs.kind = "ram";
	ram.bs.size = 1 << 20;
	EXPECT_EQ(check(ram), "ok");
	l = ram;
	l.bs.rbd.group = "g";
	EXPECT_NE(check(l).find("group is an rbd key"), std::string::npos) << check(l);
	l = ram;
	l.bs.rbd.timeout_s = 5;
	EXPECT_NE(check(l).find("timeout is an rbd key"), std::string::npos) << check(l);
	l = ram;
	l.bs.rbd.atomic_unit = 4096;
	EXPECT_NE(check(l).find("atomic_unit is an rbd key"), std::string::npos) << check(l);
	EXPECT_EQ(lun_key_misplaced("rbd", "pool"), "");
	EXPECT_EQ(lun_key_misplaced("rbd", "queue_depth"), "");
	EXPECT_EQ(lun_key_misplaced("file", "path"), "");
	EXPECT_NE(lun_key_misplaced("file", "keyring"), "");
}

// save's text read back is the same configuration, and saving that gives the same text.
TEST(TargetdConfig, RbdLunsRoundTripThroughSave)
{
	Scratch d;
	ASSERT_FALSE(d.path.empty());
	Config c;
	std::string why;
	ASSERT_TRUE(from_flags(
	    {"0:rbd:pool=rbd,image=disk0",
	     "1:rbd:pool=p1,image=img1,namespace=ns1,conf=/etc/ceph/x.conf,client=ulp-gw,"
	     "keyring=/etc/ceph/gw.keyring,group=g1,create=1,size=64M,timeout=7,ro=1,qd=8,"
	     "bs=4096",
	     "2:file:path=" + d.path + "/f.img,size=8M,direct=0,wc=0", "3:ram:size=16M"},
	    &c, &why))
	    << why;
	const std::string text = to_toml(c);
	const std::string f = d.write("saved.toml", text);

	// The rbd tables carry no key check_lun would refuse on reading them.
	const toml::table saved = toml::parse(text);
	const toml::array &luns = *saved["target"][0]["lun"].as_array();
	ASSERT_EQ(luns.size(), 4u);
	for (const toml::node &n : luns) {
		const toml::table &t = *n.as_table();
		const std::string kind = *t["backstore"].value<std::string>();
		for (auto &[k, v] : t)
			EXPECT_EQ(lun_key_misplaced(kind, std::string(k.str())), "")
			    << "saved " << kind << " LUN has " << k.str();
	}

	Config back;
	ASSERT_TRUE(load_config_file(f, &back, &why)) << why << "\n" << text;
	ASSERT_EQ(back.targets.size(), 1u);
	ASSERT_EQ(back.targets[0].luns.size(), 4u);
	for (size_t i = 0; i < 4; i++) {
		const LunCfg &a = c.targets[0].luns[i], &b = back.targets[0].luns[i];
		SCOPED_TRACE("LUN " + std::to_string(a.lun));
		EXPECT_EQ(b.lun, a.lun);
		EXPECT_EQ(b.bs.kind, a.bs.kind);
		EXPECT_EQ(b.bs.path, a.bs.path);
		EXPECT_EQ(b.bs.size, a.bs.size);
		EXPECT_EQ(b.bs.block_size, a.bs.block_size);
		EXPECT_EQ(b.bs.queue_depth, a.bs.queue_depth);
		EXPECT_EQ(b.bs.direct, a.bs.direct);
		EXPECT_EQ(b.bs.write_cache, a.bs.write_cache);
		EXPECT_EQ(b.read_only, a.read_only);
		EXPECT_EQ(b.bs.read_only, a.bs.read_only);
		expect_rbd(b.bs.rbd, a.bs.rbd);
	}
	// load_config_file reads the file alone: the flags' portal default is not in it.
	back.portals = c.portals;
	EXPECT_EQ(to_toml(back), text);
}

// ulpctl save: each save keeps the file it replaces in backup/, the last kConfigBackups of
// them, the newest being the previous save; the file says that comments are not kept.
TEST(TargetdConfig, SaveKeepsTheLastVersionsInBackup)
{
	namespace fs = std::filesystem;
	const fs::path dir = fs::temp_directory_path() / ("ulp-save-" + std::to_string(getpid()));
	fs::remove_all(dir);
	fs::create_directories(dir);
	const std::string f = (dir / "ulp-targetd.toml").string();
	Config c;
	std::string why;
	const size_t saves = kConfigBackups + 3;
	for (size_t i = 0; i < saves; i++) {
		c.targets.clear();
		TargetCfg t;
		t.name = std::string(kIqn) + std::to_string(i);
		c.targets.push_back(t);
		ASSERT_EQ(save_config(c, f, &why), 0) << why;
	}
	std::ifstream in(f);
	const std::string text{std::istreambuf_iterator<char>(in), {}};
	EXPECT_NE(text.find("# Comments are not kept"), std::string::npos) << text;
	EXPECT_NE(text.find(std::string(kIqn) + std::to_string(saves - 1)), std::string::npos);
	std::vector<std::string> backups;
	for (const auto &d : fs::directory_iterator(dir / "backup"))
		backups.push_back(d.path().string());
	std::sort(backups.begin(), backups.end());
	ASSERT_EQ(backups.size(), kConfigBackups);
	// The newest backup is the save before the last; the oldest kept is saves-1-10's.
	auto holds = [](const std::string &p, const std::string &iqn) {
		Config b;
		std::string why;
		return load_config_file(p, &b, &why) && b.targets.size() == 1 &&
		       b.targets[0].name == iqn;
	};
	EXPECT_TRUE(holds(backups.back(), std::string(kIqn) + std::to_string(saves - 2)));
	EXPECT_TRUE(
	    holds(backups.front(), std::string(kIqn) + std::to_string(saves - 1 - kConfigBackups)));
	EXPECT_EQ(fs::status(dir / "backup").permissions() & fs::perms::all, fs::perms::owner_all);
	fs::remove_all(dir);
}

// A target with LUNs 0, 1 and 5 (its own keys head, 15 lines without), ACL entries as
// given after them.
std::string acl_file(const std::string &acls, const std::string &head = "")
{
	return std::string("[[target]]\nname = \"") + kIqn +
	       "\"\n"
	       "acls = [\"iqn.2026-11.org.ulp:a\"]\n" +
	       head +
	       "  [[target.lun]]\n  lun = 0\n  backstore = \"ram\"\n  size = \"1M\"\n"
	       "  [[target.lun]]\n  lun = 1\n  backstore = \"ram\"\n  size = \"1M\"\n"
	       "  [[target.lun]]\n  lun = 5\n  backstore = \"ram\"\n  size = \"1M\"\n" +
	       acls;
}

constexpr char kMapB[] = "  [[target.acl]]\n"
                         "  initiator = \"iqn.2026-11.org.ulp:b\"\n"
                         "  luns = [{ lun = 0, target_lun = 5, read_only = true }]\n"
                         "  chap = { user = \"b\", secret = \"b-secret-0123\" }\n"
                         "  mutual_chap = { user = \"t\", secret = \"t-secret-0123\" }\n";

// [[target.acl]]: B sees only the target's LUN 5, as LUN 0, read-only, with a CHAP secret
// of its own; A (a plain entry) sees every LUN. B joins acls after A.
TEST(TargetdConfig, AclEntryGivesItsInitiatorItsOwnLunsAndChap)
{
	Scratch d;
	Config c;
	std::string why;
	ASSERT_TRUE(load_config_file(d.write("acl.toml", acl_file(kMapB, "allow_no_chap = true\n")),
	                             &c, &why))
	    << why;
	ASSERT_EQ(c.targets.size(), 1u);
	const TargetCfg &t = c.targets[0];
	EXPECT_EQ(t.acls,
	          (std::vector<std::string>{"iqn.2026-11.org.ulp:a", "iqn.2026-11.org.ulp:b"}));
	EXPECT_TRUE(t.allow_no_chap);
	EXPECT_EQ(t.acl_cfg.count("iqn.2026-11.org.ulp:a"), 0u);
	ASSERT_EQ(t.acl_cfg.count("iqn.2026-11.org.ulp:b"), 1u);
	const AclCfg &b = t.acl_cfg.at("iqn.2026-11.org.ulp:b");
	ASSERT_EQ(b.luns.size(), 1u);
	EXPECT_EQ(b.luns.at(0), (MappedLun{5, true}));
	ASSERT_TRUE(b.chap && b.mutual_chap);
	EXPECT_EQ(b.chap->user, "b");
	EXPECT_EQ(b.chap->secret, "b-secret-0123");
	EXPECT_EQ(b.mutual_chap->user, "t");

	// As the core takes it: mapped LUN 0 -> the target's 5, read-only.
	const ulp::scsi::NodeAcl n = node_acl("iqn.2026-11.org.ulp:b", &b);
	ASSERT_EQ(n.luns.size(), 1u);
	EXPECT_EQ(n.luns.at(0), (std::pair<uint64_t, bool>{5, true}));
	EXPECT_TRUE(node_acl("iqn.2026-11.org.ulp:a", nullptr).luns.empty());
}

// Every mistake in an entry is refused with its place in the file and what it is.
TEST(TargetdConfig, AclEntryMistakesNameTheirPlace)
{
	Scratch d;
	struct Case {
		std::string entry;
		std::string want; // the message after "file:line:col: "
		int line;
	};
	const std::string head = "  [[target.acl]]\n  initiator = \"iqn.2026-11.org.ulp:b\"\n";
	// acl_file's text is 15 lines; the entry's "luns" is its 16th + 2.
	const Case cases[] = {
	    {head + "  luns = [{ lun = 0, target_lun = 7 }]\n",
	     "target.acl.luns.target_lun: the target has no LUN 7", 18},
	    {head + "  luns = [{ lun = 0, target_lun = 5 }, { lun = 0, target_lun = 1 }]\n",
	     "target.acl.luns.lun: 0 mapped twice for iqn.2026-11.org.ulp:b", 18},
	    {head + "  luns = [{ lun = 0, read_only = \"yes\" }]\n",
	     "target.acl.luns.read_only: must be true or false", 18},
	    {head + "  luns = [{ lun = 16384 }]\n", "target.acl.luns.lun: must be 0..16383", 18},
	    {head + "  luns = [{ target_lun = 1 }]\n", "target.acl.luns.lun: missing", 18},
	    {head + "  luns = [{ lun = 0, tlun = 1 }]\n", "target.acl.luns.tlun: unknown key", 18},
	    {head + "  mutual_chap = { user = \"t\", secret = \"t-secret-0123\" }\n",
	     "target.acl.mutual_chap: needs chap", 16},
	    {"  [[target.acl]]\n  luns = []\n", "target.acl.initiator: missing", 16},
	    {"  [[target.acl]]\n  initiator = \"bad name\"\n",
	     "target.acl.initiator: bad name is not a valid iSCSI name", 17},
	    {head + head, "target.acl.initiator: iqn.2026-11.org.ulp:b has two entries", 18},
	};
	for (const Case &k : cases) {
		SCOPED_TRACE(k.entry);
		Config c;
		std::string why;
		const std::string f = d.write("bad.toml", acl_file(k.entry));
		EXPECT_FALSE(load_config_file(f, &c, &why));
		EXPECT_EQ(why.rfind(f + ":" + std::to_string(k.line) + ":", 0), 0u) << why;
		EXPECT_NE(why.find(": " + k.want), std::string::npos) << why;
	}
	// The srp table takes LUN maps (of the target SRP exports) but no CHAP.
	Config c, c2;
	std::string why;
	EXPECT_FALSE(load_config_file(
	    d.write("srp.toml", acl_file("[srp]\n[[srp.acl]]\ninitiator = \"10.0.0.1\"\n"
	                                 "chap = { user = \"u\", secret = \"u-secret-0123\" }\n")),
	    &c, &why));
	EXPECT_NE(why.find("srp.acl.chap: unknown key"), std::string::npos) << why;
	EXPECT_FALSE(load_config_file(
	    d.write("srp.toml", acl_file("[srp]\n[[srp.acl]]\ninitiator = \"10.0.0.1\"\n"
	                                 "luns = [{ lun = 0, target_lun = 9 }]\n")),
	    &c2, &why));
	EXPECT_NE(why.find("srp.acl.luns.target_lun: the target has no LUN 9"), std::string::npos)
	    << why;
}

// check_target (what the admin methods and build_config run) refuses a map of a LUN the
// target does not have, and a map of an initiator the ACLs do not name.
TEST(TargetdConfig, CheckTargetRefusesAMapOfNothing)
{
	Scratch d;
	Config c;
	std::string why;
	ASSERT_TRUE(load_config_file(d.write("acl.toml", acl_file(kMapB)), &c, &why)) << why;
	TargetCfg t = c.targets[0];
	ASSERT_TRUE(check_target(t, &why)) << why;
	t.acl_cfg["iqn.2026-11.org.ulp:b"].luns[3] = MappedLun{4, false};
	EXPECT_FALSE(check_target(t, &why));
	EXPECT_NE(why.find("maps LUN 3 to LUN 4, which the target does not have"),
	          std::string::npos)
	    << why;
	t = c.targets[0];
	t.acl_cfg["iqn.2026-11.org.ulp:c"].luns[0] = MappedLun{0, false};
	EXPECT_FALSE(check_target(t, &why));
	EXPECT_NE(why.find("iqn.2026-11.org.ulp:c has a LUN map or CHAP but no ACL"),
	          std::string::npos)
	    << why;
}

// save writes the entries back ([[target.acl]], [[srp.acl]]); reading that gives the same
// configuration, and saving it again the same text.
TEST(TargetdConfig, AclEntriesRoundTripThroughSave)
{
	Scratch d;
	Config c;
	std::string why;
	ASSERT_TRUE(load_config_file(
	    d.write(
	        "acl.toml",
	        acl_file(
	            std::string(kMapB) +
	                "  [[target.acl]]\n  initiator = \"iqn.2026-11.org.ulp:a\"\n"
	                "  luns = [{ lun = 0 }, { lun = 1 }]\n"
	                "[srp]\nacls = [\"10.0.0.2\"]\n"
	                "[[srp.acl]]\ninitiator = \"0x0002C90300A1B2C30002C90300A1B2C4\"\n"
	                "luns = [{ lun = 3, target_lun = 1, read_only = true }]\n"
	                "[iscsi]\ndiscovery_chap = { user = \"d\", secret = \"d-secret-0123\" }\n"
	                "discovery_mutual_chap = { user = \"t\", secret = \"t-secret-0123\" }\n",
	            "allow_no_chap = true\n")),
	    &c, &why))
	    << why;
	const std::string text = to_toml(c);
	Config back;
	ASSERT_TRUE(load_config_file(d.write("saved.toml", text), &back, &why)) << why << text;
	ASSERT_EQ(back.targets.size(), 1u);
	const TargetCfg &a = c.targets[0], &b = back.targets[0];
	EXPECT_EQ(b.acls, a.acls);
	EXPECT_EQ(b.allow_no_chap, true);
	ASSERT_EQ(b.acl_cfg.size(), 2u);
	for (auto &[name, x] : a.acl_cfg) {
		SCOPED_TRACE(name);
		ASSERT_EQ(b.acl_cfg.count(name), 1u);
		const AclCfg &y = b.acl_cfg.at(name);
		EXPECT_EQ(y.luns, x.luns);
		EXPECT_EQ(y.chap.has_value(), x.chap.has_value());
		if (x.chap && y.chap) {
			EXPECT_EQ(y.chap->secret, x.chap->secret);
		}
		EXPECT_EQ(y.mutual_chap.has_value(), x.mutual_chap.has_value());
	}
	EXPECT_EQ(a.acl_cfg.at("iqn.2026-11.org.ulp:a").luns.at(1), (MappedLun{1, false}));
	EXPECT_EQ(back.srp.acls,
	          (std::vector<std::string>{"10.0.0.2", "0x0002c90300a1b2c30002c90300a1b2c4"}));
	ASSERT_EQ(back.srp.acl_cfg.size(), 1u);
	EXPECT_EQ(back.srp.acl_cfg.begin()->second.luns.at(3), (MappedLun{1, true}));
	ASSERT_TRUE(back.discovery_chap && back.discovery_mutual_chap) << text;
	EXPECT_EQ(back.discovery_chap->secret, "d-secret-0123");
	EXPECT_EQ(back.discovery_mutual_chap->user, "t");
	EXPECT_EQ(to_toml(back), text);
	// Mutual CHAP for discovery needs the discovery secret.
	Config bad;
	EXPECT_FALSE(load_config_file(
	    d.write(
	        "bad.toml",
	        "[iscsi]\ndiscovery_mutual_chap = { user = \"t\", secret = \"t-secret-0123\" }\n"),
	    &bad, &why));
	EXPECT_NE(why.find("bad.toml:2:25: iscsi.discovery_mutual_chap: needs discovery_chap"),
	          std::string::npos)
	    << why;
}

// allowed_addresses: IPv4 and IPv6 hosts and prefixes, as the login checks a peer
// ("ip:port", "[ipv6]:port", an IPv4 peer of a dual-stack listener as ::ffff:a.b.c.d).
TEST(TargetdConfig, AllowedAddressesMatchPeers)
{
	using ulp::iscsi::target::addr_allowed;
	using ulp::iscsi::target::AddrPrefix;
	using ulp::iscsi::target::parse_addr_prefix;
	std::vector<AddrPrefix> v(3);
	ASSERT_TRUE(parse_addr_prefix("10.1.0.0/16", &v[0]));
	ASSERT_TRUE(parse_addr_prefix("fd00::/8", &v[1]));
	ASSERT_TRUE(parse_addr_prefix("192.0.2.7", &v[2]));
	EXPECT_TRUE(addr_allowed(v, "10.1.200.3:51000"));
	EXPECT_FALSE(addr_allowed(v, "10.2.0.1:51000"));
	EXPECT_TRUE(addr_allowed(v, "[fd12:3456::1]:3260"));
	EXPECT_FALSE(addr_allowed(v, "[fe80::1]:3260"));
	EXPECT_TRUE(addr_allowed(v, "[::ffff:192.0.2.7]:4000"));
	EXPECT_FALSE(addr_allowed(v, "192.0.2.8:4000"));
	EXPECT_FALSE(addr_allowed(v, "garbage"));
	EXPECT_TRUE(addr_allowed({}, "203.0.113.9:1")) << "empty: anyone";
	AddrPrefix p;
	for (const char *bad : {"10.0.0.1/8", "10.0.0.0/33", "::/129", "10.0.0.0/", "host", ""})
		EXPECT_FALSE(parse_addr_prefix(bad, &p)) << bad;

	Scratch d;
	Config c;
	std::string why;
	EXPECT_FALSE(load_config_file(
	    d.write("a.toml", acl_file("", "allowed_addresses = [\"::1\", \"10.0.0.1/8\"]\n")), &c,
	    &why));
	EXPECT_NE(why.find("a.toml:4:29: target.allowed_addresses: 10.0.0.1/8 is not an "
	                   "address"),
	          std::string::npos)
	    << why;
	Config ok;
	ASSERT_TRUE(load_config_file(
	    d.write("b.toml", acl_file("", "allowed_addresses = [\"::1\", \"10.0.0.0/8\"]\n")), &ok,
	    &why))
	    << why;
	EXPECT_EQ(ok.targets[0].allowed_addresses, (std::vector<std::string>{"::1", "10.0.0.0/8"}));
	Config back;
	ASSERT_TRUE(load_config_file(d.write("c.toml", to_toml(ok)), &back, &why)) << why;
	EXPECT_EQ(back.targets[0].allowed_addresses, ok.targets[0].allowed_addresses);
}

// --acl-lun: the flag target's per-initiator maps, the initiator joining the ACLs.
TEST(TargetdConfig, AclLunFlags)
{
	Flags f;
	f.target = kIqn;
	f.luns = {"0:ram:size=1M", "5:ram:size=1M"};
	f.acls = {"iqn.2026-11.org.ulp:a"};
	f.acl_luns = {"iqn.2026-11.org.ulp:b=0:5:ro", "iqn.2026-11.org.ulp:a=0",
	              "iqn.2026-11.org.ulp:a=1:5"};
	Config c;
	std::string why;
	ASSERT_TRUE(build_config(f, &c, &why)) << why;
	const TargetCfg &t = c.targets.back();
	EXPECT_EQ(t.acls,
	          (std::vector<std::string>{"iqn.2026-11.org.ulp:a", "iqn.2026-11.org.ulp:b"}));
	EXPECT_EQ(t.acl_cfg.at("iqn.2026-11.org.ulp:b").luns.at(0), (MappedLun{5, true}));
	EXPECT_EQ(t.acl_cfg.at("iqn.2026-11.org.ulp:a").luns.at(0), (MappedLun{0, false}));
	EXPECT_EQ(t.acl_cfg.at("iqn.2026-11.org.ulp:a").luns.at(1), (MappedLun{5, false}));
	for (const char *bad :
	     {"iqn.2026-11.org.ulp:b", "iqn.2026-11.org.ulp:b=x", "iqn.2026-11.org.ulp:b=0:7", "=0",
	      "iqn.2026-11.org.ulp:b=0:1:2", "iqn.2026-11.org.ulp:b=0:rw"}) {
		f.acl_luns = {bad};
		Config x;
		EXPECT_FALSE(build_config(f, &x, &why)) << bad;
		EXPECT_FALSE(why.empty()) << bad;
	}
	f.acl_luns = {"iqn.2026-11.org.ulp:b=0:5", "iqn.2026-11.org.ulp:b=0:0"};
	Config x;
	EXPECT_FALSE(build_config(f, &x, &why));
	EXPECT_NE(why.find("maps LUN 0 twice"), std::string::npos) << why;
}

// tp_soft_threshold: a percentage, read, bounded, saved only when set, and read back.
TEST(TargetdConfig, SoftThresholdFromTheFileAndThroughSave)
{
	Scratch d;
	ASSERT_FALSE(d.path.empty());
	const std::string body = "  lun = 0\n  backstore = \"ram\"\n  size = \"16M\"\n";
	Config c;
	std::string why;
	ASSERT_TRUE(load_config_file(d.write("off.toml", one_lun_file(body)), &c, &why)) << why;
	EXPECT_EQ(c.targets[0].luns[0].tp_soft_threshold, 0u);
	EXPECT_EQ(to_toml(c).find("tp_soft_threshold"), std::string::npos) << "off: not saved";

	c = Config{}; // load_config_file adds to what c holds
	ASSERT_TRUE(load_config_file(
	    d.write("on.toml", one_lun_file(body + "  tp_soft_threshold = 80\n")), &c, &why))
	    << why;
	EXPECT_EQ(c.targets[0].luns[0].tp_soft_threshold, 80u);
	const std::string text = to_toml(c);
	Config back;
	ASSERT_TRUE(load_config_file(d.write("saved.toml", text), &back, &why)) << why << text;
	EXPECT_EQ(back.targets[0].luns[0].tp_soft_threshold, 80u);
	EXPECT_EQ(to_toml(back), text);

	for (const char *bad : {"101", "-1", "\"80%\""}) {
		Config x;
		EXPECT_FALSE(load_config_file(
		    d.write("bad.toml", one_lun_file(body + "  tp_soft_threshold = " + bad + "\n")),
		    &x, &why))
		    << bad;
		EXPECT_NE(why.find("tp_soft_threshold"), std::string::npos) << why;
	}
}

// A target with two portal groups, one portal each, and an SRP port beside them.
constexpr char kTwoGroups[] = R"(portals = ["127.0.0.1:3260", "127.0.0.1:3261"]
[[target]]
name = "iqn.2026-11.org.ulp:config"
  [[target.lun]]
  lun = 0
  backstore = "ram"
  size = "16M"
  [[target.portal_group]]
  tag = 1
  portals = ["127.0.0.1:3260"]
  [[target.portal_group]]
  tag = 2
  rtpi = 7
  portals = ["127.0.0.1:3261"]
)";

TEST(TargetdConfig, PortalGroupsFromTheFileAndThroughSave)
{
	Scratch d;
	ASSERT_FALSE(d.path.empty());
	Config c;
	std::string why;
	ASSERT_TRUE(load_config_file(d.write("pg.toml", kTwoGroups), &c, &why)) << why;
	const auto &g = c.targets[0].portal_groups;
	ASSERT_EQ(g.size(), 2u);
	EXPECT_EQ(g[0].tag, 1);
	EXPECT_EQ(g[0].port_id(), 1) << "no rtpi key: the tag";
	EXPECT_EQ(g[1].tag, 2);
	EXPECT_EQ(g[1].port_id(), 7);
	ASSERT_EQ(g[1].portals.size(), 1u);
	EXPECT_EQ(portal_str(g[1].portals[0]), "127.0.0.1:3261");
	// The SRP port follows the highest rtpi of the target it exports.
	EXPECT_EQ(srp_rtpi(c.srp, c.targets[0]), 8);

	const std::string text = to_toml(c);
	Config back;
	ASSERT_TRUE(load_config_file(d.write("saved.toml", text), &back, &why)) << why << text;
	EXPECT_EQ(to_toml(back), text);
	ASSERT_EQ(back.targets[0].portal_groups.size(), 2u);
	EXPECT_EQ(back.targets[0].portal_groups[1].rtpi, 7);

	// Without groups nothing is written, and the target's one port keeps rtpi 1 (the SRP
	// port 2): what a file from before portal groups ran with.
	Config plain;
	ASSERT_TRUE(load_config_file(
	    d.write("plain.toml",
	            one_lun_file("  lun = 0\n  backstore = \"ram\"\n  size = \"16M\"\n")),
	    &plain, &why))
	    << why;
	EXPECT_TRUE(plain.targets[0].portal_groups.empty());
	EXPECT_EQ(to_toml(plain).find("portal_group"), std::string::npos);
	EXPECT_EQ(srp_rtpi(plain.srp, plain.targets[0]), 2);
	plain.srp.rtpi = 40;
	EXPECT_EQ(srp_rtpi(plain.srp, plain.targets[0]), 40);
}

TEST(TargetdConfig, PortalGroupMistakesNameTheirPlace)
{
	Scratch d;
	ASSERT_FALSE(d.path.empty());
	const std::string base = kTwoGroups;
	struct Case {
		std::string from, to, says;
	};
	const Case cases[] = {
	    {"tag = 2\n", "tag = 1\n", "tag 0 or twice"},
	    {"tag = 2\n", "tag = 0\n", "tag: must be 1..65535"},
	    {"rtpi = 7\n", "rtpi = 1\n", "rtpi 1 is another group's"},
	    {"portals = [\"127.0.0.1:3261\"]\n", "portals = [\"127.0.0.1:3262\"]\n",
	     "127.0.0.1:3262 is not one of the portals"},
	    {"portals = [\"127.0.0.1:3261\"]\n", "portals = [\"127.0.0.1:3260\"]\n",
	     "in two portal groups"},
	    {"rtpi = 7\n", "rtpi = 7\n  colour = 1\n", "target.portal_group.colour: unknown key"},
	    {"  tag = 2\n", "", "target.portal_group.tag: missing"},
	    {"3261\"]\n[[target]]", "3261\"]\n[srp]\nrtpi = 7\n[[target]]", "srp.rtpi 7"},
	};
	for (const Case &k : cases) {
		std::string body = base;
		const size_t at = body.rfind(k.from);
		ASSERT_NE(at, std::string::npos) << k.from;
		body.replace(at, k.from.size(), k.to);
		Config c;
		std::string why;
		EXPECT_FALSE(load_config_file(d.write("bad.toml", body), &c, &why)) << body;
		EXPECT_NE(why.find(k.says), std::string::npos) << why;
		EXPECT_NE(why.find("bad.toml:"), std::string::npos) << "names the place: " << why;
	}
}

// kTwoGroups with [target.alua]: group 10 holds portal group 1, group 20 portal group 2
// and the SRP port.
std::string with_alua(const std::string &alua)
{
	return std::string(kTwoGroups) + "  [target.alua]\n" + alua;
}

constexpr char kAlua[] = R"(  tpgs = "both"
  implicit_transition_secs = 10
    [[target.alua.group]]
    id = 10
    state = "active-optimized"
    preferred = true
    portal_groups = [1]
    [[target.alua.group]]
    id = 20
    state = "standby"
    portal_groups = [2]
    srp = true
)";

TEST(TargetdConfig, AluaFromTheFileAndThroughSave)
{
	Scratch d;
	ASSERT_FALSE(d.path.empty());
	Config c;
	std::string why;
	ASSERT_TRUE(load_config_file(d.write("a.toml", with_alua(kAlua)), &c, &why)) << why;
	const AluaCfg &a = c.targets[0].alua;
	EXPECT_EQ(a.tpgs, ulp::scsi::TPGS_BOTH);
	EXPECT_EQ(a.implicit_transition_secs, 10);
	ASSERT_EQ(a.groups.size(), 2u);
	EXPECT_EQ(a.groups[1].state, ulp::scsi::AluaState::Standby);
	EXPECT_TRUE(a.groups[0].preferred);
	EXPECT_TRUE(a.groups[1].srp);

	// What every LU gets: the tags as the groups' rtpis (2 has rtpi 7), SRP's after them.
	const ulp::scsi::AluaConfig ac = alua_config(c.targets[0], c.srp);
	EXPECT_EQ(ac.tpgs, ulp::scsi::TPGS_BOTH);
	ASSERT_EQ(ac.groups.size(), 2u);
	EXPECT_EQ(ac.groups[0].rtpis, std::vector<uint16_t>{1});
	EXPECT_EQ(ac.groups[1].rtpis, (std::vector<uint16_t>{7, 8}));
	EXPECT_TRUE(ac.groups[0].pref);

	const std::string text = to_toml(c);
	Config back;
	ASSERT_TRUE(load_config_file(d.write("saved.toml", text), &back, &why)) << why << text;
	EXPECT_EQ(to_toml(back), text);
	EXPECT_EQ(back.targets[0].alua.groups[1].state, ulp::scsi::AluaState::Standby);

	// No [target.alua]: TPGS 00b and nothing saved.
	Config plain;
	ASSERT_TRUE(load_config_file(d.write("p.toml", kTwoGroups), &plain, &why)) << why;
	EXPECT_EQ(plain.targets[0].alua.tpgs, ulp::scsi::TPGS_NONE);
	EXPECT_EQ(to_toml(plain).find("alua"), std::string::npos);
}

TEST(TargetdConfig, AluaMistakesNameTheirPlace)
{
	Scratch d;
	ASSERT_FALSE(d.path.empty());
	struct Case {
		std::string from, to, says;
	};
	const Case cases[] = {
	    {"\"both\"", "\"sometimes\"", "target.alua.tpgs: must be none, implicit"},
	    {"\"both\"", "\"none\"", "groups need tpgs"},
	    {"\"standby\"", "\"asleep\"", "target.alua.group.state: must be"},
	    {"id = 20", "id = 10", "group 10: id twice"},
	    {"portal_groups = [2]", "portal_groups = [3]", "portal group 3 is not one of"},
	    {"portal_groups = [2]", "portal_groups = [1]", "portal group 1 is in two groups"},
	    {"portal_groups = [2]", "portal_groups = [\"2\"]", "portal_groups: must be an array"},
	    {"preferred = true", "prefered = true", "target.alua.group.prefered: unknown key"},
	    {"implicit_transition_secs = 10", "implicit_transition_secs = 256",
	     "implicit_transition_secs: must be 0..255"},
	};
	for (const Case &k : cases) {
		std::string body = with_alua(kAlua);
		const size_t at = body.find(k.from);
		ASSERT_NE(at, std::string::npos) << k.from;
		body.replace(at, k.from.size(), k.to);
		Config c;
		std::string why;
		EXPECT_FALSE(load_config_file(d.write("bad.toml", body), &c, &why)) << body;
		EXPECT_NE(why.find(k.says), std::string::npos) << why;
		EXPECT_NE(why.find("bad.toml:"), std::string::npos) << "names the place: " << why;
	}
}

// A LU's identity (vendor, product, revision, serial, naa) from the file and the --lun flag,
// through save and back; every bad value refused with its key and LUN named.
TEST(TargetdConfig, LuIdentityFromTheFileFlagsAndThroughSave)
{
	Scratch d;
	ASSERT_FALSE(d.path.empty());
	const std::string body = "  lun = 3\n  backstore = \"ram\"\n  size = \"16M\"\n"
	                         "  vendor = \"ACME\"\n  product = \"Disk 9000\"\n"
	                         "  revision = \"1.2\"\n  serial = \"SN-0042 a\"\n"
	                         "  naa = \"0x5001405AbCdEf012\"\n";
	Config c;
	std::string why;
	ASSERT_TRUE(load_config_file(d.write("id.toml", one_lun_file(body)), &c, &why)) << why;
	const LuIdentity want{"ACME", "Disk 9000", "1.2", "SN-0042 a", 0x5001405abcdef012ull};
	EXPECT_EQ(c.targets[0].luns[0].id, want);
	EXPECT_EQ(lun_serial(kIqn, c.targets[0].luns[0]), "SN-0042 a");
	EXPECT_EQ(lun_naa(kIqn, c.targets[0].luns[0]), 0x5001405abcdef012ull);
	const std::string text = to_toml(c);
	Config back;
	ASSERT_TRUE(load_config_file(d.write("saved.toml", text), &back, &why)) << why << text;
	EXPECT_EQ(back.targets[0].luns[0].id, want);
	EXPECT_EQ(to_toml(back), text);

	// Unset: nothing saved, and the derived serial and NAA are those of the LU's name,
	// the same on every load (a restart) and another for another LUN number.
	Config plain;
	ASSERT_TRUE(load_config_file(
	    d.write("plain.toml",
	            one_lun_file("  lun = 3\n  backstore = \"ram\"\n  size = 1048576\n")),
	    &plain, &why))
	    << why;
	const LunCfg &p = plain.targets[0].luns[0];
	EXPECT_EQ(p.id, LuIdentity{});
	for (const char *k : {"vendor", "product", "revision", "serial", "naa"})
		EXPECT_EQ(to_toml(plain).find(std::string("\n") + k + " ="), std::string::npos)
		    << k;
	EXPECT_EQ(lun_serial(kIqn, p), ulp::scsi::lu_derived_serial(std::string(kIqn) + "/3"));
	EXPECT_EQ(lun_naa(kIqn, p), ulp::scsi::lu_derived_naa(std::string(kIqn) + "/3"));
	EXPECT_EQ(lun_naa(kIqn, p) >> 60, 3u) << "NAA 3h, locally assigned";
	EXPECT_EQ(lun_serial(kIqn, p).size(), 16u);
	LunCfg moved = p;
	moved.lun = 4;
	EXPECT_NE(lun_serial(kIqn, moved), lun_serial(kIqn, p));
	EXPECT_NE(lun_naa("iqn.2026-11.org.ulp:other", p), lun_naa(kIqn, p));

	// The --lun flag's keys.
	Config f;
	ASSERT_TRUE(from_flags({"0:ram:size=1M,vendor=ACME,product=P,revision=7,serial=S1,"
	                        "naa=3000000000000001"},
	                       &f, &why))
	    << why;
	EXPECT_EQ(f.targets[0].luns[0].id,
	          (LuIdentity{"ACME", "P", "7", "S1", 0x3000000000000001ull}));
}

TEST(TargetdConfig, LuIdentityMistakesNameTheKeyAndLun)
{
	Scratch d;
	ASSERT_FALSE(d.path.empty());
	const std::string base = "  lun = 5\n  backstore = \"ram\"\n  size = \"1M\"\n";
	struct Case {
		std::string line; // one more line of the [[target.lun]] table (line 7)
		std::string want; // after "FILE:"
	} cases[] = {
	    {"vendor = \"NINECHARS\"", ":7:"},
	    {"product = \"seventeen chars!!\"", ":7:"},
	    {"revision = \"12345\"", ":7:"},
	    {"serial = \"" + std::string(248, 'x') + "\"", ":7:"},
	    {"serial = \"tab\\there\"", ":7:"},
	    {"serial = \"caf\u00e9\"", ":7:"},
	    {"vendor = \" LEAD\"", ":7:"},
	    {"serial = \"\"", ":7:"},
	    {"naa = \"0x600140512345678\"", ":7:"},
	    {"naa = \"0x6001405123456789abcdef0123456789\"", ":7:"},
	    {"naa = \"0x1001405123456789\"", ":7:"},
	    {"naa = \"0x500140512345678g\"", ":7:"},
	    {"naa = 5", ":7:"},
	};
	for (const Case &k : cases) {
		const std::string key = k.line.substr(0, k.line.find(' '));
		const std::string f =
		    d.write("bad.toml", one_lun_file(base + "  " + k.line + "\n"));
		Config c;
		std::string why;
		EXPECT_FALSE(load_config_file(f, &c, &why)) << k.line;
		EXPECT_NE(why.find(f + k.want), std::string::npos) << why;
		EXPECT_NE(why.find("target.lun." + key + ":"), std::string::npos) << why;
		if (k.line != "naa = 5" && k.line != "serial = \"\"") {
			EXPECT_NE(why.find("(LUN 5)"), std::string::npos) << why;
		}
	}
	// The flag names both too; check_lun (lun_create's values) as well.
	Config c;
	std::string why;
	EXPECT_FALSE(from_flags({"5:ram:size=1M,revision=12345"}, &c, &why));
	EXPECT_NE(why.find("LUN 5: revision: at most 4"), std::string::npos) << why;
	EXPECT_FALSE(from_flags({"5:ram:size=1M,naa=6001405000000000"}, &c, &why));
	EXPECT_NE(why.find("LUN 5: naa:"), std::string::npos) << why;
	LunCfg l;
	l.lun = 9;
	l.bs.kind = "ram";
	l.bs.size = 1 << 20;
	l.id.product = "ok";
	ASSERT_TRUE(check_lun(kIqn, l, &why)) << why;
	l.id.vendor = "VENDOR\x7f";
	EXPECT_FALSE(check_lun(kIqn, l, &why));
	EXPECT_NE(why.find("LUN 9: vendor: printable ASCII"), std::string::npos) << why;
}

// Two LUs of the daemon with one serial number or NAA are refused, in one target, across
// targets, between the file and the flags, and against a derived value.
TEST(TargetdConfig, LuIdentityClashesRefused)
{
	Scratch d;
	ASSERT_FALSE(d.path.empty());
	auto file = [&](const std::string &lun0, const std::string &lun1, bool two_targets) {
		return std::string("[[target]]\nname = \"") + kIqn + "\"\n" +
		       "  [[target.lun]]\n  lun = 0\n  backstore = \"ram\"\n  size = \"1M\"\n" +
		       lun0 +
		       (two_targets ? "[[target]]\nname = \"iqn.2026-11.org.ulp:b\"\n" : "") +
		       "  [[target.lun]]\n  lun = 1\n  backstore = \"ram\"\n  size = \"1M\"\n" +
		       lun1;
	};
	const std::string naa = "  naa = \"0x5001405000000001\"\n";
	const std::string sn = "  serial = \"same\"\n";
	for (bool two : {false, true}) {
		Config c;
		std::string why;
		EXPECT_FALSE(load_config_file(d.write("n.toml", file(naa, naa, two)), &c, &why));
		EXPECT_NE(why.find("LUN 1: naa: 0x5001405000000001 is target " + std::string(kIqn) +
		                   " LUN 0's too"),
		          std::string::npos)
		    << why;
		Config c2;
		EXPECT_FALSE(load_config_file(d.write("s.toml", file(sn, sn, two)), &c2, &why));
		EXPECT_NE(why.find("LUN 1: serial: same is target"), std::string::npos) << why;
		Config ok;
		EXPECT_TRUE(load_config_file(d.write("ok.toml", file(naa, sn, two)), &ok, &why))
		    << why;
	}
	// A configured value that is another LUN's derived one.
	const std::string derived =
	    "  serial = \"" + ulp::scsi::lu_derived_serial(std::string(kIqn) + "/0") + "\"\n";
	Config c;
	std::string why;
	EXPECT_FALSE(load_config_file(d.write("d.toml", file("", derived, false)), &c, &why));
	EXPECT_NE(why.find("serial"), std::string::npos) << why;
	// The file's target and the flags' target.
	Flags f;
	f.config = d.write("one.toml", file(naa, "", true));
	f.target = "iqn.2026-11.org.ulp:flags";
	f.luns = {"0:ram:size=1M,naa=5001405000000001"};
	Config fc;
	EXPECT_FALSE(build_config(f, &fc, &why));
	EXPECT_NE(why.find("naa: 0x5001405000000001"), std::string::npos) << why;
	// lun_create's check against the running configuration.
	Config run;
	ASSERT_TRUE(load_config_file(d.write("run.toml", file(naa, sn, false)), &run, &why)) << why;
	LunCfg l;
	l.lun = 7;
	l.id.serial = "same";
	EXPECT_NE(lun_identity_clash(run.targets, "iqn.2026-11.org.ulp:x", l), "");
	l.id.serial = "other";
	EXPECT_EQ(lun_identity_clash(run.targets, "iqn.2026-11.org.ulp:x", l), "");
}

// A target's login redirect from the file, through save; its mistakes named.
TEST(TargetdConfig, RedirectFromTheFileAndThroughSave)
{
	Scratch d;
	ASSERT_FALSE(d.path.empty());
	const std::string head = std::string("[[target]]\nname = \"") + kIqn + "\"\n";
	for (const std::string addr :
	     {"10.0.0.2:3260", "[fd00::2]:3261", "san2.example.com:3260"}) {
		Config c;
		std::string why;
		ASSERT_TRUE(
		    load_config_file(d.write("r.toml", head + "redirect = \"" + addr +
		                                           "\"\nredirect_permanent = true\n"),
		                     &c, &why))
		    << why;
		EXPECT_EQ(c.targets[0].redirect, addr);
		EXPECT_TRUE(c.targets[0].redirect_permanent);
		const std::string text = to_toml(c);
		Config back;
		ASSERT_TRUE(load_config_file(d.write("saved.toml", text), &back, &why)) << why;
		EXPECT_EQ(back.targets[0].redirect, addr);
		EXPECT_TRUE(back.targets[0].redirect_permanent);
		EXPECT_EQ(to_toml(back), text);
	}
	Config none;
	std::string why;
	ASSERT_TRUE(load_config_file(d.write("n.toml", head), &none, &why)) << why;
	EXPECT_EQ(to_toml(none).find("redirect"), std::string::npos);
	struct Case {
		std::string lines;
		std::string want;
	} cases[] = {
	    {"redirect = \"10.0.0.2:3260,1\"\n",
	     ":3:12: target.redirect: redirect 10.0.0.2:3260,1: "},
	    {"redirect = \":3260\"\n", ":3:12: target.redirect:"},
	    {"redirect = \"10.0.0.2:0\"\n", ":3:12: target.redirect:"},
	    {"redirect = \"10.0.0.2:99999\"\n", ":3:12: target.redirect:"},
	    {"redirect = \"a b:3260\"\n", ":3:12: target.redirect:"},
	    {"redirect = 3260\n", ":3:12: target.redirect: must be a string"},
	    {"redirect_permanent = true\n", "redirect_permanent without a redirect"},
	};
	for (const Case &k : cases) {
		const std::string f = d.write("bad.toml", head + k.lines);
		Config c;
		EXPECT_FALSE(load_config_file(f, &c, &why)) << k.lines;
		EXPECT_NE(why.find(k.want), std::string::npos) << why;
	}
}


// [gateway] (gateway.h): from the file, through save and back; what gateway mode asks of
// the rest of the configuration.
constexpr const char *kGateway = R"(
[gateway]
name = "gw-1"
pool = "ha"
namespace = "ns"
cluster = "prod"
conf = "/etc/ceph/c.conf"
client = "ulp-gw"
keyring = "/etc/ceph/k"
lease = 12
hold_off = 40
)";

std::string gateway_file(const std::string &gw, const std::string &lun)
{
	return gw + one_lun_file(lun);
}

TEST(TargetdConfig, GatewayFromTheFileAndThroughSave)
{
	Scratch d;
	ASSERT_FALSE(d.path.empty());
	Config c;
	std::string why;
	Flags f;
	f.config = d.write("gw.toml", gateway_file(kGateway, "lun = 0\nbackstore = \"rbd\"\n"
	                                                     "pool = \"rbd\"\nimage = \"i\"\n"
	                                                     "group = \"g.1\"\n"));
	ASSERT_TRUE(build_config(f, &c, &why)) << why;
	const GatewayCfg &g = c.gateway;
	EXPECT_TRUE(g.enabled());
	EXPECT_EQ(g.name, "gw-1");
	EXPECT_EQ(g.pool, "ha");
	EXPECT_EQ(g.nspace, "ns");
	EXPECT_EQ(g.cluster, "prod");
	EXPECT_EQ(g.conf, "/etc/ceph/c.conf");
	EXPECT_EQ(g.client, "ulp-gw");
	EXPECT_EQ(g.keyring, "/etc/ceph/k");
	EXPECT_EQ(g.lease_s, 12u);
	EXPECT_EQ(g.hold_off_s, 40u);
	const std::string text = to_toml(c);
	Config back;
	ASSERT_TRUE(load_config_file(d.write("saved.toml", text), &back, &why)) << why << text;
	EXPECT_EQ(back.gateway, g);
	back.portals = c.portals;
	EXPECT_EQ(to_toml(back), text);
	// No [gateway]: not a gateway, and save writes none.
	Config plain;
	ASSERT_TRUE(from_flags({"0:ram:size=1M"}, &plain, &why)) << why;
	EXPECT_FALSE(plain.gateway.enabled());
	EXPECT_EQ(to_toml(plain).find("[gateway]"), std::string::npos);
}

TEST(TargetdConfig, GatewayMistakesNameTheirPlace)
{
	Scratch d;
	ASSERT_FALSE(d.path.empty());
	const std::string rbd = "lun = 0\nbackstore = \"rbd\"\npool = \"rbd\"\nimage = \"i\"\n";
	struct Case {
		std::string gw, lun, says;
	};
	const Case cases[] = {
	    {"[gateway]\npool = \"rbd\"\n", rbd, "gateway.name: 1 to 64"},
	    {"[gateway]\nname = \"gw 1\"\npool = \"rbd\"\n", rbd, "gateway.name: 1 to 64"},
	    {"[gateway]\nname = \"gw1\"\n", rbd, "gateway.pool: required"},
	    {"[gateway]\nname = \"gw1\"\npool = \"rbd\"\ncluster = \"a/b\"\n", rbd,
	     "gateway.cluster"},
	    {"[gateway]\nname = \"gw1\"\npool = \"rbd\"\nlease = 2\n", rbd,
	     "gateway.lease: must be 3..600"},
	    {"[gateway]\nname = \"gw1\"\npool = \"rbd\"\nleese = 10\n", rbd,
	     "gateway.leese: unknown key"},
	    {"gateway = 1\n", rbd, "gateway: must be a table"},
	    {"[gateway]\nname = \"gw1\"\npool = \"rbd\"\n",
	     "lun = 0\nbackstore = \"ram\"\nsize = 1048576\n",
	     "every LUN of a gateway is an rbd image"},
	    {"[gateway]\nname = \"gw1\"\npool = \"rbd\"\n", rbd + "group = \"g/1\"\n",
	     "group \"g/1\""},
	    {"[gateway]\nname = \"gw1\"\npool = \"rbd\"\n",
	     rbd + "[target.alua]\ntpgs = \"implicit\"\n", "[target.alua] with [gateway]"},
	};
	for (const Case &k : cases) {
		Flags f;
		f.config = d.write("bad.toml", gateway_file(k.gw, k.lun));
		Config c;
		std::string why;
		EXPECT_FALSE(build_config(f, &c, &why)) << k.gw << k.lun;
		EXPECT_NE(why.find(k.says), std::string::npos) << why;
	}
}

} // namespace
} // namespace targetd
