// SPDX-License-Identifier: MIT
// Persist through power loss (SPC-4 5.13.5): PERSISTENT RESERVE OUT with APTPL 1 on a LU
// with a state store (scsi/pr_store.h, scsi/pr_persist.cc), through the loopback fabric.
// A "restart" here is what ulp-targetd does when it starts again: a new store over the same
// directory and a new LogicalUnit of the same name, whose state file is loaded before any
// initiator logs in. What it must see is what the initiators were told before: the same
// registrations (matched again by initiator port and relative target port), the same
// reservation, PRgeneration 0. A state file that is torn, corrupt, of another LU or of an
// unknown format is refused and left where it is.
#include "core/crc32c.h"
#include "scsi/core.h"
#include "scsi/core_internal.h"
#include "scsi/pr.h"
#include "scsi/pr_internal.h"
#include "scsi/pr_store.h"
#include "scsi_test_util.h"
#include "tests/scsi/pr_env.h"

#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

namespace ulp::scsi
{
namespace
{

using namespace test;
using namespace pr_test; // the PR codes, keys, ports and CDB builders
namespace fs = std::filesystem;

// REGISTER AND MOVE's parameter list (SPC-4 6.17.4) to iSCSI initiator port `port`.
std::vector<uint8_t> move_data(uint64_t key, uint64_t sa_key, uint16_t rtpi,
                               const std::string &port, bool unreg, bool aptpl)
{
	std::vector<uint8_t> d(24, 0);
	put_be64(&d[0], key);
	put_be64(&d[8], sa_key);
	d[17] = static_cast<uint8_t>((unreg ? 0x02 : 0) | (aptpl ? 0x01 : 0));
	put_be16(&d[18], rtpi);
	std::vector<uint8_t> tid(4, 0);
	tid[0] = 0x45; // format 01b, iSCSI
	tid.insert(tid.end(), port.begin(), port.end());
	tid.push_back(0);
	while (tid.size() % 4)
		tid.push_back(0);
	put_be16(&tid[2], static_cast<uint16_t>(tid.size() - 4));
	put_be32(&d[20], static_cast<uint32_t>(tid.size()));
	d.insert(d.end(), tid.begin(), tid.end());
	return d;
}

std::vector<uint8_t> read_file(const std::string &path)
{
	std::ifstream f(path, std::ios::binary);
	return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

void write_file(const std::string &path, const std::vector<uint8_t> &d)
{
	std::ofstream f(path, std::ios::binary | std::ios::trunc);
	f.write(reinterpret_cast<const char *>(d.data()), static_cast<std::streamsize>(d.size()));
}

// Recompute a state file's CRC32C after an edit (its last 4 bytes, over the rest).
void reseal(std::vector<uint8_t> &f)
{
	put_be32(&f[f.size() - 4], crc32c(std::span<const uint8_t>(f.data(), f.size() - 4)));
}

// One "run" of the target: a store over the directory, a port group, a RAM LU named lu0
// with the store attached before anyone logs in.
struct Boot {
	std::unique_ptr<PrStore> store;
	std::unique_ptr<Target> t;
	LogicalUnit *lu = nullptr;
	PrLoad load = PrLoad::NoState;
	std::string why;

	Boot(const std::string &dir, const std::string &lu_name = "lu0")
	{
		std::string w;
		store = PrStore::open(dir, &w);
		EXPECT_TRUE(store) << w;
		t = std::make_unique<Target>();
		t->lus.push_back(std::make_unique<LogicalUnit>(lu_name, ram(1 << 20), LuConfig{}));
		t->gates.push_back(nullptr);
		lu = t->lus.back().get();
		if (store)
			load = pr_attach_store(*lu, *store, &why);
		EXPECT_EQ(t->tpg.add_lun(0, *lu), 0);
	}
	~Boot()
	{
		t.reset(); // the LU goes before its store
		store.reset();
	}

	Nexus *join(const std::string &port)
	{
		Nexus *s = t->lb.login(t->tpg, port.substr(0, port.find(',')), port);
		EXPECT_TRUE(s);
		if (s) {
			EXPECT_EQ(t->lb.run(s, 0, cdb_tur(), DataDir::None).asc(), UA_POWER_ON);
		}
		return s;
	}
	// PERSISTENT RESERVE OUT, sent again after a unit attention (which it did not run
	// under), as an initiator does.
	LoopResult out_data(Nexus *s, uint8_t sa, uint8_t type, const std::vector<uint8_t> &d)
	{
		LoopResult r;
		for (int i = 0; i < 4; i++) {
			r = t->lb.run(s, 0, cdb_prout(sa, type, static_cast<uint32_t>(d.size())),
			              DataDir::Write, d);
			if (r.status != Status::CheckCondition ||
			    r.key() != SenseKey::UnitAttention)
				break;
		}
		return r;
	}
	LoopResult out(Nexus *s, uint8_t sa, uint64_t key, uint64_t sa_key, uint8_t type = 0,
	               uint8_t flags = 0)
	{
		return out_data(s, sa, type, prout_data(key, sa_key, flags));
	}
	Status st(Nexus *s, uint8_t sa, uint64_t key, uint64_t sa_key, uint8_t type = 0,
	          uint8_t flags = 0)
	{
		return out(s, sa, key, sa_key, type, flags).status;
	}
	// PERSISTENT RESERVE IN; a unit attention (a preemption, a release) is taken and the
	// command sent again, as an initiator does.
	std::vector<uint8_t> in(Nexus *s, uint8_t sa)
	{
		LoopResult r;
		for (int i = 0; i < 4; i++) {
			r = t->lb.run(s, 0, cdb_prin(sa, 4096), DataDir::Read,
			              std::vector<uint8_t>(4096));
			if (r.status != Status::CheckCondition ||
			    r.key() != SenseKey::UnitAttention)
				break;
		}
		EXPECT_EQ(r.status, Status::Good);
		return r.data;
	}
	uint32_t gen(Nexus *s) { return get_be32(in(s, SA_READ_KEYS).data()); }
	std::vector<uint64_t> keys(Nexus *s)
	{
		auto d = in(s, SA_READ_KEYS);
		std::vector<uint64_t> k;
		for (size_t i = 8; i + 8 <= d.size(); i += 8)
			k.push_back(get_be64(&d[i]));
		return k;
	}
	// READ FULL STATUS without its PRgeneration: everything a restart must keep.
	std::vector<uint8_t> status(Nexus *s)
	{
		auto d = in(s, SA_READ_FULL_STATUS);
		if (d.size() >= 4)
			put_be32(&d[0], 0);
		return d;
	}
	// REPORT CAPABILITIES bytes 2 and 3.
	std::pair<uint8_t, uint8_t> caps(Nexus *s)
	{
		auto d = in(s, SA_REPORT_CAPABILITIES);
		return {d.at(2), d.at(3)};
	}
	Status write(Nexus *s)
	{
		return t->lb
		    .run(s, 0, cdb_rw10(true, 1, 1), DataDir::Write, std::vector<uint8_t>(512))
		    .status;
	}
};

class PrPersist : public ::testing::Test
{
protected:
	PrPersist()
	{
		char tmpl[] = "/tmp/ulp-pr-XXXXXX";
		EXPECT_TRUE(mkdtemp(tmpl));
		dir = std::string(tmpl) + "/state"; // made by PrStore::open
	}
	~PrPersist() override
	{
		std::error_code ec;
		fs::remove_all(fs::path(dir).parent_path(), ec);
	}
	std::string file(const std::string &lu_name = "lu0") { return dir + "/" + lu_name + ".pr"; }
	// The READ FULL STATUS a restarted target shows (the file as it is now).
	std::vector<uint8_t> status_after_restart()
	{
		Boot r(dir);
		EXPECT_TRUE(r.load == PrLoad::Ok || r.load == PrLoad::NoState) << r.why;
		return r.status(r.join(kPortC));
	}

	std::string dir;
};

// ---- The store ---------------------------------------------------------------------------

TEST_F(PrPersist, StoreMakesItsDirectoryPrivateAndRefusesAFile)
{
	std::string why;
	auto s = PrStore::open(dir + "/a/b", &why);
	ASSERT_TRUE(s) << why;
	struct stat st {
	};
	ASSERT_EQ(::stat((dir + "/a/b").c_str(), &st), 0);
	EXPECT_EQ(st.st_mode & 0777, 0700u);
	EXPECT_TRUE(fs::is_empty(dir + "/a/b")) << "the probe file is gone";
	write_file(dir + "/plain", {1, 2, 3});
	EXPECT_FALSE(PrStore::open(dir + "/plain", &why));
	EXPECT_NE(why.find(dir + "/plain"), std::string::npos) << why;
	EXPECT_FALSE(PrStore::open(dir + "/plain/sub", &why)) << "under a file";
}

TEST_F(PrPersist, StoreReplacesAndRemovesDurablyInOrder)
{
	std::string why;
	auto s = PrStore::open(dir, &why);
	ASSERT_TRUE(s) << why;
	std::mutex m;
	std::condition_variable cv;
	std::vector<int> done;
	auto note = [&](int i) {
		return [&, i](int err) {
			std::lock_guard g(m);
			done.push_back(err == 0 ? i : -i);
			cv.notify_all();
		};
	};
	s->put("x", std::vector<uint8_t>{1}, note(1));
	s->put("x", std::vector<uint8_t>{2, 2}, note(2));
	s->put("y", std::vector<uint8_t>{3}, note(3));
	s->put("y", std::nullopt, note(4));
	s->put("z", std::nullopt, note(5)); // removing what is not there is no error
	{
		std::unique_lock g(m);
		ASSERT_TRUE(
		    cv.wait_for(g, std::chrono::seconds(10), [&] { return done.size() == 5; }));
	}
	EXPECT_EQ(done, (std::vector<int>{1, 2, 3, 4, 5}));
	std::vector<uint8_t> got;
	EXPECT_EQ(s->read("x", &got, 100), 0);
	EXPECT_EQ(got, (std::vector<uint8_t>{2, 2}));
	EXPECT_EQ(s->read("x", &got, 1), -EFBIG);
	EXPECT_EQ(s->read("y", &got, 100), -ENOENT);
	EXPECT_FALSE(fs::exists(dir + "/x.tmp"));
	// A crash between the temp file and the rename leaves x.tmp: never read, removed.
	write_file(dir + "/x.tmp", {9});
	EXPECT_TRUE(s->remove_stale("x"));
	EXPECT_FALSE(fs::exists(dir + "/x.tmp"));
	EXPECT_FALSE(s->remove_stale("x"));
}

// ---- APTPL and REPORT CAPABILITIES ---------------------------------------------------------

TEST_F(PrPersist, ReportCapabilitiesAndAptplBit)
{
	Boot r(dir);
	ASSERT_EQ(r.load, PrLoad::NoState) << r.why;
	Nexus *a = r.join(kPortA), *b = r.join(kPortB);
	// SPC-4 6.16.4: PTPL_C (byte 2 bit 0) with a store; PTPL_A (byte 3 bit 0) off.
	EXPECT_EQ(r.caps(a), std::make_pair(uint8_t(0x15), uint8_t(0xb0)));
	EXPECT_EQ(r.st(a, SA_REGISTER, 0, K1, 0, F_APTPL), Status::Good);
	EXPECT_EQ(r.caps(a).second, 0xb1) << "PTPL_A: the last valid APTPL bit was one";
	EXPECT_TRUE(fs::exists(file()));
	// APTPL counts for the registering service actions only (SPC-4 6.17.3).
	EXPECT_EQ(r.st(a, SA_RESERVE, K1, 0, WE), Status::Good);
	EXPECT_EQ(r.caps(a).second, 0xb1);
	// A REGISTER that does nothing (unregistered, zero SARK: table 62) sets nothing.
	EXPECT_EQ(r.st(b, SA_REGISTER, 0, 0), Status::Good);
	EXPECT_EQ(r.caps(a).second, 0xb1);
	// A failed one neither.
	EXPECT_EQ(r.st(b, SA_REGISTER, K3, K2), Status::ReservationConflict);
	EXPECT_EQ(r.caps(a).second, 0xb1);
	// APTPL 0 on a registering action: nothing is to outlast a power loss, and the file
	// goes before GOOD.
	EXPECT_EQ(r.st(b, SA_REGISTER, 0, K2), Status::Good);
	EXPECT_EQ(r.caps(a).second, 0xb0);
	EXPECT_FALSE(fs::exists(file()));
	EXPECT_EQ(status_after_restart().size(), 8u) << "no registrations after a restart";
	EXPECT_EQ(r.st(b, SA_REGISTER_IGNORE, 0, K3, 0, F_APTPL), Status::Good);
	EXPECT_TRUE(fs::exists(file()));
}

TEST_F(PrPersist, WithoutAStoreAptplIsRefused)
{
	Target t;
	t.add(0);
	Nexus *a = t.login("iqn.1994-05.com.example:a");
	auto r =
	    t.lb.run(a, 0, cdb_prout(SA_REGISTER, 0), DataDir::Write, prout_data(0, K1, F_APTPL));
	EXPECT_EQ(r.key(), SenseKey::IllegalRequest);
	EXPECT_EQ(r.asc(), 0x2600) << "INVALID FIELD IN PARAMETER LIST";
	auto c = t.lb.run(a, 0, cdb_prin(SA_REPORT_CAPABILITIES, 4096), DataDir::Read,
	                  std::vector<uint8_t>(8));
	EXPECT_EQ(c.data[2] & 0x01, 0) << "PTPL_C 0";
}

// ---- Restarts ------------------------------------------------------------------------------

TEST_F(PrPersist, RegistrationsAndReservationSurviveARestart)
{
	std::vector<uint8_t> before;
	uint8_t caps3 = 0;
	{
		Boot r(dir);
		Nexus *a = r.join(kPortA), *b = r.join(kPortB);
		ASSERT_EQ(r.st(a, SA_REGISTER, 0, K1, 0, F_APTPL), Status::Good);
		ASSERT_EQ(r.st(b, SA_REGISTER_IGNORE, 0, K2, 0, F_APTPL), Status::Good);
		ASSERT_EQ(r.st(a, SA_RESERVE, K1, 0, WE_RO), Status::Good);
		before = r.status(a);
		caps3 = r.caps(a).second;
		EXPECT_EQ(r.gen(a), 2u);
	}
	Boot r(dir);
	ASSERT_EQ(r.load, PrLoad::Ok) << r.why;
	Nexus *c = r.join(kPortC);
	EXPECT_EQ(r.status(c), before) << "the same registrations, ports, holder, type";
	EXPECT_EQ(r.gen(c), 0u) << "SPC-4 6.16.2: a power on zeroes PRgeneration, APTPL or not";
	EXPECT_EQ(r.keys(c), (std::vector<uint64_t>{K1, K2}));
	EXPECT_EQ(r.caps(c).second, caps3) << "PTPL_A still on";
	// The registrations are the initiators' again when they log in: b is a registrant of
	// a WRITE EXCLUSIVE - REGISTRANTS ONLY reservation, c is not.
	Nexus *b = r.join(kPortB);
	EXPECT_EQ(r.write(b), Status::Good);
	EXPECT_EQ(r.write(c), Status::ReservationConflict);
	// a holds it, and releases it with its key.
	Nexus *a = r.join(kPortA);
	EXPECT_EQ(r.st(a, SA_RELEASE, K1, 0, WE_RO), Status::Good);
	EXPECT_EQ(r.write(c), Status::Good);
	// The same initiator name with another ISID is another initiator port: unregistered.
	Nexus *a2 = r.join("iqn.1994-05.com.example:a,i,0x23d000000099");
	EXPECT_EQ(r.st(a2, SA_RESERVE, K1, 0, WE), Status::ReservationConflict);
}

// An ALL_TG_PT registration through one port group is the initiator's through another
// after a restart too, and the relative target port of a plain one is kept.
TEST_F(PrPersist, TargetPortsSurviveARestart)
{
	auto second_port = [](Boot &r) {
		auto tpg = std::make_unique<Tpg>("iqn.2026-11.org.ulp:other", 2);
		EXPECT_EQ(tpg->add_lun(0, *r.lu), 0);
		return tpg;
	};
	std::vector<uint8_t> before;
	{
		Boot r(dir);
		auto tpg2 = second_port(r);
		Nexus *a2 = r.t->lb.login(*tpg2, "iqn.1994-05.com.example:a", kPortA);
		Nexus *b = r.join(kPortB);
		ASSERT_EQ(r.t->lb.run(a2, 0, cdb_tur(), DataDir::None).asc(), UA_POWER_ON);
		ASSERT_EQ(r.st(a2, SA_REGISTER, 0, K1, 0, F_APTPL | F_ALL_TG_PT), Status::Good);
		ASSERT_EQ(r.st(b, SA_REGISTER, 0, K2, 0, F_APTPL), Status::Good);
		ASSERT_EQ(r.st(b, SA_RESERVE, K2, 0, EA), Status::Good);
		before = r.status(b);
		for (Nexus *s : tpg2->sessions())
			EXPECT_EQ(r.t->lb.logout(s), 0);
	}
	Boot r(dir);
	ASSERT_EQ(r.load, PrLoad::Ok) << r.why;
	auto tpg2 = second_port(r);
	Nexus *a = r.join(kPortA); // through port 1: ALL_TG_PT covers it
	EXPECT_EQ(r.status(a), before);
	EXPECT_EQ(r.st(a, SA_REGISTER, K1, K3), Status::Good);
	// b's registration is through port 1 only: b through port 2 is someone else.
	Nexus *b2 = r.t->lb.login(*tpg2, "iqn.1994-05.com.example:b", kPortB);
	ASSERT_EQ(r.t->lb.run(b2, 0, cdb_tur(), DataDir::None).asc(), UA_POWER_ON);
	EXPECT_EQ(r.write(b2), Status::ReservationConflict)
	    << "EXCLUSIVE ACCESS held by b through port 1";
	Nexus *b = r.join(kPortB);
	EXPECT_EQ(r.write(b), Status::Good);
	for (Nexus *s : tpg2->sessions())
		EXPECT_EQ(r.t->lb.logout(s), 0);
}

// Every service action that changes the state with APTPL active is in the file when GOOD
// comes back: a restart at that moment shows exactly what the running target shows.
TEST_F(PrPersist, EveryServiceActionPersists)
{
	Boot r(dir);
	Nexus *a = r.join(kPortA), *b = r.join(kPortB), *c = r.join(kPortC);
	auto check = [&](const char *what) {
		EXPECT_EQ(status_after_restart(), r.status(a)) << "after " << what;
	};
	ASSERT_EQ(r.st(a, SA_REGISTER, 0, K1, 0, F_APTPL), Status::Good);
	check("REGISTER");
	ASSERT_EQ(r.st(b, SA_REGISTER_IGNORE, 0, K2, 0, F_APTPL), Status::Good);
	check("REGISTER AND IGNORE EXISTING KEY");
	ASSERT_EQ(r.st(a, SA_REGISTER, K1, K3), Status::Good); // APTPL 0
	EXPECT_FALSE(fs::exists(file())) << "a REGISTER with APTPL 0 ends persistence";
	EXPECT_EQ(status_after_restart().size(), 8u) << "nothing survives a restart then";
	ASSERT_EQ(r.st(a, SA_REGISTER, K3, K1, 0, F_APTPL), Status::Good);
	check("REGISTER (new key)");
	ASSERT_EQ(r.st(a, SA_RESERVE, K1, 0, WE), Status::Good);
	check("RESERVE");
	ASSERT_EQ(r.st(a, SA_RELEASE, K1, 0, WE), Status::Good);
	check("RELEASE");
	ASSERT_EQ(r.st(a, SA_RESERVE, K1, 0, EA_RO), Status::Good);
	ASSERT_EQ(r.st(c, SA_REGISTER, 0, K3, 0, F_APTPL), Status::Good);
	ASSERT_EQ(r.st(b, SA_PREEMPT, K2, K1, WE), Status::Good);
	check("PREEMPT");
	ASSERT_EQ(r.st(a, SA_REGISTER_IGNORE, 0, K1, 0, F_APTPL), Status::Good);
	ASSERT_EQ(r.st(a, SA_PREEMPT_ABORT, K1, K2, EA), Status::Good);
	check("PREEMPT AND ABORT");
	// REGISTER AND MOVE: a moves its reservation to b (registering it) and unregisters.
	auto mv = r.out_data(a, SA_REGISTER_MOVE, 0, move_data(K1, K2, 1, kPortB, true, true));
	ASSERT_EQ(mv.status, Status::Good);
	EXPECT_EQ(r.keys(a), (std::vector<uint64_t>{K3, K2}));
	check("REGISTER AND MOVE");
	ASSERT_EQ(r.st(b, SA_CLEAR, K2, 0), Status::Good);
	check("CLEAR");
	EXPECT_TRUE(fs::exists(file())) << "APTPL stays active with no registrations";
	// Nothing changed: no write needed, and the file is as it was.
	const auto f = read_file(file());
	ASSERT_EQ(r.st(b, SA_REGISTER, 0, 0), Status::Good);
	EXPECT_EQ(read_file(file()), f);
}

// TARGET COLD RESET is a power on: with APTPL active the registrations and the reservation
// stay (PRgeneration goes to 0), the SPC-2 reservation never does.
TEST_F(PrPersist, ColdResetKeepsAptplState)
{
	Boot r(dir);
	Nexus *a = r.join(kPortA), *b = r.join(kPortB);
	ASSERT_EQ(r.st(a, SA_REGISTER, 0, K1, 0, F_APTPL), Status::Good);
	ASSERT_EQ(r.st(a, SA_RESERVE, K1, 0, EA), Status::Good);
	const auto before = r.status(a);
	EXPECT_EQ(r.t->lb.tmf(b, TmfType::TargetColdReset, 0), TmfResponse::Complete);
	for (Nexus *s : {a, b})
		EXPECT_EQ(r.t->lb.run(s, 0, cdb_tur(), DataDir::None).asc(), UA_POWER_ON);
	EXPECT_EQ(r.status(a), before);
	EXPECT_EQ(r.gen(a), 0u);
	EXPECT_EQ(r.write(b), Status::ReservationConflict);
	// With APTPL 0 a cold reset forgets everything, as before.
	ASSERT_EQ(r.st(a, SA_REGISTER, K1, K2), Status::Good);
	EXPECT_EQ(r.t->lb.tmf(b, TmfType::TargetColdReset, 0), TmfResponse::Complete);
	for (Nexus *s : {a, b})
		EXPECT_EQ(r.t->lb.run(s, 0, cdb_tur(), DataDir::None).asc(), UA_POWER_ON);
	EXPECT_TRUE(r.keys(a).empty());
	EXPECT_EQ(r.write(b), Status::Good);
}

// A write that fails (here: the directory is gone) undoes the change, which the initiator
// is told did not happen; the next change rewrites the file.
TEST_F(PrPersist, AFailedWriteUndoesTheChange)
{
	Boot r(dir);
	Nexus *a = r.join(kPortA), *b = r.join(kPortB);
	ASSERT_EQ(r.st(a, SA_REGISTER, 0, K1, 0, F_APTPL), Status::Good);
	const auto before = r.status(a);
	const uint32_t gen = r.gen(a);
	fs::rename(dir, dir + ".gone");
	fs::remove_all(dir + ".gone");
	auto x = r.out(b, SA_REGISTER, 0, K2, 0, F_APTPL);
	EXPECT_EQ(x.key(), SenseKey::HardwareError);
	EXPECT_EQ(x.asc(), 0x4400) << "INTERNAL TARGET FAILURE";
	EXPECT_EQ(r.status(a), before) << "the registration of b is undone";
	EXPECT_EQ(r.gen(a), gen);
	EXPECT_EQ(r.caps(a).second & 0x01, 1) << "APTPL stays active";
	// Other commands carry on, and a later PERSISTENT RESERVE OUT is not stuck.
	EXPECT_EQ(r.write(b), Status::Good);
	EXPECT_EQ(r.out(a, SA_RESERVE, K1, 0, WE).key(), SenseKey::HardwareError);
	EXPECT_EQ(r.write(b), Status::Good) << "the undone reservation conflicts with nothing";
}

// PERSISTENT RESERVE OUT commands from several initiators at once: each waits for the one
// being written, none is lost, and the file ends as the state does.
TEST_F(PrPersist, ConcurrentChangesReachTheFileInOrder)
{
	Boot r(dir);
	const std::string ports[] = {kPortA, kPortB, kPortC,
	                             "iqn.1994-05.com.example:d,i,0x23d000000004"};
	std::vector<Nexus *> s;
	for (const auto &p : ports)
		s.push_back(r.join(p));
	std::vector<std::thread> th;
	std::atomic<int> bad{0};
	constexpr int kRounds = 40;
	for (size_t i = 0; i < s.size(); i++)
		th.emplace_back([&, i] {
			for (int k = 1; k <= kRounds; k++) {
				const uint64_t key = (uint64_t(i + 1) << 32) | uint64_t(k);
				if (r.st(s[i], SA_REGISTER_IGNORE, 0, key, 0, F_APTPL) !=
				    Status::Good)
					bad++;
				if (k % 8 == 0 &&
				    r.st(s[i], SA_RESERVE, key, 0, WE_AR) != Status::Good)
					bad++;
			}
		});
	for (auto &t : th)
		t.join();
	EXPECT_EQ(bad.load(), 0);
	auto k = r.keys(s[0]);
	ASSERT_EQ(k.size(), s.size());
	for (size_t i = 0; i < s.size(); i++)
		EXPECT_EQ(k[i] & 0xffffffffu, uint64_t(kRounds));
	EXPECT_EQ(status_after_restart(), r.status(s[0]));
}

// ---- Files that are refused ----------------------------------------------------------------

class PrStateFile : public PrPersist
{
protected:
	// A valid state file: two registrations, a reservation.
	std::vector<uint8_t> valid()
	{
		{
			Boot r(dir);
			Nexus *a = r.join(kPortA), *b = r.join(kPortB);
			EXPECT_EQ(r.st(a, SA_REGISTER, 0, K1, 0, F_APTPL), Status::Good);
			EXPECT_EQ(r.st(b, SA_REGISTER, 0, K2, 0, F_APTPL), Status::Good);
			EXPECT_EQ(r.st(b, SA_RESERVE, K2, 0, EA), Status::Good);
		}
		return read_file(file());
	}
	// Put f in place and restart: the LU must refuse it with want, keep no state and no
	// store (PTPL_C 0), name the file, and leave it as it was.
	void expect_refused(const std::vector<uint8_t> &f, PrLoad want, const char *what)
	{
		write_file(file(), f);
		Boot r(dir);
		EXPECT_EQ(r.load, want) << what << ": " << r.why;
		EXPECT_NE(r.why.find(file()), std::string::npos) << r.why;
		EXPECT_NE(r.why.find("move the file aside"), std::string::npos) << r.why;
		Nexus *a = r.join(kPortA);
		EXPECT_TRUE(r.keys(a).empty()) << what;
		EXPECT_EQ(r.caps(a).first & 0x01, 0) << what << ": PTPL_C 0";
		EXPECT_EQ(read_file(file()), f) << what << ": the file is left alone";
	}
};

TEST_F(PrStateFile, ValidFileLoads)
{
	const auto f = valid();
	PrLoaded l;
	std::string why;
	ASSERT_EQ(pr_decode(f, "lu0", LogicalUnit("lu0", ram(4096), {}).naa(), &l, &why),
	          PrLoad::Ok)
	    << why;
	ASSERT_EQ(l.regs.size(), 2u);
	EXPECT_EQ(l.regs[0].nexus.initiator_port, kPortA);
	EXPECT_EQ(l.regs[0].nexus.rtpi, 1);
	EXPECT_EQ(l.regs[1].key, K2);
	EXPECT_EQ(l.type, PrType::ExclusiveAccess);
	EXPECT_EQ(l.holder, l.regs[1].id);
}

TEST_F(PrStateFile, TornAndTruncatedFilesAreRefused)
{
	const auto f = valid();
	for (size_t n :
	     {size_t(0), size_t(5), size_t(12), size_t(19), f.size() / 2, f.size() - 1}) {
		std::vector<uint8_t> t(f.begin(), f.begin() + static_cast<long>(n));
		expect_refused(t, PrLoad::Truncated, "truncated");
	}
}

TEST_F(PrStateFile, CorruptFilesAreRefused)
{
	const auto f = valid();
	// Any flipped bit past the magic and length is caught by the checksum.
	std::mt19937 rng(7);
	for (int i = 0; i < 8; i++) {
		auto c = f;
		const size_t at = 16 + rng() % (c.size() - 16);
		c[at] ^= static_cast<uint8_t>(1u << (rng() % 8));
		expect_refused(c, PrLoad::BadChecksum, "a flipped bit");
	}
	auto c = f;
	c[0] = 'X';
	expect_refused(c, PrLoad::BadMagic, "bad magic");
	c = f;
	c.push_back(0);
	expect_refused(c, PrLoad::Malformed, "a trailing byte");
}

TEST_F(PrStateFile, UnknownVersionIsRefused)
{
	auto f = valid();
	put_be32(&f[8], 2);
	reseal(f);
	expect_refused(f, PrLoad::BadVersion, "version 2");
}

TEST_F(PrStateFile, AnotherLusFileIsRefused)
{
	const auto f = valid();
	// lu1's file name with lu0's contents (an administrator's copy gone wrong).
	write_file(file("lu1"), f);
	Boot r(dir, "lu1");
	EXPECT_EQ(r.load, PrLoad::WrongLu) << r.why;
	EXPECT_NE(r.why.find("lu0"), std::string::npos) << r.why;
}

// A checksum that is right over contents pr_out.cc never writes: refused all the same.
TEST_F(PrStateFile, InconsistentContentsAreRefused)
{
	const auto f = valid();
	// Offsets in the body (pr_persist.cc): name (2 + 3), NAA 8, type at 16+13, holder at
	// 16+17, count at 16+21.
	constexpr size_t kType = 16 + 13, kHolder = 16 + 17, kCount = 16 + 21;
	auto e = f;
	put_be32(&e[kHolder], 2);
	reseal(e);
	expect_refused(e, PrLoad::Malformed, "holder out of range");
	e = f;
	e[kType] = 0x2;
	reseal(e);
	expect_refused(e, PrLoad::Malformed, "type 2");
	e = f;
	e[kType] = WE_AR;
	reseal(e);
	expect_refused(e, PrLoad::Malformed, "a holder for an all-registrants type");
	e = f;
	put_be32(&e[kCount], 0x10000000);
	reseal(e);
	expect_refused(e, PrLoad::Malformed, "a huge count");
	e = f;
	put_be32(&e[kCount], 1);
	reseal(e);
	expect_refused(e, PrLoad::Malformed, "fewer registrations than bytes");
}

TEST_F(PrStateFile, AStaleTempFileIsIgnored)
{
	const auto f = valid();
	write_file(file() + ".tmp", {1, 2, 3});
	Boot r(dir);
	EXPECT_EQ(r.load, PrLoad::Ok) << r.why;
	EXPECT_FALSE(fs::exists(file() + ".tmp"));
	EXPECT_EQ(r.keys(r.join(kPortC)), (std::vector<uint64_t>{K1, K2}));
}

TEST(PrStateFileName, DistinctNamesGiveDistinctFiles)
{
	LogicalUnit a("iqn.2026-11.org.ulp:disk1/0", ram(4096), {});
	LogicalUnit b("iqn.2026-11.org.ulp_disk1/0", ram(4096), {});
	EXPECT_EQ(pr_state_file(a), "iqn.2026-11.org.ulp%3Adisk1%2F0.pr");
	EXPECT_NE(pr_state_file(a), pr_state_file(b));
}

} // namespace
} // namespace ulp::scsi
