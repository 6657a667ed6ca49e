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
std::deque<uint16_t> &queue_of(LogicalUnit &lu, const NexusId &n)
{
	auto [it, fresh] = lu.ua_.try_emplace(n);
	if (fresh)
		it->second.push_back(UA_POWER_ON);
	return it->second;
}

// SPC-4 5.14: a condition already queued is not queued twice; a queue that would grow
// without bound keeps its newest conditions (a nexus that never reads them).
constexpr size_t kMaxUa = 16;

void push(std::deque<uint16_t> &q, uint16_t asc_ascq)
{
	if (std::find(q.begin(), q.end(), asc_ascq) != q.end())
		return;
	if (q.size() == kMaxUa)
		q.pop_front();
	q.push_back(asc_ascq);
}

} // namespace

void LogicalUnit::ua_add(const NexusId &n, uint16_t asc_ascq)
{
	ShardLockAll g(ua_lock_);
	push(queue_of(*this, n), asc_ascq);
}

void LogicalUnit::ua_add_all(uint16_t asc_ascq, const NexusId *except)
{
	ShardLockAll g(ua_lock_);
	for (auto &[n, q] : ua_)
		if (!except || n != *except)
			push(q, asc_ascq);
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
	auto &q = queue_of(*this, n);
	if (q.empty())
		return 0;
	uint16_t c = q.front();
	q.pop_front();
	return c;
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
	auto &q = queue_of(*this, n);
	q.erase(std::remove(q.begin(), q.end(), asc_ascq), q.end());
}

void LogicalUnit::ua_add_if_seen(const NexusId &n, uint16_t asc_ascq)
{
	ShardLockAll g(ua_lock_);
	if (auto it = ua_.find(n); it != ua_.end())
		push(it->second, asc_ascq);
}

void LogicalUnit::ua_clear_if_seen(const NexusId &n, uint16_t asc_ascq)
{
	ShardLockAll g(ua_lock_);
	if (auto it = ua_.find(n); it != ua_.end())
		std::erase(it->second, asc_ascq);
}

void LogicalUnit::ua_reset()
{
	ShardLockAll g(ua_lock_);
	ua_.clear();
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
	cmd->status = Status::CheckCondition;
	cmd->sense_len = build_sense(Sense::UnitAttention, cmd->sense, c);
	return true;
}

} // namespace ulp::scsi
