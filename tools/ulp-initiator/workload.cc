// SPDX-License-Identifier: MIT
// tools/ulp-initiator/workload.cc - the I/O generator (see workload.h).
#include "tools/ulp-initiator/workload.h"

#include "iscsi/initiator/scsi.h"

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <random>

namespace initiator
{

using namespace ulp::iscsi;
using namespace ulp::iscsi::initiator;
using clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

const char *pattern_name(Pattern p)
{
	switch (p) {
	case Pattern::Read:
		return "read";
	case Pattern::Write:
		return "write";
	case Pattern::RandRead:
		return "randread";
	case Pattern::RandWrite:
		return "randwrite";
	case Pattern::Mixed:
		return "mixed";
	}
	return "?";
}

bool pattern_from_name(const std::string &s, Pattern *out)
{
	for (Pattern p : {Pattern::Read, Pattern::Write, Pattern::RandRead, Pattern::RandWrite,
	                  Pattern::Mixed}) {
		if (s == pattern_name(p)) {
			*out = p;
			return true;
		}
	}
	return false;
}

namespace
{

constexpr size_t kMaxMsgs = 20;       // failed I/Os and mismatches kept for the report
constexpr uint64_t kMaxErrors = 1000; // a run with this many failed I/Os stops issuing

// One I/O slot (qd of them).
struct Io {
	std::span<uint8_t> buf;        // bs bytes, in the arena
	std::array<uint8_t, 16> cdb{}; // READ(16) / WRITE(16)
	bool busy = false;             // submitted, not completed
	bool write = false;
	uint64_t blk = 0;        // first block within the range
	uint32_t n = 0;          // blocks
	uint64_t gen = 0;        // write generation (verify)
	ReadSnapshot snap;       // what a read expects (verify)
	clock::time_point start; // submitted
};

class Runner
{
public:
	Runner(Disk &s, const WorkloadConfig &cfg, RunResult *out)
	    : s_(s), cfg_(cfg), out_(out), rng_(cfg.seed)
	{
	}

	bool setup(std::string *why);
	void phase(bool verify_pass);

private:
	bool pick(Io &io);
	int submit(Io &io); // 0, -EBUSY (retry after completions), or failed: fatal
	void completed(Io &io, const ScsiResult &r);
	void progress(clock::time_point now, bool final);
	PhaseStats &stats() { return verify_pass_ ? out_->verify_pass : out_->main; }

