// SPDX-License-Identifier: MIT
// Device attributes, limits and the iWARP rules.
#include "tests/conformance/fixture.h"

#include <cerrno>
#include <cstring>

namespace ulp::conf
{
namespace
{

// ib_device_attr sanity: everything a ULP sizes itself from is present and consistent
// (IB spec 11.2.1.2 Query HCA).
TEST_P(ConformanceLocal, DeviceAttributesSane)
{
	OPEN_LOCAL();
	const DeviceAttr &a = dev().attr();
	EXPECT_GE(a.max_qp, 1u);
	EXPECT_GE(a.max_qp_wr, 16u);
	EXPECT_GE(a.max_sge, 1u);
	EXPECT_GE(a.max_sge_rd, 1u);
	EXPECT_LE(a.max_sge_rd, a.max_sge);
	EXPECT_GE(a.max_cq, 1u);
	EXPECT_GE(a.max_cqe, 16u);
	EXPECT_GE(a.max_mr, 1u);
	EXPECT_GE(a.max_pd, 1u);
	EXPECT_GE(a.max_qp_rd_atom, 1u);
	EXPECT_GE(a.max_qp_init_rd_atom, 1u);
	EXPECT_GT(a.max_mr_size, 0u);
	EXPECT_NE(a.page_size_cap & 4096u, 0u) << "4 KiB pages";
	EXPECT_GE(a.num_comp_vectors, 1u);
	if (a.device_cap_flags & DEVICE_MEM_MGT_EXTENSIONS) {
		EXPECT_GE(a.max_fast_reg_page_list_len, 1u);
	}
	if (a.max_srq) {
		EXPECT_GE(a.max_srq_wr, 1u);
	}
	PortAttr pa;
	ASSERT_EQ(dev().query_port(1, &pa), 0);
	EXPECT_EQ(pa.state, PortState::Active);
	EXPECT_GE(pa.active_mtu, 256u);
	EXPECT_LE(pa.active_mtu, pa.max_mtu);
	EXPECT_EQ(dev().is_iwarp(), pa.link_layer == LinkLayer::Iwarp);
	EXPECT_NE(dev().gid(), Gid{}) << "port GID is zero";
	EXPECT_EQ(find_device(dev().name()), &dev()) << "device not in the registry";
}

// Creation past the device limits fails (Linux: -EINVAL from the driver's checks).
TEST_P(ConformanceLocal, CreateBeyondLimitsFails)
{
	OPEN_LOCAL();
	const DeviceAttr &a = dev().attr();
	CqInitAttr ca;
	ca.cqe = int(a.max_cqe) + 1;
	if (a.max_cqe < uint32_t(INT32_MAX)) {
		EXPECT_EQ(dev().create_cq(ca), nullptr) << "CQ larger than max_cqe";
	}
	ca.cqe = 16;
	auto cq = dev().create_cq(ca);
	ASSERT_TRUE(cq);
	EXPECT_GE(cq->cqe(), 16);
	auto pd = dev().alloc_pd();
	ASSERT_TRUE(pd);
	QpInitAttr qa;
	qa.send_cq = cq.get();
	qa.recv_cq = cq.get();
	qa.cap.max_send_wr = 8;
	qa.cap.max_recv_wr = 8;
	qa.cap.max_send_sge = a.max_sge + 1;
	qa.cap.max_recv_sge = 1;
	EXPECT_EQ(pd->create_qp(qa), nullptr) << "QP with more SGEs than max_sge";
	qa.cap.max_send_sge = 1;
	qa.cap.max_send_wr = a.max_qp_wr + 1;
	EXPECT_EQ(pd->create_qp(qa), nullptr) << "QP deeper than max_qp_wr";
	qa.cap.max_send_wr = 8;
	auto qp = pd->create_qp(qa);
	ASSERT_TRUE(qp);
	EXPECT_GE(qp->cap().max_send_wr, 8u);
	EXPECT_GE(qp->cap().max_recv_wr, 8u);
	EXPECT_GE(qp->cap().max_send_sge, 1u);
	EXPECT_NE(qp->qp_num(), 0u) << "QP numbers 0 and 1 are special (IB spec: QP0 and QP1)";
	EXPECT_NE(qp->qp_num(), 1u);
	qp.reset();
}

// CQ resize (ibv_resize_cq): supported where DEVICE_CQ_RESIZE is reported, -EOPNOTSUPP
// where not (iWARP devices).
TEST_P(ConformanceLocal, CqResizeMatchesCapability)
{
	OPEN_LOCAL();
	CqInitAttr ca;
	ca.cqe = 16;
	auto cq = dev().create_cq(ca);
	ASSERT_TRUE(cq);
	int r = cq->resize(64);
	if (dev().attr().device_cap_flags & DEVICE_CQ_RESIZE) {
		EXPECT_EQ(r, 0);
		EXPECT_GE(cq->cqe(), 64);
	} else {
		EXPECT_EQ(r, -EOPNOTSUPP);
	}
}

// The iWARP profile (soft Profile::Iwarp, or a real RNIC through the verbs fabric):
// rdma_protocol_iwarp() rules that ULPs lean on. RDMAP (RFC 5040) carries one sink STag
// per READ, so max_sge_rd is 1; iWARP devices do not raise LAST_WQE_REACHED and cannot
// resize CQs.
TEST_P(ConformanceLocal, IwarpProfileLimits)
{
	OPEN_LOCAL(true);
	EXPECT_TRUE(dev().is_iwarp());
	EXPECT_EQ(dev().node_type(), NodeType::Rnic);
	const DeviceAttr &a = dev().attr();
	EXPECT_EQ(a.max_sge_rd, 1u);
	EXPECT_EQ(a.device_cap_flags & DEVICE_LAST_WQE_EVENT, 0u);
	EXPECT_EQ(a.device_cap_flags & DEVICE_CQ_RESIZE, 0u);
	CqInitAttr ca;
	ca.cqe = 16;
	auto cq = dev().create_cq(ca);
	ASSERT_TRUE(cq);
	EXPECT_EQ(cq->resize(64), -EOPNOTSUPP);
	PortAttr pa;
	ASSERT_EQ(dev().query_port(1, &pa), 0);
	EXPECT_EQ(pa.link_layer, LinkLayer::Iwarp);
}

// iWARP: an RDMA READ Response is a tagged DDP message placed at the requester under the
// sink STag (RFC 5040 4.4, and its RDMA Read Response rules), i.e. a remote write into the sink;
// iWARP RNICs (cxgb4, irdma) require the sink to be registered with REMOTE_WRITE, which is why
// Linux rdma_rw registers READ sinks with IB_ACCESS_REMOTE_WRITE on iWARP. The soft iWARP profile
// enforces it: the READ fails with a local protection error. (siw is lenient: siw_proc_rresp()
// checks only IB_ACCESS_LOCAL_WRITE, so on siw the READ succeeds.)
TEST_P(Conformance, IwarpReadSinkNeedsRemoteWrite)
{
	CONNECT(EpConfig{}, EpConfig{}, true);
	auto pm = peer().reg_mr(4096, kRemoteAll);
	auto data = pattern(1024, 41);
	ASSERT_EQ(peer().fill(pm.id, 0, data), 0);

	// With REMOTE_WRITE on the sink the READ works.
	auto good = local().reg_mr(4096, ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE);
	ASSERT_EQ(
	    local().post_send(rdma_op(WrOpcode::RdmaRead, 1, good.id, 0, 1024, pm.addr, pm.rkey)),
	    0);
	auto lw = local_wcs(1);
	ASSERT_EQ(lw.size(), 1u);
	ASSERT_EQ(lw[0].status, WcStatus::Success) << describe(lw);
	std::vector<uint8_t> got;
	ASSERT_EQ(local().read(good.id, 0, 1024, &got), 0);
	EXPECT_EQ(got, data);

	if (!fab().strict_iwarp_read_sink)
		GTEST_SKIP() << fab().name << " does not check the READ sink for REMOTE_WRITE";
	auto sink = local().reg_mr(4096, ACCESS_LOCAL_WRITE);
	ASSERT_EQ(
	    local().post_send(rdma_op(WrOpcode::RdmaRead, 2, sink.id, 0, 1024, pm.addr, pm.rkey)),
	    0);
	lw = local_wcs(1);
	ASSERT_EQ(lw.size(), 1u);
	EXPECT_TRUE(lw[0].status == WcStatus::LocProtErr || lw[0].status == WcStatus::LocAccessErr)
	    << describe(lw);
	ASSERT_EQ(local().read(sink.id, 0, 1024, &got), 0);
	EXPECT_EQ(got, std::vector<uint8_t>(1024, 0)) << "READ data placed into the sink";
	EXPECT_EQ(local_state_becomes(QpState::Err), QpState::Err);
}

} // namespace
} // namespace ulp::conf

