// SPDX-License-Identifier: MIT
// scsi/bs_rbd.cc - the rbd backstore: a Ceph RBD image through librbd's asynchronous calls
// (tcmu-runner's rbd handler and tgt's bs_rbd do the same from LIO and tgtd).
//
// The client. LUs of one group (RbdConfig::group) share one RADOS client (rados_t): one
// connection to the monitors and OSDs, and one identity that Ceph can blocklist, so that a
// gateway fences or is fenced per group, not per LU nor per process. A client lives while
// a backstore of its group does (rados_client.h).
//
// Semantics (see backstore.h for the contract):
//   - rbd_cache off: librbd completes a write when the OSDs have it, so GOOD means
//     durable, FUA needs nothing more, and there is no volatile cache to report
//     (write_cache() false; Flush still goes to librbd, cheap with no cache).
//   - Unmap and WriteZeroes are both rbd_aio_write_zeroes: in librbd 16 that is a discard
//     that zeroes the parts of objects it does not cover whole (rbd_aio_discard would
//     skip them, rbd_skip_partial_discard, and leave old data to be read back). Whole
//     objects are deleted, so the optimal unmap granularity is the object size.
//   - WRITE SAME: rbd_aio_writesame, the block crossing the network once; librbd
//     refuses (-EINVAL) a length the block does not divide, which the core never sends.
//   - COMPARE AND WRITE: rbd_aio_compare_and_write, atomic in the OSD against every
//     gateway, where librbd 16 takes it: within one 512-byte sector (so: LUs of 512-byte
//     blocks); the mismatch offset librbd reports is an image offset, made relative.
//   - WRITE ATOMIC: one write within one object is one OSD operation, applied whole or
//     not at all; RbdConfig::atomic_unit (a power of two up to the stripe unit) is the
//     alignment and the longest length the Block Limits page reports, so that none
//     crosses an object.
//   - Timeouts: rados_osd_op_timeout and client_mount_timeout are RbdConfig::timeout_s,
//     so that an OSD that does not answer fails the request (-ETIMEDOUT, which the core
//     answers BUSY for the initiator to retry) instead of hanging the LU's commands
//     forever; only the commands of this LU that met the OSD fail, nothing is torn down.
//   - Fenced (blocklisted, -EBLOCKLISTED which is -ESHUTDOWN): -ESHUTDOWN from then on for
//     every request (bs_rbd_queue.cc), never GOOD; the core answers NOT READY, TARGET PORT
//     IN UNAVAILABLE STATE, which a multipath initiator retries through another gateway
//     (a MEDIUM ERROR would reach its application: the write did not land, and may).
//   - Gateway mode (managed_lock): a write that reaches librbd while this client does not
//     hold the image's exclusive lock fails -EROFS in librbd without taking effect. That is
//     a group moving between gateways (a drain let the lock go under a command that
//     passed the port's ALUA check before it turned transitioning), never a write-
//     protected medium: -ENOLCK, which the core answers NOT READY, ASYMMETRIC ACCESS STATE
//     TRANSITION (SPC-4 5.15.2.6), for the initiator to retry through the new owner.
//
// Threading: scsi/bs_rbd_queue.h. librbd's callback thread only hands each completion to
// the thread that submitted it - its event loop, or the backstore's completion thread for a
// thread without one - and done() runs there.
#include "core/bounded_thread.h"
#include "core/log.h"
#include "core/thread_name.h"
#include "scsi/bs_internal.h"
#include "scsi/bs_rbd_queue.h"
#include "scsi/rados_client.h"

