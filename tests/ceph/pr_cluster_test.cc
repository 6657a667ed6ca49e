// SPDX-License-Identifier: MIT
// tests/ceph/pr_cluster_test.cc - persistent reservations shared by gateways (scsi/pr_shared.h
// over ha/pr_cluster.h) against a real single-node Ceph cluster started for this program
// (tests/ceph/ceph_env.h). Two gateways are two LUs of one identity in one process, each
// with a RADOS client of its own (its group's) and its own target port (relative target
// port ids 1 and 2): what one registers, reserves, preempts or moves, the other enforces
// and reports alike; a PREEMPT AND ABORT at one aborts the preempted task at the other and
// waits for it; changes from both at once all land; a watcher that does not answer is handed
// to the fencing hook before anything completes GOOD; the state outlives the gateways and
// an OSD restart; a gateway that lost its watch reads again what it missed.
#include "ha/pr_cluster.h"
#include "ha/records.h"
#include "tests/ceph/ceph_env.h"
#include "tests/scsi/pr_env.h"
#include "tests/scsi/spc_env.h"

#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

namespace ulp::ha
{
namespace
{

using namespace std::chrono_literals;
using namespace scsi;
using namespace scsi::pr_test;
using ceph_test::g_cluster;
using Clock = std::chrono::steady_clock;

const auto *g_env = ::testing::AddGlobalTestEnvironment(new ceph_test::CephEnv);

std::shared_ptr<RadosClient> client(const std::string &group)
{
	RadosConfig c;
	c.conf = g_cluster.conf;
	c.keyring = g_cluster.keyring;
	c.group = group;
	c.timeout_s = 10;
	int err = 0;
	std::string why;
	auto cl = rados_client_get(c, &err, &why);
	EXPECT_TRUE(cl) << why;
	return cl;
}

// The identity of the LU of the test running: an object of its own, a new one each call
// (a test repeated on the same cluster, --gtest_repeat, starts afresh).
std::string test_identity()
{
	static std::atomic<int> calls{0};
	const auto *t = ::testing::UnitTest::GetInstance()->current_test_info();
	return std::string("test:") + t->test_suite_name() + "." + t->name() + "." +
	       std::to_string(getpid()) + "." + std::to_string(calls++);
}

// The daemon's fencing hook, as a record of whom it was asked to fence.
struct Fencer {
	std::mutex lock;
	std::vector<PrPeer> peers;          // lock
	int answer = 0;                     // what it returns
	Clock::time_point returned{};       // when it last returned (lock)
	std::chrono::milliseconds delay{0}; // how long it takes

	std::function<int(const PrPeer &)> fn()
	{
		return [this](const PrPeer &p) {
			std::this_thread::sleep_for(delay);
			std::lock_guard g(lock);
			peers.push_back(p);
			returned = Clock::now();
			return answer;
		};
	}
	std::vector<PrPeer> seen()
	{
		std::lock_guard g(lock);
		return peers;
	}
};

// One gateway: its client, one target port, the LU (RAM behind a gate, so that tests can
// hold a task in flight) and its shared reservations. Torn down in the order a daemon must:
// sessions, then the sharing, then the LU.
struct Gateway {
	Gateway(const std::string &name, uint16_t rtpi, const std::string &identity,
	        Fencer *fencer = nullptr, std::chrono::milliseconds notify = 5000ms)
	    : name(name), tpg("iqn.2026-11.org.ulp:" + name, rtpi)
	{
		cl = client(identity + "/" + name);
		auto gb = std::make_unique<GatedBackstore>(ram(1 << 20));
		gate = gb.get();
		// The same name at every gateway: the same NAA, which the state image checks.
		lu = std::make_unique<LogicalUnit>("lu0", std::move(gb), LuConfig{});
		PrClusterConfig c;
		c.pool = "rbd";
		c.gateway = name;
		c.identity = identity;
		c.notify_timeout = notify;
		if (fencer)
			c.on_peer_timeout = fencer->fn();
		int err = 0;
		std::string why;
		if (cl)
			pc = PrCluster::attach(*lu, cl, c, &err, &why);
		EXPECT_TRUE(pc) << why;
		EXPECT_EQ(tpg.add_lun(0, *lu), 0);
		// The record names the port the LU is exported through now.
		if (pc) {
			EXPECT_EQ(pc->check_watch(), 0);
		}
	}
	~Gateway()
	{
		for (Nexus *s : tpg.sessions())
			EXPECT_EQ(lb.logout(s), 0);
		pc.reset();
	}

