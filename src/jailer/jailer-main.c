/* SPDX-License-Identifier: Apache-2.0 */
/* airlock-jailer: builds one VMM's jail and execs the VMM in it. One-shot;
 * every step fails closed with one line "airlock-jailer: STEP: why" on stderr
 * and exit status 1, and a failure leaves no cgroup behind (as far as the
 * jailer still has the privilege to remove it). docs/jailer.md. */
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>

#include "airlock/jailer.h"
#include "jailer.h"
#include "util.h"

extern char **environ;

static int report(const char *step, const struct al_error *err)
{
	fprintf(stderr, "airlock-jailer: %s: %s\n", step, err->message);
	return 1;
}

/* A failure after the cgroup exists: leave nothing behind. Once the
 * privileges are gone the directories can no longer be removed here. */
static int report_cg(const char *step, const struct al_error *err, struct jail_cgroup *cg)
{
	bool root = geteuid() == 0;
	if (root)
		jail_cgroup_abandon(cg);
	fprintf(stderr, "airlock-jailer: %s: %s%s%s%s\n", step, err->message,
	        root ? "" : " (the cgroup is left behind: airlock-jailer --cleanup --id ", root ? "" : cg->id,
	        root ? "" : ")");
	return 1;
}

/* fds 0-2 must be open, or the jailer's own opens would land on them and
 * reach the VMM as its stdio. */
static void ensure_std_fds(void)
{
	for (int fd = 0; fd < 3; fd++)
		if (fcntl(fd, F_GETFD) < 0) {
			int n = open("/dev/null", O_RDWR);
			if (n >= 0 && n != fd) {
				dup2(n, fd);
				close(n);
			}
		}
}

/* ------------------------------------------------------------ --check */

static int run_check(void)
{
	struct al_error err = {0};
	struct jail_cgroup_host host;
	bool ok = true;
	if (jail_cgroup_detect(&host, &err) < 0)
		return report("check", &err);
	int versions = 0;
	for (int c = 0; c < JAIL_CG__COUNT; c++) {
		if (host.version[c]) {
			printf("cgroup.%s=v%d:%s\n", jail_cg_names[c], host.version[c], host.mount[c]);
			versions |= host.version[c];
		} else {
			printf("cgroup.%s=missing\n", jail_cg_names[c]);
			ok = false;
		}
	}
	printf("cgroup=%s\n", versions == 3 ? "hybrid" : versions == 2 ? "v2" : versions == 1 ? "v1" : "none");
	if (host.version[JAIL_CG_MEMORY] == 1) {
		char memsw[JAIL_CG_MOUNT_MAX + 40];
		snprintf(memsw, sizeof(memsw), "%s/memory.memsw.limit_in_bytes", host.mount[JAIL_CG_MEMORY]);
		printf("cgroup.memory.swap=%s\n", access(memsw, F_OK) == 0 ? "memsw" : "not-accounted");
	} else if (host.version[JAIL_CG_MEMORY] == 2) {
		printf("cgroup.memory.swap=swap.max\n");
	}
	bool part;
	jail_seccomp_report(stdout, &part);
	ok &= part;
	jail_namespaces_report(stdout, &part);
	ok &= part;
	printf("ok=%s\n", ok ? "yes" : "no");
	return ok ? 0 : 1;
}

/* ------------------------------------------------------------ --cleanup */

/* A VMM killed with its jailer leaves its cgroup a moment later (its
 * memory is being torn down): waited for here, by reading cgroup.procs,
 * rather than by the caller running --cleanup again. */
#define CLEANUP_SETTLE_MS 250
#define CLEANUP_POLL_MS 2

static int run_cleanup(const struct jail_config *cfg)
{
	struct al_error err = {0};
	struct jail_cgroup_host host;
	if (jail_cgroup_detect(&host, &err) < 0)
		return report("cleanup", &err);
	uint64_t deadline = now_ms_monotonic() + CLEANUP_SETTLE_MS;
	int r;
	while ((r = jail_cgroup_remove(&host, cfg->cgroup_parent, cfg->id, &err)) == -EBUSY &&
	       now_ms_monotonic() < deadline) {
		err = (struct al_error){0};
		poll(NULL, 0, CLEANUP_POLL_MS);
	}
	return r < 0 ? report("cleanup", &err) : 0;
}

/* ------------------------------------------------------------ --new-pid-ns */

struct pidns_child {
	int failed_wr; /* the child writes one byte here when a jail step failed */
	int alive_rd;  /* hangs up when the supervising parent is gone */
};

static const int forwarded[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};

/* What the supervising parent holds. */
struct supervisor {
	pid_t child;
	int failed_rd;
	struct jail_cgroup *cg;
	const sigset_t *set;
	bool has_lease;
	struct jail_lease lease;
	int exit_dir_fd; /* -1: no --exit-file */
	const char *exit_name;
};

