// SPDX-License-Identifier: MIT
// The primary command set through the loopback fabric: INQUIRY and its VPD pages, MODE
// SENSE / SELECT and the mode pages, REPORT SUPPORTED OPERATION CODES (and the opcode table
// against what the parsers accept), REPORT SUPPORTED TASK MANAGEMENT FUNCTIONS, TEST UNIT
// READY, REQUEST SENSE, REPORT LUNS, START STOP UNIT, PREVENT ALLOW MEDIUM REMOVAL and
// SEND DIAGNOSTIC, with every error path. Expectations are byte offsets from SPC-4 /
// SBC-3, and what libiscsi's iscsi-test-cu checks (named where it does).
#include "scsi/core_internal.h"
#include "scsi/opcodes.h"
#include "scsi_test_util.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <set>
#include <string>

namespace ulp::scsi
{
namespace
{

using namespace test;

// ---- CDBs ---------------------------------------------------------------------------------

std::vector<uint8_t> cdb_mode_sense6(uint8_t pc, uint8_t page, uint8_t sub, uint8_t alloc,
                                     bool dbd = false)
{
	return {0x1a, uint8_t(dbd ? 0x08 : 0), uint8_t(pc << 6 | page), sub, alloc, 0};
}

std::vector<uint8_t> cdb_mode_sense10(uint8_t pc, uint8_t page, uint8_t sub, uint16_t alloc,
                                      bool dbd = false, bool llbaa = false)
{
	std::vector<uint8_t> c(10, 0);
	c[0] = 0x5a;
	c[1] = uint8_t((dbd ? 0x08 : 0) | (llbaa ? 0x10 : 0));
	c[2] = uint8_t(pc << 6 | page);
	c[3] = sub;
	put_be16(&c[7], alloc);
	return c;
}

std::vector<uint8_t> cdb_mode_select6(uint8_t len, bool pf = true, bool sp = false)
{
	return {0x15, uint8_t((pf ? 0x10 : 0) | (sp ? 0x01 : 0)), 0, 0, len, 0};
}

std::vector<uint8_t> cdb_mode_select10(uint16_t len, bool pf = true)
{
	std::vector<uint8_t> c(10, 0);
	c[0] = 0x55;
	c[1] = pf ? 0x10 : 0;
	put_be16(&c[7], len);
	return c;
}

std::vector<uint8_t> cdb_rsoc(uint8_t options, uint8_t op = 0, uint16_t sa = 0,
                              uint32_t alloc = 65535, bool rctd = false)
{
	std::vector<uint8_t> c(12, 0);
	c[0] = 0xa3;
	c[1] = 0x0c;
	c[2] = uint8_t((rctd ? 0x80 : 0) | options);
	c[3] = op;
	put_be16(&c[4], sa);
	put_be32(&c[6], alloc);
	return c;
}

std::vector<uint8_t> cdb_rstmf(uint32_t alloc, bool repd = false)
{
	std::vector<uint8_t> c(12, 0);
	c[0] = 0xa3;
	c[1] = 0x0d;
	c[2] = repd ? 0x80 : 0;
	put_be32(&c[6], alloc);
	return c;
}

// libiscsi's scsi_cdb_startstopunit(immed, pcm, pc, no_flush, loej, start).
std::vector<uint8_t> cdb_start_stop(bool immed, uint8_t pcm, uint8_t pc, bool no_flush, bool loej,
                                    bool start)
{
	return {0x1b,
	        uint8_t(immed ? 1 : 0),
	        0,
	        uint8_t(pcm & 0x0f),
	        uint8_t(pc << 4 | (no_flush ? 4 : 0) | (loej ? 2 : 0) | (start ? 1 : 0)),
	        0};
}

// ---- A target, and what tests need on top of scsi_test_util.h --------------------------------

// A RAM backstore that claims a volatile write cache (so that WCE is changeable) and
// counts the flushes it is asked for.
class CachedRam final : public Backstore
{
public:
	explicit CachedRam(uint64_t size)
	    : Backstore("cached-ram", size, 64), inner_(test::ram(size))
	{
	}
	bool can_unmap() const override { return inner_->can_unmap(); }
	bool write_cache() const override { return true; }
	uint32_t unmap_granularity() const override { return inner_->unmap_granularity(); }
	int extent(uint64_t off, BsExtent *out) override { return inner_->extent(off, out); }
	void submit(BsIo *io) override
	{
		if (io->op == BsOp::Flush)
			flushes++;
		inner_->submit(io);
	}
	std::atomic<int> flushes{0};

private:
	std::unique_ptr<Backstore> inner_;
};

LogicalUnit &add_lu(Target &t, uint64_t lun, std::unique_ptr<Backstore> bs, LuConfig cfg = {})
{
	t.lus.push_back(
	    std::make_unique<LogicalUnit>("lu" + std::to_string(lun), std::move(bs), cfg));
	t.gates.push_back(nullptr);
	EXPECT_EQ(t.tpg.add_lun(lun, *t.lus.back()), 0);
	return *t.lus.back();
}

// A fabric that forwards everything to a Loopback but calls itself "iscsi": what the
// device identification page and the version descriptors say of an iSCSI target port.
class IscsiNamed final : public Fabric
{
public:
	explicit IscsiNamed(Loopback &lb) : lb_(lb) {}
	const char *name() const override { return "iscsi"; }
	void write_pending(Cmd *c) override { lb_.write_pending(c); }
	void abort_write(Cmd *c) override { lb_.abort_write(c); }
	void queue_data_in(Cmd *c) override { lb_.queue_data_in(c); }
	void queue_status(Cmd *c) override { lb_.queue_status(c); }
	void aborted_task(Cmd *c) override { lb_.aborted_task(c); }
	void queue_tm_rsp(Tmr *t) override { lb_.queue_tm_rsp(t); }
	void release_cmd(Cmd *c) override { lb_.release_cmd(c); }

private:
	Loopback &lb_;
};

LoopResult read_cmd(Target &t, Nexus *s, uint64_t lun, const std::vector<uint8_t> &cdb,
                    size_t alloc)
{
	return t.lb.run(s, lun, cdb, alloc ? DataDir::Read : DataDir::None,
	                std::vector<uint8_t>(alloc));
}

LoopResult write_cmd(Target &t, Nexus *s, uint64_t lun, const std::vector<uint8_t> &cdb,
                     const std::vector<uint8_t> &data)
{
	return t.lb.run(s, lun, cdb, data.empty() ? DataDir::None : DataDir::Write, data);
}

LoopResult none_cmd(Target &t, Nexus *s, uint64_t lun, const std::vector<uint8_t> &cdb)
{
	return t.lb.run(s, lun, cdb, DataDir::None);
}

// CHECK CONDITION with this key and ASC/ASCQ.
::testing::AssertionResult IsSense(const LoopResult &r, SenseKey key, uint16_t asc)
{
	if (!r.finished)
		return ::testing::AssertionFailure() << "not finished";
	if (r.status != Status::CheckCondition)
		return ::testing::AssertionFailure()
		       << "status " << int(r.status) << ", not CHECK CONDITION";
	if (r.key() != key || r.asc() != asc)
		return ::testing::AssertionFailure()
		       << std::hex << "sense " << int(r.key()) << "/" << r.asc() << ", expected "
		       << int(key) << "/" << asc;
	return ::testing::AssertionSuccess();
}

::testing::AssertionResult IsInvalidCdb(const LoopResult &r)
{
	return IsSense(r, SenseKey::IllegalRequest, 0x2400);
}
::testing::AssertionResult IsInvalidParam(const LoopResult &r)
{
	return IsSense(r, SenseKey::IllegalRequest, 0x2600);
}
::testing::AssertionResult IsParamLength(const LoopResult &r)
{
	return IsSense(r, SenseKey::IllegalRequest, 0x1a00);
}

std::vector<uint8_t> pattern(size_t n)
{
	std::vector<uint8_t> v(n);
	for (size_t i = 0; i < n; i++)
		v[i] = uint8_t(i * 7 + 1);
	return v;
}

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
	EXPECT_EQ(d[5], 0x00) << "TPGS 0, no 3PC, no PROTECT";
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
	for (uint8_t page : {0x01, 0x81, 0x86, 0xb3, 0xc0, 0xff})
		EXPECT_TRUE(IsInvalidCdb(read_cmd(t, s, 0, cdb_inquiry(255, true, page), 255)))
		    << int(page);
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
		std::vector<uint8_t> want = {0x00, 0x80, 0x83, 0xb0, 0xb1};
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
	EXPECT_EQ(d[4], 0) << "THRESHOLD EXPONENT";
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

// ---- MODE SENSE ------------------------------------------------------------------------

// The pages of a MODE SENSE answer, by code: offset of each page in d.
std::map<uint8_t, size_t> mode_pages(const std::vector<uint8_t> &d, size_t hdr, size_t bdl)
{
	std::map<uint8_t, size_t> m;
	size_t off = hdr + bdl;
	while (off + 2 <= d.size()) {
		EXPECT_EQ(d[off] & 0xc0, 0) << "PS 0, SPF 0";
		m[d[off] & 0x3f] = off;
		off += 2 + d[off + 1];
	}
	EXPECT_EQ(off, d.size());
	return m;
}

TEST(SpcModeSense, AllPagesSix)
{
	Target t;
	t.add(0);
	Nexus *s = t.login("iqn.init:a");
	auto r = read_cmd(t, s, 0, cdb_mode_sense6(0, 0x3f, 0, 255), 255);
	ASSERT_EQ(r.status, Status::Good);
	const auto &d = r.data;
	ASSERT_GE(d.size(), 12u);
	EXPECT_EQ(d[0] + 1u, d.size()) << "MODE DATA LENGTH";
	EXPECT_EQ(d[1], 0) << "MEDIUM TYPE";
	EXPECT_EQ(d[2], 0x10) << "WP 0, DPOFUA 1";
	ASSERT_EQ(d[3], 8) << "one short block descriptor";
	EXPECT_EQ(get_be32(&d[4]), 2048u) << "blocks";
	EXPECT_EQ(d[8], 0);
	EXPECT_EQ(get_be24(&d[9]), 512u) << "block length";
	auto pages = mode_pages(d, 4, 8);
	std::vector<uint8_t> codes;
	for (auto &[code, off] : pages)
		codes.push_back(code);
	EXPECT_EQ(codes, (std::vector<uint8_t>{0x01, 0x02, 0x08, 0x0a, 0x1c}));
	EXPECT_EQ(d[pages[0x01] + 1], 0x0a);
	EXPECT_EQ(d[pages[0x02] + 1], 0x0e);
	EXPECT_EQ(d[pages[0x08] + 1], 0x12);
	EXPECT_EQ(d[pages[0x0a] + 1], 0x0a);
	EXPECT_EQ(d[pages[0x1c] + 1], 0x0a);
	// Caching: WCE 0 (the RAM backstore has no volatile cache), DRA.
	EXPECT_EQ(d[pages[0x08] + 2], 0x00);
	EXPECT_EQ(d[pages[0x08] + 12], 0x20);
	// Control: TST 0, D_SENSE 0, GLTSD; QAM 1, QERR 0 (libiscsi: QAM 0/1, QERR != 2);
	// UA_INTLCK_CTRL 0, SWP 0; TAS 1; busy timeout unlimited.
	const size_t c = pages[0x0a];
	EXPECT_EQ(d[c + 2], 0x02);
	EXPECT_EQ(d[c + 3], 0x10);
	EXPECT_EQ(d[c + 4], 0x00);
	EXPECT_EQ(d[c + 5], 0x40);
	EXPECT_EQ(get_be16(&d[c + 8]), 0xffff);
	// Informational exceptions: DEXCPT, MRIE 0.
	EXPECT_EQ(d[pages[0x1c] + 2], 0x08);
	EXPECT_EQ(d[pages[0x1c] + 3], 0x00);
}

TEST(SpcModeSense, ControlPageAloneEqualsTheOneInAllPages)
{
	// libiscsi ModeSense6.Control.
	Target t;
	LuConfig c;
	c.tas = false;
	t.add(0, 1 << 20, c);
	Nexus *s = t.login("iqn.init:a");
	auto all = read_cmd(t, s, 0, cdb_mode_sense6(0, 0x3f, 0, 255), 255);
	auto one = read_cmd(t, s, 0, cdb_mode_sense6(0, 0x0a, 0, 255), 255);
	ASSERT_EQ(one.status, Status::Good);
	ASSERT_EQ(one.data.size(), 4u + 8 + 12);
	const size_t at = mode_pages(all.data, 4, 8)[0x0a];
	EXPECT_TRUE(std::equal(one.data.begin() + 12, one.data.end(), all.data.begin() + at));
	EXPECT_EQ(one.data[12 + 5], 0x00) << "TAS as configured";
	// Subpage FFh (all subpages: there are none) is the same; page 3Fh/FFh too.
	auto ff = read_cmd(t, s, 0, cdb_mode_sense6(0, 0x0a, 0xff, 255), 255);
	EXPECT_EQ(ff.data, one.data);
	auto allff = read_cmd(t, s, 0, cdb_mode_sense6(0, 0x3f, 0xff, 255), 255);
	EXPECT_EQ(allff.data, all.data);
}

TEST(SpcModeSense, DbdAndLongLba)
{
	Target t;
	t.add(0);
	Nexus *s = t.login("iqn.init:a");
	auto r6 = read_cmd(t, s, 0, cdb_mode_sense6(0, 0x08, 0, 255, true), 255);
	ASSERT_EQ(r6.status, Status::Good);
	EXPECT_EQ(r6.data[3], 0) << "DBD: no block descriptor";
	EXPECT_EQ(r6.data.size(), 4u + 20);
	EXPECT_EQ(r6.data[4], 0x08);
	// MODE SENSE (10) without LLBAA: an 8-byte descriptor; with it, a 16-byte one.
	auto r10 = read_cmd(t, s, 0, cdb_mode_sense10(0, 0x08, 0, 512), 512);
	ASSERT_EQ(r10.status, Status::Good);
	EXPECT_EQ(get_be16(&r10.data[0]) + 2u, r10.data.size());
	EXPECT_EQ(r10.data[3], 0x10);
	EXPECT_EQ(r10.data[4], 0) << "LONGLBA 0";
	EXPECT_EQ(get_be16(&r10.data[6]), 8);
	EXPECT_EQ(get_be32(&r10.data[8]), 2048u);
	EXPECT_EQ(r10.data[16], 0x08);
	auto l = read_cmd(t, s, 0, cdb_mode_sense10(0, 0x08, 0, 512, false, true), 512);
	ASSERT_EQ(l.status, Status::Good);
	EXPECT_EQ(l.data[4], 1) << "LONGLBA";
	ASSERT_EQ(get_be16(&l.data[6]), 16);
	EXPECT_EQ(get_be64(&l.data[8]), 2048u);
	EXPECT_EQ(get_be32(&l.data[20]), 512u);
	EXPECT_EQ(l.data[24], 0x08);
	// LLBAA with DBD: no descriptor, LONGLBA 0.
	auto ld = read_cmd(t, s, 0, cdb_mode_sense10(0, 0x08, 0, 512, true, true), 512);
	EXPECT_EQ(ld.data[4], 0);
	EXPECT_EQ(get_be16(&ld.data[6]), 0);
}

TEST(SpcModeSense, Residuals)
{
	// libiscsi ModeSense6.Residuals: 4 bytes asked, 4 moved, no overflow; 255 asked, an
	// underflow of what there was not.
	Target t;
	t.add(0);
	Nexus *s = t.login("iqn.init:a");
	auto r = read_cmd(t, s, 0, cdb_mode_sense6(0, 0x3f, 0, 4), 4);
	ASSERT_EQ(r.status, Status::Good);
	EXPECT_EQ(r.data.size(), 4u);
	EXPECT_EQ(r.resid, Residual::None);
	EXPECT_GT(r.data[0], 3) << "MODE DATA LENGTH is the full one";
	auto r2 = read_cmd(t, s, 0, cdb_mode_sense6(0, 0x3f, 0, 255), 255);
	EXPECT_EQ(r2.resid, Residual::Underflow);
	EXPECT_EQ(r2.resid_count, 255u - r2.data.size());
	auto z = read_cmd(t, s, 0, cdb_mode_sense6(0, 0x3f, 0, 0), 0);
	EXPECT_EQ(z.status, Status::Good);
}

TEST(SpcModeSense, PageControl)
{
	Target t;
	add_lu(t, 0, std::make_unique<CachedRam>(1 << 20));
	t.add(1);
	Nexus *s = t.login("iqn.init:a");
	ASSERT_EQ(t.lb.run(s, 1, cdb_tur(), DataDir::None).status, Status::CheckCondition);
	// Changeable: SWP; WCE where the backstore has a cache; nothing else.
	auto ch = read_cmd(t, s, 0, cdb_mode_sense6(1, 0x3f, 0, 255, true), 255);
	ASSERT_EQ(ch.status, Status::Good);
	auto pages = mode_pages(ch.data, 4, 0);
	for (auto &[code, off] : pages) {
		for (size_t i = off + 2; i < off + 2 + ch.data[off + 1]; i++) {
			uint8_t want = 0;
			if (code == 0x08 && i == off + 2)
				want = 0x04;
			if (code == 0x0a && i == off + 4)
				want = 0x08;
			EXPECT_EQ(ch.data[i], want) << "page " << int(code) << " byte " << i - off;
		}
	}
	auto ch1 = read_cmd(t, s, 1, cdb_mode_sense6(1, 0x08, 0, 255, true), 255);
	EXPECT_EQ(ch1.data[4 + 2], 0x00) << "no cache, WCE not changeable";
	// Current and default: WCE 1 on the cached backstore.
	auto cur = read_cmd(t, s, 0, cdb_mode_sense6(0, 0x08, 0, 255, true), 255);
	EXPECT_EQ(cur.data[4 + 2], 0x04);
	auto def = read_cmd(t, s, 0, cdb_mode_sense6(2, 0x08, 0, 255, true), 255);
	EXPECT_EQ(def.data[4 + 2], 0x04);
	// Saved values are not implemented (SPC-4 6.13).
	EXPECT_TRUE(IsSense(read_cmd(t, s, 0, cdb_mode_sense6(3, 0x08, 0, 255), 255),
	                    SenseKey::IllegalRequest, 0x3900));
	EXPECT_TRUE(IsSense(read_cmd(t, s, 0, cdb_mode_sense10(3, 0x3f, 0, 255), 255),
	                    SenseKey::IllegalRequest, 0x3900));
}

TEST(SpcModeSense, InvalidCdbFields)
{
	Target t;
	t.add(0);
	Nexus *s = t.login("iqn.init:a");
	for (uint8_t page : {0x00, 0x03, 0x07, 0x1a, 0x3e})
		EXPECT_TRUE(IsInvalidCdb(read_cmd(t, s, 0, cdb_mode_sense6(0, page, 0, 255), 255)))
		    << int(page);
	for (uint8_t sub : {0x01, 0x02, 0xfe})
		EXPECT_TRUE(
		    IsInvalidCdb(read_cmd(t, s, 0, cdb_mode_sense6(0, 0x0a, sub, 255), 255)))
		    << int(sub);
	EXPECT_TRUE(IsInvalidCdb(read_cmd(t, s, 0, cdb_mode_sense6(0, 0x3f, 0x01, 255), 255)));
	auto c6 = cdb_mode_sense6(0, 0x3f, 0, 255);
	c6[1] = 0x10; // LLBAA is not in the 6-byte CDB
	EXPECT_TRUE(IsInvalidCdb(read_cmd(t, s, 0, c6, 255)));
	auto c10 = cdb_mode_sense10(0, 0x3f, 0, 255);
	c10[1] = 0x01;
	EXPECT_TRUE(IsInvalidCdb(read_cmd(t, s, 0, c10, 255)));
	// A LUN that is not there.
	EXPECT_TRUE(IsSense(read_cmd(t, s, 7, cdb_mode_sense6(0, 0x3f, 0, 255), 255),
	                    SenseKey::IllegalRequest, 0x2500));
}

TEST(SpcModeSense, WriteProtectBit)
{
	// libiscsi decides "read only" from this bit.
	Target t;
	LuConfig ro;
	ro.read_only = true;
	t.add(0);
	t.add(1, 1 << 20, ro);
	t.add(2, 1 << 20, {}, false, /*read_only=*/true);
	Nexus *s = t.login("iqn.init:a");
	for (uint64_t lun : {1, 2})
		ASSERT_EQ(t.lb.run(s, lun, cdb_tur(), DataDir::None).status,
		          Status::CheckCondition);
	for (uint64_t lun : {0, 1, 2}) {
		auto r = read_cmd(t, s, lun, cdb_mode_sense6(0, 0x3f, 0, 255), 255);
		ASSERT_EQ(r.status, Status::Good);
		EXPECT_EQ(r.data[2] & 0x80, lun ? 0x80 : 0) << "lun " << lun;
		auto r10 = read_cmd(t, s, lun, cdb_mode_sense10(0, 0x3f, 0, 255), 255);
		EXPECT_EQ(r10.data[3] & 0x80, lun ? 0x80 : 0) << "lun " << lun;
	}
}

// ---- MODE SELECT ---------------------------------------------------------------------------

// The current page of code `page` (without header) from MODE SENSE (6), DBD.
std::vector<uint8_t> current_page(Target &t, Nexus *s, uint64_t lun, uint8_t page)
{
	auto r = read_cmd(t, s, lun, cdb_mode_sense6(0, page, 0, 255, true), 255);
	EXPECT_EQ(r.status, Status::Good);
	return std::vector<uint8_t>(r.data.begin() + 4, r.data.end());
}

// A MODE SELECT (6) parameter list as libiscsi's modeselect6 builds it: a zeroed 4-byte
// header, no block descriptor, the page.
std::vector<uint8_t> params6(const std::vector<uint8_t> &page)
{
	std::vector<uint8_t> p(4 + page.size(), 0);
	std::copy(page.begin(), page.end(), p.begin() + 4);
	return p;
}

LoopResult select6(Target &t, Nexus *s, uint64_t lun, const std::vector<uint8_t> &p)
{
	return write_cmd(t, s, lun, cdb_mode_select6(uint8_t(p.size())), p);
}

TEST(SpcModeSelect, SwpWriteProtectsTheLu)
{
	// libiscsi ModeSense6.Control-SWP (set_swp / clear_swp).
	Target t;
	t.add(0);
	Nexus *s = t.login("iqn.init:a");
	auto ch = read_cmd(t, s, 0, cdb_mode_sense6(1, 0x0a, 0, 255, true), 255);
	ASSERT_EQ(ch.data[4 + 4] & 0x08, 0x08) << "SWP is changeable";
	auto page = current_page(t, s, 0, 0x0a);
	page[4] |= 0x08;
	ASSERT_EQ(select6(t, s, 0, params6(page)).status, Status::Good);
	EXPECT_EQ(current_page(t, s, 0, 0x0a)[4] & 0x08, 0x08);
	EXPECT_TRUE(t.lus[0]->swp());
	auto ms = read_cmd(t, s, 0, cdb_mode_sense6(0, 0x3f, 0, 255), 255);
	EXPECT_EQ(ms.data[2] & 0x80, 0x80) << "WP";
	EXPECT_EQ(
	    t.lb.run(s, 0, cdb_rw10(false, 0, 1), DataDir::Read, std::vector<uint8_t>(512)).status,
	    Status::Good);
	EXPECT_TRUE(IsSense(write_cmd(t, s, 0, cdb_rw10(true, 0, 1), pattern(512)),
	                    SenseKey::DataProtect, 0x2700));
	page[4] &= ~0x08;
	ASSERT_EQ(select6(t, s, 0, params6(page)).status, Status::Good);
	EXPECT_FALSE(t.lus[0]->swp());
	EXPECT_EQ(write_cmd(t, s, 0, cdb_rw10(true, 0, 1), pattern(512)).status, Status::Good);
}

TEST(SpcModeSelect, AChangeTellsTheOtherNexuses)
{
	Target t;
	t.add(0);
	Nexus *a = t.login("iqn.init:a");
	Nexus *b = t.login("iqn.init:b");
	auto page = current_page(t, a, 0, 0x0a);
	// No change: no unit attention.
	ASSERT_EQ(select6(t, a, 0, params6(page)).status, Status::Good);
	EXPECT_EQ(none_cmd(t, b, 0, cdb_tur()).status, Status::Good);
	page[4] |= 0x08;
	ASSERT_EQ(select6(t, a, 0, params6(page)).status, Status::Good);
	EXPECT_EQ(none_cmd(t, a, 0, cdb_tur()).status, Status::Good) << "not the one that asked";
	EXPECT_TRUE(
	    IsSense(none_cmd(t, b, 0, cdb_tur()), SenseKey::UnitAttention, UA_MODE_PARAMS_CHANGED));
	EXPECT_EQ(none_cmd(t, b, 0, cdb_tur()).status, Status::Good);
}

TEST(SpcModeSelect, WceOnACachedBackstore)
{
	Target t;
	auto bs = std::make_unique<CachedRam>(1 << 20);
	CachedRam *cr = bs.get();
	LogicalUnit &lu = add_lu(t, 0, std::move(bs));
	Nexus *s = t.login("iqn.init:a");
	ASSERT_TRUE(lu.wce());
	auto page = current_page(t, s, 0, 0x08);
	ASSERT_EQ(page[2] & 0x04, 0x04);
	// WCE 1 -> 0: what sits in the cache is flushed before GOOD.
	page[2] &= ~0x04;
	const int before = cr->flushes.load();
	ASSERT_EQ(select6(t, s, 0, params6(page)).status, Status::Good);
	EXPECT_EQ(cr->flushes.load(), before + 1);
	EXPECT_FALSE(lu.wce());
	EXPECT_EQ(current_page(t, s, 0, 0x08)[2] & 0x04, 0);
	auto def = read_cmd(t, s, 0, cdb_mode_sense6(2, 0x08, 0, 255, true), 255);
	EXPECT_EQ(def.data[4 + 2] & 0x04, 0x04) << "the default stays";
	// 0 -> 1: nothing to flush.
	page[2] |= 0x04;
	ASSERT_EQ(select6(t, s, 0, params6(page)).status, Status::Good);
	EXPECT_EQ(cr->flushes.load(), before + 1);
	EXPECT_TRUE(lu.wce());
}

TEST(SpcModeSelect, NonChangeableBitsAreRefused)
{
	Target t;
	t.add(0);
	Nexus *s = t.login("iqn.init:a");
	struct Case {
		uint8_t page;
		size_t byte;
		uint8_t bit;
		const char *what;
	} cases[] = {
	    {0x0a, 2, 0x04, "D_SENSE: descriptor sense is not offered"},
	    {0x0a, 2, 0xe0, "TST"},
	    {0x0a, 3, 0x06, "QERR"},
	    {0x0a, 5, 0x40, "TAS"},
	    {0x0a, 8, 0x01, "BUSY TIMEOUT PERIOD"},
	    {0x08, 2, 0x04, "WCE without a cache"},
	    {0x08, 2, 0x01, "RCD"},
	    {0x01, 2, 0x80, "AWRE"},
	    {0x02, 2, 0x01, "BUFFER FULL RATIO"},
	    {0x1c, 2, 0x08, "DEXCPT"},
	    {0x1c, 3, 0x06, "MRIE"},
	};
	for (const Case &c : cases) {
		auto page = current_page(t, s, 0, c.page);
		page[c.byte] ^= c.bit;
		EXPECT_TRUE(IsInvalidParam(select6(t, s, 0, params6(page)))) << c.what;
	}
	// Nothing was applied.
	EXPECT_EQ(current_page(t, s, 0, 0x0a)[2] & 0x04, 0);
	// Several pages in one list: one bad page spoils the list, the good one before it
	// is not applied either.
	auto ctl = current_page(t, s, 0, 0x0a);
	ctl[4] |= 0x08;
	auto cache = current_page(t, s, 0, 0x08);
	cache[2] |= 0x01;
	auto p = params6(ctl);
	p.insert(p.end(), cache.begin(), cache.end());
	EXPECT_TRUE(IsInvalidParam(select6(t, s, 0, p)));
	EXPECT_FALSE(t.lus[0]->swp());
	// Both good: both taken, PS set as MODE SENSE would never send it (reserved in MODE
	// SELECT: ignored).
	cache[2] &= ~0x01;
	cache[0] |= 0x80;
	p = params6(ctl);
	p.insert(p.end(), cache.begin(), cache.end());
	EXPECT_EQ(select6(t, s, 0, p).status, Status::Good);
	EXPECT_TRUE(t.lus[0]->swp());
}

TEST(SpcModeSelect, ParameterListErrors)
{
	Target t;
	t.add(0);
	Nexus *s = t.login("iqn.init:a");
	const auto ctl = current_page(t, s, 0, 0x0a);
	// Cut off: the header, a page's header, a page.
	EXPECT_TRUE(IsParamLength(select6(t, s, 0, {0, 0, 0})));
	EXPECT_TRUE(IsParamLength(select6(t, s, 0, {0, 0, 0, 0, 0x0a})));
	auto cut = params6(ctl);
	cut.resize(cut.size() - 3);
	EXPECT_TRUE(IsParamLength(select6(t, s, 0, cut)));
	// A block descriptor announced but cut off.
	std::vector<uint8_t> bd_cut = {0, 0, 0, 8, 0, 0, 0, 0};
	EXPECT_TRUE(IsParamLength(select6(t, s, 0, bd_cut)));
	// A sub_page format page header cut off.
	EXPECT_TRUE(IsParamLength(select6(t, s, 0, {0, 0, 0, 0, 0x4a, 0x01, 0})));
	// Invalid: a page length that is not the page's, an unknown page, a subpage, page
	// 3Fh, a medium type, a block descriptor length that is no descriptor.
	auto badlen = params6(ctl);
	badlen[5] = 0x0b;
	badlen.push_back(0);
	EXPECT_TRUE(IsInvalidParam(select6(t, s, 0, badlen)));
	auto unknown = params6(ctl);
	unknown[4] = 0x07;
	EXPECT_TRUE(IsInvalidParam(select6(t, s, 0, unknown)));
	EXPECT_TRUE(IsInvalidParam(select6(t, s, 0, {0, 0, 0, 0, 0x4a, 0x01, 0, 0})));
	auto all = params6(ctl);
	all[4] = 0x3f;
	EXPECT_TRUE(IsInvalidParam(select6(t, s, 0, all)));
	auto medium = params6(ctl);
	medium[1] = 0x01;
	EXPECT_TRUE(IsInvalidParam(select6(t, s, 0, medium)));
	EXPECT_TRUE(IsInvalidParam(select6(t, s, 0, {0, 0, 0, 4, 0, 0, 0, 0})));
	// The header's MODE DATA LENGTH and device-specific parameter are not checked (Linux
	// echoes what MODE SENSE said).
	auto echo = params6(ctl);
	echo[0] = 0x17;
	echo[2] = 0x90;
	EXPECT_EQ(select6(t, s, 0, echo).status, Status::Good);
	// An empty list is no error; a header alone neither.
	EXPECT_EQ(none_cmd(t, s, 0, cdb_mode_select6(0)).status, Status::Good);
	EXPECT_EQ(select6(t, s, 0, {0, 0, 0, 0}).status, Status::Good);
}

TEST(SpcModeSelect, BlockDescriptor)
{
	Target t;
	t.add(0);
	Nexus *s = t.login("iqn.init:a");
	// The block descriptor MODE SENSE gave, back: fine; NUMBER OF LOGICAL BLOCKS 0 keeps
	// the capacity; another capacity or block length is refused.
	std::vector<uint8_t> p = {0, 0, 0, 8, 0, 0, 0x08, 0x00, 0, 0, 0x02, 0x00};
	EXPECT_EQ(select6(t, s, 0, p).status, Status::Good);
	auto zero = p;
	put_be32(&zero[4], 0);
	EXPECT_EQ(select6(t, s, 0, zero).status, Status::Good);
	auto cap = p;
	put_be32(&cap[4], 4096);
	EXPECT_TRUE(IsInvalidParam(select6(t, s, 0, cap)));
	auto bl = p;
	put_be24(&bl[9], 4096);
	EXPECT_TRUE(IsInvalidParam(select6(t, s, 0, bl)));
	// MODE SELECT (10): a long LBA descriptor, then the control page.
	std::vector<uint8_t> l(8 + 16, 0);
	l[4] = 0x01; // LONGLBA
	put_be16(&l[6], 16);
	put_be64(&l[8], 2048);
	put_be32(&l[20], 512);
	auto ctl = current_page(t, s, 0, 0x0a);
	l.insert(l.end(), ctl.begin(), ctl.end());
	EXPECT_EQ(write_cmd(t, s, 0, cdb_mode_select10(uint16_t(l.size())), l).status,
	          Status::Good);
	auto l8 = l;
	put_be16(&l8[6], 8); // LONGLBA with an 8-byte descriptor length
	EXPECT_TRUE(IsInvalidParam(write_cmd(t, s, 0, cdb_mode_select10(uint16_t(l8.size())), l8)));
	// MODE SELECT (10) header cut off.
	EXPECT_TRUE(IsParamLength(write_cmd(t, s, 0, cdb_mode_select10(6), {0, 0, 0, 0, 0, 0})));
}

TEST(SpcModeSelect, InvalidCdbFields)
{
	Target t;
	t.add(0);
	Nexus *s = t.login("iqn.init:a");
	auto p = params6(current_page(t, s, 0, 0x0a));
	const uint8_t len = uint8_t(p.size());
	// SP: nothing is saveable.
	EXPECT_TRUE(IsInvalidCdb(write_cmd(t, s, 0, cdb_mode_select6(len, true, true), p)));
	// PF 0: vendor specific pages.
	EXPECT_TRUE(IsInvalidCdb(write_cmd(t, s, 0, cdb_mode_select6(len, false), p)));
	auto c = cdb_mode_select6(len);
	c[1] |= 0x02;
	EXPECT_TRUE(IsInvalidCdb(write_cmd(t, s, 0, c, p)));
	// A parameter list longer than the data the initiator sends.
	EXPECT_EQ(write_cmd(t, s, 0, cdb_mode_select6(uint8_t(len + 4)), p).status,
	          Status::CheckCondition);
}

// ---- REPORT SUPPORTED OPERATION CODES ---------------------------------------------------

struct RsocDesc {
	uint8_t opcode;
	uint16_t sa;
	bool ctdp, servactv;
	uint16_t cdb_len;
	uint16_t to_len = 0;
};

std::vector<RsocDesc> rsoc_all(Target &t, Nexus *s, bool rctd, uint64_t lun = 0)
{
	auto r = read_cmd(t, s, lun, cdb_rsoc(0, 0, 0, 65535, rctd), 65535);
	EXPECT_EQ(r.status, Status::Good);
	std::vector<RsocDesc> v;
	if (r.data.size() < 4)
		return v;
	EXPECT_EQ(get_be32(&r.data[0]) + 4, r.data.size()) << "COMMAND DATA LENGTH";
	size_t off = 4;
	while (off + 8 <= r.data.size()) {
		const uint8_t *d = &r.data[off];
		RsocDesc x{d[0], get_be16(d + 2), bool(d[5] & 2), bool(d[5] & 1), get_be16(d + 6)};
		off += 8;
		if (x.ctdp) {
			x.to_len = get_be16(&r.data[off]);
			off += 2 + x.to_len;
		}
		v.push_back(x);
	}
	EXPECT_EQ(off, r.data.size());
	return v;
}

TEST(SpcRsoc, AllCommandsMatchTheTable)
{
	Target t;
	t.add(0);
	Nexus *s = t.login("iqn.init:a");
	auto v = rsoc_all(t, s, false);
	auto table = opcode_table();
	ASSERT_EQ(v.size(), table.size()) << "a thin LU offers every command";
	for (size_t i = 0; i < v.size(); i++) {
		EXPECT_EQ(v[i].opcode, table[i].opcode);
		EXPECT_EQ(v[i].sa, table[i].sa);
		EXPECT_EQ(v[i].servactv, table[i].has_sa);
		EXPECT_EQ(v[i].cdb_len, table[i].cdb_len);
		// libiscsi ReportSupportedOpcodes.RCTD and .SERVACTV.
		EXPECT_FALSE(v[i].ctdp);
		if (!v[i].servactv) {
			EXPECT_EQ(v[i].sa, 0);
		}
	}
	// What sits where in the table is tested command by command elsewhere; a few here.
	auto has = [&](uint8_t op, uint16_t sa) {
		return std::any_of(v.begin(), v.end(),
		                   [&](const RsocDesc &d) { return d.opcode == op && d.sa == sa; });
	};
	EXPECT_TRUE(has(0x12, 0));
	EXPECT_TRUE(has(0x9e, 0x10));
	EXPECT_TRUE(has(0xa3, 0x0c));
	EXPECT_TRUE(has(0xa3, 0x0d));
	EXPECT_TRUE(has(0x5f, 0x07));
	EXPECT_TRUE(has(0x42, 0));
	// A fully provisioned LU does not offer UNMAP.
	LuConfig c;
	c.thin = false;
	t.add(1, 1 << 20, c);
	ASSERT_EQ(none_cmd(t, s, 1, cdb_tur()).status, Status::CheckCondition);
	auto f = rsoc_all(t, s, false, 1);
	EXPECT_EQ(f.size(), table.size() - 1);
	EXPECT_TRUE(std::none_of(f.begin(), f.end(), [](auto &d) { return d.opcode == 0x42; }));
	auto one = read_cmd(t, s, 1, cdb_rsoc(1, 0x42), 65535);
	ASSERT_EQ(one.status, Status::Good);
	EXPECT_EQ(one.data[1] & 7, 1) << "UNMAP not supported";
}

TEST(SpcRsoc, TimeoutsDescriptors)
{
	// libiscsi ReportSupportedOpcodes.RCTD: with RCTD every descriptor has CTDP and a
	// 0Ah-long timeouts descriptor (iscsi-test-cu asks that way at start-up).
	Target t;
	t.add(0);
	Nexus *s = t.login("iqn.init:a");
	auto v = rsoc_all(t, s, true);
	ASSERT_EQ(v.size(), opcode_table().size());
	for (auto &d : v) {
		EXPECT_TRUE(d.ctdp) << int(d.opcode);
		EXPECT_EQ(d.to_len, 0x0a) << int(d.opcode);
	}
}

TEST(SpcRsoc, OneCommand)
{
	// libiscsi ReportSupportedOpcodes.OneCommand: for every command listed, option 001b
	// works without service actions and fails with them, 010b the other way round, and
	// the CDB usage data starts with the opcode.
	Target t;
	t.add(0);
	Nexus *s = t.login("iqn.init:a");
	for (const RsocDesc &d : rsoc_all(t, s, false)) {
		SCOPED_TRACE(::testing::Message()
		             << std::hex << "opcode " << int(d.opcode) << " sa " << d.sa);
		auto o1 = read_cmd(t, s, 0, cdb_rsoc(1, d.opcode, d.sa), 65535);
		auto o2 = read_cmd(t, s, 0, cdb_rsoc(2, d.opcode, d.sa), 65535);
		if (d.servactv) {
			EXPECT_TRUE(IsInvalidCdb(o1));
			EXPECT_EQ(o2.status, Status::Good);
		} else {
			EXPECT_EQ(o1.status, Status::Good);
			EXPECT_TRUE(IsInvalidCdb(o2));
		}
		for (uint8_t opt : {uint8_t(d.servactv ? 2 : 1), uint8_t(3)}) {
			auto r =
			    read_cmd(t, s, 0, cdb_rsoc(opt, d.opcode, d.sa, 65535, true), 65535);
			ASSERT_EQ(r.status, Status::Good);
			const OpcodeInfo *e = opcode_find(d.opcode, d.sa);
			ASSERT_TRUE(e);
			ASSERT_EQ(r.data.size(), 4u + e->cdb_len + 12);
			EXPECT_EQ(r.data[1], 0x80 | 0x03) << "CTDP, SUPPORT 011b";
			EXPECT_EQ(get_be16(&r.data[2]), d.cdb_len);
			EXPECT_EQ(r.data[4], d.opcode);
			EXPECT_TRUE(
			    std::equal(e->usage, e->usage + e->cdb_len, r.data.begin() + 4));
			if (d.servactv) {
				EXPECT_EQ(r.data[5] & 0x1f, d.sa);
			}
			EXPECT_EQ(get_be16(&r.data[4 + e->cdb_len]), 0x0a);
			// Without RCTD: no timeouts.
			auto n = read_cmd(t, s, 0, cdb_rsoc(opt, d.opcode, d.sa), 65535);
			EXPECT_EQ(n.data.size(), 4u + e->cdb_len);
			EXPECT_EQ(n.data[1], 0x03);
		}
	}
}

TEST(SpcRsoc, UnsupportedCommandsAndBadCdbs)
{
	Target t;
	t.add(0);
	Nexus *s = t.login("iqn.init:a");
	// Not supported: SUPPORT 001b, no CDB.
	for (auto c : {cdb_rsoc(1, 0xc0), cdb_rsoc(3, 0x04), cdb_rsoc(2, 0x9e, 0x11),
	               cdb_rsoc(3, 0xa3, 0x05)}) {
		auto r = read_cmd(t, s, 0, c, 64);
		ASSERT_EQ(r.status, Status::Good);
		ASSERT_EQ(r.data.size(), 4u);
		EXPECT_EQ(r.data[1], 0x01);
		EXPECT_EQ(get_be16(&r.data[2]), 0);
	}
	// 010b on an opcode without service actions (known or not).
	EXPECT_TRUE(IsInvalidCdb(read_cmd(t, s, 0, cdb_rsoc(2, 0xc0), 64)));
	// Reserved reporting options and bits.
	for (uint8_t opt = 4; opt < 8; opt++)
		EXPECT_TRUE(IsInvalidCdb(read_cmd(t, s, 0, cdb_rsoc(opt), 64))) << int(opt);
	auto c = cdb_rsoc(0);
	c[2] |= 0x08;
	EXPECT_TRUE(IsInvalidCdb(read_cmd(t, s, 0, c, 64)));
	// A short allocation length cuts the list but not its length field.
	auto r = read_cmd(t, s, 0, cdb_rsoc(0, 0, 0, 12), 12);
	ASSERT_EQ(r.status, Status::Good);
	ASSERT_EQ(r.data.size(), 12u);
	EXPECT_EQ(get_be32(&r.data[0]), 8u * opcode_table().size());
	// MAINTENANCE IN with a service action that is not there.
	std::vector<uint8_t> mi(12, 0);
	mi[0] = 0xa3;
	mi[1] = 0x05;
	put_be32(&mi[6], 64);
	EXPECT_TRUE(IsInvalidCdb(read_cmd(t, s, 0, mi, 64)));
}

// SPC-4 4.5.2.4.2: INVALID FIELD IN CDB of REPORT SUPPORTED OPERATION CODES points at the
// field that is wrong (SKSV, C/D 1), never at the service action: libiscsi's
// ReportSupportedOpcodes.OneCommand reads a field pointer of 1 (or none) on a MAINTENANCE IN
// command as "service action not implemented" and skips. An unknown service action does
// point at byte 1, bits 4..0.
TEST(SpcRsoc, FieldPointers)
{
	Target t;
	t.add(0);
	Nexus *s = t.login("iqn.init:a");
	auto field = [](const LoopResult &r) {
		EXPECT_GE(r.sense.size(), 18u);
		return r.sense.size() < 18
		           ? 0u
		           : uint32_t(r.sense[15]) << 16 | r.sense[16] << 8 | r.sense[17];
	};
	// 010b on an opcode without service actions: the REQUESTED OPERATION CODE (byte 3).
	auto r = read_cmd(t, s, 0, cdb_rsoc(2, 0x00), 64);
	ASSERT_TRUE(IsInvalidCdb(r));
	EXPECT_EQ(field(r), 0xc00003u);
	// 001b on one with service actions: byte 3 too.
	r = read_cmd(t, s, 0, cdb_rsoc(1, 0x9e), 64);
	ASSERT_TRUE(IsInvalidCdb(r));
	EXPECT_EQ(field(r), 0xc00003u);
	// A reserved REPORTING OPTIONS value: byte 2, bit 2 (BPV set).
	r = read_cmd(t, s, 0, cdb_rsoc(5), 64);
	ASSERT_TRUE(IsInvalidCdb(r));
	EXPECT_EQ(field(r), 0xca0002u);
	// MAINTENANCE IN with a service action that is not there: byte 1, bit 4.
	std::vector<uint8_t> mi(12, 0);
	mi[0] = 0xa3;
	mi[1] = 0x05;
	put_be32(&mi[6], 64);
	r = read_cmd(t, s, 0, mi, 64);
	ASSERT_TRUE(IsInvalidCdb(r));
	EXPECT_EQ(field(r), 0xcc0001u);
	// Other reasons carry no sense key specific data.
	r = read_cmd(t, s, 0, cdb_rw10(false, 0xfffffff0u, 1), 512);
	ASSERT_EQ(r.status, Status::CheckCondition);
	EXPECT_EQ(field(r), 0u);
}

// The table against the parsers: every opcode (and service action) the core answers with
// anything but INVALID COMMAND OPERATION CODE is in the table, and every row is answered
// with something else. A zeroed CDB is enough for that: a known command refuses it for a
// field, an unknown one for its opcode.
LoopResult zero_cdb(Target &t, Nexus *s, uint8_t op, uint8_t sa)
{
	std::vector<uint8_t> c(16, 0);
	c[0] = op;
	c[1] = sa;
	return none_cmd(t, s, 0, c);
}

bool invalid_opcode(const LoopResult &r)
{
	return r.status == Status::CheckCondition && r.key() == SenseKey::IllegalRequest &&
	       r.asc() == 0x2000;
}

TEST(SpcRsoc, TableMatchesTheParsers)
{
	Target t;
	t.add(0, 4 << 20);
	Nexus *s = t.login("iqn.init:a");
	std::set<uint8_t> sa_opcodes;
	for (const OpcodeInfo &e : opcode_table())
		if (e.has_sa)
			sa_opcodes.insert(e.opcode);
	for (int op = 0; op < 256; op++) {
		if (sa_opcodes.count(uint8_t(op))) {
			for (uint8_t sa = 0; sa < 32; sa++) {
				auto r = zero_cdb(t, s, uint8_t(op), sa);
				ASSERT_TRUE(r.finished);
				const bool known = opcode_find(uint8_t(op), sa);
				if (known) {
					EXPECT_TRUE(!invalid_opcode(r))
					    << std::hex << op << "/" << int(sa)
					    << " is in the table";
				} else {
					// An unknown service action of a known opcode: either
					// answer.
					EXPECT_TRUE(invalid_opcode(r) || IsInvalidCdb(r))
					    << std::hex << op << "/" << int(sa)
					    << " is not in the table";
				}
			}
			continue;
		}
		auto r = zero_cdb(t, s, uint8_t(op), 0);
		ASSERT_TRUE(r.finished);
		if (opcode_find(uint8_t(op), 0)) {
			EXPECT_TRUE(!invalid_opcode(r)) << std::hex << op << " is in the table";
		} else {
			EXPECT_TRUE(invalid_opcode(r)) << std::hex << op << " is not in the table";
		}
	}
	EXPECT_EQ(t.lus[0]->task_count(), 0u);
}

TEST(SpcRsoc, UsageDataOfThePrimaryCommands)
{
	// Bits the usage data marks 0 in the commands of this family are refused or ignored;
	// a few marked 1 are taken. Byte by byte against SPC-4 for the ones built here.
	auto usage = [](uint8_t op, uint16_t sa = 0) {
		const OpcodeInfo *e = opcode_find(op, sa);
		EXPECT_TRUE(e);
		return std::vector<uint8_t>(e->usage, e->usage + e->cdb_len);
	};
	EXPECT_EQ(usage(0x12), (std::vector<uint8_t>{0x12, 0x01, 0xff, 0xff, 0xff, 0x00}));
	EXPECT_EQ(usage(0x1a), (std::vector<uint8_t>{0x1a, 0x08, 0xff, 0xff, 0xff, 0x00}));
	EXPECT_EQ(usage(0x5a),
	          (std::vector<uint8_t>{0x5a, 0x18, 0xff, 0xff, 0, 0, 0, 0xff, 0xff, 0x00}));
	EXPECT_EQ(usage(0x15), (std::vector<uint8_t>{0x15, 0x11, 0, 0, 0xff, 0x00}));
	EXPECT_EQ(usage(0x1b), (std::vector<uint8_t>{0x1b, 0x01, 0, 0x0f, 0xf7, 0x00}));
	EXPECT_EQ(usage(0xa0),
	          (std::vector<uint8_t>{0xa0, 0, 0xff, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0, 0}));
	EXPECT_EQ(usage(0xa3, 0x0c), (std::vector<uint8_t>{0xa3, 0x0c, 0x87, 0xff, 0xff, 0xff, 0xff,
	                                                   0xff, 0xff, 0xff, 0, 0}));
	Target t;
	t.add(0);
	Nexus *s = t.login("iqn.init:a");
	// Reserved (usage 0) bits of byte 1 are refused by the commands that check them: each
	// CDB below is GOOD without the bit.
	struct Case {
		std::vector<uint8_t> cdb;
		uint8_t bit;
		size_t alloc;
	} cases[] = {
	    {cdb_inquiry(8), 0x02, 8},                                  // CMDDT
	    {cdb_mode_sense6(0, 0x3f, 0, 8), 0x10, 8},                  // not LLBAA
	    {cdb_mode_select6(0), 0x02, 0},                             //
	    {cdb_start_stop(false, 0, 0, false, false, true), 0x02, 0}, //
	    {std::vector<uint8_t>{0x1d, 0x04, 0, 0, 0, 0}, 0x08, 0},    //
	    {std::vector<uint8_t>{0x1e, 0x00, 0, 0, 0, 0}, 0x01, 0},    //
	};
	for (Case &c : cases) {
		EXPECT_EQ(read_cmd(t, s, 0, c.cdb, c.alloc).status, Status::Good)
		    << std::hex << int(c.cdb[0]);
		c.cdb[1] |= c.bit;
		EXPECT_TRUE(IsInvalidCdb(read_cmd(t, s, 0, c.cdb, c.alloc)))
		    << std::hex << int(c.cdb[0]);
	}
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
