// SPDX-License-Identifier: MIT
// fuzz/fuzz_pr_state.cc - libFuzzer target: the reservation state file reader
// (scsi/pr_persist.cc pr_decode), which reads what a disk, a crash or an administrator left
// in the state directory when ulp-targetd starts.
//
// Input: the file, whole, and again with its CRC32C trailer made right (so that the body's
// checks are reached). Invariants: nothing is read past the input (ASan); a file that
// loads is canonical: installed in a LU and written out again (pr_image) it gives the same
// bytes, its holder is one of its registrations (or none, for no reservation and the
// all-registrants types), and no two registrations stand for one I_T nexus.
//
// Seeds: ULP_FUZZ_SEEDS=<dir> makes the binary write state files of a few shapes there and
// exit (scripts/fuzz.sh does this).
#include "core/byteorder.h"
#include "core/crc32c.h"
#include "scsi/backstore.h"
#include "scsi/lu.h"
#include "scsi/pr_internal.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

using namespace ulp::scsi;

namespace
{

[[noreturn]] void fail(const char *what)
{
	std::fprintf(stderr, "fuzz_pr_state: %s\n", what);
	__builtin_trap();
}

void check(bool ok, const char *what)
{
	if (!ok)
		fail(what);
}

LogicalUnit &lu()
{
	static LogicalUnit *l = [] {
		BackstoreConfig c;
		c.kind = "null";
		c.size = 1 << 20;
		int err = 0;
		std::string why;
		auto bs = make_backstore(c, &err, &why);
		if (!bs)
			fail("no null backstore");
		return new LogicalUnit("iqn.2026-11.org.ulp:fuzz/0", std::move(bs), LuConfig{});
	}();
	return *l;
}

// Install l as the LU's state (APTPL active) and write it out.
std::vector<uint8_t> rewrite(PrLoaded l)
{
	PrState &pr = pr_of(lu());
	std::lock_guard g(pr.lock);
	pr.aptpl = true;
	pr.regs = std::move(l.regs);
	pr.type = l.type;
	pr.holder = l.holder;
	return pr_image(lu(), pr);
}

void write_seeds(const std::string &dir)
{
	auto reg = [](uint64_t id, const std::string &port, uint16_t rtpi, uint64_t key, bool all,
	              ProtoId proto) {
		Registration r;
		r.id = id;
		r.nexus = {port, rtpi};
		r.key = key;
		r.all_tg_pt = all;
		r.proto = proto;
		return r;
	};
	struct Seed {
		const char *name;
		PrLoaded l;
	};
	PrLoaded none;
	PrLoaded two;
	two.regs = {
	    reg(1, "iqn.1994-05.com.example:a,i,0x23d000000001", 1, 0x11, false, ProtoId::Iscsi),
	    reg(2, "0x0002c90300a1b2c30002c90300a1b2c4", 2, 0x22, true, ProtoId::Srp)};
	two.type = PrType::ExclusiveAccess;
	two.holder = 2;
	PrLoaded ar = two;
	ar.type = PrType::WriteExclusiveAllReg;
	ar.holder = 0;
	for (const Seed &s : {Seed{"empty", none}, Seed{"two-ea", two}, Seed{"two-we-ar", ar}}) {
		const std::vector<uint8_t> b = rewrite(s.l);
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

namespace
{

void run(std::span<const uint8_t> f)
{
	const uint8_t *data = f.data();
	const size_t size = f.size();
	PrLoaded l;
	std::string why;
	const PrLoad r = pr_decode(f, lu().name(), lu().naa(), &l, &why);
	if (r != PrLoad::Ok) {
		check(!why.empty(), "refused without saying why");
		return;
	}
	for (size_t i = 0; i < l.regs.size(); i++)
		for (size_t j = i + 1; j < l.regs.size(); j++)
			check(!l.regs[i].covers(l.regs[j].nexus) &&
			          !l.regs[j].covers(l.regs[i].nexus),
			      "two registrations of one I_T nexus");
	if (l.type == PrType::None || pr_all_registrants(l.type))
		check(l.holder == 0, "a holder where there is none");
	else
		check(l.holder >= 1 && l.holder <= l.regs.size(),
		      "a holder that is no registration");
	const std::vector<uint8_t> again = rewrite(std::move(l));
	check(again.size() == size && std::memcmp(again.data(), data, size) == 0,
	      "a loaded file is not written back the same");
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	run({data, size});
	// The same bytes with a right checksum, so that mutations of the body reach the body's
	// checks rather than stopping at the CRC32C.
	if (size >= 20) {
		std::vector<uint8_t> f(data, data + size);
		ulp::put_be32(&f[size - 4],
		              ulp::crc32c(std::span<const uint8_t>(f).first(size - 4)));
		run(f);
	}
	return 0;
}
