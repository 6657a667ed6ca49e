// SPDX-License-Identifier: MIT
// fuzz/fuzz_srp_cmd.cc - libFuzzer target: what the SRP target parses from an initiator's
// SEND (srp/proto.cc): parse_cmd with its descriptors (direct, indirect with the table
// inline or external, immediate data), desc_at/check_desc_list over the partial list, and
// parse_tsk_mgmt.
//
// Input layout:
//	bytes 0-1   imm_data_offset granted at login (big-endian; 0: none granted)
//	bytes 2-3   max_table_entries (big-endian)
//	the rest    the IU, whole (libFuzzer's buffer ends where it ends: ASan sees any read
//	            past it)
// Invariants: every span of a Cmd lies inside the IU, parsed or refused; a parsed Cmd's
// data length is what its descriptors say (one direct descriptor's length, an inline
// table's entries summed in 64 bits, the immediate data's size); the partial list is no
// longer than the table and the table within max_table_entries; immediate data sits at the
// granted offset past its header. A parsed command is built again (build_cmd) into exactly
// the size it needs - a byte less is refused - and re-parses to the same fields; the same
// for task management.
//
// Seeds: ULP_FUZZ_SEEDS=<dir> makes the binary write Linux's commands there and exit
// (scripts/fuzz.sh does this).
#include "core/byteorder.h"
#include "srp/proto.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

using namespace ulp::srp;
using ulp::get_be16;

