// SPDX-License-Identifier: MIT
// srp/proto.cc - the SRP information units (see srp/proto.h for the byte layouts).
//
// Every parser compares each length it is about to use with the buffer it was given,
// before reading, and does its arithmetic in 64 bits: the lengths are the peer's 32-bit
// fields, and offset + length in 32 bits is how SRP-2's immediate data overflowed in a
// kernel target. Builders check the output span and return 0 when the IU does not fit.
// Tags are the initiator's opaque 8 bytes: Linux's ib_srp stores a host-order u64 and
// the target echoes the bytes, so they are copied, never byte-swapped.
#include "srp/proto.h"

#include "core/byteorder.h"

#include <cstring>

namespace ulp::srp
{

namespace
{

uint64_t get_tag(const uint8_t *p)
{
	uint64_t tag;
	std::memcpy(&tag, p, sizeof(tag));
	return tag;
}

void put_tag(uint8_t *p, uint64_t tag)
{
	std::memcpy(p, &tag, sizeof(tag));
}

// Does [off, off + len) lie inside a buffer of size bytes? 64-bit: off and len are the
// peer's 32-bit fields (or sums of them) and must not wrap.
bool fits(uint64_t off, uint64_t len, size_t size)
{
	return off <= size && len <= size - off;
}

DirectDesc get_desc(const uint8_t *p)
{
	DirectDesc d;
	d.va = get_be64(p);
	d.key = get_be32(p + 8);
	d.len = get_be32(p + 12);
	return d;
}

} // namespace

int iu_opcode(std::span<const uint8_t> iu)
{
	return iu.empty() ? -1 : iu[0];
}

// ---- Login ---------------------------------------------------------------------------------

const char *login_error_name(LoginError e)
{
	switch (e) {
	case LoginError::None:
		return "none";
	case LoginError::Short:
		return "login request too short";
	case LoginError::BadOpcode:
		return "not SRP_LOGIN_REQ";
	}
	return "?";
}

LoginError parse_login_req(std::span<const uint8_t> pd, LoginReq *out)
{
	const uint8_t *p = pd.data();
	LoginReq r;
	if (pd.size() >= kLoginReqLen && p[0] == LOGIN_REQ) {
		// struct srp_login_req (SRP r16a SRP_LOGIN_REQ; imm_data_offset from SRP-2):
		// IB CM private data, the opcode first.
		r.tag = get_tag(p + 8);
		r.req_it_iu_len = get_be32(p + 16);
		r.req_buf_fmt = get_be16(p + 24);
		r.req_flags = p[26];
		r.imm_data_offset = get_be16(p + 28);
		std::memcpy(r.initiator_port_id.data(), p + 32, 16);
		std::memcpy(r.target_port_id.data(), p + 48, 16);
	} else if (pd.size() >= kLoginReqRdmaLen && p[11] == LOGIN_REQ) {
		// struct srp_login_req_rdma: RDMA/CM leaves 56 bytes of the REQ's private
		// data, so Linux reorders the fields and drops the reserved ones.
		r.tag = get_tag(p);
		r.req_buf_fmt = get_be16(p + 8);
		r.req_flags = p[10];
		r.req_it_iu_len = get_be32(p + 12);
		std::memcpy(r.initiator_port_id.data(), p + 16, 16);
		std::memcpy(r.target_port_id.data(), p + 32, 16);
		r.imm_data_offset = get_be16(p + 48);
	} else {
		return pd.size() < kLoginReqRdmaLen ? LoginError::Short : LoginError::BadOpcode;
	}
	*out = r;
	return LoginError::None;
}

void build_login_req_rdma(const LoginReq &r, std::span<uint8_t, kLoginReqRdmaLen> out)
{
	uint8_t *p = out.data();
	std::memset(p, 0, kLoginReqRdmaLen);
	put_tag(p, r.tag);
	put_be16(p + 8, r.req_buf_fmt);
	p[10] = r.req_flags;
	p[11] = LOGIN_REQ;
	put_be32(p + 12, r.req_it_iu_len);
	std::memcpy(p + 16, r.initiator_port_id.data(), 16);
	std::memcpy(p + 32, r.target_port_id.data(), 16);
	put_be16(p + 48, r.imm_data_offset);
}

void build_login_rsp(const LoginRsp &r, std::span<uint8_t, kLoginRspLen> out)
{
	uint8_t *p = out.data();
	std::memset(p, 0, kLoginRspLen);
	p[0] = LOGIN_RSP;
	put_be32(p + 4, r.req_lim_delta);
	put_tag(p + 8, r.tag);
	put_be32(p + 16, r.max_it_iu_len);
	put_be32(p + 20, r.max_ti_iu_len);
	put_be16(p + 24, r.buf_fmt);
	p[26] = r.rsp_flags;
}

bool parse_login_rsp(std::span<const uint8_t> pd, LoginRsp *out)
{
	if (pd.size() < kLoginRspLen || pd[0] != LOGIN_RSP)
		return false;
	const uint8_t *p = pd.data();
	LoginRsp r;
	r.req_lim_delta = get_be32(p + 4);
	r.tag = get_tag(p + 8);
	r.max_it_iu_len = get_be32(p + 16);
	r.max_ti_iu_len = get_be32(p + 20);
	r.buf_fmt = get_be16(p + 24);
	r.rsp_flags = p[26];
	*out = r;
	return true;
}

void build_login_rej(const LoginRej &r, std::span<uint8_t, kLoginRejLen> out)
{
	uint8_t *p = out.data();
	std::memset(p, 0, kLoginRejLen);
	p[0] = LOGIN_REJ;
	put_be32(p + 4, r.reason);
	put_tag(p + 8, r.tag);
	put_be16(p + 24, r.buf_fmt);
}

bool parse_login_rej(std::span<const uint8_t> pd, LoginRej *out)
{
	if (pd.size() < kLoginRejLen || pd[0] != LOGIN_REJ)
		return false;
	const uint8_t *p = pd.data();
	LoginRej r;
	r.reason = get_be32(p + 4);
	r.tag = get_tag(p + 8);
	r.buf_fmt = get_be16(p + 24);
	*out = r;
	return true;
}

const char *rej_reason_name(uint32_t reason)
{
	// SRP r16a SRP_LOGIN_REJ, table 8.
	switch (reason) {
	case REJ_UNABLE_ESTABLISH_CHANNEL:
		return "unable to establish channel";
	case REJ_INSUFFICIENT_RESOURCES:
		return "insufficient resources";
	case REJ_IT_IU_LEN_TOO_LARGE:
		return "requested IU length too large";
	case REJ_UNABLE_ASSOCIATE_CHANNEL:
		return "unable to associate channel";
	case REJ_UNSUPPORTED_DESC_FMT:
		return "unsupported descriptor format";
	case REJ_MULTI_CHANNEL_UNSUPPORTED:
		return "multichannel unsupported";
	case REJ_CHANNEL_LIMIT_REACHED:
		return "channel limit reached";
	}
	return "unknown reason";
}

// ---- Commands --------------------------------------------------------------------------------

const char *cmd_error_name(CmdError e)
{
	switch (e) {
	case CmdError::None:
		return "none";
	case CmdError::Short:
		return "SRP_CMD shorter than its CDB or descriptors";
	case CmdError::BadOpcode:
		return "not SRP_CMD";
	case CmdError::BothDirections:
		return "data-out and data-in descriptors at once";
	case CmdError::BadFormat:
		return "reserved data descriptor format";
	case CmdError::NoImmediate:
		return "immediate data not granted at login";
	case CmdError::BadDescCount:
		return "bad descriptor count";
	case CmdError::BadImmediate:
		return "immediate data outside the IU";
	case CmdError::TableTooLarge:
		return "indirect descriptor table too large";
	case CmdError::LengthMismatch:
		return "descriptor lengths do not add up to the data length";
	}
	return "?";
}

DirectDesc desc_at(std::span<const uint8_t> list, uint32_t i)
{
	// Out of range is a caller's bug, but a zero descriptor is safer than a read past the
	// list: it describes no data.
	if (!fits(uint64_t{i} * kDescLen, kDescLen, list.size()))
		return {};
	return get_desc(list.data() + size_t{i} * kDescLen);
}

bool check_desc_list(std::span<const uint8_t> list, uint32_t n, uint64_t *sum)
{
	*sum = 0;
	if (uint64_t{n} * kDescLen > list.size())
		return false;
	// A zero-length descriptor describes no data; an initiator never sends one (ib_srp
	// makes one per mapped segment) and an RDMA transfer of nothing is not worth posting.
	// Sum them all first so that *sum is whole either way.
	bool ok = true;
	uint64_t s = 0;
	for (uint32_t i = 0; i < n; i++) {
		const uint32_t len = get_be32(list.data() + size_t{i} * kDescLen + 12);
		ok &= len != 0;
		s += len;
	}
	*sum = s;
	return ok;
}

namespace
{

// A direct data buffer descriptor (SRP r16a, SRP_CMD's data buffer descriptors): one
// descriptor right after the CDB.
CmdError parse_direct(std::span<const uint8_t> iu, size_t off, uint8_t cnt, Cmd *c)
{
	// A direct buffer's one descriptor is implied by its format; initiators write 0 or 1
	// in its count field. Anything more claims descriptors that are not there.
	if (cnt > 1)
		return CmdError::BadDescCount;
	if (!fits(off, kDescLen, iu.size()))
		return CmdError::Short;
	c->descs = iu.subspan(off, kDescLen);
	c->ndescs = 1;
	c->data_len = get_be32(iu.data() + off + 12);
	return CmdError::None;
}

// An indirect data buffer descriptor (SRP r16a): the table's descriptor, the total length,
// then the first cnt entries of the table (the partial list).
CmdError parse_indirect(std::span<const uint8_t> iu, size_t off, uint8_t cnt, const CmdParseOpts &o,
                        Cmd *c)
{
	if (!fits(off, kIndirectHdrLen, iu.size()))
		return CmdError::Short;
	const uint8_t *p = iu.data() + off;
	const DirectDesc table = get_desc(p);
	if (table.len % kDescLen)
		return CmdError::BadDescCount;
	const uint32_t entries = table.len / kDescLen;
	const uint64_t list_len = uint64_t{cnt} * kDescLen;
	if (!fits(off + kIndirectHdrLen, list_len, iu.size()))
		return CmdError::Short;
	if (cnt > entries)
		return CmdError::BadDescCount;
	if (entries > o.max_table_entries)
		return CmdError::TableTooLarge;
	c->table = table;
	c->table_entries = entries;
	c->descs = iu.subspan(off + kIndirectHdrLen, list_len);
	c->ndescs = cnt;
	c->data_len = get_be32(p + 16);
	// The whole table is here: its entries must describe exactly the data (a fetched
	// table is checked by the caller once it has it: check_desc_list).
	if (entries == cnt) {
		uint64_t sum = 0;
		for (uint32_t i = 0; i < cnt; i++)
			sum += get_be32(c->descs.data() + size_t{i} * kDescLen + 12);
		if (sum != c->data_len)
			return CmdError::LengthMismatch;
	}
	return CmdError::None;
}

// Immediate data (SRP-2; Linux's SRP_DATA_DESC_IMM): a 4-byte length where the
// descriptors go, the data at the offset the login granted.
CmdError parse_immediate(std::span<const uint8_t> iu, size_t off, const CmdParseOpts &o, Cmd *c)
{
	if (o.imm_data_offset == 0)
		return CmdError::NoImmediate;
	if (!fits(off, kImmHdrLen, iu.size()))
		return CmdError::Short;
	const uint32_t len = get_be32(iu.data() + off);
	// The data must not overlap the header (a long additional CDB pushes the header
	// past the granted offset), and offset + len is 64-bit: a len near 4 GiB must not
	// wrap back inside the IU.
	if (o.imm_data_offset < off + kImmHdrLen)
		return CmdError::BadImmediate;
	if (!fits(o.imm_data_offset, len, iu.size()))
		return CmdError::BadImmediate;
	c->imm = iu.subspan(o.imm_data_offset, len);
	c->data_len = len;
	return CmdError::None;
}

} // namespace

CmdError parse_cmd(std::span<const uint8_t> iu, const CmdParseOpts &o, Cmd *out)
{
	*out = Cmd{};
	if (iu.size() < kCmdLen)
		return CmdError::Short;
	const uint8_t *p = iu.data();
	if (p[0] != CMD)
		return CmdError::BadOpcode;
	// What the target needs to answer even a refused command with CHECK CONDITION.
	Cmd &c = *out;
	c.sol_not = p[1];
	c.tag = get_tag(p + 8);
	std::memcpy(c.lun, p + 20, 8);
	c.lun_raw = get_be64(p + 20);
	c.task_attr = p[29];
	// ADDITIONAL CDB LENGTH is in 4-byte words in bits 7..2 (SRP r16a SRP_CMD): the
	// byte masked is the byte count, and the descriptors follow the additional CDB bytes
	// (Linux's srpt_get_desc_buf).
	const size_t add_cdb = p[31] & ~3u;
	const size_t desc_off = kCmdLen + add_cdb;
	if (iu.size() < desc_off)
		return CmdError::Short;
	c.cdb = iu.subspan(32, 16 + add_cdb);

	const uint8_t out_fmt = p[5] >> 4;
	const uint8_t in_fmt = p[5] & 0xf;
	if (out_fmt && in_fmt)
		return CmdError::BothDirections;
	if (out_fmt > uint8_t(DescFmt::Immediate) || in_fmt > uint8_t(DescFmt::Immediate))
		return CmdError::BadFormat;
	// Immediate data is initiator-to-target only (SRP-2).
	if (in_fmt == uint8_t(DescFmt::Immediate))
		return CmdError::BadFormat;
	c.out_fmt = static_cast<DescFmt>(out_fmt);
	c.in_fmt = static_cast<DescFmt>(in_fmt);
	const DescFmt fmt = out_fmt ? c.out_fmt : c.in_fmt;
	const uint8_t cnt = out_fmt ? p[6] : p[7];

	switch (fmt) {
	case DescFmt::None:
		return CmdError::None;
	case DescFmt::Direct:
		return parse_direct(iu, desc_off, cnt, &c);
	case DescFmt::Indirect:
		return parse_indirect(iu, desc_off, cnt, o, &c);
	case DescFmt::Immediate:
		return parse_immediate(iu, desc_off, o, &c);
	}
	return CmdError::BadFormat;
}

void put_desc(const DirectDesc &d, uint8_t *p)
{
	put_be64(p, d.va);
	put_be32(p + 8, d.key);
	put_be32(p + 12, d.len);
}

size_t build_cmd(const CmdOut &c, std::span<uint8_t> out)
{
	// The CDB: 16 bytes (a shorter one zero-padded), or 16 + whole words of additional
	// CDB bytes (ADDITIONAL CDB LENGTH counts words).
	if (c.cdb.size() > kMaxCdbLen)
		return 0;
	const size_t add_cdb = c.cdb.size() > 16 ? c.cdb.size() - 16 : 0;
	if (add_cdb % 4)
		return 0;
	const size_t desc_off = kCmdLen + add_cdb;
	if (c.out_fmt != DescFmt::None && c.in_fmt != DescFmt::None)
		return 0;
	if (c.out_fmt > DescFmt::Immediate || c.in_fmt > DescFmt::Immediate ||
	    c.in_fmt == DescFmt::Immediate)
		return 0;
	const DescFmt fmt = c.out_fmt != DescFmt::None ? c.out_fmt : c.in_fmt;

	uint64_t len = desc_off;
	uint8_t cnt = 0;
	uint32_t table_len = 0;
	switch (fmt) {
	case DescFmt::None:
		break;
	case DescFmt::Direct:
		if (c.descs.size() != 1)
			return 0;
		cnt = 1;
		len += kDescLen;
		break;
	case DescFmt::Indirect:
		// The partial list's count is a byte; it cannot be longer than the table,
		// whose descriptor says its length in bytes (table.len when given must agree).
		if (c.descs.size() > 255 || c.descs.size() > c.table_entries ||
		    uint64_t{c.table_entries} * kDescLen > UINT32_MAX)
			return 0;
		table_len = c.table_entries * uint32_t{kDescLen};
		if (c.table.len != 0 && c.table.len != table_len)
			return 0;
		cnt = static_cast<uint8_t>(c.descs.size());
		len += kIndirectHdrLen + c.descs.size() * kDescLen;
		break;
	case DescFmt::Immediate:
		if (c.imm_data_offset < desc_off + kImmHdrLen || c.imm.size() > UINT32_MAX)
			return 0;
		len = uint64_t{c.imm_data_offset} + c.imm.size();
		break;
	}
	if (len > out.size())
		return 0;

	uint8_t *p = out.data();
	std::memset(p, 0, len);
	p[0] = CMD;
	p[5] = static_cast<uint8_t>(uint8_t(c.out_fmt) << 4 | uint8_t(c.in_fmt));
	if (c.out_fmt != DescFmt::None)
		p[6] = cnt;
	else
		p[7] = cnt;
	put_tag(p + 8, c.tag);
	if (c.lun)
		std::memcpy(p + 20, c.lun, 8);
	p[29] = c.task_attr;
	p[31] = static_cast<uint8_t>(add_cdb);
	if (!c.cdb.empty())
		std::memcpy(p + 32, c.cdb.data(), c.cdb.size());

	uint8_t *d = p + desc_off;
	switch (fmt) {
	case DescFmt::None:
		break;
	case DescFmt::Direct:
		put_desc(c.descs[0], d);
		break;
	case DescFmt::Indirect: {
		DirectDesc table = c.table;
		table.len = table_len;
		put_desc(table, d);
		put_be32(d + 16, c.total_len);
		for (size_t i = 0; i < c.descs.size(); i++)
			put_desc(c.descs[i], d + kIndirectHdrLen + i * kDescLen);
		break;
	}
	case DescFmt::Immediate:
		put_be32(d, static_cast<uint32_t>(c.imm.size()));
		if (!c.imm.empty())
			std::memcpy(p + c.imm_data_offset, c.imm.data(), c.imm.size());
		break;
	}
	return len;
}

// ---- Responses -------------------------------------------------------------------------------

size_t build_rsp(const Rsp &r, std::span<uint8_t> out)
{
	const uint64_t len = uint64_t{kRspLen} + r.resp_data.size() + r.sense.size();
	if (len > out.size() || r.resp_data.size() > UINT32_MAX || r.sense.size() > UINT32_MAX)
		return 0;
	uint8_t *p = out.data();
	std::memset(p, 0, kRspLen);
	p[0] = RSP;
	p[1] = r.sol_not;
	put_be32(p + 4, r.req_lim_delta);
	put_tag(p + 8, r.tag);
	// The VALID bits say whether the lengths count (SRP r16a SRP_RSP): they follow the
	// spans.
	uint8_t flags = r.flags & ~(RSP_RSPVALID | RSP_SNSVALID);
	if (!r.resp_data.empty())
		flags |= RSP_RSPVALID;
	if (!r.sense.empty())
		flags |= RSP_SNSVALID;
	p[18] = flags;
	p[19] = r.status;
	put_be32(p + 20, r.data_out_res_cnt);
	put_be32(p + 24, r.data_in_res_cnt);
	put_be32(p + 28, static_cast<uint32_t>(r.sense.size()));
	put_be32(p + 32, static_cast<uint32_t>(r.resp_data.size()));
	if (!r.resp_data.empty())
		std::memcpy(p + kRspLen, r.resp_data.data(), r.resp_data.size());
	if (!r.sense.empty())
		std::memcpy(p + kRspLen + r.resp_data.size(), r.sense.data(), r.sense.size());
	return len;
}

bool parse_rsp(std::span<const uint8_t> iu, Rsp *out)
{
	if (iu.size() < kRspLen || iu[0] != RSP)
		return false;
	const uint8_t *p = iu.data();
	Rsp r;
	r.sol_not = p[1];
	r.req_lim_delta = get_be32(p + 4);
	r.tag = get_tag(p + 8);
	r.flags = p[18];
	r.status = p[19];
	r.data_out_res_cnt = get_be32(p + 20);
	r.data_in_res_cnt = get_be32(p + 24);
	// A length whose VALID bit is clear does not count (SRP r16a SRP_RSP: the field is
	// only meaningful with its bit; Linux's srp_process_rsp reads sense only with
	// SNSVALID). Linux places the sense after resp_data_len bytes even without RSPVALID;
	// targets (ib_srpt, ours) write 0 there then, so the two readings agree. The lengths
	// are the peer's 32-bit values: their sum in 64 bits.
	const uint64_t sense_len = r.flags & RSP_SNSVALID ? get_be32(p + 28) : 0;
	const uint64_t resp_len = r.flags & RSP_RSPVALID ? get_be32(p + 32) : 0;
	if (!fits(kRspLen, resp_len + sense_len, iu.size()))
		return false;
	r.resp_data = iu.subspan(kRspLen, resp_len);
	r.sense = iu.subspan(kRspLen + resp_len, sense_len);
	*out = r;
	return true;
}

bool parse_tsk_mgmt(std::span<const uint8_t> iu, TskMgmt *out)
{
	if (iu.size() < kTskMgmtLen || iu[0] != TSK_MGMT)
		return false;
	const uint8_t *p = iu.data();
	TskMgmt t;
	t.sol_not = p[1];
	t.tag = get_tag(p + 8);
	std::memcpy(t.lun, p + 20, 8);
	t.func = p[30];
	// The tag of the task to abort: the initiator's opaque bytes, as it sent them in
	// that task's SRP_CMD.
	t.task_tag = get_tag(p + 32);
	*out = t;
	return true;
}

size_t build_tsk_mgmt(const TskMgmt &t, std::span<uint8_t> out)
{
	if (out.size() < kTskMgmtLen)
		return 0;
	uint8_t *p = out.data();
	std::memset(p, 0, kTskMgmtLen);
	p[0] = TSK_MGMT;
	p[1] = t.sol_not;
	put_tag(p + 8, t.tag);
	std::memcpy(p + 20, t.lun, 8);
	p[30] = t.func;
	put_tag(p + 32, t.task_tag);
	return kTskMgmtLen;
}

size_t build_cred_req(const CredReq &c, std::span<uint8_t> out)
{
	if (out.size() < kCredReqLen)
		return 0;
	uint8_t *p = out.data();
	std::memset(p, 0, kCredReqLen);
	p[0] = CRED_REQ;
	p[1] = c.sol_not;
	put_be32(p + 4, c.req_lim_delta);
	put_tag(p + 8, c.tag);
	return kCredReqLen;
}

bool parse_cred_req(std::span<const uint8_t> iu, CredReq *out)
{
	if (iu.size() < kCredReqLen || iu[0] != CRED_REQ)
		return false;
	const uint8_t *p = iu.data();
	CredReq c;
	c.sol_not = p[1];
	c.req_lim_delta = get_be32(p + 4);
	c.tag = get_tag(p + 8);
	*out = c;
	return true;
}

bool parse_aer_req(std::span<const uint8_t> iu, AerReq *out)
{
	if (iu.size() < kAerReqLen || iu[0] != AER_REQ)
		return false;
	const uint8_t *p = iu.data();
	const uint32_t sense_len = get_be32(p + 28);
	if (!fits(kAerReqLen, sense_len, iu.size()))
		return false;
	AerReq a;
	a.req_lim_delta = get_be32(p + 4);
	a.tag = get_tag(p + 8);
	std::memcpy(a.lun, p + 20, 8);
	a.sense = iu.subspan(kAerReqLen, sense_len);
	*out = a;
	return true;
}

size_t build_tag_iu(uint8_t opcode, uint64_t tag, std::span<uint8_t> out)
{
	if (out.size() < kLogoutLen)
		return 0;
	uint8_t *p = out.data();
	std::memset(p, 0, kLogoutLen);
	p[0] = opcode;
	put_tag(p + 8, tag);
	return kLogoutLen;
}

bool parse_tag_iu(std::span<const uint8_t> iu, uint8_t opcode, uint64_t *tag)
{
	if (iu.size() < kLogoutLen || iu[0] != opcode)
		return false;
	*tag = get_tag(iu.data() + 8);
	return true;
}

size_t build_t_logout(const TLogout &t, std::span<uint8_t> out)
{
	if (out.size() < kLogoutLen)
		return 0;
	uint8_t *p = out.data();
	std::memset(p, 0, kLogoutLen);
	p[0] = T_LOGOUT;
	put_be32(p + 4, t.reason);
	put_tag(p + 8, t.tag);
	return kLogoutLen;
}

bool parse_t_logout(std::span<const uint8_t> iu, TLogout *out)
{
	if (iu.size() < kLogoutLen || iu[0] != T_LOGOUT)
		return false;
	TLogout t;
	t.reason = get_be32(iu.data() + 4);
	t.tag = get_tag(iu.data() + 8);
	*out = t;
	return true;
}

std::array<uint8_t, 16> make_port_id(uint64_t hi, uint64_t lo)
{
	std::array<uint8_t, 16> id;
	put_be64(id.data(), hi);
	put_be64(id.data() + 8, lo);
	return id;
}

uint64_t port_id_hi(const std::array<uint8_t, 16> &id)
{
	return get_be64(id.data());
}

uint64_t port_id_lo(const std::array<uint8_t, 16> &id)
{
	return get_be64(id.data() + 8);
}

} // namespace ulp::srp
