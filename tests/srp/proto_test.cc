// SPDX-License-Identifier: MIT
// The SRP information units (srp/proto.h) against the bytes Linux's ib_srp and ib_srpt put
// on the wire (include/scsi/srp.h; srp_send_req, srpt_build_cmd_rsp): logins, responses,
// task management and the other IUs, every refusal reached by a crafted IU, and every
// truncation of a valid IU refused without a read past it (run under ASan too:
// -DULP_SANITIZE=ON). SRP_CMD is in proto_cmd_test.cc.
#include "tests/srp/proto_bytes.h"

#include <gtest/gtest.h>

#include <cstring>
#include <set>
#include <string>
#include <vector>

namespace ulp::srp
{
namespace
{

using namespace test;

// ---- Login -----------------------------------------------------------------------------

// struct srp_login_req_rdma as srp_send_req fills it for RDMA/CM: tag 0, DIRECT|INDIRECT,
// immediate data requested at offset 68 (SRP_IMM_DATA_OFFSET: 48 + 16 additional CDB bytes
// + the 4-byte immediate header), it_iu_len 8260 (68 + 8 KiB of immediate data).
Bytes login_req_rdma(uint8_t flags)
{
	return {
	    0,     0,    0,    0,    0,    0,    0,    0,    // tag
	    0x00,  0x06,                                     // req_buf_fmt
	    flags,                                           // req_flags
	    0x00,                                            // opcode SRP_LOGIN_REQ
	    0x00,  0x00, 0x20, 0x44,                         // req_it_iu_len 8260
	    0x00,  0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, // initiator_port_id: initiator_ext
	    0x00,  0x02, 0xc9, 0x03, 0x00, 0xa1, 0xb2, 0xc3, //   and the port GUID
	    0x00,  0x02, 0xc9, 0x03, 0x00, 0x00, 0x11, 0x11, // target_port_id: id_ext
	    0x00,  0x02, 0xc9, 0x03, 0x00, 0x00, 0x22, 0x22, //   and ioc_guid
	    0x00,  0x44,                                     // imm_data_offset 68
	    0,     0,    0,    0,    0,    0,                // reserved
	};
}

TEST(SrpLogin, RdmaCmRequestAsIbSrpSendsIt)
{
	for (uint8_t flags : {uint8_t(IMMED_REQUESTED | MULTICHAN_SINGLE),
	                      uint8_t(IMMED_REQUESTED | MULTICHAN_MULTI)}) {
		const Bytes b = login_req_rdma(flags);
		ASSERT_EQ(b.size(), kLoginReqRdmaLen);
		LoginReq r;
		ASSERT_EQ(parse_login_req(b, &r), LoginError::None);
		EXPECT_EQ(r.tag, 0u);
		EXPECT_EQ(r.req_buf_fmt, BUF_FMT_DIRECT | BUF_FMT_INDIRECT);
		EXPECT_EQ(r.req_flags, flags);
		EXPECT_EQ(r.multichan(), flags & 3);
		EXPECT_TRUE(r.immediate());
		EXPECT_EQ(r.req_it_iu_len, 8260u);
		EXPECT_EQ(r.imm_data_offset, 68u);
		EXPECT_EQ(port_id_hi(r.initiator_port_id), 1u);
		EXPECT_EQ(port_id_lo(r.initiator_port_id), 0x0002c90300a1b2c3u);
		EXPECT_EQ(port_id_hi(r.target_port_id), 0x0002c90300001111u);
		EXPECT_EQ(port_id_lo(r.target_port_id), 0x0002c90300002222u);

		std::array<uint8_t, kLoginReqRdmaLen> built;
		built.fill(0xee);
		build_login_req_rdma(r, built);
		EXPECT_EQ(Bytes(built.begin(), built.end()), b);
	}
}

TEST(SrpLogin, RequestWithoutImmediateData)
{
	// srp_use_imm_data off: no IMMED_REQUESTED, imm_data_offset left 0.
	Bytes b = login_req_rdma(MULTICHAN_SINGLE);
	b[48] = b[49] = 0;
	LoginReq r;
	ASSERT_EQ(parse_login_req(b, &r), LoginError::None);
	EXPECT_FALSE(r.immediate());
	EXPECT_EQ(r.multichan(), MULTICHAN_SINGLE);
	EXPECT_EQ(r.imm_data_offset, 0u);
}

// struct srp_login_req as srp_send_req fills it for the IB CM: 64 bytes, opcode first.
Bytes login_req_ib()
{
	return {
	    0x00, 0,    0,    0,    0,    0,    0,    0,    // opcode, reserved
	    0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, // tag
	    0x00, 0x00, 0x01, 0x14,                         // req_it_iu_len 276
	    0,    0,    0,    0,                            // reserved
	    0x00, 0x06,                                     // req_buf_fmt
	    0x01,                                           // req_flags MULTI
	    0,                                              // reserved
	    0x00, 0x00,                                     // imm_data_offset
	    0,    0,                                        // reserved
	    0xfe, 0x80, 0,    0,    0,    0,    0,    0,    // initiator_port_id
	    0x00, 0x02, 0xc9, 0x03, 0x00, 0xa1, 0xb2, 0xc3, //
	    0x00, 0x02, 0xc9, 0x03, 0x00, 0x00, 0x11, 0x11, // target_port_id
	    0x00, 0x02, 0xc9, 0x03, 0x00, 0x00, 0x22, 0x22, //
	};
}

TEST(SrpLogin, IbCmRequest)
{
	const Bytes b = login_req_ib();
	ASSERT_EQ(b.size(), kLoginReqLen);
	// The IB CM REQ carries 92 bytes of private data: the tail is padding.
	for (const Bytes &pd : {b, cat({b, Bytes(92 - 64, 0)})}) {
		LoginReq r;
		ASSERT_EQ(parse_login_req(pd, &r), LoginError::None);
		EXPECT_EQ(r.tag, tag_of({0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88}));
		EXPECT_EQ(r.req_it_iu_len, 276u);
		EXPECT_EQ(r.req_buf_fmt, 6u);
		EXPECT_EQ(r.multichan(), MULTICHAN_MULTI);
		EXPECT_FALSE(r.immediate());
		EXPECT_EQ(port_id_hi(r.initiator_port_id), 0xfe80000000000000u);
		EXPECT_EQ(port_id_lo(r.initiator_port_id), 0x0002c90300a1b2c3u);
		EXPECT_EQ(r.target_port_id, make_port_id(0x0002c90300001111u, 0x0002c90300002222u));
	}
}

TEST(SrpLogin, RequestRefusals)
{
	LoginReq r;
	r.tag = 7;
	const LoginReq before = r;
	for (size_t n = 0; n < kLoginReqRdmaLen; n++) {
		// Exact-size copies: ASan sees any read past n.
		EXPECT_EQ(parse_login_req(first(login_req_rdma(0x80), n), &r), LoginError::Short)
		    << n;
		EXPECT_EQ(parse_login_req(first(login_req_ib(), n), &r), LoginError::Short) << n;
	}
	EXPECT_EQ(r.tag, before.tag); // untouched on error

	Bytes b = login_req_rdma(0x80);
	b[11] = CMD;
	EXPECT_EQ(parse_login_req(b, &r), LoginError::BadOpcode);
	// 64 bytes: neither byte 0 nor byte 11 is LOGIN_REQ.
	Bytes ib = login_req_ib();
	ib[0] = LOGIN_RSP;
	EXPECT_EQ(parse_login_req(ib, &r), LoginError::BadOpcode);
	// Byte 0 not LOGIN_REQ but byte 11 is: the length rule reads the RDMA/CM form.
	ib[11] = LOGIN_REQ;
	ASSERT_EQ(parse_login_req(ib, &r), LoginError::None);
	EXPECT_EQ(r.req_buf_fmt, 0x1122u); // bytes 8..9 of the IB form: its tag
	// A truncated IB form of 56..63 bytes whose byte 11 (tag byte 3) is 0 is read as the
	// RDMA/CM form too: the contract tells the two apart by length and opcode position
	// only (an IB CM REQ always carries 92 bytes, so this does not arise).
	ib = login_req_ib();
	ib[11] = 0;
	EXPECT_EQ(parse_login_req(first(ib, 60), &r), LoginError::None);

	EXPECT_STREQ(login_error_name(LoginError::None), "none");
	EXPECT_STRNE(login_error_name(LoginError::Short), login_error_name(LoginError::BadOpcode));
}

TEST(SrpLogin, ResponseAsIbSrptSendsIt)
{
	// srpt_cm_req_recv's answer: credits, the request's tag echoed, max_it_iu_len 8260,
	// max_ti_iu_len, DIRECT|INDIRECT, immediate data supported, no other channel.
	const Bytes want = cat({{0xc0, 0, 0, 0},          // opcode, reserved
	                        {0x00, 0x00, 0x00, 0x7f}, // req_lim_delta 127
	                        kTagBytes,                // tag
	                        {0x00, 0x00, 0x20, 0x44}, // max_it_iu_len
	                        {0x00, 0x00, 0x20, 0x44}, // max_ti_iu_len
	                        {0x00, 0x06},             // buf_fmt
	                        {0x80},                   // rsp_flags IMMED_SUPP | NO_CHAN
	                        Bytes(25, 0)});           // reserved
	ASSERT_EQ(want.size(), kLoginRspLen);
	LoginRsp r;
	r.req_lim_delta = 127;
	r.tag = tag_of(kTagBytes);
	r.max_it_iu_len = r.max_ti_iu_len = 8260;
	r.buf_fmt = BUF_FMT_DIRECT | BUF_FMT_INDIRECT;
	r.rsp_flags = LOGIN_RSP_IMMED_SUPP | LOGIN_RSP_NO_CHAN;
	std::array<uint8_t, kLoginRspLen> b;
	b.fill(0xee);
	build_login_rsp(r, b);
	EXPECT_EQ(Bytes(b.begin(), b.end()), want);

	LoginRsp back;
	ASSERT_TRUE(parse_login_rsp(want, &back));
	EXPECT_EQ(back.req_lim_delta, 127u);
	EXPECT_EQ(back.tag, r.tag);
	EXPECT_EQ(back.max_it_iu_len, 8260u);
	EXPECT_EQ(back.max_ti_iu_len, 8260u);
	EXPECT_EQ(back.buf_fmt, r.buf_fmt);
	EXPECT_EQ(back.rsp_flags, r.rsp_flags);
	// The IB CM REP carries 196 bytes: padding is ignored.
	ASSERT_TRUE(parse_login_rsp(cat({want, Bytes(196 - 52, 0)}), &back));

	for (size_t n = 0; n < kLoginRspLen; n++)
		EXPECT_FALSE(parse_login_rsp(first(want, n), &back)) << n;
	Bytes bad = want;
	bad[0] = LOGIN_REJ;
	EXPECT_FALSE(parse_login_rsp(bad, &back));
}

TEST(SrpLogin, Reject)
{
	const Bytes want = cat({{0xc2, 0, 0, 0},          // opcode, reserved
	                        {0x00, 0x01, 0x00, 0x02}, // reason: IU length too large
	                        kTagBytes,                // tag
	                        Bytes(8, 0),              // reserved
	                        {0x00, 0x06},             // buf_fmt
	                        Bytes(6, 0)});
	ASSERT_EQ(want.size(), kLoginRejLen);
	LoginRej r;
	r.reason = REJ_IT_IU_LEN_TOO_LARGE;
	r.tag = tag_of(kTagBytes);
	r.buf_fmt = 6;
	std::array<uint8_t, kLoginRejLen> b;
	b.fill(0xee);
	build_login_rej(r, b);
	EXPECT_EQ(Bytes(b.begin(), b.end()), want);

	LoginRej back;
	ASSERT_TRUE(parse_login_rej(cat({want, Bytes(148 - 32, 0)}), &back)); // an IB CM REJ
	EXPECT_EQ(back.reason, REJ_IT_IU_LEN_TOO_LARGE);
	EXPECT_EQ(back.tag, r.tag);
	EXPECT_EQ(back.buf_fmt, 6u);
	for (size_t n = 0; n < kLoginRejLen; n++)
		EXPECT_FALSE(parse_login_rej(first(want, n), &back)) << n;
	Bytes bad = want;
	bad[0] = LOGIN_RSP;
	EXPECT_FALSE(parse_login_rej(bad, &back));
}

TEST(SrpLogin, RejectReasonNames)
{
	EXPECT_STREQ(rej_reason_name(REJ_UNABLE_ESTABLISH_CHANNEL), "unable to establish channel");
	EXPECT_STREQ(rej_reason_name(REJ_INSUFFICIENT_RESOURCES), "insufficient resources");
	EXPECT_STREQ(rej_reason_name(REJ_IT_IU_LEN_TOO_LARGE), "requested IU length too large");
	EXPECT_STREQ(rej_reason_name(REJ_UNABLE_ASSOCIATE_CHANNEL), "unable to associate channel");
	EXPECT_STREQ(rej_reason_name(REJ_UNSUPPORTED_DESC_FMT), "unsupported descriptor format");
	EXPECT_STREQ(rej_reason_name(REJ_MULTI_CHANNEL_UNSUPPORTED), "multichannel unsupported");
	EXPECT_STREQ(rej_reason_name(REJ_CHANNEL_LIMIT_REACHED), "channel limit reached");
	EXPECT_STREQ(rej_reason_name(0), "unknown reason");
	EXPECT_STREQ(rej_reason_name(0x00010007), "unknown reason");
}

TEST(SrpLogin, PortIds)
{
	const auto id = make_port_id(0x0102030405060708u, 0x1112131415161718u);
	const std::array<uint8_t, 16> want = {1,    2,    3,    4,    5,    6,    7,    8,
	                                      0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18};
	EXPECT_EQ(id, want);
	EXPECT_EQ(port_id_hi(id), 0x0102030405060708u);
	EXPECT_EQ(port_id_lo(id), 0x1112131415161718u);
}

// ---- Responses and the rest ------------------------------------------------------------

// ib_srpt's CHECK CONDITION for an unsupported opcode: SNSVALID, 18 bytes of fixed-format
// sense (ILLEGAL REQUEST, INVALID COMMAND OPERATION CODE), the data-in underflow counted.
const Bytes kSense = {0x70, 0, 0x05, 0, 0, 0, 0, 0x0a, 0, 0, 0, 0, 0x20, 0x00, 0, 0, 0, 0};
Bytes rsp_check_condition()
{
	return cat({{RSP, 0, 0, 0},
	            {0x00, 0x00, 0x00, 0x01}, // req_lim_delta
	            kTagBytes,
	            {0, 0},
	            {RSP_SNSVALID | RSP_DIUNDER, 0x02}, // flags, status CHECK CONDITION
	            be32(0),                            // data_out_res_cnt
	            be32(4096),                         // data_in_res_cnt
	            be32(18),                           // sense_data_len
	            be32(0),                            // resp_data_len
	            kSense});
}

// ib_srpt's task management answer: RSPVALID, 4 bytes of response data, RSP_CODE at [3].
Bytes rsp_tm(uint8_t code)
{
	return cat({{RSP, 0, 0, 0},
	            be32(1),
	            kTagBytes,
	            {0, 0},
	            {RSP_RSPVALID, 0},
	            be32(0),
	            be32(0),
	            be32(0),
	            be32(4),
	            {0, 0, 0, code}});
}

TEST(SrpRsp, CheckConditionAsIbSrptSendsIt)
{
	const Bytes want = rsp_check_condition();
	ASSERT_EQ(want.size(), kRspLen + 18);
	Rsp r;
	r.tag = tag_of(kTagBytes);
	r.req_lim_delta = 1;
	r.flags = RSP_DIUNDER;
	r.status = 0x02;
	r.data_in_res_cnt = 4096;
	r.sense = kSense;
	Bytes out(256, 0xee);
	ASSERT_EQ(build_rsp(r, out), want.size());
	EXPECT_EQ(first(out, want.size()), want);

	Rsp back;
	ASSERT_TRUE(parse_rsp(want, &back));
	EXPECT_EQ(back.tag, r.tag);
	EXPECT_EQ(back.req_lim_delta, 1u);
	EXPECT_EQ(back.flags, RSP_SNSVALID | RSP_DIUNDER);
	EXPECT_EQ(back.status, 2);
	EXPECT_EQ(back.data_in_res_cnt, 4096u);
	EXPECT_EQ(back.data_out_res_cnt, 0u);
	EXPECT_TRUE(back.resp_data.empty());
	EXPECT_EQ(back.sense.data(), want.data() + 36);
	EXPECT_EQ(Bytes(back.sense.begin(), back.sense.end()), kSense);
	for (size_t n = 0; n < want.size(); n++)
		EXPECT_FALSE(parse_rsp(first(want, n), &back)) << n;
}

TEST(SrpRsp, TaskManagementResponse)
{
	const Bytes want = rsp_tm(TM_FAILED);
	Rsp r;
	r.tag = tag_of(kTagBytes);
	r.req_lim_delta = 1;
	const uint8_t rd[4] = {0, 0, 0, TM_FAILED};
	r.resp_data = rd;
	Bytes out(64, 0xee);
	ASSERT_EQ(build_rsp(r, out), want.size());
	EXPECT_EQ(first(out, want.size()), want);
	Rsp back;
	ASSERT_TRUE(parse_rsp(want, &back));
	ASSERT_EQ(back.resp_data.size(), 4u);
	EXPECT_EQ(back.resp_data[3], TM_FAILED);
	EXPECT_TRUE(back.sense.empty());

	// Both: response data, then sense.
	r.sense = kSense;
	ASSERT_EQ(build_rsp(r, out), 36u + 4 + 18);
	const Bytes both = first(out, 58);
	ASSERT_TRUE(parse_rsp(both, &back));
	EXPECT_EQ(back.flags, RSP_RSPVALID | RSP_SNSVALID);
	EXPECT_EQ(back.resp_data.data(), both.data() + 36);
	EXPECT_EQ(back.sense.data(), both.data() + 40);
	EXPECT_EQ(Bytes(back.resp_data.begin(), back.resp_data.end()), Bytes(rd, rd + 4));
	EXPECT_EQ(Bytes(back.sense.begin(), back.sense.end()), kSense);
	for (size_t n = 0; n < 58; n++)
		EXPECT_FALSE(parse_rsp(first(out, n), &back)) << n;
	// Every output size short of the IU.
	for (size_t n = 0; n < 58; n++) {
		Bytes o(n);
		EXPECT_EQ(build_rsp(r, o), 0u) << n;
	}
}

TEST(SrpRsp, ValidBitsFollowTheSpans)
{
	Rsp r;
	r.flags = RSP_RSPVALID | RSP_SNSVALID | RSP_DOOVER;
	Bytes out(64, 0xee);
	ASSERT_EQ(build_rsp(r, out), kRspLen);
	EXPECT_EQ(out[18], RSP_DOOVER);
	EXPECT_EQ(out[28] | out[29] | out[30] | out[31] | out[32] | out[33] | out[34] | out[35], 0);
}

TEST(SrpRsp, LengthsPastTheIuRefused)
{
	Rsp back;
	auto with = [](uint8_t flags, uint32_t sense_len, uint32_t resp_len, size_t extra) {
		Bytes b = cat({{RSP, 0, 0, 0},
		               be32(1),
		               kTagBytes,
		               {0, 0},
		               {flags, 0},
		               be32(0),
		               be32(0),
		               be32(sense_len),
		               be32(resp_len),
		               pattern(extra)});
		return b;
	};
	EXPECT_FALSE(parse_rsp(with(RSP_RSPVALID, 0, 0xffffffffu, 8), &back));
	EXPECT_FALSE(parse_rsp(with(RSP_SNSVALID, 0xffffffffu, 0, 8), &back));
	EXPECT_FALSE(
	    parse_rsp(with(RSP_RSPVALID | RSP_SNSVALID, 0xffffffffu, 0xffffffffu, 8), &back));
	// Sums that wrap to something small in 32 bits: 0, and 0x1f + 0xffffffe1 = 0.
	EXPECT_FALSE(
	    parse_rsp(with(RSP_RSPVALID | RSP_SNSVALID, 0x80000000u, 0x80000000u, 8), &back));
	EXPECT_FALSE(parse_rsp(with(RSP_RSPVALID | RSP_SNSVALID, 0xffffffe1u, 0x1f, 64), &back));
	EXPECT_FALSE(parse_rsp(with(RSP_RSPVALID | RSP_SNSVALID, 4, 0xfffffffcu, 8), &back));
	// One byte too many.
	EXPECT_FALSE(parse_rsp(with(RSP_RSPVALID | RSP_SNSVALID, 5, 4, 8), &back));
	ASSERT_TRUE(parse_rsp(with(RSP_RSPVALID | RSP_SNSVALID, 4, 4, 8), &back));
	EXPECT_EQ(back.resp_data.size(), 4u);
	EXPECT_EQ(back.sense.size(), 4u);
	// A length with its VALID bit clear is not counted.
	const Bytes sense_only = with(RSP_SNSVALID, 4, 0xffffffffu, 4);
	ASSERT_TRUE(parse_rsp(sense_only, &back));
	EXPECT_TRUE(back.resp_data.empty());
	EXPECT_EQ(back.sense.data(), sense_only.data() + 36);
	EXPECT_EQ(back.sense.size(), 4u);
	ASSERT_TRUE(parse_rsp(with(0, 0xffffffffu, 0xffffffffu, 0), &back));
	EXPECT_TRUE(back.resp_data.empty());
	EXPECT_TRUE(back.sense.empty());

	Bytes b = rsp_tm(0);
	b[0] = CMD;
	EXPECT_FALSE(parse_rsp(b, &back));
}

TEST(SrpTskMgmt, AbortTaskAsIbSrpSendsIt)
{
	// srp_send_tsk_mgmt: its own tag, the LUN, ABORT TASK, the tag of the task to abort.
	const Bytes task = {0x05, 0, 0, 0, 0, 0, 0, 0};
	const Bytes tm_tag = {0x06, 0, 0, 0x80, 0, 0, 0, 0}; // ib_srp's SRP_TAG_TSK_MGMT bit
	const Bytes want = cat({{TSK_MGMT, 0, 0, 0, 0, 0, 0, 0},
	                        tm_tag,
	                        {0, 0, 0, 0},
	                        kLun1,
	                        {0, 0, TSK_ABORT_TASK, 0},
	                        task,
	                        Bytes(8, 0)});
	ASSERT_EQ(want.size(), kTskMgmtLen);
	TskMgmt t;
	ASSERT_TRUE(parse_tsk_mgmt(want, &t));
	EXPECT_EQ(t.tag, tag_of(tm_tag));
	EXPECT_EQ(Bytes(t.lun, t.lun + 8), kLun1);
	EXPECT_EQ(t.func, TSK_ABORT_TASK);
	EXPECT_EQ(t.task_tag, tag_of(task));
	EXPECT_EQ(t.sol_not, 0);
	Bytes out(64, 0xee);
	ASSERT_EQ(build_tsk_mgmt(t, out), kTskMgmtLen);
	EXPECT_EQ(first(out, kTskMgmtLen), want);
	Bytes small(kTskMgmtLen - 1);
	EXPECT_EQ(build_tsk_mgmt(t, small), 0u);
	for (size_t n = 0; n < kTskMgmtLen; n++)
		EXPECT_FALSE(parse_tsk_mgmt(first(want, n), &t)) << n;
	Bytes bad = want;
	bad[0] = CMD;
	EXPECT_FALSE(parse_tsk_mgmt(bad, &t));
}

TEST(SrpOther, CreditRequest)
{
	const Bytes want = cat({{CRED_REQ, 0x02, 0, 0}, be32(16), kTagBytes});
	CredReq c;
	c.tag = tag_of(kTagBytes);
	c.req_lim_delta = 16;
	c.sol_not = 0x02;
	Bytes out(32, 0xee);
	ASSERT_EQ(build_cred_req(c, out), kCredReqLen);
	EXPECT_EQ(first(out, kCredReqLen), want);
	CredReq back;
	ASSERT_TRUE(parse_cred_req(want, &back));
	EXPECT_EQ(back.tag, c.tag);
	EXPECT_EQ(back.req_lim_delta, 16u);
	EXPECT_EQ(back.sol_not, 0x02);
	Bytes small(kCredReqLen - 1);
	EXPECT_EQ(build_cred_req(c, small), 0u);
	for (size_t n = 0; n < kCredReqLen; n++)
		EXPECT_FALSE(parse_cred_req(first(want, n), &back)) << n;
	EXPECT_FALSE(parse_cred_req(cat({{AER_REQ}, first(want, 15)}), &back));
}

TEST(SrpOther, AsyncEventRequest)
{
	const Bytes want = cat({{AER_REQ, 0, 0, 0},
	                        be32(2),
	                        kTagBytes,
	                        {0, 0, 0, 0},
	                        kLun1,
	                        be32(18),
	                        {0, 0, 0, 0},
	                        kSense});
	AerReq a;
	ASSERT_TRUE(parse_aer_req(want, &a));
	EXPECT_EQ(a.tag, tag_of(kTagBytes));
	EXPECT_EQ(a.req_lim_delta, 2u);
	EXPECT_EQ(Bytes(a.lun, a.lun + 8), kLun1);
	EXPECT_EQ(a.sense.data(), want.data() + 36);
	EXPECT_EQ(a.sense.size(), 18u);
	for (size_t n = 0; n < want.size(); n++)
		EXPECT_FALSE(parse_aer_req(first(want, n), &a)) << n;
	Bytes huge = want;
	huge[28] = huge[29] = huge[30] = huge[31] = 0xff;
	EXPECT_FALSE(parse_aer_req(huge, &a));
	Bytes bad = want;
	bad[0] = CRED_REQ;
	EXPECT_FALSE(parse_aer_req(bad, &a));
}

TEST(SrpOther, TagOnlyIus)
{
	for (uint8_t op : {uint8_t(CRED_RSP), uint8_t(AER_RSP), uint8_t(I_LOGOUT)}) {
		const Bytes want = cat({{op, 0, 0, 0, 0, 0, 0, 0}, kTagBytes});
		Bytes out(16, 0xee);
		ASSERT_EQ(build_tag_iu(op, tag_of(kTagBytes), out), kLogoutLen);
		EXPECT_EQ(out, want);
		uint64_t tag = 0;
		ASSERT_TRUE(parse_tag_iu(want, op, &tag));
		EXPECT_EQ(tag, tag_of(kTagBytes));
		EXPECT_FALSE(parse_tag_iu(want, uint8_t(op ^ 1), &tag));
		for (size_t n = 0; n < kLogoutLen; n++)
			EXPECT_FALSE(parse_tag_iu(first(want, n), op, &tag)) << n;
		Bytes small(15);
		EXPECT_EQ(build_tag_iu(op, 1, small), 0u);
	}
}

TEST(SrpOther, TargetLogout)
{
	const Bytes want = cat({{T_LOGOUT, 0, 0, 0}, be32(0x00000001), kTagBytes});
	TLogout t;
	t.reason = 1;
	t.tag = tag_of(kTagBytes);
	Bytes out(16, 0xee);
	ASSERT_EQ(build_t_logout(t, out), kLogoutLen);
	EXPECT_EQ(out, want);
	TLogout back;
	ASSERT_TRUE(parse_t_logout(want, &back));
	EXPECT_EQ(back.reason, 1u);
	EXPECT_EQ(back.tag, t.tag);
	for (size_t n = 0; n < kLogoutLen; n++)
		EXPECT_FALSE(parse_t_logout(first(want, n), &back)) << n;
	Bytes small(15);
	EXPECT_EQ(build_t_logout(t, small), 0u);
	Bytes bad = want;
	bad[0] = I_LOGOUT;
	EXPECT_FALSE(parse_t_logout(bad, &back));
}

TEST(SrpOther, Opcode)
{
	EXPECT_EQ(iu_opcode({}), -1);
	const Bytes b = {RSP};
	EXPECT_EQ(iu_opcode(b), RSP);
	EXPECT_EQ(iu_opcode(cmd_imm()), CMD);
}

} // namespace
} // namespace ulp::srp
