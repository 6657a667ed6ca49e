// SPDX-License-Identifier: MIT
// tools/ulp-initiator/main.cc - ulp-initiator: logs in to an iSCSI target (TCP or iSER)
// or an SRP target, and runs a verified workload on one LUN.
//
//   ulp-initiator --portal 127.0.0.1:3260 --target iqn.2026-11.org.ulp:disk
//                 --workload randwrite --bs 4k --qd 32 --runtime 10 --verify-only
//   ulp-initiator --transport iser --portal 127.0.0.1:3260 ...        (soft provider)
//   ulp-initiator --transport iser --rdma-device rxe0 --portal 10.99.0.1:3260 ...
//   ulp-initiator --transport srp --srp-target id_ext=..,ioc_guid=..,dest=10.99.0.1:5555
//                 --rdma-device rxe0 ...           (the add_target line the target logs)
//
// Progress once a second on stderr; the final figures on stdout (text, or --json).
// SIGINT ends the workload early, as its runtime would; a second one, the program.
// Exit status: 0 success; 1 the run failed (login refused, lost connection, failed I/O,
// verify mismatch); 2 bad command line.
#include "core/dma_mem.h"
#include "core/log.h"
#include "iscsi/initiator/session.h"
#include "iser/initiator/initiator.h"
#include "providers/soft/soft.h"
#include "tools/common/named_device.h"
#include "tools/ulp-initiator/multipath.h"
#include "tools/ulp-initiator/srp_session.h"
#include "tools/ulp-initiator/workload.h"
#include "ulp/version.h"

#include <CLI/CLI.hpp>

#include <pthread.h>

#include <atomic>
#include <cinttypes>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <thread>

namespace
{

using namespace ulp;
using namespace initiator;

// "4k" -> 4096: K, M, G, T (powers of 1024, an optional trailing B or iB); bare: bytes.
bool parse_size(const std::string &s, uint64_t *out)
{
	size_t i = 0;
	uint64_t v = 0;
	while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) {
		if (v > (UINT64_MAX - 9) / 10)
			return false;
		v = v * 10 + uint64_t(s[i++] - '0');
	}
	if (i == 0)
		return false;
	std::string suf;
	for (; i < s.size(); i++)
		suf += char(std::tolower(static_cast<unsigned char>(s[i])));
	int shift = 0;
	if (suf.empty() || suf == "b")
		shift = 0;
	else if (suf == "k" || suf == "kb" || suf == "kib")
		shift = 10;
	else if (suf == "m" || suf == "mb" || suf == "mib")
		shift = 20;
	else if (suf == "g" || suf == "gb" || suf == "gib")
		shift = 30;
	else if (suf == "t" || suf == "tb" || suf == "tib")
		shift = 40;
	else
		return false;
	if (shift && v > (UINT64_MAX >> shift))
		return false;
	*out = v << shift;
	return true;
}

bool parse_chap(const std::string &s, iscsi::ChapSecret *out)
{
	auto colon = s.find(':');
	if (colon == std::string::npos || colon == 0 || colon + 1 == s.size())
		return false;
	out->user = s.substr(0, colon);
	out->secret = s.substr(colon + 1);
	return true;
}

bool parse_yes_no(const std::string &s, bool *out)
{
	if (s == "yes" || s == "Yes") {
		*out = true;
		return true;
	}
	if (s == "no" || s == "No") {
		*out = false;
		return true;
	}
	return false;
}

std::string json_escape(const std::string &s)
{
	std::string o;
	for (char c : s) {
		if (c == '"' || c == '\\') {
			o += '\\';
			o += c;
		} else if (static_cast<unsigned char>(c) < 0x20) {
			char b[8];
			std::snprintf(b, sizeof(b), "\\u%04x", c);
			o += b;
		} else {
			o += c;
		}
	}
	return o;
}

double us(uint64_t ns)
{
	return double(ns) / 1000.0;
}

// SIGINT: the workload ends as its runtime would (drained, the verify pass, the figures);
// a second one ends the program. SIGTERM still ends it at once (timeout(1), a unit's stop:
// a safety net must not wait for a verify pass). SIGINT is blocked in every thread and
// taken by one of our own (sigwait), so that no blocking call of the I/O path meets EINTR.
std::atomic<bool> g_stop{false};

