// SPDX-License-Identifier: MIT
// rdma_conn/client.cc - the active side of an RDMA ULP connection (see client.h).
#include "rdma_conn/client.h"

#include "core/check.h"
#include "core/deadline.h"
#include "core/drain.h"
#include "core/log.h"

#include <boost/container/small_vector.hpp>

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace ulp::rdma
{

namespace
{

using clock = std::chrono::steady_clock;

constexpr StateTable<ClientState, 5> kClientStates = {
    "RDMA client connection",
    client_state_str,
    {
        /* Idle */ to(ClientState::Connecting, ClientState::Stopped),
        /* Connecting */ to(ClientState::Up, ClientState::Stopped),
        /* Up */ to(ClientState::Stopped),
        /* Stopped */ to(ClientState::Drained),
        /* Drained */ 0,
    }};

// A CM step's timeout: what is left of the deadline, at least 1 ms (0 would mean the
// provider's default, not "none").
int step_ms(clock::time_point deadline)
{
	return std::max(1, poll_timeout_ms(deadline));
}

} // namespace

const char *client_state_str(ClientState s)
{
	static const char *const n[] = {"Idle", "Connecting", "Up", "Stopped", "Drained"};
	return size_t(s) < std::size(n) ? n[size_t(s)] : "?";
}

// ---- ClientConn ----------------------------------------------------------------------------

ClientConn::~ClientConn()
{
	stop();
	release();
	if (evfd_ >= 0)
		::close(evfd_);
}

int ClientConn::fail_connect(int rc, std::string w, std::string *why)
{
	*why = std::move(w);
	stop();
	return rc;
}

bool ClientConn::wait_cm(CmEventType want, clock::time_point deadline, CmRec *out, std::string *why)
{
	for (;;) {
		{
			std::lock_guard g(lock_);
			if (!cm_.empty()) {
				*out = std::move(cm_.front());
				cm_.pop_front();
				if (out->type == want)
					return true;
				*why = std::string("RDMA/CM: ") + cm_event_str(out->type) +
				       " instead of " + cm_event_str(want);
				if (out->status)
					*why +=
					    std::string(" (") + std::strerror(-out->status) + ")";
				return false;
			}
		}
		const int ms = poll_timeout_ms(deadline);
		if (ms == 0) {
			out->type = want; // nothing came: *out says nothing of the peer
			out->status = -ETIMEDOUT;
			*why = std::string("RDMA/CM: no ") + cm_event_str(want) + " in time";
			return false;
		}
		pollfd pfd{evfd_, POLLIN, 0};
		if (::poll(&pfd, 1, ms) > 0)
			clear_fd();
	}
}

int ClientConn::connect(const ClientParams &p, CmRec *reply, std::string *why)
{
	ULP_CHECK(state_ == ClientState::Idle, "connect on a used client connection");
	change_state(&state_, ClientState::Connecting, kClientStates, this);
	if (!p.provider)
		return fail_connect(-EINVAL, "no RDMA provider given", why);
	evfd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (evfd_ < 0) {
		const int err = errno;
		return fail_connect(-err, std::string("eventfd: ") + std::strerror(err), why);
	}
	// The CM thread only queues and rings; the owner's thread takes the events up.
	id_ = p.provider->create_id(
	    [this](CmId *, CmEvent &ev) {
		    {
			    std::lock_guard g(lock_);
			    cm_.push_back(CmRec{ev.event, ev.status, ev.param});
		    }
		    uint64_t one = 1;
		    (void)!::write(evfd_, &one, sizeof(one));
	    },
	    this);
	if (!id_) {
		const int err = errno ? errno : ENOMEM;
		return fail_connect(-err, std::string("rdma_create_id: ") + std::strerror(err),
		                    why);
	}
	const std::string dst = p.dst.str();
	std::string w;
	if (int rc = id_->resolve_addr(p.src ? &*p.src : nullptr, p.dst, step_ms(p.deadline)); rc)
		return fail_connect(rc, "resolve " + dst + ": " + std::strerror(-rc), why);
	if (!wait_cm(CmEventType::AddrResolved, p.deadline, reply, &w))
		return fail_connect(reply->status == -ETIMEDOUT ? -ETIMEDOUT : -EHOSTUNREACH,
		                    "resolve " + dst + ": " + w, why);
	if (int rc = id_->resolve_route(step_ms(p.deadline)); rc != 0)
		return fail_connect(rc, "route to " + dst + ": " + std::strerror(-rc), why);
	if (!wait_cm(CmEventType::RouteResolved, p.deadline, reply, &w))
		return fail_connect(reply->status == -ETIMEDOUT ? -ETIMEDOUT : -EHOSTUNREACH,
		                    "route to " + dst + ": " + w, why);
	if (!id_->device())
		return fail_connect(-ENODEV, "no RDMA device for " + dst, why);
	ConnParam cp;
	if (p.setup) {
		if (int rc = p.setup(*id_, &cp, &w); rc != 0)
			return fail_connect(rc, std::move(w), why);
	}
	if (int rc = id_->connect(cp); rc != 0)
		return fail_connect(rc, "connect " + dst + ": " + std::strerror(-rc), why);
	if (!wait_cm(CmEventType::Established, p.deadline, reply, &w)) {
		int rc = -ETIMEDOUT;
		if (reply->type == CmEventType::Rejected)
			rc = -ECONNREFUSED;
		else if (reply->type == CmEventType::Unreachable ||
		         reply->type == CmEventType::ConnectError)
			rc = -EHOSTUNREACH;
		return fail_connect(rc, "connect " + dst + ": " + w, why);
	}
	change_state(&state_, ClientState::Up, kClientStates, this);
	return 0;
}

std::optional<std::string> ClientConn::take_events(const std::function<bool()> &reap)
{
	std::deque<CmRec> evs;
	{
		std::lock_guard g(lock_);
		evs.swap(cm_);
	}
	for (const CmRec &e : evs) {
		switch (e.type) {
		case CmEventType::Disconnected:
			while (reap()) {
			}
			return "the target disconnected";
		case CmEventType::DeviceRemoval:
			return "RDMA device removed";
		case CmEventType::ConnectError:
		case CmEventType::Unreachable:
		case CmEventType::Rejected:
			return std::string("RDMA/CM: ") + cm_event_str(e.type);
		default:
			break; // TimewaitExit and the rest
		}
	}
	return std::nullopt;
}

void ClientConn::clear_fd()
{
	uint64_t v;
	if (evfd_ >= 0)
		(void)!::read(evfd_, &v, sizeof(v));
}

void ClientConn::stop()
{
	if (state_ == ClientState::Stopped || state_ == ClientState::Drained)
		return;
	const bool was_up = state_ == ClientState::Up;
	change_state(&state_, ClientState::Stopped, kClientStates, this);
	// disconnect moves a connected QP to ERR (rdma_disconnect); one that never connected
	// (or whose disconnect failed) is moved here, so that drain's markers flush.
	if (id_ && was_up)
		id_->disconnect();
	if (Qp *q = qp()) {
		QpAttr a;
		a.qp_state = QpState::Err;
		(void)q->modify(a, QP_STATE);
	}
}

int ClientConn::drain(std::chrono::milliseconds timeout)
{
	stop();
	if (state_ == ClientState::Drained)
		return 0;
	int rc = 0;
	if (Qp *q = qp()) {
		const auto t0 = clock::now();
		rc = drain_qp(*q, timeout);
		if (rc != 0)
			ULP_LOG(
			    Warn, Rdma,
			    "client {}: drain gave up after {} ms ({}): WRs left posted",
			    id_->peer_addr().str(),
			    std::chrono::duration_cast<std::chrono::milliseconds>(clock::now() - t0)
			        .count(),
			    std::strerror(-rc));
	}
	change_state(&state_, ClientState::Drained, kClientStates, this);
	return rc;
}

void ClientConn::destroy_qp()
{
	if (id_)
		id_->destroy_qp();
}

void ClientConn::release()
{
	destroy_qp();
	id_.reset(); // waits out a running CM handler: after this nothing writes evfd_
}

// ---- DirectCq ------------------------------------------------------------------------------

int DirectCq::create(Device &dev, int cqe, std::string *why)
{
	ch_ = dev.create_comp_channel();
	if (!ch_) {
		const int err = errno ? errno : ENOMEM;
		*why = std::string("completion channel: ") + std::strerror(err);
		return -err;
	}
	CqOptions co;
	co.channel = ch_.get();
	cq_ = alloc_cq(dev, cqe, 0, PollCtx::Direct, nullptr, co);
	if (!cq_) {
		const int err = errno ? errno : ENOMEM;
		*why = std::string("CQ: ") + std::strerror(err);
		return -err;
	}
	return 0;
}

int DirectCq::process(int budget)
{
	if (!cq_)
		return 0;
	in_process_ = true;
	const int n = process_cq_direct(*cq_, budget);
	in_process_ = false;
	return n;
}

int DirectCq::arm()
{
	return cq_ ? cq_->req_notify(CqNotify::NextComp) : 0;
}

void DirectCq::clear_fd()
{
	// One CQ on the channel, armed once (arm()): it holds one event at most. A second call
	// would only find none, and on the soft provider that costs a look at the channel's
	// rung doorbells (an epoll_wait) on every wake-up. A doorbell rung meanwhile keeps the
	// fd readable: the owner's next poll returns at once and this takes it.
	Cq *ev = nullptr;
	if (ch_)
		(void)ch_->get_cq_event(&ev, 0);
}

void DirectCq::destroy()
{
	ULP_CHECK(!in_process_, "a Direct CQ freed from inside its own processing");
	if (cq_ && free_cq(cq_) != 0) {
		ULP_LOG(Error, Rdma, "client CQ still referenced at teardown: left allocated");
		(void)cq_.release(); // never freed under a user
	}
	cq_.reset();
	ch_.reset();
}

// ---- The owner's sleep -----------------------------------------------------------------------

int wait_events(DirectCq *cq, std::span<ClientConn *const> conns, int timeout_ms,
                const std::function<int()> &reap, std::string *why)
{
	const bool have_cq = cq && *cq;
	if (have_cq) {
		if (int rc = cq->arm(); rc != 0) {
			*why = std::string("req_notify: ") + std::strerror(-rc);
			return rc;
		}
		if (reap() > 0)
			return 1;
	}
	// On the stack for the usual few channels: the owner sleeps here whenever it is idle.
	boost::container::small_vector<pollfd, 8> pfd;
	if (have_cq)
		pfd.push_back(pollfd{cq->fd(), POLLIN, 0});
	for (ClientConn *c : conns)
		if (c && c->fd() >= 0)
			pfd.push_back(pollfd{c->fd(), POLLIN, 0});
	const int n = ::poll(pfd.data(), pfd.size(), timeout_ms);
	if (n < 0 && errno != EINTR) {
		const int err = errno;
		*why = std::string("poll: ") + std::strerror(err);
		return -err;
	}
	if (n <= 0)
		return 0;
	// Only what polled readable: a read of a quiet eventfd is a system call that finds
	// nothing (the owner sleeps here every few commands, so that was most of its reads).
	size_t i = 0;
	if (have_cq && (pfd[i++].revents & POLLIN))
		cq->clear_fd();
	for (ClientConn *c : conns)
		if (c && c->fd() >= 0 && (pfd[i++].revents & POLLIN))
			c->clear_fd(); // nonblocking: one read
	return 0;
}

} // namespace ulp::rdma
