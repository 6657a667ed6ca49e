// SPDX-License-Identifier: MIT
// scsi/lbp.cc - logical block provisioning thresholds (SBC-3 4.7.3.7): the threshold set
// size a thin LU reports (VPD B2h THRESHOLD EXPONENT; the unit of the logical block
// provisioning log page's resource counts, spc_log.cc), and the soft threshold of
// LuConfig::tp_soft_threshold_pct with its unit attention, THIN PROVISIONING SOFT
// THRESHOLD REACHED (38h/07h).
//
// The threshold is the administrator's (the LUN table), not set through the logical block
// provisioning mode page (1Ch/02h), which the device server does not offer. Its unit
// attention goes to every I_T nexus of the LU (the mode page's SITUA 0 behaviour) through
// the ordinary queues (ua.cc), once per upward crossing (SBC-3 4.7.3.7: a threshold is
// armed in one direction; it is not reported again until usage has gone back below it).
// Two checks racing on either side of the threshold may re-arm and raise it once more; a
// unit attention not yet reported is not queued twice (UaQueue), so a nexus hears at most
// one more.
#include "scsi/core_internal.h"

#include "core/log.h"

#include <algorithm>
#include <bit>
#include <ctime>

namespace ulp::scsi
{

namespace
{

int64_t mono_ns()
{
	timespec ts;
	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	return int64_t(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

} // namespace

uint8_t LogicalUnit::lbp_threshold_exponent() const
{
	if (!thin())
		return 0;
	// At least the unit in which storage is really freed (VPD B0h's OPTIMAL UNMAP
	// GRANULARITY): a finer threshold set counts what cannot be allocated on its own.
	const uint32_t gran = std::max({1u, bs().unmap_granularity() / block_size(), lbppb()});
	unsigned e = std::max(1, int(std::bit_width(gran)) - 1);
	// SBC-3 6.5.4: capacity / 2^e < 2^32.
	while (e < 63 && (nr_blocks() >> e) >= (uint64_t(1) << 32))
		e++;
	return static_cast<uint8_t>(e);
}

void LogicalUnit::lbp_check(int *pct)
{
	if (pct)
		*pct = -1;
	BsUsage u;
	const uint64_t size = bs().size();
	if (!thin() || !size || bs().usage(&u) < 0)
		return;
	// A file may hold more than the LU (its tail past the capacity): count the LU's part.
	const int p = static_cast<int>(std::min(u.used, size) * 100 / size);
	if (pct)
		*pct = p;
	const int t = cfg().tp_soft_threshold_pct;
	if (!t)
		return;
	if (p >= t) {
		// One unit attention per crossing, whoever sees it first.
		if (!lbp_soft_reached_.exchange(true, std::memory_order_acq_rel)) {
			ULP_LOG(Info, Scsi, "LU {}: {}% allocated, soft threshold {}% reached",
			        name(), p, t);
			ua_add_all(UA_TP_SOFT_THRESHOLD);
		}
	} else if (lbp_soft_reached_.exchange(false, std::memory_order_acq_rel)) {
		ULP_LOG(Info, Scsi, "LU {}: {}% allocated, below the soft threshold {}% again",
		        name(), p, t);
	}
}

void LogicalUnit::lbp_poll()
{
	if (!cfg().tp_soft_threshold_pct)
		return;
	// One thread per interval checks: the others see the time moved on and return.
	const int64_t now = mono_ns();
	int64_t next = lbp_next_poll_.load(std::memory_order_relaxed);
	if (now < next || !lbp_next_poll_.compare_exchange_strong(next, now + kLbpPollNs,
	                                                          std::memory_order_relaxed))
		return;
	lbp_check();
}

} // namespace ulp::scsi
