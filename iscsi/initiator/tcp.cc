// SPDX-License-Identifier: MIT
// iscsi/initiator/tcp.cc - the initiator's iSCSI/TCP transport (see initiator_transport.h):
// a non-blocking socket, a bounded connect, PDUs gathered into sendmsg, and the incoming
// stream cut into PDUs by PduReader (which checks every length before it buffers a byte).
#include "core/deadline.h"
#include "iscsi/initiator/transport.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>

namespace ulp::iscsi::initiator
{

namespace
{

using clock = std::chrono::steady_clock;

constexpr size_t kStageLen = 256 * 1024; // bytes taken from the socket per recv
constexpr size_t kReadBudget = 4u << 20; // bytes read per poll() (lets sends interleave)
constexpr int kMaxIov = 128;             // iovecs per sendmsg

std::string sockaddr_str(const sockaddr_storage &ss)
{
	char host[INET6_ADDRSTRLEN] = "?";
	if (ss.ss_family == AF_INET) {
		auto *s = reinterpret_cast<const sockaddr_in *>(&ss);
		inet_ntop(AF_INET, &s->sin_addr, host, sizeof(host));
		return std::string(host) + ":" + std::to_string(ntohs(s->sin_port));
	}
	auto *s = reinterpret_cast<const sockaddr_in6 *>(&ss);
	inet_ntop(AF_INET6, &s->sin6_addr, host, sizeof(host));
	return "[" + std::string(host) + "]:" + std::to_string(ntohs(s->sin6_port));
}

class TcpTransport final : public InitiatorTransport
{
public:
	explicit TcpTransport(uint32_t hard_cap) : reader_(hard_cap), stage_(kStageLen) {}
	~TcpTransport() override { close(); }

	Transport kind() const override { return Transport::Tcp; }
	void attach(TransportSink *sink) override { sink_ = sink; }
	bool connect(const std::string &host, uint16_t port,
	             std::chrono::milliseconds timeout) override;
	void queue(TxPdu *p) override { txq_.push_back(p); }
	bool poll(std::chrono::milliseconds timeout) override;
	void set_recv(uint32_t max_recv_dsl, Digests d) override
	{
		reader_.set_max_recv_dsl(max_recv_dsl);
		reader_.set_digests(d);
	}
	void close() override;
	bool connected() const override { return fd_ >= 0; }
	const std::string &why() const override { return why_; }
	std::string local_address() const override { return local_; }
	std::string peer_address() const override { return peer_; }

private:
	bool fail(std::string why);
	bool flush();     // write queued PDUs until done or EAGAIN; false on error
	bool read_some(); // read and deliver; false on error or EOF

