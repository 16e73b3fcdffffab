/* SPDX-License-Identifier: Apache-2.0 */
/* Step 3: the sandbox's cgroup, <mount>/<parent>/<id> for cpu, memory and
 * pids. Each controller is found at run time where the host has it: in a v1
 * hierarchy of its own (e.g. /sys/fs/cgroup/memory) or on the cgroup2 mount
 * (listed in its cgroup.controllers). Hybrid hosts work: one directory per
 * distinct hierarchy. */
#include <fcntl.h>
#include <limits.h>
#include <time.h>

#include "jailer.h"
#include "util.h"

const char *const jail_cg_names[JAIL_CG__COUNT] = {"cpu", "memory", "pids"};

#define CFS_PERIOD_US 100000
#define MOUNTINFO_MAX (1024 * 1024)

/* mountinfo: "ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS [OPTIONAL...] - FSTYPE SOURCE SUPEROPTS". */
static int mountinfo_fields(char *line, char **ret_mnt, char **ret_fstype, char **ret_superopts)
{
	char *save = NULL, *tok, *fields[5] = {0};
	size_t n = 0;
	for (tok = strtok_r(line, " ", &save); tok && n < 5; tok = strtok_r(NULL, " ", &save))
		fields[n++] = tok;
	if (n < 5)
		return -EINVAL;
	while (tok && strcmp(tok, "-"))
		tok = strtok_r(NULL, " ", &save);
	if (!tok)
		return -EINVAL;
	char *fstype = strtok_r(NULL, " ", &save);
	char *source = strtok_r(NULL, " ", &save);
	char *superopts = strtok_r(NULL, " \n", &save);
	if (!fstype || !source || !superopts)
		return -EINVAL;
	*ret_mnt = fields[4];
	*ret_fstype = fstype;
	*ret_superopts = superopts;
	return 0;
}

static bool opts_have(const char *opts, const char *name)
{
	size_t n = strlen(name);
	for (const char *p = opts; p && *p;) {
		const char *comma = strchr(p, ',');
		size_t len = comma ? (size_t)(comma - p) : strlen(p);
		if (len == n && !strncmp(p, name, n))
			return true;
		p = comma ? comma + 1 : NULL;
	}
	return false;
}

/* cgroup.controllers is space-separated. */
static bool v2_has(const char *mnt, const char *name)
{
	char path[PATH_MAX];
	if (snprintf_ok(path, sizeof(path), "%s/cgroup.controllers", mnt) < 0)
		return false;
	cleanup_free char *text = NULL;
	size_t len;
	if (read_file_limited(path, 4096, &text, &len) < 0)
		return false;
	char *save = NULL;
	for (char *tok = strtok_r(text, " \n", &save); tok; tok = strtok_r(NULL, " \n", &save))
		if (!strcmp(tok, name))
			return true;
	return false;
}

int jail_cgroup_detect(struct jail_cgroup_host *ret, struct al_error *err)
{
	struct jail_cgroup_host h = {0};
	cleanup_free char *text = NULL;
	size_t len;
	int r = read_file_limited("/proc/self/mountinfo", MOUNTINFO_MAX, &text, &len);
	if (r < 0)
		return al_error_set(err, AL_ERR_INTERNAL, -r, "cannot read /proc/self/mountinfo: %s", strerror(-r));
	char v2[JAIL_CG_MOUNT_MAX] = "";
	char *save = NULL;
	for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char *mnt, *fstype, *superopts;
		if (mountinfo_fields(line, &mnt, &fstype, &superopts) < 0 || strlen(mnt) >= JAIL_CG_MOUNT_MAX ||
		    strchr(mnt, '\\'))
			continue;
		if (!strcmp(fstype, "cgroup2") && !v2[0]) {
			strlcpy_al(v2, mnt, sizeof(v2));
			continue;
		}
		if (strcmp(fstype, "cgroup"))
			continue;
		for (int c = 0; c < JAIL_CG__COUNT; c++)
			if (!h.version[c] && opts_have(superopts, jail_cg_names[c])) {
				h.version[c] = 1;
				strlcpy_al(h.mount[c], mnt, sizeof(h.mount[c]));
			}
	}
	/* A controller bound to a v1 hierarchy is never also on cgroup2. */
	for (int c = 0; c < JAIL_CG__COUNT; c++)
		if (!h.version[c] && v2[0] && v2_has(v2, jail_cg_names[c])) {
			h.version[c] = 2;
			strlcpy_al(h.mount[c], v2, sizeof(h.mount[c]));
		}
	*ret = h;
	return 0;
}

