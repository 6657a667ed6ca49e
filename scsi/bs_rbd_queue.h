// SPDX-License-Identifier: MIT
// scsi/bs_rbd_queue.h - the request queues of the rbd backstore (bs_rbd.cc): the slots that
// librbd holds, the FIFO beyond them, and the way each completion gets back to the thread
// that submitted it. Internal to scsi/.
//
// A backstore has one shared queue, whose completions its completion thread ("ulp-bs-rbd")
// delivers, for threads that run no event loop (tests, the loopback fabric); and one queue
// per event-loop thread that submits to it (core/event_loop.h: the TCP workers, cq_poll's
// pollers that run the iSER and SRP connections), made on that thread at its first request,
// whose completions that loop delivers through an eventfd it watches. done() then runs on
// the thread that submitted, as with the file backstore's loop rings (bs_file_ring.h), and a
// worker's I/O shares no lock with another worker's but the allocation map's (below).
//
// librbd calls the completion callback on its own thread, one per image and serialised:
// whatever runs there delays every other completion of the image. The callback only appends
// the slot to its queue's completion list and wakes the queue's reaper - the eventfd is
// written, or the thread notified, only when the list was empty: one wake-up per batch.
//
// Locking. The allocation map's lock (bs_rbd_alloc.h) is the one every queue shares, taken
// for a few instructions as a write or an unmap starts and as it ends. RbdQueue::lock_
// guards a queue's slots, FIFO and completion list; librbd's
// thread takes it once per completion, the submitter once per request, the reaper once per
// batch and once per request it finishes. Nobody holds it across done() or a librbd call.
// RbdDev::qs_lock guards the list of loop queues; taken when a queue is made or closed and
// by the destructor; the order is qs_lock, then a queue's lock_.
//
// Life of a loop queue. Made on its loop thread, listed in RbdDev::loop_qs, found again
// through a thread-local table. Closed on its loop thread by one of: the backstore's
// destructor, which waits (bounded) until librbd holds no request of any queue and then
// posts the close to each loop; or the loop ending (loop_ending()), which first waits
// (bounded) until librbd holds none of this queue's requests, delivering their completions
// there. Every queue holds the RbdDev (shared_ptr): one that closes late touches nothing
// freed. A queue whose requests librbd still holds when its bound runs out is left
// allocated, and logged: librbd will call back into it, so it is never freed.
#pragma once

#include "core/bounded_thread.h"
#include "core/event_loop.h"
#include "scsi/backstore.h"
#include "scsi/bs_rbd_alloc.h"

