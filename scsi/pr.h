// SPDX-License-Identifier: MIT
// scsi/pr.h - reservations: SPC-4 persistent reservations (PERSISTENT RESERVE IN/OUT) and
// the SPC-2 RESERVE / RELEASE they replaced, per logical unit (the kernel's
// target_core_pr.c).
//
// The core asks pr_check() before it executes any command on a reserved LU, and tells pr.cc
// about resets and lost nexuses; spc_parse hands the four reservation commands to the
// parse functions here. Registrations and the reservation belong to I_T nexuses (Nexus:
// initiator port + relative target port id).
#pragma once

#include "scsi/cmd.h"
#include "scsi/lu.h"

#include <memory>

namespace ulp::scsi
{

// The LU's reservation state (opaque outside pr.cc; owned by LogicalUnit::pr_, freed
// through PrStateFree, lu.h).
PrStatePtr pr_state_create();

// SPC-4 5.13.1 (table "SPC commands that are allowed in the presence of various
// reservations") and SPC-2 7.21: Sense::ReservationConflict when cmd (already parsed: its
// opcode and flags are known) may not run on its LU for its nexus; Sense::None otherwise.
Sense pr_check(Cmd *cmd);

// LOGICAL UNIT RESET: an SPC-2 reservation is released; persistent ones survive.
void pr_lun_reset(LogicalUnit &lu);
// I_T nexus loss: an SPC-2 reservation held by n is released; persistent ones survive.
void pr_nexus_loss(LogicalUnit &lu, const Nexus &n);

// Parse functions for spc_parse (same contract as the families', core_internal.h).
Sense pr_in_parse(Cmd *cmd);   // PERSISTENT RESERVE IN
Sense pr_out_parse(Cmd *cmd);  // PERSISTENT RESERVE OUT
Sense reserve_parse(Cmd *cmd); // RESERVE (6) and (10)
Sense release_parse(Cmd *cmd); // RELEASE (6) and (10)

} // namespace ulp::scsi
