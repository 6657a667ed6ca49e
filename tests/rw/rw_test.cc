// SPDX-License-Identifier: MIT
// tests/rw/rw_test.cc - rdma_rw contexts (rw/) on two soft devices connected in-process:
// data integrity over sizes, scatter layouts, directions, device profiles and force-MR;
// chain_wr; signaling; WR accounting; key rotation; send-queue sizing; MR pool
// exhaustion; bad input. With ULP_TEST_DEVICE (tests/common/test_device.h; rxe0 in
// tools/vm) the device-agnostic part runs on that one device: the default device shape,
// with and without force-MR; what needs a soft profile or soft limits is skipped.
#include "rw/rw.h"

#include "core/mem_map.h"
#include "providers/soft/soft.h"
#include "tests/soft/soft_test_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

using namespace ulp;
using soft_test::DevPtr;
using soft_test::Side;

namespace
{

constexpr size_t KiB = 1024, MiB = 1024 * 1024, kPage = 4096;

// A completion target: done() recovers the Done from its cqe (container_of).
struct Done {
	Cqe cqe{&Done::on_done};
	int n = 0;                           // completions seen
	WcStatus status = WcStatus::Success; // of the last one
	WcOpcode opcode = WcOpcode::Send;    // of the last one

	static void on_done(Cq *, Wc *wc)
	{
		auto *d = container_of(wc->wr_cqe, &Done::cqe);
		d->n++;
		d->status = wc->status;
		d->opcode = wc->opcode;
	}
};

// Poll cq until pred() holds or the wait runs out, calling wc.wr_cqe->done for each
// completion (cq_poll/ is not used here on purpose). Completions without a cqe (flushes
// of unsignaled WRs) are counted in *orphans. Returns pred().
template <typename Pred>
bool process_until(Cq &cq, Pred pred, int *orphans = nullptr,
                   std::chrono::milliseconds timeout = soft_test::kWait)
{
	auto until = soft_test::Clock::now() + timeout;
	Wc wc[16];
	while (!pred()) {
		int got = cq.poll(wc);
		for (int i = 0; i < got; i++) {
			if (wc[i].wr_cqe)
				wc[i].wr_cqe->done(&cq, &wc[i]);
			else if (orphans)
				(*orphans)++;
		}
		if (got > 0)
			continue;
		if (soft_test::Clock::now() >= until)
			return pred();
		std::this_thread::yield();
	}
	return true;
}

// Everything still in cq, dispatched; returns how many.
int drain(Cq &cq)
{
	int n = 0;
	Wc wc[16];
	for (;;) {
		int got = cq.poll(wc);
		if (got <= 0)
			return n;
		for (int i = 0; i < got; i++)
			if (wc[i].wr_cqe)
				wc[i].wr_cqe->done(&cq, &wc[i]);
		n += got;
	}
}

// A device shape under test.
struct Config {
	std::string name;
	soft::Profile profile = soft::Profile::Ib;
	soft::Limits limits;
	bool force_mr = false;
	uint32_t max_pages = 4096; // RwQpOptions::max_pages
	size_t max_size = 8 * MiB; // largest transfer in the matrix
	// Expected path: READs use MRs above this many entries (UINT32_MAX never, 0 always);
	// WRITEs use MRs iff mr_write.
	uint32_t mr_read_above = UINT32_MAX;
	bool mr_write = false;
	soft::Exec exec = soft::Exec::Inline; // ignored on ULP_TEST_DEVICE (always asynchronous)

	// A shape whose only soft limit is the SGE count: a real device (ULP_TEST_DEVICE)
	// takes it from the QP instead (rw sizes WRITE WRs by the QP's max_send_sge and READ
	// WRs by min(that, the device's max_sge_rd): READs may gather more than max_sge_rd).
	bool sge_limit_only() const
	{
		soft::Limits l = limits;
		l.max_sge = l.max_sge_rd = 0;
		Config rest = *this;
		rest.limits = l;
		return limits.max_sge && !rest.needs_soft();
	}

	// Only a soft device can take this shape: a profile or limits other than the defaults.
	bool needs_soft() const
	{
		const soft::Limits &l = limits;
		return profile != soft::Profile::Ib || l.max_qp_wr || l.max_sge || l.max_sge_rd ||
		       l.max_sgl_rd || l.max_fast_reg_page_list_len || l.max_qp_rd_atom ||
		       l.max_cqe || l.max_inline_data || l.num_comp_vectors;
	}
};

// gtest prints a parameter (and names its test) with this: its name.
void PrintTo(const Config &c, std::ostream *os)
{
	*os << c.name;
}

// The WRs posted on qp so far, where the device can tell (soft counters); nullopt elsewhere.
std::optional<uint64_t> posted(Qp &qp)
{
	if (!ulp::test::is_soft(qp.device()))
		return std::nullopt;
	return soft::qp_counters(qp).posted;
}

// Two devices; side a carries the RwQp, side b is the plain peer.
struct Env {
	DevPtr da, db;
	Side a, b;
	MemMap map; // a's registered memory
	std::unique_ptr<RwQp> rq;

	~Env()
	{
		rq.reset(); // before a's PD and CQs
		if (a.mr)
			map.unregister_region(reinterpret_cast<void *>(a.mr->iova()),
			                      a.mr->length());
	}

	// b's plain QP, its SGE counts within the device's limits.
	bool create_peer_qp()
	{
		b.own_qp.reset();
		QpInitAttr qa = b.qp_attr();
		qa.cap.max_send_sge = std::min(qa.cap.max_send_sge, db->attr().max_sge);
		qa.cap.max_recv_sge = std::min(qa.cap.max_recv_sge, db->attr().max_sge);
		b.own_qp = b.pd->create_qp(qa);
		b.qp = b.own_qp.get();
		EXPECT_TRUE(b.qp) << "errno " << errno;
		return b.qp != nullptr;
	}

