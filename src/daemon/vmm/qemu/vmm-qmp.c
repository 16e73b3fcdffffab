/* SPDX-License-Identifier: Apache-2.0 */
/* A small QMP client (vmm-qmp.h): one connection per command (QMP allows
 * several clients one after the other), bounded lines, a deadline on
 * everything. */
#include "vmm-qmp.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>

#include "json-cleanup.h"
#include "util.h"
#include "vmm-backend.h"

#define QMP_LINE_MAX (64u * 1024u)
#define QMP_TIMEOUT_MS 10000

struct qmp_conn {
	int fd;
	char buf[QMP_LINE_MAX];
	size_t len;
	uint64_t deadline;
};

/* SECURITY: QEMU's answers are bounded to QMP_LINE_MAX per line; QEMU is
 * ours, but it runs next to a hostile guest, so nothing is trusted blindly. */
static int qmp_read_line(struct qmp_conn *q, json_t **ret)
{
	for (;;) {
		char *nl = memchr(q->buf, '\n', q->len);
		if (nl) {
			size_t n = (size_t)(nl - q->buf);
			json_t *j = json_loadb(q->buf, n, 0, NULL);
			memmove(q->buf, nl + 1, q->len - n - 1);
			q->len -= n + 1;
			if (!json_is_object(j)) {
				json_decref(j);
				return -EBADMSG;
			}
			*ret = j;
			return 0;
		}
		if (q->len == sizeof(q->buf))
			return -EMSGSIZE;
		uint64_t now = now_ms_monotonic();
		if (now >= q->deadline)
			return -ETIMEDOUT;
		struct pollfd p = {.fd = q->fd, .events = POLLIN};
		int r = poll(&p, 1, (int)(q->deadline - now));
		if (r < 0 && errno != EINTR)
			return -errno;
		if (r <= 0)
			continue;
		ssize_t n = read(q->fd, q->buf + q->len, sizeof(q->buf) - q->len);
		if (n < 0 && errno != EINTR && errno != EAGAIN)
			return -errno;
		if (n == 0)
			return -ECONNRESET;
		if (n > 0)
			q->len += (size_t)n;
	}
}

/* Writes the command's text with fd attached (SCM_RIGHTS on its first
 * byte), then the rest; within the deadline. */
static int qmp_send_fd(struct qmp_conn *q, const char *text, size_t n, int fd)
{
	char control[CMSG_SPACE(sizeof(int))];
	memset(control, 0, sizeof(control));
	struct iovec iov = {.iov_base = (void *)text, .iov_len = 1};
	struct msghdr mh = {
	    .msg_iov = &iov, .msg_iovlen = 1, .msg_control = control, .msg_controllen = sizeof(control)};
	struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(c), &fd, sizeof(int));
	for (;;) {
		uint64_t now = now_ms_monotonic();
		if (now >= q->deadline)
			return -ETIMEDOUT;
		struct pollfd p = {.fd = q->fd, .events = POLLOUT};
		int pr = poll(&p, 1, (int)(q->deadline - now));
		if (pr < 0 && errno != EINTR)
			return -errno;
		if (pr <= 0)
			continue;
		ssize_t w = sendmsg(q->fd, &mh, MSG_NOSIGNAL);
		if (w == 1)
			break;
		if (w < 0 && errno != EINTR && errno != EAGAIN)
			return -errno;
	}
	uint64_t now = now_ms_monotonic();
	if (now >= q->deadline)
		return -ETIMEDOUT;
	return write_full_timeout(q->fd, text + 1, n - 1, (int)(q->deadline - now));
}

/* Sends one command (with fd attached unless it is -1) and returns its
 * "return" value (or -EIO with QEMU's error text). */
