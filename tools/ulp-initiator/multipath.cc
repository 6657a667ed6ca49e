// SPDX-License-Identifier: MIT
// tools/ulp-initiator/multipath.cc - one LU through several paths with asymmetric access
// (multipath.h).
#include "tools/ulp-initiator/multipath.h"

#include "core/log.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <thread>

namespace initiator
{

using namespace ulp;
using ulp::iscsi::initiator::AluaSense;
using ulp::iscsi::initiator::DataDir;
using ulp::iscsi::initiator::TaskOutcome;
namespace is = ulp::iscsi::initiator;

namespace
{

// Path preference by its group's state: Active/Optimized, then Active/Non-optimized;
// the others take no I/O (-1).
int rank(uint8_t state)
{
	return state == 0x0 ? 0 : state == 0x1 ? 1 : -1;
}

const char *state_name(uint8_t s)
{
	switch (s) {
	case 0x0:
		return "active/optimized";
	case 0x1:
		return "active/non-optimized";
	case 0x2:
		return "standby";
	case 0x3:
		return "unavailable";
	case 0xe:
		return "offline";
	case 0xf:
		return "transitioning";
	}
	return "reserved";
}

bool path_failure(const ScsiResult &r)
{
	return r.outcome == TaskOutcome::ConnectionLost || r.outcome == TaskOutcome::Timeout ||
	       r.outcome == TaskOutcome::Cancelled;
}

// A command of our own (VPD, RTPG) on one path, past a unit attention or two (a new
// session's first command meets POWER ON OCCURRED; a state change queues 2Ah/06h).
ScsiResult run_own(IscsiDisk &d, const ScsiRequest &req)
{
	ScsiResult r;
	for (int i = 0; i < 4; i++) {
		r = d.run(req);
		const is::SenseKey k = is::parse_sense({r.sense.data(), r.sense_len});
		if (!(r.outcome == TaskOutcome::Completed && r.status == 0x02 && k.valid &&
		      k.key == 0x6))
			break;
	}
	return r;
}

} // namespace

MultipathDisk::MultipathDisk(std::vector<Path> paths, uint64_t lun) : lun_(lun)
{
	for (auto &p : paths) {
		PathRt r;
		r.p = std::move(p);
		r.disk = std::make_unique<IscsiDisk>(*r.p.session);
		paths_.push_back(std::move(r));
	}
}

MultipathDisk::~MultipathDisk()
{
	for (PathRt &p : paths_)
		if (p.relogin && p.relogin->thread.joinable())
			p.relogin->thread.join();
}

bool MultipathDisk::init(std::string *why)
{
	start_ = Clock::now();
	for (size_t i = 0; i < paths_.size(); i++) {
		std::array<uint8_t, 255> d{};
		const auto cdb = is::cdb_inquiry_vpd(0x83, d.size());
		const ScsiResult r = run_own(*paths_[i].disk, {lun_, cdb, DataDir::Read, d});
		if (path_failure(r)) {
			mark_dead(i, is::describe_result(r));
			continue;
		}
		if (!r.good() ||
		    !is::parse_vpd83_port({d.data(), d.size() - r.residual}, &paths_[i].ids))
			ULP_LOG(Warn, Tool,
			        "path {}: no port designators (VPD 83h: {}): taken as active",
			        paths_[i].p.name, r.good() ? "unreadable" : is::describe_result(r));
	}
	if (!refresh()) {
		*why = "no path answered REPORT TARGET PORT GROUPS: " + error_;
		return false;
	}
	for (const PathRt &p : paths_)
		ULP_LOG(Info, Tool, "path {}: target port {}, group {}, {}{}", p.p.name, p.ids.rtpi,
		        p.ids.tpg, state_name(p.state), p.dead ? " (dead)" : "");
	return true;
}

bool MultipathDisk::refresh()
{
	refreshing_ = true;
	last_refresh_ = Clock::now();
	bool ok = false;
	for (size_t n = 0; n < paths_.size() && !ok; n++) {
		// The chosen path first: it answers for the state it is in.
		const size_t i = current_ < paths_.size() ? (current_ + n) % paths_.size() : n;
		if (paths_[i].dead)
			continue;
		std::vector<uint8_t> d(4096);
		const auto cdb = is::cdb_report_target_port_groups(uint32_t(d.size()));
		const ScsiResult r = run_own(*paths_[i].disk, {lun_, cdb, DataDir::Read, d});
		rtpg_reads_++;
		if (path_failure(r)) {
			mark_dead(i, is::describe_result(r));
			continue;
		}
		std::vector<is::PortGroup> groups;
		std::string why;
		if (!r.good() ||
		    !is::parse_rtpg({d.data(), d.size() - r.residual}, &groups, &why)) {
			error_ = "REPORT TARGET PORT GROUPS on " + paths_[i].p.name + ": " +
			         (r.good() ? why : is::describe_result(r));
			continue;
		}
		for (PathRt &p : paths_) {
			p.state =
			    p.ids.has_tpg ? 0x3 : 0x0; // a port in no group reported: unusable
			for (const is::PortGroup &g : groups)
				if (p.ids.has_tpg && g.id == p.ids.tpg)
					p.state = g.state;
		}
		ok = true;
	}
	need_refresh_ = false;
	refreshing_ = false;
	choose();
	return ok;
}

void MultipathDisk::choose()
{
	size_t best = SIZE_MAX;
	int best_rank = 99;
	for (size_t i = 0; i < paths_.size(); i++) {
		const int r = paths_[i].dead ? -1 : rank(paths_[i].state);
		// Better, or as good and the one in use (no needless switching).
		if (r >= 0 && (r < best_rank || (r == best_rank && i == current_))) {
			best = i;
			best_rank = r;
		}
	}
	if (best == current_)
		return;
	// The path in use is left (no usable path now, or a better one): a failover, unless one
	// is under way already.
	if (last_used_ != SIZE_MAX && best != last_used_)
		failover_begin(best == SIZE_MAX ? "path " + paths_[last_used_].p.name + " " +
		                                      (paths_[last_used_].dead
		                                           ? "failed"
		                                           : state_name(paths_[last_used_].state))
		                                : "group " + std::to_string(paths_[best].ids.tpg) +
		                                      " " + state_name(paths_[best].state));
	if (best == SIZE_MAX)
		ULP_LOG(Warn, Tool,
		        "no usable path now (every group standby, unavailable or "
		        "transitioning, or its path dead): commands wait");
	else
		ULP_LOG(Info, Tool, "using path {} (group {}, {})", paths_[best].p.name,
		        paths_[best].ids.tpg, state_name(paths_[best].state));
	// A switch is I/O moving to another path than the one it last went to, with or without
	// a wait for a usable one in between.
	if (best != SIZE_MAX) {
		if (last_used_ != SIZE_MAX && best != last_used_)
			switches_++;
		last_used_ = best;
	}
	current_ = best;
}

void MultipathDisk::mark_dead(size_t i, const std::string &why)
{
	if (paths_[i].dead)
		return;
	paths_[i].dead = true;
	paths_[i].next_login = Clock::now(); // at once: it may have been a passing drop
	ULP_LOG(Warn, Tool, "path {} failed: {}", paths_[i].p.name, why);
	if (i == last_used_)
		failover_begin("path " + paths_[i].p.name + " failed: " + why);
	if (i == current_) {
		current_ = SIZE_MAX;
		need_refresh_ = true;
		choose();
	}
}

int MultipathDisk::send(std::shared_ptr<Cmd> c)
{
	const size_t i = current_;
	PathRt &p = paths_[i];
	c->sent = Clock::now();
	int rc = p.disk->submit(
	    c->req, [this, i, gen = p.gen, c](const ScsiResult &r) { completed(i, gen, c, r); });
	if (rc == 0) {
		p.sent_times.insert(c->sent);
		p.ios++;
		in_flight_++;
	} else if (rc != -EBUSY) {
		last_error_ = p.disk->last_error();
	}
	return rc;
}

void MultipathDisk::completed(size_t i, uint32_t gen, std::shared_ptr<Cmd> c, const ScsiResult &r)
{
	in_flight_--;
	c->last = r;
	const AluaSense a = is::alua_sense(r);
	const bool failed = path_failure(r);
	// Any UNIT ATTENTION: the command was not executed (SAM-5 5.14); a path's first data
	// command after its login meets POWER ON OCCURRED (29h/00h), as Linux's midlayer
	// retries it.
	const is::SenseKey k = is::parse_sense({r.sense.data(), r.sense_len});
	const bool ua =
	    r.outcome == TaskOutcome::Completed && r.status == 0x02 && k.valid && k.key == 0x6;
	// A late answer of a session since replaced says nothing of the path's new one.
	PathRt &p = paths_[i];
	if (gen == p.gen && c->sent != Clock::time_point{}) {
		if (auto it = p.sent_times.find(c->sent); it != p.sent_times.end())
			p.sent_times.erase(it);
		// Trouble on the path: it began when the oldest command it still had when the
		// answer came was sent (a frozen target answers late, GOOD or not, what it had
		// since it froze); it is over once a command sent after it was seen is GOOD.
		const Clock::time_point t =
		    p.polling ? std::min(p.oldest_at_poll, c->sent) : c->sent;
		if (!r.good() && p.bad_since == Clock::time_point{}) {
			p.bad_since = t;
			p.bad_seen = Clock::now();
		} else if (!r.good() && t < p.bad_since) {
			p.bad_since = t;
		} else if (r.good() && p.bad_since != Clock::time_point{} && c->sent > p.bad_seen) {
			p.bad_since = {};
		}
	}
	if (failed && gen == p.gen)
		mark_dead(i, is::describe_result(r));
	// Refused for its port's state on the path in use: that path is left.
	if (a != AluaSense::None && a != AluaSense::StateChanged && i == last_used_)
		failover_begin(std::string("path ") + paths_[i].p.name + ": " +
		               is::alua_sense_str(a));
	if (!r.good())
		failover_uncompleted(i, c->sent);
	if ((a != AluaSense::None || failed || ua) && Clock::now() - c->first < kRetryFor) {
		if (a != AluaSense::None)
			need_refresh_ = true;
		retries_++;
		waiting_.push_back(std::move(c));
		return;
	}
	if (r.good())
		failover_completed(i, c->sent);
	c->cb(r);
}

void MultipathDisk::failover_begin(const std::string &why)
{
	if (in_failover_ || last_used_ == SIZE_MAX)
		return;
	Failover f;
	f.at = Clock::now();
	f.from = last_used_;
	f.why = why;
	in_failover_ = true;
	f.first_sent = paths_[f.from].bad_since; // what it answered badly before this
	failovers_.push_back(f);
}

void MultipathDisk::failover_uncompleted(size_t i, Clock::time_point sent)
{
	if (!in_failover_ || i != failovers_.back().from || sent == Clock::time_point{})
		return;
	Failover &f = failovers_.back();
	if (f.first_sent == Clock::time_point{} || sent < f.first_sent)
		f.first_sent = sent;
}

void MultipathDisk::failover_completed(size_t i, Clock::time_point sent)
{
	if (!in_failover_ || sent < failovers_.back().at)
		return;
	Failover &f = failovers_.back();
	f.end = Clock::now();
	f.to = i;
	in_failover_ = false;
	const auto from = f.first_sent == Clock::time_point{} ? f.at : f.first_sent;
	ULP_LOG(Warn, Tool,
	        "failover at {:.1f} s from path {} to path {}: I/O stalled {:.0f} ms ({})",
	        std::chrono::duration<double>(f.at - start_).count(), paths_[f.from].p.name,
	        paths_[i].p.name, std::chrono::duration<double, std::milli>(f.end - from).count(),
	        f.why);
}

int MultipathDisk::submit(const ScsiRequest &req, DiskCallback cb)
{
	auto c = std::make_shared<Cmd>();
	c->cdb.assign(req.cdb.begin(), req.cdb.end());
	c->req = req;
	c->req.cdb = c->cdb;
	c->cb = std::move(cb);
	c->first = Clock::now();
	c->last.outcome = TaskOutcome::Cancelled; // if it is never sent
	if (current_ == SIZE_MAX || refreshing_ || !waiting_.empty()) {
		waiting_.push_back(std::move(c));
		return 0;
	}
	int rc = send(c);
	if (rc == -EBUSY)
		return rc;
	if (rc < 0) {
		mark_dead(current_, last_error_);
		waiting_.push_back(std::move(c));
	}
	return 0;
}

void MultipathDisk::resubmit_waiting()
{
	const auto now = Clock::now();
	// Commands out of time get their last answer, path or not.
	for (auto it = waiting_.begin(); it != waiting_.end();) {
		if (now - (*it)->first >= kRetryFor) {
			auto c = *it;
			it = waiting_.erase(it);
			c->cb(c->last);
		} else {
			++it;
		}
	}
	while (!waiting_.empty() && current_ != SIZE_MAX && !refreshing_) {
		auto c = waiting_.front();
		const int rc = send(c);
		if (rc == -EBUSY)
			break;
		if (rc < 0) {
			mark_dead(current_, last_error_);
			continue;
		}
		waiting_.pop_front();
	}
}

int MultipathDisk::poll_path(size_t i, std::chrono::milliseconds timeout)
{
	PathRt &p = paths_[i];
	p.oldest_at_poll = p.sent_times.empty() ? Clock::now() : *p.sent_times.begin();
	p.polling = true;
	const int rc = p.disk->poll(timeout);
	p.polling = false;
	return rc;
}

int MultipathDisk::poll(std::chrono::milliseconds timeout)
{
	// The paths not in use only finish what they had; the chosen one may sleep.
	// A dead one still owing callbacks (it failed at a submit) delivers them: sent again.
	for (size_t i = 0; i < paths_.size(); i++)
		if (i != current_ && (!paths_[i].dead || paths_[i].p.session->in_flight()) &&
		    poll_path(i, {}) < 0)
			mark_dead(i, paths_[i].disk->error());
	// Commands given back meanwhile (a path failed under a submit) go out before the
	// sleep, not after it.
	resubmit_waiting();
	if (current_ != SIZE_MAX) {
		const size_t i = current_;
		if (poll_path(i, timeout) < 0)
			mark_dead(i, paths_[i].disk->error());
	} else {
		std::this_thread::sleep_for(std::min(timeout, std::chrono::milliseconds(50)));
	}
	relogin();
	if (need_refresh_ ||
	    (current_ == SIZE_MAX && Clock::now() - last_refresh_ >= kRetryInterval))
		refresh();
	resubmit_waiting();
	if (std::all_of(paths_.begin(), paths_.end(), [](const PathRt &p) { return p.dead; }) &&
	    !may_come_back()) {
		error_ = "every path failed";
		while (!waiting_.empty()) {
			auto c = waiting_.front();
			waiting_.pop_front();
			c->cb(c->last);
		}
		return in_flight_ ? 0 : -1;
	}
	return 0;
}

ScsiResult MultipathDisk::run(const ScsiRequest &req)
{
	bool done = false;
	ScsiResult res;
	const auto until = Clock::now() + kRetryFor + std::chrono::seconds(60);
	int rc;
	while ((rc = submit(req,
	                    [&](const ScsiResult &r) {
		                    res = r;
		                    done = true;
	                    })) == -EBUSY &&
	       Clock::now() < until)
		poll(std::chrono::milliseconds(10));
	if (rc < 0) {
		res.outcome = TaskOutcome::Cancelled;
		return res;
	}
	while (!done && Clock::now() < until)
		if (poll(std::chrono::milliseconds(100)) < 0 && !done)
			break;
	if (!done)
		res.outcome = TaskOutcome::Timeout;
	return res;
}

bool MultipathDisk::logout()
{
	bool all = true;
	for (PathRt &p : paths_)
		if (!p.dead)
			all = p.p.session->logout() && all;
	return all;
}

std::vector<MultipathDisk::PathStats> MultipathDisk::path_stats() const
{
	std::vector<PathStats> v;
	for (const PathRt &p : paths_)
		v.push_back({p.p.name, p.ids.rtpi, p.ids.tpg, p.ios, p.dead, state_name(p.state),
		             p.reinstated});
	return v;
}

std::vector<MultipathDisk::FailoverStats> MultipathDisk::failovers() const
{
	using ms = std::chrono::duration<double, std::milli>;
	std::vector<FailoverStats> v;
	const auto now = Clock::now();
	for (const Failover &f : failovers_) {
		FailoverStats s;
		s.at_s = std::chrono::duration<double>(f.at - start_).count();
		s.from = paths_[f.from].p.name;
		s.resumed = f.to != SIZE_MAX;
		s.to = s.resumed ? paths_[f.to].p.name : "";
		s.why = f.why;
		const auto from = f.first_sent == Clock::time_point{} ? f.at : f.first_sent;
		s.stall_ms = ms((s.resumed ? f.end : now) - from).count();
		v.push_back(s);
	}
	return v;
}

bool MultipathDisk::may_come_back() const
{
	return std::any_of(paths_.begin(), paths_.end(),
	                   [](const PathRt &p) { return p.dead && p.p.login; });
}

void MultipathDisk::relogin()
{
	const auto now = Clock::now();
	for (size_t i = 0; i < paths_.size(); i++) {
		PathRt &p = paths_[i];
		if (!p.dead || !p.p.login)
			continue;
		if (p.relogin) {
			if (!p.relogin->done.load(std::memory_order_acquire))
				continue;
			p.relogin->thread.join();
			auto l = std::move(p.relogin);
			if (l->session) {
				reinstate(i, *l);
			} else {
				if (!p.login_failed_said)
					ULP_LOG(
					    Info, Tool,
					    "path {}: cannot log in again ({}); trying every {} s",
					    p.p.name, l->why,
					    std::chrono::seconds(kReloginInterval).count());
				p.login_failed_said = true;
				p.next_login = Clock::now() + kReloginInterval;
			}
			continue;
		}
		if (now < p.next_login)
			continue;
		// The login and the new session's VPD 83h on a thread of its own: a frozen
		// target holds a login for the session's login timeout.
		p.relogin = std::make_unique<Relogin>();
		Relogin *l = p.relogin.get();
		l->thread = std::thread([l, login = p.p.login, lun = lun_] {
			l->session = login(&l->why);
			if (l->session) {
				IscsiDisk d(*l->session);
				std::array<uint8_t, 255> buf{};
				const auto cdb = is::cdb_inquiry_vpd(0x83, buf.size());
				const ScsiResult r = run_own(d, {lun, cdb, DataDir::Read, buf});
				if (path_failure(r)) {
					l->why = "VPD 83h: " + is::describe_result(r);
					l->session.reset();
				} else {
					l->ids_ok =
					    r.good() &&
					    is::parse_vpd83_port(
					        {buf.data(), buf.size() - r.residual}, &l->ids);
				}
			}
			l->done.store(true, std::memory_order_release);
		});
	}
}

void MultipathDisk::reinstate(size_t i, Relogin &l)
{
	PathRt &p = paths_[i];
	// What the old session still owes its callbacks (ConnectionLost: sent again) is
	// delivered before it goes; bounded, it has failed.
	p.p.session->close("replaced by a new login");
	for (int n = 0; n < 100 && p.disk->poll({}) >= 0; n++) {
	}
	p.gen++;
	p.disk.reset();
	p.p.session = std::move(l.session);
	p.disk = std::make_unique<IscsiDisk>(*p.p.session);
	if (l.ids_ok)
		p.ids = l.ids;
	p.state = 0x3; // until the groups are read again
	p.dead = false;
	p.login_failed_said = false;
	p.bad_since = p.bad_seen = {};
	p.sent_times.clear();
	p.reinstated++;
	need_refresh_ = true;
	ULP_LOG(Info, Tool, "path {} logged in again (target port {}, group {})", p.p.name,
	        p.ids.rtpi, p.ids.tpg);
}

} // namespace initiator
