// SPDX-License-Identifier: MIT
// tests/core/log_test.cc - the logger (core/log.h): levels, tags, captures, files, rate
// limits, lines from many threads, and the journal's form of a line.
#include "core/log.h"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

namespace ulp::log
{
namespace
{

// Every test leaves the level as it found it.
struct LevelGuard {
	Level saved = level();
	~LevelGuard() { set_level(saved); }
};

// A file's whole text.
std::string slurp(const std::string &path)
{
	std::ifstream f(path);
	std::stringstream ss;
	ss << f.rdbuf();
	return ss.str();
}

TEST(Log, LevelFiltersAndTagsTravelWithTheLine)
{
	LevelGuard lg;
	Capture c;
	set_level(Level::Info);
	ULP_LOG(Debug, Core, "hidden {}", 1);
	ULP_LOG(Info, Iser, "ITT {:08x} done", 0x1234u);
	ULP_LOG(Error, Scsi, "LU {} gone", "lu0");
	auto r = c.records();
	ASSERT_EQ(r.size(), 2u) << c.text();
	EXPECT_EQ(r[0].level, Level::Info);
	EXPECT_EQ(r[0].sub, Sub::Iser);
	EXPECT_EQ(r[0].msg, "ITT 00001234 done");
	EXPECT_EQ(r[1].level, Level::Error);
	EXPECT_EQ(r[1].msg, "LU lu0 gone");
	EXPECT_EQ(c.text(), "iser: ITT 00001234 done\nscsi: LU lu0 gone\n");
	set_level(Level::Debug);
	ULP_LOG(Debug, Core, "shown");
	EXPECT_TRUE(c.contains("shown"));
	set_level(Level::Off);
	ULP_LOG(Critical, Core, "nothing passes Off");
	EXPECT_FALSE(c.contains("nothing passes"));
}

TEST(Log, ParseLevel)
{
	Level l;
	EXPECT_TRUE(parse_level("warning", &l));
	EXPECT_EQ(l, Level::Warn);
	EXPECT_TRUE(parse_level("debug", &l));
	EXPECT_EQ(l, Level::Debug);
	EXPECT_FALSE(parse_level("loud", &l));
	EXPECT_STREQ(level_name(Level::Error), "error");
	EXPECT_STREQ(sub_name(Sub::CqPoll), "cq_poll");
	EXPECT_STREQ(sub_name(Sub::Ha), "ha");
}

TEST(Log, FileSinkGetsProgramTagLevelAndTimestamp)
{
	LevelGuard lg;
	set_level(Level::Info);
	char path[] = "/tmp/ulp-log-test-XXXXXX";
	int fd = mkstemp(path);
	ASSERT_GE(fd, 0);
	close(fd);
	ASSERT_EQ(to_file(path), 0);
	set_program("log-test");
	ULP_LOG(Warn, CqPoll, "modify_cq failed: {}", -22);
	ULP_LOG(Info, Tool, "stopped");
	to_stderr();
	set_program("ulp");
	const std::string text = slurp(path);
	unlink(path);
	EXPECT_NE(text.find(" log-test: cq_poll: warning: modify_cq failed: -22\n"),
	          std::string::npos)
	    << text;
	// A program's own lines carry no tag: "ulp-targetd: stopped" is what scripts grep.
	EXPECT_NE(text.find(" log-test: stopped\n"), std::string::npos) << text;
	// "YYYY-MM-DD HH:MM:SS.mmm " first.
	ASSERT_GE(text.size(), 24u);
	EXPECT_EQ(text[4], '-');
	EXPECT_EQ(text[10], ' ');
	EXPECT_EQ(text[19], '.');
	EXPECT_EQ(to_file("/nonexistent-dir/x.log") < 0, true);
}

// stderr made a file that JOURNAL_STREAM names, as systemd does when it connects a unit's
// stderr to the journal: lines carry "<N>" and no time or name; a JOURNAL_STREAM that names
// another stream (inherited by a program whose stderr was redirected) changes nothing.
TEST(Log, JournalStreamGetsPriorityPrefixAndNoTimestamp)
{
	LevelGuard lg;
	set_level(Level::Debug);
	char path[] = "/tmp/ulp-log-journal-XXXXXX";
	const int fd = mkstemp(path);
	ASSERT_GE(fd, 0);
	struct stat st;
	ASSERT_EQ(fstat(fd, &st), 0);
	const int saved = dup(STDERR_FILENO);
	ASSERT_GE(saved, 0);
	ASSERT_EQ(dup2(fd, STDERR_FILENO), STDERR_FILENO);
	const std::string stream = std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino);

