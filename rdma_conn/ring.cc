// SPDX-License-Identifier: MIT
// rdma_conn/ring.cc - descriptor rings (see ring.h).
#include "rdma_conn/ring.h"

namespace ulp::rdma
{

int post_recv(Qp &qp, RecvDesc &d, uint32_t len)
{
	Sge sge{reinterpret_cast<uint64_t>(d.buf->addr), len, d.buf->lkey};
	RecvWr wr;
	wr.wr_cqe = &d.cqe;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	const RecvWr *bad = nullptr;
	return qp.post_recv(&wr, &bad);
}

int post_recv(Srq &srq, RecvDesc &d, uint32_t len)
{
	Sge sge{reinterpret_cast<uint64_t>(d.buf->addr), len, d.buf->lkey};
	RecvWr wr;
	wr.wr_cqe = &d.cqe;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	const RecvWr *bad = nullptr;
	return srq.post_recv(&wr, &bad);
}

void prepare_send(SendDesc &d, uint32_t len, WrOpcode op)
{
	d.sge = Sge{reinterpret_cast<uint64_t>(d.buf->addr), len, d.buf->lkey};
	d.wr = SendWr{};
	d.wr.wr_cqe = &d.cqe;
	d.wr.sg_list = &d.sge;
	d.wr.num_sge = 1;
	d.wr.opcode = op;
	d.wr.send_flags = SEND_SIGNALED; // every data-carrying SEND is signaled
}

} // namespace ulp::rdma
