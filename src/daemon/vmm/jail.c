/* SPDX-License-Identifier: Apache-2.0 */
/* The daemon's side of airlock-jailer (jail.h, docs/jailer.md). */
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "jail.h"
#include "log.h"
#include "util.h"

#define JAIL_OUTPUT_MAX 8192
#define JAIL_RUN_TIMEOUT_MS 10000
#define JAIL_CLEANUP_WAIT_MS 5000

/* What of the host the VMM sees (read-only; Debian's merged /usr): its
 * libraries and QEMU's modules, the ELF interpreter's link, its firmware.
 * No shell and no other program, nothing of /etc. The VMM's binary is
 * bound by the jailer. */
static const char *const vmm_binds[] = {"/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/share/qemu"};

static struct {
	char *jailer, *seccomp, *cgroup_parent;
	uint32_t uid_base, uid_count;
	unsigned orphan_timeout_s;
	uint8_t *used; /* one byte per uid of the range */
	uint32_t next; /* where the search for a free uid starts */
} jail;
static pthread_mutex_t jail_lock = PTHREAD_MUTEX_INITIALIZER;

/* Runs argv (no shell), stdout and stderr into out (bounded, NUL-terminated),
 * within JAIL_RUN_TIMEOUT_MS. Returns its exit status, or -errno. */
static int run_capture(char *const argv[], char *out, size_t outsize)
{
	int pipefd[2];
	if (pipe2(pipefd, O_CLOEXEC) < 0)
		return -errno;
	pid_t pid = fork();
	if (pid < 0) {
		int r = -errno;
		close(pipefd[0]);
		close(pipefd[1]);
		return r;
	}
	if (pid == 0) {
		int nullfd = open("/dev/null", O_RDONLY);
		if (nullfd < 0 || dup2(nullfd, 0) < 0 || dup2(pipefd[1], 1) < 0 || dup2(pipefd[1], 2) < 0)
			_exit(127);
		close_range(3, ~0u, 0);
		sigset_t none;
		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		execv(argv[0], argv);
		_exit(127);
	}
	close(pipefd[1]);
	size_t len = 0;
	uint64_t deadline = now_ms_monotonic() + JAIL_RUN_TIMEOUT_MS;
	for (;;) {
		uint64_t now = now_ms_monotonic();
		if (now >= deadline) {
			kill(pid, SIGKILL);
			break;
		}
		struct pollfd p = {.fd = pipefd[0], .events = POLLIN};
		int pr = poll(&p, 1, (int)(deadline - now));
		if (pr < 0 && errno == EINTR)
			continue;
		if (pr <= 0)
			continue;
		char buf[1024];
		ssize_t n = read(pipefd[0], buf, sizeof(buf));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		size_t keep = (size_t)n < outsize - 1 - len ? (size_t)n : outsize - 1 - len;
		memcpy(out + len, buf, keep);
		len += keep;
	}
	out[len] = '\0';
	close(pipefd[0]);
	int status;
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			return -errno;
	if (WIFEXITED(status))
		return WEXITSTATUS(status);
	return -EINTR;
}

static bool cgroup_parent_valid(const char *s)
{
	size_t n = strlen(s);
	if (n < 1 || n > 63 || !((s[0] >= 'a' && s[0] <= 'z') || (s[0] >= '0' && s[0] <= '9')))
		return false;
	for (size_t i = 1; i < n; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '_' || s[i] == '-'))
			return false;
	return true;
}

