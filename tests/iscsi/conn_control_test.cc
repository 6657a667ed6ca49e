// SPDX-License-Identifier: MIT
// The target's connection layer, its control side (tests/iscsi/conn_test.cc has the data
// side): task management of waiting and unseen commands, NOP-Out echoes and the target's
// pings with their timeout, long SendTargets answers with continuations, logout with
// commands in flight, session reinstatement, and teardown in the middle of I/O. Every
// test ends with the connection torn down, bounded, and nothing left in the target or the
// core (the fixture is in conn_test_env.h).
#include "tests/iscsi/conn_test_env.h"

namespace ulp::iscsi::conn_test
{
namespace
{

// ---- Task management (11.5)
// ----------------------------------------------------------------------

// ABORT TASK of a command that is still waiting for its CmdSN: answered by the connection
// (the SCSI layer never saw it), and its CmdSN still counts as received (11.5.1), so the
// commands after it run.
TEST_F(IscsiConn, AbortTaskOfCommandWaitingForItsCmdSn)
{
	start();
	clear_ua();                                            // ExpCmdSN 101
	ScsiCmd gap = cmd(kTur, false, false, 0);              // 101, sent last
	ScsiCmd waiting = cmd(read10(0, 1), true, false, 512); // 102
	send(waiting);
	expect_nothing();

	TmfReq q; // QUERY TASK sees it
	q.function = 0x80 | 9;
	q.itt = ini_->new_itt();
	q.rtt = waiting.itt;
	q.cmdsn = ini_->cmdsn;
	q.ref_cmdsn = waiting.cmdsn;
	send(q);
	TmfRsp tr = expect<TmfRsp>();
	EXPECT_EQ(tr.itt, q.itt);
	EXPECT_EQ(tr.response, 7); // FUNCTION SUCCEEDED (RFC 7144)

	TmfReq t;
	t.function = 0x80 | 1; // ABORT TASK
	t.itt = ini_->new_itt();
	t.rtt = waiting.itt;
	t.cmdsn = ini_->cmdsn;
	t.ref_cmdsn = waiting.cmdsn;
	send(t);
	tr = expect<TmfRsp>();
	EXPECT_EQ(tr.itt, t.itt);
	EXPECT_EQ(tr.response, 0); // Function complete
	expect_nothing();

	send(gap);
	EXPECT_EQ(expect<ScsiRsp>().itt, gap.itt);
	ScsiCmd after = cmd(kTur, false, false, 0); // 103
	send(after);
	ScsiRsp r = expect<ScsiRsp>();
	EXPECT_EQ(r.itt, after.itt);
	EXPECT_EQ(r.exp_cmdsn, 104u);
	expect_nothing();
}

// ABORT TASK of a task never received whose RefCmdSN is in the window and before the
// TMF's own CmdSN: Function complete, and the target considers that CmdSN received
// (11.5.1).
TEST_F(IscsiConn, AbortTaskOfUnseenCommandUsesItsCmdSn)
{
	start();
	clear_ua();                          // ExpCmdSN 101
	const uint32_t lost = ini_->cmdsn++; // 101: never arrives
	TmfReq t;
	t.function = 0x80 | 1;
	t.itt = ini_->new_itt();
	t.rtt = 0x4242;
	t.cmdsn = ini_->cmdsn;
	t.ref_cmdsn = lost;
	send(t);
	EXPECT_EQ(expect<TmfRsp>().response, 0);
	ScsiCmd h = cmd(kTur, false, false, 0); // 102
	send(h);
	ScsiRsp r = expect<ScsiRsp>();
	EXPECT_EQ(r.itt, h.itt);
	EXPECT_EQ(r.exp_cmdsn, 103u);

	// Outside the window: Task does not exist.
	t.itt = ini_->new_itt();
	t.cmdsn = ini_->cmdsn;
	t.ref_cmdsn = lost - 50;
	send(t);
	EXPECT_EQ(expect<TmfRsp>().response, 1);
}

// LOGICAL UNIT RESET aborts a write waiting for its data: no response of its own, the TMF
// response after it has ended, then BUS DEVICE RESET for the next command.
TEST_F(IscsiConn, LunResetAbortsAWriteWaitingForData)
{
	start({}, [](InitiatorLoginConfig &ic) { ic.prefs.immediate_data = false; });
	clear_ua();
	ScsiCmd w = cmd(write10(0, 8), false, true, 4096);
	send(w);
	R2t r = expect<R2t>();
	EXPECT_EQ(r.itt, w.itt);
	TmfReq t;
	t.function = 0x80 | 5;
	t.itt = ini_->new_itt();
	t.cmdsn = ini_->cmdsn;
	send(t);
	TmfRsp tr = expect<TmfRsp>();
	EXPECT_EQ(tr.itt, t.itt);
	EXPECT_EQ(tr.response, 0);
	expect_nothing(); // nothing for the aborted write
	Pdu p;
	send(cmd(kTur, false, false, 0));
	ScsiRsp rsp = expect<ScsiRsp>(&p);
	EXPECT_EQ(rsp.status, 0x02);
	EXPECT_EQ(sense_of(p.data).asc, 0x2903);
	send(cmd(kTur, false, false, 0));
	EXPECT_EQ(expect<ScsiRsp>().status, 0);
}

// ---- NOP (11.18, 11.19)
// ------------------------------------------------------------------------------

TEST_F(IscsiConn, NopOutIsEchoed)
{
	start();
	const uint32_t statsn = ini_->exp_statsn;
	NopOut n;
	n.itt = 0x99;
	n.cmdsn = ini_->cmdsn;
	const auto data = pattern(101, 31); // padded on the wire
	send(n, data);
	Pdu p;
	NopIn r = expect<NopIn>(&p);
	EXPECT_EQ(r.itt, 0x99u);
	EXPECT_EQ(r.ttt, kReservedTag);
	EXPECT_EQ(r.statsn, statsn);
	EXPECT_TRUE(std::equal(p.data.begin(), p.data.end(), data.begin(), data.end()));
	// ITT reserved: no answer wanted (11.18.1).
	n.itt = kReservedTag;
	send(n);
	expect_nothing();
	// Non-immediate: takes a CmdSN.
	n.itt = 0x9a;
	n.immediate = false;
	n.cmdsn = ini_->cmdsn++;
	send(n);
	r = expect<NopIn>();
	EXPECT_EQ(r.statsn, statsn + 1);
	EXPECT_EQ(r.exp_cmdsn, 101u);
}

// The target pings an idle initiator (NOP-In with a TTT, StatSN not advanced); an answer
// (NOP-Out echoing the TTT) keeps the connection, silence past the timeout drops it.
TEST_F(IscsiConn, TargetPingAndTimeout)
{
	start([](TargetConfig &tc) {
		tc.nop_interval = 1000ms;
		tc.nop_timeout = 1000ms;
	});
	c_->tick(500ms);
	c_->pump();
	expect_nothing();
	c_->tick(600ms);
	c_->pump();
	NopIn ping1 = expect<NopIn>();
	EXPECT_EQ(ping1.itt, kReservedTag);
	EXPECT_NE(ping1.ttt, kReservedTag);
	EXPECT_EQ(ping1.statsn, ini_->exp_statsn);
	NopOut a;
	a.itt = kReservedTag;
	a.ttt = ping1.ttt;
	a.cmdsn = ini_->cmdsn;
	send(a);
	expect_nothing();
	c_->tick(900ms);
	c_->pump();
	EXPECT_FALSE(c_->closed());
	expect_nothing();
	c_->tick(200ms);
	c_->pump();
	NopIn ping2 = expect<NopIn>();
	EXPECT_NE(ping2.ttt, ping1.ttt);
	EXPECT_FALSE(c_->closed());
	c_->tick(1100ms);
	c_->pump();
	EXPECT_TRUE(c_->closed()) << "no answer to the ping within the timeout";
}

// ---- Text: SendTargets (11.10, 11.11, appendix C)
// ---------------------------------------------------

TEST_F(IscsiConn, SendTargetsWithContinuation)
{
	start({}, [](InitiatorLoginConfig &ic) {
		ic.type = SessionType::Discovery;
		ic.prefs.max_recv_dsl = 512;
	});
	using namespace std::literals;
	const auto q = "SendTargets=All\0"sv;
	TextReq t;
	t.itt = 0x50;
	t.immediate = true;
	t.cmdsn = ini_->cmdsn;
	send(t, std::span(reinterpret_cast<const uint8_t *>(q.data()), q.size()));
	std::string text;
	int pieces = 0;
	for (;;) {
		Pdu p;
		TextRsp r = expect<TextRsp>(&p);
		EXPECT_EQ(r.itt, 0x50u);
		EXPECT_LE(p.data.size(), 512u);
		text.append(p.data.begin(), p.data.end());
		pieces++;
		if (r.final || HasFailure()) {
			EXPECT_EQ(r.ttt, kReservedTag);
			EXPECT_FALSE(r.cont);
			break;
		}
		EXPECT_TRUE(r.cont);
		EXPECT_NE(r.ttt, kReservedTag);
		t.ttt = r.ttt; // 11.10: an empty request with the response's TTT asks for more
		send(t);
		ASSERT_LT(pieces, 20);
	}
	EXPECT_GE(pieces, 2);
	EXPECT_NE(text.find("TargetName=" + kTargetName + '\0'), std::string::npos);
	size_t n = 0;
	for (size_t at = 0; (at = text.find("TargetAddress=", at)) != std::string::npos; at++)
		n++;
	EXPECT_EQ(n, 25u);
	// A discovery session has no SCSI commands (4.3).
	send(cmd(kTur, false, false, 0));
	EXPECT_EQ(expect<RejectPdu>().reason, RejectReason::ProtocolError);
}

// ---- Logout (11.14, 11.15)
// ---------------------------------------------------------------------------

// The Logout Response waits for the connection's commands; new commands meanwhile are
// rejected (reason "waiting for logout"); the connection closes after the response.
TEST_F(IscsiConn, LogoutWaitsForCommands)
{
	start({}, [](InitiatorLoginConfig &ic) { ic.prefs.immediate_data = false; });
	clear_ua();
	ScsiCmd w = cmd(write10(0, 1), false, true, 512);
	send(w);
	R2t r = expect<R2t>();
	LogoutReq l;
	l.immediate = true;
	l.itt = 0x77;
	l.cmdsn = ini_->cmdsn;
	send(l);
	expect_nothing();
	send(cmd(kTur, false, false, 0));
	EXPECT_EQ(expect<RejectPdu>().reason, RejectReason::WaitingForLogout);
	EXPECT_FALSE(c_->closed());
	data_out(w.itt, r.ttt, 0, 0, pattern(512, 2), true);
	ScsiRsp rsp = expect<ScsiRsp>();
	EXPECT_EQ(rsp.itt, w.itt);
	EXPECT_EQ(rsp.status, 0);
	// The response follows the session's I_T nexus loss, which the reaper carries out.
	ASSERT_TRUE(ini_->await(kBound));
	LogoutRsp lr = expect<LogoutRsp>();
	EXPECT_EQ(lr.itt, 0x77u);
	EXPECT_EQ(lr.response, 0);
	EXPECT_TRUE(c_->closed());
	expect_nothing();
}

// ---- Sessions
// -------------------------------------------------------------------------------------------

// RFC 7143 6.3.5: a leading login with the ISID of a live session replaces it (ERL 0:
// the old connection is dropped, its tasks aborted); the nexus then hears I_T NEXUS LOSS.
TEST_F(IscsiConn, SessionReinstatementDropsTheOldConnection)
{
	start({}, [](InitiatorLoginConfig &ic) { ic.prefs.immediate_data = false; });
	clear_ua();
	ScsiCmd w = cmd(write10(0, 8), false, true, 4096);
	send(w);
	expect<R2t>();
	HarnessConn *old = c_;

	HarnessConn *fresh = open_conn();
	Initiator ini2(*fresh);
	std::string why;
	ASSERT_TRUE(ini2.login(Initiator::login_config(), &why)) << why;
	old->pump();
	EXPECT_TRUE(old->closed());
	EXPECT_EQ(rig_->target->stats().reinstatements, 1u);
	// Wait for the old session to be gone, so that the next command sees its loss.
	ASSERT_TRUE(old->teardown(kBound, &why)) << why;
	for (int i = 0; i < 100000 && rig_->target->stats().sessions_open != 1; i++)
		std::this_thread::sleep_for(20us);
	ASSERT_EQ(rig_->target->stats().sessions_open, 1u);

	c_ = fresh;
	ini_ = std::make_unique<Initiator>(ini2);
	Pdu p;
	send(cmd(kTur, false, false, 0));
	ScsiRsp r = expect<ScsiRsp>(&p);
	EXPECT_EQ(r.status, 0x02);
	EXPECT_EQ(sense_of(p.data).asc, 0x2907);
	send(cmd(kTur, false, false, 0));
	EXPECT_EQ(expect<ScsiRsp>().status, 0);
}

// ---- Teardown: stop, drain, wait with a bound, free ---------------------------------------------

// In the middle of a write: R2Ts outstanding, part of the data in, more output queued
// and not sent.
TEST_F(IscsiConn, TeardownInTheMiddleOfAWrite)
{
	start({}, [](InitiatorLoginConfig &ic) {
		ic.prefs.immediate_data = false;
		ic.prefs.max_outstanding_r2t = 2;
		ic.prefs.max_burst_length = 4096;
		ic.prefs.first_burst_length = 4096;
	});
	clear_ua();
	ScsiCmd w = cmd(write10(0, 64), false, true, 32768);
	send(w);
	R2t r = expect<R2t>();
	expect<R2t>();
	data_out(w.itt, r.ttt, 0, 0, pattern(2048, 5), false);
	c_->auto_flush = false;
	send(cmd(write10(100, 8), false, true, 4096)); // its R2T stays queued
	send(cmd(read10(0, 64), true, false, 32768));  // and these Data-In
	EXPECT_GT(c_->queued(), 0u);
	const auto t0 = std::chrono::steady_clock::now();
	std::string why;
	ASSERT_TRUE(c_->teardown(kBound, &why)) << why;
	EXPECT_TRUE(rig_->wait_idle(kBound, &why)) << why;
	EXPECT_LT(std::chrono::steady_clock::now() - t0, 1s);
}

// In the middle of a read: part of the Data-In sent, the rest queued.
TEST_F(IscsiConn, TeardownInTheMiddleOfARead)
{
	start({}, [](InitiatorLoginConfig &ic) { ic.prefs.max_recv_dsl = 4096; });
	clear_ua();
	c_->auto_flush = false;
	ScsiCmd h = cmd(read10(0, 128), true, false, 65536);
	send(h);
	EXPECT_EQ(c_->queued(), 16u);
	EXPECT_EQ(c_->flush(5), 5u);
	for (int i = 0; i < 5; i++)
		EXPECT_FALSE(expect<DataIn>().has_status);
	const auto t0 = std::chrono::steady_clock::now();
	std::string why;
	ASSERT_TRUE(c_->teardown(kBound, &why)) << why;
	EXPECT_TRUE(rig_->wait_idle(kBound, &why)) << why;
	EXPECT_LT(std::chrono::steady_clock::now() - t0, 1s);
}

// The target asks for a logout (Async Message event 1, 11.9.1) when it stops; dropping
// a connection (stop's deadline) in the middle of a command is bounded too.
TEST_F(IscsiConn, TargetAsksForLogoutThenDrops)
{
	start({}, [](InitiatorLoginConfig &ic) { ic.prefs.immediate_data = false; });
	clear_ua();
	c_->post(ConnEvent::Logout, {});
	c_->pump();
	AsyncMsg a = expect<AsyncMsg>();
	EXPECT_EQ(a.event, 1);
	EXPECT_GE(a.param3, 1);
	send(cmd(write10(0, 8), false, true, 4096));
	expect<R2t>();
	c_->post(ConnEvent::Drop, {});
	c_->pump();
	EXPECT_TRUE(c_->closed());
}

} // namespace
} // namespace ulp::iscsi::conn_test
