// SPDX-License-Identifier: MIT
// scsi/bs_file.cc - the file and block backstores: a regular file or a block device driven
// through io_uring (the kernel's target_core_file and target_core_iblock, asynchronous).
//
// One ring per backstore, and one completion thread that reaps its CQEs, finishes or
// continues each request and calls done(). A request occupies one of queue_depth
// preallocated slots from start to done(); requests beyond that wait in a FIFO linked
// through BsIo::bs_next and start, in order, as slots free. Each slot has at most one SQE
// in flight, so the ring never holds more than queue_depth requests. Nothing on this
// path allocates. A buffered read that the page cache holds whole skips all of that: it
// is copied with preadv2(RWF_NOWAIT) inside submit() (read_cached).
//
// Two descriptors: an O_DIRECT one, used for every read or write whose offset, length and
// buffers meet the device's direct-I/O alignment, and a buffered one for the rest (the
// core's buffers are registered memory and aligned, the initiator's odd requests are not).
// The kernel keeps the two coherent: direct I/O writes back and invalidates the page cache
// over its range first.
//
// Locking: lock_ guards the slots, the FIFO and the submission side of the ring; both the
// submitters and the completion thread take it, and nobody holds it across done(). The
// kernel orders an SQE's submission before its CQE, but a race detector cannot see that,
// so the completion thread reads slot state under the lock too.
//
// io_uring ties a request to the thread that submitted it (its task_work, its io-wq
// workers), and depending on the kernel a thread that exits or execs with requests in
// flight gets them back -ECANCELED or -EINTR. We never cancel anything ourselves and
// every operation here is idempotent, so such a request (or an -EAGAIN) is resubmitted
// from the completion thread, which lives as long as the backstore.
#include "core/log.h"
#include "core/thread_name.h"
#include "scsi/bs_internal.h"

#include <fcntl.h>
#include <liburing.h>
#include <linux/falloc.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <span>
#include <thread>
#include <utility>

namespace ulp::scsi
{

namespace
{

constexpr uint64_t kStopTag = ~0ull;       // user_data of the NOP that ends the thread
constexpr uint32_t kNoSlot = ~0u;          // end of the free-slot list
constexpr uint32_t kMaxRwBytes = 1u << 30; // one unvectored SQE: its length field is 32 bits
constexpr size_t kMaxIov = IOV_MAX;        // iovecs in one vectored SQE (the kernel's limit)
constexpr unsigned kBatch = 32;            // CQEs reaped per lock acquisition
constexpr unsigned kMaxRetries = 8;        // resubmissions without progress before failing
constexpr auto kDrainWait = std::chrono::seconds(10); // destructor's bound on in-flight I/O

// WriteZeroes where neither ZERO_RANGE nor a hole punch works is written from this: 16
// iovecs of 64 KiB, a megabyte per SQE. 4 KiB aligned so the O_DIRECT path can take it.
constexpr size_t kZeroBuf = 64 << 10;
constexpr unsigned kZeroIovs = 16;
alignas(4096) uint8_t g_zeros[kZeroBuf]; // never written: the kernel only reads it

const iovec *zero_iovs()
{
	static const auto v = [] {
		std::array<iovec, kZeroIovs> a;
		for (iovec &e : a)
			e = {g_zeros, kZeroBuf};
		return a;
	}();
	return v.data();
}

// What the SQE a slot has in flight does.
enum class Step : uint8_t {
	Rw,        // the request's read or write, continuing at (vi, voff)
	ZeroWrite, // WriteZeroes by writing zeros from g_zeros
	ZeroRange, // WriteZeroes by fallocate ZERO_RANGE (stays allocated)
	Punch,     // Unmap (or WriteZeroes without ZERO_RANGE) by fallocate PUNCH_HOLE
	Sync,      // fdatasync: a Flush, or the end of a fallocate without a write cache
	Nop,       // no I/O: completes with Slot::err through the ring, on the thread
};

// One request executing. Preallocated per queue slot; guarded by lock_.
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

bool retryable(int res)
{
	return res == -EAGAIN || res == -EINTR || res == -ECANCELED;
}

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
	void reset()
	{
		if (fd_ >= 0)
			close(fd_);
		fd_ = -1;
	}

private:
	int fd_ = -1; // the descriptor, or -1
};

// What opening the path found out; handed to the backstore.
struct Opened {
	Fd fd;                  // buffered descriptor (always open)
	Fd dfd;                 // O_DIRECT descriptor, or -1 when direct I/O is off
	uint64_t size = 0;      // bytes the LU exposes
	uint32_t mem_align = 0; // bytes: O_DIRECT buffer alignment
	uint32_t off_align = 0; // bytes: O_DIRECT offset and length alignment
	uint32_t lbs = 1;       // bytes: the device's logical block size (block), else 1
	bool can_unmap = false; // deallocation works (probed)
};

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
	FileBackstore(const BackstoreConfig &cfg, Opened o)
	    : Backstore(cfg.kind, o.size, cfg.queue_depth), path_(cfg.path),
	      block_(cfg.kind == "block"), read_only_(cfg.read_only), write_cache_(cfg.write_cache),
	      can_unmap_(o.can_unmap), fd_(std::move(o.fd)), dfd_(std::move(o.dfd)),
	      mem_align_(o.mem_align), off_align_(o.off_align), lbs_(o.lbs), zero_range_ok_(true)
	{
	}