/* The next signal, or 0 when the lease was looked at meanwhile and nobody
 * will re-attach: then the VMM is killed (once; its end is waited for like
 * any other). */
static int supervise_wait(struct supervisor *s, bool *orphaned)
{
	siginfo_t si;
	if (!s->has_lease || *orphaned)
		return sigwaitinfo(s->set, &si);
	uint64_t period = jail_lease_period_ms(s->lease.timeout_ms / 1000u);
	struct timespec ts = {.tv_sec = (time_t)(period / 1000u), .tv_nsec = (long)(period % 1000u) * 1000000L};
	int sig = sigtimedwait(s->set, &si, &ts);
	char why[PATH_MAX + 128];
	if (sig < 0 && errno == EAGAIN && jail_lease_check(&s->lease, now_ms_monotonic(), why, sizeof(why)) < 0) {
		*orphaned = true;
		fprintf(stderr,
		        AIRLOCK_JAILER_SUPERVISOR_PREFIX "%s: no airlockd will re-attach to the VMM (pid %d); "
		                                         "stopping it\n",
		        why, (int)s->child);
		kill(s->child, SIGKILL);
	}
	return sig;
}

/* The parent stays outside the new pid namespace: it waits for the VMM (pid 1
 * inside), forwards termination signals to it, watches the lease, removes
 * the cgroup if the child failed before exec or nobody will re-attach,
 * records how the VMM ended, and exits as the VMM did. */
static __attribute__((noreturn)) void supervise(struct supervisor *s)
{
	int status = 0;
	bool orphaned = false;
	if (s->exit_dir_fd >= 0 && unlinkat(s->exit_dir_fd, s->exit_name, 0) < 0 && errno != ENOENT)
		fprintf(stderr, AIRLOCK_JAILER_SUPERVISOR_PREFIX "cannot remove the old %s: %m\n", s->exit_name);
	for (;;) {
		int sig = supervise_wait(s, &orphaned);
		if (sig <= 0)
			continue;
		if (sig != SIGCHLD) {
			kill(s->child, sig);
			continue;
		}
		pid_t p = waitpid(s->child, &status, WNOHANG);
		if (p == s->child)
			break;
	}
	char b;
	if (read(s->failed_rd, &b, 1) == 1) {
		/* The child already said why on stderr. */
		jail_cgroup_abandon(s->cg);
		_exit(1);
	}
	/* No airlockd will remove the cgroup of an orphan. */
	if (orphaned)
		jail_cgroup_abandon(s->cg);
	if (s->exit_dir_fd >= 0)
		jail_exit_record_write(s->exit_dir_fd, s->exit_name, status);
	if (WIFEXITED(status))
		_exit(WEXITSTATUS(status));
	int sig = WTERMSIG(status);
	/* The VMM's pid in the host's namespace: the kernel's record of a
	 * seccomp kill (SIGSYS) names it, and airlockd knows only ours. */
	fprintf(stderr, AIRLOCK_JAILER_SUPERVISOR_PREFIX "the VMM (pid %d) was killed by signal %d (SIG%s)\n",
	        (int)s->child, sig, sigabbrev_np(sig) ?: "?");
	signal(sig, SIG_DFL);
	sigset_t one;
	sigemptyset(&one);
	sigaddset(&one, sig);
	sigprocmask(SIG_UNBLOCK, &one, NULL);
	raise(sig);
	_exit(128 + sig);
}

/* Returns in the child only (pid 1 of the new namespace). */
static int enter_pid_ns(const struct jail_config *cfg, struct jail_validated *v, struct jail_cgroup *cg,
                        struct pidns_child *ret, struct al_error *err)
{
	if (unshare(CLONE_NEWPID) < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "unshare(CLONE_NEWPID): %m");
	int failed[2], alive[2];
	if (pipe2(failed, O_CLOEXEC) < 0 || pipe2(alive, O_CLOEXEC) < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "pipe: %m");
	sigset_t set, old;
	sigemptyset(&set);
	for (size_t i = 0; i < ARRAY_SIZE(forwarded); i++)
		sigaddset(&set, forwarded[i]);
	sigaddset(&set, SIGCHLD);
	sigprocmask(SIG_BLOCK, &set, &old);
	pid_t pid = fork();
	if (pid < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "fork: %m");
	if (pid > 0) {
		close(failed[1]);
		close(alive[0]);
		for (size_t i = 0; i < cfg->n_keep_fds; i++)
			close(cfg->keep_fds[i]);
		struct supervisor s = {.child = pid,
		                       .failed_rd = failed[0],
		                       .cg = cg,
		                       .set = &set,
		                       .has_lease = cfg->lease_path != NULL,
		                       .exit_dir_fd = TAKE_FD(v->exit_dir_fd),
		                       .exit_name = cfg->exit_file ? jail_path_base(cfg->exit_file) : NULL};
		if (s.has_lease)
			jail_lease_start(&s.lease, TAKE_FD(v->lease_dir_fd), cfg->lease_path, cfg->orphan_timeout_s,
			                 now_ms_monotonic());
		jail_validated_release(v);
		supervise(&s);
	}
	sigprocmask(SIG_SETMASK, &old, NULL);
	close(failed[0]);
	close(alive[1]);
	*ret = (struct pidns_child){.failed_wr = failed[1], .alive_rd = alive[0]};
	return 0;
}

