// SPDX-License-Identifier: MIT
// tests/srp/fault_test.cc - the SRP target (srp/target/target.h) and the SRP initiator
// (srp/initiator/initiator.h) under faults the soft provider injects, in one process (ulp-targetd
// and an initiator in two processes: fault_xproc_test.cc; what both share: fault_env.h).
//
// One process, two soft devices: the target's (127.0.0.1) and the initiator's (127.0.0.2),
// so that a fault rule on one device fires on that side's QPs only. The initiator runs
// verified I/O on one or more channels: every unit of the LUN is written once before the
// fault (with its LBA and a generation in every 8 bytes), then random reads and writes,
// never two on one unit at once, each read checked against what was acknowledged last.
// The faults: the connection cut mid-I/O (from either side), a QP forced into ERR (QP
// fatal, either side), WRs flushed mid-transfer, an rkey check failing on the target's RDMA
// READ (data-out) and RDMA WRITE (data-in), a lost completion of the target's RDMA READ and
// of a response SEND (the target's data timeout ends them), a failed post_send and
// post_recv, a device going fatal; receive rings and an SRQ.
//
// After each fault: every command ends within a bound (no hang), nothing that did not
// happen is answered GOOD, no read returns data that was not written, the target frees
// every channel that died (Target::stats, Portal::conns), and everything once the
// initiator goes; then a new login reads every acknowledged write back (a write that
// failed may or may not have landed: either is accepted for it, nothing else).
#include "core/log.h"
#include "tests/srp/fault_env.h"

#include <functional>
#include <thread>

namespace ulp::srpt
{
namespace
{

using namespace fault_test;

// ---- The target side ---------------------------------------------------------------------

struct TargetSide : test_env::SoftTarget {
	Device *dev2 = nullptr; // a second device with a portal of its own (start_second)
	std::unique_ptr<Portal> portal2;
	log::Capture capture;

	bool start(TargetConfig tc, const char *ip = kTargetIp)
	{
		tc.id_ext = kIdExt;
		tc.ioc_guid = kIocGuid;
		tc.heap_bytes = 32u << 20;
		tc.max_io = 2u << 20;
		test_env::TargetOptions o;
		o.ip = ip;
		o.lun_bytes = kLunBytes;
		o.name = "srp-fault";
		return SoftTarget::start(tc, o);
	}

	// Another portal of the same target on a device of its own (after the first device
	// went fatal: the LUN is the same).
	bool start_second(const char *ip)
	{
		soft::DeviceConfig dc;
		dc.ip = ip;
		dev2 = soft::create_device(dc);
		if (!dev2)
			return false;
		portal2 = std::make_unique<Portal>(*target, soft::provider());
		std::string why;
		if (portal2->listen(*SockAddr::parse(std::string(ip) + ":0"), &why) != 0) {
			ADD_FAILURE() << why;
			return false;
		}
		return portal2->start() == 0;
	}

	size_t conns() { return portal->conns() + (portal2 ? portal2->conns() : 0); }

	std::string state()
	{
		const TargetStats s = target->stats();
		return "channels_open " + std::to_string(s.channels_open) + ", nexuses_open " +
		       std::to_string(s.nexuses_open) + ", portal connections " +
		       std::to_string(conns());
	}

	// Bounded: the target has exactly `channels` channels (and connections), and
	// `nexuses` nexuses.
	bool wait_for(uint64_t channels, uint64_t nexuses, std::chrono::milliseconds limit = 10s)
	{
		const auto end = clock::now() + limit;
		for (;;) {
			const TargetStats s = target->stats();
			if (s.channels_open == channels && s.nexuses_open == nexuses &&
			    conns() == channels)
				return true;
			if (clock::now() >= end)
				return false;
			std::this_thread::sleep_for(10ms);
		}
	}
	bool wait_clean(std::chrono::milliseconds limit = 10s) { return wait_for(0, 0, limit); }

	std::string logs() { return capture.text(); }

	void stop()
	{
		EXPECT_TRUE(stop_target(10s)) << state() << "\n" << logs();
		if (portal2)
			portal2->stop();
		portal2.reset();
		release();
		if (dev2)
			soft::destroy_device(dev2);
		dev2 = nullptr;
	}
	~TargetSide() { stop(); }
};

// ---- The fixture: target, verified I/O, initiator --------------------------------------------

class SrpFaults : public ::testing::Test
{
protected:
	// Members in this order: the initiator goes first (its callbacks point into io), the
	// target last.
	TargetSide ts;
	std::unique_ptr<Io> io;
	std::unique_ptr<InitSide> in;

