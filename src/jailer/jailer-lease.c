/* SPDX-License-Identifier: Apache-2.0 */
/* What the supervising parent of --new-pid-ns keeps outside the jail: the
 * lease airlockd renews while it may still re-attach to the VMM, and the
 * record of how the VMM ended, for an airlockd that is not its parent
 * (docs/jailer.md, "Lease" and "Exit status"). */
#include <fcntl.h>
#include <sys/wait.h>

#include "jailer.h"
#include "util.h"

#define LEASE_PERIOD_MIN_MS 250u
#define LEASE_PERIOD_MAX_MS 60000u

const char *jail_path_base(const char *path)
{
	const char *slash = strrchr(path, '/');
	return slash ? slash + 1 : path;
}

int jail_parent_open(const char *opt, const char *path, int *ret_fd, struct al_error *err)
{
	const char *base = jail_path_base(path);
	cleanup_free char *dir = base - path <= 1 ? xstrdup("/") : xstrndup(path, (size_t)(base - path - 1));
	struct stat st;
	int r =
	    jail_path_open(dir, JAIL_PATH_DIR | JAIL_PATH_OWNER | JAIL_PATH_NOT_WRITABLE, (uid_t)-1, ret_fd, &st, err);
	if (r < 0)
		al_error_prefix(err, "--%s", opt);
	return r;
}

uint64_t jail_lease_period_ms(uint64_t timeout_s)
{
	uint64_t p = timeout_s * 1000u / 4u;
	return p < LEASE_PERIOD_MIN_MS ? LEASE_PERIOD_MIN_MS : p > LEASE_PERIOD_MAX_MS ? LEASE_PERIOD_MAX_MS : p;
}

void jail_lease_start(struct jail_lease *l, int dir_fd, const char *path, uint64_t timeout_s, uint64_t now_ms)
{
	*l = (struct jail_lease){.dir_fd = dir_fd,
	                         .name = jail_path_base(path),
	                         .path = path,
	                         .timeout_ms = timeout_s * 1000u,
	                         .changed_ms = now_ms};
	struct stat st;
	if (fstatat(dir_fd, l->name, &st, AT_SYMLINK_NOFOLLOW) == 0)
		l->mtime = st.st_mtim;
}

int jail_lease_check(struct jail_lease *l, uint64_t now_ms, char *buf, size_t size)
{
	struct stat st;
	/* rm -rf of the sandbox (or of the whole state dir): nobody can
	 * re-attach to a VM whose directory is gone. */
	if (fstat(l->dir_fd, &st) < 0 || st.st_nlink == 0) {
		snprintf(buf, size, "the directory of the lease %s is gone", l->path);
		return -1;
	}
	if (fstatat(l->dir_fd, l->name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
		if (errno != ENOENT)
			return 0; /* not a verdict: looked at again next time */
		snprintf(buf, size, "the lease %s is gone", l->path);
		return -1;
	}
	if (st.st_mtim.tv_sec != l->mtime.tv_sec || st.st_mtim.tv_nsec != l->mtime.tv_nsec) {
		l->mtime = st.st_mtim;
		l->changed_ms = now_ms;
		return 0;
	}
	if (now_ms - l->changed_ms < l->timeout_ms)
		return 0;
	snprintf(buf, size, "the lease %s was not renewed for %llu s (--orphan-timeout-s)", l->path,
	         (unsigned long long)((now_ms - l->changed_ms) / 1000u));
	return -1;
}

void jail_exit_record_write(int dir_fd, const char *name, int wait_status)
{
	char line[32];
	int n = WIFEXITED(wait_status) ? snprintf(line, sizeof(line), "status %d\n", WEXITSTATUS(wait_status))
	                               : snprintf(line, sizeof(line), "signal %d\n", WTERMSIG(wait_status));
	cleanup_close int fd = openat(dir_fd, name, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd >= 0 && write(fd, line, (size_t)n) != n) {
		/* Best effort: airlockd then says it does not know how it ended. */
	}
}
