// SPDX-License-Identifier: MIT
// tools/ulp-targetd/sd_notify.cc - see sd_notify.h.
#include "tools/ulp-targetd/sd_notify.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstddef>
#include <cstdlib>
#include <cstring>

namespace targetd
{

bool sd_notify(const std::string &state)
{
	const char *path = std::getenv("NOTIFY_SOCKET");
	if (!path || !*path)
		return false;
	const size_t len = std::strlen(path);
	sockaddr_un a{};
	a.sun_family = AF_UNIX;
	if ((path[0] != '/' && path[0] != '@') || len >= sizeof(a.sun_path))
		return false;
	std::memcpy(a.sun_path, path, len);
	if (path[0] == '@')
		a.sun_path[0] = '\0'; // abstract namespace
	const socklen_t alen = socklen_t(offsetof(sockaddr_un, sun_path) + len);
	const int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return false;
	const ssize_t n = ::sendto(fd, state.data(), state.size(), MSG_NOSIGNAL,
	                           reinterpret_cast<sockaddr *>(&a), alen);
	::close(fd);
	return n == ssize_t(state.size());
}

} // namespace targetd
