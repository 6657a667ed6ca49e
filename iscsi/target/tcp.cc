// SPDX-License-Identifier: MIT
// iscsi/target/tcp.cc - the iSCSI/TCP transport (see tcp.h).
#include "iscsi/target/tcp.h"
#include "core/bounded_thread.h"
#include "core/deadline.h"
#include "core/epoll_loop.h"
#include "core/log.h"
#include "core/thread_name.h"
#include "core/turn.h"

#include "iscsi/target/conn.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>

namespace ulp::iscsi::target
{

namespace
{

constexpr size_t kReadChunk = 256 * 1024; // bytes read from a socket per recv
constexpr size_t kReadBudget = 1 << 20;   // bytes read per connection per loop turn (fairness)
constexpr int kMaxIov = 64;               // iovecs per sendmsg
// The largest data segment the reader will ever buffer: what we may declare as
// MaxRecvDataSegmentLength (RFC 7143 13.12 allows up to 2^24-1).
constexpr uint32_t kReaderCap = 1u << 20;

std::string addr_str(const sockaddr_storage &ss)
{
	char host[INET6_ADDRSTRLEN] = "?";
	uint16_t port = 0;
	if (ss.ss_family == AF_INET) {
		auto *s = reinterpret_cast<const sockaddr_in *>(&ss);
		inet_ntop(AF_INET, &s->sin_addr, host, sizeof(host));
		port = ntohs(s->sin_port);
		return std::string(host) + ":" + std::to_string(port);
	}
	auto *s = reinterpret_cast<const sockaddr_in6 *>(&ss);
	inet_ntop(AF_INET6, &s->sin6_addr, host, sizeof(host));
	port = ntohs(s->sin6_port);
	return "[" + std::string(host) + "]:" + std::to_string(port);
}

} // namespace

class TcpConn;

// A listening socket (a portal) watched on worker 0's loop: readable means connections wait
// in its backlog.
struct Listener final : LoopWatch {
	Listener(TcpWorker &w, int fd) : w(w), fd(fd) {}
	void loop_readable() override;
	// The loop ends: stop watching. The socket stays open, as the portal does (TcpServer
	// closes it through stop_accepting or close_portal).
	void loop_ending() override;

	TcpWorker &w;
	const int fd; // the listening socket, owned by the worker (closed when the portal goes)
};

// A worker thread runs an EpollLoop (core/epoll_loop.h) and installs it as the thread's
// EventLoop: its listeners and connections are watches of that loop, and so is a
// backstore's per-worker ring, whose completions then run on the worker that submitted them:
// one I/O never crosses threads. Other threads reach the worker through the loop's post().
class TcpWorker
{
public:
	TcpWorker(Target &t, const TcpConfig &cfg, int index);
	~TcpWorker();

	// Before start(): a listening socket for worker 0 to accept on.
	void add_listener(int fd) { pre_listen_.push_back(fd); }
	void set_peers(std::vector<TcpWorker *> all) { all_ = std::move(all); }
	int start();
	void stop();
	// Any thread: a new connection for this worker.
	void give(int fd);
	// Any thread (under the connection's inbox lock): run c's events soon.
	void wake(TcpConn *c);
	bool on_thread() const { return std::this_thread::get_id() == tid_; }
	int index() const { return index_; }
	EpollLoop &loop() { return loop_; }
	size_t conns() const { return nconns_.load(); }
	// Connections dealt to it and not reaped yet: what the acceptor balances.
	size_t load() const { return load_.load(std::memory_order_relaxed); }
	// The connection needs a flush and an event run at the end of this loop turn.
	void mark(TcpConn *c);
	// Any thread: close the listening sockets (the worker does it on its loop).
	void close_listeners();
	// Any thread: start accepting on listening socket fd, or stop and close it (a portal
	// added or removed at run time; the worker does it on its loop).
	void add_listener_async(int fd);
	void close_listener_async(int fd);
	// Worker thread: take the connections a listener has waiting.
	void accept_all(int lfd);

private:
	void run();
	void adopt(int fd);
	void reap();
	// Worker thread (or before start): watch listening socket fd; 0 or -errno.
	int listen_on(int fd);
	// Worker thread: stop watching listening socket fd and close it. Safe in the middle of
	// a turn: the loop drops a removed watch's later events (core/event_loop.h).
	void close_listener(int fd);
	// Worker thread: the connections other threads woke, to run this turn.
	void take_woken();

