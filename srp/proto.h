// SPDX-License-Identifier: MIT
// srp/proto.h - the SCSI RDMA Protocol's information units (T10 SRP r16a, and SRP-2's
// immediate data), as Linux's include/scsi/srp.h lays them out: parsers that check every
// length and field a peer sends, and builders for what we send. Both ends use them (the
// target in srp/target/, the initiator in srp/initiator/, the fuzzers); nothing here
// allocates or touches the network.
//
// Byte layouts (offsets in bytes; multi-byte fields big-endian unless said; "tag" is the
// initiator's opaque 8 bytes, echoed as they came):
//   srp_login_req      64: opcode 0, tag 8, req_it_iu_len 16, req_buf_fmt 24, req_flags 26,
//                          imm_data_offset 28, initiator_port_id 32 (16), target_port_id 48
//   srp_login_req_rdma 56: tag 0, req_buf_fmt 8, req_flags 10, opcode 11, req_it_iu_len 12,
//                          initiator_port_id 16, target_port_id 32, imm_data_offset 48
//                          (RDMA/CM over IB carries 56 bytes of private data)
//   srp_login_rsp      52: opcode 0, req_lim_delta 4, tag 8, max_it_iu_len 16,
//                          max_ti_iu_len 20, buf_fmt 24, rsp_flags 26
//   srp_login_rej      32: opcode 0, reason 4, tag 8, buf_fmt 24
//   srp_i_logout       16: opcode 0, tag 8
//   srp_t_logout       16: opcode 0, sol_not 1, reason 4, tag 8
//   srp_tsk_mgmt       48: opcode 0, sol_not 1, tag 8, lun 20 (8), tsk_mgmt_func 30,
//                          task_tag 32
//   srp_cmd            48+: opcode 0, sol_not 1, buf_fmt 5 (data-out format in the high
//                          nibble, data-in in the low), data_out_desc_cnt 6,
//                          data_in_desc_cnt 7, tag 8, lun 20 (8), task_attr 29,
//                          add_cdb_len 31 (bytes in bits 7..2, the low two bits reserved:
//                          "& ~3"), cdb 32 (16), additional CDB bytes and then the
//                          descriptors at 48
//   srp_rsp            36+: opcode 0, sol_not 1, req_lim_delta 4, tag 8, flags 18,
//                          status 19, data_out_res_cnt 20, data_in_res_cnt 24,
//                          sense_data_len 28, resp_data_len 32; response data, then sense
//   srp_cred_req       16: opcode 0, sol_not 1, req_lim_delta 4, tag 8
//   srp_cred_rsp       16: opcode 0, tag 8
//   srp_aer_req        36+: opcode 0, sol_not 1, req_lim_delta 4, tag 8, lun 20,
//                          sense_data_len 28; sense at 36
//   srp_aer_rsp        16: opcode 0, tag 8
//   direct descriptor  16: va 0 (8), key 8, len 12
//   indirect header    20: table descriptor 0 (16: where the whole table is), total len 16;
//                          the partial list follows at 20 (4-byte aligned only)
//   immediate header    4: len 0; the data at the login's imm_data_offset
// (SRP_CMD's LUN is at 20: srp.h has reserved2[4] at 16, and Linux sends the LUN at 20.)
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