	Disk &s_;
	const WorkloadConfig &cfg_;
	RunResult *out_;
	std::mt19937_64 rng_;
	std::unique_ptr<Tracker> tracker_;
	std::vector<Io> ios_;
	std::vector<uint8_t> own_arena_; // the I/O buffers when the config gives no arena
	uint32_t block_ = 0;             // the LUN's logical block size
	uint32_t io_blocks_ = 0;         // blocks per I/O
	uint64_t first_lba_ = 0;         // the range, in blocks
	uint64_t range_blocks_ = 0;
	uint64_t cursor_ = 0; // sequential position (blocks within the range)
	uint64_t issued_bytes_ = 0;
	uint32_t inflight_ = 0;
	bool verify_pass_ = false;
	bool issuing_ = false;
	clock::time_point phase_start_;
	clock::time_point last_progress_;
	uint64_t last_ios_ = 0, last_bytes_ = 0;
};

bool Runner::setup(std::string *why)
{
	// TEST UNIT READY twice: the first command of a new I_T nexus may get a UNIT
	// ATTENTION (POWER ON, RESET) that says nothing about the LUN.
	const auto tur = cdb_test_unit_ready();
	ScsiResult r;
	for (int i = 0; i < 3; i++) {
		r = s_.run({cfg_.lun, tur, DataDir::None, {}});
		if (r.good() || r.outcome != TaskOutcome::Completed)
			break;
	}
	if (!r.good()) {
		*why = "LUN " + std::to_string(cfg_.lun) + " not ready: " + describe_result(r) +
		       (r.outcome == TaskOutcome::Completed ? "" : ": " + s_.error());
		return false;
	}
	std::array<uint8_t, 32> cap{};
	const auto rc16 = cdb_read_capacity16(cap.size());
	r = s_.run({cfg_.lun, rc16, DataDir::Read, cap});
	Capacity c;
	if (!r.good() || !parse_read_capacity16(cap, &c)) {
		*why = "READ CAPACITY(16) of LUN " + std::to_string(cfg_.lun) + ": " +
		       describe_result(r);
		return false;
	}
	block_ = c.block_size;
	out_->lun_blocks = c.blocks;
	out_->block_size = c.block_size;
	const uint64_t lun_bytes = c.blocks * c.block_size;
	if (cfg_.bs % block_ || cfg_.offset % block_ || cfg_.range % block_) {
		*why = "--bs, --offset and --range must be multiples of the LUN's block size (" +
		       std::to_string(block_) + " bytes)";
		return false;
	}
	if (cfg_.bs < kHeaderLen && cfg_.verify) {
		*why = "--bs below 32 bytes leaves no room for the verify header";
		return false;
	}
	if (cfg_.offset >= lun_bytes) {
		*why =
		    "--offset is past the end of the LUN (" + std::to_string(lun_bytes) + " bytes)";
		return false;
	}
	const uint64_t range = cfg_.range ? cfg_.range : lun_bytes - cfg_.offset;
	if (cfg_.offset + range > lun_bytes || range < cfg_.bs) {
		*why = "--offset + --range must lie within the LUN (" + std::to_string(lun_bytes) +
		       " bytes) and hold at least one --bs";
		return false;
	}
	if (cfg_.verify && block_ < kHeaderLen) {
		*why = "the LUN's blocks are too small for the verify header";
		return false;
	}
	io_blocks_ = cfg_.bs / block_;
	first_lba_ = cfg_.offset / block_;
	range_blocks_ = range / block_;
	if (cfg_.verify || cfg_.verify_pass) {
		std::random_device rd;
		tracker_ = std::make_unique<Tracker>(first_lba_, range_blocks_, block_, rd());
	}
	ios_.resize(cfg_.qd);
	std::span<uint8_t> arena = cfg_.arena;
	if (arena.size() < size_t(cfg_.qd) * cfg_.bs) {
		own_arena_.assign(size_t(cfg_.qd) * cfg_.bs, 0);
		arena = own_arena_;
	}
	for (size_t i = 0; i < ios_.size(); i++)
		ios_[i].buf = arena.subspan(i * cfg_.bs, cfg_.bs);
	return true;
}

bool Runner::pick(Io &io)
{
	if (verify_pass_) {
		// Sequential over the whole range; the last I/O may be shorter.
		if (cursor_ >= range_blocks_)
			return false;
		io.write = false;
		io.blk = cursor_;
		io.n =
		    static_cast<uint32_t>(std::min<uint64_t>(io_blocks_, range_blocks_ - cursor_));
		cursor_ += io.n;
		return true;
	}
	const Pattern p = cfg_.pattern;
	io.n = io_blocks_;
	io.write = p == Pattern::Write || p == Pattern::RandWrite ||
	           (p == Pattern::Mixed && rng_() % 100 >= cfg_.rwmix);
	const bool random =
	    p == Pattern::RandRead || p == Pattern::RandWrite || p == Pattern::Mixed;
	const uint64_t slots = range_blocks_ / io_blocks_;
	for (int tries = 0; tries < 8; tries++) {
		uint64_t blk;
		if (random) {
			blk = (rng_() % slots) * io_blocks_;
		} else {
			if (cursor_ + io_blocks_ > range_blocks_)
				cursor_ = 0;
			blk = cursor_;
		}
		// Never two writes in flight on one block: their order would be undefined.
		if (io.write && tracker_ && !tracker_->can_write(blk, io.n)) {
			if (!random)
				return false; // wait for the earlier write to the same place
			continue;
		}
		if (!random)
			cursor_ += io_blocks_;
		io.blk = blk;
		return true;
	}
	return false;
}

int Runner::submit(Io &io)
{
	const uint64_t lba = first_lba_ + io.blk;
	std::span<uint8_t> data(io.buf.data(), size_t(io.n) * block_);
	if (io.write) {
		if (tracker_)
			io.gen = tracker_->start_write(io.blk, io.n, data);
		io.cdb = cdb_write16(lba, io.n);
	} else {
		if (tracker_ && (cfg_.verify || verify_pass_))
			tracker_->start_read(io.blk, io.n, &io.snap);
		io.cdb = cdb_read16(lba, io.n);
	}
	io.busy = true;
	io.start = clock::now();
	inflight_++;
	issued_bytes_ += data.size();
	ScsiRequest req;
	req.lun = cfg_.lun;
	req.cdb = io.cdb;
	req.dir = io.write ? DataDir::Write : DataDir::Read;
	req.data = data;
	const int rc = s_.submit(req, [this, &io](const ScsiResult &r) { completed(io, r); });
	if (rc == 0)
		return 0;
	io.busy = false;
	inflight_--;
	issued_bytes_ -= data.size();
	if (rc == -EBUSY) {
		// No credit (SRP's req_lim) or slot now: as if never picked; retried after the
		// next completions.
		if (io.write && tracker_)
			tracker_->cancel_write(io.blk, io.n);
		return -EBUSY;
	}
	if (io.write && tracker_)
		tracker_->end_write(io.blk, io.n, io.gen, false);
	if (out_->fatal.empty()) {
		// A nexus that failed says why (the connection lost, the target gone): the
		// refusal alone ("session is failed") does not.
		out_->fatal = "cannot submit: " + s_.last_error();
		if (!s_.error().empty())
			out_->fatal += ": " + s_.error();
	}
	issuing_ = false;
	return rc;
}

void Runner::completed(Io &io, const ScsiResult &r)
{
	io.busy = false;
	inflight_--;
	PhaseStats &st = stats();
	const uint64_t bytes = uint64_t(io.n) * block_;
	if (io.write && tracker_)
		tracker_->end_write(io.blk, io.n, io.gen, r.good());
	if (!r.good()) {
		st.errors++;
		if (r.outcome == TaskOutcome::ConnectionLost || r.outcome == TaskOutcome::Timeout) {
			if (out_->fatal.empty())
				out_->fatal = std::string("connection lost: ") + s_.error();
			issuing_ = false;
			return;
		}
		if (out_->error_msgs.size() < kMaxMsgs) {
			char m[160];
			std::snprintf(m, sizeof(m), "%s of %u blocks at LBA %" PRIu64 ": ",
			              io.write ? "write" : "read", io.n, first_lba_ + io.blk);
			out_->error_msgs.push_back(m + describe_result(r));
		}
		if (st.errors >= kMaxErrors) {
			if (out_->fatal.empty())
				out_->fatal = "too many failed I/Os";
			issuing_ = false;
		}
		return;
	}
	st.lat.add(static_cast<uint64_t>(
	    std::chrono::duration_cast<std::chrono::nanoseconds>(clock::now() - io.start).count()));
	st.ios++;
	st.bytes += bytes;
	(io.write ? st.writes : st.reads)++;
	if (!io.write && tracker_ && (cfg_.verify || verify_pass_)) {
		const uint64_t bad =
		    tracker_->check_read(io.snap, {io.buf.data(), bytes}, &out_->verified_blocks,
		                         &out_->verify_msgs, kMaxMsgs);
		out_->verify_errors += bad;
	}
}

void Runner::progress(clock::time_point now, bool final)
{
	const PhaseStats &st = verify_pass_ ? out_->verify_pass : out_->main;
	const double dt = std::chrono::duration<double>(now - last_progress_).count();
	if (!cfg_.progress || dt <= 0)
		return;
	const double el = std::chrono::duration<double>(now - phase_start_).count();
	std::fprintf(stderr,
	             "ulp-initiator: %s[%5.1f s] %8.0f IOPS %9.2f MB/s  %3u in flight  "
	             "%" PRIu64 " errors  %" PRIu64 " verify errors%s\n",
	             verify_pass_ ? "verify " : "", el, double(st.ios - last_ios_) / dt,
	             double(st.bytes - last_bytes_) / dt / 1e6, inflight_, st.errors,
	             out_->verify_errors, final ? "  (end)" : "");
	last_ios_ = st.ios;
	last_bytes_ = st.bytes;
	last_progress_ = now;
}

void Runner::phase(bool verify_pass)
{
	verify_pass_ = verify_pass;
	cursor_ = 0;
	issued_bytes_ = 0;
	issuing_ = out_->fatal.empty();
	phase_start_ = last_progress_ = clock::now();
	last_ios_ = last_bytes_ = 0;
	const bool timed = !verify_pass && cfg_.runtime.count() > 0;
	const bool sized = !verify_pass && cfg_.size > 0;
	for (;;) {
		const auto now = clock::now();
		if (issuing_ && timed && now - phase_start_ >= cfg_.runtime)
			issuing_ = false;
		if (issuing_ && sized && issued_bytes_ >= cfg_.size)
			issuing_ = false;
		if (issuing_ && !verify_pass && cfg_.stop && cfg_.stop->load())
			issuing_ = false;
		for (Io &io : ios_) {
			if (!issuing_ || io.busy)
				continue;
			const uint64_t at = cursor_;
			if (!pick(io)) {
				if (verify_pass)
					issuing_ = false;
				break;
			}
			if (submit(io) == -EBUSY) {
				cursor_ = at; // picked again once a completion returns a credit
				if (inflight_ == 0) {
					// Nothing out whose response could bring a credit back.
					if (out_->fatal.empty())
						out_->fatal =
						    "the target grants no credit for a command";
					issuing_ = false;
				}
				break;
			}
			if (sized && issued_bytes_ >= cfg_.size)
				issuing_ = false;
		}
		if (!issuing_ && inflight_ == 0)
			break;
		if (now - last_progress_ >= std::chrono::seconds(1))
			progress(now, false);
		// Wake at least every 100 ms: the runtime and the progress line are timed here.
		const int rc = s_.poll(milliseconds(100));
		if (rc < 0) {
			// Nothing more will complete (the callbacks of every task have run).
			if (out_->fatal.empty())
				out_->fatal = s_.target_requested_logout()
				                  ? "the target asked for a logout"
				                  : "connection lost: " + s_.error();
			break;
		}
	}
	PhaseStats &st = stats();
	st.seconds = std::chrono::duration<double>(clock::now() - phase_start_).count();
}

} // namespace

bool run_workload(Disk &s, const WorkloadConfig &cfg, RunResult *out, std::string *why)
{
	Runner r(s, cfg, out);
	if (!r.setup(why))
		return false;
	r.phase(false);
	if (cfg.verify_pass && out->fatal.empty())
		r.phase(true);
	return true;
}

} // namespace initiator
