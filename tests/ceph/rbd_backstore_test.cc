// SPDX-License-Identifier: MIT
// tests/ceph/rbd_backstore_test.cc - the rbd backstore (scsi/bs_rbd.cc) against a real
// single-node Ceph cluster that the program starts once (scripts/ceph-dev.sh, memstore, a
// free monitor port, its own directory) and stops at the end: data written and read back
// across reopening, UNMAP and WRITE ZEROES reading zeros exactly over their range, more
// requests than the queue depth, capacity changed outside and by resize(), the errors an
// administrator meets (no pool, no image, the wrong size, no cluster, a group with another
// client), an OSD stopped under I/O (bounded errors, then service again), and completions
// delivered on the event loop that submitted (a loop stopped, the backstore destroyed on one).
#include "core/thread_name.h"
#include "scsi/lu.h"
#include "tests/ceph/ceph_env.h"
#include "tests/scsi/backstore_env.h"
#include "tests/scsi/event_loop_env.h"
#include "tests/scsi/loop_batch.h"
#include "tests/scsi/sbc_env.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>

#include <cstdlib>
#include <deque>
#include <fstream>
#include <random>
#include <thread>

namespace ulp::scsi::bs_test
{
namespace
{

using ceph_test::ceph_dev;
using ceph_test::g_cluster;
using ceph_test::sh;

// The rbd backstore is off in a program that has not asked for it (backstore.h).
class RbdCephEnv : public ceph_test::CephEnv
{
public:
	void SetUp() override
	{
		rbd_backstore_enable();
		CephEnv::SetUp();
	}
};

const auto *g_env = ::testing::AddGlobalTestEnvironment(new RbdCephEnv);

std::string rbd_cli(const std::string &args, int *rc = nullptr)
{
	return sh("timeout 60 rbd --client-mount-timeout 10 " + args, rc);
}

BackstoreConfig rbd_cfg(const std::string &image, uint64_t size = 0, bool create = false)
{
	BackstoreConfig c;
	c.kind = "rbd";
	c.size = size;
	c.queue_depth = 16;
	c.rbd.pool = "rbd";
	c.rbd.image = image;
	c.rbd.conf = g_cluster.conf;
	c.rbd.keyring = g_cluster.keyring;
	c.rbd.create = create;
	c.rbd.timeout_s = 10;
	return c;
}

std::vector<uint8_t> pattern(size_t n, uint32_t seed)
{
	std::vector<uint8_t> v(n);
	std::mt19937 rng(seed);
	for (auto &b : v)
		b = static_cast<uint8_t>(rng());
	return v;
}

// The number after "key": in a JSON text, or 0 (the ceph CLI's flat answers).
uint64_t json_u64(const std::string &json, const std::string &key)
{
	const auto p = json.find("\"" + key + "\":");
	if (p == std::string::npos)
		return 0;
	return std::strtoull(json.c_str() + p + key.size() + 3, nullptr, 10);
}

int refused(const BackstoreConfig &cfg, std::string *why)
{
	int err = 0;
	auto bs = make_backstore(cfg, &err, why);
	EXPECT_FALSE(bs);
	return err;
}

TEST(RbdBackstore, WritesReadBackAcrossReopen)
{
	const uint64_t size = 64 * MiB;
	auto bs = make(rbd_cfg("rw", size, true));
	ASSERT_TRUE(bs);
	EXPECT_EQ(bs->kind(), "rbd");
	EXPECT_EQ(bs->size(), size);
	EXPECT_FALSE(bs->write_cache()); // rbd_cache off: GOOD means the OSDs hold it
	EXPECT_TRUE(bs->can_unmap());
	EXPECT_EQ(bs->unmap_granularity(), 4 * MiB); // the default object size

	// Across an object boundary (4 MiB), vectored in uneven pieces, and at the last block.
	auto a = pattern(1 * MiB, 1);
	const uint64_t off = 4 * MiB - 256 * KiB;
	std::vector<iovec> iov = {{a.data(), 4096},
	                          {a.data() + 4096, 512 * KiB - 4096},
	                          {a.data() + 512 * KiB, 512 * KiB}};
	ASSERT_EQ(run(*bs, BsOp::Write, off, a.size(), iov), 0);
	auto tail = pattern(512, 2);
	ASSERT_EQ(rw(*bs, BsOp::Write, size - 512, tail.data(), 512, true), 0);
	ASSERT_EQ(run(*bs, BsOp::Flush, 0, 0), 0);

	// done() never runs on librbd's thread: on the backstore's completion thread.
	Tracker t;
	Req r;
	std::vector<uint8_t> b(4096);
	r.iov = {{b.data(), b.size()}};
	r.set(BsOp::Read, off, b.size(), &t);
	r.t = &t;
	bs->submit(&r.io);
	ASSERT_TRUE(t.wait(1));
	EXPECT_NE(r.on, std::this_thread::get_id());

	bs.reset();
	bs = make(rbd_cfg("rw")); // size from the image, no create
	ASSERT_TRUE(bs);
	EXPECT_EQ(bs->size(), size);
	std::vector<uint8_t> got(a.size());
	ASSERT_EQ(rw(*bs, BsOp::Read, off, got.data(), got.size()), 0);
	EXPECT_TRUE(got == a);
	std::vector<uint8_t> got_tail(512);
	ASSERT_EQ(rw(*bs, BsOp::Read, size - 512, got_tail.data(), 512), 0);
	EXPECT_TRUE(got_tail == tail);
	// Never written: zeros.
	std::vector<uint8_t> z(8192, 0xee);
	ASSERT_EQ(rw(*bs, BsOp::Read, 32 * MiB, z.data(), z.size()), 0);
	EXPECT_EQ(std::count(z.begin(), z.end(), 0), 8192);

	// Past the end: -ERANGE, without reaching librbd.
	EXPECT_EQ(rw(*bs, BsOp::Read, size, z.data(), 512), -ERANGE);
	EXPECT_EQ(rw(*bs, BsOp::Write, size - 512, z.data(), 1024), -ERANGE);
}

// UNMAP and WRITE ZEROES over ranges that cut objects: zeros exactly over the range (librbd's
// plain discard would skip the partial objects and leave old data), the rest untouched.
TEST(RbdBackstore, UnmapAndWriteZeroesReadZerosExactly)
{
	const uint64_t size = 16 * MiB;
	auto bs = make(rbd_cfg("unmap", size, true));
	ASSERT_TRUE(bs);
	auto a = pattern(size, 3);
	for (uint64_t off = 0; off < size; off += 4 * MiB)
		ASSERT_EQ(rw(*bs, BsOp::Write, off, a.data() + off, 4 * MiB), 0);

	struct Range {
		BsOp op;
		uint64_t off, len;
	};
	// Whole objects, a range inside one object, one across two objects' edges.
	const Range ranges[] = {{BsOp::Unmap, 3 * MiB + 512, 6 * MiB + 1024},
	                        {BsOp::Unmap, 12 * MiB + 4096, 8192},
	                        {BsOp::WriteZeroes, 14 * MiB - 1536, 512 * 5}};
	for (const Range &rg : ranges) {
		ASSERT_EQ(run(*bs, rg.op, rg.off, rg.len), 0)
		    << bs_op_str(rg.op) << " at " << rg.off;
		std::memset(a.data() + rg.off, 0, rg.len);
	}
	std::vector<uint8_t> got(size);
	for (uint64_t off = 0; off < size; off += 4 * MiB)
		ASSERT_EQ(rw(*bs, BsOp::Read, off, got.data() + off, 4 * MiB), 0);
	for (uint64_t i = 0; i < size; i += 512)
		ASSERT_EQ(std::memcmp(got.data() + i, a.data() + i, 512), 0)
		    << "block at byte " << i;
}

// More requests than the queue depth: the rest wait in order and all complete, once each.
TEST(RbdBackstore, MoreRequestsThanQueueDepth)
{
	auto cfg = rbd_cfg("deep", 8 * MiB, true);
	cfg.queue_depth = 4;
	auto bs = make(cfg);
	ASSERT_TRUE(bs);
	constexpr int kN = 64;
	auto data = pattern(kN * 4096, 4);
	Tracker t;
	std::vector<std::unique_ptr<Req>> reqs;
	for (int i = 0; i < kN; i++) {
		auto r = std::make_unique<Req>();
		r->iov = {{data.data() + i * 4096, 4096}};
		r->set(BsOp::Write, uint64_t(i) * 4096 * 3, 4096, &t);
		reqs.push_back(std::move(r));
	}
	for (auto &r : reqs)
		bs->submit(&r->io);
	ASSERT_TRUE(t.wait(kN));
	for (auto &r : reqs) {
		EXPECT_EQ(r->calls.load(), 1);
		EXPECT_EQ(r->err, 0);
	}
	std::vector<uint8_t> b(4096);
	for (int i = 0; i < kN; i++) {
		ASSERT_EQ(rw(*bs, BsOp::Read, uint64_t(i) * 4096 * 3, b.data(), 4096), 0);
		ASSERT_EQ(std::memcmp(b.data(), data.data() + i * 4096, 4096), 0) << i;
	}
}

// An image grown outside (rbd resize) is seen by storage_size(); resize() changes the image.
TEST(RbdBackstore, CapacityFollowsTheImage)
{
	auto bs = make(rbd_cfg("grow", 8 * MiB, true));
	ASSERT_TRUE(bs);
	int rc = 0;
	std::string out = rbd_cli("resize rbd/grow --size 12M", &rc);
	ASSERT_EQ(rc, 0) << out;
	uint64_t now = 0;
	std::string why;
	ASSERT_EQ(bs->storage_size(&now, &why), 0) << why;
	EXPECT_EQ(now, 12 * MiB);
	EXPECT_EQ(bs->size(), 8 * MiB); // the logical unit decides when to take it

	ASSERT_EQ(bs->resize(20 * MiB, &why), 0) << why;
	EXPECT_EQ(bs->size(), 20 * MiB);
	out = rbd_cli("info rbd/grow", &rc);
	EXPECT_NE(out.find("size 20 MiB"), std::string::npos) << out;
	auto a = pattern(4096, 5);
	EXPECT_EQ(rw(*bs, BsOp::Write, 20 * MiB - 4096, a.data(), 4096), 0);
}

// A logical unit on an image resized outside (`rbd resize`, as an administrator or another
// gateway would) takes the new capacity by itself: librbd's header watch, then the LU's
// rescan (which raises CAPACITY DATA HAS CHANGED), without SIGHUP or ulpctl.
TEST(RbdBackstore, LogicalUnitFollowsAResizeOutside)
{
	auto bs = make(rbd_cfg("follow", 8 * MiB, true));
	ASSERT_TRUE(bs);
	LogicalUnit lu("follow", std::move(bs), LuConfig{});
	ASSERT_EQ(lu.nr_blocks(), 8 * MiB / 512);
	int rc = 0;
	std::string out = rbd_cli("resize rbd/follow --size 24M", &rc);
	ASSERT_EQ(rc, 0) << out;
	const auto deadline = std::chrono::steady_clock::now() + 10s;
	while (lu.nr_blocks() != 24 * MiB / 512 && std::chrono::steady_clock::now() < deadline)
		std::this_thread::sleep_for(10ms);
	EXPECT_EQ(lu.nr_blocks(), 24 * MiB / 512);
	std::vector<uint8_t> b(512, 7);
	EXPECT_EQ(rw(lu.bs(), BsOp::Write, 24 * MiB - 512, b.data(), b.size()), 0);
}

TEST(RbdBackstore, ReadOnlyRefusesWrites)
{
	{
		auto bs = make(rbd_cfg("ro", 4 * MiB, true));
		ASSERT_TRUE(bs);
	}
	auto cfg = rbd_cfg("ro");
	cfg.read_only = true;
	auto bs = make(cfg);
	ASSERT_TRUE(bs);
	std::vector<uint8_t> b(4096);
	EXPECT_EQ(rw(*bs, BsOp::Read, 0, b.data(), b.size()), 0);
	EXPECT_EQ(rw(*bs, BsOp::Write, 0, b.data(), b.size()), -EROFS);
	EXPECT_EQ(run(*bs, BsOp::Unmap, 0, 4096), -EROFS);
	std::string why;
	EXPECT_EQ(bs->resize(8 * MiB, &why), -EROFS);
}

// What an administrator gets wrong, each refused with the name in the message.
TEST(RbdBackstore, BadConfigsAreRefusedByName)
{
	std::string why;
	EXPECT_EQ(refused(rbd_cfg("nosuch"), &why), -ENOENT);
	EXPECT_NE(why.find("rbd/nosuch"), std::string::npos) << why;
	EXPECT_NE(why.find("no such image"), std::string::npos) << why;

	auto cfg = rbd_cfg("x", 4 * MiB, true);
	cfg.rbd.pool = "nopool";
	EXPECT_EQ(refused(cfg, &why), -ENOENT);
	EXPECT_NE(why.find("nopool"), std::string::npos) << why;
	EXPECT_NE(why.find("no such pool"), std::string::npos) << why;

	{
		auto bs = make(rbd_cfg("sized", 4 * MiB, true));
		ASSERT_TRUE(bs);
	}
	EXPECT_EQ(refused(rbd_cfg("sized", 8 * MiB), &why), -EINVAL);
	EXPECT_NE(why.find("4194304"), std::string::npos) << why;

	cfg = rbd_cfg("");
	EXPECT_EQ(refused(cfg, &why), -EINVAL);
	EXPECT_NE(why.find("image"), std::string::npos) << why;

	cfg = rbd_cfg("c", 0, true);
	EXPECT_EQ(refused(cfg, &why), -EINVAL);
	EXPECT_NE(why.find("size"), std::string::npos) << why;

	// One group, one client: a second identity in the same group is refused.
	auto first = make(rbd_cfg("sized"));
	ASSERT_TRUE(first);
	cfg = rbd_cfg("sized");
	cfg.rbd.client = "ulp-gw";
	EXPECT_EQ(refused(cfg, &why), -EINVAL);
	EXPECT_NE(why.find("group default"), std::string::npos) << why;
	cfg.rbd.group = "gw";
	cfg.rbd.keyring = g_cluster.dir + "/client.ulp-gw.keyring";
	auto second = make(cfg); // its own group: its own client, with profile rbd caps
	ASSERT_TRUE(second);
	std::vector<uint8_t> b(4096);
	EXPECT_EQ(rw(*second, BsOp::Read, 0, b.data(), b.size()), 0);
}

// No monitor at the configured address: a bounded wait (timeout_s), then a clear error.
TEST(RbdBackstore, NoClusterFailsInBoundedTime)
{
	const int port = ceph_test::free_port();
	const std::string conf = g_cluster.dir + "/nobody.conf";
	{
		std::ofstream f(conf);
		f << "[global]\nmon_host = v2:127.0.0.1:" << port
		  << "\nauth_client_required = none\n";
	}
	auto cfg = rbd_cfg("rw");
	cfg.rbd.conf = conf;
	cfg.rbd.group = "nobody";
	cfg.rbd.timeout_s = 3;
	const auto t0 = std::chrono::steady_clock::now();
	std::string why;
	int err = refused(cfg, &why);
	const auto secs =
	    std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now() - t0)
	        .count();
	EXPECT_LT(err, 0);
	EXPECT_LE(secs, 20);
	EXPECT_NE(why.find("cannot connect"), std::string::npos) << why;
}

// The OSD stopped under I/O: requests fail within the OSD timeout (never hang, never GOOD)
// with -ETIMEDOUT, which an initiator sees as BUSY without sense data; another LU (on storage
// the OSD does not hold) serves on; once the OSD is back the same backstore serves again
// with what was acknowledged intact.
TEST(RbdBackstore, OsdDownFailsBoundedThenRecovers)
{
	auto cfg = rbd_cfg("osd", 8 * MiB, true);
	cfg.rbd.group = "osd";
	cfg.rbd.timeout_s = 3;
	auto made = make(cfg);
	ASSERT_TRUE(made);
	sbc_test::Env e(std::move(made));
	e.t.add(1); // a RAM LU beside it
	Nexus *s1 = e.t.login("iqn.init:b", 1);
	EXPECT_TRUE(sbc_test::is_sense(e.run(test::cdb_tur()), 0x3f0e)) << "LUN 1 added";
	Backstore *bs = &e.lu->bs();
	auto a = pattern(64 * KiB, 6);
	ASSERT_EQ(rw(*bs, BsOp::Write, 0, a.data(), a.size()), 0);

	int rc = 0;
	std::string out = ceph_dev("stop-osd --timeout 20", &rc);
	ASSERT_EQ(rc, 0) << out;
	auto b = pattern(4096, 7);
	const auto t0 = std::chrono::steady_clock::now();
	const int err = rw(*bs, BsOp::Write, 1 * MiB, b.data(), b.size());
	const auto secs =
	    std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now() - t0)
	        .count();
	EXPECT_EQ(err, -ETIMEDOUT);
	EXPECT_LE(secs, 9);
	const auto t1 = std::chrono::steady_clock::now();
	auto busy = e.t.lb.run(e.s, 0, sbc_test::cdb_rw(0x8a, 2048, 8), DataDir::Write, b,
	                       TaskAttr::Simple, 0, std::chrono::seconds(30));
	EXPECT_LE(std::chrono::steady_clock::now() - t1, 9s);
	EXPECT_TRUE(busy.finished);
	EXPECT_EQ(busy.status, Status::Busy);
	EXPECT_TRUE(busy.sense.empty());
	EXPECT_TRUE(
	    sbc_test::is_good(e.t.lb.run(s1, 1, sbc_test::cdb_rw(0x8a, 0, 8), DataDir::Write, b)))
	    << "the other LU serves on";

