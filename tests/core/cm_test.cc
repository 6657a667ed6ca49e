// SPDX-License-Identifier: MIT
// cm.h helpers: event names and private data.
#include "core/cm.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

namespace ulp
{
namespace
{

TEST(Cm, EventNames)
{
	std::set<std::string> names;
	int n = static_cast<int>(CmEventType::TimewaitExit) + 1;
	for (int i = 0; i < n; i++)
		names.insert(cm_event_str(static_cast<CmEventType>(i)));
	EXPECT_EQ(names.size(), static_cast<size_t>(n));
	EXPECT_EQ(names.count("unrecognized event"), 0u);
	EXPECT_STREQ(cm_event_str(CmEventType::Rejected), "rejected");
}

TEST(Cm, PrivateDataCopiedIn)
{
	ConnParam p;
	std::vector<uint8_t> d = {1, 2, 3, 4, 5};
	p.set_private_data(d);
	EXPECT_EQ(p.private_data_len, 5);
	EXPECT_EQ(std::vector<uint8_t>(p.pdata().begin(), p.pdata().end()), d);
	d[0] = 99; // a copy, not a view
	EXPECT_EQ(p.pdata()[0], 1);
}

TEST(Cm, PrivateDataReplacedAndTailCleared)
{
	ConnParam p;
	std::vector<uint8_t> big(100, 0xee);
	p.set_private_data(big);
	std::vector<uint8_t> small = {7};
	p.set_private_data(small);
	EXPECT_EQ(p.private_data_len, 1);
	EXPECT_EQ(p.private_data[1], 0); // no stale bytes from the earlier message
	p.set_private_data({});
	EXPECT_EQ(p.private_data_len, 0);
	EXPECT_TRUE(p.pdata().empty());
}

TEST(Cm, PrivateDataClampedToContainer)
{
	ConnParam p;
	std::vector<uint8_t> d(ConnParam::kMaxPrivateData + 10);
	for (size_t i = 0; i < d.size(); i++)
		d[i] = static_cast<uint8_t>(i);
	p.set_private_data(d);
	ASSERT_EQ(p.private_data_len, ConnParam::kMaxPrivateData);
	EXPECT_EQ(p.pdata().back(), static_cast<uint8_t>(ConnParam::kMaxPrivateData - 1));
	std::vector<uint8_t> exact(ConnParam::kMaxPrivateData, 0x5a);
	p.set_private_data(exact);
	EXPECT_EQ(p.private_data_len, ConnParam::kMaxPrivateData);
}

} // namespace
} // namespace ulp
