// SPDX-License-Identifier: MIT
// tools/ulp-stress/target.cc - our own ulp-targetd, or a given one (see target.h).
#include "tools/ulp-stress/target.h"

#include "admin/client.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <thread>

extern char **environ;

namespace stress
{

using clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

namespace
{

// Wait for pid up to bound: its status (exit code, 128 + signal), or -1 still running.
int wait_pid(pid_t pid, std::chrono::milliseconds bound)
{
	const auto deadline = clock::now() + bound;
	for (;;) {
		int st = 0;
		const pid_t r = ::waitpid(pid, &st, WNOHANG);
		if (r == pid)
			return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
		if (r < 0)
			return -2;
		if (clock::now() >= deadline)
			return -1;
		std::this_thread::sleep_for(10ms);
	}
}

} // namespace

std::string find_program(const std::string &name, const char *env, const char *build_path)
{
	namespace fs = std::filesystem;
	if (const char *e = std::getenv(env); e && *e)
		return e;
	std::error_code ec;
	const fs::path self = fs::read_symlink("/proc/self/exe", ec);
	if (!ec) {
		// Beside us; an install's sbin (we are in bin); the build tree's sibling directory.
		const fs::path up = self.parent_path().parent_path();
		for (const fs::path &p :
		     {self.parent_path() / name, up / "sbin" / name, up / name / name})
			if (::access(p.c_str(), X_OK) == 0)
				return p;
	}
	if (build_path && *build_path && ::access(build_path, X_OK) == 0)
		return build_path;
	return name; // posix_spawnp finds it in PATH
}

std::string find_targetd()
{
#ifdef ULP_TARGETD_BUILD_PATH
	return find_program("ulp-targetd", "ULP_TARGETD", ULP_TARGETD_BUILD_PATH);
#else
	return find_program("ulp-targetd", "ULP_TARGETD", nullptr);
#endif
}

Target::~Target()
{
	kill_now();
	if (own_dir_ && !dir_.empty()) {
		std::error_code ec;
		std::filesystem::remove_all(dir_, ec);
	}
}

bool Target::start(const TargetOptions &o, Endpoint *ep, std::string *why)
{
	if (!o.dir.empty()) {
		dir_ = o.dir;
	} else if (dir_.empty()) {
		char tmpl[] = "/tmp/ulp-stress-XXXXXX";
		if (!::mkdtemp(tmpl)) {
			*why = std::string("mkdtemp: ") + std::strerror(errno);
			return false;
		}
		dir_ = tmpl;
		own_dir_ = true;
	}
	socket_ = dir_ + "/admin.sock";
	log_ = dir_ + "/ulp-targetd.log";
	int p[2];
	if (::pipe2(p, O_CLOEXEC) != 0) {
		*why = std::string("pipe: ") + std::strerror(errno);
		return false;
	}
	constexpr int kReadyFd = 9;
	if (p[1] == kReadyFd) {
		// dup2(9, 9) in the child would keep O_CLOEXEC: the daemon would lose the fd.
		const int fd = ::fcntl(p[1], F_DUPFD_CLOEXEC, kReadyFd + 1);
		::close(p[1]);
		p[1] = fd;
	}
	std::vector<std::string> args{o.targetd};
	if (!o.config_only) {
		ep->target = "iqn.2026-11.org.ulp:stress";
		args.insert(args.end(), {"--portal", "127.0.0.1:0", "--iser-portal", "127.0.0.1:0",
		                         "--srp-portal", "127.0.0.1:0", "--target", ep->target,
		                         "--lun", "0:ram:size=" + o.lun_size});
	}
	args.insert(args.end(),
	            {"--admin-socket", socket_, "--ready-fd", std::to_string(kReadyFd)});
	if (!o.config.empty()) {
		const std::string file = dir_ + "/ulp-targetd.toml";
		std::ofstream(file) << o.config;
		args.push_back("--config");
		args.push_back(file);
	}
	std::vector<char *> argv;
	for (auto &a : args)
		argv.push_back(a.data());
	argv.push_back(nullptr);
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_addopen(&fa, 1, log_.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
	posix_spawn_file_actions_addopen(&fa, 2, log_.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
	posix_spawn_file_actions_adddup2(&fa, p[1], kReadyFd);
	const int rc = ::posix_spawnp(&pid_, o.targetd.c_str(), &fa, nullptr, argv.data(), environ);
	posix_spawn_file_actions_destroy(&fa);
	::close(p[1]);
	if (rc != 0) {
		::close(p[0]);
		pid_ = 0;
		*why = "cannot start " + o.targetd + ": " + std::strerror(rc) +
		       " (set ULP_TARGETD or --targetd)";
		return false;
	}
	ours_ = true;
	// The ready line: "TCP\niser ISER\nsrp SRP\n", then EOF (the daemon closes it).
	std::string line;
	const auto deadline = clock::now() + 30s;
	while (clock::now() < deadline) {
		pollfd pfd{p[0], POLLIN, 0};
		if (::poll(&pfd, 1, 100) < 0 && errno != EINTR)
			break;
		if (!(pfd.revents & (POLLIN | POLLHUP))) {
			if (wait_pid(pid_, 0ms) != -1)
				break; // it exited
			continue;
		}
		char buf[64];
		const ssize_t n = ::read(p[0], buf, sizeof(buf));
		if (n <= 0)
			break;
		line.append(buf, size_t(n));
	}
	::close(p[0]);
	ep->host = "127.0.0.1";
	ep->tcp_port = uint16_t(std::atoi(line.c_str()));
	if (auto at = line.find("iser "); at != std::string::npos)
		ep->iser_port = uint16_t(std::atoi(line.c_str() + at + 5));
	if (auto at = line.find("srp "); at != std::string::npos)
		ep->srp_port = uint16_t(std::atoi(line.c_str() + at + 4));
	if (!ep->tcp_port || (!o.config_only && (!ep->iser_port || !ep->srp_port))) {
		*why = "ulp-targetd did not come up (ready line '" + line + "'):\n" + log_tail(20);
		kill_now();
		return false;
	}
	return true;
}

void Target::attach(const TargetOptions &o)
{
	ours_ = false;
	socket_ = o.admin_socket;
	pid_ = o.pid;
}

int Target::wait_exit(std::chrono::milliseconds bound)
{
	if (!ours_ || pid_ <= 0)
		return -2;
	const int st = wait_pid(pid_, bound);
	if (st != -1)
		pid_ = 0;
	return st;
}

int Target::stop(std::chrono::milliseconds bound)
{
	if (!ours_ || pid_ <= 0)
		return 0;
	::kill(pid_, SIGTERM);
	int st = wait_pid(pid_, bound);
	if (st == -1) {
		::kill(pid_, SIGKILL);
		wait_pid(pid_, 5s);
	}
	pid_ = 0;
	return st;
}

void Target::kill_now()
{
	if (!ours_ || pid_ <= 0)
		return;
	::kill(pid_, SIGKILL);
	wait_pid(pid_, 5s);
	pid_ = 0;
}

void Target::abandon()
{
	kill_now();
	if (own_dir_ && !dir_.empty()) {
		std::error_code ec;
		std::filesystem::remove_all(dir_, ec);
		dir_.clear();
	}
}

std::string Target::log_tail(size_t lines) const
{
	std::ifstream f(log_);
	std::deque<std::string> last;
	for (std::string l; std::getline(f, l);) {
		last.push_back(l);
		if (last.size() > lines)
			last.pop_front();
	}
	std::string out;
	for (auto &l : last)
		out += "  | " + l + "\n";
	return out;
}

bool Target::call(const std::string &method, const json &params, json *result, std::string *why,
                  std::chrono::milliseconds timeout) const
{
	if (socket_.empty()) {
		*why = "no admin socket";
		return false;
	}
	ulp::admin::Client c;
	if (c.connect(socket_, why) != 0)
		return false;
	json resp;
	if (!c.call(method, params, &resp, why, timeout))
		return false;
	if (resp.contains("error")) {
		*why = method + ": " + resp["error"].dump();
		return false;
	}
	*result = resp["result"];
	return true;
}

bool Target::sessions_of(const std::string &who, json *out, std::string *why) const
{
	json all;
	if (!call("session_list", json::object(), &all, why))
		return false;
	*out = json::array();
	for (const json &s : all) {
		const std::string name = s.value("initiator", "");
		const std::string port = s.value("initiator_port", "");
		if (name == who || (s.value("fabric", "") == "srp" && port.rfind(who, 0) == 0))
			out->push_back(s);
	}
	return true;
}

int64_t Target::wait_gone(const std::string &w, std::chrono::milliseconds bound,
                          std::string *why) const
{
	const auto start = clock::now();
	for (;;) {
		json s;
		if (!sessions_of(w, &s, why))
			return -1;
		const auto now = clock::now();
		if (s.empty())
			return std::chrono::duration_cast<std::chrono::nanoseconds>(now - start)
			    .count();
		if (now - start >= bound) {
			*why = w + " still has " + std::to_string(s.size()) +
			       " nexus(es) at the target " + std::to_string(bound.count()) +
			       " ms later: " + s.dump();
			return -1;
		}
		std::this_thread::sleep_for(5ms);
	}
}

} // namespace stress
