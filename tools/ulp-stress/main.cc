// SPDX-License-Identifier: MIT
// tools/ulp-stress/main.cc - ulp-stress: drain and teardown stress for iSCSI/TCP, iSER and
// SRP against ulp-targetd.
//
//   ulp-stress                                  (its own ulp-targetd, every transport and
//                                                scenario, the short profile)
//   ulp-stress --transport srp --scenario kill --profile long
//   ulp-stress --target-address 10.99.0.1 --tcp-port 3260 --iser-port 3260 --srp-port 5555
//              --target-name iqn... --admin-socket /run/ulp-targetd.sock --target-pid PID
//
// Scenarios (stress.h): login-storm, kill, target-disconnect, faults, exhaustion, starvation,
// cq-race; and, alone, gateways (gateways.h: several ulp-targetd gateways on one Ceph
// cluster, their owner killed and frozen under ulp-initiator's multipath I/O).
// After each, on each transport, and at the end: a verified session succeeds and
// reads back every block the run acknowledged with its last generation; the daemon's resource
// counts return to their baseline within a bound (snapshot.h). A watchdog bounds every step
// (watchdog.h). Progress once a second on stderr; the table (or --json) on stdout. Exit status
// 0 only when every check passed; 1 when one failed; 2 on a bad command line.
#include "core/log.h"
#include "iscsi/initiator/scsi.h"
#include "providers/soft/soft.h"
#include "tools/ulp-stress/gateways.h"
#include "tools/ulp-stress/report.h"
#include "ulp/version.h"

#include <CLI/CLI.hpp>

#include <unistd.h>

#include <atomic>
#include <cinttypes>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <sstream>
#include <thread>

using namespace stress;
using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

namespace
{

const char *const kScenarios[] = {
    "login-storm", "kill", "target-disconnect", "faults", "exhaustion", "starvation", "cq-race"};

std::vector<std::string> split(const std::string &s)
{
	std::vector<std::string> v;
	std::stringstream ss(s);
	for (std::string x; std::getline(ss, x, ',');)
		if (!x.empty())
			v.push_back(x);
	return v;
}

// The LUN's block size, from a first session (READ CAPACITY(16)).
bool geometry(const Endpoint &ep, Transport t, uint64_t lun, uint32_t *bs, uint64_t *blocks,
              std::string *why)
{
	auto n = Nexus::login(t, ep, identity("setup", 0), why);
	if (!n)
		return false;
	if (!lun_ready(n->disk(), lun, why))
		return false;
	using namespace ulp::iscsi::initiator;
	std::array<uint8_t, 32> cap{};
	const auto cdb = cdb_read_capacity16(cap.size());
	const ScsiResult r = n->disk().run({lun, cdb, DataDir::Read, cap});
	Capacity c;
	if (!r.good() || !parse_read_capacity16(cap, &c)) {
		*why = "READ CAPACITY(16): " + describe_result(r);
		return false;
	}
	*bs = c.block_size;
	*blocks = c.blocks;
	n->logout();
	return true;
}

// Our command line, for the report: arguments with blanks or quotes in single quotes.
// SIGINT, SIGTERM in the gateways scenario: end early, its gateways and cluster stopped
// (they would outlive us otherwise).
std::atomic<bool> g_stop{false};

void on_stop(int)
{
	g_stop = true;
}

std::string command_line(int argc, char **argv)
{
	std::string s;
	for (int i = 0; i < argc; i++) {
		std::string a = argv[i];
		if (a.empty() || a.find_first_of(" \t'\"$\\") != std::string::npos) {
			std::string q = "'";
			for (char c : a)
				q += c == '\'' ? std::string("'\\''") : std::string(1, c);
			a = q + "'";
		}
		s += (i ? " " : "") + a;
	}
	return s;
}

} // namespace

