/* SPDX-License-Identifier: Apache-2.0 */
/* One layer tar applied to the tree, in two passes over the tar: the first
 * checks every entry (path, type, limits) and carries out the whiteouts, the
 * second writes the entries. Whiteouts and opaque markers hide the content of
 * lower layers only, never an entry of their own layer, whatever the order
 * of the entries: doing them all before this layer writes anything gets that
 * right without remembering what the layer wrote.
 *
 * SECURITY: the tar is a tenant's. Assumed: nothing but this process writes
 * the tree while it runs. Checked: every path (oci-path.c: no "..", parents
 * resolved inside the tree, the last component never followed: it is
 * removed and made anew, a directory over a directory merges); hard link
 * targets resolve in the tree to an existing file that is neither a directory
 * nor a symlink; no device nodes or sockets; only user.* and
 * security.capability xattrs, bounded; entries and bytes counted across
 * layers against the limits before anything is written, so a decompression
 * bomb stops at --max-bytes, not at the end of the disk. */
#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/xattr.h>

#include "oci.h"
#include "util.h"

#define WHITEOUT ".wh."
#define OPAQUE ".wh..wh..opq"
#define NAME_SHOWN_MAX 200
#define DIR_TIMES_MAX_BYTES (16u << 20) /* paths kept for the directories' times */

volatile sig_atomic_t oci_stop;

/* A directory's times, set again once the layer is written (its entries
 * changed its mtime meanwhile). */
struct dir_time {
	char *path;
	struct timespec ts[2];
};

struct layer_ctx {
	int root_fd;
	struct dir_time *dir_times;
	size_t n_dir_times;
	size_t dir_times_bytes;
	uint64_t entries_before; /* c->entries when the layer began */
	uint64_t entries_written;
	const struct oci_layer_io *io;
	const struct oci_limits *lim;
	struct oci_counts *c;
	uint64_t next_progress;
	struct al_error *err;
};

static void archive_freep(struct archive **a)
{
	if (*a)
		archive_read_free(*a);
}
#define cleanup_archive __attribute__((cleanup(archive_freep)))

/* An entry's name for a message: printable ASCII, cut short. */
static void name_shown(const char *raw, char out[NAME_SHOWN_MAX + 4])
{
	size_t i = 0;
	for (; raw && raw[i] && i < NAME_SHOWN_MAX; i++)
		out[i] = (raw[i] >= 0x20 && raw[i] < 0x7f) ? raw[i] : '?';
	out[i] = '\0';
	if (raw && raw[i])
		memcpy(out + i, "...", 4);
}

static struct archive *layer_open(const struct oci_layer_io *io, struct al_error *err)
{
	struct archive *a = archive_read_new();
	if (!a)
		abort();
	archive_read_support_filter_gzip(a);
	archive_read_support_filter_zstd(a);
	archive_read_support_format_tar(a);
	archive_read_support_format_empty(a);
	int r;
	if (io->fd >= 0) {
		if (lseek(io->fd, 0, SEEK_SET) < 0) {
			al_error_set(err, AL_ERR_INTERNAL, errno, "cannot seek in the layer: %s", strerror(errno));
			archive_read_free(a);
			return NULL;
		}
		r = archive_read_open_fd(a, io->fd, 64 * 1024);
	} else {
		r = archive_read_open_memory(a, io->data, io->size);
	}
	if (r != ARCHIVE_OK) {
		al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "not a tar (plain, gzip or zstd): %s",
		             archive_error_string(a) ? archive_error_string(a) : "unreadable");
		archive_read_free(a);
		return NULL;
	}
	return a;
}

/* ------------------------------------------------------------ pass 1 */

static bool xattr_wanted(const char *name)
{
	return !strncmp(name, "user.", 5) || !strcmp(name, "security.capability");
}

