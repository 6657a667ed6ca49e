// SPDX-License-Identifier: MIT
// MODE SENSE (6, 10) and MODE SELECT (6, 10) through the loopback fabric: every page, page
// control, block descriptors, residuals, the changeable bits, write protection and the
// write cache, and the unit attention a change raises for the other nexuses. Expectations
// are byte offsets from SPC-4 / SBC-3 (shared fixtures: spc_env.h).
#include "tests/scsi/spc_env.h"

#include <map>

namespace ulp::scsi
{
namespace
{

using namespace spc_test;

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

} // namespace
} // namespace ulp::scsi
