// SPDX-License-Identifier: MIT
// core/log.h - the one logger of ulp's libraries: levels, a subsystem tag per line, rate
// limiting for anything that can repeat per I/O, and a sink the program chooses (spdlog
// underneath, Debian's libspdlog).
//
//   ULP_LOG(Warn, CqPoll, "free_cq of CQ {} from its own done(): {}", fmt::ptr(cq), rc);
//   ULP_LOG_RATELIMITED(Error, Iser, "ITT {:08x}: RDMA READ failed: {}", itt, why);
//
// A line reads "2026-11-25 00:20:09.347 ulp-targetd: iser: warning: ..." on stderr (the
// program name is set by set_program) or in a file (to_file). When stderr is systemd's
// journal ($JOURNAL_STREAM names it), a line is "<4>iser: warning: ...": its syslog priority,
// which `journalctl -p` filters on, and no time or name of its own, which the journal adds.
// Tests add a capturing sink (Capture) to assert what was logged.
//
// The data path may log (errors): a line is formatted into a stack buffer and written
// through the sinks without a heap allocation unless it is longer than 512 bytes. Lines
// below the level (set_level; default Info) cost one relaxed load. Anything that can
// repeat per I/O uses ULP_LOG_RATELIMITED: at most 10 lines per call site in 5 s, then one
// line saying how many were suppressed.
#pragma once

#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace ulp::log
{

enum class Level : uint8_t { Trace, Debug, Info, Warn, Error, Critical, Off };

// The subsystem of a line: its tag, as the kernel's pr_fmt prefixes a driver's lines.
enum class Sub : uint8_t {
	Core,   // core/: verbs objects, registered memory, drain, device registry
	Soft,   // providers/soft
	Verbs,  // providers/verbs (rdma-core)
	CqPoll, // cq_poll/
	MrPool, // mr_pool/
	Rw,     // rw/
	Rdma,   // rdma_conn/: portals, rings, teardown shared by iSER and SRP
	Scsi,   // scsi/: the target core and backstores
	Iscsi,  // iscsi/: the iSCSI target and initiator
	Iser,   // iser/: the iSER transport
	Srpt,   // srp/: the SRP target and initiator
	Tool,   // tools/: the daemons and clients
	Ha,     // ha/: gateways sharing a Ceph cluster (cluster map, leases, fencing)
};

const char *level_name(Level l); // "trace" .. "critical", "off"
const char *sub_name(Sub s);     // "core", "soft", "iser", ...
// "warn", "warning", "info", ...: false when s names no level.
bool parse_level(std::string_view s, Level *out);

namespace detail
{
extern std::atomic<Level> g_level;
void write(Level l, Sub s, std::string_view msg);
} // namespace detail

// Lines below l are dropped (default Info).
void set_level(Level l);
inline Level level()
{
	return detail::g_level.load(std::memory_order_relaxed);
}
inline bool enabled(Level l)
{
	return l >= level() && l != Level::Off;
}

// Sinks. The default is stderr, with timestamps (the journal's form when stderr is the
// journal). to_file appends to path instead (0, or a negative errno and nothing changed);
// to_stderr goes back, and looks again at whether stderr is the journal.
void set_program(std::string name); // the name in every line ("ulp" by default)
int to_file(const std::string &path);
// The file of to_file opened again by its name (after logrotate moved it: the lines go to
// the new file, none is lost between): 0; a negative errno and the old file kept; or 1 when
// the output is not a file (nothing to do).
int reopen();
void to_stderr();
void to_nothing(); // no output sink (tests that only capture)

// One line as a capturing sink sees it.
struct Record {
	Level level;
	Sub sub;
	std::string msg;
};

// Every line (at or above the level) is also handed to the capture while it lives: tests
// assert on what was logged. Thread safe; lines from every thread of the process.
class Capture
{
public:
	Capture();
	~Capture();
	Capture(const Capture &) = delete;
	Capture &operator=(const Capture &) = delete;

	std::vector<Record> records() const;
	std::string text() const; // "sub: msg\n" per line
	bool contains(std::string_view needle) const;
	size_t count(std::string_view needle) const; // lines containing needle

private:
	int id_;
};

// Format and write a line (the level already checked by the macro).
template <typename... Args> void logf(Level l, Sub s, fmt::format_string<Args...> f, Args &&...args)
{
	fmt::basic_memory_buffer<char, 512> buf;
	fmt::format_to(std::back_inserter(buf), f, std::forward<Args>(args)...);
	detail::write(l, s, std::string_view(buf.data(), buf.size()));
}

// A call site's budget: `burst` lines per `interval`; the first line after a suppressed
// stretch says how many were dropped. Lock free; a static at each call site.
class RateLimit
{
public:
	constexpr RateLimit(uint32_t burst = 10, int64_t interval_ms = 5000)
	    : burst_(burst), interval_ms_(interval_ms)
	{
	}
	// True: log this one; *suppressed then holds how many were dropped before it.
	bool allow(uint32_t *suppressed);

private:
	const uint32_t burst_;
	const int64_t interval_ms_;
	std::atomic<int64_t> window_start_ms_{0}; // steady clock
	std::atomic<uint32_t> in_window_{0};      // lines allowed in this window
	std::atomic<uint32_t> suppressed_{0};     // lines dropped since the last allowed one
};

} // namespace ulp::log

#define ULP_LOG(level, sub, ...)                                                                   \
	do {                                                                                       \
		if (::ulp::log::enabled(::ulp::log::Level::level))                                 \
			::ulp::log::logf(::ulp::log::Level::level, ::ulp::log::Sub::sub,           \
			                 __VA_ARGS__);                                             \
	} while (0)

#define ULP_LOG_RATELIMITED(level, sub, ...)                                                       \
	do {                                                                                       \
		static ::ulp::log::RateLimit ulp_log_rl_;                                          \
		uint32_t ulp_log_dropped_ = 0;                                                     \
		if (::ulp::log::enabled(::ulp::log::Level::level) &&                               \
		    ulp_log_rl_.allow(&ulp_log_dropped_)) {                                        \
			if (ulp_log_dropped_)                                                      \
				::ulp::log::logf(::ulp::log::Level::level, ::ulp::log::Sub::sub,   \
				                 "({} similar lines suppressed)",                  \
				                 ulp_log_dropped_);                                \
			::ulp::log::logf(::ulp::log::Level::level, ::ulp::log::Sub::sub,           \
			                 __VA_ARGS__);                                             \
		}                                                                                  \
	} while (0)