	// Second phase: the ring, the slots and the completion thread. 0 or a negative errno.
	int init(std::string *why)
	{
		// One spare SQ entry for the stop NOP; the CQ (twice the SQ) holds every slot's
		// completion even while the thread is busy.
		unsigned flags = IORING_SETUP_SUBMIT_ALL;
		int r = io_uring_queue_init(queue_depth() + 1, &ring_, flags);
		if (r == -EINVAL) // before 5.18: without SUBMIT_ALL, which we only lean on
			r = io_uring_queue_init(queue_depth() + 1, &ring_, 0);
		if (r < 0) {
			*why =
			    kind() + " backstore " + path_ + ": io_uring_queue_init: " + errstr(-r);
			return r;
		}
		ring_ok_ = true;
		slots_ = std::make_unique<Slot[]>(queue_depth());
		for (uint32_t i = 0; i < queue_depth(); i++)
			slots_[i].next_free = i + 1 < queue_depth() ? i + 1 : kNoSlot;
		free_ = 0;
		reaper_ = std::thread([this] { reap(); });
		return 0;
	}

	~FileBackstore() override
	{
		if (reaper_.joinable())
			stop();
		if (ring_ok_)
			io_uring_queue_exit(&ring_);
	}

	bool can_unmap() const override { return can_unmap_; }
	bool write_cache() const override { return write_cache_; }

	void submit(BsIo *io) override
	{
		if (io->op == BsOp::Read && read_cached(io))
			return;
		std::unique_lock g(lock_);
		if (stopping_) {
			g.unlock();
			ULP_LOG_RATELIMITED(Error, Scsi,
			                    "{} backstore {}: {} submitted during destruction",
			                    kind(), path_, bs_op_str(io->op));
			io->done(io, -ESHUTDOWN);
			return;
		}
		io->bs_next = nullptr;
		if (free_ == kNoSlot || fifo_head_) {
			// Beyond the queue depth (or behind requests that are): wait in order.
			if (fifo_tail_)
				fifo_tail_->bs_next = io;
			else
				fifo_head_ = io;
			fifo_tail_ = io;
			return;
		}
		start(take_slot(), io);
		flush_sq();
	}

