// SPDX-License-Identifier: MIT
// Disconnect, cut connection and peer death: everything outstanding flushes on both sides.
#include "tests/conformance/fixture.h"

#include <cerrno>

namespace ulp::conf
{
namespace
{

// Outstanding work on both sides: receives at the peer, receives at the test side and a
// SEND stalled in RNR retry (the peer's receives are all used up first).
struct Outstanding {
	MrInfo lm, pm;
};

void make_outstanding(Conformance *t, Endpoint &local, Peer &peer, Outstanding *o)
{
	o->lm = local.reg_mr(4096, ACCESS_LOCAL_WRITE);
	o->pm = peer.reg_mr(4096, ACCESS_LOCAL_WRITE);
	ASSERT_GE(o->lm.id, 0);
	ASSERT_GE(o->pm.id, 0);
	ASSERT_EQ(local.post_recv(o->lm.id, 0, 256, 3, 100), 0);
	ASSERT_EQ(peer.post_recv(o->pm.id, 0, 256, 2, 200), 0);
}

void expect_all_flushed(const std::vector<WcInfo> &wcs, std::vector<uint32_t> ids, const char *who)
{
	ASSERT_EQ(wcs.size(), ids.size()) << who << ": " << describe(wcs);
	for (size_t i = 0; i < wcs.size(); i++) {
		EXPECT_EQ(wcs[i].wr_id, ids[i]) << who << " flush order";
		EXPECT_EQ(wcs[i].status, WcStatus::WrFlushErr) << who << ": " << describe(wcs);
	}
}

// rdma_disconnect(): both QPs go to ERR (the passive side on DREQ), every outstanding WR
// completes with WR_FLUSH_ERR (IB spec 10.3.1, Error state), and both sides get
// RDMA_CM_EVENT_DISCONNECTED.
TEST_P(Conformance, PeerDisconnectFlushesBothSides)
{
	CONNECT();
	Outstanding o;
	ASSERT_NO_FATAL_FAILURE(make_outstanding(this, local(), peer(), &o));
	ASSERT_EQ(peer().disconnect(), 0);
	EXPECT_EQ(local().wait_cm_event(CmEventType::Disconnected, kTimeoutMs), 0);
	EXPECT_EQ(peer().wait_cm_event(CmEventType::Disconnected, kTimeoutMs), 0);
	EXPECT_EQ(local_state_becomes(QpState::Err), QpState::Err);
	EXPECT_EQ(peer_state_becomes(QpState::Err), QpState::Err);
	expect_all_flushed(local_wcs(3), {100, 101, 102}, "local");
	expect_all_flushed(peer_wcs(2), {200, 201}, "peer");
}

// The same from the active side, with a SEND in RNR retry outstanding: the SEND is flushed
// too, rather than retried forever against a closed connection.
TEST_P(Conformance, LocalDisconnectFlushesStalledSend)
{
	EpConfig c;
	c.rnr_retry = 7;
	CONNECT(c, c);
	auto lm = local().reg_mr(4096, ACCESS_LOCAL_WRITE);
	ASSERT_EQ(local().post_recv(lm.id, 0, 256, 2, 100), 0);
	ASSERT_EQ(local().post_send(send_op(WrOpcode::Send, 1, lm.id, 0, 64)), 0);
	auto early = local_wcs(1, 50);
	ASSERT_TRUE(early.empty()) << describe(early);
	ASSERT_EQ(local().disconnect(), 0);
	EXPECT_EQ(local().wait_cm_event(CmEventType::Disconnected, kTimeoutMs), 0);
	EXPECT_EQ(peer().wait_cm_event(CmEventType::Disconnected, kTimeoutMs), 0);
	auto wcs = local_wcs(3);
	ASSERT_EQ(wcs.size(), 3u) << describe(wcs);
	for (auto &w : wcs)
		EXPECT_EQ(w.status, WcStatus::WrFlushErr) << describe({w});
	EXPECT_EQ(local_state_becomes(QpState::Err), QpState::Err);
	EXPECT_EQ(peer_state_becomes(QpState::Err), QpState::Err);
}

// A cut wire (soft::cut_connection, as if the peer died): both QPs go to ERR, both sides
// flush everything outstanding and see DISCONNECTED.
TEST_P(Conformance, CutConnectionFlushesBothSides)
{
	CONNECT();
	if (!fab().soft)
		GTEST_SKIP() << "no fault injection on " << fab().name;
	Outstanding o;
	ASSERT_NO_FATAL_FAILURE(make_outstanding(this, local(), peer(), &o));
	ASSERT_TRUE(cut_connection(fab(), qp()));
	EXPECT_EQ(local().wait_cm_event(CmEventType::Disconnected, kTimeoutMs), 0);
	EXPECT_EQ(peer().wait_cm_event(CmEventType::Disconnected, kTimeoutMs), 0);
	EXPECT_EQ(local_state_becomes(QpState::Err), QpState::Err);
	EXPECT_EQ(peer_state_becomes(QpState::Err), QpState::Err);
	expect_all_flushed(local_wcs(3), {100, 101, 102}, "local");
	expect_all_flushed(peer_wcs(2), {200, 201}, "peer");
	// Posting after the cut flushes too.
	ASSERT_EQ(local().post_send(send_op(WrOpcode::Send, 9, o.lm.id, 0, 8)), 0);
	auto wcs = local_wcs(1);
	ASSERT_EQ(wcs.size(), 1u);
	EXPECT_EQ(wcs[0].status, WcStatus::WrFlushErr);
}

// The peer cuts: the test side learns of it the same way.
TEST_P(Conformance, PeerCutFlushesLocal)
{
	CONNECT();
	if (!fab().soft)
		GTEST_SKIP() << "no fault injection on " << fab().name;
	Outstanding o;
	ASSERT_NO_FATAL_FAILURE(make_outstanding(this, local(), peer(), &o));
	ASSERT_EQ(peer().cut(), 0);
	EXPECT_EQ(local().wait_cm_event(CmEventType::Disconnected, kTimeoutMs), 0);
	EXPECT_EQ(local_state_becomes(QpState::Err), QpState::Err);
	expect_all_flushed(local_wcs(3), {100, 101, 102}, "local");
	expect_all_flushed(peer_wcs(2), {200, 201}, "peer");
}

// The peer process dies (SIGKILL) with work outstanding. Every outstanding WR of the
// survivor completes in error: receives flush; a SEND in flight ends with RETRY_EXC_ERR
// (the IB spec's transport timer) or WR_FLUSH_ERR when the provider learns of the
// death first, as the soft socket wire does (DISCONNECTED at once).
TEST_P(Conformance, PeerDeathFlushesLocal)
{
	EpConfig c;
	c.rnr_retry = 7;
	c.retry = 2;
	CONNECT(c, c);
	if (!peer().remote())
		GTEST_SKIP() << "the peer is in this process";
	auto lm = local().reg_mr(4096, ACCESS_LOCAL_WRITE);
	ASSERT_EQ(local().post_recv(lm.id, 0, 256, 3, 100), 0);
	ASSERT_EQ(local().post_send(send_op(WrOpcode::Send, 1, lm.id, 0, 64)), 0);
	auto early = local_wcs(1, 50);
	ASSERT_TRUE(early.empty()) << describe(early);
	peer_killed_ = true;
	ASSERT_EQ(peer().kill(), 0);
	if (fab().peer_death_event) {
		EXPECT_EQ(local().wait_cm_event(CmEventType::Disconnected, kTimeoutMs), 0);
	}
	auto wcs = local_wcs(4);
	ASSERT_EQ(wcs.size(), 4u) << describe(wcs);
	for (auto &w : wcs) {
		if (w.recv)
			EXPECT_EQ(w.status, WcStatus::WrFlushErr) << describe({w});
		else
			EXPECT_TRUE(w.status == WcStatus::WrFlushErr ||
			            w.status == WcStatus::RetryExcErr)
			    << describe({w});
	}
	EXPECT_EQ(local_state_becomes(QpState::Err), QpState::Err);
}

} // namespace
} // namespace ulp::conf
