// SPDX-License-Identifier: MIT
// tests/iscsi/conn_test.cc - the target's connection layer (iscsi/target/conn.cc,
// iscsi/target/target.cc) in one process: a real Conn behind a real Target with the SCSI
// core and a RAM LU (tests/iscsi/conn_harness.h), PDUs built with the iscsi/pdu.h encoders,
// logins by InitiatorLogin. What libiscsi's conformance suite does not reach, the data side
// (conn_control_test.cc has the control side): responses, the CmdSN window, every
// InitialR2T / ImmediateData combination, several R2Ts per command, bursts and Data-In
// splitting, digests and digest errors, rejects. Every test ends with the connection torn
// down, bounded, and nothing left in the target or the core (the fixture is in
// conn_test_env.h).
#include "tests/iscsi/conn_test_env.h"

namespace ulp::iscsi::conn_test
{
namespace
{

// ---- Responses --------------------------------------------------------------------------------

// 11.4.7: CHECK CONDITION carries SenseLength and the sense data; StatSN advances by one
// per response, ExpCmdSN by one per command; MaxCmdSN = ExpCmdSN + free slots - 1, and the
// response that carries a command's status already reports that command's slot free
// (11.19: the window is never left shut with no PDU coming to reopen it).
TEST_F(IscsiConn, ScsiResponseCarriesSense)
{
	start();
	const uint32_t statsn = ini_->exp_statsn;
	ScsiCmd h = cmd(kTur, false, false, 0);
	send(h);
	Pdu p;
	ScsiRsp r = expect<ScsiRsp>(&p);
	EXPECT_EQ(r.itt, h.itt);
	EXPECT_EQ(r.response, 0);
	EXPECT_EQ(r.status, 0x02);
	EXPECT_EQ(r.statsn, statsn);
	EXPECT_EQ(r.exp_cmdsn, 101u);
	EXPECT_EQ(r.max_cmdsn, 101u + 32 - 1);
	ASSERT_GE(p.data.size(), 2u);
	EXPECT_EQ(get_be16(p.data.data()), p.data.size() - 2);
	EXPECT_EQ(sense_of(p.data).key, 0x6); // UNIT ATTENTION
	EXPECT_EQ(sense_of(p.data).asc, 0x2900);

	// A READ past the end: ILLEGAL REQUEST, LBA OUT OF RANGE, no Data-In before it.
	h = cmd(read10(1u << 20, 1), true, false, 512);
	send(h);
	r = expect<ScsiRsp>(&p);
	EXPECT_EQ(r.itt, h.itt);
	EXPECT_EQ(r.status, 0x02);
	EXPECT_EQ(r.statsn, statsn + 1);
	EXPECT_EQ(sense_of(p.data).key, 0x5);
	EXPECT_EQ(sense_of(p.data).asc, 0x2100);
	expect_nothing();
}

TEST_F(IscsiConn, WriteThenReadBack)
{
	start({}, [](InitiatorLoginConfig &ic) { ic.prefs.initial_r2t = false; });
	EXPECT_FALSE(ini_->sess.initial_r2t);
	EXPECT_TRUE(ini_->sess.immediate_data);
	clear_ua();
	const auto data = pattern(4096, 1);
	ScsiCmd h = cmd(write10(16, 8), false, true, 4096);
	send(h, data); // all of it immediate (ImmediateData=Yes, F=1)
	ScsiRsp r = expect<ScsiRsp>();
	EXPECT_EQ(r.itt, h.itt);
	EXPECT_EQ(r.status, 0);
	EXPECT_EQ(r.exp_datasn, 0u);
	EXPECT_EQ(read_back(16, 8), data);
}

// ---- The CmdSN window (RFC 7143 3.2.2.1)
// ---------------------------------------------------------

TEST_F(IscsiConn, CommandsOutsideTheWindowAreIgnored)
{
	start([](TargetConfig &tc) { tc.cmd_window = 4; });
	NopIn n = ping();
	EXPECT_EQ(n.exp_cmdsn, 100u);
	EXPECT_EQ(n.max_cmdsn, 103u);

	ScsiCmd beyond = cmd(kTur, false, false, 0);
	beyond.cmdsn = 104; // MaxCmdSN + 1
	send(beyond);
	ScsiCmd old = cmd(kTur, false, false, 0);
	old.cmdsn = 99; // below ExpCmdSN: a duplicate
	send(old);
	expect_nothing();
	n = ping();
	EXPECT_EQ(n.exp_cmdsn, 100u);
	EXPECT_EQ(n.max_cmdsn, 103u);

	ini_->cmdsn = 100;
	ScsiCmd h = cmd(kTur, false, false, 0);
	send(h);
	ScsiRsp r = expect<ScsiRsp>();
	EXPECT_EQ(r.itt, h.itt);
	EXPECT_EQ(r.exp_cmdsn, 101u);
	EXPECT_EQ(r.max_cmdsn, 104u); // the response reports its own slot free
	n = ping();
	EXPECT_EQ(n.exp_cmdsn, 101u);
	EXPECT_EQ(n.max_cmdsn, 104u);
	expect_nothing();
}

TEST_F(IscsiConn, CommandAheadOfExpCmdSnWaitsForTheGap)
{
	start();
	ScsiCmd first = cmd(kTur, false, false, 0);           // CmdSN 100, sent last
	ScsiCmd second = cmd(read10(0, 1), true, false, 512); // CmdSN 101
	send(second);
	expect_nothing();
	NopIn n = ping();
	EXPECT_EQ(n.exp_cmdsn, 100u);
	send(first);
	// Delivered in CmdSN order: the first takes the UNIT ATTENTION.
	ScsiRsp r = expect<ScsiRsp>();
	EXPECT_EQ(r.itt, first.itt);
	EXPECT_EQ(r.status, 0x02);
	DataIn d = expect<DataIn>();
	EXPECT_EQ(d.itt, second.itt);
	EXPECT_TRUE(d.has_status);
	EXPECT_EQ(d.status, 0);
	EXPECT_EQ(d.exp_cmdsn, 102u);
	expect_nothing();
}

// 3.2.2.1: "The target MUST silently ignore any non-immediate command outside of this
// range or non-immediate duplicates within the range": a second command with the CmdSN of
// one that waits must not take a slot, nor stop the commands after it.
TEST_F(IscsiConn, DuplicateOfAWaitingCommandIsIgnored)
{
	start([](TargetConfig &tc) { tc.cmd_window = 4; });
	ScsiCmd gap = cmd(kTur, false, false, 0);   // 100, sent last
	ScsiCmd first = cmd(kTur, false, false, 0); // 101
	ScsiCmd dup = first;
	dup.itt = ini_->new_itt();
	send(first);
	send(dup);
	ScsiCmd ahead = cmd(kTur, false, false, 0); // 102
	send(ahead);
	expect_nothing();
	send(gap);
	EXPECT_EQ(expect<ScsiRsp>().itt, gap.itt);
	EXPECT_EQ(expect<ScsiRsp>().itt, first.itt);
	EXPECT_EQ(expect<ScsiRsp>().itt, ahead.itt);
	expect_nothing();
	NopIn n = ping();
	EXPECT_EQ(n.exp_cmdsn, 103u);
	EXPECT_EQ(n.max_cmdsn, 106u); // every slot back
	ScsiCmd last = cmd(kTur, false, false, 0);
	send(last);
	EXPECT_EQ(expect<ScsiRsp>().itt, last.itt);
}

// Commands waiting for an earlier CmdSN must not shrink the window they were sent in: the
// initiator ignores a lower MaxCmdSN (3.2.2.1) and may use every CmdSN it was granted.
TEST_F(IscsiConn, WindowStaysOpenWhileCommandsWait)
{
	start([](TargetConfig &tc) { tc.cmd_window = 4; });
	ScsiCmd gap = cmd(kTur, false, false, 0); // CmdSN 100, sent last
	std::vector<ScsiCmd> ahead;
	for (int i = 0; i < 3; i++) {
		ahead.push_back(cmd(kTur, false, false, 0)); // 101, 102, 103
		send(ahead.back());
	}
	expect_nothing();
	NopIn n = ping();
	EXPECT_EQ(n.exp_cmdsn, 100u);
	EXPECT_EQ(n.max_cmdsn, 103u);
	send(gap);
	EXPECT_EQ(expect<ScsiRsp>().itt, gap.itt);
	for (const ScsiCmd &h : ahead) {
		ScsiRsp r = expect<ScsiRsp>();
		EXPECT_EQ(r.itt, h.itt);
		EXPECT_EQ(r.status, 0);
	}
	n = ping();
	EXPECT_EQ(n.exp_cmdsn, 104u);
	EXPECT_EQ(n.max_cmdsn, 107u);
}

// Immediate commands are delivered at once, take no CmdSN slot and have a few slots of
// their own; one beyond those is rejected (11.17.1, reason 6).
TEST_F(IscsiConn, ImmediateCommandsUseTheirOwnSlots)
{
	start([](TargetConfig &tc) { tc.cmd_window = 2; },
	      [](InitiatorLoginConfig &ic) { ic.prefs.immediate_data = false; });
	clear_ua(); // CmdSN 100
	// Two writes waiting for data fill the window: MaxCmdSN = ExpCmdSN - 1.
	ScsiCmd a = cmd(write10(0, 1), false, true, 512);
	send(a);
	R2t ra = expect<R2t>();
	ScsiCmd b = cmd(write10(1, 1), false, true, 512);
	send(b);
	R2t rb = expect<R2t>();
	EXPECT_EQ(rb.exp_cmdsn, 103u);
	EXPECT_EQ(rb.max_cmdsn, 102u);

	// A non-immediate command now is outside the window: ignored.
	ScsiCmd over = cmd(kTur, false, false, 0);
	send(over);
	expect_nothing();
	ini_->cmdsn--;

	// Immediate writes, each waiting for its data, until the immediate slots are gone.
	std::vector<std::pair<ScsiCmd, R2t>> imm;
	for (;;) {
		ScsiCmd h = cmd(write10(8 + uint32_t(imm.size()), 1), false, true, 512, true);
		send(h);
		Pdu p;
		const SentPdu *s = ini_->next();
		ASSERT_NE(s, nullptr);
		ASSERT_TRUE(s->parse(&p));
		RejectPdu rj;
		if (decode(p.bhs, &rj)) {
			EXPECT_EQ(rj.reason, RejectReason::ImmCmdReject);
			EXPECT_EQ(get_be32(p.data.data() + 16), h.itt); // the rejected header
			break;
		}
		R2t r;
		ASSERT_TRUE(decode(p.bhs, &r));
		EXPECT_EQ(r.max_cmdsn, 102u) << "immediate commands must not move the window";
		imm.emplace_back(h, r);
		ASSERT_LE(imm.size(), 64u);
	}
	EXPECT_EQ(imm.size(), 16u);

	// Data for one immediate write: it completes, its slot takes the next one.
	const auto d = pattern(512, 3);
	data_out(imm[0].first.itt, imm[0].second.ttt, 0, 0, d, true);
	EXPECT_EQ(expect<ScsiRsp>().status, 0);
	ScsiCmd t = cmd(kTur, false, false, 0, true);
	send(t);
	EXPECT_EQ(expect<ScsiRsp>().itt, t.itt);

	// Data for b: its response reports its slot free, the window opens by one.
	data_out(b.itt, rb.ttt, 0, 0, d, true);
	ScsiRsp r = expect<ScsiRsp>();
	EXPECT_EQ(r.itt, b.itt);
	EXPECT_EQ(r.max_cmdsn, 103u);
	NopIn n = ping();
	EXPECT_EQ(n.exp_cmdsn, 103u);
	EXPECT_EQ(n.max_cmdsn, 103u);
	(void)ra;
}

// ---- Write data: InitialR2T and ImmediateData (13.10, 13.11), R2Ts (11.8) ----------------------

TEST_F(IscsiConn, InitialR2tYesImmediateDataNo)
{
	start({}, [](InitiatorLoginConfig &ic) {
		ic.prefs.initial_r2t = true;
		ic.prefs.immediate_data = false;
	});
	EXPECT_TRUE(ini_->sess.initial_r2t);
	EXPECT_FALSE(ini_->sess.immediate_data);
	clear_ua();
	const auto data = pattern(4096, 7);
	ScsiCmd h = cmd(write10(0, 8), false, true, 4096);
	send(h);
	R2t r = expect<R2t>();
	EXPECT_EQ(r.itt, h.itt);
	EXPECT_EQ(r.r2tsn, 0u);
	EXPECT_EQ(r.buffer_offset, 0u);
	EXPECT_EQ(r.desired_len, 4096u);
	EXPECT_NE(r.ttt, kReservedTag);
	EXPECT_EQ(r.statsn, ini_->exp_statsn + 1) << "an R2T does not advance StatSN";
	data_out(h.itt, r.ttt, 0, 0, data, true);
	ScsiRsp rsp = expect<ScsiRsp>();
	EXPECT_EQ(rsp.status, 0);
	EXPECT_EQ(rsp.exp_datasn, 1u); // 11.4.8: the R2Ts sent
	EXPECT_EQ(rsp.statsn, r.statsn);

	// Immediate data with ImmediateData=No: rejected (the Reject quotes the header), and
	// its CmdSN used all the same.
	ScsiCmd bad = cmd(write10(8, 1), false, true, 512);
	Bhs b;
	encode(bad, b);
	const auto w = ini_->wire(b, pattern(512, 1));
	c_->feed(w);
	c_->pump();
	Pdu p;
	RejectPdu rj = expect<RejectPdu>(&p);
	EXPECT_EQ(rj.reason, RejectReason::InvalidPduField);
	ASSERT_EQ(p.data.size(), kBhsLen);
	EXPECT_TRUE(std::equal(p.data.begin(), p.data.end(), w.begin()));
	EXPECT_EQ(read_back(0, 8), data);
}

TEST_F(IscsiConn, InitialR2tYesImmediateDataYes)
{
	start(); // the initiator's defaults: InitialR2T=Yes, ImmediateData=Yes
	EXPECT_TRUE(ini_->sess.initial_r2t);
	EXPECT_TRUE(ini_->sess.immediate_data);
	clear_ua();
	const auto data = pattern(4096, 9);
	ScsiCmd h = cmd(write10(0, 8), false, true, 4096);
	send(h, std::span(data).first(1024));
	R2t r = expect<R2t>();
	EXPECT_EQ(r.buffer_offset, 1024u); // what the immediate data did not cover
	EXPECT_EQ(r.desired_len, 3072u);
	data_out(h.itt, r.ttt, 1024, 0, std::span(data).subspan(1024), true);
	EXPECT_EQ(expect<ScsiRsp>().status, 0);
	EXPECT_EQ(read_back(0, 8), data);

	// F=0 (unsolicited Data-Out to follow) with InitialR2T=Yes: rejected.
	ScsiCmd bad = cmd(write10(8, 8), false, true, 4096);
	bad.final = false;
	send(bad, std::span(data).first(512));
	EXPECT_EQ(expect<RejectPdu>().reason, RejectReason::InvalidPduField);
	expect_nothing();
}

TEST_F(IscsiConn, InitialR2tNoImmediateDataYes)
{
	start({}, [](InitiatorLoginConfig &ic) {
		ic.prefs.initial_r2t = false;
		ic.prefs.first_burst_length = 8192;
	});
	EXPECT_EQ(ini_->sess.first_burst_length, 8192u);
	clear_ua();
	const auto data = pattern(16384, 11);
	ScsiCmd h = cmd(write10(0, 32), false, true, 16384);
	h.final = false;
	send(h, std::span(data).first(4096));
	expect_nothing();
	// The rest of the first burst unsolicited (TTT reserved), F at its end.
	data_out(h.itt, kReservedTag, 4096, 0, std::span(data).subspan(4096, 4096), true);
	R2t r = expect<R2t>();
	EXPECT_EQ(r.buffer_offset, 8192u);
	EXPECT_EQ(r.desired_len, 8192u);
	data_out(h.itt, r.ttt, 8192, 0, std::span(data).subspan(8192, 8192), true);
	EXPECT_EQ(expect<ScsiRsp>().status, 0);
	EXPECT_EQ(read_back(0, 32), data);
}

TEST_F(IscsiConn, InitialR2tNoImmediateDataNo)
{
	start({}, [](InitiatorLoginConfig &ic) {
		ic.prefs.initial_r2t = false;
		ic.prefs.immediate_data = false;
		ic.prefs.first_burst_length = 8192;
	});
	clear_ua();
	const auto data = pattern(12288, 13);
	ScsiCmd h = cmd(write10(0, 24), false, true, 12288);
	h.final = false;
	send(h);
	expect_nothing();
	data_out(h.itt, kReservedTag, 0, 0, std::span(data).first(4096), false);
	data_out(h.itt, kReservedTag, 4096, 1, std::span(data).subspan(4096, 4096), true);
	R2t r = expect<R2t>();
	EXPECT_EQ(r.buffer_offset, 8192u);
	EXPECT_EQ(r.desired_len, 4096u);
	data_out(h.itt, r.ttt, 8192, 0, std::span(data).subspan(8192), true);
	EXPECT_EQ(expect<ScsiRsp>().status, 0);
	EXPECT_EQ(read_back(0, 24), data);
}

// Found by fuzz_iscsi_conn (fuzz/corpus/iscsi_conn/crash-data-out-edtl0): a write with
// EDTL 0 has no buffer, and an empty unsolicited Data-Out for it copied 0 bytes to a null
// pointer (undefined behaviour: UBSan stops here in the sanitizer build).
TEST_F(IscsiConn, EmptyDataOutForAWriteWithoutData)
{
	start({}, [](InitiatorLoginConfig &ic) { ic.prefs.initial_r2t = false; });
	clear_ua();
	ScsiCmd h = cmd(kTur, false, true, 0);
	h.final = false; // unsolicited Data-Out to follow
	send(h);
	expect_nothing(); // the status waits for the F bit (11.7.2)
	data_out(h.itt, kReservedTag, 0, 0, {}, true);
	ScsiRsp r = expect<ScsiRsp>();
	EXPECT_EQ(r.itt, h.itt);
	EXPECT_EQ(r.status, 0);
}

// MaxOutstandingR2T=4 and MaxBurstLength smaller than the write: four R2Ts at once, each a
// burst, a new one as each completes; Data-Out PDUs smaller than a burst, DataSN per R2T.
TEST_F(IscsiConn, SeveralR2tsPerCommand)
{
	start({}, [](InitiatorLoginConfig &ic) {
		ic.prefs.immediate_data = false;
		ic.prefs.max_outstanding_r2t = 4;
		ic.prefs.max_burst_length = 4096;
		ic.prefs.first_burst_length = 4096;
	});
	EXPECT_EQ(ini_->sess.max_outstanding_r2t, 4u);
	EXPECT_EQ(ini_->sess.max_burst_length, 4096u);
	clear_ua();
	const auto data = pattern(32768, 17);
	ScsiCmd h = cmd(write10(0, 64), false, true, 32768);
	send(h);
	std::vector<R2t> out;
	for (int i = 0; i < 4; i++)
		out.push_back(expect<R2t>());
	expect_nothing();
	uint32_t next_sn = 0, next_off = 0;
	std::vector<uint32_t> ttts;
	for (const R2t &r : out) {
		EXPECT_EQ(r.r2tsn, next_sn++);
		EXPECT_EQ(r.buffer_offset, next_off);
		EXPECT_EQ(r.desired_len, 4096u);
		next_off += 4096;
		ttts.push_back(r.ttt);
	}
	int total = 4;
	while (!out.empty()) {
		const R2t r = out.front();
		out.erase(out.begin());
		for (uint32_t off = 0, sn = 0; off < r.desired_len; off += 1024, sn++)
			data_out(h.itt, r.ttt, r.buffer_offset + off, sn,
			         std::span(data).subspan(r.buffer_offset + off, 1024),
			         off + 1024 == r.desired_len);
		if (ini_->unread() == 0)
			continue;
		Pdu p;
		const SentPdu *s = ini_->next();
		ASSERT_TRUE(s->parse(&p));
		R2t more;
		if (decode(p.bhs, &more)) {
			EXPECT_EQ(more.r2tsn, next_sn++);
			EXPECT_EQ(more.buffer_offset, next_off);
			next_off += more.desired_len;
			EXPECT_EQ(std::count(ttts.begin(), ttts.end(), more.ttt), 0);
			ttts.push_back(more.ttt);
			out.push_back(more);
			total++;
			EXPECT_LE(out.size(), 4u);
			continue;
		}
		ScsiRsp rsp;
		ASSERT_TRUE(decode(p.bhs, &rsp));
		EXPECT_EQ(rsp.status, 0);
		EXPECT_EQ(rsp.exp_datasn, 8u);
		EXPECT_TRUE(out.empty());
	}
	EXPECT_EQ(total, 8);
	EXPECT_EQ(read_back(0, 64), data);
}

// ---- Read data (11.7)
// -------------------------------------------------------------------------------

// Data-In PDUs of the initiator's MaxRecvDataSegmentLength, F at the end of every
// MaxBurstLength, the status in the last one (phase collapse: no SCSI Response), StatSN
// only there.
TEST_F(IscsiConn, DataInSplitAtMrdslWithFAtEachBurst)
{
	start({}, [](InitiatorLoginConfig &ic) {
		ic.prefs.max_recv_dsl = 1024;
		ic.prefs.max_burst_length = 4096;
		ic.prefs.first_burst_length = 4096;
	});
	EXPECT_EQ(ini_->conn.initiator_recv_dsl, 1024u);
	clear_ua();
	const auto data = pattern(8192, 19);
	ScsiCmd w = cmd(write10(40, 16), false, true, 8192);
	send(w, std::span(data).first(4096)); // FirstBurstLength 65536, but the burst is 4096
	R2t r = expect<R2t>();
	data_out(w.itt, r.ttt, 4096, 0, std::span(data).subspan(4096), true);
	EXPECT_EQ(expect<ScsiRsp>().status, 0);

	const uint32_t statsn = ini_->exp_statsn + 2;
	ScsiCmd h = cmd(read10(40, 16), true, false, 8192);
	send(h);
	std::vector<uint8_t> got;
	for (uint32_t i = 0; i < 8; i++) {
		Pdu p;
		DataIn d = expect<DataIn>(&p);
		EXPECT_EQ(d.itt, h.itt);
		EXPECT_EQ(d.datasn, i);
		EXPECT_EQ(d.buffer_offset, i * 1024);
		EXPECT_EQ(p.data.size(), 1024u);
		EXPECT_EQ(d.final, i == 3 || i == 7) << "PDU " << i;
		EXPECT_EQ(d.has_status, i == 7) << "PDU " << i;
		EXPECT_EQ(d.statsn, i == 7 ? statsn : 0u) << "PDU " << i;
		EXPECT_EQ(d.exp_cmdsn, 103u);
		got.insert(got.end(), p.data.begin(), p.data.end());
	}
	EXPECT_EQ(got, data);
	expect_nothing();

	// An expected length above the CDB's: underflow in the last Data-In (11.7.5).
	ScsiCmd u = cmd(read10(40, 4), true, false, 4096);
	send(u);
	DataIn d = expect<DataIn>();
	EXPECT_FALSE(d.has_status);
	d = expect<DataIn>();
	EXPECT_TRUE(d.has_status);
	EXPECT_TRUE(d.underflow);
	EXPECT_EQ(d.residual, 2048u);
	expect_nothing();
}

// ---- Digests (13.1, 7.8)
// ----------------------------------------------------------------------------

TEST_F(IscsiConn, HeaderAndDataDigests)
{
	start({}, [](InitiatorLoginConfig &ic) {
		ic.prefs.header_digests = {Digest::Crc32c};
		ic.prefs.data_digests = {Digest::Crc32c};
	});
	EXPECT_TRUE(c_->digests().header);
	EXPECT_TRUE(c_->digests().data);
	clear_ua(); // its response parses only with both digests right
	const auto data = pattern(3072, 23);
	ScsiCmd h = cmd(write10(0, 6), false, true, 3072);
	send(h, data);
	EXPECT_EQ(expect<ScsiRsp>().status, 0);
	EXPECT_EQ(read_back(0, 6), data);
	// Padding before the data digest: a ping of 5 bytes.
	NopOut e;
	e.itt = 76;
	const auto five = pattern(5, 1);
	send(e, five);
	Pdu p;
	expect<NopIn>(&p);
	EXPECT_TRUE(std::equal(p.data.begin(), p.data.end(), five.begin(), five.end()));
	for (const SentPdu &s : c_->sent) {
		if (s.opcode() != Opcode::LoginRsp) {
			EXPECT_TRUE(s.digests.header && s.digests.data);
		}
	}

	// A header digest error: the stream cannot be trusted any more; the connection goes.
	NopOut n;
	n.itt = 77;
	Bhs b;
	encode(n, b);
	auto w = ini_->wire(b);
	w[kBhsLen] ^= 0x40;
	c_->feed(w);
	c_->pump();
	EXPECT_TRUE(c_->closed());
}

// 7.8: a data digest error is answered with a Reject (Data-Digest-Error) and at ERL 0
// ends only the task it belongs to, with CHECK CONDITION; a command whose immediate data
// was hit is still received (its CmdSN used), so the commands after it run.
TEST_F(IscsiConn, DataDigestErrorFailsOnlyThatCommand)
{
	start({}, [](InitiatorLoginConfig &ic) {
		ic.prefs.header_digests = {Digest::Crc32c};
		ic.prefs.data_digests = {Digest::Crc32c};
	});
	clear_ua();
	const auto data = pattern(4096, 29);
	auto corrupt = [&](const ScsiCmd &h, std::span<const uint8_t> d) {
		Bhs b;
		encode(h, b);
		auto w = ini_->wire(b, d);
		w.back() ^= 1; // the data digest
		c_->feed(w);
		c_->pump();
	};
	auto corrupt_out = [&](const DataOut &h, std::span<const uint8_t> d) {
		Bhs b;
		encode(h, b);
		auto w = ini_->wire(b, d);
		w[w.size() - 5] ^= 1; // a data byte
		c_->feed(w);
		c_->pump();
	};

	// Immediate data hit.
	ScsiCmd a = cmd(write10(0, 8), false, true, 4096);
	corrupt(a, data);
	Pdu p;
	RejectPdu rj = expect<RejectPdu>(&p);
	EXPECT_EQ(rj.reason, RejectReason::DataDigestError);
	EXPECT_EQ(get_be32(p.data.data() + 16), a.itt);
	ScsiRsp r = expect<ScsiRsp>(&p);
	EXPECT_EQ(r.itt, a.itt);
	EXPECT_EQ(r.status, 0x02);
	EXPECT_EQ(sense_of(p.data).key, 0xb); // ABORTED COMMAND

	// Solicited Data-Out hit.
	ScsiCmd b = cmd(write10(8, 8), false, true, 4096);
	send(b);
	R2t r2t = expect<R2t>();
	DataOut d;
	d.itt = b.itt;
	d.ttt = r2t.ttt;
	d.final = true;
	corrupt_out(d, data);
	EXPECT_EQ(expect<RejectPdu>().reason, RejectReason::DataDigestError);
	r = expect<ScsiRsp>(&p);
	EXPECT_EQ(r.itt, b.itt);
	EXPECT_EQ(r.status, 0x02);
	EXPECT_EQ(sense_of(p.data).key, 0xb);

	// The session goes on.
	ScsiCmd c = cmd(write10(16, 8), false, true, 4096);
	send(c, data);
	r = expect<ScsiRsp>();
	EXPECT_EQ(r.itt, c.itt);
	EXPECT_EQ(r.status, 0);
	EXPECT_EQ(r.exp_cmdsn, 104u);
	EXPECT_EQ(read_back(16, 8), data);
}

// ---- Rejects (11.17)
// ----------------------------------------------------------------------------------

TEST_F(IscsiConn, DataOutForUnknownTaskIsRejected)
{
	start();
	DataOut d;
	d.itt = 0x5555;
	d.final = true;
	const auto data = pattern(512, 1);
	send(d, data);
	Pdu p;
	RejectPdu rj = expect<RejectPdu>(&p);
	EXPECT_EQ(rj.reason, RejectReason::InvalidPduField);
	ASSERT_EQ(p.data.size(), kBhsLen);
	EXPECT_EQ(bhs_opcode(p.data.data()), Opcode::DataOut);
	EXPECT_EQ(get_be32(p.data.data() + 16), 0x5555u);
	EXPECT_EQ(get_be32(p.bhs.data() + 16), kReservedTag);

	// SNACK needs ERL > 0; a Login Request has no place in full feature phase.
	SnackReq s;
	s.itt = 1;
	send(s);
	EXPECT_EQ(expect<RejectPdu>().reason, RejectReason::SnackReject);
	LoginReq l;
	send(l);
	EXPECT_EQ(expect<RejectPdu>().reason, RejectReason::ProtocolError);
	ping();
}

} // namespace
} // namespace ulp::iscsi::conn_test