void catch_stop_signals()
{
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	pthread_sigmask(SIG_BLOCK, &set, nullptr);
	std::thread([set] {
		int sig = 0;
		if (sigwait(&set, &sig) != 0)
			return;
		g_stop = true;
		std::fprintf(stderr,
		             "ulp-initiator: %s: ending the workload (again: end at once)\n",
		             strsignal(sig));
		if (sigwait(&set, &sig) != 0)
			return;
		std::signal(sig, SIG_DFL);
		pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
		::raise(sig);
		std::_Exit(128 + sig);
	}).detach();
}

void print_phase_json(const char *name, const PhaseStats &p, bool last)
{
	const double s = p.seconds > 0 ? p.seconds : 1e-9;
	std::printf("  \"%s\": {\"ios\": %" PRIu64 ", \"reads\": %" PRIu64 ", \"writes\": %" PRIu64
	            ", \"bytes\": %" PRIu64 ", \"errors\": %" PRIu64 ", \"seconds\": %.3f, "
	            "\"iops\": %.1f, \"mb_per_s\": %.3f, \"lat_mean_us\": %.1f, "
	            "\"lat_min_us\": %.1f, \"p50_us\": %.1f, \"p90_us\": %.1f, \"p99_us\": %.1f, "
	            "\"p99_9_us\": %.1f, \"max_us\": %.1f}%s\n",
	            name, p.ios, p.reads, p.writes, p.bytes, p.errors, p.seconds, double(p.ios) / s,
	            double(p.bytes) / s / 1e6, p.lat.mean() / 1000.0, us(p.lat.min()),
	            us(p.lat.percentile(0.5)), us(p.lat.percentile(0.9)),
	            us(p.lat.percentile(0.99)), us(p.lat.percentile(0.999)), us(p.lat.max()),
	            last ? "" : ",");
}

void print_phase_text(const char *name, const PhaseStats &p)
{
	const double s = p.seconds > 0 ? p.seconds : 1e-9;
	std::printf("%s: %" PRIu64 " I/Os (%" PRIu64 " reads, %" PRIu64 " writes) in %.2f s: "
	            "%.0f IOPS, %.2f MB/s, %" PRIu64 " errors\n",
	            name, p.ios, p.reads, p.writes, p.seconds, double(p.ios) / s,
	            double(p.bytes) / s / 1e6, p.errors);
	std::printf("  latency (us): mean %.1f  min %.1f  p50 %.1f  p90 %.1f  p99 %.1f  "
	            "p99.9 %.1f  max %.1f\n",
	            p.lat.mean() / 1000.0, us(p.lat.min()), us(p.lat.percentile(0.5)),
	            us(p.lat.percentile(0.9)), us(p.lat.percentile(0.99)),
	            us(p.lat.percentile(0.999)), us(p.lat.max()));
}

