/* SPDX-License-Identifier: Apache-2.0 */
/*
 * FILE_OP streams: filesystem operations the host asks for by name.
 *   stat    OK {"name","type","size","mode","uid","gid","mtime_ms","target"?}
 *           (lstat: a final symlink is described, not followed)
 *   list    FILE_DATA chunks {"entries":[stat objects]} within the output
 *           window, then OK {"count":N}; "." and ".." are not listed
 *   mkdir   {"parents":bool,"mode":N (default 0755)} OK {}
 *   remove  {"recursive":bool} OK {}; never follows a symlink, never
 *           removes "/", does not enter other filesystems (mount points)
 *   rename  {"to":Q} OK {}
 * Errors are ERROR frames with the errno name, like every stream.
 *
 * Names and symlink targets that are not UTF-8 (JSON strings must be) are
 * sent with each invalid byte replaced by U+FFFD.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent.h"
#include "json-cleanup.h"
#include "util.h"

#define LIST_PREFIX "{\"entries\":["
#define LIST_SUFFIX "]}"

json_t *agent_json_string_lossy(const char *s, size_t n)
{
	if (utf8_valid((const uint8_t *)s, n))
		return json_stringn(s, n);
	cleanup_free char *out = xmalloc(n * 3 + 1);
	size_t o = 0;
	for (size_t i = 0; i < n;) {
		uint8_t c = (uint8_t)s[i];
		size_t len = c < 0x80             ? 1
		             : (c & 0xe0) == 0xc0 ? 2
		             : (c & 0xf0) == 0xe0 ? 3
		             : (c & 0xf8) == 0xf0 ? 4
		                                  : 0;
		if (len && i + len <= n && utf8_valid((const uint8_t *)s + i, len)) {
			memcpy(out + o, s + i, len);
			o += len;
			i += len;
		} else {
			memcpy(out + o, "\xef\xbf\xbd", 3);
			o += 3;
			i++;
		}
	}
	return json_stringn(out, o);
}

static const char *type_name(mode_t m)
{
	return S_ISREG(m) ? "file" : S_ISDIR(m) ? "dir" : S_ISLNK(m) ? "symlink" : "other";
}

int agent_stat_json(int dir_fd, const char *name, const char *display, json_t **ret)
{
	struct stat st;
	if (fstatat(dir_fd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return -errno;
	json_t *o = json_object();
	json_object_set_new(o, "name", agent_json_string_lossy(display, strlen(display)));
	json_object_set_new(o, "type", json_string(type_name(st.st_mode)));
	json_object_set_new(o, "size", json_integer((json_int_t)st.st_size));
	json_object_set_new(o, "mode", json_integer(st.st_mode & 07777));
	json_object_set_new(o, "uid", json_integer(st.st_uid));
	json_object_set_new(o, "gid", json_integer(st.st_gid));
	json_object_set_new(o, "mtime_ms",
	                    json_integer((json_int_t)st.st_mtim.tv_sec * 1000 + st.st_mtim.tv_nsec / 1000000));
	if (S_ISLNK(st.st_mode)) {
		char target[PATH_MAX];
		ssize_t n = readlinkat(dir_fd, name, target, sizeof(target));
		if (n >= 0)
			json_object_set_new(o, "target", agent_json_string_lossy(target, (size_t)n));
	}
	*ret = o;
	return 0;
}

/* Splits an absolute path into its parent directory (opened) and last
 * component. Trailing slashes are ignored; "/" itself has no parent
 * (-EBUSY: the root is never removed or renamed this way). */
