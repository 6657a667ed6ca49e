// SPDX-License-Identifier: MIT
// providers/verbs/qp.cc - QPs over libibverbs: creation, the state machine, and the
// translation of core/ work requests into ibv ones (on the stack, no allocation).
#include "core/log.h"
#include "providers/verbs/verbs_internal.h"

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>

namespace ulp::verbs
{

// core/ Sge and ibv_sge are the same three fields in the same places, so SGE lists are
// handed to libibverbs as they are: no copy on the data path.
static_assert(sizeof(Sge) == sizeof(ibv_sge));
static_assert(offsetof(Sge, addr) == offsetof(ibv_sge, addr));
static_assert(offsetof(Sge, length) == offsetof(ibv_sge, length));
static_assert(offsetof(Sge, lkey) == offsetof(ibv_sge, lkey));

namespace
{

ibv_sge *ibv_sges(const Sge *s)
{
	return reinterpret_cast<ibv_sge *>(const_cast<Sge *>(s));
}

ibv_qp_state to_ibv(QpState s)
{
	switch (s) {
	case QpState::Reset:
		return IBV_QPS_RESET;
	case QpState::Init:
		return IBV_QPS_INIT;
	case QpState::Rtr:
		return IBV_QPS_RTR;
	case QpState::Rts:
		return IBV_QPS_RTS;
	case QpState::Sqe:
		return IBV_QPS_SQE;
	case QpState::Err:
		return IBV_QPS_ERR;
	}
	return IBV_QPS_ERR;
}

QpState from_ibv(ibv_qp_state s)
{
	switch (s) {
	case IBV_QPS_RESET:
		return QpState::Reset;
	case IBV_QPS_INIT:
		return QpState::Init;
	case IBV_QPS_RTR:
		return QpState::Rtr;
	case IBV_QPS_RTS:
	case IBV_QPS_SQD: // not modelled by core/ (verbs.h): still sending as far as it knows
		return QpState::Rts;
	case IBV_QPS_SQE:
		return QpState::Sqe;
	default:
		return QpState::Err;
	}
}

ibv_mtu to_ibv_mtu(uint32_t bytes)
{
	if (bytes >= 4096)
		return IBV_MTU_4096;
	if (bytes >= 2048)
		return IBV_MTU_2048;
	if (bytes >= 1024)
		return IBV_MTU_1024;
	if (bytes >= 512)
		return IBV_MTU_512;
	return IBV_MTU_256;
}

uint32_t access_from_ibv(int f)
{
	uint32_t a = 0;
	if (f & IBV_ACCESS_LOCAL_WRITE)
		a |= ACCESS_LOCAL_WRITE;
	if (f & IBV_ACCESS_REMOTE_WRITE)
		a |= ACCESS_REMOTE_WRITE;
	if (f & IBV_ACCESS_REMOTE_READ)
		a |= ACCESS_REMOTE_READ;
	if (f & IBV_ACCESS_REMOTE_ATOMIC)
		a |= ACCESS_REMOTE_ATOMIC;
	if (f & IBV_ACCESS_MW_BIND)
		a |= ACCESS_MW_BIND;
	return a;
}

ibv_qp_init_attr init_attr(const QpInitAttr &a)
{
	ibv_qp_init_attr ia{};
	ia.send_cq = a.send_cq ? static_cast<VCq *>(a.send_cq)->cq() : nullptr;
	ia.recv_cq = a.recv_cq ? static_cast<VCq *>(a.recv_cq)->cq() : nullptr;
	ia.srq = a.srq ? static_cast<VSrq *>(a.srq)->srq() : nullptr;
	ia.cap.max_send_wr = a.cap.max_send_wr;
	ia.cap.max_recv_wr = a.srq ? 0 : a.cap.max_recv_wr;
	ia.cap.max_send_sge = a.cap.max_send_sge;
	ia.cap.max_recv_sge = a.srq ? 0 : a.cap.max_recv_sge;
	ia.cap.max_inline_data = a.cap.max_inline_data;
	ia.qp_type = IBV_QPT_RC;
	ia.sq_sig_all = a.sq_sig_type == SigType::AllWr;
	return ia;
}

QpCap cap_from(const ibv_qp_cap &c, const QpInitAttr &a)
{
	QpCap cap;
	cap.max_send_wr = c.max_send_wr;
	cap.max_recv_wr = a.srq ? 0 : c.max_recv_wr;
	cap.max_send_sge = c.max_send_sge;
	cap.max_recv_sge = a.srq ? 0 : c.max_recv_sge;
	cap.max_inline_data = c.max_inline_data;
	cap.max_rdma_ctxs = a.cap.max_rdma_ctxs;
	return cap;
}

// The queue sizes the QP really has. rxe answers create_qp with the sizes asked for but
// rounds its rings up (rxe_queue_init: a power of two, minus one), and posting succeeds
// until the ring is full; query_qp reports the ring. Take the larger of the two, so
// that QpCap is what the QP holds (verbs.h: "actual sizes, >= the requested ones").
QpCap actual_cap(ibv_qp *qp, const ibv_qp_cap &created, const QpInitAttr &a)
{
	ibv_qp_cap c = created;
	ibv_qp_attr qa{};
	ibv_qp_init_attr qia{};
	if (ibv_query_qp(qp, &qa, IBV_QP_CAP, &qia) == 0) {
		c.max_send_wr = std::max(c.max_send_wr, qa.cap.max_send_wr);
		c.max_recv_wr = std::max(c.max_recv_wr, qa.cap.max_recv_wr);
	}
	return cap_from(c, a);
}

} // namespace

std::unique_ptr<Qp> VPd::create_qp(const QpInitAttr &attr)
{
	if (attr.qp_type != QpType::Rc || !attr.send_cq || !attr.recv_cq) {
		errno = EINVAL;
		return nullptr;
	}
	ibv_qp_init_attr ia = init_attr(attr);
	ibv_qp *qp = ibv_create_qp(pd_, &ia);
	if (!qp)
		return nullptr;
	return std::make_unique<VQp>(*this, qp, attr, actual_cap(qp, ia.cap, attr), nullptr);
}

// Used by the CM (cm.cc): rdma_create_qp on the id.
std::unique_ptr<VQp> create_cm_qp(VPd &pd, rdma_cm_id *id, const QpInitAttr &attr)
{
	if (attr.qp_type != QpType::Rc || !attr.send_cq || !attr.recv_cq) {
		errno = EINVAL;
		return nullptr;
	}
	ibv_qp_init_attr ia = init_attr(attr);
	if (int err = rdma_create_qp(id, pd.pd(), &ia); err || !id->qp)
		return nullptr;
	return std::make_unique<VQp>(pd, id->qp, attr, actual_cap(id->qp, ia.cap, attr), id);
}

VQp::VQp(VPd &pd, ibv_qp *qp, const QpInitAttr &a, const QpCap &cap, rdma_cm_id *cm_id)
    : Qp(pd, qp->qp_num, a, cap), vdev_(pd.vdev()), qp_(qp), cm_id_(cm_id),
      sig_all_(a.sq_sig_type == SigType::AllWr)
{
	// Async events carry qp_context: the wrapper. The QP is in RESET (or just INIT via
	// rdma_create_qp) and has raised nothing yet.
	qp_->qp_context = this;
	vdev_.add_qp(this);
}

VQp::~VQp()
{
	vdev_.del_qp(this);
	// rdma_destroy_qp() is ibv_destroy_qp() and id->qp = NULL, but it drops the error; a
	// QP that stays (EBUSY) keeps its CQs and PD busy, and that must be seen where it
	// happens.
	if (int err = ibv_destroy_qp(qp_))
		ULP_LOG(Error, Verbs, "ibv_destroy_qp {}: {}", qp_->qp_num, strerror(err));
	else if (cm_id_)
		cm_id_->qp = nullptr;
}

int VQp::modify(const QpAttr &attr, uint32_t mask)
{
	ibv_qp_attr a{};
	int m = 0;
	if (mask & QP_STATE) {
		a.qp_state = to_ibv(attr.qp_state);
		m |= IBV_QP_STATE;
	}
	if (mask & QP_ACCESS_FLAGS) {
		a.qp_access_flags = unsigned(access_to_ibv(attr.qp_access_flags) &
		                             (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
		                              IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_LOCAL_WRITE));
		m |= IBV_QP_ACCESS_FLAGS;
	}
	if (mask & QP_PORT) {
		// RESET->INIT on an RC QP needs the P_Key index as well (IB spec table 91;
		// ib_modify_qp_is_ok): core/ has one partition, index 0.
		a.port_num = attr.port_num;
		a.pkey_index = 0;
		m |= IBV_QP_PORT | IBV_QP_PKEY_INDEX;
	}
	if (mask & QP_AV) {
		const AhAttr &ah = static_cast<const QpAttrAv &>(attr).ah_attr;
		a.ah_attr.port_num = ah.port_num;
		a.ah_attr.dlid = ah.dlid;
		// RoCE has no LIDs: every packet carries a GRH (IBA annex A16/A17), so the
		// address vector is global, from our GID index 0 (Device::gid()).
		if (vdev_.global_av) {
			a.ah_attr.is_global = 1;
			std::memcpy(a.ah_attr.grh.dgid.raw, ah.dgid.data(), 16);
			a.ah_attr.grh.sgid_index = 0;
			a.ah_attr.grh.hop_limit = 64;
		}
		m |= IBV_QP_AV;
	}
	if (mask & QP_PATH_MTU) {
		a.path_mtu = to_ibv_mtu(attr.path_mtu);
		m |= IBV_QP_PATH_MTU;
	}
	if (mask & QP_TIMEOUT) {
		a.timeout = attr.timeout;
		m |= IBV_QP_TIMEOUT;
	}
	if (mask & QP_RETRY_CNT) {
		a.retry_cnt = attr.retry_cnt;
		m |= IBV_QP_RETRY_CNT;
	}
	if (mask & QP_RNR_RETRY) {
		a.rnr_retry = attr.rnr_retry;
		m |= IBV_QP_RNR_RETRY;
	}
	if (mask & QP_RQ_PSN) {
		a.rq_psn = attr.rq_psn;
		m |= IBV_QP_RQ_PSN;
	}
	if (mask & QP_MAX_QP_RD_ATOMIC) {
		a.max_rd_atomic = uint8_t(attr.max_rd_atomic);
		m |= IBV_QP_MAX_QP_RD_ATOMIC;
	}
	if (mask & QP_MIN_RNR_TIMER) {
		a.min_rnr_timer = attr.min_rnr_timer;
		m |= IBV_QP_MIN_RNR_TIMER;
	}
	if (mask & QP_SQ_PSN) {
		a.sq_psn = attr.sq_psn;
		m |= IBV_QP_SQ_PSN;
	}
	if (mask & QP_MAX_DEST_RD_ATOMIC) {
		a.max_dest_rd_atomic = uint8_t(attr.max_dest_rd_atomic);
		m |= IBV_QP_MAX_DEST_RD_ATOMIC;
	}
	if (mask & QP_DEST_QPN) {
		a.dest_qp_num = attr.dest_qp_num;
		m |= IBV_QP_DEST_QPN;
	}
	// RoCE: INIT->RTR with an address vector makes the kernel resolve the peer's MAC
	// (ib_resolve_eth_dmac -> rdma_resolve_ip with a 1000 ms timeout). A loaded TCG guest
	// has been seen to miss that for its own address (ETIMEDOUT); nothing was changed, so
	// the transition is retried a bounded number of times.
	int err = ibv_modify_qp(qp_, &a, m);
	for (int retry = 0; err == ETIMEDOUT && (m & IBV_QP_AV) && retry < 3; retry++)
		err = ibv_modify_qp(qp_, &a, m);
	return -err;
}

int VQp::query(QpAttr *out)
{
	ibv_qp_attr a{};
	ibv_qp_init_attr ia{};
	int m = IBV_QP_STATE | IBV_QP_CUR_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_PORT |
	        IBV_QP_PATH_MTU | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
	        IBV_QP_RQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER | IBV_QP_SQ_PSN |
	        IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_DEST_QPN | IBV_QP_CAP;
	if (int err = ibv_query_qp(qp_, &a, m, &ia))
		return -err;
	out->qp_state = from_ibv(a.qp_state);
	out->cur_qp_state = from_ibv(a.cur_qp_state);
	out->qp_access_flags = access_from_ibv(int(a.qp_access_flags));
	out->port_num = a.port_num;
	out->path_mtu = a.path_mtu >= IBV_MTU_256 ? 128u << a.path_mtu : 0;
	out->timeout = a.timeout;
	out->retry_cnt = a.retry_cnt;
	out->rnr_retry = a.rnr_retry;
	out->min_rnr_timer = a.min_rnr_timer;
	out->rq_psn = a.rq_psn;
	out->sq_psn = a.sq_psn;
	out->max_rd_atomic = a.max_rd_atomic;
	out->max_dest_rd_atomic = a.max_dest_rd_atomic;
	out->dest_qp_num = a.dest_qp_num;
	out->cap = cap();
	return 0;
}

QpState VQp::state() const
{
	// Asked of the device each time: the QP leaves for ERR on its own (an error
	// completion, a fatal event), which no cached state would see.
	ibv_qp_attr a{};
	ibv_qp_init_attr ia{};
	if (ibv_query_qp(qp_, &a, IBV_QP_STATE, &ia))
		return from_ibv(qp_->state);
	return from_ibv(a.qp_state);
}

void VQp::to_error()
{
	ibv_qp_attr a{};
	a.qp_state = IBV_QPS_ERR;
	ibv_modify_qp(qp_, &a, IBV_QP_STATE);
}

int VQp::translate(const SendWr &wr, ibv_send_wr *out) const
{
	*out = ibv_send_wr{};
	const bool signaled = sig_all_ || (wr.send_flags & SEND_SIGNALED);
	// DESIGN 3: a WR without a cqe is legal only unsignaled (its flush is then dropped).
	if (!wr.wr_cqe && signaled)
		return -EINVAL;
	out->wr_id = reinterpret_cast<uintptr_t>(wr.wr_cqe);
	out->sg_list = ibv_sges(wr.sg_list);
	out->num_sge = wr.num_sge;
	unsigned f = 0;
	if (wr.send_flags & SEND_FENCE)
		f |= IBV_SEND_FENCE;
	if (wr.send_flags & SEND_SIGNALED)
		f |= IBV_SEND_SIGNALED;
	if (wr.send_flags & SEND_SOLICITED)
		f |= IBV_SEND_SOLICITED;
	if (wr.send_flags & SEND_INLINE)
		f |= IBV_SEND_INLINE;
	out->send_flags = f;
	switch (wr.opcode) {
	case WrOpcode::RdmaWrite:
	case WrOpcode::RdmaWriteWithImm:
	case WrOpcode::RdmaRead: {
		const RdmaWr &r = rdma_wr(wr);
		out->opcode = wr.opcode == WrOpcode::RdmaWrite          ? IBV_WR_RDMA_WRITE
		              : wr.opcode == WrOpcode::RdmaWriteWithImm ? IBV_WR_RDMA_WRITE_WITH_IMM
		                                                        : IBV_WR_RDMA_READ;
		out->wr.rdma.remote_addr = r.remote_addr;
		out->wr.rdma.rkey = r.rkey;
		if (wr.opcode == WrOpcode::RdmaWriteWithImm)
			out->imm_data = htobe32(wr.imm_data);
		return 0;
	}
	case WrOpcode::Send:
		out->opcode = IBV_WR_SEND;
		return 0;
	case WrOpcode::SendWithImm:
		out->opcode = IBV_WR_SEND_WITH_IMM;
		out->imm_data = htobe32(wr.imm_data);
		return 0;
	case WrOpcode::SendWithInv:
		if (!vdev_.mw_reg())
			return -EOPNOTSUPP;
		out->opcode = IBV_WR_SEND_WITH_INV;
		out->invalidate_rkey = wr.invalidate_rkey;
		return 0;
	case WrOpcode::LocalInv:
		// Invalidates the window a REG_MR bound (IB spec o10-37, invalidation of a type-2
		// memory window: it goes back to Free and its rkey stops working).
		if (!vdev_.mw_reg())
			return -EOPNOTSUPP;
		out->opcode = IBV_WR_LOCAL_INV;
		out->invalidate_rkey = wr.invalidate_rkey;
		out->num_sge = 0;
		out->sg_list = nullptr;
		return 0;
	case WrOpcode::RegMr: {
		const RegWr &r = reg_wr(wr);
		auto *mr = static_cast<VMr *>(r.mr);
		if (!vdev_.mw_reg() || !mr || !mr->mw())
			return -EOPNOTSUPP;
		// A window covers one virtually contiguous range of one region: map_sg built
		// it so (contig_only) and found the region (VMr::mapped).
		ibv_mr *region = mr->region();
		if (!region || mr->length() == 0)
			return -EINVAL;
		out->opcode = IBV_WR_BIND_MW;
		out->sg_list = nullptr;
		out->num_sge = 0;
		out->bind_mw.mw = mr->mw();
		// Type-2 windows take the consumer's key byte from the bind (IB spec 10.6.7.2,
		// rxe_do_bind_mw): that is ib_update_fast_reg_key()'s rotation.
		out->bind_mw.rkey = r.key;
		out->bind_mw.bind_info.mr = region;
		out->bind_mw.bind_info.addr = mr->iova();
		out->bind_mw.bind_info.length = mr->length();
		// A window grants remote rights only; local access goes through the region.
		out->bind_mw.bind_info.mw_access_flags = unsigned(
		    access_to_ibv(r.access) &
		    (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC));
		return 0;
	}
	}
	return -EINVAL;
}

int VQp::post_send(const SendWr *wr, const SendWr **bad_wr)
{
	ibv_send_wr w[kPostBatch];
	const SendWr *src[kPostBatch];
	while (wr) {
		int n = 0, err = 0;
		ibv_mw *bound = nullptr; // a BIND_MW ends its batch: see below
		for (; wr && n < kPostBatch && !bound; wr = wr->next, n++) {
			if ((err = translate(*wr, &w[n])))
				break;
			src[n] = wr;
			if (n)
				w[n - 1].next = &w[n];
			if (w[n].opcode == IBV_WR_BIND_MW)
				bound = w[n].bind_mw.mw;
		}
		if (n) {
			ibv_send_wr *bad = nullptr;
			if (int e = ibv_post_send(qp_, w, &bad)) {
				// Some providers return before setting bad (rxe on a RESET QP).
				*bad_wr = src[bad ? bad - w : 0];
				return -e;
			}
		}
		// A type-2 bind names the window by its current rkey (rxe copies ibv_mw.rkey
		// into the WQE and the kernel refuses a stale one), and posting it does not update
		// ibv_mw.rkey: the consumer does, once the bind is posted. Hence one bind per
		// ibv_post_send, so a later bind of the same window in this chain sees the key
		// this one gave it.
		if (bound)
			bound->rkey = w[n - 1].bind_mw.rkey;
		if (err) {
			*bad_wr = wr;
			return err;
		}
	}
	return 0;
}

namespace
{

// Shared by QP and SRQ receive queues.
template <typename PostFn> int post_recv_chain(const RecvWr *wr, const RecvWr **bad_wr, PostFn post)
{
	ibv_recv_wr w[kPostBatch];
	const RecvWr *src[kPostBatch];
	while (wr) {
		int n = 0;
		for (; wr && n < kPostBatch; wr = wr->next, n++) {
			w[n] = ibv_recv_wr{};
			w[n].wr_id = reinterpret_cast<uintptr_t>(wr->wr_cqe);
			w[n].sg_list = ibv_sges(wr->sg_list);
			w[n].num_sge = wr->num_sge;
			src[n] = wr;
			if (n)
				w[n - 1].next = &w[n];
		}
		ibv_recv_wr *bad = nullptr;
		if (int e = post(w, &bad)) {
			*bad_wr = src[bad ? bad - w : 0];
			return -e;
		}
	}
	return 0;
}

} // namespace

int VQp::post_recv(const RecvWr *wr, const RecvWr **bad_wr)
{
	if (srq()) {
		*bad_wr = wr;
		return -EINVAL;
	}
	int err = post_recv_chain(wr, bad_wr, [this](ibv_recv_wr *w, ibv_recv_wr **bad) {
		return ibv_post_recv(qp_, w, bad);
	});
	// IB spec 10.3.1 (Error state): WRs posted to an ERR QP complete with WR_FLUSH_ERR.
	// rxe's post_recv only writes its shared ring, without a system call, and 6.1's
	// responder flushes the ring only when the QP enters ERR, so a receive posted
	// afterwards (drain's marker) would wait forever. Entering ERR again (ERR->ERR is
	// legal) makes it flush. qp_->state is libibverbs' view (our own modify calls and
	// librdmacm's), which is how drain gets there.
	if (!err && vdev_.rxe && qp_->state == IBV_QPS_ERR)
		to_error();
	return err;
}

int VSrq::post_recv(const RecvWr *wr, const RecvWr **bad_wr)
{
	return post_recv_chain(wr, bad_wr, [this](ibv_recv_wr *w, ibv_recv_wr **bad) {
		return ibv_post_srq_recv(srq_, w, bad);
	});
}

} // namespace ulp::verbs
