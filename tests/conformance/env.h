// SPDX-License-Identifier: MIT
// tests/conformance/env.h - the environment of the provider conformance suite.
//
// The suite is written against core/ only and parameterised by a Fabric: a name that says
// which provider makes the devices and where the remote end of a connection lives. This
// file (and env.cc) is the one place that knows providers; every test reads the same
// whatever the fabric, so that it runs unchanged on rxe through the verbs provider.
//
//   soft-inproc  two soft devices (127.0.0.1, 127.0.0.2) in this process, in-process wire
//   soft-socket  the same, but Wire::Socket: the packet path, still one process
//   soft-inline  Exec::Inline on both devices: work runs in post/poll, deterministic
//   soft-shm     the same as soft-inproc, but Wire::Shm: the ring wire, still one process
//   soft-xproc   the peer's device lives in a child process (the ring wire between them,
//                the default across processes)
//   soft-xproc-socket  the same with Wire::Socket: the packet wire across processes
//   verbs        provider "verbs", device $ULP_CONF_VERBS_DEVICE (rxe, siw); the peer in a
//                child process like soft-xproc. Not in the default list.
//
// $ULP_CONF_FABRICS (comma separated) overrides the default list of fabrics.
//
// An Endpoint is one side of a connection: device, PD, CQs, optional SRQ, a CM id with its
// QP, and registered buffers, driven by small commands that both the test body (the local
// side) and a Peer (the remote side, see peer.h) use.
#pragma once

#include "core/cm.h"
#include "core/device.h"
#include "core/registry.h"

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

namespace ulp::conf
{

// Every wait in the suite is bounded by this; a test that hits it fails instead of hanging.
constexpr int kTimeoutMs = 5000;

struct FabricDesc {
	std::string name;
	std::string provider;          // registry name of the provider
	bool xproc = false;            // the peer lives in another process
	bool soft = false;             // soft:: hooks (faults, counters, profiles) are available
	bool inline_exec = false;      // soft Exec::Inline
	bool socket_wire = false;      // soft Wire::Socket
	bool shm_wire = false;         // soft Wire::Shm
	bool scattered_reg_mr = false; // REG_MR accepts page lists that are not virtually
	                               // contiguous (the verbs provider maps REG_MR on MWs)
	bool peer_death_event = false; // peer death reaches the CM as DISCONNECTED at once
	bool strict_iwarp_read_sink = false; // iWARP READ sink checked for REMOTE_WRITE
	std::string soft_wire; // soft: the wire its connections run on (soft::qp_wire)
};

// The fabrics the parameterised suites run on.
std::vector<std::string> fabric_names();
std::vector<std::string> local_fabric_names(); // without the cross-process ones
const FabricDesc &fabric(const std::string &name);

struct DevOpts {
	int side = 0;       // 0: the test's device, 1: the peer's (its own address)
	bool iwarp = false; // an iWARP-profile device (soft Profile::Iwarp, or a real RNIC)
};

// A device for one side on this fabric, or nullptr with *why set (the test skips).
Device *open_device(const FabricDesc &f, const DevOpts &o, std::string *why);
void close_device(const FabricDesc &f, Device *dev);
Provider *fabric_provider(const FabricDesc &f);
// The device's IP address (what a peer connects to).
std::string device_ip(const FabricDesc &f, int side);
// Inline execution: run every open device's pending work. No-op elsewhere.
void progress_all();

// Provider hooks that only the soft provider has. Each returns false when unsupported,
// and the test skips.
bool cut_connection(const FabricDesc &f, Qp &qp);
bool max_rd_inflight(const FabricDesc &f, Qp &qp, uint64_t *out);
bool rnr_naks(const FabricDesc &f, Qp &qp, uint64_t *out);
bool qp_wire(const FabricDesc &f, Qp &qp, std::string *out);

// A unique port for a listener: derived from the pid and a counter so that concurrent
// test processes (ctest -j) do not collide; listen() retries on -EADDRINUSE anyway.
uint16_t next_port();

// ---------------------------------------------------------------------------------------------
// One side of a connection.

struct EpConfig {
	uint32_t max_send_wr = 32;
	uint32_t max_recv_wr = 32;
	uint32_t max_sge = 2;
	uint32_t max_inline = 0;
	bool srq = false; // receives come from an SRQ
	uint32_t srq_wr = 64;
	int cqe = 256;
	bool shared_cq = false;          // one CQ for send and recv
	bool channel = false;            // CQs report to a completion channel
	uint8_t responder_resources = 4; // max_dest_rd_atomic
	uint8_t initiator_depth = 4;     // max_rd_atomic
	uint8_t rnr_retry = 7;           // 7 = infinite
	uint8_t retry = 7;
	std::vector<uint8_t> pdata; // REQ (connect) or REP (accept) private data
};

// A completion as the suite sees it: the WR is named by the wr_id given at post time.
struct WcInfo {
	uint32_t wr_id = 0;
	WcStatus status = WcStatus::Success;
	WcOpcode opcode = WcOpcode::Send;
	uint32_t byte_len = 0;
	uint32_t wc_flags = 0;
	uint32_t imm_data = 0;
	uint32_t invalidate_rkey = 0;
	uint32_t qp_num = 0;
	uint8_t recv = 0; // came from the receive CQ
};

struct MrInfo {
	int32_t id = -1; // the endpoint's handle
	uint64_t addr = 0;
	uint64_t length = 0;
	uint32_t lkey = 0;
	uint32_t rkey = 0;
};

// One send WR described by value, so that it can cross a socketpair.
struct PostSend {
	WrOpcode opcode = WrOpcode::Send;
	uint32_t wr_id = 0;
	uint32_t flags = 0x2; // SEND_SIGNALED
	int32_t mr = -1;      // local buffer handle; -1: no SGE (zero length)
	uint64_t offset = 0;
	uint32_t length = 0;
	uint32_t lkey_xor = 0; // corrupt the SGE's lkey (local protection tests)
	uint64_t remote_addr = 0;
	uint32_t rkey = 0;
	uint32_t imm = 0;
	uint32_t inv_rkey = 0; // SendWithInv / LocalInv
	uint8_t no_cqe = 0;    // post without a cqe (legal only unsignaled)
};

// READ credits: as a CM event reports them, or as a QP holds them.
struct ReadCredits {
	uint32_t responder_resources = 0; // event: READs to answer; QP: max_dest_rd_atomic
	uint32_t initiator_depth = 0;     // event: READs to issue; QP: max_rd_atomic
};

struct CmRecord {
	CmEventType type;
	int status;
	std::vector<uint8_t> pdata;
	bool on_listener;
	ReadCredits credits; // the event's ConnParam
};

class Endpoint
{
public:
	Endpoint(const FabricDesc &f, Device *dev, int side);
	~Endpoint();
	Endpoint(const Endpoint &) = delete;
	Endpoint &operator=(const Endpoint &) = delete;

