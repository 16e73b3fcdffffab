/* SPDX-License-Identifier: Apache-2.0 */
/* The build context of a template build (build-context.h).
 *
 * SECURITY: the tar is a client's. It is read once with libarchive (tar
 * formats only, gzip the only filter); every name is normalized and checked
 * (no `..` component, no NUL or overlong name or component), devices, fifos
 * and sockets are refused, counts and sizes are bounded (entries, names,
 * spooled bytes) as they are read. Contents go to an unlinked spool file,
 * never into memory. Link targets are kept as text for the guest; nothing
 * here is ever resolved on the host's filesystem. */
#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <openssl/evp.h>
#include <sys/stat.h>

#include "build-context.h"
#include "util.h"

#define CTX_NAME_MAX 255
#define CTX_IO_CHUNK (64 * 1024)

enum ctx_type { CTX_FILE, CTX_DIR, CTX_SYMLINK, CTX_HARDLINK };

struct ctx_entry {
	char *path; /* normalized: no leading /, no . or .. or empty component */
	enum ctx_type type;
	unsigned mode; /* permission bits */
	int64_t mtime;
	uint64_t offset, size; /* of a file's contents in the spool */
	char *link;            /* a symlink's target; a hard link's target path */
	size_t seq;            /* its place in the tar (a later one wins) */
};

struct build_context {
	int spool_fd;
	uint64_t spooled;
	size_t names;
	size_t n;
	struct ctx_entry *e; /* sorted by path_cmp: a directory's entries follow it */
};

static void entries_free(struct ctx_entry *e, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		free(e[i].path);
		free(e[i].link);
	}
	free(e);
}

void build_context_free(struct build_context *ctx)
{
	if (!ctx)
		return;
	if (ctx->spool_fd >= 0)
		close(ctx->spool_fd);
	entries_free(ctx->e, ctx->n);
	free(ctx);
}

/* Byte order with '/' before every other byte: a directory's descendants
 * come right after it, together (a depth-first order). */
static int path_cmp(const char *a, const char *b)
{
	for (;; a++, b++) {
		unsigned ca = *a == '/' ? 1u : *a ? (unsigned char)*a + 1u : 0u;
		unsigned cb = *b == '/' ? 1u : *b ? (unsigned char)*b + 1u : 0u;
		if (ca != cb)
			return ca < cb ? -1 : 1;
		if (!ca)
			return 0;
	}
}

/* Whether p is anc or under it ("" is the root: everything is). */
static bool path_under(const char *p, const char *anc)
{
	size_t n = strlen(anc);
	return n == 0 || (!strncmp(p, anc, n) && (p[n] == '\0' || p[n] == '/'));
}

/* Drops leading /, ./ and empty or . components; `..` is refused (-EPERM)
 * or, with clamp, goes up but never above the root. */
static int path_normalize(const char *in, bool clamp, char **ret)
{
	size_t len = strlen(in);
	if (len > BUILD_CONTEXT_MAX_PATH)
		return -ENAMETOOLONG;
	char *out = xmalloc(len + 1);
	size_t n = 0;
	const char *s = in;
	while (*s) {
		size_t c = strcspn(s, "/");
		if (c > CTX_NAME_MAX) {
			free(out);
			return -ENAMETOOLONG;
		}
		if (c == 2 && s[0] == '.' && s[1] == '.') {
			if (!clamp) {
				free(out);
				return -EPERM;
			}
			while (n > 0 && out[n - 1] != '/')
				n--;
			if (n > 0)
				n--;
		} else if (c > 0 && !(c == 1 && s[0] == '.')) {
			if (n > 0)
				out[n++] = '/';
			memcpy(out + n, s, c);
			n += c;
		}
		s += c;
		while (*s == '/')
			s++;
	}
	out[n] = '\0';
	*ret = out;
	return 0;
}

