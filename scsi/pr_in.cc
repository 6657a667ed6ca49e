// SPDX-License-Identifier: MIT
// scsi/pr_in.cc - PERSISTENT RESERVE IN (SPC-4 6.16): READ KEYS, READ RESERVATION, REPORT
// CAPABILITIES, READ FULL STATUS (the kernel's core_scsi3_emulate_pr_in).
//
// Every service action builds its whole parameter data under the reservation lock, then
// hands it to complete_data_in, which moves what the allocation length and the transport's
// expected length allow: the length fields always describe the whole data (SPC-4 4.2.5.6:
// the allocation length truncates, it does not change the data).
#include "scsi/pr_internal.h"

#include <vector>

namespace ulp::scsi
{

namespace
{

// SPC-4 6.16.4 table 166 (REPORT CAPABILITIES), bytes 2 and 3.
enum : uint8_t {
	CAP_PTPL_C = 1u << 0, // persist through power loss capable: with a state store
	CAP_ATP_C = 1u << 2,  // ALL_TG_PT supported
	CAP_SIP_C = 1u << 3,  // SPEC_I_PT supported: where the state is shared (pr_shared.cc)
	CAP_CRH = 1u << 4,    // SPC-4 5.13.3 exceptions to RESERVE/RELEASE: yes
	CAP_TMV = 1u << 7,    // the type mask is valid
	// ALLOW COMMANDS 011b: TEST UNIT READY passes Write Exclusive and Exclusive Access
	// reservations, and the commands of table 66 that read state (MODE SENSE, READ BUFFER,
	// RECEIVE DIAGNOSTIC RESULTS, REPORT SUPPORTED OPERATION CODES, ...) pass Write
	// Exclusive ones (pr_check.cc, PrAccess::Read).
	CAP_ALLOW_COMMANDS = 0x3 << 4,
};
// Byte 3 bit 0: PTPL_A, persist through power loss activated (the last valid APTPL bit).
constexpr uint8_t CAP_PTPL_A = 1u << 0;
// Byte 4 and 5: PERSISTENT RESERVATION TYPE MASK, every type.
constexpr uint8_t kTypeMask4 = 0x80 /* WR_EX_AR */ | 0x40 /* EX_AC_RO */ | 0x20 /* WR_EX_RO */ |
                               0x08 /* EX_AC */ | 0x02 /* WR_EX */;
constexpr uint8_t kTypeMask5 = 0x01; // EX_AC_AR

// The 8-byte header of READ KEYS, READ RESERVATION and READ FULL STATUS: PRGENERATION and
// ADDITIONAL LENGTH (filled in last).
std::vector<uint8_t> header(const PrState &pr)
{
	std::vector<uint8_t> d(8, 0);
	put_be32(&d[0], pr.generation);
	return d;
}

void set_additional_length(std::vector<uint8_t> &d)
{
	put_be32(&d[4], static_cast<uint32_t>(d.size() - 8));
}

// SPC-4 6.16.2: the reservation key of every registration.
std::vector<uint8_t> read_keys(const PrState &pr)
{
	std::vector<uint8_t> d = header(pr);
	for (const Registration &r : pr.regs) {
		d.resize(d.size() + 8);
		put_be64(&d[d.size() - 8], r.key);
	}
	set_additional_length(d);
	return d;
}

// SPC-4 6.16.3: the reservation, if any: its key (zero for the all-registrants types, which
// no single key holds), scope and type.
std::vector<uint8_t> read_reservation(const PrState &pr)
{
	std::vector<uint8_t> d = header(pr);
	if (pr.type != PrType::None) {
		d.resize(8 + 16, 0);
		const Registration *h = pr.holder_reg();
		put_be64(&d[8], pr_all_registrants(pr.type) || !h ? 0 : h->key);
		d[8 + 13] = static_cast<uint8_t>(kPrScopeLu << 4 | uint8_t(pr.type));
	}
	set_additional_length(d);
	return d;
}

// SPC-4 6.16.4: PTPL_C when the LU has a state store or its state is shared (APTPL 1 is
// accepted), PTPL_A when the last valid APTPL bit was one (pr_persist.cc, pr_shared.cc);
// SIP_C where the state is shared.
std::vector<uint8_t> report_capabilities(const PrState &pr)
{
	std::vector<uint8_t> d(8, 0);
	put_be16(&d[0], 8);
	d[2] = CAP_CRH | CAP_ATP_C | (pr.store || pr.shared ? CAP_PTPL_C : 0) |
	       (pr.shared ? CAP_SIP_C : 0);
	d[3] = CAP_TMV | CAP_ALLOW_COMMANDS | (pr.aptpl ? CAP_PTPL_A : 0);
	d[4] = kTypeMask4;
	d[5] = kTypeMask5;
	return d;
}

// SPC-4 6.16.5: a descriptor per registration, with its holder status and TransportID.
std::vector<uint8_t> read_full_status(const PrState &pr)
{
	std::vector<uint8_t> d = header(pr);
	for (const Registration &r : pr.regs) {
		const size_t at = d.size();
		d.resize(at + 24, 0);
		put_be64(&d[at], r.key);
		const bool holder = pr.holds(&r);
		d[at + 12] = static_cast<uint8_t>((r.all_tg_pt ? 0x02 : 0) | (holder ? 0x01 : 0));
		if (holder)
			d[at + 13] = static_cast<uint8_t>(kPrScopeLu << 4 | uint8_t(pr.type));
		put_be16(&d[at + 18], r.nexus.rtpi);
		transport_id_build(r.proto, r.nexus.initiator_port, d);
		put_be32(&d[at + 20], static_cast<uint32_t>(d.size() - at - 24));
	}
	set_additional_length(d);
	return d;
}

void exec_pr_in(Cmd *cmd)
{
	// A state shared with other gateways is read where they all write it (pr_shared.cc).
	if (pr_of(*cmd->lu).shared) {
		pr_shared_in(cmd);
		return;
	}
	complete_data_in(cmd, pr_in_data(cmd));
}

} // namespace

std::vector<uint8_t> pr_in_data(Cmd *cmd)
{
	PrState &pr = pr_of(*cmd->lu);
	std::lock_guard g(pr.lock);
	switch (PrInSa(cmd->cdb[1] & 0x1f)) {
	case PrInSa::ReadKeys:
		return read_keys(pr);
	case PrInSa::ReadReservation:
		return read_reservation(pr);
	case PrInSa::ReportCapabilities:
		return report_capabilities(pr);
	case PrInSa::ReadFullStatus:
		return read_full_status(pr);
	}
	return {}; // parsing lets nothing else through
}

Sense pr_in_parse(Cmd *cmd)
{
	const uint8_t *c = cmd->cdb;
	// SPC-4 6.16.1: service actions 04h..1Fh are reserved.
	if ((c[1] & 0x1f) > uint8_t(PrInSa::ReadFullStatus))
		return Sense::InvalidCdbField;
	cmd->cdb_xfer = get_be16(c + 7);
	cmd->cdb_dir = DataDir::Read;
	cmd->execute = exec_pr_in;
	return Sense::None;
}

} // namespace ulp::scsi
