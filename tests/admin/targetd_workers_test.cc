// SPDX-License-Identifier: MIT
// tests/admin/targetd_workers_test.cc - ulp-targetd's TCP workers, end to end (issue 19): a
// connection goes to the least loaded worker and stays there, which `ulpctl session list`
// shows; --worker-cpus binds each worker thread to its CPU (read back from /proc); a
// cpulist that is malformed or names a CPU the machine lacks stops the start with a clear
// error. Many sessions from several threads at once on two workers keep their data apart.
#include "tests/admin/targetd_env.h"

#include <gtest/gtest.h>

#include <dirent.h>
#include <sched.h>
#include <unistd.h>

#include <fstream>
#include <map>
#include <memory>
#include <thread>

namespace ulp::iscsi::initiator
{
namespace
{

using namespace std::chrono_literals;
using admin::json;
using clock = std::chrono::steady_clock;

constexpr char kIqn[] = "iqn.2026-11.org.ulp:workers";

using test_env::local;
using test_env::ulpctl_json;

InitiatorConfig config()
{
	return test_env::initiator_config("iqn.2026-11.org.ulp:workers-test", kIqn);
}

struct Daemon : test_env::AdminDaemon {
	::testing::AssertionResult start(std::vector<std::string> args)
	{
		args.insert(args.end(), {"--target", kIqn, "--lun", "0:ram:size=16M"});
		return AdminDaemon::start(args);
	}
	// tsih -> worker, for the normal sessions logged in.
	std::map<uint16_t, int> workers()
	{
		std::map<uint16_t, int> m;
		for (const json &s : ulpctl_json(sock, {"session", "list"}))
			if (s["type"] == "normal" && s.contains("worker"))
				m[uint16_t(std::stoi(s["id"].get<std::string>().substr(6)))] =
				    s["worker"].get<int>();
		return m;
	}
	// Waits until the daemon counts n connections open.
	bool conns_open(uint64_t n)
	{
		const auto deadline = clock::now() + 10s;
		while (clock::now() < deadline) {
			if (ulpctl_json(sock, {"stats"})["iscsi"]["connections_open"] == n)
				return true;
			std::this_thread::sleep_for(20ms);
		}
		return false;
	}
};

// A verified write and read on LUN 0, past the POWER ON unit attention.
bool write_read(Session &s, uint64_t lba, uint8_t seed)
{
	for (int i = 0; i < 4 && !s.run({0, cdb_test_unit_ready(), DataDir::None, {}}).good();
	     i++) {
	}
	return test_env::write_read(s, 0, lba, seed);
}

std::unique_ptr<Session> login(Daemon &d)
{
	auto s = std::make_unique<Session>(config());
	EXPECT_TRUE(s->login(local(d.t.port()))) << s->error();
	return s;
}

TEST(TargetdWorkers, ConnectionsGoToTheLeastLoadedWorkerAndStay)
{
	Daemon d;
	ASSERT_TRUE(d.start({"--workers", "2"}));
	std::vector<std::unique_ptr<Session>> s;
	for (int i = 0; i < 4; i++)
		s.push_back(login(d));
	ASSERT_TRUE(d.conns_open(4));
	std::map<uint16_t, int> w = d.workers();
	ASSERT_EQ(w.size(), 4u);
	int on0 = 0;
	for (auto &[tsih, k] : w)
		on0 += k == 0;
	EXPECT_EQ(on0, 2) << "four connections on two workers: two each";
	{
		std::string o;
		ASSERT_EQ(test_env::ulpctl(d.sock, {"session", "list"}, &o), 0) << o;
		EXPECT_NE(o.find("WORKER"), std::string::npos) << o;
	}

	// Both sessions of worker 0 go: the next two logins find worker 0 the least loaded
	// (dealing in turn would put one on each).
	std::vector<std::unique_ptr<Session>> kept;
	for (auto &p : s) {
		if (w.at(p->params().tsih) == 0)
			EXPECT_TRUE(p->logout(5s)) << p->error();
		else
			kept.push_back(std::move(p));
	}
	ASSERT_TRUE(d.conns_open(2));
	for (int i = 0; i < 2; i++)
		kept.push_back(login(d));
	ASSERT_TRUE(d.conns_open(4));
	std::map<uint16_t, int> after = d.workers();
	for (auto &p : kept) {
		const uint16_t tsih = p->params().tsih;
		ASSERT_TRUE(after.count(tsih));
		if (w.count(tsih))
			EXPECT_EQ(after[tsih], w[tsih]) << "a connection stays on its worker";
		else
			EXPECT_EQ(after[tsih], 0) << "a new connection goes to the emptier worker";
		EXPECT_TRUE(write_read(*p, 8 * tsih, uint8_t(tsih))) << p->error();
	}
	for (auto &p : kept)
		EXPECT_TRUE(p->logout(5s)) << p->error();
	EXPECT_EQ(d.t.stop(), 0) << d.t.log();
}

// CPUs allowed to each "ulp-tcp/N" thread of pid, as /proc prints them.
std::map<std::string, std::string> worker_affinity(pid_t pid)
{
	std::map<std::string, std::string> m;
	const std::string task = "/proc/" + std::to_string(pid) + "/task";
	DIR *dir = opendir(task.c_str());
	if (!dir)
		return m;
	while (dirent *e = readdir(dir)) {
		if (e->d_name[0] == '.')
			continue;
		std::string comm;
		std::getline(std::ifstream(task + "/" + e->d_name + "/comm"), comm);
		if (comm.rfind("ulp-tcp/", 0) != 0)
			continue;
		std::ifstream st(task + "/" + e->d_name + "/status");
		for (std::string line; std::getline(st, line);)
			if (line.rfind("Cpus_allowed_list:", 0) == 0)
				m[comm] = line.substr(line.find_first_not_of(" \t", 18));
	}
	closedir(dir);
	return m;
}

TEST(TargetdWorkers, WorkerCpusBindEachWorker)
{
	// Two CPUs this test may run on (one, on a machine that allows one), the second
	// first: the workers take them in turn.
	cpu_set_t set;
	ASSERT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
	std::vector<int> cpus;
	for (int c = 0; c < CPU_SETSIZE && cpus.size() < 2; c++)
		if (CPU_ISSET(c, &set))
			cpus.push_back(c);
	ASSERT_FALSE(cpus.empty());
	const std::string a0 = std::to_string(cpus.back()), a1 = std::to_string(cpus.front());
	const std::string list = cpus.size() > 1 ? a0 + "," + a1 : a0;
	Daemon d;
	ASSERT_TRUE(d.start({"--workers", "3", "--worker-cpus", list}));
	const std::map<std::string, std::string> a = worker_affinity(d.t.pid());
	ASSERT_EQ(a.size(), 3u) << d.t.log();
	EXPECT_EQ(a.at("ulp-tcp/0"), a0);
	EXPECT_EQ(a.at("ulp-tcp/1"), a1);
	EXPECT_EQ(a.at("ulp-tcp/2"), a0);
	EXPECT_EQ(ulpctl_json(d.sock, {"show"})["worker_cpus"], list);
	auto s = login(d);
	EXPECT_TRUE(write_read(*s, 0, 7)) << s->error();
	EXPECT_TRUE(s->logout(5s));
	EXPECT_EQ(d.t.stop(), 0) << d.t.log();
}

TEST(TargetdWorkers, BadCpuListsStopTheStart)
{
	for (auto [list, says] : std::vector<std::pair<std::string, std::string>>{
	         {"x", "\"x\" is not a CPU number or a range N-M"},
	         {"0-", "\"0-\" is not a CPU number or a range N-M"},
	         {"0,,1", "\"\" is not a CPU number or a range N-M"},
	         {"3-1", "the range 3-1 runs backwards"},
	         {"4096", "CPU 4096 does not exist"}}) {
		std::string out, err;
		const int rc = test::run_program(
		    ULP_TARGETD_PATH, {"--check", "--worker-cpus", list, "--lun", "0:ram:size=1M"},
		    &out, &err, 20s);
		EXPECT_EQ(rc, 2) << list << ": " << err;
		EXPECT_NE(err.find("worker_cpus \"" + list + "\": " + says), std::string::npos)
		    << list << ": " << err;
	}
}

TEST(TargetdWorkers, ManySessionsOnTwoWorkersKeepTheirDataApart)
{
	// The per-worker task set, LUN table and RAM backstore shards (issue 19) under
	// sessions on both workers writing and reading the one LU at once.
	Daemon d;
	ASSERT_TRUE(d.start({"--workers", "2"}));
	constexpr int kSessions = 6, kRounds = 40;
	std::vector<std::thread> th;
	std::atomic<int> bad{0};
	for (int i = 0; i < kSessions; i++)
		th.emplace_back([&, i] {
			Session s(config());
			if (!s.login(local(d.t.port()))) {
				bad++;
				return;
			}
			for (int r = 0; r < kRounds; r++)
				if (!write_read(s, uint64_t(i) * 64 + (r % 8) * 8,
				                uint8_t(i * 16 + r)))
					bad++;
			if (!s.logout(5s))
				bad++;
		});
	for (auto &t : th)
		t.join();
	EXPECT_EQ(bad.load(), 0) << d.t.log();
	EXPECT_EQ(d.t.stop(), 0) << d.t.log();
}

} // namespace
} // namespace ulp::iscsi::initiator
