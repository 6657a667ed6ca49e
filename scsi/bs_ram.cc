// SPDX-License-Identifier: MIT
// scsi/bs_ram.cc - the ram backstore: a thin, memory-backed logical unit (the kernel's
// target_core_rd, but allocated on demand).
//
// The LU is a table of fixed-size chunks. A chunk's memory is allocated by the first
// write that touches it; until then it reads as zeros and counts as unmapped. Unmap and
// WriteZeroes free the chunks they cover entirely and zero the parts of the others.
//
// Locking: every request checks its range under the table lock, so resize(), which takes it
// exclusive, never changes the size or the table under a request. Reads and writes take the
// table lock shared and may run in parallel from any number of threads; a write that finds
// a chunk missing allocates one and installs it with a compare-and-swap, so two writers
// racing on a new chunk agree on one. Unmap and WriteZeroes take the lock exclusive,
// because they free chunks: no reader or writer can hold a chunk's pointer while it is
// freed. Concurrent writes to the same bytes are the initiator's problem (SBC leaves their
// result undefined), as with any disk.
#include "core/sanitizer.h"
#include "core/shard_lock.h"
#include "scsi/bs_internal.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <optional>

#if ULP_TSAN
extern "C" void __tsan_ignore_thread_begin();
extern "C" void __tsan_ignore_thread_end();
#endif

namespace ulp::scsi
{

namespace
{

// Copies a command's data to or from the LU's memory. Two commands whose ranges overlap may
// run at once on two threads (each under its own shard): SIMPLE tasks have no order
// (SAM-5 8.6), and what overlapping writes leave, or what a read racing a write sees, is
// the initiator's business, as on a disk; the kernel's brd and LIO's rd_mcp copy the same
// way. ThreadSanitizer is told to look away from these bytes only; the table of chunks and
// everything else it still checks.
inline void copy_data(void *to, const void *from, size_t n)
{
#if ULP_TSAN
	__tsan_ignore_thread_begin();
#endif
	std::memcpy(to, from, n);
#if ULP_TSAN
	__tsan_ignore_thread_end();
#endif
}

// 64 KiB chunks. Smaller chunks would cost an allocation per 4 KiB written and a bigger
// table (8 bytes per chunk: 128 KiB of table per GiB at 64 KiB, 2 MiB at 4 KiB); larger
// ones would make a sparse 4 KiB write cost a megabyte and make UNMAP, which can only
// free whole chunks, coarse. 64 KiB is also a common unmap granularity and below glibc's
// mmap threshold, so a chunk comes from the heap instead of a system call per write.
constexpr uint64_t kChunkShift = 16;
constexpr uint64_t kChunk = 1ull << kChunkShift;

// Chunks that hold bytes bytes.
uint64_t chunks_for(uint64_t bytes)
{
	return (bytes >> kChunkShift) + ((bytes & (kChunk - 1)) != 0);
}

class RamBackstore final : public Backstore
{
public:
	RamBackstore(const BackstoreConfig &cfg, std::unique_ptr<std::atomic<uint8_t *>[]> t,
	             uint64_t nchunks)
	    : Backstore("ram", cfg.size, cfg.queue_depth), chunks_(std::move(t)), nchunks_(nchunks),
	      cap_(nchunks)
	{
	}

	~RamBackstore() override
	{
		for (uint64_t i = 0; i < cap_; i++)
			std::free(chunks_[i].load(std::memory_order_relaxed));
	}

	bool can_unmap() const override { return true; }
	uint32_t unmap_granularity() const override { return kChunk; }
	// Memory has no volatile cache to flush: a completed write is as durable as it gets.
	bool write_cache() const override { return false; }
	// Any length: an atomic write holds the table exclusively and allocates before it
	// copies (write()), and a power loss takes the whole medium, never part of a write.
	uint32_t atomic_write_max() const override { return UINT32_MAX; }