#include <rbd/librbd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace ulp::scsi
{

// What the queues of one rbd backstore share: the open image, and the list of loop queues.
struct RbdDev {
	rbd_image_t image = nullptr;       // the open image (closed by the backstore, last)
	std::string who;                   // "rbd backstore POOL/IMAGE: ", for messages
	std::string client;                // "client.ID", for messages
	uint32_t queue_depth = 0;          // slots per queue
	uint64_t obj_size = 1;             // bytes: the image's object size
	std::chrono::seconds drain_wait;   // bound on waits for librbd to give requests back:
	                                   // its own timeouts (timeout_s) plus a margin
	bool managed_lock = false;         // gateway mode, writable: librbd's -EROFS means the
	                                   // exclusive lock is not held here (-> -ENOLCK)
	const uint64_t id;                 // unique in the process: the thread-local table's key
	std::atomic<bool> stopping{false}; // destruction started: no request, no new queue
	std::atomic<bool> fenced{false};   // the client was blocklisted: every request fails
	std::atomic<uint32_t> inflight{0}; // slots of every queue that librbd holds or whose
	                                   // completion is not yet delivered
	// Latency of what completed, for stats: requests and their summed time in librbd.
	std::atomic<uint64_t> completed{0}; // requests librbd gave back
	std::atomic<uint64_t> busy_ns{0};   // summed ns from submission to librbd's callback
	std::atomic<uint64_t> errors{0};    // of them, failed
	RbdAllocMap alloc; // what is known of the image's allocation (GET LBA STATUS), kept
	                   // current by the requests as they start and end

	std::mutex notify_lock;                // guards storage_changed; held while it runs
	std::function<void()> storage_changed; // Backstore::on_storage_change's, or empty
	std::mutex qs_lock;                    // guards loop_qs; never per request
	std::condition_variable qs_changed;    // a loop queue closed, or inflight reached 0
	std::vector<class RbdQueue *> loop_qs; // queues open on event loops (each closes itself)

	RbdDev();
};

class RbdQueue;

// One request in librbd's hands. Preallocated per queue slot.
struct RbdSlot {
	RbdQueue *q = nullptr;        // the queue it belongs to (fixed)
	BsIo *io = nullptr;           // the request, while the slot is busy
	int ret = 0;                  // librbd's result, set by the callback
	uint64_t t0_ns = 0;           // steady clock at submission to librbd, ns
	uint64_t mismatch = 0;        // CompareAndWrite: where librbd found the first difference
	RbdAllocMap::UnmapMark unmap; // Unmap, WriteZeroes: the allocation map's mark at start
	RbdSlot *next = nullptr;      // free list or completion list link
};

// A queue: queue_depth slots, a FIFO beyond them, and a completion list that its reaper
// (a loop through an eventfd, or the backstore's completion thread) delivers.
class RbdQueue final : public LoopWatch
{
public:
	// loop: the event loop whose thread alone submits here and delivers the completions,
	// or nullptr (the shared queue, delivered by its own thread).
	RbdQueue(std::shared_ptr<RbdDev> dev, EventLoop *loop);
	~RbdQueue() override;
	RbdQueue(const RbdQueue &) = delete;
	RbdQueue &operator=(const RbdQueue &) = delete;

	// The calling thread's loop queue for dev, made (and listed) on first use; nullptr on a
	// thread without an event loop, while dev is stopping, or when no queue could be made
	// there (logged; that thread then uses the shared queue).
	static RbdQueue *of_this_loop(const std::shared_ptr<RbdDev> &dev);

	// The eventfd, watched by the loop (loop queue, on its thread), or the completion
	// thread (shared queue). 0, or a negative errno with *why.
	int init(std::string *why);
	// Starts io (checked by the caller), or queues it behind the others beyond the queue
	// depth. Shared queue: any thread; loop queue: its loop thread.
	void submit(BsIo *io);
	// librbd's thread (or a submitter whose call librbd refused): s's request is done.
	void completed(RbdSlot *s);

	EventLoop *loop() const { return loop_; }
	// Requests librbd holds or whose completion is not yet delivered.
	uint32_t inflight();
	// Delivers what completed, on the calling thread (the reaper's, or the destructor's
	// on this queue's own loop). Returns how many.
	size_t reap();
	// Loop queue, on its thread: wait (bounded by dev's drain_wait, delivering completions)
	// until librbd holds none of its requests, stop watching, unlist, free - or, when the
	// bound runs out, leave it allocated and say so. qs_locked: the caller holds qs_lock.
	void close(bool qs_locked);
	// Shared queue: end the completion thread (after the backstore's drain).
	void stop_thread();
	// Shared queue, any thread (librbd's watch callback): run dev's storage_changed on the
	// completion thread soon (several calls before it runs make one).
	void notify_storage_changed();

	void loop_readable() override;
	void loop_ending() override;

private:
	void start(RbdSlot *s, BsIo *io);
	void finish(RbdSlot *s);
	void run(); // the shared queue's completion thread

	const std::shared_ptr<RbdDev> dev_; // the image, shared by the queues
	EventLoop *const loop_;             // the loop that reaps, or nullptr (shared queue)
	int efd_ = -1;                      // loop queue: the eventfd its loop watches
	bool watched_ = false;              // efd_ is added to loop_ (its thread only)
	std::vector<RbdSlot> slots_;        // queue_depth of them, fixed

	std::mutex lock_;              // guards everything below
	RbdSlot *free_ = nullptr;      // slots librbd does not hold
	uint32_t inflight_ = 0;        // slots busy: in librbd or completed, not delivered
	BsIo *fifo_ = nullptr;         // requests waiting for a slot, oldest first (bs_next)
	BsIo *fifo_tail_ = nullptr;    // the newest of them
	RbdSlot *done_ = nullptr;      // completed, not yet delivered, in completion order
	RbdSlot *done_tail_ = nullptr; // the newest of them
	bool quit_ = false;            // shared queue: the completion thread ends
	bool changed_ = false;         // shared queue: storage_changed is to run
	std::condition_variable cv_;   // shared queue: done_ or quit_ changed
	BoundedThread thread_;         // shared queue: the completion thread (run())
};

} // namespace ulp::scsi
