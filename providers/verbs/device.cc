// SPDX-License-Identifier: MIT
// providers/verbs/device.cc - devices, their attributes and async events; PD, MR, CQ,
// completion channel, SRQ over libibverbs.
#include "core/log.h"
#include "core/signals_blocked.h"
#include "core/thread_name.h"
#include "providers/verbs/verbs_internal.h"

#include <endian.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace ulp::verbs
{

// ---------------------------------------------------------------------------------------------
// StoppableThread

int StoppableThread::start(const char *name, std::function<void(int)> fn)
{
	if (thread_.joinable())
		return 0;
	name_ = name;
	wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (wake_fd_ < 0)
		return -errno;
	done_ = false;
	SignalsBlocked blocked; // may run before main(): see core/signals_blocked.h
	thread_ = std::thread([this, fn = std::move(fn)] {
		set_thread_name("ulp-verbs-" + name_.substr(0, name_.find(' ')));
		fn(wake_fd_);
		std::lock_guard g(lock_);
		done_ = true;
		cv_.notify_all();
	});
	return 0;
}

void StoppableThread::stop()
{
	if (!thread_.joinable())
		return;
	uint64_t one = 1;
	if (write(wake_fd_, &one, sizeof(one)) < 0)
		ULP_LOG(Error, Verbs, "{}: wake-up failed: {}", name_, strerror(errno));
	bool done;
	{
		std::unique_lock g(lock_);
		done = cv_.wait_for(g, kJoinTimeout, [this] { return done_; });
	}
	if (done) {
		thread_.join();
		close(wake_fd_);
	} else {
		// The thread may still touch wake_fd_ and this object's lock: leak both rather
		// than hang (or crash) the teardown.
		ULP_LOG(Error, Verbs, "{} did not stop within {} s; detached", name_,
		        static_cast<long long>(kJoinTimeout.count()));
		thread_.detach();
	}
	wake_fd_ = -1;
}

namespace
{

int set_nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);
	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
		return -errno;
	return 0;
}

uint32_t mtu_bytes(ibv_mtu m)
{
	return m >= IBV_MTU_256 && m <= IBV_MTU_4096 ? 128u << m : 0;
}

// The largest inline size the device accepts on an RC QP: libibverbs has no attribute for
// it (ib_device_attr has none either), so ask the device with a throwaway QP.
uint32_t probe_max_inline(ibv_context *ctx, ibv_pd *pd)
{
	ibv_cq *cq = ibv_create_cq(ctx, 4, nullptr, nullptr, 0);
	if (!cq)
		return 0;
	uint32_t found = 0;
	for (uint32_t want : {1024u, 512u, 256u, 128u, 64u}) {
		ibv_qp_init_attr ia{};
		ia.send_cq = cq;
		ia.recv_cq = cq;
		ia.cap.max_send_wr = 1;
		ia.cap.max_recv_wr = 1;
		ia.cap.max_send_sge = 1;
		ia.cap.max_recv_sge = 1;
		ia.cap.max_inline_data = want;
		ia.qp_type = IBV_QPT_RC;
		if (ibv_qp *qp = ibv_create_qp(pd, &ia)) {
			found = std::max(want, ia.cap.max_inline_data);
			ibv_destroy_qp(qp);
			break;
		}
	}
	ibv_destroy_cq(cq);
	return found;
}

// Does a type-2 memory window work here? The capability bits alone are not enough to go
// by (DESIGN 5: rxe's MEM_MGT_EXTENSIONS report is unreliable), so allocate one.
bool probe_mw2(ibv_context *ctx, ibv_pd *pd, const ibv_device_attr &a)
{
	if (!(a.device_cap_flags & (IBV_DEVICE_MEM_WINDOW_TYPE_2A | IBV_DEVICE_MEM_WINDOW_TYPE_2B)))
		return false;
	ibv_mw *mw = ibv_alloc_mw(pd, IBV_MW_TYPE_2);
	if (!mw)
		return false;
	ibv_dealloc_mw(mw);
	return true;
}

