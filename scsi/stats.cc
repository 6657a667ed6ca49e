// SPDX-License-Identifier: MIT
// scsi/stats.cc - the core's I/O counters (scsi/stats.h).
#include "scsi/stats.h"

#include "core/shard_lock.h"

#include "scsi/cmd.h"
#include "scsi/core_internal.h"

#include <bit>
#include <ctime>

namespace ulp::scsi
{

const char *io_kind_str(IoKind k)
{
	switch (k) {
	case IoKind::Read:
		return "read";
	case IoKind::Write:
		return "write";
	case IoKind::Other:
		return "other";
	}
	return "?";
}

const char *io_error_str(IoError e)
{
	switch (e) {
	case IoError::CheckCondition:
		return "check_condition";
	case IoError::Transport:
		return "transport";
	case IoError::Busy:
		return "busy";
	case IoError::ReservationConflict:
		return "reservation_conflict";
	case IoError::Aborted:
		return "aborted";
	}
	return "?";
}

namespace
{

// The kind of each operation code (by the CDB's first byte: a command refused while parsing
// is still what it asked to be).
constexpr std::array<IoKind, 256> make_kinds()
{
	std::array<IoKind, 256> k{};
	k.fill(IoKind::Other);
	for (uint8_t op : {OP_READ_6, OP_READ_10, OP_READ_12, OP_READ_16})
		k[op] = IoKind::Read;
	for (uint8_t op :
	     {OP_WRITE_6, OP_WRITE_10, OP_WRITE_12, OP_WRITE_16, OP_WRITE_VERIFY_10,
	      OP_WRITE_VERIFY_12, OP_WRITE_VERIFY_16, OP_WRITE_SAME_10, OP_WRITE_SAME_16, OP_UNMAP,
	      OP_COMPARE_AND_WRITE, OP_ORWRITE_16, OP_WRITE_ATOMIC_16})
		k[op] = IoKind::Write;
	return k;
}
constexpr std::array<IoKind, 256> kKinds = make_kinds();

} // namespace

size_t lat_bucket(uint64_t ns)
{
	// The smallest i with ns <= 1000 * 2^i, i.e. ceil(ns / 1000) <= 2^i.
	const uint64_t us = (ns + 999) / 1000;
	const size_t i = us <= 1 ? 0 : size_t(std::bit_width(us - 1));
	return i < kLatBuckets ? i : kLatBuckets;
}

uint64_t IoCounts::lat_count() const
{
	uint64_t n = 0;
	for (uint64_t v : lat)
		n += v;
	return n;
}

IoCounts &IoCounts::operator+=(const IoCounts &o)
{
	for (size_t i = 0; i < kIoKinds; i++)
		cmds[i] += o.cmds[i];
	tmfs += o.tmfs;
	bytes_read += o.bytes_read;
	bytes_written += o.bytes_written;
	for (size_t i = 0; i < kIoErrors; i++)
		errors[i] += o.errors[i];
	for (size_t i = 0; i <= kLatBuckets; i++)
		lat[i] += o.lat[i];
	lat_sum_ns += o.lat_sum_ns;
	return *this;
}

IoStats::Shard &IoStats::shard()
{
	return shards_[this_shard() % kStatShards];
}

void IoStats::count_cmd(const Cmd &cmd, bool aborted, bool data_in, uint64_t lat_ns)
{
	auto &v = shard().v;
	auto add = [&](size_t i, uint64_t n) { v[i].fetch_add(n, std::memory_order_relaxed); };
	add(size_t(kKinds[cmd.cdb[0]]), 1);
	if (aborted) {
		add(kErr + size_t(IoError::Aborted), 1);
	} else {
		switch (cmd.status) {
		case Status::Good:
		case Status::ConditionMet:
			if (data_in)
				add(kBytesRead, cmd.xfer_len);
			else if (cmd.cdb_dir == DataDir::Write && cmd.xfer_len)
				add(kBytesWritten, cmd.xfer_len);
			break;
		case Status::CheckCondition:
			add(kErr + size_t(cmd.xport_failed ? IoError::Transport
			                                   : IoError::CheckCondition),
			    1);
			break;
		case Status::Busy:
		case Status::TaskSetFull:
			add(kErr + size_t(IoError::Busy), 1);
			break;
		case Status::ReservationConflict:
			add(kErr + size_t(IoError::ReservationConflict), 1);
			break;
		default: // TASK ABORTED is the aborted case; ACA ACTIVE is never sent
			add(kErr + size_t(IoError::CheckCondition), 1);
			break;
		}
	}
	add(kLat + lat_bucket(lat_ns), 1);
	add(kLatSum, lat_ns);
}

void IoStats::count_tmf()
{
	shard().v[kTmf].fetch_add(1, std::memory_order_relaxed);
}

IoCounts IoStats::read() const
{
	IoCounts c;
	for (const Shard &s : shards_) {
		auto get = [&](size_t i) { return s.v[i].load(std::memory_order_relaxed); };
		for (size_t i = 0; i < kIoKinds; i++)
			c.cmds[i] += get(i);
		c.tmfs += get(kTmf);
		c.bytes_read += get(kBytesRead);
		c.bytes_written += get(kBytesWritten);
		for (size_t i = 0; i < kIoErrors; i++)
			c.errors[i] += get(kErr + i);
		for (size_t i = 0; i <= kLatBuckets; i++)
			c.lat[i] += get(kLat + i);
		c.lat_sum_ns += get(kLatSum);
	}
	return c;
}

void XcopyStats::count_end(End e)
{
	std::atomic<uint64_t> &c = e == End::Good ? good_ : e == End::Failed ? failed_ : aborted_;
	c.fetch_add(1, std::memory_order_relaxed);
}

void XcopyStats::count_bytes(uint64_t n, bool kernel)
{
	bytes_.fetch_add(n, std::memory_order_relaxed);
	if (kernel)
		kernel_bytes_.fetch_add(n, std::memory_order_relaxed);
}

XcopyCounts XcopyStats::read() const
{
	XcopyCounts c;
	c.good = good_.load(std::memory_order_relaxed);
	c.failed = failed_.load(std::memory_order_relaxed);
	c.aborted = aborted_.load(std::memory_order_relaxed);
	c.bytes = bytes_.load(std::memory_order_relaxed);
	c.kernel_bytes = kernel_bytes_.load(std::memory_order_relaxed);
	return c;
}

uint64_t stats_now_ns()
{
	timespec ts;
	::clock_gettime(CLOCK_MONOTONIC, &ts);
	return uint64_t(ts.tv_sec) * 1000000000u + uint64_t(ts.tv_nsec);
}

} // namespace ulp::scsi
