// SPDX-License-Identifier: MIT
// tests/srp/target_env.h - the SRP target suites' common ground (target_test.cc, plug_test.cc):
// the target with the test's configuration and the login Linux's ib_srp asks for, SRP_CMD
// IUs for READ(10)/WRITE(10), the responses read back (CRED_REQs answered on the way), the
// unit attention of a new nexus taken, a logged-in peer.
#pragma once

#include "core/log.h"
#include "tests/srp/srp_env.h"
#include "tests/srp/srp_peer.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <optional>

namespace ulp::srpt::test
{

using clock = std::chrono::steady_clock;

using test_env::kBlock;
inline constexpr uint64_t kLunBytes = 32u << 20;
inline constexpr uint16_t kImmOffset = 68; // ib_srp's SRP_IMM_DATA_OFFSET

// The target in this process: a soft device, a RAM LUN, srpt::Target and its Portal.
struct SrpTarget : test_env::SoftTarget {
	log::Capture capture;

	bool start(TargetConfig tc = small_cfg(), std::vector<std::string> acls = {})
	{
		test_env::TargetOptions o = options();
		o.acls = std::move(acls);
		return SoftTarget::start(tc, o);
	}

	// The suites' LUN and TPG name, for a caller that changes more of the options.
	static test_env::TargetOptions options()
	{
		test_env::TargetOptions o;
		o.lun_bytes = kLunBytes;
		o.name = "srpt-test";
		return o;
	}

	static TargetConfig small_cfg()
	{
		TargetConfig tc;
		tc.rq_size = 16;
		tc.sq_size = 256;
		tc.heap_bytes = 16u << 20;
		tc.max_io = 1u << 20;
		tc.data_timeout = std::chrono::milliseconds(3000);
		return tc;
	}

	// What Linux's ib_srp asks by default (its srp_send_req).
	srp::LoginReq login_req(uint64_t initiator_ext = 1,
	                        uint8_t multichan = srp::MULTICHAN_SINGLE)
	{
		srp::LoginReq r;
		r.tag = 0x1122334455667788ull;
		r.req_it_iu_len = 8260;
		r.req_buf_fmt = srp::BUF_FMT_DIRECT | srp::BUF_FMT_INDIRECT;
		r.req_flags = uint8_t(multichan | srp::IMMED_REQUESTED);
		r.imm_data_offset = kImmOffset;
		r.initiator_port_id = srp::make_port_id(initiator_ext, 0x0002c90300a0b0c0ull);
		r.target_port_id = srp::make_port_id(target->id_ext(), target->ioc_guid());
		return r;
	}

