// SPDX-License-Identifier: MIT
// core/adaptive_mutex.h - a mutex that spins briefly before it sleeps.
#pragma once

#include <pthread.h>

namespace ulp
{

// glibc's PTHREAD_MUTEX_ADAPTIVE_NP behind the Lockable interface (std::unique_lock,
// std::condition_variable_any). For locks held for a few loads and stores by threads that
// all run at once, such as a soft engine and the posters that run its QPs: a std::mutex
// that is taken while held puts the taker to sleep in futex(2) and makes the holder wake it,
// a few microseconds each way, where a spin of a few hundred nanoseconds would have got it.
// The kernel's mutexes spin on the owner for the same reason (optimistic spinning).
class AdaptiveMutex
{
public:
	AdaptiveMutex()
	{
		pthread_mutexattr_t a;
		pthread_mutexattr_init(&a);
		pthread_mutexattr_settype(&a, PTHREAD_MUTEX_ADAPTIVE_NP);
		pthread_mutex_init(&m_, &a);
		pthread_mutexattr_destroy(&a);
	}
	~AdaptiveMutex() { pthread_mutex_destroy(&m_); }
	AdaptiveMutex(const AdaptiveMutex &) = delete;
	AdaptiveMutex &operator=(const AdaptiveMutex &) = delete;

	void lock() { pthread_mutex_lock(&m_); }
	bool try_lock() { return pthread_mutex_trylock(&m_) == 0; }
	void unlock() { pthread_mutex_unlock(&m_); }
	pthread_mutex_t *native_handle() { return &m_; } // for ULP_ASSERT_HELD (core/lock_assert.h)

private:
	pthread_mutex_t m_;
};

} // namespace ulp
