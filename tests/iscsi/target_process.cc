// SPDX-License-Identifier: MIT
// tests/iscsi/target_process.cc - ulp-targetd and tgtd as child processes (see
// target_process.h).
#include "tests/iscsi/target_process.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <random>
#include <set>
#include <sstream>
#include <thread>

extern char **environ;

namespace ulp::test
{

namespace
{

using clock = std::chrono::steady_clock;

std::string temp_path(const char *stem)
{
	char buf[] = "/tmp/ulp-XXXXXX";
	int fd = mkstemp(buf);
	if (fd >= 0) {
		::close(fd);
		::unlink(buf);
	}
	return std::string(buf) + "-" + stem;
}

std::string read_file(const std::string &path)
{
	std::ifstream f(path);
	std::stringstream s;
	s << f.rdbuf();
	return s.str();
}

// Wait for pid up to timeout; its status, or -1 (still running).
int wait_for(pid_t pid, std::chrono::milliseconds timeout)
{
	const auto deadline = clock::now() + timeout;
	for (;;) {
		int st = 0;
		pid_t r = waitpid(pid, &st, WNOHANG);
		if (r == pid)
			return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
		if (r < 0)
			return -2;
		if (clock::now() >= deadline)
			return -1;
		std::this_thread::sleep_for(10ms);
	}
}

// posix_spawn path with args; stdout and stderr to files (or /dev/null), and fd_from
// dup'ed to fd_to in the child when fd_from >= 0.
pid_t spawn(const std::string &path, const std::vector<std::string> &args,
            const std::string &out_path, const std::string &err_path, int fd_from = -1,
            int fd_to = -1)
{
	std::vector<std::string> all{path};
	all.insert(all.end(), args.begin(), args.end());
	std::vector<char *> argv;
	for (auto &a : all)
		argv.push_back(a.data());
	argv.push_back(nullptr);
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_addopen(&fa, 1, out_path.empty() ? "/dev/null" : out_path.c_str(),
	                                 O_WRONLY | O_CREAT | O_TRUNC, 0600);
	posix_spawn_file_actions_addopen(&fa, 2, err_path.empty() ? "/dev/null" : err_path.c_str(),
	                                 O_WRONLY | O_CREAT | O_TRUNC, 0600);
	if (fd_from >= 0)
		posix_spawn_file_actions_adddup2(&fa, fd_from, fd_to);
	pid_t pid = -1;
	if (posix_spawn(&pid, path.c_str(), &fa, nullptr, argv.data(), environ) != 0)
		pid = -1;
	posix_spawn_file_actions_destroy(&fa);
	return pid;
}

} // namespace

uint16_t free_port()
{
	// The kernel picks an ephemeral port at random, so two calls can return the same port
	// (a test asking for three once got p2 == p3). Remember what this process has handed
	// out and ask again on a repeat; the ephemeral range holds thousands, so a few tries do.
	static std::mutex lock;
	static std::set<uint16_t> given;
	std::lock_guard<std::mutex> g(lock);
	for (int attempt = 0; attempt < 64; attempt++) {
		int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		sockaddr_in a{};
		a.sin_family = AF_INET;
		a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		a.sin_port = 0;
		uint16_t port = 0;
		if (::bind(fd, reinterpret_cast<sockaddr *>(&a), sizeof(a)) == 0) {
			socklen_t l = sizeof(a);
			getsockname(fd, reinterpret_cast<sockaddr *>(&a), &l);
			port = ntohs(a.sin_port);
		}
		::close(fd);
		if (port == 0)
			return 0;
		if (given.insert(port).second)
			return port;
	}
	return 0;
}

int run_program(const std::string &path, const std::vector<std::string> &args, std::string *out,
                std::string *err, std::chrono::milliseconds timeout)
{
	const std::string o = temp_path("out"), e = temp_path("err");
	pid_t pid = spawn(path, args, o, e);
	if (pid < 0)
		return -1;
	int st = wait_for(pid, timeout);
	if (st == -1) {
		::kill(pid, SIGKILL);
		wait_for(pid, 5s);
	}
	if (out)
		*out = read_file(o);
	if (err)
		*err = read_file(e);
	::unlink(o.c_str());
	::unlink(e.c_str());
	return st;
}

// ---- ulp-targetd ---------------------------------------------------------------------------

TargetdProcess::~TargetdProcess()
{
	kill();
	if (!log_path_.empty())
		::unlink(log_path_.c_str());
}

bool TargetdProcess::start(const std::vector<std::string> &args, std::string *why,
                           std::chrono::milliseconds timeout)
{
	int p[2];
	if (pipe2(p, O_CLOEXEC) != 0) {
		*why = "pipe failed";
		return false;
	}
	constexpr int kReadyFd = 9;
	if (p[1] == kReadyFd) {
		// dup2(9, 9) in the child would keep O_CLOEXEC: the daemon would lose the fd.
		int fd = fcntl(p[1], F_DUPFD_CLOEXEC, kReadyFd + 1);
		::close(p[1]);
		p[1] = fd;
	}
	std::vector<std::string> all{"--portal", "127.0.0.1:0", "--ready-fd",
	                             std::to_string(kReadyFd)};
	all.insert(all.end(), args.begin(), args.end());
	log_path_ = temp_path("targetd.log");
	pid_ = spawn(ULP_TARGETD_PATH, all, "", log_path_, p[1], kReadyFd);
	::close(p[1]);
	if (pid_ < 0) {
		::close(p[0]);
		*why = std::string("cannot start ") + ULP_TARGETD_PATH;
		return false;
	}
	std::string line;
	const auto deadline = clock::now() + timeout;
	while (clock::now() < deadline) {
		pollfd pfd{p[0], POLLIN, 0};
		int ms = static_cast<int>(
		    std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now())
		        .count());
		if (::poll(&pfd, 1, std::max(ms, 0)) <= 0)
			break;
		char buf[32];
		ssize_t n = ::read(p[0], buf, sizeof(buf));
		if (n <= 0)
			break;
		line.append(buf, static_cast<size_t>(n)); // until EOF: the daemon closes it
	}
	::close(p[0]);
	port_ = static_cast<uint16_t>(std::atoi(line.c_str()));
	// "iser PORT" follows when there are iSER portals beside the TCP one.
	if (auto at = line.find("iser "); at != std::string::npos)
		iser_port_ = static_cast<uint16_t>(std::atoi(line.c_str() + at + 5));
	// And "srp PORT" for the first SRP portal.
	if (auto at = line.find("srp "); at != std::string::npos)
		srp_port_ = static_cast<uint16_t>(std::atoi(line.c_str() + at + 4));
	if (port_ == 0) {
		kill();
		*why = "ulp-targetd did not come up: " + log();
		return false;
	}
	return true;
}

