/* SPDX-License-Identifier: Apache-2.0 */
/* Step 1: the paths the jail is built from. Each is opened one component at a
 * time without following symlinks and checked; the fds are what later steps
 * mount, so a path swapped after the check changes nothing. */
#include <fcntl.h>
#include <limits.h>

#include "jailer.h"
#include "util.h"

bool jail_path_is_under(const char *path, const char *dir)
{
	size_t n = strlen(dir);
	if (n == 1 && dir[0] == '/')
		return true;
	return !strncmp(path, dir, n) && (path[n] == '\0' || path[n] == '/');
}

static const char *type_name(mode_t mode)
{
	if (S_ISDIR(mode))
		return "a directory";
	if (S_ISREG(mode))
		return "a regular file";
	if (S_ISLNK(mode))
		return "a symlink";
	if (S_ISCHR(mode))
		return "a character device";
	if (S_ISBLK(mode))
		return "a block device";
	return "a special file";
}

/* SECURITY: a directory on the way to a path the jail trusts must be one only
 * root can change: owned by root, and not writable by group or others unless
 * sticky (then others can add entries but not rename or remove root's). */
static int check_dir_on_way(const char *path, const char *upto, const struct stat *st, struct al_error *err)
{
	if (st->st_uid != 0)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EPERM,
		                    "%s: directory %s on the way is owned by uid %u, not root", path, upto,
		                    (unsigned)st->st_uid);
	if ((st->st_mode & (S_IWGRP | S_IWOTH)) && !(st->st_mode & S_ISVTX))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EPERM,
		                    "%s: directory %s on the way is writable by group or others (mode %04o)", path,
		                    upto, (unsigned)(st->st_mode & 07777));
	return 0;
}

static int check_final(const char *path, unsigned flags, uid_t alt_owner, const struct stat *st, struct al_error *err)
{
	if ((flags & JAIL_PATH_DIR) && !S_ISDIR(st->st_mode))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, ENOTDIR, "%s: is %s, not a directory", path,
		                    type_name(st->st_mode));
	if ((flags & JAIL_PATH_REG) && !S_ISREG(st->st_mode))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "%s: is %s, not a regular file", path,
		                    type_name(st->st_mode));
	if ((flags & JAIL_PATH_CHR) && !S_ISCHR(st->st_mode))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "%s: is %s, not a character device", path,
		                    type_name(st->st_mode));
	if (!S_ISDIR(st->st_mode) && !S_ISREG(st->st_mode) && !S_ISCHR(st->st_mode))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "%s: is %s", path, type_name(st->st_mode));
	if ((flags & JAIL_PATH_OWNER) && st->st_uid != 0 && (alt_owner == (uid_t)-1 || st->st_uid != alt_owner)) {
		if (alt_owner != (uid_t)-1)
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EPERM,
			                    "%s: owned by uid %u, must be owned by root or by uid %u", path,
			                    (unsigned)st->st_uid, (unsigned)alt_owner);
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EPERM, "%s: owned by uid %u, must be owned by root",
		                    path, (unsigned)st->st_uid);
	}
	if ((flags & JAIL_PATH_NOT_WRITABLE) && (st->st_mode & (S_IWGRP | S_IWOTH)))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EPERM,
		                    "%s: writable by group or others (mode %04o); make it 0755/0644 or stricter", path,
		                    (unsigned)(st->st_mode & 07777));
	if ((flags & JAIL_PATH_NO_HARDLINK) && S_ISREG(st->st_mode) && st->st_nlink != 1)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EMLINK,
		                    "%s: has %lu hard links; a file put into a jail must have exactly one", path,
		                    (unsigned long)st->st_nlink);
	if ((flags & JAIL_PATH_EXEC_OTHER) && !(st->st_mode & S_IXOTH))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EACCES,
		                    "%s: not executable by others (mode %04o): the jail's uid could not run it", path,
		                    (unsigned)(st->st_mode & 07777));
	return 0;
}

