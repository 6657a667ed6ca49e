// SPDX-License-Identifier: MIT
// providers/soft/soft_internal.h - the soft provider's objects.
//
// Locks, in the order they may nest (never the reverse):
//   Engine::lock          run queue, timers, the QP being processed. A device has several
//                         engines; a QP's queued/busy/parked flags are under its own
//                         engine's lock, and no engine's lock is held while another's is
//                         taken (an engine that schedules a QP of another engine, as a
//                         requester moving its responder to ERR does, holds none).
//   SoftQp::state_lock    QP state and peer (modify, error transitions)
//   SoftDevice::mr_lock   MR table and MR state; shared for data copies, exclusive for
//                         reg/dereg/REG_MR/LOCAL_INV. Two devices' locks nest in address
//                         order (copies between devices in one process).
//   SoftQp::rq_lock / SoftSrq::lock   receive queue consumers and producers
//   SoftCq::lock          the completion ring
// The SQ has one producer lock (sq_lock, posting threads) and one consumer (the engine);
// its indices are atomics published with release/acquire.
#pragma once

#include "core/adaptive_mutex.h"
#include "core/device.h"
#include "core/dma_mem.h"
#include "providers/soft/soft.h"

#include <boost/container/small_vector.hpp>
#include <boost/intrusive/list.hpp>
#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <random>
#include <shared_mutex>
#include <thread>
#include <vector>

namespace ulp::soft
{

class SoftDevice;
class SoftPd;
class SoftCq;
class SoftQp;
class SoftSrq;
class SoftMr;
class SockConn;
class Engine;

using Clock = std::chrono::steady_clock;

constexpr uint32_t kMaxSge = 64; // hard ceiling for Limits::max_sge (stack arrays)

// A requester QP in ERR on a cross-process wire: its WRs are flushed only once the peer can
// no longer touch their memory. The peer copies out of our shared regions (a WRITE's or
// SEND's source) and READ data into them when it executes a request, not when we posted
// it, and a flushed WR's buffer is the consumer's again, to reuse at once. So the wire
// tells the peer (the ring's err, the packet wire's Err), and while a request of ours is
// unanswered the flush waits for the peer's acknowledgement: it stops executing our
// requests. A dead peer touches nothing; a silent live one is waited for kErrAckWait, then
// the flush goes ahead with a warning. Engine only (the QP's).
struct ErrQuiesce {
	static constexpr auto kErrAckWait = std::chrono::seconds(1); // a live peer acks in µs
	bool sent = false;                                           // the peer was told
	bool wait = false;            // requests of ours were unanswered: the flush waits
	Clock::time_point deadline{}; // when the wait is given up

	// After telling the peer: unanswered or not. true: flush now; else wait.
	bool start(SoftQp &qp, bool unanswered);
	// true once the flush may go: not waiting, acked, or past the deadline (then a
	// warning naming the wire).
	bool finished(SoftQp &qp, const char *wire, bool acked);
};

struct AtomicCounters {
	// posted and post_sends are bumped by posting threads, the rest by engines: separate
	// cache lines.
	alignas(64) std::atomic<uint64_t> posted{0};
	std::atomic<uint64_t> post_sends{0};
	alignas(64) std::atomic<uint64_t> completed{0};
	std::atomic<uint64_t> errors{0};
	std::atomic<uint64_t> flushes{0};
	std::atomic<uint64_t> bytes_tx{0};
	std::atomic<uint64_t> bytes_rx{0};
	std::atomic<uint64_t> rnr_naks{0};
	std::atomic<uint64_t> max_rd_inflight{0};

	void add(std::atomic<uint64_t> &c, uint64_t v)
	{
		c.fetch_add(v, std::memory_order_relaxed);
	}
	Counters snapshot() const;
};

// ---------------------------------------------------------------------------------------------
// Memory regions

enum class MrState : uint8_t {
	Invalid, // fast-reg MR before REG_MR, or after LOCAL_INV / SEND_WITH_INV
	Valid,   // keys work (user MRs are always Valid)
};

class SoftMr final : public Mr
{
public:
	SoftMr(SoftPd &pd, uint32_t index, void *addr, size_t len, uint32_t access);
	SoftMr(SoftPd &pd, uint32_t index, uint32_t max_num_sg);
	~SoftMr() override;

