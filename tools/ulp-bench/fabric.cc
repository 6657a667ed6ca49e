// SPDX-License-Identifier: MIT
// tools/ulp-bench/fabric.cc - `ulp-bench fabric`: RDMA WRITE / READ / SEND bandwidth and
// 64-byte message rate on the soft provider, in-process and cross-process, each beside a
// single-threaded memcpy of the same size measured in the same run. With --device NAME
// the same rows run on that verbs device (rxe0), both ends on it (perftest's loopback),
// connected through the verbs provider's CM, over a shorter size set.
//
// Measurement: Google Benchmark, benchmarks registered programmatically, results taken by
// a custom reporter. It expresses the cross-process case cleanly because everything that
// is not measured (spawning the peer, the CM handshake, registration) happens once, before
// RunSpecifiedBenchmarks; each benchmark only drives an already connected send queue. One
// iteration posts one work request; the queue is kept full (kDepth outstanding, every
// kSignal-th WR signaled) and the last iteration is signaled and waits for the queue to
// drain, so every WR counted completed inside the timed loop. Wall-clock time
// (UseRealTime): the work runs on the provider's engine threads, not the posting thread.
// With --qps N, fabric_multi.cc measures N connections at once instead.
#include "tools/ulp-bench/fabric.h"
#include "tools/common/named_device.h"
#include "tools/ulp-bench/fabric_conn.h"
#include "tools/ulp-bench/report.h"

#include "providers/soft/soft.h"

#include <arpa/inet.h>
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <vector>

