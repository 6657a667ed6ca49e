// SPDX-License-Identifier: MIT
// scsi/bs_internal.h - what the backstore kinds share and nobody else needs: the request
// checks every kind applies the same way, the per-kind constructors make_backstore()
// dispatches to, and the file/block kind's counters (tests observe its O_DIRECT choice).
#pragma once

#include "scsi/backstore.h"

#include <cstdint>
#include <memory>
#include <string>

namespace ulp::scsi
{

// Largest queue_depth a config may ask for: io_uring takes up to 32768 SQ entries, but a
// deeper queue only adds latency for a single logical unit (LIO caps its queues lower).
inline constexpr uint32_t kBsMaxQueueDepth = 4096;

// 0 when io addresses [offset, offset + length) inside a backstore of size bytes and, for
// Read/Write, its iov adds up to length; -ERANGE when it does not fit, -EINVAL when the iov
// does not add up (or op is unknown). Flush carries no range.
int bs_check_io(uint64_t size, const BsIo *io);
// bs_check_io() for a CompareAndWrite (which bs_check_io() refuses, -EOPNOTSUPP, for the
// kinds that do not perform it): its iov adds up to twice length.
int bs_check_caw(uint64_t size, const BsIo *io);
// bs_check_io() for a WriteSame of a backstore whose write_same_max() is max: its iov holds
// one block (its lengths' sum, > 0) that divides length; -EOPNOTSUPP beyond max.
int bs_check_write_same(uint64_t size, const BsIo *io, uint64_t max);

// The kinds. cfg has passed make_backstore()'s checks; they fail with *err (negative
// errno) and a message in *why.
std::unique_ptr<Backstore> make_null_backstore(const BackstoreConfig &cfg);
std::unique_ptr<Backstore> make_ram_backstore(const BackstoreConfig &cfg, int *err,
                                              std::string *why);
std::unique_ptr<Backstore> make_file_backstore(const BackstoreConfig &cfg, int *err,
                                               std::string *why);
std::unique_ptr<Backstore> make_rbd_backstore(const BackstoreConfig &cfg, int *err,
                                              std::string *why);
// make_backstore()'s maker of kind rbd, nullptr until rbd_backstore_enable() sets it.
using BackstoreMaker = std::unique_ptr<Backstore> (*)(const BackstoreConfig &, int *,
                                                      std::string *);
void set_rbd_backstore_maker(BackstoreMaker make);

// Counters and open-time facts of a file or block backstore. Counters are relaxed atomics
// read without a lock: exact once the requests they count have completed.
struct FileBsStats {
	bool direct = false;          // an O_DIRECT descriptor is open (aligned I/O may use it)
	uint32_t dio_mem_align = 0;   // bytes: buffer address alignment O_DIRECT needs
	uint32_t dio_off_align = 0;   // bytes: offset and length alignment O_DIRECT needs
	uint64_t direct_rw = 0;       // read/write submissions sent to the O_DIRECT descriptor
	uint64_t buffered_rw = 0;     // read/write submissions sent to the buffered descriptor
	uint64_t short_resubmit = 0;  // remainders resubmitted (short transfer, or > IOV_MAX iovs)
	uint64_t eof_fill = 0;        // reads that met end of file inside size (zero-filled)
	uint64_t retried = 0;         // requests resubmitted after -EAGAIN/-EINTR/-ECANCELED
	uint64_t cached_reads = 0;    // reads the page cache held, done inside submit() (no ring)
	uint64_t loop_rings = 0;      // rings open now on event-loop threads (one per loop used)
	uint64_t coop_rings = 0;      // of them, those whose completions wait for their loop's
	                              // next system call, without an IPI (COOP_TASKRUN, 5.19)
	uint64_t loop_requests = 0;   // requests started on a loop's ring (reaped on its thread)
	uint64_t shared_requests = 0; // requests started on the shared ring (its reaper thread)
	uint64_t reaps = 0;           // reaps that completed requests: each a turn of its
	                              // thread (core/turn.h), where the fabrics post responses
	uint64_t ring_enters = 0;     // io_uring_submit calls: a loop ring's requests of one
	                              // turn of its loop are submitted with one
};

// false when bs is not a file or block backstore.
bool file_bs_stats(const Backstore &bs, FileBsStats *out);

// Counters of an rbd backstore (scsi/bs_rbd.cc), relaxed atomics read without a lock.
struct RbdBsStats {
	uint32_t inflight = 0;    // requests librbd holds (or whose completion is on its way)
	uint64_t completed = 0;   // requests librbd gave back since open
	uint64_t errors = 0;      // of them, failed
	uint64_t busy_ns = 0;     // summed ns from submission to librbd's callback (their mean
	                          // latency: busy_ns / completed)
	bool fenced = false;      // the client was blocklisted: the LU fails every command
	uint64_t alloc_walks = 0; // allocation walks the map took (GET LBA STATUS's source)
	std::string client_addr;  // the RADOS client's address (what a blocklist entry names)
};

// false when bs is not an rbd backstore.
bool rbd_bs_stats(const Backstore &bs, RbdBsStats *out);

// Gateway mode (RbdConfig::managed_lock): take the image's exclusive lock (take true) or
// give it up. Taking breaks the lock of any other holder first - librbd blocklists that
// client as it breaks (rbd_blocklist_on_break_lock) - so that it does not wait on a holder
// that will never answer: the caller owns the image by its lease and has fenced the
// previous owner already (ha/group_owner.h). 0 or a negative errno; -ENOTSUP when bs is
// not an rbd backstore, -EINVAL without managed_lock.
int rbd_bs_lock(Backstore &bs, bool take);
// Whether this client holds the image's exclusive lock: 0 and *owner, or a negative errno.
int rbd_bs_lock_owner(const Backstore &bs, bool *owner);

} // namespace ulp::scsi
