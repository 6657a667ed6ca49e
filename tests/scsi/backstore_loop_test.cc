// SPDX-License-Identifier: MIT
// The file backstore's rings per event loop (scsi/bs_file_ring.h): requests
// submitted on a thread that runs an event loop go to a ring of that loop and complete on
// that thread, with their data; other threads keep the shared ring and its completion
// thread. Teardown in every order: the backstore destroyed under I/O on two loops, from
// another thread and from one of the loops; a loop stopped under I/O while the backstore
// lives on; both at once, repeatedly; a loop that cannot watch the ring's descriptor.
#include "tests/scsi/backstore_env.h"
#include "tests/scsi/event_loop_env.h"
#include "tests/scsi/loop_batch.h"

#include <dirent.h>
#include <gtest/gtest.h>
#include <linux/io_uring.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace ulp::scsi
{
namespace
{

using namespace bs_test;

// Descriptors open in this process.
size_t open_fds()
{
	size_t n = 0;
	if (DIR *d = opendir("/proc/self/fd")) {
		while (dirent *e = readdir(d))
			n += e->d_name[0] != '.';
		closedir(d);
	}
	return n;
}

class FileLoopRings : public FileBackstore
{
protected:
	BackstoreConfig cfg(const char *name, uint32_t depth)
	{
		BackstoreConfig c = file_cfg(dir_.file(name), 32 * MiB);
		c.queue_depth = depth;
		return c;
	}
};

// The running kernel accepts a ring set up with flags (io_uring_setup(2), asked directly).
static bool kernel_takes_ring_flags(uint32_t flags)
{
	io_uring_params p{};
	p.flags = flags;
	const long fd = syscall(__NR_io_uring_setup, 1, &p);
	if (fd < 0)
		return false;
	close(static_cast<int>(fd));
	return true;
}

TEST_F(FileLoopRings, CompletionsRunOnTheSubmittingLoop)
{
	const BackstoreConfig c = cfg("a.img", 8);
	auto bs = make(c);
	ASSERT_TRUE(bs);
	TestLoop l0("loop 0"), l1("loop 1");
	// More requests than the queue depth from each loop: its ring's own FIFO.
	LoopBatch b0(&l0, 64, 16 * KiB, 0), b1(&l1, 64, 16 * KiB, 8 * MiB);
	ASSERT_TRUE(b0.submit(*bs));
	ASSERT_TRUE(b1.submit(*bs));
	ASSERT_TRUE(b0.t.wait(64));
	ASSERT_TRUE(b1.t.wait(64));
	b0.check_done("loop 0");
	b1.check_done("loop 1");
	FileBsStats s = stats_of(*bs);
	EXPECT_EQ(s.loop_rings, 2u) << "one ring per loop";
	// Reaped by the thread that submits: a completion waits for that thread's next system
	// call rather than interrupting it.
	if (kernel_takes_ring_flags(IORING_SETUP_COOP_TASKRUN)) {
		EXPECT_EQ(s.coop_rings, 2u) << "loop rings without COOP_TASKRUN";
	}
	EXPECT_EQ(s.loop_requests, 128u);
	EXPECT_EQ(s.shared_requests, 0u);
	EXPECT_GT(s.direct_rw, 0u);
	EXPECT_GT(s.buffered_rw, 0u);

	// Reads back, crosswise: each loop reads what the other wrote, on its own ring.
	for (TestLoop *l : {&l0, &l1}) {
		const uint64_t from = l == &l0 ? 8 * MiB : 0;
		const LoopBatch &w = l == &l0 ? b1 : b0;
		AlignedBuf back(64 * 16 * KiB);
		Tracker t;
		Req r;
		r.iov = {{back.data(), back.size()}};
		r.set(BsOp::Read, from, back.size(), &t);
		ASSERT_TRUE(l->run([&] { bs->submit(&r.io); }));
		ASSERT_TRUE(t.wait(1));
		EXPECT_EQ(r.err, 0);
		EXPECT_EQ(r.on, l->tid());
		for (size_t i = 0; i < w.reqs.size(); i++)
			ASSERT_EQ(std::memcmp(back.data() + i * 16 * KiB, w.reqs[i].iov[0].iov_base,
			                      16 * KiB),
			          0)
			    << l->name() << " reading write " << i;
	}
	// A thread without a loop: the shared ring, completed on its reaper thread.
	AlignedBuf one(4096);
	Tracker t;
	Req r;
	r.iov = {{one.data(), 4096}};
	r.set(BsOp::Read, 0, 4096, &t);
	bs->submit(&r.io);
	ASSERT_TRUE(t.wait(1));
	EXPECT_EQ(r.err, 0);
	EXPECT_NE(r.on, std::this_thread::get_id());
	EXPECT_NE(r.on, l0.tid());
	EXPECT_NE(r.on, l1.tid());
	s = stats_of(*bs);
	EXPECT_EQ(s.shared_requests, 1u);
	EXPECT_EQ(s.loop_rings, 2u);
	b0.check_file(c.path);
	b1.check_file(c.path);
}

// The requests one turn of a loop submits (a poll batch of commands) enter the kernel
// together, with one io_uring_enter at the turn's end, and complete with their data.
TEST_F(FileLoopRings, OneTurnsRequestsEnterTheKernelTogether)
{
	const BackstoreConfig c = cfg("a.img", 32);
	auto bs = make(c);
	ASSERT_TRUE(bs);
	TestLoop l0("loop 0");
	LoopBatch b(&l0, 16, 4 * KiB, 0); // within the queue depth: each takes a slot at once
	ASSERT_TRUE(b.submit(*bs));       // one posted function: one turn of the loop
	ASSERT_TRUE(b.t.wait(16));
	b.check_done("loop 0");
	FileBsStats s = stats_of(*bs);
	EXPECT_EQ(s.loop_requests, 16u);
	EXPECT_EQ(s.ring_enters, 1u) << "one turn's requests entered the kernel one by one";
	b.check_file(c.path);
}

// Destroyed from another thread while both loops' rings hold requests (beyond the queue
// depth, durable writes: slow): the destructor waits for them all, each completes on its
// loop, and both rings are closed on their loops, which go on serving.
TEST_F(FileLoopRings, DestroyedUnderIoOnBothLoops)
{
	BackstoreConfig c = cfg("d.img", 4);
	c.write_cache = false; // every write RWF_DSYNC
	TestLoop l0("loop 0"), l1("loop 1");
	const size_t fds1 = open_fds();
	auto bs = make(c);
	ASSERT_TRUE(bs);
	LoopBatch b0(&l0, 96, 64 * KiB, 0), b1(&l1, 96, 64 * KiB, 16 * MiB);
	ASSERT_TRUE(b0.submit(*bs));
	ASSERT_TRUE(b1.submit(*bs));
	uint64_t pending;
	{
		std::scoped_lock g(b0.t.lock, b1.t.lock);
		pending = 192 - b0.t.completed - b1.t.completed;
	}
	bs.reset();
	std::printf("requests pending when the destructor began: %llu of 192\n",
	            static_cast<unsigned long long>(pending));
	{
		std::scoped_lock g(b0.t.lock, b1.t.lock);
		EXPECT_EQ(b0.t.completed + b1.t.completed, 192u)
		    << "all complete before the destructor returns";
	}
	b0.check_done("loop 0");
	b1.check_done("loop 1");
	b0.check_file(c.path);
	b1.check_file(c.path);
	EXPECT_EQ(open_fds(), fds1) << "rings, eventfds and the file closed";
	size_t w0 = 1, w1 = 1;
	ASSERT_TRUE(l0.run([&] { w0 = l0.watched(); }));
	ASSERT_TRUE(l1.run([&] { w1 = l1.watched(); }));
	EXPECT_EQ(w0, 0u);
	EXPECT_EQ(w1, 0u);

	// The loops take a new backstore on the same file.
	auto again = make(c);
	ASSERT_TRUE(again);
	LoopBatch b2(&l0, 8, 4 * KiB, 0);
	ASSERT_TRUE(b2.submit(*again));
	ASSERT_TRUE(b2.t.wait(8));
	b2.check_done("loop 0, again");
	again.reset();
	EXPECT_EQ(open_fds(), fds1);
}

// Destroyed on one of the loops' own thread: that loop's ring is drained and closed right
// there (nobody else may reap it), the other loop's on its loop.
TEST_F(FileLoopRings, DestroyedOnOneOfTheLoops)
{
	BackstoreConfig c = cfg("o.img", 4);
	c.write_cache = false;
	TestLoop l0("loop 0"), l1("loop 1");
	const size_t fds1 = open_fds();
	auto bs = make(c);
	ASSERT_TRUE(bs);
	LoopBatch b0(&l0, 64, 64 * KiB, 0), b1(&l1, 64, 64 * KiB, 16 * MiB);
	ASSERT_TRUE(l0.run([&] {
		for (Req &r : b0.reqs)
			bs->submit(&r.io);
		// l1 submits while l0 is still here: both rings hold requests when l0
		// destroys the backstore.
		EXPECT_TRUE(b1.submit(*bs));
		bs.reset();
	}));
	EXPECT_FALSE(bs);
	EXPECT_EQ(b0.t.completed + b1.t.completed, 128u);
	b0.check_done("loop 0");
	b1.check_done("loop 1");
	b0.check_file(c.path);
	b1.check_file(c.path);
	EXPECT_EQ(open_fds(), fds1);
}

// A loop stopped under I/O while the backstore lives: its ring drains on its thread before
// the thread exits (every done() there), then closes; the other loop and threads without
// a loop go on using the backstore, which is destroyed later.
TEST_F(FileLoopRings, LoopStoppedWhileTheBackstoreLives)
{
	BackstoreConfig c = cfg("s.img", 4);
	c.write_cache = false;
	auto bs = make(c);
	ASSERT_TRUE(bs);
	auto l0 = std::make_unique<TestLoop>("loop 0");
	TestLoop l1("loop 1");
	const std::thread::id t0 = l0->tid();
	LoopBatch b0(l0.get(), 96, 64 * KiB, 0), b1(&l1, 16, 64 * KiB, 16 * MiB);
	ASSERT_TRUE(b0.submit(*bs));
	ASSERT_TRUE(b1.submit(*bs));
	l0->stop();
	{
		std::lock_guard g(b0.t.lock);
		EXPECT_EQ(b0.t.completed, 96u) << "the loop drained its ring before it ended";
	}
	for (Req &r : b0.reqs) {
		EXPECT_EQ(r.calls.load(), 1);
		EXPECT_EQ(r.err, 0);
		EXPECT_EQ(r.on, t0);
	}
	l0.reset();
	ASSERT_TRUE(b1.t.wait(16));
	b1.check_done("loop 1");
	FileBsStats s = stats_of(*bs);
	EXPECT_EQ(s.loop_rings, 1u) << "the stopped loop's ring is closed";
	EXPECT_EQ(s.loop_requests, 112u) << "a closed ring's counts are kept";
	b0.check_file(c.path);

	// Still in service, from the remaining loop and from this thread.
	LoopBatch b2(&l1, 8, 4 * KiB, 24 * MiB);
	ASSERT_TRUE(b2.submit(*bs));
	ASSERT_TRUE(b2.t.wait(8));
	b2.check_done("loop 1, later");
	AlignedBuf buf(64 * KiB);
	ASSERT_EQ(rw(*bs, BsOp::Read, 0, buf.data(), buf.size()), 0);
	EXPECT_EQ(std::memcmp(buf.data(), b0.reqs[0].iov[0].iov_base, buf.size()), 0);
	bs.reset();
}

// The destructor and a loop's end at the same moment, with that loop's ring holding
// requests: whichever closes the ring, it is closed once, on the loop's thread, and every
// request completes there. Many rounds, for the interleavings (and TSan).
TEST_F(FileLoopRings, DestroyedWhileALoopEnds)
{
	for (int round = 0; round < 20; round++) {
		SCOPED_TRACE("round " + std::to_string(round));
		BackstoreConfig c = cfg("r.img", 4);
		auto bs = make(c);
		ASSERT_TRUE(bs);
		TestLoop stays("stays");
		auto ends = std::make_unique<TestLoop>("ends");
		LoopBatch a(ends.get(), 32, 16 * KiB, 0), b(&stays, 32, 16 * KiB, 8 * MiB);
		ASSERT_TRUE(a.submit(*bs));
		ASSERT_TRUE(b.submit(*bs));
		std::thread stopper([&] { ends->stop(); });
		if (round % 2)
			std::this_thread::yield();
		bs.reset();
		stopper.join();
		{
			std::scoped_lock g(a.t.lock, b.t.lock);
			EXPECT_EQ(a.t.completed, 32u);
			EXPECT_EQ(b.t.completed, 32u);
		}
		a.check_done("ending loop");
		b.check_done("staying loop");
		size_t w = 1;
		ASSERT_TRUE(stays.run([&] { w = stays.watched(); }));
		EXPECT_EQ(w, 0u);
	}
}

// A loop that cannot watch another descriptor: its thread uses the shared ring (completions
// on the completion thread), correctly, and says so once.
TEST_F(FileLoopRings, ALoopThatCannotWatchUsesTheSharedRing)
{
	auto bs = make(cfg("f.img", 8));
	ASSERT_TRUE(bs);
	TestLoop l("refusing", true);
	LoopBatch b(&l, 16, 4 * KiB, 0);
	ASSERT_TRUE(b.submit(*bs));
	ASSERT_TRUE(b.t.wait(16));
	for (Req &r : b.reqs) {
		EXPECT_EQ(r.calls.load(), 1);
		EXPECT_EQ(r.err, 0);
		EXPECT_NE(r.on, l.tid());
	}
	FileBsStats s = stats_of(*bs);
	EXPECT_EQ(s.loop_rings, 0u);
	EXPECT_EQ(s.shared_requests, 16u);
	b.check_file(dir_.file("f.img"));
}

} // namespace
} // namespace ulp::scsi