	Target &target_;
	TcpConfig cfg_;
	int index_;
	EpollLoop loop_; // "tcp worker N": the epoll set, post()'s queue, the loop's end
	BoundedThread thread_;
	std::thread::id tid_;
	std::atomic<bool> stop_{false};
	std::vector<int> pre_listen_;                      // add_listener's, until start()
	std::vector<std::unique_ptr<Listener>> listeners_; // watched; worker thread only
	std::vector<TcpWorker *> all_; // every worker, for dealing accepted sockets
	size_t next_ = 0;              // where the search for the least loaded starts
	std::atomic<size_t> load_{0};  // see load(); the acceptor adds, reap() takes

	std::mutex lock_;              // guards woken_
	std::vector<TcpConn *> woken_; // wake()'s, until take_woken; reap() takes a done one out

	std::vector<std::unique_ptr<TcpConn>> conns_; // owned; worker thread only
	std::vector<TcpConn *> marked_;               // to flush/run this turn
	std::atomic<size_t> nconns_{0};
	std::chrono::steady_clock::time_point next_tick_;
};

// A connection is a watch of its worker's loop: EPOLLIN always, EPOLLOUT while a send was
// short (flush).
class TcpConn final : public Conn, public LoopWatch
{
public:
	TcpConn(Target &t, TcpWorker &w, int fd, std::string peer, std::string local)
	    : Conn(t, Transport::Tcp, std::move(peer), std::move(local), Mode::Owner), w_(w),
	      fd_(fd), reader_(kReaderCap), rbuf_(kReadChunk)
	{
	}
	~TcpConn() override
	{
		if (fd_ >= 0)
			::close(fd_);
	}

	int fd() const { return fd_; }
	bool marked = false;                   // in the worker's marked_ list
	std::atomic<bool> wake_pending{false}; // in the worker's woken_ list

	void flush();

	// LoopWatch (worker thread): read what came, and run and flush at the end of the turn
	// (an EPOLLOUT alone is for the flush).
	void loop_events(uint32_t events) override
	{
		if (events & (EPOLLIN | EPOLLHUP | EPOLLERR))
			on_readable();
		w_.mark(this);
	}
	void loop_readable() override { loop_events(EPOLLIN); }
	// The loop ends: stop watching. The connection stays, as the worker's destructor
	// finds it (detached when done, else left allocated).
	void loop_ending() override
	{
		if (!closed_)
			w_.loop().del_fd(fd_);
	}

protected:
	void queue_pdu(OutPdu *p) override
	{
		if (closed_) {
			pdu_done(p, false);
			return;
		}
		outq_.push_back(p);
		w_.mark(this);
	}
	void kick() override
	{
		if (w_.on_thread())
			w_.mark(this); // run at the end of this loop turn, no eventfd needed
		else if (!wake_pending.exchange(true))
			w_.wake(this);
	}
	void close_transport() override;
	int worker() const override { return w_.index(); }

private:
	void on_readable();
	// Wait for EPOLLOUT too (the socket is full) or no longer.
	void want_out(bool on);

