/* SPDX-License-Identifier: Apache-2.0 */
/* What the backends share (vmm/qemu, vmm/firecracker, and any other):
 * written once here, below them. The daemon's core does not use these; it
 * talks to a backend through struct vmm_ops (vmm.h) alone. */
#ifndef AIRLOCK_VMM_BACKEND_H
#define AIRLOCK_VMM_BACKEND_H

#include <stddef.h>
#include <sys/types.h>

#include "error.h"

struct vmm_config;

/* ---- starting a VMM (vmm-spawn.c) ---- */

/* The fds a jailed VMM starts with are at fixed numbers from this one up
 * (0-2 are its stdio). The jailer joins and closes the network namespace's
 * (VMM_FD_NETNS) and keeps the others it is told to (jail_argv). */
#define VMM_FD_FIRST 3
#define VMM_FD_NETNS VMM_FD_FIRST
/* The most fd numbers a VMM is started with (src[] of vmm_spawn_jailed). */
#define VMM_FDS_MAX 16

/* The absolute, canonical path of the VMM binary `name` (the jailer wants
 * one): the first on PATH. -ENOENT when there is none. */
int vmm_binary_path(const char *name, char *out, size_t size);

/* Opens the VMM's log (VMM_LOG in the sandbox directory dir) for appending:
 * the VMM's stderr, and what the daemon notes about its disk. Returns the fd,
 * or a negative errno with err saying which file (err may be NULL). */
int vmm_log_open(const char *dir, struct al_error *err);

/* Forks the jailer's command line jargv in its own session (the VMM
 * outlives a restart of the daemon and gets none of its signals), its cwd
 * the VMM's directory `root` (how a restarted daemon finds VMMs no record
 * owns), stdin /dev/null, stdout out_fd, stderr err_fd, and src[i] at fd
 * number i for VMM_FD_FIRST <= i < nfds (-1: none); nothing else. Does not
 * wait: *ret_pid is the jailer's pid. */
int vmm_spawn_jailed(const char *root, char *const jargv[], const int src[], int nfds, int out_fd, int err_fd,
                     pid_t *ret_pid, struct al_error *err);

/* The `stop` of a backend whose VMM is stopped by a signal: SIGKILL to its
 * process (the jailer's pid: the VMM dies with it). */
int vmm_stop_by_kill(const struct vmm_config *cfg, pid_t pid);

/* ---- unix sockets in the VMM's directory (vmm-sock.c) ---- */

/* Connects to the unix socket `name` in directory fd dirfd, whatever the
 * length of the directory's path. */
int unix_connect_at(int dirfd, const char *name, int *ret_fd);
/* The same without ever blocking: -EAGAIN when the listener's backlog is
 * full (its process is not accepting). The fd is non-blocking. */
int unix_connect_at_nonblock(int dirfd, const char *name, int *ret_fd);

/* ---- saves of backends that write files by name (vmm-save.c) ---- */

/* One save of the VMM, which writes it into its jail root under the names
 * it is given: `out` (the memory) and, with a state suffix, `out` + suffix
 * (the device state). */
typedef int (*vmm_save_fn)(const struct vmm_config *cfg, const char *out, struct al_error *err);

/* A save of a VMM that can only write files by name (it cannot be handed an
 * fd once running; Firecracker): save() writes them in its jail root
 * (cfg->dirfd), where they are the VMM's; they are copied to mem_dst and
 * (state_suffix not NULL) state_dst, checked and bounded (cfg->memory_mib),
 * and removed from the jail root. */
int vmm_save_by_name(const struct vmm_config *cfg, vmm_save_fn save, const char *state_suffix, const char *mem_dst,
                     const char *state_dst, struct al_error *err);

#endif