	int extent(uint64_t offset, BsExtent *out) override
	{
		const uint64_t sz = size(); // one load: a resize may run beside us
		if (offset >= sz)
			return -ERANGE;
		out->mapped = true;
		out->length = sz - offset;
		if (block_)
			return 0; // a device does not say what it has allocated
		// lseek moves the descriptor's position, which nothing else uses (the ring and
		// the probes all pass explicit offsets).
		off_t d = lseek(fd_.get(), static_cast<off_t>(offset), SEEK_DATA);
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
		off_t h = lseek(fd_.get(), static_cast<off_t>(offset), SEEK_HOLE);
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
		if (block_ && bytes > now) {
			*why = who() + "size " + std::to_string(bytes) + " exceeds the device's " +
			       std::to_string(now) + " bytes";
			return -ENOSPC;
		}
		if (!block_ && now < bytes) {
			// Extend (sparse) before the new size is published, so that no request
			// admitted at it finds the file short. Shrinking leaves the file alone
			// (see Backstore::resize): requests still running past the new end then
			// write where nobody reads, harmlessly, instead of re-extending a
			// truncated file.
			if (read_only_) {
				*why = who() + "is " + std::to_string(now) +
				       " bytes, smaller than " + std::to_string(bytes) +
				       ", and read-only";
				return -EROFS;
			}
			if (ftruncate(fd_.get(), static_cast<off_t>(bytes)) < 0) {
				int e = errno;
				*why = who() + "ftruncate: " + errstr(e);
				return -e;
			}
		}
		set_size(bytes);
		return 0;
	}

	int storage_size(uint64_t *bytes, std::string *why) override
	{
		if (block_) {
			uint64_t dev = 0;
			if (ioctl(fd_.get(), BLKGETSIZE64, &dev) < 0) {
				int e = errno;
				if (why)
					*why = who() + "BLKGETSIZE64: " + errstr(e);
				return -e;
			}
			*bytes = dev;
			return 0;
		}
		struct stat st;
		if (fstat(fd_.get(), &st) < 0) {
			int e = errno;
			if (why)
				*why = who() + "fstat: " + errstr(e);
			return -e;
		}
		*bytes = static_cast<uint64_t>(st.st_size);
		return 0;
	}

	void stats(FileBsStats *s) const
	{
		s->direct = dfd_.get() >= 0;
		s->dio_mem_align = mem_align_;
		s->dio_off_align = off_align_;
		s->direct_rw = direct_rw_.load(std::memory_order_relaxed);
		s->buffered_rw = buffered_rw_.load(std::memory_order_relaxed);
		s->short_resubmit = short_resubmit_.load(std::memory_order_relaxed);
		s->eof_fill = eof_fill_.load(std::memory_order_relaxed);
		s->cached_reads = cached_reads_.load(std::memory_order_relaxed);
		s->retried = retried_.load(std::memory_order_relaxed);
	}

private:
	std::string who() const { return kind() + " backstore " + path_ + ": "; }

	uint32_t take_slot()
	{
		uint32_t i = free_;
		free_ = slots_[i].next_free;
		busy_++;
		return i;
	}

	// The request's result when it can be known without I/O, else 0.
	int precheck(const BsIo *io) const
	{
		int err = bs_check_io(size(), io);
		if (err)
			return err;
		if (read_only_ && io->op != BsOp::Read && io->op != BsOp::Flush)
			return -EROFS;
		if (io->op == BsOp::Unmap && !can_unmap_)
			return -EOPNOTSUPP;
		return 0;
	}

	// Puts io on slot i and prepares its first SQE. Under lock_.
	void start(uint32_t i, BsIo *io)
	{
		Slot &s = slots_[i];
		s.io = io;
		s.done = 0;
		s.vi = 0;
		s.voff = 0;
		s.err = precheck(io);
		s.retries = 0;
		s.dsync = false;
		s.sync_after = false;
		if (s.err) {
			s.step = Step::Nop;
		} else if (io->op == BsOp::Flush) {
			s.step = Step::Sync;
		} else if (io->length == 0) {
			s.step = Step::Nop;
		} else if (io->op == BsOp::Read || io->op == BsOp::Write) {
			s.step = Step::Rw;
			s.dsync = io->op == BsOp::Write && (io->fua || !write_cache_);
			advance(s, 0); // skip leading empty iovecs
		} else {
			// fallocate does not make its metadata durable; without a write cache
			// the initiator expects completion to mean durable, so sync after it.
			s.sync_after = !write_cache_;
			s.dsync = !write_cache_;
			if ((io->offset | io->length) & (lbs_ - 1))
				// A device's fallocate works in its blocks only. Zeros written
				// are what reads must return after either op; an Unmap that
				// does not deallocate is within SBC's rules.
				s.step = Step::ZeroWrite;
			else if (io->op == BsOp::Unmap)
				s.step = Step::Punch;
			else if (zero_range_ok_)
				s.step = Step::ZeroRange;
			else
				s.step = can_unmap_ ? Step::Punch : Step::ZeroWrite;
		}
		prep(i);
	}

