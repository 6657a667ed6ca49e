// SPDX-License-Identifier: MIT
// scsi/sbc_internal.h - what the block command files share: their parse entry points (for
// sbc_parse in sbc.cc), the LBA range check, and the machinery of the commands that take
// more than one backstore request (VERIFY, WRITE AND VERIFY, WRITE SAME, UNMAP, COMPARE AND
// WRITE), in sbc_step.cc.
//
// A multi-step command keeps its state in the command itself: a struct derived from
// SbcStep, allocated when the command starts executing (sbc_step_new: cmd->scratch, freed
// with the command) - only these rarer commands allocate. It runs as a loop that looks at
// the answer to its last request, decides the next one, and submits it:
//
//   void run(Cmd *cmd)                 // also the state's resume function
//   {
//           for (;;) {
//                   look at st->err for the request just answered, if any;
//                   complete (complete_*) and return when done, failed or aborted;
//                   if (!sbc_step_submit(cmd, ...))
//                           return;    // answered later: resume re-enters run()
//           }
//   }
//
// sbc_step_submit() returns true when the backstore answered inside submit() (ram, null):
// the loop goes on without recursing, so that a WRITE SAME of thousands of chunks on a RAM
// LU uses constant stack. An answer that comes later, on the backstore's thread, calls the
// state's resume function there. Either way exactly one thread runs the loop at a time, and
// the loop completes the command exactly once; after complete_* it never touches the
// command or its state again (the fabric may release both at once).
//
// Aborts: a task management function marks cmd->aborted and waits for the command to end
// (tmr.cc). A multi-step command checks sbc_aborted() before each new request and, when
// set, completes at once without issuing more I/O; cmd_finish then answers it as aborted
// (its status is ignored).
#pragma once

#include "scsi/core_internal.h"
#include "scsi/sbc.h"

#include <sys/uio.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <new>
#include <span>
#include <type_traits>

