// SPDX-License-Identifier: MIT
// tests/iscsi/pdu_test.cc - the PDU codec: field layouts against RFC 7143 section 11, round
// trips of every PDU type, AHS, digests, malformed input, and the stream reader.
#include "core/crc32c.h"
#include "iscsi/pdu.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

using namespace ulp;
using namespace ulp::iscsi;

namespace
{

std::vector<uint8_t> pattern(size_t n, uint8_t seed = 1)
{
	std::vector<uint8_t> v(n);
	for (size_t i = 0; i < n; i++)
		v[i] = static_cast<uint8_t>(seed + i * 7);
	return v;
}

// Encode h, frame it with ahs and data, parse it back, decode, compare.
template <class H>
void round_trip(const H &h, std::span<const uint8_t> ahs, std::span<const uint8_t> data, Digests d)
{
	Bhs bhs;
	encode(h, bhs);
	std::vector<uint8_t> wire(pdu_wire_len(ahs.size(), data.size(), d));
	ASSERT_EQ(build_pdu(wire, bhs, ahs, data, d), wire.size());
	Pdu p;
	ParseOpts o;
	o.digests = d;
	o.max_recv_dsl = kMaxDsl;
	ASSERT_EQ(parse_pdu(wire, o, &p), PduError::None);
	EXPECT_EQ(p.wire_len, wire.size());
	EXPECT_TRUE(std::equal(p.ahs.begin(), p.ahs.end(), ahs.begin(), ahs.end()));
	EXPECT_TRUE(std::equal(p.data.begin(), p.data.end(), data.begin(), data.end()));
	H back{};
	ASSERT_TRUE(decode(p.bhs, &back));
	EXPECT_EQ(back, h);
	EXPECT_EQ(bhs_ahs_len(p.bhs.data()), ahs.size());
	EXPECT_EQ(bhs_dsl(p.bhs.data()), data.size());
}

template <class H> void round_trip_all(const H &h)
{
	std::vector<uint8_t> data = pattern(13);
	std::vector<uint8_t> ahs(8);
	ASSERT_EQ(build_bidi_ahs(ahs, 0x01020304), 8u);
	for (Digests d :
	     {Digests{}, Digests{true, false}, Digests{false, true}, Digests{true, true}}) {
		round_trip(h, {}, {}, d);
		round_trip(h, {}, data, d);
		round_trip(h, ahs, data, d);
	}
}

Isid isid()
{
	return {0x80, 0x12, 0x34, 0x56, 0x78, 0x9a};
}

} // namespace

TEST(Pdu, RoundTripEveryType)
{
	round_trip_all(NopOut{true, 0x0102030405060708, 0x11, 0x22, 0x33, 0x44});
	ScsiCmd c{false, true, true, true, 5, 0x0001000000000000, 0x10, 0x8000, 0x20, 0x30, {}};
	for (int i = 0; i < 16; i++)
		c.cdb[i] = static_cast<uint8_t>(0xa0 + i);
	round_trip_all(c);
	round_trip_all(TmfReq{true, 0x7f, 7, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16});
	round_trip_all(LoginReq{true, false, Stage::Operational, Stage::FullFeature, 1, 0, isid(),
	                        0x1234, 0x55, 0x66, 0x77, 0x88});
	round_trip_all(LoginReq{false, true, Stage::Security, Stage::Security, 0, 0, isid(), 0,
	                        0x55, 0, 0x77, 0x88});
	round_trip_all(TextReq{true, false, true, 9, 0x11, 0x12, 0x13, 0x14});
	round_trip_all(DataOut{true, 9, 0x11, 0x12, 0x13, 0x14, 0x15});
	round_trip_all(LogoutReq{true, 2, 0x11, 0x1234, 0x13, 0x14});
	round_trip_all(SnackReq{3, 9, 0x11, 0x12, 0x13, 0x14, 0x15});
	round_trip_all(NopIn{9, 0x11, 0x12, 0x13, 0x14, 0x15});
	round_trip_all(ScsiRsp{true, false, true, false, 1, 2, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16,
	                       0x17, 0x18});
	round_trip_all(ScsiRsp{false, true, false, true, 0, 0x28, 0x11, 0, 1, 2, 3, 4, 5, 6});
	round_trip_all(TmfRsp{5, 0x11, 0x12, 0x13, 0x14});
	round_trip_all(LoginRsp{true, false, Stage::Security, Stage::Operational, 0, 0, isid(),
	                        0x4321, 0x11, 0x12, 0x13, 0x14, LoginStatus::AuthFailure});
	round_trip_all(LoginRsp{false, true, Stage::Operational, Stage::Security, 0, 0, isid(), 0,
	                        0x11, 0x12, 0x13, 0x14, LoginStatus::Success});
	round_trip_all(TextRsp{false, true, 9, 0x11, 0x12, 0x13, 0x14, 0x15});
	round_trip_all(DataIn{true, true, true, false, true, 0x02, 9, 0x11, 0x12, 0x13, 0x14, 0x15,
	                      0x16, 0x17, 0x18});
	round_trip_all(DataIn{false, false, false, true, false, 0, 9, 1, 2, 3, 4, 5, 6, 7, 8});
	round_trip_all(LogoutRsp{1, 0x11, 0x12, 0x13, 0x14, 2, 20});
	round_trip_all(R2t{9, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18});
	round_trip_all(AsyncMsg{9, 0x11, 0x12, 0x13, 4, 5, 6, 7, 8});
	round_trip_all(RejectPdu{RejectReason::DataDigestError, 0x11, 0x12, 0x13, 0x14});
}