static int path_split_open(const char *path, int *ret_dir_fd, char *ret_name /* NAME_MAX + 1 */)
{
	size_t len = strlen(path);
	while (len > 1 && path[len - 1] == '/')
		len--;
	size_t start = len;
	while (start > 0 && path[start - 1] != '/')
		start--;
	if (start == len) /* only slashes */
		return -EBUSY;
	if (len - start > NAME_MAX)
		return -ENAMETOOLONG;
	memcpy(ret_name, path + start, len - start);
	ret_name[len - start] = '\0';
	if (!strcmp(ret_name, ".") || !strcmp(ret_name, ".."))
		return -EINVAL;
	char parent[PATH_MAX];
	memcpy(parent, path, start);
	parent[start] = '\0';
	int fd = open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	*ret_dir_fd = fd;
	return 0;
}

static int op_stat(struct agent *a, uint32_t id, const char *path, struct al_error *err)
{
	cleanup_close int dir_fd = -1;
	char name[NAME_MAX + 1];
	int r = path_split_open(path, &dir_fd, name);
	json_t *o = NULL;
	if (r == -EBUSY) /* "/" */
		r = agent_stat_json(AT_FDCWD, "/", "/", &o);
	else if (r == 0)
		r = agent_stat_json(dir_fd, name, name, &o);
	if (r < 0)
		return al_error_set(err, AL_ERR_INTERNAL, -r, "stat \"%s\": %s", path, strerror(-r));
	agent_channel_send_json(a, AIRLOCK_FRAME_OK, id, o);
	return 0;
}

static int op_list(struct agent *a, uint32_t id, const char *path, struct al_error *err)
{
	cleanup_close int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	if (!d)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "list \"%s\": %m", path);
	fd = -1; /* d has it now */
	struct stream *s = agent_stream_new(a, id, STREAM_FILE_LIST);
	s->path = xstrdup(path);
	s->dir = d;
	return 0;
}

/* The next entry as JSON text, or NULL at the end (*ret_err set on error). */
static char *list_next(struct stream *s, int *ret_err)
{
	*ret_err = 0;
	for (;;) {
		errno = 0;
		struct dirent *de = readdir(s->dir);
		if (!de) {
			*ret_err = errno;
			return NULL;
		}
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		cleanup_json json_t *o = NULL;
		int r = agent_stat_json(dirfd(s->dir), de->d_name, de->d_name, &o);
		if (r == -ENOENT)
			continue; /* removed since readdir */
		if (r < 0) {
			*ret_err = -r;
			return NULL;
		}
		char *text = json_dumps(o, JSON_COMPACT);
		if (!text)
			abort();
		return text;
	}
}

bool agent_fileop_list_ready(const struct agent *a, const struct stream *s)
{
	return agent_stream_output_room(a, s) >= MAX(s->list_need, (size_t)1);
}

bool agent_fileop_list_pump(struct agent *a, struct stream *s)
{
	static char chunk[AIRLOCK_FRAME_MAX_PAYLOAD];
	size_t room = agent_stream_output_room(a, s);
	size_t used = strlen(LIST_PREFIX), n_in_chunk = 0;
	memcpy(chunk, LIST_PREFIX, used);
	bool end = false;
	int err = 0;
	for (;;) {
		if (!s->pending) {
			s->pending = list_next(s, &err);
			if (!s->pending) {
				end = true;
				break;
			}
		}
		size_t len = strlen(s->pending), sep = n_in_chunk ? 1 : 0;
		if (used + sep + len + strlen(LIST_SUFFIX) > room) {
			/* An entry is far below a frame: this only waits for credit. */
			s->list_need = strlen(LIST_PREFIX) + len + strlen(LIST_SUFFIX);
			break;
		}
		if (sep)
			chunk[used++] = ',';
		memcpy(chunk + used, s->pending, len);
		used += len;
		free(s->pending);
		s->pending = NULL;
		n_in_chunk++;
		s->list_need = 0;
	}
	if (n_in_chunk) {
		memcpy(chunk + used, LIST_SUFFIX, strlen(LIST_SUFFIX));
		used += strlen(LIST_SUFFIX);
		agent_channel_send(a, AIRLOCK_FRAME_FILE_DATA, s->id, chunk, used);
		agent_stream_output_sent(s, used);
		s->count += n_in_chunk;
	}
	if (!end)
		return false;
	if (err)
		agent_channel_send_error(a, s->id, err, "list \"%s\": %s", s->path, strerror(err));
	else
		agent_channel_send_json(a, AIRLOCK_FRAME_OK, s->id, json_pack("{s:I}", "count", (json_int_t)s->count));
	agent_stream_free(a, s);
	return true;
}

