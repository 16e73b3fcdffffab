/* SPDX-License-Identifier: Apache-2.0 */
/* Unix sockets in a VMM's directory (vmm-backend.h): reached through
 * /proc/self/fd/<dirfd>, so the directory's path may be longer than a
 * sockaddr_un can hold. */
#include <sys/socket.h>
#include <sys/un.h>

#include "util.h"
#include "vmm-backend.h"

static int connect_at(int dirfd, const char *name, int flags, int *ret_fd)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	if (snprintf_ok(sa.sun_path, sizeof(sa.sun_path), "/proc/self/fd/%d/%s", dirfd, name) < 0)
		return -ENAMETOOLONG;
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | flags, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		int r = -errno;
		close(fd);
		return r;
	}
	*ret_fd = fd;
	return 0;
}

int unix_connect_at(int dirfd, const char *name, int *ret_fd)
{
	return connect_at(dirfd, name, 0, ret_fd);
}

int unix_connect_at_nonblock(int dirfd, const char *name, int *ret_fd)
{
	/* A unix stream connect never completes later: it is there at once, or
	 * EAGAIN when the backlog is full. */
	return connect_at(dirfd, name, SOCK_NONBLOCK, ret_fd);
}
