// SPDX-License-Identifier: MIT
// tools/ulp-bench/rw.cc - `ulp-bench rw`: rdma_rw contexts per second and bandwidth for
// 4 KiB, 128 KiB and 1 MiB READ and WRITE on two in-process soft devices (engine threads,
// like a NIC), three ways in the same run:
//
//   raw  the same RDMA WRs (the MULTI_WR chunking of the page list) built once and
//        re-posted directly with post_send: the floor rw's bookkeeping is measured against
//   sge  RwCtx init + post + destroy per I/O, SGE path (MULTI_WR / SINGLE_WR)
//   mr   the same with force-MR: [LOCAL_INV] + REG_MR + data per MR
//
// One iteration is one context (one I/O); kRwDepth are kept in flight, each on its own
// page-aligned scatter table of size/4096 entries. ratio = ctx/s of the path / ctx/s of raw.
//
// --device NAME: both QPs on that verbs device (rxe0), connected by hand (its GID, as
// perftest's loopback); a path the device cannot run (mr without fast registration) is
// skipped with a note.
#include "tools/ulp-bench/rw.h"
#include "tools/common/named_device.h"
#include "tools/ulp-bench/report.h"

#include "core/dma_mem.h"
#include "core/mem_map.h"
#include "providers/soft/soft.h"
#include "rw/rw.h"