// Each field at its RFC 7143 offset (a round trip alone would accept a consistent mistake).
TEST(Pdu, FieldOffsets)
{
	Bhs b;
	LoginReq lr{true,   false,      Stage::Security, Stage::Operational, 0,         0, isid(),
	            0xbeef, 0x01020304, 0x0a0b,          0x11121314,         0x21222324};
	encode(lr, b);
	EXPECT_EQ(b[0], 0x43); // 11.12: I bit and opcode 0x03
	EXPECT_EQ(b[1], 0x81); // T, CSG 0, NSG 1
	EXPECT_EQ(b[8], 0x80); // ISID at 8..13
	EXPECT_EQ(b[13], 0x9a);
	EXPECT_EQ(get_be16(&b[14]), 0xbeef);      // TSIH
	EXPECT_EQ(get_be32(&b[16]), 0x01020304u); // ITT
	EXPECT_EQ(get_be16(&b[20]), 0x0a0b);      // CID
	EXPECT_EQ(get_be32(&b[24]), 0x11121314u); // CmdSN
	EXPECT_EQ(get_be32(&b[28]), 0x21222324u); // ExpStatSN

	LoginRsp rs;
	rs.csg = Stage::Operational;
	rs.nsg = Stage::FullFeature;
	rs.transit = true;
	rs.status = LoginStatus::SessionDoesNotExist;
	rs.statsn = 0x31323334;
	encode(rs, b);
	EXPECT_EQ(b[0], 0x23);
	EXPECT_EQ(b[1], 0x87);
	EXPECT_EQ(b[36], 0x02); // Status-Class
	EXPECT_EQ(b[37], 0x0a); // Status-Detail
	EXPECT_EQ(get_be32(&b[24]), 0x31323334u);

	ScsiCmd c;
	c.read = true;
	c.attr = 1;
	c.edtl = 0x1000;
	c.cdb[0] = 0x28;
	encode(c, b);
	EXPECT_EQ(b[0], 0x01);
	EXPECT_EQ(b[1], 0xc1); // F R ATTR=1
	EXPECT_EQ(get_be32(&b[20]), 0x1000u);
	EXPECT_EQ(b[32], 0x28);

	DataIn di;
	di.final = true;
	di.has_status = true;
	di.underflow = true;
	di.status = 0x02;
	di.residual = 7;
	encode(di, b);
	EXPECT_EQ(b[1], 0x83);
	EXPECT_EQ(b[3], 0x02);
	EXPECT_EQ(get_be32(&b[44]), 7u);

	RejectPdu rj;
	rj.reason = RejectReason::ProtocolError;
	encode(rj, b);
	EXPECT_EQ(b[0], 0x3f);
	EXPECT_EQ(b[2], 0x04);
	EXPECT_EQ(get_be32(&b[16]), kReservedTag);

	TextReq tr;
	tr.final = false;
	tr.cont = true;
	encode(tr, b);
	EXPECT_EQ(b[1], 0x40);
	EXPECT_EQ(b[0], 0x04);
}