int TargetdProcess::stop(std::chrono::milliseconds timeout)
{
	if (pid_ <= 0)
		return -1;
	::kill(pid_, SIGTERM);
	int st = wait_for(pid_, timeout);
	if (st == -1) {
		::kill(pid_, SIGKILL);
		wait_for(pid_, 5s);
	}
	pid_ = -1;
	return st;
}

int TargetdProcess::wait(std::chrono::milliseconds timeout)
{
	if (pid_ <= 0)
		return -1;
	const int st = wait_for(pid_, timeout);
	if (st != -1)
		pid_ = -1;
	return st;
}

void TargetdProcess::kill()
{
	if (pid_ <= 0)
		return;
	::kill(pid_, SIGKILL);
	wait_for(pid_, 5s);
	pid_ = -1;
}

std::string TargetdProcess::log() const
{
	return log_path_.empty() ? std::string() : read_file(log_path_);
}

// ---- tgtd -----------------------------------------------------------------------------------

TgtdProcess::~TgtdProcess()
{
	kill();
}

bool TgtdProcess::tgtadm(const std::vector<std::string> &args, std::string *out)
{
	std::vector<std::string> all{"-C", std::to_string(control_), "--lld", "iscsi"};
	all.insert(all.end(), args.begin(), args.end());
	std::string err;
	int st = run_program("/usr/sbin/tgtadm", all, out, &err, 10s);
	if (st != 0 && out)
		*out += err;
	return st == 0;
}

