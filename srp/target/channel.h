// SPDX-License-Identifier: MIT
// srp/target/channel.h - one SRP RDMA channel of the target (the kernel's struct srpt_rdma_ch and
// its ioctxs), on rdma_conn/: its QP, CQ and rw contexts are an rdma::PortalConn's; its
// work is serialised by Serial in Inline mode (completions on the CQ pool's workers,
// CM events on the CM thread, SCSI callbacks on backstore threads: whichever thread brings
// the work runs it).
//
// Rings. Receives: a ring of rq_size + kSpareRecvs buffers of it_iu_len bytes (or the
// device's SRQ, shared). Sends: a ring of ioctxs, one per credit plus the spares; an ioctx
// is a command's (or a TMF's) whole context: its scsi::Cmd, its descriptors, its data
// buffer, its rw contexts, and the registered buffer its SRP_RSP goes out from. It is taken
// when the IU is taken apart and goes back when the core releases the command. Control
// IUs the target starts (SRP_CRED_REQ) have their own two buffers.
//
// Credits (SRP r16a 5.5): the login grants rq_size; every request the
// initiator sends (SRP_CMD, SRP_TSK_MGMT, SRP_I_LOGOUT) spends one; every SRP_RSP returns
// 1 + owed, owed being the credits of requests answered by no response (aborted commands);
// when credits are owed and no response is coming, an SRP_CRED_REQ returns them. The
// receive ring holds kSpareRecvs more than the credits, for SRP_CRED_RSP and SRP_AER_RSP
// (which spend none). An initiator that sends beyond its credits is counted and logged;
// what it sends past the spare receives waits in its own send queue (RNR), so it is held
// by the receives, never by luck.
//
// On an SRQ the receives are the device's, not the channel's: rq_size credits for every
// channel would promise more receives than the SRQ has, and the initiators' SENDs would
// then be held by RNR NAKs instead, which are not fair: a QP that met one waits out the
// RNR timer while the others, sending back to back, take every receive reposted meanwhile,
// so that some channels completed nothing for seconds (ulp-stress's starvation scenario:
// 16 channels of 32 credits on an SRQ of 16). So a channel on an SRQ holds at most its
// share of it (SrqShare::limit: the receives less a spare per channel, divided among the
// channels on it now, between kMinSrqCredits and rq_size): the login grants the share,
// and each response returns only what keeps the channel's credits (held by the initiator,
// spent on requests not yet answered, owed) at the share: less than 1 + owed while the
// channel holds more than its share (others joined), more once channels left (by
// SRP_CRED_REQ when no response is coming). window_ counts those credits.
//
// Send queue: the QP is created for sq_size / 2 responses and sq_size / 2 rw contexts
// (rw_init_qp grows it by what a context needs); sq_avail_ counts the WRs that may still
// be posted, every post reserves its WRs first and each signaled completion gives its
// chain's back. A transfer that does not fit waits in sq_wait_, in order; one larger than
// the whole budget goes in pieces, each ending in a signaled WR.
//
// Wait list: an IU that arrives before the channel is live (the initiator may send as soon
// as it has the REP, before our ESTABLISHED) or when no ioctx is free (a response's SEND
// completion can come after the initiator, credited, sent the next command) waits in its
// receive buffer, in order, and is taken up from completion context as soon as it can be.
//
// States (ChState), strictly monotonic, each change checked in every build:
//   Connecting -> Live (ESTABLISHED) -> Disconnecting (rdma_disconnect sent) ->
//   Draining (QP in ERR, signaled zero-length WRITE posted) -> Disconnected (its flush
//   came back: every WR before it has completed)
// then: the nexus is left (the last channel closes it on the target's reaper), the portal
// drains the QP (bounded) and frees the channel once every ioctx is back, logging every
// few seconds while commands are still with the backstore. A QP that leaves RTS on its own
// (QP fatal; LAST_WQE_REACHED on the SRQ, where an idle QP has no receive to flush) closes
// the channel at the next tick. A send whose completion never came (the device lost it) is
// taken back data_timeout after Disconnected, once the QP is drained, with a log line, and
// its command ended as a failed transfer: nothing waits for a completion for ever.
#pragma once

