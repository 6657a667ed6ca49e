// SPDX-License-Identifier: MIT
// core/device.h - the verbs object model: Device, Pd, Mr, Cq, CompChannel, Qp, Srq.
//
// Providers (providers/soft, providers/verbs) derive from these classes. Creation follows
// libibverbs: a factory returns the object, or nullptr with errno set. Destruction is the
// owner's: children (MRs, QPs, SRQs) must be destroyed before the PD and CQs they use.
//
// Threading: post_send, post_recv and poll may be called concurrently on different objects;
// one QP's send queue (or one CQ) must not be used by two threads at once without the
// caller's own lock, as in the kernel. Async event handlers run on a provider thread and
// must not destroy the object they are told about.
#pragma once

#include "core/verbs.h"

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

namespace ulp
{

class Pd;
class Mr;
class Cq;
class CompChannel;
class Qp;
class Srq;

// A port's global identifier: an IPv6 address (RoCE: IPv4-mapped), network order.
using Gid = std::array<uint8_t, 16>;

// Address vector (ib_ah_attr), enough to name a peer port for a connected QP.
struct AhAttr {
	Gid dgid{};           // remote port GID (RoCE: IPv4-mapped address)
	uint16_t dlid = 0;    // remote LID (InfiniBand)
	uint8_t port_num = 1; // the local port the path leaves from
};

// A QpAttr that can carry an address vector.
struct QpAttrAv : QpAttr {
	AhAttr ah_attr; // with QP_AV
};

// What Device::create_cq makes (ibv_create_cq's arguments). ULPs use cq_poll/'s alloc_cq.
struct CqInitAttr {
	int cqe = 0;                    // minimum number of entries; the CQ may be larger
	int comp_vector = 0;            // 0 .. num_comp_vectors-1
	CompChannel *channel = nullptr; // completion events go here once armed
	EventHandler event_handler;     // CQ async events (CqErr)
	void *cq_context = nullptr;     // the owner's, stored in Cq::cq_context
};

// What Pd::create_srq makes (ib_srq_init_attr).
struct SrqInitAttr {
	EventHandler event_handler;  // SRQ async events (SrqLimitReached, SrqErr)
	void *srq_context = nullptr; // the owner's, stored in Srq::srq_context
	uint32_t max_wr = 0;         // receive WRs outstanding
	uint32_t max_sge = 0;        // SGEs per receive WR
	uint32_t srq_limit = 0;      // SrqLimitReached fires when fewer WRs remain; 0 = disarmed
};

// A scatter entry as map_sg sees it: a virtual address and a length (the kernel's
// sg_dma_address / sg_dma_len). The memory must lie inside MRs of the same PD.
struct SgEntry {
	uint64_t addr = 0;   // virtual address
	uint32_t length = 0; // bytes
};

// An RDMA device (ib_device): made by a provider, found through the registry
// (core/registry.h), the factory of PDs, CQs and completion channels.
class Device
{
public:
	virtual ~Device() = default;
	Device(const Device &) = delete;
	Device &operator=(const Device &) = delete;

	const std::string &name() const { return name_; } // "soft0", "rxe0"
	const DeviceAttr &attr() const { return attr_; }  // capabilities, fixed for its life
	NodeType node_type() const { return node_type_; } // Ca, or Rnic for iWARP
	uint8_t phys_port_cnt() const { return 1; }       // ports: always one here
	const Gid &gid() const { return gid_; }           // port 1, index 0

	// Fill *attr for port_num (1). 0 or a negative errno.
	virtual int query_port(uint8_t port_num, PortAttr *attr) = 0;
	// A protection domain (ibv_alloc_pd); nullptr and errno on failure.
	virtual std::unique_ptr<Pd> alloc_pd() = 0;
	// A completion channel (ibv_create_comp_channel); nullptr and errno on failure.
	virtual std::unique_ptr<CompChannel> create_comp_channel() = 0;
	// A CQ its owner polls (PollCtx::None); ULPs use cq_poll/'s alloc_cq instead, which
	// also dispatches the completions. nullptr and errno on failure.
	virtual std::unique_ptr<Cq> create_cq(const CqInitAttr &attr) = 0;

	// Device-wide async events (port, device fatal). Returns a handle for unregister.
	int register_event_handler(EventHandler h);
	// Remove a handler: once this returns it is not running (unless this is called from
	// inside it) and will not run again.
	void unregister_event_handler(int handle);

