// SPDX-License-Identifier: MIT
// tests/admin/rpc_test.cc - the admin socket against misuse: the JSON-RPC parser (malformed
// JSON, wrong member types, batches, depth and length limits), parameter checks (missing,
// unknown, wrong type, out of range), and a real server on a Unix socket with clients that
// send garbage, oversized lines, nothing at all, too many connections, and a peer of the
// wrong uid (SO_PEERCRED). Every bad request gets a JSON-RPC error; none crashes, hangs or
// reaches a method.
#include "admin/client.h"
#include "admin/rpc.h"
#include "admin/server.h"

#include <gtest/gtest.h>

#include <grp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <thread>

namespace ulp::admin
{
namespace
{

using namespace std::chrono_literals;

// A table with one method that counts its calls and echoes its parameters.
struct Table {
	Methods m;
	std::atomic<int> calls{0};
	Table()
	{
		m.add({"echo",
		       "returns its parameters",
		       {{"name", ParamType::String, true},
		        {"n", ParamType::Uint, false, 1, 100},
		        {"flag", ParamType::Bool},
		        {"size", ParamType::Size},
		        {"list", ParamType::Strings}},
		       [this](const json &p, const Caller &c) {
			       calls++;
			       json r = p;
			       r["caller"] = c.who;
			       if (p.contains("size"))
				       r["bytes"] = param_size(p, "size", 0);
			       return r;
		       }});
		m.add(
		    {"fail", "fails with ENOENT", {}, [this](const json &, const Caller &) -> json {
			     calls++;
			     throw MethodError{-ENOENT, "no such thing"};
		     }});
		m.add(
		    {"rpc_get_methods", "lists methods", {}, [this](const json &, const Caller &) {
			     return m.describe();
		     }});
	}
	json call(std::string_view line)
	{
		std::string out = m.handle_line(line);
		if (out.empty())
			return nullptr;
		EXPECT_EQ(out.back(), '\n');
		EXPECT_EQ(out.find('\n'), out.size() - 1) << "a response is one line";
		return json::parse(out);
	}
};

int code(const json &r)
{
	return r.contains("error") ? r["error"]["code"].get<int>() : 0;
}

TEST(AdminRpc, WellFormedRequestAndResult)
{
	Table t;
	json r = t.call(
	    R"({"jsonrpc":"2.0","id":7,"method":"echo","params":{"name":"x","n":3,"size":"32M"}})");
	EXPECT_EQ(r["jsonrpc"], "2.0");
	EXPECT_EQ(r["id"], 7);
	EXPECT_EQ(r["result"]["name"], "x");
	EXPECT_EQ(r["result"]["bytes"], 32u << 20);
	r = t.call(R"({"jsonrpc":"2.0","id":"abc","method":"fail"})");
	EXPECT_EQ(r["id"], "abc");
	EXPECT_EQ(code(r), -ENOENT);
	EXPECT_EQ(r["error"]["message"], "no such thing");
	EXPECT_EQ(t.calls, 2);
}

TEST(AdminRpc, NotificationsRunButAreNotAnswered)
{
	Table t;
	EXPECT_TRUE(t.call(R"({"jsonrpc":"2.0","method":"echo","params":{"name":"x"}})").is_null());
	EXPECT_EQ(t.calls, 1);
}

TEST(AdminRpc, MalformedRequestsGetTheSpecsErrors)
{
	Table t;
	struct Case {
		const char *line;
		int code;
	} cases[] = {
	    {"", kParseError},
	    {"{", kParseError},
	    {"not json", kParseError},
	    {R"({"jsonrpc":"2.0","id":1,"method":"echo",})", kParseError},
	    {"\xff\xfe{}", kParseError},
	    {"[]", kInvalidRequest},
	    {R"([{"jsonrpc":"2.0","id":1,"method":"echo"}])", kInvalidRequest},
	    {"42", kInvalidRequest},
	    {R"("x")", kInvalidRequest},
	    {R"({"id":1,"method":"echo"})", kInvalidRequest},
	    {R"({"jsonrpc":"1.0","id":1,"method":"echo"})", kInvalidRequest},
	    {R"({"jsonrpc":2.0,"id":1,"method":"echo"})", kInvalidRequest},
	    {R"({"jsonrpc":"2.0","id":1})", kInvalidRequest},
	    {R"({"jsonrpc":"2.0","id":1,"method":5})", kInvalidRequest},
	    {R"({"jsonrpc":"2.0","id":1,"method":""})", kInvalidRequest},
	    {R"({"jsonrpc":"2.0","id":{"a":1},"method":"echo"})", kInvalidRequest},
	    {R"({"jsonrpc":"2.0","id":1.5,"method":"echo"})", kInvalidRequest},
	    {R"({"jsonrpc":"2.0","id":1,"method":"echo","extra":1})", kInvalidRequest},
	    {R"({"jsonrpc":"2.0","id":1,"method":"echo","params":["x"]})", kInvalidParams},
	    {R"({"jsonrpc":"2.0","id":1,"method":"echo","params":"x"})", kInvalidParams},
	    {R"({"jsonrpc":"2.0","id":1,"method":"nope"})", kMethodNotFound},
	};
	for (const Case &c : cases) {
		json r = t.call(c.line);
		ASSERT_TRUE(r.is_object()) << c.line;
		EXPECT_EQ(code(r), c.code) << c.line << " -> " << r.dump();
		EXPECT_TRUE(r.contains("id")) << c.line;
	}
	EXPECT_EQ(t.calls, 0) << "no malformed request reached a method";
}

TEST(AdminRpc, WrongParametersNeverReachTheMethod)
{
	Table t;
	const char *bad[] = {
	    R"({"jsonrpc":"2.0","id":1,"method":"echo","params":{}})",                   // missing
	    R"({"jsonrpc":"2.0","id":1,"method":"echo","params":{"name":1}})",           // type
	    R"({"jsonrpc":"2.0","id":1,"method":"echo","params":{"name":"x","n":0}})",   // range
	    R"({"jsonrpc":"2.0","id":1,"method":"echo","params":{"name":"x","n":101}})", // range
	    R"({"jsonrpc":"2.0","id":1,"method":"echo","params":{"name":"x","n":-1}})",
	    R"({"jsonrpc":"2.0","id":1,"method":"echo","params":{"name":"x","n":"3"}})",
	    R"({"jsonrpc":"2.0","id":1,"method":"echo","params":{"name":"x","n":3.5}})",
	    R"({"jsonrpc":"2.0","id":1,"method":"echo","params":{"name":"x","n":1e30}})",
	    R"({"jsonrpc":"2.0","id":1,"method":"echo","params":{"name":"x","flag":"yes"}})",
	    R"({"jsonrpc":"2.0","id":1,"method":"echo","params":{"name":"x","size":"12Q"}})",
	    R"({"jsonrpc":"2.0","id":1,"method":"echo","params":{"name":"x","size":-5}})",
	    R"({"jsonrpc":"2.0","id":1,"method":"echo","params":{"name":"x","size":"99999999999999999999"}})",
	    R"({"jsonrpc":"2.0","id":1,"method":"echo","params":{"name":"x","size":"20000000T"}})",
	    R"({"jsonrpc":"2.0","id":1,"method":"echo","params":{"name":"x","list":["a",1]}})",
	    R"({"jsonrpc":"2.0","id":1,"method":"echo","params":{"name":"x","other":1}})", // unknown
	};
	for (const char *l : bad) {
		json r = t.call(l);
		EXPECT_EQ(code(r), kInvalidParams) << l << " -> " << r.dump();
		EXPECT_TRUE(r["error"]["message"].get<std::string>().find('"') != std::string::npos)
		    << "the message names the parameter: " << r.dump();
	}
	EXPECT_EQ(t.calls, 0);
}

TEST(AdminRpc, DepthAndLengthAreBoundedBeforeParsing)
{
	Table t;
	std::string deep(100000, '[');
	EXPECT_EQ(code(t.call(deep)), kParseError);
	std::string deep_obj =
	    R"({"jsonrpc":"2.0","id":1,"method":"echo","params":{"name":"x","list":)";
	for (int i = 0; i < 40; i++)
		deep_obj += "[";
	EXPECT_EQ(code(t.call(deep_obj)), kParseError);
	// Brackets inside strings are not nesting.
	json ok = t.call(
	    R"({"jsonrpc":"2.0","id":1,"method":"echo","params":{"name":"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["}})");
	EXPECT_EQ(code(ok), 0) << ok.dump();
	std::string longline = R"({"jsonrpc":"2.0","id":1,"method":"echo","params":{"name":")" +
	                       std::string(kMaxRequestBytes, 'a') + "\"}}";
	EXPECT_EQ(code(t.call(longline)), kParseError);
	EXPECT_EQ(t.calls, 1);
}

TEST(AdminRpc, SizesAndDescribe)
{
	uint64_t n = 0;
	EXPECT_TRUE(parse_size("512", &n));
	EXPECT_EQ(n, 512u);
	EXPECT_TRUE(parse_size("4K", &n));
	EXPECT_EQ(n, 4096u);
	EXPECT_TRUE(parse_size("1GiB", &n));
	EXPECT_EQ(n, 1u << 30);
	for (const char *b : {"", "K", "1X", "-1", "1.5G", "18446744073709551616", "16777216T"})
		EXPECT_FALSE(parse_size(b, &n)) << b;
	Table t;
	json d = t.call(R"({"jsonrpc":"2.0","id":1,"method":"rpc_get_methods"})")["result"];
	ASSERT_TRUE(d.is_array());
	EXPECT_EQ(d.size(), 3u);
	EXPECT_EQ(d[0]["name"], "echo");
	EXPECT_EQ(d[0]["params"][0]["name"], "name");
	EXPECT_EQ(d[0]["params"][0]["required"], true);
}

// ---- The server on a real socket --------------------------------------------------------------

struct ServerFixture : ::testing::Test {
	Table t;
	std::string dir;
	std::string path;
	std::unique_ptr<Server> srv;

