// SPDX-License-Identifier: MIT
// scsi/cmd.h - a SCSI command and a task management request, as the core and its fabrics
// share them (the kernel's struct se_cmd and struct se_tmr_req).
//
// A fabric (iSCSI, iSER, SRP, the loopback) embeds a Cmd in its own per-command context,
// fills the "fabric" fields and calls submit() (scsi/core.h). The core decodes the CDB,
// asks the fabric for write data (write_pending), orders the command against the task
// set, executes it (emulated, or through the backstore), and hands it back once:
// queue_data_in (read data and status), queue_status (status and sense), or aborted_task
// (no response). The fabric then calls cmd_put() when its response has gone out, and the
// command is released (release_cmd) once neither side holds it.
//
// Life cycle (CmdState), every transition under the logical unit's lock:
//
//   New --submit--> Parsing --(CDB bad, UA, conflict)---------------------> Complete
//                      |
//                      +--(data-out)--> WritePending --write_done(ok)--+
//                      |                     |                         v
//                      +--------------------------------------> [ordering] --> Dormant
//                                            |                        |          |
//                                            | write_done(!ok)        v          |
//                                            +------> Complete <-- Executing <---+
//   Aborted: from WritePending (after write_done), Dormant or Executing (once the
//   backstore has answered), when a task management function or a session teardown
//   aborted the command. Complete and Aborted are final; the command is then off the
//   task set.
#pragma once

#include "core/check.h"

#include "scsi/backstore.h"
#include "scsi/sense.h"
#include "scsi/types.h"

#include <boost/intrusive/list.hpp>
#include <sys/uio.h>

#include <atomic>
#include <cstdint>
#include <span>

namespace ulp::scsi
{

class Nexus;
class LogicalUnit;
struct Cmd;

enum class CmdState : uint8_t {
	New,          // built by the fabric, not submitted
	Parsing,      // submit() is decoding and checking it
	WritePending, // the fabric is moving data-out into the buffer (write_pending)
	Dormant,      // waiting for older commands (ORDERED rules, SAM-5 8.6)
	Executing,    // running: emulated, or with the backstore
	Complete,     // status handed to the fabric (queue_data_in / queue_status)
	Aborted,      // aborted: aborted_task called, or TASK ABORTED status queued
};

const char *cmd_state_str(CmdState s);

// A command's life in the core; change_state checks every step against it.
//   New -> Parsing (submit)
//   Parsing -> WritePending (data-out to fetch) | Dormant (older commands first) |
//     Executing | Complete (answered while parsing: a bad CDB, a reservation conflict) |
//     Aborted
//   WritePending -> Parsing (the data is in: on to ordering) | Complete | Aborted
//   Dormant -> Executing | Complete | Aborted
//   Executing -> Complete | Aborted
//   Complete, Aborted -> New (the fabric reuses the command: cmd_init)
inline constexpr StateTable<CmdState, 7> kCmdStates = {
    "SCSI command",
    cmd_state_str,
    {
        /* New */ to(CmdState::Parsing, CmdState::New),
        /* Parsing */
        to(CmdState::WritePending, CmdState::Dormant, CmdState::Executing, CmdState::Complete,
           CmdState::Aborted),
        /* WritePending */ to(CmdState::Parsing, CmdState::Complete, CmdState::Aborted),
        /* Dormant */ to(CmdState::Executing, CmdState::Complete, CmdState::Aborted),
        /* Executing */ to(CmdState::Complete, CmdState::Aborted),
        /* Complete */ to(CmdState::New),
        /* Aborted */ to(CmdState::New),
    }};

// Cmd::flags bits (set while parsing; read-only afterwards).
enum : uint32_t {
	CMD_DATA_CDB = 1u << 0,      // a block data transfer (READ/WRITE family): lba, nr_blocks
	CMD_FUA = 1u << 1,           // force unit access: durable before GOOD
	CMD_WRITES_MEDIUM = 1u << 2, // changes the medium (refused when write protected)
	CMD_BLOCK_XFER = 1u << 3,    // its data is nr_blocks whole blocks (READ, WRITE, VERIFY
	                             // with data, WRITE AND VERIFY): a shorter or longer
	                             // expected length moves the whole blocks both allow
};

// How a command's execution ends: the core calls this when it runs the command.
using ExecFn = void (*)(Cmd *cmd);

struct Cmd {
	// ---- Set by the fabric before submit(); read-only afterwards ------------------------
	Nexus *sess = nullptr; // the I_T nexus it arrived on
	uint64_t lun = 0;      // LUN as addressed (lun_from_wire)
	uint64_t tag = 0;      // the fabric's task tag (iSCSI ITT, SRP tag)
	TaskAttr task_attr = TaskAttr::Simple;
	DataDir dir = DataDir::None; // what the transport announced
	uint32_t data_length = 0;    // expected data transfer length, bytes (EDTL)
	std::span<const iovec> sgl;  // the data buffer: data_length bytes, fabric memory,
	                             // valid until release_cmd
	uint8_t cdb[kMaxCdb] = {};   // the CDB
	uint8_t cdb_len = 0;         // its length, bytes (6..kMaxCdb)
	void *fabric_priv = nullptr; // the fabric's own (its context, if not embedding)

