// SPDX-License-Identifier: MIT
// tests/iscsi/aptpl_restart_test.cc - persistent reservations with APTPL 1 across crashes of
// ulp-targetd: three initiators (the project's iSCSI initiator, fixed ISIDs) change the
// registrations and the reservation with PERSISTENT RESERVE OUT, APTPL 1 on every
// registering command, while the daemon is SIGKILLed at a random moment (seeded; the seed
// is printed, and ULP_TEST_SEED replays it). Each time it is started again on the same
// --state-dir, READ KEYS, READ RESERVATION and READ FULL STATUS must show exactly the state
// after the last command that was answered GOOD, or after the one in flight at the kill:
// never anything else, never a torn state.
//
// What the state should be is kept by a small model of SPC-4 5.13 for the commands used
// (REGISTER, REGISTER AND IGNORE EXISTING KEY, RESERVE, RELEASE, PREEMPT, CLEAR; types WE,
// EA, WE_RO, EA_RO; keys unique): every command issued is one the model says succeeds.
#include "core/byteorder.h"
#include "core/log.h"
#include "iscsi/initiator/scsi.h"
#include "iscsi/initiator/session.h"
#include "iscsi/target/session.h"
#include "tests/iscsi/target_process.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

namespace
{

using namespace ulp;
using namespace ulp::iscsi::initiator;
using ulp::test::TargetdProcess;
using clock_type = std::chrono::steady_clock;
using namespace std::chrono_literals;

const std::string kIqn = "iqn.2026-11.org.ulp:aptpl";
constexpr int kInitiators = 3;
constexpr int kRounds = 12;                        // crashes
constexpr auto kMaxRoundTime = 300ms;              // the kill comes within this of a start
constexpr uint8_t kTypes[] = {0x1, 0x3, 0x5, 0x6}; // WE, EA, WE_RO, EA_RO

std::string name_of(int i)
{
	return "iqn.2026-11.org.ulp:pr-" + std::string(1, char('a' + i));
}
iscsi::Isid isid_of(int i)
{
	return {0x80, 0x00, 0x00, 0x00, 0x00, static_cast<uint8_t>(i + 1)};
}

// ---- The model -----------------------------------------------------------------------------

struct Model {
	std::vector<std::pair<int, uint64_t>> regs; // (initiator, key) in registration order
	int holder = -1;                            // -1: no reservation
	uint8_t type = 0;
	bool aptpl = false; // PTPL_A: a registering command with APTPL 1 has succeeded