	// A session of initiator port `port`, its POWER ON unit attention consumed.
	Nexus *join(const std::string &port)
	{
		Nexus *s = lb.login(tpg, port.substr(0, port.find(',')), port);
		EXPECT_TRUE(s);
		if (s) {
			EXPECT_EQ(lb.run(s, 0, cdb_tur(), DataDir::None).asc(), UA_POWER_ON);
		}
		return s;
	}
	LoopResult out(Nexus *s, uint8_t sa, uint64_t key, uint64_t sa_key, uint8_t type = 0,
	               uint8_t flags = 0)
	{
		return lb.run(s, 0, cdb_prout(sa, type), DataDir::Write,
		              prout_data(key, sa_key, flags));
	}
	LoopResult out_data(Nexus *s, uint8_t sa, const std::vector<uint8_t> &d, uint8_t type = 0)
	{
		return lb.run(s, 0, cdb_prout(sa, type, static_cast<uint32_t>(d.size())),
		              DataDir::Write, d);
	}
	LoopResult in(Nexus *s, uint8_t sa)
	{
		return lb.run(s, 0, cdb_prin(sa, 4096), DataDir::Read, std::vector<uint8_t>(4096));
	}
	std::vector<uint64_t> keys(Nexus *s, uint32_t *gen = nullptr)
	{
		auto r = in(s, SA_READ_KEYS);
		EXPECT_EQ(r.status, Status::Good);
		std::vector<uint64_t> k;
		if (r.data.size() < 8)
			return k;
		if (gen)
			*gen = get_be32(&r.data[0]);
		for (size_t i = 8; i + 8 <= r.data.size(); i += 8)
			k.push_back(get_be64(&r.data[i]));
		return k;
	}
	// The reservation's key and type (READ RESERVATION); {0, 0} for none.
	std::pair<uint64_t, uint8_t> resv(Nexus *s)
	{
		auto r = in(s, SA_READ_RESERVATION);
		EXPECT_EQ(r.status, Status::Good);
		if (r.data.size() < 24)
			return {0, 0};
		return {get_be64(&r.data[8]), uint8_t(r.data[21] & 0xf)};
	}
	// Through pr_check alone (this gateway's cache): one block written or read.
	Status write(Nexus *s, uint32_t lba = 1)
	{
		return lb
		    .run(s, 0, cdb_rw10(true, lba, 1), DataDir::Write, std::vector<uint8_t>(512))
		    .status;
	}
	Status read(Nexus *s, uint32_t lba = 1)
	{
		return lb
		    .run(s, 0, cdb_rw10(false, lba, 1), DataDir::Read, std::vector<uint8_t>(512))
		    .status;
	}
	uint16_t ua(Nexus *s)
	{
		auto r = lb.run(s, 0, cdb_tur(), DataDir::None);
		if (r.status == Status::CheckCondition && r.key() == SenseKey::UnitAttention)
			return r.asc();
		EXPECT_EQ(r.status, Status::Good);
		return 0;
	}