/* After the uid switch (which clears it): die with the parent, and check
 * that the parent did not die before this was set. */
static int bind_to_parent(const struct pidns_child *pc, struct al_error *err)
{
	if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "PR_SET_PDEATHSIG: %m");
	struct pollfd p = {.fd = pc->alive_rd, .events = POLLIN};
	if (poll(&p, 1, 0) != 0)
		return al_error_set(err, AL_ERR_INTERNAL, ECHILD, "the supervising parent has gone");
	close(pc->alive_rd);
	return 0;
}

/* ------------------------------------------------------------ the jail */

static void close_validated_fds(struct jail_validated *v)
{
	/* They name host objects; the jail must hold none (the seccomp filter
	 * is memory only and stays). */
	void *filter = TAKE_PTR(v->seccomp);
	jail_validated_release(v);
	v->seccomp = filter;
}

static int run_jail(const struct jail_config *cfg)
{
	struct al_error err = {0};
	struct jail_validated v;
	if (jail_validate(cfg, &v, &err) < 0)
		return report("validate", &err);
	if (jail_env_reset(cfg, &v, &err) < 0)
		return report("environment", &err);

	struct jail_cgroup_host host;
	struct jail_cgroup cg;
	if (jail_cgroup_detect(&host, &err) < 0 || jail_cgroup_enter(&host, cfg, &cg, &err) < 0)
		return report("cgroup", &err);
	if (jail_rlimits_apply(cfg, &err) < 0)
		return report_cg("rlimits", &err, &cg);
	if (jail_netns_join(cfg, &err) < 0)
		return report_cg("netns", &err, &cg);

	struct pidns_child pc = {.failed_wr = -1, .alive_rd = -1};
	if (cfg->new_pid_ns && enter_pid_ns(cfg, &v, &cg, &pc, &err) < 0)
		return report_cg("namespaces", &err, &cg);
	/* In the pid namespace's child from here on, a failure is reported to
	 * the parent, which removes the cgroup. */
	const char *step = "namespaces";
	int r = unshare(CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS) < 0
	            ? al_error_set(&err, AL_ERR_INTERNAL, errno, "unshare(mount, ipc, uts): %m")
	            : 0;
	if (r >= 0 && sethostname(cfg->id, strlen(cfg->id)) < 0)
		r = al_error_set(&err, AL_ERR_INTERNAL, errno, "sethostname: %m");
	if (r >= 0) {
		step = "mount";
		r = jail_mount_build(cfg, &v, &err);
		close_validated_fds(&v);
	}
	if (r >= 0) {
		step = "privileges";
		r = jail_privileges_drop(cfg, &err);
	}
	if (r >= 0 && pc.alive_rd >= 0)
		r = bind_to_parent(&pc, &err);
	/* What the VMM creates (sockets, snapshot files) is its own alone.
	 * Set before the filter: nothing but execve may follow it. */
	umask(0077);
	if (r >= 0 && v.seccomp) {
		step = "seccomp";
		r = jail_seccomp_install(v.seccomp, &err);
	}
	if (r >= 0) {
		step = "exec";
		execve(cfg->vmm_argv[0], cfg->vmm_argv, environ);
		r = al_error_set(&err, AL_ERR_INTERNAL, errno, "execve %s: %m", cfg->vmm_argv[0]);
	}
	if (pc.failed_wr >= 0) {
		report(step, &err);
		(void)write(pc.failed_wr, "x", 1);
		return 1;
	}
	return report_cg(step, &err, &cg);
}

int main(int argc, char **argv)
{
	ensure_std_fds();
	struct jail_config cfg;
	struct al_error err = {0};
	if (jail_args_parse(argc, argv, &cfg, &err) < 0)
		return report("validate", &err);
	switch (cfg.mode) {
	case JAIL_MODE_HELP:
		jail_usage(stdout);
		return 0;
	case JAIL_MODE_CHECK:
		return run_check();
	case JAIL_MODE_CLEANUP:
		return run_cleanup(&cfg);
	case JAIL_MODE_RUN:
		break;
	}
	if (geteuid() != 0) {
		al_error_set(&err, AL_ERR_UNAVAILABLE, EPERM,
		             "must run as root (it builds the jail, then drops to --uid)");
		return report("validate", &err);
	}
	return run_jail(&cfg);
}
