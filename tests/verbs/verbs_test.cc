// SPDX-License-Identifier: MIT
// providers/verbs on a real device (ULP_TEST_DEVICE, e.g. rxe0 in tools/vm): what the
// provider adds on top of libibverbs, checked where only a real device can answer.
//
//   - REG_MR over a type-2 memory window: the mapping must lie in one registered region,
//     stops at the first discontinuity (DEVICE_REG_MR_CONTIG), and takes that region's
//     lkey for local SGEs while the window keeps the rkey.
//   - Port events: the netdev under the port goes down and up (inside the VM only:
//     ULP_IN_VM), and PortErr then PortActive reach the device's handlers, with
//     query_port agreeing.
#include "core/device.h"
#include "core/registry.h"
#include "tests/common/test_device.h"

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <thread>
#include <vector>

namespace ulp
{
namespace
{

constexpr uint32_t kPage = 4096;

Device *device_or_skip()
{
	if (!test::on_test_device())
		return nullptr;
	return test::test_device();
}

#define SKIP_WITHOUT_DEVICE(d)                                                                     \
	Device *d = device_or_skip();                                                              \
	if (!d)                                                                                    \
	GTEST_SKIP() << "needs ULP_TEST_DEVICE (a verbs device: tools/vm/run)"

TEST(VerbsMr, WindowMapsOneRegionWithItsLkey)
{
	SKIP_WITHOUT_DEVICE(dev);
	if (!(dev->attr().device_cap_flags & DEVICE_MEM_MGT_EXTENSIONS))
		GTEST_SKIP() << dev->name() << " has no memory windows";
	EXPECT_TRUE(dev->attr().device_cap_flags & DEVICE_REG_MR_CONTIG);
	auto pd = dev->alloc_pd();
	ASSERT_TRUE(pd);
	std::vector<uint8_t> buf(16 * kPage);
	auto *base = reinterpret_cast<uint8_t *>(
	    (reinterpret_cast<uintptr_t>(buf.data()) + kPage - 1) & ~uintptr_t(kPage - 1));
	const uint64_t b = reinterpret_cast<uint64_t>(base);
	auto region = pd->reg_mr(base, 8 * kPage, ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE);
	ASSERT_TRUE(region);
	auto fr = pd->alloc_mr(64);
	ASSERT_TRUE(fr);
	const uint32_t rkey = fr->rkey();

	// Contiguous, unaligned: the whole range, the region's lkey, the window's rkey.
	SgEntry one[] = {{b + 100, 3 * kPage}};
	EXPECT_EQ(fr->map_sg(one, nullptr, kPage), 1);
	EXPECT_EQ(fr->iova(), b + 100);
	EXPECT_EQ(fr->length(), 3u * kPage);
	EXPECT_EQ(fr->lkey(), region->lkey());
	EXPECT_EQ(fr->rkey(), rkey);
	fr->inc_rkey();
	EXPECT_EQ(fr->rkey(), inc_rkey(rkey));
	EXPECT_EQ(fr->lkey(), region->lkey()) << "the region's lkey must not rotate";

	// Page-aligned but not contiguous: the first run only.
	SgEntry two[] = {{b, kPage}, {b + 2 * kPage, kPage}};
	unsigned off = 0;
	EXPECT_EQ(fr->map_sg(two, &off, kPage), 1);
	EXPECT_EQ(fr->length(), uint64_t(kPage));

	// Beyond the region (and outside every region): refused at map time.
	SgEntry past[] = {{b + 7 * kPage, 2 * kPage}};
	EXPECT_EQ(fr->map_sg(past, nullptr, kPage), -EINVAL);
	SgEntry none[] = {{b + 12 * kPage, kPage}};
	EXPECT_EQ(fr->map_sg(none, nullptr, kPage), -EINVAL);
}

// The netdev under port 1 of dev, from sysfs (rxe: the one `rdma link add` named).
std::string port_netdev(const Device &dev)
{
	std::ifstream f("/sys/class/infiniband/" + dev.name() + "/ports/1/gid_attrs/ndevs/0");
	std::string n;
	std::getline(f, n);
	return n;
}

struct EventLog {
	std::mutex lock;
	std::condition_variable cv;
	std::vector<EventType> seen;

	bool wait_for(EventType t, std::chrono::seconds limit)
	{
		std::unique_lock g(lock);
		return cv.wait_for(g, limit, [&] {
			for (EventType e : seen)
				if (e == t)
					return true;
			return false;
		});
	}
};

PortState port_state(Device &dev)
{
	PortAttr pa;
	EXPECT_EQ(dev.query_port(1, &pa), 0);
	return pa.state;
}

TEST(VerbsEvents, PortDownAndUpReachHandlers)
{
	SKIP_WITHOUT_DEVICE(dev);
	if (!std::getenv("ULP_IN_VM"))
		GTEST_SKIP() << "takes the device's netdev down: only inside tools/vm (ULP_IN_VM)";
	const std::string nd = port_netdev(*dev);
	ASSERT_FALSE(nd.empty()) << "no netdev under " << dev->name();
	ASSERT_EQ(port_state(*dev), PortState::Active);

	EventLog log;
	int h = dev->register_event_handler([&](const AsyncEvent &ev) {
		std::lock_guard g(log.lock);
		log.seen.push_back(ev.event);
		EXPECT_EQ(ev.device, dev);
		EXPECT_EQ(ev.port_num, 1);
		log.cv.notify_all();
	});
	ASSERT_GE(h, 0);
	ASSERT_EQ(std::system(("ip link set " + nd + " down").c_str()), 0);
	EXPECT_TRUE(log.wait_for(EventType::PortErr, std::chrono::seconds(10)));
	EXPECT_NE(port_state(*dev), PortState::Active);
	ASSERT_EQ(std::system(("ip link set " + nd + " up").c_str()), 0);
	EXPECT_TRUE(log.wait_for(EventType::PortActive, std::chrono::seconds(10)));
	// The port state follows the event (rxe reports ACTIVE once the link is up again).
	for (int i = 0; i < 100 && port_state(*dev) != PortState::Active; i++)
		std::this_thread::sleep_for(std::chrono::milliseconds(100));
	EXPECT_EQ(port_state(*dev), PortState::Active);
	dev->unregister_event_handler(h);
}

} // namespace
} // namespace ulp
