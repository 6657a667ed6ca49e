// SPDX-License-Identifier: MIT
// ha/records.h - the records of the cluster map (cluster_map.h) that the gateways read from
// one another, and their text form.
//
// A record's value is "key=value" fields separated by ';', in any order, each key once:
//   owner/<group>  gw=<gateway>;addr=<RADOS address>;state=active|released;epoch=<n>
// Values are printable ASCII without ';' or '=' (gateway names, addresses); a record longer
// than kMaxRecordBytes, with an unknown or repeated key, a missing one or a bad number is
// damaged and refused whole: another gateway wrote it, and acting on half of it could fence
// the wrong client.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

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

// A name a record may carry (a gateway's or a group's): 1 to 64 of [A-Za-z0-9._-].
bool ha_name_valid(std::string_view s);

} // namespace ulp::ha
