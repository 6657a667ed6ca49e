// SPDX-License-Identifier: MIT
// PERSISTENT RESERVE IN through the loopback fabric: the service action range, READ KEYS
// truncated, REPORT CAPABILITIES, READ FULL STATUS with its TransportIDs, and registrations
// on every target port (ALL_TG_PT). The fixture is in pr_env.h; libiscsi's test_prin_*.c
// is cited where it checks the same.
#include "tests/scsi/pr_env.h"

#include <cstring>

namespace ulp::scsi
{
namespace
{

using namespace pr_test;

// ---- PERSISTENT RESERVE IN -----------------------------------------------------------------

// libiscsi test_prin_serviceaction_range: 0..3 work, 4..1Fh are refused.
TEST_F(Pr, PrInServiceActionRange)
{
	Nexus *a = join(kPortA);
	for (uint8_t sa = 0; sa < 4; sa++)
		EXPECT_EQ(in(a, sa).status, Status::Good) << int(sa);
	for (uint8_t sa = 4; sa < 0x20; sa++) {
		auto r = in(a, sa);
		EXPECT_EQ(r.status, Status::CheckCondition) << int(sa);
		EXPECT_EQ(r.asc(), 0x2400) << int(sa);
	}
}

// libiscsi test_prin_read_keys_simple / _truncate: ADDITIONAL LENGTH covers the whole list
// whatever the allocation length lets through.
TEST_F(Pr, ReadKeysTruncated)
{
	Nexus *a = join(kPortA), *b = join(kPortB);
	ASSERT_EQ(out_st(a, SA_REGISTER, 0, K1), Status::Good);
	ASSERT_EQ(out_st(b, SA_REGISTER, 0, K2), Status::Good);
	auto r = in(a, SA_READ_KEYS, 8);
	ASSERT_EQ(r.status, Status::Good);
	ASSERT_EQ(r.data.size(), 8u);
	EXPECT_EQ(get_be32(&r.data[4]), 16u);
	r = in(a, SA_READ_KEYS, 12);
	ASSERT_EQ(r.data.size(), 12u);
	EXPECT_EQ(get_be32(&r.data[8]), uint32_t(K1 >> 32));
	r = in(a, SA_READ_KEYS, 0);
	EXPECT_EQ(r.status, Status::Good);
	EXPECT_TRUE(r.data.empty());
	// The transport's expected length below the allocation length: overflow residual.
	r = t.lb.run(a, 0, cdb_prin(SA_READ_KEYS, 100), DataDir::Read, std::vector<uint8_t>(10));
	EXPECT_EQ(r.status, Status::Good);
	EXPECT_EQ(r.data.size(), 10u);
	EXPECT_EQ(r.resid, Residual::Overflow);
	r = in(a, SA_READ_KEYS, 100);
	EXPECT_EQ(r.data.size(), 24u);
	EXPECT_EQ(r.resid, Residual::Underflow);
	EXPECT_EQ(r.resid_count, 76u);
}

// libiscsi test_prin_report_caps_simple: LENGTH 8, ALLOW COMMANDS <= 5, a type mask within
// the six types (TMV set), and every type it claims works.
TEST_F(Pr, ReportCapabilities)
{
	Nexus *a = join(kPortA);
	auto r = in(a, SA_REPORT_CAPABILITIES);
	ASSERT_EQ(r.status, Status::Good);
	ASSERT_EQ(r.data.size(), 8u);
	EXPECT_EQ(get_be16(&r.data[0]), 8u);
	EXPECT_EQ(r.data[2], 0x14) << "CRH, ATP_C; SIP_C 0, PTPL_C 0";
	EXPECT_EQ(r.data[3], 0x80 | 0x30) << "TMV, ALLOW COMMANDS 011b, PTPL_A 0";
	EXPECT_EQ(r.data[4], 0xea) << "WR_EX_AR EX_AC_RO WR_EX_RO EX_AC WR_EX";
	EXPECT_EQ(r.data[5], 0x01) << "EX_AC_AR";
	EXPECT_EQ(r.data[6] | r.data[7], 0);
	auto s = in(a, SA_REPORT_CAPABILITIES, 4);
	EXPECT_EQ(s.data.size(), 4u);
}

// ---- READ FULL STATUS and TransportIDs -----------------------------------------------------

struct FullStatus {
	uint64_t key;
	bool all_tg_pt, holder;
	uint8_t scope_type;
	uint16_t rtpi;
	std::vector<uint8_t> tid;
};

std::vector<FullStatus> parse_full_status(const std::vector<uint8_t> &d)
{
	std::vector<FullStatus> v;
	EXPECT_GE(d.size(), 8u);
	if (d.size() < 8)
		return v;
	EXPECT_EQ(get_be32(&d[4]), d.size() - 8);
	size_t off = 8;
	while (off + 24 <= d.size()) {
		FullStatus f;
		f.key = get_be64(&d[off]);
		f.all_tg_pt = d[off + 12] & 0x02;
		f.holder = d[off + 12] & 0x01;
		f.scope_type = d[off + 13];
		f.rtpi = get_be16(&d[off + 18]);
		const uint32_t n = get_be32(&d[off + 20]);
		EXPECT_LE(off + 24 + n, d.size());
		f.tid.assign(d.begin() + off + 24, d.begin() + off + 24 + n);
		v.push_back(f);
		off += 24 + n;
	}
	EXPECT_EQ(off, d.size());
	return v;
}

// SPC-4 6.16.5 and 7.6.4.6: a descriptor per registration; the TransportID is the iSCSI
// format 01b one (name,i,0xISID) for a session's port, format 00b for a bare name; NUL
// terminated, padded to a multiple of 4, at least 24 bytes.
TEST_F(Pr, ReadFullStatus)
{
	Nexus *a = join(kPortA);
	Nexus *b = join("iqn.2026-01.org.ulp:b");
	ASSERT_EQ(out_st(a, SA_REGISTER, 0, K1), Status::Good);
	ASSERT_EQ(out_st(b, SA_REGISTER, 0, K2), Status::Good);
	ASSERT_EQ(out_st(a, SA_RESERVE, K1, 0, EA_RO), Status::Good);
	auto r = in(b, SA_READ_FULL_STATUS);
	ASSERT_EQ(r.status, Status::Good);
	EXPECT_EQ(get_be32(&r.data[0]), keys(b).gen);
	auto v = parse_full_status(r.data);
	ASSERT_EQ(v.size(), 2u);
	EXPECT_EQ(v[0].key, K1);
	EXPECT_TRUE(v[0].holder);
	EXPECT_EQ(v[0].scope_type, EA_RO);
	EXPECT_FALSE(v[0].all_tg_pt);
	EXPECT_EQ(v[0].rtpi, 1);
	const std::vector<uint8_t> &ta = v[0].tid;
	ASSERT_GE(ta.size(), 4u);
	EXPECT_EQ(ta[0], 0x45) << "format 01b, protocol iSCSI";
	EXPECT_EQ(ta.size() % 4, 0u);
	EXPECT_EQ(get_be16(&ta[2]), ta.size() - 4);
	EXPECT_EQ(std::string(reinterpret_cast<const char *>(&ta[4])), kPortA);
	EXPECT_EQ(v[1].key, K2);
	EXPECT_FALSE(v[1].holder);
	EXPECT_EQ(v[1].scope_type, 0);
	const std::vector<uint8_t> &tb = v[1].tid;
	ASSERT_GE(tb.size(), 24u);
	EXPECT_EQ(tb[0], 0x05) << "format 00b, protocol iSCSI";
	EXPECT_EQ(get_be16(&tb[2]), tb.size() - 4);
	EXPECT_EQ(std::string(reinterpret_cast<const char *>(&tb[4])), "iqn.2026-01.org.ulp:b");
	// Under an AR reservation every registrant is a holder.
	ASSERT_EQ(out_st(a, SA_RELEASE, K1, 0, EA_RO), Status::Good);
	EXPECT_EQ(ua(b), UA_RESERVATIONS_RELEASED);
	ASSERT_EQ(out_st(b, SA_RESERVE, K2, 0, WE_AR), Status::Good);
	v = parse_full_status(in(a, SA_READ_FULL_STATUS).data);
	ASSERT_EQ(v.size(), 2u);
	EXPECT_TRUE(v[0].holder && v[1].holder);
	EXPECT_EQ(v[0].scope_type, WE_AR);
	// Truncated: the header still counts every descriptor.
	auto tr = in(a, SA_READ_FULL_STATUS, 16);
	ASSERT_EQ(tr.data.size(), 16u);
	EXPECT_EQ(get_be32(&tr.data[4]), r.data.size() - 8);
}

// SPC-4 7.6.4.5, 7.6.4.6: TransportIDs built from the core's initiator port text and parsed
// back (REGISTER AND MOVE).
TEST(PrTransportId, BuildAndParse)
{
	std::vector<uint8_t> b;
	transport_id_build(ProtoId::Iscsi, kPortA, b);
	ASSERT_EQ(b.size(), 48u);
	EXPECT_EQ(b[0], 0x45);
	EXPECT_EQ(get_be16(&b[2]), 44u);
	ProtoId proto;
	std::string port;
	EXPECT_EQ(transport_id_parse(b, &proto, &port), 48u);
	EXPECT_EQ(proto, ProtoId::Iscsi);
	EXPECT_EQ(port, kPortA);
	// A short name is padded to the minimum of 24 bytes.
	b.clear();
	transport_id_build(ProtoId::Iscsi, "iqn.x:y", b);
	ASSERT_EQ(b.size(), 24u);
	EXPECT_EQ(b[0], 0x05);
	EXPECT_EQ(transport_id_parse(b, &proto, &port), 24u);
	EXPECT_EQ(port, "iqn.x:y");
	// SRP: the 128-bit port identifier from its hex text; other text falls back to iSCSI.
	b.clear();
	transport_id_build(ProtoId::Srp, "0x00112233445566778899aabbccddeeff", b);
	ASSERT_EQ(b.size(), 24u);
	EXPECT_EQ(b[0], 0x04);
	EXPECT_EQ(b[8], 0x00);
	EXPECT_EQ(b[23], 0xff);
	EXPECT_EQ(transport_id_parse(b, &proto, &port), 24u);
	EXPECT_EQ(proto, ProtoId::Srp);
	EXPECT_EQ(port, "00112233445566778899aabbccddeeff");
	b.clear();
	transport_id_build(ProtoId::Srp, "not-hex", b);
	EXPECT_EQ(b[0], 0x05);
	// Malformed: no NUL, wrong format for the text, unknown protocol, too short.
	std::vector<uint8_t> m(24, 'a');
	m[0] = 0x05;
	m[1] = 0;
	put_be16(&m[2], 20);
	EXPECT_EQ(transport_id_parse(m, &proto, &port), 0u);
	m.assign(24, 0);
	m[0] = 0x45;
	put_be16(&m[2], 20);
	std::memcpy(&m[4], "iqn.x:y", 7);
	EXPECT_EQ(transport_id_parse(m, &proto, &port), 0u) << "format 01b without an ISID";
	m[0] = 0x00;
	EXPECT_EQ(transport_id_parse(m, &proto, &port), 0u) << "FCP";
	EXPECT_EQ(transport_id_parse(std::span<const uint8_t>(m).first(3), &proto, &port), 0u);
}

// ALL_TG_PT: one registration stands for the initiator port through every target port; the
// same LU exported through a second target port group sees it registered and holding.
TEST_F(Pr, AllTargetPorts)
{
	Tpg tpg2{"iqn.2026-11.org.ulp:test2", 2};
	ASSERT_EQ(tpg2.add_lun(0, *lu), 0);
	Nexus *a1 = join(kPortA);
	Nexus *a2 = join(kPortA, &tpg2);
	Nexus *b2 = join(kPortB, &tpg2);
	ASSERT_EQ(out_st(a1, SA_REGISTER, 0, K1, 0, F_ALL_TG_PT), Status::Good);
	EXPECT_EQ(out_st(a2, SA_REGISTER, 0, K2), Status::ReservationConflict)
	    << "a2 is registered through a1's registration";
	ASSERT_EQ(out_st(a2, SA_RESERVE, K1, 0, EA), Status::Good);
	EXPECT_EQ(write(a1), Status::Good);
	EXPECT_EQ(write(a2), Status::Good);
	EXPECT_EQ(read(b2), Status::ReservationConflict);
	auto v = parse_full_status(in(b2, SA_READ_FULL_STATUS).data);
	ASSERT_EQ(v.size(), 1u);
	EXPECT_TRUE(v[0].all_tg_pt);
	EXPECT_TRUE(v[0].holder);
	// Preempted, both I_T nexuses hear it.
	ASSERT_EQ(out_st(b2, SA_REGISTER, 0, K2), Status::Good);
	ASSERT_EQ(out_st(b2, SA_PREEMPT, K2, K1, EA), Status::Good);
	EXPECT_EQ(ua(a1), UA_REGISTRATIONS_PREEMPTED);
	EXPECT_EQ(ua(a2), UA_REGISTRATIONS_PREEMPTED);
	// ALL_TG_PT while the port is registered through one target port only: refused.
	ASSERT_EQ(out_st(a2, SA_REGISTER, 0, K1), Status::Good);
	EXPECT_EQ(out_st(a1, SA_REGISTER, 0, K3, 0, F_ALL_TG_PT), Status::ReservationConflict);
	EXPECT_EQ(t.lb.logout(a2), 0);
	EXPECT_EQ(t.lb.logout(b2), 0);
}

} // namespace
} // namespace ulp::scsi