/* ------------------------------------------------------------ files */

static int cg_write(int dirfd, const char *dir, const char *file, const char *value, struct al_error *err)
{
	cleanup_close int fd = openat(dirfd, file, O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "cannot open %s/%s: %m", dir, file);
	int r = write_full(fd, value, strlen(value));
	if (r < 0)
		return al_error_set(err, AL_ERR_INTERNAL, -r, "cannot write \"%s\" to %s/%s: %s", value, dir, file,
		                    strerror(-r));
	return 0;
}

static bool cg_has_file(int dirfd, const char *file)
{
	return faccessat(dirfd, file, F_OK, AT_SYMLINK_NOFOLLOW) == 0;
}

static void dir_path(const struct jail_cgroup_dir *d, const char *parent, const char *id, char *buf, size_t size)
{
	snprintf(buf, size, "%s/%s/%s", d->mount, parent, id);
}

static int write_cpu(const struct jail_cgroup_dir *d, const char *path, uint64_t pct, struct al_error *err)
{
	char v[64];
	uint64_t quota_us = pct * (CFS_PERIOD_US / 100);
	if (d->version == 2) {
		if (pct)
			snprintf(v, sizeof(v), "%llu %d", (unsigned long long)quota_us, CFS_PERIOD_US);
		else
			snprintf(v, sizeof(v), "max %d", CFS_PERIOD_US);
		return cg_write(d->dir_fd, path, "cpu.max", v, err);
	}
	snprintf(v, sizeof(v), "%d", CFS_PERIOD_US);
	int r = cg_write(d->dir_fd, path, "cpu.cfs_period_us", v, err);
	if (r < 0)
		return r;
	if (!pct)
		return 0;
	snprintf(v, sizeof(v), "%llu", (unsigned long long)quota_us);
	return cg_write(d->dir_fd, path, "cpu.cfs_quota_us", v, err);
}

/* Its share of the CPU against the other sandboxes' cgroups when they
 * compete (a warm pool's VMs are filled at a low weight: docs/api.md, "Warm
 * pools"). v1's cpu.shares default 1024 is v2's weight 100. */
static int write_cpu_weight(const struct jail_cgroup_dir *d, const char *path, uint64_t weight, struct al_error *err)
{
	char v[32];
	if (d->version == 2) {
		snprintf(v, sizeof(v), "%llu", (unsigned long long)weight);
		return cg_write(d->dir_fd, path, "cpu.weight", v, err);
	}
	snprintf(v, sizeof(v), "%llu", (unsigned long long)MAX(2u, weight * 1024u / 100u));
	return cg_write(d->dir_fd, path, "cpu.shares", v, err);
}

/* SECURITY: "memory" bounds RAM and swap together: v1 sets memsw to the same
 * value (where swap accounting is on), v2 allows no swap on top. */
static int write_memory(const struct jail_cgroup_dir *d, const char *path, uint64_t mib, struct al_error *err)
{
	if (!mib)
		return 0;
	char v[64];
	snprintf(v, sizeof(v), "%llu", (unsigned long long)(mib * 1024 * 1024));
	if (d->version == 2) {
		int r = cg_write(d->dir_fd, path, "memory.max", v, err);
		if (r < 0 || !cg_has_file(d->dir_fd, "memory.swap.max"))
			return r;
		return cg_write(d->dir_fd, path, "memory.swap.max", "0", err);
	}
	int r = cg_write(d->dir_fd, path, "memory.limit_in_bytes", v, err);
	if (r < 0 || !cg_has_file(d->dir_fd, "memory.memsw.limit_in_bytes"))
		return r;
	return cg_write(d->dir_fd, path, "memory.memsw.limit_in_bytes", v, err);
}

static int write_pids(const struct jail_cgroup_dir *d, const char *path, uint64_t max, struct al_error *err)
{
	char v[32];
	if (!max)
		return cg_write(d->dir_fd, path, "pids.max", "max", err);
	snprintf(v, sizeof(v), "%llu", (unsigned long long)max);
	return cg_write(d->dir_fd, path, "pids.max", v, err);
}

/* ------------------------------------------------------------ create / remove */

static int open_dir(int at, const char *name, const char *path, int *ret_fd, struct al_error *err)
{
	int fd = openat(at, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "cannot open %s: %m", path);
	*ret_fd = fd;
	return 0;
}

/* v2: a child gets a controller only when its parent's subtree_control
 * names it (both the mount's root and <parent>). */