	// Moves slot s n bytes further through its iov, past any empty entries.
	static void advance(Slot &s, uint64_t n)
	{
		const std::span<const iovec> iov = s.io->iov;
		s.done += n;
		while (s.vi < iov.size()) {
			uint64_t rest = iov[s.vi].iov_len - s.voff;
			if (n < rest) {
				s.voff += n;
				break;
			}
			n -= rest;
			s.vi++;
			s.voff = 0;
		}
	}

	bool mem_aligned(const void *p) const
	{
		return !(reinterpret_cast<uintptr_t>(p) & (mem_align_ - 1));
	}

	// The descriptor for a transfer at off: direct when everything is aligned.
	bool direct_ok(uint64_t off, const iovec *v, size_t n) const
	{
		bool direct = dfd_.get() >= 0 && !(off & (off_align_ - 1));
		for (size_t k = 0; direct && k < n; k++)
			direct = mem_aligned(v[k].iov_base) && !(v[k].iov_len & (off_align_ - 1));
		return direct;
	}

	int pick_fd(uint64_t off, const iovec *v, size_t n)
	{
		const bool direct = direct_ok(off, v, n);
		(direct ? direct_rw_ : buffered_rw_).fetch_add(1, std::memory_order_relaxed);
		return direct ? dfd_.get() : fd_.get();
	}

	// A buffered read that the page cache holds whole is copied here, on the submitter's
	// thread, and done() runs before submit() returns: preadv2(RWF_NOWAIT) refuses
	// (EAGAIN) rather than wait for the device. Through the ring, io_uring would do the
	// same copy inline in io_uring_enter, and then wake the completion thread for its
	// CQE: a thread switch per read, the larger part of a 4 KiB read's cost under TCG
	// (tools/iscsi-bench/vm-iser). A read that O_DIRECT may take, one the cache holds in
	// part (a short count), one at end of file, and every error go to the ring as before:
	// it is idempotent, and the ring's path zero-fills and retries. True: done() ran.
	bool read_cached(BsIo *io)
	{
		if (!nowait_ok_.load(std::memory_order_relaxed) || io->iov.size() > kMaxIov ||
		    io->length == 0 || io->length > kMaxRwBytes || precheck(io) != 0 ||
		    direct_ok(io->offset, io->iov.data(), io->iov.size()))
			return false;
		const ssize_t r =
		    preadv2(fd_.get(), io->iov.data(), static_cast<int>(io->iov.size()),
		            static_cast<off_t>(io->offset), RWF_NOWAIT);
		if (r < 0 && errno == EOPNOTSUPP) // not on this file system: never again
			nowait_ok_.store(false, std::memory_order_relaxed);
		if (r < 0 || static_cast<uint64_t>(r) != io->length)
			return false;
		cached_reads_.fetch_add(1, std::memory_order_relaxed);
		io->done(io, 0);
		return true;
	}

	io_uring_sqe *get_sqe()
	{
		io_uring_sqe *sqe = io_uring_get_sqe(&ring_);
		if (!sqe) {
			// Cannot happen: the SQ has a spare entry beyond one per slot, and
			// every prepared entry is submitted before the lock is dropped (or is
			// retried by the thread). Continuing would lose a request.
			ULP_LOG_RATELIMITED(Error, Scsi, "{} backstore {}: io_uring SQ full",
			                    kind(), path_);
			std::abort();
		}
		prepared_ = true;
		return sqe;
	}

