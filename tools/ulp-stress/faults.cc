// SPDX-License-Identifier: MIT
// tools/ulp-stress/faults.cc - faults: the soft provider's fault injection
// (providers/soft/soft.h) on this process's own soft device, under one nexus doing
// verified I/O, one fault kind per cycle in turn:
//   drop-completion   a completion is never delivered (the work request executed)
//   delay-completion  four completions arrive 200 ms late (later ones may overtake them)
//   post-send         a post_send fails with -EIO
//   post-recv         a post_recv fails with -EIO
//   rkey              the target's RDMA READ or WRITE of our buffers fails its rkey check
//   qp-fatal          our QP moves to ERR before a work request
//   cut               the wire to the target is cut (peer death)
//   device-removal    the device goes fatal during I/O (every QP to ERR, DEVICE_FATAL),
//                     then it is removed and added again (destroy_device, create_device)
// Each rule fires at a random event 10..39 of the cycle (so mid-I/O), at most its count;
// the I/O goes on until it has fired and a moment more (10 s at most without it).
// The faults are on the initiator's side only: ulp-targetd has no fault interface, and
// the target sees them as a peer would (a cut wire, a QP that errors, an rkey NAK, a
// missing answer that times out).
//
// After each fault, what must hold: the I/O ends within the command timeout (calibrated, below)
// plus the I/O time after the fault fired (checked, and the watchdog bounds it besides); no block
// reads back wrong (a write that failed stays uncertain in the ledger, old or new); the target
// closes the nexus (the teardown figure: from the end of the I/O until the target no longer lists
// it); a new nexus logs in on the same device, does verified I/O and reads the slot back
// against the ledger; and the daemon's resources return to the baseline. The checks after
// the scenario (post_check) read the whole range back. The faults need an RDMA
// transport on a soft device of ours: over TCP, or with --rdma-device, the row says so.
#include "tools/ulp-stress/cpu.h"
#include "tools/ulp-stress/stress.h"

#include "providers/soft/soft.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <random>
#include <thread>

