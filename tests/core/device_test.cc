// SPDX-License-Identifier: MIT
// Device async event handlers: dispatch, unregister, reentrancy, unregister vs. dispatch.
#include "core/device.h"
#include "test_objects.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

namespace ulp
{
namespace
{

using namespace std::chrono_literals;
using test::TestDevice;

AsyncEvent port_event(Device &d, EventType t)
{
	AsyncEvent ev;
	ev.event = t;
	ev.device = &d;
	ev.port_num = 1;
	return ev;
}

TEST(DeviceEvents, DispatchReachesEveryHandler)
{
	TestDevice d("ev0");
	std::vector<std::pair<int, EventType>> seen;
	int h1 = d.register_event_handler([&](const AsyncEvent &ev) {
		EXPECT_EQ(ev.device, &d);
		seen.emplace_back(1, ev.event);
	});
	int h2 =
	    d.register_event_handler([&](const AsyncEvent &ev) { seen.emplace_back(2, ev.event); });
	ASSERT_GE(h1, 0);
	ASSERT_GE(h2, 0);
	ASSERT_NE(h1, h2);
	d.fire(port_event(d, EventType::PortErr));
	EXPECT_EQ(seen, (std::vector<std::pair<int, EventType>>{{1, EventType::PortErr},
	                                                        {2, EventType::PortErr}}));
}

TEST(DeviceEvents, UnregisteredHandlerIsNotCalled)
{
	TestDevice d("ev1");
	int a = 0, b = 0;
	int ha = d.register_event_handler([&](const AsyncEvent &) { a++; });
	d.register_event_handler([&](const AsyncEvent &) { b++; });
	d.fire(port_event(d, EventType::PortActive));
	d.unregister_event_handler(ha);
	d.fire(port_event(d, EventType::PortActive));
	EXPECT_EQ(a, 1);
	EXPECT_EQ(b, 2);
	d.unregister_event_handler(ha);    // twice: harmless
	d.unregister_event_handler(12345); // unknown: harmless
}

TEST(DeviceEvents, NoHandlersAndEmptyHandler)
{
	TestDevice d("ev2");
	d.fire(port_event(d, EventType::DeviceFatal)); // nobody listening
	d.unregister_event_handler(1);
	EXPECT_EQ(d.register_event_handler(EventHandler{}), -EINVAL);
}

TEST(DeviceEvents, HandlerMayUnregisterItselfAndRegisterOthers)
{
	TestDevice d("ev3");
	int self_calls = 0, late_calls = 0;
	int self = -1;
	self = d.register_event_handler([&](const AsyncEvent &) {
		self_calls++;
		d.unregister_event_handler(self); // must not wait for itself
		d.register_event_handler([&](const AsyncEvent &) { late_calls++; });
	});
	d.fire(port_event(d, EventType::PortErr));
	EXPECT_EQ(self_calls, 1);
	EXPECT_EQ(late_calls, 0); // registered during a dispatch: from the next one on
	d.fire(port_event(d, EventType::PortErr));
	EXPECT_EQ(self_calls, 1);
	EXPECT_EQ(late_calls, 1);
}

TEST(DeviceEvents, UnregisterWaitsForRunningHandler)
{
	TestDevice d("ev4");
	std::atomic<bool> entered{false}, release{false}, finished{false};
	int h = d.register_event_handler([&](const AsyncEvent &) {
		entered = true;
		while (!release)
			std::this_thread::sleep_for(1ms);
		finished = true;
	});
	std::thread provider([&] { d.fire(port_event(d, EventType::PortErr)); });
	while (!entered)
		std::this_thread::sleep_for(1ms);

	std::atomic<bool> unregistered{false};
	std::thread ulp([&] {
		d.unregister_event_handler(h);
		// Once unregister returns the handler is done: its captures may be freed.
		EXPECT_TRUE(finished.load());
		unregistered = true;
	});
	std::this_thread::sleep_for(50ms);
	EXPECT_FALSE(unregistered.load());
	release = true;
	ulp.join();
	provider.join();
	EXPECT_TRUE(unregistered.load());
}

TEST(DeviceEvents, ConcurrentRegisterAndDispatch)
{
	TestDevice d("ev5");
	std::atomic<int> calls{0};
	std::atomic<bool> stop{false};
	d.register_event_handler([&](const AsyncEvent &) { calls++; });
	std::thread provider([&] {
		while (!stop)
			d.fire(port_event(d, EventType::PortActive));
	});
	for (int i = 0; i < 2000; i++) {
		int h = d.register_event_handler([&](const AsyncEvent &) { calls++; });
		ASSERT_GE(h, 0);
		d.unregister_event_handler(h);
	}
	// Let the provider get some dispatches in even if the loop above outran it.
	while (calls.load() < 100)
		std::this_thread::yield();
	stop = true;
	provider.join();
}

} // namespace
} // namespace ulp
