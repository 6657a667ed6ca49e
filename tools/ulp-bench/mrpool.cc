// SPDX-License-Identifier: MIT
// tools/ulp-bench/mrpool.cc - `ulp-bench mrpool`: the cost of MrPool::get + put (the
// kernel's ib_mr_pool_get/put under qp->mr_lock) beside a baseline measured in the same
// run: an uncontended std::mutex lock/unlock around a std::vector pop_back/push_back of a
// pointer, i.e. the least a locked free list can cost. One iteration is one get and one
// put; ns/op is half of that.
#include "tools/ulp-bench/mrpool.h"
#include "tools/ulp-bench/report.h"

#include "mr_pool/mr_pool.h"
#include "providers/soft/soft.h"

#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

namespace ulp::bench
{

namespace
{

constexpr int kPoolMrs = 256; // MRs in the pool
constexpr int kHeld = 8;      // MRs held at once in the "depth" rows (rw contexts in flight)

void bm_pool(benchmark::State &st, MrPool *pool, int held)
{
	std::vector<Mr *> out(held);
	for (auto _ : st) {
		for (int i = 0; i < held; i++) {
			out[i] = pool->get();
			if (!out[i])
				fatal("MrPool::get: the pool is empty");
		}
		for (int i = 0; i < held; i++)
			pool->put(out[i]);
		benchmark::DoNotOptimize(out.data());
	}
}

void bm_baseline(benchmark::State &st, int held)
{
	std::mutex mu;
	std::vector<void *> fl(kPoolMrs);
	for (int i = 0; i < kPoolMrs; i++)
		fl[i] = &fl[i];
	std::vector<void *> out(held);
	for (auto _ : st) {
		for (int i = 0; i < held; i++) {
			std::lock_guard g(mu);
			out[i] = fl.back();
			fl.pop_back();
		}
		for (int i = 0; i < held; i++) {
			std::lock_guard g(mu);
			fl.push_back(out[i]);
		}
		benchmark::DoNotOptimize(out.data());
	}
}

} // namespace

int run_mrpool(const MrPoolOptions &o)
{
	set_bench("mrpool");
	const double load = loadavg_1m();
	const double min_time = o.min_time > 0 ? o.min_time : o.quick ? 0.03 : 0.3;
	soft::DeviceConfig c;
	c.ip = "127.0.0.21";
	Device *dev = soft::create_device(c);
	if (!dev)
		fatal("create_device: %s", std::strerror(errno));
	auto pd = dev->alloc_pd();
	auto pool = std::make_unique<MrPool>();
	if (int rc = pool->init(*pd, kPoolMrs, 256))
		fatal("MrPool::init: %s", std::strerror(-rc));

	// Each held count: the baseline, then the pool, in the same run.
	struct Bench {
		std::string name; // "mrpool/8"
		bool pool;        // MrPool, or the baseline
		int held;         // get/put pairs per iteration
	};
	std::vector<Bench> benches;
	for (int held : {1, kHeld})
		for (bool is_pool : {false, true})
			benches.push_back({std::string(is_pool ? "mrpool" : "baseline") + "/" +
			                       std::to_string(held),
			                   is_pool, held});
	MrPool *p = pool.get();
	for (const Bench &b : benches) {
		const int held = b.held;
		if (b.pool)
			benchmark::RegisterBenchmark(b.name.c_str(), [=](benchmark::State &st) {
				bm_pool(st, p, held);
			})->MinTime(min_time);
		else
			benchmark::RegisterBenchmark(b.name.c_str(), [=](benchmark::State &st) {
				bm_baseline(st, held);
			})->MinTime(min_time);
	}
	benchmark_init();
	// ns per get or per put: each iteration is a get and a put per held MR.
	auto ns_per_op = [&](const Bench &b, const Measured &m) {
		return m.seconds * 1e9 / (m.iterations * 2 * b.held);
	};
	const Runs runs = run_benchmarks([&](const std::string &name, const Measured &m) {
		for (const Bench &b : benches)
			if (b.name == name)
				std::fprintf(stderr, "ulp-bench mrpool: %-20s %8.2f ns/op\n",
				             name.c_str(), ns_per_op(b, m));
	});
	benchmark::Shutdown();

	Report rep("mrpool");
	rep.title(fmt::format("MrPool get+put ({} fast-reg MRs on a soft device), one thread, "
	                      "{:.2f} s per figure",
	                      kPoolMrs, min_time));
	rep.note("baseline = uncontended std::mutex + std::vector pop/push of a pointer; ns/op = "
	         "per get or put; held = MRs taken before they are put back");
	rep.machine(load);
	rep.meta("pool_mrs", json_int(kPoolMrs));
	rep.meta("quick", json_bool(o.quick));
	rep.columns({{"what", "what", Align::Left},
	             {"held", "held"},
	             {"ns/op", "ns_per_op"},
	             {"ratio", "ratio_to_baseline"}});
	for (const Bench &b : benches) {
		const double ns = ns_per_op(b, runs[b.name]);
		const std::string base = "baseline/" + std::to_string(b.held);
		const double base_ns = ns_per_op(b, runs[base]);
		rep.row()
		    .text(b.pool ? "mrpool" : "baseline")
		    .integer(b.held)
		    .num(ns, 2, 3)
		    .ratio(ns, base_ns, 2, 3);
	}
	rep.print(o.json);
	pool.reset();
	pd.reset();
	soft::destroy_device(dev);
	return 0;
}

} // namespace ulp::bench
