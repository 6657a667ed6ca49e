// SPDX-License-Identifier: MIT
// tests/soft/ring_wire_test.cc - the ring wire's payload paths, between two devices of
// this process (Wire::Shm: the same rings, memfds and doorbells as across processes).
//
// A payload rides in the request slot (up to 80 bytes), stays in a region the peer has
// mapped (memory from dma_alloc), or goes through the requester's staging ring (heap
// memory, SGE lists in several pieces), and a message larger than the staging ring through
// a staging region sized to it. Every size class, in both kinds of memory, must move the
// right bytes for WRITE, READ and SEND.
#include "core/dma_mem.h"
#include "soft_test_util.h"

#include <cstring>
#include <thread>

using namespace ulp;
using namespace soft_test;

namespace
{

constexpr size_t kBuf = 16u << 20; // per side: messages up to 4 MiB, at two offsets

DevPtr wire_dev(const std::string &ip, soft::Wire wire = soft::Wire::Shm)
{
	soft::DeviceConfig c;
	c.ip = ip;
	c.wire = wire;
	return DevPtr(soft::create_device(c));
}

// A Side whose buffer is dma_alloc memory (a region the peer maps) instead of heap.
struct DmaSide : Side {
	std::unique_ptr<DmaRegion> region;
	uint8_t *mem = nullptr;
	void init_dma(Device &d)
	{
		init(d, 4096);
		region = dma_alloc(kBuf, false);
		ASSERT_TRUE(region);
		mem = static_cast<uint8_t *>(region->addr());
		mr = pd->reg_mr(mem, kBuf,
		                ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ);
		ASSERT_TRUE(mr);
	}
	uint8_t *p(size_t off) { return region ? mem + off : buf.data() + off; }
	uint64_t va(size_t off) { return reinterpret_cast<uint64_t>(p(off)); }
	Sge sg(size_t off, uint32_t len) { return Sge{va(off), len, mr->lkey()}; }
};

void fill(uint8_t *p, size_t n, uint32_t seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = static_cast<uint8_t>((i * 131 + seed * 7) >> 3);
}

class SoftRingWire : public ::testing::TestWithParam<bool> // true: dma_alloc memory
{
protected:
	void SetUp() override
	{
		da = wire_dev("127.0.0.61");
		db = wire_dev("127.0.0.62");
		ASSERT_TRUE(da && db);
		if (GetParam()) {
			ASSERT_NO_FATAL_FAILURE(a.init_dma(*da));
			ASSERT_NO_FATAL_FAILURE(b.init_dma(*db));
		} else {
			ASSERT_NO_FATAL_FAILURE(a.init(*da, kBuf));
			ASSERT_NO_FATAL_FAILURE(b.init(*db, kBuf));
		}
		cm.active = &a;
		cm.passive = &b;
		ASSERT_TRUE(cm.connect("127.0.0.62:0", "127.0.0.61"));
		ASSERT_STREQ(soft::qp_wire(*a.qp), "shm");
		ASSERT_STREQ(soft::qp_wire(*b.qp), "shm");
	}
	// One signaled WR on a, its completion checked.
	void run(WrOpcode op, const Sge *sges, int nsge, uint64_t raddr = 0)
	{
		RdmaWr wr;
		Cqe cqe;
		wr.wr_cqe = &cqe;
		wr.opcode = op;
		wr.sg_list = const_cast<Sge *>(sges);
		wr.num_sge = nsge;
		wr.send_flags = SEND_SIGNALED;
		wr.remote_addr = raddr;
		wr.rkey = b.mr->rkey();
		const SendWr *bad = nullptr;
		ASSERT_EQ(a.qp->post_send(&wr, &bad), 0);
		auto wc = poll_n(*a.scq, 1);
		ASSERT_EQ(wc.size(), 1u);
		EXPECT_EQ(wc[0].status, WcStatus::Success) << wr_opcode_str(op);
	}

