// SPDX-License-Identifier: MIT
// tools/ulp-stress/storm.cc - login-storm: S nexuses at once, each logging in, doing
// verified I/O for a moment and logging out, over and over until the profile's cycles are
// done (or its time is up). Over SRP also a SINGLE login that takes over a live nexus of
// the same initiator port (SRP r16a 6.2: the target logs the old one out), and a
// multichannel login (Linux's ch_count) whose channels the target must list.
#include "tools/ulp-stress/stress.h"

#include <thread>

namespace stress
{

using clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

namespace
{

// One cycle: login, I/O, logout. The logout's duration is the teardown figure.
void cycle(Run &r, Transport t, Row &row, uint32_t slot, const Identity &id, uint32_t seed)
{
	const std::string tag =
	    row.scenario + "/" + transport_name(t) + " slot " + std::to_string(slot);
	std::unique_ptr<Nexus> n;
	std::string why;
	{
		Watchdog::Step s(*r.wd, tag + ": login", r.prof.step);
		n = Nexus::login(t, r.ep, id, &why);
	}
	if (!n) {
		row.fail(tag + ": login: " + why);
		return;
	}
	IoStats st;
	{
		Watchdog::Step s(*r.wd, tag + ": I/O", r.prof.step);
		if (!lun_ready(n->disk(), r.lun, &why)) {
			row.fail(tag + ": " + why);
		} else {
			IoOptions o;
			o.io_blocks = r.io_blocks;
			o.duration = r.prof.io;
			o.seed = seed;
			run_io(n->disk(), r.lun, *r.ledger, r.slot(slot), r.gens, o, nullptr, &st);
		}
	}
	row.add_io(st, true);
	{
		Watchdog::Step s(*r.wd, tag + ": logout", r.prof.step);
		const auto t0 = clock::now();
		const bool ok = n->logout();
		row.add_teardown(clock::now() - t0);
		if (!ok)
			row.fail(tag + ": logout refused: " + n->error());
		n.reset();
	}
	row.cycles++;
}

// SRP: a second SINGLE login of the same initiator port takes the first nexus over.
void srp_takeover(Run &r, Row &row)
{
	const std::string tag = "login-storm/srp takeover";
	Watchdog::Step s(*r.wd, tag, r.prof.step * 2);
	const Identity id = identity("takeover", kTakeoverSlot);
	std::string why;
	json before, after;
	const bool stats =
	    r.target.has_admin() && r.target.call("stats_get", json::object(), &before, &why);
	auto a = Nexus::login(Transport::Srp, r.ep, id, &why);
	if (!a) {
		row.fail(tag + ": first login: " + why);
		return;
	}
	IoStats st;
	IoOptions o;
	o.io_blocks = r.io_blocks;
	o.duration = r.prof.io;
	if (lun_ready(a->disk(), r.lun, &why))
		run_io(a->disk(), r.lun, *r.ledger, r.slot(kTakeoverSlot), r.gens, o, nullptr, &st);
	else
		row.fail(tag + ": first nexus: " + why);
	row.add_io(st, true);
	s.note("second login (SINGLE) of the same port");
	auto b = Nexus::login(Transport::Srp, r.ep, id, &why);
	if (!b) {
		row.fail(tag + ": the second SINGLE login was refused: " + why);
		return;
	}
	// The first nexus must end: the target closed its channel.
	const auto t0 = clock::now();
	while (!a->failed() && clock::now() - t0 < r.prof.step / 2)
		a->disk().poll(20ms);
	if (!a->failed())
		row.fail(tag + ": the old nexus still runs after the takeover");
	else
		row.add_teardown(clock::now() - t0);
	a.reset();
	IoStats st2;
	if (lun_ready(b->disk(), r.lun, &why))
		run_io(b->disk(), r.lun, *r.ledger, r.slot(kTakeoverSlot), r.gens, o, nullptr,
		       &st2);
	else
		row.fail(tag + ": new nexus: " + why);
	row.add_io(st2, true);
	if (stats && r.target.call("stats_get", json::object(), &after, &why)) {
		const int64_t d = after["srp"].value("takeovers", int64_t(0)) -
		                  before["srp"].value("takeovers", int64_t(0));
		if (d != 1)
			row.fail(tag + ": the target counted " + std::to_string(d) +
			         " takeovers, not 1");
	}
	if (!b->logout())
		row.fail(tag + ": logout refused: " + b->error());
	row.cycles++;
	row.note("SRP takeover: the second SINGLE login ended the first nexus");
}

// SRP: one nexus of four channels; the target must list it with four.
void srp_multichannel(Run &r, Row &row)
{
	const std::string tag = "login-storm/srp multichannel";
	Watchdog::Step s(*r.wd, tag, r.prof.step * 2);
	Identity id = identity("multi", kMultiSlot);
	id.srp_channels = 4;
	std::string why;
	auto n = Nexus::login(Transport::Srp, r.ep, id, &why);
	if (!n) {
		row.fail(tag + ": login: " + why);
		return;
	}
	json mine;
	if (r.target.has_admin() && r.target.sessions_of(who(Transport::Srp, id), &mine, &why)) {
		const int64_t ch = mine.size() == 1 ? mine[0].value("connections", int64_t(0)) : -1;
		if (ch != 4)
			row.fail(tag + ": the target lists " + mine.dump() +
			         ", not one nexus of 4 channels");
	}
	IoStats st;
	IoOptions o;
	o.io_blocks = r.io_blocks;
	o.duration = r.prof.io;
	o.qd = 8; // commands spread over the channels
	if (lun_ready(n->disk(), r.lun, &why))
		run_io(n->disk(), r.lun, *r.ledger, r.slot(kMultiSlot), r.gens, o, nullptr, &st);
	else
		row.fail(tag + ": " + why);
	row.add_io(st, true);
	const auto t0 = clock::now();
	if (!n->logout())
		row.fail(tag + ": logout refused: " + n->error());
	row.add_teardown(clock::now() - t0);
	row.cycles++;
	row.note("SRP multichannel: 4 channels listed, I/O over them, logout");
}

} // namespace

void login_storm(Run &r, Transport t, Row &row)
{
	const uint32_t workers = std::min(r.prof.sessions, kWorkerSlots);
	std::atomic<int64_t> left{int64_t(r.prof.cycles)};
	const auto deadline = clock::now() + r.prof.scenario;
	std::vector<std::thread> th;
	for (uint32_t w = 0; w < workers; w++)
		th.emplace_back([&, w] {
			const Identity id = identity("storm", w);
			uint32_t seed = w * 7919 + 1;
			while (left.fetch_sub(1) > 0 && clock::now() < deadline)
				cycle(r, t, row, w, id, seed++);
		});
	for (auto &x : th)
		x.join();
	if (left.load() > 0)
		row.note("time bound reached before the cycles were done");
	if (t == Transport::Srp) {
		srp_takeover(r, row);
		srp_multichannel(r, row);
	}
}

} // namespace stress
