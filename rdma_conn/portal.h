// SPDX-License-Identifier: MIT
// rdma_conn/portal.h - what every RDMA ULP connection shares, from listening to freeing: the
// portal (an RDMA/CM listener with its per-device resources and its event thread) and the
// connection's RDMA half (QP, CQ from the pool, rw contexts, bounded drain). iSER and SRP
// are two protocols over this one mechanism; the kernel has no such
// layer and each ULP repeats it with its own bugs (isert, srpt).
//
// A portal:
//   - listens on HOST:PORT through a Provider (the soft one or rdma-core's);
//   - on a CONNECT_REQUEST asks the protocol (on_connect_request) with the request's private
//     data and the device's resources (a PD and a registered data heap, made once per
//     device): the protocol answers with a connection to accept and the accept's
//     parameters (private data included), or with the reject's private data;
//   - runs an event thread that ticks every connection's timers, runs events posted for the
//     event thread (kick: post_deferred), drains the connections that close
//     (schedule_close) and frees those that are drained and finished, in that order;
//   - on stop: stops the thread, frees what is finished, and leaves allocated (logged)
//     anything that is not: freeing it could let a late completion touch freed memory;
//   - when a device goes away (RDMA_CM_EVENT_DEVICE_REMOVAL, e.g. `rdma link del`): its
//     connections close on their own events; once none is left (bounded: removal_bound,
//     logged when passed), the device's resources are freed and, when no portal of the
//     process uses it any more, the provider lets it go (Provider::device_released: the
//     kernel's removal waits for that). A listener on the device is destroyed and the
//     address listened on again every relisten_period until a device has it again
//     (logged), so that a device that comes back is served without a restart.
//
// A connection (PortalConn, the protocol's connection derives from it) owns its CM id (and
// through it the QP), its CQ from the device's CQ pool (cq_poll/, Softirq context: see
// PortalConfig::poll_ctx), and
// its rw contexts (RwQp). Teardown is always: the protocol stops new work and disconnects
// (the QP goes to ERR), schedule_close(); the event thread drains the QP (bounded: every WR
// posted completes, flushed, through its done()), and once the protocol says finished()
// (every command released), detach() and release_resources() run and the object is freed.
// Nothing waits forever: the drain is bounded, and an unfinished connection is logged each
// time the portal stops.
#pragma once