TEST(Pdu, DecodeChecksOpcode)
{
	Bhs b;
	encode(NopIn{}, b);
	NopOut n;
	EXPECT_FALSE(decode(b, &n));
	NopIn i;
	EXPECT_TRUE(decode(b, &i));
	EXPECT_FALSE(decode(std::span<const uint8_t>(b.data(), 20), &i));
	EXPECT_TRUE(opcode_defined(0x3f));
	EXPECT_FALSE(opcode_defined(0x1c));
	EXPECT_FALSE(opcode_defined(0x07));
}

TEST(Pdu, PaddingAndWireLength)
{
	EXPECT_EQ(pdu_wire_len(0, 0, {}), 48u);
	EXPECT_EQ(pdu_wire_len(0, 1, {}), 52u);
	EXPECT_EQ(pdu_wire_len(0, 4, {}), 52u);
	EXPECT_EQ(pdu_wire_len(8, 5, {true, true}), 48u + 8 + 4 + 8 + 4);
	// No data digest without data (11.1).
	EXPECT_EQ(pdu_wire_len(0, 0, {true, true}), 52u);

	Bhs b;
	encode(NopOut{}, b);
	std::vector<uint8_t> data = pattern(5);
	std::vector<uint8_t> wire(100, 0xee);
	size_t n = build_pdu(wire, b, {}, data, {false, true});
	ASSERT_EQ(n, 48u + 8 + 4);
	// Zero padding, and the data digest covers data and padding (13.1).
	EXPECT_EQ(wire[53], 0);
	EXPECT_EQ(wire[55], 0);
	std::vector<uint8_t> padded(data);
	padded.resize(8, 0);
	EXPECT_EQ(get_digest(&wire[56]), crc32c(padded));
	// Too small an output buffer writes nothing useful and says so.
	EXPECT_EQ(build_pdu(std::span<uint8_t>(wire.data(), 59), b, {}, data, {false, true}), 0u);
	// AHS must be whole words.
	uint8_t ahs3[3] = {};
	EXPECT_EQ(build_pdu(wire, b, ahs3, {}, {}), 0u);
}

TEST(Pdu, HeaderDigestCoversBhsAndAhs)
{
	Bhs b;
	encode(ScsiCmd{}, b);
	std::vector<uint8_t> ahs(8);
	build_bidi_ahs(ahs, 512);
	std::vector<uint8_t> wire(pdu_wire_len(8, 0, {true, false}));
	ASSERT_EQ(build_pdu(wire, b, ahs, {}, {true, false}), wire.size());
	EXPECT_EQ(get_digest(&wire[56]), crc32c(std::span<const uint8_t>(wire.data(), 56)));
}

TEST(Pdu, AhsExtendedCdbAndBidi)
{
	std::vector<uint8_t> cdb = pattern(32, 0x40);
	std::vector<uint8_t> ahs(kMaxAhsLen);
	size_t n = build_ext_cdb_ahs(ahs, cdb);
	ASSERT_EQ(n, 20u);                        // 4 + 16 bytes past the first 16
	EXPECT_EQ(get_be16(ahs.data()), 32 - 15); // 11.2.2.3: AHSLength = CDBLength - 15
	EXPECT_EQ(ahs[2], 1);
	n += build_bidi_ahs(std::span<uint8_t>(ahs).subspan(n), 0x10000);
	ahs.resize(n);

	ScsiCmd c;
	std::copy(cdb.begin(), cdb.begin() + 16, c.cdb.begin());
	Bhs b;
	encode(c, b);
	std::vector<uint8_t> wire(pdu_wire_len(ahs.size(), 0, {}));
	ASSERT_EQ(build_pdu(wire, b, ahs, {}, {}), wire.size());
	Pdu p;
	ASSERT_EQ(parse_pdu(wire, {}, &p), PduError::None);
	AhsInfo info;
	ASSERT_EQ(parse_ahs(p.ahs, &info), PduError::None);
	EXPECT_TRUE(info.has_bidi_read_len);
	EXPECT_EQ(info.bidi_read_len, 0x10000u);
	uint8_t full[260];
	ASSERT_EQ(scsi_cdb(p, info, full), 32u);
	EXPECT_TRUE(std::equal(cdb.begin(), cdb.end(), full));

	// A CDB of 17 bytes: one byte past 16, AHS padded to 8.
	std::vector<uint8_t> c17 = pattern(17);
	std::vector<uint8_t> a17(8);
	ASSERT_EQ(build_ext_cdb_ahs(a17, c17), 8u);
	ASSERT_EQ(parse_ahs(a17, &info), PduError::None);
	EXPECT_EQ(info.ext_cdb.size(), 1u);
	EXPECT_EQ(build_ext_cdb_ahs(std::span<uint8_t>(a17).first(4), c17), 0u); // too small
	EXPECT_EQ(build_ext_cdb_ahs(a17, pattern(16)), 0u); // no extension needed
	std::vector<uint8_t> big(300);
	EXPECT_EQ(build_ext_cdb_ahs(big, pattern(261)), 0u); // longer than any CDB
}

