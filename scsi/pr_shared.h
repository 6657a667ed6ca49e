// SPDX-License-Identifier: MIT
// scsi/pr_shared.h - persistent reservations of a logical unit that several gateways serve
// (SPC-4 5.13 across target ports of different processes): the reservation state lives in a
// store every gateway reaches - ha/pr_cluster.h keeps it in one RADOS object - and each
// gateway's PrState is a cache of it, so that pr_check (every command) stays local and
// lock-free when nothing is reserved.
//
// The store holds records (key -> bytes) and a version that each change increments by
// compare-and-set. Ours (the store may keep records of its own beside them, not shown here):
//   pr.image        the registrations and the reservation: pr_persist.cc's image, with its
//                   CRC32C and the LU check (the LU's identity and NAA instead of its name)
//   pr.generation   PRgeneration (SPC-4 6.16.2), decimal
//   pr.aptpl        the last valid APTPL bit, "0" or "1" (PTPL_A)
//   pr.ev.<v>       the events of the change to version v (20 digits): the unit attentions
//                   and aborts it asks for (PrEvent, pr_events_encode); the last 64 kept
//
// PERSISTENT RESERVE OUT (pr_shared.cc; never on a fabric's thread: on the store's, post()):
//   1. read the state and install it here, its events included: a PREEMPT AND ABORT at
//      another gateway that aborted this very command is known before it runs;
//   2. apply the service action to a copy with the code a LU alone uses (pr_out.cc), its
//      unit attentions and aborts recorded as events;
//   3. write the copy back if the version is still the one read; when another gateway came
//      first, again from 1 (bounded: then BUSY, nothing written);
//   4. install it here: unit attentions for this gateway's I_T nexuses, their tasks aborted;
//   5. announce it (the store notifies every gateway and waits, bounded, for each to answer;
//      each installs it as in 4 and answers once its aborted tasks have ended; one that does
//      not answer is fenced by the daemon before the announcement counts as done);
//   6. complete: GOOD once 4's aborts have ended and 5 succeeded. A write that failed, or an
//      announcement that did not reach every gateway (and could not fence the silent ones),
//      ends in HARDWARE ERROR, INTERNAL TARGET FAILURE: the change may stand in the store
//      without every gateway enforcing it, and the initiator reads the state to know.
// PERSISTENT RESERVE IN reads the state first (the same thread), then answers from it.
//
// Locking: PrState::lock guards the cache (pr_internal.h); the store's calls are made
// without it.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace ulp::scsi
{

class LogicalUnit;

// One consistent read of the shared state.
struct PrSharedView {
	uint64_t version = 0;                       // 0: never written
	std::map<std::string, std::string> records; // key -> bytes, as the last change left them
	std::vector<uint16_t> ports; // relative target port ids of the LU's ports at every gateway
	                             // (REGISTER AND MOVE may name them)
};

// What one change does on top of the version it was made from.
struct PrSharedChange {
	std::map<std::string, std::string> set; // records written
	std::vector<std::string> erase;         // records removed
};

// The store (ha/pr_cluster.h over RADOS; a test's in memory). Its blocking calls run on the
// thread post() runs jobs on, or before the LU is exported.
class PrShared
{
public:
	virtual ~PrShared() = default;
	// Run job on the store's thread after the jobs posted before it; returns at once (a
	// fabric's event thread calls it).
	virtual void post(std::function<void()> job) = 0;
	// The state now: 0, or a negative errno.
	virtual int read(PrSharedView *out) = 0;
	// Compare-and-set: c applied if the state is still at version expect; 0 with *now the
	// new version, -ECANCELED when another change came first (nothing written), another
	// negative errno when the outcome is not known.
	virtual int write(uint64_t expect, const PrSharedChange &c, uint64_t *now) = 0;
	// Tell every gateway that version is written and wait (bounded) until each has installed
	// it (pr_shared_changed's done) or was fenced: 0, or a negative errno when some gateway
	// may still enforce an older state.
	virtual int announce(uint64_t version) = 0;
};

// Share lu's reservations through store under identity (the LU's name in the image: the same
// at every gateway, e.g. Backstore::identity()), before lu is exported: its state becomes
// the store's (read now, blocking). 0; -EBUSY lu has a state file store or a shared state
// already; -EINVAL no identity; -EBADMSG the store holds something that is not this LU's
// state (*why says what); another negative errno from the store. The store must stay until
// pr_detach_shared.
int pr_attach_shared(LogicalUnit &lu, PrShared &store, const std::string &identity,
                     std::string *why);
// After lu is no longer exported (no command runs on it) and store calls no more: lu keeps
// the state it has, unshared. Nothing when lu's state is not shared through store.
void pr_detach_shared(LogicalUnit &lu, PrShared &store);

// A gateway announced version (0: the state may have changed unseen, a watch broke): read it
// unless installed already, and install it (blocking). done(true) once it is installed here
// and the tasks it aborted here have ended (on any thread), done(false) when it could not be
// read or is not this LU's. The store calls this on a thread other than post()'s: a gateway
// waiting for its own announcement must still answer the others'.
void pr_shared_changed(LogicalUnit &lu, uint64_t version, std::function<void(bool)> done);

} // namespace ulp::scsi
