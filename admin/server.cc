// SPDX-License-Identifier: MIT
// admin/server.cc - the admin socket's listener, peer checks and per-client bounds (see
// server.h).
#include "admin/server.h"

#include "admin/http.h"
#include "admin/prometheus.h"
#include "core/log.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

namespace ulp::admin
{

using clock = std::chrono::steady_clock;

struct Server::Client {
	int fd = -1;
	std::string who;        // "uid 0 pid 42" / "tcp 127.0.0.1:4000"
	std::string in;         // bytes received, not yet a whole line
	std::string out;        // response bytes not yet written
	size_t out_off = 0;     // written of out
	bool closing = false;   // close once out is written
	bool http = false;      // a metrics client (one HTTP request), not JSON-RPC lines
	bool draining = false;  // http: answered and shut down for writing; reading to EOF
	bool eof = false;       // http: the peer closed (or failed): nothing more to read
	clock::time_point last; // the connection's start, or its last complete request
	std::chrono::milliseconds timeout{0}; // idle_timeout, or http_timeout
	~Client()
	{
		if (fd >= 0)
			::close(fd);
	}
};

Server::Server(const Methods &methods, ServerConfig cfg) : methods_(methods), cfg_(std::move(cfg))
{
}

Server::~Server()
{
	stop();
}

namespace
{

// A socket file nobody listens on any more (a daemon that died): safe to replace.
bool stale_socket(const std::string &path)
{
	struct stat st {
	};
	if (lstat(path.c_str(), &st) != 0 || !S_ISSOCK(st.st_mode))
		return false;
	int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return false;
	sockaddr_un a{};
	a.sun_family = AF_UNIX;
	std::memcpy(a.sun_path, path.c_str(), path.size() + 1);
	const bool live = ::connect(fd, reinterpret_cast<sockaddr *>(&a), sizeof(a)) == 0;
	const int e = errno;
	::close(fd);
	return !live && e == ECONNREFUSED;
}

// Whether the peer of fd has gid among its supplementary groups (SO_PEERGROUPS, Linux 4.13:
// the groups it had when it connected). An admin added to admin_group has it as a
// supplementary group, seldom as the primary one SO_PEERCRED reports.
bool peer_in_group(int fd, gid_t gid)
{
	std::vector<gid_t> groups(64);
	for (int tries = 0; tries < 2; tries++) {
		socklen_t len = socklen_t(groups.size() * sizeof(gid_t));
		if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups.data(), &len) == 0) {
			groups.resize(len / sizeof(gid_t));
			return std::find(groups.begin(), groups.end(), gid) != groups.end();
		}
		if (errno != ERANGE)
			return false;
		groups.resize(len / sizeof(gid_t) + 1); // len: the size it needs
	}
	return false;
}

} // namespace

int Server::start(std::string *why)
{
	if (started_)
		return -EALREADY;
	if (cfg_.path.empty() && cfg_.tcp.empty() && cfg_.http.empty()) {
		*why = "admin: neither a socket path nor a TCP or metrics address";
		return -EINVAL;
	}
	if (!cfg_.path.empty()) {
		if (cfg_.path.size() >= sizeof(sockaddr_un::sun_path)) {
			*why = "admin socket path longer than " +
			       std::to_string(sizeof(sockaddr_un::sun_path) - 1) +
			       " bytes: " + cfg_.path;
			return -ENAMETOOLONG;
		}
		struct stat st {
		};
		if (lstat(cfg_.path.c_str(), &st) == 0) {
			if (!stale_socket(cfg_.path)) {
				*why = "admin socket " + cfg_.path +
				       (S_ISSOCK(st.st_mode) ? ": another daemon answers on it"
				                             : ": exists and is not a socket");
				return -EADDRINUSE;
			}
			::unlink(cfg_.path.c_str());
		}
		// The directory (/run/ulp-targetd without systemd's RuntimeDirectory): one level,
		// owner only.
		if (auto slash = cfg_.path.rfind('/'); slash != std::string::npos && slash > 0)
			::mkdir(cfg_.path.substr(0, slash).c_str(), 0700);
		unix_fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
		if (unix_fd_ < 0) {
			*why = std::string("admin socket: ") + std::strerror(errno);
			return -errno;
		}
		sockaddr_un a{};
		a.sun_family = AF_UNIX;
		std::memcpy(a.sun_path, cfg_.path.c_str(), cfg_.path.size() + 1);
		// Created owner-only (umask), then given its mode: nobody else can connect in
		// between, and SO_PEERCRED checks every peer regardless.
		const mode_t old = ::umask(0177);
		const int rc = ::bind(unix_fd_, reinterpret_cast<sockaddr *>(&a), sizeof(a));
		const int e = errno;
		::umask(old);
		if (rc != 0) {
			*why = "admin socket " + cfg_.path + ": " + std::strerror(e);
			::close(unix_fd_);
			unix_fd_ = -1;
			return -e;
		}
		mode_t mode = cfg_.mode;
		if (cfg_.allowed_gid) {
			if (::chown(cfg_.path.c_str(), uid_t(-1), *cfg_.allowed_gid) != 0)
				ULP_LOG(Warn, Tool, "admin socket {}: chgrp {}: {}", cfg_.path,
				        *cfg_.allowed_gid, std::strerror(errno));
			mode |= 0060;
		}
		::chmod(cfg_.path.c_str(), mode);
		if (::listen(unix_fd_, 16) != 0) {
			*why = "admin socket " + cfg_.path + ": listen: " + std::strerror(errno);
			stop();
			return -EIO;
		}
	}
	if (!cfg_.tcp.empty())
		if (int rc = listen_tcp(cfg_.tcp, "admin TCP", &tcp_fd_, &tcp_port_, why); rc != 0)
			return rc;
	if (!cfg_.http.empty())
		if (int rc = listen_tcp(cfg_.http, "metrics HTTP", &http_fd_, &http_port_, why);
		    rc != 0)
			return rc;
	if (::pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0) {
		*why = std::string("admin: pipe: ") + std::strerror(errno);
		stop();
		return -EIO;
	}
	started_ = true;
	thread_.start([this] { loop(); });
	return 0;
}

