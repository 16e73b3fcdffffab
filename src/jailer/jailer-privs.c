/* SPDX-License-Identifier: Apache-2.0 */
/* Steps 2, 4, 5 and 7: what the VMM inherits (environment, fds, signals),
 * its rlimits, its network namespace, and its credentials. */
#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>

#include "jailer.h"
#include "util.h"

/* ------------------------------------------------------------ step 2 */

static int cmp_int(const void *a, const void *b)
{
	int x = *(const int *)a, y = *(const int *)b;
	return (x > y) - (x < y);
}

/* SECURITY: the VMM gets fds 0-2, --keep-fd ones, and nothing else the
 * caller happened to leave open (the jailer's own fds are O_CLOEXEC). */
static int close_all_but(int *keep, size_t n, struct al_error *err)
{
	qsort(keep, n, sizeof(int), cmp_int);
	unsigned first = 3;
	for (size_t i = 0; i <= n; i++) {
		unsigned upto = i < n ? (unsigned)keep[i] : ~0u;
		if (upto > first && close_range(first, upto - 1, 0) < 0)
			return al_error_set(err, AL_ERR_INTERNAL, errno, "close_range(%u, %u): %m", first, upto - 1);
		if (i < n)
			first = (unsigned)keep[i] + 1;
	}
	return 0;
}

int jail_env_reset(const struct jail_config *cfg, const struct jail_validated *v, struct al_error *err)
{
	if (clearenv() != 0 || setenv("PATH", JAIL_PATH_ENV, 1) < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno ? errno : ENOMEM, "cannot reset the environment");
	/* Known file modes for the jail's directories and nodes; main sets the
	 * VMM's own umask just before execve. */
	umask(0022);

	int keep[JAIL_MAX_KEEP_FDS + JAIL_MAX_BINDS + 5];
	size_t n = 0;
	if (cfg->netns_fd >= 0)
		keep[n++] = cfg->netns_fd;
	for (size_t i = 0; i < cfg->n_keep_fds; i++)
		keep[n++] = cfg->keep_fds[i];
	keep[n++] = v->root_fd;
	if (v->vmm_fd >= 0)
		keep[n++] = v->vmm_fd;
	for (size_t i = 0; i < cfg->n_binds; i++)
		keep[n++] = v->bind_fds[i];
	/* The supervisor's (the pid namespace's child closes them). */
	if (v->lease_dir_fd >= 0)
		keep[n++] = v->lease_dir_fd;
	if (v->exit_dir_fd >= 0)
		keep[n++] = v->exit_dir_fd;
	int r = close_all_but(keep, n, err);
	if (r < 0)
		return r;
	/* The caller's fds meant for the VMM survive its execve. */
	for (size_t i = 0; i < cfg->n_keep_fds; i++) {
		int flags = fcntl(cfg->keep_fds[i], F_GETFD);
		if (flags < 0 || fcntl(cfg->keep_fds[i], F_SETFD, flags & ~FD_CLOEXEC) < 0)
			return al_error_set(err, AL_ERR_INTERNAL, errno, "--keep-fd %d: cannot clear FD_CLOEXEC: %m",
			                    cfg->keep_fds[i]);
	}

	/* Ignored signals and the mask survive execve: start the VMM from the
	 * defaults, whatever the caller had. */
	for (int sig = 1; sig < NSIG; sig++)
		if (sig != SIGKILL && sig != SIGSTOP)
			(void)signal(sig, SIG_DFL);
	sigset_t none;
	sigemptyset(&none);
	if (sigprocmask(SIG_SETMASK, &none, NULL) < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "cannot clear the signal mask: %m");
	return 0;
}

/* ------------------------------------------------------------ step 4 */

static int set_limit(int resource, const char *name, uint64_t value, struct al_error *err)
{
	struct rlimit rl = {.rlim_cur = (rlim_t)value, .rlim_max = (rlim_t)value};
	if (setrlimit(resource, &rl) < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "setrlimit(%s, %llu): %m", name,
		                    (unsigned long long)value);
	return 0;
}

int jail_rlimits_apply(const struct jail_config *cfg, struct al_error *err)
{
	int r = 0;
	/* No core files: a VMM's memory is the guest's memory. */
	r = set_limit(RLIMIT_CORE, "RLIMIT_CORE", 0, err);
	if (r >= 0 && cfg->rlimit_fsize != JAIL_RLIMIT_UNSET)
		r = set_limit(RLIMIT_FSIZE, "RLIMIT_FSIZE", cfg->rlimit_fsize, err);
	if (r >= 0 && cfg->rlimit_nofile != JAIL_RLIMIT_UNSET)
		r = set_limit(RLIMIT_NOFILE, "RLIMIT_NOFILE", cfg->rlimit_nofile, err);
	if (r >= 0 && cfg->rlimit_nproc != JAIL_RLIMIT_UNSET)
		r = set_limit(RLIMIT_NPROC, "RLIMIT_NPROC", cfg->rlimit_nproc, err);
	return r;
}

/* ------------------------------------------------------------ step 5 */

