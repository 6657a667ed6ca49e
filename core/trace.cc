// SPDX-License-Identifier: MIT
// core/trace.cc - the probes' semaphores (core/trace.h). In .probes, where sdt.h's own
// dtrace-generated providers put them: tracers find each one through its probe's note and
// add one to it while they are attached.
#include "core/trace.h"

#ifdef ULP_TRACE_ON
#define ULP_TRACE_SEMAPHORE_DEF(n)                                                                 \
	__attribute__((section(".probes"))) volatile unsigned short ulp_##n##_semaphore = 0;
extern "C" {
ULP_TRACE_PROBES(ULP_TRACE_SEMAPHORE_DEF)
}
#endif