static const struct ctx_entry *ctx_find(const struct build_context *ctx, const char *path)
{
	size_t lo = 0, hi = ctx->n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int c = path_cmp(ctx->e[mid].path, path);
		if (c == 0)
			return &ctx->e[mid];
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

/* The first entry at or after path in the order. */
static size_t ctx_lower_bound(const struct build_context *ctx, const char *path)
{
	size_t lo = 0, hi = ctx->n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (path_cmp(ctx->e[mid].path, path) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* ---------------------------------------------------------------- reading the tar */

static int spool_open(int *ret)
{
	const char *dir = getenv("TMPDIR");
	if (!dir || !dir[0])
		dir = "/var/tmp";
	int fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	if (fd < 0) {
		char tmpl[BUILD_CONTEXT_MAX_PATH];
		if (snprintf_ok(tmpl, sizeof(tmpl), "%s/airlock-context-XXXXXX", dir) < 0)
			return -ENAMETOOLONG;
		fd = mkostemp(tmpl, O_CLOEXEC);
		if (fd < 0)
			return -errno;
		unlink(tmpl);
	}
	*ret = fd;
	return 0;
}

static int spool_data(struct build_context *ctx, struct archive *a, const char *path, struct ctx_entry *e,
                      struct al_error *err)
{
	cleanup_free char *buf = xmalloc(CTX_IO_CHUNK);
	e->offset = ctx->spooled;
	for (;;) {
		la_ssize_t n = archive_read_data(a, buf, CTX_IO_CHUNK);
		if (n == 0)
			break;
		if (n < 0)
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "build context: %.200s: %s", path,
			                    archive_error_string(a));
		if ((uint64_t)n > BUILD_CONTEXT_MAX_BYTES - ctx->spooled)
			return al_error_set(err, AL_ERR_TOO_LARGE, EFBIG,
			                    "build context: its files hold more than %llu bytes",
			                    (unsigned long long)BUILD_CONTEXT_MAX_BYTES);
		if (pwrite(ctx->spool_fd, buf, (size_t)n, (off_t)ctx->spooled) != n)
			return al_error_set(err, AL_ERR_INTERNAL, errno ? errno : EIO,
			                    "build context: writing its spool file: %m");
		ctx->spooled += (uint64_t)n;
	}
	e->size = ctx->spooled - e->offset;
	return 0;
}

static int entry_path(struct archive_entry *ae, const char *what, const char *name, char **ret, struct al_error *err)
{
	if (!name)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "build context: an entry's %s is not readable", what);
	int r = path_normalize(name, false, ret);
	if (r == -EPERM)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EPERM,
		                    "build context: %.200s: a path with .. is not allowed", name);
	if (r < 0)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, ENAMETOOLONG,
		                    "build context: %.200s...: the %s is longer than %d bytes (or a name than %d)",
		                    name, what, BUILD_CONTEXT_MAX_PATH, CTX_NAME_MAX);
	(void)ae;
	return 0;
}

static int entry_type(struct archive_entry *ae, const char *path, struct ctx_entry *e, struct al_error *err)
{
	if (archive_entry_hardlink(ae)) {
		e->type = CTX_HARDLINK;
		return entry_path(ae, "hard link target", archive_entry_hardlink(ae), &e->link, err);
	}
	switch (archive_entry_filetype(ae)) {
	case AE_IFREG:
		e->type = CTX_FILE;
		return 0;
	case AE_IFDIR:
		e->type = CTX_DIR;
		return 0;
	case AE_IFLNK: {
		const char *t = archive_entry_symlink(ae);
		if (!t || !t[0] || strlen(t) > BUILD_CONTEXT_MAX_PATH)
			return al_error_set(
			    err, AL_ERR_INVALID_ARGUMENT, EINVAL,
			    "build context: %.200s: a symbolic link without a target or one over %d bytes", path,
			    BUILD_CONTEXT_MAX_PATH);
		e->type = CTX_SYMLINK;
		e->link = xstrdup(t);
		return 0;
	}
	default:
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EPERM,
		                    "build context: %.200s is a device, fifo or socket: only files, directories and "
		                    "links may be in a build context",
		                    path);
	}
}

static int entry_read(struct build_context *ctx, struct archive *a, struct archive_entry *ae, struct ctx_entry **list,
                      size_t *n, struct al_error *err)
{
	cleanup_free char *path = NULL;
	int r = entry_path(ae, "name", archive_entry_pathname(ae), &path, err);
	if (r < 0)
		return r;
	struct ctx_entry e = {.mode = archive_entry_perm(ae) & 07777, .mtime = archive_entry_mtime(ae)};
	r = entry_type(ae, path, &e, err);
	if (r == 0 && e.type == CTX_FILE)
		r = spool_data(ctx, a, path, &e, err);
	if (r < 0 || !path[0]) { /* "./" itself: the root, nothing to keep */
		free(e.link);
		return r;
	}
	size_t names = strlen(path) + (e.link ? strlen(e.link) : 0);
	if (*n >= BUILD_CONTEXT_MAX_ENTRIES || names > BUILD_CONTEXT_MAX_NAMES - ctx->names) {
		free(e.link);
		return al_error_set(err, AL_ERR_TOO_LARGE, E2BIG,
		                    "build context: more than %d entries or %u bytes of names",
		                    BUILD_CONTEXT_MAX_ENTRIES, BUILD_CONTEXT_MAX_NAMES);
	}
	ctx->names += names;
	e.path = TAKE_PTR(path);
	e.seq = *n;
	*list = xrealloc(*list, (*n + 1) * sizeof(**list));
	(*list)[(*n)++] = e;
	return 0;
}

