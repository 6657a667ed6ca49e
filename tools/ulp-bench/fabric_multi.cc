// SPDX-License-Identifier: MIT
// tools/ulp-bench/fabric_multi.cc - `ulp-bench fabric --qps N`: N connections at once,
// connection i with its CQs on completion vector i and driven by a thread of its own, as a
// target runs one connection per poller. On the soft provider the vector picks the engine
// that executes the QP (a multi-queue NIC's queue), so this measures how the provider
// scales across its engines: each figure on a device with E engines beside the same run on
// a device with one, and their ratio.
//
// Measurement: every connection's thread keeps its send queue full (as `fabric` does: a
// deep queue, every k-th WR signaled) until a deadline common to all, stopping at a signaled
// WR and waiting for it, so that every WR counted has completed; the figure is the WRs of
// all threads over the time from the common start to the last thread's end. The process's
// CPU time over the same interval gives the cores it used: engines, posting threads and
// (in-process) responders together. Wires: inproc (responders in this process, the soft
// in-process wire) and xproc (responders in a peer process with the same engine count, the
// ring wire).
#include "tools/ulp-bench/fabric.h"
#include "tools/ulp-bench/fabric_conn.h"
#include "tools/ulp-bench/report.h"

#include "providers/soft/soft.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace ulp::bench
{

namespace
{

struct Op {
	const char *name; // table "op"
	WrOpcode op;
	uint32_t size;
	uint32_t depth;  // WRs outstanding per connection
	uint32_t signal; // every signal-th WR signaled
	bool rate;       // a message rate (else a bandwidth)
};

const Op kOps[] = {
    {"WRITE rate", WrOpcode::RdmaWrite, 64, 128, 32, true},
    {"SEND rate", WrOpcode::Send, 64, 128, 32, true},
    {"WRITE", WrOpcode::RdmaWrite, 64 * 1024, 32, 16, false},
};

double cpu_s()
{
	rusage ru{};
	getrusage(RUSAGE_SELF, &ru);
	return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
	       static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

// N connections on one device (and, for xproc, a peer process), ready to measure.
struct Set {
	std::string wire;     // "inproc" or "xproc"
	uint32_t engines = 0; // the requester device's engine count, as it reports it
	Device *dev = nullptr;
	Peer peer; // xproc
	std::vector<std::unique_ptr<Responder>> resp;
	std::vector<std::unique_ptr<Requester>> req;
	std::vector<std::unique_ptr<Stream>> streams;

	void connect(const std::string &ip, const std::string &src_ip, int qps)
	{
		Provider *prov = &soft::provider();
		for (int i = 0; i < qps; i++) {
			auto r = std::make_unique<Requester>();
			auto s = std::make_unique<Stream>();
			if (wire == "inproc") {
				resp.push_back(std::make_unique<Responder>());
				resp.back()->start(dev, prov, ip, false, i);
				r->connect(dev, prov, ip, resp.back()->port(), 128, "", i);
				s->init("inproc", r.get(), resp.back().get());
			} else {
				r->connect(dev, prov, ip, peer.ports.at(static_cast<size_t>(i)),
				           128, src_ip, i);
				s->init("xproc", r.get(), nullptr);
			}
			s->verify();
			req.push_back(std::move(r));
			streams.push_back(std::move(s));
		}
	}

	int close()
	{
		for (auto &r : req)
			r->disconnect();
		for (auto &r : resp)
			r->stop();
		streams.clear();
		req.clear();
		resp.clear();
		if (dev)
			soft::destroy_device(dev);
		dev = nullptr;
		return reap_peer(peer);
	}
};

struct Figure {
	double wrs = 0;     // WRs completed, all connections
	double seconds = 0; // common start to the last connection's end
	double cores = 0;   // process CPU time / seconds
};

// Every connection's thread drives its queue until the deadline; see the file comment.
Figure measure(Set &set, const Op &op, double seconds)
{
	const size_t n = set.streams.size();
	std::vector<uint64_t> posted(n, 0);
	std::vector<double> ended(n, 0);
	std::atomic<size_t> ready{0};
	std::atomic<bool> go{false};
	double t0 = 0, deadline = 0;
	auto drive = [&](size_t i) {
		Stream &s = *set.streams[i];
		Sge sge;
		RdmaWr wr = s.make_wr(op.op, op.size, &sge);
		const uint32_t depth = std::min(op.depth, s.req->sq_depth()) -
		                       std::min(op.depth, s.req->sq_depth()) % op.signal;
		const bool inl = op.rate && s.req->max_inline() >= op.size;
		const uint32_t flags = inl ? uint32_t{SEND_INLINE} : 0u;
		ready.fetch_add(1);
		while (!go.load(std::memory_order_acquire))
			std::this_thread::yield();
		uint64_t p = 0;
		s.done = 0;
		for (;;) {
			if (p - s.done >= depth)
				s.poll_until(p - depth + 1);
			++p;
			const bool sig = p % op.signal == 0;
			s.post(wr, p, sig, flags);
			if (sig && now_s() >= deadline)
				break;
		}
		s.poll_until(p);
		posted[i] = p;
		ended[i] = now_s();
	};
	std::vector<std::thread> threads;
	for (size_t i = 0; i < n; i++)
		threads.emplace_back(drive, i);
	while (ready.load() < n)
		std::this_thread::yield();
	const double c0 = cpu_s();
	t0 = now_s();
	deadline = t0 + seconds;
	go.store(true, std::memory_order_release);
	for (auto &t : threads)
		t.join();
	Figure f;
	f.seconds = *std::max_element(ended.begin(), ended.end()) - t0;
	f.cores = (cpu_s() - c0) / f.seconds;
	for (uint64_t p : posted)
		f.wrs += static_cast<double>(p);
	return f;
}

std::string next_ip(const std::string &ip, uint32_t k)
{
	in_addr a{};
	if (inet_pton(AF_INET, ip.c_str(), &a) != 1)
		fatal("bad address %s", ip.c_str());
	a.s_addr = htonl(ntohl(a.s_addr) + k);
	char buf[INET_ADDRSTRLEN];
	return inet_ntop(AF_INET, &a, buf, sizeof(buf));
}

} // namespace

int run_fabric_multi(const FabricOptions &opts)
{
	set_bench("fabric");
	FabricOptions o = opts;
	if (!o.device.empty())
		fatal("--qps measures the soft provider's engines; not with --device");
	if (o.wire == "xpkt")
		fatal("--qps: --wire inproc, xproc or both");
	if (o.min_time <= 0)
		o.min_time = o.quick ? 0.2 : 1.0;
	if (o.ip.empty())
		o.ip = "127.0.0.1";
	const bool inproc = o.wire == "inproc" || o.wire == "both";
	const bool xproc = o.wire == "xproc" || o.wire == "both";
	const double t_start = now_s();
	const double load = loadavg_1m();

	constexpr int kReps = 5; // rounds per figure (1 with --quick)
	// The engine counts: one, and the one asked for (or the device's default).
	uint32_t many = o.engines;
	if (!many) {
		soft::DeviceConfig probe;
		probe.ip = next_ip(o.ip, 1);
		Device *d = soft::create_device(probe);
		if (!d)
			fatal("soft::create_device(ip %s): %s", probe.ip.c_str(),
			      std::strerror(errno));
		many = soft::engine_count(*d);
		soft::destroy_device(d);
	}
	std::vector<uint32_t> counts = {1};
	if (many != 1)
		counts.push_back(many);

	// Peers first, before this process has threads of its own (one per engine count: a
	// peer's device has that many engines too).
	std::vector<Set> sets;
	for (uint32_t e : counts) {
		if (inproc) {
			Set s;
			s.wire = "inproc";
			s.engines = e;
			sets.push_back(std::move(s));
		}
		if (xproc) {
			Set s;
			s.wire = "xproc";
			s.engines = e;
			s.peer = spawn_peer(
			    o.ip, "",
			    {"--qps", std::to_string(o.qps), "--engines", std::to_string(e)});
			if (s.peer.ports.size() != static_cast<size_t>(o.qps))
				fatal("peer reported %zu ports, want %d", s.peer.ports.size(),
				      o.qps);
			sets.push_back(std::move(s));
		}
	}
	// Every set connected at once, each on a device of its own address (o.ip + 1, + 2,
	// ...): the inproc ones listen there (responders in this process), the xproc ones
	// connect from there to their peer, which listens on o.ip. Then per operation the sets take
	// turns, kReps rounds, so that a machine whose load drifts (others' work on a shared
	// machine) weighs on each engine count alike; each figure is the median of its rounds.
	uint32_t k = 0;
	for (Set &s : sets) {
		soft::DeviceConfig cfg;
		cfg.ip = next_ip(o.ip, ++k);
		cfg.engines = s.engines;
		cfg.wire = s.wire == "inproc" ? soft::Wire::Auto : soft::Wire::Shm;
		s.dev = soft::create_device(cfg);
		if (!s.dev)
			fatal("soft::create_device(ip %s): %s", cfg.ip.c_str(),
			      std::strerror(errno));
		s.engines = soft::engine_count(*s.dev);
		s.connect(s.wire == "inproc" ? cfg.ip : o.ip, cfg.ip, o.qps);
	}
	const int reps = o.quick ? 1 : kReps;
	struct Row {
		const Op *op;
		const Set *set;
		std::vector<Figure> f; // one per round
		const Figure &median() const { return f[f.size() / 2]; }
	};
	std::vector<Row> rows;
	for (const Op &op : kOps) {
		const size_t first = rows.size();
		for (const Set &s : sets)
			rows.push_back(Row{&op, &s, {}});
		for (int r = 0; r < reps; r++) {
			for (size_t i = 0; i < sets.size(); i++) {
				Set &s = sets[i];
				Figure f = measure(s, op, o.min_time);
				std::fprintf(
				    stderr,
				    "ulp-bench: [%d/%d] %-6s %-10s %5u B  %u engine(s) %d QPs: "
				    "%8.3f %s, %.2f cores\n",
				    r + 1, reps, s.wire.c_str(), op.name, op.size, s.engines, o.qps,
				    op.rate ? f.wrs / f.seconds / 1e6
				            : f.wrs * op.size / f.seconds / 1e9,
				    op.rate ? "Mmsg/s" : "GB/s", f.cores);
				rows[first + i].f.push_back(f);
			}
		}
		for (size_t i = first; i < rows.size(); i++)
			std::sort(rows[i].f.begin(), rows[i].f.end(),
			          [](const Figure &a, const Figure &b) {
				          return a.wrs / a.seconds < b.wrs / b.seconds;
			          });
	}
	for (Set &s : sets)
		if (s.close())
			fatal("%s peer with %u engines did not exit cleanly", s.wire.c_str(),
			      s.engines);

	Report rep("fabric");
	rep.title(fmt::format("soft provider, {} QPs at once (QP i on completion vector i, a "
	                      "thread each), {} engine(s) beside 1, {:.2f} s per figure",
	                      o.qps, counts.back(), o.min_time));
	rep.machine(load);
	rep.note("per connection: rate rows 128 WRs outstanding, every 32nd signaled, payload "
	         "inline; bandwidth rows 32 outstanding, every 16th signaled");
	rep.note("cores: the process's CPU time over the interval (engines, posting threads "
	         "and in-process responders; not the xproc peer's)");
	rep.note(fmt::format("each figure: the median of {} rounds, the engine counts taking "
	                     "turns; rounds: the slowest and fastest round / the median",
	                     reps));
	rep.note("ratio = the figure with N engines / the same with 1 engine, same run");
	rep.meta("qps", json_int(o.qps));
	rep.meta("engines", json_int(counts.back()));
	rep.meta("quick", json_bool(o.quick));
	rep.meta("min_time_s", json_num(o.min_time, 3));
	rep.columns({{"op", "op", Align::Left},
	             {"size", "size"},
	             {"wire", "wire", Align::Left},
	             {"engines", "engines"},
	             {"fabric", ""},
	             {"", "mmsgs"},
	             {"", "gbps"},
	             {"rounds", "spread"},
	             {"cores", "cores"},
	             {"vs 1 engine", "ratio"}});
	auto rate = [](const Figure &f) { return f.wrs / f.seconds; };
	for (const Row &r : rows) {
		const double msgs = rate(r.median());
		const double bytes = msgs * r.op->size;
		double base = 0;
		for (const Row &b : rows)
			if (b.op == r.op && b.set->wire == r.set->wire && b.set->engines == 1)
				base = rate(b.median());
		const double lo = rate(r.f.front()) / msgs, hi = rate(r.f.back()) / msgs;
		rep.row()
		    .text(r.op->name)
		    .cell(std::to_string(r.op->size), json_int(r.op->size))
		    .text(r.set->wire)
		    .integer(r.set->engines)
		    .cell(r.op->rate ? fmt::format("{:.3f} Mmsg/s", msgs / 1e6)
		                     : fmt::format("{:.3f} GB/s", bytes / 1e9),
		          "")
		    .num(msgs / 1e6, 3, 4)
		    .num(bytes / 1e9, 3, 4)
		    .cell(fmt::format("{:.2f}-{:.2f}", lo, hi),
		          fmt::format("[{:.3f}, {:.3f}]", lo, hi))
		    .num(r.median().cores, 2, 3)
		    .ratio(msgs, base, 2, 3);
	}
	rep.print(o.json);
	std::fprintf(stderr, "ulp-bench: done in %.1f s\n", now_s() - t_start);
	return 0;
}

} // namespace ulp::bench
