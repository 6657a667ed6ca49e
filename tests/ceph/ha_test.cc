// SPDX-License-Identifier: MIT
// tests/ceph/ha_test.cc - the gateways' shared state and ownership (ha/) against a real
// single-node Ceph cluster started for this program (tests/ceph/ceph_env.h). Two gateways
// are two RADOS clients of one process (two groups of scsi/rados_client.h: distinct
// instances and nonces, so a blocklist entry fences exactly one): the cluster map's
// compare-and-set under contention and its notifies, a damaged map refused, leases that
// exclude, expire and are renewed, and a take-over that fences the old holder first, so
// that its writes fail from then on.
#include "ha/cluster_map.h"
#include "ha/group_owner.h"
#include "ha/lease.h"
#include "tests/ceph/ceph_env.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

namespace ulp::ha
{
namespace
{

using namespace std::chrono_literals;
using ceph_test::g_cluster;
using ceph_test::sh;

const auto *g_env = ::testing::AddGlobalTestEnvironment(new ceph_test::CephEnv);

// A gateway's client: group names are unique per test, so each is a fresh RADOS client.
std::shared_ptr<scsi::RadosClient> client(const std::string &group)
{
	scsi::RadosConfig c;
	c.conf = g_cluster.conf;
	c.keyring = g_cluster.keyring;
	c.group = group;
	c.timeout_s = 10;
	int err = 0;
	std::string why;
	auto cl = scsi::rados_client_get(c, &err, &why);
	EXPECT_TRUE(cl) << why;
	return cl;
}

std::unique_ptr<ClusterMap> map_of(const std::shared_ptr<scsi::RadosClient> &c,
                                   const std::string &oid)
{
	int err = 0;
	std::string why;
	auto m = ClusterMap::open(c, "rbd", "", oid, &err, &why);
	EXPECT_TRUE(m) << why;
	return m;
}

std::unique_ptr<Lease> lease_of(const std::shared_ptr<scsi::RadosClient> &c, const std::string &oid,
                                const std::string &cookie, std::chrono::seconds d = 30s)
{
	int err = 0;
	std::string why;
	auto l = Lease::open(c, "rbd", "", oid, cookie, d, &err, &why);
	EXPECT_TRUE(l) << why;
	return l;
}

// A small object write through c: what a gateway's LU I/O is to the OSDs.
int write_obj(const std::shared_ptr<scsi::RadosClient> &c, const std::string &oid)
{
	rados_ioctx_t io = nullptr;
	if (int r = rados_ioctx_create(c->cluster, "rbd", &io); r < 0)
		return r;
	int r = rados_write_full(io, oid.c_str(), "data", 4);
	rados_ioctx_destroy(io);
	return r;
}

// What a watcher heard: the versions its callback was given, in order.
struct Heard {
	std::mutex lock;
	std::condition_variable cv;
	std::vector<uint64_t> versions; // lock

