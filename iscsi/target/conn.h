// SPDX-License-Identifier: MIT
// iscsi/target/conn.h - one iSCSI connection, target side: login, then the full feature phase
// (RFC 7143 sections 3, 4, 11), as a fabric of the SCSI core (the kernel's
// iscsi_target.c, iscsi_target_erl0.c).
//
// A Conn is owned by its transport (iscsi/target/tcp.h, iser/target/target.h), which hands it each
// received PDU (on_pdu), the time (on_tick) and the events other threads posted
// (run_events); the Conn hands PDUs back to send (the transport's queue_pdu). Everything a
// Conn holds is touched by one thread at a time, "the owner thread" below: the holder of
// its serialiser (Serial: the TCP worker that owns it, or over iSER whichever thread
// brings the work). The SCSI core calls back from backstore threads and the reaper; those
// calls are posted (post) and run by the holder.
//
// Full feature phase, per PDU:
//   SCSI Command  CmdSN checked against the window (3.2.2.1: outside it, ignored); a
//                 command ahead of ExpCmdSN waits for the gap to fill; immediate data
//                 taken; submitted to the core in CmdSN order.
//   Data-Out      unsolicited (TTT ffffffff, up to FirstBurstLength, ends with F) or
//                 solicited by an R2T; offsets, lengths and DataSN checked (11.7).
//   R2T           sent from write_pending for what the unsolicited data did not cover,
//                 at most MaxOutstandingR2T at once, each at most MaxBurstLength (11.8).
//   Data-In       from queue_data_in, each PDU at most the initiator's
//                 MaxRecvDataSegmentLength, F at every MaxBurstLength, the status in the
//                 last one when it is GOOD (phase collapse, 11.7.4).
//   SCSI Response for every other completion, with sense and residuals (11.4).
//   Task Mgmt     to the core (scsi::Tmr); ABORT TASK of a command still waiting for its
//                 CmdSN is answered here (11.5.1).
//   NOP-Out/In    answered; the target pings when configured and drops a silent peer.
//   Text          SendTargets and declarations (iscsi/discovery.h).
//   Logout        waits for the connection's commands, answers, closes (11.14).
//   Reject        for unsupported opcodes, bad fields, data digest errors (11.17); at ERL
//                 0 a data digest error fails the command the data belonged to (7.8).
//
// The code is cut as the kernel's is: conn.cc holds the connection itself (login,
// dispatch, events, output, timers, teardown), cmd.cc the SCSI commands (window, data-out,
// data-in, responses), mgmt.cc the management PDUs (NOP, TMF, Text, Logout, SNACK).
//
// Teardown (transport error, logout, reinstatement, target stop): stop reading, drop what
// waits to be sent (its commands are put back), hand the session to the target's reaper
// (which aborts its SCSI commands and waits for them, bounded), keep running events until
// every command has been released and the reaper is done, then finished() is true and the
// transport frees the Conn.
#pragma once

#include "core/check.h"
#include "core/serial.h"
#include "iscsi/discovery.h"
#include "iscsi/pdu.h"
#include "iscsi/target/login.h"
#include "iscsi/target/session.h"
#include "iscsi/target/target.h"
#include "scsi/cmd.h"
#include "scsi/fabric_route.h"

#include <boost/intrusive/list.hpp>
#include <boost/intrusive/unordered_set.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

namespace ulp::iscsi::target
{

class Conn;

// Immediate commands (I bit) are not counted in the CmdSN window; they get their own few
// slots, and one beyond them is rejected (11.17.1 reason 6, "Immediate command reject").
constexpr uint32_t kImmediateSlots = 16;

// One outstanding R2T of a command (11.8).
struct R2tState {
	uint32_t ttt = 0;         // the R2T's Target Transfer Tag
	uint32_t r2tsn = 0;       // its R2TSN
	uint32_t offset = 0;      // buffer offset it asked for
	uint32_t length = 0;      // bytes it asked for
	uint32_t received = 0;    // bytes of it received so far
	uint32_t next_datasn = 0; // DataSN the next Data-Out for it must carry
};

// A SCSI command on a connection (the kernel's struct iscsi_cmd).
struct IscsiCmd {
	enum class State : uint8_t {
		Free,       // in the connection's pool
		Waiting,    // received, its CmdSN not yet due (held in cmdsn order)
		Submitted,  // with the SCSI core
		Responding, // its response (Data-In / SCSI Response) is queued or held
		Released,   // the core released it; back to Free when the response went out
	};