	void TearDown() override
	{
		in.reset();
		io.reset();
		ts.stop();
	}

	static uint32_t unit_len(Desc d) { return d == Desc::Immediate ? 8192 : 65536; }

	// The target, a login with n channels, and every unit written once (all GOOD).
	void start(TargetConfig tc, uint32_t n, Desc d, uint32_t units = 128,
	           const char *ip = kTargetIp)
	{
		ASSERT_TRUE(ts.start(tc, ip));
		io = std::make_unique<Io>(units, unit_len(d));
		in = std::make_unique<InitSide>();
		ASSERT_TRUE(in->start());
		ASSERT_TRUE(in->login(ts.addr(), in->cfg(n, d)));
		ASSERT_EQ(in->ini->channels(), n) << in->ini->error();
		RunOpts o;
		o.prefill = true;
		o.qd = 16;
		const RunResult r = io->run(*in, o);
		ASSERT_EQ(r.good_writes, units) << r.str() << "\n" << ts.logs();
		ASSERT_GT(in->ini->stats().*desc_counter(d), 0u) << desc_name(d) << " never used";
	}

	// The target's device goes away (lose, at the 300th of 4000 commands): every command
	// ends, none wrong, every channel closes, the target frees what it held, and the
	// initiator is let go.
	void lose_target_device(std::function<void()> lose)
	{
		RunOpts o;
		o.total = 4000;
		o.trigger_at = 300;
		o.trigger = std::move(lose);
		const RunResult r = io->run(*in, o);
		SCOPED_TRACE(r.str());
		EXPECT_FALSE(r.hung) << ts.logs();
		EXPECT_EQ(r.ended, r.issued);
		EXPECT_EQ(r.wrong, 0u);
		EXPECT_EQ(r.bad, 0u);
		EXPECT_EQ(r.timeouts, 0u) << ts.logs();
		EXPECT_EQ(in->ini->channels(), 0u);
		EXPECT_TRUE(ts.wait_clean()) << ts.state() << "\n" << ts.logs();
		in.reset();
	}

	// Every command ended, and as it should; the target frees what died on its own, and
	// the rest once the initiator logs out; a new login reads every acknowledged write back.
	void settle(const RunResult &r)
	{
		EXPECT_FALSE(r.hung) << "commands in flight after the bound: " << r.str() << "\n"
		                     << ts.logs();
		EXPECT_EQ(r.ended, r.issued) << r.str();
		EXPECT_EQ(r.twice, 0u) << r.str();
		EXPECT_EQ(r.wrong, 0u)
		    << "reads answered GOOD with data never written there: " << r.str();
		EXPECT_EQ(r.bad, 0u) << r.str() << "\n" << ts.logs();
		EXPECT_EQ(r.timeouts, 0u)
		    << "the initiator's own timeout ended commands: the target left them hanging\n"
		    << r.str() << "\n"
		    << ts.logs();
		const uint32_t live = in->ini->channels();
		if (live == 0) {
			EXPECT_TRUE(in->ini->failed());
			EXPECT_TRUE(ts.wait_clean())
			    << "the target kept what died: " << ts.state() << "\n"
			    << ts.logs();
		} else {
			// The channels that died are freed; the nexus goes on with the rest.
			EXPECT_TRUE(ts.wait_for(live, 1))
			    << live << " channels live at the initiator; " << ts.state() << "\n"
			    << ts.logs();
			const auto t0 = clock::now();
			in->ini->logout();
			EXPECT_LT(clock::now() - t0, 6s);
			EXPECT_TRUE(ts.wait_clean()) << ts.state() << "\n" << ts.logs();
		}
		in.reset(); // and its device
		verify();
	}

