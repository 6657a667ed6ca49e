// SPDX-License-Identifier: MIT
// providers/soft/sock_wire.cc - placeholder until the socket wire lands: every
// cross-process operation reports that no peer is reachable.
#include "providers/soft/sock_wire.h"

#include "providers/soft/cm_id.h"

#include <cerrno>

namespace ulp::soft
{

ExecResult sock_exec(SoftQp &qp, uint32_t slot)
{
	return qp.finish_req(slot, Reply::PeerGone, 0);
}
void sock_poll_replies(SoftQp &) {}
int sock_listen(SoftCmId &)
{
	return 0;
}
void sock_unlisten(SoftCmId &) {}
int sock_connect(SoftCmId &, const ConnParam &)
{
	return -ECONNREFUSED;
}
int sock_accept(SoftCmId &, const ConnParam &)
{
	return -ENOTCONN;
}
int sock_reject(SoftCmId &, std::span<const uint8_t>)
{
	return 0;
}
void sock_disconnect(SoftCmId &) {}
void sock_cut(SoftCmId &) {}
void sock_close(SoftCmId &) {}
void stop_sock_wire(SoftDevice &) {}

} // namespace ulp::soft