	scsi::Cmd cmd; // the core's command (cmd.fabric_priv == this)
	Conn *conn = nullptr;
	State state = State::Free;
	uint32_t itt = 0;     // Initiator Task Tag
	uint64_t lun_raw = 0; // the LUN field as sent (echoed in R2T and Data-In)
	uint32_t cmdsn = 0;
	uint32_t edtl = 0;               // Expected Data Transfer Length (bytes)
	bool read = false;               // R bit
	bool write = false;              // W bit
	bool immediate = false;          // I bit (delivered at once, no CmdSN slot)
	uint8_t *data = nullptr;         // the data buffer (edtl bytes), from Conn::alloc_buffer
	std::unique_ptr<uint8_t[]> heap; // TCP: the heap buffer data points into, kept
	uint32_t heap_cap = 0;           // its size: reused while large enough (no zeroing)
	iovec iov{};                     // data as the core's sgl
	void *xprt = nullptr;            // the transport's per-command state (iSER: its RwCtx); the
	                                 // transport's to keep across the slot's uses
	bool local = false;              // answered by the connection itself (never submitted)
	bool cmdsn_only = false;         // holds a CmdSN, no task (see Conn::cmdsn_received)
	bool window_slot = false;        // holds a CmdSN window slot (non-immediate, until
	                                 // its status is queued: return_window_slot)

	// Data-out (11.7, 11.8)
	uint32_t unsol_received = 0;    // bytes of immediate + unsolicited data received
	uint32_t unsol_limit = 0;       // unsolicited bytes allowed: min(FirstBurstLength, edtl)
	bool unsol_done = true;         // no more unsolicited Data-Out will come (F seen)
	uint32_t unsol_next_datasn = 0; // DataSN of the next unsolicited Data-Out
	bool wp = false;                // the core asked for the data (write_pending)
	uint32_t solicit_next = 0;      // next buffer offset to send an R2T for
	uint32_t r2t_received = 0;      // bytes received through R2Ts
	uint32_t r2tsn = 0;             // next R2TSN
	std::vector<R2tState> r2ts;     // outstanding R2Ts (<= MaxOutstandingR2T)
	bool write_aborted = false;     // abort_write came: stop soliciting, answered write_done
	bool data_error = false;        // a Data-Out broke the rules: the rest is dropped (11.7)

	// Data-in and response
	uint32_t datasn = 0;         // Data-In PDUs and R2Ts sent (ExpDataSN of the response)
	bool rsp_held = false;       // a status waits for the unsolicited data to end (11.7.2)
	bool rsp_is_data_in = false; // ... and it is a queue_data_in
	bool core_released = false;  // release_cmd came (the core and fabric are done)
	uint32_t pdus_queued = 0;    // its PDUs queued for sending and not yet sent

