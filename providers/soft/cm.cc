// SPDX-License-Identifier: MIT
// providers/soft/cm.cc - connection management: the in-process half, the event worker,
// and the provider object. The socket half (cross-process) is in sock_cm.cc.
#include "core/check.h"
#include "core/log.h"
#include "providers/soft/cm_id.h"
#include "providers/soft/sock_conn.h"
#include "providers/soft/sock_wire.h"

#include <arpa/inet.h>

#include <cassert>
#include <cerrno>

namespace ulp::soft
{

CmGlobal &cm_global()
{
	static CmGlobal *g = new CmGlobal; // never destroyed: ids may outlive static teardown
	return *g;
}

namespace
{

// Delivers CM events one at a time on its own thread, as the kernel's rdma_cm does on
// its workqueue, so that handlers never run inside the caller's CM call.
class CmWorker
{
public:
	static CmWorker &get()
	{
		static CmWorker *w = new CmWorker; // leaked: its thread is detached
		return *w;
	}

	void post(std::shared_ptr<IdRef> ref, CmEvent ev)
	{
		{
			std::lock_guard g(lock_);
			q_.push_back(Item{std::move(ref), std::move(ev)});
		}
		cv_.notify_one();
	}

	bool on_worker() const { return std::this_thread::get_id() == tid_; }
	IdRef *current() const { return current_; }

private:
	struct Item {
		std::shared_ptr<IdRef> ref;
		CmEvent ev;
	};

	CmWorker()
	{
		std::thread t([this] { loop(); });
		tid_ = t.get_id();
		t.detach();
	}

	void loop()
	{
		for (;;) {
			Item it;
			{
				std::unique_lock g(lock_);
				cv_.wait(g, [this] { return !q_.empty(); });
				it = std::move(q_.front());
				q_.pop_front();
			}
			deliver(it);
		}
	}

	void deliver(Item &it)
	{
		std::lock_guard g(it.ref->lock);
		SoftCmId *id = it.ref->id;
		if (id) {
			current_ = it.ref.get();
			CmId *target = it.ev.new_id ? it.ev.new_id.get() : id;
			id->handler(target, it.ev);
			current_ = nullptr;
		}
		// A connect request nobody took is refused (rdma_cm rejects when the
		// listener's handler returns non-zero; here, when it leaves new_id). Under the
		// listener's lock: the handler may have given the id a QP on the ULP's PD and
		// CQs, and the ULP frees them once the listener's destruction (which waits for
		// this lock) returns.
		if (std::unique_ptr<CmId> unclaimed = std::move(it.ev.new_id))
			unclaimed->reject({}); // and destroyed here, still under the lock
	}

