// SPDX-License-Identifier: MIT
// iscsi/pdu.h - the iSCSI PDU codec (RFC 7143 section 11): opcodes, the Basic Header Segment
// and its fields, typed headers for every PDU type, Additional Header Segments, padding,
// digests, and a streaming reader for byte-stream transports.
//
// A PDU on the wire (RFC 7143 11.1):
//
//	BHS (48 bytes) | AHS (TotalAHSLength * 4) | header digest? | data segment | pad to 4 |
//	data digest?
//
// The digests exist only on TCP connections that negotiated them (HeaderDigest /
// DataDigest=CRC32C, from the first PDU of the full feature phase); iSER carries whole PDUs
// in SEND messages without digests, padding optional (RFC 7145). The same code serves
// both: parse_pdu() takes a span holding whole PDUs, PduReader cuts a byte stream into them.
//
// Nothing here allocates except PduReader's constructor: builders write into caller
// buffers, parsers return views (Pdu) into the caller's or the reader's bytes. Every length
// read from the wire is checked against the bytes actually present before it is used.
//
// Multi-byte fields are big-endian. The typed headers (ScsiCmd, LoginRsp, ...) hold fields
// in host order; encode() writes one into a BHS (TotalAHSLength and DataSegmentLength are
// left for build_pdu/build_header, which know the segments), decode() reads one back and
// checks the opcode.
#pragma once

