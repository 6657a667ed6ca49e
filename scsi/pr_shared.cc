// SPDX-License-Identifier: MIT
// scsi/pr_shared.cc - persistent reservations shared by the gateways that serve one LU
// (scsi/pr_shared.h): installing the shared state into a gateway's cache with the unit
// attentions and aborts its changes ask for, PERSISTENT RESERVE OUT and IN against it, and
// the events' encoding.
#include "scsi/pr_internal.h"

#include "core/backoff.h"
#include "core/byteorder.h"
#include "core/log.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <memory>

namespace ulp::scsi
{

namespace
{

constexpr const char *kImageKey = "pr.image";
constexpr const char *kGenerationKey = "pr.generation";
constexpr const char *kAptplKey = "pr.aptpl";
constexpr std::string_view kEventPrefix = "pr.ev.";
// Versions whose events are kept: a gateway further behind than this (its watch broke for
// that many changes) has its unit attentions approximated from the states (fallback_events).
constexpr uint64_t kEventLog = 64;
// Read-apply-write rounds a PERSISTENT RESERVE OUT tries before BUSY (other gateways'
// changes coming first each time).
constexpr int kTries = 16;
constexpr uint8_t kEventsFormat = 1;
constexpr size_t kMaxPort = 256; // as pr_persist.cc: longer than any initiator port's text

std::string event_key(uint64_t v)
{
	return fmt::format("{}{:020}", kEventPrefix, v);
}

// The version of an event record's key; false for another key.
bool event_version(const std::string &key, uint64_t *v)
{
	if (key.size() != kEventPrefix.size() + 20 || !key.starts_with(kEventPrefix))
		return false;
	const char *b = key.data() + kEventPrefix.size(), *e = key.data() + key.size();
	auto [end, ec] = std::from_chars(b, e, *v);
	return ec == std::errc() && end == e;
}

// The shared state, decoded.
struct Shadow {
	PrLoaded l;              // registrations (ids 1..n) and reservation
	uint32_t generation = 0; // PRgeneration
	bool aptpl = false;      // PTPL_A
};

bool decode_u32(const std::string &s, uint32_t *out)
{
	if (s.empty() || s.size() > 10 || (s.size() > 1 && s[0] == '0'))
		return false;
	for (char c : s)
		if (c < '0' || c > '9')
			return false;
	auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
	return ec == std::errc() && end == s.data() + s.size();
}

// v's state for the LU name with NAA naa; false with *why when v holds something else.
bool decode(const PrSharedView &v, const std::string &name, uint64_t naa, Shadow *out,
            std::string *why)
{
	const auto img = v.records.find(kImageKey);
	const auto gen = v.records.find(kGenerationKey);
	const auto apl = v.records.find(kAptplKey);
	if (img == v.records.end()) {
		// Nothing registered yet (the store's own records may be there).
		if (gen != v.records.end() || apl != v.records.end()) {
			*why = "a generation or APTPL record without the state image";
			return false;
		}
		*out = Shadow{};
		return true;
	}
	if (gen == v.records.end() || apl == v.records.end()) {
		*why = "the state image without its generation or APTPL record";
		return false;
	}
	Shadow s;
	const auto *p = reinterpret_cast<const uint8_t *>(img->second.data());
	std::string what;
	const PrLoad r = pr_decode({p, img->second.size()}, name, naa, &s.l, &what);
	if (r != PrLoad::Ok) {
		*why = std::string("state image: ") + pr_load_name(r) + " (" + what + ")";
		return false;
	}
	if (!decode_u32(gen->second, &s.generation)) {
		*why = "generation record damaged";
		return false;
	}
	if (apl->second != "0" && apl->second != "1") {
		*why = "APTPL record damaged";
		return false;
	}
	s.aptpl = apl->second == "1";
	*out = std::move(s);
	return true;
}

// The records of state pr (a scratch state) for the LU name with NAA naa.
void records_of(const PrState &pr, const std::string &name, uint64_t naa, PrSharedChange *c)
{
	const std::vector<uint8_t> img = pr_image_of(name, naa, pr);
	c->set[kImageKey] = std::string(img.begin(), img.end());
	c->set[kGenerationKey] = std::to_string(pr.generation);
	c->set[kAptplKey] = pr.aptpl ? "1" : "0";
}

void load(PrState &pr, Shadow &&s)
{
	pr.next_id = s.l.regs.size() + 1;
	pr.regs = std::move(s.l.regs);
	pr.type = s.l.type;
	pr.holder = s.l.holder;
	pr.generation = s.generation;
	pr.aptpl = s.aptpl;
	pr.sync();
}

// Events for a change this gateway did not see the events of (more than kEventLog versions
// behind): REGISTRATIONS PREEMPTED to the registrations that are gone, RESERVATIONS RELEASED
// to the remaining ones when the reservation changed. Approximate (a CLEAR reported as
// preemption of registrations), never silent. Under pr.lock, before the new state is in.
std::vector<PrEvent> fallback_events(const PrState &old, const Shadow &now)
{
	std::vector<PrEvent> ev;
	const auto same = [](const Registration &a, const Registration &b) {
		return a.nexus == b.nexus && a.all_tg_pt == b.all_tg_pt && a.key == b.key;
	};
	for (const Registration &o : old.regs)
		if (std::none_of(now.l.regs.begin(), now.l.regs.end(),
		                 [&](const Registration &n) { return same(o, n); }))
			ev.push_back(
			    {PrEvent::Ua, UA_REGISTRATIONS_PREEMPTED, o.nexus, o.all_tg_pt});
	const Registration *oh = old.holder_reg();
	const Registration *nh = nullptr;
	for (const Registration &n : now.l.regs)
		if (n.id == now.l.holder)
			nh = &n;
	const bool changed = old.type != now.l.type || (oh == nullptr) != (nh == nullptr) ||
	                     (oh && nh && !same(*oh, *nh));
	if (changed)
		for (const Registration &n : now.l.regs)
			ev.push_back({PrEvent::Ua, UA_RESERVATIONS_RELEASED, n.nexus, n.all_tg_pt});
	return ev;
}

// The preempted tasks an install aborts here (PREEMPT AND ABORT at any gateway).
struct SharedAbort {
	Tmr tmr;
	std::vector<NexusId> which;
	LogicalUnit *lu = nullptr;
	uint64_t from = 0;           // the version the install came from
	std::function<void()> after; // the writer's completion, once they have ended
};

// Answer the notifies waiting for nothing from below their version. Under pr.lock; the
// answers are run by the caller, outside it.
std::vector<std::function<void()>> due_answers(PrState &pr)
{
	std::vector<std::function<void()>> run;
	const uint64_t low = pr.shared_aborting.empty() ? UINT64_MAX : *pr.shared_aborting.begin();
	for (auto it = pr.shared_waiting.begin(); it != pr.shared_waiting.end();) {
		if (it->first <= low) {
			run.push_back(std::move(it->second));
			it = pr.shared_waiting.erase(it);
		} else {
			++it;
		}
	}
	return run;
}

// An install's aborted tasks have all ended here.
void shared_abort_done(Tmr *tmr)
{
	std::unique_ptr<SharedAbort> a(static_cast<SharedAbort *>(tmr->fabric_priv));
	PrState &pr = pr_of(*a->lu);
	std::vector<std::function<void()>> run;
	{
		std::lock_guard g(pr.lock);
		pr.shared_aborting.erase(a->from);
		run = due_answers(pr);
	}
	if (a->after)
		a->after();
	for (auto &f : run)
		f();
}

// fn once the tasks that the installs of versions up to v aborted here have ended (now, or
// from the end of the last of them).
void answer_when_done(LogicalUnit &lu, uint64_t v, std::function<void()> fn)
{
	PrState &pr = pr_of(lu);
	{
		std::lock_guard g(pr.lock);
		if (!pr.shared_aborting.empty() && *pr.shared_aborting.begin() < v) {
			pr.shared_waiting.emplace_back(v, std::move(fn));
			return;
		}
	}
	fn();
}

// Make v (decoded into s, newer than what lu has) lu's state, acting on the events of the
// versions between: unit attentions queued for the I_T nexuses this gateway has; the tasks
// to abort returned (null: none), counted in pr.shared_aborting. Under pr.lock.
std::unique_ptr<SharedAbort> install_locked(LogicalUnit &lu, PrState &pr, const PrSharedView &v,
                                            Shadow &&s)
{
	const uint64_t from = pr.shared_version;
	std::vector<PrEvent> ev;
	bool gap = v.version - from > kEventLog;
	for (uint64_t k = from + 1; !gap && k <= v.version; k++) {
		const auto it = v.records.find(event_key(k));
		if (it == v.records.end())
			continue; // a change without events (or of the store's own records)
		std::vector<PrEvent> e;
		if (!pr_events_decode(it->second, &e)) {
			ULP_LOG_RATELIMITED(
			    Error, Ha, "LU {}: the events of version {} are damaged", lu.name(), k);
			gap = true;
			break;
		}
		ev.insert(ev.end(), e.begin(), e.end());
	}
	if (gap) {
		ULP_LOG_RATELIMITED(
		    Warn, Ha,
		    "LU {}: reservation state {} -> {}: the changes between are not "
		    "all known here; unit attentions from the states",
		    lu.name(), from, v.version);
		ev = fallback_events(pr, s);
	}
	load(pr, std::move(s));
	pr.shared_version = v.version;
	std::vector<NexusId> which;
	for (const PrEvent &e : ev) {
		Registration r;
		r.nexus = e.nexus;
		r.all_tg_pt = e.all_tg_pt;
		for (const NexusId &n : pr_nexuses(lu, r)) {
			if (e.kind == PrEvent::Ua)
				lu.ua_add_if_seen(n, e.asc_ascq);
			else
				which.push_back(n);
		}
	}
	if (which.empty())
		return nullptr;
	std::sort(which.begin(), which.end());
	which.erase(std::unique(which.begin(), which.end()), which.end());
	auto a = std::make_unique<SharedAbort>();
	a->which = std::move(which);
	a->lu = &lu;
	a->from = from;
	a->tmr.fabric_priv = a.get();
	a->tmr.core_done = shared_abort_done;
	pr.shared_aborting.insert(from);
	return a;
}

// Make v (decoded into s) lu's state unless it has it or a newer one, acting on the events of
// the versions between (unit attentions for the I_T nexuses this gateway has, their tasks
// aborted - except `except` - and the queued commands among them ended). after (may be
// empty) runs once those aborted tasks have ended, at once when there are none. Under
// pr.shared_install.
void install(LogicalUnit &lu, const PrSharedView &v, Shadow &&s, const Cmd *except,
             std::function<void()> after = {})
{
	PrState &pr = pr_of(lu);
	std::unique_ptr<SharedAbort> a;
	{
		std::lock_guard g(pr.lock);
		if (v.version > pr.shared_version)
			a = install_locked(lu, pr, v, std::move(s));
	}
	if (!a) {
		if (after)
			after();
		return;
	}
	// SPC-4 5.13.11.2.5, as pr_out.cc: TASK ABORTED to the preempted I_T nexuses where TAS
	// is set; their end is what the announcement waits for. Marked before this returns
	// (under shared_install): a command of theirs checked after this is seen aborted.
	a->after = std::move(after);
	SharedAbort *x = a.release();
	abort_nexus_tasks(lu, &x->tmr, x->which, except);
	// The queued PERSISTENT RESERVE commands among them end here: they would do nothing.
	std::vector<Cmd *> done;
	{
		std::lock_guard g(pr.lock);
		std::erase_if(pr.shared_queued, [&](const std::pair<Cmd *, uint64_t> &q) {
			if (!pr_cmd_aborted(q.first))
				return false;
			done.push_back(q.first);
			return true;
		});
	}
	for (Cmd *c : done)
		complete_sense(c, Sense::ReservationConflict); // its status goes nowhere
}

// Read the state and install it; false with *why when it cannot be had. Under
// pr.shared_install.
bool refresh(LogicalUnit &lu, PrSharedView *v, Shadow *s, std::string *why)
{
	PrState &pr = pr_of(lu);
	if (int r = pr.shared->read(v); r < 0) {
		*why = std::string("reading the shared state: ") + std::strerror(-r);
		return false;
	}
	if (!decode(*v, pr.shared_name, lu.naa(), s, why))
		return false;
	Shadow copy = *s;
	install(lu, *v, std::move(copy), nullptr);
	return true;
}

void fail(Cmd *cmd, Sense s, const std::string &why)
{
	ULP_LOG_RATELIMITED(Error, Ha, "LU {}: PERSISTENT RESERVE {} failed: {}", cmd->lu->name(),
	                    cmd->cdb[0] == OP_PERSISTENT_RESERVE_IN ? "IN" : "OUT", why);
	complete_sense(cmd, s);
}

// Queue cmd's job(cmd) on the store's thread. It runs unless an install ended cmd while it
// was queued (cmd may be gone then: the job is found by its number, not by cmd).
void enqueue(Cmd *cmd, std::function<void(Cmd *)> job)
{
	LogicalUnit *lu = cmd->lu;
	PrState &pr = pr_of(*lu);
	uint64_t seq = 0;
	{
		std::lock_guard g(pr.lock);
		seq = ++pr.shared_queue_seq;
		pr.shared_queued.emplace_back(cmd, seq);
	}
	pr.shared->post([lu, seq, job = std::move(job)] {
		PrState &pr = pr_of(*lu);
		Cmd *cmd = nullptr;
		{
			std::lock_guard g(pr.lock);
			auto it = std::find_if(pr.shared_queued.begin(), pr.shared_queued.end(),
			                       [&](const auto &q) { return q.second == seq; });
			if (it == pr.shared_queued.end())
				return;
			cmd = it->first;
			pr.shared_queued.erase(it);
		}
		job(cmd);
	});
}

// PERSISTENT RESERVE OUT against the shared state, on the store's thread (pr_shared.h).
void shared_out(Cmd *cmd, const PrBasicParams &p, const PrMoveParams &mp)
{
	LogicalUnit &lu = *cmd->lu;
	PrState &pr = pr_of(lu);
	const bool aptpl =
	    (cmd->cdb[1] & 0x1f) == uint8_t(PrOutSa::RegisterAndMove) ? mp.aptpl : p.aptpl;
	ContentionBackoff backoff; // 351 ms at most in all before BUSY
	for (int i = 0; i < kTries; i++) {
		if (i > 0)
			backoff.pause(); // another gateway's change came first (core/backoff.h)
		std::unique_lock install_lock(pr.shared_install);
		PrSharedView v;
		Shadow s;
		std::string why;
		// 1. The state now, installed here: a PREEMPT AND ABORT that aborted cmd is
		// applied (and cmd marked) before cmd could take effect after it.
		if (!refresh(lu, &v, &s, &why)) {
			install_lock.unlock();
			fail(cmd, Sense::InternalTargetFailure, why);
			return;
		}
		if (pr_cmd_aborted(cmd)) {
			install_lock.unlock();
			complete_sense(cmd, Sense::ReservationConflict); // its status goes nowhere
			return;
		}
		// 2. The service action on a copy, its unit attentions and aborts recorded.
		PrState copy;
		std::vector<PrEvent> ev;
		load(copy, std::move(s));
		copy.record = &ev;
		copy.other_ports = v.ports;
		PrSharedChange before; // the state read, as records (none yet: the empty state)
		records_of(copy, pr.shared_name, lu.naa(), &before);
		const PrOutcome out = pr_out_apply(lu, copy, cmd, p, mp);
		if (out.sense != Sense::None) {
			install_lock.unlock();
			complete_sense(cmd, out.sense);
			return;
		}
		if (pr_out_sets_aptpl(cmd) && !out.noop)
			copy.aptpl = aptpl;
		PrSharedChange c;
		records_of(copy, pr.shared_name, lu.naa(), &c);
		if (c.set == before.set && ev.empty()) {
			// Nothing changed (RESERVE again, RELEASE of nothing, ...): nothing
			// written.
			install_lock.unlock();
			complete_good(cmd);
			return;
		}
		if (!ev.empty())
			c.set[event_key(v.version + 1)] = pr_events_encode(ev);
		for (const auto &[k, val] : v.records) {
			uint64_t ek = 0;
			if (event_version(k, &ek) && ek + kEventLog <= v.version + 1)
				c.erase.push_back(k);
		}
		// 3. Compare-and-set.
		uint64_t now = 0;
		const int r = pr.shared->write(v.version, c, &now);
		if (r == -ECANCELED)
			continue;
		if (r < 0) {
			install_lock.unlock();
			fail(cmd, Sense::InternalTargetFailure,
			     std::string("writing the shared state: ") + std::strerror(-r));
			return;
		}
		// 4. Installed here, as every gateway will: nothing else was installed since 1
		// (shared_install), so these are this change's events alone.
		PrSharedView after = std::move(v);
		after.version = now;
		for (const auto &[k, val] : c.set)
			after.records[k] = val;
		for (const std::string &k : c.erase)
			after.records.erase(k);
		Shadow as;
		if (!decode(after, pr.shared_name, lu.naa(), &as, &why)) {
			install_lock.unlock();
			fail(cmd, Sense::InternalTargetFailure, why); // cannot be: we made it
			return;
		}
		// 6 (below) once this gateway's aborted tasks have ended and 5 is known.
		auto parts = std::make_shared<std::atomic<int>>(2);
		auto result = std::make_shared<std::atomic<int>>(0);
		auto part_done = [cmd, parts, result] {
			if (parts->fetch_sub(1) != 1)
				return;
			if (result->load() == 0)
				complete_good(cmd);
			else
				complete_sense(cmd, Sense::InternalTargetFailure);
		};
		install(lu, after, std::move(as), cmd, part_done);
		install_lock.unlock();
		// 5. Announced.
		const int a = pr.shared->announce(now);
		if (a < 0)
			ULP_LOG_RATELIMITED(Error, Ha,
			                    "LU {}: reservation state {} written but not confirmed "
			                    "by every gateway: {}",
			                    lu.name(), now, std::strerror(-a));
		result->store(a);
		part_done();
		return;
	}
	ULP_LOG_RATELIMITED(Warn, Ha,
	                    "LU {}: {} changes of other gateways came first; PERSISTENT RESERVE "
	                    "OUT ends BUSY",
	                    lu.name(), kTries);
	complete_sense(cmd, Sense::Busy);
}

void shared_in(Cmd *cmd)
{
	PrState &pr = pr_of(*cmd->lu);
	PrSharedView v;
	Shadow s;
	std::string why;
	bool ok = false;
	{
		std::lock_guard g(pr.shared_install);
		ok = refresh(*cmd->lu, &v, &s, &why);
	}
	if (!ok) {
		fail(cmd, Sense::InternalTargetFailure, why);
		return;
	}
	complete_data_in(cmd, pr_in_data(cmd));
}

} // namespace

void pr_shared_out(Cmd *cmd, PrBasicParams p, PrMoveParams mp)
{
	enqueue(cmd, [p = std::move(p), mp = std::move(mp)](Cmd *c) { shared_out(c, p, mp); });
}

void pr_shared_in(Cmd *cmd)
{
	enqueue(cmd, shared_in);
}

void pr_shared_changed(LogicalUnit &lu, uint64_t version, std::function<void(bool)> done)
{
	PrState &pr = pr_of(lu);
	uint64_t installed = 0;
	{
		std::lock_guard install_lock(pr.shared_install);
		bool attached = false, need = true;
		{
			std::lock_guard g(pr.lock);
			attached = pr.shared != nullptr;
			need = version == 0 || version > pr.shared_version;
			installed = pr.shared_version;
		}
		if (!attached) {
			done(false);
			return;
		}
		if (need) {
			PrSharedView v;
			Shadow s;
			std::string why;
			if (!refresh(lu, &v, &s, &why)) {
				if (version)
					ULP_LOG_RATELIMITED(
					    Error, Ha,
					    "LU {}: reservation state {} announced, not "
					    "installed: {}",
					    lu.name(), version, why);
				else
					ULP_LOG_RATELIMITED(
					    Error, Ha,
					    "LU {}: reservation state not read again after "
					    "a broken watch: {}",
					    lu.name(), why);
				done(false);
				return;
			}
			std::lock_guard g(pr.lock);
			installed = pr.shared_version;
		}
	}
	// Answered once the tasks aborted here for the changes up to it have ended.
	answer_when_done(lu, version ? version : installed,
	                 [done = std::move(done)] { done(true); });
}

int pr_attach_shared(LogicalUnit &lu, PrShared &store, const std::string &identity,
                     std::string *why)
{
	PrState &pr = pr_of(lu);
	if (identity.empty()) {
		*why = "LU " + lu.name() + ": no identity to share its reservations under";
		return -EINVAL;
	}
	{
		std::lock_guard g(pr.lock);
		if (pr.store || pr.shared) {
			*why = "LU " + lu.name() + ": its reservations are kept elsewhere already";
			return -EBUSY;
		}
	}
	PrSharedView v;
	if (int r = store.read(&v); r < 0) {
		*why = "LU " + lu.name() +
		       ": reading the shared reservation state: " + std::strerror(-r);
		return r;
	}
	Shadow s;
	std::string what;
	if (!decode(v, identity, lu.naa(), &s, &what)) {
		*why =
		    "LU " + lu.name() + ": the shared reservation state is not this LU's: " + what;
		return -EBADMSG;
	}
	std::lock_guard g(pr.lock);
	pr.shared = &store;
	pr.shared_name = identity;
	pr.shared_version = v.version;
	load(pr, std::move(s));
	ULP_LOG(Info, Ha, "LU {}: reservations shared as {} (version {}, {} registrations{})",
	        lu.name(), identity, v.version, pr.regs.size(),
	        pr.type == PrType::None ? "" : ", reserved");
	return 0;
}

void pr_detach_shared(LogicalUnit &lu, PrShared &store)
{
	PrState &pr = pr_of(lu);
	std::lock_guard g(pr.lock);
	if (pr.shared == &store)
		pr.shared = nullptr;
}

// ---- The events' encoding -----------------------------------------------------------------
//
//   1  format (1)
//   4  number of events, then each:
//        1      kind (1 unit attention, 2 abort)
//        2      ASC/ASCQ (unit attention; 0 for an abort)
//        2      relative target port identifier
//        1      flags (bit 0: ALL_TG_PT)
//        2 + n  initiator port (length, bytes)
// Integers big-endian; nothing after the last event.

std::string pr_events_encode(const std::vector<PrEvent> &ev)
{
	std::string s;
	auto put = [&s](uint64_t v, int bytes) {
		for (int i = bytes - 1; i >= 0; i--)
			s.push_back(static_cast<char>(v >> (8 * i)));
	};
	put(kEventsFormat, 1);
	put(ev.size(), 4);
	for (const PrEvent &e : ev) {
		put(e.kind, 1);
		put(e.asc_ascq, 2);
		put(e.nexus.rtpi, 2);
		put(e.all_tg_pt ? 1 : 0, 1);
		put(e.nexus.initiator_port.size(), 2);
		s += e.nexus.initiator_port;
	}
	return s;
}

bool pr_events_decode(std::string_view s, std::vector<PrEvent> *out)
{
	const auto *b = reinterpret_cast<const uint8_t *>(s.data());
	size_t at = 0;
	const auto need = [&](size_t n) { return s.size() - at >= n; };
	if (!need(5) || b[0] != kEventsFormat)
		return false;
	const uint32_t n = get_be32(b + 1);
	at = 5;
	constexpr size_t kFixed = 1 + 2 + 2 + 1 + 2;
	if (n > kPrMaxEvents || n > (s.size() - at) / (kFixed + 1))
		return false;
	std::vector<PrEvent> v;
	v.reserve(n);
	for (uint32_t i = 0; i < n; i++) {
		if (!need(kFixed))
			return false;
		PrEvent e;
		const uint8_t kind = b[at];
		e.asc_ascq = get_be16(b + at + 1);
		e.nexus.rtpi = get_be16(b + at + 3);
		const uint8_t flags = b[at + 5];
		const size_t len = get_be16(b + at + 6);
		at += kFixed;
		if (!need(len) || len == 0 || len > kMaxPort || flags & ~0x01)
			return false;
		e.nexus.initiator_port.assign(s.data() + at, len);
		at += len;
		if (e.nexus.initiator_port.find('\0') != std::string::npos)
			return false;
		if (kind == PrEvent::Ua) {
			if (e.asc_ascq != UA_RESERVATIONS_PREEMPTED &&
			    e.asc_ascq != UA_RESERVATIONS_RELEASED &&
			    e.asc_ascq != UA_REGISTRATIONS_PREEMPTED)
				return false;
		} else if (kind != PrEvent::Abort || e.asc_ascq != 0) {
			return false;
		}
		e.kind = PrEvent::Kind(kind);
		e.all_tg_pt = flags & 0x01;
		v.push_back(std::move(e));
	}
	if (at != s.size())
		return false;
	*out = std::move(v);
	return true;
}

} // namespace ulp::scsi
