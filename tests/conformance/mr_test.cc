// SPDX-License-Identifier: MIT
// Fast registration: REG_MR with page lists, key rotation, LOCAL_INV, SEND_WITH_INV.
#include "tests/conformance/fixture.h"

#include <cerrno>
#include <cstring>

namespace ulp::conf
{
namespace
{

constexpr uint32_t kPage = 4096;

class ConformanceMr : public Conformance
{
protected:
	// Connect, and on this side a backing buffer of pages registered for local write
	// (map_sg needs the memory inside MRs of the same PD) and a fast-reg MR.
	void SetUpMr(uint32_t pages = 8, uint32_t max_sg = 16)
	{
		CONNECT();
		if (!(dev().attr().device_cap_flags & DEVICE_MEM_MGT_EXTENSIONS))
			GTEST_SKIP() << "no MEM_MGT_EXTENSIONS";
		backing_ = local().reg_mr(pages * kPage, ACCESS_LOCAL_WRITE);
		ASSERT_GE(backing_.id, 0);
		frmr_ = local().pd()->alloc_mr(max_sg);
		ASSERT_TRUE(frmr_) << "alloc_mr: " << strerror(errno);
		ASSERT_TRUE(frmr_->is_fast_reg());
		ASSERT_EQ(frmr_->max_num_sg(), max_sg);
		peer_buf_ = peer().reg_mr(pages * kPage, kRemoteAll);
		ASSERT_GE(peer_buf_.id, 0);
	}

	void TearDown() override
	{
		frmr_.reset();
		Conformance::TearDown();
	}

	uint64_t page(uint32_t i) const { return backing_.addr + uint64_t(i) * kPage; }

	// REG_MR of frmr_ under key with access; waits for the (signaled) completion.
	void reg(uint32_t key, uint32_t access, uint32_t wr_id)
	{
		RegWr wr;
		wr.opcode = WrOpcode::RegMr;
		wr.mr = frmr_.get();
		wr.key = key;
		wr.access = access;
		wr.send_flags = SEND_SIGNALED;
		wr.wr_cqe = local().cqe(wr_id);
		const SendWr *bad = nullptr;
		ASSERT_EQ(qp().post_send(&wr, &bad), 0);
		auto lw = local_wcs(1);
		ASSERT_EQ(lw.size(), 1u);
		EXPECT_EQ(lw[0].wr_id, wr_id);
		ASSERT_EQ(lw[0].status, WcStatus::Success) << describe(lw);
		EXPECT_EQ(lw[0].opcode, WcOpcode::RegMr);
	}

	void local_inv(uint32_t key, uint32_t wr_id)
	{
		PostSend ps;
		ps.opcode = WrOpcode::LocalInv;
		ps.wr_id = wr_id;
		ps.inv_rkey = key;
		ASSERT_EQ(local().post_send(ps), 0);
		auto lw = local_wcs(1);
		ASSERT_EQ(lw.size(), 1u);
		ASSERT_EQ(lw[0].status, WcStatus::Success) << describe(lw);
		EXPECT_EQ(lw[0].opcode, WcOpcode::LocalInv);
	}

	// The peer WRITEs data through (iova, rkey) and then READs it back; returns the
	// status of the WRITE.
	WcStatus peer_write(uint64_t iova, uint32_t rkey, const std::vector<uint8_t> &data,
	                    uint32_t wr_id)
	{
		EXPECT_EQ(peer().fill(peer_buf_.id, 0, data), 0);
		EXPECT_EQ(peer().post_send(rdma_op(WrOpcode::RdmaWrite, wr_id, peer_buf_.id, 0,
		                                   uint32_t(data.size()), iova, rkey)),
		          0);
		auto pw = peer_wcs(1);
		EXPECT_EQ(pw.size(), 1u);
		return pw.empty() ? WcStatus::GeneralErr : pw[0].status;
	}

