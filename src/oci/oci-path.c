/* SPDX-License-Identifier: Apache-2.0 */
/* Paths of layer entries, and their directories resolved inside the tree.
 *
 * SECURITY: an entry's path and every link target come from a tenant's
 * archive. A path with a ".." component is refused outright; what is left is
 * resolved with openat2(RESOLVE_IN_ROOT), so a symlink an earlier entry made
 * (absolute, or climbing with "..") resolves as if the tree were / and can
 * never lead out of it. Only directories are resolved this way: the last
 * component of an entry is never followed (callers use *at calls with
 * AT_SYMLINK_NOFOLLOW / O_NOFOLLOW on it). */
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>

#include "oci.h"
#include "util.h"

static int openat2_in_root(int root_fd, const char *path, int flags)
{
	struct open_how how = {
	    .flags = (uint64_t)(flags | O_CLOEXEC),
	    .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV,
	};
	long fd;
	if (!*path)
		path = "."; /* openat2 has no AT_EMPTY_PATH */
	do {
		fd = syscall(SYS_openat2, root_fd, path, &how, sizeof(how));
	} while (fd < 0 && errno == EAGAIN);
	return fd < 0 ? -errno : (int)fd;
}

int oci_path_open_read(int root_fd, const char *path)
{
	return openat2_in_root(root_fd, path, O_RDONLY);
}

static bool path_component_ok(const char *c, size_t n)
{
	return !(n == 2 && c[0] == '.' && c[1] == '.');
}

/* Appends the components of raw to out (of size OCI_MAX_PATH + 1). */
static int path_components(const char *raw, char *out, struct al_error *err)
{
	size_t len = 0, depth = 0;
	const char *p = raw;
	while (*p) {
		const char *slash = strchr(p, '/');
		size_t n = slash ? (size_t)(slash - p) : strlen(p);
		if (!path_component_ok(p, n))
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "path has a \"..\" component");
		if (n > 0 && !(n == 1 && p[0] == '.')) {
			if (++depth > OCI_MAX_DEPTH)
				return al_error_set(err, AL_ERR_TOO_LARGE, ENAMETOOLONG, "path deeper than %d",
				                    OCI_MAX_DEPTH);
			if (n > 255 || len + n + 1 > OCI_MAX_PATH)
				return al_error_set(err, AL_ERR_TOO_LARGE, ENAMETOOLONG, "path too long");
			if (len)
				out[len++] = '/';
			memcpy(out + len, p, n);
			len += n;
			out[len] = '\0';
		}
		p += n;
		if (*p == '/')
			p++;
	}
	return 0;
}

int oci_path_clean(const char *raw, char **ret, struct al_error *err)
{
	if (!raw)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "entry has no path");
	if (strlen(raw) > OCI_MAX_PATH)
		return al_error_set(err, AL_ERR_TOO_LARGE, ENAMETOOLONG, "path longer than %d bytes", OCI_MAX_PATH);
	cleanup_free char *out = xmalloc(OCI_MAX_PATH + 1);
	out[0] = '\0';
	int r = path_components(raw, out, err);
	if (r < 0)
		return r;
	*ret = TAKE_PTR(out);
	return 0;
}

void oci_path_split(char *path, const char **ret_dir, const char **ret_base)
{
	char *slash = strrchr(path, '/');
	if (!slash) {
		*ret_dir = "";
		*ret_base = path;
		return;
	}
	*slash = '\0';
	*ret_dir = path;
	*ret_base = slash + 1;
}

static int path_depth_check(int root_fd, int fd, struct al_error *err);

/* Makes the directories of dir that are missing, one component at a time,
 * each parent resolved in the root again (never through mkdir -p's follow). */
static int path_make_dirs(int root_fd, const char *dir, struct al_error *err)
{
	char prefix[OCI_MAX_PATH + 1];
	size_t n = strlen(dir);
	for (size_t i = 1; i <= n; i++) {
		if (i < n && dir[i] != '/')
			continue;
		memcpy(prefix, dir, i);
		prefix[i] = '\0';
		int fd = openat2_in_root(root_fd, prefix, O_PATH | O_DIRECTORY);
		if (fd >= 0) {
			close(fd);
			continue;
		}
		if (fd != -ENOENT)
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, -fd, "%s is not a directory in the image",
			                    prefix);
		char *base = strrchr(prefix, '/');
		const char *name = base ? base + 1 : prefix;
		if (base)
			*base = '\0';
		cleanup_close int pfd = openat2_in_root(root_fd, base ? prefix : "", O_PATH | O_DIRECTORY);
		if (pfd >= 0 && (fd = path_depth_check(root_fd, pfd, err)) < 0)
			return fd;
		if (pfd < 0 || mkdirat(pfd, name, 0755) < 0)
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, pfd < 0 ? -pfd : errno,
			                    "cannot make directory %s: a symlink on the way leads nowhere in the image",
			                    dir);
	}
	return 0;
}

/* Where an fd is, as the kernel says it (/proc/self/fd); -ENAMETOOLONG for
 * a path longer than out holds. */
static int fd_path(int fd, char *out, size_t size)
{
	char link[64];
	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	ssize_t n = readlink(link, out, size);
	if (n < 0)
		return -errno;
	if ((size_t)n >= size)
		return -ENAMETOOLONG;
	out[n] = '\0';
	return 0;
}

/* SECURITY: each entry's path is at most OCI_MAX_DEPTH deep, but through a
 * symlink an entry goes on where another ended: the real depth of every
 * directory written into is checked too (a tree thousands of directories
 * deep runs rm -r out of fds and crashes mkfs.ext4 -d). */
static int path_depth_check(int root_fd, int fd, struct al_error *err)
{
	char root[OCI_MAX_PATH + 1], where[OCI_MAX_PATH + 1];
	int r = fd_path(root_fd, root, sizeof(root));
	if (r == 0)
		r = fd_path(fd, where, sizeof(where));
	size_t n = strlen(root), depth = 0;
	if (r == 0 && (strncmp(where, root, n) || (where[n] && where[n] != '/')))
		r = -EXDEV;
	for (const char *p = where + n; r == 0 && *p; p++)
		depth += *p == '/';
	if (r < 0 || depth >= OCI_MAX_DEPTH)
		return al_error_set(err, AL_ERR_TOO_LARGE, r < 0 ? -r : ELOOP,
		                    "its directory nests deeper than %d levels (through symlinks)", OCI_MAX_DEPTH);
	return 0;
}

static int path_open_dir(int root_fd, const char *dir, bool create, struct al_error *err)
{
	int fd = openat2_in_root(root_fd, dir, O_PATH | O_DIRECTORY);
	if (fd >= 0 || fd != -ENOENT || !create) {
		if (fd < 0 && fd != -ENOENT)
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, -fd, "%s is not a directory in the image",
			                    dir);
		return fd;
	}
	int r = path_make_dirs(root_fd, dir, err);
	if (r < 0)
		return r;
	fd = openat2_in_root(root_fd, dir, O_PATH | O_DIRECTORY);
	if (fd < 0)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, -fd, "%s is not a directory in the image", dir);
	return fd;
}

int oci_path_open_dir(int root_fd, const char *dir, bool create, struct al_error *err)
{
	int fd = path_open_dir(root_fd, dir, create, err);
	if (fd < 0 || !create)
		return fd;
	int r = path_depth_check(root_fd, fd, err);
	if (r < 0) {
		close(fd);
		return r;
	}
	return fd;
}
