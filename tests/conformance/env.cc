// SPDX-License-Identifier: MIT
// tests/conformance/env.cc - fabrics (the only provider-specific code of the suite) and
// the Endpoint that both sides of a connection are driven through.
#include "tests/conformance/env.h"

#include "providers/soft/soft.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <thread>

namespace ulp::conf
{

// ---------------------------------------------------------------------------------------------
// Fabrics

namespace
{

std::vector<FabricDesc> make_fabrics()
{
	std::vector<FabricDesc> v;
	FabricDesc soft;
	soft.provider = "soft";
	soft.soft = true;
	soft.scattered_reg_mr = true;
	soft.peer_death_event = true;
	soft.strict_iwarp_read_sink = true;

	FabricDesc f = soft;
	f.name = "soft-inproc";
	f.soft_wire = "inproc";
	v.push_back(f);
	f = soft;
	f.name = "soft-socket";
	f.socket_wire = true;
	f.soft_wire = "socket";
	v.push_back(f);
	f = soft;
	f.name = "soft-inline";
	f.inline_exec = true;
	f.soft_wire = "inproc";
	v.push_back(f);
	f = soft;
	f.name = "soft-shm";
	f.shm_wire = true;
	f.soft_wire = "shm";
	v.push_back(f);
	f = soft;
	f.name = "soft-xproc";
	f.xproc = true;
	f.soft_wire = "shm";
	v.push_back(f);
	f = soft;
	f.name = "soft-xproc-socket";
	f.xproc = true;
	f.socket_wire = true;
	f.soft_wire = "socket";
	v.push_back(f);

	// rdma-core: REG_MR becomes a type-2 MW bind (virtually contiguous ranges only);
	// a dead peer is found by the transport retry timer, not by the CM at once; siw
	// places READ responses after checking LOCAL_WRITE only (siw_proc_rresp).
	FabricDesc verbs;
	verbs.name = "verbs";
	verbs.provider = "verbs";
	verbs.xproc = true;
	v.push_back(verbs);
	return v;
}

const std::vector<FabricDesc> &all_fabrics()
{
	static const std::vector<FabricDesc> v = make_fabrics();
	return v;
}

std::mutex g_dev_lock;
std::vector<Device *> g_inline_devs;

} // namespace

std::vector<std::string> fabric_names()
{
	std::vector<std::string> names;
	if (const char *env = getenv("ULP_CONF_FABRICS"); env && *env) {
		std::stringstream ss(env);
		std::string n;
		while (std::getline(ss, n, ','))
			if (!n.empty())
				names.push_back(n);
		return names;
	}
	return {"soft-inproc", "soft-socket", "soft-inline",
	        "soft-shm",    "soft-xproc",  "soft-xproc-socket"};
}

std::vector<std::string> local_fabric_names()
{
	std::vector<std::string> names;
	for (auto &n : fabric_names())
		if (!fabric(n).xproc)
			names.push_back(n);
	// A suite instantiated with no values is an error in gtest: the verbs fabric alone
	// still runs the local tests, in this process.
	if (names.empty()) {
		for (auto &n : fabric_names())
			if (fabric(n).provider != "soft")
				names.push_back(n);
	}
	return names;
}

const FabricDesc &fabric(const std::string &name)
{
	for (auto &f : all_fabrics())
		if (f.name == name)
			return f;
	fprintf(stderr, "conformance: unknown fabric '%s'\n", name.c_str());
	abort();
}

Provider *fabric_provider(const FabricDesc &f)
{
	if (f.soft)
		return &soft::provider();
	return find_provider(f.provider);
}

std::string device_ip(const FabricDesc &f, int side)
{
	if (f.soft)
		return side == 0 ? "127.0.0.1" : "127.0.0.2";
	const char *env = getenv(side == 0 ? "ULP_CONF_VERBS_IP" : "ULP_CONF_VERBS_PEER_IP");
	if (!env)
		env = getenv("ULP_CONF_VERBS_IP");
	return env ? env : "";
}

Device *open_device(const FabricDesc &f, const DevOpts &o, std::string *why)
{
	if (f.soft) {
		soft::DeviceConfig cfg;
		cfg.profile = o.iwarp ? soft::Profile::Iwarp : soft::Profile::Ib;
		cfg.ip = device_ip(f, o.side);
		cfg.exec = f.inline_exec ? soft::Exec::Inline : soft::Exec::Engine;
		cfg.wire = f.socket_wire ? soft::Wire::Socket
		           : f.shm_wire  ? soft::Wire::Shm
		                         : soft::Wire::Auto;
		Device *dev = soft::create_device(cfg);
		if (!dev) {
			*why = std::string("soft::create_device: ") + strerror(errno);
			return nullptr;
		}
		if (f.inline_exec) {
			std::lock_guard g(g_dev_lock);
			g_inline_devs.push_back(dev);
		}
		return dev;
	}
	if (!fabric_provider(f)) {
		*why = "provider '" + f.provider + "' not registered";
		return nullptr;
	}
	const char *name = getenv("ULP_CONF_VERBS_DEVICE");
	Device *dev = name ? find_device(name) : nullptr;
	if (!dev) {
		*why = "no device: set ULP_CONF_VERBS_DEVICE";
		return nullptr;
	}
	if (o.iwarp != dev->is_iwarp()) {
		*why = o.iwarp ? "device is not iWARP" : "device is iWARP";
		return nullptr;
	}
	return dev;
}

void close_device(const FabricDesc &f, Device *dev)
{
	if (!dev || !f.soft)
		return;
	{
		std::lock_guard g(g_dev_lock);
		std::erase(g_inline_devs, dev);
	}
	soft::destroy_device(dev);
}

void progress_all()
{
	std::vector<Device *> devs;
	{
		std::lock_guard g(g_dev_lock);
		devs = g_inline_devs;
	}
	for (Device *d : devs)
		soft::progress(*d);
}

bool cut_connection(const FabricDesc &f, Qp &qp)
{
	if (!f.soft)
		return false;
	soft::cut_connection(qp);
	return true;
}

bool max_rd_inflight(const FabricDesc &f, Qp &qp, uint64_t *out)
{
	if (!f.soft)
		return false;
	*out = soft::qp_counters(qp).max_rd_inflight;
	return true;
}

bool rnr_naks(const FabricDesc &f, Qp &qp, uint64_t *out)
{
	if (!f.soft)
		return false;
	*out = soft::qp_counters(qp).rnr_naks;
	return true;
}

bool qp_wire(const FabricDesc &f, Qp &qp, std::string *out)
{
	if (!f.soft)
		return false;
	*out = soft::qp_wire(qp);
	return true;
}

uint16_t next_port()
{
	static std::atomic<unsigned> counter{0};
	unsigned base = 20000 + (static_cast<unsigned>(getpid()) * 97u) % 30000u;
	return static_cast<uint16_t>(20000 + (base + counter.fetch_add(1) * 13u) % 40000u);
}

// ---------------------------------------------------------------------------------------------
// Endpoint

namespace
{

bool deadline_passed(std::chrono::steady_clock::time_point d)
{
	return std::chrono::steady_clock::now() >= d;
}

std::chrono::steady_clock::time_point deadline(int ms)
{
	return std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
}

} // namespace

Endpoint::Endpoint(const FabricDesc &f, Device *dev, int side) : fab_(f), dev_(dev), side_(side) {}

Endpoint::~Endpoint()
{
	// CM ids first: their handlers use this endpoint, and the QP goes with the id.
	std::unique_ptr<CmId> listener, conn;
	{
		std::lock_guard g(lock_);
		listener = std::move(listener_);
	}
	listener.reset();
	{
		std::lock_guard g(lock_);
		conn = std::move(conn_);
	}
	conn.reset();
	srq_.reset();
	for (auto &b : bufs_) {
		b.mr.reset();
		free(b.mem);
	}
	bufs_.clear();
	rcq_.reset();
	scq_.reset();
	ch_.reset();
	pd2_.reset();
	pd_.reset();
}

int Endpoint::setup(const EpConfig &cfg)
{
	cfg_ = cfg;
	pd_ = dev_->alloc_pd();
	if (!pd_)
		return -errno;
	if (cfg.channel) {
		ch_ = dev_->create_comp_channel();
		if (!ch_)
			return -errno;
	}
	CqInitAttr ca;
	ca.cqe = cfg.cqe;
	ca.channel = ch_.get();
	ca.event_handler = [this](const AsyncEvent &ev) { on_async(ev); };
	// The CQs on vectors other than 0, and the receive CQ on another than the send CQ, where
	// the device has them: on a soft device with several engines the QP then runs on an
	// engine other than the first, and its receive CQ's moderation timers on yet another.
	const int nvec = static_cast<int>(std::max(1u, dev_->attr().num_comp_vectors));
	ca.comp_vector = (side_ + 1) % nvec;
	scq_ = dev_->create_cq(ca);
	if (!scq_)
		return -errno;
	if (!cfg.shared_cq) {
		ca.comp_vector = (side_ + 2) % nvec;
		rcq_ = dev_->create_cq(ca);
		if (!rcq_)
			return -errno;
	}
	if (cfg.srq) {
		SrqInitAttr sa;
		sa.max_wr = cfg.srq_wr;
		sa.max_sge = cfg.max_sge;
		sa.event_handler = [this](const AsyncEvent &ev) { on_async(ev); };
		srq_ = pd_->create_srq(sa);
		if (!srq_)
			return -errno;
	}
	return 0;
}

QpInitAttr Endpoint::qp_init_attr() const
{
	QpInitAttr a;
	a.event_handler = [this](const AsyncEvent &ev) {
		const_cast<Endpoint *>(this)->on_async(ev);
	};
	a.send_cq = scq_.get();
	a.recv_cq = rcq_ ? rcq_.get() : scq_.get();
	a.srq = srq_.get();
	a.cap.max_send_wr = cfg_.max_send_wr;
	a.cap.max_recv_wr = cfg_.srq ? 0 : cfg_.max_recv_wr;
	a.cap.max_send_sge = cfg_.max_sge;
	a.cap.max_recv_sge = cfg_.max_sge;
	a.cap.max_inline_data = cfg_.max_inline;
	a.sq_sig_type = SigType::ReqWr;
	return a;
}

void Endpoint::on_async(const AsyncEvent &ev)
{
	std::lock_guard g(lock_);
	async_.push_back(ev);
	cond_.notify_all();
}

std::vector<AsyncEvent> Endpoint::async_events()
{
	std::lock_guard g(lock_);
	return async_;
}

static ConnParam conn_param(const EpConfig &cfg)
{
	ConnParam p;
	p.set_private_data(cfg.pdata);
	p.responder_resources = cfg.responder_resources;
	p.initiator_depth = cfg.initiator_depth;
	p.retry_count = cfg.retry;
	// IB CM hands each side's RNR retry count to the other side's QP (REQ/REP field),
	// so the suite always asks for the same value on both sides.
	p.rnr_retry_count = cfg.rnr_retry;
	return p;
}

void Endpoint::on_cm(CmId *id, CmEvent &ev)
{
	CmRecord r{ev.event,
	           ev.status,
	           {},
	           false,
	           {ev.param.responder_resources, ev.param.initiator_depth}};
	auto pd = ev.param.pdata();
	r.pdata.assign(pd.begin(), pd.end());
	if (ev.event == CmEventType::ConnectRequest) {
		r.on_listener = true;
		bool busy;
		{
			std::lock_guard g(lock_);
			busy = conn_ != nullptr;
		}
		// One connection per endpoint: a second request is left in the event, which
		// the CM rejects.
		if (!busy && ev.new_id) {
			std::unique_ptr<CmId> nid = std::move(ev.new_id);
			nid->context = this;
			int err = nid->create_qp(*pd_, qp_init_attr());
			if (!err)
				err = nid->accept(conn_param(cfg_));
			std::lock_guard g(lock_);
			accept_err_ = err;
			conn_ = std::move(nid);
		}
	}
	std::lock_guard g(lock_);
	cm_events_.push_back(std::move(r));
	cond_.notify_all();
}

int Endpoint::listen(SockAddr *bound)
{
	Provider *prov = fabric_provider(fab_);
	if (!prov)
		return -ENODEV;
	for (int attempt = 0; attempt < 64; attempt++) {
		auto id = prov->create_id([this](CmId *i, CmEvent &ev) { on_cm(i, ev); }, this);
		if (!id)
			return errno ? -errno : -ENOMEM;
		// The listener binds the address of this endpoint's device.
		auto addr =
		    SockAddr::parse(device_ip(fab_, side_) + ":" + std::to_string(next_port()));
		if (!addr)
			return -EINVAL;
		int err = id->bind_addr(*addr);
		if (!err)
			err = id->listen(8);
		if (err == -EADDRINUSE)
			continue;
		if (err)
			return err;
		*bound = *addr;
		std::lock_guard g(lock_);
		listener_ = std::move(id);
		return 0;
	}
	return -EADDRINUSE;
}

int Endpoint::wait_cm_event(CmEventType t, int timeout_ms)
{
	auto d = deadline(timeout_ms);
	std::unique_lock g(lock_);
	for (;;) {
		for (auto &r : cm_events_) {
			if (r.type == t && !(r.on_listener && t != CmEventType::ConnectRequest))
				return r.status;
			// A connection that failed will not become established.
			if (t == CmEventType::Established && !r.on_listener &&
			    (r.type == CmEventType::Rejected ||
			     r.type == CmEventType::Unreachable ||
			     r.type == CmEventType::ConnectError ||
			     r.type == CmEventType::AddrError || r.type == CmEventType::RouteError))
				return r.status ? r.status : -ECONNREFUSED;
		}
		if (t == CmEventType::Established && accept_err_)
			return accept_err_;
		if (cond_.wait_until(g, d) == std::cv_status::timeout && deadline_passed(d))
			return -ETIMEDOUT;
	}
}

bool Endpoint::saw_cm_event(CmEventType t)
{
	std::lock_guard g(lock_);
	for (auto &r : cm_events_)
		if (r.type == t && !r.on_listener)
			return true;
	return false;
}

std::vector<uint8_t> Endpoint::peer_pdata()
{
	std::lock_guard g(lock_);
	for (auto &r : cm_events_)
		if (r.type == CmEventType::Established || r.type == CmEventType::ConnectRequest)
			if (!r.pdata.empty())
				return r.pdata;
	return {};
}

int Endpoint::event_credits(ReadCredits *out)
{
	std::lock_guard g(lock_);
	for (auto &r : cm_events_)
		if ((r.type == CmEventType::ConnectRequest && r.on_listener) ||
		    (r.type == CmEventType::Established && !r.on_listener && !listener_)) {
			*out = r.credits;
			return 0;
		}
	return -ENOENT;
}

int Endpoint::qp_credits(ReadCredits *out)
{
	Qp *q = qp();
	if (!q)
		return -ENOTCONN;
	QpAttr a;
	if (int rc = q->query(&a))
		return rc;
	out->responder_resources = a.max_dest_rd_atomic;
	out->initiator_depth = a.max_rd_atomic;
	return 0;
}

int Endpoint::connect(const SockAddr &dst, int timeout_ms)
{
	Provider *prov = fabric_provider(fab_);
	if (!prov)
		return -ENODEV;
	auto id = prov->create_id([this](CmId *i, CmEvent &ev) { on_cm(i, ev); }, this);
	if (!id)
		return errno ? -errno : -ENOMEM;
	CmId *raw = id.get();
	{
		std::lock_guard g(lock_);
		conn_ = std::move(id);
	}
	auto src = SockAddr::parse(device_ip(fab_, side_) + ":0");
	int err = raw->resolve_addr(src ? &*src : nullptr, dst, timeout_ms);
	if (err)
		return err;
	if ((err = wait_cm_event(CmEventType::AddrResolved, timeout_ms)))
		return err;
	if ((err = raw->resolve_route(timeout_ms)))
		return err;
	if ((err = wait_cm_event(CmEventType::RouteResolved, timeout_ms)))
		return err;
	if ((err = raw->create_qp(*pd_, qp_init_attr())))
		return err;
	if ((err = raw->connect(conn_param(cfg_))))
		return err;
	return wait_cm_event(CmEventType::Established, timeout_ms);
}

int Endpoint::disconnect()
{
	CmId *id = conn_.get();
	return id ? id->disconnect() : -ENOTCONN;
}

QpState Endpoint::qp_state()
{
	Qp *q = qp();
	if (!q)
		return QpState::Reset;
	QpAttr a;
	if (q->query(&a))
		return q->state();
	return a.qp_state;
}

MrInfo Endpoint::reg_mr(size_t len, uint32_t access, bool other_pd)
{
	MrInfo info;
	size_t alloc = (std::max<size_t>(len, 1) + 4095) & ~size_t(4095);
	auto *mem = static_cast<uint8_t *>(aligned_alloc(4096, alloc));
	if (!mem)
		return info;
	memset(mem, 0, alloc);
	Pd *pd = pd_.get();
	if (other_pd) {
		if (!pd2_)
			pd2_ = dev_->alloc_pd();
		pd = pd2_.get();
	}
	auto mr = pd ? pd->reg_mr(mem, len, access) : nullptr;
	if (!mr) {
		free(mem);
		return info;
	}
	info.id = static_cast<int32_t>(bufs_.size());
	info.addr = reinterpret_cast<uintptr_t>(mem);
	info.length = len;
	info.lkey = mr->lkey();
	info.rkey = mr->rkey();
	bufs_.push_back({mem, len, std::move(mr)});
	return info;
}

uint8_t *Endpoint::buf(int mr)
{
	return mr >= 0 && size_t(mr) < bufs_.size() ? bufs_[mr].mem : nullptr;
}

Mr *Endpoint::mr(int id)
{
	return id >= 0 && size_t(id) < bufs_.size() ? bufs_[id].mr.get() : nullptr;
}

int Endpoint::fill(int mr, uint64_t off, std::span<const uint8_t> data)
{
	if (!buf(mr) || off + data.size() > bufs_[mr].len)
		return -EINVAL;
	memcpy(buf(mr) + off, data.data(), data.size());
	return 0;
}

int Endpoint::read(int mr, uint64_t off, uint32_t len, std::vector<uint8_t> *out)
{
	if (!buf(mr) || off + len > bufs_[mr].len)
		return -EINVAL;
	out->assign(buf(mr) + off, buf(mr) + off + len);
	return 0;
}

Cqe *Endpoint::cqe(uint32_t wr_id)
{
	auto &slot = cqes_[wr_id];
	if (!slot)
		slot = std::make_unique<TaggedCqe>(TaggedCqe{{}, wr_id});
	return &slot->cqe;
}

uint32_t Endpoint::wr_id_of(const Wc &wc)
{
	if (!wc.wr_cqe)
		return ~0u;
	auto *t = container_of(wc.wr_cqe, &TaggedCqe::cqe);
	return t->id;
}

int Endpoint::post_recv(int mr, uint64_t off, uint32_t len, int n, uint32_t wr_id)
{
	for (int i = 0; i < n; i++) {
		Sge sge;
		RecvWr wr;
		wr.wr_cqe = cqe(wr_id + i);
		if (mr >= 0) {
			if (!buf(mr))
				return -EINVAL;
			sge.addr = reinterpret_cast<uintptr_t>(buf(mr) + off);
			sge.length = len;
			sge.lkey = bufs_[mr].mr->lkey();
			wr.sg_list = &sge;
			wr.num_sge = 1;
		}
		const RecvWr *bad = nullptr;
		int err = srq_   ? srq_->post_recv(&wr, &bad)
		          : qp() ? qp()->post_recv(&wr, &bad)
		                 : -ENOTCONN;
		if (err)
			return err;
	}
	return 0;
}

int Endpoint::post_send(const PostSend &ps)
{
	Qp *q = qp();
	if (!q)
		return -ENOTCONN;
	Sge sge;
	RdmaWr wr;
	wr.opcode = ps.opcode;
	wr.send_flags = ps.flags;
	wr.wr_cqe = ps.no_cqe ? nullptr : cqe(ps.wr_id);
	wr.imm_data = ps.imm;
	wr.invalidate_rkey = ps.inv_rkey;
	wr.remote_addr = ps.remote_addr;
	wr.rkey = ps.rkey;
	if (ps.mr >= 0) {
		if (!buf(ps.mr))
			return -EINVAL;
		sge.addr = reinterpret_cast<uintptr_t>(buf(ps.mr) + ps.offset);
		sge.length = ps.length;
		sge.lkey = bufs_[ps.mr].mr->lkey() ^ ps.lkey_xor;
		wr.sg_list = &sge;
		wr.num_sge = 1;
	}
	const SendWr *bad = nullptr;
	return q->post_send(&wr, &bad);
}

int Endpoint::poll(int n, int timeout_ms, std::vector<WcInfo> *out)
{
	auto d = deadline(timeout_ms);
	int got = 0;
	Wc wc[16];
	for (;;) {
		bool any = false;
		for (int which = 0; which < 2 && got < n; which++) {
			Cq *cq = which == 0 ? scq_.get() : rcq_.get();
			if (!cq)
				continue;
			int want = std::min(n - got, 16);
			int r = cq->poll(std::span<Wc>(wc, want));
			for (int i = 0; i < r; i++) {
				WcInfo w;
				w.wr_id = wr_id_of(wc[i]);
				w.status = wc[i].status;
				w.opcode = wc[i].opcode;
				w.byte_len = wc[i].byte_len;
				w.wc_flags = wc[i].wc_flags;
				w.imm_data = wc[i].imm_data;
				w.invalidate_rkey = wc[i].invalidate_rkey;
				w.qp_num = wc[i].qp_num;
				w.recv =
				    which == 1 ||
				    (cfg_.shared_cq && (wc[i].opcode == WcOpcode::Recv ||
				                        wc[i].opcode == WcOpcode::RecvRdmaWithImm));
				out->push_back(w);
			}
			if (r > 0) {
				got += r;
				any = true;
			}
		}
		if (got >= n || deadline_passed(d))
			return got;
		if (!any) {
			progress_all();
			std::this_thread::sleep_for(std::chrono::microseconds(200));
		}
	}
}

// ---------------------------------------------------------------------------------------------

const char *status_name(WcStatus s)
{
	return wc_status_str(s);
}

std::string describe(const std::vector<WcInfo> &wcs)
{
	std::string s;
	for (auto &w : wcs) {
		char b[160];
		snprintf(b, sizeof(b), "{wr_id %u %s%s op %d len %u flags %#x imm %#x inv %#x} ",
		         w.wr_id, w.recv ? "recv " : "", wc_status_str(w.status), int(w.opcode),
		         w.byte_len, w.wc_flags, w.imm_data, w.invalidate_rkey);
		s += b;
	}
	return s.empty() ? "(none)" : s;
}

std::vector<uint8_t> pattern(size_t len, uint8_t seed)
{
	std::vector<uint8_t> v(len);
	for (size_t i = 0; i < len; i++)
		v[i] = static_cast<uint8_t>(seed * 31 + i * 7 + (i >> 8));
	return v;
}

} // namespace ulp::conf