int main(int argc, char **argv)
{
	if (argc > 1 && std::string(argv[1]) == "--child-kill")
		return kill_child_main(argc, argv);

	CLI::App app{
	    "ulp-stress: drain and teardown stress for iSCSI/TCP, iSER and SRP against "
	    "ulp-targetd.\n\n"
	    "Scenarios, each bounded in count and in time:\n"
	    "  login-storm        S nexuses at once, each: login, verified I/O, logout, repeated "
	    "(SRP: also a SINGLE takeover and a 4-channel login)\n"
	    "  kill               initiators in child processes killed with SIGKILL at random "
	    "moments (during login, I/O, logout); every write they had acknowledged must "
	    "read back\n"
	    "  target-disconnect  the admin socket drops (or asks to log out) one nexus at a "
	    "time during I/O\n"
	    "  faults             the soft provider's fault injection on our own device under a "
	    "nexus doing I/O, one kind per cycle: dropped and delayed completions, failed posts, "
	    "rkey failures, QP fatal, a cut wire, device removal; then the nexus must log in "
	    "again (iSER and SRP)\n"
	    "  exhaustion         more commands than the SRP credits and the iSCSI CmdSN window "
	    "(every receive of the target in use), then many nexuses with large I/Os: the "
	    "target must hold them back and keep serving\n"
	    "  starvation         (iSER, SRP) a second ulp-targetd with small RDMA pools (16 MiB "
	    "of data buffers, 8 iSER send buffers per connection, one SRQ of 16 receives for "
	    "every SRP channel): 16 nexuses of 16 commands of 512 KiB at once; every nexus must "
	    "make progress, the target must have held work back (TASK SET FULL, RNR NAKs), "
	    "every block reads back and that daemon's resources return to its baseline\n"
	    "  cq-race            (iSER, SRP) 16 nexuses, iSER and SRP alternately, whose QPs "
	    "share the target's pooled CQs: 8 do verified I/O throughout while, each cycle, 8 "
	    "others are torn down at the same moment (logout, target-side drop, SIGKILL); every "
	    "victim must leave the target, every survivor go on without a lost command\n"
	    "  gateways           (alone, not in the default list; tcp and iser, SRP has no "
	    "multipath initiator here) 2 (--gateways) ulp-targetd gateways on one Ceph cluster "
	    "serve one RBD image; ulp-initiator's multipath mode (--path) writes and verifies "
	    "through all of them for the whole run while the owner of the image's group is, at "
	    "random moments, killed (SIGKILL) or frozen (SIGSTOP, then SIGCONT once another "
	    "gateway reports itself the owner in gateway_show; --thaw-after-timeout: and once "
	    "the initiator's command timeout passed); a killed or fenced gateway is started "
	    "again as its unit would. Checks: the initiator ends with no failed command and "
	    "every block read back as written; every frozen gateway exits 3 (fenced) after its "
	    "SIGCONT; every failure is answered by a failover that resumes the I/O; the "
	    "gateways stop with status 0. Figures, p50/p99/max per kind (kill, freeze) and in "
	    "all: each failover's I/O stall (ulp-initiator's multipath.failovers), the time "
	    "from the failure to the I/O resumed (resume), and to another owner (owner). Short "
	    "profile: 2 failovers, lease 3 s, --cmd-timeout 5; long: 50, lease 6 s, "
	    "--cmd-timeout 10. The cluster: --ceph-dir DIR of a running scripts/ceph-dev.sh "
	    "cluster, else one of its own, started with scripts/ceph-dev.sh (--ceph-dev) in a "
	    "temporary directory on a free monitor port and stopped at the end. Its own "
	    "gateways: no --target-address\n"
	    "After each scenario on each transport, and at the end: a verified session reads "
	    "back every acknowledged block with its last generation, and the daemon's "
	    "resources (sessions, connections, commands in flight, fds, threads, and the RDMA "
	    "resource counts its stats_get reports) return to their baseline. A watchdog fails "
	    "the run with a dump when any step exceeds its bound.\n\n"
	    "Without --target-address it starts its own ulp-targetd ($ULP_TARGETD, else beside "
	    "this program, else from PATH) on the soft RDMA provider with a RAM LUN. Progress on "
	    "stderr once a second; the table (or --json) on stdout. Exit status 0: every check "
	    "passed; 1: a check failed; 2: bad command line."};
	app.set_version_flag("--version", ulp::version_line("ulp-stress"));
	std::string transports_s = "tcp,iser,srp", scenarios_s, profile_s = "short";
	uint32_t cycles = 0, sessions = 0;
	std::string address, target_name = "iqn.2026-11.org.ulp:target", srp_target, admin_socket;
	uint16_t tcp_port = 3260, iser_port = 3260, srp_port = 5555;
	pid_t target_pid = 0;
	std::string targetd, rdma_device, src_ip, lun_size = "64M";
	uint64_t lun = 0;
	bool json_out = false, verbose = false, wrong_gen = false, leak_session = false,
	     freeze_target = false;
	app.add_option("--transport", transports_s,
	               "comma-separated: tcp, iser, srp (default all)");
	app.add_option("--scenario", scenarios_s,
	               "comma-separated: login-storm, kill, target-disconnect, faults, "
	               "exhaustion, starvation, cq-race (default all); or gateways alone");
	GatewaysOptions gw;
	uint32_t failovers = 0, lease = 0;
	double ini_timeout = 0;
	uint64_t seed = 0;
	app.add_option("--ceph-dir", gw.ceph_dir,
	               "gateways: the directory of a running scripts/ceph-dev.sh cluster (default: "
	               "start one in a temporary directory, stop it at the end)");
	app.add_option("--ceph-dev", gw.ceph_dev,
	               "gateways: scripts/ceph-dev.sh (default $ULP_CEPH_DEV, else the source "
	               "tree's)");
	app.add_option("--gateways", gw.gateways, "gateways: how many (default 2)")
	    ->check(CLI::Range(2u, 8u));
	app.add_option("--failovers", failovers,
	               "gateways: owners to fail (kill or freeze) per transport, overriding the "
	               "profile's (2 short, 50 long)")
	    ->check(CLI::Range(1u, 100000u));
	app.add_option("--lease", lease,
	               "gateways: the gateways' lease in seconds (default 3 short, 6 long)")
	    ->check(CLI::Range(3u, 600u));
	app.add_option("--initiator-cmd-timeout", ini_timeout,
	               "gateways: ulp-initiator's --cmd-timeout in seconds (default 5 short, 10 "
	               "long): a frozen owner's commands fail after it")
	    ->check(CLI::Range(1.0, 600.0));
	app.add_option("--initiator", gw.initiator,
	               "gateways: the ulp-initiator to run (default $ULP_INITIATOR, else beside "
	               "this program, else the build's, else from PATH)");
	app.add_option("--seed", seed, "gateways: the random choices' seed (default a random one)");
	app.add_flag("--thaw-after-timeout", gw.thaw_after_timeout,
	             "gateways: a frozen owner gets its SIGCONT only once the initiator's command "
	             "timeout has passed as well (its session then gone: it has no command of "
	             "the initiator's left to answer)");
	app.add_option("--profile", profile_s,
	               "short (seconds per scenario: CI) or long (10,000 login/logout cycles and "
	               "1,000 kills per transport: the figures)")
	    ->check(CLI::IsMember({"short", "long"}));
	app.add_option("--cycles", cycles,
	               "override the profile's counts: login/logout cycles, kills and drops per "
	               "scenario and transport")
	    ->check(CLI::Range(1u, 1000000u));
	app.add_option("--sessions", sessions, "override the profile's nexuses at once (1..16)")
	    ->check(CLI::Range(1u, 16u));
	app.add_option("--target-address", address,
	               "stress a running target at this host instead of starting one (give its "
	               "ports, target name and admin socket)");
	app.add_option("--tcp-port", tcp_port, "with --target-address: the iSCSI/TCP port");
	app.add_option("--iser-port", iser_port, "with --target-address: the iSER port");
	app.add_option("--srp-port", srp_port, "with --target-address: the SRP port");
	app.add_option(
	    "--target-name", target_name,
	    "with --target-address: the iSCSI target (default iqn.2026-11.org.ulp:target)");
	app.add_option("--srp-target", srp_target,
	               "with --target-address: the SRP target's add_target line (default: its "
	               "device's node GUID)");
	app.add_option("--admin-socket", admin_socket,
	               "with --target-address: its admin socket (resource checks, "
	               "target-disconnect, the close-after-kill figure)");
	app.add_option("--target-pid", target_pid,
	               "with --target-address: its pid, for fds and threads from /proc");
	app.add_option("--targetd", targetd, "the ulp-targetd to start (default: see above)");
	app.add_option("--lun", lun, "the LUN to use (default 0; its first 8 MiB are written)");
	app.add_option("--lun-size", lun_size, "our own daemon's RAM LUN size (default 64M)");
	app.add_option("--rdma-device", rdma_device,
	               "iser, srp: a verbs device (e.g. rxe0); default a soft device");
	app.add_option("--src-ip", src_ip, "iser, srp: our address (default the target's host)");
	std::string faults_s;
	app.add_option("--faults", faults_s,
	               "faults: comma-separated kinds to inject, in turn (default all: "
	               "drop-completion, delay-completion, post-send, post-recv, rkey, qp-fatal, "
	               "cut, device-removal)");
	uint32_t step_ms = 0;
	app.add_option("--step-bound", step_ms,
	               "milliseconds one step (a login, an I/O burst, a logout, a wait) may take "
	               "before the watchdog fails the run (default 30000)")
	    ->check(CLI::Range(1u, 3600000u));
	bool memory_check = false;
	app.add_flag("--memory-check", memory_check,
	             "a warm-up pass of every scenario first, then the daemon's heap in use (its "
	             "allocator's count, from stats_get) must stay within 8 MiB or 10% of its "
	             "level after it; VmRSS is reported beside it (on in the long profile)");
	app.add_flag("--json", json_out, "the final table as JSON");
	app.add_flag("--verbose,-v", verbose, "the libraries' info lines and more progress");
	// Test hooks: each makes a check fail for real, so that the tests can show the checks
	// are not blind. Not for users.
	app.add_flag("--test-wrong-generation", wrong_gen,
	             "(tests) before the final check, expect a generation no write carried")
	    ->group("");
	app.add_flag("--test-leak-session", leak_session,
	             "(tests) hold one extra nexus open from the first scenario to the end")
	    ->group("");
	app.add_flag("--test-freeze-target", freeze_target,
	             "(tests) faults: stop our ulp-targetd (SIGSTOP) past the command timeout "
	             "once, under the I/O after the first fault")
	    ->group("");
	try {
		app.parse(argc, argv);
	} catch (const CLI::ParseError &e) {
		return app.exit(e) == 0 ? 0 : 2;
	}
	std::signal(SIGPIPE, SIG_IGN);
	ulp::log::set_program("ulp-stress");
	ulp::log::set_level(verbose ? ulp::log::Level::Info : ulp::log::Level::Error);
	auto usage = [](const std::string &m) {
		std::fprintf(stderr, "ulp-stress: %s\n", m.c_str());
		return 2;
	};

	std::vector<Transport> transports;
	for (const auto &s : split(transports_s)) {
		Transport t;
		if (!transport_from_name(s, &t))
			return usage("--transport: tcp, iser or srp, not " + s);
		transports.push_back(t);
	}
	std::vector<std::string> scenarios;
	for (const auto &s : scenarios_s.empty() ? std::vector<std::string>(std::begin(kScenarios),
	                                                                    std::end(kScenarios))
	                                         : split(scenarios_s)) {
		if (s != "gateways" && std::find(std::begin(kScenarios), std::end(kScenarios), s) ==
		                           std::end(kScenarios))
			return usage("--scenario: login-storm, kill, target-disconnect, faults, "
			             "exhaustion, starvation, cq-race or gateways, not " +
			             s);
		scenarios.push_back(s);
	}
	if (std::find(scenarios.begin(), scenarios.end(), "gateways") != scenarios.end()) {
		// Its own set-up (a Ceph cluster, gateways of its own): alone.
		if (scenarios.size() > 1)
			return usage("--scenario gateways runs alone");
		if (!address.empty())
			return usage(
			    "--scenario gateways starts its own gateways: no --target-address");
		std::vector<Transport> ts;
		for (const auto &s : split(app.count("--transport") ? transports_s : "tcp,iser")) {
			Transport t;
			if (!transport_from_name(s, &t) || t == Transport::Srp)
				return usage(
				    "--scenario gateways: --transport tcp or iser (ulp-initiator's "
				    "multipath mode is iSCSI), not " +
				    s);
			ts.push_back(t);
		}
		gateways_profile(profile_s, &gw);
		if (failovers || cycles)
			gw.failovers = failovers ? failovers : cycles;
		if (lease)
			gw.lease_s = lease;
		if (ini_timeout > 0)
			gw.cmd_timeout_s = ini_timeout;
		if (gw.ceph_dev.empty()) {
			const char *e = std::getenv("ULP_CEPH_DEV");
			gw.ceph_dev = e && *e ? e : ULP_SOURCE_DIR "/scripts/ceph-dev.sh";
		}
		gw.targetd = targetd.empty() ? find_targetd() : targetd;
		if (gw.initiator.empty())
			gw.initiator = find_program("ulp-initiator", "ULP_INITIATOR",
			                            ULP_INITIATOR_BUILD_PATH);
		gw.seed = app.count("--seed") ? seed : std::random_device()();
		gw.verbose = verbose;
		gw.stop = &g_stop;
		std::signal(SIGINT, on_stop);
		std::signal(SIGTERM, on_stop);
		Report rep;
		rep.command = command_line(argc, argv);
		rep.profile = profile_s;
		const auto t0 = clock_type::now();
		gateways_run(gw, ts, rep);
		rep.seconds = std::chrono::duration<double>(clock_type::now() - t0).count();
		if (json_out)
			print_json(rep);
		else
			print_table(rep);
		return rep.ok() ? 0 : 1;
	}
	if (transports.empty())
		return usage("--transport: none given");
	std::vector<std::string> fault_kinds;
	for (const auto &k : split(faults_s)) {
		const auto all = fault_kind_names();
		if (std::find(all.begin(), all.end(), k) == all.end())
			return usage("--faults: no fault kind " + k);
		fault_kinds.push_back(k);
	}
	Profile prof;
	profile_from_name(profile_s, &prof);
	if (cycles)
		prof.cycles = prof.kills = prof.drops = prof.faults = prof.exhaust = prof.starve =
		    prof.cq_cycles = cycles;
	if (sessions)
		prof.sessions = sessions;
	if (step_ms)
		prof.step = milliseconds(step_ms);

	Target target;
	Run run(target);
	run.prof = prof;
	run.lun = lun;
	run.verbose = verbose;
	run.fault_kinds = fault_kinds;
	run.test_freeze = freeze_target;
	{
		std::error_code ec;
		run.self_exe = std::filesystem::read_symlink("/proc/self/exe", ec);
		if (ec)
			return usage("cannot find this program's path (/proc/self/exe)");
	}
	std::string why;
	run.transports = transports;
	run.targetd = targetd.empty() ? find_targetd() : targetd;
	if (address.empty()) {
		TargetOptions o;
		o.targetd = run.targetd;
		o.lun_size = lun_size;
		if (!target.start(o, &run.ep, &why)) {
			std::fprintf(stderr, "ulp-stress: %s\n", why.c_str());
			return 1;
		}
		run.say("started " + o.targetd + " (pid " + std::to_string(target.pid()) +
		        "): iSCSI/TCP port " + std::to_string(run.ep.tcp_port) + ", iSER " +
		        std::to_string(run.ep.iser_port) + ", SRP " +
		        std::to_string(run.ep.srp_port));
	} else {
		TargetOptions o;
		o.admin_socket = admin_socket;
		o.pid = target_pid;
		target.attach(o);
		run.ep.host = address;
		run.ep.tcp_port = tcp_port;
		run.ep.iser_port = iser_port;
		run.ep.srp_port = srp_port;
		run.ep.target = target_name;
		run.ep.srp_target = srp_target;
		if (!target.has_admin())
			run.say("no --admin-socket: the resource checks, target-disconnect and the "
			        "close-after-kill figure are left out");
	}
	run.ep.src_ip = src_ip;
	// The RDMA transports of this process share one device (named_device.h finds it).
	if (rdma_device.empty()) {
		ulp::soft::DeviceConfig sc;
		sc.name = "stress0";
		sc.ip = src_ip.empty() ? run.ep.host : src_ip;
		run.soft_dev = ulp::soft::create_device(sc);
		run.soft_ip = sc.ip;
		if (!run.soft_dev)
			return usage("cannot make a soft RDMA device at " + sc.ip +
			             "; give --src-ip");
		run.ep.rdma_device = sc.name;
	} else {
		run.ep.rdma_device = rdma_device;
	}

	// Watchdog: on a hang, the daemon's sessions and log, then stop everything.
	Watchdog wd(
	    [&] {
		    json s;
		    std::string w;
		    if (target.has_admin() &&
		        target.call("session_list", json::object(), &s, &w, 2s))
			    std::fprintf(stderr, "ulp-stress: the target's sessions: %s\n",
			                 s.dump().c_str());
		    if (target.ours())
			    std::fprintf(stderr, "ulp-stress: ulp-targetd's log, last lines:\n%s",
			                 target.log_tail(30).c_str());
	    },
	    [&] { target.abandon(); });
	run.wd = &wd;

	uint32_t bs = 0;
	uint64_t blocks = 0;
	{
		Watchdog::Step s(wd, "geometry", 30s);
		if (!geometry(run.ep, transports.front(), lun, &bs, &blocks, &why)) {
			std::fprintf(stderr, "ulp-stress: first login over %s: %s\n",
			             transport_name(transports.front()), why.c_str());
			return 1;
		}
	}
	run.io_blocks = std::max<uint32_t>(1, 4096 / bs);
	run.slot_blocks = (256 * 1024) / bs;
	if (blocks < uint64_t(kSlots) * run.slot_blocks)
		return usage("LUN " + std::to_string(lun) + " is too small: it needs " +
		             std::to_string(kSlots * 256 / 1024) + " MiB");
	std::random_device rd;
	Ledger ledger(rd(), bs, 0, uint64_t(kSlots) * run.slot_blocks);
	run.ledger = &ledger;

	Report rep;
	rep.command = command_line(argc, argv);
	rep.profile = prof.name;
	const auto t0 = clock_type::now();
	// Progress once a second.
	std::atomic<bool> done{false};
	std::thread progress([&] {
		while (!done.load()) {
			for (int i = 0; i < 10 && !done.load(); i++)
				std::this_thread::sleep_for(100ms);
			if (done.load())
				break;
			Row *row = run.current.load();
			if (!row)
				continue;
			char b[256];
			std::snprintf(b, sizeof(b),
			              "[%6.1f s] %s/%s: %" PRIu64 " cycles, %" PRIu64
			              " I/Os, %" PRIu64 " failures",
			              std::chrono::duration<double>(clock_type::now() - t0).count(),
			              row->scenario.c_str(), row->transport.c_str(),
			              row->cycles.load(), row->ios.load(), row->failures.load());
			run.say(b);
		}
	});

	// Warm-up and the baseline: one verified session per transport (what a first login
	// makes and keeps is not a leak), then the resources as they settle.
	auto warm = std::make_unique<Row>();
	warm->scenario = "warm-up";
	warm->transport = "all";
	run.current = warm.get();
	ResourceSnapshot baseline;
	for (Transport t : transports)
		post_check(run, t, baseline, *warm); // baseline empty: only the verified session
	if (target.has_admin()) {
		if (!stable_snapshot(target, &baseline, &why, target.ours(), 20s,
		                     [&](const std::string &m) { run.say(m); }))
			warm->fail(why);
		rep.baseline = baseline;
		rep.have_snapshots = true;
		run.say("baseline: " + snapshot_str(baseline));
	}
	rep.rows.push_back(std::move(warm));
	run.baseline = target.has_admin() ? &baseline : nullptr;

	std::unique_ptr<Nexus> leaked;
	if (leak_session) {
		leaked =
		    Nexus::login(transports.front(), run.ep, identity("leak", kLeakSlot), &why);
		if (!leaked)
			run.say("--test-leak-session: login: " + why);
	}
	// One pass of every scenario over every transport.
	auto pass = [&](const Profile &p, const std::string &suffix) {
		run.prof = p;
		for (const auto &sc : scenarios)
			for (Transport t : transports) {
				auto row = std::make_unique<Row>();
				row->scenario = sc + suffix;
				row->transport = transport_name(t);
				run.current = row.get();
				const auto s0 = clock_type::now();
				if (sc == "login-storm")
					login_storm(run, t, *row);
				else if (sc == "kill")
					kill_scenario(run, t, *row);
				else if (sc == "target-disconnect")
					target_disconnect(run, t, *row);
				else if (sc == "faults")
					faults_scenario(run, t, *row);
				else if (sc == "exhaustion")
					exhaustion(run, t, *row);
				else if (sc == "starvation")
					starvation(run, t, *row);
				else
					cq_race(run, t, *row);
				post_check(run, t, baseline, *row);
				row->seconds =
				    std::chrono::duration<double>(clock_type::now() - s0).count();
				run.say(row->scenario + "/" + transport_name(t) + ": " +
				        std::to_string(row->cycles.load()) + " cycles, " +
				        std::to_string(row->ios.load()) + " I/Os, " +
				        std::to_string(row->failures.load()) + " failures");
				rep.rows.push_back(std::move(row));
			}
		run.prof = prof;
	};
	// The daemon's memory in a snapshot, kB (-1: unknown).
	auto info_of = [](const ResourceSnapshot &s, const char *k) {
		auto it = s.info.find(k);
		return it == s.info.end() ? int64_t(-1) : it->second;
	};
	rep.memory.enabled = prof.memory_check || memory_check;
	rep.memory.rss_unjudged = sanitizer_allocator(target.pid());
	rep.memory.allocator = baseline.allocator;
	rep.memory.heap.baseline_kb = info_of(baseline, "heap_in_use_kb");
	rep.memory.rss.baseline_kb = info_of(baseline, "vm_rss_kb");
	if (rep.memory.enabled) {
		// The warm-up pass: the same loads at the short profile's counts (memory.h).
		Profile warm_p;
		profile_from_name("short", &warm_p);
		warm_p.sessions = prof.sessions;
		warm_p.step = prof.step;
		if (cycles)
			warm_p.cycles = warm_p.kills = warm_p.drops = warm_p.faults =
			    warm_p.exhaust = warm_p.starve = warm_p.cq_cycles = cycles;
		pass(warm_p, " (warm-up)");
		ResourceSnapshot s;
		std::string w;
		if (target.has_admin() && take_snapshot(target, &s, &w)) {
			rep.memory.heap.ref_kb = info_of(s, "heap_in_use_kb");
			rep.memory.rss.ref_kb = info_of(s, "vm_rss_kb");
		}
		run.say("memory after the warm-up pass: heap in use " +
		        std::to_string(rep.memory.heap.ref_kb) + " kB, VmRSS " +
		        std::to_string(rep.memory.rss.ref_kb) + " kB");
	}
	pass(prof, "");

	// The end: every transport once more, then a clean stop of our daemon.
	auto fin = std::make_unique<Row>();
	fin->scenario = "final";
	fin->transport = "all";
	run.current = fin.get();
	if (wrong_gen) {
		const uint64_t lba = ledger.corrupt_expectation();
		run.say("--test-wrong-generation: expecting a generation nobody wrote at LBA " +
		        std::to_string(lba));
	}
	for (Transport t : transports)
		post_check(run, t, baseline, *fin);
	if (ledger.uncertain_blocks())
		fin->note(std::to_string(ledger.uncertain_blocks()) +
		          " blocks still uncertain after the read-back");
	if (target.has_admin())
		take_snapshot(target, &rep.final, &why);
	{
		rep.memory.heap.end_kb = info_of(rep.final, "heap_in_use_kb");
		rep.memory.rss.end_kb = info_of(rep.final, "vm_rss_kb");
		std::string mw;
		if (!rep.memory.judge(&mw))
			fin->fail(mw);
	}
	leaked.reset();
	rep.rows.push_back(std::move(fin));
	done = true;
	progress.join();
	if (target.ours()) {
		Watchdog::Step s(wd, "ulp-targetd's stop", 40s);
		rep.stop_status = target.stop(30s);
		// A sanitizer's report (a TSan build exits 66) runs to about a hundred lines, and
		// its first accesses are what says where a race is: keep all of a typical one.
		if (rep.stop_status != 0)
			std::fprintf(stderr, "ulp-stress: ulp-targetd's log, last lines:\n%s",
			             target.log_tail(200).c_str());
	}
	rep.seconds = std::chrono::duration<double>(clock_type::now() - t0).count();
	if (run.soft_dev)
		ulp::soft::destroy_device(run.soft_dev);
	if (json_out)
		print_json(rep);
	else
		print_table(rep);
	return rep.ok() ? 0 : 1;
}
