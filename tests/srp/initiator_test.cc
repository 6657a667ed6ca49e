// SPDX-License-Identifier: MIT
// tests/srp/initiator_test.cc - the SRP initiator (srp/initiator/initiator.h) against the SRP
// target (srp/target/target.h, srp/target/portal.h), both in one process on one soft device.
//
// What is checked: the login (credits, IU lengths, immediate data, a rejected target port
// id, four channels on one nexus); data written and read back byte for byte with every
// descriptor format (direct, indirect inside the IU, an external table the target RDMA
// READs, immediate data) across sizes, from registered (zero-copy) and unregistered
// (bounced) buffers, with the counters of both ends; residuals; credits (a target that
// grants 8 holds the initiator at 7 commands); a SINGLE login taking the nexus over; task
// management; logout; and the target stopping under I/O: every callback runs.
#include "core/addr.h"
#include "core/dma_mem.h"
#include "core/log.h"
#include "providers/soft/soft.h"
#include "srp/initiator/initiator.h"
#include "tests/srp/srp_env.h"

#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <numeric>
#include <random>
#include <thread>

namespace ulp::srpt
{
namespace
{

using namespace std::chrono_literals;
using clock = std::chrono::steady_clock;

constexpr uint64_t kIdExt = 0x0002c90300a1b2c3;
constexpr uint64_t kIocGuid = 0x0002c90300d4e5f6;
constexpr uint64_t kLunBytes = 64u << 20;
using test_env::cdb_rw10;
using test_env::fill;
using test_env::kBlock;

// The target side: a soft device, a RAM LUN, the SRP target and its portal.
struct TargetSide : test_env::SoftTarget {
	soft::Wire wire = soft::Wire::Auto; // Socket: the packet path, as between processes
	uint32_t engines = 0;               // the soft device's engines (0: its default)

	bool start(TargetConfig tc = {})
	{
		tc.id_ext = kIdExt;
		tc.ioc_guid = kIocGuid;
		tc.heap_bytes = 32u << 20;
		tc.max_io = 2u << 20;
		test_env::TargetOptions o;
		o.wire = wire;
		o.lun_bytes = kLunBytes;
		o.engines = engines;
		return SoftTarget::start(tc, o);
	}

	bool wait_channels(uint64_t n, std::chrono::milliseconds limit = 10s)
	{
		const auto end = clock::now() + limit;
		while (clock::now() < end) {
			if (target->stats().channels_open == n)
				return true;
			std::this_thread::sleep_for(10ms);
		}
		return false;
	}
};

InitiatorConfig base_cfg()
{
	InitiatorConfig c;
	c.provider = &soft::provider();
	c.id_ext = kIdExt;
	c.ioc_guid = kIocGuid;
	c.initiator_ext = 0x1000;
	c.queue_size = 32;
	c.cmd_timeout = 10s;
	c.login_timeout = 5s;
	return c;
}

class SrpInitiator : public ::testing::Test
{
protected:
	TargetSide ts;
	std::unique_ptr<DmaRegion> arena; // the zero-copy buffers
	std::unique_ptr<Initiator> ini;

	void SetUp() override { arena = dma_alloc(8u << 20); }
	void TearDown() override
	{
		ini.reset(); // before the device goes
		ts.stop();
	}

	std::span<uint8_t> zc(size_t off, size_t len)
	{
		return {static_cast<uint8_t *>(arena->addr()) + off, len};
	}

	// Log in, then take the unit attention a new I_T nexus reports (POWER ON / RESET).
	std::unique_ptr<Initiator> connect(InitiatorConfig c, std::string *why = nullptr)
	{
		auto i = std::make_unique<Initiator>(c);
		std::string w;
		if (i->login(ts.addr(), &w) != 0) {
			if (why)
				*why = w;
			return i;
		}
		ready(*i);
		return i;
	}

	static void ready(Initiator &i)
	{
		const uint8_t tur[6] = {};
		for (int k = 0; k < 4; k++)
			if (i.run(Request{0, tur, DataDir::None, {}}).good())
				return;
		ADD_FAILURE() << "TEST UNIT READY never came back GOOD";
	}

