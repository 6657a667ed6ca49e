// SPDX-License-Identifier: MIT
// scsi/xcopy_registry.cc - every logical unit of the process by its NAA designator, for the
// CSCD descriptors of EXTENDED COPY; and the results of held copies for RECEIVE COPY
// RESULTS.
//
// Lifetime: a copy pins the LUs its CSCDs name (XcopyLuRef) for as long as it uses them. An
// LU being destroyed (after its owner's lu_quiesce) first unregisters: from then on it is
// not found, pinned copies see gone() and stop at their next chunk, and the destructor
// waits for the last pin to drop - at most one backstore request per copy - before the
// backstore goes. The pin count lives here, not in the LU, so a copy never touches an LU's
// memory to find out whether it still exists.
#include "core/log.h"
#include "scsi/lu.h"
#include "scsi/xcopy.h"

#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>

namespace ulp::scsi
{

namespace
{

struct Entry {
	LogicalUnit *lu = nullptr; // the registered LU
	uint32_t pins = 0;         // copies using it (lock)
	bool gone = false;         // its destruction has begun (lock)
};

struct HeldResult {
	const LogicalUnit *lu = nullptr; // the copy manager (the LU addressed)
	NexusId nexus;                   // the I_T nexus that sent the EXTENDED COPY
	uint8_t list_id = 0;
	XcopyResult r;
};

struct Registry {
	std::mutex lock;
	std::condition_variable unpinned;              // a pin of a gone entry dropped
	std::map<LogicalUnit *, Entry> by_lu;          // every registered LU
	std::multimap<uint64_t, LogicalUnit *> by_naa; // NAA -> LU (duplicates: first wins)
	std::deque<HeldResult> results; // held copies, oldest first (kXcopyMaxResults)
};

Registry &reg()
{
	static Registry *r = new Registry; // never destroyed: LUs outlive static destruction
	return *r;
}

} // namespace

void xcopy_lu_register(LogicalUnit *lu)
{
	Registry &r = reg();
	std::lock_guard g(r.lock);
	r.by_lu[lu].lu = lu;
	r.by_naa.emplace(lu->naa(), lu);
}

void xcopy_lu_unregister(LogicalUnit *lu)
{
	Registry &r = reg();
	std::unique_lock g(r.lock);
	auto it = r.by_lu.find(lu);
	if (it == r.by_lu.end())
		return;
	it->second.gone = true;
	for (auto n = r.by_naa.lower_bound(lu->naa()); n != r.by_naa.end() && n->first == lu->naa();
	     ++n)
		if (n->second == lu) {
			r.by_naa.erase(n);
			break;
		}
	// Results of copies this LU managed: nobody can ask for them any more.
	std::erase_if(r.results, [lu](const HeldResult &h) { return h.lu == lu; });
	int waited = 0;
	while (it->second.pins) {
		if (r.unpinned.wait_for(g, std::chrono::seconds(5)) == std::cv_status::timeout)
			ULP_LOG(Warn, Scsi, "LU {}: waiting {} s for {} EXTENDED COPY to stop",
			        lu->name(), (++waited) * 5, it->second.pins);
	}
	r.by_lu.erase(it);
}

XcopyLuRef xcopy_lu_get(uint64_t naa)
{
	Registry &r = reg();
	std::lock_guard g(r.lock);
	XcopyLuRef ref;
	auto n = r.by_naa.find(naa);
	if (n == r.by_naa.end())
		return ref;
	Entry &e = r.by_lu.at(n->second);
	if (e.gone)
		return ref;
	e.pins++;
	ref.lu_ = e.lu;
	return ref;
}

bool XcopyLuRef::gone() const
{
	if (!lu_)
		return true;
	Registry &r = reg();
	std::lock_guard g(r.lock);
	return r.by_lu.at(lu_).gone;
}

void XcopyLuRef::reset()
{
	if (!lu_)
		return;
	Registry &r = reg();
	{
		std::lock_guard g(r.lock);
		Entry &e = r.by_lu.at(lu_);
		e.pins--;
		if (!e.gone || e.pins)
			lu_ = nullptr;
	}
	if (lu_) { // the last pin of a gone LU: its destructor waits for this
		lu_ = nullptr;
		r.unpinned.notify_all();
	}
}

XcopyLuRef &XcopyLuRef::operator=(XcopyLuRef &&o) noexcept
{
	if (this != &o) {
		reset();
		lu_ = o.lu_;
		o.lu_ = nullptr;
	}
	return *this;
}

bool xcopy_result_begin(const LogicalUnit *lu, const NexusId &n, uint8_t list_id)
{
	Registry &r = reg();
	std::lock_guard g(r.lock);
	for (auto it = r.results.begin(); it != r.results.end(); ++it) {
		if (it->lu != lu || it->list_id != list_id || it->nexus != n)
			continue;
		if (it->r.status == XCOPY_IN_PROGRESS)
			return false;
		r.results.erase(it); // SPC-4 6.4.3: a new copy with the id replaces the old
		break;
	}
	if (r.results.size() == kXcopyMaxResults)
		r.results.pop_front();
	r.results.push_back(HeldResult{lu, n, list_id, {}});
	return true;
}

void xcopy_result_update(const LogicalUnit *lu, const NexusId &n, uint8_t list_id,
                         const XcopyResult &res)
{
	Registry &r = reg();
	std::lock_guard g(r.lock);
	for (HeldResult &h : r.results)
		if (h.lu == lu && h.list_id == list_id && h.nexus == n) {
			h.r = res;
			return;
		}
}

bool xcopy_result_get(const LogicalUnit *lu, const NexusId &n, uint8_t list_id, XcopyResult *out,
                      bool take)
{
	Registry &r = reg();
	std::lock_guard g(r.lock);
	for (auto it = r.results.begin(); it != r.results.end(); ++it)
		if (it->lu == lu && it->list_id == list_id && it->nexus == n) {
			*out = it->r;
			if (take && it->r.status != XCOPY_IN_PROGRESS)
				r.results.erase(it);
			return true;
		}
	return false;
}

} // namespace ulp::scsi
