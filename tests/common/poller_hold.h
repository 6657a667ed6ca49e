// SPDX-License-Identifier: MIT
// tests/common/poller_hold.h - holds the cq_poll poller thread of a device inside a done()
// callback until the test lets it go: what the device's other Softirq CQs receive meanwhile
// waits in them, and the poller's next pass finds it all at once. For tests that need a known
// batch (a send plug's one post_send per turn) instead of whatever the scheduler makes of a
// stream of completions.
//
// The device must have one completion vector (soft::Limits::num_comp_vectors = 1): cq_poll
// then runs every Softirq CQ of the device on one poller, this one's included. The callback
// comes from a flushed zero-length WRITE on a QP of its own, moved to ERR without a peer.
#pragma once

#include "core/device.h"
#include "cq_poll/cq_poll.h"

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>

namespace ulp::test
{

class PollerHold
{
public:
	PollerHold() = default;
	~PollerHold()
	{
		release();
		qp_.reset(); // before its CQ: free_cq refuses a CQ a QP uses
		cq_.reset();
	}
	PollerHold(const PollerHold &) = delete;
	PollerHold &operator=(const PollerHold &) = delete;

	// Hold dev's poller: true once it is inside the callback (bounded wait).
	bool hold(Device &dev)
	{
		pd_ = dev.alloc_pd();
		cq_ = alloc_cq(dev, 8, 0, PollCtx::Softirq);
		if (!pd_ || !cq_)
			return false;
		QpInitAttr a;
		a.send_cq = cq_.get();
		a.recv_cq = cq_.get();
		a.cap.max_send_wr = 2;
		a.cap.max_recv_wr = 1;
		a.cap.max_send_sge = 1;
		a.cap.max_recv_sge = 1;
		qp_ = pd_->create_qp(a);
		if (!qp_)
			return false;
		// RESET -> INIT -> ERR (the soft provider leaves a QP in RESET on a move to ERR).
		QpAttr init;
		init.qp_state = QpState::Init;
		QpAttr err;
		err.qp_state = QpState::Err;
		if (qp_->modify(init, QP_STATE | QP_PORT | QP_ACCESS_FLAGS) != 0 ||
		    qp_->modify(err, QP_STATE) != 0)
			return false;
		cqe_.done = held;
		wr_ = RdmaWr{};
		wr_.opcode = WrOpcode::RdmaWrite;
		wr_.wr_cqe = &cqe_;
		wr_.send_flags = SEND_SIGNALED;
		const SendWr *bad = nullptr;
		if (qp_->post_send(&wr_, &bad) != 0)
			return false;
		std::unique_lock g(lock_);
		return cv_.wait_for(g, std::chrono::seconds(5), [&] { return entered_; });
	}

	// Let the poller go on (idempotent).
	void release()
	{
		std::lock_guard g(lock_);
		released_ = true;
		cv_.notify_all();
	}

private:
	static void held(Cq *, Wc *wc)
	{
		PollerHold *h = container_of(wc->wr_cqe, &PollerHold::cqe_);
		std::unique_lock g(h->lock_);
		h->entered_ = true;
		h->cv_.notify_all();
		// Bounded: a test that forgets to release does not hang the poller for ever.
		h->cv_.wait_for(g, std::chrono::seconds(10), [&] { return h->released_; });
	}

	std::unique_ptr<Pd> pd_;
	CqHandle cq_;
	std::unique_ptr<Qp> qp_;
	Cqe cqe_;
	RdmaWr wr_;
	std::mutex lock_;
	std::condition_variable cv_;
	bool entered_ = false;  // the poller is in the callback (lock_)
	bool released_ = false; // release() was called (lock_)
};

} // namespace ulp::test
