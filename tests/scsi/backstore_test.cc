// SPDX-License-Identifier: MIT
// Backstores on memory (null, ram) and the size of every kind at run time: data integrity
// against a reference copy with random offsets, lengths and iovecs; thin provisioning
// (unwritten and unmapped ranges read as zeros, extent() reports them); allocation failure;
// bad configs and requests; resize while I/O runs. The file and block backstores are in
// backstore_file_test.cc.
#include "core/sanitizer.h"
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
// Configuration

TEST(BackstoreConfig, RefusesBadConfigsWithReasons)
{
	struct Case {
		BackstoreConfig cfg;
		const char *says; // a word the message must contain
	};
	auto c = [](const char *kind, uint64_t size, uint32_t bs, const char *path) {
		BackstoreConfig x;
		x.kind = kind;
		x.size = size;
		x.block_size = bs;
		x.path = path;
		return x;
	};
	BackstoreConfig qd0 = c("ram", MiB, 512, "");
	qd0.queue_depth = 0;
	const Case cases[] = {
	    {c("tape", MiB, 512, ""), "unknown"},
	    {c("", MiB, 512, ""), "unknown"},
	    {c("ram", 0, 512, ""), "size"},
	    {c("null", 0, 512, ""), "size"},
	    {c("ram", MiB, 1000, ""), "power of two"},
	    {c("ram", MiB, 256, ""), "block_size"},
	    {c("ram", MiB, 131072, ""), "block_size"},
	    {c("null", MiB + 100, 512, ""), "multiple"},
	    {c("ram", 8192, 4096 * 4, ""), "multiple"},
	    {c("file", MiB, 512, ""), "path"},
	    {c("block", 0, 512, ""), "path"},
	    {c("file", MiB + 512, 4096, "/var/tmp/x"), "multiple"},
	    {qd0, "queue_depth"},
	};
	for (const Case &k : cases) {
		int err = 0;
		std::string why;
		auto bs = make_backstore(k.cfg, &err, &why);
		EXPECT_FALSE(bs) << k.cfg.kind << " " << k.says;
		EXPECT_EQ(err, -EINVAL) << why;
		EXPECT_NE(why.find(k.says), std::string::npos) << "message: " << why;
	}
	// null err/why pointers are allowed.
	EXPECT_FALSE(make_backstore(c("tape", MiB, 512, ""), nullptr, nullptr));
}

// This program does not link the rbd backstore (ulp_scsi_rbd) nor turn it on: kind rbd is
// refused by name, with an error of its own, not taken for an unknown kind.
TEST(BackstoreConfig, RbdRefusedWhereNotBuiltIn)
{
	BackstoreConfig cfg;
	cfg.kind = "rbd";
	cfg.rbd.pool = "rbd";
	cfg.rbd.image = "x";
	int err = 0;
	std::string why;
	EXPECT_FALSE(make_backstore(cfg, &err, &why));
	EXPECT_EQ(err, -EPROTONOSUPPORT) << why;
	EXPECT_NE(why.find("without the rbd backstore"), std::string::npos) << why;
}

// ---------------------------------------------------------------------------------------
// null

TEST(NullBackstore, ReadsZerosDiscardsWritesCompletesInline)
{
	auto bs = make(mem_cfg("null", 64 * MiB));
	ASSERT_TRUE(bs);
	EXPECT_EQ(bs->kind(), "null");
	EXPECT_EQ(bs->size(), 64 * MiB);
	std::vector<uint8_t> b(8192, 0x5a);
	Tracker t;
	Req r;
	r.iov = {{b.data(), 4096}, {b.data() + 4096, 4096}};
	r.set(BsOp::Read, 4096, 8192, &t);
	bs->submit(&r.io);
	EXPECT_EQ(r.calls.load(), 1) << "null completes inside submit()";
	EXPECT_EQ(r.on, std::this_thread::get_id());
	EXPECT_EQ(r.err, 0);
	EXPECT_TRUE(all_zero(b.data(), b.size()));
	std::fill(b.begin(), b.end(), 0x77);
	EXPECT_EQ(rw(*bs, BsOp::Write, 0, b.data(), b.size(), true), 0);
	EXPECT_EQ(rw(*bs, BsOp::Read, 0, b.data(), b.size()), 0);
	EXPECT_TRUE(all_zero(b.data(), b.size())) << "writes are discarded";
	EXPECT_EQ(run(*bs, BsOp::Flush, 0, 0), 0);
	EXPECT_EQ(run(*bs, BsOp::Unmap, 0, MiB), 0);
	EXPECT_EQ(run(*bs, BsOp::WriteZeroes, MiB, MiB), 0);
	BsExtent e;
	ASSERT_EQ(bs->extent(MiB, &e), 0);
	EXPECT_TRUE(e.mapped);
	EXPECT_EQ(e.length, 63 * MiB);
	refuses_bad_requests(*bs);
}

