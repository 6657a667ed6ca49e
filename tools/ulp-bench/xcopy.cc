// SPDX-License-Identifier: MIT
// tools/ulp-bench/xcopy.cc - `ulp-bench xcopy`: MiB/s of EXTENDED COPY (scsi/xcopy.cc)
// through the target core and the loopback fabric, one command at a time, each copying
// --mib MiB from one LU to another in 4 KiB blocks:
//
//   file kernel  two file LUs: copy_file_range(2) on the copy threads
//   file loop    the same LUs with the kernel's copy off (xcopy_set_kernel_copy): read and
//                write through io_uring, 1 MiB chunks, one request in flight
//   ram loop     two RAM LUs: the loop, memcpy in and out of the bounce buffer
//
// beside references measured in the same run: copy_file_range directly between the two
// files in the same 4 MiB calls (what the kernel alone does), and memcpy of the same bytes.
// Which path ran is checked, not assumed: the copy manager's counters (XcopyStats) say how
// many bytes the kernel copied.
#include "tools/ulp-bench/xcopy.h"
#include "tools/ulp-bench/report.h"

#include "scsi/backstore.h"
#include "scsi/loopback.h"
#include "scsi/lu.h"
#include "scsi/tpg.h"
#include "scsi/xcopy.h"

#include <fmt/format.h>

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace ulp::bench
{

namespace
{

using namespace ulp::scsi;
using XcClock = std::chrono::steady_clock;

constexpr uint32_t kXcBlock = 4096;
constexpr uint32_t kSegBlocks = 32768; // 128 MiB per segment descriptor (16 bits of blocks)

double xc_seconds_since(XcClock::time_point t0)
{
	return std::chrono::duration<double>(XcClock::now() - t0).count();
}

// Two LUs (LUNs 0 and 1) of one kind, one session.
struct XcPair {
	Loopback lb;
	Tpg tpg{"iqn.2026-11.org.ulp:bench-xcopy", 1};
	std::unique_ptr<LogicalUnit> lu[2];
	Nexus *s = nullptr;

	XcPair(const std::string &kind, const std::string &dir, uint64_t bytes)
	{
		for (int i = 0; i < 2; i++) {
			BackstoreConfig bc;
			bc.kind = kind;
			bc.block_size = kXcBlock;
			bc.size = bytes;
			if (kind == "file") {
				bc.path = fmt::format("{}/ulp-bench-xcopy.{}.{}", dir, getpid(), i);
				::unlink(bc.path.c_str());
			}
			int err = 0;
			std::string why;
			auto bs = make_backstore(bc, &err, &why);
			if (!bs)
				fatal("backstore %s: %s", kind.c_str(), why.c_str());
			if (kind == "file")
				::unlink(bc.path.c_str()); // the open descriptors keep it
			LuConfig lc;
			lc.block_size = kXcBlock;
			lu[i] = std::make_unique<LogicalUnit>(fmt::format("bx{}", i), std::move(bs),
			                                      lc);
			if (tpg.add_lun(uint64_t(i), *lu[i]) != 0)
				fatal("add_lun failed");
		}
		s = lb.login(tpg, "iqn.2026-11.org.ulp:bench");
		for (uint64_t lun : {0, 1}) // POWER ON, out of the way
			lb.run(s, lun, std::vector<uint8_t>{0, 0, 0, 0, 0, 0}, DataDir::None);
		// Fill the source (the files are sparse, RAM chunks unallocated: a copy of holes
		// measures nothing) with WRITE (16) of 1 MiB.
		std::vector<uint8_t> buf(1 << 20);
		for (size_t i = 0; i < buf.size(); i++)
			buf[i] = uint8_t(i * 131 + 7);
		const uint32_t n = uint32_t(buf.size() / kXcBlock);
		for (uint64_t lba = 0; lba < lu[0]->nr_blocks(); lba += n) {
			uint8_t cdb[16] = {0x8a};
			put_be64(cdb + 2, lba);
			put_be32(cdb + 10, n);
			if (lb.run(s, 0, cdb, DataDir::Write, buf).status != Status::Good)
				fatal("WRITE failed filling the source");
		}
	}
	~XcPair() { lb.logout(s); }

	// One EXTENDED COPY of every block of LUN 0 to LUN 1, issued to LUN 0; its seconds.
	double copy()
	{
		const uint64_t blocks = lu[0]->nr_blocks();
		std::vector<uint8_t> p(16, 0);
		p[1] = XCOPY_LIST_NONE << 3;
		for (int i = 0; i < 2; i++) {
			uint8_t c[32] = {XCOPY_CSCD_ID};
			c[4] = 0x01; // binary
			c[5] = 0x03; // LU, NAA
			c[7] = 8;
			put_be64(c + 8, lu[i]->naa());
			c[29] = uint8_t(kXcBlock >> 16);
			put_be16(c + 30, uint16_t(kXcBlock));
			p.insert(p.end(), c, c + 32);
		}
		uint32_t segs = 0;
		for (uint64_t lba = 0; lba < blocks; lba += kSegBlocks, segs++) {
			uint8_t g[28] = {XCOPY_SEG_B2B};
			put_be16(g + 2, 0x18);
			put_be16(g + 6, 1);
			put_be16(g + 10, uint16_t(std::min<uint64_t>(kSegBlocks, blocks - lba)));
			put_be64(g + 12, lba);
			put_be64(g + 20, lba);
			p.insert(p.end(), g, g + 28);
		}
		put_be16(&p[2], 64);
		put_be32(&p[8], segs * 28);
		uint8_t cdb[16] = {OP_XCOPY_LID1};
		put_be32(cdb + 10, uint32_t(p.size()));
		const auto t0 = XcClock::now();
		const LoopResult r = lb.run(s, 0, cdb, DataDir::Write, p, TaskAttr::Simple, 0,
		                            std::chrono::minutes(5));
		const double sec = xc_seconds_since(t0);
		if (!r.finished || r.status != Status::Good)
			fatal("EXTENDED COPY failed (sense key %d, ASC %04x)", int(r.key()),
			      r.asc());
		return sec;
	}
};

// The best of rounds copies, MiB/s; *kernel: bytes the kernel copied over all of them.
double best_mibs(XcPair &p, int rounds, uint64_t bytes, uint64_t *kernel)
{
	const uint64_t k0 = p.lu[0]->xcopy_stats_.read().kernel_bytes;
	double best = 0;
	for (int i = 0; i < rounds; i++)
		best = std::max(best, double(bytes) / (1 << 20) / p.copy());
	*kernel = p.lu[0]->xcopy_stats_.read().kernel_bytes - k0;
	return best;
}

// copy_file_range between two files of bytes, 4 MiB a call, best of rounds: MiB/s.
double ref_copy_file_range(const std::string &dir, uint64_t bytes, int rounds)
{
	const std::string a = fmt::format("{}/ulp-bench-xcopy.{}.ra", dir, getpid()),
	                  b = fmt::format("{}/ulp-bench-xcopy.{}.rb", dir, getpid());
	const int fa = ::open(a.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	const int fb = ::open(b.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	::unlink(a.c_str());
	::unlink(b.c_str());
	if (fa < 0 || fb < 0)
		fatal("reference files in %s: %s", dir.c_str(), std::strerror(errno));
	std::vector<uint8_t> buf(1 << 20);
	for (size_t i = 0; i < buf.size(); i++)
		buf[i] = uint8_t(i * 131 + 7);
	for (uint64_t off = 0; off < bytes; off += buf.size())
		if (::pwrite(fa, buf.data(), buf.size(), off_t(off)) != ssize_t(buf.size()))
			fatal("write: %s", std::strerror(errno));
	if (::ftruncate(fb, off_t(bytes)) != 0)
		fatal("ftruncate: %s", std::strerror(errno));
	double best = 0;
	for (int r = 0; r < rounds; r++) {
		const auto t0 = XcClock::now();
		for (uint64_t off = 0; off < bytes;) {
			loff_t i = loff_t(off), o = loff_t(off);
			const ssize_t n = copy_file_range(
			    fa, &i, fb, &o, std::min<uint64_t>(bytes - off, kXcopyKernelChunkBytes),
			    0);
			if (n <= 0)
				fatal("copy_file_range: %s",
				      n < 0 ? std::strerror(errno) : "0 bytes");
			off += uint64_t(n);
		}
		best = std::max(best, double(bytes) / (1 << 20) / xc_seconds_since(t0));
	}
	::close(fa);
	::close(fb);
	return best;
}

double ref_memcpy(uint64_t bytes, int rounds)
{
	std::vector<uint8_t> a(bytes, 0x5a), b(bytes, 0);
	double best = 0;
	for (int r = 0; r < rounds; r++) {
		const auto t0 = XcClock::now();
		std::memcpy(b.data(), a.data(), bytes);
		asm volatile("" : : "r"(b.data()) : "memory"); // keep the copy
		best = std::max(best, double(bytes) / (1 << 20) / xc_seconds_since(t0));
	}
	return best;
}

} // namespace

int run_xcopy(const XcopyBenchOptions &o)
{
	set_bench("xcopy");
	const double load = loadavg_1m();
	const uint64_t mib = o.mib ? o.mib : o.quick ? 64 : 256;
	const int rounds = o.rounds > 0 ? o.rounds : o.quick ? 2 : 5;
	const std::string dir = o.dir.empty() ? "/var/tmp" : o.dir;
	const uint64_t bytes = mib << 20;

	Report rep("xcopy");
	rep.title(fmt::format("EXTENDED COPY of {} MiB between two LUs through the target core "
	                      "and the loopback fabric, best of {}",
	                      mib, rounds));
	rep.note(fmt::format("file: in {} (page cache warm after the first round); kernel: "
	                     "copy_file_range on the copy threads, beside the same calls made "
	                     "directly; loop: read then write, 1 MiB chunks, beside memcpy",
	                     dir));
	rep.machine(load);
	rep.meta("mib", json_int(int64_t(mib)));
	rep.meta("rounds", json_int(rounds));
	rep.columns({{"LUs", "store", Align::Left},
	             {"path", "path", Align::Left},
	             {"MiB/s", "mib_s"},
	             {"in kernel", "kernel_share"},
	             {"ref", "ref", Align::Left},
	             {"ref MiB/s", "ref_mib_s"},
	             {"ratio", "ratio"}});

	const double ref_cfr = ref_copy_file_range(dir, bytes, rounds);
	const double ref_mem = ref_memcpy(bytes, rounds);
	struct Case {
		const char *kind;
		bool kernel;
	};
	for (const Case c : {Case{"file", true}, Case{"file", false}, Case{"ram", false}}) {
		XcPair p(c.kind, dir, bytes);
		xcopy_set_kernel_copy(c.kernel);
		uint64_t kernel = 0;
		const double mibs = best_mibs(p, rounds, bytes, &kernel);
		xcopy_set_kernel_copy(true);
		const double share = double(kernel) / double(bytes * uint64_t(rounds));
		std::fprintf(stderr,
		             "ulp-bench xcopy: %-4s %-6s %8.0f MiB/s (%.0f%% in the kernel)\n",
		             c.kind, c.kernel ? "kernel" : "loop", mibs, share * 100);
		const double ref = c.kernel ? ref_cfr : ref_mem;
		rep.row()
		    .text(c.kind)
		    .text(c.kernel ? "kernel" : "loop")
		    .num(mibs, 0, 0)
		    .num(share, 2, 3)
		    .text(c.kernel ? "copy_file_range" : "memcpy")
		    .num(ref, 0, 0)
		    .ratio(mibs, ref, 2, 3);
	}
	rep.print(o.json);
	return 0;
}

} // namespace ulp::bench