#include "core/check.h"
#include "core/deadline.h"
#include "core/serial.h"
#include "rdma_conn/portal.h"
#include "rdma_conn/ring.h"
#include "rw/rw.h"
#include "rw/sg_table.h"
#include "scsi/cmd.h"
#include "scsi/fabric_route.h"
#include "srp/proto.h"
#include "srp/target/target.h"

#include <boost/intrusive/list.hpp>
#include <sys/uio.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

namespace ulp::srpt
{

class Portal;
struct Ioctx;

enum class ChState : uint8_t { Connecting, Live, Disconnecting, Draining, Disconnected };
const char *ch_state_str(ChState s);

// Strictly forward; a state may be skipped (a login that fails before ESTABLISHED closes
// from Connecting).
inline constexpr StateTable<ChState, 5> kChStates = {
    "SRP channel",
    ch_state_str,
    {
        /* Connecting */ to(ChState::Live, ChState::Disconnecting),
        /* Live */ to(ChState::Disconnecting),
        /* Disconnecting */ to(ChState::Draining),
        /* Draining */ to(ChState::Disconnected),
        /* Disconnected */ to(),
    }};

// A send ioctx's life (the kernel's srpt_command_state, checked).
enum class IoState : uint8_t {
	Free,       // on the free list
	New,        // taken for an IU being taken apart
	FetchTable, // an external descriptor table is being read (RDMA READ)
	Submitted,  // with the SCSI core (a command) or task management (a TMF)
	NeedData,   // write_pending: the RDMA READ of the write data queued or in flight
	Responding, // the SRP_RSP (behind any RDMA WRITEs of read data) queued or in flight
	Done,       // answered (or aborted: no answer): waiting for the core's release
};
const char *io_state_str(IoState s);

//   Free -> New
//   New -> FetchTable | Submitted | Responding (refused before the core) | Free (closed)
//   FetchTable -> Submitted | Responding | Free (closed before submission)
//   Submitted -> NeedData | Responding | Done (aborted, or closed: no response)
//   NeedData -> Submitted (write_done)
//   Responding -> Done | Free (an IU never given to the core: its response went)
//   Done -> Free (released)
inline constexpr StateTable<IoState, 7> kIoStates = {
    "SRP ioctx",
    io_state_str,
    {
        /* Free */ to(IoState::New),
        /* New */ to(IoState::FetchTable, IoState::Submitted, IoState::Responding, IoState::Free),
        /* FetchTable */ to(IoState::Submitted, IoState::Responding, IoState::Free),
        /* Submitted */ to(IoState::NeedData, IoState::Responding, IoState::Done),
        /* NeedData */ to(IoState::Submitted),
        /* Responding */ to(IoState::Done, IoState::Free),
        /* Done */ to(IoState::Free),
    }};

// What an ioctx's rw contexts are moving.
enum class RwJob : uint8_t {
	None,
	Table,   // the external descriptor table, into table_buf (RDMA READ)
	DataOut, // write data, into the buffer (RDMA READ)
	DataIn,  // read data, from the buffer (RDMA WRITE), the SRP_RSP chained behind
};

// Channel events: the SCSI core's callbacks (scsi::FabricEvent), then the channel's own.
enum class ChEvent : uint8_t {
	WritePending = uint8_t(scsi::FabricEvent::WritePending),
	AbortWrite = uint8_t(scsi::FabricEvent::AbortWrite),
	DataIn = uint8_t(scsi::FabricEvent::DataIn),
	Status = uint8_t(scsi::FabricEvent::Status),
	AbortedTask = uint8_t(scsi::FabricEvent::AbortedTask),
	TmRsp = uint8_t(scsi::FabricEvent::TmRsp),
	Release = uint8_t(scsi::FabricEvent::Release),
	ReapDone = scsi::kFabricEvents, // the reaper closed the nexus this channel left last
	Close,                          // close the channel
	Logout,                         // SRP_T_LOGOUT, then close (the administrator's)
	FlushPlug,                      // the turn that plugged ended: post what the plug holds
};

// What a ChEvent carries (Serial's arg), by event; ReapDone, Logout and FlushPlug carry
// nothing.
struct ChArg {
	Ioctx *x = nullptr;        // the core's callbacks: the command's (or the TMF's) ioctx
	const char *why = nullptr; // Close: why, a static string
};

// A device's SRQ as its channels share it (the portal owns it, beside the SRQ).
struct SrqShare {
	uint32_t receives = 0;             // receives the SRQ holds
	std::atomic<uint32_t> channels{0}; // channels on it now (Channel::setup to close)
	// The credits one channel may hold now: the receives less one spare per channel (an
	// SRP_CRED_RSP), shared equally, at least kMinSrqCredits, at most rq.
	uint32_t limit(uint32_t rq) const;
};

// The fewest credits a channel on an SRQ is left with: Linux's ib_srp keeps one for task
// management (SRP_TSK_MGMT_SQ_SIZE) and sends a command only while it holds more.
inline constexpr uint32_t kMinSrqCredits = 2;

struct RecvIoctx : rdma::RecvDesc {
	Channel *ch = nullptr; // null on an SRQ ring: the completion's QP tells
	uint32_t byte_len = 0; // bytes received (while waiting)
	boost::intrusive::list_member_hook<> wait_node; // in the channel's wait list
};

struct Ioctx : rdma::SendDesc {
	Channel *ch = nullptr;
	IoState state = IoState::Free;
	uint8_t opcode = 0;                 // the IU's: srp::CMD or srp::TSK_MGMT
	uint64_t tag = 0;                   // the IU's tag, echoed in the response
	bool in_core = false;               // given to the core (scsi::submit / tmr_submit)
	scsi::Cmd cmd;                      // the command (opcode CMD)
	scsi::Tmr tmr;                      // the task management request (opcode TSK_MGMT)
	uint8_t *data = nullptr;            // the data buffer (the device's DmaHeap), or null
	uint32_t data_len = 0;              // its length: the descriptors' total, bytes
	iovec iov{};                        // cmd.sgl's one entry
	bool immediate = false;             // the data came in the IU (already in data)
	std::vector<srp::DirectDesc> descs; // the remote buffers, in order
	srp::DirectDesc table_desc;         // an external table: where it is
	uint8_t *table_buf = nullptr;       // an external table being fetched (DmaHeap)
	uint32_t table_entries = 0;         // its entries
	// Transfers.
	Cqe rw_cqe;                                   // the RDMA READ (or a piece's) completion
	RwJob job = RwJob::None;                      // what the contexts move
	uint32_t rw_len = 0;                          // bytes the job moves
	std::vector<std::unique_ptr<RwCtx>> rw;       // one per remote descriptor (kept for reuse)
	uint32_t n_rw = 0;                            // contexts initialised for the job (0 with a
	                                              // job: waiting for MRs to initialise them)
	uint32_t next_rw = 0;                         // the first not yet posted
	uint32_t wrs_posted = 0;                      // send WRs of the piece in flight (sq_avail_)
	bool abort_write = false;                     // the core asked to stop fetching write data
	std::chrono::steady_clock::time_point posted; // when the piece in flight went out
	SgTable sgt{1};                               // one descriptor's local slice
	uint32_t rsp_len = 0;                         // the built SRP_RSP's length
	rdma::PlugPiece piece;                        // its piece in flight, while plugged
	boost::intrusive::list_member_hook<> sq_node; // in the channel's sq_wait_
};

using RecvWaitList = boost::intrusive::list<
    RecvIoctx, boost::intrusive::member_hook<RecvIoctx, boost::intrusive::list_member_hook<>,
                                             &RecvIoctx::wait_node>>;
using SqWaitList = boost::intrusive::list<
    Ioctx,
    boost::intrusive::member_hook<Ioctx, boost::intrusive::list_member_hook<>, &Ioctx::sq_node>>;

// What a channel is set up with (decided at login by the portal).
struct ChannelParams {
	uint32_t it_iu_len = 0;       // receive buffer size: the initiator's req_it_iu_len
	uint16_t imm_data_offset = 0; // granted immediate data offset; 0: not granted
	uint8_t read_credit = 0;      // RDMA READs the QP may issue at once (accept's depth)
	std::array<uint8_t, 16> i_port_id{};
};

class Channel final : public rdma::PortalConn, public Serial<ChEvent, ChArg>
{
public:
	// Receives beyond the credits: SRP_CRED_RSP and SRP_AER_RSP spend no credit.
	static constexpr uint32_t kSpareRecvs = 2;
	// Ioctxs beyond the credits: a response's SEND completion may come after the
	// initiator's next request (which then waits for a moment in the wait list instead).
	static constexpr uint32_t kSpareIoctxs = 2;
	// SRP_RSP: the fixed part and the sense (or the 4 bytes of TMF response data).
	static constexpr uint32_t kMaxTiIuLen = uint32_t(srp::kRspLen + scsi::kSenseSize);