	ClusterMap::WatchFn fn()
	{
		return [this](uint64_t v) {
			std::lock_guard g(lock);
			versions.push_back(v);
			cv.notify_all();
		};
	}
	std::vector<uint64_t> now()
	{
		std::lock_guard g(lock);
		return versions;
	}
	// Until pred(versions) holds, up to d.
	template <typename Pred> bool wait(std::chrono::seconds d, Pred pred)
	{
		std::unique_lock g(lock);
		return cv.wait_for(g, d, [&] { return pred(versions); });
	}
};

} // namespace

TEST(ClusterMapVersion, DecodeIsStrict)
{
	uint64_t v = 0;
	EXPECT_TRUE(version_decode("1", 1, &v));
	EXPECT_EQ(v, 1u);
	EXPECT_TRUE(version_decode("18446744073709551615", 20, &v));
	EXPECT_EQ(v, UINT64_MAX);
	for (const char *bad :
	     {"", "0x1", "-1", "01", "1 ", "18446744073709551616", "123456789012345678901", "1a"})
		EXPECT_FALSE(version_decode(bad, strlen(bad), &v)) << "'" << bad << "'";
	EXPECT_EQ(version_encode(42), "42");
}

TEST(ClusterMap, CompareAndSetBetweenTwoGateways)
{
	auto a = client("cas-a"), b = client("cas-b");
	ASSERT_TRUE(a && b);
	ASSERT_NE(a->cluster, b->cluster);
	auto ma = map_of(a, "ulp.cluster.cas"), mb = map_of(b, "ulp.cluster.cas");
	ASSERT_TRUE(ma && mb);

	ClusterMapView v;
	ASSERT_EQ(ma->read(&v), 0);
	EXPECT_EQ(v.version, 0u) << "a map never written";
	EXPECT_TRUE(v.records.empty());

	uint64_t now = 0;
	ClusterMapChange c;
	c.set["gw/a"] = "addr=1";
	ASSERT_EQ(ma->update(0, c, &now), 0);
	EXPECT_EQ(now, 1u);

	// b still believes version 0: its change must not land.
	ClusterMapChange cb;
	cb.set["gw/b"] = "addr=2";
	EXPECT_EQ(mb->update(0, cb, &now), -ECANCELED);
	ASSERT_EQ(mb->read(&v), 0);
	EXPECT_EQ(v.version, 1u);
	ASSERT_EQ(v.records.size(), 1u);
	EXPECT_EQ(v.records["gw/a"], "addr=1");

	cb.erase.push_back("gw/a");
	ASSERT_EQ(mb->update(1, cb, &now), 0);
	EXPECT_EQ(now, 2u);
	ASSERT_EQ(ma->read(&v), 0);
	EXPECT_EQ(v.version, 2u);
	EXPECT_EQ(v.records.count("gw/a"), 0u);
	EXPECT_EQ(v.records["gw/b"], "addr=2");
	// A value with a NUL and binary bytes comes back whole.
	ClusterMapChange bin;
	bin.set["bin"] = std::string("x\0y\xff", 4);
	ASSERT_EQ(ma->update(2, bin, &now), 0);
	ASSERT_EQ(mb->read(&v), 0);
	EXPECT_EQ(v.records["bin"], std::string("x\0y\xff", 4));

	// Bad changes write nothing.
	EXPECT_EQ(ma->update(3, ClusterMapChange{}, &now), -EINVAL);
	ClusterMapChange both;
	both.set["k"] = "1";
	both.erase.push_back("k");
	EXPECT_EQ(ma->update(3, both, &now), -EINVAL);
	ASSERT_EQ(ma->read(&v), 0);
	EXPECT_EQ(v.version, 3u);
}

// Two gateways incrementing one counter through modify(), at once: every increment lands
// once (the OSD serializes; the loser of each race reads again), none is lost.
TEST(ClusterMap, ModifyLosesNoChangeUnderContention)
{
	auto a = client("mod-a"), b = client("mod-b");
	ASSERT_TRUE(a && b);
	auto ma = map_of(a, "ulp.cluster.mod"), mb = map_of(b, "ulp.cluster.mod");
	ASSERT_TRUE(ma && mb);
	constexpr int kEach = 40;
	std::atomic<int> failures{0};
	auto inc = [&](ClusterMap &m) {
		for (int i = 0; i < kEach; i++) {
			uint64_t now = 0;
			int r = m.modify(
			    [](const ClusterMapView &v, ClusterMapChange *c) {
				    auto it = v.records.find("n");
				    int n = it == v.records.end() ? 0 : std::stoi(it->second);
				    c->set["n"] = std::to_string(n + 1);
				    return true;
			    },
			    &now);
			if (r != 0)
				failures++;
		}
	};
	std::thread ta(inc, std::ref(*ma)), tb(inc, std::ref(*mb));
	ta.join();
	tb.join();
	EXPECT_EQ(failures.load(), 0);
	ClusterMapView v;
	ASSERT_EQ(ma->read(&v), 0);
	EXPECT_EQ(v.records["n"], std::to_string(2 * kEach));
	EXPECT_EQ(v.version, uint64_t(2 * kEach));
	// fn declining to change: nothing written, the version read returned.
	uint64_t now = 0;
	ASSERT_EQ(
	    ma->modify([](const ClusterMapView &, ClusterMapChange *) { return false; }, &now), 0);
	EXPECT_EQ(now, v.version);
}

TEST(ClusterMap, WatcherHearsEveryChange)
{
	auto a = client("watch-a"), b = client("watch-b");
	ASSERT_TRUE(a && b);
	auto ma = map_of(a, "ulp.cluster.watch"), mb = map_of(b, "ulp.cluster.watch");
	ASSERT_TRUE(ma && mb);
	Heard heard;
	ClusterMapChange c;
	c.set["x"] = "0";
	uint64_t now = 0;
	{
		// The object exists before the watch, and so does the end of its notify: update()
		// notifies asynchronously, and a watch registered while that notify was still on
		// its way heard version 1 too (CI under ASan, a loaded host: {1, 2, 3}). A map's
		// destruction waits for its notifies in flight.
		auto m0 = map_of(a, "ulp.cluster.watch");
		ASSERT_TRUE(m0);
		ASSERT_EQ(m0->update(0, c, &now), 0);
	}
	ASSERT_EQ(mb->watch(heard.fn()), 0);
	EXPECT_EQ(mb->watch([](uint64_t) {}), -EBUSY) << "one watch per map";
	for (int i = 1; i <= 3; i++) {
		c.set["x"] = std::to_string(i);
		ASSERT_EQ(ma->update(now, c, &now), 0);
	}
	ASSERT_TRUE(heard.wait(20s, [](const auto &v) { return v.size() >= 3; }))
	    << "heard " << heard.now().size() << " of 3 notifies";
	EXPECT_EQ(heard.now(), (std::vector<uint64_t>{2, 3, 4}));
	EXPECT_EQ(mb->check_watch(), 0) << "a healthy watch stays";
	mb->unwatch();
	c.set["x"] = "9";
	ASSERT_EQ(ma->update(now, c, &now), 0);
	std::this_thread::sleep_for(500ms);
	EXPECT_EQ(heard.now().size(), 3u) << "a notify after unwatch()";
}

// The OSD restarts under a watch: the watcher is told to re-read (0), check_watch()
// registers the watch again, and the next change is heard.
TEST(ClusterMap, WatchComesBackAfterAnOsdRestart)
{
	auto a = client("rewatch-a"), b = client("rewatch-b");
	ASSERT_TRUE(a && b);
	auto ma = map_of(a, "ulp.cluster.rewatch"), mb = map_of(b, "ulp.cluster.rewatch");
	ASSERT_TRUE(ma && mb);
	Heard heard;
	ClusterMapChange c;
	c.set["x"] = "0";
	uint64_t now = 0;
	ASSERT_EQ(ma->update(0, c, &now), 0);
	ASSERT_EQ(mb->watch(heard.fn()), 0);
	int rc = 0;
	std::string out = ceph_test::ceph_dev("restart-osd --timeout 60", &rc);
	ASSERT_EQ(rc, 0) << out;
	// The watch may break (error callback: 0) or be re-established by librados on its own;
	// either way check_watch() leaves a working watch, bounded.
	const auto t0 = std::chrono::steady_clock::now();
	int r = -1;
	while ((r = mb->check_watch()) != 0 && std::chrono::steady_clock::now() < t0 + 30s)
		std::this_thread::sleep_for(500ms);
	ASSERT_EQ(r, 0);
	const std::vector<uint64_t> before = heard.now();
	for (uint64_t v : before)
		EXPECT_EQ(v, 0u) << "only re-read hints so far";
	c.set["x"] = "1";
	ASSERT_EQ(ma->update(now, c, &now), 0);
	ASSERT_TRUE(heard.wait(30s, [&](const auto &v) {
		return std::find(v.begin() + before.size(), v.end(), now) != v.end();
	})) << "the change after the restart was not heard";
}

TEST(ClusterMap, DamagedVersionIsRefused)
{
	auto a = client("damaged");
	ASSERT_TRUE(a);
	auto m = map_of(a, "ulp.cluster.damaged");
	ASSERT_TRUE(m);
	int rc = 0;
	std::string out =
	    sh("timeout 60 rados -p rbd setxattr ulp.cluster.damaged ulp.version 0x7", &rc);
	ASSERT_EQ(rc, 0) << out;
	ClusterMapView v;
	EXPECT_EQ(m->read(&v), -EBADMSG);
	// And records without a version: not written by update().
	out = sh("timeout 60 rados -p rbd setomapval ulp.cluster.noversion k v", &rc);
	ASSERT_EQ(rc, 0) << out;
	auto m2 = map_of(a, "ulp.cluster.noversion");
	EXPECT_EQ(m2->read(&v), -EBADMSG);
	// Nor does a change apply on top of it: the compare fails.
	ClusterMapChange c;
	c.set["k"] = "w";
	uint64_t now = 0;
	EXPECT_EQ(m->update(0, c, &now), -ECANCELED);
}

TEST(Lease, ExcludesRenewsAndReleases)
{
	auto a = client("lease-a"), b = client("lease-b");
	ASSERT_TRUE(a && b);
	auto la = lease_of(a, "ulp.lease.x", "gw-a"), lb = lease_of(b, "ulp.lease.x", "gw-b");
	ASSERT_TRUE(la && lb);
	EXPECT_FALSE(la->held());
	LeaseHolder h;
	EXPECT_EQ(lb->holder(&h), -ENOENT);

	const auto before = Lease::Clock::now();
	ASSERT_EQ(la->acquire(), 0);
	EXPECT_TRUE(la->held());
	EXPECT_GE(la->valid_until(), before + 30s);
	EXPECT_LE(la->valid_until(), Lease::Clock::now() + 30s);
	EXPECT_EQ(la->acquire(), 0) << "acquiring what we hold renews it";
	EXPECT_EQ(lb->acquire(), -EBUSY);
	EXPECT_FALSE(lb->held());

	ASSERT_EQ(lb->holder(&h), 0);
	EXPECT_EQ(h.cookie, "gw-a");
	EXPECT_EQ(h.client, "client." + std::to_string(rados_get_instance_id(a->cluster)));
	const std::string a_addr = scsi::rados_client_addr(a->cluster);
	const std::string nonce = h.addr.substr(h.addr.rfind('/') + 1);
	EXPECT_NE(a_addr.find("/" + nonce), std::string::npos)
	    << "holder address " << h.addr << " is not a's " << a_addr;

	const auto until = la->valid_until();
	std::this_thread::sleep_for(10ms);
	ASSERT_EQ(la->renew(), 0);
	EXPECT_GT(la->valid_until(), until);
	EXPECT_EQ(lb->renew(), -ENOENT) << "renewing what another holds";

	ASSERT_EQ(la->release(), 0);
	EXPECT_FALSE(la->held());
	EXPECT_EQ(la->release(), -ENOENT);
	ASSERT_EQ(lb->acquire(), 0);
	EXPECT_EQ(la->renew(), -ENOENT);
	EXPECT_FALSE(la->held());
}

// A holder that stops renewing loses the lease when its duration ends, to the OSD's clock.
TEST(Lease, ExpiresWithoutRenewal)
{
	auto a = client("exp-a"), b = client("exp-b");
	ASSERT_TRUE(a && b);
	auto la = lease_of(a, "ulp.lease.exp", "gw-a", 2s),
	     lb = lease_of(b, "ulp.lease.exp", "gw-b", 2s);
	ASSERT_TRUE(la && lb);
	ASSERT_EQ(la->acquire(), 0);
	EXPECT_EQ(lb->acquire(), -EBUSY);
	const auto t0 = Lease::Clock::now();
	int r = -EBUSY;
	while (r == -EBUSY && Lease::Clock::now() < t0 + 15s) {
		std::this_thread::sleep_for(200ms);
		r = lb->acquire();
	}
	ASSERT_EQ(r, 0) << "the expired lease was not free within 15 s";
	EXPECT_GE(Lease::Clock::now(), la->valid_until())
	    << "b got the lease while a still believed it held it";
	EXPECT_EQ(la->renew(), -ENOENT);
	EXPECT_FALSE(la->held());
}

// The take-over: b fences a, then owns the lease; a's writes fail from then on, its
// renewals too. b refuses to fence itself.
TEST(Lease, TakeOverFencesTheHolderFirst)
{
	auto a = client("fence-a"), b = client("fence-b");
	ASSERT_TRUE(a && b);
	auto la = lease_of(a, "ulp.lease.fence", "gw-a"),
	     lb = lease_of(b, "ulp.lease.fence", "gw-b");
	ASSERT_TRUE(la && lb);
	ASSERT_EQ(la->acquire(), 0);
	ASSERT_EQ(write_obj(a, "fence-data"), 0) << "a writes while it owns";

	LeaseHolder self;
	self.client = "client." + std::to_string(rados_get_instance_id(b->cluster));
	self.cookie = "gw-b";
	self.addr = scsi::rados_client_addr(b->cluster);
	EXPECT_EQ(lb->take_over(self, 60), -EINVAL) << "fencing itself";

	LeaseHolder h;
	ASSERT_EQ(lb->holder(&h), 0);
	ASSERT_EQ(lb->take_over(h, 600), 0);
	EXPECT_TRUE(lb->held());
	LeaseHolder now;
	ASSERT_EQ(lb->holder(&now), 0);
	EXPECT_EQ(now.cookie, "gw-b");

	// From the epoch that carries the entry, a is refused. Its client may need a moment to
	// learn of the map (it does on its next operation); bounded.
	int r = 0;
	const auto t0 = std::chrono::steady_clock::now();
	while ((r = write_obj(a, "fence-data")) == 0 && std::chrono::steady_clock::now() < t0 + 20s)
		std::this_thread::sleep_for(200ms);
	EXPECT_EQ(r, -ESHUTDOWN) << "a write of the fenced gateway: " << scsi::rados_strerror(r);
	EXPECT_LT(la->renew(), 0);
	EXPECT_FALSE(la->held());
	EXPECT_EQ(write_obj(b, "fence-data"), 0) << "the new owner writes";
	int rc = 0;
	std::string out = ceph_test::ceph_cli("osd blocklist ls", &rc);
	EXPECT_NE(out.find(h.addr.substr(h.addr.rfind('/'))), std::string::npos) << out;
}

TEST(Lease, OpenChecksItsArguments)
{
	auto a = client("args");
	ASSERT_TRUE(a);
	int err = 0;
	std::string why;
	EXPECT_FALSE(Lease::open(a, "rbd", "", "o", "", 30s, &err, &why));
	EXPECT_EQ(err, -EINVAL);
	EXPECT_FALSE(Lease::open(a, "rbd", "", "o", "gw", 0s, &err, &why));
	EXPECT_FALSE(Lease::open(a, "rbd", "", "o", "gw", 2h, &err, &why));
	EXPECT_FALSE(Lease::open(a, "nosuchpool", "", "o", "gw", 30s, &err, &why));
	EXPECT_EQ(err, -ENOENT);
	EXPECT_NE(why.find("no such pool"), std::string::npos) << why;
	EXPECT_FALSE(ClusterMap::open(a, "nosuchpool", "", "o", &err, &why));
	EXPECT_EQ(err, -ENOENT);
}

} // namespace ulp::ha

