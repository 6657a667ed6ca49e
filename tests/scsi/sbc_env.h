// SPDX-License-Identifier: MIT
// tests/scsi/sbc_env.h - what the SBC-3 suites share (sbc_test.cc, sbc_provisioning_test.cc,
// sbc_multistep_test.cc): CDB builders, data patterns and sense checks, the backstores under
// test (file, ram, and one that fails chosen requests), and Env, a target with one LU.
#pragma once

#include "scsi/core.h"
#include "scsi/core_internal.h"
#include "scsi/sbc.h"
#include "scsi_test_util.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <mutex>
#include <string>
#include <vector>

namespace ulp::scsi::sbc_test
{

using namespace test;
using Bytes = std::vector<uint8_t>;

inline constexpr uint32_t kBs = 512;

// ---- CDBs ---------------------------------------------------------------------------------

// WRITE ATOMIC (16), SBC-4 5.48.
inline Bytes cdb_write_atomic(uint64_t lba, uint16_t blocks, uint8_t b1 = 0, uint16_t boundary = 0)
{
	Bytes c(16, 0);
	c[0] = 0x9c;
	c[1] = b1;
	put_be64(&c[2], lba);
	put_be16(&c[10], boundary);
	put_be16(&c[12], blocks);
	return c;
}

inline Bytes cdb_rw(uint8_t op, uint64_t lba, uint32_t blocks, uint8_t b1 = 0)
{
	Bytes c;
	switch (op) {
	case 0x08: // READ (6)
	case 0x0a: // WRITE (6)
		c.assign(6, 0);
		put_be24(&c[1], static_cast<uint32_t>(lba) & 0x1fffff);
		c[4] = static_cast<uint8_t>(blocks);
		break;
	case 0x28:
	case 0x2a:
	case 0x2f: // VERIFY (10)
	case 0x2e: // WRITE AND VERIFY (10)
	case 0x34: // PRE-FETCH (10)
	case 0x35: // SYNCHRONIZE CACHE (10)
		c.assign(10, 0);
		put_be32(&c[2], static_cast<uint32_t>(lba));
		put_be16(&c[7], static_cast<uint16_t>(blocks));
		break;
	case 0xa8:
	case 0xaa:
	case 0xaf: // VERIFY (12)
	case 0xae: // WRITE AND VERIFY (12)
		c.assign(12, 0);
		put_be32(&c[2], static_cast<uint32_t>(lba));
		put_be32(&c[6], blocks);
		break;
	default: // 16-byte forms
		c.assign(16, 0);
		put_be64(&c[2], lba);
		put_be32(&c[10], blocks);
		break;
	}
	c[0] = op;
	if (c.size() > 6)
		c[1] = b1;
	return c;
}

// WRITE SAME (10) 0x41 / (16) 0x93.
inline Bytes cdb_ws(bool ws16, uint64_t lba, uint32_t blocks, bool unmap = false,
                    bool anchor = false, bool ndob = false)
{
	Bytes c = ws16 ? cdb_rw(0x93, lba, blocks) : cdb_rw(0x2a, lba, blocks);
	c[0] = ws16 ? 0x93 : 0x41;
	c[1] = (unmap ? 0x08 : 0) | (anchor ? 0x10 : 0) | (ndob ? 0x01 : 0);
	return c;
}

inline Bytes cdb_unmap(uint16_t plen, bool anchor = false)
{
	Bytes c(10, 0);
	c[0] = 0x42;
	c[1] = anchor ? 1 : 0;
	put_be16(&c[7], plen);
	return c;
}

struct Desc {
	uint64_t lba;
	uint32_t blocks;
};

inline Bytes unmap_list(const std::vector<Desc> &d)
{
	Bytes p(8 + 16 * d.size(), 0);
	put_be16(&p[0], static_cast<uint16_t>(p.size() - 2));
	put_be16(&p[2], static_cast<uint16_t>(16 * d.size()));
	for (size_t i = 0; i < d.size(); i++) {
		put_be64(&p[8 + 16 * i], d[i].lba);
		put_be32(&p[8 + 16 * i + 8], d[i].blocks);
	}
	return p;
}

inline Bytes cdb_caw(uint64_t lba, uint8_t blocks, uint8_t b1 = 0)
{
	Bytes c(16, 0);
	c[0] = 0x89;
	c[1] = b1;
	put_be64(&c[2], lba);
	c[13] = blocks;
	return c;
}

inline Bytes cdb_lba_status(uint64_t lba, uint32_t alloc)
{
	Bytes c(16, 0);
	c[0] = 0x9e;
	c[1] = 0x12;
	put_be64(&c[2], lba);
	put_be32(&c[10], alloc);
	return c;
}

inline Bytes cdb_rc16(uint32_t alloc)
{
	Bytes c(16, 0);
	c[0] = 0x9e;
	c[1] = 0x10;
	put_be32(&c[10], alloc);
	return c;
}

// ---- Data and results ---------------------------------------------------------------------

inline Bytes pattern(size_t n, uint32_t seed)
{
	Bytes v(n);
	uint32_t x = seed * 2654435761u + 7;
	for (auto &b : v) {
		x = x * 1103515245u + 12345u;
		b = uint8_t(x >> 16);
	}
	return v;
}

inline Bytes repeat(const Bytes &block, size_t times)
{
	Bytes v;
	v.reserve(block.size() * times);
	for (size_t i = 0; i < times; i++)
		v.insert(v.end(), block.begin(), block.end());
	return v;
}

// CHECK CONDITION with the ASC/ASCQ asc (and, when given, the sense key).
inline ::testing::AssertionResult is_sense(const LoopResult &r, uint16_t asc, int key = -1)
{
	if (!r.finished)
		return ::testing::AssertionFailure() << "not finished";
	if (r.status != Status::CheckCondition)
		return ::testing::AssertionFailure() << "status " << int(r.status);
	if (r.asc() != asc || (key >= 0 && int(r.key()) != key))
		return ::testing::AssertionFailure()
		       << "key " << int(r.key()) << " asc " << std::hex << r.asc();
	return ::testing::AssertionSuccess();
}

inline ::testing::AssertionResult is_good(const LoopResult &r)
{
	if (!r.finished)
		return ::testing::AssertionFailure() << "not finished";
	if (r.status != Status::Good)
		return ::testing::AssertionFailure()
		       << "status " << int(r.status) << " key " << int(r.key()) << " asc "
		       << std::hex << r.asc();
	return ::testing::AssertionSuccess();
}

inline bool info_valid(const LoopResult &r)
{
	return r.sense.size() >= 18 && (r.sense[0] & 0x80);
}
inline uint32_t info(const LoopResult &r)
{
	return r.sense.size() >= 18 ? get_be32(&r.sense[3]) : 0;
}

// ---- Backstores under test ----------------------------------------------------------------

// A file backstore on a file in /var/tmp (a disk file system: O_DIRECT and hole punching
// work there, and completions arrive on the io_uring thread). The file is unlinked at once:
// the backstore's descriptors keep it until the LU goes.
inline std::unique_ptr<Backstore> file_bs(uint64_t size, uint32_t block_size = kBs)
{
	static std::atomic<int> seq{0};
	std::string path = "/var/tmp/ulp-sbc-test-" + std::to_string(getpid()) + "-" +
	                   std::to_string(seq.fetch_add(1));
	BackstoreConfig c;
	c.kind = "file";
	c.path = path;
	c.size = size;
	c.block_size = block_size;
	int err = 0;
	std::string why;
	auto bs = make_backstore(c, &err, &why);
	EXPECT_TRUE(bs) << why;
	unlink(path.c_str());
	return bs;
}

inline std::unique_ptr<Backstore> ram_bs(uint64_t size, uint32_t block_size = kBs)
{
	BackstoreConfig c;
	c.kind = "ram";
	c.size = size;
	c.block_size = block_size;
	int err = 0;
	std::string why;
	auto bs = make_backstore(c, &err, &why);
	EXPECT_TRUE(bs) << why;
	return bs;
}

inline std::unique_ptr<Backstore> make_bs(const std::string &kind, uint64_t size,
                                          uint32_t bsz = kBs)
{
	return kind == "file" ? file_bs(size, bsz) : ram_bs(size, bsz);
}

// In front of a backstore: fails the requests of chosen kinds that touch a byte range with
// a chosen errno, records every request's op and FUA flag, and can report no unmap support.
// With write_same_max_ set it offers WriteSame (as rbd does) and performs one as a Write of
// the block's copies to the backstore behind it, which must be synchronous (ram).
class FaultyBackstore final : public Backstore
{
public:
	explicit FaultyBackstore(std::unique_ptr<Backstore> inner)
	    : Backstore("faulty-" + inner->kind(), inner->size(), inner->queue_depth()),
	      inner_(std::move(inner))
	{
	}
	bool can_unmap() const override { return inner_->can_unmap(); }
	bool write_cache() const override { return write_cache_; }
	uint32_t atomic_write_max() const override { return inner_->atomic_write_max(); }
	uint32_t atomic_write_align() const override { return atomic_align_; }
	uint64_t write_same_max() const override { return write_same_max_; }
	int extent(uint64_t off, BsExtent *out) override
	{
		if (extent_err_)
			return extent_err_;
		return inner_->extent(off, out);
	}
	void submit(BsIo *io) override
	{
		int err = 0;
		{
			std::lock_guard g(lock_);
			ops_.push_back({io->op, io->fua, io->offset, io->length, io->atomic});
			if (io->op == fail_op_ &&
			    (io->op == BsOp::Flush ||
			     (io->offset < fail_end_ && io->offset + io->length > fail_begin_)))
				err = fail_err_;
		}
		if (err) {
			io->done(io, err);
			return;
		}
		if (io->op == BsOp::WriteSame) {
			io->done(io, write_same(io));
			return;
		}
		inner_->submit(io);
	}
	void fail(BsOp op, uint64_t begin, uint64_t end, int err)
	{
		std::lock_guard g(lock_);
		fail_op_ = op;
		fail_begin_ = begin;
		fail_end_ = end;
		fail_err_ = err;
	}
	struct Op {
		BsOp op;
		bool fua;
		uint64_t offset, length;
		bool atomic;
	};
	std::vector<Op> ops()
	{
		std::lock_guard g(lock_);
		return ops_;
	}
	void clear()
	{
		std::lock_guard g(lock_);
		ops_.clear();
	}
	bool write_cache_ = true;
	int extent_err_ = 0;
	uint64_t write_same_max_ = 0;
	uint32_t atomic_align_ = 0; // bytes: atomic_write_align(), as rbd's atomic unit

private:
	// A WriteSame as one Write of copies of its block (iov[0]) to the synchronous inner.
	int write_same(const BsIo *io)
	{
		if (io->iov.size() != 1 || io->iov[0].iov_len == 0 ||
		    io->length % io->iov[0].iov_len || io->length > write_same_max_)
			return -EINVAL;
		const auto *blk = static_cast<const uint8_t *>(io->iov[0].iov_base);
		Bytes copies;
		for (uint64_t at = 0; at < io->length; at += io->iov[0].iov_len)
			copies.insert(copies.end(), blk, blk + io->iov[0].iov_len);
		iovec v{copies.data(), copies.size()};
		BsIo w;
		w.op = BsOp::Write;
		w.fua = io->fua;
		w.offset = io->offset;
		w.length = copies.size();
		w.iov = {&v, 1};
		int err = 1;
		w.priv = &err;
		w.done = [](BsIo *d, int e) { *static_cast<int *>(d->priv) = e; };
		inner_->submit(&w);
		return err == 1 ? -EIO : err; // 1: the inner backstore did not answer at once
	}