// --path: the LUN through the first portal and every --path as one multipath device
// (multipath.h), each path a session of its own (its own ISID: another I_T nexus). A path
// that does not log in is left out with a line; none at all fails the run.
template <typename Report>
int run_multipath(const iscsi::initiator::InitiatorConfig &ic,
                  const iscsi::initiator::TransportFactory &make_tp,
                  const iscsi::initiator::Portal &first, const std::vector<std::string> &more,
                  const WorkloadConfig &wc, const std::string &target, Report &report)
{
	std::vector<iscsi::initiator::Portal> portals{first};
	for (const auto &m : more) {
		iscsi::initiator::Portal p;
		std::string why;
		if (!iscsi::initiator::parse_portal(m, &p, &why)) {
			std::fprintf(stderr, "ulp-initiator: --path %s: %s\n", m.c_str(),
			             why.c_str());
			return 2;
		}
		portals.push_back(p);
	}
	std::vector<MultipathDisk::Path> paths;
	std::string where;
	for (const auto &p : portals) {
		iscsi::initiator::InitiatorConfig c = ic;
		c.isid = iscsi::initiator::random_isid();
		auto s = std::make_unique<iscsi::initiator::Session>(c, make_tp);
		const std::string name = iscsi::initiator::portal_str(p);
		if (!s->login(p)) {
			std::fprintf(stderr, "ulp-initiator: path %s: login to %s: %s (left out)\n",
			             name.c_str(), target.c_str(), s->error().c_str());
			continue;
		}
		where += (where.empty() ? "" : ",") + name;
		// A failed path logs in again with the same ISID, as iscsid reconnects: the
		// target reinstates the session (RFC 7143 6.3.5) if it still has the old one.
		auto login = [c, make_tp, p](std::string *why) {
			auto ns = std::make_unique<iscsi::initiator::Session>(c, make_tp);
			if (!ns->login(p)) {
				*why = ns->error();
				return std::unique_ptr<iscsi::initiator::Session>();
			}
			return ns;
		};
		paths.push_back({name, std::move(s), login});
	}
	if (paths.empty()) {
		std::fprintf(stderr, "ulp-initiator: no path to %s logged in\n", target.c_str());
		return 1;
	}
	MultipathDisk mp(std::move(paths), wc.lun);
	std::string why;
	if (!mp.init(&why)) {
		std::fprintf(stderr, "ulp-initiator: %s\n", why.c_str());
		mp.logout();
		return 1;
	}
	RunResult res;
	if (!run_workload(mp, wc, &res, &why)) {
		std::fprintf(stderr, "ulp-initiator: %s\n", why.c_str());
		mp.logout();
		return 1;
	}
	const bool logged_out = res.fatal.empty() && mp.logout();
	std::string ij = "  \"paths\": [", it;
	bool first_path = true;
	for (const auto &p : mp.path_stats()) {
		char b[512];
		std::snprintf(b, sizeof(b),
		              "%s{\"portal\": \"%s\", \"rtpi\": %u, \"group\": %u, \"commands\": "
		              "%" PRIu64
		              ", \"state\": \"%s\", \"dead\": %s, \"reinstated\": %" PRIu64 "}",
		              first_path ? "" : ", ", json_escape(p.name).c_str(), p.rtpi, p.tpg,
		              p.ios, p.state.c_str(), p.dead ? "true" : "false", p.reinstated);
		ij += b;
		std::snprintf(b, sizeof(b),
		              "path %s (target port %u, group %u): %" PRIu64
		              " commands, %s%s, logged in again %" PRIu64 " times\n",
		              p.name.c_str(), p.rtpi, p.tpg, p.ios, p.state.c_str(),
		              p.dead ? ", failed" : "", p.reinstated);
		it += b;
		first_path = false;
	}
	char b[512];
	std::snprintf(b, sizeof(b),
	              "],\n  \"multipath\": {\"switches\": %" PRIu64 ", \"retries\": %" PRIu64
	              ", \"rtpg\": %" PRIu64 ", \"failovers\": [",
	              mp.switches(), mp.retries(), mp.rtpg_reads());
	ij += b;
	const auto fos = mp.failovers();
	for (size_t i = 0; i < fos.size(); i++) {
		const auto &f = fos[i];
		std::snprintf(b, sizeof(b), "%s{\"at_s\": %.3f, ", i ? ", " : "", f.at_s);
		ij += b;
		ij += "\"from\": \"" + json_escape(f.from) + "\", \"to\": \"" + json_escape(f.to) +
		      "\", ";
		std::snprintf(b, sizeof(b), "\"stall_ms\": %.3f, \"resumed\": %s, ", f.stall_ms,
		              f.resumed ? "true" : "false");
		ij += b;
		ij += "\"why\": \"" + json_escape(f.why) + "\"}";
	}
	ij += "]},\n";
	std::snprintf(b, sizeof(b),
	              "multipath: %" PRIu64 " path switches, %" PRIu64
	              " commands sent again, %" PRIu64
	              " REPORT TARGET PORT GROUPS, %zu failovers\n",
	              mp.switches(), mp.retries(), mp.rtpg_reads(), fos.size());
	it += b;
	for (const auto &f : fos) {
		std::snprintf(b, sizeof(b), "  failover at %.1f s: I/O stalled %.0f ms%s: ", f.at_s,
		              f.stall_ms, f.resumed ? "" : " and never resumed");
		it += b + f.from + " -> " + (f.resumed ? f.to : "(none)") + " (" + f.why + ")\n";
	}
	return report(target, where, res, logged_out, ij, it);
}

} // namespace