namespace ulp::ha
{

TEST(OwnerRecord, RoundTripAndDamage)
{
	OwnerRecord r{"gw-1", "127.0.0.1:0/123456", false, 7};
	const std::string s = owner_record_encode(r);
	EXPECT_EQ(s, "gw=gw-1;addr=127.0.0.1:0/123456;state=active;epoch=7");
	OwnerRecord d;
	ASSERT_TRUE(owner_record_decode(s, &d));
	EXPECT_EQ(d.gw, "gw-1");
	EXPECT_EQ(d.addr, "127.0.0.1:0/123456");
	EXPECT_FALSE(d.released);
	EXPECT_EQ(d.epoch, 7u);
	ASSERT_TRUE(owner_record_decode("epoch=0;state=released;addr=a;gw=g", &d));
	EXPECT_TRUE(d.released);
	EXPECT_EQ(d.epoch, 0u);
	for (const char *bad :
	     {"", "gw=g;addr=a;state=active", "gw=g;addr=a;state=on;epoch=1",
	      "gw=g;addr=a;state=active;epoch=01", "gw=g;gw=h;addr=a;state=active;epoch=1",
	      "gw=g;addr=a;state=active;epoch=1;", "gw=g;addr=a;state=active;epoch=1;x=y",
	      "gw=g h;addr=a;state=active;epoch=1", "gw=;addr=a;state=active;epoch=1",
	      "gw=g;addr=a b;state=active;epoch=1", "gw=g;addr;state=active;epoch=1"})
		EXPECT_FALSE(owner_record_decode(bad, &d)) << "'" << bad << "'";
	EXPECT_FALSE(owner_record_decode(std::string(kMaxRecordBytes + 1, 'x'), &d));
	EXPECT_TRUE(ha_name_valid("gw_1.a-b"));
	EXPECT_FALSE(ha_name_valid(""));
	EXPECT_FALSE(ha_name_valid(std::string(65, 'a')));
	EXPECT_FALSE(ha_name_valid("gw/1"));
}

namespace
{

struct Gw {
	std::shared_ptr<scsi::RadosClient> client;
	std::unique_ptr<GroupOwner> owner;
	int actives = 0;  // on_active calls
	int releases = 0; // on_release calls
};

// Gateway name's owner of group over its own client (group of clients: tag).
std::unique_ptr<Gw> gateway(const std::string &name, const std::string &group,
                            const std::string &tag, std::chrono::seconds lease)
{
	auto g = std::make_unique<Gw>();
	g->client = client(tag);
	if (!g->client)
		return nullptr;
	GroupOwnerConfig c;
	c.gateway = name;
	c.group = group;
	c.lease_oid = "ulp.lease." + group;
	c.lease = lease;
	c.margin = 1s;
	c.blocklist_s = 600;
	Gw *raw = g.get();
	c.on_active = [raw] {
		raw->actives++;
		return 0;
	};
	c.on_release = [raw] { raw->releases++; };
	auto m = map_of(g->client, "ulp.cluster.owners");
	auto l = lease_of(g->client, c.lease_oid, name, lease);
	if (!m || !l)
		return nullptr;
	g->owner = std::make_unique<GroupOwner>(c, std::move(m), std::move(l));
	return g;
}

} // namespace

// The owner freezes (stops ticking, as under SIGSTOP): the standby takes the group only
// once the lease has run out, fences the frozen owner's client first, and only then is
// Active; the frozen owner, resumed, finds itself fenced (Unavailable) and its writes fail.
TEST(GroupOwner, FailoverFencesTheFrozenOwner)
{
	auto a = gateway("gw-a", "g1", "go-a", 3s), b = gateway("gw-b", "g1", "go-b", 3s);
	ASSERT_TRUE(a && b);
	a->owner->tick();
	ASSERT_EQ(a->owner->state(), OwnerState::Active);
	EXPECT_EQ(a->owner->access(), PortAccess::ActiveOptimized);
	EXPECT_EQ(a->actives, 1);
	b->owner->tick();
	EXPECT_EQ(b->owner->state(), OwnerState::Standby);
	EXPECT_EQ(b->owner->access(), PortAccess::Standby);
	EXPECT_EQ(b->owner->owner().gw, "gw-a");
	EXPECT_EQ(b->owner->owner().epoch, 1u);
	ASSERT_EQ(write_obj(a->client, "g1-data"), 0);

	// a is frozen from here: b ticks as its timer would.
	const auto a_until = Lease::Clock::now() + 3s; // a's lease ends no earlier
	const auto t0 = Lease::Clock::now();
	while (b->owner->state() != OwnerState::Active && Lease::Clock::now() < t0 + 20s) {
		std::this_thread::sleep_for(250ms);
		b->owner->tick();
	}
	ASSERT_EQ(b->owner->state(), OwnerState::Active);
	EXPECT_GE(Lease::Clock::now(), a_until - 100ms)
	    << "b took the group before a's lease ran out";
	EXPECT_EQ(b->actives, 1);
	EXPECT_EQ(b->owner->owner().gw, "gw-b");
	EXPECT_EQ(b->owner->owner().epoch, 2u);

	// a's client is refused before b reports Active/Optimized: its next write fails.
	EXPECT_EQ(write_obj(a->client, "g1-data"), -ESHUTDOWN);
	a->owner->tick(); // resumed
	EXPECT_EQ(a->owner->state(), OwnerState::Fenced);
	EXPECT_EQ(a->owner->access(), PortAccess::Unavailable);
	a->owner->tick();
	EXPECT_EQ(a->owner->state(), OwnerState::Fenced) << "fenced is final for a client";
	EXPECT_EQ(write_obj(b->client, "g1-data"), 0);
	b->owner->tick();
	EXPECT_EQ(b->owner->state(), OwnerState::Active);
}

// The owner's connections to the OSD cut (Ceph's ms_blackhole_osd on its client: what it
// sends and receives is dropped, the connection stays up) while it renews: the call
// returns only at the client's op timeout (10 s), after the lease (3 s) ran out. The owner
// is Fenced then, judged by when the call returned: never Active on a lease that ended
// while it waited.
TEST(GroupOwner, ARenewThatOutlastsTheLeaseLosesIt)
{
	auto a = gateway("gw-a", "g-cut", "cut-a", 3s);
	ASSERT_TRUE(a);
	a->owner->tick();
	ASSERT_EQ(a->owner->state(), OwnerState::Active);
	ASSERT_EQ(rados_conf_set(a->client->cluster, "ms_blackhole_osd", "true"), 0);
	const auto t0 = Lease::Clock::now();
	a->owner->tick();
	EXPECT_GE(Lease::Clock::now() - t0, 3s) << "the renew was not held by the cut";
	EXPECT_EQ(a->owner->state(), OwnerState::Fenced);
	EXPECT_EQ(a->owner->access(), PortAccess::Unavailable);
	ASSERT_EQ(rados_conf_set(a->client->cluster, "ms_blackhole_osd", "false"), 0);
}

// A planned move: the owner drains (stops its I/O, marks its record released, lets the
// lease go), and the standby takes the group at once without fencing anyone: the drained
// gateway's client still writes.
TEST(GroupOwner, DrainHandsOverWithoutFencing)
{
	auto a = gateway("gw-a", "g2", "dr-a", 10s), b = gateway("gw-b", "g2", "dr-b", 10s);
	ASSERT_TRUE(a && b);
	a->owner->tick();
	ASSERT_EQ(a->owner->state(), OwnerState::Active);
	b->owner->tick();
	ASSERT_EQ(b->owner->state(), OwnerState::Standby);
	EXPECT_EQ(b->owner->drain(10s), -EINVAL) << "draining what it does not own";

	ASSERT_EQ(a->owner->drain(10s), 0);
	EXPECT_EQ(a->releases, 1);
	EXPECT_EQ(a->owner->state(), OwnerState::Standby);
	b->owner->tick();
	ASSERT_EQ(b->owner->state(), OwnerState::Active) << "the released lease was not free";
	EXPECT_EQ(b->owner->owner().epoch, 2u);
	EXPECT_FALSE(b->owner->owner().released);
	a->owner->tick(); // held off, and the lease is b's anyway
	EXPECT_EQ(a->owner->state(), OwnerState::Standby);
	EXPECT_EQ(a->owner->owner().gw, "gw-b");
	EXPECT_EQ(write_obj(a->client, "g2-data"), 0) << "a drained gateway was fenced";
}

} // namespace ulp::ha
