// SPDX-License-Identifier: MIT
// tests/srp/target_test.cc - the SRP target (srp/target/) against a raw initiator on the soft
// provider: every IU the test sends is built here byte by byte (tests/srp/srp_peer.h), so
// that what Linux's ib_srp sends, and what no initiator should send, can both be tried.
//
// What is checked: the login's answer (SRP_LOGIN_RSP's fields; SRP_LOGIN_REJ and its reason
// for each refusal, SRP r16a 6.2 and 6.4); data written and read back through every
// descriptor format (direct, indirect in the IU, indirect with the table fetched by RDMA
// READ, immediate data) on receive rings and on an SRQ; a bad table and a malformed
// SRP_CMD answered CHECK CONDITION with the channel still serving; IUs that cannot be
// answered (too short, unknown) closing the channel; credits (SRP r16a 5.5: every request
// answered with its credit back, aborted ones by SRP_CRED_REQ, an overrun counted; on an
// SRQ each channel's credits its share of the receives);
// multichannel and the SINGLE takeover (6.3); SRP_I_LOGOUT; a stop with channels open.
#include "tests/srp/target_env.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <set>
#include <thread>

namespace ulp::srpt::test
{
namespace
{

// ---- Login -------------------------------------------------------------------------------

TEST(SrpTargetLogin, RspCarriesCreditsSizesAndFormats)
{
	SrpTarget t;
	ASSERT_TRUE(t.start());
	SrpPeer p(*t.dev);
	srp::LoginRsp rsp;
	auto req = t.login_req();
	ASSERT_EQ(p.login(t.addr(), req, &rsp), 0);
	EXPECT_EQ(rsp.tag, req.tag);
	EXPECT_EQ(rsp.req_lim_delta, 16u); // rq_size: the receives posted for it
	EXPECT_EQ(rsp.max_it_iu_len, 8260u);
	// The largest IU we send: an SRP_RSP with sense; it must fit Linux's receive buffers.
	EXPECT_GE(rsp.max_ti_iu_len, srp::kRspLen + 18);
	EXPECT_LE(rsp.max_ti_iu_len, 512u);
	EXPECT_EQ(rsp.buf_fmt, srp::BUF_FMT_DIRECT | srp::BUF_FMT_INDIRECT);
	EXPECT_EQ(rsp.rsp_flags, srp::LOGIN_RSP_NO_CHAN | srp::LOGIN_RSP_IMMED_SUPP);
	EXPECT_EQ(t.target->stats().logins, 1u);
	EXPECT_EQ(t.target->stats().channels_open, 1u);
	EXPECT_EQ(t.target->stats().nexuses_open, 1u);
	// The add_target line a Linux initiator needs was logged, with our identifiers.
	char ids[64];
	std::snprintf(ids, sizeof(ids), "id_ext=%016llx", (unsigned long long)t.target->id_ext());
	EXPECT_TRUE(t.capture.contains(ids)) << t.capture.text();
	EXPECT_TRUE(t.capture.contains("dest=127.0.0.1:" + std::to_string(t.portal->port())))
	    << t.capture.text();
}

TEST(SrpTargetLogin, NoImmediateDataWhenNotAskedOrOffsetTooSmall)
{
	SrpTarget t;
	ASSERT_TRUE(t.start());
	{
		SrpPeer p(*t.dev);
		auto req = t.login_req(1);
		req.req_flags = srp::MULTICHAN_SINGLE; // not requested
		srp::LoginRsp rsp;
		ASSERT_EQ(p.login(t.addr(), req, &rsp), 0);
		EXPECT_FALSE(rsp.rsp_flags & srp::LOGIN_RSP_IMMED_SUPP);
	}
	{
		SrpPeer p(*t.dev);
		auto req = t.login_req(2);
		req.imm_data_offset = 40; // inside SRP_CMD's fixed part (SRP-2: at least 48)
		srp::LoginRsp rsp;
		ASSERT_EQ(p.login(t.addr(), req, &rsp), 0);
		EXPECT_FALSE(rsp.rsp_flags & srp::LOGIN_RSP_IMMED_SUPP);
	}
}

// One refusal: the reason in the SRP_LOGIN_REJ, and the tag and formats it echoes.
void expect_rej(SrpTarget &t, const srp::LoginReq &req, uint32_t reason,
                std::span<const uint8_t> raw = {})
{
	SrpPeer p(*t.dev);
	srp::LoginRsp rsp;
	srp::LoginRej rej;
	ASSERT_EQ(p.login(t.addr(), req, &rsp, &rej, raw), -ECONNREFUSED);
	EXPECT_EQ(rej.reason, reason) << srp::rej_reason_name(rej.reason);
	if (raw.empty()) {
		EXPECT_EQ(rej.tag, req.tag);
	}
}

TEST(SrpTargetLogin, RejectsWithTheReason)
{
	SrpTarget t;
	ASSERT_TRUE(t.start());
	uint64_t rejects = 0;

	// Private data too short to be a login.
	std::vector<uint8_t> shortpd(20, 0);
	expect_rej(t, t.login_req(), srp::REJ_UNABLE_ESTABLISH_CHANNEL, shortpd);
	EXPECT_EQ(t.target->stats().login_rejects, ++rejects);

	// Another target port.
	auto r = t.login_req();
	r.target_port_id = srp::make_port_id(t.target->id_ext() + 1, t.target->ioc_guid());
	expect_rej(t, r, srp::REJ_UNABLE_ASSOCIATE_CHANNEL);
	r = t.login_req();
	r.target_port_id = srp::make_port_id(t.target->id_ext(), t.target->ioc_guid() ^ 1);
	expect_rej(t, r, srp::REJ_UNABLE_ASSOCIATE_CHANNEL);

	// it_iu_len below the smallest SRP_CMD, and above our receive buffers.
	r = t.login_req();
	r.req_it_iu_len = 32;
	expect_rej(t, r, srp::REJ_IT_IU_LEN_TOO_LARGE);
	r.req_it_iu_len = t.target->cfg().max_it_iu_len + 1;
	expect_rej(t, r, srp::REJ_IT_IU_LEN_TOO_LARGE);

	// Neither descriptor format.
	r = t.login_req();
	r.req_buf_fmt = 0;
	expect_rej(t, r, srp::REJ_UNSUPPORTED_DESC_FMT);

	EXPECT_EQ(t.target->stats().login_rejects, rejects + 5);
	EXPECT_EQ(t.target->stats().logins, 0u);
	EXPECT_TRUE(t.wait_idle());
}

TEST(SrpTargetLogin, AclsByPortIdOrSourceAddress)
{
	const auto allowed = srp::make_port_id(7, 0x0002c90300a0b0c0ull);
	{
		SrpTarget t;
		ASSERT_TRUE(t.start(SrpTarget::small_cfg(), {port_id_str(allowed)}));
		expect_rej(t, t.login_req(6), srp::REJ_UNABLE_ESTABLISH_CHANNEL);
		SrpPeer p(*t.dev);
		srp::LoginRsp rsp;
		EXPECT_EQ(p.login(t.addr(), t.login_req(7), &rsp), 0);
		EXPECT_TRUE(t.capture.contains("not allowed by the ACLs")) << t.capture.text();
	}
	{
		SrpTarget t;
		ASSERT_TRUE(t.start(SrpTarget::small_cfg(), {"127.0.0.1"}));
		SrpPeer p(*t.dev);
		srp::LoginRsp rsp;
		EXPECT_EQ(p.login(t.addr(), t.login_req(6), &rsp), 0);
	}
	{
		SrpTarget t;
		ASSERT_TRUE(t.start(SrpTarget::small_cfg(), {"10.1.2.3"}));
		expect_rej(t, t.login_req(6), srp::REJ_UNABLE_ESTABLISH_CHANNEL);
	}
}

TEST(SrpTargetLogin, MultiJoinsTheNexusUpToTheChannelLimit)
{
	SrpTarget t;
	TargetConfig tc = SrpTarget::small_cfg();
	tc.max_channels = 2;
	ASSERT_TRUE(t.start(tc));
	SrpPeer a(*t.dev), b(*t.dev);
	srp::LoginRsp ra, rb;
	ASSERT_EQ(a.login(t.addr(), t.login_req(1, srp::MULTICHAN_SINGLE), &ra), 0);
	ASSERT_EQ(b.login(t.addr(), t.login_req(1, srp::MULTICHAN_MULTI), &rb), 0);
	EXPECT_EQ(rb.rsp_flags & 3, srp::LOGIN_RSP_MAINTAINED);
	EXPECT_EQ(t.target->stats().channels_open, 2u);
	EXPECT_EQ(t.target->stats().nexuses_open, 1u); // one I_T nexus, two channels
	expect_rej(t, t.login_req(1, srp::MULTICHAN_MULTI), srp::REJ_CHANNEL_LIMIT_REACHED);
	// One nexus: one unit attention, whichever channel takes it.
	ASSERT_TRUE(take_unit_attention(a));
	{
		std::array<uint8_t, 16> tur{};
		srp::CmdOut t0;
		t0.tag = 0xb0;
		t0.lun = kLun0;
		t0.cdb = tur;
		EXPECT_EQ(run_cmd(b, t0), 0) << "the unit attention was not the nexus's";
	}

	// Both channels serve the one nexus: a write on one is read on the other.
	std::span<uint8_t> d = a.data().subspan(0, 4096);
	fill(d, 100, 1);
	const auto cdb1 = rw10(true, 100, 8);
	auto w = rw_cmd(1, cdb1, true);
	srp::DirectDesc dd = a.desc(0, 4096);
	w.descs = {&dd, 1};
	ASSERT_EQ(run_cmd(a, w), 0);
	const auto cdb2 = rw10(false, 100, 8);
	auto rd = rw_cmd(2, cdb2, false);
	srp::DirectDesc bd = b.desc(0, 4096);
	rd.descs = {&bd, 1};
	ASSERT_EQ(run_cmd(b, rd), 0);
	EXPECT_EQ(std::memcmp(b.data().data(), d.data(), 4096), 0);
}

TEST(SrpTargetLogin, SingleTerminatesTheNexusChannels)
{
	SrpTarget t;
	ASSERT_TRUE(t.start());
	SrpPeer a(*t.dev), b(*t.dev), c(*t.dev);
	srp::LoginRsp r;
	ASSERT_EQ(a.login(t.addr(), t.login_req(1, srp::MULTICHAN_SINGLE), &r), 0);
	ASSERT_EQ(b.login(t.addr(), t.login_req(1, srp::MULTICHAN_MULTI), &r), 0);
	// Linux's reconnect: a SINGLE login of the same initiator port ends the old channels.
	ASSERT_EQ(c.login(t.addr(), t.login_req(1, srp::MULTICHAN_SINGLE), &r), 0);
	EXPECT_EQ(r.rsp_flags & 3, srp::LOGIN_RSP_TERMINATED);
	EXPECT_TRUE(a.wait_disconnected());
	EXPECT_TRUE(b.wait_disconnected());
	EXPECT_EQ(t.target->stats().takeovers, 1u);
	// The new channel serves (a new nexus: its unit attention first).
	ASSERT_TRUE(take_unit_attention(c));
	auto tur = srp::CmdOut{};
	std::array<uint8_t, 16> cdb{};
	tur.tag = 9;
	tur.lun = kLun0;
	tur.cdb = cdb;
	EXPECT_EQ(run_cmd(c, tur), 0);
	const auto end = clock::now() + 5s;
	while (t.target->stats().channels_open != 1 && clock::now() < end)
		std::this_thread::sleep_for(10ms);
	EXPECT_EQ(t.target->stats().channels_open, 1u);
	EXPECT_EQ(t.target->stats().nexuses_open, 1u);
}

// ---- Data through every descriptor format ----------------------------------------------

enum class Fmt { Direct, Indirect, External, Immediate };

// Describe len bytes at off of the peer's data area in fmt, pieces of piece bytes.
struct Described {
	std::vector<srp::DirectDesc> descs; // what goes in the IU
	srp::DirectDesc table{};
	uint32_t entries = 0;
};

Described describe(SrpPeer &p, Fmt f, size_t off, uint32_t len, uint32_t piece, size_t table_off)
{
	Described d;
	if (f == Fmt::Immediate)
		return d; // the data rides in the SRP_CMD
	if (f == Fmt::Direct) {
		d.descs.push_back(p.desc(off, len));
		return d;
	}
	std::vector<srp::DirectDesc> all;
	for (uint32_t o = 0; o < len; o += piece)
		all.push_back(p.desc(off + o, std::min(piece, len - o)));
	d.entries = uint32_t(all.size());
	if (f == Fmt::Indirect) {
		d.descs = all;
		d.table = {0, 0, d.entries * uint32_t(srp::kDescLen)};
		return d;
	}
	// External: the whole table in our memory, the target RDMA READs it; one entry in the
	// IU, as Linux sends with allow_ext_sg and cmd_sg_entries 1... (any prefix is legal).
	uint8_t *tb = p.data().data() + table_off;
	for (uint32_t i = 0; i < d.entries; i++)
		srp::put_desc(all[i], tb + i * srp::kDescLen);
	d.table = p.desc(table_off, d.entries * uint32_t(srp::kDescLen));
	d.descs.assign(all.begin(), all.begin() + 1);
	return d;
}

srp::CmdOut data_cmd(uint64_t tag, bool write, uint32_t lba, uint32_t len, Fmt f,
                     const Described &d, const std::array<uint8_t, 16> &cdb,
                     std::span<const uint8_t> imm)
{
	srp::CmdOut c;
	c.tag = tag;
	c.lun = kLun0;
	c.cdb = cdb;
	srp::DescFmt df = f == Fmt::Direct      ? srp::DescFmt::Direct
	                  : f == Fmt::Immediate ? srp::DescFmt::Immediate
	                                        : srp::DescFmt::Indirect;
	(write ? c.out_fmt : c.in_fmt) = df;
	if (f == Fmt::Immediate) {
		c.total_len = len;
		c.imm_data_offset = kImmOffset;
		c.imm = imm;
		return c;
	}
	c.descs = d.descs;
	c.table = d.table;
	c.table_entries = d.entries;
	c.total_len = len;
	(void)lba;
	return c;
}

struct FmtCase {
	Fmt write, read;
	uint32_t len;
	uint32_t piece;
	bool srq;
};

// gtest prints a parameter (and names its test) with this: "Immediate_Indirect_8192_1024",
// "_srq" when on an SRQ.
void PrintTo(const FmtCase &c, std::ostream *os)
{
	static constexpr const char *kNames[] = {"Direct", "Indirect", "External", "Immediate"};
	*os << kNames[int(c.write)] << "_" << kNames[int(c.read)] << "_" << c.len << "_" << c.piece
	    << (c.srq ? "_srq" : "");
}

class SrpTargetData : public ::testing::TestWithParam<FmtCase>
{
};

TEST_P(SrpTargetData, WriteThenReadBack)
{
	const FmtCase fc = GetParam();
	Logged l;
	TargetConfig tc = SrpTarget::small_cfg();
	tc.use_srq = fc.srq;
	tc.srq_size = 64;
	ASSERT_TRUE(l.up(tc));
	SrpPeer &p = *l.p;
	const uint32_t lba = 2048 + fc.len / kBlock;
	const uint16_t blocks = uint16_t(fc.len / kBlock);
	std::span<uint8_t> out = p.data().subspan(0, fc.len);
	std::span<uint8_t> in = p.data().subspan(2u << 20, fc.len);
	fill(out, lba, fc.len);
	std::memset(in.data(), 0xee, in.size());
	const TargetStats before = l.t.target->stats();

	Described dw = describe(p, fc.write, 0, fc.len, fc.piece, 1u << 20);
	const auto cdb3 = rw10(true, lba, blocks);
	auto w = data_cmd(1, true, lba, fc.len, fc.write, dw, cdb3, out);
	srp::Rsp r;
	ASSERT_EQ(run_cmd(p, w, &r), 0);
	EXPECT_FALSE(r.flags & (srp::RSP_DOUNDER | srp::RSP_DOOVER));
	Described dr = describe(p, fc.read, 2u << 20, fc.len, fc.piece, (1u << 20) + 65536);
	const auto cdb4 = rw10(false, lba, blocks);
	auto rd = data_cmd(2, false, lba, fc.len, fc.read, dr, cdb4, {});
	ASSERT_EQ(run_cmd(p, rd, &r), 0);
	EXPECT_FALSE(r.flags & (srp::RSP_DIUNDER | srp::RSP_DIOVER));
	EXPECT_EQ(std::memcmp(in.data(), out.data(), fc.len), 0) << "data read back differs";

	const TargetStats s = l.t.target->stats();
	EXPECT_EQ(s.cmds - before.cmds, 2u);
	EXPECT_EQ(s.immediate - before.immediate, fc.write == Fmt::Immediate ? 1u : 0u);
	EXPECT_EQ(s.ext_tables - before.ext_tables,
	          uint64_t(fc.write == Fmt::External) + uint64_t(fc.read == Fmt::External));
	// RDMA READs: the write's data, and any descriptor table.
	EXPECT_EQ(s.rdma_reads > before.rdma_reads,
	          fc.write != Fmt::Immediate || fc.read == Fmt::External);
	EXPECT_GT(s.rdma_writes, before.rdma_writes);
	EXPECT_EQ(s.bad_ius, 0u);
}

INSTANTIATE_TEST_SUITE_P(
    Formats, SrpTargetData,
    ::testing::Values(FmtCase{Fmt::Direct, Fmt::Direct, 4096, 0, false},
                      FmtCase{Fmt::Direct, Fmt::Direct, 1u << 20, 0, false},
                      FmtCase{Fmt::Indirect, Fmt::Indirect, 65536, 4096, false},
                      FmtCase{Fmt::Indirect, Fmt::Indirect, 12288, 512, false},
                      FmtCase{Fmt::External, Fmt::External, 262144, 4096, false},
                      FmtCase{Fmt::Immediate, Fmt::Direct, 512, 0, false},
                      FmtCase{Fmt::Immediate, Fmt::Indirect, 8192, 1024, false},
                      FmtCase{Fmt::Direct, Fmt::Direct, 65536, 0, true},
                      FmtCase{Fmt::Immediate, Fmt::External, 8192, 512, true},
                      FmtCase{Fmt::External, Fmt::Indirect, 131072, 8192, true}),
    ::testing::PrintToStringParamName());

// ---- Refused commands --------------------------------------------------------------------

TEST(SrpTargetCmd, TableThatDoesNotAddUpIsInvalidField)
{
	Logged l;
	ASSERT_TRUE(l.up());
	SrpPeer &p = *l.p;
	Described d = describe(p, Fmt::External, 0, 16384, 4096, 1u << 20);
	// The table in our memory says 4 x 4096; the command says 16384 + 512.
	const auto cdb5 = rw10(true, 0, 33);
	auto c = data_cmd(5, true, 0, 16384 + 512, Fmt::External, d, cdb5, {});
	std::vector<uint8_t> keep;
	ASSERT_EQ(p.send(cmd_iu(c)), 0);
	auto rr = next_rsp(p, &keep);
	ASSERT_TRUE(rr);
	EXPECT_EQ(rr->status, 0x02); // CHECK CONDITION
	EXPECT_EQ(sense_of(*rr), (std::array<uint8_t, 3>{0x05, 0x0e, 0x03}));
	EXPECT_EQ(l.t.target->stats().ext_tables, 1u);
	// The channel still serves.
	std::array<uint8_t, 16> tur{};
	srp::CmdOut t;
	t.tag = 6;
	t.lun = kLun0;
	t.cdb = tur;
	EXPECT_EQ(run_cmd(p, t), 0);
}

TEST(SrpTargetCmd, MalformedCmdIsCheckConditionAndTheChannelServes)
{
	Logged l;
	ASSERT_TRUE(l.up());
	SrpPeer &p = *l.p;
	// Data-out and data-in both (bidirectional: not supported), direct descriptors: a
	// write made bidirectional by hand (SRP r16a table 16: DATA-OUT BUFFER DESCRIPTOR
	// FORMAT in the high nibble of byte 5, DATA-IN in the low; counts in bytes 6 and 7).
	const auto cdb6 = rw10(true, 0, 8);
	auto c = rw_cmd(0x77, cdb6, true);
	srp::DirectDesc dd = p.desc(0, 4096);
	c.descs = {&dd, 1};
	auto iu = cmd_iu(c);
	iu[5] |= 0x01;
	iu[7] = 1;
	iu.resize(iu.size() + srp::kDescLen);
	srp::put_desc(p.desc(8192, 4096), iu.data() + iu.size() - srp::kDescLen);
	ASSERT_EQ(p.send(iu), 0);
	std::vector<uint8_t> keep;
	auto r = next_rsp(p, &keep);
	ASSERT_TRUE(r);
	EXPECT_EQ(r->tag, 0x77u); // the tag survives a parse error: the initiator can match it
	EXPECT_EQ(r->status, 0x02);
	EXPECT_EQ(sense_of(*r), (std::array<uint8_t, 3>{0x05, 0x0e, 0x03}));
	EXPECT_EQ(l.t.target->stats().bad_ius, 1u);

	// An indirect table larger than max_table_entries.
	const auto cdb7 = rw10(true, 0, 8);
	auto big = rw_cmd(0x78, cdb7, true);
	big.out_fmt = srp::DescFmt::Indirect;
	srp::DirectDesc one = p.desc(0, 4096);
	big.descs = {&one, 1};
	big.table = p.desc(1u << 20, 5000 * 16);
	big.table_entries = 5000;
	big.total_len = 4096;
	ASSERT_EQ(p.send(cmd_iu(big)), 0);
	r = next_rsp(p, &keep);
	ASSERT_TRUE(r);
	EXPECT_EQ(r->tag, 0x78u);
	EXPECT_EQ(r->status, 0x02);

	std::array<uint8_t, 16> tur{};
	srp::CmdOut t;
	t.tag = 0x79;
	t.lun = kLun0;
	t.cdb = tur;
	EXPECT_EQ(run_cmd(p, t), 0);
}

TEST(SrpTargetCmd, UnknownLunIsCheckCondition)
{
	Logged l;
	ASSERT_TRUE(l.up());
	std::array<uint8_t, 16> tur{};
	const uint8_t lun5[8] = {0, 5};
	srp::CmdOut t;
	t.tag = 3;
	t.lun = lun5;
	t.cdb = tur;
	std::vector<uint8_t> keep;
	ASSERT_EQ(l.p->send(cmd_iu(t)), 0);
	auto rr = next_rsp(*l.p, &keep);
	ASSERT_TRUE(rr);
	EXPECT_EQ(rr->status, 0x02);
	// LOGICAL UNIT NOT SUPPORTED (SPC-5 table 49)
	EXPECT_EQ(sense_of(*rr), (std::array<uint8_t, 3>{0x05, 0x25, 0x00}));
}

TEST(SrpTargetCmd, ShortIuClosesTheChannel)
{
	Logged l;
	ASSERT_TRUE(l.up());
	std::vector<uint8_t> iu(20, 0);
	iu[0] = srp::CMD;
	ASSERT_EQ(l.p->send(iu), 0);
	EXPECT_TRUE(l.p->wait_disconnected());
	EXPECT_TRUE(l.t.wait_idle());
	EXPECT_GE(l.t.target->stats().bad_ius, 1u);
}

TEST(SrpTargetCmd, UnknownOpcodeClosesTheChannel)
{
	Logged l;
	ASSERT_TRUE(l.up());
	std::vector<uint8_t> iu(64, 0);
	iu[0] = 0x77;
	ASSERT_EQ(l.p->send(iu), 0);
	EXPECT_TRUE(l.p->wait_disconnected());
	EXPECT_TRUE(l.t.wait_idle());
	EXPECT_TRUE(l.t.capture.contains("opcode 0x77")) << l.t.capture.text();
}

// ---- Credits -----------------------------------------------------------------------------

// Writes whose RDMA READs the soft device holds back: the commands stay in flight.
void hold_reads(Device &dev, uint32_t count, uint32_t delay_us)
{
	soft::FaultRule fr;
	fr.point = soft::FaultPoint::DelayCompletion;
	fr.match_opcode = true;
	fr.opcode = WrOpcode::RdmaRead;
	fr.nth = 1;
	fr.count = count;
	fr.delay_us = delay_us;
	ASSERT_GE(soft::inject_fault(dev, fr), 0);
}

TEST(SrpTargetCredits, EveryRequestsCreditComesBack)
{
	Logged l;
	TargetConfig tc = SrpTarget::small_cfg();
	tc.rq_size = 4;
	ASSERT_TRUE(l.up(tc));
	ASSERT_EQ(l.rsp.req_lim_delta, 4u);
	SrpPeer &p = *l.p;
	int32_t req_lim = int32_t(l.rsp.req_lim_delta);
	uint32_t back = 0;
	// Many rounds of four commands in flight (each round spends every credit), then the
	// credits the responses carry must be exactly those spent.
	std::vector<uint8_t> keep;
	for (int round = 0; round < 20; round++) {
		for (uint32_t i = 0; i < 4; i++) {
			ASSERT_GT(req_lim, 0);
			const auto cdb8 = rw10(true, i * 8, 8);
			auto c = rw_cmd(round * 4 + i, cdb8, true);
			srp::DirectDesc d = p.desc(i * 4096, 4096);
			c.descs = {&d, 1};
			ASSERT_EQ(p.send(cmd_iu(c)), 0);
			req_lim--;
		}
		for (uint32_t i = 0; i < 4; i++) {
			auto r = next_rsp(p, &keep, &back);
			ASSERT_TRUE(r);
			EXPECT_EQ(r->status, 0);
			req_lim += int32_t(r->req_lim_delta);
		}
	}
	EXPECT_EQ(req_lim + int32_t(back), 4);
	EXPECT_EQ(l.t.target->stats().credit_overruns, 0u);
}

TEST(SrpTargetCredits, OverrunIsCountedAndServed)
{
	Logged l;
	TargetConfig tc = SrpTarget::small_cfg();
	tc.rq_size = 4;
	ASSERT_TRUE(l.up(tc));
	SrpPeer &p = *l.p;
	// Four writes held in flight by their RDMA READs, then one request beyond the credits
	// (Linux never sends one; a raw initiator can). It lands in a spare receive.
	hold_reads(*l.t.dev, 4, 300000);
	for (uint32_t i = 0; i < 4; i++) {
		const auto cdb9 = rw10(true, i * 8, 8);
		auto c = rw_cmd(i, cdb9, true);
		srp::DirectDesc d = p.desc(i * 4096, 4096);
		c.descs = {&d, 1};
		ASSERT_EQ(p.send(cmd_iu(c)), 0);
	}
	std::array<uint8_t, 16> tur{};
	srp::CmdOut t;
	t.tag = 4;
	t.lun = kLun0;
	t.cdb = tur;
	ASSERT_EQ(p.send(cmd_iu(t)), 0);
	std::vector<uint8_t> keep;
	std::set<uint64_t> tags;
	for (int i = 0; i < 5; i++) {
		auto r = next_rsp(p, &keep);
		ASSERT_TRUE(r);
		EXPECT_EQ(r->status, 0);
		tags.insert(r->tag);
	}
	EXPECT_EQ(tags.size(), 5u);
	EXPECT_EQ(l.t.target->stats().credit_overruns, 1u);
	EXPECT_TRUE(l.t.capture.contains("without a credit")) << l.t.capture.text();
}

TEST(SrpTargetCredits, AbortedCommandsCreditsReturnByCredReq)
{
	Logged l;
	TargetConfig tc = SrpTarget::small_cfg();
	tc.rq_size = 8;
	ASSERT_TRUE(l.up(tc));
	SrpPeer &p = *l.p;
	hold_reads(*l.t.dev, 3, 300000);
	for (uint32_t i = 0; i < 3; i++) {
		const auto cdb10 = rw10(true, i * 8, 8);
		auto c = rw_cmd(i, cdb10, true);
		srp::DirectDesc d = p.desc(i * 4096, 4096);
		c.descs = {&d, 1};
		ASSERT_EQ(p.send(cmd_iu(c)), 0);
	}
	// LUN RESET aborts them (SAM-5 7.7): no SRP_RSP for an aborted command; its credit is
	// owed (ib_srpt loses it).
	srp::TskMgmt tm;
	tm.tag = 100;
	tm.func = srp::TSK_LUN_RESET;
	uint8_t b[srp::kTskMgmtLen];
	ASSERT_EQ(srp::build_tsk_mgmt(tm, b), srp::kTskMgmtLen);
	ASSERT_EQ(p.send(b), 0);
	// Collect everything for a while: SRP_RSPs (the TMF's, commands that finished before
	// the reset) and SRP_CRED_REQs. 4 requests were sent; 4 credits must come back.
	uint32_t back = 0, rsps = 0;
	bool tmf_done = false;
	const auto end = clock::now() + 3s;
	std::vector<uint8_t> keep;
	while (clock::now() < end && !(tmf_done && back == 4)) {
		uint32_t cred = 0;
		auto r = next_rsp(p, &keep, &cred, 500ms);
		back += cred;
		if (!r)
			continue;
		rsps++;
		back += r->req_lim_delta;
		if (r->tag == 100) {
			tmf_done = true;
			ASSERT_EQ(r->resp_data.size(), 4u);
			EXPECT_EQ(r->resp_data[3], srp::TM_COMPLETE);
		}
	}
	EXPECT_TRUE(tmf_done);
	EXPECT_EQ(back, 4u) << rsps << " responses";
	EXPECT_EQ(l.t.target->stats().credit_overruns, 0u);
}

// On an SRQ a channel holds its share of the receives, not rq_size: credits for more would
// be held back by RNR NAKs instead, which starve some channels (channel.h). Logins grant the
// share counting the new channel; a channel that got more before others joined is brought
// down to it by its responses, and back up once they have left.
TEST(SrpTargetCredits, OnAnSrqEachChannelHoldsItsShare)
{
	SrpTarget t;
	TargetConfig tc = SrpTarget::small_cfg();
	tc.rq_size = 16;
	tc.use_srq = true;
	tc.srq_size = 24;
	ASSERT_TRUE(t.start(tc));
	SrpPeer a(*t.dev), b(*t.dev), c(*t.dev), d(*t.dev);
	srp::LoginRsp ra, rb, rc, rd;
	ASSERT_EQ(a.login(t.addr(), t.login_req(1), &ra), 0);
	EXPECT_EQ(ra.req_lim_delta, 16u); // alone: 24 less a spare, capped at rq_size
	ASSERT_TRUE(take_unit_attention(a));
	ASSERT_EQ(b.login(t.addr(), t.login_req(2), &rb), 0);
	ASSERT_EQ(c.login(t.addr(), t.login_req(3), &rc), 0);
	ASSERT_EQ(d.login(t.addr(), t.login_req(4), &rd), 0);
	EXPECT_EQ(rb.req_lim_delta, 11u); // (24 - 2) / 2
	EXPECT_EQ(rc.req_lim_delta, 7u);  // (24 - 3) / 3
	EXPECT_EQ(rd.req_lim_delta, 5u);  // (24 - 4) / 4

	// A spends its 16 credits; its responses give back only its share now: 5 (a response
	// may return none: Linux's ib_srp adds req_lim_delta to its s32 req_lim as it comes).
	std::array<uint8_t, 16> tur{};
	auto spend = [&](SrpPeer &p, uint32_t n, uint64_t tag0, bool ua = false) {
		for (uint32_t i = 0; i < n; i++) {
			srp::CmdOut tc0;
			tc0.tag = tag0 + i;
			tc0.lun = kLun0;
			tc0.cdb = tur;
			EXPECT_EQ(p.send(cmd_iu(tc0)), 0);
		}
		uint32_t back = 0;
		std::vector<uint8_t> keep;
		for (uint32_t i = 0; i < n; i++) {
			auto r = next_rsp(p, &keep, &back);
			EXPECT_TRUE(r);
			if (!r)
				break;
			// A new nexus's first command takes its unit attention (29/00).
			if (!(ua && r->tag == tag0)) {
				EXPECT_EQ(r->status, 0);
			}
			back += r->req_lim_delta;
		}
		return back;
	};
	// B, C and D take their unit attentions (and hold their shares after the responses).
	EXPECT_EQ(spend(b, 2, 0x500, true), 0u) << "B holds 9 of its 11: still above its share";
	EXPECT_EQ(spend(c, 2, 0x600, true), 0u) << "C holds 5 of its 7";
	EXPECT_EQ(spend(d, 2, 0x700, true), 2u) << "D holds its 5";
	EXPECT_EQ(spend(a, 16, 0x100), 5u) << "channel A kept more than its share of the SRQ";
	EXPECT_EQ(spend(d, 5, 0x200), 5u) << "channel D lost credits it was granted";

	// The others leave: A's share is rq_size again, and its next response says so.
	b.disconnect();
	c.disconnect();
	d.disconnect();
	const auto end = clock::now() + 10s;
	while (t.target->stats().channels_open > 1 && clock::now() < end)
		std::this_thread::sleep_for(10ms);
	ASSERT_EQ(t.target->stats().channels_open, 1u);
	EXPECT_EQ(spend(a, 1, 0x300), 12u) << "5 - 1 held, back to 16";
	EXPECT_EQ(spend(a, 16, 0x400), 16u);
	EXPECT_EQ(t.target->stats().credit_overruns, 0u);
}

// ---- Ending a channel --------------------------------------------------------------------

TEST(SrpTargetClose, ILogoutEndsTheChannel)
{
	Logged l;
	ASSERT_TRUE(l.up());
	uint8_t b[srp::kLogoutLen];
	ASSERT_EQ(srp::build_tag_iu(srp::I_LOGOUT, 1, b), srp::kLogoutLen);
	ASSERT_EQ(l.p->send(b), 0);
	EXPECT_TRUE(l.p->wait_disconnected());
	EXPECT_TRUE(l.t.wait_idle());
	EXPECT_EQ(l.t.target->stats().i_logouts, 1u);
}

TEST(SrpTargetClose, InitiatorDisconnectMidIo)
{
	Logged l;
	ASSERT_TRUE(l.up());
	SrpPeer &p = *l.p;
	hold_reads(*l.t.dev, 4, 200000);
	for (uint32_t i = 0; i < 4; i++) {
		const auto cdb11 = rw10(true, i * 8, 8);
		auto c = rw_cmd(i, cdb11, true);
		srp::DirectDesc d = p.desc(i * 4096, 4096);
		c.descs = {&d, 1};
		ASSERT_EQ(p.send(cmd_iu(c)), 0);
	}
	p.disconnect();
	EXPECT_TRUE(l.t.wait_idle());
}

TEST(SrpTargetClose, StopWithChannelsOpen)
{
	Logged l;
	ASSERT_TRUE(l.up());
	SrpPeer b(*l.t.dev);
	srp::LoginRsp r;
	ASSERT_EQ(b.login(l.t.addr(), l.t.login_req(2), &r), 0);
	EXPECT_TRUE(l.t.target->stop(5s));
	EXPECT_TRUE(l.p->wait_disconnected());
	EXPECT_TRUE(b.wait_disconnected());
	EXPECT_EQ(l.t.target->stats().channels_open, 0u);
	EXPECT_EQ(l.t.target->stats().nexuses_open, 0u);
}

} // namespace
} // namespace ulp::srpt::test