	out = ceph_dev("start-osd --timeout 60", &rc);
	ASSERT_EQ(rc, 0) << out;
	std::vector<uint8_t> got(a.size());
	int r = -EIO;
	// The OSD takes a moment to serve the PGs again: a few bounded tries.
	for (int i = 0; i < 10 && r != 0; i++)
		r = rw(*bs, BsOp::Read, 0, got.data(), got.size());
	ASSERT_EQ(r, 0);
	EXPECT_TRUE(got == a);
	EXPECT_EQ(rw(*bs, BsOp::Write, 1 * MiB, b.data(), b.size()), 0);
	EXPECT_TRUE(sbc_test::is_good(
	    e.t.lb.run(e.s, 0, sbc_test::cdb_rw(0x8a, 2048, 8), DataDir::Write, b)))
	    << "the same nexus is served again";
}

int caw(Backstore &bs, uint64_t off, const void *cmp, const void *wr, size_t len,
        uint64_t *miscompare = nullptr)
{
	std::vector<uint8_t> both(2 * len);
	std::memcpy(both.data(), cmp, len);
	std::memcpy(both.data() + len, wr, len);
	Tracker t;
	Req r;
	r.iov = {{both.data(), both.size()}};
	r.set(BsOp::CompareAndWrite, off, len, &t);
	bs.submit(&r.io);
	if (!t.wait(1)) {
		ADD_FAILURE() << "compare-and-write at " << off << " did not complete";
		std::abort();
	}
	if (miscompare)
		*miscompare = r.io.miscompare;
	return r.err;
}

