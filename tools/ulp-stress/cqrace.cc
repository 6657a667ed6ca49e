// SPDX-License-Identifier: MIT
// tools/ulp-stress/cqrace.cc - cq-race: teardown racing completions on the target's shared
// CQs. The daemon's iSER and SRP connections take their CQ entries from the device's CQ
// pool (rdma_conn/portal.h: one pool per device, shared by both portals), so sixteen
// nexuses at once, alternately iSER and SRP when the run covers both, put many QPs of both
// protocols on a few pooled CQs. Eight of them (the survivors, worker slots 0..7) do
// verified I/O through the whole scenario; in each cycle eight more (the victims) log in,
// start I/O, and are torn down at the same moment, while completions of all sixteen are
// flowing: three log out, three are dropped by the target (admin session_drop), two are
// initiators in child processes killed with SIGKILL (their writes journaled, kill.cc).
// SPDK took CQEs for QPs already destroyed on a shared CQ (issue #903's assertion), and a
// QP whose teardown flushes into a CQ another QP is polling is where use-after-free lives.
// What must hold, per cycle: every victim's nexus leaves the target (bounded: the teardown
// figure, from the moment to gone), every survivor completes commands after it (no
// survivor loses a command, fails one, or reads one back wrong), and a logout victim's
// commands all end GOOD. After the scenario post_check runs as usual: a verified session
// reads back every acknowledged generation and the resources return to their baseline.
#include "tools/ulp-stress/stress.h"

#include <algorithm>
#include <functional>
#include <latch>
#include <mutex>
#include <thread>