	boost::intrusive::unordered_set_member_hook<> itt_hook; // in Conn::itt_table_
	boost::intrusive::list_member_hook<> wait_hook;         // in Conn::waiting_ (cmdsn)
};

const char *cmd_state_str(IscsiCmd::State s);

// A command slot's life; change_state checks every step against it.
//   Free -> Waiting (a SCSI Command, or a CmdSN held for a task never received)
//   Waiting -> Submitted (its CmdSN is due) | Responding (answered by the connection:
//     TASK SET FULL) | Free (a CmdSN passed, or the connection closes)
//   Submitted -> Responding (its status or data-in, or aborted) | Released (the core let
//     go of it without either)
//   Responding -> Released (the core let go) | Free (the connection's own answer went out)
//   Released -> Free (its last PDU went out)
inline constexpr StateTable<IscsiCmd::State, 5> kCmdStates = {
    "iSCSI command",
    cmd_state_str,
    {
        /* Free */ to(IscsiCmd::State::Waiting),
        /* Waiting */
        to(IscsiCmd::State::Submitted, IscsiCmd::State::Responding, IscsiCmd::State::Free),
        /* Submitted */ to(IscsiCmd::State::Responding, IscsiCmd::State::Released),
        /* Responding */ to(IscsiCmd::State::Released, IscsiCmd::State::Free),
        /* Released */ to(IscsiCmd::State::Free),
    }};

struct IttHash {
	size_t operator()(const IscsiCmd &c) const { return c.itt * 0x9e3779b1u; }
	size_t operator()(uint32_t itt) const { return itt * 0x9e3779b1u; }
};
struct IttEq {
	bool operator()(const IscsiCmd &a, const IscsiCmd &b) const { return a.itt == b.itt; }
	bool operator()(uint32_t itt, const IscsiCmd &b) const { return itt == b.itt; }
	bool operator()(const IscsiCmd &a, uint32_t itt) const { return a.itt == itt; }
};
using IttTable = boost::intrusive::unordered_set<
    IscsiCmd,
    boost::intrusive::member_hook<IscsiCmd, boost::intrusive::unordered_set_member_hook<>,
                                  &IscsiCmd::itt_hook>,
    boost::intrusive::hash<IttHash>, boost::intrusive::equal<IttEq>,
    boost::intrusive::constant_time_size<true>>;
using CmdWaitList = boost::intrusive::list<
    IscsiCmd, boost::intrusive::member_hook<IscsiCmd, boost::intrusive::list_member_hook<>,
                                            &IscsiCmd::wait_hook>>;

// A task management request in flight (heap-allocated: TMFs are rare).
struct IscsiTmr {
	scsi::Tmr tmr;        // the core's request (tmr.fabric_priv == this)
	Conn *conn = nullptr; // the connection it came on
	uint32_t itt = 0;     // its ITT, for the response
};

// A PDU to send. The transport writes hdr, then data, then trailer.
struct OutPdu {
	uint8_t hdr[kBhsLen + kDigestLen]; // BHS (+ header digest)
	uint8_t hdr_len = 0;
	std::span<const uint8_t> data; // the data segment: a command's buffer, or own
	std::vector<uint8_t> own;      // data the PDU carries itself (sense, text, NOP)
	uint8_t trailer[8];            // padding (+ data digest)
	uint8_t trailer_len = 0;
	IscsiCmd *cmd = nullptr;  // counted in cmd->pdus_queued until sent
	bool last_of_cmd = false; // the command's response: cmd_put once it is sent
	bool close_after = false; // a Logout Response: close once it is sent
	size_t sent = 0;          // bytes of hdr+data+trailer already written
	size_t total() const { return hdr_len + data.size() + trailer_len; }
};

// What other threads post to a connection: the SCSI core's callbacks, one for one with
// scsi::FabricEvent (scsi/fabric_route.h), then iSCSI's own.
enum class ConnEvent : uint8_t {
	WritePending = uint8_t(scsi::FabricEvent::WritePending),
	AbortWrite = uint8_t(scsi::FabricEvent::AbortWrite),
	DataIn = uint8_t(scsi::FabricEvent::DataIn),
	Status = uint8_t(scsi::FabricEvent::Status),
	AbortedTask = uint8_t(scsi::FabricEvent::AbortedTask),
	TmRsp = uint8_t(scsi::FabricEvent::TmRsp),
	Release = uint8_t(scsi::FabricEvent::Release),
	ReapDone = scsi::kFabricEvents, // the reaper has closed the session
	Logout,    // the target asks for a logout (stop): send the Async Message
	Drop,      // drop the connection now (stop's deadline, reinstatement, a cold
	           // reset)
	Transport, // the transport's own work (iSER: post what its send plug holds)
};

// What a ConnEvent carries (Serial's arg), by event; the others carry nothing.
struct ConnArg {
	IscsiCmd *cmd = nullptr;   // WritePending, AbortWrite, DataIn, Status, AbortedTask, Release
	scsi::Tmr *tmr = nullptr;  // TmRsp
	const char *why = nullptr; // Drop: why, a static string (null: "dropped by the target")
};

// How a connection ends: lost (logged, once in the full feature phase), or logged out.
enum class Ending : uint8_t { Lost, LoggedOut };

enum class ConnState : uint8_t {
	Login,       // login requests until Complete or Failed
	FullFeature, // commands
	LoggingOut,  // a Logout Request came: waiting for the commands, then the response
	Closing,     // the transport is gone or going: waiting for commands and the reaper
	Done,        // everything released: the transport may free the Conn
};
const char *conn_state_str(ConnState s);

// A connection's life; change_state checks every step against it, in every build.
inline constexpr StateTable<ConnState, 5> kConnStates = {
    "iSCSI connection",
    conn_state_str,
    {
        /* Login */ to(ConnState::FullFeature, ConnState::Closing),
        /* FullFeature */ to(ConnState::LoggingOut, ConnState::Closing),
        /* LoggingOut */ to(ConnState::Closing),
        /* Closing */ to(ConnState::Done),
        /* Done */ 0,
    }};

// A Conn is serialised by Serial (core/serial.h): over TCP its worker thread owns
// it (Owner mode: events run on the worker), over iSER whoever brings the work runs it
// (Inline mode: a backstore's completion sends its own response).
class Conn : public Serial<ConnEvent, ConnArg>
{
public:
	Conn(Target &target, Transport transport, std::string peer, std::string local, Mode mode);
	virtual ~Conn();
	Conn(const Conn &) = delete;
	Conn &operator=(const Conn &) = delete;

