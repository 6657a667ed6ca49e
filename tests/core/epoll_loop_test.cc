// SPDX-License-Identifier: MIT
// tests/core/epoll_loop_test.cc - EpollLoop (core/epoll_loop.h) keeps core/event_loop.h's
// rules: watches called on the loop thread while readable, never after del_fd (even for an
// event fetched in the same turn), post() from any thread run once and in order, and the
// end: what was posted runs, then every watch left hears loop_ending() and removes itself.
// A watch added with a mask is told which events fired and may change the mask (modify):
// a writer waits for EPOLLOUT only while its socket is full, as the iSCSI TCP worker does.
// A turn's callbacks are a turn of the thread (core/turn.h): what they defer runs after all
// of them, before turn() returns.
#include "core/epoll_loop.h"
#include "core/turn.h"

#include <gtest/gtest.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

namespace ulp
{
namespace
{

using namespace std::chrono_literals;

// An eventfd watched on a loop; counts its callbacks and where they ran.
struct EfdWatch : LoopWatch {
	EpollLoop *loop = nullptr;
	int fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	int readable = 0;          // loop_readable calls
	int ending = 0;            // loop_ending calls
	bool drain = true;         // read the eventfd in loop_readable (else it stays readable)
	bool remove = false;       // del_fd itself from loop_readable
	EfdWatch *other = nullptr; // del_fd this one's fd too, from loop_readable
	std::thread::id on;        // the thread of the last callback