	static Result rw(Initiator &i, bool write, uint32_t lba, std::span<uint8_t> buf)
	{
		const auto cdb = cdb_rw10(write, lba, uint16_t(buf.size() / kBlock));
		return i.run(Request{0, cdb, write ? DataDir::Write : DataDir::Read, buf});
	}
};

// ---- Login ---------------------------------------------------------------------------------

TEST_F(SrpInitiator, LoginGrantsCreditsAndImmediateData)
{
	TargetConfig tc;
	tc.rq_size = 48;
	ASSERT_TRUE(ts.start(tc));
	ini = connect(base_cfg());
	ASSERT_EQ(ini->channels(), 1u) << ini->error();
	const ChannelInfo ci = ini->channel_info(0);
	EXPECT_EQ(ci.granted, 48u);
	EXPECT_EQ(ci.credits, 48u);                     // every TUR's response gave its credit back
	EXPECT_EQ(ci.max_it_iu_len, 8260u);             // the target echoes what we asked
	EXPECT_EQ(ci.max_ti_iu_len, srp::kRspLen + 96); // an SRP_RSP with full sense
	EXPECT_TRUE(ci.rsp_flags & srp::LOGIN_RSP_IMMED_SUPP);
	EXPECT_EQ(ci.rsp_flags & 3, srp::LOGIN_RSP_NO_CHAN);
	EXPECT_EQ(ci.in_flight, 0u);
	const auto id = ini->initiator_port_id();
	EXPECT_EQ(srp::port_id_hi(id), 0x1000u);
	EXPECT_EQ(srp::port_id_lo(id), ts.dev->attr().node_guid);
	const TargetStats s = ts.target->stats();
	EXPECT_EQ(s.logins, 1u);
	EXPECT_EQ(s.nexuses_open, 1u);

	// Without immediate data asked for, none is granted (and writes go by RDMA READ).
	InitiatorConfig c = base_cfg();
	c.immediate = false;
	c.initiator_ext = 0x2000;
	auto other = connect(c);
	ASSERT_EQ(other->channels(), 1u);
	EXPECT_FALSE(other->channel_info(0).rsp_flags & srp::LOGIN_RSP_IMMED_SUPP);
	std::vector<uint8_t> w(4096), r(4096);
	fill(w, 8, 1);
	EXPECT_TRUE(rw(*other, true, 8, w).good());
	EXPECT_TRUE(rw(*other, false, 8, r).good());
	EXPECT_EQ(w, r);
	EXPECT_EQ(other->stats().immediate, 0u);
}

TEST_F(SrpInitiator, WrongTargetPortIdIsRejected)
{
	ASSERT_TRUE(ts.start());
	InitiatorConfig c = base_cfg();
	c.id_ext = kIdExt + 1;
	Initiator i(c);
	std::string why;
	EXPECT_LT(i.login(ts.addr(), &why), 0);
	EXPECT_NE(why.find("SRP_LOGIN_REJ"), std::string::npos) << why;
	EXPECT_NE(why.find(srp::rej_reason_name(srp::REJ_UNABLE_ASSOCIATE_CHANNEL)),
	          std::string::npos)
	    << why;
	EXPECT_EQ(i.channels(), 0u);
	EXPECT_TRUE(i.failed());
	const uint8_t tur[6] = {};
	EXPECT_EQ(i.submit(Request{0, tur, DataDir::None, {}}, [](const Result &) {}), -ENOTCONN);
	EXPECT_EQ(ts.target->stats().login_rejects, 1u);
	EXPECT_EQ(ts.target->stats().nexuses_open, 0u);
}

TEST_F(SrpInitiator, FourChannelsOneNexus)
{
	ASSERT_TRUE(ts.start());
	InitiatorConfig c = base_cfg();
	c.channels = 4;
	c.regions.push_back(zc(0, 8u << 20));
	ini = connect(c);
	ASSERT_EQ(ini->channels(), 4u) << ini->error();
	EXPECT_EQ(ini->channel_info(0).rsp_flags & 3, srp::LOGIN_RSP_NO_CHAN);
	for (uint32_t ch = 1; ch < 4; ch++)
		EXPECT_EQ(ini->channel_info(ch).rsp_flags & 3, srp::LOGIN_RSP_MAINTAINED);
	TargetStats s = ts.target->stats();
	EXPECT_EQ(s.logins, 4u);
	EXPECT_EQ(s.nexuses_open, 1u);
	EXPECT_EQ(s.channels_open, 4u);

	// Many commands at once spread over the channels (the most credits first); each lands
	// where it should.
	constexpr int kCmds = 64;
	constexpr size_t kLen = 64 << 10;
	int done = 0;
	for (int k = 0; k < kCmds; k++) {
		auto b = zc(size_t(k) * kLen, kLen);
		fill(b, uint64_t(k) * 128, 7);
		const auto cdb = cdb_rw10(true, uint32_t(k) * 128, kLen / kBlock);
		ASSERT_EQ(ini->submit(Request{0, cdb, DataDir::Write, b},
		                      [&](const Result &r) {
			                      EXPECT_TRUE(r.good()) << outcome_name(r.outcome);
			                      done++;
		                      }),
		          0);
	}
	std::vector<uint32_t> busy(4);
	for (uint32_t ch = 0; ch < 4; ch++)
		busy[ch] = ini->channel_info(ch).in_flight;
	for (uint32_t ch = 0; ch < 4; ch++)
		EXPECT_GT(busy[ch], 0u) << "channel " << ch << " carried nothing";
	while (done < kCmds && ini->poll(5s) > 0) {
	}
	ASSERT_EQ(done, kCmds);
	std::vector<uint8_t> back(kLen), want(kLen);
	for (int k = 0; k < kCmds; k++) {
		ASSERT_TRUE(rw(*ini, false, uint32_t(k) * 128, back).good());
		fill(want, uint64_t(k) * 128, 7);
		ASSERT_EQ(back, want) << "command " << k;
	}
}

// ---- Many commands at queue depth 32 --------------------------------------------------------

// Thousands of 4 KiB direct-descriptor writes and reads, 32 at a time, on one channel and
// on four: every MR goes back to its pool only once its LOCAL_INV has completed, so no
// REG_MR ever meets a valid MR (it would put the QP in ERR: "SRP_CMD send: WR flushed").
// On the socket wire the SRP_RSP often overtakes the SEND's ACK, so the LOCAL_INVs run
// while the SEND is still in flight: their completions must come once, and in order.
class SrpDeepQueue : public SrpInitiator, public ::testing::WithParamInterface<uint32_t>
{
};

TEST_P(SrpDeepQueue, ThousandsOfDirectCommandsAtDepth32)
{
	const uint32_t nch = GetParam();
	ts.wire = soft::Wire::Socket; // SRP_RSPs overtake ACKs only there
	ASSERT_TRUE(ts.start());
	InitiatorConfig c = base_cfg();
	c.channels = nch;
	c.desc_mode = DescMode::Direct;
	c.regions.push_back(zc(0, 1u << 20));
	ini = connect(c);
	ASSERT_EQ(ini->channels(), nch) << ini->error();

	constexpr uint32_t kDepth = 32;
	constexpr size_t kLen = 4096;
	constexpr uint32_t kUnits = 2048; // 8 MiB of the LUN, in 4 KiB units
	constexpr int kMixed = 8000;      // after every unit is written once
	std::vector<uint32_t> gen(kUnits, 0);
	std::vector<bool> busy(kUnits, false);
	std::vector<uint32_t> free_slots(kDepth);
	std::iota(free_slots.begin(), free_slots.end(), 0u);
	std::mt19937 rng(nch);
	std::vector<uint8_t> want(kLen);
	int issued = 0, completed = 0, good = 0, bad = 0;
	const InitiatorStats before = ini->stats();

	for (; completed < int(kUnits) + kMixed;) {
		while (issued < int(kUnits) + kMixed && !free_slots.empty()) {
			// First every unit written in order, then random reads and writes, never
			// two on one unit at once.
			uint32_t unit;
			bool write;
			if (issued < int(kUnits)) {
				unit = uint32_t(issued);
				write = true;
			} else {
				do
					unit = uint32_t(rng() % kUnits);
				while (busy[unit]);
				write = (rng() & 1) != 0;
			}
			const uint32_t slot = free_slots.back();
			auto b = zc(size_t(slot) * kLen, kLen);
			const uint32_t lba = unit * uint32_t(kLen / kBlock);
			const uint32_t g = write ? gen[unit] + 1 : gen[unit];
			if (write)
				fill(b, lba, g);
			else
				std::memset(b.data(), 0xee, kLen);
			const auto cdb = cdb_rw10(write, lba, uint16_t(kLen / kBlock));
			const int rc = ini->submit(
			    Request{0, cdb, write ? DataDir::Write : DataDir::Read, b},
			    [&, slot, unit, lba, g, write, b](const Result &r) {
				    completed++;
				    busy[unit] = false;
				    free_slots.push_back(slot);
				    if (!r.good()) {
					    if (bad++ == 0) // the first says it; the rest follow it
						    ADD_FAILURE()
						        << outcome_name(r.outcome) << " status "
						        << int(r.status) << ": " << ini->error();
					    return;
				    }
				    if (write) {
					    gen[unit] = g;
				    } else {
					    fill(want, lba, g);
					    EXPECT_EQ(std::memcmp(b.data(), want.data(), kLen), 0)
					        << "unit " << unit;
				    }
				    good++;
			    });
			if (rc == -EBUSY)
				break; // no credit or MR now: a completion frees one
			ASSERT_EQ(rc, 0) << ini->error();
			free_slots.pop_back();
			busy[unit] = true;
			issued++;
		}
		ASSERT_GT(ini->poll(5s), 0)
		    << completed << " of " << issued << " completed: " << ini->error();
		if (HasFailure())
			break;
	}
	EXPECT_EQ(good, int(kUnits) + kMixed);
	EXPECT_FALSE(ini->failed()) << ini->error();
	EXPECT_EQ(ini->channels(), nch);
	const InitiatorStats &after = ini->stats();
	EXPECT_EQ(after.direct - before.direct, uint64_t(kUnits) + kMixed);
	EXPECT_GE(after.local_inv - before.local_inv, uint64_t(kUnits) + kMixed);
	EXPECT_EQ(ini->in_flight(), 0u);
}

INSTANTIATE_TEST_SUITE_P(Channels, SrpDeepQueue, ::testing::Values(1u, 4u),
                         [](const auto &info) { return std::to_string(info.param) + "_channels"; });

// ---- Data, every descriptor format -----------------------------------------------------------

struct ModeCase {
	const char *name;
	DescMode mode;
	uint32_t max_desc_bytes;
	uint32_t cmd_sg_entries;
	bool allow_ext_sg;
	uint64_t InitiatorStats::*counter;
};

// gtest prints a parameter (and names its test) with this: its name.
void PrintTo(const ModeCase &c, std::ostream *os)
{
	*os << c.name;
}

class SrpData : public SrpInitiator, public ::testing::WithParamInterface<ModeCase>
{
};

TEST_P(SrpData, WriteThenReadBack)
{
	const ModeCase &mc = GetParam();
	ASSERT_TRUE(ts.start());
	InitiatorConfig c = base_cfg();
	c.desc_mode = mc.mode;
	c.max_desc_bytes = mc.max_desc_bytes;
	c.cmd_sg_entries = mc.cmd_sg_entries;
	c.allow_ext_sg = mc.allow_ext_sg;
	c.regions.push_back(zc(0, 4u << 20));
	ini = connect(c);
	ASSERT_EQ(ini->channels(), 1u) << ini->error();

	const size_t sizes[] = {512, 4096, 8192, 8192 + 512, 64 << 10, 1 << 20};
	uint32_t lba = 0;
	uint32_t gen = 1;
	for (bool bounced : {false, true}) {
		for (size_t len : sizes) {
			SCOPED_TRACE(std::string(mc.name) +
			             (bounced ? " bounced " : " zero-copy ") + std::to_string(len));
			std::vector<uint8_t> heap_w(len), heap_r(len);
			std::span<uint8_t> w = bounced ? std::span<uint8_t>(heap_w) : zc(0, len);
			std::span<uint8_t> r =
			    bounced ? std::span<uint8_t>(heap_r) : zc(2u << 20, len);
			fill(w, lba, gen);
			std::memset(r.data(), 0xee, len);
			const InitiatorStats before = ini->stats();
			const TargetStats tbefore = ts.target->stats();

			const bool imm_write = mc.mode == DescMode::Immediate;
			if (imm_write && len > 8192) {
				// Larger than the immediate data granted: refused, nothing sent.
				const auto cdb = cdb_rw10(true, lba, uint16_t(len / kBlock));
				EXPECT_EQ(ini->submit(Request{0, cdb, DataDir::Write, w},
				                      [](const Result &) {}),
				          -E2BIG);
				EXPECT_EQ(ini->in_flight(), 0u);
				continue;
			}
			Result wr = rw(*ini, true, lba, w);
			ASSERT_TRUE(wr.good())
			    << outcome_name(wr.outcome) << " status " << int(wr.status);
			Result rd = rw(*ini, false, lba, r);
			ASSERT_TRUE(rd.good())
			    << outcome_name(rd.outcome) << " status " << int(rd.status);
			ASSERT_EQ(std::memcmp(w.data(), r.data(), len), 0);

			const InitiatorStats &after = ini->stats();
			const TargetStats tafter = ts.target->stats();
			EXPECT_EQ(after.commands - before.commands, 2u);
			if (imm_write) {
				// The write in the SEND itself; the read as Auto: one direct
				// descriptor.
				EXPECT_EQ(after.immediate - before.immediate, 1u);
				EXPECT_EQ(after.direct - before.direct, 1u);
				EXPECT_EQ(tafter.immediate - tbefore.immediate, 1u);
				EXPECT_EQ(after.bounced - before.bounced, bounced ? 1u : 0u);
			} else {
				EXPECT_EQ(after.*mc.counter - before.*mc.counter, 2u);
				EXPECT_EQ(after.bounced - before.bounced, bounced ? 2u : 0u);
				EXPECT_EQ(after.immediate, before.immediate);
				EXPECT_GE(after.local_inv - before.local_inv, 2u);
			}
			if (mc.mode == DescMode::External)
				EXPECT_EQ(tafter.ext_tables - tbefore.ext_tables, 2u);
			else
				EXPECT_EQ(tafter.ext_tables, tbefore.ext_tables);
			lba += uint32_t(len / kBlock) + 8;
			gen++;
		}
	}
	EXPECT_EQ(ini->in_flight(), 0u);
	EXPECT_EQ(ini->channel_info(0).in_flight, 0u);
}

INSTANTIATE_TEST_SUITE_P(
    Modes, SrpData,
    ::testing::Values(
        ModeCase{"direct", DescMode::Direct, 0, 12, false, &InitiatorStats::direct},
        // 16 KiB per descriptor: up to 64 of them, all inside the IU.
        ModeCase{"indirect", DescMode::Indirect, 16384, 64, false, &InitiatorStats::indirect},
        // 4 KiB per descriptor: up to 256, 11 inside the IU, the table fetched by RDMA READ.
        ModeCase{"external", DescMode::External, 4096, 12, true, &InitiatorStats::external},
        ModeCase{"immediate", DescMode::Immediate, 0, 12, false, &InitiatorStats::immediate}),
    ::testing::PrintToStringParamName());

TEST_F(SrpInitiator, AutoPicksTheFormatAndLimitsHold)
{
	ASSERT_TRUE(ts.start());
	InitiatorConfig c = base_cfg();
	c.max_desc_bytes = 8192;
	c.cmd_sg_entries = 4;
	ini = connect(c);
	ASSERT_EQ(ini->channels(), 1u);
	std::vector<uint8_t> b(64 << 10);
	fill(b, 0, 3);
	const InitiatorStats s0 = ini->stats();
	// 8 descriptors > cmd_sg_entries without allow_ext_sg: "Could not fit S/G list".
	const auto cdb = cdb_rw10(false, 0, uint16_t(b.size() / kBlock));
	EXPECT_EQ(ini->submit(Request{0, cdb, DataDir::Read, b}, [](const Result &) {}), -E2BIG);
	std::span<uint8_t> small(b.data(), 16384); // two descriptors: indirect
	EXPECT_TRUE(rw(*ini, true, 0, small).good());
	std::span<uint8_t> one(b.data(), 8192); // immediate
	EXPECT_TRUE(rw(*ini, true, 0, one).good());
	EXPECT_TRUE(rw(*ini, false, 0, one).good()); // one descriptor: direct
	const InitiatorStats &s = ini->stats();
	EXPECT_EQ(s.indirect - s0.indirect, 1u);
	EXPECT_EQ(s.immediate - s0.immediate, 1u);
	EXPECT_EQ(s.direct - s0.direct, 1u);
	// Bad requests.
	const uint8_t cdb5[5] = {};
	EXPECT_EQ(ini->submit(Request{0, cdb5, DataDir::None, {}}, [](const Result &) {}), -EINVAL);
	std::vector<uint8_t> huge((1u << 20) + 4096);
	const auto big = cdb_rw10(false, 0, uint16_t(huge.size() / kBlock));
	EXPECT_EQ(ini->submit(Request{0, big, DataDir::Read, huge}, [](const Result &) {}), -E2BIG);
}

TEST_F(SrpInitiator, ResidualsAndSense)
{
	ASSERT_TRUE(ts.start());
	ini = connect(base_cfg());
	// One block read into a larger buffer: the target moves 512 bytes, DIUNDER the rest.
	std::vector<uint8_t> b(8193, 0);
	const auto cdb = cdb_rw10(false, 0, 1);
	Result r = ini->run(Request{0, cdb, DataDir::Read, b});
	ASSERT_EQ(r.outcome, Outcome::Completed);
	EXPECT_EQ(r.status, 0);
	EXPECT_TRUE(r.underflow);
	EXPECT_EQ(r.residual, 8193u - 512u);
	// A LBA past the end: CHECK CONDITION with sense (LBA OUT OF RANGE, 21h/00h).
	std::vector<uint8_t> one(512);
	const auto past = cdb_rw10(false, uint32_t(kLunBytes / kBlock), 1);
	r = ini->run(Request{0, past, DataDir::Read, one});
	ASSERT_EQ(r.outcome, Outcome::Completed);
	EXPECT_EQ(r.status, 0x02);
	ASSERT_GE(r.sense_len, 14);
	EXPECT_EQ(r.sense[2] & 0x0f, 0x05); // ILLEGAL REQUEST
	EXPECT_EQ(r.sense[12], 0x21);
}

// ---- Credits ------------------------------------------------------------------------------

TEST_F(SrpInitiator, CreditsHoldTheInitiator)
{
	TargetConfig tc;
	tc.rq_size = 8;
	ASSERT_TRUE(ts.start(tc));
	InitiatorConfig c = base_cfg();
	c.queue_size = 64;
	c.regions.push_back(zc(0, 8u << 20));
	ini = connect(c);
	ASSERT_EQ(ini->channels(), 1u);
	ASSERT_EQ(ini->channel_info(0).granted, 8u);

	constexpr int kTotal = 300;
	constexpr size_t kLen = 4096;
	int sent = 0, done = 0;
	uint32_t max_in_flight = 0;
	bool saw_busy = false;
	const auto end = clock::now() + 20s;
	while (done < kTotal && clock::now() < end) {
		while (sent < kTotal) {
			auto b = zc(size_t(sent % 512) * kLen, kLen);
			fill(b, uint64_t(sent) * 8, 11);
			const auto cdb = cdb_rw10(true, uint32_t(sent) * 8, kLen / kBlock);
			const int rc =
			    ini->submit(Request{0, cdb, DataDir::Write, b}, [&](const Result &r) {
				    EXPECT_TRUE(r.good());
				    done++;
			    });
			if (rc == -EBUSY) {
				saw_busy = true;
				break;
			}
			ASSERT_EQ(rc, 0);
			sent++;
			max_in_flight = std::max(max_in_flight, ini->channel_info(0).in_flight);
			// SRP r16a 5.5: never more requests than credits.
			ASSERT_LE(ini->channel_info(0).in_flight, 8u);
		}
		ASSERT_GE(ini->poll(1s), 0);
	}
	EXPECT_EQ(done, kTotal);
	EXPECT_TRUE(saw_busy);
	EXPECT_GT(ini->stats().zero_req_lim, 0u);
	// req_lim > 1 for a command: the last credit stays for task management.
	EXPECT_EQ(max_in_flight, 7u);
	EXPECT_EQ(ini->channel_info(0).credits, 8u);
	EXPECT_EQ(ts.target->stats().credit_overruns, 0u);
	// The spare credit still carries a TMF while commands hold the rest.
	EXPECT_TRUE(ini->task_mgmt(srp::TSK_ABORT_TASK, 0, 0x12345).ok());
}

// ---- Nexus takeover, task management, logout, loss ------------------------------------------

TEST_F(SrpInitiator, SingleLoginTakesTheNexusOver)
{
	ASSERT_TRUE(ts.start());
	InitiatorConfig c = base_cfg();
	c.channels = 2;
	ini = connect(c);
	ASSERT_EQ(ini->channels(), 2u);
	// A command in flight on the old nexus while the new login comes.
	std::vector<uint8_t> b(64 << 10);
	fill(b, 0, 5);
	bool called = false;
	Outcome first{};
	const auto cdb = cdb_rw10(true, 0, uint16_t(b.size() / kBlock));
	ASSERT_EQ(ini->submit(Request{0, cdb, DataDir::Write, b},
	                      [&](const Result &r) {
		                      called = true;
		                      first = r.outcome;
	                      }),
	          0);

	c.channels = 1; // same initiator_ext: the same initiator port, SINGLE
	auto second = connect(c);
	ASSERT_EQ(second->channels(), 1u) << second->error();
	EXPECT_EQ(second->channel_info(0).rsp_flags & 3, srp::LOGIN_RSP_TERMINATED);

	const auto end = clock::now() + 10s;
	while ((ini->channels() > 0 || ini->in_flight() > 0) && clock::now() < end)
		ini->poll(100ms);
	EXPECT_TRUE(called);
	EXPECT_TRUE(first == Outcome::ConnectionLost || first == Outcome::Completed)
	    << outcome_name(first);
	EXPECT_EQ(ini->channels(), 0u);
	EXPECT_TRUE(ini->failed());
	EXPECT_EQ(ini->poll(0ms), -ENOTCONN);
	EXPECT_EQ(ts.target->stats().takeovers, 1u);
	EXPECT_TRUE(ts.wait_channels(1));
	EXPECT_EQ(ts.target->stats().nexuses_open, 1u);

	// The new nexus works.
	std::vector<uint8_t> w(4096), r(4096);
	fill(w, 100, 9);
	EXPECT_TRUE(rw(*second, true, 100, w).good());
	EXPECT_TRUE(rw(*second, false, 100, r).good());
	EXPECT_EQ(w, r);
}

TEST_F(SrpInitiator, TaskManagement)
{
	ASSERT_TRUE(ts.start());
	InitiatorConfig c = base_cfg();
	c.channels = 2;
	ini = connect(c);
	ASSERT_EQ(ini->channels(), 2u);
	TmfResult t = ini->task_mgmt(srp::TSK_LUN_RESET, 0);
	EXPECT_TRUE(t.ok()) << outcome_name(t.outcome) << " code " << int(t.rsp_code);
	// cmd.cc: ABORT TASK of a task the target does not have is FUNCTION COMPLETE (SAM-5
	// 7.2: the task is gone either way).
	t = ini->task_mgmt(srp::TSK_ABORT_TASK, 0, 0xdead0001);
	EXPECT_EQ(t.outcome, Outcome::Completed);
	EXPECT_EQ(t.rsp_code, srp::TM_COMPLETE);
	// A LUN the target does not have.
	t = ini->task_mgmt(srp::TSK_LUN_RESET, 5, 0, 1);
	EXPECT_EQ(t.outcome, Outcome::Completed);
	EXPECT_EQ(t.rsp_code, srp::TM_INCORRECT_LUN);
	EXPECT_EQ(ini->stats().tmfs, 3u);
	EXPECT_EQ(ts.target->stats().tsk_mgmts, 3u);
	for (uint32_t ch = 0; ch < 2; ch++)
		EXPECT_EQ(ini->channel_info(ch).in_flight, 0u);
	// After the reset the LU reports it once (a unit attention), then works.
	ready(*ini);
	std::vector<uint8_t> w(4096), r(4096);
	fill(w, 40, 2);
	EXPECT_TRUE(rw(*ini, true, 40, w).good());
	EXPECT_TRUE(rw(*ini, false, 40, r).good());
	EXPECT_EQ(w, r);
}

// A LUN RESET and an ABORT TASK while commands are in flight on two channels: what the
// target aborted ends Aborted (no SRP_RSP comes for it), the rest Completed, and every
// credit comes back: with a later response or in an SRP_CRED_REQ (SRP r16a 6.7).
TEST_F(SrpInitiator, TaskManagementUnderIo)
{
	// Two engines, whatever the machine: the channels' QPs execute on different threads,
	// so a LUN RESET on channel 0 can reach the target before commands channel 1 sent
	// earlier (no order holds between two RC connections). Those run after the reset and
	// are answered; the initiator must not end them (and revoke their buffers' keys) on
	// the reset's answer, or their RDMA READ fails the channel.
	ts.engines = 2;
	ASSERT_TRUE(ts.start());
	InitiatorConfig c = base_cfg();
	c.channels = 2;
	c.queue_size = 64;
	c.regions.push_back(zc(0, 8u << 20));
	ini = connect(c);
	ASSERT_EQ(ini->channels(), 2u);
	constexpr size_t kLen = 64 << 10;
	for (int round = 0; round < 4; round++) {
		std::map<Outcome, int> outcomes;
		int sent = 0, done = 0;
		uint64_t last_tag = 0;
		for (int k = 0; k < 100; k++) {
			auto b = zc(size_t(k % 120) * kLen, kLen);
			fill(b, uint64_t(k) * 128, 20 + round);
			const auto cdb = cdb_rw10(true, uint32_t(k) * 128, kLen / kBlock);
			const int rc = ini->submit(
			    Request{0, cdb, DataDir::Write, b},
			    [&](const Result &r) {
				    outcomes[r.outcome]++;
				    done++;
			    },
			    &last_tag);
			if (rc == -EBUSY)
				break;
			ASSERT_EQ(rc, 0);
			sent++;
		}
		TmfResult t = round % 2 ? ini->task_mgmt(srp::TSK_ABORT_TASK, 0, last_tag)
		                        : ini->task_mgmt(srp::TSK_LUN_RESET, 0);
		EXPECT_TRUE(t.ok()) << outcome_name(t.outcome) << " code " << int(t.rsp_code);
		const auto end = clock::now() + 10s;
		while (done < sent && clock::now() < end)
			ini->poll(100ms);
		ASSERT_EQ(done, sent);
		for (auto &[o, n] : outcomes)
			EXPECT_TRUE(o == Outcome::Completed || o == Outcome::Aborted)
			    << outcome_name(o) << " x" << n;
		// The owed credits come back by SRP_CRED_REQ when nothing else carries them.
		const auto end2 = clock::now() + 5s;
		auto settled = [&] {
			return ini->channel_info(0).credits == ini->channel_info(0).granted &&
			       ini->channel_info(1).credits == ini->channel_info(1).granted;
		};
		while (!settled() && clock::now() < end2)
			ini->poll(20ms);
		EXPECT_TRUE(settled())
		    << ini->channel_info(0).credits << " " << ini->channel_info(1).credits;
		ready(*ini); // the reset's unit attention
	}
	EXPECT_EQ(ts.target->stats().credit_overruns, 0u);
	EXPECT_EQ(ini->stats().cred_reqs, ts.target->stats().cred_reqs);
}

TEST_F(SrpInitiator, LogoutEndsEveryChannel)
{
	ASSERT_TRUE(ts.start());
	InitiatorConfig c = base_cfg();
	c.channels = 3;
	ini = connect(c);
	ASSERT_EQ(ini->channels(), 3u);
	std::vector<uint8_t> w(8192);
	fill(w, 0, 1);
	int done = 0;
	for (int k = 0; k < 6; k++) {
		const auto cdb = cdb_rw10(true, uint32_t(k) * 16, 16);
		ASSERT_EQ(ini->submit(Request{0, cdb, DataDir::Write, w},
		                      [&](const Result &r) {
			                      EXPECT_TRUE(r.good());
			                      done++;
		                      }),
		          0);
	}
	ini->logout();
	EXPECT_EQ(done, 6); // logout waited for them
	EXPECT_EQ(ini->in_flight(), 0u);
	EXPECT_EQ(ini->channels(), 0u);
	EXPECT_FALSE(ini->failed());
	EXPECT_EQ(ini->poll(0ms), -ENOTCONN);
	EXPECT_TRUE(ts.wait_channels(0, 5s)) << ts.target->stats().channels_open;
	const TargetStats s = ts.target->stats();
	EXPECT_EQ(s.i_logouts, 3u);
	EXPECT_EQ(s.nexuses_open, 0u);
}

TEST_F(SrpInitiator, TargetStopMidIoEndsEveryCommand)
{
	ASSERT_TRUE(ts.start());
	InitiatorConfig c = base_cfg();
	c.channels = 2;
	c.queue_size = 64;
	c.regions.push_back(zc(0, 8u << 20));
	ini = connect(c);
	ASSERT_EQ(ini->channels(), 2u);
	constexpr size_t kLen = 64 << 10;
	std::map<uint64_t, int> calls; // tag -> callbacks
	int sent = 0;
	for (int k = 0; k < 100; k++) {
		auto b = zc(size_t(k % 120) * kLen, kLen);
		const bool write = k % 2 == 0;
		const auto cdb = cdb_rw10(write, uint32_t(k) * 128, kLen / kBlock);
		uint64_t tag = 0;
		const int rc = ini->submit(
		    Request{0, cdb, write ? DataDir::Write : DataDir::Read, b},
		    [&, k](const Result &r) {
			    (void)r;
			    calls[uint64_t(k)]++;
		    },
		    &tag);
		if (rc == -EBUSY)
			break;
		ASSERT_EQ(rc, 0);
		sent++;
	}
	ASSERT_GT(sent, 10);
	std::thread stopper([&] { ts.target->stop(10s); });
	const auto end = clock::now() + 15s;
	while (ini->in_flight() > 0 && clock::now() < end)
		ini->poll(100ms);
	stopper.join();
	EXPECT_EQ(ini->in_flight(), 0u);
	ASSERT_EQ(int(calls.size()), sent);
	for (auto &[k, n] : calls)
		EXPECT_EQ(n, 1) << "command " << k;
	// Every channel is gone, so the initiator is.
	const auto end2 = clock::now() + 5s;
	while (ini->channels() > 0 && clock::now() < end2)
		ini->poll(50ms);
	EXPECT_EQ(ini->channels(), 0u);
	EXPECT_TRUE(ini->failed());
	EXPECT_EQ(ts.target->stats().channels_open, 0u);
}

// ---- A target that only says what the test makes it say ------------------------------------

// A bare RDMA/CM listener that accepts a login with an SRP_LOGIN_RSP of its own and then
// answers nothing: the test sends the target-to-initiator IUs (SRP_CRED_REQ, SRP_AER_REQ,
// SRP_T_LOGOUT) by hand and reads what comes back.
struct BareTarget {
	Device *dev = nullptr;
	std::unique_ptr<Pd> pd;
	std::unique_ptr<Cq> cq;
	std::unique_ptr<DmaRegion> mem; // receives, then one send buffer
	std::unique_ptr<Mr> mr;
	std::unique_ptr<CmId> listener;
	std::mutex lock;
	std::unique_ptr<CmId> conn; // lock
	Cqe cqe;                    // every WR's (the CQ is polled raw)
	static constexpr uint32_t kRecvs = 16;
	static constexpr uint32_t kSends = 8; // one buffer per IU sent (never reused)
	uint32_t sent = 0;
	static constexpr uint32_t kBuf = 8448; // > 8260: an SRP_CMD with immediate data

