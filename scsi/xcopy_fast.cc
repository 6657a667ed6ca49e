// SPDX-License-Identifier: MIT
// scsi/xcopy_fast.cc - the threads that run EXTENDED COPY's in-kernel copies (xcopy.h:
// xcopy_kernel_submit).
//
// copy_file_range(2) blocks for as long as the kernel copies, and a copy's loop may run on a
// TCP worker's event loop (where the command arrived) or a backstore's completion thread,
// neither of which may block. So each chunk is a job for these threads, answered as a
// backstore request is (sbc_step_answer): the copy's loop then goes on here. Two threads,
// started at the first job and kept for the process's life: two copies proceed side by side,
// and every further copy queues its chunk behind theirs (FIFO), so none starves and the
// number of blocked threads stays bounded.
#include "core/signals_blocked.h"
#include "core/thread_name.h"
#include "scsi/sbc_internal.h"
#include "scsi/xcopy.h"

#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

namespace ulp::scsi
{

namespace
{

constexpr unsigned kKernelCopyThreads = 2;

struct KcopyJob {
	Cmd *cmd = nullptr;         // the EXTENDED COPY whose chunk this is
	int (*fn)(Cmd *) = nullptr; // the chunk: 0 or a negative errno
};

struct KcopyPool {
	std::mutex lock;
	std::condition_variable more; // a job was queued
	std::deque<KcopyJob> jobs;    // waiting, oldest first (lock)

	void run()
	{
		set_thread_name("ulp-xcopy");
		std::unique_lock g(lock);
		for (;;) {
			more.wait(g, [&] { return !jobs.empty(); });
			const KcopyJob j = jobs.front();
			jobs.pop_front();
			g.unlock();
			sbc_step_answer(j.cmd, j.fn(j.cmd));
			g.lock();
		}
	}
};

KcopyPool &kcopy_pool()
{
	// Never destroyed: the threads wait on it until the process ends.
	static KcopyPool *p = [] {
		auto *q = new KcopyPool;
		SignalsBlocked blocked; // library threads take no signal (signals_blocked.h)
		for (unsigned i = 0; i < kKernelCopyThreads; i++)
			std::thread([q] { q->run(); }).detach();
		return q;
	}();
	return *p;
}

} // namespace

bool xcopy_kernel_submit(Cmd *cmd, int (*fn)(Cmd *))
{
	KcopyPool &p = kcopy_pool();
	sbc_step_begin(cmd);
	{
		std::lock_guard g(p.lock);
		p.jobs.push_back({cmd, fn});
	}
	p.more.notify_one();
	return sbc_step_handed(cmd);
}

} // namespace ulp::scsi
