// SPDX-License-Identifier: MIT
// tests/srp/srp_env.h - what every in-process SRP suite starts from: the target side (a
// soft device, a RAM or file LUN 0 in a TPG, srpt::Target and its portal), a READ(10)/WRITE(10)
// CDB and the data pattern that names its LBA and generation. target_test.cc,
// initiator_test.cc and the fault suites (fault_env.h) build on it.
#pragma once

#include "core/addr.h"
#include "providers/soft/soft.h"
#include "scsi/backstore.h"
#include "scsi/lu.h"
#include "scsi/tpg.h"
#include "srp/target/portal.h"
#include "srp/target/target.h"

#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace ulp::srpt::test_env
{

inline constexpr uint32_t kBlock = 512; // the LUN's logical block size, bytes

// READ(10) / WRITE(10) (SBC-4 5.15, 5.40) of `blocks` blocks at `lba`.
inline std::array<uint8_t, 10> cdb_rw10(bool write, uint32_t lba, uint16_t blocks)
{
	std::array<uint8_t, 10> c{};
	c[0] = write ? 0x2a : 0x28;
	c[2] = uint8_t(lba >> 24);
	c[3] = uint8_t(lba >> 16);
	c[4] = uint8_t(lba >> 8);
	c[5] = uint8_t(lba);
	c[7] = uint8_t(blocks >> 8);
	c[8] = uint8_t(blocks);
	return c;
}

// Its LBA and a generation in every 8 bytes (a tail shorter than 8 carries the
// generation): misplaced, stale or shifted data shows.
inline void fill(std::span<uint8_t> b, uint64_t lba, uint32_t gen)
{
	for (size_t off = 0; off + 8 <= b.size(); off += 8) {
		const uint64_t v = (lba + off / kBlock) << 24 ^ uint64_t(gen) << 8 ^ (off % kBlock);
		std::memcpy(b.data() + off, &v, 8);
	}
	for (size_t off = b.size() & ~size_t{7}; off < b.size(); off++)
		b[off] = uint8_t(gen + off);
}

// Where and how the target side is made.
struct TargetOptions {
	std::string ip = "127.0.0.1";       // the soft device's address; the portal binds port 0
	soft::Wire wire = soft::Wire::Auto; // Socket: the packet path, as between processes
	uint64_t lun_bytes = 64u << 20;     // the RAM LUN's size, bytes
	std::string name = "srp-test";      // the TPG's name
	std::vector<std::string> acls;      // initiator ACLs (none: any initiator)
	uint32_t engines = 0;               // the device's engines (0: its default)
	uint32_t comp_vectors = 0;          // the device's completion vectors (0: its default)
	std::string file;                   // non-empty: LUN 0 is a file LUN there, not RAM
};

// A soft device with a RAM (or file) LUN 0 behind an SRP target and one portal on that
// device.
struct SoftTarget {
	Device *dev = nullptr;                 // the target's soft device (owned)
	std::unique_ptr<scsi::LogicalUnit> lu; // LUN 0
	std::unique_ptr<scsi::Tpg> tpg;
	std::unique_ptr<Target> target;
	std::unique_ptr<Portal> portal;

	// The caller's tc (identifiers, sizes, timeouts) with tpg set here. false on any
	// failure (a failed listen is reported as a test failure too).
	bool start(TargetConfig tc, const TargetOptions &o = {})
	{
		soft::DeviceConfig dc;
		dc.ip = o.ip;
		dc.wire = o.wire;
		dc.engines = o.engines;
		dc.limits.num_comp_vectors = o.comp_vectors;
		dev = soft::create_device(dc);
		if (!dev)
			return false;
		scsi::BackstoreConfig bc;
		bc.kind = o.file.empty() ? "ram" : "file";
		bc.path = o.file;
		bc.size = o.lun_bytes;
		bc.block_size = kBlock;
		int err = 0;
		std::string why;
		auto bs = scsi::make_backstore(bc, &err, &why);
		if (!bs)
			return false;
		lu = std::make_unique<scsi::LogicalUnit>(o.name + "/0", std::move(bs),
		                                         scsi::LuConfig{});
		tpg = std::make_unique<scsi::Tpg>(o.name, 1);
		if (tpg->add_lun(0, *lu) != 0)
			return false;
		for (const std::string &a : o.acls) {
			scsi::NodeAcl acl;
			acl.initiator = a;
			if (tpg->add_acl(acl) != 0)
				return false;
		}
		tc.tpg = tpg.get();
		target = std::make_unique<Target>(tc);
		portal = std::make_unique<Portal>(*target, soft::provider());
		if (portal->listen(*SockAddr::parse(o.ip + ":0"), &why) != 0) {
			ADD_FAILURE() << why;
			return false;
		}
		ip_ = o.ip;
		return portal->start() == 0;
	}

	SockAddr addr() const
	{
		return *SockAddr::parse(ip_ + ":" + std::to_string(portal->port()));
	}

	// Stop the target (its channels closed and drained within `limit`); what
	// Target::stop() said, true when there was none.
	bool stop_target(std::chrono::milliseconds limit)
	{
		return target ? target->stop(limit) : true;
	}

	// The portal stops, then everything is freed, the device last.
	void release()
	{
		if (portal)
			portal->stop();
		portal.reset();
		target.reset();
		tpg.reset();
		lu.reset();
		if (dev)
			soft::destroy_device(dev);
		dev = nullptr;
	}

	void stop(std::chrono::milliseconds limit = std::chrono::seconds(5))
	{
		stop_target(limit);
		release();
	}

	~SoftTarget() { stop(); }

private:
	std::string ip_; // the address start() bound
};

} // namespace ulp::srpt::test_env