#include "core/byteorder.h"

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace ulp::iscsi
{

constexpr size_t kBhsLen = 48;                 // Basic Header Segment (RFC 7143 11.2)
constexpr size_t kDigestLen = 4;               // a CRC32C digest (RFC 7143 13.1)
constexpr size_t kMaxAhsLen = 256;             // sanity cap on TotalAHSLength * 4, see below
constexpr uint32_t kMaxDsl = (1u << 24) - 1;   // DataSegmentLength is a 24-bit field
constexpr uint32_t kDefaultMrdsl = 8192;       // MaxRecvDataSegmentLength default (13.12)
constexpr uint32_t kReservedTag = 0xffffffffu; // the reserved ITT/TTT value (11.2)
constexpr uint8_t kIscsiVersion = 0x00;        // the only version (11.12, Version-max/min)

// kMaxAhsLen: the largest AHS set any PDU needs is an extended-CDB AHS for a 260-byte CDB
// (4 + 244 bytes) plus a bidirectional-read-length AHS (8 bytes): 256 bytes. The field
// allows 1020; anything past 256 is refused before it is buffered.

// RFC 7143 11.2.1 opcodes. Initiator opcodes 0x00-0x1f, target opcodes 0x20-0x3f.
enum class Opcode : uint8_t {
	NopOut = 0x00,
	ScsiCmd = 0x01,
	TmfReq = 0x02,
	LoginReq = 0x03,
	TextReq = 0x04,
	DataOut = 0x05,
	LogoutReq = 0x06,
	SnackReq = 0x10,
	NopIn = 0x20,
	ScsiRsp = 0x21,
	TmfRsp = 0x22,
	LoginRsp = 0x23,
	TextRsp = 0x24,
	DataIn = 0x25,
	LogoutRsp = 0x26,
	R2t = 0x31,
	AsyncMsg = 0x32,
	Reject = 0x3f,
};

// True for the opcodes RFC 7143 defines (vendor-specific 0x1c-0x1e / 0x3c-0x3e excluded):
// the connection layer answers anything else with Reject "Command not supported".
bool opcode_defined(uint8_t op);
// True for opcodes an initiator sends.
constexpr bool opcode_from_initiator(uint8_t op)
{
	return op < 0x20;
}

// Login stages, the CSG/NSG field values (RFC 7143 11.12, CSG and NSG). 2 is reserved.
enum class Stage : uint8_t {
	Security = 0,
	Operational = 1,
	FullFeature = 3,
};

// Login Response Status-Class << 8 | Status-Detail (RFC 7143 11.13).
// What one step of a login state machine (either end's) leaves to do.
enum class LoginStep : uint8_t {
	Continue, // send the response (or the next request), more to come
	Complete, // full feature phase from the next PDU
	Failed,   // send the response (if any), then close the connection
};

enum class LoginStatus : uint16_t {
	Success = 0x0000,
	TargetMovedTemp = 0x0101,      // redirect: TargetAddress in the data
	TargetMovedPerm = 0x0102,      // redirect, permanent
	InitiatorError = 0x0200,       // miscellaneous initiator error, malformed requests
	AuthFailure = 0x0201,          // authentication failed
	AuthzFailure = 0x0202,         // authorization: the initiator may not use the target
	NotFound = 0x0203,             // no such target
	TargetRemoved = 0x0204,        // the target no longer exists
	UnsupportedVersion = 0x0205,   // no common version
	TooManyConnections = 0x0206,   // MaxConnections reached
	MissingParameter = 0x0207,     // a required key is missing
	CantIncludeInSession = 0x0208, // the connection cannot join that session
	SessionTypeNotSupported = 0x0209,
	SessionDoesNotExist = 0x020a, // non-zero TSIH naming no session
	InvalidDuringLogin = 0x020b,  // a PDU other than Login Request during login
	TargetError = 0x0300,         // target hardware or software error
	ServiceUnavailable = 0x0301,  // the target is not available now
	OutOfResources = 0x0302,      // the target has no resources for this
};
constexpr uint8_t status_class(LoginStatus s)
{
	return static_cast<uint16_t>(s) >> 8;
}
constexpr uint8_t status_detail(LoginStatus s)
{
	return static_cast<uint16_t>(s) & 0xff;
}
const char *login_status_name(LoginStatus s);

// Reject reasons (RFC 7143 11.17).
enum class RejectReason : uint8_t {
	DataDigestError = 0x02,
	SnackReject = 0x03,
	ProtocolError = 0x04,
	CmdNotSupported = 0x05,
	ImmCmdReject = 0x06,
	TaskInProgress = 0x07,
	InvalidDataAck = 0x08,
	InvalidPduField = 0x09,
	LongOpReject = 0x0a,
	WaitingForLogout = 0x0c,
};

// RFC 7143 3.2.2.1: serial number arithmetic (RFC 1982, 32 bits) for CmdSN and StatSN.
constexpr bool sn_lt(uint32_t a, uint32_t b)
{
	return a != b && uint32_t(b - a) < 0x80000000u;
}
constexpr bool sn_le(uint32_t a, uint32_t b)
{
	return a == b || sn_lt(a, b);
}

constexpr size_t pad4(size_t n)
{
	return (n + 3) & ~size_t{3};
} // n rounded up to 4
constexpr size_t pad_len(size_t n)
{
	return (4 - (n & 3)) & 3;
} // padding after n bytes

// ---------------------------------------------------------------------------------------------
// BHS fields common to every PDU (RFC 7143 11.2.1)

using Bhs = std::array<uint8_t, kBhsLen>;

inline Opcode bhs_opcode(const uint8_t *b)
{
	return static_cast<Opcode>(b[0] & 0x3f);
}
inline bool bhs_immediate(const uint8_t *b)
{
	return b[0] & 0x40;
} // I bit
inline bool bhs_final(const uint8_t *b)
{
	return b[1] & 0x80;
} // F (or T) bit
inline size_t bhs_ahs_len(const uint8_t *b)
{
	return size_t{b[4]} * 4;
} // bytes
inline uint32_t bhs_dsl(const uint8_t *b)
{
	return get_be24(b + 5);
}
inline uint64_t bhs_lun(const uint8_t *b)
{
	return get_be64(b + 8);
}
inline uint32_t bhs_itt(const uint8_t *b)
{
	return get_be32(b + 16);
}

// Digest use on one connection (both off during login and on iSER).
struct Digests {
	bool header = false; // CRC32C after BHS + AHS
	bool data = false;   // CRC32C after data + padding (only when DataSegmentLength != 0)
};

// Bytes a PDU with ahs_len bytes of AHS (a multiple of 4) and data_len data bytes occupies
// on a byte stream.
constexpr size_t pdu_wire_len(size_t ahs_len, size_t data_len, Digests d)
{
	return kBhsLen + ahs_len + (d.header ? kDigestLen : 0) + pad4(data_len) +
	       (d.data && data_len ? kDigestLen : 0);
}

// A parsed PDU: views into the bytes it was parsed from (valid as long as they are).
struct Pdu {
	std::span<const uint8_t> bhs;  // always kBhsLen bytes
	std::span<const uint8_t> ahs;  // TotalAHSLength * 4 bytes, possibly empty
	std::span<const uint8_t> data; // DataSegmentLength bytes, padding excluded
	size_t wire_len = 0; // bytes the PDU took in its source, padding and digests included

	Opcode opcode() const { return bhs_opcode(bhs.data()); }
	bool immediate() const { return bhs_immediate(bhs.data()); }
	bool final() const { return bhs_final(bhs.data()); }
	uint32_t itt() const { return bhs_itt(bhs.data()); }
	uint64_t lun() const { return bhs_lun(bhs.data()); }
};

// Why a PDU was refused. What the connection layer does with each (RFC 7143 section 7):
enum class PduError : uint8_t {
	None,
	Truncated,    // parse_pdu: the span ends before the PDU does. iSER: a SEND shorter than its
	              // PDU is a protocol error: Reject (ProtocolError) and drop the connection.
	AhsTooLong,   // TotalAHSLength * 4 > kMaxAhsLen. Fatal: drop the connection.
	BadAhs,       // the AHS is malformed (an AHSLength runs past TotalAHSLength, an unknown or
	              // repeated type). Framing is intact: Reject (ProtocolError), PDU discarded.
	DataTooLong,  // DataSegmentLength > the receiver's MaxRecvDataSegmentLength (13.12). A
	              // protocol error; fatal here: Reject (ProtocolError) and drop.
	DataOverCap,  // DataSegmentLength > the reader's hard cap. Fatal: drop.
	HeaderDigest, // header digest mismatch. 7.8: discard the header and everything up to a
	              // later PDU or close; without markers (removed by RFC 7143) the next PDU
	              // cannot be found, so the reader stops: drop the connection.
	DataDigest,   // data digest mismatch. 7.8: Reject with reason DataDigestError and discard
	              // the PDU (ERL > 0: recover the data with SNACK/R2T). Framing is intact.
};
const char *pdu_error_name(PduError e);
// True when the stream cannot continue after e (the connection must be dropped).
constexpr bool pdu_error_fatal(PduError e)
{
	return e == PduError::Truncated || e == PduError::AhsTooLong ||
	       e == PduError::DataTooLong || e == PduError::DataOverCap ||
	       e == PduError::HeaderDigest;
}

// How to parse a whole PDU from a span.
struct ParseOpts {
	uint32_t max_recv_dsl = kDefaultMrdsl; // our MaxRecvDataSegmentLength (DataTooLong above)
	Digests digests;                       // digests present (TCP after login only)
	bool padded = true;                    // the data segment is followed by its padding (TCP
	                                       // framing); false for iSER, where a SEND may end
	                                       // right after the data segment
};

// Parse the PDU at the start of buf (iSER receive buffers, or a test's byte string). On
// success *out views buf and out->wire_len says how many bytes it took; bytes past that
// are not looked at (the next PDU, or an iSER receive buffer's slack). On BadAhs and
// DataDigest *out is still filled in (the Reject quotes the header).
PduError parse_pdu(std::span<const uint8_t> buf, const ParseOpts &opts, Pdu *out);

// ---------------------------------------------------------------------------------------------
// Building PDUs into caller buffers

// Header part: the BHS (TotalAHSLength and DataSegmentLength set from ahs and data_len),
// the AHS (its length must be a multiple of 4, at most kMaxAhsLen), and the header digest
// when asked for. Returns the bytes written, 0 if out is too small or a length is invalid.
size_t build_header(std::span<uint8_t> out, std::span<const uint8_t, kBhsLen> bhs,
                    std::span<const uint8_t> ahs, uint32_t data_len, bool header_digest);

// Trailer after a data segment of data_len bytes whose CRC register (started from
// kCrc32cInit, fed with the data only) is data_crc: the zero padding and, when asked for and
// data_len != 0, the data digest over data and padding. For data gathered from several
// buffers (writev). Returns the bytes written (0..7), or 0 with nothing written if out is
// too small.
size_t build_trailer(std::span<uint8_t> out, uint32_t data_len, uint32_t data_crc,
                     bool data_digest);

// A whole PDU: header part, data, trailer. Returns the bytes written, 0 on error.
size_t build_pdu(std::span<uint8_t> out, std::span<const uint8_t, kBhsLen> bhs,
                 std::span<const uint8_t> ahs, std::span<const uint8_t> data, Digests d);

// ---------------------------------------------------------------------------------------------
// Additional Header Segments (RFC 7143 11.2.2)

enum class AhsType : uint8_t {
	ExtendedCdb = 1, // the CDB bytes past the first 16
	BidiReadLen = 2, // Bidirectional Read Expected Data Transfer Length
};

struct AhsInfo {
	std::span<const uint8_t> ext_cdb; // CDB bytes 16.. (empty without an extended-CDB AHS)
	bool has_bidi_read_len = false;   // a bidirectional read length AHS is present
	uint32_t bidi_read_len = 0;       // its value (bytes)
};

// Walk an AHS area (the Pdu's ahs span). Each AHS is AHSLength (2 bytes: bytes after the
// type byte, padding excluded), AHSType, then AHSLength bytes, padded to 4. Unknown types,
// repeated types, a zero or overrunning AHSLength, or a bidi AHS of the wrong length give
// BadAhs.
PduError parse_ahs(std::span<const uint8_t> ahs, AhsInfo *out);

// The extended-CDB AHS for cdb (17..260 bytes; only bytes 16.. go in the AHS). Returns the
// bytes written (a multiple of 4) or 0.
size_t build_ext_cdb_ahs(std::span<uint8_t> out, std::span<const uint8_t> cdb);
// The bidirectional read length AHS (8 bytes). Returns 8 or 0.
size_t build_bidi_ahs(std::span<uint8_t> out, uint32_t read_len);

// The whole CDB of a SCSI Command: BHS bytes 32..47, then the extended part. Returns its
// length, 0 if out is too small.
size_t scsi_cdb(const Pdu &pdu, const AhsInfo &ahs, std::span<uint8_t> out);

// ---------------------------------------------------------------------------------------------
// Typed headers, one per PDU type (RFC 7143 11.3 - 11.19). LUNs are the raw 8-byte field.

using Isid = std::array<uint8_t, 6>; // Initiator Session ID (11.12, ISID)

struct NopOut { // 11.18
	bool immediate = true;
	uint64_t lun = 0;
	uint32_t itt = kReservedTag; // 0xffffffff when answering a NOP-In
	uint32_t ttt = kReservedTag; // the NOP-In's TTT when answering it
	uint32_t cmdsn = 0;
	uint32_t exp_statsn = 0;

	bool operator==(const NopOut &) const = default;
};

struct ScsiCmd { // 11.3
	bool immediate = false;
	bool final = true;  // F: no unsolicited Data-Out follows
	bool read = false;  // R: data-in expected
	bool write = false; // W: data-out expected
	uint8_t attr = 0;   // task attribute (ATTR, 3 bits)
	uint64_t lun = 0;
	uint32_t itt = 0;
	uint32_t edtl = 0; // Expected Data Transfer Length (bytes)
	uint32_t cmdsn = 0;
	uint32_t exp_statsn = 0;
	std::array<uint8_t, 16> cdb{}; // first 16 CDB bytes (the rest in an AHS)

	bool operator==(const ScsiCmd &) const = default;
};

struct TmfReq { // 11.5
	bool immediate = true;
	uint8_t function = 0; // 7 bits (11.5)
	uint64_t lun = 0;
	uint32_t itt = 0;
	uint32_t rtt = kReservedTag; // Referenced Task Tag
	uint32_t cmdsn = 0;
	uint32_t exp_statsn = 0;
	uint32_t ref_cmdsn = 0;
	uint32_t exp_datasn = 0;

	bool operator==(const TmfReq &) const = default;
};

struct LoginReq {                    // 11.12
	bool transit = false;        // T: ready for the next stage
	bool cont = false;           // C: text continues in the next request
	Stage csg = Stage::Security; // current stage
	Stage nsg = Stage::Security; // next stage (meaningful with T)
	uint8_t version_max = kIscsiVersion;
	uint8_t version_min = kIscsiVersion;
	Isid isid{};
	uint16_t tsih = 0; // 0 for a new session
	uint32_t itt = 0;
	uint16_t cid = 0; // connection ID
	uint32_t cmdsn = 0;
	uint32_t exp_statsn = 0;

	bool operator==(const LoginReq &) const = default;
};

struct TextReq { // 11.10
	bool immediate = false;
	bool final = true; // F
	bool cont = false; // C
	uint64_t lun = 0;
	uint32_t itt = 0;
	uint32_t ttt = kReservedTag; // the Text Response's TTT when continuing it
	uint32_t cmdsn = 0;
	uint32_t exp_statsn = 0;

	bool operator==(const TextReq &) const = default;
};

struct DataOut { // 11.7
	bool final = false;
	uint64_t lun = 0;
	uint32_t itt = 0;
	uint32_t ttt = kReservedTag; // the R2T's TTT, 0xffffffff for unsolicited data
	uint32_t exp_statsn = 0;
	uint32_t datasn = 0;
	uint32_t buffer_offset = 0;

	bool operator==(const DataOut &) const = default;
};

struct LogoutReq { // 11.14
	bool immediate = false;
	uint8_t reason = 0; // reason code (7 bits)
	uint32_t itt = 0;
	uint16_t cid = 0;
	uint32_t cmdsn = 0;
	uint32_t exp_statsn = 0;

	bool operator==(const LogoutReq &) const = default;
};

struct SnackReq {         // 11.16
	uint8_t type = 0; // 4 bits
	uint64_t lun = 0;
	uint32_t itt = 0;
	uint32_t ttt = kReservedTag;
	uint32_t exp_statsn = 0;
	uint32_t begrun = 0;
	uint32_t runlength = 0;

	bool operator==(const SnackReq &) const = default;
};

struct NopIn { // 11.19
	uint64_t lun = 0;
	uint32_t itt = kReservedTag;
	uint32_t ttt = kReservedTag;
	uint32_t statsn = 0;
	uint32_t exp_cmdsn = 0;
	uint32_t max_cmdsn = 0;

	bool operator==(const NopIn &) const = default;
};

struct ScsiRsp {                     // 11.4
	bool bidi_overflow = false;  // o
	bool bidi_underflow = false; // u
	bool overflow = false;       // O
	bool underflow = false;      // U
	uint8_t response = 0;
	uint8_t status = 0;
	uint32_t itt = 0;
	uint32_t snack_tag = 0;
	uint32_t statsn = 0;
	uint32_t exp_cmdsn = 0;
	uint32_t max_cmdsn = 0;
	uint32_t exp_datasn = 0;
	uint32_t bidi_residual = 0;
	uint32_t residual = 0;

	bool operator==(const ScsiRsp &) const = default;
};

struct TmfRsp { // 11.6
	uint8_t response = 0;
	uint32_t itt = 0;
	uint32_t statsn = 0;
	uint32_t exp_cmdsn = 0;
	uint32_t max_cmdsn = 0;

	bool operator==(const TmfRsp &) const = default;
};

struct LoginRsp { // 11.13
	bool transit = false;
	bool cont = false;
	Stage csg = Stage::Security;
	Stage nsg = Stage::Security;
	uint8_t version_max = kIscsiVersion;
	uint8_t version_active = kIscsiVersion;
	Isid isid{};
	uint16_t tsih = 0;
	uint32_t itt = 0;
	uint32_t statsn = 0;
	uint32_t exp_cmdsn = 0;
	uint32_t max_cmdsn = 0;
	LoginStatus status = LoginStatus::Success; // Status-Class and Status-Detail

	bool operator==(const LoginRsp &) const = default;
};

struct TextRsp { // 11.11
	bool final = true;
	bool cont = false;
	uint64_t lun = 0;
	uint32_t itt = 0;
	uint32_t ttt = kReservedTag;
	uint32_t statsn = 0;
	uint32_t exp_cmdsn = 0;
	uint32_t max_cmdsn = 0;

	bool operator==(const TextRsp &) const = default;
};

struct DataIn { // 11.7
	bool final = false;
	bool ack = false;        // A: DataACK SNACK requested (ERL > 0)
	bool overflow = false;   // O (with S)
	bool underflow = false;  // U (with S)
	bool has_status = false; // S: status in this PDU
	uint8_t status = 0;
	uint64_t lun = 0;
	uint32_t itt = 0;
	uint32_t ttt = kReservedTag;
	uint32_t statsn = 0;
	uint32_t exp_cmdsn = 0;
	uint32_t max_cmdsn = 0;
	uint32_t datasn = 0;
	uint32_t buffer_offset = 0;
	uint32_t residual = 0;

	bool operator==(const DataIn &) const = default;
};

struct LogoutRsp { // 11.15
	uint8_t response = 0;
	uint32_t itt = 0;
	uint32_t statsn = 0;
	uint32_t exp_cmdsn = 0;
	uint32_t max_cmdsn = 0;
	uint16_t time2wait = 0;   // seconds
	uint16_t time2retain = 0; // seconds

	bool operator==(const LogoutRsp &) const = default;
};

struct R2t { // 11.8
	uint64_t lun = 0;
	uint32_t itt = 0;
	uint32_t ttt = 0;
	uint32_t statsn = 0;
	uint32_t exp_cmdsn = 0;
	uint32_t max_cmdsn = 0;
	uint32_t r2tsn = 0;
	uint32_t buffer_offset = 0;
	uint32_t desired_len = 0; // Desired Data Transfer Length

	bool operator==(const R2t &) const = default;
};

struct AsyncMsg { // 11.9
	uint64_t lun = 0;
	uint32_t statsn = 0;
	uint32_t exp_cmdsn = 0;
	uint32_t max_cmdsn = 0;
	uint8_t event = 0;
	uint8_t vcode = 0;
	uint16_t param1 = 0;
	uint16_t param2 = 0;
	uint16_t param3 = 0;

	bool operator==(const AsyncMsg &) const = default;
};

struct RejectPdu { // 11.17; the data segment carries the rejected PDU's header
	RejectReason reason = RejectReason::ProtocolError;
	uint32_t statsn = 0;
	uint32_t exp_cmdsn = 0;
	uint32_t max_cmdsn = 0;
	uint32_t datasn = 0; // DataSN/R2TSN or reserved

	bool operator==(const RejectPdu &) const = default;
};

// encode(): zero the BHS and write the header's fields (lengths stay 0 for build_*).
using BhsOut = std::span<uint8_t, kBhsLen>;
void encode(const NopOut &h, BhsOut b);
void encode(const ScsiCmd &h, BhsOut b);
void encode(const TmfReq &h, BhsOut b);
void encode(const LoginReq &h, BhsOut b);
void encode(const TextReq &h, BhsOut b);
void encode(const DataOut &h, BhsOut b);
void encode(const LogoutReq &h, BhsOut b);
void encode(const SnackReq &h, BhsOut b);
void encode(const NopIn &h, BhsOut b);
void encode(const ScsiRsp &h, BhsOut b);
void encode(const TmfRsp &h, BhsOut b);
void encode(const LoginRsp &h, BhsOut b);
void encode(const TextRsp &h, BhsOut b);
void encode(const DataIn &h, BhsOut b);
void encode(const LogoutRsp &h, BhsOut b);
void encode(const R2t &h, BhsOut b);
void encode(const AsyncMsg &h, BhsOut b);
void encode(const RejectPdu &h, BhsOut b);

// decode(): false if the BHS's opcode is not the header's (nothing else is refused:
// reserved fields are ignored, as RFC 7143 11.2 asks of receivers). Stage fields holding
// the reserved value 2 decode as 2; callers check them.
using BhsIn = std::span<const uint8_t>;
bool decode(BhsIn b, NopOut *h);
bool decode(BhsIn b, ScsiCmd *h);
bool decode(BhsIn b, TmfReq *h);
bool decode(BhsIn b, LoginReq *h);
bool decode(BhsIn b, TextReq *h);
bool decode(BhsIn b, DataOut *h);
bool decode(BhsIn b, LogoutReq *h);
bool decode(BhsIn b, SnackReq *h);
bool decode(BhsIn b, NopIn *h);
bool decode(BhsIn b, ScsiRsp *h);
bool decode(BhsIn b, TmfRsp *h);
bool decode(BhsIn b, LoginRsp *h);
bool decode(BhsIn b, TextRsp *h);
bool decode(BhsIn b, DataIn *h);
bool decode(BhsIn b, LogoutRsp *h);
bool decode(BhsIn b, R2t *h);
bool decode(BhsIn b, AsyncMsg *h);
bool decode(BhsIn b, RejectPdu *h);

// ---------------------------------------------------------------------------------------------
// Streaming reader for byte-stream transports (TCP)

enum class ReadStatus : uint8_t {
	NeedMore, // the PDU is not complete yet: read more bytes
	Pdu,      // a PDU is complete (error None, or the non-fatal BadAhs / DataDigest)
	Error,    // a fatal error (error says which): no more PDUs from this stream
};

struct ReadResult {
	ReadStatus status = ReadStatus::NeedMore;
	PduError error = PduError::None;
};

// Cuts a byte stream into PDUs. Incremental: hand it bytes as they arrive, in any pieces.
// It owns one buffer sized at construction for the largest PDU it accepts, so reading
// allocates nothing. It never takes more bytes than the current PDU needs, so the bytes of
// the next PDU stay with the caller (feed) or in the socket (want/commit).
//
// The header is checked as soon as the BHS (and header digest) is in: TotalAHSLength
// against kMaxAhsLen, DataSegmentLength against the negotiated MaxRecvDataSegmentLength
// and the hard cap, before the data is buffered.
class PduReader
{
public:
	// hard_cap: the largest DataSegmentLength ever accepted, whatever is negotiated
	// (bounds the buffer: kBhsLen + kMaxAhsLen + 8 + pad4(hard_cap) bytes).
	explicit PduReader(uint32_t hard_cap = kMaxDsl);

	// Our MaxRecvDataSegmentLength: 8192 during login; the declared value afterwards (the
	// login result's ConnParams). Takes effect for the next PDU header.
	void set_max_recv_dsl(uint32_t v) { max_recv_dsl_ = v; }
	// Digests: none during login; the negotiated ones from the first FFP PDU on.
	void set_digests(Digests d) { digests_ = d; }
	uint32_t max_recv_dsl() const { return max_recv_dsl_; }

	// Zero-copy: the place for the next bytes of the stream (at most what the current PDU
	// still needs; empty after a fatal error). Read into it, then commit() what arrived.
	std::span<uint8_t> want();
	// n bytes (<= want().size()) were written into want(). On Pdu, *out views the reader's
	// buffer until the next want()/commit()/feed().
	ReadResult commit(size_t n, Pdu *out);

	// Copying: consume bytes from in (stops after one complete PDU); *used says how many.
	ReadResult feed(std::span<const uint8_t> in, size_t *used, Pdu *out);

	// The fatal error that stopped the stream, or None.
	PduError error() const { return fatal_; }
	// BHS of the PDU being read (valid once 48 bytes are in): for a Reject after DataTooLong.
	std::span<const uint8_t> current_bhs() const;

private:
	// Bhs -> HeaderRest (AHS, header digest) -> Data (data, padding, data digest) -> Bhs;
	// any phase -> Stopped on a fatal error.
	enum class Phase : uint8_t { Bhs, HeaderRest, Data, Stopped };

	ReadResult advance(Pdu *out);
	ReadResult stop(PduError e);

	std::vector<uint8_t> buf_; // kBhsLen + AHS + digests + padded data, max size
	uint32_t hard_cap_;        // largest DataSegmentLength accepted
	uint32_t max_recv_dsl_ = kDefaultMrdsl;
	Digests digests_;     // for the next header
	Digests cur_digests_; // digests of the PDU being read
	Phase phase_ = Phase::Bhs;
	size_t have_ = 0;       // bytes of the current PDU in buf_
	size_t need_ = kBhsLen; // bytes needed for the current phase
	size_t ahs_len_ = 0;    // current PDU's AHS bytes
	uint32_t dsl_ = 0;      // current PDU's DataSegmentLength
	PduError fatal_ = PduError::None;
};

// The receive loop of a byte-stream connection: cut in into PDUs with reader and call
// on_pdu(pdu, error) for each (error None, or the non-fatal BadAhs / DataDigest; pdu views
// the reader's buffer during the call only). on_pdu returns false to stop: the connection
// closed under it, and the rest of in is not read. A limit or digests set on reader from
// on_pdu (the login switched them) apply from the next PDU header on. Returns the fatal
// error that stopped the stream (the reader takes nothing more), or None; *used, when
// given, says how many bytes of in were taken. A template: the per-PDU call on the receive
// path stays a direct one.
template <typename OnPdu>
PduError feed_pdus(PduReader &reader, std::span<const uint8_t> in, OnPdu &&on_pdu,
                   size_t *used = nullptr)
{
	size_t off = 0;
	PduError fatal = PduError::None;
	while (off < in.size()) {
		size_t n = 0;
		Pdu pdu;
		ReadResult r = reader.feed(in.subspan(off), &n, &pdu);
		off += n;
		if (r.status == ReadStatus::Error) {
			fatal = r.error;
			break;
		}
		if (r.status == ReadStatus::Pdu && !on_pdu(pdu, r.error))
			break;
	}
	if (used)
		*used = off;
	return fatal;
}

} // namespace ulp::iscsi