	TransportSink *sink_ = nullptr;
	int fd_ = -1;
	PduReader reader_;
	std::vector<uint8_t> stage_; // bytes read, not yet fed to the reader
	size_t stage_off_ = 0;       // first unfed byte in stage_
	size_t stage_len_ = 0;       // bytes in stage_
	std::deque<TxPdu *> txq_;    // queued, in order; front is partly sent
	std::string why_;
	std::string local_, peer_;
	bool failed_ = false; // fail() ran: poll() answers false from now on
};

bool TcpTransport::fail(std::string why)
{
	if (!failed_) {
		failed_ = true;
		why_ = std::move(why);
	}
	close();
	return false;
}

bool TcpTransport::connect(const std::string &host, uint16_t port,
                           std::chrono::milliseconds timeout)
{
	const auto deadline = clock::now() + timeout;
	addrinfo hints{};
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_NUMERICSERV;
	addrinfo *res = nullptr;
	const std::string svc = std::to_string(port);
	if (int rc = getaddrinfo(host.c_str(), svc.c_str(), &hints, &res); rc != 0) {
		why_ = "cannot resolve " + host + ": " + gai_strerror(rc);
		failed_ = true;
		return false;
	}
	std::string last = "no address for " + host;
	for (addrinfo *ai = res; ai; ai = ai->ai_next) {
		int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
		                  ai->ai_protocol);
		if (fd < 0) {
			const int err = errno;
			last = std::string("socket: ") + std::strerror(err);
			continue;
		}
		int one = 1;
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		int rc = ::connect(fd, ai->ai_addr, ai->ai_addrlen);
		if (rc != 0 && errno == EINPROGRESS) {
			pollfd pfd{fd, POLLOUT, 0};
			int n;
			do {
				n = ::poll(&pfd, 1, poll_timeout_ms(deadline));
			} while (n < 0 && errno == EINTR);
			int err = 0;
			socklen_t len = sizeof(err);
			if (n == 0) {
				err = ETIMEDOUT;
			} else if (n < 0) {
				err = errno;
			} else {
				getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
			}
			rc = err ? -1 : 0;
			errno = err;
		}
		if (rc != 0) {
			const int err = errno;
			last = "connect to " + host + ":" + svc + ": " + std::strerror(err);
			::close(fd);
			if (clock::now() >= deadline)
				break;
			continue;
		}
		fd_ = fd;
		sockaddr_storage ss{};
		socklen_t sl = sizeof(ss);
		if (getsockname(fd, reinterpret_cast<sockaddr *>(&ss), &sl) == 0)
			local_ = sockaddr_str(ss);
		sl = sizeof(ss);
		if (getpeername(fd, reinterpret_cast<sockaddr *>(&ss), &sl) == 0)
			peer_ = sockaddr_str(ss);
		break;
	}
	freeaddrinfo(res);
	if (fd_ < 0) {
		why_ = last;
		failed_ = true;
		return false;
	}
	return true;
}

void TcpTransport::close()
{
	if (fd_ >= 0) {
		::close(fd_);
		fd_ = -1;
	}
	// Hand back what never went out; the sink may queue nothing more (we are closed).
	while (!txq_.empty()) {
		TxPdu *p = txq_.front();
		txq_.pop_front();
		if (sink_)
			sink_->on_sent(p, false);
	}
	if (!failed_) {
		failed_ = true;
		if (why_.empty())
			why_ = "closed";
	}
}

bool TcpTransport::flush()
{
	while (!txq_.empty() && fd_ >= 0) {
		iovec iov[kMaxIov];
		int n = 0;
		for (size_t i = 0; i < txq_.size() && n + 3 <= kMaxIov; i++) {
			TxPdu *p = txq_[i];
			size_t skip = i == 0 ? p->sent : 0;
			auto add = [&](const uint8_t *b, size_t len) {
				if (skip >= len) {
					skip -= len;
					return;
				}
				iov[n++] = iovec{const_cast<uint8_t *>(b) + skip, len - skip};
				skip = 0;
			};
			add(p->hdr.data(), p->hdr_len);
			add(p->data.data(), p->data.size());
			add(p->trailer.data(), p->trailer_len);
		}
		msghdr msg{};
		msg.msg_iov = iov;
		msg.msg_iovlen = static_cast<size_t>(n);
		ssize_t w = ::sendmsg(fd_, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				return true;
			const int err = errno;
			return fail(std::string("send: ") + std::strerror(err));
		}
		auto left = static_cast<size_t>(w);
		while (left && !txq_.empty()) {
			TxPdu *p = txq_.front();
			const size_t need = p->total() - p->sent;
			if (left < need) {
				p->sent += left;
				break;
			}
			left -= need;
			p->sent = p->total();
			txq_.pop_front();
			sink_->on_sent(p, true); // may queue more: the loop sees it
			if (fd_ < 0)
				return false;
		}
	}
	return fd_ >= 0;
}

bool TcpTransport::read_some()
{
	size_t budget = kReadBudget;
	for (;;) {
		if (stage_off_ == stage_len_) {
			if (budget == 0)
				return true;
			ssize_t r = ::recv(fd_, stage_.data(), stage_.size(), MSG_DONTWAIT);
			if (r < 0) {
				if (errno == EINTR)
					continue;
				if (errno == EAGAIN || errno == EWOULDBLOCK)
					return true;
				const int err = errno;
				return fail(std::string("receive: ") + std::strerror(err));
			}
			if (r == 0)
				return fail("connection closed by the target");
			stage_off_ = 0;
			stage_len_ = static_cast<size_t>(r);
			budget -= std::min(budget, stage_len_);
		}
		size_t used = 0;
		PduError e = feed_pdus(
		    reader_, {stage_.data() + stage_off_, stage_len_ - stage_off_},
		    [this](const Pdu &pdu, PduError err) {
			    sink_->on_pdu(pdu, err);
			    return fd_ >= 0;
		    },
		    &used);
		stage_off_ += used;
		if (e != PduError::None)
			return fail(std::string("bad PDU from the target: ") + pdu_error_name(e));
		if (fd_ < 0)
			return false; // the session closed us from the callback
	}
}

bool TcpTransport::poll(std::chrono::milliseconds timeout)
{
	if (fd_ < 0)
		return false;
	const auto deadline = clock::now() + timeout;
	bool first = true;
	for (;;) {
		if (!flush())
			return false;
		// Bytes staged but not fed (a callback closed nothing, the budget ran out).
		if (stage_off_ < stage_len_) {
			if (!read_some())
				return false;
			if (!flush())
				return false;
			return true;
		}
		pollfd pfd{fd_, POLLIN, 0};
		if (!txq_.empty())
			pfd.events |= POLLOUT;
		int wait = first ? poll_timeout_ms(deadline) : 0;
		int n = ::poll(&pfd, 1, wait);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			const int err = errno;
			return fail(std::string("poll: ") + std::strerror(err));
		}
		if (n == 0)
			return true;
		first = false;
		if (pfd.revents & (POLLIN | POLLERR | POLLHUP)) {
			if (!read_some())
				return false;
		}
		if (!flush())
			return false;
		return true;
	}
}

} // namespace

std::unique_ptr<InitiatorTransport> make_tcp_transport(uint32_t hard_cap)
{
	return std::make_unique<TcpTransport>(hard_cap);
}

} // namespace ulp::iscsi::initiator
