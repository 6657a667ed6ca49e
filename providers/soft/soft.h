// SPDX-License-Identifier: MIT
// providers/soft/soft.h - the software RDMA provider's public API.
//
// Devices, profiles and limits; the wire choice; deterministic inline execution; fault
// injection; counters. Everything else goes through core/ (Device, Pd, Qp, CmId, ...).
//
// Addresses: a soft device owns one IPv4 address (default 127.0.0.1). A CM listener on
// IP:PORT is found by connecting peers in two places, in this order:
//   1. this process's listener table (in-process wire: the engine copies directly
//      between registered regions), unless the device's wire is Wire::Socket;
//   2. the Linux abstract Unix-domain socket "@ulp-soft/IP:PORT": one stream socket per
//      connection, which carries the CM handshake and then either the ring wire
//      (requests and answers in shared-memory rings with eventfd doorbells, the socket
//      left for memfd passing and peer death; the default) or the packet wire (packets
//      like a real transport). The connecting device's Wire picks; the listener follows.
//      Abstract sockets vanish with their process and are scoped by network namespace,
//      like an IP address.
#pragma once

#include "core/device.h"
#include "core/registry.h"

#include <cstdint>
#include <string>

namespace ulp::soft
{

// The kind of RDMA device a soft device behaves as.
enum class Profile : uint8_t {
	Ib,    // IB/RoCE-like: MEM_MGT_EXTENSIONS, LAST_WQE_REACHED, CQ resize, 30-entry SGEs
	Iwarp, // iWARP-like: READ sink needs REMOTE_WRITE, max_sge_rd 1, no LAST_WQE, no resize
};

// How a soft device's connections carry their traffic (see the top of this file).
enum class Wire : uint8_t {
	Auto, // in-process when the listener is in this process, else the ring wire (or the
	      // packet wire when the environment has ULP_SOFT_WIRE=socket)
	Socket, // always the packet wire, even in-process (exercises the packet path)
	Shm,    // always the ring wire, even in-process (exercises the ring path)
};

// Who executes a soft device's work requests.
enum class Exec : uint8_t {
	Engine, // engine threads of the device execute work, like a NIC's queues (default)
	Inline, // work runs inside post_send / post_recv / poll / progress() on the
	        // caller's thread: deterministic, for unit tests of the in-process wire
	        // (socket connections are serviced too, but only inside those calls)
};

// Limits: 0 keeps the profile's default, except that an unset max_sge_rd never exceeds
// max_sge (a READ gathers no more than any WR may).
struct Limits {
	uint32_t max_qp_wr = 0;  // DeviceAttr::max_qp_wr: WRs per work queue
	uint32_t max_sge = 0;    // DeviceAttr::max_sge: SGEs per WR
	uint32_t max_sge_rd = 0; // DeviceAttr::max_sge_rd: SGEs per RDMA READ
	uint32_t max_sgl_rd = 0; // DeviceAttr::max_sgl_rd; both profiles report 0 (as rxe/siw)
	uint32_t max_fast_reg_page_list_len = 0; // DeviceAttr's: pages per REG_MR
	uint32_t max_qp_rd_atom = 0;             // DeviceAttr's: READs in flight per QP
	uint32_t max_cqe = 0;                    // DeviceAttr::max_cqe: entries per CQ
	uint32_t max_inline_data = 0;            // DeviceAttr's: bytes per SEND_INLINE WR
	uint32_t num_comp_vectors = 0;           // DeviceAttr's: completion vectors
};

// What create_device makes.
struct DeviceConfig {
	std::string name;              // "" picks soft0, soft1, ...
	Profile profile = Profile::Ib; // IB/RoCE-like or iWARP-like
	std::string ip = "127.0.0.1";  // the device's address (its GID is IPv4-mapped)
	Exec exec = Exec::Engine;      // engine threads, or inline on the caller's
	Wire wire = Wire::Auto;        // how its connections travel
	Limits limits;                 // the profile's limits, overridden where not 0
	uint64_t fault_seed = 1;       // seeds random fault injection
	// DEVICE_* capability bits the device withholds, and behaves accordingly: a profile
	// minus, say, CQ moderation (Cq::modify then fails with -EOPNOTSUPP), as some real
	// devices ship.
	uint64_t clear_cap_flags = 0;
	// Engines (a multi-queue NIC's queues): a QP runs on engine send CQ comp_vector % engines,
	// fixed at create_qp. 0: ULP_SOFT_ENGINES from the environment if set, else
	// min(num_comp_vectors, CPUs) as cq_poll sizes its pollers. An explicit count (here or
	// in the environment) is capped at num_comp_vectors only, not at the CPUs, so that a
	// 2-core machine can run 4 engines (tests). Inline mode has as many, run in index order.
	uint32_t engines = 0;
};

// Create a device and register it with the core registry. nullptr and errno on bad config.
Device *create_device(const DeviceConfig &cfg);
// Unregister and free. Every object on the device must be gone already.
void destroy_device(Device *dev);
bool is_soft(const Device &dev); // dev is a soft device (its functions below apply)

// The provider (for CM ids): registered with the core registry as "soft".
Provider &provider();

// Inline mode: run pending work (RNR retries whose timer expired, socket traffic) now.
// Returns the number of work items processed. Harmless in engine mode.
int progress(Device &dev);

// ---------------------------------------------------------------------------------------------
// Fault injection. Deterministic: rules fire at the n-th matching event, or at random
// with the device's fault_seed.

// Where a FaultRule strikes.
enum class FaultPoint : uint8_t {
	PostSend,        // post_send fails with -EIO for the matching WR
	PostRecv,        // post_recv (QP or SRQ) fails with -EIO at the matching WR
	DropCompletion,  // the completion is not delivered (the WR still executed)
	DelayCompletion, // the completion is delivered delay_us later; later WRs' completions may
	                 // overtake it (a fault: hardware CQs are ordered)
	RkeyCheck,       // the responder's rkey check fails (REM_ACCESS_ERR at the requester)
	QpError,         // the QP moves to ERR before executing the matching WR
	CutConnection,   // the wire to the peer is cut before the matching WR (peer death)
};

// One fault to inject (inject_fault): where, on which QP, when and how often.
struct FaultRule {
	FaultPoint point = FaultPoint::PostSend; // where it strikes
	uint32_t qp_num = 0;                     // 0 = any QP of the device
	uint64_t nth = 1;         // fire at the nth matching event (1-based); 0 = use probability
	double probability = 0.0; // with nth == 0: chance per matching event
	uint32_t count = 1;       // how many times the rule fires (0 = unlimited)
	uint32_t delay_us = 0;    // DelayCompletion
	// Only WRs of one opcode: PostSend, DropCompletion, DelayCompletion, QpError and
	// CutConnection (the WR's own opcode; e.g. DropCompletion of RdmaRead loses the
	// completion of a READ that executed). Other points cannot tell and never match.
	bool match_opcode = false;
	WrOpcode opcode = WrOpcode::Send; // with match_opcode
};

int inject_fault(Device &dev, const FaultRule &rule); // returns a rule id >= 0
void clear_faults(Device &dev);                       // every rule of the device is dropped
uint64_t faults_fired(Device &dev); // how many times the device's rules fired, in all

// Immediate faults.
void force_qp_error(Qp &qp);          // the QP enters ERR now (QP_FATAL event)
void force_device_fatal(Device &dev); // every QP to ERR, DEVICE_FATAL event
void cut_connection(Qp &qp);          // as if the peer died: both sides see the wire drop
// The device goes away, as `rdma link del` makes the kernel's rdma_cm report it: every CM
// id on it hears DEVICE_REMOVAL (a listener stops listening, a connection's peer sees a
// disconnect, its QP goes to ERR), and a bind to its address fails from now on (a new
// device may take the address). Its objects stay until their consumer destroys them;
// destroy_device(dev) after that.
void remove_device(Device &dev);

// Engines: how many the device has, and the one that executes a QP (0 .. count-1).
unsigned engine_count(Device &dev);
unsigned qp_engine(Qp &qp); // the engine that executes qp's work

// The wire a QP's connection runs on: "inproc", "socket" (the packet wire), "shm" (the ring
// wire), or "none" (not connected).
const char *qp_wire(Qp &qp);

// ---------------------------------------------------------------------------------------------
// Counters (monotonic).

// A soft device's or QP's counters (device_counters, qp_counters).
struct Counters {
	uint64_t posted = 0;          // send + recv WRs accepted by post_*
	uint64_t post_sends = 0;      // post_send calls that accepted a WR (doorbells rung)
	uint64_t completed = 0;       // completions delivered to CQs (all statuses)
	uint64_t errors = 0;          // completions with an error status other than flush
	uint64_t flushes = 0;         // WR_FLUSH_ERR completions (including silent ones)
	uint64_t bytes_tx = 0;        // payload bytes sent (SEND, WRITE) or served (READ responses)
	uint64_t bytes_rx = 0;        // payload bytes received (RECV, WRITE target, READ data)
	uint64_t rnr_naks = 0;        // RNR NAKs seen as requester
	uint64_t max_rd_inflight = 0; // high-water mark of outstanding READs (per QP: its own)
};

Counters device_counters(Device &dev); // the device's, over all its QPs
Counters qp_counters(Qp &qp);          // one QP's

// A completion channel's system calls on its eventfd: the writes that made its fd readable
// and the reads that cleared it. A waiter that runs its QPs itself (the ring wire's
// doorbells handed to the channel) takes the events it raised there with neither.
struct ChannelCounters {
	uint64_t fd_writes = 0; // eventfd writes (an event came while the fd was clear)
	uint64_t fd_reads = 0;  // eventfd reads (the last pending event was taken)
};
ChannelCounters channel_counters(CompChannel &ch); // ch: a soft device's channel

} // namespace ulp::soft
