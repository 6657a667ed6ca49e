// SPDX-License-Identifier: MIT
// scsi/bs_file_ring.h - the io_uring side of the file and block backstores (bs_file.cc): one
// ring with its request slots and wait FIFO (FileRing), and what every ring of one backstore
// shares (FileDev). Internal to scsi/.
//
// A backstore has one shared ring, reaped by its own completion thread ("ulp-bs-reap"), for
// threads that run no event loop (tests, the loopback fabric), and one ring per event-loop
// thread that submits to it (core/event_loop.h: the TCP workers, and cq_poll's pollers, which
// run the iSER and SRP connections' completions and so submit their commands): made
// on that thread at its first request, its eventfd watched by that loop, its completions
// reaped and done() called on that same thread. A worker's I/O then shares nothing with
// another worker's: no lock, no cache line written by both, no thread hop (SPDK's
// per-thread io channels).
//
// Locking. FileRing::lock_ guards a ring's slots, FIFO and submission side. On the shared
// ring every submitter and the completion thread take it, as before. On a loop ring only its
// loop thread takes it per request - uncontended, a pair of atomic operations on a line that
// stays in that core's cache - and the backstore's destructor takes it to wait for the ring
// to drain. Nobody holds it across done(). FileDev::rings_lock guards the list of loop rings
// and is taken only when a ring is made or closed, by stats() and by the destructor; the
// order is rings_lock, then a ring's lock_.
//
// Life of a loop ring. Made on its loop thread, listed in FileDev::loop_rings, found again
// through a thread-local table (no lock). Closed on its loop thread, never elsewhere (the
// submitting task owns io_uring's requests), by one of:
//   - the backstore's destructor, which waits (bounded) for every ring to drain, then posts
//     the close to each ring's loop and waits (bounded) until each is gone from the list;
//   - the loop ending (its worker stopping): loop_ending() drains the ring on the loop thread
//     (bounded: completions reaped and done() called there), then closes it.
// Whichever comes first closes it; a post to a loop that has ended fails, and then the
// loop's own loop_ending() is the closer. Every ring holds the FileDev (shared_ptr): one that
// closes late (a loop that did not answer within the destructor's bound) touches nothing
// freed, and the file stays open until its last ring closes. What that bound cannot cover:
// a loop stuck for longer than it in one turn may still call done() for requests it reaped
// before the destructor gave up on it (the old completion thread's join had no bound at
// all); done() must not block (backstore.h), and a loop that runs its turns never gets here.
#pragma once

#include "core/bounded_thread.h"
#include "core/event_loop.h"
#include "scsi/bs_internal.h"