// ---------------------------------------------------------------------------------------
// ram

TEST(RamBackstore, RandomIntegrity)
{
	auto bs = make(mem_cfg("ram", 4 * MiB));
	ASSERT_TRUE(bs);
	EXPECT_TRUE(bs->can_unmap());
	integrity(*bs, 4 * MiB, 1500, 1, false);
}

TEST(RamBackstore, CompletesInlineAndRefusesBadRequests)
{
	auto bs = make(mem_cfg("ram", MiB));
	ASSERT_TRUE(bs);
	uint8_t b[512];
	Tracker t;
	Req r;
	r.iov = {{b, sizeof b}};
	r.set(BsOp::Write, 0, sizeof b, &t);
	bs->submit(&r.io);
	EXPECT_EQ(r.calls.load(), 1);
	EXPECT_EQ(r.err, 0);
	refuses_bad_requests(*bs);
}

// Unwritten chunks read as zeros and are reported unmapped, without being allocated by
// the read; a write maps exactly the 64 KiB chunk it touches.
TEST(RamBackstore, ThinUnwrittenIsUnmappedAndZero)
{
	constexpr uint64_t C = 64 * KiB;
	auto bs = make(mem_cfg("ram", 16 * C + 4096)); // a partial last chunk
	ASSERT_TRUE(bs);
	BsExtent e;
	ASSERT_EQ(bs->extent(0, &e), 0);
	EXPECT_FALSE(e.mapped);
	EXPECT_EQ(e.length, bs->size());
	std::vector<uint8_t> b(bs->size(), 0xee);
	ASSERT_EQ(rw(*bs, BsOp::Read, 0, b.data(), b.size()), 0);
	EXPECT_TRUE(all_zero(b.data(), b.size()));
	ASSERT_EQ(bs->extent(0, &e), 0);
	EXPECT_FALSE(e.mapped) << "a read must not allocate";

	uint8_t one = 0x42;
	ASSERT_EQ(rw(*bs, BsOp::Write, 3 * C + 100, &one, 1), 0);
	ASSERT_EQ(bs->extent(0, &e), 0);
	EXPECT_FALSE(e.mapped);
	EXPECT_EQ(e.length, 3 * C);
	ASSERT_EQ(bs->extent(3 * C + 7, &e), 0);
	EXPECT_TRUE(e.mapped);
	EXPECT_EQ(e.length, C - 7);
	ASSERT_EQ(bs->extent(4 * C, &e), 0);
	EXPECT_FALSE(e.mapped);
	EXPECT_EQ(e.length, bs->size() - 4 * C);
	// The partial last chunk: mapped up to size(), not past it.
	ASSERT_EQ(rw(*bs, BsOp::Write, 16 * C, &one, 1), 0);
	ASSERT_EQ(bs->extent(16 * C + 1, &e), 0);
	EXPECT_TRUE(e.mapped);
	EXPECT_EQ(e.length, 4095u);
	ASSERT_EQ(rw(*bs, BsOp::Read, 0, b.data(), b.size()), 0);
	EXPECT_EQ(b[3 * C + 100], 0x42);
	EXPECT_EQ(b[16 * C], 0x42);
	b[3 * C + 100] = b[16 * C] = 0;
	EXPECT_TRUE(all_zero(b.data(), b.size()));
}

