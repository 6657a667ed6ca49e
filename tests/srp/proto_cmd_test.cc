// SPDX-License-Identifier: MIT
// SRP_CMD (srp/proto.h) against the bytes Linux's ib_srp puts on the wire (srp_map_data,
// srp_queuecommand): immediate, direct, indirect and external descriptor tables, additional
// CDB bytes, every error, every truncation refused without a read past it, the builder and
// round trips (byte strings in proto_bytes.h).
#include "tests/srp/proto_bytes.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

namespace ulp::srp
{
namespace
{

using namespace test;

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

} // namespace
} // namespace ulp::srp