	// Destroyed in reverse: the connection, then the sides, then the devices.
	DevPtr da, db;
	DmaSide a, b;
	CmPair cm;
};

TEST_P(SoftRingWire, EverySizeMovesTheRightBytes)
{
	// Inline, staged, larger than the staging ring (new big staging regions, reused
	// from their start when idle), and smaller again.
	const uint32_t sizes[] = {
	    1,   80, 81, 4096, 65536, 1u << 20, (1u << 20) + 1, 3u << 20, 2u << 20, (7u << 20) / 2,
	    4095};
	const size_t hi = kBuf / 2;
	uint32_t seed = 1;
	for (uint32_t len : sizes) {
		SCOPED_TRACE(len);
		// WRITE a -> b
		fill(a.p(0), len, seed);
		Sge s = a.sg(0, len);
		ASSERT_NO_FATAL_FAILURE(run(WrOpcode::RdmaWrite, &s, 1, b.va(hi)));
		ASSERT_EQ(0, std::memcmp(b.p(hi), a.p(0), len));
		// READ b -> a, at another offset
		std::memset(a.p(hi), 0, len);
		s = a.sg(hi, len);
		ASSERT_NO_FATAL_FAILURE(run(WrOpcode::RdmaRead, &s, 1, b.va(hi)));
		ASSERT_EQ(0, std::memcmp(a.p(hi), a.p(0), len));
		// SEND a -> b's receive
		Sge r = b.sg(0, len);
		Cqe rc;
		ASSERT_EQ(post_recv(*b.qp, &rc, r), 0);
		fill(a.p(0), len, seed + 1);
		s = a.sg(0, len);
		ASSERT_NO_FATAL_FAILURE(run(WrOpcode::Send, &s, 1));
		auto wc = poll_n(*b.rcq, 1);
		ASSERT_EQ(wc.size(), 1u);
		EXPECT_EQ(wc[0].status, WcStatus::Success);
		EXPECT_EQ(wc[0].byte_len, len);
		ASSERT_EQ(0, std::memcmp(b.p(0), a.p(0), len));
		seed += 2;
	}
}

// SGE lists in pieces: never one region chunk, so they are staged even in dma memory.
TEST_P(SoftRingWire, ScatteredSgeListsAreStaged)
{
	fill(a.p(0), 3 * 65536, 9);
	Sge s[3] = {a.sg(0, 1000), a.sg(65536, 30000), a.sg(2 * 65536, 5)};
	const size_t hi = kBuf / 2;
	ASSERT_NO_FATAL_FAILURE(run(WrOpcode::RdmaWrite, s, 3, b.va(hi)));
	EXPECT_EQ(0, std::memcmp(b.p(hi), a.p(0), 1000));
	EXPECT_EQ(0, std::memcmp(b.p(hi + 1000), a.p(65536), 30000));
	EXPECT_EQ(0, std::memcmp(b.p(hi + 31000), a.p(2 * 65536), 5));
	// And back into pieces elsewhere.
	Sge d[3] = {a.sg(hi, 5), a.sg(hi + 65536, 1000), a.sg(hi + 2 * 65536, 30000)};
	ASSERT_NO_FATAL_FAILURE(run(WrOpcode::RdmaRead, d, 3, b.va(hi)));
	EXPECT_EQ(0, std::memcmp(a.p(hi), b.p(hi), 5));
	EXPECT_EQ(0, std::memcmp(a.p(hi + 65536), b.p(hi + 5), 1000));
	EXPECT_EQ(0, std::memcmp(a.p(hi + 2 * 65536), b.p(hi + 1005), 30000));
}

// Many staged WRs in flight at once wrap the staging ring; each lands where it should.
TEST_P(SoftRingWire, StagingRingWrapsUnderLoad)
{
	constexpr uint32_t kLen = 300000, kN = 40; // 12 MB through a 4 MiB ring
	constexpr size_t kStride = 5 * 65536;      // > kLen: eight WRs in flight never overlap
	const size_t hi = kBuf / 2;
	std::vector<Cqe> cqe(kN);
	for (uint32_t i = 0; i < kN; i++) {
		const size_t src = (i % 8) * kStride;
		fill(a.p(src), kLen, i);
		ASSERT_EQ(post_rdma(*a.qp, &cqe[i], a.sg(src, kLen), WrOpcode::RdmaWrite,
		                    b.va(hi + (i % 8) * kStride), b.mr->rkey()),
		          0);
		if (i % 8 == 7) {
			auto wc = poll_n(*a.scq, 8);
			ASSERT_EQ(wc.size(), 8u);
			for (auto &w : wc)
				ASSERT_EQ(w.status, WcStatus::Success);
			for (uint32_t k = 0; k < 8; k++)
				ASSERT_EQ(
				    0, std::memcmp(b.p(hi + k * kStride), a.p(k * kStride), kLen))
				    << "WR " << i - 7 + k;
		}
	}
}

// A WR's buffer is the consumer's again once its completion is polled, flushed ones too
// (IB spec 10.3.1: the QP no longer touches it). On the ring wire the peer copies a
// WRITE's payload straight out of the requester's region when it executes the request (the
// packet wire does the same for payloads of 8 KiB and more in a shared region), so a
// requester entering ERR must not flush what the peer may still execute: a target that
// reuses a flushed READ response's buffer for another command would otherwise hand the
// initiator that command's bytes under the first one's status (ulp-stress cq-race, issue
// 17). Here: eight 1 MiB WRITEs, the QP to ERR while the peer copies them, and every source
// poisoned the moment its completion arrives. No poison may reach the peer.
class SoftWireErr : public ::testing::TestWithParam<soft::Wire>
{
};

TEST_P(SoftWireErr, FlushedWriteSourcesAreNotReadAfterTheirCompletion)
{
	constexpr uint32_t kLen = 1u << 20, kN = 8, kRounds = 12;
	constexpr uint8_t kData = 0x5a, kPoison = 0xee;
	const bool shm = GetParam() == soft::Wire::Shm;
	const std::string ip_a = shm ? "127.0.0.63" : "127.0.0.65",
	                  ip_b = shm ? "127.0.0.64" : "127.0.0.66";
	DevPtr da = wire_dev(ip_a, GetParam()), db = wire_dev(ip_b, GetParam());
	ASSERT_TRUE(da && db);
	uint32_t flushed = 0;
	for (uint32_t round = 0; round < kRounds; round++) {
		SCOPED_TRACE(round);
		DmaSide a, b;
		ASSERT_NO_FATAL_FAILURE(a.init_dma(*da));
		ASSERT_NO_FATAL_FAILURE(b.init_dma(*db));
		CmPair cm;
		cm.active = &a;
		cm.passive = &b;
		ASSERT_TRUE(cm.connect(ip_b + ":0", ip_a));
		ASSERT_STREQ(soft::qp_wire(*a.qp), shm ? "shm" : "socket");
		std::memset(a.p(0), kData, size_t(kN) * kLen);
		std::memset(b.p(0), 0, size_t(kN) * kLen);
		std::vector<Cqe> cqe(kN);
		for (uint32_t i = 0; i < kN; i++)
			ASSERT_EQ(post_rdma(*a.qp, &cqe[i], a.sg(size_t(i) * kLen, kLen),
			                    WrOpcode::RdmaWrite, b.va(size_t(i) * kLen),
			                    b.mr->rkey()),
			          0);
		// Let the requester publish them and the peer start copying, then ERR.
		std::this_thread::sleep_for(std::chrono::microseconds(200 + 100 * round));
		QpAttr e;
		e.qp_state = QpState::Err;
		ASSERT_EQ(a.qp->modify(e, QP_STATE), 0);
		for (uint32_t got = 0; got < kN; got++) {
			auto wc = poll_n(*a.scq, 1);
			ASSERT_EQ(wc.size(), 1u) << "completion " << got;
			const size_t i = static_cast<Cqe *>(wc[0].wr_cqe) - cqe.data();
			ASSERT_LT(i, kN);
			flushed += wc[0].status != WcStatus::Success;
			std::memset(a.p(i * kLen), kPoison, kLen); // the consumer reuses it at once
		}
		// Whatever the peer still does, it does within this.
		std::this_thread::sleep_for(std::chrono::milliseconds(20));
		for (uint32_t i = 0; i < kN; i++) {
			const uint8_t *d = b.p(size_t(i) * kLen);
			for (uint32_t k = 0; k < kLen; k++)
				if (d[k] != 0 && d[k] != kData)
					FAIL() << "WRITE " << i << ": byte " << k << " is "
					       << int(d[k])
					       << ": read from its source after its completion";
		}
	}
	// Some rounds must have caught WRITEs in flight, or the test proved nothing.
	EXPECT_GT(flushed, 0u);
}

INSTANTIATE_TEST_SUITE_P(Wire, SoftWireErr, ::testing::Values(soft::Wire::Shm, soft::Wire::Socket),
                         [](const ::testing::TestParamInfo<soft::Wire> &i) {
	                         return std::string(i.param == soft::Wire::Shm ? "ring" : "packet");
                         });

INSTANTIATE_TEST_SUITE_P(Memory, SoftRingWire, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool> &i) {
	                         return std::string(i.param ? "dma" : "heap");
                         });

} // namespace

