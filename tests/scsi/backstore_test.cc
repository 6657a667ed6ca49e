// SPDX-License-Identifier: MIT
// Backstores on real memory, real files and (where one can be made) a loop device: data
// integrity against a reference copy with random offsets, lengths and iovecs; the queue
// depth and its FIFO under many threads; thin provisioning (unwritten and unmapped ranges
// read as zeros, extent() reports them); FUA and flush; read-only; bad configs and
// requests; and the O_DIRECT/buffered choice.
#include "scsi/backstore.h"
#include "scsi/bs_internal.h"

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

using namespace std::chrono_literals;

constexpr uint64_t KiB = 1024, MiB = 1024 * KiB;
constexpr auto kWait = 10s; // bound on any wait for completions

// Memory aligned for O_DIRECT, freed on scope exit.
class AlignedBuf
{
public:
	explicit AlignedBuf(size_t len)
	    : len_(len), p_(static_cast<uint8_t *>(std::aligned_alloc(4096, round(len))))
	{
		std::memset(p_, 0, round(len));
	}
	~AlignedBuf() { std::free(p_); }
	AlignedBuf(const AlignedBuf &) = delete;
	AlignedBuf &operator=(const AlignedBuf &) = delete;
	uint8_t *data() const { return p_; }
	size_t size() const { return len_; }

private:
	static size_t round(size_t n) { return (std::max<size_t>(n, 1) + 4095) & ~size_t(4095); }
	size_t len_; // usable bytes
	uint8_t *p_; // 4 KiB aligned
};

// Counts completions; requests point at one through BsIo::priv.
struct Tracker {
	std::mutex lock;
	std::condition_variable cv;
	uint64_t completed = 0;
	std::vector<const void *> order; // the BsIo of each completion, in completion order

	bool wait(uint64_t n)
	{
		std::unique_lock g(lock);
		return cv.wait_for(g, kWait, [&] { return completed >= n; });
	}
};

// One request and its outcome.
struct Req {
	BsIo io;
	std::vector<iovec> iov;
	Tracker *t = nullptr;
	std::atomic<int> calls{0}; // done() invocations (must end at exactly 1)
	int err = 1;               // result; 1 until done()
	std::thread::id on;        // thread done() ran on

	static void done(BsIo *io, int err)
	{
		auto *r = static_cast<Req *>(io->priv);
		r->on = std::this_thread::get_id();
		Tracker *t = r->t;
		std::lock_guard g(t->lock);
		r->err = err;
		r->calls.fetch_add(1);
		t->completed++;
		t->order.push_back(io);
		t->cv.notify_all();
	}

	void set(BsOp op, uint64_t off, uint64_t len, Tracker *tr, bool fua = false)
	{
		io.op = op;
		io.fua = fua;
		io.offset = off;
		io.length = len;
		io.iov = iov;
		io.done = &Req::done;
		io.priv = this;
		t = tr;
	}
};

// Submits one request and waits for it (bounded). Returns its result.
int run(Backstore &bs, BsOp op, uint64_t off, uint64_t len, std::vector<iovec> iov = {},
        bool fua = false)
{
	Tracker t;
	Req r;
	r.iov = std::move(iov);
	r.set(op, off, len, &t, fua);
	bs.submit(&r.io);
	if (!t.wait(1)) {
		ADD_FAILURE() << bs_op_str(op) << " at " << off << " did not complete in 10 s";
		std::abort(); // r is still in the backstore's hands: cannot unwind past it
	}
	EXPECT_EQ(r.calls.load(), 1);
	return r.err;
}

int rw(Backstore &bs, BsOp op, uint64_t off, void *p, size_t len, bool fua = false)
{
	return run(bs, op, off, len, {{p, len}}, fua);
}

std::unique_ptr<Backstore> make(const BackstoreConfig &cfg)
{
	int err = 0;
	std::string why;
	auto bs = make_backstore(cfg, &err, &why);
	EXPECT_TRUE(bs) << why;
	if (bs) {
		EXPECT_EQ(err, 0);
		EXPECT_TRUE(why.empty()) << why;
	}
	return bs;
}

BackstoreConfig mem_cfg(const char *kind, uint64_t size)
{
	BackstoreConfig c;
	c.kind = kind;
	c.size = size;
	return c;
}

