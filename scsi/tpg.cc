// SPDX-License-Identifier: MIT
// scsi/tpg.cc - target port groups, ACLs, sessions and their teardown.
#include "scsi/tpg.h"

#include "core/lock_assert.h"
#include "core/log.h"
#include "scsi/core_internal.h"
#include "scsi/fabric.h"
#include "scsi/pr.h"

#include <algorithm>
#include <cerrno>
#include <set>
#include <thread>

namespace ulp::scsi
{

// Defined in core.cc and tmr.cc: abort every command of a session (no responses to it).
void session_abort_all(Nexus *s);

Nexus::Nexus(Tpg &tpg, Fabric &fabric, std::string initiator, std::string initiator_port,
             std::shared_ptr<const NodeAcl> acl)
    : tpg_(tpg), fabric_(fabric),
      initiator_(std::move(initiator)), id_{std::move(initiator_port), tpg.rtpi()},
      acl_(std::move(acl))
{
}

LogicalUnit *Nexus::lookup_lun(uint64_t lun, bool *read_only, std::atomic<LogicalUnit *> *pin) const
{
	return tpg_.lookup_for(*this, lun, read_only, pin);
}

std::vector<uint64_t> Nexus::luns() const
{
	return tpg_.lun_list_for(*this);
}

void Nexus::ua_clear_everywhere(uint16_t asc_ascq)
{
	tpg_.ua_clear_all_for(*this, asc_ascq);
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
	ShardLockAll g(lock_);
	if (luns_.count(lun))
		return -EEXIST;
	luns_[lun] = LunEntry{&lu, read_only};
	lu.port_add(rtpi_);
	luns_changed_locked(&lu);
	return 0;
}

int Tpg::remove_lun(uint64_t lun, LogicalUnit **lu)
{
	std::unique_lock life(life_lock_);
	ShardLockAll g(lock_);
	auto it = luns_.find(lun);
	if (it == luns_.end())
		return -ENOENT;
	LogicalUnit *was = it->second.lu;
	luns_.erase(it);
	was->port_del(rtpi_);
	luns_changed_locked(was);
	if (lu)
		*lu = was;
	return 0;
}

void Tpg::luns_changed_locked(const LogicalUnit *skip)
{
	ULP_ASSERT_HELD_ALL(lock_);
	// SPC-4 5.14 (the logical unit inventory changed): every I_T nexus hears REPORTED LUNS
	// DATA HAS CHANGED. A nexus whose ACL maps LUNs of its own sees no change. It is queued
	// on the LUs the nexus has used (ua_add_if_seen): one it has not used reports POWER ON
	// first, which already tells it to forget what it knew.
	std::set<LogicalUnit *> lus;
	for (auto &[l, e] : luns_)
		if (e.lu != skip)
			lus.insert(e.lu);
	for (auto &s : sessions_) {
		if (s->acl_ && !s->acl_->luns.empty())
			continue;
		for (LogicalUnit *lu : lus)
			lu->ua_add_if_seen(s->id(), UA_REPORTED_LUNS_CHANGED);
	}
}

int Tpg::remove_acl(const std::string &initiator)
{
	ShardLockAll g(lock_);
	return acls_.erase(initiator) ? 0 : -ENOENT;
}

std::map<uint64_t, LunEntry> Tpg::lun_entries() const
{
	std::lock_guard g(lock_.mine());
	return luns_;
}

std::vector<std::string> Tpg::acl_names() const
{
	std::lock_guard g(lock_.mine());
	std::vector<std::string> v;
	for (auto &[name, a] : acls_)
		v.push_back(name);
	return v;
}

size_t Tpg::lu_users(const LogicalUnit *lu) const
{
	std::lock_guard g(lock_.mine());
	size_t n = 0;
	for (auto &s : sessions_) {
		std::lock_guard sg(s->sess_lock_);
		for (const Cmd &c : s->cmds_)
			if (c.lu_pin.load(std::memory_order_relaxed) == lu)
				n++;
	}
	return n;
}

std::set<LogicalUnit *> Tpg::lus_of_locked(const NodeAcl *acl) const
{
	std::set<LogicalUnit *> lus;
	if (acl && !acl->luns.empty()) {
		for (auto &[mapped, tl] : acl->luns)
			if (auto it = luns_.find(tl.first); it != luns_.end())
				lus.insert(it->second.lu);
	} else {
		for (auto &[l, e] : luns_)
			lus.insert(e.lu);
	}
	return lus;
}

void Tpg::ua_clear_all(const NodeAcl *acl, const NexusId &n, uint16_t asc_ascq) const
{
	std::lock_guard g(lock_.mine());
	for (LogicalUnit *lu : lus_of_locked(acl))
		lu->ua_clear_if_seen(n, asc_ascq);
}

void Tpg::ua_clear_all_for(const Nexus &s, uint16_t asc_ascq) const
{
	std::lock_guard g(lock_.mine());
	for (LogicalUnit *lu : lus_of_locked(s.acl_.get()))
		lu->ua_clear_if_seen(s.id(), asc_ascq);
}

int Tpg::replace_acl(const NodeAcl &acl)
{
	if (acl.initiator.empty())
		return -EINVAL;
	ShardLockAll g(lock_);
	auto it = acls_.find(acl.initiator);
	if (it == acls_.end())
		return -ENOENT;
	for (auto &[mapped, tl] : acl.luns)
		if (mapped > 16383 || !luns_.count(tl.first))
			return -ENOENT;
	auto now = std::make_shared<const NodeAcl>(acl);
	it->second = now;
	// SPC-4 5.14: the initiator's logical unit inventory changed. Its sessions see the new
	// one from their next command on, and hear so on the LUs they have used.
	const std::set<LogicalUnit *> lus = lus_of_locked(now.get());
	for (auto &s : sessions_) {
		if (s->initiator() != acl.initiator || !s->acl_)
			continue;
		s->acl_ = now;
		for (LogicalUnit *lu : lus)
			lu->ua_add_if_seen(s->id(), UA_REPORTED_LUNS_CHANGED);
	}
	return 0;
}

int Tpg::add_acl(const NodeAcl &acl)
{
	if (acl.initiator.empty())
		return -EINVAL;
	ShardLockAll g(lock_);
	if (acls_.count(acl.initiator))
		return -EEXIST;
	for (auto &[mapped, tl] : acl.luns)
		if (mapped > 16383 || !luns_.count(tl.first))
			return -ENOENT;
	acls_[acl.initiator] = std::make_shared<const NodeAcl>(acl);
	return 0;
}

bool Tpg::open_access() const
{
	std::lock_guard g(lock_.mine());
	return acls_.empty();
}

bool Tpg::allowed(const std::string &initiator) const
{
	std::lock_guard g(lock_.mine());
	return acls_.empty() || acls_.count(initiator);
}

LogicalUnit *Tpg::lookup(uint64_t lun, const NodeAcl *acl, bool *read_only,
                         std::atomic<LogicalUnit *> *pin) const
{
	std::lock_guard g(lock_.mine());
	return lookup_locked(lun, acl, read_only, pin);
}

LogicalUnit *Tpg::lookup_for(const Nexus &s, uint64_t lun, bool *read_only,
                             std::atomic<LogicalUnit *> *pin) const
{
	std::lock_guard g(lock_.mine());
	return lookup_locked(lun, s.acl_.get(), read_only, pin);
}

LogicalUnit *Tpg::lookup_locked(uint64_t lun, const NodeAcl *acl, bool *read_only,
                                std::atomic<LogicalUnit *> *pin) const
{
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
	if (pin)
		pin->store(it->second.lu, std::memory_order_relaxed); // under lock_: see lu_users
	return it->second.lu;
}

std::vector<uint64_t> Tpg::lun_list(const NodeAcl *acl) const
{
	std::lock_guard g(lock_.mine());
	return lun_list_locked(acl);
}

std::vector<uint64_t> Tpg::lun_list_for(const Nexus &s) const
{
	std::lock_guard g(lock_.mine());
	return lun_list_locked(s.acl_.get());
}

std::vector<uint64_t> Tpg::lun_list_locked(const NodeAcl *acl) const
{
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
	ShardLockAll g(lock_);
	std::shared_ptr<const NodeAcl> acl;
	if (!acls_.empty()) {
		auto it = acls_.find(initiator);
		if (it == acls_.end()) {
			errno = EACCES;
			return nullptr;
		}
		acl = it->second;
	}
	sessions_.push_back(
	    std::unique_ptr<Nexus>(new Nexus(*this, fabric, initiator, initiator_port, acl)));
	Nexus *s = sessions_.back().get();
	// A nexus that was lost and comes back: its unit attention queue is a live one again
	// (not to be forgotten among the lost ones).
	for (auto &[l, e] : luns_)
		e.lu->ua_nexus_back(s->id());
	return s;
}

std::vector<Nexus *> Tpg::sessions() const
{
	std::lock_guard g(lock_.mine());
	std::vector<Nexus *> v;
	for (auto &s : sessions_)
		v.push_back(s.get());
	return v;
}

void Tpg::session_lost(Nexus *s)
{
	auto life = life_guard(); // the LUs below stay while this runs
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
		std::lock_guard g(lock_.mine());
		for (auto &[l, e] : luns_)
			lus.insert(e.lu);
	}
	for (LogicalUnit *lu : lus) {
		pr_nexus_loss(*lu, s->id());
		lu->medium_nexus_loss(s->id());
		lu->ua_nexus_lost(s->id());
	}
}

