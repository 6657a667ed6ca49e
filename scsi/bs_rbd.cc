// SPDX-License-Identifier: MIT
// scsi/bs_rbd.cc - the rbd backstore: a Ceph RBD image through librbd's asynchronous calls
// (tcmu-runner's rbd handler and tgt's bs_rbd do the same from LIO and tgtd).
//
// The client. LUs of one group (RbdConfig::group) share one RADOS client (rados_t): one
// connection to the monitors and OSDs, and one identity that Ceph can blocklist, so that a
// gateway fences or is fenced per group, not per LU nor per process. A client lives while
// a backstore of its group does (RbdClient, by shared_ptr from the registry's weak_ptr).
//
// Semantics (see backstore.h for the contract):
//   - rbd_cache off: librbd completes a write when the OSDs have it, so GOOD means
//     durable, FUA needs nothing more, and there is no volatile cache to report
//     (write_cache() false; Flush still goes to librbd, cheap with no cache).
//   - Unmap and WriteZeroes are both rbd_aio_write_zeroes: in librbd 16 that is a discard
//     that zeroes the parts of objects it does not cover whole (rbd_aio_discard would
//     skip them, rbd_skip_partial_discard, and leave old data to be read back). Whole
//     objects are deleted, so the optimal unmap granularity is the object size.
//   - Timeouts: rados_osd_op_timeout and client_mount_timeout are RbdConfig::timeout_s,
//     so that an OSD that does not answer fails the request (-ETIMEDOUT, reported as
//     -EIO) instead of hanging the LU's commands forever.
//
// Threading. librbd calls a completion's callback on its own thread, serialised per image;
// whatever runs there delays every other completion of the image. The callback only puts
// the request on this backstore's completion list and wakes its completion thread
// ("ulp-bs-rbd"), which calls done(). Requests beyond queue_depth wait in a FIFO (in
// order) and are started by the completion thread as slots free.
#include "core/log.h"
#include "core/thread_name.h"
#include "scsi/bs_internal.h"

#include <rados/librados.h>
#include <rbd/librbd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
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

constexpr auto kRbdDrainWait = std::chrono::seconds(10); // bound on destruction's wait

std::string rbd_strerror(int e)
{
	return std::strerror(e < 0 ? -e : e);
}

// One RADOS client (a connection as client.ID), shared by the LUs of one group.
struct RbdClient {
	rados_t cluster = nullptr;
	std::string conf;    // what it was made with: a second LU of the group must agree
	std::string client;  // the client id
	std::string keyring; // the keyring path
	~RbdClient()
	{
		if (cluster)
			rados_shutdown(cluster);
	}
};

std::mutex g_clients_lock;                                 // guards g_clients
std::map<std::string, std::weak_ptr<RbdClient>> g_clients; // group -> its client

int conf_set(rados_t c, const char *k, const std::string &v, std::string *why)
{
	int r = rados_conf_set(c, k, v.c_str());
	if (r < 0)
		*why = std::string("rbd: setting ") + k + "=" + v + ": " + rbd_strerror(r);
	return r;
}