	// True when this device has the iWARP rules: READ sink needs REMOTE_WRITE access,
	// no LAST_WQE_REACHED, one SGE per READ (rdma_protocol_iwarp()).
	bool is_iwarp() const { return node_type_ == NodeType::Rnic; }

protected:
	// For providers: a device with these fixed properties.
	Device(std::string name, const DeviceAttr &attr, NodeType nt, const Gid &gid)
	    : name_(std::move(name)), attr_(attr), node_type_(nt), gid_(gid)
	{
	}
	void dispatch_event(const AsyncEvent &ev); // to every registered handler

private:
	std::string name_;
	DeviceAttr attr_;
	NodeType node_type_;
	Gid gid_;
	struct Handlers;
	std::shared_ptr<Handlers> handlers_;
};

// A protection domain (ib_pd): MRs, QPs and SRQs of one PD work only with each other.
class Pd
{
public:
	virtual ~Pd() = default;
	Pd(const Pd &) = delete;
	Pd &operator=(const Pd &) = delete;

	Device &device() const { return dev_; } // the device it was allocated on

	// User memory registration (ibv_reg_mr). The MR's lkey/rkey are valid at once.
	virtual std::unique_ptr<Mr> reg_mr(void *addr, size_t length, uint32_t access) = 0;
	// A fast-registration MR (ib_alloc_mr(pd, IB_MR_TYPE_MEM_REG, max_num_sg)): invalid
	// until a REG_MR work request binds a page list to it.
	virtual std::unique_ptr<Mr> alloc_mr(uint32_t max_num_sg) = 0;
	// A QP in RESET (ibv_create_qp); nullptr and errno on failure. rw/'s RwQp::create
	// sizes one for rw contexts; a CM id makes its own (CmId::create_qp).
	virtual std::unique_ptr<Qp> create_qp(const QpInitAttr &attr) = 0;
	// A shared receive queue (ibv_create_srq); nullptr and errno on failure.
	virtual std::unique_ptr<Srq> create_srq(const SrqInitAttr &attr) = 0;

protected:
	explicit Pd(Device &dev) : dev_(dev) {} // for providers

private:
	Device &dev_;
};

// A memory region (ib_mr): a user registration (Pd::reg_mr) or a fast-registration MR
// (Pd::alloc_mr) whose pages a REG_MR work request binds.
class Mr
{
public:
	virtual ~Mr() = default;
	Mr(const Mr &) = delete;
	Mr &operator=(const Mr &) = delete;

	Pd &pd() const { return pd_; }                        // the PD it was registered in
	uint32_t lkey() const { return lkey_; }               // for local SGEs (Sge::lkey)
	uint32_t rkey() const { return rkey_; }               // for the peer's RDMA (advertise it)
	uint64_t iova() const { return iova_; }               // first byte addressed by the keys
	uint64_t length() const { return length_; }           // bytes
	uint32_t page_size() const { return page_size_; }     // fast-reg MRs: page list granule
	uint32_t max_num_sg() const { return max_num_sg_; }   // fast-reg MRs; 0 for user MRs
	bool is_fast_reg() const { return max_num_sg_ != 0; } // made by alloc_mr

	// ib_map_mr_sg: turn sg into the MR's page list (page_size granules), starting
	// *sg_offset bytes into sg[0]. Every entry but the first must start on a page
	// boundary and every entry but the last must end on one, unless the device has
	// DEVICE_SG_GAPS_REG. Returns the number of entries mapped (possibly fewer than
	// sg.size() when the page list fills up), or a negative errno. On return
	// *sg_offset holds the offset into the first unmapped entry. On a
	// DEVICE_REG_MR_CONTIG device the mapping also stops at the first entry that does not
	// continue the previous one exactly, aligned or not. Takes effect on the device only
	// when a REG_MR work request executes.
	int map_sg(std::span<const SgEntry> sg, unsigned *sg_offset, uint32_t page_size);

	// ib_update_fast_reg_key(mr, ib_inc_rkey(mr->rkey)): rotate the 8-bit key part so
	// that stale remote keys fail after re-registration.
	void inc_rkey();
	// Set the key byte (ib_update_fast_reg_key) of the rkey, and of the lkey unless a
	// provider gave the mapping a local key of its own.
	void update_key(uint8_t key);

	// The page list built by map_sg (read by the provider when REG_MR executes).
	std::span<const uint64_t> page_list() const { return {pages_.data(), npages_}; }

	// The kernel's ib_mr.need_inval: set by the ULP that posted a REG_MR with the current
	// key (rw/ at post time), so the next user invalidates that key first (LOCAL_INV). The
	// MR's holder owns it (one user at a time, as the MR itself).
	bool need_inval = false;

protected:
	// For providers: max_num_sg 0 for a user MR, the page list length for alloc_mr's.
	Mr(Pd &pd, uint32_t lkey, uint32_t rkey, uint64_t iova, uint64_t length,
	   uint32_t max_num_sg)
	    : pd_(pd), lkey_(lkey), rkey_(rkey), iova_(iova), length_(length),
	      max_num_sg_(max_num_sg), pages_(max_num_sg)
	{
	}

