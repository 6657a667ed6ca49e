// SPDX-License-Identifier: MIT
// providers/verbs/cm.cc - core/ CmId over librdmacm: one event channel for the provider,
// read by one CM thread that turns rdma_cm_events into CmEvents.
//
// Ordering: events are taken one at a time and acknowledged (rdma_ack_cm_event) only
// after the handler returned, so rdma_destroy_id() - which waits for every event of its
// id to be acknowledged - waits for a running handler, which is what core/cm.h promises.
#include "core/log.h"
#include "providers/verbs/verbs_internal.h"

#include <fcntl.h>
#include <poll.h>

#include <cerrno>
#include <cstring>

namespace ulp::verbs
{

namespace
{

// IB CM reject reason 8 (IB spec 12.6.7.2, table 112): no listener for the service ID,
// i.e. nobody listens on that port. core/ calls that Unreachable, as the soft provider
// does; every other reason (28, consumer reject, above all) is Rejected.
constexpr int kRejInvalidServiceId = 8;

SockAddr sock_addr(const sockaddr *sa)
{
	SockAddr a;
	if (!sa)
		return a;
	if (sa->sa_family == AF_INET)
		std::memcpy(&a.ss, sa, sizeof(sockaddr_in));
	else if (sa->sa_family == AF_INET6)
		std::memcpy(&a.ss, sa, sizeof(sockaddr_in6));
	return a;
}

ConnParam conn_param_from(const rdma_conn_param &c)
{
	ConnParam p;
	if (c.private_data && c.private_data_len)
		p.set_private_data(
		    {static_cast<const uint8_t *>(c.private_data), c.private_data_len});
	p.responder_resources = c.responder_resources;
	p.initiator_depth = c.initiator_depth;
	p.retry_count = c.retry_count;
	p.rnr_retry_count = c.rnr_retry_count;
	return p;
}

rdma_conn_param conn_param_to(const ConnParam &p)
{
	rdma_conn_param c{};
	c.private_data = p.private_data_len ? p.private_data.data() : nullptr;
	c.private_data_len = p.private_data_len;
	c.responder_resources = p.responder_resources;
	c.initiator_depth = p.initiator_depth;
	c.flow_control = 1;
	c.retry_count = p.retry_count;
	c.rnr_retry_count = p.rnr_retry_count;
	return c;
}

int errno_ret(int r)
{
	return r ? (errno ? -errno : -EIO) : 0;
}

} // namespace

class VCmId final : public CmId
{
public:
	VCmId(CmHandler h, void *ctx) : handler_(std::move(h)) { context = ctx; }
	~VCmId() override;

	int bind_addr(const SockAddr &addr) override;
	int resolve_addr(const SockAddr *src, const SockAddr &dst, int timeout_ms) override;
	int resolve_route(int timeout_ms) override;
	int listen(int backlog) override;
	int connect(const ConnParam &param) override;
	int accept(const ConnParam &param) override;
	int reject(std::span<const uint8_t> private_data) override;
	int disconnect() override;
	int create_qp(Pd &pd, const QpInitAttr &attr) override;
	void destroy_qp() override;

	// The CM thread: run the handler unless the id is being destroyed; a DISCONNECTED
	// stops the QP first (on_disconnected).
	void deliver(CmEvent &ev);
	// device_, local_ and peer_ from the rdma_cm_id (after bind, resolve, request).
	void refresh();
	void on_disconnected();

