// SPDX-License-Identifier: MIT
// tests/iser/plug_test.cc - the iSER target posts what one turn produces for a connection as
// one chain (rdma_conn/send_plug.h): a batch of commands that reaches the target at once is
// answered - each read's RDMA WRITE with its SCSI Response chained behind, each write's
// response - with one post_send, whether the commands complete inside their receives' poll
// batch (a RAM LUN) or on the CQ poller's event loop when it reaps a file LUN's io_uring.
//
// Only the last piece of a chain is signaled: the target's QP delivers one send completion
// per post_send, where it delivered one per command.
//
// A batch reaches the target at once: the initiator sends it while the target device's only
// CQ poller is held (tests/common/poller_hold.h), so the poller's next pass finds all of it.
// The initiator is on a soft device of its own, so that the target device's post_send count
// (soft::Counters::post_sends) is the target's alone.
#include "scsi/bs_internal.h"
#include "tests/common/poller_hold.h"
#include "tests/iser/iser_env.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <set>

namespace ulp::iser
{

using namespace ulp::iscsi;
using namespace ulp::iscsi::initiator;
namespace
{

using namespace std::chrono_literals;
using test_env::clock;
using test_env::fill;
using test_env::Initiator;
using test_env::kBlock;
using test_env::same;
using test_env::Target;

constexpr uint32_t kBatch = 16; // commands of one batch: one poll batch of WCs
constexpr uint32_t kLen = 4096; // bytes per command (immediate data for a write)
constexpr uint32_t kBlocks = kLen / kBlock;

enum class Lun { Ram, File };

struct PlugCase {
	Lun lun;
	bool write; // WRITEs with their data immediate (else READs by the target's RDMA WRITE)
};

void PrintTo(const PlugCase &c, std::ostream *os)
{
	*os << (c.lun == Lun::Ram ? "Ram" : "File") << (c.write ? "_ImmediateWrites" : "_Reads");
}

class IserPlug : public ::testing::TestWithParam<PlugCase>
{
};

TEST_P(IserPlug, OneBatchOnePostSend)
{
	const PlugCase pc = GetParam();
	Target t;
	t.comp_vectors = 1; // one poller for every CQ of the device (PollerHold)
	if (pc.lun == Lun::File) {
		char tmpl[] = "/dev/shm/ulp-iser-plug-XXXXXX";
		const int fd = mkstemp(tmpl);
		ASSERT_GE(fd, 0);
		::close(fd);
		t.file = tmpl; // removed by ~Target
	}
	ASSERT_TRUE(t.start());
	soft::DeviceConfig dc;
	dc.ip = "127.0.0.2";
	Device *idev = soft::create_device(dc);
	ASSERT_TRUE(idev);
	struct DevGone {
		Device *d;
		~DevGone() { soft::destroy_device(d); }
	} idev_gone{idev};
	{
		Initiator in;
		ASSERT_TRUE(in.arena);
		in.xc.src_ip = "127.0.0.2";
		ASSERT_TRUE(in.login(t.port()));

		// The blocks the batch reads, each naming its LBA, written one command at a time.
		if (!pc.write)
			for (uint32_t i = 0; i < kBatch; i++) {
				auto w = in.buf(0, kLen);
				fill(w, uint64_t(i) * kBlocks, 7);
				ASSERT_TRUE(in.write(uint64_t(i) * kBlocks, w).good());
			}

		std::vector<std::array<uint8_t, 16>> cdbs(kBatch);
		std::vector<ScsiResult> res(kBatch);
		size_t done = 0;
		for (uint32_t i = 0; i < kBatch; i++) {
			auto b = in.buf(size_t(i) * kLen, kLen);
			if (pc.write)
				fill(b, uint64_t(i) * kBlocks, 9);
			else
				std::memset(b.data(), 0xee, b.size());
		}
		scsi::FileBsStats fs0{}, fs1{};
		const bool is_file = scsi::file_bs_stats(t.lu->bs(), &fs0);
		ulp::test::PollerHold hold;
		ASSERT_TRUE(hold.hold(*t.dev));
		std::this_thread::sleep_for(20ms); // the completions of what went before land
		const uint64_t posts0 = soft::device_counters(*t.dev).post_sends;
		const uint64_t cqes0 = soft::device_counters(*t.dev).completed;
		const uint64_t sends0 = in.xs.sends;
		for (uint32_t i = 0; i < kBatch; i++) {
			const uint64_t lba = uint64_t(i) * kBlocks;
			cdbs[i] = pc.write ? cdb_write16(lba, kBlocks) : cdb_read16(lba, kBlocks);
			const uint32_t itt = in.s->submit(
			    ScsiRequest{0, cdbs[i], pc.write ? DataDir::Write : DataDir::Read,
			                in.buf(size_t(i) * kLen, kLen)},
			    [&res, &done, i](const ScsiResult &r) {
				    res[i] = r;
				    done++;
			    });
			ASSERT_NE(itt, kReservedTag) << in.s->last_error();
		}
		// Every command on the wire before the target's poller goes on.
		const auto until = clock::now() + 5s;
		while (in.xs.sends - sends0 < kBatch && clock::now() < until)
			in.s->poll(1ms);
		ASSERT_EQ(in.xs.sends - sends0, uint64_t(kBatch));
		std::this_thread::sleep_for(20ms); // their SENDs land in the target's receives
		hold.release();
		const auto end = clock::now() + 10s;
		while (done < kBatch && clock::now() < end)
			ASSERT_GE(in.s->poll(10ms), 0) << in.s->error();
		ASSERT_EQ(done, size_t(kBatch));
		for (uint32_t i = 0; i < kBatch; i++)
			EXPECT_TRUE(res[i].good())
			    << "command " << i << ": " << describe_result(res[i]);
		const uint64_t posts = soft::device_counters(*t.dev).post_sends - posts0;
		// Each post_send's chain has one signaled WR (send_plug.h): the target's QP
		// delivers one send completion per post besides the kBatch receives (once they
		// all came: bounded wait).
		uint64_t cqes = 0;
		for (auto end = clock::now() + 2s; clock::now() < end;
		     std::this_thread::sleep_for(5ms))
			if ((cqes = soft::device_counters(*t.dev).completed - cqes0) >=
			    kBatch + posts)
				break;
		std::this_thread::sleep_for(20ms);
		cqes = soft::device_counters(*t.dev).completed - cqes0;
		EXPECT_EQ(cqes, kBatch + posts) << "completions of the target's QP";
		if (is_file) {
			ASSERT_TRUE(scsi::file_bs_stats(t.lu->bs(), &fs1));
		}
		std::printf("iSER %s %s: %u commands, %llu post_send calls (%.3f per command), "
		            "%llu ring reaps\n",
		            pc.lun == Lun::Ram ? "RAM" : "file",
		            pc.write ? "immediate writes" : "reads", kBatch,
		            (unsigned long long)posts, double(posts) / kBatch,
		            (unsigned long long)(fs1.reaps - fs0.reaps));
		if (is_file) {
			// Reaped from the poller's own ring, not answered inside submit.
			EXPECT_EQ(fs1.loop_requests - fs0.loop_requests, uint64_t(kBatch));
			EXPECT_EQ(fs1.cached_reads, fs0.cached_reads);
		}
		// The receives' batch is one turn, and a RAM LUN answers inside it; a file LUN's
		// completions are reaped in the poller's event-loop turns, as io_uring hands them
		// over (all at once or a few at a time): one post per turn that reaped some, where
		// a post per response would be kBatch.
		if (pc.lun == Lun::Ram)
			EXPECT_EQ(posts, 1u);
		else
			EXPECT_LE(posts, fs1.reaps - fs0.reaps);

		for (uint32_t i = 0; i < kBatch; i++) {
			auto r = in.buf(4u << 20, kLen);
			std::vector<uint8_t> want(kLen);
			fill(want, uint64_t(i) * kBlocks, pc.write ? 9 : 7);
			if (pc.write) {
				ASSERT_TRUE(in.read(uint64_t(i) * kBlocks, r).good());
				EXPECT_TRUE(same(r, want)) << "block of command " << i;
			} else {
				EXPECT_TRUE(same(in.buf(size_t(i) * kLen, kLen), want))
				    << "block of command " << i;
			}
		}
		EXPECT_TRUE(in.s->logout()) << in.s->error();
	}
	EXPECT_TRUE(t.wait_no_conns()) << t.logs();
}

INSTANTIATE_TEST_SUITE_P(Luns, IserPlug,
                         ::testing::Values(PlugCase{Lun::Ram, false}, PlugCase{Lun::Ram, true},
                                           PlugCase{Lun::File, false}, PlugCase{Lun::File, true}));

} // namespace
} // namespace ulp::iser