// On the ring wire post_send runs the QP on the poster's thread when its engine is idle
// (Engine::post), while the engine serves the same QP whenever the peer publishes. Both
// sides here post SENDs from their own thread while the peer's SENDs arrive on the same
// QP, so the engine keeps finding the QP busy with its poster and must run it again
// after. A run lost there leaves a message or a completion behind for good; two runs at
// once break the ring's sequence (protocol error, the QP in ERR).
TEST(SoftRingWirePost, PostersAndEnginesShareTheQpsAndLoseNothing)
{
	constexpr uint32_t kMsgs = 3000, kWindow = 16, kRecvs = 48, kLen = 64;
	DevPtr da = wire_dev("127.0.0.61"), db = wire_dev("127.0.0.62");
	ASSERT_TRUE(da && db);
	DmaSide a, b;
	ASSERT_NO_FATAL_FAILURE(a.init(*da, 1 << 20));
	ASSERT_NO_FATAL_FAILURE(b.init(*db, 1 << 20));
	CmPair cm;
	cm.active = &a;
	cm.passive = &b;
	ASSERT_TRUE(cm.connect("127.0.0.62:0", "127.0.0.61"));
	ASSERT_STREQ(soft::qp_wire(*a.qp), "shm");

	struct Result {
		uint32_t sent = 0, received = 0, bad = 0;
		std::string why;
	};
	// One side: kMsgs SENDs out (kWindow in flight), kMsgs expected in, in order.
	auto side = [&](DmaSide &s, Result &r) {
		std::vector<Cqe> rcqe(kRecvs), scqe(kWindow);
		const size_t rbase = 1 << 19; // receive slots above the send slots
		for (uint32_t i = 0; i < kRecvs; i++)
			if (post_recv(*s.qp, &rcqe[i], s.sg(rbase + i * kLen, kLen)) != 0) {
				r.why = "post_recv";
				return;
			}
		uint32_t inflight = 0;
		const auto until = Clock::now() + std::chrono::seconds(60);
		while ((r.sent < kMsgs || inflight || r.received < kMsgs) && Clock::now() < until) {
			if (s.qp->state() != QpState::Rts) {
				r.why = "the QP left RTS";
				return;
			}
			if (r.sent < kMsgs && inflight < kWindow) {
				const uint32_t slot = r.sent % kWindow;
				std::memcpy(s.p(slot * kLen), &r.sent, sizeof(r.sent));
				if (post_send(*s.qp, &scqe[slot], s.sg(slot * kLen, kLen)) != 0) {
					r.why = "post_send";
					return;
				}
				r.sent++;
				inflight++;
			}
			Wc wc[16];
			for (int i = 0, n = s.scq->poll(wc); i < n; i++) {
				if (wc[i].status != WcStatus::Success)
					r.bad++;
				inflight--;
			}
			for (int i = 0, n = s.rcq->poll(wc); i < n; i++) {
				const auto k = static_cast<uint32_t>(wc[i].wr_cqe - rcqe.data());
				uint32_t seq;
				std::memcpy(&seq, s.p(rbase + k * kLen), sizeof(seq));
				if (wc[i].status != WcStatus::Success || seq != r.received)
					r.bad++;
				r.received++;
				if (post_recv(*s.qp, &rcqe[k], s.sg(rbase + k * kLen, kLen)) != 0) {
					r.why = "post_recv";
					return;
				}
			}
		}
	};
	Result ra, rb;
	std::thread ta([&] { side(a, ra); });
	side(b, rb);
	ta.join();
	for (auto *r : {&ra, &rb}) {
		EXPECT_EQ(r->why, "");
		EXPECT_EQ(r->sent, kMsgs);
		EXPECT_EQ(r->received, kMsgs);
		EXPECT_EQ(r->bad, 0u);
	}
	EXPECT_EQ(a.qp->state(), QpState::Rts);
	EXPECT_EQ(b.qp->state(), QpState::Rts);
}
