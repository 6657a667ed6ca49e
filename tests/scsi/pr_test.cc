// SPDX-License-Identifier: MIT
// Reservations through the loopback fabric, with two and three initiators: PERSISTENT
// RESERVE OUT registering (key rules, nexus loss and LUN reset), its parameter list and CDB
// checks, reserving and releasing (every type, access per type, unit attentions), CLEAR and
// REGISTER AND MOVE. PERSISTENT RESERVE IN: pr_in_test.cc; PREEMPT (AND ABORT) and service
// actions racing I/O: pr_preempt_test.cc; the conflict tables and the SPC-2 RESERVE/RELEASE:
// pr_conflict_test.cc; what they share: pr_env.h.
//
// Where libiscsi's conformance suite (test-tool/test_prout_*.c, test_prin_*.c,
// test_reserve6_*.c) checks a behaviour, the test says so: those expectations are the ones
// iscsi-test-cu will hold the target to. Operation codes, service actions and types are
// spelled out from the standards here, not taken from the implementation.
#include "tests/scsi/pr_env.h"

#include <cstring>

namespace ulp::scsi
{
namespace
{

using namespace pr_test;

// ---- Registering ---------------------------------------------------------------------------

// libiscsi test_prout_register_simple, prout_reregister_key_fails.
TEST_F(Pr, RegisterAndReadKeys)
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

TEST_F(Pr, RegistrationsArePerNexusAndListedInOrder)
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
TEST_F(Pr, RegistrationsAndReservationsSurviveNexusLossAndLunReset)
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

TEST_F(Pr, ParameterListAndCdbErrors)
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

// ---- Reserving and releasing ---------------------------------------------------------------

// libiscsi test_prout_reserve_simple (and test_prin_report_caps_simple's loop): every type
// reserves, READ RESERVATION shows it (key zero for all-registrants types), RELEASE of the
// same type ends it. Neither changes PRgeneration (test_prout_clear_simple).
TEST_F(Pr, ReserveAndReleaseEveryType)
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
TEST_F(Pr, KeyRulesForEveryServiceAction)
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

TEST_F(Pr, AccessPerTypeForRegisteredAndUnregistered)
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
TEST_F(Pr, HolderUnregisteringReleasesUnlessAllRegistrants)
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
TEST_F(Pr, ReleaseUnitAttentions)
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
TEST_F(Pr, ClearRemovesEverything)
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
TEST_F(Pr, RegisterAndMove)
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

} // namespace
} // namespace ulp::scsi
