// SPDX-License-Identifier: MIT
// ha/records.h - the records of the cluster map (cluster_map.h) that the gateways read from
// one another, and their text form.
//
// A record's value is "key=value" fields separated by ';', in any order, each key once:
//   owner/<group>         gw=<gateway>;addr=<RADOS address>;state=active|released;epoch=<n>
//   gw/<gateway>          id=<target port group id>
//   port/<target>/<gw>    rtpis=<relative target port id>[,<id>...]
//   gw.<gid>              gw=<gateway>;addr=<RADOS address>[;ports=<n>,...] (in a LU's
//                         reservation object, pr_cluster.h)
// Values are printable ASCII without ';' or '=' (gateway names, addresses); a record longer
// than kMaxRecordBytes, with an unknown or repeated key, a missing one or a bad number is
// damaged and refused whole: another gateway wrote it, and acting on half of it could fence
// the wrong client.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ulp::ha
{

constexpr size_t kMaxRecordBytes = 512; // longer: not written by a gateway

// The key of a group's owner record.
std::string owner_key(std::string_view group);

// Who owns a group of LUs, as its owner wrote it when it became the owner, and again when
// it gave the group up in a planned move. The lease (lease.h) is the authority on who may
// write now; this record is what the others need besides: whom to fence (the lease forgets
// an expired holder, the record does not) and whom to report Active/Optimized.
struct OwnerRecord {
	std::string gw;        // the owning gateway's name
	std::string addr;      // its RADOS client's address and nonce: what a successor blocklists
	bool released = false; // it gave the group up after stopping its I/O: no fencing needed
	uint64_t epoch = 0;    // owners so far: each new owner writes the previous epoch + 1
};

std::string owner_record_encode(const OwnerRecord &r);
// false for a damaged record (see above); *out untouched then.
bool owner_record_decode(std::string_view s, OwnerRecord *out);

// A gateway that serves a LU whose reservations are shared (pr_cluster.h), as it wrote
// itself into the LU's reservation object: record "gw.<gid>" (its RADOS client's instance
// id, the id a notify names a watcher by):
//   gw=<gateway>;addr=<RADOS address>[;ports=<rtpi>,<rtpi>...]
// What a writer needs when that gateway does not answer a notify (whom to fence), and what
// REGISTER AND MOVE may name (its relative target port ids of the LU, ascending).
struct PrGatewayRecord {
	std::string gw;              // the gateway's name
	std::string addr;            // its RADOS client's address and nonce
	std::vector<uint16_t> ports; // its target ports' relative ids (1..65535), ascending
};
std::string pr_gateway_key(uint64_t gid);
// false for a key that is not a gateway's.
bool pr_gateway_key_decode(std::string_view key, uint64_t *gid);
std::string pr_gateway_record_encode(const PrGatewayRecord &r);
// false for a damaged record (as owner_record_decode); *out untouched then.
bool pr_gateway_record_decode(std::string_view s, PrGatewayRecord *out);

// A gateway of the cluster, written when it first joins and kept (by name) across its
// restarts: the id of the target port group (SPC-4 5.15.2) its ports form for every LU,
// unique among the gateways (the map's compare-and-set allocates it).
struct GatewayRecord {
	uint16_t id = 0; // TARGET PORT GROUP, 1..65535
};

std::string gateway_key(std::string_view gw);
std::string gateway_record_encode(const GatewayRecord &r);
bool gateway_record_decode(std::string_view s, GatewayRecord *out);

constexpr size_t kMaxRecordPorts = 64; // ports of one gateway in one target, at most

// A gateway's target ports of one SCSI target (the same target name on every gateway: one
// target device, SPC-4 4.3.4, whose relative port ids are therefore unique across the
// gateways): what every gateway lists under that gateway's group in REPORT TARGET PORT
// GROUPS.
struct PortRecord {
	std::vector<uint16_t> rtpis; // relative target port ids, 1..65535, each once, 1 or more
};

std::string port_key(std::string_view target, std::string_view gw);
// A port record's key back into its target and gateway; false when it is not one.
bool port_key_split(std::string_view key, std::string *target, std::string *gw);
std::string port_record_encode(const PortRecord &r);
bool port_record_decode(std::string_view s, PortRecord *out);

// A name a record may carry (a gateway's or a group's): 1 to 64 of [A-Za-z0-9._-]. Inline:
// the daemon's configuration checks names without linking RADOS.
inline bool ha_name_valid(std::string_view s)
{
	if (s.empty() || s.size() > 64)
		return false;
	for (char c : s)
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '.' || c == '_' || c == '-'))
			return false;
	return true;
}

} // namespace ulp::ha
