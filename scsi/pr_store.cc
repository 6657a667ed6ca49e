// SPDX-License-Identifier: MIT
// scsi/pr_store.cc - durable state files written by a thread of their own (see pr_store.h).
#include "scsi/pr_store.h"

#include "core/log.h"
#include "core/thread_name.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <filesystem>
#include <mutex>
#include <thread>

namespace ulp::scsi
{

namespace
{

struct Job {
	std::string name;
	std::optional<std::vector<uint8_t>> data; // nullopt: remove
	std::function<void(int)> done;
};

// How long the destructor waits for queued jobs before it leaves the thread behind.
constexpr auto kStopWait = std::chrono::seconds(30);

int write_all(int fd, const uint8_t *p, size_t n)
{
	while (n > 0) {
		const ssize_t w = ::write(fd, p, n);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		p += w;
		n -= static_cast<size_t>(w);
	}
	return 0;
}

} // namespace

struct PrStore::Shared {
	std::string dir;
	int dirfd = -1; // the directory, for openat/renameat and its fsync

	std::mutex lock;
	std::condition_variable cv; // work queued, stop asked, or the thread exited
	std::deque<Job> queue;
	bool stop = false;   // the thread exits once the queue is empty
	bool exited = false; // it has

	~Shared()
	{
		if (dirfd >= 0)
			::close(dirfd);
	}

	// The directory entry change (rename, unlink) made durable.
	int sync_dir() { return ::fsync(dirfd) == 0 ? 0 : -errno; }

	int replace(const std::string &name, const std::vector<uint8_t> &data)
	{
		const std::string tmp = name + ".tmp";
		const int fd =
		    ::openat(dirfd, tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
		if (fd < 0)
			return -errno;
		int err = write_all(fd, data.data(), data.size());
		if (err == 0 && ::fsync(fd) != 0)
			err = -errno;
		if (::close(fd) != 0 && err == 0)
			err = -errno;
		if (err == 0 && ::renameat(dirfd, tmp.c_str(), dirfd, name.c_str()) != 0)
			err = -errno;
		if (err != 0) {
			::unlinkat(dirfd, tmp.c_str(), 0);
			return err;
		}
		return sync_dir();
	}

	int remove(const std::string &name)
	{
		if (::unlinkat(dirfd, name.c_str(), 0) != 0 && errno != ENOENT)
			return -errno;
		return sync_dir();
	}

	void loop()
	{
		set_thread_name("ulp-pr-store");
		std::unique_lock g(lock);
		for (;;) {
			cv.wait(g, [&] { return stop || !queue.empty(); });
			if (queue.empty())
				break; // stop, and nothing left
			Job j = std::move(queue.front());
			queue.pop_front();
			g.unlock();
			const int err = j.data ? replace(j.name, *j.data) : remove(j.name);
			if (err != 0)
				ULP_LOG(Error, Scsi, "state file {}/{}: {} failed: {}", dir, j.name,
				        j.data ? "write" : "removal", std::strerror(-err));
			if (j.done)
				j.done(err);
			g.lock();
		}
		exited = true;
		cv.notify_all();
	}
};

std::unique_ptr<PrStore> PrStore::open(const std::string &dir, std::string *why)
{
	namespace fs = std::filesystem;
	std::error_code ec;
	if (dir.empty()) {
		*why = "no state directory given";
		return nullptr;
	}
	if (!fs::exists(dir, ec)) {
		// Reservation keys are the initiators' secrets of sorts: the directory is the
		// daemon's alone (0700), whatever the umask.
		fs::create_directories(dir, ec);
		if (ec) {
			*why = "cannot create " + dir + ": " + ec.message();
			return nullptr;
		}
		if (::chmod(dir.c_str(), 0700) != 0) {
			*why = "chmod 0700 " + dir + ": " + std::strerror(errno);
			return nullptr;
		}
	}
	auto sh = std::make_shared<Shared>();
	sh->dir = dir;
	sh->dirfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (sh->dirfd < 0) {
		*why = dir + ": " + std::strerror(errno);
		return nullptr;
	}
	// Can files be created, written and made durable here (a read-only file system, a full
	// one, a directory of someone else's)? Try, as a write will.
	const std::string probe = ".probe-" + std::to_string(::getpid());
	if (int err = sh->replace(probe, std::vector<uint8_t>(16, 0)); err != 0) {
		*why = "cannot write files in " + dir + ": " + std::strerror(-err);
		return nullptr;
	}
	if (int err = sh->remove(probe); err != 0) {
		*why = "cannot remove files in " + dir + ": " + std::strerror(-err);
		return nullptr;
	}
	std::thread([sh] { sh->loop(); }).detach();
	return std::unique_ptr<PrStore>(new PrStore(dir, std::move(sh)));
}

PrStore::PrStore(std::string dir, std::shared_ptr<Shared> sh)
    : dir_(std::move(dir)), sh_(std::move(sh))
{
}

PrStore::~PrStore()
{
	// The thread is detached and holds sh_ itself: waiting for it to exit is the join, and
	// not waiting (a disk that does not answer) frees nothing it uses.
	std::unique_lock g(sh_->lock);
	sh_->stop = true;
	sh_->cv.notify_all();
	if (!sh_->cv.wait_for(g, kStopWait, [&] { return sh_->exited; }))
		ULP_LOG(
		    Error, Scsi,
		    "state directory {}: {} writes still pending after {} s; not waiting longer",
		    dir_, sh_->queue.size() + 1,
		    std::chrono::duration_cast<std::chrono::seconds>(kStopWait).count());
}

std::string PrStore::path(const std::string &name) const
{
	return dir_ + "/" + name;
}

void PrStore::put(const std::string &name, std::optional<std::vector<uint8_t>> data,
                  std::function<void(int)> done)
{
	std::lock_guard g(sh_->lock);
	sh_->queue.push_back(Job{name, std::move(data), std::move(done)});
	sh_->cv.notify_all();
}

int PrStore::read(const std::string &name, std::vector<uint8_t> *out, size_t max_bytes) const
{
	const int fd = ::openat(sh_->dirfd, name.c_str(), O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	struct stat st {
	};
	int err = 0;
	if (::fstat(fd, &st) != 0)
		err = -errno;
	else if (!S_ISREG(st.st_mode))
		err = -EINVAL;
	else if (static_cast<uint64_t>(st.st_size) > max_bytes)
		err = -EFBIG;
	out->clear();
	while (err == 0) {
		uint8_t buf[4096];
		const ssize_t n = ::read(fd, buf, sizeof(buf));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			err = -errno;
		else if (n == 0)
			break;
		else if (out->size() + static_cast<size_t>(n) > max_bytes)
			err = -EFBIG; // grew while we read
		else
			out->insert(out->end(), buf, buf + n);
	}
	::close(fd);
	return err;
}

bool PrStore::remove_stale(const std::string &name) const
{
	const std::string tmp = name + ".tmp";
	if (::unlinkat(sh_->dirfd, tmp.c_str(), 0) != 0)
		return false;
	sh_->sync_dir();
	return true;
}

} // namespace ulp::scsi
