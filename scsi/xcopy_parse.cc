// SPDX-License-Identifier: MIT
// scsi/xcopy_parse.cc - the EXTENDED COPY (LID1) parameter list (SPC-4 6.4.3): peer input,
// so every length is checked against the bytes there are before anything is read, and every
// count against the limits RECEIVE COPY RESULTS reports (xcopy.h).
//
// The sense for each error is SPC-4's (6.4.3.4, 6.4.3.5, 6.4.4, 6.4.5) where it says one and,
// where it leaves a choice, what libiscsi's ExtendedCopy suite accepts: a descriptor list
// the header does not fit in the parameter list (truncation) or longer than MAXIMUM
// DESCRIPTOR LIST LENGTH is a PARAMETER LIST LENGTH ERROR; too many or unknown descriptors
// their own ASCs; a segment naming a CSCD that is not in the list, or a NUL CSCD, COPY
// ABORTED with COPY TARGET DEVICE NOT REACHABLE.
#include "scsi/sense.h"
#include "scsi/types.h"
#include "scsi/xcopy.h"

namespace ulp::scsi
{

namespace
{

XcopyError illegal(uint16_t asc, int field = -1, int bit = -1)
{
	XcopyError e{XKEY_ILLEGAL_REQUEST, asc, 0};
	if (field >= 0)
		e.sks = sense_field_pointer(false, static_cast<uint16_t>(field), bit);
	return e;
}

// An identification CSCD descriptor at p (32 bytes), byte off of the parameter list.
XcopyError parse_cscd(const uint8_t *p, size_t off, XcopyCscd *c)
{
	// Byte 1: bits 7:6 were SPC-3's LU ID TYPE, which SPC-4 makes obsolete: ignored (the
	// designator alone names the LU; libiscsi 1.20's ExtendedCopy.ValidTgtDescr wants GOOD
	// with a reserved value there from an SPC-4 device). NUL (5): names no logical unit.
	// PERIPHERAL DEVICE TYPE (4:0): 00h, a block device, the only kind a block-to-block
	// segment copies.
	c->nul = p[1] & 0x20;
	if (p[1] & 0x1f)
		return illegal(XASC_INVALID_PARAM_FIELD, int(off + 1), 4);
	// Bytes 4..27: a designation descriptor (SPC-4 7.8.6.1): CODE SET (byte 4, 3:0),
	// ASSOCIATION (byte 5, 5:4), DESIGNATOR TYPE (byte 5, 3:0), DESIGNATOR LENGTH (byte 7),
	// then at most 20 bytes of designator.
	const uint8_t dlen = p[7];
	if (dlen > 20)
		return illegal(XASC_INVALID_PARAM_FIELD, int(off + 7));
	// What this copy manager can find: the 8-byte binary NAA designator of a logical unit,
	// the one VPD 83h reports (spc_inquiry.cc). Anything else names a device it cannot
	// reach, which the copy reports when a segment uses the descriptor.
	c->by_naa = (p[4] & 0x0f) == 1 && (p[5] & 0x30) == 0 && (p[5] & 0x0f) == 3 && dlen == 8;
	c->naa = c->by_naa ? get_be64(p + 8) : 0;
	// Bytes 28..31, device type specific: PAD, DISK BLOCK LENGTH. The copy uses the LUs'
	// own block lengths (a CSCD of a disk names its block length, which the LU has).
	return {};
}

XcopyError parse_b2b(const uint8_t *p, size_t off, XcopySeg *s)
{
	// Byte 1: DC (1), CAT (0: a residue is an error; every segment here is whole blocks).
	if (p[1] & 0xfc)
		return illegal(XASC_INVALID_PARAM_FIELD, int(off + 1));
	s->dc = p[1] & 0x02;
	s->src = get_be16(p + 4);
	s->dst = get_be16(p + 6);
	s->blocks = get_be16(p + 10);
	s->src_lba = get_be64(p + 12);
	s->dst_lba = get_be64(p + 20);
	return {};
}

} // namespace

XcopyError xcopy_parse_list(const uint8_t *p, size_t len, XcopyList *out)
{
	*out = XcopyList{};
	if (len < kXcopyHeaderLen)
		return illegal(XASC_PARAM_LIST_LENGTH);
	out->list_id = p[0];
	// Byte 1: STR (5) and PRIORITY (2:0) are hints; LIST ID USAGE (4:3): 01b is reserved;
	// 11b (no list identifier) wants LIST IDENTIFIER 0.
	out->usage = (p[1] >> 3) & 3;
	if (out->usage == 1)
		return illegal(XASC_INVALID_PARAM_FIELD, 1, 4);
	if (out->usage == XCOPY_LIST_NONE && out->list_id != 0)
		return illegal(XASC_INVALID_PARAM_FIELD, 0);
	const uint32_t cscd_len = get_be16(p + 2);
	const uint32_t seg_len = get_be32(p + 8);
	const uint32_t inline_len = get_be32(p + 12);
	if (inline_len > kXcopyMaxInlineData)
		return illegal(XASC_INLINE_DATA_EXCEEDED, 12);
	// SPC-4 6.4.3.5: the descriptor lists together longer than MAXIMUM DESCRIPTOR LIST
	// LENGTH; and 6.4.1: a parameter list length that truncates them. (64-bit sums: the
	// segment list length is 32 bits.)
	const uint64_t lists = uint64_t(cscd_len) + seg_len;
	if (lists > kXcopyMaxDescListLen)
		return illegal(XASC_PARAM_LIST_LENGTH);
	if (kXcopyHeaderLen + lists + inline_len > len)
		return illegal(XASC_PARAM_LIST_LENGTH);

	// The CSCD descriptor list: fixed 32-byte descriptors (every CSCD type code below
	// E0h..FFh that is not 64 bytes long is 32; those we do not know are refused before
	// their length matters).
	size_t off = kXcopyHeaderLen;
	const size_t cscd_end = off + cscd_len;
	while (off < cscd_end) {
		if (out->ncscd == kXcopyMaxCscd)
			return illegal(XASC_TOO_MANY_CSCD);
		if (p[off] != XCOPY_CSCD_ID)
			return illegal(XASC_UNSUPPORTED_CSCD, int(off));
		if (cscd_end - off < kXcopyCscdLen)
			return illegal(XASC_PARAM_LIST_LENGTH);
		if (XcopyError e = parse_cscd(p + off, off, &out->cscd[out->ncscd]))
			return e;
		out->ncscd++;
		off += kXcopyCscdLen;
	}

	// The segment descriptor list: a 4-byte header whose DESCRIPTOR LENGTH (bytes 2..3)
	// counts the bytes after it.
	const size_t seg_end = off + seg_len;
	while (off < seg_end) {
		if (out->nseg == kXcopyMaxSegments)
			return illegal(XASC_TOO_MANY_SEGMENTS);
		if (p[off] != XCOPY_SEG_B2B)
			return illegal(XASC_UNSUPPORTED_SEGMENT, int(off));
		if (seg_end - off < 4)
			return illegal(XASC_PARAM_LIST_LENGTH);
		if (get_be16(p + off + 2) != kXcopyB2bLen - 4)
			return illegal(XASC_INVALID_PARAM_FIELD, int(off + 2));
		if (seg_end - off < kXcopyB2bLen)
			return illegal(XASC_PARAM_LIST_LENGTH);
		if (XcopyError e = parse_b2b(p + off, off, &out->seg[out->nseg]))
			return e;
		out->nseg++;
		off += kXcopyB2bLen;
	}
	// SPC-4 6.4.5.1: an index beyond the CSCD list names no copy target. Checked once the
	// whole list is known to be well formed, so that TOO MANY SEGMENT DESCRIPTORS is told
	// before this.
	for (uint8_t i = 0; i < out->nseg; i++)
		if (out->seg[i].src >= out->ncscd || out->seg[i].dst >= out->ncscd)
			return {XKEY_COPY_ABORTED, XASC_TARGET_NOT_REACHABLE, 0};
	return {};
}

} // namespace ulp::scsi
