// SPDX-License-Identifier: MIT
// tools/ulp-stress/starvation.cc - starvation: the target's RDMA resources used up by many
// nexuses at once, on a second ulp-targetd this scenario starts with small pools:
//   - the registered data buffers (iser.buffer_pool, srp.buffer_pool: 16 MiB, the least a
//     pool of 16 MiB commands has), which sixteen nexuses of 16 commands of 512 KiB want
//     eight times over: a command that finds none is answered TASK SET FULL (SAM-5 5.3).
//     The commands are large because the target only holds what has reached it: with
//     sixteen client threads on two cores (slower still under a sanitizer) the target
//     often finishes a command before its initiator sends the next, and with 128 KiB
//     commands (32 MiB wanted) the pool's high-water mark stayed below 16 MiB in some runs;
//   - iSER's send buffers (iser.send_ring 8 per connection, for a window of 32): responses
//     wait for one;
//   - SRP's receives: one shared receive queue of 16 (srp.srq_size) for sixteen channels
//     of 32 credits each, so the queue runs dry and the initiators' SENDs meet RNR NAKs;
//     and a send queue of 64 WRs per channel (srp.sq_size). SPDK issue #2180 is the trap:
//     a target that keeps a receive until its command completes lets one busy channel
//     hold the whole SRQ and starve the others. This scenario found a second one in ulp:
//     credits beyond the SRQ's receives leave the flow control to RNR NAKs, under which
//     some channels completed a hundredth of what others did; srpt now grants a channel
//     on an SRQ its share of the receives (srp/target/channel.h, credits).
// Each nexus writes and reads its own 2 MiB and reads a shared 8 MiB that one session
// wrote before (fill_region), so the data in flight is not bounded by the blocks a nexus
// owns. A round's I/O lasts 8 x the profile's I/O burst, longer on a machine too slow for
// that (a sanitizer's build: end_round). What must hold: every nexus makes progress (at least one
// write and one read completed GOOD, and at least a 30th of the commands of the busiest nexus of
// its round: the client threads share the CPU, not evenly under load, and the starved channels had
// a hundredth and less), nothing is lost, failed or read back wrong; the phase really held work
// back (TASK SET FULL answers, commands the initiators held for want of a credit, or RNR NAKs our
// device saw); afterwards a new session reads back every block, the second daemon's resources
// (connections, QPs, CQ entries, MRs, buffer bytes, fds, threads) are back at its own baseline and
// it stops cleanly (exit status 0). Then post_check checks the main daemon as after any scenario.
#include "tools/ulp-stress/stress.h"

#include "providers/soft/soft.h"

#include <algorithm>
#include <atomic>
#include <random>
#include <thread>