	// PD, CQs and SRQ per cfg. Returns 0 or a negative errno.
	int setup(const EpConfig &cfg);
	QpInitAttr qp_init_attr() const;

	// Passive side: bind a fresh port on the device's address and listen; every
	// CONNECT_REQUEST gets a QP and is accepted with cfg.pdata.
	int listen(SockAddr *bound);
	// Active side: resolve, create the QP, connect with cfg.pdata, wait for ESTABLISHED.
	int connect(const SockAddr &dst, int timeout_ms = kTimeoutMs);
	// Wait for a CM event of this type on the connection (not the listener).
	int wait_cm_event(CmEventType t, int timeout_ms);
	bool saw_cm_event(CmEventType t);
	std::vector<uint8_t> peer_pdata(); // private data of CONNECT_REQUEST / ESTABLISHED
	// READ credits of the CONNECT_REQUEST (passive) or ESTABLISHED (active) event; -ENOENT
	// before it.
	int event_credits(ReadCredits *out);
	// The QP's max_dest_rd_atomic and max_rd_atomic (Qp::query).
	int qp_credits(ReadCredits *out);
	int disconnect();

	// Memory: a page-aligned zeroed buffer registered with access (in a second PD when
	// other_pd, for PD violation tests).
	MrInfo reg_mr(size_t len, uint32_t access, bool other_pd = false);
	uint8_t *buf(int mr);
	Mr *mr(int id);
	int fill(int mr, uint64_t off, std::span<const uint8_t> data);
	int read(int mr, uint64_t off, uint32_t len, std::vector<uint8_t> *out);

	// n receive WRs of len bytes at buf(mr)+off (mr -1: zero-length), wr_ids wr_id..+n-1.
	int post_recv(int mr, uint64_t off, uint32_t len, int n, uint32_t wr_id);
	int post_send(const PostSend &ps);
	// Reap until n completions or timeout; returns how many were reaped (>= 0).
	int poll(int n, int timeout_ms, std::vector<WcInfo> *out);

	Cqe *cqe(uint32_t wr_id);
	static uint32_t wr_id_of(const Wc &wc);

	Device &device() { return *dev_; }
	Pd *pd() { return pd_.get(); }
	Cq *send_cq() { return scq_.get(); }
	Cq *recv_cq() { return rcq_ ? rcq_.get() : scq_.get(); }
	Srq *srq() { return srq_.get(); }
	CompChannel *channel() { return ch_.get(); }
	Qp *qp() { return conn_ ? conn_->qp() : nullptr; }
	CmId *id() { return conn_.get(); }
	QpState qp_state();
	const EpConfig &config() const { return cfg_; }
	std::vector<AsyncEvent> async_events();

private:
	void on_cm(CmId *id, CmEvent &ev);
	void on_async(const AsyncEvent &ev);

	const FabricDesc &fab_;
	Device *dev_;
	int side_;
	EpConfig cfg_;
	std::unique_ptr<Pd> pd_, pd2_;
	std::unique_ptr<CompChannel> ch_;
	std::unique_ptr<Cq> scq_, rcq_;
	std::unique_ptr<Srq> srq_;
	struct Buffer {
		uint8_t *mem = nullptr;
		size_t len = 0;
		std::unique_ptr<Mr> mr;
	};
	std::vector<Buffer> bufs_;
	struct TaggedCqe {
		Cqe cqe;
		uint32_t id;
	};
	std::map<uint32_t, std::unique_ptr<TaggedCqe>> cqes_;

	std::mutex lock_;
	std::condition_variable cond_;
	std::deque<CmRecord> cm_events_;
	std::vector<AsyncEvent> async_;
	std::unique_ptr<CmId> listener_;
	std::unique_ptr<CmId> conn_;
	int accept_err_ = 0;
};

// Readable names for gtest output and failure messages.
const char *status_name(WcStatus s);
std::string describe(const std::vector<WcInfo> &wcs);

// A byte pattern that differs per seed and offset, for data verification.
std::vector<uint8_t> pattern(size_t len, uint8_t seed);

} // namespace ulp::conf