// COMPARE AND WRITE in the OSD: written when equal; when not, -EILSEQ, the first differing
// byte from the request's offset, nothing written; a range across two objects declined
// (-EOPNOTSUPP: the core then does it itself).
TEST(RbdBackstore, CompareAndWriteInTheOsd)
{
	auto bs = make(rbd_cfg("caw", 16 * MiB, true));
	ASSERT_TRUE(bs);
	EXPECT_EQ(bs->compare_and_write_max(), 512u); // librbd 16: one sector
	const uint64_t off = 4 * MiB + 8192;
	auto a = pattern(512, 20), b = pattern(512, 21);
	ASSERT_EQ(rw(*bs, BsOp::Write, off, a.data(), a.size()), 0);
	EXPECT_EQ(caw(*bs, off, a.data(), b.data(), 512), 0);
	std::vector<uint8_t> got(512);
	ASSERT_EQ(rw(*bs, BsOp::Read, off, got.data(), got.size()), 0);
	EXPECT_TRUE(got == b);

	auto wrong = b;
	wrong[123] ^= 0x40;
	uint64_t at = 0;
	EXPECT_EQ(caw(*bs, off, wrong.data(), a.data(), 512, &at), -EILSEQ);
	EXPECT_EQ(at, 123u);
	ASSERT_EQ(rw(*bs, BsOp::Read, off, got.data(), got.size()), 0);
	EXPECT_TRUE(got == b) << "a miscompare writes nothing";
	// At the start of an object too (where librbd 16's offset is right by accident).
	ASSERT_EQ(rw(*bs, BsOp::Write, 8 * MiB, a.data(), a.size()), 0);
	wrong = a;
	wrong[511] ^= 1;
	EXPECT_EQ(caw(*bs, 8 * MiB, wrong.data(), b.data(), 512, &at), -EILSEQ);
	EXPECT_EQ(at, 511u);

	// Longer than a sector, or across one: declined, for the core to do.
	std::vector<uint8_t> big(4096);
	EXPECT_EQ(caw(*bs, off, big.data(), big.data(), 4096), -EOPNOTSUPP);
	EXPECT_EQ(caw(*bs, off + 256, big.data(), big.data(), 512), -EOPNOTSUPP);
	EXPECT_EQ(caw(*bs, 16 * MiB - 256, big.data(), big.data(), 512), -ERANGE);
	RbdBsStats st;
	ASSERT_TRUE(rbd_bs_stats(*bs, &st));
	EXPECT_EQ(st.errors, 0u) << "a miscompare is not an error";
}

