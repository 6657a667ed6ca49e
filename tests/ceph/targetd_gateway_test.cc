// SPDX-License-Identifier: MIT
// tests/ceph/targetd_gateway_test.cc - two ulp-targetd gateways ([gateway],
// tools/ulp-targetd/gateway.h) on one real Ceph cluster serving one RBD image, with
// ulp-initiator's multipath mode doing verified writes through both: the owner killed
// (SIGKILL), frozen (SIGSTOP, then SIGCONT: it must find itself fenced and exit 3) and
// drained (a planned move: nobody fenced); two initiators starting on different gateways
// move the image's lock never; a gateway with another's rtpi refused. Leases of 3 s so that
// a take-over takes seconds. The short profile: ulp-stress's gateways scenario has the
// figures.
#include "core/byteorder.h"
#include "tests/admin/targetd_env.h"
#include "tests/ceph/ceph_env.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <thread>

namespace
{

using namespace std::chrono_literals;
using ulp::admin::json;
namespace test = ulp::test;
namespace test_env = ulp::iscsi::initiator::test_env;
using ulp::ceph_test::g_cluster;
using ulp::ceph_test::sh;

constexpr char kIqn[] = "iqn.2026-11.org.ulp:gw";
constexpr int kLease = 3; // seconds

// One gateway: its configuration file, its daemon, its admin socket.
struct Gateway {
	Gateway(std::string n, uint16_t r) : name(std::move(n)), rtpi(r) {}
	std::string name;
	uint16_t rtpi = 0;
	uint16_t port = 0; // its iSCSI portal
	test::TempDir dir;
	test::TargetdProcess p;
	std::string sock;
	// Its Ceph clients each get an admin socket in dir (cut() needs them): the cluster's
	// ceph.conf, and an admin_socket for client.admin.
	bool asok = false;

