// SPDX-License-Identifier: MIT
// tools/ulp-stress/proc.cc - commands and programs run beside the scenarios (see proc.h).
#include "tools/ulp-stress/proc.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

extern char **environ;

namespace stress
{

using namespace std::chrono_literals;

namespace
{

int status_of(int st)
{
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

// posix_spawnp argv with stdin from /dev/null, stdout to out_fd and stderr to err_fd.
pid_t spawn(const std::vector<std::string> &argv, int out_fd, int err_fd, std::string *why)
{
	std::vector<char *> av;
	for (const auto &a : argv)
		av.push_back(const_cast<char *>(a.c_str()));
	av.push_back(nullptr);
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_adddup2(&fa, out_fd, 1);
	posix_spawn_file_actions_adddup2(&fa, err_fd, 2);
	// Our own signal mask and dispositions are not the child's business.
	posix_spawnattr_t at;
	posix_spawnattr_init(&at);
	sigset_t none, all;
	sigemptyset(&none);
	sigfillset(&all);
	posix_spawnattr_setsigmask(&at, &none);
	posix_spawnattr_setsigdefault(&at, &all);
	posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
	pid_t pid = 0;
	const int rc = ::posix_spawnp(&pid, av[0], &fa, &at, av.data(), environ);
	posix_spawn_file_actions_destroy(&fa);
	posix_spawnattr_destroy(&at);
	if (rc != 0) {
		*why = "cannot start " + argv[0] + ": " + std::strerror(rc);
		return -1;
	}
	return pid;
}

} // namespace

int run_command(const std::vector<std::string> &argv, std::chrono::milliseconds bound,
                std::string *out)
{
	out->clear();
	int p[2];
	if (::pipe2(p, O_CLOEXEC) != 0) {
		*out = std::string("pipe: ") + std::strerror(errno);
		return -1;
	}
	std::string why;
	const pid_t pid = spawn(argv, p[1], p[1], &why);
	::close(p[1]);
	if (pid < 0) {
		::close(p[0]);
		*out = why;
		return -1;
	}
	// Read until it ends (not until EOF: a daemon it starts in the background may keep a
	// copy of the pipe), then what is left.
	const auto deadline = std::chrono::steady_clock::now() + bound;
	int st = 0;
	bool ended = false;
	char buf[4096];
	while (!ended) {
		pollfd pfd{p[0], POLLIN, 0};
		if (::poll(&pfd, 1, 100) > 0 && (pfd.revents & POLLIN)) {
			const ssize_t n = ::read(p[0], buf, sizeof(buf));
			if (n > 0)
				out->append(buf, size_t(n));
		}
		if (::waitpid(pid, &st, WNOHANG) == pid)
			ended = true;
		else if (std::chrono::steady_clock::now() >= deadline)
			break;
	}
	if (!ended) {
		::kill(pid, SIGKILL);
		::waitpid(pid, &st, 0);
		::close(p[0]);
		*out += "\n(killed: still running after " + std::to_string(bound.count()) + " ms)";
		return -1;
	}
	::fcntl(p[0], F_SETFL, O_NONBLOCK);
	for (ssize_t n; (n = ::read(p[0], buf, sizeof(buf))) > 0;)
		out->append(buf, size_t(n));
	::close(p[0]);
	return status_of(st);
}

uint16_t free_port()
{
	const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return 0;
	sockaddr_in a{};
	a.sin_family = AF_INET;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	socklen_t len = sizeof(a);
	uint16_t port = 0;
	if (::bind(fd, reinterpret_cast<sockaddr *>(&a), sizeof(a)) == 0 &&
	    ::getsockname(fd, reinterpret_cast<sockaddr *>(&a), &len) == 0)
		port = ntohs(a.sin_port);
	::close(fd);
	return port;
}

Program::~Program()
{
	if (pid_ > 0) {
		::kill(pid_, SIGKILL);
		wait(5s);
	}
	if (reader_.joinable())
		reader_.join();
	if (fd_ >= 0)
		::close(fd_);
	if (err_)
		std::fclose(err_);
}

bool Program::start(const std::vector<std::string> &argv, const std::string &out_file,
                    const std::string &err_file, std::string *why)
{
	const int out = ::open(out_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (out < 0) {
		*why = out_file + ": " + std::strerror(errno);
		return false;
	}
	err_ = std::fopen(err_file.c_str(), "ae");
	int p[2];
	if (!err_ || ::pipe2(p, O_CLOEXEC) != 0) {
		*why = err_file + ": " + std::strerror(errno);
		::close(out);
		return false;
	}
	pid_ = spawn(argv, out, p[1], why);
	::close(out);
	::close(p[1]);
	fd_ = p[0];
	if (pid_ < 0) {
		pid_ = 0;
		return false;
	}
	reader_ = std::thread([this] { read_loop(); });
	return true;
}

void Program::read_loop()
{
	std::string part;
	char buf[4096];
	for (;;) {
		const ssize_t n = ::read(fd_, buf, sizeof(buf));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		std::fwrite(buf, 1, size_t(n), err_);
		std::fflush(err_);
		part.append(buf, size_t(n));
		for (size_t nl; (nl = part.find('\n')) != std::string::npos;) {
			std::lock_guard g(mu_);
			lines_.push_back({clock::now(), part.substr(0, nl)});
			part.erase(0, nl + 1);
		}
	}
	if (!part.empty()) {
		std::lock_guard g(mu_);
		lines_.push_back({clock::now(), part});
	}
}

void Program::signal(int sig)
{
	if (pid_ > 0)
		::kill(pid_, sig);
}

int Program::wait(std::chrono::milliseconds bound)
{
	if (pid_ <= 0)
		return -2;
	const auto deadline = clock::now() + bound;
	for (;;) {
		int st = 0;
		const pid_t r = ::waitpid(pid_, &st, WNOHANG);
		if (r == pid_) {
			pid_ = 0;
			if (reader_.joinable())
				reader_.join(); // its stderr to the end
			return status_of(st);
		}
		if (r < 0) {
			pid_ = 0;
			return -2;
		}
		if (clock::now() >= deadline)
			return -1;
		std::this_thread::sleep_for(20ms);
	}
}

std::vector<Program::Line> Program::lines(size_t *cursor)
{
	std::lock_guard g(mu_);
	std::vector<Line> v;
	for (size_t i = *cursor; i < lines_.size(); i++)
		v.push_back(lines_[i]);
	*cursor = lines_.size();
	return v;
}

} // namespace stress
