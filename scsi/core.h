// SPDX-License-Identifier: MIT
// scsi/core.h - the calls a fabric makes into the target core (the kernel's
// target_submit_cmd, target_execute_cmd, transport_generic_free_cmd,
// target_submit_tmr).
//
//   fabric                                  core
//   ------                                  ----
//   cmd_init(cmd) + fill the fabric fields
//   submit(cmd)                  --->       decode, LUN, UA, reservations, residuals
//                                <---       write_pending(cmd)            (data-out)
//   write_done(cmd, ok)          --->       order, execute (backstore)
//                                <---       queue_data_in / queue_status / aborted_task
//   cmd_put(cmd)  (response sent) --->
//                                <---       release_cmd(cmd)  (when the core is done too)
//
// tmr_submit(tmr) ---> abort / reset / query ---> queue_tm_rsp(tmr), after every command
// the function aborted has finished with its backstore.
#pragma once

#include "scsi/cmd.h"

namespace ulp::scsi
{

// Reset a Cmd for reuse (its fabric fields too). Only on a command that is New or was
// released.
void cmd_init(Cmd *cmd);

// Hand a command to the core. The fabric fields must be set; cmd->sess must be a live
// session. From here the fabric holds one reference, which it drops with cmd_put once it
// has sent the response (or after aborted_task); the core holds its own until it hands
// the command back. Never fails: a command the core cannot take is answered through the
// fabric callbacks like any other (CHECK CONDITION, or BUSY on a stopping session).
void submit(Cmd *cmd);

// The fabric's answer to write_pending: the data-out is in cmd->sgl (ok), or could not be
// fetched (the transport failed, or abort_write asked it to stop).
void write_done(Cmd *cmd, bool ok);

// The fabric is done with cmd (its response went out, or it was aborted and its
// transport resources are released). release_cmd follows once the core is done too.
void cmd_put(Cmd *cmd);

// Start a task management function. queue_tm_rsp(tmr) follows exactly once.
void tmr_submit(Tmr *tmr);

} // namespace ulp::scsi