namespace stress
{

using clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

namespace
{

constexpr uint32_t kSurvivors = 8; // worker slots 0..7
constexpr uint32_t kVictims = 8;   // worker slots 8..15 (logout, drop), kill slots (kill)

enum class Fate : uint8_t { Logout, Drop, Kill };

Fate fate_of(uint32_t v)
{
	return v % 3 == 0 ? Fate::Logout : v % 3 == 1 ? Fate::Drop : Fate::Kill;
}

const char *fate_name(Fate f)
{
	return f == Fate::Logout ? "logout" : f == Fate::Drop ? "drop" : "kill";
}

bool covers(const Run &r, Transport t)
{
	return std::find(r.transports.begin(), r.transports.end(), t) != r.transports.end();
}

// One cycle's victims: log in, I/O, torn down at the moment go opens. false when the cycle
// could not be set up (failures already in row).
bool victims_cycle(Run &r, Row &row, const std::function<Transport(uint32_t)> &tr, uint32_t cycle,
                   const std::vector<std::atomic<uint64_t>> &sprog,
                   const std::vector<std::atomic<bool>> &salive)
{
	const std::string tag =
	    row.scenario + "/" + row.transport + " cycle " + std::to_string(cycle);
	std::latch ready(kVictims); // each victim in I/O (or given up)
	std::latch go(1);           // the moment
	std::vector<std::atomic<bool>> stop(kVictims);
	std::vector<Identity> ids(kVictims);
	std::vector<Transport> trs(kVictims);
	std::vector<std::thread> th;
	std::atomic<bool> setup_ok{true};
	clock::time_point moment{};
	std::mutex moment_lock;
	for (uint32_t v = 0; v < kVictims; v++) {
		const Fate f = fate_of(v);
		trs[v] = tr(v + 1); // survivor v is tr(v): the victims start on the other one
		ids[v] = identity("cqrace", f == Fate::Kill ? kKillSlot + v : kSurvivors + v);
		th.emplace_back([&, v, f] {
			const Transport t = trs[v];
			const Identity &id = ids[v];
			const uint32_t slot = f == Fate::Kill ? kKillSlot + v : kSurvivors + v;
			const std::string vtag = tag + " victim " + std::to_string(v) + " (" +
			                         transport_name(t) + ", " + fate_name(f) + ")";
			std::string why;
			bool counted = false;
			auto arrive = [&] {
				if (!counted)
					ready.count_down();
				counted = true;
			};
			if (f == Fate::Kill) {
				Watchdog::Step s(*r.wd, vtag, r.prof.step * 2);
				Child c;
				const uint64_t base = r.gens.next.fetch_add(uint64_t(1) << 32);
				// Bursts far longer than the cycle: killed during I/O.
				if (!c.spawn(r, t, id, r.slot(slot), base, cycle * 131 + v + 1,
				             r.prof.step, &why)) {
					row.fail(vtag + ": " + why);
					setup_ok = false;
					arrive();
					go.wait();
					return;
				}
				// In I/O with a write acknowledged: completions are flowing.
				const auto until = clock::now() + r.prof.step / 2;
				bool alive = true;
				while (alive && !(c.phase() == "io" && c.acked() > 0) &&
				       clock::now() < until)
					alive = c.pump(20);
				if (!(c.phase() == "io" && c.acked() > 0)) {
					row.fail(vtag + ": the child never got to I/O (phase " +
					         c.phase() + ")");
					setup_ok = false;
				}
				arrive();
				// Keep reading its journal until the moment.
				while (!go.try_wait())
					c.pump(5);
				bool exited = false;
				c.kill_and_reap(&exited);
				row.ios += c.acked();
				if (exited)
					row.fail(vtag + ": the child had ended before the kill");
			} else {
				std::unique_ptr<Nexus> n;
				{
					Watchdog::Step s(*r.wd, vtag + ": login", r.prof.step);
					n = Nexus::login(t, r.ep, id, &why);
				}
				if (!n || !lun_ready(n->disk(), r.lun, &why)) {
					row.fail(vtag + ": " + why);
					setup_ok = false;
					arrive();
					go.wait();
					return;
				}
				std::string sid;
				if (f == Fate::Drop) {
					json mine;
					if (r.target.sessions_of(who(t, id), &mine, &why) &&
					    mine.size() == 1)
						sid = mine[0].value("id", "");
					if (sid.empty()) {
						row.fail(vtag +
						         ": not listed once at the target: " +
						         mine.dump() + why);
						setup_ok = false;
					}
				}
				std::atomic<uint64_t> prog{0};
				// The dropper (a drop victim) and the I/O start together; the
				// dropper waits for the moment.
				std::thread dropper;
				if (f == Fate::Drop && !sid.empty())
					dropper = std::thread([&] {
						go.wait();
						json res;
						std::string w;
						if (!r.target.call("session_drop", {{"id", sid}},
						                   &res, &w)) {
							row.fail(vtag + ": session_drop: " + w);
							stop[v] = true; // its I/O would go on
						}
					});
				std::thread waker([&] {
					// Ready once the first commands completed; at the moment a
					// logout victim stops issuing (then logs out).
					const auto until = clock::now() + r.prof.step / 2;
					while (prog.load() == 0 && clock::now() < until &&
					       !stop[v].load())
						std::this_thread::sleep_for(2ms);
					arrive();
					go.wait();
					if (f == Fate::Logout || sid.empty())
						stop[v] = true;
				});
				IoStats st;
				{
					Watchdog::Step s(*r.wd, vtag + ": I/O until the moment",
					                 r.prof.step * 2);
					IoOptions o;
					o.io_blocks = r.io_blocks;
					o.qd = 8;
					o.duration = r.prof.step;
					o.stop = &stop[v];
					o.seed = cycle * 7919 + v + 1;
					o.progress = &prog;
					run_io(n->disk(), r.lun, *r.ledger, r.slot(slot), r.gens, o,
					       nullptr, &st);
				}
				// A dropped victim's I/O ends when its connection does; make sure
				// the waker can end however the I/O did.
				stop[v] = true;
				waker.join();
				if (dropper.joinable())
					dropper.join();
				if (prog.load() == 0) {
					row.fail(vtag + ": no command completed before the moment");
					setup_ok = false;
				}
				row.add_io(st,
				           f == Fate::Logout); // a drop loses what was in flight
				if (f == Fate::Logout) {
					Watchdog::Step s(*r.wd, vtag + ": logout", r.prof.step);
					if (!n->logout())
						row.fail(vtag + ": logout refused: " + n->error());
				} else if (st.fatal.empty() && !n->failed()) {
					row.fail(vtag + ": its I/O went on after session_drop");
				}
				n.reset();
			}
			// Gone from the target: the teardown figure, from the moment.
			Watchdog::Step s(*r.wd, vtag + ": gone from the target", r.prof.step);
			if (r.target.wait_gone(who(t, id), r.prof.step / 2, &why) < 0) {
				row.fail(vtag + ": " + why);
			} else {
				std::lock_guard g(moment_lock);
				row.add_teardown(clock::now() - moment);
			}
		});
	}
	{
		Watchdog::Step s(*r.wd, tag + ": victims into I/O", r.prof.step);
		ready.wait();
	}
	{
		std::lock_guard g(moment_lock);
		moment = clock::now();
	}
	// Survivors' commands so far: each must complete more once the victims are gone.
	std::vector<uint64_t> mark(kSurvivors);
	for (uint32_t i = 0; i < kSurvivors; i++)
		mark[i] = sprog[i].load();
	go.count_down();
	for (auto &x : th)
		x.join();
	{
		Watchdog::Step s(*r.wd, tag + ": survivors after the teardown", r.prof.step);
		const auto until = clock::now() + r.prof.step / 2;
		for (uint32_t i = 0; i < kSurvivors; i++) {
			if (!salive[i].load())
				continue;
			while (sprog[i].load() <= mark[i] && salive[i].load() &&
			       clock::now() < until)
				std::this_thread::sleep_for(5ms);
			if (sprog[i].load() <= mark[i] && salive[i].load())
				row.fail(tag + ": survivor " + std::to_string(i) + " (" +
				         transport_name(tr(i)) +
				         ") completed nothing after the teardown of the victims");
		}
	}
	return setup_ok.load();
}

} // namespace

void cq_race(Run &r, Transport t, Row &row)
{
	if (t == Transport::Tcp) {
		row.note("not run: a shared CQ is the RDMA transports'");
		return;
	}
	if (!r.target.has_admin()) {
		row.fail("cq-race needs the target's admin socket (--admin-socket)");
		return;
	}
	// Alternately t and the other RDMA transport, when the run covers it.
	const Transport other = t == Transport::Iser ? Transport::Srp : Transport::Iser;
	const bool mix = covers(r, other);
	const std::function<Transport(uint32_t)> tr = [&](uint32_t i) {
		return mix && i % 2 ? other : t;
	};
	std::vector<std::atomic<uint64_t>> sprog(kSurvivors);
	std::vector<std::atomic<bool>> salive(kSurvivors);
	std::atomic<bool> stop{false};
	std::vector<std::thread> th;
	std::latch up(kSurvivors);
	for (uint32_t i = 0; i < kSurvivors; i++)
		th.emplace_back([&, i] {
			const Transport st_t = tr(i);
			const Identity id = identity("cqrace", i);
			const std::string stag = row.scenario + "/" + row.transport + " survivor " +
			                         std::to_string(i) + " (" + transport_name(st_t) +
			                         ")";
			std::string why;
			std::unique_ptr<Nexus> n;
			{
				Watchdog::Step s(*r.wd, stag + ": login", r.prof.step);
				n = Nexus::login(st_t, r.ep, id, &why);
			}
			if (!n || !lun_ready(n->disk(), r.lun, &why)) {
				row.fail(stag + ": " + why);
				up.count_down();
				return;
			}
			salive[i] = true;
			up.count_down();
			IoStats st;
			{
				Watchdog::Step s(*r.wd, stag + ": I/O through every cycle",
				                 r.prof.scenario + r.prof.step);
				IoOptions o;
				o.io_blocks = r.io_blocks;
				o.qd = 8;
				o.duration = r.prof.scenario + r.prof.step;
				o.stop = &stop;
				o.seed = i * 65537 + 11;
				o.progress = &sprog[i];
				run_io(n->disk(), r.lun, *r.ledger, r.slot(i), r.gens, o, nullptr,
				       &st);
			}
			salive[i] = false;
			if (!st.fatal.empty())
				row.fail(stag +
				         ": lost its nexus while the others were torn down: " +
				         st.fatal);
			row.add_io(st, true);
			Watchdog::Step s(*r.wd, stag + ": logout", r.prof.step);
			if (!n->logout())
				row.fail(stag + ": logout refused: " + n->error());
			n.reset();
			if (r.target.wait_gone(who(st_t, id), r.prof.step / 2, &why) < 0)
				row.fail(stag + ": " + why);
		});
	up.wait();
	const auto deadline = clock::now() + r.prof.scenario;
	uint32_t cycle = 0;
	for (; cycle < r.prof.cq_cycles && clock::now() < deadline; cycle++) {
		if (!victims_cycle(r, row, tr, cycle, sprog, salive))
			break; // set-up failed: said in row
		row.cycles++;
	}
	stop = true;
	for (auto &x : th)
		x.join();
	if (cycle < r.prof.cq_cycles && row.failures.load() == 0)
		row.note("time bound reached after " + std::to_string(cycle) + " cycles");
	row.note(std::to_string(kSurvivors + kVictims) + " nexuses (" +
	         (mix ? "iSER and SRP alternately" : std::string(transport_name(t)) + " only") +
	         "), 8 torn down at once per cycle: " + std::to_string((kVictims + 2) / 3) +
	         " logouts, " + std::to_string((kVictims + 1) / 3) + " session_drops, " +
	         std::to_string(kVictims / 3) + " SIGKILLs");
}

} // namespace stress
