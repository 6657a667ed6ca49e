// SPDX-License-Identifier: MIT
// tests/soft/inline_test.cc - Exec::Inline: work runs on the caller's thread, completions
// are there when post_send returns (or at the next poll), no threads, and the same
// sequence gives the same completions every time.
#include "soft_test_util.h"

#include <dirent.h>

#include <cerrno>
#include <thread>

using namespace ulp;
using namespace soft_test;

namespace
{

int thread_count()
{
	int n = 0;
	DIR *d = opendir("/proc/self/task");
	if (!d)
		return -1;
	while (dirent *e = readdir(d))
		n += e->d_name[0] != '.';
	closedir(d);
	return n;
}

// A completion with the pointers replaced by what identifies it across runs.
struct NormWc {
	int cqe_index; // position of wr_cqe in the run's cqe array, -1 when null
	WcStatus status;
	WcOpcode opcode;
	uint32_t byte_len, qp_num, src_qp, wc_flags, imm, inv;
	int side; // 0 = A's CQs, 1 = B's
	bool operator==(const NormWc &) const = default;
};

std::ostream &operator<<(std::ostream &os, const NormWc &w)
{
	return os << "{cqe " << w.cqe_index << " " << wc_status_str(w.status) << " op "
	          << int(w.opcode) << " len " << w.byte_len << " qpn " << w.qp_num << " src "
	          << w.src_qp << " side " << w.side << "}";
}

struct Trace {
	std::vector<NormWc> wcs;
	std::vector<std::vector<NormWc>> after_each_post; // what was polled right after
	std::vector<uint8_t> a_buf, b_buf;
	soft::Counters ca, cb;
};

// One full run: two fresh inline devices, hand-connected, a fixed mix of operations.
Trace run_sequence(const char *ip_a, const char *ip_b)
{
	Trace t;
	DevPtr da = make_dev(ip_a, soft::Exec::Inline);
	DevPtr db = make_dev(ip_b, soft::Exec::Inline);
	EXPECT_TRUE(da && db);
	if (!da || !db)
		return t;
	std::vector<Cqe> cqes(32);
	auto norm = [&](const Wc &wc, int side) {
		int idx = -1;
		for (size_t i = 0; i < cqes.size(); i++)
			if (wc.wr_cqe == &cqes[i])
				idx = static_cast<int>(i);
		return NormWc{idx,       wc.status,   wc.opcode,   wc.byte_len,        wc.qp_num,
		              wc.src_qp, wc.wc_flags, wc.imm_data, wc.invalidate_rkey, side};
	};
	{
		Side a, b;
		a.init(*da, 4096);
		b.init(*db, 4096);
		a.create_qp();
		b.create_qp();
		// rnr_retry 0: a SEND without a receive fails at once (deterministically).
		EXPECT_EQ(connect_pair(a, b, 0), 0);
		for (size_t i = 0; i < a.buf.size(); i++)
			a.buf[i] = static_cast<uint8_t>(i * 7 + 1);

		auto collect = [&] {
			std::vector<NormWc> now;
			for (auto &wc : drain_cq(*a.scq))
				now.push_back(norm(wc, 0));
			for (auto &wc : drain_cq(*a.rcq))
				now.push_back(norm(wc, 0));
			for (auto &wc : drain_cq(*b.scq))
				now.push_back(norm(wc, 1));
			for (auto &wc : drain_cq(*b.rcq))
				now.push_back(norm(wc, 1));
			t.after_each_post.push_back(now);
			t.wcs.insert(t.wcs.end(), now.begin(), now.end());
		};

		EXPECT_EQ(post_recv(*b.qp, &cqes[0], b.sge(0, 256)), 0);
		EXPECT_EQ(post_recv(*b.qp, &cqes[1], b.sge(256, 256)), 0);
		EXPECT_EQ(post_recv(*b.qp, &cqes[2], b.sge(512, 256)), 0);
		collect(); // receives alone complete nothing
		EXPECT_EQ(post_send(*a.qp, &cqes[3], a.sge(0, 100)), 0);
		collect();
		EXPECT_EQ(post_send(*a.qp, &cqes[4], a.sge(100, 50), WrOpcode::SendWithImm,
		                    SEND_SIGNALED, 0xabcd),
		          0);
		collect();
		EXPECT_EQ(post_rdma(*a.qp, &cqes[5], a.sge(200, 64), WrOpcode::RdmaWrite,
		                    b.at(1024), b.mr->rkey()),
		          0);
		collect();
		EXPECT_EQ(post_rdma(*a.qp, &cqes[6], a.sge(300, 32), WrOpcode::RdmaWriteWithImm,
		                    b.at(2048), b.mr->rkey(), SEND_SIGNALED, 77),
		          0);
		collect();
		for (size_t i = 0; i < 128; i++)
			b.buf[3000 + i] = static_cast<uint8_t>(0xc0 ^ i);
		EXPECT_EQ(post_rdma(*a.qp, &cqes[7], a.sge(1024, 128), WrOpcode::RdmaRead,
		                    b.at(3000), b.mr->rkey()),
		          0);
		collect();
		// Unsignaled WRITE, then a signaled SEND that has no receive left: RNR with
		// rnr_retry 0 fails the SEND, moves A to ERR and flushes.
		EXPECT_EQ(post_rdma(*a.qp, nullptr, a.sge(400, 16), WrOpcode::RdmaWrite, b.at(3500),
		                    b.mr->rkey(), 0),
		          0);
		collect();
		EXPECT_EQ(post_send(*a.qp, &cqes[8], a.sge(0, 8)), 0);
		collect();
		EXPECT_EQ(post_send(*a.qp, &cqes[9], a.sge(0, 8)), 0); // posted in ERR: flushed
		collect();
		t.a_buf = a.buf;
		t.b_buf = b.buf;
		t.ca = soft::qp_counters(*a.qp);
		t.cb = soft::qp_counters(*b.qp);
	}
	return t;
}

} // namespace