TEST(Pdu, MalformedAhs)
{
	AhsInfo info;
	auto bad = [&](std::vector<uint8_t> a) { return parse_ahs(a, &info); };
	EXPECT_EQ(bad({0, 0, 1, 0}), PduError::BadAhs);             // AHSLength 0
	EXPECT_EQ(bad({0, 9, 1, 0, 1, 2, 3, 4}), PduError::BadAhs); // runs past the area
	EXPECT_EQ(bad({0, 5, 7, 0, 0, 0, 0, 0}), PduError::BadAhs); // unknown type
	EXPECT_EQ(bad({0, 4, 2, 0, 0, 0, 0, 0}), PduError::BadAhs); // bidi with length 4
	EXPECT_EQ(bad({0, 5, 2, 0, 0, 0, 0, 1, 0, 5, 2, 0, 0, 0, 0, 1}), PduError::BadAhs); // twice
	EXPECT_EQ(bad({0, 2, 1, 0, 0xaa, 0, 0, 0, 0, 2, 1, 0, 0xbb, 0, 0, 0}), PduError::BadAhs);
	EXPECT_EQ(bad({0, 1}), PduError::BadAhs); // shorter than a header
	EXPECT_EQ(bad({0, 5, 2, 0, 0, 0, 0, 1}), PduError::None);

	// A PDU whose AHS is bad still parses (framing is intact) but says so.
	Bhs b;
	encode(ScsiCmd{}, b);
	std::vector<uint8_t> ahs = {0, 5, 7, 0, 0, 0, 0, 0};
	std::vector<uint8_t> wire(pdu_wire_len(8, 0, {}));
	build_pdu(wire, b, ahs, {}, {});
	Pdu p;
	EXPECT_EQ(parse_pdu(wire, {}, &p), PduError::BadAhs);
	EXPECT_EQ(p.ahs.size(), 8u);
	EXPECT_FALSE(pdu_error_fatal(PduError::BadAhs));
}

TEST(Pdu, MalformedInput)
{
	Bhs b;
	encode(TextReq{}, b);
	std::vector<uint8_t> data = pattern(100);
	std::vector<uint8_t> wire(pdu_wire_len(0, data.size(), {true, true}));
	ASSERT_EQ(build_pdu(wire, b, {}, data, {true, true}), wire.size());
	ParseOpts o;
	o.digests = {true, true};
	Pdu p;
	ASSERT_EQ(parse_pdu(wire, o, &p), PduError::None);

	// Short: every prefix is truncated.
	for (size_t n = 0; n < wire.size(); n++)
		ASSERT_EQ(parse_pdu(std::span<const uint8_t>(wire.data(), n), o, &p),
		          PduError::Truncated)
		    << n;
	// Length above MaxRecvDataSegmentLength.
	ParseOpts small = o;
	small.max_recv_dsl = 99;
	EXPECT_EQ(parse_pdu(wire, small, &p), PduError::DataTooLong);
	// A flipped bit in the header: header digest error; in the data: data digest error.
	std::vector<uint8_t> w2 = wire;
	w2[20] ^= 1;
	EXPECT_EQ(parse_pdu(w2, o, &p), PduError::HeaderDigest);
	w2 = wire;
	w2[60] ^= 0x80;
	EXPECT_EQ(parse_pdu(w2, o, &p), PduError::DataDigest);
	EXPECT_EQ(p.data.size(), 100u); // still framed
	// A non-zero padding byte is covered by the data digest.
	std::vector<uint8_t> d101 = pattern(101);
	std::vector<uint8_t> w3(pdu_wire_len(0, 101, {false, true}));
	build_pdu(w3, b, {}, d101, {false, true});
	w3[48 + 102] = 1;
	EXPECT_EQ(parse_pdu(w3, ParseOpts{kDefaultMrdsl, {false, true}, true}, &p),
	          PduError::DataDigest);
	// TotalAHSLength past the sanity cap, and a DataSegmentLength claiming more than is there.
	w2 = wire;
	w2[4] = 65;
	EXPECT_EQ(parse_pdu(w2, ParseOpts{kDefaultMrdsl, {}, true}, &p), PduError::AhsTooLong);
	w2 = wire;
	put_be24(&w2[5], 200);
	EXPECT_EQ(parse_pdu(w2, ParseOpts{kDefaultMrdsl, {}, true}, &p), PduError::Truncated);
}

