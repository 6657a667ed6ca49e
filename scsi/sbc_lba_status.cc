// SPDX-License-Identifier: MIT
// scsi/sbc_lba_status.cc - GET LBA STATUS (SBC-3 5.7, SERVICE ACTION IN (16) service action
// 12h): which blocks from the STARTING LOGICAL BLOCK ADDRESS on are mapped and which are
// deallocated, from the backstore's allocation state (Backstore::extent).
//
// The answer (SBC-3 table "GET LBA STATUS parameter data") is an 8-byte header whose
// PARAMETER DATA LENGTH counts the bytes after its own field, and 16-byte LBA status
// descriptors: LBA, NUMBER OF LOGICAL BLOCKS (32 bits), PROVISIONING STATUS (0 mapped,
// 1 deallocated). The first descriptor starts at the starting LBA; consecutive extents in
// the same state are merged. We return as many descriptors as the allocation length has
// room for (at least one: the header says how many there are, and the core truncates the
// data to the allocation length), at most kMaxDescs, and stop looking after kMaxExtents
// backstore answers - SBC-3 lets a device server report any prefix of the LU.
//
// A block the backstore reports partly mapped (file systems track allocation in their own
// blocks, which may be smaller than the LU's) counts as mapped. A LU that is not thin
// reports everything mapped.
#include "scsi/sbc_internal.h"

#include <algorithm>
#include <vector>

namespace ulp::scsi
{

namespace
{

constexpr size_t kLbaStatusHeader = 8;
constexpr size_t kLbaStatusDescriptor = 16;
constexpr size_t kMaxDescs = 64;
constexpr unsigned kMaxExtents = 1024;

enum : uint8_t {
	kMapped = 0,      // SBC-3 table "PROVISIONING STATUS field": mapped (or unknown)
	kDeallocated = 1, // deallocated
};

struct Desc {
	uint64_t lba;
	uint32_t blocks;
	uint8_t status;
};

void exec_get_lba_status(Cmd *cmd)
{
	LogicalUnit &lu = *cmd->lu;
	const uint64_t nr = lu.nr_blocks();
	const uint32_t bs = lu.block_size();
	if (cmd->lba >= nr) {
		// The capacity shrank since parsing (LogicalUnit::set_capacity): as the same
		// command arriving now would be told.
		complete_sense(cmd, Sense::LbaOutOfRange);
		return;
	}
	const size_t room = cmd->cdb_xfer > kLbaStatusHeader
	                        ? (cmd->cdb_xfer - kLbaStatusHeader) / kLbaStatusDescriptor
	                        : 0;
	const size_t limit = std::clamp<size_t>(room, 1, kMaxDescs);

	std::vector<Desc> d;
	d.reserve(limit);
	uint64_t lba = cmd->lba;
	unsigned asked = 0;
	while (lba < nr && asked < kMaxExtents) {
		uint8_t status = kMapped;
		uint64_t blocks = nr - lba;
		if (lu.thin()) {
			BsExtent e;
			asked++;
			if (int r = lu.bs().extent(lba * bs, &e); r < 0) {
				complete_sense(cmd, errno_sense(r, false));
				return;
			}
			if (e.mapped) {
				blocks = (e.length + bs - 1) / bs;
			} else if (e.length >= bs) {
				status = kDeallocated;
				blocks = e.length / bs;
			} else {
				blocks = 1; // data in part of the block: mapped
			}
			blocks = std::clamp<uint64_t>(blocks, 1, nr - lba);
		}
		// Merge into the last descriptor while it has room, else start a new one.
		while (blocks) {
			if (!d.empty() && d.back().status == status &&
			    d.back().blocks < UINT32_MAX && d.back().lba + d.back().blocks == lba) {
				const uint64_t add =
				    std::min<uint64_t>(blocks, UINT32_MAX - d.back().blocks);
				d.back().blocks += static_cast<uint32_t>(add);
				blocks -= add;
				lba += add;
				continue;
			}
			if (d.size() == limit)
				goto done;
			d.push_back({lba, 0, status});
		}
	}
done:
	std::vector<uint8_t> out(kLbaStatusHeader + d.size() * kLbaStatusDescriptor);
	put_be32(out.data(), static_cast<uint32_t>(out.size() - 4));
	for (size_t i = 0; i < d.size(); i++) {
		uint8_t *p = &out[kLbaStatusHeader + i * kLbaStatusDescriptor];
		put_be64(p, d[i].lba);
		put_be32(p + 8, d[i].blocks);
		p[12] = d[i].status;
	}
	complete_data_in(cmd, out);
}

} // namespace

Sense sbc_parse_get_lba_status(Cmd *cmd)
{
	const uint8_t *c = cmd->cdb;
	// SBC-3 5.7: a STARTING LOGICAL BLOCK ADDRESS beyond the last LBA is LBA OUT OF RANGE
	// (libiscsi GetLBAStatus.BeyondEol); any ALLOCATION LENGTH is accepted.
	const uint64_t lba = get_be64(c + 2);
	if (lba >= cmd->lu->nr_blocks())
		return Sense::LbaOutOfRange;
	cmd->lba = lba;
	cmd->cdb_xfer = get_be32(c + 10);
	cmd->cdb_dir = DataDir::Read;
	cmd->execute = exec_get_lba_status;
	return Sense::None;
}

} // namespace ulp::scsi
