// SPDX-License-Identifier: MIT
// core/trace.h - static trace points (USDT, provider "ulp"): a command followed through a
// running ulp-targetd with perf or bpftrace, no debugger and no rebuild (docs/tracing.md).
//
//   ULP_TRACE(name, args...)    a probe site: STAP_PROBEn(ulp, name, args...) of
//                               <sys/sdt.h> (systemtap-sdt-dev), as QEMU, PostgreSQL and
//                               the JVM have them. 1..6 arguments.
//   ULP_TRACE_ENABLED(name)     true while a tracer is attached to the probe (its
//                               semaphore): guards a probe whose arguments cost a call.
//
// What a probe costs while nothing is attached: one nop in the code and an ELF note
// (.note.stapsdt) naming the probe and where its arguments are; no branch, no call. A
// tracer turns the nop into a breakpoint (a uprobe). The arguments are still computed,
// into registers the note names (a load or a move for one in memory or a constant), so
// pass what is already at hand - a pointer, an integer, a constant name - never a
// formatted string. A probe whose arguments need a call (change_state's state names)
// goes under ULP_TRACE_ENABLED, a load and a not-taken branch: tracers add one to the
// probe's semaphore on attach.
//
// Without <sys/sdt.h> (or with -DULP_NO_TRACE) every probe compiles to nothing and
// ULP_TRACE_ON stays undefined: the build never depends on the header.
//
// The probes. Pointers are the objects' addresses, to join the probes of one command:
// a transport's probe gives both its own command and the scsi::Cmd inside it.
//
//   state_change  (const char *machine, const void *obj, const char *from, const char *to)
//                 every checked state change (core/check.h change_state): the machine's
//                 name ("SCSI command", "iSCSI command", "SRP ioctx", ...), the object
//                 whose state it is, the old and new states' names
//   cq_pass       (const void *cq, int completed, int budget)
//                 one pass over a CQ (cq_poll/): completions reaped and handled, of budget
//   scsi_cmd_start (const void *cmd, unsigned opcode, uint64_t lba, unsigned blocks,
//                  unsigned bytes)
//                 the SCSI core has decoded a command (scsi::submit): CDB byte 0, first
//                 block and blocks (0 for a command that moves no blocks), the transport's
//                 expected length in bytes
//   scsi_cmd_done (const void *cmd, unsigned status, int aborted, uint64_t latency_ns)
//                 the core hands the answer to the transport: SCSI status, whether it
//                 was aborted (then no status goes out unless TAS), time since submit
//   iscsi_cmd     (const void *icmd, const void *cmd, unsigned itt, unsigned cmdsn,
//                 unsigned edtl, int iser)
//                 an iSCSI SCSI Command PDU accepted (iscsi/target/, over TCP or iSER):
//                 its slot, the scsi::Cmd, ITT, CmdSN, expected length; iser 1 over iSER
//   iscsi_rsp     (const void *icmd, const void *cmd, unsigned itt, unsigned status,
//                 int data_in)
//                 its response leaves the connection: status in a SCSI Response, or in
//                 the last Data-In (data_in 1)
//   srp_cmd       (const void *ioctx, const void *cmd, uint64_t tag, unsigned data_len)
//                 an SRP_CMD taken apart (srp/target/): its ioctx, the scsi::Cmd, the tag
//   srp_rsp       (const void *ioctx, const void *cmd, uint64_t tag, unsigned status)
//                 its SRP_RSP built (sent behind any RDMA WRITE of read data)
#pragma once

#if !defined(ULP_NO_TRACE) && defined(__has_include)
#if __has_include(<sys/sdt.h>)
#define ULP_TRACE_ON 1
#endif
#endif

// Every probe's name, once: its semaphore is declared (here) and defined (core/trace.cc)
// from this list, so a probe not in it does not link.
#define ULP_TRACE_PROBES(X)                                                                        \
	X(state_change)                                                                            \
	X(cq_pass)                                                                                 \
	X(scsi_cmd_start)                                                                          \
	X(scsi_cmd_done)                                                                           \
	X(iscsi_cmd)                                                                               \
	X(iscsi_rsp)                                                                               \
	X(srp_cmd)                                                                                 \
	X(srp_rsp)

#ifdef ULP_TRACE_ON

// With semaphores, every probe's note carries its semaphore's address; the header must
// see the define first, or ULP_TRACE_ENABLED would read a counter no tracer increments.
#if defined(_SYS_SDT_H) && !defined(_SDT_HAS_SEMAPHORES)
#error "<sys/sdt.h> included before core/trace.h: the ulp probes would lose their semaphores"
#endif
#ifndef _SDT_HAS_SEMAPHORES
#define _SDT_HAS_SEMAPHORES 1
#endif
// Every argument in a register. sdt.h's default lets the compiler name a constant as an
// immediate ($40), and perf (6.1) leaves such an argument out of the uprobe it makes;
// that site's argument list then differs from the probe's other sites, and the kernel
// refuses them the one event perf makes per probe ("Argument type or name is different
// from existing probe"): iscsi_rsp's response site could not be traced with perf while
// its TASK SET FULL site passed constants.
#define STAP_SDT_ARG_CONSTRAINT r
#include <sys/sdt.h>

// The semaphores (sdt.h's naming: provider_name_semaphore, unmangled): tracers count
// themselves in on attach and out on detach. volatile: written from outside the process.
#define ULP_TRACE_SEMAPHORE_DECL(n) extern volatile unsigned short ulp_##n##_semaphore;
extern "C" {
ULP_TRACE_PROBES(ULP_TRACE_SEMAPHORE_DECL)
}
#undef ULP_TRACE_SEMAPHORE_DECL

#define ULP_TRACE_NARGS_(a1, a2, a3, a4, a5, a6, n, ...) n
#define ULP_TRACE_NARGS(...) ULP_TRACE_NARGS_(__VA_ARGS__, 6, 5, 4, 3, 2, 1, 0)
#define ULP_TRACE_CAT_(a, b) a##b
#define ULP_TRACE_CAT(a, b) ULP_TRACE_CAT_(a, b)

#define ULP_TRACE(name, ...)                                                                       \
	ULP_TRACE_CAT(STAP_PROBE, ULP_TRACE_NARGS(__VA_ARGS__))(ulp, name, __VA_ARGS__)
#define ULP_TRACE_ENABLED(name) __builtin_expect(ulp_##name##_semaphore != 0, 0)

#else

namespace ulp::detail
{
// Names the arguments without evaluating them (the call is dead code): what is computed
// only for a probe does not warn as unused in a build without probes.
template <typename... A> inline void trace_unused(const A &...) {}
} // namespace ulp::detail

#define ULP_TRACE(name, ...)                                                                       \
	do {                                                                                       \
		if (false)                                                                         \
			::ulp::detail::trace_unused(__VA_ARGS__);                                  \
	} while (0)
#define ULP_TRACE_ENABLED(name) false

#endif