int main(int argc, char **argv)
{
	CLI::App app{
	    "ulp-initiator: logs in to an iSCSI target (TCP or iSER) or an SRP target and runs a "
	    "workload on one "
	    "LUN, verifying what it reads back.\n\nEvery block written carries its LBA, "
	    "a generation number and a CRC32C; reads of blocks written this run must "
	    "match the latest generation, reads of other blocks that carry a header "
	    "must be intact. Progress once a second on stderr, final figures on stdout. "
	    "SIGINT ends the workload early as --runtime would (the verify pass and "
	    "the figures follow); a second one ends the program. Exit status 0: success, 1: run "
	    "failed (login, connection, I/O error, "
	    "verify mismatch), 2: bad command line."};
	app.set_version_flag("--version", ulp::version_line("ulp-initiator"));
	std::string portal_s, target, initiator_name = "iqn.2026-11.org.ulp:ulp-initiator";
	std::string chap_s, mutual_s, chap_algs, digests = "none", workload = "randread";
	std::string bs_s = "4k", size_s, offset_s = "0", range_s, imm_s, r2t_s, mrdsl_s;
	uint64_t lun = 0;
	uint32_t qd = 32, rwmix = 50;
	double runtime = 10;
	uint64_t seed = 0;
	bool seed_given = false, verify = true, verify_given = false, verify_pass = false;
	bool json = false, quiet = false, discover = false;
	double cmd_timeout = 30;
	std::string transport = "tcp", rdma_device, src_ip;
	std::vector<std::string> more_paths;
	SrpArgs srp_args;

	app.add_option("--portal,-p", portal_s,
	               "target portal HOST[:PORT] (port 3260 by default; SRP: 5555)");
	app.add_option("--transport", transport,
	               "tcp, iser (iSCSI over RDMA) or srp (SRP over RDMA/CM); RDMA on the soft "
	               "provider unless --rdma-device");
	app.add_option("--rdma-device", rdma_device,
	               "iser, srp: the verbs device to use (e.g. rxe0); default: a soft device");
	app.add_option("--src-ip", src_ip,
	               "iser, srp: our address (the soft device's; default: the portal's host)");
	app.add_option("--srp-target", srp_args.add_target,
	               "srp: the target as Linux's add_target names it "
	               "(id_ext=HEX,ioc_guid=HEX,dest=HOST:PORT), as ulp-targetd logs it; "
	               "without it (and without --srp-id-ext/--srp-ioc-guid), a target on our "
	               "own device's address is taken to use that device's node GUID, "
	               "ulp-targetd's default");
	app.add_option("--srp-id-ext", srp_args.id_ext, "srp: the target port id's id_ext (hex)");
	app.add_option("--srp-ioc-guid", srp_args.ioc_guid,
	               "srp: the target port id's ioc_guid (hex)");
	app.add_option("--srp-initiator-ext", srp_args.initiator_ext,
	               "srp: our port id's high half (hex, default 1)");
	app.add_option("--srp-channels", srp_args.channels,
	               "srp: RDMA channels of the nexus, as Linux's ch_count (default 1)")
	    ->check(CLI::Range(1, 64));
	app.add_option("--target,-t", target,
	               "target name (iqn...); without it, the first target SendTargets reports");
	app.add_option("--lun,-l", lun, "LUN to run on (default 0)");
	app.add_option("--initiator-name", initiator_name, "our InitiatorName");
	app.add_option("--chap", chap_s, "USER:SECRET we prove to the target (CHAP)");
	app.add_option("--mutual-chap", mutual_s,
	               "USER:SECRET the target must prove (mutual CHAP)");
	app.add_option("--chap-algs", chap_algs,
	               "CHAP algorithms to offer, in order: md5, sha1, sha256, sha3-256 "
	               "(default sha3-256,sha256,sha1,md5; tgt 1.0.85 works with md5 only)");
	app.add_option("--digests", digests,
	               "header and data digests: none, crc32c, or both (CRC32C preferred)");
	app.add_option("--immediate-data", imm_s, "propose ImmediateData yes|no (default yes)");
	app.add_option("--initial-r2t", r2t_s, "propose InitialR2T yes|no (default no)");
	app.add_option("--max-recv-dsl", mrdsl_s,
	               "MaxRecvDataSegmentLength we declare (default 256k, at most 1m)");
	app.add_option("--workload,-w", workload,
	               "read, write, randread, randwrite or mixed (default randread)");
	app.add_option("--bs,-b", bs_s, "bytes per I/O, e.g. 4k, 128k (default 4k)");
	app.add_option("--qd,-q", qd, "I/Os in flight (default 32)")->check(CLI::Range(1, 4096));
	app.add_option("--runtime,-r", runtime,
	               "seconds to run (default 10; 0 with --size: until the size is done)");
	app.add_option("--size,-s", size_s, "bytes to transfer, then stop (default: by --runtime)");
	app.add_option("--offset", offset_s, "first byte of the LUN to use (default 0)");
	app.add_option("--range", range_s, "bytes from --offset to use (default: to the end)");
	app.add_option("--rwmix", rwmix, "mixed: percent reads (default 50)")
	    ->check(CLI::Range(0, 100));
	auto *seed_opt = app.add_option("--seed", seed, "random seed (default: a random one)");
	auto *verify_opt = app.add_flag("--verify,!--no-verify", verify,
	                                "check reads (default on for workloads that write)");
	app.add_flag("--verify-only", verify_pass,
	             "after the workload, a read-only pass over the whole range checks every "
	             "block (those written this run against their last generation)");
	app.add_option("--cmd-timeout", cmd_timeout,
	               "seconds a command may take before the session is failed (default 30)");
	app.add_flag("--json,-j", json, "final figures as JSON on stdout");
	app.add_flag("--quiet", quiet, "no progress lines");
	app.add_flag("--discover", discover, "list the targets SendTargets reports, then exit");
	app.add_option("--path", more_paths,
	               "HOST[:PORT] of another portal of the same target (another gateway, "
	               "another portal group); repeatable. With it the LUN is one multipath "
	               "device: a session per portal, I/O on a path whose port group REPORT "
	               "TARGET PORT GROUPS calls active/optimized (else active/non-optimized), "
	               "moved when the states change (NOT READY 04h/0Ah-0Ch, UNIT ATTENTION "
	               "2Ah/06h) or a path fails; commands that did not execute, or whose path "
	               "failed, are sent again; a failed path logs in again every second. Each "
	               "failover (the path in use failed or left active/optimized) is a line on "
	               "stderr and an entry of multipath.failovers in --json: when, from and to "
	               "which path, and the I/O stall (from the first command that could not "
	               "complete on the old path to the first completed after). iSCSI (tcp, "
	               "iser) only");
	try {
		app.parse(argc, argv);
	} catch (const CLI::ParseError &e) {
		const int rc = app.exit(e);
		return e.get_exit_code() == 0 ? 0 : (rc ? 2 : 0);
	}
	seed_given = seed_opt->count() > 0;
	verify_given = verify_opt->count() > 0;
	std::signal(SIGPIPE, SIG_IGN);

	auto usage = [](const std::string &m) {
		std::fprintf(stderr, "ulp-initiator: %s\n", m.c_str());
		return 2;
	};
	if (transport != "tcp" && transport != "iser" && transport != "srp")
		return usage("--transport must be tcp, iser or srp, not " + transport);
	const bool srp = transport == "srp";
	if (srp && !more_paths.empty())
		return usage("--path is for iSCSI (tcp, iser): SRP has no port groups here");
	iscsi::initiator::Portal portal;
	std::string why;
	if (portal_s.empty() && !(srp && !srp_args.add_target.empty()))
		return usage("--portal HOST[:PORT] is required");
	if (!srp && !iscsi::initiator::parse_portal(portal_s, &portal, &why))
		return usage("--portal: " + why);
	WorkloadConfig wc;
	if (!pattern_from_name(workload, &wc.pattern))
		return usage("--workload must be read, write, randread, randwrite or mixed, not " +
		             workload);
	uint64_t v;
	if (!parse_size(bs_s, &v) || v == 0 || v % 512 || v > (16u << 20))
		return usage(
		    "--bs must be a multiple of 512 bytes up to 16m (e.g. 4k, 128k), not " + bs_s);
	wc.bs = static_cast<uint32_t>(v);
	if (!size_s.empty() && !parse_size(size_s, &wc.size))
		return usage("--size: not a size: " + size_s);
	if (!parse_size(offset_s, &wc.offset) || wc.offset % 512)
		return usage("--offset must be a multiple of 512 bytes, not " + offset_s);
	if (!range_s.empty() && (!parse_size(range_s, &wc.range) || wc.range % 512 || !wc.range))
		return usage("--range must be a non-zero multiple of 512 bytes, not " + range_s);
	if (runtime < 0 || (runtime == 0 && wc.size == 0))
		return usage("--runtime must be positive (or 0 with --size)");
	// --size alone runs until the size is done; with --runtime too, whichever comes first.
	const bool runtime_given = app.count("--runtime") > 0;
	wc.runtime = std::chrono::milliseconds(
	    wc.size && !runtime_given ? 0 : static_cast<int64_t>(runtime * 1000));
	wc.qd = qd;
	wc.rwmix = rwmix;
	wc.lun = lun;
	if (!seed_given) {
		std::random_device rd;
		seed = (uint64_t(rd()) << 32) | rd();
	}
	wc.seed = seed;
	const bool writes = wc.pattern == Pattern::Write || wc.pattern == Pattern::RandWrite ||
	                    (wc.pattern == Pattern::Mixed && rwmix < 100);
	wc.verify = verify_given ? verify : writes;
	wc.verify_pass = verify_pass;
	wc.progress = !quiet;
	wc.stop = &g_stop;
	catch_stop_signals();

	iscsi::initiator::InitiatorConfig ic;
	ic.initiator_name = initiator_name;
	ic.cmd_timeout = std::chrono::milliseconds(static_cast<int64_t>(cmd_timeout * 1000));
	if (!iscsi::valid_iscsi_name(initiator_name))
		return usage("--initiator-name is not an iSCSI name: " + initiator_name);
	if (!chap_s.empty()) {
		iscsi::ChapSecret c;
		if (!parse_chap(chap_s, &c))
			return usage("--chap must be USER:SECRET");
		ic.chap = c;
	}
	if (!mutual_s.empty()) {
		iscsi::ChapSecret c;
		if (!parse_chap(mutual_s, &c) || !ic.chap)
			return usage("--mutual-chap must be USER:SECRET, and needs --chap");
		ic.mutual = c;
	}
	if (!chap_algs.empty()) {
		ic.chap_policy.algorithms.clear();
		size_t p = 0;
		while (p <= chap_algs.size()) {
			size_t q = chap_algs.find(',', p);
			if (q == std::string::npos)
				q = chap_algs.size();
			const std::string a = chap_algs.substr(p, q - p);
			p = q + 1;
			if (a == "md5")
				ic.chap_policy.algorithms.push_back(iscsi::ChapAlg::Md5);
			else if (a == "sha1")
				ic.chap_policy.algorithms.push_back(iscsi::ChapAlg::Sha1);
			else if (a == "sha256")
				ic.chap_policy.algorithms.push_back(iscsi::ChapAlg::Sha256);
			else if (a == "sha3-256")
				ic.chap_policy.algorithms.push_back(iscsi::ChapAlg::Sha3_256);
			else
				return usage("--chap-algs: unknown algorithm '" + a +
				             "' (md5, sha1, sha256, sha3-256)");
		}
	}
	using iscsi::Digest;
	if (digests == "none")
		ic.prefs.header_digests = ic.prefs.data_digests = {Digest::None};
	else if (digests == "crc32c")
		ic.prefs.header_digests = ic.prefs.data_digests = {Digest::Crc32c};
	else if (digests == "both")
		ic.prefs.header_digests = ic.prefs.data_digests = {Digest::Crc32c, Digest::None};
	else
		return usage("--digests must be none, crc32c or both");
	if (!imm_s.empty() && !parse_yes_no(imm_s, &ic.prefs.immediate_data))
		return usage("--immediate-data is yes or no");
	if (!r2t_s.empty() && !parse_yes_no(r2t_s, &ic.prefs.initial_r2t))
		return usage("--initial-r2t is yes or no");
	if (!mrdsl_s.empty()) {
		if (!parse_size(mrdsl_s, &v) || v < 512 || v > (1u << 20))
			return usage("--max-recv-dsl must be 512..1m");
		ic.prefs.max_recv_dsl = static_cast<uint32_t>(v);
	}
	// The library's lines (core/log.h): logins, redirects, target requests; --quiet keeps
	// warnings and errors. A failed session is reported once, by whoever ends the run.
	log::set_program("ulp-initiator");
	log::set_level(quiet ? log::Level::Warn : log::Level::Info);

	const bool iser = transport == "iser";
	// What every transport reports the same way: the figures, verification, the result.
	auto report = [&](const std::string &name, const std::string &where, const RunResult &res,
	                  bool logged_out, const std::string &extra_json,
	                  const std::string &extra_text) {
		for (const auto &m : res.error_msgs)
			std::fprintf(stderr, "ulp-initiator: %s\n", m.c_str());
		for (const auto &m : res.verify_msgs)
			std::fprintf(stderr, "ulp-initiator: %s\n", m.c_str());
		if (!res.fatal.empty())
			std::fprintf(stderr, "ulp-initiator: run ended early: %s\n",
			             res.fatal.c_str());
		const uint64_t errors = res.main.errors + res.verify_pass.errors;
		const bool ok = res.fatal.empty() && errors == 0 && res.verify_errors == 0;

		if (json) {
			std::printf(
			    "{\n  \"target\": \"%s\", \"portal\": \"%s\", \"lun\": %" PRIu64
			    ", \"workload\": \"%s\", \"bs\": %u, \"qd\": %u, \"seed\": %" PRIu64
			    ", \"block_size\": %u, \"lun_blocks\": %" PRIu64 ",\n",
			    json_escape(name).c_str(), json_escape(where).c_str(), lun,
			    pattern_name(wc.pattern), wc.bs, wc.qd, seed, res.block_size,
			    res.lun_blocks);
			const double sec = res.main.seconds > 0 ? res.main.seconds : 1e-9;
			std::printf("  \"ios\": %" PRIu64 ", \"iops\": %.1f, \"mb_per_s\": %.3f, "
			            "\"errors\": %" PRIu64 ", \"p50_us\": %.1f, \"p90_us\": %.1f, "
			            "\"p99_us\": %.1f, \"p99_9_us\": %.1f, \"max_us\": %.1f,\n",
			            res.main.ios, double(res.main.ios) / sec,
			            double(res.main.bytes) / sec / 1e6, errors,
			            us(res.main.lat.percentile(0.5)),
			            us(res.main.lat.percentile(0.9)),
			            us(res.main.lat.percentile(0.99)),
			            us(res.main.lat.percentile(0.999)), us(res.main.lat.max()));
			std::printf("  \"verify\": %s, \"verified_blocks\": %" PRIu64
			            ", \"verify_errors\": %" PRIu64 ",\n",
			            wc.verify ? "true" : "false", res.verified_blocks,
			            res.verify_errors);
			print_phase_json("main", res.main, false);
			if (wc.verify_pass)
				print_phase_json("verify_pass", res.verify_pass, false);
			std::printf("  \"transport\": \"%s\",\n", transport.c_str());
			std::printf("%s", extra_json.c_str());
			std::printf("  \"logged_out\": %s, \"ok\": %s, \"fatal\": \"%s\"\n}\n",
			            logged_out ? "true" : "false", ok ? "true" : "false",
			            json_escape(res.fatal).c_str());
		} else {
			std::printf("ulp-initiator: %s LUN %" PRIu64 " (%" PRIu64
			            " blocks of %u bytes) at %s, "
			            "%s bs %u qd %u seed %" PRIu64 "\n",
			            name.c_str(), lun, res.lun_blocks, res.block_size,
			            where.c_str(), pattern_name(wc.pattern), wc.bs, wc.qd, seed);
			print_phase_text(pattern_name(wc.pattern), res.main);
			if (wc.verify_pass)
				print_phase_text("verify pass", res.verify_pass);
			std::printf("%s", extra_text.c_str());
			std::printf("verify: %s, %" PRIu64 " blocks checked, %" PRIu64
			            " mismatches\n",
			            wc.verify || wc.verify_pass ? "on" : "off", res.verified_blocks,
			            res.verify_errors);
			std::printf("result: %s\n", ok                  ? "ok"
			                            : res.fatal.empty() ? "FAILED"
			                                                : "FAILED: ended early");
		}
		return ok ? 0 : 1;
	};

	if (srp) {
		SrpSession ss;
		if (!ss.configure(srp_args, portal_s, rdma_device, src_ip, qd, wc.bs, cmd_timeout,
		                  &wc.arena, &why))
			return usage(why);
		if (!ss.login(&why)) {
			std::fprintf(stderr, "ulp-initiator: SRP login to %s: %s\n",
			             ss.where().c_str(), why.c_str());
			return 1;
		}
		RunResult res;
		if (!run_workload(ss.disk(), wc, &res, &why)) {
			std::fprintf(stderr, "ulp-initiator: %s\n", why.c_str());
			ss.logout();
			return 1;
		}
		const bool logged_out = res.fatal.empty() && ss.logout();
		return report("SRP target " + ss.where(), ss.where(), res, logged_out,
		              ss.stats_json(), ss.stats_text());
	}

	// iSER: a device (a named verbs one, or a soft one of our own at the source address),
	// the I/O buffers in one registered arena (zero copy), and a transport per connection.
	iscsi::initiator::TransportFactory make_tp;
	iser::InitiatorConfig xc;
	iser::InitiatorStats xstats;
	std::unique_ptr<DmaRegion> arena;
	Device *soft_dev = nullptr;
	if (iser) {
		if (!rdma_device.empty()) {
			tools::NamedDevice nd;
			if (!tools::open_named_device(rdma_device, &nd, &why))
				return usage("--rdma-device: " + why);
			xc.provider = nd.provider;
		} else {
			soft::DeviceConfig sc;
			sc.ip = src_ip.empty() ? portal.host : src_ip;
			soft_dev = soft::create_device(sc);
			if (!soft_dev)
				return usage("cannot make a soft RDMA device at " + sc.ip + " (" +
				             std::strerror(errno) +
				             "); give --src-ip an IPv4 address");
			xc.provider = &soft::provider();
		}
		xc.src_ip = src_ip;
		xc.queue_depth = qd + 4; // a few beyond the workload's own (the verify probes)
		xc.max_io = std::max<uint32_t>(wc.bs, 1u << 20);
		arena = dma_alloc(size_t(qd) * wc.bs);
		if (!arena)
			return usage(std::string("cannot allocate I/O buffers: ") +
			             std::strerror(errno));
		wc.arena = {static_cast<uint8_t *>(arena->addr()), size_t(qd) * wc.bs};
		xc.regions.push_back(wc.arena);
		// Multipath logs paths in again from threads of their own: no shared counters
		// (its report has none).
		xc.stats = more_paths.empty() ? &xstats : nullptr;
		make_tp = [&xc] { return iser::make_transport(xc); };
	}
	struct SoftDevGuard {
		Device *d;
		~SoftDevGuard()
		{
			if (d)
				soft::destroy_device(d);
		}
	} soft_guard{soft_dev};

	// Discovery when asked, or to find the target.
	if (discover || target.empty()) {
		iscsi::initiator::InitiatorConfig dc = ic;
		dc.type = iscsi::SessionType::Discovery;
		// Discovery sessions are usually open (tgt and ulp-targetd bind CHAP accounts to
		// targets, not to discovery); the credentials are for the target.
		dc.chap.reset();
		dc.mutual.reset();
		iscsi::initiator::Session d(dc, make_tp);
		if (!d.login(portal)) {
			std::fprintf(stderr, "ulp-initiator: discovery login to %s: %s\n",
			             iscsi::initiator::portal_str(portal).c_str(),
			             d.error().c_str());
			return 1;
		}
		std::vector<iscsi::DiscoveryTarget> found;
		if (!d.send_targets("All", &found)) {
			std::fprintf(stderr, "ulp-initiator: SendTargets: %s\n",
			             d.last_error().c_str());
			return 1;
		}
		d.logout();
		if (discover) {
			for (const auto &t : found) {
				std::printf("%s\n", t.name.c_str());
				for (const auto &a : t.addresses)
					std::printf("  %s\n", a.c_str());
			}
			return 0;
		}
		if (found.empty()) {
			std::fprintf(stderr, "ulp-initiator: %s reports no target\n",
			             iscsi::initiator::portal_str(portal).c_str());
			return 1;
		}
		target = found.front().name;
	}

	ic.target_name = target;
	if (!more_paths.empty())
		return run_multipath(ic, make_tp, portal, more_paths, wc, target, report);
	iscsi::initiator::Session s(ic, make_tp);
	if (!s.login(portal)) {
		std::fprintf(stderr, "ulp-initiator: login to %s at %s: %s\n", target.c_str(),
		             iscsi::initiator::portal_str(portal).c_str(), s.error().c_str());
		return 1;
	}
	RunResult res;
	IscsiDisk disk(s);
	if (!run_workload(disk, wc, &res, &why)) {
		std::fprintf(stderr, "ulp-initiator: %s\n", why.c_str());
		s.logout();
		return s.state() == iscsi::initiator::SessionState::Failed ? 1 : 2;
	}
	bool logged_out = false;
	if (res.fatal.empty())
		logged_out = s.logout();

	std::string ij, it;
	if (iser) {
		char b[256];
		std::snprintf(b, sizeof(b),
		              "  \"iser\": {\"mapped\": %" PRIu64 ", \"bounced\": %" PRIu64
		              ", \"remote_inv\": %" PRIu64 ", \"local_inv\": %" PRIu64
		              ", \"backlogged\": %" PRIu64 "},\n",
		              xstats.mapped, xstats.bounced, xstats.remote_inv, xstats.local_inv,
		              xstats.backlogged);
		ij = b;
		std::snprintf(b, sizeof(b),
		              "iser: %" PRIu64 " buffers registered (%" PRIu64 " bounced), %" PRIu64
		              " invalidated by the target, %" PRIu64 " here\n",
		              xstats.mapped, xstats.bounced, xstats.remote_inv, xstats.local_inv);
		it = b;
	}
	return report(target, iscsi::initiator::portal_str(portal), res, logged_out, ij, it);
}
