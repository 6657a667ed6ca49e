// SPDX-License-Identifier: MIT
// iscsi/target/tcp.h - the iSCSI/TCP transport, target side: portals (listening sockets) and
// worker threads, each running an epoll loop (core/epoll_loop.h) over many connections
// (RFC 7143 on TCP).
//
// A worker owns its connections: it reads their sockets, cuts the bytes into PDUs
// (PduReader, digests and MaxRecvDataSegmentLength as the login set them), hands them to
// the Conn, runs the events other threads posted, writes what the Conn queued (one
// sendmsg gathers many PDUs; a full socket waits for EPOLLOUT), ticks the Conn's timers,
// and frees a Conn once it is done. Sockets are non-blocking; no call blocks the loop.
//
// Accepting: worker 0 watches the listening sockets and deals new connections to the
// workers in turn.
#pragma once

#include "iscsi/target/target.h"

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace ulp::iscsi::target
{

class TcpWorker;

struct TcpConfig {
	int workers = 1;                     // event-loop threads
	std::chrono::milliseconds tick{100}; // timer resolution (NOP pings, timeouts)
	int sndbuf = 0;                      // SO_SNDBUF / SO_RCVBUF; 0: the system's
	int rcvbuf = 0;
	std::vector<int> cpus; // worker i runs on CPU cpus[i % size()]; empty: where the
	                       // kernel puts it
};

class TcpServer
{
public:
	TcpServer(Target &target, const TcpConfig &cfg = {});
	// Stops the workers (call Target::stop first, so that no connection is left).
	~TcpServer();
	TcpServer(const TcpServer &) = delete;
	TcpServer &operator=(const TcpServer &) = delete;

	// Listen on host:port (IPv4 or IPv6 literal, or "" / "0.0.0.0" for any; port 0: an
	// ephemeral one), as portal number portals() - 1. Before start(), or after it (a portal
	// added while serving: worker 0 starts accepting on it). 0, or a negative errno with
	// *why set. Not thread safe against itself or close_portal (one caller configures).
	int listen(const std::string &host, uint16_t port, std::string *why);
	// Stop accepting on portal i and close its socket; its connections stay (they belong
	// to their sessions). 0 or -ENOENT (no such portal, or closed already).
	int close_portal(size_t i);
	// The port of the i-th portal (after listen, useful with port 0); 0 once closed.
	uint16_t port(size_t i) const;
	size_t portals() const { return ports_.size(); }

	int start();           // start the workers; 0 or a negative errno
	void stop_accepting(); // close the listening sockets (connections stay)
	void stop();           // stop and join the workers (idempotent)

	// Connections alive on the workers (diagnostics, tests).
	size_t conns() const;

private:
	Target &target_;
	TcpConfig cfg_;
	std::vector<int> listen_fds_; // until start() hands them to worker 0
	std::vector<uint16_t> ports_; // bound port of each portal (0: closed)
	std::vector<int> fds_;        // its socket (-1: closed); worker 0's once started
	std::vector<std::unique_ptr<TcpWorker>> workers_;
	bool started_ = false;
};

} // namespace ulp::iscsi::target
