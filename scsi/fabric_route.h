// SPDX-License-Identifier: MIT
// scsi/fabric_route.h - a fabric whose callbacks each become an event of the connection
// that owns the command: the routing every connection-based fabric (iSCSI over TCP and
// iSER, SRP) does the same way.
//
// The core calls a fabric from any thread (fabric.h); a connection runs its own work one
// piece at a time (core/serial.h). So each callback is posted to the command's
// connection, as one event that names the callback: FabricRoute mirrors scsi::Fabric one for
// one. A fabric derives from FabricRoute<Derived> and supplies
//   static void route(Cmd *cmd, FabricEvent ev); // post ev to cmd's connection
//   static void route(Tmr *tmr);                 // post TmRsp to tmr's connection
// which is typically owner_of(cmd)->post(ev, cmd) (a protocol's own event type may extend
// FabricEvent: see iscsi::target::ConnEvent).
#pragma once

#include "scsi/fabric.h"

#include <cstdint>

namespace ulp::scsi
{

// One per Fabric callback, in its order.
enum class FabricEvent : uint8_t {
	WritePending, // Fabric::write_pending
	AbortWrite,   // ... abort_write
	DataIn,       // ... queue_data_in
	Status,       // ... queue_status
	AbortedTask,  // ... aborted_task
	TmRsp,        // ... queue_tm_rsp
	Release,      // ... release_cmd
};
constexpr uint8_t kFabricEvents = uint8_t(FabricEvent::Release) + 1;

template <typename Derived> class FabricRoute : public Fabric
{
public:
	void write_pending(Cmd *cmd) final { Derived::route(cmd, FabricEvent::WritePending); }
	void abort_write(Cmd *cmd) final { Derived::route(cmd, FabricEvent::AbortWrite); }
	void queue_data_in(Cmd *cmd) final { Derived::route(cmd, FabricEvent::DataIn); }
	void queue_status(Cmd *cmd) final { Derived::route(cmd, FabricEvent::Status); }
	void aborted_task(Cmd *cmd) final { Derived::route(cmd, FabricEvent::AbortedTask); }
	void release_cmd(Cmd *cmd) final { Derived::route(cmd, FabricEvent::Release); }
	void queue_tm_rsp(Tmr *tmr) final { Derived::route(tmr); }
};

} // namespace ulp::scsi
