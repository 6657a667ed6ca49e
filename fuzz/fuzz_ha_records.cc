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
// most kMaxRecordBytes long; gateway and port records (and port keys) likewise round-trip;
// what does not decode leaves the output as it was.
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

	const std::string_view in(p.data(), p.size());
	// The gateway and port records (and a port record's key): decoded, they encode back to
	// a record that decodes alike.
	GatewayRecord g{7};
	if (gateway_record_decode(in, &g)) {
		GatewayRecord g2;
		check(g.id != 0 && gateway_record_decode(gateway_record_encode(g), &g2) &&
		          g2.id == g.id,
		      "a gateway record does not round-trip");
	} else {
		check(g.id == 7, "a refused gateway record changed the output");
	}
	PortRecord pr{{9}};
	if (port_record_decode(in, &pr)) {
		PortRecord p2;
		check(!pr.rtpis.empty() && pr.rtpis.size() <= kMaxRecordPorts &&
		          port_record_decode(port_record_encode(pr), &p2) && p2.rtpis == pr.rtpis,
		      "a port record does not round-trip");
		for (uint16_t x : pr.rtpis)
			check(x != 0, "a port record with rtpi 0 decoded");
	} else {
		check(pr.rtpis.size() == 1 && pr.rtpis[0] == 9, "a refused port record changed");
	}
	std::string tgt, gw;
	if (port_key_split(in, &tgt, &gw))
		check(port_key(tgt, gw) == in && ha_name_valid(gw),
		      "a port key does not round-trip");
	PrGatewayRecord pg{"untouched", "x", {7}};
	if (!pr_gateway_record_decode(std::string_view(p.data(), p.size()), &pg)) {
		check(pg.gw == "untouched" && pg.addr == "x" &&
		          pg.ports == std::vector<uint16_t>{7},
		      "a refused gateway record changed the output");
	} else {
		check(size <= kMaxRecordBytes, "a gateway record over the bound decoded");
		check(ha_name_valid(pg.gw), "a gateway record with a bad name decoded");
		for (size_t i = 0; i < pg.ports.size(); i++)
			check(pg.ports[i] != 0 && (i == 0 || pg.ports[i - 1] < pg.ports[i]),
			      "ports not ascending, or port 0");
		PrGatewayRecord again;
		check(pr_gateway_record_decode(pr_gateway_record_encode(pg), &again) &&
		          again.gw == pg.gw && again.addr == pg.addr && again.ports == pg.ports,
		      "a gateway record's encoding decodes to other fields");
	}
	uint64_t gid = 0;
	if (pr_gateway_key_decode(std::string_view(p.data(), p.size()), &gid))
		check(pr_gateway_key(gid) == std::string(p.begin(), p.end()),
		      "a gateway key does not encode back to its bytes");

	OwnerRecord r{"untouched", "x", true, 99};
	if (!owner_record_decode(in, &r)) {
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
