// SPDX-License-Identifier: MIT
// core/verbs.h - the verbs vocabulary: work requests, work completions, attributes.
//
// Mirrors include/rdma/ib_verbs.h closely enough that a reader of drivers/infiniband/core
// recognises every name. Values of the enums are ulp's own; providers translate.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

namespace ulp
{

class Cq;
class Qp;
class Srq;
class Mr;
class Device;

// ---------------------------------------------------------------------------------------------
// Work completions

// The outcome of a work request (ib_wc_status). Only Success carries a valid opcode.
enum class WcStatus : uint8_t {
	Success,
	LocLenErr,      // local length error: receive buffer too small, or SGE sum overflow
	LocQpOpErr,     // local QP operation error: WR inconsistent with the QP
	LocProtErr,     // local protection error: bad lkey / access / range on a local SGE
	WrFlushErr,     // WR flushed because the QP is in (or entered) the ERR state
	MwBindErr,      // memory window bind failed
	BadRespErr,     // unexpected response from the responder
	LocAccessErr,   // local access error (e.g. READ sink without LOCAL_WRITE)
	RemInvReqErr,   // responder saw an invalid request (e.g. its receive buffer too small)
	RemAccessErr,   // responder rkey / PD / access / range violation
	RemOpErr,       // responder could not complete the operation
	RetryExcErr,    // transport retry counter exceeded (peer gone)
	RnrRetryExcErr, // RNR retry counter exceeded (no receive posted at the responder)
	RemAbortErr,    // responder aborted the operation
	FatalErr,       // device fatal error
	GeneralErr,     // anything else
};

// The status in ib_wc_status_msg() words for log lines ("WR flushed").
const char *wc_status_str(WcStatus s);

// What a successful completion was (ib_wc_opcode): the WR's operation, or a receive.
enum class WcOpcode : uint8_t {
	Send,
	RdmaWrite,
	RdmaRead,
	LocalInv,
	RegMr,
	BindMw,
	Recv,            // responder side of SEND / SEND_WITH_IMM / SEND_WITH_INV
	RecvRdmaWithImm, // responder side of RDMA_WRITE_WITH_IMM
};

// Wc::wc_flags bits.
enum : uint32_t {
	WC_WITH_IMM = 1u << 0,        // imm_data is valid
	WC_WITH_INVALIDATE = 1u << 1, // invalidate_rkey is valid (SEND_WITH_INV received)
};

// The kernel's struct ib_cqe: embed it in the ULP's per-request context and recover the
// context with container_of-style arithmetic in done(). Every signaled WR carries one.
struct Cqe {
	// Called once per completion by whoever processes the CQ (cq_poll/ or the owner), on
	// that thread; wc is valid only during the call.
	void (*done)(Cq *cq, struct Wc *wc) = nullptr;
};

// The kernel's container_of for anything embedded in a context, above all a Cqe:
//   auto *d = container_of(wc->wr_cqe, &RecvDesc::cqe);
// offsetof, but through a member pointer and for any class without virtual bases:
// offsetof itself is only specified for standard-layout classes, and a ULP's context
// (RwCtx, std::unique_ptr, a base class) seldom is; nor is a cast of the Cqe's address to
// the context's, even with the Cqe first. The probe is never constructed, only its
// member's address taken; the compiler folds the offset to a constant.
template <typename T, typename M> T *container_of(M *member_ptr, M T::*member)
{
	alignas(T) static const unsigned char probe[sizeof(T)] = {};
	const auto *t = reinterpret_cast<const T *>(probe);
	const auto off = reinterpret_cast<const unsigned char *>(&(t->*member)) - probe;
	return reinterpret_cast<T *>(reinterpret_cast<unsigned char *>(member_ptr) - off);
}

// One work completion (ib_wc), as Cq::poll returns it and Cqe::done receives it.
struct Wc {
	Cqe *wr_cqe = nullptr; // the posting WR's cqe; null when it had none (an unsignaled
	                       // WR's flush: reported here, dropped by cq_poll/ as the
	                       // kernel's __ib_process_cq does)
	WcStatus status = WcStatus::Success; // Success, or why the WR failed or was flushed
	WcOpcode opcode = WcOpcode::Send;    // valid only when status == Success (as on hardware)
	uint32_t vendor_err = 0;             // provider-specific detail, 0 when none
	uint32_t byte_len = 0; // bytes received (Recv / RecvRdmaWithImm); bytes read for RdmaRead
	Qp *qp = nullptr;      // the QP this completion belongs to
	uint32_t qp_num = 0;   // its number (for SRQ completions)
	uint32_t src_qp = 0;   // remote QP number (responder side)
	uint32_t wc_flags = 0; // WC_WITH_IMM, WC_WITH_INVALIDATE
	uint32_t imm_data = 0; // host order; valid with WC_WITH_IMM
	uint32_t invalidate_rkey = 0; // valid with WC_WITH_INVALIDATE
};

// ---------------------------------------------------------------------------------------------
// Work requests

// A scatter/gather element (ib_sge): local registered memory a WR reads or writes.
struct Sge {
	uint64_t addr = 0;   // virtual address inside the MR named by lkey
	uint32_t length = 0; // bytes
	uint32_t lkey = 0;   // the local key of the MR the range lies in
};

// A send-queue work request's operation (ib_wr_opcode).
enum class WrOpcode : uint8_t {
	RdmaWrite,
	RdmaWriteWithImm,
	Send,
	SendWithImm,
	RdmaRead,
	SendWithInv,
	LocalInv,
	RegMr,
};

// The opcode's name for log lines ("RDMA_WRITE").
const char *wr_opcode_str(WrOpcode op);

// SendWr::send_flags bits.
enum : uint32_t {
	SEND_FENCE = 1u << 0,     // wait for all earlier RDMA READs to complete before this WR
	SEND_SIGNALED = 1u << 1,  // generate a completion on success
	SEND_SOLICITED = 1u << 2, // solicited event at the responder
	SEND_INLINE = 1u << 3,    // copy the payload at post time; lkeys are not checked
};

// Access flags for MRs and REG_MR.
enum : uint32_t {
	ACCESS_LOCAL_WRITE = 1u << 0,
	ACCESS_REMOTE_WRITE = 1u << 1,
	ACCESS_REMOTE_READ = 1u << 2,
	ACCESS_REMOTE_ATOMIC = 1u << 3,
	ACCESS_MW_BIND = 1u << 4,
};

// Base of the send work-request family. Like the kernel's ib_send_wr, the specialised
// requests (RdmaWr, RegWr) derive from it and the provider downcasts by opcode.
struct SendWr {
	SendWr *next = nullptr;       // the next WR of a chain posted at once, or null
	Cqe *wr_cqe = nullptr;        // may be null only when the WR is unsignaled
	const Sge *sg_list = nullptr; // num_sge entries; read by post_send (SEND_INLINE: copied)
	int num_sge = 0;              // at most the QP's cap.max_send_sge
	WrOpcode opcode = WrOpcode::Send; // what the WR does; selects the derived type
	uint32_t send_flags = 0;          // SEND_* bits
	uint32_t imm_data = 0;            // SendWithImm / RdmaWriteWithImm (host order)
	uint32_t invalidate_rkey = 0;     // SendWithInv: the rkey the responder invalidates;
	                                  // LocalInv: the key to invalidate
};

// RDMA_WRITE, RDMA_WRITE_WITH_IMM, RDMA_READ.
struct RdmaWr : SendWr {
	uint64_t remote_addr = 0; // the peer's virtual address (inside the MR of rkey)
	uint32_t rkey = 0;        // the peer's remote key, as it advertised it
};

// REG_MR: bind the page list previously mapped into mr (Mr::map_sg) to key, with access.
struct RegWr : SendWr {
	Mr *mr = nullptr;    // a fast-registration MR (Pd::alloc_mr), mapped by Mr::map_sg
	uint32_t key = 0;    // the new lkey/rkey, normally mr->rkey() after inc_rkey
	uint32_t access = 0; // ACCESS_* bits
};

// The kernel's rdma_wr(): the RdmaWr a READ/WRITE opcode's SendWr is (providers use it).
inline const RdmaWr &rdma_wr(const SendWr &wr)
{
	return static_cast<const RdmaWr &>(wr);
}
// The kernel's reg_wr(): the RegWr a RegMr opcode's SendWr is.
inline const RegWr &reg_wr(const SendWr &wr)
{
	return static_cast<const RegWr &>(wr);
}

// A receive work request (ib_recv_wr): where the next incoming SEND lands.
struct RecvWr {
	RecvWr *next = nullptr;       // the next WR of a chain posted at once, or null
	Cqe *wr_cqe = nullptr;        // receive completions are always reported
	const Sge *sg_list = nullptr; // num_sge entries of registered memory (LOCAL_WRITE)
	int num_sge = 0;              // at most the QP's cap.max_recv_sge; 0 for an empty receive
};

// ---------------------------------------------------------------------------------------------
// Device and port attributes (ib_device_attr, ib_port_attr)

// DeviceAttr::device_cap_flags bits.
enum : uint64_t {
	DEVICE_MEM_MGT_EXTENSIONS = 1ull << 0, // REG_MR / LOCAL_INV / SEND_WITH_INV
	DEVICE_SG_GAPS_REG = 1ull << 1,        // REG_MR accepts page lists with gaps
	DEVICE_RC_RNR_NAK_GEN = 1ull << 2,     // responder generates RNR NAKs
	DEVICE_SRQ_RESIZE = 1ull << 3,
	DEVICE_CQ_RESIZE = 1ull << 4,
	DEVICE_CQ_MODERATION = 1ull << 5,  // modify_cq(count, period) is supported
	DEVICE_LAST_WQE_EVENT = 1ull << 6, // raises LAST_WQE_REACHED for QPs on an SRQ
	DEVICE_MEM_WINDOW = 1ull << 7,
	// REG_MR maps one virtually contiguous range only (fast-reg MRs carried by memory
	// windows, as the verbs provider's are): a scattered page list takes one MR per run.
	// No kernel counterpart; the opposite end of DEVICE_SG_GAPS_REG.
	DEVICE_REG_MR_CONTIG = 1ull << 8,
};

// The kind of device (rdma_node_type): an IB/RoCE channel adapter, or an iWARP RNIC.
enum class NodeType : uint8_t { Ca, Rnic };
// A port's link layer (rdma_port_get_link_layer).
enum class LinkLayer : uint8_t { InfiniBand, Ethernet, Iwarp };

// What a device can do and how much of it (ib_device_attr); Device::attr().
struct DeviceAttr {
	uint64_t node_guid = 0;        // the device's node GUID, host order (SRP target port ids
	                               // default to it, as ib_srpt's srpt_service_guid does)
	uint64_t device_cap_flags = 0; // DEVICE_* bits
	uint64_t max_mr_size = 0;      // bytes
	uint64_t page_size_cap = 0;    // supported page sizes, bit n = 2^n bytes
	uint32_t vendor_id = 0;        // IEEE OUI of the vendor; 0 for the soft provider
	uint32_t max_qp = 0;           // QPs per device
	uint32_t max_qp_wr = 0;        // per work queue
	uint32_t max_sge = 0;          // per send or receive WR
	uint32_t max_sge_rd = 0;       // per RDMA READ WR (iWARP: 1)
	uint32_t max_sgl_rd = 0;     // the kernel's max_sgl_rd: a READ gathering more entries than
	                             // this is cheaper through an MR (rw/ switches to REG_MR);
	                             // 0 = not reported (then only iWARP or force-MR uses MRs)
	uint32_t max_cq = 0;         // CQs per device
	uint32_t max_cqe = 0;        // entries per CQ
	uint32_t max_mr = 0;         // MRs per device
	uint32_t max_pd = 0;         // PDs per device
	uint32_t max_qp_rd_atom = 0; // outstanding RDMA READs a QP accepts as responder
	uint32_t max_qp_init_rd_atom = 0;        // outstanding RDMA READs a QP initiates
	uint32_t max_srq = 0;                    // SRQs per device
	uint32_t max_srq_wr = 0;                 // receive WRs per SRQ
	uint32_t max_srq_sge = 0;                // SGEs per SRQ receive WR
	uint32_t max_fast_reg_page_list_len = 0; // pages per REG_MR
	uint32_t max_inline_data = 0;            // bytes per SEND_INLINE WR
	uint32_t num_comp_vectors = 0;           // completion vectors (interrupt queues) for CQs
};

// A port's logical state (ib_port_state); only Active carries traffic.
enum class PortState : uint8_t { Down, Init, Armed, Active };

// A port's attributes (ib_port_attr); Device::query_port().
struct PortAttr {
	PortState state = PortState::Down;          // Active when usable
	LinkLayer link_layer = LinkLayer::Ethernet; // RoCE and the soft provider: Ethernet
	uint32_t max_mtu = 4096;                    // bytes
	uint32_t active_mtu = 4096;                 // bytes
	uint32_t gid_tbl_len = 1;                   // GIDs of the port (Device::gid() is index 0)
};

// ---------------------------------------------------------------------------------------------
// QP

// The QP's transport service: only Reliable Connected, what every storage ULP uses.
enum class QpType : uint8_t { Rc };

// IB spec 10.3.1; SQD is not modelled. Transitions (modify_qp):
//   Reset->Init, Init->Init, Init->Rtr, Rtr->Rts, Rts->Rts, Sqe->Rts, any->Err, any->Reset.
enum class QpState : uint8_t { Reset, Init, Rtr, Rts, Sqe, Err };

// The state's name for log lines ("RTS").
const char *qp_state_str(QpState s);

// Which send WRs generate a completion (ib_sig_type).
enum class SigType : uint8_t {
	AllWr, // every send WR generates a completion
	ReqWr, // only WRs with SEND_SIGNALED do (the ULP norm)
};

// A QP's queue sizes (ib_qp_cap): requested at create_qp, actual ones in Qp::cap().
struct QpCap {
	uint32_t max_send_wr = 0;     // send WRs outstanding (posted, not yet completed)
	uint32_t max_recv_wr = 0;     // receive WRs outstanding (ignored on an SRQ)
	uint32_t max_send_sge = 0;    // SGEs per send WR
	uint32_t max_recv_sge = 0;    // SGEs per receive WR
	uint32_t max_inline_data = 0; // bytes per SEND_INLINE WR
	uint32_t max_rdma_ctxs = 0;   // rw contexts; consumed by rw/ (grows max_send_wr), 0 = none
};

struct AsyncEvent;
// An async event callback; runs on a provider thread (see core/device.h's threading rule).
using EventHandler = std::function<void(const AsyncEvent &)>;

// What create_qp makes (ib_qp_init_attr).
struct QpInitAttr {
	EventHandler event_handler; // QP async events (fatal, LAST_WQE_REACHED, ...)
	void *qp_context = nullptr; // the ULP's, stored in Qp::qp_context
	Cq *send_cq = nullptr;      // send completions; its comp_vector picks the QP's engine
	Cq *recv_cq = nullptr;      // receive completions (may be send_cq)
	Srq *srq = nullptr;         // receives come from here when set; max_recv_wr ignored
	QpCap cap;                  // the queue sizes wanted; the QP may have more
	SigType sq_sig_type = SigType::ReqWr; // which send WRs complete
	QpType qp_type = QpType::Rc;          // the transport (RC only)
	uint8_t port_num = 1;                 // the device port (1: devices have one)
};

// QpAttr mask bits for modify_qp.
enum : uint32_t {
	QP_STATE = 1u << 0,
	QP_ACCESS_FLAGS = 1u << 1, // remote access permitted on this QP (REMOTE_WRITE/READ)
	QP_PORT = 1u << 2,
	QP_AV = 1u << 3, // dest: the peer (providers with a CM set it themselves)
	QP_PATH_MTU = 1u << 4,
	QP_TIMEOUT = 1u << 5,
	QP_RETRY_CNT = 1u << 6,
	QP_RNR_RETRY = 1u << 7,
	QP_RQ_PSN = 1u << 8,
	QP_MAX_QP_RD_ATOMIC = 1u << 9,
	QP_MIN_RNR_TIMER = 1u << 10,
	QP_SQ_PSN = 1u << 11,
	QP_MAX_DEST_RD_ATOMIC = 1u << 12,
	QP_DEST_QPN = 1u << 13,
};

// The attributes modify_qp sets (those named by its mask) and query_qp reports
// (ib_qp_attr).
struct QpAttr {
	QpState qp_state = QpState::Reset;     // the state to move to (QP_STATE)
	QpState cur_qp_state = QpState::Reset; // out only (query_qp)
	uint32_t qp_access_flags = 0;          // ACCESS_REMOTE_* the peer may use (QP_ACCESS_FLAGS)
	uint8_t port_num = 1;                  // the device port (QP_PORT)
	uint32_t path_mtu = 4096;              // bytes
	uint8_t timeout = 14;                  // local ack timeout, 4.096 us * 2^timeout
	uint8_t retry_cnt = 7;                 // transport retries
	uint8_t rnr_retry = 7;                 // RNR retries; 7 = infinite (IB spec 9.7.5.2.8)
	uint8_t min_rnr_timer = 12;            // IB encoding (12 = 0.64 ms)
	uint32_t rq_psn = 0;                   // first packet sequence number expected (QP_RQ_PSN)
	uint32_t sq_psn = 0;                   // first packet sequence number sent (QP_SQ_PSN)
	uint32_t max_rd_atomic = 1;            // outstanding READs this QP initiates
	uint32_t max_dest_rd_atomic = 1;       // outstanding READs this QP accepts
	uint32_t dest_qp_num = 0;              // the peer QP's number (QP_DEST_QPN)
	QpCap cap;                             // out only (query_qp)
};

// IB encoding of min_rnr_timer (IB spec table 45) to microseconds.
uint32_t rnr_timer_usec(uint8_t enc);

// ---------------------------------------------------------------------------------------------
// Async events

// An async event's type (ib_event_type).
enum class EventType : uint8_t {
	CqErr,            // CQ overrun (IB_EVENT_CQ_ERR)
	QpFatal,          // QP entered ERR for a local reason (IB_EVENT_QP_FATAL)
	QpReqErr,         // invalid request seen as responder (IB_EVENT_QP_REQ_ERR)
	QpAccessErr,      // access violation seen as responder (IB_EVENT_QP_ACCESS_ERR)
	CommEst,          // first packet received in RTR
	QpLastWqeReached, // QP on an SRQ left for ERR; no more receive completions for it
	SrqLimitReached,
	SrqErr,
	PortActive,
	PortErr,
	DeviceFatal,
};

// The event in ib_event_msg() words for log lines ("QP fatal error").
const char *event_type_str(EventType t);

// An async event (ib_event), as an EventHandler receives it.
struct AsyncEvent {
	EventType event = EventType::DeviceFatal; // what happened
	Device *device = nullptr;                 // the device it happened on
	Qp *qp = nullptr;                         // QP events
	Cq *cq = nullptr;                         // CQ events
	Srq *srq = nullptr;                       // SRQ events
	uint8_t port_num = 0;                     // port events
};

// Cq::req_notify flags.
enum class CqNotify : uint8_t {
	NextComp,  // the next completion of any kind raises an event
	Solicited, // only a solicited or error completion raises one
};

// How a CQ's completions reach their cqe->done (the kernel's enum ib_poll_context). Set by
// cq_poll/ alloc_cq; a CQ made with Device::create_cq directly is None (its owner polls and
// dispatches). Drain reads it: on a Direct CQ nobody else will poll, so drain must.
enum class PollCtx : uint8_t {
	None,      // not managed by cq_poll/: the owner polls
	Direct,    // never armed; the owner calls process_cq_direct (IB_POLL_DIRECT)
	Softirq,   // a poller thread per completion vector (IB_POLL_SOFTIRQ)
	Workqueue, // the completion work pool, bound to the vector's worker (IB_POLL_WORKQUEUE)
	UnboundWorkqueue, // the completion work pool, any worker (IB_POLL_UNBOUND_WORKQUEUE)
	BusyPoll,         // a poll group run to completion on its owner's thread (SPDK)
};

// The context's name for log lines ("softirq").
const char *poll_ctx_str(PollCtx c);

} // namespace ulp
