// SPDX-License-Identifier: MIT
// The primary command set through the loopback fabric: INQUIRY and its VPD pages, REPORT
// SUPPORTED TASK MANAGEMENT FUNCTIONS, TEST UNIT READY, REQUEST SENSE, REPORT LUNS, START
// STOP UNIT, PREVENT ALLOW MEDIUM REMOVAL (a removable medium) and SEND DIAGNOSTIC, with
// every error path; the mode pages are in spc_mode_test.cc, REPORT SUPPORTED OPERATION
// CODES in spc_rsoc_test.cc. Expectations are byte offsets from SPC-4 / SBC-3, and what
// libiscsi's iscsi-test-cu checks (named where it does).
#include "tests/scsi/spc_env.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <set>

namespace ulp::scsi
{
namespace
{

using namespace spc_test;

// ---- INQUIRY: standard data (SPC-4 6.6.2) ----------------------------------------------

TEST(SpcInquiry, StandardData)
{
	Target t;
	t.add(0);
	Nexus *s = t.login("iqn.init:a");
	// libiscsi Inquiry.Standard asks with 260 bytes.
	auto r = read_cmd(t, s, 0, cdb_inquiry(260), 260);
	ASSERT_EQ(r.status, Status::Good);
	ASSERT_EQ(r.data.size(), 96u);
	EXPECT_EQ(r.resid, Residual::Underflow);
	EXPECT_EQ(r.resid_count, 260u - 96);
	const auto &d = r.data;
	EXPECT_EQ(d[0], 0x00) << "qualifier 000b, direct access block device";
	EXPECT_EQ(d[1], 0x00) << "RMB 0";
	EXPECT_EQ(d[2], 0x06) << "SPC-4";
	EXPECT_EQ(d[3], 0x12) << "AERC 0, TRMTSK 0, NORMACA 0, HISUP 1, format 2";
	EXPECT_EQ(d[4], 96 - 5) << "ADDITIONAL LENGTH";
	EXPECT_EQ(d[5] & 0x0f, 0x08) << "3PC (EXTENDED COPY, xcopy.cc), no PROTECT";
	EXPECT_EQ(d[7], 0x02) << "CMDQUE";
	EXPECT_EQ(std::string(d.begin() + 8, d.begin() + 16), "ULP     ");
	EXPECT_EQ(std::string(d.begin() + 16, d.begin() + 32), "ulp             ");
	EXPECT_EQ(std::string(d.begin() + 32, d.begin() + 36), "0001");
	for (size_t i = 8; i < 36; i++)
		EXPECT_TRUE(d[i] >= 0x20 && d[i] <= 0x7e) << "byte " << i;
	// Version descriptors: SAM-5, SPC-4, SBC-3 (libiscsi's sbc3_support), nothing for the
	// loopback transport.
	EXPECT_EQ(get_be16(&d[58]), 0x00a0);
	EXPECT_EQ(get_be16(&d[60]), 0x0460);
	EXPECT_EQ(get_be16(&d[62]), 0x04c0);
	EXPECT_EQ(get_be16(&d[64]), 0x0000);
}

TEST(SpcInquiry, EveryAllocationLength)
{
	// libiscsi Inquiry.AllocLength: 0..255 all GOOD, 255 and 256 the same data.
	Target t;
	t.add(0);
	Nexus *s = t.login("iqn.init:a");
	auto full = read_cmd(t, s, 0, cdb_inquiry(256), 256);
	ASSERT_EQ(full.data.size(), 96u);
	for (uint16_t a = 0; a <= 256; a++) {
		auto r = read_cmd(t, s, 0, cdb_inquiry(a), a);
		ASSERT_EQ(r.status, Status::Good) << a;
		ASSERT_EQ(r.data.size(), std::min<size_t>(a, 96)) << a;
		EXPECT_TRUE(std::equal(r.data.begin(), r.data.end(), full.data.begin())) << a;
		EXPECT_NE(r.resid, Residual::Overflow) << a;
	}
}

TEST(SpcInquiry, InvalidCdbFields)
{
	Target t;
	t.add(0);
	Nexus *s = t.login("iqn.init:a");
	// libiscsi Inquiry.EVPD: a PAGE CODE without EVPD.
	EXPECT_TRUE(IsInvalidCdb(read_cmd(t, s, 0, cdb_inquiry(256, false, 1), 256)));
	auto c = cdb_inquiry(96);
	c[1] = 0x02; // CMDDT (obsolete)
	EXPECT_TRUE(IsInvalidCdb(read_cmd(t, s, 0, c, 96)));
	c[1] = 0x80; // reserved
	EXPECT_TRUE(IsInvalidCdb(read_cmd(t, s, 0, c, 96)));
	// A VPD page that is not there.
	for (uint8_t page : {0x01, 0x81, 0x87, 0xb3, 0xc0, 0xff})
		EXPECT_TRUE(IsInvalidCdb(read_cmd(t, s, 0, cdb_inquiry(255, true, page), 255)))
		    << int(page);
}

// SAM-5 5.2: NACA 1 in the CONTROL byte of any CDB (6, 10, 12, 16 bytes) is INVALID
// FIELD IN CDB with the field pointer at that byte, bit 2, since standard INQUIRY says
// NormACA 0; nothing is done (the write does not land). The other bits (vendor specific,
// obsolete LINK and FLAG) are left alone, as Linux's sd never sets them.
TEST(SpcControlByte, NacaRefusedInEveryCdbLength)
{
	Target t;
	t.add(0);
	Nexus *s = t.login("iqn.init:a");
	// The power-on unit attention first: the NACA check must not depend on it either way.
	(void)none_cmd(t, s, 0, cdb_tur());
	struct Case {
		std::vector<uint8_t> cdb;
		int dir; // 0 none, 1 read, 2 write
		uint32_t len;
	};
	std::vector<uint8_t> w10 = cdb_rw10(true, 8, 1);
	std::vector<Case> cases = {
	    {cdb_tur(), 0, 0},                // 6 bytes, group 0
	    {cdb_inquiry(96), 1, 96},         // 6 bytes
	    {cdb_rw10(false, 0, 1), 1, 512},  // 10 bytes, group 1
	    {w10, 2, 512},                    // 10 bytes, a write
	    {cdb_rw16(false, 0, 1), 1, 512},  // 16 bytes, group 4
	    {cdb_report_luns(4096), 1, 4096}, // 12 bytes, group 5
	};
	for (const Case &c : cases) {
		std::vector<uint8_t> cdb = c.cdb;
		const size_t at = cdb.size() - 1;
		// NACA 0: accepted.
		LoopResult ok = c.dir == 1 ? read_cmd(t, s, 0, cdb, c.len)
		                : c.dir == 2
		                    ? write_cmd(t, s, 0, cdb, std::vector<uint8_t>(512, 0x5a))
		                    : none_cmd(t, s, 0, cdb);
		EXPECT_EQ(ok.status, Status::Good) << "opcode " << int(cdb[0]);
		// NACA 1: refused, pointing at the bit.
		cdb[at] |= 0x04;
		LoopResult r = c.dir == 1 ? read_cmd(t, s, 0, cdb, c.len)
		               : c.dir == 2
		                   ? write_cmd(t, s, 0, cdb, std::vector<uint8_t>(512, 0xa5))
		                   : none_cmd(t, s, 0, cdb);
		ASSERT_TRUE(IsInvalidCdb(r)) << "opcode " << int(cdb[0]);
		ASSERT_GE(r.sense.size(), 18u);
		EXPECT_EQ(r.sense[15], 0x80 | 0x40 | 0x08 | 0x02) << "SKSV, C/D, BPV, bit 2";
		EXPECT_EQ(get_be16(&r.sense[16]), at) << "the CONTROL byte, opcode " << int(cdb[0]);
	}
	// The refused write (after the accepted one) left the block as the accepted one wrote it.
	auto r = read_cmd(t, s, 0, cdb_rw10(false, 8, 1), 512);
	ASSERT_EQ(r.status, Status::Good);
	EXPECT_EQ(r.data, std::vector<uint8_t>(512, 0x5a));
}

TEST(SpcInquiry, MissingLun)
{
	Target t;
	t.add(0);
	Nexus *s = t.login("iqn.init:a");
	auto r = read_cmd(t, s, 9, cdb_inquiry(96), 96);
	ASSERT_EQ(r.status, Status::Good);
	ASSERT_EQ(r.data.size(), 96u);
	EXPECT_EQ(r.data[0], 0x7f) << "qualifier 011b, type 1Fh";
	EXPECT_EQ(get_be16(&r.data[62]), 0x0000) << "no SBC-3 for a LUN that is not there";
	EXPECT_TRUE(IsSense(read_cmd(t, s, 9, cdb_inquiry(255, true, 0), 255),
	                    SenseKey::IllegalRequest, 0x2500));
}

TEST(SpcInquiry, ConfigStringsStayAscii)
{
	Target t;
	LuConfig c;
	c.vendor = "v\x01\x7f\xffv";
	c.product = "a-long-product-name-that-does-not-fit";
	t.add(0, 1 << 20, c);
	Nexus *s = t.login("iqn.init:a");
	auto r = read_cmd(t, s, 0, cdb_inquiry(96), 96);
	ASSERT_EQ(r.data.size(), 96u);
	EXPECT_EQ(std::string(r.data.begin() + 8, r.data.begin() + 16), "v   v   ");
	EXPECT_EQ(std::string(r.data.begin() + 16, r.data.begin() + 32), "a-long-product-n");
}

// ---- INQUIRY: VPD pages ----------------------------------------------------------------

std::vector<uint8_t> vpd(Target &t, Nexus *s, uint8_t page, uint64_t lun = 0)
{
	auto r = read_cmd(t, s, lun, cdb_inquiry(1024, true, page), 1024);
	EXPECT_EQ(r.status, Status::Good) << "page " << int(page);
	if (r.data.size() >= 4) {
		EXPECT_EQ(r.data[0], 0x00);
		EXPECT_EQ(r.data[1], page);
		EXPECT_EQ(get_be16(&r.data[2]) + 4u, r.data.size()) << "PAGE LENGTH";
	}
	return r.data;
}

TEST(SpcVpd, SupportedPagesAreAllReadable)
{
	for (bool thin : {true, false}) {
		SCOPED_TRACE(thin ? "thin" : "fully provisioned");
		Target t;
		LuConfig c;
		c.thin = thin;
		t.add(0, 1 << 20, c);
		Nexus *s = t.login("iqn.init:a");
		auto d = vpd(t, s, 0x00);
		std::vector<uint8_t> want = {0x00, 0x80, 0x83, 0x86, 0x88, 0x8f, 0xb0, 0xb1};
		if (thin)
			want.push_back(0xb2);
		EXPECT_EQ(std::vector<uint8_t>(d.begin() + 4, d.end()), want);
		// libiscsi Inquiry.SupportedVPD: every listed page reads GOOD.
		for (uint8_t p : want)
			vpd(t, s, p);
		if (!thin) {
			EXPECT_TRUE(
			    IsInvalidCdb(read_cmd(t, s, 0, cdb_inquiry(255, true, 0xb2), 255)));
		}
	}
}

TEST(SpcVpd, UnitSerialNumber)
{
	Target t;
	LuConfig c;
	c.serial = "SN-0042";
	t.add(0, 1 << 20, c);
	auto &lu2 = t.add(1);
	Nexus *s = t.login("iqn.init:a");
	auto d = vpd(t, s, 0x80);
	EXPECT_EQ(std::string(d.begin() + 4, d.end()), "SN-0042");
	ASSERT_EQ(t.lb.run(s, 1, cdb_tur(), DataDir::None).status, Status::CheckCondition);
	auto d2 = vpd(t, s, 0x80, 1);
	EXPECT_EQ(std::string(d2.begin() + 4, d2.end()), lu2.serial());
	EXPECT_EQ(lu2.serial().size(), 16u) << "derived from the name";
}

struct Designator {
	uint8_t proto, codeset, piv, assoc, type;
	std::vector<uint8_t> value;
};

std::vector<Designator> designators(const std::vector<uint8_t> &d)
{
	std::vector<Designator> v;
	size_t off = 4;
	while (off + 4 <= d.size()) {
		Designator x{uint8_t(d[off] >> 4),      uint8_t(d[off] & 0xf),
		             uint8_t(d[off + 1] >> 7),  uint8_t((d[off + 1] >> 4) & 3),
		             uint8_t(d[off + 1] & 0xf), {}};
		const size_t len = d[off + 3];
		EXPECT_LE(off + 4 + len, d.size());
		x.value.assign(d.begin() + off + 4, d.begin() + std::min(d.size(), off + 4 + len));
		v.push_back(x);
		off += 4 + len;
	}
	EXPECT_EQ(off, d.size()) << "designators fill the page";
	return v;
}

TEST(SpcVpd, DeviceIdentification)
{
	Target t;
	LuConfig c;
	c.serial = "SER1";
	c.naa = 0x6001405123456789ull;
	t.add(0, 1 << 20, c);
	Nexus *s = t.login("iqn.init:a");
	auto ds = designators(vpd(t, s, 0x83));
	ASSERT_EQ(ds.size(), 3u);
	// NAA, binary, associated with the LU.
	EXPECT_EQ(ds[0].codeset, 1);
	EXPECT_EQ(ds[0].assoc, 0);
	EXPECT_EQ(ds[0].type, 3);
	ASSERT_EQ(ds[0].value.size(), 8u);
	EXPECT_EQ(get_be64(ds[0].value.data()), 0x6001405123456789ull);
	// T10 vendor ID: vendor padded to 8, then the serial number.
	EXPECT_EQ(ds[1].codeset, 2);
	EXPECT_EQ(ds[1].assoc, 0);
	EXPECT_EQ(ds[1].type, 1);
	EXPECT_EQ(std::string(ds[1].value.begin(), ds[1].value.end()), "ULP     SER1");
	// Relative target port 1 (the Tpg's), associated with the target port; the loopback
	// is no SCSI transport, so no protocol identifier (PIV 0).
	EXPECT_EQ(ds[2].codeset, 1);
	EXPECT_EQ(ds[2].piv, 0);
	EXPECT_EQ(ds[2].assoc, 1);
	EXPECT_EQ(ds[2].type, 4);
	ASSERT_EQ(ds[2].value.size(), 4u);
	EXPECT_EQ(get_be16(&ds[2].value[2]), 1);
	// The default NAA: locally assigned (NAA 3h).
	auto &lu2 = t.add(1);
	ASSERT_EQ(t.lb.run(s, 1, cdb_tur(), DataDir::None).status, Status::CheckCondition);
	auto ds2 = designators(vpd(t, s, 0x83, 1));
	EXPECT_EQ(get_be64(ds2[0].value.data()), lu2.naa());
	EXPECT_EQ(lu2.naa() >> 60, 3u);
}

TEST(SpcVpd, IscsiTargetPortAndDeviceName)
{
	Target t;
	t.add(0);
	IscsiNamed fabric(t.lb);
	Nexus *s = t.tpg.open_session(fabric, "iqn.init:a", "iqn.init:a,i,0x1");
	ASSERT_TRUE(s);
	ASSERT_EQ(t.lb.run(s, 0, cdb_tur(), DataDir::None).status, Status::CheckCondition);
	auto ds = designators(vpd(t, s, 0x83));
	ASSERT_EQ(ds.size(), 4u);
	EXPECT_EQ(ds[2].piv, 1);
	EXPECT_EQ(ds[2].proto, 5) << "iSCSI";
	// SCSI name string of the target device: UTF-8, null terminated, padded to 4.
	EXPECT_EQ(ds[3].proto, 5);
	EXPECT_EQ(ds[3].codeset, 3);
	EXPECT_EQ(ds[3].assoc, 2);
	EXPECT_EQ(ds[3].type, 8);
	EXPECT_EQ(ds[3].value.size() % 4, 0u);
	EXPECT_EQ(std::string(reinterpret_cast<const char *>(ds[3].value.data())), t.tpg.name());
	// And the standard data names the iSCSI transport.
	auto r = read_cmd(t, s, 0, cdb_inquiry(96), 96);
	EXPECT_EQ(get_be16(&r.data[64]), 0x0960);
	EXPECT_EQ(t.tpg.close_session(s, std::chrono::seconds(5)), 0);
}

TEST(SpcVpd, BlockLimits)
{
	Target t;
	LuConfig c;
	c.max_xfer_blocks = 2048;
	c.opt_xfer_blocks = 128;
	c.max_unmap_descs = 64;
	c.max_write_same_blocks = 4096;
	t.add(0, 1 << 20, c);
	LuConfig full;
	full.thin = false;
	t.add(1, 1 << 20, full);
	Nexus *s = t.login("iqn.init:a");
	// libiscsi Inquiry.BlockLimits: 64 bytes, PAGE LENGTH 3Ch (SBC-3 claimed).
	auto d = vpd(t, s, 0xb0);
	ASSERT_EQ(d.size(), 64u);
	EXPECT_EQ(d[3], 0x3c);
	EXPECT_EQ(d[4] & 1, 0) << "WSNZ";
	EXPECT_EQ(d[5], 1) << "MAXIMUM COMPARE AND WRITE LENGTH";
	EXPECT_EQ(get_be16(&d[6]), 1);
	EXPECT_EQ(get_be32(&d[8]), 2048u);
	EXPECT_EQ(get_be32(&d[12]), 128u);
	EXPECT_EQ(get_be32(&d[16]), 0u) << "no PRE-FETCH";
	// Thin: UNMAP limits nonzero and sane (libiscsi: <= 1Mi), the RAM backstore's 64 KiB
	// chunk as granularity, aligned at 0.
	EXPECT_EQ(get_be32(&d[20]), LuConfig{}.max_unmap_blocks);
	EXPECT_LE(get_be32(&d[20]), 1024u * 1024);
	EXPECT_EQ(get_be32(&d[24]), 64u);
	EXPECT_EQ(get_be32(&d[28]), 65536u / 512);
	EXPECT_EQ(get_be32(&d[32]), 0x80000000u) << "UGAVALID, alignment 0";
	EXPECT_EQ(get_be64(&d[36]), 4096u);
	// WRITE ATOMIC on the RAM backstore: up to MAXIMUM TRANSFER LENGTH, no alignment,
	// granularity or boundaries (libiscsi WriteAtomic16.VPD).
	EXPECT_EQ(get_be32(&d[44]), 2048u);
	for (size_t i = 48; i < 64; i += 4)
		EXPECT_EQ(get_be32(&d[i]), 0u) << i;
	// Fully provisioned: no UNMAP, so its limits are 0 (libiscsi).
	ASSERT_EQ(t.lb.run(s, 1, cdb_tur(), DataDir::None).status, Status::CheckCondition);
	auto f = vpd(t, s, 0xb0, 1);
	EXPECT_EQ(get_be32(&f[20]), 0u);
	EXPECT_EQ(get_be32(&f[24]), 0u);
	EXPECT_EQ(get_be32(&f[28]), 0u);
	EXPECT_EQ(get_be32(&f[32]), 0u);
}

// OPTIMAL TRANSFER LENGTH by default: 512 KiB whatever the block size (Linux's sd sends
// commands of up to that much), never more than MAXIMUM TRANSFER LENGTH, never less than a
// physical block.
TEST(SpcVpd, OptimalTransferLengthIs512KiBByDefault)
{
	struct Case {
		uint32_t block, physical, max_xfer, want;
	};
	for (const Case k : {Case{512, 0, 16384, 1024}, Case{4096, 0, 16384, 128},
	                     Case{512, 4096, 16384, 1024}, Case{512, 0, 256, 256},
	                     Case{4096, 4096 * 256, 16384, 256}, Case{65536, 0, 16384, 8}}) {
		Target t;
		LuConfig c;
		c.block_size = k.block;
		c.physical_block_size = k.physical;
		c.max_xfer_blocks = k.max_xfer;
		t.add(0, 64 << 20, c);
		Nexus *s = t.login("iqn.init:a");
		auto d = vpd(t, s, 0xb0);
		ASSERT_EQ(d.size(), 64u);
		EXPECT_EQ(get_be32(&d[12]), k.want)
		    << "block " << k.block << ", physical " << k.physical << ", max " << k.max_xfer;
		EXPECT_EQ(t.tpg.close_session(s, std::chrono::seconds(5)), 0);
	}
}

TEST(SpcVpd, BlockLimitsOfA512eLu)
{
	// 4096-byte physical blocks: OPTIMAL TRANSFER LENGTH GRANULARITY is one of them, and
	// OPTIMAL UNMAP GRANULARITY never less (the RAM backstore's 64 KiB chunk is more);
	// with a backstore that frees 512 bytes at a time it is the physical block.
	class FineRam final : public Backstore
	{
	public:
		FineRam() : Backstore("fine-ram", 1 << 20, 64), inner_(test::ram(1 << 20)) {}
		bool can_unmap() const override { return true; }
		bool write_cache() const override { return false; }
		uint32_t unmap_granularity() const override { return 512; }
		int extent(uint64_t off, BsExtent *out) override
		{
			return inner_->extent(off, out);
		}
		void submit(BsIo *io) override { inner_->submit(io); }

	private:
		std::unique_ptr<Backstore> inner_;
	};
	Target t;
	LuConfig c;
	c.physical_block_size = 4096;
	t.add(0, 1 << 20, c);
	add_lu(t, 1, std::make_unique<FineRam>(), c);
	Nexus *s = t.login("iqn.init:a");
	auto d = vpd(t, s, 0xb0);
	EXPECT_EQ(get_be16(&d[6]), 8u) << "OPTIMAL TRANSFER LENGTH GRANULARITY";
	EXPECT_EQ(get_be32(&d[28]), 65536u / 512);
	EXPECT_EQ(get_be32(&d[32]), 0x80000000u);
	ASSERT_EQ(t.lb.run(s, 1, cdb_tur(), DataDir::None).status, Status::CheckCondition);
	auto f = vpd(t, s, 0xb0, 1);
	EXPECT_EQ(get_be32(&f[28]), 8u) << "OPTIMAL UNMAP GRANULARITY: the physical block";
}

TEST(SpcVpd, BlockDeviceCharacteristics)
{
	Target t;
	t.add(0);
	Nexus *s = t.login("iqn.init:a");
	auto d = vpd(t, s, 0xb1);
	ASSERT_EQ(d.size(), 64u);
	EXPECT_EQ(get_be16(&d[4]), 1) << "non-rotating medium";
	EXPECT_EQ(d[7], 0) << "WABEREQ, WACEREQ, form factor";
}

TEST(SpcVpd, LogicalBlockProvisioningAgreesWithReadCapacity16)
{
	Target t;
	t.add(0);
	Nexus *s = t.login("iqn.init:a");
	auto d = vpd(t, s, 0xb2);
	ASSERT_EQ(d.size(), 8u);
	// THRESHOLD EXPONENT (lbp.cc): a threshold set is the RAM backstore's 64 KiB
	// deallocation unit, 2^7 blocks of 512 bytes.
	EXPECT_EQ(d[4], 7) << "THRESHOLD EXPONENT";
	EXPECT_EQ(d[5], 0xe4) << "LBPU, LBPWS, LBPWS10, LBPRZ";
	EXPECT_EQ(d[6] & 7, 2) << "thin";
	std::vector<uint8_t> rc16(16, 0);
	rc16[0] = 0x9e;
	rc16[1] = 0x10;
	put_be32(&rc16[10], 32);
	auto r = read_cmd(t, s, 0, rc16, 32);
	ASSERT_EQ(r.status, Status::Good);
	EXPECT_EQ(r.data[14] & 0xc0, 0xc0) << "LBPME and LBPRZ";
}

// ---- REPORT SUPPORTED TASK MANAGEMENT FUNCTIONS ---------------------------------------------

TEST(SpcRstmf, ReportsWhatTmrDoes)
{
	Target t;
	t.add(0);
	Nexus *s = t.login("iqn.init:a");
	auto r = read_cmd(t, s, 0, cdb_rstmf(4), 4);
	ASSERT_EQ(r.status, Status::Good);
	ASSERT_EQ(r.data.size(), 4u);
	// ATS ATSS CTSS LURS QTS TRS (no CLEAR ACA); QUAS QTSS ITNRS.
	EXPECT_EQ(r.data[0], 0xde);
	EXPECT_EQ(r.data[1], 0x07);
	auto x = read_cmd(t, s, 0, cdb_rstmf(64, true), 64);
	ASSERT_EQ(x.data.size(), 16u);
	EXPECT_EQ(x.data[0], 0xde);
	EXPECT_EQ(x.data[3], 0x0c) << "ADDITIONAL DATA LENGTH";
	EXPECT_EQ(x.data[4] & 1, 0) << "TMFTMOV: no timeouts";
	auto bad = cdb_rstmf(64);
	bad[2] = 0x01;
	EXPECT_TRUE(IsInvalidCdb(read_cmd(t, s, 0, bad, 64)));
	// tmf_supported says what tmr.cc does.
	for (TmfType fn :
	     {TmfType::AbortTask, TmfType::AbortTaskSet, TmfType::ClearAca, TmfType::ClearTaskSet,
	      TmfType::LunReset, TmfType::QueryTask, TmfType::QueryTaskSet,
	      TmfType::QueryAsyncEvent, TmfType::TargetWarmReset, TmfType::TargetColdReset,
	      TmfType::ITNexusReset}) {
		TmfResponse resp = t.lb.tmf(s, fn, 0, 0x1234);
		EXPECT_EQ(resp == TmfResponse::NotSupported, !tmf_supported(fn)) << tmf_str(fn);
	}
}

// ---- TEST UNIT READY, REQUEST SENSE, REPORT LUNS -----------------------------------------

TEST(SpcSmall, TestUnitReady)
{
	// libiscsi TestUnitReady.Simple.
	Target t;
	t.add(0);
	Nexus *s = t.login("iqn.init:a");
	EXPECT_EQ(none_cmd(t, s, 0, cdb_tur()).status, Status::Good);
	EXPECT_TRUE(IsSense(none_cmd(t, s, 3, cdb_tur()), SenseKey::IllegalRequest, 0x2500));
}

TEST(SpcSmall, RequestSense)
{
	Target t;
	t.add(0);
	Nexus *s = t.login("iqn.init:a");
	// Nothing pending: NO SENSE in fixed format, 18 bytes.
	auto r = read_cmd(t, s, 0, cdb_request_sense(252), 252);
	ASSERT_EQ(r.status, Status::Good);
	ASSERT_EQ(r.data.size(), 18u);
	EXPECT_EQ(r.data[0], 0x70);
	EXPECT_EQ(r.data[2], 0x00);
	EXPECT_EQ(r.data[7], 10);
	EXPECT_EQ(get_be16(&r.data[12]), 0);
	// DESC: descriptor format is not offered.
	auto c = cdb_request_sense(252);
	c[1] = 0x01;
	EXPECT_TRUE(IsInvalidCdb(read_cmd(t, s, 0, c, 252)));
	// A short allocation length cuts it.
	EXPECT_EQ(read_cmd(t, s, 0, cdb_request_sense(8), 8).data.size(), 8u);
	// A LUN that is not there: GOOD, with LOGICAL UNIT NOT SUPPORTED as data.
	auto m = read_cmd(t, s, 5, cdb_request_sense(18), 18);
	ASSERT_EQ(m.status, Status::Good);
	EXPECT_EQ(m.data[2] & 0xf, 0x5);
	EXPECT_EQ(get_be16(&m.data[12]), 0x2500);
}

TEST(SpcSmall, ReportLuns)
{
	Target t;
	t.add(0);
	t.add(300);
	Nexus *s = t.login("iqn.init:a");
	auto report = [&](uint8_t select, uint32_t alloc) {
		auto c = cdb_report_luns(alloc);
		c[2] = select;
		return read_cmd(t, s, 0, c, alloc);
	};
	for (uint8_t sel : {0x00, 0x02}) {
		auto r = report(sel, 64);
		ASSERT_EQ(r.status, Status::Good);
		ASSERT_EQ(r.data.size(), 24u);
		EXPECT_EQ(get_be32(&r.data[0]), 16u);
		EXPECT_EQ(get_be16(&r.data[8]), 0x0000);
		EXPECT_EQ(get_be16(&r.data[16]), 0x4000 | 300) << "flat addressing";
	}
	// Only well-known LUs: there are none.
	auto wk = report(0x01, 64);
	ASSERT_EQ(wk.status, Status::Good);
	ASSERT_EQ(wk.data.size(), 8u);
	EXPECT_EQ(get_be32(&wk.data[0]), 0u);
	EXPECT_TRUE(IsInvalidCdb(report(0x03, 64)));
	EXPECT_TRUE(IsInvalidCdb(report(0x10, 64)));
	// At least 16 bytes; 16 cut the list but not its length.
	EXPECT_TRUE(IsInvalidCdb(report(0x00, 15)));
	auto cut = report(0x00, 16);
	ASSERT_EQ(cut.data.size(), 16u);
	EXPECT_EQ(get_be32(&cut.data[0]), 16u);
}

// ---- START STOP UNIT, PREVENT ALLOW MEDIUM REMOVAL, SEND DIAGNOSTIC --------------------------

TEST(SpcSmall, StartStopUnit)
{
	Target t;
	auto bs = std::make_unique<CachedRam>(1 << 20);
	CachedRam *cr = bs.get();
	add_lu(t, 0, std::move(bs));
	Nexus *s = t.login("iqn.init:a");
	// libiscsi StartStopUnit.Simple on a fixed disk (RMB 0): an eject must fail.
	EXPECT_TRUE(
	    IsInvalidCdb(none_cmd(t, s, 0, cdb_start_stop(true, 0, 0, false, true, false))));
	EXPECT_TRUE(
	    IsInvalidCdb(none_cmd(t, s, 0, cdb_start_stop(false, 0, 0, false, true, true))));
	EXPECT_EQ(none_cmd(t, s, 0, cdb_tur()).status, Status::Good);
	// START: ready already.
	const int f0 = cr->flushes.load();
	EXPECT_EQ(none_cmd(t, s, 0, cdb_start_stop(false, 0, 0, false, false, true)).status,
	          Status::Good);
	EXPECT_EQ(cr->flushes.load(), f0);
	// Stop: the cache is flushed (NO_FLUSH 0), the LU stays ready.
	EXPECT_EQ(none_cmd(t, s, 0, cdb_start_stop(true, 0, 0, false, false, false)).status,
	          Status::Good);
	EXPECT_EQ(cr->flushes.load(), f0 + 1);
	EXPECT_EQ(none_cmd(t, s, 0, cdb_tur()).status, Status::Good);
	EXPECT_EQ(none_cmd(t, s, 0, cdb_start_stop(false, 0, 0, true, false, false)).status,
	          Status::Good);
	EXPECT_EQ(cr->flushes.load(), f0 + 1) << "NO_FLUSH";
	// ACTIVE and LU_CONTROL: START and LOEJ are ignored.
	for (uint8_t pc : {0x1, 0x7})
		EXPECT_EQ(
		    none_cmd(t, s, 0, cdb_start_stop(false, 0, pc, false, true, false)).status,
		    Status::Good)
		    << int(pc);
	// IDLE, STANDBY, FORCE_IDLE_0, FORCE_STANDBY_0 and the reserved values.
	for (uint8_t pc : {0x2, 0x3, 0x4, 0x5, 0x6, 0x8, 0x9, 0xa, 0xb, 0xc, 0xf})
		EXPECT_TRUE(IsInvalidCdb(
		    none_cmd(t, s, 0, cdb_start_stop(false, 0, pc, false, false, true))))
		    << int(pc);
	// A POWER CONDITION MODIFIER, reserved bits.
	EXPECT_TRUE(
	    IsInvalidCdb(none_cmd(t, s, 0, cdb_start_stop(false, 1, 0, false, false, true))));
	auto c = cdb_start_stop(false, 0, 0, false, false, true);
	c[4] |= 0x08;
	EXPECT_TRUE(IsInvalidCdb(none_cmd(t, s, 0, c)));
	c = cdb_start_stop(false, 0, 0, false, false, true);
	c[1] = 0x02;
	EXPECT_TRUE(IsInvalidCdb(none_cmd(t, s, 0, c)));
}

TEST(SpcSmall, PreventAllowMediumRemoval)
{
	Target t;
	t.add(0);
	Nexus *s = t.login("iqn.init:a");
	auto cdb = [](uint8_t prevent) { return std::vector<uint8_t>{0x1e, 0, 0, 0, prevent, 0}; };
	EXPECT_EQ(none_cmd(t, s, 0, cdb(1)).status, Status::Good);
	EXPECT_EQ(none_cmd(t, s, 0, cdb(0)).status, Status::Good);
	EXPECT_TRUE(IsInvalidCdb(none_cmd(t, s, 0, cdb(2))));
	EXPECT_TRUE(IsInvalidCdb(none_cmd(t, s, 0, cdb(3))));
	auto r = cdb(0);
	r[1] = 1;
	EXPECT_TRUE(IsInvalidCdb(none_cmd(t, s, 0, r)));
}

// ---- A removable medium (medium.cc) ----------------------------------------------------------

std::vector<uint8_t> cdb_prevent(bool prevent)
{
	return {0x1e, 0, 0, 0, uint8_t(prevent ? 1 : 0), 0};
}

// libiscsi StartStopUnit.Simple and .NoLoej on a removable medium: LOEJ ejects (START 0)
// and loads (START 1); without a medium, what needs it is NOT READY, MEDIUM NOT PRESENT,
// and what is about the LU still works; the same medium comes back.
TEST(SpcMedium, EjectAndLoad)
{
	Target t;
	auto bs = std::make_unique<CachedRam>(1 << 20);
	CachedRam *cr = bs.get();
	LuConfig cfg;
	cfg.removable = true;
	add_lu(t, 0, std::move(bs), cfg);
	t.add(1);
	Nexus *s = t.login("iqn.init:a");
	auto inq = read_cmd(t, s, 0, cdb_inquiry(96), 96);
	ASSERT_EQ(inq.status, Status::Good);
	EXPECT_EQ(inq.data[1] & 0x80, 0x80) << "RMB";
	ASSERT_EQ(none_cmd(t, s, 1, cdb_tur()).status, Status::CheckCondition); // POWER ON
	auto inq1 = read_cmd(t, s, 1, cdb_inquiry(96), 96);
	EXPECT_EQ(inq1.data[1] & 0x80, 0) << "a fixed disk";
	const auto data = pattern(512);
	ASSERT_EQ(write_cmd(t, s, 0, cdb_rw16(true, 5, 1), data).status, Status::Good);
	// LOEJ 0: START and stop leave the medium in (NoLoej).
	for (bool start : {false, true})
		ASSERT_EQ(none_cmd(t, s, 0, cdb_start_stop(false, 0, 0, true, false, start)).status,
		          Status::Good);
	EXPECT_EQ(none_cmd(t, s, 0, cdb_tur()).status, Status::Good);
	// Eject: flushed first (NO_FLUSH 0).
	const int f0 = cr->flushes.load();
	ASSERT_EQ(none_cmd(t, s, 0, cdb_start_stop(true, 0, 0, false, true, false)).status,
	          Status::Good);
	EXPECT_EQ(cr->flushes.load(), f0 + 1);
	EXPECT_FALSE(t.lus[0]->medium_present());
	auto not_ready = [](const LoopResult &r) { return IsSense(r, SenseKey::NotReady, 0x3a00); };
	EXPECT_TRUE(not_ready(none_cmd(t, s, 0, cdb_tur())));
	EXPECT_TRUE(not_ready(read_cmd(t, s, 0, cdb_rw16(false, 5, 1), 512)));
	EXPECT_TRUE(not_ready(write_cmd(t, s, 0, cdb_rw16(true, 5, 1), data)));
	std::vector<uint8_t> rc10(10, 0);
	rc10[0] = 0x25;
	EXPECT_TRUE(not_ready(read_cmd(t, s, 0, rc10, 8)));
	EXPECT_EQ(read_cmd(t, s, 0, cdb_inquiry(96), 96).status, Status::Good);
	EXPECT_EQ(read_cmd(t, s, 0, cdb_report_luns(), 4096).status, Status::Good);
	EXPECT_EQ(read_cmd(t, s, 0, cdb_mode_sense6(0, 0x3f, 0, 255), 255).status, Status::Good);
	EXPECT_EQ(read_cmd(t, s, 0, cdb_request_sense(), 18).status, Status::Good);
	EXPECT_EQ(none_cmd(t, s, 1, cdb_tur()).status, Status::Good) << "another LU";
	// Ejecting again changes nothing and is no error (libiscsi PreventAllow.ColdReset).
	EXPECT_EQ(none_cmd(t, s, 0, cdb_start_stop(false, 0, 0, true, true, false)).status,
	          Status::Good);
	// Load: ready, the same data.
	ASSERT_EQ(none_cmd(t, s, 0, cdb_start_stop(true, 0, 0, false, true, true)).status,
	          Status::Good);
	EXPECT_EQ(none_cmd(t, s, 0, cdb_tur()).status, Status::Good);
	auto r = read_cmd(t, s, 0, cdb_rw16(false, 5, 1), 512);
	ASSERT_EQ(r.status, Status::Good);
	EXPECT_EQ(r.data, data);
	// A power condition other than START_VALID ignores LOEJ (SBC-3 5.25).
	EXPECT_EQ(none_cmd(t, s, 0, cdb_start_stop(false, 0, 0x7, false, true, false)).status,
	          Status::Good);
	EXPECT_TRUE(t.lus[0]->medium_present());
}

// libiscsi PreventAllow.*: removal is prevented while any I_T nexus prevents it, a load as
// much as an eject; it ends with ALLOW, the nexus' loss, or a reset of the LU.
TEST(SpcMedium, PreventionPerNexus)
{
	Target t;
	LuConfig cfg;
	cfg.removable = true;
	t.add(0, 1 << 20, cfg);
	Nexus *a = t.login("iqn.init:a");
	Nexus *b = t.login("iqn.init:b");
	auto eject = [&](Nexus *s) {
		return none_cmd(t, s, 0, cdb_start_stop(false, 0, 0, false, true, false));
	};
	auto load = [&](Nexus *s) {
		return none_cmd(t, s, 0, cdb_start_stop(false, 0, 0, false, true, true));
	};
	auto prevented = [](const LoopResult &r) {
		return IsSense(r, SenseKey::IllegalRequest, 0x5302);
	};
	ASSERT_EQ(none_cmd(t, a, 0, cdb_prevent(true)).status, Status::Good);
	EXPECT_TRUE(prevented(eject(a)));
	EXPECT_TRUE(prevented(eject(b))) << "another nexus (PreventAllow.2ITNexuses)";
	EXPECT_EQ(none_cmd(t, a, 0, cdb_tur()).status, Status::Good);
	ASSERT_EQ(none_cmd(t, b, 0, cdb_prevent(true)).status, Status::Good);
	ASSERT_EQ(none_cmd(t, a, 0, cdb_prevent(false)).status, Status::Good);
	EXPECT_TRUE(prevented(eject(a))) << "b still prevents";
	ASSERT_EQ(none_cmd(t, b, 0, cdb_prevent(false)).status, Status::Good);
	ASSERT_EQ(eject(a).status, Status::Good);
	ASSERT_EQ(none_cmd(t, a, 0, cdb_prevent(true)).status, Status::Good);
	EXPECT_TRUE(prevented(load(a))) << "PreventAllow.Eject: no load either";
	ASSERT_EQ(none_cmd(t, a, 0, cdb_prevent(false)).status, Status::Good);
	ASSERT_EQ(load(a).status, Status::Good);
	// I_T nexus loss (PreventAllow.Logout, .ITNexusLoss).
	ASSERT_EQ(none_cmd(t, b, 0, cdb_prevent(true)).status, Status::Good);
	EXPECT_EQ(t.lb.tmf(b, TmfType::ITNexusReset, 0), TmfResponse::Complete);
	EXPECT_FALSE(t.lus[0]->medium_prevented());
	Nexus *c = t.login("iqn.init:c");
	ASSERT_EQ(none_cmd(t, c, 0, cdb_prevent(true)).status, Status::Good);
	EXPECT_EQ(t.lb.logout(c), 0);
	EXPECT_FALSE(t.lus[0]->medium_prevented());
	// Resets (PreventAllow.LUNReset, .WarmReset, .ColdReset).
	for (TmfType fn : {TmfType::LunReset, TmfType::TargetWarmReset, TmfType::TargetColdReset}) {
		for (int i = 0; i < 8 && none_cmd(t, a, 0, cdb_tur()).status != Status::Good; i++)
			; // the unit attentions of the reset before
		ASSERT_EQ(none_cmd(t, a, 0, cdb_prevent(true)).status, Status::Good);
		ASSERT_TRUE(t.lus[0]->medium_prevented());
		EXPECT_EQ(t.lb.tmf(a, fn, 0), TmfResponse::Complete) << tmf_str(fn);
		EXPECT_FALSE(t.lus[0]->medium_prevented()) << tmf_str(fn);
	}
}

TEST(SpcSmall, SendDiagnostic)
{
	Target t;
	t.add(0);
	Nexus *s = t.login("iqn.init:a");
	auto cdb = [](uint8_t b1, uint16_t len = 0) {
		std::vector<uint8_t> c = {0x1d, b1, 0, 0, 0, 0};
		put_be16(&c[3], len);
		return c;
	};
	EXPECT_EQ(none_cmd(t, s, 0, cdb(0x04)).status, Status::Good) << "default self-test";
	EXPECT_EQ(none_cmd(t, s, 0, cdb(0x07)).status, Status::Good) << "DEVOFFL, UNITOFFL";
	EXPECT_EQ(none_cmd(t, s, 0, cdb(0x00)).status, Status::Good) << "nothing asked";
	for (uint8_t code = 1; code < 8; code++)
		EXPECT_TRUE(IsInvalidCdb(none_cmd(t, s, 0, cdb(uint8_t(code << 5)))))
		    << "self-test code " << int(code);
	EXPECT_TRUE(IsInvalidCdb(none_cmd(t, s, 0, cdb(0x0c))));
	EXPECT_TRUE(IsInvalidCdb(write_cmd(t, s, 0, cdb(0x10, 4), {0, 0, 0, 0})))
	    << "no diagnostic pages";
}

} // namespace
} // namespace ulp::scsi
