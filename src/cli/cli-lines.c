/* SPDX-License-Identifier: Apache-2.0 */
/* The line splitter of streamed answers (cli-lines.h). */
#include "cli-lines.h"

#include "cli-http.h"
#include "util.h"

static void lines_append(struct cli_lines *l, const char *p, size_t n)
{
	if (l->len + n + 1 > l->cap) {
		l->cap = MAX(l->cap * 2, l->len + n + 1);
		l->buf = xrealloc(l->buf, l->cap);
	}
	memcpy(l->buf + l->len, p, n);
	l->len += n;
	l->buf[l->len] = '\0';
}

/* Hands the buffered line to fn and starts a new one. */
static int lines_emit(struct cli_lines *l, cli_line_fn fn, void *ud, struct al_error *err)
{
	size_t len = l->len;
	l->len = 0;
	if (len > 0 && l->buf[len - 1] == '\r')
		l->buf[--len] = '\0';
	return len > 0 ? fn(ud, l->buf, len, err) : 0;
}

int cli_lines_feed(struct cli_lines *l, const char *p, size_t n, cli_line_fn fn, void *ud, struct al_error *err)
{
	size_t max = l->max ? l->max : CLI_LINE_MAX;
	while (n > 0) {
		const char *nl = memchr(p, '\n', n);
		size_t take = nl ? (size_t)(nl - p) : n;
		/* SECURITY: the daemon (relaying a guest's output) chooses the
		 * lines: one that never ends must not grow without bound. */
		if (take > max - MIN(l->len, max))
			return al_error_set(err, AL_ERR_TOO_LARGE, EMSGSIZE,
			                    "the daemon sent a line longer than %zu bytes; the stream is broken", max);
		lines_append(l, p, take);
		if (!nl)
			return 0;
		p += take + 1;
		n -= take + 1;
		int r = lines_emit(l, fn, ud, err);
		if (r < 0)
			return r;
	}
	return 0;
}

int cli_lines_finish(struct cli_lines *l, cli_line_fn fn, void *ud, struct al_error *err)
{
	return lines_emit(l, fn, ud, err);
}

void cli_lines_release(struct cli_lines *l)
{
	free(l->buf);
	*l = (struct cli_lines){0};
}
