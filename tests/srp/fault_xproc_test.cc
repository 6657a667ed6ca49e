// SPDX-License-Identifier: MIT
// tests/srp/fault_xproc_test.cc - the SRP target and initiator in two processes, with the
// verified I/O of fault_env.h (the faults in one process: fault_test.cc).
//
// Two processes: ulp-targetd serves SRP on its own soft device and this process logs in
// across the socket wire with several channels, in every descriptor format; then the
// target is killed with SIGKILL under I/O (every command ends), and an ulp-initiator
// process is killed under I/O (the target frees its channels and serves a new login).
#include "tests/iscsi/target_process.h"
#include "tests/srp/fault_env.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cinttypes>
#include <cstring>
#include <thread>

namespace ulp::srpt
{
namespace
{

using namespace fault_test;

std::string hex(uint64_t v)
{
	char b[24];
	std::snprintf(b, sizeof(b), "%" PRIx64, v);
	return b;
}

// ulp-targetd with an SRP portal on its own soft device (127.0.0.1), a 64 MiB RAM LUN.
bool start_targetd(test::TargetdProcess *td)
{
	std::vector<std::string> args = {"--srp-portal", "127.0.0.1:0",    "--srp-id-ext",
	                                 hex(kIdExt),    "--srp-ioc-guid", hex(kIocGuid),
	                                 "--lun",        "0:ram:size=64M"};
	std::string why;
	if (!td->start(args, &why)) {
		ADD_FAILURE() << why;
		return false;
	}
	if (td->srp_port() == 0) {
		ADD_FAILURE() << "no SRP port on --ready-fd\n" << td->log();
		return false;
	}
	return true;
}

// SIGHUP makes ulp-targetd log its SRP counters; the value of `key` in the next such line,
// or -1 when none came within a second.
long long targetd_stat(test::TargetdProcess &td, const std::string &key)
{
	auto count = [&] {
		const std::string l = td.log();
		size_t n = 0;
		for (size_t p = l.find("SRP stats:"); p != std::string::npos;
		     p = l.find("SRP stats:", p + 1))
			n++;
		return n;
	};
	const size_t before = count();
	::kill(td.pid(), SIGHUP);
	const auto end = clock::now() + 1s;
	while (count() == before && clock::now() < end)
		std::this_thread::sleep_for(10ms);
	const std::string l = td.log();
	const size_t at = l.rfind("SRP stats:");
	if (count() == before || at == std::string::npos)
		return -1;
	const std::string line = l.substr(at, l.find('\n', at) - at);
	const size_t k = line.find(" " + key + " ");
	if (k == std::string::npos)
		return -1;
	return std::atoll(line.c_str() + k + key.size() + 2);
}

// Bounded: ulp-targetd reports channels_open == n.
bool targetd_channels(test::TargetdProcess &td, long long n, std::chrono::milliseconds limit)
{
	const auto end = clock::now() + limit;
	do {
		if (targetd_stat(td, "channels_open") == n &&
		    (n > 0 || targetd_stat(td, "nexuses_open") == 0))
			return true;
		std::this_thread::sleep_for(50ms);
	} while (clock::now() < end);
	return false;
}

SockAddr targetd_addr(const test::TargetdProcess &td)
{
	return *SockAddr::parse("127.0.0.1:" + std::to_string(td.srp_port()));
}

// Four commands at once on consecutive ranges from lba, one per buffer: each goes to the
// channel with the most credits left, so on three channels every channel carries one.
// Waited for (bounded). False, with *why, unless all four came back GOOD.
bool four_at_once(Initiator &ini, bool write, uint32_t lba, std::span<std::span<uint8_t>> bufs,
                  std::string *why)
{
	std::array<std::array<uint8_t, 10>, 4> cdbs;
	std::array<Result, 4> res;
	uint32_t sent = 0, done = 0;
	const auto end = clock::now() + 10s;
	for (uint32_t k = 0; k < 4; k++) {
		const uint32_t blocks = uint32_t(bufs[k].size() / kBlock);
		cdbs[k] = cdb_rw10(write, lba + k * blocks, uint16_t(blocks));
		const Request req{0, cdbs[k], write ? DataDir::Write : DataDir::Read, bufs[k]};
		int rc;
		// -EBUSY: no MR free on the channel now (a fourth megabyte on one).
		while ((rc = ini.submit(req,
		                        [&, k](const Result &x) {
			                        res[k] = x;
			                        done++;
		                        })) == -EBUSY &&
		       clock::now() < end)
			ini.poll(10ms);
		if (rc != 0) {
			*why = "submit " + std::to_string(k) + ": " + std::strerror(-rc);
			break;
		}
		sent++;
		for (uint32_t ch = 0; k == 2 && ch < 3; ch++)
			if (ini.channel_info(ch).in_flight == 0)
				*why = "channel " + std::to_string(ch) + " carried nothing";
	}
	while (done < sent && clock::now() < end)
		ini.poll(100ms);
	if (done < sent) {
		*why = "commands still in flight after 10 s";
		ini.close(*why); // their callbacks run now, while res is still here
	}
	for (uint32_t k = 0; k < sent; k++)
		if (!res[k].good())
			*why = std::string(write ? "write " : "read ") + std::to_string(k) + ": " +
			       outcome_name(res[k].outcome) + " status " +
			       std::to_string(res[k].status);
	return why->empty() && sent == 4;
}

// Every descriptor format, several channels, across processes (the socket wire): written
// and read back byte for byte, registered and bounced, at sizes around each format's edges;
// the target's own counters show the immediate data and the fetched tables.
TEST(SrpProcess, EveryDescriptorFormatAcrossProcesses)
{
	test::TargetdProcess td;
	ASSERT_TRUE(start_targetd(&td));
	InitSide in;
	ASSERT_TRUE(in.start());
	uint32_t lba = 0, gen = 1;
	for (Desc d : {Desc::Direct, Desc::Indirect, Desc::External, Desc::Immediate}) {
		SCOPED_TRACE(desc_name(d));
		ASSERT_TRUE(in.login(targetd_addr(td), in.cfg(3, d)));
		ASSERT_EQ(in.ini->channels(), 3u) << in.ini->error();
		const std::vector<size_t> sizes =
		    d == Desc::Immediate ? std::vector<size_t>{512, 4096, 8192}
		                         : std::vector<size_t>{512, 8192 + 512, 65536, 1u << 20};
		const InitiatorStats s0 = in.ini->stats();
		uint64_t expect = 0;
		for (bool bounced : {false, true}) {
			for (size_t len : sizes) {
				SCOPED_TRACE(std::to_string(len) +
				             (bounced ? " bounced" : " registered"));
				// Four writes at once, then four reads: spread over the channels.
				std::vector<std::vector<uint8_t>> heap(8,
				                                       std::vector<uint8_t>(len));
				std::array<std::span<uint8_t>, 8> b;
				for (size_t k = 0; k < 8; k++)
					b[k] = bounced ? std::span<uint8_t>(heap[k])
					               : in.buf(k * len, len);
				for (size_t k = 0; k < 4; k++) {
					fill(b[k], lba + k * (len / kBlock), gen);
					std::memset(b[4 + k].data(), 0xee, len);
				}
				std::string why;
				ASSERT_TRUE(four_at_once(*in.ini, true, lba, {b.data(), 4}, &why))
				    << why << "\n"
				    << td.log();
				ASSERT_TRUE(
				    four_at_once(*in.ini, false, lba, {b.data() + 4, 4}, &why))
				    << why << "\n"
				    << td.log();
				for (size_t k = 0; k < 4; k++)
					ASSERT_EQ(std::memcmp(b[k].data(), b[4 + k].data(), len), 0)
					    << "read back differs, command " << k;
				expect += d == Desc::Immediate ? 4 : 8;
				lba += 4 * uint32_t(len / kBlock);
				gen++;
			}
		}
		EXPECT_EQ(in.ini->stats().*desc_counter(d) - s0.*desc_counter(d), expect);
		if (d == Desc::External) {
			EXPECT_GE(targetd_stat(td, "ext_tables"), (long long)expect);
		}
		if (d == Desc::Immediate) {
			EXPECT_GE(targetd_stat(td, "immediate"), (long long)expect);
		}
		in.ini->logout();
		EXPECT_FALSE(in.ini->failed()) << in.ini->error();
		in.ini.reset();
		EXPECT_TRUE(targetd_channels(td, 0, 5s)) << td.log();
	}
	EXPECT_EQ(targetd_stat(td, "credit_overruns"), 0);
	EXPECT_EQ(targetd_stat(td, "bad_ius"), 0);
	in.stop();
	EXPECT_EQ(td.stop(), 0) << td.log();
}

// ulp-targetd killed with SIGKILL under I/O on three channels: every command ends, within a
// bound, nothing answered GOOD that was not done.
TEST(SrpProcess, TargetKilledMidIo)
{
	test::TargetdProcess td;
	ASSERT_TRUE(start_targetd(&td));
	Io io(128, 65536);
	InitSide in;
	ASSERT_TRUE(in.start());
	ASSERT_TRUE(in.login(targetd_addr(td), in.cfg(3, Desc::Indirect)));
	RunOpts pre;
	pre.prefill = true;
	RunResult r = io.run(in, pre);
	ASSERT_EQ(r.good_writes, io.units()) << r.str();
	RunOpts o;
	o.total = 1000000;
	o.trigger_at = 500;
	o.trigger = [&] { td.kill(); };
	r = io.run(in, o);
	SCOPED_TRACE(r.str());
	EXPECT_FALSE(r.hung);
	EXPECT_LT(r.took, 15s);
	EXPECT_EQ(r.ended, r.issued);
	EXPECT_GE(r.good_writes + r.good_reads, 500u);
	EXPECT_EQ(r.wrong, 0u);
	EXPECT_EQ(r.bad, 0u);
	EXPECT_EQ(r.timeouts, 0u) << "the initiator waited for its own timeout";
	EXPECT_TRUE(in.ini->failed());
	EXPECT_EQ(in.ini->channels(), 0u);
	EXPECT_EQ(in.ini->in_flight(), 0u);
}

// An ulp-initiator process with four channels killed under I/O: ulp-targetd frees every
// channel and the nexus, and serves a new login whose data is verified.
TEST(SrpProcess, InitiatorKilledTargetCarriesOn)
{
	test::TargetdProcess td;
	ASSERT_TRUE(start_targetd(&td));
	// Everything the child needs is made before the fork: it only execs.
	const std::string portal = "127.0.0.1:" + std::to_string(td.srp_port());
	const std::string id_ext = hex(kIdExt), ioc_guid = hex(kIocGuid);
	const pid_t pid = ::fork();
	ASSERT_GE(pid, 0);
	if (pid == 0) {
		::execl(ULP_INITIATOR_PATH, ULP_INITIATOR_PATH, "--transport", "srp", "--portal",
		        portal.c_str(), "--srp-id-ext", id_ext.c_str(), "--srp-ioc-guid",
		        ioc_guid.c_str(), "--srp-channels", "4", "--workload", "randwrite", "--qd",
		        "32", "--runtime", "30", "--quiet", static_cast<char *>(nullptr));
		::_exit(127);
	}
	// Logged in with every channel, and busy: killed with commands in flight.
	const bool up = targetd_channels(td, 4, 10s);
	long long cmds = 0;
	for (const auto end = clock::now() + 10s; up && cmds < 2000 && clock::now() < end;) {
		std::this_thread::sleep_for(20ms);
		cmds = targetd_stat(td, "cmds");
	}
	::kill(pid, SIGKILL);
	int st = 0;
	::waitpid(pid, &st, 0);
	ASSERT_TRUE(up) << td.log();
	EXPECT_GE(cmds, 2000) << "the initiator was not sending\n" << td.log();
	// The target notices, frees the channels and the nexus, and carries on.
	EXPECT_TRUE(targetd_channels(td, 0, 10s)) << td.log();
	Io io(32, 65536);
	InitSide in;
	ASSERT_TRUE(in.start());
	ASSERT_TRUE(in.login(targetd_addr(td), in.cfg(2, Desc::Indirect)));
	RunOpts pre;
	pre.prefill = true;
	RunResult r = io.run(in, pre);
	ASSERT_EQ(r.good_writes, io.units()) << r.str();
	RunOpts o;
	o.total = 300;
	r = io.run(in, o);
	EXPECT_EQ(r.good_writes + r.good_reads, 300u) << r.str();
	std::string problems;
	EXPECT_EQ(io.verify_all(in, &problems), 0u) << problems;
	in.ini->logout();
	EXPECT_TRUE(targetd_channels(td, 0, 5s)) << td.log();
	in.stop();
	EXPECT_EQ(td.stop(), 0) << td.log();
}

} // namespace
} // namespace ulp::srpt
