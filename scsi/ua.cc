// SPDX-License-Identifier: MIT
// scsi/ua.cc - unit attention conditions (SPC-4 5.14, SAM-5 5.14).
//
// Conditions are queued per I_T nexus and reported one at a time, oldest first, by the
// next command that is not exempt (INQUIRY, REPORT LUNS, REQUEST SENSE); REQUEST SENSE
// returns one as its sense data. Reporting clears it (UA_INTLCK_CTRL 00b, the default of
// the control mode page). A nexus this LU has not seen yet starts with POWER ON, RESET, OR
// BUS DEVICE RESET OCCURRED, as after a power on (SAM-5 6.3.1): that is how an initiator
// learns that whatever it assumed about the LU before is void.
#include "scsi/core_internal.h"

#include <algorithm>

namespace ulp::scsi
{

namespace
{

// The nexus' queue, created with POWER ON on first sight. Under lu.ua_lock_.lock_all.
UaQueue &queue_of(LogicalUnit &lu, const NexusId &n)
{
	auto [it, fresh] = lu.ua_.try_emplace(n);
	if (fresh)
		it->second.push(UA_POWER_ON);
	return it->second;
}

} // namespace

void LogicalUnit::ua_add(const NexusId &n, uint16_t asc_ascq)
{
	ShardLockAll g(ua_lock_);
	queue_of(*this, n).push(asc_ascq);
}

void LogicalUnit::ua_add_all(uint16_t asc_ascq, const NexusId *except)
{
	ShardLockAll g(ua_lock_);
	for (auto &[n, q] : ua_)
		if (!except || n != *except)
			q.push(asc_ascq);
}

uint16_t LogicalUnit::ua_take(const NexusId &n)
{
	{
		// Every command asks (ua_check): a nexus with nothing queued is answered under
		// this thread's shard, which no other worker writes.
		std::lock_guard g(ua_lock_.mine());
		if (auto it = ua_.find(n); it != ua_.end() && it->second.empty())
			return 0;
	}
	ShardLockAll g(ua_lock_);
	return queue_of(*this, n).take();
}

bool LogicalUnit::ua_pending(const NexusId &n)
{
	{
		std::lock_guard g(ua_lock_.mine());
		if (auto it = ua_.find(n); it != ua_.end())
			return !it->second.empty();
	}
	ShardLockAll g(ua_lock_); // first sight: POWER ON is queued
	return !queue_of(*this, n).empty();
}

void LogicalUnit::ua_clear(const NexusId &n, uint16_t asc_ascq)
{
	ShardLockAll g(ua_lock_);
	queue_of(*this, n).erase(asc_ascq);
}

void LogicalUnit::ua_add_if_seen(const NexusId &n, uint16_t asc_ascq)
{
	ShardLockAll g(ua_lock_);
	if (auto it = ua_.find(n); it != ua_.end())
		it->second.push(asc_ascq);
}

void LogicalUnit::ua_clear_if_seen(const NexusId &n, uint16_t asc_ascq)
{
	ShardLockAll g(ua_lock_);
	if (auto it = ua_.find(n); it != ua_.end())
		it->second.erase(asc_ascq);
}

void LogicalUnit::ua_reset()
{
	ShardLockAll g(ua_lock_);
	ua_.clear();
	ua_lost_n_ = 0;
}

void LogicalUnit::ua_nexus_lost(const NexusId &n)
{
	ShardLockAll g(ua_lock_);
	auto it = ua_.find(n);
	if (it == ua_.end())
		return; // never used this LU: it hears POWER ON if it comes
	it->second.push(UA_I_T_NEXUS_LOSS);
	if (!it->second.lost)
		ua_lost_n_++;
	it->second.lost = ++ua_lost_seq_;
	// Over the bound: forget the nexus lost longest ago (a scan: losses are rare next to
	// commands, and the table is at most the live nexuses and kMaxLostUa).
	while (ua_lost_n_ > kMaxLostUa) {
		auto oldest = ua_.end();
		for (auto i = ua_.begin(); i != ua_.end(); ++i)
			if (i->second.lost &&
			    (oldest == ua_.end() || i->second.lost < oldest->second.lost))
				oldest = i;
		ua_.erase(oldest);
		ua_lost_n_--;
	}
}

void LogicalUnit::ua_nexus_back(const NexusId &n)
{
	ShardLockAll g(ua_lock_);
	if (auto it = ua_.find(n); it != ua_.end() && it->second.lost) {
		it->second.lost = 0;
		ua_lost_n_--;
	}
}

size_t LogicalUnit::ua_nexuses()
{
	std::lock_guard g(ua_lock_.mine());
	return ua_.size();
}

void ua_reported(Cmd *cmd, uint16_t asc_ascq)
{
	// SPC-4 7.8.7 LUICLR (set in the Extended INQUIRY Data page, spc_vpd_ext.cc): REPORTED
	// LUNS DATA HAS CHANGED reported for one LU is cleared on every LU of the I_T nexus;
	// the LUN inventory is the nexus', and one report of its change is enough.
	if (asc_ascq == UA_REPORTED_LUNS_CHANGED)
		cmd->sess->ua_clear_everywhere(asc_ascq);
}

bool ua_check(Cmd *cmd)
{
	// SPC-4 5.14 (and its REPORT LUNS command): these report no unit attention; REQUEST SENSE
	// returns it as its data instead (spc.cc).
	const uint8_t op = cmd->cdb[0];
	if (!cmd->lu || op == OP_INQUIRY || op == OP_REPORT_LUNS || op == OP_REQUEST_SENSE)
		return false;
	uint16_t c = cmd->lu->ua_take(cmd->sess->id());
	if (!c)
		return false;
	ua_reported(cmd, c);
	cmd->status = Status::CheckCondition;
	cmd->sense_len = build_sense(Sense::UnitAttention, cmd->sense, c);
	return true;
}

} // namespace ulp::scsi
