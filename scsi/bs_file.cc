// SPDX-License-Identifier: MIT
// scsi/bs_file.cc - the file and block backstores: a regular file or a block device driven
// through io_uring (the kernel's target_core_file and target_core_iblock, asynchronous).
//
// The rings are scsi/bs_file_ring.h's: a thread that runs an event loop (a TCP worker)
// submits to a ring of its own and reaps it on its loop, so done() runs on the thread that
// submitted; any other thread submits to the shared ring, which the completion thread
// ("ulp-bs-reap") reaps. A buffered read that the page cache holds whole skips both: it is
// copied with preadv2(RWF_NOWAIT) inside submit() (read_cached).
//
// Two descriptors: an O_DIRECT one, used for every read or write whose offset, length and
// buffers meet the device's direct-I/O alignment, and a buffered one for the rest (the
// core's buffers are registered memory and aligned, the initiator's odd requests are not).
// The kernel keeps the two coherent: direct I/O writes back and invalidates the page cache
// over its range first.
#include "core/log.h"
#include "scsi/bs_file_ring.h"

#include <fcntl.h>
#include <linux/falloc.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

namespace ulp::scsi
{

namespace
{

std::string errstr(int e)
{
	return std::strerror(e);
}

// A number from a sysfs attribute, or 0.
uint64_t sysfs_u64(const std::string &path)
{
	FILE *f = std::fopen(path.c_str(), "re");
	if (!f)
		return 0;
	unsigned long long v = 0;
	if (std::fscanf(f, "%llu", &v) != 1)
		v = 0;
	std::fclose(f);
	return v;
}

// A queue attribute of the block device dev (a partition's queue is its disk's).
uint64_t queue_attr(dev_t dev, const char *attr)
{
	std::string base =
	    "/sys/dev/block/" + std::to_string(major(dev)) + ":" + std::to_string(minor(dev));
	std::string p = base + "/queue/" + attr;
	if (access(p.c_str(), R_OK) != 0)
		p = base + "/../queue/" + attr;
	return sysfs_u64(p);
}

class FileBackstore final : public Backstore
{
public:
	FileBackstore(const BackstoreConfig &cfg, uint64_t size, std::shared_ptr<FileDev> dev)
	    : Backstore(cfg.kind, size, cfg.queue_depth), dev_(std::move(dev))
	{
		FileDev &d = *dev_;
		d.kind = cfg.kind;
		d.path = cfg.path;
		d.bs = this;
		d.block = cfg.kind == "block";
		d.read_only = cfg.read_only;
		d.write_cache = cfg.write_cache;
		d.queue_depth = cfg.queue_depth;
	}

	// Second phase: the shared ring and its completion thread. 0 or a negative errno.
	int init(std::string *why)
	{
		shared_ = std::make_unique<FileRing>(dev_, nullptr);
		return shared_->init(why);
	}

	~FileBackstore() override;

	bool can_unmap() const override { return dev_->can_unmap; }
	bool write_cache() const override { return dev_->write_cache; }

	void submit(BsIo *io) override
	{
		if (dev_->stopping.load(std::memory_order_relaxed)) {
			ULP_LOG_RATELIMITED(Error, Scsi, "{}{} submitted during destruction",
			                    dev_->who(), bs_op_str(io->op));
			io->done(io, -ESHUTDOWN);
			return;
		}
		FileRing *r = FileRing::of_this_loop(dev_);
		if (!r)
			r = shared_.get();
		if (io->op == BsOp::Read && read_cached(io, r->counters()))
			return;
		r->submit(io);
	}

	int usage(BsUsage *out) override
	{
		if (dev_->block)
			return -EOPNOTSUPP; // a device does not say what it has allocated
		struct stat st;
		if (fstat(dev_->fd.get(), &st) < 0)
			return -errno;
		// st_blocks counts 512-byte units whatever the file system's block (stat(2)).
		out->used = static_cast<uint64_t>(st.st_blocks) * 512;
		struct statvfs vfs;
		if (fstatvfs(dev_->fd.get(), &vfs) == 0) {
			out->available = static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize;
			out->has_available = true;
			out->available_shared = true;
		}
		return 0;
	}