int Tpg::close_session(Nexus *s, std::chrono::milliseconds timeout)
{
	// Stop, abort and let go (session_lost), wait (bounded, logged), free: the session
	// goes only once no command holds it.
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
	ShardLockAll g(lock_);
	auto it = std::find_if(sessions_.begin(), sessions_.end(),
	                       [&](const std::unique_ptr<Nexus> &p) { return p.get() == s; });
	if (it != sessions_.end()) {
		// Its commands are all released, so counted: its totals stay in the Tpg's.
		retired_ += s->stats_.read();
		sessions_.erase(it);
	}
	return 0;
}

IoCounts Tpg::io_counts() const
{
	std::lock_guard g(lock_.mine());
	IoCounts c = retired_;
	for (const auto &s : sessions_)
		c += s->stats_.read();
	return c;
}

} // namespace ulp::scsi

namespace ulp::scsi
{

int lu_quiesce(LogicalUnit &lu, const std::vector<Tpg *> &tpgs, std::chrono::milliseconds grace,
               std::chrono::milliseconds timeout)
{
	using clock = std::chrono::steady_clock;
	auto users = [&] {
		size_t n = 0;
		for (Tpg *t : tpgs)
			n += t->lu_users(&lu);
		return n;
	};
	// Removal is rare and slow-path: a poll of the sessions' command lists every few ms
	// instead of a count every command would have to keep (nothing per I/O).
	auto wait_until = [&](clock::time_point deadline) {
		auto next_log = clock::now() + std::chrono::seconds(2);
		for (;;) {
			const size_t n = users();
			if (n == 0)
				return true;
			const auto now = clock::now();
			if (now >= deadline)
				return false;
			if (now >= next_log) {
				ULP_LOG(Warn, Scsi,
				        "LU {} removed: waiting for {} commands in flight",
				        lu.name(), n);
				next_log = now + std::chrono::seconds(2);
			}
			std::this_thread::sleep_for(std::chrono::milliseconds(5));
		}
	};
	const auto t0 = clock::now();
	if (wait_until(t0 + grace))
		return 0;
	// Past the grace: abort what is left, as a CLEAR TASK SET from elsewhere would (TASK
	// ABORTED to each nexus where TAS is set). The Tmr answers itself once they have ended
	// (core_done frees it); if they never do, it stays with the LU, which stays too.
	ULP_LOG(Warn, Scsi, "LU {} removed: aborting {} commands still in flight after {} ms",
	        lu.name(), users(), (long long)grace.count());
	auto *tmr = new Tmr;
	tmr->function = TmfType::ClearTaskSet;
	tmr->core_done = [](Tmr *t) { delete t; };
	abort_lu_tasks(lu, tmr);
	if (wait_until(t0 + grace + timeout))
		return 0;
	ULP_LOG(Error, Scsi,
	        "LU {} removed: {} commands still in flight after {} ms; left allocated", lu.name(),
	        users(), (long long)(grace + timeout).count());
	return -ETIMEDOUT;
}

} // namespace ulp::scsi
