// SPDX-License-Identifier: MIT
// tests/common/test_device.h - the device a device-agnostic suite runs on.
//
// Suites written against core/ (cq_poll, drain, rw) create their devices through
// soft_test::make_dev (tests/soft/soft_test_util.h). By default that makes soft devices.
// With ULP_TEST_DEVICE=NAME (a device in the core registry, e.g. rxe0 through the verbs
// provider, which the suite links through ulp_providers) every make_dev returns that one
// device instead, for side a and side b alike, and never destroys it: both ends of each
// connection share it (as on rxe0 in tools/vm, where client and server share one GID).
//
// A test that needs what only the soft provider has (Exec::Inline, soft::Profile,
// soft::Limits, withheld capability bits, fault injection, soft counters, two devices
// with different addresses) starts with ULP_SKIP_UNLESS_SOFT("why"): on ULP_TEST_DEVICE it
// is skipped with that one-line reason, never failed and never passed silently.
#pragma once

#include "core/device.h"
#include "core/registry.h"
#include "providers/soft/soft.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

namespace ulp::test
{

// ULP_TEST_DEVICE, or nullptr when unset or empty (the soft runs).
inline const char *test_device_name()
{
	const char *n = std::getenv("ULP_TEST_DEVICE");
	return n && *n ? n : nullptr;
}

// True when the suite runs on ULP_TEST_DEVICE instead of soft devices.
inline bool on_test_device()
{
	return test_device_name() != nullptr;
}

// The device ULP_TEST_DEVICE names; nullptr (with a test failure) when it is not
// registered: a mistyped name must fail the run, not fall back to soft devices.
inline Device *test_device()
{
	const char *n = test_device_name();
	if (!n)
		return nullptr;
	Device *d = find_device(n);
	if (!d) {
		std::string have;
		for (Device *x : devices())
			have += std::string(" ") + x->name();
		ADD_FAILURE() << "ULP_TEST_DEVICE=" << n << " is not a registered device (have:"
		              << (have.empty() ? " none" : have) << ")";
	}
	return d;
}

// Whether the soft provider's own introspection (counters, fault injection) is usable on
// dev.
inline bool is_soft(const Device &dev)
{
	return soft::is_soft(dev);
}

// Soft-RoCE (rxe) through ULP_TEST_DEVICE: a few error statuses differ from the IB spec
// there; each test that accepts one says why. The soft provider must give the spec's.
inline bool is_rxe(const Device &dev)
{
	return on_test_device() && !soft::is_soft(dev) && dev.name().rfind("rxe", 0) == 0;
}

} // namespace ulp::test

// Skip the current test on ULP_TEST_DEVICE: it needs a soft-only feature.
#define ULP_SKIP_UNLESS_SOFT(why)                                                                  \
	do {                                                                                       \
		if (::ulp::test::on_test_device())                                                 \
			GTEST_SKIP() << "soft provider only (ULP_TEST_DEVICE="                     \
			             << ::ulp::test::test_device_name() << "): " << (why);         \
	} while (0)