int jail_init(const struct jail_settings *s, struct al_error *err)
{
	if (!s->jailer || s->jailer[0] != '/' || access(s->jailer, X_OK) < 0)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, ENOENT,
		                    "the jailer %s is not an executable absolute path",
		                    s->jailer ? s->jailer : "(none)");
	struct stat st;
	if (!s->seccomp || s->seccomp[0] != '/' || stat(s->seccomp, &st) < 0 || !S_ISREG(st.st_mode))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, ENOENT,
		                    "the VMM's seccomp profile %s is not a file (--seccomp-profile)",
		                    s->seccomp ? s->seccomp : "(none)");
	if (s->orphan_timeout_s > JAIL_ORPHAN_TIMEOUT_S_MAX)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, ERANGE, "--orphan-timeout-s %u: at most %u",
		                    s->orphan_timeout_s, JAIL_ORPHAN_TIMEOUT_S_MAX);
	if (!cgroup_parent_valid(s->cgroup_parent))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "--cgroup-parent %s: must match [a-z0-9][a-z0-9_-]{0,62}", s->cgroup_parent);
	/* Never 0-999 (system), never 65534 (nobody) or -1, and never wrapping. */
	if (s->uid_count < 1 || s->uid_count > JAIL_UID_COUNT_MAX || s->uid_base < 1000 ||
	    (uint64_t)s->uid_base + s->uid_count > UINT32_MAX - 1 ||
	    (s->uid_base <= 65534 && s->uid_base + s->uid_count > 65534))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, ERANGE,
		                    "--jail-uid-base %" PRIu32 " --jail-uid-count %" PRIu32
		                    ": the range must start at 1000 or more, not contain 65534 (nobody), end "
		                    "below 2^32-1 and hold 1 to %u ids",
		                    s->uid_base, s->uid_count, JAIL_UID_COUNT_MAX);
	char out[JAIL_OUTPUT_MAX];
	char *argv[] = {(char *)s->jailer, "--check", NULL};
	int r = run_capture(argv, out, sizeof(out));
	char *save = NULL;
	for (char *line = strtok_r(out, "\n", &save); line; line = strtok_r(NULL, "\n", &save))
		log_info("jailer check: %s", line);
	if (r != 0)
		return al_error_set(err, AL_ERR_INTERNAL, r < 0 ? -r : EPERM,
		                    "this host cannot jail a VMM (%s --check failed; see the log above): "
		                    "airlockd does not run VMMs without their jail",
		                    s->jailer);
	pthread_mutex_lock(&jail_lock);
	jail.jailer = xstrdup(s->jailer);
	jail.seccomp = xstrdup(s->seccomp);
	jail.cgroup_parent = xstrdup(s->cgroup_parent);
	jail.uid_base = s->uid_base;
	jail.uid_count = s->uid_count;
	jail.orphan_timeout_s = s->orphan_timeout_s;
	jail.used = xcalloc(s->uid_count, 1);
	jail.next = 0;
	pthread_mutex_unlock(&jail_lock);
	return 0;
}

void jail_shutdown(void)
{
	pthread_mutex_lock(&jail_lock);
	free(jail.jailer);
	free(jail.seccomp);
	free(jail.cgroup_parent);
	free(jail.used);
	jail.jailer = jail.seccomp = jail.cgroup_parent = NULL;
	jail.used = NULL;
	pthread_mutex_unlock(&jail_lock);
}

int jail_uid_take(uint32_t *ret, struct al_error *err)
{
	pthread_mutex_lock(&jail_lock);
	for (uint32_t i = 0; jail.used && i < jail.uid_count; i++) {
		uint32_t k = (jail.next + i) % jail.uid_count;
		if (!jail.used[k]) {
			jail.used[k] = 1;
			/* Round robin: a uid just given back is the last to be reused. */
			jail.next = (k + 1) % jail.uid_count;
			*ret = jail.uid_base + k;
			pthread_mutex_unlock(&jail_lock);
			return 0;
		}
	}
	uint32_t count = jail.uid_count;
	pthread_mutex_unlock(&jail_lock);
	return al_error_set(err, AL_ERR_UNAVAILABLE, EUSERS,
	                    "all %" PRIu32 " sandbox uids are in use (--jail-uid-count)", count);
}

int jail_uid_reserve(uint32_t uid)
{
	pthread_mutex_lock(&jail_lock);
	int r = 0;
	if (!jail.used || uid < jail.uid_base || uid - jail.uid_base >= jail.uid_count)
		r = -ERANGE;
	else if (jail.used[uid - jail.uid_base])
		r = -EEXIST;
	else
		jail.used[uid - jail.uid_base] = 1;
	pthread_mutex_unlock(&jail_lock);
	return r;
}

