// SPDX-License-Identifier: MIT
// tools/common/named_device.h - `--device NAME`: open a device another provider registered
// (a verbs device such as rxe0) instead of creating soft devices.
#pragma once

#include "core/device.h"
#include "core/registry.h"

#include <string>

namespace ulp::tools
{

// A registered device by name, with the provider that makes CM ids on it and the IPv4
// address the CM listens on. A soft device is found too when this process created it
// (ulp-stress shares one between its sessions); the benchmarks create their own.
struct NamedDevice {
	Device *dev = nullptr;
	Provider *provider = nullptr;
	std::string provider_name; // "verbs" or "soft"
	std::string ip;            // "" when none was found (only hand-connected QPs work)
};

// Find NAME in the registry. false + *why (one line, naming the devices present) when
// there is no such device or this build has no provider for it.
bool open_named_device(const std::string &name, NamedDevice *out, std::string *why);

// Space-separated names of the devices the registry holds ("" when none).
std::string device_names();

} // namespace ulp::tools