static int entry_order(const void *a, const void *b)
{
	const struct ctx_entry *x = a, *y = b;
	int c = path_cmp(x->path, y->path);
	if (c)
		return c;
	return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* Sorted, a later entry of a path replacing the earlier ones. */
static size_t entries_dedupe(struct ctx_entry *e, size_t n)
{
	if (n == 0)
		return 0;
	qsort(e, n, sizeof(*e), entry_order);
	size_t out = 0;
	for (size_t i = 0; i < n; i++) {
		if (out > 0 && !strcmp(e[out - 1].path, e[i].path)) {
			free(e[out - 1].path);
			free(e[out - 1].link);
			e[out - 1] = e[i];
		} else {
			e[out++] = e[i];
		}
	}
	return out;
}

struct entry_stack {
	size_t *at; /* indices into out of the directories the current entry is in */
	size_t depth, cap;
};

static void stack_push(struct entry_stack *st, size_t i)
{
	if (st->depth + 1 > st->cap)
		st->at = xrealloc(st->at, (st->cap = st->cap * 2 + 16) * sizeof(*st->at));
	st->at[st->depth++] = i;
}

static int out_push(struct ctx_entry **out, size_t *m, size_t *cap, struct ctx_entry e, struct al_error *err)
{
	if (*m >= BUILD_CONTEXT_MAX_ENTRIES) {
		free(e.path);
		free(e.link);
		return al_error_set(err, AL_ERR_TOO_LARGE, E2BIG,
		                    "build context: more than %d entries with the directories they imply",
		                    BUILD_CONTEXT_MAX_ENTRIES);
	}
	if (*m >= *cap)
		*out = xrealloc(*out, (*cap = *cap * 2 + 16) * sizeof(**out));
	(*out)[(*m)++] = e;
	return 0;
}

/* Adds the directories the sorted entries imply (a/b/c without a/ or a/b/),
 * in order, and refuses an entry under a non-directory. Takes in's entries. */
static int entries_add_parents(struct build_context *ctx, struct ctx_entry *in, size_t n, struct al_error *err)
{
	struct entry_stack st = {0};
	size_t cap = 0;
	int r = 0;
	for (size_t i = 0; i < n && r == 0; i++) {
		struct ctx_entry e = in[i];
		in[i] = (struct ctx_entry){0};
		while (st.depth > 0 && !path_under(e.path, ctx->e[st.at[st.depth - 1]].path))
			st.depth--;
		const struct ctx_entry *top = st.depth > 0 ? &ctx->e[st.at[st.depth - 1]] : NULL;
		if (top && top->type != CTX_DIR) {
			r = al_error_set(err, AL_ERR_INVALID_ARGUMENT, ENOTDIR,
			                 "build context: %.200s is under %.200s, which is not a directory", e.path,
			                 top->path);
			free(e.path);
			free(e.link);
			break;
		}
		size_t at = top ? strlen(top->path) + 1 : 0;
		for (const char *slash; r == 0 && (slash = strchr(e.path + at, '/'));) {
			struct ctx_entry dir = {.path = xstrndup(e.path, (size_t)(slash - e.path)),
			                        .type = CTX_DIR,
			                        .mode = 0755,
			                        .mtime = e.mtime};
			r = out_push(&ctx->e, &ctx->n, &cap, dir, err);
			if (r == 0)
				stack_push(&st, ctx->n - 1);
			at = (size_t)(slash - e.path) + 1;
		}
		if (r == 0)
			r = out_push(&ctx->e, &ctx->n, &cap, e, err);
		else {
			free(e.path);
			free(e.link);
		}
		if (r == 0)
			stack_push(&st, ctx->n - 1);
	}
	free(st.at);
	return r;
}

/* A hard link becomes a copy of its target's file (it is one inode in the
 * tar; the guest gets two files, as Docker's COPY gives). */
static int entries_resolve_links(struct build_context *ctx, struct al_error *err)
{
	for (size_t i = 0; i < ctx->n; i++) {
		struct ctx_entry *e = &ctx->e[i];
		if (e->type != CTX_HARDLINK)
			continue;
		const struct ctx_entry *t = e;
		for (int hops = 0; t && t->type == CTX_HARDLINK && hops < BUILD_CONTEXT_MAX_LINK_HOPS; hops++)
			t = ctx_find(ctx, t->link);
		if (!t || t->type != CTX_FILE)
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
			                    "build context: %.200s is a hard link to %.200s, which is not a file there",
			                    e->path, e->link);
		e->type = CTX_FILE;
		e->offset = t->offset;
		e->size = t->size;
		free(e->link);
		e->link = NULL;
	}
	return 0;
}

