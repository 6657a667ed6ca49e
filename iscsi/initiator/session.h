// SPDX-License-Identifier: MIT
// iscsi/initiator/session.h - an iSCSI initiator session (RFC 7143): connect and log in, discovery,
// SCSI commands with many in flight, task management, pings, logout. The userspace
// counterpart of Linux's libiscsi.c and of libiscsi, over a transport interface
// (iscsi/initiator/transport.h: TCP, iscsi/initiator/tcp.cc; iSER, iser/initiator/initiator.h).
//
// Use, from one thread (a Session logs in once; make a new one to log in again):
//
//	Session s(cfg);                          // names, CHAP, what to propose, timeouts
//	if (!s.login(portal)) ... s.error(), s.login_status() (class/detail)
//	s.submit(req, [](const ScsiResult &r) { ... });   // as many as wanted
//	while (...) s.poll(100ms);               // I/O, timers, callbacks happen here
//	s.logout(5s);
//
// Sync helpers (run(), task_mgmt_sync(), ping_sync(), send_targets()) do the same and poll
// until their answer, bounded. Nothing waits without a bound: a target that stops answering
// fails the session after cmd_timeout (or nop_timeout when idle), so does a transport that
// holds an answered task's PDU that long (a lost send completion), and a failed session
// completes every task with ConnectionLost (an answered one with its answer).
//
// Full feature phase rules kept here (RFC 7143):
//  - CmdSN window (3.2.2.1, 4.2.2.1): a non-immediate command is sent only while
//    CmdSN <= MaxCmdSN; others wait in submission order. ExpCmdSN/MaxCmdSN are taken from
//    every PDU that carries them unless MaxCmdSN < ExpCmdSN - 1, and never move backwards.
//  - ITTs name a slot and its generation, so a late PDU for a reused slot is caught.
//  - Write data (11.3, 11.7, 11.8): immediate data when ImmediateData=Yes, unsolicited
//    Data-Out when InitialR2T=No, together at most FirstBurstLength; the rest only when an
//    R2T asks, each R2T answered with Data-Out PDUs of at most the target's
//    MaxRecvDataSegmentLength; R2Ts beyond MaxOutstandingR2T, outside the buffer, longer
//    than MaxBurstLength or out of R2TSN order are protocol errors.
//  - Read data (11.7): Data-In in order (DataPDUInOrder=Yes is all we offer), DataSN from 0
//    without gaps, inside the buffer; status in the last Data-In (phase collapse, 11.7.4)
//    or in a SCSI Response; ExpDataSN and the residual must agree with what arrived.
//  - NOP (11.18, 11.19): a NOP-In with a TTT is answered at once; our pings echo data.
//  - Reject (11.17, 7.2): a rejected command completes as Rejected; its CmdSN was not
//    received, so the gap is plugged with a non-immediate NOP-Out carrying it.
//  - Async Message (11.9): a logout request ends the session gracefully (tasks in flight
//    finish, queued ones are cancelled, then Logout); drop notices are logged.
//  - Anything else the target breaks fails the connection (ERL 0 has no other recovery):
//    every task then ends with ConnectionLost and the session says why.
#pragma once

#include "core/check.h"
#include "iscsi/chap.h"
#include "iscsi/discovery.h"
#include "iscsi/initiator/login.h"
#include "iscsi/initiator/transport.h"
#include "iscsi/params.h"
#include "iscsi/pdu.h"

