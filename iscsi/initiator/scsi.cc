// SPDX-License-Identifier: MIT
// iscsi/initiator/scsi.cc - CDB builders and sense decoding for initiator clients (see
// initiator_scsi.h).
#include "iscsi/initiator/scsi.h"

#include <cstdio>

namespace ulp::iscsi::initiator
{

std::array<uint8_t, 16> cdb_read16(uint64_t lba, uint32_t blocks)
{
	std::array<uint8_t, 16> c{};
	c[0] = 0x88; // READ(16)
	put_be64(&c[2], lba);
	put_be32(&c[10], blocks);
	return c;
}

std::array<uint8_t, 16> cdb_write16(uint64_t lba, uint32_t blocks, bool fua)
{
	std::array<uint8_t, 16> c{};
	c[0] = 0x8a; // WRITE(16)
	c[1] = fua ? 0x08 : 0;
	put_be64(&c[2], lba);
	put_be32(&c[10], blocks);
	return c;
}

std::array<uint8_t, 16> cdb_read_capacity16(uint32_t alloc_len)
{
	std::array<uint8_t, 16> c{};
	c[0] = 0x9e; // SERVICE ACTION IN(16)
	c[1] = 0x10; // READ CAPACITY(16)
	put_be32(&c[10], alloc_len);
	return c;
}

std::array<uint8_t, 6> cdb_test_unit_ready()
{
	return {};
}

std::array<uint8_t, 6> cdb_inquiry(uint16_t alloc_len)
{
	std::array<uint8_t, 6> c{};
	c[0] = 0x12;
	put_be16(&c[3], alloc_len);
	return c;
}

std::array<uint8_t, 10> cdb_sync_cache10()
{
	std::array<uint8_t, 10> c{};
	c[0] = 0x35;
	return c;
}

bool parse_read_capacity16(std::span<const uint8_t> d, Capacity *out)
{
	if (d.size() < 12)
		return false;
	const uint64_t last = get_be64(d.data());
	const uint32_t bs = get_be32(d.data() + 8);
	if (bs == 0 || last == UINT64_MAX)
		return false;
	out->blocks = last + 1;
	out->block_size = bs;
	return true;
}

SenseKey parse_sense(std::span<const uint8_t> s)
{
	SenseKey k;
	if (s.empty())
		return k;
	const uint8_t rc = s[0] & 0x7f;
	if ((rc == 0x70 || rc == 0x71) && s.size() >= 14) {
		// Fixed format (SPC-4 4.5.3): key in byte 2, ASC/ASCQ in 12/13.
		k.valid = true;
		k.key = s[2] & 0x0f;
		k.asc = s[12];
		k.ascq = s[13];
	} else if ((rc == 0x72 || rc == 0x73) && s.size() >= 4) {
		// Descriptor format (4.5.2): key, ASC, ASCQ in bytes 1..3.
		k.valid = true;
		k.key = s[1] & 0x0f;
		k.asc = s[2];
		k.ascq = s[3];
	}
	return k;
}

std::string describe_result(const ScsiResult &r)
{
	char buf[128];
	switch (r.outcome) {
	case TaskOutcome::Completed:
		break;
	case TaskOutcome::Rejected:
		std::snprintf(buf, sizeof(buf), "rejected by the target (reason 0x%02x)",
		              static_cast<unsigned>(r.reject_reason));
		return buf;
	default:
		return task_outcome_name(r.outcome);
	}
	if (r.response != 0) {
		std::snprintf(buf, sizeof(buf), "target failure (iSCSI response 0x%02x)",
		              r.response);
		return buf;
	}
	const char *st = "status";
	switch (r.status) {
	case 0x00:
		return "GOOD";
	case 0x02:
		st = "CHECK CONDITION";
		break;
	case 0x08:
		st = "BUSY";
		break;
	case 0x18:
		st = "RESERVATION CONFLICT";
		break;
	case 0x28:
		st = "TASK SET FULL";
		break;
	case 0x40:
		st = "TASK ABORTED";
		break;
	default:
		break;
	}
	const SenseKey k = parse_sense({r.sense.data(), r.sense_len});
	if (k.valid)
		std::snprintf(buf, sizeof(buf), "%s (0x%02x), sense %02x/%02x/%02x", st, r.status,
		              k.key, k.asc, k.ascq);
	else
		std::snprintf(buf, sizeof(buf), "%s (0x%02x)", st, r.status);
	return buf;
}

} // namespace ulp::iscsi::initiator
