// SPDX-License-Identifier: MIT
// tests/admin/targetd_env.h - what the end-to-end tests of an administered ulp-targetd share:
// the daemon in a child process with an admin socket in a scratch directory, ulpctl run as
// a child process (exit status and output, or its --json output parsed), and the project's
// iSCSI initiator pointed at it.
#pragma once

#include "admin/client.h"
#include "iscsi/initiator/scsi.h"
#include "iscsi/initiator/session.h"
#include "tests/iscsi/initiator_env.h"
#include "tests/iscsi/target_process.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace ulp::iscsi::initiator::test_env
{

using namespace std::chrono_literals;
using admin::json;

using ini_test::local;

// The initiator's settings for target, logging in as initiator.
inline InitiatorConfig initiator_config(const std::string &initiator, const std::string &target)
{
	return ini_test::config(target, initiator);
}

// ulpctl with args against sock; its exit status, stdout in *out (stderr appended).
inline int ulpctl(const std::string &sock, std::vector<std::string> args,
                  std::string *out = nullptr)
{
	args.insert(args.begin(), {"--socket", sock});
	std::string o, e;
	const int rc = test::run_program(ULPCTL_PATH, args, &o, &e, 60s);
	if (out)
		*out = o + e;
	return rc;
}

// ulpctl --json with args: its output parsed (a failed run or bad JSON fails the test).
inline json ulpctl_json(const std::string &sock, std::vector<std::string> args)
{
	args.insert(args.begin(), "--json");
	std::string out;
	EXPECT_EQ(ulpctl(sock, args, &out), 0) << out;
	json j = json::parse(out, nullptr, false);
	EXPECT_FALSE(j.is_discarded()) << out;
	return j;
}

// A verified write and read of 8 blocks of 512 bytes at lba on lun.
inline bool write_read(Session &s, uint64_t lun, uint64_t lba, uint8_t seed)
{
	std::vector<uint8_t> w(8 * 512), r(8 * 512);
	for (size_t i = 0; i < w.size(); i++)
		w[i] = uint8_t(i * 31 + seed);
	if (!s.run({lun, cdb_write16(lba, 8), DataDir::Write, w}).good())
		return false;
	if (!s.run({lun, cdb_read16(lba, 8), DataDir::Read, r}).good())
		return false;
	return r == w;
}

// Read the POWER ON unit attention a new nexus gets: TEST UNIT READY until GOOD (4 tries).
inline void clear_ua(Session &s, uint64_t lun)
{
	for (int i = 0; i < 4 && !s.run({lun, cdb_test_unit_ready(), DataDir::None, {}}).good();
	     i++) {
	}
}

// ulp-targetd with an admin socket in a scratch directory of its own.
struct AdminDaemon {
	test::TempDir dir;
	std::string sock;
	test::TargetdProcess t;
	::testing::AssertionResult start(std::vector<std::string> args)
	{
		sock = dir / "admin.sock";
		args.insert(args.end(), {"--admin-socket", sock});
		std::string why;
		if (!t.start(args, &why))
			return ::testing::AssertionFailure() << why;
		return ::testing::AssertionSuccess();
	}
};

} // namespace ulp::iscsi::initiator::test_env
