/* SPDX-License-Identifier: Apache-2.0 */
/* Step 6: the jail's file system. In a private mount namespace the jail root
 * is bound onto itself, given /dev (only the allowed nodes), /proc, /tmp and
 * the read-only binds, and made the root with pivot_root; the host's tree is
 * detached. Every mount goes through an fd (/proc/self/fd/N) opened without
 * following symlinks and checked to be the inode step 1 validated: the jail
 * root is writable by the VMM's uid, and a symlink a previous VMM left there
 * must never redirect a mount. */
#include <fcntl.h>
#include <limits.h>
#include <sys/mount.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>

#include "jailer.h"
#include "util.h"

struct fd_path {
	char s[40];
};

static struct fd_path fdp(int fd)
{
	struct fd_path p;
	snprintf(p.s, sizeof(p.s), "/proc/self/fd/%d", fd);
	return p;
}

/* Opens (creating if needed) the directory or empty file at rel below dirfd,
 * component by component, refusing symlinks and anything of the wrong type. */
static int walk_create(int dirfd, const char *rel, bool final_dir, const char *shown, int *ret_fd, struct al_error *err)
{
	cleanup_close int at = fcntl(dirfd, F_DUPFD_CLOEXEC, 3);
	if (at < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "dup: %m");
	const char *p = rel;
	while (*p) {
		const char *slash = strchr(p, '/');
		size_t len = slash ? (size_t)(slash - p) : strlen(p);
		char name[NAME_MAX + 1];
		if (len == 0 || len > NAME_MAX)
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "%s: bad component", shown);
		memcpy(name, p, len);
		name[len] = '\0';
		bool dir = slash || final_dir;
		int fd = openat(at, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0 && errno == ENOENT) {
			if (dir) {
				if (mkdirat(at, name, 0755) < 0 && errno != EEXIST)
					return al_error_set(err, AL_ERR_INTERNAL, errno,
					                    "cannot create %s in the jail: %m", shown);
			} else {
				int c = openat(at, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
				if (c < 0)
					return al_error_set(err, AL_ERR_INTERNAL, errno,
					                    "cannot create %s in the jail: %m", shown);
				close(c);
			}
			fd = openat(at, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
		}
		if (fd < 0)
			return al_error_set(err, AL_ERR_INTERNAL, errno, "cannot open %s in the jail: %m", shown);
		closep(&at);
		at = fd;
		struct stat st;
		if (fstat(at, &st) < 0)
			return al_error_set(err, AL_ERR_INTERNAL, errno, "cannot stat %s in the jail: %m", shown);
		if (dir ? !S_ISDIR(st.st_mode) : !S_ISREG(st.st_mode))
			return al_error_set(
			    err, AL_ERR_INVALID_ARGUMENT, EEXIST,
			    "%s in the jail root exists and is not a %s (a symlink or file left there?)", shown,
			    dir ? "directory" : "regular file");
		p = slash ? slash + 1 : p + len;
	}
	*ret_fd = TAKE_FD(at);
	return 0;
}

/* After a mount on top of X, an fd opened before still names what lies
 * beneath: open it again through its parent to get the new mount. */
static int reopen(int dirfd, const char *rel, bool dir, const char *shown, int *ret_fd, struct al_error *err)
{
	return walk_create(dirfd, rel, dir, shown, ret_fd, err);
}

static int do_mount(const char *src, int target_fd, const char *fstype, unsigned long flags, const char *data,
                    const char *shown, struct al_error *err)
{
	if (mount(src, fdp(target_fd).s, fstype, flags, data) < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "cannot mount %s on %s: %m", fstype ? fstype : src,
		                    shown);
	return 0;
}

static int remount(int fd, unsigned long flags, const char *shown, struct al_error *err)
{
	if (mount(NULL, fdp(fd).s, NULL, MS_REMOUNT | MS_BIND | flags, NULL) < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "cannot remount %s: %m", shown);
	struct statvfs sv;
	if ((flags & MS_RDONLY) && (fstatvfs(fd, &sv) < 0 || !(sv.f_flag & ST_RDONLY)))
		return al_error_set(err, AL_ERR_INTERNAL, EIO, "%s is not read-only after remounting it", shown);
	return 0;
}

/* fds opened before unshare(CLONE_NEWNS) name mounts of the host's namespace,
 * which mount(2) refuses as source or target. Open the path again in this
 * namespace (still no symlinks) and insist on the very inode step 1 checked. */
static int reopen_checked(const char *path, const struct stat *want, int *ret_fd, struct al_error *err)
{
	struct stat st;
	int r = jail_path_open(path, 0, (uid_t)-1, ret_fd, &st, err);
	if (r < 0)
		return r;
	if (st.st_ino != want->st_ino || st.st_dev != want->st_dev) {
		closep(ret_fd);
		*ret_fd = -1;
		return al_error_set(err, AL_ERR_INTERNAL, EIO, "%s changed while the jail was being built", path);
	}
	return 0;
}

/* ------------------------------------------------------------ /dev */

static int make_dev_node(int devfd, const char *path, const struct stat *host, const struct jail_config *cfg,
                         struct al_error *err)
{
	const char *rel = path + strlen("/dev/");
	const char *slash = strrchr(rel, '/');
	cleanup_close int dirfd = -1;
	if (slash) {
		char parent[64];
		snprintf(parent, sizeof(parent), "%.*s", (int)(slash - rel), rel);
		int r = walk_create(devfd, parent, true, path, &dirfd, err);
		if (r < 0)
			return r;
	} else if ((dirfd = fcntl(devfd, F_DUPFD_CLOEXEC, 3)) < 0) {
		return al_error_set(err, AL_ERR_INTERNAL, errno, "dup: %m");
	}
	const char *name = slash ? slash + 1 : rel;
	/* SECURITY: the same device as the host's node (checked against the
	 * allow-list in step 1), owned by the jail's uid so that the VMM can
	 * open it without any capability; never executable. */
	if (mknodat(dirfd, name, S_IFCHR | (host->st_mode & 0666), host->st_rdev) < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "mknod %s (%u:%u): %m", path, major(host->st_rdev),
		                    minor(host->st_rdev));
	if (fchownat(dirfd, name, cfg->uid, cfg->gid, AT_SYMLINK_NOFOLLOW) < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "chown %s: %m", path);
	/* mknod applied the umask; give the node the host's permission bits. */
	if (fchmodat(dirfd, name, host->st_mode & 0666, 0) < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "chmod %s: %m", path);
	return 0;
}

static int build_dev(int rootfd, const struct jail_config *cfg, const struct jail_validated *v, struct al_error *err)
{
	cleanup_close int under = -1, devfd = -1;
	int r = walk_create(rootfd, "dev", true, "/dev", &under, err);
	if (r < 0 || (r = do_mount("tmpfs", under, "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=0755,size=64k,nr_inodes=64",
	                           "/dev", err)) < 0)
		return r;
	if ((r = reopen(rootfd, "dev", true, "/dev", &devfd, err)) < 0)
		return r;
	for (size_t i = 0; i < cfg->n_devs; i++)
		if ((r = make_dev_node(devfd, cfg->devs[i], &v->dev_st[i], cfg, err)) < 0)
			return r;
	static const char *const links[][2] = {
	    {"fd", "/proc/self/fd"},
	    {"stdin", "/proc/self/fd/0"},
	    {"stdout", "/proc/self/fd/1"},
	    {"stderr", "/proc/self/fd/2"},
	};
	for (size_t i = 0; i < ARRAY_SIZE(links); i++)
		if (symlinkat(links[i][1], devfd, links[i][0]) < 0)
			return al_error_set(err, AL_ERR_INTERNAL, errno, "symlink /dev/%s: %m", links[i][0]);
	/* Nothing can be added to /dev afterwards; the nodes stay usable. */
	return remount(devfd, MS_RDONLY | MS_NOSUID | MS_NOEXEC, "/dev", err);
}

/* ------------------------------------------------------------ /proc, /tmp */

static int build_proc_tmp(int rootfd, const struct jail_config *cfg, struct al_error *err)
{
	cleanup_close int procfd = -1, tmpfd = -1;
	/* A fresh procfs of the jail's pid namespace (hidepid=2: the VMM's uid
	 * sees only its own processes even without --new-pid-ns). */
	int r = walk_create(rootfd, "proc", true, "/proc", &procfd, err);
	if (r < 0 ||
	    (r = do_mount("proc", procfd, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, "hidepid=2", "/proc", err)) < 0)
		return r;
	char opts[128];
	snprintf(opts, sizeof(opts), "mode=0700,uid=%u,gid=%u,size=%s,nr_inodes=4096", (unsigned)cfg->uid,
	         (unsigned)cfg->gid, JAIL_TMP_SIZE);
	if ((r = walk_create(rootfd, "tmp", true, "/tmp", &tmpfd, err)) < 0)
		return r;
	return do_mount("tmpfs", tmpfd, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, opts, "/tmp", err);
}

/* ------------------------------------------------------------ read-only binds */

static int bind_ro(int rootfd, const char *path, const struct stat *want, struct al_error *err)
{
	cleanup_close int src_fd = -1, under = -1, top = -1;
	bool dir = S_ISDIR(want->st_mode);
	int r = reopen_checked(path, want, &src_fd, err);
	if (r < 0 || (r = walk_create(rootfd, path + 1, dir, path, &under, err)) < 0)
		return r;
	if (mount(fdp(src_fd).s, fdp(under).s, NULL, MS_BIND, NULL) < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "cannot bind %s: %m", path);
	if ((r = reopen(rootfd, path + 1, dir, path, &top, err)) < 0)
		return r;
	return remount(top, MS_RDONLY | MS_NOSUID | MS_NODEV, path, err);
}

/* Debian's merged /usr: /bin, /lib... are symlinks into /usr. Mirror the
 * host's links when /usr or anything under it is bound, so that the VMM's
 * ELF interpreter (/lib64/ld-linux-x86-64.so.2) and its libraries resolve
 * inside the jail. */
static int merged_usr_links(int rootfd, struct al_error *err)
{
	static const char *const names[] = {"bin", "sbin", "lib", "lib32", "lib64", "libx32"};
	for (size_t i = 0; i < ARRAY_SIZE(names); i++) {
		char host[16], want[32], got[64];
		snprintf(host, sizeof(host), "/%s", names[i]);
		snprintf(want, sizeof(want), "usr/%s", names[i]);
		ssize_t n = readlink(host, got, sizeof(got) - 1);
		if (n < 0 || (size_t)n != strlen(want) || memcmp(got, want, (size_t)n))
			continue;
		if (symlinkat(want, rootfd, names[i]) == 0)
			continue;
		ssize_t m = errno == EEXIST ? readlinkat(rootfd, names[i], got, sizeof(got) - 1) : -1;
		if (m < 0 || (size_t)m != strlen(want) || memcmp(got, want, (size_t)m))
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EEXIST,
			                    "/%s in the jail root exists and is not the link %s", names[i], want);
	}
	return 0;
}