	rdma_cm_id *id = nullptr;
	CmHandler handler_;

private:
	std::mutex cb_lock_; // held while the handler runs; the destructor takes it
	std::mutex qp_lock_; // qp_ against destroy_qp() on another thread (DREQ handling)
	bool dead_ = false;  // destructor started: no more handler calls (cb_lock_)
	std::atomic<bool> disconnected_{false}; // rdma_disconnect already called
};

VCmId::~VCmId()
{
	{
		std::lock_guard g(cb_lock_); // waits for a handler running right now
		dead_ = true;
	}
	destroy_qp();
	if (id && rdma_destroy_id(id))
		ULP_LOG(Error, Verbs, "rdma_destroy_id: {}", strerror(errno));
}

void VCmId::deliver(CmEvent &ev)
{
	std::lock_guard g(cb_lock_);
	if (dead_)
		return;
	// Under cb_lock_ and after the dead_ check: the destructor may be running on another
	// thread, and a DREQ that arrives while the id is destroyed must not touch its QP.
	if (ev.event == CmEventType::Disconnected)
		on_disconnected();
	if (handler_)
		handler_(this, ev);
}

void VCmId::refresh()
{
	if (id->verbs)
		device_ = vprovider().find(id->verbs);
	local_ = sock_addr(rdma_get_local_addr(id));
	peer_ = sock_addr(rdma_get_peer_addr(id));
}

void VCmId::on_disconnected()
{
	// The passive side of a DREQ (IB spec, communication management: connection
	// release): the QP stops (ERR, flushing all
	// outstanding work, IB 10.3.1) and the DREP goes out at once, as the kernel's ULPs
	// do by calling rdma_disconnect() from their DISCONNECTED handler; librdmacm does
	// neither for a userspace QP.
	{
		std::lock_guard g(qp_lock_); // destroy_qp() may run on the consumer's thread
		if (auto *q = static_cast<VQp *>(qp_.get()))
			q->to_error();
	}
	if (!disconnected_.exchange(true))
		rdma_disconnect(id);
}

int VCmId::bind_addr(const SockAddr &addr)
{
	errno = 0;
	int r = errno_ret(rdma_bind_addr(id, const_cast<sockaddr *>(addr.sa())));
	if (!r)
		refresh();
	return r;
}

int VCmId::resolve_addr(const SockAddr *src, const SockAddr &dst, int timeout_ms)
{
	errno = 0;
	return errno_ret(rdma_resolve_addr(id, src ? const_cast<sockaddr *>(src->sa()) : nullptr,
	                                   const_cast<sockaddr *>(dst.sa()), timeout_ms));
}

int VCmId::resolve_route(int timeout_ms)
{
	errno = 0;
	return errno_ret(rdma_resolve_route(id, timeout_ms));
}

int VCmId::listen(int backlog)
{
	errno = 0;
	return errno_ret(rdma_listen(id, backlog));
}

int VCmId::connect(const ConnParam &param)
{
	if (param.private_data_len > kCmReqPrivateDataMax)
		return -EINVAL;
	if (!qp_)
		return -EINVAL; // core/: the QP exists before connect (rdma_cm moves it to RTS)
	rdma_conn_param c = conn_param_to(param);
	errno = 0;
	return errno_ret(rdma_connect(id, &c));
}

int VCmId::accept(const ConnParam &param)
{
	if (param.private_data_len > kCmRepPrivateDataMax)
		return -EINVAL;
	if (!qp_)
		return -EINVAL;
	rdma_conn_param c = conn_param_to(param);
	errno = 0;
	return errno_ret(rdma_accept(id, &c));
}

int VCmId::reject(std::span<const uint8_t> pd)
{
	if (pd.size() > kCmRejPrivateDataMax)
		return -EINVAL;
	errno = 0;
	return errno_ret(rdma_reject(id, pd.empty() ? nullptr : pd.data(), uint8_t(pd.size())));
}

int VCmId::disconnect()
{
	if (disconnected_.exchange(true))
		return 0;
	errno = 0;
	// librdmacm moves the QP to ERR first (ucma_modify_qp_err), then sends the DREQ.
	return errno_ret(rdma_disconnect(id));
}

int VCmId::create_qp(Pd &pd, const QpInitAttr &attr)
{
	if (qp_)
		return -EEXIST;
	if (!device_ || &pd.device() != device_)
		return -EINVAL; // rdma_create_qp needs the id's device (id->verbs == pd->context)
	errno = 0;
	auto q = create_cm_qp(static_cast<VPd &>(pd), id, attr);
	if (!q)
		return errno ? -errno : -EIO;
	std::lock_guard g(qp_lock_);
	qp_ = std::move(q);
	return 0;
}

void VCmId::destroy_qp()
{
	std::unique_ptr<Qp> q;
	{
		std::lock_guard g(qp_lock_);
		q = std::move(qp_);
	}
	q.reset(); // outside qp_lock_: ibv_destroy_qp may wait for async events
}

// ---------------------------------------------------------------------------------------------
// Provider: ids and the CM thread

int VProvider::start_cm()
{
	std::lock_guard g(cm_lock_);
	if (!channel_) {
		channel_ = rdma_create_event_channel();
		if (!channel_)
			return errno ? -errno : -ENODEV;
		int fl = fcntl(channel_->fd, F_GETFL);
		if (fl < 0 || fcntl(channel_->fd, F_SETFL, fl | O_NONBLOCK) < 0)
			return -errno;
	}
	return cm_.start("CM thread", [this](int wake) { cm_loop(wake); });
}

std::unique_ptr<CmId> VProvider::create_id(CmHandler handler, void *context)
{
	if (int err = start_cm()) {
		errno = -err;
		return nullptr;
	}
	auto c = std::make_unique<VCmId>(std::move(handler), context);
	if (rdma_create_id(channel_, &c->id, c.get(), RDMA_PS_TCP)) {
		c->id = nullptr;
		return nullptr;
	}
	return c;
}

void VProvider::cm_loop(int wake_fd)
{
	for (;;) {
		pollfd p[2] = {{channel_->fd, POLLIN, 0}, {wake_fd, POLLIN, 0}};
		if (::poll(p, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			ULP_LOG(Error, Verbs, "CM thread: poll: {}", strerror(errno));
			return;
		}
		if (p[1].revents)
			return;
		rdma_cm_event *e = nullptr;
		if (rdma_get_cm_event(channel_, &e))
			continue; // EAGAIN
		dispatch(e);
		rdma_ack_cm_event(e);
	}
}

void VProvider::dispatch(rdma_cm_event *e)
{
	if (e->event == RDMA_CM_EVENT_CONNECT_REQUEST) {
		auto *l = static_cast<VCmId *>(e->listen_id->context);
		// The new id inherits the listener's handler and context (rdma_cm's rule).
		auto nid = std::make_unique<VCmId>(l->handler_, l->context);
		nid->id = e->id;
		e->id->context = nid.get();
		nid->refresh();
		CmEvent ev;
		ev.event = CmEventType::ConnectRequest;
		ev.param = conn_param_from(e->param.conn);
		ev.listen_id = l;
		ev.new_id = std::move(nid);
		l->deliver(ev);
		// core/cm.h: an id the handler leaves in the event is rejected and destroyed.
		if (ev.new_id) {
			rdma_reject(static_cast<VCmId *>(ev.new_id.get())->id, nullptr, 0);
			ev.new_id.reset();
		}
		return;
	}
	auto *c = static_cast<VCmId *>(e->id->context);
	if (!c)
		return;
	CmEvent ev;
	ev.status = e->status;
	switch (e->event) {
	case RDMA_CM_EVENT_ADDR_RESOLVED:
		c->refresh();
		ev.event = CmEventType::AddrResolved;
		break;
	case RDMA_CM_EVENT_ADDR_ERROR:
		ev.event = CmEventType::AddrError;
		break;
	case RDMA_CM_EVENT_ROUTE_RESOLVED:
		c->refresh();
		ev.event = CmEventType::RouteResolved;
		break;
	case RDMA_CM_EVENT_ROUTE_ERROR:
		ev.event = CmEventType::RouteError;
		break;
	case RDMA_CM_EVENT_CONNECT_RESPONSE:
		// Only without a QP (librdmacm turns it into ESTABLISHED otherwise), which
		// core/ does not allow: connect() refuses an id without a QP.
		ev.event = CmEventType::ConnectError;
		ev.status = -EINVAL;
		break;
	case RDMA_CM_EVENT_CONNECT_ERROR:
		ev.event = CmEventType::ConnectError;
		break;
	case RDMA_CM_EVENT_UNREACHABLE:
		ev.event = CmEventType::Unreachable;
		break;
	case RDMA_CM_EVENT_REJECTED:
		ev.event = e->status == kRejInvalidServiceId ? CmEventType::Unreachable
		                                             : CmEventType::Rejected;
		ev.status = -ECONNREFUSED;
		ev.param = conn_param_from(e->param.conn);
		break;
	case RDMA_CM_EVENT_ESTABLISHED:
		c->refresh();
		ev.event = CmEventType::Established;
		ev.param = conn_param_from(e->param.conn);
		break;
	case RDMA_CM_EVENT_DISCONNECTED:
		ev.event = CmEventType::Disconnected;
		break;
	case RDMA_CM_EVENT_DEVICE_REMOVAL:
		// Every id on the device hears it (rdma link del); the device is closed once its
		// users have let go of it (VProvider::device_released).
		if (auto *d = static_cast<VDevice *>(c->device()); d && !d->removed.exchange(true))
			ULP_LOG(Warn, Verbs,
			        "{}: RDMA_CM_EVENT_DEVICE_REMOVAL: the device is going away",
			        d->name());
		ev.event = CmEventType::DeviceRemoval;
		break;
	case RDMA_CM_EVENT_TIMEWAIT_EXIT:
		ev.event = CmEventType::TimewaitExit;
		break;
	default:
		return; // address change, multicast: not part of core/
	}
	// Negative errno for core/ (rdma_cm gives some statuses positive).
	if (ev.status > 0)
		ev.status = -ev.status;
	c->deliver(ev);
}

} // namespace ulp::verbs
