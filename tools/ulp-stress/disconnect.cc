// SPDX-License-Identifier: MIT
// tools/ulp-stress/disconnect.cc - target-disconnect: S nexuses do verified I/O while the
// admin socket drops one of them at a time from the target side (session_drop: connections
// closed at once; every third time session_logout: an iSCSI Async logout request or
// SRP_T_LOGOUT, dropped after a short grace). The worker sees its commands end, waits until
// the target no longer lists its nexus (so nothing it sent can still land), logs in again
// and carries on; its writes in flight at the drop are uncertain (old or new accepted).
// The teardown figure is the time from the RPC until the target no longer lists the nexus.
#include "tools/ulp-stress/stress.h"

#include <random>
#include <thread>

namespace stress
{

using clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

void target_disconnect(Run &r, Transport t, Row &row)
{
	if (!r.target.has_admin()) {
		row.fail("target-disconnect needs the target's admin socket (--admin-socket)");
		return;
	}
	const uint32_t workers = std::min(r.prof.sessions, kWorkerSlots);
	const auto deadline = clock::now() + r.prof.scenario;
	std::atomic<bool> stop{false};
	std::atomic<uint64_t> lost_seen{0};
	std::vector<std::thread> th;
	for (uint32_t w = 0; w < workers; w++)
		th.emplace_back([&, w] {
			const Identity id = identity("disc", w);
			const std::string tag =
			    row.scenario + "/" + transport_name(t) + " slot " + std::to_string(w);
			uint32_t seed = w * 104729 + 7;
			while (!stop.load() && clock::now() < deadline) {
				std::string why;
				std::unique_ptr<Nexus> n;
				{
					Watchdog::Step s(*r.wd, tag + ": login", r.prof.step);
					n = Nexus::login(t, r.ep, id, &why);
				}
				if (!n) {
					row.fail(tag + ": login: " + why);
					std::this_thread::sleep_for(100ms);
					continue;
				}
				IoStats st;
				{
					Watchdog::Step s(*r.wd, tag + ": I/O until dropped",
					                 r.prof.scenario + r.prof.step);
					// A drop may come before the first command: a lost TEST
					// UNIT READY is not a failure either.
					if (lun_ready(n->disk(), r.lun, &why)) {
						IoOptions o;
						o.io_blocks = r.io_blocks;
						o.duration = r.prof.scenario;
						o.stop = &stop;
						o.seed = seed++;
						run_io(n->disk(), r.lun, *r.ledger, r.slot(w),
						       r.gens, o, nullptr, &st);
					} else if (!n->failed()) {
						row.fail(tag + ": " + why);
					}
				}
				row.add_io(st, false); // commands lost to the drop are expected
				if (!st.fatal.empty() || n->failed()) {
					lost_seen++;
					n.reset();
					Watchdog::Step s(*r.wd,
					                 tag + ": wait for the dropped nexus to go",
					                 r.prof.step);
					if (r.wait_gone(who(t, id), r.prof.step / 2, &why) < 0)
						row.fail(tag + ": " + why);
					continue;
				}
				Watchdog::Step s(*r.wd, tag + ": logout", r.prof.step);
				if (!n->logout() && !n->failed())
					row.fail(tag + ": logout refused: " + n->error());
			}
		});

	// The dropper: one nexus of ours at a time, at random moments.
	std::mt19937 rng(12345);
	const std::string prefix = t == Transport::Srp ? srp_port_prefix(0x5700).substr(0, 14)
	                                               : "iqn.2026-11.org.ulp:stress-disc-";
	uint32_t done = 0;
	while (done < r.prof.drops && clock::now() < deadline) {
		std::this_thread::sleep_for(milliseconds(100 + rng() % 200));
		json all;
		std::string why;
		if (!r.target.call("session_list", json::object(), &all, &why)) {
			row.fail("session_list: " + why);
			break;
		}
		// A nexus is known by its id and its peer: a worker's next login may get the same
		// id (SRP's is the initiator port), never the same connection.
		auto key = [](const json &s) {
			return s.value("id", "") + "|" + s.value("peer", "") + "|" +
			       s.value("initiator_port", "");
		};
		std::vector<std::string> ids, keys;
		for (const json &s : all) {
			const std::string name = s.value("initiator", "");
			const std::string port = s.value("initiator_port", "");
			if (s.value("transport", "") == std::string(transport_name(t)) &&
			    (name.rfind(prefix, 0) == 0 || port.rfind(prefix, 0) == 0) &&
			    s.value("logged_in", false)) {
				ids.push_back(s.value("id", ""));
				keys.push_back(key(s));
			}
		}
		if (ids.empty())
			continue;
		const size_t pick = rng() % ids.size();
		const std::string id = ids[pick], k = keys[pick];
		const bool logout = done % 3 == 2;
		Watchdog::Step s(*r.wd,
		                 row.scenario + ": " +
		                     (logout ? "session_logout " : "session_drop ") + id,
		                 r.prof.step);
		const auto t0 = clock::now();
		json res;
		const bool ok = logout ? r.target.call("session_logout",
		                                       {{"id", id}, {"grace_ms", 500}}, &res, &why)
		                       : r.target.call("session_drop", {{"id", id}}, &res, &why);
		if (!ok) {
			// It may have logged out on its own a moment ago.
			if (why.find("no session") == std::string::npos &&
			    why.find("no iSCSI session") == std::string::npos &&
			    why.find("no SRP session") == std::string::npos)
				row.fail("drop " + id + ": " + why);
			continue;
		}
		// Until the target no longer lists it.
		for (;;) {
			json now;
			if (!r.target.call("session_list", json::object(), &now, &why)) {
				row.fail("session_list: " + why);
				break;
			}
			bool there = false;
			for (const json &x : now)
				there |= key(x) == k;
			if (!there) {
				row.add_teardown(clock::now() - t0);
				break;
			}
			if (clock::now() - t0 > r.prof.step / 2) {
				row.fail(id + " still listed " +
				         std::to_string((r.prof.step / 2).count()) +
				         " ms after the " + (logout ? "logout request" : "drop"));
				break;
			}
			std::this_thread::sleep_for(5ms);
		}
		done++;
		row.cycles++;
	}
	stop = true;
	for (auto &x : th)
		x.join();
	if (done < r.prof.drops)
		row.note("time bound reached after " + std::to_string(done) + " drops");
	row.note(std::to_string(lost_seen.load()) + " nexuses saw their drop");
}

} // namespace stress