// Two gateways (two RADOS clients, as two processes would be) incrementing one counter by
// compare-and-write, retrying on miscompare: no increment is lost, so each was atomic
// against the other's.
TEST(RbdBackstore, CompareAndWriteIsAtomicAcrossClients)
{
	{
		auto bs = make(rbd_cfg("caw2", 4 * MiB, true));
		ASSERT_TRUE(bs);
	}
	auto c1 = rbd_cfg("caw2");
	c1.rbd.group = "gw1";
	auto c2 = rbd_cfg("caw2");
	c2.rbd.group = "gw2";
	auto g1 = make(c1), g2 = make(c2);
	ASSERT_TRUE(g1 && g2);
	constexpr int kPer = 40;
	std::atomic<int> retries{0};
	auto worker = [&](Backstore &bs) {
		std::vector<uint8_t> cur(512), next(512);
		for (int i = 0; i < kPer;) {
			ASSERT_EQ(rw(bs, BsOp::Read, 0, cur.data(), 512), 0);
			uint64_t v;
			std::memcpy(&v, cur.data(), sizeof(v));
			next = cur;
			v++;
			std::memcpy(next.data(), &v, sizeof(v));
			const int r = caw(bs, 0, cur.data(), next.data(), 512);
			if (r == 0)
				i++;
			else if (r == -EILSEQ)
				retries++;
			else
				FAIL() << "compare-and-write: " << r;
		}
	};
	std::thread t1([&] { worker(*g1); }), t2([&] { worker(*g2); });
	t1.join();
	t2.join();
	std::vector<uint8_t> got(512);
	ASSERT_EQ(rw(*g1, BsOp::Read, 0, got.data(), 512), 0);
	uint64_t v;
	std::memcpy(&v, got.data(), sizeof(v));
	EXPECT_EQ(v, 2u * kPer) << retries.load() << " miscompares retried";
	std::printf("%d miscompares retried\n", retries.load());
}

// The client blocklisted under I/O (what another gateway taking the image over does): from
// then on nothing answers GOOD, each request fails as a medium error without hanging, and
// the backstore says it is fenced.
TEST(RbdBackstore, BlocklistedClientNeverAnswersGood)
{
	auto cfg = rbd_cfg("fence", 8 * MiB, true);
	cfg.rbd.group = "fence";
	auto bs = make(cfg);
	ASSERT_TRUE(bs);
	auto a = pattern(4096, 30);
	ASSERT_EQ(rw(*bs, BsOp::Write, 0, a.data(), a.size()), 0);
	RbdBsStats st;
	ASSERT_TRUE(rbd_bs_stats(*bs, &st));
	EXPECT_FALSE(st.fenced);
	// "v2:127.0.0.1:0/NONCE" (or a list of them): what `ceph osd blocklist add` takes.
	std::string addr = st.client_addr;
	if (auto p = addr.find("127.0.0.1:"); p != std::string::npos) {
		addr = addr.substr(p);
		addr = addr.substr(0, addr.find_first_of(",]"));
	}
	ASSERT_NE(addr.find('/'), std::string::npos) << st.client_addr;

	// I/O running while the blocklist lands.
	std::atomic<bool> stop{false};
	std::atomic<int> good_after{0};
	std::atomic<bool> listed{false};
	std::thread io([&] {
		std::vector<uint8_t> b(4096);
		while (!stop) {
			const bool was_listed = listed.load();
			const int r = rw(*bs, BsOp::Write, 4096, b.data(), b.size());
			if (r == 0 && was_listed)
				good_after++;
		}
	});
	int rc = 0;
	std::string out = sh("timeout 60 ceph osd blocklist add " + addr, &rc);
	ASSERT_EQ(rc, 0) << out;
	// The blocklist holds from the osdmap epoch that carries it; until the OSD has that
	// map, a write may still land (as it would have a moment earlier). Count from then.
	const uint64_t epoch = json_u64(sh("timeout 60 ceph osd dump -f json"), "epoch");
	ASSERT_GT(epoch, 0u);
	bool osd_has_it = false;
	for (int i = 0; i < 100 && !osd_has_it; i++) {
		osd_has_it =
		    json_u64(sh("timeout 60 ceph tell osd.0 status"), "newest_map") >= epoch;
		if (!osd_has_it)
			std::this_thread::sleep_for(std::chrono::milliseconds(100));
	}
	ASSERT_TRUE(osd_has_it) << "osd.0 did not get osdmap epoch " << epoch << " in 10 s";
	listed = true;
	std::this_thread::sleep_for(std::chrono::milliseconds(500));
	stop = true;
	io.join();
	EXPECT_EQ(good_after.load(), 0) << "a write answered GOOD after the blocklist";

	std::vector<uint8_t> got(4096);
	// -ESHUTDOWN: fenced, which the core answers NOT READY, port unavailable (not a
	// MEDIUM ERROR: a multipath initiator retries it through another gateway).
	EXPECT_EQ(rw(*bs, BsOp::Read, 0, got.data(), got.size()), -ESHUTDOWN);
	EXPECT_EQ(rw(*bs, BsOp::Write, 0, a.data(), a.size()), -ESHUTDOWN);
	BsExtent x;
	EXPECT_EQ(bs->extent(0, &x), -ESHUTDOWN) << "GET LBA STATUS is no answer either";
	ASSERT_TRUE(rbd_bs_stats(*bs, &st));
	EXPECT_TRUE(st.fenced);
	bs.reset();
	out = sh("timeout 60 ceph osd blocklist rm " + addr, &rc);
	EXPECT_EQ(rc, 0) << out;

	// Another client (a new instance: not on the list) reads what was acknowledged.
	auto other = rbd_cfg("fence");
	other.rbd.group = "fence-2";
	auto bs2 = make(other);
	ASSERT_TRUE(bs2);
	ASSERT_EQ(rw(*bs2, BsOp::Read, 0, got.data(), got.size()), 0);
	EXPECT_TRUE(got == a);
}