static int context_read(struct build_context *ctx, int tar_fd, struct ctx_entry **list, size_t *n, struct al_error *err)
{
	struct archive *a = archive_read_new();
	archive_read_support_filter_gzip(a);
	archive_read_support_format_tar(a);
	int r = 0;
	if (archive_read_open_fd(a, tar_fd, CTX_IO_CHUNK) != ARCHIVE_OK)
		r = al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "build context: not a tar (plain or gzip): %s",
		                 archive_error_string(a));
	while (r == 0) {
		struct archive_entry *ae;
		int ar = archive_read_next_header(a, &ae);
		if (ar == ARCHIVE_EOF)
			break;
		if (ar < ARCHIVE_WARN) {
			r = al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
			                 "build context: not a readable tar (plain or gzip): %s",
			                 archive_error_string(a));
			break;
		}
		r = entry_read(ctx, a, ae, list, n, err);
	}
	archive_read_free(a);
	return r;
}

int build_context_open(int tar_fd, struct build_context **ret, struct al_error *err)
{
	struct build_context *ctx = xcalloc(1, sizeof(*ctx));
	ctx->spool_fd = -1;
	int r = spool_open(&ctx->spool_fd);
	if (r < 0) {
		build_context_free(ctx);
		return al_error_set(err, AL_ERR_INTERNAL, -r, "build context: no spool file in $TMPDIR or /var/tmp: %s",
		                    strerror(-r));
	}
	struct ctx_entry *list = NULL;
	size_t n = 0;
	r = context_read(ctx, tar_fd, &list, &n, err);
	if (r == 0) {
		n = entries_dedupe(list, n);
		r = entries_add_parents(ctx, list, n, err);
	}
	entries_free(list, n);
	if (r == 0)
		r = entries_resolve_links(ctx, err);
	if (r < 0) {
		build_context_free(ctx);
		return r;
	}
	*ret = ctx;
	return 0;
}

static int spool_pread(struct build_context *ctx, void *buf, size_t n, uint64_t off, struct al_error *err)
{
	ssize_t got = pread(ctx->spool_fd, buf, n, (off_t)off);
	if (got != (ssize_t)n)
		return al_error_set(err, AL_ERR_INTERNAL, got < 0 ? errno : EIO,
		                    "build context: reading its spool file: %s",
		                    got < 0 ? strerror(errno) : "short read");
	return 0;
}

int build_context_read_file(struct build_context *ctx, const char *path, size_t max, char **ret_data, size_t *ret_len,
                            struct al_error *err)
{
	cleanup_free char *norm = NULL;
	if (path_normalize(path, false, &norm) < 0 || !norm[0])
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "build context: %.200s is not a path in it",
		                    path);
	const struct ctx_entry *e = ctx_find(ctx, norm);
	if (!e || e->type != CTX_FILE)
		return al_error_set(err, AL_ERR_NOT_FOUND, ENOENT, "build context: no file %.200s in it", path);
	if (e->size > max)
		return al_error_set(err, AL_ERR_TOO_LARGE, EFBIG, "build context: %.200s is larger than %zu bytes",
		                    path, max);
	char *data = xmalloc((size_t)e->size + 1);
	int r = spool_pread(ctx, data, (size_t)e->size, e->offset, err);
	if (r < 0) {
		free(data);
		return r;
	}
	data[e->size] = '\0';
	*ret_data = data;
	*ret_len = (size_t)e->size;
	return 0;
}

/* ---------------------------------------------------------------- COPY */

