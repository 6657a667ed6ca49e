// SPDX-License-Identifier: MIT
// iscsi/pdu.cc - the iSCSI PDU codec: BHS field layouts, AHS, framing, digests, the reader.
#include "iscsi/pdu.h"
#include "core/check.h"

#include "core/crc32c.h"

#include <algorithm>
#include <cstring>

namespace ulp::iscsi
{

bool opcode_defined(uint8_t op)
{
	switch (static_cast<Opcode>(op)) {
	case Opcode::NopOut:
	case Opcode::ScsiCmd:
	case Opcode::TmfReq:
	case Opcode::LoginReq:
	case Opcode::TextReq:
	case Opcode::DataOut:
	case Opcode::LogoutReq:
	case Opcode::SnackReq:
	case Opcode::NopIn:
	case Opcode::ScsiRsp:
	case Opcode::TmfRsp:
	case Opcode::LoginRsp:
	case Opcode::TextRsp:
	case Opcode::DataIn:
	case Opcode::LogoutRsp:
	case Opcode::R2t:
	case Opcode::AsyncMsg:
	case Opcode::Reject:
		return true;
	}
	return false;
}

const char *login_status_name(LoginStatus s)
{
	switch (s) {
	case LoginStatus::Success:
		return "success";
	case LoginStatus::TargetMovedTemp:
		return "target moved temporarily";
	case LoginStatus::TargetMovedPerm:
		return "target moved permanently";
	case LoginStatus::InitiatorError:
		return "initiator error";
	case LoginStatus::AuthFailure:
		return "authentication failure";
	case LoginStatus::AuthzFailure:
		return "authorization failure";
	case LoginStatus::NotFound:
		return "not found";
	case LoginStatus::TargetRemoved:
		return "target removed";
	case LoginStatus::UnsupportedVersion:
		return "unsupported version";
	case LoginStatus::TooManyConnections:
		return "too many connections";
	case LoginStatus::MissingParameter:
		return "missing parameter";
	case LoginStatus::CantIncludeInSession:
		return "can't include in session";
	case LoginStatus::SessionTypeNotSupported:
		return "session type not supported";
	case LoginStatus::SessionDoesNotExist:
		return "session does not exist";
	case LoginStatus::InvalidDuringLogin:
		return "invalid request during login";
	case LoginStatus::TargetError:
		return "target error";
	case LoginStatus::ServiceUnavailable:
		return "service unavailable";
	case LoginStatus::OutOfResources:
		return "out of resources";
	}
	return "unknown status";
}

const char *pdu_error_name(PduError e)
{
	switch (e) {
	case PduError::None:
		return "none";
	case PduError::Truncated:
		return "truncated PDU";
	case PduError::AhsTooLong:
		return "TotalAHSLength too large";
	case PduError::BadAhs:
		return "malformed AHS";
	case PduError::DataTooLong:
		return "DataSegmentLength above MaxRecvDataSegmentLength";
	case PduError::DataOverCap:
		return "DataSegmentLength above the hard cap";
	case PduError::HeaderDigest:
		return "header digest error";
	case PduError::DataDigest:
		return "data digest error";
	}
	return "unknown error";
}

// ---------------------------------------------------------------------------------------------
// Framing

namespace
{

uint32_t header_crc(std::span<const uint8_t> bhs_and_ahs)
{
	return crc32c(bhs_and_ahs);
}

// The data digest of a segment whose data bytes gave CRC register reg, when it is sent:
// the padding is zeros (13.1: "Padding bytes ... SHOULD be set to 0 and are included in
// the CRC").
uint32_t data_crc_padded(uint32_t reg, size_t data_len)
{
	static constexpr uint8_t kZeros[3] = {};
	return crc32c_final(crc32c_update(reg, {kZeros, pad_len(data_len)}));
}

// The data digest of a received segment: over the padding bytes as they arrived.
uint32_t received_data_crc(const uint8_t *data, size_t data_len)
{
	return crc32c({data, pad4(data_len)});
}

// Checks shared by parse_pdu and the reader once the BHS is in.
PduError check_lengths(const uint8_t *bhs, uint32_t max_recv_dsl, uint32_t hard_cap)
{
	if (bhs_ahs_len(bhs) > kMaxAhsLen)
		return PduError::AhsTooLong;
	const uint32_t dsl = bhs_dsl(bhs);
	if (dsl > hard_cap)
		return PduError::DataOverCap;
	if (dsl > max_recv_dsl)
		return PduError::DataTooLong;
	return PduError::None;
}

} // namespace

PduError parse_pdu(std::span<const uint8_t> buf, const ParseOpts &opts, Pdu *out)
{
	*out = Pdu{};
	if (buf.size() < kBhsLen)
		return PduError::Truncated;
	const uint8_t *b = buf.data();
	const size_t ahs_len = bhs_ahs_len(b);
	if (ahs_len > kMaxAhsLen)
		return PduError::AhsTooLong;
	const size_t hd = opts.digests.header ? kDigestLen : 0;
	if (buf.size() < kBhsLen + ahs_len + hd)
		return PduError::Truncated;
	if (hd && get_digest(b + kBhsLen + ahs_len) != header_crc(buf.first(kBhsLen + ahs_len)))
		return PduError::HeaderDigest;
	// The length is trusted only after the header digest (when there is one) vouched for it.
	if (PduError e = check_lengths(b, opts.max_recv_dsl, kMaxDsl); e != PduError::None)
		return e;
	const uint32_t dsl = bhs_dsl(b);
	const size_t data_off = kBhsLen + ahs_len + hd;
	const bool dd = opts.digests.data && dsl;
	size_t need = data_off + dsl;
	if (opts.padded || dd)
		need = data_off + pad4(dsl);
	if (dd)
		need += kDigestLen;
	if (buf.size() < need)
		return PduError::Truncated;

	out->bhs = buf.first(kBhsLen);
	out->ahs = buf.subspan(kBhsLen, ahs_len);
	out->data = buf.subspan(data_off, dsl);
	out->wire_len = need;

	PduError e = PduError::None;
	if (dd && get_digest(b + data_off + pad4(dsl)) != received_data_crc(b + data_off, dsl))
		e = PduError::DataDigest;
	if (e == PduError::None && !out->ahs.empty()) {
		AhsInfo info;
		e = parse_ahs(out->ahs, &info);
	}
	return e;
}

size_t build_header(std::span<uint8_t> out, std::span<const uint8_t, kBhsLen> bhs,
                    std::span<const uint8_t> ahs, uint32_t data_len, bool header_digest)
{
	if (ahs.size() % 4 || ahs.size() > kMaxAhsLen || data_len > kMaxDsl)
		return 0;
	const size_t len = kBhsLen + ahs.size() + (header_digest ? kDigestLen : 0);
	if (out.size() < len)
		return 0;
	uint8_t *p = out.data();
	std::memcpy(p, bhs.data(), kBhsLen);
	p[4] = static_cast<uint8_t>(ahs.size() / 4);
	put_be24(p + 5, data_len);
	if (!ahs.empty())
		std::memcpy(p + kBhsLen, ahs.data(), ahs.size());
	if (header_digest)
		put_digest(p + kBhsLen + ahs.size(), header_crc(out.first(kBhsLen + ahs.size())));
	return len;
}

size_t build_trailer(std::span<uint8_t> out, uint32_t data_len, uint32_t data_crc, bool data_digest)
{
	const size_t pad = pad_len(data_len);
	const bool dd = data_digest && data_len;
	const size_t len = pad + (dd ? kDigestLen : 0);
	if (out.size() < len)
		return 0;
	std::memset(out.data(), 0, pad);
	if (dd)
		put_digest(out.data() + pad, data_crc_padded(data_crc, data_len));
	return len;
}

size_t build_pdu(std::span<uint8_t> out, std::span<const uint8_t, kBhsLen> bhs,
                 std::span<const uint8_t> ahs, std::span<const uint8_t> data, Digests d)
{
	if (data.size() > kMaxDsl || out.size() < pdu_wire_len(ahs.size(), data.size(), d))
		return 0;
	size_t n = build_header(out, bhs, ahs, static_cast<uint32_t>(data.size()), d.header);
	if (!n)
		return 0;
	if (!data.empty())
		std::memcpy(out.data() + n, data.data(), data.size());
	uint32_t reg = d.data ? crc32c_update(kCrc32cInit, data) : 0;
	size_t t = build_trailer(out.subspan(n + data.size()), static_cast<uint32_t>(data.size()),
	                         reg, d.data);
	return n + data.size() + t;
}

// ---------------------------------------------------------------------------------------------
// AHS

PduError parse_ahs(std::span<const uint8_t> ahs, AhsInfo *out)
{
	*out = AhsInfo{};
	bool seen_cdb = false;
	size_t off = 0;
	while (off < ahs.size()) {
		if (ahs.size() - off < 4)
			return PduError::BadAhs;
		const uint16_t len = get_be16(&ahs[off]); // bytes after the type byte
		const uint8_t type = ahs[off + 2] & 0x3f; // the top 2 bits are reserved (11.2.2)
		const size_t total = pad4(3 + size_t{len});
		if (len == 0 || total > ahs.size() - off)
			return PduError::BadAhs;
		switch (static_cast<AhsType>(type)) {
		case AhsType::ExtendedCdb:
			// 11.2.2, Extended CDB AHS: AHSLength = CDBLength - 15 (a reserved byte,
			// then CDB bytes 16..). A CDB is at most 260 bytes (SPC-4 variable length
			// CDB).
			if (seen_cdb || len < 2 || len > 260 - 15)
				return PduError::BadAhs;
			seen_cdb = true;
			out->ext_cdb = ahs.subspan(off + 4, len - 1);
			break;
		case AhsType::BidiReadLen:
			// 11.2.2, Bidirectional Read Expected Data Transfer Length AHS:
			// AHSLength 0x0005, a reserved byte, then the 4-byte length.
			if (out->has_bidi_read_len || len != 5)
				return PduError::BadAhs;
			out->has_bidi_read_len = true;
			out->bidi_read_len = get_be32(&ahs[off + 4]);
			break;
		default:
			return PduError::BadAhs;
		}
		off += total;
	}
	return PduError::None;
}

size_t build_ext_cdb_ahs(std::span<uint8_t> out, std::span<const uint8_t> cdb)
{
	if (cdb.size() <= 16 || cdb.size() > 260)
		return 0;
	const size_t ext = cdb.size() - 16;
	const size_t total = pad4(4 + ext);
	if (out.size() < total)
		return 0;
	std::memset(out.data(), 0, total);
	put_be16(out.data(), static_cast<uint16_t>(cdb.size() - 15));
	out[2] = static_cast<uint8_t>(AhsType::ExtendedCdb);
	std::memcpy(out.data() + 4, cdb.data() + 16, ext);
	return total;
}

size_t build_bidi_ahs(std::span<uint8_t> out, uint32_t read_len)
{
	if (out.size() < 8)
		return 0;
	put_be16(out.data(), 5);
	out[2] = static_cast<uint8_t>(AhsType::BidiReadLen);
	out[3] = 0;
	put_be32(out.data() + 4, read_len);
	return 8;
}

size_t scsi_cdb(const Pdu &pdu, const AhsInfo &ahs, std::span<uint8_t> out)
{
	const size_t len = 16 + ahs.ext_cdb.size();
	if (pdu.bhs.size() < kBhsLen || out.size() < len)
		return 0;
	std::memcpy(out.data(), pdu.bhs.data() + 32, 16);
	if (!ahs.ext_cdb.empty())
		std::memcpy(out.data() + 16, ahs.ext_cdb.data(), ahs.ext_cdb.size());
	return len;
}

// ---------------------------------------------------------------------------------------------
// Typed headers

namespace
{

// Byte 0: the opcode and, for initiator PDUs that may be immediate, the I bit.
uint8_t *start(BhsOut b, Opcode op, bool immediate)
{
	std::memset(b.data(), 0, kBhsLen);
	b[0] = static_cast<uint8_t>(op) | (immediate ? 0x40 : 0);
	return b.data();
}

bool is(BhsIn b, Opcode op)
{
	return b.size() >= kBhsLen && bhs_opcode(b.data()) == op;
}

uint8_t stage_bits(Stage csg, Stage nsg)
{
	return static_cast<uint8_t>((static_cast<uint8_t>(csg) & 3) << 2 |
	                            (static_cast<uint8_t>(nsg) & 3));
}

uint8_t bit(bool v, int shift)
{
	return static_cast<uint8_t>(v ? 1u << shift : 0u);
}

// Reads a Security/Operational/FullFeature value; the reserved value 2 is passed through.
Stage stage_of(uint8_t v)
{
	return static_cast<Stage>(v & 3);
}

} // namespace

void encode(const NopOut &h, BhsOut b)
{
	uint8_t *p = start(b, Opcode::NopOut, h.immediate);
	p[1] = 0x80;
	put_be64(p + 8, h.lun);
	put_be32(p + 16, h.itt);
	put_be32(p + 20, h.ttt);
	put_be32(p + 24, h.cmdsn);
	put_be32(p + 28, h.exp_statsn);
}

bool decode(BhsIn b, NopOut *h)
{
	if (!is(b, Opcode::NopOut))
		return false;
	const uint8_t *p = b.data();
	h->immediate = bhs_immediate(p);
	h->lun = get_be64(p + 8);
	h->itt = get_be32(p + 16);
	h->ttt = get_be32(p + 20);
	h->cmdsn = get_be32(p + 24);
	h->exp_statsn = get_be32(p + 28);
	return true;
}

void encode(const ScsiCmd &h, BhsOut b)
{
	uint8_t *p = start(b, Opcode::ScsiCmd, h.immediate);
	p[1] = bit(h.final, 7) | bit(h.read, 6) | bit(h.write, 5) | (h.attr & 7);
	put_be64(p + 8, h.lun);
	put_be32(p + 16, h.itt);
	put_be32(p + 20, h.edtl);
	put_be32(p + 24, h.cmdsn);
	put_be32(p + 28, h.exp_statsn);
	std::memcpy(p + 32, h.cdb.data(), 16);
}

bool decode(BhsIn b, ScsiCmd *h)
{
	if (!is(b, Opcode::ScsiCmd))
		return false;
	const uint8_t *p = b.data();
	h->immediate = bhs_immediate(p);
	h->final = p[1] & 0x80;
	h->read = p[1] & 0x40;
	h->write = p[1] & 0x20;
	h->attr = p[1] & 7;
	h->lun = get_be64(p + 8);
	h->itt = get_be32(p + 16);
	h->edtl = get_be32(p + 20);
	h->cmdsn = get_be32(p + 24);
	h->exp_statsn = get_be32(p + 28);
	std::memcpy(h->cdb.data(), p + 32, 16);
	return true;
}

void encode(const TmfReq &h, BhsOut b)
{
	uint8_t *p = start(b, Opcode::TmfReq, h.immediate);
	p[1] = 0x80 | (h.function & 0x7f);
	put_be64(p + 8, h.lun);
	put_be32(p + 16, h.itt);
	put_be32(p + 20, h.rtt);
	put_be32(p + 24, h.cmdsn);
	put_be32(p + 28, h.exp_statsn);
	put_be32(p + 32, h.ref_cmdsn);
	put_be32(p + 36, h.exp_datasn);
}

bool decode(BhsIn b, TmfReq *h)
{
	if (!is(b, Opcode::TmfReq))
		return false;
	const uint8_t *p = b.data();
	h->immediate = bhs_immediate(p);
	h->function = p[1] & 0x7f;
	h->lun = get_be64(p + 8);
	h->itt = get_be32(p + 16);
	h->rtt = get_be32(p + 20);
	h->cmdsn = get_be32(p + 24);
	h->exp_statsn = get_be32(p + 28);
	h->ref_cmdsn = get_be32(p + 32);
	h->exp_datasn = get_be32(p + 36);
	return true;
}

void encode(const LoginReq &h, BhsOut b)
{
	// 11.12: a Login Request is always immediate (byte 0 is 0x43).
	uint8_t *p = start(b, Opcode::LoginReq, true);
	p[1] = bit(h.transit, 7) | bit(h.cont, 6) | stage_bits(h.csg, h.nsg);
	p[2] = h.version_max;
	p[3] = h.version_min;
	std::memcpy(p + 8, h.isid.data(), 6);
	put_be16(p + 14, h.tsih);
	put_be32(p + 16, h.itt);
	put_be16(p + 20, h.cid);
	put_be32(p + 24, h.cmdsn);
	put_be32(p + 28, h.exp_statsn);
}

bool decode(BhsIn b, LoginReq *h)
{
	if (!is(b, Opcode::LoginReq))
		return false;
	const uint8_t *p = b.data();
	h->transit = p[1] & 0x80;
	h->cont = p[1] & 0x40;
	h->csg = stage_of(p[1] >> 2);
	h->nsg = stage_of(p[1]);
	h->version_max = p[2];
	h->version_min = p[3];
	std::memcpy(h->isid.data(), p + 8, 6);
	h->tsih = get_be16(p + 14);
	h->itt = get_be32(p + 16);
	h->cid = get_be16(p + 20);
	h->cmdsn = get_be32(p + 24);
	h->exp_statsn = get_be32(p + 28);
	return true;
}

void encode(const TextReq &h, BhsOut b)
{
	uint8_t *p = start(b, Opcode::TextReq, h.immediate);
	p[1] = bit(h.final, 7) | bit(h.cont, 6);
	put_be64(p + 8, h.lun);
	put_be32(p + 16, h.itt);
	put_be32(p + 20, h.ttt);
	put_be32(p + 24, h.cmdsn);
	put_be32(p + 28, h.exp_statsn);
}

bool decode(BhsIn b, TextReq *h)
{
	if (!is(b, Opcode::TextReq))
		return false;
	const uint8_t *p = b.data();
	h->immediate = bhs_immediate(p);
	h->final = p[1] & 0x80;
	h->cont = p[1] & 0x40;
	h->lun = get_be64(p + 8);
	h->itt = get_be32(p + 16);
	h->ttt = get_be32(p + 20);
	h->cmdsn = get_be32(p + 24);
	h->exp_statsn = get_be32(p + 28);
	return true;
}

void encode(const DataOut &h, BhsOut b)
{
	uint8_t *p = start(b, Opcode::DataOut, false);
	p[1] = bit(h.final, 7);
	put_be64(p + 8, h.lun);
	put_be32(p + 16, h.itt);
	put_be32(p + 20, h.ttt);
	put_be32(p + 28, h.exp_statsn);
	put_be32(p + 36, h.datasn);
	put_be32(p + 40, h.buffer_offset);
}

bool decode(BhsIn b, DataOut *h)
{
	if (!is(b, Opcode::DataOut))
		return false;
	const uint8_t *p = b.data();
	h->final = p[1] & 0x80;
	h->lun = get_be64(p + 8);
	h->itt = get_be32(p + 16);
	h->ttt = get_be32(p + 20);
	h->exp_statsn = get_be32(p + 28);
	h->datasn = get_be32(p + 36);
	h->buffer_offset = get_be32(p + 40);
	return true;
}

void encode(const LogoutReq &h, BhsOut b)
{
	uint8_t *p = start(b, Opcode::LogoutReq, h.immediate);
	p[1] = 0x80 | (h.reason & 0x7f);
	put_be32(p + 16, h.itt);
	put_be16(p + 20, h.cid);
	put_be32(p + 24, h.cmdsn);
	put_be32(p + 28, h.exp_statsn);
}

bool decode(BhsIn b, LogoutReq *h)
{
	if (!is(b, Opcode::LogoutReq))
		return false;
	const uint8_t *p = b.data();
	h->immediate = bhs_immediate(p);
	h->reason = p[1] & 0x7f;
	h->itt = get_be32(p + 16);
	h->cid = get_be16(p + 20);
	h->cmdsn = get_be32(p + 24);
	h->exp_statsn = get_be32(p + 28);
	return true;
}

void encode(const SnackReq &h, BhsOut b)
{
	uint8_t *p = start(b, Opcode::SnackReq, false);
	p[1] = 0x80 | (h.type & 0x0f);
	put_be64(p + 8, h.lun);
	put_be32(p + 16, h.itt);
	put_be32(p + 20, h.ttt);
	put_be32(p + 28, h.exp_statsn);
	put_be32(p + 40, h.begrun);
	put_be32(p + 44, h.runlength);
}

bool decode(BhsIn b, SnackReq *h)
{
	if (!is(b, Opcode::SnackReq))
		return false;
	const uint8_t *p = b.data();
	h->type = p[1] & 0x0f;
	h->lun = get_be64(p + 8);
	h->itt = get_be32(p + 16);
	h->ttt = get_be32(p + 20);
	h->exp_statsn = get_be32(p + 28);
	h->begrun = get_be32(p + 40);
	h->runlength = get_be32(p + 44);
	return true;
}

void encode(const NopIn &h, BhsOut b)
{
	uint8_t *p = start(b, Opcode::NopIn, false);
	p[1] = 0x80;
	put_be64(p + 8, h.lun);
	put_be32(p + 16, h.itt);
	put_be32(p + 20, h.ttt);
	put_be32(p + 24, h.statsn);
	put_be32(p + 28, h.exp_cmdsn);
	put_be32(p + 32, h.max_cmdsn);
}

bool decode(BhsIn b, NopIn *h)
{
	if (!is(b, Opcode::NopIn))
		return false;
	const uint8_t *p = b.data();
	h->lun = get_be64(p + 8);
	h->itt = get_be32(p + 16);
	h->ttt = get_be32(p + 20);
	h->statsn = get_be32(p + 24);
	h->exp_cmdsn = get_be32(p + 28);
	h->max_cmdsn = get_be32(p + 32);
	return true;
}

void encode(const ScsiRsp &h, BhsOut b)
{
	uint8_t *p = start(b, Opcode::ScsiRsp, false);
	p[1] = 0x80 | bit(h.bidi_overflow, 4) | bit(h.bidi_underflow, 3) | bit(h.overflow, 2) |
	       bit(h.underflow, 1);
	p[2] = h.response;
	p[3] = h.status;
	put_be32(p + 16, h.itt);
	put_be32(p + 20, h.snack_tag);
	put_be32(p + 24, h.statsn);
	put_be32(p + 28, h.exp_cmdsn);
	put_be32(p + 32, h.max_cmdsn);
	put_be32(p + 36, h.exp_datasn);
	put_be32(p + 40, h.bidi_residual);
	put_be32(p + 44, h.residual);
}

bool decode(BhsIn b, ScsiRsp *h)
{
	if (!is(b, Opcode::ScsiRsp))
		return false;
	const uint8_t *p = b.data();
	h->bidi_overflow = p[1] & 0x10;
	h->bidi_underflow = p[1] & 0x08;
	h->overflow = p[1] & 0x04;
	h->underflow = p[1] & 0x02;
	h->response = p[2];
	h->status = p[3];
	h->itt = get_be32(p + 16);
	h->snack_tag = get_be32(p + 20);
	h->statsn = get_be32(p + 24);
	h->exp_cmdsn = get_be32(p + 28);
	h->max_cmdsn = get_be32(p + 32);
	h->exp_datasn = get_be32(p + 36);
	h->bidi_residual = get_be32(p + 40);
	h->residual = get_be32(p + 44);
	return true;
}

void encode(const TmfRsp &h, BhsOut b)
{
	uint8_t *p = start(b, Opcode::TmfRsp, false);
	p[1] = 0x80;
	p[2] = h.response;
	put_be32(p + 16, h.itt);
	put_be32(p + 24, h.statsn);
	put_be32(p + 28, h.exp_cmdsn);
	put_be32(p + 32, h.max_cmdsn);
}

bool decode(BhsIn b, TmfRsp *h)
{
	if (!is(b, Opcode::TmfRsp))
		return false;
	const uint8_t *p = b.data();
	h->response = p[2];
	h->itt = get_be32(p + 16);
	h->statsn = get_be32(p + 24);
	h->exp_cmdsn = get_be32(p + 28);
	h->max_cmdsn = get_be32(p + 32);
	return true;
}

void encode(const LoginRsp &h, BhsOut b)
{
	uint8_t *p = start(b, Opcode::LoginRsp, false);
	p[1] = bit(h.transit, 7) | bit(h.cont, 6) | stage_bits(h.csg, h.nsg);
	p[2] = h.version_max;
	p[3] = h.version_active;
	std::memcpy(p + 8, h.isid.data(), 6);
	put_be16(p + 14, h.tsih);
	put_be32(p + 16, h.itt);
	put_be32(p + 24, h.statsn);
	put_be32(p + 28, h.exp_cmdsn);
	put_be32(p + 32, h.max_cmdsn);
	p[36] = status_class(h.status);
	p[37] = status_detail(h.status);
}

bool decode(BhsIn b, LoginRsp *h)
{
	if (!is(b, Opcode::LoginRsp))
		return false;
	const uint8_t *p = b.data();
	h->transit = p[1] & 0x80;
	h->cont = p[1] & 0x40;
	h->csg = stage_of(p[1] >> 2);
	h->nsg = stage_of(p[1]);
	h->version_max = p[2];
	h->version_active = p[3];
	std::memcpy(h->isid.data(), p + 8, 6);
	h->tsih = get_be16(p + 14);
	h->itt = get_be32(p + 16);
	h->statsn = get_be32(p + 24);
	h->exp_cmdsn = get_be32(p + 28);
	h->max_cmdsn = get_be32(p + 32);
	h->status = static_cast<LoginStatus>(p[36] << 8 | p[37]);
	return true;
}

void encode(const TextRsp &h, BhsOut b)
{
	uint8_t *p = start(b, Opcode::TextRsp, false);
	p[1] = bit(h.final, 7) | bit(h.cont, 6);
	put_be64(p + 8, h.lun);
	put_be32(p + 16, h.itt);
	put_be32(p + 20, h.ttt);
	put_be32(p + 24, h.statsn);
	put_be32(p + 28, h.exp_cmdsn);
	put_be32(p + 32, h.max_cmdsn);
}

bool decode(BhsIn b, TextRsp *h)
{
	if (!is(b, Opcode::TextRsp))
		return false;
	const uint8_t *p = b.data();
	h->final = p[1] & 0x80;
	h->cont = p[1] & 0x40;
	h->lun = get_be64(p + 8);
	h->itt = get_be32(p + 16);
	h->ttt = get_be32(p + 20);
	h->statsn = get_be32(p + 24);
	h->exp_cmdsn = get_be32(p + 28);
	h->max_cmdsn = get_be32(p + 32);
	return true;
}

void encode(const DataIn &h, BhsOut b)
{
	uint8_t *p = start(b, Opcode::DataIn, false);
	p[1] = bit(h.final, 7) | bit(h.ack, 6) | bit(h.overflow, 2) | bit(h.underflow, 1) |
	       bit(h.has_status, 0);
	p[3] = h.status;
	put_be64(p + 8, h.lun);
	put_be32(p + 16, h.itt);
	put_be32(p + 20, h.ttt);
	put_be32(p + 24, h.statsn);
	put_be32(p + 28, h.exp_cmdsn);
	put_be32(p + 32, h.max_cmdsn);
	put_be32(p + 36, h.datasn);
	put_be32(p + 40, h.buffer_offset);
	put_be32(p + 44, h.residual);
}

bool decode(BhsIn b, DataIn *h)
{
	if (!is(b, Opcode::DataIn))
		return false;
	const uint8_t *p = b.data();
	h->final = p[1] & 0x80;
	h->ack = p[1] & 0x40;
	h->overflow = p[1] & 0x04;
	h->underflow = p[1] & 0x02;
	h->has_status = p[1] & 0x01;
	h->status = p[3];
	h->lun = get_be64(p + 8);
	h->itt = get_be32(p + 16);
	h->ttt = get_be32(p + 20);
	h->statsn = get_be32(p + 24);
	h->exp_cmdsn = get_be32(p + 28);
	h->max_cmdsn = get_be32(p + 32);
	h->datasn = get_be32(p + 36);
	h->buffer_offset = get_be32(p + 40);
	h->residual = get_be32(p + 44);
	return true;
}

void encode(const LogoutRsp &h, BhsOut b)
{
	uint8_t *p = start(b, Opcode::LogoutRsp, false);
	p[1] = 0x80;
	p[2] = h.response;
	put_be32(p + 16, h.itt);
	put_be32(p + 24, h.statsn);
	put_be32(p + 28, h.exp_cmdsn);
	put_be32(p + 32, h.max_cmdsn);
	put_be16(p + 40, h.time2wait);
	put_be16(p + 42, h.time2retain);
}

bool decode(BhsIn b, LogoutRsp *h)
{
	if (!is(b, Opcode::LogoutRsp))
		return false;
	const uint8_t *p = b.data();
	h->response = p[2];
	h->itt = get_be32(p + 16);
	h->statsn = get_be32(p + 24);
	h->exp_cmdsn = get_be32(p + 28);
	h->max_cmdsn = get_be32(p + 32);
	h->time2wait = get_be16(p + 40);
	h->time2retain = get_be16(p + 42);
	return true;
}

void encode(const R2t &h, BhsOut b)
{
	uint8_t *p = start(b, Opcode::R2t, false);
	p[1] = 0x80;
	put_be64(p + 8, h.lun);
	put_be32(p + 16, h.itt);
	put_be32(p + 20, h.ttt);
	put_be32(p + 24, h.statsn);
	put_be32(p + 28, h.exp_cmdsn);
	put_be32(p + 32, h.max_cmdsn);
	put_be32(p + 36, h.r2tsn);
	put_be32(p + 40, h.buffer_offset);
	put_be32(p + 44, h.desired_len);
}

bool decode(BhsIn b, R2t *h)
{
	if (!is(b, Opcode::R2t))
		return false;
	const uint8_t *p = b.data();
	h->lun = get_be64(p + 8);
	h->itt = get_be32(p + 16);
	h->ttt = get_be32(p + 20);
	h->statsn = get_be32(p + 24);
	h->exp_cmdsn = get_be32(p + 28);
	h->max_cmdsn = get_be32(p + 32);
	h->r2tsn = get_be32(p + 36);
	h->buffer_offset = get_be32(p + 40);
	h->desired_len = get_be32(p + 44);
	return true;
}

void encode(const AsyncMsg &h, BhsOut b)
{
	uint8_t *p = start(b, Opcode::AsyncMsg, false);
	p[1] = 0x80;
	put_be64(p + 8, h.lun);
	put_be32(p + 16, kReservedTag); // 11.9: the ITT field is 0xffffffff
	put_be32(p + 24, h.statsn);
	put_be32(p + 28, h.exp_cmdsn);
	put_be32(p + 32, h.max_cmdsn);
	p[36] = h.event;
	p[37] = h.vcode;
	put_be16(p + 38, h.param1);
	put_be16(p + 40, h.param2);
	put_be16(p + 42, h.param3);
}

bool decode(BhsIn b, AsyncMsg *h)
{
	if (!is(b, Opcode::AsyncMsg))
		return false;
	const uint8_t *p = b.data();
	h->lun = get_be64(p + 8);
	h->statsn = get_be32(p + 24);
	h->exp_cmdsn = get_be32(p + 28);
	h->max_cmdsn = get_be32(p + 32);
	h->event = p[36];
	h->vcode = p[37];
	h->param1 = get_be16(p + 38);
	h->param2 = get_be16(p + 40);
	h->param3 = get_be16(p + 42);
	return true;
}

void encode(const RejectPdu &h, BhsOut b)
{
	uint8_t *p = start(b, Opcode::Reject, false);
	p[1] = 0x80;
	p[2] = static_cast<uint8_t>(h.reason);
	put_be32(p + 16, kReservedTag); // 11.17: the ITT field is 0xffffffff
	put_be32(p + 24, h.statsn);
	put_be32(p + 28, h.exp_cmdsn);
	put_be32(p + 32, h.max_cmdsn);
	put_be32(p + 36, h.datasn);
}

bool decode(BhsIn b, RejectPdu *h)
{
	if (!is(b, Opcode::Reject))
		return false;
	const uint8_t *p = b.data();
	h->reason = static_cast<RejectReason>(p[2]);
	h->statsn = get_be32(p + 24);
	h->exp_cmdsn = get_be32(p + 28);
	h->max_cmdsn = get_be32(p + 32);
	h->datasn = get_be32(p + 36);
	return true;
}

// ---------------------------------------------------------------------------------------------
// PduReader

PduReader::PduReader(uint32_t hard_cap)
    : buf_(kBhsLen + kMaxAhsLen + kDigestLen + pad4(std::min(hard_cap, kMaxDsl)) + kDigestLen),
      hard_cap_(std::min(hard_cap, kMaxDsl))
{
}

std::span<const uint8_t> PduReader::current_bhs() const
{
	if (have_ < kBhsLen && phase_ == Phase::Bhs)
		return {};
	return {buf_.data(), kBhsLen};
}

std::span<uint8_t> PduReader::want()
{
	if (phase_ == Phase::Stopped)
		return {};
	ULP_CHECK(need_ >= have_ && need_ <= buf_.size());
	return {buf_.data() + have_, need_ - have_};
}

ReadResult PduReader::stop(PduError e)
{
	phase_ = Phase::Stopped;
	fatal_ = e;
	return {ReadStatus::Error, e};
}

ReadResult PduReader::commit(size_t n, Pdu *out)
{
	if (phase_ == Phase::Stopped)
		return {ReadStatus::Error, fatal_};
	ULP_CHECK(n <= need_ - have_, "commit of {} bytes, {} wanted", n, need_ - have_);
	have_ += n;
	// One commit can finish at most one phase's bytes, but a phase may need none (no AHS,
	// no digest, no data): advance until bytes are needed or a PDU is complete.
	while (have_ == need_) {
		ReadResult r = advance(out);
		if (r.status != ReadStatus::NeedMore)
			return r;
	}
	return {ReadStatus::NeedMore, PduError::None};
}

ReadResult PduReader::advance(Pdu *out)
{
	const uint8_t *b = buf_.data();
	switch (phase_) {
	case Phase::Bhs:
		// The digest setting is latched per PDU: a set_digests() between PDUs applies to
		// the next one whole.
		cur_digests_ = digests_;
		ahs_len_ = bhs_ahs_len(b);
		if (ahs_len_ > kMaxAhsLen)
			return stop(PduError::AhsTooLong);
		phase_ = Phase::HeaderRest;
		need_ = kBhsLen + ahs_len_ + (cur_digests_.header ? kDigestLen : 0);
		return {ReadStatus::NeedMore, PduError::None};
	case Phase::HeaderRest: {
		if (cur_digests_.header &&
		    get_digest(b + kBhsLen + ahs_len_) != header_crc({b, kBhsLen + ahs_len_}))
			return stop(PduError::HeaderDigest);
		if (PduError e = check_lengths(b, max_recv_dsl_, hard_cap_); e != PduError::None)
			return stop(e);
		dsl_ = bhs_dsl(b);
		phase_ = Phase::Data;
		need_ += pad4(dsl_) + (cur_digests_.data && dsl_ ? kDigestLen : 0);
		return {ReadStatus::NeedMore, PduError::None};
	}
	case Phase::Data: {
		const size_t data_off = kBhsLen + ahs_len_ + (cur_digests_.header ? kDigestLen : 0);
		std::span<const uint8_t> all(b, need_);
		out->bhs = all.first(kBhsLen);
		out->ahs = all.subspan(kBhsLen, ahs_len_);
		out->data = all.subspan(data_off, dsl_);
		out->wire_len = need_;
		PduError e = PduError::None;
		if (cur_digests_.data && dsl_ &&
		    get_digest(b + data_off + pad4(dsl_)) != received_data_crc(b + data_off, dsl_))
			e = PduError::DataDigest;
		if (e == PduError::None && ahs_len_) {
			AhsInfo info;
			e = parse_ahs(out->ahs, &info);
		}
		phase_ = Phase::Bhs;
		have_ = 0;
		need_ = kBhsLen;
		return {ReadStatus::Pdu, e};
	}
	case Phase::Stopped:
		break;
	}
	return {ReadStatus::Error, fatal_};
}

ReadResult PduReader::feed(std::span<const uint8_t> in, size_t *used, Pdu *out)
{
	*used = 0;
	while (true) {
		std::span<uint8_t> w = want();
		if (w.empty())
			return {ReadStatus::Error, fatal_};
		size_t n = std::min(w.size(), in.size() - *used);
		std::memcpy(w.data(), in.data() + *used, n);
		*used += n;
		ReadResult r = commit(n, out);
		if (r.status != ReadStatus::NeedMore || *used == in.size())
			return r;
	}
}

} // namespace ulp::iscsi
