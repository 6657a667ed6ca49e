// SPDX-License-Identifier: MIT
// tests/scsi/backstore_env.h - what the backstore suites share (backstore_test.cc,
// backstore_file_test.cc): aligned buffers, requests and their completions, random
// integrity against a reference copy, and the file and block fixtures (a scratch directory
// on a disk file system, a loop device).
#pragma once

#include "scsi/backstore.h"
#include "scsi/bs_internal.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/uio.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

namespace ulp::scsi::bs_test
{

using namespace std::chrono_literals;

inline constexpr uint64_t KiB = 1024, MiB = 1024 * KiB;
inline constexpr auto kWait = 10s; // bound on any wait for completions

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
inline int run(Backstore &bs, BsOp op, uint64_t off, uint64_t len, std::vector<iovec> iov = {},
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

inline int rw(Backstore &bs, BsOp op, uint64_t off, void *p, size_t len, bool fua = false)
{
	return run(bs, op, off, len, {{p, len}}, fua);
}

inline std::unique_ptr<Backstore> make(const BackstoreConfig &cfg)
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

inline BackstoreConfig mem_cfg(const char *kind, uint64_t size)
{
	BackstoreConfig c;
	c.kind = kind;
	c.size = size;
	return c;
}

// Splits [p, p + len) into 1..4 iovecs at random points (at multiples of grain).
inline std::vector<iovec> split(uint8_t *p, size_t len, size_t grain, std::mt19937_64 &rng)
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
inline void integrity(Backstore &bs, uint64_t span, int ops, uint64_t seed, bool aligned_only)
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
inline void refuses_bad_requests(Backstore &bs)
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

inline bool all_zero(const uint8_t *p, size_t n)
{
	return std::all_of(p, p + n, [](uint8_t c) { return c == 0; });
}

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

inline BackstoreConfig file_cfg(const std::string &path, uint64_t size)
{
	BackstoreConfig c;
	c.kind = "file";
	c.path = path;
	c.size = size;
	return c;
}

inline FileBsStats stats_of(const Backstore &bs)
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

} // namespace ulp::scsi::bs_test
