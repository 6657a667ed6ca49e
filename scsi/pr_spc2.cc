// SPDX-License-Identifier: MIT
// scsi/pr_spc2.cc - RESERVE(6)/(10) and RELEASE(6)/(10) (SPC-2 7.17 to 7.22): the older,
// whole-LU reservation of one I_T nexus, and how it gives way to persistent reservations
// (SPC-4 5.13.3, CRH 1; the kernel's target_scsi2_reservation_reserve/release).
//
// The SPC-2 reservation lasts until its holder releases it, a LOGICAL UNIT RESET, or the
// holder's I_T nexus is lost (pr.cc). Third-party and extent reservations (obsolete since
// SPC-2) are not offered.
#include "scsi/pr_internal.h"

namespace ulp::scsi
{

namespace
{

// RESERVE(10)/RELEASE(10) byte 1 (SPC-2 7.18, 7.22): 3RDPTY (bit 4) and LONGID (bit 1) ask
// for a third-party reservation, bit 0 (obsolete) for an extent one. The 6-byte forms carry
// the obsolete SCSI-2 fields in the same places (3RDPTY, EXTENT).
constexpr uint8_t kThirdParty = 0x10;
constexpr uint8_t kLongId = 0x02;
constexpr uint8_t kExtent = 0x01;

// SPC-4 5.13.3: with persistent reservations present, RESERVE and RELEASE complete with GOOD
// and change nothing when they come from the persistent reservation holder, or from a
// registrant under a registrants-only or all-registrants reservation (None: go on). Any
// other I_T nexus conflicts as long as anyone is registered (SPC-2 5.5.1). Under pr.lock.
std::optional<Sense> crh(PrState &pr, const NexusId &n)
{
	const Registration *r = pr.find(n);
	if (r && (pr.holds(r) || (pr.type != PrType::None && pr_registrants_share(pr.type))))
		return Sense::None;
	if (!pr.regs.empty())
		return Sense::ReservationConflict;
	return std::nullopt;
}

void exec_reserve(Cmd *cmd)
{
	PrState &pr = pr_of(*cmd->lu);
	const NexusId &n = cmd->sess->id();
	Sense s = Sense::None;
	{
		std::lock_guard g(pr.lock);
		if (auto c = crh(pr, n)) {
			s = *c;
		} else if (pr.spc2 && *pr.spc2 != n) {
			// SPC-2 7.21: the LU is another I_T nexus's. Reserving again what one holds
			// is not an error.
			s = Sense::ReservationConflict;
		} else {
			pr.spc2 = n;
			pr.sync();
		}
	}
	if (s == Sense::None)
		complete_good(cmd);
	else
		complete_sense(cmd, s);
}

void exec_release(Cmd *cmd)
{
	PrState &pr = pr_of(*cmd->lu);
	const NexusId &n = cmd->sess->id();
	Sense s = Sense::None;
	{
		std::lock_guard g(pr.lock);
		if (auto c = crh(pr, n)) {
			s = *c;
		} else if (pr.spc2 && *pr.spc2 == n) {
			pr.spc2.reset();
			pr.sync();
		}
		// SPC-2 7.17: releasing a reservation one does not hold (or none) is not an
		// error, and changes nothing.
	}
	if (s == Sense::None)
		complete_good(cmd);
	else
		complete_sense(cmd, s);
}

Sense check_cdb(const Cmd *cmd)
{
	// Without LONGID there is no parameter list to fetch (cdb_xfer stays 0).
	if (cmd->cdb[1] & (kThirdParty | kLongId | kExtent))
		return Sense::InvalidCdbField;
	return Sense::None;
}

} // namespace

Sense reserve_parse(Cmd *cmd)
{
	if (Sense r = check_cdb(cmd); r != Sense::None)
		return r;
	cmd->execute = exec_reserve;
	return Sense::None;
}

Sense release_parse(Cmd *cmd)
{
	if (Sense r = check_cdb(cmd); r != Sense::None)
		return r;
	cmd->execute = exec_release;
	return Sense::None;
}

} // namespace ulp::scsi
