// SPDX-License-Identifier: MIT
// tests/scsi/spc_env.h - what the SPC-4 suites share (spc_test.cc, spc_mode_test.cc,
// spc_rsoc_test.cc): CDB builders, LUs on backstores with a write cache, an iSCSI-named
// fabric, commands without data, and sense checks.
#pragma once

#include "scsi/core_internal.h"
#include "scsi/opcodes.h"
#include "scsi_test_util.h"

#include <string>
#include <vector>

namespace ulp::scsi::spc_test
{

using namespace test;

// ---- CDBs ---------------------------------------------------------------------------------

inline std::vector<uint8_t> cdb_mode_sense6(uint8_t pc, uint8_t page, uint8_t sub, uint8_t alloc,
                                            bool dbd = false)
{
	return {0x1a, uint8_t(dbd ? 0x08 : 0), uint8_t(pc << 6 | page), sub, alloc, 0};
}

inline std::vector<uint8_t> cdb_mode_sense10(uint8_t pc, uint8_t page, uint8_t sub, uint16_t alloc,
                                             bool dbd = false, bool llbaa = false)
{
	std::vector<uint8_t> c(10, 0);
	c[0] = 0x5a;
	c[1] = uint8_t((dbd ? 0x08 : 0) | (llbaa ? 0x10 : 0));
	c[2] = uint8_t(pc << 6 | page);
	c[3] = sub;
	put_be16(&c[7], alloc);
	return c;
}

inline std::vector<uint8_t> cdb_mode_select6(uint8_t len, bool pf = true, bool sp = false)
{
	return {0x15, uint8_t((pf ? 0x10 : 0) | (sp ? 0x01 : 0)), 0, 0, len, 0};
}

inline std::vector<uint8_t> cdb_mode_select10(uint16_t len, bool pf = true)
{
	std::vector<uint8_t> c(10, 0);
	c[0] = 0x55;
	c[1] = pf ? 0x10 : 0;
	put_be16(&c[7], len);
	return c;
}

inline std::vector<uint8_t> cdb_rsoc(uint8_t options, uint8_t op = 0, uint16_t sa = 0,
                                     uint32_t alloc = 65535, bool rctd = false)
{
	std::vector<uint8_t> c(12, 0);
	c[0] = 0xa3;
	c[1] = 0x0c;
	c[2] = uint8_t((rctd ? 0x80 : 0) | options);
	c[3] = op;
	put_be16(&c[4], sa);
	put_be32(&c[6], alloc);
	return c;
}

inline std::vector<uint8_t> cdb_rstmf(uint32_t alloc, bool repd = false)
{
	std::vector<uint8_t> c(12, 0);
	c[0] = 0xa3;
	c[1] = 0x0d;
	c[2] = repd ? 0x80 : 0;
	put_be32(&c[6], alloc);
	return c;
}

// libiscsi's scsi_cdb_startstopunit(immed, pcm, pc, no_flush, loej, start).
inline std::vector<uint8_t> cdb_start_stop(bool immed, uint8_t pcm, uint8_t pc, bool no_flush,
                                           bool loej, bool start)
{
	return {0x1b,
	        uint8_t(immed ? 1 : 0),
	        0,
	        uint8_t(pcm & 0x0f),
	        uint8_t(pc << 4 | (no_flush ? 4 : 0) | (loej ? 2 : 0) | (start ? 1 : 0)),
	        0};
}

// ---- A target, and what tests need on top of scsi_test_util.h --------------------------------

// A RAM backstore that claims a volatile write cache (so that WCE is changeable) and
// counts the flushes it is asked for.
class CachedRam final : public Backstore
{
public:
	explicit CachedRam(uint64_t size)
	    : Backstore("cached-ram", size, 64), inner_(test::ram(size))
	{
	}
	bool can_unmap() const override { return inner_->can_unmap(); }
	bool write_cache() const override { return true; }
	uint32_t unmap_granularity() const override { return inner_->unmap_granularity(); }
	int extent(uint64_t off, BsExtent *out) override { return inner_->extent(off, out); }
	void submit(BsIo *io) override
	{
		if (io->op == BsOp::Flush)
			flushes++;
		inner_->submit(io);
	}
	std::atomic<int> flushes{0};

private:
	std::unique_ptr<Backstore> inner_;
};

inline LogicalUnit &add_lu(Target &t, uint64_t lun, std::unique_ptr<Backstore> bs,
                           LuConfig cfg = {})
{
	t.lus.push_back(
	    std::make_unique<LogicalUnit>("lu" + std::to_string(lun), std::move(bs), cfg));
	t.gates.push_back(nullptr);
	EXPECT_EQ(t.tpg.add_lun(lun, *t.lus.back()), 0);
	return *t.lus.back();
}

// A fabric that forwards everything to a Loopback but calls itself "iscsi": what the
// device identification page and the version descriptors say of an iSCSI target port.
class IscsiNamed final : public Fabric
{
public:
	explicit IscsiNamed(Loopback &lb) : lb_(lb) {}
	const char *name() const override { return "iscsi"; }
	void write_pending(Cmd *c) override { lb_.write_pending(c); }
	void abort_write(Cmd *c) override { lb_.abort_write(c); }
	void queue_data_in(Cmd *c) override { lb_.queue_data_in(c); }
	void queue_status(Cmd *c) override { lb_.queue_status(c); }
	void aborted_task(Cmd *c) override { lb_.aborted_task(c); }
	void queue_tm_rsp(Tmr *t) override { lb_.queue_tm_rsp(t); }
	void release_cmd(Cmd *c) override { lb_.release_cmd(c); }

private:
	Loopback &lb_;
};

inline LoopResult read_cmd(Target &t, Nexus *s, uint64_t lun, const std::vector<uint8_t> &cdb,
                           size_t alloc)
{
	return t.lb.run(s, lun, cdb, alloc ? DataDir::Read : DataDir::None,
	                std::vector<uint8_t>(alloc));
}

inline LoopResult write_cmd(Target &t, Nexus *s, uint64_t lun, const std::vector<uint8_t> &cdb,
                            const std::vector<uint8_t> &data)
{
	return t.lb.run(s, lun, cdb, data.empty() ? DataDir::None : DataDir::Write, data);
}

inline LoopResult none_cmd(Target &t, Nexus *s, uint64_t lun, const std::vector<uint8_t> &cdb)
{
	return t.lb.run(s, lun, cdb, DataDir::None);
}

// CHECK CONDITION with this key and ASC/ASCQ.
inline ::testing::AssertionResult IsSense(const LoopResult &r, SenseKey key, uint16_t asc)
{
	if (!r.finished)
		return ::testing::AssertionFailure() << "not finished";
	if (r.status != Status::CheckCondition)
		return ::testing::AssertionFailure()
		       << "status " << int(r.status) << ", not CHECK CONDITION";
	if (r.key() != key || r.asc() != asc)
		return ::testing::AssertionFailure()
		       << std::hex << "sense " << int(r.key()) << "/" << r.asc() << ", expected "
		       << int(key) << "/" << asc;
	return ::testing::AssertionSuccess();
}

inline ::testing::AssertionResult IsInvalidCdb(const LoopResult &r)
{
	return IsSense(r, SenseKey::IllegalRequest, 0x2400);
}
inline ::testing::AssertionResult IsInvalidParam(const LoopResult &r)
{
	return IsSense(r, SenseKey::IllegalRequest, 0x2600);
}
inline ::testing::AssertionResult IsParamLength(const LoopResult &r)
{
	return IsSense(r, SenseKey::IllegalRequest, 0x1a00);
}

inline std::vector<uint8_t> pattern(size_t n)
{
	std::vector<uint8_t> v(n);
	for (size_t i = 0; i < n; i++)
		v[i] = uint8_t(i * 7 + 1);
	return v;
}

} // namespace ulp::scsi::spc_test
