// SPDX-License-Identifier: MIT
// core/drain.h - queue drain: ib_drain_sq / ib_drain_rq / ib_drain_qp (core/verbs.c).
//
// A ULP tears a connection down by moving the QP to ERR and waiting until every WR it
// posted has come back through its cqe->done, so that no request context is freed while
// the hardware (or a poller thread) may still complete it. The kernel does this by posting
// a marker after the QP is in ERR: a zero-length RDMA WRITE on the send queue, an empty
// receive on the receive queue. The WRs of a queue in ERR complete with WR_FLUSH_ERR in
// the order they were posted, and one CQ is processed by one thread at a time in CQ order
// (cq_poll/), so the marker's done() runs only after every earlier WR's done().
//
// Callers reserve room for the markers: +1 send WR, +1 receive WR and +2 CQ entries per QP
// (the kernel's rule; ULPs that forget it hit -ENOMEM here, which drain retries until its
// deadline instead of failing at once).
//
// Who dispatches the marker's completion depends on the CQ's poll context (Cq::poll_ctx):
//   Direct      nobody else polls: drain calls cq.process_direct() while it waits.
//   BusyPoll    the poll group's thread does; drain called *on* that thread polls itself
//               (process_direct only polls there), so a group can drain its own QPs.
//   threaded    (Softirq, Workqueue, UnboundWorkqueue) the poller threads do.
//   None        a CQ cq_poll/ does not manage: the owner's polling loop does.
//
// Departures from the kernel, on purpose:
//   - Every wait is bounded by `timeout` (the kernel's wait_for_completion is not): on
//     expiry drain logs to stderr and returns -ETIMEDOUT. The marker's context is then
//     left to the completion, which frees it if it ever comes, so a late flush never
//     writes to a dead stack frame.
//   - A QP in RESET has nothing to drain: 0 at once (the kernel would post to it and fail).
//   - drain_qp on an SRQ QP waits for LAST_WQE_REACHED *before* the send-queue marker.
//     When the send and receive CQ are one CQ (the usual ULP layout) the marker then
//     completes after every receive flush of this QP, so drain_qp returns only when all of
//     them have been dispatched too. The kernel waits for the event after draining the SQ
//     and then polls the CQ only if it is DIRECT.
//   - LAST_WQE_REACHED is waited for only on devices that advertise DEVICE_LAST_WQE_EVENT;
//     rxe, siw and the soft provider's iWARP profile never raise it, and the kernel would
//     sit out its 60 s bound on them for nothing.
#pragma once

#include "core/device.h"

#include <chrono>

namespace ulp
{

// How long a drain waits for one marker (or for LAST_WQE_REACHED) before giving up.
// drain_qp waits at most twice: once per queue.
inline constexpr std::chrono::milliseconds kDrainTimeout{10000};

// Move qp to ERR and return once every send WR posted before the call has been completed
// and dispatched. 0; -ETIMEDOUT (logged); or the errno of the failing modify/post.
// Must not run concurrently with post_send on the same QP (nor may drain_rq with
// post_recv), as in the kernel.
int drain_sq(Qp &qp, std::chrono::milliseconds timeout = kDrainTimeout);

// The same for the receive queue. -EINVAL for a QP on an SRQ (it has no receive queue of
// its own: use drain_qp).
int drain_rq(Qp &qp, std::chrono::milliseconds timeout = kDrainTimeout);

// drain_sq and drain_rq; for a QP on an SRQ, the LAST_WQE_REACHED wait instead of
// drain_rq (see above). The first error is returned; both queues are always attempted.
int drain_qp(Qp &qp, std::chrono::milliseconds timeout = kDrainTimeout);

} // namespace ulp