// Splits [p, p + len) into 1..4 iovecs at random points (at multiples of grain).
std::vector<iovec> split(uint8_t *p, size_t len, size_t grain, std::mt19937_64 &rng)
{
	std::vector<size_t> cuts;
	size_t units = len / grain;
	unsigned n = std::min<size_t>(1 + rng() % 4, units);
	for (unsigned k = 1; k < n; k++)
		cuts.push_back((1 + rng() % (units - 1)) * grain);
	std::sort(cuts.begin(), cuts.end());
	cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
	std::vector<iovec> v;
	size_t at = 0;
	for (size_t c : cuts) {
		v.push_back({p + at, c - at});
		at = c;
	}
	v.push_back({p + at, len - at});
	return v;
}

// Random reads, writes, unmaps and write-zeroes over [0, span) checked against a reference
// copy; one request at a time (overlapping ranges in flight have no defined order).
// aligned_only: offsets, lengths and buffers at 4 KiB; else half of them byte-granular.
void integrity(Backstore &bs, uint64_t span, int ops, uint64_t seed, bool aligned_only)
{
	std::mt19937_64 rng(seed);
	std::vector<uint8_t> ref(span);
	AlignedBuf buf(256 * KiB + 4096);
	// The initial contents (a fresh file or device may hold anything we did not put).
	for (uint64_t off = 0; off < span; off += 256 * KiB) {
		size_t n = std::min<uint64_t>(256 * KiB, span - off);
		ASSERT_EQ(rw(bs, BsOp::Read, off, buf.data(), n), 0);
		std::memcpy(ref.data() + off, buf.data(), n);
	}
	for (int i = 0; i < ops; i++) {
		const bool aligned = aligned_only || rng() % 2;
		uint64_t off, len;
		if (aligned) {
			len = (1 + rng() % 64) * 4096;
			off = (rng() % ((span - len) / 4096 + 1)) * 4096;
		} else {
			len = 1 + rng() % (128 * KiB);
			off = rng() % (span - len + 1);
		}
		uint8_t *p = buf.data() + (aligned ? 0 : 1 + rng() % 7);
		unsigned pick = rng() % 100;
		SCOPED_TRACE("op " + std::to_string(i) + " pick " + std::to_string(pick) + " off " +
		             std::to_string(off) + " len " + std::to_string(len));
		if (pick < 45) {
			for (uint64_t k = 0; k < len; k++)
				p[k] = static_cast<uint8_t>(rng());
			auto v = split(p, len, aligned ? 4096 : 1, rng);
			ASSERT_EQ(run(bs, BsOp::Write, off, len, v, rng() % 4 == 0), 0);
			std::memcpy(ref.data() + off, p, len);
		} else if (pick < 85) {
			std::memset(p, 0xa5, len);
			auto v = split(p, len, aligned ? 4096 : 1, rng);
			ASSERT_EQ(run(bs, BsOp::Read, off, len, v), 0);
			ASSERT_EQ(std::memcmp(p, ref.data() + off, len), 0);
		} else if (pick < 93) {
			ASSERT_EQ(run(bs, BsOp::WriteZeroes, off, len), 0);
			std::memset(ref.data() + off, 0, len);
		} else if (pick < 97) {
			if (!bs.can_unmap())
				continue;
			ASSERT_EQ(run(bs, BsOp::Unmap, off, len), 0);
			std::memset(ref.data() + off, 0, len);
		} else {
			ASSERT_EQ(run(bs, BsOp::Flush, 0, 0), 0);
		}
	}
	for (uint64_t off = 0; off < span; off += 256 * KiB) {
		size_t n = std::min<uint64_t>(256 * KiB, span - off);
		ASSERT_EQ(rw(bs, BsOp::Read, off, buf.data(), n), 0);
		ASSERT_EQ(std::memcmp(buf.data(), ref.data() + off, n), 0) << "at " << off;
	}
}