// iSER: no padding after the data segment needed; TCP-style parsing requires it.
TEST(Pdu, UnpaddedSpans)
{
	Bhs b;
	encode(LoginReq{}, b);
	std::vector<uint8_t> data = pattern(5);
	std::vector<uint8_t> wire(56);
	ASSERT_EQ(build_pdu(wire, b, {}, data, {}), 56u);
	Pdu p;
	ParseOpts iser;
	iser.padded = false;
	std::span<const uint8_t> exact(wire.data(), 53);
	EXPECT_EQ(parse_pdu(exact, iser, &p), PduError::None);
	EXPECT_EQ(p.wire_len, 53u);
	EXPECT_EQ(p.data.size(), 5u);
	EXPECT_EQ(parse_pdu(exact, ParseOpts{}, &p), PduError::Truncated);
	EXPECT_EQ(parse_pdu(wire, ParseOpts{}, &p), PduError::None);
	EXPECT_EQ(p.wire_len, 56u);
}

namespace
{

struct Stream {
	std::vector<uint8_t> bytes;
	std::vector<std::vector<uint8_t>> datas; // data of each PDU, in order
};

Stream make_stream(int count, Digests d, uint32_t seed)
{
	std::mt19937 rng(seed);
	Stream s;
	for (int i = 0; i < count; i++) {
		NopOut n;
		n.itt = static_cast<uint32_t>(i);
		Bhs b;
		encode(n, b);
		std::vector<uint8_t> data = pattern(rng() % 40, static_cast<uint8_t>(i));
		std::vector<uint8_t> ahs;
		if (i % 3 == 1) {
			ahs.resize(8);
			build_bidi_ahs(ahs, static_cast<uint32_t>(i));
		}
		std::vector<uint8_t> w(pdu_wire_len(ahs.size(), data.size(), d));
		build_pdu(w, b, ahs, data, d);
		s.bytes.insert(s.bytes.end(), w.begin(), w.end());
		s.datas.push_back(data);
	}
	return s;
}

} // namespace

TEST(PduReader, StreamInArbitraryPieces)
{
	for (Digests d : {Digests{}, Digests{true, true}}) {
		Stream s = make_stream(50, d, 3);
		for (size_t piece : {1u, 2u, 3u, 5u, 47u, 48u, 49u, 1000u, 100000u}) {
			PduReader r(4096);
			r.set_digests(d);
			size_t off = 0;
			int got = 0;
			while (off < s.bytes.size()) {
				size_t len = std::min(piece, s.bytes.size() - off);
				std::span<const uint8_t> in(s.bytes.data() + off, len);
				while (!in.empty()) {
					size_t used;
					Pdu p;
					ReadResult res = r.feed(in, &used, &p);
					ASSERT_NE(res.status, ReadStatus::Error);
					in = in.subspan(used);
					if (res.status == ReadStatus::Pdu) {
						ASSERT_EQ(res.error, PduError::None);
						EXPECT_EQ(p.itt(), static_cast<uint32_t>(got));
						EXPECT_TRUE(std::equal(p.data.begin(), p.data.end(),
						                       s.datas[got].begin(),
						                       s.datas[got].end()));
						EXPECT_EQ(p.ahs.size(), got % 3 == 1 ? 8u : 0u);
						got++;
					}
				}
				off += len;
			}
			EXPECT_EQ(got, 50) << piece;
		}
	}
}