#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace ulp::bench
{

using tools::NamedDevice;
using tools::open_named_device;

namespace
{

constexpr uint32_t kRwDepth = 8;      // contexts in flight
constexpr uint32_t kMaxIo = 1u << 20; // largest I/O
constexpr uint32_t kPage = 4096;      // scatter entries are pages
constexpr std::array<uint32_t, 3> kRwSizes = {4096, 128 * 1024, kMaxIo};

// Two soft devices (or one verbs device twice), the rw QP on a, a plain peer QP on b,
// connected by hand.
struct Conn {
	Device *da = nullptr, *db = nullptr;
	bool own = false; // soft devices this Conn created
	std::unique_ptr<Pd> pa, pb;
	std::unique_ptr<Cq> cqa, cqb;
	std::unique_ptr<DmaRegion> ma, mb; // a: kRwDepth I/O buffers; b: one remote buffer
	std::unique_ptr<Mr> mra, mrb;
	MemMap map; // a's memory
	std::unique_ptr<RwQp> rq;
	std::unique_ptr<Qp> qb;
	std::vector<SgTable> tables; // per slot, rebuilt per size

	void init_soft(bool force_mr, const std::string &ipa, const std::string &ipb)
	{
		soft::DeviceConfig c;
		c.ip = ipa;
		da = soft::create_device(c);
		c.ip = ipb;
		db = soft::create_device(c);
		if (!da || !db)
			fatal("create_device: %s", std::strerror(errno));
		own = true;
		int err = init(force_mr);
		if (err)
			fatal("RwQp::create: %s", std::strerror(-err));
	}

	// Both ends on dev. Returns 0, or RwQp::create's error (the caller skips the path).
	int init_device(bool force_mr, Device *dev)
	{
		da = db = dev;
		return init(force_mr);
	}

	int init(bool force_mr)
	{
		pa = da->alloc_pd();
		pb = db->alloc_pd();
		if (!pa || !pb)
			fatal("alloc_pd: %s", std::strerror(errno));
		pb = db->alloc_pd();
		CqInitAttr ca;
		ca.cqe = 4096;
		cqa = da->create_cq(ca);
		cqb = db->create_cq(ca);
		if (!cqa || !cqb)
			fatal("create_cq: %s", std::strerror(errno));
		ma = dma_alloc(size_t{kRwDepth} * kMaxIo);
		mb = dma_alloc(kMaxIo);
		if (!ma || !mb)
			fatal("dma_alloc: %s", std::strerror(errno));
		const uint32_t acc = ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ;
		mra = pa->reg_mr(ma->addr(), ma->length(), acc);
		mrb = pb->reg_mr(mb->addr(), mb->length(), acc);
		if (!mra || !mrb || map.register_mr(*mra))
			fatal("reg_mr: %s", std::strerror(errno));
		QpInitAttr qa;
		qa.send_cq = qa.recv_cq = cqa.get();
		qa.cap.max_send_wr = 4;
		qa.cap.max_recv_wr = 4;
		qa.cap.max_send_sge = da->attr().max_sge;
		qa.cap.max_recv_sge = 1;
		qa.cap.max_rdma_ctxs = kRwDepth;
		RwQpOptions o;
		o.max_pages = kMaxIo / kPage;
		o.force_mr = force_mr;
		int err = 0;
		rq = RwQp::create(*pa, qa, o, &err);
		if (!rq)
			return err ? err : -EINVAL;
		QpInitAttr qb_attr;
		qb_attr.send_cq = qb_attr.recv_cq = cqb.get();
		qb_attr.cap.max_send_wr = qb_attr.cap.max_recv_wr = 4;
		qb_attr.cap.max_send_sge = qb_attr.cap.max_recv_sge = 1;
		qb = pb->create_qp(qb_attr);
		if (!qb)
			fatal("create_qp: %s", std::strerror(errno));
		connect(rq->qp(), *db, qb->qp_num());
		connect(*qb, *da, rq->qp().qp_num());
		tables.resize(kRwDepth);
		return 0;
	}

	static void connect(Qp &qp, const Device &peer, uint32_t peer_qpn)
	{
		QpAttr init;
		init.qp_state = QpState::Init;
		init.qp_access_flags =
		    ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ;
		int rc = qp.modify(init, QP_STATE | QP_PORT | QP_ACCESS_FLAGS);
		QpAttrAv rtr;
		rtr.qp_state = QpState::Rtr;
		rtr.dest_qp_num = peer_qpn;
		rtr.max_dest_rd_atomic = 16;
		rtr.ah_attr.dgid = peer.gid();
		if (!rc)
			rc = qp.modify(rtr, QP_STATE | QP_AV | QP_PATH_MTU | QP_DEST_QPN |
			                        QP_RQ_PSN | QP_MAX_DEST_RD_ATOMIC |
			                        QP_MIN_RNR_TIMER);
		QpAttr rts;
		rts.qp_state = QpState::Rts;
		rts.max_rd_atomic = 16;
		if (!rc)
			rc = qp.modify(rts, QP_STATE | QP_SQ_PSN | QP_TIMEOUT | QP_RETRY_CNT |
			                        QP_RNR_RETRY | QP_MAX_QP_RD_ATOMIC);
		if (rc)
			fatal("modify_qp: %s", std::strerror(-rc));
	}

	void set_size(uint32_t size)
	{
		for (uint32_t s = 0; s < kRwDepth; s++) {
			SgTable &t = tables[s];
			t.clear();
			t.reserve(kMaxIo / kPage);
			auto *base = static_cast<uint8_t *>(ma->addr()) + size_t{s} * kMaxIo;
			for (uint32_t off = 0; off < size; off += kPage)
				if (int rc = t.add(map, base + off, kPage))
					fatal("SgTable::add: %s", std::strerror(-rc));
		}
	}

	void fini()
	{
		if (!da)
			return;
		rq.reset();
		qb.reset();
		map.unregister_region(ma->addr(), ma->length());
		mra.reset();
		mrb.reset();
		cqa.reset();
		cqb.reset();
		pa.reset();
		pb.reset();
		ma.reset();
		mb.reset();
		if (own) {
			soft::destroy_device(da);
			soft::destroy_device(db);
		}
		da = db = nullptr;
	}
};

// A completion slot: the cqe first, so the WC's wr_cqe is the slot.
struct Slot {
	Cqe cqe{&Slot::on_done};
	bool busy = false;
	bool probe = false; // a failed completion is recorded, not fatal
	WcStatus status = WcStatus::Success;
	static void on_done(Cq *, Wc *wc)
	{
		auto *s = container_of(wc->wr_cqe, &Slot::cqe);
		if (wc->status != WcStatus::Success && s->probe) {
			s->status = wc->status;
			s->busy = false;
			return;
		}
		if (wc->status != WcStatus::Success) {
			fatal("completion failed: %s (vendor_err %u)", wc_status_str(wc->status),
			      wc->vendor_err);
		}
		s->busy = false;
	}
};

// Poll until slot is free; no completion for kStallS seconds is fatal (a lost completion
// on a real device must not hang the run).
constexpr double kStallS = 10;

void wait_slot(Cq &cq, Slot &s)
{
	Wc wc[16];
	unsigned empty = 0;
	auto idle_since = std::chrono::steady_clock::now();
	while (s.busy) {
		int n = cq.poll(wc);
		if (n < 0)
			fatal("poll: %s", std::strerror(-n));
		for (int i = 0; i < n; i++)
			wc[i].wr_cqe->done(&cq, &wc[i]);
		if (n > 0) {
			empty = 0;
			continue;
		}
		// The engine thread does the work: an empty poll gives it the CPU (on a
		// small machine a hard spin here starves the very thread it waits for).
		std::this_thread::yield();
		if (++empty % 4096 == 0) {
			auto now = std::chrono::steady_clock::now();
			if (empty == 4096)
				idle_since = now;
			else if (std::chrono::duration<double>(now - idle_since).count() > kStallS)
				fatal("waiting for a completion: none for %.0f s", kStallS);
		}
	}
}

// One 4 KiB context before measuring a path on a device: "" when it completes, else why
// not (the path's rows are then skipped). A failed completion leaves the QP in ERR.
std::string probe(Conn &c, RwDir dir)
{
	c.set_size(kPage);
	RwCtx ctx;
	Slot slot;
	slot.probe = true;
	const char *op = dir == RwDir::Write ? "WRITE" : "READ";
	int n = ctx.init(*c.rq, c.tables[0], 0, reinterpret_cast<uint64_t>(c.mb->addr()),
	                 c.mrb->rkey(), dir);
	if (n < 0)
		return std::string(op) + ": RwCtx::init: " + std::strerror(-n);
	slot.busy = true;
	if (int rc = ctx.post(&slot.cqe, nullptr)) {
		ctx.destroy();
		return std::string(op) + ": RwCtx::post: " + std::strerror(-rc);
	}
	wait_slot(*c.cqa, slot);
	ctx.destroy();
	if (slot.status != WcStatus::Success)
		return std::string(op) + " completed with " + wc_status_str(slot.status);
	return "";
}

void bm_rw(benchmark::State &st, Conn *c, uint32_t size, RwDir dir)
{
	c->set_size(size);
	std::array<RwCtx, kRwDepth> ctx;
	std::array<Slot, kRwDepth> slot;
	const uint64_t raddr = reinterpret_cast<uint64_t>(c->mb->addr());
	uint64_t i = 0;
	for (auto _ : st) {
		const uint32_t s = i++ % kRwDepth;
		if (ctx[s].type() != RwType::None) { // polled for another slot maybe
			wait_slot(*c->cqa, slot[s]);
			ctx[s].destroy();
		}
		int n = ctx[s].init(*c->rq, c->tables[s], 0, raddr, c->mrb->rkey(), dir);
		if (n < 0)
			fatal("RwCtx::init: %s", std::strerror(-n));
		slot[s].busy = true;
		if (int rc = ctx[s].post(&slot[s].cqe, nullptr))
			fatal("RwCtx::post: %s", std::strerror(-rc));
	}
	for (uint32_t s = 0; s < kRwDepth; s++) {
		wait_slot(*c->cqa, slot[s]);
		ctx[s].destroy();
	}
}

// The raw loop: the WRs an SGE context would post, built once per slot, re-posted.
void bm_raw(benchmark::State &st, Conn *c, uint32_t size, RwDir dir)
{
	c->set_size(size);
	const uint32_t max_sge =
	    dir == RwDir::Write ? c->rq->max_write_sge() : c->rq->max_read_sge();
	const uint64_t raddr = reinterpret_cast<uint64_t>(c->mb->addr());
	std::array<std::vector<Sge>, kRwDepth> sges;
	std::array<std::vector<RdmaWr>, kRwDepth> wrs;
	std::array<Slot, kRwDepth> slot;
	for (uint32_t s = 0; s < kRwDepth; s++) {
		const SgTable &t = c->tables[s];
		for (size_t k = 0; k < t.size(); k++)
			sges[s].push_back(
			    Sge{t.entries()[k].addr, t.entries()[k].length, t.lkeys()[k]});
		const size_t nwr = (t.size() + max_sge - 1) / max_sge;
		wrs[s].resize(nwr);
		for (size_t w = 0; w < nwr; w++) {
			RdmaWr &wr = wrs[s][w];
			wr.opcode = dir == RwDir::Write ? WrOpcode::RdmaWrite : WrOpcode::RdmaRead;
			wr.sg_list = &sges[s][w * max_sge];
			wr.num_sge =
			    static_cast<int>(std::min<size_t>(max_sge, t.size() - w * max_sge));
			wr.remote_addr = raddr + uint64_t{w} * max_sge * kPage;
			wr.rkey = c->mrb->rkey();
			wr.next = w + 1 < nwr ? &wrs[s][w + 1] : nullptr;
		}
		wrs[s].back().wr_cqe = &slot[s].cqe;
		wrs[s].back().send_flags = SEND_SIGNALED;
	}
	uint64_t i = 0;
	for (auto _ : st) {
		const uint32_t s = i++ % kRwDepth;
		wait_slot(*c->cqa, slot[s]);
		slot[s].busy = true;
		const SendWr *bad = nullptr;
		if (int rc = c->rq->qp().post_send(&wrs[s][0], &bad))
			fatal("post_send: %s", std::strerror(-rc));
	}
	for (uint32_t s = 0; s < kRwDepth; s++)
		wait_slot(*c->cqa, slot[s]);
}

} // namespace

int run_rw(const RwOptions &o)
{
	set_bench("rw");
	const double load = loadavg_1m();
	const bool on_device = !o.device.empty();
	const double min_time = o.min_time > 0 ? o.min_time
	                        : on_device    ? (o.quick ? 0.1 : 0.5)
	                        : o.quick      ? 0.03
	                                       : 0.3;
	Conn sge, mr;
	bool have_mr = true;
	std::string skipped; // why the mr path is left out
	if (on_device) {
		NamedDevice nd;
		std::string why;
		if (!open_named_device(o.device, &nd, &why))
			fatal("--device %s: %s", o.device.c_str(), why.c_str());
		if (int err = sge.init_device(false, nd.dev))
			fatal("%s: RwQp::create (SGE path): %s", o.device.c_str(),
			      std::strerror(-err));
		if (!(nd.dev->attr().device_cap_flags & DEVICE_MEM_MGT_EXTENSIONS)) {
			have_mr = false;
			skipped = "mr: " + o.device + " has no fast registration (REG_MR)";
		} else if (int err = mr.init_device(true, nd.dev)) {
			have_mr = false;
			skipped = "mr: RwQp::create with force-MR on " + o.device + ": " +
			          std::strerror(-err);
		} else {
			// A device may take REG_MR and still fail its WRs (a window outside
			// any region, a provider quirk): try one context each way first.
			for (RwDir dir : {RwDir::Write, RwDir::Read}) {
				if (std::string why = probe(mr, dir); !why.empty()) {
					have_mr = false;
					skipped =
					    "mr: a force-MR context on " + o.device + ": " + why;
					break;
				}
			}
		}
		if (std::string why = probe(sge, RwDir::Write) + probe(sge, RwDir::Read);
		    !why.empty())
			fatal("%s: the SGE path fails: %s", o.device.c_str(), why.c_str());
		if (!have_mr)
			mr.fini();
	} else {
		sge.init_soft(false, "127.0.0.11", "127.0.0.12");
		mr.init_soft(true, "127.0.0.13", "127.0.0.14");
	}

	// Per op and size: the raw loop, then the SGE and MR paths beside it, in the same run.
	struct Bench {
		std::string name; // "WRITE/sge/4096"
		RwDir dir;
		const char *path; // raw / sge / mr
		uint32_t size;
	};
	std::vector<Bench> benches;
	for (RwDir dir : {RwDir::Write, RwDir::Read}) {
		const char *op = dir == RwDir::Write ? "WRITE" : "READ";
		for (uint32_t size : kRwSizes) {
			for (const char *path : {"raw", "sge", "mr"}) {
				if (!have_mr && std::string(path) == "mr")
					continue;
				benches.push_back(
				    {std::string(op) + "/" + path + "/" + std::to_string(size), dir,
				     path, size});
			}
		}
	}
	for (const Bench &b : benches) {
		const RwDir dir = b.dir;
		const uint32_t size = b.size;
		Conn *c = std::string(b.path) == "mr" ? &mr : &sge;
		const bool raw = std::string(b.path) == "raw";
		benchmark::RegisterBenchmark(b.name.c_str(),
		                             [=](benchmark::State &st) {
			                             if (raw)
				                             bm_raw(st, c, size, dir);
			                             else
				                             bm_rw(st, c, size, dir);
		                             })
		    ->MinTime(min_time)
		    ->UseRealTime();
	}
	benchmark_init();
	const Runs runs = run_benchmarks([](const std::string &name, const Measured &m) {
		std::fprintf(stderr, "ulp-bench rw: %-28s %10.0f ctx/s\n", name.c_str(),
		             m.iterations / m.seconds);
	});
	benchmark::Shutdown();

	Report rep("rw");
	const std::string where =
	    on_device ? "verbs device " + o.device + " (both QPs on it, connected by hand)"
	              : std::string("soft provider (engine threads, in-process)");
	rep.title(fmt::format("{}, {} contexts in flight, page-sized scatter entries, {:.2f} s "
	                      "per figure",
	                      where, kRwDepth, min_time));
	rep.note("raw = the same RDMA WRs posted directly; ratio = ctx/s / raw ctx/s");
	rep.machine(load);
	rep.meta("provider", json_str(on_device ? "verbs" : "soft"));
	if (on_device)
		rep.meta("device", json_str(o.device));
	rep.meta("depth", json_int(kRwDepth));
	rep.meta("quick", json_bool(o.quick));
	rep.meta("min_time_s", json_num(min_time, 3));
	if (!skipped.empty())
		rep.skipped(skipped);
	rep.columns({{"op", "op", Align::Left},
	             {"size", "size"},
	             {"path", "path", Align::Left},
	             {"ctx/s", "ctx_per_s"},
	             {"GB/s", ""},
	             {"", "bytes_per_s"},
	             {"ratio", "ratio_to_raw"}});
	for (const Bench &b : benches) {
		const auto ctx_per_s = [&](const std::string &name) {
			const Measured &m = runs[name];
			return m.iterations / m.seconds;
		};
		const double ctx = ctx_per_s(b.name);
		const double raw = ctx_per_s(std::string(b.dir == RwDir::Write ? "WRITE" : "READ") +
		                             "/raw/" + std::to_string(b.size));
		rep.row()
		    .text(b.dir == RwDir::Write ? "WRITE" : "READ")
		    .integer(b.size)
		    .text(b.path)
		    .num(ctx, 0, 1)
		    .num(ctx * b.size / 1e9, 3, 3)
		    .num(ctx * b.size, 1, 1)
		    .ratio(ctx, raw, 3, 4);
	}
	rep.print(o.json);
	sge.fini();
	mr.fini();
	return 0;
}

} // namespace ulp::bench
