/* SPDX-License-Identifier: Apache-2.0 */
/* GET/HEAD /ui and /ui/...: the web console's static files (docs/console.md)
 * from --ui-dir, on the TCP listener only and without a token: the page
 * asks for the token and sends it with every API call (api-server.c lets
 * these paths through before authentication; the unix socket answers 404).
 * Every answer carries the console's security headers (UI_HEADERS). */
#include <fcntl.h>
#include <sys/stat.h>

#include "api-handlers.h"
#include "api-ui-path.h"
#include "util.h"

/* The console's page loads only its own files, talks only to this daemon
 * (fetch, and the terminal's WebSocket), is framed by nobody.
 * style-src 'unsafe-inline': xterm.js sets its colours and cell sizes in
 * <style> elements it makes at run time; no script runs inline. */
#define UI_CSP                                                                                                         \
	"default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "              \
	"connect-src 'self' ws: wss:; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
#define UI_COMMON_HEADERS                                                                                              \
	"Content-Security-Policy", UI_CSP, "X-Content-Type-Options", "nosniff", "X-Frame-Options", "DENY",             \
	    "Referrer-Policy", "no-referrer", "Cache-Control", "no-cache"

static const char *const ui_headers[] = {UI_COMMON_HEADERS, NULL};
static const char *const ui_redirect_headers[] = {UI_COMMON_HEADERS, "Location", UI_PREFIX "/", NULL};

/* --ui-dir, canonical; NULL: no console here. Set once before the servers start. */
static char *ui_dir;

void api_ui_set_dir(const char *dir)
{
	free(ui_dir);
	ui_dir = dir ? xstrdup(dir) : NULL;
}

/* SECURITY: opens rel (checked by ui_path_parse: names without '/' inside,
 * none starting with '.') one name at a time below the ui dir, never
 * following a symlink (O_NOFOLLOW on every name: a link anywhere on the
 * way, the ui dir's own entries included, is ENOENT-like ELOOP/ENOTDIR),
 * and O_NONBLOCK so that a FIFO cannot hold the thread; then only a regular
 * file of at most UI_FILE_MAX bytes is served. */
static int ui_file_open(const char *rel, struct stat *ret_st)
{
	cleanup_close int dir = open(ui_dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (dir < 0)
		return -errno;
	char name[UI_SEGMENT_MAX + 1];
	for (const char *s = rel;;) {
		const char *e = strchrnul(s, '/');
		size_t n = (size_t)(e - s);
		if (n == 0 || n > UI_SEGMENT_MAX)
			return -EINVAL;
		memcpy(name, s, n);
		name[n] = '\0';
		if (*e == '\0') {
			cleanup_close int fd = openat(dir, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
			if (fd < 0)
				return -errno;
			if (fstat(fd, ret_st) < 0)
				return -errno;
			if (!S_ISREG(ret_st->st_mode))
				return -EISDIR;
			if (ret_st->st_size > (off_t)UI_FILE_MAX)
				return -EFBIG;
			return TAKE_FD(fd);
		}
		int next = openat(dir, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (next < 0)
			return -errno;
		close(dir);
		dir = next;
		s = e + 1;
	}
}

struct ui_reader {
	int fd;
	uint64_t left; /* the size fstat said: a file that grows is cut there */
};

static ssize_t ui_read(void *ctx, uint8_t *buf, size_t max)
{
	struct ui_reader *r = ctx;
	if (r->left == 0)
		return 0;
	ssize_t n;
	do
		n = read(r->fd, buf, (size_t)MIN((uint64_t)max, r->left));
	while (n < 0 && errno == EINTR);
	if (n <= 0)
		return -1; /* shrank meanwhile: cut the answer, its length is promised */
	r->left -= (uint64_t)n;
	return n;
}

static void ui_reader_free(void *ctx)
{
	struct ui_reader *r = ctx;
	close(r->fd);
	free(r);
}

static void ui_not_found(struct api_response *resp, const char *path, const char *why)
{
	api_response_errorf(resp, AL_ERR_NOT_FOUND, "no such file of the console: %.200s (%s)", path, why);
	resp->headers = ui_headers;
}

API_HANDLER(api_ui_get)
{
	enum ui_target target;
	char rel[UI_PATH_MAX + sizeof(UI_INDEX) + 1];
	const char *type = NULL;
	struct al_error err = {0};
	if (ui_path_parse(req->path, &target, rel, sizeof(rel), &type, &err) < 0)
		return ui_not_found(resp, req->path, err.message);
	if (target == UI_TARGET_REDIRECT) {
		resp->status = 308;
		resp->headers = ui_redirect_headers;
		return;
	}
	if (!ui_dir)
		return ui_not_found(resp, req->path,
		                    "the console is not installed: build it with 'make ui', or give airlockd --ui-dir");
	struct stat st;
	int fd = ui_file_open(rel, &st);
	if (fd < 0)
		return ui_not_found(resp, req->path, strerror(-fd));
	struct ui_reader *r = xcalloc(1, sizeof(*r));
	r->fd = fd;
	r->left = (uint64_t)st.st_size;
	resp->status = 200;
	resp->reader = ui_read;
	resp->reader_free = ui_reader_free;
	resp->reader_ctx = r;
	resp->content_type = type;
	resp->content_length = st.st_size;
	resp->headers = ui_headers;
}
