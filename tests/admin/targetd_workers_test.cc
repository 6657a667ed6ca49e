// SPDX-License-Identifier: MIT
// tests/admin/targetd_workers_test.cc - ulp-targetd's TCP workers, end to end: a
// connection goes to the least loaded worker and stays there, which `ulpctl session list`
// shows; --worker-cpus binds each worker thread to its CPU (read back from /proc); a
// cpulist that is malformed or names a CPU the machine lacks stops the start with a clear
// error. Many sessions from several threads at once on two workers keep their data apart.
// A file LUN under sessions on both workers: its I/O is reaped on the workers (each has a
// ring of its own), not on the backstore's completion thread; the LUN deleted, and the
// daemon stopped, while both workers have its I/O in flight.
#include "tests/admin/targetd_env.h"

#include <gtest/gtest.h>

#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include <atomic>
#include <deque>
#include <fstream>
#include <functional>
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
using test_env::ulpctl;
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
	// The per-worker task set, LUN table and RAM backstore shards (core/shard_lock.h) under
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

// ---- A file LUN on two workers ---------------------------------------------------------------

// Voluntary context switches of pid's threads named comm, summed (each is a wait that ended:
// for the backstore's completion thread, one per wake-up by a completion).
uint64_t thread_switches(pid_t pid, const std::string &comm)
{
	uint64_t n = 0;
	const std::string task = "/proc/" + std::to_string(pid) + "/task";
	DIR *dir = opendir(task.c_str());
	if (!dir)
		return 0;
	while (dirent *e = readdir(dir)) {
		if (e->d_name[0] == '.')
			continue;
		std::string c;
		std::getline(std::ifstream(task + "/" + e->d_name + "/comm"), c);
		if (c != comm)
			continue;
		std::ifstream st(task + "/" + e->d_name + "/status");
		for (std::string line; std::getline(st, line);)
			if (line.rfind("voluntary_ctxt_switches:", 0) == 0)
				n += std::stoull(line.substr(24));
	}
	closedir(dir);
	return n;
}

// A verified write and read on lun, past its unit attentions.
bool write_read_lun(Session &s, uint64_t lun, uint64_t lba, uint8_t seed)
{
	for (int i = 0; i < 4 && !s.run({lun, cdb_test_unit_ready(), DataDir::None, {}}).good();
	     i++) {
	}
	return test_env::write_read(s, lun, lba, seed);
}

struct FileLunDaemon : Daemon {
	std::string img;
	::testing::AssertionResult start()
	{
		img = dir / "lun1.img";
		return Daemon::start(
		    {"--workers", "2", "--lun", "1:file:path=" + img + ",size=16M"});
	}
	// Logs in n sessions, which the acceptor spreads over both workers.
	std::vector<std::unique_ptr<Session>> logins(int n)
	{
		std::vector<std::unique_ptr<Session>> v;
		for (int i = 0; i < n; i++)
			v.push_back(login(*this));
		EXPECT_TRUE(conns_open(uint64_t(n)));
		std::map<int, int> per;
		for (auto &[tsih, w] : workers())
			per[w]++;
		EXPECT_EQ(per[0], n / 2) << "sessions on both workers";
		EXPECT_EQ(per[1], n - n / 2) << "sessions on both workers";
		return v;
	}
};

// Writes at queue depth 4 on one LUN of one session, each slot to its own 8 blocks, until
// one fails, the session leaves full feature phase, or 30 s pass (run()). Its callbacks
// point into it: it outlives the session's last poll.
struct Pound {
	static constexpr int kQd = 4;
	int good = 0;     // writes that completed GOOD
	int gone = 0;     // failed: the LUN gone (LOGICAL UNIT NOT SUPPORTED, or the
	                  // inventory change reported first)
	int other = 0;    // failed otherwise (aborted while the LUN drained, the session ended)
	int inflight = 0; // still unanswered when it stopped
	bool stop = false, counted = false;
	std::vector<std::vector<uint8_t>> bufs;
	std::function<void(int)> issue;

