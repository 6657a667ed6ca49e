// SPDX-License-Identifier: MIT
// core/log.cc - the logger (see log.h): one spdlog logger whose sink is a dist_sink holding
// the output (stderr, a file, or nothing) and the captures.
#include "core/log.h"

#include <spdlog/logger.h>
#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/base_sink.h>
#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/dist_sink.h>
#include <spdlog/sinks/stdout_sinks.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>

namespace ulp::log
{

namespace detail
{
std::atomic<Level> g_level{Level::Info};
} // namespace detail

namespace
{

// The line as the sinks see it carries its level and subsystem in the text; a capture needs
// them apart, so they travel beside it for the one thread that is writing (a write holds
// the dist_sink's mutex from end to end).
thread_local Level t_level;
thread_local Sub t_sub;
thread_local std::string_view t_msg;

class CaptureSink final : public spdlog::sinks::base_sink<std::mutex>
{
public:
	std::vector<Record> records()
	{
		std::lock_guard g(mutex_);
		return records_;
	}

protected:
	void sink_it_(const spdlog::details::log_msg &) override
	{
		records_.push_back(Record{t_level, t_sub, std::string(t_msg)});
	}
	void flush_() override {}

private:
	std::vector<Record> records_;
};

// "<N>", the line's syslog priority, which the journal reads off the start of a line it
// takes from a stream (sd-daemon(3): SD_ERR "<3>", SD_WARNING "<4>", SD_INFO "<6>", ...).
class PriorityFlag final : public spdlog::custom_flag_formatter
{
public:
	void format(const spdlog::details::log_msg &m, const std::tm &,
	            spdlog::memory_buf_t &dest) override
	{
		// By spdlog level: trace, debug (LOG_DEBUG), info (LOG_INFO), warn (LOG_WARNING),
		// err (LOG_ERR), critical (LOG_CRIT), off.
		static constexpr char kPrio[] = {'7', '7', '6', '4', '3', '2', '6'};
		const size_t i = size_t(m.level) < sizeof kPrio ? size_t(m.level) : 2;
		const char p[3] = {'<', kPrio[i], '>'};
		dest.append(p, p + 3);
	}
	std::unique_ptr<custom_flag_formatter> clone() const override
	{
		return std::make_unique<PriorityFlag>();
	}
};

// Whether stderr is the journal: systemd sets JOURNAL_STREAM to "device:inode" of the
// stream it connected stdout and stderr to (systemd.exec(5)); a program run by a unit whose
// stderr goes elsewhere, or that redirects its stderr, inherits the variable but not the
// stream, hence the comparison.
bool stderr_is_journal()
{
	const char *v = getenv("JOURNAL_STREAM");
	unsigned long long dev = 0, ino = 0;
	if (!v || sscanf(v, "%llu:%llu", &dev, &ino) != 2)
		return false;
	struct stat st;
	return fstat(STDERR_FILENO, &st) == 0 && st.st_dev == dev && st.st_ino == ino;
}

struct State {
	std::mutex lock; // guards everything below (not the writes: the dist_sink has its own)
	std::shared_ptr<spdlog::sinks::dist_sink_mt> dist;
	std::shared_ptr<spdlog::logger> logger;
	spdlog::sink_ptr output;
	bool journal = false;  // output is stderr and stderr is the journal
	std::string file_path; // output is this file (to_file), for reopen
	std::map<int, std::shared_ptr<CaptureSink>> captures;
	int next_id = 1;
	std::string program = "ulp";