#include <rados/librados.h>
#include <rbd/librbd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace ulp::scsi
{

namespace
{

// The longest COMPARE AND WRITE librbd 16 performs, bytes, and the boundary it may not
// cross: one 512-byte sector.
constexpr uint32_t kRbdCawSector = 512;

// The most objects one WriteSame spans. librbd 16 takes a writesame of any length that the
// block divides (4 GiB and more, tried on 16.2.15) but sends an operation to every object
// of it at once, through the group's RADOS client, whose objecter lets 1024 operations be
// in flight (objecter_inflight_ops) for every LU of the group together: a bound keeps one
// WRITE SAME from taking most of that. The core splits longer ranges (sbc_write_same.cc).
constexpr uint64_t kRbdWriteSameObjects = 32;

// How often the allocation walk runs again (bs_rbd_alloc.h): the bound on how long a write
// by another gateway, or an unmap this one could not account for, goes unseen by GET LBA
// STATUS. A walk that took long waits ten times as long as it took instead.
constexpr auto kAllocWalkEvery = std::chrono::seconds(60);

class RbdBackstore final : public Backstore
{
public:
	RbdBackstore(const BackstoreConfig &cfg, uint64_t size, std::shared_ptr<RadosClient> client,
	             rados_ioctx_t ioctx, std::shared_ptr<RbdDev> dev, std::string identity)
	    : Backstore("rbd", size, cfg.queue_depth), client_(std::move(client)), ioctx_(ioctx),
	      dev_(std::move(dev)), read_only_(cfg.read_only), identity_(std::move(identity)),
	      atomic_unit_(cfg.rbd.atomic_unit)
	{
	}

	// Second phase: the shared queue and its completion thread, and the watch on the
	// image's header (resizes). 0 or a negative errno.
	int init(std::string *why)
	{
		shared_ = std::make_unique<RbdQueue>(dev_, nullptr);
		if (int r = shared_->init(why); r < 0)
			return r;
		// librbd calls this on its own thread: it only wakes our completion thread and the
		// allocation walker (a resize outside changes what there is to walk).
		auto cb = [](void *arg) {
			auto *self = static_cast<RbdBackstore *>(arg);
			self->shared_->notify_storage_changed();
			self->want_walk();
		};
		walker_.start([this] { walk_loop(); });
		if (int r = rbd_update_watch(dev_->image, &watch_, cb, this); r < 0) {
			// Not fatal: resizes outside are then seen on SIGHUP or `ulpctl lun
			// rescan`.
			ULP_LOG(Warn, Scsi,
			        "{}no watch on the image header ({}): a resize outside is "
			        "seen only on a rescan",
			        dev_->who, rados_strerror(r));
		} else {
			watching_ = true;
		}
		return 0;
	}

	void on_storage_change(std::function<void()> changed) override
	{
		std::lock_guard g(dev_->notify_lock); // waits for a call that runs
		dev_->storage_changed = std::move(changed);
	}

	~RbdBackstore() override;

	bool can_unmap() const override { return true; }
	bool write_cache() const override { return false; }
	uint32_t unmap_granularity() const override
	{
		return static_cast<uint32_t>(std::min<uint64_t>(dev_->obj_size, 1u << 31));
	}

	// COMPARE AND WRITE in the OSD: rbd_aio_compare_and_write, one object operation
	// (cmpext + write), atomic against every client of the image. librbd 16 takes one
	// only within a 512-byte sector (ImageCompareAndWriteRequest refuses longer ones,
	// -EINVAL): with 512-byte blocks every COMPARE AND WRITE of the core's one block is
	// done in the OSD; submit() declines (-EOPNOTSUPP) anything else, and the core
	// compares and writes itself, atomic against this gateway only (logged at open).
	uint32_t compare_and_write_max() const override { return kRbdCawSector; }

	// WRITE SAME: rbd_aio_writesame, the block sent once and replicated by the OSDs
	// (CEPH_OSD_OP_WRITESAME per object), up to kRbdWriteSameObjects objects a request.
	uint64_t write_same_max() const override { return dev_->obj_size * kRbdWriteSameObjects; }

	// WRITE ATOMIC: librbd turns a write within one object into one operation on it, which
	// the OSD applies whole or not at all, and which no read of the object sees half of.
	// The atomic unit (a power of two no larger than the stripe unit, so within one
	// object) is both the alignment and the longest length: no atomic write crosses an
	// object.
	uint32_t atomic_write_max() const override { return atomic_unit_; }
	uint32_t atomic_write_align() const override { return atomic_unit_; }

	void submit(BsIo *io) override
	{
		const uint64_t sz = size();
		int r = io->op == BsOp::CompareAndWrite ? bs_check_caw(sz, io)
		        : io->op == BsOp::WriteSame ? bs_check_write_same(sz, io, write_same_max())
		                                    : bs_check_io(sz, io);
		if (!r && io->op == BsOp::CompareAndWrite &&
		    (io->length > kRbdCawSector ||
		     io->offset / kRbdCawSector != (io->offset + io->length - 1) / kRbdCawSector))
			r = -EOPNOTSUPP;
		// The core sends no atomic write across a unit (sbc_atomic.cc); one that did
		// would be two object operations, so it is refused rather than torn.
		if (!r && io->atomic && io->length &&
		    (!atomic_unit_ ||
		     io->offset / atomic_unit_ != (io->offset + io->length - 1) / atomic_unit_))
			r = -EINVAL;
		if (r < 0) {
			io->done(io, r);
			return;
		}
		if (read_only_ && io->op != BsOp::Read && io->op != BsOp::Flush) {
			io->done(io, -EROFS);
			return;
		}
		if (dev_->fenced.load(std::memory_order_relaxed)) {
			io->done(io, -ESHUTDOWN); // blocklisted: said once, when it was found
			return;
		}
		if (dev_->stopping.load(std::memory_order_relaxed)) {
			ULP_LOG_RATELIMITED(Error, Scsi, "{}{} submitted during destruction",
			                    dev_->who, bs_op_str(io->op));
			io->done(io, -ESHUTDOWN);
			return;
		}
		RbdQueue *q = RbdQueue::of_this_loop(dev_);
		(q ? q : shared_.get())->submit(io);
	}

	// GET LBA STATUS from the allocation map (bs_rbd_alloc.h): whole objects known
	// deallocated, everything else mapped; everything mapped until the first walk ended.
	// Fenced: a medium error as for every other command (another gateway may own the
	// image now, and what this one knew of it is stale).
	int extent(uint64_t offset, BsExtent *out) override
	{
		const uint64_t sz = size();
		if (offset >= sz)
			return -ERANGE;
		if (dev_->fenced.load(std::memory_order_relaxed))
			return -ESHUTDOWN;
		dev_->alloc.extent(offset, sz, out);
		return 0;
	}

	// Grow or shrink the image itself (rbd_resize); an image resized outside is what
	// storage_size() reports, for the logical unit to take.
	int resize(uint64_t bytes, std::string *why) override
	{
		if (read_only_) {
			if (why)
				*why = dev_->who + "read-only";
			return -EROFS;
		}
		int r = rbd_resize(dev_->image, bytes);
		if (r < 0) {
			if (why)
				*why = dev_->who + "rbd_resize: " + rados_strerror(r);
			return r;
		}
		set_size(bytes);
		dev_->alloc.resize(bytes);
		want_walk();
		return 0;
	}

	int storage_size(uint64_t *bytes, std::string *why) override
	{
		int r = rbd_get_size(dev_->image, bytes);
		if (r < 0 && why)
			*why = dev_->who + "rbd_get_size: " + rados_strerror(r);
		return r;
	}

	void stats(RbdBsStats *s) const
	{
		const RbdDev &d = *dev_;
		s->fenced = d.fenced.load(std::memory_order_relaxed);
		s->inflight = d.inflight.load(std::memory_order_relaxed);
		s->completed = d.completed.load(std::memory_order_relaxed);
		s->errors = d.errors.load(std::memory_order_relaxed);
		s->busy_ns = d.busy_ns.load(std::memory_order_relaxed);
		s->alloc_walks = walks_.load(std::memory_order_relaxed);
	}

	std::string identity() const override { return identity_; }

	// The client's address as the OSDs see it, what `ceph osd blocklist add` takes.
	std::string client_addr() const { return rados_client_addr(client_->cluster); }

	// rbd_bs_lock (bs_internal.h).
	int lock(bool take)
	{
		if (!client_->managed_lock)
			return -EINVAL;
		rbd_image_t img = dev_->image;
		if (!take) {
			int r = rbd_lock_release(img);
			if (r < 0 && r != -EINVAL) // -EINVAL: not held
				ULP_LOG(Warn, Scsi, "{}releasing the exclusive lock: {}", dev_->who,
				        rados_strerror(r));
			return r == -EINVAL ? 0 : r;
		}
		// Held already (librbd may take it by itself, e.g. as the image is created):
		// acquired again all the same, which makes it a managed lock that rbd_lock_release
		// gives up.
		bool owner = false;
		if (int r = lock_owner(&owner); r < 0)
			return r;
		// Another holder, alive or not, would make rbd_lock_acquire wait for its answer
		// (a managed lock is not handed over on request): break it first.
		rbd_lock_mode_t mode{};
		char *owners[4] = {};
		size_t n = 4;
		int r = owner ? -ENOENT : rbd_lock_get_owners(img, &mode, owners, &n);
		if (r == 0) {
			// Never our own: librbd may have taken the lock for this client already (a
			// free lock is taken by the first write, whatever the policy), and breaking
			// it would blocklist ourselves.
			const std::string own = rados_addr_nonce(client_addr());
			for (size_t i = 0; i < n; i++) {
				if (!own.empty() && rados_addr_nonce(owners[i]) == own)
					continue;
				ULP_LOG(Warn, Scsi, "{}breaking {}'s exclusive lock", dev_->who,
				        owners[i]);
				if (int b = rbd_lock_break(img, mode, owners[i]);
				    b < 0 && b != -ENOENT)
					r = b;
			}
			rbd_lock_get_owners_cleanup(owners, n);
			if (r < 0) {
				ULP_LOG(Error, Scsi, "{}breaking the exclusive lock: {}", dev_->who,
				        rados_strerror(r));
				return r;
			}
		} else if (r != -ENOENT) {
			ULP_LOG(Error, Scsi, "{}reading the exclusive lock's owner: {}", dev_->who,
			        rados_strerror(r));
			return r;
		}
		r = rbd_lock_acquire(img, RBD_LOCK_MODE_EXCLUSIVE);
		if (r < 0)
			ULP_LOG(Error, Scsi, "{}taking the exclusive lock: {}", dev_->who,
			        rados_strerror(r));
		else
			ULP_LOG(Info, Scsi, "{}exclusive lock taken", dev_->who);
		return r;
	}

	int lock_owner(bool *owner) const
	{
		int is = 0;
		int r = rbd_is_exclusive_lock_owner(dev_->image, &is);
		*owner = is != 0;
		return r;
	}

private:
	// The allocation walk (bs_rbd_alloc.h), on the walker thread: rbd_diff_iterate2 of the
	// image from its creation, parents included, in whole objects. With the object-map and
	// fast-diff features (among rbd_default_features) librbd answers it from the object map:
	// one read of two bits per object. Without them, or with the map flagged invalid, it asks
	// the OSDs about every object in turn: a round trip per object, minutes for a large image
	// - so it runs off the I/O path, says when it took over a second, and the next waits ten
	// times as long. Returns how long it took.
	std::chrono::milliseconds walk();
	// The walker thread: a walk at once (the map reports everything mapped until it ends),
	// then every kAllocWalkEvery, and soon after want_walk().
	void walk_loop();
	// Ask for a walk soon (a resize). Any thread but the walker's.
	void want_walk();
	void stop_walker();

	std::shared_ptr<RadosClient> client_; // the group's RADOS client
	rados_ioctx_t ioctx_;                 // the pool (and namespace)
	std::shared_ptr<RbdDev> dev_;         // the open image, shared with the queues
	const bool read_only_;                // opened read-only
	const std::string identity_;          // "rbd:FSID/POOL_ID/IMAGE_ID" (identity())
	const uint32_t atomic_unit_;          // bytes: WRITE ATOMIC's alignment and longest; 0 none
	std::unique_ptr<RbdQueue> shared_;    // the queue of threads without an event loop
	uint64_t watch_ = 0;                  // rbd_update_watch's handle
	bool watching_ = false;               // watch_ is registered
	BoundedThread walker_;                // walk_loop()
	std::mutex walk_lock_;                // guards the two below
	std::condition_variable walk_cv_;     // walk_wanted_ or walk_quit_ set
	bool walk_wanted_ = false;            // a walk is asked for
	bool walk_quit_ = false;              // the walker ends
	std::atomic<bool> walk_stop_{false};  // a walk in progress gives up (destruction)
	std::atomic<uint64_t> walks_{0};      // walks the map took (stats)
};

// What the walk's callback fills: per object of the walked size, whether it holds data.
struct RbdWalk {
	uint64_t obj_size;
	std::vector<bool> allocated;
	const std::atomic<bool> *stop;
};

int rbd_walk_cb(uint64_t off, size_t len, int exists, void *arg)
{
	auto *w = static_cast<RbdWalk *>(arg);
	if (w->stop->load(std::memory_order_relaxed))
		return -ECANCELED; // librbd ends the walk with it
	if (!exists || len == 0)
		return 0;
	const uint64_t end =
	    std::min<uint64_t>((off + len - 1) / w->obj_size + 1, w->allocated.size());
	for (uint64_t i = off / w->obj_size; i < end; i++)
		w->allocated[i] = true;
	return 0;
}

std::chrono::milliseconds RbdBackstore::walk()
{
	RbdDev &d = *dev_;
	const auto t0 = std::chrono::steady_clock::now();
	const uint64_t sz = size(); // the map's objects are of this size (not the image's bytes)
	RbdWalk w{d.obj_size, std::vector<bool>((sz + d.obj_size - 1) / d.obj_size), &walk_stop_};
	const uint64_t token = d.alloc.walk_started();
	const int r = rbd_diff_iterate2(d.image, nullptr, 0, sz, 1, 1, rbd_walk_cb, &w);
	// Counted only when the map took it: a walk a resize overtook (the header watch can
	// start one between rbd_resize and the new size) tells nothing of the new objects.
	const bool taken = d.alloc.walk_ended(token, sz, w.allocated, r == 0);
	const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(
	    std::chrono::steady_clock::now() - t0);
	if (taken)
		walks_.fetch_add(1, std::memory_order_relaxed);
	else if (r == 0) // resize() asked for the walk of the new size already
		ULP_LOG(Debug, Scsi, "{}a resize overtook the allocation walk; another follows",
		        d.who);
	else if (r != -ECANCELED)
		ULP_LOG(Warn, Scsi,
		        "{}walking the allocation: {}; GET LBA STATUS keeps what it knew", d.who,
		        rados_strerror(r));
	if (took >= std::chrono::seconds(1))
		ULP_LOG(
		    Info, Scsi,
		    "{}walking the allocation of {} objects took {} ms (no fast-diff object map?)",
		    d.who, w.allocated.size(), took.count());
	return took;
}

void RbdBackstore::walk_loop()
{
	set_thread_name("ulp-rbd-walk");
	std::unique_lock g(walk_lock_);
	auto next = std::chrono::steady_clock::now();
	for (;;) {
		walk_cv_.wait_until(g, next, [&] { return walk_quit_ || walk_wanted_; });
		if (walk_quit_)
			return;
		walk_wanted_ = false;
		g.unlock();
		const auto took = walk();
		g.lock();
		next = std::chrono::steady_clock::now() +
		       std::max<std::chrono::steady_clock::duration>(kAllocWalkEvery, 10 * took);
	}
}

void RbdBackstore::want_walk()
{
	std::lock_guard g(walk_lock_);
	walk_wanted_ = true;
	walk_cv_.notify_one();
}

void RbdBackstore::stop_walker()
{
	walk_stop_.store(true);
	{
		std::lock_guard g(walk_lock_);
		walk_quit_ = true;
		walk_cv_.notify_one();
	}
	walker_.join(log::Sub::Scsi, "an rbd LU's allocation walk (an OSD slow to answer?)");
}

// Destruction: refuse new requests; wait (bounded, logged) until librbd holds no request of
// any queue, delivering this thread's own loop queue's completions here; close each loop
// queue on its loop (bounded); end the shared queue's thread; close the image. A loop queue
// whose loop is ending is closed by that loop's loop_ending() instead (bs_rbd_queue.h).
RbdBackstore::~RbdBackstore()
{
	RbdDev &d = *dev_;
	d.stopping.store(true);
	if (watching_) // waits for a callback that runs; none comes after
		rbd_update_unwatch(d.image, watch_);
	stop_walker(); // before the image closes: the walk uses it
	EventLoop *const here = this_event_loop();
	const auto t0 = std::chrono::steady_clock::now();
	const auto deadline = t0 + d.drain_wait;
	auto logged = t0;
	std::unique_lock g(d.qs_lock);
	auto own = [&]() -> RbdQueue * {
		for (RbdQueue *q : d.loop_qs)
			if (here && q->loop() == here)
				return q;
		return nullptr;
	};
	while (d.inflight.load(std::memory_order_acquire)) {
		if (RbdQueue *q = own()) {
			g.unlock();
			const size_t n = q->reap();
			g.lock();
			if (n)
				continue;
		}
		const auto now = std::chrono::steady_clock::now();
		if (now >= deadline) {
			ULP_LOG(Error, Scsi,
			        "{}{} requests still in librbd after {} s; closing anyway", d.who,
			        d.inflight.load(), d.drain_wait.count());
			break;
		}
		if (now - logged >= std::chrono::seconds(1)) {
			ULP_LOG(Info, Scsi, "{}waiting for {} requests in librbd", d.who,
			        d.inflight.load());
			logged = now;
		}
		d.qs_changed.wait_for(g, std::chrono::milliseconds(own() ? 1 : 100));
	}
	// Each loop queue is closed on its loop; one on this thread's loop, here. A post is
	// made under qs_lock: a loop that is ending cannot finish (its loop_ending() closes
	// the queue, under qs_lock) and be freed while it is posted to.
	const std::vector<RbdQueue *> qs = d.loop_qs;
	for (RbdQueue *q : qs) {
		if (here && q->loop() == here)
			q->close(true);
		else
			q->loop()->post(
			    [q] { q->close(false); }); // false: its loop_ending() closes it
	}
	const auto close_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
	if (!d.qs_changed.wait_until(g, close_deadline, [&] { return d.loop_qs.empty(); }))
		ULP_LOG(Error, Scsi, "{}{} event loops did not close their queues within 10 s",
		        d.who, d.loop_qs.size());
	g.unlock();
	shared_->stop_thread();
	if (shared_->inflight())
		(void)shared_.release(); // librbd may still call back into it: never freed
	rbd_close(d.image);              // waits for what librbd still holds
	d.image = nullptr;
	rados_ioctx_destroy(ioctx_);
}

} // namespace

int rbd_bs_lock(Backstore &bs, bool take)
{
	auto *r = dynamic_cast<RbdBackstore *>(&bs);
	return r ? r->lock(take) : -ENOTSUP;
}

int rbd_bs_lock_owner(const Backstore &bs, bool *owner)
{
	auto *r = dynamic_cast<const RbdBackstore *>(&bs);
	return r ? r->lock_owner(owner) : -ENOTSUP;
}

bool rbd_bs_stats(const Backstore &bs, RbdBsStats *out)
{
	auto *r = dynamic_cast<const RbdBackstore *>(&bs);
	if (!r)
		return false;
	r->stats(out);
	out->client_addr = r->client_addr();
	return true;
}

void rbd_backstore_enable()
{
	set_rbd_backstore_maker(&make_rbd_backstore);
}

std::unique_ptr<Backstore> make_rbd_backstore(const BackstoreConfig &cfg, int *err,
                                              std::string *why)
{
	const RbdConfig &rc = cfg.rbd;
	const std::string name =
	    rc.pool + "/" + (rc.nspace.empty() ? "" : rc.nspace + "/") + rc.image;
	if (rc.pool.empty() || rc.image.empty()) {
		*err = -EINVAL;
		*why = "rbd backstore: pool and image must be set";
		return nullptr;
	}
	if (rc.timeout_s == 0 || rc.timeout_s > 3600) {
		*err = -EINVAL;
		*why = "rbd backstore: timeout " + std::to_string(rc.timeout_s) +
		       " s is outside 1..3600";
		return nullptr;
	}
	if (rc.create && cfg.size == 0) {
		*err = -EINVAL;
		*why = "rbd backstore " + name + ": create needs a size";
		return nullptr;
	}
	if (!rbd_atomic_unit_ok(rc.atomic_unit, cfg.block_size)) {
		*err = -EINVAL;
		*why = "rbd backstore " + name + ": atomic_unit " + std::to_string(rc.atomic_unit) +
		       " is not a power of two of at least the block size (" +
		       std::to_string(cfg.block_size) + "); 0 offers no WRITE ATOMIC";
		return nullptr;
	}
	RadosConfig rcfg;
	rcfg.conf = rc.conf;
	rcfg.client = rc.client;
	rcfg.keyring = rc.keyring;
	rcfg.group = rc.group;
	rcfg.timeout_s = rc.timeout_s;
	rcfg.managed_lock = rc.managed_lock;
	auto client = rados_client_get(rcfg, err, why);
	if (!client)
		return nullptr;

	rados_ioctx_t ioctx = nullptr;
	int r = rados_ioctx_create(client->cluster, rc.pool.c_str(), &ioctx);
	if (r < 0) {
		*err = r;
		*why = "rbd backstore " + name + ": pool '" + rc.pool +
		       "': " + (r == -ENOENT ? std::string("no such pool") : rados_strerror(r));
		return nullptr;
	}
	rados_ioctx_set_namespace(ioctx, rc.nspace.empty() ? nullptr : rc.nspace.c_str());
	auto fail = [&](int e, std::string msg) -> std::unique_ptr<Backstore> {
		rados_ioctx_destroy(ioctx);
		*err = e;
		*why = "rbd backstore " + name + ": " + std::move(msg);
		return nullptr;
	};

	rbd_image_t image = nullptr;
	auto open = [&] {
		return cfg.read_only ? rbd_open_read_only(ioctx, rc.image.c_str(), &image, nullptr)
		                     : rbd_open(ioctx, rc.image.c_str(), &image, nullptr);
	};
	r = open();
	if (r == -ENOENT && rc.create) {
		int order = 0; // the default object size (rbd_default_order: 4 MiB)
		r = rbd_create(ioctx, rc.image.c_str(), cfg.size, &order);
		if (r < 0 && r != -EEXIST) // another gateway may have made it meanwhile
			return fail(r, "rbd_create of " + std::to_string(cfg.size) +
			                   " bytes: " + rados_strerror(r));
		ULP_LOG(Info, Scsi, "rbd backstore {}: created, {} bytes", name, cfg.size);
		r = open();
	}
	if (r < 0)
		return fail(r, r == -ENOENT ? std::string("no such image (create=1 makes it)")
		                            : "rbd_open: " + rados_strerror(r));

	rbd_image_info_t info{};
	r = rbd_stat(image, &info, sizeof(info));
	if (r < 0) {
		rbd_close(image);
		return fail(r, "rbd_stat: " + rados_strerror(r));
	}
	uint64_t size = info.size - info.size % cfg.block_size;
	if (cfg.size && cfg.size != info.size) {
		rbd_close(image);
		return fail(-EINVAL, "the image holds " + std::to_string(info.size) +
		                         " bytes, not the " + std::to_string(cfg.size) +
		                         " configured (leave size out to take the image's)");
	}
	if (size == 0) {
		rbd_close(image);
		return fail(-EINVAL, "the image holds " + std::to_string(info.size) +
		                         " bytes, less than one block of " +
		                         std::to_string(cfg.block_size));
	}
	// The atomic unit within one object: with fancy striping, a stripe unit's bytes are
	// the run that one object holds.
	uint64_t stripe_unit = info.obj_size;
	if (uint64_t su = 0; rbd_get_stripe_unit(image, &su) == 0 && su)
		stripe_unit = su;
	if (rc.atomic_unit > stripe_unit) {
		rbd_close(image);
		return fail(-EINVAL, "atomic_unit " + std::to_string(rc.atomic_unit) +
		                         " is larger than the image's stripe unit " +
		                         std::to_string(stripe_unit) +
		                         ": a write of it could span two objects");
	}
	if (size != info.size)
		ULP_LOG(Warn, Scsi,
		        "rbd backstore {}: {} bytes is not a multiple of the block size {}; the "
		        "last {} bytes are not served",
		        name, info.size, cfg.block_size, info.size - size);
	if (cfg.block_size > kRbdCawSector)
		ULP_LOG(
		    Warn, Scsi,
		    "rbd backstore {}: COMPARE AND WRITE of {}-byte blocks is atomic within this "
		    "gateway only (librbd 16 compares at most 512 bytes in the OSD); use 512-byte "
		    "blocks where several gateways serve the image",
		    name, cfg.block_size);
	ULP_LOG(Info, Scsi, "rbd backstore {}: open, {} bytes, objects of {} bytes{}", name, size,
	        info.obj_size, cfg.read_only ? ", read-only" : "");
	auto dev = std::make_shared<RbdDev>();
	dev->image = image;
	dev->who = "rbd backstore " + name + ": ";
	dev->client = "client." + client->client;
	dev->queue_depth = cfg.queue_depth;
	dev->obj_size = info.obj_size ? info.obj_size : 1;
	dev->drain_wait = std::chrono::seconds(rc.timeout_s + 5);
	dev->managed_lock = rc.managed_lock && !cfg.read_only;
	dev->alloc.init(dev->obj_size, size);
	// The image as every client of the cluster names it: ids, which a rename keeps and a
	// new image of an old name does not.
	char fsid[64] = {}, image_id[64] = {};
	const int64_t pool_id = rados_ioctx_get_id(ioctx);
	std::string identity;
	if (rados_cluster_fsid(client->cluster, fsid, sizeof(fsid) - 1) >= 0 &&
	    rbd_get_id(image, image_id, sizeof(image_id)) == 0 && pool_id >= 0)
		identity = std::string("rbd:") + fsid + "/" + std::to_string(pool_id) + "/" +
		           (rc.nspace.empty() ? "" : rc.nspace + "/") + image_id;
	else
		ULP_LOG(Warn, Scsi,
		        "{}: no cluster, pool or image id: the LU's identity comes from its name",
		        name);
	auto bs = std::make_unique<RbdBackstore>(cfg, size, std::move(client), ioctx, dev,
	                                         std::move(identity));
	if (int e = bs->init(why); e < 0) {
		*err = e;
		*why = dev->who + *why;
		return nullptr; // the destructor closes the image and the pool
	}
	return bs;
}

} // namespace ulp::scsi
