// SPDX-License-Identifier: MIT
// tests/scsi/scsi_test_util.h - what the SCSI core suites share: CDB builders, a target
// with RAM logical units behind the loopback fabric, and a gate in front of a backstore
// that holds requests in flight (so that tests can catch commands mid-I/O, the way a slow
// disk would).
#pragma once

#include "scsi/backstore.h"
#include "scsi/loopback.h"
#include "scsi/lu.h"
#include "scsi/tpg.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace ulp::scsi::test
{

// ---- CDBs ---------------------------------------------------------------------------------

inline std::vector<uint8_t> cdb_tur()
{
	return std::vector<uint8_t>(6, 0);
}

inline std::vector<uint8_t> cdb_inquiry(uint16_t alloc, bool evpd = false, uint8_t page = 0)
{
	std::vector<uint8_t> c(6, 0);
	c[0] = 0x12;
	c[1] = evpd ? 1 : 0;
	c[2] = page;
	put_be16(&c[3], alloc);
	return c;
}

inline std::vector<uint8_t> cdb_rw16(bool write, uint64_t lba, uint32_t blocks, bool fua = false)
{
	std::vector<uint8_t> c(16, 0);
	c[0] = write ? 0x8a : 0x88;
	c[1] = fua ? 0x08 : 0;
	put_be64(&c[2], lba);
	put_be32(&c[10], blocks);
	return c;
}

inline std::vector<uint8_t> cdb_rw10(bool write, uint32_t lba, uint16_t blocks)
{
	std::vector<uint8_t> c(10, 0);
	c[0] = write ? 0x2a : 0x28;
	put_be32(&c[2], lba);
	put_be16(&c[7], blocks);
	return c;
}

inline std::vector<uint8_t> cdb_request_sense(uint8_t alloc = 18)
{
	std::vector<uint8_t> c(6, 0);
	c[0] = 0x03;
	c[4] = alloc;
	return c;
}

inline std::vector<uint8_t> cdb_report_luns(uint32_t alloc = 4096)
{
	std::vector<uint8_t> c(12, 0);
	c[0] = 0xa0;
	put_be32(&c[6], alloc);
	return c;
}

// ---- A gate in front of a backstore ---------------------------------------------------------

// Holds every request while closed; open() passes the held ones on in order and lets new
// ones straight through. The requests themselves run on the real backstore behind it.
class GatedBackstore final : public Backstore
{
public:
	explicit GatedBackstore(std::unique_ptr<Backstore> inner)
	    : Backstore("gated-" + inner->kind(), inner->size(), inner->queue_depth()),
	      inner_(std::move(inner))
	{
	}
	bool can_unmap() const override { return inner_->can_unmap(); }
	bool write_cache() const override { return inner_->write_cache(); }
	int extent(uint64_t off, BsExtent *out) override { return inner_->extent(off, out); }
	int resize(uint64_t bytes, std::string *why) override
	{
		const int r = inner_->resize(bytes, why);
		if (r == 0)
			set_size(bytes);
		return r;
	}
	int storage_size(uint64_t *bytes, std::string *why) override
	{
		return inner_->storage_size(bytes, why);
	}
	void submit(BsIo *io) override
	{
		{
			std::lock_guard g(lock_);
			if (closed_) {
				held_.push_back(io);
				cv_.notify_all();
				return;
			}
		}
		inner_->submit(io);
	}
	void close()
	{
		std::lock_guard g(lock_);
		closed_ = true;
	}
	// Pass the held requests on; stay open (false) or closed (true) afterwards.
	void open(bool stay_closed = false)
	{
		std::deque<BsIo *> q;
		{
			std::lock_guard g(lock_);
			closed_ = stay_closed;
			q.swap(held_);
		}
		for (BsIo *io : q)
			inner_->submit(io);
	}
	// Wait until n requests are held (bounded); false on timeout.
	bool wait_held(size_t n, std::chrono::milliseconds t = std::chrono::seconds(5))
	{
		std::unique_lock g(lock_);
		return cv_.wait_for(g, t, [&] { return held_.size() >= n; });
	}
	size_t held()
	{
		std::lock_guard g(lock_);
		return held_.size();
	}

private:
	std::unique_ptr<Backstore> inner_;
	std::mutex lock_;
	std::condition_variable cv_;
	bool closed_ = false;
	std::deque<BsIo *> held_;
};

// ---- A target with logical units ---------------------------------------------------------

inline std::unique_ptr<Backstore> ram(uint64_t size)
{
	BackstoreConfig c;
	c.kind = "ram";
	c.size = size;
	int err = 0;
	std::string why;
	auto bs = make_backstore(c, &err, &why);
	EXPECT_TRUE(bs) << why;
	return bs;
}

// One Tpg, a loopback fabric, LUs added on demand.
struct Target {
	Loopback lb;
	Tpg tpg{"iqn.2026-11.org.ulp:test", 1};
	std::vector<std::unique_ptr<LogicalUnit>> lus;
	std::vector<GatedBackstore *> gates; // per LU added with gated=true, else null

	// Add LUN lun: a RAM LU of size bytes, optionally behind a gate.
	LogicalUnit &add(uint64_t lun, uint64_t size = 1 << 20, LuConfig cfg = {},
	                 bool gated = false, bool read_only = false)
	{
		std::unique_ptr<Backstore> bs = ram(size);
		GatedBackstore *g = nullptr;
		if (gated) {
			auto gb = std::make_unique<GatedBackstore>(std::move(bs));
			g = gb.get();
			bs = std::move(gb);
		}
		lus.push_back(
		    std::make_unique<LogicalUnit>("lu" + std::to_string(lun), std::move(bs), cfg));
		gates.push_back(g);
		EXPECT_EQ(tpg.add_lun(lun, *lus.back(), read_only), 0);
		return *lus.back();
	}

	// A session whose POWER ON unit attention has been consumed on lun.
	Nexus *login(const std::string &name, uint64_t lun = 0)
	{
		Nexus *s = lb.login(tpg, name);
		EXPECT_TRUE(s);
		if (s) {
			auto r = lb.run(s, lun, cdb_tur(), DataDir::None);
			EXPECT_EQ(r.status, Status::CheckCondition); // POWER ON
		}
		return s;
	}

	~Target()
	{
		for (Nexus *s : tpg.sessions())
			EXPECT_EQ(lb.logout(s), 0);
	}
};

} // namespace ulp::scsi::test