namespace
{

[[noreturn]] void fail(const char *what)
{
	std::fprintf(stderr, "fuzz_srp_cmd: %s\n", what);
	__builtin_trap();
}

void check(bool ok, const char *what)
{
	if (!ok)
		fail(what);
}

bool inside(std::span<const uint8_t> s, std::span<const uint8_t> iu)
{
	return s.empty() || (s.data() >= iu.data() && s.size() <= iu.size() &&
	                     s.data() - iu.data() <= static_cast<ptrdiff_t>(iu.size() - s.size()));
}

bool same_bytes(std::span<const uint8_t> a, std::span<const uint8_t> b)
{
	return a.size() == b.size() &&
	       (a.empty() || std::memcmp(a.data(), b.data(), a.size()) == 0);
}

// What a parsed command says, for comparing two parses.
bool same(const Cmd &a, const Cmd &b)
{
	if (a.tag != b.tag || a.lun_raw != b.lun_raw || std::memcmp(a.lun, b.lun, 8) != 0 ||
	    a.task_attr != b.task_attr || !same_bytes(a.cdb, b.cdb) || a.out_fmt != b.out_fmt ||
	    a.in_fmt != b.in_fmt || a.data_len != b.data_len || a.ndescs != b.ndescs ||
	    !same_bytes(a.descs, b.descs) || a.table_entries != b.table_entries ||
	    !same_bytes(a.imm, b.imm))
		return false;
	if (a.in_fmt == DescFmt::Indirect || a.out_fmt == DescFmt::Indirect)
		return a.table.va == b.table.va && a.table.key == b.table.key &&
		       a.table.len == b.table.len;
	return true;
}

void check_cmd(std::span<const uint8_t> iu, const CmdParseOpts &o, const Cmd &c)
{
	check(inside(c.cdb, iu) && inside(c.descs, iu) && inside(c.imm, iu),
	      "a span outside the IU");
	check(c.cdb.size() >= 16 && c.cdb.size() <= kMaxCdbLen && c.cdb.data() == iu.data() + 32,
	      "CDB not at 32");
	check((c.cdb.size() - 16) % 4 == 0, "additional CDB bytes not whole words");
	const size_t desc_off = kCmdLen + c.cdb.size() - 16;
	check(!(c.write() && c.read()), "both directions");
	check(c.descs.size() == size_t{c.ndescs} * kDescLen, "descs and ndescs disagree");
	const DescFmt fmt = c.write() ? c.out_fmt : c.in_fmt;
	switch (fmt) {
	case DescFmt::None:
		check(c.data_len == 0 && c.ndescs == 0 && c.imm.empty(), "data without a format");
		break;
	case DescFmt::Direct:
		check(c.ndescs == 1 && c.table_entries == 0, "direct: not one descriptor");
		check(c.descs.data() == iu.data() + desc_off,
		      "direct: descriptor not after the CDB");
		check(c.data_len == desc_at(c.descs, 0).len, "direct: data_len not its length");
		break;
	case DescFmt::Indirect: {
		check(c.descs.empty() || c.descs.data() == iu.data() + desc_off + kIndirectHdrLen,
		      "indirect: partial list not after its header");
		check(c.ndescs <= c.table_entries, "partial list longer than the table");
		check(c.table_entries <= o.max_table_entries, "table above max_table_entries");
		check(uint64_t{c.table_entries} * kDescLen == c.table.len, "table length");
		check(c.ndescs <= 255, "partial list above its count byte");
		uint64_t sum = 0, sum2 = 0;
		const bool ok = check_desc_list(c.descs, c.ndescs, &sum);
		for (uint32_t i = 0; i < c.ndescs; i++) {
			const DirectDesc d = desc_at(c.descs, i);
			sum2 += d.len;
			if (ok)
				check(d.len != 0, "check_desc_list passed a zero-length entry");
		}
		check(sum == sum2, "check_desc_list sum");
		check(!check_desc_list(c.descs, c.ndescs + 1, &sum), "list longer than itself");
		check(desc_at(c.descs, c.ndescs).len == 0, "desc_at past the list");
		if (!c.table_external())
			check(sum2 == c.data_len, "inline table does not add up to data_len");
		break;
	}
	case DescFmt::Immediate:
		check(o.imm_data_offset != 0, "immediate data not granted");
		check(c.imm.data() == iu.data() + o.imm_data_offset,
		      "immediate data not at the offset");
		check(o.imm_data_offset >= desc_off + kImmHdrLen, "immediate data over its header");
		check(c.imm.size() == c.data_len, "immediate data_len");
		break;
	}
}

// Build the parsed command again, and parse that.
void rebuild(std::span<const uint8_t> iu, const CmdParseOpts &o, const Cmd &c)
{
	CmdOut w;
	w.tag = c.tag;
	w.lun = c.lun;
	w.task_attr = c.task_attr;
	w.cdb = c.cdb;
	w.out_fmt = c.out_fmt;
	w.in_fmt = c.in_fmt;
	DirectDesc list[255];
	for (uint32_t i = 0; i < c.ndescs; i++)
		list[i] = desc_at(c.descs, i);
	w.descs = std::span<const DirectDesc>(list, c.ndescs);
	w.table = c.table;
	w.table_entries = c.table_entries;
	w.total_len = c.data_len;
	w.imm_data_offset = o.imm_data_offset;
	w.imm = c.imm;

	// Never larger than what was parsed: the parser checked it all fits in the IU.
	std::vector<uint8_t> out(iu.size());
	const size_t n = build_cmd(w, out);
	check(n != 0 && n <= iu.size(), "a parsed command does not build");
	std::vector<uint8_t> exact(n), less(n - 1);
	check(build_cmd(w, exact) == n, "built size not enough");
	check(build_cmd(w, less) == 0, "built into a buffer too small");
	Cmd again;
	const CmdError e = parse_cmd(exact, o, &again);
	check(e == CmdError::None, "a built command is refused");
	check(same(c, again), "command round trip differs");
	// The fields in the IU as parsed; reserved bytes and counts of the unused direction
	// may differ, so compare where the builder wrote.
	check(std::memcmp(exact.data() + 8, iu.data() + 8, 8) == 0 &&
	          std::memcmp(exact.data() + 20, iu.data() + 20, 8) == 0,
	      "tag or LUN not rebuilt as sent");
}

void run_cmd(std::span<const uint8_t> iu, const CmdParseOpts &o)
{
	Cmd c;
	const CmdError e = parse_cmd(iu, o, &c);
	check(cmd_error_name(e) != nullptr, "error without a name");
	if (e != CmdError::None) {
		check(inside(c.cdb, iu) && inside(c.descs, iu) && inside(c.imm, iu),
		      "a refused command's span outside the IU");
		if (iu.size() < kCmdLen)
			check(e == CmdError::Short, "under 48 bytes not Short");
		return;
	}
	check(iu.size() >= kCmdLen && iu[0] == CMD, "parsed a command that is not one");
	check_cmd(iu, o, c);
	rebuild(iu, o, c);
}

void run_tsk_mgmt(std::span<const uint8_t> iu)
{
	TskMgmt t;
	if (!parse_tsk_mgmt(iu, &t)) {
		check(iu.size() < kTskMgmtLen || iu[0] != TSK_MGMT, "task management refused");
		return;
	}
	uint8_t b[kTskMgmtLen];
	check(build_tsk_mgmt(t, b) == kTskMgmtLen, "task management does not build");
	check(build_tsk_mgmt(t, std::span<uint8_t>(b, kTskMgmtLen - 1)) == 0,
	      "task management built short");
	// Every field where it was.
	check(b[1] == iu[1] && b[30] == iu[30], "task management sol_not or function");
	check(std::memcmp(b + 8, iu.data() + 8, 8) == 0 &&
	          std::memcmp(b + 20, iu.data() + 20, 8) == 0 &&
	          std::memcmp(b + 32, iu.data() + 32, 8) == 0,
	      "task management tags or LUN");
	TskMgmt again;
	check(parse_tsk_mgmt(b, &again), "built task management refused");
	check(again.tag == t.tag && again.func == t.func && again.task_tag == t.task_tag &&
	          again.sol_not == t.sol_not && std::memcmp(again.lun, t.lun, 8) == 0,
	      "task management round trip differs");
}

void write_seed(const std::string &dir, const std::string &name, uint16_t imm_off,
                uint16_t max_entries, std::span<const uint8_t> iu)
{
	std::vector<uint8_t> b = {uint8_t(imm_off >> 8), uint8_t(imm_off),
	                          uint8_t(max_entries >> 8), uint8_t(max_entries)};
	b.insert(b.end(), iu.begin(), iu.end());
	std::string path = dir + "/" + name;
	if (FILE *f = std::fopen(path.c_str(), "wb")) {
		std::fwrite(b.data(), 1, b.size(), f);
		std::fclose(f);
	}
}

void write_seeds(const std::string &dir)
{
	const uint8_t lun[8] = {0, 1, 0, 0, 0, 0, 0, 0};
	const uint8_t write10[16] = {0x2a, 0, 0, 0, 0x10, 0, 0, 0, 8};
	const uint8_t read10[16] = {0x28, 0, 0, 0, 0x20, 0, 0, 0, 8};
	uint8_t cdb32[32] = {0x7f, 0, 0, 0, 0, 0, 0, 24, 0x00, 0x09};
	std::vector<uint8_t> data(512, 0xa5);
	std::vector<uint8_t> out(8192);
	auto emit = [&](const char *name, const CmdOut &w, uint16_t imm_off) {
		const size_t n = build_cmd(w, out);
		if (n)
			write_seed(dir, name, imm_off, 2048, std::span(out).first(n));
	};

	CmdOut w;
	w.tag = 42;
	w.lun = lun;
	w.cdb = write10;
	w.out_fmt = DescFmt::Immediate;
	w.imm_data_offset = 68;
	w.imm = data;
	emit("cmd-imm", w, 68);

	w = CmdOut{};
	w.tag = 43;
	w.lun = lun;
	w.cdb = read10;
	w.in_fmt = DescFmt::Direct;
	const DirectDesc one[] = {{0x7f1234560000u, 0x1234, 4096}};
	w.descs = one;
	emit("cmd-direct", w, 68);

	const DirectDesc three[] = {
	    {0x1000, 0x11, 4096}, {0x20000, 0x12, 8192}, {0x300000, 0x13, 512}};
	w = CmdOut{};
	w.tag = 44;
	w.lun = lun;
	w.cdb = write10;
	w.out_fmt = DescFmt::Indirect;
	w.descs = three;
	w.table = {0xdead0000u, 0x77, 0};
	w.table_entries = 3;
	w.total_len = 4096 + 8192 + 512;
	emit("cmd-indirect-inline", w, 0);

	w.in_fmt = DescFmt::Indirect;
	w.out_fmt = DescFmt::None;
	w.cdb = read10;
	w.descs = std::span(three, 2);
	w.table_entries = 300;
	w.total_len = 300 * 4096;
	emit("cmd-indirect-external", w, 68);

	w = CmdOut{};
	w.tag = 45;
	w.lun = lun;
	w.cdb = cdb32;
	w.in_fmt = DescFmt::Direct;
	w.descs = one;
	emit("cmd-cdb32", w, 68);

	w = CmdOut{};
	w.tag = 46;
	w.lun = lun;
	w.cdb = std::span(write10).first(16);
	emit("cmd-nodata", w, 0);

	TskMgmt t;
	t.tag = 0x80000006u;
	std::memcpy(t.lun, lun, 8);
	t.func = TSK_ABORT_TASK;
	t.task_tag = 43;
	uint8_t tb[kTskMgmtLen];
	build_tsk_mgmt(t, tb);
	write_seed(dir, "tsk-mgmt", 0, 0, tb);
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
	if (size < 4)
		return 0;
	CmdParseOpts o;
	o.imm_data_offset = get_be16(data);
	o.max_table_entries = get_be16(data + 2);
	const std::span<const uint8_t> iu(data + 4, size - 4);
	run_cmd(iu, o);
	run_tsk_mgmt(iu);
	return 0;
}
