/* SPDX-License-Identifier: Apache-2.0 */
/* airlock-egress's syscall allow-list (issue 17): installed by the gateway
 * itself once its start-up is done, before it serves anything. */
#ifndef AIRLOCK_EGRESS_SECCOMP_H
#define AIRLOCK_EGRESS_SECCOMP_H

#include "error.h"

/* Installs the filter on the calling thread (and every thread it starts
 * later): what is not listed kills the whole process (SIGSYS). Needs
 * no_new_privs (airlockd sets it; set here again). */
int egress_seccomp_install(struct al_error *err);

/* --check-seccomp: installs the filter, then makes a syscall it does not
 * allow. Returns only if the kernel did not kill the process for it. */
void egress_seccomp_self_test(void);

#endif