// Requests every backstore must refuse: past the end or wrapping (-ERANGE), and an iov
// that does not add up to length (-EINVAL).
void refuses_bad_requests(Backstore &bs)
{
	uint8_t b[1024];
	const uint64_t end = bs.size();
	EXPECT_EQ(rw(bs, BsOp::Read, end - 512, b, 1024), -ERANGE);
	EXPECT_EQ(rw(bs, BsOp::Write, end - 512, b, 1024), -ERANGE);
	EXPECT_EQ(rw(bs, BsOp::Read, end, b, 1), -ERANGE);
	EXPECT_EQ(rw(bs, BsOp::Read, ~0ull - 100, b, 512), -ERANGE);
	EXPECT_EQ(run(bs, BsOp::WriteZeroes, end - 512, 1024), -ERANGE);
	EXPECT_EQ(run(bs, BsOp::Unmap, ~0ull, 2), -ERANGE);
	EXPECT_EQ(run(bs, BsOp::Read, 0, 1024, {{b, 512}}), -EINVAL); // iov sums to 512
	EXPECT_EQ(rw(bs, BsOp::Read, end - 512, b, 512), 0);          // the last block is fine
	BsExtent e;
	EXPECT_EQ(bs.extent(end, &e), -ERANGE);
}

bool all_zero(const uint8_t *p, size_t n)
{
	return std::all_of(p, p + n, [](uint8_t c) { return c == 0; });
}

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
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
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
// file

// A scratch directory on a disk file system (/var/tmp: tmpfs would hide O_DIRECT and
// hole punching), removed with what it holds.
class ScratchDir
{
public:
	explicit ScratchDir(const char *base = "/var/tmp")
	{
		std::string t = std::string(base) + "/ulp-bs-XXXXXX";
		if (mkdtemp(t.data()))
			path_ = t;
	}
	~ScratchDir()
	{
		if (!path_.empty())
			std::system(("rm -rf '" + path_ + "'").c_str());
	}
	bool ok() const { return !path_.empty(); }
	std::string file(const char *name) const { return path_ + "/" + name; }

private:
	std::string path_; // the directory, or empty when it could not be made
};

BackstoreConfig file_cfg(const std::string &path, uint64_t size)
{
	BackstoreConfig c;
	c.kind = "file";
	c.path = path;
	c.size = size;
	return c;
}

FileBsStats stats_of(const Backstore &bs)
{
	FileBsStats s;
	EXPECT_TRUE(file_bs_stats(bs, &s));
	return s;
}

class FileBackstore : public ::testing::Test
{
protected:
	void SetUp() override { ASSERT_TRUE(dir_.ok()) << "mkdtemp in /var/tmp"; }
	ScratchDir dir_;
};

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
class LoopDevice
{
public:
	LoopDevice(const std::string &file, uint64_t size, std::string *why)
	{
		if (geteuid() != 0) {
			*why = "needs root (losetup)";
			return;
		}
		int fd = open(file.c_str(), O_CREAT | O_WRONLY, 0644);
		bool sized = fd >= 0 && ftruncate(fd, static_cast<off_t>(size)) == 0;
		if (fd >= 0)
			close(fd);
		if (!sized) {
			*why = "cannot create " + file;
			return;
		}
		FILE *f = popen(("losetup -f --show '" + file + "' 2>&1").c_str(), "r");
		if (!f) {
			*why = "popen(losetup) failed";
			return;
		}
		char line[256] = {};
		bool got = std::fgets(line, sizeof line, f) != nullptr;
		int rc = pclose(f);
		std::string out = got ? line : "";
		if (!out.empty() && out.back() == '\n')
			out.pop_back();
		if (rc != 0 || out.rfind("/dev/", 0) != 0) {
			*why = "losetup -f --show failed: " + out;
			return;
		}
		dev_ = out;
	}
	~LoopDevice()
	{
		if (!dev_.empty())
			std::system(("losetup -d " + dev_).c_str());
	}
	const std::string &dev() const { return dev_; }

private:
	std::string dev_; // /dev/loopN, or empty when none could be made
};

class BlockBackstore : public ::testing::Test
{
protected:
	void SetUp() override
	{
		ASSERT_TRUE(dir_.ok());
		std::string why;
		loop_ = std::make_unique<LoopDevice>(dir_.file("loop.img"), 16 * MiB, &why);
		if (loop_->dev().empty())
			GTEST_SKIP() << "no loop device: " << why;
	}
	void TearDown() override { loop_.reset(); }

	BackstoreConfig cfg(uint64_t size = 0)
	{
		BackstoreConfig c;
		c.kind = "block";
		c.path = loop_->dev();
		c.size = size;
		return c;
	}

	ScratchDir dir_;
	std::unique_ptr<LoopDevice> loop_;
};

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