	uint8_t *buf(uint32_t i) { return static_cast<uint8_t *>(mem->addr()) + size_t(i) * kBuf; }

	bool start(Device *d)
	{
		dev = d;
		pd = dev->alloc_pd();
		CqInitAttr ca;
		ca.cqe = 256;
		cq = dev->create_cq(ca);
		mem = dma_alloc(size_t(kBuf) * (kRecvs + kSends));
		mr = pd->reg_mr(mem->addr(), mem->length(), ACCESS_LOCAL_WRITE);
		listener = soft::provider().create_id(
		    [this](CmId *, CmEvent &ev) {
			    if (ev.event == CmEventType::ConnectRequest)
				    on_request(ev);
		    },
		    this);
		return pd && cq && mr && listener &&
		       listener->bind_addr(*SockAddr::parse("127.0.0.1:0")) == 0 &&
		       listener->listen(4) == 0;
	}

	void on_request(CmEvent &ev)
	{
		auto id = std::move(ev.new_id);
		QpInitAttr qa;
		qa.send_cq = cq.get();
		qa.recv_cq = cq.get();
		qa.cap.max_send_wr = 16;
		qa.cap.max_recv_wr = kRecvs;
		qa.cap.max_send_sge = 1;
		qa.cap.max_recv_sge = 1;
		if (id->create_qp(*pd, qa) != 0)
			return;
		for (uint32_t i = 0; i < kRecvs; i++) {
			Sge s{reinterpret_cast<uint64_t>(buf(i)), kBuf, mr->lkey()};
			RecvWr w;
			w.wr_cqe = &cqe;
			w.sg_list = &s;
			w.num_sge = 1;
			const RecvWr *bad = nullptr;
			id->qp()->post_recv(&w, &bad);
		}
		srp::LoginRsp r;
		r.req_lim_delta = 16;
		r.max_it_iu_len = 8260;
		r.max_ti_iu_len = 256;
		r.buf_fmt = srp::BUF_FMT_DIRECT | srp::BUF_FMT_INDIRECT;
		r.rsp_flags = srp::LOGIN_RSP_NO_CHAN;
		uint8_t pd_[srp::kLoginRspLen];
		srp::build_login_rsp(r, std::span<uint8_t, srp::kLoginRspLen>(pd_, sizeof(pd_)));
		ConnParam cp;
		cp.set_private_data(pd_);
		if (id->accept(cp) != 0)
			return;
		std::lock_guard g(lock);
		conn = std::move(id);
	}

