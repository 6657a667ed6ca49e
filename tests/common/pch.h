// SPDX-License-Identifier: MIT
// tests/common/pch.h - the headers every test program parses: gtest's and the standard
// library's most included ones. Precompiled once per build tree and reused by every test
// target (tests/CMakeLists.txt), instead of being parsed again in each test's translation
// unit. Only headers whose meaning no target's own definitions change: ulp's headers (and
// fmt/spdlog behind core/log.h, shaped by FMT_SHARED and SPDLOG_*) stay out.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>
