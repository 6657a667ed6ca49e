// SPDX-License-Identifier: MIT
// scsi/pr_transport_id.cc - TransportIDs (SPC-4 7.6.4): how PERSISTENT RESERVE IN READ FULL
// STATUS names the initiator port of a registration, and how REGISTER AND MOVE names the
// one a reservation moves to.
//
// The core names an initiator port by its TransportID text (NexusId::initiator_port): for
// iSCSI the initiator name, with ",i,0x" and the ISID when the port is one session's
// (format 01b); for SRP the 128-bit initiator port identifier in hex. These functions
// translate between that text and the binary form.
#include "scsi/pr_internal.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <string_view>

namespace ulp::scsi
{

namespace
{

// SPC-4 7.6.4.6: the separator between an iSCSI name and the ISID in format 01b.
constexpr char kIsidSep[] = ",i,0x";
// SPC-4 7.6.4.5 table 458: the SRP TransportID is 24 bytes, the port identifier at 8..23.
constexpr size_t kSrpLen = 24;
// SPC-4 7.6.4.6: an iSCSI TransportID's ADDITIONAL LENGTH is a multiple of 4, at least 20.
constexpr size_t kIscsiMinAddl = 20;
// RFC 7143 6.1: an iSCSI name is at most 223 bytes; with the separator, the 12 hex digits of
// the ISID and the terminating NUL a TransportID is at most 4 + 244 bytes.
constexpr size_t kIscsiMaxAddl = 244;

int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1;
}

// The SRP initiator port identifier (16 bytes) in text, optionally "0x"-prefixed.
bool srp_port_id(const std::string &port, uint8_t id[16])
{
	std::string_view s = port;
	if (s.starts_with("0x") || s.starts_with("0X"))
		s.remove_prefix(2);
	if (s.size() != 32)
		return false;
	for (size_t i = 0; i < 16; i++) {
		const int hi = hexval(s[2 * i]), lo = hexval(s[2 * i + 1]);
		if (hi < 0 || lo < 0)
			return false;
		id[i] = static_cast<uint8_t>(hi << 4 | lo);
	}
	return true;
}

void iscsi_build(const std::string &port, std::vector<uint8_t> &out)
{
	// Format 01b (initiator port: name, separator, ISID) or 00b (the name alone). Either
	// way the text is carried as it is, NUL terminated and padded with NULs.
	const bool with_isid = port.find(kIsidSep) != std::string::npos;
	size_t addl = port.size() + 1;
	addl = std::max((addl + 3) & ~size_t(3), kIscsiMinAddl);
	const size_t at = out.size();
	out.resize(at + 4 + addl, 0);
	out[at] = static_cast<uint8_t>((with_isid ? 0x40 : 0x00) | uint8_t(ProtoId::Iscsi));
	put_be16(&out[at + 2], static_cast<uint16_t>(addl));
	std::memcpy(&out[at + 4], port.data(), port.size());
}

} // namespace

void transport_id_build(ProtoId proto, const std::string &port, std::vector<uint8_t> &out)
{
	uint8_t id[16];
	if (proto == ProtoId::Srp && srp_port_id(port, id)) {
		const size_t at = out.size();
		out.resize(at + kSrpLen, 0);
		out[at] = uint8_t(ProtoId::Srp); // format 00b
		std::memcpy(&out[at + 8], id, sizeof(id));
		return;
	}
	iscsi_build(port, out);
}

size_t transport_id_parse(std::span<const uint8_t> p, ProtoId *proto, std::string *port)
{
	if (p.size() < 4)
		return 0;
	const uint8_t format = p[0] >> 6;
	switch (ProtoId(p[0] & 0x0f)) {
	case ProtoId::Srp: {
		if (format != 0 || p.size() < kSrpLen)
			return 0;
		static constexpr char kHex[] = "0123456789abcdef";
		std::string s;
		for (size_t i = 8; i < kSrpLen; i++) {
			s.push_back(kHex[p[i] >> 4]);
			s.push_back(kHex[p[i] & 0xf]);
		}
		*proto = ProtoId::Srp;
		*port = std::move(s);
		return kSrpLen;
	}
	case ProtoId::Iscsi: {
		const size_t addl = get_be16(&p[2]);
		if (format > 1 || addl < kIscsiMinAddl || addl > kIscsiMaxAddl || addl % 4 ||
		    p.size() < 4 + addl)
			return 0;
		const auto *name = reinterpret_cast<const char *>(&p[4]);
		const size_t len = strnlen(name, addl);
		if (len == 0 || len == addl)
			return 0; // empty, or not NUL terminated
		std::string s(name, len);
		// Format 01b carries a session's port (name,i,0xISID); 00b a name only.
		const size_t sep = s.find(kIsidSep);
		if ((format == 1) != (sep != std::string::npos))
			return 0;
		if (format == 1 && (sep == 0 || s.size() - sep - (sizeof(kIsidSep) - 1) != 12))
			return 0;
		// The ISID's 12 hex digits as the core writes them in a port's text: lowercase
		// (RFC 7143 names it in hex, case not significant).
		if (format == 1)
			for (size_t i = sep + sizeof(kIsidSep) - 1; i < s.size(); i++) {
				if (hexval(s[i]) < 0)
					return 0;
				s[i] = static_cast<char>(
				    std::tolower(static_cast<unsigned char>(s[i])));
			}
		*proto = ProtoId::Iscsi;
		*port = std::move(s);
		return 4 + addl;
	}
	default:
		return 0; // FCP, SAS, ...: no fabric of ours names ports that way
	}
}

Sense pr_spec_i_pt_parse(std::span<const uint8_t> list, std::vector<PrPort> *out)
{
	// SPC-4 6.17.3 table 170: the basic 24 bytes, TRANSPORTID PARAMETER DATA LENGTH, then
	// the TransportIDs: exactly as long as that says.
	constexpr size_t kHead = 28;
	if (list.size() < kHead)
		return Sense::ParamListLengthError;
	const uint32_t len = get_be32(&list[24]);
	if (len != list.size() - kHead)
		return Sense::ParamListLengthError;
	std::vector<PrPort> v;
	for (std::span<const uint8_t> t = list.subspan(kHead); !t.empty();) {
		// The length the TransportID's own header gives: one the list cuts short is a
		// length error, as SPC-4 6.17.3 says for a TransportID truncated by the length.
		size_t want = 0;
		if (t.size() >= 4 && ProtoId(t[0] & 0x0f) == ProtoId::Iscsi)
			want = 4 + size_t(get_be16(&t[2]));
		else if (ProtoId(t[0] & 0x0f) == ProtoId::Srp)
			want = kSrpLen;
		else if (t.size() >= 4)
			return Sense::InvalidParamListField; // a protocol we cannot name ports of
		if (want == 0 || want > t.size())
			return Sense::ParamListLengthError;
		PrPort p;
		const size_t used = transport_id_parse(t.first(want), &p.proto, &p.port);
		if (used != want)
			return Sense::InvalidParamListField;
		// An initiator port, not an initiator device: iSCSI's format 01b (SPC-4 7.6.4.6)
		// names the session's ISID along with the name; 00b names every port of the
		// device, which a registration (of I_T nexuses) cannot stand for.
		if (p.proto == ProtoId::Iscsi && p.port.find(kIsidSep) == std::string::npos)
			return Sense::InvalidParamListField;
		if (std::find(v.begin(), v.end(), p) != v.end())
			return Sense::InvalidParamListField; // one port twice
		v.push_back(std::move(p));
		t = t.subspan(used);
	}
	*out = std::move(v);
	return Sense::None;
}

} // namespace ulp::scsi