	// Wait (bounded) until every channel is freed and every nexus closed.
	bool wait_idle(std::chrono::milliseconds limit = 10s)
	{
		const auto end = clock::now() + limit;
		while (clock::now() < end) {
			TargetStats s = target->stats();
			if (s.channels_open == 0 && s.nexuses_open == 0 && portal->conns() == 0)
				return true;
			std::this_thread::sleep_for(10ms);
		}
		return false;
	}
};

using test_env::fill;

// READ(10)/WRITE(10) in SRP_CMD's 16-byte CDB field (SRP r16a 6.9).
inline std::array<uint8_t, 16> rw10(bool write, uint32_t lba, uint16_t blocks)
{
	std::array<uint8_t, 16> c{};
	const auto c10 = test_env::cdb_rw10(write, lba, blocks);
	std::copy(c10.begin(), c10.end(), c.begin());
	return c;
}

inline const uint8_t kLun0[8] = {};

// An SRP_CMD as bytes.
inline std::vector<uint8_t> cmd_iu(const srp::CmdOut &c)
{
	std::vector<uint8_t> b(8448);
	const size_t n = srp::build_cmd(c, b);
	EXPECT_GT(n, 0u);
	b.resize(n);
	return b;
}

// The CmdOut views the CDB: it must outlive the call (no temporaries).
inline srp::CmdOut rw_cmd(uint64_t tag, std::array<uint8_t, 16> &&cdb, bool write) = delete;
inline srp::CmdOut rw_cmd(uint64_t tag, const std::array<uint8_t, 16> &cdb, bool write)
{
	srp::CmdOut c;
	c.tag = tag;
	c.lun = kLun0;
	c.cdb = cdb;
	(write ? c.out_fmt : c.in_fmt) = srp::DescFmt::Direct;
	return c;
}

// The next SRP_RSP (CRED_REQs on the way are answered and their credits added to
// *cred_back when given).
inline std::optional<srp::Rsp> next_rsp(SrpPeer &p, std::vector<uint8_t> *keep,
                                        uint32_t *cred_back = nullptr,
                                        std::chrono::milliseconds limit = 5s)
{
	for (;;) {
		auto iu = p.recv(limit);
		if (!iu)
			return std::nullopt;
		const int op = srp::iu_opcode(*iu);
		if (op == srp::CRED_REQ) {
			srp::CredReq cr;
			EXPECT_TRUE(srp::parse_cred_req(*iu, &cr));
			if (cred_back)
				*cred_back += cr.req_lim_delta;
			uint8_t b[srp::kCredRspLen];
			EXPECT_EQ(srp::build_tag_iu(srp::CRED_RSP, cr.tag, b), srp::kCredRspLen);
			EXPECT_EQ(p.send(b), 0);
			continue;
		}
		EXPECT_EQ(op, srp::RSP) << "opcode " << op;
		if (op != srp::RSP)
			return std::nullopt;
		*keep = std::move(*iu);
		srp::Rsp r;
		if (!srp::parse_rsp(*keep, &r))
			return std::nullopt;
		return r;
	}
}

// Sense key, ASC, ASCQ of fixed-format sense in an SRP_RSP.
inline std::array<uint8_t, 3> sense_of(const srp::Rsp &r)
{
	if (r.sense.size() < 14)
		return {0xff, 0xff, 0xff};
	return {uint8_t(r.sense[2] & 0x0f), r.sense[12], r.sense[13]};
}

// Send cmd and wait for its SRP_RSP; its status (or -1 when none came).
inline int run_cmd(SrpPeer &p, const srp::CmdOut &c, srp::Rsp *out = nullptr)
{
	auto iu = cmd_iu(c);
	if (p.send(iu) != 0)
		return -1;
	std::vector<uint8_t> keep;
	auto r = next_rsp(p, &keep);
	if (!r)
		return -1;
	EXPECT_EQ(r->tag, c.tag);
	EXPECT_GE(r->req_lim_delta, 1u); // SRP r16a 5.5: its own credit back, at least
	if (r->status != 0) {
		auto k = sense_of(*r);
		std::printf("tag %#llx: status %#x sense %02x/%02x/%02x\n",
		            (unsigned long long)c.tag, r->status, k[0], k[1], k[2]);
	}
	if (out) {
		*out = *r;
		out->sense = {};
		out->resp_data = {};
	}
	return r->status;
}

// A new I_T nexus starts with a unit attention (SAM-5 5.14: POWER ON, RESET, OR BUS DEVICE
// RESET OCCURRED, 29/00): the first command takes it, as Linux's scan does.
inline bool take_unit_attention(SrpPeer &p, uint64_t tag = 0xa0)
{
	std::array<uint8_t, 16> tur{};
	srp::CmdOut t;
	t.tag = tag;
	t.lun = kLun0;
	t.cdb = tur;
	auto iu = cmd_iu(t);
	if (p.send(iu) != 0)
		return false;
	std::vector<uint8_t> keep;
	auto r = next_rsp(p, &keep);
	if (!r)
		return false;
	if (r->status == 0)
		return true;
	EXPECT_EQ(r->status, 0x02);
	EXPECT_EQ(sense_of(*r)[0], 0x06) << "not a unit attention";
	EXPECT_EQ(sense_of(*r)[1], 0x29);
	return run_cmd(p, t) == 0;
}

struct Logged {
	SrpTarget t;
	std::unique_ptr<SrpPeer> p;
	srp::LoginRsp rsp;

	bool up(TargetConfig tc = SrpTarget::small_cfg())
	{
		if (!t.start(tc))
			return false;
		p = std::make_unique<SrpPeer>(*t.dev);
		return p->login(t.addr(), t.login_req(), &rsp) == 0 && take_unit_attention(*p);
	}
};

} // namespace ulp::srpt::test