	// ---- Owner thread -------------------------------------------------------------------
	// A PDU arrived (err None, or the non-fatal BadAhs / DataDigest).
	void on_pdu(const Pdu &pdu, PduError err);
	// The transport cannot go on (peer closed, socket error, a fatal PduError).
	void on_transport_error(const std::string &why);
	// Run what other threads posted (an Owner-mode transport's loop).
	void run_events()
	{
		enter([] {});
	}
	// Timers: the login timeout, NOP-In pings.
	void on_tick(std::chrono::steady_clock::time_point now);
	// A queued PDU went out (or was dropped, sent = false, when the transport closed).
	void pdu_done(OutPdu *p, bool sent);
	bool done() const { return state_ == ConnState::Done; }
	// Before the transport frees a done connection: wait out any post() still running
	// on another thread, and leave the target's list (so nothing posts to it again).
	void detach();
	ConnState state() const { return state_; }

	// What the administrator sees of it (ulpctl stats): written by the owner thread alone
	// (relaxed, no read-modify-write), read by any thread.
	struct Gauges {
		std::atomic<uint32_t> exp_cmdsn{0}; // ExpCmdSN as last sent to the initiator
		std::atomic<uint32_t> max_cmdsn{0}; // MaxCmdSN as last sent (the window's end)
		std::atomic<uint32_t> cmds{0};      // commands out of the pool, at that time
		std::atomic<uint64_t> pdus_in{0};   // PDUs received
		std::atomic<uint64_t> pdus_out{0};  // PDUs sent
	};
	const Gauges &gauges() const { return gauges_; }

	// Receive settings for the transport (they change when the login completes).
	uint32_t max_recv_dsl() const { return max_recv_dsl_; }
	Digests digests() const { return digests_; }
	const std::string &peer() const { return peer_; }
	const std::string &local() const { return local_; }
	Transport transport() const { return transport_; }
	// The event-loop worker that owns it for life (TCP), or -1 (iSER: the CQ's poller).
	virtual int worker() const { return -1; }

	// ---- Any thread -----------------------------------------------------------------------
	// post and post_deferred (Serial): the SCSI core's callbacks, routed here by
	// Target (scsi::FabricRoute), and the target's own events.

protected:
	// ---- Transport hooks (owner thread) ----------------------------------------------------
	// Take p for sending, in order; pdu_done(p) follows.
	virtual void queue_pdu(OutPdu *p) = 0;
	// (Serial::kick: make the owner, or some thread, run the events soon.)
	// One posted event, run holding the connection.
	void run_event(ConnEvent ev, ConnArg arg) override;
	// Stop reading and writing; queued PDUs are handed back through pdu_done(p, false).
	virtual void close_transport() = 0;
	// ConnEvent::Transport, which the transport posted for itself (iSER: the end of the turn
	// that plugged its sends). Nothing for TCP.
	virtual void transport_event() {}