	~EfdWatch() { ::close(fd); }
	void kick()
	{
		const uint64_t one = 1;
		ASSERT_EQ(::write(fd, &one, sizeof(one)), ssize_t(sizeof(one)));
	}
	void loop_readable() override
	{
		readable++;
		on = std::this_thread::get_id();
		if (drain) {
			uint64_t v;
			(void)!::read(fd, &v, sizeof(v));
		}
		if (remove)
			loop->del_fd(fd);
		if (other)
			loop->del_fd(other->fd);
	}
	void loop_ending() override
	{
		ending++;
		on = std::this_thread::get_id();
		loop->del_fd(fd);
	}
};

TEST(EpollLoop, WatchesRunOnTheOwnerWhileReadable)
{
	EpollLoop loop("test");
	ASSERT_EQ(loop.init(), 0);
	EfdWatch w;
	w.loop = &loop;
	ASSERT_EQ(loop.add_fd(w.fd, &w), 0);
	EXPECT_EQ(loop.watches(), 1u);
	EXPECT_TRUE(loop.pending());
	// Nothing readable: a turn with a timeout of 0 returns at once, calls nothing.
	EXPECT_EQ(loop.turn(0, {}), 0);
	EXPECT_EQ(w.readable, 0);
	w.kick();
	EXPECT_EQ(loop.turn(1000, {}), 0);
	EXPECT_EQ(w.readable, 1);
	EXPECT_EQ(w.on, std::this_thread::get_id());
	// Level triggered: not drained, it is called again on the next turn.
	w.drain = false;
	w.kick();
	EXPECT_EQ(loop.turn(1000, {}), 0);
	EXPECT_EQ(loop.turn(1000, {}), 0);
	EXPECT_EQ(w.readable, 3);
	// Removed from its own callback: never called again, though still readable.
	w.remove = true;
	EXPECT_EQ(loop.turn(1000, {}), 0);
	EXPECT_EQ(w.readable, 4);
	EXPECT_EQ(loop.watches(), 0u);
	EXPECT_EQ(loop.turn(0, {}), 0);
	EXPECT_EQ(w.readable, 4);
	EXPECT_EQ(loop.end(), 0u);
	EXPECT_EQ(w.ending, 0) << "a removed watch hears nothing of the end";
}

// Two watches and a posted function in one turn, each deferring a flush: the flushes run
// after the last of them, before turn() returns, and none outside a turn.
struct Deferring : EfdWatch {
	std::vector<std::string> *log = nullptr;
	std::string name;
	void loop_readable() override
	{
		EfdWatch::loop_readable();
		log->push_back(name);
		EXPECT_TRUE(defer_to_turn_end(flush, this));
	}
	static void flush(void *arg)
	{
		auto *d = static_cast<Deferring *>(arg);
		d->log->push_back("flush " + d->name);
	}
};

TEST(EpollLoop, WhatATurnsCallbacksDeferRunsAfterThemAll)
{
	EpollLoop loop("test");
	ASSERT_EQ(loop.init(), 0);
	std::vector<std::string> log;
	Deferring a, b;
	for (Deferring *d : {&a, &b}) {
		d->loop = &loop;
		d->log = &log;
		ASSERT_EQ(loop.add_fd(d->fd, d), 0);
	}
	a.name = "a";
	b.name = "b";
	ASSERT_TRUE(loop.post([&] {
		log.push_back("posted");
		EXPECT_TRUE(defer_to_turn_end(Deferring::flush, &a));
	}));
	a.kick();
	b.kick();
	// Everything fired before the turn: one epoll_wait returns the three.
	ASSERT_EQ(loop.turn(1000, {}), 0);
	ASSERT_EQ(log.size(), 6u);
	size_t last_cb = 0, first_flush = log.size();
	for (size_t i = 0; i < log.size(); i++) {
		if (log[i].rfind("flush", 0) == 0)
			first_flush = std::min(first_flush, i);
		else
			last_cb = i;
	}
	EXPECT_LT(last_cb, first_flush) << "a flush ran before the turn's last callback";
	EXPECT_FALSE(in_turn());
	EXPECT_FALSE(defer_to_turn_end(Deferring::flush, &a));
	loop.del_fd(a.fd);
	loop.del_fd(b.fd);
	EXPECT_EQ(loop.end(), 0u);
}

TEST(EpollLoop, AWatchRemovedByAnotherInTheSameTurnIsNotCalled)
{
	EpollLoop loop("test");
	ASSERT_EQ(loop.init(), 0);
	EfdWatch a, b;
	a.loop = b.loop = &loop;
	a.other = &b;
	b.other = &a;
	ASSERT_EQ(loop.add_fd(a.fd, &a), 0);
	ASSERT_EQ(loop.add_fd(b.fd, &b), 0);
	a.kick();
	b.kick();
	// Both events come in one epoll_wait; whichever runs first removes the other, which must
	// not be called (core/event_loop.h: it may be freed right after del_fd).
	EXPECT_EQ(loop.turn(1000, {}), 0);
	EXPECT_EQ(a.readable + b.readable, 1);
	EXPECT_EQ(loop.watches(), 1u) << "the one that ran is still watched";
	EXPECT_EQ(loop.end(), 0u);
	EXPECT_EQ(a.ending + b.ending, 1) << "only the one still watched hears the end";
}

TEST(EpollLoop, OwnDescriptorsAreReportedByTag)
{
	EpollLoop loop("test");
	ASSERT_EQ(loop.init(), 0);
	EfdWatch x, y; // used only for their eventfds
	ASSERT_EQ(loop.add_own(x.fd, 7), 0);
	ASSERT_EQ(loop.add_own(y.fd, 9), 0);
	EXPECT_FALSE(loop.pending()) << "own descriptors are the owner's business";
	std::array<uint32_t, 4> tags{};
	EXPECT_EQ(loop.turn(0, tags), 0);
	y.kick();
	ASSERT_EQ(loop.turn(1000, tags), 1);
	EXPECT_EQ(tags[0], 9u);
	x.kick();
	ASSERT_EQ(loop.turn(1000, tags), 2) << "level triggered: y was not read";
	EXPECT_EQ(std::min(tags[0], tags[1]), 7u);
	EXPECT_EQ(std::max(tags[0], tags[1]), 9u);
	EXPECT_EQ(loop.end(), 0u);
}

TEST(EpollLoop, PostedFunctionsRunOnceInOrderOnTheLoop)
{
	EpollLoop loop("test");
	ASSERT_EQ(loop.init(), 0);
	std::atomic<bool> stop{false};
	std::atomic<std::thread::id> loop_tid;
	std::thread t([&] {
		loop.set_owner();
		loop_tid = std::this_thread::get_id();
		while (!stop.load())
			ASSERT_GE(loop.turn(100, {}), 0);
	});
	while (loop_tid.load() == std::thread::id{})
		std::this_thread::yield();
	constexpr int kThreads = 4, kEach = 2000;
	std::vector<std::vector<int>> seen(kThreads);
	std::atomic<int> ran{0}, off_loop{0};
	std::vector<std::thread> posters;
	for (int p = 0; p < kThreads; p++)
		posters.emplace_back([&, p] {
			for (int i = 0; i < kEach; i++)
				ASSERT_TRUE(loop.post([&, p, i] {
					if (std::this_thread::get_id() != loop_tid.load())
						off_loop++;
					seen[size_t(p)].push_back(i); // only the loop thread writes
					ran++;
				}));
		});
	for (auto &x : posters)
		x.join();
	const auto end = std::chrono::steady_clock::now() + 10s;
	while (ran.load() < kThreads * kEach && std::chrono::steady_clock::now() < end)
		std::this_thread::sleep_for(1ms);
	stop = true;
	loop.wake();
	t.join();
	EXPECT_EQ(ran.load(), kThreads * kEach);
	EXPECT_EQ(off_loop.load(), 0);
	for (int p = 0; p < kThreads; p++) {
		ASSERT_EQ(seen[size_t(p)].size(), size_t(kEach));
		for (int i = 0; i < kEach; i++)
			ASSERT_EQ(seen[size_t(p)][size_t(i)], i) << "poster " << p;
	}
	loop.set_owner();
	EXPECT_EQ(loop.end(), 0u);
}

TEST(EpollLoop, EndRunsWhatWasPostedThenEndsTheWatches)
{
	EpollLoop loop("test");
	ASSERT_EQ(loop.init(), 0);
	EfdWatch w;
	w.loop = &loop;
	ASSERT_EQ(loop.add_fd(w.fd, &w), 0);
	std::vector<int> order;
	ASSERT_TRUE(loop.post([&] { order.push_back(1); }));
	ASSERT_TRUE(loop.post([&] {
		order.push_back(2);
		EXPECT_EQ(w.ending, 0) << "the watches end after the posted functions";
	}));
	EXPECT_TRUE(loop.pending());
	EXPECT_EQ(loop.end(), 0u);
	EXPECT_EQ(order, (std::vector<int>{1, 2}));
	EXPECT_EQ(w.ending, 1);
	EXPECT_EQ(loop.watches(), 0u);
	EXPECT_FALSE(loop.post([] {})) << "an ended loop refuses: the function would never run";
	EfdWatch late;
	late.loop = &loop;
	EXPECT_EQ(loop.add_fd(late.fd, &late), -ESHUTDOWN);
}

TEST(EpollLoop, AWatchThatDoesNotRemoveItselfIsCountedAndRemoved)
{
	struct Stubborn : LoopWatch {
		int ending = 0;
		void loop_readable() override {}
		void loop_ending() override { ending++; }
	};
	EpollLoop loop("test");
	ASSERT_EQ(loop.init(), 0);
	EfdWatch e; // for its eventfd only
	Stubborn s;
	ASSERT_EQ(loop.add_fd(e.fd, &s), 0);
	EXPECT_EQ(loop.end(), 1u);
	EXPECT_EQ(s.ending, 1);
	EXPECT_EQ(loop.watches(), 0u);
}

// One end of a socket pair, watched on loop with a mask; records what each callback was told.
struct SockWatch : LoopWatch {
	EpollLoop &loop;
	int fd = -1;                 // the watched end
	int peer = -1;               // the other end
	std::vector<uint32_t> fired; // loop_events' masks, in order
	int readable = 0;            // loop_readable calls (must stay 0: loop_events is ours)
	int ending = 0;              // loop_ending calls