// Unmap and WriteZeroes free the chunks they cover entirely and zero the rest.
TEST(RamBackstore, UnmapFreesWholeChunksZeroesPartial)
{
	constexpr uint64_t C = 64 * KiB;
	for (BsOp op : {BsOp::Unmap, BsOp::WriteZeroes}) {
		SCOPED_TRACE(bs_op_str(op));
		auto bs = make(mem_cfg("ram", 8 * C));
		ASSERT_TRUE(bs);
		std::vector<uint8_t> b(8 * C, 0x3c);
		ASSERT_EQ(rw(*bs, BsOp::Write, 0, b.data(), b.size()), 0);
		ASSERT_EQ(run(*bs, op, C + 100, 3 * C), 0); // [C+100, 4C+100)
		BsExtent e;
		ASSERT_EQ(bs->extent(0, &e), 0);
		EXPECT_TRUE(e.mapped);
		EXPECT_EQ(e.length, 2 * C) << "chunk 1 is only partly covered: kept";
		ASSERT_EQ(bs->extent(2 * C, &e), 0);
		EXPECT_FALSE(e.mapped);
		EXPECT_EQ(e.length, 2 * C) << "chunks 2 and 3 are freed";
		ASSERT_EQ(bs->extent(4 * C, &e), 0);
		EXPECT_TRUE(e.mapped);
		EXPECT_EQ(e.length, 4 * C);
		ASSERT_EQ(rw(*bs, BsOp::Read, 0, b.data(), b.size()), 0);
		for (uint64_t k = 0; k < b.size(); k++) {
			bool zero = k >= C + 100 && k < 4 * C + 100;
			ASSERT_EQ(b[k], zero ? 0 : 0x3c) << "at " << k;
		}
		// A freed chunk is allocated again by a write.
		ASSERT_EQ(rw(*bs, BsOp::Write, 2 * C, b.data(), 1), 0);
		ASSERT_EQ(bs->extent(2 * C, &e), 0);
		EXPECT_TRUE(e.mapped);
	}
}

// Many threads write and read their own stripes of the same chunks while another thread
// keeps freeing those chunks (Unmap) and zeroing parts of them (WriteZeroes). Every read
// sees either the stripe's last value or zeros, never garbage; under ASan this is also
// the use-after-free check, under TSan the locking check.
TEST(RamBackstore, ConcurrentIoRacesUnmap)
{
	constexpr uint64_t C = 64 * KiB, kStripe = 4 * KiB;
	constexpr unsigned kThreads = 4, kChunks = 4;
	auto bs = make(mem_cfg("ram", kChunks * C));
	ASSERT_TRUE(bs);
	std::atomic<bool> stop{false};
	std::atomic<uint64_t> bad{0}, reads{0}, zeros{0};
	auto worker = [&](unsigned id) {
		std::mt19937_64 rng(id);
		std::vector<uint8_t> w(kStripe), r(kStripe);
		for (int i = 0; i < 400; i++) {
			// Stripes id, id + kThreads, ...: every chunk is shared by all threads.
			uint64_t s = (rng() % (kChunks * C / kStripe / kThreads)) * kThreads + id;
			uint8_t v = static_cast<uint8_t>(1 + rng() % 255);
			std::fill(w.begin(), w.end(), v);
			if (rw(*bs, BsOp::Write, s * kStripe, w.data(), kStripe) != 0)
				bad++;
			for (int k = 0; k < 4; k++) {
				std::this_thread::yield(); // let the unmapper in
				if (rw(*bs, BsOp::Read, s * kStripe, r.data(), kStripe) != 0)
					bad++;
				reads++;
				// One read holds the lock across its stripe, which lies in one
				// chunk: all v (not unmapped since) or all zeros (it was).
				if (all_zero(r.data(), kStripe)) {
					zeros++;
					break; // stays zero until this thread writes it again
				}
				if (!std::all_of(r.begin(), r.end(),
				                 [v](uint8_t c) { return c == v; }))
					bad++;
			}
		}
	};
	std::thread unmapper([&] {
		std::mt19937_64 rng(99);
		while (!stop.load()) {
			uint64_t c = rng() % kChunks;
			if (rng() % 2) {
				if (run(*bs, BsOp::Unmap, c * C, C) != 0)
					bad++;
			} else {
				// Whole stripes inside the chunk, zeroed in place (not freed).
				if (run(*bs, BsOp::WriteZeroes, c * C + kStripe, C - 2 * kStripe) !=
				    0)
					bad++;
			}
			BsExtent e;
			if (bs->extent(c * C, &e) != 0)
				bad++;
			std::this_thread::yield();
		}
	});
	std::vector<std::thread> ts;
	for (unsigned i = 0; i < kThreads; i++)
		ts.emplace_back(worker, i);
	for (auto &t : ts)
		t.join();
	stop = true;
	unmapper.join();
	EXPECT_EQ(bad.load(), 0u);
	EXPECT_GE(reads.load(), kThreads * 400u);
	std::printf("ram race: %llu of %llu reads saw their stripe unmapped\n",
	            static_cast<unsigned long long>(zeros.load()),
	            static_cast<unsigned long long>(reads.load()));
}