// Gateway mode (managed_lock, ha/): the image's exclusive lock moves only when a gateway
// takes or gives it. A write elsewhere fails -ENOLCK at once instead of pulling the lock from
// its owner (the owner ping-pong of gateways that let any write move it); a planned move
// (release, then take) fences nobody; a take from a holder that did not let go breaks its
// lock, and librbd blocklists that holder as it breaks. (A free lock is still taken by a
// client's first write, whatever the policy: the gateways' Standby ports keep non-owners
// from writing at all.)
TEST(RbdBackstore, ManagedLockMovesOnlyWhenAsked)
{
	ASSERT_TRUE(make(rbd_cfg("managed", 16 * MiB, true))); // created, closed
	auto ca = rbd_cfg("managed");
	ca.rbd.group = "ml-a";
	ca.rbd.managed_lock = true;
	auto a = make(ca);
	ASSERT_TRUE(a);
	auto cb = rbd_cfg("managed");
	cb.rbd.group = "ml-b";
	cb.rbd.managed_lock = true;
	auto b = make(cb);
	ASSERT_TRUE(b);
	auto pa = pattern(4096, 71), pb = pattern(4096, 72);
	std::vector<uint8_t> got(4096);

	bool owner = false;
	ASSERT_EQ(rbd_bs_lock(*a, true), 0);
	ASSERT_EQ(rbd_bs_lock_owner(*a, &owner), 0);
	EXPECT_TRUE(owner);
	EXPECT_EQ(rbd_bs_lock(*a, true), 0) << "taking it again";
	ASSERT_EQ(rw(*a, BsOp::Write, 0, pa.data(), pa.size()), 0);

	// b writes: refused, and the lock stays with a.
	EXPECT_EQ(rw(*b, BsOp::Write, 0, pb.data(), pb.size()), -ENOLCK);
	ASSERT_EQ(rbd_bs_lock_owner(*a, &owner), 0);
	EXPECT_TRUE(owner) << "a write elsewhere moved the lock";
	ASSERT_EQ(rw(*b, BsOp::Read, 0, got.data(), got.size()), 0) << "reads need no lock";
	EXPECT_TRUE(got == pa);

	// A planned move: a lets go, b takes it; nobody is fenced.
	ASSERT_EQ(rbd_bs_lock(*a, false), 0);
	ASSERT_EQ(rbd_bs_lock(*b, true), 0);
	ASSERT_EQ(rw(*b, BsOp::Write, 0, pb.data(), pb.size()), 0);
	EXPECT_EQ(rw(*a, BsOp::Write, 0, pa.data(), pa.size()), -ENOLCK)
	    << "not write protected: the lock moved, which the initiator retries elsewhere";
	RbdBsStats st;
	ASSERT_TRUE(rbd_bs_stats(*a, &st));
	EXPECT_FALSE(st.fenced);

	// A failover: a takes it while b still holds it: b's lock broken, b fenced.
	ASSERT_EQ(rbd_bs_lock(*a, true), 0);
	ASSERT_EQ(rw(*a, BsOp::Write, 0, pa.data(), pa.size()), 0);
	EXPECT_EQ(rw(*b, BsOp::Write, 0, pb.data(), pb.size()), -ESHUTDOWN) << "b was not fenced";
	ASSERT_TRUE(rbd_bs_stats(*b, &st));
	EXPECT_TRUE(st.fenced);
	ASSERT_EQ(rw(*a, BsOp::Read, 0, got.data(), got.size()), 0);
	EXPECT_TRUE(got == pa);
	const std::string b_addr = st.client_addr;
	b.reset();
	int rc = 0;
	sh("timeout 60 ceph osd blocklist rm " + b_addr, &rc);

	// Without managed_lock: no such call; a group's clients agree on the mode.
	auto plain = make(rbd_cfg("managed"));
	ASSERT_TRUE(plain);
	EXPECT_EQ(rbd_bs_lock(*plain, true), -EINVAL);
	auto mixed = rbd_cfg("managed");
	mixed.rbd.group = "ml-a";
	int err = 0;
	std::string why;
	EXPECT_FALSE(make_backstore(mixed, &err, &why));
	EXPECT_NE(why.find("lock mode"), std::string::npos) << why;
	auto ram = make(mem_cfg("ram", MiB));
	ASSERT_TRUE(ram);
	EXPECT_EQ(rbd_bs_lock(*ram, true), -ENOTSUP);
}

// One image seen from two gateways (two clients) under two LU names: one serial number
// and one NAA identifier (what multipath keys paths on), from the cluster's fsid and the
// pool's and image's ids; another image of the same name later is another LU.
TEST(RbdBackstore, IdentityFollowsTheImageNotTheName)
{
	auto c1 = rbd_cfg("ident", 8 * MiB, true);
	c1.rbd.group = "id-1";
	auto c2 = rbd_cfg("ident");
	c2.rbd.group = "id-2";
	auto b1 = make(c1), b2 = make(c2);
	ASSERT_TRUE(b1 && b2);
	ASSERT_EQ(b1->identity(), b2->identity());
	EXPECT_EQ(b1->identity().rfind("rbd:", 0), 0u) << b1->identity();
	const std::string first = b1->identity();
	std::string serial;
	uint64_t naa = 0;
	{
		LogicalUnit l1("iqn.2026-11.org.ulp:gw1/0", std::move(b1), LuConfig{});
		LogicalUnit l2("iqn.2026-11.org.ulp:gw2/7", std::move(b2), LuConfig{});
		EXPECT_EQ(l1.serial(), l2.serial());
		EXPECT_EQ(l1.naa(), l2.naa());
		serial = l1.serial();
		naa = l1.naa();
		// A configured identity still wins.
		LuConfig fixed;
		fixed.serial = "fixed-serial";
		fixed.naa = 0x3000000000000001ull;
		LogicalUnit l3("x/0", make(c2), fixed);
		EXPECT_EQ(l3.serial(), "fixed-serial");
		EXPECT_EQ(l3.naa(), 0x3000000000000001ull);
	}

	// The image removed and made again under its name: a new id, another LU.
	int rc = 0;
	std::string out = rbd_cli("rm ident", &rc);
	ASSERT_EQ(rc, 0) << out;
	auto b3 = make(rbd_cfg("ident", 8 * MiB, true));
	ASSERT_TRUE(b3);
	EXPECT_NE(b3->identity(), first);
	LogicalUnit l4("iqn.2026-11.org.ulp:gw1/0", std::move(b3), LuConfig{});
	EXPECT_NE(l4.serial(), serial);
	EXPECT_NE(l4.naa(), naa);
}