static int v2_enable(int dirfd, const char *path, unsigned controllers, struct al_error *err)
{
	char v[64] = "";
	size_t off = 0;
	for (int c = 0; c < JAIL_CG__COUNT; c++)
		if (controllers & (1u << c))
			off += (size_t)snprintf(v + off, sizeof(v) - off, "%s+%s", off ? " " : "", jail_cg_names[c]);
	return cg_write(dirfd, path, "cgroup.subtree_control", v, err);
}

static void group_dirs(const struct jail_cgroup_host *host, struct jail_cgroup *cg)
{
	for (int c = 0; c < JAIL_CG__COUNT; c++) {
		size_t i = 0;
		while (i < cg->n_dirs && strcmp(cg->dirs[i].mount, host->mount[c]))
			i++;
		if (i == cg->n_dirs) {
			struct jail_cgroup_dir *d = &cg->dirs[cg->n_dirs++];
			*d = (struct jail_cgroup_dir){
			    .version = host->version[c], .mount_fd = -1, .parent_fd = -1, .dir_fd = -1};
			strlcpy_al(d->mount, host->mount[c], sizeof(d->mount));
		}
		cg->dirs[i].controllers |= 1u << c;
	}
}

static int create_one(struct jail_cgroup_dir *d, const struct jail_config *cfg, struct al_error *err)
{
	char path[PATH_MAX];
	int r = open_dir(AT_FDCWD, d->mount, d->mount, &d->mount_fd, err);
	if (r < 0)
		return r;
	if (d->version == 2 && (r = v2_enable(d->mount_fd, d->mount, d->controllers, err)) < 0)
		return r;
	snprintf(path, sizeof(path), "%s/%s", d->mount, cfg->cgroup_parent);
	if (mkdirat(d->mount_fd, cfg->cgroup_parent, 0755) < 0 && errno != EEXIST)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "cannot create %s: %m", path);
	if ((r = open_dir(d->mount_fd, cfg->cgroup_parent, path, &d->parent_fd, err)) < 0)
		return r;
	if (d->version == 2 && (r = v2_enable(d->parent_fd, path, d->controllers, err)) < 0)
		return r;
	dir_path(d, cfg->cgroup_parent, cfg->id, path, sizeof(path));
	if (mkdirat(d->parent_fd, cfg->id, 0755) < 0) {
		if (errno == EEXIST)
			return al_error_set(err, AL_ERR_CONFLICT, EEXIST,
			                    "%s already exists: a jail with this id is running or was not cleaned up "
			                    "(airlock-jailer --cleanup --id %s)",
			                    path, cfg->id);
		return al_error_set(err, AL_ERR_INTERNAL, errno, "cannot create %s: %m", path);
	}
	d->created = true;
	return open_dir(d->parent_fd, cfg->id, path, &d->dir_fd, err);
}

static int limit_one(const struct jail_cgroup_dir *d, const struct jail_config *cfg, struct al_error *err)
{
	char path[PATH_MAX];
	dir_path(d, cfg->cgroup_parent, cfg->id, path, sizeof(path));
	int r = 0;
	if (d->controllers & (1u << JAIL_CG_CPU))
		r = write_cpu(d, path, cfg->cpu_quota_pct, err);
	if (r >= 0 && (d->controllers & (1u << JAIL_CG_CPU)) && cfg->cpu_weight)
		r = write_cpu_weight(d, path, cfg->cpu_weight, err);
	if (r >= 0 && (d->controllers & (1u << JAIL_CG_MEMORY)))
		r = write_memory(d, path, cfg->memory_mib, err);
	if (r >= 0 && (d->controllers & (1u << JAIL_CG_PIDS)))
		r = write_pids(d, path, cfg->pids_max, err);
	return r;
}

static int join_one(const struct jail_cgroup_dir *d, const struct jail_config *cfg, struct al_error *err)
{
	char path[PATH_MAX], pid[32];
	dir_path(d, cfg->cgroup_parent, cfg->id, path, sizeof(path));
	snprintf(pid, sizeof(pid), "%d", (int)getpid());
	return cg_write(d->dir_fd, path, "cgroup.procs", pid, err);
}

void jail_cgroup_close(struct jail_cgroup *cg)
{
	for (size_t i = 0; i < cg->n_dirs; i++) {
		closep(&cg->dirs[i].mount_fd);
		closep(&cg->dirs[i].parent_fd);
		closep(&cg->dirs[i].dir_fd);
		cg->dirs[i].mount_fd = cg->dirs[i].parent_fd = cg->dirs[i].dir_fd = -1;
	}
}

/* A cgroup whose last process just left may need a moment before rmdir
 * succeeds (v1 updates its task count asynchronously). */
