// SPDX-License-Identifier: MIT
// fuzz/fuzz_prometheus.cc - libFuzzer target: admin/prometheus.cc turning a daemon's
// stats_get answer (what ulpctl reads from the socket) into Prometheus text, against any
// JSON: fields missing, of other types, nested oddly, huge numbers, strings to escape.
//
// Input: bytes parsed as JSON (not JSON: skipped). Invariants: no crash; every line of the
// output is a comment or `name{labels} value` with no raw newline inside a label value.
//
// Seeds: ULP_FUZZ_SEEDS=<dir> writes a well-formed answer there and exits (scripts/fuzz.sh).
#include "admin/prometheus.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

namespace
{

const char kSeed[] = R"({"io":[{"target":"iqn.t","fabric":"iscsi","io":{"commands":
{"read":3,"write":2,"other":1},"tmfs":1,"bytes_read":12288,"bytes_written":8192,"errors":
{"check_condition":1,"aborted":0},"latency":{"count":6,"sum_ns":60000,"buckets":
[0,0,0,2,4,0]}},"luns":[{"lun":0,"io":{"commands":{"read":3}}}],"sessions":[{"id":"iscsi:1",
"initiator":"iqn.i\"x\n","transport":"tcp","io":{},"connections":[{"peer":"1.2.3.4:5",
"cmdsn_window":128,"commands":0,"pdus_in":9,"pdus_out":9,"req_lim":-1,"credits":4}]}]}],
"latency_bounds_us":[1,2,4,8,16],"rdma_portals":[{"transport":"srp","address":"a:1","qps":1,
"cq_entries":200,"mrs_used":0,"mrs":32,"heap_bytes_used":0,"heap_bytes":1048576,
"accepted":1,"rejected":0}],"iscsi":{"logins":1,"sessions_open":1},"targets":1})";

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const nlohmann::json j = nlohmann::json::parse(data, data + size, nullptr, false);
	if (j.is_discarded())
		return 0;
	// With the per-session series (the larger text), and the query parser on the raw bytes.
	const std::string out = ulp::admin::prometheus_text(j, {.sessions = true});
	ulp::admin::PromOptions o;
	std::string why;
	(void)ulp::admin::parse_prometheus_query(
	    std::string_view(reinterpret_cast<const char *>(data), size), &o, &why);
	(void)ulp::admin::prometheus_unnamed(j);
	size_t start = 0;
	while (start < out.size()) {
		const size_t nl = out.find('\n', start);
		if (nl == std::string::npos)
			__builtin_trap(); // every line ends with a newline
		const std::string line = out.substr(start, nl - start);
		if (line.empty() || (line[0] != '#' && line.find(' ') == std::string::npos))
			__builtin_trap();
		start = nl + 1;
	}
	return 0;
}

extern "C" int LLVMFuzzerInitialize(int *, char ***)
{
	if (const char *dir = std::getenv("ULP_FUZZ_SEEDS")) {
		std::ofstream(std::string(dir) + "/stats.json") << kSeed;
		std::exit(0);
	}
	return 0;
}