std::unique_ptr<VDevice> open_device(ibv_context *ctx)
{
	ibv_device_attr_ex ax{};
	if (ibv_query_device_ex(ctx, nullptr, &ax)) {
		if (ibv_query_device(ctx, &ax.orig_attr))
			return nullptr;
	}
	const ibv_device_attr &o = ax.orig_attr;
	ibv_port_attr pa{};
	if (ibv_query_port(ctx, 1, &pa))
		return nullptr;
	ibv_gid g{};
	if (ibv_query_gid(ctx, 1, 0, &g))
		return nullptr;

	const bool iwarp = ctx->device->node_type == IBV_NODE_RNIC;
	// rxe's vendor id (drivers/infiniband/sw/rxe/rxe_param.h: RXE_VENDOR_ID).
	const bool rxe = o.vendor_id == 0xffffff;

	DeviceAttr a;
	a.node_guid = be64toh(o.node_guid);
	a.max_mr_size = o.max_mr_size;
	a.page_size_cap = o.page_size_cap;
	a.vendor_id = o.vendor_id;
	a.max_qp = uint32_t(o.max_qp);
	a.max_qp_wr = uint32_t(o.max_qp_wr);
	a.max_sge = uint32_t(o.max_sge);
	// iWARP RDMA READ responses carry one sink STag (RFC 5040 4.4): one SGE per READ,
	// whatever max_sge says (the kernel's rdma_rw_fr_page_list_len / siw max_sge_rd).
	a.max_sge_rd = iwarp ? 1u : uint32_t(o.max_sge_rd ? o.max_sge_rd : o.max_sge);
	a.max_sgl_rd = 0;
	a.max_cq = uint32_t(o.max_cq);
	a.max_cqe = uint32_t(o.max_cqe);
	a.max_mr = uint32_t(o.max_mr);
	a.max_pd = uint32_t(o.max_pd);
	a.max_qp_rd_atom = uint32_t(o.max_qp_rd_atom);
	a.max_qp_init_rd_atom = uint32_t(o.max_qp_init_rd_atom);
	a.max_srq = uint32_t(o.max_srq);
	a.max_srq_wr = uint32_t(o.max_srq_wr);
	a.max_srq_sge = uint32_t(o.max_srq_sge);
	a.num_comp_vectors = uint32_t(std::max(ctx->num_comp_vectors, 1));

	bool mw_reg = false;
	if (ibv_pd *pd = ibv_alloc_pd(ctx)) {
		a.max_inline_data = probe_max_inline(ctx, pd);
		mw_reg = probe_mw2(ctx, pd, o);
		ibv_dealloc_pd(pd);
	}

	uint64_t f = 0;
	if (mw_reg) {
		f |= DEVICE_MEM_MGT_EXTENSIONS | DEVICE_MEM_WINDOW | DEVICE_REG_MR_CONTIG;
		a.max_fast_reg_page_list_len = kMwPageListLen;
	}
	if (o.device_cap_flags & IBV_DEVICE_RC_RNR_NAK_GEN)
		f |= DEVICE_RC_RNR_NAK_GEN;
	if (o.device_cap_flags & IBV_DEVICE_SRQ_RESIZE)
		f |= DEVICE_SRQ_RESIZE;
	// iWARP RNICs cannot resize CQs (DESIGN 5; siw has no resize_cq); IB/RoCE ones can.
	if (!iwarp)
		f |= DEVICE_CQ_RESIZE;
	if (ax.cq_mod_caps.max_cq_count && ax.cq_mod_caps.max_cq_period)
		f |= DEVICE_CQ_MODERATION;
	// IB spec 11.6.3.3 (Last WQE Reached) is raised by IB/RoCE hardware; rxe (6.1) never
	// raises IB_EVENT_QP_LAST_WQE_REACHED and iWARP has no such event (DESIGN 5), so
	// drain must not wait for it there.
	if (!iwarp && !rxe)
		f |= DEVICE_LAST_WQE_EVENT;
	a.device_cap_flags = f;

	Gid gid;
	std::memcpy(gid.data(), g.raw, gid.size());
	auto dev =
	    std::make_unique<VDevice>(ctx, a, iwarp ? NodeType::Rnic : NodeType::Ca, gid, mw_reg);
	dev->global_av = pa.link_layer != IBV_LINK_LAYER_INFINIBAND;
	dev->rxe = rxe;
	return dev;
}

} // namespace

// ---------------------------------------------------------------------------------------------
// Provider

