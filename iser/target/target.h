// SPDX-License-Identifier: MIT
// iser/target/target.h - the iSER transport, target side (RFC 7145; the kernel's ib_isert):
// RDMA/CM portals on a device (the soft provider or an rdma-core one) and one Conn per
// connection (conn.h), running the iSCSI session layer (iscsi::target::Conn) over RDMA.
//
// What iSER changes (RFC 7145 section 7), and where it happens here:
//   - every iSCSI PDU travels in a SEND, behind a 28-byte iSER header; no digests
//     (Conn::queue_pdu, handle_recv);
//   - SCSI READ data goes by RDMA WRITE into the initiator's buffer (read STag), chained
//     before the SEND carrying the SCSI Response, which is a SEND_WITH_INV of the STag
//     when the initiator allows it and the device can (send_read_response);
//   - SCSI WRITE data beyond the immediate and unsolicited data comes by RDMA READ from
//     the initiator's buffer (write STag) (fetch_data_out); no R2T, no Data-In PDU;
//   - receive buffers are posted before the connection is accepted (so before the final
//     login response, as RFC 7145's connection setup rules ask of the target) and
//     each is re-posted as soon as its PDU has been taken apart, before the response
//     that returns the initiator's credit for it.
//
// Built on rdma_conn/: the portal (listen, per-device PD and data heap, CQs from the pool,
// the event thread with bounded drain and reap) is an rdma::Portal, each connection an
// rdma::PortalConn (its QP, CQ and rw contexts) and an iscsi::target::Conn (the session
// layer), serialised by Serial in Inline mode: completions arrive on the CQ pool's
// workers, CM events on the provider's CM thread, SCSI completions on backstore threads,
// and whichever thread brings the work runs it (no thread switch per I/O: each costs tens
// of microseconds under TCG). Per connection: a receive ring and a send ring of registered
// buffers (rdma::RecvRing, rdma::SendRing), rw contexts for the CmdSN window, and data
// buffers from the portal's per-device DmaHeap (one contiguous block per command).
#pragma once

#include "core/shard_counters.h"
#include "iscsi/target/target.h"
#include "rdma_conn/portal.h"

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace ulp::iser
{

struct PortalConfig {
	uint32_t recv_dsl = 8192;            // our TargetRecvDataSegmentLength: receive buffer data
	                                     // room (RFC 7145's key: default 8192)
	uint32_t send_dsl = 8192;            // the largest data segment we send in one SEND
	uint32_t extra_recvs = 32;           // receive buffers beyond cmd_window + immediate slots:
	                                     // NOP-Out, TMF, Text, Logout, unsolicited Data-Out
	uint32_t send_ring = 0;              // send buffers; 0: cmd_window + 32
	size_t heap_bytes = 256u << 20;      // data buffers per device (DmaHeap), bytes
	size_t max_io = 16u << 20;           // largest command buffer (a power of two)
	int vector_hint = -1;                // CQ pool completion vector; -1: round robin
	PollCtx poll_ctx = PollCtx::Softirq; // who runs the completions (rdma::PortalConfig)
	std::chrono::milliseconds drain_timeout{10000}; // drain_qp's bound per queue
	// Bound on one command's RDMA transfer: the READ of its write data, or the WRITEs of
	// its read data with the response SEND chained behind them. On a live RC connection
	// either completes or fails within the transport's retries (well under a second);
	// past this bound the connection is dropped with a log line, which flushes the WRs
	// and ends the command, instead of the initiator timing out with nothing logged.
	std::chrono::milliseconds data_timeout{10000};
};

// Counters (diagnostics, tests).
struct PortalStats {
	uint64_t accepted = 0;       // connections accepted
	uint64_t rejected = 0;       // connection requests refused
	uint64_t send_inv = 0;       // responses sent as SEND_WITH_INV
	uint64_t rdma_reads = 0;     // RDMA READ contexts posted (write data)
	uint64_t rdma_writes = 0;    // RDMA WRITE contexts posted (read data)
	uint64_t task_set_full = 0;  // commands answered TASK SET FULL for lack of a buffer
	uint64_t data_timeouts = 0;  // connections dropped for an RDMA transfer past data_timeout
	uint64_t no_read_credit = 0; // writes failed: the initiator granted no RDMA READ credit
};

class Portal final : public rdma::Portal
{
public:
	Portal(iscsi::target::Target &target, Provider &provider, const PortalConfig &cfg = {});
	// Stops (stop()) first. Call Target::stop before: the connections are gone then; any
	// that are not are left allocated (logged), since freeing them could let a late
	// completion touch freed memory.
	~Portal() override;

	PortalStats stats();

	// For Conn.
	const PortalConfig &iser_cfg() const { return cfg_; }
	iscsi::target::Target &target() { return target_; }
	void count(uint64_t PortalStats::*field); // any thread, no lock

protected:
	std::unique_ptr<rdma::PortalConn> on_connect_request(CmEvent &ev, rdma::DeviceRes &res,
	                                                     ConnParam *accept,
	                                                     std::vector<uint8_t> *reject) override;
	void accept_failed(rdma::PortalConn *c, int rc) override;

private:
	iscsi::target::Target &target_;
	PortalConfig cfg_;
	// count()'s counters, per thread: every poller bumps them per command (accepted and
	// rejected come from rdma::Portal).
	ShardCounters<PortalStats> stats_;
};

} // namespace ulp::iser
