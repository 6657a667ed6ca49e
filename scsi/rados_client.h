// SPDX-License-Identifier: MIT
// scsi/rados_client.h - one RADOS client (a connection as client.ID) per group, shared by
// everything of the group that talks to the cluster: the rbd backstores of its LUs and,
// above them, the gateway's lease on the group (ha/lease.h).
//
// The client is the unit Ceph fences: a blocklist entry names its address and nonce, and
// from then on every operation of that client fails -EBLOCKLISTED - its LUs' writes and its
// lease renewals alike. That is why a group's I/O and its ownership must go through one
// client: a gateway whose lease was taken over must not still write through another.
#pragma once

#include <rados/librados.h>

#include <cstdint>
#include <memory>
#include <string>

namespace ulp::scsi
{

// Where and as whom to connect.
struct RadosConfig {
	std::string conf;          // ceph.conf ("": librados' own search: $CEPH_CONF, /etc/ceph)
	std::string client;        // the client id, without "client." ("": admin)
	std::string keyring;       // the keyring file ("": what ceph.conf names)
	std::string group;         // clients are shared per group ("": "default")
	uint32_t timeout_s = 30;   // seconds: connecting (client_mount_timeout), each monitor and
	                           // OSD operation (rados_mon/osd_op_timeout) before -ETIMEDOUT
	bool managed_lock = false; // RbdConfig::managed_lock, for every image of the client
};

// A connected client. Lives while anything of its group holds it.
struct RadosClient {
	rados_t cluster = nullptr; // connected; owned
	std::string conf;          // what it was made with: another user of the group must agree
	std::string client;        // the client id
	std::string keyring;       // the keyring path
	std::string group;         // its group
	bool managed_lock = false; // images' exclusive locks move only on request
	~RadosClient();
};

// The group's client, connected on first use (blocking for up to timeout_s, with a log line
// first); nullptr with *err (negative errno) and *why when it cannot be had, or when the
// group is connected already with another conf, client or keyring. Thread-safe.
std::shared_ptr<RadosClient> rados_client_get(const RadosConfig &cfg, int *err, std::string *why);

// The client's address as the blocklist takes it ("127.0.0.1:0/3519227890"); "" on error.
std::string rados_client_addr(rados_t cluster);
// The nonce of an address in any of Ceph's forms ("127.0.0.1:0/1", "v2:127.0.0.1:0/1",
// "[v2:127.0.0.1:0/1,v1:...]"): what tells one client instance from another on one host;
// "" when it has none.
std::string rados_addr_nonce(const std::string &addr);

// strerror of a negative or positive errno; -EBLOCKLISTED (-ESHUTDOWN) named as Ceph means it.
std::string rados_strerror(int e);

} // namespace ulp::scsi