/* mkdir -p: missing parents get 0755, the last one the requested mode
 * (exactly: chmod after mkdir, so the umask does not apply). Existing
 * directories (or symlinks to them) along the way are fine. */
static int mkdir_parents(const char *path, mode_t mode)
{
	char buf[PATH_MAX];
	strlcpy_al(buf, path, sizeof(buf));
	size_t len = strlen(buf);
	while (len > 1 && buf[len - 1] == '/')
		buf[--len] = '\0';
	for (char *p = buf + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		struct stat st;
		if (mkdir(buf, 0755) < 0 && errno != EEXIST)
			return -errno;
		if (stat(buf, &st) < 0)
			return -errno;
		if (!S_ISDIR(st.st_mode))
			return -ENOTDIR;
		*p = '/';
	}
	if (mkdir(buf, mode) < 0) {
		struct stat st;
		if (errno == EEXIST && stat(buf, &st) == 0 && S_ISDIR(st.st_mode))
			return 0;
		return -errno;
	}
	return chmod(buf, mode) < 0 ? -errno : 0;
}

static int op_mkdir(struct agent *a, uint32_t id, json_t *o, const char *path, struct al_error *err)
{
	json_t *jp = json_object_get(o, "parents"), *jm = json_object_get(o, "mode");
	if ((jp && !json_is_boolean(jp)) ||
	    (jm && (!json_is_integer(jm) || json_integer_value(jm) < 0 || json_integer_value(jm) > 07777)))
		return al_error_set(
		    err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		    "FILE_OP mkdir: \"parents\" must be a boolean and \"mode\" an integer in 0..4095 (07777)");
	mode_t mode = jm ? (mode_t)json_integer_value(jm) : 0755;
	int r;
	if (json_is_true(jp))
		r = mkdir_parents(path, mode);
	else
		r = mkdir(path, mode) < 0 || chmod(path, mode) < 0 ? -errno : 0;
	if (r < 0)
		return al_error_set(err, AL_ERR_INTERNAL, -r, "mkdir \"%s\": %s", path, strerror(-r));
	agent_channel_send_json(a, AIRLOCK_FRAME_OK, id, json_object());
	return 0;
}

struct rm_ctx {
	dev_t dev;            /* the filesystem of the start: mount points below are not entered */
	char where[PATH_MAX]; /* the path being worked on, for the message */
};

/* SECURITY: removes dir_fd/name without following any symlink: entries are
 * looked at with AT_SYMLINK_NOFOLLOW and directories opened with O_NOFOLLOW
 * relative to their parent's fd, so a symlink (even one swapped in during
 * the walk) is removed as a link, never walked through. */
