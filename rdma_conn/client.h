// SPDX-License-Identifier: MIT
// rdma_conn/client.h - the active side of an RDMA ULP connection: what the iSER and SRP
// initiators share (portal.h is the passive side).
//
// An initiator has no thread of its own: its owner (the iSCSI session's thread, the SRP
// initiator's caller) connects, posts, polls and tears down on one thread. Two things
// happen elsewhere and are handed to that thread:
//   - CM events come on the provider's CM thread. ClientConn copies each into a mailbox
//     (CmRec, under a lock) and makes an eventfd readable; the owner takes them on its own
//     thread (connect's bounded waits, take_events).
//   - Completions land on a CQ nobody else polls (PollCtx::Direct) created on a completion
//     channel (DirectCq), so the owner can sleep on the channel's fd instead of spinning
//     and run every done() itself.
// wait_events sleeps on both at once.
//
// connect() is rdma_cm's active sequence (rdma_resolve_addr, rdma_resolve_route,
// rdma_create_qp, rdma_connect; the kernel's iser_connect and srp_connect_ch), every step
// bounded by one deadline: the owner's setup callback makes the PD, CQ and QP once the
// route names the device. A REJECTED answer is returned with its private data (SRP's
// SRP_LOGIN_REJ, an iSER target's reason): the protocol decodes it.
//
// Teardown (drain(), or stop() and later drain()): the QP to ERR first (rdma_disconnect
// does it for a connected QP), so that it starts no new RDMA of the peer's into the owner's
// memory; then every WR posted comes back flushed through its
// done() (core/drain.h, bounded and logged); only then may the owner free what those WRs
// point at (buffers, MRs), and release() destroys the QP and the id.
//
// The before-DISCONNECTED rule (take_events): what the target sent before it disconnected
// (an iSCSI Logout Response, SRP_T_LOGOUT) is in the CQ already, because RC delivers it
// first and the CM event comes out of band; it is reaped from the CQ before the
// disconnect is acted upon, or it would be flushed unseen.
#pragma once

#include "core/cm.h"
#include "core/registry.h"
#include "cq_poll/cq_poll.h"

#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>

namespace ulp::rdma
{

// A CM event as the owner's thread sees it (copied off the CM thread).
struct CmRec {
	CmEventType type = CmEventType::AddrError; // the event
	int status = 0;                            // 0 or a negative errno (a reject's reason)
	ConnParam param;                           // Established / Rejected: the peer's data
};

// What connect() needs.
struct ClientParams {
	Provider *provider = nullptr;                   // the fabric
	SockAddr dst;                                   // the target's address and port
	std::optional<SockAddr> src;                    // bind to this address (port 0)
	std::chrono::steady_clock::time_point deadline; // the whole sequence's bound
	// Owner's thread, once the route is resolved (id.device() is set): make the PD, CQ
	// and QP (id.create_qp; its caps counting drain's +1 send and +1 receive WR), post
	// what must be posted before the peer can answer, and fill *cp (private data, RDMA
	// READ credits). 0, or a negative errno with *why.
	std::function<int(CmId &id, ConnParam *cp, std::string *why)> setup;
};

// A client connection's life; change_state checks every step against kClientStates.
enum class ClientState : uint8_t {
	Idle,       // constructed -> Connecting | Stopped
	Connecting, // id made; address, route, QP, CM connect -> Up | Stopped
	Up,         // ESTABLISHED came -> Stopped
	Stopped,    // disconnected, QP in ERR; WRs may still be coming back -> Drained
	Drained,    // every WR posted has completed (or drain gave up, logged): final
};
const char *client_state_str(ClientState s);

// One active RDMA/CM connection: its id (which owns the QP), the id's CM event mailbox
// and the eventfd that announces it. Owner's thread only, but for the CM handler, which
// touches only the mailbox (lock_) and the eventfd. Not movable: the CM handler holds
// this.
class ClientConn
{
public:
	ClientConn() = default;
	~ClientConn(); // stop() and release(): the owner drained first (or nothing was posted)
	ClientConn(const ClientConn &) = delete;
	ClientConn &operator=(const ClientConn &) = delete;

	// The active sequence (see the top of this file). 0: Up, *reply holds the
	// ESTABLISHED event (the accept's private data). Otherwise a negative errno with *why
	// ("resolve ...", "route to ...", "connect ...", or setup's own words) and the state
	// Stopped: -ECONNREFUSED for a reject (*reply holds it, with the reject's private
	// data), -ETIMEDOUT when the deadline passed, -EHOSTUNREACH for an address or route
	// error or a peer that does not answer (no listener).
	int connect(const ClientParams &p, CmRec *reply, std::string *why);

