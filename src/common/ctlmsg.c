/* SPDX-License-Identifier: Apache-2.0 */
#include "ctlmsg.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "json-cleanup.h"
#include "util.h"

static int send_text(int sock, char *text, size_t len, const int *fds, size_t nfds)
{
	struct iovec iov = {.iov_base = text, .iov_len = len};
	union {
		char buf[CMSG_SPACE(sizeof(int) * CTLMSG_FDS_MAX)];
		struct cmsghdr align;
	} control;
	memset(&control, 0, sizeof(control));
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
	if (nfds > 0) {
		mh.msg_control = control.buf;
		mh.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
		struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
		memcpy(CMSG_DATA(c), fds, sizeof(int) * nfds);
	}
	for (;;) {
		ssize_t n = sendmsg(sock, &mh, MSG_NOSIGNAL);
		if (n >= 0)
			return (size_t)n == len ? 0 : -EIO;
		if (errno != EINTR)
			return -errno;
	}
}

/* A message may hold a secret value or the CA key: json_dumpb() encodes it
 * straight into one buffer (json_dumps() leaves copies in the buffers it
 * grows), which is wiped once sent. */
int ctlmsg_send(int sock, json_t *msg, const int *fds, size_t nfds)
{
	if (nfds > CTLMSG_FDS_MAX)
		return -EINVAL;
	size_t len = json_dumpb(msg, NULL, 0, JSON_COMPACT);
	if (len == 0)
		return -ENOMEM;
	if (len > CTLMSG_MAX)
		return -EMSGSIZE;
	char *text = xmalloc(len);
	int r = json_dumpb(msg, text, len, JSON_COMPACT) == len ? send_text(sock, text, len, fds, nfds) : -EIO;
	explicit_bzero(text, len);
	free(text);
	return r;
}

static void close_all(int *fds, size_t n)
{
	for (size_t i = 0; i < n; i++)
		close(fds[i]);
}

/* Messages may carry secret values (bindings, the CA key): the buffers that
 * held their text are wiped before they are freed. */
static void wipe_freep(char **p)
{
	if (*p) {
		explicit_bzero(*p, CTLMSG_MAX + 1);
		free(*p);
	}
}

int ctlmsg_recv(int sock, json_t **ret_msg, int *fds, size_t fds_max, size_t *ret_nfds)
{
	__attribute__((cleanup(wipe_freep))) char *buf = xmalloc(CTLMSG_MAX + 1);
	struct iovec iov = {.iov_base = buf, .iov_len = CTLMSG_MAX + 1};
	union {
		char buf[CMSG_SPACE(sizeof(int) * CTLMSG_FDS_MAX)];
		struct cmsghdr align;
	} control;
	struct msghdr mh = {
	    .msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.buf, .msg_controllen = sizeof(control.buf)};
	ssize_t n;
	do
		n = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return -errno;

	int got[CTLMSG_FDS_MAX];
	size_t ngot = 0;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t i = 0; i < k; i++) {
			int fd;
			memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
			if (ngot < CTLMSG_FDS_MAX)
				got[ngot++] = fd;
			else
				close(fd);
		}
	}
	if (n == 0 && ngot == 0)
		return -EPIPE;
	if ((mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) || n == 0 || (size_t)n > CTLMSG_MAX) {
		close_all(got, ngot);
		return -EBADMSG;
	}
	if (ngot > 0 && (!fds || ngot > fds_max)) {
		close_all(got, ngot);
		return -EPROTO;
	}
	json_error_t jerr;
	json_t *msg = json_loadb(buf, (size_t)n, JSON_REJECT_DUPLICATES, &jerr);
	if (!msg || !json_is_object(msg)) {
		json_decref(msg);
		close_all(got, ngot);
		return -EBADMSG;
	}
	if (ngot > 0)
		memcpy(fds, got, sizeof(int) * ngot);
	*ret_nfds = ngot;
	*ret_msg = msg;
	return 0;
}
