// SPDX-License-Identifier: MIT
// tests/common/pch.cc - the translation unit that builds tests/common/pch.h precompiled.
