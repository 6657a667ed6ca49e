// SPDX-License-Identifier: MIT
// scsi/spc_inquiry.cc - INQUIRY (SPC-4 6.6): the standard data and the vital product data
// pages of a direct access block device: supported pages (00h), unit serial number (80h),
// device identification (83h), extended INQUIRY data (86h, spc_vpd_ext.cc), SCSI ports
// (88h), third-party copy (8Fh, spc_vpd_3pc.cc), and SBC-3's block limits (B0h), block device
// characteristics (B1h) and, when the LU is thin provisioned, logical block provisioning (B2h).
//
// What these pages claim has to match what the other families do: B0h's limits are the
// ones sbc.cc enforces (LuConfig), B2h's LBPU/LBPWS/LBPWS10 say that UNMAP and WRITE SAME
// with UNMAP deallocate (lu.thin(), like READ CAPACITY (16)'s LBPME), and libiscsi checks
// each against the other.
#include "scsi/fabric.h"
#include "scsi/sbc.h"
#include "scsi/spc.h"

#include <algorithm>
#include <cstring>
#include <string_view>
#include <vector>

namespace ulp::scsi
{

namespace
{

// VPD page codes (SPC-4 7.8, SBC-3 6.5).
enum : uint8_t {
	VPD_SUPPORTED_PAGES = 0x00,
	VPD_UNIT_SERIAL = 0x80,
	VPD_DEVICE_ID = 0x83,
	VPD_EXT_INQUIRY = 0x86,
	VPD_SCSI_PORTS = 0x88,
	VPD_THIRD_PARTY_COPY = 0x8f,
	VPD_BLOCK_LIMITS = 0xb0,
	VPD_BLOCK_DEV_CHARS = 0xb1,
	VPD_LB_PROVISIONING = 0xb2,
};

// SPC-4 7.6.1 protocol identifiers; kProtoNone: not known (PIV 0 in designators).
enum : uint8_t {
	PROTO_SRP = 0x4,
	PROTO_ISCSI = 0x5,
	PROTO_NONE = 0xff,
};

// The SCSI transport protocol of the session's fabric, by the names fabric.h gives them:
// iSCSI for "iscsi" and "iser" (iSER is an iSCSI transport, RFC 7145), SRP for "srpt".
uint8_t protocol_of(const Nexus &s)
{
	const std::string_view f = s.fabric().name();
	if (f == "iscsi" || f == "iser")
		return PROTO_ISCSI;
	if (f == "srpt")
		return PROTO_SRP;
	return PROTO_NONE;
}

// SPC-4 6.6.2 table "Version descriptor values" (no version claimed of each).
enum : uint16_t {
	VD_SAM5 = 0x00a0,
	VD_SPC4 = 0x0460,
	VD_SBC3 = 0x04c0,
	VD_SRP = 0x0940,
	VD_ISCSI = 0x0960,
};

// Standard INQUIRY data through the version descriptors and the 22 reserved bytes after
// them (SPC-4 6.6.2): 96 bytes, ADDITIONAL LENGTH 91.
constexpr size_t kStdInquiryLen = 96;

void exec_std_inquiry(Cmd *cmd)
{
	uint8_t d[kStdInquiryLen] = {};
	d[0] = peripheral_byte(cmd);
	// RMB: the medium is removable (medium.cc) as configured.
	if (cmd->lu && cmd->lu->removable())
		d[1] = 0x80;
	d[2] = 0x06; // VERSION: SPC-4
	// NORMACA 0 (no ACA), HISUP 1 (LUNs are SAM-5 hierarchical addresses, single
	// level), RESPONSE DATA FORMAT 2. AERC and TRMTSK (obsolete) stay 0: libiscsi fails
	// an SPC-3+ device that sets them.
	d[3] = 0x12;
	d[4] = kStdInquiryLen - 5;
	// Byte 5: SCCS 0, ACC 0, TPGS (bits 5..4: the LU's asymmetric access, scsi/alua.h;
	// 00b by default, every port as good as another), 3PC 1 (EXTENDED COPY (LID1) and
	// RECEIVE COPY RESULTS, xcopy.cc), PROTECT 0 (no protection information).
	// Byte 6: ENCSERV 0, MULTIP 0. Byte 7: CMDQUE 1 (the full task set model, SAM-5 8).
	d[5] = 0x08;
	if (cmd->lu)
		d[5] |= uint8_t(cmd->lu->alua_.tpgs() << 4);
	d[7] = 0x02;
	if (cmd->lu) {
		const LuConfig &c = cmd->lu->cfg();
		put_ascii(d + 8, 8, c.vendor);
		put_ascii(d + 16, 16, c.product);
		put_ascii(d + 32, 4, c.revision);
	} else {
		put_ascii(d + 8, 8, "ULP");
		put_ascii(d + 16, 16, "no LUN");
		put_ascii(d + 32, 4, "0001");
	}
	// Bytes 58..73: version descriptors, the architecture model, the command sets and the
	// transport (libiscsi's sbc3_support looks for SBC-3 here, and then wants the SBC-3
	// block limits page).
	uint16_t vd[8] = {VD_SAM5, VD_SPC4};
	size_t n = 2;
	if (cmd->lu)
		vd[n++] = VD_SBC3;
	switch (protocol_of(*cmd->sess)) {
	case PROTO_ISCSI:
		vd[n++] = VD_ISCSI;
		break;
	case PROTO_SRP:
		vd[n++] = VD_SRP;
		break;
	default:
		break;
	}
	for (size_t i = 0; i < n; i++)
		put_be16(d + 58 + 2 * i, vd[i]);
	complete_data_in(cmd, d);
}

// The pages this LU offers, ascending (SPC-4 7.8, supported VPD pages: the supported VPD pages list
// is in ascending order). B2h only for thin provisioning: SBC-3 6.5.4 requires it when LBPME is
// set, and a fully provisioned LU has nothing to say in it.
std::vector<uint8_t> vpd_pages(const LogicalUnit &lu)
{
	std::vector<uint8_t> p = {VPD_SUPPORTED_PAGES, VPD_UNIT_SERIAL,    VPD_DEVICE_ID,
	                          VPD_EXT_INQUIRY,     VPD_SCSI_PORTS,     VPD_THIRD_PARTY_COPY,
	                          VPD_BLOCK_LIMITS,    VPD_BLOCK_DEV_CHARS};
	if (lu.thin())
		p.push_back(VPD_LB_PROVISIONING);
	return p;
}

// One designation descriptor (SPC-4 7.8.6): byte 0 PROTOCOL IDENTIFIER and CODE SET,
// byte 1 PIV, ASSOCIATION and DESIGNATOR TYPE, byte 3 DESIGNATOR LENGTH.
enum : uint8_t {
	CODESET_BINARY = 1,
	CODESET_ASCII = 2,
	CODESET_UTF8 = 3,
	ASSOC_LU = 0,
	ASSOC_PORT = 1,
	ASSOC_DEVICE = 2,
	DESIG_T10_VENDOR = 1,
	DESIG_NAA = 3,
	DESIG_RELATIVE_PORT = 4,
	DESIG_TARGET_PORT_GROUP = 5,
	DESIG_SCSI_NAME = 8,
};

void put_designator(std::vector<uint8_t> &d, uint8_t proto, uint8_t codeset, uint8_t assoc,
                    uint8_t type, std::span<const uint8_t> value)
{
	// PIV only for port and device associations, and only when the protocol is known.
	const bool piv = proto != PROTO_NONE && assoc != ASSOC_LU;
	d.push_back(static_cast<uint8_t>((piv ? proto << 4 : 0) | codeset));
	d.push_back(static_cast<uint8_t>((piv ? 0x80 : 0) | assoc << 4 | type));
	d.push_back(0);
	d.push_back(static_cast<uint8_t>(value.size()));
	d.insert(d.end(), value.begin(), value.end());
}

void put_device_id(const Cmd *cmd, std::vector<uint8_t> &d)
{
	const LogicalUnit &lu = *cmd->lu;
	const uint8_t proto = protocol_of(*cmd->sess);
	// The LU: NAA (SPC-4 7.8.6; NAA 3h locally assigned unless configured), the name
	// Linux files /dev/disk/by-id/wwn-* under and multipath matches paths by.
	uint8_t naa[8];
	put_be64(naa, lu.naa());
	put_designator(d, proto, CODESET_BINARY, ASSOC_LU, DESIG_NAA, naa);
	// The LU again, T10 vendor ID based (SPC-4 7.8.6): the vendor, then the unit serial
	// number as vendor specific identifier, as the kernel's target does.
	std::vector<uint8_t> t10(8);
	put_ascii(t10.data(), 8, lu.cfg().vendor);
	for (char ch : lu.serial())
		t10.push_back(ch >= 0x20 && ch <= 0x7e ? static_cast<uint8_t>(ch) : ' ');
	t10.resize(std::min<size_t>(t10.size(), 255));
	put_designator(d, proto, CODESET_ASCII, ASSOC_LU, DESIG_T10_VENDOR, t10);
	// The target port this command came through: its relative target port identifier
	// (SPC-4 7.8.6), bytes 2..3 of a 4-byte designator.
	uint8_t rtpi[4] = {};
	put_be16(rtpi + 2, cmd->sess->id().rtpi);
	put_designator(d, proto, CODESET_BINARY, ASSOC_PORT, DESIG_RELATIVE_PORT, rtpi);
	// Its target port group (SPC-4 7.8.6, designator type 5h), when the LU has ALUA and
	// the port is in one of its groups (scsi/alua.h).
	if (uint16_t group; cmd->lu->alua_.port_state(cmd->sess->id().rtpi, &group, nullptr)) {
		uint8_t tpg[4] = {};
		put_be16(tpg + 2, group);
		put_designator(d, proto, CODESET_BINARY, ASSOC_PORT, DESIG_TARGET_PORT_GROUP, tpg);
	}
	// The target device by its iSCSI name (SPC-4 7.8.6, SCSI name string: UTF-8, null
	// terminated, padded with nulls to a multiple of 4). Other transports name their
	// target ports in ways the core does not know.
	if (proto == PROTO_ISCSI) {
		const std::string &name = cmd->sess->tpg().name();
		std::vector<uint8_t> s(name.begin(), name.end());
		s.resize(std::min<size_t>((s.size() + 4) & ~size_t(3), 252), 0);
		s.back() = 0;
		put_designator(d, proto, CODESET_UTF8, ASSOC_DEVICE, DESIG_SCSI_NAME, s);
	}
}

// SBC-3 6.5.3 block limits: page length 3Ch.
void put_block_limits(const LogicalUnit &lu, std::vector<uint8_t> &d)
{
	const LuConfig &c = lu.cfg();
	d.resize(64, 0);
	// WSNZ (sbc.h): whether WRITE SAME with a NUMBER OF LOGICAL BLOCKS of zero (the rest
	// of the medium) is refused; libiscsi checks sbc_write_same.cc against this bit.
	d[4] = kSbcWsnz ? 0x01 : 0x00;
	// MAXIMUM COMPARE AND WRITE LENGTH: one block, what COMPARE AND WRITE takes.
	d[5] = 1;
	// OPTIMAL TRANSFER LENGTH GRANULARITY: the physical block (SBC-3 6.5.3: transfers of
	// other multiples may be slower; on 512e, a write of part of a physical block makes
	// the medium read the rest of it first).
	put_be16(&d[6], static_cast<uint16_t>(lu.lbppb()));
	put_be32(&d[8], c.max_xfer_blocks);
	// OPTIMAL TRANSFER LENGTH (SBC-3 6.5.3): a whole number of physical blocks, at most
	// MAXIMUM TRANSFER LENGTH; Linux's sd ignores any other value. Both sizes are powers of
	// two, so the larger of the two is a multiple of the physical block.
	const uint32_t opt = std::max(
	    c.opt_xfer_blocks ? c.opt_xfer_blocks : kOptXferBytes / c.block_size, lu.lbppb());
	put_be32(&d[12], c.max_xfer_blocks ? std::min(opt, c.max_xfer_blocks) : opt);
	// MAXIMUM PREFETCH LENGTH 0: no PRE-FETCH.
	if (lu.thin()) {
		// UNMAP's limits (libiscsi: both nonzero when LBPU is set, zero otherwise), and
		// OPTIMAL UNMAP GRANULARITY: the backstore's real deallocation unit in blocks,
		// and never less than a physical block (a part of one cannot be deallocated on
		// its own), aligned where the physical blocks are (UGAVALID; UNMAP GRANULARITY
		// ALIGNMENT = LOWEST ALIGNED LOGICAL BLOCK ADDRESS).
		put_be32(&d[20], c.max_unmap_blocks);
		put_be32(&d[24], c.max_unmap_descs);
		put_be32(&d[28], std::max({uint32_t(1), lu.bs().unmap_granularity() / c.block_size,
		                           lu.lbppb()}));
		put_be32(&d[32], 0x80000000u | kSbcLowestAlignedLba);
	}
	put_be64(&d[36], c.max_write_same_blocks);
	// SBC-4 atomic writes (sbc_atomic.cc): MAXIMUM ATOMIC TRANSFER LENGTH, ATOMIC
	// ALIGNMENT (0: any LBA), ATOMIC TRANSFER LENGTH GRANULARITY 0 (none), and no atomic
	// boundaries (bytes 56..63 zero). All zero when WRITE ATOMIC is not offered.
	if (const uint32_t max = lu.atomic_max_blocks()) {
		put_be32(&d[44], max);
		put_be32(&d[48], lu.atomic_align_blocks());
	}
}

// SBC-3 6.5.2 block device characteristics: page length 3Ch.
void put_block_dev_chars(std::vector<uint8_t> &d)
{
	d.resize(64, 0);
	put_be16(&d[4], 0x0001); // MEDIUM ROTATION RATE: non-rotating medium
	// PRODUCT TYPE 0 (not indicated), WABEREQ/WACEREQ 0 (no SANITIZE), NOMINAL FORM
	// FACTOR 0 (not reported), FUAB/VBULS 0.
}

// SBC-3 6.5.4 logical block provisioning, for a thin LU (the only one that lists it):
// UNMAP (LBPU) and WRITE SAME (16) and (10) with UNMAP (LBPWS, LBPWS10) deallocate, and
// deallocated blocks read as zeros (LBPRZ, as in READ CAPACITY (16)); no anchored state;
// PROVISIONING TYPE 010b thin. THRESHOLD EXPONENT: the threshold set size (lbp.cc), the
// unit of the logical block provisioning log page's resource counts (spc_log.cc); the one
// threshold is the administrator's soft threshold (LuConfig), not one set through the
// logical block provisioning mode page, which is not offered.
void put_lb_provisioning(const LogicalUnit &lu, std::vector<uint8_t> &d)
{
	d.resize(8, 0);
	d[4] = lu.lbp_threshold_exponent();
	d[5] = 0x80 | 0x40 | 0x20 | 0x04;
	d[6] = 0x02;
}

// SPC-4 7.8.16 SCSI ports: a SCSI port designation descriptor per SCSI port through which
// the LU is reachable - every target port of every portal group that maps it (the Tpgs
// register with the LU: LogicalUnit::ports), not only the one this command came through,
// so that an initiator learns all its paths from one of them. Each port is named by its
// relative port identifier (the designator VPD 83h gives it). The protocol identifier
// (PIV) is given for this command's port only: a Tpg does not know its fabric, and the
// iSCSI target port name (name,t,0xTPGT) needs the portal group tag, which only the fabric
// knows.
void put_scsi_ports(const Cmd *cmd, std::vector<uint8_t> &d)
{
	const uint16_t mine = cmd->sess->id().rtpi;
	std::vector<uint16_t> ports = cmd->lu->ports();
	// A nexus's own port is always there (a LUN table not built through Tpg::add_lun,
	// as in a test, still has the port the command came on).
	if (std::find(ports.begin(), ports.end(), mine) == ports.end()) {
		ports.push_back(mine);
		std::sort(ports.begin(), ports.end());
	}
	for (uint16_t rtpi : ports) {
		std::vector<uint8_t> tp;
		uint8_t v[4] = {};
		put_be16(v + 2, rtpi);
		put_designator(tp, rtpi == mine ? protocol_of(*cmd->sess) : uint8_t(PROTO_NONE),
		               CODESET_BINARY, ASSOC_PORT, DESIG_RELATIVE_PORT, v);
		// Bytes 0..1 reserved, 2..3 RELATIVE PORT IDENTIFIER, 4..5 reserved, 6..7
		// INITIATOR PORT TRANSPORTID LENGTH 0 (no initiator port is singled out), then 2
		// reserved bytes and TARGET PORT DESCRIPTORS LENGTH.
		const size_t at = d.size();
		d.resize(at + 12, 0);
		put_be16(&d[at + 2], rtpi);
		put_be16(&d[at + 10], static_cast<uint16_t>(tp.size()));
		d.insert(d.end(), tp.begin(), tp.end());
	}
}

void exec_vpd(Cmd *cmd)
{
	const uint8_t page = cmd->cdb[2];
	const LogicalUnit &lu = *cmd->lu;
	std::vector<uint8_t> d(4, 0);
	d[0] = peripheral_byte(cmd);
	d[1] = page;
	switch (page) {
	case VPD_SUPPORTED_PAGES: {
		auto p = vpd_pages(lu);
		d.insert(d.end(), p.begin(), p.end());
		break;
	}
	case VPD_UNIT_SERIAL: {
		// SPC-4 7.8 unit serial number page: PRODUCT SERIAL NUMBER, ASCII.
		const std::string &sn = lu.serial();
		const size_t l = std::min<size_t>(sn.size(), 252);
		d.resize(4 + l);
		put_ascii(&d[4], l, sn);
		break;
	}
	case VPD_DEVICE_ID:
		put_device_id(cmd, d);
		break;
	case VPD_EXT_INQUIRY:
		put_ext_inquiry(lu, d);
		break;
	case VPD_SCSI_PORTS:
		put_scsi_ports(cmd, d);
		break;
	case VPD_THIRD_PARTY_COPY: // the copy manager's (3PC in the standard data)
		put_third_party_copy(d);
		break;
	case VPD_BLOCK_LIMITS:
		put_block_limits(lu, d);
		break;
	case VPD_BLOCK_DEV_CHARS:
		put_block_dev_chars(d);
		break;
	case VPD_LB_PROVISIONING:
		put_lb_provisioning(lu, d);
		break;
	}
	put_be16(&d[2], static_cast<uint16_t>(d.size() - 4)); // PAGE LENGTH
	complete_data_in(cmd, d);
}

} // namespace

void put_ascii(uint8_t *p, size_t len, std::string_view s)
{
	std::memset(p, ' ', len);
	for (size_t i = 0; i < std::min(len, s.size()); i++)
		if (s[i] >= 0x20 && s[i] <= 0x7e)
			p[i] = static_cast<uint8_t>(s[i]);
}

Sense inquiry_parse(Cmd *cmd)
{
	const uint8_t *c = cmd->cdb;
	// SPC-4 6.6.1: byte 1 is EVPD (bit 0); CMDDT (bit 1) is obsolete and the rest is
	// reserved: refused. A PAGE CODE without EVPD is an error (libiscsi's EVPD test).
	if (c[1] & 0xfe)
		return Sense::InvalidCdbField;
	const bool evpd = c[1] & 1;
	if (!evpd && c[2])
		return Sense::InvalidCdbField;
	// Any ALLOCATION LENGTH is valid, 0 included: the data is cut to it (libiscsi asks
	// with every length from 0 to 255).
	cmd->cdb_xfer = get_be16(c + 3);
	cmd->cdb_dir = DataDir::Read;
	if (!evpd) {
		cmd->execute = exec_std_inquiry;
		return Sense::None;
	}
	// The vital product data of a LUN that is not there cannot be returned (SPC-4 6.6.1:
	// INQUIRY fails only when the data cannot be given).
	if (!cmd->lu)
		return Sense::LunNotSupported;
	const auto pages = vpd_pages(*cmd->lu);
	if (std::find(pages.begin(), pages.end(), c[2]) == pages.end())
		return Sense::InvalidCdbField;
	cmd->execute = exec_vpd;
	return Sense::None;
}

} // namespace ulp::scsi
