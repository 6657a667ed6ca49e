// SPDX-License-Identifier: MIT
// tools/ulp-stress/run.cc - profiles, result rows, identities, the wait for a nexus to
// leave the target, and the checks after every scenario (see stress.h).
#include "tools/ulp-stress/stress.h"

#include "providers/soft/soft.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <thread>

namespace stress
{

using clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

bool profile_from_name(const std::string &s, Profile *out)
{
	Profile p;
	if (s == "short") {
		*out = p;
		return true;
	}
	if (s == "long") {
		// The figure: 10,000 login/logout cycles with I/O per transport and 1,000
		// initiator kills; bounded by time as well.
		p.name = "long";
		p.sessions = 16;
		p.cycles = 10000;
		p.kills = 1000;
		p.kill_parallel = 4;
		p.drops = 200;
		p.faults = 400;
		p.exhaust = 50;
		p.starve = 20;
		p.cq_cycles = 500;
		p.io = 100ms;
		p.kill_window = 800ms;
		p.scenario = 3600s;
		p.memory_check = true;
		*out = p;
		return true;
	}
	return false;
}

void Row::fail(const std::string &m)
{
	failures++;
	std::lock_guard g(lock);
	if (msgs.size() < 30)
		msgs.push_back(m);
}

void Row::note(const std::string &m)
{
	std::lock_guard g(lock);
	notes.push_back(m);
}

void Row::add_teardown(std::chrono::nanoseconds d)
{
	std::lock_guard g(lock);
	teardown.add(uint64_t(d.count()));
}

void Row::add_more(const std::string &name, std::chrono::nanoseconds d)
{
	std::lock_guard g(lock);
	more[name].add(uint64_t(d.count()));
}

void Row::add_io(const IoStats &st, bool lost_is_failure, bool busy_ok)
{
	ios += st.ios;
	if (st.busy && !busy_ok)
		fail(std::to_string(st.busy) + " commands answered BUSY or TASK SET FULL");
	if (st.verify_errors)
		fail(std::to_string(st.verify_errors) + " blocks read back wrong");
	if (st.errors)
		fail(std::to_string(st.errors) + " commands failed");
	if (lost_is_failure && st.lost)
		fail(std::to_string(st.lost) + " commands lost: " + st.fatal);
	for (const auto &m : st.msgs)
		fail(m);
}

void Run::say(const std::string &m)
{
	std::lock_guard g(say_lock);
	std::fprintf(stderr, "ulp-stress: %s\n", m.c_str());
}

int64_t Run::wait_gone(const std::string &w, milliseconds bound, std::string *why)
{
	return target.wait_gone(w, bound, why);
}

bool Run::reset_soft_device(std::string *why)
{
	const std::string name = soft_dev ? soft_dev->name() : std::string();
	if (soft_dev)
		ulp::soft::destroy_device(soft_dev);
	soft_dev = nullptr;
	ulp::soft::DeviceConfig sc;
	sc.name = name;
	sc.ip = soft_ip;
	soft_dev = ulp::soft::create_device(sc);
	if (!soft_dev) {
		*why = "create_device " + name + " at " + soft_ip + ": " + std::strerror(errno);
		return false;
	}
	return true;
}

Identity identity(const std::string &scenario, uint32_t slot)
{
	Identity id;
	id.initiator_name = "iqn.2026-11.org.ulp:stress-" + scenario + "-" + std::to_string(slot);
	id.srp_initiator_ext = 0x5700 + slot;
	return id;
}

std::string who(Transport t, const Identity &id)
{
	return t == Transport::Srp ? srp_port_prefix(id.srp_initiator_ext) : id.initiator_name;
}

void post_check(Run &r, Transport t, const ResourceSnapshot &base, Row &row)
{
	const std::string tn = transport_name(t);
	{
		// A verified session: log in, write and read its own slot, read back every block
		// the run acknowledged (across sessions, transports and kills), log out.
		Watchdog::Step step(*r.wd, "verified session over " + tn, r.prof.step);
		const Identity id = identity("verify", kVerifySlot);
		std::string why;
		auto n = Nexus::login(t, r.ep, id, &why);
		if (!n) {
			row.fail("verified session over " + tn + ": login: " + why);
		} else if (!lun_ready(n->disk(), r.lun, &why)) {
			row.fail("verified session over " + tn + ": " + why);
		} else {
			IoStats st;
			IoOptions o;
			o.io_blocks = r.io_blocks;
			o.duration = r.prof.io;
			step.note("I/O");
			run_io(n->disk(), r.lun, *r.ledger, r.slot(kVerifySlot), r.gens, o, nullptr,
			       &st);
			step.note("read-back of every block written");
			if (st.fatal.empty())
				verify_region(n->disk(), r.lun, *r.ledger, r.all(), 64, &st);
			if (!st.fatal.empty())
				row.fail("verified session over " + tn + ": " + st.fatal);
			st.fatal.clear();
			row.add_io(st, true);
			step.note("logout");
			if (!n->logout())
				row.fail("verified session over " + tn +
				         ": logout refused: " + n->error());
			if (r.verbose)
				r.say("verified session over " + tn + ": " +
				      std::to_string(st.checked) + " blocks checked, " +
				      std::to_string(st.verify_errors) + " wrong");
		}
	}
	if (!r.target.has_admin())
		return;
	Watchdog::Step step(*r.wd, "baseline wait after " + row.scenario + " over " + tn,
	                    r.prof.baseline + 5s);
	ResourceSnapshot now;
	std::string why;
	if (!wait_for_baseline(
	        r.target, base, r.prof.baseline, [&](const std::string &m) { r.say(m); }, &now,
	        &why))
		row.fail(why);
}

} // namespace stress
