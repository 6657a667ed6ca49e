// SPDX-License-Identifier: MIT
// tests/scsi/sbc_xcopy_test.cc - EXTENDED COPY (LID1) and RECEIVE COPY RESULTS (SPC-4 6.4,
// 6.18; scsi/xcopy*.cc): copies between LUs of one process and within one, on RAM and file
// backstores, data verified; the parameter list's errors and their sense; the limits
// OPERATING PARAMETERS reports against those enforced; COPY STATUS and FAILED SEGMENT
// DETAILS; ABORT TASK and LOGICAL UNIT RESET in the middle of a copy; a copy target
// destroyed while a copy uses it; the in-kernel copy between file LUs (copy_file_range) and
// the read/write loop it falls back to, told apart by the copy manager's counters.
#include "scsi/bs_internal.h"
#include "scsi/xcopy.h"
#include "tests/scsi/sbc_env.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <thread>

namespace ulp::scsi::sbc_test
{
namespace
{

using std::chrono::milliseconds;

// ---- Parameter lists ------------------------------------------------------------------------

// An identification CSCD descriptor (E4h) naming an LU by its 8-byte NAA (as VPD 83h gives).
Bytes cscd(uint64_t naa, uint8_t byte1 = 0, uint8_t type = XCOPY_CSCD_ID)
{
	Bytes d(32, 0);
	d[0] = type;
	d[1] = byte1;
	d[4] = 0x01; // CODE SET binary
	d[5] = 0x03; // ASSOCIATION logical unit, DESIGNATOR TYPE NAA
	d[7] = 8;
	put_be64(&d[8], naa);
	put_be24(&d[29], kBs); // DISK BLOCK LENGTH
	return d;
}

// A block-to-block segment descriptor (02h).
Bytes seg(uint16_t src, uint16_t dst, uint16_t blocks, uint64_t slba, uint64_t dlba,
          bool dc = false, uint8_t type = XCOPY_SEG_B2B)
{
	Bytes d(28, 0);
	d[0] = type;
	d[1] = dc ? 0x02 : 0;
	put_be16(&d[2], 0x18);
	put_be16(&d[4], src);
	put_be16(&d[6], dst);
	put_be16(&d[10], blocks);
	put_be64(&d[12], slba);
	put_be64(&d[20], dlba);
	return d;
}

Bytes plist(const std::vector<Bytes> &cscds, const std::vector<Bytes> &segs, uint8_t list_id = 1,
            uint8_t usage = XCOPY_LIST_DISCARD, uint32_t inline_len = 0)
{
	Bytes p(16, 0);
	p[0] = list_id;
	p[1] = static_cast<uint8_t>(usage << 3);
	size_t cl = 0, sl = 0;
	for (const Bytes &c : cscds) {
		p.insert(p.end(), c.begin(), c.end());
		cl += c.size();
	}
	for (const Bytes &s : segs) {
		p.insert(p.end(), s.begin(), s.end());
		sl += s.size();
	}
	put_be16(&p[2], static_cast<uint16_t>(cl));
	put_be32(&p[8], static_cast<uint32_t>(sl));
	put_be32(&p[12], inline_len);
	return p;
}

Bytes cdb_xcopy(uint32_t len, uint8_t sa = 0)
{
	Bytes c(16, 0);
	c[0] = OP_XCOPY_LID1;
	c[1] = sa;
	put_be32(&c[10], len);
	return c;
}

Bytes cdb_rcr(uint8_t sa, uint8_t list_id, uint32_t alloc)
{
	Bytes c(16, 0);
	c[0] = OP_RECV_COPY_RESULTS;
	c[1] = sa;
	c[2] = list_id;
	put_be32(&c[10], alloc);
	return c;
}

constexpr uint8_t kCopyAborted = 0xa;
constexpr uint8_t kIllegal = 0x5;

// Two LUs (LUNs 0 and 1) of one target, 8 MiB each, of a backstore kind; one nexus.
struct Two {
	Target t;
	LogicalUnit *a = nullptr, *b = nullptr;
	GatedBackstore *gate_a = nullptr;
	Nexus *s = nullptr;

