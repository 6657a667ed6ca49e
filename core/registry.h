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
	virtual const char *name() const = 0;
	// A CM id on this provider's fabric (rdma_create_id).
	virtual std::unique_ptr<CmId> create_id(CmHandler handler, void *context) = 0;
	// The caller, the last user of dev in this process (rdma_conn's portals), holds nothing
	// on it any more. A device that went away (DEVICE_REMOVAL) is closed now, so that the
	// kernel's removal can complete: rdma_rxe and every driver without disassociate make
	// `rdma link del` wait until each process has closed its verbs context. A live device
	// stays open. dev stays a valid object (it is never freed before the provider).
	virtual void device_released(Device &dev) { (void)dev; }
};

struct Client {
	std::string name;
	std::function<void(Device &)> add;    // device appeared (or present at registration)
	std::function<void(Device &)> remove; // device leaving, or client unregistering
};

void register_provider(Provider *p);
void unregister_provider(Provider *p);
Provider *find_provider(const std::string &name);

// For providers: announce a device after it is fully usable, withdraw it before teardown.
void register_device(Device *dev);
void unregister_device(Device *dev);

int register_client(Client *c);
void unregister_client(Client *c);

std::vector<Device *> devices();
Device *find_device(const std::string &name);

} // namespace ulp
