/* SPDX-License-Identifier: Apache-2.0 */
/* Build contexts and image directories as tar streams; their upload
 * (cli-context.h). */
#include "cli-context.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>

#include "cli-http.h"
#include "cli-tar.h"
#include "util.h"

/* A directory on the walk; its header is written the first time something
 * in it is (a directory left out by .dockerignore may still hold an
 * exception). */
struct walk_dir {
	const char *src;  /* its path on this machine */
	const char *name; /* its name in the archive (NULL: the root) */
	bool written;
	struct walk_dir *up;
};

static int dir_ensure_written(int fd, struct walk_dir *d, struct al_error *err)
{
	if (!d || d->written)
		return 0;
	int r = dir_ensure_written(fd, d->up, err);
	if (r < 0)
		return r;
	struct stat st;
	if (lstat(d->src, &st) < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "cannot read %s: %m", d->src);
	d->written = true;
	return cli_tar_write_entry(fd, d->src, d->name, &st, err);
}

static void note_skipped(struct cli_context *c, const char *name)
{
	if (c->skipped < CONTEXT_SKIPPED_NAMES)
		c->skipped_names[c->skipped] = xstrdup(name);
	c->skipped++;
}

/* Whether the walk must enter a directory left out: something under it may
 * be brought back by an exception, or it holds the Dockerfile. */
static bool dir_may_hold_kept(const struct cli_context *c, const char *name)
{
	size_t n = strlen(name);
	return cli_ignore_has_exceptions(c->ignore) || (c->keep && !strncmp(c->keep, name, n) && c->keep[n] == '/');
}

static int walk_dir(int fd, struct cli_context *c, struct walk_dir *d, struct al_error *err);

static int walk_child(int fd, struct cli_context *c, struct walk_dir *parent, const char *leaf, struct al_error *err)
{
	cleanup_free char *src = xasprintf("%s/%s", parent->src, leaf);
	cleanup_free char *name = parent->name ? xasprintf("%s/%s", parent->name, leaf) : xstrdup(leaf);
	if (c->extra_name && !strcmp(name, c->extra_name))
		return 0; /* the Dockerfile from outside takes this name */
	struct stat st;
	if (lstat(src, &st) < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "cannot read %s: %m", src);
	bool kept = c->keep && !strcmp(name, c->keep);
	bool out = c->ignore && !kept && cli_ignore_excludes(c->ignore, name);
	if (!cli_tar_type_ok(&st)) {
		if (!out)
			note_skipped(c, name);
		return 0;
	}
	if (!S_ISDIR(st.st_mode)) {
		int r = out ? 0 : dir_ensure_written(fd, parent, err);
		return out || r < 0 ? r : cli_tar_write_entry(fd, src, name, &st, err);
	}
	if (out && !dir_may_hold_kept(c, name))
		return 0;
	struct walk_dir d = {.src = src, .name = name, .up = parent};
	int r = out ? 0 : dir_ensure_written(fd, &d, err);
	return r < 0 ? r : walk_dir(fd, c, &d, err);
}

/* In name order, so that the same tree makes the same archive. */
static int walk_dir(int fd, struct cli_context *c, struct walk_dir *d, struct al_error *err)
{
	struct dirent **list = NULL;
	int n = scandir(d->src, &list, NULL, alphasort);
	if (n < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "cannot list %s: %m", d->src);
	int r = 0;
	for (int i = 0; i < n; i++) {
		const char *leaf = list[i]->d_name;
		if (r == 0 && strcmp(leaf, ".") && strcmp(leaf, ".."))
			r = walk_child(fd, c, d, leaf, err);
		free(list[i]);
	}
	free(list);
	return r;
}

int cli_context_write(int out_fd, struct cli_context *c, struct al_error *err)
{
	struct walk_dir root = {.src = c->dir, .written = true};
	int r = walk_dir(out_fd, c, &root, err);
	if (r == 0 && c->extra_src) {
		struct stat st;
		if (stat(c->extra_src, &st) < 0)
			return al_error_set(err, AL_ERR_INTERNAL, errno, "cannot read %s: %m", c->extra_src);
		r = cli_tar_write_entry(out_fd, c->extra_src, c->extra_name, &st, err);
	}
	return r < 0 ? r : cli_tar_write_end(out_fd, err);
}

void cli_context_release(struct cli_context *c)
{
	for (size_t i = 0; i < CONTEXT_SKIPPED_NAMES; i++)
		free(TAKE_PTR(c->skipped_names[i]));
}

/* ------------------------------------------------------------ upload */

static void *upload_writer(void *arg)
{
	struct cli_upload *u = arg;
	int r = cli_context_write(u->write_fd, u->ctx, &u->err);
	if (r < 0)
		__atomic_store_n(&u->failed, -r, __ATOMIC_SEQ_CST);
	close(u->write_fd);
	return NULL;
}

int cli_upload_start(struct cli_upload *u, struct cli_context *ctx, struct al_error *err)
{
	int fds[2];
	if (pipe2(fds, O_CLOEXEC) < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "cannot create a pipe: %m");
	signal(SIGPIPE, SIG_IGN); /* a refused upload stops the writer with EPIPE */
	u->ctx = ctx;
	u->fd = fds[0];
	u->write_fd = fds[1];
	if (pthread_create(&u->thread, NULL, upload_writer, u) != 0)
		abort();
	u->started = true;
	return 0;
}

size_t cli_upload_read(char *buf, size_t size, size_t nitems, void *ud)
{
	struct cli_upload *u = ud;
	ssize_t n;
	do
		n = read(u->fd, buf, size * nitems);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return CURL_READFUNC_ABORT;
	/* A context that failed half-way must not reach the daemon as a shorter archive. */
	if (n == 0 && u->started && __atomic_load_n(&u->failed, __ATOMIC_SEQ_CST))
		return CURL_READFUNC_ABORT;
	u->bytes += (uint64_t)n;
	if (u->on_progress)
		u->on_progress(u->ud, u->bytes, n == 0);
	return (size_t)n;
}

int cli_upload_finish(struct cli_upload *u, struct al_error *err)
{
	if (u->fd >= 0)
		close(TAKE_FD(u->fd));
	if (!u->started)
		return 0;
	pthread_join(u->thread, NULL);
	u->started = false;
	if (!u->failed)
		return 0;
	if (err)
		*err = u->err;
	return -u->failed;
}
