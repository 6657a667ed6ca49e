// SPDX-License-Identifier: MIT
// tests/ceph/ceph_env.h - a real single-node Ceph cluster for a test program: started once
// before its first test (scripts/ceph-dev.sh, memstore, a free monitor port, a directory of
// its own), stopped after the last. A program makes it its gtest environment:
//   const auto *env = ::testing::AddGlobalTestEnvironment(new ulp::ceph_test::CephEnv);
// and reaches it through ulp::ceph_test::g_cluster; CEPH_CONF names it for the CLIs.
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#ifndef ULP_SOURCE_DIR
#error "ULP_SOURCE_DIR: the source tree (scripts/ceph-dev.sh)"
#endif

namespace ulp::ceph_test
{

// The cluster: started before the first test, stopped after the last.
struct Cluster {
	std::string dir;     // its directory (ceph.conf, keyring)
	std::string conf;    // dir/ceph.conf
	std::string keyring; // dir/keyring: client.admin's key
	bool up = false;     // started, to be stopped
};
inline Cluster g_cluster;

// cmd's stdout and stderr; *rc its exit status (-1: did not run or was killed).
inline std::string sh(const std::string &cmd, int *rc = nullptr)
{
	std::string out;
	FILE *p = popen((cmd + " 2>&1").c_str(), "r");
	if (!p) {
		if (rc)
			*rc = -1;
		return out;
	}
	char buf[4096];
	size_t n;
	while ((n = fread(buf, 1, sizeof(buf), p)) > 0)
		out.append(buf, n);
	int st = pclose(p);
	if (rc)
		*rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
	return out;
}

inline std::string ceph_dev(const std::string &args, int *rc)
{
	return sh("timeout 180 bash " ULP_SOURCE_DIR "/scripts/ceph-dev.sh " + args + " --dir " +
	              g_cluster.dir,
	          rc);
}

// The ceph CLI on the cluster, bounded.
inline std::string ceph_cli(const std::string &args, int *rc = nullptr)
{
	return sh("timeout 60 ceph --connect-timeout 10 " + args, rc);
}

// A TCP port nothing listens on now (the kernel's choice for port 0).
inline int free_port()
{
	int s = socket(AF_INET, SOCK_STREAM, 0);
	sockaddr_in a{};
	a.sin_family = AF_INET;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	socklen_t len = sizeof(a);
	if (bind(s, reinterpret_cast<sockaddr *>(&a), sizeof(a)) < 0 ||
	    getsockname(s, reinterpret_cast<sockaddr *>(&a), &len) < 0) {
		close(s);
		return 0;
	}
	close(s);
	return ntohs(a.sin_port);
}

class CephEnv : public ::testing::Environment
{
public:
	void SetUp() override
	{
		char tmpl[] = "/tmp/ulp-ceph-test.XXXXXX";
		ASSERT_TRUE(mkdtemp(tmpl));
		g_cluster.dir = tmpl;
		g_cluster.conf = g_cluster.dir + "/ceph.conf";
		g_cluster.keyring = g_cluster.dir + "/keyring";
		unsetenv("CEPH_ARGS");
		unsetenv("CEPH_CONF");
		unsetenv("CEPH_KEYRING");
		const int port = free_port();
		ASSERT_GT(port, 0);
		int rc = 0;
		std::string out =
		    ceph_dev("start --port " + std::to_string(port) + " --timeout 60", &rc);
		ASSERT_EQ(rc, 0) << out;
		g_cluster.up = true;
		setenv("CEPH_CONF", g_cluster.conf.c_str(), 1); // for the rbd and ceph CLIs
	}
	void TearDown() override
	{
		if (!g_cluster.up)
			return;
		int rc = 0;
		std::string out = ceph_dev("stop --timeout 20", &rc);
		EXPECT_EQ(rc, 0) << out;
		sh("rm -rf " + g_cluster.dir);
	}
};

} // namespace ulp::ceph_test
