// SPDX-License-Identifier: MIT
// iscsi/initiator/scsi_alua.cc - what a multipath initiator reads of asymmetric access
// (scsi.h): REPORT TARGET PORT GROUPS, VPD 83h's port designators, the ALUA sense codes.
// Every decoder reads only what came and refuses data whose lengths overrun it: the target
// (or whatever answers on its address) writes these bytes.
#include "core/byteorder.h"
#include "iscsi/initiator/scsi.h"

namespace ulp::iscsi::initiator
{

std::array<uint8_t, 12> cdb_report_target_port_groups(uint32_t alloc_len)
{
	std::array<uint8_t, 12> c{};
	c[0] = 0xa3;             // MAINTENANCE IN
	c[1] = 0x0a | (1u << 5); // REPORT TARGET PORT GROUPS, PARAMETER DATA FORMAT 001b
	put_be32(&c[6], alloc_len);
	return c;
}

std::array<uint8_t, 6> cdb_inquiry_vpd(uint8_t page, uint16_t alloc_len)
{
	std::array<uint8_t, 6> c{};
	c[0] = 0x12;
	c[1] = 0x01; // EVPD
	c[2] = page;
	put_be16(&c[3], alloc_len);
	return c;
}

bool parse_rtpg(std::span<const uint8_t> d, std::vector<PortGroup> *out, std::string *why)
{
	out->clear();
	if (d.size() < 4) {
		*why = "shorter than its header";
		return false;
	}
	// RETURN DATA LENGTH counts the bytes after itself. Extended header (format 001b in
	// byte 4 bits 6..4): 8 bytes of header; the length header: 4.
	const uint64_t len = get_be32(d.data());
	size_t at = 4;
	if (d.size() >= 8 && ((d[4] >> 4) & 0x7) == 1)
		at = 8;
	const uint64_t end = std::min<uint64_t>(d.size(), 4 + len);
	while (at < end) {
		if (end - at < 8) {
			*why = "a group descriptor cut short at byte " + std::to_string(at);
			return false;
		}
		PortGroup g;
		g.pref = d[at] & 0x80;
		g.state = d[at] & 0x0f;
		g.id = get_be16(&d[at + 2]);
		const size_t ports = d[at + 7];
		if (end - at - 8 < ports * 4) {
			*why = "group " + std::to_string(g.id) + " lists " + std::to_string(ports) +
			       " ports past the data's end";
			return false;
		}
		for (size_t i = 0; i < ports; i++)
			g.rtpis.push_back(get_be16(&d[at + 8 + 4 * i + 2]));
		at += 8 + ports * 4;
		out->push_back(std::move(g));
	}
	return true;
}

bool parse_vpd83_port(std::span<const uint8_t> d, PortIds *out)
{
	*out = PortIds{};
	if (d.size() < 4 || d[1] != 0x83)
		return false;
	const size_t end = std::min<size_t>(d.size(), 4 + size_t(get_be16(&d[2])));
	size_t at = 4;
	while (at < end) {
		if (end - at < 4)
			return false;
		const uint8_t assoc = (d[at + 1] >> 4) & 0x3, type = d[at + 1] & 0xf;
		const size_t n = d[at + 3];
		if (end - at - 4 < n)
			return false;
		// Association 01b: the target port the command came through.
		if (assoc == 1 && n >= 4 && type == 0x4) {
			out->has_rtpi = true;
			out->rtpi = get_be16(&d[at + 6]);
		} else if (assoc == 1 && n >= 4 && type == 0x5) {
			out->has_tpg = true;
			out->tpg = get_be16(&d[at + 6]);
		}
		at += 4 + n;
	}
	return true;
}

AluaSense alua_sense(const ScsiResult &r)
{
	if (r.outcome != TaskOutcome::Completed || r.status != 0x02)
		return AluaSense::None;
	const SenseKey k = parse_sense({r.sense.data(), r.sense_len});
	if (!k.valid)
		return AluaSense::None;
	if (k.key == 0x2 && k.asc == 0x04) {
		if (k.ascq == 0x0a)
			return AluaSense::Transitioning;
		if (k.ascq == 0x0b)
			return AluaSense::Standby;
		if (k.ascq == 0x0c)
			return AluaSense::Unavailable;
	}
	if (k.key == 0x6 && k.asc == 0x2a && k.ascq == 0x06)
		return AluaSense::StateChanged;
	return AluaSense::None;
}

const char *alua_sense_str(AluaSense a)
{
	switch (a) {
	case AluaSense::None:
		return "none";
	case AluaSense::Transitioning:
		return "transitioning";
	case AluaSense::Standby:
		return "standby";
	case AluaSense::Unavailable:
		return "unavailable";
	case AluaSense::StateChanged:
		return "asymmetric access state changed";
	}
	return "?";
}

} // namespace ulp::iscsi::initiator
