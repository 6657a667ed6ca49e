// SPDX-License-Identifier: MIT
// scsi/spc_mode.cc - MODE SENSE (6), (10) and MODE SELECT (6), (10) (SPC-4 6.11..6.14,
// 7.5; SBC-3 6.4) and the mode pages of a direct access block device.
//
// Pages: read-write error recovery (01h), disconnect-reconnect (02h), caching (08h),
// control (0Ah) and informational exceptions control (1Ch), none with subpages. Two
// parameters can change: WCE (caching, when the backstore has a volatile cache to turn
// off) and SWP (control: software write protect). Nothing is saveable: PS is 0, MODE
// SENSE of saved values and MODE SELECT with SP fail. The LU has one set of mode
// parameters for every I_T nexus (TST 000b), so a change raises MODE PARAMETERS CHANGED
// for the others (SPC-4 5.14).
#include "scsi/spc.h"

#include <algorithm>
#include <cstring>
#include <mutex>
#include <vector>

namespace ulp::scsi
{

namespace
{

// SPC-4 6.13 PAGE CONTROL.
enum class PageControl : uint8_t {
	Current = 0,
	Changeable = 1,
	Default = 2,
	Saved = 3,
};

enum : uint8_t {
	MP_RW_ERROR_RECOVERY = 0x01,
	MP_DISCONNECT_RECONNECT = 0x02,
	MP_CACHING = 0x08,
	MP_CONTROL = 0x0a,
	MP_INFO_EXCEPTIONS = 0x1c,
	MP_ALL = 0x3f,
	SUBPAGE_NONE = 0x00,
	SUBPAGE_ALL = 0xff,
};

// The bits MODE SELECT may change, and where.
enum : uint8_t {
	CACHING_WCE = 0x04,    // caching page byte 2
	CONTROL_SWP = 0x08,    // control page byte 4
	DEVSPEC_WP = 0x80,     // device-specific parameter (SBC-3 6.4.1)
	DEVSPEC_DPOFUA = 0x10, // DPO and FUA are supported
	HDR10_LONGLBA = 0x01,  // MODE SENSE (10) / SELECT (10) header byte 4
	MS_DBD = 0x08,         // MODE SENSE CDB byte 1
	MS10_LLBAA = 0x10,     // MODE SENSE (10) CDB byte 1
	MSEL_PF = 0x10,        // MODE SELECT CDB byte 1
	MSEL_SP = 0x01,        //
};

// The changeable parameters as one value: the current ones, the defaults, or MODE
// SELECT's view while it checks a parameter list.
struct ModeValues {
	bool wce;
	bool swp;
};

ModeValues current_values(const LogicalUnit &lu)
{
	return {lu.wce(), lu.swp()};
}

ModeValues default_values(const LogicalUnit &lu)
{
	return {lu.bs().write_cache(), false};
}

struct PageDef {
	uint8_t code;
	uint8_t len; // PAGE LENGTH: the bytes after byte 1
};

// Ascending: MODE SENSE with page 3Fh returns them in this order.
constexpr PageDef kPages[] = {
    {MP_RW_ERROR_RECOVERY, 0x0a}, {MP_DISCONNECT_RECONNECT, 0x0e}, {MP_CACHING, 0x12},
    {MP_CONTROL, 0x0a},           {MP_INFO_EXCEPTIONS, 0x0a},
};

const PageDef *find_page(uint8_t code)
{
	for (const PageDef &p : kPages)
		if (p.code == code)
			return &p;
	return nullptr;
}

constexpr size_t kMaxPage = 2 + 0x12;

// Page pg for pc (Saved excluded) into out, 2 + pg.len bytes: PS 0 (nothing saveable),
// SPF 0 (page_0 format). For Changeable, a mask of the bits MODE SELECT may change; the
// page code and length stay the current ones (SPC-4 6.13).
size_t put_page(const LogicalUnit &lu, const PageDef &pg, PageControl pc, const ModeValues &v,
                uint8_t *p)
{
	std::memset(p, 0, 2 + pg.len);
	p[0] = pg.code;
	p[1] = pg.len;
	const bool mask = pc == PageControl::Changeable;
	switch (pg.code) {
	case MP_RW_ERROR_RECOVERY:
		// SBC-3: no automatic reallocation, no retries to report, no error correction
		// to turn off: the backstore's errors come up as they are (all zero).
		break;
	case MP_DISCONNECT_RECONNECT:
		// SPC-4 7.5: iSCSI and SRP do their own flow control (all zero, as the kernel's
		// target): here because initiators that walk the pages expect it.
		break;
	case MP_CACHING:
		// SBC-3 6.4 caching page: WCE as the LU runs (changeable only when the backstore
		// has a volatile cache), RCD 0, DRA 1 (no read-ahead: the backstore's own).
		if (mask) {
			p[2] = lu.bs().write_cache() ? CACHING_WCE : 0;
			break;
		}
		p[2] = v.wce ? CACHING_WCE : 0;
		p[12] = 0x20;
		break;
	case MP_CONTROL:
		// SPC-4 7.5 control page. Byte 2: TST 000b (one task set for every I_T nexus),
		// TMF_ONLY 0, DPICZ 0, D_SENSE 0 (fixed format sense only: descriptor format is
		// not offered, so not changeable), GLTSD 1 (no log parameters to save), RLEC 0.
		// Byte 3: QUEUE ALGORITHM MODIFIER 1 (SIMPLE commands run in any order, the
		// core's task set does not order them), QERR 00b (a CHECK CONDITION leaves the
		// other tasks alone). Byte 4: UA_INTLCK_CTRL 00b (a unit attention is cleared
		// when reported, ua.cc), SWP. Byte 5: TAS as configured (tmr.cc), ATO 0, AUTOLOAD
		// 0. BUSY TIMEOUT PERIOD FFFFh: unlimited. EXTENDED SELF-TEST COMPLETION TIME 0:
		// there is no extended self-test.
		if (mask) {
			p[4] = CONTROL_SWP;
			break;
		}
		p[2] = 0x02;
		p[3] = 0x10;
		p[4] = v.swp ? CONTROL_SWP : 0;
		p[5] = lu.cfg().tas ? 0x40 : 0;
		put_be16(p + 8, 0xffff);
		break;
	case MP_INFO_EXCEPTIONS:
		// SPC-4 7.5 informational exceptions control: DEXCPT 1 (no failure prediction
		// to report), MRIE 0h.
		if (!mask)
			p[2] = 0x08;
		break;
	}
	return 2 + pg.len;
}

// ---- MODE SENSE ------------------------------------------------------------------------

void exec_mode_sense(Cmd *cmd)
{
	const uint8_t *c = cmd->cdb;
	const LogicalUnit &lu = *cmd->lu;
	const bool ten = c[0] == OP_MODE_SENSE_10;
	const bool dbd = c[1] & MS_DBD;
	const bool llbaa = ten && (c[1] & MS10_LLBAA);
	const auto pc = static_cast<PageControl>(c[2] >> 6);
	const uint8_t page = c[2] & 0x3f;

	uint8_t d[8 + 16 + std::size(kPages) * kMaxPage] = {};
	const size_t hdr = ten ? 8 : 4;
	size_t n = hdr;
	// SBC-3 6.4.2 block descriptor (current values whatever PC asks, SPC-4 6.13): the
	// capacity (FFFFFFFFh in the short form when it does not fit) and the block length;
	// DENSITY CODE 0 is implied by the LBA forms.
	size_t bdl = 0;
	if (!dbd) {
		const uint64_t blocks = lu.nr_blocks();
		if (llbaa) {
			put_be64(d + n, blocks);
			put_be32(d + n + 12, lu.block_size());
			bdl = 16;
		} else {
			put_be32(d + n,
			         static_cast<uint32_t>(std::min<uint64_t>(blocks, 0xffffffff)));
			put_be24(d + n + 5, lu.block_size());
			bdl = 8;
		}
		n += bdl;
	}
	const ModeValues v = pc == PageControl::Default ? default_values(lu) : current_values(lu);
	for (const PageDef &pg : kPages)
		if (page == MP_ALL || page == pg.code)
			n += put_page(lu, pg, pc, v, d + n);

	// SBC-3 6.4.1 device-specific parameter: WP when writes would fail (the LU's write
	// protect, or this initiator's read-only mapping), DPOFUA: READ and WRITE take DPO
	// and FUA.
	const uint8_t devspec =
	    (lu.write_protected() || cmd->read_only ? DEVSPEC_WP : 0) | DEVSPEC_DPOFUA;
	// SPC-4 7.5.4 header: MODE DATA LENGTH counts the bytes after itself; MEDIUM TYPE 0.
	if (ten) {
		put_be16(d, static_cast<uint16_t>(n - 2));
		d[3] = devspec;
		d[4] = llbaa && bdl ? HDR10_LONGLBA : 0;
		put_be16(d + 6, static_cast<uint16_t>(bdl));
	} else {
		d[0] = static_cast<uint8_t>(n - 1);
		d[2] = devspec;
		d[3] = static_cast<uint8_t>(bdl);
	}
	complete_data_in(cmd, {d, n});
}

// ---- MODE SELECT -----------------------------------------------------------------------

// Serialises MODE SELECTs between checking a parameter list against the current values
// and applying it, so that two of them cannot each pass against values the other changes.
std::mutex g_select_lock;

// SPC-4 6.11: check the parameter list p (header, at most one block descriptor, pages)
// against the device's current values and changeable masks; on success, *v holds the
// values it asks for. The header's MODE DATA LENGTH is reserved in MODE SELECT, and the
// device-specific parameter's WP and DPOFUA bits are not for setting (SBC-3 6.4.1): both
// are ignored, as Linux echoes them back from MODE SENSE.
Sense check_params(const Cmd *cmd, std::span<const uint8_t> p, ModeValues *v)
{
	const LogicalUnit &lu = *cmd->lu;
	const bool ten = cmd->cdb[0] == OP_MODE_SELECT_10;
	const size_t hdr = ten ? 8 : 4;
	// A list that cuts off the header, a block descriptor or a page is a PARAMETER LIST
	// LENGTH ERROR (SPC-4 6.11); anything in it the device cannot take is INVALID FIELD
	// IN PARAMETER LIST.
	if (p.size() < hdr)
		return Sense::ParamListLengthError;
	if (p[ten ? 2 : 1] != 0) // MEDIUM TYPE: 00h for a direct access device
		return Sense::InvalidParamListField;
	const bool longlba = ten && (p[4] & HDR10_LONGLBA);
	const size_t bdl = ten ? get_be16(&p[6]) : p[3];
	const size_t bd_size = longlba ? 16 : 8;
	if (bdl != 0 && bdl != bd_size)
		return Sense::InvalidParamListField; // one descriptor at most (SBC-3 6.4.2)
	if (p.size() < hdr + bdl)
		return Sense::ParamListLengthError;
	if (bdl) {
		// The capacity and block length cannot change: NUMBER OF LOGICAL BLOCKS 0 (keep
		// the capacity, SBC-3 6.4.2) or the current one, and the current block length.
		const uint8_t *b = &p[hdr];
		const uint64_t nr = lu.nr_blocks();
		const uint64_t blocks = longlba ? get_be64(b) : get_be32(b);
		const uint64_t cur = longlba ? nr : std::min<uint64_t>(nr, 0xffffffff);
		const uint32_t len = longlba ? get_be32(b + 12) : get_be24(b + 5);
		if ((blocks != 0 && blocks != cur) || len != lu.block_size())
			return Sense::InvalidParamListField;
	}
	*v = current_values(lu);
	for (size_t off = hdr + bdl; off < p.size();) {
		if (p.size() - off < 2)
			return Sense::ParamListLengthError;
		// SPF 1 (sub_page format): no page here has subpages.
		if (p[off] & 0x40) {
			if (p.size() - off < 4)
				return Sense::ParamListLengthError;
			return Sense::InvalidParamListField;
		}
		const PageDef *pg = find_page(p[off] & 0x3f);
		if (!pg)
			return Sense::InvalidParamListField;
		const size_t len = p[off + 1];
		if (p.size() - off < 2 + len)
			return Sense::ParamListLengthError;
		if (len != pg->len)
			return Sense::InvalidParamListField;
		// Every bit outside the changeable mask must keep its current value (SPC-4
		// 6.11); PS (byte 0 bit 7) is reserved in MODE SELECT.
		uint8_t cur[kMaxPage], mask[kMaxPage];
		put_page(lu, *pg, PageControl::Current, *v, cur);
		put_page(lu, *pg, PageControl::Changeable, *v, mask);
		const uint8_t *in = &p[off];
		if ((in[0] & 0x7f) != cur[0])
			return Sense::InvalidParamListField;
		for (size_t i = 2; i < 2 + len; i++)
			if ((in[i] ^ cur[i]) & ~mask[i])
				return Sense::InvalidParamListField;
		if (pg->code == MP_CACHING)
			v->wce = in[2] & CACHING_WCE;
		else if (pg->code == MP_CONTROL)
			v->swp = in[4] & CONTROL_SWP;
		off += 2 + len;
	}
	return Sense::None;
}

void exec_mode_select(Cmd *cmd)
{
	LogicalUnit &lu = *cmd->lu;
	std::vector<uint8_t> p(cmd->xfer_len);
	p.resize(sgl_copy_out(cmd, 0, p.data(), p.size()));
	bool changed, wce_off;
	{
		std::lock_guard g(g_select_lock);
		ModeValues v;
		if (Sense r = check_params(cmd, p, &v); r != Sense::None) {
			complete_sense(cmd, r);
			return;
		}
		const ModeValues old = current_values(lu);
		changed = v.wce != old.wce || v.swp != old.swp;
		wce_off = old.wce && !v.wce;
		lu.set_wce(v.wce);
		lu.set_swp(v.swp);
	}
	// SPC-4 5.14: the other I_T nexuses learn that parameters they share have changed.
	if (changed)
		lu.ua_add_all(UA_MODE_PARAMS_CHANGED, &cmd->sess->id());
	// SBC-3 6.4 (WCE 0: GOOD only once the data is on the medium): what earlier writes
	// left in the volatile cache is flushed before MODE SELECT completes, so that WCE 0
	// holds for them too. Writes from now on are made durable one by one (sbc.cc).
	if (wce_off) {
		bs_submit(cmd, BsOp::Flush, 0, 0, {}, false, flush_done);
		return;
	}
	complete_good(cmd);
}

} // namespace

Sense mode_sense_parse(Cmd *cmd)
{
	const uint8_t *c = cmd->cdb;
	const bool ten = c[0] == OP_MODE_SENSE_10;
	// SPC-4 6.13, 6.14: DBD, and LLBAA in the 10-byte CDB; the other bits of byte 1 are
	// reserved.
	if (c[1] & ~(ten ? MS_DBD | MS10_LLBAA : MS_DBD))
		return Sense::InvalidCdbField;
	// SPC-4 6.13: saved values are not implemented: SAVING PARAMETERS NOT SUPPORTED.
	if (static_cast<PageControl>(c[2] >> 6) == PageControl::Saved)
		return Sense::SavingParamsUnsupported;
	const uint8_t page = c[2] & 0x3f, subpage = c[3];
	// A page we have (or 3Fh, all of them) with subpage 00h (the page) or FFh (the page
	// and all its subpages: there are none).
	if (page != MP_ALL && !find_page(page))
		return Sense::InvalidCdbField;
	if (subpage != SUBPAGE_NONE && subpage != SUBPAGE_ALL)
		return Sense::InvalidCdbField;
	cmd->cdb_xfer = ten ? get_be16(c + 7) : c[4];
	cmd->cdb_dir = DataDir::Read;
	cmd->execute = exec_mode_sense;
	return Sense::None;
}

Sense mode_select_parse(Cmd *cmd)
{
	const uint8_t *c = cmd->cdb;
	const bool ten = c[0] == OP_MODE_SELECT_10;
	// SPC-4 6.11: PF and SP; the rest of byte 1 is reserved.
	if (c[1] & ~(MSEL_PF | MSEL_SP))
		return Sense::InvalidCdbField;
	// SP 1 asks to save the pages: nothing is saveable (INVALID FIELD IN CDB, SPC-4 6.11).
	if (c[1] & MSEL_SP)
		return Sense::InvalidCdbField;
	const uint32_t len = ten ? get_be16(c + 7) : c[4];
	// PF 0 would make the pages vendor specific (SCSI-1): only the SPC format is taken.
	// An empty list changes nothing and is not an error.
	if (len && !(c[1] & MSEL_PF))
		return Sense::InvalidCdbField;
	cmd->cdb_xfer = len;
	cmd->cdb_dir = DataDir::Write;
	cmd->execute = len ? exec_mode_select : complete_good;
	return Sense::None;
}

} // namespace ulp::scsi