	// *started counts up once the first write completed (or it gave up).
	void run(Session &s, uint64_t lun, uint64_t lba, uint8_t seed, std::atomic<int> *started)
	{
		bufs.assign(kQd, std::vector<uint8_t>(8 * 512));
		for (int i = 0; i < kQd; i++)
			std::fill(bufs[i].begin(), bufs[i].end(), uint8_t(seed + i));
		issue = [this, &s, lun, lba, started](int i) {
			inflight++;
			s.submit(
			    {lun, cdb_write16(lba + uint64_t(i) * 8, 8), DataDir::Write, bufs[i]},
			    [this, i, started](const ScsiResult &r) {
				    inflight--;
				    if (r.good()) {
					    good++;
					    if (!counted) {
						    counted = true;
						    started->fetch_add(1);
					    }
				    } else {
					    const uint8_t asc =
					        parse_sense({r.sense.data(), r.sense_len}).asc;
					    if (r.outcome == TaskOutcome::Completed &&
					        (asc == 0x25 || asc == 0x3f))
						    gone++;
					    else
						    other++;
					    stop = true;
				    }
				    if (!stop)
					    issue(i);
			    });
		};
		for (int i = 0; i < kQd; i++)
			issue(i);
		const auto deadline = clock::now() + 30s;
		while ((inflight > 0 || !stop) && clock::now() < deadline &&
		       s.state() == SessionState::FullFeature)
			s.poll(20ms);
		if (!counted)
			started->fetch_add(1); // never got going: do not keep the others waiting
	}
};

// Waits until n poundings have started (bounded).
bool all_started(const std::atomic<int> &started, int n)
{
	const auto deadline = clock::now() + 20s;
	while (started.load() < n && clock::now() < deadline)
		std::this_thread::sleep_for(10ms);
	return started.load() >= n;
}

TEST(TargetdWorkers, FileLunIoIsReapedOnTheWorkers)
{
	FileLunDaemon d;
	ASSERT_TRUE(d.start());
	auto s = d.logins(4);
	// First I/O on each worker makes its ring.
	for (size_t i = 0; i < s.size(); i++)
		ASSERT_TRUE(write_read_lun(*s[i], 1, 0, uint8_t(i))) << s[i]->error();
	const uint64_t before = thread_switches(d.t.pid(), "ulp-bs-reap");
	constexpr int kRounds = 50;
	std::atomic<int> bad{0};
	std::vector<std::thread> th;
	for (size_t i = 0; i < s.size(); i++)
		th.emplace_back([&, i] {
			for (int r = 0; r < kRounds; r++)
				if (!test_env::write_read(*s[i], 1, 4096 * i + 8 * uint64_t(r),
				                          uint8_t(i * 64 + r)))
					bad++;
		});
	for (auto &t : th)
		t.join();
	EXPECT_EQ(bad.load(), 0) << d.t.log();
	const uint64_t after = thread_switches(d.t.pid(), "ulp-bs-reap");
	// 400 commands through the rings: with one shared ring its completion thread woke for
	// nearly each of them.
	EXPECT_LT(after - before, 20u)
	    << "the file LUN's completions went through the completion thread";
	// What the initiators read back is on the file too.
	int fd = open(d.img.c_str(), O_RDONLY | O_CLOEXEC);
	ASSERT_GE(fd, 0);
	for (size_t i = 0; i < s.size(); i++) {
		const uint64_t lba = 4096 * i + 8 * (kRounds - 1);
		std::vector<uint8_t> b(8 * 512);
		ASSERT_EQ(pread(fd, b.data(), b.size(), off_t(lba * 512)), ssize_t(b.size()));
		const uint8_t seed = uint8_t(i * 64 + kRounds - 1);
		for (size_t k = 0; k < b.size(); k++)
			ASSERT_EQ(b[k], uint8_t(k * 31 + seed)) << "session " << i << " byte " << k;
	}
	close(fd);
	for (auto &p : s)
		EXPECT_TRUE(p->logout(5s)) << p->error();
	EXPECT_EQ(d.t.stop(), 0) << d.t.log();
}

