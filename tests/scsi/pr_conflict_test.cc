// SPDX-License-Identifier: MIT
// What a reservation refuses: the conflict tables of SPC-4 5.13.1 (table 66) and SBC-3
// (table 13) per type, for registered and unregistered nexuses, and the SPC-2 RESERVE/RELEASE
// (two initiators, resets and lost nexuses, CDB checks, alongside persistent reservations).
// The fixture is in pr_env.h; libiscsi's test_reserve6_*.c is cited where it checks the same.
#include "tests/scsi/pr_env.h"

#include <cstring>

namespace ulp::scsi
{
namespace
{

using namespace pr_test;

// ---- The conflict tables (SPC-4 5.13.1 table 66, SBC-3 table 13) ---------------------------

// pr_check is asked directly with CDBs of commands the command families may not offer yet:
// the tables are about commands, not about what executes them.
class PrTable : public Pr
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

TEST_F(PrTable, NonHoldersPerTypeAndRegistration)
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
TEST_F(Pr, Reserve6TwoInitiators)
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
TEST_F(Pr, Reserve6ReleasedByResetsAndNexusLoss)
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

TEST_F(Pr, Reserve6CdbChecks)
{
	Nexus *a = join(kPortA);
	for (uint8_t b1 : {0x01, 0x02, 0x10}) {
		EXPECT_EQ(t.lb.run(a, 0, cdb10(0x56, b1), DataDir::None).asc(), 0x2400) << int(b1);
		EXPECT_EQ(t.lb.run(a, 0, cdb10(0x57, b1), DataDir::None).asc(), 0x2400) << int(b1);
	}
	EXPECT_EQ(t.lb.run(a, 0, cdb6(0x16, 0x01), DataDir::None).asc(), 0x2400) << "extent";
}

// SPC-4 5.13.3 (CRH 1): RESERVE and RELEASE against persistent reservations.
TEST_F(Pr, Reserve6WithPersistentReservations)
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

} // namespace
} // namespace ulp::scsi
