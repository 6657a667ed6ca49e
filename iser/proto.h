// SPDX-License-Identifier: MIT
// iser/proto.h - the iSER wire formats (RFC 7145): the 28-byte iSER header that
// precedes every iSCSI PDU carried by a SEND, and the private data of the RDMA/CM
// connection request and accept (Linux's struct iser_cm_hdr).
//
// iSER header (RFC 7145 9.2; Linux drivers/infiniband/ulp/iser/iscsi_iser.h struct
// iser_ctrl), all fields big-endian:
//
//	 0      flags: opcode in the high nibble (1 iSCSI control-type PDU, 2 Hello,
//	        3 HelloReply), 0x08 W (write STag valid), 0x04 R (read STag valid)
//	 1..3   reserved
//	 4..7   write STag: the initiator's buffer holding SCSI WRITE data (RDMA READ it)
//	 8..15  write base VA (Linux advances it past the unsolicited data already sent)
//	16..19  read STag: the initiator's buffer for SCSI READ data (RDMA WRITE it)
//	20..27  read base VA
//
// Hello / HelloReply (ISER-Hello) are for iSER-assisted login, which Linux never uses; a
// target answers them with nothing but a disconnect (RFC 7145 allows refusing them).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace ulp::iser
{

constexpr size_t kIserHdrLen = 28;

// The high nibble of the flags byte.
enum class IserOpcode : uint8_t {
	Control = 0x1,    // an iSCSI control-type PDU follows
	Hello = 0x2,      // iSER Hello (RFC 7145 9.3)
	HelloReply = 0x3, // iSER HelloReply
};

enum : uint8_t {
	ISER_WSV = 0x08, // write STag and VA valid
	ISER_RSV = 0x04, // read STag and VA valid
};

struct IserHdr {
	IserOpcode opcode = IserOpcode::Control;
	bool wsv = false; // write_stag / write_va valid
	bool rsv = false; // read_stag / read_va valid
	uint32_t write_stag = 0;
	uint64_t write_va = 0;
	uint32_t read_stag = 0;
	uint64_t read_va = 0;

	bool operator==(const IserHdr &) const = default;
};

// Why a received iSER header is refused (the connection is then dropped: RFC 7145's error
// handling - an iSER-level protocol error cannot be answered with an iSCSI Reject).
enum class IserError : uint8_t {
	None,
	Short,        // fewer than 28 bytes
	BadOpcode,    // not Control, Hello or HelloReply
	StagsOnHello, // Hello / HelloReply with W or R set
};
const char *iser_error_name(IserError e);

// Parse the header at the start of buf. Reserved bits and bytes are ignored (receivers
// ignore reserved fields: RFC 7145 9.2).
IserError parse_iser_hdr(std::span<const uint8_t> buf, IserHdr *out);
// Write h into out[0..28).
void build_iser_hdr(const IserHdr &h, std::span<uint8_t, kIserHdrLen> out);

} // namespace ulp::iser
namespace ulp::iscsi
{
struct Pdu;
enum class PduError : uint8_t;
} // namespace ulp::iscsi
namespace ulp::iser
{
using iscsi::Pdu;
using iscsi::PduError;
// One received iSER message, as both ends take it: the iSER header, then an iSCSI PDU
// that may end right after its data segment (RFC 7145 7.3: no padding). false with *why
// on a bad iSER header, on an iSER Hello (RFC 7145 9.3: iSER-assisted login, which
// neither end offers) and on a PDU error that ends the connection; *pe then holds a PDU
// error the iSCSI layer answers (a Reject), or PduError::None.
bool parse_iser_message(std::span<const uint8_t> in, uint32_t max_recv_dsl, IserHdr *ih, Pdu *pdu,
                        PduError *pe, std::string *why);

// RDMA/CM private data: struct iser_cm_hdr { u8 flags; u8 rsvd[3]; } (Linux
// drivers/infiniband/ulp/iser/iscsi_iser.h, isert). In the request the initiator says what
// it cannot do; in the accept the target says what it will not use.
constexpr size_t kIserCmHdrLen = 4;
enum : uint8_t {
	ISER_ZBVA_NOT_SUP = 0x80,       // request: no zero-based VAs; accept: ZBVA not used
	ISER_SEND_W_INV_NOT_SUP = 0x40, // request: do not SEND_WITH_INV; accept: not used
};

struct IserCmHdr {
	uint8_t flags = 0;
};

// false when buf is shorter than 4 bytes (an initiator that sends no private data is
// treated as Linux's default by the caller).
bool parse_iser_cm_hdr(std::span<const uint8_t> buf, IserCmHdr *out);
void build_iser_cm_hdr(const IserCmHdr &h, std::span<uint8_t, kIserCmHdrLen> out);

} // namespace ulp::iser
