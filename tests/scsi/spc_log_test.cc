// SPDX-License-Identifier: MIT
// LOG SENSE (SPC-4 6.8): the supported log pages (00h, 00h/FFh) and SBC-3's logical block
// provisioning log page (0Ch) byte by byte, the CDB fields refused, allocation length
// truncation, its row in REPORT SUPPORTED OPERATION CODES; and the thin provisioning soft
// threshold's unit attention (lbp.cc), once per I_T nexus per crossing.
#include "tests/scsi/sbc_env.h"
#include "tests/scsi/spc_env.h"

namespace ulp::scsi
{
namespace
{

using namespace spc_test;

std::vector<uint8_t> cdb_log_sense(uint8_t page, uint8_t sub, uint16_t alloc, uint8_t pc = 1,
                                   uint16_t ptr = 0, uint8_t b1 = 0)
{
	std::vector<uint8_t> c(10, 0);
	c[0] = 0x4d;
	c[1] = b1;
	c[2] = uint8_t(pc << 6 | page);
	c[3] = sub;
	put_be16(&c[5], ptr);
	put_be16(&c[7], alloc);
	return c;
}

LoopResult log_sense(Target &t, Nexus *s, uint8_t page, uint8_t sub, uint16_t alloc = 1024,
                     uint8_t pc = 1, uint16_t ptr = 0, uint8_t b1 = 0)
{
	return read_cmd(t, s, 0, cdb_log_sense(page, sub, alloc, pc, ptr, b1), alloc);
}

// The field pointer of INVALID FIELD IN CDB (SPC-4 4.5.2.4.2): byte, and bit or -1.
std::pair<int, int> field(const LoopResult &r)
{
	if (r.sense.size() < 18 || !(r.sense[15] & 0x80))
		return {-2, -2};
	return {get_be16(&r.sense[16]), (r.sense[15] & 0x08) ? r.sense[15] & 7 : -1};
}

TEST(SpcLog, SupportedPages)
{
	for (bool thin : {true, false}) {
		SCOPED_TRACE(thin ? "thin" : "fully provisioned");
		Target t;
		LuConfig c;
		c.thin = thin;
		t.add(0, 1 << 20, c);
		Nexus *s = t.login("iqn.init:a");
		auto r = log_sense(t, s, 0x00, 0x00);
		ASSERT_EQ(r.status, Status::Good);
		std::vector<uint8_t> want = {0x00, 0x00, 0x00, 0x01, 0x00};
		if (thin) {
			want[3] = 2;
			want.push_back(0x0c);
		}
		EXPECT_EQ(r.data, want);
		// Subpage FFh: (page, subpage) pairs, SPF set.
		r = log_sense(t, s, 0x00, 0xff);
		ASSERT_EQ(r.status, Status::Good);
		want = {0x40, 0xff, 0x00, 0x04, 0x00, 0x00, 0x00, 0xff};
		if (thin) {
			want[3] = 6;
			want.insert(want.end(), {0x0c, 0x00});
		}
		EXPECT_EQ(r.data, want);
		// Every PAGE CONTROL gives the lists.
		for (uint8_t pc = 0; pc < 4; pc++)
			EXPECT_EQ(log_sense(t, s, 0x00, 0x00, 1024, pc).status, Status::Good)
			    << int(pc);
		if (!thin) {
			r = log_sense(t, s, 0x0c, 0x00);
			EXPECT_TRUE(IsInvalidCdb(r));
			EXPECT_EQ(field(r), std::make_pair(2, 5));
		}
	}
}

TEST(SpcLog, AllocationLengthTruncates)
{
	Target t;
	t.add(0);
	Nexus *s = t.login("iqn.init:a");
	auto full = log_sense(t, s, 0x00, 0xff);
	ASSERT_EQ(full.data.size(), 10u);
	for (uint16_t a : {0, 1, 3, 4, 7}) {
		auto r = log_sense(t, s, 0x00, 0xff, a);
		ASSERT_EQ(r.status, Status::Good) << a;
		ASSERT_EQ(r.data.size(), a);
		EXPECT_TRUE(std::equal(r.data.begin(), r.data.end(), full.data.begin())) << a;
	}
	auto lbp = log_sense(t, s, 0x0c, 0x00);
	ASSERT_EQ(lbp.status, Status::Good);
	auto r = log_sense(t, s, 0x0c, 0x00, 6);
	ASSERT_EQ(r.data.size(), 6u);
	EXPECT_EQ(get_be16(&r.data[2]), lbp.data.size() - 4) << "PAGE LENGTH of the whole page";
}

TEST(SpcLog, InvalidFields)
{
	Target t;
	t.add(0);
	Nexus *s = t.login("iqn.init:a");
	struct Case {
		uint8_t page, sub, pc;
		uint16_t ptr;
		uint8_t b1;
		std::pair<int, int> at;
	};
	const Case cases[] = {
	    {0x00, 0x00, 1, 0, 0x01, {1, 0}},  // SP: nothing is saveable
	    {0x00, 0x00, 1, 0, 0x02, {1, 1}},  // PPC
	    {0x00, 0x00, 1, 0, 0x20, {1, -1}}, // reserved
	    {0x00, 0x01, 1, 0, 0, {3, -1}},    // no such subpage
	    {0x00, 0x00, 1, 1, 0, {5, -1}},    // a list has no parameters to point at
	    {0x0c, 0x00, 0, 0, 0, {2, 7}},     // threshold values: no LOG SELECT
	    {0x0c, 0x00, 2, 0, 0, {2, 7}},     // default threshold values
	    {0x0c, 0x00, 3, 0, 0, {2, 7}},     // default cumulative values
	    {0x0c, 0x01, 1, 0, 0, {3, -1}},    // no subpage of 0Ch
	    {0x0c, 0xff, 1, 0, 0, {3, -1}},    //
	    {0x0c, 0x00, 1, 3, 0, {5, -1}},    // past the largest parameter code (0002h)
	    {0x02, 0x00, 1, 0, 0, {2, 5}},     // pages not offered
	    {0x0d, 0x00, 1, 0, 0, {2, 5}},     //
	    {0x2f, 0x00, 1, 0, 0, {2, 5}},     //
	    {0x3f, 0xff, 1, 0, 0, {2, 5}},     //
	};
	for (const Case &c : cases) {
		auto r = log_sense(t, s, c.page, c.sub, 1024, c.pc, c.ptr, c.b1);
		EXPECT_TRUE(IsInvalidCdb(r)) << std::hex << int(c.page) << "/" << int(c.sub);
		EXPECT_EQ(field(r), c.at) << std::hex << int(c.page) << "/" << int(c.sub);
	}
}

// One resource count parameter at p: code, binary format list, length 8, count, scope.
void expect_resource(const uint8_t *p, uint16_t code, uint32_t count, uint8_t scope)
{
	EXPECT_EQ(get_be16(p), code);
	EXPECT_EQ(p[2], 0x03) << "binary format list";
	EXPECT_EQ(p[3], 8) << "PARAMETER LENGTH";
	EXPECT_EQ(get_be32(p + 4), count) << "code " << code;
	EXPECT_EQ(p[8] & 3, scope) << "code " << code;
	EXPECT_EQ(p[9] | p[10] | p[11], 0);
}

// RAM: what is used is counted (its 64 KiB chunks, the threshold set: VPD B2h's
// exponent 7 at 512-byte blocks); what is available is not known, so not reported.
TEST(SpcLog, LbpPageOfRam)
{
	Target t;
	t.add(0, 1 << 20);
	Nexus *s = t.login("iqn.init:a");
	auto b2 = read_cmd(t, s, 0, cdb_inquiry(64, true, 0xb2), 64);
	ASSERT_EQ(b2.data[4], 7);
	auto r = log_sense(t, s, 0x0c, 0x00);
	ASSERT_EQ(r.status, Status::Good);
	ASSERT_EQ(r.data.size(), 16u);
	EXPECT_EQ(r.data[0], 0x8c) << "DS, page 0Ch";
	EXPECT_EQ(r.data[1], 0x00);
	EXPECT_EQ(get_be16(&r.data[2]), 12);
	expect_resource(&r.data[4], 0x0002, 0, 1);
	// One block written in the first chunk and one in the fourth: two sets used.
	ASSERT_EQ(write_cmd(t, s, 0, cdb_rw10(true, 0, 1), pattern(512)).status, Status::Good);
	ASSERT_EQ(write_cmd(t, s, 0, cdb_rw10(true, 3 * 128 + 5, 1), pattern(512)).status,
	          Status::Good);
	r = log_sense(t, s, 0x0c, 0x00);
	ASSERT_EQ(r.data.size(), 16u);
	expect_resource(&r.data[4], 0x0002, 2, 1);
	// PARAMETER POINTER 2: the used count only; 1 as well (there is no 0001h here).
	for (uint16_t ptr : {1, 2}) {
		auto p = log_sense(t, s, 0x0c, 0x00, 1024, 1, ptr);
		ASSERT_EQ(p.status, Status::Good);
		EXPECT_EQ(p.data, r.data);
	}
}

// A file: its allocated blocks, and the file system's free space (shared scope).
TEST(SpcLog, LbpPageOfFile)
{
	Target t;
	add_lu(t, 0, sbc_test::file_bs(4 << 20));
	Nexus *s = t.login("iqn.init:a");
	LogicalUnit &lu = *t.lus[0];
	if (!lu.thin())
		GTEST_SKIP() << "the file system under /var/tmp cannot punch holes";
	const uint32_t e = lu.lbp_threshold_exponent();
	ASSERT_GE(e, 1u);
	const uint64_t set = (uint64_t(1) << e) * 512;
	auto r = log_sense(t, s, 0x0c, 0x00);
	ASSERT_EQ(r.status, Status::Good);
	ASSERT_EQ(r.data.size(), 28u);
	EXPECT_EQ(get_be16(&r.data[2]), 24);
	BsUsage u;
	ASSERT_EQ(lu.bs().usage(&u), 0);
	ASSERT_TRUE(u.has_available);
	EXPECT_EQ(get_be16(&r.data[4]), 0x0001);
	EXPECT_EQ(r.data[12] & 3, 2) << "shared with the file system";
	// The free space moves with everything else on the file system: near, not equal.
	const double avail = double(get_be32(&r.data[8]));
	EXPECT_NEAR(avail, double(std::min<uint64_t>(u.available / set, UINT32_MAX)),
	            std::max(16.0, avail / 100));
	expect_resource(&r.data[16], 0x0002,
	                uint32_t((std::min(u.used, lu.bs().size()) + set - 1) / set), 1);
	// Writing 1 MiB allocates it: the used count grows by 1 MiB of sets.
	const uint32_t before = get_be32(&r.data[20]);
	std::vector<uint8_t> data = pattern(1 << 20);
	ASSERT_EQ(write_cmd(t, s, 0, cdb_rw10(true, 0, 2048), data).status, Status::Good);
	r = log_sense(t, s, 0x0c, 0x00);
	EXPECT_GE(get_be32(&r.data[20]), before + (1u << 20) / set);
	// PARAMETER POINTER 2 leaves 0001h out.
	auto p = log_sense(t, s, 0x0c, 0x00, 1024, 1, 2);
	ASSERT_EQ(p.data.size(), 16u);
	EXPECT_EQ(get_be16(&p.data[4]), 0x0002);
}

TEST(SpcLog, InRsocTable)
{
	Target t;
	t.add(0);
	Nexus *s = t.login("iqn.init:a");
	auto r = read_cmd(t, s, 0, cdb_rsoc(1, 0x4d), 64);
	ASSERT_EQ(r.status, Status::Good);
	ASSERT_GE(r.data.size(), 14u);
	EXPECT_EQ(r.data[1] & 7, 3) << "supported, as the standard says";
	EXPECT_EQ(get_be16(&r.data[2]), 10);
	const std::vector<uint8_t> usage = {0x4d, 0x03, 0xff, 0xff, 0x00,
	                                    0xff, 0xff, 0xff, 0xff, 0x00};
	EXPECT_EQ(std::vector<uint8_t>(r.data.begin() + 4, r.data.begin() + 14), usage);
}

// ---- The soft threshold ----------------------------------------------------------------

// Whether the next command of s on LUN 0 meets the soft threshold's unit attention.
bool hears_threshold(Target &t, Nexus *s)
{
	auto r = t.lb.run(s, 0, cdb_tur(), DataDir::None);
	if (r.status == Status::Good)
		return false;
	EXPECT_TRUE(IsSense(r, SenseKey::UnitAttention, 0x3807));
	return true;
}

// Write n 64 KiB chunks of the RAM LU from chunk `first` on.
void write_chunks(Target &t, Nexus *s, uint32_t first, uint32_t n)
{
	for (uint32_t i = first; i < first + n; i++)
		ASSERT_EQ(write_cmd(t, s, 0, cdb_rw10(true, i * 128, 128), pattern(65536)).status,
		          Status::Good);
}

TEST(SpcLog, SoftThresholdOncePerNexusPerCrossing)
{
	Target t;
	LuConfig c;
	c.tp_soft_threshold_pct = 50;
	LogicalUnit &lu = t.add(0, 1 << 20, c); // 16 chunks
	Nexus *a = t.login("iqn.init:a");
	Nexus *b = t.login("iqn.init:b");
	int pct = 0;
	write_chunks(t, a, 0, 7); // 43%
	lu.lbp_check(&pct);
	EXPECT_EQ(pct, 43);
	EXPECT_FALSE(hears_threshold(t, a));
	EXPECT_FALSE(hears_threshold(t, b));
	// The eighth chunk crosses 50% (the write path polls at most once a second: the
	// check is asked for here).
	write_chunks(t, a, 7, 1);
	lu.lbp_check(&pct);
	EXPECT_EQ(pct, 50);
	EXPECT_TRUE(hears_threshold(t, a));
	EXPECT_FALSE(hears_threshold(t, a)) << "once";
	EXPECT_TRUE(hears_threshold(t, b));
	EXPECT_FALSE(hears_threshold(t, b));
	// Above it still, more writes and checks: nothing again.
	write_chunks(t, a, 8, 4);
	lu.lbp_check();
	lu.lbp_check();
	EXPECT_FALSE(hears_threshold(t, a));
	EXPECT_FALSE(hears_threshold(t, b));
	// Below it again (UNMAP of 8 chunks: 25%), then over it: a second report.
	auto list = sbc_test::unmap_list({{0, 8 * 128}});
	ASSERT_EQ(write_cmd(t, a, 0, sbc_test::cdb_unmap(uint16_t(list.size())), list).status,
	          Status::Good);
	lu.lbp_check(&pct);
	EXPECT_EQ(pct, 25);
	EXPECT_FALSE(hears_threshold(t, a));
	write_chunks(t, a, 0, 5);
	lu.lbp_check(&pct);
	EXPECT_EQ(pct, 56);
	EXPECT_TRUE(hears_threshold(t, a));
	EXPECT_TRUE(hears_threshold(t, b));
	EXPECT_FALSE(hears_threshold(t, b));
}

// The write path looks by itself (lbp_poll: its first look is at the first write, later
// ones at most once a second), without anyone asking.
TEST(SpcLog, SoftThresholdSeenByAWrite)
{
	Target t;
	LuConfig c;
	c.tp_soft_threshold_pct = 5;
	t.add(0, 1 << 20, c);
	Nexus *a = t.login("iqn.init:a");
	write_chunks(t, a, 0, 1); // 6%
	EXPECT_TRUE(hears_threshold(t, a));
	EXPECT_FALSE(hears_threshold(t, a));
}

// Without a threshold (the default), nothing is ever raised; a LU that is not thin has
// no usage to compare.
TEST(SpcLog, SoftThresholdOff)
{
	for (bool thin : {true, false}) {
		Target t;
		LuConfig c;
		c.thin = thin;
		c.tp_soft_threshold_pct = thin ? 0 : 10;
		LogicalUnit &lu = t.add(0, 1 << 20, c);
		Nexus *a = t.login("iqn.init:a");
		write_chunks(t, a, 0, 16);
		int pct = 0;
		lu.lbp_check(&pct);
		EXPECT_EQ(pct, thin ? 100 : -1);
		EXPECT_FALSE(hears_threshold(t, a));
	}
}

TEST(SpcLog, SoftThresholdConfigChecked)
{
	LuConfig c;
	c.tp_soft_threshold_pct = 100;
	EXPECT_EQ(lu_config_check(c), nullptr);
	c.tp_soft_threshold_pct = 101;
	EXPECT_NE(lu_config_check(c), nullptr);
}

} // namespace
} // namespace ulp::scsi