	::testing::AssertionResult start(const std::string &image, const std::string &group)
	{
		port = test::free_port();
		sock = dir / "admin.sock";
		std::string ceph_conf = g_cluster.conf;
		if (asok) {
			ceph_conf = dir / "ceph.conf";
			std::ifstream in(g_cluster.conf);
			std::ofstream out(ceph_conf);
			out << in.rdbuf() << "\n[client.admin]\nadmin_socket = " << (dir / "ceph")
			    << ".$pid.$cctid.asok\n";
		}
		const std::string conf = dir / "gw.toml";
		std::ofstream f(conf);
		f << "state_dir = \"" << (dir / "state") << "\"\n"
		  << "portals = [\"127.0.0.1:" << port << "\"]\n"
		  << "[gateway]\nname = \"" << name << "\"\npool = \"rbd\"\nconf = \"" << ceph_conf
		  << "\"\nlease = " << kLease << "\nhold_off = 5\n"
		  << "[[target]]\nname = \"" << kIqn << "\"\n"
		  << "  [[target.portal_group]]\n  tag = 1\n  rtpi = " << rtpi
		  << "\n  portals = [\"127.0.0.1:" << port << "\"]\n"
		  << "  [[target.lun]]\n  lun = 0\n  backstore = \"rbd\"\n  pool = \"rbd\"\n"
		  << "  image = \"" << image << "\"\n  conf = \"" << ceph_conf << "\"\n  group = \""
		  << group << "\"\n";
		// A cut gateway's writes in flight end at this op timeout (BUSY), and its exit
		// waits for them: 10 s instead of the default 30, to keep the test short.
		if (asok)
			f << "  timeout = 10\n";
		f.close();
		std::string why;
		if (!p.start({"--config", conf, "--admin-socket", sock}, &why, 30s))
			return ::testing::AssertionFailure() << why;
		return ::testing::AssertionSuccess();
	}
	std::string addr() const { return "127.0.0.1:" + std::to_string(port); }
	// Cut (or with false, restore) every Ceph connection of this gateway's clients: its
	// messenger drops what it sends to and receives from the monitor and the OSD
	// (ms_blackhole_mon, ms_blackhole_osd: Ceph's own switch, set through each client's
	// admin socket), while the connections stay up as in a network partition. The number
	// of clients switched, or -1.
	int cut(bool on)
	{
		int n = 0;
		for (const auto &e : std::filesystem::directory_iterator(dir.path)) {
			const std::string f = e.path().string();
			if (!f.ends_with(".asok"))
				continue;
			for (const char *opt : {"ms_blackhole_osd", "ms_blackhole_mon"}) {
				int rc = 0;
				const std::string out =
				    sh("timeout 30 ceph --admin-daemon " + f + " config set " +
				           opt + (on ? " true" : " false"),
				       &rc);
				if (rc != 0) {
					ADD_FAILURE() << f << ": " << out;
					return -1;
				}
			}
			n++;
		}
		return n;
	}
	// Its one group, as `ulpctl gateway show` has it.
	json group()
	{
		std::string out;
		if (test_env::ulpctl(sock, {"--json", "gateway", "show"}, &out) != 0)
			return json();
		const json j = json::parse(out, nullptr, false);
		if (j.is_discarded() || !j.contains("groups") || j["groups"].empty())
			return json();
		return j["groups"][0];
	}
	// Until its group is in state (bounded): whether it got there.
	bool wait_state(const std::string &state, std::chrono::milliseconds limit)
	{
		const auto end = std::chrono::steady_clock::now() + limit;
		while (std::chrono::steady_clock::now() < end) {
			const json g = group();
			if (g.is_object() && g["state"] == state)
				return true;
			std::this_thread::sleep_for(100ms);
		}
		return false;
	}
};

// A fresh image for each test, so that verified data of one test is no other's.
std::string make_image()
{
	static int n = 0;
	const std::string name = "gw" + std::to_string(::getpid()) + "-" + std::to_string(n++);
	int rc = 0;
	const std::string out = sh("rbd create --size 64M rbd/" + name, &rc);
	EXPECT_EQ(rc, 0) << out;
	return name;
}

// ulp-initiator in multipath mode over paths (the first is tried first), --json.
int run_initiator(const std::vector<std::string> &paths, std::vector<std::string> extra,
                  std::string *out)
{
	std::vector<std::string> args = {"-p", paths[0]};
	for (size_t i = 1; i < paths.size(); i++)
		args.insert(args.end(), {"--path", paths[i]});
	args.insert(args.end(), {"-t", kIqn, "--json", "--quiet", "--cmd-timeout", "8"});
	args.insert(args.end(), extra.begin(), extra.end());
	std::string err;
	const int rc = test::run_program(ULP_INITIATOR_PATH, args, out, &err, 120s);
	if (rc != 0)
		*out += err;
	return rc;
}

json last_json(const std::string &out)
{
	const size_t at = out.find("{\n");
	return json::parse(at == std::string::npos ? "" : out.substr(at), nullptr, false);
}

// The run ended well: no error, every block verified.
void expect_clean(const std::string &out)
{
	const json j = last_json(out);
	ASSERT_FALSE(j.is_discarded()) << out;
	EXPECT_EQ(j["ok"], true) << out;
	EXPECT_EQ(j["errors"], 0) << out;
	EXPECT_EQ(j["verify_errors"], 0) << out;
	EXPECT_GT(j["verified_blocks"].get<uint64_t>(), 0u) << out;
}

// Two gateways on image, gw1 the owner (started first), gw2 standby.
struct Pair {
	Gateway g1{"gw1", 10}, g2{"gw2", 20};
	std::string image;
	::testing::AssertionResult start()
	{
		image = make_image();
		const std::string group = "grp-" + image;
		if (auto r = g1.start(image, group); !r)
			return r;
		if (!g1.wait_state("active", 15s))
			return ::testing::AssertionFailure() << "gw1 never owned the group\n"
			                                     << g1.p.log();
		if (auto r = g2.start(image, group); !r)
			return r;
		if (!g2.wait_state("standby", 5s))
			return ::testing::AssertionFailure() << "gw2 is not standby\n"
			                                     << g2.p.log();
		return ::testing::AssertionSuccess();
	}
};

// Verified random writes through both gateways of p for seconds, on a thread of its own
// (seed: the run's data); join it, then rc and out hold its exit status and output.
struct Writer {
	std::string out;
	int rc = -1;
	std::thread t;
	Writer(const Pair &p, int seconds, int seed)
	{
		t = std::thread([this, &p, seconds, seed] {
			rc = run_initiator({p.g1.addr(), p.g2.addr()},
			                   {"-w", "randwrite", "-r", std::to_string(seconds), "-q",
			                    "8", "--range", "8m", "--verify-only", "--seed",
			                    std::to_string(seed)},
			                   &out);
		});
	}
	void join() { t.join(); }
	// Its end: it ran to the end, and every block it wrote read back as written.
	void expect_clean_end()
	{
		join();
		ASSERT_EQ(rc, 0) << out;
		expect_clean(out);
	}
};

// gw1, fenced, exits 3 within limit (its unit would restart it with a new client); the
// writer ended clean through gw2, which owns the group.
void expect_fenced_and_handed_over(Pair &p, Writer &run, std::chrono::seconds limit)
{
	const int st = p.g1.p.wait(limit);
	EXPECT_EQ(st, 3) << p.g1.p.log();
	run.expect_clean_end();
	EXPECT_EQ(p.g2.group()["owner"], "gw2");
}

TEST(TargetdGateway, KillingTheOwnerMovesTheGroupWithNothingLost)
{
	Pair p;
	ASSERT_TRUE(p.start());
	const uint64_t epoch = p.g1.group()["epoch"].get<uint64_t>();
	Writer run(p, 14, 11);
	std::this_thread::sleep_for(3s);
	p.g1.p.kill();
	EXPECT_TRUE(p.g2.wait_state("active", 15s)) << p.g2.p.log();
	run.expect_clean_end();
	const json j = last_json(run.out);
	EXPECT_GE(j["multipath"]["switches"].get<uint64_t>(), 1u) << run.out;
	const json g = p.g2.group();
	EXPECT_EQ(g["owner"], "gw2");
	EXPECT_EQ(g["epoch"].get<uint64_t>(), epoch + 1);
	// The metrics say so too.
	std::string prom;
	ASSERT_EQ(test_env::ulpctl(p.g2.sock, {"stats", "--prometheus"}, &prom), 0) << prom;
	const std::string labels = "{gateway=\"gw2\",group=\"grp-" + p.image + "\"}";
	EXPECT_NE(prom.find("ulp_gateway_group_active" + labels + " 1\n"), std::string::npos)
	    << prom;
	EXPECT_NE(
	    prom.find("ulp_gateway_group_epoch" + labels + " " + std::to_string(epoch + 1) + "\n"),
	    std::string::npos)
	    << prom;
	// gw2 fenced gw1 before taking over: it never said gw1 released the group.
	EXPECT_NE(p.g2.p.log().find("did not release it: fencing it"), std::string::npos)
	    << p.g2.p.log();
}

TEST(TargetdGateway, AFrozenOwnerIsFencedAndEndsWhenItWakes)
{
	Pair p;
	ASSERT_TRUE(p.start());
	Writer run(p, 16, 12);
	std::this_thread::sleep_for(3s);
	ASSERT_EQ(::kill(p.g1.p.pid(), SIGSTOP), 0);
	EXPECT_TRUE(p.g2.wait_state("active", 20s)) << p.g2.p.log();
	// Awake, gw1 finds its lease lost to a fencing: its ports unavailable, it ends with
	// status 3 (its unit restarts it with a new client).
	ASSERT_EQ(::kill(p.g1.p.pid(), SIGCONT), 0);
	expect_fenced_and_handed_over(p, run, 15s);
}

TEST(TargetdGateway, ADrainHandsTheGroupOverWithoutFencing)
{
	Pair p;
	ASSERT_TRUE(p.start());
	Writer run(p, 10, 13);
	std::this_thread::sleep_for(3s);
	const std::string blocklist = sh("ceph osd blocklist ls 2>/dev/null | grep 127.0.0.1");
	const json d = test_env::ulpctl_json(p.g1.sock, {"gateway", "drain"});
	ASSERT_EQ(d["drained"], json::array({"grp-" + p.image})) << d.dump();
	// Sooner than a lease: the successor need not wait for it to run out, nor fence.
	EXPECT_TRUE(p.g2.wait_state("active", std::chrono::seconds(kLease))) << p.g2.p.log();
	run.expect_clean_end();
	EXPECT_EQ(p.g2.p.log().find("did not release it"), std::string::npos) << p.g2.p.log();
	const json g1 = p.g1.group();
	EXPECT_EQ(g1["state"], "standby");
	EXPECT_EQ(g1["owner"], "gw2");
	EXPECT_TRUE(p.g1.p.running());
	// Nobody more is blocklisted.
	EXPECT_EQ(sh("ceph osd blocklist ls 2>/dev/null | grep 127.0.0.1"), blocklist);
}

// Initiators that start on different gateways both end up on the owner's port: the
// image's exclusive lock never moves. I/O sent to the standby gateway alone is refused
// (NOT READY, standby), and moves it neither.
TEST(TargetdGateway, InitiatorsOnBothGatewaysMoveNoLock)
{
	Pair p;
	ASSERT_TRUE(p.start());
	const json before = p.g1.group();
	const std::string lockers = sh("rbd lock ls rbd/" + p.image + " 2>/dev/null | grep client");
	ASSERT_NE(lockers.find("auto "), std::string::npos) << lockers; // the exclusive lock
	std::string out_a, out_b;
	int rc_a = -1, rc_b = -1;
	std::thread a([&] {
		rc_a = run_initiator({p.g1.addr(), p.g2.addr()},
		                     {"-w", "randwrite", "-r", "6", "-q", "4", "--range", "4m",
		                      "--verify-only", "--seed", "21"},
		                     &out_a);
	});
	std::thread b([&] {
		rc_b = run_initiator({p.g2.addr(), p.g1.addr()},
		                     {"-w", "randwrite", "-r", "6", "-q", "4", "--offset", "8m",
		                      "--range", "4m", "--verify-only", "--seed", "22"},
		                     &out_b);
	});
	a.join();
	b.join();
	ASSERT_EQ(rc_a, 0) << out_a;
	ASSERT_EQ(rc_b, 0) << out_b;
	expect_clean(out_a);
	expect_clean(out_b);
	// One path only, to the standby gateway: refused, the lock stays.
	std::string out_c;
	std::vector<std::string> args = {"-p",     p.g2.addr(), "-t",         kIqn,
	                                 "-w",     "write",     "-s",         "64k",
	                                 "--json", "--quiet",   "--no-verify"};
	std::string err;
	EXPECT_NE(test::run_program(ULP_INITIATOR_PATH, args, &out_c, &err, 60s), 0) << out_c;
	const json after = p.g1.group();
	EXPECT_EQ(after["owner"], "gw1");
	EXPECT_EQ(after["epoch"], before["epoch"]);
	EXPECT_EQ(after["state"], "active");
	EXPECT_EQ(sh("rbd lock ls rbd/" + p.image + " 2>/dev/null | grep client"), lockers);
}

// The whole cluster out of reach (its monitor and OSD frozen) for two leases: the owner
// cannot renew, so its ports go transitioning before its lease can have run out (and no
// command completes GOOD on the image meanwhile: the OSD does not answer); when the cluster
// is back, a gateway owns the group again and the run ends clean. The old owner, whose
// lease ran out, finds itself fenced and exits 3, or was fenced by the other.
TEST(TargetdGateway, LosingTheClusterStopsTheOwnerUntilItIsBack)
{
	Pair p;
	ASSERT_TRUE(p.start());
	Writer run(p, 24, 14);
	std::this_thread::sleep_for(3s);
	const std::string pids =
	    "$(cat " + g_cluster.dir + "/run/mon.a.pid " + g_cluster.dir + "/run/osd.0.pid)";
	int src = 0;
	sh("kill -STOP " + pids, &src);
	ASSERT_EQ(src, 0);
	std::this_thread::sleep_for(std::chrono::seconds(2 * kLease + 1));
	sh("kill -CONT " + pids, &src);
	ASSERT_EQ(src, 0);
	EXPECT_NE(p.g1.p.log().find("its ports report transitioning"), std::string::npos)
	    << p.g1.p.log();
	// One of the two owns the group again (gw1 may have ended, fenced: reaped here).
	const auto end = std::chrono::steady_clock::now() + 30s;
	bool owned = false;
	while (!owned && std::chrono::steady_clock::now() < end) {
		if (p.g1.p.running()) {
			const int st = p.g1.p.wait(0ms);
			EXPECT_TRUE(st == -1 || st == 3) << "gw1 ended with " << st << "\n"
			                                 << p.g1.p.log();
		}
		for (Gateway *g : {&p.g1, &p.g2}) {
			if (g->p.running() && g->group()["state"] == "active")
				owned = true;
		}
		std::this_thread::sleep_for(200ms);
	}
	EXPECT_TRUE(owned) << p.g2.p.log();
	run.expect_clean_end();
}

// The owner's own connections to the cluster cut, the cluster and the other gateway
// untouched: the owner goes transitioning before its lease can run out and cannot renew;
// the other fences it (blocklist) and serves. Once its connections are back, the cut one
// finds itself fenced and exits 3 (if it has not ended already). The run ends clean:
// nothing the cut gateway acknowledged is lost, none of its writes lands later.
TEST(TargetdGateway, ACutClusterConnectionFencesTheOwner)
{
	Pair p;
	p.g1.asok = true;
	ASSERT_TRUE(p.start());
	Writer run(p, 20, 15);
	std::this_thread::sleep_for(3s);
	const int clients = p.g1.cut(true);
	ASSERT_GE(clients, 2) << "the map's client and the group's, each with an admin socket";
	EXPECT_TRUE(p.g2.wait_state("active", 30s)) << p.g2.p.log();
	EXPECT_NE(p.g2.p.log().find("did not release it: fencing it"), std::string::npos)
	    << p.g2.p.log();
	EXPECT_NE(p.g1.p.log().find("its ports report transitioning"), std::string::npos)
	    << p.g1.p.log();
	if (p.g1.p.running())
		(void)p.g1.cut(false); // it may have ended meanwhile (its lease ran out)
	// Its writes sent into the cut end at its LUN's op timeout (10 s, BUSY) and its exit
	// waits for them (the sessions' teardown), then for its notifies in flight (7 s).
	expect_fenced_and_handed_over(p, run, 45s);
}

// ---- Reservations across the gateways (ha/pr_cluster.h through the daemon) ----------------

using ulp::iscsi::initiator::DataDir;
using ulp::iscsi::initiator::ScsiResult;
using ulp::iscsi::initiator::Session;

// A command, again while it meets a unit attention (a change told to this nexus first).
ScsiResult run_past_ua(Session &s, std::span<const uint8_t> cdb, DataDir dir,
                       std::vector<uint8_t> &data)
{
	ScsiResult r;
	for (int i = 0; i < 5; i++) {
		r = s.run({0, cdb, dir, data});
		const bool ua = r.status == 2 && r.sense_len > 2 &&
		                ((r.sense[0] & 0x7f) == 0x72 ? r.sense[1] : r.sense[2] & 0x0f) == 6;
		if (!ua)
			break;
	}
	return r;
}

// PERSISTENT RESERVE OUT (SPC-4 6.17): its status.
uint8_t pr_out(Session &s, uint8_t sa, uint8_t type, uint64_t key, uint64_t sa_key)
{
	std::array<uint8_t, 10> cdb{0x5f, sa, type};
	ulp::put_be32(&cdb[5], 24);
	std::vector<uint8_t> d(24, 0);
	ulp::put_be64(&d[0], key);
	ulp::put_be64(&d[8], sa_key);
	return run_past_ua(s, cdb, DataDir::Write, d).status;
}

// PERSISTENT RESERVE IN (SPC-4 6.16): its data, empty when it failed.
std::vector<uint8_t> pr_in(Session &s, uint8_t sa)
{
	std::array<uint8_t, 10> cdb{0x5e, sa};
	std::vector<uint8_t> d(1024);
	ulp::put_be16(&cdb[7], uint16_t(d.size()));
	const ScsiResult r = run_past_ua(s, cdb, DataDir::Read, d);
	d.resize(r.good() ? r.data_in : 0);
	return d;
}

// Two initiators, one on each gateway (the second on the standby's port, where SPC-4
// 5.15.2.4.4 still lets PERSISTENT RESERVE IN/OUT through): what one does, the other's
// gateway enforces and reports.
TEST(TargetdGateway, ReservationsHoldAcrossGateways)
{
	Pair p;
	ASSERT_TRUE(p.start());
	Session a(test_env::initiator_config("iqn.2026-11.org.ulp:pr-a", kIqn));
	ASSERT_TRUE(a.login(test_env::local(p.g1.port))) << a.error();
	Session b(test_env::initiator_config("iqn.2026-11.org.ulp:pr-b", kIqn));
	ASSERT_TRUE(b.login(test_env::local(p.g2.port))) << b.error();
	constexpr uint64_t ka = 0xa1, kb = 0xb2;
	EXPECT_EQ(pr_out(a, 0x00, 0, 0, ka), 0) << "REGISTER through gw1";
	EXPECT_EQ(pr_out(b, 0x00, 0, 0, kb), 0) << "REGISTER through gw2";
	// Both keys, read through either gateway.
	for (Session *s : {&a, &b}) {
		const auto keys = pr_in(*s, 0x00);
		ASSERT_EQ(keys.size(), 24u);
		EXPECT_EQ(ulp::get_be64(&keys[8]), ka);
		EXPECT_EQ(ulp::get_be64(&keys[16]), kb);
	}
	// a reserves (Write Exclusive) through gw1; gw2 reports it and refuses b's.
	EXPECT_EQ(pr_out(a, 0x01, 0x1, ka, 0), 0);
	const auto resv = pr_in(b, 0x01);
	ASSERT_GE(resv.size(), 24u);
	EXPECT_EQ(ulp::get_be64(&resv[8]), ka);
	EXPECT_EQ(resv[21] & 0x0f, 0x1);
	EXPECT_EQ(pr_out(b, 0x01, 0x1, kb, 0), 0x18) << "RESERVATION CONFLICT through gw2";
	// b preempts a through gw2: a's registration is gone at gw1, its writes conflict.
	EXPECT_EQ(pr_out(b, 0x04, 0x1, kb, ka), 0) << "PREEMPT through gw2";
	std::vector<uint8_t> blk(512, 0x5a);
	const auto w16 = ulp::iscsi::initiator::cdb_write16(0, 1);
	EXPECT_EQ(run_past_ua(a, w16, DataDir::Write, blk).status, 0x18)
	    << "a's write through gw1 after the preemption";
	// READ FULL STATUS through gw1: b alone, the holder, at gw2's port (rtpi 20).
	const auto full = pr_in(a, 0x03);
	ASSERT_GE(full.size(), 32u);
	EXPECT_EQ(ulp::get_be32(&full[4]), full.size() - 8) << "one descriptor";
	EXPECT_EQ(ulp::get_be64(&full[8]), kb);
	EXPECT_TRUE(full[20] & 0x01) << "the holder";
	EXPECT_EQ(ulp::get_be16(&full[26]), 20);
}

TEST(TargetdGateway, AnRtpiOfAnotherGatewayIsRefused)
{
	Pair p;
	ASSERT_TRUE(p.start());
	Gateway g3{"gw3", 10}; // gw1's rtpi
	const ::testing::AssertionResult r = g3.start(p.image, "grp-" + p.image);
	EXPECT_FALSE(r);
	const std::string log = r.message();
	EXPECT_NE(log.find("rtpi 10 of target " + std::string(kIqn) + " is gateway gw1's"),
	          std::string::npos)
	    << log;
}

} // namespace

int main(int argc, char **argv)
{
	::testing::InitGoogleTest(&argc, argv);
	::testing::AddGlobalTestEnvironment(new ulp::ceph_test::CephEnv);
	return RUN_ALL_TESTS();
}