bool parse_listen_address(const std::string &spec, sockaddr_in *out)
{
	std::string host = "127.0.0.1", p = spec;
	if (auto c = spec.rfind(':'); c != std::string::npos) {
		host = spec.substr(0, c);
		p = spec.substr(c + 1);
	}
	if (p.empty() || p.size() > 5 || p.find_first_not_of("0123456789") != std::string::npos)
		return false;
	const unsigned long n = std::stoul(p);
	*out = sockaddr_in{};
	out->sin_family = AF_INET;
	out->sin_port = htons(uint16_t(n));
	return n <= 65535 && inet_pton(AF_INET, host.c_str(), &out->sin_addr) == 1;
}

// "[HOST:]PORT" (IPv4; PORT alone: 127.0.0.1) bound and listening, non-blocking; a warning
// when not on loopback (the admin wrote that address: whoever reaches it is answered).
int Server::listen_tcp(const std::string &spec, const char *what, int *fd, uint16_t *port,
                       std::string *why)
{
	sockaddr_in a{};
	if (!parse_listen_address(spec, &a)) {
		*why = std::string(what) + " address " + spec + ": expected PORT or IPv4:PORT";
		stop();
		return -EINVAL;
	}
	*fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	int one = 1;
	if (*fd >= 0)
		setsockopt(*fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (*fd < 0 || ::bind(*fd, reinterpret_cast<sockaddr *>(&a), sizeof(a)) != 0 ||
	    ::listen(*fd, 16) != 0) {
		const int e = errno;
		*why = std::string(what) + " " + spec + ": " + std::strerror(e);
		stop();
		return -e;
	}
	socklen_t l = sizeof(a);
	getsockname(*fd, reinterpret_cast<sockaddr *>(&a), &l);
	*port = ntohs(a.sin_port);
	if ((ntohl(a.sin_addr.s_addr) >> 24) != 127)
		ULP_LOG(Warn, Tool,
		        "admin: {} listener on {} is not on loopback: whoever reaches it is "
		        "answered",
		        what, spec);
	return 0;
}

void Server::stop()
{
	if (thread_.joinable()) {
		char c = 1;
		(void)!::write(wake_[1], &c, 1);
		thread_.join(log::Sub::Tool,
		             "the admin socket's thread (a method that does not return?)");
	}
	clients_.clear();
	for (int *fd : {&unix_fd_, &tcp_fd_, &http_fd_, &wake_[0], &wake_[1]})
		if (*fd >= 0) {
			::close(*fd);
			*fd = -1;
		}
	if (started_ && !cfg_.path.empty())
		::unlink(cfg_.path.c_str());
	started_ = false;
}

ServerStats Server::stats()
{
	std::lock_guard g(lock_);
	return stats_;
}

void Server::refuse(int fd, const Error &e)
{
	// One line, best effort (the socket is fresh: its buffer takes it), then close.
	const std::string l = error_line(nullptr, e);
	(void)!::send(fd, l.data(), l.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
	::close(fd);
}

void Server::count_refusal(uint64_t ServerStats::*counter)
{
	std::lock_guard g(lock_);
	stats_.*counter += 1;
}

void Server::on_accept(int lfd, Kind kind)
{
	const bool unix_socket = kind == Kind::Unix;
	for (;;) {
		sockaddr_storage ss{};
		socklen_t sl = sizeof(ss);
		int fd = ::accept4(lfd, reinterpret_cast<sockaddr *>(&ss), &sl,
		                   SOCK_CLOEXEC | SOCK_NONBLOCK);
		if (fd < 0) {
			if (errno == EINTR)
				continue;
			return; // EAGAIN, or a transient error: poll tells us again
		}
		std::string who;
		if (unix_socket) {
			ucred cr{};
			socklen_t cl = sizeof(cr);
			if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &cl) != 0) {
				// Counted before the answer leaves: whoever reads the answer and
				// then stats() sees the count.
				count_refusal(&ServerStats::denied);
				refuse(fd, {kPermissionDenied, "no peer credentials", {}});
				continue;
			}
			const uid_t allowed = cfg_.allowed_uid ? *cfg_.allowed_uid : ::geteuid();
			const bool ok =
			    cr.uid == 0 || cr.uid == allowed ||
			    (cfg_.allowed_gid &&
			     (cr.gid == *cfg_.allowed_gid || peer_in_group(fd, *cfg_.allowed_gid)));
			who = "uid " + std::to_string(cr.uid) + " pid " + std::to_string(cr.pid);
			if (!ok) {
				ULP_LOG_RATELIMITED(
				    Warn, Tool, "admin: refused {} (not uid {}{})", who, allowed,
				    cfg_.allowed_gid
				        ? " or gid " + std::to_string(*cfg_.allowed_gid)
				        : std::string());
				count_refusal(&ServerStats::denied);
				refuse(fd, {kPermissionDenied,
				            "permission denied: uid " + std::to_string(cr.uid) +
				                " may not administer this daemon",
				            {}});
				continue;
			}
		} else {
			char buf[INET_ADDRSTRLEN] = "?";
			auto *in = reinterpret_cast<sockaddr_in *>(&ss);
			inet_ntop(AF_INET, &in->sin_addr, buf, sizeof(buf));
			who = std::string("tcp ") + buf + ":" + std::to_string(ntohs(in->sin_port));
		}
		if (kind == Kind::Http) {
			const size_t n = std::count_if(clients_.begin(), clients_.end(),
			                               [](const auto &c) { return c->http; });
			if (n >= cfg_.http_max_clients) {
				count_refusal(&ServerStats::busy);
				const std::string r =
				    http_response(503, "text/plain", "too many clients\n");
				(void)!::send(fd, r.data(), r.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
				::close(fd);
				continue;
			}
		} else if (size_t(std::count_if(clients_.begin(), clients_.end(),
		                                [](const auto &c) { return !c->http; })) >=
		           cfg_.max_clients) {
			count_refusal(&ServerStats::busy);
			refuse(fd, {kServerBusy,
			            "too many admin clients (" + std::to_string(cfg_.max_clients) +
			                "); try again",
			            {}});
			continue;
		}
		auto c = std::make_unique<Client>();
		c->fd = fd;
		c->who = who;
		c->http = kind == Kind::Http;
		c->timeout = c->http ? cfg_.http_timeout : cfg_.idle_timeout;
		c->last = clock::now();
		clients_.push_back(std::move(c));
		std::lock_guard g(lock_);
		stats_.accepted++;
	}
}

void Server::on_readable(Client &c)
{
	char buf[16384];
	for (;;) {
		const ssize_t n = ::recv(c.fd, buf, sizeof(buf), 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			break;
		if (n <= 0) {
			// The peer closed (or failed): answer nothing more. A last request without
			// its newline is not a request (the framing says so).
			c.closing = true;
			c.out.clear();
			c.out_off = 0;
			return;
		}
		c.in.append(buf, size_t(n));
		// Whole lines, one at a time.
		size_t start = 0;
		for (;;) {
			const size_t nl = c.in.find('\n', start);
			if (nl == std::string::npos)
				break;
			std::string_view line(c.in.data() + start, nl - start);
			if (!line.empty() && line.back() == '\r')
				line.remove_suffix(1);
			start = nl + 1;
			if (line.find_first_not_of(" \t") == std::string_view::npos)
				continue; // blank lines between requests are not requests
			c.last = clock::now();
			{
				std::lock_guard g(lock_);
				stats_.requests++;
			}
			if (line.size() > cfg_.max_request) {
				c.out += error_line(nullptr, {kParseError,
				                              "request longer than " +
				                                  std::to_string(cfg_.max_request) +
				                                  " bytes",
				                              {}});
				c.closing = true;
				std::lock_guard g(lock_);
				stats_.oversized++;
				break;
			}
			c.out += methods_.handle_line(line, Caller{c.who});
		}
		c.in.erase(0, start);
		if (c.closing)
			return;
		if (c.in.size() > cfg_.max_request) {
			c.out += error_line(nullptr, {kParseError,
			                              "request longer than " +
			                                  std::to_string(cfg_.max_request) +
			                                  " bytes; closing",
			                              {}});
			c.in.clear();
			c.closing = true;
			std::lock_guard g(lock_);
			stats_.oversized++;
			return;
		}
		if (c.out.size() - c.out_off > cfg_.max_pending) {
			ULP_LOG_RATELIMITED(Warn, Tool,
			                    "admin: {} does not read its responses; closed", c.who);
			c.out.clear();
			c.out_off = 0;
			c.closing = true;
			std::lock_guard g(lock_);
			stats_.slow_readers++;
			return;
		}
	}
}

void Server::drain(Client &c)
{
	char buf[4096];
	for (;;) {
		const ssize_t n = ::recv(c.fd, buf, sizeof(buf), 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return;
		if (n <= 0) {
			c.eof = true;
			return;
		}
	}
}

std::string Server::metrics_text(const PromOptions &o)
{
	const Method *m = methods_.find("stats_get");
	if (!m)
		throw MethodError{-ENOENT, "no stats_get method"};
	return prometheus_text(m->handler(json::object(), Caller{"metrics"}), o);
}

// One request head, bounded by kMaxHttpHead; answered, then the connection closes.
void Server::on_http_readable(Client &c)
{
	char buf[4096];
	for (;;) {
		const ssize_t n = ::recv(c.fd, buf, sizeof(buf), 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return;
		if (n <= 0) {
			c.closing = true; // gone before a whole head: nobody to answer
			c.eof = true;
			c.out.clear();
			c.out_off = 0;
			return;
		}
		// Never more than kMaxHttpHead + one read kept: the rest is not looked at.
		c.in.append(buf, size_t(n));
		const size_t end = http_head_end(c.in);
		if (end == std::string::npos && c.in.size() <= kMaxHttpHead)
			continue;
		// A head (bytes after it, a body nobody asked for, are not read), or too long.
		const HttpRequest r =
		    end == std::string::npos
		        ? HttpRequest{431, {}, {}, 0, {}}
		        : parse_http_request(std::string_view(c.in).substr(0, end));
		int status = r.status;
		std::string body, extra;
		const bool head = status == 0 && r.method == "HEAD";
		PromOptions po;
		std::string bad_query;
		if (status == 0 && r.path != "/metrics") {
			status = 404;
		} else if (status == 0 && r.method != "GET" && !head) {
			status = 405;
			extra = "Allow: GET, HEAD\r\n"; // RFC 9110 §15.5.6
		} else if (status == 0 && !parse_prometheus_query(r.query, &po, &bad_query)) {
			status = 400;
			body = bad_query + "\n";
		} else if (status == 0) {
			try {
				body = metrics_text(po);
				status = 200;
			} catch (const MethodError &e) {
				status = 500;
				body = e.message + "\n";
			} catch (const std::exception &e) {
				status = 500;
				body = std::string(e.what()) + "\n";
			}
		}
		if (status != 200 && body.empty())
			body = std::string(http_reason(status)) + "\n";
		c.out = http_response(status,
		                      status == 200 ? "text/plain; version=0.0.4; charset=utf-8"
		                                    : "text/plain",
		                      body, extra, head);
		c.out_off = 0;
		c.in.clear();
		c.closing = true;
		c.last = clock::now();
		if (status != 200)
			ULP_LOG_RATELIMITED(Debug, Tool, "metrics: {} answered {}", c.who, status);
		std::lock_guard g(lock_);
		stats_.http_requests++;
		if (status != 200)
			stats_.http_errors++;
		if (status == 431)
			stats_.oversized++;
		return;
	}
}

void Server::on_writable(Client &c)
{
	while (c.out_off < c.out.size()) {
		const ssize_t n = ::send(c.fd, c.out.data() + c.out_off, c.out.size() - c.out_off,
		                         MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return;
		if (n <= 0) {
			c.out.clear();
			c.out_off = 0;
			c.closing = true;
			return;
		}
		c.out_off += size_t(n);
	}
	c.out.clear();
	c.out_off = 0;
}

void Server::loop()
{
	ULP_LOG(Info, Tool, "admin: listening on {}{}{}{}", cfg_.path,
	        !cfg_.path.empty() && !cfg_.tcp.empty() ? " and " : "",
	        cfg_.tcp.empty() ? std::string() : "tcp " + cfg_.tcp,
	        cfg_.http.empty() ? std::string() : " metrics http " + cfg_.http);
	std::vector<pollfd> pfds;
	for (;;) {
		pfds.clear();
		pfds.push_back({wake_[0], POLLIN, 0});
		if (unix_fd_ >= 0)
			pfds.push_back({unix_fd_, POLLIN, 0});
		if (tcp_fd_ >= 0)
			pfds.push_back({tcp_fd_, POLLIN, 0});
		if (http_fd_ >= 0)
			pfds.push_back({http_fd_, POLLIN, 0});
		const size_t first_client = pfds.size();
		const auto now = clock::now();
		int timeout = -1;
		for (auto &c : clients_) {
			short ev = c->closing && !c->draining ? 0 : POLLIN;
			if (c->out_off < c->out.size())
				ev |= POLLOUT;
			pfds.push_back({c->fd, ev, 0});
			const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
			    c->last + c->timeout - now);
			const int ms = int(std::max<int64_t>(0, left.count()) + 1);
			timeout = timeout < 0 ? ms : std::min(timeout, ms);
		}
		const int n = ::poll(pfds.data(), pfds.size(), timeout);
		if (n < 0 && errno != EINTR)
			break;
		if (pfds[0].revents)
			break; // stop()
		for (size_t i = 1; i < first_client; i++)
			if (pfds[i].revents & POLLIN)
				on_accept(pfds[i].fd, pfds[i].fd == unix_fd_  ? Kind::Unix
				                      : pfds[i].fd == tcp_fd_ ? Kind::Tcp
				                                              : Kind::Http);
		// The clients as they were polled (on_accept appended new ones after them).
		const auto t = clock::now();
		for (size_t i = first_client; i < pfds.size(); i++) {
			Client &c = *clients_[i - first_client];
			if (pfds[i].revents & (POLLIN | POLLHUP | POLLERR))
				c.draining ? drain(c)
				: c.http   ? on_http_readable(c)
				           : on_readable(c);
			if (c.out_off < c.out.size())
				on_writable(c);
			if (!c.closing && c.http && t - c.last >= c.timeout) {
				// Connected and silent, or a head that never ends (RFC 9110
				// §15.5.9).
				c.out = http_response(408, "text/plain", "Request Timeout\n");
				c.out_off = 0;
				c.in.clear();
				c.closing = true;
				on_writable(c);
				std::lock_guard g(lock_);
				stats_.timeouts++;
			} else if (!c.closing && !c.http && t - c.last >= cfg_.idle_timeout) {
				// Connected and silent, or stuck half-way through a line.
				c.out += error_line(nullptr,
				                    {kInvalidRequest,
				                     "no complete request in " +
				                         std::to_string(cfg_.idle_timeout.count()) +
				                         " ms; closing",
				                     {}});
				c.closing = true;
				on_writable(c);
				std::lock_guard g(lock_);
				stats_.timeouts++;
			}
		}
		// Closed: those done writing, and those closing that cannot take the rest now
		// (a peer gone or not reading: nothing waits for it).
		std::erase_if(clients_, [&](const std::unique_ptr<Client> &c) {
			if (!c->closing)
				return false;
			if (c->out_off < c->out.size())
				on_writable(*c);
			const bool written = c->out_off >= c->out.size();
			if (c->http && written && !c->eof && !c->draining) {
				// A close with bytes unread would reset the connection, and a reset
				// can destroy the answer before the client reads it (RFC 9112
				// §9.6): close our side, read what the client still sends, then
				// close.
				::shutdown(c->fd, SHUT_WR);
				c->draining = true;
				c->last = t;
				return false;
			}
			if (c->draining)
				return c->eof || t - c->last >= c->timeout;
			return written || t - c->last >= 2 * c->timeout;
		});
	}
	clients_.clear();
}

} // namespace ulp::admin