namespace stress
{

using clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

namespace
{

constexpr uint32_t kNexuses = 16;          // at once
constexpr uint32_t kQd = 16;               // commands wanted in flight per nexus
constexpr uint32_t kIoBytes = 512 * 1024;  // per command
constexpr uint64_t kOwnBytes = 2 << 20;    // each nexus's own blocks (with the shared: 20 commands
                                           // wide, so all 16 can be in flight)
constexpr uint64_t kSharedBytes = 8 << 20; // read by all, written once before
constexpr const char *kPool = "16M";       // both transports' buffer pools
constexpr uint32_t kSendRing = 8;          // iSER send buffers per connection
constexpr uint32_t kSrqSize = 16;          // SRP's shared receive queue
constexpr uint32_t kRqSize = 32;           // SRP credits per channel
constexpr uint64_t kFairness = 30;         // the least served nexus: >= 1/30 of the most
constexpr uint32_t kSqSize = 64;           // SRP send queue per channel, WRs
constexpr uint64_t kMinGood = 10;          // a round lasts until every nexus has this many

// The second daemon's file: joins the flags Target::start gives (portals, LUN, socket).
std::string small_pools_toml()
{
	return "[iscsi]\ncmd_window = 32\n"
	       "[iser]\nbuffer_pool = \"" +
	       std::string(kPool) + "\"\nsend_ring = " + std::to_string(kSendRing) +
	       "\n"
	       "[srp]\nbuffer_pool = \"" +
	       kPool + "\"\nsrq = true\nsrq_size = " + std::to_string(kSrqSize) +
	       "\nrq_size = " + std::to_string(kRqSize) + "\nsq_size = " + std::to_string(kSqSize) +
	       "\n";
}

// stats_get's rdma_portals[], summed: the pools' sizes as the daemon made them.
int64_t portal_sum(const json &stats, const char *key)
{
	int64_t n = 0;
	for (const json &p : stats.value("rdma_portals", json::array()))
		n += p.value(key, int64_t(0));
	return n;
}

struct NexusResult {
	IoStats st;
	uint64_t held = 0; // submits the initiator held back (no credit, CmdSN window)
	bool logged_in = false;
	// While the round runs, for its end (see the round's comment):
	std::atomic<uint64_t> good{0};   // commands completed GOOD
	std::atomic<uint64_t> writes{0}; // writes among them
	std::atomic<int64_t> io_ns{0};   // steady clock when its I/O began; 0: not yet
	std::atomic<bool> done{false};   // its I/O is over, or it never began (a failure)
};

int64_t now_ns()
{
	return std::chrono::duration_cast<std::chrono::nanoseconds>(clock::now().time_since_epoch())
	    .count();
}

// The round ends (*stop) once every nexus has had its I/O for min_io and completed a write,
// a read and kMinGood commands, or has ended; at bound at the latest. On a fast build that
// is min_io for all; where the machine is slow (a sanitizer) a fixed window left some
// nexuses only their first commands, answered TASK SET FULL, and called them starved.
// Returns how long the round ran.
std::chrono::milliseconds end_round(std::vector<NexusResult> &res, std::atomic<bool> &stop,
                                    std::chrono::milliseconds min_io,
                                    std::chrono::milliseconds bound)
{
	const auto t0 = clock::now();
	const int64_t min_ns = std::chrono::nanoseconds(min_io).count();
	auto served = [&](const NexusResult &x) {
		if (x.done)
			return true;
		const int64_t s = x.io_ns;
		const uint64_t g = x.good, w = x.writes;
		return s != 0 && now_ns() - s >= min_ns && w > 0 && g > w && g >= kMinGood;
	};
	while (clock::now() - t0 < bound && !std::all_of(res.begin(), res.end(), served))
		std::this_thread::sleep_for(10ms);
	stop = true;
	return std::chrono::duration_cast<std::chrono::milliseconds>(clock::now() - t0);
}

} // namespace

void starvation(Run &r, Transport t, Row &row)
{
	const std::string tag = "starvation/" + std::string(transport_name(t));
	if (t == Transport::Tcp) {
		row.note("not run: the pools and receive queues it starves are iSER's and SRP's");
		return;
	}
	if (!r.target.ours() || !r.soft_dev) {
		row.note("not run: it starts a ulp-targetd of its own with small pools on the soft "
		         "provider (not with --target-address or --rdma-device)");
		return;
	}
	// The second daemon.
	Target small;
	Endpoint ep;
	{
		Watchdog::Step s(*r.wd, tag + ": start a ulp-targetd with small pools",
		                 r.prof.step);
		TargetOptions o;
		o.targetd = r.targetd;
		o.config = small_pools_toml();
		std::string why;
		if (!small.start(o, &ep, &why)) {
			row.fail(tag + ": " + why);
			return;
		}
	}
	ep.rdma_device = r.ep.rdma_device;
	ep.src_ip = r.ep.src_ip;
	const uint32_t bs = r.ledger->block_size();
	const uint32_t io_blocks = kIoBytes / bs;
	const uint64_t own = kOwnBytes / bs;
	const Region shared{kNexuses * own, kSharedBytes / bs};
	std::random_device rd;
	Ledger ledger(rd(), bs, 0, shared.first + shared.count);
	auto id_of = [&](uint32_t i) {
		Identity id = identity("starve", i);
		id.qd = kQd;
		id.max_io = kIoBytes;
		return id;
	};

	// The shared blocks, written once; then the daemon's baseline (what a first login makes
	// and keeps, the device's pools, is not a leak).
	ResourceSnapshot base;
	{
		Watchdog::Step s(*r.wd, tag + ": fill the shared blocks", r.prof.step);
		std::string why;
		const Identity id = id_of(kNexuses);
		auto n = Nexus::login(t, ep, id, &why);
		IoStats st;
		if (!n || !lun_ready(n->disk(), 0, &why)) {
			row.fail(tag + ": fill: " + why);
			return;
		}
		fill_region(n->disk(), 0, ledger, shared, r.gens, io_blocks, kQd, &st);
		row.add_io(st, true, true);
		if (!st.fatal.empty()) {
			row.fail(tag + ": " + st.fatal);
			return;
		}
		if (!n->logout())
			row.fail(tag + ": fill: logout refused: " + n->error());
		n.reset();
		if (small.wait_gone(who(t, id), r.prof.step / 2, &why) < 0)
			row.fail(tag + ": fill: " + why);
		if (!stable_snapshot(small, &base, &why, true)) {
			row.fail(tag + ": the second daemon's baseline: " + why);
			return;
		}
	}
	json stats;
	std::string why;
	if (!small.call("stats_get", json::object(), &stats, &why)) {
		row.fail(tag + ": stats_get: " + why);
		return;
	}
	const int64_t pool_bytes = portal_sum(stats, "heap_bytes");
	const uint64_t rnr0 = ulp::soft::device_counters(*r.soft_dev).rnr_naks;
	uint64_t busy = 0, held = 0, least = UINT64_MAX, most = 0;
	std::chrono::microseconds worst{0};
	std::chrono::milliseconds shortest{INT64_MAX}, longest{0}; // rounds
	const auto min_io = r.prof.io * 8;
	const auto bound = std::max<std::chrono::milliseconds>(
	    min_io, std::chrono::duration_cast<std::chrono::milliseconds>(r.prof.step / 2));
	const auto deadline = clock::now() + r.prof.scenario;
	uint32_t round = 0;
	for (; round < r.prof.starve && clock::now() < deadline; round++) {
		// Sixteen nexuses at once.
		std::vector<NexusResult> res(kNexuses);
		std::atomic<bool> stop{false};
		std::vector<std::thread> th;
		for (uint32_t i = 0; i < kNexuses; i++)
			th.emplace_back([&, i] {
				const std::string wtag = tag + " nexus " + std::to_string(i);
				const Identity id = id_of(i);
				std::string w;
				std::unique_ptr<Nexus> n;
				{
					Watchdog::Step s(*r.wd, wtag + ": login", r.prof.step);
					n = Nexus::login(t, ep, id, &w);
				}
				if (!n) {
					res[i].done = true;
					row.fail(wtag + ": login: " + w);
					return;
				}
				res[i].logged_in = true;
				{
					Watchdog::Step s(*r.wd, wtag + ": I/O", r.prof.step);
					if (!lun_ready(n->disk(), 0, &w)) {
						row.fail(wtag + ": " + w);
					} else {
						IoOptions o;
						o.qd = kQd;
						o.io_blocks = io_blocks;
						o.duration = bound;
						o.stop = &stop;
						o.progress = &res[i].good;
						o.progress_writes = &res[i].writes;
						o.seed = round * 104723 + i * 7717 + 3;
						o.shared = shared;
						res[i].io_ns = now_ns();
						run_io(n->disk(), 0, ledger,
						       {uint64_t(i) * own, own}, r.gens, o, nullptr,
						       &res[i].st);
					}
					res[i].done = true;
				}
				row.add_io(res[i].st, true, true);
				res[i].held = std::max(res[i].st.held, n->held_back());
				{
					Watchdog::Step s(*r.wd, wtag + ": logout", r.prof.step);
					const auto t0 = clock::now();
					if (!n->logout())
						row.fail(wtag + ": logout refused: " + n->error());
					n.reset();
					if (small.wait_gone(who(t, id), r.prof.step / 2, &w) < 0)
						row.fail(wtag + ": " + w);
					row.add_teardown(clock::now() - t0);
				}
			});
		const auto len = end_round(res, stop, min_io, bound);
		shortest = std::min(shortest, len);
		longest = std::max(longest, len);
		for (auto &x : th)
			x.join();
		// Every nexus made progress: its own blocks written and read back.
		std::string per;
		for (uint32_t i = 0; i < kNexuses; i++)
			per += (i ? " " : "") + std::to_string(res[i].st.ios);
		if (r.verbose)
			r.say(tag + " round " + std::to_string(round) + ": GOOD per nexus: " + per);
		uint64_t rl = UINT64_MAX, rm = 0;
		for (uint32_t i = 0; i < kNexuses; i++) {
			const IoStats &st = res[i].st;
			busy += st.busy;
			held += res[i].held;
			rl = std::min(rl, st.ios);
			rm = std::max(rm, st.ios);
			worst = std::max(worst, st.worst);
			if (res[i].logged_in && (st.writes == 0 || st.ios == st.writes))
				row.fail(tag + " nexus " + std::to_string(i) +
				         ": starved: " + std::to_string(st.writes) +
				         " writes and " + std::to_string(st.ios - st.writes) +
				         " reads completed GOOD, " + std::to_string(st.busy) +
				         " answered TASK SET FULL or BUSY");
		}
		// Nor may one be left far behind: every nexus wants the same, for as long. (Over
		// an SRQ whose credits outran its receives, RNR NAKs left some channels at a
		// hundredth of the busiest one's commands, waiting 1.5 s for an answer.)
		if (rl * kFairness < rm)
			row.fail(tag + " round " + std::to_string(round) +
			         ": unfair: a nexus completed " + std::to_string(rl) +
			         " commands, another " + std::to_string(rm) +
			         " (GOOD per nexus: " + per + ")");
		least = std::min(least, rl);
		most = std::max(most, rm);
		row.cycles++;
	}
	if (round < r.prof.starve)
		row.note("time bound reached after " + std::to_string(round) + " rounds");
	const uint64_t rnr = ulp::soft::device_counters(*r.soft_dev).rnr_naks - rnr0;
	// The target held work back, or the phase starved nothing.
	if (busy == 0 && held == 0 && rnr == 0)
		row.fail(tag + ": nothing was held back (no TASK SET FULL, no command held for a "
		               "credit, no RNR NAK): the pools were not used up");
	row.note(std::to_string(kNexuses) + " nexuses x " + std::to_string(kQd) + " commands of " +
	         std::to_string(kIoBytes) + " bytes wanted from a " +
	         std::to_string(pool_bytes >> 20) + " MiB buffer pool" +
	         (t == Transport::Srp
	              ? ", an SRQ of " + std::to_string(kSrqSize) + " receives, " +
	                    std::to_string(kRqSize) + " credits per channel"
	              : ", " + std::to_string(kSendRing) + " send buffers per connection") +
	         "; TASK SET FULL answers " + std::to_string(busy) + ", held back " +
	         std::to_string(held) + " times, RNR NAKs " + std::to_string(rnr) +
	         "; GOOD per nexus and round " + std::to_string(least) + ".." +
	         std::to_string(most) + ", slowest answer " + std::to_string(worst.count() / 1000) +
	         " ms, rounds of " + std::to_string(shortest.count()) + ".." +
	         std::to_string(longest.count()) + " ms");

	// Every block back, the second daemon at its baseline, and a clean stop.
	{
		Watchdog::Step s(*r.wd, tag + ": read-back on the second daemon", r.prof.step);
		auto n = Nexus::login(t, ep, id_of(kNexuses + 1), &why);
		IoStats st;
		if (!n || !lun_ready(n->disk(), 0, &why)) {
			row.fail(tag + ": read-back: " + why);
		} else {
			verify_region(n->disk(), 0, ledger, {0, ledger.blocks()}, io_blocks, &st);
			if (!st.fatal.empty())
				row.fail(tag + ": read-back: " + st.fatal);
			st.fatal.clear();
			row.add_io(st, true);
			if (!n->logout())
				row.fail(tag + ": read-back: logout refused: " + n->error());
		}
		n.reset();
		if (small.wait_gone(who(t, id_of(kNexuses + 1)), r.prof.step / 2, &why) < 0)
			row.fail(tag + ": read-back: " + why);
	}
	{
		Watchdog::Step s(*r.wd, tag + ": the second daemon's baseline",
		                 r.prof.baseline + 5s);
		ResourceSnapshot now;
		if (!wait_for_baseline(
		        small, base, r.prof.baseline, [&](const std::string &m) { r.say(m); }, &now,
		        &why))
			row.fail(tag + ": the second daemon: " + why);
	}
	{
		Watchdog::Step s(*r.wd, tag + ": the second daemon's stop", 40s);
		const int st = small.stop(30s);
		if (st != 0)
			row.fail(tag + ": the second daemon stopped with status " +
			         std::to_string(st) + ":\n" + small.log_tail(20));
	}
}

} // namespace stress
