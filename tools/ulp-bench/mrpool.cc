// SPDX-License-Identifier: MIT
// tools/ulp-bench/mrpool.cc - `ulp-bench mrpool`: the cost of MrPool::get + put (the
// kernel's ib_mr_pool_get/put under qp->mr_lock) beside a baseline measured in the same
// run: an uncontended std::mutex lock/unlock around a std::vector pop_back/push_back of a
// pointer, i.e. the least a locked free list can cost. One iteration is one get and one
// put; ns/op is half of that.
#include "tools/ulp-bench/mrpool.h"

#include "mr_pool/mr_pool.h"
#include "providers/soft/soft.h"

#include <benchmark/benchmark.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

namespace ulp::bench
{

namespace
{

constexpr int kPoolMrs = 256; // MRs in the pool
constexpr int kHeld = 8;      // MRs held at once in the "depth" rows (rw contexts in flight)

[[noreturn]] void die(const char *what, int rc)
{
	std::fprintf(stderr, "ulp-bench mrpool: %s failed (%d)\n", what, rc);
	std::exit(1);
}

void bm_pool(benchmark::State &st, MrPool *pool, int held)
{
	std::vector<Mr *> out(held);
	for (auto _ : st) {
		for (int i = 0; i < held; i++) {
			out[i] = pool->get();
			if (!out[i])
				die("MrPool::get", -EAGAIN);
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

struct Row {
	std::string name; // benchmark name
	std::string what; // mrpool / baseline
	int held = 1;     // get/put pairs per iteration
	double ns_per_op = 0;
	bool have = false;
};

class Reporter : public benchmark::BenchmarkReporter
{
public:
	explicit Reporter(std::vector<Row> &rows) : rows_(rows) {}
	bool ReportContext(const Context &) override { return true; }
	void ReportRuns(const std::vector<Run> &runs) override
	{
		for (const Run &run : runs) {
			if (run.run_type != Run::RT_Iteration)
				continue;
			for (Row &r : rows_) {
				if (r.name != run.run_name.function_name)
					continue;
				if (run.error_occurred || run.iterations <= 0)
					die(r.name.c_str(), -EIO);
				// get + put per held MR per iteration.
				r.ns_per_op = run.real_accumulated_time * 1e9 /
				              (static_cast<double>(run.iterations) * 2 * r.held);
				r.have = true;
				std::fprintf(stderr, "ulp-bench mrpool: %-20s %8.2f ns/op\n",
				             r.name.c_str(), r.ns_per_op);
			}
		}
	}

private:
	std::vector<Row> &rows_;
};

} // namespace

int run_mrpool(const MrPoolOptions &o)
{
	const double min_time = o.min_time > 0 ? o.min_time : o.quick ? 0.03 : 0.3;
	soft::DeviceConfig c;
	c.ip = "127.0.0.21";
	Device *dev = soft::create_device(c);
	if (!dev)
		die("create_device", -errno);
	auto pd = dev->alloc_pd();
	auto pool = std::make_unique<MrPool>();
	if (int rc = pool->init(*pd, kPoolMrs, 256))
		die("MrPool::init", rc);

	std::vector<Row> rows;
	for (int held : {1, kHeld})
		for (const char *what : {"baseline", "mrpool"}) {
			Row r;
			r.what = what;
			r.held = held;
			r.name = std::string(what) + "/" + std::to_string(held);
			rows.push_back(r);
		}
	MrPool *p = pool.get();
	for (const Row &r : rows) {
		const int held = r.held;
		if (r.what == "mrpool")
			benchmark::RegisterBenchmark(r.name.c_str(), [=](benchmark::State &st) {
				bm_pool(st, p, held);
			})->MinTime(min_time);
		else
			benchmark::RegisterBenchmark(r.name.c_str(), [=](benchmark::State &st) {
				bm_baseline(st, held);
			})->MinTime(min_time);
	}
	int bargc = 1;
	char arg0[] = "ulp-bench";
	char *bargv[] = {arg0, nullptr};
	benchmark::Initialize(&bargc, bargv);
	Reporter rep(rows);
	benchmark::RunSpecifiedBenchmarks(&rep);
	benchmark::Shutdown();

	auto base_of = [&](const Row &r) {
		for (const Row &x : rows)
			if (x.what == "baseline" && x.held == r.held && x.have)
				return x.ns_per_op;
		return 0.0;
	};
	if (o.json) {
		std::printf("{\n  \"bench\": \"mrpool\",\n  \"pool_mrs\": %d,\n  \"quick\": %s,\n"
		            "  \"rows\": [",
		            kPoolMrs, o.quick ? "true" : "false");
		const char *sep = "";
		for (const Row &r : rows) {
			double b = base_of(r);
			std::printf("%s\n    {\"what\": \"%s\", \"held\": %d, \"ns_per_op\": %.3f, "
			            "\"ratio_to_baseline\": %.3f}",
			            sep, r.what.c_str(), r.held, r.ns_per_op,
			            b > 0 ? r.ns_per_op / b : 0);
			sep = ",";
		}
		std::printf("\n  ]\n}\n");
	} else {
		std::printf(
		    "ulp-bench mrpool: MrPool get+put (%d fast-reg MRs on a soft device), one "
		    "thread, %.2f s per figure\n",
		    kPoolMrs, min_time);
		std::printf(
		    "  baseline = uncontended std::mutex + std::vector pop/push of a pointer; "
		    "ns/op = per get or put; held = MRs taken before they are put back\n\n");
		std::printf("%-9s %5s %10s %8s\n", "what", "held", "ns/op", "ratio");
		for (const Row &r : rows) {
			double b = base_of(r);
			std::printf("%-9s %5d %10.2f %7.2fx\n", r.what.c_str(), r.held, r.ns_per_op,
			            b > 0 ? r.ns_per_op / b : 0);
		}
	}
	pool.reset();
	pd.reset();
	soft::destroy_device(dev);
	return 0;
}

} // namespace ulp::bench
