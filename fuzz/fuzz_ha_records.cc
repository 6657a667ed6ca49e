// SPDX-License-Identifier: MIT
// fuzz/fuzz_ha_records.cc - libFuzzer target: what one gateway reads that another wrote in
// the cluster map (ha/): the map's version (cluster_map.h version_decode: the object's
// "ulp.version" xattr, a notify's payload), a group's owner record (records.h
// owner_record_decode), on which a successor blocklists an address, and a gateway's record
// in a LU's reservation object (pr_gateway_record_decode), whose address a writer hands to
// the fencing hook.
//
// Input: the bytes, whole, read both ways. Invariants: nothing is read past them (ASan);
// a version that decodes is 1 to 20 digits without a leading zero and encodes back to the
// same bytes; an owner record that decodes has a valid gateway name and an address of
// printable characters, encodes to a record that decodes to the same fields, and is at
// most kMaxRecordBytes long; what does not decode leaves the output as it was.
#include "ha/cluster_map.h"
#include "ha/records.h"

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace
{

void check(bool ok, const char *what)
{
	if (!ok) {
		std::fprintf(stderr, "fuzz_ha_records: %s\n", what);
		__builtin_trap();
	}
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	using namespace ulp::ha;
	// A copy of exactly size bytes on the heap: ASan sees a read past it.
	std::vector<char> p(data, data + size);
	uint64_t v = 12345;
	if (!version_decode(p.data(), p.size(), &v)) {
		check(v == 12345, "a refused version changed the output");
	} else {
		check(size >= 1 && size <= 20, "a version of the wrong length decoded");
		check(version_encode(v) == std::string(p.begin(), p.end()),
		      "a decoded version does not encode back to its bytes");
	}

	PrGatewayRecord g{"untouched", "x", {7}};
	if (!pr_gateway_record_decode(std::string_view(p.data(), p.size()), &g)) {
		check(g.gw == "untouched" && g.addr == "x" && g.ports == std::vector<uint16_t>{7},
		      "a refused gateway record changed the output");
	} else {
		check(size <= kMaxRecordBytes, "a gateway record over the bound decoded");
		check(ha_name_valid(g.gw), "a gateway record with a bad name decoded");
		for (size_t i = 0; i < g.ports.size(); i++)
			check(g.ports[i] != 0 && (i == 0 || g.ports[i - 1] < g.ports[i]),
			      "ports not ascending, or port 0");
		PrGatewayRecord again;
		check(pr_gateway_record_decode(pr_gateway_record_encode(g), &again) &&
		          again.gw == g.gw && again.addr == g.addr && again.ports == g.ports,
		      "a gateway record's encoding decodes to other fields");
	}
	uint64_t gid = 0;
	if (pr_gateway_key_decode(std::string_view(p.data(), p.size()), &gid))
		check(pr_gateway_key(gid) == std::string(p.begin(), p.end()),
		      "a gateway key does not encode back to its bytes");

	OwnerRecord r{"untouched", "x", true, 99};
	if (!owner_record_decode(std::string_view(p.data(), p.size()), &r)) {
		check(r.gw == "untouched" && r.addr == "x" && r.released && r.epoch == 99,
		      "a refused record changed the output");
		return 0;
	}
	check(size <= kMaxRecordBytes, "a record over the bound decoded");
	check(ha_name_valid(r.gw), "a record with a bad gateway name decoded");
	check(!r.addr.empty(), "a record without an address decoded");
	for (char c : r.addr)
		check(c > 0x20 && c < 0x7f && c != ';' && c != '=', "an address with a bad byte");
	OwnerRecord again;
	check(owner_record_decode(owner_record_encode(r), &again), "its encoding does not decode");
	check(again.gw == r.gw && again.addr == r.addr && again.released == r.released &&
	          again.epoch == r.epoch,
	      "its encoding decodes to other fields");
	return 0;
}