	// Prepares slot i's next SQE from its state. Under lock_.
	void prep(uint32_t i)
	{
		Slot &s = slots_[i];
		BsIo *io = s.io;
		io_uring_sqe *sqe = get_sqe();
		const uint64_t off = io->offset + s.done;
		const uint64_t rest = io->length - s.done;
		switch (s.step) {
		case Step::Rw: {
			const bool wr = io->op == BsOp::Write;
			const iovec *v = io->iov.data() + s.vi;
			size_t nv = io->iov.size() - s.vi;
			if (s.voff || nv == 1) {
				// Part of one buffer (the rest of an entry after a short
				// transfer, or a single-buffer request).
				iovec one = {static_cast<char *>(v->iov_base) + s.voff,
				             std::min<size_t>(v->iov_len - s.voff, kMaxRwBytes)};
				int fd = pick_fd(off, &one, 1);
				if (wr)
					io_uring_prep_write(sqe, fd, one.iov_base, one.iov_len,
					                    off);
				else
					io_uring_prep_read(sqe, fd, one.iov_base, one.iov_len, off);
			} else {
				nv = std::min(nv, kMaxIov);
				int fd = pick_fd(off, v, nv);
				if (wr)
					io_uring_prep_writev(sqe, fd, v, nv, off);
				else
					io_uring_prep_readv(sqe, fd, v, nv, off);
			}
			break;
		}
		case Step::ZeroWrite:
			if (rest >= kZeroBuf) {
				unsigned n = static_cast<unsigned>(
				    std::min<uint64_t>(rest / kZeroBuf, kZeroIovs));
				int fd = pick_fd(off, zero_iovs(), n);
				io_uring_prep_writev(sqe, fd, zero_iovs(), n, off);
			} else {
				iovec one = {g_zeros, static_cast<size_t>(rest)};
				io_uring_prep_write(sqe, pick_fd(off, &one, 1), g_zeros,
				                    static_cast<unsigned>(rest), off);
			}
			break;
		case Step::ZeroRange:
			io_uring_prep_fallocate(sqe, fd_.get(),
			                        FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE,
			                        io->offset, io->length);
			break;
		case Step::Punch:
			// On a block device this is the kernel's zero-out without fallback:
			// deallocate and guarantee zeros, or fail. BLKDISCARD guarantees
			// nothing about what reads return afterwards.
			io_uring_prep_fallocate(sqe, fd_.get(),
			                        FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
			                        io->offset, io->length);
			break;
		case Step::Sync:
			io_uring_prep_fsync(sqe, fd_.get(), IORING_FSYNC_DATASYNC);
			break;
		case Step::Nop:
			io_uring_prep_nop(sqe);
			break;
		}
		if ((s.step == Step::Rw && io->op == BsOp::Write) || s.step == Step::ZeroWrite)
			sqe->rw_flags = s.dsync ? RWF_DSYNC : 0;
		io_uring_sqe_set_data64(sqe, i);
	}

	// Submits what prep() queued. Under lock_.
	void flush_sq()
	{
		if (!prepared_)
			return;
		prepared_ = false;
		int r = io_uring_submit(&ring_);
		// -EBUSY/-EAGAIN (CQ backlog, kernel memory) leave entries in the SQ; the
		// completion thread retries them, waking periodically while any are left.
		if (r < 0 || io_uring_sq_ready(&ring_))
			sq_pending_.store(true, std::memory_order_relaxed);
	}

	// Slot i's SQE completed with res: continue it, or finish it into out. Under lock_.
	void complete(uint32_t i, int res, Finished *out, unsigned *nout)
	{
		Slot &s = slots_[i];
		BsIo *io = s.io;
		int err = 0;
		if (retryable(res) && s.step != Step::Nop && s.retries < kMaxRetries) {
			s.retries++;
			retried_.fetch_add(1, std::memory_order_relaxed);
			prep(i);
			return;
		}
		switch (s.step) {
		case Step::Rw:
		case Step::ZeroWrite:
			if (res < 0) {
				err = res;
				break;
			}
			if (res == 0) {
				if (io->op == BsOp::Read) {
					// End of file inside size (a short file): zeros, as
					// an unwritten range reads.
					zero_rest(s);
					eof_fill_.fetch_add(1, std::memory_order_relaxed);
				} else {
					err = -EIO; // a write that makes no progress
				}
				break;
			}
			if (s.step == Step::Rw)
				advance(s, static_cast<uint64_t>(res));
			else
				s.done += static_cast<uint64_t>(res);
			s.retries = 0;
			if (s.done < io->length) {
				if (s.step == Step::Rw)
					short_resubmit_.fetch_add(1, std::memory_order_relaxed);
				prep(i);
				return;
			}
			break;
		case Step::ZeroRange:
			if (res == -EOPNOTSUPP && !block_) {
				// tmpfs and others: never try again on this file.
				zero_range_ok_ = false;
				s.step = can_unmap_ ? Step::Punch : Step::ZeroWrite;
				prep(i);
				return;
			}
			[[fallthrough]];
		case Step::Punch:
			if (res == 0 && s.sync_after) {
				s.step = Step::Sync;
				prep(i);
				return;
			}
			err = res;
			break;
		case Step::Sync:
			err = res;
			break;
		case Step::Nop:
			err = s.err;
			break;
		}
		out[(*nout)++] = {io, err};
		release(i);
	}