// A thin LU that cannot allocate fails the write with -ENOSPC (SPACE ALLOCATION FAILED)
// and stays usable. Memory is capped with RLIMIT_AS in a child process, which the
// sanitizers' shadow memory cannot live with.
TEST(RamBackstore, AllocationFailureIsNoSpace)
{
#if ULP_ASAN || ULP_TSAN
	GTEST_SKIP() << "RLIMIT_AS cannot be used under ASan/TSan (shadow memory)";
#else
	auto bs = make(mem_cfg("ram", 1024 * MiB));
	ASSERT_TRUE(bs);
	pid_t pid = fork();
	ASSERT_GE(pid, 0);
	if (pid == 0) {
		// Child: only this thread exists. Allow 16 MiB more address space.
		long pages = 0;
		if (FILE *f = std::fopen("/proc/self/statm", "r")) {
			if (std::fscanf(f, "%ld", &pages) != 1)
				pages = 0;
			std::fclose(f);
		}
		rlimit rl;
		rl.rlim_cur = rl.rlim_max = pages * sysconf(_SC_PAGESIZE) + 16 * MiB;
		if (!pages || setrlimit(RLIMIT_AS, &rl) != 0)
			_exit(10);
		static uint8_t chunk[64 * KiB];
		int err = 0;
		uint64_t off = 0;
		for (; off < bs->size() && !err; off += sizeof chunk)
			err = rw(*bs, BsOp::Write, off, chunk, sizeof chunk);
		if (err != -ENOSPC)
			_exit(11);
		// Still usable: written chunks read back, unwritten ones read zeros.
		if (rw(*bs, BsOp::Read, 0, chunk, sizeof chunk) != 0)
			_exit(12);
		if (rw(*bs, BsOp::Read, bs->size() - sizeof chunk, chunk, sizeof chunk) != 0)
			_exit(13);
		_exit(0);
	}
	int status = 0;
	ASSERT_EQ(waitpid(pid, &status, 0), pid);
	ASSERT_TRUE(WIFEXITED(status));
	EXPECT_EQ(WEXITSTATUS(status), 0) << "10: setrlimit, 11: no -ENOSPC, 12/13: reads after";
#endif
}

// ---------------------------------------------------------------------------------------
// Size at run time (resize, storage_size)

// Requests from several threads over [0, big) while another thread resizes between small
// and big: each completes once, with 0 or, past the size at its check, -ERANGE; whatever
// lies below small always works and keeps its data (each thread owns its stripes).
void resize_while_io(Backstore &bs, uint64_t small, uint64_t big)
{
	constexpr uint64_t kStripe = 4 * KiB;
	constexpr unsigned kThreads = 3;
	std::atomic<bool> stop{false};
	std::atomic<uint64_t> bad{0}, ok_past{0}, range_past{0}, resizes{0};
	const auto t_end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
	auto worker = [&](unsigned id) {
		std::mt19937_64 rng(id + 7);
		AlignedBuf w(kStripe), r(kStripe);
		// At least 300 rounds, and on until the resizer has been at it a while (the
		// synchronous kinds would otherwise finish before it starts), within 5 s.
		for (int i = 0;
		     i < 300 || (resizes.load() < 200 && std::chrono::steady_clock::now() < t_end);
		     i++) {
			const uint64_t s = (rng() % (big / kStripe / kThreads)) * kThreads + id;
			const uint64_t off = s * kStripe;
			std::memset(w.data(), static_cast<int>(1 + rng() % 255), kStripe);
			const int we = rw(bs, BsOp::Write, off, w.data(), kStripe);
			const int re = rw(bs, BsOp::Read, off, r.data(), kStripe);
			if (off + kStripe <= small) {
				if (we || re || std::memcmp(w.data(), r.data(), kStripe))
					bad++;
			} else {
				for (int e : {we, re}) {
					if (e == 0)
						ok_past++;
					else if (e == -ERANGE)
						range_past++;
					else
						bad++;
				}
			}
		}
	};
	std::thread resizer([&] {
		bool grow = false;
		while (!stop.load()) {
			std::string why;
			if (bs.resize(grow ? big : small, &why) != 0)
				bad++;
			resizes++;
			grow = !grow;
			std::this_thread::yield();
		}
	});
	std::vector<std::thread> ts;
	for (unsigned i = 0; i < kThreads; i++)
		ts.emplace_back(worker, i);
	for (auto &t : ts)
		t.join();
	stop = true;
	resizer.join();
	EXPECT_EQ(bad.load(), 0u);
	EXPECT_GE(resizes.load(), 2u);
	std::printf("%s resize race: %llu resizes; past the small end %llu ok, %llu -ERANGE\n",
	            bs.kind().c_str(), static_cast<unsigned long long>(resizes.load()),
	            static_cast<unsigned long long>(ok_past.load()),
	            static_cast<unsigned long long>(range_past.load()));
}