struct copy_item {
	char *path;                  /* in the guest, without the leading / */
	const struct ctx_entry *src; /* NULL: a directory made for the copy */
	size_t seq;
};

struct copy_plan {
	const struct build_copy *c;
	char *dest;  /* normalized, without the leading / ("" is the root) */
	bool to_dir; /* dest is a directory the sources go into */
	char **exclude;
	size_t n_exclude;
	const struct ctx_entry **match;
	size_t n_match;
	struct copy_item *it;
	size_t n, cap;
	size_t names; /* bytes of the paths of it[] */
};

static const struct ctx_entry ctx_root = {.path = (char *)"", .type = CTX_DIR, .mode = 0755};

static void plan_release(struct copy_plan *pl)
{
	free(pl->dest);
	for (size_t i = 0; i < pl->n_exclude; i++)
		free(pl->exclude[i]);
	free(pl->exclude);
	free(pl->match);
	for (size_t i = 0; i < pl->n; i++)
		free(pl->it[i].path);
	free(pl->it);
}

static bool plan_excluded(const struct copy_plan *pl, const char *path)
{
	for (size_t i = 0; i < pl->n_exclude; i++)
		if (pl->exclude[i][0] && path_under(path, pl->exclude[i]))
			return true;
	return false;
}

static int plan_add(struct copy_plan *pl, char *path, const struct ctx_entry *src, struct al_error *err)
{
	if (pl->n >= BUILD_CONTEXT_MAX_ENTRIES) {
		free(path);
		return al_error_set(err, AL_ERR_TOO_LARGE, E2BIG, "COPY: more than %d entries to write",
		                    BUILD_CONTEXT_MAX_ENTRIES);
	}
	if (strlen(path) > BUILD_CONTEXT_MAX_PATH) {
		free(path);
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, ENAMETOOLONG,
		                    "COPY: a destination path is longer than %d bytes", BUILD_CONTEXT_MAX_PATH);
	}
	pl->names += strlen(path);
	if (pl->names > 2 * BUILD_CONTEXT_MAX_NAMES) {
		free(path);
		return al_error_set(err, AL_ERR_TOO_LARGE, E2BIG, "COPY: more than %u bytes of paths to write",
		                    2 * BUILD_CONTEXT_MAX_NAMES);
	}
	if (pl->n >= pl->cap)
		pl->it = xrealloc(pl->it, (pl->cap = pl->cap * 2 + 16) * sizeof(*pl->it));
	pl->it[pl->n] = (struct copy_item){.path = path, .src = src, .seq = pl->n};
	pl->n++;
	return 0;
}

static char *path_join(const char *a, const char *b)
{
	if (!a[0])
		return xstrdup(b);
	if (!b[0])
		return xstrdup(a);
	return xasprintf("%s/%s", a, b);
}

/* The entry path names when its symbolic links are followed inside the
 * context, the context being the root (as Docker follows a COPY source's):
 * the last component's too with follow_last. NULL when it is not there,
 * goes through a non-directory or loops. */
static const struct ctx_entry *ctx_resolve(const struct build_context *ctx, const char *path, bool follow_last)
{
	cleanup_free char *todo = xstrdup(path), *cur = xstrdup("");
	const struct ctx_entry *e = &ctx_root;
	size_t pos = 0;
	for (int hops = 0; e;) {
		pos += strspn(todo + pos, "/");
		if (!todo[pos])
			break;
		const char *comp = todo + pos;
		size_t n = strcspn(comp, "/");
		bool last = !comp[n + strspn(comp + n, "/")];
		if (e->type != CTX_DIR)
			return NULL;
		pos += n;
		if (n == 1 && comp[0] == '.')
			continue;
		if (n == 2 && comp[0] == '.' && comp[1] == '.') {
			char *slash = strrchr(cur, '/');
			*(slash ? slash : cur) = '\0';
			e = cur[0] ? ctx_find(ctx, cur) : &ctx_root;
			continue;
		}
		char *next = cur[0] ? xasprintf("%s/%.*s", cur, (int)n, comp) : xstrndup(comp, n);
		const struct ctx_entry *x = ctx_find(ctx, next);
		if (x && x->type == CTX_SYMLINK && (!last || follow_last)) {
			free(next);
			if (++hops > BUILD_CONTEXT_MAX_SYMLINK_HOPS)
				return NULL;
			char *rest = xasprintf("%s/%s", x->link, todo + pos);
			if (x->link[0] == '/') {
				cur[0] = '\0';
				e = &ctx_root;
			}
			free(todo);
			todo = rest;
			pos = 0;
			continue;
		}
		free(cur);
		cur = next;
		e = x;
	}
	return e;
}