	MrInfo backing_;
	MrInfo peer_buf_;
	std::unique_ptr<Mr> frmr_;
};

// IB spec 10.6.3.6 (Fast Register Physical MR), Linux ib_map_mr_sg(): the MR's
// iova is the first byte of the first SG entry (after sg_offset) and its length the sum of
// the entries; after REG_MR the peer's RDMA through (iova, key) lands in the mapped pages,
// starting at the unaligned offset of the first one.
TEST_P(ConformanceMr, RegMrContiguousUnalignedStart)
{
	SetUpMr();
	if (HasFatalFailure() || IsSkipped())
		return;
	SgEntry sg[2] = {{page(1) + 100, 3 * kPage - 100}, {page(4), 2 * kPage}};
	unsigned off = 0;
	ASSERT_EQ(frmr_->map_sg(sg, &off, kPage), 2);
	EXPECT_EQ(frmr_->iova(), page(1) + 100);
	EXPECT_EQ(frmr_->length(), 5ull * kPage - 100);
	EXPECT_EQ(frmr_->page_list().size(), 5u);
	ASSERT_NO_FATAL_FAILURE(reg(frmr_->rkey(), kRemoteAll, 1));

	auto data = pattern(5 * kPage - 100, 31);
	ASSERT_EQ(peer_write(frmr_->iova(), frmr_->rkey(), data, 2), WcStatus::Success);
	std::vector<uint8_t> got;
	ASSERT_EQ(local().read(backing_.id, kPage + 100, 5 * kPage - 100, &got), 0);
	EXPECT_EQ(got, data);
	ASSERT_EQ(local().read(backing_.id, kPage, 100, &got), 0);
	EXPECT_EQ(got, std::vector<uint8_t>(100, 0)) << "the bytes before iova are not mapped";

	// And READ back through the same key, from an offset inside the region.
	ASSERT_EQ(peer().post_send(rdma_op(WrOpcode::RdmaRead, 3, peer_buf_.id, kPage, 5000,
	                                   frmr_->iova() + 3000, frmr_->rkey())),
	          0);
	auto pw = peer_wcs(1);
	ASSERT_EQ(pw.size(), 1u);
	ASSERT_EQ(pw[0].status, WcStatus::Success) << describe(pw);
	ASSERT_EQ(peer().read(peer_buf_.id, kPage, 5000, &got), 0);
	EXPECT_EQ(got, std::vector<uint8_t>(data.begin() + 3000, data.begin() + 8000));
}

// A page list of pages in no particular order (the ib_map_mr_sg() case of a scattered I/O
// buffer): the MR's address space is the concatenation of the entries, and the data of a
// single RDMA WRITE lands piecewise in the right pages.
TEST_P(ConformanceMr, RegMrScatteredPages)
{
	SetUpMr();
	if (HasFatalFailure() || IsSkipped())
		return;
	if (!fab().scattered_reg_mr)
		GTEST_SKIP() << fab().name << " registers virtually contiguous ranges only";
	// First entry starts 256 bytes into its page; the middle ones are whole pages; the
	// last ends mid-page.
	SgEntry sg[4] = {
	    {page(5) + 256, kPage - 256}, {page(2), kPage}, {page(7), kPage}, {page(0), 1000}};
	uint32_t total = 0;
	for (auto &e : sg)
		total += e.length;
	unsigned off = 0;
	ASSERT_EQ(frmr_->map_sg(sg, &off, kPage), 4);
	EXPECT_EQ(frmr_->length(), total);
	ASSERT_NO_FATAL_FAILURE(reg(frmr_->rkey(), kRemoteAll, 1));

	auto data = pattern(total, 32);
	ASSERT_EQ(peer_write(frmr_->iova(), frmr_->rkey(), data, 2), WcStatus::Success);
	size_t pos = 0;
	for (auto &e : sg) {
		std::vector<uint8_t> got;
		ASSERT_EQ(local().read(backing_.id, e.addr - backing_.addr, e.length, &got), 0);
		EXPECT_EQ(0, memcmp(got.data(), data.data() + pos, e.length))
		    << "entry at page offset " << (e.addr - backing_.addr);
		pos += e.length;
	}
	std::vector<uint8_t> untouched;
	ASSERT_EQ(local().read(backing_.id, 1 * kPage, kPage, &untouched), 0);
	EXPECT_EQ(untouched, std::vector<uint8_t>(kPage, 0)) << "an unmapped page was written";

	// READ across the entry boundaries.
	ASSERT_EQ(peer().post_send(rdma_op(WrOpcode::RdmaRead, 3, peer_buf_.id, 0, total,
	                                   frmr_->iova(), frmr_->rkey())),
	          0);
	auto pw = peer_wcs(1);
	ASSERT_EQ(pw.size(), 1u);
	ASSERT_EQ(pw[0].status, WcStatus::Success) << describe(pw);
	std::vector<uint8_t> got;
	ASSERT_EQ(peer().read(peer_buf_.id, 0, total, &got), 0);
	EXPECT_EQ(got, data);
}

// IB spec, memory region keys (key rotation), Linux ib_inc_rkey()/ib_update_fast_reg_key(): after
// LOCAL_INV and re-registration under the next key, the new key works and the old one is
// refused with REM_ACCESS_ERR (the point of rotation: a stale key cannot reach the pages).
TEST_P(ConformanceMr, KeyRotationOldRkeyFails)
{
	SetUpMr();
	if (HasFatalFailure() || IsSkipped())
		return;
	SgEntry sg[1] = {{page(0), 2 * kPage}};
	unsigned off = 0;
	ASSERT_EQ(frmr_->map_sg(sg, &off, kPage), 1);
	ASSERT_NO_FATAL_FAILURE(reg(frmr_->rkey(), kRemoteAll, 1));
	const uint32_t old_rkey = frmr_->rkey();
	ASSERT_EQ(peer_write(frmr_->iova(), old_rkey, pattern(512, 1), 2), WcStatus::Success);

	ASSERT_NO_FATAL_FAILURE(local_inv(old_rkey, 3));
	frmr_->inc_rkey();
	const uint32_t new_rkey = frmr_->rkey();
	EXPECT_NE(new_rkey, old_rkey);
	EXPECT_EQ(key_index(new_rkey), key_index(old_rkey)) << "only the key byte rotates";
	EXPECT_EQ(new_rkey, inc_rkey(old_rkey));
	off = 0;
	ASSERT_EQ(frmr_->map_sg(sg, &off, kPage), 1);
	ASSERT_NO_FATAL_FAILURE(reg(new_rkey, kRemoteAll, 4));

	auto fresh = pattern(700, 2);
	ASSERT_EQ(peer_write(frmr_->iova(), new_rkey, fresh, 5), WcStatus::Success);
	std::vector<uint8_t> got;
	ASSERT_EQ(local().read(backing_.id, 0, 700, &got), 0);
	EXPECT_EQ(got, fresh);

	EXPECT_EQ(peer_write(frmr_->iova(), old_rkey, pattern(64, 3), 6), WcStatus::RemAccessErr);
	ASSERT_EQ(local().read(backing_.id, 0, 700, &got), 0);
	EXPECT_EQ(got, fresh) << "the stale key wrote";
	EXPECT_EQ(peer_state_becomes(QpState::Err), QpState::Err);
	EXPECT_EQ(local_state_becomes(QpState::Err), QpState::Err)
	    << "the responder's QP enters ERR on an access violation";
}

// IB spec 10.6.5 (Local Invalidate): after LOCAL_INV the key no longer grants access: the
// peer's RDMA through it fails with REM_ACCESS_ERR.
TEST_P(ConformanceMr, LocalInvThenAccessFails)
{
	SetUpMr();
	if (HasFatalFailure() || IsSkipped())
		return;
	SgEntry sg[1] = {{page(2), kPage}};
	unsigned off = 0;
	ASSERT_EQ(frmr_->map_sg(sg, &off, kPage), 1);
	ASSERT_NO_FATAL_FAILURE(reg(frmr_->rkey(), kRemoteAll, 1));
	ASSERT_EQ(peer_write(frmr_->iova(), frmr_->rkey(), pattern(128, 4), 2), WcStatus::Success);
	ASSERT_NO_FATAL_FAILURE(local_inv(frmr_->rkey(), 3));
	std::vector<uint8_t> before;
	ASSERT_EQ(local().read(backing_.id, 2 * kPage, kPage, &before), 0);
	EXPECT_EQ(peer_write(frmr_->iova(), frmr_->rkey(), pattern(128, 5), 4),
	          WcStatus::RemAccessErr);
	std::vector<uint8_t> after;
	ASSERT_EQ(local().read(backing_.id, 2 * kPage, kPage, &after), 0);
	EXPECT_EQ(before, after) << "an invalidated key wrote";
	EXPECT_EQ(local_state_becomes(QpState::Err), QpState::Err);
}

// A REG_MR grants only the access it names: a key registered for remote READ refuses a
// remote WRITE (IB spec 10.6.7, access rights of the region).
TEST_P(ConformanceMr, RegMrAccessIsEnforced)
{
	SetUpMr();
	if (HasFatalFailure() || IsSkipped())
		return;
	SgEntry sg[1] = {{page(3), kPage}};
	unsigned off = 0;
	ASSERT_EQ(frmr_->map_sg(sg, &off, kPage), 1);
	ASSERT_NO_FATAL_FAILURE(reg(frmr_->rkey(), ACCESS_LOCAL_WRITE | ACCESS_REMOTE_READ, 1));
	EXPECT_EQ(peer_write(frmr_->iova(), frmr_->rkey(), pattern(128, 6), 2),
	          WcStatus::RemAccessErr);
}

// IB spec 10.6.5 (Send with Invalidate): the responder invalidates the named
// R_Key before completing the receive, whose WC carries IB_WC_WITH_INVALIDATE and the
// key; a later access with that key fails with REM_ACCESS_ERR.
TEST_P(ConformanceMr, SendWithInvalidate)
{
	SetUpMr();
	if (HasFatalFailure() || IsSkipped())
		return;
	SgEntry sg[1] = {{page(6), kPage}};
	unsigned off = 0;
	ASSERT_EQ(frmr_->map_sg(sg, &off, kPage), 1);
	ASSERT_NO_FATAL_FAILURE(reg(frmr_->rkey(), kRemoteAll, 1));
	const uint32_t rkey = frmr_->rkey();
	ASSERT_EQ(peer_write(frmr_->iova(), rkey, pattern(64, 7), 2), WcStatus::Success);

	auto rbuf = local().reg_mr(4096, ACCESS_LOCAL_WRITE);
	ASSERT_EQ(local().post_recv(rbuf.id, 0, 4096, 1, 70), 0);
	ASSERT_EQ(peer().fill(peer_buf_.id, 0, pattern(32, 8)), 0);
	PostSend inv = send_op(WrOpcode::SendWithInv, 3, peer_buf_.id, 0, 32);
	inv.inv_rkey = rkey;
	ASSERT_EQ(peer().post_send(inv), 0);
	auto pw = peer_wcs(1);
	ASSERT_EQ(pw.size(), 1u);
	EXPECT_EQ(pw[0].status, WcStatus::Success) << describe(pw);
	auto lw = local_wcs(1);
	ASSERT_EQ(lw.size(), 1u);
	EXPECT_EQ(lw[0].wr_id, 70u);
	EXPECT_EQ(lw[0].status, WcStatus::Success);
	EXPECT_EQ(lw[0].opcode, WcOpcode::Recv);
	EXPECT_EQ(lw[0].byte_len, 32u);
	EXPECT_NE(lw[0].wc_flags & WC_WITH_INVALIDATE, 0u) << describe(lw);
	EXPECT_EQ(lw[0].invalidate_rkey, rkey);

	EXPECT_EQ(peer_write(frmr_->iova(), rkey, pattern(64, 9), 4), WcStatus::RemAccessErr);
}

INSTANTIATE_TEST_SUITE_P(Fabric, ConformanceMr, ::testing::ValuesIn(fabric_names()),
                         fabric_param_name);

} // namespace
} // namespace ulp::conf