namespace ulp::conf
{
namespace
{

// iWARP: one SGE per RDMA READ (RDMAP has a single Data Sink STag per Read Request; Linux
// rdma_rw uses max_sge_rd for READ WRs). A READ with two SGEs is refused at post time.
TEST_P(Conformance, IwarpReadWithTwoSgesFails)
{
	EpConfig c;
	c.max_sge = 2;
	CONNECT(c, c, true);
	ASSERT_EQ(dev().attr().max_sge_rd, 1u);
	auto lm = local().reg_mr(4096, ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE);
	auto pm = peer().reg_mr(4096, ACCESS_REMOTE_READ);
	Sge sg[2] = {{lm.addr, 16, lm.lkey}, {lm.addr + 64, 16, lm.lkey}};
	RdmaWr wr;
	wr.opcode = WrOpcode::RdmaRead;
	wr.sg_list = sg;
	wr.num_sge = 2;
	wr.remote_addr = pm.addr;
	wr.rkey = pm.rkey;
	wr.send_flags = SEND_SIGNALED;
	wr.wr_cqe = local().cqe(1);
	const SendWr *bad = nullptr;
	EXPECT_EQ(qp().post_send(&wr, &bad), -EINVAL);
	EXPECT_EQ(bad, &wr);
	// One SGE is fine.
	wr.num_sge = 1;
	ASSERT_EQ(qp().post_send(&wr, &bad), 0);
	auto lw = local_wcs(1);
	ASSERT_EQ(lw.size(), 1u);
	EXPECT_EQ(lw[0].status, WcStatus::Success) << describe(lw);
}

} // namespace
} // namespace ulp::conf