	SoftDevice &sdev;
	SoftPd &spd;
	uint32_t index; // key_index() of every key this MR ever has

	// Live state, under sdev.mr_lock.
	MrState state;
	uint32_t key;                // current lkey == rkey
	uint32_t access;             // ACCESS_* bits
	uint64_t va;                 // first valid iova
	uint64_t len;                // bytes
	uint32_t page_shift = 12;    // fast-reg page size
	std::vector<uint64_t> pages; // fast-reg page list (preallocated to max_num_sg)
	uint32_t npages = 0;
	const DmaRegion *dma = nullptr; // user MR inside shared memory, else null
	bool user;                      // reg_mr (contiguous) rather than alloc_mr

	// Host address of iova and the bytes contiguous from it (at most max). The caller
	// has checked the range.
	uint8_t *host(uint64_t iova, uint64_t max, uint64_t *n) const;
};

// ---------------------------------------------------------------------------------------------
// Completion queue and channel

class SoftChannel final : public CompChannel
{
public:
	SoftChannel();
	~SoftChannel() override;
	int fd() const override { return epfd_; }
	int get_cq_event(Cq **cq, int timeout_ms) override;

	void raise(SoftCq *cq);
	void forget(SoftCq *cq); // CQ destroyed: drop its pending events

	// Ring wire: the doorbell of connection c (its QP's receive CQ is ours) rings here too;
	// get_cq_event runs c's QP when it does, on the waiter's thread, through c's engine
	// (cq.cc). Both with that engine's lock held; unhand: c leaves its engine.
	void hand(SockConn *c);
	void unhand(SockConn *c);
	// cq (one of ours) was armed: the doorbells of its connections are its waiter's.
	void armed(SoftCq *cq);
	// The engines watch the doorbells of cq's connections (all, for nullptr) alone again:
	// cq or the channel is being destroyed before the QPs.
	void drop_hands(SoftCq *cq);
	bool handed() const { return hand_count_.load(std::memory_order_relaxed) != 0; }

	std::atomic<uint64_t> fd_writes{0}; // ChannelCounters::fd_writes (relaxed)
	std::atomic<uint64_t> fd_reads{0};  // ChannelCounters::fd_reads (relaxed)

private:
	void signal_locked();     // make the eventfd readable (lock_ held)
	void clear_fd();          // read it (fd_set_ just cleared), write back if events came
	void clear_if_idle();     // clear it if set with nothing pending
	void serve();             // run the QPs whose doorbells rang here
	bool take_event(Cq **cq); // the oldest pending event, if any
	struct Hand {
		SockConn *c; // a handed connection; only compared once hand_lock_ is dropped
		Engine *eng; // its engine, read under hand_lock_
	};
	using Hands = boost::container::small_vector<Hand, 4>;
	Hands hands_of(SoftCq *cq); // cq's handed connections (all for nullptr), copied

	int efd_;                           // readable while events_ is not empty (see cq.cc)
	int epfd_;                          // the channel's fd: efd_ and the handed doorbells
	std::mutex lock_;                   // guards events_ and fd_set_ (and efd_'s writes)
	std::deque<SoftCq *> events_;       // CQs whose events are not yet taken, oldest first
	bool fd_set_ = false;               // efd_ written and not read since (see cq.cc)
	std::mutex hand_lock_;              // guards hands_; taken inside an engine's lock, never
	                                    // around a call into an engine
	std::vector<SockConn *> hands_;     // handed connections (hand_lock_)
	std::atomic<size_t> hand_count_{0}; // hands_.size(), read without hand_lock_
};

class SoftCq final : public Cq
{
public:
	SoftCq(SoftDevice &dev, const CqInitAttr &a, int cqe);
	~SoftCq() override;

	int poll(std::span<Wc> wc) override;
	int req_notify(CqNotify flags) override;
	int modify(uint16_t count, uint16_t period_us) override;
	int resize(int cqe) override;
	// Armed: its consumer will sleep on the channel (or does). Read without the lock (an
	// engine about to sleep): a stale answer costs one wake-up or one watchdog period.
	bool armed() const { return armed_.load(std::memory_order_relaxed); }