TEST(NullBackstore, ResizeChangesTheRange)
{
	auto bs = make(mem_cfg("null", MiB));
	ASSERT_TRUE(bs);
	uint8_t b[512];
	EXPECT_EQ(rw(*bs, BsOp::Read, MiB, b, sizeof b), -ERANGE);
	ASSERT_EQ(bs->resize(2 * MiB, nullptr), 0);
	EXPECT_EQ(bs->size(), 2 * MiB);
	EXPECT_EQ(rw(*bs, BsOp::Read, MiB, b, sizeof b), 0);
	ASSERT_EQ(bs->resize(MiB / 2, nullptr), 0);
	EXPECT_EQ(rw(*bs, BsOp::Write, MiB / 2, b, sizeof b), -ERANGE);
	uint64_t st = 0;
	ASSERT_EQ(bs->storage_size(&st, nullptr), 0);
	EXPECT_EQ(st, MiB / 2);
	refuses_bad_requests(*bs);
}

// Grow keeps the data and makes the new range usable (the chunk table grows); shrink to
// the middle of a chunk drops what lies past the end, so a grow afterwards reads zeros
// there, partial chunk included.
TEST(RamBackstore, ResizeGrowsKeepsAndShrinkDrops)
{
	auto bs = make(mem_cfg("ram", MiB));
	ASSERT_TRUE(bs);
	std::vector<uint8_t> w(MiB, 0x5a), r(8 * MiB);
	ASSERT_EQ(rw(*bs, BsOp::Write, 0, w.data(), w.size()), 0);
	EXPECT_EQ(rw(*bs, BsOp::Write, MiB, w.data(), 512), -ERANGE);

	ASSERT_EQ(bs->resize(8 * MiB, nullptr), 0);
	EXPECT_EQ(bs->size(), 8 * MiB);
	ASSERT_EQ(rw(*bs, BsOp::Read, 0, r.data(), 8 * MiB), 0);
	EXPECT_TRUE(std::all_of(r.begin(), r.begin() + MiB, [](uint8_t c) { return c == 0x5a; }));
	EXPECT_TRUE(all_zero(r.data() + MiB, 7 * MiB)) << "the grown range reads zeros";
	BsExtent e;
	ASSERT_EQ(bs->extent(MiB, &e), 0);
	EXPECT_FALSE(e.mapped);
	EXPECT_EQ(e.length, 7 * MiB);
	ASSERT_EQ(rw(*bs, BsOp::Write, 7 * MiB, w.data(), MiB), 0) << "past the old end";

	const uint64_t cut = 96 * KiB + 512; // in the middle of the second chunk
	ASSERT_EQ(bs->resize(cut, nullptr), 0);
	EXPECT_EQ(rw(*bs, BsOp::Read, cut, r.data(), 512), -ERANGE);
	EXPECT_EQ(bs->extent(cut, &e), -ERANGE);
	refuses_bad_requests(*bs);
	ASSERT_EQ(bs->resize(8 * MiB, nullptr), 0);
	ASSERT_EQ(rw(*bs, BsOp::Read, 0, r.data(), 8 * MiB), 0);
	EXPECT_TRUE(std::all_of(r.begin(), r.begin() + cut, [](uint8_t c) { return c == 0x5a; }));
	EXPECT_TRUE(all_zero(r.data() + cut, 8 * MiB - cut)) << "dropped at the shrink";
	ASSERT_EQ(bs->extent(2 * 64 * KiB, &e), 0);
	EXPECT_FALSE(e.mapped) << "the chunks past the shrink were freed";
}

TEST(RamBackstore, ResizeWhileIoRuns)
{
	auto bs = make(mem_cfg("ram", 2 * MiB));
	ASSERT_TRUE(bs);
	resize_while_io(*bs, 256 * KiB + 512, 2 * MiB);
}

