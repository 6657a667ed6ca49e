// SPDX-License-Identifier: MIT
#include "tools/ulp-bench/report.h"

#include <benchmark/benchmark.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <thread>

namespace ulp::bench
{

namespace
{

std::atomic<const char *> g_bench{nullptr};
std::atomic<void (*)()> g_at_fatal{nullptr};

} // namespace

void set_bench(const char *name)
{
	g_bench.store(name);
}

void at_fatal(void (*fn)())
{
	g_at_fatal.store(fn);
}

void fatal(const char *fmt, ...)
{
	std::fflush(stdout);
	char buf[512];
	va_list ap;
	va_start(ap, fmt);
	std::vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	const char *bench = g_bench.load();
	std::fprintf(stderr, "ulp-bench%s%s: %s\n", bench ? " " : "", bench ? bench : "", buf);
	std::fflush(stderr);
	if (auto fn = g_at_fatal.exchange(nullptr))
		fn();
	_exit(1);
}

// ---- Measuring -------------------------------------------------------------------------------

void benchmark_init()
{
	int argc = 1;
	char arg0[] = "ulp-bench";
	char *argv[] = {arg0, nullptr};
	benchmark::Initialize(&argc, argv);
}

const Measured &Runs::operator[](const std::string &name) const
{
	auto it = by_name_.find(name);
	if (it == by_name_.end())
		fatal("%s: not reported", name.c_str());
	return it->second;
}

Runs run_benchmarks(const std::function<void(const std::string &, const Measured &)> &on_run)
{
	// Takes each iteration run as it finishes; prints nothing of Google Benchmark's own.
	class Taker : public benchmark::BenchmarkReporter
	{
	public:
		Taker(Runs &runs,
		      const std::function<void(const std::string &, const Measured &)> &f)
		    : runs_(runs), on_run_(f)
		{
		}
		bool ReportContext(const Context &) override { return true; }
		void ReportRuns(const std::vector<Run> &runs) override
		{
			for (const Run &run : runs) {
				if (run.run_type != Run::RT_Iteration)
					continue;
				const std::string &name = run.run_name.function_name;
				if (run.error_occurred)
					fatal("%s: %s", name.c_str(), run.error_message.c_str());
				if (run.iterations <= 0 || run.real_accumulated_time <= 0)
					fatal("%s: no time measured", name.c_str());
				Measured m{static_cast<double>(run.iterations),
				           run.real_accumulated_time};
				runs_.add(name, m);
				if (on_run_)
					on_run_(name, m);
			}
		}

	private:
		Runs &runs_;
		const std::function<void(const std::string &, const Measured &)> &on_run_;
	};
	Runs runs;
	Taker taker(runs, on_run);
	benchmark::RunSpecifiedBenchmarks(&taker);
	return runs;
}

// ---- Reporting -------------------------------------------------------------------------------

double loadavg_1m()
{
	double l = -1;
	if (FILE *f = std::fopen("/proc/loadavg", "r")) {
		if (std::fscanf(f, "%lf", &l) != 1)
			l = -1;
		std::fclose(f);
	}
	return l;
}

std::string json_str(const std::string &s)
{
	std::string out = "\"";
	for (char c : s) {
		if (c == '"' || c == '\\')
			out += {'\\', c};
		else if (static_cast<unsigned char>(c) < 0x20)
			out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
		else
			out += c;
	}
	return out + "\"";
}

std::string json_bool(bool b)
{
	return b ? "true" : "false";
}

std::string json_num(double v, int prec)
{
	return fmt::format("{:.{}f}", v, prec);
}

Row &Row::cell(std::string text, std::string json)
{
	cells_.push_back({std::move(text), std::move(json)});
	return *this;
}

Row &Row::text(const std::string &s)
{
	return cell(s, json_str(s));
}

Row &Row::text(const std::string &table, const std::string &json)
{
	return cell(table, json_str(json));
}

Row &Row::integer(int64_t v)
{
	return cell(std::to_string(v), json_int(v));
}

Row &Row::num(double v, int prec, int json_prec)
{
	return cell(fmt::format("{:.{}f}", v, prec), json_num(v, json_prec));
}

Row &Row::ratio(double figure, double baseline, int prec, int json_prec)
{
	const double r = baseline > 0 ? figure / baseline : 0;
	return cell(fmt::format("{:.{}f}x", r, prec), json_num(r, json_prec));
}

Row &Row::aim(const Aim &a, double value)
{
	if (!a.key)
		return cell("", "");
	const bool met = a.met(value);
	return cell(fmt::format("{} {:.{}f}{}: {}", a.at_least ? ">=" : "<=", a.bound, a.prec,
	                        a.unit, met ? "met" : "MISSED"),
	            fmt::format("{{\"{}\": {:.2f}, \"met\": {}}}", a.key, a.bound, json_bool(met)));
}

void Report::machine(double load)
{
	const unsigned cpus = std::thread::hardware_concurrency();
	note(fmt::format("{} CPUs, load average {:.2f} at the start{}", cpus, load,
	                 load > cpus / 2.0 ? " (busy: the figures understate the code)" : ""));
	meta("cpus", json_int(cpus));
	meta("loadavg_1m", json_num(load, 2));
}

void Report::meta(std::string key, std::string value)
{
	meta_.emplace_back(std::move(key), std::move(value));
}

Row &Report::row()
{
	rows_.emplace_back();
	return rows_.back();
}

void Report::print(bool json) const
{
	if (json)
		print_json();
	else
		print_table();
	std::fflush(stdout);
}

void Report::print_table() const
{
	std::printf("ulp-bench %s: %s\n", bench_.c_str(), title_.c_str());
	for (const std::string &n : notes_)
		std::printf("  %s\n", n.c_str());
	std::printf("\n");
	// Each column as wide as its widest cell; columns without a heading are JSON only.
	std::vector<size_t> width(cols_.size());
	for (size_t c = 0; c < cols_.size(); c++) {
		width[c] = cols_[c].head.size();
		for (const Row &r : rows_)
			if (c < r.cells().size())
				width[c] = std::max(width[c], r.cells()[c].text.size());
	}
	auto line = [&](auto text_of) {
		std::string out;
		for (size_t c = 0; c < cols_.size(); c++) {
			if (cols_[c].head.empty())
				continue;
			const std::string t = text_of(c);
			const std::string pad(width[c] - std::min(width[c], t.size()), ' ');
			if (!out.empty())
				out += "  ";
			out += cols_[c].align == Align::Left ? t + pad : pad + t;
		}
		while (!out.empty() && out.back() == ' ')
			out.pop_back();
		std::printf("%s\n", out.c_str());
	};
	line([&](size_t c) { return cols_[c].head; });
	for (const Row &r : rows_)
		line([&](size_t c) {
			return c < r.cells().size() ? r.cells()[c].text : std::string();
		});
	for (const std::string &s : skipped_)
		std::printf("  skipped: %s\n", s.c_str());
}

void Report::print_json() const
{
	std::printf("{\n  \"bench\": %s,\n", json_str(bench_).c_str());
	for (const auto &[k, v] : meta_)
		std::printf("  %s: %s,\n", json_str(k).c_str(), v.c_str());
	std::printf("  \"rows\": [");
	const char *sep = "";
	for (const Row &r : rows_) {
		std::string obj;
		for (size_t c = 0; c < cols_.size() && c < r.cells().size(); c++) {
			if (cols_[c].key.empty() || r.cells()[c].json.empty())
				continue;
			obj += (obj.empty() ? "" : ", ") + json_str(cols_[c].key) + ": " +
			       r.cells()[c].json;
		}
		std::printf("%s\n    {%s}", sep, obj.c_str());
		sep = ",";
	}
	std::printf("\n  ],\n  \"skipped\": [");
	for (size_t i = 0; i < skipped_.size(); i++)
		std::printf("%s%s", i ? ", " : "", json_str(skipped_[i]).c_str());
	std::printf("]\n}\n");
}

} // namespace ulp::bench