	// Fills what a read has not transferred with zeros.
	static void zero_rest(Slot &s)
	{
		const std::span<const iovec> iov = s.io->iov;
		for (size_t k = s.vi; k < iov.size(); k++) {
			size_t from = k == s.vi ? s.voff : 0;
			std::memset(static_cast<char *>(iov[k].iov_base) + from, 0,
			            iov[k].iov_len - from);
		}
		s.done = s.io->length;
	}

	// Frees slot i, or hands it straight to the oldest waiting request. Under lock_.
	void release(uint32_t i)
	{
		slots_[i].io = nullptr;
		if (BsIo *next = fifo_head_) {
			fifo_head_ = next->bs_next;
			if (!fifo_head_)
				fifo_tail_ = nullptr;
			start(i, next);
			return;
		}
		slots_[i].next_free = free_;
		free_ = i;
		if (--busy_ == 0)
			idle_.notify_all();
	}

	// The completion thread.
	void reap()
	{
		set_thread_name("ulp-bs-reap");
		const bool can_time_out = ring_.features & IORING_FEAT_EXT_ARG;
		for (;;) {
			io_uring_cqe *cqe;
			int r;
			if (can_time_out && sq_pending_.load(std::memory_order_relaxed)) {
				__kernel_timespec ts = {0, 10 * 1000 * 1000};
				r = io_uring_wait_cqe_timeout(&ring_, &cqe, &ts);
			} else {
				r = io_uring_wait_cqe(&ring_, &cqe);
			}
			if (r < 0 && r != -EINTR && r != -ETIME && r != -EAGAIN) {
				ULP_LOG_RATELIMITED(Error, Scsi,
				                    "{} backstore {}: io_uring_wait_cqe: {}",
				                    kind(), path_, std::strerror(-r));
				std::this_thread::sleep_for(std::chrono::milliseconds(10));
			}

			Finished fin[kBatch];
			unsigned nfin = 0;
			bool stop = false;
			{
				std::lock_guard g(lock_);
				io_uring_cqe *cqes[kBatch];
				unsigned n = io_uring_peek_batch_cqe(&ring_, cqes, kBatch);
				for (unsigned k = 0; k < n; k++) {
					uint64_t tag = io_uring_cqe_get_data64(cqes[k]);
					if (tag == kStopTag)
						stop = true;
					else if (tag < queue_depth() && slots_[tag].io)
						complete(static_cast<uint32_t>(tag), cqes[k]->res,
						         fin, &nfin);
				}
				io_uring_cq_advance(&ring_, n);
				if (sq_pending_.exchange(false, std::memory_order_relaxed))
					prepared_ = true;
				flush_sq();
			}
			for (unsigned k = 0; k < nfin; k++)
				fin[k].io->done(fin[k].io, fin[k].err);
			if (stop)
				return;
		}
	}