static int entry_check_type(struct archive_entry *e, struct al_error *err)
{
	if (archive_entry_hardlink(e))
		return 0;
	switch (archive_entry_filetype(e)) {
	case AE_IFREG:
	case AE_IFDIR:
	case AE_IFIFO:
		return 0;
	case AE_IFLNK: {
		const char *t = archive_entry_symlink(e);
		if (!t || !*t || strlen(t) > OCI_MAX_LINK)
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "symlink target empty or too long");
		return 0;
	}
	case AE_IFCHR:
	case AE_IFBLK:
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EPERM, "device nodes are not allowed in an image");
	default:
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "unsupported entry type (socket?)");
	}
}

static int entry_check_limits(struct layer_ctx *x, struct archive_entry *e)
{
	if (++x->c->entries > x->lim->max_entries)
		return al_error_set(x->err, AL_ERR_TOO_LARGE, EFBIG, "more than %llu entries (--max-entries)",
		                    (unsigned long long)x->lim->max_entries);
	if (archive_entry_filetype(e) == AE_IFREG && !archive_entry_hardlink(e)) {
		int64_t size = archive_entry_size(e);
		if (size < 0 || (uint64_t)size > x->lim->max_bytes - x->c->declared)
			return al_error_set(x->err, AL_ERR_TOO_LARGE, EFBIG,
			                    "layers hold more than %llu bytes (--max-bytes)",
			                    (unsigned long long)x->lim->max_bytes);
		x->c->declared += (uint64_t)size;
	}
	unsigned n = 0;
	const char *name;
	const void *value;
	size_t size;
	archive_entry_xattr_reset(e);
	while (archive_entry_xattr_next(e, &name, &value, &size) == ARCHIVE_OK) {
		if (++n > OCI_MAX_XATTRS || size > OCI_MAX_XATTR_VALUE || strlen(name) > 255)
			return al_error_set(x->err, AL_ERR_TOO_LARGE, EFBIG, "too many or too large xattrs");
	}
	const char *link = archive_entry_hardlink(e);
	if (link && strlen(link) > OCI_MAX_LINK)
		return al_error_set(x->err, AL_ERR_TOO_LARGE, ENAMETOOLONG, "hard link target too long");
	return 0;
}