namespace ulp::bench
{

using tools::NamedDevice;
using tools::open_named_device;

namespace
{

// Bandwidth runs: 32 WRs outstanding, every 16th signaled. Unsignaled WRs hold their SQ
// slots until a later signaled WR completes, so the depth must be a multiple of the signal
// interval: whenever the queue is full, its newest WR is a signaled one.
constexpr uint32_t kDepth = 32;
constexpr uint32_t kSignal = 16;
// Message-rate runs: a deeper queue, fewer completions, payload inline when the device
// allows it (what perftest's message-rate mode does).
constexpr uint32_t kRateDepth = 128;
constexpr uint32_t kRateSignal = 32;
constexpr uint32_t kRateSize = 64;
constexpr std::array<uint32_t, 9> kSizes = {64,        256,        1024,       4096,   16384,
                                            64 * 1024, 128 * 1024, 256 * 1024, kMaxMsg};
// A verbs device under emulation (rxe in a TCG VM) moves ~0.3 Gb/s: fewer sizes, those
// perftest is run with beside it (tools/vm/bench).
constexpr std::array<uint32_t, 5> kDeviceSizes = {4096, 16384, 64 * 1024, 256 * 1024, kMaxMsg};
constexpr std::array<uint32_t, 3> kDeviceQuickSizes = {4096, 64 * 1024, kMaxMsg};

void bm_fabric(benchmark::State &st, Stream *s, WrOpcode op, uint32_t size, uint32_t depth,
               uint32_t signal, bool inl)
{
	const uint64_t n = static_cast<uint64_t>(st.max_iterations);
	Sge sge;
	RdmaWr wr = s->make_wr(op, size, &sge);
	const uint32_t flags = inl ? uint32_t{SEND_INLINE} : 0u;
	uint64_t posted = 0;
	s->done = 0;
	for (auto _ : st) {
		if (posted - s->done >= depth)
			s->poll_until(posted - depth + 1);
		++posted;
		s->post(wr, posted, posted % signal == 0 || posted == n, flags);
		if (posted == n)
			s->poll_until(n);
	}
	st.SetBytesProcessed(static_cast<int64_t>(n * size));
	st.SetItemsProcessed(static_cast<int64_t>(n));
}

void bm_memcpy(benchmark::State &st, uint8_t *dst, const uint8_t *src, uint32_t size)
{
	for (auto _ : st) {
		benchmark::DoNotOptimize(dst);
		std::memcpy(dst, src, size);
		benchmark::ClobberMemory();
	}
	st.SetBytesProcessed(static_cast<int64_t>(st.iterations() * size));
}

// ---------------------------------------------------------------------------------------------
// Results

// One benchmark: a figure of the table, or a memcpy baseline.
struct Bench {
	std::string name; // the Google Benchmark name, "inproc/WRITE/131072"
	std::string wire; // "inproc", "xproc", "xpkt", "" for memcpy
	std::string op;   // "WRITE", "READ", "SEND", "WRITE rate", "SEND rate", "memcpy"
	uint32_t size = 0;
	bool rate = false; // a message rate (Mmsg/s), not a bandwidth
	Aim aim;           // printed beside the figure (not asserted)
};

std::string size_str(uint32_t s)
{
	if (s >= (1u << 20) && s % (1u << 20) == 0)
		return std::to_string(s >> 20) + "M";
	if (s >= 1024 && s % 1024 == 0)
		return std::to_string(s >> 10) + "K";
	return std::to_string(s);
}

std::string where(const FabricOptions &o)
{
	if (o.device.empty())
		return "soft provider";
	return "verbs device " + o.device + " (both ends on it, " + o.ip + ")";
}

} // namespace

int run_fabric(const FabricOptions &opts)
{
	set_bench("fabric");
	FabricOptions o = opts;
	const bool on_device = !o.device.empty();
	if (o.min_time <= 0)
		o.min_time = !o.quick ? 0.5 : on_device ? 0.1 : 0.05;
	const bool inproc = o.wire == "inproc" || o.wire == "both";
	const bool xproc = o.wire == "xproc" || o.wire == "both";
	// The soft provider's packet wire beside its ring wire, until it is removed.
	const bool xpkt = (o.wire == "xpkt" || o.wire == "both") && !on_device;
	double t0 = now_s();
	const double load = loadavg_1m();

	// --device: a device the verbs provider registered before main(); its CM ids come
	// from that provider, and both ends listen / connect on its RoCE address.
	NamedDevice nd;
	if (on_device) {
		std::string why;
		if (!open_named_device(o.device, &nd, &why))
			fatal("--device %s: %s", o.device.c_str(), why.c_str());
		if (o.ip.empty())
			o.ip = nd.ip;
		if (o.ip.empty())
			fatal("--device %s: no IPv4 address in its GID table; give --ip",
			      o.device.c_str());
	} else if (o.ip.empty()) {
		o.ip = "127.0.0.1";
	}

	// The peer first: fork before this process starts threads of its own (the verbs
	// provider's are there already; the child only execs).
	// One peer per cross-process wire: a responder serves one connection.
	Peer peer, peer_p;
	if (xproc)
		peer = spawn_peer(o.ip, o.device);
	if (xpkt)
		peer_p = spawn_peer(o.ip, o.device);

	Device *dev = nullptr, *dev_pkt = nullptr;
	Provider *prov = nullptr;
	std::string pkt_ip; // the packet-wire device's address: the next one
	if (on_device) {
		dev = nd.dev;
		prov = nd.provider;
	} else {
		soft::DeviceConfig cfg;
		cfg.ip = o.ip;
		// Across processes the ring wire even with ULP_SOFT_WIRE set: xpkt is the other.
		cfg.wire = soft::Wire::Shm;
		dev = soft::create_device(cfg);
		if (!dev)
			fatal("soft::create_device(ip %s): %s", o.ip.c_str(), std::strerror(errno));
		prov = &soft::provider();
		if (xpkt) {
			in_addr a{};
			if (inet_pton(AF_INET, o.ip.c_str(), &a) != 1)
				fatal("bad address %s", o.ip.c_str());
			a.s_addr = htonl(ntohl(a.s_addr) + 1);
			char buf[INET_ADDRSTRLEN];
			pkt_ip = inet_ntop(AF_INET, &a, buf, sizeof(buf));
			cfg.ip = pkt_ip;
			cfg.wire = soft::Wire::Socket;
			dev_pkt = soft::create_device(cfg);
			if (!dev_pkt)
				fatal("soft::create_device(ip %s): %s", pkt_ip.c_str(),
				      std::strerror(errno));
		}
	}

	// memcpy buffers: the same kind of memory the fabric moves.
	auto mc_src = dma_alloc(kMaxMsg);
	auto mc_dst = dma_alloc(kMaxMsg);
	if (!mc_src || !mc_dst)
		fatal("dma_alloc: %s", std::strerror(errno));
	std::memset(mc_src->addr(), 0x5a, kMaxMsg);

	Responder resp;
	Requester rq_in, rq_x, rq_p;
	Stream s_in, s_x, s_p;
	if (inproc) {
		resp.start(dev, prov, o.ip, false);
		rq_in.connect(dev, prov, o.ip, resp.port(), kRateDepth);
		s_in.init("inproc", &rq_in, &resp);
		s_in.verify();
	}
	if (xproc) {
		rq_x.connect(dev, prov, o.ip, peer.ports.at(0), kRateDepth);
		s_x.init("xproc", &rq_x, nullptr);
		s_x.verify();
	}
	if (xpkt) {
		rq_p.connect(dev_pkt, prov, o.ip, peer_p.ports.at(0), kRateDepth, pkt_ip);
		s_p.init("xpkt", &rq_p, nullptr);
		s_p.verify();
	}
	Requester &any = inproc ? rq_in : xproc ? rq_x : rq_p;
	const bool huge = any.huge();
	const bool inline_rate = any.max_inline() >= kRateSize;
	std::fprintf(stderr, "ulp-bench: connected (%s) in %.2f s; measuring, %.2f s per figure\n",
	             o.wire.c_str(), now_s() - t0, o.min_time);

	// Registration order is run order and table order: memcpy first, then per wire the
	// bandwidth sweeps and the message rates.
	std::vector<Bench> benches;
	std::vector<std::string> skipped; // rows the device cannot run, and why
	std::vector<uint32_t> sizes(kSizes.begin(), kSizes.end());
	if (on_device && o.quick)
		sizes.assign(kDeviceQuickSizes.begin(), kDeviceQuickSizes.end());
	else if (on_device)
		sizes.assign(kDeviceSizes.begin(), kDeviceSizes.end());
	// What the device cannot do: those rows are left out, with a note.
	const bool can_read = dev->attr().max_qp_init_rd_atom > 0 && dev->attr().max_qp_rd_atom > 0;
	if (!can_read)
		skipped.push_back("READ: the device accepts no outstanding RDMA READs "
		                  "(max_qp_rd_atom / max_qp_init_rd_atom 0)");
	auto *src = static_cast<const uint8_t *>(mc_src->addr());
	auto *dst = static_cast<uint8_t *>(mc_dst->addr());
	std::vector<uint32_t> mc_sizes = sizes; // and the message-rate size
	if (std::find(mc_sizes.begin(), mc_sizes.end(), kRateSize) == mc_sizes.end())
		mc_sizes.insert(mc_sizes.begin(), kRateSize);
	for (uint32_t size : mc_sizes) {
		Bench b;
		b.name = "memcpy/" + std::to_string(size);
		b.op = "memcpy";
		b.size = size;
		benches.push_back(b);
		benchmark::RegisterBenchmark(
		    b.name.c_str(), [=](benchmark::State &st) { bm_memcpy(st, dst, src, size); })
		    ->MinTime(o.min_time)
		    ->UseRealTime();
	}
	struct OpDesc {
		const char *name;
		WrOpcode op;
	};
	const OpDesc ops[] = {
	    {"WRITE", WrOpcode::RdmaWrite}, {"READ", WrOpcode::RdmaRead}, {"SEND", WrOpcode::Send}};
	for (Stream *s : {&s_in, &s_x, &s_p}) {
		if (!s->req)
			continue;
		const std::string wire = s->wire;
		for (const OpDesc &od : ops) {
			if (od.op == WrOpcode::RdmaRead && !can_read)
				continue;
			for (uint32_t size : sizes) {
				Bench b;
				b.name = wire + "/" + od.name + "/" + std::to_string(size);
				b.wire = wire;
				b.op = od.name;
				b.size = size;
				// The aims are the soft provider's (docs/architecture.md).
				if (!on_device &&
				    (od.op == WrOpcode::RdmaWrite ||
				     (od.op == WrOpcode::RdmaRead && wire == "xproc")) &&
				    size == 128 * 1024)
					b.aim = Aim{"min_ratio", true,
					            wire == "inproc"  ? 0.7
					            : wire == "xproc" ? 0.5
					                              : 0.35};
				benches.push_back(b);
				WrOpcode op = od.op;
				benchmark::RegisterBenchmark(
				    b.name.c_str(),
				    [=](benchmark::State &st) {
					    bm_fabric(st, s, op, size, kDepth, kSignal, false);
				    })
				    ->MinTime(o.min_time)
				    ->UseRealTime();
			}
		}
		uint32_t depth = std::min(kRateDepth, s->req->sq_depth());
		depth -= depth % kRateSignal;
		if (depth == 0) {
			skipped.push_back(wire + " WRITE/SEND rate: send queue of " +
			                  std::to_string(s->req->sq_depth()) +
			                  " is shorter than one signal interval (" +
			                  std::to_string(kRateSignal) + ")");
			continue;
		}
		for (const OpDesc &od : {ops[0], ops[2]}) {
			Bench b;
			b.name = wire + "/" + od.name + "-rate/" + std::to_string(kRateSize);
			b.wire = wire;
			b.op = std::string(od.name) + " rate";
			b.size = kRateSize;
			b.rate = true;
			if ((wire == "inproc" || wire == "xproc") && !on_device)
				b.aim = Aim{"min_mmsgs", true, 2.0, 1, " M/s"};
			benches.push_back(b);
			WrOpcode op = od.op;
			bool inl = s->req->max_inline() >= kRateSize;
			benchmark::RegisterBenchmark(b.name.c_str(),
			                             [=](benchmark::State &st) {
				                             bm_fabric(st, s, op, kRateSize, depth,
				                                       kRateSignal, inl);
			                             })
			    ->MinTime(o.min_time)
			    ->UseRealTime();
		}
	}

	benchmark_init();
	std::map<std::string, const Bench *> by_name;
	for (const Bench &b : benches)
		by_name[b.name] = &b;
	size_t reported = 0;
	const Runs runs = run_benchmarks([&](const std::string &name, const Measured &m) {
		auto it = by_name.find(name);
		if (it == by_name.end())
			return;
		const Bench &b = *it->second;
		reported++;
		if (b.rate)
			std::fprintf(stderr, "ulp-bench: [%zu/%zu] %-6s %-10s %5s  %8.3f Mmsg/s\n",
			             reported, benches.size(), b.wire.c_str(), b.op.c_str(),
			             size_str(b.size).c_str(), m.iterations / m.seconds / 1e6);
		else
			std::fprintf(stderr, "ulp-bench: [%zu/%zu] %-6s %-10s %5s  %8.3f GB/s\n",
			             reported, benches.size(), b.wire.c_str(), b.op.c_str(),
			             size_str(b.size).c_str(),
			             m.iterations * b.size / m.seconds / 1e9);
	});
	benchmark::Shutdown();

	Report rep("fabric");
	rep.title(fmt::format("{}, {} run, {:.2f} s per figure", where(o),
	                      o.quick ? "quick" : "full", o.min_time));
	rep.machine(load);
	rep.note(fmt::format("bandwidth: {} WRs outstanding, every {}th signaled; message rate: {} "
	                     "outstanding, every {}th signaled{}",
	                     kDepth, kSignal, kRateDepth, kRateSignal,
	                     inline_rate ? ", payload inline" : ""));
	rep.note(
	    fmt::format("buffers: dma_alloc (memfd{}), one registered region per side; memcpy: "
	                "single thread, same sizes, same run",
	                huge ? ", 2 MiB hugepages" : ", 4 KiB pages"));
	rep.note("ratio = fabric bytes/s / memcpy bytes/s");
	rep.note("wires: inproc (one process), xproc (peer process; soft: the ring wire), xpkt "
	         "(peer process, the soft packet wire)");
	rep.meta("provider", json_str(on_device ? "verbs" : "soft"));
	if (on_device)
		rep.meta("device", json_str(o.device));
	rep.meta("quick", json_bool(o.quick));
	rep.meta("min_time_s", json_num(o.min_time, 3));
	rep.meta("queue_depth", json_int(kDepth));
	rep.meta("signal_every", json_int(kSignal));
	rep.meta("rate_queue_depth", json_int(kRateDepth));
	rep.meta("rate_signal_every", json_int(kRateSignal));
	rep.meta("rate_inline", json_bool(inline_rate));
	rep.meta("hugepages", json_bool(huge));
	rep.columns({{"size", "size"},
	             {"op", "op", Align::Left},
	             {"", "kind"},
	             {"wire", "wire", Align::Left},
	             {"fabric", ""},
	             {"", "gbps"},
	             {"", "mmsgs"},
	             {"memcpy GB/s", "memcpy_gbps"},
	             {"ratio", "ratio"},
	             {"aim", "aim", Align::Left}});
	// The wires side by side: each op and size on consecutive rows.
	std::vector<const Bench *> order;
	for (const Bench &b : benches)
		if (b.op != "memcpy")
			order.push_back(&b);
	auto op_rank = [](const Bench *b) {
		static const char *ops[] = {"WRITE", "READ", "SEND", "WRITE rate", "SEND rate"};
		for (int i = 0; i < 5; i++)
			if (b->op == ops[i])
				return i;
		return 5;
	};
	std::stable_sort(order.begin(), order.end(), [&](const Bench *a, const Bench *b) {
		return std::pair(op_rank(a), a->size) < std::pair(op_rank(b), b->size);
	});
	for (const Bench *bp : order) {
		const Bench &b = *bp;
		const Measured &m = runs[b.name];
		const Measured &mc = runs["memcpy/" + std::to_string(b.size)];
		const double msgs_per_s = m.iterations / m.seconds;
		const double bytes_per_s = msgs_per_s * b.size;
		const double memcpy_bps = mc.iterations * b.size / mc.seconds;
		rep.row()
		    .cell(size_str(b.size), json_int(b.size))
		    .text(b.op)
		    .text(b.rate ? "rate" : "bandwidth")
		    .text(b.wire)
		    .cell(b.rate ? fmt::format("{:.3f} Mmsg/s", msgs_per_s / 1e6)
		                 : fmt::format("{:.3f} GB/s", bytes_per_s / 1e9),
		          "")
		    .num(bytes_per_s / 1e9, 3, 4)
		    .num(msgs_per_s / 1e6, 3, 4)
		    .num(memcpy_bps / 1e9, 3, 4)
		    .ratio(bytes_per_s, memcpy_bps, 3, 4)
		    .aim(b.aim, b.rate ? msgs_per_s / 1e6 : bytes_per_s / memcpy_bps);
	}
	for (const std::string &why : skipped)
		rep.skipped(why);
	rep.print(o.json);

	// Teardown, every step bounded.
	int rc = 0;
	if (inproc) {
		rq_in.disconnect();
		resp.stop();
	}
	if (xproc)
		rq_x.disconnect();
	if (xpkt)
		rq_p.disconnect();
	if (!on_device)
		soft::destroy_device(dev);
	if (dev_pkt)
		soft::destroy_device(dev_pkt);
	rc |= reap_peer(peer);
	rc |= reap_peer(peer_p);
	std::fprintf(stderr, "ulp-bench: done in %.1f s\n", now_s() - t0);
	return rc;
}

int run_fabric_peer(const PeerOptions &o)
{
	set_bench("fabric-peer");
	Device *dev = nullptr;
	Provider *prov = nullptr;
	if (!o.device.empty()) {
		NamedDevice nd;
		std::string why;
		if (!open_named_device(o.device, &nd, &why))
			fatal("--device %s: %s", o.device.c_str(), why.c_str());
		dev = nd.dev;
		prov = nd.provider;
	} else {
		soft::DeviceConfig cfg;
		cfg.ip = o.ip;
		cfg.engines = o.engines;
		dev = soft::create_device(cfg);
		if (!dev)
			fatal("soft::create_device(ip %s): %s", o.ip.c_str(), std::strerror(errno));
		prov = &soft::provider();
	}
	// One responder per connection the requester makes, responder i on vector i; each
	// serves on its own thread, as each connection of a target has its poller.
	const int n = std::max(1, o.qps);
	std::vector<std::unique_ptr<Responder>> resp;
	std::string line;
	for (int i = 0; i < n; i++) {
		resp.push_back(std::make_unique<Responder>());
		resp.back()->start(dev, prov, o.ip, true, i);
		line += (i ? " " : "") + std::to_string(resp.back()->port());
	}
	line += "\n";
	if (write(o.ready_fd, line.data(), line.size()) != static_cast<ssize_t>(line.size()))
		fatal("write to fd %d: %s", o.ready_fd, std::strerror(errno));
	close(o.ready_fd);
	std::vector<int> rcs(static_cast<size_t>(n));
	std::vector<std::thread> threads;
	for (int i = 1; i < n; i++)
		threads.emplace_back(
		    [&, i] { rcs[static_cast<size_t>(i)] = resp[i]->serve(o.max_seconds); });
	rcs[0] = resp[0]->serve(o.max_seconds);
	for (auto &t : threads)
		t.join();
	int rc = 0;
	for (int i = 0; i < n; i++) {
		rc |= rcs[static_cast<size_t>(i)];
		resp[static_cast<size_t>(i)]->stop();
	}
	resp.clear();
	if (o.device.empty())
		soft::destroy_device(dev);
	return rc;
}

} // namespace ulp::bench
