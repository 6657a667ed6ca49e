// SPDX-License-Identifier: MIT
// scsi/fabric.h - what a fabric (a transport: iSCSI/TCP, iSER, SRP, the loopback) gives the
// core, as LIO's struct target_core_fabric_ops does.
//
// Every callback may run on any thread the core completes on: the submitter's own (inside
// submit(), for emulated commands and the synchronous backstores), a backstore's completion
// thread, or the thread that answered a task management function. None may block, and
// none is called with a core lock held, so a callback may call back into the core
// (write_done, cmd_put, submit).
#pragma once

#include "scsi/cmd.h"

namespace ulp::scsi
{

class Fabric
{
public:
	virtual ~Fabric() = default;

	virtual const char *name() const = 0; // "iscsi", "iser", "srpt", "loop"

	// Fetch cmd->xfer_len bytes of data-out into cmd->sgl (R2T / RDMA READ / already
	// there), then call write_done(cmd, ok). May call write_done before returning.
	virtual void write_pending(Cmd *cmd) = 0;

	// The core aborted cmd while its write_pending was outstanding (a TMF or a session
	// teardown): stop moving its data, and call write_done(cmd, false) once no transport
	// touches the buffer any more (at once, or when an RDMA READ in flight completes).
	// The initiator will not send the rest of the data (RFC 7143 11.5.1), so waiting for it
	// would hang the TMF. Called only after write_pending has returned, at most once; it
	// may race with the fabric's own write_done: if that was already called, ignore this.
	virtual void abort_write(Cmd *cmd) = 0;

	// Send cmd->xfer_len bytes of cmd->sgl as data-in, then the status (GOOD, with
	// cmd->resid / resid_count). Called only for successful commands with data-in.
	virtual void queue_data_in(Cmd *cmd) = 0;

	// Send the status: cmd->status, cmd->sense[0..sense_len), residuals. Every other
	// completion, including TASK ABORTED for an aborted command of another I_T nexus.
	virtual void queue_status(Cmd *cmd) = 0;

	// cmd was aborted and gets no response of its own (the TMF's response covers it, or
	// its session is going away): release what the transport holds for it.
	virtual void aborted_task(Cmd *cmd) = 0;

	// The response to a task management request (tmr->response is set). After a TARGET
	// COLD RESET that completed, the fabric ends every session of the target once the
	// response is on its way (a power on, RFC 7143 11.5.1): the core has reset the LUs.
	virtual void queue_tm_rsp(Tmr *tmr) = 0;

	// Neither the core nor the fabric holds cmd any longer: free it.
	virtual void release_cmd(Cmd *cmd) = 0;
};

} // namespace ulp::scsi
