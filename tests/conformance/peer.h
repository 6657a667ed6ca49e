// SPDX-License-Identifier: MIT
// tests/conformance/peer.h - the remote end of a conformance test's connection.
//
// A Peer is an Endpoint driven by commands, either directly in this process or in a child
// process over a socketpair. Tests read the same whichever side the peer is on. The peer is
// always the passive side: it listens, and accepts each CONNECT_REQUEST with its EpConfig's
// private data; the test's own endpoint connects.
//
// Cross-process: spawn_xproc_peer() forks before the test creates anything (soft devices
// start engine threads, and a forked child has only the forking thread). When the process
// already has other threads (an earlier test in the same run left provider threads), the
// child re-executes this binary with --conformance-peer=FD instead, so that it starts clean.
// The child never returns into gtest: it serves commands and _exits. Every command has a
// deadline; a peer that does not answer fails the command with -ETIMEDOUT.
#pragma once

#include "tests/conformance/env.h"

#include <sys/types.h>

namespace ulp::conf
{

class Peer
{
public:
	virtual ~Peer() = default;
	virtual bool remote() const = 0;

	// Create the peer's device (side 1), PD, CQs (and SRQ), and listen.
	virtual int listen(const EpConfig &cfg, bool iwarp, SockAddr *addr) = 0;
	virtual int wait_cm_event(CmEventType t, int timeout_ms) = 0;
	virtual MrInfo reg_mr(size_t len, uint32_t access, bool other_pd = false) = 0;
	virtual int fill(int mr, uint64_t off, std::span<const uint8_t> data) = 0;
	virtual int read(int mr, uint64_t off, uint32_t len, std::vector<uint8_t> *out) = 0;
	virtual int post_recv(int mr, uint64_t off, uint32_t len, int n, uint32_t wr_id) = 0;
	virtual int post_send(const PostSend &ps) = 0;
	// Reap until n completions or timeout_ms; returns the number reaped or -errno.
	virtual int poll(int n, int timeout_ms, std::vector<WcInfo> *out) = 0;
	virtual int qp_state(QpState *s) = 0;
	virtual int peer_pdata(std::vector<uint8_t> *out) = 0;
	// Endpoint::event_credits of the CONNECT_REQUEST, and Endpoint::qp_credits.
	virtual int event_credits(ReadCredits *out) = 0;
	virtual int qp_credits(ReadCredits *out) = 0;
	virtual int disconnect() = 0;
	// soft::cut_connection on the peer's QP; -EOPNOTSUPP where the fabric cannot.
	virtual int cut() = 0;
	// The peer process dies (SIGKILL). -EOPNOTSUPP in-process.
	virtual int kill() = 0;
	// Tear down in order and, for a child, reap it (bounded). 0 when it exited cleanly.
	virtual int shutdown() = 0;
};

std::unique_ptr<Peer> make_inproc_peer(const FabricDesc &f);
// Fork the peer process. Must run before this process creates any device.
std::unique_ptr<Peer> spawn_xproc_peer(const FabricDesc &f);

// main.cc: a re-executed child runs this and never returns.
[[noreturn]] void run_peer_server(const std::string &fabric, int fd);

} // namespace ulp::conf