#include <array>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ulp::iscsi::initiator
{

// Where to connect: "host", "host:port", "[v6]:port", optionally ",tpgt" (SendTargets form).
struct Portal {
	std::string host;
	uint16_t port = 3260;
	uint16_t tpgt = 0; // from a TargetAddress; 0 when not given
};
bool parse_portal(std::string_view s, Portal *out, std::string *why);
std::string portal_str(const Portal &p); // "host:port", IPv6 in brackets

// An ISID of type "random" (RFC 7143 11.12.5: T=10b, B and C random, D = qualifier).
Isid random_isid(uint16_t qualifier = 0);

struct InitiatorConfig {
	std::string initiator_name = "iqn.2026-11.org.ulp:initiator"; // InitiatorName
	std::string initiator_alias;                                  // empty: not sent
	std::string target_name;                                      // normal sessions
	SessionType type = SessionType::Normal;
	Isid isid = random_isid(); // session ID, initiator part
	// CHAP: our name and secret; with mutual also the target's (mutual CHAP).
	std::optional<ChapSecret> chap;
	std::optional<ChapSecret> mutual;
	ChapPolicy chap_policy; // CHAP_A offered, strongest first (tgt 1.0.85 needs MD5 only)
	OperationalPrefs prefs = default_prefs(); // what we propose (digests, bursts, ...)
	std::chrono::milliseconds connect_timeout{5000};
	std::chrono::milliseconds login_timeout{10000}; // the whole login exchange
	std::chrono::milliseconds cmd_timeout{30000};   // a task unanswered this long, or
	                                                // answered with a PDU of it still
	                                                // with the transport: fail
	std::chrono::milliseconds nop_interval{5000};   // nothing received this long: ping
	std::chrono::milliseconds nop_timeout{10000};   // a ping unanswered this long: fail
	// Commands wait for a closed CmdSN window and nothing else is coming: ask with a NOP-Out
	// ping, whose NOP-In carries the current MaxCmdSN (a target should send a NOP-In
	// itself when the window reopens, 11.19; not all do).
	bool window_probe = true;
	uint32_t max_tasks = 4096; // task slots: commands in flight + queued + TMFs + pings
	int max_redirects = 4;     // login redirects followed (RFC 7143 11.13, class 1)

	// An initiator's proposals: large segments and bursts, ImmediateData=Yes,
	// InitialR2T=No (the fast path); the target answers what it accepts.
	static OperationalPrefs default_prefs();
};

enum class SessionState : uint8_t {
	Idle,        // not connected -> LoggingIn (login())
	LoggingIn,   // login exchange -> FullFeature | Failed
	FullFeature, // commands -> LoggingOut (logout(), Async logout request) | Failed
	LoggingOut,  // Logout Request out or due -> Closed | Failed
	Closed,      // logged out cleanly (final)
	Failed,      // connection lost or protocol error (final): error() says why
};
const char *session_state_name(SessionState s);

// The transitions drawn above, plus Failed -> Idle: a login redirected (RFC 7143 11.13,
// class 1) starts over at the new address. change_state checks every one.
inline constexpr StateTable<SessionState, 6> kSessionStates = {
    "iSCSI initiator session",
    session_state_name,
    {
        /* Idle */ to(SessionState::LoggingIn, SessionState::Failed),
        /* LoggingIn */ to(SessionState::FullFeature, SessionState::Failed, SessionState::Idle),
        /* FullFeature */ to(SessionState::LoggingOut, SessionState::Failed),
        /* LoggingOut */ to(SessionState::Closed, SessionState::Failed),
        /* Closed */ 0,
        /* Failed */ to(SessionState::Idle),
    }};

// RFC 7143 11.3.1.2 task attributes.
enum class TaskAttr : uint8_t { Untagged = 0, Simple = 1, Ordered = 2, HeadOfQueue = 3, Aca = 4 };

struct ScsiRequest {
	uint64_t lun = 0;             // LUN number (encoded SAM-style, single level)
	std::span<const uint8_t> cdb; // 1..260 bytes, copied at submit
	DataDir dir = DataDir::None;  // what data moves
	std::span<uint8_t> data;      // Read: filled; Write: sent. Expected Data Transfer
	                              // Length = data.size(). Valid until the callback.
	TaskAttr attr = TaskAttr::Simple;
};

enum class TaskOutcome : uint8_t {
	Completed,      // the target answered: response, status, sense, residual are valid
	Aborted,        // ended by a task management function before its response
	Rejected,       // the target rejected the command PDU (reject_reason)
	ConnectionLost, // the session failed before the answer (Session::error())
	Timeout,        // no answer within cmd_timeout (the session failed with it)
	Cancelled,      // never sent: the session is logging out or closed
};
const char *task_outcome_name(TaskOutcome o);

constexpr size_t kMaxSense = 252; // SPC: the longest sense data

struct ScsiResult {
	TaskOutcome outcome = TaskOutcome::Completed;
	uint8_t response = 0;   // iSCSI Response (11.4.3): 0 command completed at target
	uint8_t status = 0;     // SCSI status (0 GOOD, 2 CHECK CONDITION, 8 BUSY, ...)
	bool underflow = false; // U: residual = bytes not transferred
	bool overflow = false;  // O: residual = bytes the target could not transfer
	uint32_t residual = 0;  // Residual Count (bytes)
	uint32_t data_in = 0;   // bytes of Data-In received
	uint16_t sense_len = 0; // bytes in sense
	std::array<uint8_t, kMaxSense> sense{};
	RejectReason reject_reason = RejectReason::ProtocolError; // with Rejected

	bool good() const
	{
		return outcome == TaskOutcome::Completed && response == 0 && status == 0;
	}
};
using ScsiDone = std::function<void(const ScsiResult &)>;

// RFC 7143 11.5.1 task management functions.
enum class TmfFunction : uint8_t {
	AbortTask = 1,
	AbortTaskSet = 2,
	ClearAca = 3,
	ClearTaskSet = 4,
	LunReset = 5,
	TargetWarmReset = 6,
	TargetColdReset = 7,
	QueryTask = 9,
	QueryTaskSet = 10,
	ITNexusReset = 11,
	QueryAsyncEvent = 12,
};

// RFC 7143 11.6.1 responses (and RFC 7144's FUNCTION SUCCEEDED).
enum class TmfResponse : uint8_t {
	Complete = 0,
	NoTask = 1,
	NoLun = 2,
	TaskStillAllegiant = 3,
	ReassignUnsupported = 4,
	NotSupported = 5,
	AuthFailed = 6,
	Succeeded = 7,
	Rejected = 255,
};

struct TmfResult {
	TaskOutcome outcome = TaskOutcome::Completed; // Completed: response is the target's
	TmfResponse response = TmfResponse::Complete;
};
using TmfDone = std::function<void(const TmfResult &)>;

// Our ping's result: the round trip, and whether the data came back unchanged.
struct PingResult {
	TaskOutcome outcome = TaskOutcome::Completed;
	bool data_ok = true;
	std::chrono::nanoseconds rtt{0};
};
using PingDone = std::function<void(const PingResult &)>;

// A target's Async Message (11.9), for the owner's information.
struct AsyncEvent {
	uint8_t event = 0; // 0 SCSI event (sense), 1 logout request, 2 connection drop,
	                   // 3 session drop, 4 negotiation request, 255 vendor
	uint64_t lun = 0;
	uint16_t param1 = 0, param2 = 0, param3 = 0;
	std::vector<uint8_t> sense; // event 0: the sense data
};

struct SessionStats {
	uint64_t cmds = 0;            // SCSI commands sent
	uint64_t immediate_bytes = 0; // write bytes sent as immediate data
	uint64_t unsol_pdus = 0;      // unsolicited Data-Out PDUs
	uint64_t r2ts = 0;            // R2Ts answered
	uint64_t data_out_pdus = 0;   // solicited Data-Out PDUs
	uint64_t data_in_pdus = 0;    // Data-In PDUs received
	uint64_t collapsed = 0;       // commands whose status came in a Data-In (phase collapse)
	uint64_t window_waits = 0;    // commands that waited for the CmdSN window
	uint64_t nop_in_pings = 0;    // target pings answered
	uint64_t pings = 0;           // our pings answered
	uint64_t rejects = 0;         // Reject PDUs received
	uint64_t async = 0;           // Async Messages received
	uint64_t tmfs = 0;            // TMF responses received
	uint64_t statsn_gaps = 0;     // statuses whose StatSN was not the one expected
};

// Makes a new transport for each connection attempt (redirects make more than one).
using TransportFactory = std::function<std::unique_ptr<InitiatorTransport>()>;

class Session final : private TransportSink
{
public:
	// make: empty for TCP.
	explicit Session(InitiatorConfig cfg, TransportFactory make = {});
	~Session() override; // closes without logging out; tasks end with ConnectionLost
	Session(const Session &) = delete;
	Session &operator=(const Session &) = delete;

	// ---- Login (blocking, bounded by connect_timeout + login_timeout) ---------------------
	// Connect and log in; follows redirects. False: error(), and login_status() when the
	// target refused (class << 8 | detail).
	bool login(const Portal &portal);

	// ---- Asynchronous API -------------------------------------------------------------------
	// Submit a command; done runs from poll() (never from submit). Returns the task's ITT
	// (for ABORT TASK), or kReservedTag with error() when the request is invalid, the slots
	// are used up or the session is not in full feature phase.
	uint32_t submit(const ScsiRequest &req, ScsiDone done);
	// A task management request (sent immediate). ref_itt: the task for ABORT TASK and
	// QUERY TASK, ignored otherwise.
	uint32_t task_mgmt(TmfFunction fn, uint64_t lun, uint32_t ref_itt, TmfDone done);
	// A NOP-Out ping (immediate) with data (at most the target's MaxRecvDataSegmentLength).
	uint32_t ping(std::span<const uint8_t> data, PingDone done);
	// Do I/O and timers for at most timeout, running callbacks. Returns the number of
	// completions delivered, or -1 once the session is Closed or Failed (and there is
	// nothing more to deliver). Not reentrant: a callback must not call poll().
	int poll(std::chrono::milliseconds timeout);

	// ---- Synchronous helpers (poll until done; bounded)
	// ---------------------------------------
	ScsiResult run(const ScsiRequest &req);
	TmfResult task_mgmt_sync(TmfFunction fn, uint64_t lun, uint32_t ref_itt = kReservedTag);
	PingResult ping_sync(std::span<const uint8_t> data = {});
	// SendTargets=value (discovery sessions: "All"); Text continuations followed.
	bool send_targets(std::string_view value, std::vector<DiscoveryTarget> *out);
	// Wait (bounded) for tasks in flight, log out (close the session), close. True when the
	// target answered the logout with success.
	bool logout(std::chrono::milliseconds timeout = std::chrono::milliseconds(5000));
	// Drop the connection now: tasks end with ConnectionLost. Idempotent.
	void close(const std::string &why = "closed by the initiator");

	// ---- State
	// ----------------------------------------------------------------------------------
	SessionState state() const { return state_; }
	const std::string &error() const { return error_; }
	// Why the last submit/task_mgmt/ping/send_targets call was refused or failed.
	const std::string &last_error() const { return why_; }
	LoginStatus login_status() const { return login_status_; }
	InitiatorLoginError login_error() const { return login_error_; }
	const SessionParams &params() const { return sparams_; }
	const ConnParams &conn_params() const { return cparams_; }
	const InitiatorConfig &config() const { return cfg_; }
	// Tasks submitted and not yet completed (queued ones included).
	size_t in_flight() const { return in_flight_; }
	// Commands waiting for the CmdSN window.
	size_t queued() const { return pending_.size(); }
	const SessionStats &stats() const { return stats_; }
	uint32_t cmdsn() const { return cmdsn_; }
	uint32_t exp_cmdsn() const { return exp_cmdsn_; }
	uint32_t max_cmdsn() const { return max_cmdsn_; }
	// The target's Async Messages (logout requests included); called from poll().
	void on_async(std::function<void(const AsyncEvent &)> fn) { async_fn_ = std::move(fn); }
	// A logout requested by the target (Async event 1) is under way or done.
	bool target_requested_logout() const { return target_logout_; }

private:
	// One task slot: a SCSI command, a TMF, a ping, a text exchange or the logout.
	struct Task;
	enum class Kind : uint8_t { Free, Scsi, Tmf, Ping, Text, Logout, Filler };

	// TransportSink
	void on_pdu(const Pdu &pdu, PduError err) override;
	void on_sent(TxPdu *p, bool sent) override;
	void on_data_released(uint32_t itt) override;

	bool login_once(const Portal &portal, Portal *redirect);
	void enter_ffp(const InitiatorLogin &l);

	// Slots
	Task *alloc_task(Kind k);
	Task *find_task(uint32_t itt);
	void free_task(Task *t);
	uint32_t itt_of(const Task *t) const;

	// Sending
	TxPdu *new_pdu(Task *t);
	void send_pdu(TxPdu *p, std::span<const uint8_t, kBhsLen> bhs,
	              std::span<const uint8_t> ahs = {});
	bool window_open() const;
	void issue_pending();
	bool send_cmd(Task *t); // false: not sent (no transport room), still pending
	void send_unsolicited(Task *t, uint32_t from);
	void send_data_out(Task *t, uint32_t ttt, uint32_t offset, uint32_t len);
	void send_nop_reply(const NopIn &h);
	void send_filler(uint32_t cmdsn);
	void send_text(Task *t, uint32_t ttt);
	void send_logout();

	// Receiving
	void update_sn(uint32_t exp_cmdsn, uint32_t max_cmdsn);
	void take_statsn(uint32_t statsn);
	void on_scsi_rsp(const Pdu &pdu);
	void on_data_in(const Pdu &pdu);
	void on_r2t(const Pdu &pdu);
	void on_nop_in(const Pdu &pdu);
	void on_tmf_rsp(const Pdu &pdu);
	void on_text_rsp(const Pdu &pdu);
	void on_logout_rsp(const Pdu &pdu);
	void on_async_msg(const Pdu &pdu);
	void on_reject(const Pdu &pdu);

	// Completion
	void complete_scsi(Task *t, TaskOutcome o);
	void complete(Task *t, TaskOutcome o);
	void finish_if_done(Task *t);
	void deliver(Task *t);
	// The sync helpers: issue(callback) one task, poll until its result is delivered.
	template <class Result, class Issue> Result wait_for(Issue &&issue, bool fail_late);
	void abort_tasks(uint64_t lun, bool all_luns, uint64_t before_seq);

	// Teardown and timers
	void fail(const std::string &why);
	void check_timers();
	void maybe_probe_window();
	void start_logout();

	InitiatorConfig cfg_;
	TransportFactory make_tp_;
	std::unique_ptr<InitiatorTransport> tp_;
	SessionState state_ = SessionState::Idle;
	std::string error_; // why the session failed
	std::string why_;   // why the last call was refused
	LoginStatus login_status_ = LoginStatus::Success;
	InitiatorLoginError login_error_ = InitiatorLoginError::None;
	SessionParams sparams_;
	ConnParams cparams_;
	Digests digests_;                   // negotiated (sending and receiving)
	uint32_t send_dsl_ = kDefaultMrdsl; // the target's MaxRecvDataSegmentLength
	uint32_t cmdsn_ = 0;                // CmdSN of the next non-immediate PDU
	uint32_t exp_cmdsn_ = 0;            // the target's ExpCmdSN (latest)
	uint32_t max_cmdsn_ = 0;            // the target's MaxCmdSN (latest)
	uint32_t exp_statsn_ = 0;           // StatSN we expect next (sent as ExpStatSN)
	uint64_t seq_ = 0;                  // order in which tasks went out (TMF scope)

	std::vector<std::unique_ptr<Task>> tasks_; // slots, index = ITT & 0xffff
	std::vector<uint32_t> free_slots_;
	std::deque<uint32_t> pending_; // SCSI/Text slots waiting for the window
	std::vector<uint32_t> done_;   // slots whose callbacks are due (poll runs them)
	size_t in_flight_ = 0;         // user tasks not yet delivered
	size_t sent_live_ = 0;         // commands and text requests sent, not yet answered
	std::vector<std::unique_ptr<TxPdu>> pdu_pool_;
	std::vector<TxPdu *> pdu_free_;
	size_t pdus_out_ = 0; // lent to the transport

	// Login (while it runs)
	InitiatorLogin *login_ = nullptr;
	bool login_rsp_ = false; // a login response arrived (login_once's wait)

	// Timers
	std::chrono::steady_clock::time_point last_rx_;
	std::chrono::steady_clock::time_point next_timer_check_;
	uint32_t keepalive_itt_ = kReservedTag; // our idle ping in flight

	bool polling_ = false;       // inside poll(): reentry refused
	bool target_logout_ = false; // Async event 1 came
	uint32_t logout_itt_ = kReservedTag;
	bool logout_ok_ = false; // Logout Response 0 received
	std::function<void(const AsyncEvent &)> async_fn_;
	SessionStats stats_;
};

} // namespace ulp::iscsi::initiator
