// SPDX-License-Identifier: MIT
// tools/ulp-targetd/main.cc - ulp-targetd: serves LUNs over iSCSI/TCP, iSER and SRP.
//
//   ulp-targetd --portal 0.0.0.0:3260 --target iqn.2026-11.org.ulp:disk
//               --lun 0:ram:size=1G --lun 1:file:path=/srv/disk.img,size=10G
//   ulp-targetd --iser-portal 10.99.0.1:3260 --rdma-device rxe0 --lun 0:ram:size=1G
//   ulp-targetd --iser-portal 127.0.0.1:3260 --lun 0:ram:size=1G     (soft provider)
//   ulp-targetd --srp-portal 10.99.0.1:5555 --rdma-device rxe0 --lun 0:ram:size=1G
//
// One target from flags (the common case); several from a config file (--config, see
// config.h). Runs until SIGINT or SIGTERM, then: stop accepting, ask every session to log
// out and drain it (bounded), flush every backstore, exit. One log line per login and
// logout, with the initiator's name and address.
//
// SRP: one target port (srpt::Target) exporting one iSCSI target's LUNs through its own
// port group, on every --srp-portal; each portal logs the add_target line a Linux
// initiator writes to log in. The iSER and SRP portals share the provider set-up (the
// verbs device, or one soft device per address).
//
// SIGHUP re-reads the size of every LUN's storage (a file's length, a block device's
// size; ram and null LUNs cannot change from outside and stay as they are) and applies a
// change in whole blocks, growing or shrinking: the LUN's initiators get UNIT ATTENTION,
// CAPACITY DATA HAS CHANGED (Linux then re-reads the capacity). One log line per LUN:
// "capacity OLD -> NEW blocks", "no capacity change", or why it stayed. So an administrator
// grows a LUN with `truncate -s +1G lun.img` (or by growing the device) and `kill -HUP`.
// With SRP portals, SIGHUP (and the shutdown) also logs the SRP target's counters ("SRP
// stats: logins N ... ext_tables N ..."): there is no other window into them.
#include "tools/ulp-targetd/config.h"

#include "iscsi/target/tcp.h"
#include "iser/target.h"
#include "providers/soft/soft.h"
#include "scsi/lu.h"
#include "scsi/tpg.h"
#include "srpt/portal.h"
#include "srpt/target.h"
#include "tools/common/named_device.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fcntl.h>
#include <memory>
#include <mutex>
#include <pthread.h>
#include <signal.h>
#include <string>
#include <unistd.h>
#include <vector>

