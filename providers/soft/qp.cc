// SPDX-License-Identifier: MIT
// providers/soft/qp.cc - QP and SRQ creation, the QP state machine, posting.
#include "providers/soft/soft_internal.h"

#include <cerrno>

namespace ulp::soft
{

void RecvRing::init(uint32_t d, uint32_t ms)
{
	depth = d;
	max_sge = ms;
	wqe.resize(d);
	sge.resize(static_cast<size_t>(d) * ms);
	head = tail = 0;
}

SoftQp::SoftQp(SoftPd &pd, uint32_t qpn, const QpInitAttr &a, const QpCap &c)
    : Qp(pd, qpn, a, c), sdev(pd.sdev), spd(pd),
      engine(pd.sdev.engine_of(a.send_cq->comp_vector())), sig_type(a.sq_sig_type),
      handle(std::make_shared<QpHandle>()), sq(c.max_send_wr),
      sq_sge(static_cast<size_t>(c.max_send_wr) * c.max_send_sge),
      sq_inline(static_cast<size_t>(c.max_send_wr) * c.max_inline_data), sq_depth(c.max_send_wr)
{
	handle->qp = this;
	if (!a.srq)
		rq.init(c.max_recv_wr, c.max_recv_sge);
	pd.users++;
}

SoftQp::~SoftQp()
{
	// Peers stop reaching us first (waits for responder operations in flight), then the
	// engine lets go of us, then the number is freed.
	{
		std::unique_lock g(handle->lock);
		handle->qp = nullptr;
	}
	engine.unschedule(this);
	detach_wire();
	sdev.free_qpn(qp_num(), &ctr);
	spd.users--;
}

std::unique_ptr<Qp> SoftPd::create_qp(const QpInitAttr &a)
{
	const DeviceAttr &da = sdev.attr();
	QpCap c = a.cap;
	if (a.qp_type != QpType::Rc || !a.send_cq || !a.recv_cq || &a.send_cq->device() != &sdev ||
	    &a.recv_cq->device() != &sdev || (a.srq && &a.srq->pd().device() != &sdev) ||
	    c.max_send_wr > da.max_qp_wr || (!a.srq && c.max_recv_wr > da.max_qp_wr) ||
	    c.max_send_sge > da.max_sge || c.max_recv_sge > da.max_sge ||
	    c.max_inline_data > da.max_inline_data) {
		errno = EINVAL;
		return nullptr;
	}
	c.max_send_wr = std::max<uint32_t>(c.max_send_wr, 1);
	c.max_send_sge = std::max<uint32_t>(c.max_send_sge, 1);
	if (a.srq) {
		c.max_recv_wr = 0;
		c.max_recv_sge = 0;
	} else {
		c.max_recv_wr = std::max<uint32_t>(c.max_recv_wr, 1);
		c.max_recv_sge = std::max<uint32_t>(c.max_recv_sge, 1);
	}
	uint32_t qpn = sdev.alloc_qpn();
	if (!qpn) {
		errno = ENOMEM;
		return nullptr;
	}
	auto *qp = new SoftQp(*this, qpn, a, c);
	{
		std::lock_guard g(sdev.qp_lock);
		sdev.qps[qpn - SoftDevice::kFirstQpn] = qp;
	}
	return std::unique_ptr<Qp>(qp);
}

// IB spec 10.3.1 / 11.2.4.2 (the kernel's qp_state_table in ib_modify_qp_is_ok): for each
// RC transition, the attributes it requires and the ones it also allows.
static bool transition_ok(QpState cur, QpState next, uint32_t mask)
{
	struct Rule {
		bool ok;
		uint32_t req; // required
		uint32_t opt; // allowed as well
	};
	constexpr uint32_t kPath = QP_AV | QP_PATH_MTU;
	auto rule = [](QpState c, QpState n) -> Rule {
		if (n == QpState::Reset || n == QpState::Err)
			return {true, 0, 0};
		switch (c) {
		case QpState::Reset:
			if (n == QpState::Init)
				return {true, QP_PORT | QP_ACCESS_FLAGS, 0};
			break;
		case QpState::Init:
			if (n == QpState::Init)
				return {true, 0, QP_PORT | QP_ACCESS_FLAGS};
			if (n == QpState::Rtr)
				return {true,
				        kPath | QP_DEST_QPN | QP_RQ_PSN | QP_MAX_DEST_RD_ATOMIC |
				            QP_MIN_RNR_TIMER,
				        QP_ACCESS_FLAGS | QP_PORT};
			break;
		case QpState::Rtr:
			if (n == QpState::Rts)
				return {true,
				        QP_SQ_PSN | QP_TIMEOUT | QP_RETRY_CNT | QP_RNR_RETRY |
				            QP_MAX_QP_RD_ATOMIC,
				        QP_ACCESS_FLAGS | QP_MIN_RNR_TIMER};
			break;
		case QpState::Rts:
			if (n == QpState::Rts)
				return {true, 0, QP_ACCESS_FLAGS | QP_MIN_RNR_TIMER};
			break;
		case QpState::Sqe:
			if (n == QpState::Rts)
				return {true, 0, QP_ACCESS_FLAGS | QP_MIN_RNR_TIMER};
			break;
		case QpState::Err:
			break;
		}
		return {false, 0, 0};
	};
	Rule r = rule(cur, next);
	uint32_t m = mask & ~QP_STATE;
	return r.ok && (m & r.req) == r.req && !(m & ~(r.req | r.opt));
}

int SoftQp::modify(const QpAttr &a, uint32_t mask)
{
	const DeviceAttr &da = sdev.attr();
	std::unique_lock g(state_lock);
	QpState cur = state();
	QpState next = (mask & QP_STATE) ? a.qp_state : cur;
	if (!transition_ok(cur, next, mask))
		return -EINVAL;
	if ((mask & QP_MAX_QP_RD_ATOMIC) && a.max_rd_atomic > da.max_qp_init_rd_atom)
		return -EINVAL;
	if ((mask & QP_MAX_DEST_RD_ATOMIC) && a.max_dest_rd_atomic > da.max_qp_rd_atom)
		return -EINVAL;
	if ((mask & QP_PATH_MTU) &&
	    (a.path_mtu < 256 || a.path_mtu > 4096 || (a.path_mtu & (a.path_mtu - 1))))
		return -EINVAL;
	if ((mask & QP_PORT) && a.port_num != 1)
		return -EINVAL;
	if ((mask & QP_RNR_RETRY) && a.rnr_retry > 7)
		return -EINVAL;
	if ((mask & QP_RETRY_CNT) && a.retry_cnt > 7)
		return -EINVAL;

	if (mask & QP_ACCESS_FLAGS)
		attr.qp_access_flags = a.qp_access_flags;
	if (mask & QP_PATH_MTU)
		attr.path_mtu = a.path_mtu;
	if (mask & QP_TIMEOUT)
		attr.timeout = a.timeout;
	if (mask & QP_RETRY_CNT)
		attr.retry_cnt = a.retry_cnt;
	if (mask & QP_RNR_RETRY)
		attr.rnr_retry = a.rnr_retry;
	if (mask & QP_MIN_RNR_TIMER)
		attr.min_rnr_timer = a.min_rnr_timer;
	if (mask & QP_RQ_PSN)
		attr.rq_psn = a.rq_psn;
	if (mask & QP_SQ_PSN)
		attr.sq_psn = a.sq_psn;
	if (mask & QP_MAX_QP_RD_ATOMIC)
		attr.max_rd_atomic = a.max_rd_atomic;
	if (mask & QP_MAX_DEST_RD_ATOMIC)
		attr.max_dest_rd_atomic = a.max_dest_rd_atomic;
	if (mask & QP_DEST_QPN) {
		attr.dest_qp_num = a.dest_qp_num;
		dest_qpn = a.dest_qp_num;
	}
	// What the data path reads without state_lock.
	access_flags.store(attr.qp_access_flags);
	rnr_retry.store(attr.rnr_retry);
	min_rnr_timer.store(attr.min_rnr_timer);
	max_rd_atomic.store(attr.max_rd_atomic);
	if ((mask & QP_AV) && wire == WireKind::None) {
		// A QP connected by hand (no CM): find the peer in this process by GID + QPN.
		// Not found is not an error, as on hardware: sends will exhaust their retries.
		const auto &av = static_cast<const QpAttrAv &>(a).ah_attr;
		if (SoftDevice *pd = device_by_gid(av.dgid)) {
			if (auto h = pd->find_qp(attr.dest_qp_num)) {
				peer = std::move(h);
				wire = WireKind::InProc;
			}
		}
	}

	if (next == cur)
		return 0;
	attr.qp_state = next;
	switch (next) {
	case QpState::Reset:
		// Back to the beginning: queues empty, no completions (IB spec 10.3.1).
		state_.store(next, std::memory_order_release);
		g.unlock();
		engine.unschedule(this);
		{
			std::lock_guard sg(sq_lock);
			uint32_t h = sq_head.load();
			sq_tail.store(h);
			sq_next = sq_acked = h;
			rd_inflight = 0;
		}
		{
			std::lock_guard rg(rq_lock);
			rq.tail = rq.head;
		}
		detach_wire();
		last_wqe_sent = false;
		engine.unpark(this);
		return 0;
	case QpState::Err:
		g.unlock();
		to_error(nullptr);
		return 0;
	default:
		state_.store(next, std::memory_order_release);
		g.unlock();
		if (next == QpState::Rts)
			engine.schedule(this); // WRs posted in SQE resume
		return 0;
	}
}

const char *qp_wire(Qp &q)
{
	auto &qp = static_cast<SoftQp &>(q);
	std::lock_guard g(qp.state_lock);
	switch (qp.wire) {
	case WireKind::InProc:
		return "inproc";
	case WireKind::Socket:
		return "socket";
	case WireKind::Shm:
		return "shm";
	default:
		return "none";
	}
}

int SoftQp::query(QpAttr *out)
{
	std::lock_guard g(state_lock);
	*out = attr;
	out->qp_state = out->cur_qp_state = state();
	out->cap = cap();
	return 0;
}

static bool opcode_ok(const SoftDevice &dev, WrOpcode op)
{
	switch (op) {
	case WrOpcode::RegMr:
	case WrOpcode::LocalInv:
	case WrOpcode::SendWithInv:
		return dev.attr().device_cap_flags & DEVICE_MEM_MGT_EXTENSIONS;
	default:
		return true;
	}
}

int SoftQp::post_send(const SendWr *wr, const SendWr **bad_wr)
{
	QpState st = state();
	if (st == QpState::Reset || st == QpState::Init || st == QpState::Rtr) {
		*bad_wr = wr;
		return -EINVAL;
	}
	const QpCap &c = cap();
	int n = 0, rc = 0;
	{
		std::lock_guard g(sq_lock);
		uint32_t head = sq_head.load(std::memory_order_relaxed);
		for (; wr; wr = wr->next) {
			if (static_cast<uint32_t>(wr->num_sge) > c.max_send_sge ||
			    wr->num_sge < 0 || !opcode_ok(sdev, wr->opcode) ||
			    (wr->opcode == WrOpcode::RdmaRead &&
			     static_cast<uint32_t>(wr->num_sge) > sdev.attr().max_sge_rd) ||
			    (wr->opcode == WrOpcode::RegMr &&
			     (!reg_wr(*wr).mr || &reg_wr(*wr).mr->pd().device() != &sdev))) {
				rc = -EINVAL;
				break;
			}
			if (head - sq_tail.load(std::memory_order_acquire) >= sq_depth) {
				rc = -ENOMEM;
				break;
			}
			if (sdev.faults.armed.load(std::memory_order_relaxed) &&
			    sdev.fault(FaultPoint::PostSend, qp_num(), nullptr, &wr->opcode)) {
				rc = -EIO;
				break;
			}
			uint32_t slot = head % sq_depth;
			SendWqe &w = sq[slot];
			w.wr_cqe = wr->wr_cqe;
			w.opcode = wr->opcode;
			w.flags = wr->send_flags;
			w.num_sge = static_cast<uint32_t>(wr->num_sge);
			w.imm = wr->imm_data;
			w.inv_rkey = wr->invalidate_rkey;
			w.remote_addr = 0;
			w.rkey = 0;
			w.inline_len = 0;
			w.reg_mr = nullptr;
			w.local_pending = false;
			w.staged = 0;
			w.rnr_left = rnr_retry.load(std::memory_order_relaxed);
			uint64_t len = 0;
			for (int i = 0; i < wr->num_sge; i++)
				len += wr->sg_list[i].length;
			w.length = len;
			if (wr->opcode == WrOpcode::RdmaWrite ||
			    wr->opcode == WrOpcode::RdmaWriteWithImm ||
			    wr->opcode == WrOpcode::RdmaRead) {
				w.remote_addr = rdma_wr(*wr).remote_addr;
				w.rkey = rdma_wr(*wr).rkey;
			} else if (wr->opcode == WrOpcode::RegMr) {
				const RegWr &r = reg_wr(*wr);
				w.reg_mr = static_cast<SoftMr *>(r.mr);
				w.reg_key = r.key;
				w.reg_access = r.access;
				w.reg_iova = r.mr->iova();
				w.reg_len = r.mr->length();
				w.reg_page_size = r.mr->page_size();
			}
			if ((wr->send_flags & SEND_INLINE) && wr->opcode != WrOpcode::RdmaRead &&
			    wr->opcode != WrOpcode::RegMr && wr->opcode != WrOpcode::LocalInv) {
				// Inline data is copied now; its lkeys are never checked (IB spec
				// 10.8.2.3 / IBV_SEND_INLINE).
				if (len > c.max_inline_data) {
					rc = -EINVAL;
					break;
				}
				uint8_t *dst = sq_inl(head);
				for (int i = 0; i < wr->num_sge; i++) {
					std::memcpy(
					    dst,
					    reinterpret_cast<const void *>(wr->sg_list[i].addr),
					    wr->sg_list[i].length);
					dst += wr->sg_list[i].length;
				}
				w.inline_len = static_cast<uint32_t>(len);
				w.num_sge = 0;
			} else {
				Sge *dst = &sq_sge[static_cast<size_t>(slot) * c.max_send_sge];
				for (int i = 0; i < wr->num_sge; i++)
					dst[i] = wr->sg_list[i];
			}
			head++;
			n++;
			sq_head.store(head, std::memory_order_release);
		}
	}
	if (rc)
		*bad_wr = wr;
	if (n) {
		ctr.add(ctr.posted, n);
		ctr.add(ctr.post_sends, 1);
		if (state() == QpState::Err)
			flush_pending.store(true);
		engine.post(this);
	}
	return rc;
}

// Post a chain to a receive ring (its lock held). Fault rules for PostRecv count WRs, as
// PostSend's do; qpn 0 names an SRQ (any-QP rules match it).
static int post_ring(RecvRing &ring, const RecvWr *&wr, int *n, SoftDevice &dev, uint32_t qpn)
{
	for (; wr; wr = wr->next) {
		if (dev.faults.armed.load(std::memory_order_relaxed) &&
		    dev.fault(FaultPoint::PostRecv, qpn))
			return -EIO;
		if (wr->num_sge < 0 || static_cast<uint32_t>(wr->num_sge) > ring.max_sge)
			return -EINVAL;
		if (ring.used() >= ring.depth)
			return -ENOMEM;
		uint32_t slot = ring.head % ring.depth;
		ring.wqe[slot].wr_cqe = wr->wr_cqe;
		ring.wqe[slot].num_sge = static_cast<uint32_t>(wr->num_sge);
		Sge *dst = &ring.sge[static_cast<size_t>(slot) * ring.max_sge];
		for (int i = 0; i < wr->num_sge; i++)
			dst[i] = wr->sg_list[i];
		ring.head++;
		(*n)++;
	}
	return 0;
}

int SoftQp::post_recv(const RecvWr *wr, const RecvWr **bad_wr)
{
	if (srq() || state() == QpState::Reset) {
		*bad_wr = wr;
		return -EINVAL;
	}
	int n = 0, rc;
	{
		std::lock_guard g(rq_lock);
		rc = post_ring(rq, wr, &n, sdev, qp_num());
	}
	if (rc)
		*bad_wr = wr;
	if (n) {
		ctr.add(ctr.posted, n);
		if (state() == QpState::Err) {
			flush_pending.store(true);
			engine.schedule(this);
		}
	}
	return rc;
}

SoftSrq::SoftSrq(SoftPd &pd, const SrqInitAttr &a, uint32_t depth, uint32_t max_sge)
    : Srq(pd), sdev(pd.sdev), event_handler(a.event_handler), limit(a.srq_limit)
{
	srq_context = a.srq_context;
	ring.init(depth, max_sge);
	pd.users++;
}

std::unique_ptr<Srq> SoftPd::create_srq(const SrqInitAttr &a)
{
	const DeviceAttr &da = sdev.attr();
	if (!a.max_wr || a.max_wr > da.max_srq_wr || a.max_sge > da.max_srq_sge ||
	    a.srq_limit > a.max_wr) {
		errno = EINVAL;
		return nullptr;
	}
	auto srq = std::make_unique<SoftSrq>(*this, a, a.max_wr, std::max<uint32_t>(a.max_sge, 1));
	return srq;
}

SoftSrq::~SoftSrq()
{
	static_cast<SoftPd &>(pd()).users--;
}

int SoftSrq::post_recv(const RecvWr *wr, const RecvWr **bad_wr)
{
	int n = 0, rc;
	{
		std::lock_guard g(lock);
		rc = post_ring(ring, wr, &n, sdev, 0);
	}
	if (rc)
		*bad_wr = wr;
	sdev.srq_posted.fetch_add(n, std::memory_order_relaxed);
	return rc;
}

int SoftSrq::arm_limit(uint32_t l)
{
	std::lock_guard g(lock);
	if (l > ring.depth)
		return -EINVAL;
	limit = l;
	return 0;
}

} // namespace ulp::soft