TEST(PduReader, ZeroCopyWantCommit)
{
	Stream s = make_stream(20, {true, false}, 9);
	PduReader r;
	r.set_digests({true, false});
	size_t off = 0;
	int got = 0;
	while (off < s.bytes.size()) {
		std::span<uint8_t> w = r.want();
		ASSERT_FALSE(w.empty());
		// Never more than the current PDU needs: the stream's next PDU stays unread.
		size_t n = std::min(w.size(), s.bytes.size() - off);
		std::copy_n(s.bytes.data() + off, n, w.data());
		off += n;
		Pdu p;
		ReadResult res = r.commit(n, &p);
		ASSERT_NE(res.status, ReadStatus::Error);
		if (res.status == ReadStatus::Pdu) {
			EXPECT_EQ(p.itt(), static_cast<uint32_t>(got));
			got++;
		}
	}
	EXPECT_EQ(got, 20);
}

TEST(PduReader, LimitsAndFatalErrors)
{
	Bhs b;
	encode(NopOut{}, b);
	std::vector<uint8_t> data = pattern(600);
	std::vector<uint8_t> w(pdu_wire_len(0, data.size(), {}));
	build_pdu(w, b, {}, data, {});
	Pdu p;
	size_t used;

	PduReader r(4096);
	r.set_max_recv_dsl(512);
	ReadResult res = r.feed(w, &used, &p);
	EXPECT_EQ(res.status, ReadStatus::Error);
	EXPECT_EQ(res.error, PduError::DataTooLong);
	EXPECT_EQ(used, 48u); // refused at the header, before the data is buffered
	EXPECT_EQ(r.current_bhs().size(), 48u);
	EXPECT_TRUE(r.want().empty()); // sticky
	EXPECT_EQ(r.feed(w, &used, &p).error, PduError::DataTooLong);

	PduReader capped(512);
	capped.set_max_recv_dsl(kMaxDsl);
	EXPECT_EQ(capped.feed(w, &used, &p).error, PduError::DataOverCap);

	std::vector<uint8_t> ahs_bad = w;
	ahs_bad[4] = 200;
	PduReader r2;
	EXPECT_EQ(r2.feed(ahs_bad, &used, &p).error, PduError::AhsTooLong);

	// Header digest error: fatal (RFC 7143 7.8, no markers to resynchronise on).
	std::vector<uint8_t> hd(pdu_wire_len(0, 4, {true, false}));
	build_pdu(hd, b, {}, pattern(4), {true, false});
	hd[17] ^= 4;
	PduReader r3;
	r3.set_digests({true, false});
	EXPECT_EQ(r3.feed(hd, &used, &p).error, PduError::HeaderDigest);
	EXPECT_EQ(r3.error(), PduError::HeaderDigest);
}

TEST(PduReader, DataDigestErrorIsNotFatal)
{
	Stream s = make_stream(3, {true, true}, 11);
	// Corrupt a data byte of the first PDU that has data.
	size_t first_len = pdu_wire_len(0, s.datas[0].size(), {true, true});
	ASSERT_FALSE(s.datas[0].empty());
	s.bytes[52] ^= 0x10;
	PduReader r;
	r.set_digests({true, true});
	std::span<const uint8_t> in(s.bytes);
	std::vector<PduError> errs;
	while (!in.empty()) {
		size_t used;
		Pdu p;
		ReadResult res = r.feed(in, &used, &p);
		ASSERT_NE(res.status, ReadStatus::Error);
		if (res.status == ReadStatus::Pdu)
			errs.push_back(res.error);
		in = in.subspan(used);
	}
	ASSERT_EQ(errs.size(), 3u);
	EXPECT_EQ(errs[0], PduError::DataDigest);
	EXPECT_EQ(errs[1], PduError::None);
	EXPECT_EQ(errs[2], PduError::None);
	(void)first_len;
}

// Digests switched on between PDUs (after the final Login Response) apply to the next one.
TEST(PduReader, DigestsChangeBetweenPdus)
{
	Bhs b;
	encode(LoginReq{}, b);
	std::vector<uint8_t> a(pdu_wire_len(0, 4, {}));
	build_pdu(a, b, {}, pattern(4), {});
	encode(NopOut{}, b);
	std::vector<uint8_t> c(pdu_wire_len(0, 4, {true, true}));
	build_pdu(c, b, {}, pattern(4), {true, true});
	PduReader r;
	size_t used;
	Pdu p;
	ASSERT_EQ(r.feed(a, &used, &p).status, ReadStatus::Pdu);
	r.set_digests({true, true});
	ReadResult res = r.feed(c, &used, &p);
	ASSERT_EQ(res.status, ReadStatus::Pdu);
	EXPECT_EQ(res.error, PduError::None);
	EXPECT_EQ(used, c.size());
}