	// Provider hook, run by map_sg once the page list is built (the kernel's driver
	// map_mr_sg callback): a provider checks its own REG_MR constraints here and may give
	// the mapping a local key of its own (set_local_key). A negative errno fails map_sg.
	virtual int mapped() { return 0; }
	// The lkey that local SGEs over the mapped range use, when it is not the MR's own
	// key (a memory window has no lkey: local access goes through the region it is bound
	// in). From then on update_key rotates the rkey only.
	void set_local_key(uint32_t lkey)
	{
		lkey_ = lkey;
		local_key_ = true;
	}

private:
	int build_page_list(std::span<const SgEntry> sg, unsigned *sg_offset, uint32_t page_size);

	Pd &pd_;
	uint32_t lkey_;
	uint32_t rkey_;
	bool local_key_ = false; // lkey_ was set by set_local_key: not rotated with the rkey
	uint64_t iova_;
	uint64_t length_;
	uint32_t page_size_ = 4096;
	uint32_t max_num_sg_;
	std::vector<uint64_t> pages_; // preallocated to max_num_sg: no allocation in map_sg
	size_t npages_ = 0;
};

// A completion queue (ib_cq). Made by cq_poll/'s alloc_cq (or cq_pool_get), which decides
// who polls it and calls each completion's Cqe::done; made by Device::create_cq, it is
// polled by its owner.
class Cq
{
public:
	virtual ~Cq() = default;
	Cq(const Cq &) = delete;
	Cq &operator=(const Cq &) = delete;

	Device &device() const { return dev_; }           // the device it was created on
	int cqe() const { return cqe_; }                  // capacity in entries
	int comp_vector() const { return comp_vector_; }  // its completion vector
	CompChannel *channel() const { return channel_; } // where its events go, or null
	void *cq_context = nullptr;                       // the owner's (CqInitAttr::cq_context)

	// Reap up to wc.size() completions; returns how many (0 when empty).
	virtual int poll(std::span<Wc> wc) = 0;
	// Arm once: the next completion (or the next solicited one) raises an event on the
	// channel. Userspace has no REPORT_MISSED_EVENTS: callers re-arm, then poll again.
	virtual int req_notify(CqNotify flags) = 0;
	// Interrupt moderation: event after count completions or period_us. -EOPNOTSUPP
	// when the device lacks DEVICE_CQ_MODERATION.
	virtual int modify(uint16_t count, uint16_t period_us) = 0;
	// Grow or shrink; -EOPNOTSUPP without DEVICE_CQ_RESIZE (iWARP).
	virtual int resize(int cqe) = 0;

	// QPs using this CQ as send or receive CQ (one per role: a QP with one CQ for both
	// counts twice), kept by the Qp base class (the kernel's cq->usecnt).
	std::atomic<int> usecnt{0};

	// Set once by cq_poll/ alloc_cq before the CQ is used, read-only afterwards.
	PollCtx poll_ctx = PollCtx::None;
	// Direct and BusyPoll CQs: process up to budget completions on the calling thread,
	// dispatching cqe->done; returns how many (ib_process_cq_direct). Drain calls it while
	// it waits. On a BusyPoll CQ it returns 0 unless called from the thread that runs the
	// CQ's poll group (one CQ is never processed by two threads at once). Null for the
	// threaded contexts, whose own threads dispatch.
	int (*process_direct)(Cq &cq, int budget) = nullptr;
	// cq_poll/'s per-CQ state, opaque to everyone else; null on a CQ it did not make.
	void *poll_state = nullptr;

protected:
	// For providers.
	Cq(Device &dev, int cqe, int comp_vector, CompChannel *ch)
	    : cqe_(cqe), dev_(dev), comp_vector_(comp_vector), channel_(ch)
	{
	}
	int cqe_; // capacity in entries (a provider's resize updates it)

private:
	Device &dev_;
	int comp_vector_;
	CompChannel *channel_;
};

// A completion channel (ibv_comp_channel): an eventfd that is readable while armed CQs
// have raised events that get_cq_event has not returned yet.
class CompChannel
{
public:
	virtual ~CompChannel() = default;
	CompChannel(const CompChannel &) = delete;
	CompChannel &operator=(const CompChannel &) = delete;

	virtual int fd() const = 0; // pollable: readable while an event is pending
	// Next CQ that raised an event. timeout_ms < 0 waits forever, 0 does not wait.
	// Returns 0 and sets *cq, or -EAGAIN on timeout.
	virtual int get_cq_event(Cq **cq, int timeout_ms) = 0;

protected:
	CompChannel() = default;
};

// A queue pair (ib_qp): a send queue and a receive queue (or an SRQ), connected to one
// peer QP. Made by Pd::create_qp, by a CM id (CmId::create_qp) or through rw/'s RwQp.
class Qp
{
public:
	virtual ~Qp();
	Qp(const Qp &) = delete;
	Qp &operator=(const Qp &) = delete;