TEST(SoftInline, NoEngineThreads)
{
	int before = thread_count();
	ASSERT_GT(before, 0);
	{
		DevPtr da = make_dev("127.0.0.1", soft::Exec::Inline);
		DevPtr db = make_dev("127.0.0.2", soft::Exec::Inline);
		ASSERT_TRUE(da && db);
		EXPECT_EQ(thread_count(), before);
		Side a, b;
		a.init(*da);
		b.init(*db);
		a.create_qp();
		b.create_qp();
		ASSERT_EQ(connect_pair(a, b), 0);
		Cqe c[2];
		ASSERT_EQ(post_recv(*b.qp, &c[0], b.sge(0, 64)), 0);
		ASSERT_EQ(post_send(*a.qp, &c[1], a.sge(0, 64)), 0);
		EXPECT_EQ(thread_count(), before);
	}
	// For contrast: an engine-mode device has its own threads, one per engine.
	DevPtr de = make_dev("127.0.0.3", soft::Exec::Engine);
	ASSERT_TRUE(de);
	ASSERT_GE(soft::engine_count(*de), 1u);
	EXPECT_EQ(thread_count(), before + static_cast<int>(soft::engine_count(*de)));
}

TEST(SoftInline, SendCompletesBeforePostReturns)
{
	DevPtr da = make_dev("127.0.0.1", soft::Exec::Inline);
	DevPtr db = make_dev("127.0.0.2", soft::Exec::Inline);
	ASSERT_TRUE(da && db);
	Side a, b;
	a.init(*da);
	b.init(*db);
	a.create_qp();
	b.create_qp();
	ASSERT_EQ(connect_pair(a, b), 0);
	std::memcpy(a.buf.data(), "inline determinism", 19);
	Cqe rc, sc;
	ASSERT_EQ(post_recv(*b.qp, &rc, b.sge(0, 64)), 0);
	ASSERT_EQ(post_send(*a.qp, &sc, a.sge(0, 19)), 0);
	// No sleeping, no progress(): the first poll finds both completions.
	Wc wc[4];
	ASSERT_EQ(a.scq->poll(wc), 1);
	EXPECT_EQ(wc[0].wr_cqe, &sc);
	EXPECT_EQ(wc[0].status, WcStatus::Success);
	EXPECT_EQ(wc[0].opcode, WcOpcode::Send);
	ASSERT_EQ(b.rcq->poll(wc), 1);
	EXPECT_EQ(wc[0].wr_cqe, &rc);
	EXPECT_EQ(wc[0].status, WcStatus::Success);
	EXPECT_EQ(wc[0].byte_len, 19u);
	EXPECT_EQ(wc[0].src_qp, a.qp->qp_num());
	EXPECT_STREQ(reinterpret_cast<char *>(b.buf.data()), "inline determinism");
	// Nothing else is pending.
	EXPECT_EQ(soft::progress(*da), 0);
	EXPECT_EQ(soft::progress(*db), 0);
	EXPECT_EQ(a.scq->poll(wc), 0);
	EXPECT_EQ(b.rcq->poll(wc), 0);
}