static int rm_tree_at(int dir_fd, const char *name, struct rm_ctx *c, size_t where_len)
{
	size_t n = strlen(name);
	if (where_len + 1 + n < sizeof(c->where)) {
		c->where[where_len] = '/';
		memcpy(c->where + where_len + 1, name, n + 1);
		where_len += 1 + n;
	}
	struct stat st;
	if (fstatat(dir_fd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return -errno;
	if (!S_ISDIR(st.st_mode))
		return unlinkat(dir_fd, name, 0) < 0 ? -errno : 0;
	if (st.st_dev != c->dev)
		return -EBUSY; /* a mount point: not entered, not removed */
	cleanup_close int fd = openat(dir_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	if (!d)
		return -errno;
	fd = -1; /* d has it now */
	int r = 0;
	struct dirent *de;
	while (r == 0 && (errno = 0, de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		r = rm_tree_at(dirfd(d), de->d_name, c, where_len);
	}
	if (r == 0 && errno)
		r = -errno;
	closedir(d);
	if (r < 0)
		return r;
	c->where[where_len] = '\0';
	return unlinkat(dir_fd, name, AT_REMOVEDIR) < 0 ? -errno : 0;
}

static int op_remove(struct agent *a, uint32_t id, json_t *o, const char *path, struct al_error *err)
{
	json_t *jr = json_object_get(o, "recursive");
	if (jr && !json_is_boolean(jr))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "FILE_OP remove: \"recursive\" must be a boolean");
	cleanup_close int dir_fd = -1;
	char name[NAME_MAX + 1];
	int r = path_split_open(path, &dir_fd, name);
	struct stat st, root;
	if (r == -EBUSY)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EBUSY,
		                    "remove \"%s\": refusing to remove the root directory", path);
	if (r == 0 && fstatat(dir_fd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		r = -errno;
	if (r == 0 && S_ISDIR(st.st_mode) && stat("/", &root) == 0 && st.st_dev == root.st_dev &&
	    st.st_ino == root.st_ino)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EBUSY,
		                    "remove \"%s\": refusing to remove the root directory", path);
	struct rm_ctx c = {.dev = r == 0 ? st.st_dev : 0};
	if (r == 0 && json_is_true(jr) && S_ISDIR(st.st_mode)) {
		r = rm_tree_at(dir_fd, name, &c, 0);
		if (r < 0)
			return al_error_set(err, AL_ERR_INTERNAL, -r, "remove \"%s\": at \"%s\": %s", path, c.where + 1,
			                    strerror(-r));
	} else if (r == 0) {
		r = unlinkat(dir_fd, name, S_ISDIR(st.st_mode) ? AT_REMOVEDIR : 0) < 0 ? -errno : 0;
	}
	if (r < 0)
		return al_error_set(err, AL_ERR_INTERNAL, -r, "remove \"%s\": %s", path, strerror(-r));
	agent_channel_send_json(a, AIRLOCK_FRAME_OK, id, json_object());
	return 0;
}

static int op_rename(struct agent *a, uint32_t id, json_t *o, const char *path, struct al_error *err)
{
	const char *to;
	int r = agent_json_get_path(o, "to", &to, err);
	if (r < 0) {
		al_error_prefix(err, "FILE_OP rename");
		return r;
	}
	if (rename(path, to) < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "rename \"%s\" to \"%s\": %m", path, to);
	agent_channel_send_json(a, AIRLOCK_FRAME_OK, id, json_object());
	return 0;
}

/* SECURITY: the request comes from the host: "op" is matched against the
 * known names, every path is absolute, shorter than PATH_MAX and NUL-free
 * (agent_json_get_path), every other field is type-checked before use. */
int agent_fileop_start(struct agent *a, uint32_t id, json_t *req, struct al_error *err)
{
	const char *op = agent_json_get_cstring(json_object_get(req, "op"));
	const char *path = NULL;
	int r = agent_json_get_path(req, "path", &path, err);
	if (!op)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "FILE_OP: \"op\" must be one of stat, list, mkdir, remove, rename");
	if (r < 0) {
		al_error_prefix(err, "FILE_OP %s", op);
		return r;
	}
	if (!strcmp(op, "stat"))
		return op_stat(a, id, path, err);
	if (!strcmp(op, "list"))
		return op_list(a, id, path, err);
	if (!strcmp(op, "mkdir"))
		return op_mkdir(a, id, req, path, err);
	if (!strcmp(op, "remove"))
		return op_remove(a, id, req, path, err);
	if (!strcmp(op, "rename"))
		return op_rename(a, id, req, path, err);
	return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
	                    "FILE_OP: unknown \"op\" (stat, list, mkdir, remove, rename)");
}
