// SPDX-License-Identifier: MIT
// core/lock_assert.h - "under lock" claims as assertions: the kernel's lockdep_assert_held().
//
//   ULP_ASSERT_HELD(m)        the calling thread holds m (a std::mutex, an AdaptiveMutex,
//                             one shard of a ShardLock, or a connection's Serial): a
//                             function whose comment says "under lock_" or "the caller
//                             holds" asserts it on entry.
//   ULP_ASSERT_HELD_ALL(sl)   the calling thread holds every shard of ShardLock sl
//                             (lock_all): what writes a ShardLock's whole state asserts.
//   ULP_ASSERT_NOT_HELD(m)    the calling thread does not hold m: a path that takes m, or
//                             calls out where m must not be held ("lock_ not held").
//
// On in Debug builds and in the sanitizer trees (CMake defines ULP_LOCK_ASSERTS there: their
// NDEBUG would otherwise compile them out), where CI runs every suite; compiled out of
// release builds, where they would cost a load per claim on the I/O path. A failed one is a
// ULP_CHECK failure: the file, the line and the lock's name, then abort.
//
// How it knows: glibc records the owner's thread id in every mutex it locks, of the normal
// and adaptive types alike (pthread_mutex_t's __data.__owner, set after the lock is taken
// and cleared before it is released; ThreadSanitizer's interceptors call the real functions,
// so its builds keep it too). std::mutex is a normal pthread mutex on glibc. The one case
// that leaves it unset is hardware lock elision, off unless GLIBC_TUNABLES turns
// glibc.elision.enable on: do not run a checking build with it on.
#pragma once

#include "core/check.h"

#if !defined(NDEBUG) || defined(ULP_LOCK_ASSERTS)
#define ULP_LOCK_ASSERTS_ON 1
#else
#define ULP_LOCK_ASSERTS_ON 0
#endif

#include <pthread.h>

#include <sys/types.h>

namespace ulp
{
class ShardLock;

// The calling thread's id as the kernel knows it (what glibc stores as a mutex's owner);
// cached per thread, and fork's child learns its own again.
pid_t lock_owner_self();

inline bool mutex_held(pthread_mutex_t *m)
{
	return m->__data.__owner == lock_owner_self();
}
template <typename M> bool mutex_held(M &m)
{
	if constexpr (requires { m.held_here(); })
		return m.held_here(); // a Serial (core/serial.h): its holder
	else
		return mutex_held(m.native_handle());
}
bool shard_lock_all_held(ShardLock &l);

} // namespace ulp

#if ULP_LOCK_ASSERTS_ON
#define ULP_ASSERT_HELD(m) ULP_CHECK(::ulp::mutex_held(m), "{} not held", #m)
#define ULP_ASSERT_NOT_HELD(m) ULP_CHECK(!::ulp::mutex_held(m), "{} held", #m)
#define ULP_ASSERT_HELD_ALL(sl) ULP_CHECK(::ulp::shard_lock_all_held(sl), "{} not all held", #sl)
#else
#define ULP_ASSERT_HELD(m) ((void)0)
#define ULP_ASSERT_NOT_HELD(m) ((void)0)
#define ULP_ASSERT_HELD_ALL(sl) ((void)0)
#endif
