// SPDX-License-Identifier: MIT
// fuzz/fuzz_xcopy.cc - libFuzzer target: the EXTENDED COPY (LID1) parameter list parser
// (scsi/xcopy_parse.cc xcopy_parse_list), which reads what an initiator sends as the
// command's data-out.
//
// Input: the parameter list, whole, in a buffer of exactly its size (ASan sees any read
// past it). Invariants: a refused list says why with ILLEGAL REQUEST or COPY ABORTED, and a
// field pointer (when given) inside the list; an accepted one keeps every limit OPERATING
// PARAMETERS reports (CSCD and segment counts, descriptor list length, no inline data), its
// header's lengths fit the input, every segment names a CSCD of the list, and written out
// again from the parsed fields it parses to the same.
//
// Seeds: ULP_FUZZ_SEEDS=<dir> makes the binary write a few well-formed lists there and exit
// (scripts/fuzz.sh does this).
#include "core/byteorder.h"
#include "scsi/xcopy.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

using namespace ulp::scsi;
using ulp::get_be16;
using ulp::get_be32;
using ulp::put_be16;
using ulp::put_be32;
using ulp::put_be64;

namespace
{

[[noreturn]] void fail(const char *what)
{
	std::fprintf(stderr, "fuzz_xcopy: %s\n", what);
	__builtin_trap();
}

void check(bool ok, const char *what)
{
	if (!ok)
		fail(what);
}

// The list l as an initiator would write it (the parser's fields only; reserved bytes 0).
std::vector<uint8_t> encode(const XcopyList &l)
{
	std::vector<uint8_t> p(kXcopyHeaderLen + l.ncscd * kXcopyCscdLen + l.nseg * kXcopyB2bLen,
	                       0);
	p[0] = l.list_id;
	p[1] = static_cast<uint8_t>(l.usage << 3);
	put_be16(&p[2], static_cast<uint16_t>(l.ncscd * kXcopyCscdLen));
	put_be32(&p[8], static_cast<uint32_t>(l.nseg * kXcopyB2bLen));
	size_t off = kXcopyHeaderLen;
	for (uint8_t i = 0; i < l.ncscd; i++, off += kXcopyCscdLen) {
		const XcopyCscd &c = l.cscd[i];
		p[off] = XCOPY_CSCD_ID;
		p[off + 1] = c.nul ? 0x20 : 0;
		if (c.by_naa) {
			p[off + 4] = 0x01;
			p[off + 5] = 0x03;
			p[off + 7] = 8;
			put_be64(&p[off + 8], c.naa);
		}
	}
	for (uint8_t i = 0; i < l.nseg; i++, off += kXcopyB2bLen) {
		const XcopySeg &s = l.seg[i];
		p[off] = XCOPY_SEG_B2B;
		p[off + 1] = s.dc ? 0x02 : 0;
		put_be16(&p[off + 2], static_cast<uint16_t>(kXcopyB2bLen - 4));
		put_be16(&p[off + 4], s.src);
		put_be16(&p[off + 6], s.dst);
		put_be16(&p[off + 10], s.blocks);
		put_be64(&p[off + 12], s.src_lba);
		put_be64(&p[off + 20], s.dst_lba);
	}
	return p;
}

bool same(const XcopyList &a, const XcopyList &b)
{
	if (a.list_id != b.list_id || a.usage != b.usage || a.ncscd != b.ncscd || a.nseg != b.nseg)
		return false;
	for (uint8_t i = 0; i < a.ncscd; i++)
		if (a.cscd[i].nul != b.cscd[i].nul || a.cscd[i].by_naa != b.cscd[i].by_naa ||
		    a.cscd[i].naa != b.cscd[i].naa)
			return false;
	for (uint8_t i = 0; i < a.nseg; i++) {
		const XcopySeg &x = a.seg[i], &y = b.seg[i];
		if (x.src != y.src || x.dst != y.dst || x.dc != y.dc || x.blocks != y.blocks ||
		    x.src_lba != y.src_lba || x.dst_lba != y.dst_lba)
			return false;
	}
	return true;
}

void write_seeds(const std::string &dir)
{
	XcopyList two; // VMware's shape: two CSCDs, one segment, results discarded
	two.usage = XCOPY_LIST_DISCARD;
	two.list_id = 1;
	two.ncscd = 2;
	two.cscd[0] = {false, true, 0x3123456789abcdefull};
	two.cscd[1] = {false, true, 0x6001405abcdef012ull};
	two.nseg = 1;
	two.seg[0] = {0, 1, false, 8192, 0, 1 << 20};
	XcopyList full; // every limit reached, held
	full.usage = XCOPY_LIST_HOLD;
	full.list_id = 7;
	full.ncscd = kXcopyMaxCscd;
	for (auto &c : full.cscd)
		c = {false, true, 0x3000000000000001ull};
	full.cscd[3].nul = true;
	full.nseg = kXcopyMaxSegments;
	for (uint8_t i = 0; i < kXcopyMaxSegments; i++)
		full.seg[i] = {uint16_t(i % kXcopyMaxCscd),
		               uint16_t((i + 1) % kXcopyMaxCscd),
		               bool(i & 1),
		               uint16_t(i * 100),
		               i,
		               uint64_t(i) << 20};
	XcopyList none; // no list identifier
	none.usage = XCOPY_LIST_NONE;
	none.ncscd = 1;
	none.cscd[0] = {false, true, 0x3000000000000002ull};
	none.nseg = 1;
	none.seg[0] = {0, 0, false, 1, 0, 1};
	struct Seed {
		const char *name;
		const XcopyList &l;
	};
	for (const Seed &s : {Seed{"two", two}, Seed{"full", full}, Seed{"none", none}}) {
		const std::vector<uint8_t> b = encode(s.l);
		std::ofstream f(dir + "/" + s.name, std::ios::binary);
		f.write(reinterpret_cast<const char *>(b.data()),
		        static_cast<std::streamsize>(b.size()));
	}
}

} // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***)
{
	if (const char *dir = std::getenv("ULP_FUZZ_SEEDS")) {
		write_seeds(dir);
		std::exit(0);
	}
	return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size == 0) // the command copies nothing without calling the parser
		return 0;
	std::vector<uint8_t> p(data, data + size); // exactly size bytes on the heap
	XcopyList l;
	const XcopyError e = xcopy_parse_list(p.data(), p.size(), &l);
	if (e) {
		check(e.key == XKEY_ILLEGAL_REQUEST || e.key == XKEY_COPY_ABORTED, "sense key");
		if (e.sks & 0x800000u)
			check((e.sks & 0xffffu) < size && !(e.sks & 0x400000u),
			      "field pointer outside the parameter list");
		return 0;
	}
	check(size >= kXcopyHeaderLen, "accepted a list shorter than its header");
	const uint32_t cscd_len = get_be16(&p[2]), seg_len = get_be32(&p[8]);
	check(uint64_t(cscd_len) + seg_len <= kXcopyMaxDescListLen, "descriptor lists too long");
	check(kXcopyHeaderLen + uint64_t(cscd_len) + seg_len <= size, "lists beyond the input");
	check(get_be32(&p[12]) == 0, "inline data accepted");
	check(l.ncscd <= kXcopyMaxCscd && l.nseg <= kXcopyMaxSegments, "counts beyond the limits");
	check(l.ncscd * kXcopyCscdLen == cscd_len && l.nseg * kXcopyB2bLen == seg_len,
	      "descriptors do not fill the lists");
	check(l.usage != 1, "reserved LIST ID USAGE accepted");
	for (uint8_t i = 0; i < l.nseg; i++)
		check(l.seg[i].src < l.ncscd && l.seg[i].dst < l.ncscd,
		      "segment index beyond the CSCDs");
	const std::vector<uint8_t> again = encode(l);
	XcopyList l2;
	check(!xcopy_parse_list(again.data(), again.size(), &l2), "its own encoding refused");
	check(same(l, l2), "its own encoding parsed differently");
	return 0;
}