	bool operator==(const Model &) const = default;
	const std::pair<int, uint64_t> *reg(int i) const
	{
		for (const auto &r : regs)
			if (r.first == i)
				return &r;
		return nullptr;
	}
	void remove(int i)
	{
		std::erase_if(regs, [&](const auto &r) { return r.first == i; });
		if (holder == i) { // SPC-4 5.13.11.3: the reservation goes with its holder
			holder = -1;
			type = 0;
		}
	}
	std::string str() const
	{
		std::ostringstream o;
		for (const auto &[i, k] : regs)
			o << char('a' + i) << ":" << std::hex << k << std::dec << " ";
		o << "holder " << holder << " type " << int(type) << " aptpl " << aptpl;
		return o.str();
	}
};

// One PERSISTENT RESERVE OUT, and the model after it.
struct Op {
	int who = 0;
	uint8_t sa = 0, type = 0, flags = 0;
	uint64_t key = 0, sa_key = 0;
	Model after;
	std::string what;
};

Op next_op(const Model &m, std::mt19937 &rng, uint64_t *serial)
{
	Op op;
	op.who = static_cast<int>(rng() % kInitiators);
	op.after = m;
	const int i = op.who;
	const auto *me = m.reg(i);
	const uint64_t fresh = (uint64_t(i + 1) << 48) | ++*serial;
	if (!me) {
		op.sa = 0x00; // REGISTER from an unregistered nexus
		op.sa_key = fresh;
		op.flags = 0x01;
		op.after.regs.push_back({i, fresh});
		op.after.aptpl = true;
		op.what = "REGISTER";
		return op;
	}
	op.key = me->second;
	std::vector<int> others;
	for (const auto &r : m.regs)
		if (r.first != i)
			others.push_back(r.first);
	switch (rng() % 6) {
	case 0: // a new key
		op.sa = 0x00;
		op.sa_key = fresh;
		op.flags = 0x01;
		for (auto &r : op.after.regs)
			if (r.first == i)
				r.second = fresh;
		op.after.aptpl = true;
		op.what = "REGISTER (new key)";
		return op;
	case 1: // unregister
		op.sa = 0x06;
		op.key = 0;
		op.flags = 0x01;
		op.after.remove(i);
		op.after.aptpl = true;
		op.what = "REGISTER AND IGNORE EXISTING KEY (unregister)";
		return op;
	case 2:
	case 3:
		if (m.holder < 0) {
			op.sa = 0x01;
			op.type = kTypes[rng() % 4];
			op.after.holder = i;
			op.after.type = op.type;
			op.what = "RESERVE";
			return op;
		}
		if (m.holder == i) {
			op.sa = 0x02;
			op.type = m.type;
			op.after.holder = -1;
			op.after.type = 0;
			op.what = "RELEASE";
			return op;
		}
		[[fallthrough]];
	case 4:
		if (!others.empty()) {
			// SPC-4 5.13.11.2.4: the preempted registration goes; if it held the
			// reservation, the issuer holds it now with the CDB's type.
			const int j = others[rng() % others.size()];
			op.sa = 0x04;
			op.sa_key = m.reg(j)->second;
			op.type = kTypes[rng() % 4];
			const bool held = m.holder == j;
			std::erase_if(op.after.regs, [&](const auto &r) { return r.first == j; });
			if (held) {
				op.after.holder = i;
				op.after.type = op.type;
			}
			op.what = "PREEMPT";
			return op;
		}
		[[fallthrough]];
	default: // CLEAR (SPC-4 5.13.11.2.6)
		op.sa = 0x03;
		op.after.regs.clear();
		op.after.holder = -1;
		op.after.type = 0;
		op.what = "CLEAR";
		return op;
	}
}

// ---- Talking to the daemon -----------------------------------------------------------------

struct Initiators {
	std::vector<std::unique_ptr<Session>> s;

