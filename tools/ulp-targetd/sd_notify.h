// SPDX-License-Identifier: MIT
// tools/ulp-targetd/sd_notify.h - systemd's readiness protocol (sd_notify(3)), for
// Type=notify: one datagram of "KEY=VALUE" lines to the AF_UNIX socket named by
// $NOTIFY_SOCKET ('@' first: the abstract namespace). A few lines of our own rather than
// libsystemd: nothing else of it is needed, and without $NOTIFY_SOCKET (not under
// systemd) it does nothing.
#pragma once

#include <string>

namespace targetd
{

// Send state (e.g. "READY=1\nSTATUS=serving"). True when sent; false when there is no
// $NOTIFY_SOCKET or the send failed (never fatal: the daemon serves either way).
bool sd_notify(const std::string &state);

} // namespace targetd
