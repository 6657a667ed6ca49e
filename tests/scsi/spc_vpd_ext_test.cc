// SPDX-License-Identifier: MIT
// The VPD pages VMware and Windows probe besides the ones spc_test.cc covers: Extended
// INQUIRY Data (86h, SPC-4 7.8.7) and SCSI Ports (88h, SPC-4 7.8.16), byte by byte, with
// allocation length truncation; and LUICLR's promise, that REPORTED LUNS DATA HAS CHANGED
// reported on one LU is cleared on the nexus' other LUs.
#include "tests/scsi/spc_env.h"

namespace ulp::scsi
{
namespace
{

using namespace spc_test;

std::vector<uint8_t> page(Target &t, Nexus *s, uint8_t code, uint16_t alloc = 1024)
{
	auto r = read_cmd(t, s, 0, cdb_inquiry(alloc, true, code), alloc);
	EXPECT_EQ(r.status, Status::Good) << "page " << int(code);
	return r.data;
}

TEST(SpcVpdExt, ExtendedInquiryData)
{
	for (bool cache : {false, true}) {
		SCOPED_TRACE(cache ? "volatile cache" : "no cache");
		Target t;
		if (cache)
			add_lu(t, 0, std::make_unique<CachedRam>(1 << 20));
		else
			t.add(0);
		Nexus *s = t.login("iqn.init:a");
		auto d = page(t, s, 0x86);
		ASSERT_EQ(d.size(), 64u);
		EXPECT_EQ(d[0], 0x00);
		EXPECT_EQ(d[1], 0x86);
		EXPECT_EQ(get_be16(&d[2]), 0x3c) << "PAGE LENGTH";
		EXPECT_EQ(d[4], 0) << "no protection information";
		EXPECT_EQ(d[5], 0x07)
		    << "HEADSUP, ORDSUP, SIMPSUP; no UASK_SUP, GROUP_SUP, PRIOR_SUP";
		EXPECT_EQ(d[6], cache ? 0x01 : 0x00) << "V_SUP only (no WU_SUP, CRD_SUP, NV_SUP)";
		EXPECT_EQ(d[7], 0x01) << "LUICLR";
		EXPECT_EQ(d[8], 0) << "no referrals";
		EXPECT_EQ(d[13], 18) << "MAXIMUM SUPPORTED SENSE DATA LENGTH";
		for (size_t i : {9u, 10u, 11u, 12u})
			EXPECT_EQ(d[i], 0) << i;
		for (size_t i = 14; i < d.size(); i++)
			EXPECT_EQ(d[i], 0) << i;
		// Cut to the allocation length, the page length still the whole page's.
		auto cut = page(t, s, 0x86, 8);
		ASSERT_EQ(cut.size(), 8u);
		EXPECT_TRUE(std::equal(cut.begin(), cut.end(), d.begin()));
	}
}

// The page's claim: the sense data the device server returns is 18 bytes long, whatever
// the condition.
TEST(SpcVpdExt, SenseLengthIsWhatIsReturned)
{
	Target t;
	t.add(0);
	Nexus *s = t.login("iqn.init:a");
	auto r = read_cmd(t, s, 0, cdb_rw10(false, 1u << 30, 1), 512);
	ASSERT_EQ(r.status, Status::CheckCondition);
	EXPECT_EQ(r.sense.size(), 18u);
	EXPECT_EQ(page(t, s, 0x86)[13], r.sense.size());
}

TEST(SpcVpdExt, ScsiPortsNamesThisPort)
{
	Target t; // Tpg rtpi 1
	t.add(0);
	IscsiNamed fabric(t.lb);
	Nexus *s = t.tpg.open_session(fabric, "iqn.init:a", "iqn.init:a,i,0x1");
	ASSERT_TRUE(s);
	ASSERT_EQ(t.lb.run(s, 0, cdb_tur(), DataDir::None).status, Status::CheckCondition);
	auto d = page(t, s, 0x88);
	// Header, one port descriptor of 12 bytes, one target port descriptor of 8.
	ASSERT_EQ(d.size(), 4u + 12 + 8);
	EXPECT_EQ(d[1], 0x88);
	EXPECT_EQ(get_be16(&d[2]), 20);
	const uint8_t *p = &d[4];
	EXPECT_EQ(get_be16(p), 0) << "reserved";
	EXPECT_EQ(get_be16(p + 2), 1) << "RELATIVE PORT IDENTIFIER";
	EXPECT_EQ(get_be16(p + 4), 0) << "reserved";
	EXPECT_EQ(get_be16(p + 6), 0) << "INITIATOR PORT TRANSPORTID LENGTH";
	EXPECT_EQ(get_be16(p + 8), 0) << "reserved";
	EXPECT_EQ(get_be16(p + 10), 8) << "TARGET PORT DESCRIPTORS LENGTH";
	const uint8_t *tp = p + 12;
	EXPECT_EQ(tp[0], 0x51) << "iSCSI, binary";
	EXPECT_EQ(tp[1], 0x94) << "PIV, target port, relative target port identifier";
	EXPECT_EQ(tp[3], 4);
	EXPECT_EQ(get_be16(tp + 6), 1);
	// The same identifier VPD 83h gives the port.
	auto id = page(t, s, 0x83);
	bool found = false;
	for (size_t i = 4; i + 4 <= id.size(); i += 4 + id[i + 3])
		if ((id[i + 1] & 0x3f) == 0x14)
			found = std::equal(tp, tp + 8, &id[i]);
	EXPECT_TRUE(found);
	// Truncated to the allocation length.
	auto cut = page(t, s, 0x88, 10);
	ASSERT_EQ(cut.size(), 10u);
	EXPECT_TRUE(std::equal(cut.begin(), cut.end(), d.begin()));
	EXPECT_EQ(t.tpg.close_session(s, std::chrono::seconds(5)), 0);
}

// A loopback session: the protocol is not known, so no PIV and no protocol identifier.
TEST(SpcVpdExt, ScsiPortsWithoutAProtocol)
{
	Loopback lb;
	Tpg tpg{"iqn.2026-11.org.ulp:ports", 7};
	LogicalUnit lu("lu0", test::ram(1 << 20), {});
	ASSERT_EQ(tpg.add_lun(0, lu), 0);
	Nexus *s = lb.login(tpg, "iqn.init:a");
	ASSERT_TRUE(s);
	auto r =
	    lb.run(s, 0, cdb_inquiry(255, true, 0x88), DataDir::Read, std::vector<uint8_t>(255));
	ASSERT_EQ(r.status, Status::Good);
	ASSERT_EQ(r.data.size(), 24u);
	EXPECT_EQ(get_be16(&r.data[6]), 7);
	EXPECT_EQ(r.data[16], 0x01) << "binary, no protocol";
	EXPECT_EQ(r.data[17], 0x14) << "no PIV, target port, relative port";
	EXPECT_EQ(get_be16(&r.data[22]), 7);
	EXPECT_EQ(tpg.close_session(s, std::chrono::seconds(5)), 0);
}

// LUICLR 1: REPORTED LUNS DATA HAS CHANGED, reported through one LU, is gone from the
// nexus' other LUs (it is about the nexus' inventory, not about one LU); another nexus
// still has its own.
TEST(SpcVpdExt, ReportedLunsChangedClearedOnEveryLuOfTheNexus)
{
	Target t;
	t.add(0);
	t.add(1);
	Nexus *a = t.login("iqn.init:a", 0);
	ASSERT_EQ(t.lb.run(a, 1, cdb_tur(), DataDir::None).status, Status::CheckCondition);
	Nexus *b = t.login("iqn.init:b", 0);
	ASSERT_EQ(t.lb.run(b, 1, cdb_tur(), DataDir::None).status, Status::CheckCondition);
	// A LUN added: every nexus that has seen the LUs hears of it on each.
	t.add(2);
	auto r = t.lb.run(a, 0, cdb_tur(), DataDir::None);
	EXPECT_TRUE(IsSense(r, SenseKey::UnitAttention, 0x3f0e));
	EXPECT_EQ(t.lb.run(a, 1, cdb_tur(), DataDir::None).status, Status::Good)
	    << "cleared on LUN 1 by the report on LUN 0";
	// Through REQUEST SENSE on b: the same.
	r = read_cmd(t, b, 1, cdb_request_sense(), 18);
	ASSERT_EQ(r.status, Status::Good);
	EXPECT_EQ(r.data[12] << 8 | r.data[13], 0x3f0e);
	EXPECT_EQ(t.lb.run(b, 0, cdb_tur(), DataDir::None).status, Status::Good);
}

} // namespace
} // namespace ulp::scsi