	::testing::AssertionResult login(uint16_t port)
	{
		s.clear();
		for (int i = 0; i < kInitiators; i++) {
			InitiatorConfig c;
			c.initiator_name = name_of(i);
			c.target_name = kIqn;
			c.isid = isid_of(i);
			auto x = std::make_unique<Session>(c);
			if (!x->login(Portal{"127.0.0.1", port, 0}))
				return ::testing::AssertionFailure() << "login: " << x->error();
			// POWER ON, RESET, OR BUS DEVICE RESET OCCURRED first (SAM-5 5.14).
			const auto tur = cdb_test_unit_ready();
			bool good = false;
			for (int k = 0; k < 3 && !good; k++)
				good = x->run({0, tur, DataDir::None, {}}).good();
			if (!good)
				return ::testing::AssertionFailure()
				       << "TEST UNIT READY never GOOD";
			s.push_back(std::move(x));
		}
		return ::testing::AssertionSuccess();
	}
};

std::vector<uint8_t> prin(Session &s, uint8_t sa)
{
	std::array<uint8_t, 10> cdb{0x5e, sa};
	std::vector<uint8_t> d(4096);
	put_be16(&cdb[7], static_cast<uint16_t>(d.size()));
	const ScsiResult r = s.run({0, cdb, DataDir::Read, d});
	EXPECT_TRUE(r.good()) << describe_result(r);
	d.resize(r.good() ? r.data_in : 0);
	return d;
}

// What the daemon shows, read back as a Model; *gen gets READ KEYS's PRgeneration.
::testing::AssertionResult read_state(Session &s, Model *out, uint32_t *gen)
{
	Model m;
	const auto keys = prin(s, 0x00);
	const auto resv = prin(s, 0x01);
	const auto caps = prin(s, 0x02);
	const auto full = prin(s, 0x03);
	if (keys.size() < 8 || resv.size() < 8 || caps.size() < 8 || full.size() < 8)
		return ::testing::AssertionFailure() << "short PERSISTENT RESERVE IN data";
	*gen = get_be32(&keys[0]);
	if (!(caps[2] & 0x01))
		return ::testing::AssertionFailure() << "PTPL_C 0: the state directory is not used";
	m.aptpl = caps[3] & 0x01;
	// READ FULL STATUS (SPC-4 6.16.5): key, holder flag, type, rtpi, TransportID.
	std::vector<uint64_t> full_keys;
	for (size_t off = 8; off + 24 <= full.size();) {
		const uint64_t key = get_be64(&full[off]);
		const bool holder = full[off + 12] & 0x01;
		const uint16_t rtpi = get_be16(&full[off + 18]);
		const uint32_t n = get_be32(&full[off + 20]);
		if (off + 24 + n > full.size() || n < 5)
			return ::testing::AssertionFailure()
			       << "READ FULL STATUS descriptor overruns";
		const std::string port(reinterpret_cast<const char *>(&full[off + 28]));
		int who = -1;
		for (int i = 0; i < kInitiators; i++)
			if (port == iscsi::target::initiator_port_name(name_of(i), isid_of(i)))
				who = i;
		if (who < 0 || rtpi != 1)
			return ::testing::AssertionFailure()
			       << "a registration of an unknown I_T nexus: " << port << " rtpi "
			       << rtpi;
		m.regs.push_back({who, key});
		full_keys.push_back(key);
		if (holder) {
			if (m.holder >= 0)
				return ::testing::AssertionFailure() << "two holders";
			m.holder = who;
			m.type = full[off + 13] & 0x0f;
		}
		off += 24 + n;
	}
	// READ KEYS and READ RESERVATION agree with it.
	std::vector<uint64_t> rk;
	for (size_t i = 8; i + 8 <= keys.size(); i += 8)
		rk.push_back(get_be64(&keys[i]));
	if (rk != full_keys)
		return ::testing::AssertionFailure() << "READ KEYS and READ FULL STATUS differ";
	const bool reserved = get_be32(&resv[4]) >= 16;
	if (reserved != (m.holder >= 0) ||
	    (reserved &&
	     (get_be64(&resv[8]) != m.reg(m.holder)->second || (resv[21] & 0x0f) != m.type)))
		return ::testing::AssertionFailure()
		       << "READ RESERVATION and READ FULL STATUS differ";
	*out = m;
	return ::testing::AssertionSuccess();
}

enum class Sent { Good, Retry, Killed };

// Send op; kill the daemon if the deadline comes first (the command is then in flight).
Sent send(Session &s, const Op &op, clock_type::time_point deadline, TargetdProcess &t)
{
	std::array<uint8_t, 10> cdb{0x5f, op.sa, op.type};
	put_be32(&cdb[5], 24);
	std::vector<uint8_t> d(24, 0);
	put_be64(&d[0], op.key);
	put_be64(&d[8], op.sa_key);
	d[20] = op.flags;
	bool done = false;
	ScsiResult res;
	if (s.submit({0, cdb, DataDir::Write, d}, [&](const ScsiResult &r) {
		    res = r;
		    done = true;
	    }) == iscsi::kReservedTag) {
		ADD_FAILURE() << "submit: " << s.last_error();
		return Sent::Killed;
	}
	while (!done) {
		const auto now = clock_type::now();
		if (now >= deadline) {
			t.kill();
			return Sent::Killed;
		}
		s.poll(std::min(
		    std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now) + 1ms,
		    5ms));
	}
	if (res.good())
		return Sent::Good;
	// A unit attention (a preemption or a release told to this initiator) is not an
	// execution: the same command goes again.
	const auto sk = parse_sense({res.sense.data(), res.sense_len});
	if (res.status == 2 && sk.valid && sk.key == 0x6)
		return Sent::Retry;
	ADD_FAILURE() << op.what << " from " << char('a' + op.who) << ": " << describe_result(res);
	return Sent::Killed;
}