	std::unique_ptr<Backstore> inner_;
	std::mutex lock_;
	std::vector<Op> ops_;
	BsOp fail_op_ = BsOp::Flush;
	uint64_t fail_begin_ = 0, fail_end_ = 0;
	int fail_err_ = 0;
};

// A target with one LU (LUN 0) on a given backstore and a session whose POWER ON unit
// attention is consumed.
struct Env {
	Target t;
	LogicalUnit *lu = nullptr;
	Nexus *s = nullptr;
	GatedBackstore *gate = nullptr;
	FaultyBackstore *faulty = nullptr;

	Env(std::unique_ptr<Backstore> bs, LuConfig cfg = {}, bool gated = false,
	    bool faulty_wrap = false, bool read_only_map = false)
	{
		if (faulty_wrap) {
			auto f = std::make_unique<FaultyBackstore>(std::move(bs));
			faulty = f.get();
			bs = std::move(f);
		}
		if (gated) {
			auto g = std::make_unique<GatedBackstore>(std::move(bs));
			gate = g.get();
			bs = std::move(g);
		}
		t.lus.push_back(std::make_unique<LogicalUnit>("lu0", std::move(bs), cfg));
		t.gates.push_back(gate);
		lu = t.lus.back().get();
		EXPECT_EQ(t.tpg.add_lun(0, *lu, read_only_map), 0);
		s = t.login("iqn.init:a");
	}

	LoopResult run(const Bytes &cdb, DataDir dir = DataDir::None, Bytes data = {},
	               Nexus *on = nullptr)
	{
		return t.lb.run(on ? on : s, 0, cdb, dir, std::move(data));
	}
	LoopResult out(const Bytes &cdb, Bytes data) { return run(cdb, DataDir::Write, data); }
	LoopResult in(const Bytes &cdb, size_t len) { return run(cdb, DataDir::Read, Bytes(len)); }

	void write(uint64_t lba, const Bytes &data)
	{
		auto r = out(cdb_rw(0x8a, lba, uint32_t(data.size() / lu->block_size())), data);
		EXPECT_TRUE(is_good(r)) << "write at " << lba;
	}
	Bytes read(uint64_t lba, uint32_t blocks)
	{
		auto r = in(cdb_rw(0x88, lba, blocks), size_t(blocks) * lu->block_size());
		EXPECT_TRUE(is_good(r)) << "read at " << lba;
		return r.data;
	}
	uint64_t nr() const { return lu->nr_blocks(); }
};

// The data suites run on the ram and the file backstore (instantiated in sbc_test.cc).
class SbcData : public ::testing::TestWithParam<std::string>
{
};

} // namespace ulp::scsi::sbc_test