	// Producer side (engine). solicited: the WR asked for a solicited event.
	void push(const Wc &wc, bool solicited);
	void fire_moderation_timer(uint32_t gen); // the moderation period elapsed

	SoftDevice &sdev;
	Engine &engine; // runs its moderation timers: engine comp_vector % engines (fixed)
	EventHandler event_handler;

private:
	void maybe_raise_locked(bool solicited, bool error);

	std::mutex lock_;
	std::vector<Wc> ring_;           // capacity cqe_+1 slots used as a circular buffer
	uint32_t head_ = 0;              // next slot to fill
	uint32_t tail_ = 0;              // next slot to poll
	std::atomic<uint32_t> count_{0}; // completions in the ring (written under lock_)
	std::atomic<bool> armed_{false}; // req_notify pending (written under lock_)
	CqNotify arm_flags_ = CqNotify::NextComp;
	bool overflowed_ = false; // CQ_ERR raised; completions are being lost
	uint16_t mod_count_ = 0;  // moderation: events after this many completions (0 = off)
	uint16_t mod_period_us_ = 0;
	uint32_t mod_pending_ = 0; // completions since the last event while armed
	bool mod_timer_ = false;   // a moderation timer is scheduled
	uint32_t arm_gen_ = 0;     // bumped by each req_notify; stale moderation timers are ignored
};

// ---------------------------------------------------------------------------------------------
// Queues

struct SendWqe {
	Cqe *wr_cqe;
	WrOpcode opcode;
	uint32_t flags;
	uint32_t num_sge;
	uint32_t imm;
	uint32_t inv_rkey;
	uint64_t remote_addr;
	uint32_t rkey;
	uint32_t inline_len; // bytes held in the slot's inline buffer (SEND_INLINE)
	uint64_t length;     // total payload bytes
	SoftMr *reg_mr;      // REG_MR
	uint32_t reg_key;
	uint32_t reg_access;
	uint64_t reg_iova;
	uint64_t reg_len;
	uint32_t reg_page_size;
	uint32_t rnr_left;  // RNR retries left for this WR (rnr_retry 7 = infinite)
	uint32_t psn;       // socket and ring wires: sequence number it was last sent with
	bool shm;           // socket wire: the packet named a shared region (READ: the sink)
	uint8_t staged;     // ring wire: payload or READ sink in staging (1) or big staging (2)
	uint64_t stage_off; // ring wire, staged: offset in the staging region
	uint64_t stage_end; // ring wire, staged: the staging head to give back at completion
	// A REG_MR or LOCAL_INV executed while earlier WRs were still in flight (socket wire):
	// its completion waits for theirs (a send queue completes in order, as on hardware),
	// and it is not executed again when an RNR NAK rewinds the queue.
	bool local_pending;
	WcStatus local_st;
};

struct RecvWqe {
	Cqe *wr_cqe;
	uint32_t num_sge;
};

// A receive ring, for a QP or an SRQ. Lock held by the owner.
struct RecvRing {
	std::vector<RecvWqe> wqe;
	std::vector<Sge> sge; // depth * max_sge
	uint32_t max_sge = 0;
	uint32_t depth = 0;
	uint32_t head = 0; // next slot to post
	uint32_t tail = 0; // next slot to consume