/* "Uid:\treal\teffective\tsaved\tfs": the real one is the jail's. */
static bool reserve_uid_of(long pid, const char *status, void *ctx)
{
	(void)pid;
	(void)ctx;
	const char *u = strstr(status, "\nUid:");
	unsigned long uid;
	if (u && sscanf(u + 5, "%lu", &uid) == 1 && uid <= UINT32_MAX)
		(void)jail_uid_reserve((uint32_t)uid);
	return false;
}

void jail_uid_reserve_running(void)
{
	proc_each_file("status", 64 * 1024, reserve_uid_of, NULL);
}

void jail_uid_put(uint32_t uid)
{
	pthread_mutex_lock(&jail_lock);
	if (jail.used && uid >= jail.uid_base && uid - jail.uid_base < jail.uid_count)
		jail.used[uid - jail.uid_base] = 0;
	pthread_mutex_unlock(&jail_lock);
}

void jail_spec(struct vmm_jail *j, uint32_t uid, unsigned vcpus, unsigned memory_mib, uint64_t disk_mib, bool kvm)
{
	*j = (struct vmm_jail){
	    .uid = uid,
	    .memory_limit_mib = (uint64_t)memory_mib + JAIL_VMM_OVERHEAD_MIB,
	    .cpu_quota_pct = (vcpus + 1) * 100,
	    .pids_max = JAIL_PIDS_MAX,
	    /* Its disk and a snapshot of its memory are the largest files it writes. */
	    .fsize_bytes = (disk_mib + memory_mib + 1024) << 20,
	    .nofile = JAIL_NOFILE,
	    .kvm = kvm,
	    .tun = true,
	};
}

/* An argv under construction: offsets into one arena of strings (the
 * arena moves as it grows; pointers are made at the end). */
struct argv_builder {
	size_t *off;
	size_t n, cap;
	char *arena;
	size_t used, size;
};

static void ab_add(struct argv_builder *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void ab_add(struct argv_builder *b, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0)
		abort();
	if (b->used + (size_t)n + 1 > b->size) {
		b->size = (b->size ? b->size * 2 : 1024) + (size_t)n + 1;
		b->arena = xrealloc(b->arena, b->size);
	}
	va_start(ap, fmt);
	vsnprintf(b->arena + b->used, (size_t)n + 1, fmt, ap);
	va_end(ap);
	if (b->n == b->cap) {
		b->cap = b->cap ? b->cap * 2 : 64;
		b->off = xrealloc(b->off, b->cap * sizeof(*b->off));
	}
	b->off[b->n++] = b->used;
	b->used += (size_t)n + 1;
}

/* The NULL-terminated vector; the builder's arena goes to *ret_arena. */
static char **ab_finish(struct argv_builder *b, char **ret_arena)
{
	char **v = xcalloc(b->n + 1, sizeof(*v));
	for (size_t i = 0; i < b->n; i++)
		v[i] = b->arena + b->off[i];
	free(b->off);
	*ret_arena = b->arena;
	return v;
}

