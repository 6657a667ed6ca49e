// SPDX-License-Identifier: MIT
// examples/rw_transfer.cc - one RDMA WRITE and one RDMA READ with ulp's rw contexts.
//
// What a storage target does with every command's data, reduced to its bones: side A (the
// "target") owns an RwQp and moves bytes between its own scattered buffers and a peer's
// buffer that the peer (side B, the "initiator") advertised by address and rkey. The
// kernel's equivalent is rdma_rw_ctx_init / rdma_rw_ctx_post / rdma_rw_ctx_destroy on a
// CQ from ib_alloc_cq; here that is RwCtx::init / post / destroy on a CQ from alloc_cq.
//
// Everything runs in this process on two devices of the software RDMA provider
// (providers/soft), so no RDMA hardware is needed. The transfer is run twice: once on the
// SGE path (RDMA WRITE/READ work requests that gather the scatter entries directly) and
// once with force_mr (each transfer registers the entries with a fast-registration MR from
// the QP's pool first, as on iWARP or for large READs).
//
// Build against the installed package (see examples/README.md), then run: ./rw_transfer
// Exit status 0 when every byte arrived where it should, 1 otherwise.
#include "core/device.h"
#include "core/dma_mem.h"
#include "core/drain.h"
#include "core/mem_map.h"
#include "cq_poll/cq_poll.h"
#include "providers/soft/soft.h"
#include "rw/rw.h"
#include "ulp/version.h"

#include <chrono>
#include <condition_variable>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

using namespace ulp;

namespace
{

constexpr size_t kBufBytes = 64 * 1024;         // each side's registered buffer
constexpr auto kWait = std::chrono::seconds(5); // bound on every wait for a completion

[[noreturn]] void die(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	std::fprintf(stderr, "rw_transfer: ");
	std::vfprintf(stderr, fmt, ap);
	std::fprintf(stderr, "\n");
	va_end(ap);
	std::exit(1);
}

// A soft device that is destroyed when it goes out of scope (after everything on it).
struct DevDeleter {
	void operator()(Device *d) const { soft::destroy_device(d); }
};
using DevPtr = std::unique_ptr<Device, DevDeleter>;

// The completion of one rw context. The Cqe is embedded, as the kernel embeds ib_cqe in
// its per-command context; done() runs on a cq_poll poller thread (PollCtx::Softirq) and
// finds the Completion again with container_of. main() sleeps on the condition variable.
struct Completion {
	Cqe cqe{&Completion::done};
	std::mutex lock;            // guards the three fields below
	std::condition_variable cv; // signalled by done()
	bool finished = false;      // done() has run
	WcStatus status = WcStatus::Success;
	WcOpcode opcode = WcOpcode::Send;

	static void done(Cq *, Wc *wc)
	{
		Completion *c = container_of(wc->wr_cqe, &Completion::cqe);
		std::lock_guard g(c->lock);
		c->finished = true;
		c->status = wc->status;
		c->opcode = wc->opcode;
		c->cv.notify_one();
	}