// A grow extends the file (sparse); a shrink leaves it whole (its tail is data, as at
// open) but refuses the range; storage_size() follows the file, also when someone else
// changes it.
TEST_F(FileBackstore, ResizeExtendsTheFileAndFollowsIt)
{
	const std::string p = dir_.file("r.img");
	auto bs = make(file_cfg(p, MiB));
	ASSERT_TRUE(bs);
	AlignedBuf b(4096);
	std::memset(b.data(), 0x33, 4096);
	EXPECT_EQ(rw(*bs, BsOp::Write, MiB, b.data(), 4096), -ERANGE);
	ASSERT_EQ(bs->resize(4 * MiB, nullptr), 0);
	struct stat st;
	ASSERT_EQ(stat(p.c_str(), &st), 0);
	EXPECT_EQ(st.st_size, static_cast<off_t>(4 * MiB));
	ASSERT_EQ(rw(*bs, BsOp::Write, 3 * MiB, b.data(), 4096), 0);
	ASSERT_EQ(rw(*bs, BsOp::Read, 3 * MiB, b.data(), 4096), 0);
	EXPECT_EQ(b.data()[100], 0x33);

	ASSERT_EQ(bs->resize(2 * MiB, nullptr), 0);
	EXPECT_EQ(rw(*bs, BsOp::Read, 3 * MiB, b.data(), 4096), -ERANGE);
	ASSERT_EQ(stat(p.c_str(), &st), 0);
	EXPECT_EQ(st.st_size, static_cast<off_t>(4 * MiB)) << "a shrink never shortens the file";
	uint64_t now = 0;
	ASSERT_EQ(bs->storage_size(&now, nullptr), 0);
	EXPECT_EQ(now, 4 * MiB);
	ASSERT_EQ(truncate(p.c_str(), 9 * MiB), 0); // an administrator's `truncate -s`
	ASSERT_EQ(bs->storage_size(&now, nullptr), 0);
	EXPECT_EQ(now, 9 * MiB);
	ASSERT_EQ(bs->resize(9 * MiB, nullptr), 0);
	std::memset(b.data(), 0, 4096);
	ASSERT_EQ(rw(*bs, BsOp::Read, 3 * MiB, b.data(), 4096), 0);
	EXPECT_EQ(b.data()[100], 0x33) << "the tail kept through the shrink";
	refuses_bad_requests(*bs);

	BackstoreConfig ro = file_cfg(p, 0);
	ro.read_only = true;
	auto rbs = make(ro);
	ASSERT_TRUE(rbs);
	std::string why;
	EXPECT_EQ(rbs->resize(16 * MiB, &why), -EROFS);
	EXPECT_NE(why.find("read-only"), std::string::npos) << why;
	EXPECT_EQ(rbs->size(), 9 * MiB) << "unchanged on failure";
	EXPECT_EQ(rbs->resize(4 * MiB, nullptr), 0) << "no need to write to shrink";
}

TEST_F(FileBackstore, ResizeWhileIoRuns)
{
	auto bs = make(file_cfg(dir_.file("race.img"), 2 * MiB));
	ASSERT_TRUE(bs);
	resize_while_io(*bs, 256 * KiB, 2 * MiB);
}

// The device's size is re-read: a grow beyond it is refused until the device grows (the
// loop device's backing file extended and the capacity re-read: losetup -c).
TEST_F(BlockBackstore, ResizeFollowsTheDevice)
{
	auto bs = make(cfg(8 * MiB));
	ASSERT_TRUE(bs);
	std::string why;
	EXPECT_EQ(bs->resize(32 * MiB, &why), -ENOSPC);
	EXPECT_NE(why.find("exceeds"), std::string::npos) << why;
	EXPECT_EQ(bs->size(), 8 * MiB);
	uint64_t now = 0;
	ASSERT_EQ(bs->storage_size(&now, nullptr), 0);
	EXPECT_EQ(now, 16 * MiB);
	ASSERT_EQ(bs->resize(16 * MiB, nullptr), 0);
	AlignedBuf b(4096);
	EXPECT_EQ(rw(*bs, BsOp::Read, 12 * MiB, b.data(), 4096), 0);

	ASSERT_EQ(truncate(dir_.file("loop.img").c_str(), 32 * MiB), 0);
	ASSERT_EQ(std::system(("losetup -c " + loop_->dev()).c_str()), 0);
	ASSERT_EQ(bs->storage_size(&now, nullptr), 0);
	EXPECT_EQ(now, 32 * MiB);
	ASSERT_EQ(bs->resize(32 * MiB, nullptr), 0);
	EXPECT_EQ(rw(*bs, BsOp::Write, 30 * MiB, b.data(), 4096), 0);
	ASSERT_EQ(bs->resize(4 * MiB, nullptr), 0);
	EXPECT_EQ(rw(*bs, BsOp::Read, 12 * MiB, b.data(), 4096), -ERANGE);
	refuses_bad_requests(*bs);
}

} // namespace
} // namespace ulp::scsi
