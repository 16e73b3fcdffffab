/* SPDX-License-Identifier: Apache-2.0 */
/* airlock-jailer: puts one VMM in a jail and execs it. The steps, in the order
 * main runs them (each fails closed with "airlock-jailer: STEP: why"):
 *   validate → environment → cgroup → rlimits → netns → namespaces/mounts →
 *   privileges → seccomp → exec
 * See docs/jailer.md for the interface and what each step proves. */
#ifndef AIRLOCK_JAILER_H
#define AIRLOCK_JAILER_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "error.h"

#define JAIL_ID_MAX 63
#define JAIL_CGROUP_PARENT_MAX 63
#define JAIL_CGROUP_PARENT_DEFAULT "airlock"
#define JAIL_MAX_BINDS 32
#define JAIL_MAX_DEVS 8
#define JAIL_MAX_KEEP_FDS 32
#define JAIL_MAX_VMM_ARGS 1024
/* Unprivileged range for the jail's uid/gid; 65534 (nobody) is shared, never unique. */
#define JAIL_ID_MIN 1000
#define JAIL_ID_NOBODY 65534
#define JAIL_CPU_QUOTA_PCT_MAX 100000 /* 1000 CPUs */
#define JAIL_CPU_WEIGHT_MAX 10000     /* cgroup v2's cpu.weight range is 1..10000 */
#define JAIL_MEMORY_MIB_MAX (UINT64_C(1) << 30)
#define JAIL_PIDS_MAX 4194304
#define JAIL_NOFILE_MIN 16
#define JAIL_NOFILE_MAX 1048576
#define JAIL_RLIMIT_UNSET UINT64_MAX
/* The only environment the VMM gets. */
#define JAIL_PATH_ENV "/usr/sbin:/usr/bin:/sbin:/bin"
/* The jail's private /tmp (tmpfs, counted in the jail's memory cgroup). */
#define JAIL_TMP_SIZE "16m"
/* A seccomp profile is a small JSON file in the repo. */
#define JAIL_SECCOMP_FILE_MAX (256 * 1024)
#define JAIL_SECCOMP_SYSCALLS_MAX 1024
#define JAIL_SYSCALL_NAME_MAX 63
/* --orphan-timeout-s: 30 days at most. */
#define JAIL_ORPHAN_TIMEOUT_S_MAX 2592000

enum jail_mode {
	JAIL_MODE_RUN,
	JAIL_MODE_CHECK,
	JAIL_MODE_CLEANUP,
	JAIL_MODE_HELP,
};

struct jail_config {
	enum jail_mode mode;
	const char *id;
	const char *root;
	uid_t uid;
	gid_t gid;
	int netns_fd; /* -1: stay in the current network namespace */
	const char *cgroup_parent;
	uint64_t cpu_quota_pct; /* 0: no quota */
	uint64_t cpu_weight;    /* cgroup v2 cpu.weight (v1: cpu.shares to match); 0: the default */
	uint64_t memory_mib;    /* 0: no limit */
	uint64_t pids_max;      /* 0: no limit */
	uint64_t rlimit_fsize;  /* JAIL_RLIMIT_UNSET: left as inherited */
	uint64_t rlimit_nofile;
	uint64_t rlimit_nproc;
	const char *binds[JAIL_MAX_BINDS];
	size_t n_binds;
	const char *devs[JAIL_MAX_DEVS];
	size_t n_devs;
	int keep_fds[JAIL_MAX_KEEP_FDS];
	size_t n_keep_fds;
	const char *seccomp_path; /* NULL: no filter */
	bool new_pid_ns;
	/* With --new-pid-ns: the file airlockd renews while it (or a restarted
	 * airlockd) may re-attach, outside the jail, root's; NULL: none. */
	const char *lease_path;
	uint64_t orphan_timeout_s; /* with lease_path: 1..JAIL_ORPHAN_TIMEOUT_S_MAX */
	const char *exit_file;     /* with --new-pid-ns: how the VMM ended, for a later airlockd */
	char **vmm_argv;           /* NULL-terminated; [0] is an absolute path */
};

/* ------------------------------------------------------------ jailer-args.c */

void jail_config_init(struct jail_config *cfg);
/* Parses and checks the command line (syntax and ranges only: nothing is
 * opened). */