	setenv("JOURNAL_STREAM", stream.c_str(), 1);
	to_stderr();
	ULP_LOG(Warn, CqPoll, "modify_cq failed: {}", -22);
	ULP_LOG(Error, Iser, "gone");
	ULP_LOG(Critical, Core, "check");
	ULP_LOG(Info, Tool, "stopped");
	ULP_LOG(Debug, Scsi, "detail");
	setenv("JOURNAL_STREAM", "1:2", 1); // another stream
	to_stderr();
	ULP_LOG(Warn, Tool, "not the journal");
	unsetenv("JOURNAL_STREAM");

	ASSERT_EQ(dup2(saved, STDERR_FILENO), STDERR_FILENO);
	close(saved);
	to_stderr();
	const std::string text = slurp(path);
	close(fd);
	unlink(path);
	const std::string journal = "<4>cq_poll: warning: modify_cq failed: -22\n"
	                            "<3>iser: error: gone\n"
	                            "<2>core: critical: check\n"
	                            "<6>stopped\n"
	                            "<7>scsi: detail\n";
	ASSERT_EQ(text.substr(0, journal.size()), journal) << text;
	// Then the usual form again: a timestamp first, no priority.
	const std::string rest = text.substr(journal.size());
	EXPECT_EQ(rest.find('<'), std::string::npos) << rest;
	EXPECT_NE(rest.find(": warning: not the journal\n"), std::string::npos) << rest;
	ASSERT_GE(rest.size(), 24u);
	EXPECT_EQ(rest[4], '-');
	EXPECT_EQ(rest[19], '.');
}

// logrotate's move, then reopen: the lines before are in the moved file, those after in a
// new one by the old name; with stderr as the output, reopen does nothing.
TEST(Log, ReopenAfterTheFileWasMovedWritesANewOne)
{
	LevelGuard lg;
	set_level(Level::Info);
	char path[] = "/tmp/ulp-log-reopen-XXXXXX";
	const int fd = mkstemp(path);
	ASSERT_GE(fd, 0);
	close(fd);
	const std::string moved = std::string(path) + ".1";
	ASSERT_EQ(to_file(path), 0);
	ULP_LOG(Info, Tool, "before the move");
	ASSERT_EQ(rename(path, moved.c_str()), 0);
	ULP_LOG(Info, Tool, "moved, not reopened");
	ASSERT_EQ(reopen(), 0);
	ULP_LOG(Info, Tool, "after reopen");
	to_stderr();
	EXPECT_EQ(reopen(), 1);
	const std::string old_text = slurp(moved), new_text = slurp(path);
	unlink(path);
	unlink(moved.c_str());
	EXPECT_NE(old_text.find("before the move\n"), std::string::npos) << old_text;
	EXPECT_NE(old_text.find("moved, not reopened\n"), std::string::npos) << old_text;
	EXPECT_EQ(old_text.find("after reopen"), std::string::npos) << old_text;
	EXPECT_NE(new_text.find("after reopen\n"), std::string::npos) << new_text;
	EXPECT_EQ(new_text.find("before the move"), std::string::npos) << new_text;
}

TEST(Log, RateLimitedSitePassesABurstThenCountsWhatItDropped)
{
	LevelGuard lg;
	set_level(Level::Info);
	Capture c;
	auto site = [](int i) { ULP_LOG_RATELIMITED(Error, Rw, "rkey failure {}", i); };
	for (int i = 0; i < 100; i++)
		site(i);
	// The default budget: 10 lines per 5 s at one call site.
	EXPECT_EQ(c.count("rkey failure"), 10u) << c.text();
	EXPECT_FALSE(c.contains("suppressed"));
	RateLimit rl(2, 50);
	uint32_t dropped = 0;
	EXPECT_TRUE(rl.allow(&dropped));
	EXPECT_TRUE(rl.allow(&dropped));
	EXPECT_FALSE(rl.allow(&dropped));
	EXPECT_FALSE(rl.allow(&dropped));
	std::this_thread::sleep_for(std::chrono::milliseconds(60));
	EXPECT_TRUE(rl.allow(&dropped));
	EXPECT_EQ(dropped, 2u) << "the first line of a new window says how many were dropped";
}

TEST(Log, ManyThreadsLinesStayWhole)
{
	LevelGuard lg;
	set_level(Level::Info);
	to_nothing();
	Capture c;
	std::vector<std::thread> ts;
	for (int t = 0; t < 4; t++)
		ts.emplace_back([t] {
			for (int i = 0; i < 500; i++)
				ULP_LOG(Info, Soft, "thread {} line {} {}", t, i,
				        std::string(40, 'x'));
		});
	for (auto &t : ts)
		t.join();
	to_stderr();
	auto r = c.records();
	ASSERT_EQ(r.size(), 2000u);
	for (const Record &x : r)
		ASSERT_EQ(x.msg.size(), x.msg.find(std::string(40, 'x')) + 40) << x.msg;
}

} // namespace
} // namespace ulp::log