namespace ulp::srp
{

// ---- Constants (SRP r16a's information unit tables, Linux srp.h) ---------------------------

enum Opcode : uint8_t {
	LOGIN_REQ = 0x00,
	TSK_MGMT = 0x01,
	CMD = 0x02,
	I_LOGOUT = 0x03,
	LOGIN_RSP = 0xc0,
	RSP = 0xc1,
	LOGIN_REJ = 0xc2,
	T_LOGOUT = 0x80,
	CRED_REQ = 0x81,
	AER_REQ = 0x82,
	CRED_RSP = 0x41,
	AER_RSP = 0x42,
};

// Buffer formats a login asks for / grants (req_buf_fmt, buf_fmt).
enum : uint16_t {
	BUF_FMT_DIRECT = 1u << 1,
	BUF_FMT_INDIRECT = 1u << 2,
};

// A data buffer descriptor format (SRP_CMD buf_fmt nibbles).
enum class DescFmt : uint8_t { None = 0, Direct = 1, Indirect = 2, Immediate = 3 };

// req_flags of a login request.
enum : uint8_t {
	MULTICHAN_SINGLE = 0, // the low two bits: terminate the nexus's other channels
	MULTICHAN_MULTI = 1,  // add a channel to the nexus
	IMMED_REQUESTED = 0x80,
};

// rsp_flags of a login response.
enum : uint8_t {
	LOGIN_RSP_NO_CHAN = 0x0,    // no other channel existed
	LOGIN_RSP_TERMINATED = 0x1, // the nexus's other channels were terminated
	LOGIN_RSP_MAINTAINED = 0x2, // they were kept (MULTI)
	LOGIN_RSP_IMMED_SUPP = 0x80,
};

// Login reject reasons (SRP r16a table 8).
enum RejReason : uint32_t {
	REJ_UNABLE_ESTABLISH_CHANNEL = 0x00010000,
	REJ_INSUFFICIENT_RESOURCES = 0x00010001,
	REJ_IT_IU_LEN_TOO_LARGE = 0x00010002,
	REJ_UNABLE_ASSOCIATE_CHANNEL = 0x00010003,
	REJ_UNSUPPORTED_DESC_FMT = 0x00010004,
	REJ_MULTI_CHANNEL_UNSUPPORTED = 0x00010005,
	REJ_CHANNEL_LIMIT_REACHED = 0x00010006,
};

// Task management functions (SRP_TSK_MGMT tsk_mgmt_func).
enum TmFunc : uint8_t {
	TSK_ABORT_TASK = 0x01,
	TSK_ABORT_TASK_SET = 0x02,
	TSK_CLEAR_TASK_SET = 0x04,
	TSK_LUN_RESET = 0x08,
	TSK_CLEAR_ACA = 0x40,
};

// SRP_RSP flags.
enum : uint8_t {
	RSP_RSPVALID = 1u << 0,
	RSP_SNSVALID = 1u << 1,
	RSP_DOOVER = 1u << 2,
	RSP_DOUNDER = 1u << 3,
	RSP_DIOVER = 1u << 4,
	RSP_DIUNDER = 1u << 5,
};

// Task management response codes (RSP_CODE in the response data: SAM-5 / SRP r16a
// 6.9 table 24).
enum TmRspCode : uint8_t {
	TM_COMPLETE = 0x00,
	TM_INVALID_IU = 0x02,
	TM_NOT_SUPPORTED = 0x04,
	TM_FAILED = 0x05,
	TM_SUCCEEDED = 0x08,
	TM_INCORRECT_LUN = 0x09,
};

// task_attr of SRP_CMD.
enum TaskAttr : uint8_t { ATTR_SIMPLE = 0, ATTR_HEAD = 1, ATTR_ORDERED = 2, ATTR_ACA = 4 };

constexpr size_t kLoginReqLen = 64;
constexpr size_t kLoginReqRdmaLen = 56;
constexpr size_t kLoginRspLen = 52;
constexpr size_t kLoginRejLen = 32;
constexpr size_t kLogoutLen = 16; // I_LOGOUT and T_LOGOUT
constexpr size_t kTskMgmtLen = 48;
constexpr size_t kCmdLen = 48; // SRP_CMD's fixed part: the descriptors start here
constexpr size_t kRspLen = 36; // SRP_RSP's fixed part
constexpr size_t kCredReqLen = 16;
constexpr size_t kCredRspLen = 16;
constexpr size_t kAerReqLen = 36;
constexpr size_t kAerRspLen = 16;
constexpr size_t kDescLen = 16; // a direct descriptor
constexpr size_t kIndirectHdrLen = 20;
constexpr size_t kImmHdrLen = 4;
constexpr size_t kMinIuLen = 64;        // the smallest it_iu_len a login may ask for (ib_srpt's)
constexpr size_t kMaxCdbLen = 16 + 252; // CDB + the most additional CDB bytes (63 words)

// The IU's opcode (the first byte), or -1 for an empty buffer.
int iu_opcode(std::span<const uint8_t> iu);

// ---- Login ---------------------------------------------------------------------------------

struct LoginReq {
	uint64_t tag = 0;             // opaque, as received
	uint32_t req_it_iu_len = 0;   // the largest initiator-to-target IU it will send
	uint16_t req_buf_fmt = 0;     // BUF_FMT_* it can send
	uint8_t req_flags = 0;        // MULTICHAN_* in bits 0..1, IMMED_REQUESTED
	uint16_t imm_data_offset = 0; // where immediate data starts in SRP_CMD (SRP-2)
	std::array<uint8_t, 16> initiator_port_id{};
	std::array<uint8_t, 16> target_port_id{};

