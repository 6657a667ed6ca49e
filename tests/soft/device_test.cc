// SPDX-License-Identifier: MIT
// tests/soft/device_test.cc - soft device creation: profiles, limits, refused configs, the
// registry, and objects refused for exceeding the limits.
#include "soft_test_util.h"

#include <cerrno>

using namespace ulp;
using namespace soft_test;

namespace
{

soft::DeviceConfig cfg(const std::string &name, soft::Profile p = soft::Profile::Ib)
{
	soft::DeviceConfig c;
	c.name = name;
	c.profile = p;
	return c;
}

} // namespace

TEST(SoftDevice, IbProfile)
{
	DevPtr d(soft::create_device(cfg("sd_ib")));
	ASSERT_TRUE(d) << "errno " << errno;
	const DeviceAttr &a = d->attr();
	EXPECT_EQ(d->node_type(), NodeType::Ca);
	EXPECT_FALSE(d->is_iwarp());
	EXPECT_TRUE(soft::is_soft(*d));
	EXPECT_TRUE(a.device_cap_flags & DEVICE_MEM_MGT_EXTENSIONS);
	EXPECT_TRUE(a.device_cap_flags & DEVICE_LAST_WQE_EVENT);
	EXPECT_TRUE(a.device_cap_flags & DEVICE_CQ_RESIZE);
	EXPECT_TRUE(a.device_cap_flags & DEVICE_RC_RNR_NAK_GEN);
	EXPECT_GT(a.max_sge_rd, 1u);
	EXPECT_LE(a.max_sge_rd, a.max_sge);
	EXPECT_GT(a.max_qp_wr, 0u);
	EXPECT_GT(a.max_cqe, 0u);
	EXPECT_GT(a.max_fast_reg_page_list_len, 0u);
	EXPECT_GT(a.num_comp_vectors, 0u);
	PortAttr pa;
	ASSERT_EQ(d->query_port(1, &pa), 0);
	EXPECT_EQ(pa.state, PortState::Active);
	EXPECT_NE(pa.link_layer, LinkLayer::Iwarp);
	EXPECT_EQ(d->query_port(2, &pa), -EINVAL);
	// The GID is the IPv4-mapped default address 127.0.0.1.
	Gid g{};
	g[10] = g[11] = 0xff;
	g[12] = 127;
	g[15] = 1;
	EXPECT_EQ(d->gid(), g);
}

TEST(SoftDevice, IwarpProfile)
{
	DevPtr d(soft::create_device(cfg("sd_iw", soft::Profile::Iwarp)));
	ASSERT_TRUE(d) << "errno " << errno;
	const DeviceAttr &a = d->attr();
	EXPECT_EQ(d->node_type(), NodeType::Rnic);
	EXPECT_TRUE(d->is_iwarp());
	EXPECT_EQ(a.max_sge_rd, 1u);
	EXPECT_FALSE(a.device_cap_flags & DEVICE_LAST_WQE_EVENT);
	EXPECT_FALSE(a.device_cap_flags & DEVICE_CQ_RESIZE);
	EXPECT_TRUE(a.device_cap_flags & DEVICE_MEM_MGT_EXTENSIONS);
	PortAttr pa;
	ASSERT_EQ(d->query_port(1, &pa), 0);
	EXPECT_EQ(pa.link_layer, LinkLayer::Iwarp);

	// max_sge_rd 1 is enforced: a READ with two SGEs is refused at post time.
	Side s;
	s.init(*d);
	s.create_qp();
	ASSERT_EQ(connect_qp(*s.qp, *d, s.qp->qp_num()), 0); // loopback to itself
	Sge sg[2] = {s.sge(0, 8), s.sge(8, 8)};
	RdmaWr wr;
	wr.opcode = WrOpcode::RdmaRead;
	wr.sg_list = sg;
	wr.num_sge = 2;
	wr.remote_addr = s.at(64);
	wr.rkey = s.mr->rkey();
	const SendWr *bad = nullptr;
	EXPECT_EQ(s.qp->post_send(&wr, &bad), -EINVAL);
	EXPECT_EQ(bad, &wr);
}