static void plan_match_add(struct copy_plan *pl, const struct ctx_entry *e)
{
	pl->match = xrealloc(pl->match, (pl->n_match + 1) * sizeof(*pl->match));
	pl->match[pl->n_match++] = e;
}

/* The context entries one source names (a path or a glob). */
static int plan_match_source(struct copy_plan *pl, struct build_context *ctx, const char *source, struct al_error *err)
{
	cleanup_free char *pat = NULL;
	int r = path_normalize(source, false, &pat);
	if (r == -EPERM)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EPERM,
		                    "COPY source %.200s is outside the build context", source);
	if (r < 0)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, ENAMETOOLONG, "COPY source %.200s...: too long",
		                    source);
	size_t before = pl->n_match;
	if (!pat[0]) {
		plan_match_add(pl, &ctx_root);
	} else if (strpbrk(pat, "*?[")) {
		for (size_t i = 0; i < ctx->n; i++)
			if (!plan_excluded(pl, ctx->e[i].path) && fnmatch(pat, ctx->e[i].path, FNM_PATHNAME) == 0)
				plan_match_add(pl, &ctx->e[i]);
	} else {
		const struct ctx_entry *e = ctx_resolve(ctx, pat, false);
		if (e && !plan_excluded(pl, e->path))
			plan_match_add(pl, e);
	}
	if (pl->n_match == before)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, ENOENT,
		                    "COPY source %.200s: no such file or directory in the build context", source);
	return 0;
}

/* A directory's contents into dest; a file or link into dest or dest/NAME. */
static int plan_expand_match(struct copy_plan *pl, struct build_context *ctx, const struct ctx_entry *m,
                             struct al_error *err)
{
	const char *base = strrchr(m->path, '/');
	base = base ? base + 1 : m->path;
	if (m->type == CTX_SYMLINK) {
		const struct ctx_entry *t = ctx_resolve(ctx, m->path, true);
		if (!t)
			return al_error_set(
			    err, AL_ERR_INVALID_ARGUMENT, ENOENT,
			    "COPY %.200s: a symbolic link to %.200s, which leads to nothing in the build context "
			    "(missing, outside it, or a loop)",
			    m->path, m->link);
		m = t;
	}
	if (m->type != CTX_DIR) {
		if (!pl->to_dir && !pl->dest[0])
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EISDIR, "COPY %.200s: the destination is /",
			                    m->path);
		return plan_add(pl, pl->to_dir ? path_join(pl->dest, base) : xstrdup(pl->dest), m, err);
	}
	/* The directory copied into is the copy's own (COPY --chown=u dir/ /app/
	 * gives /app to u, as Docker does); what is above it is not. */
	int r = pl->dest[0] ? plan_add(pl, xstrdup(pl->dest), NULL, err) : 0;
	size_t skip = m->path[0] ? strlen(m->path) + 1 : 0;
	for (size_t i = m->path[0] ? ctx_lower_bound(ctx, m->path) : 0; r == 0 && i < ctx->n; i++) {
		const struct ctx_entry *e = &ctx->e[i];
		if (!path_under(e->path, m->path))
			break;
		if (e == m || plan_excluded(pl, e->path))
			continue;
		r = plan_add(pl, path_join(pl->dest, e->path + skip), e, err);
	}
	return r;
}