	SockAddr addr() const { return listener->local_addr(); }

	// Send one IU (a SEND from a buffer of its own).
	bool send(std::span<const uint8_t> iu)
	{
		std::lock_guard g(lock);
		if (!conn || sent == kSends)
			return false;
		uint8_t *b = buf(kRecvs + sent++);
		std::memcpy(b, iu.data(), iu.size());
		Sge s{reinterpret_cast<uint64_t>(b), uint32_t(iu.size()), mr->lkey()};
		SendWr w;
		w.wr_cqe = &cqe;
		w.sg_list = &s;
		w.num_sge = 1;
		w.send_flags = SEND_SIGNALED;
		const SendWr *bad = nullptr;
		return conn->qp()->post_send(&w, &bad) == 0;
	}

	// The IUs received so far (their bytes), in order.
	std::vector<std::vector<uint8_t>> received;
	void reap()
	{
		Wc wc[16];
		int n;
		while ((n = cq->poll(wc)) > 0)
			for (int i = 0; i < n; i++)
				if (wc[i].status == WcStatus::Success &&
				    wc[i].opcode == WcOpcode::Recv) {
					// Which buffer: receives complete in posting order, never
					// reposted.
					const uint8_t *p = buf(uint32_t(received.size()));
					received.emplace_back(p, p + wc[i].byte_len);
				}
	}