TEST(SoftDevice, LimitsOverridesApplied)
{
	soft::DeviceConfig c = cfg("sd_lim");
	c.limits.max_qp_wr = 100;
	c.limits.max_sge = 6;
	c.limits.max_sge_rd = 3;
	c.limits.max_fast_reg_page_list_len = 16;
	c.limits.max_qp_rd_atom = 2;
	c.limits.max_cqe = 300;
	c.limits.max_inline_data = 40;
	c.limits.num_comp_vectors = 3;
	DevPtr d(soft::create_device(c));
	ASSERT_TRUE(d) << "errno " << errno;
	const DeviceAttr &a = d->attr();
	EXPECT_EQ(a.max_qp_wr, 100u);
	EXPECT_EQ(a.max_sge, 6u);
	EXPECT_EQ(a.max_sge_rd, 3u);
	EXPECT_EQ(a.max_fast_reg_page_list_len, 16u);
	EXPECT_EQ(a.max_qp_rd_atom, 2u);
	EXPECT_EQ(a.max_qp_init_rd_atom, 2u);
	EXPECT_EQ(a.max_cqe, 300u);
	EXPECT_EQ(a.max_inline_data, 40u);
	EXPECT_EQ(a.num_comp_vectors, 3u);
	// SRQs are bounded like QPs.
	EXPECT_LE(a.max_srq_wr, 100u);
	EXPECT_LE(a.max_srq_sge, 6u);
}

// Lowering max_sge alone must give a usable device: max_sge_rd defaults to the profile's
// value only as far as max_sge allows (a READ cannot carry more SGEs than any WR).
TEST(SoftDevice, LimitsMaxSgeAloneBelowProfileSgeRd)
{
	soft::DeviceConfig c = cfg("sd_sge");
	c.limits.max_sge = 4;
	DevPtr d(soft::create_device(c));
	ASSERT_TRUE(d) << "Limits{max_sge=4} refused, errno " << errno;
	EXPECT_EQ(d->attr().max_sge, 4u);
	EXPECT_LE(d->attr().max_sge_rd, 4u);
	EXPECT_GE(d->attr().max_sge_rd, 1u);
}

TEST(SoftDevice, InvalidConfigsRefused)
{
	soft::DeviceConfig c = cfg("sd_bad");
	c.ip = "not-an-ip";
	errno = 0;
	EXPECT_EQ(soft::create_device(c), nullptr);
	EXPECT_EQ(errno, EINVAL);
	c.ip = "127.0.0.300";
	errno = 0;
	EXPECT_EQ(soft::create_device(c), nullptr);
	EXPECT_EQ(errno, EINVAL);

	c = cfg("sd_bad");
	c.limits.max_sge = 65; // above the provider's hard ceiling of 64
	c.limits.max_sge_rd = 1;
	errno = 0;
	EXPECT_EQ(soft::create_device(c), nullptr);
	EXPECT_EQ(errno, EINVAL);

	c = cfg("sd_bad");
	c.limits.max_sge = 4;
	c.limits.max_sge_rd = 8; // more per READ than per WR
	errno = 0;
	EXPECT_EQ(soft::create_device(c), nullptr);
	EXPECT_EQ(errno, EINVAL);

	// The ceiling itself is fine.
	c = cfg("sd_bad");
	c.limits.max_sge = 64;
	c.limits.max_sge_rd = 64;
	DevPtr ok(soft::create_device(c));
	EXPECT_TRUE(ok) << "errno " << errno;
	if (ok) {
		EXPECT_EQ(ok->attr().max_sge, 64u);
	}

	// A second device with the same name is refused; the first is untouched.
	errno = 0;
	EXPECT_EQ(soft::create_device(cfg("sd_bad")), nullptr);
	EXPECT_EQ(errno, EEXIST);
	EXPECT_EQ(find_device("sd_bad"), ok.get());
	// Nothing refused leaked into the registry.
	for (Device *x : devices())
		EXPECT_TRUE(x->name() != "" && x->name() != "not-an-ip");
}

