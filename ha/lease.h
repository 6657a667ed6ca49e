// SPDX-License-Identifier: MIT
// ha/lease.h - ownership of a group of LUs by one gateway: an exclusive RADOS lock with a
// duration (cls_lock), renewed by its holder, taken over by a successor only after the
// holder is fenced.
//
// The lock's duration is the lease: the OSD forgets a lock its holder has not renewed
// within it, and another gateway's lock then succeeds. Expiry alone proves nothing about
// the old holder, though: a gateway that froze (SIGSTOP, a stalled VM, a partition) can wake
// up and complete writes it had queued, long after its lease ran out. So a successor fences
// first: it blocklists the holder's RADOS client (the client its LUs write through as well:
// scsi/rados_client.h), waits until its own client has the OSD map that carries the entry -
// from that epoch on, every OSD refuses the old client (-EBLOCKLISTED) - and only then breaks
// and takes the lock. That is what take_over() does, in that order.
//
// The holder's side: acquire() and renew() tell it until when it may act as the owner
// (valid_until): the time the request was sent plus the duration, a bound the OSD's own
// expiry - counted from when it applied the request, later - cannot undercut, clock rates
// being equal. A holder that cannot renew before then must stop answering GOOD for what it
// owns (Transitioning, then Unavailable): the successor may already be fencing it.
#pragma once

#include "scsi/rados_client.h"

#include <chrono>
#include <memory>
#include <string>

namespace ulp::ha
{

// Who holds a lease, as the OSD records it.
struct LeaseHolder {
	std::string client; // the holder's RADOS client ("client.4181")
	std::string cookie; // the holder's own name for its lock (the gateway's id)
	std::string addr;   // the client's address and nonce, what the blocklist takes
};

// Not thread-safe: one thread - the group's ownership loop - uses a lease.
class Lease
{
public:
	using Clock = std::chrono::steady_clock;

	// The lease oid/"ulp.lease" in pool (namespace nspace) through client, held under the
	// name cookie (unique per gateway) for duration at a time. nullptr with *err and *why
	// when the pool cannot be opened or the arguments are out of range (duration 1 s to
	// 1 h; cookie not empty).
	static std::unique_ptr<Lease> open(std::shared_ptr<scsi::RadosClient> client,
	                                   const std::string &pool, const std::string &nspace,
	                                   const std::string &oid, const std::string &cookie,
	                                   std::chrono::seconds duration, int *err,
	                                   std::string *why);
	~Lease(); // does not release: a process that ends holding a lease lets it expire
	Lease(const Lease &) = delete;
	Lease &operator=(const Lease &) = delete;

	// Take the lease if nobody holds it (or it expired): 0 held, valid_until() set; -EBUSY
	// another holds it; -EBLOCKLISTED (-ESHUTDOWN) this client is fenced; another negative
	// errno from RADOS.
	int acquire();
	// Extend a lease we hold: 0, valid_until() moved; -ENOENT we no longer hold it (it
	// expired and perhaps another took it: we are no longer the owner); as acquire().
	int renew();
	// Give it up (a planned move): 0, or -ENOENT when it was not ours any more.
	int release();
	// Who holds it now: 0; -ENOENT nobody (or only an expired holder).
	int holder(LeaseHolder *out);
	// Fence holder h and take the lease: blocklist h.addr (for blocklist_s seconds; 0: the
	// cluster's default, an hour), wait for the OSD map that carries the entry, break h's
	// lock, acquire. 0 held; -EBUSY a third gateway came first; -EINVAL h is this client
	// itself (never fence ourselves); another negative errno. Blocks for up to the client's
	// timeout per step, with a log line for each.
	int take_over(const LeaseHolder &h, uint32_t blocklist_s);
	// take_over's first half: blocklist h.addr and wait for the OSD map that carries the
	// entry; what a gateway does whose lease a holder lost by expiry, not by a break. 0;
	// -EINVAL h is this client; another negative errno.
	int fence(const LeaseHolder &h, uint32_t blocklist_s);

	// Until when the holder may act as the owner (see above); Clock::time_point() when it
	// holds nothing.
	Clock::time_point valid_until() const { return valid_until_; }
	bool held(Clock::time_point now = Clock::now()) const { return now < valid_until_; }
	const std::string &oid() const { return oid_; }
	rados_t cluster() const { return client_->cluster; }
	const std::string &cookie() const { return cookie_; }
	std::chrono::seconds duration() const { return duration_; }

	static constexpr const char *kLockName = "ulp.lease"; // the cls_lock name

private:
	Lease(std::shared_ptr<scsi::RadosClient> client, rados_ioctx_t io, std::string oid,
	      std::string cookie, std::chrono::seconds duration);
	int lock(uint8_t flags);

	std::shared_ptr<scsi::RadosClient> client_; // the group's client (fenced as a whole)
	rados_ioctx_t io_ = nullptr;                // the pool and namespace; owned
	const std::string oid_;                     // the lease object
	const std::string cookie_;                  // this gateway's name for its lock
	const std::chrono::seconds duration_;       // the lock's duration, each (re)new
	Clock::time_point valid_until_{};           // see valid_until()
};

} // namespace ulp::ha