bool TgtdProcess::start(const TgtdConfig &cfg, std::string *why)
{
	if (::access("/usr/sbin/tgtd", X_OK) != 0 || ::access("/usr/sbin/tgtadm", X_OK) != 0) {
		*why = "tgtd/tgtadm not installed (Debian package tgt)";
		return false;
	}
	if (geteuid() != 0) {
		*why = "tgtd needs root";
		return false;
	}
	std::random_device rd;
	control_ = 1000 + static_cast<int>(rd() % 8000); // tgtd takes small ones only
	port_ = free_port();
	file_ = "/dev/shm/ulp-tgt-" + std::to_string(getpid()) + "-" + std::to_string(control_);
	int fd = ::open(file_.c_str(), O_CREAT | O_RDWR | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0 || ftruncate(fd, static_cast<off_t>(cfg.lun_size)) != 0) {
		if (fd >= 0)
			::close(fd);
		*why = "cannot create the LUN file " + file_;
		return false;
	}
	::close(fd);
	log_path_ = temp_path("tgtd.log");
	pid_ = spawn("/usr/sbin/tgtd",
	             {"-f", "-C", std::to_string(control_), "--iscsi",
	              "portal=127.0.0.1:" + std::to_string(port_)},
	             log_path_, log_path_);
	if (pid_ < 0) {
		*why = "cannot start tgtd";
		return false;
	}
	// Ready when its management socket answers.
	std::string out;
	const auto deadline = clock::now() + 10s;
	bool up = false;
	while (clock::now() < deadline) {
		if (wait_for(pid_, 0ms) != -1) {
			pid_ = -1;
			*why = "tgtd exited at start: " + read_file(log_path_);
			return false;
		}
		if (tgtadm({"--op", "show", "--mode", "target"}, &out)) {
			up = true;
			break;
		}
		std::this_thread::sleep_for(50ms);
	}
	if (!up) {
		*why = "tgtd did not answer tgtadm: " + out;
		kill();
		return false;
	}
	auto must = [&](std::vector<std::string> a) {
		std::string o;
		if (tgtadm(a, &o))
			return true;
		*why = "tgtadm failed: " + o;
		return false;
	};
	if (!must({"--op", "new", "--mode", "target", "--tid", "1", "-T", cfg.iqn}) ||
	    !must({"--op", "new", "--mode", "logicalunit", "--tid", "1", "--lun", "1", "-b",
	           file_}) ||
	    !must({"--op", "bind", "--mode", "target", "--tid", "1", "-I", "ALL"}))
		return false;
	if (cfg.digests && (!must({"--op", "update", "--mode", "target", "--tid", "1", "-n",
	                           "HeaderDigest", "-v", "CRC32C"}) ||
	                    !must({"--op", "update", "--mode", "target", "--tid", "1", "-n",
	                           "DataDigest", "-v", "CRC32C"})))
		return false;
	if (!cfg.chap_user.empty()) {
		if (!must({"--op", "new", "--mode", "account", "--user", cfg.chap_user,
		           "--password", cfg.chap_secret}) ||
		    !must({"--op", "bind", "--mode", "account", "--tid", "1", "--user",
		           cfg.chap_user}))
			return false;
	}
	if (!cfg.mutual_user.empty()) {
		if (!must({"--op", "new", "--mode", "account", "--user", cfg.mutual_user,
		           "--password", cfg.mutual_secret}) ||
		    !must({"--op", "bind", "--mode", "account", "--tid", "1", "--user",
		           cfg.mutual_user, "--outgoing"}))
			return false;
	}
	return true;
}

void TgtdProcess::kill()
{
	if (pid_ > 0) {
		// tgtd keeps running on SIGTERM while it has targets; this is a test fixture.
		::kill(pid_, SIGKILL);
		wait_for(pid_, 5s);
		pid_ = -1;
	}
	if (control_) {
		const std::string sock = "/var/run/tgtd/socket." + std::to_string(control_);
		::unlink(sock.c_str());
		::unlink((sock + ".lock").c_str());
		control_ = 0;
	}
	if (!file_.empty()) {
		::unlink(file_.c_str());
		file_.clear();
	}
	if (!log_path_.empty()) {
		::unlink(log_path_.c_str());
		log_path_.clear();
	}
}

} // namespace ulp::test
