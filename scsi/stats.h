// SPDX-License-Identifier: MIT
// scsi/stats.h - I/O statistics of the target core: commands by kind, bytes moved, errors by
// kind and a latency histogram, kept per logical unit and per I_T nexus (the kernel's
// se_dev_stat_grps / scsi_port_stats, iostat's figures), and summed per target port group.
//
// Counted once per command, where its status is final (core.cc cmd_finish), so every fabric
// (iSCSI over TCP or iSER, SRP, the loopback) gets the same numbers without code of its own.
// A task management function is counted when it is submitted (tmr.cc). What a fabric answers
// without the core (iSCSI's TASK SET FULL for lack of a buffer, SRP's refused IUs) is the
// fabric's own counter, not these.
//
// Nothing on the per-I/O path is shared between workers: the counters are
// sharded, each thread adding to the shard of its this_shard() (core/shard_lock.h) modulo
// kStatShards cache-line aligned shards, with relaxed atomic adds (two threads may share one).
// Readers sum the shards (IoStats::read), on the slow path: the sum is a snapshot in which
// each counter is exact but the counters may be from instants microseconds apart.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>

namespace ulp::scsi
{

struct Cmd;

// What a command is, by its operation code (a READ past the end is still a read).
enum class IoKind : uint8_t {
	Read,  // READ (6, 10, 12, 16)
	Write, // WRITE (6..16), WRITE AND VERIFY, WRITE SAME, UNMAP, COMPARE AND WRITE,
	       // ORWRITE, WRITE ATOMIC: the commands that change the medium
	Other, // everything else (INQUIRY, TEST UNIT READY, VERIFY, reservations, ...)
};
inline constexpr size_t kIoKinds = 3;

// How a command ended, when not with GOOD (or CONDITION MET).
enum class IoError : uint8_t {
	CheckCondition,      // CHECK CONDITION with sense, other than the two below
	Transport,           // the fabric could not move its data-out (write_done(cmd, false))
	Busy,                // BUSY or TASK SET FULL
	ReservationConflict, // RESERVATION CONFLICT
	Aborted,             // aborted by a task management function or a session teardown
	                     // (TASK ABORTED sent, or no response at all)
};
inline constexpr size_t kIoErrors = 5;

const char *io_kind_str(IoKind k);   // "read", "write", "other"
const char *io_error_str(IoError e); // "check_condition", "transport", "busy", ...

// Latency buckets: bucket i counts commands that took at most 2^i microseconds (1 us ..
// 2^23 us, about 8.4 s); the last one, kLatBuckets, those that took longer. Latency is from
// submit() to the status being handed to the fabric (the response's sending excluded).
inline constexpr size_t kLatBuckets = 24;
size_t lat_bucket(uint64_t ns); // 0..kLatBuckets

// A snapshot: plain numbers, summable.
struct IoCounts {
	std::array<uint64_t, kIoKinds> cmds{};       // SCSI commands ended, by kind
	uint64_t tmfs = 0;                           // task management functions submitted
	uint64_t bytes_read = 0;                     // data-in handed to the fabric, bytes
	uint64_t bytes_written = 0;                  // data-out of commands ending GOOD, bytes
	std::array<uint64_t, kIoErrors> errors{};    // commands not GOOD, by kind
	std::array<uint64_t, kLatBuckets + 1> lat{}; // latency histogram (not cumulative)
	uint64_t lat_sum_ns = 0;                     // sum of the latencies, ns

	uint64_t commands() const { return cmds[0] + cmds[1] + cmds[2]; }
	uint64_t lat_count() const; // == commands()
	IoCounts &operator+=(const IoCounts &o);
};

// Counters kept by the core: one per logical unit, one per I_T nexus.
class IoStats
{
public:
	// cmd has ended (its status final, or aborted): its kind, bytes, error and latency
	// (now_ns - start_ns). data_in: its data-in goes to the fabric (bytes_read).
	void count_cmd(const Cmd &cmd, bool aborted, bool data_in, uint64_t lat_ns);
	void count_tmf();
	IoCounts read() const; // the shards summed

private:
	// One shard's counters, in IoCounts' order: cmds, tmfs, bytes read and written,
	// errors, the histogram, its sum.
	static constexpr size_t kFields = kIoKinds + 3 + kIoErrors + kLatBuckets + 1 + 1;
	struct alignas(64) Shard {
		std::array<std::atomic<uint64_t>, kFields> v{};
	};
	static constexpr size_t kTmf = kIoKinds, kBytesRead = kIoKinds + 1,
	                        kBytesWritten = kIoKinds + 2, kErr = kIoKinds + 3,
	                        kLat = kErr + kIoErrors, kLatSum = kLat + kLatBuckets + 1;
	static_assert(kLatSum + 1 == kFields);
	Shard &shard();

	static constexpr size_t kStatShards = 16;
	std::array<Shard, kStatShards> shards_;
};

// The copy manager's figures (EXTENDED COPY, scsi/xcopy.cc), a snapshot. Counted on the LU
// the EXTENDED COPY addressed (its copy manager), whichever LUs its segments read and wrote.
struct XcopyCounts {
	uint64_t good = 0;         // EXTENDED COPY commands ended GOOD (a list copying nothing too)
	uint64_t failed = 0;       // ended CHECK CONDITION: a bad list, a copy target not
	                           // reachable, an I/O error (the sense says which)
	uint64_t aborted = 0;      // aborted by a task management function or a session's loss
	uint64_t bytes = 0;        // bytes written to copy destinations, every path, partial
	                           // copies included
	uint64_t kernel_bytes = 0; // of bytes, those the kernel copied (copy_file_range(2)
	                           // between file backstores) without a read and a write here
};

// The copy manager's counters of one LU: relaxed atomics, one add per chunk or per command
// (EXTENDED COPY is rare beside READ and WRITE: nothing to shard).
class XcopyStats
{
public:
	enum class End : uint8_t { Good, Failed, Aborted };
	void count_end(End e);
	void count_bytes(uint64_t n, bool kernel);
	XcopyCounts read() const;

private:
	std::atomic<uint64_t> good_{0}, failed_{0}, aborted_{0}, bytes_{0}, kernel_bytes_{0};
};

// CLOCK_MONOTONIC in nanoseconds (the vDSO's: no system call), for Cmd::start_ns.
uint64_t stats_now_ns();

} // namespace ulp::scsi
