// SPDX-License-Identifier: MIT
// core/registry.h - providers, the device registry and its clients (ib_register_client).
//
// Providers register their devices; ULPs register a Client whose add() runs for every
// device present and every device that appears later, and whose remove() runs before a
// device goes away (or when the client unregisters). Callbacks run without the registry
// lock held, one at a time.
#pragma once

#include "core/cm.h"
#include "core/device.h"

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace ulp
{

// A transport family: the soft provider, rdma-core. Owns its devices.
class Provider
{
public:
	virtual ~Provider() = default;
	virtual const char *name() const = 0; // "soft", "verbs": what find_provider takes
	// A CM id on this provider's fabric (rdma_create_id).
	virtual std::unique_ptr<CmId> create_id(CmHandler handler, void *context) = 0;
	// The caller, the last user of dev in this process (rdma_conn's portals), holds nothing
	// on it any more. A device that went away (DEVICE_REMOVAL) is closed now, so that the
	// kernel's removal can complete: rdma_rxe and every driver without disassociate make
	// `rdma link del` wait until each process has closed its verbs context. A live device
	// stays open. dev stays a valid object (it is never freed before the provider).
	virtual void device_released(Device &dev) { (void)dev; }
};

// A ULP's interest in devices (ib_client): told of every device, present and future.
struct Client {
	std::string name;                     // for log lines
	std::function<void(Device &)> add;    // device appeared (or present at registration)
	std::function<void(Device &)> remove; // device leaving, or client unregistering
};

// Make a provider findable by name (providers do it for themselves; twice is harmless).
void register_provider(Provider *p);
// Forget a provider (its devices are the provider's to withdraw first).
void unregister_provider(Provider *p);
// The registered provider called name ("soft", "verbs"), or nullptr.
Provider *find_provider(const std::string &name);

// For providers: announce a device after it is fully usable, withdraw it before teardown.
void register_device(Device *dev);
// Runs every client's remove(dev) first; dev is out of devices() before that.
void unregister_device(Device *dev);

// Add c; its add() runs for every device present before this returns. 0, -EINVAL (null)
// or -EEXIST (already registered).
int register_client(Client *c);
// Remove c; its remove() runs for every device present before this returns.
void unregister_client(Client *c);

// Every registered device now (a copy: devices may go away after it is taken).
std::vector<Device *> devices();
// The registered device called name ("soft0", "rxe0"), or nullptr.
Device *find_device(const std::string &name);

} // namespace ulp
