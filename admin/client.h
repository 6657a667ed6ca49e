// SPDX-License-Identifier: MIT
// admin/client.h - the other end of the admin socket (ulpctl, tests): connect, send one
// JSON-RPC request line, read its response line, bounded in time.
#pragma once

#include "admin/rpc.h"

#include <chrono>
#include <string>

namespace ulp::admin
{

class Client
{
public:
	Client() = default;
	~Client();
	Client(const Client &) = delete;
	Client &operator=(const Client &) = delete;

	// A Unix socket path, or "tcp:HOST:PORT". 0, or a negative errno with *why.
	int connect(const std::string &where, std::string *why);
	// Send method(params) and wait up to timeout for the answer. True with *response (the
	// whole response object: "result" or "error"); false with *why when no response came
	// (connection closed, timeout, not JSON).
	bool call(const std::string &method, const json &params, json *response, std::string *why,
	          std::chrono::milliseconds timeout = std::chrono::seconds(120));
	// Raw: send bytes as they are, and read one response line (tests of misuse).
	int send_raw(const std::string &bytes, std::string *why);
	bool read_line(std::string *line, std::string *why, std::chrono::milliseconds timeout);
	void close();

private:
	int fd_ = -1;
	uint64_t next_id_ = 1;
	std::string in_; // received past the last line
};

} // namespace ulp::admin