	int extent(uint64_t offset, BsExtent *out) override
	{
		const uint64_t sz = size(); // one load: a resize may run beside us
		if (offset >= sz)
			return -ERANGE;
		out->mapped = true;
		out->length = sz - offset;
		if (dev_->block)
			return 0; // a device does not say what it has allocated
		// lseek moves the descriptor's position, which nothing else uses (the rings and
		// the probes all pass explicit offsets).
		const int fd = dev_->fd.get();
		off_t d = lseek(fd, static_cast<off_t>(offset), SEEK_DATA);
		if (d < 0) {
			// ENXIO: no data at or after offset (a hole, or past a short file's end).
			// Anything else: the file system cannot tell; report mapped.
			if (errno == ENXIO)
				out->mapped = false;
			return 0;
		}
		if (static_cast<uint64_t>(d) > offset) {
			out->mapped = false;
			out->length = std::min<uint64_t>(d, sz) - offset;
			return 0;
		}
		off_t h = lseek(fd, static_cast<off_t>(offset), SEEK_HOLE);
		if (h > d)
			out->length = std::min<uint64_t>(h, sz) - offset;
		return 0;
	}

	int resize(uint64_t bytes, std::string *why) override
	{
		std::string dummy;
		if (!why)
			why = &dummy;
		uint64_t now = 0;
		if (int r = storage_size(&now, why); r < 0)
			return r;
		if (dev_->block && bytes > now) {
			*why = dev_->who() + "size " + std::to_string(bytes) +
			       " exceeds the device's " + std::to_string(now) + " bytes";
			return -ENOSPC;
		}
		if (!dev_->block && now < bytes) {
			// Extend (sparse) before the new size is published, so that no request
			// admitted at it finds the file short. Shrinking leaves the file alone
			// (see Backstore::resize): requests still running past the new end then
			// write where nobody reads, harmlessly, instead of re-extending a
			// truncated file.
			if (dev_->read_only) {
				*why = dev_->who() + "is " + std::to_string(now) +
				       " bytes, smaller than " + std::to_string(bytes) +
				       ", and read-only";
				return -EROFS;
			}
			if (ftruncate(dev_->fd.get(), static_cast<off_t>(bytes)) < 0) {
				int e = errno;
				*why = dev_->who() + "ftruncate: " + errstr(e);
				return -e;
			}
		}
		set_size(bytes);
		return 0;
	}

	int storage_size(uint64_t *bytes, std::string *why) override
	{
		if (dev_->block) {
			uint64_t dev = 0;
			if (ioctl(dev_->fd.get(), BLKGETSIZE64, &dev) < 0) {
				int e = errno;
				if (why)
					*why = dev_->who() + "BLKGETSIZE64: " + errstr(e);
				return -e;
			}
			*bytes = dev;
			return 0;
		}
		struct stat st;
		if (fstat(dev_->fd.get(), &st) < 0) {
			int e = errno;
			if (why)
				*why = dev_->who() + "fstat: " + errstr(e);
			return -e;
		}
		*bytes = static_cast<uint64_t>(st.st_size);
		return 0;
	}

