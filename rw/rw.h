// SPDX-License-Identifier: MIT
// rw/rw.h - RDMA READ/WRITE contexts (drivers/infiniband/core/rw.c, struct rdma_rw_ctx).
//
// A ULP (an iSER or SRP target) moves a command's data with one RwCtx: init() turns a
// local scatter table plus a remote (addr, rkey) into a chain of work requests, wrs() or
// post() issues them, and destroy() releases what init() took. Three shapes, as in rw.c:
//
//   SINGLE_WR  one entry: one RDMA READ/WRITE with one SGE.
//   MULTI_WR   several entries: RDMA READs/WRITEs of up to max_read_sge / max_write_sge
//              SGEs each, the remote address advancing with each.
//   MR         (io_needs_mr) the entries are registered with fast-registration MRs from
//              the QP's pool; per MR: [LOCAL_INV] + REG_MR + one READ/WRITE with one SGE.
//
// Only the last WR is signaled (with the caller's cqe) unless a chain_wr (the ULP's
// response SEND) is appended after it, so that data and status go out in one post.
//
// RwQp is what the kernel hangs on struct ib_qp for rw: the MR pool (qp->rdma_mrs),
// max_read_sge / max_write_sge, and the force-MR choice, here per QP instead of the
// rdma_rw_force_mr module parameter. It also records the per-context bound the send queue
// was sized for, so that init() can refuse a context larger than what was reserved.
//
// Threading: one RwCtx is used by one thread at a time. Several contexts may init/destroy
// concurrently on one RwQp (the MR pool locks); posting follows Qp::post_send's rule.
#pragma once

#include "core/device.h"
#include "mr_pool/mr_pool.h"
#include "rw/sg_table.h"

#include <cstdint>
#include <memory>
#include <vector>

namespace ulp
{

// The kernel's dma_data_direction as rw.c reads it.
enum class RwDir : uint8_t {
	Write = 0, // DMA_TO_DEVICE: local memory -> peer (RDMA WRITE)
	Read = 1,  // DMA_FROM_DEVICE: peer -> local memory (RDMA READ)
};

// The kernel's RDMA_RW_* context types.
enum class RwType : uint8_t {
	None = 0,     // not initialised, or destroyed
	SingleWr = 1, // RDMA_RW_SINGLE_WR
	MultiWr = 2,  // RDMA_RW_MULTI_WR
	Mr = 3,       // RDMA_RW_MR
};

// Page size of the MR path's page lists (the kernel passes PAGE_SIZE to ib_map_mr_sg).
inline constexpr uint32_t kRwPageSize = 4096;
// rdma_rw_fr_page_list_len's "arbitrary limit to avoid allocating gigantic resources".
inline constexpr uint32_t kRwMaxPagesPerMr = 256;

// What rw needs to know about a QP besides QpInitAttr.
struct RwQpOptions {
	// The per-context size bound the send queue and the MR pool are sized for: the most
	// pages one context's scatter table spans, counting each entry's pages on its own
	// (so it also bounds the number of entries). The kernel's callers pass this to
	// rdma_rw_mr_factor() (svcrdma: RPCSVC_MAXPAGES). A context that would need more WRs
	// or MRs than this bound implies is refused by RwCtx::init with -E2BIG.
	uint32_t max_pages = 256;
	// The most scatter entries one context has, when the caller knows it is fewer than
	// max_pages (0: as many as pages). A target whose buffers are one contiguous block
	// (iSER's DmaHeap) says 1: its SGE path then needs one WR, not max_pages / max_sge,
	// while the MR path is still sized by pages. RwCtx::init refuses more (-E2BIG).
	uint32_t max_entries = 0;
	// Use MRs for every READ and WRITE (the kernel's rdma_rw_force_mr module parameter,
	// per QP here so that one process can test both paths).
	bool force_mr = false;
};

// rdma_rw_can_use_mr: whether contexts on this device may take the MR path at all.
bool rw_can_use_mr(const Device &dev, bool force_mr);
// rdma_rw_io_needs_mr: whether a context of nents entries in direction dir takes it.
bool rw_io_needs_mr(const Device &dev, RwDir dir, uint32_t nents, bool force_mr);
// rdma_rw_fr_page_list_len: pages per MR (min(max_fast_reg_page_list_len, 256)).
uint32_t rw_fr_page_list_len(const Device &dev);
// rdma_rw_mr_factor: MRs (on MR devices) or READ WRs (otherwise) one context of maxpages
// pages needs: DIV_ROUND_UP(maxpages, pages per MR or max_sge_rd).
uint32_t rw_mr_factor(const Device &dev, uint32_t maxpages, bool force_mr = false);

// The worst-case send-queue and MR cost of one context, as rw_init_qp reserves it.
struct RwCtxBound {
	uint32_t wrs = 0; // send WRs one context may post (not counting a chain_wr)
	uint32_t mrs = 0; // MRs one context may hold (0: the QP has no MR pool)
};

// The true per-context cost on dev for a QP whose WRs carry at most max_send_sge SGEs.
// 0 or -EINVAL (max_send_sge 0, or a device that cannot do what it would need).
int rw_ctx_bound(const Device &dev, uint32_t max_send_sge, const RwQpOptions &opts,
                 RwCtxBound *out);

// rdma_rw_init_qp: grow attr->cap.max_send_wr by cap.max_rdma_ctxs times the true
// per-context WR count. 0, or -EINVAL when the result exceeds the device's max_qp_wr (the
// kernel silently clamps there, which lets the send queue overflow under load).
int rw_init_qp(const Device &dev, QpInitAttr *attr, const RwQpOptions &opts);

// A QP set up for rw contexts, with its MR pool (see the top of this file).
class RwQp
{
public:
	// rdma_rw_init_qp + create_qp + rdma_rw_init_mrs: grow attr's send queue, create the
	// QP on pd and, when contexts can use MRs, an MR pool of max_rdma_ctxs * mrs MRs.
	// nullptr and *err (negative errno) on failure, with nothing left behind.
	static std::unique_ptr<RwQp> create(Pd &pd, QpInitAttr attr, const RwQpOptions &opts,
	                                    int *err);
	// For a QP created elsewhere (a CM id owns it): attr is what it was created with,
	// after rw_init_qp(). Only the MR pool is made (rdma_rw_init_mrs).
	static std::unique_ptr<RwQp> attach(Qp &qp, const QpInitAttr &attr, const RwQpOptions &opts,
	                                    int *err);
	// rdma_rw_cleanup_mrs, then the QP if create() made it. Every context must have been
	// destroyed (the pool refuses otherwise and aborts, as MrPool documents).
	~RwQp();
	RwQp(const RwQp &) = delete;
	RwQp &operator=(const RwQp &) = delete;

