// SPDX-License-Identifier: MIT
// tests/conformance/main.cc - gtest's main, plus the entry of a re-executed peer process
// (peer.h): "--conformance-peer=FD --conformance-fabric=NAME" serves commands on FD and
// exits without touching gtest.
#include "tests/conformance/peer.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <string>

int main(int argc, char **argv)
{
	int fd = -1;
	std::string fabric;
	for (int i = 1; i < argc; i++) {
		if (!strncmp(argv[i], "--conformance-peer=", 19))
			fd = atoi(argv[i] + 19);
		else if (!strncmp(argv[i], "--conformance-fabric=", 21))
			fabric = argv[i] + 21;
	}
	if (fd >= 0 && !fabric.empty())
		ulp::conf::run_peer_server(fabric, fd);

	testing::InitGoogleTest(&argc, argv);
	return RUN_ALL_TESTS();
}