static int item_order(const void *a, const void *b)
{
	const struct copy_item *x = a, *y = b;
	int c = path_cmp(x->path, y->path);
	if (c)
		return c;
	return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static bool item_is_dir(const struct copy_item *it)
{
	return !it->src || it->src->type == CTX_DIR;
}

/* Sorted, the last of a path winning, with the directories above every
 * item made (in order). */
static int plan_finish(struct copy_plan *pl, struct al_error *err)
{
	if (pl->n > 0)
		qsort(pl->it, pl->n, sizeof(*pl->it), item_order);
	size_t n = 0;
	for (size_t i = 0; i < pl->n; i++) {
		if (n > 0 && !strcmp(pl->it[n - 1].path, pl->it[i].path)) {
			free(pl->it[n - 1].path);
			pl->it[n - 1] = pl->it[i];
		} else {
			pl->it[n++] = pl->it[i];
		}
	}
	struct copy_item *in = TAKE_PTR(pl->it);
	pl->n = pl->cap = pl->names = 0;
	cleanup_free size_t *stack = xmalloc((BUILD_CONTEXT_MAX_PATH / 2 + 2) * sizeof(*stack));
	size_t depth = 0;
	int r = 0;
	for (size_t i = 0; i < n && r == 0; i++) {
		char *p = TAKE_PTR(in[i].path);
		while (depth > 0 && !path_under(p, pl->it[stack[depth - 1]].path))
			depth--;
		if (depth > 0 && !item_is_dir(&pl->it[stack[depth - 1]]))
			r = al_error_set(err, AL_ERR_INVALID_ARGUMENT, ENOTDIR,
			                 "COPY: /%.200s would be under /%.200s, which is not a directory", p,
			                 pl->it[stack[depth - 1]].path);
		size_t at = depth > 0 ? strlen(pl->it[stack[depth - 1]].path) + 1 : 0;
		for (const char *slash; r == 0 && pl->c->parents && (slash = strchr(p + at, '/'));) {
			r = plan_add(pl, xstrndup(p, (size_t)(slash - p)), NULL, err);
			if (r == 0)
				stack[depth++] = pl->n - 1;
			at = (size_t)(slash - p) + 1;
		}
		if (r == 0)
			r = plan_add(pl, p, in[i].src, err);
		else
			free(p);
		if (r == 0)
			stack[depth++] = pl->n - 1;
	}
	for (size_t i = 0; i < n; i++)
		free(in[i].path);
	free(in);
	return r;
}

static int plan_make(struct copy_plan *pl, struct build_context *ctx, struct al_error *err)
{
	const struct build_copy *c = pl->c;
	if (!c->dest || !c->dest[0] || c->n_sources == 0)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "COPY needs a source and a destination");
	const char *wd = c->workdir && c->workdir[0] ? c->workdir : "/";
	cleanup_free char *abs = c->dest[0] == '/' ? xstrdup(c->dest) : xasprintf("%s/%s", wd, c->dest);
	if (path_normalize(abs, true, &pl->dest) < 0)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, ENAMETOOLONG,
		                    "COPY: the destination %.200s is too long", c->dest);
	size_t dl = strlen(c->dest);
	pl->to_dir = c->dest[dl - 1] == '/' || !strcmp(c->dest, ".") || (dl >= 2 && !strcmp(c->dest + dl - 2, "/.")) ||
	             !pl->dest[0];
	pl->exclude = xcalloc(c->n_exclude + 1, sizeof(*pl->exclude));
	for (size_t i = 0; i < c->n_exclude; i++)
		if (path_normalize(c->exclude[i], false, &pl->exclude[pl->n_exclude]) == 0)
			pl->n_exclude++;
	int r = 0;
	for (size_t i = 0; r == 0 && i < c->n_sources; i++)
		r = plan_match_source(pl, ctx, c->sources[i], err);
	if (r < 0)
		return r;
	if (pl->n_match > 1)
		pl->to_dir = true;
	for (size_t i = 0; r == 0 && i < pl->n_match; i++)
		r = plan_expand_match(pl, ctx, pl->match[i], err);
	return r == 0 ? plan_finish(pl, err) : r;
}

/* ---------------------------------------------------------------- the tar and its digest */

struct copy_writer {
	struct archive *a;
	EVP_MD_CTX *md;
	struct build_context *ctx;
	const struct build_copy *c;
	char *buf;
};

/* A field of the digest: "N" for none, else "S" and the text with its NUL. */
static void md_field(EVP_MD_CTX *md, const char *s)
{
	EVP_DigestUpdate(md, s ? "S" : "N", 1);
	if (s)
		EVP_DigestUpdate(md, s, strlen(s) + 1);
}

static void md_number(EVP_MD_CTX *md, uint64_t v)
{
	char num[32];
	snprintf(num, sizeof(num), "%llu", (unsigned long long)v);
	md_field(md, num);
}

static int writer_error(struct copy_writer *w, const char *path, struct al_error *err)
{
	return al_error_set(err, AL_ERR_INTERNAL, EIO, "COPY: writing /%.200s to the guest's tar: %s", path,
	                    archive_error_string(w->a));
}