	// Wait (bounded) for done(); false on timeout.
	bool wait()
	{
		std::unique_lock g(lock);
		return cv.wait_for(g, kWait, [this] { return finished; });
	}
};

// Move a QP through INIT, RTR and RTS towards a peer QP, without a CM: the peer is named by
// its device's GID and its QP number (what rc_pingpong exchanges out of band). A ULP on a
// real fabric lets the CM do this (core/cm.h, or rdma_conn/ as examples/echo.cc does).
int connect_qp(Qp &qp, const Device &peer, uint32_t peer_qpn)
{
	QpAttr init;
	init.qp_state = QpState::Init;
	init.qp_access_flags = ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ;
	if (int rc = qp.modify(init, QP_STATE | QP_PORT | QP_ACCESS_FLAGS))
		return rc;
	QpAttrAv rtr;
	rtr.qp_state = QpState::Rtr;
	rtr.dest_qp_num = peer_qpn;
	rtr.max_dest_rd_atomic = 4; // RDMA READs this QP serves at once
	rtr.ah_attr.dgid = peer.gid();
	if (int rc = qp.modify(rtr, QP_STATE | QP_AV | QP_PATH_MTU | QP_DEST_QPN | QP_RQ_PSN |
	                                QP_MAX_DEST_RD_ATOMIC | QP_MIN_RNR_TIMER))
		return rc;
	QpAttr rts;
	rts.qp_state = QpState::Rts;
	rts.max_rd_atomic = 4; // RDMA READs this QP has outstanding at once
	return qp.modify(rts, QP_STATE | QP_SQ_PSN | QP_TIMEOUT | QP_RETRY_CNT | QP_RNR_RETRY |
	                          QP_MAX_QP_RD_ATOMIC);
}

// A byte pattern that differs per position and per seed, so that a misplaced byte shows.
void fill(uint8_t *p, size_t n, uint8_t seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = static_cast<uint8_t>(seed + i * 7 + (i >> 8));
}

const char *type_str(RwType t)
{
	switch (t) {
	case RwType::SingleWr:
		return "SINGLE_WR";
	case RwType::MultiWr:
		return "MULTI_WR";
	case RwType::Mr:
		return "MR";
	default:
		return "none";
	}
}

// One side's memory: a buffer from dma_alloc (memfd-backed, so that the soft provider
// could reach it from another process too) registered once on the side's PD.
struct Memory {
	std::unique_ptr<DmaRegion> region;
	std::unique_ptr<Mr> mr;

