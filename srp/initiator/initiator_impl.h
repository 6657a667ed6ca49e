// SPDX-License-Identifier: MIT
// srp/initiator/initiator_impl.h - the SRP initiator's insides (see initiator.h), shared by
// initiator.cc (login, CM events, polling, teardown) and initiator_io.cc (commands, their
// registrations and descriptors, responses, credits, task management). Private: nothing
// outside srp/initiator/ includes it.
//
// One channel (Chan) is what ib_srp calls a struct srp_rdma_ch: an RDMA/CM id with its QP,
// and here also its own PD. A PD per channel (ib_srp shares one per device) makes a failed
// channel's keys unreachable at once: its QP, the only one in the PD, is in ERR, so no
// RDMA of the target's (on any of its channels) can land in a buffer whose command has
// already been called back ConnectionLost. Each channel therefore has its own MR pool, its
// own registrations of the caller's regions and its own bounce heap.
//
// A command's life (Req, one per slot of its channel; the slot's send buffer is its IU):
//   Free -> Active (submit: REG_MRs + SEND posted, a credit spent)
//        -> Ending (SRP_RSP came, a TMF of ours aborted it, or the channel failed; its
//                   keys are being invalidated by LOCAL_INV)
//        -> Free  (SEND and LOCAL_INV completed: the callback is queued for poll())
#pragma once

#include "core/addr.h"
#include "core/buf_pool.h"
#include "core/check.h"
#include "core/dma_heap.h"
#include "core/mem_map.h"
#include "mr_pool/mr_pool.h"
#include "rdma_conn/client.h"
#include "rdma_conn/ring.h"
#include "srp/initiator/initiator.h"

