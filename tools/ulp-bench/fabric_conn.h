// SPDX-License-Identifier: MIT
// tools/ulp-bench/fabric_conn.h - the two ends of one benchmark connection on the soft
// provider (or both on one verbs device, --device), set up through the CM (core/cm.h) like
// any ULP would.
//
//   Responder: listens, accepts one connection, exposes one registered buffer for RDMA
//              WRITE/READ (address, rkey and length go back in the accept's private data)
//              and keeps its receive queue full for SEND. It lives in this process
//              (in-process wire) or in a `ulp-bench fabric-peer` child (ring or packet
//              wire, as the requester's device asks).
//   Requester: resolves, connects and drives the send queue.
//
// Every wait is bounded; a failure prints what failed and ends the process (fatal(),
// report.h), killing the peer process first.
#pragma once

#include "core/cm.h"
#include "core/device.h"
#include "core/dma_mem.h"
#include "core/registry.h"
#include "tools/ulp-bench/report.h"

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace ulp::bench
{

// A peer process fatal() (report.h) kills (alive), or no longer (reaped).
void set_peer_pid(pid_t pid, bool alive);

constexpr uint32_t kMaxMsg = 1u << 20;      // largest message; buffers are this big
constexpr int kCmTimeoutMs = 10000;         // any CM step
constexpr int kCompletionTimeoutMs = 10000; // no completion progress for this long: fatal

// What the responder tells the requester in the accept's private data.
struct RemoteBuf {
	uint64_t addr = 0;
	uint32_t rkey = 0;
	uint32_t length = 0;
};

// CM events of one id (or of a listener and the ids it spawned), as a queue the owner
// waits on with a timeout.
class CmEvents
{
public:
	struct Ev {
		CmId *id = nullptr;
		CmEventType type = CmEventType::AddrError;
		int status = 0;
		ConnParam param;
	};
	void push(CmId *id, const CmEvent &ev);
	// Wait for the next event; fatal() after timeout_ms.
	Ev wait(const char *what, int timeout_ms = kCmTimeoutMs);
	// Wait for an event of type want (others are discarded); false on timeout.
	bool wait_for(CmEventType want, int timeout_ms, Ev *out = nullptr);

private:
	std::mutex mu_;
	std::condition_variable cv_;
	std::deque<Ev> q_;
};

// The shared device setup of one side: PD, CQs, one registered buffer.
struct Side {
	Device *dev = nullptr;
	std::unique_ptr<Pd> pd;
	std::unique_ptr<CompChannel> channel; // for the CQs that sleep-wait
	std::unique_ptr<Cq> send_cq;
	std::unique_ptr<Cq> recv_cq;
	std::unique_ptr<DmaRegion> mem;
	std::unique_ptr<Mr> mr;

	// send_ch / recv_ch: that CQ raises events on the side's completion channel. vector:
	// the CQs' completion vector (modulo the device's; on a soft device it picks the QP's
	// engine).
	void init(Device *dev, size_t bytes, int send_cqe, int recv_cqe, bool send_ch, bool recv_ch,
	          int vector = 0);
	void fini(); // MR, CQs, channel, PD (the QP must be gone)
};

class Responder
{
public:
	// Bind a listener on ip, trying ports from a pid-derived base; fatal() if none.
	// with_channel: receive completions raise events on a completion channel (a peer
	// process sleeps on it); otherwise the owner calls reap() from its own loop.
	// prov makes the CM ids (the device's provider). vector: the CQs' completion vector.
	void start(Device *dev, Provider *prov, const std::string &ip, bool with_channel,
	           int vector = 0);
	uint16_t port() const { return port_; }

	// Reap receive completions and re-post the receives; returns how many. Thread: the
	// owner's (one thread at a time).
	int reap();
	// Peer process main loop: poll while receives arrive, else sleep on the channel,
	// until the requester disconnects or deadline_s passes. Returns 0 on a clean
	// disconnect.
	int serve(int deadline_s);

	bool disconnected() const { return disconnected_.load(); }
	void stop(); // disconnect if still connected, destroy everything

private:
	struct RecvCtx {
		Cqe cqe;
		Responder *self;
		uint32_t slot;
	};
	void on_event(CmId *id, CmEvent &ev);
	void post_recvs(); // post repost_ as one chain

	Side side_;
	uint16_t port_ = 0;
	uint32_t rq_depth_ = 0;
	std::vector<RecvCtx> recvs_;
	std::vector<uint32_t> repost_; // slots reaped, to post again (owner thread)
	std::vector<RecvWr> wrs_;      // the chain post_recvs() builds (owner thread)
	std::unique_ptr<CmId> listen_id_;
	std::mutex conn_mu_;
	std::unique_ptr<CmId> conn_id_;
	CmEvents events_;
	std::atomic<bool> established_{false};
	std::atomic<bool> disconnected_{false};
	std::atomic<bool> flushed_{false}; // a receive was flushed: the QP is in ERR
};

class Requester
{
public:
	// Connect to ip:port from dev (at src_ip, when the device is not the destination's)
	// and learn the responder's buffer. sq_depth: the deepest send queue a benchmark will
	// keep outstanding. vector: the CQs' completion vector.
	void connect(Device *dev, Provider *prov, const std::string &ip, uint16_t port,
	             uint32_t sq_depth, const std::string &src_ip = "", int vector = 0);
	void disconnect(); // disconnect, wait (bounded) for DISCONNECTED, destroy everything

	Qp *qp() const { return id_->qp(); }
	Cq *send_cq() const { return side_.send_cq.get(); }
	CompChannel *channel() const { return side_.channel.get(); } // the send CQ's
	const Mr &mr() const { return *side_.mr; }
	// Local buffer: [0, kMaxMsg) is the WRITE/SEND source, [kMaxMsg, 2*kMaxMsg) the READ
	// sink.
	uint8_t *src() const { return static_cast<uint8_t *>(side_.mem->addr()); }
	uint8_t *sink() const { return src() + kMaxMsg; }
	bool huge() const { return side_.mem->huge(); }
	const RemoteBuf &remote() const { return remote_; }
	uint32_t max_inline() const { return max_inline_; }
	uint32_t sq_depth() const { return sq_depth_; }

private:
	void on_event(CmId *id, CmEvent &ev);

	Side side_;
	std::unique_ptr<CmId> id_;
	CmEvents events_;
	RemoteBuf remote_;
	uint32_t max_inline_ = 0;
	uint32_t sq_depth_ = 0;
};

// The peer process (the cross-process wires' far end): a re-exec of this binary as
// `ulp-bench fabric-peer --ip IP [--device NAME] EXTRA...`, started before this process
// creates any thread where it can be (the child only execs), told to die with us
// (PR_SET_PDEATHSIG). It reports its listeners' ports once they listen.
struct Peer {
	pid_t pid = 0;
	std::vector<uint16_t> ports; // one per responder, in its order
};
Peer spawn_peer(const std::string &ip, const std::string &device,
                const std::vector<std::string> &extra = {});
// Bounded wait for the peer to exit after the disconnects; kill it when it overstays.
// 0: it exited cleanly.
int reap_peer(Peer &peer);

// Seconds on the steady clock.
double now_s();

// One connected send queue of a Requester and its completion bookkeeping: post WRs that
// carry a slot's cqe, wait (bounded) until a given WR has completed.
struct Stream {
	struct Slot {
		Cqe cqe; // the WC's wr_cqe points here (container_of)
		Stream *s = nullptr;
		uint64_t idx = 0;
	};

	const char *wire = "";
	Requester *req = nullptr;
	Responder *local = nullptr; // in-process responder whose receives we re-post
	std::vector<Slot> slots;
	uint64_t done = 0; // index of the newest completed WR; all older ones are done too

	void init(const char *w, Requester *r, Responder *l);
	// Reap what the send CQ holds; returns how many. fatal() on an error completion.
	int reap(Cq *cq);
	// Wait until WR number target has completed. Busy-poll first (the fast case), then
	// poll with sched_yield (the engine may need this core: a 2-core machine runs this
	// thread, its engine and the peer's), then sleep on the completion channel, as a
	// kernel ULP's poller does; no progress for kCompletionTimeoutMs is fatal.
	void poll_until(uint64_t target);
	void post(RdmaWr &wr, uint64_t idx, bool signaled, uint32_t extra_flags);
	RdmaWr make_wr(WrOpcode op, uint32_t size, Sge *sge) const;
	// Before measuring: WRITE a pattern, READ it back into the sink, compare; then one
	// SEND. Proves the connection moves the right bytes.
	void verify();
};

} // namespace ulp::bench