	void init(Pd &pd)
	{
		region = dma_alloc(kBufBytes);
		if (!region)
			die("dma_alloc: %s", std::strerror(errno));
		mr = pd.reg_mr(region->addr(), region->length(),
		               ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ);
		if (!mr)
			die("reg_mr: %s", std::strerror(errno));
	}
	uint8_t *bytes() const { return static_cast<uint8_t *>(region->addr()); }
};

// The scatter list of A's side of every transfer: three pieces of A's buffer that are not
// back to back, as a command's pages seldom are. They form a page list: only the first may
// start inside a page and only the last may end inside one, so that one fast-registration
// MR maps them all on the MR path (a device without DEVICE_SG_GAPS_REG takes no other
// shape into one MR). {offset, length} in bytes.
struct Piece {
	size_t off;
	uint32_t len;
};
const Piece kPieces[] = {{100, 4096 - 100}, {8192, 2 * 4096}, {20480, 1234}};

// One rw context: build it, post it, wait for its one signaled completion, release it.
// Returns the context type that was used.
RwType transfer(RwQp &rq, MemMap &map, Memory &local, Memory &remote, size_t remote_off, RwDir dir)
{
	// The local side as a scatter table. SgTable::add resolves each entry's lkey through
	// the MemMap (userspace has no local_dma_lkey: every SGE names its MR's key).
	SgTable sgt(std::size(kPieces));
	for (const Piece &p : kPieces)
		if (int rc = sgt.add(map, local.bytes() + p.off, p.len))
			die("SgTable::add: %s", std::strerror(-rc));

	// rdma_rw_ctx_init: the WR chain for the whole table, to or from the peer's
	// [remote address, + sgt.length()) under its rkey. The result is the number of send
	// WRs the chain takes (registration WRs included), for send-queue accounting.
	RwCtx ctx;
	const uint64_t raddr = reinterpret_cast<uint64_t>(remote.bytes() + remote_off);
	int nwr = ctx.init(rq, sgt, 0, raddr, remote.mr->rkey(), dir);
	if (nwr < 0)
		die("RwCtx::init: %s", std::strerror(-nwr));

	// rdma_rw_ctx_post: only the last WR is signaled, with our cqe. A ULP that answers
	// the command would pass its response SEND as chain_wr, so that data and status go
	// out in one post_send.
	Completion c;
	if (int rc = ctx.post(&c.cqe, nullptr))
		die("RwCtx::post: %s", std::strerror(-rc));
	if (!c.wait())
		die("no completion within %lld s", static_cast<long long>(kWait.count()));
	if (c.status != WcStatus::Success)
		die("%s completed with %s", dir == RwDir::Write ? "WRITE" : "READ",
		    wc_status_str(c.status));
	std::printf("  %-5s %6llu bytes in %zu pieces: %s context, %d WRs, %u data WRs\n",
	            dir == RwDir::Write ? "WRITE" : "READ",
	            static_cast<unsigned long long>(sgt.length()), sgt.size(), type_str(ctx.type()),
	            nwr, ctx.nr_ops());

	// rdma_rw_ctx_destroy: the MRs (if any) back to the pool. Only now that the WRs
	// completed; a context whose WRs might still run must not be destroyed.
	const RwType type = ctx.type();
	ctx.destroy();
	return type;
}

// After a transfer between the pieces of local and [remote_off, + the pieces' length) of
// remote, the buffer that was written (the remote one for a WRITE, the local one for a
// READ) must hold the moved bytes there and zeros everywhere else: nothing may be written
// outside the transfer. Checked against a copy built the slow way, byte by byte.
bool verify(const Memory &local, const Memory &remote, size_t remote_off, RwDir dir)
{
	const Memory &dst = dir == RwDir::Write ? remote : local;
	std::vector<uint8_t> want(kBufBytes, 0);
	size_t at = remote_off;
	for (const Piece &p : kPieces) {
		for (uint32_t i = 0; i < p.len; i++, at++) {
			if (dir == RwDir::Write)
				want[at] = local.bytes()[p.off + i];
			else
				want[p.off + i] = remote.bytes()[at];
		}
	}
	return std::memcmp(want.data(), dst.bytes(), kBufBytes) == 0;
}

// The whole example once, on a fresh pair of devices, with or without force_mr.
void run(bool force_mr)
{
	std::printf("%s path:\n", force_mr ? "MR (force_mr)" : "SGE");

	// Two devices of the soft provider, each with its own IPv4 address (their GIDs are
	// IPv4-mapped). Exec::Engine (the default): engine threads execute the work requests,
	// as a NIC's queues do, so completions arrive asynchronously.
	soft::DeviceConfig cfg;
	cfg.ip = "127.0.0.1";
	DevPtr da(soft::create_device(cfg));
	cfg.ip = "127.0.0.2";
	DevPtr db(soft::create_device(cfg));
	if (!da || !db)
		die("soft::create_device: %s", std::strerror(errno));

	std::unique_ptr<Pd> pa = da->alloc_pd(), pb = db->alloc_pd();
	if (!pa || !pb)
		die("alloc_pd: %s", std::strerror(errno));

	// ib_alloc_cq: A's CQ is processed by a cq_poll poller thread (Softirq context), which
	// calls each completion's cqe->done. B only answers RDMA READs and WRITEs, which its
	// responder side handles without a completion; its QP still needs a CQ, and a Direct
	// one costs no thread.
	CqHandle cqa = alloc_cq(*da, 64, 0, PollCtx::Softirq);
	CqHandle cqb = alloc_cq(*db, 16, 0, PollCtx::Direct);
	if (!cqa || !cqb)
		die("alloc_cq: %s", std::strerror(errno));

	Memory ma, mb;
	ma.init(*pa);
	mb.init(*pb);
	// A's registered memory, for SgTable::add's lkey look-ups (one MemMap per PD).
	MemMap map;
	if (int rc = map.register_mr(*ma.mr))
		die("MemMap::register_mr: %s", std::strerror(-rc));

	// A's QP with room for two rw contexts: RwQp::create grows the send queue by what
	// they may need (rdma_rw_init_qp) and, when contexts can use MRs, makes the QP's MR
	// pool (rdma_rw_init_mrs). The +1 send and receive WR (and the 2 extra CQ entries
	// counted into the CQ's 64) are drain's marker room (core/drain.h).
	QpInitAttr qa;
	qa.send_cq = qa.recv_cq = cqa.get();
	qa.cap.max_send_wr = 1 + 1;
	qa.cap.max_recv_wr = 1 + 1;
	qa.cap.max_send_sge = 4;
	qa.cap.max_recv_sge = 1;
	qa.cap.max_rdma_ctxs = 2;
	RwQpOptions ro;
	ro.max_pages = 16; // the most pages one context's scatter table spans
	ro.force_mr = force_mr;
	int err = 0;
	std::unique_ptr<RwQp> rq = RwQp::create(*pa, qa, ro, &err);
	if (!rq)
		die("RwQp::create: %s", std::strerror(-err));

	// B's plain QP: the passive end of every RDMA READ and WRITE.
	QpInitAttr qb_attr;
	qb_attr.send_cq = qb_attr.recv_cq = cqb.get();
	qb_attr.cap.max_send_wr = qb_attr.cap.max_recv_wr = 2;
	qb_attr.cap.max_send_sge = qb_attr.cap.max_recv_sge = 1;
	std::unique_ptr<Qp> qb = pb->create_qp(qb_attr);
	if (!qb)
		die("create_qp: %s", std::strerror(errno));

	if (int rc = connect_qp(rq->qp(), *db, qb->qp_num()))
		die("connect A: %s", std::strerror(-rc));
	if (int rc = connect_qp(*qb, *da, rq->qp().qp_num()))
		die("connect B: %s", std::strerror(-rc));

	// RDMA WRITE: A's three pieces land back to back in B's buffer at offset 512.
	fill(ma.bytes(), kBufBytes, 1);
	std::memset(mb.bytes(), 0, kBufBytes);
	RwType wt = transfer(*rq, map, ma, mb, 512, RwDir::Write);
	if (!verify(ma, mb, 512, RwDir::Write))
		die("WRITE: B's buffer does not hold what A wrote, or more");

	// RDMA READ: B's bytes at offset 4096 are fetched into A's three pieces.
	fill(mb.bytes(), kBufBytes, 99);
	std::memset(ma.bytes(), 0, kBufBytes);
	RwType rt = transfer(*rq, map, ma, mb, 4096, RwDir::Read);
	if (!verify(ma, mb, 4096, RwDir::Read))
		die("READ: A's pieces do not hold what B had, or A changed elsewhere");
	if (force_mr && (wt != RwType::Mr || rt != RwType::Mr))
		die("force_mr: expected MR contexts");
	std::printf("  verified: every byte moved, nothing outside the transfers changed\n");

	// Teardown in the kernel's order: drain the QP (every WR posted has come back
	// through its done(): here there is nothing left, but a ULP closing under load has
	// flushes to wait for), then the QPs, then their CQs (free_cq refuses a CQ a QP still
	// uses), the MRs, the PDs, and the devices last.
	if (int rc = drain_qp(rq->qp()))
		die("drain_qp: %s", std::strerror(-rc));
	rq.reset();
	qb.reset();
	if (int rc = free_cq(cqa))
		die("free_cq: %s", std::strerror(-rc));
	if (int rc = free_cq(cqb))
		die("free_cq: %s", std::strerror(-rc));
	map.unregister_region(ma.bytes(), ma.region->length());
	ma.mr.reset();
	mb.mr.reset();
	pa.reset();
	pb.reset();
}

} // namespace

int main()
{
	std::printf("ulp %s rw_transfer: RDMA WRITE and READ through rw contexts on two soft "
	            "devices\n",
	            ULP_VERSION);
	run(false);
	run(true);
	std::printf("rw_transfer: OK\n");
	return 0;
}
