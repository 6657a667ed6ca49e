// SPDX-License-Identifier: MIT
// core/sanitizer.h - which sanitizer this translation unit is built with, for GCC and Clang
// alike: ULP_ASAN (AddressSanitizer) and ULP_TSAN (ThreadSanitizer), each 0 or 1. GCC
// defines __SANITIZE_ADDRESS__ / __SANITIZE_THREAD__; Clang 14 defines neither and answers
// __has_feature(address_sanitizer) / (thread_sanitizer) instead. Both compilers build the
// tree (CMAKE_CXX_COMPILER=clang++ works with ULP_SANITIZE and ULP_TSAN), so code that
// changes under a sanitizer asks here, never one compiler's macro.
#pragma once

#if defined(__SANITIZE_ADDRESS__)
#define ULP_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ULP_ASAN 1
#endif
#endif
#ifndef ULP_ASAN
#define ULP_ASAN 0
#endif

#if defined(__SANITIZE_THREAD__)
#define ULP_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define ULP_TSAN 1
#endif
#endif
#ifndef ULP_TSAN
#define ULP_TSAN 0
#endif