	TcpWorker &w_;
	int fd_;
	PduReader reader_;
	std::vector<uint8_t> rbuf_;
	std::deque<OutPdu *> outq_;
	bool closed_ = false;
	bool epollout_ = false; // EPOLLOUT is asked for: a send was short
};

// ---- TcpConn --------------------------------------------------------------------------------

void TcpConn::on_readable()
{
	size_t budget = kReadBudget;
	while (!closed_ && budget) {
		ssize_t n = ::recv(fd_, rbuf_.data(), std::min(rbuf_.size(), budget), MSG_DONTWAIT);
		if (n == 0) {
			on_transport_error("peer closed the connection");
			return;
		}
		if (n < 0) {
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				return;
			if (errno == EINTR)
				continue;
			const int err = errno;
			on_transport_error(std::string("recv: ") + std::strerror(err));
			return;
		}
		budget -= size_t(n);
		// After each PDU the reader takes the receive limit and digests again: the login
		// may have switched them, and they apply from the next PDU header on.
		auto pdu_in = [this](const Pdu &pdu, PduError err) {
			on_pdu(pdu, err);
			reader_.set_max_recv_dsl(max_recv_dsl());
			reader_.set_digests(digests());
			return !closed_;
		};
		PduError e = feed_pdus(reader_, {rbuf_.data(), size_t(n)}, pdu_in);
		if (e != PduError::None) {
			on_transport_error(std::string("bad PDU: ") + pdu_error_name(e));
			return;
		}
	}
	if (!closed_ && budget == 0)
		w_.mark(this); // more may be waiting: epoll is level triggered, it comes back
}

void TcpConn::flush()
{
	while (!closed_ && !outq_.empty()) {
		iovec iov[kMaxIov];
		int n = 0;
		for (OutPdu *p : outq_) {
			if (n + 3 > kMaxIov)
				break;
			size_t skip = p->sent;
			auto add = [&](const uint8_t *b, size_t len) {
				if (skip >= len) {
					skip -= len;
					return;
				}
				iov[n++] = iovec{const_cast<uint8_t *>(b) + skip, len - skip};
				skip = 0;
			};
			add(p->hdr, p->hdr_len);
			add(p->data.data(), p->data.size());
			add(p->trailer, p->trailer_len);
		}
		msghdr mh{};
		mh.msg_iov = iov;
		mh.msg_iovlen = size_t(n);
		ssize_t w = ::sendmsg(fd_, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK) {
				if (!epollout_)
					want_out(true);
				return;
			}
			const int err = errno;
			on_transport_error(std::string("send: ") + std::strerror(err));
			return;
		}
		size_t left = size_t(w);
		while (left && !outq_.empty()) {
			OutPdu *p = outq_.front();
			size_t rest = p->total() - p->sent;
			if (left < rest) {
				p->sent += left;
				left = 0;
				break;
			}
			left -= rest;
			outq_.pop_front();
			pdu_done(p, true); // may close the transport (a logout response)
			if (closed_)
				return;
		}
	}
	if (!closed_ && epollout_)
		want_out(false);
}

void TcpConn::want_out(bool on)
{
	// Only while a send is short: a socket with room is always writable, and a level
	// triggered EPOLLOUT would wake the worker on every turn.
	if (int rc = w_.loop().modify(fd_, on ? EPOLLIN | EPOLLOUT : EPOLLIN); rc != 0)
		ULP_LOG_RATELIMITED(Error, Iscsi, "tcp: {}: epoll: {}", peer(), std::strerror(-rc));
	epollout_ = on;
}

void TcpConn::close_transport()
{
	if (closed_)
		return;
	closed_ = true;
	w_.loop().del_fd(fd_);
	::shutdown(fd_, SHUT_RDWR);
	::close(fd_);
	fd_ = -1;
	while (!outq_.empty()) {
		OutPdu *p = outq_.front();
		outq_.pop_front();
		pdu_done(p, false);
	}
}

// ---- Listener -------------------------------------------------------------------------------

void Listener::loop_readable()
{
	w.accept_all(fd);
}

void Listener::loop_ending()
{
	w.loop().del_fd(fd);
}

// ---- TcpWorker ------------------------------------------------------------------------------

TcpWorker::TcpWorker(Target &t, const TcpConfig &cfg, int index)
    : target_(t), cfg_(cfg), index_(index), loop_("tcp worker " + std::to_string(index))
{
}

TcpWorker::~TcpWorker()
{
	stop();
	for (auto &c : conns_) {
		if (!c->done()) {
			// Still holding commands the core may call back for: freeing it would be a
			// use-after-free. Leak it, loudly.
			ULP_LOG(Error, Iscsi,
			        "tcp: connection {} still {} at shutdown; left allocated",
			        c->peer(), conn_state_str(c->state()));
			c.release();
			continue;
		}
		c->detach();
	}
	conns_.clear();
}