	Channel(Portal &portal, std::unique_ptr<CmId> id, std::string peer);
	~Channel() override;

	// CM thread, before the accept: rings, QP, receives posted (or the SRQ), and the
	// nexus it joins. 0, or a negative errno with *why.
	int setup(rdma::DeviceRes &res, const ChannelParams &p, std::shared_ptr<SrpNexus> nexus,
	          std::string *why);
	uint32_t credits() const { return grant_; } // granted at login

	// Any thread: close (the target stops, a SINGLE login takes the nexus over).
	// why: a static string.
	void close_async(const char *why) { post_deferred(ChEvent::Close, {.why = why}); }
	// Any thread: log the initiator out (SRP r16a 6.6: SRP_T_LOGOUT), then close once it
	// has been delivered (or at once when it cannot be sent).
	void logout_async() { post_deferred(ChEvent::Logout, {}); }

	// rdma::PortalConn
	void on_cm_event(CmEvent &ev) override;
	void tick(std::chrono::steady_clock::time_point now) override;
	void run_kicked() override
	{
		enter([] {});
	}
	bool finished() override;
	void detach() override;
	void release_resources() override;
	std::string describe() override;

	// The SRQ's receive completions find their channel through the QP.
	static void recv_done(Cq *cq, Wc *wc);