int jail_args_parse(int argc, char **argv, struct jail_config *ret, struct al_error *err);
bool jail_id_valid(const char *id);
bool jail_dev_allowed(const char *path);
/* Absolute, canonical (no "", ".", ".." components, no trailing slash), no
 * control characters (every message quoting it stays on one line), < PATH_MAX. */
int jail_path_syntax_check(const char *path, struct al_error *err);
extern const char *const jail_dev_allow_list[];
void jail_usage(FILE *out);

/* ------------------------------------------------------------ jailer-path.c */

enum {
	JAIL_PATH_DIR = 1 << 0,          /* must be a directory */
	JAIL_PATH_REG = 1 << 1,          /* must be a regular file */
	JAIL_PATH_CHR = 1 << 2,          /* must be a character device */
	JAIL_PATH_OWNER = 1 << 3,        /* owned by root (or by alt_owner when not (uid_t)-1) */
	JAIL_PATH_NOT_WRITABLE = 1 << 4, /* no write bit for group or others */
	JAIL_PATH_NO_HARDLINK = 1 << 5,  /* a regular file must have st_nlink == 1 */
	JAIL_PATH_EXEC_OTHER = 1 << 6,   /* executable by an unrelated uid (S_IXOTH) */
};

/* Opens path with O_PATH, one component at a time from "/", never following a
 * symlink, and checks every directory on the way (owned by root, not writable
 * by group/others unless sticky) and the final object against flags. ret_fd
 * is O_PATH|O_CLOEXEC; ret_st its stat. */
int jail_path_open(const char *path, unsigned flags, uid_t alt_owner, int *ret_fd, struct stat *ret_st,
                   struct al_error *err);
/* True when path equals dir or lies below it (both canonical). */
bool jail_path_is_under(const char *path, const char *dir);

/* ------------------------------------------------------------ jailer-seccomp.c */

struct jail_seccomp_profile {
	bool kill_process; /* default action: kill_process, else errno (EPERM) */
	size_t n_syscalls;
	int *syscalls; /* allowed; resolved numbers for this architecture */
	size_t n_enosys;
	int *enosys; /* fail with ENOSYS, so the VMM takes its fallback */
};

/* Parses {"default_action": "errno"|"kill_process", "syscalls": [names],
 * optional "errno_syscalls": [names], optional "comment": "..."}; every name
 * must exist on this architecture and appear once in all. */
int jail_seccomp_parse(const char *text, size_t len, struct jail_seccomp_profile *ret, struct al_error *err);
void jail_seccomp_profile_release(struct jail_seccomp_profile *p);
/* Reads the profile through a validated O_PATH fd. */
int jail_seccomp_read(int path_fd, const char *path, struct jail_seccomp_profile *ret, struct al_error *err);
/* Compiles the filter now (all failures happen before anything is changed);
 * jail_seccomp_install loads it. The filter is opaque (libseccomp's ctx). */
int jail_seccomp_compile(const struct jail_seccomp_profile *p, void **ret_filter, struct al_error *err);
int jail_seccomp_install(void *filter, struct al_error *err);
void jail_seccomp_free(void *filter);
/* For --check: the kernel's filter mode and the actions it supports. */
void jail_seccomp_report(FILE *out, bool *ret_ok);

/* ------------------------------------------------------------ jailer-cgroup.c */

enum { JAIL_CG_CPU, JAIL_CG_MEMORY, JAIL_CG_PIDS, JAIL_CG__COUNT };
#define JAIL_CG_MOUNT_MAX 256

struct jail_cgroup_host {
	/* Per controller: 1 (v1 hierarchy), 2 (the cgroup2 mount), 0 (absent). */
	int version[JAIL_CG__COUNT];
	char mount[JAIL_CG__COUNT][JAIL_CG_MOUNT_MAX];
};

/* One directory <mount>/<parent>/<id> per distinct hierarchy. */
struct jail_cgroup_dir {
	int version;
	char mount[JAIL_CG_MOUNT_MAX];
	unsigned controllers; /* bit per JAIL_CG_* */
	int mount_fd;         /* the hierarchy's root (to move out again) */
	int parent_fd;        /* <mount>/<parent> */
	int dir_fd;           /* <mount>/<parent>/<id> */
	bool created;
};

struct jail_cgroup {
	char id[JAIL_ID_MAX + 1];
	size_t n_dirs;
	struct jail_cgroup_dir dirs[JAIL_CG__COUNT];
};

extern const char *const jail_cg_names[JAIL_CG__COUNT];
int jail_cgroup_detect(struct jail_cgroup_host *ret, struct al_error *err);
/* Creates the cgroup, writes its limits and moves the calling process in. On
 * failure everything it created is removed again. */