int TcpWorker::start()
{
	if (int rc = loop_.init(); rc != 0)
		return rc;
	// The loop's owner is this thread until the worker's takes it over (run).
	for (int fd : pre_listen_)
		if (int rc = listen_on(fd); rc != 0)
			return rc;
	pre_listen_.clear();
	thread_.start([this] { run(); });
	// Named and bound here, before start() returns: once the daemon says it is ready, its
	// workers are what /proc and its configuration say.
	set_thread_name(thread_.native_handle(), "ulp-tcp/" + std::to_string(index_));
	if (!cfg_.cpus.empty()) {
		const int cpu = cfg_.cpus[size_t(index_) % cfg_.cpus.size()];
		cpu_set_t set;
		CPU_ZERO(&set);
		CPU_SET(cpu, &set);
		if (int e = pthread_setaffinity_np(thread_.native_handle(), sizeof(set), &set))
			ULP_LOG(Warn, Iscsi,
			        "tcp worker {}: cannot bind to CPU {}: {}; it runs "
			        "where the kernel puts it",
			        index_, cpu, std::strerror(e));
		else
			ULP_LOG(Info, Iscsi, "tcp worker {} runs on CPU {}", index_, cpu);
	}
	return 0;
}

void TcpWorker::stop()
{
	if (!thread_.joinable())
		return;
	stop_ = true;
	loop_.wake();
	thread_.join(log::Sub::Iscsi, "a TCP worker (a connection's teardown hangs?)");
}

int TcpWorker::listen_on(int fd)
{
	auto l = std::make_unique<Listener>(*this, fd);
	if (int rc = loop_.add_fd(fd, l.get()); rc != 0)
		return rc;
	listeners_.push_back(std::move(l));
	return 0;
}

void TcpWorker::close_listener(int fd)
{
	auto it = std::find_if(listeners_.begin(), listeners_.end(),
	                       [&](const auto &l) { return l->fd == fd; });
	if (it == listeners_.end())
		return;
	loop_.del_fd(fd);
	::close(fd);
	listeners_.erase(it);
}

// Asked of the worker from other threads: run on its loop. Once the loop has ended, post()
// refuses and nothing happens, as nothing would on a stopped worker.

void TcpWorker::close_listeners()
{
	loop_.post([this] {
		while (!listeners_.empty())
			close_listener(listeners_.back()->fd);
	});
}

void TcpWorker::add_listener_async(int fd)
{
	loop_.post([this, fd] {
		if (int rc = listen_on(fd); rc != 0) {
			ULP_LOG(Error, Iscsi, "tcp: epoll of a new portal: {}", std::strerror(-rc));
			::close(fd);
		}
	});
}

void TcpWorker::close_listener_async(int fd)
{
	loop_.post([this, fd] { close_listener(fd); });
}

void TcpWorker::give(int fd)
{
	auto take = [this, fd] {
		// Stopping (the target has stopped: TcpServer's contract): a connection adopted
		// now could not finish its login before the worker frees its connections.
		if (stop_.load()) {
			load_.fetch_sub(1, std::memory_order_relaxed);
			::close(fd);
			return;
		}
		adopt(fd);
	};
	if (!loop_.post(std::move(take)))
		::close(fd); // the worker has ended: nobody would serve it
}

void TcpWorker::wake(TcpConn *c)
{
	// Through woken_, not a function holding c: reap() may free c before a posted function
	// ran, and takes it out of woken_ first. One take_woken posted per batch of wake-ups.
	bool first;
	{
		std::lock_guard g(lock_);
		first = woken_.empty();
		woken_.push_back(c);
	}
	if (first)
		loop_.post([this] { take_woken(); });
}

void TcpWorker::take_woken()
{
	std::vector<TcpConn *> woken;
	{
		std::lock_guard g(lock_);
		woken.swap(woken_);
	}
	for (TcpConn *c : woken) {
		c->wake_pending = false;
		mark(c);
	}
}

void TcpWorker::mark(TcpConn *c)
{
	if (!c->marked) {
		c->marked = true;
		marked_.push_back(c);
	}
}

