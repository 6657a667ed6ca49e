// SPDX-License-Identifier: MIT
// core/epoll_loop.cc - an EventLoop on epoll for a thread that runs its own turns (see the
// header).
#include "core/epoll_loop.h"

#include "core/check.h"
#include "core/log.h"
#include "core/turn.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace ulp
{

EpollLoop::EpollLoop(std::string name) : name_(std::move(name)), owner_(std::this_thread::get_id())
{
}

EpollLoop::~EpollLoop()
{
	if (epfd_ >= 0)
		::close(epfd_);
	if (evfd_ >= 0)
		::close(evfd_);
}

int EpollLoop::init()
{
	epfd_ = epoll_create1(EPOLL_CLOEXEC);
	if (epfd_ < 0)
		return -errno;
	evfd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (evfd_ < 0)
		return -errno;
	epoll_event ev{};
	ev.events = EPOLLIN;
	ev.data.ptr = nullptr;
	if (epoll_ctl(epfd_, EPOLL_CTL_ADD, evfd_, &ev) != 0)
		return -errno;
	return 0;
}

int EpollLoop::add_item(std::unique_ptr<Item> item, ItemList &list)
{
	epoll_event ev{};
	ev.events = item->events;
	ev.data.ptr = item.get();
	if (epoll_ctl(epfd_, EPOLL_CTL_ADD, item->fd, &ev) != 0)
		return -errno;
	list.push_back(std::move(item));
	return 0;
}

EpollLoop::ItemList::iterator EpollLoop::find_watch(int fd)
{
	return std::find_if(watches_.begin(), watches_.end(),
	                    [&](const auto &i) { return i->fd == fd; });
}

int EpollLoop::add_own(int fd, uint32_t tag)
{
	return add_item(std::make_unique<Item>(Item{fd, nullptr, tag, true, EPOLLIN}), own_);
}

int EpollLoop::add_fd(int fd, LoopWatch *w, uint32_t events)
{
	// The rule of core/event_loop.h: a caller off the loop thread is a bug of the layer
	// above, and the set would be changed under a running turn.
	ULP_CHECK(std::this_thread::get_id() == owner_, "{}: add_fd off the loop thread", name_);
	if (ending_)
		return -ESHUTDOWN;
	return add_item(std::make_unique<Item>(Item{fd, w, 0, false, events}), watches_);
}

int EpollLoop::modify(int fd, uint32_t events)
{
	ULP_CHECK(std::this_thread::get_id() == owner_, "{}: modify off the loop thread", name_);
	auto it = find_watch(fd);
	if (it == watches_.end())
		return -ENOENT;
	epoll_event ev{};
	ev.events = events;
	ev.data.ptr = it->get();
	if (epoll_ctl(epfd_, EPOLL_CTL_MOD, fd, &ev) != 0)
		return -errno;
	(*it)->events = events;
	return 0;
}

void EpollLoop::del_fd(int fd)
{
	ULP_CHECK(std::this_thread::get_id() == owner_, "{}: del_fd off the loop thread", name_);
	auto it = find_watch(fd);
	if (it == watches_.end())
		return;
	epoll_ctl(epfd_, EPOLL_CTL_DEL, fd, nullptr);
	// An event for it may sit further down this turn's batch: the item stays allocated,
	// without its watch, until the turn ends.
	(*it)->w = nullptr;
	dead_.push_back(std::move(*it));
	watches_.erase(it);
}

bool EpollLoop::post(std::function<void()> fn)
{
	{
		std::lock_guard g(lock_);
		if (ended_)
			return false;
		posted_.push_back(std::move(fn));
	}
	posted_any_.store(true, std::memory_order_relaxed);
	wake();
	return true;
}

void EpollLoop::wake()
{
	const uint64_t one = 1;
	(void)!::write(evfd_, &one, sizeof(one));
}

void EpollLoop::run_posted()
{
	std::vector<std::function<void()>> fns;
	{
		std::lock_guard g(lock_);
		fns.swap(posted_);
		posted_any_.store(false, std::memory_order_relaxed);
	}
	for (auto &fn : fns)
		fn();
}

int EpollLoop::turn(int timeout_ms, std::span<uint32_t> own)
{
	epoll_event evs[kBatch];
	const int n = epoll_wait(epfd_, evs, kBatch, timeout_ms);
	if (n < 0)
		return errno == EINTR ? 0 : -errno;
	size_t nown = 0;
	// The watches and posted functions this turn runs are a turn of the thread (core/turn.h):
	// what they defer (a connection's send plug, filled by a file LU's reaped completions)
	// runs once they all have.
	TurnScope t;
	for (int i = 0; i < n; i++) {
		auto *item = static_cast<Item *>(evs[i].data.ptr);
		if (!item) {
			uint64_t v;
			(void)!::read(evfd_, &v, sizeof(v));
			run_posted();
		} else if (item->w) {
			item->w->loop_events(evs[i].events);
		} else if (item->own && nown < own.size()) {
			own[nown++] = item->tag;
		}
	}
	dead_.clear();
	return static_cast<int>(nown);
}

size_t EpollLoop::end()
{
	size_t broke = 0;
	{
		std::lock_guard g(lock_);
		ended_ = true;
	}
	// Everything accepted before the end still runs, before the watches hear of it.
	run_posted();
	ending_ = true;
	while (!watches_.empty()) {
		Item *item = watches_.back().get();
		item->w->loop_ending();
		if (!watches_.empty() && watches_.back().get() == item) {
			ULP_LOG(Error, Core,
			        "{}: a watch did not remove itself when the loop ended", name_);
			del_fd(item->fd);
			broke++;
		}
	}
	dead_.clear();
	return broke;
}

} // namespace ulp
