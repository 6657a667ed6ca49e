// SPDX-License-Identifier: MIT
// fuzz/fuzz_alua_initiator.cc - libFuzzer target: what a multipath initiator reads of
// asymmetric access from a target (iscsi/initiator/scsi_alua.cc): REPORT TARGET PORT GROUPS
// parameter data, the device identification VPD page's port designators, and sense data.
//
// Input: the bytes, whole, read three ways. Invariants: nothing is read past them (ASan);
// decoded groups fit in what came (8 bytes each plus 4 per port, after a 4- or 8-byte
// header); a VPD page that decodes is page 83h; a sense classification never reads past
// sense_len.
#include "iscsi/initiator/scsi.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <vector>

namespace
{

void check(bool ok, const char *what)
{
	if (!ok) {
		std::fprintf(stderr, "fuzz_alua_initiator: %s\n", what);
		__builtin_trap();
	}
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	using namespace ulp::iscsi::initiator;
	// A copy of exactly size bytes on the heap: ASan sees a read past it.
	std::vector<uint8_t> p(data, data + size);
	std::vector<PortGroup> groups;
	std::string why;
	if (parse_rtpg(p, &groups, &why)) {
		size_t bytes = 0;
		for (const PortGroup &g : groups)
			bytes += 8 + 4 * g.rtpis.size();
		check(bytes + 4 <= std::max<size_t>(size, 4), "groups larger than the data");
		for (const PortGroup &g : groups)
			check(g.state <= 0xf && g.rtpis.size() <= 255, "a field out of its bits");
	} else {
		check(!why.empty(), "a refusal without a reason");
	}
	PortIds ids;
	if (parse_vpd83_port(p, &ids))
		check(size >= 4 && p[1] == 0x83, "another page decoded as 83h");
	ScsiResult r;
	r.status = 0x02;
	r.sense_len = uint16_t(std::min(size, r.sense.size()));
	if (r.sense_len)
		std::memcpy(r.sense.data(), p.data(), r.sense_len);
	(void)alua_sense(r);
	return 0;
}