void TcpWorker::accept_all(int lfd)
{
	for (;;) {
		int fd = ::accept4(lfd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EINTR)
				continue;
			// EMFILE, ENFILE, ENOBUFS, ENOMEM: the listener stays readable, so this
			// comes back on every pass of the loop until the condition clears.
			if (errno != EAGAIN && errno != EWOULDBLOCK)
				ULP_LOG_RATELIMITED(Error, Iscsi, "tcp: accept: {}",
				                    std::strerror(errno));
			return;
		}
		// The least loaded worker, the first of equals after the last one chosen: a
		// connection then stays on its worker for life, so its commands never cross
		// cores, and workers fill evenly as sessions come and go.
		TcpWorker *w = this;
		if (!all_.empty()) {
			const size_t n = all_.size();
			size_t best = next_ % n;
			for (size_t i = 1; i < n; i++) {
				const size_t k = (next_ + i) % n;
				if (all_[k]->load() < all_[best]->load())
					best = k;
			}
			next_ = best + 1;
			w = all_[best];
		}
		w->load_.fetch_add(1, std::memory_order_relaxed);
		if (w == this)
			adopt(fd);
		else
			w->give(fd);
	}
}

void TcpWorker::adopt(int fd)
{
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (cfg_.sndbuf)
		setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &cfg_.sndbuf, sizeof(cfg_.sndbuf));
	if (cfg_.rcvbuf)
		setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &cfg_.rcvbuf, sizeof(cfg_.rcvbuf));
	sockaddr_storage peer{}, local{};
	socklen_t pl = sizeof(peer), ll = sizeof(local);
	getpeername(fd, reinterpret_cast<sockaddr *>(&peer), &pl);
	getsockname(fd, reinterpret_cast<sockaddr *>(&local), &ll);
	auto c = std::make_unique<TcpConn>(target_, *this, fd, addr_str(peer), addr_str(local));
	if (int rc = loop_.add_fd(fd, c.get(), EPOLLIN); rc != 0)
		c->on_transport_error(std::string("epoll: ") + std::strerror(-rc));
	conns_.push_back(std::move(c));
	nconns_ = conns_.size();
}

void TcpWorker::reap()
{
	for (auto it = conns_.begin(); it != conns_.end();) {
		TcpConn *c = it->get();
		if (!c->done()) {
			++it;
			continue;
		}
		// Off the acceptor's count before the target's list: whoever sees the connection
		// gone there (connections_open) finds the worker's load dropped already.
		load_.fetch_sub(1, std::memory_order_relaxed);
		c->detach(); // no post() is running on it, and none will come
		{
			std::lock_guard g(lock_);
			std::erase(woken_, c);
		}
		std::erase(marked_, c);
		it = conns_.erase(it);
	}
	nconns_ = conns_.size();
}

void TcpWorker::run()
{
	tid_ = std::this_thread::get_id();
	loop_.set_owner();
	EventLoopScope installed(&loop_);
	next_tick_ = std::chrono::steady_clock::now() + cfg_.tick;
	while (!stop_.load()) {
		auto now = std::chrono::steady_clock::now();
		int timeout = poll_timeout_ms(next_tick_, now);
		if (!marked_.empty())
			timeout = 0;
		// The connections' and listeners' events, the backstores' watches, and what other
		// threads posted (new connections, wake-ups, portal changes).
		if (int rc = loop_.turn(timeout, {}); rc < 0)
			ULP_LOG_RATELIMITED(Error, Iscsi, "{}: epoll_wait: {}", loop_.name(),
			                    std::strerror(-rc));
		// Run what the input and the other threads produced, then write it out.
		// A connection marked again while this runs (its own output, or an event posted
		// by another connection of this worker) is appended and run again. A turn of the
		// thread (core/turn.h): the commands all the connections started go to a file
		// LU's ring with one system call at its end, not one each.
		{
			TurnScope turn;
			for (size_t i = 0; i < marked_.size(); i++) {
				TcpConn *c = marked_[i];
				c->marked = false;
				c->run_events();
				c->flush();
			}
			marked_.clear();
		}
		now = std::chrono::steady_clock::now();
		if (now >= next_tick_) {
			next_tick_ = now + cfg_.tick;
			for (auto &c : conns_) {
				c->on_tick(now);
				c->run_events();
				c->flush();
			}
			reap();
		}
	}
	installed.release(); // the watches end with no loop on the thread (core/event_loop.h)
	loop_.end();
}

// ---- TcpServer ------------------------------------------------------------------------------

TcpServer::TcpServer(Target &target, const TcpConfig &cfg) : target_(target), cfg_(cfg)
{
	if (cfg_.workers < 1)
		cfg_.workers = 1;
}

