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
// One iteration is one context (one I/O); kDepth are kept in flight, each on its own
// page-aligned scatter table of size/4096 entries. ratio = ctx/s of the path / ctx/s of raw.
#include "tools/ulp-bench/rw.h"

#include "core/dma_mem.h"
#include "core/mem_map.h"
#include "providers/soft/soft.h"
#include "rw/rw.h"

#include <benchmark/benchmark.h>

#include <array>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace ulp::bench
{

namespace
{

constexpr uint32_t kDepth = 8;        // contexts in flight
constexpr uint32_t kMaxIo = 1u << 20; // largest I/O
constexpr uint32_t kPage = 4096;      // scatter entries are pages
constexpr std::array<uint32_t, 3> kSizes = {4096, 128 * 1024, kMaxIo};

[[noreturn]] void die(const char *what, int rc)
{
	std::fprintf(stderr, "ulp-bench rw: %s failed (%d)\n", what, rc);
	std::exit(1);
}

// Two soft devices, the rw QP on a, a plain peer QP on b, connected by hand.
struct Conn {
	Device *da = nullptr, *db = nullptr;
	std::unique_ptr<Pd> pa, pb;
	std::unique_ptr<Cq> cqa, cqb;
	std::unique_ptr<DmaRegion> ma, mb; // a: kDepth I/O buffers; b: one remote buffer
	std::unique_ptr<Mr> mra, mrb;
	MemMap map; // a's memory
	std::unique_ptr<RwQp> rq;
	std::unique_ptr<Qp> qb;
	std::vector<SgTable> tables; // per slot, rebuilt per size

	void init(bool force_mr, const std::string &ipa, const std::string &ipb)
	{
		soft::DeviceConfig c;
		c.ip = ipa;
		da = soft::create_device(c);
		c.ip = ipb;
		db = soft::create_device(c);
		if (!da || !db)
			die("create_device", -errno);
		pa = da->alloc_pd();
		pb = db->alloc_pd();
		CqInitAttr ca;
		ca.cqe = 4096;
		cqa = da->create_cq(ca);
		cqb = db->create_cq(ca);
		ma = dma_alloc(size_t{kDepth} * kMaxIo);
		mb = dma_alloc(kMaxIo);
		const uint32_t acc = ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ;
		mra = pa->reg_mr(ma->addr(), ma->length(), acc);
		mrb = pb->reg_mr(mb->addr(), mb->length(), acc);
		if (!mra || !mrb || map.register_mr(*mra))
			die("reg_mr", -errno);
		QpInitAttr qa;
		qa.send_cq = qa.recv_cq = cqa.get();
		qa.cap.max_send_wr = 4;
		qa.cap.max_recv_wr = 4;
		qa.cap.max_send_sge = da->attr().max_sge;
		qa.cap.max_recv_sge = 1;
		qa.cap.max_rdma_ctxs = kDepth;
		RwQpOptions o;
		o.max_pages = kMaxIo / kPage;
		o.force_mr = force_mr;
		int err = 0;
		rq = RwQp::create(*pa, qa, o, &err);
		if (!rq)
			die("RwQp::create", err);
		QpInitAttr qb_attr;
		qb_attr.send_cq = qb_attr.recv_cq = cqb.get();
		qb_attr.cap.max_send_wr = qb_attr.cap.max_recv_wr = 4;
		qb_attr.cap.max_send_sge = qb_attr.cap.max_recv_sge = 1;
		qb = pb->create_qp(qb_attr);
		if (!qb)
			die("create_qp", -errno);
		connect(rq->qp(), *db, qb->qp_num());
		connect(*qb, *da, rq->qp().qp_num());
		tables.resize(kDepth);
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
			die("modify_qp", rc);
	}

	void set_size(uint32_t size)
	{
		for (uint32_t s = 0; s < kDepth; s++) {
			SgTable &t = tables[s];
			t.clear();
			t.reserve(kMaxIo / kPage);
			auto *base = static_cast<uint8_t *>(ma->addr()) + size_t{s} * kMaxIo;
			for (uint32_t off = 0; off < size; off += kPage)
				if (int rc = t.add(map, base + off, kPage))
					die("SgTable::add", rc);
		}
	}

	void fini()
	{
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
		soft::destroy_device(da);
		soft::destroy_device(db);
	}
};

// A completion slot: the cqe first, so the WC's wr_cqe is the slot.
struct Slot {
	Cqe cqe{&Slot::on_done};
	bool busy = false;
	static void on_done(Cq *, Wc *wc)
	{
		auto *s = reinterpret_cast<Slot *>(wc->wr_cqe);
		if (wc->status != WcStatus::Success)
			die(wc_status_str(wc->status), -EIO);
		s->busy = false;
	}
};

// Poll until slot is free.
void wait_slot(Cq &cq, Slot &s)
{
	Wc wc[16];
	while (s.busy) {
		int n = cq.poll(wc);
		for (int i = 0; i < n; i++)
			wc[i].wr_cqe->done(&cq, &wc[i]);
		// The engine thread does the work: an empty poll gives it the CPU (on a
		// small machine a hard spin here starves the very thread it waits for).
		if (n == 0)
			std::this_thread::yield();
	}
}

void bm_rw(benchmark::State &st, Conn *c, uint32_t size, RwDir dir)
{
	c->set_size(size);
	std::array<RwCtx, kDepth> ctx;
	std::array<Slot, kDepth> slot;
	const uint64_t raddr = reinterpret_cast<uint64_t>(c->mb->addr());
	uint64_t i = 0;
	for (auto _ : st) {
		const uint32_t s = i++ % kDepth;
		if (ctx[s].type() != RwType::None) { // polled for another slot maybe
			wait_slot(*c->cqa, slot[s]);
			ctx[s].destroy();
		}
		int n = ctx[s].init(*c->rq, c->tables[s], 0, raddr, c->mrb->rkey(), dir);
		if (n < 0)
			die("RwCtx::init", n);
		slot[s].busy = true;
		if (int rc = ctx[s].post(&slot[s].cqe, nullptr))
			die("RwCtx::post", rc);
	}
	for (uint32_t s = 0; s < kDepth; s++) {
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
	std::array<std::vector<Sge>, kDepth> sges;
	std::array<std::vector<RdmaWr>, kDepth> wrs;
	std::array<Slot, kDepth> slot;
	for (uint32_t s = 0; s < kDepth; s++) {
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
		const uint32_t s = i++ % kDepth;
		wait_slot(*c->cqa, slot[s]);
		slot[s].busy = true;
		const SendWr *bad = nullptr;
		if (int rc = c->rq->qp().post_send(&wrs[s][0], &bad))
			die("post_send", rc);
	}
	for (uint32_t s = 0; s < kDepth; s++)
		wait_slot(*c->cqa, slot[s]);
}

struct Row {
	std::string name; // benchmark name
	std::string op;   // READ / WRITE
	std::string path; // raw / sge / mr
	uint32_t size = 0;
	double ctx_per_s = 0;
	bool have = false;
};

class Reporter : public benchmark::BenchmarkReporter
{
public:
	explicit Reporter(std::vector<Row> &rows) : rows_(rows) {}
	bool ReportContext(const Context &) override { return true; }
	void ReportRuns(const std::vector<Run> &runs) override
	{
		for (const Run &run : runs) {
			if (run.run_type != Run::RT_Iteration)
				continue;
			for (Row &r : rows_) {
				if (r.name != run.run_name.function_name)
					continue;
				if (run.error_occurred || run.real_accumulated_time <= 0)
					die(r.name.c_str(), -EIO);
				r.ctx_per_s =
				    static_cast<double>(run.iterations) / run.real_accumulated_time;
				r.have = true;
				std::fprintf(stderr, "ulp-bench rw: %-28s %10.0f ctx/s\n",
				             r.name.c_str(), r.ctx_per_s);
			}
		}
	}

private:
	std::vector<Row> &rows_;
};

double raw_of(const std::vector<Row> &rows, const Row &r)
{
	for (const Row &x : rows)
		if (x.path == "raw" && x.op == r.op && x.size == r.size && x.have)
			return x.ctx_per_s;
	return 0;
}

} // namespace

int run_rw(const RwOptions &o)
{
	const double min_time = o.min_time > 0 ? o.min_time : o.quick ? 0.03 : 0.3;
	Conn sge, mr;
	sge.init(false, "127.0.0.11", "127.0.0.12");
	mr.init(true, "127.0.0.13", "127.0.0.14");

	std::vector<Row> rows;
	for (RwDir dir : {RwDir::Write, RwDir::Read}) {
		const char *op = dir == RwDir::Write ? "WRITE" : "READ";
		for (uint32_t size : kSizes) {
			for (const char *path : {"raw", "sge", "mr"}) {
				Row r;
				r.op = op;
				r.path = path;
				r.size = size;
				r.name = std::string(op) + "/" + path + "/" + std::to_string(size);
				rows.push_back(r);
			}
		}
	}
	for (const Row &r : rows) {
		const RwDir dir = r.op == "WRITE" ? RwDir::Write : RwDir::Read;
		const uint32_t size = r.size;
		Conn *c = r.path == "mr" ? &mr : &sge;
		const bool raw = r.path == "raw";
		benchmark::RegisterBenchmark(r.name.c_str(),
		                             [=](benchmark::State &st) {
			                             if (raw)
				                             bm_raw(st, c, size, dir);
			                             else
				                             bm_rw(st, c, size, dir);
		                             })
		    ->MinTime(min_time)
		    ->UseRealTime();
	}
	int bargc = 1;
	char arg0[] = "ulp-bench";
	char *bargv[] = {arg0, nullptr};
	benchmark::Initialize(&bargc, bargv);
	Reporter rep(rows);
	benchmark::RunSpecifiedBenchmarks(&rep);
	benchmark::Shutdown();

	if (o.json) {
		std::printf("{\n  \"bench\": \"rw\",\n  \"provider\": \"soft\",\n  \"depth\": %u,\n"
		            "  \"quick\": %s,\n  \"rows\": [",
		            kDepth, o.quick ? "true" : "false");
		const char *sep = "";
		for (const Row &r : rows) {
			const double raw = raw_of(rows, r);
			std::printf(
			    "%s\n    {\"op\": \"%s\", \"path\": \"%s\", \"size\": %u, "
			    "\"ctx_per_s\": %.1f, \"bytes_per_s\": %.1f, \"ratio_to_raw\": %.4f}",
			    sep, r.op.c_str(), r.path.c_str(), r.size, r.ctx_per_s,
			    r.ctx_per_s * r.size, raw > 0 ? r.ctx_per_s / raw : 0.0);
			sep = ",";
		}
		std::printf("\n  ]\n}\n");
	} else {
		std::printf(
		    "ulp-bench rw: soft provider (engine threads, in-process), %u contexts in "
		    "flight, page-sized scatter entries, %.2f s per figure\n",
		    kDepth, min_time);
		std::printf(
		    "  raw = the same RDMA WRs posted directly; ratio = ctx/s / raw ctx/s\n\n");
		std::printf("%-6s %8s %-4s %12s %10s %8s\n", "op", "size", "path", "ctx/s", "GB/s",
		            "ratio");
		for (const Row &r : rows) {
			const double raw = raw_of(rows, r);
			std::printf("%-6s %8u %-4s %12.0f %10.3f %7.3fx\n", r.op.c_str(), r.size,
			            r.path.c_str(), r.ctx_per_s, r.ctx_per_s * r.size / 1e9,
			            raw > 0 ? r.ctx_per_s / raw : 0.0);
		}
	}
	sge.fini();
	mr.fini();
	return 0;
}

} // namespace ulp::bench