/* Removes every child of dir (lower layers' content of an opaque dir). */
static void whiteout_opaque(int root_fd, const char *dir)
{
	struct al_error ignored = {0};
	cleanup_close int pfd = oci_path_open_dir(root_fd, dir, false, &ignored);
	if (pfd < 0)
		return;
	int fd = openat(pfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	if (!d) {
		if (fd >= 0)
			close(fd);
		return;
	}
	struct dirent *de;
	while ((de = readdir(d)))
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
			rm_rf_at(dirfd(d), de->d_name);
	closedir(d);
}

static int whiteout_apply(struct layer_ctx *x, const char *dir, const char *base)
{
	if (!strcmp(base, OPAQUE)) {
		whiteout_opaque(x->root_fd, dir);
		return 0;
	}
	const char *name = base + strlen(WHITEOUT);
	if (!*name || !strcmp(name, ".") || !strcmp(name, ".."))
		return al_error_set(x->err, AL_ERR_INVALID_ARGUMENT, EINVAL, "whiteout names nothing");
	struct al_error ignored = {0};
	cleanup_close int pfd = oci_path_open_dir(x->root_fd, dir, false, &ignored);
	if (pfd >= 0)
		rm_rf_at(pfd, name); /* never follows a symlink; missing is fine */
	return 0;
}

static int entry_check(struct layer_ctx *x, struct archive_entry *e)
{
	cleanup_free char *path = NULL;
	int r = oci_path_clean(archive_entry_pathname(e), &path, x->err);
	if (r < 0)
		return r;
	if ((r = entry_check_type(e, x->err)) < 0 || (r = entry_check_limits(x, e)) < 0)
		return r;
	const char *link = archive_entry_hardlink(e);
	cleanup_free char *target = NULL;
	if (link && (r = oci_path_clean(link, &target, x->err)) < 0) {
		al_error_prefix(x->err, "hard link target");
		return r;
	}
	const char *dir, *base;
	oci_path_split(path, &dir, &base);
	if (!strncmp(base, WHITEOUT, strlen(WHITEOUT)))
		return whiteout_apply(x, dir, base);
	return 0;
}

/* ------------------------------------------------------------ pass 2 */

/* Makes room for a new node at pfd/base: whatever is there goes (a directory
 * with its content), but a directory stays for a directory (merge). */
static int node_clear(int pfd, const char *base, bool want_dir, bool *ret_kept)
{
	struct stat st;
	*ret_kept = false;
	if (fstatat(pfd, base, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return errno == ENOENT ? 0 : -errno;
	if (S_ISDIR(st.st_mode)) {
		if (want_dir) {
			*ret_kept = true;
			return 0;
		}
		return rm_rf_at(pfd, base);
	}
	return unlinkat(pfd, base, 0) < 0 ? -errno : 0;
}

static int xattrs_apply(struct archive_entry *e, int fd, struct al_error *err)
{
	const char *name;
	const void *value;
	size_t size;
	archive_entry_xattr_reset(e);
	while (archive_entry_xattr_next(e, &name, &value, &size) == ARCHIVE_OK) {
		if (!xattr_wanted(name))
			continue;
		if (fsetxattr(fd, name, value, size, 0) < 0)
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, errno, "cannot set xattr %.64s: %s", name,
			                    strerror(errno));
	}
	return 0;
}

static int owner_get(struct archive_entry *e, uid_t *uid, gid_t *gid, struct al_error *err)
{
	int64_t u = archive_entry_uid(e), g = archive_entry_gid(e);
	if (u < 0 || g < 0 || u >= UINT32_MAX || g >= UINT32_MAX)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "uid or gid out of range");
	*uid = (uid_t)u;
	*gid = (gid_t)g;
	return 0;
}

static void times_get(struct archive_entry *e, struct timespec ts[2])
{
	ts[0].tv_sec = archive_entry_atime_is_set(e) ? archive_entry_atime(e) : archive_entry_mtime(e);
	ts[0].tv_nsec = archive_entry_atime_is_set(e) ? archive_entry_atime_nsec(e) : archive_entry_mtime_nsec(e);
	ts[1].tv_sec = archive_entry_mtime(e);
	ts[1].tv_nsec = archive_entry_mtime_nsec(e);
	for (int i = 0; i < 2; i++)
		if (ts[i].tv_nsec < 0 || ts[i].tv_nsec > 999999999)
			ts[i].tv_nsec = 0;
}

/* Owner, then mode (chown clears setuid), then xattrs (chown clears
 * security.capability), then times, on an open file or directory. */
static int meta_apply_fd(struct archive_entry *e, int fd, struct al_error *err)
{
	uid_t uid;
	gid_t gid;
	int r = owner_get(e, &uid, &gid, err);
	if (r < 0)
		return r;
	if (fchown(fd, uid, gid) < 0 || fchmod(fd, archive_entry_perm(e) & 07777) < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "cannot set owner or mode: %s", strerror(errno));
	if ((r = xattrs_apply(e, fd, err)) < 0)
		return r;
	struct timespec ts[2];
	times_get(e, ts);
	if (futimens(fd, ts) < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "cannot set times: %s", strerror(errno));
	return 0;
}

/* The same for a symlink or FIFO by name (never followed; no xattrs). */
static int meta_apply_at(struct archive_entry *e, int pfd, const char *base, bool is_link, struct al_error *err)
{
	uid_t uid;
	gid_t gid;
	int r = owner_get(e, &uid, &gid, err);
	if (r < 0)
		return r;
	if (fchownat(pfd, base, uid, gid, AT_SYMLINK_NOFOLLOW) < 0 ||
	    (!is_link && fchmodat(pfd, base, archive_entry_perm(e) & 07777, 0) < 0))
		return al_error_set(err, AL_ERR_INTERNAL, errno, "cannot set owner or mode: %s", strerror(errno));
	struct timespec ts[2];
	times_get(e, ts);
	if (utimensat(pfd, base, ts, AT_SYMLINK_NOFOLLOW) < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "cannot set times: %s", strerror(errno));
	return 0;
}

static int pwrite_full(int fd, const void *buf, size_t n, off_t off)
{
	const char *p = buf;
	while (n > 0) {
		ssize_t w = pwrite(fd, p, n, off);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return w < 0 ? -errno : -EIO;
		p += w;
		n -= (size_t)w;
		off += w;
	}
	return 0;
}

static void progress_maybe(struct layer_ctx *x)
{
	if (x->c->bytes < x->next_progress)
		return;
	x->next_progress = x->c->bytes - x->c->bytes % OCI_PROGRESS_STEP + OCI_PROGRESS_STEP;
	if (x->io->progress)
		x->io->progress(x->c, x->io->progress_ctx);
}

/* The file's data, block by block (holes of sparse entries stay holes),
 * counted against --max-bytes before each write. */
static int file_data(struct layer_ctx *x, struct archive *a, struct archive_entry *e, int fd)
{
	int64_t size = archive_entry_size(e);
	for (;;) {
		const void *buf;
		size_t n;
		la_int64_t off;
		int r = archive_read_data_block(a, &buf, &n, &off);
		if (r == ARCHIVE_EOF)
			break;
		if (oci_stop)
			return al_error_set(x->err, AL_ERR_UNAVAILABLE, EINTR, "stopped by a signal");
		if (r < ARCHIVE_WARN)
			return al_error_set(x->err, AL_ERR_INVALID_ARGUMENT, EIO, "reading its data: %s",
			                    archive_error_string(a) ? archive_error_string(a) : "corrupt");
		if (off < 0 || off > size || n > (uint64_t)(size - off))
			return al_error_set(x->err, AL_ERR_INVALID_ARGUMENT, EINVAL, "data beyond its size");
		if (n > x->lim->max_bytes - x->c->bytes)
			return al_error_set(x->err, AL_ERR_TOO_LARGE, EFBIG,
			                    "layers hold more than %llu bytes (--max-bytes)",
			                    (unsigned long long)x->lim->max_bytes);
		x->c->bytes += n;
		if ((r = pwrite_full(fd, buf, n, off)) < 0)
			return al_error_set(x->err, AL_ERR_INTERNAL, -r, "cannot write: %s", strerror(-r));
		progress_maybe(x);
	}
	if (ftruncate(fd, size) < 0)
		return al_error_set(x->err, AL_ERR_INTERNAL, errno, "cannot size: %s", strerror(errno));
	return 0;
}

static int file_apply(struct layer_ctx *x, struct archive *a, struct archive_entry *e, int pfd, const char *base)
{
	cleanup_close int fd = openat(pfd, base, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return al_error_set(x->err, AL_ERR_INTERNAL, errno, "cannot create: %s", strerror(errno));
	int r = file_data(x, a, e, fd);
	return r < 0 ? r : meta_apply_fd(e, fd, x->err);
}

static int dir_apply(struct layer_ctx *x, struct archive_entry *e, int pfd, const char *base, bool kept)
{
	if (!kept && mkdirat(pfd, base, 0700) < 0)
		return al_error_set(x->err, AL_ERR_INTERNAL, errno, "cannot make directory: %s", strerror(errno));
	cleanup_close int fd = openat(pfd, base, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return al_error_set(x->err, AL_ERR_INTERNAL, errno, "cannot open directory: %s", strerror(errno));
	return meta_apply_fd(e, fd, x->err);
}

/* A hard link's target: in the tree, existing, neither directory nor symlink. */
static int link_target(struct layer_ctx *x, char *target, int *ret_fd, const char **ret_base, struct stat *st)
{
	const char *dir, *base;
	oci_path_split(target, &dir, &base);
	struct al_error ignored = {0};
	int tfd = *base ? oci_path_open_dir(x->root_fd, dir, false, &ignored) : -ENOENT;
	if (tfd < 0 || fstatat(tfd, base, st, AT_SYMLINK_NOFOLLOW) < 0) {
		if (tfd >= 0)
			close(tfd);
		return al_error_set(x->err, AL_ERR_INVALID_ARGUMENT, ENOENT, "hard link target does not exist");
	}
	if (S_ISDIR(st->st_mode) || S_ISLNK(st->st_mode)) {
		close(tfd);
		return al_error_set(x->err, AL_ERR_INVALID_ARGUMENT, EPERM, "hard link target is a %s",
		                    S_ISDIR(st->st_mode) ? "directory" : "symbolic link");
	}
	*ret_fd = tfd;
	*ret_base = base;
	return 0;
}

static int link_apply(struct layer_ctx *x, struct archive_entry *e, int pfd, const char *base)
{
	cleanup_free char *target = NULL;
	int r = oci_path_clean(archive_entry_hardlink(e), &target, x->err);
	if (r < 0)
		return r;
	cleanup_close int tfd = -1;
	const char *tbase = NULL;
	struct stat tst, st;
	if ((r = link_target(x, target, &tfd, &tbase, &tst)) < 0)
		return r;
	if (fstatat(pfd, base, &st, AT_SYMLINK_NOFOLLOW) == 0 && st.st_ino == tst.st_ino && st.st_dev == tst.st_dev)
		return 0; /* a link to itself */
	bool kept;
	if ((r = node_clear(pfd, base, false, &kept)) < 0)
		return al_error_set(x->err, AL_ERR_INTERNAL, -r, "cannot replace: %s", strerror(-r));
	if (linkat(tfd, tbase, pfd, base, 0) < 0)
		return al_error_set(x->err, AL_ERR_INTERNAL, errno, "cannot link: %s", strerror(errno));
	return 0;
}

static int node_apply(struct layer_ctx *x, struct archive *a, struct archive_entry *e, int pfd, const char *base)
{
	if (archive_entry_hardlink(e))
		return link_apply(x, e, pfd, base);
	unsigned type = archive_entry_filetype(e);
	bool kept;
	int r = node_clear(pfd, base, type == AE_IFDIR, &kept);
	if (r < 0)
		return al_error_set(x->err, AL_ERR_INTERNAL, -r, "cannot replace: %s", strerror(-r));
	switch (type) {
	case AE_IFDIR:
		return dir_apply(x, e, pfd, base, kept);
	case AE_IFREG:
		return file_apply(x, a, e, pfd, base);
	case AE_IFLNK:
		if (symlinkat(archive_entry_symlink(e), pfd, base) < 0)
			return al_error_set(x->err, AL_ERR_INTERNAL, errno, "cannot make symlink: %s", strerror(errno));
		return meta_apply_at(e, pfd, base, true, x->err);
	case AE_IFIFO:
		if (mknodat(pfd, base, S_IFIFO | 0600, 0) < 0)
			return al_error_set(x->err, AL_ERR_INTERNAL, errno, "cannot make FIFO: %s", strerror(errno));
		return meta_apply_at(e, pfd, base, false, x->err);
	default: /* pass 1 refused it */
		return al_error_set(x->err, AL_ERR_INVALID_ARGUMENT, EINVAL, "unsupported entry type");
	}
}

static void dir_time_note(struct layer_ctx *x, const char *path, struct archive_entry *e)
{
	size_t n = strlen(path) + 1;
	if (x->dir_times_bytes + n + sizeof(struct dir_time) > DIR_TIMES_MAX_BYTES)
		return; /* beyond that, directories keep the time of their last change */
	x->dir_times = xrealloc(x->dir_times, (x->n_dir_times + 1) * sizeof(*x->dir_times));
	struct dir_time *d = &x->dir_times[x->n_dir_times++];
	d->path = xstrdup(path);
	times_get(e, d->ts);
	x->dir_times_bytes += n + sizeof(struct dir_time);
}

/* Deepest last in the tar is first here: a parent's time is set after its
 * children's. Errors are ignored: a time is no reason to fail. */
static void dir_times_apply(struct layer_ctx *x, bool apply)
{
	for (size_t i = x->n_dir_times; i-- > 0;) {
		struct dir_time *d = &x->dir_times[i];
		const char *dir, *base;
		oci_path_split(d->path, &dir, &base);
		struct al_error ignored = {0};
		int pfd = apply ? oci_path_open_dir(x->root_fd, dir, false, &ignored) : -1;
		if (pfd >= 0) {
			utimensat(pfd, base, d->ts, AT_SYMLINK_NOFOLLOW);
			close(pfd);
		}
		free(d->path);
	}
	free(x->dir_times);
	x->dir_times = NULL;
	x->n_dir_times = x->dir_times_bytes = 0;
}

static int entry_apply(struct layer_ctx *x, struct archive *a, struct archive_entry *e)
{
	/* Pass 1 counted; a layer file that changed since is still bounded. */
	if (x->entries_before + ++x->entries_written > x->lim->max_entries)
		return al_error_set(x->err, AL_ERR_TOO_LARGE, EFBIG, "more than %llu entries (--max-entries)",
		                    (unsigned long long)x->lim->max_entries);
	cleanup_free char *path = NULL;
	int r = oci_path_clean(archive_entry_pathname(e), &path, x->err);
	if (r < 0)
		return r;
	if (!*path) { /* the root itself: its owner, mode, times */
		if (archive_entry_filetype(e) != AE_IFDIR || archive_entry_hardlink(e))
			return al_error_set(x->err, AL_ERR_INVALID_ARGUMENT, EINVAL, "the root is not a directory");
		return meta_apply_fd(e, x->root_fd, x->err);
	}
	if (archive_entry_filetype(e) == AE_IFDIR && !archive_entry_hardlink(e))
		dir_time_note(x, path, e);
	const char *dir, *base;
	oci_path_split(path, &dir, &base);
	if (!strncmp(base, WHITEOUT, strlen(WHITEOUT)))
		return 0; /* done in pass 1 */
	cleanup_close int pfd = oci_path_open_dir(x->root_fd, dir, true, x->err);
	if (pfd < 0)
		return pfd;
	return node_apply(x, a, e, pfd, base);
}

/* ------------------------------------------------------------ both passes */

static int layer_pass(struct layer_ctx *x, bool write)
{
	cleanup_archive struct archive *a = layer_open(x->io, x->err);
	if (!a)
		return -EINVAL;
	for (;;) {
		struct archive_entry *e;
		int r = archive_read_next_header(a, &e);
		if (r == ARCHIVE_EOF)
			return 0;
		if (oci_stop)
			return al_error_set(x->err, AL_ERR_UNAVAILABLE, EINTR, "stopped by a signal");
		if (r < ARCHIVE_WARN)
			return al_error_set(x->err, AL_ERR_INVALID_ARGUMENT, EINVAL, "corrupt tar: %s",
			                    archive_error_string(a) ? archive_error_string(a) : "unreadable");
		r = write ? entry_apply(x, a, e) : entry_check(x, e);
		if (r < 0) {
			char shown[NAME_SHOWN_MAX + 4];
			name_shown(archive_entry_pathname(e), shown);
			al_error_prefix(x->err, "entry \"%s\"", shown);
			return r;
		}
	}
}

int oci_layer_apply(int root_fd, const struct oci_layer_io *io, const struct oci_limits *lim, struct oci_counts *c,
                    struct al_error *err)
{
	struct layer_ctx x = {
	    .root_fd = root_fd,
	    .entries_before = c->entries,
	    .io = io,
	    .lim = lim,
	    .c = c,
	    .next_progress = c->bytes + OCI_PROGRESS_STEP,
	    .err = err,
	};
	int r = layer_pass(&x, false);
	if (r >= 0)
		r = layer_pass(&x, true);
	dir_times_apply(&x, r >= 0);
	return r;
}
