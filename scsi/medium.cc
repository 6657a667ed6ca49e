// SPDX-License-Identifier: MIT
// scsi/medium.cc - a removable medium (LuConfig::removable; INQUIRY's RMB bit): START STOP
// UNIT with LOEJ ejects and loads it (SBC-3 5.25), PREVENT ALLOW MEDIUM REMOVAL locks it in
// (SPC-4 6.13, SBC-3 5.13), and without it the commands that need it fail with NOT READY,
// MEDIUM NOT PRESENT. The backstore stays attached while the medium is "out": ejecting is
// the logical unit's state, like a tray opened on a drive whose disc has nowhere to go, and
// loading brings the same medium back.
//
// Prevention (SPC-4 6.13) belongs to the I_T nexuses that asked for it, and removal is
// prevented while any of them does. It ends for a nexus with PREVENT ALLOW MEDIUM REMOVAL
// 00b or that nexus' loss (logout, I_T NEXUS RESET, a dropped connection), and for every
// nexus with a reset of the LU (LOGICAL UNIT RESET, TARGET WARM RESET, TARGET COLD RESET).
// While it lasts, a LOEJ in either direction fails with MEDIUM REMOVAL PREVENTED: the
// medium does not move (libiscsi PreventAllow.Eject asks that of a load too).
//
// Loading brings back the medium that was ejected, unchanged, so there is no NOT READY TO
// READY CHANGE, MEDIUM MAY HAVE CHANGED to report: what initiators cached of it is still
// true. Nexuses that sent a command meanwhile were told NOT READY, MEDIUM NOT PRESENT.
#include "scsi/core_internal.h"

#include <mutex>

namespace ulp::scsi
{

Sense LogicalUnit::medium_load_eject(bool load)
{
	std::lock_guard g(medium_lock_);
	if (!prevent_.empty())
		return Sense::MediumRemovalPrevented;
	medium_out_.store(!load, std::memory_order_release);
	return Sense::None;
}

void LogicalUnit::medium_prevent(const NexusId &n, bool prevent)
{
	std::lock_guard g(medium_lock_);
	if (prevent)
		prevent_.insert(n);
	else
		prevent_.erase(n);
}

void LogicalUnit::medium_nexus_loss(const NexusId &n)
{
	medium_prevent(n, false);
}

void LogicalUnit::medium_reset()
{
	std::lock_guard g(medium_lock_);
	prevent_.clear();
}

bool LogicalUnit::medium_prevented()
{
	std::lock_guard g(medium_lock_);
	return !prevent_.empty();
}

bool medium_needed(const Cmd *cmd)
{
	// Without a medium, what asks about the logical unit itself, its state, its
	// parameters and its reservations works, and so do the two commands that change the
	// medium's state; everything else - the medium's data, its capacity (READ CAPACITY
	// describes the medium), and TEST UNIT READY, which asks just that - fails with NOT
	// READY, MEDIUM NOT PRESENT.
	switch (cmd->cdb[0]) {
	case OP_INQUIRY:
	case OP_REPORT_LUNS:
	case OP_REQUEST_SENSE:
	case OP_START_STOP_UNIT:
	case OP_PREVENT_ALLOW:
	case OP_MODE_SENSE_6:
	case OP_MODE_SENSE_10:
	case OP_MODE_SELECT_6:
	case OP_MODE_SELECT_10:
	case OP_MAINTENANCE_IN:
	case OP_MAINTENANCE_OUT:
	case OP_SEND_DIAGNOSTIC:
	case OP_PERSISTENT_RESERVE_IN:
	case OP_PERSISTENT_RESERVE_OUT:
	case OP_RESERVE_6:
	case OP_RESERVE_10:
	case OP_RELEASE_6:
	case OP_RELEASE_10:
		return false;
	default:
		return true;
	}
}

} // namespace ulp::scsi
