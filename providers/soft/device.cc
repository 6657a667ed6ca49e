// SPDX-License-Identifier: MIT
// providers/soft/device.cc - soft devices: profiles, limits, the process's device list,
// fault injection and counters.
#include "core/log.h"
#include "providers/soft/soft_internal.h"

#include <arpa/inet.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace ulp::soft
{

namespace
{

struct Devices {
	std::mutex lock;
	std::vector<SoftDevice *> list; // creation order; the first is the default (lock)
	uint32_t next_name = 0;         // for the next unnamed device (lock)
	// Inline devices in list (written under lock, read without it): progress_inline_all,
	// called by every get_cq_event and by every post on an engine thread, leaves at once
	// when there are none instead of taking lock - the lock every poller thread would
	// otherwise take for each completion event.
	std::atomic<uint32_t> inline_devices{0};
};

Devices &devices_()
{
	static Devices d;
	return d;
}

// IB/RoCE-like: the shape of a ConnectX or rxe as the kernel sees it.
DeviceAttr ib_profile()
{
	DeviceAttr a;
	a.device_cap_flags = DEVICE_MEM_MGT_EXTENSIONS | DEVICE_RC_RNR_NAK_GEN | DEVICE_CQ_RESIZE |
	                     DEVICE_CQ_MODERATION | DEVICE_LAST_WQE_EVENT;
	a.max_mr_size = 1ull << 40;
	a.page_size_cap = 0xfffff000;
	a.vendor_id = 0x5346; // "SF"
	a.max_qp = 4096;
	a.max_qp_wr = 16384;
	a.max_sge = 30;
	a.max_sge_rd = 30;
	a.max_cq = 4096;
	a.max_cqe = 1 << 18;
	a.max_mr = 1 << 16;
	a.max_pd = 1024;
	a.max_qp_rd_atom = 16;
	a.max_qp_init_rd_atom = 16;
	a.max_srq = 1024;
	a.max_srq_wr = 16384;
	a.max_srq_sge = 30;
	a.max_fast_reg_page_list_len = 512;
	a.max_inline_data = 256;
	a.num_comp_vectors = 4;
	return a;
}

// iWARP-like: siw / cxgb4 shape. One SGE per READ, READ sinks need remote write, no
// LAST_WQE_REACHED, no CQ resize, no RNR NAKs on the wire (iWARP has none; a SEND
// without a posted receive is a fatal error there, but ULPs never rely on that).
DeviceAttr iwarp_profile()
{
	DeviceAttr a = ib_profile();
	a.device_cap_flags = DEVICE_MEM_MGT_EXTENSIONS | DEVICE_CQ_MODERATION;
	a.max_sge_rd = 1;
	a.max_qp_rd_atom = 8;
	a.max_qp_init_rd_atom = 8;
	a.vendor_id = 0x5357; // "SW"
	return a;
}

void apply(uint32_t v, uint32_t &field)
{
	if (v)
		field = v;
}

// How many engines a device gets (DeviceConfig::engines). The default follows cq_poll's
// pollers (cq_poll/cq_poll.cc, cq_pool.cc): one per completion vector, at most one per
// CPU, so that a poller and the engine of its vector pair up.
uint32_t engine_count_for(const DeviceConfig &cfg, const DeviceAttr &a)
{
	const uint32_t vectors = std::max(1u, a.num_comp_vectors);
	uint32_t want = cfg.engines;
	if (!want) {
		if (const char *env = getenv("ULP_SOFT_ENGINES"); env && *env) {
			char *end = nullptr;
			unsigned long v = std::strtoul(env, &end, 10);
			if (*end || v == 0 || v > 1024)
				ULP_LOG_RATELIMITED(Warn, Soft,
				                    "ULP_SOFT_ENGINES={}: not a count from 1 to "
				                    "1024; ignored",
				                    env);
			else
				want = static_cast<uint32_t>(v);
		}
	}
	if (!want) {
		unsigned cpus = std::thread::hardware_concurrency();
		want = std::max(1u, cpus);
	}
	return std::min(want, vectors);
}

Gid gid_of(uint32_t ip)
{
	// IPv4-mapped, as RoCEv2 GIDs are: ::ffff:a.b.c.d
	Gid g{};
	g[10] = g[11] = 0xff;
	g[12] = static_cast<uint8_t>(ip >> 24);
	g[13] = static_cast<uint8_t>(ip >> 16);
	g[14] = static_cast<uint8_t>(ip >> 8);
	g[15] = static_cast<uint8_t>(ip);
	return g;
}

} // namespace

Counters AtomicCounters::snapshot() const
{
	Counters c;
	c.posted = posted.load();
	c.post_sends = post_sends.load();
	c.completed = completed.load();
	c.errors = errors.load();
	c.flushes = flushes.load();
	c.bytes_tx = bytes_tx.load();
	c.bytes_rx = bytes_rx.load();
	c.rnr_naks = rnr_naks.load();
	c.max_rd_inflight = max_rd_inflight.load();
	return c;
}

SoftDevice::SoftDevice(const DeviceConfig &c, std::string name, const DeviceAttr &a, const Gid &g)
    : Device(std::move(name), a, c.profile == Profile::Iwarp ? NodeType::Rnic : NodeType::Ca, g),
      cfg(c), ip(0)
{
	const uint32_t n = engine_count_for(c, a);
	engines.reserve(n);
	for (uint32_t i = 0; i < n; i++)
		engines.push_back(std::make_unique<Engine>(c.exec == soft::Exec::Engine, i));
	faults.rng.seed(c.fault_seed);
	qps.resize(a.max_qp);
	// Across processes the ring wire, unless the device or the environment keeps to packets.
	const char *env = getenv("ULP_SOFT_WIRE");
	xproc_rings = c.wire == Wire::Shm ||
	              (c.wire == Wire::Auto && !(env && std::strcmp(env, "socket") == 0));
}

SoftDevice::~SoftDevice()
{
	// Every engine stops before any is freed: a running engine may still schedule a QP
	// of another (a requester moving its responder to ERR), which a stopped one ignores.
	for (auto &e : engines)
		e->stop();
}

Device *create_device(const DeviceConfig &cfg)
{
	in_addr in{};
	if (inet_pton(AF_INET, cfg.ip.c_str(), &in) != 1) {
		errno = EINVAL;
		return nullptr;
	}
	DeviceAttr a = cfg.profile == Profile::Iwarp ? iwarp_profile() : ib_profile();
	const Limits &l = cfg.limits;
	apply(l.max_qp_wr, a.max_qp_wr);
	apply(l.max_sge, a.max_sge);
	// A READ cannot gather more than a WR may: a smaller max_sge caps the profile's
	// max_sge_rd unless the caller set that one too (and then it must fit).
	if (l.max_sge_rd)
		a.max_sge_rd = l.max_sge_rd;
	else
		a.max_sge_rd = std::min(a.max_sge_rd, a.max_sge);
	apply(l.max_fast_reg_page_list_len, a.max_fast_reg_page_list_len);
	apply(l.max_sgl_rd, a.max_sgl_rd);
	apply(l.max_qp_rd_atom, a.max_qp_rd_atom);
	apply(l.max_qp_rd_atom, a.max_qp_init_rd_atom);
	apply(l.max_cqe, a.max_cqe);
	apply(l.max_inline_data, a.max_inline_data);
	apply(l.num_comp_vectors, a.num_comp_vectors);
	a.device_cap_flags &= ~cfg.clear_cap_flags;
	a.max_srq_wr = a.max_qp_wr;
	a.max_srq_sge = a.max_sge;
	if (a.max_sge > kMaxSge || a.max_sge_rd > a.max_sge || !a.max_qp_wr ||
	    !a.max_fast_reg_page_list_len || !a.max_cqe || !a.num_comp_vectors) {
		errno = EINVAL;
		return nullptr;
	}
	uint32_t ip = ntohl(in.s_addr);
	// An EUI-64 of our own, as rxe makes one from its MAC: locally administered (0x02),
	// "SF", 0xff, then the device's IPv4 address, so that it is stable across runs and
	// processes and differs between devices.
	a.node_guid = (uint64_t{0x025346ff} << 32) | ip;
	std::string name = cfg.name;
	SoftDevice *d;
	{
		auto &D = devices_();
		std::lock_guard g(D.lock);
		if (name.empty())
			name = "soft" + std::to_string(D.next_name++);
		for (auto *o : D.list) {
			if (o->name() == name) {
				errno = EEXIST;
				return nullptr;
			}
		}
		d = new SoftDevice(cfg, name, a, gid_of(ip));
		d->ip = ip;
		D.list.push_back(d);
		if (cfg.exec == soft::Exec::Inline)
			D.inline_devices.fetch_add(1, std::memory_order_relaxed);
	}
	register_provider(&provider());
	register_device(d);
	return d;
}

void destroy_device(Device *dev)
{
	auto *d = static_cast<SoftDevice *>(dev);
	if (!d)
		return;
	unregister_device(d);
	{
		auto &D = devices_();
		std::lock_guard g(D.lock);
		if (std::erase(D.list, d) && d->cfg.exec == soft::Exec::Inline)
			D.inline_devices.fetch_sub(1, std::memory_order_relaxed);
	}
	if (d->users.load())
		ULP_LOG(Error, Soft, "destroying {} with {} objects still alive", d->name(),
		        d->users.load());
	// What a program that ran on it (a daemon under a benchmark) did, for whoever reads its
	// log at debug: doorbells per WR are what a ULP's chaining saves.
	if (log::level() <= log::Level::Debug) {
		const Counters c = d->counters();
		ULP_LOG(Debug, Soft,
		        "{}: {} WRs posted ({} post_send calls), {} completions ({} errors, {} "
		        "flushes), {} bytes sent, {} received",
		        d->name(), c.posted, c.post_sends, c.completed, c.errors, c.flushes,
		        c.bytes_tx, c.bytes_rx);
	}
	delete d;
}

bool is_soft(const Device &dev)
{
	return dynamic_cast<const SoftDevice *>(&dev) != nullptr;
}

SoftDevice *device_by_ip(uint32_t ip)
{
	auto &D = devices_();
	std::lock_guard g(D.lock);
	for (auto *d : D.list)
		if (d->ip == ip && !d->removed.load())
			return d;
	return nullptr;
}

SoftDevice *device_by_gid(const Gid &gid)
{
	auto &D = devices_();
	std::lock_guard g(D.lock);
	for (auto *d : D.list)
		if (d->gid() == gid && !d->removed.load())
			return d;
	return nullptr;
}

SoftDevice *default_device()
{
	auto &D = devices_();
	std::lock_guard g(D.lock);
	for (auto *d : D.list)
		if (!d->removed.load())
			return d;
	return nullptr;
}

void progress_inline_all()
{
	// A relaxed read: a device another thread creates at this moment is seen by the next
	// call.
	if (devices_().inline_devices.load(std::memory_order_relaxed) == 0)
		return;
	// Loop until every inline device is idle: work on one can create work on another.
	for (int round = 0; round < 1000; round++) {
		std::vector<SoftDevice *> list;
		{
			auto &D = devices_();
			std::lock_guard g(D.lock);
			for (auto *d : D.list)
				if (d->cfg.exec == soft::Exec::Inline)
					list.push_back(d);
		}
		int n = 0;
		for (auto *d : list)
			for (auto &e : d->engines)
				n += e->run_once();
		if (!n)
			return;
	}
}

int progress(Device &dev)
{
	auto &d = sdev_of(dev);
	if (d.cfg.exec != soft::Exec::Inline)
		return 0;
	int n = 0;
	for (auto &e : d.engines)
		n += e->run_once();
	return n;
}

unsigned engine_count(Device &dev)
{
	return static_cast<unsigned>(sdev_of(dev).engines.size());
}

unsigned qp_engine(Qp &q)
{
	auto &qp = static_cast<SoftQp &>(q);
	auto &es = qp.sdev.engines;
	for (size_t i = 0; i < es.size(); i++)
		if (es[i].get() == &qp.engine)
			return static_cast<unsigned>(i);
	return 0; // not reached: a QP's engine is one of its device's
}

int SoftDevice::query_port(uint8_t port_num, PortAttr *pa)
{
	if (port_num != 1)
		return -EINVAL;
	pa->state = port_state;
	pa->link_layer = cfg.profile == Profile::Iwarp ? LinkLayer::Iwarp : LinkLayer::Ethernet;
	pa->max_mtu = 4096;
	pa->active_mtu = 4096;
	pa->gid_tbl_len = 1;
	return 0;
}

SoftPd::SoftPd(SoftDevice &dev) : Pd(dev), sdev(dev)
{
	dev.users++;
}

SoftPd::~SoftPd()
{
	if (users.load())
		ULP_LOG(Error, Soft, "PD freed with {} objects on it", users.load());
	sdev.users--;
}

std::unique_ptr<Pd> SoftDevice::alloc_pd()
{
	return std::make_unique<SoftPd>(*this);
}

uint32_t SoftDevice::alloc_qpn()
{
	std::lock_guard g(qp_lock);
	// Lowest free number (QP0/QP1 are below kFirstQpn, as on hardware). The slot holds
	// kQpnReserved until create_qp stores the QP.
	for (uint32_t i = 0; i < qps.size(); i++) {
		if (!qps[i]) {
			qps[i] = kQpnReserved;
			return i + kFirstQpn;
		}
	}
	return 0;
}

void SoftDevice::free_qpn(uint32_t qpn, const AtomicCounters *final)
{
	std::lock_guard g(qp_lock);
	if (final)
		retire(*final); // with the removal, so counters() never counts it twice
	qps[qpn - kFirstQpn] = nullptr;
}

std::shared_ptr<QpHandle> SoftDevice::find_qp(uint32_t qpn)
{
	std::lock_guard g(qp_lock);
	if (qpn < kFirstQpn || qpn - kFirstQpn >= qps.size())
		return nullptr;
	SoftQp *qp = qps[qpn - kFirstQpn];
	if (!qp || qp == kQpnReserved)
		return nullptr;
	return qp->handle;
}

// ---------------------------------------------------------------------------------------------
// Faults

bool SoftDevice::fault(FaultPoint p, uint32_t qpn, uint32_t *delay_us, const WrOpcode *op)
{
	std::lock_guard g(faults.lock);
	for (auto &rule : faults.rules) {
		const FaultRule &r = rule.r;
		if (r.point != p || (r.qp_num && r.qp_num != qpn))
			continue;
		if (r.match_opcode && (!op || *op != r.opcode))
			continue;
		if (r.count && rule.fired >= r.count)
			continue;
		rule.seen++;
		bool fire;
		if (r.nth)
			fire = rule.seen >= r.nth; // from the nth event on, count times
		else
			fire = std::uniform_real_distribution<double>(0, 1)(faults.rng) <
			       r.probability;
		if (!fire)
			continue;
		rule.fired++;
		faults.fired++;
		if (delay_us)
			*delay_us = r.delay_us;
		return true;
	}
	return false;
}

int inject_fault(Device &dev, const FaultRule &rule)
{
	auto &d = sdev_of(dev);
	if (rule.nth == 0 && (rule.probability <= 0 || rule.probability > 1))
		return -EINVAL;
	std::lock_guard g(d.faults.lock);
	d.faults.rules.push_back({rule, 0, 0});
	d.faults.armed.store(true);
	return static_cast<int>(d.faults.rules.size() - 1);
}

void clear_faults(Device &dev)
{
	auto &d = sdev_of(dev);
	std::lock_guard g(d.faults.lock);
	d.faults.rules.clear();
	d.faults.armed.store(false);
}

uint64_t faults_fired(Device &dev)
{
	return sdev_of(dev).faults.fired.load();
}

void force_qp_error(Qp &qp)
{
	EventType e = EventType::QpFatal;
	static_cast<SoftQp &>(qp).to_error(&e);
}

void force_device_fatal(Device &dev)
{
	auto &d = sdev_of(dev);
	std::vector<std::shared_ptr<QpHandle>> list;
	{
		std::lock_guard g(d.qp_lock);
		d.fatal = true;
		d.port_state = PortState::Down;
		for (auto *qp : d.qps)
			if (qp && qp != SoftDevice::kQpnReserved)
				list.push_back(qp->handle);
	}
	for (auto &h : list) {
		// The handle lock keeps a QP that is being destroyed from being scheduled.
		std::shared_lock hg(h->lock);
		if (h->qp)
			h->qp->to_error(nullptr);
	}
	AsyncEvent ev;
	ev.event = EventType::DeviceFatal;
	ev.device = &d;
	d.event(ev);
}

// Device counters are summed when asked for, so that the data path only touches its
// QP's own counters (no device-wide cache line bouncing between posters and engines).
void SoftDevice::retire(const AtomicCounters &c)
{
	Counters q = c.snapshot();
	retired.add(retired.posted, q.posted);
	retired.add(retired.post_sends, q.post_sends);
	retired.add(retired.completed, q.completed);
	retired.add(retired.errors, q.errors);
	retired.add(retired.flushes, q.flushes);
	retired.add(retired.bytes_tx, q.bytes_tx);
	retired.add(retired.bytes_rx, q.bytes_rx);
	retired.add(retired.rnr_naks, q.rnr_naks);
	uint64_t m = retired.max_rd_inflight.load();
	while (q.max_rd_inflight > m &&
	       !retired.max_rd_inflight.compare_exchange_weak(m, q.max_rd_inflight))
		;
}

Counters SoftDevice::counters()
{
	std::lock_guard g(qp_lock);
	Counters t = retired.snapshot();
	t.posted += srq_posted.load();
	for (auto *qp : qps) {
		if (!qp || qp == kQpnReserved)
			continue;
		Counters q = qp->ctr.snapshot();
		t.posted += q.posted;
		t.post_sends += q.post_sends;
		t.completed += q.completed;
		t.errors += q.errors;
		t.flushes += q.flushes;
		t.bytes_tx += q.bytes_tx;
		t.bytes_rx += q.bytes_rx;
		t.rnr_naks += q.rnr_naks;
		t.max_rd_inflight = std::max(t.max_rd_inflight, q.max_rd_inflight);
	}
	return t;
}

Counters device_counters(Device &dev)
{
	return sdev_of(dev).counters();
}
Counters qp_counters(Qp &qp)
{
	return static_cast<SoftQp &>(qp).ctr.snapshot();
}

} // namespace ulp::soft
