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
// SIGHUP re-reads the size of every LUN's storage (a file's length, a block device's or an
// rbd image's size; ram and null LUNs cannot change from outside and stay as they are) and
// applies a change in whole blocks, growing or shrinking: the LUN's initiators get UNIT
// ATTENTION, CAPACITY DATA HAS CHANGED (Linux then re-reads the capacity). One log line per
// LUN: "capacity OLD -> NEW blocks", "no capacity change", or why it stayed. So an
// administrator grows a LUN with `truncate -s +1G lun.img` (or by growing the device) and
// `kill -HUP`. With SRP portals, SIGHUP (and the shutdown) also logs the SRP target's
// counters ("SRP stats: logins N ... ext_tables N ...").
//
// Started with --config, SIGHUP first re-reads that file and applies the difference
// (reload.cc): targets, LUNs, ACLs, CHAP and portals added, changed or removed, as the admin
// socket's methods would. A file that does not load (its error names file:line:column)
// changes nothing.
//
// Runtime administration: --admin-socket PATH (or admin_socket in the file) serves JSON-RPC
// 2.0 on a Unix socket (admin/, methods.cc); `ulpctl` is its command line. Under systemd
// (Type=notify, tools/ulp-targetd/ulp-targetd.service) the daemon says READY=1 once every
// portal listens, RELOADING=1 around a SIGHUP, STOPPING=1 when it stops.
#include "scsi/backstore.h"
#include "tools/ulp-targetd/config.h"
#include "tools/ulp-targetd/daemon.h"
#include "ulp/version.h"

#include <CLI/CLI.hpp>

#include <cstdio>
#include <cstring>

using namespace ulp;

int main(int argc, char **argv)
{
	CLI::App app{
	    "ulp-targetd: an iSCSI (TCP and iSER) and SRP target serving LUNs from RAM, files, "
	    "block devices, Ceph RBD images or nothing (null), with the ulp SCSI target core."};
	app.set_version_flag("--version", ulp::version_line("ulp-targetd"));
	app.footer(
	    "Signals: SIGINT, SIGTERM: log every session out (bounded), flush, exit.\n"
	    "SIGUSR1: open --log-file again by its name (after logrotate moved it).\n"
	    "SIGHUP: with --config, re-read the file and apply the difference (targets, LUNs, "
	    "ACLs, CHAP, portals; a file with an error changes nothing and the error names its "
	    "line and column); then log the SRP target's counters (with SRP portals) and re-read "
	    "every LUN's storage size - a file's length, a block device's or an rbd image's "
	    "size (ram and null LUNs stay as they are) - and apply a change in whole blocks, "
	    "growing or shrinking; initiators get UNIT ATTENTION, CAPACITY DATA HAS CHANGED, "
	    "and a log line per LUN says OLD -> NEW blocks or no capacity change. E.g. "
	    "`truncate -s +1G lun.img; kill -HUP <pid>`. A file LUN's size= is where it starts: "
	    "it follows the file from the first SIGHUP on, also below size=.\n"
	    "Persistent reservations: those an initiator registers with APTPL 1 are written to "
	    "--state-dir (a file per LUN) before the command completes, and are there again "
	    "after a restart or a crash. A state file found damaged or of another LUN stops the "
	    "start with its name; moving it aside starts that LUN without its reservations.\n"
	    "Administration while it runs: --admin-socket PATH, then `ulpctl --socket PATH show`.\n"
	    "Exit status: 0 after SIGINT or SIGTERM; 2 a configuration error, a LUN's storage "
	    "missing (no such file, pool or image) or not matching it included; 1 any other "
	    "failure to start.\n"
	    "Statistics: `ulpctl stats` (--json, --prometheus), or --metrics-http 9261 for a "
	    "Prometheus scrape of GET http://127.0.0.1:9261/metrics (off by default).");
	targetd::Flags f;
	targetd::add_flags(app, f);
	// A rejected command line is a configuration error like any other (exit 2, which the
	// unit does not restart on), not CLI11's own codes of 100 and more.
	try {
		app.parse(argc, argv);
	} catch (const CLI::ParseError &e) {
		return app.exit(e) == 0 ? 0 : 2;
	}
	targetd::block_signals(); // before any thread: run() takes them synchronously
	scsi::rbd_backstore_enable();
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
	if (f.check) {
		size_t luns = 0;
		for (const auto &t : cfg.targets)
			luns += t.luns.size();
		std::printf("ulp-targetd: configuration OK: %zu targets, %zu LUNs, %zu portals\n",
		            cfg.targets.size(), luns,
		            cfg.portals.size() + cfg.iser_portals.size() + cfg.srp_portals.size());
		return 0;
	}
	targetd::Daemon d(f, std::move(cfg));
	if (int rc = d.start(&why); rc != 0) {
		std::fprintf(stderr, "ulp-targetd: %s\n", why.c_str());
		return rc;
	}
	return d.run();
}