namespace ulp::scsi
{

// ---- Parsing (same contract as the families', core_internal.h) ---------------------------

// SBC-3 4.5: [lba, lba + blocks) must lie inside the LU; written so that nothing wraps.
// LBA OUT OF RANGE otherwise. A range of zero blocks at the capacity itself is allowed
// (nothing is touched), one starting beyond it is not.
Sense sbc_check_range(const LogicalUnit &lu, uint64_t lba, uint64_t blocks);

Sense sbc_parse_verify(Cmd *cmd);           // VERIFY (10, 12, 16), sbc_verify.cc
Sense sbc_parse_write_verify(Cmd *cmd);     // WRITE AND VERIFY (10, 12, 16), sbc_verify.cc
Sense sbc_parse_write_same(Cmd *cmd);       // WRITE SAME (10, 16), sbc_write_same.cc
Sense sbc_parse_unmap(Cmd *cmd);            // UNMAP, sbc_unmap.cc
Sense sbc_parse_caw(Cmd *cmd);              // COMPARE AND WRITE, sbc_caw.cc
Sense sbc_parse_get_lba_status(Cmd *cmd);   // GET LBA STATUS, sbc_lba_status.cc
Sense sbc_parse_read_defect_data(Cmd *cmd); // READ DEFECT DATA (10, 12), sbc_defect.cc
Sense sbc_parse_orwrite(Cmd *cmd);          // ORWRITE (16), sbc_orwrite.cc
Sense sbc_parse_write_atomic(Cmd *cmd);     // WRITE ATOMIC (16), sbc_atomic.cc

// ---- Multi-step commands (sbc_step.cc) ----------------------------------------------------

// Bytes a multi-step command moves per backstore request (VERIFY's reads, ORWRITE's
// read-OR-write rounds): bounded memory per command, and an abort noticed between chunks.
// A multiple of every block size (512..65536).
constexpr uint32_t kSbcChunkBytes = 256 << 10;

// The common head of a multi-step command's state.
struct SbcStep {
	std::atomic<uint8_t> phase{0};      // who goes on after a submit (sbc_step.cc)
	int err = 0;                        // the last request's result: 0 or a negative errno
	void (*resume)(Cmd *cmd) = nullptr; // re-enters the loop after a later answer
};

inline SbcStep *sbc_step(Cmd *cmd)
{
	return static_cast<SbcStep *>(cmd->scratch);
}

// Allocate the command's state T (derived from SbcStep) and attach it as cmd->scratch,
// freed when the command is released. nullptr when memory is short (the caller completes
// with INSUFFICIENT RESOURCES).
template <typename T> T *sbc_step_new(Cmd *cmd, void (*resume)(Cmd *))
{
	static_assert(std::is_base_of_v<SbcStep, T>);
	T *st = new (std::nothrow) T();
	if (!st)
		return nullptr;
	st->resume = resume;
	cmd->scratch = static_cast<SbcStep *>(st);
	cmd->scratch_free = [](void *p) { delete static_cast<T *>(static_cast<SbcStep *>(p)); };
	return st;
}

// Submit one request for the command (its BsIo, cmd->io). true: it was answered before
// submit returned, st->err holds the result, go on; false: the state's resume function
// runs with the answer later, and the caller must return without touching the command.
bool sbc_step_submit(Cmd *cmd, BsOp op, uint64_t offset, uint64_t len, std::span<const iovec> iov,
                     bool fua);

// The same on another LU's backstore bs (EXTENDED COPY, xcopy.cc: its source or destination
// need not be the LU the command addresses).
bool sbc_step_submit_to(Cmd *cmd, Backstore &bs, BsOp op, uint64_t offset, uint64_t len,
                        std::span<const iovec> iov, bool fua);

// A request that is not a backstore's (EXTENDED COPY's copy_file_range(2), run on a thread
// of its own: xcopy_fast.cc), in the same protocol: sbc_step_begin() before handing it over,
// sbc_step_handed() after (sbc_step_submit's result), and sbc_step_answer() once with its
// result (0, bytes or a negative errno, into st->err), on any thread.
void sbc_step_begin(Cmd *cmd);
bool sbc_step_handed(Cmd *cmd);
void sbc_step_answer(Cmd *cmd, int err);

// Whether a task management function or a session teardown aborted cmd (read under the
// LU lock, where tmr.cc sets it).
bool sbc_aborted(Cmd *cmd);

// ---- The read-modify-write turn (sbc_rmw.cc) ------------------------------------------------

// Run cmd (its SbcStep state allocated, resume = its loop) holding the LU's read-modify-write
// turn: now, or once the commands before it have ended. COMPARE AND WRITE and ORWRITE.
void sbc_rmw_start(Cmd *cmd);
// End a command that holds the turn: complete it (MISCOMPARE at off, the reason s, or GOOD
// for Sense::None), and hand the turn on. The command must not be touched afterwards.
void sbc_rmw_finish(Cmd *cmd, Sense s, bool miscompare = false, uint64_t off = 0);

// ---- Buffers ------------------------------------------------------------------------------

// A bounce buffer aligned for O_DIRECT (4 KiB), so that the file backstore can take the
// direct path with it.
struct SbcBufFree {
	void operator()(uint8_t *p) const { std::free(p); }
};
using SbcBuf = std::unique_ptr<uint8_t[], SbcBufFree>;
SbcBuf sbc_buf_alloc(size_t bytes); // nullptr when memory is short

// OR the command's data buffer, from byte off, into p[0..len) (ORWRITE); false when the
// buffer is shorter.
bool sgl_or_into(const Cmd *cmd, size_t off, uint8_t *p, size_t len);

// The first byte in which the command's data buffer, from byte off, differs from
// p[0..len): its index in p, or len when the len bytes are equal.
size_t sgl_mismatch(const Cmd *cmd, size_t off, const uint8_t *p, size_t len);

// A MISCOMPARE at byte offset off (SBC-3 5.2: the INFORMATION field holds the offset of the
// first byte that differed; it is 4 bytes in fixed-format sense, so a larger offset is
// reported without it).
void sbc_complete_miscompare(Cmd *cmd, uint64_t off);

} // namespace ulp::scsi