TEST(AptplRestart, SigkillAtRandomPointsKeepsAcknowledgedState)
{
	unsigned seed = std::random_device{}();
	if (const char *e = std::getenv("ULP_TEST_SEED"))
		seed = static_cast<unsigned>(std::strtoul(e, nullptr, 0));
	std::printf("aptpl_restart: seed %u (ULP_TEST_SEED=%u replays it)\n", seed, seed);
	std::fflush(stdout);
	SCOPED_TRACE("seed " + std::to_string(seed));
	std::mt19937 rng(seed);
	log::set_level(log::Level::Warn); // not a login line per initiator per restart

	char tmpl[] = "/tmp/ulp-aptpl-XXXXXX";
	ASSERT_TRUE(mkdtemp(tmpl));
	const std::string dir = tmpl;
	struct Cleanup {
		std::string d;
		~Cleanup()
		{
			std::error_code ec;
			std::filesystem::remove_all(d, ec);
		}
	} cleanup{dir};
	const std::vector<std::string> args{
	    "--target", kIqn, "--lun", "0:ram:size=16M", "-q", "--state-dir", dir + "/state"};

	Model acked;                 // after the last command answered GOOD
	std::optional<Model> flight; // after the one in flight at the kill
	uint64_t serial = 0;
	int in_flight_kills = 0, acked_total = 0, matched_flight = 0;
	for (int round = 0; round < kRounds; round++) {
		SCOPED_TRACE("round " + std::to_string(round));
		TargetdProcess t;
		std::string why;
		ASSERT_TRUE(t.start(args, &why)) << why;
		Initiators in;
		ASSERT_TRUE(in.login(t.port()));
		Model got;
		uint32_t gen = 0;
		ASSERT_TRUE(read_state(*in.s[0], &got, &gen)) << t.log();
		if (got == acked) {
		} else if (flight && got == *flight) {
			acked = *flight;
			matched_flight++;
		} else {
			FAIL() << "after the restart: " << got.str()
			       << "\nlast acknowledged: " << acked.str()
			       << "\nin flight: " << (flight ? flight->str() : "none") << "\n"
			       << t.log();
		}
		EXPECT_EQ(gen, 0u) << "SPC-4 6.16.2: PRgeneration is zero after a power on";
		flight.reset();

		const auto deadline =
		    clock_type::now() +
		    std::chrono::microseconds(
		        rng() % std::chrono::duration_cast<std::chrono::microseconds>(kMaxRoundTime)
		                    .count());
		for (;;) {
			Op op = next_op(acked, rng, &serial);
			Sent r;
			do
				r = send(*in.s[op.who], op, deadline, t);
			while (r == Sent::Retry);
			if (r == Sent::Killed) {
				flight = op.after;
				in_flight_kills++;
				break;
			}
			acked = op.after;
			acked_total++;
			if (clock_type::now() >= deadline) {
				t.kill(); // between two commands: nothing in flight
				break;
			}
		}
		if (::testing::Test::HasFailure())
			return;
	}
	std::printf("aptpl_restart: %d restarts, %d commands acknowledged, %d kills with a command "
	            "in flight (%d of them found applied)\n",
	            kRounds, acked_total, in_flight_kills, matched_flight);
	EXPECT_GT(acked_total, kRounds) << "the runs did something";
}

