// SPDX-License-Identifier: MIT
// providers/verbs/verbs.h - the rdma-core provider's public API.
//
// Every verbs device that librdmacm sees (mlx5, rxe, siw, ...) is registered with the core
// registry under its kernel name ("rxe0") when the program starts; the provider itself is
// registered as "verbs" (find_provider("verbs")->create_id() makes rdma_cm ids). Everything
// else goes through core/ (Device, Pd, Qp, CmId, ...).
//
// Fast registration: userspace has no IB_WR_REG_MR. REG_MR, LOCAL_INV and SEND_WITH_INV
// are carried by type-2 memory windows (IBV_WR_BIND_MW) where the device has them: the
// mapped range must be virtually contiguous inside one MR registered on the same PD
// (the device reports DEVICE_REG_MR_CONTIG: map_sg stops at the first discontinuity; it fails with
// -EINVAL when the range is not inside one region). Such a fast-reg MR's rkey is the window's; a
// window has no lkey, so after map_sg the MR's lkey() is the region's, which local SGEs over the
// mapped range use (rw/'s data WR does).
#pragma once

#include "core/device.h"
#include "core/registry.h"

namespace ulp::verbs
{

// The provider, registered with the core registry as "verbs". Devices are enumerated and
// registered once, before main() (or on the first call to this function).
Provider &provider();
bool is_verbs(const Device &dev); // dev is one of this provider's devices

} // namespace ulp::verbs
