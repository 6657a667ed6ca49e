// SPDX-License-Identifier: MIT
// providers/soft/shm_wire.h - the ring wire (shm_wire.cc): requests and answers in
// shared-memory rings between processes (shm_ring.h), the socket kept for the CM, memfd
// passing and peer death.
#pragma once

#include "providers/soft/soft_internal.h"

namespace ulp::soft
{

// Requester: write the WQE at slot into the request ring (Pending until its answer, or
// Stall when READ credits, a fence, ring space or staging space hold it back).
ExecResult shm_exec(SoftQp &qp, uint32_t slot);
// Engine, at the start of SoftQp::process: the socket's control packets, the answers to
// our requests, an RNR retry that is due, the peer's requests.
void shm_service(SoftQp &qp);
// Engine, at the end of SoftQp::process: publish what this turn produced; ring the
// peer's doorbell if it sleeps.
void shm_flush(SoftQp &qp);
// The QP is in ERR: may its WRs be flushed now? Not while the peer may still place READ
// data in our memory (until it acknowledges, dies, or a bound passes).
bool shm_quiesced(SoftQp &qp);
// The send queue was flushed: staging space is free again.
void shm_flushed(SoftQp &qp);

} // namespace ulp::soft