char **jail_argv(const char *id, const char *root, const struct vmm_jail *j, int netns_fd, const int *keep,
                 size_t nkeep, char *const vmm_argv[], char **ret_arena)
{
	struct argv_builder b = {0};
	pthread_mutex_lock(&jail_lock);
	ab_add(&b, "%s", jail.jailer);
	ab_add(&b, "--id");
	ab_add(&b, "%s", id);
	ab_add(&b, "--root");
	ab_add(&b, "%s", root);
	ab_add(&b, "--uid");
	ab_add(&b, "%" PRIu32, j->uid);
	ab_add(&b, "--gid");
	ab_add(&b, "%" PRIu32, j->uid);
	ab_add(&b, "--cgroup-parent");
	ab_add(&b, "%s", jail.cgroup_parent);
	if (!j->own_seccomp) {
		ab_add(&b, "--seccomp");
		ab_add(&b, "%s", jail.seccomp);
	}
	pthread_mutex_unlock(&jail_lock);
	ab_add(&b, "--memory-mib");
	ab_add(&b, "%" PRIu64, j->memory_limit_mib);
	ab_add(&b, "--cpu-quota-pct");
	ab_add(&b, "%u", j->cpu_quota_pct);
	if (j->cpu_weight) {
		ab_add(&b, "--cpu-weight");
		ab_add(&b, "%u", j->cpu_weight);
	}
	ab_add(&b, "--pids-max");
	ab_add(&b, "%u", j->pids_max);
	ab_add(&b, "--rlimit-fsize");
	ab_add(&b, "%" PRIu64, j->fsize_bytes);
	ab_add(&b, "--rlimit-nofile");
	ab_add(&b, "%u", j->nofile);
	/* Per uid, so per sandbox: the same bound as the cgroup's. */
	ab_add(&b, "--rlimit-nproc");
	ab_add(&b, "%u", j->pids_max);
	ab_add(&b, "--new-pid-ns");
	/* The supervisor's files, root's and outside the jail (SECURITY: the
	 * VMM can neither renew its own lease nor say how it ended). */
	if (j->sandbox_dir) {
		ab_add(&b, "--exit-file");
		ab_add(&b, "%s/%s", j->sandbox_dir, JAIL_EXIT_RECORD);
		pthread_mutex_lock(&jail_lock);
		unsigned orphan = jail.orphan_timeout_s;
		pthread_mutex_unlock(&jail_lock);
		if (orphan) {
			ab_add(&b, "--lease");
			ab_add(&b, "%s/%s", j->sandbox_dir, JAIL_LEASE);
			ab_add(&b, "--orphan-timeout-s");
			ab_add(&b, "%u", orphan);
		}
	}
	for (size_t i = 0; i < ARRAY_SIZE(vmm_binds); i++) {
		struct stat st;
		if (stat(vmm_binds[i], &st) == 0) {
			ab_add(&b, "--bind-ro");
			ab_add(&b, "%s", vmm_binds[i]);
		}
	}
	if (j->kvm) {
		ab_add(&b, "--dev");
		ab_add(&b, "/dev/kvm");
	}
	if (j->tun) {
		ab_add(&b, "--dev");
		ab_add(&b, "/dev/net/tun");
	}
	if (netns_fd >= 0) {
		ab_add(&b, "--netns-fd");
		ab_add(&b, "%d", netns_fd);
	}
	for (size_t i = 0; i < nkeep; i++) {
		ab_add(&b, "--keep-fd");
		ab_add(&b, "%d", keep[i]);
	}
	ab_add(&b, "--");
	for (size_t i = 0; vmm_argv[i]; i++)
		ab_add(&b, "%s", vmm_argv[i]);
	return ab_finish(&b, ret_arena);
}

unsigned jail_orphan_timeout_s(void)
{
	pthread_mutex_lock(&jail_lock);
	unsigned t = jail.orphan_timeout_s;
	pthread_mutex_unlock(&jail_lock);
	return t;
}

unsigned jail_lease_period_ms(unsigned timeout_s)
{
	uint64_t p = timeout_s ? (uint64_t)timeout_s * 1000u / 4u : 60000u;
	return (unsigned)MIN(MAX(p, 250u), 60000u);
}

unsigned jail_orphan_timeout_of(pid_t pid)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/cmdline", (int)pid);
	cleanup_free char *buf = NULL;
	size_t len;
	if (pid <= 0 || read_file_limited(path, 256 * 1024, &buf, &len) < 0)
		return 0;
	/* The jailer's own options end at "--"; the VMM's arguments are not its. */
	for (size_t i = 0; i < len && strcmp(buf + i, "--"); i += strlen(buf + i) + 1) {
		size_t next = i + strlen(buf + i) + 1;
		uint64_t v;
		if (!strcmp(buf + i, "--orphan-timeout-s") && next < len && parse_u64(buf + next, &v) == 0 &&
		    v <= JAIL_ORPHAN_TIMEOUT_S_MAX)
			return (unsigned)v;
	}
	return 0;
}

