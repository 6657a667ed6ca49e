// SPDX-License-Identifier: MIT
// tools/ulp-bench/scsi.cc - `ulp-bench scsi`: 4 KiB READ (16) and WRITE (16) commands per
// second through the SCSI target core (scsi/) and the loopback fabric, with qd commands in
// flight, on three backstores, each beside a reference measured in the same run:
//
//   null  no storage: the figure is the core's own cost per command; reference: none
//         (ns/command is printed)
//   ram   memory: reference memcpy of 4 KiB (what the data movement alone costs)
//   file  a file through io_uring, O_DIRECT, random offsets; reference: fio on the same
//         file with the same block size, queue depth, engine (io_uring) and O_DIRECT
//
// The driver thread keeps qd LoopReq slots busy: it takes a free slot, builds the CDB and
// starts it; a slot returns to the free list when the core releases its command (inline
// for null and ram, from the io_uring thread for file).
#include "tools/ulp-bench/scsi.h"
#include "tools/ulp-bench/report.h"

#include "scsi/backstore.h"
#include "scsi/loopback.h"
#include "scsi/lu.h"
#include "scsi/tpg.h"

#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <memory>
#include <mutex>
#include <string>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

namespace ulp::bench
{

namespace
{

using namespace ulp::scsi;

constexpr uint32_t kBlock = 4096; // the I/O size, and the LU's logical block size

// A target with one LU on the given backstore, one session, qd command slots.
class Driver
{
public:
	Driver(const BackstoreConfig &bc, int qd) : qd_(qd)
	{
		int err = 0;
		std::string why;
		auto bs = make_backstore(bc, &err, &why);
		if (!bs)
			fatal("backstore %s: %s", bc.kind.c_str(), why.c_str());
		LuConfig lc;
		lc.block_size = kBlock;
		lu_ = std::make_unique<LogicalUnit>("bench-" + bc.kind, std::move(bs), lc);
		if (tpg_.add_lun(0, *lu_) != 0)
			fatal("add_lun failed");
		sess_ = lb_.login(tpg_, "iqn.2026-11.org.ulp:bench");
		blocks_ = lu_->nr_blocks();
		reqs_ = std::make_unique<LoopReq[]>(size_t(qd));
		bufs_.resize(qd);
		for (int i = 0; i < qd; i++) {
			bufs_[i] = static_cast<uint8_t *>(std::aligned_alloc(4096, kBlock));
			std::memset(bufs_[i], 0x5a ^ i, kBlock);
			reqs_[i].done = on_done;
			reqs_[i].ctx = this;
			free_.push_back(i);
		}
		// The first command of the nexus reports POWER ON; take it out of the way.
		run_one(false, 0);
		run_one(false, 0);
	}
	~Driver()
	{
		drain();
		lb_.logout(sess_);
		for (uint8_t *b : bufs_)
			std::free(b);
	}

	// Start one command on a free slot (waiting for one) at a random LBA, or at lba.
	void issue(bool write)
	{
		rng_ ^= rng_ << 13;
		rng_ ^= rng_ >> 7;
		rng_ ^= rng_ << 17;
		issue_at(write, rng_ % blocks_);
	}
	void issue_at(bool write, uint64_t lba) { start(take(), write, lba); }
	uint64_t blocks() const { return blocks_; }

	void drain()
	{
		std::unique_lock g(lock_);
		cv_.wait(g, [&] { return int(free_.size()) == qd_; });
	}

	uint64_t errors() const { return errors_.load(); }

private:
	static void on_done(LoopReq *r)
	{
		auto *d = static_cast<Driver *>(r->ctx);
		if (r->cmd.status != Status::Good)
			d->errors_++;
		int i = int(r - d->reqs_.get());
		std::lock_guard g(d->lock_);
		d->free_.push_back(i);
		d->cv_.notify_one();
	}

	int take()
	{
		// Spin briefly (io_uring completions come back within microseconds), then sleep.
		for (int spin = 0;; spin++) {
			{
				std::unique_lock g(lock_);
				if (!free_.empty() || spin > 64) {
					cv_.wait(g, [&] { return !free_.empty(); });
					int i = free_.back();
					free_.pop_back();
					return i;
				}
			}
			std::this_thread::yield();
		}
	}

