// SPDX-License-Identifier: MIT
// tools/ulp-stress/kill.cc - kill: initiators in child processes (this executable again,
// in its hidden --child-kill mode) log in, do verified I/O and log out in a loop, and are
// killed with SIGKILL at a random moment: during a login, during I/O, during a logout or
// between them. Before a child sends a write it tells the parent (a line "S blk n gen" on
// a pipe), and when the target acknowledges it the child tells the parent ("A blk n gen")
// before it counts it as done; so the parent knows every acknowledged generation, and the
// writes in flight at the kill are uncertain (old or new accepted). The parent then waits
// until the target no longer lists the child's nexus (the teardown figure: close after
// kill), and hands the slot to the next child. A child that ends on its own must have exit
// status 0 (its own reads matched).
#include "tools/ulp-stress/stress.h"

#include "core/log.h"
#include "providers/soft/soft.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <thread>

extern char **environ;

namespace stress
{

using clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

namespace
{

constexpr int kJournalFd = 3; // the child's end of the pipe

// One child: spawn, let it run up to delay, kill it, apply its journal.
void one_kill(Run &r, Transport t, Row &row, uint32_t slot, uint64_t gen_base, milliseconds delay,
              uint32_t seed, std::map<std::string, uint64_t> *phases, std::mutex *plock)
{
	const Identity id = identity("kill", slot);
	const std::string tag =
	    "kill/" + std::string(transport_name(t)) + " slot " + std::to_string(slot);
	Watchdog::Step step(*r.wd, tag, r.prof.step * 2);
	Child c;
	std::string why;
	if (!c.spawn(r, t, id, r.slot(slot), gen_base, seed, r.prof.io, &why)) {
		row.fail(tag + ": " + why);
		return;
	}
	// Read the journal until the kill (and after it, to EOF: what the child wrote before it
	// died is still in the pipe). Lines apply to the ledger as they come.
	const auto kill_at = clock::now() + delay;
	bool eof = false;
	while (!eof && clock::now() < kill_at) {
		const int ms =
		    int(std::chrono::duration_cast<milliseconds>(kill_at - clock::now()).count());
		eof = !c.pump(std::max(1, std::min(ms, 50)));
	}
	const std::string at = eof ? "exited" : c.phase();
	const auto tk = clock::now();
	step.note("killed during " + at);
	bool exited = false;
	const int status = c.kill_and_reap(&exited);
	row.ios += c.acked();
	if (at == "exited" || exited) {
		// It ended on its own before the kill: it must have passed its own checks.
		if (status != 0)
			row.fail(tag + ": the child exited with status " + std::to_string(status));
	}
	{
		std::lock_guard g(*plock);
		(*phases)[exited ? "exited" : at]++;
	}
	// The target must close the child's nexus (no logout will come): that is the figure.
	if (r.target.has_admin()) {
		step.note("waiting for the target to close the nexus");
		const int64_t ns = r.wait_gone(who(t, id), r.prof.step / 2, &why);
		if (ns < 0)
			row.fail(tag + " (killed during " + at + "): " + why);
		else
			row.add_teardown(clock::now() - tk);
	} else {
		std::this_thread::sleep_for(2s); // nothing to ask: give the target time
	}
	row.cycles++;
}

std::map<std::string, std::string> child_args(int argc, char **argv)
{
	std::map<std::string, std::string> m;
	for (int i = 2; i < argc; i++) {
		const char *eq = std::strchr(argv[i], '=');
		if (eq)
			m[std::string(argv[i], size_t(eq - argv[i]))] = eq + 1;
	}
	return m;
}

void journal_line(const char *fmt, uint64_t a, uint32_t b, uint64_t c)
{
	char line[96];
	const int n = std::snprintf(line, sizeof(line), fmt, a, b, c);
	// One write of less than PIPE_BUF: the line arrives whole or not at all.
	if (::write(kJournalFd, line, size_t(n)) != n)
		::_exit(3); // the parent is gone: nothing to report to
}

void journal_phase(const char *p)
{
	char line[32];
	const int n = std::snprintf(line, sizeof(line), "P %s\n", p);
	if (::write(kJournalFd, line, size_t(n)) != n)
		::_exit(3);
}

} // namespace

Child::~Child()
{
	if (pid_ > 0) {
		bool exited = false;
		kill_and_reap(&exited);
	}
	if (fd_ >= 0)
		::close(fd_);
}

bool Child::spawn(Run &r, Transport t, const Identity &id, Region reg, uint64_t gen_base,
                  uint32_t seed, milliseconds io, std::string *why)
{
	ledger_ = r.ledger;
	int p[2];
	if (::pipe2(p, O_CLOEXEC) != 0) {
		*why = std::string("pipe: ") + std::strerror(errno);
		return false;
	}
	auto arg = [](const char *k, const auto &v) {
		if constexpr (std::is_convertible_v<decltype(v), std::string>)
			return std::string(k) + "=" + std::string(v);
		else
			return std::string(k) + "=" + std::to_string(v);
	};
	std::vector<std::string> args{r.self_exe,
	                              "--child-kill",
	                              arg("transport", std::string(transport_name(t))),
	                              arg("host", r.ep.host),
	                              arg("port", t == Transport::Tcp    ? r.ep.tcp_port
	                                          : t == Transport::Iser ? r.ep.iser_port
	                                                                 : r.ep.srp_port),
	                              arg("target", r.ep.target),
	                              arg("srp_target", r.ep.srp_target),
	                              arg("src_ip", r.ep.src_ip),
	                              arg("name", id.initiator_name),
	                              arg("srp_ext", id.srp_initiator_ext),
	                              arg("lun", r.lun),
	                              arg("run", r.ledger->run()),
	                              arg("bs", r.ledger->block_size()),
	                              arg("first", reg.first),
	                              arg("count", reg.count),
	                              arg("io_blocks", r.io_blocks),
	                              arg("io_ms", io.count()),
	                              arg("gen", gen_base),
	                              arg("seed", seed)};
	std::vector<char *> argv;
	for (auto &a : args)
		argv.push_back(a.data());
	argv.push_back(nullptr);
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, p[1], kJournalFd);
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	const int rc = ::posix_spawn(&pid_, r.self_exe.c_str(), &fa, nullptr, argv.data(), environ);
	posix_spawn_file_actions_destroy(&fa);
	::close(p[1]);
	if (rc != 0) {
		::close(p[0]);
		pid_ = -1;
		*why = std::string("cannot start a child: ") + std::strerror(rc);
		return false;
	}
	fd_ = p[0];
	return true;
}