static int build_binds(int rootfd, const struct jail_config *cfg, const struct jail_validated *v, struct al_error *err)
{
	bool usr = false;
	for (size_t i = 0; i < cfg->n_binds; i++) {
		int r = bind_ro(rootfd, cfg->binds[i], &v->bind_st[i], err);
		if (r < 0)
			return r;
		usr |= !strncmp(cfg->binds[i], "/usr", 4) && (cfg->binds[i][4] == '\0' || cfg->binds[i][4] == '/');
	}
	if (v->vmm_bind) {
		int r = bind_ro(rootfd, cfg->vmm_argv[0], &v->vmm_st, err);
		if (r < 0)
			return r;
	}
	return usr ? merged_usr_links(rootfd, err) : 0;
}

/* ------------------------------------------------------------ pivot */

static int pivot(int rootfd, const struct jail_validated *v, struct al_error *err)
{
	/* pivot_root(".", "."): the old root ends up on top of the new one and
	 * is detached right away, so no directory for it is ever created. */
	if (fchdir(rootfd) < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "cannot enter the jail root: %m");
	if (syscall(SYS_pivot_root, ".", ".") < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "pivot_root: %m");
	if (umount2(".", MNT_DETACH) < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "cannot detach the host's root: %m");
	if (chdir("/") < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "chdir /: %m");
	struct stat st;
	if (stat("/", &st) < 0 || st.st_ino != v->root_st.st_ino || st.st_dev != v->root_st.st_dev)
		return al_error_set(err, AL_ERR_INTERNAL, EIO, "/ is not the jail root after pivot_root");
	return 0;
}

