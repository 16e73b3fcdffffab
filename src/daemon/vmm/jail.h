/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Every VMM runs inside airlock-jailer (docs/jailer.md): its own uid/gid,
 * cgroup, mount/pid/ipc/uts namespaces, no capabilities, a seccomp filter.
 * This module is the daemon's side of it: the host check at start, the
 * sandbox uids, the jailer's command line, and the cleanup after a VMM.
 *
 * SECURITY: fail closed. Without a working jailer the daemon does not
 * start; a VMM whose jail cannot be built never runs.
 */
#ifndef AIRLOCK_JAIL_H
#define AIRLOCK_JAIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "error.h"

struct jail_settings {
	const char *jailer;        /* absolute path of airlock-jailer */
	const char *seccomp;       /* absolute path of the VMM's syscall profile */
	const char *cgroup_parent; /* [a-z0-9][a-z0-9_-]{0,62} */
	uint32_t uid_base;         /* sandbox uids (= gids): [uid_base, uid_base + uid_count) */
	uint32_t uid_count;
	/* A VMM whose lease airlockd has not renewed for this long is stopped by
	 * its jailer (docs/jailer.md, "Lease"); 0: never. */
	unsigned orphan_timeout_s;
};

#define JAIL_DEFAULT_ORPHAN_TIMEOUT_S 3600u
#define JAIL_ORPHAN_TIMEOUT_S_MAX 2592000u /* 30 days, the jailer's bound */
/* In a sandbox's directory (root's, 0700; the jail root is its vm/, the
 * VMM's): the lease airlockd renews, the jailer's record of how the VMM
 * ended. */
#define JAIL_LEASE "lease"
#define JAIL_EXIT_RECORD "vmm-exit"

#define JAIL_DEFAULT_UID_BASE 1500000000u
#define JAIL_DEFAULT_UID_COUNT 65536u
#define JAIL_UID_COUNT_MAX 1048576u
#define JAIL_DEFAULT_CGROUP_PARENT "airlock"

/* Checks the settings and runs `airlock-jailer --check` (its findings are
 * logged); fails when the host cannot jail a VMM. Keeps copies. */
int jail_init(const struct jail_settings *s, struct al_error *err);
void jail_shutdown(void);

/* --orphan-timeout-s (0: off). */
unsigned jail_orphan_timeout_s(void);
/* How often airlockd renews the leases of VMs whose shortest timeout is
 * timeout_s: a quarter of it, from 250 ms to 60 s (the jailer looks as
 * often); 60 s for 0. */
unsigned jail_lease_period_ms(unsigned timeout_s);
/* The --orphan-timeout-s of a running jailer (its command line): 0 for
 * none, or when pid is not a jailer's. */
unsigned jail_orphan_timeout_of(pid_t pid);
/* Makes (create) or renews the lease in dir: its mtime is now. 0, or -errno
 * (-ENOENT: there is none to renew). */
int jail_lease_touch(const char *dir, bool create);

/* A free sandbox uid (the gid is the same number). */
int jail_uid_take(uint32_t *ret, struct al_error *err);
/* Marks uid as used by a VMM found running at start; -EEXIST when it is
 * already taken, -ERANGE outside the range. */
int jail_uid_reserve(uint32_t uid);
/* Marks every uid of the range that a process runs as now as used (a check
 * beside a running airlockd must not lend its uids to a probe). */
void jail_uid_reserve_running(void);
/* Gives a uid back (0: nothing). */
void jail_uid_put(uint32_t uid);

/* What one VMM's jail is given. */
struct vmm_jail {
	uint32_t uid;              /* = gid */
	uint64_t memory_limit_mib; /* cgroup memory incl. swap */
	unsigned cpu_quota_pct;    /* of one CPU */
	unsigned cpu_weight;       /* its cgroup's cpu.weight; 0: the default (100) */
	unsigned pids_max;
	uint64_t fsize_bytes; /* largest file the VMM may write */
	unsigned nofile;
	bool kvm; /* /dev/kvm in the jail */
	bool tun; /* /dev/net/tun in the jail */
	/* The VMM installs its own seccomp filters before it runs guest code
	 * (Firecracker: its built-in filters are its production profile):
	 * the jailer adds none. false: the jailer's --seccomp profile (QEMU). */
	bool own_seccomp;
	/* The sandbox's directory: the jailer's supervisor watches its
	 * JAIL_LEASE and writes JAIL_EXIT_RECORD there. NULL: neither (the
	 * daemon's own boots, which die with it). */
	const char *sandbox_dir;
};

/* VMM overhead on top of guest memory in its cgroup's limit: QEMU itself,
 * TCG's translation cache (vmm-qemu.c), the page cache of its disk and
 * snapshot writes. */
#define JAIL_VMM_OVERHEAD_MIB 384
/* Tasks in the jail: QEMU's threads (main, RCU, vCPUs, I/O workers up to
 * 64) and the supervising jailer. */
#define JAIL_PIDS_MAX 128
#define JAIL_NOFILE 4096

/* The jail of a VMM with these resources (disk_mib: the largest disk it
 * writes). */
void jail_spec(struct vmm_jail *j, uint32_t uid, unsigned vcpus, unsigned memory_mib, uint64_t disk_mib, bool kvm);

/* The jailer's argv around vmm_argv (vmm_argv[0] must be absolute): the
 * jail root `root`, the network namespace at fd netns_fd (-1: none), the fds
 * keep[] passed through. Returns a NULL-terminated vector whose strings live
 * in *ret_arena (free both with free()). */
char **jail_argv(const char *id, const char *root, const struct vmm_jail *j, int netns_fd, const int *keep,
                 size_t nkeep, char *const vmm_argv[], char **ret_arena);

/* Removes the cgroup of sandbox id (after its VMM is gone): kills what is
 * left in it first, retries a short while; 0 also when there was none. */
int jail_cleanup(const char *id, struct al_error *err);
/* A warm pool's VMs are filled at a low CPU weight and given the default
 * when a create takes one: its cgroup's cpu.weight (v1: cpu.shares to
 * match) is set to weight. */
#define JAIL_CPU_WEIGHT_POOL 1
#define JAIL_CPU_WEIGHT_DEFAULT 100
int jail_cpu_weight_set(const char *id, unsigned weight, struct al_error *err);

/* Calls fn(pid, cwd, ctx) for every process (but init) whose working
 * directory is below dir/ (a jailer runs in its jail's directory): how the
 * VMMs a previous airlockd left are found. fn may write into cwd. */
void jail_each_process_below(const char *dir, void (*fn)(long pid, char *cwd, void *ctx), void *ctx);
/* Kills every jailer below dir/ whose --id starts with id_prefix (the VMMs
 * of a daemon-internal boot a crashed airlockd left: template builds, the
 * accelerator probe) and removes its cgroup; `what` names them in the log. */
void jail_kill_left_below(const char *dir, const char *id_prefix, const char *what);
/* The jailer's refusal in a VMM log (its line "airlock-jailer: STEP: ..."),
 * if there is one: true and the line in buf. */
bool jail_failure_in_log(int log_dirfd, const char *log_name, char *buf, size_t size);

#endif