namespace
{

using namespace ulp;

// The daemon's own lines: "ulp-targetd: stopped" (core/log.h, without a subsystem tag).
void log_line(const std::string &s)
{
	ULP_LOG(Info, Tool, "{}", s);
}

std::atomic<int> got_signal{0};   // SIGINT or SIGTERM: shut down
std::atomic<bool> got_hup{false}; // SIGHUP: re-read the LUNs' sizes
int sig_pipe[2] = {-1, -1};

void on_signal(int sig)
{
	if (sig == SIGHUP)
		got_hup = true;
	else
		got_signal = sig;
	char c = 1;
	(void)!::write(sig_pipe[1], &c, 1);
}

// SIGHUP: every LU's storage size re-read and applied (LogicalUnit::rescan_capacity, which
// raises CAPACITY DATA HAS CHANGED on a change); one log line per LU.
void rescan_capacities(const std::vector<std::unique_ptr<scsi::LogicalUnit>> &lus)
{
	log_line("signal Hangup: re-reading the LUNs' sizes");
	for (auto &lu : lus) {
		const std::string who = "LUN " + lu->name() + " (" + lu->bs().kind() + "): ";
		uint64_t was = 0, now = 0;
		std::string why;
		if (lu->rescan_capacity(&was, &now, &why) < 0)
			log_line(who + "capacity left at " + std::to_string(was) +
			         " blocks: " + why);
		else if (was != now)
			log_line(who + "capacity " + std::to_string(was) + " -> " +
			         std::to_string(now) + " blocks of " +
			         std::to_string(lu->block_size()) +
			         " bytes (unit attention CAPACITY DATA HAS CHANGED)");
		else
			log_line(who + "no capacity change (" + std::to_string(now) + " blocks)");
	}
}

// A flush of every LU's backstore before exit (SYNCHRONIZE CACHE for everyone).
void flush_all(const std::vector<std::unique_ptr<scsi::LogicalUnit>> &lus)
{
	for (auto &lu : lus) {
		if (!lu->bs().write_cache())
			continue;
		struct Wait {
			std::mutex m;
			std::condition_variable cv;
			bool done = false;
			int err = 0;
		} w;
		scsi::BsIo io;
		io.op = scsi::BsOp::Flush;
		io.priv = &w;
		io.done = [](scsi::BsIo *io, int err) {
			auto *w = static_cast<Wait *>(io->priv);
			std::lock_guard g(w->m);
			w->done = true;
			w->err = err;
			w->cv.notify_all();
		};
		lu->bs().submit(&io);
		std::unique_lock g(w.m);
		if (!w.cv.wait_for(g, std::chrono::seconds(30), [&] { return w.done; }))
			log_line("flush of " + lu->name() + " did not finish in 30 s");
		else if (w.err)
			log_line("flush of " + lu->name() + ": " + std::strerror(-w.err));
	}
}

// The RDMA portals' (iSER and SRP) provider: the named verbs device's, or the soft provider
// with one soft device per portal address (a soft device owns one IPv4 address; "any"
// means loopback). An iSER and an SRP portal on one address share the device.
struct RdmaSetup {
	Provider *provider = nullptr;
	std::vector<Device *> soft_devices; // ours to destroy
	std::vector<std::string> soft_ips;  // their addresses
	~RdmaSetup()
	{
		for (Device *d : soft_devices)
			soft::destroy_device(d);
	}
};

bool rdma_setup(targetd::Config &cfg, RdmaSetup *s, std::string *why)
{
	std::vector<targetd::Portal *> all;
	for (auto *v : {&cfg.iser_portals, &cfg.srp_portals})
		for (targetd::Portal &p : *v)
			all.push_back(&p);
	if (!cfg.rdma_device.empty()) {
		tools::NamedDevice nd;
		if (!tools::open_named_device(cfg.rdma_device, &nd, why))
			return false;
		s->provider = nd.provider;
		for (targetd::Portal *p : all)
			if (p->host.empty())
				p->host = nd.ip.empty() ? "0.0.0.0" : nd.ip;
		return true;
	}
	s->provider = &soft::provider();
	for (targetd::Portal *pp : all) {
		targetd::Portal &p = *pp;
		if (p.host.empty() || p.host == "0.0.0.0")
			p.host = "127.0.0.1";
		if (std::find(s->soft_ips.begin(), s->soft_ips.end(), p.host) != s->soft_ips.end())
			continue;
		soft::DeviceConfig dc;
		dc.ip = p.host;
		Device *d = soft::create_device(dc);
		if (!d) {
			*why = "soft device for " + p.host + ": " + std::strerror(errno);
			return false;
		}
		s->soft_devices.push_back(d);
		s->soft_ips.push_back(p.host);
	}
	return true;
}

// The SRP target's counters in one line (SIGHUP and shutdown): what an operator or a test
// checks that a path was taken (immediate data, external descriptor tables, takeovers).
std::string srp_stats_line(srpt::Target &t)
{
	const srpt::TargetStats s = t.stats();
	std::string l = "SRP stats:";
	auto add = [&](const char *k, uint64_t v) {
		l += std::string(" ") + k + " " + std::to_string(v);
	};
	add("logins", s.logins);
	add("login_rejects", s.login_rejects);
	add("takeovers", s.takeovers);
	add("channels_open", s.channels_open);
	add("nexuses_open", s.nexuses_open);
	add("cmds", s.cmds);
	add("tsk_mgmts", s.tsk_mgmts);
	add("i_logouts", s.i_logouts);
	add("immediate", s.immediate);
	add("ext_tables", s.ext_tables);
	add("rdma_reads", s.rdma_reads);
	add("rdma_writes", s.rdma_writes);
	add("cred_reqs", s.cred_reqs);
	add("wait_list", s.wait_list);
	add("sq_waits", s.sq_waits);
	add("credit_overruns", s.credit_overruns);
	add("bad_ius", s.bad_ius);
	add("task_set_full", s.task_set_full);
	add("data_timeouts", s.data_timeouts);
	add("no_read_credit", s.no_read_credit);
	add("teardown_timeouts", s.teardown_timeouts);
	return l;
}

std::string portal_str(const std::string &host, uint16_t port)
{
	return (host.empty()                          ? std::string("0.0.0.0")
	        : host.find(':') != std::string::npos ? "[" + host + "]"
	                                              : host) +
	       ":" + std::to_string(port);
}

} // namespace

