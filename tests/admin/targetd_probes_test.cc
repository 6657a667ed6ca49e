// SPDX-License-Identifier: MIT
// tests/admin/targetd_probes_test.cc - the built ulp-targetd carries every trace point of
// core/trace.h, as perf and bpftrace find them: its .note.stapsdt notes read with readelf,
// each probe of provider ulp there at least once and with its semaphore (else
// ULP_TRACE_ENABLED could never become true). A probe site removed, a probe renamed, or a
// probe added to the header without being listed here fails. Skipped only in a build
// without <sys/sdt.h>, where the probes compile to nothing.
#include "core/trace.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <set>
#include <string>

namespace
{

#ifdef ULP_TRACE_ON
// What the notes say about one probe.
struct Sites {
	int n = 0;                 // probe sites (one per inlined copy)
	bool all_semaphore = true; // every site names a semaphore
	std::string sizes;         // the first site's argument sizes, "8 8 4 -4" (- signed)
	std::string other_sizes;   // a later site's, when they differ
	std::string immediate;     // the arguments of a site that passes a constant ($n)
};

// The probes readelf -n lists for provider ulp, by name; *err on failure.
std::map<std::string, Sites> ulp_probes(const std::string &path, std::string *err)
{
	std::map<std::string, Sites> probes;
	// Appended piece by piece: a chain of operator+ here made gcc 12 (-O1, with the tests'
	// precompiled header) warn -Warray-bounds about the memcpy it inlined, a false alarm.
	std::string cmd = ULP_READELF;
	cmd += " -n --wide '";
	cmd += path;
	cmd += "' 2>&1";
	FILE *f = popen(cmd.c_str(), "r");
	if (!f) {
		*err = "popen failed";
		return probes;
	}
	// A note is "Provider: p", "Name: n", "Location: ..., Base: ..., Semaphore: 0x...",
	// "Arguments: 8@%rbx -4@%eax ..." (size@operand each).
	std::string provider, name, line;
	char buf[512];
	while (fgets(buf, sizeof(buf), f)) {
		line = buf;
		auto value = [&](const char *key) -> std::string {
			const size_t at = line.find(key);
			if (at == std::string::npos)
				return {};
			std::string v = line.substr(at + std::string(key).size());
			while (!v.empty() && (v.back() == '\n' || v.back() == ' '))
				v.pop_back();
			return v;
		};
		if (std::string v = value("Provider: "); !v.empty()) {
			provider = v;
		} else if (std::string v = value("Name: "); !v.empty()) {
			name = v;
		} else if (std::string v = value("Semaphore: "); !v.empty() && provider == "ulp") {
			Sites &s = probes[name];
			s.n++;
			if (std::stoull(v, nullptr, 16) == 0)
				s.all_semaphore = false;
		} else if (std::string v = value("Arguments: "); !v.empty() && provider == "ulp") {
			Sites &s = probes[name];
			std::string sizes;
			size_t at = 0;
			while (at < v.size()) {
				size_t end = v.find(' ', at);
				if (end == std::string::npos)
					end = v.size();
				const std::string arg = v.substr(at, end - at);
				const size_t sep = arg.find('@');
				if (!arg.empty()) {
					if (!sizes.empty())
						sizes += ' ';
					sizes += arg.substr(0, sep);
					if (sep != std::string::npos &&
					    arg.compare(sep + 1, 1, "$") == 0)
						s.immediate = v;
				}
				at = end + 1;
			}
			if (s.sizes.empty())
				s.sizes = sizes;
			else if (sizes != s.sizes)
				s.other_sizes = sizes;
		}
	}
	if (int rc = pclose(f); rc != 0)
		*err = cmd + " exited " + std::to_string(rc);
	return probes;
}
#endif

TEST(TargetdProbes, EveryProbeIsInTheDaemon)
{
#ifndef ULP_TRACE_ON
	GTEST_SKIP() << "built without <sys/sdt.h> (systemtap-sdt-dev): no probes to find";
#else
	// Written out rather than taken from the header's list, so that a probe dropped from
	// both the list and its sites still fails here.
	const std::set<std::string> expected = {
	    "state_change", "cq_pass",   "scsi_cmd_start", "scsi_cmd_done",
	    "iscsi_cmd",    "iscsi_rsp", "srp_cmd",        "srp_rsp",
	};
	std::set<std::string> listed;
#define ULP_TRACE_LISTED(n) listed.insert(#n);
	ULP_TRACE_PROBES(ULP_TRACE_LISTED)
#undef ULP_TRACE_LISTED
	EXPECT_EQ(listed, expected) << "core/trace.h's ULP_TRACE_PROBES and this test differ";

	std::string err;
	const auto probes = ulp_probes(ULP_TARGETD_PATH, &err);
	ASSERT_TRUE(err.empty()) << err;
	for (const std::string &name : expected) {
		auto it = probes.find(name);
		if (it == probes.end()) {
			ADD_FAILURE() << "ulp:" << name << " is not in " << ULP_TARGETD_PATH;
			continue;
		}
		EXPECT_TRUE(it->second.all_semaphore) << "ulp:" << name << " without a semaphore";
	}
	for (const auto &[name, sites] : probes)
		EXPECT_TRUE(expected.count(name)) << "ulp:" << name << " is not in the list";
	// Every checked state machine fires state_change: at least one site for each of the
	// daemon's nine (SCSI command; iSCSI command, connection and login; CHAP target and
	// initiator; SRP channel and ioctx; threaded CQ), which clang's ASan build at -O1
	// has, change_state not inlined; gcc at -O2 inlines it into 21.
	auto sc = probes.find("state_change");
	if (sc != probes.end()) {
		EXPECT_GE(sc->second.n, 9);
	}
#endif
}

// perf makes one uprobe event per probe, every site of it under that event, and the kernel
// takes a site into an event only with the same argument types as the others. So every
// site of a probe passes the same sizes, and none a constant: perf leaves an immediate
// ($40) out of the event's arguments, and that site's list then differs (core/trace.h
// keeps every argument in a register for this).
TEST(TargetdProbes, EverySiteOfAProbeFitsOnePerfEvent)
{
#ifndef ULP_TRACE_ON
	GTEST_SKIP() << "built without <sys/sdt.h> (systemtap-sdt-dev): no probes to find";
#else
	std::string err;
	const auto probes = ulp_probes(ULP_TARGETD_PATH, &err);
	ASSERT_TRUE(err.empty()) << err;
	ASSERT_FALSE(probes.empty());
	for (const auto &[name, sites] : probes) {
		EXPECT_FALSE(sites.sizes.empty()) << "ulp:" << name << ": no arguments read";
		EXPECT_TRUE(sites.other_sizes.empty())
		    << "ulp:" << name << ": argument sizes differ between sites: " << sites.sizes
		    << " and " << sites.other_sizes;
		EXPECT_TRUE(sites.immediate.empty())
		    << "ulp:" << name << ": a site passes a constant: " << sites.immediate;
	}
#endif
}

} // namespace