	// bs_copy_range() with this as the destination, src a file backstore too.
	int64_t copy_from(FileBackstore &src, uint64_t src_off, uint64_t dst_off, uint64_t len,
	                  bool durable)
	{
		FileDev &d = *dev_;
		if (d.block || src.dev_->block)
			return -EOPNOTSUPP; // devices: copy_file_range(2) takes regular files only
		if (d.read_only)
			return -EROFS;
		if (d.stopping.load(std::memory_order_relaxed) ||
		    src.dev_->stopping.load(std::memory_order_relaxed))
			return -ESHUTDOWN;
		// One load of each size (a resize may run beside us; see Backstore::size).
		const uint64_t ssz = src.size(), dsz = size();
		if (src_off > ssz || len > ssz - src_off || dst_off > dsz || len > dsz - dst_off)
			return -ERANGE;
		auto so = static_cast<loff_t>(src_off), doff = static_cast<loff_t>(dst_off);
		ssize_t n;
		do
			n = copy_file_range(src.dev_->fd.get(), &so, d.fd.get(), &doff, len, 0);
		while (n < 0 && errno == EINTR);
		if (n < 0) {
			const int e = errno;
			return e == EXDEV || e == EINVAL || e == EOPNOTSUPP || e == ENOSYS ||
			               e == EBADF
			           ? -EOPNOTSUPP
			           : -e;
		}
		if (n == 0) // the source file ends before size (sparse tail): read and zero-fill
			return -EOPNOTSUPP;
		if (durable && fdatasync(d.fd.get()) < 0)
			return -errno;
		return n;
	}

	void stats(FileBsStats *s) const
	{
		FileDev &d = *dev_;
		s->direct = d.dfd.get() >= 0;
		s->dio_mem_align = d.mem_align;
		s->dio_off_align = d.off_align;
		shared_->counters().add_to(s, false);
		std::lock_guard g(d.rings_lock);
		for (const FileRing *r : d.loop_rings) {
			r->counters().add_to(s, true);
			s->coop_rings += r->coop();
		}
		d.retired.add_to(s, true);
		s->loop_rings = d.loop_rings.size();
	}

private:
	// A buffered read that the page cache holds whole is copied here, on the submitter's
	// thread, and done() runs before submit() returns: preadv2(RWF_NOWAIT) refuses
	// (EAGAIN) rather than wait for the device. Through the ring, io_uring would do the
	// same copy inline in io_uring_enter, and then wake the reaping thread for its CQE: a
	// thread switch per read on the shared ring, the larger part of a 4 KiB read's cost
	// under TCG (tools/iscsi-bench/vm-iser). A read that O_DIRECT may take, one the cache
	// holds in part (a short count), one at end of file, and every error go to the ring as
	// before: it is idempotent, and the ring's path zero-fills and retries. c: the counters
	// of the ring the read would have gone to. True: done() ran.
	bool read_cached(BsIo *io, FileCounters &c)
	{
		FileDev &d = *dev_;
		if (!d.nowait_ok.load(std::memory_order_relaxed) || io->iov.size() > kBsMaxIov ||
		    io->length == 0 || io->length > kBsMaxRwBytes || d.precheck(io) != 0 ||
		    d.direct_ok(io->offset, io->iov.data(), io->iov.size()))
			return false;
		const ssize_t r =
		    preadv2(d.fd.get(), io->iov.data(), static_cast<int>(io->iov.size()),
		            static_cast<off_t>(io->offset), RWF_NOWAIT);
		if (r < 0 && errno == EOPNOTSUPP) // not on this file system: never again
			d.nowait_ok.store(false, std::memory_order_relaxed);
		if (r < 0 || static_cast<uint64_t>(r) != io->length)
			return false;
		FileCounters::bump(c.cached_reads);
		io->done(io, 0);
		return true;
	}

