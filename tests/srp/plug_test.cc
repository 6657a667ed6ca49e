// SPDX-License-Identifier: MIT
// tests/srp/plug_test.cc - the SRP target posts the responses of one turn as one chain
// (rdma_conn/send_plug.h): a batch of commands that reaches the target at once is answered
// with one post_send, whether the commands complete inside their receives' poll batch (a
// RAM LUN) or on the CQ poller's event loop when it reaps a file LUN's io_uring.
//
// Only the last piece of a chain is signaled: the target's QP delivers one send completion
// per post_send, where it delivered one per response.
//
// A batch reaches the target at once: the raw peer sends it as one chain of SENDs while the
// device's only CQ poller is held (tests/common/poller_hold.h), so the poller's next pass
// finds all of it. The target's post_send calls are the soft device's (which counts calls
// that took WRs, soft::Counters::post_sends) less the peer's.
#include "scsi/bs_internal.h"
#include "tests/common/poller_hold.h"
#include "tests/srp/target_env.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <set>
#include <string>

namespace ulp::srpt::test
{
namespace
{

// Commands of one batch: the peer's credits (rq_size 16) and send slots, and one poll
// batch of WCs (kPollBatch).
constexpr uint32_t kBatch = 16;
constexpr uint32_t kLen = 4096; // bytes per command

enum class Lun { Ram, File };

struct PlugCase {
	Lun lun;
	bool write; // WRITEs with their data in the IU (else READs into the peer's buffer)
};

void PrintTo(const PlugCase &c, std::ostream *os)
{
	*os << (c.lun == Lun::Ram ? "Ram" : "File") << (c.write ? "_ImmediateWrites" : "_Reads");
}

// A file LUN in /dev/shm (tmpfs: no disk in the timing; O_DIRECT where the kernel has it
// there), removed at the end.
struct TempLun {
	std::string path;
	TempLun()
	{
		char tmpl[] = "/dev/shm/ulp-srp-plug-XXXXXX";
		const int fd = mkstemp(tmpl);
		if (fd >= 0) {
			::close(fd);
			path = tmpl;
		}
	}
	~TempLun()
	{
		if (!path.empty())
			unlink(path.c_str());
	}
};

// post_send calls of the target's QPs: the device's less the peer's.
uint64_t target_posts(Device &dev, SrpPeer &p)
{
	return soft::device_counters(dev).post_sends - soft::qp_counters(*p.qp()).post_sends;
}

// Completions the target's QPs delivered (receives and sends): the device's less the peer's.
uint64_t target_completions(Device &dev, SrpPeer &p)
{
	return soft::device_counters(dev).completed - soft::qp_counters(*p.qp()).completed;
}

class SrpPlug : public ::testing::TestWithParam<PlugCase>
{
};

TEST_P(SrpPlug, OneBatchOnePostSend)
{
	const PlugCase pc = GetParam();
	TempLun file;
	SrpTarget t;
	test_env::TargetOptions o = SrpTarget::options();
	o.comp_vectors = 1; // one poller for every CQ of the device (PollerHold)
	if (pc.lun == Lun::File) {
		ASSERT_FALSE(file.path.empty());
		o.file = file.path;
	}
	ASSERT_TRUE(t.SoftTarget::start(SrpTarget::small_cfg(), o));
	SrpPeer p(*t.dev, PeerConfig{.sends = kBatch});
	srp::LoginRsp rsp;
	ASSERT_EQ(p.login(t.addr(), t.login_req(), &rsp), 0);
	ASSERT_TRUE(take_unit_attention(p));
	ASSERT_GE(rsp.req_lim_delta, kBatch);

	// What the batch will read: each block names its LBA, written one command at a time.
	std::vector<std::array<uint8_t, 16>> cdbs(kBatch);
	if (!pc.write) {
		for (uint32_t i = 0; i < kBatch; i++) {
			const uint32_t lba = i * (kLen / kBlock);
			fill(p.data().subspan(size_t(i) * kLen, kLen), lba, 7);
			cdbs[i] = rw10(true, lba, uint16_t(kLen / kBlock));
			srp::CmdOut c = rw_cmd(0x100 + i, cdbs[i], true);
			const srp::DirectDesc d = p.desc(size_t(i) * kLen, kLen);
			c.descs = std::span(&d, 1);
			c.total_len = kLen;
			ASSERT_EQ(run_cmd(p, c), 0);
		}
		std::memset(p.data().data(), 0, size_t(kBatch) * kLen);
	}

	// The batch: kBatch commands as one chain, while the poller is held.
	std::vector<std::vector<uint8_t>> ius;
	std::vector<std::vector<uint8_t>> imm(kBatch);
	std::vector<srp::DirectDesc> descs(kBatch);
	for (uint32_t i = 0; i < kBatch; i++) {
		const uint32_t lba = i * (kLen / kBlock);
		cdbs[i] = rw10(pc.write, lba, uint16_t(kLen / kBlock));
		srp::CmdOut c = rw_cmd(0x200 + i, cdbs[i], pc.write);
		c.total_len = kLen;
		if (pc.write) {
			imm[i].resize(kLen);
			fill(imm[i], lba, 9);
			c.out_fmt = srp::DescFmt::Immediate;
			c.imm_data_offset = kImmOffset;
			c.imm = imm[i];
		} else {
			descs[i] = p.desc(size_t(i) * kLen, kLen);
			c.descs = std::span(&descs[i], 1);
		}
		ius.push_back(cmd_iu(c));
	}
	scsi::FileBsStats fs0{}, fs1{};
	const bool is_file = scsi::file_bs_stats(t.lu->bs(), &fs0);
	ulp::test::PollerHold hold;
	ASSERT_TRUE(hold.hold(*t.dev));
	std::this_thread::sleep_for(20ms); // the completions of what went before land
	const uint64_t posts0 = target_posts(*t.dev, p);
	const uint64_t cqes0 = target_completions(*t.dev, p);
	ASSERT_EQ(p.send_many(ius), 0);
	hold.release();

	std::set<uint64_t> tags;
	for (uint32_t i = 0; i < kBatch; i++) {
		std::vector<uint8_t> keep;
		auto r = next_rsp(p, &keep);
		ASSERT_TRUE(r) << "response " << i << " of " << kBatch;
		EXPECT_EQ(r->status, 0) << "tag " << r->tag;
		tags.insert(r->tag);
	}
	EXPECT_EQ(tags.size(), size_t(kBatch));
	const uint64_t posts = target_posts(*t.dev, p) - posts0;
	// The sends' completions come once the responses reached the peer: wait for the
	// counts to settle (bounded), then one per post_send (send_plug.h: the chain's last
	// piece is its only signaled WR) besides the kBatch receives.
	uint64_t cqes = 0;
	for (auto end = clock::now() + 2s; clock::now() < end; std::this_thread::sleep_for(5ms))
		if ((cqes = target_completions(*t.dev, p) - cqes0) >= kBatch + posts)
			break;
	std::this_thread::sleep_for(20ms);
	cqes = target_completions(*t.dev, p) - cqes0;
	EXPECT_EQ(cqes, kBatch + posts) << "completions of the target's QP";
	if (is_file) {
		ASSERT_TRUE(scsi::file_bs_stats(t.lu->bs(), &fs1));
	}
	std::printf("SRP %s %s: %u commands, %llu post_send calls (%.3f per command), "
	            "%llu ring reaps\n",
	            pc.lun == Lun::Ram ? "RAM" : "file", pc.write ? "immediate writes" : "reads",
	            kBatch, (unsigned long long)posts, double(posts) / kBatch,
	            (unsigned long long)(fs1.reaps - fs0.reaps));
	if (is_file) {
		// The commands completed where the plug has to catch them: reaped from the
		// poller's own ring, not answered inside submit (a cached read).
		EXPECT_EQ(fs1.loop_requests - fs0.loop_requests, uint64_t(kBatch));
		EXPECT_EQ(fs1.cached_reads, fs0.cached_reads);
	}
	// The receives' batch is one turn; the RAM LUN answers inside it. The file LUN's
	// completions are reaped in the poller's event-loop turns, as io_uring hands them over
	// (all at once or a few at a time): one post per turn that reaped some, where a post
	// per response would be kBatch.
	if (pc.lun == Lun::Ram)
		EXPECT_EQ(posts, 1u);
	else
		EXPECT_LE(posts, fs1.reaps - fs0.reaps);

	if (!pc.write) {
		for (uint32_t i = 0; i < kBatch; i++) {
			std::vector<uint8_t> want(kLen);
			fill(want, i * (kLen / kBlock), 7);
			EXPECT_EQ(
			    std::memcmp(p.data().data() + size_t(i) * kLen, want.data(), kLen), 0)
			    << "block of command " << i;
		}
	} else {
		// Read back one at a time: the batch's data is on the LUN.
		for (uint32_t i = 0; i < kBatch; i++) {
			const uint32_t lba = i * (kLen / kBlock);
			const auto cdb = rw10(false, lba, uint16_t(kLen / kBlock));
			srp::CmdOut c = rw_cmd(0x300 + i, cdb, false);
			const srp::DirectDesc d = p.desc(0, kLen);
			c.descs = std::span(&d, 1);
			c.total_len = kLen;
			ASSERT_EQ(run_cmd(p, c), 0);
			std::vector<uint8_t> want(kLen);
			fill(want, lba, 9);
			EXPECT_EQ(std::memcmp(p.data().data(), want.data(), kLen), 0)
			    << "block " << i;
		}
	}
	p.disconnect();
	EXPECT_TRUE(t.wait_idle());
}

INSTANTIATE_TEST_SUITE_P(Luns, SrpPlug,
                         ::testing::Values(PlugCase{Lun::Ram, false}, PlugCase{Lun::Ram, true},
                                           PlugCase{Lun::File, false}, PlugCase{Lun::File, true}));

} // namespace
} // namespace ulp::srpt::test