	uint8_t multichan() const { return req_flags & 3; }
	bool immediate() const { return req_flags & IMMED_REQUESTED; }
};

// Why a login request could not be parsed.
enum class LoginError : uint8_t { None, Short, BadOpcode };
const char *login_error_name(LoginError e);

// The RDMA/CM form (56 bytes: ib_srp over RDMA/CM) or the IB CM form (64 bytes), told apart
// by length: at least 64 bytes with opcode LOGIN_REQ at byte 0 is the IB form; at least 56
// is the RDMA/CM form (its opcode byte is at 11). Extra trailing bytes are ignored (RDMA/CM
// over IB pads private data to the REQ's size).
LoginError parse_login_req(std::span<const uint8_t> pd, LoginReq *out);
// The 56-byte RDMA/CM form (our initiator's).
void build_login_req_rdma(const LoginReq &r, std::span<uint8_t, kLoginReqRdmaLen> out);

struct LoginRsp {
	uint32_t req_lim_delta = 0; // credits granted
	uint64_t tag = 0;
	uint32_t max_it_iu_len = 0;
	uint32_t max_ti_iu_len = 0;
	uint16_t buf_fmt = 0;
	uint8_t rsp_flags = 0;
};
void build_login_rsp(const LoginRsp &r, std::span<uint8_t, kLoginRspLen> out);
// false when shorter than 52 bytes or not LOGIN_RSP.
bool parse_login_rsp(std::span<const uint8_t> pd, LoginRsp *out);

struct LoginRej {
	uint32_t reason = REJ_UNABLE_ESTABLISH_CHANNEL;
	uint64_t tag = 0;
	uint16_t buf_fmt = 0;
};
void build_login_rej(const LoginRej &r, std::span<uint8_t, kLoginRejLen> out);
bool parse_login_rej(std::span<const uint8_t> pd, LoginRej *out);
const char *rej_reason_name(uint32_t reason); // "IU length too large", ...

// ---- Commands --------------------------------------------------------------------------------

// One remote buffer (a direct descriptor).
struct DirectDesc {
	uint64_t va = 0;
	uint32_t key = 0;
	uint32_t len = 0;
};

struct Cmd {
	uint64_t tag = 0;
	uint64_t lun_raw = 0; // the 8 LUN bytes, as a big-endian number
	uint8_t lun[8] = {};  // and as sent
	uint8_t task_attr = ATTR_SIMPLE;
	uint8_t sol_not = 0;
	std::span<const uint8_t> cdb;    // 16 bytes + the additional CDB bytes, inside the IU
	DescFmt out_fmt = DescFmt::None; // data-out (write) descriptor format
	DescFmt in_fmt = DescFmt::None;  // data-in (read) descriptor format
	bool write() const { return out_fmt != DescFmt::None; }
	bool read() const { return in_fmt != DescFmt::None; }
	uint32_t data_len = 0; // the total data length the descriptors describe
	// Direct: descs holds one descriptor. Indirect: descs is the partial list inside the
	// IU (its entries, possibly fewer than the table: then table is where to RDMA READ
	// the whole list from, table_entries its length). Immediate: imm is the data.
	std::span<const uint8_t> descs; // kDescLen bytes per entry, inside the IU
	uint32_t ndescs = 0;            // entries in descs
	DirectDesc table;               // indirect: the whole table's descriptor
	uint32_t table_entries = 0;     // indirect: table.len / 16
	bool table_external() const { return table_entries > ndescs; }
	std::span<const uint8_t> imm; // immediate: the data, inside the IU
};

// Why an SRP_CMD is refused (the target answers CHECK CONDITION or drops the channel).
enum class CmdError : uint8_t {
	None,
	Short,          // shorter than its fixed part, its CDB or its descriptors say
	BadOpcode,      // not SRP_CMD
	BothDirections, // data-out and data-in at once (bidirectional: not supported)
	BadFormat,      // a reserved descriptor format, or immediate data-in
	NoImmediate,    // immediate data, which the login did not grant
	BadDescCount,   // direct with a count above 1 (0 and 1 are both sent), an indirect
	                // table whose length is not whole descriptors, or a partial list
	                // longer than its table
	BadImmediate,   // immediate data outside the IU, or overlapping its header
	TableTooLarge,  // an indirect table beyond max_table_entries
	LengthMismatch, // an indirect table all inline whose entries' lengths do not add up
	                // to its total length
};
const char *cmd_error_name(CmdError e);

struct CmdParseOpts {
	uint16_t imm_data_offset = 0;      // granted at login; 0: no immediate data granted
	uint32_t max_table_entries = 4096; // the largest indirect table accepted (ib_srp's
	                                   // indirect_sg_entries go to 2048)
};
// Parse SRP_CMD in iu (the received bytes). Spans in *out point into iu. On an error past
// the fixed 48 bytes, *out still holds the tag, LUN, sol_not and task_attr (to answer with).
CmdError parse_cmd(std::span<const uint8_t> iu, const CmdParseOpts &o, Cmd *out);
// Entry i of a descriptor list (kDescLen bytes each; a list inside the IU or fetched); a
// zero descriptor when i is past the list.
DirectDesc desc_at(std::span<const uint8_t> list, uint32_t i);
// Check a fetched (or inline) list of n entries: false when list holds fewer, or when an
// entry has length zero. The sum of the entries' lengths into *sum (64-bit: no overflow;
// 0 when the list is short), for the caller to compare with Cmd::data_len.
bool check_desc_list(std::span<const uint8_t> list, uint32_t n, uint64_t *sum);

// The initiator side: an SRP_CMD of fixed part + CDB (up to 16 + 252 bytes) + descriptors.
struct CmdOut {
	uint64_t tag = 0;
	const uint8_t *lun = nullptr; // 8 bytes
	uint8_t task_attr = ATTR_SIMPLE;
	std::span<const uint8_t> cdb;
	DescFmt out_fmt = DescFmt::None;
	DescFmt in_fmt = DescFmt::None;
	std::span<const DirectDesc> descs; // direct (1) or the partial list of an indirect one
	DirectDesc table;                  // indirect: where the whole table is
	uint32_t table_entries = 0;        // indirect: entries of the whole table
	uint32_t total_len = 0;            // indirect / immediate: the data length
	uint16_t imm_data_offset = 0;      // immediate: where the data goes
	std::span<const uint8_t> imm;      // immediate: the data
};
// Bytes written (0 if out is too small).
size_t build_cmd(const CmdOut &c, std::span<uint8_t> out);
void put_desc(const DirectDesc &d, uint8_t *p);

// ---- Responses -------------------------------------------------------------------------------

struct Rsp {
	uint64_t tag = 0;
	uint32_t req_lim_delta = 0;
	uint8_t sol_not = 0;
	uint8_t flags = 0; // RSP_*
	uint8_t status = 0;
	uint32_t data_out_res_cnt = 0;
	uint32_t data_in_res_cnt = 0;
	std::span<const uint8_t> resp_data; // task management: 4 bytes, RSP_CODE at [3]
	std::span<const uint8_t> sense;
};
// Bytes written (0 if out is too small for the response data and sense).
size_t build_rsp(const Rsp &r, std::span<uint8_t> out);
// false when short, not SRP_RSP, or its lengths run past the IU.
bool parse_rsp(std::span<const uint8_t> iu, Rsp *out);

struct TskMgmt {
	uint64_t tag = 0;
	uint8_t lun[8] = {};
	uint8_t func = 0;
	uint64_t task_tag = 0;
	uint8_t sol_not = 0;
};
bool parse_tsk_mgmt(std::span<const uint8_t> iu, TskMgmt *out);
size_t build_tsk_mgmt(const TskMgmt &t, std::span<uint8_t> out); // kTskMgmtLen or 0

// CRED_REQ / AER_REQ (target to initiator) and CRED_RSP / AER_RSP, I_LOGOUT, T_LOGOUT.
struct CredReq {
	uint64_t tag = 0;
	uint32_t req_lim_delta = 0;
	uint8_t sol_not = 0;
};
size_t build_cred_req(const CredReq &c, std::span<uint8_t> out);
bool parse_cred_req(std::span<const uint8_t> iu, CredReq *out);
struct AerReq {
	uint64_t tag = 0;
	uint32_t req_lim_delta = 0;
	uint8_t lun[8] = {};
	std::span<const uint8_t> sense;
};
bool parse_aer_req(std::span<const uint8_t> iu, AerReq *out);
// CRED_RSP, AER_RSP and I_LOGOUT are an opcode and a tag.
size_t build_tag_iu(uint8_t opcode, uint64_t tag, std::span<uint8_t> out); // 16 or 0
bool parse_tag_iu(std::span<const uint8_t> iu, uint8_t opcode, uint64_t *tag);
struct TLogout {
	uint64_t tag = 0;
	uint32_t reason = 0;
};
size_t build_t_logout(const TLogout &t, std::span<uint8_t> out);
bool parse_t_logout(std::span<const uint8_t> iu, TLogout *out);

// The target port id's two halves as Linux's add_target names them: id_ext (bytes 0..7)
// and ioc_guid (bytes 8..15), each big-endian.
std::array<uint8_t, 16> make_port_id(uint64_t hi, uint64_t lo);
uint64_t port_id_hi(const std::array<uint8_t, 16> &id);
uint64_t port_id_lo(const std::array<uint8_t, 16> &id);

} // namespace ulp::srp
