// SPDX-License-Identifier: MIT
// admin/client.cc - see client.h.
#include "admin/client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace ulp::admin
{

Client::~Client()
{
	close();
}

void Client::close()
{
	if (fd_ >= 0)
		::close(fd_);
	fd_ = -1;
	in_.clear();
}

int Client::connect(const std::string &where, std::string *why)
{
	close();
	if (where.rfind("tcp:", 0) == 0) {
		const std::string hp = where.substr(4);
		const auto c = hp.rfind(':');
		sockaddr_in a{};
		a.sin_family = AF_INET;
		if (c == std::string::npos ||
		    inet_pton(AF_INET, hp.substr(0, c).c_str(), &a.sin_addr) != 1) {
			*why = where + ": expected tcp:IPv4:PORT";
			return -EINVAL;
		}
		a.sin_port = htons(uint16_t(std::strtoul(hp.c_str() + c + 1, nullptr, 10)));
		fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd_ < 0 || ::connect(fd_, reinterpret_cast<sockaddr *>(&a), sizeof(a)) != 0) {
			const int e = errno;
			*why = where + ": " + std::strerror(e);
			close();
			return -e;
		}
		return 0;
	}
	sockaddr_un a{};
	a.sun_family = AF_UNIX;
	if (where.empty() || where.size() >= sizeof(a.sun_path)) {
		*why = "bad socket path: " + where;
		return -EINVAL;
	}
	std::memcpy(a.sun_path, where.c_str(), where.size() + 1);
	fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd_ < 0 || ::connect(fd_, reinterpret_cast<sockaddr *>(&a), sizeof(a)) != 0) {
		const int e = errno;
		*why = where + ": " + std::strerror(e) +
		       (e == ENOENT || e == ECONNREFUSED
		            ? " (is ulp-targetd running with an admin socket?)"
		            : "");
		close();
		return -e;
	}
	return 0;
}

int Client::send_raw(const std::string &bytes, std::string *why)
{
	size_t off = 0;
	while (off < bytes.size()) {
		const ssize_t n = ::send(fd_, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			const int e = n < 0 ? errno : EPIPE;
			*why = std::string("send: ") + std::strerror(e);
			return -e;
		}
		off += size_t(n);
	}
	return 0;
}

bool Client::read_line(std::string *line, std::string *why, std::chrono::milliseconds timeout)
{
	const auto deadline = std::chrono::steady_clock::now() + timeout;
	for (;;) {
		if (auto nl = in_.find('\n'); nl != std::string::npos) {
			*line = in_.substr(0, nl);
			in_.erase(0, nl + 1);
			return true;
		}
		const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
		    deadline - std::chrono::steady_clock::now());
		if (left.count() <= 0) {
			*why = "no response in " + std::to_string(timeout.count()) + " ms";
			return false;
		}
		pollfd p{fd_, POLLIN, 0};
		const int r = ::poll(&p, 1, int(left.count()));
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			continue;
		char buf[65536];
		const ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			*why = n == 0 ? "the daemon closed the connection"
			              : std::string("recv: ") + std::strerror(errno);
			return false;
		}
		in_.append(buf, size_t(n));
	}
}

bool Client::call(const std::string &method, const json &params, json *response, std::string *why,
                  std::chrono::milliseconds timeout)
{
	if (fd_ < 0) {
		*why = "not connected";
		return false;
	}
	const uint64_t id = next_id_++;
	json req = {{"jsonrpc", "2.0"}, {"id", id}, {"method", method}};
	if (!params.is_null() && !params.empty())
		req["params"] = params;
	if (send_raw(req.dump(-1, ' ', false, json::error_handler_t::replace) + "\n", why) != 0)
		return false;
	std::string line;
	if (!read_line(&line, why, timeout))
		return false;
	*response = json::parse(line, nullptr, false);
	if (response->is_discarded() || !response->is_object()) {
		*why = "not a JSON-RPC response: " + line.substr(0, 200);
		return false;
	}
	return true;
}

} // namespace ulp::admin