// A state file that is damaged stops the start, naming the file and the way out; moved
// aside, the daemon starts and the LUN has no registrations.
TEST(AptplRestart, DamagedStateFileStopsTheStart)
{
	char tmpl[] = "/tmp/ulp-aptpl-XXXXXX";
	ASSERT_TRUE(mkdtemp(tmpl));
	const std::string dir = std::string(tmpl) + "/state";
	struct Cleanup {
		std::string d;
		~Cleanup()
		{
			std::error_code ec;
			std::filesystem::remove_all(d, ec);
		}
	} cleanup{tmpl};
	const std::vector<std::string> args{"--target", kIqn,          "--lun", "0:ram:size=16M",
	                                    "-q",       "--state-dir", dir};
	std::string file;
	{
		TargetdProcess t;
		std::string why;
		ASSERT_TRUE(t.start(args, &why)) << why;
		Initiators in;
		ASSERT_TRUE(in.login(t.port()));
		Model m;
		uint64_t serial = 0;
		std::mt19937 rng(1);
		const Op op = next_op(m, rng, &serial); // a REGISTER with APTPL 1
		ASSERT_EQ(send(*in.s[op.who], op, clock_type::now() + 10s, t), Sent::Good);
		in.s.clear(); // gone before the daemon's shutdown asks them to log out
		ASSERT_EQ(t.stop(), 0);
		for (const auto &e : std::filesystem::directory_iterator(dir))
			file = e.path();
		ASSERT_FALSE(file.empty());
	}
	{
		// One byte of the body flipped.
		std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
		f.seekp(20);
		f.put('\xff');
	}
	TargetdProcess t;
	std::string why;
	EXPECT_FALSE(t.start(args, &why, 5s));
	EXPECT_NE(why.find(file), std::string::npos) << why;
	EXPECT_NE(why.find("checksum mismatch"), std::string::npos) << why;
	EXPECT_NE(why.find("move the file aside"), std::string::npos) << why;
	std::filesystem::rename(file, file + ".bad");
	ASSERT_TRUE(t.start(args, &why)) << why;
	Initiators in;
	ASSERT_TRUE(in.login(t.port()));
	Model got;
	uint32_t gen = 0;
	ASSERT_TRUE(read_state(*in.s[0], &got, &gen));
	EXPECT_EQ(got, Model{});
}

// A state directory that cannot be used: the daemon says so once and runs, refusing APTPL 1
// (PTPL_C 0) as a target without persistence does.
TEST(AptplRestart, UnusableStateDirRefusesAptpl)
{
	char tmpl[] = "/tmp/ulp-aptpl-XXXXXX";
	ASSERT_TRUE(mkdtemp(tmpl));
	const std::string plain = std::string(tmpl) + "/plain";
	std::ofstream(plain) << "not a directory";
	struct Cleanup {
		std::string d;
		~Cleanup()
		{
			std::error_code ec;
			std::filesystem::remove_all(d, ec);
		}
	} cleanup{tmpl};
	TargetdProcess t;
	std::string why;
	ASSERT_TRUE(t.start(
	    {"--target", kIqn, "--lun", "0:ram:size=16M", "-q", "--state-dir", plain}, &why))
	    << why;
	Initiators in;
	ASSERT_TRUE(in.login(t.port()));
	const auto caps = prin(*in.s[0], 0x02);
	ASSERT_GE(caps.size(), 8u);
	EXPECT_EQ(caps[2] & 0x01, 0) << "PTPL_C 0";
	std::array<uint8_t, 10> cdb{0x5f, 0x00};
	put_be32(&cdb[5], 24);
	std::vector<uint8_t> d(24, 0);
	put_be64(&d[8], 0x1234);
	d[20] = 0x01; // APTPL
	const ScsiResult r = in.s[0]->run({0, cdb, DataDir::Write, d});
	const auto sk = parse_sense({r.sense.data(), r.sense_len});
	EXPECT_EQ(r.status, 2);
	EXPECT_EQ(sk.key, 0x5);
	EXPECT_EQ(sk.asc, 0x26) << "INVALID FIELD IN PARAMETER LIST";
	const std::string log = t.log();
	EXPECT_NE(log.find("state directory " + plain + " cannot be used"), std::string::npos)
	    << log;
}

} // namespace
