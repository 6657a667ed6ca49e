// SPDX-License-Identifier: MIT
// scsi/loopback.h - an in-process fabric that drives the core with CDBs and buffers (the
// kernel's tcm_loop): what the tests and `ulp-bench scsi` use.
//
// Two ways in:
//   - LoopReq: a reusable command slot. The caller sets it up (prep), start()s it, and
//     its done callback runs when the core has released the command; the results are then
//     in req->cmd and data-in in the caller's buffer. No allocation per command: this is
//     the benchmark's path.
//   - run(): one command, synchronously, with copies of everything (tests).
// Task management: tmf(), synchronous.
//
// A response "goes out" the moment the core hands it over: queue_data_in and queue_status
// record nothing but the fact, and drop the fabric's reference at once. With hold_writes,
// write_pending parks the command until release_write() (or abort_write) so that tests can
// catch commands in the write-pending state.
#pragma once

#include "scsi/core.h"
#include "scsi/fabric.h"
#include "scsi/tpg.h"

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <span>
#include <string>
#include <vector>

namespace ulp::scsi
{

struct LoopReq {
	Cmd cmd;
	iovec iov{};                       // the caller's buffer as the command's sgl
	void (*done)(LoopReq *) = nullptr; // after release: results final, slot reusable
	void *ctx = nullptr;               // the caller's
	bool hold_write = false;           // park in write_pending until release_write
	bool queued = false;               // a response was handed over (not aborted_task)
	bool data_in = false;              // ... and it was queue_data_in (data went to buf)
	bool got_aborted_task = false;     // aborted_task was called
};

// The outcome of run(), copied out of the command.
struct LoopResult {
	bool finished = false; // released before the timeout
	bool aborted = false;  // aborted_task (no response of its own)
	Status status = Status::Good;
	std::vector<uint8_t> sense;
	Residual resid = Residual::None;
	uint32_t resid_count = 0;
	uint32_t xfer_len = 0;
	std::vector<uint8_t> data; // data-in (xfer_len bytes) for READ-direction commands

	SenseKey key() const
	{
		return sense.size() > 2 ? SenseKey(sense[2] & 0xf) : SenseKey::NoSense;
	}
	uint16_t asc() const
	{
		return sense.size() > 13 ? uint16_t(sense[12] << 8 | sense[13]) : 0;
	}
};

class Loopback final : public Fabric
{
public:
	Loopback() = default;
	~Loopback() override;

	// A session on tpg for initiator (port: its TransportID text; defaults to the name).
	Nexus *login(Tpg &tpg, const std::string &initiator, const std::string &port = {});
	// close_session with a bound; 0 or -ETIMEDOUT.
	int logout(Nexus *s, std::chrono::milliseconds timeout = std::chrono::seconds(10));

	// Set up req for a command (cmd_init + fabric fields). buf: data-out contents or
	// data-in space; its size is the expected data transfer length.
	static void prep(LoopReq *req, Nexus *s, uint64_t lun, std::span<const uint8_t> cdb,
	                 DataDir dir, std::span<uint8_t> buf, TaskAttr attr = TaskAttr::Simple,
	                 uint64_t tag = 0);
	void start(LoopReq *req);

	// One command, waited for (bounded). data: data-out to send, or (for Read) its size
	// is the expected length (contents ignored).
	LoopResult run(Nexus *s, uint64_t lun, std::span<const uint8_t> cdb, DataDir dir,
	               std::vector<uint8_t> data = {}, TaskAttr attr = TaskAttr::Simple,
	               uint64_t tag = 0,
	               std::chrono::milliseconds timeout = std::chrono::seconds(10));

	// A command started with run-like copies but not waited for: wait for it with
	// wait(). The handle stays valid until wait() returns.
	struct Pending;
	Pending *start_async(Nexus *s, uint64_t lun, std::span<const uint8_t> cdb, DataDir dir,
	                     std::vector<uint8_t> data, TaskAttr attr, uint64_t tag,
	                     bool hold_write = false);
	LoopResult wait(Pending *p, std::chrono::milliseconds timeout = std::chrono::seconds(10));
	// The command's state as the core has it (tests).
	CmdState state(Pending *p);
	// Let a held write go on (ok) or fail it; false if it was not (or no longer) held.
	bool release_write(Pending *p, bool ok = true);

	// A task management function, waited for (bounded); Failed on timeout.
	TmfResponse tmf(Nexus *s, TmfType fn, uint64_t lun, uint64_t ref_tag = 0,
	                std::chrono::milliseconds timeout = std::chrono::seconds(10));
	// The same in two steps: tmf_start returns once the core has marked what the function
	// covers (tmr_submit has returned), tmf_wait waits for the response and frees it.
	struct PendingTmf;
	PendingTmf *tmf_start(Nexus *s, TmfType fn, uint64_t lun, uint64_t ref_tag = 0);
	TmfResponse tmf_wait(PendingTmf *p,
	                     std::chrono::milliseconds timeout = std::chrono::seconds(10));
	bool tmf_answered(PendingTmf *p);

	// Fabric
	const char *name() const override { return "loop"; }
	void write_pending(Cmd *cmd) override;
	void abort_write(Cmd *cmd) override;
	void queue_data_in(Cmd *cmd) override;
	void queue_status(Cmd *cmd) override;
	void aborted_task(Cmd *cmd) override;
	void queue_tm_rsp(Tmr *tmr) override;
	void release_cmd(Cmd *cmd) override;

private:
	static void pending_done(LoopReq *req);

	std::mutex lock_;             // guards held_ and every Pending's fields
	std::condition_variable cv_;  // a Pending finished or a TMF answered
	std::vector<LoopReq *> held_; // parked in write_pending
};

} // namespace ulp::scsi