	// Destruction: refuse new requests, wait (bounded, logged) for the ones accepted,
	// then end the completion thread.
	void stop()
	{
		std::unique_lock g(lock_);
		stopping_ = true;
		const auto t0 = std::chrono::steady_clock::now();
		bool said = false;
		while (busy_ || fifo_head_) {
			auto now = std::chrono::steady_clock::now();
			if (now - t0 >= kDrainWait)
				break;
			if (!said && now - t0 >= std::chrono::seconds(1)) {
				ULP_LOG(
				    Warn, Scsi,
				    "{} backstore {}: waiting up to {} s for {} requests in flight",
				    kind(), path_, static_cast<long long>(kDrainWait.count()),
				    busy_);
				said = true;
			}
			idle_.wait_for(g, std::chrono::milliseconds(200));
		}
		// Requests that never started can still be failed; ones the kernel holds
		// cannot (it may yet write into their buffers): they are abandoned, loudly.
		BsIo *never = fifo_head_;
		fifo_head_ = fifo_tail_ = nullptr;
		if (busy_)
			ULP_LOG(
			    Error, Scsi,
			    "{} backstore {}: {} requests still in flight after {} s; abandoning "
			    "them",
			    kind(), path_, busy_, static_cast<long long>(kDrainWait.count()));
		io_uring_sqe *sqe = get_sqe();
		io_uring_prep_nop(sqe);
		io_uring_sqe_set_data64(sqe, kStopTag);
		flush_sq();
		g.unlock();
		while (never) {
			BsIo *next = never->bs_next;
			never->done(never, -ECANCELED);
			never = next;
		}
		reaper_.join();
	}

	const std::string path_;   // the file or device, for messages
	const bool block_;         // a block device (else a regular file)
	const bool read_only_;     // writes, Unmap and WriteZeroes fail with -EROFS
	const bool write_cache_;   // false: every write and fallocate is made durable
	const bool can_unmap_;     // hole punch works (probed at open)
	Fd fd_;                    // buffered descriptor: unaligned I/O, fallocate, fsync
	Fd dfd_;                   // O_DIRECT descriptor, or -1
	const uint32_t mem_align_; // bytes: O_DIRECT buffer alignment (power of two)
	const uint32_t off_align_; // bytes: O_DIRECT offset/length alignment (power of two)
	const uint32_t lbs_;       // bytes: granularity a device's fallocate needs (file: 1)

	io_uring ring_{};      // SQ side under lock_; CQ side only on the completion thread
	bool ring_ok_ = false; // ring_ initialised (init() got that far)
	std::thread reaper_;   // the completion thread

	std::mutex lock_;                     // guards everything below but the atomics
	std::condition_variable idle_;        // signalled when busy_ drops to 0
	std::unique_ptr<Slot[]> slots_;       // queue_depth() slots
	uint32_t free_ = kNoSlot;             // first free slot, linked by next_free
	uint32_t busy_ = 0;                   // slots holding a request
	BsIo *fifo_head_ = nullptr;           // oldest request waiting for a slot
	BsIo *fifo_tail_ = nullptr;           // newest request waiting for a slot
	bool prepared_ = false;               // SQEs prepared and not yet submitted
	bool stopping_ = false;               // destruction started: submit() refuses
	bool zero_range_ok_;                  // ZERO_RANGE not yet refused by the file system
	std::atomic<bool> sq_pending_{false}; // a submit left SQEs behind; thread retries

	std::atomic<uint64_t> direct_rw_{0};      // FileBsStats::direct_rw
	std::atomic<uint64_t> buffered_rw_{0};    // FileBsStats::buffered_rw
	std::atomic<uint64_t> short_resubmit_{0}; // FileBsStats::short_resubmit
	std::atomic<uint64_t> eof_fill_{0};       // FileBsStats::eof_fill
	std::atomic<uint64_t> cached_reads_{0};   // FileBsStats::cached_reads
	std::atomic<bool> nowait_ok_{true};       // RWF_NOWAIT not yet refused (EOPNOTSUPP)
	std::atomic<uint64_t> retried_{0};        // FileBsStats::retried
};

// Opens cfg.path and works out size, alignment and unmap support. 0 or a negative errno
// with *why set.
int open_target(const BackstoreConfig &cfg, Opened *o, std::string *why)
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
		o->size = cfg.size ? cfg.size : dev_size - dev_size % cfg.block_size;
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
		o->size = cfg.size ? cfg.size : fsize - fsize % cfg.block_size;
	}
	if (o->size == 0) {
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
		uint64_t end = std::max<uint64_t>(o->size, static_cast<uint64_t>(st.st_size));
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
	Opened o;
	int r = open_target(cfg, &o, why);
	if (r < 0) {
		*err = r;
		return nullptr;
	}
	auto bs = std::make_unique<FileBackstore>(cfg, std::move(o));
	r = bs->init(why);
	if (r < 0) {
		*err = r;
		return nullptr;
	}
	return bs;
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
