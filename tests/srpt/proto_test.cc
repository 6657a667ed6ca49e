// SPDX-License-Identifier: MIT
// The SRP information units (srpt/proto.h) against the bytes Linux's ib_srp and ib_srpt put
// on the wire (include/scsi/srp.h; srp_send_req, srp_map_data, srp_queuecommand,
// srpt_build_cmd_rsp), every refusal reached by a crafted IU, and every truncation of a
// valid IU refused without a read past it (run under ASan too: -DULP_SANITIZE=ON).
#include "srpt/proto.h"

#include <gtest/gtest.h>

#include <cstring>
#include <initializer_list>
#include <set>
#include <string>
#include <vector>

namespace ulp::srp
{
namespace
{

using Bytes = std::vector<uint8_t>;

Bytes cat(std::initializer_list<Bytes> parts)
{
	Bytes out;
	for (const Bytes &p : parts)
		out.insert(out.end(), p.begin(), p.end());
	return out;
}

// The tag as the initiator's host wrote it: opaque bytes, read with memcpy.
uint64_t tag_of(const Bytes &b)
{
	uint64_t t;
	std::memcpy(&t, b.data(), 8);
	return t;
}

// Little-endian hosts (x86, arm64) write tag 42 as these bytes: the codec must not swap.
const Bytes kTagBytes = {0x2a, 0, 0, 0, 0, 0, 0, 0};

// The first n bytes in a heap block of exactly n bytes: ASan reports any read past it.
Bytes first(const Bytes &b, size_t n)
{
	return Bytes(b.begin(), b.begin() + static_cast<ptrdiff_t>(n));
}

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

// ---- SRP_CMD ---------------------------------------------------------------------------

const Bytes kLun1 = {0x00, 0x01, 0, 0, 0, 0, 0, 0}; // SAM single-level LUN 1

// SRP_CMD's fixed part: opcode, sol_not, reserved, buf_fmt, the counts, tag, reserved, LUN,
// reserved, task_attr, reserved, add_cdb_len, the 16-byte CDB.
Bytes cmd_hdr(uint8_t buf_fmt, uint8_t out_cnt, uint8_t in_cnt, uint8_t add_cdb_len,
              const Bytes &cdb16)
{
	return cat({{CMD, 0, 0, 0, 0, buf_fmt, out_cnt, in_cnt},
	            kTagBytes,
	            {0, 0, 0, 0},
	            kLun1,
	            {0, ATTR_SIMPLE, 0, add_cdb_len},
	            cdb16});
}

const Bytes kWrite10 = {0x2a, 0, 0, 0, 0x10, 0, 0, 0, 0x01, 0, 0, 0, 0, 0, 0, 0};
const Bytes kRead10 = {0x28, 0, 0, 0, 0x20, 0, 0, 0, 0x08, 0, 0, 0, 0, 0, 0, 0};

Bytes be32(uint32_t v)
{
	return {uint8_t(v >> 24), uint8_t(v >> 16), uint8_t(v >> 8), uint8_t(v)};
}

Bytes desc(uint64_t va, uint32_t key, uint32_t len)
{
	return cat({be32(uint32_t(va >> 32)), be32(uint32_t(va)), be32(key), be32(len)});
}

Bytes pattern(size_t n)
{
	Bytes b(n);
	for (size_t i = 0; i < n; i++)
		b[i] = uint8_t(i * 7 + 1);
	return b;
}

// ib_srp with immediate data: a 512-byte WRITE, buf_fmt IMM << 4, the length at 48, the
// data at SRP_IMM_DATA_OFFSET (68) after 16 bytes of room for additional CDB bytes.
Bytes cmd_imm()
{
	return cat({cmd_hdr(0x30, 0, 0, 0, kWrite10), be32(512), Bytes(16, 0), pattern(512)});
}

// A direct READ of 4 KiB: one descriptor after the CDB.
Bytes cmd_direct_read()
{
	return cat({cmd_hdr(0x01, 0, 1, 0, kRead10), desc(0x00007f1234560000u, 0x1234, 4096)});
}

// An indirect WRITE, the whole table inline: three entries.
Bytes cmd_indirect_write()
{
	return cat({cmd_hdr(0x20, 3, 0, 0, kWrite10),
	            desc(0x00000000dead0000u, 0x77, 48), // table descriptor: 3 entries
	            be32(4096 + 8192 + 512),             // total length
	            desc(0x1000, 0x11, 4096), desc(0x20000, 0x12, 8192),
	            desc(0x300000, 0x13, 512)});
}

// An indirect READ whose table (300 entries) is in initiator memory; 2 entries inline.
Bytes cmd_indirect_read_external()
{
	return cat({cmd_hdr(0x02, 0, 2, 0, kRead10), desc(0x00000000beef0000u, 0x99, 300 * 16),
	            be32(300 * 4096), desc(0x10000, 0x21, 4096), desc(0x20000, 0x21, 4096)});
}

// A 32-byte CDB (a variable-length CDB: 0x7f): 16 additional bytes, then a direct READ.
const Bytes kCdb32 = [] {
	Bytes c = pattern(32);
	c[0] = 0x7f;
	c[7] = 32 - 8; // additional CDB length of the variable-length CDB itself
	return c;
}();
Bytes cmd_long_cdb()
{
	return cat({cmd_hdr(0x01, 0, 1, 16, first(kCdb32, 16)),
	            Bytes(kCdb32.begin() + 16, kCdb32.end()), desc(0x4000, 0x5, 512)});
}

void expect_common(const Cmd &c)
{
	EXPECT_EQ(c.tag, tag_of(kTagBytes));
	EXPECT_EQ(Bytes(c.lun, c.lun + 8), kLun1);
	EXPECT_EQ(c.lun_raw, 0x0001000000000000u);
	EXPECT_EQ(c.task_attr, ATTR_SIMPLE);
	EXPECT_EQ(c.sol_not, 0);
}

bool inside(std::span<const uint8_t> s, const Bytes &b)
{
	return s.empty() || (s.data() >= b.data() && s.data() + s.size() <= b.data() + b.size());
}

TEST(SrpCmd, ImmediateWriteAsIbSrpSendsIt)
{
	const Bytes b = cmd_imm();
	ASSERT_EQ(b.size(), 68u + 512);
	Cmd c;
	CmdParseOpts o;
	o.imm_data_offset = 68;
	ASSERT_EQ(parse_cmd(b, o, &c), CmdError::None);
	expect_common(c);
	EXPECT_EQ(Bytes(c.cdb.begin(), c.cdb.end()), kWrite10);
	EXPECT_EQ(c.out_fmt, DescFmt::Immediate);
	EXPECT_EQ(c.in_fmt, DescFmt::None);
	EXPECT_TRUE(c.write());
	EXPECT_FALSE(c.read());
	EXPECT_EQ(c.data_len, 512u);
	EXPECT_EQ(c.imm.data(), b.data() + 68);
	EXPECT_EQ(c.imm.size(), 512u);
	EXPECT_EQ(c.ndescs, 0u);
	EXPECT_TRUE(c.descs.empty());

	CmdOut w;
	w.tag = tag_of(kTagBytes);
	w.lun = kLun1.data();
	w.cdb = kWrite10;
	w.out_fmt = DescFmt::Immediate;
	w.imm_data_offset = 68;
	const Bytes data = pattern(512);
	w.imm = data;
	Bytes out(1024, 0xee);
	ASSERT_EQ(build_cmd(w, out), b.size());
	EXPECT_EQ(first(out, b.size()), b);
	// Exactly the size fits; a byte less does not.
	Bytes exact(b.size());
	EXPECT_EQ(build_cmd(w, exact), b.size());
	Bytes small(b.size() - 1);
	EXPECT_EQ(build_cmd(w, small), 0u);
}

TEST(SrpCmd, DirectRead)
{
	const Bytes b = cmd_direct_read();
	ASSERT_EQ(b.size(), 64u);
	Cmd c;
	ASSERT_EQ(parse_cmd(b, {}, &c), CmdError::None);
	expect_common(c);
	EXPECT_EQ(c.in_fmt, DescFmt::Direct);
	EXPECT_TRUE(c.read());
	EXPECT_FALSE(c.write());
	EXPECT_EQ(c.data_len, 4096u);
	ASSERT_EQ(c.ndescs, 1u);
	EXPECT_EQ(c.descs.data(), b.data() + 48);
	EXPECT_EQ(c.descs.size(), kDescLen);
	const DirectDesc d = desc_at(c.descs, 0);
	EXPECT_EQ(d.va, 0x00007f1234560000u);
	EXPECT_EQ(d.key, 0x1234u);
	EXPECT_EQ(d.len, 4096u);
	EXPECT_FALSE(c.table_external());

	// A count of 0 is accepted too; more than one is not.
	Bytes b0 = b;
	b0[7] = 0;
	ASSERT_EQ(parse_cmd(b0, {}, &c), CmdError::None);
	EXPECT_EQ(c.data_len, 4096u);
	Bytes b2 = b;
	b2[7] = 2;
	EXPECT_EQ(parse_cmd(b2, {}, &c), CmdError::BadDescCount);
	// The other direction's count is not looked at.
	Bytes bo = b;
	bo[6] = 9;
	EXPECT_EQ(parse_cmd(bo, {}, &c), CmdError::None);

	CmdOut w;
	w.tag = tag_of(kTagBytes);
	w.lun = kLun1.data();
	w.cdb = kRead10;
	w.in_fmt = DescFmt::Direct;
	const DirectDesc one[] = {d};
	w.descs = one;
	Bytes out(256, 0xee);
	ASSERT_EQ(build_cmd(w, out), b.size());
	EXPECT_EQ(first(out, b.size()), b);
	const DirectDesc two[] = {d, d};
	w.descs = two;
	EXPECT_EQ(build_cmd(w, out), 0u);
	w.descs = {};
	EXPECT_EQ(build_cmd(w, out), 0u);
}

TEST(SrpCmd, IndirectWriteWholeTableInline)
{
	const Bytes b = cmd_indirect_write();
	ASSERT_EQ(b.size(), 48u + 20 + 48);
	Cmd c;
	ASSERT_EQ(parse_cmd(b, {}, &c), CmdError::None);
	expect_common(c);
	EXPECT_EQ(c.out_fmt, DescFmt::Indirect);
	EXPECT_EQ(c.data_len, 4096u + 8192 + 512);
	EXPECT_EQ(c.ndescs, 3u);
	EXPECT_EQ(c.table_entries, 3u);
	EXPECT_FALSE(c.table_external());
	EXPECT_EQ(c.table.va, 0xdead0000u);
	EXPECT_EQ(c.table.key, 0x77u);
	EXPECT_EQ(c.table.len, 48u);
	EXPECT_EQ(c.descs.data(), b.data() + 68);
	EXPECT_EQ(c.descs.size(), 48u);
	EXPECT_EQ(desc_at(c.descs, 1).va, 0x20000u);
	EXPECT_EQ(desc_at(c.descs, 2).len, 512u);
	uint64_t sum = 0;
	EXPECT_TRUE(check_desc_list(c.descs, c.ndescs, &sum));
	EXPECT_EQ(sum, c.data_len);

	CmdOut w;
	w.tag = tag_of(kTagBytes);
	w.lun = kLun1.data();
	w.cdb = kWrite10;
	w.out_fmt = DescFmt::Indirect;
	const DirectDesc list[] = {desc_at(c.descs, 0), desc_at(c.descs, 1), desc_at(c.descs, 2)};
	w.descs = list;
	w.table = {0xdead0000u, 0x77, 0}; // len from table_entries
	w.table_entries = 3;
	w.total_len = c.data_len;
	Bytes out(256, 0xee);
	ASSERT_EQ(build_cmd(w, out), b.size());
	EXPECT_EQ(first(out, b.size()), b);
	w.table.len = 48; // given and consistent
	ASSERT_EQ(build_cmd(w, out), b.size());
	EXPECT_EQ(first(out, b.size()), b);
	w.table.len = 32; // given and not
	EXPECT_EQ(build_cmd(w, out), 0u);
	w.table.len = 0;
	w.table_entries = 2; // a partial list longer than the table
	EXPECT_EQ(build_cmd(w, out), 0u);
}

TEST(SrpCmd, IndirectReadExternalTable)
{
	const Bytes b = cmd_indirect_read_external();
	ASSERT_EQ(b.size(), 48u + 20 + 32);
	Cmd c;
	ASSERT_EQ(parse_cmd(b, {}, &c), CmdError::None);
	expect_common(c);
	EXPECT_EQ(c.in_fmt, DescFmt::Indirect);
	EXPECT_EQ(c.ndescs, 2u);
	EXPECT_EQ(c.table_entries, 300u);
	EXPECT_TRUE(c.table_external());
	EXPECT_EQ(c.table.va, 0xbeef0000u);
	EXPECT_EQ(c.table.len, 300u * 16);
	EXPECT_EQ(c.data_len, 300u * 4096);
	EXPECT_EQ(c.descs.size(), 32u);

	Cmd c2;
	CmdParseOpts o;
	o.max_table_entries = 300;
	EXPECT_EQ(parse_cmd(b, o, &c2), CmdError::None);
	o.max_table_entries = 299;
	EXPECT_EQ(parse_cmd(b, o, &c2), CmdError::TableTooLarge);

	// The fetched table, checked once it is here.
	Bytes table;
	for (int i = 0; i < 300; i++)
		table = cat({table, desc(0x10000u * (i + 1), 0x21, 4096)});
	uint64_t sum = 0;
	EXPECT_TRUE(check_desc_list(table, c.table_entries, &sum));
	EXPECT_EQ(sum, c.data_len);

	CmdOut w;
	w.tag = tag_of(kTagBytes);
	w.lun = kLun1.data();
	w.cdb = kRead10;
	w.in_fmt = DescFmt::Indirect;
	const DirectDesc list[] = {desc_at(c.descs, 0), desc_at(c.descs, 1)};
	w.descs = list;
	w.table = {0xbeef0000u, 0x99, 300 * 16};
	w.table_entries = 300;
	w.total_len = 300 * 4096;
	Bytes out(256, 0xee);
	ASSERT_EQ(build_cmd(w, out), b.size());
	EXPECT_EQ(first(out, b.size()), b);
}

TEST(SrpCmd, AdditionalCdbBytes)
{
	const Bytes b = cmd_long_cdb();
	ASSERT_EQ(b.size(), 48u + 16 + 16);
	Cmd c;
	ASSERT_EQ(parse_cmd(b, {}, &c), CmdError::None);
	EXPECT_EQ(c.cdb.data(), b.data() + 32);
	EXPECT_EQ(Bytes(c.cdb.begin(), c.cdb.end()), kCdb32);
	EXPECT_EQ(c.descs.data(), b.data() + 64);
	EXPECT_EQ(c.data_len, 512u);
	// The low two bits of add_cdb_len are reserved: ignored.
	Bytes r = b;
	r[31] = 16 | 3;
	ASSERT_EQ(parse_cmd(r, {}, &c), CmdError::None);
	EXPECT_EQ(c.cdb.size(), 32u);

	CmdOut w;
	w.tag = tag_of(kTagBytes);
	w.lun = kLun1.data();
	w.cdb = kCdb32;
	w.in_fmt = DescFmt::Direct;
	const DirectDesc one[] = {{0x4000, 0x5, 512}};
	w.descs = one;
	Bytes out(512, 0xee);
	ASSERT_EQ(build_cmd(w, out), b.size());
	EXPECT_EQ(first(out, b.size()), b);

	// Additional CDB bytes come in whole words, at most 252 of them.
	const Bytes cdb18(18, 1), cdb20(20, 1), cdb268(kMaxCdbLen, 1), cdb269(kMaxCdbLen + 1, 1);
	w.cdb = cdb18;
	EXPECT_EQ(build_cmd(w, out), 0u);
	w.cdb = cdb20;
	EXPECT_EQ(build_cmd(w, out), 48u + 4 + 16);
	EXPECT_EQ(out[31], 4);
	w.cdb = cdb268;
	ASSERT_EQ(build_cmd(w, out), 48u + 252 + 16);
	EXPECT_EQ(out[31], 252);
	ASSERT_EQ(parse_cmd(first(out, 48 + 252 + 16), {}, &c), CmdError::None);
	EXPECT_EQ(c.cdb.size(), kMaxCdbLen);
	w.cdb = cdb269;
	EXPECT_EQ(build_cmd(w, out), 0u);
	// A CDB shorter than 16 bytes is zero-padded.
	const Bytes cdb6 = {0x12, 0, 0, 0, 0x24, 0};
	w.cdb = cdb6;
	w.in_fmt = DescFmt::None;
	w.descs = {};
	ASSERT_EQ(build_cmd(w, out), kCmdLen);
	EXPECT_EQ(first(out, 48), cmd_hdr(0x00, 0, 0, 0, cat({cdb6, Bytes(10, 0)})));
}

TEST(SrpCmd, NoData)
{
	const Bytes b = cmd_hdr(0x00, 0, 0, 0, Bytes(16, 0)); // TEST UNIT READY
	Cmd c;
	ASSERT_EQ(parse_cmd(b, {}, &c), CmdError::None);
	EXPECT_FALSE(c.read());
	EXPECT_FALSE(c.write());
	EXPECT_EQ(c.data_len, 0u);
	EXPECT_EQ(c.cdb.size(), 16u);
	EXPECT_TRUE(c.descs.empty());
	EXPECT_TRUE(c.imm.empty());
}

TEST(SrpCmd, FieldsAsSent)
{
	Bytes b = cmd_direct_read();
	b[1] = 0x06;       // sol_not
	b[29] = ATTR_HEAD; // task_attr
	for (int i = 0; i < 8; i++)
		b[20 + i] = uint8_t(0x40 + i); // a LUN with every byte set
	Cmd c;
	ASSERT_EQ(parse_cmd(b, {}, &c), CmdError::None);
	EXPECT_EQ(c.sol_not, 0x06);
	EXPECT_EQ(c.task_attr, ATTR_HEAD);
	EXPECT_EQ(c.lun_raw, 0x4041424344454647u);
	EXPECT_EQ(Bytes(c.lun, c.lun + 8), Bytes(b.begin() + 20, b.begin() + 28));
}

// Each refusal, from a crafted IU.
TEST(SrpCmd, EveryError)
{
	Cmd c;
	CmdParseOpts imm;
	imm.imm_data_offset = 68;

	// Short: the fixed part; the additional CDB bytes; a direct descriptor; the indirect
	// header; the partial list; the immediate header.
	EXPECT_EQ(parse_cmd(first(cmd_direct_read(), 47), {}, &c), CmdError::Short);
	EXPECT_EQ(parse_cmd(first(cmd_long_cdb(), 63), {}, &c), CmdError::Short);
	EXPECT_EQ(parse_cmd(first(cmd_direct_read(), 63), {}, &c), CmdError::Short);
	EXPECT_EQ(parse_cmd(first(cmd_indirect_write(), 67), {}, &c), CmdError::Short);
	EXPECT_EQ(parse_cmd(first(cmd_indirect_write(), 115), {}, &c), CmdError::Short);
	EXPECT_EQ(parse_cmd(first(cmd_imm(), 51), imm, &c), CmdError::Short);

	Bytes b = cmd_direct_read();
	b[0] = TSK_MGMT;
	EXPECT_EQ(parse_cmd(b, {}, &c), CmdError::BadOpcode);

	b = cmd_direct_read();
	b[5] = 0x11;
	EXPECT_EQ(parse_cmd(b, {}, &c), CmdError::BothDirections);
	// The tag and LUN are there to answer with.
	EXPECT_EQ(c.tag, tag_of(kTagBytes));
	EXPECT_EQ(c.lun_raw, 0x0001000000000000u);
	b[5] = 0x22;
	EXPECT_EQ(parse_cmd(b, {}, &c), CmdError::BothDirections);

	for (uint8_t f : {0x04, 0x0f, 0x40, 0xf0, 0x03}) {
		b[5] = f;
		EXPECT_EQ(parse_cmd(b, imm, &c), CmdError::BadFormat) << int(f);
	}

	EXPECT_EQ(parse_cmd(cmd_imm(), {}, &c), CmdError::NoImmediate);

	b = cmd_indirect_write();
	b[48 + 15] = 40; // table.len not a multiple of 16
	EXPECT_EQ(parse_cmd(b, {}, &c), CmdError::BadDescCount);
	b = cmd_indirect_write();
	b[48 + 15] = 32; // table of 2 entries, partial list of 3
	EXPECT_EQ(parse_cmd(b, {}, &c), CmdError::BadDescCount);

	// Immediate data overlapping its header: the granted offset is below it.
	imm.imm_data_offset = 50;
	EXPECT_EQ(parse_cmd(cmd_imm(), imm, &c), CmdError::BadImmediate);
	imm.imm_data_offset = 51;
	EXPECT_EQ(parse_cmd(cmd_imm(), imm, &c), CmdError::BadImmediate);
	imm.imm_data_offset = 52; // right after it: fine (the data then starts at 52)
	b = cmd_imm();
	EXPECT_EQ(parse_cmd(b, imm, &c), CmdError::None);
	EXPECT_EQ(c.imm.data(), b.data() + 52);
	EXPECT_EQ(c.imm.size(), 512u);
	// ... or 32 additional CDB bytes push the header to 80, past offset 68.
	imm.imm_data_offset = 68;
	b = cat({cmd_hdr(0x30, 0, 0, 32, kWrite10), Bytes(32, 0), be32(4), pattern(4)});
	EXPECT_EQ(parse_cmd(b, imm, &c), CmdError::BadImmediate);
	// The data past the IU.
	b = cmd_imm();
	b[51] = 0x01; // len 513
	EXPECT_EQ(parse_cmd(b, imm, &c), CmdError::BadImmediate);
	// 68 + 0xfffffff0 wraps to 52 in 32 bits: inside the IU there, not here.
	b = cmd_imm();
	b[48] = b[49] = b[50] = 0xff;
	b[51] = 0xf0;
	EXPECT_EQ(parse_cmd(b, imm, &c), CmdError::BadImmediate);
	b[51] = 0xff;
	EXPECT_EQ(parse_cmd(b, imm, &c), CmdError::BadImmediate);

	CmdParseOpts small;
	small.max_table_entries = 2;
	EXPECT_EQ(parse_cmd(cmd_indirect_write(), small, &c), CmdError::TableTooLarge);

	b = cmd_indirect_write();
	b[67] ^= 1; // total length off by one
	EXPECT_EQ(parse_cmd(b, {}, &c), CmdError::LengthMismatch);
	// Three entries of 2 GiB: 6 GiB, which in 32 bits is the 2 GiB the header claims.
	b = cat({cmd_hdr(0x20, 3, 0, 0, kWrite10), desc(0xdead0000u, 0x77, 48), be32(0x80000000u),
	         desc(0x1000, 1, 0x80000000u), desc(0x2000, 1, 0x80000000u),
	         desc(0x3000, 1, 0x80000000u)});
	EXPECT_EQ(parse_cmd(b, {}, &c), CmdError::LengthMismatch);
	uint64_t sum = 0;
	check_desc_list(std::span<const uint8_t>(b).subspan(68), 3, &sum);
	EXPECT_EQ(sum, 0x180000000u);

	std::set<std::string> names;
	for (CmdError e :
	     {CmdError::None, CmdError::Short, CmdError::BadOpcode, CmdError::BothDirections,
	      CmdError::BadFormat, CmdError::NoImmediate, CmdError::BadDescCount,
	      CmdError::BadImmediate, CmdError::TableTooLarge, CmdError::LengthMismatch})
		names.insert(cmd_error_name(e));
	EXPECT_EQ(names.size(), 10u);
}

TEST(SrpCmd, ImmediateAtTheGrantedOffsetOnly)
{
	// A granted offset beyond Linux's 68: the data is where the login said.
	const Bytes b = cat({cmd_hdr(0x30, 0, 0, 0, kWrite10), be32(8), Bytes(76, 0), pattern(8)});
	Cmd c;
	CmdParseOpts o;
	o.imm_data_offset = 128;
	ASSERT_EQ(parse_cmd(b, o, &c), CmdError::None);
	EXPECT_EQ(c.imm.data(), b.data() + 128);
	EXPECT_EQ(Bytes(c.imm.begin(), c.imm.end()), pattern(8));
	// Zero bytes of immediate data at the very end of the IU.
	const Bytes z = cat({cmd_hdr(0x30, 0, 0, 0, kWrite10), be32(0), Bytes(16, 0)});
	o.imm_data_offset = 68;
	ASSERT_EQ(parse_cmd(z, o, &c), CmdError::None);
	EXPECT_EQ(c.data_len, 0u);
	EXPECT_TRUE(c.imm.empty());
}

// Every truncation of every valid IU is an error, never a read past the bytes given
// (each prefix is its own heap block of exactly n bytes, so ASan sees an over-read).
TEST(SrpCmd, EveryTruncationRefused)
{
	CmdParseOpts o;
	o.imm_data_offset = 68;
	for (const Bytes &b : {cmd_imm(), cmd_direct_read(), cmd_indirect_write(),
	                       cmd_indirect_read_external(), cmd_long_cdb()}) {
		Cmd c;
		ASSERT_EQ(parse_cmd(b, o, &c), CmdError::None);
		for (size_t n = 0; n < b.size(); n++) {
			const Bytes t = first(b, n);
			const CmdError e = parse_cmd(t, o, &c);
			EXPECT_NE(e, CmdError::None) << "length " << n << " of " << b.size();
			EXPECT_TRUE(e == CmdError::Short || e == CmdError::BadImmediate) << n;
			EXPECT_TRUE(inside(c.cdb, t) && inside(c.descs, t) && inside(c.imm, t));
		}
	}
	// The no-data command: everything below 48 bytes.
	const Bytes tur = cmd_hdr(0, 0, 0, 0, Bytes(16, 0));
	for (size_t n = 0; n < tur.size(); n++) {
		Cmd c;
		EXPECT_EQ(parse_cmd(first(tur, n), o, &c), CmdError::Short) << n;
	}
}

TEST(SrpCmd, BuilderRefusals)
{
	Bytes out(1024);
	CmdOut w;
	const DirectDesc one[] = {{1, 2, 3}};
	w.descs = one;
	w.out_fmt = DescFmt::Direct;
	w.in_fmt = DescFmt::Direct;
	EXPECT_EQ(build_cmd(w, out), 0u); // both directions
	w.out_fmt = DescFmt::None;
	w.in_fmt = DescFmt::Immediate;
	EXPECT_EQ(build_cmd(w, out), 0u); // immediate data-in
	w.in_fmt = static_cast<DescFmt>(5);
	EXPECT_EQ(build_cmd(w, out), 0u);

	// Immediate data placed over its own header, or where a long CDB put it.
	w = CmdOut{};
	w.out_fmt = DescFmt::Immediate;
	const Bytes data = pattern(8);
	w.imm = data;
	w.imm_data_offset = 51;
	EXPECT_EQ(build_cmd(w, out), 0u);
	w.imm_data_offset = 52;
	EXPECT_EQ(build_cmd(w, out), 60u);
	const Bytes cdb32(32, 1), cdb36(36, 1);
	w.cdb = cdb32; // Linux's layout: the header at 64, the data at 68
	w.imm_data_offset = 68;
	EXPECT_EQ(build_cmd(w, out), 68u + 8);
	w.cdb = cdb36; // the header at 68..72
	EXPECT_EQ(build_cmd(w, out), 0u);
	w.imm_data_offset = 72;
	EXPECT_EQ(build_cmd(w, out), 72u + 8);

	// Every output size short of the IU: 0, and nothing written past it.
	w = CmdOut{};
	w.in_fmt = DescFmt::Indirect;
	const DirectDesc list[] = {{1, 2, 3}, {4, 5, 6}};
	w.descs = list;
	w.table_entries = 2;
	w.total_len = 9;
	const size_t need = 48 + 20 + 32;
	ASSERT_EQ(build_cmd(w, out), need);
	for (size_t n = 0; n < need; n++) {
		Bytes o(n);
		EXPECT_EQ(build_cmd(w, o), 0u) << n;
	}
	// A lun of nullptr is LUN 0.
	Cmd c;
	ASSERT_EQ(parse_cmd(first(out, need), {}, &c), CmdError::None);
	EXPECT_EQ(c.lun_raw, 0u);
	EXPECT_EQ(c.data_len, 9u);
}

TEST(SrpCmd, DescriptorLists)
{
	const Bytes l = cat({desc(1, 2, 3), desc(4, 5, 6)});
	uint64_t sum = 99;
	EXPECT_TRUE(check_desc_list(l, 2, &sum));
	EXPECT_EQ(sum, 9u);
	EXPECT_TRUE(check_desc_list(l, 1, &sum));
	EXPECT_EQ(sum, 3u);
	EXPECT_TRUE(check_desc_list(l, 0, &sum));
	EXPECT_EQ(sum, 0u);
	EXPECT_FALSE(check_desc_list(l, 3, &sum)); // not all there
	EXPECT_EQ(sum, 0u);
	EXPECT_FALSE(check_desc_list(first(l, 31), 2, &sum));
	EXPECT_FALSE(check_desc_list(l, 0xffffffffu, &sum));
	const Bytes z = cat({desc(1, 2, 3), desc(4, 5, 0)}); // a zero-length entry
	EXPECT_FALSE(check_desc_list(z, 2, &sum));
	EXPECT_EQ(sum, 3u);

	const DirectDesc d = desc_at(l, 1);
	EXPECT_EQ(d.va, 4u);
	EXPECT_EQ(d.key, 5u);
	EXPECT_EQ(d.len, 6u);
	const DirectDesc past = desc_at(l, 2);
	EXPECT_EQ(past.va, 0u);
	EXPECT_EQ(past.len, 0u);
	EXPECT_EQ(desc_at(l, 0xffffffffu).len, 0u);

	uint8_t p[16];
	put_desc({0x0102030405060708u, 0x090a0b0cu, 0x0d0e0f10u}, p);
	const Bytes want = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
	EXPECT_EQ(Bytes(p, p + 16), want);
}

TEST(SrpCmd, RoundTrips)
{
	// Builder then parser, over formats, CDB lengths and list shapes.
	const Bytes data = pattern(100);
	const DirectDesc list[] = {{0x1000, 1, 10}, {0x2000, 2, 20}, {0x3000, 3, 30}};
	for (size_t cdb_len : {6u, 16u, 20u, 32u, 260u}) {
		const Bytes cdb = pattern(cdb_len);
		for (int shape = 0; shape < 6; shape++) {
			CmdOut w;
			w.tag = 0x0123456789abcdefu;
			w.lun = kLun1.data();
			w.task_attr = ATTR_ORDERED;
			w.cdb = cdb;
			CmdParseOpts o;
			switch (shape) {
			case 0:
				break;
			case 1:
				w.out_fmt = DescFmt::Direct;
				w.descs = std::span(list, 1);
				break;
			case 2:
				w.in_fmt = DescFmt::Indirect;
				w.descs = list;
				w.table_entries = 3;
				w.total_len = 60;
				break;
			case 3:
				w.out_fmt = DescFmt::Indirect;
				w.descs = std::span(list, 1);
				w.table_entries = 1000;
				w.total_len = 1 << 20;
				break;
			case 4:
			case 5:
				w.out_fmt = DescFmt::Immediate;
				w.imm = shape == 4 ? std::span(data) : std::span(data).first(0);
				w.imm_data_offset = static_cast<uint16_t>(
				    48 + (cdb_len > 16 ? cdb_len - 16 : 0) + 4);
				o.imm_data_offset = w.imm_data_offset;
				break;
			}
			Bytes out(1024);
			const size_t n = build_cmd(w, out);
			ASSERT_NE(n, 0u) << cdb_len << " " << shape;
			const Bytes iu = first(out, n);
			Cmd c;
			ASSERT_EQ(parse_cmd(iu, o, &c), CmdError::None) << cdb_len << " " << shape;
			EXPECT_EQ(c.tag, w.tag);
			EXPECT_EQ(Bytes(c.lun, c.lun + 8), kLun1);
			EXPECT_EQ(c.task_attr, ATTR_ORDERED);
			Bytes want_cdb = cdb;
			want_cdb.resize(std::max<size_t>(16, cdb_len));
			EXPECT_EQ(Bytes(c.cdb.begin(), c.cdb.end()), want_cdb);
			EXPECT_EQ(c.out_fmt, w.out_fmt);
			EXPECT_EQ(c.in_fmt, w.in_fmt);
			EXPECT_EQ(c.ndescs, w.descs.size());
			for (uint32_t i = 0; i < c.ndescs; i++) {
				EXPECT_EQ(desc_at(c.descs, i).va, w.descs[i].va);
				EXPECT_EQ(desc_at(c.descs, i).key, w.descs[i].key);
				EXPECT_EQ(desc_at(c.descs, i).len, w.descs[i].len);
			}
			EXPECT_EQ(c.table_entries, w.table_entries);
			if (w.out_fmt == DescFmt::Immediate) {
				EXPECT_EQ(c.data_len, w.imm.size());
				EXPECT_EQ(Bytes(c.imm.begin(), c.imm.end()),
				          Bytes(w.imm.begin(), w.imm.end()));
			} else if (shape == 1) {
				EXPECT_EQ(c.data_len, 10u);
			} else {
				EXPECT_EQ(c.data_len, w.total_len);
			}
		}
	}
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
