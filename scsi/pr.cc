// SPDX-License-Identifier: MIT
// scsi/pr.cc - reservations (placeholder until the PR implementation lands: no
// reservation ever exists, and the reservation commands are not offered).
#include "scsi/pr.h"

namespace ulp::scsi
{

struct PrState {
};

void PrStateFree::operator()(PrState *s) const
{
	delete s;
}

PrStatePtr pr_state_create()
{
	return PrStatePtr(new PrState);
}

Sense pr_check(Cmd *)
{
	return Sense::None;
}

void pr_lun_reset(LogicalUnit &) {}
void pr_nexus_loss(LogicalUnit &, const Nexus &) {}

Sense pr_in_parse(Cmd *)
{
	return Sense::UnsupportedOpcode;
}
Sense pr_out_parse(Cmd *)
{
	return Sense::UnsupportedOpcode;
}
Sense reserve_parse(Cmd *)
{
	return Sense::UnsupportedOpcode;
}
Sense release_parse(Cmd *)
{
	return Sense::UnsupportedOpcode;
}

} // namespace ulp::scsi