	void init(uint32_t d, uint32_t ms);
	uint32_t used() const { return head - tail; }
	const Sge *sges(uint32_t slot) const { return &sge[(slot % depth) * max_sge]; }
};

// Outcome of executing one send WQE.
enum class ExecResult : uint8_t {
	Done,    // completed now (success or error in the WC)
	Pending, // transmitted, completion comes with the ACK / READ response (socket wire)
	Stall,   // cannot start yet (RNR wait, READ credit, fence); retry later
};

// A responder's reply in the packet sense: ACK, RNR NAK, or a NAK with an error.
enum class Reply : uint8_t {
	Ack,
	RnrNak,
	NakInvReq, // REM_INV_REQ_ERR at the requester (e.g. receive buffer too small)
	NakAccess, // REM_ACCESS_ERR
	NakOp,     // REM_OP_ERR
	PeerGone,  // no responder: transport retries exhausted
};

// What a responder operation produced; applied by SoftQp::finish_resp without MR locks.
struct RespResult {
	Reply reply = Reply::Ack;
	bool has_wc = false; // push wc to the responder's recv CQ
	bool solicited = false;
	uint32_t inv_rkey = 0;                // SEND_WITH_INV: invalidate this MR first (0 = none)
	bool to_error = false;                // the responder QP enters ERR
	EventType event = EventType::QpFatal; // with to_error: QpReqErr or QpAccessErr
	Wc wc;
};

// A walk over memory in contiguous chunks: a local SGE list (through the MR table, whose
// lock the user holds), one MR range (a remote access), or a flat buffer (inline data,
// packet payloads).
class Cursor
{
public:
	static Cursor sges(SoftDevice &dev, const Sge *sge, uint32_t n);
	static Cursor mr(const SoftMr &mr, uint64_t va, uint64_t len);
	static Cursor flat(const void *p, uint64_t len);

	// Next contiguous chunk of at most max bytes; false at the end.
	bool next(uint8_t **p, uint64_t *n, uint64_t max);

private:
	enum class Kind : uint8_t { Sges, Mr, Flat } kind_ = Kind::Flat;
	SoftDevice *dev_ = nullptr;
	const Sge *sge_ = nullptr;
	uint32_t nsge_ = 0;
	uint32_t i_ = 0; // current SGE
	const SoftMr *mr_ = nullptr;
	uint64_t va_ = 0;   // position in the current SGE / MR
	uint64_t left_ = 0; // bytes left in the current SGE / MR / buffer
	uint8_t *flat_ = nullptr;
	bool started_ = false;
};

// Copy len bytes from src to dst; both must hold at least len.
void cursor_copy(Cursor &dst, Cursor &src, uint64_t len);

// Where a QP's peer lives.
enum class WireKind : uint8_t {
	None,
	InProc, // the peer QP is in this process
	Socket, // packets over a Unix socket (sock_wire.cc)
	Shm,    // shared-memory rings, the socket for control (shm_wire.cc)
};

// The handle other QPs hold on a QP (in-process wire). The QP's destructor clears qp
// under the exclusive lock, so a responder operation never touches a destroyed QP.
struct QpHandle {
	std::shared_mutex lock;
	SoftQp *qp = nullptr;
};

// A timer owned by the engine: RNR retry, delayed completion, CQ moderation.
struct Timer {
	void *owner; // cancelled with the owner (QP, CQ)
	Clock::time_point when;
	std::function<void()> fn;
};

// ---------------------------------------------------------------------------------------------
// QP

class SoftQp final : public Qp
{
public:
	SoftQp(SoftPd &pd, uint32_t qpn, const QpInitAttr &a, const QpCap &cap);
	~SoftQp() override;

	int modify(const QpAttr &attr, uint32_t mask) override;
	int query(QpAttr *attr) override;
	QpState state() const override { return state_.load(std::memory_order_acquire); }
	int post_send(const SendWr *wr, const SendWr **bad_wr) override;
	int post_recv(const RecvWr *wr, const RecvWr **bad_wr) override;

	SoftDevice &sdev;
	SoftPd &spd;
	// Executes this QP, owns its timers and watches its connection: the engine of its send
	// CQ's comp_vector (modulo the engine count), fixed at creation, as a multi-queue NIC
	// steers a QP to one queue.
	Engine &engine;
	SigType sig_type;
	std::shared_ptr<QpHandle> handle; // what peers hold

