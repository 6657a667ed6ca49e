// SPDX-License-Identifier: MIT
// tools/ulp-stress/target.h - the ulp-targetd under stress: one this tool starts (on the
// soft provider: a RAM LUN, iSCSI/TCP, iSER and SRP portals on 127.0.0.1, an admin socket
// in a temporary directory) or one it is given by address, and its admin socket
// (JSON-RPC, admin/client.h).
#pragma once

#include "admin/rpc.h"
#include "tools/ulp-stress/nexus.h"

#include <sys/types.h>

#include <chrono>
#include <mutex>
#include <string>

namespace stress
{

using ulp::admin::json;

struct TargetOptions {
	std::string targetd; // the ulp-targetd binary (started by us)
	std::string lun_size = "64M";
	std::string config;       // started by us: a TOML file's text for --config ("": none),
	                          // e.g. small RDMA pools (starvation.cc); joins the flags
	bool config_only = false; // started by us: the config says it all (portals, targets,
	                          // LUNs; no flags for them), the ready line needs only its
	                          // first port (gateways.cc)
	std::string dir;          // started by us: the directory for the admin socket, the
	                          // config and the log, kept across restarts ("": a new
	                          // temporary one, removed when the Target goes)
	std::string admin_socket; // given target: its admin socket ("" = no resource checks)
	pid_t pid = 0;            // given target: its pid for /proc (0 = unknown)
};

class Target
{
public:
	Target() = default;
	~Target(); // kills a daemon of ours still running
	Target(const Target &) = delete;
	Target &operator=(const Target &) = delete;

	// Start our own ulp-targetd and wait (bounded) until its portals listen; fills *ep.
	// Again after it ended: a restart (the same directory, its log appended to).
	bool start(const TargetOptions &o, Endpoint *ep, std::string *why);
	// Wait up to bound for our daemon to end: its status (exit code, or 128 + signal), or
	// -1 while it runs. Once it ended, pid() is 0.
	int wait_exit(std::chrono::milliseconds bound);
	// A target started by someone else.
	void attach(const TargetOptions &o);
	// SIGTERM, wait up to bound: its exit status (0: a clean stop), or -1 (killed).
	int stop(std::chrono::milliseconds bound);
	// Forget a daemon of ours (SIGKILL) at once.
	void kill_now();
	// kill_now, and remove our temporary directory: the watchdog's last resort before it
	// exits without running destructors.
	void abandon();

	bool has_admin() const { return !socket_.empty(); }
	pid_t pid() const { return pid_; }
	const std::string &admin_socket() const { return socket_; }
	bool ours() const { return ours_; }
	std::string log_tail(size_t lines) const; // our daemon's log, its last lines

	// One JSON-RPC call (a connection of its own, bounded): the result, or false + *why.
	bool call(const std::string &method, const json &params, json *result, std::string *why,
	          std::chrono::milliseconds timeout = std::chrono::seconds(10)) const;
	// The sessions whose initiator (iSCSI name, or SRP port id prefix) is who.
	bool sessions_of(const std::string &who, json *out, std::string *why) const;
	// Wait until it lists no nexus of who, up to bound: the time it took (ns), or -1 (still
	// there, or no answer: *why).
	int64_t wait_gone(const std::string &who, std::chrono::milliseconds bound,
	                  std::string *why) const;

private:
	bool ours_ = false;
	pid_t pid_ = 0;
	std::string dir_;      // our directory (admin socket, log)
	bool own_dir_ = false; // we made dir_: removed at the end
	std::string socket_;   // the admin socket
	std::string log_;      // our daemon's stderr
};

// The ulp-targetd to start: $ULP_TARGETD, else beside our own executable (an install puts
// them together; the build tree has ../ulp-targetd/), else the build's, else from PATH.
std::string find_targetd();
// Likewise any program of ours: $env, beside us, in an install's sbin, in the build tree's
// ../name/, at build_path (may be ""), else name (PATH).
std::string find_program(const std::string &name, const char *env, const char *build_path);

} // namespace stress