// Every session of s writing LUN 1 from a thread of its own (Pound), each slot to its own
// blocks; start() returns once each has had a write answered GOOD.
struct Pounders {
	std::atomic<int> started{0};
	std::deque<Pound> pd;
	std::vector<std::thread> th;

	::testing::AssertionResult start(std::vector<std::unique_ptr<Session>> &s)
	{
		for (auto &p : s)
			if (!write_read_lun(*p, 1, 0, 1))
				return ::testing::AssertionFailure() << p->error();
		pd.resize(s.size());
		for (size_t i = 0; i < s.size(); i++)
			th.emplace_back(
			    [&, i] { pd[i].run(*s[i], 1, 4096 * i, uint8_t(i * 16), &started); });
		if (!all_started(started, int(s.size())))
			return ::testing::AssertionFailure() << "not every session got going";
		return ::testing::AssertionSuccess();
	}
	void join()
	{
		for (auto &t : th)
			if (t.joinable())
				t.join();
	}
	~Pounders() { join(); }
};

TEST(TargetdWorkers, FileLunDeletedUnderIoOnBothWorkers)
{
	FileLunDaemon d;
	ASSERT_TRUE(d.start());
	auto s = d.logins(4);
	Pounders w;
	ASSERT_TRUE(w.start(s));
	std::string out;
	EXPECT_EQ(ulpctl(d.sock, {"--json", "lun", "delete", "-t", kIqn, "-l", "1"}, &out), 0)
	    << out;
	EXPECT_NE(out.find("\"drained\": true"), std::string::npos) << out;
	w.join();
	for (size_t i = 0; i < w.pd.size(); i++) {
		const Pound &p = w.pd[i];
		EXPECT_EQ(p.inflight, 0) << "session " << i << ": commands lost";
		EXPECT_GT(p.good, 0) << "session " << i;
		EXPECT_EQ(s[i]->state(), SessionState::FullFeature) << s[i]->error();
	}
	// The daemon and every session go on: LUN 0 on both workers, then the file again as a
	// new LUN 1 (rings of its own on both workers again).
	for (size_t i = 0; i < s.size(); i++)
		EXPECT_TRUE(write_read(*s[i], 64 * i, uint8_t(i))) << s[i]->error();
	ASSERT_EQ(ulpctl(d.sock,
	                 {"lun", "create", "-t", kIqn, "-l", "1", "-b", "file", "--path", d.img},
	                 &out),
	          0)
	    << out;
	for (size_t i = 0; i < s.size(); i++)
		EXPECT_TRUE(write_read_lun(*s[i], 1, 8 * i, uint8_t(i + 100))) << s[i]->error();
	for (auto &p : s)
		EXPECT_TRUE(p->logout(5s)) << p->error();
	EXPECT_EQ(d.t.stop(), 0) << d.t.log();
}

TEST(TargetdWorkers, StopsUnderFileIoOnBothWorkers)
{
	FileLunDaemon d;
	ASSERT_TRUE(d.start());
	auto s = d.logins(4);
	Pounders w;
	ASSERT_TRUE(w.start(s));
	// SIGTERM with writes in flight on both workers: the sessions are logged out or
	// dropped, each worker drains its ring before it exits, and the daemon exits 0 (a
	// TSan build exits 66 on a race) within its bound.
	const auto t0 = clock::now();
	EXPECT_EQ(d.t.stop(20s), 0) << d.t.log();
	EXPECT_LT(clock::now() - t0, 15s);
	w.join();
	for (const Pound &p : w.pd)
		EXPECT_GT(p.good, 0);
	EXPECT_EQ(d.t.log().find("abandoning"), std::string::npos) << d.t.log();
}

} // namespace
} // namespace ulp::iscsi::initiator
