// SPDX-License-Identifier: MIT
// fuzz/fuzz_pr_shared.cc - libFuzzer target: what the reservations shared by gateways parse
// (scsi/pr_shared.cc, scsi/pr_transport_id.cc): the events of a change as another gateway
// wrote them in the LU's RADOS object (pr_events_decode), and the TransportIDs of a
// PERSISTENT RESERVE OUT REGISTER with SPEC_I_PT, an initiator's parameter list
// (pr_spec_i_pt_parse).
//
// Input: the bytes, whole, read both ways. Invariants: nothing is read past them (ASan);
// events that decode encode back to the same bytes, name one of the three reservation unit
// attentions or an abort, and ports that are not empty; a TransportID list that parses names
// distinct initiator ports - iSCSI ones with ",i,0x" and 12 lowercase hex digits - and, built
// again (transport_id_build) and parsed, the same ports; what is refused leaves the output as
// it was.
//
// Seeds: ULP_FUZZ_SEEDS=<dir> makes the binary write a few of each there and exit
// (scripts/fuzz.sh does this).
#include "core/byteorder.h"
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

void check(bool ok, const char *what)
{
	if (!ok) {
		std::fprintf(stderr, "fuzz_pr_shared: %s\n", what);
		__builtin_trap();
	}
}

const std::string kA = "iqn.1994-05.com.example:a,i,0x23d000000001";
const std::string kB = "iqn.1994-05.com.example:b,i,0x23d000000002";
const std::string kSrp = "0x0002c90300a1b2c30002c90300a1b2c4";

// A REGISTER parameter list with SPEC_I_PT naming ports.
std::vector<uint8_t> spec_list(const std::vector<PrPort> &ports)
{
	std::vector<uint8_t> d(28, 0);
	ulp::put_be64(&d[8], 0x1111);
	d[20] = 0x08;
	for (const PrPort &p : ports)
		transport_id_build(p.proto, p.port, d);
	ulp::put_be32(&d[24], static_cast<uint32_t>(d.size() - 28));
	return d;
}

void write_seeds(const std::string &dir)
{
	auto put = [&](const std::string &name, const std::string &b) {
		std::ofstream f(dir + "/" + name, std::ios::binary);
		f.write(b.data(), static_cast<std::streamsize>(b.size()));
	};
	put("events-empty", pr_events_encode({}));
	put("events-two", pr_events_encode({{PrEvent::Ua, UA_REGISTRATIONS_PREEMPTED, {kA, 1}, false},
	                                    {PrEvent::Abort, 0, {kSrp, 2}, true}}));
	const auto l = spec_list({{ProtoId::Iscsi, kA}, {ProtoId::Iscsi, kB}, {ProtoId::Srp, kSrp}});
	put("spec-three", std::string(l.begin(), l.end()));
}

bool lower_hex(char c)
{
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
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
	// A copy of exactly size bytes on the heap: ASan sees a read past it.
	std::vector<uint8_t> p(data, data + size);
	const std::string s(p.begin(), p.end());

	const std::vector<PrEvent> mark = {{PrEvent::Abort, 0, {"mark", 9}, false}};
	std::vector<PrEvent> ev = mark;
	if (!pr_events_decode(std::string_view(reinterpret_cast<const char *>(p.data()), p.size()),
	                      &ev)) {
		check(ev == mark, "refused events changed the output");
	} else {
		check(pr_events_encode(ev) == s, "decoded events do not encode back to their bytes");
		for (const PrEvent &e : ev) {
			check(!e.nexus.initiator_port.empty(), "an event without a port");
			check(e.kind == PrEvent::Abort
			          ? e.asc_ascq == 0
			          : e.asc_ascq == UA_REGISTRATIONS_PREEMPTED ||
			                e.asc_ascq == UA_RESERVATIONS_PREEMPTED ||
			                e.asc_ascq == UA_RESERVATIONS_RELEASED,
			      "an event of another kind");
		}
	}

	const std::vector<PrPort> pmark = {{ProtoId::Srp, "mark"}};
	std::vector<PrPort> ports = pmark;
	const Sense r = pr_spec_i_pt_parse(p, &ports);
	if (r != Sense::None) {
		check(r == Sense::ParamListLengthError || r == Sense::InvalidParamListField,
		      "refused with another sense");
		check(ports == pmark, "a refused list changed the output");
		return 0;
	}
	for (size_t i = 0; i < ports.size(); i++) {
		const std::string &t = ports[i].port;
		check(!t.empty(), "an empty port");
		if (ports[i].proto == ProtoId::Iscsi) {
			const size_t sep = t.find(",i,0x");
			check(sep != std::string::npos && sep > 0 && t.size() == sep + 5 + 12,
			      "an iSCSI port without its ISID");
			for (size_t k = sep + 5; k < t.size(); k++)
				check(lower_hex(t[k]), "an ISID not in lowercase hex");
		} else {
			check(ports[i].proto == ProtoId::Srp && t.size() == 32,
			      "a port of another protocol");
		}
		for (size_t j = 0; j < i; j++)
			check(!(ports[j] == ports[i]), "one port twice");
	}
	std::vector<PrPort> again;
	check(pr_spec_i_pt_parse(spec_list(ports), &again) == Sense::None && again == ports,
	      "the ports built again do not parse to the same");
	return 0;
}