#include <chrono>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace ulp::srpt
{

namespace ini
{

using clock = std::chrono::steady_clock;

constexpr uint32_t kPage = 4096;
constexpr uint32_t kCtlDescs = 8;    // control IUs at once per channel: TSK_MGMT, CRED_RSP,
                                     // AER_RSP, I_LOGOUT
constexpr uint32_t kCtlBufLen = 64;  // the largest of them (SRP_TSK_MGMT, 48 bytes)
constexpr uint32_t kUnsolicited = 4; // receives beyond one per request: SRP_CRED_REQ,
                                     // SRP_AER_REQ, SRP_T_LOGOUT (SRP r16a 6.7, 6.10, 6.6)
constexpr uint16_t kImmOffset = uint16_t(srp::kCmdLen + srp::kDescLen + srp::kImmHdrLen);
// 68: where Linux puts immediate data (SRP-2)
constexpr uint64_t kTmfTagBit = 1ull << 63; // TMF tags (ib_srp's SRP_TAG_TSK_MGMT bit)

// The initiator as a whole.
enum class IniState : uint8_t {
	Idle,       // constructed
	LoggingIn,  // login() running
	Up,         // at least one channel logged in
	LoggingOut, // logout() running
	Failed,     // a timeout, close(), or every channel lost: takes no command
	Closed,     // every channel torn down (final)
};
const char *ini_state_str(IniState s);
inline constexpr StateTable<IniState, 6> kIniStates = {
    "SRP initiator",
    ini_state_str,
    {
        /* Idle */ to(IniState::LoggingIn, IniState::Failed),
        /* LoggingIn */ to(IniState::Up, IniState::Failed),
        /* Up */ to(IniState::LoggingOut, IniState::Failed),
        /* LoggingOut */ to(IniState::Closed, IniState::Failed),
        /* Failed */ to(IniState::Closed),
        /* Closed */ to(),
    }};

// One channel.
enum class ChanState : uint8_t {
	Connecting, // id, PD, QP made; login request sent
	Live,       // SRP_LOGIN_RSP came, receives posted
	Failed,     // QP in ERR, every command ended; waits for teardown (drain)
	Closed,     // drained and freed
};
const char *chan_state_str(ChanState s);
inline constexpr StateTable<ChanState, 4> kChanStates = {
    "SRP initiator channel",
    chan_state_str,
    {
        /* Connecting */ to(ChanState::Live, ChanState::Failed),
        /* Live */ to(ChanState::Failed),
        /* Failed */ to(ChanState::Closed),
        /* Closed */ to(),
    }};

enum class ReqState : uint8_t { Free, Active, Ending };
const char *req_state_str(ReqState s);
inline constexpr StateTable<ReqState, 3> kReqStates = {"SRP initiator command",
                                                       req_state_str,
                                                       {
                                                           /* Free */ to(ReqState::Active),
                                                           /* Active */ to(ReqState::Ending),
                                                           /* Ending */ to(ReqState::Free),
                                                       }};

struct Chan;

// What a channel knows of its initiator (Initiator::Impl derives from it; Impl is private
// to Initiator, so a channel holds this base and Impl's own members cast it back).
struct Owner {
};

// One command slot: its IU's send buffer (the SendDesc), its registrations, its result.
struct Req : rdma::SendDesc {
	Cqe inv_cqe;        // the last LOCAL_INV's completion leads back here
	Chan *ch = nullptr; // its channel
	uint32_t slot = 0;  // its index in the channel's ring
	ReqState state = ReqState::Free;
	uint64_t tag = 0; // the SRP tag of the command in the slot
	uint64_t lun = 0; // its LUN (task management covers by LUN)
	DataDir dir = DataDir::None;
	std::span<uint8_t> user;        // the caller's buffer
	uint8_t *dma = nullptr;         // what the MRs map: user's bytes or a bounce block
	bool bounced = false;           // dma is a bounce-heap block
	std::vector<Mr *> mrs;          // data MRs, then the table's (External)
	std::vector<RegWr> regs;        // their REG_MRs, chained before the SEND
	std::vector<SendWr> invs;       // their LOCAL_INVs
	uint32_t nmr = 0;               // entries of mrs in use
	uint32_t sq_held = 0;           // send-queue WRs still reserved for it
	bool send_pending = false;      // the SEND has not completed
	bool inv_pending = false;       // the LOCAL_INVs have not completed
	const Buf *table = nullptr;     // the slot's descriptor table buffer (External)
	DescMode kind = DescMode::Auto; // the format it went with (Auto: no data)
	clock::time_point deadline;     // cmd_timeout
	// A LUN-wide TMF answered on another channel covers it, but it may still be in flight to
	// the target on this one (no order holds between two RC connections): it ends Aborted
	// once this channel's credits show every command accounted for, or Completed if its
	// SRP_RSP comes first (Chan::abort_pending).
	bool abort_pending = false;
	Callback cb;
	Result res;
};

// A receive buffer.
struct Rx : rdma::RecvDesc {
	Chan *ch = nullptr;
};

// A control IU's send buffer.
struct Ctl : rdma::SendDesc {
	Chan *ch = nullptr;
	uint8_t op = 0; // the IU's opcode
};

// The task management function in flight on a channel (one at a time: ib_srp's
// SRP_TSK_MGMT_SQ_SIZE).
struct Tmf {
	bool busy = false;     // sent, not answered (nor lost)
	bool done = false;     // answered or lost: result valid
	uint64_t tag = 0;      // its tag (kTmfTagBit set)
	uint8_t func = 0;      // srp::TmFunc
	uint64_t lun = 0;      // the LUN it covers
	uint64_t task_tag = 0; // ABORT TASK's
	TmfResult result;
};

struct Chan {
	Owner *owner = nullptr; // the Initiator::Impl
	uint32_t idx = 0;       // its place in Impl::chans
	ChanState state = ChanState::Connecting;
	std::string why;                           // why it failed
	rdma::ClientConn conn;                     // the RDMA/CM id (owns the QP), its CM events
	std::unique_ptr<Pd> pd;                    // its own (see the top of this file)
	MemMap map;                                // the caller's regions, registered on pd
	std::vector<std::unique_ptr<Mr>> user_mrs; // the regions' MRs (on pd)
	std::unique_ptr<DmaHeap> bounce;           // for buffers outside the regions
	std::unique_ptr<BufPool> tables;           // one descriptor table per slot (External)
	MrPool mrs;                                // fast-registration MRs
	rdma::SendRing<Req> reqs;                  // command slots
	rdma::SendRing<Ctl> ctl;                   // control IUs
	rdma::RecvRing<Rx> recvs;                  // receives (sized by max_ti_iu_len: after login)
	std::deque<std::pair<uint8_t, uint64_t>> ctl_backlog; // CRED_RSP / AER_RSP (opcode,
	                                                      // tag) waiting for a buffer
	Tmf tmf;
	// From the login.
	int64_t req_lim = 0;        // SRP r16a 5.5 credits
	uint32_t granted = 0;       // the LOGIN_RSP's req_lim_delta
	uint32_t it_iu_len = 0;     // the largest IU we may send: min(ours, the target's)
	uint32_t tgt_it_iu_len = 0; // the target's max_it_iu_len
	uint32_t max_ti_iu_len = 0; // the target's
	uint8_t rsp_flags = 0;      // LOGIN_RSP_*
	uint32_t max_imm = 0;       // immediate data granted: its largest write, or 0
	// Accounting.
	uint32_t sq_size = 0;               // send WRs for commands (ctl's are apart)
	uint32_t sq_used = 0;               // reserved or outstanding now, of sq_size
	uint32_t ctl_used = 0;              // control sends outstanding
	uint32_t unanswered = 0;            // commands and TMFs sent and not answered
	uint32_t abort_pending = 0;         // commands with Req::abort_pending set
	clock::time_point abort_deadline{}; // their bound (tmf_timeout after the TMF's answer)
};

} // namespace ini

struct Initiator::Impl : ini::Owner {
	explicit Impl(const InitiatorConfig &c) : cfg(c) {}
	static Impl &of(const ini::Chan &c) { return static_cast<Impl &>(*c.owner); }

	InitiatorConfig cfg;
	ini::IniState state = ini::IniState::Idle;
	bool failed = false; // failed() (a timeout, close(), every channel lost)
	std::string why;     // error()
	InitiatorStats stats;
	std::array<uint8_t, 16> i_port_id{};

	// Device-wide: every channel is on the device the first one resolved to.
	Device *dev = nullptr;
	rdma::DirectCq cq; // every channel's queues, polled by the caller's thread
	std::vector<std::unique_ptr<ini::Chan>> chans;

	// Sizes, fixed at the first channel's setup.
	uint32_t slots = 0;     // command slots per channel (queue_size)
	uint32_t mr_pages = 0;  // pages per MR's page list
	uint32_t chunk = 0;     // bytes per MR (descriptor)
	uint32_t max_descs = 0; // data descriptors per command at most
	uint32_t max_io = 0;    // largest command buffer
	uint32_t nrecv = 0;     // receives per channel

	std::vector<std::pair<Callback, Result>> done; // callbacks for poll() to run
	std::vector<srp::DirectDesc> scratch;          // submit's descriptors (no allocation)
	uint64_t next_gen = 1;                         // command tags' generation (bits 24..62)
	uint64_t next_tmf = 1;                         // TMF tags' counter
	ini::clock::time_point next_timer_check{};

	// initiator.cc
	void set_state(ini::IniState s);
	void fail(const std::string &why, Outcome first = Outcome::ConnectionLost,
	          ini::Req *first_req = nullptr);
	void chan_fail(ini::Chan &c, const std::string &why);
	void teardown(ini::Chan &c);
	void teardown_failed();
	void close_all(const std::string &why, bool failing);
	int login_one(uint32_t idx, const SockAddr &dst, const std::optional<SockAddr> &src,
	              uint8_t multichan, ini::clock::time_point deadline, std::string *why);
	int setup_device(std::string *why);
	int setup_chan(ini::Chan &c, CmId &id, std::string *why);
	void handle_cm_events();
	int process();
	int run_callbacks();
	void check_timers(ini::clock::time_point now);
	bool wait(ini::clock::time_point deadline);
	int poll(std::chrono::milliseconds timeout);
	// Run everything poll() runs until done() holds or deadline passes (internal waits:
	// a TMF's answer, logout's sends). done() at the end.
	template <typename F> bool wait_for(ini::clock::time_point deadline, F &&done_now)
	{
		for (;;) {
			pump();
			run_callbacks();
			if (done_now())
				return true;
			if (!wait(deadline))
				return done_now();
		}
	}
	void pump(); // CM events, completions, timers, teardown, callbacks: one pass
	uint32_t live() const;
	uint32_t in_flight() const;

	// initiator_io.cc
	int submit(const Request &req, Callback cb, uint64_t *tag);
	int map_data(ini::Chan &c, ini::Req &r, const Request &req, srp::CmdOut *out,
	             std::vector<srp::DirectDesc> *descs);
	void unmap(ini::Req &r, bool copy_out);
	void end_req(ini::Req &r, Outcome o);
	void maybe_finish(ini::Req &r);
	void post_inv(ini::Req &r);
	int post_ctl(ini::Chan &c, uint8_t op, const uint8_t *iu, size_t len);
	void answer(ini::Chan &c, uint8_t opcode, uint64_t tag);
	void run_ctl_backlog(ini::Chan &c);
	void on_recv(ini::Rx *rx, const Wc &wc);
	void on_rsp(ini::Chan &c, const srp::Rsp &rsp);
	void on_tmf_rsp(ini::Chan &c, const srp::Rsp &rsp);
	// Ends c's abort_pending commands Aborted once its credits are all back (or force).
	void settle_aborts(ini::Chan &c, bool force);
	TmfResult task_mgmt(uint8_t func, uint64_t lun, uint64_t task_tag, uint32_t ch);
	void send_logout(ini::Chan &c);
	static void recv_done(Cq *cq, Wc *wc);
	static void send_done(Cq *cq, Wc *wc);
	static void inv_done(Cq *cq, Wc *wc);
	static void ctl_done(Cq *cq, Wc *wc);
};

} // namespace ulp::srpt