	Qp &qp() const { return *qp_; } // the QP, to connect and to post the ULP's own WRs
	MrPool &mrs() { return mrs_; }  // the contexts' MRs (empty when they use none)
	const RwCtxBound &ctx_bound() const { return bound_; }    // reserved per context
	uint32_t max_read_sge() const { return max_read_sge_; }   // SGEs per RDMA READ WR
	uint32_t max_write_sge() const { return max_write_sge_; } // SGEs per RDMA WRITE WR
	uint32_t max_rdma_ctxs() const { return max_rdma_ctxs_; } // contexts sized for
	bool force_mr() const { return force_mr_; }               // every context uses MRs

private:
	RwQp() = default;
	int init_mrs(Qp &qp, const QpInitAttr &attr, const RwQpOptions &opts);

	std::unique_ptr<Qp> own_qp_; // the QP when create() made it, else null
	Qp *qp_ = nullptr;           // the QP (own_qp_ or the caller's)
	MrPool mrs_;                 // qp->rdma_mrs: max_rdma_ctxs * bound_.mrs MRs, or empty
	RwCtxBound bound_;           // per-context reservation made by rw_init_qp
	uint32_t max_read_sge_ = 0;  // min(cap.max_send_sge, max_sge_rd) (qp->max_read_sge)
	uint32_t max_write_sge_ = 0; // cap.max_send_sge (qp->max_write_sge)
	uint32_t max_rdma_ctxs_ = 0; // contexts the send queue was grown for
	bool force_mr_ = false;      // RwQpOptions::force_mr
};

// One RDMA READ or WRITE of a scatter table (rdma_rw_ctx; see the top of this file).
class RwCtx
{
public:
	RwCtx() = default;
	// A context still holding MRs at destruction is released (destroy()).
	~RwCtx() { destroy(); }
	RwCtx(const RwCtx &) = delete;
	RwCtx &operator=(const RwCtx &) = delete;