	bool init(const Config &c, size_t abuf, size_t bbuf, uint32_t ctxs = 2,
	          uint32_t base_send_wr = 16, uint32_t max_send_sge = 30)
	{
		if (ulp::test::on_test_device()) {
			if (c.needs_soft() && !c.sge_limit_only()) {
				ADD_FAILURE()
				    << c.name << ": a soft shape on ULP_TEST_DEVICE: the test "
				    << "must ULP_SKIP_UNLESS_SOFT";
				return false;
			}
			da = soft_test::make_dev("127.0.0.1");
			db = soft_test::make_dev("127.0.0.2");
		} else {
			soft::DeviceConfig dc;
			dc.profile = c.profile;
			dc.limits = c.limits;
			dc.exec = c.exec;
			dc.ip = "127.0.0.1";
			da = DevPtr(soft::create_device(dc));
			dc.ip = "127.0.0.2";
			db = DevPtr(soft::create_device(dc));
		}
		if (!da || !db) {
			ADD_FAILURE() << "create_device errno " << errno;
			return false;
		}
		a.init(*da, abuf, 1024);
		b.init(*db, bbuf, 1024);
		if (!a.mr || !b.mr)
			return false;
		EXPECT_EQ(map.register_mr(*a.mr), 0);
		QpInitAttr qa = a.qp_attr();
		qa.cap.max_send_wr = base_send_wr;
		qa.cap.max_send_sge = std::min(max_send_sge, da->attr().max_sge);
		qa.cap.max_recv_sge = std::min(qa.cap.max_recv_sge, da->attr().max_sge);
		qa.cap.max_rdma_ctxs = ctxs;
		RwQpOptions o;
		o.max_pages = c.max_pages;
		o.force_mr = c.force_mr;
		int err = 0;
		rq = RwQp::create(*a.pd, qa, o, &err);
		if (!rq) {
			ADD_FAILURE() << "RwQp::create " << err;
			return false;
		}
		a.qp = &rq->qp();
		if (!create_peer_qp())
			return false;
		int rc = soft_test::connect_pair(a, b);
		EXPECT_EQ(rc, 0);
		return rc == 0;
	}
};

enum class Layout : uint8_t {
	Contig, // back to back from an unaligned start: boundaries anywhere, no gaps
	Gapped, // unaligned entries with holes between them
	Paged,  // page-aligned entries of whole pages (the last may be short), a page apart
};

const char *layout_str(Layout l)
{
	return l == Layout::Contig ? "contig" : l == Layout::Gapped ? "gapped" : "paged";
}

// Split total bytes into n entries placed in buf according to layout. Empty if the
// combination is impossible (fewer bytes than entries, pages too few for Paged).
std::vector<std::pair<size_t, uint32_t>> make_layout(size_t total, uint32_t n, Layout l,
                                                     uint8_t *buf, size_t buflen, uint32_t seed)
{
	std::vector<std::pair<size_t, uint32_t>> out; // (offset in buf, length)
	if (total < n)
		return out;
	const size_t base = (kPage - reinterpret_cast<uintptr_t>(buf) % kPage) % kPage;
	std::mt19937 rng(seed);
	std::vector<size_t> lens(n);
	if (l == Layout::Paged) {
		size_t per = total / n / kPage * kPage;
		if (per == 0)
			return out;
		for (uint32_t i = 0; i < n; i++)
			lens[i] = i + 1 < n ? per : total - per * (n - 1);
	} else {
		std::vector<size_t> cuts;
		std::uniform_int_distribution<size_t> d(1, total - 1);
		std::vector<uint8_t> used;
		while (cuts.size() + 1 < n) {
			size_t c = d(rng);
			if (std::find(cuts.begin(), cuts.end(), c) == cuts.end())
				cuts.push_back(c);
		}
		std::sort(cuts.begin(), cuts.end());
		size_t prev = 0;
		for (uint32_t i = 0; i + 1 < n; i++) {
			lens[i] = cuts[i] - prev;
			prev = cuts[i];
		}
		lens[n - 1] = total - prev;
	}
	size_t at = l == Layout::Paged ? base : base + 123;
	for (uint32_t i = 0; i < n; i++) {
		out.emplace_back(at, static_cast<uint32_t>(lens[i]));
		at += lens[i];
		if (l == Layout::Gapped)
			at += 64 + (i * 37) % 200;
		else if (l == Layout::Paged)
			at = base + (at - base + kPage - 1) / kPage * kPage +
			     kPage; // next page + a hole
	}
	if (at > buflen) {
		ADD_FAILURE() << "layout does not fit the buffer";
		out.clear();
	}
	return out;
}

// Pseudo-random bytes, eight at a time (xorshift64): the tests run at -O0 under clang's
// ASan, where a loop per byte over the 8 MiB cases took most of the suite's time.
void fill(uint8_t *p, size_t n, uint32_t seed)
{
	uint64_t x = (seed + 1ull) * 0x9e3779b97f4a7c15ull;
	auto next = [&x] {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		return x;
	};
	size_t i = 0;
	for (; i + 8 <= n; i += 8) {
		const uint64_t v = next();
		std::memcpy(p + i, &v, 8);
	}
	for (const uint64_t v = next(); i < n; i++)
		p[i] = static_cast<uint8_t>(v >> (8 * (i % 8)));
}

// The first index where a and b differ over n bytes, or n: memcmp first (one call per
// piece, not a loop per byte at -O0), the byte only when there is one to report.
size_t first_diff(const uint8_t *a, const uint8_t *b, size_t n)
{
	if (std::memcmp(a, b, n) == 0)
		return n;
	size_t i = 0;
	while (a[i] == b[i])
		i++;
	return i;
}

// One transfer: build the table, init/post/complete/destroy, verify every byte of both
// buffers in the touched span (moved bytes equal, everything else untouched).
void run_case(Env &e, const Config &c, size_t total, uint32_t nents, Layout l, RwDir dir,
              uint32_t sg_offset_kind, uint32_t seed)
{
	SCOPED_TRACE(c.name + " size " + std::to_string(total) + " nents " + std::to_string(nents) +
	             " " + layout_str(l) + (dir == RwDir::Read ? " READ" : " WRITE") +
	             " sg_offset kind " + std::to_string(sg_offset_kind));
	auto ents = make_layout(total, nents, l, e.a.buf.data(), e.a.buf.size(), seed);
	if (ents.empty())
		return;
	uint32_t sg_offset = 0;
	if (sg_offset_kind == 1)
		sg_offset = std::min<uint32_t>(ents[0].second - 1, 5); // inside the first entry
	else if (sg_offset_kind == 2 && nents > 1)
		sg_offset = ents[0].second + std::min<uint32_t>(ents[1].second - 1, 3); // skip one
	const size_t moved = total - sg_offset;
	const size_t lspan = ents.back().first + ents.back().second + 64;
	const size_t roff = 77; // remote start, unaligned
	ASSERT_LE(lspan, e.a.buf.size());
	ASSERT_LE(roff + moved + 64, e.b.buf.size());

	fill(e.a.buf.data(), lspan, seed);
	fill(e.b.buf.data(), roff + moved + 64, seed ^ 0x5a5a5a5a);
	const std::vector<uint8_t> a0(e.a.buf.begin(), e.a.buf.begin() + lspan);
	const std::vector<uint8_t> b0(e.b.buf.begin(), e.b.buf.begin() + roff + moved + 64);

	SgTable t(nents);
	for (auto &[off, len] : ents)
		ASSERT_EQ(t.add(e.map, e.a.buf.data() + off, len), 0);
	ASSERT_EQ(t.length(), total);

	uint32_t left = nents;
	{
		uint64_t skip = sg_offset;
		for (auto &en : ents) {
			if (skip < en.second)
				break;
			skip -= en.second;
			left--;
		}
	}
	RwCtx ctx;
	const auto before = posted(*e.a.qp);
	int nwr = ctx.init(*e.rq, t, sg_offset, e.b.at(roff), e.b.mr->rkey(), dir);
	ASSERT_GT(nwr, 0) << "init " << nwr;
	bool want_mr = dir == RwDir::Read ? left > c.mr_read_above : c.mr_write;
	// A DEVICE_REG_MR_CONTIG device (the verbs provider's windows) needs one MR per
	// contiguous run, split at the page-list length; beyond the context's MR bound rw
	// takes SGEs (legal here: not an iWARP READ).
	const Device &dev = e.a.qp->device();
	if (want_mr && (dev.attr().device_cap_flags & DEVICE_REG_MR_CONTIG) &&
	    !(dev.is_iwarp() && dir == RwDir::Read)) {
		const uint64_t per_mr = rw_fr_page_list_len(dev);
		uint64_t mrs = 0, skip = sg_offset;
		uint64_t run_start = 0, run_end = 0;
		auto close_run = [&] {
			if (run_end > run_start)
				mrs +=
				    (run_end - 1 - run_start / kPage * kPage) / kPage / per_mr + 1;
		};
		for (auto &[off, len] : ents) {
			if (skip >= len) {
				skip -= len;
				continue;
			}
			const uint64_t a = reinterpret_cast<uint64_t>(e.a.buf.data()) + off + skip;
			if (a != run_end) {
				close_run();
				run_start = a;
			}
			run_end = a + (len - skip);
			skip = 0;
		}
		close_run();
		if (mrs > e.rq->ctx_bound().mrs)
			want_mr = false;
	}
	EXPECT_EQ(ctx.type(), want_mr ? RwType::Mr : left > 1 ? RwType::MultiWr : RwType::SingleWr);
	Done d;
	ASSERT_EQ(ctx.post(&d.cqe, nullptr), 0);
	// The count init returned is what went onto the send queue (soft counters only).
	if (before) {
		EXPECT_EQ(*posted(*e.a.qp) - *before, static_cast<uint64_t>(nwr));
	}
	ASSERT_TRUE(process_until(*e.a.scq, [&] { return d.n > 0; }));
	EXPECT_EQ(d.status, WcStatus::Success) << wc_status_str(d.status);
	EXPECT_EQ(d.opcode, dir == RwDir::Read ? WcOpcode::RdmaRead : WcOpcode::RdmaWrite);
	// Exactly one completion: every other WR was unsignaled.
	EXPECT_EQ(drain(*e.a.scq), 0);
	EXPECT_EQ(d.n, 1);
	ctx.destroy();
	EXPECT_EQ(e.rq->mrs().used(), 0);

	// The byte stream the context moved: the table's entries from sg_offset on, as pieces
	// of a's buffer (offset, length) in stream order.
	std::vector<std::pair<size_t, size_t>> pieces;
	{
		uint64_t skip = sg_offset, n = 0;
		for (auto &[off, len] : ents) {
			if (skip >= len) {
				skip -= len;
				continue;
			}
			pieces.emplace_back(off + skip, len - skip);
			n += len - skip;
			skip = 0;
		}
		ASSERT_EQ(n, moved);
	}
	if (dir == RwDir::Write) {
		size_t pos = 0; // stream offset of the piece
		for (auto &[off, len] : pieces) {
			const size_t i =
			    first_diff(e.b.buf.data() + roff + pos, a0.data() + off, len);
			if (i < len) {
				ADD_FAILURE() << "remote byte " << pos + i << " wrong";
				break;
			}
			pos += len;
		}
		EXPECT_EQ(first_diff(b0.data(), e.b.buf.data(), roff), roff);
		const size_t tail = b0.size() - roff - moved;
		EXPECT_EQ(first_diff(b0.data() + roff + moved, e.b.buf.data() + roff + moved, tail),
		          tail);
		EXPECT_EQ(first_diff(a0.data(), e.a.buf.data(), a0.size()), a0.size())
		    << "source changed";
	} else {
		std::vector<uint8_t> expect = a0; // untouched except the moved bytes
		size_t pos = 0;
		for (auto &[off, len] : pieces) {
			std::memcpy(expect.data() + off, b0.data() + roff + pos, len);
			pos += len;
		}
		const size_t i = first_diff(expect.data(), e.a.buf.data(), expect.size());
		EXPECT_EQ(i, expect.size()) << "local byte at offset " << i << " wrong";
		EXPECT_EQ(first_diff(b0.data(), e.b.buf.data(), b0.size()), b0.size())
		    << "source changed";
	}
}

std::vector<Config> configs()
{
	std::vector<Config> v;
	Config c;
	c.name = "IbSge"; // rxe shape: no max_sgl_rd, so SGEs only
	v.push_back(c);
	c.name = "IbForceMr";
	c.force_mr = true;
	c.mr_read_above = 0;
	c.mr_write = true;
	v.push_back(c);
	c = Config{};
	c.name = "IbSglRd4"; // mlx5 shape with a small max_sgl_rd: READs of > 4 entries use MRs
	c.limits.max_sgl_rd = 4;
	c.mr_read_above = 4;
	v.push_back(c);
	c = Config{};
	c.name = "Iwarp"; // READs always through an MR (REMOTE_WRITE sink), WRITEs by SGEs
	c.profile = soft::Profile::Iwarp;
	c.mr_read_above = 0;
	v.push_back(c);
	c.name = "IwarpForceMr";
	c.force_mr = true;
	c.mr_write = true;
	v.push_back(c);
	c = Config{};
	c.name = "SmallSge"; // two SGEs per WRITE, one per READ: many MULTI_WR WRs
	c.limits.max_sge = 2;
	c.limits.max_sge_rd = 1;
	v.push_back(c);
	c = Config{};
	c.name = "ShortPagesForceMr"; // four pages per MR: many MRs per context
	c.limits.max_fast_reg_page_list_len = 4;
	c.force_mr = true;
	c.mr_read_above = 0;
	c.mr_write = true;
	c.max_pages = 512;
	c.max_size = 1 * MiB + 3;
	v.push_back(c);
	c = Config{};
	c.name = "IwarpShortPages";
	c.profile = soft::Profile::Iwarp;
	c.limits.max_fast_reg_page_list_len = 4;
	c.mr_read_above = 0;
	c.max_pages = 512;
	c.max_size = 1 * MiB + 3;
	v.push_back(c);
	return v;
}

class RwMatrix : public ::testing::TestWithParam<Config>
{
};

TEST_P(RwMatrix, DataIntegrity)
{
	const Config &c = GetParam();
	uint32_t send_sge = 30;
	if (ulp::test::on_test_device() && c.sge_limit_only())
		send_sge = c.limits.max_sge; // the QP asks for the shape's SGE count
	else if (c.needs_soft())
		ULP_SKIP_UNLESS_SOFT("soft::Profile / soft::Limits shape " + c.name);
	Env e;
	ASSERT_TRUE(e.init(c, 11 * MiB, 9 * MiB, 2, 16, send_sge));
	const size_t small[] = {1, 4095, 4097, 64 * KiB + 13};
	const uint32_t nents[] = {1, 3, 16, 256};
	const Layout layouts[] = {Layout::Contig, Layout::Gapped, Layout::Paged};
	uint32_t seed = 1;
	for (RwDir dir : {RwDir::Write, RwDir::Read}) {
		for (size_t sz : small)
			for (uint32_t n : nents)
				for (Layout l : layouts)
					for (uint32_t k = 0; k < 3; k++) {
						if (l == Layout::Gapped && n > 16)
							continue; // one MR per entry: beyond
							          // max_pages
						run_case(e, c, sz, n, l, dir, k, seed++);
						if (HasFatalFailure())
							return;
					}
		// Large transfers on fewer combinations.
		for (uint32_t n : nents)
			for (Layout l : layouts) {
				if (l == Layout::Gapped && n > 16)
					continue;
				run_case(e, c, std::min<size_t>(1 * MiB + 3, c.max_size), n, l, dir,
				         0, seed++);
				if (HasFatalFailure())
					return;
			}
		if (c.max_size >= 8 * MiB)
			for (uint32_t n : {1u, 256u}) {
				run_case(e, c, 8 * MiB, n, Layout::Paged, dir, 0, seed++);
				run_case(e, c, 8 * MiB, n, Layout::Contig, dir, 1, seed++);
				if (HasFatalFailure())
					return;
			}
	}
}

INSTANTIATE_TEST_SUITE_P(Profiles, RwMatrix, ::testing::ValuesIn(configs()),
                         ::testing::PrintToStringParamName());

// The same on engine threads (asynchronous execution, as on a NIC), a few shapes.
TEST(Rw, EngineMode)
{
	ULP_SKIP_UNLESS_SOFT("soft execution modes (a verbs device is always asynchronous: "
	                     "RwMatrix runs on it that way)");
	for (Config c : {configs()[0], configs()[3]}) {
		c.exec = soft::Exec::Engine;
		Env e;
		ASSERT_TRUE(e.init(c, 3 * MiB, 3 * MiB));
		uint32_t seed = 1000;
		for (RwDir dir : {RwDir::Write, RwDir::Read})
			for (uint32_t n : {1u, 16u})
				for (Layout l : {Layout::Contig, Layout::Paged})
					run_case(e, c, 1 * MiB + 3, n, l, dir, 1, seed++);
	}
}

// A page-aligned table of n whole pages starting at page p of a's buffer.
SgTable pages_table(Env &e, uint32_t p, uint32_t n)
{
	SgTable t(n);
	uint8_t *base =
	    e.a.buf.data() + (kPage - reinterpret_cast<uintptr_t>(e.a.buf.data()) % kPage) % kPage;
	for (uint32_t i = 0; i < n; i++)
		EXPECT_EQ(t.add(e.map, base + (p + i) * kPage, kPage), 0);
	return t;
}

// The SEND chained after a context's data WRs (chain_wr) completes at the peer only after
// the data is there; the data WRs stay unsignaled.
void chain_wr(bool force)
{
	Config c;
	c.force_mr = force;
	Env e;
	ASSERT_TRUE(e.init(c, 1 * MiB, 1 * MiB));
	SgTable t = pages_table(e, 0, 8);
	fill(e.a.buf.data(), e.a.buf.size(), 7);
	RwCtx ctx;
	int nwr = ctx.init(*e.rq, t, 0, e.b.at(0), e.b.mr->rkey(), RwDir::Write);
	ASSERT_GT(nwr, 0);
	// The peer's receive: when it completes, the WRITE's bytes must be there.
	Done rd;
	Sge rs = e.b.sge(512 * KiB, 64);
	ASSERT_EQ(soft_test::post_recv(*e.b.qp, &rd.cqe, rs), 0);
	Done data, sd;
	Sge ss = e.a.sge(900 * KiB, 16);
	SendWr send;
	send.wr_cqe = &sd.cqe;
	send.sg_list = &ss;
	send.num_sge = 1;
	send.opcode = WrOpcode::Send;
	send.send_flags = SEND_SIGNALED;
	const auto before = posted(*e.a.qp);
	ASSERT_EQ(ctx.post(&data.cqe, &send), 0);
	if (before) { // soft counters only
		EXPECT_EQ(*posted(*e.a.qp) - *before, uint64_t(nwr) + 1);
	}
	ASSERT_TRUE(process_until(*e.b.rcq, [&] { return rd.n > 0; }));
	EXPECT_EQ(rd.status, WcStatus::Success);
	uint8_t *src =
	    e.a.buf.data() + (kPage - reinterpret_cast<uintptr_t>(e.a.buf.data()) % kPage) % kPage;
	EXPECT_EQ(std::memcmp(e.b.buf.data(), src, 8 * kPage), 0);
	ASSERT_TRUE(process_until(*e.a.scq, [&] { return sd.n > 0; }));
	EXPECT_EQ(sd.status, WcStatus::Success);
	EXPECT_EQ(sd.opcode, WcOpcode::Send);
	EXPECT_EQ(drain(*e.a.scq), 0); // the data WRs were all unsignaled
	EXPECT_EQ(data.n, 0);          // the rw cqe is not used with a chain_wr
	ctx.destroy();
}

TEST(Rw, ChainWrSendFollowsData)
{
	chain_wr(false);
}

TEST(Rw, ChainWrSendFollowsDataForceMr)
{
	chain_wr(true);
}

// Keys rotate when the context is posted, not at init; the peer cannot use the old key.
TEST(Rw, KeyRotationAtPost)
{
	ULP_SKIP_UNLESS_SOFT("soft::Profile::Iwarp (READ sinks registered REMOTE_WRITE)");
	Config c;
	c.profile = soft::Profile::Iwarp; // READ sinks are registered REMOTE_WRITE
	Env e;
	ASSERT_TRUE(e.init(c, 1 * MiB, 1 * MiB, 1));
	SgTable t = pages_table(e, 0, 4);

	RwCtx ctx;
	// An initialised context that is never posted burns no key and leaves nothing to
	// invalidate.
	ASSERT_EQ(ctx.init(*e.rq, t, 0, e.b.at(0), e.b.mr->rkey(), RwDir::Read), 2);
	Mr *mr = ctx.mr(0);
	ASSERT_NE(mr, nullptr);
	const uint32_t k0 = mr->rkey();
	ctx.destroy();
	ASSERT_EQ(ctx.init(*e.rq, t, 0, e.b.at(0), e.b.mr->rkey(), RwDir::Read), 2);
	ASSERT_EQ(ctx.mr(0), mr); // LIFO pool
	EXPECT_EQ(mr->rkey(), k0);

	Done d1;
	ASSERT_EQ(ctx.post(&d1.cqe, nullptr), 0);
	const uint32_t k1 = mr->rkey();
	EXPECT_NE(k1, k0);
	EXPECT_EQ(key_index(k1), key_index(k0));
	ASSERT_TRUE(process_until(*e.a.scq, [&] { return d1.n > 0; }));
	EXPECT_EQ(d1.status, WcStatus::Success);
	ctx.destroy();

	// Reuse: LOCAL_INV of k1 + REG_MR + READ.
	ASSERT_EQ(ctx.init(*e.rq, t, 0, e.b.at(0), e.b.mr->rkey(), RwDir::Read), 3);
	ASSERT_EQ(ctx.mr(0), mr);
	EXPECT_EQ(mr->rkey(), k1); // still k1 until posted
	Done d2;
	ASSERT_EQ(ctx.post(&d2.cqe, nullptr), 0);
	const uint32_t k2 = mr->rkey();
	EXPECT_NE(k2, k1);
	ASSERT_TRUE(process_until(*e.a.scq, [&] { return d2.n > 0; }));
	EXPECT_EQ(d2.status, WcStatus::Success);

	// The peer writes into the registered sink: the current key works, the old fails.
	Done w2, w1;
	ASSERT_EQ(soft_test::post_rdma(*e.b.qp, &w2.cqe, e.b.sge(0, 64), WrOpcode::RdmaWrite,
	                               mr->iova(), k2),
	          0);
	ASSERT_TRUE(process_until(*e.b.scq, [&] { return w2.n > 0; }));
	EXPECT_EQ(w2.status, WcStatus::Success);
	ASSERT_EQ(soft_test::post_rdma(*e.b.qp, &w1.cqe, e.b.sge(0, 64), WrOpcode::RdmaWrite,
	                               mr->iova(), k1),
	          0);
	ASSERT_TRUE(process_until(*e.b.scq, [&] { return w1.n > 0; }));
	EXPECT_EQ(w1.status, WcStatus::RemAccessErr) << wc_status_str(w1.status);
	ctx.destroy();
	drain(*e.a.scq);
}

// Post max_rdma_ctxs contexts of the largest size while the send queue cannot drain (a
// SEND stuck in RNR retry at its head): the queue holds them all and nothing more. The
// kernel's reservation (1, or 1 + 2 with MRs, per context) overflows on the same load.
void sq_accounting(const Config &c, uint32_t max_send_sge, uint32_t ctx_pages, bool kernel_sizing)
{
	SCOPED_TRACE(c.name + (kernel_sizing ? " kernel sizing" : " rw sizing"));
	constexpr uint32_t kCtxs = 8;
	Env e;
	ASSERT_TRUE(e.init(c, 4 * MiB, 4 * MiB, kCtxs, 1, max_send_sge));
	if (kernel_sizing) {
		// Replace the QP with one sized like rdma_rw_init_qp does, keep rw's view.
		e.rq.reset();
		QpInitAttr qa = e.a.qp_attr();
		qa.cap.max_send_sge = max_send_sge;
		qa.cap.max_recv_sge = std::min(qa.cap.max_recv_sge, max_send_sge);
		qa.cap.max_rdma_ctxs = kCtxs;
		qa.cap.max_send_wr = 1 + kCtxs * (rw_can_use_mr(*e.da, c.force_mr) ? 3 : 1);
		e.a.own_qp = e.a.pd->create_qp(qa);
		ASSERT_TRUE(e.a.own_qp);
		e.a.qp = e.a.own_qp.get();
		RwQpOptions o;
		o.max_pages = c.max_pages;
		o.force_mr = c.force_mr;
		int err = 0;
		e.rq = RwQp::attach(*e.a.qp, qa, o, &err);
		ASSERT_TRUE(e.rq) << err;
		ASSERT_TRUE(e.create_peer_qp());
		ASSERT_EQ(soft_test::connect_pair(e.a, e.b), 0);
	}
	const uint32_t sq = e.a.qp->cap().max_send_wr;
	std::vector<RwCtx> ctxs(kCtxs);
	std::vector<SgTable> tables;
	for (uint32_t i = 0; i < kCtxs; i++)
		tables.push_back(pages_table(e, i * ctx_pages, ctx_pages));

	// Round 1 (queue draining normally) marks every MR as needing invalidation, so
	// that round 2 pays LOCAL_INV + REG_MR + data for each: the true worst case. All
	// contexts are held at once so that every MR of the pool is used. (The kernel-sized
	// queue could not even take round 1; it shows its overflow with fresh MRs.)
	if (!kernel_sizing) {
		std::vector<Done> warm(kCtxs);
		for (uint32_t i = 0; i < kCtxs; i++)
			ASSERT_GT(ctxs[i].init(*e.rq, tables[i], 0, e.b.at(0), e.b.mr->rkey(),
			                       RwDir::Write),
			          0);
		for (uint32_t i = 0; i < kCtxs; i++) {
			ASSERT_EQ(ctxs[i].post(&warm[i].cqe, nullptr), 0);
			ASSERT_TRUE(process_until(*e.a.scq, [&] { return warm[i].n > 0; }));
		}
		for (auto &c : ctxs)
			c.destroy();
	}

	// Block the queue: a SEND the peer has no receive for, retried forever (rnr 7).
	Done blocker;
	ASSERT_EQ(soft_test::post_send(*e.a.qp, &blocker.cqe, e.a.sge(0, 8)), 0);
	uint32_t used = 1;
	int rc = 0;
	std::vector<Done> dones(kCtxs);
	uint32_t posted = 0;
	for (uint32_t i = 0; i < kCtxs && rc == 0; i++) {
		int n = ctxs[i].init(*e.rq, tables[i], 0, e.b.at(0), e.b.mr->rkey(), RwDir::Write);
		ASSERT_GT(n, 0);
		EXPECT_LE(static_cast<uint32_t>(n), e.rq->ctx_bound().wrs);
		rc = ctxs[i].post(&dones[i].cqe, nullptr);
		if (rc == 0) {
			used += n;
			posted++;
		}
	}
	if (kernel_sizing) {
		EXPECT_EQ(rc, -ENOMEM) << "the kernel's reservation was expected to overflow";
		EXPECT_LT(posted, kCtxs);
	} else {
		EXPECT_EQ(rc, 0) << "post " << rc << " after " << posted << " contexts, " << used
		                 << " of " << sq << " WRs";
		EXPECT_EQ(posted, kCtxs);
		EXPECT_LE(used, sq);
		// The reservation is the true worst case: these contexts filled it.
		EXPECT_EQ(used, 1 + kCtxs * e.rq->ctx_bound().wrs);
	}
	// Unblock and let everything complete.
	Done rd;
	ASSERT_EQ(soft_test::post_recv(*e.b.qp, &rd.cqe, e.b.sge(0, 64)), 0);
	ASSERT_TRUE(process_until(*e.a.scq, [&] {
		if (blocker.n == 0)
			return false;
		for (uint32_t i = 0; i < posted; i++)
			if (dones[i].n == 0)
				return false;
		return true;
	}));
	EXPECT_EQ(blocker.status, WcStatus::Success);
	// A signaled marker after everything, so that no WR of a partly posted context is
	// still pending when its MRs go back to the pool.
	Done marker;
	ASSERT_EQ(soft_test::post_rdma(*e.a.qp, &marker.cqe, Sge{}, WrOpcode::RdmaWrite, 0, 0), 0);
	ASSERT_TRUE(process_until(*e.a.scq, [&] { return marker.n > 0; }));
	for (auto &c : ctxs)
		c.destroy();
	EXPECT_EQ(e.rq->mrs().used(), 0);
}

TEST(Rw, SendQueueAccountingMr)
{
	ULP_SKIP_UNLESS_SOFT("soft::Limits (8 pages per fast-reg MR)");
	Config c;
	c.force_mr = true;
	c.limits.max_fast_reg_page_list_len = 8;
	c.max_pages = 64; // 8 MRs per context: 24 WRs, where the kernel reserves 3
	sq_accounting(c, 30, 64, false);
	sq_accounting(c, 30, 64, true);
}

TEST(Rw, SendQueueAccountingSge)
{
	Config c;
	// Soft: a device of 2 SGEs. A real device (ULP_TEST_DEVICE) keeps its own limits:
	// the QP asks for 2 send SGEs, which is what rw sizes its WRs by.
	if (!ulp::test::on_test_device())
		c.limits.max_sge = 2;
	c.max_pages = 64; // 32 WRITE WRs of 2 SGEs per context, where the kernel reserves 1
	sq_accounting(c, 2, 64, false);
	sq_accounting(c, 2, 64, true);
}

TEST(Rw, InitQpSizing)
{
	ULP_SKIP_UNLESS_SOFT("soft::Profile::Iwarp");
	Config c;
	c.profile = soft::Profile::Iwarp;
	Env e;
	ASSERT_TRUE(e.init(c, 64 * KiB, 64 * KiB, 4, 10, 4));
	// iWARP: READs by MR (4096 pages / 256 = 16 MRs, 48 WRs), WRITEs by 4-SGE WRs
	// (4096 / 4 = 1024 WRs): the worst is the WRITE.
	EXPECT_EQ(e.rq->ctx_bound().mrs, 16u);
	EXPECT_EQ(e.rq->ctx_bound().wrs, 1024u);
	EXPECT_GE(e.rq->qp().cap().max_send_wr, 10u + 4 * 1024);
	EXPECT_EQ(e.rq->mrs().size(), 4 * 16);
	EXPECT_EQ(e.rq->max_read_sge(), 1u);
	EXPECT_EQ(e.rq->max_write_sge(), 4u);

	// More than max_qp_wr: refused rather than clamped.
	QpInitAttr qa = e.a.qp_attr();
	qa.cap.max_send_sge = 1;
	qa.cap.max_rdma_ctxs = 64;
	RwQpOptions o; // 4096 pages: 4096 WRs per context
	EXPECT_EQ(rw_init_qp(*e.da, &qa, o), -EINVAL);
	int err = 0;
	EXPECT_EQ(RwQp::create(*e.a.pd, qa, o, &err), nullptr);
	EXPECT_EQ(err, -EINVAL);
	qa.cap.max_send_sge = 0;
	qa.cap.max_rdma_ctxs = 1;
	EXPECT_EQ(rw_init_qp(*e.da, &qa, o), -EINVAL);
}

TEST(Rw, InitQpSizingForContiguousBuffers)
{
	// A context over one contiguous block of 4096 pages: one SGE WR, where the page bound
	// alone reserves 4096 / 30 (the iSER target's 16 MiB buffers overflowed max_qp_wr).
	ULP_SKIP_UNLESS_SOFT("the soft provider's limits");
	Config c;
	Env e;
	ASSERT_TRUE(e.init(c, 64 * KiB, 64 * KiB));
	RwQpOptions o;
	o.max_pages = 4096;
	RwCtxBound b;
	ASSERT_EQ(rw_ctx_bound(*e.da, 30, o, &b), 0);
	EXPECT_EQ(b.wrs, 137u); // DIV_ROUND_UP(4096, 30)
	o.max_entries = 1;
	ASSERT_EQ(rw_ctx_bound(*e.da, 30, o, &b), 0);
	EXPECT_EQ(b.wrs, 1u);
	EXPECT_EQ(b.mrs, 0u);
	o.force_mr = true; // the MR path is still sized by pages
	ASSERT_EQ(rw_ctx_bound(*e.da, 30, o, &b), 0);
	EXPECT_EQ(b.mrs, 16u); // 4096 / 256
	EXPECT_EQ(b.wrs, 48u);

	// A QP built with that bound takes one-entry contexts and refuses a scattered one
	// that needs more WRs than reserved.
	QpInitAttr qa = e.a.qp_attr();
	qa.cap.max_send_sge = 1;
	qa.cap.max_rdma_ctxs = 4;
	RwQpOptions one;
	one.max_pages = 4096;
	one.max_entries = 1;
	int err = 0;
	auto rq = RwQp::create(*e.a.pd, qa, one, &err);
	ASSERT_TRUE(rq) << err;
	EXPECT_EQ(rq->ctx_bound().wrs, 1u);
	SgTable two(2);
	two.add(e.a.at(0), 4096, e.a.mr->lkey());
	two.add(e.a.at(8192), 4096, e.a.mr->lkey());
	RwCtx ctx;
	EXPECT_EQ(ctx.init(*rq, two, 0, e.b.at(0), e.b.mr->rkey(), RwDir::Write), -E2BIG);
	SgTable whole(1);
	whole.add(e.a.at(0), 16384, e.a.mr->lkey());
	EXPECT_EQ(ctx.init(*rq, whole, 0, e.b.at(0), e.b.mr->rkey(), RwDir::Write), 1);
	ctx.destroy();
}

TEST(Rw, MrFactor)
{
	ULP_SKIP_UNLESS_SOFT("the soft provider's limits, soft::Limits and more soft devices");
	Config c;
	Env e;
	ASSERT_TRUE(e.init(c, 64 * KiB, 64 * KiB));
	// No MRs on this device (no max_sgl_rd): READ WRs of max_sge_rd (30) SGEs.
	EXPECT_EQ(rw_mr_factor(*e.da, 256), 9u);
	EXPECT_EQ(rw_mr_factor(*e.da, 30), 1u);
	// force_mr: pages per MR, min(512, 256).
	EXPECT_EQ(rw_mr_factor(*e.da, 256, true), 1u);
	EXPECT_EQ(rw_mr_factor(*e.da, 257, true), 2u);
	EXPECT_EQ(rw_fr_page_list_len(*e.da), 256u);
	EXPECT_FALSE(rw_can_use_mr(*e.da, false));
	EXPECT_TRUE(rw_can_use_mr(*e.da, true));
	EXPECT_FALSE(rw_io_needs_mr(*e.da, RwDir::Read, 1000, false));

	soft::DeviceConfig dc;
	dc.profile = soft::Profile::Iwarp;
	dc.ip = "127.0.0.3";
	dc.limits.max_fast_reg_page_list_len = 4;
	DevPtr iw(soft::create_device(dc));
	ASSERT_TRUE(iw);
	EXPECT_EQ(rw_mr_factor(*iw, 256), 64u);
	EXPECT_TRUE(rw_io_needs_mr(*iw, RwDir::Read, 1, false));
	EXPECT_FALSE(rw_io_needs_mr(*iw, RwDir::Write, 1000, false));
	dc.profile = soft::Profile::Ib;
	dc.ip = "127.0.0.4";
	dc.limits.max_sgl_rd = 8;
	DevPtr ml(soft::create_device(dc));
	ASSERT_TRUE(ml);
	EXPECT_TRUE(rw_can_use_mr(*ml, false));
	EXPECT_FALSE(rw_io_needs_mr(*ml, RwDir::Read, 8, false));
	EXPECT_TRUE(rw_io_needs_mr(*ml, RwDir::Read, 9, false));
	EXPECT_FALSE(rw_io_needs_mr(*ml, RwDir::Write, 9, false));
}

// An empty pool gives -EAGAIN with nothing held; destroying a context lets a retry work.
TEST(Rw, PoolExhaustionAndRecovery)
{
	Config c;
	c.force_mr = true;
	c.max_pages = 512; // 2 MRs per context
	Env e;
	ASSERT_TRUE(e.init(c, 4 * MiB, 4 * MiB, 1));
	ASSERT_EQ(e.rq->mrs().size(), 2);
	SgTable small = pages_table(e, 0, 4);   // one MR
	SgTable big = pages_table(e, 100, 300); // two MRs
	RwCtx c1, c2, c3;
	ASSERT_EQ(c1.init(*e.rq, small, 0, e.b.at(0), e.b.mr->rkey(), RwDir::Write), 2);
	EXPECT_EQ(e.rq->mrs().used(), 1);
	// Needs two, gets one, gives it back.
	EXPECT_EQ(c2.init(*e.rq, big, 0, e.b.at(0), e.b.mr->rkey(), RwDir::Write), -EAGAIN);
	EXPECT_EQ(c2.type(), RwType::None);
	EXPECT_EQ(e.rq->mrs().used(), 1);
	ASSERT_EQ(c3.init(*e.rq, small, 0, e.b.at(0), e.b.mr->rkey(), RwDir::Read), 2);
	EXPECT_EQ(c2.init(*e.rq, small, 0, e.b.at(0), e.b.mr->rkey(), RwDir::Write), -EAGAIN);
	EXPECT_EQ(e.rq->mrs().used(), 2);
	Done d1;
	ASSERT_EQ(c1.post(&d1.cqe, nullptr), 0);
	ASSERT_TRUE(process_until(*e.a.scq, [&] { return d1.n > 0; }));
	EXPECT_EQ(d1.status, WcStatus::Success);
	c1.destroy();
	c3.destroy();
	EXPECT_EQ(e.rq->mrs().used(), 0);
	ASSERT_EQ(c2.init(*e.rq, big, 0, e.b.at(0), e.b.mr->rkey(), RwDir::Write), 5)
	    << "one fresh MR (REG + WRITE) and the one c1 posted (LOCAL_INV + REG + WRITE)";
	Done d2;
	ASSERT_EQ(c2.post(&d2.cqe, nullptr), 0);
	ASSERT_TRUE(process_until(*e.a.scq, [&] { return d2.n > 0; }));
	EXPECT_EQ(d2.status, WcStatus::Success);
	c2.destroy();
}

TEST(Rw, BadInput)
{
	Config c;
	c.max_pages = 8;
	Env e;
	ASSERT_TRUE(e.init(c, 1 * MiB, 1 * MiB, 2, 16, 2));
	RwCtx ctx;
	SgTable empty;
	EXPECT_EQ(ctx.init(*e.rq, empty, 0, e.b.at(0), e.b.mr->rkey(), RwDir::Write), -EINVAL);
	EXPECT_EQ(ctx.wrs(nullptr, nullptr), nullptr);
	Done d;
	EXPECT_EQ(ctx.post(&d.cqe, nullptr), -EINVAL);

	// Table entries: zero length, unregistered memory, straddling the region's end.
	SgTable t;
	EXPECT_EQ(t.add(e.map, e.a.buf.data(), 0), -EINVAL);
	std::vector<uint8_t> foreign(4096);
	EXPECT_EQ(t.add(e.map, foreign.data(), 100), -EFAULT);
	EXPECT_EQ(t.add(e.map, e.a.buf.data() + e.a.buf.size() - 10, 20), -EFAULT);
	EXPECT_EQ(t.add(0x1000, 0, 1), -EINVAL);
	EXPECT_EQ(t.add(UINT64_MAX - 5, 10, 1), -EINVAL);
	EXPECT_TRUE(t.empty());

	// sg_offset at or past the end.
	ASSERT_EQ(t.add(e.map, e.a.buf.data(), 100), 0);
	ASSERT_EQ(t.add(e.map, e.a.buf.data() + 200, 100), 0);
	EXPECT_EQ(ctx.init(*e.rq, t, 200, e.b.at(0), e.b.mr->rkey(), RwDir::Write), -EINVAL);
	EXPECT_EQ(ctx.init(*e.rq, t, 199, e.b.at(0), e.b.mr->rkey(), RwDir::Write), 1);
	// In use: a second init is refused, the first stays intact.
	EXPECT_EQ(ctx.init(*e.rq, t, 0, e.b.at(0), e.b.mr->rkey(), RwDir::Write), -EINVAL);
	EXPECT_EQ(ctx.type(), RwType::SingleWr);
	ctx.destroy();

	// Too many entries for the per-context bound (8 pages, 2 SGEs per WR: 4 WRs).
	SgTable many;
	for (int i = 0; i < 9; i++)
		ASSERT_EQ(many.add(e.map, e.a.buf.data() + i * 300, 100), 0);
	EXPECT_EQ(ctx.init(*e.rq, many, 0, e.b.at(0), e.b.mr->rkey(), RwDir::Write), -E2BIG);
	EXPECT_EQ(ctx.type(), RwType::None);
	SgTable eight;
	for (int i = 0; i < 8; i++)
		ASSERT_EQ(eight.add(e.map, e.a.buf.data() + i * 300, 100), 0);
	EXPECT_EQ(ctx.init(*e.rq, eight, 0, e.b.at(0), e.b.mr->rkey(), RwDir::Write), 4);
	ctx.destroy();

	// A forged lkey on the SGE path is the device's to catch: a local protection error
	// completion, never a crash. rxe (Linux 6.1) reports LOC_QP_OP_ERR: its requester
	// maps only -EFAULT (an SGE beyond its MR) to LOC_PROT_ERR, and a failed lkey lookup
	// is -EINVAL (as in the conformance suite's LocalBadLkey). Still an error, no crash.
	SgTable forged;
	ASSERT_EQ(
	    forged.add(reinterpret_cast<uint64_t>(e.a.buf.data()), 64, e.a.mr->lkey() ^ 0x100), 0);
	ASSERT_EQ(ctx.init(*e.rq, forged, 0, e.b.at(0), e.b.mr->rkey(), RwDir::Write), 1);
	ASSERT_EQ(ctx.post(&d.cqe, nullptr), 0);
	ASSERT_TRUE(process_until(*e.a.scq, [&] { return d.n > 0; }));
	const WcStatus want =
	    ulp::test::is_rxe(*e.da) ? WcStatus::LocQpOpErr : WcStatus::LocProtErr;
	EXPECT_EQ(d.status, want) << wc_status_str(d.status);
	ctx.destroy();
}

TEST(Rw, TooManyMrsForBound)
{
	ULP_SKIP_UNLESS_SOFT("soft::Limits (4 pages per fast-reg MR)");
	Config c;
	c.force_mr = true;
	c.limits.max_fast_reg_page_list_len = 4;
	c.max_pages = 8; // 2 MRs per context
	Env e;
	ASSERT_TRUE(e.init(c, 1 * MiB, 1 * MiB, 2));
	// Three gapped entries: one MR each, one more than the bound.
	SgTable t;
	for (int i = 0; i < 3; i++)
		ASSERT_EQ(t.add(e.map, e.a.buf.data() + i * 300, 100), 0);
	RwCtx ctx;
	EXPECT_EQ(ctx.init(*e.rq, t, 0, e.b.at(0), e.b.mr->rkey(), RwDir::Write), -E2BIG);
	EXPECT_EQ(e.rq->mrs().used(), 0);
	EXPECT_EQ(ctx.init(*e.rq, t, 150, e.b.at(0), e.b.mr->rkey(), RwDir::Write), 4);
	EXPECT_EQ(e.rq->mrs().used(), 2);
	ctx.destroy();
	EXPECT_EQ(e.rq->mrs().used(), 0);
}

} // namespace