TEST(SoftDevice, RegistryFindsAndForgets)
{
	EXPECT_EQ(find_device("sd_reg"), nullptr);
	std::vector<std::string> added, removed;
	Client cl;
	cl.name = "soft_test";
	cl.add = [&](Device &d) { added.push_back(d.name()); };
	cl.remove = [&](Device &d) { removed.push_back(d.name()); };
	ASSERT_EQ(register_client(&cl), 0);
	Device *d = soft::create_device(cfg("sd_reg"));
	ASSERT_NE(d, nullptr);
	EXPECT_EQ(find_device("sd_reg"), d);
	EXPECT_NE(find_provider("soft"), nullptr);
	EXPECT_EQ(find_provider("soft"), &soft::provider());
	EXPECT_EQ(std::count(added.begin(), added.end(), "sd_reg"), 1);
	EXPECT_EQ(std::count(removed.begin(), removed.end(), "sd_reg"), 0);
	soft::destroy_device(d);
	EXPECT_EQ(find_device("sd_reg"), nullptr);
	EXPECT_EQ(std::count(removed.begin(), removed.end(), "sd_reg"), 1);
	unregister_client(&cl);

	// The name is free again.
	DevPtr again(soft::create_device(cfg("sd_reg")));
	EXPECT_TRUE(again);
	EXPECT_EQ(find_device("sd_reg"), again.get());
}

TEST(SoftDevice, DefaultNamesAreUnique)
{
	DevPtr a(soft::create_device(soft::DeviceConfig{}));
	DevPtr b(soft::create_device(soft::DeviceConfig{}));
	ASSERT_TRUE(a && b);
	EXPECT_NE(a->name(), b->name());
	EXPECT_EQ(a->name().rfind("soft", 0), 0u);
	EXPECT_EQ(find_device(a->name()), a.get());
	EXPECT_EQ(find_device(b->name()), b.get());
}

