// SPDX-License-Identifier: MIT
// tests/iscsi/target_process.h - real iSCSI targets as child processes for the initiator
// tests: ulp-targetd on an ephemeral port (its --ready-fd tells the port, as
// targetd_smoke.sh uses it), and tgtd, the Linux userspace reference target (Debian
// package tgt), configured through tgtadm on a control port of its own.
//
// Every wait is bounded; the destructors kill what is still running.
#pragma once

#include <sys/types.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace ulp::test
{

using namespace std::chrono_literals;

// ulp-targetd, started with args plus --portal 127.0.0.1:0 --ready-fd.
class TargetdProcess
{
public:
	TargetdProcess() = default;
	~TargetdProcess();
	TargetdProcess(const TargetdProcess &) = delete;
	TargetdProcess &operator=(const TargetdProcess &) = delete;

	// False with *why when it did not come up within timeout (its log is in why).
	bool start(const std::vector<std::string> &args, std::string *why,
	           std::chrono::milliseconds timeout = 10s);
	uint16_t port() const { return port_; }
	uint16_t iser_port() const { return iser_port_; } // with --iser-portal in args
	uint16_t srp_port() const { return srp_port_; }   // with --srp-portal in args

	pid_t pid() const { return pid_; }
	bool running() const { return pid_ > 0; }
	// SIGTERM, then wait up to timeout (SIGKILL after it). The exit status, or -1.
	int stop(std::chrono::milliseconds timeout = 10s);
	// SIGKILL and reap.
	void kill();
	// Wait up to timeout for it to end on its own (reaped then): its exit status (128 +
	// the signal when killed), or -1 while it still runs.
	int wait(std::chrono::milliseconds timeout);
	// Everything it wrote to stderr so far.
	std::string log() const;

private:
	pid_t pid_ = -1;
	uint16_t port_ = 0;
	uint16_t iser_port_ = 0;
	uint16_t srp_port_ = 0;
	std::string log_path_;
};

// tgtd -f with one target and one file-backed LUN (LUN 1; tgtd's LUN 0 is its controller).
struct TgtdConfig {
	std::string iqn = "iqn.2026-11.org.ulp:tgt";
	uint64_t lun_size = 64u << 20;          // bytes of the backing file (in /dev/shm)
	std::string chap_user, chap_secret;     // incoming CHAP account (empty: none)
	std::string mutual_user, mutual_secret; // outgoing account (mutual CHAP)
	bool digests = false; // HeaderDigest/DataDigest=CRC32C (tgtd offers None otherwise)
};

class TgtdProcess
{
public:
	TgtdProcess() = default;
	~TgtdProcess();
	TgtdProcess(const TgtdProcess &) = delete;
	TgtdProcess &operator=(const TgtdProcess &) = delete;

	// False with *why (missing binary, no free port, tgtadm failing: the test skips).
	bool start(const TgtdConfig &cfg, std::string *why);
	uint16_t port() const { return port_; }
	void kill();

private:
	bool tgtadm(const std::vector<std::string> &args, std::string *out);

	pid_t pid_ = -1;
	uint16_t port_ = 0;
	int control_ = 0; // tgtd's management port (its socket in /var/run/tgtd)
	std::string file_;
	std::string log_path_;
};

// Run a program with args, wait (bounded), collect stdout and stderr. The exit status, or
// -1 when it had to be killed.
int run_program(const std::string &path, const std::vector<std::string> &args, std::string *out,
                std::string *err, std::chrono::milliseconds timeout = 60s);

// A TCP port on 127.0.0.1 that was free a moment ago, never one this process was given
// before (0 when none could be found).
uint16_t free_port();

// A scratch directory under /tmp for a daemon's socket and files, removed with what it
// holds. path is empty when it could not be made.
struct TempDir {
	std::string path;
	TempDir()
	{
		char t[] = "/tmp/ulp-test-XXXXXX";
		if (::mkdtemp(t))
			path = t;
	}
	~TempDir()
	{
		if (!path.empty())
			std::filesystem::remove_all(path);
	}
	TempDir(const TempDir &) = delete;
	TempDir &operator=(const TempDir &) = delete;
	std::string operator/(const std::string &f) const { return path + "/" + f; }
};

} // namespace ulp::test
