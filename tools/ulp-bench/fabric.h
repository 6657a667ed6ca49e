// SPDX-License-Identifier: MIT
// tools/ulp-bench/fabric.h - `ulp-bench fabric` and its hidden `fabric-peer` helper.
#pragma once

#include <string>

namespace ulp::bench
{

struct FabricOptions {
	bool json = false;         // rows as JSON on stdout instead of the table
	bool quick = false;        // short run for CI / smoke (< 20 s)
	std::string wire = "both"; // inproc | xproc | xpkt | both (all)
	double min_time = 0;       // seconds per benchmark; 0 = 0.5 (0.05 / 0.1 with --quick)
	std::string ip;            // "" = 127.0.0.1 (soft) or the device's RoCE address
	std::string device;        // "" = a soft device; else a registered (verbs) device
	// Multi-QP mode (fabric_multi.cc) when > 0: this many connections at once, connection i
	// on completion vector i, each driven by its own thread.
	int qps = 0;
	// Multi-QP mode, soft provider: the engine count measured beside one engine (0: the
	// device default, min(num_comp_vectors, CPUs)).
	uint32_t engines = 0;
};

struct PeerOptions {
	int ready_fd = -1;      // the listener's port is written here, then it is closed
	int max_seconds = 1800; // give up waiting for the requester's disconnect after this
	std::string ip = "127.0.0.1";
	std::string device;   // as FabricOptions::device
	int qps = 1;          // responders, responder i on completion vector i
	uint32_t engines = 0; // the soft device's engines (0: its default)
};

int run_fabric(const FabricOptions &o);
int run_fabric_multi(const FabricOptions &o);
int run_fabric_peer(const PeerOptions &o);

} // namespace ulp::bench