	ClientState state() const { return state_; }
	CmId *id() const { return id_.get(); }
	Qp *qp() const { return id_ ? id_->qp() : nullptr; }
	Device *device() const { return id_ ? id_->device() : nullptr; }
	int fd() const { return evfd_; } // readable while the mailbox may hold events (-1: none)

	// Owner's thread, Up: take the mailbox's events. The first that ends the connection
	// (DISCONNECTED, DEVICE_REMOVAL, CONNECT_ERROR, UNREACHABLE, REJECTED) is returned as a
	// reason; for DISCONNECTED, reap() is called first until it returns false (the
	// before-DISCONNECTED rule above). The rest are dropped (ib_srp only logs them).
	std::optional<std::string> take_events(const std::function<bool()> &reap);
	// Consume the eventfd's count (wait_events does it).
	void clear_fd();

	// The QP to ERR: disconnect it if it was Up, and modify a QP that never connected.
	// From then on it starts no RDMA; WRs posted come back flushed. Idempotent; safe from
	// inside a completion callback.
	void stop();
	// The whole close: stop(), then wait until every WR posted has completed and been
	// dispatched (drain_qp, bounded by timeout per queue; logged when it gives up). Not from
	// inside a done() of this QP's CQ: the owner dispatches the flushes itself. 0 or
	// -ETIMEDOUT.
	int drain(std::chrono::milliseconds timeout);
	// Destroy the QP, then the id (which waits out a running CM handler). After drain();
	// and after the owner destroyed its fast-registration MRs (rxe's memory windows hold
	// their QP: the kernel's rdma_rw_cleanup_mrs before ib_destroy_qp).
	void destroy_qp();
	void release();

private:
	// A bounded wait for the next event: true if it is want. Otherwise *why says what came
	// instead (*out holds it) or that nothing came before deadline.
	bool wait_cm(CmEventType want, std::chrono::steady_clock::time_point deadline, CmRec *out,
	             std::string *why);
	int fail_connect(int rc, std::string w, std::string *why);

	ClientState state_ = ClientState::Idle; // owner's thread
	std::unique_ptr<CmId> id_;              // owns the QP
	int evfd_ = -1;                         // the mailbox's doorbell (EFD_NONBLOCK)
	std::mutex lock_;                       // guards cm_
	std::deque<CmRec> cm_;                  // events not yet taken, in order (lock_)
};

// A CQ the owner polls on its own thread (PollCtx::Direct), created on a completion
// channel so that the owner can sleep until a completion comes (CqOptions::channel). Used
// for both queues of one or several QPs of the same device.
class DirectCq
{
public:
	DirectCq() = default;
	~DirectCq() { destroy(); }
	DirectCq(const DirectCq &) = delete;
	DirectCq &operator=(const DirectCq &) = delete;

	// A channel and a CQ of at least cqe entries on dev. 0, or a negative errno with *why.
	int create(Device &dev, int cqe, std::string *why);
	Cq *cq() const { return cq_.get(); }
	explicit operator bool() const { return cq_ != nullptr; }
	int fd() const { return ch_ ? ch_->fd() : -1; }

	// process_cq_direct: up to budget completions, their done() run here; how many.
	// in_process() holds meanwhile (a done() that closes its connection must leave the
	// drain to the owner: drain needs this CQ processed, which cannot happen from inside).
	int process(int budget = kBudget);
	bool in_process() const { return in_process_; }
	// Ask for an event at the next completion (req_notify). Then process once more before
	// sleeping: a completion may have landed before the arm. 0 or a negative errno.
	int arm();
	// Take the channel's pending event: one at most, the CQ being its only one and armed
	// once (wait_events does it).
	void clear_fd();

	// Free the CQ (left allocated, never freed under a user, if free_cq refuses it) and
	// the channel. After every QP on it is destroyed.
	void destroy();

	static constexpr int kBudget = 64; // completions per process() by default

private:
	std::unique_ptr<CompChannel> ch_; // the CQ's events
	CqHandle cq_;                     // Direct, on ch_
	bool in_process_ = false;         // inside process()
};

// The owner's sleep: arm cq and reap once more (reap() > 0: something came, no sleep);
// else poll(2) cq's channel and the conns' mailboxes for at most timeout_ms, and take what
// woke it. cq may be null or not created, conns may hold nulls. 1: reap found work;
// 0: slept (woken, timed out or interrupted); a negative errno with *why for a failed arm
// or poll.
int wait_events(DirectCq *cq, std::span<ClientConn *const> conns, int timeout_ms,
                const std::function<int()> &reap, std::string *why);

} // namespace ulp::rdma
