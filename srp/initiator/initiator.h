// SPDX-License-Identifier: MIT
// srp/initiator/initiator.h - an SRP initiator (the kernel's ib_srp, over RDMA/CM): the tests' and
// ulp-initiator's client of SRP targets (ulp-targetd's srp/target/, LIO's ib_srpt).
//
// Login (SRP r16a 6.2): one RDMA/CM connection per channel, each with
// srp_login_req_rdma (56 bytes) as the connect request's private data: channel 0 with
// MULTICHAN_SINGLE, the others with MULTICHAN_MULTI, in turn, as ib_srp's add_target does.
// The initiator port id is initiator_ext ‖ the local device's node GUID; the target port
// id is id_ext ‖ ioc_guid, the two numbers Linux's add_target takes. SRP_LOGIN_RSP comes
// in the accept's private data (credits, max_ti_iu_len, immediate data granted), and
// SRP_LOGIN_REJ in the reject's (its reason is reported in text).
//
// Per command (submit), as ib_srp's srp_map_data does it with fast registration:
//   - the data buffer is registered with MRs from the channel's pool, each covering at
//     most one MR's page list (or max_desc_bytes, to make more descriptors on purpose),
//     REG_MR chained before the SEND of the SRP_CMD so the keys are valid when the target
//     sees them (on rdma-core devices the core carries REG_MR by a type-2 memory window);
//   - the descriptors: immediate data (a WRITE of at most max_imm bytes, when the login
//     granted it: the data in the SEND itself, at the granted offset), one direct
//     descriptor (one MR), or an indirect table: up to cmd_sg_entries descriptors inside
//     the SRP_CMD, and beyond that the whole table in a registered buffer of its own that
//     the target RDMA READs (allow_ext_sg; without it such a command fails, as Linux's
//     "Could not fit S/G list"). desc_mode forces a format, for tests;
//   - a buffer outside the caller's registered regions is bounced through a registered
//     heap (copied in for a WRITE, out for a READ), counted in stats;
//   - the SRP_RSP is a plain SEND (SRP has no remote invalidation): every key of the
//     command is invalidated by LOCAL_INV, and the callback runs only when those have
//     completed, so a late RDMA from the target can never reach a buffer the caller has
//     taken back.
//
// Credits (SRP r16a 5.5): each channel keeps req_lim, set by the login and raised by each
// SRP_RSP's, SRP_CRED_REQ's and SRP_AER_REQ's req_lim_delta. A command needs req_lim > 1
// (one credit stays for task management, as ib_srp's SRP_TSK_MGMT_SQ_SIZE); a TMF needs 1;
// SRP_CRED_RSP and SRP_AER_RSP spend none. Without a credit (or a free slot) submit says
// -EBUSY and counts it (stats.zero_req_lim, as ib_srp's sysfs counter): the initiator is
// held by req_lim. check_credits = false turns that off (tests of a target's overrun
// handling only).
//
// Commands go to the channel with the most credits left. Tags are unique across channels.
// A command not answered within cmd_timeout fails the initiator (every channel closes and
// every command ends ConnectionLost, as a session drop does). Logout sends SRP_I_LOGOUT on
// every channel and disconnects (Linux's ib_srp only disconnects).
//
// Threading: none of its own beyond the provider's CM thread, whose events reach the
// caller's thread through an eventfd. One Direct CQ on a completion channel serves every
// channel; poll() sleeps on its fd and the eventfd together. Not thread safe: one thread
// calls everything.
#pragma once

#include "srp/proto.h"

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace ulp
{
class Provider;
struct SockAddr;
} // namespace ulp