// ---- Through the SCSI core (the loopback fabric), as an initiator sees an rbd LU ----------

using sbc_test::cdb_lba_status;
using sbc_test::cdb_unmap;
using sbc_test::cdb_write_atomic;
using sbc_test::cdb_ws;
using sbc_test::Env;
using sbc_test::is_good;
using sbc_test::unmap_list;

// A logical unit on image (created, size bytes) as LUN 0 of a target, with a nexus.
std::unique_ptr<Env> rbd_lu(const std::string &image, uint64_t size, LuConfig cfg = {})
{
	auto bs = make(rbd_cfg(image, size, true));
	if (!bs)
		return nullptr;
	return std::make_unique<Env>(std::move(bs), cfg);
}

uint64_t rbd_requests(const Backstore &bs)
{
	RbdBsStats st;
	EXPECT_TRUE(rbd_bs_stats(bs, &st));
	return st.completed;
}

// Whether blocks [lba, lba + n) of e's LU all hold blk, read back in 8 MiB commands.
::testing::AssertionResult holds(Env &e, uint64_t lba, uint64_t n, const std::vector<uint8_t> &blk)
{
	const uint64_t per = 8 * MiB / blk.size();
	for (uint64_t at = lba; at < lba + n; at += per) {
		const uint32_t k = static_cast<uint32_t>(std::min(per, lba + n - at));
		const auto got = e.read(at, k);
		for (uint32_t i = 0; i < k; i++)
			if (got.size() != size_t(k) * blk.size() ||
			    std::memcmp(got.data() + size_t(i) * blk.size(), blk.data(),
			                blk.size()))
				return ::testing::AssertionFailure() << "block " << at + i;
	}
	return ::testing::AssertionSuccess();
}

// WRITE SAME of a patterned block through the core: one librbd writesame per at most 32
// objects (write_same_max), the block everywhere in the range - across object boundaries and
// past the split - and the neighbouring blocks untouched.
TEST(RbdScsi, WriteSameByLibrbd)
{
	LuConfig cfg;
	cfg.max_write_same_blocks = 1u << 20; // 512 MiB: room past the split
	auto e = rbd_lu("ws", 256 * MiB, cfg);
	ASSERT_TRUE(e);
	Backstore &bs = e->lu->bs();
	ASSERT_EQ(bs.write_same_max(), 32 * 4 * MiB);
	constexpr uint64_t kObj = 4 * MiB / 512; // blocks per object
	const auto before = pattern(512, 41), after = pattern(512, 42);

	// 30 blocks across the end of object 0.
	const auto blk = pattern(512, 40);
	const uint64_t lba = kObj - 10;
	e->write(lba - 1, before);
	e->write(lba + 30, after);
	uint64_t n0 = rbd_requests(bs);
	ASSERT_TRUE(is_good(e->out(cdb_ws(true, lba, 30), blk)));
	EXPECT_EQ(rbd_requests(bs) - n0, 1u) << "one writesame";
	EXPECT_TRUE(holds(*e, lba, 30, blk));
	EXPECT_TRUE(holds(*e, lba - 1, 1, before));
	EXPECT_TRUE(holds(*e, lba + 30, 1, after));

	// 128 MiB and 8 blocks from inside object 1, WRITE SAME (10)'s 16-bit count too small:
	// (16), split after 32 objects into two writesames.
	const auto blk2 = pattern(512, 43);
	const uint64_t lba2 = kObj + kObj / 2 + 3, n2 = 32 * kObj + 8;
	e->write(lba2 - 1, before);
	e->write(lba2 + n2, after);
	n0 = rbd_requests(bs);
	ASSERT_TRUE(is_good(e->out(cdb_ws(true, lba2, static_cast<uint32_t>(n2)), blk2)));
	EXPECT_EQ(rbd_requests(bs) - n0, 2u) << "split at write_same_max";
	EXPECT_TRUE(holds(*e, lba2, n2, blk2));
	EXPECT_TRUE(holds(*e, lba2 - 1, 1, before));
	EXPECT_TRUE(holds(*e, lba2 + n2, 1, after));
}

// WRITE ATOMIC within one RADOS object: the Block Limits page gives the atomic unit (128 KiB
// by default) as alignment and longest length; an aligned write is one librbd request and
// reads back; one that would cross from object 0 into object 1 is refused and writes
// nothing; and a reader on another client never sees half of one, while the LU rewrites
// the last unit of object 0 with two patterns in turn.
TEST(RbdScsi, WriteAtomicWithinOneObject)
{
	auto e = rbd_lu("atomic", 16 * MiB);
	ASSERT_TRUE(e);
	Backstore &bs = e->lu->bs();
	constexpr uint32_t kUnit = kRbdAtomicUnit / 512; // blocks
	constexpr uint64_t kObj = 4 * MiB / 512;         // blocks per object
	auto v = e->in(sbc_test::Bytes{0x12, 0x01, 0xb0, 0, 64, 0}, 64);
	ASSERT_TRUE(is_good(v));
	ASSERT_EQ(v.data.size(), 64u);
	EXPECT_EQ(get_be32(&v.data[44]), kUnit) << "MAXIMUM ATOMIC TRANSFER LENGTH";
	EXPECT_EQ(get_be32(&v.data[48]), kUnit) << "ATOMIC ALIGNMENT";

	const uint64_t lba = kObj - kUnit; // the last unit of object 0
	const auto old = pattern(2 * kUnit * 512, 60);
	e->write(lba, old);
	const auto a = pattern(kUnit * 512, 61), b = pattern(kUnit * 512, 62);
	uint64_t n0 = rbd_requests(bs);
	ASSERT_TRUE(is_good(e->out(cdb_write_atomic(lba, kUnit), a)));
	EXPECT_EQ(rbd_requests(bs) - n0, 1u) << "one librbd write";
	EXPECT_EQ(e->read(lba, kUnit), a);
	// Half a unit on: it would span objects 0 and 1 (two OSD operations).
	n0 = rbd_requests(bs);
	EXPECT_TRUE(
	    sbc_test::is_sense(e->out(cdb_write_atomic(lba + kUnit / 2, kUnit), b), 0x2400));
	EXPECT_EQ(rbd_requests(bs), n0) << "nothing reached librbd";
	EXPECT_EQ(e->read(lba + kUnit, kUnit),
	          std::vector<uint8_t>(old.begin() + kUnit * 512, old.end()));

	// Another client reads the unit over and over while the LU writes a and b in turn.
	auto rcfg = rbd_cfg("atomic");
	rcfg.rbd.group = "atomic-reader";
	auto reader_bs = make(rcfg);
	ASSERT_TRUE(reader_bs);
	std::atomic<bool> stop{false};
	std::atomic<int> reads{0}, torn{0}, failed{0};
	std::thread reader([&] {
		std::vector<uint8_t> got(kUnit * 512);
		while (!stop.load()) {
			if (rw(*reader_bs, BsOp::Read, lba * 512, got.data(), got.size()) != 0) {
				failed++;
				continue;
			}
			reads++;
			if (got != a && got != b)
				torn++;
		}
	});
	// Until the reader has looked 200 times, bounded: 2000 writes or 60 s.
	const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
	for (int i = 0;
	     reads.load() < 200 && i < 2000 && std::chrono::steady_clock::now() < deadline; i++)
		if (!is_good(e->out(cdb_write_atomic(lba, kUnit), i % 2 ? a : b))) {
			ADD_FAILURE() << "write " << i;
			break;
		}
	stop = true;
	reader.join();
	EXPECT_GE(reads.load(), 50) << "too few reads raced the writes to mean anything";
	EXPECT_EQ(failed.load(), 0);
	EXPECT_EQ(torn.load(), 0);
}