	State()
	{
		dist = std::make_shared<spdlog::sinks::dist_sink_mt>();
		output = std::make_shared<spdlog::sinks::stderr_sink_mt>();
		journal = stderr_is_journal();
		set_output(output);
		dist->add_sink(output);
		logger = std::make_shared<spdlog::logger>("ulp", dist);
		logger->set_level(spdlog::level::trace); // our level filters before spdlog
		logger->flush_on(spdlog::level::trace);  // every line reaches the file at once
	}
	void set_output(const spdlog::sink_ptr &s) // under lock (or in the constructor)
	{
		s->set_level(spdlog::level::trace);
		if (s == output && journal) {
			// The journal stamps each line with its time and the program (its
			// identifier) itself: the line is its priority and the message.
			auto f = std::make_unique<spdlog::pattern_formatter>();
			f->add_flag<PriorityFlag>('*').set_pattern("%*%v");
			s->set_formatter(std::move(f));
			return;
		}
		// The program's name is in the pattern, escaped: a '%' in it stays a '%'.
		std::string name;
		for (char c : program)
			name += c == '%' ? std::string("%%") : std::string(1, c);
		s->set_pattern("%Y-%m-%d %H:%M:%S.%e " + name + ": %v");
	}
	void replace_output(spdlog::sink_ptr s, bool is_stderr) // under lock
	{
		if (output)
			dist->remove_sink(output);
		output = std::move(s);
		journal = is_stderr && stderr_is_journal();
		if (output) {
			set_output(output);
			dist->add_sink(output);
		}
	}
};

State &state()
{
	static State *s = new State; // never destroyed: threads may log during exit
	return *s;
}

spdlog::level::level_enum to_spdlog(Level l)
{
	switch (l) {
	case Level::Trace:
		return spdlog::level::trace;
	case Level::Debug:
		return spdlog::level::debug;
	case Level::Info:
		return spdlog::level::info;
	case Level::Warn:
		return spdlog::level::warn;
	case Level::Error:
		return spdlog::level::err;
	case Level::Critical:
		return spdlog::level::critical;
	case Level::Off:
		break;
	}
	return spdlog::level::off;
}

int64_t now_ms()
{
	using namespace std::chrono;
	return duration_cast<milliseconds>(steady_clock::now().time_since_epoch()).count();
}

} // namespace

const char *level_name(Level l)
{
	switch (l) {
	case Level::Trace:
		return "trace";
	case Level::Debug:
		return "debug";
	case Level::Info:
		return "info";
	case Level::Warn:
		return "warning";
	case Level::Error:
		return "error";
	case Level::Critical:
		return "critical";
	case Level::Off:
		return "off";
	}
	return "?";
}

const char *sub_name(Sub s)
{
	switch (s) {
	case Sub::Core:
		return "core";
	case Sub::Soft:
		return "soft";
	case Sub::Verbs:
		return "verbs";
	case Sub::CqPoll:
		return "cq_poll";
	case Sub::MrPool:
		return "mr_pool";
	case Sub::Rw:
		return "rw";
	case Sub::Rdma:
		return "rdma_conn";
	case Sub::Scsi:
		return "scsi";
	case Sub::Iscsi:
		return "iscsi";
	case Sub::Iser:
		return "iser";
	case Sub::Srpt:
		return "srpt";
	case Sub::Tool:
		return "tool";
	case Sub::Ha:
		return "ha";
	}
	return "?";
}

bool parse_level(std::string_view s, Level *out)
{
	static const std::pair<std::string_view, Level> names[] = {
	    {"trace", Level::Trace}, {"debug", Level::Debug},       {"info", Level::Info},
	    {"warn", Level::Warn},   {"warning", Level::Warn},      {"error", Level::Error},
	    {"err", Level::Error},   {"critical", Level::Critical}, {"off", Level::Off},
	};
	for (auto &[n, l] : names)
		if (s == n) {
			*out = l;
			return true;
		}
	return false;
}

void set_level(Level l)
{
	detail::g_level.store(l, std::memory_order_relaxed);
}

void set_program(std::string name)
{
	State &st = state();
	std::lock_guard g(st.lock);
	st.program = std::move(name);
	if (st.output)
		st.set_output(st.output);
}

namespace
{
// The file sink for path (opened once first for the errno: spdlog's exception carries only
// a message), or a negative errno.
int open_file_sink(const std::string &path, spdlog::sink_ptr *out)
{
	const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
	if (fd < 0)
		return -errno;
	::close(fd);
	try {
		*out = std::make_shared<spdlog::sinks::basic_file_sink_mt>(path, false);
	} catch (const spdlog::spdlog_ex &) {
		return -EIO;
	}
	return 0;
}
} // namespace

int to_file(const std::string &path)
{
	spdlog::sink_ptr s;
	if (int rc = open_file_sink(path, &s); rc != 0)
		return rc;
	State &st = state();
	std::lock_guard g(st.lock);
	st.replace_output(std::move(s), false);
	st.file_path = path;
	return 0;
}

int reopen()
{
	State &st = state();
	std::string path;
	{
		std::lock_guard g(st.lock);
		if (st.file_path.empty())
			return 1;
		path = st.file_path;
	}
	// Opened outside the lock (a file system may be slow), then put in place only if the
	// output is still that file: a to_stderr() or to_file() meanwhile wins.
	spdlog::sink_ptr s;
	if (int rc = open_file_sink(path, &s); rc != 0)
		return rc;
	std::lock_guard g(st.lock);
	if (st.file_path == path)
		st.replace_output(std::move(s), false);
	return 0;
}

void to_stderr()
{
	State &st = state();
	std::lock_guard g(st.lock);
	st.replace_output(std::make_shared<spdlog::sinks::stderr_sink_mt>(), true);
	st.file_path.clear();
}

void to_nothing()
{
	State &st = state();
	std::lock_guard g(st.lock);
	st.replace_output(nullptr, false);
	st.file_path.clear();
}

void detail::write(Level l, Sub s, std::string_view msg)
{
	// "sub: [warning: ]msg"; a program's own (Tool) info lines go without a tag, so that a
	// daemon's "stopped" reads "ulp-targetd: stopped".
	fmt::basic_memory_buffer<char, 640> line;
	if (s != Sub::Tool)
		fmt::format_to(std::back_inserter(line), "{}: ", sub_name(s));
	if (l >= Level::Warn)
		fmt::format_to(std::back_inserter(line), "{}: ", level_name(l));
	line.append(msg.data(), msg.data() + msg.size());
	t_level = l;
	t_sub = s;
	t_msg = msg;
	state().logger->log(to_spdlog(l), std::string_view(line.data(), line.size()));
	t_msg = {};
}

Capture::Capture()
{
	State &st = state();
	auto sink = std::make_shared<CaptureSink>();
	std::lock_guard g(st.lock);
	id_ = st.next_id++;
	st.captures[id_] = sink;
	st.dist->add_sink(sink);
}

Capture::~Capture()
{
	State &st = state();
	std::lock_guard g(st.lock);
	auto it = st.captures.find(id_);
	st.dist->remove_sink(it->second);
	st.captures.erase(it);
}

std::vector<Record> Capture::records() const
{
	State &st = state();
	std::shared_ptr<CaptureSink> sink;
	{
		std::lock_guard g(st.lock);
		sink = st.captures.at(id_);
	}
	return sink->records();
}

std::string Capture::text() const
{
	std::string out;
	for (const Record &r : records()) {
		out += sub_name(r.sub);
		out += ": ";
		out += r.msg;
		out += '\n';
	}
	return out;
}

bool Capture::contains(std::string_view needle) const
{
	return count(needle) > 0;
}

size_t Capture::count(std::string_view needle) const
{
	size_t n = 0;
	for (const Record &r : records())
		if (r.msg.find(needle) != std::string::npos)
			n++;
	return n;
}

bool RateLimit::allow(uint32_t *suppressed)
{
	const int64_t now = now_ms();
	int64_t start = window_start_ms_.load(std::memory_order_relaxed);
	if (now - start >= interval_ms_ &&
	    window_start_ms_.compare_exchange_strong(start, now, std::memory_order_relaxed))
		in_window_.store(0, std::memory_order_relaxed);
	if (in_window_.fetch_add(1, std::memory_order_relaxed) >= burst_) {
		suppressed_.fetch_add(1, std::memory_order_relaxed);
		return false;
	}
	*suppressed = suppressed_.exchange(0, std::memory_order_relaxed);
	return true;
}

} // namespace ulp::log