	std::shared_ptr<FileDev> dev_;     // the file, shared with the rings
	std::unique_ptr<FileRing> shared_; // the ring of threads without an event loop
};

// Destruction: refuse new requests; wait (bounded, logged) for the ones accepted on every
// ring; close each loop ring on its loop (bounded); end the shared ring's thread. A loop
// ring whose loop is ending is closed by that loop's loop_ending() instead (see
// bs_file_ring.h); a ring on this very thread's loop is closed here.
FileBackstore::~FileBackstore()
{
	FileDev &d = *dev_;
	d.stopping.store(true);
	EventLoop *const here = this_event_loop();
	const auto deadline = std::chrono::steady_clock::now() + kBsDrainWait;
	std::unique_lock g(d.rings_lock);
	if (shared_)
		shared_->drain(deadline, false);
	for (FileRing *r : d.loop_rings)
		r->drain(deadline, r->loop() == here);
	const std::vector<FileRing *> rings = d.loop_rings;
	for (FileRing *r : rings) {
		if (r->loop() == here) {
			r->close(true);
			continue;
		}
		// false: that loop has ended, and its loop_ending() closes r (it waits for
		// rings_lock, which the wait below lets go of).
		(void)r->loop()->post([r, keep = dev_] { r->close(); });
	}
	const bool closed =
	    d.rings_closed.wait_for(g, kBsDrainWait, [&] { return d.loop_rings.empty(); });
	if (!closed)
		ULP_LOG(Error, Scsi,
		        "{}{} rings on event loops not closed after {} s (a loop does not run); "
		        "they close when it does",
		        d.who(), d.loop_rings.size(), static_cast<long long>(kBsDrainWait.count()));
	g.unlock();
	if (shared_)
		shared_->stop_thread();
	shared_.reset();
	// The file is let go of now, not whenever the last ring drops dev_: a block device
	// claimed with O_EXCL can be claimed again as soon as its LUN is deleted. Not when a
	// ring is still open: it may yet resubmit through them.
	if (closed) {
		d.fd.reset();
		d.dfd.reset();
	}
}

int open_target(const BackstoreConfig &cfg, FileDev *o, uint64_t *size, std::string *why)
{
	const bool block = cfg.kind == "block";
	const std::string who = cfg.kind + " backstore " + cfg.path + ": ";
	int flags = (cfg.read_only ? O_RDONLY : O_RDWR) | O_CLOEXEC;
	if (!block && !cfg.read_only && cfg.size)
		flags |= O_CREAT;
	// A writable device is claimed exclusively, as LIO's iblock does: the open fails
	// while the device is mounted or claimed, instead of corrupting a live file system.
	// On a regular file O_EXCL would mean "must create", so only devices get it.
	const int excl = block && !cfg.read_only ? O_EXCL : 0;
	o->fd = Fd(open(cfg.path.c_str(), flags | excl, 0644));
	if (o->fd.get() < 0) {
		int e = errno;
		*why = who + "open: " + errstr(e);
		if (e == EBUSY && excl)
			*why += " (mounted, or claimed by another user of the device)";
		return -e;
	}
	struct stat st;
	if (fstat(o->fd.get(), &st) < 0) {
		int e = errno;
		*why = who + "fstat: " + errstr(e);
		return -e;
	}
	uint32_t lbs = 512; // the device's logical block size (block only)
	if (block) {
		if (!S_ISBLK(st.st_mode)) {
			*why = who + "not a block device";
			return -ENOTBLK;
		}
		uint64_t dev_size = 0;
		int ilbs = 0;
		if (ioctl(o->fd.get(), BLKGETSIZE64, &dev_size) < 0 ||
		    ioctl(o->fd.get(), BLKSSZGET, &ilbs) < 0) {
			int e = errno;
			*why = who + "BLKGETSIZE64/BLKSSZGET: " + errstr(e);
			return -e;
		}
		lbs = static_cast<uint32_t>(ilbs);
		o->lbs = lbs;
		// Smaller LU blocks than the device's would make every direct I/O and every
		// fallocate of a single LU block fail (the kernel insists on its own).
		if (cfg.block_size < lbs) {
			*why = who + "block_size " + std::to_string(cfg.block_size) +
			       " is smaller than the device's logical block size " +
			       std::to_string(lbs);
			return -EINVAL;
		}
		if (cfg.size > dev_size) {
			*why = who + "size " + std::to_string(cfg.size) + " exceeds the device's " +
			       std::to_string(dev_size) + " bytes";
			return -EINVAL;
		}
		*size = cfg.size ? cfg.size : dev_size - dev_size % cfg.block_size;
	} else {
		if (!S_ISREG(st.st_mode)) {
			*why = who + "not a regular file";
			return -EINVAL;
		}
		const uint64_t fsize = static_cast<uint64_t>(st.st_size);
		if (cfg.size && fsize < cfg.size) {
			if (cfg.read_only) {
				*why = who + "is " + std::to_string(fsize) +
				       " bytes, smaller than size, and read-only";
				return -EINVAL;
			}
			// Extend (sparse). A longer file is never shortened: its tail is data.
			if (ftruncate(o->fd.get(), static_cast<off_t>(cfg.size)) < 0) {
				int e = errno;
				*why = who + "ftruncate: " + errstr(e);
				return -e;
			}
		}
		*size = cfg.size ? cfg.size : fsize - fsize % cfg.block_size;
	}
	if (*size == 0) {
		*why = who + "is empty (set size to create or extend it)";
		return -EINVAL;
	}

	if (cfg.direct) {
		// A file system without O_DIRECT (tmpfs before 6.6) refuses the open: then
		// everything goes through the page cache.
		o->dfd = Fd(open(cfg.path.c_str(), (flags & ~O_CREAT) | O_DIRECT));
		o->mem_align = 4096;
		o->off_align = block ? lbs : 4096;
		struct statx sx;
		if (o->dfd.get() >= 0 &&
		    statx(o->dfd.get(), "", AT_EMPTY_PATH, STATX_DIOALIGN, &sx) == 0 &&
		    (sx.stx_mask & STATX_DIOALIGN)) {
			// 0 means this file cannot do direct I/O at all.
			if (!sx.stx_dio_mem_align || !sx.stx_dio_offset_align)
				o->dfd.reset();
			o->mem_align = sx.stx_dio_mem_align;
			o->off_align = sx.stx_dio_offset_align;
		}
		if (o->dfd.get() < 0)
			o->mem_align = o->off_align = 0;
	}

	if (cfg.read_only) {
		o->can_unmap = false;
	} else if (block) {
		// PUNCH_HOLE on a device is a write-zeroes that may unmap and never falls
		// back to writing: it needs write-zeroes support, and deallocates only where
		// the device can discard.
		o->can_unmap = queue_attr(st.st_rdev, "discard_max_bytes") > 0 &&
		               queue_attr(st.st_rdev, "write_zeroes_max_bytes") > 0;
	} else {
		// Probe past the end of the file, where a punch changes nothing (KEEP_SIZE):
		// a file system that cannot punch refuses before looking at the range.
		uint64_t end = std::max<uint64_t>(*size, static_cast<uint64_t>(st.st_size));
		off_t at = static_cast<off_t>((end + 4095) & ~uint64_t(4095));
		o->can_unmap = fallocate(o->fd.get(), FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
		                         at, 4096) == 0;
	}
	return 0;
}

} // namespace

std::unique_ptr<Backstore> make_file_backstore(const BackstoreConfig &cfg, int *err,
                                               std::string *why)
{
	auto dev = std::make_shared<FileDev>();
	uint64_t size = 0;
	int r = open_target(cfg, dev.get(), &size, why);
	if (r < 0) {
		*err = r;
		return nullptr;
	}
	auto bs = std::make_unique<FileBackstore>(cfg, size, std::move(dev));
	r = bs->init(why);
	if (r < 0) {
		*err = r;
		return nullptr;
	}
	return bs;
}

int64_t bs_copy_range(Backstore &src, uint64_t src_off, Backstore &dst, uint64_t dst_off,
                      uint64_t len, bool durable)
{
	auto *s = dynamic_cast<FileBackstore *>(&src);
	auto *d = dynamic_cast<FileBackstore *>(&dst);
	if (!s || !d || len == 0)
		return -EOPNOTSUPP;
	return d->copy_from(*s, src_off, dst_off, len, durable);
}

bool file_bs_stats(const Backstore &bs, FileBsStats *out)
{
	auto *f = dynamic_cast<const FileBackstore *>(&bs);
	if (!f)
		return false;
	f->stats(out);
	return true;
}

} // namespace ulp::scsi
