// SPDX-License-Identifier: MIT
// tests/admin/targetd_metrics_http_test.cc - ulp-targetd's metrics endpoint end to end: the
// daemon in a child process with --metrics-http 127.0.0.1:<port>, the project's iSCSI
// initiator writing known data and reading it back (compared), and GET /metrics over a
// plain socket: the read and write command and byte counters moved by exactly the I/O
// done, and say what `ulpctl stats --prometheus` says. Then misuse: another path (404),
// another method (405, with Allow), garbage (400), a head past 8 KiB (431), a client that
// connects and never speaks (the daemon answers another client meanwhile, closes the silent
// one after its timeout with 408, and stops cleanly with one connected), more clients than
// the bound (503).
#include "admin/http.h"
#include "iscsi/initiator/scsi.h"
#include "iscsi/initiator/session.h"
#include "tests/admin/prom_check.h"
#include "tests/admin/targetd_env.h"
#include "tests/iscsi/target_process.h"
#include "ulp/version.h"

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <sstream>
#include <thread>

namespace ulp::iscsi::initiator
{
namespace
{

using namespace std::chrono_literals;
using test::TargetdProcess;

constexpr char kIqn[] = "iqn.2026-11.org.ulp:metrics";
constexpr char kInitiator[] = "iqn.2026-11.org.ulp:metrics-test";

using Dir = test::TempDir;

int connect_to(uint16_t port)
{
	const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	sockaddr_in a{};
	a.sin_family = AF_INET;
	a.sin_port = htons(port);
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr *>(&a), sizeof(a)) != 0) {
		if (fd >= 0)
			::close(fd);
		return -1;
	}
	return fd;
}

// Everything the peer sends until it closes (or timeout passes: then what came so far).
std::string read_all(int fd, std::chrono::milliseconds timeout)
{
	std::string r;
	const auto until = std::chrono::steady_clock::now() + timeout;
	for (;;) {
		const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
		    until - std::chrono::steady_clock::now());
		if (left.count() <= 0)
			return r;
		pollfd p{fd, POLLIN, 0};
		if (::poll(&p, 1, int(left.count())) <= 0)
			continue;
		char buf[65536];
		const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
		if (n <= 0)
			return r;
		r.append(buf, size_t(n));
	}
}

// One request, the whole answer (the server closes after it).
std::string http_exchange(uint16_t port, const std::string &req)
{
	const int fd = connect_to(port);
	if (fd < 0)
		return "connect failed";
	size_t off = 0;
	while (off < req.size()) {
		const ssize_t n = ::send(fd, req.data() + off, req.size() - off, MSG_NOSIGNAL);
		if (n <= 0)
			break; // the server may answer and close before taking it all
		off += size_t(n);
	}
	std::string r = read_all(fd, 10s);
	::close(fd);
	return r;
}

int status_of(const std::string &resp)
{
	if (resp.rfind("HTTP/1.", 0) != 0 || resp.size() < 12)
		return -1;
	return std::stoi(resp.substr(9, 3));
}

std::string body_of(const std::string &resp)
{
	const size_t e = resp.find("\r\n\r\n");
	return e == std::string::npos ? std::string() : resp.substr(e + 4);
}

// "name{labels}" -> value, every sample line of a Prometheus text (checked as well formed).
std::map<std::string, double> samples(const std::string &text)
{
	std::map<std::string, double> m;
	EXPECT_TRUE(test::parse_prometheus(text, &m)) << text;
	return m;
}

std::string target_series(const char *family, const char *kind = nullptr)
{
	return std::string(family) + "{target=\"" + kIqn + "\",fabric=\"iscsi\"" +
	       (kind ? std::string(",kind=\"") + kind + "\"" : std::string()) + "}";
}

class MetricsHttp : public ::testing::Test
{
protected:
	void SetUp() override
	{
		sock_ = dir_.path + "/admin.sock";
		http_port_ = test::free_port();
		std::string why;
		ASSERT_TRUE(
		    t_.start({"--target", kIqn, "--lun", "0:ram:size=16M", "--admin-socket", sock_,
		              "--metrics-http", "127.0.0.1:" + std::to_string(http_port_)},
		             &why))
		    << why;
	}
	void TearDown() override
	{
		if (t_.running()) {
			EXPECT_EQ(t_.stop(), 0) << t_.log();
		}
	}
	std::string metrics() { return http_exchange(http_port_, "GET /metrics HTTP/1.1\r\n\r\n"); }

	Dir dir_;
	std::string sock_;
	uint16_t http_port_ = 0;
	TargetdProcess t_;
};

