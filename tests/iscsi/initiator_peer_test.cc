// SPDX-License-Identifier: MIT
// tests/iscsi/initiator_peer_test.cc - the initiator session against a scripted target in
// memory: a fake transport (tests/iscsi/fake_target.h) logs in through the real TargetLogin
// engine, then hands every PDU the session sends to the test, which answers with PDUs built
// byte by byte. This is
// where a target that breaks the rules is played: Data-In outside the buffer or out of
// order, R2Ts the keys forbid, bad sense lengths, short reads answered GOOD, unknown ITTs,
// malformed Rejects, windows that close and reopen. Each must fail the session with a clear
// reason (and, under ASan, touch no byte it should not), or be handled as RFC 7143 says.
#include "iscsi/initiator/scsi.h"
#include "iscsi/initiator/session.h"
#include "tests/iscsi/fake_target.h"

#include <gtest/gtest.h>

#include <cstring>
#include <functional>

namespace ulp::iscsi::initiator
{

using harness::FakeTarget;
namespace
{

using namespace std::chrono_literals;

constexpr char kTarget[] = "iqn.2026-11.org.ulp:fake";

// A session logged in to a fresh FakeTarget (fake() is valid while the session lives).
struct Rig {
	FakeTarget *fake = nullptr;
	std::unique_ptr<Session> s;