// A SEND that meets an RNR NAK waits for its timer; progress() (or poll) runs it once due.
TEST(SoftInline, RnrRetryRunsOnProgress)
{
	DevPtr da = make_dev("127.0.0.1", soft::Exec::Inline);
	DevPtr db = make_dev("127.0.0.2", soft::Exec::Inline);
	ASSERT_TRUE(da && db);
	Side a, b;
	a.init(*da);
	b.init(*db);
	a.create_qp();
	b.create_qp();
	// rnr_retry 7 (infinite), min_rnr_timer 18 = 5.12 ms at the responder.
	ASSERT_EQ(connect_pair(a, b, 7, 18), 0);
	Cqe rc, sc;
	ASSERT_EQ(post_send(*a.qp, &sc, a.sge(0, 32)), 0);
	Wc wc[2];
	EXPECT_EQ(a.scq->poll(wc), 0);
	EXPECT_EQ(soft::qp_counters(*a.qp).rnr_naks, 1u);
	ASSERT_EQ(post_recv(*b.qp, &rc, b.sge(0, 64)), 0);
	std::this_thread::sleep_for(20ms); // past the RNR timer
	int n = soft::progress(*da);
	EXPECT_GT(n, 0);
	ASSERT_EQ(a.scq->poll(wc), 1);
	EXPECT_EQ(wc[0].status, WcStatus::Success);
	ASSERT_EQ(b.rcq->poll(wc), 1);
	EXPECT_EQ(wc[0].byte_len, 32u);
	EXPECT_EQ(soft::qp_counters(*a.qp).rnr_naks, 1u);
	EXPECT_EQ(a.qp->state(), QpState::Rts);
}

TEST(SoftInline, SameSequenceSameCompletions)
{
	Trace t1 = run_sequence("127.0.0.1", "127.0.0.2");
	Trace t2 = run_sequence("127.0.0.1", "127.0.0.2");
	ASSERT_FALSE(t1.wcs.empty());
	EXPECT_EQ(t1.wcs, t2.wcs);
	EXPECT_EQ(t1.after_each_post, t2.after_each_post);
	EXPECT_EQ(t1.a_buf, t2.a_buf);
	EXPECT_EQ(t1.b_buf, t2.b_buf);
	EXPECT_EQ(t1.ca.completed, t2.ca.completed);
	EXPECT_EQ(t1.ca.bytes_tx, t2.ca.bytes_tx);
	EXPECT_EQ(t1.cb.bytes_rx, t2.cb.bytes_rx);

	// And the sequence did what it says: each post's completions were there at once.
	const auto &p = t1.after_each_post;
	ASSERT_EQ(p.size(), 9u);
	EXPECT_TRUE(p[0].empty());
	// SEND: requester + receiver completions immediately.
	ASSERT_EQ(p[1].size(), 2u);
	EXPECT_EQ(p[1][0].cqe_index, 3);
	EXPECT_EQ(p[1][0].status, WcStatus::Success);
	EXPECT_EQ(p[1][1].cqe_index, 0);
	EXPECT_EQ(p[1][1].byte_len, 100u);
	// SEND_WITH_IMM.
	ASSERT_EQ(p[2].size(), 2u);
	EXPECT_EQ(p[2][1].cqe_index, 1);
	EXPECT_EQ(p[2][1].wc_flags & WC_WITH_IMM, uint32_t{WC_WITH_IMM});
	EXPECT_EQ(p[2][1].imm, 0xabcdu);
	// WRITE: requester only.
	ASSERT_EQ(p[3].size(), 1u);
	EXPECT_EQ(p[3][0].opcode, WcOpcode::RdmaWrite);
	// WRITE_WITH_IMM consumes the third receive.
	ASSERT_EQ(p[4].size(), 2u);
	EXPECT_EQ(p[4][1].cqe_index, 2);
	EXPECT_EQ(p[4][1].opcode, WcOpcode::RecvRdmaWithImm);
	EXPECT_EQ(p[4][1].imm, 77u);
	// READ.
	ASSERT_EQ(p[5].size(), 1u);
	EXPECT_EQ(p[5][0].opcode, WcOpcode::RdmaRead);
	EXPECT_EQ(p[5][0].byte_len, 128u);
	for (size_t i = 0; i < 128; i++)
		ASSERT_EQ(t1.a_buf[1024 + i], static_cast<uint8_t>(0xc0 ^ i)) << i;
	// Unsignaled WRITE: nothing, but the data is there.
	EXPECT_TRUE(p[6].empty());
	EXPECT_EQ(0, std::memcmp(&t1.b_buf[3500], &t1.a_buf[400], 16));
	// SEND without a receive, rnr_retry 0.
	ASSERT_EQ(p[7].size(), 1u);
	EXPECT_EQ(p[7][0].cqe_index, 8);
	EXPECT_EQ(p[7][0].status, WcStatus::RnrRetryExcErr);
	// Posted in ERR: flushed at once.
	ASSERT_EQ(p[8].size(), 1u);
	EXPECT_EQ(p[8][0].cqe_index, 9);
	EXPECT_EQ(p[8][0].status, WcStatus::WrFlushErr);
}
