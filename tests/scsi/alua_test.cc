// SPDX-License-Identifier: MIT
// Asymmetric logical unit access (scsi/alua.h) through the loopback fabric: one LU behind
// two target ports (two Tpgs, relative target port identifiers 1 and 2) in two target port
// groups. REPORT TARGET PORT GROUPS byte by byte, what each access state lets through and
// the exact sense of what it refuses, SET TARGET PORT GROUPS, INQUIRY's TPGS and the VPD 83h
// target port group designator, ASYMMETRIC ACCESS STATE CHANGED, state changes from
// another thread under commands, and TPGS 00b (the default) changing nothing.
#include "tests/scsi/spc_env.h"

#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <set>
#include <thread>

namespace ulp::scsi
{
namespace
{

using namespace spc_test;

constexpr uint16_t kGroupA = 0x0010; // port 1's group
constexpr uint16_t kGroupB = 0x0201; // port 2's group

std::vector<uint8_t> cdb_rtpg(uint32_t alloc, uint8_t format = 0)
{
	std::vector<uint8_t> c(12, 0);
	c[0] = 0xa3;
	c[1] = uint8_t(format << 5 | 0x0a);
	put_be32(&c[6], alloc);
	return c;
}

std::vector<uint8_t> cdb_stpg(uint32_t len)
{
	std::vector<uint8_t> c(12, 0);
	c[0] = 0xa4;
	c[1] = 0x0a;
	put_be32(&c[6], len);
	return c;
}

// An STPG parameter list: the header, then (state, group) descriptors.
std::vector<uint8_t> stpg_list(std::vector<std::pair<uint8_t, uint16_t>> ds)
{
	std::vector<uint8_t> p(4, 0);
	for (auto [s, g] : ds) {
		p.insert(p.end(), {s, 0, 0, 0});
		put_be16(&p[p.size() - 2], g);
	}
	return p;
}

// One LU, LUN 0, on two target ports.
struct Env {
	Loopback lb;
	Tpg port1{"iqn.2026-11.org.ulp:alua", 1};
	Tpg port2{"iqn.2026-11.org.ulp:alua", 2};
	LogicalUnit lu{"alua-lu", test::ram(1 << 20), LuConfig{}};