	void stop()
	{
		{
			std::lock_guard g(lock);
			if (conn) {
				conn->disconnect();
				conn->destroy_qp();
			}
		}
		listener.reset();
		conn.reset();
		mr.reset();
		cq.reset();
		pd.reset();
	}
};

TEST_F(SrpInitiator, TargetInitiatedIusAndTimeout)
{
	ASSERT_TRUE(ts.start()); // for its device
	BareTarget bt;
	ASSERT_TRUE(bt.start(ts.dev));
	InitiatorConfig c = base_cfg();
	c.cmd_timeout = 300ms;
	ini = std::make_unique<Initiator>(c);
	std::string why;
	ASSERT_EQ(ini->login(bt.addr(), &why), 0) << why;
	EXPECT_EQ(ini->channel_info(0).credits, 16u);

	// SRP_CRED_REQ (SRP r16a 6.7): the credits are added, SRP_CRED_RSP echoes its tag.
	uint8_t iu[64] = {};
	srp::CredReq cr;
	cr.tag = 0xc0ffee;
	cr.req_lim_delta = 5;
	ASSERT_TRUE(bt.send({iu, srp::build_cred_req(cr, iu)}));
	// SRP_AER_REQ (6.10): credits too, answered by SRP_AER_RSP.
	uint8_t aer[srp::kAerReqLen] = {srp::AER_REQ};
	aer[7] = 2;    // req_lim_delta 2
	aer[8] = 0x42; // tag 0x42 (tags are opaque bytes, here host order)
	ASSERT_TRUE(bt.send(aer));
	// SRP_T_LOGOUT (6.6): counted.
	ASSERT_TRUE(bt.send({iu, srp::build_t_logout(srp::TLogout{0x77, 1}, iu)}));
	const auto end = clock::now() + 5s;
	while ((bt.received.size() < 2 || ini->stats().t_logouts == 0) && clock::now() < end) {
		ini->poll(10ms);
		bt.reap();
	}
	ASSERT_EQ(bt.received.size(), 2u);
	uint64_t tag = 0;
	EXPECT_TRUE(srp::parse_tag_iu(bt.received[0], srp::CRED_RSP, &tag));
	EXPECT_EQ(tag, 0xc0ffeeu);
	EXPECT_TRUE(srp::parse_tag_iu(bt.received[1], srp::AER_RSP, &tag));
	EXPECT_EQ(tag, 0x42u);
	EXPECT_EQ(ini->stats().cred_reqs, 1u);
	EXPECT_EQ(ini->stats().aer_reqs, 1u);
	EXPECT_EQ(ini->stats().t_logouts, 1u);
	EXPECT_EQ(ini->channel_info(0).credits, 16u + 5 + 2); // the answers spent none

	// A command nobody answers: Timeout after cmd_timeout, and the initiator fails.
	const uint8_t tur[6] = {};
	Result got;
	bool called = false;
	ASSERT_EQ(ini->submit(Request{0, tur, DataDir::None, {}},
	                      [&](const Result &r) {
		                      got = r;
		                      called = true;
	                      }),
	          0);
	const auto t0 = clock::now();
	while (!called && clock::now() < t0 + 5s)
		ini->poll(50ms);
	ASSERT_TRUE(called);
	EXPECT_EQ(got.outcome, Outcome::Timeout);
	EXPECT_GE(clock::now() - t0, 290ms);
	EXPECT_TRUE(ini->failed());
	EXPECT_NE(ini->error().find("within 300 ms"), std::string::npos) << ini->error();
	EXPECT_EQ(ini->channels(), 0u);
	bt.reap();
	ASSERT_EQ(bt.received.size(), 3u); // the SRP_CMD did arrive
	EXPECT_EQ(srp::iu_opcode(bt.received[2]), srp::CMD);
	ini.reset();
	bt.stop();
}

} // namespace
} // namespace ulp::srpt