int jail_path_open(const char *path, unsigned flags, uid_t alt_owner, int *ret_fd, struct stat *ret_st,
                   struct al_error *err)
{
	int r = jail_path_syntax_check(path, err);
	if (r < 0)
		return r;
	cleanup_close int fd = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "cannot open /: %m");
	struct stat st;
	if (fstat(fd, &st) < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "cannot stat /: %m");
	char upto[PATH_MAX] = "/";
	const char *p = path + 1;
	while (*p) {
		if ((r = check_dir_on_way(path, upto, &st, err)) < 0)
			return r;
		const char *slash = strchr(p, '/');
		size_t len = slash ? (size_t)(slash - p) : strlen(p);
		char name[NAME_MAX + 1];
		if (len > NAME_MAX)
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, ENAMETOOLONG, "%s: a component is too long",
			                    path);
		memcpy(name, p, len);
		name[len] = '\0';
		/* SECURITY: O_NOFOLLOW on an O_PATH open yields the symlink itself,
		 * which fstat then shows: no component is ever followed. */
		int next = openat(fd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
		if (next < 0)
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, errno, "%s: %m", path);
		closep(&fd);
		fd = next;
		if (fstat(fd, &st) < 0)
			return al_error_set(err, AL_ERR_INTERNAL, errno, "%s: cannot stat: %m", path);
		size_t used = (size_t)(p + len - path);
		memcpy(upto, path, used);
		upto[used] = '\0';
		if (S_ISLNK(st.st_mode))
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, ELOOP,
			                    "%s: %s is a symlink (no symlinks anywhere in a jail path)", path, upto);
		if (slash && !S_ISDIR(st.st_mode))
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, ENOTDIR, "%s: %s is not a directory", path,
			                    upto);
		p = slash ? slash + 1 : p + len;
	}
	if ((r = check_final(path, flags, alt_owner, &st, err)) < 0)
		return r;
	*ret_st = st;
	*ret_fd = TAKE_FD(fd);
	return 0;
}

static int check_fd_open(const char *opt, int fd, struct al_error *err)
{
	if (fcntl(fd, F_GETFD) < 0)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EBADF, "%s %d: not an open file descriptor", opt, fd);
	return 0;
}

void jail_validated_release(struct jail_validated *v)
{
	closep(&v->root_fd);
	closep(&v->vmm_fd);
	closep(&v->lease_dir_fd);
	closep(&v->exit_dir_fd);
	for (size_t i = 0; i < JAIL_MAX_BINDS; i++)
		closep(&v->bind_fds[i]);
	jail_seccomp_free(v->seccomp);
	v->root_fd = v->vmm_fd = -1;
	for (size_t i = 0; i < JAIL_MAX_BINDS; i++)
		v->bind_fds[i] = -1;
	v->seccomp = NULL;
}

static int validate_binds(const struct jail_config *cfg, struct jail_validated *v, struct al_error *err)
{
	for (size_t i = 0; i < cfg->n_binds; i++) {
		/* A bound directory's own contents are the caller's choice (e.g.
		 * /usr); a bound file is checked like a copied one. */
		int r = jail_path_open(cfg->binds[i], JAIL_PATH_OWNER | JAIL_PATH_NOT_WRITABLE | JAIL_PATH_NO_HARDLINK,
		                       (uid_t)-1, &v->bind_fds[i], &v->bind_st[i], err);
		if (r < 0) {
			al_error_prefix(err, "--bind-ro");
			return r;
		}
		if (!S_ISDIR(v->bind_st[i].st_mode) && !S_ISREG(v->bind_st[i].st_mode))
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
			                    "--bind-ro %s: only directories and regular files can be bound",
			                    cfg->binds[i]);
	}
	return 0;
}

static int validate_vmm(const struct jail_config *cfg, struct jail_validated *v, struct al_error *err)
{
	const char *vmm = cfg->vmm_argv[0];
	v->vmm_bind = true;
	for (size_t i = 0; i < cfg->n_binds; i++)
		if (jail_path_is_under(vmm, cfg->binds[i]))
			v->vmm_bind = false;
	int r = jail_path_open(vmm,
	                       JAIL_PATH_REG | JAIL_PATH_OWNER | JAIL_PATH_NOT_WRITABLE | JAIL_PATH_EXEC_OTHER |
	                           JAIL_PATH_NO_HARDLINK,
	                       (uid_t)-1, &v->vmm_fd, &v->vmm_st, err);
	if (r < 0)
		al_error_prefix(err, "the VMM");
	return r;
}