bool Child::pump(int timeout_ms)
{
	if (fd_ < 0)
		return false;
	pollfd pfd{fd_, POLLIN, 0};
	if (::poll(&pfd, 1, timeout_ms) <= 0)
		return true;
	char b[4096];
	const ssize_t n = ::read(fd_, b, sizeof(b));
	if (n <= 0)
		return false;
	buf_.append(b, size_t(n));
	size_t nl;
	while ((nl = buf_.find('\n')) != std::string::npos) {
		const std::string line = buf_.substr(0, nl);
		buf_.erase(0, nl + 1);
		uint64_t blk = 0, gen = 0;
		uint32_t cnt = 0;
		if (line.rfind("P ", 0) == 0) {
			phase_ = line.substr(2);
		} else if (std::sscanf(line.c_str(), "S %" SCNu64 " %u %" SCNu64, &blk, &cnt,
		                       &gen) == 3) {
			ledger_->note_write(blk, cnt, gen);
		} else if (std::sscanf(line.c_str(), "A %" SCNu64 " %u %" SCNu64, &blk, &cnt,
		                       &gen) == 3) {
			ledger_->ack_write(blk, cnt, gen);
			acked_++;
		}
	}
	return true;
}

int Child::kill_and_reap(bool *exited)
{
	if (pid_ <= 0)
		return -1;
	::kill(pid_, SIGKILL);
	int st = 0;
	::waitpid(pid_, &st, 0);
	pid_ = -1;
	*exited = WIFEXITED(st);
	// What it wrote before it died is still in the pipe.
	while (pump(1000)) {
	}
	if (fd_ >= 0) {
		::close(fd_);
		fd_ = -1;
	}
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

void kill_scenario(Run &r, Transport t, Row &row)
{
	const uint32_t par = std::min(r.prof.kill_parallel, kKillSlots);
	std::atomic<int64_t> left{int64_t(r.prof.kills)};
	const auto deadline = clock::now() + r.prof.scenario;
	std::map<std::string, uint64_t> phases;
	std::mutex plock;
	std::vector<std::thread> th;
	for (uint32_t i = 0; i < par; i++)
		th.emplace_back([&, i] {
			std::mt19937 rng(i * 31337 + 17);
			while (left.fetch_sub(1) > 0 && clock::now() < deadline) {
				// The child's generations: a range of its own, above everything
				// before.
				const uint64_t base = r.gens.next.fetch_add(uint64_t(1) << 32);
				const milliseconds delay(rng() %
				                         uint64_t(r.prof.kill_window.count() + 1));
				one_kill(r, t, row, kKillSlot + i, base, delay, rng(), &phases,
				         &plock);
			}
		});
	for (auto &x : th)
		x.join();
	std::string p;
	for (auto &[k, v] : phases)
		p += (p.empty() ? "" : ", ") + k + " " + std::to_string(v);
	row.note("killed during: " + p);
}

int kill_child_main(int argc, char **argv)
{
	using namespace ulp;
	signal(SIGPIPE, SIG_IGN);
	log::set_program("ulp-stress child");
	log::set_level(log::Level::Error);
	auto a = child_args(argc, argv);
	Transport t;
	if (!transport_from_name(a["transport"], &t))
		return 2;
	Endpoint ep;
	ep.host = a["host"];
	const uint16_t port = uint16_t(std::stoul(a["port"]));
	ep.tcp_port = ep.iser_port = ep.srp_port = port;
	ep.target = a["target"];
	ep.srp_target = a["srp_target"];
	ep.src_ip = a["src_ip"];
	Device *dev = nullptr;
	if (t != Transport::Tcp) {
		soft::DeviceConfig sc;
		sc.name = "stress-child";
		sc.ip = ep.src_ip.empty() ? ep.host : ep.src_ip;
		dev = soft::create_device(sc);
		if (!dev)
			return 2;
		ep.rdma_device = sc.name;
	}
	Identity id;
	id.initiator_name = a["name"];
	id.srp_initiator_ext = std::stoull(a["srp_ext"]);
	const uint64_t lun = std::stoull(a["lun"]);
	Ledger ledger(uint32_t(std::stoul(a["run"])), uint32_t(std::stoul(a["bs"])), 0,
	              std::stoull(a["first"]) + std::stoull(a["count"]));
	const Region reg{std::stoull(a["first"]), std::stoull(a["count"])};
	GenSource gens;
	gens.next = std::stoull(a["gen"]);
	IoOptions o;
	o.io_blocks = uint32_t(std::stoul(a["io_blocks"]));
	o.duration = milliseconds(std::stoll(a["io_ms"]));
	o.seed = uint32_t(std::stoul(a["seed"]));
	Journal j;
	j.start = [](uint64_t blk, uint32_t n, uint64_t gen) {
		journal_line("S %" PRIu64 " %u %" PRIu64 "\n", blk, n, gen);
	};
	j.ack = [](uint64_t blk, uint32_t n, uint64_t gen) {
		journal_line("A %" PRIu64 " %u %" PRIu64 "\n", blk, n, gen);
	};
	int rc = 0;
	// Bounded: the parent kills it long before this ends.
	for (int loop = 0; loop < 50 && rc == 0; loop++) {
		journal_phase("login");
		std::string why;
		auto n = Nexus::login(t, ep, id, &why);
		if (!n) {
			std::fprintf(stderr, "ulp-stress child: login: %s\n", why.c_str());
			rc = 1;
			break;
		}
		journal_phase("io");
		IoStats st;
		if (!lun_ready(n->disk(), lun, &why)) {
			std::fprintf(stderr, "ulp-stress child: %s\n", why.c_str());
			rc = 1;
		} else {
			run_io(n->disk(), lun, ledger, reg, gens, o, &j, &st);
			if (!st.fatal.empty() || st.errors || st.verify_errors) {
				std::fprintf(stderr,
				             "ulp-stress child: %s, %" PRIu64 " errors, %" PRIu64
				             " verify errors\n",
				             st.fatal.c_str(), st.errors, st.verify_errors);
				for (auto &m : st.msgs)
					std::fprintf(stderr, "ulp-stress child: %s\n", m.c_str());
				rc = 1;
			}
		}
		journal_phase("logout");
		if (!n->logout() && rc == 0)
			rc = 1;
		n.reset();
		journal_phase("idle");
	}
	if (dev)
		soft::destroy_device(dev);
	return rc;
}

} // namespace stress
