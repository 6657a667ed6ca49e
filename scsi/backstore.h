// SPDX-License-Identifier: MIT
// scsi/backstore.h - where a logical unit's blocks live (the kernel's target backend
// subsystems: target_core_iblock, _file, _rd; SPDK's bdev).
//
// A Backstore executes byte-addressed I/O asynchronously and completes each request
// exactly once through its done callback. The core (scsi/sbc.cc) turns block commands
// into BsIo requests; it owns the BsIo memory (embedded in the command, so the data path
// allocates nothing) and never touches a request between submit() and done().
//
// Kinds (make_backstore):
//   null   no storage: reads return zeros, writes are discarded (a pure overhead probe)
//   ram    memory allocated on first write in fixed chunks; unwritten ranges read as
//          zeros and count as unmapped (thin), UNMAP frees whole chunks; atomic writes of
//          any length (nothing of it survives a power loss to be torn)
//   file   a regular file through io_uring (liburing): O_DIRECT when the logical block
//          size and every buffer are aligned, buffered otherwise; fdatasync for FLUSH and
//          for FUA writes; UNMAP punches holes (fallocate PUNCH_HOLE | KEEP_SIZE)
//   block  a block device through io_uring, as file, with UNMAP by the kernel's zero-out
//          with unmap (fallocate PUNCH_HOLE on the device: deallocates and guarantees
//          zeros, which BLKDISCARD does not) where the device can discard; its size
//          from BLKGETSIZE64
//   rbd    a Ceph RBD image through librbd's asynchronous calls, with its cache off:
//          a write completes when the OSDs hold it (no volatile cache to flush); UNMAP
//          discards, zeroing what is not whole; WRITE SAME by librbd's writesame, the
//          OSDs replicating the block (see scsi/bs_rbd.cc)
//
// Capacity at run time (LIO resizes a backstore through configfs): resize() makes
// the backstore a new size while requests run, storage_size() says what the storage under
// it holds now (an administrator may have grown the file or the device). The logical unit
// applies both (LogicalUnit::set_capacity, rescan_capacity) and tells the initiators.
//
// Threading: submit() may be called from any thread, concurrently; it never blocks on
// I/O (a request beyond the queue depth waits in the backstore's own FIFO, in order).
// done() runs inside submit() itself for the synchronous kinds (null, ram) and for a file
// or block read that the page cache holds whole (buffered, not O_DIRECT); otherwise, for
// file and block, on the submitting thread when that thread runs an event loop
// (core/event_loop.h: a TCP worker, which reaps a ring of its own), else on the backstore's
// completion thread; for rbd, always on the backstore's completion thread (librbd's own
// callback thread only hands the request over). It must not block and must not call back into this
// backstore's destructor. Destruction waits (bounded, logged) for requests in flight; it may run on
// any thread, an event loop's included, but not inside done().
#pragma once

#include <sys/uio.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>

