// SPDX-License-Identifier: MIT
// core/cm.cc - CM event names and connection parameters.
#include "core/cm.h"

#include <algorithm>
#include <cstring>

namespace ulp
{

// The kernel's rdma_event_msg() wording, so logs match what an in-kernel ULP prints.
const char *cm_event_str(CmEventType t)
{
	switch (t) {
	case CmEventType::AddrResolved:
		return "address resolved";
	case CmEventType::AddrError:
		return "address error";
	case CmEventType::RouteResolved:
		return "route resolved";
	case CmEventType::RouteError:
		return "route error";
	case CmEventType::ConnectRequest:
		return "connect request";
	case CmEventType::ConnectError:
		return "connect error";
	case CmEventType::Unreachable:
		return "unreachable";
	case CmEventType::Rejected:
		return "rejected";
	case CmEventType::Established:
		return "established";
	case CmEventType::Disconnected:
		return "disconnected";
	case CmEventType::DeviceRemoval:
		return "device removal";
	case CmEventType::TimewaitExit:
		return "timewait exit";
	}
	return "unrecognized event";
}

// Copies at most kMaxPrivateData bytes; the excess is dropped. This is the container's
// limit, not the message's: the CM enforces the per-message limits (REQ 56, REP 196,
// REJ 148) when it sends, and fails the call there, where the caller can see it.
// Callers that must not lose bytes check d.size() against the message limit first.
void ConnParam::set_private_data(std::span<const uint8_t> d)
{
	size_t n = std::min(d.size(), kMaxPrivateData);
	if (n)
		std::memcpy(private_data.data(), d.data(), n);
	// Zero the tail so that no stale bytes of an earlier message ride along when a
	// provider sends the whole array.
	std::fill(private_data.begin() + static_cast<ptrdiff_t>(n), private_data.end(), 0);
	private_data_len = static_cast<uint8_t>(n);
}

} // namespace ulp
