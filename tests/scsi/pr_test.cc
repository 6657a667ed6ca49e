// SPDX-License-Identifier: MIT
// Reservations through the loopback fabric, with two and three initiators: PERSISTENT
// RESERVE OUT (every service action and type, key rules, parameter list checks, unit
// attentions, PREEMPT AND ABORT with a command in flight), PERSISTENT RESERVE IN (READ KEYS,
// READ RESERVATION, REPORT CAPABILITIES, READ FULL STATUS, truncation), the conflict tables
// of SPC-4 5.13.1 and SBC-3, and the SPC-2 RESERVE/RELEASE with resets and lost nexuses.
//
// Where libiscsi's conformance suite (test-tool/test_prout_*.c, test_prin_*.c,
// test_reserve6_*.c) checks a behaviour, the test says so: those expectations are the ones
// iscsi-test-cu will hold the target to. Operation codes, service actions and types are
// spelled out from the standards here, not taken from the implementation.
#include "scsi/core.h"
#include "scsi/core_internal.h"
#include "scsi/pr.h"
#include "scsi/pr_internal.h"
#include "scsi_test_util.h"

#include <atomic>
#include <cstring>
#include <thread>

namespace ulp::scsi
{
namespace
{

using namespace test;
using std::chrono::milliseconds;

// SPC-4 6.17.2 table 167, 6.16.1 table 160, 6.17.2 table 169.
enum : uint8_t {
	SA_REGISTER = 0x00,
	SA_RESERVE = 0x01,
	SA_RELEASE = 0x02,
	SA_CLEAR = 0x03,
	SA_PREEMPT = 0x04,
	SA_PREEMPT_ABORT = 0x05,
	SA_REGISTER_IGNORE = 0x06,
	SA_REGISTER_MOVE = 0x07,
};
enum : uint8_t {
	SA_READ_KEYS = 0x00,
	SA_READ_RESERVATION = 0x01,
	SA_REPORT_CAPABILITIES = 0x02,
	SA_READ_FULL_STATUS = 0x03,
};
enum : uint8_t {
	WE = 0x1,
	EA = 0x3,
	WE_RO = 0x5,
	EA_RO = 0x6,
	WE_AR = 0x7,
	EA_AR = 0x8,
};
constexpr uint8_t kAllTypes[] = {WE, EA, WE_RO, EA_RO, WE_AR, EA_AR};
constexpr bool all_reg(uint8_t t)
{
	return t == WE_AR || t == EA_AR;
}

// Parameter list byte 20 (SPC-4 6.17.3 table 170).
enum : uint8_t {
	F_APTPL = 0x01,
	F_ALL_TG_PT = 0x04,
	F_SPEC_I_PT = 0x08,
};

constexpr uint64_t K1 = 0x1111222233334444ull;
constexpr uint64_t K2 = 0x5555666677778888ull;
constexpr uint64_t K3 = 0x99990000aaaabbbbull;

// Initiator ports as iSCSI names them (name,i,0xISID), as the core's NexusId carries them.
const std::string kPortA = "iqn.1994-05.com.example:a,i,0x23d000000001";
const std::string kPortB = "iqn.1994-05.com.example:b,i,0x23d000000002";
const std::string kPortC = "iqn.1994-05.com.example:c,i,0x23d000000003";

std::vector<uint8_t> cdb_prout(uint8_t sa, uint8_t type, uint32_t len = 24, uint8_t scope = 0)
{
	std::vector<uint8_t> c(10, 0);
	c[0] = 0x5f;
	c[1] = sa;
	c[2] = static_cast<uint8_t>(scope << 4 | type);
	put_be32(&c[5], len);
	return c;
}

std::vector<uint8_t> prout_data(uint64_t key, uint64_t sa_key, uint8_t flags = 0)
{
	std::vector<uint8_t> d(24, 0);
	put_be64(&d[0], key);
	put_be64(&d[8], sa_key);
	d[20] = flags;
	return d;
}

std::vector<uint8_t> cdb_prin(uint8_t sa, uint16_t alloc)
{
	std::vector<uint8_t> c(10, 0);
	c[0] = 0x5e;
	c[1] = sa;
	put_be16(&c[7], alloc);
	return c;
}

std::vector<uint8_t> cdb6(uint8_t op, uint8_t b1 = 0, uint8_t b4 = 0)
{
	std::vector<uint8_t> c(6, 0);
	c[0] = op;
	c[1] = b1;
	c[4] = b4;
	return c;
}

std::vector<uint8_t> cdb10(uint8_t op, uint8_t b1 = 0)
{
	std::vector<uint8_t> c(10, 0);
	c[0] = op;
	c[1] = b1;
	return c;
}

struct Keys {
	uint32_t gen = 0;
	uint32_t additional = 0;
	std::vector<uint64_t> keys;
};

struct Resv {
	uint32_t gen = 0;
	bool reserved = false;
	uint64_t key = 0;
	uint8_t scope = 0;
	uint8_t type = 0;
};

class PrTest : public ::testing::Test
{
protected:
	explicit PrTest(LuConfig cfg = {}, bool gated = false)
	{
		lu = &t.add(0, 1 << 20, cfg, gated);
	}

	// A session for an initiator port, its POWER ON unit attention consumed.
	Nexus *join(const std::string &port, Tpg *tpg = nullptr)
	{
		Nexus *s = t.lb.login(tpg ? *tpg : t.tpg, port.substr(0, port.find(',')), port);
		EXPECT_TRUE(s);
		if (s) {
			EXPECT_EQ(t.lb.run(s, 0, cdb_tur(), DataDir::None).asc(), UA_POWER_ON);
		}
		return s;
	}

	LoopResult out(Nexus *s, uint8_t sa, uint64_t key, uint64_t sa_key, uint8_t type = 0,
	               uint8_t flags = 0)
	{
		return t.lb.run(s, 0, cdb_prout(sa, type), DataDir::Write,
		                prout_data(key, sa_key, flags));
	}
	Status out_st(Nexus *s, uint8_t sa, uint64_t key, uint64_t sa_key, uint8_t type = 0,
	              uint8_t flags = 0)
	{
		return out(s, sa, key, sa_key, type, flags).status;
	}
	LoopResult in(Nexus *s, uint8_t sa, uint16_t alloc = 4096)
	{
		return t.lb.run(s, 0, cdb_prin(sa, alloc), DataDir::Read,
		                std::vector<uint8_t>(alloc));
	}

	Keys keys(Nexus *s)
	{
		Keys k;
		auto r = in(s, SA_READ_KEYS);
		EXPECT_EQ(r.status, Status::Good);
		if (r.data.size() < 8)
			return k;
		k.gen = get_be32(&r.data[0]);
		k.additional = get_be32(&r.data[4]);
		EXPECT_EQ(k.additional, r.data.size() - 8) << "ADDITIONAL LENGTH matches the data";
		for (size_t i = 8; i + 8 <= r.data.size(); i += 8)
			k.keys.push_back(get_be64(&r.data[i]));
		return k;
	}
	Resv resv(Nexus *s)
	{
		Resv v;
		auto r = in(s, SA_READ_RESERVATION);
		EXPECT_EQ(r.status, Status::Good);
		if (r.data.size() < 8)
			return v;
		v.gen = get_be32(&r.data[0]);
		const uint32_t al = get_be32(&r.data[4]);
		if (al == 16 && r.data.size() >= 24) {
			v.reserved = true;
			v.key = get_be64(&r.data[8]);
			v.scope = r.data[21] >> 4;
			v.type = r.data[21] & 0xf;
		} else {
			EXPECT_EQ(al, 0u);
		}
		return v;
	}

	// libiscsi's verify_read_works / verify_write_works: one block at LBA 1 (threads use
	// blocks of their own: the RAM backstore does not order overlapping I/O).
	Status read(Nexus *s, uint32_t lba = 1)
	{
		return t.lb
		    .run(s, 0, cdb_rw10(false, lba, 1), DataDir::Read, std::vector<uint8_t>(512))
		    .status;
	}
	Status write(Nexus *s, uint32_t lba = 1)
	{
		return t.lb
		    .run(s, 0, cdb_rw10(true, lba, 1), DataDir::Write, std::vector<uint8_t>(512))
		    .status;
	}
	// The pending unit attention a TEST UNIT READY reports, or 0.
	uint16_t ua(Nexus *s)
	{
		auto r = t.lb.run(s, 0, cdb_tur(), DataDir::None);
		if (r.status == Status::CheckCondition && r.key() == SenseKey::UnitAttention)
			return r.asc();
		EXPECT_EQ(r.status, Status::Good);
		return 0;
	}