int jail_lease_touch(const char *dir, bool create)
{
	cleanup_free char *path = xasprintf("%s/%s", dir, JAIL_LEASE);
	if (create) {
		cleanup_close int fd = open(path, O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
		if (fd < 0)
			return -errno;
	}
	return utimensat(AT_FDCWD, path, NULL, AT_SYMLINK_NOFOLLOW) < 0 ? -errno : 0;
}

int jail_cleanup(const char *id, struct al_error *err)
{
	pthread_mutex_lock(&jail_lock);
	if (!jail.jailer) {
		pthread_mutex_unlock(&jail_lock);
		return 0;
	}
	cleanup_free char *jailer = xstrdup(jail.jailer);
	cleanup_free char *parent = xstrdup(jail.cgroup_parent);
	pthread_mutex_unlock(&jail_lock);
	char *argv[] = {jailer, "--cleanup", "--id", (char *)id, "--cgroup-parent", parent, NULL};
	char out[JAIL_OUTPUT_MAX];
	/* The VMM dies with its jailer (PR_SET_PDEATHSIG, and pid 1 of its
	 * namespace takes every other process with it): its cgroup empties a
	 * moment after the jailer is reaped, which --cleanup waits for (a
	 * quarter of a second); run again while it is longer. */
	uint64_t deadline = now_ms_monotonic() + JAIL_CLEANUP_WAIT_MS;
	for (;;) {
		int r = run_capture(argv, out, sizeof(out));
		if (r == 0)
			return 0;
		if (now_ms_monotonic() > deadline || !strstr(out, "still has processes")) {
			char *nl = strchr(out, '\n');
			if (nl)
				*nl = '\0';
			return al_error_set(err, AL_ERR_INTERNAL, EBUSY, "cannot remove the cgroup of %s: %s", id,
			                    out[0] ? out : "the jailer failed");
		}
		usleep(50 * 1000);
	}
}

void jail_each_process_below(const char *dir, void (*fn)(long pid, char *cwd, void *ctx), void *ctx)
{
	DIR *d = opendir("/proc");
	struct dirent *de;
	size_t dlen = strlen(dir);
	while (d && (de = readdir(d))) {
		long pid;
		if (parse_int_range(de->d_name, 2, INT32_MAX, &pid) < 0)
			continue;
		char link[64], cwd[PATH_MAX];
		snprintf(link, sizeof(link), "/proc/%ld/cwd", pid);
		ssize_t n = readlink(link, cwd, sizeof(cwd) - 1);
		if (n <= 0)
			continue;
		cwd[n] = '\0';
		if (!strncmp(cwd, dir, dlen) && cwd[dlen] == '/')
			fn(pid, cwd, ctx);
	}
	if (d)
		closedir(d);
}

struct left_below {
	const char *id_prefix, *what;
};

/* A jailer found below the directory: killed when its --id has the prefix. */
static void kill_left(long pid, char *cwd, void *ctx)
{
	(void)cwd;
	const struct left_below *lb = ctx;
	char link[64];
	snprintf(link, sizeof(link), "/proc/%ld/cmdline", pid);
	cleanup_free char *cmd = NULL;
	size_t len = 0;
	if (read_file_limited(link, 64 * 1024, &cmd, &len) < 0)
		return;
	const char *id = NULL;
	for (size_t i = 0; i + 1 < len; i += strlen(cmd + i) + 1)
		if (!strcmp(cmd + i, "--id") && i + 5 < len)
			id = cmd + i + 5; /* past "--id" and its NUL */
	if (!id || strncmp(id, lb->id_prefix, strlen(lb->id_prefix)))
		return;
	log_info("killing the %s VMM %ld (%s) a previous airlockd left", lb->what, pid, id);
	kill((pid_t)pid, SIGKILL);
	struct al_error e = {0};
	if (jail_cleanup(id, &e) < 0)
		log_error("%s", e.message);
}

void jail_kill_left_below(const char *dir, const char *id_prefix, const char *what)
{
	struct left_below lb = {.id_prefix = id_prefix, .what = what};
	jail_each_process_below(dir, kill_left, &lb);
}

bool jail_failure_in_log(int log_dirfd, const char *log_name, char *buf, size_t size)
{
	cleanup_close int fd = openat(log_dirfd, log_name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
	if (fd < 0)
		return false;
	/* The jailer's line is the first thing in a fresh log, or comes after
	 * earlier lives' lines: look at the last 16 KiB. */
	struct stat st;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
		return false;
	off_t from = st.st_size > 16384 ? st.st_size - 16384 : 0;
	char text[16385];
	ssize_t n = pread(fd, text, sizeof(text) - 1, from);
	if (n <= 0)
		return false;
	text[n] = '\0';
	const char *hit = NULL;
	for (const char *p = text; (p = strstr(p, "airlock-jailer: ")); p++)
		if (p == text || p[-1] == '\n')
			hit = p;
	if (!hit)
		return false;
	size_t len = strcspn(hit, "\n");
	if (len >= size)
		len = size - 1;
	memcpy(buf, hit, len);
	buf[len] = '\0';
	return true;
}

/* The mount point of the hierarchy that has the cpu controller: a v1
 * "cgroup" mount with the cpu option (*ret_v2 false), else the cgroup2
 * mount (the jailer chooses the same way: jailer-cgroup.c). */
static int cpu_cgroup_mount(char *out, size_t size, bool *ret_v2)
{
	FILE *f = fopen("/proc/self/mountinfo", "re");
	if (!f)
		return -errno;
	char line[4096];
	bool found_v1 = false, found_v2 = false;
	char v2[PATH_MAX] = "";
	while (!found_v1 && fgets(line, sizeof(line), f)) {
		/* "ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS ... - FSTYPE SOURCE SUPEROPTS" */
		char mnt[PATH_MAX], fstype[32], superopts[512];
		const char *dash = strstr(line, " - ");
		if (!dash || sscanf(line, "%*s %*s %*s %*s %4095s", mnt) != 1 ||
		    sscanf(dash + 3, "%31s %*s %511s", fstype, superopts) != 2)
			continue;
		if (!strcmp(fstype, "cgroup2") && !found_v2) {
			strlcpy_al(v2, mnt, sizeof(v2));
			found_v2 = true;
		} else if (!strcmp(fstype, "cgroup")) {
			for (char *save = NULL, *o = strtok_r(superopts, ",", &save); o; o = strtok_r(NULL, ",", &save))
				if (!strcmp(o, "cpu")) {
					strlcpy_al(out, mnt, size);
					found_v1 = true;
				}
		}
	}
	fclose(f);
	if (found_v1) {
		*ret_v2 = false;
		return 0;
	}
	if (!found_v2)
		return -ENOENT;
	strlcpy_al(out, v2, size);
	*ret_v2 = true;
	return 0;
}

int jail_cpu_weight_set(const char *id, unsigned weight, struct al_error *err)
{
	/* Found once (a hand-out is on a create's path; the mounts do not move). */
	static char mnt[PATH_MAX];
	static bool v2, found;
	pthread_mutex_lock(&jail_lock);
	int r = found ? 0 : cpu_cgroup_mount(mnt, sizeof(mnt), &v2);
	found = r == 0;
	cleanup_free char *path =
	    found ? xasprintf("%s/%s/%s/%s", mnt, jail.cgroup_parent, id, v2 ? "cpu.weight" : "cpu.shares") : NULL;
	pthread_mutex_unlock(&jail_lock);
	if (r < 0)
		return al_error_set(err, AL_ERR_INTERNAL, -r,
		                    "cannot find the cgroup hierarchy with the cpu controller");
	char v[32];
	snprintf(v, sizeof(v), "%u", v2 ? weight : MAX(2u, weight * 1024u / 100u));
	cleanup_close int fd = open(path, O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0 || write_full(fd, v, strlen(v)) < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "cannot set %s to %s: %m", path, v);
	return 0;
}
