// SPDX-License-Identifier: MIT
// The file backstore on real files, and the block backstore on a loop device (where one can
// be made), both through io_uring: data integrity against a reference copy with random
// offsets, lengths and iovecs; the queue depth and its FIFO under many threads; thin
// provisioning (holes, unmap); FUA and flush; read-only; bad paths; and the
// O_DIRECT/buffered choice. The shared fixtures are in backstore_env.h.
#include "tests/scsi/backstore_env.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace ulp::scsi
{
namespace
{

using namespace bs_test;

// ---------------------------------------------------------------------------------------
// file

TEST_F(FileBackstore, CreatesExtendsAndSizes)
{
	const std::string p = dir_.file("a.img");
	{
		auto bs = make(file_cfg(p, 4 * MiB));
		ASSERT_TRUE(bs);
		EXPECT_EQ(bs->kind(), "file");
		EXPECT_EQ(bs->size(), 4 * MiB);
		EXPECT_TRUE(bs->write_cache());
	}
	struct stat st;
	ASSERT_EQ(stat(p.c_str(), &st), 0);
	EXPECT_EQ(st.st_size, static_cast<off_t>(4 * MiB)) << "created at size";
	{
		auto bs = make(file_cfg(p, 2 * MiB)); // smaller: uses 2 MiB, keeps the file
		ASSERT_TRUE(bs);
		EXPECT_EQ(bs->size(), 2 * MiB);
	}
	ASSERT_EQ(stat(p.c_str(), &st), 0);
	EXPECT_EQ(st.st_size, static_cast<off_t>(4 * MiB)) << "a longer file is never shortened";
	ASSERT_EQ(truncate(p.c_str(), 3 * MiB + 700), 0);
	{
		auto bs = make(file_cfg(p, 0)); // the file's size, in whole blocks
		ASSERT_TRUE(bs);
		EXPECT_EQ(bs->size(), 3 * MiB + 512);
	}
	{
		auto bs = make(file_cfg(p, 8 * MiB)); // larger: extended
		ASSERT_TRUE(bs);
		EXPECT_EQ(bs->size(), 8 * MiB);
	}
	ASSERT_EQ(stat(p.c_str(), &st), 0);
	EXPECT_EQ(st.st_size, static_cast<off_t>(8 * MiB));
}

TEST_F(FileBackstore, RefusesBadPaths)
{
	struct Case {
		BackstoreConfig cfg;
		int err;
	};
	BackstoreConfig ro_missing = file_cfg(dir_.file("none"), MiB);
	ro_missing.read_only = true;
	BackstoreConfig blk_on_file = file_cfg(dir_.file("f"), MiB);
	ASSERT_TRUE(make(blk_on_file)); // creates it
	blk_on_file.kind = "block";
	const std::string d = dir_.file("d");
	ASSERT_EQ(mkdir(d.c_str(), 0755), 0);
	BackstoreConfig empty = file_cfg(dir_.file("empty"), 0);
	ASSERT_EQ(close(open(empty.path.c_str(), O_CREAT | O_WRONLY, 0644)), 0);
	const Case cases[] = {
	    {file_cfg(dir_.file("none"), 0), -ENOENT}, // size 0: not created
	    {ro_missing, -ENOENT},
	    {blk_on_file, -ENOTBLK},
	    {file_cfg(d, MiB), -EISDIR},
	    {empty, -EINVAL},
	    {file_cfg(dir_.file("no/such/dir"), MiB), -ENOENT},
	};
	for (const Case &k : cases) {
		int err = 0;
		std::string why;
		EXPECT_FALSE(make_backstore(k.cfg, &err, &why)) << k.cfg.path;
		EXPECT_EQ(err, k.err) << why;
		EXPECT_NE(why.find(k.cfg.path), std::string::npos) << "names the path: " << why;
	}
}

TEST_F(FileBackstore, RandomIntegrity)
{
	auto bs = make(file_cfg(dir_.file("i.img"), 8 * MiB));
	ASSERT_TRUE(bs);
	integrity(*bs, 8 * MiB, 500, 2, false);
	FileBsStats s = stats_of(*bs);
	EXPECT_GT(s.buffered_rw, 0u);
	if (s.direct) {
		EXPECT_GT(s.direct_rw, 0u);
	}
	refuses_bad_requests(*bs);
}

TEST_F(FileBackstore, RandomIntegrityBufferedOnlyWithoutWriteCache)
{
	BackstoreConfig c = file_cfg(dir_.file("b.img"), 4 * MiB);
	c.direct = false;
	c.write_cache = false; // every write RWF_DSYNC, fallocate followed by fdatasync
	auto bs = make(c);
	ASSERT_TRUE(bs);
	EXPECT_FALSE(bs->write_cache());
	integrity(*bs, 4 * MiB, 200, 3, false);
	FileBsStats s = stats_of(*bs);
	EXPECT_FALSE(s.direct);
	EXPECT_EQ(s.direct_rw, 0u);
}

// Aligned requests go to the O_DIRECT descriptor, anything unaligned (offset, length,
// buffer address, or one iovec's length) to the buffered one, and both see one file.
TEST_F(FileBackstore, DirectForAlignedBufferedForUnaligned)
{
	auto bs = make(file_cfg(dir_.file("d.img"), 4 * MiB));
	ASSERT_TRUE(bs);
	FileBsStats s0 = stats_of(*bs);
	if (!s0.direct)
		GTEST_SKIP() << "/var/tmp has no O_DIRECT here: every request is buffered";
	ASSERT_GE(s0.dio_off_align, 512u);
	ASSERT_LE(s0.dio_off_align, 4096u);
	ASSERT_LE(s0.dio_mem_align, 4096u);
	AlignedBuf a(64 * KiB), b(64 * KiB + 4096);
	for (size_t k = 0; k < a.size(); k++)
		a.data()[k] = static_cast<uint8_t>(k * 7 + 1);
	const std::vector<uint8_t> orig(a.data(), a.data() + a.size());

	auto delta = [&](auto fn, uint64_t want_direct, uint64_t want_buffered) {
		FileBsStats before = stats_of(*bs);
		fn();
		FileBsStats after = stats_of(*bs);
		EXPECT_EQ(after.direct_rw - before.direct_rw, want_direct);
		// Through the page cache: by the ring, or a read it held copied in submit().
		EXPECT_EQ(after.buffered_rw + after.cached_reads - before.buffered_rw -
		              before.cached_reads,
		          want_buffered);
	};
	// Aligned write and read, two iovecs.
	delta(
	    [&] {
		    EXPECT_EQ(run(*bs, BsOp::Write, 64 * KiB, 64 * KiB,
		                  {{a.data(), 32 * KiB}, {a.data() + 32 * KiB, 32 * KiB}}),
		              0);
	    },
	    1, 0);
	delta([&] { EXPECT_EQ(rw(*bs, BsOp::Read, 64 * KiB, b.data(), 64 * KiB), 0); }, 1, 0);
	EXPECT_EQ(std::memcmp(a.data(), b.data(), 64 * KiB), 0);
	// Unaligned buffer: the data written directly is read through the page cache.
	delta([&] { EXPECT_EQ(rw(*bs, BsOp::Read, 64 * KiB, b.data() + 1, 64 * KiB), 0); }, 0, 1);
	EXPECT_EQ(std::memcmp(a.data(), b.data() + 1, 64 * KiB), 0);
	// Unaligned offset and length.
	delta([&] { EXPECT_EQ(rw(*bs, BsOp::Write, 100, a.data(), 1000), 0); }, 0, 1);
	// An iovec whose length breaks the alignment, in an otherwise aligned request.
	delta(
	    [&] {
		    EXPECT_EQ(
		        run(*bs, BsOp::Read, 0, 8192, {{b.data(), 100}, {b.data() + 4096, 8092}}),
		        0);
	    },
	    0, 1);
	EXPECT_EQ(std::memcmp(b.data() + 4096, a.data(), 1000), 0) << "file [100, 1100)";
	// Buffered write, direct read of the same range: the page cache is written first.
	for (size_t k = 0; k < 4096; k++)
		b.data()[1 + k] = static_cast<uint8_t>(k ^ 0x5a);
	delta([&] { EXPECT_EQ(rw(*bs, BsOp::Write, 8192, b.data() + 1, 4096), 0); }, 0, 1);
	delta([&] { EXPECT_EQ(rw(*bs, BsOp::Read, 8192, a.data(), 4096), 0); }, 1, 0);
	EXPECT_EQ(std::memcmp(a.data(), b.data() + 1, 4096), 0);

	// direct = false: never O_DIRECT.
	BackstoreConfig c = file_cfg(dir_.file("d.img"), 4 * MiB);
	c.direct = false;
	auto nd = make(c);
	ASSERT_TRUE(nd);
	EXPECT_EQ(rw(*nd, BsOp::Read, 64 * KiB, a.data(), 64 * KiB), 0);
	EXPECT_EQ(std::memcmp(a.data(), orig.data(), orig.size()), 0);
	EXPECT_EQ(stats_of(*nd).direct_rw, 0u);
	EXPECT_EQ(stats_of(*nd).buffered_rw + stats_of(*nd).cached_reads, 1u);
}

// A buffered read that the page cache holds is done inside submit(), on the caller's
// thread, without the ring; one at end of file inside the size, one out of range and one
// that O_DIRECT takes still go to the ring, with the ring's results.
TEST_F(FileBackstore, CachedReadIsDoneInsideSubmit)
{
	const std::string p = dir_.file("c.img");
	BackstoreConfig c = file_cfg(p, 1 * MiB);
	c.direct = false;
	auto bs = make(c);
	ASSERT_TRUE(bs);
	AlignedBuf a(64 * KiB), b(64 * KiB);
	{
		const int fd = open(p.c_str(), O_RDONLY | O_CLOEXEC);
		ASSERT_GE(fd, 0);
		iovec one = {b.data(), 512};
		const bool nowait = preadv2(fd, &one, 1, 0, RWF_NOWAIT) >= 0 || errno != EOPNOTSUPP;
		close(fd);
		if (!nowait)
			GTEST_SKIP()
			    << "this file system refuses RWF_NOWAIT: every read takes the ring";
	}
	for (size_t k = 0; k < a.size(); k++)
		a.data()[k] = static_cast<uint8_t>(k * 13 + 5);
	ASSERT_EQ(rw(*bs, BsOp::Write, 128 * KiB, a.data(), 64 * KiB), 0);

	struct Seen {
		std::atomic<int> err{1};
		std::atomic<bool> inside{false}; // done() ran before submit() returned
	} seen;
	BsIo io;
	iovec v[2] = {{b.data(), 4096}, {b.data() + 4096, 60 * KiB}}; // two iovecs, any split
	io.op = BsOp::Read;
	io.offset = 128 * KiB;
	io.length = 64 * KiB;
	io.iov = v;
	io.priv = &seen;
	io.done = [](BsIo *x, int err) {
		auto *s = static_cast<Seen *>(x->priv);
		s->inside.store(true);
		s->err.store(err);
	};
	const uint64_t before = stats_of(*bs).cached_reads;
	bs->submit(&io);
	EXPECT_TRUE(seen.inside.load()) << "a read of cached pages waited for the ring";
	EXPECT_EQ(seen.err.load(), 0);
	EXPECT_EQ(stats_of(*bs).cached_reads, before + 1);
	EXPECT_EQ(std::memcmp(a.data(), b.data(), 64 * KiB), 0);

	// Past the end of the size: -ERANGE as before, not a short read.
	EXPECT_EQ(rw(*bs, BsOp::Read, 1 * MiB, b.data(), 4096), -ERANGE);
	// The file shorter than the size: the ring zero-fills what lies past its end.
	ASSERT_EQ(truncate(p.c_str(), 512 * KiB), 0);
	std::memset(b.data(), 0xee, 8192);
	const FileBsStats s0 = stats_of(*bs);
	EXPECT_EQ(rw(*bs, BsOp::Read, 512 * KiB - 4096, b.data(), 8192), 0);
	const FileBsStats s1 = stats_of(*bs);
	EXPECT_EQ(s1.cached_reads, s0.cached_reads) << "a short read is the ring's to finish";
	EXPECT_EQ(s1.eof_fill, s0.eof_fill + 1);
	EXPECT_TRUE(std::all_of(b.data(), b.data() + 8192, [](uint8_t x) { return x == 0; }));
}

// More requests than queue_depth from several threads at once: all accepted without
// blocking, all complete exactly once on the completion thread, data intact.
TEST_F(FileBackstore, ManyInFlightFromThreads)
{
	BackstoreConfig c = file_cfg(dir_.file("q.img"), 8 * MiB);
	c.queue_depth = 4;
	auto bs = make(c);
	ASSERT_TRUE(bs);
	constexpr unsigned kThreads = 4, kPer = 64;
	constexpr size_t kLen = 8 * KiB;
	Tracker t;
	std::deque<Req> reqs(kThreads * kPer);
	AlignedBuf data(kThreads * kPer * kLen);
	for (size_t k = 0; k < data.size(); k++)
		data.data()[k] = static_cast<uint8_t>(k % 251);
	std::atomic<uint64_t> submitted{0}, max_pending{0};
	auto submitter = [&](unsigned id) {
		for (unsigned i = 0; i < kPer; i++) {
			unsigned n = id * kPer + i;
			Req &r = reqs[n];
			// Half aligned, half split at an odd byte (the buffered path).
			uint8_t *p = data.data() + n * kLen;
			size_t cut = i % 2 ? kLen / 2 - 1 : kLen / 2;
			r.iov = {{p, cut}, {p + cut, kLen - cut}};
			r.set(BsOp::Write, n * kLen, kLen, &t, i % 8 == 0);
			bs->submit(&r.io);
			uint64_t s = ++submitted;
			uint64_t done;
			{
				std::lock_guard g(t.lock);
				done = t.completed;
			}
			uint64_t pend = s - std::min(s, done), m = max_pending.load();
			while (pend > m && !max_pending.compare_exchange_weak(m, pend))
				;
		}
	};
	std::vector<std::thread> ts;
	for (unsigned i = 0; i < kThreads; i++)
		ts.emplace_back(submitter, i);
	for (auto &th : ts)
		th.join();
	ASSERT_TRUE(t.wait(kThreads * kPer));
	for (Req &r : reqs) {
		EXPECT_EQ(r.calls.load(), 1);
		EXPECT_EQ(r.err, 0);
		EXPECT_NE(r.on, std::this_thread::get_id());
	}
	EXPECT_GT(max_pending.load(), c.queue_depth) << "submit() must queue, not block";
	AlignedBuf back(data.size());
	ASSERT_EQ(rw(*bs, BsOp::Read, 0, back.data(), back.size()), 0);
	EXPECT_EQ(std::memcmp(back.data(), data.data(), data.size()), 0);
}

// With a queue depth of 1 requests execute strictly in submission order: 64 writes of
// different bytes to one block complete in order and the last one wins.
TEST_F(FileBackstore, FifoOrderBeyondQueueDepth)
{
	BackstoreConfig c = file_cfg(dir_.file("o.img"), MiB);
	c.queue_depth = 1;
	auto bs = make(c);
	ASSERT_TRUE(bs);
	constexpr unsigned N = 64;
	std::deque<Req> w(N);
	std::vector<std::vector<uint8_t>> bufs(N);
	Tracker t;
	for (unsigned i = 0; i < N; i++) {
		bufs[i].assign(4096, static_cast<uint8_t>(i + 1));
		w[i].iov = {{bufs[i].data(), 4096}};
		w[i].set(BsOp::Write, 4096, 4096, &t);
	}
	for (unsigned i = 0; i < N; i++)
		bs->submit(&w[i].io);
	ASSERT_TRUE(t.wait(N));
	for (unsigned i = 0; i < N; i++)
		EXPECT_EQ(w[i].err, 0);
	ASSERT_EQ(t.order.size(), N);
	for (unsigned i = 0; i < N; i++)
		EXPECT_EQ(t.order[i], &w[i].io) << "completion " << i;
	uint8_t b[4096];
	ASSERT_EQ(rw(*bs, BsOp::Read, 4096, b, sizeof b), 0);
	EXPECT_EQ(b[0], N);
	EXPECT_EQ(b[4095], N);
}

// Threads that submit and exit at once, leaving their requests in flight (io_uring ties
// a request to its submitting thread; some kernels cancel what an exiting thread leaves,
// and the backstore resubmits it): every request still completes, once, with its data.
TEST_F(FileBackstore, SubmitterThreadsExitEarly)
{
	BackstoreConfig c = file_cfg(dir_.file("x.img"), 4 * MiB);
	c.queue_depth = 8;
	auto bs = make(c);
	ASSERT_TRUE(bs);
	std::vector<uint8_t> pat(4 * MiB);
	for (size_t k = 0; k < pat.size(); k++)
		pat[k] = static_cast<uint8_t>(k * 13 + 5);
	ASSERT_EQ(rw(*bs, BsOp::Write, 0, pat.data(), pat.size()), 0);
	constexpr unsigned kThreads = 8, kPer = 16;
	constexpr size_t kLen = 16 * KiB;
	Tracker t;
	std::deque<Req> reqs(kThreads * kPer);
	std::vector<uint8_t> back(kThreads * kPer * kLen);
	std::vector<std::thread> ts;
	for (unsigned id = 0; id < kThreads; id++) {
		ts.emplace_back([&, id] {
			for (unsigned i = 0; i < kPer; i++) {
				unsigned n = id * kPer + i;
				Req &r = reqs[n];
				if (i % 4 == 3) {
					// A flush goes to io_uring's worker threads, which belong
					// to the submitting thread: the likeliest to be cancelled.
					r.set(BsOp::Flush, 0, 0, &t);
				} else if (i % 4 == 2) {
					// Rewrite the same bytes, durable (also worker-bound).
					r.iov = {{pat.data() + n * kLen, kLen}};
					r.set(BsOp::Write, n * kLen, kLen, &t, true);
				} else {
					r.iov = {{back.data() + n * kLen, kLen}};
					r.set(BsOp::Read, n * kLen, kLen, &t);
				}
				bs->submit(&r.io);
			}
		});
	}
	for (auto &th : ts)
		th.join(); // gone, with their requests in flight
	ASSERT_TRUE(t.wait(kThreads * kPer));
	for (Req &r : reqs) {
		EXPECT_EQ(r.calls.load(), 1);
		EXPECT_EQ(r.err, 0);
	}
	for (unsigned n = 0; n < kThreads * kPer; n++) {
		if (n % 4 < 2) {
			ASSERT_EQ(std::memcmp(back.data() + n * kLen, pat.data() + n * kLen, kLen),
			          0)
			    << "read " << n;
		}
	}
	std::vector<uint8_t> all(pat.size());
	ASSERT_EQ(rw(*bs, BsOp::Read, 0, all.data(), all.size()), 0);
	EXPECT_EQ(all, pat);
	std::printf("resubmitted after cancellation: %llu\n",
	            static_cast<unsigned long long>(stats_of(*bs).retried));
}

// Destroying a backstore with requests queued and in flight completes every one of them
// before the destructor returns.
TEST_F(FileBackstore, DestructionWaitsForRequests)
{
	BackstoreConfig c = file_cfg(dir_.file("z.img"), 4 * MiB);
	c.queue_depth = 2;
	auto bs = make(c);
	ASSERT_TRUE(bs);
	constexpr unsigned N = 100;
	Tracker t;
	std::deque<Req> reqs(N);
	std::vector<uint8_t> b(N * 4096, 0x11);
	for (unsigned i = 0; i < N; i++) {
		reqs[i].iov = {{b.data() + i * 4096, 4096}};
		reqs[i].set(i % 2 ? BsOp::Write : BsOp::Read, i * 4096, 4096, &t, i % 3 == 0);
		bs->submit(&reqs[i].io);
	}
	auto t0 = std::chrono::steady_clock::now();
	bs.reset();
	EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
	{
		std::lock_guard g(t.lock);
		EXPECT_EQ(t.completed, N) << "all complete before the destructor returns";
	}
	for (Req &r : reqs) {
		EXPECT_EQ(r.calls.load(), 1);
		EXPECT_EQ(r.err, 0);
	}
}

// Unwritten ranges of a sparse file read as zeros and are holes to extent(); a write maps
// its blocks; a punched range reads zeros and is a hole again.
TEST_F(FileBackstore, ThinHolesAndUnmap)
{
	auto bs = make(file_cfg(dir_.file("h.img"), 4 * MiB));
	ASSERT_TRUE(bs);
	BsExtent e;
	ASSERT_EQ(bs->extent(0, &e), 0);
	EXPECT_FALSE(e.mapped);
	EXPECT_EQ(e.length, 4 * MiB);
	std::vector<uint8_t> b(MiB, 0xcc);
	ASSERT_EQ(rw(*bs, BsOp::Read, MiB, b.data(), b.size()), 0);
	EXPECT_TRUE(all_zero(b.data(), b.size()));

	if (!bs->can_unmap())
		GTEST_SKIP() << "the file system under /var/tmp cannot punch holes";
	std::fill(b.begin(), b.end(), 0x6b);
	ASSERT_EQ(rw(*bs, BsOp::Write, MiB, b.data(), b.size()), 0); // [1, 2) MiB
	ASSERT_EQ(bs->extent(0, &e), 0);
	EXPECT_FALSE(e.mapped);
	EXPECT_EQ(e.length, MiB);
	ASSERT_EQ(bs->extent(MiB, &e), 0);
	EXPECT_TRUE(e.mapped);
	EXPECT_EQ(e.length, MiB);

	ASSERT_EQ(run(*bs, BsOp::Unmap, MiB + 256 * KiB, 256 * KiB), 0);
	ASSERT_EQ(bs->extent(MiB, &e), 0);
	EXPECT_TRUE(e.mapped);
	EXPECT_EQ(e.length, 256 * KiB);
	ASSERT_EQ(bs->extent(MiB + 256 * KiB, &e), 0);
	EXPECT_FALSE(e.mapped);
	EXPECT_EQ(e.length, 256 * KiB);
	ASSERT_EQ(bs->extent(MiB + 300 * KiB, &e), 0);
	EXPECT_FALSE(e.mapped);
	EXPECT_EQ(e.length, 212 * KiB);
	ASSERT_EQ(rw(*bs, BsOp::Read, MiB, b.data(), b.size()), 0);
	for (size_t k = 0; k < b.size(); k++) {
		bool zero = k >= 256 * KiB && k < 512 * KiB;
		ASSERT_EQ(b[k], zero ? 0 : 0x6b) << "at " << k;
	}
	// Unaligned unmap: the partial blocks are zeroed, the rest keeps its data.
	ASSERT_EQ(run(*bs, BsOp::Unmap, MiB + 100, 5000), 0);
	ASSERT_EQ(rw(*bs, BsOp::Read, MiB, b.data(), 8192), 0);
	for (size_t k = 0; k < 8192; k++)
		ASSERT_EQ(b[k], k >= 100 && k < 5100 ? 0 : 0x6b) << "at " << k;
	// WriteZeroes: zeros, the rest untouched.
	ASSERT_EQ(run(*bs, BsOp::WriteZeroes, MiB + 700 * KiB, 100 * KiB + 3), 0);
	ASSERT_EQ(rw(*bs, BsOp::Read, MiB + 512 * KiB, b.data(), 512 * KiB), 0);
	for (size_t k = 0; k < 512 * KiB; k++) {
		bool zero = k >= 188 * KiB && k < 288 * KiB + 3;
		ASSERT_EQ(b[k], zero ? 0 : 0x6b) << "at " << k;
	}
}

// More iovecs than one SQE may carry (IOV_MAX): the rest goes in further SQEs.
TEST_F(FileBackstore, MoreIovecsThanIovMax)
{
	auto bs = make(file_cfg(dir_.file("v.img"), 2 * MiB));
	ASSERT_TRUE(bs);
	std::vector<uint8_t> w(MiB), r(MiB, 0xff);
	for (size_t k = 0; k < w.size(); k++)
		w[k] = static_cast<uint8_t>(k * 31 + 7);
	std::vector<iovec> wv, rv;
	for (size_t at = 0; at < w.size(); at += 512) // 2048 iovecs
		wv.push_back({w.data() + at, 512});
	for (size_t at = 0; at < r.size(); at += 700) // 1498 iovecs, the last one short
		rv.push_back({r.data() + at, std::min<size_t>(700, r.size() - at)});
	ASSERT_EQ(run(*bs, BsOp::Write, 4096, w.size(), wv), 0);
	ASSERT_EQ(run(*bs, BsOp::Read, 4096, r.size(), rv), 0);
	EXPECT_EQ(r, w);
	EXPECT_GE(stats_of(*bs).short_resubmit, 2u);
}

TEST_F(FileBackstore, FuaWritesAndFlush)
{
	auto bs = make(file_cfg(dir_.file("f.img"), MiB));
	ASSERT_TRUE(bs);
	AlignedBuf a(8192);
	std::memset(a.data(), 0x99, a.size());
	EXPECT_EQ(rw(*bs, BsOp::Write, 0, a.data(), 8192, true), 0);       // direct + DSYNC
	EXPECT_EQ(rw(*bs, BsOp::Write, 8193, a.data() + 1, 100, true), 0); // buffered + DSYNC
	EXPECT_EQ(run(*bs, BsOp::Flush, 0, 0), 0);
	EXPECT_EQ(run(*bs, BsOp::Flush, 12345, 99), 0) << "Flush ignores its range";
	std::vector<uint8_t> b(8293);
	ASSERT_EQ(rw(*bs, BsOp::Read, 0, b.data(), b.size()), 0);
	EXPECT_TRUE(std::all_of(b.begin(), b.begin() + 8192, [](uint8_t c) { return c == 0x99; }));
	EXPECT_EQ(b[8192], 0);
	EXPECT_TRUE(std::all_of(b.begin() + 8193, b.end(), [](uint8_t c) { return c == 0x99; }));
}

TEST_F(FileBackstore, ReadOnlyRefusesWrites)
{
	const std::string p = dir_.file("r.img");
	{
		auto w = make(file_cfg(p, MiB));
		ASSERT_TRUE(w);
		uint8_t x = 0x31;
		ASSERT_EQ(rw(*w, BsOp::Write, 777, &x, 1), 0);
	}
	BackstoreConfig c = file_cfg(p, 0);
	c.read_only = true;
	auto bs = make(c);
	ASSERT_TRUE(bs);
	EXPECT_FALSE(bs->can_unmap());
	uint8_t b[1024] = {};
	EXPECT_EQ(rw(*bs, BsOp::Write, 0, b, sizeof b), -EROFS);
	EXPECT_EQ(rw(*bs, BsOp::Write, 0, b, sizeof b, true), -EROFS);
	EXPECT_EQ(run(*bs, BsOp::Unmap, 0, 4096), -EROFS);
	EXPECT_EQ(run(*bs, BsOp::WriteZeroes, 0, 4096), -EROFS);
	EXPECT_EQ(run(*bs, BsOp::Flush, 0, 0), 0);
	ASSERT_EQ(rw(*bs, BsOp::Read, 0, b, sizeof b), 0);
	EXPECT_EQ(b[777], 0x31);
	// Bigger than a read-only file: refused.
	c.size = 2 * MiB;
	int err = 0;
	std::string why;
	EXPECT_FALSE(make_backstore(c, &err, &why));
	EXPECT_EQ(err, -EINVAL) << why;
}

// A file shorter than the LU (truncated behind its back, or extended by someone else's
// reckoning): reads past its end inside size return zeros, on both paths.
TEST_F(FileBackstore, ReadPastEofInsideSizeIsZeros)
{
	const std::string p = dir_.file("e.img");
	auto bs = make(file_cfg(p, MiB));
	ASSERT_TRUE(bs);
	AlignedBuf a(MiB);
	std::memset(a.data(), 0x4e, a.size());
	ASSERT_EQ(rw(*bs, BsOp::Write, 0, a.data(), a.size()), 0);
	ASSERT_EQ(truncate(p.c_str(), 100 * KiB + 123), 0);
	for (bool aligned : {true, false}) {
		SCOPED_TRACE(aligned ? "aligned" : "unaligned");
		uint8_t *q = a.data() + (aligned ? 0 : 3);
		size_t len = 512 * KiB - (aligned ? 0 : 3);
		std::memset(q, 0xff, len);
		auto v = std::vector<iovec>{{q, 64 * KiB}, {q + 64 * KiB, len - 64 * KiB}};
		ASSERT_EQ(run(*bs, BsOp::Read, 0, len, v), 0);
		for (size_t k = 0; k < len; k++)
			ASSERT_EQ(q[k], k < 100 * KiB + 123 ? 0x4e : 0) << "at " << k;
	}
	// Both paths first read up to the end of file (short), then hit it (zero-fill).
	EXPECT_GE(stats_of(*bs).short_resubmit, 2u);
	EXPECT_GE(stats_of(*bs).eof_fill, 2u);
}

// tmpfs: no ZERO_RANGE (WriteZeroes falls back to a hole punch), O_DIRECT only on newer
// kernels. Everything must still work.
TEST(FileBackstoreTmpfs, IntegrityAndWriteZeroes)
{
	struct statfs sf;
	if (statfs("/dev/shm", &sf) != 0 || sf.f_type != 0x01021994 /* TMPFS_MAGIC */)
		GTEST_SKIP() << "/dev/shm is not tmpfs here";
	ScratchDir dir("/dev/shm");
	ASSERT_TRUE(dir.ok());
	auto bs = make(file_cfg(dir.file("t.img"), 2 * MiB));
	ASSERT_TRUE(bs);
	integrity(*bs, 2 * MiB, 200, 4, false);
	FileBsStats st = stats_of(*bs);
	std::printf("tmpfs: O_DIRECT %s (mem %u, offset %u), %llu direct, %llu buffered\n",
	            st.direct ? "on" : "off", st.dio_mem_align, st.dio_off_align,
	            static_cast<unsigned long long>(st.direct_rw),
	            static_cast<unsigned long long>(st.buffered_rw));
	std::vector<uint8_t> b(64 * KiB, 0x12);
	ASSERT_EQ(rw(*bs, BsOp::Write, 0, b.data(), b.size()), 0);
	ASSERT_EQ(run(*bs, BsOp::WriteZeroes, 4096, 8192), 0);
	ASSERT_EQ(rw(*bs, BsOp::Read, 0, b.data(), b.size()), 0);
	for (size_t k = 0; k < b.size(); k++)
		ASSERT_EQ(b[k], k >= 4096 && k < 12288 ? 0 : 0x12) << "at " << k;
}

// ---------------------------------------------------------------------------------------
// block, on a loop device over a file

// A loop device for the length of a test, detached after it.

TEST_F(BlockBackstore, SizeIntegrityAndExtent)
{
	auto bs = make(cfg());
	ASSERT_TRUE(bs);
	EXPECT_EQ(bs->kind(), "block");
	EXPECT_EQ(bs->size(), 16 * MiB) << "BLKGETSIZE64";
	integrity(*bs, 16 * MiB, 300, 5, false);
	FileBsStats s = stats_of(*bs);
	EXPECT_GT(s.buffered_rw, 0u);
	if (s.direct) {
		EXPECT_GT(s.direct_rw, 0u);
	}
	BsExtent e;
	ASSERT_EQ(bs->extent(4096, &e), 0);
	EXPECT_TRUE(e.mapped) << "devices report everything mapped";
	EXPECT_EQ(e.length, 16 * MiB - 4096);
	refuses_bad_requests(*bs);
	EXPECT_EQ(run(*bs, BsOp::Flush, 0, 0), 0);

	int err = 0;
	std::string why;
	EXPECT_FALSE(make_backstore(cfg(), &err, &why)) << "claimed by the first one";
	EXPECT_EQ(err, -EBUSY);
	EXPECT_NE(why.find("claimed"), std::string::npos) << why;
	bs.reset();
	auto small = make(cfg(8 * MiB));
	ASSERT_TRUE(small);
	EXPECT_EQ(small->size(), 8 * MiB);
	small.reset();
	EXPECT_FALSE(make_backstore(cfg(32 * MiB), &err, &why)) << "larger than the device";
	EXPECT_EQ(err, -EINVAL);
	EXPECT_NE(why.find("exceeds"), std::string::npos) << why;
}

TEST_F(BlockBackstore, UnmapAndWriteZeroesReadZeros)
{
	auto bs = make(cfg());
	ASSERT_TRUE(bs);
	std::vector<uint8_t> b(MiB, 0x2d);
	ASSERT_EQ(rw(*bs, BsOp::Write, 0, b.data(), b.size()), 0);
	ASSERT_EQ(run(*bs, BsOp::WriteZeroes, 64 * KiB, 64 * KiB), 0);
	EXPECT_EQ(run(*bs, BsOp::Unmap, 512 * KiB, 128 * KiB), bs->can_unmap() ? 0 : -EOPNOTSUPP);
	ASSERT_EQ(rw(*bs, BsOp::Read, 0, b.data(), b.size()), 0);
	for (size_t k = 0; k < b.size(); k++) {
		bool zero = (k >= 64 * KiB && k < 128 * KiB) ||
		            (bs->can_unmap() && k >= 512 * KiB && k < 640 * KiB);
		ASSERT_EQ(b[k], zero ? 0 : 0x2d) << "at " << k;
	}
	if (!bs->can_unmap())
		GTEST_SKIP()
		    << "the loop device cannot discard here (Unmap refused, as it must be)";
}

TEST_F(BlockBackstore, ManyInFlightAndReadOnly)
{
	BackstoreConfig c = cfg();
	c.queue_depth = 4;
	auto bs = make(c);
	ASSERT_TRUE(bs);
	constexpr unsigned N = 64;
	Tracker t;
	std::deque<Req> reqs(N);
	AlignedBuf data(N * 4096);
	for (size_t k = 0; k < data.size(); k++)
		data.data()[k] = static_cast<uint8_t>(k % 239);
	for (unsigned i = 0; i < N; i++) {
		reqs[i].iov = {{data.data() + i * 4096, 4096}};
		reqs[i].set(BsOp::Write, i * 4096, 4096, &t);
		bs->submit(&reqs[i].io);
	}
	ASSERT_TRUE(t.wait(N));
	for (Req &r : reqs)
		EXPECT_EQ(r.err, 0);
	bs.reset();
	c.read_only = true;
	auto ro = make(c);
	ASSERT_TRUE(ro);
	AlignedBuf back(N * 4096);
	ASSERT_EQ(rw(*ro, BsOp::Read, 0, back.data(), back.size()), 0);
	EXPECT_EQ(std::memcmp(back.data(), data.data(), data.size()), 0);
	EXPECT_EQ(rw(*ro, BsOp::Write, 0, back.data(), 4096), -EROFS);
	EXPECT_EQ(run(*ro, BsOp::Unmap, 0, 4096), -EROFS);
}

} // namespace
} // namespace ulp::scsi