// atomic_unit: a power of two from the block size to the stripe unit, or 0 (no WRITE ATOMIC:
// INVALID COMMAND OPERATION CODE, and the Block Limits page reports none).
TEST(RbdScsi, AtomicUnitChecked)
{
	std::string why;
	auto cfg = rbd_cfg("atomic-cfg", 8 * MiB, true);
	cfg.rbd.atomic_unit = 3 * 4096;
	EXPECT_EQ(refused(cfg, &why), -EINVAL);
	EXPECT_NE(why.find("power of two"), std::string::npos) << why;
	cfg.rbd.atomic_unit = 256;
	EXPECT_EQ(refused(cfg, &why), -EINVAL);
	EXPECT_NE(why.find("block size"), std::string::npos) << why;
	cfg.rbd.atomic_unit = 8 * MiB;
	EXPECT_EQ(refused(cfg, &why), -EINVAL);
	EXPECT_NE(why.find("stripe unit 4194304"), std::string::npos) << why;

	cfg.rbd.atomic_unit = 0;
	auto bs = make(cfg);
	ASSERT_TRUE(bs);
	Env e(std::move(bs));
	EXPECT_EQ(e.lu->atomic_max_blocks(), 0u);
	EXPECT_TRUE(
	    sbc_test::is_sense(e.out(cdb_write_atomic(0, 1), sbc_test::Bytes(512)), 0x2000));
	cfg.rbd.atomic_unit = 4 * MiB; // a whole object
	cfg.rbd.create = false;
	auto whole = make(cfg);
	ASSERT_TRUE(whole);
	EXPECT_EQ(whole->atomic_write_max(), 4 * MiB);
}

// Allocation walks bs's map has taken so far.
uint64_t walks(const Backstore &bs)
{
	RbdBsStats st;
	EXPECT_TRUE(rbd_bs_stats(bs, &st));
	return st.alloc_walks;
}

// Waits (bounded) until bs has ended n allocation walks in all.
bool walked(const Backstore &bs, uint64_t n)
{
	RbdBsStats st;
	for (int i = 0; i < 1000; i++) {
		if (!rbd_bs_stats(bs, &st))
			return false;
		if (st.alloc_walks >= n)
			return true;
		std::this_thread::sleep_for(10ms);
	}
	return false;
}

struct LbaDesc {
	uint64_t lba;
	uint32_t blocks;
	uint8_t status; // 0 mapped, 1 deallocated
	bool operator==(const LbaDesc &) const = default;
};

std::ostream &operator<<(std::ostream &o, const LbaDesc &d)
{
	return o << "{" << d.lba << ", " << d.blocks << ", " << int(d.status) << "}";
}

// GET LBA STATUS from lba through the core: its descriptors.
std::vector<LbaDesc> lba_status(Env &e, uint64_t lba)
{
	auto r = e.in(cdb_lba_status(lba, 8 + 16 * 64), 8 + 16 * 64);
	EXPECT_TRUE(is_good(r));
	std::vector<LbaDesc> d;
	if (r.data.size() < 8)
		return d;
	const size_t n =
	    std::min<size_t>((get_be32(r.data.data()) - 4) / 16, (r.xfer_len - 8) / 16);
	for (size_t i = 0; i < n; i++) {
		const uint8_t *p = &r.data[8 + 16 * i];
		d.push_back({get_be64(p), get_be32(p + 8), p[12]});
	}
	return d;
}

// GET LBA STATUS of an rbd LU from its objects: a fresh image all deallocated; a write makes
// its object mapped, an UNMAP of the whole object deallocated again, at once; the walk at open
// finds what was written before; another gateway's write is seen at the next walk (a resize
// asks for one).
TEST(RbdScsi, GetLbaStatusFromTheObjects)
{
	constexpr uint64_t kObj = 4 * MiB / 512;
	auto e = rbd_lu("lbas", 32 * MiB); // 8 objects
	ASSERT_TRUE(e);
	ASSERT_TRUE(walked(e->lu->bs(), 1));
	const uint64_t n = e->nr();
	using V = std::vector<LbaDesc>;
	EXPECT_EQ(lba_status(*e, 0), (V{{0, uint32_t(n), 1}}));

	e->write(3 * kObj + 100, pattern(4096, 50));
	EXPECT_EQ(lba_status(*e, 0),
	          (V{{0, 3 * kObj, 1}, {3 * kObj, kObj, 0}, {4 * kObj, 4 * kObj, 1}}));
	EXPECT_EQ(lba_status(*e, 3 * kObj + 5),
	          (V{{3 * kObj + 5, kObj - 5, 0}, {4 * kObj, 4 * kObj, 1}}));

	ASSERT_TRUE(is_good(e->out(cdb_unmap(24), unmap_list({{3 * kObj, kObj}}))));
	EXPECT_EQ(lba_status(*e, 0), (V{{0, uint32_t(n), 1}}));

	// Written, closed, opened again: the walk finds object 3 (and a block of object 7).
	e->write(3 * kObj, pattern(512, 51));
	e->write(8 * kObj - 1, pattern(512, 52));
	e.reset();
	e = rbd_lu("lbas", 32 * MiB);
	ASSERT_TRUE(e);
	ASSERT_TRUE(walked(e->lu->bs(), 1));
	const V two = {
	    {0, 3 * kObj, 1}, {3 * kObj, kObj, 0}, {4 * kObj, 3 * kObj, 1}, {7 * kObj, kObj, 0}};
	EXPECT_EQ(lba_status(*e, 0), two);

	// Another gateway (another client) writes object 5: unseen until the next walk.
	auto other = rbd_cfg("lbas");
	other.rbd.group = "lbas-2";
	auto gw2 = make(other);
	ASSERT_TRUE(gw2);
	// The lock moving between the two clients can make librbd call the header watch, which
	// asks for a walk too: "not before a walk" holds only while the count has not moved.
	auto b = pattern(4096, 53);
	const uint64_t w0 = walks(e->lu->bs());
	ASSERT_EQ(rw(*gw2, BsOp::Write, 5 * 4 * MiB, b.data(), b.size()), 0);
	const auto seen = lba_status(*e, 0);
	if (walks(e->lu->bs()) == w0) {
		EXPECT_EQ(seen, two) << "not before a walk";
	}
	std::string why;
	ASSERT_EQ(e->lu->set_capacity(36 * MiB, &why), 0) << why;          // a resize walks again
	EXPECT_EQ(e->run(test::cdb_tur()).status, Status::CheckCondition); // CAPACITY CHANGED
	// The walk the resize asked for finds object 5 and the new object 8 empty, well before
	// the periodic walk (kAllocWalkEvery, 60 s). Not counted walks: one may have ended
	// inside rbd_resize (while it took the lock back), of the old size, and count.
	const V grown = {{0, 3 * kObj, 1},    {3 * kObj, kObj, 0}, {4 * kObj, kObj, 1},
	                 {5 * kObj, kObj, 0}, {6 * kObj, kObj, 1}, {7 * kObj, kObj, 0},
	                 {8 * kObj, kObj, 1}};
	V now;
	for (int i = 0; i < 1000 && (now = lba_status(*e, 0)) != grown; i++)
		std::this_thread::sleep_for(10ms);
	EXPECT_EQ(now, grown) << "10 s after the resize";
}

