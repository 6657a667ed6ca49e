// SPDX-License-Identifier: MIT
// scsi/pr_store.h - a directory of small state files written durably, one at a time, by a
// thread of its own: where persistent reservations with APTPL 1 live between runs of the
// target (scsi/pr_persist.cc decides what goes in them; ulp-targetd's --state-dir names the
// directory).
//
// A file is replaced atomically: its new contents go to NAME.tmp, which is fsync'ed and
// renamed over NAME, and then the directory is fsync'ed so that the rename itself survives a
// power loss. A reader therefore finds the old file or the new one, never a mixture; a crash
// can leave NAME.tmp behind, which is an unfinished write and never read (remove_stale
// drops it). Removing a file is unlink and the directory's fsync.
//
// Writes run on the store's thread ("ulp-pr-store"), never on the caller's: a PERSISTENT
// RESERVE OUT arrives on a fabric's event thread, which must not wait for fsync. put() queues
// the job and returns; done(0 or -errno) runs on the store's thread once the job is durable
// (or failed). Jobs run in the order they were queued.
//
// Locking: the shared state's lock guards the queue and the flags; jobs and done() run
// without it. The thread holds the shared state too, so that a destructor that gives up
// waiting for a hung disk (bounded, with a log line) can leave the thread behind safely.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace ulp::scsi
{

class PrStore
{
public:
	// Open directory dir, creating it (mode 0700, and its missing parents) when it does not
	// exist, and check that files can be created in it. nullptr with *why when it cannot be
	// used.
	static std::unique_ptr<PrStore> open(const std::string &dir, std::string *why);
	// Runs the queued jobs and stops the thread, waiting at most 30 s (then logs, and leaves
	// the thread to finish on its own).
	~PrStore();
	PrStore(const PrStore &) = delete;
	PrStore &operator=(const PrStore &) = delete;

	const std::string &dir() const { return dir_; }
	// dir/name.
	std::string path(const std::string &name) const;

	// Queue a durable replacement of file name (a plain name, no '/') by data, or its
	// removal when data is empty (nullopt); done(0 or -errno) on the store's thread after.
	void put(const std::string &name, std::optional<std::vector<uint8_t>> data,
	         std::function<void(int err)> done);

	// Read file name whole, on the caller's thread (at start-up). 0, -ENOENT when there is
	// no such file, -EFBIG when it is longer than max_bytes, or another -errno.
	int read(const std::string &name, std::vector<uint8_t> *out, size_t max_bytes) const;
	// Remove name.tmp if a crash left it (an unfinished write: never read). True when there
	// was one.
	bool remove_stale(const std::string &name) const;

	struct Shared; // the queue and the directory, shared with the thread (pr_store.cc)

private:
	PrStore(std::string dir, std::shared_ptr<Shared> sh);

	std::string dir_;
	std::shared_ptr<Shared> sh_;
};

} // namespace ulp::scsi