	Pd &pd() const { return pd_; }                  // the PD it was created in
	Device &device() const { return pd_.device(); } // the PD's device
	uint32_t qp_num() const { return qp_num_; }     // its number, what a peer connects to
	Cq *send_cq() const { return send_cq_; }        // where send completions go
	Cq *recv_cq() const { return recv_cq_; }        // where receive completions go
	Srq *srq() const { return srq_; }               // its shared receive queue, or null
	const QpCap &cap() const { return cap_; }       // actual sizes, >= the requested ones
	void *qp_context = nullptr;                     // the ULP's (QpInitAttr::qp_context)

	// Move through the state machine (verbs.h QpState). attr may be a QpAttrAv when
	// mask has QP_AV. -EINVAL for an illegal transition or missing required attributes.
	virtual int modify(const QpAttr &attr, uint32_t mask) = 0;
	// Fill *attr with the QP's current attributes (ibv_query_qp). 0 or a negative errno.
	virtual int query(QpAttr *attr) = 0;
	virtual QpState state() const = 0; // now; the provider may move it to Err at any time

	// 0, or a negative errno with *bad_wr set to the first WR not posted:
	// -ENOMEM (queue full), -EINVAL (bad WR). Posting in ERR flushes.
	virtual int post_send(const SendWr *wr, const SendWr **bad_wr) = 0;
	// The same for the receive queue (-EINVAL on a QP that uses an SRQ).
	virtual int post_recv(const RecvWr *wr, const RecvWr **bad_wr) = 0;

	// Providers report QP async events through here, never to the ULP's handler directly
	// (the kernel's ib_qp_event_handler): it records LAST_WQE_REACHED for drain, then
	// calls the handler given at creation. Provider thread; not under a provider lock.
	void report_event(const AsyncEvent &ev);
	// Drain of a QP on an SRQ: wait until LAST_WQE_REACHED has been reported, at most
	// timeout. true if it was (the kernel's qp->srq_completion).
	bool wait_last_wqe(std::chrono::milliseconds timeout);

protected:
	// For providers: cap holds the actual queue sizes.
	Qp(Pd &pd, uint32_t qp_num, const QpInitAttr &a, const QpCap &cap)
	    : qp_context(a.qp_context), pd_(pd), qp_num_(qp_num), send_cq_(a.send_cq),
	      recv_cq_(a.recv_cq), srq_(a.srq), cap_(cap), event_handler_(a.event_handler)
	{
		// ib_create_qp: the CQs count their QPs, so that freeing a CQ still in use can be
		// refused (cq_poll/ free_cq).
		if (send_cq_)
			send_cq_->usecnt.fetch_add(1, std::memory_order_relaxed);
		if (recv_cq_)
			recv_cq_->usecnt.fetch_add(1, std::memory_order_relaxed);
	}

private:
	Pd &pd_;
	uint32_t qp_num_;
	Cq *send_cq_;
	Cq *recv_cq_;
	Srq *srq_;
	QpCap cap_;
	EventHandler event_handler_; // the ULP's, from QpInitAttr; called by report_event
	std::mutex last_wqe_lock_;   // guards last_wqe_
	std::condition_variable last_wqe_cv_;
	bool last_wqe_ = false; // LAST_WQE_REACHED has been reported (never reset)
};

// A shared receive queue (ib_srq): receives that several QPs of one PD consume.
class Srq
{
public:
	virtual ~Srq() = default;
	Srq(const Srq &) = delete;
	Srq &operator=(const Srq &) = delete;

	Pd &pd() const { return pd_; } // the PD it was created in
	void *srq_context = nullptr;   // the owner's (SrqInitAttr::srq_context)

	// As Qp::post_recv: 0, or a negative errno with *bad_wr at the first WR not posted.
	virtual int post_recv(const RecvWr *wr, const RecvWr **bad_wr) = 0;
	// Arm the limit event: SrqLimitReached once fewer than limit WRs remain.
	virtual int arm_limit(uint32_t limit) = 0;
	virtual uint32_t max_wr() const = 0; // receive WRs it holds at most

protected:
	explicit Srq(Pd &pd) : pd_(pd) {} // for providers

private:
	Pd &pd_;
};

// Keys are index << 8 | key byte (the byte rotates on re-registration).
// The index part of a key (which MR or window it names).
constexpr uint32_t key_index(uint32_t key)
{
	return key >> 8;
}
// The rotating key byte of a key (the part inc_rkey changes).
constexpr uint8_t key_byte(uint32_t key)
{
	return static_cast<uint8_t>(key & 0xff);
}
// ib_inc_rkey: the same index with the next key byte.
constexpr uint32_t inc_rkey(uint32_t key)
{
	return (key & 0xffffff00u) | ((key + 1) & 0xffu);
}

} // namespace ulp
