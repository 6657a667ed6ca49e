// SPDX-License-Identifier: MIT
// tools/ulp-stress/io.cc - verified I/O on one nexus (see io.h).
#include "tools/ulp-stress/io.h"

#include "iscsi/initiator/scsi.h"

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <deque>
#include <random>
#include <vector>

namespace stress
{

using namespace ulp::iscsi::initiator;
using clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

namespace
{

constexpr size_t kMaxMsgs = 20;
constexpr uint8_t kStatusBusy = 0x08;        // SAM-5 table 35
constexpr uint8_t kStatusTaskSetFull = 0x28; // SAM-5 table 35

struct Slot {
	std::vector<uint8_t> buf;
	std::array<uint8_t, 16> cdb{};
	bool busy = false;
	bool write = false;
	uint64_t blk = 0; // first block (relative to the ledger's range)
	uint32_t n = 0;
	uint64_t gen = 0;
	uint64_t chunk = 0;                         // its index in run_io's chunks
	std::chrono::steady_clock::time_point sent; // submitted (its latency counts from here)
};

void note(IoStats *st, const std::string &m)
{
	if (st->msgs.size() < kMaxMsgs)
		st->msgs.push_back(m);
}

} // namespace

bool lun_ready(initiator::Disk &d, uint64_t lun, std::string *why)
{
	// The first command of a new I_T nexus may get a UNIT ATTENTION (POWER ON, RESET).
	const auto tur = cdb_test_unit_ready();
	ScsiResult r;
	for (int i = 0; i < 3; i++) {
		r = d.run({lun, tur, DataDir::None, {}});
		if (r.good() || r.outcome != TaskOutcome::Completed)
			break;
	}
	if (r.good())
		return true;
	*why = "TEST UNIT READY: " + describe_result(r) +
	       (r.outcome == TaskOutcome::Completed ? "" : ": " + d.error());
	return false;
}

bool run_io(initiator::Disk &d, uint64_t lun, Ledger &ledger, Region region, GenSource &gens,
            const IoOptions &opt, const Journal *journal, IoStats *st)
{
	const uint32_t bs = ledger.block_size();
	// Chunks [0, own) are the region's, [own, chunks) the shared region's (reads only).
	const uint64_t own = region.count / opt.io_blocks;
	const uint64_t chunks = own + opt.shared.count / opt.io_blocks;
	if (own == 0) {
		st->fatal = "region smaller than one I/O";
		return false;
	}
	auto chunk_blk = [&](uint64_t c) {
		return c < own ? region.first + c * opt.io_blocks
		               : opt.shared.first + (c - own) * opt.io_blocks;
	};
	std::vector<Slot> slots(std::min<uint64_t>(opt.qd, chunks));
	for (Slot &s : slots)
		s.buf.resize(size_t(opt.io_blocks) * bs);
	std::vector<bool> busy(chunks); // a command in flight on the chunk
	std::mt19937 rng(opt.seed);
	uint32_t inflight = 0;
	bool issuing = true;
	const auto end = clock::now() + opt.duration;

	auto completed = [&](Slot &s, const ScsiResult &r) {
		s.busy = false;
		inflight--;
		busy[s.chunk] = false;
		if (r.outcome == TaskOutcome::Completed) {
			st->answered++;
			st->worst = std::max(st->worst,
			                     std::chrono::duration_cast<std::chrono::microseconds>(
			                         clock::now() - s.sent));
		}
		if (r.outcome == TaskOutcome::Completed && r.response == 0 &&
		    (r.status == kStatusBusy || r.status == kStatusTaskSetFull)) {
			// SAM-5 5.3: not executed, the target holds us back; the write stays
			// uncertain in the ledger, the chunk is free to go again.
			st->busy++;
			return;
		}
		if (!r.good()) {
			if (r.outcome == TaskOutcome::ConnectionLost ||
			    r.outcome == TaskOutcome::Timeout ||
			    r.outcome == TaskOutcome::Cancelled) {
				st->lost++;
				st->timeouts += r.outcome == TaskOutcome::Timeout;
				if (st->fatal.empty())
					st->fatal = "connection lost: " + d.error();
			} else {
				st->errors++;
				char m[128];
				std::snprintf(m, sizeof(m),
				              "%s of %u blocks at block %" PRIu64 ": ",
				              s.write ? "write" : "read", s.n, s.blk);
				note(st, m + describe_result(r));
			}
			issuing = false;
			return; // a write not acknowledged stays uncertain in the ledger
		}
		st->ios++;
		if (opt.progress)
			opt.progress->fetch_add(1, std::memory_order_relaxed);
		if (s.write) {
			st->writes++;
			if (opt.progress_writes)
				opt.progress_writes->fetch_add(1, std::memory_order_relaxed);
			if (journal && journal->ack)
				journal->ack(s.blk, s.n,
				             s.gen); // the parent knows before it counts
			ledger.ack_write(s.blk, s.n, s.gen);
			return;
		}
		CheckResult c;
		ledger.check_read(s.blk, {s.buf.data(), size_t(s.n) * bs}, &c);
		st->checked += c.checked;
		st->verify_errors += c.bad;
		for (auto &m : c.msgs)
			note(st, "verify: " + m);
	};

	for (;;) {
		if (issuing && (clock::now() >= end || (opt.stop && opt.stop->load())))
			issuing = false;
		for (Slot &s : slots) {
			if (!issuing)
				break;
			if (s.busy)
				continue;
			uint64_t c = rng() % chunks;
			for (uint64_t i = 0; i < chunks && busy[c]; i++)
				c = (c + 1) % chunks;
			if (busy[c])
				break;
			s.chunk = c;
			s.blk = chunk_blk(c);
			s.n = opt.io_blocks;
			// Reads only where something was written: a read of nothing checks nothing.
			// The shared region is read, never written.
			s.write = c < own && ((rng() & 1) || !ledger.any_written(s.blk, s.n));
			std::span<uint8_t> data(s.buf.data(), size_t(s.n) * bs);
			const uint64_t lba = ledger.first_lba() + s.blk;
			if (s.write) {
				s.gen = gens.take();
				if (journal && journal->start)
					journal->start(s.blk, s.n,
					               s.gen); // before it can reach the target
				ledger.start_write(s.blk, s.n, s.gen, data);
				s.cdb = cdb_write16(lba, s.n);
			} else {
				s.cdb = cdb_read16(lba, s.n);
			}
			ScsiRequest req;
			req.lun = lun;
			req.cdb = s.cdb;
			req.dir = s.write ? DataDir::Write : DataDir::Read;
			req.data = data;
			s.busy = true;
			s.sent = clock::now();
			busy[c] = true;
			inflight++;
			Slot *sp = &s;
			const int rc = d.submit(
			    req, [&completed, sp](const ScsiResult &r) { completed(*sp, r); });
			if (rc == 0)
				continue;
			s.busy = false;
			busy[c] = false;
			inflight--;
			if (rc == -EBUSY && inflight > 0) {
				st->held++;
				break; // no credit now: after the next completions
			}
			// Refused: the write stays uncertain (it may not have gone, it is not
			// known).
			if (st->fatal.empty())
				st->fatal = "cannot submit: " + d.last_error() +
				            (d.error().empty() ? "" : ": " + d.error());
			issuing = false;
			break;
		}
		if (!issuing && inflight == 0)
			break;
		if (d.poll(milliseconds(50)) < 0) {
			if (st->fatal.empty())
				st->fatal = "connection lost: " + d.error();
			break;
		}
	}
	return st->fatal.empty();
}

bool fill_region(initiator::Disk &d, uint64_t lun, Ledger &ledger, Region region, GenSource &gens,
                 uint32_t io_blocks, uint32_t qd, IoStats *st)
{
	const uint32_t bs = ledger.block_size();
	std::deque<uint64_t> todo; // chunks still to write; one answered BUSY goes back
	for (uint64_t c = 0; c < region.count / io_blocks; c++)
		todo.push_back(c);
	std::vector<Slot> slots(std::max<uint32_t>(1, qd));
	for (Slot &s : slots)
		s.buf.resize(size_t(io_blocks) * bs);
	uint32_t inflight = 0;
	auto completed = [&](Slot &s, const ScsiResult &r) {
		s.busy = false;
		inflight--;
		if (r.good()) {
			st->ios++;
			st->writes++;
			ledger.ack_write(s.blk, s.n, s.gen);
		} else if (r.outcome == TaskOutcome::Completed && r.response == 0 &&
		           (r.status == kStatusBusy || r.status == kStatusTaskSetFull)) {
			st->busy++;
			todo.push_back(
			    s.chunk); // not executed: again (it stays uncertain till then)
		} else if (st->fatal.empty()) {
			st->fatal = "fill: write at block " + std::to_string(s.blk) + ": " +
			            describe_result(r);
		}
	};
	for (;;) {
		for (Slot &s : slots) {
			if (s.busy || todo.empty() || !st->fatal.empty())
				continue;
			s.chunk = todo.front();
			todo.pop_front();
			s.blk = region.first + s.chunk * io_blocks;
			s.n = io_blocks;
			s.gen = gens.take();
			std::span<uint8_t> data(s.buf.data(), size_t(s.n) * bs);
			ledger.start_write(s.blk, s.n, s.gen, data);
			s.cdb = cdb_write16(ledger.first_lba() + s.blk, s.n);
			s.busy = true;
			inflight++;
			Slot *sp = &s;
			const int rc =
			    d.submit({lun, s.cdb, DataDir::Write, data},
			             [&completed, sp](const ScsiResult &r) { completed(*sp, r); });
			if (rc == 0)
				continue;
			s.busy = false;
			inflight--;
			todo.push_front(s.chunk);
			if (rc == -EBUSY && inflight > 0)
				break; // no credit now: after the next completions
			if (st->fatal.empty())
				st->fatal = "fill: cannot submit: " + d.last_error();
		}
		if (inflight == 0 && (todo.empty() || !st->fatal.empty()))
			break;
		if (d.poll(milliseconds(50)) < 0) {
			if (st->fatal.empty())
				st->fatal = "fill: connection lost: " + d.error();
			return false;
		}
	}
	return st->fatal.empty();
}

bool verify_region(initiator::Disk &d, uint64_t lun, Ledger &ledger, Region region,
                   uint32_t io_blocks, IoStats *st)
{
	const uint32_t bs = ledger.block_size();
	std::vector<uint8_t> buf(size_t(io_blocks) * bs);
	for (uint64_t blk = region.first; blk < region.first + region.count; blk += io_blocks) {
		const uint32_t n =
		    uint32_t(std::min<uint64_t>(io_blocks, region.first + region.count - blk));
		if (!ledger.any_written(blk, n))
			continue;
		const auto cdb = cdb_read16(ledger.first_lba() + blk, n);
		const ScsiResult r = d.run({lun, cdb, DataDir::Read, {buf.data(), size_t(n) * bs}});
		if (!r.good()) {
			(r.outcome == TaskOutcome::Completed ? st->errors : st->lost)++;
			st->timeouts += r.outcome == TaskOutcome::Timeout;
			st->fatal = "verify read at block " + std::to_string(blk) + ": " +
			            describe_result(r) +
			            (r.outcome == TaskOutcome::Completed ? "" : ": " + d.error());
			return false;
		}
		st->ios++;
		CheckResult c;
		ledger.check_read(blk, {buf.data(), size_t(n) * bs}, &c);
		st->checked += c.checked;
		st->verify_errors += c.bad;
		for (auto &m : c.msgs)
			note(st, "verify: " + m);
	}
	return true;
}

} // namespace stress
