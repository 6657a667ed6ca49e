// SPDX-License-Identifier: MIT
// admin/server.h - the admin socket: a Unix-domain stream socket (SPDK's convention) on
// which JSON-RPC 2.0 requests (admin/rpc.h, one per line) are answered by a method table,
// on one thread of its own. Optionally a TCP listener as well, on loopback unless told
// otherwise.
//
// Who may talk: the socket file is created with mode 0600 (0660 with a group), and every
// peer is checked once more with SO_PEERCRED when it connects: root, the allowed uid (the
// daemon's own by default) or, with allowed_gid, a member of that group (its primary group,
// SO_PEERCRED, or a supplementary one, SO_PEERGROUPS). Anyone else gets one
// error response (kPermissionDenied) and the connection is closed. TCP peers carry no
// credentials: a TCP listener admits whoever can reach it, which is why there is none unless
// configured and why it binds 127.0.0.1 when given only a port.
//
// Bounds, so that no client can hang, starve or crash the daemon: a request line longer
// than max_request gets a parse error and the connection is closed (there is no resuming a
// stream cut in the middle); a client with no complete request for idle_timeout gets an
// error and is closed; at most max_clients at once (the next gets kServerBusy); a client
// that does not read its responses is closed once max_pending bytes wait for it. Requests
// run one at a time, in arrival order, on the server thread: the methods see no concurrency
// of their own making.
//
// The metrics endpoint (ServerConfig::http, off unless configured): an HTTP listener on the
// same thread, `GET /metrics` answered with the stats_get method's result in Prometheus text
// (prometheus.h: the bytes `ulpctl stats --prometheus` prints; ?sessions=1 adds the
// per-session series, another query is 400), 404 for another path, 405
// for another method, 400 for a malformed head, 431 past kMaxHttpHead (http.h). One request
// a connection; a client with no complete head in http_timeout gets 408 and is closed; at
// most http_max_clients at once (the next gets 503). Like the TCP admin listener it binds
// 127.0.0.1 when given only a port, and logs a warning when told a non-loopback address.
#pragma once

#include "admin/prometheus.h"
#include "admin/rpc.h"
#include "core/bounded_thread.h"

#include <netinet/in.h>
#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>

namespace ulp::admin
{

struct ServerConfig {
	std::string path;                 // the Unix socket; empty: none
	mode_t mode = 0600;               // its permissions (0660 when allowed_gid)
	std::optional<uid_t> allowed_uid; // unset: the daemon's effective uid
	std::optional<gid_t> allowed_gid; // peers in this group (primary or supplementary), too
	std::string tcp;                  // "HOST:PORT" or "PORT" (127.0.0.1); empty: none
	size_t max_request = kMaxRequestBytes;         // one request line, bytes
	size_t max_pending = 16u << 20;                // responses a client has not read, bytes
	std::chrono::milliseconds idle_timeout{10000}; // no complete request this long: closed
	size_t max_clients = 16;                       // connected at once
	std::string http;            // metrics: "HOST:PORT" or "PORT" (127.0.0.1); empty: none
	size_t http_max_clients = 8; // metrics clients connected at once
	std::chrono::milliseconds http_timeout{5000}; // no complete request head this long: 408
};

// Counters (tests, diagnostics).
struct ServerStats {
	uint64_t accepted = 0;      // connections accepted
	uint64_t denied = 0;        // refused by SO_PEERCRED
	uint64_t busy = 0;          // refused: max_clients reached
	uint64_t requests = 0;      // request lines handled
	uint64_t timeouts = 0;      // clients closed for idle_timeout
	uint64_t oversized = 0;     // clients closed for a request past max_request
	uint64_t slow_readers = 0;  // clients closed for max_pending
	uint64_t http_requests = 0; // metrics requests answered (any status but 408 and 503)
	uint64_t http_errors = 0;   // of them, answered 4xx or 5xx
};

// "[HOST:]PORT" as the TCP and metrics listeners take it: an IPv4 address (127.0.0.1 when
// only a port is given) and a port 0..65535. false when it is not that.
bool parse_listen_address(const std::string &spec, sockaddr_in *out);

class Server
{
public:
	Server(const Methods &methods, ServerConfig cfg);
	~Server(); // stop()
	Server(const Server &) = delete;
	Server &operator=(const Server &) = delete;

	// Bind and listen (a stale socket file, one nobody answers on, is replaced; a live one
	// is not), then start the thread. 0, or a negative errno with *why.
	int start(std::string *why);
	// Close every client and the listeners, join the thread, remove the socket file.
	void stop();

	const ServerConfig &cfg() const { return cfg_; }
	uint16_t tcp_port() const { return tcp_port_; }   // the TCP listener's (port 0 given)
	uint16_t http_port() const { return http_port_; } // the metrics listener's, likewise
	ServerStats stats();

private:
	struct Client;
	void loop();
	enum class Kind : uint8_t { Unix, Tcp, Http }; // what a listener speaks
	int listen_tcp(const std::string &spec, const char *what, int *fd, uint16_t *port,
	               std::string *why);
	// Counts a refused client in stats_ (under lock_), before the refusal is sent.
	void count_refusal(uint64_t ServerStats::*counter);
	void on_accept(int lfd, Kind kind);
	void on_readable(Client &c);
	void on_http_readable(Client &c);
	void drain(Client &c); // an answered HTTP client's further bytes, read and dropped
	std::string metrics_text(const PromOptions &o); // stats_get in Prometheus text
	void on_writable(Client &c);
	void refuse(int fd, const Error &e);

	const Methods &methods_;
	ServerConfig cfg_;
	int unix_fd_ = -1;
	int tcp_fd_ = -1;
	uint16_t tcp_port_ = 0;
	int http_fd_ = -1;
	uint16_t http_port_ = 0;
	int wake_[2] = {-1, -1}; // stop()'s wake-up (a pipe)
	BoundedThread thread_;
	std::vector<std::unique_ptr<Client>> clients_; // the server thread's
	std::mutex lock_;                              // guards stats_
	ServerStats stats_;
	bool started_ = false;
};

} // namespace ulp::admin