	// Data movement, where transports differ (the defaults are iSCSI over TCP's):
	// the command's buffer of len bytes in c->data (iSER: registered memory); false when
	// none is free now (the command is answered TASK SET FULL).
	virtual bool alloc_buffer(IscsiCmd *c, uint32_t len);
	// The buffer goes back (the command is freed).
	virtual void free_buffer(IscsiCmd *c) {}
	// The transport's part of a new command (iSER: the STags of the PDU just parsed).
	virtual void cmd_received(IscsiCmd *c) {}
	// Fetch the data-out the immediate and unsolicited data did not bring, from
	// c->unsol_received to c->cmd.xfer_len, then maybe_write_done (TCP: R2Ts; iSER: RDMA
	// READ).
	virtual void fetch_data_out(IscsiCmd *c) { send_r2ts(c); }
	// Send the read data and the status of a successful command (TCP: Data-In PDUs with
	// the status in the last; iSER: RDMA WRITEs chained before the SCSI Response).
	virtual void send_read_response(IscsiCmd *c) { send_data_in(c); }

	// For transports: the pieces they build their own paths from (owner context).
	void maybe_write_done(IscsiCmd *c);
	OutPdu *build_scsi_rsp(IscsiCmd *c);                   // the SCSI Response, not yet queued
	void queue_cmd_pdu(IscsiCmd *c, OutPdu *p, bool last); // queue p for command c
	void track_cmd_pdu(IscsiCmd *c, OutPdu *p, bool last); // account p, the transport
	                                                       // sends it its own way
	// The values this transport offers at login (iSER: its receive and send lengths).
	virtual void login_prefs(OperationalPrefs &prefs) {}
	void data_transfer_failed(IscsiCmd *c); // a fetch failed: fail the write
	const SessionParams &sess_params() const { return sess_->params; }
	bool closing() const { return state_ == ConnState::Closing || state_ == ConnState::Done; }

	Target &target_;

private:
	friend class Target;

	// Login
	void on_login_pdu(const Pdu &pdu);
	void login_complete(const TargetLogin &l);

	// Full feature phase
	void on_ffp_pdu(const Pdu &pdu, PduError err);
	bool check_cmdsn(const Pdu &pdu, uint32_t cmdsn, bool immediate);
	void on_scsi_cmd(const Pdu &pdu, bool data_lost); // data_lost: a data digest error
	void deliver_in_order();
	void hold(IscsiCmd *c);           // into waiting_, in CmdSN order
	void cmdsn_received(uint32_t sn); // a CmdSN used by a task we never received
	void submit_cmd(IscsiCmd *c);
	void on_data_out(const Pdu &pdu, bool data_lost);
	void on_nop_out(const Pdu &pdu);
	void on_tmf(const Pdu &pdu);
	void on_text(const Pdu &pdu);
	void on_logout(const Pdu &pdu);
	void on_snack(const Pdu &pdu);

	// SCSI core events (owner thread, through run_events)
	void do_write_pending(IscsiCmd *c);
	void do_abort_write(IscsiCmd *c);
	void do_data_in(IscsiCmd *c);
	void do_status(IscsiCmd *c);
	void do_aborted(IscsiCmd *c);
	void do_tm_rsp(scsi::Tmr *t);
	void do_release(IscsiCmd *c);

	// Data-out (TCP)
	void send_r2ts(IscsiCmd *c);
	void data_error(IscsiCmd *c);
	void stop_write(IscsiCmd *c); // no more R2Ts; the core's transfer ends failed
	// Responses
	void send_data_in(IscsiCmd *c);
	void send_response(IscsiCmd *c, bool data_in);
	void send_reject(RejectReason r, std::span<const uint8_t> bhs);
	void send_nop_in(uint32_t itt, uint32_t ttt, std::span<const uint8_t> data, bool advance);
	void send_async_logout();
	void maybe_finish_logout();

	// Commands
	IscsiCmd *alloc_cmd();
	void free_cmd(IscsiCmd *c);
	void return_window_slot(IscsiCmd *c);
	IscsiCmd *find_cmd(uint32_t itt);
	void cmd_sent(IscsiCmd *c);

	// PDUs
	OutPdu *new_pdu();
	void finish_pdu(OutPdu *p, std::span<const uint8_t, kBhsLen> bhs);
	void fill_sn(uint8_t *bhs, bool advance_statsn); // StatSN/ExpCmdSN/MaxCmdSN at 24..35
	uint32_t max_cmdsn() const;