	// Engine side ----------------------------------------------------------------------
	// Execute queued work; returns WQEs processed. Called with the engine's current slot.
	int process(int budget);
	// Move to ERR (reason: for the async event; nullptr = none) and schedule the flush.
	void to_error(const EventType *event);
	// Responder entry points, shared by both wires. Called with this device's mr_lock
	// held shared (and the source/sink device's); the caller applies the result with
	// finish_resp() after dropping the locks.
	RespResult resp_send(Cursor &src, uint64_t len, WrOpcode op, uint32_t imm,
	                     uint32_t inv_rkey, bool solicited, uint32_t src_qpn);
	RespResult resp_write(Cursor &src, uint64_t len, uint64_t va, uint32_t rkey, bool with_imm,
	                      uint32_t imm, uint32_t src_qpn, bool solicited);
	RespResult resp_read(Cursor &dst, uint64_t len, uint64_t va, uint32_t rkey);
	void finish_resp(RespResult &r);

	bool take_recv(RecvWqe *wqe, Sge *sges);
	bool remote_ok(uint32_t need) const;
	ExecResult rnr_wait(uint32_t slot, uint32_t usec);
	ExecResult finish_req(uint32_t slot, Reply reply, uint64_t total);
	// Complete the executed local WRs (local_pending) now at the front of the in-flight
	// window, in order (called where sq_acked advances, by whoever runs the QP).
	void retire_local();
	WcStatus exec_local(const SendWqe &w);         // a REG_MR's or LOCAL_INV's effect
	void attach_wire(std::shared_ptr<SockConn> c); // its connection, once connected
	void detach_wire(); // forget the peer (socket: close the connection)

	// The fields below are under engine's lock (this QP's engine, never another's).
	boost::intrusive::list_member_hook<> run_hook; // the engine's run queue
	bool queued = false;                           // on the run queue
	bool busy = false;     // being processed (by the engine, or by its poster: Engine::post)
	bool more = false;     // stopped on budget; engine requeues
	bool rerun = false;    // the engine found it busy with its poster (Engine::post): requeue
	bool parked = false;   // off limits to the engine (teardown, reset)
	void *cm_id = nullptr; // the SoftCmId owning us, if any

	AtomicCounters ctr;

	// Send queue ---------------------------------------------------------------------------
	std::mutex sq_lock; // producers (post_send)
	std::vector<SendWqe> sq;
	std::vector<Sge> sq_sge;        // depth * max_send_sge
	std::vector<uint8_t> sq_inline; // depth * max_inline
	uint32_t sq_depth;
	std::atomic<uint32_t> sq_head{0}; // next slot to post (sq_lock)
	std::atomic<uint32_t> sq_tail{0}; // oldest unreleased slot (engine)
	uint32_t sq_next = 0;             // next slot to execute (engine)
	uint32_t sq_acked = 0;            // next slot to complete; [acked,next) in flight (engine)
	uint32_t rd_inflight = 0;         // READs in flight (socket and ring wires; engine)
	uint32_t tx_psn = 0;              // socket and ring wires: next request sequence number
	uint32_t rx_psn = 0;              // socket wire: next request expected as responder
	Clock::time_point rnr_until{};    // head WR waits for an RNR timer until then (engine)

	// Receive queue (when not on an SRQ) ----------------------------------------------------
	std::mutex rq_lock;
	RecvRing rq;

	// Connection --------------------------------------------------------------------------
	std::mutex state_lock;
	std::atomic<QpState> state_{QpState::Reset};
	QpAttr attr; // as last modified (state_lock)
	// Copies of the attributes the data path reads without state_lock (set in modify).
	std::atomic<uint32_t> access_flags{0};  // qp_access_flags
	std::atomic<uint8_t> rnr_retry{7};      // for new WRs
	std::atomic<uint8_t> min_rnr_timer{12}; // as responder, sent in RNR NAKs
	std::atomic<uint32_t> max_rd_atomic{1}; // READs this requester keeps in flight
	// The wire: the connection is set and cleared between the engine's turns
	// (Engine::between_turns, or with the QP parked), which read it unlocked; the kind is
	// read by anyone, and may be set before the connection (SockCm::establish).
	std::atomic<WireKind> wire{WireKind::None};
	std::shared_ptr<QpHandle> peer; // in-process peer (set connecting; cleared between turns)
	std::shared_ptr<SockConn> conn; // socket or ring wire peer (between turns)
	uint32_t dest_qpn = 0;
	std::atomic<bool> flush_pending{false};
	bool last_wqe_sent = false; // LAST_WQE_REACHED raised (SRQ)