namespace ulp::scsi
{

enum class BsOp : uint8_t {
	Read,        // iov <- [offset, offset + length)
	Write,       // iov -> [offset, offset + length)
	Flush,       // make every completed write durable (SYNCHRONIZE CACHE)
	Unmap,       // deallocate [offset, offset + length): reads return zeros afterwards
	WriteZeroes, // [offset, offset + length) reads as zeros afterwards, allocated or not
	// Compare [offset, offset + length) with the first length bytes of iov and, only when
	// equal, write the next length bytes over it, as one operation that no other request -
	// from this process or another gateway on the same storage - sees half done. Only to a
	// backstore whose compare_and_write_max() covers length; others fail it -EOPNOTSUPP.
	// -EILSEQ: they differed, nothing written, BsIo::miscompare says where.
	CompareAndWrite,
	// The block in iov (the sum of its lengths, a divisor of length) written over every
	// block of [offset, offset + length), the storage replicating it (WRITE SAME without
	// UNMAP, SBC-3 5.42, 5.43). Only to a backstore whose write_same_max() covers length;
	// others fail it -EOPNOTSUPP.
	WriteSame,
};

const char *bs_op_str(BsOp op);

struct BsIo {
	BsOp op = BsOp::Read;
	bool fua = false;           // Write: durable before done() (force unit access)
	bool atomic = false;        // Write: indivisible (atomic_write_max, WRITE ATOMIC)
	uint64_t offset = 0;        // bytes from the start of the backstore
	uint64_t length = 0;        // bytes; for Read/Write the sum of iov lengths
	std::span<const iovec> iov; // Read/Write buffers (CompareAndWrite: compare data, then
	                            // write data, 2 * length; WriteSame: the one block),
	                            // valid until done()
	uint64_t miscompare = 0;    // CompareAndWrite failed -EILSEQ: the first differing
	                            // byte, from offset (set by the backstore)
	// Called exactly once: err is 0, or a negative errno (-EIO: medium error; -ENOSPC:
	// out of space on a thin backstore; -EINVAL: a bad request; -ERANGE: beyond the end,
	// which a request the core checked can still meet when the size shrank since;
	// -EOPNOTSUPP: Unmap on a backstore that cannot deallocate; -ETIMEDOUT: the storage did
	// not answer in time - rbd: an OSD operation ran past rados_osd_op_timeout - and the
	// request may or may not have taken effect: the core answers BUSY, for the initiator to
	// retry, where -EIO would be a MEDIUM ERROR it does not retry; -ESHUTDOWN: this
	// backstore was fenced off its storage - rbd: its client blocklisted, another gateway
	// owns the image - and the request did not take effect: the core answers NOT READY,
	// TARGET PORT IN UNAVAILABLE STATE, which a multipath initiator retries through
	// another target port; -ENOLCK: a write needed a lock this backstore does not hold now
	// - rbd in gateway mode: the image's exclusive lock, its group moving between
	// gateways - and did not take effect: the core answers NOT READY, ASYMMETRIC ACCESS
	// STATE TRANSITION, which the initiator retries).
	void (*done)(BsIo *io, int err) = nullptr;
	void *priv = nullptr;    // the submitter's context (done() recovers its command from it)
	BsIo *bs_next = nullptr; // backstore-private until done(): its wait-FIFO link (no alloc)
};

// What GET LBA STATUS needs: whether a range is mapped, and how far that state extends.
struct BsExtent {
	bool mapped = true;  // false: deallocated (reads return zeros)
	uint64_t length = 0; // bytes from the queried offset with the same state (> 0)
};

// What a thin LU's storage holds (LOG SENSE's logical block provisioning page, SBC-3 6.4;
// the soft threshold, scsi/lbp.cc). Bytes.
struct BsUsage {
	uint64_t used = 0;             // allocated to this LU's data (a sparse file's blocks)
	uint64_t available = 0;        // that can still be allocated to it (has_available)
	bool has_available = false;    // false: the kind cannot say (memory: until malloc fails)
	bool available_shared = false; // available is shared with others (a file system's)
};

class Backstore
{
public:
	virtual ~Backstore() = default;
	Backstore(const Backstore &) = delete;
	Backstore &operator=(const Backstore &) = delete;

	const std::string &kind() const { return kind_; } // "null", "ram", "file", "block", "rbd"
	// Bytes. Changes under resize() while other threads read it: each reader uses the value
	// it loaded once for one decision (a range check), never two loads for one request.
	uint64_t size() const { return size_.load(std::memory_order_acquire); }
	// Largest number of requests executing at once; more wait in order.
	uint32_t queue_depth() const { return queue_depth_; }
	// Unmap and WriteZeroes deallocate storage (thin provisioning: UNMAP, WRITE SAME
	// with UNMAP, GET LBA STATUS report real state).
	virtual bool can_unmap() const = 0;
	// Writes may sit in a volatile cache until Flush (the mode page's WCE bit).
	virtual bool write_cache() const = 0;
	// The unit in which Unmap really frees storage, bytes (a power of two): VPD page B0h's
	// OPTIMAL UNMAP GRANULARITY. Smaller ranges are zeroed, not freed.
	virtual uint32_t unmap_granularity() const { return 4096; }
	// The longest Write, bytes, that the backstore performs as one indivisible operation
	// when asked to (BsIo::atomic; SBC-4 4.29 atomic writes): no request running beside
	// it sees part of it, and no failure - out of space, a crash, a power loss - leaves
	// part of it written. 0: it cannot promise that of any length (WRITE ATOMIC is then
	// not offered).
	virtual uint32_t atomic_write_max() const { return 0; }
	// Bytes, a power of two, or 0 (none): an atomic Write must start at a multiple of it
	// (SBC-4 6.6.4 ATOMIC ALIGNMENT), and atomic_write_max() is at most it, so that no
	// atomic Write crosses one. For a backstore whose writes are indivisible only within
	// a unit of storage (rbd: one RADOS object).
	virtual uint32_t atomic_write_align() const { return 0; }
	// The longest CompareAndWrite, bytes, the backstore performs itself, atomic against
	// every writer of the storage (rbd: the OSD compares and writes). 0: none; COMPARE AND
	// WRITE is then read, compare and write under the logical unit's own turn, atomic
	// against this process only (scsi/sbc_caw.cc).
	virtual uint32_t compare_and_write_max() const { return 0; }
	// The longest WriteSame, bytes, the backstore performs itself (rbd: the OSDs replicate
	// the block, which crosses the network once). 0: none; WRITE SAME then writes a buffer
	// of copies of the block, request after request (scsi/sbc_write_same.cc). The core
	// splits a longer range into requests of at most this many bytes.
	virtual uint64_t write_same_max() const { return 0; }
	// A name of the storage that is the same from every host that opens it (rbd: the
	// cluster's fsid, the pool's id and the image's id), so that every gateway of one image
	// gives its LU the same serial number and NAA identifier whatever the LU is called
	// there; "" (the default): none, the LU's identity comes from its name (lu.cc).
	virtual std::string identity() const { return {}; }