	void SetUp() override
	{
		char tmpl[] = "/tmp/ulp-admin-XXXXXX";
		ASSERT_TRUE(::mkdtemp(tmpl));
		dir = tmpl;
		path = dir + "/admin.sock";
	}
	void TearDown() override
	{
		srv.reset();
		std::filesystem::remove_all(dir);
	}
	void start(ServerConfig cfg = {})
	{
		cfg.path = path;
		if (cfg.idle_timeout == std::chrono::milliseconds(10000))
			cfg.idle_timeout = 300ms;
		srv = std::make_unique<Server>(t.m, cfg);
		std::string why;
		ASSERT_EQ(srv->start(&why), 0) << why;
	}
	// One echo call from a child process running as uid/gid 65534 with the supplementary
	// groups sup: its answer (a JSON line), or what went wrong.
	std::string call_as_nobody(std::vector<gid_t> sup)
	{
		int pipefd[2];
		if (::pipe(pipefd) != 0)
			return "pipe failed";
		const pid_t pid = ::fork();
		if (pid == 0) {
			::close(pipefd[0]);
			if (::setgroups(sup.size(), sup.data()) != 0 || ::setgid(65534) != 0 ||
			    ::setuid(65534) != 0)
				_exit(3);
			Client c;
			std::string why, line;
			std::string out = "connect-failed";
			if (c.connect(path, &why) == 0) {
				c.send_raw(
				    R"({"jsonrpc":"2.0","id":1,"method":"echo","params":{"name":"x"}})"
				    "\n",
				    &why);
				out = c.read_line(&line, &why, 3s) ? line : "no-response";
			}
			(void)!::write(pipefd[1], out.data(), out.size());
			_exit(0);
		}
		::close(pipefd[1]);
		std::string got;
		char buf[4096];
		ssize_t n;
		while ((n = ::read(pipefd[0], buf, sizeof(buf))) > 0)
			got.append(buf, size_t(n));
		::close(pipefd[0]);
		int st = 0;
		::waitpid(pid, &st, 0);
		return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? got
		                                             : "child status " + std::to_string(st);
	}
	json response(Client &c, std::chrono::milliseconds timeout = 5s)
	{
		std::string line, why;
		EXPECT_TRUE(c.read_line(&line, &why, timeout)) << why;
		return json::parse(line, nullptr, false);
	}
	// The server closed the connection (an orderly close, or a reset when our bytes were
	// still unread on its side), as opposed to a timeout.
	bool closed_by_server(Client &c)
	{
		std::string line, why;
		return !c.read_line(&line, &why, 3s) &&
		       why.find("no response") == std::string::npos;
	}
};

TEST_F(ServerFixture, SocketIsOwnerOnlyAndAnswersCalls)
{
	start();
	struct stat st {
	};
	ASSERT_EQ(::stat(path.c_str(), &st), 0);
	EXPECT_TRUE(S_ISSOCK(st.st_mode));
	EXPECT_EQ(st.st_mode & 0777, 0600u);
	Client c;
	std::string why;
	ASSERT_EQ(c.connect(path, &why), 0) << why;
	json r;
	ASSERT_TRUE(c.call("echo", {{"name", "hello"}}, &r, &why)) << why;
	EXPECT_EQ(r["result"]["name"], "hello");
	EXPECT_EQ(
	    r["result"]["caller"].get<std::string>().rfind("uid " + std::to_string(::geteuid()), 0),
	    0u);
	// Several requests in one write, and blank lines between them, each answered in order.
	ASSERT_EQ(c.send_raw(R"({"jsonrpc":"2.0","id":1,"method":"echo","params":{"name":"a"}})"
	                     "\n\n\r\n"
	                     R"({"jsonrpc":"2.0","id":2,"method":"fail"})"
	                     "\r\n",
	                     &why),
	          0);
	EXPECT_EQ(response(c)["id"], 1);
	EXPECT_EQ(response(c)["id"], 2);
	srv->stop();
	EXPECT_NE(::access(path.c_str(), F_OK), 0) << "the socket file goes with the server";
}

TEST_F(ServerFixture, GarbageGetsAnErrorAndTheConnectionGoesOn)
{
	start();
	Client c;
	std::string why;
	ASSERT_EQ(c.connect(path, &why), 0);
	ASSERT_EQ(c.send_raw("this is not json\n", &why), 0);
	EXPECT_EQ(code(response(c)), kParseError);
	ASSERT_EQ(c.send_raw(std::string("\0\1\2\3{{{\n", 8), &why), 0);
	EXPECT_EQ(code(response(c)), kParseError);
	json r;
	ASSERT_TRUE(c.call("echo", {{"name", "still here"}}, &r, &why)) << why;
	EXPECT_EQ(r["result"]["name"], "still here");
	EXPECT_EQ(t.calls, 1);
}

TEST_F(ServerFixture, OversizedRequestIsRefusedAndClosed)
{
	ServerConfig cfg;
	cfg.max_request = 4096;
	start(cfg);
	Client c;
	std::string why;
	ASSERT_EQ(c.connect(path, &why), 0);
	// No newline ever comes: the server does not buffer without bound.
	std::string big(64 * 1024, 'x');
	c.send_raw(big, &why); // may fail part-way once the server closes
	json r = response(c);
	EXPECT_EQ(code(r), kParseError) << r.dump();
	EXPECT_TRUE(closed_by_server(c));
	EXPECT_EQ(srv->stats().oversized, 1u);
	EXPECT_EQ(t.calls, 0);
}

TEST_F(ServerFixture, SilentClientTimesOut)
{
	start();
	Client silent, half;
	std::string why;
	ASSERT_EQ(silent.connect(path, &why), 0);
	ASSERT_EQ(half.connect(path, &why), 0);
	ASSERT_EQ(half.send_raw(R"({"jsonrpc":"2.0","id":1,"meth)", &why), 0);
	const auto t0 = std::chrono::steady_clock::now();
	for (Client *c : {&silent, &half}) {
		json r = response(*c);
		EXPECT_EQ(code(r), kInvalidRequest) << r.dump();
		EXPECT_TRUE(closed_by_server(*c));
	}
	EXPECT_LT(std::chrono::steady_clock::now() - t0, 3s);
	EXPECT_EQ(srv->stats().timeouts, 2u);
	// Others are served meanwhile and after.
	Client c;
	ASSERT_EQ(c.connect(path, &why), 0);
	json r;
	ASSERT_TRUE(c.call("echo", {{"name", "x"}}, &r, &why)) << why;
}

TEST_F(ServerFixture, TooManyClientsAreTurnedAway)
{
	ServerConfig cfg;
	cfg.max_clients = 2;
	cfg.idle_timeout = 5s;
	start(cfg);
	Client a, b, c;
	std::string why;
	json r;
	ASSERT_EQ(a.connect(path, &why), 0);
	ASSERT_TRUE(a.call("echo", {{"name", "a"}}, &r, &why)) << why;
	ASSERT_EQ(b.connect(path, &why), 0);
	ASSERT_TRUE(b.call("echo", {{"name", "b"}}, &r, &why)) << why;
	ASSERT_EQ(c.connect(path, &why), 0);
	EXPECT_EQ(code(response(c)), kServerBusy);
	a.close();
	// a's slot frees once the server has seen it go.
	bool served = false;
	for (int i = 0; i < 50 && !served; i++) {
		Client d;
		ASSERT_EQ(d.connect(path, &why), 0);
		served = d.call("echo", {{"name", "d"}}, &r, &why) && r.contains("result");
		if (!served)
			std::this_thread::sleep_for(20ms);
	}
	EXPECT_TRUE(served);
}

TEST_F(ServerFixture, StaleSocketIsReplacedLiveOneIsNot)
{
	// A socket file nobody listens on (a daemon that died).
	int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
	sockaddr_un a{};
	a.sun_family = AF_UNIX;
	std::strcpy(a.sun_path, path.c_str());
	ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr *>(&a), sizeof(a)), 0);
	::close(fd);
	start();
	ServerConfig c2;
	c2.path = path;
	Server second(t.m, c2);
	std::string why;
	EXPECT_EQ(second.start(&why), -EADDRINUSE);
	EXPECT_NE(why.find("another daemon"), std::string::npos) << why;
	Client c;
	json r;
	ASSERT_EQ(c.connect(path, &why), 0);
	ASSERT_TRUE(c.call("echo", {{"name", "x"}}, &r, &why)) << why;
}

TEST_F(ServerFixture, PeerOfAnotherUidIsRefused)
{
	if (::geteuid() != 0)
		GTEST_SKIP() << "needs root to connect as another uid";
	ServerConfig cfg;
	cfg.mode = 0666; // the file lets anyone connect: SO_PEERCRED must refuse
	cfg.allowed_uid = 4242;
	start(cfg);
	::chmod(dir.c_str(), 0755);
	const std::string got = call_as_nobody({});
	json r = json::parse(got, nullptr, false);
	ASSERT_TRUE(r.is_object()) << got;
	EXPECT_EQ(code(r), kPermissionDenied) << got;
	EXPECT_EQ(t.calls, 0);
	EXPECT_EQ(srv->stats().denied, 1u);
	// The allowed uid's group gets in by gid too, and root always does.
	Client c;
	std::string why;
	json ok;
	ASSERT_EQ(c.connect(path, &why), 0);
	ASSERT_TRUE(c.call("echo", {{"name", "root"}}, &ok, &why));
	EXPECT_TRUE(ok.contains("result"));
}

// admin_group: a peer whose primary group is another but that has the allowed group as a
// supplementary one (how an admin is added to a group) gets in; one without it does not.
TEST_F(ServerFixture, PeerWithTheGroupAsSupplementaryIsAdmitted)
{
	if (::geteuid() != 0)
		GTEST_SKIP() << "needs root to connect as another uid and groups";
	ServerConfig cfg;
	cfg.allowed_uid = 4242;
	cfg.allowed_gid = 4343;
	start(cfg);
	::chmod(dir.c_str(), 0755);
	::chmod(path.c_str(), 0666);
	json in = json::parse(call_as_nobody({100, 4343}), nullptr, false);
	ASSERT_TRUE(in.is_object()) << in;
	EXPECT_TRUE(in.contains("result")) << in;
	json out = json::parse(call_as_nobody({100}), nullptr, false);
	ASSERT_TRUE(out.is_object()) << out;
	EXPECT_EQ(code(out), kPermissionDenied) << out;
	EXPECT_EQ(t.calls, 1);
	EXPECT_EQ(srv->stats().denied, 1u);
}

TEST_F(ServerFixture, TcpListenerOnLoopbackOnlyWhenConfigured)
{
	ServerConfig cfg;
	cfg.tcp = "0"; // a port only: 127.0.0.1, ephemeral
	start(cfg);
	ASSERT_NE(srv->tcp_port(), 0);
	Client c;
	std::string why;
	json r;
	ASSERT_EQ(c.connect("tcp:127.0.0.1:" + std::to_string(srv->tcp_port()), &why), 0) << why;
	ASSERT_TRUE(c.call("echo", {{"name", "tcp"}}, &r, &why)) << why;
	EXPECT_EQ(r["result"]["caller"].get<std::string>().rfind("tcp 127.0.0.1:", 0), 0u);
}

TEST_F(ServerFixture, ClientVanishingMidResponseDoesNotStopTheServer)
{
	// Room for every vanished client and the last one: a vanished client holds its slot
	// until the server reads its end, and with the default 16 the last connect could be
	// turned away busy (which is TooManyClientsAreTurnedAway's case, not this one's).
	ServerConfig cfg;
	cfg.max_clients = 32;
	start(cfg);
	for (int i = 0; i < 20; i++) {
		Client c;
		std::string why;
		ASSERT_EQ(c.connect(path, &why), 0);
		c.send_raw(R"({"jsonrpc":"2.0","id":1,"method":"rpc_get_methods"})"
		           "\n",
		           &why);
		c.close(); // gone before reading
	}
	Client c;
	std::string why;
	json r;
	ASSERT_EQ(c.connect(path, &why), 0);
	ASSERT_TRUE(c.call("echo", {{"name", "x"}}, &r, &why)) << why;
}

} // namespace
} // namespace ulp::admin