	// rdma_rw_ctx_init: build the WRs that move sgt's bytes, starting sg_offset bytes
	// into the table (whole entries are skipped when sg_offset covers them), to or from
	// the peer's [remote_addr, remote_addr + bytes) under rkey. Returns the number of send
	// WRs post() will issue (for send-queue accounting; a chain_wr is the caller's own),
	// or a negative errno:
	//   -EINVAL  empty table, sg_offset at or past its end, the context already in use
	//   -E2BIG   more WRs or MRs than the per-context bound qp was created for (on a
	//            DEVICE_REG_MR_CONTIG device too many runs for MRs falls back to SGEs
	//            first, where they are legal)
	//   -EAGAIN  the MR pool is empty: retry after other contexts are destroyed
	//   other    from Mr::map_sg
	// On error nothing is held: the context is as before the call.
	int init(RwQp &qp, const SgTable &sgt, uint32_t sg_offset, uint64_t remote_addr,
	         uint32_t rkey, RwDir dir);

	// rdma_rw_ctx_wrs: the first WR of the chain, ready for post_send. MR keys are
	// rotated here (ib_inc_rkey), once per call: a context is posted once. With chain_wr
	// it is linked after the last data WR and carries the signal itself; otherwise the
	// last data WR is signaled with cqe. nullptr if the context is not initialised.
	SendWr *wrs(Cqe *cqe, SendWr *chain_wr);
	// rdma_rw_ctx_post: post_send(wrs(cqe, chain_wr)). 0 or post_send's errno (-EINVAL if
	// not initialised); *bad_wr as post_send sets it when given.
	int post(Cqe *cqe, SendWr *chain_wr, const SendWr **bad_wr = nullptr);
	// rdma_rw_ctx_destroy: give the MRs back to the pool. Only after the WRs completed
	// (or were flushed). Idempotent; the context can be init()ed again and then reuses
	// its arrays without allocating.
	void destroy();

	RwType type() const { return type_; }       // the shape init() chose; None when unused
	uint32_t nr_ops() const { return nr_ops_; } // data WRs (READ/WRITE), as ctx->nr_ops
	int nr_wrs() const { return nr_wrs_; }      // what init() returned
	// The i-th MR of an MR context (i < nr_ops()), for tests and diagnostics.
	Mr *mr(uint32_t i) const { return i < reg_.size() ? reg_[i].mr : nullptr; }

private:
	// One registration of the MR path (the kernel's struct rdma_rw_reg_ctx).
	struct RegCtx {
		Sge sge;       // the data WR's single SGE: the MR's iova and length
		RdmaWr wr;     // the data WR (RDMA READ/WRITE)
		RegWr reg_wr;  // REG_MR binding the page list to the rotated key
		SendWr inv_wr; // LOCAL_INV of the previous key, used when mr->need_inval
		Mr *mr;        // from the QP's pool, held until destroy()
		bool inv;      // inv_wr is part of the chain
	};

	int init_single_wr(const SgTable &sgt, size_t first, uint32_t offset, uint64_t raddr,
	                   uint32_t rkey, RwDir dir);
	int init_map_wrs(const SgTable &sgt, size_t first, uint32_t offset, uint64_t raddr,
	                 uint32_t rkey, RwDir dir);
	int init_mr_wrs(const SgTable &sgt, size_t first, uint32_t offset, uint64_t raddr,
	                uint32_t rkey, RwDir dir);
	void put_mrs();

	RwQp *qp_ = nullptr;          // set by init, cleared by destroy
	RwType type_ = RwType::None;  // ctx->type
	uint32_t nr_ops_ = 0;         // data WRs
	int nr_wrs_ = 0;              // every send WR of the chain (what init returned)
	Sge single_sge_;              // SINGLE_WR (ctx->single)
	RdmaWr single_wr_;            // SINGLE_WR
	std::vector<Sge> sges_;       // MULTI_WR (ctx->map.sges); capacity kept across uses
	std::vector<RdmaWr> map_wrs_; // MULTI_WR (ctx->map.wrs); capacity kept across uses
	std::vector<RegCtx> reg_;     // MR (ctx->reg); capacity kept across uses
};

} // namespace ulp