static int rmdir_retry(int parent_fd, const char *name)
{
	for (int i = 0; i < 50; i++) {
		if (unlinkat(parent_fd, name, AT_REMOVEDIR) == 0 || errno == ENOENT)
			return 0;
		if (errno != EBUSY)
			return -errno;
		struct timespec ts = {0, 10 * 1000 * 1000};
		nanosleep(&ts, NULL);
	}
	return -EBUSY;
}

void jail_cgroup_abandon(struct jail_cgroup *cg)
{
	char pid[32];
	snprintf(pid, sizeof(pid), "%d", (int)getpid());
	for (size_t i = 0; i < cg->n_dirs; i++) {
		struct jail_cgroup_dir *d = &cg->dirs[i];
		if (d->mount_fd >= 0)
			(void)cg_write(d->mount_fd, d->mount, "cgroup.procs", pid, NULL);
		if (d->created && d->parent_fd >= 0)
			(void)rmdir_retry(d->parent_fd, cg->id);
		d->created = false;
	}
	jail_cgroup_close(cg);
}

static int require_controllers(const struct jail_cgroup_host *host, struct al_error *err)
{
	for (int c = 0; c < JAIL_CG__COUNT; c++)
		if (!host->version[c])
			return al_error_set(
			    err, AL_ERR_UNAVAILABLE, ENODEV,
			    "the %s controller is neither a cgroup v1 hierarchy nor enabled on the cgroup2 "
			    "mount (see airlock-jailer --check)",
			    jail_cg_names[c]);
	return 0;
}

int jail_cgroup_enter(const struct jail_cgroup_host *host, const struct jail_config *cfg, struct jail_cgroup *ret,
                      struct al_error *err)
{
	int r = require_controllers(host, err);
	if (r < 0)
		return r;
	struct jail_cgroup cg = {0};
	strlcpy_al(cg.id, cfg->id, sizeof(cg.id));
	group_dirs(host, &cg);
	for (size_t i = 0; i < cg.n_dirs && r >= 0; i++)
		r = create_one(&cg.dirs[i], cfg, err);
	for (size_t i = 0; i < cg.n_dirs && r >= 0; i++)
		r = limit_one(&cg.dirs[i], cfg, err);
	for (size_t i = 0; i < cg.n_dirs && r >= 0; i++)
		r = join_one(&cg.dirs[i], cfg, err);
	if (r < 0) {
		jail_cgroup_abandon(&cg);
		return r;
	}
	*ret = cg;
	return 0;
}

static int remove_one(const struct jail_cgroup_dir *d, const char *parent, const char *id, struct al_error *err)
{
	char path[PATH_MAX];
	dir_path(d, parent, id, path, sizeof(path));
	char procs[PATH_MAX + 16];
	snprintf(procs, sizeof(procs), "%s/cgroup.procs", path);
	cleanup_free char *text = NULL;
	size_t len = 0;
	int r = read_file_limited(procs, 64 * 1024, &text, &len);
	if (r == -ENOENT)
		return 0;
	for (size_t i = 0; text && i < len; i++)
		if (text[i] == '\n')
			text[i] = ' ';
	if (r == -EFBIG || (r >= 0 && len > 0))
		return al_error_set(err, AL_ERR_CONFLICT, EBUSY,
		                    "%s still has processes (pids %.64s...): stop the VMM first", path,
		                    text ? text : "many");
	if (r < 0)
		return al_error_set(err, AL_ERR_INTERNAL, -r, "cannot read %s: %s", procs, strerror(-r));
	char parent_path[PATH_MAX];
	snprintf(parent_path, sizeof(parent_path), "%s/%s", d->mount, parent);
	cleanup_close int parent_fd = open(parent_path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (parent_fd < 0)
		return errno == ENOENT ? 0
		                       : al_error_set(err, AL_ERR_INTERNAL, errno, "cannot open %s: %m", parent_path);
	r = rmdir_retry(parent_fd, id);
	if (r < 0)
		return al_error_set(err, AL_ERR_INTERNAL, -r, "cannot remove %s: %s", path, strerror(-r));
	return 0;
}

int jail_cgroup_remove(const struct jail_cgroup_host *host, const char *parent, const char *id, struct al_error *err)
{
	struct jail_cgroup cg = {0};
	group_dirs(host, &cg);
	int r = 0;
	for (size_t i = 0; i < cg.n_dirs && r >= 0; i++)
		if (cg.dirs[i].version)
			r = remove_one(&cg.dirs[i], parent, id, err);
	return r;
}
