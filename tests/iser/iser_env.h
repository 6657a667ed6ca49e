// SPDX-License-Identifier: MIT
// tests/iser/iser_env.h - the in-process iSER suites' common ground (iser_test.cc,
// plug_test.cc): the target side (a soft device, a RAM or file LUN, the iSCSI target and its
// iSER portal) and the initiator side (a session over the iSER transport with an arena of
// registered buffers), the data pattern that names its LBA and a tag.
#pragma once

#include "core/dma_mem.h"
#include "core/log.h"
#include "iscsi/initiator/scsi.h"
#include "iscsi/initiator/session.h"
#include "iscsi/target/target.h"
#include "iser/initiator/initiator.h"
#include "iser/target/target.h"
#include "providers/soft/soft.h"
#include "scsi/backstore.h"
#include "scsi/lu.h"
#include "scsi/tpg.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <thread>

namespace ulp::iser::test_env
{

using namespace ulp::iscsi;
using namespace ulp::iscsi::target;
using namespace ulp::iscsi::initiator;
using iscsi::initiator::Session;
using iser::Portal;
using iser::PortalConfig;

using namespace std::chrono_literals;
using clock = std::chrono::steady_clock;

inline constexpr char kIqn[] = "iqn.2026-11.org.ulp:iser-disk";
inline constexpr char kInitiator[] = "iqn.2026-11.org.ulp:iser-test";
inline constexpr uint32_t kBlock = 512;
inline constexpr uint64_t kLunBytes = 64u << 20;

// A block's pattern: its LBA and a tag in every 8 bytes, so misplaced or stale data shows.
inline void fill(std::span<uint8_t> b, uint64_t lba, uint32_t tag)
{
	for (size_t off = 0; off + 8 <= b.size(); off += 8) {
		const uint64_t v = (lba + off / kBlock) << 24 ^ uint64_t(tag) << 8 ^ (off % kBlock);
		std::memcpy(b.data() + off, &v, 8);
	}
}

inline bool same(std::span<const uint8_t> a, std::span<const uint8_t> b)
{
	return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size()) == 0;
}

// The target side in this process: a soft device, a RAM LUN, the iSCSI target + Portal.
struct Target {
	Device *dev = nullptr;
	std::unique_ptr<scsi::LogicalUnit> lu;
	std::unique_ptr<scsi::Tpg> tpg;
	std::unique_ptr<iscsi::target::Target> target;
	std::unique_ptr<Portal> portal;
	log::Capture capture;      // the log lines of the test's lifetime (core/log.h)
	std::string file;          // non-empty: a file LUN there (completions on its reaper thread)
	uint32_t comp_vectors = 0; // the device's completion vectors (0: its default)
	bool allow_target_reset = false; // honour TARGET WARM / COLD RESET

	bool start(const PortalConfig &xc = {}, uint32_t cmd_window = 128)
	{
		soft::DeviceConfig dc;
		dc.ip = "127.0.0.1";
		dc.limits.num_comp_vectors = comp_vectors;
		dev = soft::create_device(dc);
		if (!dev)
			return false;
		scsi::BackstoreConfig bc;
		bc.kind = file.empty() ? "ram" : "file";
		bc.path = file;
		bc.size = kLunBytes;
		bc.block_size = kBlock;
		int err = 0;
		std::string why;
		auto bs = scsi::make_backstore(bc, &err, &why);
		if (!bs)
			return false;
		lu = std::make_unique<scsi::LogicalUnit>("iser/0", std::move(bs), scsi::LuConfig{});
		tpg = std::make_unique<scsi::Tpg>(kIqn, 1);
		if (tpg->add_lun(0, *lu) != 0)
			return false;
		TargetConfig tc;
		TargetNode n;
		n.name = kIqn;
		n.tpg = tpg.get();
		n.allow_target_reset = allow_target_reset;
		tc.targets.push_back(n);
		tc.cmd_window = cmd_window;
		tc.prefs.max_burst_length = 1u << 20;
		tc.prefs.first_burst_length = 65536;
		tc.prefs.immediate_data = true;
		tc.prefs.initial_r2t = false; // the iSER portal insists on Yes anyway
		target = std::make_unique<iscsi::target::Target>(tc);
		portal = std::make_unique<Portal>(*target, soft::provider(), xc);
		std::string w;
		if (portal->listen(*SockAddr::parse("127.0.0.1:0"), &w) != 0) {
			ADD_FAILURE() << w;
			return false;
		}
		return portal->start() == 0;
	}

	uint16_t port() const { return portal->port(); }

	// Wait (bounded) until the portal has reaped every connection.
	bool wait_no_conns(std::chrono::milliseconds limit = 10s)
	{
		const auto end = clock::now() + limit;
		while (clock::now() < end) {
			if (portal->conns() == 0 && target->stats().sessions_open == 0)
				return true;
			std::this_thread::sleep_for(20ms);
		}
		return false;
	}

	std::string logs() { return capture.text(); }

	~Target()
	{
		if (target)
			target->stop(2s, 5s);
		if (portal)
			portal->stop();
		portal.reset();
		target.reset();
		if (dev)
			soft::destroy_device(dev);
		if (!file.empty())
			unlink(file.c_str());
	}
};

// The initiator side: a session over an iSER transport with an arena of registered
// buffers.
struct Initiator {
	iser::InitiatorConfig xc;
	iser::InitiatorStats xs;
	std::unique_ptr<DmaRegion> arena;
	std::unique_ptr<Session> s;
	std::chrono::milliseconds cmd_timeout{10s}; // the session's bound on a command

	explicit Initiator(size_t arena_bytes = 8u << 20)
	{
		arena = dma_alloc(arena_bytes);
		xc.provider = &soft::provider();
		xc.stats = &xs;
		xc.queue_depth = 32;
		xc.max_io = 2u << 20;
		if (arena)
			xc.regions.push_back(buf(0, arena_bytes));
	}
	std::span<uint8_t> buf(size_t off, size_t len)
	{
		return {static_cast<uint8_t *>(arena->addr()) + off, len};
	}
	bool login(uint16_t port)
	{
		iscsi::initiator::InitiatorConfig c;
		c.initiator_name = kInitiator;
		c.target_name = kIqn;
		c.cmd_timeout = cmd_timeout;
		c.login_timeout = 5s;
		c.connect_timeout = 3s;
		c.nop_interval = 60s;
		iser::InitiatorConfig x = xc;
		s = std::make_unique<Session>(c, [x] { return make_transport(x); });
		if (!s->login(iscsi::initiator::Portal{"127.0.0.1", port, 0})) {
			ADD_FAILURE() << "login: " << s->error();
			return false;
		}
		// The first command of a new I_T nexus reports POWER ON (a unit attention):
		// TEST UNIT READY takes it.
		const auto tur = cdb_test_unit_ready();
		for (int i = 0; i < 3; i++)
			if (s->run(ScsiRequest{0, tur, DataDir::None, {}}).good())
				return true;
		ADD_FAILURE() << "TEST UNIT READY never GOOD";
		return false;
	}
	ScsiResult write(uint64_t lba, std::span<uint8_t> data)
	{
		const auto cdb = cdb_write16(lba, uint32_t(data.size() / kBlock));
		return s->run(ScsiRequest{0, cdb, DataDir::Write, data});
	}
	ScsiResult read(uint64_t lba, std::span<uint8_t> data)
	{
		const auto cdb = cdb_read16(lba, uint32_t(data.size() / kBlock));
		return s->run(ScsiRequest{0, cdb, DataDir::Read, data});
	}
};

} // namespace ulp::iser::test_env
