// SPDX-License-Identifier: MIT
// rdma_conn/portal.cc - portals and the RDMA half of their connections (see portal.h).
#include "rdma_conn/portal.h"

#include "core/drain.h"
#include "core/log.h"
#include "core/thread_name.h"
#include "cq_poll/cq_poll.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>

namespace ulp::rdma
{

namespace
{

// The CQ pool is the device's (ib_cq_pool), shared by every portal on it: an iSER and an
// SRP portal on one address take their CQs from one pool. It is freed when the last portal
// using the device lets go, not by the first one to stop (the kernel frees it when the
// device goes away).
std::mutex g_pool_users_lock;
std::map<Device *, unsigned> g_pool_users; // portals with DeviceRes on the device

void pool_user_add(Device &dev)
{
	std::lock_guard g(g_pool_users_lock);
	g_pool_users[&dev]++;
}

// True when the caller was the device's last portal: the pool may be destroyed.
bool pool_user_drop(Device &dev)
{
	std::lock_guard g(g_pool_users_lock);
	auto it = g_pool_users.find(&dev);
	if (it == g_pool_users.end() || --it->second > 0)
		return false;
	g_pool_users.erase(it);
	return true;
}

} // namespace

// ---- PortalConn ----------------------------------------------------------------------------

PortalConn::PortalConn(Portal &portal, std::unique_ptr<CmId> id)
    : portal_(portal), id_(std::move(id))
{
	id_->context = this; // Portal::on_cm_event finds the connection through it
}

PortalConn::~PortalConn()
{
	PortalConn::release_resources();
}

int PortalConn::create_qp(Pd &pd, QpInitAttr qa, const RwQpOptions *ro, std::string *why)
{
	Device &dev = pd.device();
	if (ro) {
		if (int rc = rw_init_qp(dev, &qa, *ro); rc != 0) {
			*why = "rw_init_qp: the send queue would exceed the device's max_qp_wr";
			return rc;
		}
	}
	cq_entries_ = qa.cap.max_send_wr + qa.cap.max_recv_wr + 2;
	cq_ = cq_pool_get(dev, cq_entries_, portal_.cfg().vector_hint, portal_.cfg().poll_ctx);
	if (!cq_) {
		const int e = errno ? errno : ENOMEM;
		*why = std::string("cq_pool_get: ") + std::strerror(e);
		cq_entries_ = 0;
		return -e;
	}
	qa.send_cq = cq_;
	qa.recv_cq = cq_;
	gauge_cqe_.store(cq_entries_, std::memory_order_relaxed);
	if (int rc = id_->create_qp(pd, qa); rc != 0) {
		*why = std::string("create_qp: ") + std::strerror(-rc);
		return rc;
	}
	gauge_qp_.store(true, std::memory_order_relaxed);
	if (ro) {
		int err = 0;
		std::unique_ptr<RwQp> rw = RwQp::attach(*id_->qp(), qa, *ro, &err);
		std::lock_guard g(res_lock_);
		rwqp_ = std::move(rw);
		if (!rwqp_) {
			*why = std::string("rw contexts: ") + std::strerror(-err);
			return err;
		}
	}
	return 0;
}

void PortalConn::release_resources()
{
	{
		std::lock_guard g(res_lock_); // against Portal::resources reading the MR pool
		rwqp_.reset(); // the MR pool: the protocol destroyed every context first
	}
	gauge_qp_.store(false, std::memory_order_relaxed);
	if (id_)
		id_.reset(); // destroys the QP (the CM waits out a running handler)
	if (cq_) {
		cq_pool_put(cq_, cq_entries_);
		cq_ = nullptr;
		gauge_cqe_.store(0, std::memory_order_relaxed);
	}
}

void PortalConn::drain()
{
	// Every WR posted so far completes (flushed) and is dispatched through the protocol's
	// done handlers; the CQ is processed by a cq_poll thread, so drain waits for it.
	if (id_ && id_->qp())
		drain_qp(*id_->qp(), portal_.cfg().drain_timeout);
	drained_.store(true, std::memory_order_release);
}

// ---- Portal --------------------------------------------------------------------------------

Portal::Portal(Provider &provider, const PortalConfig &cfg) : provider_(provider), cfg_(cfg) {}

Portal::~Portal()
{
	stop();
}

int Portal::listen(const SockAddr &addr, std::string *why)
{
	listen_id_ =
	    provider_.create_id([this](CmId *id, CmEvent &ev) { on_cm_event(id, ev); }, nullptr);
	if (!listen_id_) {
		const int e = errno ? errno : ENOMEM;
		*why = std::string("create_id: ") + std::strerror(e);
		return -e;
	}
	if (int rc = listen_id_->bind_addr(addr); rc != 0) {
		*why = "bind " + addr.str() + ": " + std::strerror(-rc);
		listen_id_.reset();
		return rc;
	}
	if (int rc = listen_id_->listen(128); rc != 0) {
		*why = "listen on " + addr.str() + ": " + std::strerror(-rc);
		listen_id_.reset();
		return rc;
	}
	port_ = listen_id_->local_addr().port();
	addr_ = listen_id_->local_addr().str();
	return 0;
}

std::string Portal::addr() const
{
	return addr_;
}

Device *Portal::listen_device() const
{
	return listen_id_ ? listen_id_->device() : nullptr;
}

int Portal::start()
{
	thread_ = std::thread([this] { event_loop(); });
	return 0;
}

void Portal::stop_accepting()
{
	listen_id_.reset(); // waits out a running handler
}

void Portal::stop()
{
	stop_accepting();
	{
		std::lock_guard g(lock_);
		stop_ = true;
		cv_.notify_all();
	}
	if (thread_.joinable())
		thread_.join();
	// Not under lock_: a connection's own lock is taken before lock_, never after.
	std::vector<std::unique_ptr<PortalConn>> conns;
	{
		std::lock_guard g(lock_);
		conns.swap(conns_);
	}
	for (auto &c : conns) {
		if (!c->drained() || !c->finished()) {
			ULP_LOG(Error, Rdma,
			        "{}: connection {} not finished at shutdown; left allocated",
			        cfg_.name, c->describe());
			(void)c.release();
			continue;
		}
		c->detach();
	}
	conns.clear();
	std::lock_guard g(lock_);
	for (auto &[dev, r] : devices_) {
		release_device(r);
		r.heap.reset();
		if (pool_user_drop(*dev) && cq_pool_destroy(*dev) != 0)
			ULP_LOG(Error, Rdma, "{}: CQ pool of {} still in use", cfg_.name,
			        dev->name());
		r.pd.reset();
	}
	devices_.clear();
}

PortalRes Portal::resources()
{
	PortalRes r;
	std::lock_guard g(lock_);
	r.conns = conns_.size();
	for (const auto &c : conns_) {
		r.qps += c->gauge_qp_.load(std::memory_order_relaxed) ? 1 : 0;
		r.cq_entries += c->gauge_cqe_.load(std::memory_order_relaxed);
		std::lock_guard rg(c->res_lock_);
		if (c->rwqp_) {
			r.mrs_used += uint64_t(c->rwqp_->mrs().used());
			r.mrs += uint64_t(c->rwqp_->mrs().size());
		}
	}
	for (const auto &[dev, res] : devices_)
		if (res.heap) {
			r.heap_bytes += res.heap->capacity();
			r.heap_used += res.heap->in_use();
		}
	return r;
}

size_t Portal::conns()
{
	std::lock_guard g(lock_);
	return conns_.size();
}

uint64_t Portal::accepted()
{
	std::lock_guard g(lock_);
	return accepted_;
}

uint64_t Portal::rejected()
{
	std::lock_guard g(lock_);
	return rejected_;
}

void Portal::kick(PortalConn *c)
{
	std::lock_guard g(lock_);
	kicked_.push_back(c);
	cv_.notify_all();
}

void Portal::schedule_close(PortalConn *c)
{
	std::lock_guard g(lock_);
	closing_.push_back(c);
	cv_.notify_all();
}

DeviceRes *Portal::device_res(Device &dev, int *err)
{
	auto it = devices_.find(&dev);
	if (it != devices_.end())
		return &it->second;
	DeviceRes r;
	r.dev = &dev;
	r.pd = dev.alloc_pd();
	if (!r.pd) {
		*err = errno ? errno : ENOMEM;
		return nullptr;
	}
	// We READ into the data buffers and WRITE from them: local write access is what they
	// need, except on iWARP, where a READ sink must allow remote write (rdma_rw on iWARP:
	// the kernel's rule, RFC 5040 4.4).
	uint32_t access = ACCESS_LOCAL_WRITE;
	if (dev.is_iwarp())
		access |= ACCESS_REMOTE_WRITE;
	r.heap = DmaHeap::create(*r.pd, cfg_.heap_bytes, cfg_.max_io, access);
	if (!r.heap) {
		*err = errno ? errno : ENOMEM; // before the PD goes (its destructor may set errno)
		return nullptr;
	}
	pool_user_add(dev);
	return &devices_.emplace(&dev, std::move(r)).first->second;
}

void Portal::on_cm_event(CmId *id, CmEvent &ev)
{
	if (ev.event == CmEventType::ConnectRequest) {
		on_connect_request(ev);
		return;
	}
	if (auto *c = static_cast<PortalConn *>(id->context))
		c->on_cm_event(ev);
}

void Portal::on_connect_request(CmEvent &ev)
{
	Device *dev = ev.new_id ? ev.new_id->device() : nullptr;
	const std::string peer = ev.new_id ? ev.new_id->peer_addr().str() : "?";
	auto refuse = [&](const std::string &why, std::span<const uint8_t> pdata) {
		ULP_LOG_RATELIMITED(Info, Rdma, "{}: connection request from {} refused: {}",
		                    cfg_.name, peer, why);
		if (ev.new_id)
			ev.new_id->reject(pdata);
		std::lock_guard g(lock_);
		rejected_++;
	};
	if (!dev) {
		refuse("no device", {});
		return;
	}
	DeviceRes *r;
	int err = 0;
	{
		std::lock_guard g(lock_);
		r = device_res(*dev, &err);
	}
	if (!r) {
		refuse(std::string("device resources: ") + std::strerror(err), {});
		return;
	}
	ConnParam accept;
	std::vector<uint8_t> reject;
	std::unique_ptr<PortalConn> c = on_connect_request(ev, *r, &accept, &reject);
	if (!c) {
		// The protocol said why (its log line); the id is still in ev.
		if (ev.new_id)
			ev.new_id->reject(reject);
		std::lock_guard g(lock_);
		rejected_++;
		return;
	}
	const int rc = c->id_->accept(accept);
	PortalConn *conn = c.get();
	{
		std::lock_guard g(lock_);
		conns_.push_back(std::move(c));
		if (rc == 0)
			accepted_++;
		else
			rejected_++;
	}
	if (rc != 0) {
		ULP_LOG(Warn, Rdma, "{}: accept {}: {}", cfg_.name, peer, std::strerror(-rc));
		accept_failed(conn, rc);
	}
}

void Portal::event_loop()
{
	set_thread_name((std::string("ulp-") + cfg_.name + "-cm").c_str());
	using clock = std::chrono::steady_clock;
	auto next_tick = clock::now();
	std::unique_lock g(lock_);
	while (!stop_) {
		cv_.wait_until(g, next_tick,
		               [&] { return stop_ || !closing_.empty() || !kicked_.empty(); });
		std::vector<PortalConn *> closing, kicked;
		closing.swap(closing_);
		kicked.swap(kicked_);
		g.unlock();
		for (PortalConn *c : kicked)
			c->run_kicked();
		for (PortalConn *c : closing)
			c->drain();
		g.lock();
		if (clock::now() >= next_tick) {
			next_tick = clock::now() + cfg_.tick;
			std::vector<PortalConn *> all;
			for (auto &c : conns_)
				all.push_back(c.get());
			g.unlock();
			const auto now = clock::now();
			for (PortalConn *c : all)
				c->tick(now);
			reap(all);
			g.lock();
		}
	}
}

void Portal::reap(const std::vector<PortalConn *> &all)
{
	// Event thread, lock_ not held (a connection's lock is taken before lock_, never
	// after). Connections that are drained (no completion will come) and finished (every
	// command released, nothing in flight; checked under their own lock) are freed. Only
	// this thread frees, so the pointers stay valid meanwhile.
	for (PortalConn *c : all) {
		if (!c->drained() || !c->finished())
			continue;
		{
			std::lock_guard g(lock_);
			std::erase(closing_, c);
			std::erase(kicked_, c);
		}
		c->detach();
		c->release_resources(); // waits out a CM handler still running on it
		std::unique_ptr<PortalConn> dead;
		{
			std::lock_guard g(lock_);
			auto it = std::find_if(
			    conns_.begin(), conns_.end(),
			    [&](const std::unique_ptr<PortalConn> &p) { return p.get() == c; });
			dead = std::move(*it);
			conns_.erase(it);
		}
	}
}

} // namespace ulp::rdma
