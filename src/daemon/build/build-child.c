/* SPDX-License-Identifier: Apache-2.0 */
/* Host tools of template builds (build-child.h). */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "util.h"
#include "build-child.h"

struct line_buf {
	char data[BUILD_CHILD_LINE_MAX];
	size_t len;
	bool overlong; /* the current line went past the buffer: its rest is skipped */
};

/* Feeds bytes; calls fn for each complete line (a too long one is cut). */
static void lines_feed(struct line_buf *b, const char *p, size_t n, void (*fn)(void *, const char *), void *ctx)
{
	for (size_t i = 0; i < n; i++) {
		if (p[i] == '\n') {
			b->data[b->len] = '\0';
			if (fn && !b->overlong)
				fn(ctx, b->data);
			b->len = 0;
			b->overlong = false;
		} else if (b->len + 1 < sizeof(b->data)) {
			b->data[b->len++] = p[i];
		} else {
			b->overlong = true;
		}
	}
}

static void keep_last(void *ctx, const char *line)
{
	if (line[0])
		strlcpy_al(ctx, line, BUILD_CHILD_LINE_MAX);
}

static pid_t child_spawn(char *const argv[], int out_w, int err_w)
{
	pid_t pid = fork();
	if (pid != 0)
		return pid;
	int null = open("/dev/null", O_RDONLY);
	if (null < 0 || dup2(null, 0) < 0 || dup2(out_w, 1) < 0 || dup2(err_w, 2) < 0)
		_exit(127);
	signal(SIGPIPE, SIG_DFL);
	execv(argv[0], argv);
	/* Only async-signal-safe calls between fork and exec. */
	static const char msg[] = "cannot run the tool (is it installed next to airlockd?)\n";
	(void)!write(2, msg, sizeof(msg) - 1);
	_exit(127);
}

/* Reads both pipes to their end; kills the child when cancelled. */
static bool child_drain(pid_t pid, int out_r, int err_r, const struct build_child_io *io, char *last_err)
{
	struct line_buf out = {0}, errb = {0};
	struct pollfd fds[2] = {{.fd = out_r, .events = POLLIN}, {.fd = err_r, .events = POLLIN}};
	bool killed = false;
	char buf[16384];
	while (fds[0].fd >= 0 || fds[1].fd >= 0) {
		if (!killed && io->cancelled && io->cancelled(io->ctx)) {
			kill(pid, SIGKILL);
			killed = true;
		}
		int r = poll(fds, 2, 500);
		if (r < 0 && errno != EINTR)
			break;
		for (int i = 0; i < 2 && r > 0; i++) {
			if (fds[i].fd < 0 || !fds[i].revents)
				continue;
			ssize_t n = read(fds[i].fd, buf, sizeof(buf));
			if (n <= 0) {
				fds[i].fd = -1;
				continue;
			}
			if (i == 0)
				lines_feed(&out, buf, (size_t)n, io->line, io->ctx);
			else
				lines_feed(&errb, buf, (size_t)n, keep_last, last_err);
		}
	}
	if (errb.len) /* a last line without its newline */
		lines_feed(&errb, "\n", 1, keep_last, last_err);
	return killed;
}

int build_child_run(char *const argv[], const struct build_child_io *io, const char *what, struct al_error *err)
{
	int out[2], errp[2];
	if (pipe2(out, O_CLOEXEC) < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "%s: pipe: %m", what);
	if (pipe2(errp, O_CLOEXEC) < 0) {
		int e = errno;
		close(out[0]);
		close(out[1]);
		return al_error_set(err, AL_ERR_INTERNAL, e, "%s: pipe: %s", what, strerror(e));
	}
	pid_t pid = child_spawn(argv, out[1], errp[1]);
	close(out[1]);
	close(errp[1]);
	char *last_err = xcalloc(1, BUILD_CHILD_LINE_MAX);
	bool killed = pid > 0 && child_drain(pid, out[0], errp[0], io, last_err);
	close(out[0]);
	close(errp[0]);
	int status = 0, r = 0;
	if (pid < 0)
		r = al_error_set(err, AL_ERR_INTERNAL, errno, "%s: fork: %m", what);
	else
		while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
			;
	if (r == 0 && killed)
		r = al_error_set(err, AL_ERR_UNAVAILABLE, ECANCELED,
		                 "%s: cancelled (its client went away, or airlockd is stopping)", what);
	else if (r == 0 && !(WIFEXITED(status) && WEXITSTATUS(status) == 0))
		r = al_error_set(
		    err, WIFEXITED(status) && WEXITSTATUS(status) == 1 ? AL_ERR_INVALID_ARGUMENT : AL_ERR_INTERNAL, EIO,
		    "%s: %s", what, last_err[0] ? last_err : "failed without a message");
	free(last_err);
	return r;
}