	// Start io; never blocks. io->done is called exactly once (possibly before submit
	// returns: see Threading above).
	virtual void submit(BsIo *io) = 0;

	// The allocation state at offset (GET LBA STATUS). Backstores that cannot tell report
	// everything mapped. Synchronous and cheap (no data I/O); 0 or a negative errno
	// (-ERANGE: at or past the end).
	virtual int extent(uint64_t offset, BsExtent *out) = 0;

	// How much storage the LU's data takes and how much more it can take (BsUsage), cheaply
	// (a system call, a scan of a table; no data I/O). ram: its chunks; file: the file's
	// blocks (fstat) and the file system's free space (fstatvfs). 0, or -EOPNOTSUPP from
	// a kind that cannot say (block devices, rbd, null: the default).
	virtual int usage(BsUsage *out)
	{
		(void)out;
		return -EOPNOTSUPP;
	}

	// Make the backstore bytes long (> 0; the logical unit checks the block multiple),
	// while requests run on other threads. A request checked against the old size either
	// runs whole or fails with -ERANGE; none runs on storage that is gone. Per kind:
	//   null   the number only
	//   ram    grows the chunk table; shrinking frees what lies past the new end, so a
	//          later grow reads zeros there
	//   file   extends the file (sparse ftruncate) when it is shorter than bytes (-EROFS
	//          when read-only); a shrink never shortens the file: as at open, its tail is
	//          data, and an administrator truncates a file with `truncate`, not the target
	//   block  at most the device's size, re-read now (BLKGETSIZE64); -ENOSPC beyond it
	// Calls are serialised by the caller (the logical unit). 0, or a negative errno and a
	// message in *why (may be null) with size() unchanged; -EOPNOTSUPP from a kind that
	// cannot change size (the default).
	virtual int resize(uint64_t bytes, std::string *why)
	{
		(void)bytes;
		if (why)
			*why = kind_ + " backstore: cannot change size";
		return -EOPNOTSUPP;
	}

	// Call changed() when the storage's size may have changed outside (rbd: the image
	// resized by `rbd resize` or by another gateway), on a thread of the backstore's, never
	// inside a call of this interface; the logical unit then rescans (storage_size()).
	// nullptr stops the calls and returns only once none runs. Kinds whose storage nothing
	// else resizes, or that cannot tell (a file grown by hand: SIGHUP or `ulpctl lun
	// rescan` rescans it), ignore it.
	virtual void on_storage_change(std::function<void()> changed) { (void)changed; }

