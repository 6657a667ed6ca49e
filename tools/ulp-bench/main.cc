// SPDX-License-Identifier: MIT
// tools/ulp-bench/main.cc - ulp-bench: benchmarks of ulp's layers. Programs, not tests: they
// print figures and ratios measured side by side in one run (docs/architecture.md).
#include "tools/ulp-bench/cq.h"
#include "tools/ulp-bench/fabric.h"
#include "tools/ulp-bench/mrpool.h"
#include "tools/ulp-bench/rw.h"
#include "tools/ulp-bench/scsi.h"
#include "tools/ulp-bench/xcopy.h"
#include "ulp/version.h"

#include <CLI/CLI.hpp>

int main(int argc, char **argv)
{
	CLI::App app{"ulp-bench: benchmarks of ulp's layers, each figure printed beside a "
	             "baseline measured in the same run."};
	app.set_version_flag("--version", ulp::version_line("ulp-bench"));
	app.require_subcommand(1);

	ulp::bench::FabricOptions fo;
	auto *fabric = app.add_subcommand(
	    "fabric", "RDMA WRITE/READ/SEND bandwidth (64 B .. 1 MiB) and 64-byte message rate "
	              "on the soft provider (or a verbs device: --device), in-process and "
	              "cross-process, beside memcpy");
	fabric->add_flag("--json", fo.json, "print the rows as JSON on stdout instead of a table");
	fabric->add_flag("--quick", fo.quick, "short run for CI and smoke tests (under 20 s)");
	fabric
	    ->add_option("--wire", fo.wire,
	                 "inproc: both ends in this process; xproc: the far end in a peer "
	                 "process (the soft provider's ring wire); xpkt: the same on its packet "
	                 "wire; both: all of them")
	    ->check(CLI::IsMember({"inproc", "xproc", "xpkt", "both"}))
	    ->capture_default_str();
	fabric->add_option("--min-time", fo.min_time,
	                   "seconds per figure (default 0.5, 0.05 with --quick)");
	fabric->add_option("--device", fo.device,
	                   "run on this verbs device (e.g. rxe0), both ends on it, through the "
	                   "verbs CM; default: a soft device (4 KiB .. 1 MiB, fewer sizes)");
	fabric->add_option("--ip", fo.ip,
	                   "the device's IPv4 address (default 127.0.0.1 for the soft device; "
	                   "with --device, its RoCE address from the GID table)");
	fabric
	    ->add_option("--qps", fo.qps,
	                 "multi-QP mode: N connections at once, connection i on completion "
	                 "vector i (on the soft provider: engine i modulo the engines), a thread "
	                 "each; aggregate 64-byte WRITE and SEND rates and 64 KiB WRITE bandwidth "
	                 "with --engines engines beside the same with one engine (soft provider "
	                 "only; --wire inproc, xproc or both; --min-time default 1 s, 0.2 quick)")
	    ->check(CLI::Range(1, 64));
	fabric
	    ->add_option("--engines", fo.engines,
	                 "with --qps: the soft devices' engine count measured beside one engine "
	                 "(default: the device default, min(num_comp_vectors, CPUs))")
	    ->check(CLI::Range(1, 64));

	// Hidden: the far end of the cross-process runs, started by `fabric` itself.
	ulp::bench::PeerOptions po;
	auto *peer = app.add_subcommand("fabric-peer", "")->group("");
	peer->add_option("--ready-fd", po.ready_fd, "write the listener's port here")->required();
	peer->add_option("--max-seconds", po.max_seconds, "give up after this long");
	peer->add_option("--ip", po.ip, "the device's IPv4 address");
	peer->add_option("--device", po.device, "the verbs device (default: a soft one)");
	peer->add_option("--qps", po.qps, "responders, responder i on completion vector i");
	peer->add_option("--engines", po.engines, "the soft device's engines (0: its default)");

	ulp::bench::RwOptions rwo;
	auto *rw = app.add_subcommand("rw", "rdma_rw contexts/s and bandwidth (4 KiB, 128 KiB, "
	                                    "1 MiB READ/WRITE), SGE and MR paths beside raw verbs "
	                                    "(soft devices, or a verbs device: --device)");
	rw->add_flag("--json", rwo.json, "print the rows as JSON on stdout instead of a table");
	rw->add_flag("--quick", rwo.quick, "short run (under 15 s)");
	rw->add_option("--min-time", rwo.min_time,
	               "seconds per figure (default 0.3, 0.03 quick; --device: 0.5, 0.1 quick)");
	rw->add_option("--device", rwo.device,
	               "run on this verbs device (e.g. rxe0): both QPs on it, connected by hand; "
	               "default: two in-process soft devices");
	ulp::bench::MrPoolOptions mpo;
	auto *mrpool = app.add_subcommand("mrpool", "MrPool get/put ns beside a mutex + vector "
	                                            "free list measured in the same run");
	mrpool->add_flag("--json", mpo.json, "print the rows as JSON on stdout instead of a table");
	mrpool->add_flag("--quick", mpo.quick, "short run (under 15 s)");
	mrpool->add_option("--min-time", mpo.min_time,
	                   "seconds per figure (default 0.3, 0.03 quick)");

	ulp::bench::CqBenchOptions cqo;
	auto *cq = app.add_subcommand("cq", "ns per completion dispatched by each cq_poll context "
	                                    "beside a raw poll loop measured in the same run");
	cq->add_flag("--json", cqo.json, "print the rows as JSON on stdout instead of a table");
	cq->add_flag("--quick", cqo.quick, "short run (under 15 s)");
	cq->add_option("--rounds", cqo.rounds,
	               "pre-filled CQs of 4096 completions per figure (default 2000, 200 quick)");

	ulp::bench::ScsiBenchOptions so;
	auto *scsi = app.add_subcommand(
	    "scsi", "4 KiB READ/WRITE commands/s through the SCSI target core and the loopback "
	            "fabric on the null, ram and file backstores, beside memcpy (ram) and fio on "
	            "the same file (file)");
	scsi->add_flag("--json", so.json, "print the rows as JSON on stdout instead of a table");
	scsi->add_flag("--quick", so.quick, "short run (64 MiB file, 0.3 s per figure)");
	scsi->add_option("--min-time", so.min_time, "seconds per figure (default 2, 0.3 quick)");
	scsi->add_option("--dir", so.dir,
	                 "folder for the file backstore's file (default /var/tmp)");
	scsi->add_option("--file-mib", so.file_mib, "file size in MiB (default 256, 64 quick)");
	scsi->add_option("--qd", so.qd, "commands in flight")
	    ->capture_default_str()
	    ->check(CLI::Range(1, 1024));
	scsi->add_flag("!--no-fio", so.fio, "skip the fio reference runs");

	ulp::bench::XcopyBenchOptions xo;
	auto *xcopy = app.add_subcommand(
	    "xcopy", "EXTENDED COPY MiB/s between two LUs through the SCSI target core: file LUs "
	             "by copy_file_range and by the read/write loop, RAM LUs by the loop, beside "
	             "copy_file_range and memcpy done directly");
	xcopy->add_flag("--json", xo.json, "print the rows as JSON on stdout instead of a table");
	xcopy->add_flag("--quick", xo.quick, "short run (64 MiB, 2 rounds)");
	xcopy->add_option("--dir", xo.dir, "folder for the file LUs' files (default /var/tmp)");
	xcopy->add_option("--mib", xo.mib, "MiB per copy (default 256, 64 quick)");
	xcopy->add_option("--rounds", xo.rounds, "copies per figure, the best counts (default 5)");

	try {
		app.parse(argc, argv);
	} catch (const CLI::ParseError &e) {
		return app.exit(e) == 0 ? 0 : 2; // a bad command line: 2, as every ulp program
	}

	if (*scsi)
		return ulp::bench::run_scsi(so);
	if (*xcopy)
		return ulp::bench::run_xcopy(xo);

	if (*rw)
		return ulp::bench::run_rw(rwo);
	if (*mrpool)
		return ulp::bench::run_mrpool(mpo);

	if (*cq)
		return ulp::bench::run_cq(cqo);
	if (*fabric)
		return fo.qps > 0 ? ulp::bench::run_fabric_multi(fo) : ulp::bench::run_fabric(fo);
	if (*peer)
		return ulp::bench::run_fabric_peer(po);
	return 2;
}