	// ---- Results, read by the fabric in queue_data_in / queue_status ---------------------
	Status status = Status::Good;
	uint8_t sense_len = 0; // bytes of sense[] valid (0: none)
	uint8_t sense[kSenseSize] = {};
	Residual resid = Residual::None;
	uint32_t resid_count = 0; // bytes, with resid
	uint32_t xfer_len = 0;    // bytes the command moves through sgl: data-in to
	                          // send, or data-out to fetch (<= data_length)

	// ---- The core's (scsi/core.cc and the command families); fabrics do not touch -------
	CmdState state = CmdState::New;
	LogicalUnit *lu = nullptr; // null when the LUN does not exist
	// lu as the LUN lookup found it, stored under the Tpg's lock: what a LUN removal
	// (Tpg::lu_users, under the session's lock) counts as the commands still holding the
	// LU, and what a nexus-wide abort reads (lu is written unlocked after the command joins
	// its nexus's list). The command's own memory, so no line shared between workers is
	// written.
	std::atomic<LogicalUnit *> lu_pin{nullptr};
	uint8_t shard = 0;               // its part of the LU's task set (this_shard() at submit)
	bool read_only = false;          // the LUN is mapped read-only for this initiator
	bool aborted = false;            // aborted by a TMF or teardown (task-set lock)
	bool send_tas = false;           // aborted: answer TASK ABORTED (TAS, another nexus)
	bool counted = false;            // counted in the LU's ordering state
	bool wp_returned = false;        // write_pending has returned (abort_write may follow)
	bool xport_failed = false;       // write_done(cmd, false): the fabric lost its data-out
	uint64_t start_ns = 0;           // submit()'s stats_now_ns(), for the latency statistics
	uint32_t flags = 0;              // CMD_* bits
	uint32_t cdb_xfer = 0;           // bytes the CDB itself asks to transfer
	uint32_t sks = 0;                // sense key specific bytes 15..17 (SKSV: bit 23) for
	                                 // INVALID FIELD IN CDB: the field pointer a parse
	                                 // function set (invalid_cdb_field), or 0
	DataDir cdb_dir = DataDir::None; // the direction the CDB implies
	uint64_t lba = 0;                // CMD_DATA_CDB: first logical block
	uint32_t nr_blocks = 0;          // CMD_DATA_CDB: blocks
	ExecFn execute = nullptr;        // set while parsing
	std::atomic<int> refs{0};        // fabric + core (see cmd_put)
	BsIo io;                         // the backstore request (one at a time)
	iovec io_iov[4] = {};            // sgl trimmed to xfer_len when it has few entries
	void *scratch = nullptr;         // a command family's heap state (freed at release)
	void (*scratch_free)(void *) = nullptr;
	boost::intrusive::list_member_hook<> task_node;    // in its shard of the LU's task set
	boost::intrusive::list_member_hook<> dormant_node; // in the LU's dormant list (lock_all)
	boost::intrusive::list_member_hook<> sess_node;    // in the session's commands (sess lock)
};

using CmdTaskList = boost::intrusive::list<
    Cmd, boost::intrusive::member_hook<Cmd, boost::intrusive::list_member_hook<>, &Cmd::task_node>>;
using CmdDormantList = boost::intrusive::list<
    Cmd,
    boost::intrusive::member_hook<Cmd, boost::intrusive::list_member_hook<>, &Cmd::dormant_node>>;
using CmdSessList = boost::intrusive::list<
    Cmd, boost::intrusive::member_hook<Cmd, boost::intrusive::list_member_hook<>, &Cmd::sess_node>>;

// A task management request (the kernel's se_tmr_req). The fabric owns it: it fills the
// request, calls tmr_submit(), and gets exactly one queue_tm_rsp() back, possibly from
// another thread and possibly before tmr_submit() returns. The core does not touch it
// afterwards.
struct Tmr {
	// Set by the fabric.
	Nexus *sess = nullptr;
	TmfType function = TmfType::AbortTask;
	uint64_t lun = 0;     // LUN the function addresses (all but I_T NEXUS RESET)
	uint64_t ref_tag = 0; // ABORT TASK / QUERY TASK: the task's tag
	uint64_t tag = 0;     // the request's own tag
	void *fabric_priv = nullptr;
	// Set by the core before queue_tm_rsp.
	TmfResponse response = TmfResponse::Complete;
	// The core's: commands it still waits for (across logical units).
	std::atomic<int> pending{0};
	// Core-internal functions (PREEMPT AND ABORT, scsi/pr.cc) that reuse the abort
	// machinery: called instead of the fabric's queue_tm_rsp when set.
	void (*core_done)(Tmr *tmr) = nullptr;
};

} // namespace ulp::scsi