// The group's client, connected; made on first use. Connecting blocks for up to
// timeout_s (client_mount_timeout) when the monitors do not answer; it says so first.
std::shared_ptr<RbdClient> get_client(const RbdConfig &cfg, int *err, std::string *why)
{
	const std::string group = cfg.group.empty() ? "default" : cfg.group;
	const std::string id = cfg.client.empty() ? "admin" : cfg.client;
	std::lock_guard g(g_clients_lock);
	if (auto c = g_clients[group].lock()) {
		if (c->conf != cfg.conf || c->client != id || c->keyring != cfg.keyring) {
			*err = -EINVAL;
			*why = "rbd: group " + group + " is already connected as client." +
			       c->client + " (conf '" + c->conf + "', keyring '" + c->keyring +
			       "'); a LU of it must use the same client, conf and keyring";
			return nullptr;
		}
		return c;
	}
	auto c = std::make_shared<RbdClient>();
	c->conf = cfg.conf;
	c->client = id;
	c->keyring = cfg.keyring;
	int r = rados_create(&c->cluster, id.c_str());
	if (r < 0) {
		c->cluster = nullptr;
		*err = r;
		*why = "rbd: rados_create(client." + id + "): " + rbd_strerror(r);
		return nullptr;
	}
	r = rados_conf_read_file(c->cluster, cfg.conf.empty() ? nullptr : cfg.conf.c_str());
	if (r < 0) {
		*err = r;
		*why = "rbd: reading ceph.conf '" +
		       (cfg.conf.empty() ? "(default search)" : cfg.conf) + "': " + rbd_strerror(r);
		return nullptr;
	}
	const std::string t = std::to_string(cfg.timeout_s);
	if ((!cfg.keyring.empty() && (r = conf_set(c->cluster, "keyring", cfg.keyring, why)) < 0) ||
	    (r = conf_set(c->cluster, "rbd_cache", "false", why)) < 0 ||
	    (r = conf_set(c->cluster, "client_mount_timeout", t, why)) < 0 ||
	    (r = conf_set(c->cluster, "rados_mon_op_timeout", t, why)) < 0 ||
	    (r = conf_set(c->cluster, "rados_osd_op_timeout", t, why)) < 0) {
		*err = r;
		return nullptr;
	}
	ULP_LOG(Info, Scsi,
	        "rbd: connecting to the Ceph cluster as client.{} (group {}, conf {}; up to {} s)",
	        id, group, cfg.conf.empty() ? "default" : cfg.conf, cfg.timeout_s);
	const auto t0 = std::chrono::steady_clock::now();
	r = rados_connect(c->cluster);
	const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
	                    std::chrono::steady_clock::now() - t0)
	                    .count();
	if (r < 0) {
		*err = r;
		*why =
		    "rbd: cannot connect to the Ceph cluster as client." + id + " after " +
		    std::to_string(ms) + " ms: " + rbd_strerror(r) +
		    (r == -ETIMEDOUT ? " (no monitor answered: is the cluster up, mon_host right?)"
		                     : "");
		return nullptr;
	}
	ULP_LOG(Info, Scsi, "rbd: connected as client.{} in {} ms (instance {})", id, ms,
	        rados_get_instance_id(c->cluster));
	g_clients[group] = c;
	return c;
}

class RbdBackstore;

// A request in librbd's hands: one of queue_depth slots, made at open (the data path
// allocates nothing of its own).
struct RbdReq {
	RbdBackstore *bs = nullptr;
	BsIo *io = nullptr;
	int ret = 0;                              // librbd's result, set by the callback
	RbdReq *next = nullptr;                   // the free list or the completion list
	std::chrono::steady_clock::time_point t0; // when it went to librbd
};

void rbd_cb(rbd_completion_t c, void *arg);

class RbdBackstore final : public Backstore
{
public:
	RbdBackstore(const BackstoreConfig &cfg, uint64_t size, std::shared_ptr<RbdClient> client,
	             rados_ioctx_t ioctx, rbd_image_t image, uint64_t obj_size)
	    : Backstore("rbd", size, cfg.queue_depth), client_(std::move(client)), ioctx_(ioctx),
	      image_(image), read_only_(cfg.read_only),
	      obj_size_(static_cast<uint32_t>(std::min<uint64_t>(obj_size, 1u << 31))),
	      who_("rbd backstore " + cfg.rbd.pool + "/" +
	           (cfg.rbd.nspace.empty() ? "" : cfg.rbd.nspace + "/") + cfg.rbd.image + ": "),
	      slots_(cfg.queue_depth)
	{
		for (RbdReq &r : slots_) {
			r.bs = this;
			r.next = free_;
			free_ = &r;
		}
		thread_ = std::thread([this] { run(); });
	}

	~RbdBackstore() override
	{
		std::unique_lock g(lock_);
		stopping_ = true;
		if (!cv_idle_.wait_for(g, kRbdDrainWait,
		                       [this] { return inflight_ == 0 && !fifo_; }))
			ULP_LOG(
			    Error, Scsi,
			    "{}{} requests still in librbd after {} s; closing the image anyway",
			    who_, inflight_, kRbdDrainWait.count());
		quit_ = true;
		cv_work_.notify_all();
		g.unlock();
		thread_.join();
		rbd_close(image_); // waits for librbd's own in-flight requests
		rados_ioctx_destroy(ioctx_);
	}

	bool can_unmap() const override { return true; }
	bool write_cache() const override { return false; }
	uint32_t unmap_granularity() const override { return obj_size_; }

