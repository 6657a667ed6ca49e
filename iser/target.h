// SPDX-License-Identifier: MIT
// iser/target.h - the iSER transport, target side (RFC 7145; the kernel's ib_isert):
// RDMA/CM portals on a device (the soft provider or an rdma-core one) and one Conn per
// connection, running the iSCSI session layer (Conn) over RDMA.
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
//     login response: RFC 7145 7.? "the target must post receive buffers before ...") and
//     each is re-posted as soon as its PDU has been taken apart, before the response
//     that returns the initiator's credit for it.
//
// Resources per connection: a QP on the RDMA/CM id, sized by rw_init_qp for cmd_window
// rw contexts; one CQ from the device's CQ pool (Workqueue context) for both queues; a
// receive ring and a send ring of registered buffers (BufPool); data buffers come from the
// portal's per-device DmaHeap (one contiguous registered block per command).
//
// Serialisation: a Conn's work must run one piece at a time. Over TCP that is one thread;
// here completions arrive on the CQ pool's workers and CM events on the provider's CM
// thread, so Conn serialises by its lock instead: every entry takes it, does its work
// and runs the events posted meanwhile before leaving. An event posted from any other
// thread (a backstore completion) runs on that thread when the lock is free (a try-lock:
// the poster holds the inbox lock); otherwise the holder runs it, since a holder lets go
// of the lock only under the inbox lock, once the inbox is empty. No event waits for a
// thread to be woken for it: under TCG each switch costs tens of microseconds. The
// portal's event thread ticks the connections' timers, drains and frees the connections
// that are done, and runs the blocking parts of teardown (drain_qp).
#pragma once

#include "core/buf_pool.h"
#include "core/cm.h"
#include "core/dma_heap.h"
#include "core/registry.h"
#include "iscsi/target/conn.h"
#include "iscsi/target/target.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace ulp::iser
{

class Conn;

struct PortalConfig {
	uint32_t recv_dsl = 8192;       // our TargetRecvDataSegmentLength: receive buffer data
	                                // room (RFC 7145 6.? default 8192)
	uint32_t send_dsl = 8192;       // the largest data segment we send in one SEND
	uint32_t extra_recvs = 32;      // receive buffers beyond cmd_window + immediate slots:
	                                // NOP-Out, TMF, Text, Logout, unsolicited Data-Out
	uint32_t send_ring = 0;         // send buffers; 0: cmd_window + 32
	size_t heap_bytes = 256u << 20; // data buffers per device (DmaHeap), bytes
	size_t max_io = 16u << 20;      // largest command buffer (a power of two)
	int vector_hint = -1;           // CQ pool completion vector; -1: round robin
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

class Portal
{
public:
	Portal(iscsi::target::Target &target, Provider &provider, const PortalConfig &cfg = {});
	// Stops (stop()) first.
	~Portal();
	Portal(const Portal &) = delete;
	Portal &operator=(const Portal &) = delete;

	// Listen on addr (its device is the one the provider binds the address to). Port 0:
	// the provider picks (port() tells). 0, or a negative errno with *why.
	int listen(const SockAddr &addr, std::string *why);
	uint16_t port() const { return port_; }
	int start(); // the event thread; 0 or a negative errno

	void stop_accepting(); // destroy the listening id (connections stay)
	// Stop the event thread and free what is left. Call Target::stop first so that
	// the connections are gone; any that are not are left allocated (logged): freeing
	// them could let a late completion touch freed memory.
	void stop();

	size_t conns();
	PortalStats stats();

	// For Conn.
	const PortalConfig &cfg() const { return cfg_; }
	void schedule_close(Conn *c); // drain and reap c on the event thread
	void kick(Conn *c);           // run c's events on the event thread (post_deferred)
	void count(uint64_t PortalStats::*field);

private:
	// What a device needs once, for every connection on it.
	struct DeviceRes {
		std::unique_ptr<Pd> pd;
		std::unique_ptr<DmaHeap> heap; // data buffers
	};

	void on_cm_event(CmId *id, CmEvent &ev);
	void on_connect_request(CmEvent &ev);
	DeviceRes *device_res(Device &dev); // under lock_
	void event_loop();
	void reap(const std::vector<Conn *> &all); // free those done (event thread)

	iscsi::target::Target &target_;
	Provider &provider_;
	PortalConfig cfg_;
	std::unique_ptr<CmId> listen_id_;
	uint16_t port_ = 0;

	std::mutex lock_;            // guards everything below
	std::condition_variable cv_; // event thread work
	std::map<Device *, DeviceRes> devices_;
	std::vector<std::unique_ptr<Conn>> conns_; // every connection, owned
	std::vector<Conn *> closing_;              // to drain on the event thread
	std::vector<Conn *> kicked_;               // events to run on the event thread
	bool stop_ = false;
	PortalStats stats_;
	std::thread thread_;
};

} // namespace ulp::iser