	// What the storage under the backstore holds now, bytes, not rounded to any block:
	// file: the file's length (fstat); block: the device's (BLKGETSIZE64); ram, null: size()
	// (nothing outside the process can change them). 0, or a negative errno and *why.
	virtual int storage_size(uint64_t *bytes, std::string *why)
	{
		(void)why;
		*bytes = size();
		return 0;
	}

protected:
	Backstore(std::string kind, uint64_t size, uint32_t queue_depth)
	    : kind_(std::move(kind)), size_(size), queue_depth_(queue_depth)
	{
	}
	// resize(): publish the new size once the storage behind it is ready.
	void set_size(uint64_t bytes) { size_.store(bytes, std::memory_order_release); }

private:
	std::string kind_;
	// Bytes. Release store in set_size(), acquire load in size(): a thread that sees a
	// grown size also sees the storage resize() made ready before publishing it (ram's
	// table; file's ftruncate), and the logical unit's unit attention orders READ
	// CAPACITY after it besides (its lock). Shrinks need no order: every kind rechecks a
	// request against size() where the request meets storage (under its own lock).
	std::atomic<uint64_t> size_;
	uint32_t queue_depth_;
};

// Copy len bytes (> 0) of src from src_off to dst at dst_off inside the kernel, by
// copy_file_range(2) on the two files' buffered descriptors (EXTENDED COPY's fast path,
// scsi/xcopy.cc), when both are file backstores (kind "file"; src and dst may be one). It
// BLOCKS for the copy: call it on a thread that may (never an event loop's). durable: make
// what it wrote durable before returning (fdatasync: FUA's meaning, for a destination whose
// write cache is off). Returns the bytes copied (> 0, possibly fewer than len: call again
// for the rest), or a negative errno: -EOPNOTSUPP when the kinds or the kernel cannot copy
// this way (-EXDEV across file systems, -EINVAL for overlapping ranges of one file, -ENOSYS;
// 0 bytes copied reads as -EOPNOTSUPP too): the caller reads and writes instead; -ERANGE
// beyond either size; -EROFS to a read-only one; else the I/O error.
//
// Coherence with the other requests: the buffered descriptor goes through the page cache,
// which an O_DIRECT write of the same file writes back and invalidates over its range before
// completing, and which an O_DIRECT read writes back over its range before reading; so the
// copy reads what every completed write wrote, and every later read - direct, buffered or
// from the cache inside submit() - sees what the copy wrote. No other cache sits in front
// of a file backstore: what the page cache holds is the "volatile cache" FLUSH and FUA
// write back (fdatasync covers pages of either descriptor).
int64_t bs_copy_range(Backstore &src, uint64_t src_off, Backstore &dst, uint64_t dst_off,
                      uint64_t len, bool durable);

// An RBD image and the Ceph client that opens it (kind "rbd"; scsi/bs_rbd.cc).
// RbdConfig::atomic_unit's default: 128 KiB, within any object (4 MiB by default), and 256
// blocks of 512 bytes.
inline constexpr uint32_t kRbdAtomicUnit = 128 * 1024;

// Whether unit is an atomic unit an LU of block_size bytes can report: 0 (none) or a power
// of two of at least one block. (That it is within the image's stripe unit is checked when
// the image is opened.)
constexpr bool rbd_atomic_unit_ok(uint32_t unit, uint32_t block_size)
{
	return unit == 0 || ((unit & (unit - 1)) == 0 && unit >= block_size);
}

struct RbdConfig {
	std::string pool;        // the image's pool (required)
	std::string nspace;      // the RADOS namespace within the pool ("": the default one)
	std::string image;       // the image's name (required)
	std::string conf;        // ceph.conf ("": librados' own search: $CEPH_CONF, /etc/ceph)
	std::string client;      // the client id, without "client." ("": admin)
	std::string keyring;     // the keyring file ("": what ceph.conf names)
	std::string group;       // LUs of one group share one RADOS client, the unit that is
	                         // fenced (blocklisted) together ("": "default")
	bool create = false;     // create the image (BackstoreConfig::size bytes) when missing
	uint32_t timeout_s = 30; // seconds: connecting to the cluster at open, and each OSD
	                         // operation (rados_osd_op_timeout) before it fails -ETIMEDOUT
	// Gateway mode (ha/): the image's exclusive lock moves only when rbd_bs_lock() takes or
	// gives it, never because a write came (librbd's rbd_auto_exclusive_lock_until_manual_
	// request off for the group's client): a write without the lock fails -ENOLCK instead
	// of taking the lock from the owner. The whole group must agree.
	bool managed_lock = false;
	uint32_t atomic_unit = kRbdAtomicUnit; // bytes: WRITE ATOMIC's alignment and longest
	                                       // length (a power of two from the block size
	                                       // to the stripe unit); 0: no WRITE ATOMIC
};

struct BackstoreConfig {
	std::string kind;          // "null", "ram", "file", "block", "rbd"
	std::string path;          // file / block: the path; ram, null: unused
	uint64_t size = 0;         // bytes; file: created or extended to this when non-zero
	                           // (0 = the file's current size); block: 0 = the device's
	uint32_t block_size = 512; // the LU's logical block size: O_DIRECT needs alignment
	uint32_t queue_depth = 64; // requests executing at once (io_uring entries)
	bool direct = true;        // file/block: O_DIRECT where aligned
	bool write_cache = true;   // file/block: report a volatile cache (honour FUA/flush)
	bool read_only = false;    // open read-only; writes fail with -EROFS
	RbdConfig rbd;             // rbd: the image (size: 0 = the image's; else it must match,
	                           // or is the size to create it with)
};

// Make a backstore, or nullptr with *err set (negative errno) and a message in *why.
std::unique_ptr<Backstore> make_backstore(const BackstoreConfig &cfg, int *err, std::string *why);

// The rbd kind is in a library of its own (ulp_scsi_rbd, which links librbd): a program
// that serves rbd LUs links it and calls this once before its first make_backstore().
// Elsewhere make_backstore() refuses kind rbd (-EPROTONOSUPPORT, saying so). Thread-safe;
// calling it again changes nothing.
void rbd_backstore_enable();

} // namespace ulp::scsi