static int item_contents(struct copy_writer *w, const struct ctx_entry *src, const char *path, struct al_error *err)
{
	uint64_t off = src->offset, left = src->size;
	while (left > 0) {
		size_t n = (size_t)MIN(left, (uint64_t)CTX_IO_CHUNK);
		int r = spool_pread(w->ctx, w->buf, n, off, err);
		if (r < 0)
			return r;
		EVP_DigestUpdate(w->md, w->buf, n);
		if (archive_write_data(w->a, w->buf, n) != (la_ssize_t)n)
			return writer_error(w, path, err);
		off += n;
		left -= n;
	}
	return 0;
}

static int item_write(struct copy_writer *w, const struct copy_item *it, struct al_error *err)
{
	const struct ctx_entry *src = it->src;
	enum ctx_type type = src ? src->type : CTX_DIR;
	unsigned mode = !src                    ? 0755
	                : type == CTX_SYMLINK   ? 0777
	                : w->c->chmod_mode >= 0 ? (unsigned)w->c->chmod_mode
	                                        : src->mode;
	uint64_t uid = w->c->uid < 0 ? 0 : (uint64_t)w->c->uid, gid = w->c->gid < 0 ? 0 : (uint64_t)w->c->gid;
	uint64_t size = type == CTX_FILE ? src->size : 0;
	struct archive_entry *ae = archive_entry_new();
	archive_entry_set_pathname(ae, it->path);
	archive_entry_set_filetype(ae, type == CTX_FILE ? AE_IFREG : type == CTX_DIR ? AE_IFDIR : AE_IFLNK);
	archive_entry_set_perm(ae, mode);
	archive_entry_set_uid(ae, (la_int64_t)uid);
	archive_entry_set_gid(ae, (la_int64_t)gid);
	if (w->c->user)
		archive_entry_set_uname(ae, w->c->user);
	if (w->c->group)
		archive_entry_set_gname(ae, w->c->group);
	archive_entry_set_mtime(ae, src ? src->mtime : 0, 0);
	archive_entry_set_size(ae, (la_int64_t)size);
	if (type == CTX_SYMLINK)
		archive_entry_set_symlink(ae, src->link);
	int ar = archive_write_header(w->a, ae);
	archive_entry_free(ae);
	if (ar != ARCHIVE_OK)
		return writer_error(w, it->path, err);
	md_number(w->md, (uint64_t)type);
	md_field(w->md, it->path);
	md_number(w->md, mode);
	md_number(w->md, uid);
	md_number(w->md, gid);
	md_field(w->md, w->c->user);
	md_field(w->md, w->c->group);
	md_field(w->md, type == CTX_SYMLINK ? src->link : NULL);
	md_number(w->md, size);
	return type == CTX_FILE ? item_contents(w, src, it->path, err) : 0;
}

static int plan_write(struct copy_plan *pl, struct build_context *ctx, int out_fd, uint8_t digest[32],
                      struct al_error *err)
{
	struct copy_writer w = {
	    .a = archive_write_new(),
	    .md = EVP_MD_CTX_new(),
	    .ctx = ctx,
	    .c = pl->c,
	    .buf = xmalloc(CTX_IO_CHUNK),
	};
	if (!w.a || !w.md)
		abort();
	int r = 0;
	EVP_DigestInit_ex(w.md, EVP_sha256(), NULL);
	archive_write_set_format_pax_restricted(w.a);
	if (archive_write_open_fd(w.a, out_fd) != ARCHIVE_OK)
		r = writer_error(&w, "", err);
	for (size_t i = 0; r == 0 && i < pl->n; i++)
		r = item_write(&w, &pl->it[i], err);
	if (r == 0 && archive_write_close(w.a) != ARCHIVE_OK)
		r = writer_error(&w, "", err);
	unsigned dlen = 0;
	if (r == 0)
		EVP_DigestFinal_ex(w.md, digest, &dlen);
	archive_write_free(w.a);
	EVP_MD_CTX_free(w.md);
	free(w.buf);
	return r;
}

int build_context_copy(struct build_context *ctx, const struct build_copy *copy, int out_fd, uint8_t ret_digest[32],
                       struct al_error *err)
{
	struct copy_plan pl = {.c = copy};
	uint8_t digest[32];
	int r = plan_make(&pl, ctx, err);
	if (r == 0)
		r = plan_write(&pl, ctx, out_fd, digest, err);
	plan_release(&pl);
	if (r < 0)
		return r;
	memcpy(ret_digest, digest, sizeof(digest));
	return 0;
}
