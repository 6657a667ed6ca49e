// SPDX-License-Identifier: MIT
// tests/scsi/loop_batch.h - writes submitted from an event loop's thread and checked where
// they completed and what they left (the file and rbd backstores' per-loop queues:
// tests/scsi/backstore_loop_test.cc, tests/ceph/rbd_backstore_test.cc).
#pragma once

#include "tests/scsi/backstore_env.h"
#include "tests/scsi/event_loop_env.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <deque>
#include <string>
#include <vector>

namespace ulp::scsi::bs_test
{

// A batch of writes submitted from one loop's thread, each of its own pattern, and what
// their done() saw.
struct LoopBatch {
	TestLoop *loop = nullptr;
	Tracker t;
	std::deque<Req> reqs;
	AlignedBuf data;
	uint64_t base; // byte offset of the first write

	LoopBatch(TestLoop *l, unsigned n, size_t len, uint64_t at)
	    : loop(l), reqs(n), data(n * len + 1), base(at)
	{
		for (size_t k = 0; k < data.size(); k++)
			data.data()[k] = static_cast<uint8_t>(k * 7 + at / 4096 + 1);
		for (unsigned i = 0; i < n; i++) {
			Req &r = reqs[i];
			// Every other request byte-misaligned: the buffered descriptor's path
			// as well as the O_DIRECT one.
			uint8_t *p = data.data() + i * len + (i % 2);
			r.iov = {{p, len}};
			r.set(BsOp::Write, at + i * len, len, &t, i % 8 == 0);
		}
	}

	// Submits every request from the loop's thread; true once all are submitted.
	bool submit(Backstore &bs)
	{
		return loop->run([&] {
			for (Req &r : reqs)
				bs.submit(&r.io);
		});
	}

	// Each completed exactly once, without error, on the loop's thread.
	void check_done(const char *what)
	{
		for (size_t i = 0; i < reqs.size(); i++) {
			const Req &r = reqs[i];
			EXPECT_EQ(r.calls.load(), 1) << what << ": request " << i;
			EXPECT_EQ(r.err, 0) << what << ": request " << i;
			EXPECT_EQ(r.on, loop->tid())
			    << what << ": request " << i << " completed off its loop's thread";
		}
	}

	// The storage holds what the batch wrote, read back through bs (from this thread).
	void check_read(Backstore &bs)
	{
		const size_t len = reqs.empty() ? 0 : reqs[0].io.length;
		std::vector<uint8_t> back(len);
		for (size_t i = 0; i < reqs.size(); i++) {
			ASSERT_EQ(rw(bs, BsOp::Read, base + i * len, back.data(), len), 0);
			ASSERT_EQ(std::memcmp(back.data(), reqs[i].iov[0].iov_base, len), 0)
			    << "write " << i << " at " << base + i * len;
		}
	}

	// The file holds what the batch wrote.
	void check_file(const std::string &path)
	{
		const size_t len = reqs.empty() ? 0 : reqs[0].io.length;
		std::vector<uint8_t> back(len);
		int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
		ASSERT_GE(fd, 0);
		for (size_t i = 0; i < reqs.size(); i++) {
			ASSERT_EQ(pread(fd, back.data(), len, static_cast<off_t>(base + i * len)),
			          static_cast<ssize_t>(len));
			ASSERT_EQ(std::memcmp(back.data(), reqs[i].iov[0].iov_base, len), 0)
			    << "write " << i << " at " << base + i * len;
		}
		close(fd);
	}
};

} // namespace ulp::scsi::bs_test
