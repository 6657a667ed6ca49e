// SPDX-License-Identifier: MIT
// PREEMPT and PREEMPT AND ABORT through the loopback fabric (SPC-4 5.13.11): registrations
// and the reservation taken away, the preempted nexuses' tasks in flight aborted and waited
// for (with and without TAS, racing a LUN reset), and three initiators running service
// actions and I/O at once. The fixture is in pr_env.h.
#include "tests/scsi/pr_env.h"

#include <atomic>
#include <thread>

namespace ulp::scsi
{
namespace
{

using namespace pr_test;
using std::chrono::milliseconds;

// ---- Preempting ----------------------------------------------------------------------------

// libiscsi test_prout_preempt_rm_reg: with no reservation, PREEMPT removes the registrations
// SARK names, bumps PRgeneration once; the preempted nexus hears REGISTRATIONS PREEMPTED.
TEST_F(Pr, PreemptRemovesRegistration)
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
TEST_F(Pr, PreemptTheHolder)
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
TEST_F(Pr, PreemptAllRegistrantsWithZeroKey)
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

class PrAbort : public Pr
{
protected:
	static LuConfig cfg(bool tas)
	{
		LuConfig c;
		c.tas = tas;
		return c;
	}
	explicit PrAbort(bool tas = true) : Pr(cfg(tas), /*gated=*/true) {}
};

class PrAbortNoTas : public PrAbort
{
protected:
	PrAbortNoTas() : PrAbort(false) {}
};

// SPC-4 5.13.11.2.5: the preempted nexus's task in flight is aborted (TASK ABORTED: TAS is
// set), and the PREEMPT AND ABORT completes only after it has ended. Tasks of nexuses that
// were not preempted run on.
TEST_F(PrAbort, AbortsThePreemptedTasksAndWaitsForThem)
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
TEST_F(PrAbortNoTas, AbortsSilentlyWithCommandsCleared)
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
TEST_F(PrAbort, RacesALunReset)
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

// ---- Concurrency ---------------------------------------------------------------------------

// Three initiators registering, reserving, preempting and doing I/O at once: every command
// is answered, the state stays consistent (one reservation at most, keys listed once per
// registration). Mostly for TSan.
TEST_F(Pr, ConcurrentServiceActionsAndIo)
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
