// SPDX-License-Identifier: MIT
// tools/ulp-stress/exhaustion.cc - exhaustion: the target's per-nexus limits used up and
// held there, in rounds of two phases on the worker slots (0..15):
//   credits  two nexuses, each with 256 small commands wanted in flight over 2 MiB of its
//            own: more than the SRP credits the target grants at login (req_lim, one per
//            receive it posted: rq_size 128) and than the iSCSI CmdSN window (cmd_window
//            128, RFC 7143 3.2.2.1), so every receive of the channel is in use and the
//            initiator is held back (SRP: submits refused for want of a credit, ib_srp's
//            zero_req_lim; iSCSI: commands waiting for MaxCmdSN);
//   large    eight nexuses at once, each with 64 KiB commands over its 512 KiB: the
//            target's send queues, its RDMA READ/WRITE contexts and its registered data
//            buffers busy with large transfers from many nexuses.
// What must hold: every command ends GOOD, or with BUSY or TASK SET FULL (SAM-5 5.3: the
// target may hold an initiator back that way; the command is retried, its write stays
// uncertain in the ledger); none is lost, nothing reads back wrong, nothing hangs (the
// watchdog), and the initiators were really held back in the credits phase (else the phase
// did not exhaust anything: a failure). The target's answers are noted: the most commands
// it listed in flight for one nexus, the BUSY answers. The resources and the ledger are
// checked after the scenario (post_check).
#include "tools/ulp-stress/stress.h"

#include <algorithm>
#include <thread>

namespace stress
{

using clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

namespace
{

struct Phase {
	const char *name;
	uint32_t nexuses;    // at once
	uint32_t slots;      // worker slots per nexus (contiguous)
	uint32_t io_bytes;   // per command (0: the run's small I/O)
	uint32_t qd;         // commands wanted in flight per nexus
	bool must_hold_back; // the initiator must have been held back by the target's limit
};

constexpr Phase kPhases[] = {
    {"credits", 2, 8, 0, 256, true},
    {"large", 8, 2, 64 * 1024, 8, false},
};

// Session_list's largest cmds_in_flight of one of our nexuses, polled until stop.
void sample_in_flight(Run &r, const std::string &prefix, const std::atomic<bool> &stop,
                      std::atomic<int64_t> *most)
{
	while (!stop.load()) {
		json all;
		std::string why;
		if (r.target.call("session_list", json::object(), &all, &why, 2s))
			for (const json &s : all) {
				const std::string name = s.value("initiator", "");
				const std::string port = s.value("initiator_port", "");
				if (name.rfind(prefix, 0) != 0 && port.rfind(prefix, 0) != 0)
					continue;
				const int64_t n = s.value("cmds_in_flight", int64_t(0));
				int64_t m = most->load();
				while (n > m && !most->compare_exchange_weak(m, n)) {
				}
			}
		std::this_thread::sleep_for(10ms);
	}
}

void run_phase(Run &r, Transport t, Row &row, const Phase &p, uint32_t round)
{
	const std::string tag = "exhaustion/" + std::string(transport_name(t)) + " " + p.name;
	const uint32_t bs = r.ledger->block_size();
	const uint32_t io_blocks =
	    p.io_bytes ? std::max<uint32_t>(1, p.io_bytes / bs) : r.io_blocks;
	std::atomic<uint64_t> held{0}, busy{0};
	std::atomic<bool> stop{false};
	std::atomic<int64_t> most{0};
	std::thread sampler;
	const std::string prefix = t == Transport::Srp ? srp_port_prefix(0x5700).substr(0, 14)
	                                               : "iqn.2026-11.org.ulp:stress-exhaust-";
	if (r.target.has_admin())
		sampler =
		    std::thread(sample_in_flight, std::ref(r), prefix, std::cref(stop), &most);
	std::vector<std::thread> th;
	for (uint32_t i = 0; i < p.nexuses; i++)
		th.emplace_back([&, i] {
			const uint32_t first = i * p.slots;
			const std::string wtag = tag + " nexus " + std::to_string(i);
			Identity id = identity("exhaust", first);
			id.qd = p.qd;
			id.max_io = io_blocks * bs;
			std::string why;
			std::unique_ptr<Nexus> n;
			{
				Watchdog::Step s(*r.wd, wtag + ": login", r.prof.step);
				n = Nexus::login(t, r.ep, id, &why);
			}
			if (!n) {
				row.fail(wtag + ": login: " + why);
				return;
			}
			IoStats st;
			{
				Watchdog::Step s(*r.wd, wtag + ": I/O", r.prof.step);
				if (!lun_ready(n->disk(), r.lun, &why)) {
					row.fail(wtag + ": " + why);
				} else {
					IoOptions o;
					o.qd = p.qd;
					o.io_blocks = io_blocks;
					o.duration = r.prof.io * 3;
					o.seed = round * 977 + i + 1;
					const Region reg{r.slot(first).first,
					                 uint64_t(p.slots) * r.slot_blocks};
					run_io(n->disk(), r.lun, *r.ledger, reg, r.gens, o, nullptr,
					       &st);
				}
			}
			row.add_io(st, true, true);
			// SRP counts its refusals itself (zero_req_lim); iSCSI queues instead.
			held += std::max(st.held, n->held_back());
			busy += st.busy;
			{
				Watchdog::Step s(*r.wd, wtag + ": logout", r.prof.step);
				const auto t0 = clock::now();
				if (!n->logout())
					row.fail(wtag + ": logout refused: " + n->error());
				n.reset();
				if (r.target.has_admin() &&
				    r.wait_gone(who(t, id), r.prof.step / 2, &why) < 0)
					row.fail(wtag + ": " + why);
				row.add_teardown(clock::now() - t0);
			}
		});
	for (auto &x : th)
		x.join();
	stop = true;
	if (sampler.joinable())
		sampler.join();
	if (p.must_hold_back && held.load() == 0)
		row.fail(tag + ": no initiator was ever held back: the phase exhausted nothing");
	if (round == 0)
		row.note(std::string(p.name) + ": " + std::to_string(p.nexuses) + " nexuses x " +
		         std::to_string(p.qd) + " commands of " + std::to_string(io_blocks * bs) +
		         " bytes wanted; held back " + std::to_string(held.load()) +
		         " times, BUSY/TASK SET FULL answers " + std::to_string(busy.load()) +
		         ", the target listed up to " + std::to_string(most.load()) +
		         " commands in flight for one nexus");
	row.cycles++;
}

} // namespace

void exhaustion(Run &r, Transport t, Row &row)
{
	const auto deadline = clock::now() + r.prof.scenario;
	uint32_t round = 0;
	for (; round < r.prof.exhaust && clock::now() < deadline; round++)
		for (const Phase &p : kPhases)
			run_phase(r, t, row, p, round);
	if (round < r.prof.exhaust)
		row.note("time bound reached after " + std::to_string(round) + " rounds");
}

} // namespace stress
