// SPDX-License-Identifier: MIT
// core/registry.cc - providers, devices and clients (drivers/infiniband/core/device.c).
//
// Two locks, as the kernel has devices_rwsem/clients_rwsem and a per-client unregister
// path:
//   - state.lock protects the three lists and is held only to read or change them, so
//     devices() and find_device() work from inside a callback;
//   - state.cb_lock serialises every operation that runs callbacks, end to end. A
//     client therefore sees add(dev) before remove(dev), never two callbacks at once,
//     and never a device that another thread is halfway through announcing.
// Callbacks run with cb_lock held and state.lock released. A callback that calls back
// into register_*/unregister_* would deadlock on cb_lock; that is detected and aborts
// with a message instead of hanging.
//
// Ordering (the kernel's): clients see devices in registration order; when a device
// goes away, clients' remove() runs in reverse registration order (LIFO, so a client
// registered later, which may build on an earlier one, lets go first); when a client
// unregisters, its remove() runs for each device in registration order.
#include "core/registry.h"

#include "core/check.h"
#include "core/log.h"

#include <algorithm>
#include <cerrno>
#include <mutex>

namespace ulp
{

namespace
{

struct State {
	std::mutex lock;                   // protects the vectors below; never held in callbacks
	std::vector<Provider *> providers; // registration order
	std::vector<Device *> devices;     // registration order
	std::vector<Client *> clients;     // registration order
	std::mutex cb_lock;                // serialises operations that run callbacks
};

State &state()
{
	static State s;
	return s;
}

thread_local bool t_in_callback = false;

// Held for the whole of an operation that runs callbacks.
class CallbackSection
{
public:
	explicit CallbackSection(const char *op) : g_(lock(op)) {}

	// Run one client callback with the reentrancy guard set.
	static void run(const std::function<void(Device &)> &fn, Device &dev)
	{
		if (!fn)
			return;
		t_in_callback = true;
		fn(dev);
		t_in_callback = false;
	}

private:
	static std::unique_lock<std::mutex> lock(const char *op)
	{
		ULP_CHECK(!t_in_callback, "{} called from a registry client callback", op);
		return std::unique_lock(state().cb_lock);
	}
	std::unique_lock<std::mutex> g_;
};

} // namespace

void register_provider(Provider *p)
{
	if (!p)
		return;
	State &s = state();
	std::lock_guard g(s.lock);
	if (std::find(s.providers.begin(), s.providers.end(), p) == s.providers.end())
		s.providers.push_back(p);
}

void unregister_provider(Provider *p)
{
	State &s = state();
	std::lock_guard g(s.lock);
	std::erase(s.providers, p);
}

Provider *find_provider(const std::string &name)
{
	State &s = state();
	std::lock_guard g(s.lock);
	for (Provider *p : s.providers)
		if (name == p->name())
			return p;
	return nullptr;
}

void register_device(Device *dev)
{
	if (!dev)
		return;
	State &s = state();
	CallbackSection cs("register_device");
	std::vector<Client *> clients;
	{
		std::lock_guard g(s.lock);
		if (std::find(s.devices.begin(), s.devices.end(), dev) != s.devices.end())
			return;
		// Visible to devices() before the clients hear of it, as in the kernel.
		s.devices.push_back(dev);
		clients = s.clients;
	}
	for (Client *c : clients)
		CallbackSection::run(c->add, *dev);
}

void unregister_device(Device *dev)
{
	State &s = state();
	CallbackSection cs("unregister_device");
	std::vector<Client *> clients;
	{
		std::lock_guard g(s.lock);
		auto it = std::find(s.devices.begin(), s.devices.end(), dev);
		if (it == s.devices.end())
			return;
		// Gone from devices() first: nobody new should pick it up while clients let go.
		s.devices.erase(it);
		clients = s.clients;
	}
	for (auto it = clients.rbegin(); it != clients.rend(); ++it)
		CallbackSection::run((*it)->remove, *dev);
}

int register_client(Client *c)
{
	if (!c)
		return -EINVAL;
	State &s = state();
	CallbackSection cs("register_client");
	std::vector<Device *> devs;
	{
		std::lock_guard g(s.lock);
		if (std::find(s.clients.begin(), s.clients.end(), c) != s.clients.end())
			return -EEXIST;
		s.clients.push_back(c);
		devs = s.devices;
	}
	for (Device *d : devs)
		CallbackSection::run(c->add, *d);
	return 0;
}

void unregister_client(Client *c)
{
	State &s = state();
	CallbackSection cs("unregister_client");
	std::vector<Device *> devs;
	{
		std::lock_guard g(s.lock);
		auto it = std::find(s.clients.begin(), s.clients.end(), c);
		if (it == s.clients.end())
			return;
		s.clients.erase(it);
		devs = s.devices;
	}
	for (Device *d : devs)
		CallbackSection::run(c->remove, *d);
}

std::vector<Device *> devices()
{
	State &s = state();
	std::lock_guard g(s.lock);
	return s.devices;
}

Device *find_device(const std::string &name)
{
	State &s = state();
	std::lock_guard g(s.lock);
	for (Device *d : s.devices)
		if (d->name() == name)
			return d;
	return nullptr;
}

} // namespace ulp
