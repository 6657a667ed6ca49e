// SPDX-License-Identifier: MIT
// providers/verbs/verbs_internal.h - the verbs provider's classes: core/ objects over
// libibverbs and librdmacm objects.
//
// Contexts: the devices are librdmacm's own ibv_contexts (rdma_get_devices), because
// rdma_create_qp() insists that the PD belongs to the context the CM id is bound to
// (id->verbs == pd->context); a context of our own from ibv_open_device() would be another
// one. Every ibv object's user context (qp_context, cq_context, srq_context) points back at
// its core/ wrapper, which is how async and completion events find their way home.
//
// Threads: one async-event thread per device (ibv_get_async_event) and one CM thread for
// the provider (rdma_get_cm_event), started lazily. Each stops through an eventfd wake-up
// and a bounded join (StoppableThread).
#pragma once

#include "core/cm.h"
#include "core/device.h"
#include "core/registry.h"
#include "providers/verbs/verbs.h"

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace ulp::verbs
{

// How long a teardown waits for a provider thread before it gives up on it (logged, and
// the thread is detached: a wedged kernel call must not hang the process's exit).
constexpr auto kJoinTimeout = std::chrono::seconds(5);

// Send/recv WRs translated per ibv_post_* call: the translation lives on the stack, so the
// data path allocates nothing; longer chains go down in several calls.
constexpr int kPostBatch = 16;

// Fast-registration through type-2 memory windows: the window covers any virtually
// contiguous range inside one registered region, so the page list is only map_sg's view
// of it. This is the page count we let map_sg build (the MR's max_num_sg is capped at it).
constexpr uint32_t kMwPageListLen = 512;

// A thread with a wake-up eventfd, stopped by stop(): signal, then join for at most
// kJoinTimeout (logged and detached on timeout).
class StoppableThread
{
public:
	StoppableThread() = default;
	~StoppableThread() { stop(); }
	StoppableThread(const StoppableThread &) = delete;
	StoppableThread &operator=(const StoppableThread &) = delete;

	// fn(wake_fd) runs until wake_fd becomes readable. 0 or a negative errno.
	int start(const char *name, std::function<void(int wake_fd)> fn);
	void stop();
	bool running() const { return thread_.joinable(); }

private:
	std::string name_;
	std::thread thread_;
	int wake_fd_ = -1;           // eventfd: written once by stop()
	std::mutex lock_;            // guards done_
	std::condition_variable cv_; // signalled when the body returns
	bool done_ = false;
};

class VDevice;
class VQp;

class VPd final : public Pd
{
public:
	VPd(VDevice &dev, ibv_pd *pd);
	~VPd() override;

	std::unique_ptr<Mr> reg_mr(void *addr, size_t length, uint32_t access) override;
	std::unique_ptr<Mr> alloc_mr(uint32_t max_num_sg) override;
	std::unique_ptr<Qp> create_qp(const QpInitAttr &attr) override;
	std::unique_ptr<Srq> create_srq(const SrqInitAttr &attr) override;

	VDevice &vdev() const;
	ibv_pd *pd() const { return pd_; }

	// The user MR containing [addr, addr+len), or nullptr (REG_MR over an MW binds to it).
	ibv_mr *find_region(uint64_t addr, uint64_t len);
	void add_region(ibv_mr *mr);
	void del_region(ibv_mr *mr);

private:
	ibv_pd *pd_;
	std::mutex regions_lock_;                   // guards regions_
	std::multimap<uint64_t, ibv_mr *> regions_; // user MRs of this PD by start address
};

// A user MR (ibv_reg_mr), or a fast-registration MR backed by a type-2 memory window.
class VMr final : public Mr
{
public:
	VMr(VPd &pd, ibv_mr *mr);                  // user MR
	VMr(VPd &pd, ibv_mw *mw, uint32_t max_sg); // fast-reg MR
	~VMr() override;

	ibv_mr *mr() const { return mr_; }
	ibv_mw *mw() const { return mw_; }
	// The user MR the mapped range lies in (fast-reg MR after map_sg); REG_MR binds the
	// window there.
	ibv_mr *region() const { return region_; }

protected:
	int mapped() override;

private:
	VPd &vpd_;
	ibv_mr *mr_ = nullptr;     // user MR; null for a fast-reg MR
	ibv_mw *mw_ = nullptr;     // fast-reg MR's window
	ibv_mr *region_ = nullptr; // fast-reg MR: the region of the last map_sg, else null
};

class VChannel final : public CompChannel
{
public:
	explicit VChannel(ibv_comp_channel *ch) : ch_(ch) {}
	~VChannel() override;
	int fd() const override { return ch_->fd; }
	int get_cq_event(Cq **cq, int timeout_ms) override;
	ibv_comp_channel *channel() const { return ch_; }

private:
	ibv_comp_channel *ch_;
};

class VCq final : public Cq
{
public:
	VCq(VDevice &dev, ibv_cq *cq, const CqInitAttr &a);
	~VCq() override;

	int poll(std::span<Wc> wc) override;
	int req_notify(CqNotify flags) override;
	int modify(uint16_t count, uint16_t period_us) override;
	int resize(int cqe) override;

	void report_event(const AsyncEvent &ev) const;
	ibv_cq *cq() const { return cq_; }

private:
	VDevice &vdev_;
	ibv_cq *cq_;
	EventHandler handler_; // CQ async events (CQ_ERR); called on the async thread
};

class VSrq final : public Srq
{
public:
	VSrq(VPd &pd, ibv_srq *srq, const SrqInitAttr &a, uint32_t max_wr);
	~VSrq() override;

	int post_recv(const RecvWr *wr, const RecvWr **bad_wr) override;
	int arm_limit(uint32_t limit) override;
	uint32_t max_wr() const override { return max_wr_; }

	ibv_srq *srq() const { return srq_; }
	void report_event(const AsyncEvent &ev) const;

private:
	ibv_srq *srq_;
	EventHandler handler_;
	uint32_t max_wr_;
};

class VQp final : public Qp
{
public:
	// cm_id: set when the QP was made by rdma_create_qp on it (then rdma_destroy_qp).
	VQp(VPd &pd, ibv_qp *qp, const QpInitAttr &a, const QpCap &cap, rdma_cm_id *cm_id);
	~VQp() override;

	int modify(const QpAttr &attr, uint32_t mask) override;
	int query(QpAttr *attr) override;
	QpState state() const override;
	int post_send(const SendWr *wr, const SendWr **bad_wr) override;
	int post_recv(const RecvWr *wr, const RecvWr **bad_wr) override;

	ibv_qp *qp() const { return qp_; }
	// Moves the QP to ERR (the CM does it on DISCONNECTED, as the kernel's cma does).
	void to_error();

private:
	int translate(const SendWr &wr, ibv_send_wr *out) const;

	VDevice &vdev_;
	ibv_qp *qp_;
	rdma_cm_id *cm_id_; // non-null: created by rdma_create_qp on this id
	bool sig_all_;      // sq_sig_type == AllWr
};

class VDevice final : public Device
{
public:
	VDevice(ibv_context *ctx, const DeviceAttr &attr, NodeType nt, const Gid &gid, bool mw_reg);
	~VDevice() override;

	int query_port(uint8_t port_num, PortAttr *attr) override;
	std::unique_ptr<Pd> alloc_pd() override;
	std::unique_ptr<CompChannel> create_comp_channel() override;
	std::unique_ptr<Cq> create_cq(const CqInitAttr &attr) override;

	ibv_context *ctx() const { return ctx_; }
	// RDMA_CM_EVENT_DEVICE_REMOVAL came for an id on it (the CM thread sets it).
	std::atomic<bool> removed{false};
	// Released after its removal (VProvider::device_released): its files are closed, and
	// VProvider::find never returns it again (a new context may take its address).
	bool gone = false; // VProvider::devices_lock_
	// REG_MR / LOCAL_INV / SEND_WITH_INV map onto type-2 memory windows.
	bool mw_reg() const { return mw_reg_; }
	// Address vectors need a GRH (RoCE, iWARP: no LIDs); set once at open.
	bool global_av = true;
	// Soft-RoCE (rdma_rxe), whose quirks the provider works around (set once at open):
	// see VQp::post_recv and VCq::poll.
	bool rxe = false;

	int start_async();
	void stop_async();

	// qp_num -> QP, for Wc::qp (an ibv_wc names its QP by number only).
	void add_qp(VQp *qp);
	void del_qp(VQp *qp);
	Qp *find_qp(uint32_t qp_num);

	using Device::dispatch_event;

private:
	void async_loop(int wake_fd);

	ibv_context *ctx_; // librdmacm's (rdma_get_devices); not ours to close
	bool mw_reg_;
	StoppableThread async_;
	std::shared_mutex qps_lock_; // guards qps_: shared on poll, exclusive on create/destroy
	std::unordered_map<uint32_t, VQp *> qps_;
};

class VCmId;

class VProvider final : public Provider
{
public:
	VProvider();
	~VProvider() override;

	const char *name() const override { return "verbs"; }
	std::unique_ptr<CmId> create_id(CmHandler handler, void *context) override;
	void device_released(Device &dev) override;

	// The device of a librdmacm context. A context of a device that appeared after the
	// provider started (e.g. rxe0 added again after `rdma link del`) is opened, registered
	// and returned. Null for none.
	VDevice *find(ibv_context *ctx);
	rdma_event_channel *channel() const { return channel_; }

private:
	int start_cm();
	void cm_loop(int wake_fd);
	void dispatch(rdma_cm_event *ev);

	ibv_context **ctx_list_ = nullptr; // rdma_get_devices(); rdma_free_devices() at the end
	std::mutex devices_lock_;          // guards devices_ (find adds to it at run time)
	std::vector<std::unique_ptr<VDevice>> devices_; // removed ones stay (never freed early)
	std::mutex cm_lock_;                            // guards channel_ creation and cm_ start
	rdma_event_channel *channel_ = nullptr;         // every CM id's; read by the CM thread only
	StoppableThread cm_;
};

VProvider &vprovider();

// rdma_create_qp on id (cm.cc uses it; qp.cc has the translation).
std::unique_ptr<VQp> create_cm_qp(VPd &pd, rdma_cm_id *id, const QpInitAttr &attr);

// Translation helpers (qp.cc).
WcStatus wc_status(ibv_wc_status s);
int access_to_ibv(uint32_t access);

} // namespace ulp::verbs