	explicit Two(const std::string &kind = "ram", bool gated_a = false)
	{
		for (int i = 0; i < 2; i++) {
			std::unique_ptr<Backstore> bs = make_bs(kind, 8 << 20);
			if (i == 0 && gated_a) {
				auto g = std::make_unique<GatedBackstore>(std::move(bs));
				gate_a = g.get();
				bs = std::move(g);
			}
			t.lus.push_back(std::make_unique<LogicalUnit>("xc" + std::to_string(i),
			                                              std::move(bs), LuConfig{}));
			EXPECT_EQ(t.tpg.add_lun(i, *t.lus.back()), 0);
		}
		a = t.lus[0].get();
		b = t.lus[1].get();
		s = t.login("iqn.init:x");
		t.lb.run(s, 1, cdb_tur(), DataDir::None); // LUN 1's POWER ON
	}
	LoopResult xcopy(const Bytes &p, uint64_t lun = 0)
	{
		return t.lb.run(s, lun, cdb_xcopy(uint32_t(p.size())), DataDir::Write, p);
	}
	LoopResult rcr(uint8_t sa, uint8_t id, uint32_t alloc = 1024, uint64_t lun = 0)
	{
		return t.lb.run(s, lun, cdb_rcr(sa, id, alloc), DataDir::Read, Bytes(alloc));
	}
	void write(uint64_t lun, uint64_t lba, const Bytes &d)
	{
		auto r = t.lb.run(s, lun, cdb_rw(0x8a, lba, uint32_t(d.size() / kBs)),
		                  DataDir::Write, d);
		ASSERT_TRUE(is_good(r));
	}
	Bytes read(uint64_t lun, uint64_t lba, uint32_t blocks)
	{
		auto r = t.lb.run(s, lun, cdb_rw(0x88, lba, blocks), DataDir::Read,
		                  Bytes(size_t(blocks) * kBs));
		EXPECT_TRUE(is_good(r));
		return r.data;
	}
};

// ---- Copies -----------------------------------------------------------------------------------

void copy_between(const std::string &kind)
{
	Two w(kind);
	// 5000 blocks: several 1 MiB chunks and a partial one.
	const Bytes data = pattern(5000 * kBs, 7);
	w.write(0, 100, data);
	auto r = w.xcopy(plist({cscd(w.a->naa()), cscd(w.b->naa())}, {seg(0, 1, 5000, 100, 300)}));
	ASSERT_TRUE(is_good(r));
	EXPECT_EQ(w.read(1, 300, 5000), data);
	EXPECT_EQ(w.read(1, 299, 1), Bytes(kBs, 0)) << "nothing before the destination range";
	EXPECT_EQ(w.read(1, 5300, 1), Bytes(kBs, 0)) << "nothing after it";
	// Issued to the destination LU's LUN, reading from the other: the same.
	auto r2 =
	    w.xcopy(plist({cscd(w.b->naa()), cscd(w.a->naa())}, {seg(0, 1, 200, 300, 9000)}), 1);
	ASSERT_TRUE(is_good(r2));
	EXPECT_EQ(w.read(0, 9000, 200), Bytes(data.begin(), data.begin() + 200 * kBs));
}

TEST(Xcopy, BetweenTwoRamLus)
{
	copy_between("ram");
}

TEST(Xcopy, BetweenTwoFileLus)
{
	copy_between("file");
}

// ---- The in-kernel copy (copy_file_range between file backstores) --------------------------

// Turns the in-kernel copy off for one scope.
struct NoKernelCopy {
	NoKernelCopy() { xcopy_set_kernel_copy(false); }
	~NoKernelCopy() { xcopy_set_kernel_copy(true); }
};

TEST(Xcopy, KernelCopyBetweenFileLus)
{
	Two w("file");
	// 10000 blocks: more than one kernel chunk (4 MiB) and a partial one.
	const Bytes data = pattern(10000 * kBs, 11);
	w.write(0, 50, data);
	auto r = w.xcopy(plist({cscd(w.a->naa()), cscd(w.b->naa())}, {seg(0, 1, 10000, 50, 70)}));
	ASSERT_TRUE(is_good(r));
	EXPECT_EQ(w.read(1, 70, 10000), data);
	EXPECT_EQ(w.read(1, 69, 1), Bytes(kBs, 0));
	EXPECT_EQ(w.read(1, 10070, 1), Bytes(kBs, 0));
	XcopyCounts c = w.a->xcopy_stats_.read();
	EXPECT_EQ(c.good, 1u);
	EXPECT_EQ(c.bytes, 10000u * kBs);
	EXPECT_EQ(c.kernel_bytes, c.bytes) << "the kernel copied it all";
	EXPECT_EQ(w.b->xcopy_stats_.read().good, 0u) << "counted on the copy manager only";

	// Coherence with O_DIRECT. The loop's buffers are aligned, so with the kernel's copy off
	// its reads and writes take the O_DIRECT descriptor (where the file system has one).
	// The source rewritten that way after the first copy read it through the page cache:
	// the next in-kernel copy reads the new data, not the cached pages.
	const Bytes data2 = pattern(2048 * kBs, 12);
	w.write(1, 14000, data2);
	FileBsStats before{}, after{};
	ASSERT_TRUE(file_bs_stats(w.a->bs(), &before));
	{
		NoKernelCopy off;
		ASSERT_TRUE(is_good(w.xcopy(
		    plist({cscd(w.b->naa()), cscd(w.a->naa())}, {seg(0, 1, 2048, 14000, 50)}), 1)));
	}
	ASSERT_TRUE(file_bs_stats(w.a->bs(), &after));
	if (before.direct) {
		EXPECT_GT(after.direct_rw, before.direct_rw) << "the source rewritten O_DIRECT";
	}
	r = w.xcopy(plist({cscd(w.a->naa()), cscd(w.b->naa())}, {seg(0, 1, 2048, 50, 70)}));
	ASSERT_TRUE(is_good(r));
	EXPECT_EQ(w.read(1, 70, 2048), data2);
	EXPECT_EQ(w.read(1, 70 + 2048, 10000 - 2048), Bytes(data.begin() + 2048 * kBs, data.end()));
	// And an O_DIRECT read of what the kernel copied (its pages perhaps not yet written
	// back) finds it: the loop copies it on.
	ASSERT_TRUE(file_bs_stats(w.b->bs(), &before));
	{
		NoKernelCopy off;
		ASSERT_TRUE(is_good(w.xcopy(
		    plist({cscd(w.b->naa()), cscd(w.a->naa())}, {seg(0, 1, 2048, 70, 12000)}), 1)));
	}
	ASSERT_TRUE(file_bs_stats(w.b->bs(), &after));
	if (before.direct) {
		EXPECT_GT(after.direct_rw, before.direct_rw) << "the destination read O_DIRECT";
	}
	EXPECT_EQ(w.read(0, 12000, 2048), data2);
	c = w.a->xcopy_stats_.read();
	EXPECT_EQ(c.good, 2u);
	EXPECT_EQ(c.kernel_bytes, 12048u * kBs);
	EXPECT_EQ(w.b->xcopy_stats_.read().kernel_bytes, 0u);
	EXPECT_EQ(w.b->xcopy_stats_.read().bytes, 4096u * kBs)
	    << "the loop's two copies, sent to LUN 1";

	// Without a volatile cache (WCE 0) every chunk is made durable before the next: the
	// same data arrives.
	w.b->set_wce(false);
	r = w.xcopy(plist({cscd(w.a->naa()), cscd(w.b->naa())}, {seg(0, 1, 100, 50, 9000)}));
	ASSERT_TRUE(is_good(r));
	EXPECT_EQ(w.read(1, 9000, 100), Bytes(data2.begin(), data2.begin() + 100 * kBs));
	EXPECT_EQ(w.a->xcopy_stats_.read().kernel_bytes, 12148u * kBs);
}

TEST(Xcopy, KernelCopyOffFallsBackToTheLoop)
{
	NoKernelCopy off;
	Two w("file");
	const Bytes data = pattern(3000 * kBs, 13);
	w.write(0, 0, data);
	auto r = w.xcopy(plist({cscd(w.a->naa()), cscd(w.b->naa())}, {seg(0, 1, 3000, 0, 10)}));
	ASSERT_TRUE(is_good(r));
	EXPECT_EQ(w.read(1, 10, 3000), data);
	const XcopyCounts c = w.a->xcopy_stats_.read();
	EXPECT_EQ(c.good, 1u);
	EXPECT_EQ(c.bytes, 3000u * kBs);
	EXPECT_EQ(c.kernel_bytes, 0u) << "read and written through the backstores";
}

TEST(Xcopy, KernelCopyWithinOneFileLu)
{
	Two w("file");
	const Bytes d = pattern(64 * kBs, 14);
	w.write(0, 0, d);
	// Disjoint ranges of one file: the kernel copies.
	ASSERT_TRUE(is_good(w.xcopy(plist({cscd(w.a->naa())}, {seg(0, 0, 64, 0, 1000)}))));
	EXPECT_EQ(w.read(0, 1000, 64), d);
	EXPECT_EQ(w.a->xcopy_stats_.read().kernel_bytes, 64u * kBs);
	// Overlapping ranges: copy_file_range refuses them (EINVAL), the loop copies them (one
	// chunk: read whole, then written).
	ASSERT_TRUE(is_good(w.xcopy(plist({cscd(w.a->naa())}, {seg(0, 0, 64, 0, 32)}))));
	EXPECT_EQ(w.read(0, 32, 64), d);
	const XcopyCounts c = w.a->xcopy_stats_.read();
	EXPECT_EQ(c.kernel_bytes, 64u * kBs) << "the overlapping copy was not the kernel's";
	EXPECT_EQ(c.bytes, 128u * kBs);
	EXPECT_EQ(c.good, 2u);
}

TEST(Xcopy, FileToRamUsesTheLoop)
{
	Target t;
	t.lus.push_back(std::make_unique<LogicalUnit>("xf", file_bs(4 << 20), LuConfig{}));
	ASSERT_EQ(t.tpg.add_lun(0, *t.lus.back()), 0);
	t.lus.push_back(std::make_unique<LogicalUnit>("xr", ram_bs(4 << 20), LuConfig{}));
	ASSERT_EQ(t.tpg.add_lun(1, *t.lus.back()), 0);
	Nexus *s = t.login("iqn.init:fr");
	t.lb.run(s, 1, cdb_tur(), DataDir::None);
	const Bytes d = pattern(300 * kBs, 15);
	ASSERT_TRUE(is_good(t.lb.run(s, 0, cdb_rw(0x8a, 0, 300), DataDir::Write, d)));
	const Bytes p =
	    plist({cscd(t.lus[0]->naa()), cscd(t.lus[1]->naa())}, {seg(0, 1, 300, 0, 0)});
	ASSERT_TRUE(is_good(t.lb.run(s, 0, cdb_xcopy(uint32_t(p.size())), DataDir::Write, p)));
	auto r = t.lb.run(s, 1, cdb_rw(0x88, 0, 300), DataDir::Read, Bytes(300 * kBs));
	ASSERT_TRUE(is_good(r));
	EXPECT_EQ(r.data, d);
	const XcopyCounts c = t.lus[0]->xcopy_stats_.read();
	EXPECT_EQ(c.bytes, 300u * kBs);
	EXPECT_EQ(c.kernel_bytes, 0u);
}

TEST(Xcopy, WithinOneLuAndSeveralSegments)
{
	Two w;
	const Bytes d1 = pattern(64 * kBs, 1), d2 = pattern(8 * kBs, 2);
	w.write(0, 0, d1);
	w.write(0, 64, d2);
	// One CSCD for both ends; two segments, the second with DC (destination blocks); a
	// zero-block segment copies nothing.
	auto r =
	    w.xcopy(plist({cscd(w.a->naa())}, {seg(0, 0, 64, 0, 4096), seg(0, 0, 8, 64, 8192, true),
	                                       seg(0, 0, 0, 0, 100)}));
	ASSERT_TRUE(is_good(r));
	EXPECT_EQ(w.read(0, 4096, 64), d1);
	EXPECT_EQ(w.read(0, 8192, 8), d2);
	EXPECT_EQ(w.read(0, 100, 1), Bytes(kBs, 0)) << "the zero-block segment wrote nothing";
}

TEST(Xcopy, InquiryAndOpcodes)
{
	Two w;
	auto r = w.t.lb.run(w.s, 0, cdb_inquiry(96), DataDir::Read, Bytes(96));
	ASSERT_TRUE(is_good(r));
	EXPECT_TRUE(r.data[5] & 0x08) << "3PC";
	// REPORT SUPPORTED OPERATION CODES, one command: EXTENDED COPY's service action 00h.
	for (auto [op, sa] : {std::pair{0x83, 0x00}, {0x84, 0x00}, {0x84, 0x03}, {0x84, 0x04}}) {
		Bytes c(12, 0);
		c[0] = 0xa3;
		c[1] = 0x0c;
		c[2] = 0x02; // REPORTING OPTIONS 010b: opcode and service action
		c[3] = uint8_t(op);
		put_be16(&c[4], uint16_t(sa));
		put_be32(&c[6], 64);
		auto q = w.t.lb.run(w.s, 0, c, DataDir::Read, Bytes(64));
		ASSERT_TRUE(is_good(q));
		EXPECT_EQ(q.data[1] & 7, 3) << "supported: " << op << "/" << sa;
		EXPECT_EQ(get_be16(&q.data[2]), 16);
		EXPECT_EQ(q.data[4], op);
	}
}

// The Third-party Copy VPD page (8Fh) walked descriptor by descriptor, every length checked
// against the page: type -> body (after the 4-byte header).
std::map<uint16_t, Bytes> tpc_descriptors(const Bytes &page)
{
	std::map<uint16_t, Bytes> out;
	EXPECT_GE(page.size(), 4u);
	if (page.size() < 4)
		return out;
	EXPECT_EQ(page[1], 0x8f);
	const size_t end = 4 + get_be16(&page[2]);
	EXPECT_LE(end, page.size());
	size_t at = 4;
	while (at + 4 <= std::min(end, page.size())) {
		const uint16_t type = get_be16(&page[at]), len = get_be16(&page[at + 2]);
		EXPECT_EQ(len % 4, 0) << "descriptor " << type << " padded to a multiple of 4";
		if (at + 4 + len > end) {
			ADD_FAILURE() << "descriptor " << type << " runs past the page";
			break;
		}
		EXPECT_FALSE(out.count(type)) << "descriptor " << type << " twice";
		out[type] = Bytes(page.begin() + long(at + 4), page.begin() + long(at + 4 + len));
		at += 4 + len;
	}
	EXPECT_EQ(at, end) << "descriptors fill the page";
	return out;
}

TEST(Xcopy, ThirdPartyCopyVpdMatchesOperatingParameters)
{
	Two w;
	auto pages = w.t.lb.run(w.s, 0, cdb_inquiry(255, true, 0x00), DataDir::Read, Bytes(255));
	ASSERT_TRUE(is_good(pages));
	EXPECT_NE(std::find(pages.data.begin() + 4, pages.data.end(), 0x8f), pages.data.end())
	    << "listed in VPD 00h";
	auto v = w.t.lb.run(w.s, 0, cdb_inquiry(1024, true, 0x8f), DataDir::Read, Bytes(1024));
	ASSERT_TRUE(is_good(v));
	v.data.resize(4 + get_be16(&v.data[2]));
	const std::map<uint16_t, Bytes> d = tpc_descriptors(v.data);
	// What the copy manager does, and nothing of token-based copy (0000h ROD token
	// limits, 0106h ROD token features, 0108h ROD types), streams (9101h) or held data
	// (C001h).
	std::vector<uint16_t> types;
	for (auto &[t, b] : d)
		types.push_back(t);
	EXPECT_EQ(types, (std::vector<uint16_t>{0x0001, 0x0004, 0x0008, 0x000c, 0x8001}));

	auto op = w.rcr(RCR_OPERATING_PARAMETERS, 0, 64);
	ASSERT_TRUE(is_good(op));
	const Bytes &o = op.data;

	// Supported Commands: EXTENDED COPY (LID1) and three RECEIVE COPY RESULTS service
	// actions, each of which REPORT SUPPORTED OPERATION CODES calls supported.
	const Bytes &sc = d.at(0x0001);
	ASSERT_GE(sc.size(), 1u);
	std::map<uint8_t, std::vector<uint8_t>> cmds;
	for (size_t i = 1; i + 2 <= size_t(1) + sc[0] && i + 2 <= sc.size();) {
		const uint8_t opc = sc[i], n = sc[i + 1];
		ASSERT_LE(i + 2 + n, sc.size());
		cmds[opc] =
		    std::vector<uint8_t>(sc.begin() + long(i + 2), sc.begin() + long(i + 2 + n));
		i += 2 + n;
	}
	EXPECT_EQ(cmds, (std::map<uint8_t, std::vector<uint8_t>>{{0x83, {0x00}},
	                                                         {0x84, {0x00, 0x03, 0x04}}}));
	for (auto &[opc, sas] : cmds)
		for (uint8_t sa : sas) {
			Bytes c(12, 0);
			c[0] = 0xa3;
			c[1] = 0x0c;
			c[2] = 0x02;
			c[3] = opc;
			put_be16(&c[4], sa);
			put_be32(&c[6], 64);
			auto q = w.t.lb.run(w.s, 0, c, DataDir::Read, Bytes(64));
			ASSERT_TRUE(is_good(q));
			EXPECT_EQ(q.data[1] & 7, 3) << "supported: " << int(opc) << "/" << int(sa);
		}

	// Parameter Data: the list limits, as OPERATING PARAMETERS has them.
	const Bytes &pd = d.at(0x0004);
	ASSERT_EQ(pd.size(), 0x1cu);
	EXPECT_EQ(get_be16(&pd[4]), get_be16(&o[8])) << "MAXIMUM CSCD DESCRIPTOR COUNT";
	EXPECT_EQ(get_be16(&pd[6]), get_be16(&o[10])) << "MAXIMUM SEGMENT DESCRIPTOR COUNT";
	EXPECT_EQ(get_be32(&pd[8]), get_be32(&o[12])) << "MAXIMUM DESCRIPTOR LIST LENGTH";
	EXPECT_EQ(get_be32(&pd[12]), get_be32(&o[20])) << "MAXIMUM INLINE DATA LENGTH";
	EXPECT_EQ(get_be16(&pd[4]), kXcopyMaxCscd);

	// Supported Descriptors: the implemented descriptor type codes.
	const Bytes &sd = d.at(0x0008);
	ASSERT_GE(sd.size(), size_t(1) + sd[0]);
	EXPECT_EQ(Bytes(sd.begin() + 1, sd.begin() + 1 + sd[0]),
	          Bytes(o.begin() + 44, o.begin() + 44 + o[43]));

	// Supported CSCD Descriptor IDs: none above 7FFh.
	const Bytes &ids = d.at(0x000c);
	ASSERT_GE(ids.size(), 2u);
	EXPECT_EQ(get_be16(&ids[0]), 0);

	// General Copy Operations: concurrency, segment length and granularities.
	const Bytes &gc = d.at(0x8001);
	ASSERT_EQ(gc.size(), 0x20u);
	EXPECT_EQ(get_be32(&gc[0]), get_be16(&o[34])) << "TOTAL CONCURRENT COPIES";
	EXPECT_EQ(get_be32(&gc[4]), o[36]) << "MAXIMUM IDENTIFIED CONCURRENT COPIES";
	EXPECT_EQ(get_be32(&gc[8]), get_be32(&o[16])) << "MAXIMUM SEGMENT LENGTH";
	EXPECT_EQ(gc[12], o[37]) << "DATA SEGMENT GRANULARITY";
	EXPECT_EQ(gc[13], o[38]) << "INLINE DATA GRANULARITY";

	// Cut short by ALLOCATION LENGTH, the page is its prefix.
	auto cut = w.t.lb.run(w.s, 0, cdb_inquiry(20, true, 0x8f), DataDir::Read, Bytes(20));
	ASSERT_TRUE(is_good(cut));
	EXPECT_EQ(Bytes(cut.data.begin(), cut.data.begin() + 20),
	          Bytes(v.data.begin(), v.data.begin() + 20));
}

// ---- Copy targets -------------------------------------------------------------------------------

TEST(Xcopy, UnreachableCopyTargets)
{
	Two w;
	w.write(1, 0, pattern(kBs, 3));
	const Bytes before = w.read(1, 0, 1);
	// An NAA no LU has.
	auto r =
	    w.xcopy(plist({cscd(w.a->naa()), cscd(0x3123456789abcdefull)}, {seg(0, 1, 1, 0, 0)}));
	EXPECT_TRUE(is_sense(r, XASC_TARGET_NOT_REACHABLE, kCopyAborted));
	// NUL: names no LU.
	r = w.xcopy(plist({cscd(w.a->naa()), cscd(w.b->naa(), 0x20)}, {seg(0, 1, 1, 0, 0)}));
	EXPECT_TRUE(is_sense(r, XASC_TARGET_NOT_REACHABLE, kCopyAborted));
	// Another designator type (T10 vendor id) is one this copy manager cannot resolve.
	Bytes t10 = cscd(w.b->naa());
	t10[5] = 0x01;
	r = w.xcopy(plist({cscd(w.a->naa()), t10}, {seg(0, 1, 1, 0, 0)}));
	EXPECT_TRUE(is_sense(r, XASC_TARGET_NOT_REACHABLE, kCopyAborted));
	// An LU of this process that the nexus has no LUN for (another target's).
	LogicalUnit hidden("xc-hidden", ram_bs(1 << 20), LuConfig{});
	r = w.xcopy(plist({cscd(w.a->naa()), cscd(hidden.naa())}, {seg(0, 1, 1, 0, 0)}));
	EXPECT_TRUE(is_sense(r, XASC_TARGET_NOT_REACHABLE, kCopyAborted));
	r = w.xcopy(plist({cscd(hidden.naa()), cscd(w.b->naa())}, {seg(0, 1, 1, 0, 0)}));
	EXPECT_TRUE(is_sense(r, XASC_TARGET_NOT_REACHABLE, kCopyAborted));
	EXPECT_EQ(w.read(1, 0, 1), before) << "nothing written";
	// A CSCD no segment uses is not resolved at all.
	r = w.xcopy(plist({cscd(w.a->naa()), cscd(0x3000000000000001ull)}, {seg(0, 0, 1, 0, 1)}));
	EXPECT_TRUE(is_good(r));
	// Counted on LUN 0's LU, the copy manager addressed: five failed, one done.
	const XcopyCounts c = w.a->xcopy_stats_.read();
	EXPECT_EQ(c.failed, 5u);
	EXPECT_EQ(c.good, 1u);
	EXPECT_EQ(c.aborted, 0u);
	EXPECT_EQ(c.bytes, uint64_t(kBs));
}

TEST(Xcopy, WriteProtectedDestination)
{
	Target t;
	t.add(0);
	LogicalUnit &ro = t.add(1, 1 << 20, {}, false, /*read_only=*/true);
	Nexus *s = t.login("iqn.init:ro");
	t.lb.run(s, 1, cdb_tur(), DataDir::None);
	const Bytes p = plist({cscd(t.lus[0]->naa()), cscd(ro.naa())}, {seg(0, 1, 1, 0, 0)});
	auto r = t.lb.run(s, 0, cdb_xcopy(uint32_t(p.size())), DataDir::Write, p);
	EXPECT_TRUE(is_sense(r, XASC_WRITE_PROTECTED, 0x7));
}

// ---- The parameter list ---------------------------------------------------------------------

TEST(Xcopy, ParameterListErrors)
{
	Two w;
	const uint64_t a = w.a->naa();
	const Bytes good = plist({cscd(a)}, {seg(0, 0, 1, 0, 1)});
	struct Case {
		const char *what;
		Bytes p;
		uint16_t asc;
		uint8_t key;
	};
	Bytes trunc_cscd = good;
	trunc_cscd.resize(16 + 31);
	Bytes trunc_seg = good;
	trunc_seg.resize(good.size() - 1);
	Bytes lid_usage = good;
	lid_usage[1] = 1 << 3;
	Bytes none_with_id = plist({cscd(a)}, {seg(0, 0, 1, 0, 1)}, 7, XCOPY_LIST_NONE);
	std::vector<Bytes> many_cscd(kXcopyMaxCscd + 1, cscd(a));
	std::vector<Bytes> many_seg(kXcopyMaxSegments + 1, seg(0, 0, 1, 0, 1));
	// Longer than MAXIMUM DESCRIPTOR LIST LENGTH, as the header claims it.
	Bytes too_long = plist({cscd(a)}, {seg(0, 0, 1, 0, 1)});
	put_be32(&too_long[8], kXcopyMaxDescListLen - 32 + 1);
	Bytes bad_seg_len = good;
	put_be16(&bad_seg_len[16 + 32 + 2], 0x20);
	std::vector<Case> cases = {
	    {"shorter than the header", Bytes(good.begin(), good.begin() + 10),
	     XASC_PARAM_LIST_LENGTH, kIllegal},
	    {"truncated CSCD", trunc_cscd, XASC_PARAM_LIST_LENGTH, kIllegal},
	    {"truncated segment", trunc_seg, XASC_PARAM_LIST_LENGTH, kIllegal},
	    {"descriptor lists too long", too_long, XASC_PARAM_LIST_LENGTH, kIllegal},
	    {"too many CSCDs", plist(many_cscd, {seg(0, 0, 1, 0, 1)}), XASC_TOO_MANY_CSCD,
	     kIllegal},
	    {"too many segments", plist({cscd(a)}, many_seg), XASC_TOO_MANY_SEGMENTS, kIllegal},
	    {"FC N_Port_Name CSCD", plist({cscd(a, 0, 0xe0)}, {seg(0, 0, 1, 0, 1)}),
	     XASC_UNSUPPORTED_CSCD, kIllegal},
	    {"stream-to-stream segment", plist({cscd(a)}, {seg(0, 0, 1, 0, 1, false, 0x03)}),
	     XASC_UNSUPPORTED_SEGMENT, kIllegal},
	    {"inline data", plist({cscd(a)}, {seg(0, 0, 1, 0, 1)}, 1, XCOPY_LIST_DISCARD, 4),
	     XASC_INLINE_DATA_EXCEEDED, kIllegal},
	    {"peripheral type not a disk", plist({cscd(a, 0x01)}, {seg(0, 0, 1, 0, 1)}),
	     XASC_INVALID_PARAM_FIELD, kIllegal},
	    {"segment descriptor length", bad_seg_len, XASC_INVALID_PARAM_FIELD, kIllegal},
	    {"LIST ID USAGE 01b", lid_usage, XASC_INVALID_PARAM_FIELD, kIllegal},
	    {"no list id but an id", none_with_id, XASC_INVALID_PARAM_FIELD, kIllegal},
	    {"destination CSCD index beyond the list", plist({cscd(a)}, {seg(0, 1, 1, 0, 1)}),
	     XASC_TARGET_NOT_REACHABLE, kCopyAborted},
	    {"source beyond the end", plist({cscd(a)}, {seg(0, 0, 2048, w.a->nr_blocks() - 1, 0)}),
	     XASC_NONE, kCopyAborted},
	    {"destination beyond the end",
	     plist({cscd(a)}, {seg(0, 0, 2048, 0, w.a->nr_blocks() - 2047)}), XASC_NONE,
	     kCopyAborted},
	    {"LBA that wraps", plist({cscd(a)}, {seg(0, 0, 2, 0, ~0ull)}), XASC_NONE, kCopyAborted},
	};
	w.write(0, 0, pattern(4096 * kBs, 9));
	const Bytes before = w.read(0, 0, 4096);
	for (const Case &c : cases) {
		auto r = w.xcopy(c.p);
		EXPECT_TRUE(is_sense(r, c.asc, c.key)) << c.what;
	}
	EXPECT_EQ(w.read(0, 0, 4096), before) << "no failed list wrote anything";
	// The CDB: LID4 (service action 01h) is not offered; a PARAMETER LIST LENGTH beyond
	// what any list may be; 0 copies nothing and is no error (SPC-4 6.4.1).
	auto r = w.t.lb.run(w.s, 0, cdb_xcopy(uint32_t(good.size()), 1), DataDir::Write, good);
	EXPECT_TRUE(is_sense(r, 0x2400, kIllegal));
	r = w.t.lb.run(w.s, 0, cdb_xcopy(kXcopyMaxParamLen + 1), DataDir::Write,
	               Bytes(kXcopyMaxParamLen + 1));
	EXPECT_TRUE(is_sense(r, 0x1a00, kIllegal));
	r = w.t.lb.run(w.s, 0, cdb_xcopy(0), DataDir::None);
	EXPECT_TRUE(is_good(r));
	// SPC-3's LU ID TYPE (byte 1, bits 7:6) is obsolete in SPC-4: ignored, even reserved 10b.
	EXPECT_TRUE(is_good(w.xcopy(plist({cscd(a, 0x80)}, {seg(0, 0, 1, 0, 1)}))));
	EXPECT_EQ(w.read(0, 1, 1), Bytes(before.begin(), before.begin() + kBs));
}

TEST(Xcopy, ParserDirectly)
{
	const Bytes p = plist({cscd(0x3000000000000042ull), cscd(0x3000000000000043ull, 0x20)},
	                      {seg(0, 1, 77, 5, 6, true)}, 9, XCOPY_LIST_HOLD);
	XcopyList l;
	ASSERT_FALSE(xcopy_parse_list(p.data(), p.size(), &l));
	EXPECT_EQ(l.list_id, 9);
	EXPECT_EQ(l.usage, XCOPY_LIST_HOLD);
	ASSERT_EQ(l.ncscd, 2);
	EXPECT_TRUE(l.cscd[0].by_naa);
	EXPECT_EQ(l.cscd[0].naa, 0x3000000000000042ull);
	EXPECT_TRUE(l.cscd[1].nul);
	ASSERT_EQ(l.nseg, 1);
	EXPECT_EQ(l.seg[0].dst, 1);
	EXPECT_TRUE(l.seg[0].dc);
	EXPECT_EQ(l.seg[0].blocks, 77);
	EXPECT_EQ(l.seg[0].src_lba, 5u);
	EXPECT_EQ(l.seg[0].dst_lba, 6u);
	// Every prefix of a good list is refused, none read past its end (ASan builds).
	for (size_t n = 0; n < p.size(); n++) {
		std::vector<uint8_t> cut(p.begin(), p.begin() + n);
		EXPECT_TRUE(xcopy_parse_list(cut.data(), cut.size(), &l)) << n;
	}
}

// ---- RECEIVE COPY RESULTS
// -------------------------------------------------------------------------

TEST(Xcopy, OperatingParametersMatchWhatIsEnforced)
{
	Two w;
	auto r = w.rcr(RCR_OPERATING_PARAMETERS, 0, 64);
	ASSERT_TRUE(is_good(r));
	ASSERT_GE(r.xfer_len, 46u);
	EXPECT_EQ(get_be32(&r.data[0]), 42u);
	const uint16_t max_cscd = get_be16(&r.data[8]), max_seg = get_be16(&r.data[10]);
	const uint32_t max_list = get_be32(&r.data[12]);
	EXPECT_EQ(max_cscd, kXcopyMaxCscd);
	EXPECT_EQ(max_seg, kXcopyMaxSegments);
	EXPECT_EQ(max_list, kXcopyMaxDescListLen);
	EXPECT_EQ(get_be32(&r.data[20]), 0u) << "no inline data";
	EXPECT_EQ(r.data[43], 2);
	EXPECT_EQ(r.data[44], XCOPY_SEG_B2B);
	EXPECT_EQ(r.data[45], XCOPY_CSCD_ID);
	// The reported maxima are accepted, one more is not.
	const uint64_t a = w.a->naa();
	w.write(0, 0, pattern(kBs, 4));
	std::vector<Bytes> cs(max_cscd, cscd(a)), ss(max_seg, seg(0, max_cscd - 1, 1, 0, 1));
	EXPECT_TRUE(is_good(w.xcopy(plist(cs, ss))));
	EXPECT_EQ(w.read(0, 1, 1), pattern(kBs, 4));
	cs.push_back(cscd(a));
	EXPECT_TRUE(is_sense(w.xcopy(plist(cs, {seg(0, 0, 1, 0, 1)})), XASC_TOO_MANY_CSCD));
	ss.push_back(seg(0, 0, 1, 0, 1));
	EXPECT_TRUE(is_sense(w.xcopy(plist({cscd(a)}, ss)), XASC_TOO_MANY_SEGMENTS));
	// Allocation length: truncated, no error.
	r = w.rcr(RCR_OPERATING_PARAMETERS, 0, 8);
	ASSERT_TRUE(is_good(r));
	EXPECT_EQ(r.xfer_len, 8u);
	// RECEIVE DATA (01h) and the LID4 service actions are not offered.
	EXPECT_TRUE(is_sense(w.rcr(0x01, 0), 0x2400, kIllegal));
	EXPECT_TRUE(is_sense(w.rcr(0x05, 0), 0x2400, kIllegal));
}

TEST(Xcopy, CopyStatusAndFailedSegmentDetails)
{
	Two w;
	const uint64_t a = w.a->naa(), b = w.b->naa();
	// Nothing held for list id 5 yet.
	EXPECT_TRUE(is_sense(w.rcr(RCR_COPY_STATUS, 5), 0x2400, kIllegal));
	auto r = w.xcopy(plist({cscd(a), cscd(b)}, {seg(0, 1, 100, 0, 0), seg(0, 1, 28, 0, 200)}, 5,
	                       XCOPY_LIST_HOLD));
	ASSERT_TRUE(is_good(r));
	r = w.rcr(RCR_COPY_STATUS, 5);
	ASSERT_TRUE(is_good(r));
	EXPECT_EQ(get_be32(&r.data[0]), 8u);
	EXPECT_EQ(r.data[4], XCOPY_DONE_GOOD);
	EXPECT_EQ(get_be16(&r.data[5]), 2) << "segments processed";
	EXPECT_EQ(r.data[7], 0) << "bytes";
	EXPECT_EQ(get_be32(&r.data[8]), 128u * kBs);
	// Per I_T nexus: another nexus does not see it.
	Nexus *s2 = w.t.login("iqn.init:other");
	auto o = w.t.lb.run(s2, 0, cdb_rcr(RCR_COPY_STATUS, 5, 64), DataDir::Read, Bytes(64));
	EXPECT_TRUE(is_sense(o, 0x2400, kIllegal));
	// No details for a copy without error.
	r = w.rcr(RCR_FAILED_SEGMENT_DETAILS, 5);
	ASSERT_TRUE(is_good(r));
	EXPECT_EQ(get_be32(&r.data[0]), 0u);
	// A held copy that fails: COPY STATUS says so, FAILED SEGMENT DETAILS gives its sense
	// once.
	r = w.xcopy(plist({cscd(a), cscd(b)}, {seg(0, 1, 10, w.a->nr_blocks() - 1, 0)}, 6,
	                  XCOPY_LIST_HOLD));
	ASSERT_TRUE(is_sense(r, XASC_NONE, kCopyAborted));
	r = w.rcr(RCR_COPY_STATUS, 6);
	ASSERT_TRUE(is_good(r));
	EXPECT_EQ(r.data[4], XCOPY_DONE_ERROR);
	r = w.rcr(RCR_FAILED_SEGMENT_DETAILS, 6);
	ASSERT_TRUE(is_good(r));
	ASSERT_GE(r.xfer_len, 60u + 18);
	EXPECT_EQ(get_be32(&r.data[0]), 56u + 18);
	EXPECT_EQ(r.data[56], uint8_t(Status::CheckCondition));
	EXPECT_EQ(get_be16(&r.data[58]), 18);
	EXPECT_EQ(r.data[60 + 2] & 0xf, kCopyAborted);
	EXPECT_TRUE(is_sense(w.rcr(RCR_FAILED_SEGMENT_DETAILS, 6), 0x2400, kIllegal))
	    << "read once";
	// Discarded lists (10b) are not held.
	ASSERT_TRUE(
	    is_good(w.xcopy(plist({cscd(a)}, {seg(0, 0, 1, 0, 1)}, 7, XCOPY_LIST_DISCARD))));
	EXPECT_TRUE(is_sense(w.rcr(RCR_COPY_STATUS, 7), 0x2400, kIllegal));
}

TEST(Xcopy, HeldResultsAreBounded)
{
	Two w;
	const uint64_t a = w.a->naa();
	// More held copies than are kept, each with its own (wrapping) list id on a fresh
	// nexus: the oldest are forgotten.
	std::vector<Nexus *> ss;
	for (size_t i = 0; i < kXcopyMaxResults + 8; i++) {
		Nexus *s = w.t.lb.login(w.t.tpg, "iqn.init:n" + std::to_string(i));
		ASSERT_TRUE(s);
		w.t.lb.run(s, 0, cdb_tur(), DataDir::None);
		const Bytes p = plist({cscd(a)}, {seg(0, 0, 1, 0, 1)}, 1, XCOPY_LIST_HOLD);
		ASSERT_TRUE(
		    is_good(w.t.lb.run(s, 0, cdb_xcopy(uint32_t(p.size())), DataDir::Write, p)));
		ss.push_back(s);
	}
	auto first =
	    w.t.lb.run(ss.front(), 0, cdb_rcr(RCR_COPY_STATUS, 1, 64), DataDir::Read, Bytes(64));
	EXPECT_TRUE(is_sense(first, 0x2400, kIllegal)) << "the oldest is forgotten";
	auto last =
	    w.t.lb.run(ss.back(), 0, cdb_rcr(RCR_COPY_STATUS, 1, 64), DataDir::Read, Bytes(64));
	EXPECT_TRUE(is_good(last));
}

// ---- Aborts and removal -------------------------------------------------------------------------

// A 4 MiB copy from the gated LU 0 to LU 1, stopped by tmf while its first read is held:
// the function waits for that read, the first chunk is written, no further I/O is issued,
// and the command gets no status of its own.
void abort_copy(TmfType tmf)
{
	Two w("ram", /*gated_a=*/true);
	const Bytes data = pattern(8192 * kBs, 5);
	w.write(0, 0, data);
	const Bytes p = plist({cscd(w.a->naa()), cscd(w.b->naa())}, {seg(0, 1, 8192, 0, 0)});
	w.gate_a->close();
	auto *pend = w.t.lb.start_async(w.s, 0, cdb_xcopy(uint32_t(p.size())), DataDir::Write, p,
	                                TaskAttr::Simple, 0x77);
	ASSERT_TRUE(w.gate_a->wait_held(1));
	auto *tm = w.t.lb.tmf_start(w.s, tmf, 0, 0x77);
	std::this_thread::sleep_for(milliseconds(20));
	EXPECT_FALSE(w.t.lb.tmf_answered(tm)) << "the read in flight ends first";
	w.gate_a->open(/*stay_closed=*/true);
	EXPECT_EQ(w.t.lb.tmf_wait(tm), TmfResponse::Complete);
	auto r = w.t.lb.wait(pend);
	EXPECT_TRUE(r.finished);
	EXPECT_TRUE(r.aborted);
	EXPECT_EQ(w.gate_a->held(), 0u) << "no I/O after the abort";
	w.gate_a->open();
	w.t.lb.run(w.s, 0, cdb_tur(), DataDir::None); // a LUN RESET's unit attention
	w.t.lb.run(w.s, 1, cdb_tur(), DataDir::None);
	const uint32_t chunk = kXcopyChunkBytes / kBs;
	EXPECT_EQ(w.read(1, 0, chunk), Bytes(data.begin(), data.begin() + chunk * kBs));
	EXPECT_EQ(w.read(1, chunk, 1), Bytes(kBs, 0)) << "the rest left unwritten";
	EXPECT_EQ(w.read(1, 8191, 1), Bytes(kBs, 0));
	EXPECT_EQ(w.a->task_count(), 0u);
	const XcopyCounts c = w.a->xcopy_stats_.read();
	EXPECT_EQ(c.aborted, 1u);
	EXPECT_EQ(c.good + c.failed, 0u);
	EXPECT_EQ(c.bytes, uint64_t(kXcopyChunkBytes)) << "the one chunk written";
}

TEST(Xcopy, AbortTaskMidway)
{
	abort_copy(TmfType::AbortTask);
}

TEST(Xcopy, LunResetMidway)
{
	abort_copy(TmfType::LunReset);
}

TEST(Xcopy, CopyTargetDestroyedMidway)
{
	Two w("ram", /*gated_a=*/true);
	const Bytes p = plist({cscd(w.a->naa()), cscd(w.b->naa())}, {seg(0, 1, 8192, 0, 0)});
	w.gate_a->close();
	auto *pend = w.t.lb.start_async(w.s, 0, cdb_xcopy(uint32_t(p.size())), DataDir::Write, p,
	                                TaskAttr::Simple, 0x78);
	ASSERT_TRUE(w.gate_a->wait_held(1));
	// LUN 1 goes, and its LU is destroyed (no command addresses it: lu_quiesce has nothing
	// to wait for). The destruction waits for the copy to let go of it.
	LogicalUnit *gone = nullptr;
	ASSERT_EQ(w.t.tpg.remove_lun(1, &gone), 0);
	ASSERT_EQ(gone, w.b);
	ASSERT_EQ(lu_quiesce(*gone, {&w.t.tpg}, milliseconds(100), milliseconds(100)), 0);
	std::atomic<bool> destroyed{false};
	std::thread killer([&] {
		w.t.lus[1].reset();
		destroyed = true;
	});
	const uint64_t b_naa = w.b->naa();
	std::this_thread::sleep_for(milliseconds(50));
	EXPECT_FALSE(destroyed) << "waits for the copy using it";
	w.gate_a->open();
	auto r = w.t.lb.wait(pend);
	EXPECT_TRUE(is_sense(r, XASC_TARGET_NOT_REACHABLE, kCopyAborted));
	killer.join();
	EXPECT_TRUE(destroyed);
	// And a copy naming it now finds nothing (after REPORTED LUNS DATA HAS CHANGED).
	EXPECT_TRUE(is_sense(w.t.lb.run(w.s, 0, cdb_tur(), DataDir::None), 0x3f0e));
	r = w.xcopy(plist({cscd(w.a->naa()), cscd(b_naa)}, {seg(0, 1, 1, 0, 0)}));
	EXPECT_TRUE(is_sense(r, XASC_TARGET_NOT_REACHABLE, kCopyAborted));
}

} // namespace
} // namespace ulp::scsi::sbc_test
