// SPDX-License-Identifier: MIT
// providers/soft/sock_wire.h - the cross-process wire: one Unix stream socket per
// connection, carrying CM messages and then RC packets (SEND, WRITE, READ request and
// response, ACK, NAK). See sock_wire.cc for the packet format.
#pragma once

#include "providers/soft/soft_internal.h"

#include <span>

namespace ulp::soft
{

class SoftCmId;

// Requester: transmit the WQE at slot (Pending until its ACK/response, or Stall when
// READ credits or a fence hold it back).
ExecResult sock_exec(SoftQp &qp, uint32_t slot);
// Engine, inside SoftQp::process: read what arrived (requests to serve as responder,
// replies to complete as requester) and push out the transmit backlog.
void sock_service(SoftQp &qp);
// Engine, at the end of SoftQp::process: write the batch this turn queued.
void sock_flush(SoftQp &qp);
// Engine, QP in ERR: true once its WRs may be flushed. The first call sends Err; while
// requests of ours are unanswered, the peer may still copy out of our shared regions or
// READ data into them, so their flush waits for the peer's ErrAck (bounded: it is
// waived when the peer dies or stays silent past a deadline, with a warning).
bool sock_quiesced(SoftQp &qp);

// CM hooks, all called with CmGlobal::lock held.
int sock_listen(SoftCmId &id); // bind "@ulp-soft/IP:PORT"
void sock_unlisten(SoftCmId &id);
int sock_connect(SoftCmId &id, const ConnParam &p); // no in-process listener: try the socket
int sock_accept(SoftCmId &id, const ConnParam &p);
int sock_reject(SoftCmId &id, std::span<const uint8_t> pdata);
void sock_disconnect(SoftCmId &id); // send a disconnect request
void sock_cut(SoftCmId &id);        // drop the connection without goodbye (peer death)
void sock_close(SoftCmId &id);      // id destroyed (no CmGlobal::lock held)

} // namespace ulp::soft
