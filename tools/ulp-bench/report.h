// SPDX-License-Identifier: MIT
// tools/ulp-bench/report.h - what every `ulp-bench` subcommand shares: the one way a
// benchmark fails (fatal), running the registered Google Benchmarks and taking their
// results by name, and the report: header lines (what ran, on how many CPUs, under what
// load), one row per figure beside the baseline measured in the same run, the ratio and
// the aim, printed as a table or as JSON from the same rows.
//
//   Report rep("mrpool");
//   rep.title("MrPool get+put ...");
//   rep.machine(load);
//   rep.meta("quick", json_bool(o.quick));
//   rep.columns({{"what", "what", Align::Left}, {"ns/op", "ns_per_op"}, {"ratio", "ratio"}});
//   rep.row().text("mrpool").num(ns, 2, 3).ratio(ns, base, 2, 3);
//   rep.print(o.json);
//
// The JSON is {"bench": NAME, META..., "rows": [{KEY: VALUE, ...}, ...], "skipped": [...]};
// scripts read its keys (tools/vm/bench): a column's key is its name there.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace ulp::bench
{

// ---- Failing -------------------------------------------------------------------------------

// The subcommand named in fatal()'s lines ("ulp-bench rw: ...").
void set_bench(const char *name);
// fn runs in fatal() before the process ends (e.g. kills a peer process). One hook.
void at_fatal(void (*fn)());
// Print "ulp-bench BENCH: <message>" on stderr and end the process with status 1, without
// static destructors (engine and CM threads may still run).
[[noreturn]] void fatal(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

// ---- Measuring -----------------------------------------------------------------------------

// Google Benchmark's Initialize, with no command line of its own.
void benchmark_init();

// One benchmark's iteration run.
struct Measured {
	double iterations = 0; // iterations run
	double seconds = 0;    // wall-clock (or manual) time they took
};

// The results of one RunSpecifiedBenchmarks, by benchmark name.
class Runs
{
public:
	// The run of name; fatal() when it did not report.
	const Measured &operator[](const std::string &name) const;
	void add(const std::string &name, const Measured &m) { by_name_[name] = m; }
	size_t size() const { return by_name_.size(); }

private:
	std::map<std::string, Measured> by_name_;
};

// Run every registered benchmark; on_run (if set) sees each result as it comes (progress
// lines). fatal() on a benchmark's error or a run without iterations or time.
Runs run_benchmarks(const std::function<void(const std::string &, const Measured &)> &on_run = {});

// ---- Reporting -----------------------------------------------------------------------------

// The 1-minute load average when called (-1 if unknown): software RDMA and the poll
// contexts share the CPUs with everything else, so figures from a busy machine mean little.
double loadavg_1m();

// A JSON value, as text.
std::string json_str(const std::string &s); // quoted, escaped
std::string json_bool(bool b);              // true / false
std::string json_num(double v, int prec);   // fixed point, prec digits
inline std::string json_int(int64_t v)
{
	return std::to_string(v);
}

// An aim printed beside a figure; not asserted (figures depend on the machine).
struct Aim {
	// Its JSON key ("min_ratio", "max_ratio", "min_mmsgs"); null: no aim.
	const char *key = nullptr;
	bool at_least = true; // met when value >= bound (else value <= bound)
	double bound = 0;
	int prec = 2;           // digits of bound in the table
	const char *unit = "x"; // after bound in the table: "x", " M/s"
	bool met(double value) const { return at_least ? value >= bound : value <= bound; }
};

enum class Align : uint8_t { Right, Left };

// A column: its heading in the table and its key in the JSON rows; either may be empty (the
// column is only in the other form).
struct Column {
	std::string head;           // table heading
	std::string key;            // JSON key
	Align align = Align::Right; // numbers right, labels left
};

// One row: a cell per column, in column order.
class Row
{
public:
	struct Cell {
		std::string text; // in the table
		std::string json; // JSON value; "" = the key is left out of this row
	};
	Row &text(const std::string &s);                              // a label
	Row &text(const std::string &table, const std::string &json); // table text, JSON string
	Row &integer(int64_t v);
	Row &num(double v, int prec, int json_prec);
	// figure / baseline, "0.480x" (0 without a baseline).
	Row &ratio(double figure, double baseline, int prec, int json_prec);
	// ">= 0.70x: met" / {"min_ratio": 0.70, "met": true}; empty when aim has no key.
	Row &aim(const Aim &aim, double value);
	// Any other cell: its table text and its JSON value as they are.
	Row &cell(std::string text, std::string json);
	const std::vector<Cell> &cells() const { return cells_; }

private:
	std::vector<Cell> cells_;
};

class Report
{
public:
	explicit Report(std::string bench) : bench_(std::move(bench)) {}

	// Table only: the first line ("ulp-bench BENCH: " + s) and indented notes below it.
	void title(std::string s) { title_ = std::move(s); }
	void note(std::string s) { notes_.push_back(std::move(s)); }
	// The CPUs and the load at the start: a note, and "cpus" and "loadavg_1m" in the JSON.
	void machine(double load);
	// JSON only: a top-level key, before "rows", in call order (value: json_str, ...).
	void meta(std::string key, std::string value);

	void columns(std::vector<Column> cols) { cols_ = std::move(cols); }
	Row &row();
	// A row left out, and why: "  skipped: ..." under the table, "skipped" in the JSON.
	void skipped(std::string why) { skipped_.push_back(std::move(why)); }

	// The table or the JSON on stdout.
	void print(bool json) const;

private:
	void print_table() const;
	void print_json() const;

	std::string bench_;
	std::string title_;
	std::vector<std::string> notes_;
	std::vector<std::pair<std::string, std::string>> meta_;
	std::vector<Column> cols_;
	std::vector<Row> rows_;
	std::vector<std::string> skipped_;
};

} // namespace ulp::bench
