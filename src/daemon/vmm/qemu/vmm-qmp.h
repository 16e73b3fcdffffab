/* SPDX-License-Identifier: Apache-2.0 */
/* QEMU's monitor protocol (QMP), the QEMU backend's control channel: a small
 * client, one connection per command (QMP allows several clients one after
 * the other), bounded lines, a deadline on everything. Only the QEMU backend
 * (vmm-qemu.c) speaks it; the daemon talks to every VMM through vmm_ops. */
#ifndef AIRLOCK_VMM_QMP_H
#define AIRLOCK_VMM_QMP_H

#include <jansson.h>

#include "error.h"

/* QEMU's monitor socket in the VMM's directory (-qmp). */
#define QEMU_QMP_SOCK "qmp.sock"

/* Runs one QMP command on the VMM whose directory is dirfd; *ret gets its
 * "return" value (optional). On failure err says why: QEMU's own error text
 * (-EIO), or what failed on the way (the connect, the exchange). */
int qmp_command(int dirfd, const char *command, json_t *arguments, json_t **ret, struct al_error *err);
/* The same within timeout_ms in all (connect included: a VMM that does not
 * accept its socket any more is not waited for). */
int qmp_command_timeout(int dirfd, const char *command, json_t *arguments, json_t **ret, unsigned timeout_ms,
                        struct al_error *err);
/* Hands fd to QEMU as `fdname` (getfd, SCM_RIGHTS) and runs `command` with
 * `arguments` on the same connection (named fds belong to the monitor
 * connection that received them). */
int qmp_command_with_fd(int dirfd, int fd, const char *fdname, const char *command, json_t *arguments,
                        struct al_error *err);

#endif