VProvider::VProvider()
{
	register_provider(this);
	int n = 0;
	ctx_list_ = rdma_get_devices(&n);
	for (int i = 0; ctx_list_ && i < n; i++) {
		auto dev = open_device(ctx_list_[i]);
		if (!dev) {
			ULP_LOG(Warn, Verbs, "{}: cannot query: {}",
			        ibv_get_device_name(ctx_list_[i]->device), strerror(errno));
			continue;
		}
		if (int err = dev->start_async()) {
			ULP_LOG(Warn, Verbs, "{}: async thread: {}", dev->name(), strerror(-err));
			continue;
		}
		devices_.push_back(std::move(dev));
	}
	for (auto &d : devices_)
		register_device(d.get());
}

VProvider::~VProvider()
{
	unregister_provider(this);
	for (auto it = devices_.rbegin(); it != devices_.rend(); ++it)
		unregister_device(it->get());
	cm_.stop();
	if (channel_)
		rdma_destroy_event_channel(channel_);
	for (auto &d : devices_)
		d->stop_async();
	devices_.clear();
	if (ctx_list_)
		rdma_free_devices(ctx_list_);
}

VDevice *VProvider::find(ibv_context *ctx)
{
	if (!ctx)
		return nullptr;
	VDevice *added = nullptr;
	{
		std::lock_guard g(devices_lock_);
		for (auto &d : devices_)
			if (!d->gone && d->ctx() == ctx)
				return d.get();
		// librdmacm opened a device we have not seen: one added since we started.
		auto dev = open_device(ctx);
		if (!dev) {
			ULP_LOG(Warn, Verbs, "{}: cannot query: {}",
			        ibv_get_device_name(ctx->device), strerror(errno));
			return nullptr;
		}
		if (int err = dev->start_async()) {
			ULP_LOG(Warn, Verbs, "{}: async thread: {}", dev->name(), strerror(-err));
			return nullptr;
		}
		added = dev.get();
		devices_.push_back(std::move(dev));
	}
	ULP_LOG(Info, Verbs, "{}: a device that appeared after start (node GUID {:016x})",
	        added->name(), added->attr().node_guid);
	register_device(added);
	return added;
}

void VProvider::device_released(Device &d)
{
	auto *vd = dynamic_cast<VDevice *>(&d);
	if (!vd || !vd->removed.load())
		return; // a live device stays open
	{
		std::lock_guard g(devices_lock_);
		if (vd->gone)
			return;
		vd->gone = true;
	}
	unregister_device(vd);
	vd->stop_async();
	// The kernel's removal waits until every file of the device is closed (rxe has no
	// disassociate_ucontext). The context is librdmacm's, which closes it only once it has
	// seen the device leave its list, and it cannot see that when the device was the last
	// one (sync_devices_list gives up on an empty list, rdma-core 44): so the context's
	// files are replaced by /dev/null here, every object on it being gone already (the
	// caller's promise), and whatever librdmacm later does with the context reaches
	// nothing. The CQs' completion channels went with the CQs.
	ibv_context *ctx = vd->ctx();
	const int null = ::open("/dev/null", O_RDWR | O_CLOEXEC);
	if (null < 0 || ::dup3(null, ctx->cmd_fd, O_CLOEXEC) < 0 ||
	    (ctx->async_fd >= 0 && ::dup3(null, ctx->async_fd, O_CLOEXEC) < 0))
		ULP_LOG(Error, Verbs, "{}: cannot close its files: {}; its removal waits for us",
		        vd->name(), strerror(errno));
	else
		ULP_LOG(Warn, Verbs, "{}: removed, and let go (its verbs files closed)",
		        vd->name());
	if (null >= 0)
		::close(null);
	// A fresh device list, so that librdmacm forgets the device where it can (it needs
	// another device present to notice: see above).
	int n = 0;
	std::lock_guard g(devices_lock_); // two devices released at once swap one list
	if (ibv_context **fresh = rdma_get_devices(&n)) {
		if (ctx_list_)
			rdma_free_devices(ctx_list_);
		ctx_list_ = fresh;
	}
}

VProvider &vprovider()
{
	static VProvider p;
	return p;
}

Provider &provider()
{
	return vprovider();
}

bool is_verbs(const Device &dev)
{
	return dynamic_cast<const VDevice *>(&dev) != nullptr;
}

namespace
{
// Devices are in the registry before main(), as the soft provider's are on creation:
// conformance and tools find "rxe0" with find_device() alone.
[[maybe_unused]] const bool g_registered = (vprovider(), true);
} // namespace

// ---------------------------------------------------------------------------------------------
// Device

