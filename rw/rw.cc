// SPDX-License-Identifier: MIT
// rw/rw.cc - RDMA READ/WRITE contexts (drivers/infiniband/core/rw.c).
#include "rw/rw.h"

#include <algorithm>
#include <cerrno>
#include <limits>

namespace ulp
{

namespace
{

constexpr uint32_t div_round_up(uint64_t n, uint64_t d)
{
	return static_cast<uint32_t>((n + d - 1) / d);
}

uint32_t access_for(const Device &dev)
{
	// rdma_rw_init_one_mr: the MR is only ever the local side of the transfer, but an
	// iWARP READ sink is written by the peer's tagged READ response, so iWARP needs
	// REMOTE_WRITE on it.
	return ACCESS_LOCAL_WRITE | (dev.is_iwarp() ? uint32_t{ACCESS_REMOTE_WRITE} : 0u);
}

} // namespace

// ---------------------------------------------------------------------------------------------
// Device policy

bool rw_can_use_mr(const Device &dev, bool force_mr)
{
	// rdma_rw_can_use_mr: iWARP must, a device reporting max_sgl_rd may, force_mr does.
	return dev.is_iwarp() || dev.attr().max_sgl_rd != 0 || force_mr;
}

bool rw_io_needs_mr(const Device &dev, RwDir dir, uint32_t nents, bool force_mr)
{
	// rdma_rw_io_needs_mr. Only READs ever need one on their own: iWARP cannot scatter a
	// READ response into more than one (untagged) SGE, and past max_sgl_rd the device
	// is faster registering than gathering.
	if (dir == RwDir::Read) {
		if (dev.is_iwarp())
			return true;
		if (dev.attr().max_sgl_rd && nents > dev.attr().max_sgl_rd)
			return true;
	}
	return force_mr;
}

uint32_t rw_fr_page_list_len(const Device &dev)
{
	return std::min(dev.attr().max_fast_reg_page_list_len, kRwMaxPagesPerMr);
}

uint32_t rw_mr_factor(const Device &dev, uint32_t maxpages, bool force_mr)
{
	// rdma_rw_mr_factor: with MRs a context needs one per page list; without, the
	// kernel counts READ WRs of max_sge_rd SGEs each.
	uint32_t per =
	    rw_can_use_mr(dev, force_mr) ? rw_fr_page_list_len(dev) : dev.attr().max_sge_rd;
	if (per == 0)
		return 0;
	return div_round_up(maxpages, per);
}

int rw_ctx_bound(const Device &dev, uint32_t max_send_sge, const RwQpOptions &opts, RwCtxBound *out)
{
	const DeviceAttr &a = dev.attr();
	const uint32_t write_sge = max_send_sge;
	const uint32_t read_sge = std::min(max_send_sge, a.max_sge_rd);
	if (write_sge == 0 || read_sge == 0 || opts.max_pages == 0)
		return -EINVAL;
	const bool can_mr = rw_can_use_mr(dev, opts.force_mr);
	if (can_mr && !(a.device_cap_flags & DEVICE_MEM_MGT_EXTENSIONS))
		return -EINVAL; // iWARP READs (or force_mr) with no fast registration at all
	if (can_mr && rw_fr_page_list_len(dev) == 0)
		return -EINVAL;

	// The kernel's rdma_rw_init_qp reserves 1 WR per context, or 1 + 2 on MR devices,
	// whatever the context's size. That is wrong twice: a MULTI_WR context of n entries
	// posts DIV_ROUND_UP(n, max_sge) WRs, and an MR context posts LOCAL_INV + REG_MR +
	// data per MR, mr_factor MRs of them. svcrdma found out the hard way and now sizes
	// its SQ itself with rdma_rw_mr_factor(); here the reservation is the real worst
	// case of every path a context on this QP can take, and RwCtx::init refuses a
	// context beyond it, so that max_rdma_ctxs contexts in flight can never overflow.
	RwCtxBound b;
	uint32_t wrs = 1;
	if (can_mr) {
		b.mrs = div_round_up(opts.max_pages, rw_fr_page_list_len(dev));
		wrs = std::max(wrs, 3 * b.mrs); // LOCAL_INV + REG_MR + READ/WRITE per MR
	}
	// Entries are at most max_pages (each spans at least one page), fewer when the caller
	// says so.
	const uint32_t ents =
	    opts.max_entries ? std::min(opts.max_entries, opts.max_pages) : opts.max_pages;
	if (!opts.force_mr)
		wrs = std::max(wrs, div_round_up(ents, write_sge)); // SGE WRITEs
	if (!opts.force_mr && !dev.is_iwarp()) {
		// SGE READs: with max_sgl_rd set, larger READs take the MR path.
		uint32_t n = ents;
		if (a.max_sgl_rd)
			n = std::min(n, a.max_sgl_rd);
		wrs = std::max(wrs, div_round_up(n, read_sge));
	}
	b.wrs = wrs;
	*out = b;
	return 0;
}

int rw_init_qp(const Device &dev, QpInitAttr *attr, const RwQpOptions &opts)
{
	RwCtxBound b;
	int rc = rw_ctx_bound(dev, attr->cap.max_send_sge, opts, &b);
	if (rc)
		return rc;
	uint64_t want = attr->cap.max_send_wr + uint64_t{b.wrs} * attr->cap.max_rdma_ctxs;
	// The kernel clamps to max_qp_wr ("we'll have to live with what we get"), after
	// which a full set of contexts overflows the queue. Refuse instead: the caller
	// asked for fewer contexts or smaller ones than it can have.
	if (want > dev.attr().max_qp_wr)
		return -EINVAL;
	attr->cap.max_send_wr = static_cast<uint32_t>(want);
	return 0;
}

// ---------------------------------------------------------------------------------------------
// RwQp

int RwQp::init_mrs(Qp &qp, const QpInitAttr &attr, const RwQpOptions &opts)
{
	// rdma_rw_init_mrs, with the pool sized max_rdma_ctxs * mr_factor (the kernel
	// allocates max_rdma_ctxs MRs and leaves the multiplication to its callers).
	qp_ = &qp;
	const Device &dev = qp.device();
	int rc = rw_ctx_bound(dev, attr.cap.max_send_sge, opts, &bound_);
	if (rc)
		return rc;
	max_write_sge_ = attr.cap.max_send_sge;
	max_read_sge_ = std::min(attr.cap.max_send_sge, dev.attr().max_sge_rd);
	max_rdma_ctxs_ = attr.cap.max_rdma_ctxs;
	force_mr_ = opts.force_mr;
	if (bound_.mrs == 0 || max_rdma_ctxs_ == 0)
		return 0;
	uint64_t nr = uint64_t{bound_.mrs} * max_rdma_ctxs_;
	if (nr > std::numeric_limits<int>::max() || nr > dev.attr().max_mr)
		return -EINVAL;
	return mrs_.init(qp.pd(), static_cast<int>(nr), rw_fr_page_list_len(dev));
}

std::unique_ptr<RwQp> RwQp::create(Pd &pd, QpInitAttr attr, const RwQpOptions &opts, int *err)
{
	int rc = rw_init_qp(pd.device(), &attr, opts);
	if (rc) {
		*err = rc;
		return nullptr;
	}
	std::unique_ptr<RwQp> rq(new RwQp());
	errno = 0;
	rq->own_qp_ = pd.create_qp(attr);
	if (!rq->own_qp_) {
		*err = errno ? -errno : -ENOMEM;
		return nullptr;
	}
	rc = rq->init_mrs(*rq->own_qp_, attr, opts);
	if (rc) {
		*err = rc;
		return nullptr;
	}
	*err = 0;
	return rq;
}

std::unique_ptr<RwQp> RwQp::attach(Qp &qp, const QpInitAttr &attr, const RwQpOptions &opts,
                                   int *err)
{
	std::unique_ptr<RwQp> rq(new RwQp());
	int rc = rq->init_mrs(qp, attr, opts);
	*err = rc;
	if (rc)
		return nullptr;
	return rq;
}

RwQp::~RwQp()
{
	// rdma_rw_cleanup_mrs before the QP goes (ib_destroy_qp calls it first too). An MR
	// still held by a context makes MrPool's destructor abort: a ULP bug.
	mrs_.destroy();
}

// ---------------------------------------------------------------------------------------------
// RwCtx

int RwCtx::init(RwQp &qp, const SgTable &sgt, uint32_t sg_offset, uint64_t remote_addr,
                uint32_t rkey, RwDir dir)
{
	if (type_ != RwType::None)
		return -EINVAL; // still holds a previous I/O: destroy() it first
	auto ents = sgt.entries();
	// rdma_rw_ctx_init: skip to the entry that sg_offset falls into.
	size_t first = 0;
	while (first < ents.size() && sg_offset >= ents[first].length) {
		sg_offset -= ents[first].length;
		first++;
	}
	if (first == ents.size())
		return -EINVAL; // empty table, or nothing left after sg_offset (kernel: -EIO)
	qp_ = &qp;
	const auto nents = static_cast<uint32_t>(ents.size() - first);
	const Device &dev = qp.qp().device();
	bool use_mr = rw_io_needs_mr(dev, dir, nents, qp.force_mr());
	int rc = use_mr ? init_mr_wrs(sgt, first, sg_offset, remote_addr, rkey, dir) : 0;
	// A DEVICE_REG_MR_CONTIG device (its MRs are memory windows) takes one MR per
	// contiguous run, so a scattered table can need more MRs than the context's bound.
	// Where plain SGEs are legal (anything but an iWARP READ) they carry it instead, as on
	// a device without fast registration.
	if (rc == -E2BIG && (dev.attr().device_cap_flags & DEVICE_REG_MR_CONTIG) &&
	    !(dev.is_iwarp() && dir == RwDir::Read))
		use_mr = false;
	if (!use_mr)
		rc = nents > 1 ? init_map_wrs(sgt, first, sg_offset, remote_addr, rkey, dir)
		               : init_single_wr(sgt, first, sg_offset, remote_addr, rkey, dir);
	if (rc < 0) {
		type_ = RwType::None;
		qp_ = nullptr;
		nr_ops_ = 0;
		return rc;
	}
	nr_wrs_ = rc;
	return rc;
}

int RwCtx::init_single_wr(const SgTable &sgt, size_t first, uint32_t offset, uint64_t raddr,
                          uint32_t rkey, RwDir dir)
{
	// rdma_rw_init_single_wr
	const SgEntry &e = sgt.entries()[first];
	single_sge_ = Sge{e.addr + offset, e.length - offset, sgt.lkeys()[first]};
	single_wr_ = RdmaWr{};
	single_wr_.opcode = dir == RwDir::Write ? WrOpcode::RdmaWrite : WrOpcode::RdmaRead;
	single_wr_.sg_list = &single_sge_;
	single_wr_.num_sge = 1;
	single_wr_.remote_addr = raddr;
	single_wr_.rkey = rkey;
	nr_ops_ = 1;
	type_ = RwType::SingleWr;
	return 1;
}

int RwCtx::init_map_wrs(const SgTable &sgt, size_t first, uint32_t offset, uint64_t raddr,
                        uint32_t rkey, RwDir dir)
{
	// rdma_rw_init_map_wrs: chunks of max_write_sge / max_read_sge SGEs per WR.
	const uint32_t max_sge = dir == RwDir::Write ? qp_->max_write_sge() : qp_->max_read_sge();
	auto ents = sgt.entries().subspan(first);
	auto lkeys = sgt.lkeys().subspan(first);
	const auto sg_cnt = static_cast<uint32_t>(ents.size());
	const uint32_t nr_ops = div_round_up(sg_cnt, max_sge);
	if (nr_ops > qp_->ctx_bound().wrs)
		return -E2BIG; // larger than the QP's send queue was sized for
	// The kernel kcallocs both arrays per I/O; here they keep their capacity, so a
	// context reused for I/Os of similar shape stops allocating.
	sges_.resize(sg_cnt);
	map_wrs_.resize(nr_ops);
	uint64_t total = 0;
	size_t s = 0;
	for (uint32_t i = 0; i < nr_ops; i++) {
		RdmaWr &wr = map_wrs_[i];
		wr = RdmaWr{};
		const uint32_t nr_sge =
		    std::min<uint32_t>(sg_cnt - static_cast<uint32_t>(s), max_sge);
		wr.opcode = dir == RwDir::Write ? WrOpcode::RdmaWrite : WrOpcode::RdmaRead;
		wr.remote_addr = raddr + total;
		wr.rkey = rkey;
		wr.sg_list = &sges_[s];
		wr.num_sge = static_cast<int>(nr_sge);
		for (uint32_t j = 0; j < nr_sge; j++, s++) {
			sges_[s] = Sge{ents[s].addr + offset, ents[s].length - offset, lkeys[s]};
			total += sges_[s].length;
			offset = 0;
		}
		wr.next = i + 1 < nr_ops ? &map_wrs_[i + 1] : nullptr;
	}
	nr_ops_ = nr_ops;
	type_ = RwType::MultiWr;
	return static_cast<int>(nr_ops);
}

int RwCtx::init_mr_wrs(const SgTable &sgt, size_t first, uint32_t offset, uint64_t raddr,
                       uint32_t rkey, RwDir dir)
{
	// rdma_rw_init_mr_wrs + rdma_rw_init_one_mr. The kernel gives every MR
	// min(sg_cnt, pages_per_mr) entries and fails (-EINVAL) unless ib_map_mr_sg maps
	// them all, which assumes one page per entry. Here each MR takes as much as its page
	// list holds (Mr::map_sg stops at a full list or at a gap between entries, and
	// reports where), so large or unaligned entries just use more MRs, up to the
	// per-context bound the QP reserved.
	const Device &dev = qp_->qp().device();
	const uint32_t max_mrs = qp_->ctx_bound().mrs;
	const uint32_t access = access_for(dev);
	if (reg_.capacity() < max_mrs)
		reg_.reserve(max_mrs); // once per context object: never again in steady state
	reg_.clear();
	type_ = RwType::Mr; // so that put_mrs() on an error path releases what was taken

	std::span<const SgEntry> ents = sgt.entries().subspan(first);
	unsigned off = offset;
	uint64_t total = 0;
	int count = 0;
	while (!ents.empty()) {
		if (reg_.size() >= max_mrs) {
			put_mrs();
			return -E2BIG;
		}
		Mr *mr = qp_->mrs().get();
		if (!mr) {
			put_mrs(); // state as before the call: the caller retries after completions
			return -EAGAIN;
		}
		reg_.push_back(RegCtx{});
		RegCtx &r = reg_.back();
		r.mr = mr;
		unsigned o = off;
		int n = mr->map_sg(ents, &o, kRwPageSize);
		if (n < 0 || mr->length() == 0) {
			put_mrs();
			return n < 0 ? n : -EINVAL;
		}
		ents = ents.subspan(static_cast<size_t>(n));
		off = o;

		// rdma_rw_inv_key: invalidate the key the MR was last registered with, only if
		// that registration was posted (need_inval is set by wrs()).
		r.inv = mr->need_inval;
		r.inv_wr.opcode = WrOpcode::LocalInv;
		r.inv_wr.invalidate_rkey = mr->rkey(); // the key REG_MR bound (a window's lkey is
		                                       // its region's: never invalidated)
		r.reg_wr.opcode = WrOpcode::RegMr;
		r.reg_wr.mr = mr;
		r.reg_wr.access = access;
		r.sge = Sge{mr->iova(), static_cast<uint32_t>(mr->length()), 0};
		r.wr.opcode = dir == RwDir::Write ? WrOpcode::RdmaWrite : WrOpcode::RdmaRead;
		r.wr.sg_list = &r.sge;
		r.wr.num_sge = 1;
		r.wr.remote_addr = raddr + total;
		r.wr.rkey = rkey;
		total += mr->length();
		count += (r.inv ? 1 : 0) + 2;
	}
	// Link after the array stopped growing (it never reallocates within the reserve,
	// but the chain must not depend on that).
	for (size_t i = 0; i < reg_.size(); i++) {
		RegCtx &r = reg_[i];
		r.inv_wr.next = &r.reg_wr;
		r.reg_wr.next = &r.wr;
		if (i + 1 < reg_.size()) {
			RegCtx &nx = reg_[i + 1];
			r.wr.next = nx.inv ? &nx.inv_wr : static_cast<SendWr *>(&nx.reg_wr);
		} else {
			r.wr.next = nullptr;
		}
	}
	nr_ops_ = static_cast<uint32_t>(reg_.size());
	return count;
}

SendWr *RwCtx::wrs(Cqe *cqe, SendWr *chain_wr)
{
	// rdma_rw_ctx_wrs
	SendWr *first, *last;
	switch (type_) {
	case RwType::Mr:
		for (RegCtx &r : reg_) {
			// rdma_rw_update_lkey: rotate the key now, not at init, so that a context
			// initialised but never posted burns no key, and mark the MR so its next
			// user invalidates this key first. (No READ_WITH_INV here: the kernel's
			// iWARP READs invalidate themselves and skip the mark.)
			r.mr->need_inval = true;
			r.mr->inc_rkey();
			r.reg_wr.key = r.mr->rkey();
			r.sge.lkey = r.mr->lkey();
		}
		first = reg_[0].inv ? &reg_[0].inv_wr : static_cast<SendWr *>(&reg_[0].reg_wr);
		last = &reg_.back().wr;
		break;
	case RwType::MultiWr:
		first = &map_wrs_[0];
		last = &map_wrs_[nr_ops_ - 1];
		break;
	case RwType::SingleWr:
		first = last = &single_wr_;
		break;
	default:
		return nullptr;
	}
	// Set both ways so that the chain is right whatever an earlier call did.
	last->next = chain_wr;
	if (chain_wr) {
		last->wr_cqe = nullptr;
		last->send_flags &= ~uint32_t{SEND_SIGNALED};
	} else {
		last->wr_cqe = cqe;
		last->send_flags |= SEND_SIGNALED;
	}
	return first;
}

int RwCtx::post(Cqe *cqe, SendWr *chain_wr, const SendWr **bad_wr)
{
	// rdma_rw_ctx_post
	SendWr *first = wrs(cqe, chain_wr);
	if (!first)
		return -EINVAL;
	const SendWr *bad = nullptr;
	int rc = qp_->qp().post_send(first, &bad);
	if (bad_wr)
		*bad_wr = bad;
	return rc;
}

void RwCtx::put_mrs()
{
	for (RegCtx &r : reg_)
		qp_->mrs().put(r.mr);
	reg_.clear();
}

void RwCtx::destroy()
{
	// rdma_rw_ctx_destroy
	if (type_ == RwType::Mr)
		put_mrs();
	type_ = RwType::None;
	qp_ = nullptr;
	nr_ops_ = 0;
	nr_wrs_ = 0;
}

} // namespace ulp