	// A new login (on a new initiator device) reads every unit back.
	void verify(const SockAddr *dst = nullptr)
	{
		const uint64_t takeovers = ts.target->stats().takeovers;
		InitSide v;
		ASSERT_TRUE(v.start());
		ASSERT_TRUE(v.login(dst ? *dst : ts.addr(), v.cfg(2)));
		std::string problems;
		EXPECT_EQ(io->verify_all(v, &problems), 0u) << problems;
		v.ini->logout();
		EXPECT_EQ(ts.target->stats().takeovers, takeovers)
		    << "the new login found the old nexus still there";
		EXPECT_TRUE(ts.wait_clean()) << ts.state() << "\n" << ts.logs();
	}
};

// ---- Faults on the wire and the QP, parameterised ---------------------------------------------

enum class Side : uint8_t { Target, Initiator };

struct FaultCase {
	const char *name;
	Side side; // whose device the rule is on
	soft::FaultPoint point;
	uint64_t nth; // fires at the nth matching event after the prefill
	uint32_t channels;
	bool srq;
	Desc desc;
	int write_pct = 70;
	bool match_opcode = false;
	WrOpcode opcode = WrOpcode::Send;
};

class SrpWireFault : public SrpFaults, public ::testing::WithParamInterface<FaultCase>
{
};

TEST_P(SrpWireFault, EveryCommandEndsAndAcknowledgedWritesStay)
{
	const FaultCase &fc = GetParam();
	TargetConfig tc;
	tc.use_srq = fc.srq;
	ASSERT_NO_FATAL_FAILURE(start(tc, fc.channels, fc.desc));
	Device &dev = fc.side == Side::Target ? *ts.dev : *in->dev;
	const TargetStats before = ts.target->stats();
	const soft::Counters cbefore = soft::device_counters(dev);
	soft::FaultRule rule;
	rule.point = fc.point;
	rule.nth = fc.nth;
	rule.match_opcode = fc.match_opcode;
	rule.opcode = fc.opcode;
	ASSERT_GE(soft::inject_fault(dev, rule), 0);
	RunOpts o;
	o.total = fc.channels > 1 ? 3000 : 5000;
	o.write_pct = fc.write_pct;
	const RunResult r = io->run(*in, o);
	soft::clear_faults(dev);
	SCOPED_TRACE(r.str());
	EXPECT_EQ(soft::faults_fired(dev), 1u) << "the fault never fired";
	EXPECT_LT(in->ini->channels(), fc.channels) << "no channel was lost";
	// A WR of the target's (or an RDMA of its that the initiator answers) belongs to a
	// command in flight; one of the initiator's may be a LOCAL_INV of a command that has
	// its answer already.
	if (fc.side == Side::Target || fc.point == soft::FaultPoint::RkeyCheck) {
		EXPECT_GT(r.lost, 0u) << "no command was in flight when the fault hit";
	}
	if (fc.channels > 1) {
		EXPECT_GT(in->ini->channels(), 0u) << "one fault took every channel";
	}
	if (fc.point == soft::FaultPoint::QpError) {
		EXPECT_GT(soft::device_counters(dev).flushes, cbefore.flushes)
		    << "the QP in ERR flushed nothing";
	}
	EXPECT_EQ(ts.target->stats().credit_overruns, before.credit_overruns);
	settle(r);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, SrpWireFault,
    ::testing::Values(
        // The connection cut (peer death) before a WR of either side; one channel (the
        // initiator fails) and three (two carry on).
        FaultCase{"cut_by_target_1ch", Side::Target, soft::FaultPoint::CutConnection, 300, 1, false,
                  Desc::Direct},
        FaultCase{"cut_by_initiator_1ch", Side::Initiator, soft::FaultPoint::CutConnection, 300, 1,
                  false, Desc::Indirect},
        FaultCase{"cut_by_target_3ch", Side::Target, soft::FaultPoint::CutConnection, 400, 3, false,
                  Desc::External},
        FaultCase{"cut_by_initiator_3ch", Side::Initiator, soft::FaultPoint::CutConnection, 400, 3,
                  false, Desc::Immediate},
        FaultCase{"cut_by_target_srq", Side::Target, soft::FaultPoint::CutConnection, 300, 3, true,
                  Desc::Direct},
        FaultCase{"cut_by_initiator_srq", Side::Initiator, soft::FaultPoint::CutConnection, 300, 1,
                  true, Desc::Indirect},
        // QP fatal: the QP enters ERR (QP_FATAL) before executing a WR; the WRs behind it
        // are flushed.
        FaultCase{"qp_fatal_target_1ch", Side::Target, soft::FaultPoint::QpError, 300, 1, false,
                  Desc::Indirect},
        FaultCase{"qp_fatal_initiator_1ch", Side::Initiator, soft::FaultPoint::QpError, 300, 1,
                  false, Desc::Direct},
        FaultCase{"qp_fatal_target_3ch", Side::Target, soft::FaultPoint::QpError, 500, 3, false,
                  Desc::Direct},
        FaultCase{"qp_fatal_initiator_3ch", Side::Initiator, soft::FaultPoint::QpError, 500, 3,
                  false, Desc::External},
        FaultCase{"qp_fatal_target_srq", Side::Target, soft::FaultPoint::QpError, 300, 3, true,
                  Desc::External},
        FaultCase{"qp_fatal_initiator_srq", Side::Initiator, soft::FaultPoint::QpError, 300, 1,
                  true, Desc::Direct},
        // WRs flushed mid-transfer: the QP fails at an RDMA WRITE of read data (the WRITEs
        // and the SRP_RSP chained behind it flush), at an RDMA READ of write data.
        FaultCase{"flushed_at_rdma_write", Side::Target, soft::FaultPoint::QpError, 40, 2, false,
                  Desc::Indirect, 20, true, WrOpcode::RdmaWrite},
        FaultCase{"flushed_at_rdma_read", Side::Target, soft::FaultPoint::QpError, 40, 2, false,
                  Desc::External, 90, true, WrOpcode::RdmaRead},
        // The rkey check at the initiator (the responder) fails the target's RDMA READ of
        // write data, and its RDMA WRITE of read data: only writes, then only reads.
        FaultCase{"rkey_fails_rdma_read", Side::Initiator, soft::FaultPoint::RkeyCheck, 100, 1,
                  false, Desc::Direct, 100},
        FaultCase{"rkey_fails_rdma_read_table", Side::Initiator, soft::FaultPoint::RkeyCheck, 100,
                  2, false, Desc::External, 100},
        FaultCase{"rkey_fails_rdma_write", Side::Initiator, soft::FaultPoint::RkeyCheck, 100, 1,
                  false, Desc::Indirect, 0},
        FaultCase{"rkey_fails_rdma_write_srq", Side::Initiator, soft::FaultPoint::RkeyCheck, 100, 2,
                  true, Desc::Direct, 0},
        // The target's post_send fails (a response, an RDMA chain), its post_recv fails
        // (the ring's and the SRQ's repost).
        FaultCase{"post_send_fails_at_target", Side::Target, soft::FaultPoint::PostSend, 300, 2,
                  false, Desc::Direct},
        FaultCase{"post_recv_fails_at_target", Side::Target, soft::FaultPoint::PostRecv, 300, 2,
                  false, Desc::Indirect},
        FaultCase{"post_recv_fails_at_target_srq", Side::Target, soft::FaultPoint::PostRecv, 300, 2,
                  true, Desc::Direct},
        // The initiator's own post_send fails (submit's REG_MR + SEND chain).
        FaultCase{"post_send_fails_at_initiator", Side::Initiator, soft::FaultPoint::PostSend, 300,
                  2, false, Desc::Indirect}),
    [](const auto &info) { return std::string(info.param.name); });

// ---- Lost completions: the target's data timeout ------------------------------------------------

// The completion of the target's RDMA READ of write data never comes (the READ executed).
// Within data_timeout the target logs which command and transfer, closes the channel (which
// flushes the rest) and frees it; the initiator learns of it as a lost connection, not from
// its own command timeout.
TEST_F(SrpFaults, RdmaReadCompletionLostEndsByDataTimeout)
{
	TargetConfig tc;
	tc.data_timeout = 1s; // a loaded machine must not hit it by itself
	ASSERT_NO_FATAL_FAILURE(start(tc, 1, Desc::Direct, 32));
	soft::FaultRule rule;
	rule.point = soft::FaultPoint::DropCompletion;
	rule.match_opcode = true;
	rule.opcode = WrOpcode::RdmaRead;
	ASSERT_GE(soft::inject_fault(*ts.dev, rule), 0);
	RunOpts o;
	o.total = 200;
	o.write_pct = 100;
	const RunResult r = io->run(*in, o);
	soft::clear_faults(*ts.dev);
	SCOPED_TRACE(r.str());
	EXPECT_EQ(soft::faults_fired(*ts.dev), 1u);
	EXPECT_LT(r.took, 5s) << "the initiator's own timeout (10 s) ended it, not the target";
	EXPECT_TRUE(in->ini->failed());
	EXPECT_GT(r.lost, 0u);
	EXPECT_EQ(ts.target->stats().data_timeouts, 1u);
	EXPECT_TRUE(ts.capture.contains("the RDMA READ of its write data not complete after"))
	    << ts.logs();
	settle(r);
	EXPECT_TRUE(
	    ts.capture.contains("the completion of the RDMA READ of its write data never came"))
	    << ts.logs();
}

// The same for the RDMA READ of an external descriptor table (reads only, each with sixteen
// descriptors, the table outside the SRP_CMD): the command was never given to the core, and
// is ended without it.
TEST_F(SrpFaults, TableReadCompletionLostEndsByDataTimeout)
{
	TargetConfig tc;
	tc.data_timeout = 1s; // a loaded machine must not hit it by itself
	ASSERT_NO_FATAL_FAILURE(start(tc, 1, Desc::External, 32));
	soft::FaultRule rule;
	rule.point = soft::FaultPoint::DropCompletion;
	rule.nth = 5;
	rule.match_opcode = true;
	rule.opcode = WrOpcode::RdmaRead;
	ASSERT_GE(soft::inject_fault(*ts.dev, rule), 0);
	RunOpts o;
	o.total = 200;
	o.write_pct = 0;
	const RunResult r = io->run(*in, o);
	soft::clear_faults(*ts.dev);
	SCOPED_TRACE(r.str());
	EXPECT_EQ(soft::faults_fired(*ts.dev), 1u);
	EXPECT_LT(r.took, 5s);
	EXPECT_TRUE(in->ini->failed());
	EXPECT_GT(r.lost, 0u);
	EXPECT_EQ(ts.target->stats().data_timeouts, 1u);
	EXPECT_TRUE(ts.capture.contains("the RDMA READ of its descriptor table not complete after"))
	    << ts.logs();
	settle(r);
	EXPECT_TRUE(ts.capture.contains(
	    "the completion of the RDMA READ of its descriptor table never came"))
	    << ts.logs();
}

// The completion of a response SEND never comes (the SRP_RSP did arrive): the command's
// ioctx and a send queue slot wait for it. Within data_timeout the target closes that
// channel under I/O (the other carries on), and once it is drained ends the command without
// the completion, so that the channel and the nexus's teardown are not held for ever.
TEST_F(SrpFaults, ResponseSendCompletionLost)
{
	TargetConfig tc;
	tc.data_timeout = 1s; // a loaded machine must not hit it by itself
	ASSERT_NO_FATAL_FAILURE(start(tc, 2, Desc::Indirect, 32));
	soft::FaultRule rule;
	rule.point = soft::FaultPoint::DropCompletion;
	rule.nth = 50;
	rule.match_opcode = true;
	rule.opcode = WrOpcode::Send;
	ASSERT_GE(soft::inject_fault(*ts.dev, rule), 0);
	RunOpts o;
	o.total = 1000000;
	o.write_pct = 50;
	o.until = [&] { return ts.target->stats().data_timeouts > 0; };
	const RunResult r = io->run(*in, o);
	soft::clear_faults(*ts.dev);
	SCOPED_TRACE(r.str());
	EXPECT_EQ(soft::faults_fired(*ts.dev), 1u);
	EXPECT_LT(r.took, 5s);
	EXPECT_EQ(ts.target->stats().data_timeouts, 1u) << ts.logs();
	// The SEND alone, or the last of a chain of RDMA WRITEs of read data.
	EXPECT_TRUE(ts.capture.contains("its SRP_RSP not complete after") ||
	            ts.capture.contains("the RDMA WRITE of its read data not complete after"))
	    << ts.logs();
	// The initiator sees the close at a poll.
	const auto end = clock::now() + 5s;
	while (in->ini->channels() != 1 && clock::now() < end)
		in->ini->poll(20ms);
	EXPECT_EQ(in->ini->channels(), 1u) << "the other channel should carry on";
	settle(r);
	EXPECT_TRUE(
	    ts.capture.contains("the completion of its SRP_RSP never came") ||
	    ts.capture.contains("the completion of the RDMA WRITE of its read data never came"))
	    << ts.logs();
}

// A completion of the target's RDMA READ comes late (5 ms; later ones may overtake it, as no
// hardware CQ would let them): nothing may fail, every read must match.
TEST_F(SrpFaults, DelayedCompletionsChangeNothing)
{
	ASSERT_NO_FATAL_FAILURE(start(TargetConfig{}, 2, Desc::External, 64));
	soft::FaultRule rule;
	rule.point = soft::FaultPoint::DelayCompletion;
	rule.nth = 0;
	rule.probability = 0.05;
	rule.count = 0;
	rule.delay_us = 5000;
	rule.match_opcode = true;
	rule.opcode = WrOpcode::RdmaRead;
	ASSERT_GE(soft::inject_fault(*ts.dev, rule), 0);
	RunOpts o;
	o.total = 1500;
	const RunResult r = io->run(*in, o);
	soft::clear_faults(*ts.dev);
	SCOPED_TRACE(r.str());
	EXPECT_GT(soft::faults_fired(*ts.dev), 0u);
	EXPECT_EQ(r.good_writes + r.good_reads, r.issued);
	EXPECT_EQ(in->ini->channels(), 2u);
	settle(r);
}

// ---- Device-level faults -------------------------------------------------------------------

// The initiator's device goes fatal under I/O (every QP to ERR, DEVICE_FATAL): the target
// frees every channel; a new initiator on a new device reads the acknowledged writes back.
TEST_F(SrpFaults, InitiatorDeviceFatal)
{
	ASSERT_NO_FATAL_FAILURE(start(TargetConfig{}, 3, Desc::Direct));
	RunOpts o;
	o.total = 4000;
	o.trigger_at = 300;
	o.trigger = [&] { soft::force_device_fatal(*in->dev); };
	const RunResult r = io->run(*in, o);
	SCOPED_TRACE(r.str());
	EXPECT_EQ(in->ini->channels(), 0u);
	EXPECT_GT(r.lost, 0u);
	settle(r);
}

// The target's device goes fatal under I/O: every channel on it closes and is freed (the
// initiator's commands all end), and the target serves the same LUN on a second device.
TEST_F(SrpFaults, TargetDeviceFatal)
{
	TargetConfig tc;
	tc.use_srq = true;
	ASSERT_NO_FATAL_FAILURE(start(tc, 2, Desc::Indirect));
	ASSERT_NO_FATAL_FAILURE(lose_target_device([&] { soft::force_device_fatal(*ts.dev); }));
	ASSERT_TRUE(ts.start_second("127.0.0.3"));
	const SockAddr a2 = *SockAddr::parse("127.0.0.3:" + std::to_string(ts.portal2->port()));
	verify(&a2);
}

// The target's device goes fatal while nothing is in flight. On receive rings the QPs'
// receives are flushed, which tells; on an SRQ a QP has no receives of its own, and only its
// async event (LAST_WQE_REACHED) does. Either way the target closes and frees every channel
// by itself within a bound, not when the initiator next sends; the initiator's next commands
// then end as lost, and the LUN is served on a second device.
class SrpIdleFatal : public SrpFaults, public ::testing::WithParamInterface<bool>
{
};

TEST_P(SrpIdleFatal, TargetNoticesItsDeadQpsWhileIdle)
{
	TargetConfig tc;
	tc.use_srq = GetParam();
	ASSERT_NO_FATAL_FAILURE(start(tc, 2, Desc::Direct, 16));
	soft::force_device_fatal(*ts.dev);
	EXPECT_TRUE(ts.wait_clean(3s))
	    << "the target kept channels whose QPs are dead: " << ts.state() << "\n"
	    << ts.logs();
	RunOpts o;
	o.total = 8;
	const RunResult r = io->run(*in, o);
	SCOPED_TRACE(r.str());
	EXPECT_EQ(r.good_writes + r.good_reads, 0u);
	EXPECT_EQ(r.ended, r.issued);
	EXPECT_EQ(r.timeouts, 0u);
	EXPECT_TRUE(in->ini->failed());
	EXPECT_TRUE(ts.wait_clean()) << ts.state() << "\n" << ts.logs();
	in.reset();
	ASSERT_TRUE(ts.start_second("127.0.0.3"));
	const SockAddr a2 = *SockAddr::parse("127.0.0.3:" + std::to_string(ts.portal2->port()));
	verify(&a2);
}

INSTANTIATE_TEST_SUITE_P(Receives, SrpIdleFatal, ::testing::Values(false, true),
                         [](const auto &info) { return info.param ? "srq" : "rings"; });

// The target's device is removed under I/O (`rdma link del`: the soft provider's
// remove_device delivers DEVICE_REMOVAL to every CM id on it): every channel closes and is
// freed, every command ends, the portal frees what it made on the device (its data heap,
// the SRQ, the CQ pool) and stops listening, logging both, so that the device can be
// destroyed with nothing alive on it. A new device then takes the address, and the portal,
// retrying on its own, listens on the same port again: a new login reads back every write
// that was acknowledged. The target's address is this test's own: the soft provider's
// socket wire names listeners by address and port for every process, and while this one
// does not listen, a suite running beside it could take the port on 127.0.0.1.
TEST_F(SrpFaults, TargetDeviceRemovedThenBack)
{
	constexpr char kIp[] = "127.0.9.1";
	TargetConfig tc;
	tc.use_srq = true; // per device: it must go with the device
	ASSERT_NO_FATAL_FAILURE(start(tc, 2, Desc::Indirect, 128, kIp));
	const uint16_t port = ts.portal->port();
	ASSERT_NO_FATAL_FAILURE(lose_target_device([&] { soft::remove_device(*ts.dev); }));

	// The portal frees the device's resources, then logs that it did: wait for both.
	const auto end = clock::now() + 10s;
	while ((ts.portal->resources().heap_bytes != 0 || !ts.capture.contains("released")) &&
	       clock::now() < end)
		std::this_thread::sleep_for(10ms);
	EXPECT_EQ(ts.portal->resources().heap_bytes, 0u)
	    << "the removed device's data heap is still held\n"
	    << ts.logs();
	EXPECT_FALSE(ts.portal->listening());
	EXPECT_TRUE(ts.capture.contains("was removed")) << ts.logs();
	EXPECT_TRUE(ts.capture.contains("released")) << ts.logs();
	{
		InitSide v;
		ASSERT_TRUE(v.start());
		Initiator ini(v.cfg(1));
		std::string why;
		EXPECT_NE(ini.login(ts.addr(), &why), 0) << "a login with the device gone";
	}
	soft::destroy_device(ts.dev); // logs an error if anything is still alive on it
	ts.dev = nullptr;
	EXPECT_FALSE(ts.capture.contains("objects still alive")) << ts.logs();

	soft::DeviceConfig dc;
	dc.ip = kIp;
	ts.dev = soft::create_device(dc);
	ASSERT_NE(ts.dev, nullptr);
	const auto until = clock::now() + 10s;
	while (!ts.portal->listening() && clock::now() < until)
		std::this_thread::sleep_for(20ms);
	ASSERT_TRUE(ts.portal->listening()) << "not listening again 10 s after a device came\n"
	                                    << ts.logs();
	EXPECT_EQ(ts.portal->port(), port);
	EXPECT_TRUE(ts.capture.contains("again")) << ts.logs();
	verify();
}

// ---- An initiator that never stops sending -------------------------------------------------

// The initiator keeps every slot busy against a target that grants 8 credits, while a
// connection cut ends it: it was held by req_lim all along (the target never saw a request
// without a credit), and the cut ends every command.
TEST_F(SrpFaults, CreditsHoldTheInitiatorUntilTheCut)
{
	TargetConfig tc;
	tc.rq_size = 8;
	ASSERT_NO_FATAL_FAILURE(start(tc, 2, Desc::Direct));
	soft::FaultRule rule;
	rule.point = soft::FaultPoint::CutConnection;
	rule.nth = 2000;
	ASSERT_GE(soft::inject_fault(*ts.dev, rule), 0);
	RunOpts o;
	o.total = 20000;
	o.qd = 32;
	const RunResult r = io->run(*in, o);
	soft::clear_faults(*ts.dev);
	SCOPED_TRACE(r.str());
	EXPECT_EQ(soft::faults_fired(*ts.dev), 1u);
	EXPECT_GT(in->ini->stats().zero_req_lim, 0u) << "req_lim never held the initiator";
	EXPECT_EQ(ts.target->stats().credit_overruns, 0u);
	settle(r);
}

} // namespace
} // namespace ulp::srpt