	ChState state() const { return state_; }
	const std::string &peer() const { return peer_; }

	// What the administrator sees of it (ulpctl stats): written by the holder of the
	// serialiser alone (relaxed stores), read by any thread.
	struct Gauges {
		std::atomic<int32_t> req_lim{0};      // credits the initiator holds, as we count
		std::atomic<uint32_t> ioctxs_busy{0}; // ioctxs (request buffers) in use
	};
	const Gauges &gauges() const { return gauges_; }

protected:
	void run_event(ChEvent ev, ChArg arg) override;
	void kick() override;

private:
	// ---- channel.cc: life, receives, credits, sends ---------------------------------
	void handle_recv(RecvIoctx *r, const Wc &wc);
	bool process_iu(RecvIoctx *r); // false: no ioctx free (the IU waits)
	void process_wait_list();
	void repost(RecvIoctx *r);
	void close(const char *why);
	void set_state(ChState s);
	void on_disconnected(); // the zero-length WRITE's flush is back
	void reclaim_lost(std::chrono::steady_clock::time_point now); // completions lost
	void on_qp_event(const AsyncEvent &e); // the QP's async events (a provider thread)
	bool check_qp_event();                 // tick: true when one ended the QP (closed)
	void maybe_cred_req();
	void send_t_logout();          // ChEvent::Logout
	uint32_t take_delta();         // for a response: 1 + owed, to the credit limit
	uint32_t credit_limit() const; // credits the channel may hold now (SRQ: its share)
	void leave_share();            // off the SRQ's channel count (close, or a failed setup)
	void publish();                // req_lim_ and busy_ into gauges_
	Ioctx *get_ioctx();
	void put_ioctx(Ioctx *x);
	static void send_done(Cq *cq, Wc *wc);
	static void ctl_done(Cq *cq, Wc *wc);
	static void zlw_done(Cq *cq, Wc *wc);