	const std::string name;
	std::shared_ptr<RadosClient> cl;
	Loopback lb;
	Tpg tpg;
	std::unique_ptr<LogicalUnit> lu;
	GatedBackstore *gate = nullptr;
	std::unique_ptr<PrCluster> pc;
};

struct FullStatus {
	uint64_t key = 0;
	bool all_tg_pt = false, holder = false;
	uint8_t scope_type = 0;
	uint16_t rtpi = 0;
	std::string port; // the TransportID's text
};

std::vector<FullStatus> full_status(const std::vector<uint8_t> &d)
{
	std::vector<FullStatus> v;
	if (d.size() < 8)
		return v;
	EXPECT_EQ(get_be32(&d[4]), d.size() - 8);
	for (size_t off = 8; off + 24 <= d.size();) {
		FullStatus f;
		f.key = get_be64(&d[off]);
		f.all_tg_pt = d[off + 12] & 0x02;
		f.holder = d[off + 12] & 0x01;
		f.scope_type = d[off + 13];
		f.rtpi = get_be16(&d[off + 18]);
		const uint32_t n = get_be32(&d[off + 20]);
		if (off + 24 + n > d.size() || n < 4) {
			ADD_FAILURE() << "a descriptor past the data";
			break;
		}
		f.port = std::string(reinterpret_cast<const char *>(&d[off + 28]));
		v.push_back(f);
		off += 24 + n;
	}
	return v;
}

// An iSCSI TransportID of format 01b for port (name,i,0xISID).
std::vector<uint8_t> tid01(const std::string &port)
{
	size_t addl = (port.size() + 1 + 3) & ~size_t(3);
	addl = std::max<size_t>(addl, 20);
	std::vector<uint8_t> t(4 + addl, 0);
	t[0] = 0x40 | 0x05;
	put_be16(&t[2], static_cast<uint16_t>(addl));
	std::memcpy(&t[4], port.data(), port.size());
	return t;
}

// The REGISTER AND MOVE parameter list (SPC-4 6.17.4 table 172).
std::vector<uint8_t> move_list(uint64_t key, uint64_t sa_key, uint16_t rtpi,
                               const std::string &port, bool unreg = false)
{
	std::vector<uint8_t> d(24, 0);
	put_be64(&d[0], key);
	put_be64(&d[8], sa_key);
	d[17] = unreg ? 0x02 : 0;
	put_be16(&d[18], rtpi);
	const std::vector<uint8_t> t = tid01(port);
	put_be32(&d[20], static_cast<uint32_t>(t.size()));
	d.insert(d.end(), t.begin(), t.end());
	return d;
}

// A REGISTER parameter list with SPEC_I_PT and these TransportIDs (SPC-4 6.17.3 table 170).
std::vector<uint8_t> spec_list(uint64_t key, uint64_t sa_key,
                               const std::vector<std::vector<uint8_t>> &tids,
                               uint8_t flags = F_SPEC_I_PT)
{
	std::vector<uint8_t> d = prout_data(key, sa_key, flags);
	std::vector<uint8_t> all;
	for (const auto &t : tids)
		all.insert(all.end(), t.begin(), t.end());
	d.resize(28);
	put_be32(&d[24], static_cast<uint32_t>(all.size()));
	d.insert(d.end(), all.begin(), all.end());
	return d;
}

} // namespace

TEST(PrGatewayRecord, RoundTripAndDamage)
{
	PrGatewayRecord r{"gw-1", "127.0.0.1:0/123456", {1, 7, 65535}};
	const std::string s = pr_gateway_record_encode(r);
	EXPECT_EQ(s, "gw=gw-1;addr=127.0.0.1:0/123456;ports=1,7,65535");
	PrGatewayRecord d;
	ASSERT_TRUE(pr_gateway_record_decode(s, &d));
	EXPECT_EQ(d.gw, "gw-1");
	EXPECT_EQ(d.addr, "127.0.0.1:0/123456");
	EXPECT_EQ(d.ports, (std::vector<uint16_t>{1, 7, 65535}));
	ASSERT_TRUE(pr_gateway_record_decode("addr=a;gw=g", &d));
	EXPECT_TRUE(d.ports.empty()) << "a LU exported through no port yet";
	EXPECT_EQ(pr_gateway_record_encode(d), "gw=g;addr=a");
	for (const char *bad :
	     {"", "gw=g", "addr=a", "gw=g;addr=a;ports=", "gw=g;addr=a;ports=0",
	      "gw=g;addr=a;ports=65536", "gw=g;addr=a;ports=2,1", "gw=g;addr=a;ports=1,1",
	      "gw=g;addr=a;ports=1,", "gw=g;addr=a;ports=01", "gw=g;addr=a;ports=1;x=y",
	      "gw=g/h;addr=a", "gw=g;gw=g;addr=a"})
		EXPECT_FALSE(pr_gateway_record_decode(bad, &d)) << "'" << bad << "'";
	uint64_t gid = 0;
	EXPECT_EQ(pr_gateway_key(4181), "gw.4181");
	EXPECT_TRUE(pr_gateway_key_decode("gw.4181", &gid));
	EXPECT_EQ(gid, 4181u);
	for (const char *bad : {"gw.", "gw.04181", "gw.x", "owner/g", "pr.image"})
		EXPECT_FALSE(pr_gateway_key_decode(bad, &gid)) << "'" << bad << "'";
	EXPECT_EQ(pr_cluster_oid("rbd:f/1/2"), pr_cluster_oid("rbd:f/1/2"));
	EXPECT_NE(pr_cluster_oid("rbd:f/1/2"), pr_cluster_oid("rbd:f/1/3"));
	EXPECT_EQ(pr_cluster_oid("rbd:f/1/2").size(), 7u + 16u) << "ulp.pr. and 16 hex digits";
}

// Registered through one gateway, reserved through the other: both enforce the reservation
// and both report it. ALL_TG_PT stands for the initiator port through every gateway's ports;
// a registration without it for its own I_T nexus only.
TEST(PrCluster, RegisterHereReserveThere)
{
	const std::string id = test_identity();
	Gateway g1("gw1", 1, id), g2("gw2", 2, id);
	ASSERT_TRUE(g1.pc && g2.pc);
	EXPECT_EQ(g1.pc->oid(), g2.pc->oid());
	Nexus *a1 = g1.join(kPortA), *a2 = g2.join(kPortA);
	Nexus *b1 = g1.join(kPortB), *b2 = g2.join(kPortB);

	ASSERT_EQ(g1.out(a1, SA_REGISTER, 0, K1, 0, F_ALL_TG_PT).status, Status::Good);
	ASSERT_EQ(g2.out(a2, SA_RESERVE, K1, 0, EA).status, Status::Good)
	    << "a2 is registered by the ALL_TG_PT registration made through gw1";
	// Exclusive Access: b conflicts through both gateways, for reads and writes alike.
	for (auto [g, b] : {std::pair{&g1, b1}, std::pair{&g2, b2}}) {
		EXPECT_EQ(g->write(b), Status::ReservationConflict) << g->name;
		EXPECT_EQ(g->read(b), Status::ReservationConflict) << g->name;
		EXPECT_EQ(g->resv(b), (std::pair<uint64_t, uint8_t>{K1, EA})) << g->name;
	}
	for (auto [g, a] : {std::pair{&g1, a1}, std::pair{&g2, a2}}) {
		EXPECT_EQ(g->write(a), Status::Good) << g->name;
		EXPECT_EQ(g->read(a), Status::Good) << g->name;
	}
	// b registers through gw2 only: its I_T nexus through gw1 is not registered.
	ASSERT_EQ(g2.out(b2, SA_REGISTER, 0, K2).status, Status::Good);
	uint32_t gen1 = 0, gen2 = 0;
	EXPECT_EQ(g1.keys(b1, &gen1), (std::vector<uint64_t>{K1, K2}));
	EXPECT_EQ(g2.keys(b2, &gen2), (std::vector<uint64_t>{K1, K2}));
	EXPECT_EQ(gen1, 2u);
	EXPECT_EQ(gen2, gen1);
	EXPECT_EQ(g1.out(b1, SA_RESERVE, K2, 0, EA).status, Status::ReservationConflict)
	    << "b1 is not registered";
	EXPECT_EQ(g1.write(b1), Status::ReservationConflict);
	// Released through gw1: nothing is reserved through either.
	ASSERT_EQ(g1.out(a1, SA_RELEASE, K1, 0, EA).status, Status::Good);
	EXPECT_EQ(g2.write(b2), Status::Good);
	EXPECT_EQ(g1.write(b1), Status::Good);
	EXPECT_EQ(g2.resv(a2), (std::pair<uint64_t, uint8_t>{0, 0}));
}

// READ FULL STATUS, READ KEYS and REPORT CAPABILITIES are the same through every gateway:
// each registration with the relative target port id it was made through.
TEST(PrCluster, FullStatusIsTheSameThroughEveryGateway)
{
	const std::string id = test_identity();
	Gateway g1("gw1", 1, id), g2("gw2", 2, id);
	ASSERT_TRUE(g1.pc && g2.pc);
	Nexus *a1 = g1.join(kPortA), *b1 = g1.join(kPortB), *b2 = g2.join(kPortB);
	Nexus *c2 = g2.join(kPortC);
	ASSERT_EQ(g1.out(a1, SA_REGISTER, 0, K1).status, Status::Good);
	ASSERT_EQ(g2.out(b2, SA_REGISTER, 0, K2, 0, F_ALL_TG_PT).status, Status::Good);
	ASSERT_EQ(g2.out(c2, SA_REGISTER, 0, K3).status, Status::Good);
	ASSERT_EQ(g1.out(b1, SA_RESERVE, K2, 0, WE_RO).status, Status::Good);

	for (uint8_t sa :
	     {SA_READ_KEYS, SA_READ_RESERVATION, SA_REPORT_CAPABILITIES, SA_READ_FULL_STATUS}) {
		auto r1 = g1.in(a1, sa), r2 = g2.in(c2, sa);
		ASSERT_EQ(r1.status, Status::Good);
		ASSERT_EQ(r2.status, Status::Good);
		EXPECT_EQ(r1.data, r2.data) << "service action " << int(sa);
	}
	const auto fs = full_status(g2.in(c2, SA_READ_FULL_STATUS).data);
	ASSERT_EQ(fs.size(), 3u);
	EXPECT_EQ(fs[0].key, K1);
	EXPECT_EQ(fs[0].rtpi, 1);
	EXPECT_FALSE(fs[0].all_tg_pt);
	EXPECT_FALSE(fs[0].holder);
	EXPECT_EQ(fs[0].port, kPortA);
	EXPECT_EQ(fs[1].key, K2);
	EXPECT_TRUE(fs[1].all_tg_pt);
	EXPECT_TRUE(fs[1].holder);
	EXPECT_EQ(fs[1].scope_type, WE_RO);
	EXPECT_EQ(fs[1].port, kPortB);
	EXPECT_EQ(fs[2].key, K3);
	EXPECT_EQ(fs[2].rtpi, 2);
	EXPECT_EQ(fs[2].port, kPortC);
	auto caps = g1.in(a1, SA_REPORT_CAPABILITIES).data;
	ASSERT_GE(caps.size(), 4u);
	EXPECT_EQ(caps[2], 0x14 | 0x08 | 0x01) << "CRH, ATP_C, SIP_C, PTPL_C";
	// The registrants-only reservation: a registrant writes through either gateway, a
	// stranger through neither.
	EXPECT_EQ(g1.write(a1), Status::Good);
	EXPECT_EQ(g2.write(c2), Status::Good);
	Nexus *d1 = g1.join("iqn.1994-05.com.example:d,i,0x23d000000004");
	EXPECT_EQ(g1.write(d1), Status::ReservationConflict);
}

// SPC-4 5.13.11.2.5 across gateways: PREEMPT AND ABORT through gw1 aborts the preempted
// I_T nexus's task held at gw2 (TASK ABORTED) and completes only after it has ended; gw2
// queues REGISTRATIONS PREEMPTED for that nexus.
TEST(PrCluster, PreemptAndAbortReachesTheOtherGateway)
{
	const std::string id = test_identity();
	Fencer f;
	Gateway g1("gw1", 1, id, &f), g2("gw2", 2, id, &f);
	ASSERT_TRUE(g1.pc && g2.pc);
	Nexus *a2 = g2.join(kPortA), *b1 = g1.join(kPortB), *c2 = g2.join(kPortC);
	ASSERT_EQ(g2.out(a2, SA_REGISTER, 0, K1).status, Status::Good);
	ASSERT_EQ(g2.out(a2, SA_RESERVE, K1, 0, WE).status, Status::Good);
	ASSERT_EQ(g1.out(b1, SA_REGISTER, 0, K2).status, Status::Good);
	g2.gate->close();
	auto *w = g2.lb.start_async(a2, 0, cdb_rw10(true, 4, 1), DataDir::Write,
	                            std::vector<uint8_t>(512, 0xaa), TaskAttr::Simple, 0x10);
	auto *r = g2.lb.start_async(c2, 0, cdb_rw10(false, 8, 1), DataDir::Read,
	                            std::vector<uint8_t>(512), TaskAttr::Simple, 0x11);
	ASSERT_TRUE(g2.gate->wait_held(2));
	auto *pa = g1.lb.start_async(b1, 0, cdb_prout(SA_PREEMPT_ABORT, EA), DataDir::Write,
	                             prout_data(K2, K1), TaskAttr::Simple, 0x12);
	EXPECT_FALSE(g1.lb.wait(pa, 1000ms).finished) << "waits for a's write at gw2 to end";
	g2.gate->open();
	EXPECT_EQ(g2.lb.wait(w).status, Status::TaskAborted);
	EXPECT_EQ(g2.lb.wait(r).status, Status::Good) << "c was not preempted";
	EXPECT_EQ(g1.lb.wait(pa).status, Status::Good);
	EXPECT_TRUE(f.seen().empty()) << "every gateway answered";
	EXPECT_EQ(g2.ua(a2), UA_REGISTRATIONS_PREEMPTED);
	EXPECT_EQ(g2.ua(a2), 0) << "TAS: no COMMANDS CLEARED";
	EXPECT_EQ(g2.ua(c2), 0);
	EXPECT_EQ(g2.write(a2), Status::ReservationConflict) << "b holds Exclusive Access now";
	EXPECT_EQ(g2.read(c2), Status::ReservationConflict);
	EXPECT_EQ(g1.write(b1), Status::Good);
	EXPECT_EQ(g2.keys(c2), std::vector<uint64_t>{K2});
}

// Registrations and key changes from both gateways at once: compare-and-set loses none.
TEST(PrCluster, ConcurrentChangesFromBothGatewaysAllLand)
{
	const std::string id = test_identity();
	Gateway g1("gw1", 1, id), g2("gw2", 2, id);
	ASSERT_TRUE(g1.pc && g2.pc);
	constexpr int kPer = 4, kRounds = 3;
	std::vector<std::thread> th;
	std::atomic<int> bad{0};
	std::vector<uint64_t> want;
	for (int gi = 0; gi < 2; gi++)
		for (int i = 0; i < kPer; i++) {
			Gateway &g = gi ? g2 : g1;
			const std::string port =
			    fmt::format("iqn.1994-05.com.example:n{}{},i,0x23d0000000{:02x}", gi, i,
			                gi * 16 + i);
			Nexus *s = g.join(port);
			const uint64_t base = uint64_t(gi * 16 + i + 1) << 32;
			want.push_back(base + kRounds);
			th.emplace_back([&g, s, base, &bad] {
				if (g.out(s, SA_REGISTER, 0, base).status != Status::Good)
					bad++;
				for (int k = 1; k <= kRounds; k++)
					if (g.out(s, SA_REGISTER, base + k - 1, base + k).status !=
					    Status::Good)
						bad++;
			});
		}
	for (auto &t : th)
		t.join();
	EXPECT_EQ(bad.load(), 0);
	Nexus *x1 = g1.join(kPortA), *x2 = g2.join(kPortA);
	uint32_t gen1 = 0, gen2 = 0;
	auto k1 = g1.keys(x1, &gen1), k2 = g2.keys(x2, &gen2);
	std::sort(k1.begin(), k1.end());
	std::sort(want.begin(), want.end());
	EXPECT_EQ(k1, want);
	EXPECT_EQ(gen1, uint32_t(2 * kPer * (kRounds + 1))) << "every change counted once";
	EXPECT_EQ(gen2, gen1);
	std::sort(k2.begin(), k2.end());
	EXPECT_EQ(k2, want);
}

// A watcher that never answers: the announcement waits for it up to the notify timeout,
// hands it to the fencing hook, and completes GOOD only after the hook returned 0; when the
// hook fails, the command fails (HARDWARE ERROR, INTERNAL TARGET FAILURE) and the change
// stands, for the initiator to read.
TEST(PrCluster, SilentWatcherIsFencedBeforeGood)
{
	const std::string id = test_identity();
	Fencer f;
	f.delay = 300ms;
	Gateway g1("gw1", 1, id, &f, 2000ms);
	ASSERT_TRUE(g1.pc);
	Nexus *a1 = g1.join(kPortA);
	auto silent = client(id + "/silent");
	ASSERT_TRUE(silent);
	rados_ioctx_t io = nullptr;
	ASSERT_EQ(rados_ioctx_create(silent->cluster, "rbd", &io), 0);
	uint64_t h = 0;
	ASSERT_EQ(rados_watch3(
	              io, g1.pc->oid().c_str(), &h,
	              [](void *, uint64_t, uint64_t, uint64_t, void *, size_t) {}, // no ack
	              [](void *, uint64_t, int) {}, 30, nullptr),
	          0);

	auto t0 = Clock::now();
	auto r = g1.out(a1, SA_REGISTER, 0, K1);
	const auto done = Clock::now();
	EXPECT_EQ(r.status, Status::Good);
	EXPECT_GE(done - t0, 2000ms) << "waited for the silent watcher";
	auto seen = f.seen();
	ASSERT_EQ(seen.size(), 1u);
	EXPECT_EQ(seen[0].gid, rados_get_instance_id(silent->cluster));
	EXPECT_EQ(seen[0].cookie, h);
	EXPECT_EQ(seen[0].gateway, "") << "not a gateway: no record";
	{
		std::lock_guard g(f.lock);
		EXPECT_LT(f.returned, done) << "GOOD before the hook returned";
	}

	f.answer = -EIO;
	f.delay = 0ms;
	r = g1.out(a1, SA_REGISTER, K1, K2);
	EXPECT_TRUE(spc_test::IsSense(r, SenseKey::HardwareError, 0x4400));
	EXPECT_EQ(f.seen().size(), 2u);
	EXPECT_EQ(g1.keys(a1), std::vector<uint64_t>{K2}) << "the change stands";

	rados_unwatch2(io, h);
	rados_watch_flush(silent->cluster);
	rados_ioctx_destroy(io);
	t0 = Clock::now();
	EXPECT_EQ(g1.out(a1, SA_REGISTER, K2, K3).status, Status::Good);
	EXPECT_LT(Clock::now() - t0, 1000ms) << "nobody silent any more";
	EXPECT_EQ(f.seen().size(), 2u);
}

// A gateway that cannot install a change in time (its preempted task does not end) is
// handed to the hook by name and address - the record it wrote - and the PREEMPT AND ABORT
// completes once the hook fenced it.
TEST(PrCluster, StuckGatewayIsNamedToTheHook)
{
	const std::string id = test_identity();
	Fencer f;
	Gateway g1("gw1", 1, id, &f, 1000ms), g2("gw2", 2, id, &f, 1000ms);
	ASSERT_TRUE(g1.pc && g2.pc);
	Nexus *a2 = g2.join(kPortA), *b1 = g1.join(kPortB);
	ASSERT_EQ(g2.out(a2, SA_REGISTER, 0, K1).status, Status::Good);
	ASSERT_EQ(g1.out(b1, SA_REGISTER, 0, K2).status, Status::Good);
	g2.gate->close();
	auto *w = g2.lb.start_async(a2, 0, cdb_rw10(true, 4, 1), DataDir::Write,
	                            std::vector<uint8_t>(512), TaskAttr::Simple, 0x10);
	ASSERT_TRUE(g2.gate->wait_held(1));
	EXPECT_EQ(g1.out(b1, SA_PREEMPT_ABORT, K2, K1, WE).status, Status::Good);
	auto seen = f.seen();
	ASSERT_EQ(seen.size(), 1u);
	EXPECT_EQ(seen[0].gateway, "gw2");
	EXPECT_EQ(seen[0].gid, g2.pc->gid());
	EXPECT_EQ(seen[0].addr, rados_client_addr(g2.cl->cluster));
	g2.gate->open();
	EXPECT_EQ(g2.lb.wait(w).status, Status::TaskAborted);
	EXPECT_EQ(g2.ua(a2), UA_REGISTRATIONS_PREEMPTED);
}

// REGISTER AND MOVE to an I_T nexus through the other gateway's port (its record names the
// port); SPEC_I_PT registers the named initiator ports through this port, or with ALL_TG_PT
// through every gateway's.
TEST(PrCluster, MoveAndSpecifyInitiatorPortsAcrossGateways)
{
	const std::string id = test_identity();
	Gateway g1("gw1", 1, id), g2("gw2", 2, id);
	ASSERT_TRUE(g1.pc && g2.pc);
	Nexus *a1 = g1.join(kPortA), *b2 = g2.join(kPortB), *b1 = g1.join(kPortB);
	ASSERT_EQ(g1.out(a1, SA_REGISTER, 0, K1).status, Status::Good);
	ASSERT_EQ(g1.out(a1, SA_RESERVE, K1, 0, WE).status, Status::Good);
	EXPECT_EQ(g1.out_data(a1, SA_REGISTER_MOVE, move_list(K1, K2, 7, kPortB)).asc(), 0x2600)
	    << "no gateway has port 7";
	ASSERT_EQ(g1.out_data(a1, SA_REGISTER_MOVE, move_list(K1, K2, 2, kPortB, true)).status,
	          Status::Good);
	EXPECT_EQ(g2.resv(b2), (std::pair<uint64_t, uint8_t>{K2, WE}));
	EXPECT_EQ(g2.write(b2), Status::Good) << "b through gw2 holds it";
	EXPECT_EQ(g1.write(b1), Status::ReservationConflict) << "b through gw1 does not";
	EXPECT_EQ(g1.write(a1), Status::ReservationConflict) << "a unregistered itself";
	auto fs = full_status(g1.in(a1, SA_READ_FULL_STATUS).data);
	ASSERT_EQ(fs.size(), 1u);
	EXPECT_EQ(fs[0].rtpi, 2);
	EXPECT_TRUE(fs[0].holder);

	// SPEC_I_PT: c and d registered along with a, through every target port.
	const std::string kPortD = "iqn.1994-05.com.example:d,i,0x23d000000004";
	Nexus *c2 = g2.join(kPortC), *d2 = g2.join(kPortD);
	EXPECT_TRUE(spc_test::IsParamLength(g1.out_data(a1, SA_REGISTER,
	                                                [&] {
		                                                auto d = spec_list(0, K3,
		                                                                   {tid01(kPortC)});
		                                                d.pop_back();
		                                                return d;
	                                                }())))
	    << "a TransportID cut short";
	auto name_only = tid01("iqn.1994-05.com.example:c");
	name_only[0] = 0x05; // format 00b: a device, not a port
	EXPECT_TRUE(
	    spc_test::IsInvalidParam(g1.out_data(a1, SA_REGISTER, spec_list(0, K3, {name_only}))));
	EXPECT_TRUE(spc_test::IsInvalidParam(
	    g1.out_data(a1, SA_REGISTER_IGNORE, spec_list(0, K3, {tid01(kPortC)}))))
	    << "SPEC_I_PT is for REGISTER alone";
	EXPECT_TRUE(spc_test::IsInvalidParam(g1.out_data(
	    a1, SA_REGISTER, spec_list(0, K3, {tid01(kPortB)}, F_SPEC_I_PT | F_ALL_TG_PT))))
	    << "b is registered already (through gw2)";
	ASSERT_EQ(
	    g1.out_data(a1, SA_REGISTER,
	                spec_list(0, K3, {tid01(kPortC), tid01(kPortD)}, F_SPEC_I_PT | F_ALL_TG_PT))
	        .status,
	    Status::Good);
	EXPECT_TRUE(spc_test::IsInvalidParam(
	    g1.out_data(a1, SA_REGISTER, spec_list(K3, K1, {tid01(kPortB)}))))
	    << "SPEC_I_PT from a registered I_T nexus";
	fs = full_status(g2.in(c2, SA_READ_FULL_STATUS).data);
	ASSERT_EQ(fs.size(), 4u);
	EXPECT_EQ(fs[1].port, kPortA);
	EXPECT_EQ(fs[2].port, kPortC);
	EXPECT_EQ(fs[3].port, kPortD);
	for (size_t i = 1; i < 4; i++) {
		EXPECT_EQ(fs[i].key, K3);
		EXPECT_TRUE(fs[i].all_tg_pt);
	}
	// Registered through gw2 by the SPEC_I_PT registration made through gw1: a registrant
	// may reserve once the holder is gone.
	ASSERT_EQ(g2.out(b2, SA_REGISTER, K2, 0).status, Status::Good);
	EXPECT_EQ(g2.out(d2, SA_RESERVE, K3, 0, EA).status, Status::Good);
	EXPECT_EQ(g1.write(a1), Status::ReservationConflict) << "d holds Exclusive Access";
}

// The state is in RADOS: LUs destroyed and made again (every gateway restarted) find it,
// and enforce it before anyone asks (no PERSISTENT RESERVE IN first).
TEST(PrCluster, StateOutlivesTheGateways)
{
	const std::string id = test_identity();
	{
		Gateway g1("gw1", 1, id), g2("gw2", 2, id);
		ASSERT_TRUE(g1.pc && g2.pc);
		Nexus *a1 = g1.join(kPortA), *b2 = g2.join(kPortB);
		ASSERT_EQ(g1.out(a1, SA_REGISTER, 0, K1, 0, F_ALL_TG_PT).status, Status::Good);
		ASSERT_EQ(g2.out(b2, SA_REGISTER, 0, K2).status, Status::Good);
		ASSERT_EQ(g1.out(a1, SA_RESERVE, K1, 0, EA).status, Status::Good);
	}
	Gateway g1("gw1", 1, id), g2("gw2", 2, id);
	ASSERT_TRUE(g1.pc && g2.pc);
	Nexus *a2 = g2.join(kPortA), *b2 = g2.join(kPortB), *b1 = g1.join(kPortB);
	EXPECT_EQ(g2.write(b2), Status::ReservationConflict);
	EXPECT_EQ(g1.write(b1), Status::ReservationConflict);
	EXPECT_EQ(g2.write(a2), Status::Good) << "ALL_TG_PT holder through gw2";
	uint32_t gen = 0;
	EXPECT_EQ(g1.keys(b1, &gen), (std::vector<uint64_t>{K1, K2}));
	EXPECT_EQ(gen, 2u) << "PRgeneration is the cluster's, not reset by a gateway restart";
	EXPECT_EQ(g2.resv(b2), (std::pair<uint64_t, uint8_t>{K1, EA}));
	auto caps = g1.in(b1, SA_REPORT_CAPABILITIES).data;
	ASSERT_GE(caps.size(), 4u);
	EXPECT_EQ(caps[3] & 0x01, 0) << "PTPL_A: no APTPL bit was one";
	// A TARGET COLD RESET of one gateway is no power loss of the LU.
	EXPECT_EQ(g1.lb.tmf(b1, TmfType::TargetColdReset, 0), TmfResponse::Complete);
	EXPECT_EQ(g1.write(b1), Status::CheckCondition) << "POWER ON first";
	EXPECT_EQ(g1.write(b1), Status::ReservationConflict) << "still reserved";
	EXPECT_EQ(g1.keys(b1, &gen).size(), 2u);
	EXPECT_EQ(gen, 2u);
}

// An OSD restart under both watches: afterwards (check_watch, the daemons' timer) the state
// is there and a change through one gateway is enforced by the other.
TEST(PrCluster, StateOutlivesAnOsdRestart)
{
	const std::string id = test_identity();
	Gateway g1("gw1", 1, id), g2("gw2", 2, id);
	ASSERT_TRUE(g1.pc && g2.pc);
	Nexus *a1 = g1.join(kPortA), *b2 = g2.join(kPortB), *a2 = g2.join(kPortA);
	ASSERT_EQ(g1.out(a1, SA_REGISTER, 0, K1, 0, F_ALL_TG_PT).status, Status::Good);
	ASSERT_EQ(g2.out(b2, SA_REGISTER, 0, K2).status, Status::Good);
	int rc = 0;
	std::string out = ceph_test::ceph_dev("restart-osd --timeout 60", &rc);
	ASSERT_EQ(rc, 0) << out;
	for (Gateway *g : {&g1, &g2}) {
		const auto t0 = Clock::now();
		int r = -1;
		while ((r = g->pc->check_watch()) != 0 && Clock::now() < t0 + 30s)
			std::this_thread::sleep_for(500ms);
		ASSERT_EQ(r, 0) << g->name;
	}
	EXPECT_EQ(g1.keys(a1), (std::vector<uint64_t>{K1, K2}));
	EXPECT_EQ(g2.keys(b2), (std::vector<uint64_t>{K1, K2}));
	ASSERT_EQ(g2.out(a2, SA_RESERVE, K1, 0, WE).status, Status::Good);
	Nexus *b1 = g1.join(kPortB);
	EXPECT_EQ(g1.write(b1), Status::ReservationConflict) << "gw1 heard gw2's change";
	EXPECT_EQ(g1.write(a1), Status::Good);
}

// A gateway that lost its watch (its client blocklisted for a while: the OSD drops the
// watch, and the changes meanwhile are announced without it) reads the state again when
// check_watch() registers the watch anew, and enforces what it missed.
TEST(PrCluster, LostWatchReadsAgain)
{
	const std::string id = test_identity();
	Fencer f;
	Gateway g1("gw1", 1, id, &f, 2000ms), g2("gw2", 2, id, &f, 2000ms);
	ASSERT_TRUE(g1.pc && g2.pc);
	Nexus *a1 = g1.join(kPortA), *b2 = g2.join(kPortB);
	ASSERT_EQ(g1.out(a1, SA_REGISTER, 0, K1).status, Status::Good);
	std::string addr = rados_client_addr(g2.cl->cluster);
	int rc = 0;
	std::string out = ceph_test::sh("timeout 60 ceph osd blocklist add " + addr, &rc);
	ASSERT_EQ(rc, 0) << out;
	// Until the OSD has the map that carries the entry, gw2 still reads.
	PrSharedView v;
	const auto t0 = Clock::now();
	while (g2.pc->read(&v) == 0 && Clock::now() < t0 + 30s)
		std::this_thread::sleep_for(200ms);
	ASSERT_NE(g2.pc->read(&v), 0) << "gw2 is not refused";
	ASSERT_EQ(g1.out(a1, SA_RESERVE, K1, 0, EA).status, Status::Good);
	EXPECT_EQ(g2.write(b2), Status::Good) << "gw2 missed the change";
	out = ceph_test::sh("timeout 60 ceph osd blocklist rm " + addr, &rc);
	ASSERT_EQ(rc, 0) << out;
	const auto t1 = Clock::now();
	int r = -1;
	while ((r = g2.pc->check_watch()) != 0 && Clock::now() < t1 + 60s)
		std::this_thread::sleep_for(500ms);
	ASSERT_EQ(r, 0) << "the watch did not come back";
	// The re-read runs on gw2's watch thread: bounded wait for its effect.
	Status st = Status::Good;
	for (int i = 0; i < 100 && (st = g2.write(b2)) == Status::Good; i++)
		std::this_thread::sleep_for(100ms);
	EXPECT_EQ(st, Status::ReservationConflict) << "gw2 did not read the state again";
}

// A fenced gateway (its client blocklisted) leaves the object as it is: after abandon() its
// record stays for the others to fence or prune, while the destructor of a gateway that
// still has its client removes it. Its LU keeps its state,
// unshared: the other gateway's changes no longer reach it.
TEST(PrCluster, AFencedGatewayLeavesTheObjectAsItIs)
{
	const std::string id = test_identity();
	Fencer f;
	Gateway g1("gw1", 1, id, &f, 2000ms), g2("gw2", 2, id, &f, 2000ms);
	ASSERT_TRUE(g1.pc && g2.pc);
	Nexus *a1 = g1.join(kPortA), *b2 = g2.join(kPortB);
	ASSERT_EQ(g2.out(b2, SA_REGISTER, 0, K2).status, Status::Good);
	// The object's own records (PrCluster::read gives the reservation's alone).
	int err = 0;
	std::string why;
	auto map = ClusterMap::open(g1.cl, "rbd", "", g1.pc->oid(), &err, &why);
	ASSERT_TRUE(map) << why;
	auto has = [&](const std::string &key) {
		ClusterMapView cv;
		EXPECT_EQ(map->read(&cv), 0);
		return cv.records.count(key) == 1;
	};
	const std::string rec2 = pr_gateway_key(g2.pc->gid());
	ASSERT_TRUE(has(rec2)) << "gw2 wrote no record " << rec2;
	PrSharedView v;

	int rc = 0;
	const std::string addr = rados_client_addr(g2.cl->cluster);
	std::string out = ceph_test::sh("timeout 60 ceph osd blocklist add " + addr, &rc);
	ASSERT_EQ(rc, 0) << out;
	const auto t0 = Clock::now();
	while (g2.pc->read(&v) == 0 && Clock::now() < t0 + 30s)
		std::this_thread::sleep_for(200ms);
	ASSERT_NE(g2.pc->read(&v), 0) << "gw2 is not refused";
	for (Nexus *s : g2.tpg.sessions())
		EXPECT_EQ(g2.lb.logout(s), 0);
	g2.pc->abandon();
	g2.pc.reset(); // does nothing more

	EXPECT_TRUE(has(rec2)) << "a fenced gateway removed its record";
	ASSERT_EQ(g1.out(a1, SA_REGISTER, 0, K1).status, Status::Good);
	EXPECT_EQ((std::set<uint64_t>{K1, K2}), [&] {
		auto k = g1.keys(a1);
		return std::set<uint64_t>(k.begin(), k.end());
	}());
	// gw2's LU is unshared: what it had, without gw1's change.
	Nexus *c2 = g2.join(kPortC);
	EXPECT_EQ(g2.keys(c2), std::vector<uint64_t>{K2});
	out = ceph_test::sh("timeout 60 ceph osd blocklist rm " + addr, &rc);
	EXPECT_EQ(rc, 0) << out;

	// The same teardown with the client still in the cluster removes the record.
	const std::string rec1 = pr_gateway_key(g1.pc->gid());
	ASSERT_TRUE(has(rec1));
	for (Nexus *s : g1.tpg.sessions())
		EXPECT_EQ(g1.lb.logout(s), 0);
	g1.pc.reset();
	EXPECT_FALSE(has(rec1)) << "gw1 left its record at a planned teardown";
}

} // namespace ulp::ha