	Target t;
	LogicalUnit *lu;
};

// ---- Registering ---------------------------------------------------------------------------

// libiscsi test_prout_register_simple, prout_reregister_key_fails.
TEST_F(PrTest, RegisterAndReadKeys)
{
	Nexus *a = join(kPortA);
	Keys k0 = keys(a);
	EXPECT_TRUE(k0.keys.empty());
	EXPECT_EQ(out_st(a, SA_REGISTER_IGNORE, 0, K1), Status::Good);
	Keys k1 = keys(a);
	EXPECT_EQ(k1.keys, std::vector<uint64_t>{K1});
	EXPECT_EQ(k1.gen, k0.gen + 1);
	// A registered nexus must name its key to REGISTER again.
	EXPECT_EQ(out_st(a, SA_REGISTER, 0, K1 + 1), Status::ReservationConflict);
	EXPECT_EQ(out_st(a, SA_REGISTER, K2, K1 + 1), Status::ReservationConflict);
	EXPECT_EQ(keys(a).gen, k1.gen) << "a failed REGISTER changes nothing";
	EXPECT_EQ(out_st(a, SA_REGISTER, K1, K2), Status::Good);
	EXPECT_EQ(keys(a).keys, std::vector<uint64_t>{K2});
	// REGISTER AND IGNORE EXISTING KEY replaces it whatever RESERVATION KEY says.
	EXPECT_EQ(out_st(a, SA_REGISTER_IGNORE, 0xdead, K3), Status::Good);
	EXPECT_EQ(keys(a).keys, std::vector<uint64_t>{K3});
	// A zero new key unregisters.
	EXPECT_EQ(out_st(a, SA_REGISTER, K3, 0), Status::Good);
	Keys k2 = keys(a);
	EXPECT_TRUE(k2.keys.empty());
	EXPECT_EQ(k2.gen, k1.gen + 3);
	// An unregistered nexus: a non-zero RESERVATION KEY conflicts; a zero SARK does nothing
	// (SPC-4 5.13.7 table 62), PRgeneration included.
	EXPECT_EQ(out_st(a, SA_REGISTER, K1, K2), Status::ReservationConflict);
	EXPECT_EQ(out_st(a, SA_REGISTER, 0, 0), Status::Good);
	EXPECT_EQ(out_st(a, SA_REGISTER_IGNORE, 0, 0), Status::Good);
	EXPECT_EQ(keys(a).gen, k2.gen);
	EXPECT_TRUE(keys(a).keys.empty());
}

TEST_F(PrTest, RegistrationsArePerNexusAndListedInOrder)
{
	Nexus *a = join(kPortA), *b = join(kPortB), *c = join(kPortC);
	EXPECT_EQ(out_st(b, SA_REGISTER, 0, K2), Status::Good);
	EXPECT_EQ(out_st(a, SA_REGISTER, 0, K1), Status::Good);
	EXPECT_EQ(out_st(c, SA_REGISTER, 0, K2), Status::Good) << "keys need not be unique";
	EXPECT_EQ(keys(c).keys, (std::vector<uint64_t>{K2, K1, K2}));
	EXPECT_EQ(out_st(b, SA_REGISTER, K2, 0), Status::Good);
	EXPECT_EQ(keys(a).keys, (std::vector<uint64_t>{K1, K2}));
	// The same initiator name with another ISID is another I_T nexus.
	Nexus *a2 = join("iqn.1994-05.com.example:a,i,0x23d000000009");
	EXPECT_EQ(out_st(a2, SA_REGISTER, K1, K3), Status::ReservationConflict);
	EXPECT_EQ(out_st(a2, SA_REGISTER, 0, K3), Status::Good);
	EXPECT_EQ(keys(a).keys.size(), 3u);
}

// SPC-4 5.13.2: registrations survive I_T nexus loss and LOGICAL UNIT RESET.
TEST_F(PrTest, RegistrationsAndReservationsSurviveNexusLossAndLunReset)
{
	Nexus *a = join(kPortA), *b = join(kPortB);
	ASSERT_EQ(out_st(a, SA_REGISTER, 0, K1), Status::Good);
	ASSERT_EQ(out_st(a, SA_RESERVE, K1, 0, EA), Status::Good);
	EXPECT_EQ(t.lb.tmf(b, TmfType::LunReset, 0), TmfResponse::Complete);
	EXPECT_EQ(ua(b), UA_BUS_DEVICE_RESET);
	EXPECT_EQ(ua(a), UA_BUS_DEVICE_RESET);
	EXPECT_EQ(resv(b).type, EA);
	ASSERT_EQ(t.lb.logout(a), 0);
	Nexus *a2 = t.lb.login(t.tpg, "iqn.1994-05.com.example:a", kPortA);
	EXPECT_EQ(ua(a2), UA_I_T_NEXUS_LOSS);
	EXPECT_EQ(write(a2), Status::Good) << "the same initiator port holds it still";
	EXPECT_EQ(read(b), Status::ReservationConflict);
	EXPECT_EQ(keys(b).keys, std::vector<uint64_t>{K1});
}

// ---- Parameter list and CDB checks ---------------------------------------------------------

TEST_F(PrTest, ParameterListAndCdbErrors)
{
	Nexus *a = join(kPortA);
	// PTPL_C 0: APTPL 1 is refused (SPC-4 6.17.3); SIP_C 0: so is SPEC_I_PT.
	auto r = out(a, SA_REGISTER, 0, K1, 0, F_APTPL);
	EXPECT_EQ(r.key(), SenseKey::IllegalRequest);
	EXPECT_EQ(r.asc(), 0x2600);
	r = out(a, SA_REGISTER_IGNORE, 0, K1, 0, F_SPEC_I_PT);
	EXPECT_EQ(r.asc(), 0x2600);
	EXPECT_TRUE(keys(a).keys.empty());
	// A parameter list shorter than 24 bytes, or longer without SPEC_I_PT.
	r = t.lb.run(a, 0, cdb_prout(SA_REGISTER, 0, 23), DataDir::Write, std::vector<uint8_t>(23));
	EXPECT_EQ(r.asc(), 0x1a00);
	r = t.lb.run(a, 0, cdb_prout(SA_REGISTER, 0, 0), DataDir::None);
	EXPECT_EQ(r.asc(), 0x1a00);
	auto d = prout_data(0, K1);
	d.resize(32);
	r = t.lb.run(a, 0, cdb_prout(SA_REGISTER, 0, 32), DataDir::Write, d);
	EXPECT_EQ(r.asc(), 0x1a00);
	EXPECT_TRUE(keys(a).keys.empty());
	// APTPL counts for the registering service actions only.
	ASSERT_EQ(out_st(a, SA_REGISTER, 0, K1), Status::Good);
	EXPECT_EQ(out_st(a, SA_RESERVE, K1, 0, WE, F_APTPL), Status::Good);
	EXPECT_EQ(out_st(a, SA_RELEASE, K1, 0, WE), Status::Good);
	// Scope and type (SPC-4 6.17.2): LU_SCOPE only; types of table 169 only.
	r = t.lb.run(a, 0, cdb_prout(SA_RESERVE, WE, 24, 2), DataDir::Write, prout_data(K1, 0));
	EXPECT_EQ(r.asc(), 0x2400);
	for (uint8_t bad : {0x0, 0x2, 0x4, 0x9, 0xf}) {
		r = out(a, SA_RESERVE, K1, 0, bad);
		EXPECT_EQ(r.asc(), 0x2400) << "type " << int(bad);
	}
	r = out(a, SA_PREEMPT, K1, K1, 0x4);
	EXPECT_EQ(r.asc(), 0x2400);
	// Scope and type are ignored where they do not count.
	r = t.lb.run(a, 0, cdb_prout(SA_REGISTER, 0xf, 24, 3), DataDir::Write, prout_data(K1, K2));
	EXPECT_EQ(r.status, Status::Good);
	// Service actions 08h (REPLACE LOST RESERVATION, RLR_C 0) and up.
	for (uint8_t sa : {0x08, 0x09, 0x1f}) {
		r = out(a, sa, K2, 0);
		EXPECT_EQ(r.asc(), 0x2400) << "sa " << int(sa);
	}
}

// ---- PERSISTENT RESERVE IN -----------------------------------------------------------------

// libiscsi test_prin_serviceaction_range: 0..3 work, 4..1Fh are refused.
TEST_F(PrTest, PrInServiceActionRange)
{
	Nexus *a = join(kPortA);
	for (uint8_t sa = 0; sa < 4; sa++)
		EXPECT_EQ(in(a, sa).status, Status::Good) << int(sa);
	for (uint8_t sa = 4; sa < 0x20; sa++) {
		auto r = in(a, sa);
		EXPECT_EQ(r.status, Status::CheckCondition) << int(sa);
		EXPECT_EQ(r.asc(), 0x2400) << int(sa);
	}
}

// libiscsi test_prin_read_keys_simple / _truncate: ADDITIONAL LENGTH covers the whole list
// whatever the allocation length lets through.
TEST_F(PrTest, ReadKeysTruncated)
{
	Nexus *a = join(kPortA), *b = join(kPortB);
	ASSERT_EQ(out_st(a, SA_REGISTER, 0, K1), Status::Good);
	ASSERT_EQ(out_st(b, SA_REGISTER, 0, K2), Status::Good);
	auto r = in(a, SA_READ_KEYS, 8);
	ASSERT_EQ(r.status, Status::Good);
	ASSERT_EQ(r.data.size(), 8u);
	EXPECT_EQ(get_be32(&r.data[4]), 16u);
	r = in(a, SA_READ_KEYS, 12);
	ASSERT_EQ(r.data.size(), 12u);
	EXPECT_EQ(get_be32(&r.data[8]), uint32_t(K1 >> 32));
	r = in(a, SA_READ_KEYS, 0);
	EXPECT_EQ(r.status, Status::Good);
	EXPECT_TRUE(r.data.empty());
	// The transport's expected length below the allocation length: overflow residual.
	r = t.lb.run(a, 0, cdb_prin(SA_READ_KEYS, 100), DataDir::Read, std::vector<uint8_t>(10));
	EXPECT_EQ(r.status, Status::Good);
	EXPECT_EQ(r.data.size(), 10u);
	EXPECT_EQ(r.resid, Residual::Overflow);
	r = in(a, SA_READ_KEYS, 100);
	EXPECT_EQ(r.data.size(), 24u);
	EXPECT_EQ(r.resid, Residual::Underflow);
	EXPECT_EQ(r.resid_count, 76u);
}

// libiscsi test_prin_report_caps_simple: LENGTH 8, ALLOW COMMANDS <= 5, a type mask within
// the six types (TMV set), and every type it claims works.
TEST_F(PrTest, ReportCapabilities)
{
	Nexus *a = join(kPortA);
	auto r = in(a, SA_REPORT_CAPABILITIES);
	ASSERT_EQ(r.status, Status::Good);
	ASSERT_EQ(r.data.size(), 8u);
	EXPECT_EQ(get_be16(&r.data[0]), 8u);
	EXPECT_EQ(r.data[2], 0x14) << "CRH, ATP_C; SIP_C 0, PTPL_C 0";
	EXPECT_EQ(r.data[3], 0x80 | 0x30) << "TMV, ALLOW COMMANDS 011b, PTPL_A 0";
	EXPECT_EQ(r.data[4], 0xea) << "WR_EX_AR EX_AC_RO WR_EX_RO EX_AC WR_EX";
	EXPECT_EQ(r.data[5], 0x01) << "EX_AC_AR";
	EXPECT_EQ(r.data[6] | r.data[7], 0);
	auto s = in(a, SA_REPORT_CAPABILITIES, 4);
	EXPECT_EQ(s.data.size(), 4u);
}

// ---- Reserving and releasing ---------------------------------------------------------------

// libiscsi test_prout_reserve_simple (and test_prin_report_caps_simple's loop): every type
// reserves, READ RESERVATION shows it (key zero for all-registrants types), RELEASE of the
// same type ends it. Neither changes PRgeneration (test_prout_clear_simple).
TEST_F(PrTest, ReserveAndReleaseEveryType)
{
	Nexus *a = join(kPortA);
	ASSERT_EQ(out_st(a, SA_REGISTER_IGNORE, 0, K1), Status::Good);
	const uint32_t gen = keys(a).gen;
	for (uint8_t type : kAllTypes) {
		SCOPED_TRACE(int(type));
		EXPECT_EQ(out_st(a, SA_RESERVE, K1, 0, type), Status::Good);
		Resv v = resv(a);
		EXPECT_TRUE(v.reserved);
		EXPECT_EQ(v.key, all_reg(type) ? 0 : K1);
		EXPECT_EQ(v.type, type);
		EXPECT_EQ(v.scope, 0);
		// Reserving again the same is fine; another type conflicts.
		EXPECT_EQ(out_st(a, SA_RESERVE, K1, 0, type), Status::Good);
		EXPECT_EQ(out_st(a, SA_RESERVE, K1, 0, type == WE ? EA : WE),
		          Status::ReservationConflict);
		// RELEASE with another type: INVALID RELEASE OF PERSISTENT RESERVATION.
		auto r = out(a, SA_RELEASE, K1, 0, type == WE ? EA : WE);
		EXPECT_EQ(r.key(), SenseKey::IllegalRequest);
		EXPECT_EQ(r.asc(), 0x2604);
		EXPECT_EQ(out_st(a, SA_RELEASE, K1, 0, type), Status::Good);
		EXPECT_FALSE(resv(a).reserved);
		EXPECT_EQ(out_st(a, SA_RELEASE, K1, 0, type), Status::Good) << "nothing held: GOOD";
	}
	EXPECT_EQ(keys(a).gen, gen);
	EXPECT_EQ(out_st(a, SA_REGISTER, K1, 0), Status::Good);
}

// SPC-4 5.13.7 table 67 and 5.13.9: only a registered nexus with its key may reserve,
// release, clear or preempt; a non-holder's RESERVE conflicts, its RELEASE does nothing.
TEST_F(PrTest, KeyRulesForEveryServiceAction)
{
	Nexus *a = join(kPortA), *b = join(kPortB), *c = join(kPortC);
	for (uint8_t sa : {SA_RESERVE, SA_RELEASE, SA_CLEAR, SA_PREEMPT, SA_PREEMPT_ABORT})
		EXPECT_EQ(out_st(a, sa, 0, 0, WE), Status::ReservationConflict)
		    << "unregistered, sa " << int(sa);
	ASSERT_EQ(out_st(a, SA_REGISTER, 0, K1), Status::Good);
	ASSERT_EQ(out_st(b, SA_REGISTER, 0, K2), Status::Good);
	for (uint8_t sa : {SA_RESERVE, SA_RELEASE, SA_CLEAR, SA_PREEMPT, SA_PREEMPT_ABORT})
		EXPECT_EQ(out_st(a, sa, K2, K2, WE), Status::ReservationConflict)
		    << "wrong key, sa " << int(sa);
	ASSERT_EQ(out_st(a, SA_RESERVE, K1, 0, WE), Status::Good);
	// b: registered, not the holder.
	EXPECT_EQ(out_st(b, SA_RESERVE, K2, 0, WE), Status::ReservationConflict);
	EXPECT_EQ(out_st(b, SA_RELEASE, K2, 0, WE), Status::Good);
	EXPECT_EQ(resv(b).key, K1) << "b's RELEASE left a's reservation alone";
	// c: not registered; PR IN and REGISTER still work for it.
	EXPECT_EQ(out_st(c, SA_RELEASE, 0, 0, WE), Status::ReservationConflict);
	EXPECT_EQ(resv(c).type, WE);
	EXPECT_EQ(out_st(c, SA_REGISTER, 0, K3), Status::Good);
	EXPECT_EQ(keys(c).keys.size(), 3u);
}

// libiscsi test_prout_reserve_access_*: what a registered and an unregistered second
// initiator may do under each type (reg read, reg write, unreg read, unreg write), while the
// holder may do everything.
struct AccessCase {
	uint8_t type;
	bool reg_read, reg_write, unreg_read, unreg_write;
};
constexpr AccessCase kAccess[] = {
    {EA, false, false, false, false},  {WE, true, false, true, false},
    {EA_RO, true, true, false, false}, {WE_RO, true, true, true, false},
    {EA_AR, true, true, false, false}, {WE_AR, true, true, true, false},
};

TEST_F(PrTest, AccessPerTypeForRegisteredAndUnregistered)
{
	Nexus *a = join(kPortA), *b = join(kPortB);
	for (const AccessCase &x : kAccess) {
		SCOPED_TRACE(int(x.type));
		ASSERT_EQ(out_st(a, SA_REGISTER_IGNORE, 0, K1), Status::Good);
		ASSERT_EQ(out_st(b, SA_REGISTER_IGNORE, 0, K2), Status::Good);
		ASSERT_EQ(out_st(a, SA_RESERVE, K1, 0, x.type), Status::Good);
		EXPECT_EQ(read(a), Status::Good);
		EXPECT_EQ(write(a), Status::Good);
		auto want = [](bool ok) { return ok ? Status::Good : Status::ReservationConflict; };
		EXPECT_EQ(read(b), want(x.reg_read));
		EXPECT_EQ(write(b), want(x.reg_write));
		ASSERT_EQ(out_st(b, SA_REGISTER, K2, 0), Status::Good);
		EXPECT_EQ(read(b), want(x.unreg_read));
		EXPECT_EQ(write(b), want(x.unreg_write));
		// Commands every reservation lets through.
		EXPECT_EQ(t.lb.run(b, 0, cdb_tur(), DataDir::None).status, Status::Good);
		EXPECT_EQ(
		    t.lb.run(b, 0, cdb_inquiry(36), DataDir::Read, std::vector<uint8_t>(36)).status,
		    Status::Good);
		EXPECT_EQ(in(b, SA_READ_KEYS).status, Status::Good);
		ASSERT_EQ(out_st(a, SA_RELEASE, K1, 0, x.type), Status::Good);
		ASSERT_EQ(out_st(a, SA_REGISTER, K1, 0), Status::Good);
		EXPECT_EQ(ua(b), 0) << "b was not registered when a released";
	}
}

// libiscsi test_prout_reserve_ownership_*: the holder unregistering releases a reservation
// of the types one nexus holds; an all-registrants one stays with the other registrant,
// which can release it.
TEST_F(PrTest, HolderUnregisteringReleasesUnlessAllRegistrants)
{
	Nexus *a = join(kPortA), *b = join(kPortB);
	for (uint8_t type : kAllTypes) {
		SCOPED_TRACE(int(type));
		ASSERT_EQ(out_st(a, SA_REGISTER_IGNORE, 0, K1), Status::Good);
		ASSERT_EQ(out_st(b, SA_REGISTER_IGNORE, 0, K2), Status::Good);
		ASSERT_EQ(out_st(a, SA_RESERVE, K1, 0, type), Status::Good);
		ASSERT_EQ(out_st(a, SA_REGISTER, K1, 0), Status::Good);
		if (all_reg(type)) {
			Resv v = resv(a);
			EXPECT_TRUE(v.reserved);
			EXPECT_EQ(v.key, 0u);
			EXPECT_EQ(v.type, type);
			EXPECT_EQ(write(b), Status::Good) << "b holds it now";
			EXPECT_EQ(write(a), Status::ReservationConflict);
			EXPECT_EQ(out_st(b, SA_RELEASE, K2, 0, type), Status::Good);
			// An AR release tells the other registrants; there are none left.
			EXPECT_EQ(ua(b), 0);
		} else {
			EXPECT_FALSE(resv(a).reserved);
			// SPC-4 5.13.11.3: a registrants-only reservation released this way is
			// news to the remaining registrants.
			const bool ro = type == WE_RO || type == EA_RO;
			EXPECT_EQ(ua(b), ro ? UA_RESERVATIONS_RELEASED : 0);
		}
		EXPECT_EQ(ua(a), 0);
		ASSERT_EQ(out_st(b, SA_REGISTER, K2, 0), Status::Good);
	}
}

// SPC-4 5.13.11.2.2: releasing an RO or AR reservation tells the other registrants
// (RESERVATIONS RELEASED); WE and EA releases tell nobody. Unregistered nexuses never hear.
TEST_F(PrTest, ReleaseUnitAttentions)
{
	Nexus *a = join(kPortA), *b = join(kPortB), *c = join(kPortC);
	ASSERT_EQ(out_st(a, SA_REGISTER, 0, K1), Status::Good);
	ASSERT_EQ(out_st(b, SA_REGISTER, 0, K2), Status::Good);
	for (uint8_t type : kAllTypes) {
		SCOPED_TRACE(int(type));
		ASSERT_EQ(out_st(a, SA_RESERVE, K1, 0, type), Status::Good);
		ASSERT_EQ(out_st(a, SA_RELEASE, K1, 0, type), Status::Good);
		const bool tell = type != WE && type != EA;
		EXPECT_EQ(ua(b), tell ? UA_RESERVATIONS_RELEASED : 0);
		EXPECT_EQ(ua(a), 0) << "not the releasing nexus";
		EXPECT_EQ(ua(c), 0) << "not an unregistered one";
	}
	// An AR reservation released by a registrant that did not reserve it.
	ASSERT_EQ(out_st(a, SA_RESERVE, K1, 0, EA_AR), Status::Good);
	ASSERT_EQ(out_st(b, SA_RELEASE, K2, 0, EA_AR), Status::Good);
	EXPECT_EQ(ua(a), UA_RESERVATIONS_RELEASED);
	EXPECT_EQ(ua(b), 0);
}

// ---- Clearing ------------------------------------------------------------------------------

// libiscsi test_prout_clear_simple: CLEAR removes every registration and the reservation,
// and bumps PRgeneration once (RESERVE did not). The other registrants hear RESERVATIONS
// PREEMPTED (SPC-4 5.13.11.2.6).
TEST_F(PrTest, ClearRemovesEverything)
{
	Nexus *a = join(kPortA), *b = join(kPortB), *c = join(kPortC);
	ASSERT_EQ(out_st(a, SA_REGISTER_IGNORE, 0, K1), Status::Good);
	ASSERT_EQ(out_st(b, SA_REGISTER_IGNORE, 0, K2), Status::Good);
	const uint32_t gen = keys(a).gen;
	ASSERT_EQ(out_st(b, SA_RESERVE, K2, 0, EA), Status::Good);
	EXPECT_EQ(out_st(c, SA_CLEAR, 0, 0), Status::ReservationConflict);
	EXPECT_EQ(out_st(a, SA_CLEAR, K1, 0), Status::Good);
	EXPECT_FALSE(resv(a).reserved);
	Keys k = keys(a);
	EXPECT_TRUE(k.keys.empty());
	EXPECT_EQ(k.gen, gen + 1);
	EXPECT_EQ(ua(b), UA_RESERVATIONS_PREEMPTED);
	EXPECT_EQ(ua(a), 0);
	EXPECT_EQ(ua(c), 0);
	EXPECT_EQ(write(c), Status::Good);
}

// ---- Preempting ----------------------------------------------------------------------------

// libiscsi test_prout_preempt_rm_reg: with no reservation, PREEMPT removes the registrations
// SARK names, bumps PRgeneration once; the preempted nexus hears REGISTRATIONS PREEMPTED.
TEST_F(PrTest, PreemptRemovesRegistration)
{
	Nexus *a = join(kPortA), *b = join(kPortB);
	ASSERT_EQ(out_st(a, SA_REGISTER_IGNORE, 0, K1), Status::Good);
	ASSERT_EQ(out_st(a, SA_CLEAR, K1, 0), Status::Good);
	ASSERT_EQ(out_st(a, SA_REGISTER_IGNORE, 0, K1), Status::Good);
	ASSERT_EQ(out_st(b, SA_REGISTER_IGNORE, 0, K2), Status::Good);
	Keys k0 = keys(a);
	ASSERT_EQ(k0.keys.size(), 2u);
	EXPECT_EQ(out_st(b, SA_PREEMPT, K2, K1, EA), Status::Good);
	EXPECT_EQ(ua(a), UA_REGISTRATIONS_PREEMPTED);
	EXPECT_EQ(ua(b), 0);
	Keys k1 = keys(a);
	EXPECT_EQ(k1.keys, std::vector<uint64_t>{K2});
	EXPECT_EQ(k1.gen, k0.gen + 1);
	EXPECT_FALSE(resv(a).reserved) << "no reservation is made by it";
	// SARK naming nobody conflicts; a zero SARK without an AR reservation is invalid.
	EXPECT_EQ(out_st(b, SA_PREEMPT, K2, K3, EA), Status::ReservationConflict);
	auto r = out(b, SA_PREEMPT, K2, 0, EA);
	EXPECT_EQ(r.asc(), 0x2600);
	EXPECT_EQ(keys(a).gen, k1.gen);
	ASSERT_EQ(out_st(b, SA_REGISTER, K2, 0), Status::Good);
}

// SPC-4 5.13.11.2.4.3 with three initiators: b preempts a's reservation (changing its type):
// a loses registration and reservation (REGISTRATIONS PREEMPTED), c keeps its registration
// but its access changed (RESERVATIONS RELEASED), b holds the new reservation.
TEST_F(PrTest, PreemptTheHolder)
{
	Nexus *a = join(kPortA), *b = join(kPortB), *c = join(kPortC);
	ASSERT_EQ(out_st(a, SA_REGISTER, 0, K1), Status::Good);
	ASSERT_EQ(out_st(b, SA_REGISTER, 0, K2), Status::Good);
	ASSERT_EQ(out_st(c, SA_REGISTER, 0, K3), Status::Good);
	ASSERT_EQ(out_st(a, SA_RESERVE, K1, 0, EA), Status::Good);
	EXPECT_EQ(read(b), Status::ReservationConflict);
	const uint32_t gen = keys(b).gen;
	EXPECT_EQ(out_st(b, SA_PREEMPT, K2, K1, WE_RO), Status::Good);
	Resv v = resv(b);
	EXPECT_EQ(v.key, K2);
	EXPECT_EQ(v.type, WE_RO);
	Keys k = keys(b);
	EXPECT_EQ(k.keys, (std::vector<uint64_t>{K2, K3}));
	EXPECT_EQ(k.gen, gen + 1);
	EXPECT_EQ(ua(a), UA_REGISTRATIONS_PREEMPTED);
	EXPECT_EQ(ua(c), UA_RESERVATIONS_RELEASED);
	EXPECT_EQ(ua(b), 0);
	EXPECT_EQ(write(a), Status::ReservationConflict) << "a is unregistered under WE_RO";
	EXPECT_EQ(write(c), Status::Good);
	// The holder preempting itself to change the type: nobody removed, c hears of it.
	EXPECT_EQ(out_st(b, SA_PREEMPT, K2, K2, EA_RO), Status::Good);
	EXPECT_EQ(resv(b).type, EA_RO);
	EXPECT_EQ(keys(b).keys, (std::vector<uint64_t>{K2, K3}));
	EXPECT_EQ(ua(c), UA_RESERVATIONS_RELEASED);
	EXPECT_EQ(ua(b), 0);
	// Same type: no news for c.
	EXPECT_EQ(out_st(b, SA_PREEMPT, K2, K2, EA_RO), Status::Good);
	EXPECT_EQ(ua(c), 0);
	// Preempting a non-holder's key under a reservation removes only that registration.
	EXPECT_EQ(out_st(b, SA_PREEMPT, K2, K3, WE), Status::Good);
	EXPECT_EQ(resv(b).type, EA_RO) << "the reservation is untouched";
	EXPECT_EQ(ua(c), UA_REGISTRATIONS_PREEMPTED);
}

// SPC-4 5.13.11.2.4.3: under an all-registrants reservation a zero SARK preempts everyone
// else; the issuer holds a reservation of the CDB's type.
TEST_F(PrTest, PreemptAllRegistrantsWithZeroKey)
{
	Nexus *a = join(kPortA), *b = join(kPortB), *c = join(kPortC);
	ASSERT_EQ(out_st(a, SA_REGISTER, 0, K1), Status::Good);
	ASSERT_EQ(out_st(b, SA_REGISTER, 0, K2), Status::Good);
	ASSERT_EQ(out_st(c, SA_REGISTER, 0, K3), Status::Good);
	ASSERT_EQ(out_st(a, SA_RESERVE, K1, 0, EA_AR), Status::Good);
	EXPECT_EQ(out_st(b, SA_PREEMPT, K2, 0, EA), Status::Good);
	Resv v = resv(b);
	EXPECT_EQ(v.type, EA);
	EXPECT_EQ(v.key, K2);
	EXPECT_EQ(keys(b).keys, std::vector<uint64_t>{K2});
	EXPECT_EQ(ua(a), UA_REGISTRATIONS_PREEMPTED);
	EXPECT_EQ(ua(c), UA_REGISTRATIONS_PREEMPTED);
	EXPECT_EQ(read(a), Status::ReservationConflict);
	// Under an AR reservation a non-zero SARK removes registrations only.
	ASSERT_EQ(out_st(b, SA_RELEASE, K2, 0, EA), Status::Good);
	ASSERT_EQ(out_st(a, SA_REGISTER, 0, K1), Status::Good);
	ASSERT_EQ(out_st(a, SA_RESERVE, K1, 0, WE_AR), Status::Good);
	EXPECT_EQ(out_st(b, SA_PREEMPT, K2, K1, WE), Status::Good);
	v = resv(b);
	EXPECT_EQ(v.type, WE_AR) << "still there: b holds it as a registrant";
	EXPECT_EQ(keys(b).keys, std::vector<uint64_t>{K2});
	EXPECT_EQ(ua(a), UA_REGISTRATIONS_PREEMPTED);
	// The last registrant preempting its own key: the AR reservation goes with it.
	EXPECT_EQ(out_st(b, SA_PREEMPT, K2, K2, WE), Status::Good);
	EXPECT_FALSE(resv(b).reserved);
	EXPECT_TRUE(keys(b).keys.empty());
}

// ---- Preempt and abort ---------------------------------------------------------------------

class PrAbortTest : public PrTest
{
protected:
	static LuConfig cfg(bool tas)
	{
		LuConfig c;
		c.tas = tas;
		return c;
	}
	explicit PrAbortTest(bool tas = true) : PrTest(cfg(tas), /*gated=*/true) {}
};

class PrAbortNoTasTest : public PrAbortTest
{
protected:
	PrAbortNoTasTest() : PrAbortTest(false) {}
};

// SPC-4 5.13.11.2.5: the preempted nexus's task in flight is aborted (TASK ABORTED: TAS is
// set), and the PREEMPT AND ABORT completes only after it has ended. Tasks of nexuses that
// were not preempted run on.
TEST_F(PrAbortTest, AbortsThePreemptedTasksAndWaitsForThem)
{
	Nexus *a = join(kPortA), *b = join(kPortB), *c = join(kPortC);
	GatedBackstore *g = t.gates[0];
	ASSERT_EQ(out_st(a, SA_REGISTER, 0, K1), Status::Good);
	ASSERT_EQ(out_st(b, SA_REGISTER, 0, K2), Status::Good);
	ASSERT_EQ(out_st(a, SA_RESERVE, K1, 0, WE), Status::Good);
	g->close();
	auto *ra = t.lb.start_async(a, 0, cdb_rw10(true, 4, 1), DataDir::Write,
	                            std::vector<uint8_t>(512, 0xaa), TaskAttr::Simple, 0x10);
	auto *rc = t.lb.start_async(c, 0, cdb_rw10(false, 8, 1), DataDir::Read,
	                            std::vector<uint8_t>(512), TaskAttr::Simple, 0x11);
	ASSERT_TRUE(g->wait_held(2));
	auto *pa = t.lb.start_async(b, 0, cdb_prout(SA_PREEMPT_ABORT, EA), DataDir::Write,
	                            prout_data(K2, K1), TaskAttr::Simple, 0x12);
	std::this_thread::sleep_for(milliseconds(50));
	EXPECT_EQ(t.lb.state(pa), CmdState::Executing) << "waits for a's write to end";
	// The preemption itself is done already: b holds the reservation.
	EXPECT_EQ(resv(c).key, K2);
	g->open();
	auto res_a = t.lb.wait(ra);
	EXPECT_EQ(res_a.status, Status::TaskAborted);
	auto res_pa = t.lb.wait(pa);
	EXPECT_EQ(res_pa.status, Status::Good);
	EXPECT_EQ(t.lb.wait(rc).status, Status::Good) << "c was not preempted";
	EXPECT_EQ(ua(a), UA_REGISTRATIONS_PREEMPTED);
	EXPECT_EQ(ua(a), 0) << "TAS: no COMMANDS CLEARED";
	EXPECT_EQ(ua(c), 0);
	EXPECT_EQ(resv(b).type, EA);
	EXPECT_EQ(keys(b).keys, std::vector<uint64_t>{K2});
	// Without tasks to abort it completes at once.
	ASSERT_EQ(out_st(c, SA_REGISTER, 0, K3), Status::Good);
	EXPECT_EQ(out_st(b, SA_PREEMPT_ABORT, K2, K3, EA), Status::Good);
	EXPECT_EQ(ua(c), UA_REGISTRATIONS_PREEMPTED);
}

// TAS 0: the aborted task gets no status; its nexus hears COMMANDS CLEARED BY ANOTHER
// INITIATOR as well as REGISTRATIONS PREEMPTED. A dormant task and one waiting for its
// data-out are aborted too.
TEST_F(PrAbortNoTasTest, AbortsSilentlyWithCommandsCleared)
{
	Nexus *a = join(kPortA), *b = join(kPortB);
	GatedBackstore *g = t.gates[0];
	ASSERT_EQ(out_st(a, SA_REGISTER, 0, K1), Status::Good);
	ASSERT_EQ(out_st(b, SA_REGISTER, 0, K2), Status::Good);
	g->close();
	auto *r1 = t.lb.start_async(a, 0, cdb_rw10(false, 1, 1), DataDir::Read,
	                            std::vector<uint8_t>(512), TaskAttr::Simple, 1);
	ASSERT_TRUE(g->wait_held(1));
	auto *ord = t.lb.start_async(a, 0, cdb_rw10(false, 2, 1), DataDir::Read,
	                             std::vector<uint8_t>(512), TaskAttr::Ordered, 2);
	auto *wp = t.lb.start_async(a, 0, cdb_rw10(true, 3, 1), DataDir::Write,
	                            std::vector<uint8_t>(512), TaskAttr::HeadOfQueue, 3,
	                            /*hold_write=*/true);
	EXPECT_EQ(t.lb.state(ord), CmdState::Dormant);
	EXPECT_EQ(t.lb.state(wp), CmdState::WritePending);
	auto *pa = t.lb.start_async(b, 0, cdb_prout(SA_PREEMPT_ABORT, WE), DataDir::Write,
	                            prout_data(K2, K1), TaskAttr::HeadOfQueue, 4);
	EXPECT_TRUE(t.lb.wait(ord).aborted);
	EXPECT_TRUE(t.lb.wait(wp).aborted);
	EXPECT_EQ(t.lb.state(pa), CmdState::Executing);
	g->open();
	EXPECT_TRUE(t.lb.wait(r1).aborted);
	EXPECT_EQ(t.lb.wait(pa).status, Status::Good);
	std::vector<uint16_t> uas;
	while (uint16_t c = ua(a))
		uas.push_back(c);
	std::sort(uas.begin(), uas.end());
	EXPECT_EQ(uas, (std::vector<uint16_t>{UA_REGISTRATIONS_PREEMPTED, UA_COMMANDS_CLEARED}));
	EXPECT_EQ(t.lus[0]->task_count(), 0u);
}

// A task-management function racing PREEMPT AND ABORT for the same tasks: both answer.
TEST_F(PrAbortTest, RacesALunReset)
{
	Nexus *a = join(kPortA), *b = join(kPortB);
	GatedBackstore *g = t.gates[0];
	ASSERT_EQ(out_st(a, SA_REGISTER, 0, K1), Status::Good);
	ASSERT_EQ(out_st(b, SA_REGISTER, 0, K2), Status::Good);
	g->close();
	auto *r1 = t.lb.start_async(a, 0, cdb_rw10(false, 1, 1), DataDir::Read,
	                            std::vector<uint8_t>(512), TaskAttr::Simple, 1);
	ASSERT_TRUE(g->wait_held(1));
	auto *pa = t.lb.start_async(b, 0, cdb_prout(SA_PREEMPT_ABORT, WE), DataDir::Write,
	                            prout_data(K2, K1), TaskAttr::Simple, 2);
	auto *tm = t.lb.tmf_start(a, TmfType::LunReset, 0);
	g->open();
	EXPECT_EQ(t.lb.tmf_wait(tm), TmfResponse::Complete);
	auto rp = t.lb.wait(pa);
	EXPECT_TRUE(rp.status == Status::TaskAborted || rp.status == Status::Good);
	EXPECT_TRUE(t.lb.wait(r1).finished);
	EXPECT_EQ(t.lus[0]->task_count(), 0u);
}

// ---- REGISTER AND MOVE ---------------------------------------------------------------------

std::vector<uint8_t> move_data(uint64_t key, uint64_t sa_key, bool unreg, uint16_t rtpi,
                               const std::string &port, uint8_t format = 0x40)
{
	std::vector<uint8_t> tid(4, 0);
	tid[0] = static_cast<uint8_t>(format | 0x05);
	tid.insert(tid.end(), port.begin(), port.end());
	tid.push_back(0);
	while (tid.size() % 4 || tid.size() < 24)
		tid.push_back(0);
	put_be16(&tid[2], static_cast<uint16_t>(tid.size() - 4));
	std::vector<uint8_t> d(24 + tid.size(), 0);
	put_be64(&d[0], key);
	put_be64(&d[8], sa_key);
	d[17] = unreg ? 0x02 : 0;
	put_be16(&d[18], rtpi);
	put_be32(&d[20], static_cast<uint32_t>(tid.size()));
	std::memcpy(&d[24], tid.data(), tid.size());
	return d;
}

// SPC-4 5.13.8: the holder moves its reservation to another I_T nexus (named by TransportID),
// registering it; with UNREG it leaves.
TEST_F(PrTest, RegisterAndMove)
{
	Nexus *a = join(kPortA), *b = join(kPortB), *c = join(kPortC);
	ASSERT_EQ(out_st(a, SA_REGISTER, 0, K1), Status::Good);
	ASSERT_EQ(out_st(c, SA_REGISTER, 0, K3), Status::Good);
	auto move = [&](Nexus *s, std::vector<uint8_t> d) {
		const uint32_t len = static_cast<uint32_t>(d.size());
		return t.lb.run(s, 0, cdb_prout(SA_REGISTER_MOVE, 0, len), DataDir::Write, d);
	};
	// No reservation to move: conflict.
	EXPECT_EQ(move(a, move_data(K1, K2, false, 1, kPortB)).status, Status::ReservationConflict);
	ASSERT_EQ(out_st(a, SA_RESERVE, K1, 0, WE), Status::Good);
	EXPECT_EQ(move(c, move_data(K3, K2, false, 1, kPortB)).status, Status::ReservationConflict)
	    << "c does not hold it";
	EXPECT_EQ(move(a, move_data(K2, K2, false, 1, kPortB)).status, Status::ReservationConflict)
	    << "wrong key";
	EXPECT_EQ(move(a, move_data(K1, 0, false, 1, kPortB)).asc(), 0x2600) << "zero SARK";
	EXPECT_EQ(move(a, move_data(K1, K2, false, 1, kPortA)).asc(), 0x2600) << "to itself";
	EXPECT_EQ(move(a, move_data(K1, K2, false, 7, kPortB)).asc(), 0x2600) << "no such port";
	EXPECT_EQ(move(a, move_data(K1, K2, false, 1, kPortB, 0x00)).asc(), 0x2600)
	    << "format 00b with an ISID in the name";
	std::vector<uint8_t> srp(24, 0);
	srp[0] = 0x04; // an SRP TransportID, to the loopback's iSCSI-named port
	srp[8] = 0xfe;
	auto srp_move = move_data(K1, K2, false, 1, kPortB);
	srp_move.resize(24);
	put_be32(&srp_move[20], 24);
	srp_move.insert(srp_move.end(), srp.begin(), srp.end());
	EXPECT_EQ(move(a, srp_move).asc(), 0x2600) << "another protocol";
	auto bad = move_data(K1, K2, false, 1, kPortB);
	put_be32(&bad[20], 400);
	EXPECT_EQ(move(a, bad).asc(), 0x1a00) << "TransportID beyond the list";
	const uint32_t gen = keys(a).gen;
	EXPECT_EQ(move(a, move_data(K1, K2, true, 1, kPortB)).status, Status::Good);
	Resv v = resv(b);
	EXPECT_EQ(v.key, K2);
	EXPECT_EQ(v.type, WE);
	Keys k = keys(b);
	EXPECT_EQ(k.keys, (std::vector<uint64_t>{K3, K2}));
	EXPECT_EQ(k.gen, gen + 1);
	EXPECT_EQ(write(b), Status::Good) << "b registered and holds it without a command";
	EXPECT_EQ(write(a), Status::ReservationConflict);
	// Moving on to an already registered nexus keeps its key; the source stays registered.
	EXPECT_EQ(move(b, move_data(K2, K1, false, 1, kPortC)).status, Status::Good);
	EXPECT_EQ(resv(a).key, K3);
	EXPECT_EQ(keys(a).keys, (std::vector<uint64_t>{K3, K2}));
	// An all-registrants reservation cannot be moved.
	ASSERT_EQ(out_st(c, SA_RELEASE, K3, 0, WE), Status::Good);
	ASSERT_EQ(out_st(c, SA_RESERVE, K3, 0, WE_AR), Status::Good);
	EXPECT_EQ(move(c, move_data(K3, K1, false, 1, kPortA)).status, Status::ReservationConflict);
}

// ---- READ FULL STATUS and TransportIDs -----------------------------------------------------

struct FullStatus {
	uint64_t key;
	bool all_tg_pt, holder;
	uint8_t scope_type;
	uint16_t rtpi;
	std::vector<uint8_t> tid;
};

std::vector<FullStatus> parse_full_status(const std::vector<uint8_t> &d)
{
	std::vector<FullStatus> v;
	EXPECT_GE(d.size(), 8u);
	if (d.size() < 8)
		return v;
	EXPECT_EQ(get_be32(&d[4]), d.size() - 8);
	size_t off = 8;
	while (off + 24 <= d.size()) {
		FullStatus f;
		f.key = get_be64(&d[off]);
		f.all_tg_pt = d[off + 12] & 0x02;
		f.holder = d[off + 12] & 0x01;
		f.scope_type = d[off + 13];
		f.rtpi = get_be16(&d[off + 18]);
		const uint32_t n = get_be32(&d[off + 20]);
		EXPECT_LE(off + 24 + n, d.size());
		f.tid.assign(d.begin() + off + 24, d.begin() + off + 24 + n);
		v.push_back(f);
		off += 24 + n;
	}
	EXPECT_EQ(off, d.size());
	return v;
}

// SPC-4 6.16.5 and 7.6.4.6: a descriptor per registration; the TransportID is the iSCSI
// format 01b one (name,i,0xISID) for a session's port, format 00b for a bare name; NUL
// terminated, padded to a multiple of 4, at least 24 bytes.
TEST_F(PrTest, ReadFullStatus)
{
	Nexus *a = join(kPortA);
	Nexus *b = join("iqn.2026-01.org.ulp:b");
	ASSERT_EQ(out_st(a, SA_REGISTER, 0, K1), Status::Good);
	ASSERT_EQ(out_st(b, SA_REGISTER, 0, K2), Status::Good);
	ASSERT_EQ(out_st(a, SA_RESERVE, K1, 0, EA_RO), Status::Good);
	auto r = in(b, SA_READ_FULL_STATUS);
	ASSERT_EQ(r.status, Status::Good);
	EXPECT_EQ(get_be32(&r.data[0]), keys(b).gen);
	auto v = parse_full_status(r.data);
	ASSERT_EQ(v.size(), 2u);
	EXPECT_EQ(v[0].key, K1);
	EXPECT_TRUE(v[0].holder);
	EXPECT_EQ(v[0].scope_type, EA_RO);
	EXPECT_FALSE(v[0].all_tg_pt);
	EXPECT_EQ(v[0].rtpi, 1);
	const std::vector<uint8_t> &ta = v[0].tid;
	ASSERT_GE(ta.size(), 4u);
	EXPECT_EQ(ta[0], 0x45) << "format 01b, protocol iSCSI";
	EXPECT_EQ(ta.size() % 4, 0u);
	EXPECT_EQ(get_be16(&ta[2]), ta.size() - 4);
	EXPECT_EQ(std::string(reinterpret_cast<const char *>(&ta[4])), kPortA);
	EXPECT_EQ(v[1].key, K2);
	EXPECT_FALSE(v[1].holder);
	EXPECT_EQ(v[1].scope_type, 0);
	const std::vector<uint8_t> &tb = v[1].tid;
	ASSERT_GE(tb.size(), 24u);
	EXPECT_EQ(tb[0], 0x05) << "format 00b, protocol iSCSI";
	EXPECT_EQ(get_be16(&tb[2]), tb.size() - 4);
	EXPECT_EQ(std::string(reinterpret_cast<const char *>(&tb[4])), "iqn.2026-01.org.ulp:b");
	// Under an AR reservation every registrant is a holder.
	ASSERT_EQ(out_st(a, SA_RELEASE, K1, 0, EA_RO), Status::Good);
	EXPECT_EQ(ua(b), UA_RESERVATIONS_RELEASED);
	ASSERT_EQ(out_st(b, SA_RESERVE, K2, 0, WE_AR), Status::Good);
	v = parse_full_status(in(a, SA_READ_FULL_STATUS).data);
	ASSERT_EQ(v.size(), 2u);
	EXPECT_TRUE(v[0].holder && v[1].holder);
	EXPECT_EQ(v[0].scope_type, WE_AR);
	// Truncated: the header still counts every descriptor.
	auto tr = in(a, SA_READ_FULL_STATUS, 16);
	ASSERT_EQ(tr.data.size(), 16u);
	EXPECT_EQ(get_be32(&tr.data[4]), r.data.size() - 8);
}

// SPC-4 7.6.4.5, 7.6.4.6: TransportIDs built from the core's initiator port text and parsed
// back (REGISTER AND MOVE).
TEST(PrTransportId, BuildAndParse)
{
	std::vector<uint8_t> b;
	transport_id_build(ProtoId::Iscsi, kPortA, b);
	ASSERT_EQ(b.size(), 48u);
	EXPECT_EQ(b[0], 0x45);
	EXPECT_EQ(get_be16(&b[2]), 44u);
	ProtoId proto;
	std::string port;
	EXPECT_EQ(transport_id_parse(b, &proto, &port), 48u);
	EXPECT_EQ(proto, ProtoId::Iscsi);
	EXPECT_EQ(port, kPortA);
	// A short name is padded to the minimum of 24 bytes.
	b.clear();
	transport_id_build(ProtoId::Iscsi, "iqn.x:y", b);
	ASSERT_EQ(b.size(), 24u);
	EXPECT_EQ(b[0], 0x05);
	EXPECT_EQ(transport_id_parse(b, &proto, &port), 24u);
	EXPECT_EQ(port, "iqn.x:y");
	// SRP: the 128-bit port identifier from its hex text; other text falls back to iSCSI.
	b.clear();
	transport_id_build(ProtoId::Srp, "0x00112233445566778899aabbccddeeff", b);
	ASSERT_EQ(b.size(), 24u);
	EXPECT_EQ(b[0], 0x04);
	EXPECT_EQ(b[8], 0x00);
	EXPECT_EQ(b[23], 0xff);
	EXPECT_EQ(transport_id_parse(b, &proto, &port), 24u);
	EXPECT_EQ(proto, ProtoId::Srp);
	EXPECT_EQ(port, "00112233445566778899aabbccddeeff");
	b.clear();
	transport_id_build(ProtoId::Srp, "not-hex", b);
	EXPECT_EQ(b[0], 0x05);
	// Malformed: no NUL, wrong format for the text, unknown protocol, too short.
	std::vector<uint8_t> m(24, 'a');
	m[0] = 0x05;
	m[1] = 0;
	put_be16(&m[2], 20);
	EXPECT_EQ(transport_id_parse(m, &proto, &port), 0u);
	m.assign(24, 0);
	m[0] = 0x45;
	put_be16(&m[2], 20);
	std::memcpy(&m[4], "iqn.x:y", 7);
	EXPECT_EQ(transport_id_parse(m, &proto, &port), 0u) << "format 01b without an ISID";
	m[0] = 0x00;
	EXPECT_EQ(transport_id_parse(m, &proto, &port), 0u) << "FCP";
	EXPECT_EQ(transport_id_parse(std::span<const uint8_t>(m).first(3), &proto, &port), 0u);
}

// ALL_TG_PT: one registration stands for the initiator port through every target port; the
// same LU exported through a second target port group sees it registered and holding.
TEST_F(PrTest, AllTargetPorts)
{
	Tpg tpg2{"iqn.2026-11.org.ulp:test2", 2};
	ASSERT_EQ(tpg2.add_lun(0, *lu), 0);
	Nexus *a1 = join(kPortA);
	Nexus *a2 = join(kPortA, &tpg2);
	Nexus *b2 = join(kPortB, &tpg2);
	ASSERT_EQ(out_st(a1, SA_REGISTER, 0, K1, 0, F_ALL_TG_PT), Status::Good);
	EXPECT_EQ(out_st(a2, SA_REGISTER, 0, K2), Status::ReservationConflict)
	    << "a2 is registered through a1's registration";
	ASSERT_EQ(out_st(a2, SA_RESERVE, K1, 0, EA), Status::Good);
	EXPECT_EQ(write(a1), Status::Good);
	EXPECT_EQ(write(a2), Status::Good);
	EXPECT_EQ(read(b2), Status::ReservationConflict);
	auto v = parse_full_status(in(b2, SA_READ_FULL_STATUS).data);
	ASSERT_EQ(v.size(), 1u);
	EXPECT_TRUE(v[0].all_tg_pt);
	EXPECT_TRUE(v[0].holder);
	// Preempted, both I_T nexuses hear it.
	ASSERT_EQ(out_st(b2, SA_REGISTER, 0, K2), Status::Good);
	ASSERT_EQ(out_st(b2, SA_PREEMPT, K2, K1, EA), Status::Good);
	EXPECT_EQ(ua(a1), UA_REGISTRATIONS_PREEMPTED);
	EXPECT_EQ(ua(a2), UA_REGISTRATIONS_PREEMPTED);
	// ALL_TG_PT while the port is registered through one target port only: refused.
	ASSERT_EQ(out_st(a2, SA_REGISTER, 0, K1), Status::Good);
	EXPECT_EQ(out_st(a1, SA_REGISTER, 0, K3, 0, F_ALL_TG_PT), Status::ReservationConflict);
	EXPECT_EQ(t.lb.logout(a2), 0);
	EXPECT_EQ(t.lb.logout(b2), 0);
}

// ---- The conflict tables (SPC-4 5.13.1 table 66, SBC-3 table 13) ---------------------------

// pr_check is asked directly with CDBs of commands the command families may not offer yet:
// the tables are about commands, not about what executes them.
class PrTableTest : public PrTest
{
protected:
	bool conflicts(Nexus *s, std::vector<uint8_t> cdb)
	{
		Cmd c;
		cmd_init(&c);
		c.sess = s;
		c.lu = lu;
		std::memcpy(c.cdb, cdb.data(), cdb.size());
		c.cdb_len = static_cast<uint8_t>(cdb.size());
		return pr_check(&c) == Sense::ReservationConflict;
	}
};

// The row patterns of the tables, per column: WE, EA, WE_RO, EA_RO, WE_AR, EA_AR, each
// (registered, unregistered); 'A' allowed, 'C' conflict.
constexpr char kAllowed[] = "AA AA AA AA AA AA";
constexpr char kRead[] = "AA CC AA AC AA AC";
constexpr char kWrite[] = "CC CC AC AC AC AC";

struct Row {
	const char *name;
	std::vector<uint8_t> cdb;
	const char *pattern;
};

std::vector<uint8_t> cdb_sa(uint8_t op, uint8_t sa, size_t len)
{
	std::vector<uint8_t> c(len, 0);
	c[0] = op;
	c[1] = sa;
	return c;
}

TEST_F(PrTableTest, NonHoldersPerTypeAndRegistration)
{
	std::vector<uint8_t> rw32(32, 0);
	rw32[0] = 0x7f;
	rw32[7] = 0x18;
	rw32[9] = 0x09; // READ (32)
	std::vector<uint8_t> ww32 = rw32;
	ww32[9] = 0x0b; // WRITE (32)
	const Row rows[] = {
	    {"TEST UNIT READY", cdb6(0x00), kAllowed},
	    {"REQUEST SENSE", cdb6(0x03), kAllowed},
	    {"INQUIRY", cdb6(0x12), kAllowed},
	    {"LOG SENSE", cdb10(0x4d), kAllowed},
	    {"REPORT LUNS", cdb_sa(0xa0, 0, 12), kAllowed},
	    {"PERSISTENT RESERVE IN", cdb_sa(0x5e, 0, 10), kAllowed},
	    {"READ CAPACITY (10)", cdb10(0x25), kAllowed},
	    {"READ CAPACITY (16)", cdb_sa(0x9e, 0x10, 16), kAllowed},
	    {"REPORT TARGET PORT GROUPS", cdb_sa(0xa3, 0x0a, 12), kAllowed},
	    {"READ MEDIA SERIAL NUMBER", cdb_sa(0xab, 0x01, 12), kAllowed},
	    {"PREVENT ALLOW (allow)", cdb6(0x1e, 0, 0), kAllowed},
	    {"START STOP UNIT (start)", cdb6(0x1b, 0, 0x01), kAllowed},
	    {"RESERVE (6)", cdb6(0x16), kAllowed},
	    {"RELEASE (10)", cdb10(0x57), kAllowed},
	    {"MODE SENSE (6)", cdb6(0x1a), kRead},
	    {"MODE SENSE (10)", cdb10(0x5a), kRead},
	    {"READ BUFFER", cdb10(0x3c), kRead},
	    {"RECEIVE DIAGNOSTIC RESULTS", cdb6(0x1c), kRead},
	    {"REPORT SUPPORTED OPERATION CODES", cdb_sa(0xa3, 0x0c, 12), kRead},
	    {"REPORT SUPPORTED TMFS", cdb_sa(0xa3, 0x0d, 12), kRead},
	    {"READ (6)", cdb6(0x08), kRead},
	    {"READ (10)", cdb10(0x28), kRead},
	    {"READ (12)", cdb_sa(0xa8, 0, 12), kRead},
	    {"READ (16)", cdb_sa(0x88, 0, 16), kRead},
	    {"READ (32)", rw32, kRead},
	    {"VERIFY (10)", cdb10(0x2f), kRead},
	    {"VERIFY (16)", cdb_sa(0x8f, 0, 16), kRead},
	    {"PRE-FETCH (10)", cdb10(0x34), kRead},
	    {"GET LBA STATUS", cdb_sa(0x9e, 0x12, 16), kRead},
	    {"READ DEFECT DATA (10)", cdb10(0x37), kRead},
	    {"WRITE (6)", cdb6(0x0a), kWrite},
	    {"WRITE (10)", cdb10(0x2a), kWrite},
	    {"WRITE (16)", cdb_sa(0x8a, 0, 16), kWrite},
	    {"WRITE (32)", ww32, kWrite},
	    {"WRITE AND VERIFY (10)", cdb10(0x2e), kWrite},
	    {"WRITE SAME (10)", cdb10(0x41), kWrite},
	    {"WRITE SAME (16)", cdb_sa(0x93, 0, 16), kWrite},
	    {"UNMAP", cdb10(0x42), kWrite},
	    {"COMPARE AND WRITE", cdb_sa(0x89, 0, 16), kWrite},
	    {"SYNCHRONIZE CACHE (10)", cdb10(0x35), kWrite},
	    {"SYNCHRONIZE CACHE (16)", cdb_sa(0x91, 0, 16), kWrite},
	    {"MODE SELECT (6)", cdb6(0x15), kWrite},
	    {"MODE SELECT (10)", cdb10(0x55), kWrite},
	    {"LOG SELECT", cdb10(0x4c), kWrite},
	    {"WRITE BUFFER", cdb10(0x3b), kWrite},
	    {"SEND DIAGNOSTIC", cdb6(0x1d), kWrite},
	    {"FORMAT UNIT", cdb6(0x04), kWrite},
	    {"SANITIZE", cdb10(0x48), kWrite},
	    {"EXTENDED COPY", cdb_sa(0x83, 0, 16), kWrite},
	    {"PREVENT ALLOW (prevent)", cdb6(0x1e, 0, 0x01), kWrite},
	    {"START STOP UNIT (stop)", cdb6(0x1b, 0, 0x00), kWrite},
	    {"START STOP UNIT (power condition)", cdb6(0x1b, 0, 0x31), kWrite},
	    {"SET TARGET PORT GROUPS", cdb_sa(0xa4, 0x0a, 12), kWrite},
	    {"vendor specific", cdb6(0xc7), kWrite},
	    // Table 67: PERSISTENT RESERVE OUT is decided by its service action where it runs.
	    {"PERSISTENT RESERVE OUT", cdb_sa(0x5f, SA_CLEAR, 10), kAllowed},
	};
	Nexus *h = join(kPortA), *reg = join(kPortB), *unreg = join(kPortC);
	ASSERT_EQ(out_st(h, SA_REGISTER, 0, K1), Status::Good);
	ASSERT_EQ(out_st(reg, SA_REGISTER, 0, K2), Status::Good);
	for (const Row &row : rows)
		for (Nexus *s : {h, reg, unreg})
			EXPECT_FALSE(conflicts(s, row.cdb)) << row.name << ": nothing reserved";
	for (size_t col = 0; col < std::size(kAllTypes); col++) {
		const uint8_t type = kAllTypes[col];
		ASSERT_EQ(out_st(h, SA_RESERVE, K1, 0, type), Status::Good);
		for (const Row &row : rows) {
			SCOPED_TRACE(testing::Message() << row.name << ", type " << int(type));
			EXPECT_FALSE(conflicts(h, row.cdb)) << "the holder";
			EXPECT_EQ(conflicts(reg, row.cdb), row.pattern[3 * col] == 'C')
			    << "registered";
			EXPECT_EQ(conflicts(unreg, row.cdb), row.pattern[3 * col + 1] == 'C')
			    << "not registered";
		}
		ASSERT_EQ(out_st(h, SA_RELEASE, K1, 0, type), Status::Good);
		while (ua(reg))
			;
	}
}

// ---- SPC-2 RESERVE / RELEASE ---------------------------------------------------------------

// libiscsi test_reserve6_simple and test_reserve6_2initiators.
TEST_F(PrTest, Reserve6TwoInitiators)
{
	Nexus *a = join(kPortA), *b = join(kPortB);
	EXPECT_EQ(t.lb.run(a, 0, cdb6(0x16), DataDir::None).status, Status::Good);
	EXPECT_EQ(t.lb.run(a, 0, cdb6(0x16), DataDir::None).status, Status::Good)
	    << "the holder may reserve again";
	EXPECT_EQ(t.lb.run(b, 0, cdb6(0x16), DataDir::None).status, Status::ReservationConflict);
	EXPECT_EQ(t.lb.run(b, 0, cdb6(0x17), DataDir::None).status, Status::Good)
	    << "RELEASE from b is a no-op";
	EXPECT_EQ(t.lb.run(b, 0, cdb6(0x16), DataDir::None).status, Status::ReservationConflict);
	// SPC-2 annex B column [A]: b gets INQUIRY, REPORT LUNS, REQUEST SENSE, READ CAPACITY;
	// everything else conflicts (MODE SENSE in libiscsi's test; TUR, reads, writes here).
	EXPECT_EQ(t.lb.run(b, 0, cdb_inquiry(36), DataDir::Read, std::vector<uint8_t>(36)).status,
	          Status::Good);
	EXPECT_EQ(
	    t.lb.run(b, 0, cdb_report_luns(), DataDir::Read, std::vector<uint8_t>(4096)).status,
	    Status::Good);
	EXPECT_EQ(
	    t.lb.run(b, 0, cdb_request_sense(), DataDir::Read, std::vector<uint8_t>(18)).status,
	    Status::Good);
	EXPECT_EQ(t.lb.run(b, 0, cdb10(0x25), DataDir::Read, std::vector<uint8_t>(8)).status,
	          Status::Good);
	EXPECT_EQ(t.lb.run(b, 0, cdb_tur(), DataDir::None).status, Status::ReservationConflict);
	EXPECT_EQ(read(b), Status::ReservationConflict);
	EXPECT_EQ(write(b), Status::ReservationConflict);
	EXPECT_EQ(read(a), Status::Good);
	EXPECT_EQ(write(a), Status::Good);
	// SPC-2 5.5.1: persistent reservation commands conflict for everyone meanwhile.
	EXPECT_EQ(in(a, SA_READ_KEYS).status, Status::ReservationConflict);
	EXPECT_EQ(out_st(a, SA_REGISTER, 0, K1), Status::ReservationConflict);
	EXPECT_EQ(in(b, SA_READ_KEYS).status, Status::ReservationConflict);
	EXPECT_EQ(t.lb.run(a, 0, cdb10(0x57), DataDir::None).status, Status::Good);
	EXPECT_EQ(t.lb.run(b, 0, cdb10(0x56), DataDir::None).status, Status::Good);
	EXPECT_EQ(read(a), Status::ReservationConflict);
	EXPECT_EQ(t.lb.run(b, 0, cdb6(0x17), DataDir::None).status, Status::Good);
	EXPECT_EQ(read(a), Status::Good);
	EXPECT_EQ(in(a, SA_READ_KEYS).status, Status::Good);
}

// libiscsi test_reserve6_lun_reset, _logout, _itnexus_loss: the reservation goes with a
// LOGICAL UNIT RESET, the holder's logout, and an I_T NEXUS RESET.
TEST_F(PrTest, Reserve6ReleasedByResetsAndNexusLoss)
{
	Nexus *a = join(kPortA), *b = join(kPortB);
	ASSERT_EQ(t.lb.run(a, 0, cdb6(0x16), DataDir::None).status, Status::Good);
	EXPECT_EQ(t.lb.tmf(a, TmfType::LunReset, 0), TmfResponse::Complete);
	EXPECT_EQ(ua(b), UA_BUS_DEVICE_RESET);
	EXPECT_EQ(t.lb.run(b, 0, cdb6(0x16), DataDir::None).status, Status::Good);
	EXPECT_EQ(ua(a), UA_BUS_DEVICE_RESET);
	EXPECT_EQ(read(a), Status::ReservationConflict);
	EXPECT_EQ(t.lb.tmf(b, TmfType::ITNexusReset, 0), TmfResponse::Complete);
	EXPECT_EQ(read(a), Status::Good);
	ASSERT_EQ(t.lb.run(a, 0, cdb6(0x16), DataDir::None).status, Status::Good);
	ASSERT_EQ(t.lb.logout(a), 0);
	EXPECT_EQ(ua(b), UA_I_T_NEXUS_LOSS);
	EXPECT_EQ(t.lb.run(b, 0, cdb6(0x16), DataDir::None).status, Status::Good);
	EXPECT_EQ(t.lb.run(b, 0, cdb6(0x17), DataDir::None).status, Status::Good);
}

TEST_F(PrTest, Reserve6CdbChecks)
{
	Nexus *a = join(kPortA);
	for (uint8_t b1 : {0x01, 0x02, 0x10}) {
		EXPECT_EQ(t.lb.run(a, 0, cdb10(0x56, b1), DataDir::None).asc(), 0x2400) << int(b1);
		EXPECT_EQ(t.lb.run(a, 0, cdb10(0x57, b1), DataDir::None).asc(), 0x2400) << int(b1);
	}
	EXPECT_EQ(t.lb.run(a, 0, cdb6(0x16, 0x01), DataDir::None).asc(), 0x2400) << "extent";
}

// SPC-4 5.13.3 (CRH 1): RESERVE and RELEASE against persistent reservations.
TEST_F(PrTest, Reserve6WithPersistentReservations)
{
	Nexus *a = join(kPortA), *b = join(kPortB), *c = join(kPortC);
	ASSERT_EQ(out_st(a, SA_REGISTER, 0, K1), Status::Good);
	// Someone is registered: RESERVE and RELEASE conflict for everyone else...
	EXPECT_EQ(t.lb.run(c, 0, cdb6(0x16), DataDir::None).status, Status::ReservationConflict);
	EXPECT_EQ(t.lb.run(c, 0, cdb6(0x17), DataDir::None).status, Status::ReservationConflict);
	// ...and for a registrant that holds no persistent reservation.
	EXPECT_EQ(t.lb.run(a, 0, cdb6(0x16), DataDir::None).status, Status::ReservationConflict);
	// The holder's RESERVE and RELEASE complete GOOD and change nothing.
	ASSERT_EQ(out_st(a, SA_RESERVE, K1, 0, WE_RO), Status::Good);
	EXPECT_EQ(t.lb.run(a, 0, cdb6(0x16), DataDir::None).status, Status::Good);
	EXPECT_EQ(t.lb.run(a, 0, cdb6(0x17), DataDir::None).status, Status::Good);
	EXPECT_EQ(resv(a).type, WE_RO);
	EXPECT_EQ(in(a, SA_READ_KEYS).status, Status::Good) << "no SPC-2 reservation was made";
	// So do a registrant's under an RO or AR type.
	ASSERT_EQ(out_st(b, SA_REGISTER, 0, K2), Status::Good);
	EXPECT_EQ(t.lb.run(b, 0, cdb6(0x16), DataDir::None).status, Status::Good);
	EXPECT_EQ(read(c), Status::Good);
	EXPECT_EQ(write(c), Status::ReservationConflict);
	// Not under WE or EA.
	ASSERT_EQ(out_st(a, SA_PREEMPT, K1, K1, WE), Status::Good);
	EXPECT_EQ(ua(b), UA_RESERVATIONS_RELEASED);
	EXPECT_EQ(t.lb.run(b, 0, cdb6(0x16), DataDir::None).status, Status::ReservationConflict);
	// With nobody registered, RESERVE works again.
	ASSERT_EQ(out_st(a, SA_CLEAR, K1, 0), Status::Good);
	EXPECT_EQ(ua(b), UA_RESERVATIONS_PREEMPTED);
	EXPECT_EQ(t.lb.run(c, 0, cdb6(0x16), DataDir::None).status, Status::Good);
	EXPECT_EQ(t.lb.run(c, 0, cdb6(0x17), DataDir::None).status, Status::Good);
}

// ---- Concurrency ---------------------------------------------------------------------------

// Three initiators registering, reserving, preempting and doing I/O at once: every command
// is answered, the state stays consistent (one reservation at most, keys listed once per
// registration). Mostly for TSan.
TEST_F(PrTest, ConcurrentServiceActionsAndIo)
{
	Nexus *s[3] = {join(kPortA), join(kPortB), join(kPortC)};
	const uint64_t key[3] = {K1, K2, K3};
	std::atomic<bool> stop{false};
	std::atomic<int> bad{0};
	auto worker = [&](int i) {
		uint32_t x = 1234567u * (i + 1);
		while (!stop.load()) {
			x = x * 1103515245u + 12345u;
			Status st;
			switch ((x >> 16) % 8) {
			case 0:
				st = out_st(s[i], SA_REGISTER_IGNORE, 0, key[i]);
				break;
			case 1:
				st = out_st(s[i], SA_RESERVE, key[i], 0, kAllTypes[(x >> 8) % 6]);
				break;
			case 2:
				st = out_st(s[i], SA_RELEASE, key[i], 0, kAllTypes[(x >> 8) % 6]);
				break;
			case 3:
				st = out_st(s[i], SA_PREEMPT_ABORT, key[i], key[(i + 1) % 3], WE);
				break;
			case 4:
				st = in(s[i], SA_READ_FULL_STATUS).status;
				break;
			case 5:
				st = write(s[i], 10 + i);
				break;
			default:
				st = read(s[i], 10 + i);
				break;
			}
			if (st != Status::Good && st != Status::ReservationConflict &&
			    st != Status::CheckCondition && st != Status::TaskAborted)
				bad++;
		}
	};
	std::thread th[3] = {std::thread(worker, 0), std::thread(worker, 1),
	                     std::thread(worker, 2)};
	std::this_thread::sleep_for(milliseconds(400));
	stop = true;
	for (auto &x : th)
		x.join();
	EXPECT_EQ(bad.load(), 0);
	EXPECT_EQ(lu->task_count(), 0u);
	while (ua(s[0]))
		;
	Keys k = keys(s[0]);
	EXPECT_LE(k.keys.size(), 3u);
}

} // namespace
} // namespace ulp::scsi
