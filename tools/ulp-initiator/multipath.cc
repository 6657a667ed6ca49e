// SPDX-License-Identifier: MIT
// tools/ulp-initiator/multipath.cc - one LU through several paths with asymmetric access
// (multipath.h).
#include "tools/ulp-initiator/multipath.h"

#include "core/log.h"

#include <algorithm>
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

bool MultipathDisk::init(std::string *why)
{
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
	ULP_LOG(Warn, Tool, "path {} failed: {}", paths_[i].p.name, why);
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
	int rc = p.disk->submit(c->req, [this, i, c](const ScsiResult &r) { completed(i, c, r); });
	if (rc == 0) {
		p.ios++;
		in_flight_++;
	} else if (rc != -EBUSY) {
		last_error_ = p.disk->last_error();
	}
	return rc;
}

void MultipathDisk::completed(size_t i, std::shared_ptr<Cmd> c, const ScsiResult &r)
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
	if (failed)
		mark_dead(i, is::describe_result(r));
	if ((a != AluaSense::None || failed || ua) && Clock::now() - c->first < kRetryFor) {
		if (a != AluaSense::None)
			need_refresh_ = true;
		retries_++;
		waiting_.push_back(std::move(c));
		return;
	}
	c->cb(r);
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

int MultipathDisk::poll(std::chrono::milliseconds timeout)
{
	// The paths not in use only finish what they had; the chosen one may sleep.
	for (size_t i = 0; i < paths_.size(); i++)
		if (i != current_ && !paths_[i].dead && paths_[i].disk->poll({}) < 0)
			mark_dead(i, paths_[i].disk->error());
	if (current_ != SIZE_MAX) {
		const size_t i = current_;
		if (paths_[i].disk->poll(timeout) < 0)
			mark_dead(i, paths_[i].disk->error());
	} else {
		std::this_thread::sleep_for(std::min(timeout, std::chrono::milliseconds(50)));
	}
	if (need_refresh_ ||
	    (current_ == SIZE_MAX && Clock::now() - last_refresh_ >= kRetryInterval))
		refresh();
	resubmit_waiting();
	if (std::all_of(paths_.begin(), paths_.end(), [](const PathRt &p) { return p.dead; })) {
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
		v.push_back({p.p.name, p.ids.rtpi, p.ids.tpg, p.ios, p.dead, state_name(p.state)});
	return v;
}

} // namespace initiator
