/* SPDX-License-Identifier: Apache-2.0 */
/* A sandbox's serial console: its log file (capped, one rotation), the
 * bounded tail kept in memory, and the reasons of failures read from it.
 * The monitor thread drains the console; the tail is under sb->lock. */
#include <fcntl.h>
#include <sys/stat.h>

#include "metrics.h"
#include "util.h"
#include "sandbox-internal.h"

static void console_append(struct sandbox *sb, const char *data, size_t n)
{
	/* SECURITY: guest bytes: the file is capped (one rotation), the tail is a bounded ring. */
	if (sb->console_log_fd >= 0) {
		if (sb->console_log_size + n > CONSOLE_LOG_MAX) {
			cleanup_free char *cur = xasprintf("%s/%s", sb->dir, VMM_CONSOLE_LOG);
			cleanup_free char *old = xasprintf("%s/%s.1", sb->dir, VMM_CONSOLE_LOG);
			/* What the rotation pushes out is counted, not kept. */
			struct stat st;
			if (stat(old, &st) == 0 && S_ISREG(st.st_mode))
				metrics_add_output_dropped("console", (uint64_t)st.st_size);
			metrics_count_console_rotation();
			rename(cur, old);
			close(sb->console_log_fd);
			sb->console_log_fd =
			    open(cur, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0640);
			sb->console_log_size = 0;
		}
		if (sb->console_log_fd >= 0 && write_full(sb->console_log_fd, data, n) == 0)
			sb->console_log_size += n;
	}
	if (n >= CONSOLE_TAIL_MAX) {
		memcpy(sb->console_tail, data + n - CONSOLE_TAIL_MAX, CONSOLE_TAIL_MAX);
		sb->tail_len = CONSOLE_TAIL_MAX;
		return;
	}
	if (sb->tail_len + n > CONSOLE_TAIL_MAX) {
		size_t drop = sb->tail_len + n - CONSOLE_TAIL_MAX;
		memmove(sb->console_tail, sb->console_tail + drop, sb->tail_len - drop);
		sb->tail_len -= drop;
	}
	memcpy(sb->console_tail + sb->tail_len, data, n);
	sb->tail_len += n;
}

/* The last `lines` lines of the console, printable ASCII only; with sb->lock held. */
static void console_tail_lines(struct sandbox *sb, unsigned lines, char *out, size_t size)
{
	size_t start = sb->tail_len;
	unsigned seen = 0;
	while (start > 0) {
		if (sb->console_tail[start - 1] == '\n' && start != sb->tail_len && ++seen >= lines)
			break;
		start--;
	}
	size_t o = 0;
	for (size_t i = start; i < sb->tail_len && o + 1 < size; i++) {
		char c = sb->console_tail[i];
		if (c == '\r')
			continue;
		out[o++] = (c == '\n' || (c >= 0x20 && c < 0x7f)) ? c : '?';
	}
	while (o > 0 && out[o - 1] == '\n')
		o--;
	out[o] = '\0';
}

void sb_console_drain(struct sandbox *sb)
{
	char buf[8192];
	for (;;) {
		ssize_t n = read(sb->console_fd, buf, sizeof(buf));
		if (n > 0) {
			pthread_mutex_lock(&sb->lock);
			console_append(sb, buf, (size_t)n);
			pthread_mutex_unlock(&sb->lock);
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n == 0 || (n < 0 && errno != EAGAIN)) {
			close(sb->console_fd);
			sb->console_fd = -1;
		}
		return;
	}
}

/* Lines of the console that explain a failure on their own. */
static bool console_line_telling(const char *line)
{
	static const char *const marks[] = {"airlock-agent:", "Kernel panic", "BUG:", "Oops:", "Out of memory"};
	for (size_t i = 0; i < ARRAY_SIZE(marks); i++)
		if (strstr(line, marks[i]))
			return true;
	return false;
}

/* The reason for a failure: what, then the telling console lines and the
 * last few lines; with sb->lock held. */
void sb_describe_exit(struct sandbox *sb, const char *what, char *out, size_t size)
{
	char tail[CONSOLE_TAIL_MAX];
	console_tail_lines(sb, 200, tail, sizeof(tail));
	char telling[1024] = "";
	size_t t = 0;
	for (char *line = tail; *line;) {
		char *nl = strchr(line, '\n');
		size_t len = nl ? (size_t)(nl - line) : strlen(line);
		char one[256];
		snprintf(one, sizeof(one), "%.*s", (int)MIN(len, sizeof(one) - 1), line);
		if (console_line_telling(one) && t + strlen(one) + 2 < sizeof(telling))
			t += (size_t)snprintf(telling + t, sizeof(telling) - t, "%s\n", one);
		line = nl ? nl + 1 : line + len;
	}
	char last[1024];
	console_tail_lines(sb, 6, last, sizeof(last));
	snprintf(out, size, "%s; guest console:\n%s%s%s", what, telling, telling[0] && last[0] ? "...\n" : "",
	         last[0] || telling[0] ? last : "(nothing)");
}