	std::mutex lock_;
	std::condition_variable cv_;
	std::deque<Item> q_;
	std::thread::id tid_;
	IdRef *current_ = nullptr;
};

std::string key_of(const SockAddr &a)
{
	return a.str();
}

SoftCmId *find_listener(const SockAddr &dst)
{
	auto &G = cm_global();
	auto it = G.listeners.find(key_of(dst));
	if (it != G.listeners.end())
		return it->second;
	SockAddr any = SockAddr::ipv4(0, dst.port());
	it = G.listeners.find(key_of(any));
	return it == G.listeners.end() ? nullptr : it->second;
}

uint32_t ip_of(const SockAddr &a)
{
	if (a.family() != AF_INET)
		return 0;
	return ntohl(reinterpret_cast<const sockaddr_in *>(&a.ss)->sin_addr.s_addr);
}

CmEvent event(CmEventType t, int status = 0)
{
	CmEvent ev;
	ev.event = t;
	ev.status = status;
	return ev;
}

} // namespace

SoftCmId::SoftCmId(CmHandler h, void *ctx) : handler(std::move(h)), ref(std::make_shared<IdRef>())
{
	context = ctx;
	ref->id = this;
	auto &G = cm_global();
	std::lock_guard g(G.ids_lock);
	G.ids.insert(this);
}

SoftCmId::~SoftCmId()
{
	{
		auto &G = cm_global();
		std::lock_guard g(G.ids_lock);
		G.ids.erase(this);
	}
	// rdma_destroy_id from inside the id's own handler would wait for itself forever.
	ULP_CHECK(!(CmWorker::get().on_worker() && CmWorker::get().current() == ref.get()),
	          "cm: id destroyed from its own event handler");
	{
		std::lock_guard g(ref->lock); // waits for a running handler
		ref->id = nullptr;
	}
	auto &G = cm_global();
	{
		std::lock_guard g(G.lock);
		if (st == CmState::Listening) {
			G.listeners.erase(listen_key);
			sock_unlisten(*this);
		}
		if (st == CmState::Connected)
			disconnect_locked();
		if (st == CmState::ReqRcvd || st == CmState::Connecting)
			abandon_locked();
		if (peer)
			peer->peer = nullptr;
		peer = nullptr;
		if (auto *q = sqp())
			q->cm_id = nullptr;
	}
	sock_close(*this);
	qp_.reset();
}

int SoftCmId::bind_addr(const SockAddr &addr)
{
	std::lock_guard g(cm_global().lock);
	if (st != CmState::Idle || addr.family() != AF_INET)
		return -EINVAL;
	SoftDevice *d = addr.is_any() ? default_device() : device_by_ip(ip_of(addr));
	if (!d)
		return addr.is_any() ? -ENODEV : -EADDRNOTAVAIL;
	device_ = d;
	local_ = addr;
	st = CmState::Bound;
	return 0;
}

int SoftCmId::listen(int backlog)
{
	auto &G = cm_global();
	std::lock_guard g(G.lock);
	if (st != CmState::Bound)
		return -EINVAL;
	// Port 0: an ephemeral port free here and on the socket wire, whose names every
	// process of the network namespace shares (as the kernel's ephemeral ports are
	// unique per host, not per process). A given port that is taken stays an error.
	const bool ephemeral = local_.port() == 0;
	std::string k;
	int rc = 0;
	for (int tries = 0; tries < 1000; tries++) {
		if (ephemeral) {
			local_.set_port(G.next_port++);
			if (G.next_port < 40000)
				G.next_port = 40000;
		}
		k = key_of(local_);
		rc = G.listeners.count(k) ? -EADDRINUSE : sock_listen(*this);
		if (rc != -EADDRINUSE || !ephemeral)
			break;
	}
	if (rc) {
		if (ephemeral)
			local_.set_port(0);
		return rc;
	}
	G.listeners[k] = this;
	listen_key = k;
	st = CmState::Listening;
	(void)backlog;
	return 0;
}

int SoftCmId::resolve_addr(const SockAddr *src, const SockAddr &dst, int timeout_ms)
{
	auto &G = cm_global();
	std::lock_guard g(G.lock);
	if ((st != CmState::Idle && st != CmState::Bound) || dst.family() != AF_INET ||
	    dst.port() == 0)
		return -EINVAL;
	SoftDevice *d = nullptr;
	if (src && !src->is_any()) {
		d = device_by_ip(ip_of(*src));
		if (!d)
			return -EADDRNOTAVAIL;
	} else if (device_) {
		d = static_cast<SoftDevice *>(device_);
	} else {
		d = device_by_ip(ip_of(dst)); // loopback through the destination's device
		if (!d)
			d = default_device();
	}
	if (!d)
		return -ENODEV;
	device_ = d;
	local_ = SockAddr::ipv4(d->ip, G.next_port++);
	if (G.next_port < 40000)
		G.next_port = 40000;
	peer_ = dst;
	st = CmState::AddrResolved;
	post(event(CmEventType::AddrResolved));
	(void)timeout_ms;
	return 0;
}

int SoftCmId::resolve_route(int timeout_ms)
{
	std::lock_guard g(cm_global().lock);
	if (st != CmState::AddrResolved)
		return -EINVAL;
	st = CmState::RouteResolved;
	post(event(CmEventType::RouteResolved));
	(void)timeout_ms;
	return 0;
}

int SoftCmId::create_qp(Pd &pd, const QpInitAttr &a)
{
	std::lock_guard g(cm_global().lock);
	if (!device_ || &pd.device() != device_ || qp_)
		return -EINVAL;
	auto qp = pd.create_qp(a);
	if (!qp)
		return -errno;
	// rdma_create_qp leaves the QP in INIT with remote access for RDMA (cma_init_conn_qp).
	QpAttr at;
	at.qp_state = QpState::Init;
	at.port_num = 1;
	at.qp_access_flags = ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ;
	int rc = qp->modify(at, QP_STATE | QP_PORT | QP_ACCESS_FLAGS);
	if (rc)
		return rc;
	static_cast<SoftQp *>(qp.get())->cm_id = this;
	qp_ = std::move(qp);
	return 0;
}

void SoftCmId::destroy_qp()
{
	std::unique_ptr<Qp> q;
	{
		std::lock_guard g(cm_global().lock);
		if (auto *s = sqp())
			s->cm_id = nullptr;
		q = std::move(qp_);
	}
}

ConnParam cm_peer_view(const ConnParam &p)
{
	ConnParam v = p;
	v.responder_resources = p.initiator_depth;
	v.initiator_depth = p.responder_resources;
	return v;
}

int cm_connect_qp(SoftQp &qp, CmRole role, const ConnParam &req, const ConnParam &rep,
                  uint32_t dest_qpn, const Gid &dgid)
{
	const DeviceAttr &da = qp.sdev.attr();
	const bool passive = role == CmRole::Passive;
	const ConnParam &mine = passive ? rep : req;
	// READs this QP answers and READs it issues (see cm_id.h).
	const uint32_t dest_rd = passive ? rep.responder_resources : rep.initiator_depth;
	const uint32_t init_rd = passive ? rep.initiator_depth : rep.responder_resources;
	QpAttrAv a;
	a.qp_state = QpState::Rtr;
	a.path_mtu = 4096;
	a.dest_qp_num = dest_qpn;
	a.rq_psn = 0;
	a.max_dest_rd_atomic = std::min<uint32_t>(dest_rd, da.max_qp_rd_atom);
	a.min_rnr_timer = 12; // 0.64 ms, rdma_cm's default
	a.ah_attr.dgid = dgid;
	int rc = qp.modify(a, QP_STATE | QP_AV | QP_PATH_MTU | QP_DEST_QPN | QP_RQ_PSN |
	                          QP_MAX_DEST_RD_ATOMIC | QP_MIN_RNR_TIMER);
	if (rc)
		return rc;
	QpAttr r;
	r.qp_state = QpState::Rts;
	r.sq_psn = 0;
	r.timeout = 14;
	r.retry_cnt = mine.retry_count;
	r.rnr_retry = std::min<uint8_t>(mine.rnr_retry_count, 7);
	r.max_rd_atomic = std::min<uint32_t>(init_rd, da.max_qp_init_rd_atom);
	return qp.modify(r, QP_STATE | QP_SQ_PSN | QP_TIMEOUT | QP_RETRY_CNT | QP_RNR_RETRY |
	                        QP_MAX_QP_RD_ATOMIC);
}

int SoftCmId::connect(const ConnParam &param)
{
	auto &G = cm_global();
	std::lock_guard g(G.lock);
	if (st != CmState::RouteResolved || !qp_)
		return -EINVAL;
	if (param.private_data_len > kCmReqPrivateDataMax)
		return -EINVAL;
	req = param;
	auto *dev = static_cast<SoftDevice *>(device_);
	SoftCmId *l = dev->cfg.wire == Wire::Auto ? find_listener(peer_) : nullptr;
	if (!l) {
		int rc = sock_connect(*this, param);
		if (rc < 0)
			return rc;
		st = rc == 0 ? CmState::Connecting : CmState::Idle; // 1: refused, event posted
		return 0;
	}
	auto nid = std::make_unique<SoftCmId>(l->handler, l->context);
	nid->device_ = l->device_;
	nid->local_ = peer_;
	nid->peer_ = local_;
	nid->st = CmState::ReqRcvd;
	nid->peer = this;
	nid->listener = l;
	nid->req = param;
	peer = nid.get();
	st = CmState::Connecting;
	CmEvent ev = event(CmEventType::ConnectRequest);
	ev.param = cm_peer_view(param);
	ev.listen_id = l;
	ev.new_id = std::move(nid);
	l->post(std::move(ev));
	return 0;
}

int SoftCmId::accept(const ConnParam &param)
{
	auto &G = cm_global();
	std::lock_guard g(G.lock);
	if (st != CmState::ReqRcvd || !qp_)
		return -EINVAL;
	if (param.private_data_len > kCmRepPrivateDataMax)
		return -EINVAL;
	if (sock)
		return sock_accept(*this, param);
	SoftCmId *a = peer;
	if (!a || a->st != CmState::Connecting || !a->qp_)
		return -ECONNRESET; // the active side gave up
	SoftQp &mine = *sqp(), &theirs = *a->sqp();
	mine.peer = theirs.handle;
	mine.wire = WireKind::InProc;
	theirs.peer = mine.handle;
	theirs.wire = WireKind::InProc;
	int rc =
	    cm_connect_qp(mine, CmRole::Passive, a->req, param, theirs.qp_num(), theirs.sdev.gid());
	if (!rc)
		rc = cm_connect_qp(theirs, CmRole::Active, a->req, param, mine.qp_num(),
		                   mine.sdev.gid());
	if (rc)
		return rc;
	st = CmState::Connected;
	a->st = CmState::Connected;
	CmEvent e1 = event(CmEventType::Established);
	e1.param = cm_peer_view(a->req);
	post(std::move(e1));
	CmEvent e2 = event(CmEventType::Established);
	e2.param = cm_peer_view(param);
	a->post(std::move(e2));
	return 0;
}

int SoftCmId::reject(std::span<const uint8_t> pdata)
{
	auto &G = cm_global();
	std::lock_guard g(G.lock);
	if (st != CmState::ReqRcvd)
		return -EINVAL;
	if (pdata.size() > kCmRejPrivateDataMax)
		return -EINVAL;
	st = CmState::Idle;
	if (sock)
		return sock_reject(*this, pdata);
	if (SoftCmId *a = peer) {
		a->st = CmState::Idle;
		a->peer = nullptr;
		CmEvent ev = event(CmEventType::Rejected, -ECONNREFUSED);
		ev.param.set_private_data(pdata);
		a->post(std::move(ev));
	}
	peer = nullptr;
	return 0;
}

// The connection ends: our QP to ERR (rdma_disconnect does this, so that drain works),
// DISCONNECTED for us and the peer. CmGlobal::lock held.
void SoftCmId::disconnect_locked()
{
	st = CmState::Disconnected;
	if (auto *q = sqp())
		q->to_error(nullptr);
	post(event(CmEventType::Disconnected));
	post(event(CmEventType::TimewaitExit));
	if (peer) {
		peer->lost_peer();
		peer->peer = nullptr;
		peer = nullptr;
	}
	sock_disconnect(*this);
}

// A half-made connection is abandoned by one side. CmGlobal::lock held.
void SoftCmId::abandon_locked()
{
	if (SoftCmId *o = peer) {
		if (st == CmState::ReqRcvd) {
			o->st = CmState::Idle;
			o->post(event(CmEventType::Rejected, -ECONNREFUSED));
		} else {
			o->st = CmState::Idle; // the passive side's accept will fail
		}
		o->peer = nullptr;
	}
	peer = nullptr;
	st = CmState::Idle;
}

void SoftCmId::lost_peer()
{
	if (st != CmState::Connected)
		return;
	st = CmState::Disconnected;
	if (auto *q = sqp())
		q->to_error(nullptr);
	post(event(CmEventType::Disconnected));
	post(event(CmEventType::TimewaitExit));
}

int SoftCmId::disconnect()
{
	std::lock_guard g(cm_global().lock);
	if (st == CmState::Disconnected)
		return 0;
	if (st != CmState::Connected)
		return -EINVAL;
	disconnect_locked();
	return 0;
}

void SoftCmId::post(CmEvent ev)
{
	CmWorker::get().post(ref, std::move(ev));
}

void remove_device(Device &dev)
{
	auto &d = sdev_of(dev);
	if (d.removed.exchange(true))
		return;
	ULP_LOG(Info, Soft, "{}: removed (fault injection)", dev.name());
	auto &G = cm_global();
	std::lock_guard g(G.lock);
	std::vector<SoftCmId *> ids;
	{
		// An id destroyed meanwhile waits for G.lock (held) before it is freed.
		std::lock_guard il(G.ids_lock);
		ids.assign(G.ids.begin(), G.ids.end());
	}
	for (SoftCmId *id : ids) {
		if (id->device() != &dev)
			continue;
		switch (id->st) {
		case CmState::Listening:
			// The kernel's listener on the device is gone: requests find nobody.
			G.listeners.erase(id->listen_key);
			sock_unlisten(*id);
			id->st = CmState::Idle;
			break;
		case CmState::Connected: {
			// The kernel destroys its side of the id: the peer hears a DREQ, the QP
			// stays until its consumer destroys it (to ERR here: nothing moves).
			SoftCmId *p = id->peer;
			id->st = CmState::Disconnected;
			if (auto *q = id->sqp())
				q->to_error(nullptr);
			if (p) {
				p->lost_peer();
				p->peer = nullptr;
			}
			id->peer = nullptr;
			sock_cut(*id);
			break;
		}
		case CmState::ReqRcvd:
		case CmState::Connecting:
			id->abandon_locked();
			break;
		default:
			break;
		}
		CmEvent ev;
		ev.event = CmEventType::DeviceRemoval;
		id->post(std::move(ev));
	}
}

void cut_connection(Qp &q)
{
	auto &qp = static_cast<SoftQp &>(q);
	auto &G = cm_global();
	std::lock_guard g(G.lock);
	auto *id = static_cast<SoftCmId *>(qp.cm_id);
	if (id && id->st == CmState::Connected) {
		// Peer death: neither side said goodbye; both see the connection drop.
		SoftCmId *p = id->peer;
		id->lost_peer();
		if (p) {
			p->lost_peer();
			p->peer = nullptr;
		}
		id->peer = nullptr;
		sock_cut(*id);
		return;
	}
	// A QP connected by hand: both ends to ERR.
	qp.to_error(nullptr);
	if (auto h = qp.peer) {
		std::shared_lock hg(h->lock);
		if (h->qp)
			h->qp->to_error(nullptr);
	}
}

// The socket wire lost its peer (EOF, reset, DISCONNECT packet): engine thread.
void cm_peer_lost(SoftQp &qp)
{
	std::lock_guard g(cm_global().lock);
	if (auto *id = static_cast<SoftCmId *>(qp.cm_id))
		id->lost_peer();
}

void SoftQp::attach_wire(std::shared_ptr<SockConn> c)
{
	engine.between_turns(this, [&] {
		conn = std::move(c); // its kind is set already (SockCm::establish)
		tx_psn = rx_psn = 0;
	});
}

void SoftQp::detach_wire()
{
	std::shared_ptr<SockConn> c;
	std::shared_ptr<QpHandle> p;
	engine.between_turns(this, [&] {
		c = std::move(conn);
		p = std::move(peer);
		wire = WireKind::None;
	});
	if (c)
		engine.remove_conn(c.get()); // the engine's reference (lock_: not under it above)
}

// ---------------------------------------------------------------------------------------------

namespace
{
class SoftProvider final : public Provider
{
public:
	const char *name() const override { return "soft"; }
	std::unique_ptr<CmId> create_id(CmHandler h, void *ctx) override
	{
		return std::make_unique<SoftCmId>(std::move(h), ctx);
	}
};
} // namespace

Provider &provider()
{
	static SoftProvider *p = new SoftProvider;
	return *p;
}

} // namespace ulp::soft