// An image without the object-map and fast-diff features (made by an older client, or by
// an admin who turned them off): librbd's diff then asks the OSDs object by object, and
// the walk must find the same allocation (bs_rbd.cc).
TEST(RbdScsi, GetLbaStatusWithoutFastDiff)
{
	constexpr uint64_t kObj = 4 * MiB / 512;
	int rc = -1;
	const std::string out =
	    rbd_cli("create --size 32M --image-feature layering rbd/lbas-nofd", &rc);
	ASSERT_EQ(rc, 0) << out;
	const std::string info = rbd_cli("info rbd/lbas-nofd");
	ASSERT_EQ(info.find("fast-diff"), std::string::npos) << info;
	{
		auto gw = make(rbd_cfg("lbas-nofd"));
		ASSERT_TRUE(gw);
		auto b = pattern(4096, 60);
		ASSERT_EQ(rw(*gw, BsOp::Write, 3 * 4 * MiB + 8192, b.data(), b.size()), 0);
		ASSERT_EQ(rw(*gw, BsOp::Write, 6 * 4 * MiB, b.data(), b.size()), 0);
	}
	auto bs = make(rbd_cfg("lbas-nofd"));
	ASSERT_TRUE(bs);
	auto e = std::make_unique<Env>(std::move(bs), LuConfig{});
	ASSERT_TRUE(walked(e->lu->bs(), 1));
	using V = std::vector<LbaDesc>;
	EXPECT_EQ(lba_status(*e, 0), (V{{0, 3 * kObj, 1},
	                                {3 * kObj, kObj, 0},
	                                {4 * kObj, 2 * kObj, 1},
	                                {6 * kObj, kObj, 0},
	                                {7 * kObj, kObj, 1}}));
}

// done() runs on the loop that submitted, not on librbd's thread nor a shared one; a
// thread without a loop gets the backstore's completion thread.
TEST(RbdBackstore, CompletionsRunOnTheSubmittingLoop)
{
	auto cfg = rbd_cfg("loops", 16 * MiB, true);
	cfg.queue_depth = 8;
	auto bs = make(cfg);
	ASSERT_TRUE(bs);
	TestLoop l0("loop 0"), l1("loop 1");
	LoopBatch b0(&l0, 48, 16 * KiB, 0), b1(&l1, 48, 16 * KiB, 8 * MiB);
	ASSERT_TRUE(b0.submit(*bs));
	ASSERT_TRUE(b1.submit(*bs));
	ASSERT_TRUE(b0.t.wait(48));
	ASSERT_TRUE(b1.t.wait(48));
	b0.check_done("loop 0");
	b1.check_done("loop 1");
	b0.check_read(*bs);
	b1.check_read(*bs);
	RbdBsStats st;
	ASSERT_TRUE(rbd_bs_stats(*bs, &st));
	EXPECT_EQ(st.completed, 96u + 96u); // the writes, then each read back
	EXPECT_EQ(st.errors, 0u);
	EXPECT_EQ(st.inflight, 0u);
	EXPECT_GT(st.busy_ns, 0u);
}

// A loop stopped while its requests are in librbd: they complete on its thread before it
// ends; the backstore serves on.
TEST(RbdBackstore, LoopStoppedUnderIo)
{
	auto cfg = rbd_cfg("loopstop", 16 * MiB, true);
	cfg.queue_depth = 4;
	auto bs = make(cfg);
	ASSERT_TRUE(bs);
	auto l0 = std::make_unique<TestLoop>("loop 0");
	LoopBatch b0(l0.get(), 64, 64 * KiB, 0);
	ASSERT_TRUE(b0.submit(*bs));
	l0->stop();
	{
		std::lock_guard g(b0.t.lock);
		EXPECT_EQ(b0.t.completed, 64u) << "the loop delivered its requests before it ended";
	}
	b0.check_done("loop 0");
	l0.reset();
	b0.check_read(*bs);
}

// Destroyed on one loop's thread while both loops have requests in librbd: every request
// completes once, on its own loop, before the destructor returns; the loops go on.
TEST(RbdBackstore, DestroyedOnOneOfTheLoops)
{
	auto cfg = rbd_cfg("loopdestroy", 16 * MiB, true);
	cfg.queue_depth = 4;
	auto bs = make(cfg);
	ASSERT_TRUE(bs);
	TestLoop l0("loop 0"), l1("loop 1");
	LoopBatch b0(&l0, 32, 64 * KiB, 0), b1(&l1, 32, 64 * KiB, 8 * MiB);
	ASSERT_TRUE(l0.run([&] {
		for (Req &r : b0.reqs)
			bs->submit(&r.io);
		EXPECT_TRUE(b1.submit(*bs));
		bs.reset();
	}));
	EXPECT_FALSE(bs);
	EXPECT_EQ(b0.t.completed + b1.t.completed, 64u);
	b0.check_done("loop 0");
	b1.check_done("loop 1");
	size_t w0 = 1, w1 = 1;
	ASSERT_TRUE(l0.run([&] { w0 = l0.watched(); }));
	ASSERT_TRUE(l1.run([&] { w1 = l1.watched(); }));
	EXPECT_EQ(w0, 0u) << "the queue's eventfd is no longer watched";
	EXPECT_EQ(w1, 0u);
	auto again = make(rbd_cfg("loopdestroy"));
	ASSERT_TRUE(again);
	b0.check_read(*again);
	b1.check_read(*again);
}

} // namespace
} // namespace ulp::scsi::bs_test