namespace ulp::srpt
{

// Which data buffer descriptor format a command uses.
enum class DescMode : uint8_t {
	Auto,      // as Linux: immediate, else direct for one MR, else indirect
	Direct,    // one direct descriptor (a buffer of more than one MR fails: -E2BIG)
	Indirect,  // indirect, the whole table inside the SRP_CMD (beyond cmd_sg_entries: -E2BIG)
	External,  // indirect with the table in its own buffer, the target RDMA READs it: at
	           // most cmd_sg_entries - 1 of its entries inside the SRP_CMD (none if 0)
	Immediate, // immediate data for writes (larger than max_imm or not granted: -E2BIG);
	           // reads as Auto
};

struct InitiatorConfig {
	Provider *provider = nullptr; // the fabric: the soft provider or the verbs one
	std::string src_ip;           // bind the channels to this address ("" = any)
	uint64_t id_ext = 0;          // the target port id's halves (Linux's add_target)
	uint64_t ioc_guid = 0;
	uint64_t initiator_ext = 0;    // the initiator port id's high half (low: node GUID)
	uint32_t channels = 1;         // Linux's ch_count
	uint32_t queue_size = 64;      // commands in flight per channel at most (Linux's
	                               // queue_size); fewer if the login grants fewer credits
	uint32_t max_it_iu_len = 8260; // asked at login: what Linux asks by default
	uint32_t cmd_sg_entries = 12;  // descriptors inside an SRP_CMD at most (Linux's default)
	bool allow_ext_sg = false;     // more: the table outside the IU (Linux's allow_ext_sg)
	uint32_t max_desc_bytes = 0;   // bytes per MR (descriptor) at most; 0: one page list
	DescMode desc_mode = DescMode::Auto;
	bool immediate = true;                   // ask for immediate data (Linux's use_imm_data)
	uint32_t max_imm = 8192;                 // largest immediate write (Linux's max_imm_data)
	uint32_t max_io = 1u << 20;              // largest command buffer, bytes
	size_t bounce_bytes = 8u << 20;          // registered heap for unregistered buffers, bytes
	std::vector<std::span<uint8_t>> regions; // the caller's buffers: registered once at
	                                         // login, their commands go zero-copy
	// RDMA READs of our buffers the target may have in flight at once (rdma_cm
	// responder_resources; capped by the device). Linux offers 4.
	uint8_t read_credit = 4;
	bool check_credits = true; // false: send beyond req_lim (target tests only)
	std::chrono::milliseconds login_timeout{10000};
	std::chrono::milliseconds cmd_timeout{30000};
	std::chrono::milliseconds tmf_timeout{5000};
	std::chrono::milliseconds drain_timeout{5000}; // teardown's bound per queue
};

enum class DataDir : uint8_t { None, Read, Write };

struct Request {
	uint64_t lun = 0;             // LUN number (single level, SAM-5 4.7)
	std::span<const uint8_t> cdb; // 6..16 bytes, or 16 + a multiple of 4 up to 268
	DataDir dir = DataDir::None;
	std::span<uint8_t> data; // Read: filled; Write: sent. Valid until the callback.
	uint8_t task_attr = srp::ATTR_SIMPLE;
};

enum class Outcome : uint8_t {
	Completed,      // SRP_RSP came: status, sense and residuals are valid
	Aborted,        // a TMF of ours ended it, no SRP_RSP
	ConnectionLost, // its channel (or the initiator) failed first (error())
	Timeout,        // no SRP_RSP within cmd_timeout (the initiator failed with it)
	Cancelled,      // never sent: logout or close
};
const char *outcome_name(Outcome o);

struct Result {
	Outcome outcome = Outcome::Completed;
	uint8_t status = 0;     // SCSI status
	bool underflow = false; // DIUNDER / DOUNDER: residual = bytes not moved
	bool overflow = false;  // DIOVER / DOOVER: residual = bytes beyond the buffer
	uint32_t residual = 0;
	uint16_t sense_len = 0;
	std::array<uint8_t, 96> sense{};
	bool good() const { return outcome == Outcome::Completed && status == 0; }
};
using Callback = std::function<void(const Result &)>;

struct TmfResult {
	Outcome outcome = Outcome::Completed;
	uint8_t rsp_code = 0; // SRP r16a table 24 (srp::TmRspCode) when Completed
	bool ok() const { return outcome == Outcome::Completed && rsp_code == srp::TM_COMPLETE; }
};

// What the login of one channel got.
struct ChannelInfo {
	uint32_t credits = 0;       // req_lim now
	uint32_t granted = 0;       // req_lim_delta of the SRP_LOGIN_RSP
	uint32_t max_it_iu_len = 0; // the target's
	uint32_t max_ti_iu_len = 0; // the target's
	uint8_t rsp_flags = 0;      // LOGIN_RSP_* (multichannel outcome, immediate)
	uint32_t in_flight = 0;     // commands and TMFs sent and not answered
};

struct InitiatorStats {
	uint64_t commands = 0;     // SRP_CMDs sent
	uint64_t immediate = 0;    // of them with immediate data
	uint64_t direct = 0;       // with one direct descriptor
	uint64_t indirect = 0;     // with an indirect table inside the IU
	uint64_t external = 0;     // with the table outside the IU
	uint64_t bounced = 0;      // through the bounce heap
	uint64_t local_inv = 0;    // keys invalidated (LOCAL_INV)
	uint64_t zero_req_lim = 0; // submits refused for want of a credit (-EBUSY)
	uint64_t cred_reqs = 0;    // SRP_CRED_REQs received (and answered)
	uint64_t aer_reqs = 0;     // SRP_AER_REQs received (and answered)
	uint64_t t_logouts = 0;    // SRP_T_LOGOUTs received
	uint64_t tmfs = 0;         // SRP_TSK_MGMTs sent
};

class Initiator
{
public:
	explicit Initiator(const InitiatorConfig &cfg);
	~Initiator(); // close()
	Initiator(const Initiator &) = delete;
	Initiator &operator=(const Initiator &) = delete;