	Env()
	{
		EXPECT_EQ(port1.add_lun(0, lu), 0);
		EXPECT_EQ(port2.add_lun(0, lu), 0);
	}
	~Env()
	{
		for (Tpg *t : {&port1, &port2})
			for (Nexus *s : t->sessions())
				EXPECT_EQ(lb.logout(s), 0);
	}
	// A nexus whose POWER ON has been reported.
	Nexus *login(Tpg &t, const std::string &name)
	{
		Nexus *s = lb.login(t, name);
		EXPECT_TRUE(s);
		EXPECT_TRUE(IsSense(run(s, cdb_tur()), SenseKey::UnitAttention, UA_POWER_ON));
		return s;
	}
	// TPGS tpgs, group A (port 1) in a, group B (port 2) in b, B preferred.
	void configure(uint8_t tpgs, AluaState a = AluaState::ActiveOptimized,
	               AluaState b = AluaState::ActiveNonOptimized, uint8_t itt = 0)
	{
		AluaConfig c;
		c.tpgs = tpgs;
		c.implicit_transition_secs = itt;
		c.groups = {{kGroupA, a, false, 0, {1}}, {kGroupB, b, true, 0, {2}}};
		std::string why;
		ASSERT_EQ(lu.alua_.configure(c, &why), 0) << why;
	}
	LoopResult run(Nexus *s, const std::vector<uint8_t> &cdb)
	{
		return lb.run(s, 0, cdb, DataDir::None);
	}
	// The unit attentions s has pending, in order (TEST UNIT READY until it has none).
	std::vector<uint16_t> uas(Nexus *s)
	{
		std::vector<uint16_t> v;
		for (int i = 0; i < 8; i++) {
			auto r = run(s, cdb_tur());
			if (r.status != Status::CheckCondition ||
			    r.key() != SenseKey::UnitAttention)
				break;
			v.push_back(r.asc());
		}
		return v;
	}
	LoopResult in(Nexus *s, const std::vector<uint8_t> &cdb, size_t alloc)
	{
		return lb.run(s, 0, cdb, alloc ? DataDir::Read : DataDir::None,
		              std::vector<uint8_t>(alloc));
	}
	LoopResult out(Nexus *s, const std::vector<uint8_t> &cdb, const std::vector<uint8_t> &d)
	{
		return lb.run(s, 0, cdb, d.empty() ? DataDir::None : DataDir::Write, d);
	}
	LoopResult stpg(Nexus *s, const std::vector<uint8_t> &plist)
	{
		return out(s, cdb_stpg(uint32_t(plist.size())), plist);
	}
};

// The VPD 83h designators of type `type`, as (association, value).
std::vector<std::pair<uint8_t, std::vector<uint8_t>>> designators(const LoopResult &r, uint8_t type)
{
	std::vector<std::pair<uint8_t, std::vector<uint8_t>>> v;
	EXPECT_EQ(r.status, Status::Good);
	if (r.data.size() < 4)
		return v;
	const size_t end = std::min<size_t>(r.data.size(), 4 + get_be16(&r.data[2]));
	for (size_t at = 4; at + 4 <= end;) {
		const uint8_t *d = &r.data[at];
		const size_t len = d[3];
		if ((d[1] & 0x0f) == type && at + 4 + len <= end)
			v.emplace_back(uint8_t(d[1] >> 4 & 3),
			               std::vector<uint8_t>(d + 4, d + 4 + len));
		at += 4 + len;
	}
	return v;
}

// ---- TPGS 00b: nothing changes ------------------------------------------------------------

TEST(Alua, DefaultIsNoAsymmetricAccess)
{
	Env e;
	Nexus *s = e.login(e.port1, "iqn.2026-11.org.ulp:i1");
	EXPECT_FALSE(e.lu.alua_.enabled());
	auto inq = e.in(s, cdb_inquiry(96), 96);
	ASSERT_EQ(inq.status, Status::Good);
	EXPECT_EQ(inq.data[5] & 0x30, 0) << "TPGS 00b";
	// REPORT TARGET PORT GROUPS: a service action not offered, pointed at as such.
	auto r = e.in(s, cdb_rtpg(1024), 1024);
	ASSERT_TRUE(IsInvalidCdb(r));
	EXPECT_EQ(r.sense[15], 0xcc) << "SKSV, C/D, BPV, bit 4";
	EXPECT_EQ(get_be16(&r.sense[16]), 1);
	// SET TARGET PORT GROUPS: an opcode not supported.
	EXPECT_TRUE(
	    IsSense(e.stpg(s, stpg_list({{0, kGroupA}})), SenseKey::IllegalRequest, 0x2000));
	EXPECT_TRUE(designators(e.in(s, cdb_inquiry(1024, true, 0x83), 1024), 5).empty());
	// A configuration with groups but TPGS 00b is refused.
	AluaConfig c;
	c.groups = {{kGroupA, AluaState::Standby, false, 0, {1}}};
	std::string why;
	EXPECT_EQ(e.lu.alua_.configure(c, &why), -EINVAL);
	EXPECT_FALSE(why.empty());
	EXPECT_EQ(e.lu.alua_.set_state(kGroupA, AluaState::Standby), -EINVAL);
	EXPECT_EQ(e.run(s, cdb_tur()).status, Status::Good);
}

TEST(Alua, ConfigureChecks)
{
	Env e;
	Alua &a = e.lu.alua_;
	auto cfg = [](uint8_t tpgs, std::vector<AluaGroup> g) {
		AluaConfig c;
		c.tpgs = tpgs;
		c.groups = std::move(g);
		return c;
	};
	std::string why;
	EXPECT_EQ(a.configure(cfg(4, {}), &why), -EINVAL);
	EXPECT_EQ(a.configure(cfg(1, {{1, AluaState::Standby, false, 0, {1}},
	                              {1, AluaState::Standby, false, 0, {2}}}),
	                      &why),
	          -EINVAL)
	    << "a group id twice";
	EXPECT_EQ(a.configure(cfg(1, {{1, AluaState::Standby, false, 0, {1}},
	                              {2, AluaState::Standby, false, 0, {1}}}),
	                      &why),
	          -EINVAL)
	    << "a port in two groups";
	EXPECT_EQ(a.configure(cfg(1, {{1, AluaState(4), false, 0, {1}}}), &why), -EINVAL)
	    << "LBA dependent is not offered";
	EXPECT_FALSE(a.enabled()) << "a refused configuration changes nothing";
	ASSERT_EQ(a.configure(cfg(3, {{7, AluaState::Standby, true, 0, {1, 5}}}), &why), 0);
	EXPECT_EQ(a.tpgs(), TPGS_BOTH);
	uint16_t g = 0;
	AluaState st{};
	EXPECT_TRUE(a.port_state(5, &g, &st));
	EXPECT_EQ(g, 7);
	EXPECT_EQ(st, AluaState::Standby);
	EXPECT_FALSE(a.port_state(2, &g, &st)) << "a port in no group";
	EXPECT_EQ(a.set_state(8, AluaState::Standby), -ENOENT);
	EXPECT_EQ(a.set_state(7, AluaState(9)), -EINVAL);
	EXPECT_EQ(a.set_state(7, AluaState::ActiveOptimized), 0);
	auto gs = a.groups();
	ASSERT_EQ(gs.size(), 1u);
	EXPECT_EQ(gs[0].state, AluaState::ActiveOptimized);
	EXPECT_EQ(gs[0].status, ALUA_STATUS_IMPLICIT);
	EXPECT_EQ(a.transitions(), 1u);
	// Off again: the default behaviour.
	ASSERT_EQ(a.configure(AluaConfig{}, &why), 0);
	EXPECT_FALSE(a.enabled());
	EXPECT_FALSE(a.port_state(1, &g, &st));
}

// ---- REPORT TARGET PORT GROUPS ------------------------------------------------------------

TEST(Alua, ReportTargetPortGroupsBytes)
{
	Env e;
	e.configure(TPGS_IMPLICIT, AluaState::ActiveOptimized, AluaState::Standby, 30);
	Nexus *s = e.login(e.port2, "iqn.2026-11.org.ulp:i1");
	// Through the standby port too: RTPG is how an initiator learns the states.
	auto r = e.in(s, cdb_rtpg(1024), 1024);
	ASSERT_EQ(r.status, Status::Good);
	const std::vector<uint8_t> want = {
	    0x00, 0x00, 0x00, 0x18,                         // RETURN DATA LENGTH 24
	    0x00, 0xcf, 0x00, 0x10, 0x00, 0x00, 0x00, 0x01, // A: AO, supported, 0010h, 1 port
	    0x00, 0x00, 0x00, 0x01,                         //    relative port 1
	    0x82, 0xcf, 0x02, 0x01, 0x00, 0x00, 0x00, 0x01, // B: PREF, standby, 0201h, 1 port
	    0x00, 0x00, 0x00, 0x02,                         //    relative port 2
	};
	EXPECT_EQ(r.data, want);
	// The extended header: FORMAT TYPE 001b, IMPLICIT TRANSITION TIME.
	auto x = e.in(s, cdb_rtpg(1024, 1), 1024);
	ASSERT_EQ(x.status, Status::Good);
	ASSERT_EQ(x.data.size(), want.size() + 4);
	EXPECT_EQ(get_be32(&x.data[0]), 28u);
	EXPECT_EQ(x.data[4], 0x10);
	EXPECT_EQ(x.data[5], 30);
	EXPECT_EQ(std::vector<uint8_t>(x.data.begin() + 8, x.data.end()),
	          std::vector<uint8_t>(want.begin() + 4, want.end()));
	// Truncated to the allocation length; the length still says all of it.
	auto t = e.in(s, cdb_rtpg(10), 10);
	ASSERT_EQ(t.status, Status::Good);
	EXPECT_EQ(t.data, std::vector<uint8_t>(want.begin(), want.begin() + 10));
	// Another PARAMETER DATA FORMAT: INVALID FIELD IN CDB at byte 1 bit 7.
	auto f = e.in(s, cdb_rtpg(1024, 2), 1024);
	ASSERT_TRUE(IsInvalidCdb(f));
	EXPECT_EQ(f.sense[15], 0xcf);
	EXPECT_EQ(get_be16(&f.sense[16]), 1);
}

// ---- What each state lets through (SPC-4 5.15.2.4) ------------------------------------

struct Probe {
	const char *name;
	std::vector<uint8_t> cdb;
	size_t alloc;
};

std::vector<Probe> probes()
{
	return {
	    {"TEST UNIT READY", cdb_tur(), 0},
	    {"READ (10)", cdb_rw10(false, 0, 1), 512},
	    {"INQUIRY", cdb_inquiry(96), 96},
	    {"REPORT LUNS", cdb_report_luns(), 4096},
	    {"REQUEST SENSE", cdb_request_sense(), 18},
	    {"MODE SENSE (6)", cdb_mode_sense6(0, 0x3f, 0, 255), 255},
	    {"PERSISTENT RESERVE IN", {0x5e, 0, 0, 0, 0, 0, 0, 0x04, 0, 0}, 1024},
	    {"REPORT TARGET PORT GROUPS", cdb_rtpg(1024), 1024},
	    {"REPORT SUPPORTED OPERATION CODES", cdb_rsoc(0), 65535},
	    {"READ CAPACITY (10)", {0x25, 0, 0, 0, 0, 0, 0, 0, 0, 0}, 8},
	    {"READ CAPACITY (16)", {0x9e, 0x10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 32, 0, 0}, 32},
	    {"GET LBA STATUS", {0x9e, 0x12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x40, 0, 0}, 64},
	};
}

// Each probe through port 1 with group A in state st: GOOD where `ok` names it, else
// NOT READY with asc.
void expect_filter(AluaState st, std::set<std::string> ok, uint16_t asc)
{
	Env e;
	e.configure(TPGS_BOTH, st, AluaState::ActiveOptimized);
	Nexus *s1 = e.login(e.port1, "iqn.2026-11.org.ulp:i1");
	Nexus *s2 = e.login(e.port2, "iqn.2026-11.org.ulp:i1");
	for (const Probe &p : probes()) {
		auto r = e.in(s1, p.cdb, p.alloc);
		if (ok.count(p.name))
			EXPECT_EQ(r.status, Status::Good) << alua_state_str(st) << ": " << p.name;
		else
			EXPECT_TRUE(IsSense(r, SenseKey::NotReady, asc))
			    << alua_state_str(st) << ": " << p.name;
		// The other port's group is Active/Optimized: everything passes there.
		EXPECT_EQ(e.in(s2, p.cdb, p.alloc).status, Status::Good) << p.name;
	}
	// WRITE (10) with data.
	auto w = e.out(s1, cdb_rw10(true, 0, 1), std::vector<uint8_t>(512, 0x5a));
	if (ok.count("READ (10)"))
		EXPECT_EQ(w.status, Status::Good);
	else
		EXPECT_TRUE(IsSense(w, SenseKey::NotReady, asc)) << alua_state_str(st);
	// REQUEST SENSE with nothing else to report returns, as data with GOOD, what TEST
	// UNIT READY through the port would get (SPC-4 6.39): the state's NOT READY reason,
	// or NO SENSE where the state serves I/O; the other port's is NO SENSE.
	for (Nexus *s : {s1, s2}) {
		auto rs = e.in(s, cdb_request_sense(), 18);
		ASSERT_EQ(rs.status, Status::Good) << alua_state_str(st);
		ASSERT_GE(rs.data.size(), 14u);
		const uint16_t want = s == s1 ? asc : 0;
		EXPECT_EQ(rs.data[0], 0x70);
		EXPECT_EQ(rs.data[2] & 0x0f, want ? 0x2 : 0x0) << alua_state_str(st);
		EXPECT_EQ(get_be16(&rs.data[12]), want) << alua_state_str(st);
	}
	// SET TARGET PORT GROUPS (an empty list: changes nothing) where the state allows it.
	auto sp = e.stpg(s1, {});
	if (st == AluaState::Transitioning)
		EXPECT_TRUE(IsSense(sp, SenseKey::NotReady, asc));
	else
		EXPECT_EQ(sp.status, Status::Good) << alua_state_str(st);
}

const std::set<std::string> kAll = {"TEST UNIT READY",
                                    "READ (10)",
                                    "INQUIRY",
                                    "REPORT LUNS",
                                    "REQUEST SENSE",
                                    "MODE SENSE (6)",
                                    "PERSISTENT RESERVE IN",
                                    "REPORT TARGET PORT GROUPS",
                                    "REPORT SUPPORTED OPERATION CODES",
                                    "READ CAPACITY (10)",
                                    "READ CAPACITY (16)",
                                    "GET LBA STATUS"};
const std::set<std::string> kMinimal = {"INQUIRY", "REPORT LUNS", "REQUEST SENSE",
                                        "REPORT TARGET PORT GROUPS"};

TEST(Alua, ActiveStatesAllowEverything)
{
	expect_filter(AluaState::ActiveOptimized, kAll, 0);
	expect_filter(AluaState::ActiveNonOptimized, kAll, 0);
}

// Management, and the capacity (Linux sizes a disk on every path it finds), but no other
// SERVICE ACTION IN (16) such as GET LBA STATUS.
TEST(Alua, StandbyAllowsManagementAndTheCapacityOnly)
{
	std::set<std::string> ok = kMinimal;
	ok.insert({"MODE SENSE (6)", "PERSISTENT RESERVE IN", "READ CAPACITY (10)",
	           "READ CAPACITY (16)"});
	expect_filter(AluaState::Standby, ok, 0x040b);
}

TEST(Alua, UnavailableOfflineTransitioning)
{
	expect_filter(AluaState::Unavailable, kMinimal, 0x040c);
	expect_filter(AluaState::Offline, kMinimal, 0x0412);
	expect_filter(AluaState::Transitioning, kMinimal, 0x040a);
}

TEST(Alua, PortInNoGroupIsNotFiltered)
{
	Env e;
	AluaConfig c;
	c.tpgs = TPGS_IMPLICIT;
	c.groups = {{kGroupA, AluaState::Standby, false, 0, {1}}};
	ASSERT_EQ(e.lu.alua_.configure(c, nullptr), 0);
	Nexus *s2 = e.login(e.port2, "iqn.2026-11.org.ulp:i1");
	EXPECT_EQ(e.in(s2, cdb_rw10(false, 0, 1), 512).status, Status::Good);
	EXPECT_TRUE(designators(e.in(s2, cdb_inquiry(1024, true, 0x83), 1024), 5).empty());
}

// ---- VPD 88h, SCSI ports (SPC-4 7.8.16) -------------------------------------------------

// The relative port identifiers VPD 88h lists, in order, and the PIV bit of each one's
// target port descriptor.
std::vector<std::pair<uint16_t, bool>> scsi_ports(const LoopResult &r)
{
	std::vector<std::pair<uint16_t, bool>> v;
	EXPECT_EQ(r.status, Status::Good);
	if (r.data.size() < 4)
		return v;
	EXPECT_EQ(r.data[1], 0x88);
	const size_t end = std::min<size_t>(r.data.size(), 4 + get_be16(&r.data[2]));
	for (size_t at = 4; at + 12 <= end;) {
		const uint8_t *d = &r.data[at];
		const size_t tlen = get_be16(d + 10);
		EXPECT_EQ(get_be16(d + 6), 0u) << "no initiator port TransportID";
		EXPECT_LE(at + 12 + tlen, end);
		bool piv = false;
		if (tlen >= 8) {
			piv = (d[13] & 0x80) != 0;
			EXPECT_EQ(d[13] & 0x3f, 0x14) << "target port, relative port designator";
			EXPECT_EQ(get_be16(d + 18), get_be16(d + 2));
		}
		v.emplace_back(get_be16(d + 2), piv);
		at += 12 + tlen;
	}
	return v;
}

TEST(Alua, ScsiPortsListsEveryTargetPort)
{
	Env e;
	Tpg port9{"iqn.2026-11.org.ulp:alua", 9};
	ASSERT_EQ(port9.add_lun(3, e.lu), 0); // another LUN number: the same port still
	Nexus *s2 = e.login(e.port2, "iqn.2026-11.org.ulp:i1");
	// Every port that maps the LU, ascending; only the command's own port names its
	// protocol (loopback: none, so PIV 0 everywhere).
	using P = std::vector<std::pair<uint16_t, bool>>;
	EXPECT_EQ(scsi_ports(e.in(s2, cdb_inquiry(1024, true, 0x88), 1024)),
	          (P{{1, false}, {2, false}, {9, false}}));
	// With ALUA too (the groups name ports; the page lists the ports that map the LU).
	e.configure(TPGS_BOTH);
	EXPECT_EQ(scsi_ports(e.in(s2, cdb_inquiry(1024, true, 0x88), 1024)).size(), 3u);
	// A port that unmaps it is gone from the page.
	LogicalUnit *was = nullptr;
	ASSERT_EQ(e.port1.remove_lun(0, &was), 0);
	EXPECT_EQ(was, &e.lu);
	ASSERT_EQ(port9.remove_lun(3, nullptr), 0);
	EXPECT_EQ(scsi_ports(e.in(s2, cdb_inquiry(1024, true, 0x88), 1024)), (P{{2, false}}));
	ASSERT_EQ(e.port1.add_lun(0, e.lu), 0); // as Env's destructor expects
}

// ---- SET TARGET PORT GROUPS and ASYMMETRIC ACCESS STATE CHANGED --------------------------

TEST(Alua, SetTargetPortGroupsExplicit)
{
	Env e;
	e.configure(TPGS_EXPLICIT, AluaState::ActiveOptimized, AluaState::Standby);
	Nexus *a = e.login(e.port1, "iqn.2026-11.org.ulp:i1"); // the one that asks
	Nexus *b = e.login(e.port2, "iqn.2026-11.org.ulp:i1"); // same initiator, other port
	Nexus *c = e.login(e.port1, "iqn.2026-11.org.ulp:i2"); // other initiator, same port
	// Swap: A standby, B active/optimized.
	auto r = e.stpg(a, stpg_list({{0x2, kGroupA}, {0x0, kGroupB}}));
	ASSERT_EQ(r.status, Status::Good);
	// SPC-4 5.15.2.2: the unit attention to every other I_T nexus (RTPG is not exempt
	// from it), not to the originator, which is standby now.
	EXPECT_TRUE(IsSense(e.in(b, cdb_rtpg(1024), 1024), SenseKey::UnitAttention,
	                    UA_ASYMMETRIC_ACCESS_CHANGED));
	EXPECT_TRUE(IsSense(e.in(a, cdb_rw10(false, 0, 1), 512), SenseKey::NotReady, 0x040b));
	EXPECT_TRUE(
	    IsSense(e.run(c, cdb_tur()), SenseKey::UnitAttention, UA_ASYMMETRIC_ACCESS_CHANGED));
	auto groups = e.lu.alua_.groups();
	ASSERT_EQ(groups.size(), 2u);
	EXPECT_EQ(groups[0].state, AluaState::Standby);
	EXPECT_EQ(groups[0].status, ALUA_STATUS_EXPLICIT);
	EXPECT_EQ(groups[1].state, AluaState::ActiveOptimized);
	EXPECT_EQ(groups[1].status, ALUA_STATUS_EXPLICIT);
	auto rt2 = e.in(b, cdb_rtpg(1024), 1024);
	ASSERT_EQ(rt2.status, Status::Good);
	EXPECT_EQ(rt2.data[4], 0x02);  // A: standby, not preferred
	EXPECT_EQ(rt2.data[9], 0x01);  // status: altered by STPG
	EXPECT_EQ(rt2.data[16], 0x80); // B: preferred, active/optimized
	EXPECT_EQ(e.in(b, cdb_rw10(false, 0, 1), 512).status, Status::Good);
}

TEST(Alua, SetTargetPortGroupsUnitAttentionSparesOriginator)
{
	Env e;
	e.configure(TPGS_EXPLICIT);
	Nexus *a = e.login(e.port1, "iqn.2026-11.org.ulp:i1");
	Nexus *b = e.login(e.port2, "iqn.2026-11.org.ulp:i1");
	ASSERT_EQ(e.stpg(a, stpg_list({{0x1, kGroupA}})).status, Status::Good);
	EXPECT_EQ(e.run(a, cdb_tur()).status, Status::Good) << "no UA for the originator";
	EXPECT_TRUE(
	    IsSense(e.run(b, cdb_tur()), SenseKey::UnitAttention, UA_ASYMMETRIC_ACCESS_CHANGED));
	EXPECT_EQ(e.run(b, cdb_tur()).status, Status::Good) << "reported once";
	// Asking for the state it has already changes nothing and raises nothing.
	ASSERT_EQ(e.stpg(a, stpg_list({{0x1, kGroupA}})).status, Status::Good);
	EXPECT_EQ(e.run(b, cdb_tur()).status, Status::Good);
}

// A persist hook that keeps the writes it is asked for until the test finishes them (as
// the daemon's state directory thread would).
struct FakeStore {
	std::mutex m;
	std::vector<std::pair<std::vector<AluaGroup>, std::function<void(int)>>> jobs;
	AluaPersist hook()
	{
		return [this](std::vector<AluaGroup> g, std::function<void(int)> done) {
			std::lock_guard l(m);
			jobs.emplace_back(std::move(g), std::move(done));
		};
	}
	size_t size()
	{
		std::lock_guard l(m);
		return jobs.size();
	}
	// Wait (bounded) for job i, then finish it with err; the groups it stored.
	std::vector<AluaGroup> finish(size_t i, int err)
	{
		const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
		while (size() <= i && std::chrono::steady_clock::now() < end)
			std::this_thread::sleep_for(std::chrono::milliseconds(1));
		std::unique_lock l(m);
		if (jobs.size() <= i) {
			ADD_FAILURE() << "no write " << i;
			return {};
		}
		auto [g, done] = jobs[i];
		l.unlock();
		done(err);
		return g;
	}
};

TEST(Alua, SetTargetPortGroupsIsStoredBeforeGood)
{
	Env e;
	e.configure(TPGS_EXPLICIT, AluaState::ActiveOptimized, AluaState::Standby);
	FakeStore st;
	e.lu.alua_.set_persist(st.hook());
	Nexus *a = e.login(e.port1, "iqn.2026-11.org.ulp:i1");
	Nexus *b = e.login(e.port2, "iqn.2026-11.org.ulp:i1");
	const std::vector<uint8_t> pl = stpg_list({{0x2, kGroupA}, {0x0, kGroupB}});
	auto *p = e.lb.start_async(a, 0, cdb_stpg(uint32_t(pl.size())), DataDir::Write, pl,
	                           TaskAttr::Simple, 1);
	// The write carries the states after the change; the command waits for it.
	std::vector<AluaGroup> g = st.finish(0, 0);
	ASSERT_EQ(g.size(), 2u);
	EXPECT_EQ(g[0].state, AluaState::Standby);
	EXPECT_EQ(g[1].state, AluaState::ActiveOptimized);
	EXPECT_EQ(e.lb.wait(p).status, Status::Good);
	// An implicit change (an administrator's) goes through the same hook, in order.
	ASSERT_EQ(e.lu.alua_.set_state(kGroupB, AluaState::ActiveNonOptimized), 0);
	ASSERT_EQ(st.size(), 2u);
	EXPECT_EQ(st.finish(1, 0)[1].state, AluaState::ActiveNonOptimized);
	// Asking for the states it has already writes nothing.
	EXPECT_EQ(e.uas(a), std::vector<uint16_t>{UA_ASYMMETRIC_ACCESS_CHANGED}) << "implicit";
	ASSERT_EQ(e.stpg(a, stpg_list({{0x2, kGroupA}})).status, Status::Good);
	EXPECT_EQ(st.size(), 2u);
	EXPECT_EQ(e.uas(b), std::vector<uint16_t>{UA_ASYMMETRIC_ACCESS_CHANGED});
}

TEST(Alua, SetTargetPortGroupsNotStoredFailsAndUndoes)
{
	Env e;
	e.configure(TPGS_EXPLICIT, AluaState::ActiveOptimized, AluaState::Standby);
	FakeStore st;
	e.lu.alua_.set_persist(st.hook());
	Nexus *a = e.login(e.port1, "iqn.2026-11.org.ulp:i1");
	Nexus *b = e.login(e.port2, "iqn.2026-11.org.ulp:i1");
	const std::vector<uint8_t> pl = stpg_list({{0x1, kGroupB}});
	auto *p = e.lb.start_async(a, 0, cdb_stpg(uint32_t(pl.size())), DataDir::Write, pl,
	                           TaskAttr::Simple, 1);
	EXPECT_EQ(st.finish(0, -EIO)[1].state, AluaState::ActiveNonOptimized);
	// The initiator is not told GOOD for a state a restart would not find.
	auto r = e.lb.wait(p);
	EXPECT_TRUE(IsSense(r, SenseKey::HardwareError, 0x4400)) << "INTERNAL TARGET FAILURE";
	auto groups = e.lu.alua_.groups();
	ASSERT_EQ(groups.size(), 2u);
	EXPECT_EQ(groups[1].state, AluaState::Standby) << "undone";
	// b heard of the change and of its undoing (one condition, queued once).
	EXPECT_TRUE(
	    IsSense(e.run(b, cdb_tur()), SenseKey::UnitAttention, UA_ASYMMETRIC_ACCESS_CHANGED));
	EXPECT_TRUE(IsSense(e.in(b, cdb_rw10(false, 0, 1), 512), SenseKey::NotReady, 0x040b));
	// Nothing more was written for the undo: the file still has the old states.
	EXPECT_EQ(st.size(), 1u);
}

TEST(Alua, SetTargetPortGroupsErrors)
{
	Env e;
	e.configure(TPGS_EXPLICIT);
	Nexus *a = e.login(e.port1, "iqn.2026-11.org.ulp:i1");
	// An unknown group: INVALID FIELD IN PARAMETER LIST, and the known one before it
	// is not changed either.
	EXPECT_TRUE(IsInvalidParam(e.stpg(a, stpg_list({{0x2, kGroupB}, {0x2, 0x7777}}))));
	EXPECT_EQ(e.lu.alua_.groups()[1].state, AluaState::ActiveNonOptimized);
	// States an initiator may not ask for: transitioning, offline, LBA dependent.
	for (uint8_t st : {0xf, 0xe, 0x4})
		EXPECT_TRUE(IsInvalidParam(e.stpg(a, stpg_list({{st, kGroupA}})))) << int(st);
	// A list that is not a header and whole descriptors.
	EXPECT_TRUE(IsParamLength(e.stpg(a, {0, 0, 0})));
	EXPECT_TRUE(IsParamLength(e.stpg(a, {0, 0, 0, 0, 0, 0})));
	// The header alone, and no list at all: nothing to do.
	EXPECT_EQ(e.stpg(a, {0, 0, 0, 0}).status, Status::Good);
	EXPECT_EQ(e.stpg(a, {}).status, Status::Good);
	EXPECT_EQ(e.lu.alua_.transitions(), 0u);
	// Another MAINTENANCE OUT service action: INVALID FIELD IN CDB.
	auto c = cdb_stpg(0);
	c[1] = 0x06;
	EXPECT_TRUE(IsInvalidCdb(e.run(a, c)));
}

TEST(Alua, SetTargetPortGroupsNeedsExplicit)
{
	Env e;
	e.configure(TPGS_IMPLICIT);
	Nexus *a = e.login(e.port1, "iqn.2026-11.org.ulp:i1");
	EXPECT_TRUE(
	    IsSense(e.stpg(a, stpg_list({{0x2, kGroupA}})), SenseKey::IllegalRequest, 0x2000));
	EXPECT_EQ(e.lu.alua_.groups()[0].state, AluaState::ActiveOptimized);
}

TEST(Alua, ImplicitChangeTellsEveryNexus)
{
	Env e;
	e.configure(TPGS_IMPLICIT);
	Nexus *a = e.login(e.port1, "iqn.2026-11.org.ulp:i1");
	Nexus *b = e.login(e.port2, "iqn.2026-11.org.ulp:i1");
	ASSERT_EQ(e.lu.alua_.set_state(kGroupB, AluaState::Unavailable), 0);
	for (Nexus *s : {a, b})
		EXPECT_TRUE(IsSense(e.run(s, cdb_tur()), SenseKey::UnitAttention,
		                    UA_ASYMMETRIC_ACCESS_CHANGED));
	EXPECT_TRUE(IsSense(e.run(b, cdb_tur()), SenseKey::NotReady, 0x040c));
	EXPECT_EQ(e.run(a, cdb_tur()).status, Status::Good);
	auto rt = e.in(a, cdb_rtpg(1024), 1024);
	ASSERT_EQ(rt.status, Status::Good);
	EXPECT_EQ(rt.data[16], 0x83); // B: preferred, unavailable
	EXPECT_EQ(rt.data[21], 0x02); // altered by implicit ALUA
	// A reconfiguration that changes a group's state is a change too.
	e.configure(TPGS_IMPLICIT, AluaState::Standby, AluaState::Unavailable);
	EXPECT_TRUE(
	    IsSense(e.run(a, cdb_tur()), SenseKey::UnitAttention, UA_ASYMMETRIC_ACCESS_CHANGED));
}

TEST(Alua, ImplicitTransitionThroughTransitioning)
{
	Env e;
	e.configure(TPGS_IMPLICIT, AluaState::Standby, AluaState::ActiveOptimized);
	Nexus *a = e.login(e.port1, "iqn.2026-11.org.ulp:i1");
	ASSERT_EQ(e.lu.alua_.set_state(kGroupA, AluaState::Transitioning), 0);
	EXPECT_TRUE(
	    IsSense(e.run(a, cdb_tur()), SenseKey::UnitAttention, UA_ASYMMETRIC_ACCESS_CHANGED));
	EXPECT_TRUE(IsSense(e.in(a, cdb_rw10(false, 0, 1), 512), SenseKey::NotReady, 0x040a));
	auto rt = e.in(a, cdb_rtpg(1024), 1024);
	ASSERT_EQ(rt.status, Status::Good);
	EXPECT_EQ(rt.data[4], 0x0f);
	ASSERT_EQ(e.lu.alua_.set_state(kGroupA, AluaState::ActiveOptimized), 0);
	EXPECT_TRUE(
	    IsSense(e.run(a, cdb_tur()), SenseKey::UnitAttention, UA_ASYMMETRIC_ACCESS_CHANGED));
	EXPECT_EQ(e.in(a, cdb_rw10(false, 0, 1), 512).status, Status::Good);
	EXPECT_EQ(e.lu.alua_.transitions(), 2u);
}

// ---- INQUIRY, VPD 83h, REPORT SUPPORTED OPERATION CODES -----------------------------------

TEST(Alua, InquiryTpgsAndDesignator)
{
	Env e;
	Nexus *s1 = e.login(e.port1, "iqn.2026-11.org.ulp:i1");
	Nexus *s2 = e.login(e.port2, "iqn.2026-11.org.ulp:i1");
	for (uint8_t tpgs : {TPGS_IMPLICIT, TPGS_EXPLICIT, TPGS_BOTH}) {
		e.configure(tpgs);
		auto inq = e.in(s1, cdb_inquiry(96), 96);
		ASSERT_EQ(inq.status, Status::Good);
		EXPECT_EQ(inq.data[5] & 0x30, tpgs << 4) << "TPGS (bits 5..4; 3PC is bit 3)";
	}
	for (auto [s, group] : {std::pair{s1, kGroupA}, std::pair{s2, kGroupB}}) {
		auto d = designators(e.in(s, cdb_inquiry(1024, true, 0x83), 1024), 5);
		ASSERT_EQ(d.size(), 1u);
		EXPECT_EQ(d[0].first, 1) << "associated with the target port";
		EXPECT_EQ(d[0].second,
		          (std::vector<uint8_t>{0, 0, uint8_t(group >> 8), uint8_t(group)}));
		// Still the relative port designator beside it.
		EXPECT_EQ(designators(e.in(s, cdb_inquiry(1024, true, 0x83), 1024), 4).size(), 1u);
	}
}

bool rsoc_lists(Env &e, Nexus *s, uint8_t op, uint16_t sa)
{
	auto r = e.in(s, cdb_rsoc(0), 65535);
	EXPECT_EQ(r.status, Status::Good);
	for (size_t at = 4; at + 8 <= r.data.size(); at += 8 + (r.data[at + 5] & 2 ? 12 : 0))
		if (r.data[at] == op && get_be16(&r.data[at + 2]) == sa)
			return true;
	return false;
}

TEST(Alua, ReportSupportedOperationCodes)
{
	Env e;
	Nexus *s = e.login(e.port1, "iqn.2026-11.org.ulp:i1");
	EXPECT_FALSE(rsoc_lists(e, s, 0xa3, 0x0a));
	EXPECT_FALSE(rsoc_lists(e, s, 0xa4, 0x0a));
	e.configure(TPGS_IMPLICIT);
	e.uas(s); // INQUIRY DATA HAS CHANGED (ConfigureTellsWhatChanged)
	EXPECT_TRUE(rsoc_lists(e, s, 0xa3, 0x0a));
	EXPECT_FALSE(rsoc_lists(e, s, 0xa4, 0x0a));
	e.configure(TPGS_BOTH);
	e.uas(s);
	EXPECT_TRUE(rsoc_lists(e, s, 0xa3, 0x0a));
	EXPECT_TRUE(rsoc_lists(e, s, 0xa4, 0x0a));
	// One command: RTPG's CDB usage data.
	auto r = e.in(s, cdb_rsoc(2, 0xa3, 0x0a), 64);
	ASSERT_EQ(r.status, Status::Good);
	EXPECT_EQ(r.data[1] & 7, 3) << "SUPPORT: as the standard says";
	EXPECT_EQ(get_be16(&r.data[2]), 12);
	EXPECT_EQ(r.data[5], 0xea);
}

// SPC-4 6.6.1: a reconfiguration that changes INQUIRY data - TPGS, a port's group (VPD 83h's
// target port group designator) - is INQUIRY DATA HAS CHANGED to every I_T nexus; one that
// changes a port's access state is ASYMMETRIC ACCESS STATE CHANGED (5.15.2.3); one that
// changes neither raises nothing.
TEST(Alua, ConfigureTellsWhatChanged)
{
	Env e;
	e.configure(TPGS_IMPLICIT, AluaState::ActiveOptimized, AluaState::Standby);
	Nexus *a = e.login(e.port1, "iqn.2026-11.org.ulp:i1");
	Nexus *b = e.login(e.port2, "iqn.2026-11.org.ulp:i2");
	using U = std::vector<uint16_t>;
	// The same configuration again: nothing.
	e.configure(TPGS_IMPLICIT, AluaState::ActiveOptimized, AluaState::Standby);
	EXPECT_EQ(e.uas(a), U{});
	// TPGS alone.
	e.configure(TPGS_BOTH, AluaState::ActiveOptimized, AluaState::Standby);
	EXPECT_EQ(e.uas(a), U{UA_INQUIRY_DATA_CHANGED});
	EXPECT_EQ(e.uas(b), U{UA_INQUIRY_DATA_CHANGED});
	// Port 2 moves into group A (active/optimized): its group and its state change.
	AluaConfig c;
	c.tpgs = TPGS_BOTH;
	c.groups = {{kGroupA, AluaState::ActiveOptimized, false, 0, {1, 2}},
	            {kGroupB, AluaState::Standby, true, 0, {}}};
	ASSERT_EQ(e.lu.alua_.configure(c, nullptr), 0);
	EXPECT_EQ(e.uas(a), (U{UA_INQUIRY_DATA_CHANGED, UA_ASYMMETRIC_ACCESS_CHANGED}));
	EXPECT_EQ(e.uas(b), (U{UA_INQUIRY_DATA_CHANGED, UA_ASYMMETRIC_ACCESS_CHANGED}));
	EXPECT_EQ(e.in(b, cdb_rw10(false, 0, 1), 512).status, Status::Good);
	// Group B (empty) removed: no port changes group or state.
	c.groups.pop_back();
	ASSERT_EQ(e.lu.alua_.configure(c, nullptr), 0);
	EXPECT_EQ(e.uas(a), U{});
	// ALUA off: TPGS and every port's group.
	ASSERT_EQ(e.lu.alua_.configure(AluaConfig{}, nullptr), 0);
	EXPECT_EQ(e.uas(b), (U{UA_INQUIRY_DATA_CHANGED, UA_ASYMMETRIC_ACCESS_CHANGED}));
}

// ---- State changes from another thread under commands ------------------------------------

TEST(Alua, StateChangesUnderCommands)
{
	Env e;
	e.configure(TPGS_BOTH);
	Nexus *a = e.login(e.port1, "iqn.2026-11.org.ulp:i1");
	Nexus *b = e.login(e.port2, "iqn.2026-11.org.ulp:i1");
	std::atomic<bool> stop{false};
	std::thread flipper([&] {
		for (int i = 0; !stop.load(); i++) {
			EXPECT_EQ(e.lu.alua_.set_state(kGroupA, i % 2 ? AluaState::ActiveOptimized
			                                              : AluaState::Standby),
			          0);
			(void)e.lu.alua_.groups(); // as the daemon's statistics would
			std::this_thread::sleep_for(std::chrono::microseconds(200));
		}
	});
	int good = 0, standby = 0, ua = 0, n = 0;
	// At least 2000 commands, and on until the other thread has changed the state a
	// hundred times (bounded).
	const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
	for (;
	     n < 2000 || (e.lu.alua_.transitions() < 100 && std::chrono::steady_clock::now() < end);
	     n++) {
		auto r = e.in(a, cdb_rw10(false, 0, 1), 512);
		if (r.status == Status::Good)
			good++;
		else if (IsSense(r, SenseKey::NotReady, 0x040b))
			standby++;
		else if (IsSense(r, SenseKey::UnitAttention, UA_ASYMMETRIC_ACCESS_CHANGED))
			ua++;
		else
			ADD_FAILURE()
			    << "status " << int(r.status) << " sense " << std::hex << r.asc();
		// The other port is never refused (its group does not change), though it hears of
		// the changes.
		auto rb = e.in(b, cdb_rtpg(1024), 1024);
		EXPECT_TRUE(rb.status == Status::Good ||
		            IsSense(rb, SenseKey::UnitAttention, UA_ASYMMETRIC_ACCESS_CHANGED));
	}
	stop = true;
	flipper.join();
	EXPECT_EQ(good + standby + ua, n);
	EXPECT_GE(e.lu.alua_.transitions(), 100u);
}

} // namespace
} // namespace ulp::scsi
