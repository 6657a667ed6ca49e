// SPDX-License-Identifier: MIT
// The iSER header and CM private data against the byte layout Linux uses (struct iser_ctrl,
// struct iser_cm_hdr in drivers/infiniband/ulp/iser/iscsi_iser.h).
#include "iscsi/pdu.h"
#include "iser/proto.h"

#include <gtest/gtest.h>

#include <array>
#include <string>
#include <vector>

namespace ulp::iser
{

using namespace ulp::iscsi;
namespace
{

TEST(IserProto, HeaderBytesAsLinuxLaysThemOut)
{
	IserHdr h;
	h.wsv = true;
	h.rsv = true;
	h.write_stag = 0x11223344;
	h.write_va = 0x0102030405060708ull;
	h.read_stag = 0x55667788;
	h.read_va = 0x1112131415161718ull;
	std::array<uint8_t, kIserHdrLen> b{};
	build_iser_hdr(h, b);
	const std::array<uint8_t, kIserHdrLen> want = {
	    0x1c, 0,    0,    0,                            // ISCSI_CTRL | ISER_WSV | ISER_RSV
	    0x11, 0x22, 0x33, 0x44,                         // write_stag
	    0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, // write_va
	    0x55, 0x66, 0x77, 0x88,                         // read_stag
	    0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, // read_va
	};
	EXPECT_EQ(b, want);
	IserHdr back;
	ASSERT_EQ(parse_iser_hdr(b, &back), IserError::None);
	EXPECT_EQ(back, h);
}

TEST(IserProto, ParseChecks)
{
	std::array<uint8_t, kIserHdrLen> b{};
	IserHdr h;
	EXPECT_EQ(parse_iser_hdr(std::span(b).first(27), &h), IserError::Short);
	b[0] = 0x00;
	EXPECT_EQ(parse_iser_hdr(b, &h), IserError::BadOpcode);
	b[0] = 0x40;
	EXPECT_EQ(parse_iser_hdr(b, &h), IserError::BadOpcode);
	b[0] = 0x28; // Hello with W
	EXPECT_EQ(parse_iser_hdr(b, &h), IserError::StagsOnHello);
	b[0] = 0x20;
	ASSERT_EQ(parse_iser_hdr(b, &h), IserError::None);
	EXPECT_EQ(h.opcode, IserOpcode::Hello);
	b[0] = 0x13; // reserved low bits: ignored
	b[1] = 0xff;
	ASSERT_EQ(parse_iser_hdr(b, &h), IserError::None);
	EXPECT_EQ(h.opcode, IserOpcode::Control);
	EXPECT_FALSE(h.wsv);
	EXPECT_FALSE(h.rsv);
}

TEST(IserProto, CmHeader)
{
	std::array<uint8_t, kIserCmHdrLen> b{};
	build_iser_cm_hdr(IserCmHdr{ISER_ZBVA_NOT_SUP | ISER_SEND_W_INV_NOT_SUP}, b);
	EXPECT_EQ(b, (std::array<uint8_t, 4>{0xc0, 0, 0, 0}));
	IserCmHdr h;
	EXPECT_FALSE(parse_iser_cm_hdr(std::span(b).first(3), &h));
	ASSERT_TRUE(parse_iser_cm_hdr(b, &h));
	EXPECT_EQ(h.flags, 0xc0);
}

// parse_iser_message: what both iSER ends take from a receive buffer.
TEST(IserProto, MessageIsHeaderThenUnpaddedPdu)
{
	std::vector<uint8_t> m(kIserHdrLen + kBhsLen + 3, 0);
	IserHdr h;
	build_iser_hdr(h, std::span<uint8_t, kIserHdrLen>(m.data(), kIserHdrLen));
	uint8_t *bhs = m.data() + kIserHdrLen;
	bhs[0] = 0x40; // NOP-Out, immediate
	bhs[1] = 0x80; // F
	bhs[7] = 3;    // DataSegmentLength 3, no padding after it (RFC 7145 7.3)
	m[kIserHdrLen + kBhsLen] = 'a';
	IserHdr ih;
	Pdu pdu;
	PduError pe = PduError::BadAhs;
	std::string why;
	ASSERT_TRUE(parse_iser_message(m, 8192, &ih, &pdu, &pe, &why)) << why;
	EXPECT_EQ(pe, PduError::None);
	EXPECT_EQ(pdu.opcode(), Opcode::NopOut);
	ASSERT_EQ(pdu.data.size(), 3u);
	EXPECT_EQ(pdu.data[0], 'a');

	// A Hello: iSER-assisted login, which neither end offers.
	h.opcode = IserOpcode::Hello;
	build_iser_hdr(h, std::span<uint8_t, kIserHdrLen>(m.data(), kIserHdrLen));
	EXPECT_FALSE(parse_iser_message(m, 8192, &ih, &pdu, &pe, &why));
	EXPECT_NE(why.find("Hello"), std::string::npos) << why;

	// Shorter than the iSER header; a PDU cut inside its BHS.
	EXPECT_FALSE(parse_iser_message(std::span(m).first(10), 8192, &ih, &pdu, &pe, &why));
	h.opcode = IserOpcode::Control;
	build_iser_hdr(h, std::span<uint8_t, kIserHdrLen>(m.data(), kIserHdrLen));
	EXPECT_FALSE(
	    parse_iser_message(std::span(m).first(kIserHdrLen + 20), 8192, &ih, &pdu, &pe, &why));
}

} // namespace
} // namespace ulp::iser