	// Log every channel in at dst, in turn (SINGLE, then MULTI), each within
	// login_timeout. 0, or a negative errno with *why (LOGIN_REJ: its reason). Channels
	// logged in before a later one failed stay (as Linux keeps them); channels() tells.
	int login(const SockAddr &dst, std::string *why);

	// Send a command; cb runs from poll() once it has ended (and its keys are
	// invalidated). *tag, when given, is its tag (for ABORT TASK). 0, or -EBUSY (no
	// credit or slot: poll and retry), -ENOTCONN (not logged in, or failed), -E2BIG (the
	// buffer cannot be described as desc_mode and the limits ask), -EINVAL (bad request).
	int submit(const Request &req, Callback cb, uint64_t *tag = nullptr);
	// Run completions, callbacks, CM events and timers; sleep up to timeout when there is
	// nothing to do. The number of callbacks run, or -ENOTCONN once failed and idle.
	int poll(std::chrono::milliseconds timeout);
	// submit + poll until done (bounded by cmd_timeout).
	Result run(const Request &req);
	// A task management function on channel ch (SRP_TSK_MGMT; ABORT TASK on the channel
	// the task went on, as ib_srp does, whatever ch says), waited for up to tmf_timeout.
	TmfResult task_mgmt(uint8_t func, uint64_t lun, uint64_t task_tag = 0, uint32_t ch = 0);
	// Wait (bounded) for commands in flight, SRP_I_LOGOUT on every channel, disconnect.
	void logout(std::chrono::milliseconds timeout = std::chrono::milliseconds(5000));
	// Drop every channel now: commands end ConnectionLost. Idempotent.
	void close(const std::string &why = "closed by the initiator");

	bool failed() const;
	const std::string &error() const;
	uint32_t channels() const; // logged in and not failed
	ChannelInfo channel_info(uint32_t ch) const;
	uint32_t in_flight() const; // commands sent and not yet called back
	const InitiatorStats &stats() const;
	std::array<uint8_t, 16> initiator_port_id() const;

private:
	struct Impl;
	std::unique_ptr<Impl> impl_;
};

} // namespace ulp::srpt
