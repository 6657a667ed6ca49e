// SPDX-License-Identifier: MIT
// fuzz/fuzz_ha_version.cc - libFuzzer target: the cluster map's version reader
// (ha/cluster_map.cc version_decode), which reads what another gateway wrote: the map
// object's "ulp.version" xattr and the payload of its notifies.
//
// Input: the bytes, whole. Invariants: nothing is read past them (ASan); what decodes is
// decimal digits without a leading zero, 1 to 20 of them, and encodes back to the same
// bytes; what does not decode leaves the output as it was.
#include "ha/cluster_map.h"

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace
{

void check(bool ok, const char *what)
{
	if (!ok) {
		std::fprintf(stderr, "fuzz_ha_version: %s\n", what);
		__builtin_trap();
	}
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	// A copy of exactly size bytes on the heap: ASan sees a read past it.
	std::vector<char> p(data, data + size);
	uint64_t v = 12345;
	if (!ulp::ha::version_decode(p.data(), p.size(), &v)) {
		check(v == 12345, "a refused version changed the output");
		return 0;
	}
	check(size >= 1 && size <= 20, "a version of the wrong length decoded");
	check(ulp::ha::version_encode(v) == std::string(p.begin(), p.end()),
	      "a decoded version does not encode back to its bytes");
	return 0;
}