int main(int argc, char **argv)
{
	CLI::App app{
	    "ulp-targetd: an iSCSI (TCP and iSER) and SRP target serving LUNs from RAM, files, "
	    "block devices or nothing (null), with the ulp SCSI target core."};
	app.footer(
	    "Signals: SIGINT, SIGTERM: log every session out (bounded), flush, exit.\n"
	    "SIGHUP: log the SRP target's counters (with SRP portals) and re-read every LUN's "
	    "storage size - a file's length, a block device's size "
	    "(ram and null LUNs stay as they are) - and apply a change in whole blocks, growing "
	    "or shrinking; initiators get UNIT ATTENTION, CAPACITY DATA HAS CHANGED, and a log "
	    "line per LUN says OLD -> NEW blocks or no capacity change. E.g. `truncate -s +1G "
	    "lun.img; kill -HUP <pid>`. A file LUN's size= is where it starts: it follows the file "
	    "from the first SIGHUP on, also below size=.\n"
	    "Persistent reservations: those an initiator registers with APTPL 1 are written to "
	    "--state-dir (a file per LUN) before the command completes, and are there again "
	    "after a restart or a crash. A state file found damaged or of another LUN stops the "
	    "start with its name; moving it aside starts that LUN without its reservations.");
	// SIGINT, SIGTERM and SIGHUP reach the main thread only: blocked here, before any thread
	// exists (threads inherit the mask), and unblocked in the main thread once it waits for
	// them. So no other thread's system call is interrupted, and the main thread's read of
	// the signal pipe needs no SA_RESTART (under ThreadSanitizer, which runs a handler only
	// when the interrupted call returns, SA_RESTART kept a SIGHUP from ever being handled).
	sigset_t handled;
	sigemptyset(&handled);
	sigaddset(&handled, SIGINT);
	sigaddset(&handled, SIGTERM);
	sigaddset(&handled, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &handled, nullptr);
	targetd::Flags f;
	targetd::add_flags(app, f);
	CLI11_PARSE(app, argc, argv);
	log::set_program("ulp-targetd");
	if (!f.log_file.empty()) {
		if (int rc = log::to_file(f.log_file); rc != 0) {
			std::fprintf(stderr, "ulp-targetd: --log-file %s: %s\n", f.log_file.c_str(),
			             std::strerror(-rc));
			return 2;
		}
	}
	log::set_level(f.quiet ? log::Level::Warn : f.log_level);

	targetd::Config cfg;
	std::string why;
	if (!targetd::build_config(f, &cfg, &why)) {
		std::fprintf(stderr, "ulp-targetd: %s\n", why.c_str());
		return 2;
	}
	targetd::Runtime rt;
	if (!targetd::instantiate(cfg, &rt, &why)) {
		std::fprintf(stderr, "ulp-targetd: %s\n", why.c_str());
		return 1;
	}
	rt.target_cfg.trace = f.trace;
	iscsi::target::Target target(rt.target_cfg);
	iscsi::target::TcpConfig tc;
	tc.workers = cfg.workers;
	iscsi::target::TcpServer server(target, tc);
	for (const targetd::Portal &p : cfg.portals) {
		if (int rc = server.listen(p.host, p.port, &why); rc != 0) {
			std::fprintf(stderr, "ulp-targetd: %s\n", why.c_str());
			return 1;
		}
	}
	// iSER portals: one Portal each (they share the per-device buffers only within
	// one portal; a daemon usually has one).
	RdmaSetup rdma;
	std::vector<std::unique_ptr<iser::Portal>> iser_portals;
	if ((!cfg.iser_portals.empty() || !cfg.srp_portals.empty()) &&
	    !rdma_setup(cfg, &rdma, &why)) {
		std::fprintf(stderr, "ulp-targetd: --rdma-device %s\n", why.c_str());
		return 1;
	}
	cfg.iser.max_io = std::bit_ceil(size_t(rt.target_cfg.max_io_bytes));
	for (const targetd::Portal &p : cfg.iser_portals) {
		std::optional<SockAddr> a = SockAddr::parse(portal_str(p.host, p.port));
		if (!a) {
			std::fprintf(stderr, "ulp-targetd: iSER portal %s: not an address\n",
			             portal_str(p.host, p.port).c_str());
			return 1;
		}
		auto ip = std::make_unique<iser::Portal>(target, *rdma.provider, cfg.iser);
		if (ip->listen(*a, &why) != 0) {
			std::fprintf(stderr, "ulp-targetd: iSER portal %s\n", why.c_str());
			return 1;
		}
		iser_portals.push_back(std::move(ip));
	}
	// SRP: one target port on every SRP portal. Declared after the iSCSI target's pieces
	// and before its portals: the portals' channels point into it, so it goes after them.
	std::unique_ptr<srpt::Target> srp;
	std::vector<std::unique_ptr<srpt::Portal>> srp_portals;
	if (!cfg.srp_portals.empty()) {
		srpt::TargetConfig sc;
		sc.tpg = rt.srp_tpg.get();
		sc.id_ext = cfg.srp.id_ext;
		sc.ioc_guid = cfg.srp.ioc_guid;
		sc.use_srq = cfg.srp.srq;
		srp = std::make_unique<srpt::Target>(sc);
	}
	for (const targetd::Portal &p : cfg.srp_portals) {
		const std::string ps = portal_str(p.host, p.port);
		std::optional<SockAddr> a = SockAddr::parse(ps);
		if (!a) {
			std::fprintf(stderr, "ulp-targetd: SRP portal %s: not an address\n",
			             ps.c_str());
			return 1;
		}
		// Portal::listen logs the add_target line (srpt, info).
		auto sp = std::make_unique<srpt::Portal>(*srp, *rdma.provider);
		if (sp->listen(*a, &why) != 0) {
			std::fprintf(stderr, "ulp-targetd: SRP portal %s: %s\n", ps.c_str(),
			             why.c_str());
			return 1;
		}
		srp_portals.push_back(std::move(sp));
	}
	if (::pipe2(sig_pipe, O_CLOEXEC) != 0) {
		std::perror("ulp-targetd: pipe");
		return 1;
	}
	struct sigaction sa {
	};
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, nullptr);
	sigaction(SIGTERM, &sa, nullptr);
	sigaction(SIGHUP, &sa, nullptr);
	std::signal(SIGPIPE, SIG_IGN);
	if (int rc = server.start(); rc != 0) {
		std::fprintf(stderr, "ulp-targetd: start: %s\n", std::strerror(-rc));
		return 1;
	}
	for (auto &ip : iser_portals)
		if (int rc = ip->start(); rc != 0) {
			std::fprintf(stderr, "ulp-targetd: iSER start: %s\n", std::strerror(-rc));
			return 1;
		}
	for (auto &sp : srp_portals)
		if (int rc = sp->start(); rc != 0) {
			std::fprintf(stderr, "ulp-targetd: SRP start: %s\n", std::strerror(-rc));
			return 1;
		}
	std::vector<std::string> addrs;
	for (size_t i = 0; i < server.portals(); i++) {
		addrs.push_back(portal_str(cfg.portals[i].host, server.port(i)));
		log_line("listening on " + addrs.back());
	}
	for (size_t i = 0; i < iser_portals.size(); i++) {
		const std::string a = portal_str(cfg.iser_portals[i].host, iser_portals[i]->port());
		log_line(
		    "listening on " + a + " (iSER, " +
		    (cfg.rdma_device.empty() ? std::string("soft provider") : cfg.rdma_device) +
		    ")");
		if (std::find(addrs.begin(), addrs.end(), a) == addrs.end())
			addrs.push_back(a);
	}
	target.set_portal_addresses(addrs);
	for (size_t i = 0; i < srp_portals.size(); i++)
		log_line(
		    "listening on " + srp_portals[i]->addr() + " (SRP, " +
		    (cfg.rdma_device.empty() ? std::string("soft provider") : cfg.rdma_device) +
		    ")");
	if (srp) {
		std::string luns;
		for (uint64_t l : rt.srp_tpg->lun_list(nullptr))
			luns += " " + std::to_string(l);
		log_line("SRP target port exports " + rt.srp_tpg->name().substr(4) + " luns" +
		         luns +
		         (cfg.srp.acls.empty() ? " (open)"
		                               : " acls " + std::to_string(cfg.srp.acls.size())) +
		         (cfg.srp.srq ? " srq" : ""));
	}
	for (const auto &t : cfg.targets) {
		std::string luns;
		for (const auto &l : t.luns)
			luns += " " + std::to_string(l.lun) + ":" + l.bs.kind;
		log_line("target " + t.name + " luns" + luns +
		         (t.acls.empty() ? " (open)" : " acls " + std::to_string(t.acls.size())) +
		         (t.chap ? " chap" : ""));
	}
	if (f.ready_fd >= 0) {
		// For scripts and tests, once we accept connections: the first TCP portal's port
		// (or the first iSER portal's when there is no TCP one), then "iser PORT" for the
		// first iSER portal if there are both.
		std::string line;
		if (server.portals())
			line = std::to_string(server.port(0)) + "\n";
		if (!iser_portals.empty())
			line += (server.portals() ? "iser " : "") +
			        std::to_string(iser_portals[0]->port()) + "\n";
		if (!srp_portals.empty())
			line += (line.empty() ? "" : "srp ") +
			        std::to_string(srp_portals[0]->port()) + "\n";
		(void)!::write(f.ready_fd, line.data(), line.size());
		::close(f.ready_fd);
	}

	pthread_sigmask(SIG_UNBLOCK, &handled, nullptr); // see the top of main
	for (;;) {
		char c;
		const ssize_t n = ::read(sig_pipe[0], &c, 1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0 || got_signal.load())
			break;
		if (got_hup.exchange(false)) {
			rescan_capacities(rt.lus);
			if (srp)
				log_line(srp_stats_line(*srp));
		}
	}
	log_line(std::string("signal ") + strsignal(got_signal.load()) + ": shutting down");
	// Stop accepting; ask sessions to log out, drop the rest; bounded.
	server.stop_accepting();
	for (auto &ip : iser_portals)
		ip->stop_accepting();
	for (auto &sp : srp_portals)
		sp->stop_accepting();
	const auto grace = std::chrono::milliseconds(cfg.shutdown_grace_ms);
	const auto limit = std::chrono::milliseconds(cfg.shutdown_timeout_ms);
	const auto deadline = std::chrono::steady_clock::now() + limit;
	if (!target.stop(grace, limit))
		log_line("some sessions did not end in time; exiting anyway");
	// SRP has no logout of the target's own: its channels are disconnected (Linux's
	// ib_srp then reconnects on its own schedule, to nobody) and drained, within what is
	// left of the same bound.
	if (srp) {
		const auto left = std::max(std::chrono::milliseconds(1000),
		                           std::chrono::duration_cast<std::chrono::milliseconds>(
		                               deadline - std::chrono::steady_clock::now()));
		if (!srp->stop(left))
			log_line("some SRP channels did not end in time; exiting anyway");
	}
	server.stop();
	for (auto &ip : iser_portals)
		ip->stop();
	iser_portals.clear();
	for (auto &sp : srp_portals)
		sp->stop();
	srp_portals.clear();
	if (srp)
		log_line(srp_stats_line(*srp));
	flush_all(rt.lus);
	log_line("stopped");
	return 0;
}