	void start(int i, bool write, uint64_t lba)
	{
		uint8_t cdb[16] = {};
		cdb[0] = write ? 0x8a : 0x88;
		put_be64(cdb + 2, lba);
		put_be32(cdb + 10, 1);
		Loopback::prep(&reqs_[i], sess_, 0, cdb, write ? DataDir::Write : DataDir::Read,
		               {bufs_[i], kBlock});
		lb_.start(&reqs_[i]);
	}

	void run_one(bool write, uint64_t lba)
	{
		start(take(), write, lba);
		drain();
		errors_ = 0;
	}

	int qd_;
	Loopback lb_;
	Tpg tpg_{"iqn.2026-11.org.ulp:bench-target", 1};
	std::unique_ptr<LogicalUnit> lu_;
	Nexus *sess_ = nullptr;
	uint64_t blocks_ = 0;
	uint64_t rng_ = 0x9e3779b97f4a7c15ull;
	std::unique_ptr<LoopReq[]> reqs_; // qd slots (not movable: a Cmd has atomics)
	std::vector<uint8_t *> bufs_;
	std::mutex lock_;
	std::condition_variable cv_;
	std::vector<int> free_; // under lock_
	std::atomic<uint64_t> errors_{0};
};

double bench_driver(Driver &d, bool write, double min_time)
{
	auto *b = benchmark::RegisterBenchmark("scsi", [&](benchmark::State &st) {
		for (auto _ : st)
			d.issue(write);
		d.drain();
		st.counters["iops"] =
		    benchmark::Counter(double(st.iterations()), benchmark::Counter::kIsRate);
	});
	b->MinTime(min_time)->UseRealTime();
	const Measured m = run_benchmarks()["scsi"];
	benchmark::ClearRegisteredBenchmarks();
	if (d.errors())
		fatal("%llu commands failed during the run",
		      static_cast<unsigned long long>(d.errors()));
	return m.iterations / m.seconds;
}

// memcpy of 4 KiB, ops per second: what a RAM backstore's data movement alone costs.
double bench_memcpy(double min_time)
{
	std::vector<uint8_t> a(64 << 20), b(kBlock);
	benchmark::RegisterBenchmark("memcpy",
	                             [&](benchmark::State &st) {
		                             uint64_t off = 0;
		                             for (auto _ : st) {
			                             std::memcpy(b.data(), a.data() + off, kBlock);
			                             benchmark::DoNotOptimize(b.data());
			                             off = (off + 7 * kBlock) % (a.size() - kBlock);
		                             }
	                             })
	    ->MinTime(min_time)
	    ->UseRealTime();
	const Measured m = run_benchmarks()["memcpy"];
	benchmark::ClearRegisteredBenchmarks();
	return m.iterations / m.seconds;
}

// fio on the same file: --minimal (terse v3) gives read IOPS in field 8, write in 49.
double run_fio(const std::string &path, uint64_t size, bool write, int qd, double seconds)
{
	int pipefd[2];
	if (pipe(pipefd) != 0)
		fatal("pipe: %s", std::strerror(errno));
	pid_t pid = fork();
	if (pid < 0)
		fatal("fork: %s", std::strerror(errno));
	if (pid == 0) {
		dup2(pipefd[1], 1);
		close(pipefd[0]);
		close(pipefd[1]);
		std::string fn = "--filename=" + path;
		std::string sz = "--size=" + std::to_string(size);
		std::string rw = std::string("--rw=") + (write ? "randwrite" : "randread");
		std::string depth = "--iodepth=" + std::to_string(qd);
		std::string rt = "--runtime=" + std::to_string(std::max(1, int(seconds + 0.5)));
		execlp("fio", "fio", "--name=ulp-bench", fn.c_str(), sz.c_str(), rw.c_str(),
		       "--bs=4k", depth.c_str(), "--ioengine=io_uring", "--direct=1", rt.c_str(),
		       "--time_based", "--minimal", (char *)nullptr);
		_exit(127);
	}
	close(pipefd[1]);
	std::string out;
	char buf[4096];
	ssize_t n;
	while ((n = read(pipefd[0], buf, sizeof(buf))) > 0)
		out.append(buf, size_t(n));
	close(pipefd[0]);
	int st = 0;
	waitpid(pid, &st, 0);
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		return 0;
	std::vector<std::string> f;
	size_t p = 0;
	while (p <= out.size()) {
		size_t q = out.find(';', p);
		if (q == std::string::npos)
			q = out.size();
		f.push_back(out.substr(p, q - p));
		p = q + 1;
	}
	const size_t idx = write ? 48 : 7;
	if (f.size() <= idx || f[0] != "3")
		return 0;
	return std::atof(f[idx].c_str());
}

// The file, fully written once so that reads hit real blocks (not holes) for both.
void make_file(const std::string &path, uint64_t size)
{
	int fd = ::open(path.c_str(), O_CREAT | O_TRUNC | O_WRONLY, 0600);
	if (fd < 0)
		fatal("create %s: %s", path.c_str(), std::strerror(errno));
	std::vector<uint8_t> chunk(1 << 20, 0xa5);
	for (uint64_t off = 0; off < size; off += chunk.size())
		if (::write(fd, chunk.data(), chunk.size()) != ssize_t(chunk.size()))
			fatal("write %s: %s", path.c_str(), std::strerror(errno));
	fsync(fd);
	::close(fd);
}

} // namespace

int run_scsi(const ScsiBenchOptions &o)
{
	set_bench("scsi");
	const double load = loadavg_1m();
	const double min_time = o.min_time > 0 ? o.min_time : o.quick ? 0.3 : 2.0;
	const uint64_t mib = o.file_mib ? o.file_mib : o.quick ? 64 : 256;
	const std::string dir = o.dir.empty() ? "/var/tmp" : o.dir;
	const std::string path = dir + "/ulp-bench-scsi." + std::to_string(getpid());
	benchmark_init();

	Report rep("scsi");
	rep.title(fmt::format("4 KiB READ(16)/WRITE(16) through the target core and the loopback "
	                      "fabric, {} in flight, {:.1f} s per figure",
	                      o.qd, min_time));
	rep.note(fmt::format("null: no storage (ns/cmd is the core's cost); ram: beside memcpy of "
	                     "4 KiB; file: {} MiB in {}, O_DIRECT, random, beside fio (io_uring, "
	                     "same file, qd, bs)",
	                     mib, dir));
	rep.machine(load);
	rep.meta("block", json_int(kBlock));
	rep.meta("qd", json_int(o.qd));
	rep.meta("quick", json_bool(o.quick));
	rep.columns({{"store", "backstore", Align::Left},
	             {"op", "op", Align::Left},
	             {"commands/s", "iops"},
	             {"ns/cmd", ""},
	             {"ref", "ref", Align::Left},
	             {"ref ops/s", "ref_ops"},
	             {"ratio", "ratio"}});
	const double memcpy_ops = bench_memcpy(min_time);
	for (const char *kind : {"null", "ram", "file"}) {
		BackstoreConfig bc;
		bc.kind = kind;
		bc.block_size = kBlock;
		bc.queue_depth = uint32_t(o.qd);
		bc.size = mib << 20;
		if (bc.kind == "file") {
			bc.path = path;
			make_file(path, bc.size);
		}
		Driver d(bc, o.qd);
		if (bc.kind == "ram") {
			// Write every block once so that reads copy real memory, not zeros of
			// never-written chunks.
			for (uint64_t lba = 0; lba < d.blocks(); lba++)
				d.issue_at(true, lba);
			d.drain();
		}
		for (bool write : {false, true}) {
			const char *op = write ? "write" : "read";
			const double iops = bench_driver(d, write, min_time);
			std::fprintf(stderr, "ulp-bench scsi: %-4s %-5s %10.0f commands/s\n", kind,
			             op, iops);
			double ref = 0; // reference ops per second (memcpy, fio); 0 = none
			std::string ref_name;
			if (bc.kind == "ram") {
				ref = memcpy_ops;
				ref_name = "memcpy";
			} else if (bc.kind == "file" && o.fio) {
				ref = run_fio(path, bc.size, write, o.qd, min_time);
				ref_name = "fio";
				if (ref == 0)
					std::fprintf(
					    stderr,
					    "ulp-bench scsi: fio did not run; no reference\n");
			}
			rep.row()
			    .text(kind)
			    .text(op)
			    .num(iops, 0, 0)
			    .num(1e9 / iops, 0, 0)
			    .text(ref_name.empty() ? "-" : ref_name, ref_name)
			    .num(ref, 0, 0)
			    .ratio(iops, ref, 2, 3);
		}
	}
	::unlink(path.c_str());
	benchmark::Shutdown();
	rep.print(o.json);
	return 0;
}

} // namespace ulp::bench
