// SPDX-License-Identifier: MIT
// tests/admin/targetd_identity_test.cc - ulp-targetd's per-LU identity and login redirects,
// end to end: the daemon in a child process, the project's iSCSI initiator logged in.
//
// Identity: what the file, `ulpctl lun create` and the defaults set is what INQUIRY (SPC-4
// 6.6.2), the unit serial number page (VPD 80h) and the device identification page (VPD
// 83h: NAA and T10 vendor ID designators) report; `ulpctl save` writes a file that starts
// the same identities after a restart (the derived ones included); bad values are refused
// with their key and LUN named. Redirect: a login to a target with `redirect` is answered
// with TargetMovedTemp (0101h) or, after a SIGHUP, TargetMovedPerm (0102h) and the address,
// and ulp's initiator, following it, does verified I/O on the second daemon.
#include "tests/admin/targetd_env.h"

#include "scsi/lu.h"

#include <gtest/gtest.h>

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

namespace ulp::iscsi::initiator
{
namespace
{

using namespace std::chrono_literals;
using test_env::json;
using test_env::local;
using test_env::ulpctl;
using test_env::ulpctl_json;

constexpr char kIqn[] = "iqn.2026-11.org.ulp:ident";
constexpr char kInitiator[] = "iqn.2026-11.org.ulp:ident-test";

// What one LU says of itself.
struct Identity {
	std::string vendor, product, revision; // standard INQUIRY, padding removed
	std::string serial;                    // VPD 80h
	uint64_t naa = 0;                      // VPD 83h, NAA designator of the LU
	std::string t10;                       // VPD 83h, T10 vendor ID designator of the LU
	bool operator==(const Identity &) const = default;
};

std::ostream &operator<<(std::ostream &o, const Identity &i)
{
	return o << "'" << i.vendor << "' '" << i.product << "' '" << i.revision << "' serial '"
	         << i.serial << "' naa " << std::hex << i.naa << std::dec << " t10 '" << i.t10
	         << "'";
}

std::string ascii(const uint8_t *p, size_t n)
{
	std::string s(reinterpret_cast<const char *>(p), n);
	while (!s.empty() && s.back() == ' ')
		s.pop_back();
	return s;
}

// INQUIRY, then VPD 80h and 83h, of lun through s (after its unit attentions).
Identity identity(Session &s, uint64_t lun)
{
	Identity id;
	test_env::clear_ua(s, lun);
	std::array<uint8_t, 96> std_inq{};
	ScsiResult r = s.run({lun, cdb_inquiry(96), DataDir::Read, std_inq});
	EXPECT_TRUE(r.good()) << describe_result(r);
	id.vendor = ascii(&std_inq[8], 8);
	id.product = ascii(&std_inq[16], 16);
	id.revision = ascii(&std_inq[32], 4);

	std::array<uint8_t, 255> d{};
	const std::array<uint8_t, 6> vpd80{0x12, 0x01, 0x80, 0x00, 0xff, 0x00};
	r = s.run({lun, vpd80, DataDir::Read, d});
	EXPECT_TRUE(r.good()) << describe_result(r);
	EXPECT_EQ(d[1], 0x80);
	id.serial = ascii(&d[4], std::min<size_t>(d[3], d.size() - 4));

	d.fill(0);
	const std::array<uint8_t, 6> vpd83{0x12, 0x01, 0x83, 0x00, 0xff, 0x00};
	r = s.run({lun, vpd83, DataDir::Read, d});
	EXPECT_TRUE(r.good()) << describe_result(r);
	EXPECT_EQ(d[1], 0x83);
	const size_t end = std::min<size_t>(d.size(), 4 + (size_t(d[2]) << 8 | d[3]));
	for (size_t i = 4; i + 4 <= end && i + 4 + d[i + 3] <= end; i += 4 + d[i + 3]) {
		const uint8_t assoc = (d[i + 1] >> 4) & 3, type = d[i + 1] & 0xf, len = d[i + 3];
		if (assoc != 0)
			continue;
		if (type == 3 && len == 8)
			for (int k = 0; k < 8; k++)
				id.naa = id.naa << 8 | d[i + 4 + k];
		if (type == 1)
			id.t10 = ascii(&d[i + 4], len);
	}
	return id;
}

std::string derived_serial(uint64_t lun)
{
	return scsi::lu_derived_serial(std::string(kIqn) + "/" + std::to_string(lun));
}
uint64_t derived_naa(uint64_t lun)
{
	return scsi::lu_derived_naa(std::string(kIqn) + "/" + std::to_string(lun));
}

constexpr char kIdentityFile[] = R"([[target]]
name = "iqn.2026-11.org.ulp:ident"
  [[target.lun]]
  lun = 0
  backstore = "ram"
  size = "16M"
  vendor = "ACME"
  product = "Disk 9000"
  revision = "1.2"
  serial = "SN-0042"
  naa = "0x5001405abcdef012"
  [[target.lun]]
  lun = 1
  backstore = "ram"
  size = "16M"
)";

TEST(TargetdIdentity, ConfiguredAndDerivedIdentitiesSurviveSaveAndRestart)
{
	test_env::AdminDaemon d;
	const std::string file = d.dir / "t.toml";
	std::ofstream(file) << kIdentityFile;
	ASSERT_TRUE(d.start({"--config", file}));

	const Identity lun0{"ACME",    "Disk 9000",           "1.2",
	                    "SN-0042", 0x5001405abcdef012ull, "ACME    SN-0042"};
	const Identity lun1{"ULP",          "ulp ram",
	                    "0001",         derived_serial(1),
	                    derived_naa(1), "ULP     " + derived_serial(1)};
	ASSERT_EQ(derived_naa(1) >> 60, 3u) << "NAA 3h, locally assigned";
	Identity lun2;
	{
		Session s(test_env::initiator_config(kInitiator, kIqn));
		ASSERT_TRUE(s.login(local(d.t.port()))) << s.error();
		EXPECT_EQ(identity(s, 0), lun0);
		EXPECT_EQ(identity(s, 1), lun1);

		// A LUN made while the daemon runs, with an identity of its own.
		std::string out;
		ASSERT_EQ(
		    ulpctl(d.sock,
		           {"lun",      "create",   "-t",        kIqn,     "-l",
		            "2",        "-b",       "ram",       "--size", "4M",
		            "--vendor", "V2",       "--product", "Shelf",  "--revision",
		            "9",        "--serial", "SER 2",     "--naa",  "0x3000000000000002"},
		           &out),
		    0)
		    << out;
		lun2 = {"V2", "Shelf", "9", "SER 2", 0x3000000000000002ull, "V2      SER 2"};
		EXPECT_EQ(identity(s, 2), lun2);

		// Refused, naming the key and the LUN: a bad value, and another LU's serial or
		// NAA (derived ones too).
		const std::pair<std::vector<std::string>, std::string> bad[] = {
		    {{"--revision", "12345"}, "LUN 3: revision: at most 4 characters"},
		    {{"--vendor", "caf\xc3\xa9"}, "LUN 3: vendor: printable ASCII"},
		    {{"--naa", "0x6001405abcdef0120000000000000001"}, "LUN 3: naa: "},
		    {{"--naa", "0x7001405abcdef012"}, "LUN 3: naa: "},
		    {{"--serial", "SN-0042"}, "LUN 3: serial: SN-0042 is target"},
		    {{"--serial", derived_serial(1)}, "LUN 3: serial: " + derived_serial(1)},
		    {{"--naa", "0x3000000000000002"}, "LUN 3: naa: 0x3000000000000002 is target"},
		};
		for (const auto &[args, want] : bad) {
			std::vector<std::string> a = {"lun", "create", "-t",  kIqn,     "-l",
			                              "3",   "-b",     "ram", "--size", "4M"};
			a.insert(a.end(), args.begin(), args.end());
			EXPECT_EQ(ulpctl(d.sock, a, &out), 1) << args[0];
			EXPECT_NE(out.find(want), std::string::npos) << out;
		}
		EXPECT_EQ(ulpctl_json(d.sock, {"lun", "list", "-t", kIqn}).size(), 3u)
		    << "nothing made of a refused request";
	}

	// What the daemon shows: the identity, and which values are derived.
	const json luns = ulpctl_json(d.sock, {"lun", "list", "-t", kIqn});
	ASSERT_EQ(luns.size(), 3u);
	EXPECT_EQ(luns[0]["serial"], "SN-0042");
	EXPECT_EQ(luns[0]["naa"], "0x5001405abcdef012");
	EXPECT_EQ(luns[0]["serial_derived"], false);
	EXPECT_EQ(luns[1]["serial"], derived_serial(1));
	EXPECT_EQ(luns[1]["serial_derived"], true);
	EXPECT_EQ(luns[1]["naa_derived"], true);
	EXPECT_EQ(luns[1]["product"], "ulp ram");
	std::string out;
	ASSERT_EQ(ulpctl(d.sock, {"show"}, &out), 0) << out;
	EXPECT_NE(out.find("ACME Disk 9000 1.2, serial SN-0042, naa 0x5001405abcdef012\n"),
	          std::string::npos)
	    << out;
	EXPECT_NE(out.find("serial " + derived_serial(1) + " (derived)"), std::string::npos) << out;

	// Saved, the daemon stopped and started again from the file: the same devices.
	ASSERT_EQ(ulpctl(d.sock, {"save"}, &out), 0) << out;
	EXPECT_EQ(d.t.stop(), 0) << d.t.log();
	test_env::AdminDaemon e;
	ASSERT_TRUE(e.start({"--config", file}));
	Session s(test_env::initiator_config(kInitiator, kIqn));
	ASSERT_TRUE(s.login(local(e.t.port()))) << s.error();
	EXPECT_EQ(identity(s, 0), lun0);
	EXPECT_EQ(identity(s, 1), lun1);
	EXPECT_EQ(identity(s, 2), lun2);
}

TEST(TargetdIdentity, BadValuesAreConfigurationErrors)
{
	test::TempDir dir;
	const std::string file = dir / "bad.toml";
	std::ofstream(file) << "[[target]]\nname = \"" << kIqn << "\"\n"
	                    << "  [[target.lun]]\n  lun = 4\n  backstore = \"ram\"\n"
	                    << "  size = \"1M\"\n  product = \"seventeen chars!!\"\n";
	std::string out, err;
	EXPECT_EQ(test::run_program(ULP_TARGETD_PATH, {"--check", "--config", file}, &out, &err), 2)
	    << out << err;
	EXPECT_NE(err.find(file + ":7:"), std::string::npos) << err;
	EXPECT_NE(err.find("target.lun.product: at most 16 characters, not 17 (LUN 4)"),
	          std::string::npos)
	    << err;

	EXPECT_EQ(test::run_program(ULP_TARGETD_PATH,
	                            {"--check", "--target", kIqn, "--lun",
	                             "0:ram:size=1M,naa=5000000000000001", "--lun",
	                             "1:ram:size=1M,naa=5000000000000001"},
	                            &out, &err),
	          2)
	    << out << err;
	EXPECT_NE(err.find("LUN 1: naa: 0x5000000000000001 is target " + std::string(kIqn) +
	                   " LUN 0's too"),
	          std::string::npos)
	    << err;
	EXPECT_EQ(test::run_program(
	              ULP_TARGETD_PATH,
	              {"--check", "--target", kIqn, "--lun", "0:ram:size=1M,serial=a b ,vendor=X"},
	              &out, &err),
	          2)
	    << out << err;
	EXPECT_NE(err.find("LUN 0: serial: no space at the start or end"), std::string::npos)
	    << err;
}

bool log_has(const test::TargetdProcess &t, const std::string &text)
{
	for (int i = 0; i < 500; i++) {
		if (t.log().find(text) != std::string::npos)
			return true;
		std::this_thread::sleep_for(20ms);
	}
	return false;
}

size_t normal_sessions(const std::string &sock)
{
	size_t n = 0;
	for (const json &j : ulpctl_json(sock, {"session", "list"}))
		n += j["type"] == "normal";
	return n;
}

TEST(TargetdIdentity, LoginRedirectedToAnotherDaemon)
{
	// B serves the target; A only redirects to it.
	test_env::AdminDaemon b;
	ASSERT_TRUE(b.start({"--target", kIqn, "--lun", "0:ram:size=16M"}));
	const std::string to = "127.0.0.1:" + std::to_string(b.t.port());
	test_env::AdminDaemon a;
	const std::string file = a.dir / "a.toml";
	auto write_a = [&](const std::string &redirect_lines) {
		std::ofstream(file) << "[[target]]\nname = \"" << kIqn << "\"\n" << redirect_lines;
	};
	write_a("redirect = \"" + to + "\"\n");
	ASSERT_TRUE(a.start({"--config", file}));

	// Followed: the session is B's, and does verified I/O there.
	Session s(test_env::initiator_config(kInitiator, kIqn));
	ASSERT_TRUE(s.login(local(a.t.port()))) << s.error();
	test_env::clear_ua(s, 0);
	EXPECT_TRUE(test_env::write_read(s, 0, 16, 9));
	EXPECT_EQ(normal_sessions(b.sock), 1u);
	EXPECT_EQ(normal_sessions(a.sock), 0u);

	// Not followed: the Login Response's status itself (RFC 7143 11.13.5).
	auto refused_with = [&]() {
		InitiatorConfig c = test_env::initiator_config(kInitiator, kIqn);
		c.max_redirects = 0;
		Session r(c);
		EXPECT_FALSE(r.login(local(a.t.port())));
		return r.login_status();
	};
	EXPECT_EQ(refused_with(), LoginStatus::TargetMovedTemp);

	// Shown, saved.
	std::string out;
	ASSERT_EQ(ulpctl(a.sock, {"show"}, &out), 0) << out;
	EXPECT_NE(out.find("logins redirected to " + to), std::string::npos) << out;
	const std::string saved = a.dir / "saved.toml";
	ASSERT_EQ(ulpctl(a.sock, {"save", saved}, &out), 0) << out;
	std::ifstream f(saved);
	const std::string text((std::istreambuf_iterator<char>(f)), {});
	const size_t at = text.find("\nredirect = ");
	ASSERT_NE(at, std::string::npos) << text;
	EXPECT_EQ(text.substr(at + 13, to.size() + 1), to + text[at + 12]) << text;
	EXPECT_NE(text.find("redirect_permanent = false"), std::string::npos) << text;

	// Permanent after a SIGHUP; then no redirect at all: A answers the login itself.
	write_a("redirect = \"" + to + "\"\nredirect_permanent = true\n");
	ASSERT_EQ(::kill(a.t.pid(), SIGHUP), 0);
	ASSERT_TRUE(log_has(a.t, "logins redirected to " + to + " (permanently)")) << a.t.log();
	EXPECT_EQ(refused_with(), LoginStatus::TargetMovedPerm);
	ASSERT_EQ(ulpctl(a.sock, {"show"}, &out), 0) << out;
	EXPECT_NE(out.find("logins redirected permanently to " + to), std::string::npos) << out;

	// SendTargets on A still names the target, at A's portal: the redirect is the login's
	// answer (RFC 7143 11.13.5), not discovery's.
	InitiatorConfig dc = test_env::initiator_config(kInitiator, "");
	dc.type = SessionType::Discovery;
	Session ds(dc);
	ASSERT_TRUE(ds.login(local(a.t.port()))) << ds.error();
	std::vector<DiscoveryTarget> found;
	ASSERT_TRUE(ds.send_targets("All", &found)) << ds.last_error();
	ASSERT_EQ(found.size(), 1u);
	EXPECT_EQ(found[0].name, kIqn);

	write_a("");
	ASSERT_EQ(::kill(a.t.pid(), SIGHUP), 0);
	ASSERT_TRUE(log_has(a.t, "logins no longer redirected")) << a.t.log();
	{
		Session here(test_env::initiator_config(kInitiator, kIqn));
		ASSERT_TRUE(here.login(local(a.t.port()))) << here.error();
		EXPECT_EQ(normal_sessions(a.sock), 1u);
		EXPECT_TRUE(test_env::write_read(s, 0, 32, 4)) << "B's session goes on";
	}

	// At run time: `ulpctl target redirect`, a bad address refused, none to undo it.
	ASSERT_EQ(ulpctl(a.sock, {"target", "redirect", "-t", kIqn, to, "--permanent"}, &out), 0)
	    << out;
	EXPECT_EQ(refused_with(), LoginStatus::TargetMovedPerm);
	ASSERT_EQ(ulpctl(a.sock, {"target", "redirect", "-t", kIqn, to}, &out), 0) << out;
	EXPECT_EQ(refused_with(), LoginStatus::TargetMovedTemp);
	Session again(test_env::initiator_config(kInitiator, kIqn));
	ASSERT_TRUE(again.login(local(a.t.port()))) << again.error();
	test_env::clear_ua(again, 0);
	EXPECT_TRUE(test_env::write_read(again, 0, 48, 5)) << "on B";
	EXPECT_EQ(normal_sessions(b.sock), 2u);
	EXPECT_EQ(ulpctl(a.sock, {"target", "redirect", "-t", kIqn, to + ",1"}, &out), 1);
	EXPECT_NE(out.find("without a portal group tag"), std::string::npos) << out;
	EXPECT_EQ(
	    ulpctl(a.sock, {"target", "redirect", "-t", "iqn.2026-11.org.ulp:none", to}, &out), 1);
	ASSERT_EQ(ulpctl(a.sock, {"target", "redirect", "-t", kIqn}, &out), 0) << out;
	Session back(test_env::initiator_config(kInitiator, kIqn));
	ASSERT_TRUE(back.login(local(a.t.port()))) << back.error();
	EXPECT_EQ(normal_sessions(b.sock), 2u) << "served by A again, not B";
}

} // namespace
} // namespace ulp::iscsi::initiator
