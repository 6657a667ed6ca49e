// SPDX-License-Identifier: MIT
// iser/proto.cc - the iSER header and CM private data (see iser_proto.h).
#include "iser/proto.h"

#include "iscsi/pdu.h"

#include <cstring>

namespace ulp::iser
{

using namespace iscsi;

const char *iser_error_name(IserError e)
{
	switch (e) {
	case IserError::None:
		return "none";
	case IserError::Short:
		return "short iSER header";
	case IserError::BadOpcode:
		return "unknown iSER opcode";
	case IserError::StagsOnHello:
		return "STags on an iSER Hello";
	}
	return "?";
}

IserError parse_iser_hdr(std::span<const uint8_t> buf, IserHdr *out)
{
	if (buf.size() < kIserHdrLen)
		return IserError::Short;
	const uint8_t f = buf[0];
	const uint8_t op = f >> 4;
	if (op != uint8_t(IserOpcode::Control) && op != uint8_t(IserOpcode::Hello) &&
	    op != uint8_t(IserOpcode::HelloReply))
		return IserError::BadOpcode;
	IserHdr h;
	h.opcode = static_cast<IserOpcode>(op);
	h.wsv = f & ISER_WSV;
	h.rsv = f & ISER_RSV;
	if (h.opcode != IserOpcode::Control && (h.wsv || h.rsv))
		return IserError::StagsOnHello;
	h.write_stag = get_be32(&buf[4]);
	h.write_va = get_be64(&buf[8]);
	h.read_stag = get_be32(&buf[16]);
	h.read_va = get_be64(&buf[20]);
	*out = h;
	return IserError::None;
}

void build_iser_hdr(const IserHdr &h, std::span<uint8_t, kIserHdrLen> out)
{
	std::memset(out.data(), 0, kIserHdrLen);
	out[0] = static_cast<uint8_t>(uint8_t(h.opcode) << 4 | (h.wsv ? ISER_WSV : 0) |
	                              (h.rsv ? ISER_RSV : 0));
	put_be32(&out[4], h.write_stag);
	put_be64(&out[8], h.write_va);
	put_be32(&out[16], h.read_stag);
	put_be64(&out[20], h.read_va);
}

bool parse_iser_cm_hdr(std::span<const uint8_t> buf, IserCmHdr *out)
{
	if (buf.size() < kIserCmHdrLen)
		return false;
	out->flags = buf[0];
	return true;
}

void build_iser_cm_hdr(const IserCmHdr &h, std::span<uint8_t, kIserCmHdrLen> out)
{
	std::memset(out.data(), 0, kIserCmHdrLen);
	out[0] = h.flags;
}

bool parse_iser_message(std::span<const uint8_t> in, uint32_t max_recv_dsl, IserHdr *ih, Pdu *pdu,
                        PduError *pe, std::string *why)
{
	if (IserError e = parse_iser_hdr(in, ih); e != IserError::None) {
		*why = std::string("iSER header: ") + iser_error_name(e);
		return false;
	}
	if (ih->opcode != IserOpcode::Control) {
		*why = "iSER Hello received: iSER-assisted login is not supported";
		return false;
	}
	ParseOpts o;
	o.max_recv_dsl = max_recv_dsl;
	o.padded = false;
	*pe = parse_pdu(in.subspan(kIserHdrLen), o, pdu);
	if (pdu_error_fatal(*pe)) {
		*why = std::string("PDU: ") + pdu_error_name(*pe);
		return false;
	}
	return true;
}

} // namespace ulp::iser