	explicit Rig(OperationalPrefs target_prefs = {}, InitiatorConfig c = {},
	             uint32_t window = 8, uint32_t login_exp_skew = 0)
	{
		c.target_name = kTarget;
		c.cmd_timeout = 2s;
		c.nop_interval = 0ms;
		s = std::make_unique<Session>(c, [this, target_prefs, window, login_exp_skew] {
			auto f = std::make_unique<FakeTarget>(target_prefs);
			f->window = window;
			f->login_exp_skew = login_exp_skew;
			fake = f.get();
			return f;
		});
		EXPECT_TRUE(s->login(Portal{"fake", 3260, 0})) << s->error();
	}
	// Poll until fn() or the session ends; bounded.
	void run_until(const std::function<bool()> &fn)
	{
		for (int i = 0; i < 200 && !fn(); i++)
			if (s->poll(10ms) < 0)
				break;
	}
};

Bhs data_in(uint32_t itt, uint32_t datasn, uint32_t offset, bool status, uint8_t st = 0)
{
	DataIn h;
	h.itt = itt;
	h.datasn = datasn;
	h.buffer_offset = offset;
	h.final = status;
	h.has_status = status;
	h.status = st;
	Bhs b;
	encode(h, b);
	return b;
}

Bhs scsi_rsp(uint32_t itt, uint8_t status, uint32_t exp_datasn = 0)
{
	ScsiRsp h;
	h.itt = itt;
	h.status = status;
	h.exp_datasn = exp_datasn;
	Bhs b;
	encode(h, b);
	return b;
}

// A read of len bytes; returns its ITT.
uint32_t submit_read(Rig &r, std::vector<uint8_t> &buf, std::optional<ScsiResult> *out)
{
	static const auto cdb = cdb_read16(0, 8);
	return r.s->submit({0, cdb, DataDir::Read, buf}, [out](const ScsiResult &x) { *out = x; });
}

TEST(InitiatorPeer, ReadInTwoDataInsWithPhaseCollapse)
{
	Rig r;
	std::vector<uint8_t> buf(4096);
	std::optional<ScsiResult> res;
	r.fake->script = [](FakeTarget &f, const Pdu &p) {
		if (p.opcode() != Opcode::ScsiCmd)
			return;
		std::vector<uint8_t> d(2048, 0xab);
		f.send(data_in(p.itt(), 0, 0, false), d, true, false);
		std::fill(d.begin(), d.end(), 0xcd);
		f.send(data_in(p.itt(), 1, 2048, true), d);
	};
	submit_read(r, buf, &res);
	r.run_until([&] { return res.has_value(); });
	ASSERT_TRUE(res) << r.s->error();
	EXPECT_TRUE(res->good());
	EXPECT_EQ(res->data_in, 4096u);
	EXPECT_EQ(buf[0], 0xab);
	EXPECT_EQ(buf[4095], 0xcd);
	EXPECT_EQ(r.s->stats().collapsed, 1u);
}

// Each case: what the target answers to a 4 KiB read, and the error the session must give.
struct BadRead {
	const char *name;
	std::function<void(FakeTarget &, uint32_t itt)> answer;
	const char *error; // a substring of Session::error()
};

// gtest prints a parameter (and names its test) with this: its name.
void PrintTo(const BadRead &c, std::ostream *os)
{
	*os << c.name;
}

class InitiatorPeerBadRead : public ::testing::TestWithParam<BadRead>
{
};

TEST_P(InitiatorPeerBadRead, FailsTheSession)
{
	Rig r;
	const BadRead &c = GetParam();
	r.fake->script = [&](FakeTarget &f, const Pdu &p) {
		if (p.opcode() == Opcode::ScsiCmd)
			c.answer(f, p.itt());
	};
	std::vector<uint8_t> buf(4096);
	std::optional<ScsiResult> res;
	submit_read(r, buf, &res);
	r.run_until([&] { return res.has_value(); });
	ASSERT_TRUE(res);
	EXPECT_EQ(res->outcome, TaskOutcome::ConnectionLost);
	EXPECT_EQ(r.s->state(), SessionState::Failed);
	EXPECT_NE(r.s->error().find(c.error), std::string::npos) << r.s->error();
}

const std::vector<uint8_t> k2k(2048, 1);
const std::vector<uint8_t> k4k(4096, 1);
const std::vector<uint8_t> k8k(8192, 1);

INSTANTIATE_TEST_SUITE_P(
    Cases, InitiatorPeerBadRead,
    ::testing::Values(
        BadRead{"DataInBeyondBuffer",
                [](FakeTarget &f, uint32_t itt) { f.send(data_in(itt, 0, 0, true), k8k); },
                "beyond the read buffer"},
        BadRead{"DataInOffsetPastEnd",
                [](FakeTarget &f, uint32_t itt) {
	                f.send(data_in(itt, 0, 0, false), k2k, true, false);
	                f.send(data_in(itt, 1, 6000, true), k2k);
                },
                "offset 6000"},
        BadRead{"DataSnGap",
                [](FakeTarget &f, uint32_t itt) {
	                f.send(data_in(itt, 0, 0, false), k2k, true, false);
	                f.send(data_in(itt, 2, 2048, true), k2k);
                },
                "DataSN 2, expected 1"},
        BadRead{"StatusWithoutFinal",
                [](FakeTarget &f, uint32_t itt) {
	                Bhs b = data_in(itt, 0, 0, true);
	                b[1] &= 0x7f; // F off, S on
	                f.send(b, k4k);
                },
                "S but without F"},
        BadRead{"ShortReadAnsweredGood",
                [](FakeTarget &f, uint32_t itt) {
	                f.send(data_in(itt, 0, 0, false), k2k, true, false);
	                f.send(scsi_rsp(itt, 0, 1));
                },
                "answered GOOD with 2048 bytes"},
        BadRead{"ExpDataSnDisagrees",
                [](FakeTarget &f, uint32_t itt) {
	                f.send(data_in(itt, 0, 0, false), k4k, true, false);
	                f.send(scsi_rsp(itt, 0, 3));
                },
                "ExpDataSN 3 but 1 Data-In"},
        BadRead{"SenseLengthBeyondSegment",
                [](FakeTarget &f, uint32_t itt) {
	                std::vector<uint8_t> d{0x00, 0x40, 0x70, 0, 5}; // says 64, has 3
	                f.send(scsi_rsp(itt, 2), d);
                },
                "SenseLength 64 beyond"},
        BadRead{"OneByteDataSegment",
                [](FakeTarget &f, uint32_t itt) {
	                std::vector<uint8_t> d{0x00};
	                f.send(scsi_rsp(itt, 2), d);
                },
                "shorter than its SenseLength"},
        BadRead{"ResponseForUnknownItt",
                [](FakeTarget &f, uint32_t itt) { f.send(scsi_rsp(itt ^ 0x10000, 0)); },
                "no command of ours"},
        BadRead{"R2tForARead",
                [](FakeTarget &f, uint32_t itt) {
	                R2t h;
	                h.itt = itt;
	                h.ttt = 5;
	                h.desired_len = 512;
	                Bhs b;
	                encode(h, b);
	                f.send(b, {}, true, false);
                },
                "R2T for no write command"},
        BadRead{"ShortReject",
                [](FakeTarget &f, uint32_t) {
	                RejectPdu h;
	                Bhs b;
	                encode(h, b);
	                std::vector<uint8_t> d(20, 0);
	                f.send(b, d);
                },
                "without the rejected PDU's header"},
        BadRead{"UnknownOpcode",
                [](FakeTarget &f, uint32_t) {
	                Bhs b{};
	                b[0] = 0x3c; // vendor specific
	                f.send(b, {}, false);
                },
                "unexpected opcode 0x3c"},
        BadRead{"DroppedConnection", [](FakeTarget &f, uint32_t) { f.drop(); }, "closed"}),
    ::testing::PrintToStringParamName());

TEST(InitiatorPeer, UnderflowAndSense)
{
	Rig r;
	r.fake->script = [](FakeTarget &f, const Pdu &p) {
		if (p.opcode() != Opcode::ScsiCmd)
			return;
		// 1 KiB of 4 KiB, then CHECK CONDITION with fixed-format sense 05/24/00 and U.
		f.send(data_in(p.itt(), 0, 0, false), std::vector<uint8_t>(1024, 7), true, false);
		ScsiRsp h;
		h.itt = p.itt();
		h.status = 2;
		h.underflow = true;
		h.residual = 3072;
		h.exp_datasn = 1;
		Bhs b;
		encode(h, b);
		std::vector<uint8_t> d(2 + 18, 0);
		d[1] = 18;
		d[2] = 0x70;
		d[2 + 2] = 0x05;
		d[2 + 7] = 10;
		d[2 + 12] = 0x24;
		f.send(b, d);
	};
	std::vector<uint8_t> buf(4096);
	std::optional<ScsiResult> res;
	submit_read(r, buf, &res);
	r.run_until([&] { return res.has_value(); });
	ASSERT_TRUE(res);
	EXPECT_EQ(res->outcome, TaskOutcome::Completed);
	EXPECT_EQ(res->status, 2);
	EXPECT_TRUE(res->underflow);
	EXPECT_EQ(res->residual, 3072u);
	EXPECT_EQ(res->data_in, 1024u);
	EXPECT_EQ(describe_result(*res), "CHECK CONDITION (0x02), sense 05/24/00");
	EXPECT_EQ(r.s->state(), SessionState::FullFeature);
}

// Writes: what the session sends for R2Ts, and the R2Ts it refuses.
TEST(InitiatorPeer, WriteAnswersR2ts)
{
	OperationalPrefs tp;
	tp.initial_r2t = true;
	tp.immediate_data = false;
	tp.max_burst_length = 4096;
	tp.max_recv_dsl = 1024; // Data-Out PDUs of 1 KiB
	InitiatorConfig ic;
	ic.prefs.initial_r2t = true;
	ic.prefs.immediate_data = false;
	Rig r(tp, ic);
	std::vector<uint8_t> buf(8192);
	for (size_t i = 0; i < buf.size(); i++)
		buf[i] = static_cast<uint8_t>(i);
	std::vector<uint8_t> got(8192);
	std::vector<uint32_t> datasns;
	r.fake->script = [&](FakeTarget &f, const Pdu &p) {
		if (p.opcode() == Opcode::ScsiCmd) {
			EXPECT_TRUE(p.final()); // InitialR2T=Yes: no unsolicited data
			EXPECT_TRUE(p.data.empty());
			R2t h;
			h.itt = p.itt();
			h.ttt = 0x77;
			h.desired_len = 4096;
			Bhs b;
			encode(h, b);
			f.send(b, {}, true, false);
			return;
		}
		ASSERT_EQ(p.opcode(), Opcode::DataOut);
		DataOut d;
		decode(p.bhs, &d);
		EXPECT_LE(p.data.size(), 1024u);
		std::memcpy(got.data() + d.buffer_offset, p.data.data(), p.data.size());
		datasns.push_back(d.datasn);
		if (!d.final)
			return;
		if (d.buffer_offset + p.data.size() < 8192) {
			R2t h;
			h.itt = d.itt;
			h.ttt = 0x78;
			h.r2tsn = 1;
			h.buffer_offset = 4096;
			h.desired_len = 4096;
			Bhs b;
			encode(h, b);
			f.send(b, {}, true, false);
		} else {
			f.send(scsi_rsp(d.itt, 0, 2));
		}
	};
	const auto cdb = cdb_write16(0, 16);
	std::optional<ScsiResult> res;
	r.s->submit({0, cdb, DataDir::Write, buf}, [&](const ScsiResult &x) { res = x; });
	r.run_until([&] { return res.has_value(); });
	ASSERT_TRUE(res) << r.s->error();
	EXPECT_TRUE(res->good()) << describe_result(*res) << r.s->error();
	EXPECT_EQ(got, buf);
	EXPECT_EQ(datasns, (std::vector<uint32_t>{0, 1, 2, 3, 0, 1, 2, 3}));
	EXPECT_EQ(r.s->stats().r2ts, 2u);
}

struct BadR2t {
	const char *name;
	uint32_t r2tsn, offset, len, ttt;
	const char *error;
};

// gtest prints a parameter (and names its test) with this: its name.
void PrintTo(const BadR2t &c, std::ostream *os)
{
	*os << c.name;
}

class InitiatorPeerBadR2t : public ::testing::TestWithParam<BadR2t>
{
};

TEST_P(InitiatorPeerBadR2t, FailsTheSession)
{
	OperationalPrefs tp;
	tp.initial_r2t = true;
	tp.immediate_data = false;
	tp.max_burst_length = 4096;
	InitiatorConfig ic;
	ic.prefs.initial_r2t = true;
	ic.prefs.immediate_data = false;
	Rig r(tp, ic);
	const BadR2t &c = GetParam();
	r.fake->script = [&](FakeTarget &f, const Pdu &p) {
		if (p.opcode() != Opcode::ScsiCmd)
			return;
		R2t h;
		h.itt = p.itt();
		h.ttt = c.ttt;
		h.r2tsn = c.r2tsn;
		h.buffer_offset = c.offset;
		h.desired_len = c.len;
		Bhs b;
		encode(h, b);
		f.send(b, {}, true, false);
	};
	std::vector<uint8_t> buf(8192);
	const auto cdb = cdb_write16(0, 16);
	std::optional<ScsiResult> res;
	r.s->submit({0, cdb, DataDir::Write, buf}, [&](const ScsiResult &x) { res = x; });
	r.run_until([&] { return res.has_value(); });
	ASSERT_TRUE(res);
	EXPECT_EQ(res->outcome, TaskOutcome::ConnectionLost);
	EXPECT_NE(r.s->error().find(c.error), std::string::npos) << r.s->error();
}

INSTANTIATE_TEST_SUITE_P(
    Cases, InitiatorPeerBadR2t,
    ::testing::Values(BadR2t{"LongerThanMaxBurst", 0, 0, 8192, 1, "MaxBurstLength 4096"},
                      BadR2t{"PastTheBuffer", 0, 6144, 4096, 1, "R2T for 6144+4096"},
                      BadR2t{"ZeroLength", 0, 0, 0, 1, "R2T for 0+0"},
                      BadR2t{"R2tsnOutOfOrder", 1, 0, 4096, 1, "R2TSN 1, expected 0"},
                      BadR2t{"ReservedTtt", 0, 0, 4096, kReservedTag, "reserved Target"}),
    ::testing::PrintToStringParamName());

TEST(InitiatorPeer, TargetPingAnswered)
{
	Rig r;
	std::vector<NopOut> answers;
	r.fake->script = [&](FakeTarget &, const Pdu &p) {
		NopOut h;
		if (decode(p.bhs, &h))
			answers.push_back(h);
	};
	NopIn h;
	h.ttt = 0x1234;
	h.lun = uint64_t{3} << 48;
	Bhs b;
	encode(h, b);
	r.fake->send(b, {}, true, false);
	r.run_until([&] { return !answers.empty(); });
	ASSERT_EQ(answers.size(), 1u);
	// 11.18: ITT reserved, the TTT and LUN copied, immediate.
	EXPECT_EQ(answers[0].itt, kReservedTag);
	EXPECT_EQ(answers[0].ttt, 0x1234u);
	EXPECT_EQ(answers[0].lun, uint64_t{3} << 48);
	EXPECT_TRUE(answers[0].immediate);
	EXPECT_EQ(r.s->stats().nop_in_pings, 1u);
}

// RFC 7143 11.12.8: the first non-immediate command carries the leading login's CmdSN,
// whatever ExpCmdSN the final Login Response reports. tgt 1.0.85's iSER login reports the
// login's CmdSN + 1 and then waits for the login's CmdSN: taking ExpCmdSN left a gap and
// tgtd never ran a command (found by tests/vm/iser_lio.sh).
TEST(InitiatorPeer, FirstCommandCarriesTheLoginCmdSn)
{
	for (uint32_t skew : {0u, 1u}) {
		SCOPED_TRACE(skew);
		Rig r({}, {}, 8, skew);
		std::vector<uint32_t> cmdsns;
		r.fake->script = [&](FakeTarget &f, const Pdu &p) {
			if (p.opcode() != Opcode::ScsiCmd)
				return;
			cmdsns.push_back(get_be32(p.bhs.data() + 24));
			f.send(scsi_rsp(p.itt(), 0));
		};
		int done = 0;
		const auto tur = cdb_test_unit_ready();
		for (int i = 0; i < 2; i++)
			r.s->submit({0, tur, DataDir::None, {}},
			            [&](const ScsiResult &) { done++; });
		r.run_until([&] { return done == 2; });
		ASSERT_EQ(cmdsns.size(), 2u);
		EXPECT_EQ(cmdsns[0], r.fake->login_cmdsn);
		EXPECT_EQ(cmdsns[1], r.fake->login_cmdsn + 1);
		EXPECT_EQ(done, 2);
	}
}

TEST(InitiatorPeer, WindowHoldsCommandsUntilItOpens)
{
	InitiatorConfig ic;
	ic.window_probe = false;
	Rig r({}, ic, 2); // the login grants MaxCmdSN = ExpCmdSN + 1
	std::vector<uint32_t> cmdsns, itts;
	r.fake->script = [&](FakeTarget &, const Pdu &p) {
		if (p.opcode() == Opcode::ScsiCmd) {
			cmdsns.push_back(get_be32(p.bhs.data() + 24));
			itts.push_back(p.itt());
		}
	};
	int done = 0;
	const auto tur = cdb_test_unit_ready();
	for (int i = 0; i < 6; i++)
		r.s->submit({0, tur, DataDir::None, {}}, [&](const ScsiResult &) { done++; });
	r.s->poll(0ms);
	ASSERT_EQ(cmdsns.size(), 2u);
	EXPECT_EQ(cmdsns[1], cmdsns[0] + 1);
	EXPECT_EQ(r.s->queued(), 4u);
	// 4.2.2.1: a MaxCmdSN below ExpCmdSN - 1 is invalid; both values are ignored.
	NopIn h;
	Bhs b;
	encode(h, b);
	put_be32(b.data() + 24, r.fake->statsn);
	put_be32(b.data() + 28, r.fake->exp_cmdsn);
	put_be32(b.data() + 32, r.fake->exp_cmdsn - 5);
	r.fake->send(b, {}, false);
	r.s->poll(20ms);
	EXPECT_EQ(cmdsns.size(), 2u);
	// Answers that keep a window of 2: two more go, in CmdSN order.
	for (uint32_t itt : itts)
		r.fake->send(scsi_rsp(itt, 0));
	itts.clear();
	r.run_until([&] { return done == 2 && cmdsns.size() == 4; });
	ASSERT_EQ(cmdsns.size(), 4u);
	EXPECT_EQ(cmdsns[3], cmdsns[0] + 3);
	EXPECT_EQ(r.s->queued(), 2u);
	// Answers that close the window (MaxCmdSN = ExpCmdSN - 1): nothing more goes.
	r.fake->window = 0;
	for (uint32_t itt : itts)
		r.fake->send(scsi_rsp(itt, 0));
	itts.clear();
	r.run_until([&] { return done == 4; });
	r.s->poll(20ms);
	EXPECT_EQ(done, 4);
	EXPECT_EQ(cmdsns.size(), 4u);
	EXPECT_EQ(r.s->queued(), 2u);
	// A NOP-In reopening it lets the last two go.
	r.fake->window = 2;
	encode(h, b);
	r.fake->send(b, {}, true, false);
	r.run_until([&] { return cmdsns.size() == 6; });
	EXPECT_EQ(cmdsns.size(), 6u);
	EXPECT_EQ(r.s->queued(), 0u);
}

TEST(InitiatorPeer, ClosedWindowIsProbed)
{
	// With nothing in flight to reopen a shut window, the session asks with a NOP-Out.
	Rig r({}, {}, 1);
	int pings = 0;
	std::vector<uint32_t> itts;
	r.fake->script = [&](FakeTarget &f, const Pdu &p) {
		if (p.opcode() == Opcode::ScsiCmd) {
			itts.push_back(p.itt());
			f.window = 0; // answer with the window still shut (ulp-targetd's way)
			f.send(scsi_rsp(p.itt(), 0));
		} else if (p.opcode() == Opcode::NopOut && p.itt() != kReservedTag) {
			pings++;
			f.window = 1;
			NopIn h;
			h.itt = p.itt();
			Bhs b;
			encode(h, b);
			f.send(b);
		}
	};
	int done = 0;
	const auto tur = cdb_test_unit_ready();
	for (int i = 0; i < 3; i++)
		r.s->submit({0, tur, DataDir::None, {}}, [&](const ScsiResult &) { done++; });
	r.run_until([&] { return done == 3; });
	EXPECT_EQ(done, 3) << r.s->error();
	EXPECT_EQ(pings, 2);
}

} // namespace
} // namespace ulp::iscsi::initiator