	const Sge *sq_sges(uint32_t slot) const
	{
		return &sq_sge[(slot % sq_depth) * cap().max_send_sge];
	}
	const uint8_t *sq_inl(uint32_t slot) const
	{
		return &sq_inline[(slot % sq_depth) * cap().max_inline_data];
	}
	uint8_t *sq_inl(uint32_t slot)
	{
		return &sq_inline[(slot % sq_depth) * cap().max_inline_data];
	}

	void complete_send(uint32_t slot, WcStatus st, uint32_t byte_len);
	void flush_all();
	ExecResult exec_one(uint32_t slot);

	// Socket wire completion callbacks (engine thread).
	void sock_reply(uint32_t slot, Reply r, uint32_t byte_len);
};

// ---------------------------------------------------------------------------------------------
// SRQ

class SoftSrq final : public Srq
{
public:
	SoftSrq(SoftPd &pd, const SrqInitAttr &a, uint32_t depth, uint32_t max_sge);
	~SoftSrq() override;
	int post_recv(const RecvWr *wr, const RecvWr **bad_wr) override;
	int arm_limit(uint32_t limit) override;
	uint32_t max_wr() const override { return ring.depth; }

	SoftDevice &sdev;
	EventHandler event_handler;
	std::mutex lock;
	RecvRing ring;
	uint32_t limit = 0; // armed limit, 0 = disarmed
};

// ---------------------------------------------------------------------------------------------
// PD

class SoftPd final : public Pd
{
public:
	explicit SoftPd(SoftDevice &dev);
	~SoftPd() override;
	std::unique_ptr<Mr> reg_mr(void *addr, size_t length, uint32_t access) override;
	std::unique_ptr<Mr> alloc_mr(uint32_t max_num_sg) override;
	std::unique_ptr<Qp> create_qp(const QpInitAttr &attr) override;
	std::unique_ptr<Srq> create_srq(const SrqInitAttr &attr) override;

	SoftDevice &sdev;
	std::atomic<int> users{0}; // MRs, QPs and SRQs alive
};

// ---------------------------------------------------------------------------------------------
// Engine: one queue of the device's "NIC". A device has one per completion vector (up to
// the CPUs, or as configured; SoftDevice::engines); each QP runs on one of them for its
// life. A thread in Exec::Engine mode; the caller's thread in Exec::Inline mode.

// The calling thread runs a ring-wire QP for a ULP thread, not the engine: its poster
// (Engine::post) or a channel's waiter whose doorbell rang (Engine::serve).
bool ulp_thread_runs();

class Engine
{
public:
	Engine(bool threaded, unsigned index);
	~Engine();
	void schedule(SoftQp *qp);   // the QP has work (post, flush, reply)
	void post(SoftQp *qp);       // post_send's doorbell: schedule, or run it here (ring wire)
	void unschedule(SoftQp *qp); // QP destruction: off the queue, wait if running
	void unpark(SoftQp *qp);     // after a reset: schedulable again
	// Run fn under lock_ once no turn of qp is running: a QP's connection (conn, peer,
	// PSNs), which its turns read unlocked, changes only this way or with the QP parked.
	// Its caller holds no lock that the turn waited for may take: state_lock, or the
	// CM's (which a turn takes only through a connection: SockCm::establish).
	void between_turns(SoftQp *qp, const std::function<void()> &fn);
	void add_timer(void *owner, Clock::time_point when, std::function<void()> fn);
	// Socket and ring wires: watch a connection (its socket, and its ring doorbell and
	// rings on the ring wire); readiness schedules its QP.
	void add_conn(std::shared_ptr<SockConn> c);
	void remove_conn(SockConn *c);
	void want_write(SockConn *c, bool on); // EPOLLOUT while the connection has a backlog
	void cancel_timers(void *owner);
	int run_once(); // inline mode: process everything runnable now
	void stop();
	void kick();
	void wire_active() { wire_hot_.store(true, std::memory_order_relaxed); }
	// A channel's waiter saw c's doorbell (SoftChannel::serve): run c's QP on its thread.
	// unseen: nobody saw it ring; return at once if it had not and c has no work.
	void serve(SockConn *c, bool unseen = false);
	// c's channel is going away before c: the engine watches c's doorbell alone again.
	void drop_hand(SockConn *c);
	// c's consumer armed its receive CQ (SoftChannel::armed): while the engine sleeps,
	// the doorbell is the consumer's alone.
	void consumer_sleeps(SockConn *c, SoftCq *cq);

private:
	void loop();
	int run_locked(std::unique_lock<AdaptiveMutex> &g);
	int run_qp(std::unique_lock<AdaptiveMutex> &g, SoftQp &qp); // one QP's turn (lock_ held)
	int poll_conns(int timeout_ms);   // epoll; schedules ready QPs; returns events seen
	int poll_rings();                 // ring wire: schedules QPs whose peer published (lock_)
	bool arm_rings();                 // before sleeping: doorbells wanted; false if work came
	void disarm_rings();              // after sleeping: no doorbells while awake
	void unwatch_locked(SockConn &c); // out of epoll (lock_)