	SockWatch(EpollLoop &l, uint32_t events) : loop(l)
	{
		int sv[2];
		EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv),
		          0);
		fd = sv[0];
		peer = sv[1];
		EXPECT_EQ(loop.add_fd(fd, this, events), 0);
	}
	~SockWatch()
	{
		::close(fd);
		if (peer >= 0)
			::close(peer);
	}
	void loop_events(uint32_t events) override { fired.push_back(events); }
	void loop_readable() override { readable++; }
	void loop_ending() override
	{
		ending++;
		loop.del_fd(fd);
	}
	// Bytes moved by io(buf, len) until it would block: fills the watched end's socket
	// (send) or empties the peer's (recv).
	template <class F> static size_t until_full(F io)
	{
		std::vector<char> chunk(64 * 1024, 'x');
		size_t n = 0;
		for (ssize_t r; (r = io(chunk.data(), chunk.size())) > 0;)
			n += size_t(r);
		return n;
	}
	size_t fill()
	{
		return until_full(
		    [&](char *b, size_t len) { return ::send(fd, b, len, MSG_DONTWAIT); });
	}
	size_t drain_peer()
	{
		return until_full(
		    [&](char *b, size_t len) { return ::recv(peer, b, len, MSG_DONTWAIT); });
	}
};

TEST(EpollLoop, AMaskedWatchIsToldWhatFiredAndWaitsOnlyForWhatItAsked)
{
	EpollLoop loop("test");
	ASSERT_EQ(loop.init(), 0);
	SockWatch w(loop, EPOLLIN);
	// Writable from the start, but EPOLLOUT was not asked for: nothing fires.
	EXPECT_EQ(loop.turn(0, {}), 0);
	EXPECT_TRUE(w.fired.empty());
	// Readable: told EPOLLIN, and only that.
	ASSERT_EQ(::send(w.peer, "a", 1, MSG_DONTWAIT), 1);
	EXPECT_EQ(loop.turn(1000, {}), 0);
	ASSERT_EQ(w.fired.size(), 1u);
	EXPECT_EQ(w.fired[0], uint32_t(EPOLLIN));
	// Asking for EPOLLOUT too: both fire in one call; level triggered, again next turn.
	ASSERT_EQ(loop.modify(w.fd, EPOLLIN | EPOLLOUT), 0);
	EXPECT_EQ(loop.turn(1000, {}), 0);
	EXPECT_EQ(loop.turn(1000, {}), 0);
	ASSERT_EQ(w.fired.size(), 3u);
	EXPECT_EQ(w.fired[1], uint32_t(EPOLLIN | EPOLLOUT));
	EXPECT_EQ(w.fired[2], uint32_t(EPOLLIN | EPOLLOUT));
	// Back to EPOLLIN, the byte read: quiet again.
	ASSERT_EQ(loop.modify(w.fd, EPOLLIN), 0);
	char c;
	ASSERT_EQ(::recv(w.fd, &c, 1, MSG_DONTWAIT), 1);
	EXPECT_EQ(loop.turn(0, {}), 0);
	EXPECT_EQ(w.fired.size(), 3u);
	EXPECT_EQ(w.readable, 0) << "a watch that takes loop_events is not also called readable";
	EXPECT_EQ(loop.end(), 0u);
	EXPECT_EQ(w.ending, 1);
	EXPECT_EQ(loop.modify(w.fd, EPOLLIN), -ENOENT) << "removed: nothing to modify";
}

