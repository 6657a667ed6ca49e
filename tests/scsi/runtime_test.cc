// SPDX-License-Identifier: MIT
// tests/scsi/runtime_test.cc - the target core changed while it serves (ulp-targetd's admin
// interface): LUNs added and removed under live sessions (REPORTED LUNS DATA HAS CHANGED,
// SPC-4 5.14 and 6.33), a removed LU's commands in flight completed or aborted within a
// bound (lu_quiesce), ACLs removed with their sessions left alone.
#include "scsi_test_util.h"

#include "core/log.h"
#include "scsi/core.h"

#include <atomic>
#include <chrono>
#include <future>
#include <thread>

namespace ulp::scsi::test
{
namespace
{

using namespace std::chrono;
using namespace std::chrono_literals;

std::vector<uint8_t> pattern(size_t n, uint8_t seed)
{
	std::vector<uint8_t> v(n);
	for (size_t i = 0; i < n; i++)
		v[i] = uint8_t(i * 7 + seed);
	return v;
}

std::vector<uint64_t> report_luns(Target &t, Nexus *s, uint64_t lun = 0)
{
	auto r = t.lb.run(s, lun, cdb_report_luns(), DataDir::Read, std::vector<uint8_t>(4096));
	EXPECT_EQ(r.status, Status::Good);
	std::vector<uint64_t> v;
	if (r.data.size() < 8)
		return v;
	const uint32_t n = get_be32(&r.data[0]) / 8;
	for (uint32_t i = 0; i < n && 8 + 8 * i + 8 <= r.data.size(); i++)
		v.push_back(get_be16(&r.data[8 + 8 * i]) & 0x3fff);
	return v;
}

std::unique_ptr<LogicalUnit> make_lu(const std::string &name, uint64_t size = 1 << 20)
{
	return std::make_unique<LogicalUnit>(name, ram(size), LuConfig{});
}

TEST(ScsiRuntime, AddedLunRaisesReportedLunsDataHasChanged)
{
	Target t;
	t.add(0);
	Nexus *s = t.login("iqn.init:a"); // POWER ON taken on LUN 0
	EXPECT_EQ(report_luns(t, s), std::vector<uint64_t>{0});

	auto lu1 = make_lu("lu1");
	ASSERT_EQ(t.tpg.add_lun(1, *lu1), 0);
	// The next command on the LUN it already uses tells it the inventory changed.
	auto r = t.lb.run(s, 0, cdb_tur(), DataDir::None);
	EXPECT_EQ(r.status, Status::CheckCondition);
	EXPECT_EQ(r.key(), SenseKey::UnitAttention);
	EXPECT_EQ(r.asc(), 0x3f0e);
	EXPECT_EQ(t.lb.run(s, 0, cdb_tur(), DataDir::None).status, Status::Good);
	EXPECT_EQ(report_luns(t, s), (std::vector<uint64_t>{0, 1}));
	// The new LU is new to the nexus: POWER ON first (SAM-5 6.3.1), then it serves.
	r = t.lb.run(s, 1, cdb_tur(), DataDir::None);
	EXPECT_EQ(r.asc(), 0x2900);
	EXPECT_EQ(t.lb.run(s, 1, cdb_tur(), DataDir::None).status, Status::Good);
	ASSERT_EQ(t.tpg.remove_lun(1, nullptr), 0);
	EXPECT_EQ(lu_quiesce(*lu1, {&t.tpg}, 1s, 1s), 0);
}

TEST(ScsiRuntime, ReportLunsClearsTheConditionOnEveryLu)
{
	Target t;
	t.add(0);
	t.add(1);
	Nexus *s = t.login("iqn.init:a", 0);
	EXPECT_EQ(t.lb.run(s, 1, cdb_tur(), DataDir::None).asc(), 0x2900); // seen LUN 1 too
	auto lu2 = make_lu("lu2");
	ASSERT_EQ(t.tpg.add_lun(2, *lu2), 0);
	// Queued on LUN 0 and LUN 1; one REPORT LUNS (through LUN 0) answers both.
	EXPECT_EQ(report_luns(t, s), (std::vector<uint64_t>{0, 1, 2}));
	EXPECT_EQ(t.lb.run(s, 0, cdb_tur(), DataDir::None).status, Status::Good);
	EXPECT_EQ(t.lb.run(s, 1, cdb_tur(), DataDir::None).status, Status::Good);
	ASSERT_EQ(t.tpg.remove_lun(2, nullptr), 0);
	EXPECT_EQ(lu_quiesce(*lu2, {&t.tpg}, 1s, 1s), 0);
}

TEST(ScsiRuntime, RemovedLunIsGoneForNewCommandsAndTheOthersHearIt)
{
	Target t;
	t.add(0);
	t.add(1);
	Nexus *s = t.login("iqn.init:a", 0);
	LogicalUnit *was = nullptr;
	ASSERT_EQ(t.tpg.remove_lun(1, &was), 0);
	EXPECT_EQ(was, t.lus[1].get());
	EXPECT_EQ(t.tpg.remove_lun(1, nullptr), -ENOENT);
	auto r = t.lb.run(s, 1, cdb_tur(), DataDir::None);
	EXPECT_EQ(r.key(), SenseKey::IllegalRequest);
	EXPECT_EQ(r.asc(), 0x2500); // LOGICAL UNIT NOT SUPPORTED
	r = t.lb.run(s, 0, cdb_tur(), DataDir::None);
	EXPECT_EQ(r.asc(), 0x3f0e);
	EXPECT_EQ(report_luns(t, s), std::vector<uint64_t>{0});
	EXPECT_EQ(lu_quiesce(*was, {&t.tpg}, 1s, 1s), 0);
}

TEST(ScsiRuntime, QuiesceWaitsForACommandInFlightToComplete)
{
	Target t;
	t.add(0);
	t.add(1, 1 << 20, {}, /*gated=*/true);
	Nexus *s = t.login("iqn.init:a", 1);
	GatedBackstore *g = t.gates[1];
	g->close();
	auto *w = t.lb.start_async(s, 1, cdb_rw16(true, 0, 8), DataDir::Write, pattern(4096, 3),
	                           TaskAttr::Simple, 9);
	ASSERT_TRUE(g->wait_held(1));
	LogicalUnit *lu = nullptr;
	ASSERT_EQ(t.tpg.remove_lun(1, &lu), 0);
	EXPECT_EQ(t.tpg.lu_users(lu), 1u);
	auto q = std::async(std::launch::async, [&] { return lu_quiesce(*lu, {&t.tpg}, 5s, 5s); });
	EXPECT_EQ(q.wait_for(200ms), std::future_status::timeout)
	    << "returned with a write in flight";
	g->open();
	EXPECT_EQ(q.get(), 0);
	auto res = t.lb.wait(w);
	EXPECT_TRUE(res.finished);
	EXPECT_EQ(res.status, Status::Good) << "a command within the grace completes";
	EXPECT_EQ(t.tpg.lu_users(lu), 0u);
}

TEST(ScsiRuntime, QuiesceAbortsAfterTheGraceAndIsBounded)
{
	Target t;
	t.add(0);
	t.add(1, 1 << 20, {}, /*gated=*/true);
	Nexus *s = t.login("iqn.init:a", 1);
	Nexus *other = t.login("iqn.init:b", 1);
	GatedBackstore *g = t.gates[1];
	g->close();
	auto *r1 = t.lb.start_async(s, 1, cdb_rw16(false, 0, 8), DataDir::Read,
	                            std::vector<uint8_t>(4096), TaskAttr::Simple, 1);
	auto *r2 = t.lb.start_async(other, 1, cdb_rw16(false, 8, 8), DataDir::Read,
	                            std::vector<uint8_t>(4096), TaskAttr::Simple, 2);
	ASSERT_TRUE(g->wait_held(2));
	LogicalUnit *lu = nullptr;
	ASSERT_EQ(t.tpg.remove_lun(1, &lu), 0);
	log::Capture cap;
	// The backstore never answers within the bound: quiesce gives up, and says so.
	const auto t0 = steady_clock::now();
	EXPECT_EQ(lu_quiesce(*lu, {&t.tpg}, 50ms, 200ms), -ETIMEDOUT);
	EXPECT_LT(steady_clock::now() - t0, 2s);
	EXPECT_TRUE(cap.contains("aborting 2 commands"));
	EXPECT_TRUE(cap.contains("left allocated"));
	// Both were marked aborted: once the backstore lets go they end as TASK ABORTED (TAS
	// is set: the removal is another party's doing for each nexus), not as GOOD.
	g->open();
	for (auto *p : {r1, r2}) {
		auto res = t.lb.wait(p);
		EXPECT_TRUE(res.finished);
		EXPECT_EQ(res.status, Status::TaskAborted);
	}
	EXPECT_EQ(lu_quiesce(*lu, {&t.tpg}, 1s, 1s), 0);
}

TEST(ScsiRuntime, AclMappedNexusSeesNoInventoryChange)
{
	Target t;
	t.add(0);
	t.add(1);
	NodeAcl a;
	a.initiator = "iqn.init:mapped";
	a.luns[0] = {1, false}; // sees the Tpg's LUN 1 as its LUN 0
	ASSERT_EQ(t.tpg.add_acl(a), 0);
	NodeAcl b;
	b.initiator = "iqn.init:all";
	ASSERT_EQ(t.tpg.add_acl(b), 0);
	Nexus *sm = t.login("iqn.init:mapped", 0);
	Nexus *sa = t.login("iqn.init:all", 0);
	auto lu2 = make_lu("lu2");
	ASSERT_EQ(t.tpg.add_lun(2, *lu2), 0);
	EXPECT_EQ(t.lb.run(sm, 0, cdb_tur(), DataDir::None).status, Status::Good);
	EXPECT_EQ(t.lb.run(sa, 0, cdb_tur(), DataDir::None).asc(), 0x3f0e);
	ASSERT_EQ(t.tpg.remove_lun(2, nullptr), 0);
	EXPECT_EQ(lu_quiesce(*lu2, {&t.tpg}, 1s, 1s), 0);
}

// An ACL's LUN map replaced under a live session: the session sees the new view from its
// next command on, hears REPORTED LUNS DATA HAS CHANGED once on an LU it uses, and the
// read-only flag of the new map holds; a nexus of another initiator is not told.
TEST(ScsiRuntime, ReplacedAclMapIsTheSessionsViewAndItHearsSo)
{
	Target t;
	t.add(0);
	t.add(1);
	t.add(5);
	NodeAcl a;
	a.initiator = "iqn.init:a";
	a.luns[0] = {0, false};
	a.luns[1] = {1, false};
	ASSERT_EQ(t.tpg.add_acl(a), 0);
	NodeAcl b;
	b.initiator = "iqn.init:b";
	ASSERT_EQ(t.tpg.add_acl(b), 0);
	Nexus *sa = t.login("iqn.init:a", 0);
	Nexus *sb = t.login("iqn.init:b", 0);
	EXPECT_EQ(report_luns(t, sa), (std::vector<uint64_t>{0, 1}));

	NodeAcl now;
	now.initiator = "iqn.init:a";
	now.luns[0] = {0, false};
	now.luns[3] = {5, true}; // the Tpg's LUN 5 as its LUN 3, read-only
	EXPECT_EQ(t.tpg.replace_acl(now), 0);
	auto r = t.lb.run(sa, 0, cdb_tur(), DataDir::None);
	EXPECT_EQ(r.key(), SenseKey::UnitAttention);
	EXPECT_EQ(r.asc(), 0x3f0e);
	EXPECT_EQ(t.lb.run(sa, 0, cdb_tur(), DataDir::None).status, Status::Good);
	EXPECT_EQ(report_luns(t, sa), (std::vector<uint64_t>{0, 3}));
	EXPECT_EQ(t.lb.run(sa, 1, cdb_tur(), DataDir::None).asc(), 0x2500); // gone for it
	bool ro = false;
	EXPECT_EQ(sa->lookup_lun(3, &ro), t.lus[2].get()); // the third added: LUN 5
	EXPECT_TRUE(ro);
	// Another initiator's view did not change: nothing to hear.
	EXPECT_EQ(t.lb.run(sb, 0, cdb_tur(), DataDir::None).status, Status::Good);

	// Refused: no such ACL, a LUN the Tpg lacks; nothing changes.
	now.initiator = "iqn.init:c";
	EXPECT_EQ(t.tpg.replace_acl(now), -ENOENT);
	now.initiator = "iqn.init:a";
	now.luns[4] = {9, false};
	EXPECT_EQ(t.tpg.replace_acl(now), -ENOENT);
	EXPECT_EQ(report_luns(t, sa), (std::vector<uint64_t>{0, 3}));
}

TEST(ScsiRuntime, RemovedAclRefusesNewLoginsAndKeepsItsSession)
{
	Target t;
	t.add(0);
	for (const char *n : {"iqn.init:a", "iqn.init:b"}) {
		NodeAcl a;
		a.initiator = n;
		ASSERT_EQ(t.tpg.add_acl(a), 0);
	}
	Nexus *s = t.login("iqn.init:a", 0);
	ASSERT_EQ(t.tpg.remove_acl("iqn.init:a"), 0);
	EXPECT_EQ(t.tpg.remove_acl("iqn.init:a"), -ENOENT);
	EXPECT_FALSE(t.tpg.allowed("iqn.init:a"));
	EXPECT_TRUE(t.tpg.allowed("iqn.init:b"));
	EXPECT_EQ(t.tpg.acl_names(), std::vector<std::string>{"iqn.init:b"});
	// The session logged in under it goes on with its view.
	EXPECT_EQ(t.lb.run(s, 0, cdb_tur(), DataDir::None).status, Status::Good);
	EXPECT_EQ(report_luns(t, s), std::vector<uint64_t>{0});
}

// Commands racing a removal on several threads: every one ends (GOOD before the removal,
// LOGICAL UNIT NOT SUPPORTED after, or aborted), quiesce returns, and nothing touches the
// LU after it (ASan, TSan).
TEST(ScsiRuntime, RemovalRacingCommands)
{
	Target t;
	t.add(0);
	auto lu1 = std::make_unique<LogicalUnit>("lu1", ram(1 << 20), LuConfig{});
	ASSERT_EQ(t.tpg.add_lun(1, *lu1), 0);
	std::vector<Nexus *> ss;
	for (int i = 0; i < 3; i++)
		ss.push_back(t.login("iqn.init:" + std::to_string(i), 0));
	std::atomic<bool> stop{false};
	std::atomic<int> good{0}, gone{0}, other{0};
	std::vector<std::thread> th;
	for (Nexus *s : ss)
		th.emplace_back([&, s] {
			while (!stop.load()) {
				auto r = t.lb.run(s, 1, cdb_rw16(false, 0, 1), DataDir::Read,
				                  std::vector<uint8_t>(512));
				if (r.status == Status::Good)
					good++;
				else if (r.asc() == 0x2500)
					gone++;
				else
					other++; // POWER ON, REPORTED LUNS DATA HAS CHANGED
			}
		});
	std::this_thread::sleep_for(50ms);
	LogicalUnit *lu = nullptr;
	ASSERT_EQ(t.tpg.remove_lun(1, &lu), 0);
	EXPECT_EQ(lu_quiesce(*lu, {&t.tpg}, 2s, 2s), 0);
	lu1.reset(); // freed while the threads go on hitting the LUN number
	std::this_thread::sleep_for(50ms);
	stop = true;
	for (auto &x : th)
		x.join();
	EXPECT_GT(good.load(), 0);
	EXPECT_GT(gone.load(), 0);
}

} // namespace
} // namespace ulp::scsi::test
