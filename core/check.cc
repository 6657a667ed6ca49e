// SPDX-License-Identifier: MIT
// core/check.cc - failed checks (see check.h).
#include "core/check.h"

#include <cstdlib>

namespace ulp
{

void check_failed(const char *file, int line, const char *cond, std::string_view msg)
{
	if (msg.empty())
		ULP_LOG(Critical, Core, "check failed at {}:{}: {}", file, line, cond);
	else
		ULP_LOG(Critical, Core, "check failed at {}:{}: {}: {}", file, line, cond, msg);
	std::abort();
}

void detail::warn_on(const char *file, int line, const char *cond, log::RateLimit &rl)
{
	uint32_t dropped = 0;
	if (rl.allow(&dropped))
		ULP_LOG(Error, Core, "warning at {}:{}: {}{}", file, line, cond,
		        dropped ? fmt::format(" ({} more since the last line)", dropped) : "");
}

} // namespace ulp