#include <climits>
#include <liburing.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace ulp::scsi
{

inline constexpr auto kBsDrainWait = std::chrono::seconds(10); // bound on waits for in-flight I/O
inline constexpr uint32_t kBsMaxRwBytes = 1u << 30; // one unvectored SQE: a 32-bit length
inline constexpr size_t kBsMaxIov = IOV_MAX;        // iovecs in one vectored SQE (the kernel's)

// An owned file descriptor.
class Fd
{
public:
	Fd() = default;
	explicit Fd(int fd) : fd_(fd) {}
	~Fd() { reset(); }
	Fd(Fd &&o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
	Fd &operator=(Fd &&o) noexcept
	{
		if (this != &o) {
			reset();
			fd_ = std::exchange(o.fd_, -1);
		}
		return *this;
	}
	int get() const { return fd_; }
	void reset();

private:
	int fd_ = -1; // the descriptor, or -1
};

// A ring's counters (FileBsStats). Relaxed atomics: a loop ring's are written by its loop
// thread only (their line stays there), read by stats() on any thread.
struct FileCounters {
	std::atomic<uint64_t> direct_rw{0};      // FileBsStats::direct_rw
	std::atomic<uint64_t> buffered_rw{0};    // FileBsStats::buffered_rw
	std::atomic<uint64_t> short_resubmit{0}; // FileBsStats::short_resubmit
	std::atomic<uint64_t> eof_fill{0};       // FileBsStats::eof_fill
	std::atomic<uint64_t> cached_reads{0};   // FileBsStats::cached_reads
	std::atomic<uint64_t> retried{0};        // FileBsStats::retried
	std::atomic<uint64_t> requests{0};       // requests started on the ring
	std::atomic<uint64_t> reaps{0};          // FileBsStats::reaps
	std::atomic<uint64_t> enters{0};         // FileBsStats::ring_enters

	static void bump(std::atomic<uint64_t> &c) { c.fetch_add(1, std::memory_order_relaxed); }
	// Adds these counts to *s; loop: they are a loop ring's (else the shared ring's).
	void add_to(FileBsStats *s, bool loop) const;
	// Adds these counts into sum (a ring closing folds its counts into the retired ones).
	void fold_into(FileCounters *sum) const;
};

class FileRing;

// What the rings of one file or block backstore share: the open file and what opening it
// found out (fixed from then on but for the atomics), and the list of loop rings.
struct FileDev {
	std::string kind;              // "file" or "block", for messages
	std::string path;              // the file or device, for messages
	const Backstore *bs = nullptr; // its size(), read when a request starts (only while
	                               // requests are submitted: never after the destructor's
	                               // drain)
	bool block = false;            // a block device (else a regular file)
	bool read_only = false;        // writes, Unmap and WriteZeroes fail with -EROFS
	bool write_cache = true;       // false: every write and fallocate is made durable
	bool can_unmap = false;        // hole punch works (probed at open)
	uint32_t queue_depth = 0;      // slots per ring
	Fd fd;                         // buffered descriptor: unaligned I/O, fallocate, fsync
	Fd dfd;                        // O_DIRECT descriptor, or -1
	uint32_t mem_align = 0;        // bytes: O_DIRECT buffer alignment (power of two)
	uint32_t off_align = 0;        // bytes: O_DIRECT offset/length alignment (power of two)
	uint32_t lbs = 1;              // bytes: granularity a device's fallocate needs (file: 1)
	const uint64_t id;             // unique in the process: the key of the thread-local table
	std::atomic<bool> zero_range_ok{true}; // ZERO_RANGE not yet refused by the file system
	std::atomic<bool> nowait_ok{true};     // RWF_NOWAIT not yet refused (EOPNOTSUPP)
	std::atomic<bool> stopping{false};     // destruction started: no request, no new ring

	std::mutex rings_lock;                // guards loop_rings and retired; never per request
	std::condition_variable rings_closed; // a loop ring left loop_rings
	std::vector<FileRing *> loop_rings;   // rings open on event loops (each closes itself)
	FileCounters retired;                 // what loop rings closed since counted

	FileDev();
	std::string who() const { return kind + " backstore " + path + ": "; }
	// The request's result when it can be known without I/O, else 0.
	int precheck(const BsIo *io) const;
	// A transfer at off from v[0..n) may use the O_DIRECT descriptor (all aligned).
	bool direct_ok(uint64_t off, const iovec *v, size_t n) const;
};

// What the SQE a slot has in flight does.
enum class Step : uint8_t {
	Rw,        // the request's read or write, continuing at (vi, voff)
	ZeroWrite, // WriteZeroes by writing zeros from a static zero buffer
	ZeroRange, // WriteZeroes by fallocate ZERO_RANGE (stays allocated)
	Punch,     // Unmap (or WriteZeroes without ZERO_RANGE) by fallocate PUNCH_HOLE
	Sync,      // fdatasync: a Flush, or the end of a fallocate without a write cache
	Nop,       // no I/O: completes with Slot::err through the ring, on the reaping thread
};

// One request executing. Preallocated per queue slot; guarded by FileRing::lock_.
struct Slot {
	BsIo *io = nullptr;      // the request, or null when the slot is free
	uint64_t done = 0;       // bytes of io transferred so far
	size_t vi = 0;           // io->iov entry the next transfer starts in
	size_t voff = 0;         // bytes of io->iov[vi] already transferred
	int err = 0;             // Step::Nop: the result to complete with
	uint32_t retries = 0;    // resubmissions since the last progress
	Step step = Step::Nop;   // what the SQE in flight does
	bool dsync = false;      // writes carry RWF_DSYNC (FUA, or no write cache)
	bool sync_after = false; // a Step::Sync follows a fallocate (no write cache)
	uint32_t next_free = 0;  // free-list link while free
};

// A request that finished, collected under the lock and completed after it.
struct Finished {
	BsIo *io; // the request
	int err;  // its result for done()
};

// One io_uring with queue_depth slots and a FIFO for the requests beyond them.
class alignas(64) FileRing final : public LoopWatch
{
public:
	// loop: the event loop whose thread alone submits and reaps (a loop ring), or nullptr
	// (the shared ring, reaped by its completion thread).
	FileRing(std::shared_ptr<FileDev> dev, EventLoop *loop);
	~FileRing() override;
	FileRing(const FileRing &) = delete;
	FileRing &operator=(const FileRing &) = delete;

	// The calling thread's loop ring for dev, made (and listed) on first use; nullptr on a
	// thread without an event loop, while dev is stopping, or when no ring could be made
	// there (logged; that thread then uses the shared ring).
	static FileRing *of_this_loop(const std::shared_ptr<FileDev> &dev);

	// The ring, the slots, and the completion thread (shared) or the eventfd watched by the
	// loop (loop ring; on its thread). 0 or a negative errno with *why set.
	int init(std::string *why);
	// Starts io, or queues it behind the others beyond the queue depth. Shared ring: any
	// thread; loop ring: its loop thread.
	void submit(BsIo *io);

	EventLoop *loop() const { return loop_; }
	FileCounters &counters() { return ctr_; }
	const FileCounters &counters() const { return ctr_; }
	// A loop ring whose completions wait for its thread's next system call (init()).
	bool coop() const { return coop_; }

	// Destruction, any thread: waits until the ring holds no request or until deadline
	// (logging once after a second). Then, when requests remain in the kernel's hands, they
	// are abandoned (done() is never called for them: the kernel may still write into their
	// buffers, so they cannot be failed) and the ones still waiting for a slot are failed
	// with -ECANCELED. Returns the number abandoned.
	// reap_here: the caller is the ring's loop thread (which must reap it itself while it
	// waits).
	uint32_t drain(std::chrono::steady_clock::time_point deadline, bool reap_here);
	// The shared ring: ends the completion thread (after drain).
	void stop_thread();
	// A loop ring, on its loop thread: stop watching, take it off FileDev::loop_rings and
	// the thread's table, and free it. rings_locked: the caller holds dev->rings_lock.
	void close(bool rings_locked = false);

	// LoopWatch (a loop ring, on its loop thread).
	void loop_readable() override;
	void loop_ending() override;

private:
	uint32_t take_slot();
	void start(uint32_t i, BsIo *io);
	static void advance(Slot &s, uint64_t n);
	int pick_fd(uint64_t off, const iovec *v, size_t n);
	io_uring_sqe *get_sqe();
	void prep(uint32_t i);
	void flush_sq();
	static void flush_at_turn_end(void *ring); // the deferred flush_sq of a loop ring
	void cancel_deferred_flush();              // the ring goes before its turn ends
	void complete(uint32_t i, int res, Finished *out, unsigned *nout);
	static void zero_rest(Slot &s);
	void release(uint32_t i);
	// Reaps what the CQ holds, up to one batch, under lock_; *stop: the stop NOP came.
	unsigned reap_batch(Finished *out, unsigned *nout, bool *stop);
	void wake_self(); // a loop ring: come back on the next turn (its eventfd)
	void reaper();    // the shared ring's completion thread

	const std::shared_ptr<FileDev> dev_; // the file (shared with the backstore's other rings)
	EventLoop *const loop_;              // the owning loop, or nullptr (the shared ring)
	io_uring ring_{};                    // SQ side under lock_; CQ side on the reaping thread
	bool ring_ok_ = false;               // ring_ initialised (init() got that far)
	bool coop_ = false;                  // loop ring set up with IORING_SETUP_COOP_TASKRUN
	int efd_ = -1;                       // loop ring: the eventfd its CQEs signal
	bool watched_ = false;               // loop ring: efd_ added to loop_
	BoundedThread reaper_;               // shared ring: the completion thread
	FileCounters ctr_;                   // this ring's counts

	std::mutex lock_;                     // guards everything below but the atomics
	std::condition_variable idle_;        // signalled when busy_ drops to 0
	std::unique_ptr<Slot[]> slots_;       // queue_depth slots
	uint32_t free_;                       // first free slot, linked by next_free
	uint32_t busy_ = 0;                   // slots holding a request
	BsIo *fifo_head_ = nullptr;           // oldest request waiting for a slot
	BsIo *fifo_tail_ = nullptr;           // newest request waiting for a slot
	bool prepared_ = false;               // SQEs prepared and not yet submitted
	bool flush_deferred_ = false;         // loop ring: flush_sq runs at its loop's turn end
	bool abandoned_ = false;              // drain gave up: no done() for what is left
	std::atomic<bool> sq_pending_{false}; // shared: a submit left SQEs behind; thread retries
};

} // namespace ulp::scsi
