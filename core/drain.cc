// SPDX-License-Identifier: MIT
// core/drain.cc - drain_sq / drain_rq / drain_qp (the kernel's __ib_drain_sq, __ib_drain_rq,
// __ib_drain_srq and ib_drain_qp in drivers/infiniband/core/verbs.c). See drain.h.
#include "core/drain.h"

#include "core/log.h"

#include <cerrno>
#include <thread>

namespace ulp
{

namespace
{

using Clock = std::chrono::steady_clock;

// Completions processed per process_direct call while waiting (the kernel passes -1, "all
// of them"; a bounded budget keeps the deadline checks frequent).
constexpr int kDirectBudget = 256;
// How long a waiter on a Direct/BusyPoll CQ sleeps when a poll found nothing, and how long
// a post that found the queue full waits before trying again.
constexpr auto kIdleWait = std::chrono::microseconds(200);

// The marker's context (the kernel's struct ib_drain_cqe). Heap-allocated: if the wait
// gives up, the flush may still come later, and whichever side is last frees it.
struct DrainCqe {
	Cqe cqe;                             // done() recovers the DrainCqe (container_of)
	std::mutex lock;                     // guards the fields below
	std::condition_variable cv;          // signalled by done()
	bool done = false;                   // the marker's completion has been dispatched
	bool abandoned = false;              // the waiter gave up; done() frees the object
	WcStatus status = WcStatus::Success; // the marker's completion status (a flush normally)
};

void drain_done(Cq *, Wc *wc)
{
	auto *d = container_of(wc->wr_cqe, &DrainCqe::cqe);
	std::unique_lock g(d->lock);
	if (d->abandoned) {
		g.unlock();
		delete d;
		return;
	}
	d->done = true;
	d->status = wc->status;
	d->cv.notify_all();
}

bool polls_itself(const Cq &cq)
{
	return cq.process_direct &&
	       (cq.poll_ctx == PollCtx::Direct || cq.poll_ctx == PollCtx::BusyPoll);
}

// Wait for d's completion on cq until deadline, polling cq ourselves when nobody else will.
// true when it came; on false d has been handed over to drain_done (do not touch it).
bool wait_marker(Cq &cq, DrainCqe *d, Clock::time_point deadline)
{
	const bool self = polls_itself(cq);
	for (;;) {
		if (self) {
			{
				std::lock_guard g(d->lock);
				if (d->done)
					return true;
			}
			if (cq.process_direct(cq, kDirectBudget) > 0)
				continue;
		}
		std::unique_lock g(d->lock);
		auto until = self ? std::min(deadline, Clock::now() + kIdleWait) : deadline;
		if (d->cv.wait_until(g, until, [d] { return d->done; }))
			return true;
		if (Clock::now() >= deadline) {
			d->abandoned = true; // drain_done frees it, if the flush ever comes
			return false;
		}
	}
}

// Post wr; while the queue is full (the caller did not reserve the marker's slot, or the
// flushes of a full queue have not been reaped yet) keep reaping and retrying until deadline.
template <typename Wr, typename Post>
int post_marker(Cq &cq, const Wr &wr, Clock::time_point deadline, Post post)
{
	for (;;) {
		const Wr *bad = nullptr;
		int rc = post(&wr, &bad);
		if (rc != -ENOMEM || Clock::now() >= deadline)
			return rc;
		if (!polls_itself(cq) || cq.process_direct(cq, kDirectBudget) == 0)
			std::this_thread::sleep_for(kIdleWait);
	}
}

int to_err(Qp &qp, const char *who)
{
	QpAttr attr;
	attr.qp_state = QpState::Err;
	int rc = qp.modify(attr, QP_STATE);
	if (rc)
		ULP_LOG(Error, Core, "{}: qp {:#x}: modify to ERR failed: {}", who, qp.qp_num(),
		        rc);
	return rc;
}

// Post the marker to one queue of qp (already in ERR) and wait for its flush.
int drain_queue(Qp &qp, bool send, Clock::time_point deadline, std::chrono::milliseconds timeout)
{
	const char *who = send ? "drain_sq" : "drain_rq";
	Cq *cq = send ? qp.send_cq() : qp.recv_cq();
	auto *d = new DrainCqe;
	d->cqe.done = drain_done;

	int rc;
	if (send) {
		// A zero-length RDMA WRITE: legal in every transport, needs no rkey (C9-88), and
		// flushes like any other WR since the QP is already in ERR.
		RdmaWr wr;
		wr.wr_cqe = &d->cqe;
		wr.opcode = WrOpcode::RdmaWrite;
		wr.send_flags = SEND_SIGNALED;
		rc = post_marker(
		    *cq, static_cast<const SendWr &>(wr), deadline,
		    [&qp](const SendWr *w, const SendWr **bad) { return qp.post_send(w, bad); });
	} else {
		RecvWr wr;
		wr.wr_cqe = &d->cqe;
		rc = post_marker(*cq, wr, deadline, [&qp](const RecvWr *w, const RecvWr **bad) {
			return qp.post_recv(w, bad);
		});
	}
	if (rc) {
		ULP_LOG(Error, Core, "{}: qp {:#x}: posting the drain marker failed: {}", who,
		        qp.qp_num(), rc);
		delete d;
		return rc;
	}
	if (!wait_marker(*cq, d, deadline)) {
		ULP_LOG(Error, Core,
		        "{}: qp {:#x}: the marker's flush was not dispatched within {} ms "
		        "({} CQ); giving up",
		        who, qp.qp_num(), static_cast<long long>(timeout.count()),
		        poll_ctx_str(cq->poll_ctx));
		return -ETIMEDOUT;
	}
	delete d;
	return 0;
}

} // namespace

int drain_sq(Qp &qp, std::chrono::milliseconds timeout)
{
	if (qp.state() == QpState::Reset)
		return 0;
	if (int rc = to_err(qp, "drain_sq"))
		return rc;
	return drain_queue(qp, true, Clock::now() + timeout, timeout);
}

int drain_rq(Qp &qp, std::chrono::milliseconds timeout)
{
	if (qp.srq()) {
		ULP_LOG(Error, Core, "drain_rq: qp {:#x} is on an SRQ; use drain_qp", qp.qp_num());
		return -EINVAL;
	}
	if (qp.state() == QpState::Reset)
		return 0;
	if (int rc = to_err(qp, "drain_rq"))
		return rc;
	return drain_queue(qp, false, Clock::now() + timeout, timeout);
}

int drain_qp(Qp &qp, std::chrono::milliseconds timeout)
{
	if (!qp.srq()) {
		int rc = drain_sq(qp, timeout);
		int rc2 = drain_rq(qp, timeout);
		return rc ? rc : rc2;
	}
	if (qp.state() == QpState::Reset)
		return 0;
	if (int rc = to_err(qp, "drain_qp"))
		return rc;

	// The SRQ's share (the kernel's __ib_drain_srq): no marker can be posted to an SRQ for
	// one QP, so wait for LAST_WQE_REACHED, which says no receive completion for this QP
	// will be generated any more (IB spec C11-34.2.1) - on devices that raise it at all.
	auto deadline = Clock::now() + timeout;
	int rc = 0;
	if (qp.device().attr().device_cap_flags & DEVICE_LAST_WQE_EVENT) {
		if (!qp.wait_last_wqe(timeout)) {
			ULP_LOG(Warn, Core,
			        "drain_qp: qp {:#x}: no LAST_WQE_REACHED within {} ms; its "
			        "receive completions may still be in flight",
			        qp.qp_num(), static_cast<long long>(timeout.count()));
			rc = -ETIMEDOUT;
		}
	}
	// Its receive completions are in the recv CQ now. A Direct recv CQ that is not also the
	// send CQ must be reaped here (the send marker below covers a shared one).
	Cq *rcq = qp.recv_cq();
	if (rcq != qp.send_cq() && polls_itself(*rcq))
		while (rcq->process_direct(*rcq, kDirectBudget) > 0 && Clock::now() < deadline) {
		}
	int rc2 = drain_queue(qp, true, Clock::now() + timeout, timeout);
	return rc ? rc : rc2;
}

} // namespace ulp
