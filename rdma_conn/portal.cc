// SPDX-License-Identifier: MIT
// rdma_conn/portal.cc - portals and the RDMA half of their connections (see portal.h).
#include "rdma_conn/portal.h"

#include "core/check.h"
#include "core/drain.h"
#include "core/lock_assert.h"
#include "core/log.h"
#include "core/thread_name.h"
#include "core/turn.h"
#include "cq_poll/cq_poll.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
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

// A portal has resources (and maybe connections) on dev.
bool pool_in_use(Device &dev)
{
	std::lock_guard g(g_pool_users_lock);
	return g_pool_users.count(&dev) != 0;
}

using clock = std::chrono::steady_clock;

long long ms_since(clock::time_point t)
{
	return std::chrono::duration_cast<std::chrono::milliseconds>(clock::now() - t).count();
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

void PortalConn::post_plugged(PlugPiece *p, SendWr *first)
{
	plug_.add(p, first);
	if (plug_.size() >= kPlugMax) {
		// A long turn (a reap of up to 256 completions) would hold every response until
		// its end while the initiator, its commands all answered here, waits: a chain
		// goes out each kPlugMax pieces, as blk_plug flushes at BLK_MAX_REQUEST_COUNT.
		// The turn's end posts the rest.
		flush_plug();
		return;
	}
	// Once closed, at once, even with a flush event still due: that event may run only after
	// the portal has drained the QP (drain() waits for no event), and what it posted then
	// would have no drain behind it.
	if (plug_closed_) {
		flush_plug();
		return;
	}
	if (plug_due_)
		return; // this turn's flush is coming (or one is posted to the holder)
	if (defer_to_turn_end(&PortalConn::plug_turn_end, this)) {
		plug_due_ = true;
		return;
	}
	flush_plug();
}

void PortalConn::plug_turn_end(void *conn)
{
	// Outside every callback of the turn, so not holding the connection: the protocol's
	// event runs the flush here, or hands it to the thread that holds the connection now.
	static_cast<PortalConn *>(conn)->post_plug_flush();
}

void PortalConn::post_plug_flush()
{
	ULP_CHECK(!"a protocol that plugs sends must run their flush (post_plug_flush)");
}

void PortalConn::flush_plug()
{
	if (plug_.empty())
		return; // nothing to post: no QP needed, nothing to fail
	PlugList unsent;
	const int rc = qp() ? plug_.post(*qp(), &unsent) : -ENOTCONN;
	if (rc == 0)
		return;
	ULP_LOG_RATELIMITED(Error, Rdma, "{}: post_send: {}", describe(), std::strerror(-rc));
	// The protocol closes first: what the pieces' ends do then (a command failed, its
	// ioctx freed) starts nothing new on a connection that is still live.
	plug_failed(rc);
	while (!unsent.empty()) {
		PlugPiece &p = unsent.front();
		unsent.pop_front();
		p.unsent(&p);
	}
}

void PortalConn::drain()
{
	// Every WR posted so far completes (flushed) and is dispatched through the protocol's
	// done handlers; the CQ is processed by a cq_poll thread, so drain waits for it.
	if (id_ && id_->qp()) {
		drain_qp(*id_->qp(), portal_.cfg().drain_timeout);
		// What waited for a completion the device lost ends now (send_plug.h).
		plug_.drained(cq_, id_->qp());
	}
	drained_.store(true, std::memory_order_release);
}

// ---- Portal --------------------------------------------------------------------------------

Portal::Portal(Provider &provider, const PortalConfig &cfg) : provider_(provider), cfg_(cfg) {}

Portal::~Portal()
{
	stop();
}

int Portal::open_listener(const SockAddr &addr, std::unique_ptr<CmId> *out, std::string *why)
{
	std::unique_ptr<CmId> id =
	    provider_.create_id([this](CmId *i, CmEvent &ev) { on_cm_event(i, ev); }, nullptr);
	if (!id) {
		const int e = errno ? errno : ENOMEM;
		*why = std::string("create_id: ") + std::strerror(e);
		return -e;
	}
	if (int rc = id->bind_addr(addr); rc != 0) {
		*why = "bind " + addr.str() + ": " + std::strerror(-rc);
		return rc;
	}
	if (int rc = id->listen(128); rc != 0) {
		*why = "listen on " + addr.str() + ": " + std::strerror(-rc);
		return rc;
	}
	*out = std::move(id);
	return 0;
}

int Portal::listen(const SockAddr &addr, std::string *why)
{
	std::unique_ptr<CmId> id;
	if (int rc = open_listener(addr, &id, why); rc != 0)
		return rc;
	std::lock_guard g(lock_);
	listen_addr_ = id->local_addr();
	port_ = listen_addr_.port();
	addr_ = listen_addr_.str();
	listen_id_ = std::move(id);
	return 0;
}

std::string Portal::addr() const
{
	return addr_;
}

bool Portal::listening() const
{
	std::lock_guard g(lock_);
	return listen_id_ != nullptr;
}

Device *Portal::listen_device() const
{
	std::lock_guard g(lock_);
	return listen_id_ ? listen_id_->device() : nullptr;
}

int Portal::start()
{
	thread_.start([this] { event_loop(); });
	return 0;
}

void Portal::stop_accepting()
{
	std::unique_ptr<CmId> l;
	{
		std::lock_guard g(lock_);
		accepting_ = false;
		l = std::move(listen_id_);
	}
	l.reset(); // waits out a running handler (which may take lock_)
}

void Portal::stop()
{
	stop_accepting();
	{
		std::lock_guard g(lock_);
		stop_ = true;
		cv_.notify_all();
	}
	thread_.join(log::Sub::Rdma,
	             "a portal's event thread (a connection's drain or reap stuck?)");
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
	std::map<Device *, DeviceRes> devs;
	{
		std::lock_guard g(lock_);
		devs.swap(devices_);
		removals_.clear();
	}
	for (auto &[dev, r] : devs)
		free_device_res(dev, r);
}

void Portal::free_device_res(Device *dev, DeviceRes &r)
{
	ULP_ASSERT_NOT_HELD(lock_);
	release_device(r);
	r.heap.reset();
	const bool last = pool_user_drop(*dev);
	if (last && cq_pool_destroy(*dev) != 0)
		ULP_LOG(Error, Rdma, "{}: CQ pool of {} still in use", cfg_.name, dev->name());
	r.pd.reset();
	if (last)
		provider_.device_released(*dev); // closes it only if it went away
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
	ULP_ASSERT_HELD(lock_);
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
	// Built on the first connection request from this device, on the CM thread, and
	// registered whole: on a slow host (a TCG VM: 6-11 s for 256 MiB) every CM event of
	// the process waits meanwhile, and a connecting initiator may give up; so it is said.
	const auto t0 = std::chrono::steady_clock::now();
	r.heap = DmaHeap::create(*r.pd, cfg_.heap_bytes, cfg_.max_io, access);
	const double took =
	    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
	if (took >= 1.0)
		ULP_LOG(Warn, Rdma,
		        "{}: the {} MiB data heap on {} took {:.1f} s to build and register (the "
		        "first connection from that device waited for it)",
		        cfg_.name, cfg_.heap_bytes >> 20, dev.name(), took);
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
	if (ev.event == CmEventType::DeviceRemoval)
		note_removal(id);
	// A connection closes on it as on a disconnect (the protocol's handler).
	if (auto *c = static_cast<PortalConn *>(id->context))
		c->on_cm_event(ev);
}

void Portal::note_removal(CmId *id)
{
	Device *dev = id->device();
	const auto now = clock::now();
	std::lock_guard g(lock_);
	if (listen_id_ && id == listen_id_.get() && !relisten_) {
		relisten_ = true;
		lost_at_ = now;
		next_listen_ = now;
		listen_said_ = {};
		listen_tries_ = 0;
	}
	if (dev && std::none_of(removals_.begin(), removals_.end(),
	                        [&](const Removal &r) { return r.dev == dev; }))
		removals_.push_back(Removal{dev, now});
	cv_.notify_all();
}

void Portal::handle_removals()
{
	ULP_ASSERT_NOT_HELD(lock_);
	// Event thread. The listener whose device went away is destroyed here (its handler may
	// be waiting for lock_: never under it).
	std::unique_ptr<CmId> dead;
	std::vector<Removal> rs;
	{
		std::lock_guard g(lock_);
		if (relisten_ && listen_id_)
			dead = std::move(listen_id_);
		rs = removals_;
	}
	if (dead) {
		ULP_LOG(Warn, Rdma,
		        "{}: the device under {} was removed: not listening; trying again every "
		        "{} ms until a device has the address",
		        cfg_.name, addr_, cfg_.relisten_period.count());
		dead.reset();
	}
	for (const Removal &r : rs) {
		size_t n = 0;
		DeviceRes res;
		bool had_res = false, announce = false, overdue = false;
		{
			std::lock_guard g(lock_);
			for (auto &c : conns_)
				if (c->id_ && c->id_->device() == r.dev)
					n++;
			if (n == 0) {
				auto it = devices_.find(r.dev);
				if (it != devices_.end()) {
					res = std::move(it->second);
					devices_.erase(it);
					had_res = true;
				}
				std::erase_if(removals_,
				              [&](const Removal &x) { return x.dev == r.dev; });
			} else {
				for (Removal &x : removals_)
					if (x.dev == r.dev) {
						announce = !x.announced;
						x.announced = true;
						overdue =
						    !x.overdue &&
						    ms_since(x.since) >= cfg_.removal_bound.count();
						x.overdue = x.overdue || overdue;
					}
			}
		}
		if (n == 0) {
			if (had_res)
				free_device_res(r.dev, res);
			// No portal of the process holds anything on it: the provider may close it
			// (a portal without resources there had only its listener).
			else if (!pool_in_use(*r.dev))
				provider_.device_released(*r.dev);
			ULP_LOG(Info, Rdma, "{}: {} released, {} ms after its removal", cfg_.name,
			        r.dev->name(), ms_since(r.since));
			continue;
		}
		if (announce)
			ULP_LOG(
			    Warn, Rdma,
			    "{}: {} was removed: {} connections on it close (RDMA_CM_EVENT_DEVICE_"
			    "REMOVAL); its resources are freed once they are gone",
			    cfg_.name, r.dev->name(), n);
		if (overdue)
			ULP_LOG(Error, Rdma,
			        "{}: {} connections on the removed {} not gone {} ms after the "
			        "removal; "
			        "its resources stay until they are",
			        cfg_.name, n, r.dev->name(), ms_since(r.since));
	}
}

void Portal::try_relisten()
{
	// Event thread. Under lock_ from the check to the new listener's publication, so that
	// a DEVICE_REMOVAL of the new listener (its handler takes lock_) finds it.
	std::lock_guard g(lock_);
	const auto now = clock::now();
	if (!relisten_ || listen_id_ || !accepting_ || now < next_listen_)
		return;
	std::unique_ptr<CmId> id;
	std::string why;
	if (open_listener(listen_addr_, &id, &why) == 0) {
		Device *dev = id->device();
		listen_id_ = std::move(id);
		relisten_ = false;
		ULP_LOG(Warn, Rdma,
		        "{}: listening on {} again ({}), {} ms after its device went away",
		        cfg_.name, addr_, dev ? dev->name() : std::string("any device"),
		        ms_since(lost_at_));
		return;
	}
	listen_tries_++;
	next_listen_ = now + cfg_.relisten_period;
	if (listen_tries_ == 1 || now - listen_said_ >= std::chrono::seconds(30)) {
		listen_said_ = now;
		ULP_LOG(Info, Rdma, "{}: cannot listen on {} yet ({}; {} tries in {} ms)",
		        cfg_.name, addr_, why, listen_tries_, ms_since(lost_at_));
	}
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
			handle_removals();
			try_relisten();
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
	ULP_ASSERT_NOT_HELD(lock_);
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
