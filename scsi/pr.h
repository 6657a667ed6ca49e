// SPDX-License-Identifier: MIT
// scsi/pr.h - reservations: SPC-4 persistent reservations (PERSISTENT RESERVE IN/OUT) and
// the SPC-2 RESERVE / RELEASE they replaced, per logical unit (the kernel's
// target_core_pr.c).
//
// The core asks pr_check() before it executes any command on a reserved LU, and tells pr.cc
// about resets and lost nexuses; spc_parse hands the four reservation commands to the
// parse functions here. Registrations and the reservation belong to I_T nexuses (NexusId:
// initiator port + relative target port id); a registration made with ALL_TG_PT belongs to
// the initiator port through every target port.
//
// Offered (PERSISTENT RESERVE IN REPORT CAPABILITIES says so): every service action of
// SPC-4 but REPLACE LOST RESERVATION, every reservation type, ALL_TG_PT, REGISTER AND MOVE
// to the target port the command came through, the SPC-4 5.13.3 exceptions for RESERVE and
// RELEASE (CRH), and APTPL 1 (persist through power loss: PTPL_C) on a LU with a state
// store (pr_attach_store; scsi/pr_store.h). A LU that several gateways serve shares its
// state through a store they all reach (pr_attach_shared; scsi/pr_shared.h): PTPL_C, and
// SPEC_I_PT and REGISTER AND MOVE to the other gateways' ports as well. Refused: SPEC_I_PT
// and APTPL 1 on a LU with neither. The files: pr.cc (state, resets), pr_check.cc (conflict
// tables), pr_in.cc, pr_out.cc, pr_spc2.cc (the commands), pr_transport_id.cc,
// pr_persist.cc (the state file), pr_shared.cc (the shared state); pr_internal.h is what
// they share.
#pragma once

#include "scsi/cmd.h"
#include "scsi/lu.h"

#include <memory>
#include <string>

namespace ulp::scsi
{

// The LU's reservation state (opaque outside the pr*.cc files, which share pr_internal.h;
// owned by LogicalUnit::pr_, freed through PrStateFree, lu.h).
PrStatePtr pr_state_create();

// SPC-4 5.13.1 (table "SPC commands that are allowed in the presence of various
// reservations"), SBC-3's table for block commands, and SPC-2 annex B:
// Sense::ReservationConflict when cmd (already parsed: its opcode and CDB are known) may not
// run on its LU for its nexus; Sense::None otherwise. Decided by the CDB alone (operation
// code, service action, the fields the tables single out), so it holds for commands of any
// family. PERSISTENT RESERVE OUT passes here: its service actions are judged where they run.
// Lock-free when the LU is not reserved.
Sense pr_check(Cmd *cmd);

// LOGICAL UNIT RESET: an SPC-2 reservation is released; persistent ones survive.
void pr_lun_reset(LogicalUnit &lu);
// I_T nexus loss: an SPC-2 reservation held by n is released; persistent ones survive.
void pr_nexus_loss(LogicalUnit &lu, const NexusId &n);
// Power on (TARGET COLD RESET): the SPC-2 reservation goes, PRgeneration starts again at 0;
// registrations and the persistent reservation survive only with APTPL active (SPC-4
// 5.13.5), as they do a restart of the target.
void pr_power_on(LogicalUnit &lu);

// ---- Persist through power loss (pr_persist.cc) -------------------------------------------

class PrStore;

// What loading a LU's state file found.
enum class PrLoad : uint8_t {
	Ok,          // a valid file: its registrations and reservation are the LU's now
	NoState,     // no file: APTPL was not active; the LU starts with no registrations
	Unreadable,  // the file exists but cannot be read (I/O error, not a regular file, huge)
	Truncated,   // shorter than its header, or than the length it records (torn)
	BadMagic,    // not a ulp reservation state file
	BadVersion,  // a format version this build does not know
	BadChecksum, // the CRC32C does not match the contents (corrupt)
	WrongLu,     // a valid file of another logical unit (name or NAA differ)
	Malformed,   // checksum right, contents inconsistent (bad lengths, types, holder)
};
const char *pr_load_name(PrLoad r);

// The state file's name for lu in a store's directory: its name with every byte but
// [A-Za-z0-9._-] written %XX (so that distinct names give distinct files), then ".pr".
std::string pr_state_file(const LogicalUnit &lu);

// Give lu a state store, before it is exported (no command may run on it yet): load its
// state file and make APTPL 1 possible (PTPL_C 1). Ok and NoState attach; anything else
// leaves lu without a store and its reservation state untouched, and *why names the file,
// what is wrong with it, and the way out (move the file aside: the LU then starts without
// registrations). The store must outlive lu.
PrLoad pr_attach_store(LogicalUnit &lu, PrStore &store, std::string *why);

// Parse functions for spc_parse (same contract as the families', core_internal.h).
Sense pr_in_parse(Cmd *cmd);   // PERSISTENT RESERVE IN
Sense pr_out_parse(Cmd *cmd);  // PERSISTENT RESERVE OUT
Sense reserve_parse(Cmd *cmd); // RESERVE (6) and (10)
Sense release_parse(Cmd *cmd); // RELEASE (6) and (10)

} // namespace ulp::scsi
