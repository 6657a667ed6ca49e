// SPDX-License-Identifier: MIT
// tests/iser/iser_test.cc - iSCSI over RDMA on the soft provider: the iSER target
// (iser/target/target.h) and the initiator's iSER transport (iser/initiator/initiator.h) in one
// process, then ulp-targetd and ulp-initiator in two.
//
// In one process both ends share one soft device (the in-process wire). What is checked:
// data written and read back across sizes (immediate data only, immediate + RDMA READ,
// megabytes), registered (zero copy) and unregistered (bounced) buffers; STag life: every
// key invalidated by the target's SEND_WITH_INV, or by our LOCAL_INV when we refuse remote
// invalidation; more commands than the transport maps at once; NOP, TMF and logout; and
// faults the soft provider injects (a connection cut mid-I/O, WRs flushed by a QP error,
// an rkey check failing, a completion of ours lost): no hang, every command ends exactly once,
// nothing answered GOOD that did not happen, the target reaps the connection, and what was
// acknowledged is on the LUN afterwards.
#include "scsi/bs_internal.h"
#include "tests/iscsi/target_process.h"
#include "tests/iser/iser_env.h"

#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <map>
#include <numeric>
#include <random>
#include <sstream>
#include <thread>

namespace ulp::iser
{

using namespace ulp::iscsi;
using namespace ulp::iscsi::target;
using namespace ulp::iscsi::initiator;
using iscsi::initiator::Session;
namespace
{

using namespace std::chrono_literals;
using test_env::clock;
using test_env::fill;
using test_env::Initiator;
using test_env::kBlock;
using test_env::kInitiator;
using test_env::kIqn;
using test_env::kLunBytes;
using test_env::same;
using test_env::Target;

// ---- Data paths ---------------------------------------------------------------------------

TEST(Iser, WriteReadAcrossSizesRegisteredAndBounced)
{
	Target t;
	ASSERT_TRUE(t.start());
	Initiator in;
	ASSERT_TRUE(in.arena);
	ASSERT_TRUE(in.login(t.port()));
	EXPECT_TRUE(in.s->params().rdma_extensions) << "RDMAExtensions=Yes on iSER";
	EXPECT_TRUE(in.s->params().initial_r2t) << "the iSER target insists on InitialR2T";

	// 512 and 4 KiB travel as immediate data only, with no registration (nothing for the
	// target to fetch: no Write STag); 8 KiB + 512 and up as immediate data plus the
	// target's RDMA READ of the rest, from a registered buffer; reads always by the
	// target's RDMA WRITE into one.
	const std::vector<size_t> sizes = {512, 4096, 8192 + 512, 65536, 1u << 20};
	uint64_t lba = 0;
	uint32_t tag = 1;
	for (bool registered : {true, false}) {
		for (size_t len : sizes) {
			SCOPED_TRACE(std::to_string(len) +
			             (registered ? " registered" : " bounced"));
			std::vector<uint8_t> heap_w(len), heap_r(len);
			std::span<uint8_t> w = registered ? in.buf(0, len) : std::span(heap_w);
			std::span<uint8_t> r =
			    registered ? in.buf(4u << 20, len) : std::span(heap_r);
			fill(w, lba, tag);
			std::memset(r.data(), 0xee, r.size());
			const auto before = in.xs;
			ScsiResult wr = in.write(lba, w);
			ASSERT_TRUE(wr.good()) << describe_result(wr);
			ScsiResult rr = in.read(lba, r);
			ASSERT_TRUE(rr.good()) << describe_result(rr);
			EXPECT_EQ(rr.data_in, len);
			EXPECT_TRUE(same(w, r)) << "read back differs";
			const uint64_t maps = len <= 4096 ? 1u : 2u; // the read's, the write's
			EXPECT_EQ(in.xs.mapped - before.mapped, maps);
			EXPECT_EQ(in.xs.bounced - before.bounced, registered ? 0u : maps);
			// The target invalidates each STag with the response's SEND_WITH_INV.
			EXPECT_EQ(in.xs.remote_inv - before.remote_inv, maps);
			EXPECT_EQ(in.xs.local_inv - before.local_inv, 0u);
			lba += len / kBlock;
			tag++;
		}
	}
	PortalStats ps = t.portal->stats();
	EXPECT_EQ(ps.rdma_writes, 2 * sizes.size()); // every read
	EXPECT_EQ(ps.rdma_reads, 2u * 3u);           // the writes beyond 8 KiB
	// Every read's response and every registered write's (the three beyond 8 KiB) came
	// with SEND_WITH_INV; the immediate-only writes had no STag to invalidate.
	EXPECT_GE(ps.send_inv, 2u * (sizes.size() + 3u));
	EXPECT_TRUE(in.s->logout()) << in.s->error();
	EXPECT_TRUE(t.wait_no_conns()) << t.logs();
}

// Immediate data in the command's SEND, the rest fetched by the target's RDMA READ, at
// every size around the receive data segment length (TargetRecvDataSegmentLength: what
// one SEND may carry), with the connection parameters libiscsi sends (it answers 4 READs
// at once and issues none). This is the write libiscsi 1.20's SCSI.Write10 hung on
// against ulp-targetd on rxe: the target accepted with initiator depth 0, having read
// rdma_cm's crossed READ credits the wrong way round, and its READ never left.
TEST(Iser, ImmediateDataThenRdmaReadAroundTheRecvDsl)
{
	for (uint32_t dsl : {4096u, 8192u}) {
		SCOPED_TRACE("TargetRecvDataSegmentLength " + std::to_string(dsl));
		PortalConfig xc;
		xc.recv_dsl = dsl;
		Target t;
		ASSERT_TRUE(t.start(xc));
		Initiator in;
		in.xc.send_dsl = dsl;
		in.xc.read_credit = 4;
		ASSERT_TRUE(in.login(t.port()));
		uint64_t lba = 0;
		uint32_t tag = 100;
		for (uint32_t len = dsl - 2 * kBlock; len <= dsl + 2 * kBlock; len += kBlock) {
			SCOPED_TRACE(std::to_string(len) + " bytes");
			auto w = in.buf(0, len), r = in.buf(1u << 20, len);
			fill(w, lba, tag);
			std::memset(r.data(), 0xee, r.size());
			const uint64_t reads = t.portal->stats().rdma_reads;
			const auto t0 = clock::now();
			ScsiResult wr = in.write(lba, w);
			ASSERT_TRUE(wr.good()) << describe_result(wr) << "\n" << t.logs();
			EXPECT_LT(clock::now() - t0, 2s);
			EXPECT_EQ(t.portal->stats().rdma_reads - reads, len > dsl ? 1u : 0u)
			    << "the part beyond the immediate data comes by one RDMA READ";
			ScsiResult rr = in.read(lba, r);
			ASSERT_TRUE(rr.good()) << describe_result(rr);
			EXPECT_TRUE(same(w, r)) << "read back differs";
			lba += len / kBlock;
			tag++;
		}
		EXPECT_TRUE(in.s->logout()) << in.s->error();
		EXPECT_TRUE(t.wait_no_conns()) << t.logs();
	}
}

TEST(Iser, LocalInvalidateWhenTheTargetMayNot)
{
	Target t;
	ASSERT_TRUE(t.start());
	Initiator in;
	in.xc.allow_remote_inv = false; // iser_cm_hdr: SEND_W_INV_NOT_SUP
	ASSERT_TRUE(in.login(t.port()));
	for (uint32_t i = 0; i < 20; i++) {
		auto w = in.buf(0, 16384), r = in.buf(65536, 16384);
		fill(w, i * 32, i);
		ASSERT_TRUE(in.write(i * 32, w).good());
		ASSERT_TRUE(in.read(i * 32, r).good());
		ASSERT_TRUE(same(w, r));
	}
	EXPECT_EQ(in.xs.remote_inv, 0u);
	EXPECT_EQ(in.xs.local_inv, in.xs.mapped);
	EXPECT_EQ(t.portal->stats().send_inv, 0u) << "the target sent SEND_WITH_INV anyway";
	EXPECT_TRUE(in.s->logout()) << in.s->error();
}

TEST(Iser, MoreCommandsThanTheTransportMaps)
{
	// 96 writes and then 96 reads submitted at once through a transport that maps 8: the
	// rest wait in the session for registrations to come back, none is lost. The writes
	// are longer than the immediate data, so they need a registration too.
	Target t;
	ASSERT_TRUE(t.start());
	Initiator in;
	in.xc.queue_depth = 8;
	ASSERT_TRUE(in.login(t.port()));
	constexpr uint32_t n = 96, len = 16384;
	std::vector<ScsiResult> res(n);
	std::vector<bool> done(n);
	std::vector<std::array<uint8_t, 16>> cdbs(n);
	auto run_all = [&](bool write) {
		std::fill(done.begin(), done.end(), false);
		for (uint32_t i = 0; i < n; i++) {
			const uint64_t lba = uint64_t(i) * 64;
			cdbs[i] =
			    write ? cdb_write16(lba, len / kBlock) : cdb_read16(lba, len / kBlock);
			auto b = in.buf((write ? 0 : 2u << 20) + size_t(i) * len, len);
			if (write)
				fill(b, lba, 7);
			const uint32_t itt = in.s->submit(
			    ScsiRequest{0, cdbs[i], write ? DataDir::Write : DataDir::Read, b},
			    [&, i](const ScsiResult &r) {
				    res[i] = r;
				    done[i] = true;
			    });
			ASSERT_NE(itt, kReservedTag) << in.s->last_error();
		}
		const auto end = clock::now() + 20s;
		while (std::count(done.begin(), done.end(), true) < n && clock::now() < end)
			ASSERT_GE(in.s->poll(100ms), 0) << in.s->error();
		ASSERT_EQ(std::count(done.begin(), done.end(), true), n) << "commands lost";
		for (uint32_t i = 0; i < n; i++)
			ASSERT_TRUE(res[i].good()) << i << ": " << describe_result(res[i]);
	};
	run_all(true);
	run_all(false);
	for (uint32_t i = 0; i < n; i++)
		ASSERT_TRUE(
		    same(in.buf(size_t(i) * len, len), in.buf((2u << 20) + size_t(i) * len, len)))
		    << "command " << i;
	EXPECT_EQ(in.xs.mapped, 2u * n);
	EXPECT_TRUE(in.s->logout()) << in.s->error();
}

// 32 rounds of 32 commands in flight on a file LUN, writes then reads of the same blocks:
// none may be lost or answered twice, and every block must read back as written.
void file_lun_rounds(Target &t, Initiator &in)
{
	constexpr uint32_t kRounds = 32, kDepth = 32, kLen = 4096;
	std::vector<ScsiResult> res(kDepth);
	std::vector<int> answers(kDepth);
	std::vector<uint64_t> lbas(kDepth);
	std::mt19937_64 rng(7);
	for (uint32_t round = 0; round < kRounds; round++) {
		const bool write = round % 2 == 0;
		if (write) // new places each write round; the read round after reads them back
			for (auto &l : lbas)
				l = rng() % (kLunBytes / kLen) * (kLen / kBlock);
		std::fill(answers.begin(), answers.end(), 0);
		for (uint32_t i = 0; i < kDepth; i++) {
			const uint64_t lba = lbas[i];
			const auto cdb = write ? cdb_write16(lba, kLen / kBlock)
			                       : cdb_read16(lba, kLen / kBlock);
			auto b = in.buf((write ? 0 : 2u << 20) + size_t(i) * kLen, kLen);
			if (write)
				fill(b, lba, uint8_t(round));
			else
				std::memset(b.data(), 0, b.size());
			const uint32_t itt = in.s->submit(
			    ScsiRequest{0, cdb, write ? DataDir::Write : DataDir::Read, b},
			    [&, i](const ScsiResult &r) {
				    res[i] = r;
				    answers[i]++;
			    });
			ASSERT_NE(itt, kReservedTag) << in.s->last_error();
		}
		const auto end = clock::now() + 20s;
		auto all = [&] { return std::count(answers.begin(), answers.end(), 1) == kDepth; };
		while (!all() && clock::now() < end)
			ASSERT_GE(in.s->poll(100ms), 0) << in.s->error();
		ASSERT_TRUE(all()) << "round " << round << ": a command lost or answered twice\n"
		                   << t.logs();
		for (uint32_t i = 0; i < kDepth; i++) {
			ASSERT_TRUE(res[i].good()) << i << ": " << describe_result(res[i]);
			// Two commands of a round may share an LBA: they wrote the same bytes.
			if (!write) {
				ASSERT_TRUE(same(in.buf((2u << 20) + size_t(i) * kLen, kLen),
				                 in.buf(size_t(i) * kLen, kLen)))
				    << "round " << round << " command " << i;
			}
		}
	}
}

scsi::FileBsStats file_stats(const Target &t)
{
	scsi::FileBsStats s;
	EXPECT_TRUE(scsi::file_bs_stats(t.lu->bs(), &s));
	return s;
}

TEST(Iser, FileLunResponsesPostedFromTheReaperThread)
{
	// With the portal's CQs on the completion work pool (Workqueue), whose workers run no
	// event loop, a file LUN completes every command on the shared ring's reaper thread,
	// which posts the response to a connection that the CQ's worker may be holding at that
	// moment: the poster then either takes the connection itself or leaves the event to
	// the holder, which must run it before it lets go (Conn::try_own, leave). The same
	// race remains under Softirq for a command another poller's completion restarts.
	Target t;
	t.file = "/dev/shm/ulp-iser-test-" + std::to_string(getpid()) + ".img";
	PortalConfig xc;
	xc.poll_ctx = PollCtx::Workqueue;
	ASSERT_TRUE(t.start(xc));
	Initiator in;
	ASSERT_TRUE(in.login(t.port()));
	file_lun_rounds(t, in);
	const scsi::FileBsStats s = file_stats(t);
	EXPECT_GT(s.shared_requests, 0u) << "the commands went through the reaper thread";
	EXPECT_EQ(s.loop_requests, 0u);
	EXPECT_TRUE(in.s->logout()) << in.s->error();
	EXPECT_TRUE(t.wait_no_conns()) << t.logs();
}

TEST(Iser, FileLunIoStaysOnThePollerThread)
{
	// The default (Softirq): the poller that runs the connection's CQ is an event loop, so
	// the file LUN's commands go to that poller's own ring and complete there - a
	// command's I/O never leaves the thread that received it.
	Target t;
	t.file = "/dev/shm/ulp-iser-test-" + std::to_string(getpid()) + ".img";
	ASSERT_TRUE(t.start());
	Initiator in;
	ASSERT_TRUE(in.login(t.port()));
	file_lun_rounds(t, in);
	const scsi::FileBsStats s = file_stats(t);
	EXPECT_GT(s.loop_requests, 0u) << "the commands went to the poller's ring";
	EXPECT_EQ(s.shared_requests, 0u) << "a command went through the reaper thread";
	EXPECT_GE(s.loop_rings, 1u);
	EXPECT_TRUE(in.s->logout()) << in.s->error();
	EXPECT_TRUE(t.wait_no_conns()) << t.logs();
}

TEST(Iser, NopTaskManagementAndLogout)
{
	Target t;
	ASSERT_TRUE(t.start());
	Initiator in;
	ASSERT_TRUE(in.login(t.port()));
	std::vector<uint8_t> ping(100);
	std::iota(ping.begin(), ping.end(), uint8_t(1));
	PingResult p = in.s->ping_sync(ping);
	EXPECT_EQ(p.outcome, TaskOutcome::Completed);
	EXPECT_TRUE(p.data_ok) << "the NOP-In must echo the NOP-Out's data";
	TmfResult tr = in.s->task_mgmt_sync(TmfFunction::LunReset, 0);
	EXPECT_EQ(tr.outcome, TaskOutcome::Completed);
	EXPECT_EQ(tr.response, TmfResponse::Complete);
	// The reset leaves a unit attention; the next command reports it, the one after runs.
	auto b = in.buf(0, 4096);
	ScsiResult first = in.write(0, b);
	EXPECT_EQ(first.status, 2) << "CHECK CONDITION (UNIT ATTENTION) after a LUN reset";
	EXPECT_TRUE(in.write(0, b).good());
	EXPECT_TRUE(in.s->logout()) << in.s->error();
	EXPECT_EQ(in.s->state(), SessionState::Closed);
	EXPECT_TRUE(t.wait_no_conns()) << t.logs();
	// A logout is not a lost connection.
	EXPECT_EQ(t.logs().find("connection lost"), std::string::npos) << t.logs();
}

// TARGET COLD RESET (RFC 7143 11.5.1) drops every session of the target: the others are
// dropped by a thread that holds the target's lock, so their Drop must not run on that
// thread (closing a session takes the lock). Before post_deferred it did, over iSER, on the
// CQ worker that carried the TMF: that thread deadlocked on itself, every completion of the
// shared CQ stopped, and the target hung (libiscsi's SCSI.Reserve6.TargetColdReset on rxe).
// Now both sessions end, the portal reaps both, and a new session works.
TEST(Iser, TargetColdResetDropsTheOtherSession)
{
	Target t;
	t.allow_target_reset = true;
	ASSERT_TRUE(t.start());
	Initiator a, b;
	ASSERT_TRUE(a.login(t.port()));
	ASSERT_TRUE(b.login(t.port()));
	fill(b.buf(0, 4096), 0, 9);
	ASSERT_TRUE(b.write(0, b.buf(0, 4096)).good());
	std::atomic<bool> stop{false};
	std::thread poll_b([&] {
		while (!stop.load() && b.s->poll(20ms) >= 0) {
		}
	});
	const TmfResult r = a.s->task_mgmt_sync(TmfFunction::TargetColdReset, 0);
	EXPECT_TRUE(r.response == TmfResponse::Complete || a.s->state() == SessionState::Failed)
	    << "TARGET COLD RESET: neither answered nor the connection dropped";
	EXPECT_TRUE(t.wait_no_conns()) << "the target did not reap both sessions\n" << t.logs();
	stop = true;
	poll_b.join();
	EXPECT_NE(b.s->state(), SessionState::FullFeature) << "the other session survived";
	EXPECT_NE(t.logs().find("target cold reset"), std::string::npos) << t.logs();
	Initiator c;
	ASSERT_TRUE(c.login(t.port())) << t.logs();
	auto r2 = c.buf(65536, 4096);
	ASSERT_TRUE(c.read(0, r2).good());
	EXPECT_TRUE(c.s->logout()) << c.s->error();
}

TEST(Iser, SecondSessionAfterLogout)
{
	Target t;
	ASSERT_TRUE(t.start());
	for (int round = 0; round < 3; round++) {
		Initiator in;
		ASSERT_TRUE(in.login(t.port()));
		auto w = in.buf(0, 65536), r = in.buf(1u << 20, 65536);
		fill(w, 1000, uint32_t(round));
		ASSERT_TRUE(in.write(1000, w).good());
		ASSERT_TRUE(in.read(1000, r).good());
		ASSERT_TRUE(same(w, r));
		ASSERT_TRUE(in.s->logout());
	}
	EXPECT_TRUE(t.wait_no_conns()) << t.logs();
	EXPECT_EQ(t.portal->stats().accepted, 3u);
}

// ---- Faults -------------------------------------------------------------------------------

// Keep writes in flight until the session fails or n complete; every write carries its
// own LBA range and tag. Returns the LBAs whose writes were answered GOOD (with tags).
struct FaultRun {
	std::map<uint64_t, uint32_t> good;                // lba -> tag acknowledged last
	std::map<uint64_t, std::vector<uint32_t>> issued; // lba -> every tag sent to it
	size_t lost = 0;                                  // ended ConnectionLost / Timeout
	size_t bad = 0;                                   // ended otherwise not GOOD
	size_t ended = 0;
	bool hung = false;
};

FaultRun write_until_failure(Initiator &in, uint32_t total, uint32_t qd, uint32_t len)
{
	FaultRun fr;
	struct Slot {
		std::array<uint8_t, 16> cdb;
		uint64_t lba = 0;
		uint32_t tag = 0;
		bool busy = false;
	};
	std::vector<Slot> slots(qd);
	uint32_t issued = 0;
	const auto end = clock::now() + 30s;
	auto issue = [&](uint32_t si) {
		Slot &s = slots[si];
		s.lba = uint64_t(issued % 1000) * (len / kBlock);
		s.tag = ++issued;
		s.cdb = cdb_write16(s.lba, len / kBlock);
		fr.issued[s.lba].push_back(s.tag);
		auto b = in.buf(size_t(si) * len, len);
		fill(b, s.lba, s.tag);
		const uint32_t itt = in.s->submit(
		    ScsiRequest{0, s.cdb, DataDir::Write, b}, [&, si](const ScsiResult &r) {
			    Slot &sl = slots[si];
			    sl.busy = false;
			    fr.ended++;
			    // A write answered late may find a later one to its LBA acknowledged.
			    if (r.good())
				    fr.good[sl.lba] = std::max(fr.good[sl.lba], sl.tag);
			    else if (r.outcome == TaskOutcome::ConnectionLost ||
			             r.outcome == TaskOutcome::Timeout)
				    fr.lost++;
			    else
				    fr.bad++;
		    });
		s.busy = itt != kReservedTag;
	};
	for (uint32_t i = 0; i < qd; i++)
		issue(i);
	for (;;) {
		bool any = false;
		for (auto &s : slots)
			any |= s.busy;
		if (!any)
			break;
		if (clock::now() > end) {
			// The callbacks point into this frame: end what is left while it lives.
			fr.hung = true;
			in.s->close("the test gave up on a hung command");
			while (in.s->poll(0ms) > 0) {
			}
			break;
		}
		in.s->poll(100ms);
		if (in.s->state() == SessionState::FullFeature && issued < total)
			for (uint32_t i = 0; i < qd; i++)
				if (!slots[i].busy && issued < total)
					issue(i);
	}
	return fr;
}

// After a fault: a new session reads every acknowledged write back intact.
void expect_acknowledged_writes_on_disk(Target &t, const FaultRun &fr, uint32_t len)
{
	Initiator in;
	ASSERT_TRUE(in.login(t.port()));
	std::vector<uint8_t> want(len);
	for (auto [lba, tag] : fr.good) {
		auto r = in.buf(0, len);
		ScsiResult rr = in.read(lba, r);
		ASSERT_TRUE(rr.good()) << describe_result(rr);
		// A later write to the same LBA may have landed without its answer (lost with
		// the connection): the data is then that later tag's, never an older one's.
		bool ok = false;
		for (uint32_t tg : fr.issued.at(lba)) {
			if (tg < tag)
				continue;
			fill(want, lba, tg);
			ok |= same(want, r);
		}
		EXPECT_TRUE(ok) << "LBA " << lba << ": acknowledged tag " << tag
		                << " (or a later one) not on the LUN";
	}
	EXPECT_TRUE(in.s->logout()) << in.s->error();
}

TEST(IserFaults, ConnectionCutMidIo)
{
	Target t;
	ASSERT_TRUE(t.start());
	Initiator in;
	ASSERT_TRUE(in.login(t.port()));
	// The wire drops before the 400th WR of either side (in-process: both share the device).
	soft::FaultRule rule;
	rule.point = soft::FaultPoint::CutConnection;
	rule.nth = 400;
	ASSERT_GE(soft::inject_fault(*t.dev, rule), 0);
	const FaultRun fr = write_until_failure(in, 5000, 16, 8192);
	soft::clear_faults(*t.dev);
	EXPECT_FALSE(fr.hung) << "commands still pending 30 s after the cut";
	EXPECT_EQ(in.s->state(), SessionState::Failed);
	EXPECT_GT(fr.lost, 0u);
	EXPECT_EQ(fr.bad, 0u);
	EXPECT_GT(fr.good.size(), 0u);
	EXPECT_TRUE(t.wait_no_conns()) << "the target kept the dead connection\n" << t.logs();
	expect_acknowledged_writes_on_disk(t, fr, 8192);
}

TEST(IserFaults, WrsFlushedByAQpError)
{
	Target t;
	ASSERT_TRUE(t.start());
	Initiator in;
	ASSERT_TRUE(in.login(t.port()));
	soft::FaultRule rule;
	rule.point = soft::FaultPoint::QpError;
	rule.nth = 300;
	ASSERT_GE(soft::inject_fault(*t.dev, rule), 0);
	const FaultRun fr = write_until_failure(in, 5000, 16, 16384);
	soft::clear_faults(*t.dev);
	EXPECT_FALSE(fr.hung);
	EXPECT_EQ(in.s->state(), SessionState::Failed);
	EXPECT_EQ(fr.bad, 0u);
	EXPECT_EQ(fr.ended, fr.good.size() + fr.lost);
	EXPECT_TRUE(t.wait_no_conns()) << t.logs();
	expect_acknowledged_writes_on_disk(t, fr, 16384);
}

TEST(IserFaults, RkeyCheckFails)
{
	// The target's RDMA READ of write data meets a failing rkey check (REM_ACCESS_ERR):
	// the target must drop the connection, not answer GOOD for data it never got.
	Target t;
	ASSERT_TRUE(t.start());
	Initiator in;
	ASSERT_TRUE(in.login(t.port()));
	soft::FaultRule rule;
	rule.point = soft::FaultPoint::RkeyCheck;
	rule.nth = 25;
	ASSERT_GE(soft::inject_fault(*t.dev, rule), 0);
	const FaultRun fr = write_until_failure(in, 3000, 8, 65536); // RDMA READ each
	soft::clear_faults(*t.dev);
	EXPECT_FALSE(fr.hung);
	EXPECT_GE(soft::faults_fired(*t.dev), 1u);
	EXPECT_EQ(in.s->state(), SessionState::Failed);
	EXPECT_EQ(fr.bad, 0u);
	EXPECT_TRUE(t.wait_no_conns()) << t.logs();
	expect_acknowledged_writes_on_disk(t, fr, 65536);
}

// A completion of ours that never comes (the soft provider drops it; the work request
// itself executed): the SEND of a command, or with remote invalidation refused the
// LOCAL_INV that revokes a finished command's STag. The target answers the command, but
// the session still counts the PDU (or the registration) as lent to the transport and
// holds the finished command back. Before the wait was bounded the command never ended:
// the session's timers skip finished commands. Now, cmd_timeout after the answer, the
// session says so in one line and fails the connection, whose close gives back every PDU
// and registration it held: every command ends (the held one with the target's answer,
// the others as lost), the logout after it returns at once, the target reaps the
// connection, and a new session (the recovery) finds every acknowledged write.
TEST(IserFaults, CompletionOfOursThatNeverComes)
{
	struct Case {
		const char *name;
		WrOpcode op;           // the WR whose completion is dropped
		bool allow_remote_inv; // false: every STag goes by our LOCAL_INV
	};
	// Only the initiator posts these two opcodes here: the target answers each write (all
	// carry a write STag: 16 KiB, beyond the immediate data) with SEND_WITH_INV, or with
	// plain SENDs when told not to, and never posts a LOCAL_INV.
	for (const Case &c :
	     {Case{"SEND", WrOpcode::Send, true}, Case{"LOCAL_INV", WrOpcode::LocalInv, false}}) {
		SCOPED_TRACE(c.name);
		Target t;
		ASSERT_TRUE(t.start());
		Initiator in;
		in.cmd_timeout = 2s;
		in.xc.allow_remote_inv = c.allow_remote_inv;
		ASSERT_TRUE(in.login(t.port()));
		soft::FaultRule rule;
		rule.point = soft::FaultPoint::DropCompletion;
		rule.nth = 40; // mid-I/O: 16 writes in flight, 24 more to go
		rule.match_opcode = true;
		rule.opcode = c.op;
		ASSERT_GE(soft::inject_fault(*t.dev, rule), 0);
		const auto t0 = clock::now();
		// Few enough writes that the others are done long before the held one's bound:
		// no other command's timeout can end the wait instead.
		const FaultRun fr = write_until_failure(in, 64, 16, 16384);
		const auto took = clock::now() - t0;
		EXPECT_EQ(soft::faults_fired(*t.dev), 1u);
		soft::clear_faults(*t.dev);
		EXPECT_FALSE(fr.hung) << "a command still pending 30 s after its answer\n"
		                      << t.logs();
		// The write whose completion was lost ends cmd_timeout after its answer; the
		// others take well under a second.
		EXPECT_LT(took, in.cmd_timeout + 3s);
		EXPECT_GE(took, in.cmd_timeout) << "ended before its bound: not by the fix";
		EXPECT_EQ(in.s->state(), SessionState::Failed);
		EXPECT_NE(in.s->error().find("still with the transport"), std::string::npos)
		    << in.s->error();
		EXPECT_EQ(t.capture.count("still with the transport"), 1u) << t.logs();
		EXPECT_EQ(fr.bad, 0u);
		EXPECT_GT(fr.good.size(), 0u);
		const auto l0 = clock::now();
		EXPECT_FALSE(in.s->logout(5s)) << "a failed session cannot log out";
		EXPECT_LT(clock::now() - l0, 1s);
		EXPECT_EQ(in.s->in_flight(), 0u);
		in.s.reset();
		EXPECT_TRUE(t.wait_no_conns()) << "the target kept the failed connection\n"
		                               << t.logs();
		expect_acknowledged_writes_on_disk(t, fr, 16384);
	}
}

// An initiator whose connect request grants no RDMA READ (responder_resources 0): a READ
// the target posted would wait forever for a credit. The target says so once and fails
// each write that needs a fetch, at once; writes that fit the immediate data, and reads,
// go on working on the same connection.
TEST(IserFaults, InitiatorGrantsNoReadCredit)
{
	Target t;
	ASSERT_TRUE(t.start());
	Initiator in;
	in.xc.read_credit = 0;
	ASSERT_TRUE(in.login(t.port()));
	auto small = in.buf(0, 4096), big = in.buf(65536, 65536), r = in.buf(1u << 20, 4096);
	fill(small, 0, 1);
	ASSERT_TRUE(in.write(0, small).good());
	for (int i = 0; i < 2; i++) {
		const auto t0 = clock::now();
		ScsiResult wr = in.write(1024, big);
		EXPECT_FALSE(wr.good()) << "a write whose data was never fetched answered GOOD";
		EXPECT_EQ(wr.outcome, TaskOutcome::Completed) << describe_result(wr);
		EXPECT_LT(clock::now() - t0, 2s) << "the write waited for a READ that cannot go";
	}
	ASSERT_TRUE(in.read(0, r).good());
	EXPECT_TRUE(same(small, r));
	EXPECT_EQ(t.portal->stats().rdma_reads, 0u);
	EXPECT_EQ(t.portal->stats().no_read_credit, 2u);
	const std::string logs = t.logs();
	EXPECT_NE(logs.find("granted no RDMA READ"), std::string::npos) << logs;
	EXPECT_EQ(logs.find("granted no RDMA READ"), logs.rfind("granted no RDMA READ"))
	    << "said more than once\n"
	    << logs;
	EXPECT_TRUE(in.s->logout()) << in.s->error();
	EXPECT_TRUE(t.wait_no_conns()) << t.logs();
}

// An RDMA READ of write data whose completion never comes (the soft provider drops it):
// within data_timeout the target logs which command and transfer, drops the connection
// (which flushes the rest), and reaps it; the initiator learns of it as a lost connection,
// not from its own command timeout.
TEST(IserFaults, RdmaReadThatNeverCompletes)
{
	PortalConfig xc;
	xc.data_timeout = 300ms;
	Target t;
	ASSERT_TRUE(t.start(xc));
	Initiator in;
	ASSERT_TRUE(in.login(t.port()));
	ASSERT_TRUE(in.write(0, in.buf(0, 65536)).good()) << "one READ that completes first";
	soft::FaultRule rule;
	rule.point = soft::FaultPoint::DropCompletion;
	rule.nth = 1;
	rule.match_opcode = true;
	rule.opcode = WrOpcode::RdmaRead;
	ASSERT_GE(soft::inject_fault(*t.dev, rule), 0);
	const auto t0 = clock::now();
	ScsiResult wr = in.write(128, in.buf(0, 65536));
	const auto took = clock::now() - t0;
	soft::clear_faults(*t.dev);
	EXPECT_FALSE(wr.good()) << "a write whose fetch never completed answered GOOD";
	EXPECT_EQ(wr.outcome, TaskOutcome::ConnectionLost) << describe_result(wr);
	EXPECT_LT(took, 5s) << "the initiator's own timeout (10 s) ended it, not the target";
	EXPECT_EQ(t.portal->stats().data_timeouts, 1u);
	// 65536 bytes less the 8192 of immediate data.
	EXPECT_NE(t.logs().find("RDMA READ of 57344 bytes of write data not complete after"),
	          std::string::npos)
	    << t.logs();
	EXPECT_TRUE(t.wait_no_conns()) << t.logs();
}

TEST(IserFaults, TargetStopsWithSessionsOpen)
{
	// ulp-targetd's shutdown path: stop() asks sessions to log out; an initiator that is
	// busy polling answers, and the portal then frees everything in bounded time.
	auto t = std::make_unique<Target>();
	ASSERT_TRUE(t->start());
	Initiator in;
	ASSERT_TRUE(in.login(t->port()));
	ASSERT_TRUE(in.write(0, in.buf(0, 4096)).good());
	std::atomic<bool> stop{false};
	std::thread poller([&] {
		while (!stop.load() && in.s->poll(50ms) >= 0) {
		}
	});
	const auto t0 = clock::now();
	EXPECT_TRUE(t->target->stop(3s, 6s));
	t->portal->stop();
	const auto took = clock::now() - t0;
	stop = true;
	poller.join();
	EXPECT_LT(took, 8s);
	EXPECT_EQ(t->portal->conns(), 0u);
	EXPECT_NE(in.s->state(), SessionState::FullFeature);
	t.reset();
}

// ---- Two processes -------------------------------------------------------------------------

std::string run_capture(const std::vector<std::string> &argv, int *status)
{
	std::string cmd;
	for (const auto &a : argv)
		cmd += "'" + a + "' ";
	cmd += "2>&1";
	FILE *f = ::popen(cmd.c_str(), "r");
	std::string out;
	if (!f) {
		*status = -1;
		return out;
	}
	char buf[4096];
	size_t n;
	while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0)
		out.append(buf, n);
	const int st = ::pclose(f);
	*status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
	return out;
}

TEST(IserProcess, UlpInitiatorAgainstUlpTargetd)
{
	test::TargetdProcess td;
	std::string why;
	ASSERT_TRUE(td.start(
	    {"--iser-portal", "127.0.0.1:0", "--target", kIqn, "--lun", "0:ram:size=64M"}, &why))
	    << why;
	ASSERT_NE(td.iser_port(), 0) << td.log();
	int st = 0;
	const std::string out =
	    run_capture({ULP_INITIATOR_PATH, "--transport", "iser", "--portal",
	                 "127.0.0.1:" + std::to_string(td.iser_port()), "--target", kIqn,
	                 "--workload", "randwrite", "--bs", "16k", "--qd", "16", "--runtime", "2",
	                 "--verify-only", "--json", "--quiet"},
	                &st);
	EXPECT_EQ(st, 0) << out << "\n" << td.log();
	EXPECT_NE(out.find("\"ok\": true"), std::string::npos) << out;
	EXPECT_NE(out.find("\"transport\": \"iser\""), std::string::npos) << out;
	EXPECT_NE(out.find("\"verify_errors\": 0"), std::string::npos) << out;
	EXPECT_NE(out.find("\"bounced\": 1,"), std::string::npos)
	    << "only READ CAPACITY's buffer may bounce: the I/O arena is registered\n"
	    << out;
	EXPECT_EQ(td.stop(), 0) << td.log();
}

TEST(IserProcess, TargetKilledMidRun)
{
	test::TargetdProcess td;
	std::string why;
	ASSERT_TRUE(td.start(
	    {"--iser-portal", "127.0.0.1:0", "--target", kIqn, "--lun", "0:ram:size=64M"}, &why))
	    << why;
	// The target's soft device lives in the child; ours is a device of our own at the
	// same address (the socket wire finds the listener by name).
	soft::DeviceConfig dc;
	dc.ip = "127.0.0.1";
	Device *dev = soft::create_device(dc);
	ASSERT_TRUE(dev);
	{
		Initiator in;
		ASSERT_TRUE(in.login(td.iser_port()));
		std::thread killer([&] {
			std::this_thread::sleep_for(300ms);
			td.kill();
		});
		const auto t0 = clock::now();
		const FaultRun fr = write_until_failure(in, 1000000, 16, 8192);
		killer.join();
		EXPECT_FALSE(fr.hung);
		EXPECT_LT(clock::now() - t0, 15s);
		EXPECT_EQ(in.s->state(), SessionState::Failed);
		EXPECT_GT(fr.good.size(), 0u);
		EXPECT_EQ(fr.bad, 0u);
	}
	soft::destroy_device(dev);
}

TEST(IserProcess, InitiatorKilledTargetCarriesOn)
{
	test::TargetdProcess td;
	std::string why;
	ASSERT_TRUE(td.start(
	    {"--iser-portal", "127.0.0.1:0", "--target", kIqn, "--lun", "0:ram:size=64M"}, &why))
	    << why;
	const std::string portal = "127.0.0.1:" + std::to_string(td.iser_port());
	const pid_t pid = ::fork();
	ASSERT_GE(pid, 0);
	if (pid == 0) {
		::execl(ULP_INITIATOR_PATH, ULP_INITIATOR_PATH, "--transport", "iser", "--portal",
		        portal.c_str(), "--target", kIqn, "--workload", "randwrite", "--runtime",
		        "30", "--quiet", static_cast<char *>(nullptr));
		::_exit(127);
	}
	std::this_thread::sleep_for(1s);
	::kill(pid, SIGKILL);
	int st = 0;
	::waitpid(pid, &st, 0);
	// The target notices, reaps, and serves the next initiator.
	int rc = 0;
	const std::string out2 =
	    run_capture({ULP_INITIATOR_PATH, "--transport", "iser", "--portal", portal, "--target",
	                 kIqn, "--workload", "mixed", "--runtime", "1", "--verify-only", "--quiet"},
	                &rc);
	EXPECT_EQ(rc, 0) << out2 << "\n" << td.log();
	EXPECT_EQ(td.stop(), 0) << td.log();
	EXPECT_NE(td.log().find("connection lost"), std::string::npos)
	    << "the killed initiator's connection was not noticed\n"
	    << td.log();
}

} // namespace
} // namespace ulp::iser