#include "core/bounded_thread.h"
#include "core/cm.h"
#include "core/dma_heap.h"
#include "core/registry.h"
#include "rdma_conn/send_plug.h"
#include "rw/rw.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace ulp::rdma
{

class Portal;

struct PortalConfig {
	const char *name = "rdma";      // the protocol, for thread names and log lines ("iser")
	size_t heap_bytes = 256u << 20; // data buffers per device (DmaHeap), bytes
	size_t max_io = 16u << 20;      // largest data buffer (a power of two), bytes
	int vector_hint = -1;           // CQ pool completion vector; -1: round robin
	// Who runs the connections' completions. Softirq: the poller thread of the CQ's vector
	// takes its event and runs done() itself, so a connection's I/O stays on that one
	// thread. Workqueue (what ib_srpt and isert ask of the kernel) hands each
	// event from the poller to a completion worker: a second thread and a lock shared by
	// every worker on each event, which userspace pays for and the kernel's per-CPU
	// kworker does not.
	PollCtx poll_ctx = PollCtx::Softirq;
	std::chrono::milliseconds drain_timeout{10000};  // drain_qp's bound per queue
	std::chrono::milliseconds tick{100};             // the connections' timer period
	std::chrono::milliseconds relisten_period{1000}; // listen again after a device removal
	std::chrono::milliseconds removal_bound{30000};  // a removed device's connections gone
};

// What a device needs once, for every connection of a portal on it.
struct DeviceRes {
	Device *dev = nullptr;
	std::unique_ptr<Pd> pd;
	std::unique_ptr<DmaHeap> heap; // data buffers: the target side of every RDMA transfer
};

// What a portal's connections hold now (ulpctl stats), summed over them.
struct PortalRes {
	uint64_t conns = 0;      // connections (accepted, not yet freed)
	uint64_t qps = 0;        // of them with a QP
	uint64_t cq_entries = 0; // CQ entries they reserve in the devices' CQ pools
	uint64_t mrs_used = 0;   // MRs of their rw contexts' pools handed out now
	uint64_t mrs = 0;        // MRs in those pools
	uint64_t heap_used = 0;  // bytes of the devices' registered data heaps in use
	uint64_t heap_bytes = 0; // bytes those heaps have
};

// The RDMA half of one connection, as its portal manages it.
class PortalConn
{
public:
	virtual ~PortalConn();
	PortalConn(const PortalConn &) = delete;
	PortalConn &operator=(const PortalConn &) = delete;

	CmId &id() { return *id_; }
	Qp *qp() { return id_ ? id_->qp() : nullptr; }
	Cq *cq() { return cq_; }
	RwQp *rwqp() { return rwqp_.get(); }
	Portal &portal() { return portal_; }

	// ---- The protocol's part ------------------------------------------------------------
	// CM thread: an event on the connection's id (Established, Disconnected, ...).
	virtual void on_cm_event(CmEvent &ev) = 0;
	// Event thread, every tick: timers (the protocol takes its own lock).
	virtual void tick(std::chrono::steady_clock::time_point now) = 0;
	// Event thread: run the events posted for it (post_deferred's kick).
	virtual void run_kicked() = 0;
	// Event thread, once drained: every command released and nothing left to do, under the
	// protocol's own lock. True: the portal detaches and frees the connection.
	virtual bool finished() = 0;
	// Event thread, after finished(): unhook from the protocol's tables (no more posts).
	virtual void detach() {}
	// Event thread, after detach(): free everything but the object. The default frees the
	// RDMA half (rw contexts, then the id with its QP, then the CQ); a protocol frees its own
	// (rings, buffers) and then calls this.
	virtual void release_resources();
	// For log lines ("10.0.0.2:41000 (login)").
	virtual std::string describe() = 0;

	// ---- The portal's part ---------------------------------------------------------------
	// Event thread, after the protocol disconnected: every WR posted completes (flushed),
	// bounded by the portal's drain_timeout per queue; then the send plug's pieces still
	// waiting for a later completion end flushed (send_plug.h). Not under the protocol's
	// lock: the flushes come back through it.
	void drain();
	bool drained() const { return drained_.load(std::memory_order_acquire); }

protected:
	PortalConn(Portal &portal, std::unique_ptr<CmId> id);

	// The QP on the connection's id: a CQ of max_send_wr + max_recv_wr + 2 (drain) entries
	// from the device's pool for both queues, rw contexts for qa.cap.max_rdma_ctxs (rw_init_qp
	// grows the send queue by what they need: pass ro, or null for none). qa's caps must
	// already count drain's +1 send and +1 receive WR. 0, or a negative errno with *why.
	int create_qp(Pd &pd, QpInitAttr qa, const RwQpOptions *ro, std::string *why);

	// ---- The send plug (send_plug.h), the holder of the connection's -----------------------
	// Post p, WRs from first (already counted by the protocol as posted): at the end of this
	// thread's turn (core/turn.h) with every other piece the connection gets until then, as
	// one chain (or with the kPlugMax - 1 before it, when it is the kPlugMax-th); at once
	// outside a turn or once the plug is closed.
	void post_plugged(PlugPiece *p, SendWr *first);
	// Post what the plug holds now. On a refusal, plug_failed(rc) and then each piece's
	// unsent() end what did not go out.
	void flush_plug();
	// The protocol's flush event, which post_plug_flush() asked for: the turn has ended.
	void plug_turn_ended()
	{
		plug_due_ = false;
		flush_plug();
	}
	// The connection closes: what the plug holds is posted now (ahead of the disconnect, so
	// that it may still go out; else it is flushed and completes as usual), and whatever is
	// plugged from now on is posted at once.
	void close_plug()
	{
		plug_closed_ = true;
		flush_plug();
	}
	// A flush event is due: the connection must not be freed before it ran (finished()).
	bool plug_due() const { return plug_due_; }
	// The protocol: run plug_turn_ended() holding the connection, soon: posts its flush event
	// to its serialiser (core/serial.h), which runs it on this thread when the connection is
	// free, else has the holder run it before it lets go. Called at the end of the turn
	// that plugged, on its thread, holding nothing. Only a protocol that calls post_plugged
	// is asked; the default aborts.
	virtual void post_plug_flush();
	// The protocol, holding the connection: post_send refused what the plug held (rc): close
	// (the unsent pieces are ended after this returns). The default does nothing.
	virtual void plug_failed(int rc) { (void)rc; }

	Portal &portal_;
	std::unique_ptr<CmId> id_;   // owns the QP
	std::unique_ptr<RwQp> rwqp_; // rw contexts and their MR pool, over id_'s QP
	Cq *cq_ = nullptr;           // from the device's CQ pool, send and receive
	unsigned cq_entries_ = 0;    // taken from the pool

private:
	friend class Portal;
	static void plug_turn_end(void *conn); // core/turn.h's callback: post_plug_flush()

	SendPlug plug_;            // pieces waiting for the end of the turn (the holder's)
	bool plug_due_ = false;    // post_plug_flush() is deferred to a turn end or was called,
	                           // and plug_turn_ended() has not run yet (the holder's)
	bool plug_closed_ = false; // close_plug() ran: post at once (the holder's)
	std::atomic<bool> drained_{false};
	// For Portal::resources, read under the portal's lock: whether the QP exists, the CQ
	// entries taken, and res_lock_ around rwqp_'s creation and reset (its MR pool is read).
	std::atomic<bool> gauge_qp_{false};
	std::atomic<uint32_t> gauge_cqe_{0};
	std::mutex res_lock_;
};

class Portal
{
public:
	Portal(Provider &provider, const PortalConfig &cfg);
	// Stops (stop()) first.
	virtual ~Portal();
	Portal(const Portal &) = delete;
	Portal &operator=(const Portal &) = delete;

	// Listen on addr (its device is the one the provider binds the address to). Port 0: the
	// provider picks (port() tells). 0, or a negative errno with *why.
	int listen(const SockAddr &addr, std::string *why);
	uint16_t port() const { return port_; }
	// Listening now: false after stop_accepting, and while the listener's device is gone.
	bool listening() const;
	std::string addr() const; // "HOST:PORT" listened on
	// The device the listening address is bound to (null: a wildcard address, or not
	// listening).
	Device *listen_device() const;
	int start(); // the event thread; 0 or a negative errno

	void stop_accepting(); // destroy the listening id (connections stay)
	// Stop the event thread and free what is finished; the rest is left allocated and
	// logged. The protocol has closed its connections first (they drain here).
	void stop();

	size_t conns();
	PortalRes resources(); // what its connections and devices hold now
	uint64_t accepted();
	uint64_t rejected();

	// For the connections (any thread).
	const PortalConfig &cfg() const { return cfg_; }
	void schedule_close(PortalConn *c); // drain and reap c on the event thread
	void kick(PortalConn *c);           // run c's kicked events on the event thread

protected:
	// CM thread: a connection request on the listener. The protocol takes ev.new_id and
	// returns the connection to accept, with the accept's parameters in *accept; or leaves
	// the id in ev and returns null, with the reject's private data in *reject (empty: a
	// plain reject). res: the device's PD and data heap.
	virtual std::unique_ptr<PortalConn> on_connect_request(CmEvent &ev, DeviceRes &res,
	                                                       ConnParam *accept,
	                                                       std::vector<uint8_t> *reject) = 0;
	// CM thread: accept() of c failed with rc: the protocol takes it down the usual way
	// (receives may be posted: close, drain, reap).
	virtual void accept_failed(PortalConn *c, int rc) = 0;
	// stop(), once every connection is gone: free what the protocol made on the device
	// (an SRQ) before its data heap and PD go.
	virtual void release_device(DeviceRes &) {}

private:
	void on_cm_event(CmId *id, CmEvent &ev);
	void on_connect_request(CmEvent &ev);
	// create_id, bind, listen: into *out. 0, or a negative errno with *why.
	int open_listener(const SockAddr &addr, std::unique_ptr<CmId> *out, std::string *why);
	// Device removal. CM thread: note it (the id's device; the listener's or a
	// connection's). Event thread, lock_ not held: destroy a listener that lost its device,
	// free a removed device's resources once no connection uses it, listen again.
	void note_removal(CmId *id);
	void handle_removals();
	void try_relisten();
	// Free what the portal made on dev (lock_ not held), and let the provider close dev
	// when no portal of the process uses it any more.
	void free_device_res(Device *dev, DeviceRes &r);
	DeviceRes *device_res(Device &dev, int *err); // under lock_; null: *err an errno
	void event_loop();
	void reap(const std::vector<PortalConn *> &all); // free those done (event thread)

	// A device reported removed, until its resources are freed.
	struct Removal {
		Device *dev = nullptr;                       // the device (the object outlives it)
		std::chrono::steady_clock::time_point since; // when DEVICE_REMOVAL came
		bool announced = false;                      // logged (event thread)
		bool overdue = false;                        // removal_bound passed (logged)
	};

	Provider &provider_;
	PortalConfig cfg_;
	uint16_t port_ = 0;
	std::string addr_;
	SockAddr listen_addr_; // bound and listened on (its port fixed): what is listened on again

	mutable std::mutex lock_;         // guards everything below
	std::unique_ptr<CmId> listen_id_; // null: not listening (destroyed outside lock_)
	bool accepting_ = true;           // false after stop_accepting: never listen again
	bool relisten_ = false;           // the listener's device went away: listen again
	std::chrono::steady_clock::time_point lost_at_;     // when the listener's device went
	std::chrono::steady_clock::time_point next_listen_; // the next try
	std::chrono::steady_clock::time_point listen_said_; // the last "cannot listen" line
	uint64_t listen_tries_ = 0;                         // failed tries since lost_at_
	std::vector<Removal> removals_;
	std::condition_variable cv_; // event thread work
	std::map<Device *, DeviceRes> devices_;
	std::vector<std::unique_ptr<PortalConn>> conns_; // every connection, owned
	std::vector<PortalConn *> closing_;              // to drain on the event thread
	std::vector<PortalConn *> kicked_;               // to run events for on the event thread
	bool stop_ = false;
	uint64_t accepted_ = 0;
	uint64_t rejected_ = 0;
	BoundedThread thread_;
};

} // namespace ulp::rdma
