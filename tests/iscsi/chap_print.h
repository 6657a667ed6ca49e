// SPDX-License-Identifier: MIT
// tests/iscsi/chap_print.h - how gtest prints a ChapAlg parameter, and names its test
// (::testing::PrintToStringParamName): the hash, "MD5" .. "SHA3_256". In ChapAlg's
// namespace, where gtest looks for it; for every test file instantiated over ChapAlg.
#pragma once

#include "iscsi/chap.h"

#include <ostream>

namespace ulp::iscsi
{

inline void PrintTo(ChapAlg a, std::ostream *os)
{
	switch (a) {
	case ChapAlg::Md5:
		*os << "MD5";
		return;
	case ChapAlg::Sha1:
		*os << "SHA1";
		return;
	case ChapAlg::Sha256:
		*os << "SHA256";
		return;
	case ChapAlg::Sha3_256:
		*os << "SHA3_256";
		return;
	}
	*os << "alg" << int(a);
}

} // namespace ulp::iscsi