	bool threaded_;
	unsigned index_;     // in the device's engines (its thread's name)
	AdaptiveMutex lock_; // the run queue, the QPs' queued/busy flags, conns_, timers_
	std::condition_variable_any idle_cv_; // unschedule waits here
	boost::intrusive::list<
	    SoftQp, boost::intrusive::member_hook<SoftQp, boost::intrusive::list_member_hook<>,
	                                          &SoftQp::run_hook>>
	    runq_;
	std::vector<Timer> timers_; // unordered; few at a time
	bool stop_ = false;
	std::atomic<bool> sleeping_{false}; // the thread waits in epoll; doorbells must write evfd_
	std::atomic<bool> work_{false};     // a doorbell rang since the loop last looked
	std::atomic<bool> wire_hot_{false}; // socket traffic this turn: spin longer
	uint32_t sleep_gen_ = 0;            // ring wire: our sleeps, as peers see them (lock_)
	bool rings_armed_ = false;          // ring doorbells armed (lock_)
	bool in_run_ = false;               // inline mode recursion guard
	id_t tid_ = 0;                      // the engine thread (its nice value: loop only)
	int base_nice_ = 0;                 // its nice value when it started (loop only)
	int spin_nice_ = 0;                 // nice steps added while it spins idle (loop only)
	std::chrono::microseconds spin_idle_; // longest idle spin (ULP_SOFT_SPIN_US; fixed)
	std::chrono::microseconds spin_wire_; // ...after wire traffic (fixed)
	bool spin_set_ = false; // ULP_SOFT_SPIN_US was given: spin so even with handed doorbells
	bool handoff_ = true;   // ring doorbells wake the consumer's channel (ULP_SOFT_HANDOFF)
	// While it leaves doorbells to consumers' channels: the longest sleep before it looks
	// at their rings itself, doubled each time it finds nothing left undone (engine.cc).
	std::chrono::milliseconds watchdog_{1};
	void *timer_owner_ = nullptr; // owner of the timer running now (lock_)
	int epfd_ = -1;               // connections + the doorbell eventfd
	int evfd_ = -1;               // doorbell while the thread sleeps in epoll_wait
	std::vector<std::shared_ptr<SockConn>> conns_; // watched connections (lock_)
	std::thread thread_;
};

// ---------------------------------------------------------------------------------------------
// Device

struct FaultState {
	std::mutex lock;
	struct Rule {
		FaultRule r;
		uint64_t seen = 0;
		uint32_t fired = 0;
	};
	std::vector<Rule> rules;
	std::mt19937_64 rng;
	std::atomic<bool> armed{false};
	std::atomic<uint64_t> fired{0};
};

class SoftDevice final : public Device
{
public:
	SoftDevice(const DeviceConfig &cfg, std::string name, const DeviceAttr &attr,
	           const Gid &gid);
	~SoftDevice() override;

	int query_port(uint8_t port_num, PortAttr *attr) override;
	std::unique_ptr<Pd> alloc_pd() override;
	std::unique_ptr<CompChannel> create_comp_channel() override;
	std::unique_ptr<Cq> create_cq(const CqInitAttr &attr) override;