TEST_F(MetricsHttp, GetMetricsCountsTheVerifiedIoAndSaysWhatUlpctlSays)
{
	Session s(test_env::initiator_config(kInitiator, kIqn));
	ASSERT_TRUE(s.login(test_env::local(t_.port()))) << s.error();
	test_env::clear_ua(s, 0);
	const std::string r0 = metrics();
	ASSERT_EQ(status_of(r0), 200) << r0;
	EXPECT_NE(r0.find("Content-Type: text/plain; version=0.0.4"), std::string::npos) << r0;
	auto before = samples(body_of(r0));
	ASSERT_TRUE(before.count(target_series("ulp_target_commands_total", "write")))
	    << body_of(r0);

	constexpr int kWrites = 12, kReads = 12;
	constexpr uint32_t kBlocks = 8, kBytes = kBlocks * 512;
	for (int i = 0; i < kWrites; i++) {
		std::vector<uint8_t> w(kBytes);
		for (uint32_t k = 0; k < kBytes; k++)
			w[k] = uint8_t(i * 31 + k * 7);
		ASSERT_TRUE(
		    s.run({0, cdb_write16(uint64_t(i) * kBlocks, kBlocks), DataDir::Write, w})
		        .good());
	}
	for (int i = 0; i < kReads; i++) {
		std::vector<uint8_t> r(kBytes);
		ASSERT_TRUE(s.run({0, cdb_read16(uint64_t(i) * kBlocks, kBlocks), DataDir::Read, r})
		                .good());
		for (uint32_t k = 0; k < kBytes; k++)
			ASSERT_EQ(r[k], uint8_t(i * 31 + k * 7))
			    << "block run " << i << " byte " << k;
	}

	const std::string r1 = metrics();
	ASSERT_EQ(status_of(r1), 200) << r1;
	auto after = samples(body_of(r1));
	const auto delta = [&](const std::string &k) { return after[k] - before[k]; };
	EXPECT_EQ(delta(target_series("ulp_target_commands_total", "write")), kWrites);
	EXPECT_EQ(delta(target_series("ulp_target_commands_total", "read")), kReads);
	EXPECT_EQ(delta(target_series("ulp_target_written_bytes_total")), double(kWrites) * kBytes);
	EXPECT_EQ(delta(target_series("ulp_target_read_bytes_total")), double(kReads) * kBytes);
	EXPECT_EQ(delta(target_series("ulp_target_commands_total", "other")), 0);

	// The same numbers as `ulpctl stats --prometheus` (no I/O in between): one renderer.
	std::string out, err;
	ASSERT_EQ(test::run_program(ULPCTL_PATH, {"--socket", sock_, "stats", "--prometheus"}, &out,
	                            &err),
	          0)
	    << err;
	auto ctl = samples(out);
	for (const char *k : {"read", "write", "other"})
		EXPECT_EQ(ctl[target_series("ulp_target_commands_total", k)],
		          after[target_series("ulp_target_commands_total", k)])
		    << k;
	EXPECT_EQ(ctl[target_series("ulp_target_written_bytes_total")],
	          after[target_series("ulp_target_written_bytes_total")]);
	EXPECT_EQ(ctl[target_series("ulp_target_latency_seconds_count")],
	          after[target_series("ulp_target_latency_seconds_count")]);
	// The build and the start time, as version_get says them.
	EXPECT_EQ(ctl[std::string("ulp_build_info{version=\"") + ULP_VERSION + "\",git_commit=\"" +
	              ULP_GIT_COMMIT + "\"}"],
	          1)
	    << out;
	const double started = after["ulp_start_time_seconds"];
	const double now =
	    std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
	        .count();
	EXPECT_GT(started, now - 600) << out;
	EXPECT_LE(started, now) << out;

	// Per-session series only when asked (each login would start new ones), from the
	// endpoint and from ulpctl alike; a query it does not know is a 400, not ignored.
	const auto has_session_series = [](const std::string &text) {
		return text.find("\nulp_session_commands_total{") != std::string::npos &&
		       text.find("\nulp_iscsi_connection_cmdsn_window{") != std::string::npos;
	};
	EXPECT_FALSE(has_session_series(body_of(r1))) << body_of(r1);
	EXPECT_FALSE(has_session_series(out)) << out;
	const std::string rs =
	    http_exchange(http_port_, "GET /metrics?sessions=1 HTTP/1.1\r\n\r\n");
	ASSERT_EQ(status_of(rs), 200) << rs;
	EXPECT_TRUE(has_session_series(body_of(rs))) << body_of(rs);
	EXPECT_FALSE(has_session_series(
	    body_of(http_exchange(http_port_, "GET /metrics?sessions=0 HTTP/1.1\r\n\r\n"))));
	ASSERT_EQ(test::run_program(ULPCTL_PATH,
	                            {"--socket", sock_, "stats", "--prometheus", "--sessions"},
	                            &out, &err),
	          0)
	    << err;
	EXPECT_TRUE(has_session_series(out)) << out;
	const std::string bad =
	    http_exchange(http_port_, "GET /metrics?session=1 HTTP/1.1\r\n\r\n");
	EXPECT_EQ(status_of(bad), 400) << bad;
	EXPECT_NE(body_of(bad).find("unknown parameter 'session'"), std::string::npos) << bad;
	// HEAD: the same head, no body.
	const std::string h = http_exchange(http_port_, "HEAD /metrics HTTP/1.0\r\n\r\n");
	EXPECT_EQ(status_of(h), 200) << h;
	EXPECT_TRUE(body_of(h).empty()) << h;
	ASSERT_TRUE(s.logout(5s));
}

