// SPDX-License-Identifier: MIT
// tests/admin/targetd_portal_groups_test.cc - ulp-targetd with a target whose two portals are
// two portal groups ([[target.portal_group]]): a login lands in the group of the portal it
// came in on (its TargetPortalGroupTag, RFC 7143 13.9), each group is its own SCSI target
// port (VPD 83h's relative target port designator, SPC-4 7.8.6.7, with the configured
// rtpi), SendTargets reports each portal with its group's tag, and a portal of no group
// does not reach the target.
#include "tests/admin/targetd_env.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <string>
#include <vector>

namespace ulp::iscsi::initiator
{
namespace
{

constexpr char kIqn[] = "iqn.2026-11.org.ulp:groups";
constexpr char kInitiator[] = "iqn.2026-11.org.ulp:groups-test";

using test_env::local;

// The relative target port identifier VPD page 83h reports for the port s is logged in
// through (designator type 4h, association 01b: the target port); 0 when none.
uint16_t vpd83_rtpi(Session &s)
{
	const std::array<uint8_t, 6> cdb{0x12, 0x01, 0x83, 0x01, 0x00, 0x00}; // EVPD, 256 bytes
	std::array<uint8_t, 256> d{};
	test_env::clear_ua(s, 0);
	ScsiResult r = s.run({0, cdb, DataDir::Read, d});
	EXPECT_TRUE(r.good()) << describe_result(r);
	const size_t end = std::min<size_t>(d.size(), 4 + (size_t(d[2]) << 8 | d[3]));
	for (size_t i = 4; i + 4 <= end; i += 4 + d[i + 3]) {
		const uint8_t assoc = (d[i + 1] >> 4) & 3, type = d[i + 1] & 0xf;
		if (assoc == 1 && type == 4 && d[i + 3] == 4 && i + 8 <= end)
			return uint16_t(d[i + 6] << 8 | d[i + 7]);
	}
	return 0;
}

TEST(TargetdPortalGroups, LoginsLandInTheirPortsGroup)
{
	test_env::AdminDaemon d;
	const uint16_t p1 = test::free_port(), p2 = test::free_port(), p3 = test::free_port();
	ASSERT_TRUE(p1 != p2 && p2 != p3 && p1 != p3);
	const std::string a1 = "127.0.0.1:" + std::to_string(p1);
	const std::string a2 = "127.0.0.1:" + std::to_string(p2);
	const std::string a3 = "127.0.0.1:" + std::to_string(p3); // in no group
	const std::string file = d.dir / "t.toml";
	std::ofstream(file) << "portals = [\"" << a1 << "\", \"" << a2 << "\", \"" << a3 << "\"]\n"
	                    << "[[target]]\nname = \"" << kIqn << "\"\n"
	                    << "  [[target.lun]]\n  lun = 0\n  backstore = \"ram\"\n"
	                    << "  size = \"16M\"\n"
	                    << "  [[target.portal_group]]\n  tag = 1\n  portals = [\"" << a1
	                    << "\"]\n"
	                    << "  [[target.portal_group]]\n  tag = 2\n  rtpi = 7\n"
	                    << "  portals = [\"" << a2 << "\"]\n";
	ASSERT_TRUE(d.start({"--config", file}));

	Session s1(test_env::initiator_config(kInitiator, kIqn));
	ASSERT_TRUE(s1.login(local(p1))) << s1.error();
	EXPECT_EQ(s1.params().tpgt, 1);
	EXPECT_EQ(vpd83_rtpi(s1), 1) << "no rtpi key: the tag";

	Session s2(test_env::initiator_config(kInitiator, kIqn));
	ASSERT_TRUE(s2.login(local(p2))) << s2.error();
	EXPECT_EQ(s2.params().tpgt, 2);
	EXPECT_EQ(vpd83_rtpi(s2), 7);
	// Both ports reach the same logical unit.
	EXPECT_TRUE(test_env::write_read(s2, 0, 8, 3));

	// SendTargets: each portal with its group's tag, the portal of no group not at all.
	InitiatorConfig dc = test_env::initiator_config(kInitiator, "");
	dc.type = SessionType::Discovery;
	Session ds(dc);
	ASSERT_TRUE(ds.login(local(p1))) << ds.error();
	std::vector<DiscoveryTarget> found;
	ASSERT_TRUE(ds.send_targets("All", &found)) << ds.last_error();
	ASSERT_EQ(found.size(), 1u);
	EXPECT_EQ(found[0].addresses, (std::vector<std::string>{a1 + ",1", a2 + ",2"}));

	// A portal of no group of the target does not reach it.
	Session s3(test_env::initiator_config(kInitiator, kIqn));
	EXPECT_FALSE(s3.login(local(p3)));

	// The sessions as the daemon lists them: one per port, each with its group's tag.
	std::vector<int> tags;
	for (const admin::json &j : test_env::ulpctl_json(d.sock, {"session", "list"}))
		if (j["type"] == "normal")
			tags.push_back(j["tpgt"].get<int>());
	std::sort(tags.begin(), tags.end());
	EXPECT_EQ(tags, (std::vector<int>{1, 2}));
}

} // namespace
} // namespace ulp::iscsi::initiator