	// Teardown
	void fail(const std::string &why);
	void start_closing(const std::string &why, Ending how = Ending::Lost);
	void maybe_done();

	const Transport transport_;
	const std::string peer_;  // "ip:port" of the initiator
	const std::string local_; // "ip:port" of our portal
	ConnState state_ = ConnState::Login;
	std::chrono::steady_clock::time_point born_;

	// Login
	class Handler;
	std::unique_ptr<Handler> login_handler_;
	std::unique_ptr<TargetLogin> login_;
	std::vector<uint8_t> login_rsp_;

	// Full feature phase
	Session *sess_ = nullptr;          // not to be touched once reaping_ is set
	const TargetNode *node_ = nullptr; // its target node (the session keeps it alive)
	ConnParams cparams_;
	uint32_t max_recv_dsl_ = kDefaultMrdsl; // what we accept in one PDU
	uint32_t max_send_dsl_ = kDefaultMrdsl; // what the initiator accepts in one PDU
	Digests digests_;
	uint32_t statsn_ = 0;    // StatSN of the next response
	uint32_t exp_cmdsn_ = 0; // session's ExpCmdSN (one connection per session)
	uint32_t slots_ = 0;     // commands the window allows beyond ExpCmdSN
	// SendTargets of this connection: the targets its initiator, from its address, may
	// see (Target::visible_targets with peer_).
	struct Discovery final : DiscoveryHandler {
		Conn &c;
		explicit Discovery(Conn &conn) : c(conn) {}
		void visible_targets(std::string_view initiator_name,
		                     std::vector<DiscoveryTarget> *out) override;
	} discovery_{*this};
	std::unique_ptr<TextResponder> text_;
	bool logout_asked_ = false; // an Async logout request went out
	uint32_t logout_itt_ = 0;   // the Logout Request waiting for commands
	bool logout_pending_ = false;

	// Commands: a pool of 2 * cmd_window + immediate slots, never shrunk (conn.cc).
	std::vector<std::unique_ptr<IscsiCmd>> pool_;
	std::vector<IscsiCmd *> free_;
	std::vector<IttTable::bucket_type> buckets_;
	std::unique_ptr<IttTable> itt_table_;
	CmdWaitList waiting_;   // non-immediate commands ahead of ExpCmdSN, in CmdSN order
	uint32_t live_ = 0;     // commands out of the pool
	uint32_t imm_live_ = 0; // of them immediate (at most kImmediateSlots)
	uint32_t next_ttt_ = 1; // R2T / NOP-In Target Transfer Tags

	// PDUs
	std::vector<std::unique_ptr<OutPdu>> pdu_pool_;
	std::vector<OutPdu *> pdu_free_;
	uint32_t pdus_out_ = 0; // queued with the transport

	uint32_t tmrs_out_ = 0; // TMFs in flight (IscsiTmr, heap: the core answers once)
	Gauges gauges_;         // see gauges()

	// NOP-In pings
	std::chrono::steady_clock::time_point next_ping_;
	uint32_t ping_ttt_ = kReservedTag; // the ping waiting for its NOP-Out, or reserved
	std::chrono::steady_clock::time_point ping_deadline_;

	// Events from other threads
	bool reaped_ = false;  // the reaper has closed the session (or there is none)
	bool reaping_ = false; // handed to the reaper
	bool transport_closed_ = false;
	bool detached_ = false;           // detach() has run
	bool login_failed_ = false;       // a login reject is queued: input is ignored
	const char *close_why_ = nullptr; // why close_after closes, when not a logout (static)
};

// The reason codes of a Logout Request and Response (11.14.1, 11.15.1), and TMF codes.
enum : uint8_t {
	LOGOUT_CLOSE_SESSION = 0,
	LOGOUT_CLOSE_CONNECTION = 1,
	LOGOUT_REMOVE_FOR_RECOVERY = 2,
	LOGOUT_RSP_OK = 0,
	LOGOUT_RSP_CID_NOT_FOUND = 1,
	LOGOUT_RSP_RECOVERY_UNSUPPORTED = 2,
};

} // namespace ulp::iscsi::target