TEST_F(MetricsHttp, MisuseIsAnsweredAndBounded)
{
	EXPECT_EQ(status_of(http_exchange(http_port_, "GET /other HTTP/1.1\r\n\r\n")), 404);
	EXPECT_EQ(status_of(http_exchange(http_port_, "GET / HTTP/1.0\r\n\r\n")), 404);
	const std::string post =
	    http_exchange(http_port_, "POST /metrics HTTP/1.1\r\nContent-Length: 2\r\n\r\nhi");
	EXPECT_EQ(status_of(post), 405) << post;
	EXPECT_NE(post.find("Allow: GET, HEAD\r\n"), std::string::npos) << post;
	EXPECT_EQ(status_of(http_exchange(http_port_, "DELETE /metrics HTTP/1.1\r\n\r\n")), 405);
	EXPECT_EQ(status_of(http_exchange(http_port_, "\x01\x02garbage\xff\r\n\r\n")), 400);
	EXPECT_EQ(status_of(http_exchange(http_port_, "GET /metrics\r\n\r\n")), 400);
	EXPECT_EQ(status_of(http_exchange(http_port_, "GET /metrics HTTP/1.1\r\n folded\r\n\r\n")),
	          400);
	EXPECT_EQ(
	    status_of(http_exchange(http_port_, "GET /metrics HTTP/1.1\r\nBad Name: x\r\n\r\n")),
	    400);
	// Past the 8 KiB head: 431, whether it is one long header or never ends.
	const std::string big =
	    "GET /metrics HTTP/1.1\r\nX-Pad: " + std::string(admin::kMaxHttpHead, 'a') + "\r\n\r\n";
	EXPECT_EQ(status_of(http_exchange(http_port_, big)), 431);
	EXPECT_EQ(
	    status_of(http_exchange(http_port_, "GET /metrics HTTP/1.1\r\n" +
	                                            std::string(4 * admin::kMaxHttpHead, 'b'))),
	    431);
	// Through all of it the endpoint still answers.
	EXPECT_EQ(status_of(metrics()), 200);
}

TEST_F(MetricsHttp, SilentClientsHoldNothingAndTheDaemonStopsWithEightConnected)
{
	// Connected, never speaking; and one that sent half a head.
	const int silent = connect_to(http_port_);
	ASSERT_GE(silent, 0);
	const int half = connect_to(http_port_);
	ASSERT_GE(half, 0);
	ASSERT_EQ(::send(half, "GET /met", 8, MSG_NOSIGNAL), 8);
	// Another client is answered meanwhile, at once.
	const auto t0 = std::chrono::steady_clock::now();
	EXPECT_EQ(status_of(metrics()), 200);
	EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s);
	// Both get 408 after the read timeout (5 s) and are closed.
	const std::string late = read_all(half, 15s);
	EXPECT_EQ(status_of(late), 408) << late;
	const std::string mute = read_all(silent, 5s);
	EXPECT_EQ(status_of(mute), 408) << mute;
	::close(half);
	::close(silent);
	std::this_thread::sleep_for(300ms); // their ends seen by the server thread

	// More clients than the bound (8): the ninth is told 503 at once.
	std::vector<int> held;
	for (int i = 0; i < 8; i++) {
		held.push_back(connect_to(http_port_));
		ASSERT_GE(held.back(), 0);
	}
	std::this_thread::sleep_for(300ms); // accepted by the server thread
	const std::string busy = http_exchange(http_port_, "GET /metrics HTTP/1.1\r\n\r\n");
	EXPECT_EQ(status_of(busy), 503) << busy;

	// SIGTERM with all eight connected and silent: stops cleanly, well within its bound,
	// and their connections end.
	const auto t1 = std::chrono::steady_clock::now();
	EXPECT_EQ(t_.stop(), 0) << t_.log();
	EXPECT_LT(std::chrono::steady_clock::now() - t1, 3s);
	for (int fd : held) {
		char c;
		pollfd p{fd, POLLIN, 0};
		EXPECT_EQ(::poll(&p, 1, 2000), 1);
		EXPECT_LE(::recv(fd, &c, 1, 0), 0) << "closed by the daemon's exit";
		::close(fd);
	}
}

} // namespace
} // namespace ulp::iscsi::initiator