	void submit(BsIo *io) override
	{
		if (int r = bs_check_io(size(), io); r < 0) {
			io->done(io, r);
			return;
		}
		if (read_only_ && io->op != BsOp::Read && io->op != BsOp::Flush) {
			io->done(io, -EROFS);
			return;
		}
		RbdReq *r;
		{
			std::lock_guard g(lock_);
			if (stopping_) {
				r = nullptr;
			} else if (!free_) {
				// Wait, in order, for a slot (FIFO through bs_next).
				io->bs_next = nullptr;
				if (fifo_tail_)
					fifo_tail_->bs_next = io;
				else
					fifo_ = io;
				fifo_tail_ = io;
				return;
			} else {
				r = free_;
				free_ = r->next;
				inflight_++;
			}
		}
		if (!r) {
			ULP_LOG_RATELIMITED(Error, Scsi, "{}{} submitted during destruction", who_,
			                    bs_op_str(io->op));
			io->done(io, -ESHUTDOWN);
			return;
		}
		start(r, io);
	}

	// GET LBA STATUS: not yet from the image's allocation (a cached object map walk);
	// everything reads as mapped, as the contract allows for a backstore that cannot tell.
	int extent(uint64_t offset, BsExtent *out) override
	{
		const uint64_t sz = size();
		if (offset >= sz)
			return -ERANGE;
		out->mapped = true;
		out->length = sz - offset;
		return 0;
	}

	// Grow or shrink the image itself (rbd_resize); an image shrunk outside stays as it is.
	int resize(uint64_t bytes, std::string *why) override
	{
		if (read_only_) {
			if (why)
				*why = who_ + "read-only";
			return -EROFS;
		}
		int r = rbd_resize(image_, bytes);
		if (r < 0) {
			if (why)
				*why = who_ + "rbd_resize: " + rbd_strerror(r);
			return r;
		}
		set_size(bytes);
		return 0;
	}

	int storage_size(uint64_t *bytes, std::string *why) override
	{
		int r = rbd_get_size(image_, bytes);
		if (r < 0 && why)
			*why = who_ + "rbd_get_size: " + rbd_strerror(r);
		return r;
	}

	// librbd's thread: hand r to the completion thread.
	void completed(RbdReq *r)
	{
		std::lock_guard g(lock_);
		r->next = nullptr;
		if (done_tail_)
			done_tail_->next = r;
		else
			done_ = r;
		done_tail_ = r;
		cv_work_.notify_one();
	}

private:
	void start(RbdReq *r, BsIo *io)
	{
		r->io = io;
		r->ret = 0;
		r->t0 = std::chrono::steady_clock::now();
		rbd_completion_t c;
		int ret = rbd_aio_create_completion(r, rbd_cb, &c);
		if (ret < 0) {
			r->ret = ret;
			completed(r);
			return;
		}
		const int iovcnt = static_cast<int>(io->iov.size());
		switch (io->op) {
		case BsOp::Read:
			ret = rbd_aio_readv(image_, io->iov.data(), iovcnt, io->offset, c);
			break;
		case BsOp::Write:
			ret = rbd_aio_writev(image_, io->iov.data(), iovcnt, io->offset, c);
			break;
		case BsOp::Flush:
			ret = rbd_aio_flush(image_, c);
			break;
		case BsOp::Unmap:
		case BsOp::WriteZeroes:
			ret = rbd_aio_write_zeroes(image_, io->offset, io->length, c, 0, 0);
			break;
		default:
			ret = -EINVAL;
		}
		if (ret < 0) { // refused at once: the callback will not run
			rbd_aio_release(c);
			r->ret = ret;
			completed(r);
		}
	}

	// The completion thread: done() for what librbd finished; FIFO requests into the slots.
	void run()
	{
		set_thread_name("ulp-bs-rbd");
		std::unique_lock g(lock_);
		for (;;) {
			cv_work_.wait(g, [this] { return done_ || quit_; });
			if (!done_ && quit_)
				return;
			RbdReq *list = done_;
			done_ = done_tail_ = nullptr;
			g.unlock();
			while (list) {
				RbdReq *r = list;
				list = r->next;
				finish(r);
			}
			g.lock();
		}
	}

	// On the completion thread: r's request is done; give its slot to the next waiter.
	void finish(RbdReq *r)
	{
		BsIo *io = r->io;
		int ret = r->ret;
		if (io->op == BsOp::Read && ret >= 0 && static_cast<uint64_t>(ret) != io->length) {
			// librbd reads zeros past what was written and never short; a short count
			// here is a bug somewhere: never hand back a buffer partly filled.
			ULP_LOG_RATELIMITED(Error, Scsi, "{}read of {} bytes at {} returned {}",
			                    who_, io->length, io->offset, ret);
			ret = -EIO;
		}
		ret = map_error(io, ret > 0 ? 0 : ret);
		BsIo *next = nullptr;
		{
			std::lock_guard g(lock_);
			if (fifo_) { // accepted before any stop: they run
				next = fifo_;
				fifo_ = next->bs_next;
				if (!fifo_)
					fifo_tail_ = nullptr;
			} else {
				r->next = free_;
				free_ = r;
				inflight_--;
			}
		}
		io->done(io, ret);
		if (next)
			start(r, next);
		else
			cv_idle_.notify_all();
	}