int jail_cgroup_enter(const struct jail_cgroup_host *host, const struct jail_config *cfg, struct jail_cgroup *ret,
                      struct al_error *err);
/* Moves the caller back to each hierarchy's root and removes what
 * jail_cgroup_enter created (the failure path; best effort). */
void jail_cgroup_abandon(struct jail_cgroup *cg);
void jail_cgroup_close(struct jail_cgroup *cg);
/* --cleanup: removes <mount>/<parent>/<id> everywhere; -EBUSY with a message
 * when processes are still in it. Missing directories are fine. */
int jail_cgroup_remove(const struct jail_cgroup_host *host, const char *parent, const char *id, struct al_error *err);

/* ------------------------------------------------------------ jailer-mount.c */

/* What step 1 opened and checked; later steps use these fds, never the
 * paths again, so nothing can be swapped in between (SECURITY). */
struct jail_validated {
	int root_fd;
	struct stat root_st;
	int bind_fds[JAIL_MAX_BINDS];
	struct stat bind_st[JAIL_MAX_BINDS];
	int vmm_fd;
	struct stat vmm_st;
	bool vmm_bind; /* no --bind-ro covers the VMM: bind it read-only at its own path */
	struct stat dev_st[JAIL_MAX_DEVS];
	void *seccomp;    /* compiled filter, or NULL */
	int lease_dir_fd; /* O_PATH: the directories of --lease and --exit-file, or -1 */
	int exit_dir_fd;
};

int jail_validate(const struct jail_config *cfg, struct jail_validated *ret, struct al_error *err);
void jail_validated_release(struct jail_validated *v);
/* Inside a fresh mount namespace: builds the jail from the validated fds and
 * pivot_roots into it (cwd "/" afterwards). */
int jail_mount_build(const struct jail_config *cfg, const struct jail_validated *v, struct al_error *err);

/* ------------------------------------------------------------ jailer-lease.c */

/* What the supervisor knows of the lease (docs/jailer.md, "Lease"). Its
 * renewals are told apart by the lease's mtime, and their age is measured on
 * the monotonic clock: a jump of the wall clock neither expires nor renews
 * it. */
struct jail_lease {
	int dir_fd;       /* O_PATH: the lease's directory */
	const char *name; /* the lease's name in it */
	const char *path; /* for messages */
	uint64_t timeout_ms;
	struct timespec mtime; /* the mtime last seen */
	uint64_t changed_ms;   /* when it was first seen (now_ms of the caller's clock) */
};

/* The last component of a canonical absolute path other than "/". */
const char *jail_path_base(const char *path);
/* Opens path's directory as jail_path_open does (root's, not writable by
 * group or others): O_PATH in *ret_fd. */
int jail_parent_open(const char *opt, const char *path, int *ret_fd, struct al_error *err);
/* How often the supervisor looks: a quarter of the timeout, 250 ms to 60 s. */
uint64_t jail_lease_period_ms(uint64_t timeout_s);
void jail_lease_start(struct jail_lease *l, int dir_fd, const char *path, uint64_t timeout_s, uint64_t now_ms);
/* 0 while the lease is renewed in time; -1 with why in buf once its
 * directory or the lease is gone, or its mtime has not changed for the
 * timeout. */
int jail_lease_check(struct jail_lease *l, uint64_t now_ms, char *buf, size_t size);
/* "status N" or "signal N" and a newline, in dir_fd/name (root's, 0600), in
 * place of an earlier one. Best effort. */
void jail_exit_record_write(int dir_fd, const char *name, int wait_status);

/* ------------------------------------------------------------ jailer-privs.c */

/* Step 2: only PATH in the environment, every fd >= 3 closed except
 * --netns-fd, --keep-fd and the validated fds, default signal handling. */
int jail_env_reset(const struct jail_config *cfg, const struct jail_validated *v, struct al_error *err);
int jail_rlimits_apply(const struct jail_config *cfg, struct al_error *err);
int jail_netns_join(const struct jail_config *cfg, struct al_error *err);
/* Step 7: no_new_privs, every capability set emptied, uid/gid switched,
 * and checked afterwards with capget. */
int jail_privileges_drop(const struct jail_config *cfg, struct al_error *err);
/* For --check. */
void jail_namespaces_report(FILE *out, bool *ret_ok);

#endif