	void event(const AsyncEvent &ev) { dispatch_event(ev); }

	// Fault hook: true when a rule for point fires for this QP now.
	// Does a rule fire for this event? op: the WR's opcode where the point has one.
	bool fault(FaultPoint p, uint32_t qpn, uint32_t *delay_us = nullptr,
	           const WrOpcode *op = nullptr);

	DeviceConfig cfg;
	uint32_t ip;             // host order
	bool xproc_rings = true; // connections through the socket CM ask for the ring wire
	// The NIC's queues: at least one; never resized after construction.
	std::vector<std::unique_ptr<Engine>> engines;
	Engine &engine_of(int comp_vector) // the engine of a completion vector
	{
		return *engines[static_cast<size_t>(comp_vector) % engines.size()];
	}
	AtomicCounters retired;               // sums of destroyed QPs' counters
	std::atomic<uint64_t> srq_posted{0};  // receive WRs posted to SRQs
	void retire(const AtomicCounters &c); // a QP's counters, at its destruction (qp_lock)
	Counters counters();                  // retired + every live QP (qp_lock)
	FaultState faults;

	std::shared_mutex mr_lock;
	std::vector<SoftMr *> mrs;             // by index; null = free (mr_lock)
	SoftMr *mr_lookup(uint32_t key) const; // mr_lock held

	std::mutex qp_lock;
	std::vector<SoftQp *> qps; // by qpn - kFirstQpn; null = free
	std::shared_ptr<QpHandle> find_qp(uint32_t qpn);
	uint32_t alloc_qpn(); // reserves a number, 0 when none is free
	void free_qpn(uint32_t qpn, const AtomicCounters *final = nullptr);

	std::atomic<int> users{0}; // PDs, CQs, channels alive
	PortState port_state = PortState::Active;
	bool fatal = false;
	// remove_device: gone from the address lookups (a bind to its address fails); its
	// objects live on until the consumer destroys them.
	std::atomic<bool> removed{false};

	static constexpr uint32_t kFirstQpn = 0x11;
	inline static SoftQp *const kQpnReserved =
	    reinterpret_cast<SoftQp *>(1); // qps[] slot taken
};

inline SoftDevice &sdev_of(Device &d)
{
	return static_cast<SoftDevice &>(d);
}

// Lock two devices' MR locks shared, in address order (once if the same device).
struct MrReadLocks {
	MrReadLocks(SoftDevice &a, SoftDevice &b);
	~MrReadLocks();
	SoftDevice *first;
	SoftDevice *second;
};

// Check a local SGE list against the device's MRs (mr_lock held). Returns Success,
// LocProtErr or LocLenErr; *total gets the byte count.
WcStatus check_local_sges(SoftDevice &dev, SoftPd &pd, const Sge *sge, uint32_t n,
                          uint32_t need_access, uint64_t *total);
// Check a remote access (mr_lock held). Returns the MR or nullptr.
SoftMr *check_remote(SoftDevice &dev, SoftPd &pd, uint32_t rkey, uint64_t va, uint64_t len,
                     uint32_t need_access);

// Global registry of soft devices (for in-process address lookup).
SoftDevice *device_by_ip(uint32_t ip);
SoftDevice *device_by_gid(const Gid &gid);
SoftDevice *default_device();

// Inline-mode progress of every inline device (called from poll, post).
void progress_inline_all();

// ---------------------------------------------------------------------------------------------
// template bodies

inline uint8_t *SoftMr::host(uint64_t iova, uint64_t max, uint64_t *n) const
{
	if (user) {
		*n = max;
		return reinterpret_cast<uint8_t *>(iova);
	}
	const uint64_t psz = 1ull << page_shift;
	const uint64_t off = iova - (va & ~(psz - 1)); // from the first page's start
	const uint64_t in = off & (psz - 1);
	*n = std::min<uint64_t>(max, psz - in);
	return reinterpret_cast<uint8_t *>(pages[off >> page_shift] + in);
}

} // namespace ulp::soft
