// SPDX-License-Identifier: MIT
// core/signals_blocked.h - start the library's own threads with every signal blocked.
//
// A program that takes its signals synchronously (ulp-targetd blocks SIGTERM, SIGINT, SIGHUP
// and SIGUSR1 in main() and waits for them with sigwaitinfo) relies on no thread leaving
// them unblocked: the kernel gives a process-directed signal to any thread that does not
// block it, and SIGTERM's default action there ends the process without its shutdown. A
// thread inherits its creator's mask, so a thread the library starts before main() - the
// verbs provider registers its devices, and starts their async-event threads, from a static
// constructor - would otherwise carry the empty mask of the loader. Threads of a library
// have no business with the application's signals: they are created blocked, as glibc
// creates its SIGEV_THREAD helper. Faults (SIGSEGV, SIGBUS) are still delivered: the kernel
// forces a synchronous fault signal through a blocked mask.
#pragma once

#include <pthread.h>
#include <signal.h>

namespace ulp
{

// While alive, the calling thread blocks every signal; threads it creates meanwhile start
// so and keep it. The caller's own mask comes back at the end of the scope.
class SignalsBlocked
{
public:
	SignalsBlocked()
	{
		sigset_t all;
		sigfillset(&all);
		pthread_sigmask(SIG_BLOCK, &all, &old_);
	}
	~SignalsBlocked() { pthread_sigmask(SIG_SETMASK, &old_, nullptr); }
	SignalsBlocked(const SignalsBlocked &) = delete;
	SignalsBlocked &operator=(const SignalsBlocked &) = delete;

private:
	sigset_t old_; // the creating thread's mask before, restored on destruction
};

} // namespace ulp