int jail_mount_build(const struct jail_config *cfg, const struct jail_validated *v, struct al_error *err)
{
	/* Nothing done here may propagate to the host's mounts. */
	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "cannot make / private: %m");
	/* The jail root becomes a mount point of its own (pivot_root needs
	 * one); not recursive, so nothing mounted below it comes along. */
	cleanup_close int under = -1, rootfd = -1;
	int r = reopen_checked(cfg->root, &v->root_st, &under, err);
	if (r < 0)
		return r;
	if (mount(fdp(under).s, fdp(under).s, NULL, MS_BIND, NULL) < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "cannot bind %s onto itself: %m", cfg->root);
	if ((r = reopen_checked(cfg->root, &v->root_st, &rootfd, err)) < 0)
		return r;
	/* What the VMM writes there (sockets, disk, logs) is data: no setuid,
	 * no device nodes, nothing executable. */
	if ((r = remount(rootfd, MS_NOSUID | MS_NODEV | MS_NOEXEC, cfg->root, err)) < 0)
		return r;
	if ((r = build_dev(rootfd, cfg, v, err)) < 0 || (r = build_proc_tmp(rootfd, cfg, err)) < 0 ||
	    (r = build_binds(rootfd, cfg, v, err)) < 0)
		return r;
	return pivot(rootfd, v, err);
}
