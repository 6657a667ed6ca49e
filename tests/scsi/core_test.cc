// SPDX-License-Identifier: MIT
// The SCSI target core through the loopback fabric: the command life cycle, LUN lookup and
// ACLs, residuals, unit attentions, task attributes, every task management function
// (including racing completions), and session teardown.
#include "scsi/core.h"
#include "scsi_test_util.h"

#include <atomic>
#include <random>
#include <thread>

namespace ulp::scsi
{
namespace
{

using namespace test;
using std::chrono::milliseconds;

std::vector<uint8_t> pattern(size_t n, uint32_t seed)
{
	std::vector<uint8_t> v(n);
	uint32_t x = seed * 2654435761u + 7;
	for (auto &b : v) {
		x = x * 1103515245u + 12345u;
		b = uint8_t(x >> 16);
	}
	return v;
}

TEST(ScsiCore, WriteThenReadBack)
{
	Target t;
	t.add(0);
	Nexus *s = t.login("iqn.init:a");
	auto data = pattern(8 * 512, 1);
	auto w = t.lb.run(s, 0, cdb_rw16(true, 10, 8), DataDir::Write, data);
	ASSERT_TRUE(w.finished);
	EXPECT_EQ(w.status, Status::Good);
	EXPECT_EQ(w.resid, Residual::None);
	auto r =
	    t.lb.run(s, 0, cdb_rw10(false, 10, 8), DataDir::Read, std::vector<uint8_t>(8 * 512));
	ASSERT_TRUE(r.finished);
	EXPECT_EQ(r.status, Status::Good);
	EXPECT_EQ(r.data, data);
}

TEST(ScsiCore, FirstCommandOfANexusReportsPowerOn)
{
	Target t;
	t.add(0);
	Nexus *s = t.lb.login(t.tpg, "iqn.init:a");
	// INQUIRY is exempt and leaves the condition in place (SPC-4 5.14).
	auto inq = t.lb.run(s, 0, cdb_inquiry(36), DataDir::Read, std::vector<uint8_t>(36));
	EXPECT_EQ(inq.status, Status::Good);
	auto r = t.lb.run(s, 0, cdb_tur(), DataDir::None);
	EXPECT_EQ(r.status, Status::CheckCondition);
	EXPECT_EQ(r.key(), SenseKey::UnitAttention);
	EXPECT_EQ(r.asc(), UA_POWER_ON);
	EXPECT_EQ(t.lb.run(s, 0, cdb_tur(), DataDir::None).status, Status::Good);
}

TEST(ScsiCore, RequestSenseReturnsAndClearsTheUnitAttention)
{
	Target t;
	t.add(0);
	Nexus *s = t.lb.login(t.tpg, "iqn.init:a");
	auto r = t.lb.run(s, 0, cdb_request_sense(), DataDir::Read, std::vector<uint8_t>(18));
	ASSERT_EQ(r.status, Status::Good);
	ASSERT_EQ(r.data.size(), 18u);
	EXPECT_EQ(r.data[2] & 0xf, uint8_t(SenseKey::UnitAttention));
	EXPECT_EQ(get_be16(&r.data[12]), UA_POWER_ON);
	EXPECT_EQ(t.lb.run(s, 0, cdb_tur(), DataDir::None).status, Status::Good);
}

TEST(ScsiCore, MissingLun)
{
	Target t;
	t.add(0);
	Nexus *s = t.login("iqn.init:a");
	auto r = t.lb.run(s, 5, cdb_tur(), DataDir::None);
	EXPECT_EQ(r.status, Status::CheckCondition);
	EXPECT_EQ(r.key(), SenseKey::IllegalRequest);
	EXPECT_EQ(r.asc(), 0x2500);
	// INQUIRY answers for it: peripheral qualifier 011b, type 1Fh (SPC-4 6.6.2).
	auto inq = t.lb.run(s, 5, cdb_inquiry(36), DataDir::Read, std::vector<uint8_t>(36));
	EXPECT_EQ(inq.status, Status::Good);
	ASSERT_FALSE(inq.data.empty());
	EXPECT_EQ(inq.data[0], 0x7f);
	// REPORT LUNS from a missing LUN lists the real ones.
	auto rl = t.lb.run(s, 5, cdb_report_luns(), DataDir::Read, std::vector<uint8_t>(4096));
	EXPECT_EQ(rl.status, Status::Good);
	ASSERT_GE(rl.data.size(), 16u);
	EXPECT_EQ(get_be32(&rl.data[0]), 8u);
}

TEST(ScsiCore, UnsupportedOpcodeAndBadCdbLength)
{
	Target t;
	t.add(0);
	Nexus *s = t.login("iqn.init:a");
	std::vector<uint8_t> c(6, 0);
	c[0] = 0xc7; // vendor specific: not ours
	auto r = t.lb.run(s, 0, c, DataDir::None);
	EXPECT_EQ(r.key(), SenseKey::IllegalRequest);
	EXPECT_EQ(r.asc(), 0x2000);
	auto r2 = t.lb.run(s, 0, std::vector<uint8_t>(3, 0), DataDir::None);
	EXPECT_EQ(r2.status, Status::CheckCondition);
}

TEST(ScsiCore, ReadResidualsAgainstTheExpectedLength)
{
	Target t;
	t.add(0);
	Nexus *s = t.login("iqn.init:a");
	auto data = pattern(4 * 512, 2);
	ASSERT_EQ(t.lb.run(s, 0, cdb_rw16(true, 0, 4), DataDir::Write, data).status, Status::Good);
	// Expected length above the CDB's: underflow, the CDB's bytes move.
	auto u =
	    t.lb.run(s, 0, cdb_rw16(false, 0, 4), DataDir::Read, std::vector<uint8_t>(8 * 512));
	EXPECT_EQ(u.status, Status::Good);
	EXPECT_EQ(u.resid, Residual::Underflow);
	EXPECT_EQ(u.resid_count, 4u * 512);
	EXPECT_EQ(u.data, data);
	// Below: overflow; only the expected length moves.
	auto o = t.lb.run(s, 0, cdb_rw16(false, 0, 4), DataDir::Read, std::vector<uint8_t>(512));
	EXPECT_EQ(o.status, Status::Good);
	EXPECT_EQ(o.resid, Residual::Overflow);
	EXPECT_EQ(o.resid_count, 3u * 512);
	EXPECT_EQ(o.data, std::vector<uint8_t>(data.begin(), data.begin() + 512));
	// INQUIRY with more room than its data (96 bytes since the version descriptors,
	// spc_test.cc checks the layout): underflow of what was not sent.
	auto inq = t.lb.run(s, 0, cdb_inquiry(255), DataDir::Read, std::vector<uint8_t>(255));
	EXPECT_EQ(inq.resid, Residual::Underflow);
	ASSERT_LT(inq.data.size(), 255u);
	EXPECT_EQ(inq.resid_count, 255u - inq.data.size());
}

// SAM-5 5.4.2 and libiscsi's iSCSIResiduals: a WRITE whose expected length differs from
// the CDB's writes the whole blocks both allow, no more, and reports the rest.
TEST(ScsiCore, WriteResidualsWriteOnlyWhatBothAllow)
{
	Target t;
	t.add(0);
	Nexus *s = t.login("iqn.init:a");
	auto a = pattern(1024, 1);
	ASSERT_EQ(t.lb.run(s, 0, cdb_rw16(true, 0, 2), DataDir::Write, a).status, Status::Good);
	// Two blocks in the CDB, one sent: the first block is written, overflow of one.
	auto b = pattern(512, 2);
	auto o = t.lb.run(s, 0, cdb_rw16(true, 0, 2), DataDir::Write, b);
	EXPECT_EQ(o.status, Status::Good);
	EXPECT_EQ(o.resid, Residual::Overflow);
	EXPECT_EQ(o.resid_count, 512u);
	auto r = t.lb.run(s, 0, cdb_rw16(false, 0, 2), DataDir::Read, std::vector<uint8_t>(1024));
	EXPECT_EQ(std::vector<uint8_t>(r.data.begin(), r.data.begin() + 512), b);
	EXPECT_EQ(std::vector<uint8_t>(r.data.begin() + 512, r.data.end()),
	          std::vector<uint8_t>(a.begin() + 512, a.end()))
	    << "the block the initiator did not send was written";
	// One block in the CDB, two sent: one written, underflow of one.
	auto c = pattern(1024, 3);
	auto u = t.lb.run(s, 0, cdb_rw16(true, 0, 1), DataDir::Write, c);
	EXPECT_EQ(u.status, Status::Good);
	EXPECT_EQ(u.resid, Residual::Underflow);
	EXPECT_EQ(u.resid_count, 512u);
	r = t.lb.run(s, 0, cdb_rw16(false, 0, 2), DataDir::Read, std::vector<uint8_t>(1024));
	EXPECT_EQ(std::vector<uint8_t>(r.data.begin(), r.data.begin() + 512),
	          std::vector<uint8_t>(c.begin(), c.begin() + 512));
	EXPECT_EQ(std::vector<uint8_t>(r.data.begin() + 512, r.data.end()),
	          std::vector<uint8_t>(a.begin() + 512, a.end()));
	// Nothing sent: nothing written, GOOD with the whole CDB length as overflow.
	auto z = t.lb.run(s, 0, cdb_rw16(true, 0, 1), DataDir::Write, {});
	EXPECT_EQ(z.status, Status::Good);
	EXPECT_EQ(z.resid, Residual::Overflow);
	EXPECT_EQ(z.resid_count, 512u);
	// A length that ends inside a block would tear it: refused.
	auto p = t.lb.run(s, 0, cdb_rw16(true, 0, 1), DataDir::Write, pattern(200, 4));
	EXPECT_EQ(p.status, Status::CheckCondition);
	EXPECT_EQ(p.asc(), 0x0e03);
}

// A READ announced by the transport as a write runs and answers without data-in (LIO's
// behaviour; libiscsi Read10Invalid). A WRITE announced as a read cannot get its data.
TEST(ScsiCore, DirectionMismatch)
{
	Target t;
	t.add(0);
	Nexus *s = t.login("iqn.init:a");
	auto r = t.lb.run(s, 0, cdb_rw16(false, 0, 1), DataDir::Write, pattern(512, 5));
	EXPECT_EQ(r.status, Status::Good);
	EXPECT_TRUE(r.data.empty());
	auto w = t.lb.run(s, 0, cdb_rw16(true, 0, 1), DataDir::Read, std::vector<uint8_t>(512));
	EXPECT_EQ(w.status, Status::CheckCondition);
	EXPECT_EQ(w.asc(), 0x0e03);
}

TEST(ScsiCore, LbaOutOfRange)
{
	Target t;
	t.add(0, 1 << 20); // 2048 blocks
	Nexus *s = t.login("iqn.init:a");
	auto r =
	    t.lb.run(s, 0, cdb_rw16(false, 2047, 2), DataDir::Read, std::vector<uint8_t>(1024));
	EXPECT_EQ(r.asc(), 0x2100);
	auto r2 = t.lb.run(s, 0, cdb_rw16(false, UINT64_MAX, 1), DataDir::Read,
	                   std::vector<uint8_t>(512));
	EXPECT_EQ(r2.asc(), 0x2100) << "lba + blocks wraps";
	EXPECT_EQ(t.lb.run(s, 0, cdb_rw16(false, 2047, 1), DataDir::Read, std::vector<uint8_t>(512))
	              .status,
	          Status::Good);
}

TEST(ScsiCore, WriteProtect)
{
	Target t;
	LuConfig c;
	c.read_only = true;
	t.add(0, 1 << 20, c);
	t.add(1, 1 << 20, {}, false, /*read_only=*/true);
	Nexus *s = t.login("iqn.init:a");
	ASSERT_EQ(t.lb.run(s, 1, cdb_tur(), DataDir::None).status, Status::CheckCondition);
	for (uint64_t lun : {0, 1}) {
		auto r = t.lb.run(s, lun, cdb_rw16(true, 0, 1), DataDir::Write, pattern(512, 4));
		EXPECT_EQ(r.key(), SenseKey::DataProtect) << "lun " << lun;
		EXPECT_EQ(r.asc(), 0x2700);
		EXPECT_EQ(t.lb.run(s, lun, cdb_rw16(false, 0, 1), DataDir::Read,
		                   std::vector<uint8_t>(512))
		              .status,
		          Status::Good);
	}
}

TEST(ScsiCore, AclsDecideWhoLogsInAndWhatTheySee)
{
	Target t;
	t.add(0);
	t.add(3);
	NodeAcl a;
	a.initiator = "iqn.init:allowed";
	a.luns[7] = {3, true}; // sees LUN 3 as LUN 7, read-only
	ASSERT_EQ(t.tpg.add_acl(a), 0);
	EXPECT_EQ(t.lb.login(t.tpg, "iqn.init:other"), nullptr);
	EXPECT_EQ(errno, EACCES);
	Nexus *s = t.login("iqn.init:allowed", 7);
	auto rl = t.lb.run(s, 7, cdb_report_luns(), DataDir::Read, std::vector<uint8_t>(64));
	ASSERT_EQ(rl.status, Status::Good);
	EXPECT_EQ(get_be32(&rl.data[0]), 8u);
	EXPECT_EQ(get_be16(&rl.data[8]), 7u);
	EXPECT_EQ(t.lb.run(s, 0, cdb_tur(), DataDir::None).asc(), 0x2500);
	EXPECT_EQ(t.lb.run(s, 7, cdb_rw16(true, 0, 1), DataDir::Write, pattern(512, 5)).asc(),
	          0x2700);
}

// ---- Task attributes (SAM-5 8.6) ---------------------------------------------------------

TEST(ScsiCore, OrderedWaitsForOlderAndHoldsBackNewer)
{
	Target t;
	t.add(0, 1 << 20, {}, true);
	Nexus *s = t.login("iqn.init:a");
	GatedBackstore *g = t.gates[0];
	g->close();
	auto *r1 = t.lb.start_async(s, 0, cdb_rw16(false, 0, 1), DataDir::Read,
	                            std::vector<uint8_t>(512), TaskAttr::Simple, 1);
	ASSERT_TRUE(g->wait_held(1));
	auto *ord = t.lb.start_async(s, 0, cdb_rw16(false, 1, 1), DataDir::Read,
	                             std::vector<uint8_t>(512), TaskAttr::Ordered, 2);
	auto *r3 = t.lb.start_async(s, 0, cdb_rw16(false, 2, 1), DataDir::Read,
	                            std::vector<uint8_t>(512), TaskAttr::Simple, 3);
	auto *hoq = t.lb.start_async(s, 0, cdb_rw16(false, 3, 1), DataDir::Read,
	                             std::vector<uint8_t>(512), TaskAttr::HeadOfQueue, 4);
	EXPECT_EQ(t.lb.state(ord), CmdState::Dormant);
	EXPECT_EQ(t.lb.state(r3), CmdState::Dormant);
	ASSERT_TRUE(g->wait_held(2)) << "HEAD OF QUEUE starts at once";
	EXPECT_EQ(t.lb.state(hoq), CmdState::Executing);
	// Let the first two I/Os through but keep the gate closed: ORDERED starts, SIMPLE
	// behind it still waits.
	g->open(true);
	EXPECT_EQ(t.lb.wait(r1).status, Status::Good);
	EXPECT_EQ(t.lb.wait(hoq).status, Status::Good);
	ASSERT_TRUE(g->wait_held(1));
	EXPECT_EQ(t.lb.state(ord), CmdState::Executing);
	EXPECT_EQ(t.lb.state(r3), CmdState::Dormant);
	g->open(true);
	EXPECT_EQ(t.lb.wait(ord).status, Status::Good);
	ASSERT_TRUE(g->wait_held(1));
	g->open();
	EXPECT_EQ(t.lb.wait(r3).status, Status::Good);
}

// The task set is split by the submitting thread (scsi/lu.h): an ORDERED command still waits
// for the SIMPLE ones other threads submitted, and holds back later ones from any thread.
TEST(ScsiCore, OrderedWaitsForCommandsOfOtherThreads)
{
	Target t;
	t.add(0, 1 << 20, {}, true);
	Nexus *s = t.login("iqn.init:a");
	GatedBackstore *g = t.gates[0];
	g->close();
	// Each command submitted from a thread of its own, so from a shard of its own.
	auto submit = [&](uint64_t lba, TaskAttr attr, uint64_t tag) {
		Loopback::Pending *p = nullptr;
		std::thread th([&] {
			p = t.lb.start_async(s, 0, cdb_rw16(false, lba, 1), DataDir::Read,
			                     std::vector<uint8_t>(512), attr, tag);
		});
		th.join();
		return p;
	};
	auto *r1 = submit(0, TaskAttr::Simple, 1);
	auto *r2 = submit(1, TaskAttr::Simple, 2);
	ASSERT_TRUE(g->wait_held(2));
	auto *ord = submit(2, TaskAttr::Ordered, 3);
	auto *r4 = submit(3, TaskAttr::Simple, 4);
	EXPECT_EQ(t.lb.state(ord), CmdState::Dormant);
	EXPECT_EQ(t.lb.state(r4), CmdState::Dormant);
	g->open(true); // the two SIMPLE ones end; ORDERED starts, the one behind it waits
	EXPECT_EQ(t.lb.wait(r1).status, Status::Good);
	EXPECT_EQ(t.lb.wait(r2).status, Status::Good);
	ASSERT_TRUE(g->wait_held(1));
	EXPECT_EQ(t.lb.state(ord), CmdState::Executing);
	EXPECT_EQ(t.lb.state(r4), CmdState::Dormant);
	g->open(true);
	EXPECT_EQ(t.lb.wait(ord).status, Status::Good);
	ASSERT_TRUE(g->wait_held(1));
	EXPECT_EQ(t.lb.state(r4), CmdState::Executing);
	g->open();
	EXPECT_EQ(t.lb.wait(r4).status, Status::Good);
	EXPECT_EQ(t.lus[0]->task_count(), 0u);
}

// ---- Task management ---------------------------------------------------------------------

TEST(ScsiTmf, AbortTaskWaitsForTheBackstore)
{
	Target t;
	t.add(0, 1 << 20, {}, true);
	Nexus *s = t.login("iqn.init:a");
	GatedBackstore *g = t.gates[0];
	g->close();
	auto *r = t.lb.start_async(s, 0, cdb_rw16(false, 0, 8), DataDir::Read,
	                           std::vector<uint8_t>(4096), TaskAttr::Simple, 0x42);
	ASSERT_TRUE(g->wait_held(1));
	auto *tm = t.lb.tmf_start(s, TmfType::AbortTask, 0, 0x42);
	// The function must not answer while the read is still with the backstore.
	std::this_thread::sleep_for(milliseconds(50));
	EXPECT_FALSE(t.lb.tmf_answered(tm));
	EXPECT_EQ(t.lb.state(r), CmdState::Executing);
	g->open();
	EXPECT_EQ(t.lb.tmf_wait(tm), TmfResponse::Complete);
	auto res = t.lb.wait(r);
	EXPECT_TRUE(res.finished);
	EXPECT_TRUE(res.aborted) << "an aborted task of the asking nexus gets no status";
	EXPECT_EQ(t.lb.tmf(s, TmfType::AbortTask, 0, 0x42), TmfResponse::TaskNotFound);
}

TEST(ScsiTmf, AbortTaskInWritePendingStopsTheTransfer)
{
	Target t;
	t.add(0);
	Nexus *s = t.login("iqn.init:a");
	auto *w = t.lb.start_async(s, 0, cdb_rw16(true, 0, 1), DataDir::Write, pattern(512, 6),
	                           TaskAttr::Simple, 7, /*hold_write=*/true);
	EXPECT_EQ(t.lb.state(w), CmdState::WritePending);
	EXPECT_EQ(t.lb.tmf(s, TmfType::AbortTask, 0, 7), TmfResponse::Complete);
	auto res = t.lb.wait(w);
	EXPECT_TRUE(res.aborted);
	// Nothing was written.
	auto r = t.lb.run(s, 0, cdb_rw16(false, 0, 1), DataDir::Read, std::vector<uint8_t>(512));
	EXPECT_EQ(r.data, std::vector<uint8_t>(512, 0));
}

TEST(ScsiTmf, AbortTaskOfADormantCommand)
{
	Target t;
	t.add(0, 1 << 20, {}, true);
	Nexus *s = t.login("iqn.init:a");
	GatedBackstore *g = t.gates[0];
	g->close();
	auto *r1 = t.lb.start_async(s, 0, cdb_rw16(false, 0, 1), DataDir::Read,
	                            std::vector<uint8_t>(512), TaskAttr::Simple, 1);
	ASSERT_TRUE(g->wait_held(1));
	auto *ord = t.lb.start_async(s, 0, cdb_tur(), DataDir::None, {}, TaskAttr::Ordered, 2);
	EXPECT_EQ(t.lb.state(ord), CmdState::Dormant);
	EXPECT_EQ(t.lb.tmf(s, TmfType::AbortTask, 0, 2), TmfResponse::Complete);
	EXPECT_TRUE(t.lb.wait(ord).aborted);
	g->open();
	EXPECT_EQ(t.lb.wait(r1).status, Status::Good);
}

TEST(ScsiTmf, AbortTaskSetIsPerNexusClearTaskSetIsNot)
{
	for (bool tas : {true, false}) {
		SCOPED_TRACE(tas ? "TAS 1" : "TAS 0");
		Target t;
		LuConfig c;
		c.tas = tas;
		t.add(0, 1 << 20, c, true);
		Nexus *a = t.login("iqn.init:a");
		Nexus *b = t.login("iqn.init:b");
		GatedBackstore *g = t.gates[0];
		g->close();
		auto *ra = t.lb.start_async(a, 0, cdb_rw16(false, 0, 1), DataDir::Read,
		                            std::vector<uint8_t>(512), TaskAttr::Simple, 1);
		auto *rb = t.lb.start_async(b, 0, cdb_rw16(false, 0, 1), DataDir::Read,
		                            std::vector<uint8_t>(512), TaskAttr::Simple, 1);
		ASSERT_TRUE(g->wait_held(2));
		// ABORT TASK SET from a: only a's command.
		auto *tm = t.lb.tmf_start(a, TmfType::AbortTaskSet, 0);
		EXPECT_FALSE(t.lb.tmf_answered(tm));
		g->open(true);
		EXPECT_EQ(t.lb.tmf_wait(tm), TmfResponse::Complete);
		EXPECT_TRUE(t.lb.wait(ra).aborted);
		EXPECT_EQ(t.lb.wait(rb).status, Status::Good);
		// CLEAR TASK SET from a: b's command too, with TASK ABORTED when TAS is set,
		// else silently and with COMMANDS CLEARED BY ANOTHER INITIATOR for b.
		auto *rb2 = t.lb.start_async(b, 0, cdb_rw16(false, 0, 1), DataDir::Read,
		                             std::vector<uint8_t>(512), TaskAttr::Simple, 2);
		ASSERT_TRUE(g->wait_held(1));
		auto *tm2 = t.lb.tmf_start(a, TmfType::ClearTaskSet, 0);
		g->open();
		EXPECT_EQ(t.lb.tmf_wait(tm2), TmfResponse::Complete);
		auto res = t.lb.wait(rb2);
		if (tas) {
			EXPECT_FALSE(res.aborted);
			EXPECT_EQ(res.status, Status::TaskAborted);
			EXPECT_EQ(t.lb.run(b, 0, cdb_tur(), DataDir::None).status, Status::Good);
		} else {
			EXPECT_TRUE(res.aborted);
			EXPECT_EQ(t.lb.run(b, 0, cdb_tur(), DataDir::None).asc(),
			          UA_COMMANDS_CLEARED);
		}
	}
}

TEST(ScsiTmf, LunResetAbortsAllAndTellsEveryNexus)
{
	Target t;
	t.add(0, 1 << 20, {}, true);
	t.add(1);
	Nexus *a = t.login("iqn.init:a");
	Nexus *b = t.login("iqn.init:b");
	ASSERT_EQ(t.lb.run(a, 1, cdb_tur(), DataDir::None).asc(), UA_POWER_ON);
	GatedBackstore *g = t.gates[0];
	g->close();
	auto *rb = t.lb.start_async(b, 0, cdb_rw16(false, 0, 1), DataDir::Read,
	                            std::vector<uint8_t>(512), TaskAttr::Simple, 9);
	ASSERT_TRUE(g->wait_held(1));
	auto *tm = t.lb.tmf_start(a, TmfType::LunReset, 0);
	EXPECT_FALSE(t.lb.tmf_answered(tm));
	g->open();
	EXPECT_EQ(t.lb.tmf_wait(tm), TmfResponse::Complete);
	EXPECT_EQ(t.lb.wait(rb).status, Status::TaskAborted); // TAS is on by default
	EXPECT_EQ(t.lb.run(a, 0, cdb_tur(), DataDir::None).asc(), UA_BUS_DEVICE_RESET);
	EXPECT_EQ(t.lb.run(b, 0, cdb_tur(), DataDir::None).asc(), UA_BUS_DEVICE_RESET);
	EXPECT_EQ(t.lb.run(a, 1, cdb_tur(), DataDir::None).status, Status::Good)
	    << "another LU is untouched";
	EXPECT_EQ(t.lb.tmf(a, TmfType::LunReset, 9), TmfResponse::LunNotFound);
}

TEST(ScsiTmf, ITNexusResetCoversEveryLu)
{
	Target t;
	t.add(0, 1 << 20, {}, true);
	t.add(1, 1 << 20, {}, true);
	Nexus *a = t.login("iqn.init:a");
	ASSERT_EQ(t.lb.run(a, 1, cdb_tur(), DataDir::None).asc(), UA_POWER_ON);
	t.gates[0]->close();
	t.gates[1]->close();
	auto *r0 = t.lb.start_async(a, 0, cdb_rw16(false, 0, 1), DataDir::Read,
	                            std::vector<uint8_t>(512), TaskAttr::Simple, 1);
	auto *r1 = t.lb.start_async(a, 1, cdb_rw16(false, 0, 1), DataDir::Read,
	                            std::vector<uint8_t>(512), TaskAttr::Simple, 2);
	ASSERT_TRUE(t.gates[0]->wait_held(1));
	ASSERT_TRUE(t.gates[1]->wait_held(1));
	auto *tm = t.lb.tmf_start(a, TmfType::ITNexusReset, 0);
	t.gates[0]->open();
	EXPECT_FALSE(t.lb.tmf_answered(tm)) << "LU 1's read is still held";
	t.gates[1]->open();
	EXPECT_EQ(t.lb.tmf_wait(tm), TmfResponse::Complete);
	EXPECT_TRUE(t.lb.wait(r0).aborted);
	EXPECT_TRUE(t.lb.wait(r1).aborted);
	EXPECT_EQ(t.lb.run(a, 0, cdb_tur(), DataDir::None).asc(), UA_I_T_NEXUS_LOSS);
	EXPECT_EQ(t.lb.run(a, 1, cdb_tur(), DataDir::None).asc(), UA_I_T_NEXUS_LOSS);
}

// SPC-2 RESERVE (6), PERSISTENT RESERVE OUT REGISTER of key and PERSISTENT RESERVE IN READ
// KEYS: reservation state that target resets treat differently.
std::vector<uint8_t> cdb_reserve6()
{
	return {0x16, 0, 0, 0, 0, 0};
}

LoopResult register_key(Target &t, Nexus *s, uint64_t lun, uint64_t key)
{
	std::vector<uint8_t> c(10, 0), p(24, 0);
	c[0] = 0x5f; // PERSISTENT RESERVE OUT, REGISTER
	put_be32(&c[5], 24);
	put_be64(&p[8], key); // SERVICE ACTION RESERVATION KEY
	return t.lb.run(s, lun, c, DataDir::Write, p);
}

// PRgeneration and the keys registered.
std::pair<uint32_t, std::vector<uint64_t>> read_keys(Target &t, Nexus *s, uint64_t lun)
{
	std::vector<uint8_t> c(10, 0);
	c[0] = 0x5e; // PERSISTENT RESERVE IN, READ KEYS
	put_be16(&c[7], 256);
	auto r = t.lb.run(s, lun, c, DataDir::Read, std::vector<uint8_t>(256));
	EXPECT_EQ(r.status, Status::Good);
	std::vector<uint64_t> keys;
	if (r.data.size() < 8)
		return {0, keys};
	for (size_t i = 0; i < get_be32(&r.data[4]) / 8 && 8 + 8 * i + 8 <= r.data.size(); i++)
		keys.push_back(get_be64(&r.data[8 + 8 * i]));
	return {get_be32(&r.data[0]), keys};
}

// Clear the unit attentions s has pending on lun (TEST UNIT READY until GOOD).
void drain_ua(Target &t, Nexus *s, uint64_t lun)
{
	for (int i = 0; i < 20; i++)
		if (t.lb.run(s, lun, cdb_tur(), DataDir::None).status == Status::Good)
			return;
	ADD_FAILURE() << "unit attentions do not end";
}

TEST(ScsiTmf, TargetWarmResetResetsEveryLuTheNexusSees)
{
	// SAM-5 / RFC 7143 11.5.1: every LU the issuing nexus knows is reset as by LOGICAL
	// UNIT RESET - its tasks aborted (TASK ABORTED to other nexuses, TAS), its SPC-2
	// reservation released, BUS DEVICE RESET FUNCTION OCCURRED for every nexus;
	// persistent registrations stay. A LU the issuer cannot see is not touched.
	Target t;
	t.add(0, 1 << 20, {}, true);
	t.add(1, 1 << 20, {}, true);
	t.add(2);
	NodeAcl acl_a;
	acl_a.initiator = "iqn.init:a";
	acl_a.luns[0] = {0, false};
	acl_a.luns[1] = {1, false};
	ASSERT_EQ(t.tpg.add_acl(acl_a), 0);
	for (const char *n : {"iqn.init:b", "iqn.init:c"}) {
		NodeAcl all;
		all.initiator = n;
		ASSERT_EQ(t.tpg.add_acl(all), 0);
	}
	Nexus *a = t.login("iqn.init:a");
	Nexus *b = t.login("iqn.init:b");
	Nexus *c = t.login("iqn.init:c");
	for (uint64_t l : {1, 2})
		for (Nexus *s : {a, b, c})
			if (s != a || l != 2)
				drain_ua(t, s, l);
	ASSERT_EQ(t.lb.run(b, 0, cdb_reserve6(), DataDir::None).status, Status::Good);
	ASSERT_EQ(t.lb.run(b, 2, cdb_reserve6(), DataDir::None).status, Status::Good);
	ASSERT_EQ(register_key(t, c, 1, 0xabc).status, Status::Good);
	t.gates[0]->close();
	t.gates[1]->close();
	auto *r0 = t.lb.start_async(b, 0, cdb_rw16(false, 0, 1), DataDir::Read,
	                            std::vector<uint8_t>(512), TaskAttr::Simple, 1);
	auto *r1 = t.lb.start_async(c, 1, cdb_rw16(false, 0, 1), DataDir::Read,
	                            std::vector<uint8_t>(512), TaskAttr::Simple, 2);
	ASSERT_TRUE(t.gates[0]->wait_held(1));
	ASSERT_TRUE(t.gates[1]->wait_held(1));
	auto *tm = t.lb.tmf_start(a, TmfType::TargetWarmReset, 0);
	t.gates[0]->open();
	EXPECT_FALSE(t.lb.tmf_answered(tm)) << "LU 1's read is still held";
	t.gates[1]->open();
	EXPECT_EQ(t.lb.tmf_wait(tm), TmfResponse::Complete);
	EXPECT_EQ(t.lb.wait(r0).status, Status::TaskAborted);
	EXPECT_EQ(t.lb.wait(r1).status, Status::TaskAborted);
	for (Nexus *s : {a, b, c})
		for (uint64_t l : {0, 1})
			EXPECT_EQ(t.lb.run(s, l, cdb_tur(), DataDir::None).asc(),
			          UA_BUS_DEVICE_RESET)
			    << s->initiator() << " LUN " << l;
	// LU 0's SPC-2 reservation is gone; LU 2 (hidden from a) keeps b's, and no UA.
	EXPECT_EQ(
	    t.lb.run(c, 0, cdb_rw16(false, 0, 1), DataDir::Read, std::vector<uint8_t>(512)).status,
	    Status::Good);
	EXPECT_EQ(
	    t.lb.run(c, 2, cdb_rw16(false, 0, 1), DataDir::Read, std::vector<uint8_t>(512)).status,
	    Status::ReservationConflict);
	EXPECT_EQ(t.lb.run(b, 2, cdb_tur(), DataDir::None).status, Status::Good);
	EXPECT_EQ(read_keys(t, c, 1).second, std::vector<uint64_t>{0xabc})
	    << "persistent registrations survive a warm reset";
}

TEST(ScsiTmf, TargetColdResetIsAPowerOn)
{
	// RFC 7143 11.5.1: a cold reset is a power on. Registrations and reservations of
	// every kind are gone (the LU has no state store: nothing persists), PRgeneration starts
	// again at 0, the mode parameters are the defaults again, and each nexus first hears
	// POWER ON, RESET, OR BUS DEVICE RESET OCCURRED - the conditions queued before are
	// gone with the rest of the volatile state.
	Target t;
	LogicalUnit &lu = t.add(0, 1 << 20, {}, true);
	Nexus *a = t.login("iqn.init:a");
	Nexus *b = t.login("iqn.init:b");
	ASSERT_EQ(register_key(t, a, 0, 0x11).status, Status::Good);
	ASSERT_EQ(register_key(t, b, 0, 0x22).status, Status::Good);
	std::vector<uint8_t> prr(10, 0), key(24, 0);
	prr[0] = 0x5f; // PERSISTENT RESERVE OUT, RESERVE, WRITE EXCLUSIVE
	prr[1] = 0x01;
	prr[2] = 0x01;
	put_be32(&prr[5], 24);
	put_be64(&key[0], 0x22);
	ASSERT_EQ(t.lb.run(b, 0, prr, DataDir::Write, key).status, Status::Good);
	ASSERT_EQ(t.lb.run(a, 0, cdb_rw16(true, 0, 1), DataDir::Write, pattern(512, 1)).status,
	          Status::ReservationConflict);
	lu.set_swp(true);
	lu.set_wce(false);
	lu.ua_add(a->id(), UA_MODE_PARAMS_CHANGED);
	t.gates[0]->close();
	auto *r = t.lb.start_async(b, 0, cdb_rw16(false, 0, 1), DataDir::Read,
	                           std::vector<uint8_t>(512), TaskAttr::Simple, 1);
	ASSERT_TRUE(t.gates[0]->wait_held(1));
	auto *tm = t.lb.tmf_start(a, TmfType::TargetColdReset, 0);
	EXPECT_FALSE(t.lb.tmf_answered(tm));
	t.gates[0]->open();
	EXPECT_EQ(t.lb.tmf_wait(tm), TmfResponse::Complete);
	EXPECT_EQ(t.lb.wait(r).status, Status::TaskAborted);
	EXPECT_FALSE(lu.swp());
	EXPECT_EQ(lu.wce(), lu.bs().write_cache());
	for (Nexus *s : {a, b}) {
		EXPECT_EQ(t.lb.run(s, 0, cdb_tur(), DataDir::None).asc(), UA_POWER_ON);
		EXPECT_EQ(t.lb.run(s, 0, cdb_tur(), DataDir::None).status, Status::Good)
		    << "nothing queued before the power on is left";
	}
	auto [gen, keys] = read_keys(t, a, 0);
	EXPECT_EQ(gen, 0u);
	EXPECT_TRUE(keys.empty());
	EXPECT_EQ(t.lb.run(a, 0, cdb_rw16(true, 0, 1), DataDir::Write, pattern(512, 1)).status,
	          Status::Good)
	    << "b's reservation and the write protect are gone";
}

TEST(ScsiTmf, QueryFunctions)
{
	Target t;
	t.add(0, 1 << 20, {}, true);
	Nexus *a = t.login("iqn.init:a");
	Nexus *b = t.lb.login(t.tpg, "iqn.init:b");
	EXPECT_EQ(t.lb.tmf(b, TmfType::QueryAsyncEvent, 0), TmfResponse::Succeeded)
	    << "b has its POWER ON pending";
	EXPECT_EQ(t.lb.tmf(a, TmfType::QueryAsyncEvent, 0), TmfResponse::Complete);
	t.gates[0]->close();
	auto *r = t.lb.start_async(a, 0, cdb_rw16(false, 0, 1), DataDir::Read,
	                           std::vector<uint8_t>(512), TaskAttr::Simple, 5);
	ASSERT_TRUE(t.gates[0]->wait_held(1));
	EXPECT_EQ(t.lb.tmf(a, TmfType::QueryTask, 0, 5), TmfResponse::Succeeded);
	EXPECT_EQ(t.lb.tmf(a, TmfType::QueryTask, 0, 6), TmfResponse::Complete);
	EXPECT_EQ(t.lb.tmf(a, TmfType::QueryTaskSet, 0), TmfResponse::Succeeded);
	EXPECT_EQ(t.lb.tmf(b, TmfType::QueryTaskSet, 0), TmfResponse::Complete);
	EXPECT_EQ(t.lb.tmf(a, TmfType::ClearAca, 0), TmfResponse::NotSupported);
	t.gates[0]->open();
	EXPECT_EQ(t.lb.wait(r).status, Status::Good);
	EXPECT_EQ(t.lb.tmf(a, TmfType::QueryTask, 0, 5), TmfResponse::Complete);
}

// Runs io(seed, stop) on two threads, seeds 1 and 2, while the calling thread runs tmf()
// over and over for `span`; then stops and joins them. Returns how many times tmf() ran.
template <typename Io, typename Tmf> int race_submitters(Io io, Tmf tmf, milliseconds span)
{
	std::atomic<bool> stop{false};
	std::thread a(io, 1u, std::cref(stop)), b(io, 2u, std::cref(stop));
	int n = 0;
	const auto deadline = std::chrono::steady_clock::now() + span;
	while (std::chrono::steady_clock::now() < deadline) {
		tmf();
		n++;
	}
	stop = true;
	a.join();
	b.join();
	return n;
}

// TMFs racing completions: reads, writes and aborts of random tags from three threads on
// a real backstore. Every command is answered exactly once (finished), every TMF is
// answered, and the task set is empty at the end.
TEST(ScsiTmf, AbortsRacingCompletions)
{
	Target t;
	t.add(0, 4 << 20);
	Nexus *s = t.login("iqn.init:a");
	std::atomic<uint64_t> next_tag{1};
	std::atomic<int> aborted{0}, good{0}, bad{0};
	auto io = [&](uint32_t seed, const std::atomic<bool> &stop) {
		std::mt19937 rng(seed);
		std::vector<Loopback::Pending *> inflight;
		while (!stop.load()) {
			for (int i = 0; i < 8; i++) {
				uint64_t tag = next_tag.fetch_add(1);
				bool w = rng() & 1;
				// Each thread and each command in flight on blocks of its own: the
				// RAM backstore does not order overlapping I/O (SBC leaves it
				// undefined), and this test is about the core's bookkeeping.
				uint64_t lba = (seed - 1) * 4000 + uint64_t(i) * 500 + rng() % 500;
				inflight.push_back(t.lb.start_async(
				    s, 0, cdb_rw16(w, lba, 1), w ? DataDir::Write : DataDir::Read,
				    w ? pattern(512, uint32_t(tag)) : std::vector<uint8_t>(512),
				    TaskAttr::Simple, tag));
			}
			for (auto *p : inflight) {
				auto r = t.lb.wait(p, std::chrono::seconds(20));
				if (!r.finished)
					bad++;
				else if (r.aborted)
					aborted++;
				else if (r.status == Status::Good)
					good++;
				else
					bad++;
			}
			inflight.clear();
		}
	};
	std::mt19937 rng(3);
	const int tmfs = race_submitters(
	    io,
	    [&] {
		    uint64_t hi = next_tag.load();
		    TmfResponse r =
		        t.lb.tmf(s, (rng() % 16) ? TmfType::AbortTask : TmfType::AbortTaskSet, 0,
		                 hi - 1 - rng() % 8, std::chrono::seconds(20));
		    EXPECT_NE(r, TmfResponse::Failed);
	    },
	    milliseconds(1500));
	EXPECT_EQ(bad.load(), 0);
	EXPECT_GT(good.load(), 0);
	EXPECT_EQ(t.lus[0]->task_count(), 0u);
	RecordProperty("tmfs", tmfs);
	RecordProperty("aborted", aborted.load());
}

// I_T NEXUS RESET while commands are being submitted on the nexus from two other threads.
// A command joins the nexus's list before its LUN is looked up (so that a LUN removal
// counts it), and the reset walks that list: it must not read a command's LU while the
// submitter is still setting it (TSan's suite runs this). Every command and every reset is
// answered, and nothing is left in the task set.
TEST(ScsiTmf, ITNexusResetRacingSubmissions)
{
	Target t;
	t.add(0, 4 << 20);
	Nexus *s = t.login("iqn.init:a");
	std::atomic<uint64_t> next_tag{1};
	std::atomic<int> answered{0}, lost{0};
	auto io = [&](uint32_t seed, const std::atomic<bool> &stop) {
		std::vector<Loopback::Pending *> inflight;
		while (!stop.load()) {
			for (int i = 0; i < 8; i++)
				inflight.push_back(t.lb.start_async(
				    s, 0, cdb_rw16(false, (seed - 1) * 4000 + uint64_t(i), 1),
				    DataDir::Read, std::vector<uint8_t>(512), TaskAttr::Simple,
				    next_tag.fetch_add(1)));
			for (auto *p : inflight)
				(t.lb.wait(p, std::chrono::seconds(20)).finished ? answered
				                                                 : lost)++;
			inflight.clear();
		}
	};
	const int resets = race_submitters(
	    io,
	    [&] {
		    EXPECT_EQ(t.lb.tmf(s, TmfType::ITNexusReset, 0, 0, std::chrono::seconds(20)),
		              TmfResponse::Complete);
	    },
	    milliseconds(1000));
	EXPECT_EQ(lost.load(), 0);
	EXPECT_GT(answered.load(), 0);
	EXPECT_GT(resets, 0);
	EXPECT_EQ(t.lus[0]->task_count(), 0u);
	RecordProperty("resets", resets);
}

// ---- Sessions ----------------------------------------------------------------------------

TEST(ScsiSession, CloseWaitsForCommandsInFlightThenFrees)
{
	Target t;
	t.add(0, 1 << 20, {}, true);
	Nexus *s = t.login("iqn.init:a");
	t.gates[0]->close();
	auto *r = t.lb.start_async(s, 0, cdb_rw16(false, 0, 1), DataDir::Read,
	                           std::vector<uint8_t>(512), TaskAttr::Simple, 1);
	auto *w = t.lb.start_async(s, 0, cdb_rw16(true, 1, 1), DataDir::Write, pattern(512, 8),
	                           TaskAttr::Simple, 2, /*hold_write=*/true);
	ASSERT_TRUE(t.gates[0]->wait_held(1));
	// Held I/O: a short close gives up and leaves the session intact.
	EXPECT_EQ(t.lb.logout(s, milliseconds(200)), -ETIMEDOUT);
	EXPECT_EQ(t.tpg.sessions().size(), 1u);
	// New commands on a stopping session get no answer of their own.
	EXPECT_TRUE(t.lb.run(s, 0, cdb_tur(), DataDir::None).aborted);
	t.gates[0]->open();
	EXPECT_TRUE(t.lb.wait(r).aborted);
	EXPECT_TRUE(t.lb.wait(w).aborted) << "the write-pending one was stopped";
	EXPECT_EQ(t.lb.logout(s), 0);
	EXPECT_TRUE(t.tpg.sessions().empty());
	// The nexus comes back: its LU tells it what happened.
	Nexus *s2 = t.lb.login(t.tpg, "iqn.init:a");
	EXPECT_EQ(t.lb.run(s2, 0, cdb_tur(), DataDir::None).asc(), UA_I_T_NEXUS_LOSS);
}

// SAM-5 6.3.4: a lost nexus that comes back hears I_T NEXUS LOSS OCCURRED, so the LU keeps
// its unit attention queue after the loss. But an initiator that logs in with a new port
// name each time (a new ISID per login, as ulp-stress does: about 800 bytes a login before)
// must not grow the LU without bound: the queues of at most kMaxLostUa lost nexuses stay,
// the oldest loss forgotten first, and one that returns after that hears POWER ON.
TEST(ScsiSession, LostNexusesKeepABoundedNumberOfUnitAttentionQueues)
{
	Target t;
	t.add(0, 1 << 20);
	LogicalUnit &lu = *t.lus[0];
	const size_t kMax = LogicalUnit::kMaxLostUa, kN = kMax + 200;
	Nexus *live = t.login("iqn.init:live"); // stays logged in throughout
	auto port = [](size_t i) { return "iqn.init:x,i,0x" + std::to_string(1000000 + i); };
	for (size_t i = 0; i < kN; i++) {
		Nexus *s = t.lb.login(t.tpg, "iqn.init:x", port(i));
		ASSERT_TRUE(s);
		ASSERT_EQ(t.lb.run(s, 0, cdb_tur(), DataDir::None).asc(), UA_POWER_ON);
		ASSERT_EQ(t.lb.logout(s), 0);
		ASSERT_LE(lu.ua_nexuses(), kMax + 1) << "after " << i + 1 << " logins";
	}
	EXPECT_EQ(lu.ua_nexuses(), kMax + 1);
	// The live nexus was never forgotten: it has nothing pending.
	EXPECT_EQ(t.lb.run(live, 0, cdb_tur(), DataDir::None).status, Status::Good);
	// The last one lost comes back: I_T NEXUS LOSS. The first one lost was forgotten.
	Nexus *last = t.lb.login(t.tpg, "iqn.init:x", port(kN - 1));
	EXPECT_EQ(t.lb.run(last, 0, cdb_tur(), DataDir::None).asc(), UA_I_T_NEXUS_LOSS);
	Nexus *first = t.lb.login(t.tpg, "iqn.init:x", port(0));
	EXPECT_EQ(t.lb.run(first, 0, cdb_tur(), DataDir::None).asc(), UA_POWER_ON);
	// Back, the returning nexus is live again: kMax more losses do not forget it.
	for (size_t i = 0; i < kMax + 10; i++) {
		Nexus *s = t.lb.login(t.tpg, "iqn.init:y", "iqn.init:y,i,0x" + std::to_string(i));
		ASSERT_TRUE(s);
		ASSERT_EQ(t.lb.run(s, 0, cdb_tur(), DataDir::None).asc(), UA_POWER_ON);
		ASSERT_EQ(t.lb.logout(s), 0);
	}
	EXPECT_EQ(t.lb.run(last, 0, cdb_tur(), DataDir::None).status, Status::Good);
	EXPECT_EQ(lu.ua_nexuses(), kMax + 3) << "live, last, first and kMax lost";
}

TEST(ScsiCore, ManyCommandsInFlight)
{
	Target t;
	t.add(0, 8 << 20);
	Nexus *s = t.login("iqn.init:a");
	constexpr int kN = 2000;
	std::vector<Loopback::Pending *> p;
	for (int i = 0; i < kN; i++)
		p.push_back(t.lb.start_async(s, 0, cdb_rw16(true, uint64_t(i) * 8, 8),
		                             DataDir::Write, pattern(4096, i), TaskAttr::Simple,
		                             i));
	for (auto *x : p)
		ASSERT_EQ(t.lb.wait(x).status, Status::Good);
	p.clear();
	for (int i = 0; i < kN; i++)
		p.push_back(t.lb.start_async(s, 0, cdb_rw16(false, uint64_t(i) * 8, 8),
		                             DataDir::Read, std::vector<uint8_t>(4096),
		                             TaskAttr::Simple, i));
	for (int i = 0; i < kN; i++)
		ASSERT_EQ(t.lb.wait(p[i]).data, pattern(4096, i)) << i;
}

} // namespace
} // namespace ulp::scsi