VDevice::VDevice(ibv_context *ctx, const DeviceAttr &attr, NodeType nt, const Gid &gid, bool mw_reg)
    : Device(ibv_get_device_name(ctx->device), attr, nt, gid), ctx_(ctx), mw_reg_(mw_reg)
{
}

VDevice::~VDevice()
{
	stop_async();
}

int VDevice::start_async()
{
	if (int err = set_nonblock(ctx_->async_fd))
		return err;
	return async_.start("async-event thread", [this](int wake) { async_loop(wake); });
}

void VDevice::stop_async()
{
	async_.stop();
}

void VDevice::async_loop(int wake_fd)
{
	for (;;) {
		pollfd p[2] = {{ctx_->async_fd, POLLIN, 0}, {wake_fd, POLLIN, 0}};
		if (::poll(p, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			ULP_LOG(Error, Verbs, "{}: poll: {}", name(), strerror(errno));
			return;
		}
		if (p[1].revents)
			return;
		ibv_async_event e;
		if (ibv_get_async_event(ctx_, &e))
			continue; // EAGAIN: someone else's, or spurious
		AsyncEvent ev;
		ev.device = this;
		switch (e.event_type) {
		case IBV_EVENT_CQ_ERR:
			ev.event = EventType::CqErr;
			if (auto *cq = static_cast<VCq *>(e.element.cq->cq_context)) {
				ev.cq = cq;
				cq->report_event(ev);
			}
			break;
		case IBV_EVENT_QP_FATAL:
		case IBV_EVENT_QP_REQ_ERR:
		case IBV_EVENT_QP_ACCESS_ERR:
		case IBV_EVENT_COMM_EST:
		case IBV_EVENT_QP_LAST_WQE_REACHED:
			ev.event =
			    e.event_type == IBV_EVENT_QP_FATAL        ? EventType::QpFatal
			    : e.event_type == IBV_EVENT_QP_REQ_ERR    ? EventType::QpReqErr
			    : e.event_type == IBV_EVENT_QP_ACCESS_ERR ? EventType::QpAccessErr
			    : e.event_type == IBV_EVENT_COMM_EST      ? EventType::CommEst
			                                              : EventType::QpLastWqeReached;
			// Through Qp::report_event, never the ULP's handler directly: it records
			// LAST_WQE_REACHED for drain (the kernel's ib_qp_event_handler).
			if (auto *qp = static_cast<VQp *>(e.element.qp->qp_context)) {
				ev.qp = qp;
				qp->report_event(ev);
			}
			break;
		case IBV_EVENT_SRQ_ERR:
		case IBV_EVENT_SRQ_LIMIT_REACHED:
			ev.event = e.event_type == IBV_EVENT_SRQ_ERR ? EventType::SrqErr
			                                             : EventType::SrqLimitReached;
			if (auto *srq = static_cast<VSrq *>(e.element.srq->srq_context)) {
				ev.srq = srq;
				srq->report_event(ev);
			}
			break;
		case IBV_EVENT_PORT_ACTIVE:
		case IBV_EVENT_PORT_ERR:
			ev.event = e.event_type == IBV_EVENT_PORT_ACTIVE ? EventType::PortActive
			                                                 : EventType::PortErr;
			ev.port_num = uint8_t(e.element.port_num);
			dispatch_event(ev);
			break;
		case IBV_EVENT_DEVICE_FATAL:
			ev.event = EventType::DeviceFatal;
			dispatch_event(ev);
			break;
		default:
			break; // LID/GID/PKey changes, path migration, SQ drained: nothing to map
		}
		// After the handler: ibv_destroy_{qp,cq,srq} waits for this acknowledgement, so
		// the wrapper the handler was told about stays alive until here.
		ibv_ack_async_event(&e);
	}
}

int VDevice::query_port(uint8_t port_num, PortAttr *attr)
{
	ibv_port_attr pa{};
	if (int err = ibv_query_port(ctx_, port_num, &pa))
		return -err;
	switch (pa.state) {
	case IBV_PORT_ACTIVE:
	case IBV_PORT_ACTIVE_DEFER:
		attr->state = PortState::Active;
		break;
	case IBV_PORT_ARMED:
		attr->state = PortState::Armed;
		break;
	case IBV_PORT_INIT:
		attr->state = PortState::Init;
		break;
	default:
		attr->state = PortState::Down;
		break;
	}
	if (is_iwarp())
		attr->link_layer = LinkLayer::Iwarp;
	else if (pa.link_layer == IBV_LINK_LAYER_INFINIBAND)
		attr->link_layer = LinkLayer::InfiniBand;
	else
		attr->link_layer = LinkLayer::Ethernet;
	attr->max_mtu = mtu_bytes(pa.max_mtu);
	attr->active_mtu = mtu_bytes(pa.active_mtu);
	attr->gid_tbl_len = uint32_t(pa.gid_tbl_len);
	return 0;
}

std::unique_ptr<Pd> VDevice::alloc_pd()
{
	ibv_pd *pd = ibv_alloc_pd(ctx_);
	if (!pd)
		return nullptr;
	return std::make_unique<VPd>(*this, pd);
}

std::unique_ptr<CompChannel> VDevice::create_comp_channel()
{
	ibv_comp_channel *ch = ibv_create_comp_channel(ctx_);
	if (!ch)
		return nullptr;
	// get_cq_event polls with a timeout and must never block in read().
	if (int err = set_nonblock(ch->fd)) {
		ibv_destroy_comp_channel(ch);
		errno = -err;
		return nullptr;
	}
	return std::make_unique<VChannel>(ch);
}

std::unique_ptr<Cq> VDevice::create_cq(const CqInitAttr &attr)
{
	if (attr.cqe <= 0 || uint32_t(attr.cqe) > this->attr().max_cqe || attr.comp_vector < 0 ||
	    uint32_t(attr.comp_vector) >= this->attr().num_comp_vectors) {
		errno = EINVAL;
		return nullptr;
	}
	auto *ch = static_cast<VChannel *>(attr.channel);
	ibv_cq *cq =
	    ibv_create_cq(ctx_, attr.cqe, nullptr, ch ? ch->channel() : nullptr, attr.comp_vector);
	if (!cq)
		return nullptr;
	return std::make_unique<VCq>(*this, cq, attr);
}

void VDevice::add_qp(VQp *qp)
{
	std::unique_lock g(qps_lock_);
	qps_[qp->qp_num()] = qp;
}

void VDevice::del_qp(VQp *qp)
{
	std::unique_lock g(qps_lock_);
	auto it = qps_.find(qp->qp_num());
	if (it != qps_.end() && it->second == qp)
		qps_.erase(it);
}

Qp *VDevice::find_qp(uint32_t qp_num)
{
	std::shared_lock g(qps_lock_);
	auto it = qps_.find(qp_num);
	return it == qps_.end() ? nullptr : it->second;
}

// ---------------------------------------------------------------------------------------------
// PD and MRs

VPd::VPd(VDevice &dev, ibv_pd *pd) : Pd(dev), pd_(pd) {}

VPd::~VPd()
{
	if (int err = ibv_dealloc_pd(pd_))
		ULP_LOG(Error, Verbs, "ibv_dealloc_pd: {} (objects still on the PD)",
		        strerror(err));
}

VDevice &VPd::vdev() const
{
	return static_cast<VDevice &>(device());
}

int access_to_ibv(uint32_t access)
{
	int f = 0;
	if (access & ACCESS_LOCAL_WRITE)
		f |= IBV_ACCESS_LOCAL_WRITE;
	if (access & ACCESS_REMOTE_WRITE)
		f |= IBV_ACCESS_REMOTE_WRITE;
	if (access & ACCESS_REMOTE_READ)
		f |= IBV_ACCESS_REMOTE_READ;
	if (access & ACCESS_REMOTE_ATOMIC)
		f |= IBV_ACCESS_REMOTE_ATOMIC;
	if (access & ACCESS_MW_BIND)
		f |= IBV_ACCESS_MW_BIND;
	return f;
}

namespace
{
// The kernel pins a user MR's pages, within RLIMIT_MEMLOCK unless the process has
// CAP_IPC_LOCK (ib_umem_get: -ENOMEM past the limit). The limit's default (8 MiB) is below
// what a target registers, so a failure says which limit it met and how to raise it.
void memlock_hint(size_t length)
{
	static log::RateLimit rl(1, 5000);
	rlimit r{};
	uint32_t dropped = 0;
	if (getrlimit(RLIMIT_MEMLOCK, &r) != 0 || r.rlim_cur == RLIM_INFINITY ||
	    !rl.allow(&dropped))
		return;
	ULP_LOG(Error, Verbs,
	        "registering {} bytes: out of memory; the locked-memory limit (RLIMIT_MEMLOCK) "
	        "is {} bytes and an RDMA registration pins its pages: raise it (the unit's "
	        "LimitMEMLOCK=infinity, `ulimit -l unlimited` in the shell that starts it, or "
	        "memlock in /etc/security/limits.conf)",
	        length, uint64_t(r.rlim_cur));
}
} // namespace

std::unique_ptr<Mr> VPd::reg_mr(void *addr, size_t length, uint32_t access)
{
	int f = access_to_ibv(access);
	// Every region may carry a fast-reg MR's window (IB spec C10-73: binding needs the
	// region's MW_BIND right); the ULP never asks for it, since in its model REG_MR
	// registers pages, not windows.
	if (vdev().mw_reg())
		f |= IBV_ACCESS_MW_BIND;
	ibv_mr *mr = ibv_reg_mr(pd_, addr, length, f);
	if (!mr) {
		const int err = errno;
		if (err == ENOMEM)
			memlock_hint(length);
		errno = err;
		return nullptr;
	}
	add_region(mr);
	return std::make_unique<VMr>(*this, mr);
}

std::unique_ptr<Mr> VPd::alloc_mr(uint32_t max_num_sg)
{
	if (!vdev().mw_reg() || max_num_sg == 0 || max_num_sg > kMwPageListLen) {
		errno = vdev().mw_reg() ? EINVAL : EOPNOTSUPP;
		return nullptr;
	}
	ibv_mw *mw = ibv_alloc_mw(pd_, IBV_MW_TYPE_2);
	if (!mw)
		return nullptr;
	return std::make_unique<VMr>(*this, mw, max_num_sg);
}

ibv_mr *VPd::find_region(uint64_t addr, uint64_t len)
{
	std::lock_guard g(regions_lock_);
	auto it = regions_.upper_bound(addr);
	while (it != regions_.begin()) {
		--it;
		uint64_t start = it->first;
		if (addr >= start && addr + len <= start + it->second->length)
			return it->second;
	}
	return nullptr;
}

void VPd::add_region(ibv_mr *mr)
{
	std::lock_guard g(regions_lock_);
	regions_.emplace(reinterpret_cast<uintptr_t>(mr->addr), mr);
}

void VPd::del_region(ibv_mr *mr)
{
	std::lock_guard g(regions_lock_);
	auto [b, e] = regions_.equal_range(reinterpret_cast<uintptr_t>(mr->addr));
	for (auto it = b; it != e; ++it)
		if (it->second == mr) {
			regions_.erase(it);
			return;
		}
}

VMr::VMr(VPd &pd, ibv_mr *mr)
    : Mr(pd, mr->lkey, mr->rkey, reinterpret_cast<uintptr_t>(mr->addr), mr->length, 0), vpd_(pd),
      mr_(mr)
{
}

VMr::VMr(VPd &pd, ibv_mw *mw, uint32_t max_sg)
    : Mr(pd, mw->rkey, mw->rkey, 0, 0, max_sg), vpd_(pd), mw_(mw)
{
}

// A window is bound inside one region and has no lkey of its own: the mapped range
// [iova, iova + length) must lie in one user MR of this PD, and local SGEs over it (rw/'s
// data WR names mr->lkey()) use that region's lkey with the same addresses (type-2
// windows here are VA based, never zero based).
int VMr::mapped()
{
	region_ = vpd_.find_region(iova(), length());
	if (!region_)
		return -EINVAL;
	set_local_key(region_->lkey);
	return 0;
}

VMr::~VMr()
{
	if (mr_) {
		vpd_.del_region(mr_);
		if (int err = ibv_dereg_mr(mr_))
			ULP_LOG(Error, Verbs, "ibv_dereg_mr: {}", strerror(err));
	}
	if (mw_) {
		if (int err = ibv_dealloc_mw(mw_))
			ULP_LOG(Error, Verbs, "ibv_dealloc_mw: {}", strerror(err));
	}
}

// ---------------------------------------------------------------------------------------------
// Completion channel and CQ

VChannel::~VChannel()
{
	if (int err = ibv_destroy_comp_channel(ch_))
		ULP_LOG(Error, Verbs, "ibv_destroy_comp_channel: {} (CQs still on it)",
		        strerror(err));
}

int VChannel::get_cq_event(Cq **cq, int timeout_ms)
{
	for (;;) {
		ibv_cq *icq = nullptr;
		void *ctx = nullptr;
		if (ibv_get_cq_event(ch_, &icq, &ctx) == 0) {
			// Acknowledged at once: ibv_destroy_cq waits for every event to be acked,
			// and core/ has no separate acknowledgement (the CQ pointer is all we
			// hand out).
			ibv_ack_cq_events(icq, 1);
			*cq = static_cast<Cq *>(ctx);
			return 0;
		}
		if (errno != EAGAIN && errno != EWOULDBLOCK)
			return -errno;
		if (timeout_ms == 0)
			return -EAGAIN;
		pollfd p{ch_->fd, POLLIN, 0};
		int r = ::poll(&p, 1, timeout_ms);
		if (r < 0 && errno != EINTR)
			return -errno;
		if (r == 0)
			return -EAGAIN;
	}
}

VCq::VCq(VDevice &dev, ibv_cq *cq, const CqInitAttr &a)
    : Cq(dev, cq->cqe, a.comp_vector, a.channel), vdev_(dev), cq_(cq), handler_(a.event_handler)
{
	cq_context = a.cq_context;
	// Completion and async events carry cq_context: point it at the wrapper (nothing can
	// have been raised yet, the CQ has no QP).
	cq_->cq_context = this;
}

VCq::~VCq()
{
	if (int err = ibv_destroy_cq(cq_))
		ULP_LOG(Error, Verbs, "ibv_destroy_cq: {} (QPs still on the CQ)", strerror(err));
}

namespace
{

WcOpcode wc_opcode(ibv_wc_opcode op)
{
	switch (op) {
	case IBV_WC_SEND:
		return WcOpcode::Send;
	case IBV_WC_RDMA_WRITE:
		return WcOpcode::RdmaWrite;
	case IBV_WC_RDMA_READ:
		return WcOpcode::RdmaRead;
	case IBV_WC_LOCAL_INV:
		return WcOpcode::LocalInv;
	// core/ posts no BIND_MW of its own: every window bind is a REG_MR.
	case IBV_WC_BIND_MW:
		return WcOpcode::RegMr;
	case IBV_WC_RECV:
		return WcOpcode::Recv;
	case IBV_WC_RECV_RDMA_WITH_IMM:
		return WcOpcode::RecvRdmaWithImm;
	default:
		return WcOpcode::Send;
	}
}

} // namespace

WcStatus wc_status(ibv_wc_status s)
{
	switch (s) {
	case IBV_WC_SUCCESS:
		return WcStatus::Success;
	case IBV_WC_LOC_LEN_ERR:
		return WcStatus::LocLenErr;
	case IBV_WC_LOC_QP_OP_ERR:
		return WcStatus::LocQpOpErr;
	case IBV_WC_LOC_PROT_ERR:
		return WcStatus::LocProtErr;
	case IBV_WC_WR_FLUSH_ERR:
		return WcStatus::WrFlushErr;
	case IBV_WC_MW_BIND_ERR:
		return WcStatus::MwBindErr;
	case IBV_WC_BAD_RESP_ERR:
		return WcStatus::BadRespErr;
	case IBV_WC_LOC_ACCESS_ERR:
		return WcStatus::LocAccessErr;
	case IBV_WC_REM_INV_REQ_ERR:
		return WcStatus::RemInvReqErr;
	case IBV_WC_REM_ACCESS_ERR:
		return WcStatus::RemAccessErr;
	case IBV_WC_REM_OP_ERR:
		return WcStatus::RemOpErr;
	case IBV_WC_RETRY_EXC_ERR:
		return WcStatus::RetryExcErr;
	case IBV_WC_RNR_RETRY_EXC_ERR:
		return WcStatus::RnrRetryExcErr;
	case IBV_WC_REM_ABORT_ERR:
		return WcStatus::RemAbortErr;
	case IBV_WC_FATAL_ERR:
		return WcStatus::FatalErr;
	default:
		return WcStatus::GeneralErr;
	}
}

int VCq::poll(std::span<Wc> out)
{
	ibv_wc wc[kPostBatch];
	int total = 0;
	while (size_t(total) < out.size()) {
		int want = int(std::min<size_t>(out.size() - size_t(total), kPostBatch));
		int n = ibv_poll_cq(cq_, want, wc);
		if (n < 0)
			return total ? total : -EIO;
		for (int i = 0; i < n; i++) {
			const ibv_wc &w = wc[i];
			Wc &c = out[size_t(total + i)];
			c = Wc{};
			// wr_id is the posting WR's Cqe* (0 for a cqe-less unsignaled WR).
			c.wr_cqe = reinterpret_cast<Cqe *>(static_cast<uintptr_t>(w.wr_id));
			c.status = wc_status(w.status);
			c.opcode = wc_opcode(w.opcode);
			c.vendor_err = w.vendor_err;
			c.byte_len = w.byte_len;
			c.qp = vdev_.find_qp(w.qp_num);
			c.qp_num = w.qp_num;
			c.src_qp = w.src_qp;
			if (w.status == IBV_WC_SUCCESS) {
				if (w.wc_flags & IBV_WC_WITH_IMM) {
					c.wc_flags |= WC_WITH_IMM;
					c.imm_data = be32toh(w.imm_data);
				}
				// rxe writes the kernel's ib_wc_flags into its shared CQ unchanged,
				// and IB_WC_WITH_INVALIDATE (1 << 2) is libibverbs'
				// IBV_WC_IP_CSUM_OK, which an RC receive never reports.
				const bool inv = (w.wc_flags & IBV_WC_WITH_INV) ||
				                 (vdev_.rxe && w.opcode == IBV_WC_RECV &&
				                  (w.wc_flags & IBV_WC_IP_CSUM_OK));
				if (inv) {
					c.wc_flags |= WC_WITH_INVALIDATE;
					c.invalidate_rkey = w.invalidated_rkey;
				}
			}
		}
		total += n;
		if (n < want)
			break;
	}
	return total;
}

int VCq::req_notify(CqNotify flags)
{
	return -ibv_req_notify_cq(cq_, flags == CqNotify::Solicited ? 1 : 0);
}

int VCq::modify(uint16_t count, uint16_t period_us)
{
	if (!(device().attr().device_cap_flags & DEVICE_CQ_MODERATION))
		return -EOPNOTSUPP;
	ibv_modify_cq_attr a{};
	a.attr_mask = IBV_CQ_ATTR_MODERATE;
	a.moderate.cq_count = count;
	a.moderate.cq_period = period_us;
	return -ibv_modify_cq(cq_, &a);
}

int VCq::resize(int cqe)
{
	if (!(device().attr().device_cap_flags & DEVICE_CQ_RESIZE))
		return -EOPNOTSUPP;
	if (cqe <= 0 || uint32_t(cqe) > device().attr().max_cqe)
		return -EINVAL;
	if (int err = ibv_resize_cq(cq_, cqe))
		return -err;
	cqe_ = cq_->cqe;
	return 0;
}

void VCq::report_event(const AsyncEvent &ev) const
{
	if (handler_)
		handler_(ev);
}

// ---------------------------------------------------------------------------------------------
// SRQ

std::unique_ptr<Srq> VPd::create_srq(const SrqInitAttr &attr)
{
	ibv_srq_init_attr ia{};
	ia.attr.max_wr = attr.max_wr;
	ia.attr.max_sge = attr.max_sge;
	// The limit is armed separately: the IB spec's Create SRQ verb ignores it (Modify SRQ
	// arms it) and some drivers refuse a non-zero one at creation.
	ibv_srq *srq = ibv_create_srq(pd_, &ia);
	if (!srq)
		return nullptr;
	auto s = std::make_unique<VSrq>(*this, srq, attr, ia.attr.max_wr);
	if (attr.srq_limit) {
		if (int err = s->arm_limit(attr.srq_limit)) {
			errno = -err;
			return nullptr;
		}
	}
	return s;
}

VSrq::VSrq(VPd &pd, ibv_srq *srq, const SrqInitAttr &a, uint32_t max_wr)
    : Srq(pd), srq_(srq), handler_(a.event_handler), max_wr_(max_wr)
{
	srq_context = a.srq_context;
	srq_->srq_context = this;
}

VSrq::~VSrq()
{
	if (int err = ibv_destroy_srq(srq_))
		ULP_LOG(Error, Verbs, "ibv_destroy_srq: {}", strerror(err));
}

int VSrq::arm_limit(uint32_t limit)
{
	ibv_srq_attr a{};
	a.srq_limit = limit;
	return -ibv_modify_srq(srq_, &a, IBV_SRQ_LIMIT);
}

void VSrq::report_event(const AsyncEvent &ev) const
{
	if (handler_)
		handler_(ev);
}

} // namespace ulp::verbs