TEST(EpollLoop, AFullSocketWaitsForEpolloutUntilThePeerReads)
{
	// The TCP worker's back-pressure (iscsi/target/tcp.cc): a short send arms EPOLLOUT, the
	// socket draining fires it, and the writer disarms it once it has written everything.
	EpollLoop loop("test");
	ASSERT_EQ(loop.init(), 0);
	SockWatch w(loop, EPOLLIN);
	ASSERT_GT(w.fill(), 0u);
	ASSERT_EQ(loop.modify(w.fd, EPOLLIN | EPOLLOUT), 0);
	EXPECT_EQ(loop.turn(0, {}), 0);
	EXPECT_TRUE(w.fired.empty()) << "full: not writable, nothing to read";
	ASSERT_GT(w.drain_peer(), 0u);
	EXPECT_EQ(loop.turn(1000, {}), 0);
	ASSERT_EQ(w.fired.size(), 1u);
	EXPECT_EQ(w.fired[0], uint32_t(EPOLLOUT));
	ASSERT_EQ(loop.modify(w.fd, EPOLLIN), 0);
	EXPECT_EQ(loop.turn(0, {}), 0);
	EXPECT_EQ(w.fired.size(), 1u) << "disarmed: writable no longer fires";
	// EPOLLHUP comes whether asked for or not: the peer gone is news to a reader.
	::close(w.peer);
	w.peer = -1;
	EXPECT_EQ(loop.turn(1000, {}), 0);
	ASSERT_EQ(w.fired.size(), 2u);
	EXPECT_TRUE(w.fired[1] & EPOLLHUP);
	EXPECT_EQ(loop.modify(w.fd + 1000, EPOLLIN), -ENOENT) << "not watched";
	EXPECT_EQ(loop.end(), 0u);
}

} // namespace
} // namespace ulp