TEST(SoftDevice, ObjectsAboveLimitsRefused)
{
	soft::DeviceConfig c = cfg("sd_caps");
	c.limits.max_qp_wr = 32;
	c.limits.max_sge = 4;
	c.limits.max_sge_rd = 4;
	c.limits.max_inline_data = 16;
	c.limits.max_cqe = 128;
	c.limits.num_comp_vectors = 2;
	c.limits.max_fast_reg_page_list_len = 8;
	c.limits.max_qp_rd_atom = 2;
	DevPtr d(soft::create_device(c));
	ASSERT_TRUE(d) << "errno " << errno;
	auto pd = d->alloc_pd();
	ASSERT_TRUE(pd);

	// CQs: max_cqe and num_comp_vectors.
	CqInitAttr ca;
	ca.cqe = 128;
	auto cq = d->create_cq(ca);
	ASSERT_TRUE(cq);
	EXPECT_GE(cq->cqe(), 128);
	ca.cqe = 129;
	errno = 0;
	EXPECT_FALSE(d->create_cq(ca));
	EXPECT_EQ(errno, EINVAL);
	ca.cqe = 8;
	ca.comp_vector = 1;
	EXPECT_TRUE(d->create_cq(ca));
	ca.comp_vector = 2;
	errno = 0;
	EXPECT_FALSE(d->create_cq(ca));
	EXPECT_EQ(errno, EINVAL);

	QpInitAttr base;
	base.send_cq = cq.get();
	base.recv_cq = cq.get();
	base.cap.max_send_wr = 32;
	base.cap.max_recv_wr = 32;
	base.cap.max_send_sge = 4;
	base.cap.max_recv_sge = 4;
	base.cap.max_inline_data = 16;
	{
		auto qp = pd->create_qp(base);
		ASSERT_TRUE(qp) << "at the limits, errno " << errno;
		EXPECT_GE(qp->cap().max_send_wr, 32u);
		EXPECT_GE(qp->cap().max_inline_data, 16u);
	}
	auto refused = [&](const char *what, auto tweak) {
		QpInitAttr a = base;
		tweak(a);
		errno = 0;
		auto qp = pd->create_qp(a);
		EXPECT_FALSE(qp) << what;
		EXPECT_EQ(errno, EINVAL) << what;
	};
	refused("max_send_wr", [](QpInitAttr &a) { a.cap.max_send_wr = 33; });
	refused("max_recv_wr", [](QpInitAttr &a) { a.cap.max_recv_wr = 33; });
	refused("max_send_sge", [](QpInitAttr &a) { a.cap.max_send_sge = 5; });
	refused("max_recv_sge", [](QpInitAttr &a) { a.cap.max_recv_sge = 5; });
	refused("max_inline_data", [](QpInitAttr &a) { a.cap.max_inline_data = 17; });

	// SRQs: bounded by max_srq_wr / max_srq_sge (derived from the QP limits).
	SrqInitAttr sa;
	sa.max_wr = d->attr().max_srq_wr + 1;
	sa.max_sge = 1;
	errno = 0;
	EXPECT_FALSE(pd->create_srq(sa));
	EXPECT_EQ(errno, EINVAL);
	sa.max_wr = 8;
	sa.max_sge = d->attr().max_srq_sge + 1;
	errno = 0;
	EXPECT_FALSE(pd->create_srq(sa));
	EXPECT_EQ(errno, EINVAL);

	// Fast-registration MRs: max_fast_reg_page_list_len.
	EXPECT_TRUE(pd->alloc_mr(8));
	errno = 0;
	EXPECT_FALSE(pd->alloc_mr(9));
	EXPECT_EQ(errno, EINVAL);

	// max_qp_rd_atom bounds both READ depths at modify time.
	auto qp = pd->create_qp(base);
	ASSERT_TRUE(qp);
	QpAttr init;
	init.qp_state = QpState::Init;
	init.qp_access_flags = ACCESS_REMOTE_READ;
	ASSERT_EQ(qp->modify(init, QP_STATE | QP_PORT | QP_ACCESS_FLAGS), 0);
	QpAttrAv rtr;
	rtr.qp_state = QpState::Rtr;
	rtr.dest_qp_num = qp->qp_num();
	rtr.ah_attr.dgid = d->gid();
	const uint32_t rtr_mask = QP_STATE | QP_AV | QP_PATH_MTU | QP_DEST_QPN | QP_RQ_PSN |
	                          QP_MAX_DEST_RD_ATOMIC | QP_MIN_RNR_TIMER;
	rtr.max_dest_rd_atomic = 3;
	EXPECT_EQ(qp->modify(rtr, rtr_mask), -EINVAL);
	EXPECT_EQ(qp->state(), QpState::Init);
	rtr.max_dest_rd_atomic = 2;
	ASSERT_EQ(qp->modify(rtr, rtr_mask), 0);
	QpAttr rts;
	rts.qp_state = QpState::Rts;
	const uint32_t rts_mask =
	    QP_STATE | QP_SQ_PSN | QP_TIMEOUT | QP_RETRY_CNT | QP_RNR_RETRY | QP_MAX_QP_RD_ATOMIC;
	rts.max_rd_atomic = 3;
	EXPECT_EQ(qp->modify(rts, rts_mask), -EINVAL);
	EXPECT_EQ(qp->state(), QpState::Rtr);
	rts.max_rd_atomic = 2;
	ASSERT_EQ(qp->modify(rts, rts_mask), 0);
	QpAttr q;
	ASSERT_EQ(qp->query(&q), 0);
	EXPECT_EQ(q.max_rd_atomic, 2u);
	EXPECT_EQ(q.max_dest_rd_atomic, 2u);

	// An inline SEND larger than the QP's inline cap is refused at post time.
	std::vector<uint8_t> big(d->attr().max_inline_data + 1, 0x5a);
	Sge s{reinterpret_cast<uint64_t>(big.data()), static_cast<uint32_t>(big.size()), 0};
	SendWr wr;
	wr.opcode = WrOpcode::Send;
	wr.sg_list = &s;
	wr.num_sge = 1;
	wr.send_flags = SEND_INLINE;
	const SendWr *bad = nullptr;
	EXPECT_EQ(qp->post_send(&wr, &bad), -EINVAL);
	EXPECT_EQ(bad, &wr);
}