static int qmp_exchange_fd(struct qmp_conn *q, json_t *cmd, int fd, json_t **ret, struct al_error *err)
{
	cleanup_free char *text = json_dumps(cmd, JSON_COMPACT);
	if (!text)
		abort();
	size_t n = strlen(text);
	text = xrealloc(text, n + 2);
	text[n] = '\n';
	uint64_t now = now_ms_monotonic();
	if (now >= q->deadline)
		return -ETIMEDOUT;
	int r = fd >= 0 ? qmp_send_fd(q, text, n + 1, fd)
	                : write_full_timeout(q->fd, text, n + 1, (int)(q->deadline - now));
	if (r < 0)
		return r;
	for (;;) {
		json_t *j = NULL;
		if ((r = qmp_read_line(q, &j)) < 0)
			return r;
		if (json_object_get(j, "event")) {
			json_decref(j);
			continue;
		}
		json_t *e = json_object_get(j, "error");
		if (e) {
			al_error_set(err, AL_ERR_INTERNAL, EIO, "%s",
			             json_string_value(json_object_get(e, "desc")) ?: "QMP error");
			json_decref(j);
			return -EIO;
		}
		if (ret)
			*ret = json_incref(json_object_get(j, "return"));
		json_decref(j);
		return 0;
	}
}

static int qmp_exchange(struct qmp_conn *q, json_t *cmd, json_t **ret, struct al_error *err)
{
	return qmp_exchange_fd(q, cmd, -1, ret, err);
}

/* One connection: greeting, capabilities, then (when fd >= 0) getfd
 * `fdname` with fd attached, then the command. err is written on failure
 * only. */
static int qmp_run_fd(int dirfd, int fd, const char *fdname, const char *command, json_t *arguments, json_t **ret,
                      unsigned timeout_ms, bool nonblock_connect, struct al_error *err)
{
	struct qmp_conn q = {.fd = -1, .deadline = now_ms_monotonic() + timeout_ms};
	int r = nonblock_connect ? unix_connect_at_nonblock(dirfd, QEMU_QMP_SOCK, &q.fd)
	                         : unix_connect_at(dirfd, QEMU_QMP_SOCK, &q.fd);
	if (r < 0)
		return al_error_set(err, AL_ERR_INTERNAL, -r, "cannot connect to QEMU's QMP socket: %s",
		                    r == -EAGAIN ? "QEMU is not accepting connections" : strerror(-r));
	fcntl(q.fd, F_SETFL, fcntl(q.fd, F_GETFL) | O_NONBLOCK);
	/* QEMU's own error text, when it answered with one (-EIO). */
	struct al_error qemu_said = {0};
	json_t *greeting = NULL;
	if ((r = qmp_read_line(&q, &greeting)) == 0) {
		json_decref(greeting);
		cleanup_json json_t *caps = json_pack("{s:s}", "execute", "qmp_capabilities");
		r = qmp_exchange(&q, caps, NULL, &qemu_said);
	}
	if (r == 0 && fd >= 0) {
		cleanup_json json_t *getfd =
		    json_pack("{s:s, s:{s:s}}", "execute", "getfd", "arguments", "fdname", fdname);
		r = qmp_exchange_fd(&q, getfd, fd, NULL, &qemu_said);
	}
	if (r == 0) {
		cleanup_json json_t *cmd = json_pack("{s:s}", "execute", command);
		if (arguments)
			json_object_set(cmd, "arguments", arguments);
		r = qmp_exchange(&q, cmd, ret, &qemu_said);
	}
	close(q.fd);
	if (r == -EIO && qemu_said.message[0] && err)
		*err = qemu_said;
	else if (r == -EIO)
		al_error_set(err, AL_ERR_INTERNAL, EIO, "QMP failed");
	else if (r < 0)
		al_error_set(err, AL_ERR_INTERNAL, -r, "QMP %s: %s", command, strerror(-r));
	return r;
}

static int qmp_run(int dirfd, const char *command, json_t *arguments, json_t **ret, unsigned timeout_ms,
                   bool nonblock_connect, struct al_error *err)
{
	return qmp_run_fd(dirfd, -1, NULL, command, arguments, ret, timeout_ms, nonblock_connect, err);
}

int qmp_command_with_fd(int dirfd, int fd, const char *fdname, const char *command, json_t *arguments,
                        struct al_error *err)
{
	return qmp_run_fd(dirfd, fd, fdname, command, arguments, NULL, QMP_TIMEOUT_MS, false, err);
}

int qmp_command(int dirfd, const char *command, json_t *arguments, json_t **ret, struct al_error *err)
{
	return qmp_run(dirfd, command, arguments, ret, QMP_TIMEOUT_MS, false, err);
}

int qmp_command_timeout(int dirfd, const char *command, json_t *arguments, json_t **ret, unsigned timeout_ms,
                        struct al_error *err)
{
	return qmp_run(dirfd, command, arguments, ret, timeout_ms, true, err);
}