static int validate_devs(const struct jail_config *cfg, struct jail_validated *v, struct al_error *err)
{
	for (size_t i = 0; i < cfg->n_devs; i++) {
		cleanup_close int fd = -1;
		int r = jail_path_open(cfg->devs[i], JAIL_PATH_CHR, (uid_t)-1, &fd, &v->dev_st[i], err);
		if (r < 0) {
			al_error_prefix(err, "--dev");
			return r;
		}
	}
	return 0;
}

static int validate_seccomp(const struct jail_config *cfg, struct jail_validated *v, struct al_error *err)
{
	cleanup_close int fd = -1;
	struct stat st;
	struct jail_seccomp_profile profile = {0};
	int r = jail_path_open(cfg->seccomp_path, JAIL_PATH_REG | JAIL_PATH_OWNER | JAIL_PATH_NOT_WRITABLE, (uid_t)-1,
	                       &fd, &st, err);
	if (r >= 0)
		r = jail_seccomp_read(fd, cfg->seccomp_path, &profile, err);
	if (r >= 0)
		r = jail_seccomp_compile(&profile, &v->seccomp, err);
	jail_seccomp_profile_release(&profile);
	if (r < 0)
		al_error_prefix(err, "--seccomp");
	return r;
}

/* The supervisor's files (jailer-lease.c): their directories are root's and
 * only root writes to them; the lease exists already (airlockd made it). */
static int validate_supervisor_files(const struct jail_config *cfg, struct jail_validated *v, struct al_error *err)
{
	int r;
	if (cfg->exit_file && (r = jail_parent_open("exit-file", cfg->exit_file, &v->exit_dir_fd, err)) < 0)
		return r;
	if (!cfg->lease_path)
		return 0;
	if ((r = jail_parent_open("lease", cfg->lease_path, &v->lease_dir_fd, err)) < 0)
		return r;
	struct stat st;
	if (fstatat(v->lease_dir_fd, jail_path_base(cfg->lease_path), &st, AT_SYMLINK_NOFOLLOW) < 0 ||
	    !S_ISREG(st.st_mode) || st.st_uid != 0 || (st.st_mode & (S_IWGRP | S_IWOTH)))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "--lease %s: must be an existing regular file of root's that group and others "
		                    "cannot write",
		                    cfg->lease_path);
	return 0;
}

static int validate_all(const struct jail_config *cfg, struct jail_validated *v, struct al_error *err)
{
	int r;
	if (cfg->netns_fd >= 0 && (r = check_fd_open("--netns-fd", cfg->netns_fd, err)) < 0)
		return r;
	for (size_t i = 0; i < cfg->n_keep_fds; i++)
		if ((r = check_fd_open("--keep-fd", cfg->keep_fds[i], err)) < 0)
			return r;
	/* The caller chowns the jail root to the jail's uid (the VMM creates its
	 * sockets there); nobody else may write to it. */
	r = jail_path_open(cfg->root, JAIL_PATH_DIR | JAIL_PATH_OWNER | JAIL_PATH_NOT_WRITABLE, cfg->uid, &v->root_fd,
	                   &v->root_st, err);
	if (r < 0) {
		al_error_prefix(err, "--root");
		return r;
	}
	if ((r = validate_binds(cfg, v, err)) < 0 || (r = validate_vmm(cfg, v, err)) < 0 ||
	    (r = validate_devs(cfg, v, err)) < 0)
		return r;
	if (cfg->seccomp_path && (r = validate_seccomp(cfg, v, err)) < 0)
		return r;
	return validate_supervisor_files(cfg, v, err);
}

int jail_validate(const struct jail_config *cfg, struct jail_validated *ret, struct al_error *err)
{
	struct jail_validated v = {.root_fd = -1, .vmm_fd = -1, .lease_dir_fd = -1, .exit_dir_fd = -1};
	for (size_t i = 0; i < JAIL_MAX_BINDS; i++)
		v.bind_fds[i] = -1;
	int r = validate_all(cfg, &v, err);
	if (r < 0) {
		jail_validated_release(&v);
		return r;
	}
	*ret = v;
	return 0;
}