TcpServer::~TcpServer()
{
	stop();
	for (int fd : listen_fds_)
		if (fd >= 0)
			::close(fd);
}

int TcpServer::listen(const std::string &host, uint16_t port, std::string *why)
{
	sockaddr_storage ss{};
	socklen_t len;
	const bool v6 = host.find(':') != std::string::npos;
	if (v6) {
		auto *s = reinterpret_cast<sockaddr_in6 *>(&ss);
		s->sin6_family = AF_INET6;
		s->sin6_port = htons(port);
		std::string h = host;
		if (h.size() > 2 && h.front() == '[')
			h = h.substr(1, h.size() - 2);
		if (inet_pton(AF_INET6, h.c_str(), &s->sin6_addr) != 1) {
			*why = "not an IPv6 address: " + host;
			return -EINVAL;
		}
		len = sizeof(*s);
	} else {
		auto *s = reinterpret_cast<sockaddr_in *>(&ss);
		s->sin_family = AF_INET;
		s->sin_port = htons(port);
		if (host.empty())
			s->sin_addr.s_addr = htonl(INADDR_ANY);
		else if (inet_pton(AF_INET, host.c_str(), &s->sin_addr) != 1) {
			*why = "not an IPv4 address: " + host;
			return -EINVAL;
		}
		len = sizeof(*s);
	}
	int fd = ::socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		const int err = errno;
		*why = std::string("socket: ") + std::strerror(err);
		return -err;
	}
	int one = 1;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (::bind(fd, reinterpret_cast<sockaddr *>(&ss), len) != 0 || ::listen(fd, 128) != 0) {
		int e = errno;
		*why = "listen on " + host + ":" + std::to_string(port) + ": " + std::strerror(e);
		::close(fd);
		return -e;
	}
	sockaddr_storage bound{};
	socklen_t bl = sizeof(bound);
	getsockname(fd, reinterpret_cast<sockaddr *>(&bound), &bl);
	uint16_t p = ss.ss_family == AF_INET
	                 ? ntohs(reinterpret_cast<sockaddr_in *>(&bound)->sin_port)
	                 : ntohs(reinterpret_cast<sockaddr_in6 *>(&bound)->sin6_port);
	ports_.push_back(p);
	fds_.push_back(fd);
	if (started_)
		workers_[0]->add_listener_async(fd); // a portal added while serving
	else
		listen_fds_.push_back(fd);
	return 0;
}

int TcpServer::close_portal(size_t i)
{
	if (i >= fds_.size() || fds_[i] < 0)
		return -ENOENT;
	const int fd = fds_[i];
	fds_[i] = -1;
	ports_[i] = 0;
	if (started_) {
		workers_[0]->close_listener_async(fd);
	} else {
		std::erase(listen_fds_, fd);
		::close(fd);
	}
	return 0;
}

uint16_t TcpServer::port(size_t i) const
{
	return i < ports_.size() ? ports_[i] : 0;
}

int TcpServer::start()
{
	if (started_)
		return -EALREADY;
	for (int i = 0; i < cfg_.workers; i++)
		workers_.push_back(std::make_unique<TcpWorker>(target_, cfg_, i));
	std::vector<TcpWorker *> all;
	for (auto &w : workers_)
		all.push_back(w.get());
	for (auto &w : workers_)
		w->set_peers(all);
	for (int fd : listen_fds_)
		workers_[0]->add_listener(fd);
	listen_fds_.clear(); // worker 0 owns them now
	for (auto &w : workers_)
		if (int rc = w->start())
			return rc;
	started_ = true;
	return 0;
}

void TcpServer::stop_accepting()
{
	// Worker 0 owns the listeners; closing them from here races its epoll_wait only
	// harmlessly (a closed fd leaves the epoll set), but do it on a stopped loop when we can.
	if (!workers_.empty())
		workers_[0]->close_listeners();
}

void TcpServer::stop()
{
	for (auto &w : workers_)
		w->stop();
}

size_t TcpServer::conns() const
{
	size_t n = 0;
	for (auto &w : workers_)
		n += w->conns();
	return n;
}

} // namespace ulp::iscsi::target
