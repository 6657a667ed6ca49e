// SPDX-License-Identifier: MIT
// ha/lease.cc - a lease on a group of LUs (lease.h).
#include "ha/lease.h"

#include "core/log.h"

#include <sys/time.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

namespace ulp::ha
{

namespace
{

// The entity address the blocklist takes: without the "v1:"/"v2:" type and brackets.
std::string blocklist_form(const std::string &addr)
{
	std::string a = addr;
	if (!a.empty() && a.front() == '[') {
		size_t comma = a.find_first_of(",]");
		a = a.substr(1, comma == std::string::npos ? std::string::npos : comma - 1);
	}
	if (a.rfind("v1:", 0) == 0 || a.rfind("v2:", 0) == 0 || a.rfind("any:", 0) == 0)
		a = a.substr(a.find(':') + 1);
	return a;
}

} // namespace

Lease::Lease(std::shared_ptr<scsi::RadosClient> client, rados_ioctx_t io, std::string oid,
             std::string cookie, std::chrono::seconds duration)
    : client_(std::move(client)), io_(io), oid_(std::move(oid)), cookie_(std::move(cookie)),
      duration_(duration)
{
}

std::unique_ptr<Lease> Lease::open(std::shared_ptr<scsi::RadosClient> client,
                                   const std::string &pool, const std::string &nspace,
                                   const std::string &oid, const std::string &cookie,
                                   std::chrono::seconds duration, int *err, std::string *why)
{
	if (cookie.empty() || oid.empty() || duration < std::chrono::seconds(1) ||
	    duration > std::chrono::hours(1)) {
		*err = -EINVAL;
		*why = "lease " + oid +
		       ": needs an object, a holder name and a duration of 1 s to "
		       "1 h (got " +
		       std::to_string(duration.count()) + " s)";
		return nullptr;
	}
	rados_ioctx_t io = nullptr;
	int r = rados_ioctx_create(client->cluster, pool.c_str(), &io);
	if (r < 0) {
		*err = r;
		*why = "lease " + oid + ": pool '" + pool + "': " +
		       (r == -ENOENT ? std::string("no such pool") : scsi::rados_strerror(r));
		return nullptr;
	}
	rados_ioctx_set_namespace(io, nspace.empty() ? nullptr : nspace.c_str());
	return std::unique_ptr<Lease>(new Lease(std::move(client), io, oid, cookie, duration));
}

Lease::~Lease()
{
	rados_ioctx_destroy(io_);
}

int Lease::lock(uint8_t flags)
{
	timeval d{};
	d.tv_sec = duration_.count();
	const auto sent = Clock::now();
	int r = rados_lock_exclusive(io_, oid_.c_str(), kLockName, cookie_.c_str(),
	                             "ulp-targetd group owner", &d, flags);
	if (r == -EEXIST && !(flags & LIBRADOS_LOCK_FLAG_MUST_RENEW))
		r = -EBUSY; // ours under another flag set: cannot happen with one cookie per
		            // gateway
	// Only a definite loss clears the bound: after a timeout the lock may still be ours on
	// the OSD until the bound the last success gave, and the owner's self-fencing counts
	// on that bound.
	if (r == 0)
		valid_until_ = sent + duration_;
	else if (r == -ENOENT || r == -ESHUTDOWN)
		valid_until_ = {};
	return r;
}

int Lease::acquire()
{
	// MAY_RENEW: a lease this client already holds under our cookie is extended, not -EEXIST.
	int r = lock(LIBRADOS_LOCK_FLAG_MAY_RENEW);
	if (r < 0 && r != -EBUSY)
		ULP_LOG_RATELIMITED(Warn, Ha, "lease {}: acquiring as {}: {}", oid_, cookie_,
		                    scsi::rados_strerror(r));
	return r;
}

int Lease::renew()
{
	int r = lock(LIBRADOS_LOCK_FLAG_MUST_RENEW);
	if (r == -ENOENT || r == -EBUSY) {
		valid_until_ = {};
		ULP_LOG(Warn, Ha, "lease {}: no longer held by {} (it expired; another may own it)",
		        oid_, cookie_);
		return -ENOENT;
	}
	if (r < 0)
		ULP_LOG_RATELIMITED(Warn, Ha, "lease {}: renewing as {}: {}", oid_, cookie_,
		                    scsi::rados_strerror(r));
	return r;
}

int Lease::release()
{
	valid_until_ = {};
	return rados_unlock(io_, oid_.c_str(), kLockName, cookie_.c_str());
}

int Lease::holder(LeaseHolder *out)
{
	std::vector<char> tag(64), clients(256), cookies(256), addrs(256);
	for (int tries = 0; tries < 4; tries++) {
		size_t tl = tag.size(), cl = clients.size(), kl = cookies.size(), al = addrs.size();
		int exclusive = 0;
		ssize_t n =
		    rados_list_lockers(io_, oid_.c_str(), kLockName, &exclusive, tag.data(), &tl,
		                       clients.data(), &cl, cookies.data(), &kl, addrs.data(), &al);
		if (n == -ERANGE) {
			tag.resize(std::max(tl, tag.size()));
			clients.resize(std::max(cl, clients.size()));
			cookies.resize(std::max(kl, cookies.size()));
			addrs.resize(std::max(al, addrs.size()));
			continue;
		}
		if (n < 0)
			return static_cast<int>(n);
		if (n == 0)
			return -ENOENT;
		// The first entry of each '\0'-separated list: an exclusive lock has one holder.
		auto first = [](const std::vector<char> &b, size_t len) {
			return std::string(b.data(), strnlen(b.data(), std::min(len, b.size())));
		};
		out->client = first(clients, cl);
		out->cookie = first(cookies, kl);
		out->addr = first(addrs, al);
		return 0;
	}
	return -ERANGE;
}

int Lease::fence(const LeaseHolder &h, uint32_t blocklist_s)
{
	const std::string own = scsi::rados_client_addr(client_->cluster);
	const std::string victim = blocklist_form(h.addr);
	if (h.addr.empty() || scsi::rados_addr_nonce(h.addr).empty() ||
	    scsi::rados_addr_nonce(h.addr) == scsi::rados_addr_nonce(own)) {
		ULP_LOG(Error, Ha, "lease {}: not fencing '{}' ({}): {}", oid_, h.addr, h.client,
		        h.addr.empty() ? "no address" : "that is this client");
		return -EINVAL;
	}
	const std::string who = (h.cookie.empty() ? std::string("the previous owner") : h.cookie) +
	                        (h.client.empty() ? "" : " (" + h.client + ")");
	ULP_LOG(Warn, Ha,
	        "lease {}: fencing {} at {}: blocklisting its client (each step bounded by the "
	        "client's rados_mon_op_timeout/rados_osd_op_timeout)",
	        oid_, who, victim);
	std::string a = victim;
	int r = rados_blocklist_add(client_->cluster, a.data(), blocklist_s);
	if (r < 0) {
		ULP_LOG(Error, Ha, "lease {}: blocklisting {}: {}", oid_, victim,
		        scsi::rados_strerror(r));
		return r;
	}
	// The entry is in the OSD map of some epoch; the OSDs refuse the old client once they
	// have that map, and they fetch it no later than our own first operation that carries
	// the epoch. Waiting for the latest map here is what makes our next operation carry it.
	r = rados_wait_for_latest_osdmap(client_->cluster);
	if (r < 0)
		ULP_LOG(Error, Ha, "lease {}: waiting for the OSD map with {} blocklisted: {}",
		        oid_, victim, scsi::rados_strerror(r));
	return r;
}

int Lease::take_over(const LeaseHolder &h, uint32_t blocklist_s)
{
	int r = fence(h, blocklist_s);
	if (r < 0)
		return r;
	const std::string victim = blocklist_form(h.addr);
	r = rados_break_lock(io_, oid_.c_str(), kLockName, h.client.c_str(), h.cookie.c_str());
	if (r < 0 && r != -ENOENT) {
		ULP_LOG(Error, Ha, "lease {}: breaking {}'s lock: {}", oid_, h.client,
		        scsi::rados_strerror(r));
		return r;
	}
	r = acquire();
	if (r == 0)
		ULP_LOG(Warn, Ha, "lease {}: taken over from {} ({} blocklisted)", oid_, h.cookie,
		        victim);
	return r;
}

} // namespace ulp::ha
