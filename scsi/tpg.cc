// SPDX-License-Identifier: MIT
// scsi/tpg.cc - target port groups, ACLs, sessions and their teardown.
#include "scsi/tpg.h"

#include "core/log.h"
#include "scsi/core_internal.h"
#include "scsi/fabric.h"
#include "scsi/pr.h"

#include <algorithm>
#include <cerrno>
#include <set>

namespace ulp::scsi
{

// Defined in core.cc and tmr.cc: abort every command of a session (no responses to it).
void session_abort_all(Nexus *s);

Nexus::Nexus(Tpg &tpg, Fabric &fabric, std::string initiator, std::string initiator_port,
             const NodeAcl *acl)
    : tpg_(tpg), fabric_(fabric),
      initiator_(std::move(initiator)), id_{std::move(initiator_port), tpg.rtpi()}, acl_(acl)
{
}

LogicalUnit *Nexus::lookup_lun(uint64_t lun, bool *read_only) const
{
	return tpg_.lookup(lun, acl_, read_only);
}

std::vector<uint64_t> Nexus::luns() const
{
	return tpg_.lun_list(acl_);
}

size_t Nexus::cmd_count()
{
	std::lock_guard g(sess_lock_);
	return cmds_.size();
}

Tpg::Tpg(std::string name, uint16_t rtpi) : name_(std::move(name)), rtpi_(rtpi) {}

Tpg::~Tpg()
{
	if (!sessions_.empty())
		ULP_LOG(Error, Scsi, "target {} destroyed with {} sessions open", name_,
		        sessions_.size());
}

int Tpg::add_lun(uint64_t lun, LogicalUnit &lu, bool read_only)
{
	if (lun > 16383)
		return -EINVAL; // SAM-5 flat addressing is our widest
	std::unique_lock g(lock_);
	if (luns_.count(lun))
		return -EEXIST;
	luns_[lun] = LunEntry{&lu, read_only};
	return 0;
}

int Tpg::add_acl(const NodeAcl &acl)
{
	if (acl.initiator.empty())
		return -EINVAL;
	std::unique_lock g(lock_);
	if (acls_.count(acl.initiator))
		return -EEXIST;
	for (auto &[mapped, tl] : acl.luns)
		if (mapped > 16383 || !luns_.count(tl.first))
			return -ENOENT;
	acls_[acl.initiator] = std::make_unique<NodeAcl>(acl);
	return 0;
}

bool Tpg::open_access() const
{
	std::shared_lock g(lock_);
	return acls_.empty();
}

bool Tpg::allowed(const std::string &initiator) const
{
	std::shared_lock g(lock_);
	return acls_.empty() || acls_.count(initiator);
}

LogicalUnit *Tpg::lookup(uint64_t lun, const NodeAcl *acl, bool *read_only) const
{
	std::shared_lock g(lock_);
	bool ro = false;
	if (acl && !acl->luns.empty()) {
		auto m = acl->luns.find(lun);
		if (m == acl->luns.end())
			return nullptr;
		lun = m->second.first;
		ro = m->second.second;
	}
	auto it = luns_.find(lun);
	if (it == luns_.end())
		return nullptr;
	if (read_only)
		*read_only = ro || it->second.read_only;
	return it->second.lu;
}

std::vector<uint64_t> Tpg::lun_list(const NodeAcl *acl) const
{
	std::shared_lock g(lock_);
	std::vector<uint64_t> v;
	if (acl && !acl->luns.empty()) {
		for (auto &[mapped, tl] : acl->luns)
			if (luns_.count(tl.first))
				v.push_back(mapped);
	} else {
		for (auto &[l, e] : luns_)
			v.push_back(l);
	}
	return v; // std::map iterates in ascending order
}

Nexus *Tpg::open_session(Fabric &fabric, const std::string &initiator,
                         const std::string &initiator_port)
{
	std::unique_lock g(lock_);
	const NodeAcl *acl = nullptr;
	if (!acls_.empty()) {
		auto it = acls_.find(initiator);
		if (it == acls_.end()) {
			errno = EACCES;
			return nullptr;
		}
		acl = it->second.get();
	}
	sessions_.push_back(
	    std::unique_ptr<Nexus>(new Nexus(*this, fabric, initiator, initiator_port, acl)));
	return sessions_.back().get();
}

std::vector<Nexus *> Tpg::sessions() const
{
	std::shared_lock g(lock_);
	std::vector<Nexus *> v;
	for (auto &s : sessions_)
		v.push_back(s.get());
	return v;
}

void Tpg::session_lost(Nexus *s)
{
	{
		std::lock_guard g(s->sess_lock_);
		if (s->lost_)
			return;
		s->lost_ = true;
	}
	session_abort_all(s);
	// SAM-5 6.3.4: what the I_T nexus held on each LU goes with it (an SPC-2 reservation,
	// medium removal prevention), and it hears I_T NEXUS LOSS OCCURRED if it comes back.
	std::set<LogicalUnit *> lus;
	{
		std::shared_lock g(lock_);
		for (auto &[l, e] : luns_)
			lus.insert(e.lu);
	}
	for (LogicalUnit *lu : lus) {
		pr_nexus_loss(*lu, s->id());
		lu->medium_nexus_loss(s->id());
		bool seen;
		{
			std::lock_guard g(lu->lock_);
			seen = lu->ua_.count(s->id()) != 0;
		}
		if (seen)
			lu->ua_add(s->id(), UA_I_T_NEXUS_LOSS);
	}
}

int Tpg::close_session(Nexus *s, std::chrono::milliseconds timeout)
{
	// Stop, abort and let go (session_lost), wait (bounded, logged), free: the teardown
	// order of DESIGN.md 9.
	session_lost(s);
	{
		using clock = std::chrono::steady_clock;
		const auto deadline = clock::now() + timeout;
		auto next_log = clock::now() + std::chrono::seconds(2);
		std::unique_lock g(s->sess_lock_);
		while (!s->cmds_.empty()) {
			auto until = std::min(deadline, next_log);
			s->idle_cv_.wait_until(g, until);
			if (s->cmds_.empty())
				break;
			if (clock::now() >= deadline) {
				ULP_LOG(
				    Error, Scsi,
				    "session {} on {}: {} commands still in flight after {} ms; "
				    "left allocated",
				    s->id().initiator_port, name_, s->cmds_.size(),
				    (long long)timeout.count());
				return -ETIMEDOUT;
			}
			if (clock::now() >= next_log) {
				ULP_LOG(Warn, Scsi, "session {} on {}: waiting for {} commands",
				        s->id().initiator_port, name_, s->cmds_.size());
				next_log = clock::now() + std::chrono::seconds(2);
			}
		}
	}
	std::unique_lock g(lock_);
	auto it = std::find_if(sessions_.begin(), sessions_.end(),
	                       [&](const std::unique_ptr<Nexus> &p) { return p.get() == s; });
	if (it != sessions_.end())
		sessions_.erase(it);
	return 0;
}

} // namespace ulp::scsi