int jail_netns_join(const struct jail_config *cfg, struct al_error *err)
{
	if (cfg->netns_fd < 0)
		return 0;
	/* SECURITY: the sandbox's namespace is its only network (its one way
	 * out is the egress gateway); setns with CLONE_NEWNET also proves the
	 * fd is a network namespace. */
	if (setns(cfg->netns_fd, CLONE_NEWNET) < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno,
		                    "--netns-fd %d: cannot join (not a network namespace?): %m", cfg->netns_fd);
	struct stat want, now;
	if (fstat(cfg->netns_fd, &want) < 0 || stat("/proc/self/ns/net", &now) < 0 || want.st_ino != now.st_ino ||
	    want.st_dev != now.st_dev)
		return al_error_set(err, AL_ERR_INTERNAL, EIO, "--netns-fd %d: not in that namespace after setns",
		                    cfg->netns_fd);
	close(cfg->netns_fd);
	return 0;
}

/* ------------------------------------------------------------ step 7 */

static int cap_get(struct __user_cap_data_struct data[2])
{
	struct __user_cap_header_struct hdr = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
	return (int)syscall(SYS_capget, &hdr, data);
}

static int cap_set(struct __user_cap_data_struct data[2])
{
	struct __user_cap_header_struct hdr = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
	return (int)syscall(SYS_capset, &hdr, data);
}

static int drop_capability_sets(struct al_error *err)
{
	/* Bounding set: loop until the kernel says the number is past its last
	 * capability, so capabilities newer than our headers go too. */
	for (int cap = 0;; cap++) {
		if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) == 0)
			continue;
		if (errno == EINVAL && cap > 0)
			break;
		return al_error_set(err, AL_ERR_INTERNAL, errno, "cannot drop capability %d from the bounding set: %m",
		                    cap);
	}
	if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "cannot clear the ambient capabilities: %m");
	struct __user_cap_data_struct data[2];
	if (cap_get(data) < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "capget: %m");
	data[0].inheritable = data[1].inheritable = 0;
	if (cap_set(data) < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "cannot clear the inheritable capabilities: %m");
	return 0;
}

/* Proof, read back from the kernel after the switch. */
static int verify_dropped(const struct jail_config *cfg, struct al_error *err)
{
	struct __user_cap_data_struct data[2];
	if (cap_get(data) < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "capget: %m");
	for (int i = 0; i < 2; i++)
		if (data[i].effective || data[i].permitted || data[i].inheritable)
			return al_error_set(err, AL_ERR_INTERNAL, EPERM,
			                    "capabilities left after the switch (eff %08x prm %08x inh %08x)",
			                    data[i].effective, data[i].permitted, data[i].inheritable);
	for (int cap = 0; prctl(PR_CAPBSET_READ, cap, 0, 0, 0) >= 0; cap++)
		if (prctl(PR_CAPBSET_READ, cap, 0, 0, 0) != 0 ||
		    prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_IS_SET, cap, 0, 0) != 0)
			return al_error_set(err, AL_ERR_INTERNAL, EPERM,
			                    "capability %d left in the bounding or ambient set", cap);
	uid_t ru, eu, su;
	gid_t rg, eg, sg;
	if (getresuid(&ru, &eu, &su) < 0 || getresgid(&rg, &eg, &sg) < 0 || ru != cfg->uid || eu != cfg->uid ||
	    su != cfg->uid || rg != cfg->gid || eg != cfg->gid || sg != cfg->gid || getgroups(0, NULL) != 0)
		return al_error_set(err, AL_ERR_INTERNAL, EPERM, "uid/gid/groups are not %u/%u/none after the switch",
		                    (unsigned)cfg->uid, (unsigned)cfg->gid);
	if (prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) != 1)
		return al_error_set(err, AL_ERR_INTERNAL, EPERM, "no_new_privs is not set");
	return 0;
}

int jail_privileges_drop(const struct jail_config *cfg, struct al_error *err)
{
	/* SECURITY: no_new_privs first: from here no execve (setuid bits, file
	 * capabilities) can give back what is dropped below, and it is what
	 * lets an unprivileged process install the seccomp filter. */
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "cannot set no_new_privs: %m");
	int r = drop_capability_sets(err);
	if (r < 0)
		return r;
	if (setgroups(0, NULL) < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "setgroups(0): %m");
	if (setresgid(cfg->gid, cfg->gid, cfg->gid) < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "setresgid(%u): %m", (unsigned)cfg->gid);
	/* Leaving uid 0 (without SECBIT_KEEP_CAPS) empties the permitted and
	 * effective sets. */
	if (setresuid(cfg->uid, cfg->uid, cfg->uid) < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "setresuid(%u): %m", (unsigned)cfg->uid);
	return verify_dropped(cfg, err);
}

void jail_namespaces_report(FILE *out, bool *ret_ok)
{
	static const char *const names[] = {"mnt", "ipc", "uts", "pid", "net", "cgroup", "user"};
	char line[128] = "";
	size_t off = 0;
	bool ok = true;
	for (size_t i = 0; i < ARRAY_SIZE(names); i++) {
		char path[64];
		snprintf(path, sizeof(path), "/proc/self/ns/%s", names[i]);
		bool have = access(path, F_OK) == 0;
		/* The jail needs the first five. */
		if (!have && i < 5)
			ok = false;
		if (have)
			off += (size_t)snprintf(line + off, sizeof(line) - off, "%s%s", off ? "," : "", names[i]);
	}
	fprintf(out, "namespaces=%s\n", line);
	*ret_ok = ok;
}
