/* SPDX-License-Identifier: Apache-2.0 */
#include "vsock-uds.h"

#include <fcntl.h>
#include <poll.h>

#include "util.h"
#include "vmm-backend.h"

int vsock_uds_parse_ack(const char *line, size_t len, uint32_t *ret_port)
{
	if (len < 4 || len > 13 || memcmp(line, "OK ", 3) != 0)
		return -EPROTO;
	const char *d = line + 3;
	size_t n = len - 3;
	if (d[0] == '0' && n > 1)
		return -EPROTO;
	uint64_t v = 0;
	for (size_t i = 0; i < n; i++) {
		if (d[i] < '0' || d[i] > '9')
			return -EPROTO;
		v = v * 10 + (uint64_t)(d[i] - '0');
	}
	if (v > UINT32_MAX)
		return -EPROTO;
	*ret_port = (uint32_t)v;
	return 0;
}

/* The answer so far, printable, for a message. */
static void quote(const char *line, size_t len, char *out, size_t size)
{
	size_t o = 0;
	for (size_t i = 0; i < len && o + 1 < size; i++)
		out[o++] = (line[i] >= 0x20 && line[i] < 0x7f) ? line[i] : '?';
	out[o] = '\0';
}

int vsock_uds_handshake(int fd, uint32_t port, uint64_t deadline_ms, char *why, size_t why_size)
{
	char req[32];
	snprintf(req, sizeof(req), "CONNECT %u\n", port);
	uint64_t now = now_ms_monotonic();
	int r = now < deadline_ms ? write_full_timeout(fd, req, strlen(req), (int)(deadline_ms - now)) : -ETIMEDOUT;
	if (r < 0) {
		snprintf(why, why_size, "cannot send CONNECT %u: %s", port, strerror(-r));
		/* Closed at once: the same as closed before OK. */
		return r == -EPIPE || r == -ECONNRESET ? -ECONNREFUSED : r;
	}
	char line[VSOCK_UDS_ACK_MAX];
	size_t len = 0;
	for (;;) {
		now = now_ms_monotonic();
		if (now >= deadline_ms) {
			snprintf(why, why_size, "no answer to CONNECT %u in time", port);
			return -ETIMEDOUT;
		}
		struct pollfd p = {.fd = fd, .events = POLLIN};
		int pr = poll(&p, 1, (int)MIN(deadline_ms - now, (uint64_t)INT32_MAX));
		if (pr < 0 && errno != EINTR) {
			snprintf(why, why_size, "poll: %m");
			return -errno;
		}
		if (pr <= 0)
			continue;
		/* One byte at a time: the guest's first bytes may follow the
		 * answer in the same segment and must stay in the socket. */
		char c;
		ssize_t n = read(fd, &c, 1);
		if (n < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (n < 0) {
			int e = errno;
			snprintf(why, why_size, "read: %s", strerror(e));
			return e == ECONNRESET ? -ECONNREFUSED : -e;
		}
		if (n == 0) {
			snprintf(why, why_size,
			         "the connection was closed before OK: nothing listens on guest port %u (yet)", port);
			return -ECONNREFUSED;
		}
		if (c == '\n')
			break;
		if (len == sizeof(line)) {
			snprintf(why, why_size, "the answer to CONNECT %u is longer than %d bytes", port,
			         VSOCK_UDS_ACK_MAX);
			return -EPROTO;
		}
		line[len++] = c;
	}
	uint32_t host_port;
	if (vsock_uds_parse_ack(line, len, &host_port) < 0) {
		char q[VSOCK_UDS_ACK_MAX + 1];
		quote(line, len, q, sizeof(q));
		snprintf(why, why_size, "unexpected answer to CONNECT %u: \"%s\" (want \"OK <port>\")", port, q);
		return -EPROTO;
	}
	return 0;
}

int vsock_uds_connect(int dirfd, const char *name, uint32_t port, unsigned timeout_ms, int *ret_fd,
                      struct al_error *err)
{
	uint64_t deadline = now_ms_monotonic() + timeout_ms;
	cleanup_close int fd = -1;
	int r = unix_connect_at_nonblock(dirfd, name, &fd);
	if (r < 0)
		return al_error_set(err, AL_ERR_UNAVAILABLE, -r, "cannot connect to the vsock socket %s: %s", name,
		                    r == -EAGAIN ? "the VMM is not accepting connections" : strerror(-r));
	char why[160];
	if ((r = vsock_uds_handshake(fd, port, deadline, why, sizeof(why))) < 0)
		return al_error_set(err, r == -ETIMEDOUT ? AL_ERR_TIMEOUT : AL_ERR_UNAVAILABLE, -r, "vsock %s: %s",
		                    name, why);
	*ret_fd = TAKE_FD(fd);
	return 0;
}