	// ---- cmd.cc: SRP_CMD, SRP_TSK_MGMT, data and responses -----------------------------
	void handle_cmd(Ioctx *x, std::span<const uint8_t> iu);
	void handle_tsk_mgmt(Ioctx *x, std::span<const uint8_t> iu);
	void submit(Ioctx *x);
	void fill_cmd(Ioctx *x, const srp::Cmd &c);
	void refuse_cmd(Ioctx *x, scsi::Sense why);  // answered here, never given to the core
	void refuse_tmf(Ioctx *x, uint8_t rsp_code); // likewise, a TMF
	bool alloc_data(Ioctx *x, uint32_t len);
	void free_data(Ioctx *x);
	int init_rw(Ioctx *x, RwJob job, uint32_t len); // contexts for len bytes; WRs or <0
	void destroy_rw(Ioctx *x);
	void start_rw(Ioctx *x, RwJob job, uint32_t len); // init and post, or queue for room
	void fail_job(Ioctx *x); // a queued or failed transfer or response ends unsent
	bool post_rw(Ioctx *x);  // post what fits; false: nothing fitted (waits)
	// x's piece from first (its WRs already counted in sq_avail_ and x->wrs_posted): into the
	// connection's send plug (rdma_conn/send_plug.h), posted with the rest of this turn's.
	void post_piece(Ioctx *x, SendWr *first);
	static void piece_unsent(rdma::PlugPiece *p); // the plug could not post it: fail_job
	// rdma::PortalConn's send plug: its flush runs as ChEvent::FlushPlug; a refused post
	// closes.
	void post_plug_flush() override { post(ChEvent::FlushPlug, {}); }
	void plug_failed(int rc) override;
	void run_sq_wait();
	void rw_piece_done(Ioctx *x, const Wc &wc);
	static void rw_done(Cq *cq, Wc *wc);
	void table_fetched(Ioctx *x, bool ok);
	void do_write_pending(Ioctx *x);
	void do_abort_write(Ioctx *x);
	void do_data_in(Ioctx *x);
	void do_status(Ioctx *x);
	void do_aborted(Ioctx *x);
	void do_tm_rsp(Ioctx *x);
	void do_release(Ioctx *x);
	void build_rsp(Ioctx *x); // the command's SRP_RSP into its buffer
	void send_rsp(Ioctx *x);  // post the SRP_RSP (alone), reserving its WR
	void check_transfers(std::chrono::steady_clock::time_point now);

	Portal &portal_;
	Target &target_;
	std::string peer_; // "IP:PORT" of the initiator
	ChState state_ = ChState::Connecting;
	ChannelParams p_;
	std::shared_ptr<SrpNexus> nexus_; // the nexus this channel carries (Target::lock_)
	bool in_nexus_ = false;           // still listed in nexus_->channels
	bool reap_wait_ = false;          // waiting for ReapDone (this channel closes the nexus)
	DmaHeap *heap_ = nullptr;         // the device's data buffers
	Srq *srq_ = nullptr;              // the device's SRQ, or null: recvs_ is ours
	SrqShare *share_ = nullptr;       // with srq_: its channels, for the credit limit
	bool in_share_ = false;           // counted in share_->channels
	rdma::RecvRing<RecvIoctx> recvs_;
	rdma::SendRing<Ioctx> ioctxs_;
	struct CtlDesc : rdma::SendDesc {
		Channel *ch = nullptr;
		bool posted = false; // its SEND is out, its completion not yet come
	};
	rdma::SendRing<CtlDesc> ctl_; // SRP_CRED_REQ buffers
	RecvWaitList wait_list_;      // IUs waiting (not live yet, or no free ioctx)
	SqWaitList sq_wait_;          // ioctxs waiting for send queue room, in order
	uint32_t cfg_rq_ = 0;         // receives per channel: the most credits it may hold
	uint32_t grant_ = 0;          // credits granted at login (cfg_rq_, or the SRQ share)
	int32_t window_ = 0;          // credits held, spent on unanswered requests, or owed
	int32_t req_lim_ = 0;         // credits the initiator holds, as we count them
	uint32_t owed_ = 0;           // credits to return with the next response
	bool cred_req_out_ = false;   // an SRP_CRED_REQ awaits its SRP_CRED_RSP
	CtlDesc *t_logout_ = nullptr; // the SRP_T_LOGOUT in flight: close when it completes
	uint32_t sq_avail_ = 0;       // send WRs that may still be posted
	uint32_t sq_budget_ = 0;      // sq_avail_ when nothing is in flight
	uint32_t busy_ = 0;           // ioctxs not free
	Cqe zlw_cqe_;                 // the closing zero-length WRITE
	RdmaWr zlw_{};
	uint64_t ctl_tag_ = 0;      // the last SRP_CRED_REQ's tag
	bool in_wait_list_ = false; // process_wait_list is running (no reentry)
	bool told_overrun_ = false; // logged a credit overrun
	bool told_no_read_credit_ = false;
	const char *close_why_ = nullptr;
	// An async event that ended the QP (EventType + 1; 0: none), noted by the provider's
	// thread and acted on by tick (the event thread).
	std::atomic<uint8_t> qp_event_{0};
	Gauges gauges_;                                   // see gauges()
	std::chrono::steady_clock::time_point closed_at_; // when Disconnected was reached
	std::chrono::steady_clock::time_point next_wait_log_;
};

} // namespace ulp::srpt
