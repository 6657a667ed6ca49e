// SPDX-License-Identifier: MIT
// ha/records.h - the records of the cluster map (cluster_map.h) that the gateways read from
// one another, and their text form.
//
// A record's value is "key=value" fields separated by ';', in any order, each key once:
//   owner/<group>  gw=<gateway>;addr=<RADOS address>;state=active|released;epoch=<n>
//   gw.<gid>       gw=<gateway>;addr=<RADOS address>[;ports=<n>,...] (a LU's reservation
//                  object, pr_cluster.h)
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

// A name a record may carry (a gateway's or a group's): 1 to 64 of [A-Za-z0-9._-].
bool ha_name_valid(std::string_view s);

} // namespace ulp::ha
