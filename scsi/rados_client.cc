// SPDX-License-Identifier: MIT
// scsi/rados_client.cc - the per-group RADOS client registry (rados_client.h).
#include "scsi/rados_client.h"

#include "core/log.h"

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

namespace ulp::scsi
{

namespace
{

std::mutex g_clients_lock;                                   // guards g_clients
std::map<std::string, std::weak_ptr<RadosClient>> g_clients; // group -> its client

int conf_set(rados_t c, const char *k, const std::string &v, std::string *why)
{
	int r = rados_conf_set(c, k, v.c_str());
	if (r < 0)
		*why = std::string("rados: setting ") + k + "=" + v + ": " + rados_strerror(r);
	return r;
}

} // namespace

RadosClient::~RadosClient()
{
	if (cluster)
		rados_shutdown(cluster);
}

std::string rados_strerror(int e)
{
	if (e == -ESHUTDOWN || e == ESHUTDOWN)
		return "blocklisted (EBLOCKLISTED): another gateway fenced this client";
	return std::strerror(e < 0 ? -e : e);
}

std::string rados_client_addr(rados_t cluster)
{
	char *addrs = nullptr;
	std::string a;
	if (rados_getaddrs(cluster, &addrs) == 0 && addrs) {
		a = addrs;
		std::free(addrs);
	}
	return a;
}

std::string rados_addr_nonce(const std::string &addr)
{
	const size_t slash = addr.rfind('/');
	if (slash == std::string::npos)
		return {};
	const size_t end = addr.find_first_of(",]", slash);
	return addr.substr(slash + 1, end == std::string::npos ? end : end - slash - 1);
}

std::shared_ptr<RadosClient> rados_client_get(const RadosConfig &cfg, int *err, std::string *why)
{
	const std::string group = cfg.group.empty() ? "default" : cfg.group;
	const std::string id = cfg.client.empty() ? "admin" : cfg.client;
	std::lock_guard g(g_clients_lock);
	if (auto c = g_clients[group].lock()) {
		if (c->conf != cfg.conf || c->client != id || c->keyring != cfg.keyring ||
		    c->managed_lock != cfg.managed_lock) {
			*err = -EINVAL;
			*why = "rados: group " + group + " is already connected as client." +
			       c->client + " (conf '" + c->conf + "', keyring '" + c->keyring +
			       "', managed_lock " + (c->managed_lock ? "on" : "off") +
			       "); everything of the group must use the same client, conf, keyring "
			       "and "
			       "lock mode";
			return nullptr;
		}
		return c;
	}
	auto c = std::make_shared<RadosClient>();
	c->conf = cfg.conf;
	c->client = id;
	c->keyring = cfg.keyring;
	c->group = group;
	c->managed_lock = cfg.managed_lock;
	int r = rados_create(&c->cluster, id.c_str());
	if (r < 0) {
		c->cluster = nullptr;
		*err = r;
		*why = "rados: rados_create(client." + id + "): " + rados_strerror(r);
		return nullptr;
	}
	r = rados_conf_read_file(c->cluster, cfg.conf.empty() ? nullptr : cfg.conf.c_str());
	if (r < 0) {
		*err = r;
		*why = "rados: reading ceph.conf '" +
		       (cfg.conf.empty() ? "(default search)" : cfg.conf) +
		       "': " + rados_strerror(r);
		return nullptr;
	}
	const std::string t = std::to_string(cfg.timeout_s);
	if ((!cfg.keyring.empty() && (r = conf_set(c->cluster, "keyring", cfg.keyring, why)) < 0) ||
	    // librbd acknowledges cached writes before the OSDs hold them, and two gateways
	    // must never both cache one image: off for every user of the client.
	    (r = conf_set(c->cluster, "rbd_cache", "false", why)) < 0 ||
	    // A writesame of a zero block as what it says, never a discard that may skip
	    // partial objects (the core sends zeros as WriteZeroes anyway).
	    (r = conf_set(c->cluster, "rbd_discard_on_zeroed_write_same", "false", why)) < 0 ||
	    (r = conf_set(c->cluster, "client_mount_timeout", t, why)) < 0 ||
	    (r = conf_set(c->cluster, "rados_mon_op_timeout", t, why)) < 0 ||
	    (r = conf_set(c->cluster, "rados_osd_op_timeout", t, why)) < 0 ||
	    (cfg.managed_lock &&
	     (r = conf_set(c->cluster, "rbd_auto_exclusive_lock_until_manual_request", "false",
	                   why)) < 0)) {
		*err = r;
		return nullptr;
	}
	ULP_LOG(
	    Info, Scsi,
	    "rados: connecting to the Ceph cluster as client.{} (group {}, conf {}; up to {} s)",
	    id, group, cfg.conf.empty() ? "default" : cfg.conf, cfg.timeout_s);
	const auto t0 = std::chrono::steady_clock::now();
	r = rados_connect(c->cluster);
	const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
	                    std::chrono::steady_clock::now() - t0)
	                    .count();
	if (r < 0) {
		*err = r;
		*why =
		    "rados: cannot connect to the Ceph cluster as client." + id + " after " +
		    std::to_string(ms) + " ms: " + rados_strerror(r) +
		    (r == -ETIMEDOUT ? " (no monitor answered: is the cluster up, mon_host right?)"
		                     : "");
		return nullptr;
	}
	ULP_LOG(Info, Scsi, "rados: connected as client.{} in {} ms (instance {})", id, ms,
	        rados_get_instance_id(c->cluster));
	g_clients[group] = c;
	return c;
}

} // namespace ulp::scsi
