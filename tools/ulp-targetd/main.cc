// SPDX-License-Identifier: MIT
// tools/ulp-targetd/main.cc - ulp-targetd: serves LUNs over iSCSI/TCP.
//
//   ulp-targetd --portal 0.0.0.0:3260 --target iqn.2026-11.org.ulp:disk
//               --lun 0:ram:size=1G --lun 1:file:path=/srv/disk.img,size=10G
//
// One target from flags (the common case); several from a config file (--config, see
// config.h). Runs until SIGINT or SIGTERM, then: stop accepting, ask every session to log
// out and drain it (bounded), flush every backstore, exit. One log line per login and
// logout, with the initiator's name and address.
#include "tools/ulp-targetd/config.h"

#include "iser/tcp.h"
#include "scsi/lu.h"
#include "scsi/target.h"

#include <CLI/CLI.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fcntl.h>
#include <memory>
#include <mutex>
#include <string>
#include <unistd.h>
#include <vector>

namespace
{

using namespace ulp;

std::mutex log_lock;
bool quiet = false;

void log_line(const std::string &s)
{
	if (quiet)
		return;
	char ts[32];
	timespec now;
	clock_gettime(CLOCK_REALTIME, &now);
	tm t;
	localtime_r(&now.tv_sec, &t);
	std::strftime(ts, sizeof(ts), "%Y-%m-%d %H:%M:%S", &t);
	std::lock_guard g(log_lock);
	std::fprintf(stderr, "%s.%03ld ulp-targetd: %s\n", ts, now.tv_nsec / 1000000, s.c_str());
}

std::atomic<int> got_signal{0};
int sig_pipe[2] = {-1, -1};

void on_signal(int sig)
{
	got_signal = sig;
	char c = 1;
	(void)!::write(sig_pipe[1], &c, 1);
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

} // namespace

int main(int argc, char **argv)
{
	CLI::App app{"ulp-targetd: an iSCSI target (TCP) serving LUNs from RAM, files, block "
	             "devices or nothing (null), with the ulp SCSI target core."};
	targetd::Flags f;
	targetd::add_flags(app, f);
	CLI11_PARSE(app, argc, argv);
	quiet = f.quiet;

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
	rt.target_cfg.log = log_line;
	rt.target_cfg.trace = f.trace;
	iscsi::IscsiTarget target(rt.target_cfg);
	iscsi::TcpConfig tc;
	tc.workers = cfg.workers;
	iscsi::TcpServer server(target, tc);
	for (const targetd::Portal &p : cfg.portals) {
		if (int rc = server.listen(p.host, p.port, &why); rc != 0) {
			std::fprintf(stderr, "ulp-targetd: %s\n", why.c_str());
			return 1;
		}
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
	std::signal(SIGPIPE, SIG_IGN);
	if (int rc = server.start(); rc != 0) {
		std::fprintf(stderr, "ulp-targetd: start: %s\n", std::strerror(-rc));
		return 1;
	}
	std::vector<std::string> addrs;
	for (size_t i = 0; i < server.portals(); i++) {
		const std::string &h = cfg.portals[i].host;
		addrs.push_back((h.empty()                          ? std::string("0.0.0.0")
		                 : h.find(':') != std::string::npos ? "[" + h + "]"
		                                                    : h) +
		                ":" + std::to_string(server.port(i)));
		log_line("listening on " + addrs.back());
	}
	target.set_portal_addresses(addrs);
	for (const auto &t : cfg.targets) {
		std::string luns;
		for (const auto &l : t.luns)
			luns += " " + std::to_string(l.lun) + ":" + l.bs.kind;
		log_line("target " + t.name + " luns" + luns +
		         (t.acls.empty() ? " (open)" : " acls " + std::to_string(t.acls.size())) +
		         (t.chap ? " chap" : ""));
	}
	if (f.ready_fd >= 0) {
		// For scripts and tests: the first portal's port, once we accept connections.
		std::string line = std::to_string(server.port(0)) + "\n";
		(void)!::write(f.ready_fd, line.data(), line.size());
		::close(f.ready_fd);
	}

	char c;
	while (::read(sig_pipe[0], &c, 1) < 0 && errno == EINTR) {
	}
	log_line(std::string("signal ") + strsignal(got_signal.load()) + ": shutting down");
	// Stop accepting; ask sessions to log out, drop the rest; bounded.
	server.stop_accepting();
	const auto grace = std::chrono::milliseconds(cfg.shutdown_grace_ms);
	const auto limit = std::chrono::milliseconds(cfg.shutdown_timeout_ms);
	if (!target.stop(grace, limit))
		log_line("some sessions did not end in time; exiting anyway");
	server.stop();
	flush_all(rt.lus);
	log_line("stopped");
	return 0;
}
