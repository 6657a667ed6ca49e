// SPDX-License-Identifier: MIT
// fuzz/fuzz_stpg.cc - libFuzzer target: the SET TARGET PORT GROUPS parameter list decoder
// (scsi/spc_alua.cc stpg_decode, SPC-4 6.46), which reads what an initiator sends with
// MAINTENANCE OUT.
//
// Input: the parameter list, whole. Invariants: nothing is read past it (ASan); a list
// that decodes is empty or a 4-byte header and whole 4-byte descriptors, one change per
// descriptor with the group and state it names, each state one an initiator may ask for
// (Active/Optimized, Active/Non-optimized, Standby, Unavailable); a refused one yields no
// changes and one of the two reasons the decoder documents. Decoded changes applied to a
// LU with explicit ALUA leave every group in a state it can have, and the unit attention
// table bounded.
//
// Seeds: ULP_FUZZ_SEEDS=<dir> makes the binary write a few lists there and exit
// (scripts/fuzz.sh does this).
#include "core/byteorder.h"
#include "scsi/alua.h"
#include "scsi/backstore.h"
#include "scsi/lu.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

using namespace ulp::scsi;

namespace
{

void check(bool ok, const char *what)
{
	if (!ok) {
		std::fprintf(stderr, "fuzz_stpg: %s\n", what);
		__builtin_trap();
	}
}

LogicalUnit &lu()
{
	static LogicalUnit *l = [] {
		BackstoreConfig c;
		c.kind = "null";
		c.size = 1 << 20;
		int err = 0;
		std::string why;
		auto *u = new LogicalUnit("fuzz", make_backstore(c, &err, &why), LuConfig{});
		AluaConfig a;
		a.tpgs = TPGS_BOTH;
		a.groups = {{1, AluaState::ActiveOptimized, true, 0, {1}},
		            {2, AluaState::Standby, false, 0, {2}}};
		check(u->alua_.configure(a, &why) == 0, "configure");
		return u;
	}();
	return *l;
}

void write_seeds(const char *dir)
{
	const std::vector<std::vector<uint8_t>> seeds = {
	    {},
	    {0, 0, 0, 0},
	    {0, 0, 0, 0, 0x00, 0, 0x00, 0x01},
	    {0, 0, 0, 0, 0x02, 0, 0x00, 0x01, 0x00, 0, 0x00, 0x02},
	    {0, 0, 0, 0, 0x0f, 0, 0x00, 0x01},
	};
	for (size_t i = 0; i < seeds.size(); i++) {
		std::ofstream f(std::string(dir) + "/stpg-" + std::to_string(i), std::ios::binary);
		f.write(reinterpret_cast<const char *>(seeds[i].data()),
		        std::streamsize(seeds[i].size()));
	}
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (static bool seeded = false; !seeded) {
		seeded = true;
		if (const char *d = std::getenv("ULP_FUZZ_SEEDS")) {
			write_seeds(d);
			std::exit(0);
		}
	}
	// A copy of exactly size bytes on the heap: ASan sees a read past it.
	std::vector<uint8_t> p(data, data + size);
	std::vector<std::pair<uint16_t, AluaState>> out = {{9, AluaState::Offline}};
	const Sense r = stpg_decode(p, &out);
	if (r != Sense::None) {
		check(r == Sense::ParamListLengthError || r == Sense::InvalidParamListField,
		      "an undocumented reason");
		return 0;
	}
	check(size == 0 || (size >= 4 && size % 4 == 0), "a list of the wrong length decoded");
	check(out.size() == (size ? (size - 4) / 4 : 0), "one change per descriptor");
	for (size_t i = 0; i < out.size(); i++) {
		check(out[i].first == ulp::get_be16(&p[4 + 4 * i + 2]), "the group named");
		check(uint8_t(out[i].second) == (p[4 + 4 * i] & 0x0f), "the state named");
		check(out[i].second <= AluaState::Unavailable, "a state an initiator may not ask");
	}
	// Applied as SET TARGET PORT GROUPS would: unknown groups change nothing.
	static const NexusId by{"fuzz", 1};
	const int rc = lu().alua_.set_states(out, &by);
	check(rc == 0 || rc == -ENOENT, "set_states failed otherwise");
	for (const AluaGroup &g : lu().alua_.groups())
		check(alua_state_valid(uint8_t(g.state)), "a group in no state");
	check(lu().ua_nexuses() <= LogicalUnit::kMaxLostUa + 16, "UA table grew");
	return 0;
}
