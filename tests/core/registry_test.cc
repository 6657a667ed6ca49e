// SPDX-License-Identifier: MIT
// The device registry: client add/remove ordering, providers, lookups from callbacks.
#include "core/registry.h"
#include "test_objects.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

namespace ulp
{
namespace
{

using test::TestDevice;

// A client that logs "add:<client>:<device>" / "remove:..." into a shared log.
struct LoggingClient : Client {
	LoggingClient(std::string n, std::vector<std::string> *log)
	{
		name = n;
		add = [this, log](Device &d) {
			log->push_back("add:" + name + ":" + d.name());
			// Lookups work from a callback (only the callback lock is held).
			EXPECT_EQ(find_device(d.name()), &d);
		};
		remove = [this, log](Device &d) {
			// "+listed" when the device is still in devices(): a leaving device is
			// gone from the list before clients hear of it; a client unregistering
			// lets go of devices that stay.
			auto all = devices();
			bool listed = std::find(all.begin(), all.end(), &d) != all.end();
			log->push_back("remove:" + name + ":" + d.name() +
			               (listed ? "+listed" : ""));
		};
	}
};

TEST(Registry, ClientBeforeDevices)
{
	std::vector<std::string> log;
	LoggingClient a("A", &log), b("B", &log);
	ASSERT_EQ(register_client(&a), 0);
	ASSERT_EQ(register_client(&b), 0);
	EXPECT_TRUE(log.empty());

	TestDevice d0("reg-d0"), d1("reg-d1");
	register_device(&d0);
	register_device(&d1);
	EXPECT_EQ(log, (std::vector<std::string>{"add:A:reg-d0", "add:B:reg-d0", "add:A:reg-d1",
	                                         "add:B:reg-d1"}));
	EXPECT_EQ(find_device("reg-d1"), &d1);

	log.clear();
	unregister_device(&d0); // clients let go in reverse registration order
	EXPECT_EQ(log, (std::vector<std::string>{"remove:B:reg-d0", "remove:A:reg-d0"}));
	EXPECT_EQ(find_device("reg-d0"), nullptr);

	log.clear();
	unregister_client(&a);
	EXPECT_EQ(log, (std::vector<std::string>{"remove:A:reg-d1+listed"}));
	log.clear();
	unregister_device(&d1); // only B is left
	EXPECT_EQ(log, (std::vector<std::string>{"remove:B:reg-d1"}));
	unregister_client(&b);
	EXPECT_EQ(log.size(), 1u); // no devices left: no callbacks
}

TEST(Registry, ClientAfterDevices)
{
	std::vector<std::string> log;
	TestDevice d0("reg-e0"), d1("reg-e1");
	register_device(&d0);
	register_device(&d1);
	register_device(&d0); // twice: ignored
	auto all = devices();
	EXPECT_EQ(std::count(all.begin(), all.end(), &d0), 1);

	LoggingClient c("C", &log);
	ASSERT_EQ(register_client(&c), 0);
	EXPECT_EQ(log, (std::vector<std::string>{"add:C:reg-e0", "add:C:reg-e1"}));
	EXPECT_EQ(register_client(&c), -EEXIST);
	EXPECT_EQ(log.size(), 2u);

	log.clear();
	unregister_client(&c); // remove for every device, registration order
	EXPECT_EQ(log,
	          (std::vector<std::string>{"remove:C:reg-e0+listed", "remove:C:reg-e1+listed"}));
	log.clear();
	unregister_client(&c); // not registered: nothing
	unregister_device(&d0);
	unregister_device(&d1);
	unregister_device(&d1);
	EXPECT_TRUE(log.empty());
	EXPECT_EQ(find_device("reg-e0"), nullptr);
}

TEST(Registry, ClientWithoutCallbacks)
{
	Client c;
	c.name = "silent";
	TestDevice d("reg-f0");
	register_device(&d);
	EXPECT_EQ(register_client(&c), 0);
	unregister_device(&d);
	unregister_client(&c);
	EXPECT_EQ(register_client(nullptr), -EINVAL);
}

TEST(RegistryDeathTest, RegisteringFromACallbackAborts)
{
	GTEST_FLAG_SET(death_test_style, "threadsafe");
	EXPECT_DEATH(
	    {
		    Client inner;
		    inner.name = "inner";
		    Client outer;
		    outer.name = "outer";
		    outer.add = [&](Device &) { register_client(&inner); };
		    TestDevice d("reg-g0");
		    register_device(&d);
		    register_client(&outer);
	    },
	    "called from a registry client callback");
}

struct TestProvider : Provider {
	const char *name() const override { return "test-prov"; }
	std::unique_ptr<CmId> create_id(CmHandler, void *) override { return nullptr; }
};

TEST(Registry, Providers)
{
	TestProvider p;
	EXPECT_EQ(find_provider("test-prov"), nullptr);
	register_provider(&p);
	register_provider(&p);
	EXPECT_EQ(find_provider("test-prov"), &p);
	EXPECT_EQ(find_provider("nope"), nullptr);
	unregister_provider(&p);
	EXPECT_EQ(find_provider("test-prov"), nullptr);
}

} // namespace
} // namespace ulp
