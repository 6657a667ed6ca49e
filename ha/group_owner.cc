// SPDX-License-Identifier: MIT
// ha/group_owner.cc - this gateway's side of a group's ownership (group_owner.h).
#include "ha/group_owner.h"

#include "core/log.h"

#include <algorithm>
#include <cerrno>

namespace ulp::ha
{

namespace
{

constexpr StateTable<OwnerState, 5> kOwnerStates = {
    "group owner",
    owner_state_str,
    {
        /* Standby */ to(OwnerState::Fencing, OwnerState::Fenced),
        /* Fencing */ to(OwnerState::Active, OwnerState::Standby, OwnerState::Fenced),
        /* Active */ to(OwnerState::Expiring, OwnerState::Fenced, OwnerState::Standby),
        /* Expiring */ to(OwnerState::Active, OwnerState::Fenced),
        /* Fenced */ 0,
    }};

} // namespace

const char *owner_state_str(OwnerState s)
{
	switch (s) {
	case OwnerState::Standby:
		return "standby";
	case OwnerState::Fencing:
		return "fencing";
	case OwnerState::Active:
		return "active";
	case OwnerState::Expiring:
		return "expiring";
	case OwnerState::Fenced:
		return "fenced";
	}
	return "?";
}

PortAccess port_access(OwnerState s)
{
	switch (s) {
	case OwnerState::Active:
		return PortAccess::ActiveOptimized;
	case OwnerState::Standby:
		return PortAccess::Standby;
	case OwnerState::Fencing:
	case OwnerState::Expiring:
		return PortAccess::Transitioning;
	case OwnerState::Fenced:
		return PortAccess::Unavailable;
	}
	return PortAccess::Unavailable;
}

const char *port_access_str(PortAccess a)
{
	switch (a) {
	case PortAccess::ActiveOptimized:
		return "active/optimized";
	case PortAccess::Standby:
		return "standby";
	case PortAccess::Transitioning:
		return "transitioning";
	case PortAccess::Unavailable:
		return "unavailable";
	}
	return "?";
}

GroupOwner::GroupOwner(GroupOwnerConfig cfg, std::unique_ptr<ClusterMap> map,
                       std::unique_ptr<Lease> lease)
    : cfg_(std::move(cfg)), map_(std::move(map)), lease_(std::move(lease))
{
	ULP_CHECK(map_ && lease_, "group {}: a map and a lease", cfg_.group);
}

void GroupOwner::set_state(OwnerState s)
{
	if (s == state_)
		return;
	const OwnerState was = state_;
	change_state(&state_, s, kOwnerStates, this);
	if (s == OwnerState::Active || s == OwnerState::Standby)
		ULP_LOG(Info, Ha, "group {}: {} -> {} (ports {})", cfg_.group, owner_state_str(was),
		        owner_state_str(s), port_access_str(port_access(s)));
	else
		ULP_LOG(Warn, Ha, "group {}: {} -> {} (ports {})", cfg_.group, owner_state_str(was),
		        owner_state_str(s), port_access_str(port_access(s)));
}

void GroupOwner::read_owner()
{
	ClusterMapView v;
	if (int r = map_->read(&v); r < 0) {
		ULP_LOG_RATELIMITED(Warn, Ha, "group {}: reading the cluster map: {}", cfg_.group,
		                    scsi::rados_strerror(r));
		return;
	}
	auto it = v.records.find(owner_key(cfg_.group));
	if (it == v.records.end()) {
		owner_ = OwnerRecord{};
		return;
	}
	OwnerRecord rec;
	if (!owner_record_decode(it->second, &rec)) {
		ULP_LOG_RATELIMITED(Error, Ha, "group {}: the owner record in {} is damaged",
		                    cfg_.group, map_->oid());
		return;
	}
	owner_ = rec;
}

int GroupOwner::fence_previous(const OwnerRecord &prev)
{
	LeaseHolder h;
	h.addr = prev.addr;
	// The lease is ours already (the holder's lock expired or was released): take_over
	// would break nobody's lock; what it adds is the blocklist and the OSD map wait.
	ULP_LOG(Warn, Ha, "group {}: the previous owner {} ({}) did not release it: fencing it",
	        cfg_.group, prev.gw, prev.addr);
	return lease_->fence(h, cfg_.blocklist_s);
}

int GroupOwner::write_record(bool released)
{
	const std::string own = scsi::rados_client_addr(lease_->cluster());
	OwnerRecord mine;
	uint64_t now = 0;
	int r = map_->modify(
	    [&](const ClusterMapView &v, ClusterMapChange *c) {
		    OwnerRecord cur;
		    auto it = v.records.find(owner_key(cfg_.group));
		    uint64_t epoch = 0;
		    if (it != v.records.end() && owner_record_decode(it->second, &cur))
			    epoch = cur.epoch;
		    mine.gw = cfg_.gateway;
		    mine.addr = own;
		    mine.released = released;
		    // A new owner counts one more; the same owner releasing keeps its epoch.
		    mine.epoch =
		        released && cur.gw == cfg_.gateway && cur.addr == own ? epoch : epoch + 1;
		    c->set[owner_key(cfg_.group)] = owner_record_encode(mine);
		    return true;
	    },
	    &now);
	if (r == 0)
		owner_ = mine;
	else
		ULP_LOG(Warn, Ha, "group {}: writing the owner record: {}", cfg_.group,
		        scsi::rados_strerror(r));
	return r;
}

void GroupOwner::try_acquire()
{
	int r = lease_->acquire();
	if (r == -EBUSY) {
		read_owner();
		return;
	}
	if (r == -ESHUTDOWN) {
		set_state(OwnerState::Fenced);
		return;
	}
	if (r < 0)
		return; // logged by the lease; the next tick tries again
	set_state(OwnerState::Fencing);
	read_owner();
	const OwnerRecord prev = owner_;
	const std::string own = scsi::rados_client_addr(lease_->cluster());
	auto back_off = [&](const char *why, int err) {
		ULP_LOG(Warn, Ha, "group {}: not taking it over: {}: {}", cfg_.group, why,
		        scsi::rados_strerror(err));
		lease_->release();
		set_state(err == -ESHUTDOWN ? OwnerState::Fenced : OwnerState::Standby);
	};
	if (!prev.gw.empty() && !prev.released && prev.addr != own) {
		if ((r = fence_previous(prev)) < 0)
			return back_off("fencing the previous owner", r);
	}
	// Fencing may have taken a while: the lease must still have its margin.
	if (Clock::now() + cfg_.margin >= lease_->valid_until() && (r = lease_->renew()) < 0)
		return back_off("renewing the lease", r);
	if ((r = write_record(false)) < 0)
		return back_off("writing the owner record", r);
	if (cfg_.on_active && (r = cfg_.on_active()) < 0) {
		write_record(true);
		return back_off("taking the group's locks", r);
	}
	set_state(OwnerState::Active);
}

void GroupOwner::renew(Clock::time_point now)
{
	int r = lease_->renew();
	if (r == 0) {
		if (state_ == OwnerState::Expiring)
			set_state(OwnerState::Active);
		return;
	}
	// The failed call may have taken up to the client's op timeout (a cluster cut off):
	// judge the lease by the time it returned, not by the tick's start, or an owner whose
	// lease ran out meanwhile would stay Active.
	now = std::max(now, Clock::now());
	if (r == -ENOENT || r == -ESHUTDOWN || now >= lease_->valid_until()) {
		ULP_LOG(Error, Ha,
		        "group {}: the lease is lost ({}): no more GOOD for its LUs here",
		        cfg_.group, r == -ENOENT ? "expired or taken" : scsi::rados_strerror(r));
		set_state(OwnerState::Fenced);
		return;
	}
	if (lease_->valid_until() - now < cfg_.margin && state_ == OwnerState::Active)
		set_state(OwnerState::Expiring);
}

void GroupOwner::tick(Clock::time_point now)
{
	switch (state_) {
	case OwnerState::Standby:
		if (now < hold_off_) {
			read_owner();
			return;
		}
		try_acquire();
		return;
	case OwnerState::Active:
	case OwnerState::Expiring:
		renew(now);
		return;
	case OwnerState::Fencing: // passes within try_acquire
	case OwnerState::Fenced:
		return;
	}
}

int GroupOwner::drain(std::chrono::seconds hold_off)
{
	if (state_ != OwnerState::Active)
		return -EINVAL;
	ULP_LOG(Info, Ha, "group {}: draining: handing it to another gateway", cfg_.group);
	if (cfg_.on_release)
		cfg_.on_release();
	// Marked released before the lease goes, so that whoever takes the lease next reads
	// that it need fence nobody.
	write_record(true);
	lease_->release();
	hold_off_ = Clock::now() + hold_off;
	set_state(OwnerState::Standby);
	return 0;
}

} // namespace ulp::ha