	void submit(BsIo *io) override
	{
		// Each operation checks the range under the table lock, which resize() takes
		// exclusively: the size it checks against is the size of the table it walks.
		int err;
		switch (io->op) {
		case BsOp::Read:
			err = read(io);
			break;
		case BsOp::Write:
			err = write(io);
			break;
		case BsOp::Unmap:
		case BsOp::WriteZeroes:
			err = zero(io);
			break;
		default: // Flush: 0; a value outside the enum: -EINVAL
			err = bs_check_io(size(), io);
			break;
		}
		io->done(io, err);
	}

	int extent(uint64_t offset, BsExtent *out) override
	{
		// Shared: resize() may replace the table. Only the pointers' null-ness is read,
		// never the memory behind them.
		std::lock_guard g(lock_.mine());
		const uint64_t sz = size();
		if (offset >= sz)
			return -ERANGE;
		uint64_t c = offset >> kChunkShift;
		const bool mapped = chunks_[c].load(std::memory_order_acquire) != nullptr;
		while (++c < nchunks_ &&
		       (chunks_[c].load(std::memory_order_acquire) != nullptr) == mapped)
			;
		out->mapped = mapped;
		out->length = std::min(c << kChunkShift, sz) - offset;
		return 0;
	}

	int usage(BsUsage *out) override
	{
		// Memory is allocated until malloc fails: there is no count of what is left.
		std::lock_guard g(lock_.mine());
		uint64_t n = 0;
		for (uint64_t c = 0; c < nchunks_; c++)
			n += chunks_[c].load(std::memory_order_acquire) != nullptr;
		out->used = std::min(n << kChunkShift, size());
		out->has_available = false;
		return 0;
	}

	int resize(uint64_t bytes, std::string *why) override
	{
		ShardLockAll g(lock_); // no request is between its range check and its copy
		const uint64_t old = size();
		const uint64_t n = chunks_for(bytes);
		if (n > cap_) {
			std::unique_ptr<std::atomic<uint8_t *>[]> t(
			    new (std::nothrow) std::atomic<uint8_t *>[n]());
			if (!t) {
				if (why)
					*why = "ram backstore: no memory for a chunk table of " +
					       std::to_string(n) + " chunks";
				return -ENOMEM;
			}
			for (uint64_t i = 0; i < nchunks_; i++)
				t[i].store(chunks_[i].load(std::memory_order_relaxed),
				           std::memory_order_relaxed);
			chunks_ = std::move(t);
			cap_ = n;
		}
		if (bytes < old) {
			// The data past the new end is dropped: whole chunks freed, the rest of
			// the new last chunk zeroed, so that a later grow reads zeros there (the
			// invariant: bytes of a chunk past size() are zero).
			for (uint64_t i = n; i < nchunks_; i++)
				std::free(chunks_[i].exchange(nullptr, std::memory_order_relaxed));
			const uint64_t in = bytes & (kChunk - 1);
			if (uint8_t *m =
			        in ? chunks_[n - 1].load(std::memory_order_relaxed) : nullptr)
				std::memset(m + in, 0, kChunk - in);
		}
		nchunks_ = n;
		set_size(bytes);
		return 0;
	}

private:
	// Calls fn(chunk index, offset in chunk, bytes, iov byte pointer) over the part of
	// [off, off + len) each chunk holds, walking io's iov in step.
	template <typename Fn> static void walk(const BsIo *io, Fn fn)
	{
		uint64_t off = io->offset;
		for (const iovec &v : io->iov) {
			auto *p = static_cast<uint8_t *>(v.iov_base);
			size_t left = v.iov_len;
			while (left) {
				uint64_t in = off & (kChunk - 1);
				size_t n =
				    static_cast<size_t>(std::min<uint64_t>(left, kChunk - in));
				fn(off >> kChunkShift, in, n, p);
				off += n;
				p += n;
				left -= n;
			}
		}
	}

	int read(const BsIo *io)
	{
		std::lock_guard g(lock_.mine());
		if (int err = bs_check_io(size(), io))
			return err;
		walk(io, [this](uint64_t c, uint64_t in, size_t n, uint8_t *p) {
			const uint8_t *m = chunks_[c].load(std::memory_order_acquire);
			if (m)
				copy_data(p, m + in, n);
			else
				std::memset(p, 0, n);
		});
		return 0;
	}