	// librbd's errors as the contract's: -ERANGE, -EROFS, -ENOSPC as they are; the rest is
	// a medium error for the initiator, logged (rate limited) with what it was.
	int map_error(const BsIo *io, int ret)
	{
		if (ret == 0 || ret == -ERANGE || ret == -EROFS || ret == -ENOSPC || ret == -EINVAL)
			return ret;
		if (ret == -ESHUTDOWN) // EBLOCKLISTED: this client is fenced off the cluster
			ULP_LOG_RATELIMITED(
			    Error, Scsi,
			    "{}client.{} is blocklisted by the cluster: {} at {} fails", who_,
			    client_->client, bs_op_str(io->op), io->offset);
		else
			ULP_LOG_RATELIMITED(Error, Scsi, "{}{} of {} bytes at {}: {}", who_,
			                    bs_op_str(io->op), io->length, io->offset,
			                    rbd_strerror(ret));
		return -EIO;
	}

	std::shared_ptr<RbdClient> client_; // the group's RADOS client
	rados_ioctx_t ioctx_;               // the pool (and namespace)
	rbd_image_t image_;                 // the open image
	const bool read_only_;              // opened read-only
	const uint32_t obj_size_;           // bytes: the image's object size (unmap granularity)
	const std::string who_;             // "rbd backstore POOL/IMAGE: ", for messages

	std::vector<RbdReq> slots_; // queue_depth requests, fixed at open
	std::mutex lock_;           // guards everything below
	RbdReq *free_ = nullptr;    // slots not in librbd
	uint32_t inflight_ = 0;     // slots in librbd or on the completion list
	BsIo *fifo_ = nullptr;      // requests waiting for a slot, oldest first (bs_next)
	BsIo *fifo_tail_ = nullptr; // the newest waiter
	RbdReq *done_ = nullptr;    // completed by librbd, for the completion thread, in order
	RbdReq *done_tail_ = nullptr;
	bool stopping_ = false;           // destruction began: refuse new requests
	bool quit_ = false;               // the completion thread ends
	std::condition_variable cv_work_; // done_ or quit_ changed
	std::condition_variable cv_idle_; // inflight_ went down
	std::thread thread_;              // the completion thread (run())
};

void rbd_cb(rbd_completion_t c, void *arg)
{
	auto *r = static_cast<RbdReq *>(arg);
	r->ret = static_cast<int>(rbd_aio_get_return_value(c));
	rbd_aio_release(c);
	r->bs->completed(r);
}

} // namespace

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
	auto client = get_client(rc, err, why);
	if (!client)
		return nullptr;

	rados_ioctx_t ioctx = nullptr;
	int r = rados_ioctx_create(client->cluster, rc.pool.c_str(), &ioctx);
	if (r < 0) {
		*err = r;
		*why = "rbd backstore " + name + ": pool '" + rc.pool +
		       "': " + (r == -ENOENT ? std::string("no such pool") : rbd_strerror(r));
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
			                   " bytes: " + rbd_strerror(r));
		ULP_LOG(Info, Scsi, "rbd backstore {}: created, {} bytes", name, cfg.size);
		r = open();
	}
	if (r < 0)
		return fail(r, r == -ENOENT ? std::string("no such image (create=1 makes it)")
		                            : "rbd_open: " + rbd_strerror(r));

	rbd_image_info_t info{};
	r = rbd_stat(image, &info, sizeof(info));
	if (r < 0) {
		rbd_close(image);
		return fail(r, "rbd_stat: " + rbd_strerror(r));
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
	if (size != info.size)
		ULP_LOG(Warn, Scsi,
		        "rbd backstore {}: {} bytes is not a multiple of the block size {}; the "
		        "last {} bytes are not served",
		        name, info.size, cfg.block_size, info.size - size);
	ULP_LOG(Info, Scsi, "rbd backstore {}: open, {} bytes, objects of {} bytes{}", name, size,
	        info.obj_size, cfg.read_only ? ", read-only" : "");
	return std::make_unique<RbdBackstore>(cfg, size, std::move(client), ioctx, image,
	                                      info.obj_size);
}

} // namespace ulp::scsi