namespace stress
{

using clock = std::chrono::steady_clock;
using namespace std::chrono_literals;
namespace soft = ulp::soft;

namespace
{

constexpr milliseconds kMaxUnfired{10000}; // I/O under a rule that has not fired yet, at most

// The initiators' command timeout in the fault cycles. It is what ends a command a lost
// completion leaves hanging (every drop-completion cycle waits for it), so it should be
// short; but a command that times out with no fault active fails the run, so it must stay
// well above what a fault-free command takes on this machine as it is now (a sanitizer's
// slowdown, a CI host running other jobs). A constant cannot be both, so it is measured:
// kTimeoutFactor times the slowest command of a fault-free burst on a fresh nexus, before
// the cycles. What was measured on this project's 2-core hosts: under a TSan or ASan build,
// or beside an equal-priority load (a TSan tree compiling, busy loops, load average up to
// 25), no fault-free command took 0.3 s; a nice-19 run beside compiles at nice 0 saw up to
// 0.7 s, and up to 8 times the slowest of its burst (67 ms, then 558 ms) when the compiles
// started after it. The factor covers that; the floor is what a quiet machine gets (its
// commands answer in milliseconds; 2 s is still 3 times the worst seen); the ceiling is the
// other scenarios' timeout (Identity's default): a machine slower than that fails the run's
// bounds anyway.
constexpr uint32_t kTimeoutFactor = 10;
constexpr milliseconds kMinCmdTimeout{2000};
constexpr milliseconds kMaxCmdTimeout{10000};
constexpr milliseconds kCalibrationIo{500}; // the burst; again (4 at most) while it has
constexpr uint64_t kCalibrationCmds = 200;  // fewer answered commands than this

struct Kind {
	const char *name;
	bool immediate; // device-removal: no rule, force_device_fatal from a timer
	soft::FaultPoint point;
	uint32_t count;
	uint32_t delay_us;
};

constexpr Kind kKinds[] = {
    {"drop-completion", false, soft::FaultPoint::DropCompletion, 1, 0},
    {"delay-completion", false, soft::FaultPoint::DelayCompletion, 4, 200000},
    {"post-send", false, soft::FaultPoint::PostSend, 1, 0},
    {"post-recv", false, soft::FaultPoint::PostRecv, 1, 0},
    {"rkey", false, soft::FaultPoint::RkeyCheck, 1, 0},
    {"qp-fatal", false, soft::FaultPoint::QpError, 1, 0},
    {"cut", false, soft::FaultPoint::CutConnection, 1, 0},
    {"device-removal", true, soft::FaultPoint::PostSend, 0, 0},
};

// What one kind did over the scenario (the row's notes).
struct Tally {
	uint64_t cycles = 0, fired = 0, survived = 0, failed = 0, scsi_errors = 0;
};

// What the scenario chose for its cycles, and from what (the row's note).
struct CmdTimeout {
	milliseconds value = kMaxCmdTimeout;
	std::string why;
};

// Both processes' threads now, for the evidence beside a command that times out with no
// fault active (cpu.h).
struct CpuMark {
	CpuTimes ours, target;
};

CpuMark cpu_mark(Run &r)
{
	CpuMark m;
	m.ours = cpu_times(getpid());
	if (r.target.pid() > 0)
		m.target = cpu_times(r.target.pid());
	return m;
}

// "; meanwhile ulp-stress's threads ran ... (cpu.h)", or nothing when /proc cannot say.
std::string cpu_since(Run &r, const CpuMark &from)
{
	const CpuMark now = cpu_mark(r);
	std::string s;
	for (const std::string &d : {cpu_delta("ulp-stress", from.ours, now.ours),
	                             cpu_delta("ulp-targetd", from.target, now.target)})
		if (!d.empty())
			s += (s.empty() ? "; meanwhile " : ", ") + d;
	return s;
}

// A command of a nexus under no active fault timed out: a failure, never hidden, with
// what the machine did meanwhile (a starved machine, or a stall).
void fail_unfaulted_timeout(Run &r, Row &row, const std::string &tag, const std::string &when,
                            const IoStats &st, const CmdTimeout &ct, const CpuMark &from)
{
	const std::string answered =
	    st.answered ? "; the slowest of " + std::to_string(st.answered) +
	                      " answered: " + std::to_string(st.worst.count() / 1000) + " ms"
	                : "";
	row.fail(tag + ": " + when + ": " + std::to_string(st.timeouts) +
	         " command(s) timed out with no fault active (timeout " +
	         std::to_string(ct.value.count()) + " ms, " + ct.why + answered + ")" +
	         cpu_since(r, from));
}

// A fault-free burst of verified I/O on a fresh nexus (the other scenarios' timeout): the
// fault cycles' command timeout from its slowest command (kTimeoutFactor above).
CmdTimeout calibrate(Run &r, Transport t, Row &row, uint32_t seed)
{
	const std::string tag = "faults/" + std::string(transport_name(t)) + " calibration";
	CmdTimeout ct;
	ct.why = "the default: calibration failed";
	Watchdog::Step s(*r.wd, tag, r.prof.step);
	const Identity id = identity("fault", kFaultSlot);
	std::string why;
	auto n = Nexus::login(t, r.ep, id, &why);
	if (!n) {
		row.fail(tag + ": login: " + why);
		return ct;
	}
	if (!lun_ready(n->disk(), r.lun, &why)) {
		row.fail(tag + ": " + why);
		return ct;
	}
	IoStats st;
	for (uint32_t i = 0; st.fatal.empty(); i++) {
		IoOptions o;
		o.io_blocks = r.io_blocks;
		o.duration = kCalibrationIo;
		o.seed = seed + i;
		s.note("fault-free I/O");
		run_io(n->disk(), r.lun, *r.ledger, r.slot(kFaultSlot), r.gens, o, nullptr, &st);
		if (st.answered >= kCalibrationCmds || i == 3)
			break;
	}
	const bool ok = st.fatal.empty();
	row.add_io(st, true);
	s.note("logout");
	if (!n->logout())
		row.fail(tag + ": logout refused: " + n->error());
	n.reset();
	if (r.target.has_admin() && r.wait_gone(who(t, id), r.prof.step / 2, &why) < 0)
		row.fail(tag + ": " + why);
	if (!ok || !st.answered)
		return ct;
	const auto worst = std::chrono::ceil<milliseconds>(st.worst);
	const milliseconds want = kTimeoutFactor * worst;
	ct.value = std::clamp(want, kMinCmdTimeout, kMaxCmdTimeout);
	ct.why = std::to_string(kTimeoutFactor) + " x the slowest of " +
	         std::to_string(st.answered) + " fault-free commands (" +
	         std::to_string(worst.count()) + " ms)" +
	         (want < kMinCmdTimeout   ? ", raised to the floor"
	          : want > kMaxCmdTimeout ? ", cut to the ceiling"
	                                  : "");
	return ct;
}

// Verified I/O on a fresh nexus after the fault: the nexus re-logs in.
bool relogin(Run &r, Transport t, const Identity &id, const std::string &tag, Row &row,
             uint32_t seed, const CmdTimeout &ct)
{
	Watchdog::Step s(*r.wd, tag + ": login after the fault", r.prof.step);
	const CpuMark from = cpu_mark(r);
	std::string why;
	auto n = Nexus::login(t, r.ep, id, &why);
	if (!n) {
		row.fail(tag + ": no login after the fault: " + why);
		return false;
	}
	IoStats st;
	if (!lun_ready(n->disk(), r.lun, &why)) {
		row.fail(tag + ": after the fault: " + why);
		return false;
	}
	// --test-freeze-target: the daemon stopped past the command timeout under this I/O, once:
	// a command must time out with no fault active and fail the row.
	std::thread thaw;
	if (r.test_freeze && r.target.ours() && r.target.pid() > 0) {
		r.test_freeze = false;
		const pid_t pid = r.target.pid();
		::kill(pid, SIGSTOP);
		thaw = std::thread([pid, d = ct.value + 1s] {
			std::this_thread::sleep_for(d);
			::kill(pid, SIGCONT);
		});
	}
	IoOptions o;
	o.io_blocks = r.io_blocks;
	o.duration = r.prof.io;
	o.seed = seed;
	s.note("I/O after the fault");
	run_io(n->disk(), r.lun, *r.ledger, r.slot(kFaultSlot), r.gens, o, nullptr, &st);
	// Reading the whole slot back settles what the faulted writes left.
	if (st.fatal.empty())
		verify_region(n->disk(), r.lun, *r.ledger, r.slot(kFaultSlot), r.io_blocks, &st);
	if (st.timeouts)
		fail_unfaulted_timeout(r, row, tag, "after the fault", st, ct, from);
	if (!st.fatal.empty())
		row.fail(tag + ": after the fault: " + st.fatal);
	st.fatal.clear();
	row.add_io(st, true);
	if (thaw.joinable())
		thaw.join();
	s.note("logout after the fault");
	if (!n->logout())
		row.fail(tag + ": logout after the fault refused: " + n->error());
	n.reset();
	if (r.target.has_admin() && r.wait_gone(who(t, id), r.prof.step / 2, &why) < 0)
		row.fail(tag + ": " + why);
	return true;
}

void fault_cycle(Run &r, Transport t, Row &row, const Kind &k, std::mt19937 &rng, Tally *tl,
                 const CmdTimeout &ct)
{
	const std::string tag = "faults/" + std::string(transport_name(t)) + " " + k.name;
	Identity id = identity("fault", kFaultSlot);
	id.cmd_timeout = ct.value;
	std::string why;
	std::unique_ptr<Nexus> n;
	{
		Watchdog::Step s(*r.wd, tag + ": login", r.prof.step);
		n = Nexus::login(t, r.ep, id, &why);
	}
	if (!n) {
		row.fail(tag + ": login before the fault: " + why);
		return;
	}
	if (!lun_ready(n->disk(), r.lun, &why)) {
		row.fail(tag + ": before the fault: " + why);
		return;
	}
	ulp::Device &dev = *r.soft_dev;
	const uint64_t fired0 = soft::faults_fired(dev);
	std::thread trigger;
	std::atomic<bool> fatal_done{false};
	if (k.immediate) {
		const milliseconds after(
		    20 + rng() % uint64_t(std::max<int64_t>(1, r.prof.io.count() - 20)));
		trigger = std::thread([&dev, after, &fatal_done] {
			std::this_thread::sleep_for(after);
			soft::force_device_fatal(dev);
			fatal_done = true;
		});
	} else {
		soft::FaultRule rule;
		rule.point = k.point;
		rule.nth = 10 + rng() % 30;
		rule.count = k.count;
		rule.delay_us = k.delay_us;
		if (soft::inject_fault(dev, rule) < 0) {
			row.fail(tag + ": inject_fault refused the rule");
			return;
		}
	}
	// I/O until the fault has fired and prof.io more (a loaded machine may not reach the
	// rule's event within a fixed time), at most kMaxUnfired without it firing.
	IoStats st;
	std::atomic<bool> stop{false}, io_done{false};
	std::atomic<int64_t> fired_at{0}; // steady clock ns when the fault fired (0: not yet)
	const auto t0 = clock::now();
	std::thread watcher([&] {
		while (!io_done.load()) {
			const bool f =
			    k.immediate ? fatal_done.load() : soft::faults_fired(dev) > fired0;
			const auto now = clock::now();
			if (f && fired_at.load() == 0)
				fired_at = now.time_since_epoch().count();
			if ((f && now.time_since_epoch().count() - fired_at.load() >=
			              std::chrono::nanoseconds(r.prof.io).count()) ||
			    now - t0 > kMaxUnfired)
				stop = true;
			std::this_thread::sleep_for(2ms);
		}
	});
	const milliseconds bound = r.prof.io + ct.value + 2s; // after the fault
	const CpuMark io_start = cpu_mark(r);
	{
		Watchdog::Step s(*r.wd, tag + ": I/O under the fault",
		                 kMaxUnfired + bound + r.prof.step);
		IoOptions o;
		o.io_blocks = r.io_blocks;
		o.duration = kMaxUnfired + bound;
		o.stop = &stop;
		o.seed = rng();
		run_io(n->disk(), r.lun, *r.ledger, r.slot(kFaultSlot), r.gens, o, nullptr, &st);
	}
	const auto io_end = clock::now();
	io_done = true;
	watcher.join();
	if (trigger.joinable())
		trigger.join();
	if (fired_at.load()) {
		const auto since =
		    io_end.time_since_epoch() - std::chrono::nanoseconds(fired_at.load());
		if (since > bound)
			row.fail(tag + ": the I/O ended " +
			         std::to_string(
			             std::chrono::duration_cast<milliseconds>(since).count()) +
			         " ms after the fault, past its bound of " +
			         std::to_string(bound.count()) + " ms");
	}
	const bool fired = k.immediate ? fatal_done.load() : soft::faults_fired(dev) > fired0;
	// Teardown without faults: what is measured is the recovery from the one injected.
	soft::clear_faults(dev);
	const bool alive = st.fatal.empty() && !n->failed();
	tl->cycles++;
	tl->fired += fired;
	(alive ? tl->survived : tl->failed)++;
	tl->scsi_errors += st.errors;
	// Lost commands and SCSI errors are how a fault may end them; wrong data never is.
	row.ios += st.ios;
	if (st.verify_errors) {
		row.fail(tag + ": " + std::to_string(st.verify_errors) + " blocks read back wrong");
		for (const auto &m : st.msgs)
			row.fail(tag + ": " + m);
	}
	if (!fired && st.timeouts)
		fail_unfaulted_timeout(r, row, tag, "before the fault fired", st, ct, io_start);
	else if (!fired && !alive)
		row.fail(tag + ": the nexus failed though no fault fired: " + st.fatal);
	{
		Watchdog::Step s(*r.wd, tag + ": teardown", r.prof.step);
		if (alive && !n->logout() && !fired)
			row.fail(tag + ": logout refused: " + n->error());
		n.reset();
		if (r.target.has_admin()) {
			s.note("waiting for the target to close the nexus");
			const int64_t ns = r.wait_gone(who(t, id), r.prof.step / 2, &why);
			if (ns < 0)
				row.fail(tag + ": " + why);
			else
				row.add_teardown(clock::now() - io_end);
		}
	}
	if (k.immediate && !r.reset_soft_device(&why)) {
		row.fail(tag + ": the device could not be added again: " + why);
		return;
	}
	relogin(r, t, id, tag, row, uint32_t(rng()), ct);
	// The daemon's resources back at rest after every fault, not only after the scenario.
	if (r.baseline) {
		Watchdog::Step s(*r.wd, tag + ": baseline wait", r.prof.baseline + 5s);
		ResourceSnapshot now;
		if (!wait_for_baseline(
		        r.target, *r.baseline, r.prof.baseline,
		        [&](const std::string &m) { r.say(m); }, &now, &why))
			row.fail(tag + ": " + why);
	}
	row.cycles++;
}

} // namespace

std::vector<std::string> fault_kind_names()
{
	std::vector<std::string> v;
	for (const Kind &k : kKinds)
		v.push_back(k.name);
	return v;
}

void faults_scenario(Run &r, Transport t, Row &row)
{
	if (t == Transport::Tcp) {
		row.note("not run: the soft provider's faults need an RDMA transport");
		return;
	}
	if (!r.soft_dev) {
		row.note("not run: the faults need this process's soft device (not --rdma-device)");
		return;
	}
	const auto deadline = clock::now() + r.prof.scenario;
	std::mt19937 rng(r.ledger->run() ^ 0xfa017u);
	const CmdTimeout ct = calibrate(r, t, row, uint32_t(rng()));
	row.note("command timeout " + std::to_string(ct.value.count()) + " ms: " + ct.why);
	std::map<std::string, Tally> tally;
	std::vector<const Kind *> kinds;
	for (const Kind &k : kKinds)
		if (r.fault_kinds.empty() || std::find(r.fault_kinds.begin(), r.fault_kinds.end(),
		                                       k.name) != r.fault_kinds.end())
			kinds.push_back(&k);
	for (uint32_t i = 0; i < r.prof.faults && clock::now() < deadline; i++) {
		const Kind &k = *kinds[i % kinds.size()];
		fault_cycle(r, t, row, k, rng, &tally[k.name], ct);
	}
	for (const Kind &k : kKinds) {
		auto it = tally.find(k.name);
		if (it == tally.end())
			continue;
		const Tally &x = it->second;
		row.note(std::string(k.name) + ": " + std::to_string(x.cycles) + " cycles, fired " +
		         std::to_string(x.fired) + ", nexus survived " +
		         std::to_string(x.survived) + ", failed " + std::to_string(x.failed) +
		         ", SCSI errors " + std::to_string(x.scsi_errors));
	}
	if (row.cycles < r.prof.faults)
		row.note("time bound reached after " + std::to_string(row.cycles.load()) +
		         " fault cycles");
}

} // namespace stress