	// The chunk's memory, allocating it on first use; nullptr when memory is exhausted.
	uint8_t *chunk_for_write(uint64_t c)
	{
		uint8_t *m = chunks_[c].load(std::memory_order_acquire);
		if (m)
			return m;
		auto *fresh = static_cast<uint8_t *>(std::calloc(1, kChunk));
		if (!fresh)
			return nullptr;
		// Release: a reader that sees the pointer sees the zeroed memory behind it.
		if (chunks_[c].compare_exchange_strong(m, fresh, std::memory_order_acq_rel,
		                                       std::memory_order_acquire))
			return fresh;
		std::free(fresh); // another writer won the race; m is its chunk
		return m;
	}

	int write(const BsIo *io)
	{
		// An atomic write (BsIo::atomic) holds the table exclusively, so that no read
		// runs beside it to see part of it, and allocates every chunk it needs before it
		// copies a byte, so that running out of memory leaves it unwritten, not torn.
		std::optional<ShardLockAll> excl;
		std::unique_lock<std::mutex> shared;
		if (io->atomic)
			excl.emplace(lock_);
		else
			shared = std::unique_lock(lock_.mine());
		int err = bs_check_io(size(), io);
		if (err)
			return err;
		if (io->atomic) {
			walk(io, [&](uint64_t c, uint64_t, size_t, uint8_t *) {
				if (!err && !chunk_for_write(c))
					err = -ENOSPC;
			});
			if (err)
				return err;
		}
		walk(io, [&](uint64_t c, uint64_t in, size_t n, uint8_t *p) {
			if (err)
				return;
			uint8_t *m = chunk_for_write(c);
			if (!m) {
				// A thin LU that cannot allocate is out of space, which is what
				// -ENOSPC means in the contract (SPACE ALLOCATION FAILED). The
				// bytes before this chunk are written, as a disk's would be.
				err = -ENOSPC;
				return;
			}
			copy_data(m + in, p, n);
		});
		return err;
	}

	int zero(const BsIo *io)
	{
		ShardLockAll g(lock_);
		if (int err = bs_check_io(size(), io))
			return err;
		uint64_t off = io->offset, len = io->length;
		while (len) {
			uint64_t c = off >> kChunkShift, in = off & (kChunk - 1);
			uint64_t n = std::min(len, kChunk - in);
			// The last chunk may extend past size(); covering up to size() covers it.
			const bool whole = in == 0 && (n == kChunk || off + n == size());
			uint8_t *m = chunks_[c].load(std::memory_order_relaxed);
			if (whole)
				std::free(chunks_[c].exchange(nullptr, std::memory_order_acq_rel));
			else if (m)
				std::memset(m + in, 0, n);
			off += n;
			len -= n;
		}
		return 0;
	}

	// shared: read, write, extent; exclusive: zero() (it frees chunks), atomic writes,
	// resize() (it replaces the table and changes size()).
	// Split by thread (core/shard_lock.h): the I/O path writes no line another worker's
	// requests write.
	ShardLock lock_;
	std::unique_ptr<std::atomic<uint8_t *>[]> chunks_; // per chunk: calloc'd memory or null
	uint64_t nchunks_; // chunks covering size() (lock_); entries past it are null
	uint64_t cap_;     // entries in chunks_ (lock_): a shrink keeps the table
};

} // namespace

std::unique_ptr<Backstore> make_ram_backstore(const BackstoreConfig &cfg, int *err,
                                              std::string *why)
{
	const uint64_t n = chunks_for(cfg.size);
	std::unique_ptr<std::atomic<uint8_t *>[]> t(new (std::nothrow) std::atomic<uint8_t *>[n]());
	if (!t) {
		*err = -ENOMEM;
		*why = "ram backstore: no memory for the chunk table of " + std::to_string(n) +
		       " chunks";
		return nullptr;
	}
	return std::make_unique<RamBackstore>(cfg, std::move(t), n);
}

} // namespace ulp::scsi
