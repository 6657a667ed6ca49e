// SPDX-License-Identifier: MIT
// scsi/pr.cc - a logical unit's reservation state: its lifetime, what resets and lost
// I_T nexuses do to it, unregistering, and the unit attentions reservation changes raise
// (the kernel's target_core_pr.c; the commands are in pr_in.cc, pr_out.cc, pr_spc2.cc, the
// conflict tables in pr_check.cc).
#include "scsi/pr_internal.h"

#include "scsi/fabric.h"

#include <algorithm>
#include <cstring>

namespace ulp::scsi
{

void PrStateFree::operator()(PrState *s) const
{
	delete s;
}

PrStatePtr pr_state_create()
{
	return PrStatePtr(new PrState);
}

std::vector<NexusId> pr_nexuses(LogicalUnit &lu, const Registration &r)
{
	std::vector<NexusId> v{r.nexus};
	if (!r.all_tg_pt)
		return v;
	// ALL_TG_PT: the initiator port through every target port. The LU does not know its
	// target ports, but every I_T nexus that has sent it a command has a unit attention
	// queue (ua.cc): those are the ones that can have tasks or hear a condition.
	std::lock_guard g(lu.ua_lock_.mine());
	for (const auto &[n, q] : lu.ua_)
		if (r.covers(n) && n != r.nexus)
			v.push_back(n);
	return v;
}

void pr_ua(LogicalUnit &lu, PrState &pr, const Registration &r, uint16_t asc_ascq)
{
	if (pr.record) {
		pr.record->push_back({PrEvent::Ua, asc_ascq, r.nexus, r.all_tg_pt});
		return;
	}
	for (const NexusId &n : pr_nexuses(lu, r))
		lu.ua_add(n, asc_ascq);
}

void pr_unregister(LogicalUnit &lu, PrState &pr, const Registration *r)
{
	const bool held = pr.holds(r);
	const PrType type = pr.type;
	auto it = pr.regs.begin() + (r - pr.regs.data());
	pr.regs.erase(it); // r dangles from here on
	if (!held)
		return;
	if (pr_all_registrants(type)) {
		// SPC-4 5.13.11.3: an all-registrants reservation lasts while anyone is
		// registered.
		if (pr.regs.empty())
			pr.release();
		return;
	}
	pr.release();
	// SPC-4 5.13.11.3: a registrants-only reservation released by its holder unregistering
	// is news to the other registrants (their access changes): RESERVATIONS RELEASED.
	if (type == PrType::WriteExclusiveRegOnly || type == PrType::ExclusiveAccessRegOnly)
		for (const Registration &o : pr.regs)
			pr_ua(lu, pr, o, UA_RESERVATIONS_RELEASED);
}

ProtoId pr_proto_of(const Nexus &s)
{
	// iSER carries iSCSI (RFC 7145), and names initiator ports as iSCSI does; the loopback
	// fabric's tests use iSCSI names too.
	return std::strcmp(s.fabric().name(), "srpt") == 0 ? ProtoId::Srp : ProtoId::Iscsi;
}

// SAM-5 6.3.3 / SPC-2 5.5.1: a LOGICAL UNIT RESET releases an SPC-2 reservation. Persistent
// reservations and registrations are unaffected (SPC-4 5.13.2).
void pr_lun_reset(LogicalUnit &lu)
{
	PrState &pr = pr_of(lu);
	std::lock_guard g(pr.lock);
	pr.spc2.reset();
	pr.sync();
}

// SPC-2 5.5.1: an I_T nexus loss releases the SPC-2 reservation that nexus held. Persistent
// reservations survive it (SPC-4 5.13.2).
void pr_nexus_loss(LogicalUnit &lu, const NexusId &n)
{
	PrState &pr = pr_of(lu);
	std::lock_guard g(pr.lock);
	if (pr.spc2 && *pr.spc2 == n) {
		pr.spc2.reset();
		pr.sync();
	}
}

// SPC-4 5.13.5: registrations and the persistent reservation outlast a power loss only
// while the last valid APTPL bit is one; the SPC-2 reservation never does (SPC-2 5.5.1).
// "Regardless of the APTPL bit value" the PRgeneration counter starts again at 0 (SPC-4
// 6.16.2). With APTPL active the state kept is the one the state file holds: every change
// is in it before its command completed (pr_out.cc), and one still being written is the
// command's, in flight across this reset as across a power loss.
//
// A state shared by gateways (pr_shared.cc) is not this target's to lose: the LU goes on
// through the other gateways, its state in the store they share, and a reset of one of them
// is no power loss of the LU. Only the SPC-2 reservation, which is this gateway's, goes.
void pr_power_on(LogicalUnit &lu)
{
	PrState &pr = pr_of(lu);
	std::lock_guard g(pr.lock);
	pr.spc2.reset();
	if (pr.shared) {
		pr.sync();
		return;
	}
	pr.generation = 0;
	if (pr.aptpl) {
		pr.sync();
		return;
	}
	pr.regs.clear();
	pr.release();
}

} // namespace ulp::scsi
